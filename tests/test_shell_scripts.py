"""Bad input to the shell scripts (scripts/gpu_check.sh, scripts/in_cgroup.sh, scripts/experiments.sh):
one line on stderr naming the culprit and exit 2, before any work starts (README, Errors); and
gpu_check.sh exits 1 when a stage that ran failed. No test here does real work, even against a
broken script: the Python the scripts start is a stand-in that fails at once (tests/test_bench.py
holds the other tests of gpu_check.sh and experiments.sh, test_runtime.py a real in_cgroup.sh run)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

STAGES = ["tests", "baby", "fp32", "tf32_bf16", "compile", "decode", "ddp", "decode_compiled"]


def run_script(name: str, *args: str, env: dict | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def refused(r: subprocess.CompletedProcess, *names: str) -> bool:
    """Exit 2 with one line on stderr, naming each of `names`, and nothing on stdout."""
    return (r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.endswith("\n")
            and all(n in r.stderr for n in names) and r.stdout == "")


def fake_python(folder: Path, stage_seconds: float = 0) -> Path:
    """A stand-in for gpu_check.sh's PYTHON: any `-c` check passes (torch imports, a GPU is there),
    the table (scripts.gpu_table) is the real one, every stage fails (exit 3); the first stage
    (pytest) takes `stage_seconds` first."""
    path = folder / "python"
    path.write_text(f"""#!/bin/sh
case "$1 $2" in
  "-c "*) exit 0 ;;
  "-m scripts.gpu_table") exec {sys.executable} "$@" ;;
  "-m pytest") sleep {stage_seconds} ;;
esac
echo "a stand-in for python: this stage fails"
exit 3
""")
    path.chmod(0o755)
    return path


@pytest.fixture
def gpu_check(tmp_path):
    """Run gpu_check.sh rehearsed, with the stand-in Python, tiny shakespeare, and OUT holding an
    earlier check's status; `env` overrides. Returns (run, OUT)."""
    text = tmp_path / "shakespeare.txt"
    text.write_text("To be, or not to be\n" * 50)
    out = tmp_path / "gc"
    out.mkdir()
    (out / "status").write_text("an earlier check's")
    base = {"OUT": str(out), "REHEARSE": "1", "BUDGET": "60", "SHAKESPEARE": str(text),
            "PYTHON": str(fake_python(tmp_path))}
    return (lambda **env: run_script("gpu_check.sh", env={**base, **env})), out


@pytest.mark.parametrize("env, names", [
    ({"BUDGET": "0"}, ["BUDGET=0"]),
    ({"BUDGET": "-5"}, ["BUDGET=-5"]),
    ({"BUDGET": "1.5"}, ["BUDGET=1.5"]),
    ({"BUDGET": "9223372036854775808"}, ["BUDGET=9223372036854775808"]),  # wraps in bash arithmetic
    ({"BUDGET": "86401"}, ["BUDGET=86401"]),
    ({"REHEARSE": "yes"}, ["REHEARSE=yes"]),  # read as 'not a rehearsal'
    ({"REHEARSE": "2"}, ["REHEARSE=2"]),
    ({"PYTHON": "/nonexistent"}, ["PYTHON=/nonexistent"]),  # every stage exit 127, the check exit 0
    ({"PYTHON": "/nonexistent", "REHEARSE": "0"}, ["PYTHON=/nonexistent"]),  # blamed on CUDA
    ({"PYTHON": "/bin/false"}, ["PYTHON=/bin/false", "torch"]),  # runs, but holds no torch
    ({"SHAKESPEARE": "/nonexistent/tinyshakespeare.txt"}, ["SHAKESPEARE", "/nonexistent/tinyshakespeare.txt"]),
])
def test_gpu_check_refuses_bad_settings_before_any_work(gpu_check, env, names):
    run, out = gpu_check
    r = run(**env)
    assert refused(r, *names) and r.stderr.startswith("error: "), (r.returncode, r.stderr, r.stdout[-300:])
    assert [p.name for p in out.iterdir()] == ["status"] and (out / "status").read_text() == "an earlier check's"


@pytest.mark.parametrize("where", ["file", "file/below"])
def test_gpu_check_refuses_an_out_it_cannot_make(gpu_check, tmp_path, where):
    """OUT a file (or a folder under one): mkdir's error, then 9 more and a table of 'did not run',
    exit 0."""
    run, _ = gpu_check
    (tmp_path / "file").write_text("mine")
    r = run(OUT=str(tmp_path / where))
    assert refused(r, f"OUT={tmp_path / where}"), (r.returncode, r.stderr, r.stdout[-300:])
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.parametrize("budget, failed", [("60", STAGES), ("16", ["tests"])])
def test_gpu_check_exits_1_when_a_stage_failed(gpu_check, tmp_path, budget, failed):
    """It exited 0 whatever failed. Now the table still prints, then one line names the stages that
    failed and the exit is 1; a stage skipped for lack of budget is no failure (BUDGET=16: the first
    stage fails after 2 s, the budget left no longer fits the others)."""
    run, out = gpu_check
    r = run(BUDGET=budget, PYTHON=str(fake_python(tmp_path, stage_seconds=2 if budget == "16" else 0)))
    assert r.returncode == 1, (r.returncode, r.stderr, r.stdout[-500:])
    assert "| check | result |" in r.stdout
    last = r.stderr.splitlines()[-1]  # error: N stage(s) failed: NAME ... (each one's output: OUT/STAGE.txt)
    assert last.startswith(f"error: {len(failed)} stage") and str(out) in last, last
    assert last.split(" failed: ")[1].split(" (")[0].split() == failed, last
    status = dict(line.split("=", 1) for line in (out / "status").read_text().splitlines())
    assert [s for s in STAGES if status[s] == "exit 3"] == failed
    assert all(status[s].startswith("skipped") for s in STAGES if s not in failed)


CGROUP_MARK = "ran under the limits"


@pytest.mark.parametrize("cpus, memory_mb, name", [
    ("0.009", "0", "CPUS=0.009"),  # a quota under the kernel's 1 ms: 'cannot set .../cpu.cfs_quota_us', exit 77
    ("100000", "0", "CPUS=100000"),  # more cores than the machine has
    ("abc", "0", "CPUS=abc"),
    ("-1", "0", "CPUS=-1"),
    ("0", "99999999999999", "MEMORY_MB=99999999999999"),  # wrapped in bash arithmetic; exit 77
    ("0", "5", "MEMORY_MB=5"),  # under docker's minimum of 6 MB
    ("0", "1.5", "MEMORY_MB=1.5"),
    ("0", "", "MEMORY_MB="),
])
def test_in_cgroup_refuses_limits_it_cannot_set(tmp_path, cpus, memory_mb, name):
    marker = tmp_path / "ran"
    r = run_script("in_cgroup.sh", cpus, memory_mb, "touch", str(marker))
    assert refused(r, name) and r.stderr.startswith("error: "), (r.returncode, r.stderr)
    assert not marker.exists()


@pytest.mark.parametrize("cpus, memory_mb", [("0", "00"), ("0.0", "0"), ("00.000", "000")])
def test_in_cgroup_reads_any_zero_as_no_limit(cpus, memory_mb):
    """MEMORY_MB=00 passed a string test against 0 and set a 0-byte limit (the command killed, bash
    dumping the subshell's source); CPUS=0.0 was 'cannot set .../cpu.cfs_quota_us' (exit 77)."""
    r = run_script("in_cgroup.sh", cpus, memory_mb, "echo", CGROUP_MARK)
    assert (r.returncode, r.stdout, r.stderr) == (0, CGROUP_MARK + "\n", "")


@pytest.mark.skipif(os.cpu_count() < 2, reason="needs 2 cores")
def test_in_cgroup_counts_the_machines_cores_whatever_omp_num_threads_says():
    """GNU nproc obeys OMP_NUM_THREADS: with it at 1 (as these tests and many users set it), a quota
    of 2 cores on a 2-core machine was refused as more than the machine has."""
    r = run_script("in_cgroup.sh", "2", "0", "echo", CGROUP_MARK)  # (run_script sets OMP_NUM_THREADS=1)
    if r.returncode == 77:
        pytest.skip(f"cannot make a cgroup here: {r.stderr.strip()}")
    assert (r.returncode, r.stdout) == (0, CGROUP_MARK + "\n"), r.stderr


def test_in_cgroup_reports_a_kill_in_one_line():
    """A command the kernel kills (here: over its memory limit) ended in bash's `Killed` and the
    subshell's source, 4 lines; now one line names the signal and MEMORY_MB, exit 137 kept. Needs
    root and cgroups (skips elsewhere, and where the limit swaps instead of killing)."""
    grab = "b = bytearray(400 * 2 ** 20)"  # zeroed, so every page is touched
    r = run_script("in_cgroup.sh", "0", "64", sys.executable, "-c", grab)
    if r.returncode == 77:
        pytest.skip(f"cannot make a cgroup here: {r.stderr.strip()}")
    if r.returncode == 0:
        pytest.skip("the memory limit swapped instead of killing")
    assert r.returncode == 137 and r.stderr.count("\n") == 1 and "MEMORY_MB=64" in r.stderr, r.stderr


@pytest.fixture
def experiments(tmp_path):
    """Run experiments.sh with a `python` on PATH that only leaves a mark (no work, whatever the
    script does), tiny shakespeare missing and OUT under tmp_path. Returns (run, OUT, mark)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "python_ran"
    (bin_dir / "python").write_text(f"#!/bin/sh\ntouch {mark}\nexit 3\n")
    (bin_dir / "python").chmod(0o755)
    out = tmp_path / "ex"
    env = {"OUT": str(out), "SHAKESPEARE": str(tmp_path / "missing.txt"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return (lambda *args, **more: run_script("experiments.sh", *args, env={**env, **more})), out, mark


@pytest.mark.parametrize("part", ["", "default foundation", " bench", "all speedrun"])
def test_experiments_takes_exactly_one_part(experiments, part):
    """'' ran `all` (hours, with the data there); 'default foundation' passed as a piece of the
    parts list, made OUT, ran nothing, exit 0."""
    run, out, mark = experiments
    r = run(part)
    assert refused(r, repr(part)) and r.stderr.startswith("usage: bash scripts/experiments.sh [all | "), r.stderr
    assert not out.exists() and not mark.exists()


def test_experiments_refuses_an_out_it_cannot_make(experiments, tmp_path):
    """mkdir's own message and exit 1 (set -e)."""
    run, _, mark = experiments
    (tmp_path / "file").write_text("mine")
    r = run("jobs", OUT=str(tmp_path / "file"))
    assert refused(r, f"OUT={tmp_path / 'file'}") and r.stderr.startswith("error: "), r.stderr
    assert not mark.exists() and (tmp_path / "file").read_text() == "mine"

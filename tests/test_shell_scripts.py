"""Bad input to the shell scripts (scripts/gpu_check.sh, scripts/in_cgroup.sh, scripts/experiments.sh):
one line on stderr naming the culprit and exit 2, before any work starts (README, Errors); and
gpu_check.sh exits 1 when a stage that ran failed. A user's files in gpu_check.sh's OUT are never
deleted; Ctrl-C, SIGTERM and SIGHUP stop gpu_check.sh and in_cgroup.sh with nothing left running;
relative paths are read from the folder the scripts are run from. No test here does real work, even
against a broken script: the Python the scripts start is a stand-in that fails at once or sleeps
(tests/test_bench.py holds the other tests of gpu_check.sh and experiments.sh, test_runtime.py a real
in_cgroup.sh run)."""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT

STAGES = ["tests", "baby", "fp32", "tf32_bf16", "compile", "decode", "ddp", "decode_compiled"]


def run_script(name: str, *args: str, env: dict | None = None, timeout: int = 60,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd=cwd)


def refused(r: subprocess.CompletedProcess, *names: str) -> bool:
    """Exit 2 with one line on stderr, naming each of `names`, and nothing on stdout."""
    return (r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.endswith("\n")
            and all(n in r.stderr for n in names) and r.stdout == "")


def fake_python(folder: Path, stage_seconds: float = 0, pytest_says: str = "") -> Path:
    """A stand-in for gpu_check.sh's PYTHON: any `-c` check passes (torch imports, a GPU is there),
    the table (scripts.gpu_table) is the real one, every stage fails (exit 3); the first stage
    (pytest) takes `stage_seconds` first, and where `pytest_says` a summary line, prints it and passes."""
    path = folder / "python"
    passes = f'printf "%s\\n" {shlex.quote(pytest_says)}; exit 0' if pytest_says else ":"
    path.write_text(f"""#!/bin/sh
case "$1 $2" in
  "-c "*) exit 0 ;;
  "-m scripts.gpu_table") exec {sys.executable} "$@" ;;
  "-m pytest") sleep {stage_seconds}; {passes} ;;
esac
echo "a stand-in for python: this stage fails"
exit 3
""")
    path.chmod(0o755)
    return path


@pytest.fixture
def gpu_check(tmp_path):
    """Run gpu_check.sh rehearsed, with the stand-in Python, tiny shakespeare, and OUT holding an
    earlier check's status; `env` overrides (and `cwd`, the folder it is run from). Returns (run, OUT)."""
    text = tmp_path / "shakespeare.txt"
    text.write_text("To be, or not to be\n" * 50)
    out = tmp_path / "gc"
    out.mkdir()
    (out / "status").write_text("an earlier check's")
    base = {"OUT": str(out), "REHEARSE": "1", "BUDGET": "60", "SHAKESPEARE": str(text),
            "PYTHON": str(fake_python(tmp_path))}
    return (lambda cwd=None, **env: run_script("gpu_check.sh", env={**base, **env}, cwd=cwd)), out


def test_gpu_check_refuses_a_budget_its_checks_leave_too_little_of(gpu_check, tmp_path):
    """BUDGET=15 passed the range check, then torch's import took 4 s of it: every stage skipped, `the 15 s
    budget was spent` after 4 s, exit 0. What the checks leave is checked before OUT is touched."""
    run, out = gpu_check
    slow = tmp_path / "slow_python"  # (its checks take 2 s, as torch's import does)
    slow.write_text("#!/bin/sh\n[ \"$1\" = -c ] && sleep 2\nexit 0\n")
    slow.chmod(0o755)
    r = run(BUDGET="16", PYTHON=str(slow))
    assert refused(r, "BUDGET=16 leaves", "a stage needs 15 s to start"), (r.returncode, r.stderr, r.stdout[-300:])
    assert [p.name for p in out.iterdir()] == ["status"] and (out / "status").read_text() == "an earlier check's"


@pytest.mark.parametrize("env, names", [
    ({"BUDGET": "0"}, ["BUDGET=0"]),
    ({"BUDGET": "-5"}, ["BUDGET=-5"]),
    ({"BUDGET": "1.5"}, ["BUDGET=1.5"]),
    ({"BUDGET": "9223372036854775808"}, ["BUDGET=9223372036854775808"]),  # wraps in bash arithmetic
    ({"BUDGET": "86401"}, ["BUDGET=86401"]),
    ({"BUDGET": "14"}, ["BUDGET=14", "15 to 86400"]),  # no stage can start: every one skipped, exit 0
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


def test_gpu_check_without_transformers_is_refused_before_any_work(gpu_check, tmp_path):
    """Stages 4 and 6 compare decoding with transformers' generate: installed from requirements.txt alone,
    both failed after minutes, and the KV-cache figures with them."""
    run, out = gpu_check
    python = tmp_path / "torch_only"
    python.write_text('#!/bin/sh\ncase "$2" in\n  "import torch"*) exit 0 ;;\nesac\nexit 1\n')
    python.chmod(0o755)
    r = run(PYTHON=str(python))
    assert refused(r, f"PYTHON={python}", "transformers", "requirements-dev.txt"), (r.returncode, r.stderr)
    assert [p.name for p in out.iterdir()] == ["status"]


@pytest.mark.parametrize("where", ["file", "file/below"])
def test_gpu_check_refuses_an_out_it_cannot_make(gpu_check, tmp_path, where):
    """OUT a file (or a folder under one): mkdir's error, then 9 more and a table of 'did not run',
    exit 0."""
    run, _ = gpu_check
    (tmp_path / "file").write_text("mine")
    r = run(OUT=str(tmp_path / where))
    assert refused(r, f"OUT={tmp_path / where}"), (r.returncode, r.stderr, r.stdout[-300:])
    assert (tmp_path / "file").read_text() == "mine"


@pytest.mark.slow
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


# what gpu_check.sh writes in its OUT, all it may delete there (and a JSON's temp file and lock, a killed
# bench.py's: the lock was refused as the user's, and the next check in that OUT with it)
EARLIER_CHECK = ["status", *(f"{s}.txt" for s in STAGES), "fp32.json", "tf32_bf16.json", "compile.json",
                 "decode.json", "decode_compiled.json", "baby/", "ddp/", ".decode.json.4242.x1y2z3.tmp",
                 ".decode.json.lock"]


@pytest.mark.parametrize("theirs", [
    ["thesis.txt", "settings.json"],  # the *.txt and *.json of OUT=. (requirements.txt) or OUT=~
    ["baby/photo.jpg"],  # a run's folder holding what train.py does not write
    ["notes/"],
    ["tests.txt/"],  # a folder of the name of a file the check writes
    ["baby"],  # a file of the name of a folder the check writes
    [".bashrc"],
])
def test_gpu_check_refuses_an_out_that_holds_what_it_does_not_write(gpu_check, theirs):
    """`rm -rf OUT/*.txt OUT/*.json OUT/baby OUT/ddp`, whatever OUT held: OUT=~ lost every .txt and
    .json in the home folder. Now an OUT holding anything the check does not write is refused in one
    line naming it, exit 2, before any stage, and nothing in it is touched."""
    run, out = gpu_check
    for name in ["decode.txt", "fp32.json", *theirs]:  # an earlier check's files beside the user's
        (out / name.rstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        if name.endswith("/"):
            (out / name).mkdir()
        else:
            (out / name).write_text(f"the user's {name}")
    before = sorted((str(p.relative_to(out)), p.is_dir() or p.read_text()) for p in out.rglob("*"))
    r = run()
    top = {name.split("/")[0] for name in theirs}
    assert refused(r, f"OUT={out}", *top) and r.stderr.startswith("error: "), (r.returncode, r.stderr, r.stdout[-300:])
    assert sorted((str(p.relative_to(out)), p.is_dir() or p.read_text()) for p in out.rglob("*")) == before


@pytest.mark.slow
def test_gpu_check_clears_an_earlier_checks_output(gpu_check):
    """What the check writes is all it takes an OUT to hold (its runs' folders, whatever is in them,
    and a JSON half-written by a killed bench.py included), and it is cleared, never passed off as
    this check's (every stage fails at once, with the stand-in Python)."""
    run, out = gpu_check
    for name in EARLIER_CHECK:
        if name.endswith("/"):  # a run, killed while it saved a checkpoint
            (out / name).mkdir()
            for file in ["config.yaml", "best.pt", "metrics.csv", ".lock", ".ckpt.pt.4242.abc_12.tmp"]:
                (out / name / file).write_text("an earlier run's")
        else:
            (out / name).write_text("an earlier check's")
    r = run(BUDGET="60")  # (15 left a stage that started a second late skipped: a busy machine's flake)
    assert r.returncode == 1, (r.returncode, r.stderr, r.stdout[-300:])
    # (the decode stage's JSON temp file: bench.py's to sweep, and the stand-in ran no bench.py)
    assert sorted(p.name for p in out.iterdir()) == sorted([".decode.json.4242.x1y2z3.tmp", "status",
                                                            *(f"{s}.txt" for s in STAGES)])
    assert all("an earlier" not in p.read_text() for p in out.iterdir() if p.suffix == ".txt")
    assert (out / "status").read_text().splitlines() == [f"{s}=exit 3" for s in STAGES]


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock(1) holds the lock (Linux)")
@pytest.mark.parametrize("script", ["gpu_check.sh", "experiments.sh"])
def test_a_second_run_in_the_same_out_is_refused(gpu_check, experiments, script):
    """Two gpu_check.sh in one OUT: the second one's clearing deleted the first one's files as it wrote
    them, and both wrote one status file; two experiments.sh: the second one's refused part removed the
    first one's log as it was written. The second is now refused, one line, touching nothing."""
    import fcntl
    run, out = gpu_check if script == "gpu_check.sh" else experiments[:2]
    out.mkdir(exist_ok=True)
    (out / "status").write_text("an earlier check's")
    fd = os.open(out, os.O_RDONLY)  # a first run holds the folder
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = run() if script == "gpu_check.sh" else run("jobs")
        assert refused(r, f"OUT={out} is in use by another"), (r.returncode, r.stderr, r.stdout[-300:])
        assert [p.name for p in out.iterdir()] == ["status"] and (out / "status").read_text() == "an earlier check's"
    finally:
        os.close(fd)
    if script == "experiments.sh":  # the lock gone with its holder: the part runs (its stand-in python exits 3)
        assert run("jobs").returncode == 3 and experiments[2].exists()


MARK = "TINYGPT_SHELL_TEST"  # an environment variable that only the processes a test starts carry


def marked(mark: str) -> list[int]:
    """The pids of the live processes whose environment holds MARK=mark."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"{MARK}={mark}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:  # ended meanwhile, or a zombie's
            pass
    return pids


def command_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def stop_and_collect(proc: subprocess.Popen, mark: str, signum: int, to_group: bool, ready) -> tuple[str, list[str]]:
    """Once a process carrying `mark` is `ready(pid)`, send `signum` to `proc` (a script started in a
    session of its own), or to its whole process group (the terminal's Ctrl-C); then wait for it to
    end (15 s at most). Returns its stderr and the processes still carrying `mark` once it has ended,
    as 'PID: COMMAND' (none, after a script that stops all it started). Whatever happens, every
    process carrying `mark` is killed after (a broken script leaves its command running)."""
    try:
        deadline = time.monotonic() + 20
        while not any(ready(pid) for pid in marked(mark) if pid != proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        (os.killpg if to_group else os.kill)(proc.pid, signum)
        try:
            _, stderr = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 15 s after {signal.Signals(signum).name}")
        return stderr, [f"{pid}: {' '.join(command_of(pid))}" for pid in marked(mark)]
    finally:
        for pid in [proc.pid, *marked(mark)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.communicate()


def test_a_silenced_read_of_a_file_that_may_vanish_is_silent():
    # group_alive reads /proc/PID/stat of processes that may end meanwhile; `read < F 2> /dev/null`
    # printed "F: No such file or directory" all the same (the < fails before the 2> applies),
    # into the signal test's expected "interrupted" once in a while
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        for n, line in enumerate(script.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if "2> /dev/null" in code and "< " in code:
                assert code.index("2> /dev/null") < code.index("< "), f"{script.name}:{n}: {line.strip()}"
    result = subprocess.run(["bash", "-c", 'read -r line 2> /dev/null < /proc/0/no-such-file || echo gone'],
                            capture_output=True, text=True)
    assert (result.stdout, result.stderr) == ("gone\n", "")


@pytest.mark.parametrize("signum, to_group", [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGHUP, False)])
def test_gpu_check_stops_the_running_stage_on_a_signal(tmp_path, signum, to_group):
    """Each stage ran under `timeout` in a process group of its own, in the foreground: Ctrl-C
    never reached it, and bash, seeing it end normally, went on to the next stage; a SIGTERM to the
    script ended bash alone, the stage (here, the tests, sleeping) running on. Now the stage is
    stopped, all of it, marked `interrupted` in status, and the script prints the one line
    `interrupted`, 128 + the signal's number, no stage after it run."""
    text = tmp_path / "shakespeare.txt"
    text.write_text("To be, or not to be\n" * 50)
    out, mark = tmp_path / "gc", uuid.uuid4().hex
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(out), "REHEARSE": "1", "BUDGET": "60",
           "SHAKESPEARE": str(text), "PYTHON": str(fake_python(tmp_path, stage_seconds=60)), MARK: mark}
    proc = subprocess.Popen(["bash", str(ROOT / "scripts/gpu_check.sh")], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    stderr, left = stop_and_collect(proc, mark, signum, to_group, ready=lambda pid: command_of(pid)[:1] == ["sleep"])
    assert (proc.returncode, stderr) == (128 + signum, "interrupted\n"), (proc.returncode, stderr)
    assert left == []
    assert (out / "status").read_text() == "tests=interrupted\n"


@pytest.mark.slow
def test_gpu_check_reads_relative_paths_from_where_it_is_run(gpu_check, tmp_path):
    """It went to the repository root first: `cd data && SHAKESPEARE=tinyshakespeare.txt bash
    .../gpu_check.sh` said `no tiny shakespeare at tinyshakespeare.txt`, and a relative OUT was made
    in the checkout. Both are now paths from the folder it is run from."""
    run, _ = gpu_check
    r = run(cwd=tmp_path, SHAKESPEARE="shakespeare.txt", OUT="gc", BUDGET="60")  # (the stand-in's stages: instant)
    assert r.returncode == 1, (r.returncode, r.stderr, r.stdout[-300:])  # (the stand-in's stages fail)
    assert "tests=exit 3" in (tmp_path / "gc/status").read_text()


def test_gpu_check_reports_tests_that_all_skipped(tmp_path):
    """A test stage whose tests all skipped (`7 skipped in 14.94s`) showed only `exit 0` in the table: the
    summary was looked for as passed, failed or error."""
    text = tmp_path / "shakespeare.txt"
    text.write_text("To be, or not to be\n" * 50)
    out = tmp_path / "gc"
    run_script("gpu_check.sh", env={"OUT": str(out), "REHEARSE": "1", "BUDGET": "60", "SHAKESPEARE": str(text),
                                    "PYTHON": str(fake_python(tmp_path, pytest_says="7 skipped in 14.94s"))})
    assert "tests=7 skipped in 14.94s\n" in (out / "status").read_text()


@pytest.fixture
def repo_litter():
    """A unique folder name, and the removal of the folder of that name in the checkout, where an
    old script, reading a relative OUT from the repository root, made it."""
    name = f"out-of-a-test-{uuid.uuid4().hex[:8]}"
    yield name
    if (ROOT / name).is_dir():
        import shutil
        shutil.rmtree(ROOT / name)


@pytest.mark.parametrize("script, args", [("gpu_check.sh", []), ("experiments.sh", ["jobs"])])
def test_a_relative_out_is_made_where_the_script_is_run(gpu_check, experiments, tmp_path, repo_litter, script, args):
    """OUT=results, run from a folder of one's own, made (gpu_check.sh: and cleared) results/ in the checkout."""
    run = gpu_check[0] if script == "gpu_check.sh" else experiments[0]
    cwd = tmp_path / "here"
    cwd.mkdir()
    r = run(*args, cwd=cwd, OUT=repo_litter, BUDGET="60")
    assert (cwd / repo_litter).is_dir() and not (ROOT / repo_litter).exists(), (r.returncode, r.stderr)


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


def own_cgroup(controller: str) -> Path:
    """This process's cgroup folder in `controller`'s v1 hierarchy (where in_cgroup.sh nests its own)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return Path("/sys/fs/cgroup") / controller / path.lstrip("/")
    return Path("/sys/fs/cgroup") / controller


def test_in_cgroup_nests_its_cgroup_inside_the_callers():
    """The cgroup was made at the hierarchy's root: a MEMORY_MB above a limit around the caller (a container's)
    lifted that limit, and a command allocated 500 MB under an outer 300 MB. It is now made inside the caller's
    own cgroup (cgroup v1; v2 makes it under the root, as documented)."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.skip("cgroup v2: in_cgroup.sh makes its group under the root there")
    r = run_script("in_cgroup.sh", "1", "64", "cat", "/proc/self/cgroup")
    if r.returncode == 77:
        pytest.skip(f"cannot make a cgroup here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    inside = {controllers: path for _, controllers, path in (line.split(":", 2) for line in r.stdout.splitlines())}
    for controller in ("cpu", "memory"):
        path = next(p for c, p in inside.items() if controller in c.split(","))
        assert Path("/sys/fs/cgroup", controller, path.lstrip("/")).parent == own_cgroup(controller), (controller, path)
        assert Path(path).name.startswith("tinygpt-limits-")


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


# a command as tinygpt's stop: the one line `interrupted` and 128 + the signal's number, a signal it
# inherited ignored staying ignored; it marks READY once it can be stopped
STOPPABLE = """import signal, sys, time
def stop(signum, frame):
    print("interrupted", file=sys.stderr)
    sys.exit(128 + signum)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(s) is not signal.SIG_IGN:
        signal.signal(s, stop)
open(sys.argv[1], "w").close()
time.sleep(60)
"""


@pytest.mark.parametrize("signum, to_group", [(signal.SIGTERM, False), (signal.SIGHUP, True), (signal.SIGINT, True)])
def test_in_cgroup_stops_the_command_and_removes_the_cgroup_on_a_signal(tmp_path, signum, to_group):
    """A SIGTERM to the script (`kill PID`) ended bash alone: the command ran on, reparented to init,
    in the cgroup, which stayed behind; a hang-up (to the terminal's process group) ended both, the
    cgroup left behind as bash's cleanup ran before the command had gone. Now a SIGTERM is passed on
    to the command, and bash waits for it to end before removing the cgroup; the exit code and the
    one line `interrupted` are the command's. (Ctrl-C worked, and still does. Needs root and cgroups.)"""
    if (r := run_script("in_cgroup.sh", "1", "0", "true")).returncode == 77:
        pytest.skip(f"cannot make a cgroup here: {r.stderr.strip()}")
    mark, ready = uuid.uuid4().hex, tmp_path / "ready"
    (tmp_path / "command.py").write_text(STOPPABLE)
    proc = subprocess.Popen(["bash", str(ROOT / "scripts/in_cgroup.sh"), "1", "0", sys.executable,
                             str(tmp_path / "command.py"), str(ready)], text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", MARK: mark})
    cgroups = [own_cgroup("cpu") / f"tinygpt-limits-{proc.pid}", Path("/sys/fs/cgroup") / f"tinygpt-limits-{proc.pid}"]
    try:
        stderr, left = stop_and_collect(proc, mark, signum, to_group, ready=lambda pid: ready.exists())
        assert (proc.returncode, stderr) == (128 + signum, "interrupted\n"), (proc.returncode, stderr)
        assert left == [] and not any(c.exists() for c in cgroups)
    finally:  # what the old script left: a cgroup, empty once its command was killed
        for cgroup in cgroups:
            for _ in range(50):
                try:
                    cgroup.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # its process not yet gone
                    time.sleep(0.1)


@pytest.fixture
def experiments(tmp_path):
    """Run experiments.sh with a `python` on PATH that only leaves a mark (no work, whatever the
    script does), tiny shakespeare missing and OUT under tmp_path. Returns (run, OUT, mark)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "python_ran"  # (holding its arguments, one a line)
    (bin_dir / "python").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {mark}\nexit 3\n")
    (bin_dir / "python").chmod(0o755)
    out = tmp_path / "ex"
    env = {"OUT": str(out), "SHAKESPEARE": str(tmp_path / "missing.txt"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return (lambda *args, cwd=None, **more: run_script("experiments.sh", *args, env={**env, **more}, cwd=cwd)), out, mark


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


@pytest.mark.parametrize("part, folder", [("speedrun", "speedrun"), ("foundation", "shakespeare"),
                                          ("default", "default_run"), ("all", "stories")])
def test_experiments_names_the_earlier_run_a_part_would_train_over(experiments, tmp_path, part, folder):
    """A rerun of speedrun, foundation or default was refused by the script it runs, naming an --out-dir that
    experiments.sh does not take (after foundation's first half had run). Now the folder is named, before any work."""
    run, out, mark = experiments
    (tmp_path / "shakespeare.txt").write_text("To be, or not to be\n" * 50)
    (out / folder).mkdir(parents=True)
    r = run(part, SHAKESPEARE=str(tmp_path / "shakespeare.txt"))
    assert refused(r, f"{out / folder}") and r.stderr == (
        f"error: {out / folder} holds an earlier run of part {'foundation' if part == 'all' else part}: move or "
        f"delete it to run the part again\n"), r.stderr
    assert not mark.exists()


def test_experiments_ablation_names_an_unfinished_default_run(experiments):
    """Part ablation over a default_run/ a stopped part default left: default_run refused it with `choose another
    --out`, a flag experiments.sh does not take. Now the folder is named, before any work."""
    run, out, mark = experiments
    (out / "default_run" / "seed1337").mkdir(parents=True)
    r = run("ablation")
    assert refused(r, f"{out / 'default_run'}", "seed1339/run") and r.stderr.startswith("error: "), r.stderr
    assert not mark.exists()


def test_experiments_reads_a_relative_shakespeare_from_where_it_is_run(experiments, tmp_path):
    """`cd data && SHAKESPEARE=tinyshakespeare.txt bash .../experiments.sh bench`: `no tiny
    shakespeare at tinyshakespeare.txt` (it was looked for from the repository root)."""
    run, _, mark = experiments
    (tmp_path / "shakespeare.txt").write_text("To be, or not to be\n" * 50)
    r = run("bench", cwd=tmp_path, SHAKESPEARE="shakespeare.txt", OUT="ex")
    assert r.returncode == 3, r.stderr  # the stand-in python's: bench.py "ran"
    assert read_sets(mark.read_text().splitlines()).data.dataset == str(tmp_path / "shakespeare.txt")
    assert (tmp_path / "ex").is_dir()


def read_sets(argv: list[str], config: str = "configs/shakespeare_char_gpu.yaml"):
    """The config a command line's --set items give (as train.py and bench.py read them)."""
    from tinygpt.config import load_config
    items = argv[argv.index("--set") + 1:]
    items = items[:next((i for i, item in enumerate(items) if item.startswith("--")), len(items))]
    return load_config(str(ROOT / config), items)


ODD = "it's #1: a, [b]"  # a folder name YAML reads otherwise unquoted: a comment, a mapping, a quote, a list


def test_experiments_passes_odd_paths_to_set_as_they_are(experiments, tmp_path):
    """SHAKESPEARE or OUT holding ' #' went into --set unquoted: YAML cut the path at the comment, and bench.py
    refused a --set the user never typed."""
    run, _, mark = experiments
    text = tmp_path / ODD / "shakespeare.txt"
    text.parent.mkdir()
    text.write_text("To be, or not to be\n" * 50)
    r = run("bench", SHAKESPEARE=str(text), OUT=str(tmp_path / ODD / "ex"))
    assert r.returncode == 3, r.stderr  # the stand-in python's
    assert read_sets(mark.read_text().splitlines()).data.dataset == str(text)
    r = run("attention", OUT=str(tmp_path / ODD / "ex"))
    assert r.returncode == 3, r.stderr
    assert read_sets(mark.read_text().splitlines(), "configs/stories.yaml").train.out_dir == \
        str(tmp_path / ODD / "ex" / "causal_true")


def test_gpu_check_passes_odd_paths_to_set_as_they_are(tmp_path):
    """As experiments.sh: the check's stages each failed on a --set the user never typed."""
    calls = tmp_path / "calls"
    python = tmp_path / "python"  # a stand-in that logs each call's arguments, then fails (the table: the real one)
    python.write_text(f"""#!/bin/sh
case "$1 $2" in
  "-c "*) exit 0 ;;
  "-m scripts.gpu_table") exec {sys.executable} "$@" ;;
esac
printf '%s\\n' "$@" > "{calls}/$$"
exit 3
""")
    python.chmod(0o755)
    calls.mkdir()
    text, out = tmp_path / ODD / "shakespeare.txt", tmp_path / ODD / "gc"
    text.parent.mkdir()
    text.write_text("To be, or not to be\n" * 50)
    r = run_script("gpu_check.sh", env={"OUT": str(out), "REHEARSE": "1", "BUDGET": "60", "SHAKESPEARE": str(text),
                                        "PYTHON": str(python)})
    assert r.returncode == 1, r.stderr  # every stage failed: the stand-in's exit 3
    logged = [f.read_text().splitlines() for f in calls.iterdir()]
    trains = [argv for argv in logged if "train.py" in argv]
    assert len(trains) == 2 and len([argv for argv in logged if "bench.py" in argv]) >= 4
    for argv in logged:
        if "--set" in argv:
            assert read_sets(argv).data.dataset == str(text), argv
    assert sorted(read_sets(argv).train.out_dir for argv in trains) == [str(out / "baby"), str(out / "ddp")]


def test_experiments_replaces_a_log_only_when_its_part_succeeds(tmp_path):
    """`... | tee "$OUT/X"` emptied X before the command ran: a rerun that was refused (its run folder
    taken) left the earlier run's figures a 0-byte file. Now X is replaced only once the command has
    succeeded, and the jobs part's timings are this run's four, not appended to the last run's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a stand-in python: `-c` runs for real (the jobs part's timing); anything else prints a line and
    # exits with $STANDIN_RC
    (bin_dir / "python").write_text(f'#!/bin/sh\n[ "$1" = -c ] && exec {sys.executable} "$@"\n'
                                    '[ "$1" = sweep.py ] && [ -n "$SWEEP_RC" ] && echo partial && exit "$SWEEP_RC"\n'
                                    'echo "new result"\nexit "${STANDIN_RC:-0}"\n')
    (bin_dir / "python").chmod(0o755)
    out, text = tmp_path / "ex", tmp_path / "shakespeare.txt"
    text.write_text("To be, or not to be\n" * 50)
    env = {"OUT": str(out), "SHAKESPEARE": str(text), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    out.mkdir()
    (out / "speedrun_seed1337.json").write_text('{"best_val_loss": 1.73}\n')
    r = run_script("experiments.sh", "speedrun", env={**env, "STANDIN_RC": "2"})
    assert r.returncode == 2, r.stderr
    assert (out / "speedrun_seed1337.json").read_text() == '{"best_val_loss": 1.73}\n'  # the earlier run's, whole
    assert not list(out.glob("*.part"))
    r = run_script("experiments.sh", "speedrun", env=env)
    assert r.returncode == 0, r.stderr
    assert [(out / f"speedrun_seed{seed}.json").read_text() for seed in (1337, 1339)] == ["new result\n"] * 2
    for _ in range(2):
        r = run_script("experiments.sh", "jobs", env=env)
        assert r.returncode == 0, r.stderr
    assert [line.split(":")[0] for line in (out / "jobs.txt").read_text().splitlines()] == \
        ["--jobs 1", "--jobs 2", "--jobs 2", "--jobs 1"]
    # each sweep's own log (the second --jobs 1 and --jobs 2 wrote over the first ones'), and a failed rerun
    # leaves them whole (its sweep wrote straight into them, emptied as it started)
    assert [(out / f"jobs_round{n}.txt").read_text() for n in range(1, 5)] == ["new result\n"] * 4
    for n in range(1, 5):
        (out / f"jobs_round{n}.txt").write_text(f"an earlier round {n}\n")
    r = run_script("experiments.sh", "jobs", env={**env, "SWEEP_RC": "2"})
    assert r.returncode == 2 and not list(out.glob("*.part")), r.stderr
    assert [(out / f"jobs_round{n}.txt").read_text() for n in range(1, 5)] == [f"an earlier round {n}\n" for n in
                                                                               range(1, 5)]


def test_in_cgroup_help_prints_its_header(tmp_path):
    """`in_cgroup.sh --help` printed its usage line as an error (exit 2), where the other scripts print their
    header."""
    for flag in ("-h", "--help"):
        r = run_script("in_cgroup.sh", flag, cwd=tmp_path)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        first = (ROOT / "scripts/in_cgroup.sh").read_text().splitlines()[1]
        assert r.stdout.splitlines()[0] == first.removeprefix("# ")
        assert "#" not in r.stdout and "set -" not in r.stdout


@pytest.mark.parametrize("script", ["gpu_check.sh", "experiments.sh"])
def test_help_prints_the_header_and_an_unknown_argument_is_refused(script, tmp_path):
    """`experiments.sh --help` was refused as an unknown part (exit 2); `gpu_check.sh --help` (or
    any argument) was ignored: the whole check ran."""
    for flag in ("-h", "--help"):
        r = run_script(script, flag, cwd=tmp_path)  # (from another folder: the header is still found)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert r.stdout.splitlines()[0] == (ROOT / "scripts" / script).read_text().splitlines()[1].removeprefix("# ")
        assert "#" not in r.stdout.splitlines()[0] and "set -" not in r.stdout
    r = run_script(script, "out", env={"OUT": str(tmp_path / "o")}, cwd=tmp_path)
    assert refused(r, "'out'"), r.stderr
    r = run_script(script, "", env={"OUT": str(tmp_path / "o")}, cwd=tmp_path)  # (an unset variable: `not :`)
    assert refused(r, "not ''"), r.stderr
    assert list(tmp_path.iterdir()) == []

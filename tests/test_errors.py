"""Guards docs/errors.md (issue 12): every bad input and fault in its table ends in one line and its
exit code (2 for the user's or the machine's refusal, 130 after Ctrl-C), never a traceback, and
never a mixed, lost or silently wrong run.

The cases that need real processes run through the real command line: two trainings on one
out_dir, --resume after the dataset changed, a training killed before its first checkpoint, and
the three Ctrl-C cases. The rest (a restarted run, the sweep rerun after a finished run's ckpt.pt
was deleted, ...) runs in this process through `errors.run_cli` (the very wrapper the scripts' `__main__` calls),
which costs no start-up. One tiny char model (2 layers, 32 wide, block 32) is trained once for the
module on a small generated text; every file lives in tmp, nothing touches the network.
"""
from __future__ import annotations

import argparse
import errno
import io
import json
import importlib.util
import os
import pty
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import ROOT

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
WORDS = "Anna Ben Clara saw a lazy dog by the zoo and a red kite in the park while it rained".split()
CONFIG = """\
model: {block_size: 32, n_layer: 2, n_head: 2, n_embd: 32}
data: {tokenizer: char}
train: {batch_size: 8, max_iters: 30, eval_interval: 15, eval_iters: 2, log_interval: 10, warmup_iters: 5,
        lr: 1.0e-3, min_lr: 1.0e-3, device: cpu, dtype: float32, plot: never}
"""  # (lr = min_lr: a resume with a larger max_iters trains on at the same lr, with no note on its schedule)
BOMB = ("model: {n_layer: [&a [lol,lol,lol,lol,lol,lol,lol,lol,lol], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], "
        "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], "
        "&f [*e,*e,*e,*e,*e,*e,*e,*e,*e], &g [*f,*f,*f,*f,*f,*f,*f,*f,*f], &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]]}\n")


def make_text(n_words: int = 1500, seed: int = 0) -> str:
    """Lines of the WORDS (it holds a 'z', and no '#' or '\u00a7')."""
    import random
    rng = random.Random(seed)
    return "".join(" ".join(rng.choice(WORDS) for _ in range(10)) + ".\n" for _ in range(n_words // 10))


@dataclass
class Result:
    code: int
    out: str
    err: str


# ---- helpers ----


def in_process(script: str, args, capsys) -> Result:
    """A script's main() through run_cli, as its `__main__` runs it: exit code and output."""
    import bench
    import compare
    import export
    import sample
    import sweep
    import train
    from data import prepare
    from tinygpt.errors import run_cli
    main = {"train.py": train.main, "sample.py": sample.main, "data.prepare": prepare.main, "bench.py": bench.main,
            "compare.py": compare.main, "sweep.py": sweep.main, "export.py": export.main}[script]
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        run_cli(main, [str(a) for a in args])
    out, err = capsys.readouterr()
    return Result(info.value.code, out, err)


def cli(script: str, *args, timeout: float = 300) -> Result:
    """`python script args...` as a user runs it (a module of a folder through -m, from the repository)."""
    command = [str(ROOT / script)] if script.endswith(".py") else ["-m", script]
    done = subprocess.run([sys.executable, *command, *map(str, args)], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=timeout)
    return Result(done.returncode, done.stdout, done.stderr)


def popen(script: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / script), *map(str, args)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def one_line(result: Result, *culprits: str, code: int = 2) -> str:
    """Exit `code`, no traceback, stderr exactly one line (`error: ...` for code 2) naming every culprit."""
    report = f"exit {result.code}\nstdout:\n{result.out[-3000:]}\nstderr:\n{result.err[-3000:]}"
    assert result.code == code, report
    assert "Traceback" not in result.err, report
    lines = result.err.splitlines()
    assert len(lines) == 1, report
    assert lines[0].startswith("error: ") if code == 2 else lines[0] == "interrupted", report
    for culprit in culprits:
        assert culprit in lines[0], f"{culprit!r} not named in: {lines[0]}"
    return lines[0]


def wait_for(condition, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# ---- the module's data, config and trained run ----


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread(one_thread):
    """Tiny models: one thread (conftest's one_thread)."""


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("errors")
    (folder / "corpus.txt").write_text(make_text(), encoding="utf-8")
    (folder / "config.yaml").write_text(CONFIG, encoding="utf-8")
    return folder


def sets(tmp: Path, out_dir: Path, *extra: str, dataset: Path | None = None) -> list:
    """The config file and --set arguments that keep a run's files inside tmp."""
    return [tmp / "config.yaml", "--set", f"data.dataset={dataset or tmp / 'corpus.txt'}",
            f"data.prepared_dir={tmp / 'prepared'}", f"train.out_dir={out_dir}", *extra]


@pytest.fixture(scope="module")
def run(tmp) -> Path:
    """A finished 30-step run (ckpt.pt, best.pt, config.yaml, metrics.csv)."""
    import train
    train.main([*map(str, sets(tmp, tmp / "run")), "--quiet"])
    return tmp / "run"


def damaged_copy(run: Path, dest: Path, name: str = "best.pt", **changes) -> Path:
    """A copy of run/name with `changes` applied to the checkpoint dict (None deletes a key), saved
    with a valid checksum: what is refused is the content, not the file."""
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    ckpt = load_checkpoint(run / name)
    for key, value in changes.items():
        if value is None:
            del ckpt[key]
        elif callable(value):
            value(ckpt)
        else:
            ckpt[key] = value
    dest.mkdir(parents=True, exist_ok=True)
    save_checkpoint(dest / "ckpt.pt", ckpt)
    shutil.copy(run / "config.yaml", dest / "config.yaml")
    return dest


# ======== 1-4: work mixed, lost or silently wrong (end to end) ========


@pytest.mark.slow
def test_1_a_second_training_on_one_out_dir_is_refused(tmp, capsys):
    """A trains (its step-0 checkpoint is written); B on the same folder (this process), new or
    --resume, is refused with one line; A then stops on Ctrl-C with its checkpoint; the folder holds
    A's run alone."""
    out = tmp / "shared"
    a = popen("train.py", *sets(tmp, out, "train.max_iters=100000", "train.eval_interval=100000"), "--quiet")
    try:
        wait_for(lambda: (out / "ckpt.pt").exists() or a.poll() is not None)
        assert a.poll() is None, a.communicate()[1][-2000:]
        new, resumed = (in_process("train.py", [*sets(tmp, out), *extra], capsys) for extra in (["--quiet"], ["--resume"]))
        assert a.poll() is None  # A was running all along
    finally:
        a.send_signal(signal.SIGINT)
        a_out, a_err = a.communicate(timeout=120)
    for result in (new, resumed):
        one_line(result, str(out), "in use by another training", f"process {a.pid}")
    assert a.returncode == 130 and b"continue with --resume" in a_out, a_err[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["best.pt", "ckpt.pt", "config.yaml", "metrics.csv"]  # no lock
    from tinygpt.checkpoint import load_checkpoint
    assert load_checkpoint(out / "ckpt.pt")["step"] > 0


def test_1_temp_files_of_a_live_writer_are_never_swept(tmp_path):
    """atomic_write removes the temp files of writers that died, never one being written."""
    from tinygpt.checkpoint import atomic_write_text
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        mine = tmp_path / f".ckpt.pt.{os.getpid()}.abcdefgh.tmp"
        theirs = tmp_path / f".ckpt.pt.{live.pid}.abcdefgh.tmp"
        stale = tmp_path / f".ckpt.pt.{dead.pid}.abcdefgh.tmp"
        for p in (mine, theirs, stale):
            p.write_text("half a checkpoint")
        atomic_write_text(tmp_path / "ckpt.pt", "new")
        assert mine.exists() and theirs.exists() and not stale.exists()
        assert (tmp_path / "ckpt.pt").read_text() == "new"
    finally:
        live.kill()
        live.wait()


STALL = """\
import pathlib, runpy, sys, time
write_text = pathlib.Path.write_text
def stall(self, *args, **kwargs):  # the temp folder holds train.bin and val.bin: stop before tokenizer.json
    if self.parent.name.endswith(".tmp"):
        print("writing", flush=True)
        for _ in range(1200):  # 120 s in short naps: the signal may reach another thread (tqdm's
            time.sleep(0.1)    # monitor), and Python runs its handler only once this one wakes
    return write_text(self, *args, **kwargs)
pathlib.Path.write_text = stall
if sys.argv[1] == "train.py":  # train.py, which prepares its data itself
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    sys.argv[0] = "data.prepare"
    runpy.run_module("data.prepare", run_name="__main__")
"""


def stalled_prepare(tmp: Path, prepared: Path) -> subprocess.Popen:
    """`python -m data.prepare` of the module's data into `prepared`, stopped halfway through writing
    its temp folder (it prints 'writing' then) until a signal ends it."""
    return subprocess.Popen([sys.executable, "-c", STALL, tmp / "config.yaml", "--set",
                             f"data.dataset={tmp / 'corpus.txt'}", f"data.prepared_dir={prepared}"],
                            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def temp_folders(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_1_a_killed_preparation_leaves_no_temp_folder(tmp):
    """A preparation killed (SIGKILL) while writing leaves its temp folder (the QA run found 52 MB for
    a 30 MB text): the next preparation removes it, even one that finds the data prepared already,
    and never the temp folder of a preparation still running."""
    from data.prepare import prepare
    from tinygpt.config import load_config
    prepared = tmp / "prepared_killed"
    cfg = load_config(tmp / "config.yaml", [f"data.dataset={tmp / 'corpus.txt'}", f"data.prepared_dir={prepared}"])
    running = stalled_prepare(tmp, prepared)
    try:
        read_until(running.stdout, b"writing")
        folder = prepare(cfg, show_progress=False)  # while the other one is still writing
        assert len(temp_folders(prepared)) == 1  # the live one's: kept
    finally:
        running.kill()
        running.wait()
    # another setting's, killed the same way (its settings wrong, never prepared again): it was left for good
    other = prepared / ".stories-bpe-0123456789.999999999.abcd1234.tmp"
    other.mkdir()
    (other / "train.bin").write_bytes(b"\0" * 64)
    assert prepare(cfg, show_progress=False) == folder  # prepared already: only the sweep
    assert [p.name for p in prepared.iterdir()] == [folder.name]


KILL_OR_HANGUP = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])


@pytest.mark.slow
@pytest.mark.parametrize("signum", KILL_OR_HANGUP, ids=lambda s: signal.Signals(s).name)
def test_1_sigterm_or_sighup_while_preparing_is_one_line_and_leaves_nothing(tmp, signum):
    """SIGTERM (kill) stops a preparation as Ctrl-C does, with its own exit code: it used to die
    silently, 143, its temp folder left behind. SIGHUP (the terminal closed) likewise, exit 129."""
    prepared = tmp / f"prepared_terminated_{signum}"
    one_line(terminated_while_writing(stalled_prepare(tmp, prepared), signum), code=128 + signum)  # `interrupted`
    assert not prepared.exists()  # no temp folder, nor the data.prepared_dir made for it


def terminated_while_writing(proc: subprocess.Popen, signum: int = signal.SIGTERM) -> Result:
    """`signum` to a stalled preparation (STALL) once it writes: its exit code and stderr."""
    try:
        read_until(proc.stdout, b"writing")
        proc.send_signal(signum)
        return wait_or_dump(proc)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("signum", KILL_OR_HANGUP, ids=lambda s: signal.Signals(s).name)
def test_1_sigterm_or_sighup_while_train_py_prepares_its_data_leaves_nothing(tmp, signum):
    """Before its loop (preparing data, building the model) train.py died silently at SIGTERM, its
    out_dir left holding a .lock; now it stops as Ctrl-C does. SIGHUP (an SSH connection that drops
    while a big dataset is prepared) did the same until it was handled here too."""
    prepared, out = tmp / f"prepared_train_terminated_{signum}", tmp / "refused" / f"terminated_{signum}"
    proc = subprocess.Popen([sys.executable, "-c", STALL, "train.py", tmp / "config.yaml", "--quiet", "--set",
                             f"data.dataset={tmp / 'corpus.txt'}", f"data.prepared_dir={prepared}",
                             f"train.out_dir={out}"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    one_line(terminated_while_writing(proc, signum), code=128 + signum)
    assert not prepared.exists() and not out.exists()


def test_2_resume_after_the_dataset_changed_is_refused(tmp, capsys):
    """The checkpoint records a digest of the prepared tokens and tokenizer: a changed dataset file
    is refused on --resume (same vocabulary size, a bigger one, or more text of the same characters),
    and continuing on the new data is an explicit new run (train.init_from)."""
    import train
    data = tmp / "changing.txt"
    text = make_text(seed=1)
    data.write_text(text, encoding="utf-8")
    out = tmp / "run data"  # a space: the setting the message suggests is quoted to paste whole
    train.main([*map(str, sets(tmp, out, dataset=data)), "--stop-at", "10", "--quiet"])
    before = files(out)

    data.write_text(text.replace("z", "\u00a7"), encoding="utf-8")  # same vocabulary size, ids remapped
    same_size = cli("train.py", *sets(tmp, out, dataset=data), "--resume", "--quiet")
    one_line(same_size, "changing.txt", "--resume", "vocabulary changed")
    data.write_text(text + "#\n", encoding="utf-8")  # one more character: a bigger vocabulary
    bigger = in_process("train.py", [*sets(tmp, out, dataset=data), "--resume"], capsys)
    one_line(bigger, "changing.txt", "vocabulary changed")
    data.write_text(text + text[:500], encoding="utf-8")  # more text, the same characters
    more = in_process("train.py", [*sets(tmp, out, dataset=data), "--resume"], capsys)
    one_line(more, "changing.txt", f"--set '{f'train.init_from={out}'}' train.out_dir=NEW_DIR")
    assert files(out) == before  # nothing was written

    tuned = in_process("train.py", [*sets(tmp, tmp / "run_data_2", f"train.init_from={out}", dataset=data),
                                    "--quiet"], capsys)
    assert tuned.code == 0, tuned.err


@pytest.mark.slow
def test_3_a_training_killed_before_its_first_checkpoint_can_be_started_again(tmp, capsys):
    """SIGKILL before the first checkpoint leaves config.yaml and a stale .lock: a plain rerun
    starts the run again (and takes the lock over); --resume says there is no checkpoint."""
    out = tmp / "died_early"
    a = popen("train.py", *sets(tmp, out, "train.eval_iters=20000"), "--quiet")  # step 0's eval is slow
    wait_for(lambda: (out / "config.yaml").exists() or a.poll() is not None)
    a.kill()
    a.wait()
    assert not (out / "ckpt.pt").exists() and (out / ".lock").exists()
    one_line(in_process("train.py", [*sets(tmp, out), "--resume", "--quiet"], capsys), "no checkpoint", "drop --resume")
    # the dead run's metrics row (it died saving best.pt, after its first eval): not mixed into the new run's
    (out / "metrics.csv").write_text("step,train_loss,val_loss,lr,tokens_per_s,mfu,elapsed_s\n0,9.9,9.9,,,,0.1\n")
    again = in_process("train.py", [*sets(tmp, out), "--quiet"], capsys)  # takes the dead process's lock over
    assert again.code == 0 and "done: step 30" in again.out, again.err[-2000:]
    steps = [line.split(",")[0] for line in (out / "metrics.csv").read_text().splitlines()[1:]]
    assert steps.count("0") == 1 and ",9.9," not in (out / "metrics.csv").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["best.pt", "ckpt.pt", "config.yaml", "metrics.csv"]


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="O_NOFOLLOW is POSIX")
def test_1_a_lock_file_that_is_a_symlink_or_a_folder_is_refused(tmp, capsys):
    """The lock was opened through a symlink: the user's file it pointed to was overwritten with a pid.
    A named pipe there ended in a traceback, in every command that takes a lock."""
    out = tmp / "odd_lock"
    out.mkdir()
    precious = tmp / "precious.txt"
    precious.write_text("mine\n")
    (out / ".lock").symlink_to(precious)
    one_line(in_process("train.py", [*sets(tmp, out), "--quiet"], capsys), "lock file", "remove it")
    assert precious.read_text() == "mine\n"
    (out / ".lock").unlink()
    (out / ".lock").mkdir()
    one_line(in_process("train.py", [*sets(tmp, out), "--quiet"], capsys), "lock file", "Is a directory")
    (out / ".lock").rmdir()
    os.mkfifo(out / ".lock")  # (opened and locked, then its pid could not be written: a traceback, EINVAL)
    one_line(in_process("train.py", [*sets(tmp, out), "--quiet"], capsys), "lock file", "a named pipe or a device")


def test_3_a_training_killed_between_its_first_two_saves_can_be_started_again(tmp, run, capsys):
    """SIGKILL after step 0's best.pt, before its ckpt.pt: a new run said "already holds a run;
    continue it with --resume", --resume said "no checkpoint; drop --resume". best.pt of step 0 holds
    the starting weights: the run starts again. A best.pt of a later step is kept, with one line."""
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    out = tmp / "died_at_first_save"
    out.mkdir()
    shutil.copy(run / "config.yaml", out / "config.yaml")
    best = load_checkpoint(run / "best.pt")
    save_checkpoint(out / "best.pt", {**best, "step": 0})
    # --resume sent the user to train.init_from=best.pt and another out_dir, for the starting weights
    one_line(in_process("train.py", [*sets(tmp, out), "--resume", "--quiet"], capsys), "no checkpoint",
             "drop --resume to start a new run (its best.pt is of step 0, before any training: nothing is lost)")
    again = in_process("train.py", [*sets(tmp, out), "--quiet"], capsys)
    assert again.code == 0 and "done: step 30" in again.out, again.err[-2000:]
    (out / "ckpt.pt").unlink()
    save_checkpoint(out / "best.pt", {**best, "step": 15})
    kept = (out / "best.pt").read_bytes()
    one_line(in_process("train.py", [*sets(tmp, out), "--quiet"], capsys), "holds best.pt but no ckpt.pt",
             "move best.pt away")
    one_line(in_process("train.py", [*sets(tmp, out), "--resume", "--quiet"], capsys), "no checkpoint",
             f"start a new run from its weights with --set train.init_from={out / 'best.pt'} train.out_dir=NEW_DIR")
    assert (out / "best.pt").read_bytes() == kept


def test_3_a_run_whose_checkpoints_were_removed_keeps_its_metrics(tmp, run, capsys):
    """A finished run's ckpt.pt and best.pt deleted (to free disk): a new run into it rewrote its
    metrics.csv (rows to step 30 became rows to step 10) and config.yaml without a word, and a sweep
    said "has no checkpoint (it stopped before its first); starting it again" and did the same."""
    out = tmp / "no_checkpoints"
    shutil.copytree(run, out)
    for name in ("ckpt.pt", "best.pt"):
        (out / name).unlink()
    kept = {name: (out / name).read_bytes() for name in ("metrics.csv", "config.yaml")}
    one_line(in_process("train.py", [*sets(tmp, out, "train.max_iters=10"), "--quiet"], capsys),
             f"train.out_dir='{out}' holds metrics.csv of a run trained to step 30 but no ckpt.pt",
             "move metrics.csv away")
    sweep_dir = tmp / "sw_no_checkpoints"
    shutil.copytree(out, sweep_dir / "n_head=2")
    result = in_process("sweep.py", [tmp / "config.yaml", "--grid", "model.n_head=2", "--out", sweep_dir, "--set",
                                     f"data.dataset={tmp / 'corpus.txt'}", f"data.prepared_dir={tmp / 'prepared'}"],
                        capsys)
    one_line(result, "holds metrics.csv of a run trained to step 30 but no checkpoint", "left as it is")
    for folder in (out, sweep_dir / "n_head=2"):
        assert {name: (folder / name).read_bytes() for name in kept} == kept
    # a run whose val loss never beat step 0's keeps best.pt of step 0: with its ckpt.pt removed, it is
    # no run that died at its first save (that one has no rows past step 0)
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    save_checkpoint(out / "best.pt", {**load_checkpoint(run / "best.pt"), "step": 0})
    one_line(in_process("train.py", [*sets(tmp, out, "train.max_iters=10"), "--quiet"], capsys),
             f"train.out_dir='{out}' holds metrics.csv of a run trained to step 30 but no ckpt.pt",
             "move metrics.csv away")
    assert {name: (out / name).read_bytes() for name in kept} == kept


@pytest.mark.slow
def test_3_train_compile_without_a_cxx_compiler_trains_on_without_it(tmp):
    """train.compile=true where inductor finds no C++ compiler: after step 0's eval and checkpoints,
    a 100-line traceback (exit 1), and the folder then held a run that only --resume could go on with.
    The run now goes on uncompiled from the same batches: the same losses as train.compile=false."""
    def train(out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "train.py"), *map(str, sets(tmp, out, "train.threads=1",
                                                                                      *extra)), "--quiet"],
                              cwd=ROOT, env=env or ENV, capture_output=True, text=True, timeout=300)
    broken = train(tmp / "compile_fails", "train.compile=true", env={**ENV, "CXX": str(tmp / "no-such-g++")})
    assert broken.returncode == 0 and "Traceback" not in broken.stderr, broken.stderr[-3000:]
    warning = [line for line in broken.stderr.splitlines() if line.startswith("warning: train.compile")]
    assert len(warning) == 1 and "torch.compile failed" in warning[0] and "training without it" in warning[0]
    plain = train(tmp / "compile_off", "train.compile=false")
    assert plain.returncode == 0, plain.stderr[-3000:]
    losses = [[row.split(",")[:3] for row in (out / "metrics.csv").read_text().splitlines()]
              for out in (tmp / "compile_fails", tmp / "compile_off")]
    assert len(losses[0]) > 3 and losses[0] == losses[1]  # step, train loss, val loss: row by row


def test_3_a_resume_keeps_a_users_config_yaml_in_the_run_folder(tmp, run, capsys):
    """A config.yaml of the user's (no run's header) in a run's folder: a new run there is refused,
    but --resume with another CONFIG overwrote it with the run's settings. With that very file as
    CONFIG, its settings are the ones read, and the resolved config replaces it as before."""
    out = tmp / "users_config"
    shutil.copytree(run, out)
    theirs = CONFIG + "# my notes\n"
    (out / "config.yaml").write_text(theirs)
    one_line(in_process("train.py", [*sets(tmp, out, "train.max_iters=40"), "--resume", "--quiet"], capsys),
             f"train.out_dir='{out}' holds config.yaml, which is not from a tinygpt run", "--resume would overwrite it",
             "move it away")
    assert (out / "config.yaml").read_text() == theirs
    (out / "config.yaml").write_text("")  # (emptied: nothing to lose, the run's own is written again)
    done = in_process("train.py", [*sets(tmp, out, "train.max_iters=40"), "--resume", "--quiet"], capsys)
    assert done.code == 0 and "done: step 40" in done.out, done.err[-2000:]
    (out / "config.yaml").write_text(theirs)
    done = in_process("train.py", [out / "config.yaml", *sets(tmp, out, "train.max_iters=50")[1:], "--resume",
                                   "--quiet"], capsys)
    assert done.code == 0 and "done: step 50" in done.out, done.err[-2000:]
    assert (out / "config.yaml").read_text().startswith("# the resolved config of this run")


def test_3_a_resume_beside_a_damaged_best_pt_is_refused(tmp, run, capsys):
    """best.pt emptied: --resume went on and ended `done: ...; sample with: python sample.py RUN`,
    best.pt still empty (no lower val loss rewrote it), and sample.py RUN then refused the run."""
    out = tmp / "damaged_best"
    shutil.copytree(run, out)
    (out / "best.pt").write_bytes(b"")
    ckpt = (out / "ckpt.pt").read_bytes()
    one_line(in_process("train.py", [*sets(tmp, out, "train.max_iters=40"), "--resume", "--quiet"], capsys),
             f"--resume: {out / 'best.pt'} is truncated", "move it away to resume")
    assert (out / "ckpt.pt").read_bytes() == ckpt and (out / "best.pt").read_bytes() == b""
    (out / "best.pt").unlink()  # as the line says: the run resumes
    resumed = in_process("train.py", [*sets(tmp, out, "train.max_iters=40"), "--resume", "--quiet"], capsys)
    assert resumed.code == 0 and "done: step 40" in resumed.out, resumed.err[-2000:]


def test_4_a_sweep_rerun_never_deletes_best_pt(tmp, run, capsys):
    """A finished sweep run whose ckpt.pt was deleted keeps its best.pt: the sweep is refused before
    any training, exit 2, the folder named (it was exit 1, after the other runs)."""
    sweep_dir = tmp / "sw"
    (sweep_dir / "n_head=2").mkdir(parents=True)
    shutil.copy(run / "best.pt", sweep_dir / "n_head=2" / "best.pt")
    best = (sweep_dir / "n_head=2" / "best.pt").read_bytes()
    result = in_process("sweep.py", [tmp / "config.yaml", "--grid", "model.n_head=2", "--out", sweep_dir, "--set",
                                     f"data.dataset={tmp / 'corpus.txt'}", f"data.prepared_dir={tmp / 'prepared'}"],
                        capsys)
    one_line(result, "has best.pt but no ckpt.pt", "left as it is")
    assert (sweep_dir / "n_head=2" / "best.pt").read_bytes() == best


# ======== 5-7: resource exhaustion from a tiny file ========


def bomb_list() -> list:
    """The alias bomb's structure as Python data: 9**8 values when expanded, a few lists when shared."""
    lol = ["lol"] * 9
    for _ in range(7):
        lol = [lol] * 9
    return lol


def refused_within(seconds: float, megabytes: float, script: str, args, capsys) -> str:
    """The one line of a refusal that takes less than `seconds` and allocates (Python objects:
    tracemalloc) less than `megabytes` at its peak; the unbounded message took 351 MB."""
    import tracemalloc
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        result = in_process(script, args, capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < seconds and peak < megabytes * 2**20, (time.perf_counter() - t0, peak)
    return one_line(result)


@pytest.mark.within(60)
def test_5_a_yaml_alias_bomb_is_refused_at_once(tmp, capsys):
    (tmp / "bomb.yaml").write_text(BOMB)
    assert len(BOMB) < 400
    line = refused_within(5, 20, "train.py", [tmp / "bomb.yaml"], capsys)
    assert "bomb.yaml" in line and "aliases expand to more than" in line and len(line) < 300


@pytest.mark.within(60)
def test_5_a_config_of_a_million_plain_values_is_refused_at_once(tmp, capsys):
    """1 MB of values and no alias (`[1,1,1,...]`, or 60,000 keys): PyYAML composed them all, 35 s
    and 600 MB, before the count refused it, blaming aliases there were none of (now 0.6 s)."""
    (tmp / "flat.yaml").write_text("model: {n_layer: [" + ",".join(["1"] * 500_000) + "]}\n")
    t0 = time.perf_counter()  # (not under refused_within's tracemalloc, which slows PyYAML 10x)
    one_line(in_process("train.py", [tmp / "flat.yaml"], capsys), "flat.yaml", "holds more than 10,000 values")
    assert time.perf_counter() - t0 < 5, time.perf_counter() - t0
    keys = tmp / "many_keys"  # a run's config.yaml, as compare.py reads it
    keys.mkdir()
    (keys / "config.yaml").write_text("".join(f"k{i}: 1\n" for i in range(60_000)))
    (keys / "metrics.csv").write_text("step,train_loss,val_loss\n")
    t0 = time.perf_counter()
    one_line(in_process("compare.py", [keys, "--out", tmp / "many_keys_cmp"], capsys), "config.yaml", "holds more than")
    assert time.perf_counter() - t0 < 5, time.perf_counter() - t0


@pytest.mark.within(60)
def test_5_a_checkpoint_holding_an_alias_bomb_is_refused_at_once(tmp, run, capsys):
    """The same structure inside a checkpoint's config (pickle keeps it shared: a small file)."""
    path = damaged_copy(run, tmp / "bomb_ckpt", config=lambda c: c["config"]["model"].update(n_layer=bomb_list()))
    assert (path / "ckpt.pt").stat().st_size < 1_000_000
    line = refused_within(5, 20, "sample.py", [path / "ckpt.pt"], capsys)
    assert "model.n_layer=" in line and "must be of type int" in line and len(line) < 400


def test_6_yaml_nested_20000_deep_is_one_line(tmp, capsys):
    (tmp / "deep.yaml").write_text("model: " + "[" * 20000 + "]" * 20000 + "\n")
    one_line(in_process("train.py", [tmp / "deep.yaml"], capsys), "deep.yaml", "nests deeper than")


@pytest.mark.parametrize("override, culprit", [
    ("model.n_embd=1000000000", "needs at least"),
    ("model.n_layer=1000000000", "needs at least"),
    ("model.block_size=100000000000", "activations"),
    ("train.batch_size=1000000000", "activations"),
    ("train.grad_accum=1000000000", "one optimizer step"),
    ("train.eval_iters=1000000000", "one evaluation"),
    ("data.stories_chars=1000000000000", "corpus"),
])
def test_7_absurd_sizes_are_refused_with_what_they_need(tmp, capsys, override, culprit):
    out = tmp / "refused" / override.split("=")[0]
    extra = ["data.dataset=stories"] if override.startswith("data.stories") else []
    t0 = time.perf_counter()
    line = one_line(in_process("train.py", [*sets(tmp, out, override, *extra), "--quiet"], capsys), culprit)
    assert ("GB" in line or "hours" in line) and time.perf_counter() - t0 < 30
    assert not out.exists()


ULIMIT = """
import re, resource
from pathlib import Path
import torch
from tinygpt import runtime
from tinygpt.errors import run_cli
used = int(re.search(r"VmSize:\\s+(\\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (used + 2 ** 28, resource.RLIM_INFINITY))  # 256 MB more address space
print(runtime.memory_left(torch.device("cpu"))[0], flush=True)
run_cli(lambda argv: torch.ones(2 ** 31, dtype=torch.uint8))  # 2 GB
"""


@pytest.mark.slow
def test_7_ulimit_v_counts_as_memory_and_a_refused_allocation_is_one_line():
    """`ulimit -v` (clusters set it): the memory check sees the address space left, and an
    allocation the kernel refuses anyway (torch's CPU allocator raises a RuntimeError) is one line,
    exit 2, not a traceback."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux's /proc")
    done = subprocess.run([sys.executable, "-c", ULIMIT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    available = int(done.stdout.split()[0])
    assert 0 <= available <= 2 ** 28
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: out of memory") and len(done.stderr.strip().splitlines()) == 1


def test_7_a_16000_bit_integer_is_described_by_its_size(tmp, capsys):
    """Python refuses to write an int of more than 4300 digits (ValueError): a message names its size."""
    from tinygpt.errors import short
    line = one_line(in_process("train.py", [tmp / "config.yaml", "--set", "model.n_layer=0x" + "f" * 4000], capsys),
                    "model.n_layer=an integer of 16000 bits", "64 bits")
    assert len(line) < 200
    assert short({"n": [-(2**20000)]}) == "{'n': [a negative integer of 20001 bits]}"
    assert short(2**128 - 1) == str(2**128 - 1)  # up to 128 bits, the digits


def test_7_an_exceptions_own_words_are_one_bounded_line():
    """What a library's exception says goes into an error line on one line, elided, never empty."""
    from tinygpt.errors import reason
    assert reason(ValueError("no\n   such\tthing")) == "no such thing"
    assert reason(ValueError("")) == "ValueError"
    long = reason(OSError("x" * 500), limit=120)
    assert len(long) == 120 and long.endswith("...")
    import yaml
    from tinygpt.config import _yaml_problem  # PyYAML's words: the problem, elided, and where
    assert _yaml_problem(yaml.YAMLError()) == "YAMLError"  # (it was an IndexError: no first line)
    assert _yaml_problem(yaml.YAMLError("first line\nsecond")) == "first line"
    assert len(_yaml_problem(yaml.YAMLError("y " * 300))) == 200


@pytest.mark.parametrize("message", ["CUDA out of memory. Tried to allocate 20.00 GiB\nmore lines", "",
                                     "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
                                     "79.19 GiB of which 1.25 GiB is free. Including non-PyTorch memory, this process "
                                     "has 77.93 GiB memory in use."])
def test_7_a_device_out_of_memory_is_one_line(message, capsys):
    """torch's OutOfMemoryError (a GPU's): one line with what it said, even when it said nothing."""
    from tinygpt.errors import run_cli
    class OutOfMemoryError(RuntimeError):
        pass
    def main(argv):
        raise OutOfMemoryError(message)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, [])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    said = message.split("\n")[0] if message else "OutOfMemoryError"
    assert err.startswith("error: out of device memory (" + said[:70])
    assert len(err.split("(", 1)[1].split(")")[0]) <= 80  # what torch said, cut to a value's length


@pytest.mark.parametrize("key, value", [("vocab_size", 10**12), ("block_size", 10**11)])
def test_7_a_checkpoint_claiming_an_absurd_size_is_refused(tmp, run, capsys, key, value):
    def claim(ckpt):
        ckpt["config"]["model"][key] = value
        ckpt["tokenizer"]["vocab_size"] = ckpt["config"]["model"]["vocab_size"]
    path = damaged_copy(run, tmp / f"claims_{key}", config=claim)
    one_line(in_process("sample.py", [path], capsys), str(path / "ckpt.pt"), "needs at least", "GB")


@pytest.mark.parametrize("refusal", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                     RuntimeError("[enforce fail at alloc_cpu.cpp:119] DefaultCPUAllocator: can't "
                                                  "allocate memory: you tried to allocate 800000000 bytes"),
                                     MemoryError()])
def test_7_out_of_memory_while_loading_a_checkpoint_is_not_called_damage(run, capsys, monkeypatch, refusal):
    """sample.py loads onto the device: a GPU too small for a whole best.pt was told that the file is
    "truncated, corrupted or not a checkpoint" and to give the run's ckpt.pt instead."""
    def refuse(*args, **kwargs):
        raise refusal
    monkeypatch.setattr(torch, "load", refuse)
    result = in_process("sample.py", [run], capsys)
    line = one_line(result, "out of")
    assert "corrupted" not in line and "give it instead" not in line


# ======== 8: the environment ========


def deny_writing(monkeypatch, folder: Path) -> None:
    """os.access says `folder` is not writable (as a read-only file system would; root ignores chmod)."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == folder and mode & os.W_OK
                        else real(p, mode, **kw))


@pytest.mark.parametrize("key", ["train.out_dir", "data.prepared_dir"])
def test_8_an_unwritable_folder_is_refused_before_any_work(tmp, capsys, monkeypatch, key):
    import data.prepare
    locked = tmp / f"locked_{key}"
    locked.mkdir()
    deny_writing(monkeypatch, locked)
    monkeypatch.setattr(data.prepare, "load_text", lambda d: pytest.fail("prepared before checking"))
    out = locked / "run" if key == "train.out_dir" else tmp / "refused" / "unwritable"
    result = in_process("train.py", [*sets(tmp, out, f"data.prepared_dir={locked / 'prepared'}"), "--quiet"], capsys)
    one_line(result, key, str(locked), "not writable")
    assert list(locked.iterdir()) == [] and not out.exists()


def test_8_a_resume_in_an_unwritable_run_folder_says_to_copy_the_run(tmp, run, capsys, monkeypatch):
    """Another folder holds no run to continue: the advice for a resume is to copy the run, then resume there."""
    out = tmp / "unwritable_run"
    shutil.copytree(run, out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    deny_writing(monkeypatch, out)
    result = in_process("train.py", [*sets(tmp, out, "train.max_iters=40"), "--resume", "--quiet"], capsys)
    one_line(result, "not writable", "copy the run into a folder you can write and resume it there: cp -a")
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_8_a_damaged_preparation_in_an_unwritable_prepared_dir_is_called_damaged(tmp, capsys, monkeypatch):
    """It was refused as 'not writable' alone: the user, who had prepared it there, was not told why
    it was to be written at all."""
    from data import prepare
    prepared = tmp / "prepared_locked"
    args = [*sets(tmp, tmp / "refused" / "damaged_prep", f"data.prepared_dir={prepared}"), "--quiet"]
    assert in_process("data.prepare", [args[0], *args[1:-1]], capsys).code == 0
    folder = next(prepared.iterdir())
    (folder / "val.bin").write_bytes((folder / "val.bin").read_bytes()[:-2])  # a truncated array
    deny_writing(monkeypatch, prepared)
    monkeypatch.setattr(prepare, "load_text", lambda d: pytest.fail("prepared before checking"))
    one_line(in_process("train.py", args, capsys), folder.name, "outdated or damaged", "data.prepared_dir",
             "not writable")
    assert not (tmp / "refused" / "damaged_prep").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_8_a_read_only_out_dir_is_refused(tmp, capsys):
    locked = tmp / "read_only"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        one_line(in_process("train.py", [*sets(tmp, locked / "run"), "--quiet"], capsys), "not writable")
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("key", ["train.out_dir", "data.prepared_dir"])
def test_8_a_path_below_a_file_is_refused(tmp, capsys, key):
    (tmp / "notes.txt").write_text("a file, not a folder\n")
    below = tmp / "notes.txt" / "sub"
    args = sets(tmp, below if key == "train.out_dir" else tmp / "refused" / "below", f"{key}={below}")
    one_line(in_process("train.py", [*args, "--quiet"], capsys), key, "notes.txt is a file")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (no folder can be made in it)")
@pytest.mark.parametrize("key", ["train.out_dir", "data.prepared_dir"])
def test_8_a_folder_that_cannot_be_made_is_one_line(tmp, capsys, key):
    out = tmp / "refused" / "in_proc"
    result = in_process("train.py", [*sets(tmp, out, f"{key}=/proc/tinygpt/x"), "--quiet"], capsys)
    one_line(result, f"{key}='/proc/tinygpt/x'")
    assert not out.exists()


@pytest.mark.parametrize("key", ["train.out_dir", "data.prepared_dir"])
def test_8_a_path_the_file_system_cannot_encode_is_one_line(tmp, capsys, key):
    """A lone surrogate (YAML's "\\ud800") is a str no file name can hold."""
    out = tmp / "refused" / "surrogate"
    result = in_process("train.py", [*sets(tmp, out, f'{key}="{tmp}/x\\ud800"'), "--quiet"], capsys)
    one_line(result, f"{key}='{tmp}/x\\ud800'", "cannot encode")
    assert not out.exists()


def test_8_a_run_folder_whose_name_is_not_utf8_works_everywhere(tmp, run, capsys):
    """A folder name holding the byte 0xff (Python's str has the surrogate \\udcff): compare's report
    and plots, the loss plot's title, heatmap titles, an attention page and an export's README used
    to be tracebacks (UnicodeEncodeError); the bytes now go into text files as they are, and plots
    draw them as U+FFFD."""
    import shutil
    odd = Path(os.fsdecode(bytes(tmp) + b"/odd\xff"))
    shutil.copytree(run, odd)
    report = tmp / "odd_report"
    assert in_process("compare.py", [odd, "--out", report], capsys).code == 0
    assert b"odd\xff" in (report / "results.md").read_bytes()
    plots = importlib.util.find_spec("matplotlib") is not None  # (without it, the PNGs are a note's words)
    if plots:
        assert in_process("compare.py", [odd, "--plot-only"], capsys).code == 0
    pngs = tmp / "odd_png"
    done = in_process("sample.py", [odd, "--prompt", "the", "--max-new-tokens", "2", "--attention-png", pngs,
                                    "--attention-html", tmp / "odd.html"], capsys)
    assert done.code == 0, done.err
    assert (pngs / "attention_layer0.png").exists() == plots and (tmp / "odd.html").exists()
    if importlib.util.find_spec("safetensors") and importlib.util.find_spec("tokenizers"):
        done = in_process("export.py", [odd, "--format", "hf", tmp / "odd_hf"], capsys)
        assert done.code == 0, done.err
        assert b"odd\xff" in (tmp / "odd_hf" / "README_EXPORT.md").read_bytes()


def test_an_export_readme_quotes_its_folder_as_python_reads_it(run, tmp, capsys):
    """README_EXPORT.md's `pipeline(..., model=...)` line wrote the folder as JSON, where an emoji is
    two surrogate escapes: pasted into Python, a string transformers takes for a repo id."""
    import ast
    import re
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    out = tmp / "hf \U0001f600 'x'"
    assert in_process("export.py", [run, "--format", "hf", out], capsys).code == 0
    line = re.search(r"model=(.*)\)$", (out / "README_EXPORT.md").read_text(encoding="utf-8"), re.M).group(1)
    assert ast.literal_eval(line) == str(out)


def test_an_export_removes_the_temp_folders_of_killed_exports_beside_it(run, tmp, capsys):
    """An export killed (SIGKILL) while writing leaves its hidden temp folder, a model's weights: it went only
    when an export of that same name came, and an export is mostly killed for a name that was wrong. A live
    export's temp folder (its writer's pid is running) is kept."""
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    dead = tmp / ".wrong_name.999999999.abcd1234.tmp"  # a dead writer's (pid beyond pid_max)
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"\0" * 64)
    live = tmp / f".other.{os.getpid()}.abcd1234.tmp"
    live.mkdir()
    assert in_process("export.py", [run, "--format", "hf", tmp / "hf_swept"], capsys).code == 0
    assert not dead.exists() and live.is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("script", ["sample.py", "probe.py", "export.py"])
def test_an_empty_run_argument_is_refused_not_read_as_the_current_folder(run, script):
    """`python sample.py "$RUN"` with $RUN unset sampled from the current folder, if it held a run."""
    done = subprocess.run([sys.executable, str(ROOT / script), "", *(["out"] if script == "export.py" else [])],
                          cwd=run, env=ENV, capture_output=True, text=True, timeout=120)
    one_line(Result(done.returncode, done.stdout, done.stderr), "an empty path")


@pytest.mark.parametrize("terminal", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}],
                         ids=["ascii", "C locale, no UTF-8 mode"])
@pytest.mark.slow
def test_8_an_ascii_terminal_gets_escapes_not_a_traceback(run, terminal):
    """The tables' '\u2423' (a space) on a terminal that cannot show it (PYTHONIOENCODING=ascii, a Latin-1
    locale, a Windows console) was a UnicodeEncodeError; it is printed escaped, as stderr does. In the C
    locale without UTF-8 mode the streams are surrogateescape, which failed the same way."""
    env = {k: v for k, v in ENV.items() if k not in ("PYTHONIOENCODING", "PYTHONUTF8", "LANG", "LC_ALL", "LC_CTYPE")}
    done = subprocess.run([sys.executable, str(ROOT / "sample.py"), str(run), "--prompt", "the he", "--show-attention",
                           "--max-new-tokens", "2"], cwd=ROOT, env={**env, **terminal},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "\\u2423" in done.stdout


def test_the_c_locale_keeps_a_names_bytes_and_escapes_the_rest():
    import codecs

    import tinygpt.errors
    assert codecs.lookup_error("tinygpt_bytes_or_escape") is tinygpt.errors._bytes_back_or_escape  # registered
    assert "a\udcff\u00e9\u2423".encode("ascii", "tinygpt_bytes_or_escape") == b"a\xff\\xe9\\u2423"
    # surrogateescape gives a byte only \udc80-\udcff (the bytes 0x80-0xff); a lower one stays escaped, not 'A'
    assert "a\udc41\udcff".encode("ascii", "tinygpt_bytes_or_escape") == b"a\\udc41\xff"


REFUSING = """
import sys, time
from tinygpt.errors import UserError, run_cli, stop_while_starting
stop_while_starting()
def main(argv):
    print("x" * 10)
    time.sleep(float(sys.argv[1]))
    raise UserError(sys.argv[2])
run_cli(main)
"""


def test_a_refusal_whose_reader_left_is_its_one_line_and_exit_2():
    """stdout buffered (no PYTHONUNBUFFERED) and its reader gone before the refusal: the unwritten text is
    dropped at exit, so stderr holds the refusal alone (not Python's 'Exception ignored ... BrokenPipeError'),
    and the exit code stays 2 (not 120)."""
    env = {k: v for k, v in ENV.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, "-c", REFUSING, "0.5", "bad value"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader leaves before the command writes a byte
    err = proc.stderr.read().decode()
    assert (proc.wait(timeout=60), err) == (2, "error: bad value\n")


def test_a_refusal_with_stderr_closed_in_the_c_locale_exits_2():
    """`2>&-` in the C locale: stderr becomes os.devnull, opened ASCII and strict, and a refusal naming a
    non-ASCII value must still exit 2 (escaped), not 1 from a UnicodeEncodeError."""
    env = {**ENV, "LC_ALL": "C", "PYTHONUTF8": "0"}
    env.pop("PYTHONIOENCODING", None)
    script = REFUSING.replace("sys.argv[2]", ascii("bad name caf\u00e9"))  # (ASCII source: argv is read as ASCII)
    done = subprocess.run(["bash", "-c", f'{shlex.quote(sys.executable)} -c "$0" 0 2>&-', script], cwd=ROOT,
                          env=env, capture_output=True, timeout=60)
    assert done.returncode == 2 and done.stdout == b"x" * 10 + b"\n"


def test_a_command_that_closes_its_own_stdout_ends_0():
    code = "import sys\nfrom tinygpt.errors import run_cli\nrun_cli(lambda argv: sys.stdout.close())"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


def test_8_a_tilde_of_no_user_in_the_dataset_is_one_line(tmp, capsys):
    result = in_process("train.py", [*sets(tmp, tmp / "refused" / "tilde"), "--quiet", "--set",
                                     "data.dataset=~tinygpt_no_such_user/corpus.txt"], capsys)
    one_line(result, "data.dataset='~tinygpt_no_such_user/corpus.txt'", "names no user")


def test_8_a_nul_in_a_path_is_refused(tmp, capsys):
    (tmp / "nul.yaml").write_text('train: {out_dir: "out/a\\0b"}\n')
    one_line(in_process("train.py", [tmp / "nul.yaml"], capsys), "train.out_dir", "NUL")


@pytest.mark.parametrize("what", ["config", "dataset"])
def test_8_an_unreadable_file_is_refused(tmp, capsys, monkeypatch, what):
    target = tmp / "config.yaml" if what == "config" else tmp / "corpus_unreadable.txt"
    if what == "dataset":
        target.write_text(make_text(seed=3))
    method = "open" if what == "config" else "read_bytes"
    real = getattr(Path, method)

    def deny(self, *a, **kw):
        if self == target:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **kw)
    monkeypatch.setattr(Path, method, deny)
    result = in_process("train.py", [*sets(tmp, tmp / "refused" / "unreadable", dataset=target), "--quiet"], capsys)
    one_line(result, str(target), "Permission denied")


class FullDisk:
    """A file that takes `room` bytes, then fails as a full disk does (ENOSPC)."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):  # flush, fileno, close
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.f.close()


def test_8_a_full_disk_is_one_line_and_keeps_the_checkpoints(tmp, run, capsys, monkeypatch):
    """The disk fills up 10 kB into saving a checkpoint (train.max_iters raised, then --resume): one
    line, exit 2; ckpt.pt and best.pt are byte for byte what they were, and no temp file is left.
    (torch.save reports it as its zip writer's RuntimeError, raised while handling the OSError: that
    was a traceback.)"""
    out = tmp / "disk_full"
    shutil.copytree(run, out)
    before = files(out)
    from tinygpt import checkpoint
    real_fdopen = os.fdopen
    monkeypatch.setattr(checkpoint.os, "fdopen", lambda fd, *a, **kw: FullDisk(real_fdopen(fd, *a, **kw), 10_000))
    result = in_process("train.py", [*sets(tmp, out, "train.max_iters=45"), "--resume", "--quiet"], capsys)
    monkeypatch.setattr(checkpoint.os, "fdopen", real_fdopen)
    one_line(result, "No space left on device", "the previous file is intact")
    after = files(out)
    assert after["ckpt.pt"] == before["ckpt.pt"] and after["best.pt"] == before["best.pt"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="a file size limit (ulimit -f) is POSIX")
def test_8_a_file_size_limit_while_preparing_is_one_line(tmp):
    """ulimit -f (or a full disk) while the token arrays are written: numpy's short write is an
    OSError without an errno (that was a traceback); one line, and no folder left behind."""
    import resource
    prepared = tmp / "prepared_limited"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    done = subprocess.run([sys.executable, "-m", "data.prepare", tmp / "config.yaml", "--set",
                           "data.dataset=stories", "data.stories_chars=200000", "data.tokenizer=char",
                           f"data.prepared_dir={prepared}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, preexec_fn=limit)
    result = Result(done.returncode, done.stdout, done.stderr)
    one_line(result, "cannot write", str(prepared), "nothing was written")
    assert not prepared.exists()


# ======== 9-10: damaged files, resuming with another dtype ========


@pytest.mark.parametrize("name, changes, script, culprit", [
    ("model not a dict", {"model": [1, 2, 3]}, "sample.py", "'model' is a list"),
    ("vocab_size a string", {"config": lambda c: c["config"]["model"].update(vocab_size="many")}, "sample.py",
     "model.vocab_size='many'"),
    ("step a string", {"step": "ten"}, "export.py", "its step is 'ten'"),
    ("rng missing", {"rng": None}, "train.py", "missing rng"),
    ("optimizer damaged", {"optimizer": {"state": {}, "param_groups": "x"}}, "train.py", "cannot be resumed"),
    ("best_val_loss a string", {"best_val_loss": "low"}, "train.py", "its best_val_loss is 'low'"),
    ("elapsed_s a list", {"elapsed_s": [1.0]}, "train.py", "its elapsed_s is [1.0]"),
])
def test_9_a_damaged_checkpoint_is_one_line(tmp, run, capsys, name, changes, script, culprit):
    folder = tmp / "damaged" / name.replace(" ", "_")
    damaged_copy(run, folder, "ckpt.pt", **changes)
    args = {"sample.py": [folder], "export.py": [folder, tmp / "refused" / "export"],
            "train.py": [*sets(tmp, folder, "train.max_iters=40"), "--resume", "--quiet"]}[script]
    one_line(in_process(script, args, capsys), str(folder / "ckpt.pt"), culprit)


def test_9_a_gpt2_config_json_with_a_string_size_is_one_line(tmp, capsys):
    folder = tmp / "hf_string"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8,
                                                    "n_positions": 16, "vocab_size": "many"}))
    one_line(in_process("export.py", ["--from-hf", folder, tmp / "refused" / "hf_string"], capsys),
             "config.json", "vocab_size='many'")


@pytest.mark.parametrize("damage", ["empty train.bin", "broken tokenizer.json", "overwritten train.bin",
                                    "stub tokenizer.json", "meta.json's dtype", "deep meta.json"])
def test_9_a_damaged_prepared_folder_is_rebuilt(tmp, run, capsys, damage):
    """Damage of any kind, the size kept too (40 bytes of 0xff in train.bin: token ids out of range, an
    IndexError traceback; a tokenizer.json of the right vocab_size that is not a tokenizer: refused
    again and again, since data.prepare kept it), is rebuilt: the digest meta.json records is checked."""
    from data.prepare import prepared_dir
    from tinygpt.config import load_config
    prep = tmp / f"prepared_{damage.replace(' ', '_')}"
    cfg = load_config(tmp / "config.yaml", [f"data.dataset={tmp / 'corpus.txt'}", f"data.prepared_dir={prep}"])
    ok = in_process("data.prepare", [tmp / "config.yaml", "--set", f"data.dataset={tmp / 'corpus.txt'}",
                                     f"data.prepared_dir={prep}"], capsys)
    assert ok.code == 0
    folder = prepared_dir(cfg.data)
    good = files(folder)
    if damage == "empty train.bin":
        (folder / "train.bin").write_bytes(b"")
    elif damage == "overwritten train.bin":
        data = bytearray(good["train.bin"])
        data[100:140] = b"\xff" * 40
        (folder / "train.bin").write_bytes(bytes(data))
    elif damage == "stub tokenizer.json":
        (folder / "tokenizer.json").write_text(json.dumps({"vocab_size": json.loads(good["meta.json"])["vocab_size"]}))
    elif damage == "meta.json's dtype":  # the same bytes read as uint8: every token id split in two
        meta = json.loads(good["meta.json"])
        meta.update(dtype="uint8", train_tokens=2 * meta["train_tokens"], val_tokens=2 * meta["val_tokens"])
        (folder / "meta.json").write_text(json.dumps(meta))
    elif damage == "deep meta.json":  # a RecursionError traceback
        (folder / "meta.json").write_text("[" * 200_000)
    else:
        (folder / "tokenizer.json").write_text('{"kind": "char", "chars": "ab')
    result = in_process("train.py", [*sets(tmp, tmp / f"run_{damage.replace(' ', '_')}", f"data.prepared_dir={prep}",
                                           "train.max_iters=2"), "--quiet"], capsys)
    assert result.code == 0 and "Traceback" not in result.err, result.err
    assert files(folder) == good  # rebuilt, the same


def test_9_a_picture_that_cannot_be_drawn_loses_no_checkpoint(tmp, run, capsys, monkeypatch):
    """loss.png that cannot be written: the final eval's ckpt.pt was lost, since the plot came before
    the save. (A loss.png that is a folder is now refused before any work: test_a_run_file_...)"""
    import train
    from tinygpt.errors import UserError
    out = tmp / "png_refused"
    shutil.copytree(run, out)

    def refused(run_dir, guard=None):
        raise UserError(f"cannot write {run_dir / 'loss.png'}: Permission denied (nothing was written)")
    monkeypatch.setattr(train, "plot_run", refused)
    monkeypatch.setattr(train, "can_plot", lambda: True)  # (no note that matplotlib is missing: one line)
    one_line(in_process("train.py", [*sets(tmp, out, "train.max_iters=45", "train.plot=end"), "--resume", "--quiet"],
                        capsys), "loss.png", "Permission denied")
    from tinygpt.checkpoint import load_checkpoint
    assert load_checkpoint(out / "ckpt.pt")["step"] == 45


def test_12_a_signal_after_the_last_save_leaves_the_run_done(tmp, run, capsys, monkeypatch):
    """SIGTERM while the final picture is drawn, every checkpoint saved: the run is done, exit 0 (it
    said `interrupted`, 143, and a --resume then said done)."""
    import train
    out = tmp / "late_signal"
    shutil.copytree(run, out)

    def plot_and_signal(run_dir, guard=None):
        signal.raise_signal(signal.SIGTERM)
    monkeypatch.setattr(train, "plot_run", plot_and_signal)
    monkeypatch.setattr(train, "can_plot", lambda: True)  # (no note that matplotlib is missing: stderr empty)
    result = in_process("train.py", [*sets(tmp, out, "train.max_iters=45", "train.plot=end"), "--resume", "--quiet"],
                        capsys)
    assert result.code == 0 and "done: step 45" in result.out and result.err == "", result.err


def test_12_a_second_sigterm_while_a_signalled_run_stops_is_the_same_stop(tmp, run, capsys, monkeypatch):
    """Under torchrun a worker that stops on a signal gets SIGTERM again on its way out (torchrun's,
    once its peer has exited): that second one stopped rank 0's clean-up (metrics.csv unwritten) or
    made it say `interrupted` twice, a flaky DDP test. It is the same stop: one line, 143, all written."""
    import train
    out = tmp / "second_sigterm"
    shutil.copytree(run, out)
    real_step, real_save_metrics, written = train.train_step, train.Run.save_metrics, []

    def step_and_signal(*args):
        signal.raise_signal(signal.SIGTERM)
        return real_step(*args)

    def signal_and_save_metrics(self, metrics):
        signal.raise_signal(signal.SIGTERM)
        real_save_metrics(self, metrics)
        written.append(metrics[-1]["step"])
    monkeypatch.setattr(train, "train_step", step_and_signal)
    monkeypatch.setattr(train.Run, "save_metrics", signal_and_save_metrics)
    result = in_process("train.py", [*sets(tmp, out, "train.max_iters=45"), "--resume", "--quiet"], capsys)
    assert (result.code, result.err) == (128 + signal.SIGTERM, "interrupted\n"), result.err
    assert written, "the second SIGTERM stopped the clean-up"
    from tinygpt.checkpoint import load_checkpoint
    assert load_checkpoint(out / "ckpt.pt")["step"] == 31


def test_12_after_stopping_on_a_signal_another_is_ignored(capsys):
    """errors.stopping_on_a_signal: a SIGTERM or SIGHUP after it neither raises nor adds a line."""
    from tinygpt.errors import run_cli, stopping_on_a_signal

    def stops(argv):
        stopping_on_a_signal()
        print("interrupted", file=sys.stderr)
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGHUP)
        sys.exit(143)
    with pytest.raises(SystemExit) as stopped:
        run_cli(stops, [])
    assert stopped.value.code == 143 and capsys.readouterr().err == "interrupted\n"

    def killed(argv):  # a new command: a signal stops it again
        signal.raise_signal(signal.SIGTERM)
        time.sleep(5)
    with pytest.raises(SystemExit) as stopped:
        run_cli(killed, [])
    assert stopped.value.code == 143 and capsys.readouterr().err == "interrupted\n"


def test_9_a_damaged_metrics_csv_is_one_line(tmp, run, capsys):
    out = tmp / "bad_metrics"
    shutil.copytree(run, out)
    (out / "metrics.csv").write_text("step,train_loss\n10,3.1\nnot a number,oops\n")
    # train.py --resume restores the rows from ckpt.pt, which carries them; compare.py has no ckpt.pt to ask
    result = in_process("train.py", [*sets(tmp, out, "train.max_iters=40"), "--resume", "--quiet"], capsys)
    said = f"note: {out / 'metrics.csv'} was damaged: its 6 rows, of steps 0 to 30, restored"
    assert result.code == 0 and said in result.err, result.err
    assert (out / "metrics.csv").read_text().startswith((run / "metrics.csv").read_text())
    (out / "metrics.csv").write_text("step,train_loss\n10,3.1\nnot a number,oops\n")
    one_line(in_process("compare.py", [out, "--out", tmp / "cmp_bad"], capsys), "metrics.csv", "damaged")
    (out / "metrics.csv").write_text("train_loss,val_loss\n3.1,3.2\n")  # no step column
    one_line(in_process("compare.py", [out, "--out", tmp / "cmp_bad"], capsys), "metrics.csv", "no step column")


def test_9_a_metrics_csv_cut_off_mid_row_is_damaged(tmp, run, capsys):
    """A row with fewer fields than the header (a file cut off mid-row) was read as a row whose
    missing cells are empty, and a last row without its line end as whole: compare.py showed the
    run at that step. tinygpt ends every row with a line end and writes every field."""
    out = tmp / "cut_metrics"
    shutil.copytree(run, out)
    whole = (out / "metrics.csv").read_text()
    for text, said in ((whole + "40,2.6861,2.6937,7.039e-04\n", "row 7 has another number of fields than the header"),
                       (whole[:-3], "its last row is cut short: no line end"),
                       (whole + "40,1,2,3,4,5,6,7\n", "row 7 has another number of fields")):
        (out / "metrics.csv").write_text(text)
        one_line(in_process("compare.py", [out, "--out", tmp / "cmp_cut"], capsys), "metrics.csv", "damaged", said)


def test_10_resume_may_change_the_dtype_to_float16(tmp, run, capsys):
    """train settings may change on --resume: float32 -> float16 starts a fresh gradient scaler."""
    out = tmp / "to_float16"
    shutil.copytree(run, out)
    result = in_process("train.py", [*sets(tmp, out, "train.dtype=float16", "train.max_iters=32",
                                           "train.eval_interval=32"), "--resume", "--quiet"], capsys)
    assert result.code == 0 and "done: step 32" in result.out, result.err
    from tinygpt.checkpoint import load_checkpoint
    assert load_checkpoint(out / "ckpt.pt")["scaler"]  # float16's scaler state is saved now


def test_10_resume_below_the_runs_step_is_refused(tmp, run, capsys):
    """train.max_iters under the step a run is at (one under it: the bound is the step itself): its config.yaml
    would no longer describe it."""
    out = tmp / "shorter"
    shutil.copytree(run, out)
    before = files(out)
    one_line(in_process("train.py", [*sets(tmp, out, "train.max_iters=29"), "--resume", "--quiet"], capsys),
             "--resume", "train.max_iters=29", "step 30")
    assert files(out) == before
    again = in_process("train.py", [*sets(tmp, out), "--resume", "--quiet"], capsys)  # its own max_iters: done
    assert again.code == 0 and "done: step 30" in again.out, again.err


# ======== 11-13: flags ========


@pytest.mark.parametrize("args, culprit", [
    (["--temperature", "nan"], "--temperature=nan"),
    (["--temperature", "inf"], "--temperature=inf"),
    (["--temperature", "1e309"], "--temperature=inf must be a finite number"),  # (it said: "a number >= 0")
    (["--temperature", "1e-45"], "too small"),
    (["--temperature", "4e38"], "too large"),
    (["--seed", str(2**63)], "--seed"),
    (["--seed", "-1"], "--seed"),
])
def test_11_sampling_flags_out_of_range(run, capsys, args, culprit):
    one_line(in_process("sample.py", [run, *args], capsys), culprit)


def test_11_the_temperature_limits_sit_at_min_and_max_temperature(run, capsys):
    """Just past each limit is refused, the limit itself samples: the tests above try only values far past them."""
    import sample
    one_line(in_process("sample.py", [run, "--temperature", repr(sample.MIN_TEMPERATURE * 0.999)], capsys), "too small")
    one_line(in_process("sample.py", [run, "--temperature", repr(sample.MAX_TEMPERATURE * 1.001)], capsys), "too large")
    one_line(in_process("sample.py", [run, "--temperature", "1e-7"], capsys), "too small")  # (the limit, 1e-6, as said)
    for limit in (sample.MIN_TEMPERATURE, sample.MAX_TEMPERATURE):
        ok = in_process("sample.py", [run, "--temperature", f"{limit:g}", "--max-new-tokens", "2", "--prompt", "Anna"],
                        capsys)
        assert ok.code == 0, ok.err


def test_11_a_tiny_top_p_keeps_the_most_likely_token(run, capsys):
    """Found by the fuzz test: --top-p 1e-300 is 0 in float32, which dropped every token (NaN)."""
    tiny = in_process("sample.py", [run, "--top-p", "1e-300", "--max-new-tokens", "20", "--prompt", "Anna"], capsys)
    greedy = in_process("sample.py", [run, "--temperature", "0", "--max-new-tokens", "20", "--prompt", "Anna"], capsys)
    assert tiny.code == 0 and tiny.out == greedy.out, tiny.err


def test_a_folder_under_a_dead_link_names_the_link(tmp, capsys):
    """train.out_dir=LINK/run (data.prepared_dir too) with LINK a link to nothing: `cannot be created: File
    exists`, of a path that does not exist."""
    (tmp / "gone_link").symlink_to(tmp / "gone")
    out = tmp / "gone_link" / "a" / "run"
    one_line(in_process("train.py", [*sets(tmp, out)], capsys), f"train.out_dir='{out}' cannot be created: it lies "
             f"under a link ({tmp / 'gone_link'} -> {tmp / 'gone'}) that leads to no file or folder")
    assert not (tmp / "gone").exists()


def test_11_a_negative_stop_at_is_refused(tmp, capsys):
    """-1, just under the bound (0: stop after step 0's checkpoint)."""
    out = tmp / "refused" / "stop_at"
    one_line(in_process("train.py", [*sets(tmp, out), "--stop-at", "-1", "--quiet"], capsys), "--stop-at=-1", ">= 0")
    assert not out.exists()


def test_11_a_train_seed_beyond_64_bits_is_refused(tmp, capsys):
    one_line(in_process("train.py", [*sets(tmp, tmp / "refused" / "seed", f"train.seed={2**63}")], capsys),
             "train.seed")


@pytest.mark.parametrize("args, culprit", [
    (["--steps", "-1"], "--steps=-1"),
    (["--loss-steps", "-3"], "--loss-steps=-3"),
    (["--gen-heads", "0"], "--gen-heads=0"),
    (["--gen-heads", "5", "--gen-embd", "32"], "not divisible"),
    (["--gen-block", "0"], "--gen-block=0"),
    (["--json", "."], "is a folder"),
])
def test_13_bench_flags_out_of_range(capsys, args, culprit):
    one_line(in_process("bench.py", ["configs/stories.yaml", *args], capsys), culprit)


def test_13_an_output_folder_that_is_a_file(tmp, run, capsys):
    (tmp / "taken.txt").write_text("x")
    one_line(in_process("sweep.py", [tmp / "config.yaml", "--grid", "model.n_head=1,2", "--out", tmp / "taken.txt"],
                        capsys), "--out", "is a file")
    one_line(in_process("compare.py", [run, "--out", tmp / "taken.txt"], capsys), "--out", "is a file")
    one_line(in_process("export.py", [run, tmp / "taken.txt" / "hf"], capsys), "taken.txt is a file")


# ======== 12: Ctrl-C ========


@pytest.mark.slow
@pytest.mark.parametrize("rank", ["0", "1"])
def test_12_a_torchrun_process_with_no_one_to_meet_stops_on_a_signal_and_says_what_it_waits_for(rank):
    """torchrun's variables set with no process to meet (a cluster's job, a mistyped MASTER_ADDR):
    init_process_group retried through every signal, so `kill` and Ctrl-C did nothing for its 30
    minutes, silently (rank 0). Now a note after RENDEZVOUS_NOTE_S (1 s here), and SIGTERM stops it."""
    import socket
    with socket.socket() as s:  # a port no one listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**ENV, "RANK": rank, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    code = ("from tinygpt import runtime; from tinygpt.errors import run_cli\n"
            "runtime.RENDEZVOUS_NOTE_S = 1.0\n"
            "run_cli(lambda argv: runtime.Distributed.from_env(runtime.resolve_device('cpu')), None)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        import select
        assert select.select([proc.stderr], [], [], 60)[0], "no word within 60 s"
        line = proc.stderr.readline()  # the note: waiting, as it is told to
        assert line.startswith(f"note: process {rank} of 2 has waited 1 s for the others at "
                               f"MASTER_ADDR:MASTER_PORT=127.0.0.1:{port}; for a run of one process, unset RANK"), line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 143
    finally:
        proc.kill()
        proc.communicate()


# Loaded by Python at start-up (sitecustomize, from PYTHONPATH): the signal arrives the moment the
# command starts importing torch, the slow import (a second or two) in which a Ctrl-C is likeliest
SIGNAL_AT_IMPORT = """
import importlib.abc, os, signal, sys
class SignalAtImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            signal.raise_signal(int(os.environ["SIGNAL_AT_IMPORT"]))
        return None
sys.meta_path.insert(0, SignalAtImport())
"""
COMMANDS = [["train.py", "configs/stories.yaml"], ["sample.py", "out/none"], ["probe.py", "out/none"],
            ["sweep.py", "configs/stories.yaml", "--grid", "model.n_head=1,2"], ["compare.py", "out/none"],
            ["export.py", "out/none", "--format", "hf", "out/none-hf"], ["bench.py"], ["-m", "data.prepare", "configs/stories.yaml"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0] if c[0] != "-m" else c[1])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=lambda s: signal.Signals(s).name)
def test_12_a_signal_while_a_command_starts_is_one_line(tmp_path, command, signum):
    """Ctrl-C (or kill) while a command still imports torch, before run_cli is in charge: one line
    `interrupted` and 128 + the signal, as later on (a Ctrl-C printed a traceback from inside torch's
    import, and exit 1 or the signal's death)."""
    (tmp_path / "sitecustomize.py").write_text(SIGNAL_AT_IMPORT)
    env = {**ENV, "PYTHONPATH": str(tmp_path), "SIGNAL_AT_IMPORT": str(int(signum))}
    done = subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (128 + signum, "interrupted\n"), done.stderr[-2000:]
    assert not (ROOT / "out" / "none-hf").exists()


@pytest.mark.slow
def test_12_a_torchrun_worker_but_rank_0_stops_on_a_signal_without_a_word(tmp_path, tmp, run):
    """torchrun stops every worker with SIGTERM once one has exited (a refused --set value, while
    the others still import torch) and passes a Ctrl-C on: each said `interrupted`, about a stop the
    user never asked for. Rank 0 speaks for the run; the others stop with the code alone."""
    (tmp_path / "sitecustomize.py").write_text(SIGNAL_AT_IMPORT)
    worker = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}  # as torchrun sets
    env = {**ENV, "PYTHONPATH": str(tmp_path), "SIGNAL_AT_IMPORT": str(int(signal.SIGTERM)), **worker}
    done = subprocess.run([sys.executable, "train.py", "configs/stories.yaml"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stderr) == (128 + signal.SIGTERM, ""), done.stderr[-2000:]
    proc = subprocess.Popen([sys.executable, "sample.py", str(run), "--max-new-tokens", "1000000", "--prompt", "Anna"],
                            cwd=ROOT, env={**ENV, **worker}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:  # later, with run_cli in charge
        read_until(proc.stdout, b"Anna", drain=True)
        proc.send_signal(signal.SIGTERM)
        result = wait_or_dump(proc)
    finally:
        proc.kill()
        proc.wait()
    assert (result.code, result.err) == (128 + signal.SIGTERM, ""), result.err[-2000:]


REFUSING_WORKER = """
import sys
from tinygpt import errors
errors.PEER_GRACE_S = float(sys.argv[1])
def main(argv):
    print("ready", flush=True)
    raise errors.UserError("model.n_head=3 is refused")
errors.run_cli(main, [])
"""


def test_12_a_torchrun_worker_refusing_a_setting_leaves_the_saying_to_rank_0():
    """Every worker refuses a bad --set alike; where rank 1 exited first, torchrun stopped rank 0 with
    SIGTERM and it said `interrupted` after the refusal. A worker but rank 0 waits before its refusal:
    stopped meanwhile (rank 0 refused first), it exits without a word; else it says its own."""
    worker = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    proc = subprocess.Popen([sys.executable, "-c", REFUSING_WORKER, "30"], cwd=ROOT, env={**ENV, **worker},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        read_until(proc.stdout, b"ready", drain=True)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # as torchrun, once rank 0 has exited
        result = wait_or_dump(proc)
    finally:
        proc.kill()
        proc.wait()
    assert (result.code, result.err) == (128 + signal.SIGTERM, ""), result.err[-2000:]
    done = subprocess.run([sys.executable, "-c", REFUSING_WORKER, "0.1"], cwd=ROOT, env={**ENV, **worker},
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, "error: model.n_head=3 is refused\n")


@pytest.mark.parametrize("rank, printed", [("0", True), ("1", False)])
def test_12_under_torchrun_the_help_is_printed_once(capsys, monkeypatch, rank, printed):
    """`torchrun --nproc_per_node=2 train.py --help` printed the help twice, once a process."""
    for key, value in {"RANK": rank, "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    result = in_process("train.py", ["--help"], capsys)
    assert result.code == 0 and ("usage: train.py" in result.out) == printed, result.out


def test_12_a_rank_left_in_the_shell_is_no_torchrun_launch(tmp, run, capsys, monkeypatch):
    """RANK set by another tool, outside torchrun: train.py (and each run of a sweep) ended in
    torch.distributed's traceback ("WORLD_SIZE expected"), and a Ctrl-C of sample.py said nothing."""
    monkeypatch.setenv("RANK", "1")
    result = in_process("train.py", [*sets(tmp, tmp / "rank_alone", "train.max_iters=10"), "--quiet"], capsys)
    assert result.code == 0 and "Traceback" not in result.err, result.err[-2000:]
    from tinygpt.errors import run_cli

    def ctrl_c(argv):
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as stopped:
        run_cli(ctrl_c, [])
    assert stopped.value.code == 130 and capsys.readouterr().err == "interrupted\n"


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP (Windows)")
def test_12_the_suites_commands_never_inherit_an_ignored_stop_signal():
    """A suite started as a background job (SIGINT ignored) or under nohup (SIGHUP) still gives
    the commands its tests start the default dispositions (conftest.py), or their Ctrl-C tests
    would wait out their timeouts."""
    probe = "import signal; print(*(signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGINT, signal.SIGHUP)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_12_signals_the_process_ignores_stay_ignored():
    """`nohup` ignores SIGHUP so that a run outlives the terminal, and a script's background job
    (`cmd &`) ignores SIGINT: every command's handlers (run_cli's, train.py's StopFlag, sweep.py's
    forwarding) leave an ignored signal ignored, and take the others (they replaced all three)."""
    import sweep
    from tinygpt.errors import restore_signals, stop_on_signals
    from tinygpt.runtime import StopFlag
    ignored = (signal.SIGINT, signal.SIGHUP)
    before = {s: signal.signal(s, signal.SIG_IGN) for s in ignored}
    try:
        def handled() -> set[int]:
            return {s for s in (*ignored, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN}
        previous = stop_on_signals()
        assert handled() == {signal.SIGTERM} and set(previous) == {signal.SIGTERM}
        restore_signals(previous)
        flag = StopFlag()
        assert handled() == {signal.SIGTERM}
        flag.restore()
        with sweep.Runner(jobs=1).forwarding_signals():
            assert handled() == {signal.SIGTERM} and signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        restore_signals(before)


def test_12_ctrl_c_is_one_line_exit_130(capsys):
    from tinygpt.errors import run_cli

    def interrupted(argv):
        raise KeyboardInterrupt
    with pytest.raises(SystemExit) as info:
        run_cli(interrupted, [])
    assert info.value.code == 130 and capsys.readouterr().err == "interrupted\n"


def read_until(stream, marker: bytes, timeout: float = 120, drain: bool = False) -> bytes:
    """Read a child's pipe until `marker` appears (a thread: the read blocks). `drain`: then go on
    reading it to its end, as a terminal would, so that a child streaming text never waits on a full
    pipe (the rest is not kept: without `drain` the caller reads it)."""
    seen, found = bytearray(), threading.Event()
    fd = os.dup(stream.fileno())  # the thread's own: the test may close the pipe while it still reads

    def reader():
        try:
            while not found.is_set() or drain:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                if not found.is_set():
                    seen.extend(chunk)
                    if marker in seen:
                        found.set()
        finally:
            os.close(fd)
            found.set()  # the end of the output (the marker never came, or it did and was drained)
    threading.Thread(target=reader, daemon=True).start()
    found.wait(timeout)
    assert marker in seen, seen[-2000:]
    return bytes(seen)


def wait_or_dump(proc: subprocess.Popen, timeout: float = 120) -> Result:
    """The child's exit code and stderr; if it has not ended within `timeout`, a failure showing
    where it was stuck (SIGABRT makes its faulthandler, on through ENV, print every thread's stack)."""
    try:
        return Result(proc.wait(timeout=timeout), "", proc.stderr.read().decode())
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait()
    pytest.fail(f"{proc.args[1:3]} still running after {timeout} s:\n{proc.stderr.read().decode()[-4000:]}")


def test_12_the_exit_code_survives_a_stderr_that_is_gone(monkeypatch):
    """After a hang-up the terminal is gone, and writing `interrupted` there fails (EIO): the
    command still exits with the signal's code (it became 1, with a traceback nobody could read)."""
    from tinygpt.errors import Terminated, run_cli

    class Gone:
        def write(self, text):
            raise OSError(errno.EIO, "Input/output error")

        def flush(self):
            raise OSError(errno.EIO, "Input/output error")

    def hung_up(argv):
        raise Terminated(signal.SIGHUP)

    monkeypatch.setattr(sys, "stderr", Gone())
    with pytest.raises(SystemExit) as stopped:
        run_cli(hung_up, [])
    assert stopped.value.code == 128 + signal.SIGHUP


@pytest.mark.parametrize("code", [0, 2])
def test_12_a_signal_while_python_shuts_down_leaves_the_exit_code(tmp, code):
    """A SIGTERM after a command's work was done, while Python shut down (torch's teardown takes a
    few tenths of a second), killed it silently: exit 143 after a finished export, which a script
    took for a failed one. Here shutdown is slowed by an atexit hook that says when it starts."""
    script = tmp / f"finishes_{code}.py"
    script.write_text(
        "import atexit, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tinygpt.errors import UserError, run_cli\n"
        "def slow_shutdown():\n"
        "    print('shutting down', flush=True)\n"
        "    time.sleep(1)\n"
        "atexit.register(slow_shutdown)\n"
        "def main(argv):\n"
        f"    if {code}:\n"
        "        raise UserError('refused')\n"
        "run_cli(main)\n")
    proc = subprocess.Popen([sys.executable, str(script)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        read_until(proc.stdout, b"shutting down")
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            proc.send_signal(signum)
        result = wait_or_dump(proc)
    finally:
        proc.kill()
        proc.wait()
    assert result.code == code and result.err == ("error: refused\n" if code else ""), result


@pytest.mark.parametrize("code", [0, 2])
def test_12_output_left_for_a_reader_who_never_reads_does_not_make_the_command_unstoppable(tmp, code):
    """Output still buffered when the work ended, on a full pipe nobody reads: Python's flush at exit
    waited, with stop signals ignored (after the work, so that shutdown is not cut short): only
    SIGKILL ended it. It is written while a signal still stops the command: `interrupted` and 143
    after the work, the refusal's 2 and its line after a refusal."""
    script = tmp / f"full_pipe_{code}.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tinygpt.errors import UserError, run_cli\n"
        "def main(argv):\n"
        "    print('x' * 60_000, flush=True)  # nearly fills the pipe (64 KiB)\n"
        "    print('y' * 6_000)  # buffered: it does not fit\n"
        "    print('ready', file=sys.stderr, flush=True)\n"
        f"    if {code}:\n"
        "        raise UserError('refused')\n"
        "run_cli(main)\n")
    env = {k: v for k, v in ENV.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = read_until(proc.stderr, b"error: refused\n" if code else b"ready\n")  # (a refusal: its line first)
        time.sleep(0.5)  # into the flush that waits
        proc.send_signal(signal.SIGTERM)
        result = wait_or_dump(proc, timeout=20)
    finally:
        proc.kill()
        proc.wait()
    told = seen.decode().partition("ready\n")[2] + result.err
    assert (result.code, told) == ((143, "interrupted\n") if code == 0 else (2, "error: refused\n")), result


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sets a pipe's size (Linux)")
def test_12_a_signal_while_writing_to_a_full_pipe_stops_the_command(tmp):
    """SIGTERM to `sample.py --list-vocab` whose last 1 kB does not fit into a pipe nobody reads:
    it said `interrupted`, then waited on the same output again at its end, until a second signal.
    One signal stops it: 143 within STOPPED_FLUSH_S, what the reader never took dropped."""
    import fcntl

    from model import GPT, ModelConfig
    from tinygpt import tokenizer as tk
    from tinygpt.checkpoint import save_checkpoint
    from tinygpt.config import Config, config_to_dict
    words = tk.build_tokenizer("word", " ".join(f"word{i}" for i in range(5200)))  # a 66.6 kB listing
    cfg = Config(model=ModelConfig(block_size=8, n_layer=1, n_head=1, n_embd=8, vocab_size=words.vocab_size))
    save_checkpoint(tmp / "big_vocab" / "ckpt.pt", {"config": config_to_dict(cfg), "tokenizer": words.to_dict(),
                                                     "model": GPT(cfg.model).state_dict(), "step": 0})
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, 1031, 65536)  # F_SETPIPE_SZ: 64 KiB, Linux's default
    env = {k: v for k, v in ENV.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "sample.py"), str(tmp / "big_vocab"), "--list-vocab"],
                            env=env, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and "pipe_write" not in Path(f"/proc/{proc.pid}/wchan").read_text():
            time.sleep(0.2)  # until it waits on the pipe, its listing written into its buffer
        time.sleep(1)
        start = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        result = wait_or_dump(proc, timeout=20)
    finally:
        proc.kill()
        proc.wait()
        os.close(read_end)
    assert (result.code, result.err) == (143, "interrupted\n"), result
    assert time.perf_counter() - start < 10


@pytest.mark.slow
@pytest.mark.parametrize("signum", KILL_OR_HANGUP, ids=lambda s: signal.Signals(s).name)
def test_12_every_command_stops_on_sigterm_and_sighup_with_one_line(tmp, run, signum):
    """run_cli, which every command runs through, turns SIGTERM and SIGHUP into the one line
    `interrupted` and exit 143 or 129, as Ctrl-C's 130: here sample.py while its text streams out
    (it used to die silently, its exit status the signal's)."""
    proc = popen("sample.py", run, "--max-new-tokens", "1000000", "--prompt", "Anna")
    try:
        read_until(proc.stdout, b"Anna", drain=True)
        proc.send_signal(signum)
        result = wait_or_dump(proc)
    finally:
        proc.kill()
        proc.wait()
    assert (result.code, result.err) == (128 + signum, "interrupted\n"), result.err[-2000:]


@pytest.mark.slow
def test_12_ctrl_c_while_sampling_preparing_and_training_twice(tmp, run):
    """One 'interrupted' line and exit 130, in the middle of each: sampling (text streams out),
    preparing data (the tokenizing bar shows), and training after a second Ctrl-C (the first asks
    for a save at the end of the step; the second stops inside the slow step): ckpt.pt stays whole."""
    big = tmp / "big.txt"
    big.write_text(make_text(n_words=2_400_000, seed=5))  # 10M characters: a progress bar for about a second
    out = tmp / "twice"
    procs = {
        "sample": popen("sample.py", run, "--max-new-tokens", "1000000", "--prompt", "Anna"),
        "prepare": subprocess.Popen([sys.executable, "-m", "data.prepare", tmp / "config.yaml", "--set",
                                     f"data.dataset={big}", f"data.prepared_dir={tmp / 'prepared_big'}"],
                                    cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE),
        # one optimizer step of 20,000 micro-steps: seconds long, so both signals land inside it
        "train": popen("train.py", *sets(tmp, out, "train.grad_accum=20000", "train.max_iters=1000"), "--quiet"),
    }
    try:
        # preparing first: its work ends by itself (a signal while Python shuts down after it is not
        # an interruption); sampling and the long step wait
        read_until(procs["prepare"].stderr, b"tokenizing")
        procs["prepare"].send_signal(signal.SIGINT)
        read_until(procs["sample"].stdout, b"Anna", drain=True)
        procs["sample"].send_signal(signal.SIGINT)
        wait_for(lambda: (out / "ckpt.pt").exists() or procs["train"].poll() is not None)
        time.sleep(0.5)  # past step 0's save and the signal check after it: inside the long step
        procs["train"].send_signal(signal.SIGINT)
        time.sleep(1.5)  # past StopFlag.GRACE_S: a second Ctrl-C, not a duplicate of the first
        procs["train"].send_signal(signal.SIGINT)
        results = {name: wait_or_dump(p) for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    for name, result in results.items():
        assert result.code == 130, (name, result.err[-2000:])
        assert "Traceback" not in result.err and result.err.rstrip().endswith("interrupted"), (name, result.err)
    assert results["sample"].err == "interrupted\n" and results["train"].err == "interrupted\n"
    assert not (tmp / "prepared_big").exists() or not any((tmp / "prepared_big").iterdir())
    from tinygpt.checkpoint import load_checkpoint
    assert load_checkpoint(out / "ckpt.pt")["step"] == 0 and not (out / ".lock").exists()


# ======== 14: messages that mislead ========


class RunsShell:
    """A pickled payload that would call os.system when unpickled."""

    def __reduce__(self):
        return (os.system, ("echo PWNED",))


def test_14_a_pickle_payload_is_named_as_such(tmp, capsys):
    path = tmp / "evil.pt"
    torch.save({"format": "tinygpt-checkpoint", "x": RunsShell()}, path)
    result = in_process("sample.py", [path], capsys)
    one_line(result, str(path), "holds pickled Python objects", "not loaded")
    assert "PWNED" not in result.out and "weights_only=False" not in result.err


def test_14_a_flipped_bit_in_a_name_torch_wrote_is_damage_not_a_payload(tmp, run, capsys):
    """One bit of `_rebuild_tensor_v2` flipped (3 of ~3,700 single-bit flips in a checkpoint): the file was said to
    hold pickled Python objects, code that could run, where it was damaged; a torch name that exists but is not
    allowed stays a pickled object."""
    data = bytearray((run / "best.pt").read_bytes())
    at = data.find(b"_rebuild_tensor_v2") + 10
    data[at] ^= 1  # _rebuild_tdnsor_v2
    path = tmp / "flipped_name.pt"
    path.write_bytes(bytes(data))
    one_line(in_process("sample.py", [path], capsys), str(path), "is corrupted: it names "
             "'torch._utils._rebuild_tdnsor_v2', one character off torch's torch._utils._rebuild_tensor_v2",
             "use another copy")
    # any other name is a pickled object's: a torch module, a torch function (whether or not its module was imported)
    for name, thing in (("module", torch.nn.Identity()), ("function", torch.nn.functional.relu)):
        torch.save({"format": "tinygpt-checkpoint", "x": thing}, tmp / f"{name}.pt")
        one_line(in_process("sample.py", [tmp / f"{name}.pt"], capsys), "holds pickled Python objects")


def test_14_a_shape_mismatch_names_the_tensor_and_both_shapes(tmp, run, capsys):
    def widen(ckpt):
        ckpt["model"]["pos_emb.weight"] = torch.zeros(64, 32)
    path = damaged_copy(run, tmp / "misshapen", model=widen)
    one_line(in_process("sample.py", [path], capsys), "'pos_emb.weight'", "(64, 32)", "(32, 32)")


def test_14_export_from_hf_refuses_a_malicious_bin_in_one_line(tmp, capsys):
    folder = tmp / "evil_hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8,
                                                    "n_positions": 16, "vocab_size": 50257}))
    torch.save({"wte.weight": RunsShell()}, folder / "pytorch_model.bin")
    result = in_process("export.py", ["--from-hf", folder, tmp / "refused" / "from_hf"], capsys)
    line = one_line(result, "pytorch_model.bin", "holds pickled Python objects")
    assert "weights_only" not in line.replace("weights_only loading refused", "")


def test_14_a_list_used_as_a_yaml_key(tmp, capsys):
    (tmp / "listkey.yaml").write_text("model: {[n_layer, n_head]: 2}\n")
    line = one_line(in_process("train.py", [tmp / "listkey.yaml"], capsys), "listkey.yaml", "used as a key")
    assert "tag" not in line


# ======== 15-16: small things ========


def test_9_init_from_with_another_tokenizer_names_it(tmp, run, capsys):
    """It blamed model.vocab_size, a key the config does not hold."""
    out = tmp / "refused" / "init_word"
    result = in_process("train.py", [*sets(tmp, out, f"train.init_from={run}", "data.tokenizer=word"), "--quiet"], capsys)
    one_line(result, f"train.init_from='{run}' was trained with another tokenizer")


def test_9_init_from_a_file_that_is_no_checkpoint_names_the_key(tmp, run, capsys):
    """`train.init_from=RUN/metrics.csv`: `RUN/metrics.csv is truncated, corrupted or not a checkpoint`,
    the key that named it left out (its siblings, not found or a config, named it); now the run's file, named."""
    out = tmp / "refused" / "init_csv"
    result = in_process("train.py", [*sets(tmp, out, f"train.init_from={run}/metrics.csv"), "--quiet"], capsys)
    line = one_line(result, f"train.init_from: {run}/metrics.csv is a file of the run {run}, not its checkpoint")
    assert line.startswith("error: train.init_from: ")


def test_9_init_from_a_run_with_a_damaged_best_pt_points_to_its_ckpt_pt(tmp, run, capsys):
    """As sample.py and export.py do: the run's other checkpoint loads, and the line says so."""
    copy = tmp / "refused" / "damaged_best"
    shutil.copytree(run, copy)
    best = (copy / "best.pt").read_bytes()
    (copy / "best.pt").write_bytes(best[:len(best) // 2])
    out = tmp / "refused" / "init_damaged"
    result = in_process("train.py", [*sets(tmp, out, f"train.init_from={copy}"), "--quiet"], capsys)
    one_line(result, f"train.init_from: {copy}/best.pt is truncated",
             f"the run's other checkpoint loads: give it instead, {copy}/ckpt.pt")
    assert not out.exists()


def test_15_a_file_named_tensorboard_in_out_dir_is_one_line(tmp, capsys):
    pytest.importorskip("tensorboard")
    folder = tmp / "refused" / "tb_file"
    folder.mkdir(parents=True)
    (folder / "tensorboard").write_text("mine")
    result = in_process("train.py", [*sets(tmp, folder, "train.tensorboard=true"), "--quiet"], capsys)
    one_line(result, "tensorboard is a file")
    assert [p.name for p in folder.iterdir()] == ["tensorboard"]


def test_15_a_users_loss_png_is_never_overwritten(tmp, capsys):
    folder = tmp / "pictures"
    folder.mkdir()
    (folder / "loss.png").write_bytes(b"\x89PNG my own plot")
    one_line(in_process("train.py", [*sets(tmp, folder), "--quiet"], capsys), "loss.png", "not from a tinygpt run")
    assert files(folder) == {"loss.png": b"\x89PNG my own plot"}


def test_15_a_users_config_yaml_is_never_overwritten(tmp, run, capsys):
    """A config.yaml in train.out_dir that no run wrote (no resolved-config header) is the user's, even
    a valid one, even the very config being trained: refused, named, untouched. A run's own resumes."""
    folder = tmp / "my_configs"
    folder.mkdir()
    (folder / "config.yaml").write_text(CONFIG, encoding="utf-8")
    args = [folder / "config.yaml", *sets(tmp, folder)[1:], "--quiet"]  # out_dir: the config's own folder
    one_line(in_process("train.py", args, capsys), str(folder), "config.yaml", "not from a tinygpt run")
    assert files(folder) == {"config.yaml": CONFIG.encode()}
    own = tmp / "own_config"
    shutil.copytree(run, own)
    text = (own / "config.yaml").read_text(encoding="utf-8")  # the header of tinygpt before 2026-11-29
    (own / "config.yaml").write_text("# model.vocab_size = 60 (from the tokenizer)\n" + text.split("\n", 1)[1])
    resumed = in_process("train.py", [own / "config.yaml", "--resume", "--quiet", "--set", f"train.out_dir={own}",
                                      "train.max_iters=32", "train.eval_interval=32"], capsys)
    assert resumed.code == 0 and "done: step 32" in resumed.out, resumed.err


def test_15_tilde_in_out_dir_is_the_home_folder(tmp, capsys, monkeypatch):
    from tinygpt.config import load_config
    monkeypatch.setenv("HOME", str(tmp / "home"))
    monkeypatch.chdir(tmp)
    cfg = load_config(tmp / "config.yaml", ["train.out_dir=~/x", "data.prepared_dir=~/prep", "data.dataset=~/c.txt"])
    home = str(tmp / "home")
    paths = (cfg.train.out_dir, cfg.data.prepared_dir, cfg.data.dataset)
    assert paths == (f"{home}/x", f"{home}/prep", f"{home}/c.txt")


def test_15_concurrent_preparations_agree(tmp):
    """Four threads prepare the same data at once, 15 times over: each gets the complete folder, also
    when another's folder appears between its check and its rename (atomic_dir looks again)."""
    from data.prepare import load_prepared, prepare
    from tinygpt.config import load_config
    for round in range(15):
        cfg = load_config(tmp / "config.yaml", [f"data.dataset={tmp / 'corpus.txt'}",
                                                f"data.prepared_dir={tmp / 'race' / str(round)}"])
        results, errors = [], []

        def worker():
            try:
                folder = prepare(cfg, show_progress=False)
                results.append((folder, len(load_prepared(folder).train)))
            except BaseException as e:  # reported below
                errors.append(e)
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(set(results)) == 1, (errors, results)
        assert [p.name for p in (tmp / "race" / str(round)).iterdir()] == [results[0][0].name]


def test_16_a_flipped_byte_in_tensor_data_is_refused(tmp, run, capsys):
    path = tmp / "flipped" / "best.pt"
    path.parent.mkdir()
    shutil.copy(run / "best.pt", path)
    with zipfile.ZipFile(path) as z:  # the largest tensor's bytes, stored uncompressed
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    raw[info.header_offset + 30 + name_len + extra_len + info.file_size // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    one_line(in_process("sample.py", [path], capsys), str(path), "checksum")


@pytest.mark.slow
def test_a_closed_standard_stream_reads_or_writes_nothing(run, tmp):
    """Started with stdout or stdin closed (`>&-`, `<&-`), Python sets sys.stdout (sys.stdin) to None:
    sample.py ended in an AttributeError traceback at its first print, writing no page; export.py's
    closing line on a full disk (`> /dev/full`) failed an export it had written whole."""
    import shlex
    page, hf = tmp / "closed_stdout.html", tmp / "closed_stdout_hf"
    cases = [(">&-", "sample.py", run, "--max-new-tokens", 3, "--attention-html", page),
             ("<&-", "sample.py", run, "--max-new-tokens", 3, "--interactive"),
             ("<&-", "sample.py", run, "--max-new-tokens", 3, "--prompt-file", "-"),
             (">&-", "export.py", run, "--format", "hf", hf),
             # opened the other way: every read or write failed with EBADF, a traceback (export.py's after its work)
             (f"0> {tmp / 'stdin_written'}", "sample.py", run, "--max-new-tokens", 3, "--interactive"),
             (f"0> {tmp / 'stdin_written'}", "sample.py", run, "--max-new-tokens", 3, "--prompt-file", "-"),
             (f"1< {tmp / 'stdin_written'}", "sample.py", run, "--max-new-tokens", 3),
             (f"1< {tmp / 'stdin_written'}", "export.py", run, "--format", "hf", tmp / "stdout_read_hf")]
    if os.path.exists("/dev/full"):
        cases.append(("> /dev/full", "export.py", run, "--format", "hf", tmp / "full_stdout_hf"))
    # (the Hugging Face export needs the optional safetensors and tokenizers: without them, sample.py's cases only)
    exports = bool(importlib.util.find_spec("safetensors") and importlib.util.find_spec("tokenizers"))
    for redirect, script, *args in cases:
        if script == "export.py" and not exports:
            continue
        command = shlex.join([sys.executable, str(ROOT / script), *map(str, args)]) + " " + redirect
        done = subprocess.run(command, shell=True, cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True, timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stderr[-2000:])
    assert page.is_file()
    if exports:
        assert (hf / "config.json").is_file() and (tmp / "stdout_read_hf" / "config.json").is_file()
    if exports and os.path.exists("/dev/full"):
        assert (tmp / "full_stdout_hf" / "config.json").is_file()
        # sample.py's text is its work: lost to a full disk, it fails, even while it writes a page too
        done = subprocess.run(shlex.join([sys.executable, str(ROOT / "sample.py"), str(run), "--max-new-tokens", "3",
                                          "--attention-html", str(page)]) + " > /dev/full", shell=True, cwd=ROOT,
                              env=ENV, stderr=subprocess.PIPE, text=True, timeout=300)
        # (named: "No space left on device" alone left the user to guess which file)
        assert done.returncode == 2 and done.stderr == "error: No space left on device: standard output\n", done.stderr


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_report_or_a_prepared_folder_written_whole_is_no_failure_when_stdout_is_full(run, tmp):
    """compare.py and `python -m data.prepare` with stdout on a full disk wrote their report (their
    prepared folder) whole, then exited 2, `No space left on device: standard output`, as if they had
    failed; train.py, sweep.py, export.py and bench.py go on with a warning, their work being files."""
    import shlex
    report, prepared = tmp / "full_stdout_report", tmp / "full_stdout_prepared"
    for command, made in [([str(ROOT / "compare.py"), str(run), "--out", str(report)], report / "results.md"),
                          (["-m", "data.prepare", str(ROOT / "configs/stories.yaml"), "--set",
                            "data.stories_chars=20000", "data.tokenizer=char", f"data.prepared_dir={prepared}"],
                           prepared)]:
        done = subprocess.run(shlex.join([sys.executable, *command]) + " > /dev/full", shell=True, cwd=ROOT, env=ENV,
                              stderr=subprocess.PIPE, text=True, timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stderr[-2000:])
        assert "stdout cannot be written" in done.stderr and made.exists(), done.stderr


def test_help_on_a_full_disk_is_an_error_not_a_silent_success():
    """`sample.py --help > /dev/full` (probe.py, bench.py too) exited 0 without a word: argparse drops a failed
    write, and its output, the whole of the command's work, was lost. A reader that left (`| head -1`) is no error."""
    import errno
    from tinygpt.errors import ArgParser

    class Full(io.StringIO):
        def flush(self):
            raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(OSError, match="No space left"):
        ArgParser(prog="x").print_help(Full())
    if os.path.exists("/dev/full"):
        done = subprocess.run(f"{shlex.quote(sys.executable)} sample.py --help > /dev/full", shell=True, cwd=ROOT,
                              env=ENV, stderr=subprocess.PIPE, text=True, timeout=120)
        assert (done.returncode, done.stderr) == (2, "error: No space left on device: standard output\n")
    done = subprocess.run(f"{shlex.quote(sys.executable)} sample.py --help | head -c 10", shell=True, cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert (done.stdout, done.stderr) == ("usage: sam", "")


def test_a_value_starting_with_a_dash_is_told_how_to_write_it(run, capsys):
    """`--prompt -x`: `argument --prompt: expected one argument`, and no word on `--prompt=-x`."""
    line = one_line(in_process("sample.py", [run, "--prompt", "-x"], capsys), "--prompt")
    assert "a value that starts with '-' is written --prompt=-x" in line
    written = in_process("sample.py", [run, "--prompt=-x", "--max-new-tokens", "2"], capsys)
    assert "expected one argument" not in written.err and "'-', 'x'" in written.err  # read as the prompt (not in this vocab)
    assert "starts with '-'" not in one_line(in_process("sample.py", [run, "--prompt"], capsys), "--prompt")


def test_a_standard_stream_opened_the_other_way_reads_or_writes_nothing(tmp_path):
    """`0>FILE` (stdin open for writing only) or `1<FILE` (stdout for reading only): every read or
    write raised OSError EBADF, a traceback. As a closed stream, it reads or writes os.devnull."""
    import shlex
    written, read = tmp_path / "written", tmp_path / "read"
    read.write_text("the user's file\n")
    code = ("import sys; from tinygpt.errors import open_closed_streams; open_closed_streams(); "
            "data = sys.stdin.read(); print('to nowhere'); sys.stdout.flush(); sys.stderr.write(repr(data))")
    done = subprocess.run(f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} 0> {written} 1< {read}", shell=True,
                          cwd=ROOT, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "''", done.stderr
    assert read.read_text() == "the user's file\n" and written.read_text() == ""


@pytest.mark.parametrize("kind", ["link to nothing", "link to a file", "folder", "pipe"])
@pytest.mark.parametrize("resume", [False, True])
def test_a_run_file_that_is_no_regular_file_is_named(tmp, capsys, kind, resume):
    """A ckpt.pt that is a link to nothing: the run wrote its checkpoints outside its folder (making
    the link target's folders); a link to a file (`cp -rs A B` to branch a run): a resume of B wrote
    A's files, without A's lock; a folder or a pipe: "already holds a run; continue it with --resume",
    and --resume: "no checkpoint ... drop --resume"."""
    out = tmp / f"odd_ckpt_{kind.replace(' ', '_')}_{resume}"
    out.mkdir()
    others = tmp / f"others_{resume}.pt"
    others.write_bytes(b"another run's checkpoint")
    if kind == "link to nothing":
        (out / "ckpt.pt").symlink_to(tmp / "gone" / "x.pt")
    elif kind == "link to a file":
        (out / "ckpt.pt").symlink_to(others)
    elif kind == "folder":
        (out / "ckpt.pt").mkdir()
    else:
        os.mkfifo(out / "ckpt.pt")
    result = in_process("train.py", [*sets(tmp, out, "train.max_iters=2"), *(["--resume"] if resume else [])], capsys)
    one_line(result, "holds ckpt.pt", {"link to nothing": "leads to no file", "folder": "a folder",
                                        "link to a file": f"a link to {others}", "pipe": "ckpt.pt, a pipe, not a regular file"}[kind])
    assert not (tmp / "gone").exists() and sorted(p.name for p in out.iterdir()) == ["ckpt.pt"]
    assert others.read_bytes() == b"another run's checkpoint"


def test_resume_without_ckpt_but_with_best_weights_gives_advice_that_works(run, tmp, capsys):
    """--resume said "drop --resume to start a new run", which the next run refused: "holds best.pt
    but no ckpt.pt"."""
    out = tmp / "only_best"
    out.mkdir()
    shutil.copy(Path(run) / "best.pt", out / "best.pt")
    one_line(in_process("train.py", [*sets(tmp, out), "--resume", "--quiet"], capsys), "no checkpoint",
             f"train.init_from={out / 'best.pt'}")


def test_resume_from_a_damaged_checkpoint_offers_its_best_weights(run, tmp, capsys):
    import shutil
    out = tmp / "damaged_ckpt"
    shutil.copytree(run, out)
    (out / "ckpt.pt").write_bytes((out / "ckpt.pt").read_bytes()[:1000])
    line = one_line(in_process("train.py", [*sets(tmp, out), "--resume"], capsys), "ckpt.pt")
    assert f"--set train.init_from={out / 'best.pt'} train.out_dir=NEW_DIR" in line


def test_the_advice_of_a_resume_refused_for_its_damaged_state_works(run, tmp, capsys):
    """A ckpt.pt whose loss_count is -5 was refused with `start a new run from its weights with --set
    train.init_from=RUN`: pasted, that run was refused too, as RUN still holds a run. Pasted now, with
    NEW_DIR filled in, it trains."""
    import shlex
    out = damaged_copy(run, tmp / "bad count", "ckpt.pt", loss_count=-5)
    line = one_line(in_process("train.py", [*sets(tmp, out), "--resume"], capsys), "its loss_count is -5")
    advice = shlex.split(line.split("start a new run from its weights with ")[1])
    assert advice == ["--set", f"train.init_from={out}", "train.out_dir=NEW_DIR"]
    new = tmp / "from bad count"
    pasted = in_process("train.py", [*sets(tmp, out), *advice[:-1], f"train.out_dir={new}", "--quiet"], capsys)
    assert pasted.code == 0, pasted.err
    assert (new / "ckpt.pt").is_file() and f"init_from: {out}\n" in (new / "config.yaml").read_text()


def test_a_path_too_long_is_told_in_one_short_line():
    """train.out_dir of 5,000 characters: `error: File name too long: ` and the whole path, one 5 KB line."""
    from tinygpt.errors import environment_error
    path = "/tmp/" + "/".join(["y" * 200] * 25) + "/end"
    line = environment_error(OSError(errno.ENAMETOOLONG, "File name too long", path))
    assert line.startswith("File name too long: /tmp/yyy") and line.endswith("yyy/end") and len(line) < 240
    for length, whole in ((200, True), (201, False)):  # cut only past 200 characters
        path = "/tmp/" + "z" * (length - 5)
        line = environment_error(OSError(errno.ENAMETOOLONG, "File name too long", path))
        assert (line == f"File name too long: {path}") is whole and ("..." in line) is not whole, length


def test_a_path_of_the_longest_length_is_taken_and_one_byte_more_refused(tmp_path):
    """PATH_MAX counts the final NUL: a path of PATH_MAX - 1 bytes is the longest the system takes (one of PATH_MAX
    bytes passed the check, then failed with `File name too long`, naming no setting)."""
    from tinygpt.errors import UserError, check_path_length
    path_max = os.pathconf(tmp_path, "PC_PATH_MAX")
    text = str(tmp_path.absolute())
    while path_max - 1 - len(text) > 201:  # parts of 200 bytes, under the 255 a name may be
        text += "/" + "p" * 200
    rest = path_max - 1 - len(text)
    if rest == 1:  # ("/" alone: no part)
        text, rest = text[:-1], 2
    longest = Path(text + "/" + "q" * (rest - 1))
    assert len(os.fsencode(str(longest))) == path_max - 1
    check_path_length(longest, "train.out_dir")
    with pytest.raises(UserError, match=rf"it is {path_max:,} bytes long, longer than a path may be "
                                        rf"\({path_max - 1:,}\)$"):
        check_path_length(Path(str(longest) + "x"), "train.out_dir")


@pytest.mark.parametrize("flag", ["--attention-png", "--attention-html"])
@pytest.mark.parametrize("too_long", ["a part", "the whole"])
def test_an_output_name_too_long_names_its_flag(run, tmp, capsys, flag, too_long):
    """`--attention-png /tmp/yyy...` (a part over 255 bytes) said only `error: File name too long: /tmp/yyy...`."""
    # (a part under a folder still to be made, too: the file system, asked, stops at the first missing folder)
    path = tmp / "new" / ("y" * 260) if too_long == "a part" else tmp / "/".join(["y" * 200] * 25)
    if flag == "--attention-html":
        path = path / "page.html"
    import re
    line = one_line(in_process("sample.py", [run, flag, path], capsys), flag)
    assert re.search(r"bytes, longer than a file name may be$" if too_long == "a part" else
                     r"bytes long, longer than a path may be \(4,095\)$", line), line
    assert not (tmp / "new").exists()


def test_a_hint_names_a_dash_path_so_that_it_is_not_a_flag(tmp, capsys, monkeypatch):
    """train.out_dir=-rf ended with `sample with: python sample.py -rf`, which sample.py reads as a flag."""
    from tinygpt.errors import path_word
    assert path_word("-rf") == "./-rf" and path_word("/tmp/-rf") == "/tmp/-rf" and path_word("out/a") == "out/a"
    monkeypatch.chdir(tmp)
    result = in_process("train.py", [*sets(tmp, Path("-dash_run"), "train.max_iters=2")], capsys)
    hint = f"sample with: python {ROOT / 'sample.py'} ./-dash_run"  # (from tmp: sample.py's own path)
    assert result.code == 0 and result.out.rstrip().endswith(hint), result


def test_the_setup_before_the_first_step_is_not_training_time(tmp, capsys, monkeypatch):
    """The clocks of tokens/s, MFU and elapsed_s started before the setup (matplotlib's import for
    loss.png: 0.6 s), so the first logged row read 106 tokens/s where the next read 15,000."""
    import train
    from tinygpt.runs import read_metrics
    slow_setup = train.write_config

    def write_config(*args, **kwargs):
        time.sleep(2.0)
        return slow_setup(*args, **kwargs)
    monkeypatch.setattr(train, "write_config", write_config)
    out = tmp / "setup_time"
    result = in_process("train.py", [*sets(tmp, out, "train.max_iters=4", "train.log_interval=2",
                                           "train.eval_interval=4", "train.plot=never"), "--quiet"], capsys)
    assert result.code == 0, result.err
    rows = read_metrics(out)
    assert rows[0]["step"] == 0 and rows[0]["elapsed_s"] < 1.5, rows[0]


def test_a_reader_who_leaves_ends_the_command_quietly_with_exit_0(monkeypatch):
    """`sample.py RUN | head -1`: the reader left, which is no error: exit 0, nothing said."""
    from tinygpt.errors import run_cli

    def reader_left(argv):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with pytest.raises(SystemExit) as info:
        run_cli(reader_left, [])
    assert info.value.code == 0


def test_a_full_disk_naming_its_file_is_not_blamed_on_standard_output(tmp_path, capfd):
    """Standard output a file (`> log.txt`), a checkpoint's ENOSPC names the checkpoint alone; an ENOSPC
    naming no file is standard output's."""
    from tinygpt.errors import output_culprit
    saved = os.dup(1)
    try:
        with open(tmp_path / "log.txt", "w") as log:
            os.dup2(log.fileno(), 1)
        named = output_culprit(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "ckpt.pt")))
        unnamed = output_culprit(OSError(errno.ENOSPC, "No space left on device"))
        master, terminal = pty.openpty()  # a terminal is a character device too, but the user sees it
        os.dup2(terminal, 1)
        at_a_terminal = output_culprit(OSError(errno.ENOSPC, "No space left on device"))
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    os.close(master)
    os.close(terminal)
    assert named == "" and unnamed == ": standard output" and at_a_terminal == ""


def test_an_environment_error_names_a_bytes_file_as_text_and_never_says_nothing():
    from tinygpt.errors import environment_error
    assert environment_error(OSError(errno.EACCES, "Permission denied", b"/x/caf\xc3\xa9")) == \
        "Permission denied: /x/caf\u00e9"
    assert environment_error(OSError(errno.ENOSPC, "")) == "OSError"


@pytest.mark.parametrize("name", ["ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM", "ENAMETOOLONG", "ENOTDIR",
                                  "EISDIR", "ELOOP", "EMFILE"])
def test_each_refusal_by_the_machine_is_one_line_and_exit_2(name, capsys):
    """An OSError the machine raised (a full disk, a read-only one, a link loop, too many open files,
    ...) is a refusal, as the module doc says: one line naming the file, exit 2, not a traceback."""
    from tinygpt.errors import run_cli
    number = getattr(errno, name)

    def main(argv):
        raise OSError(number, os.strerror(number), "some/file")
    with pytest.raises(SystemExit) as info:
        run_cli(main, [])
    assert (info.value.code, capsys.readouterr().err) == (2, f"error: {os.strerror(number)}: some/file\n")


def test_an_output_that_takes_no_more_is_dropped_only_where_output_is_not_the_work(tmp_path, capsys):
    """ReaderMayLeave drops a full disk's output (ENOSPC, EDQUOT or EFBIG, a file over `ulimit -f`) and
    goes on, where the work is files; where the output is the work (full_disk_too=False: sample.py's
    text) a full disk stays an error."""
    from tinygpt.errors import ReaderMayLeave

    class Full:
        def __init__(self, number):
            self.number, self.fd = number, os.open(tmp_path / "out.txt", os.O_WRONLY | os.O_CREAT)

        def write(self, text):
            raise OSError(self.number, os.strerror(self.number))

        def fileno(self):
            return self.fd
    for number in (errno.ENOSPC, errno.EFBIG):
        stream = ReaderMayLeave(Full(number), "stdout")
        assert stream.write("abc") == 3 and stream.left
        assert capsys.readouterr().err == f"warning: stdout cannot be written ({os.strerror(number)}); " \
                                          "going on without printing there\n"
        os.close(stream.fd)
        work = ReaderMayLeave(Full(number), "stdout", full_disk_too=False)
        with pytest.raises(OSError) as info:
            work.write("abc")
        assert info.value.errno == number and not work.left
        os.close(work.fd)


def test_a_rank_that_is_not_a_number_is_no_torchrun_launch(monkeypatch):
    """RANK=x beside torchrun's other variables is no rank: the process speaks for itself (says
    `interrupted`), as it would outside torchrun."""
    from tinygpt.errors import speaks_for_the_run, torchrun_rank
    for name, value in {"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    assert torchrun_rank() is None and speaks_for_the_run()
    monkeypatch.setenv("RANK", "1")
    assert torchrun_rank() == 1 and not speaks_for_the_run()


def test_a_path_just_over_200_characters_is_elided_too():
    from tinygpt.errors import environment_error
    path = "/tmp/" + "z" * 300
    line = environment_error(OSError(errno.ENAMETOOLONG, "File name too long", path))
    assert line == f"File name too long: {path[:100]}...{path[-97:]}"


def test_counts_of_none_and_big_integers_read_right():
    """'0 tokens', not '0 token'; an integer past MAX_INT_BITS is described by its size, not its digits."""
    from tinygpt.errors import count, short
    assert count(0, "token") == "0 tokens" and count(0, "story", "stories") == "0 stories"
    assert short(2**200) == "an integer of 201 bits" and short(-2**129) == "a negative integer of 130 bits"


def test_a_refused_clean_up_is_told_unless_an_error_is_already_on_its_way_out(tmp_path):
    from tinygpt.errors import UserError, clean_up

    def refused():
        raise UserError("cannot write metrics.csv: disk full")
    clean_up(refused, failing=True)  # the error on its way out is the one told
    with pytest.raises(UserError, match="metrics.csv"):
        clean_up(refused, failing=False)
    with pytest.raises(FileNotFoundError):  # a clean-up's bug is no refusal: never dropped
        clean_up(lambda: open(tmp_path / "missing" / "x"), failing=True)


def test_path_checks_count_bytes_and_follow_live_links(tmp_path, monkeypatch):
    """A name's limit is in bytes (130 é's are 260 of them) and a name of exactly the limit is taken; a link to
    a file is no dead link; standard error that is not a terminal draws no progress bar."""
    from tinygpt.errors import UserError, check_path_length, dead_link, name_max, stderr_is_terminal
    if name_max(tmp_path) != 255:
        pytest.skip("a file system whose names are not 255 bytes long")
    check_path_length(tmp_path / ("a" * 255), "train.out_dir")
    with pytest.raises(UserError, match="is 260 bytes, longer than a file name may be"):
        check_path_length(tmp_path / ("\u00e9" * 130) / ("a" * 200), "train.out_dir")  # (the longer in characters)
    (tmp_path / "file").write_text("x")
    (tmp_path / "live").symlink_to("file")
    assert dead_link(tmp_path / "live") is None and dead_link(tmp_path / "file") is None
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not stderr_is_terminal()


def test_a_hint_after_a_command_line_error_is_given_only_where_it_applies(capsys):
    """A missing config with no --set given is not blamed on --set; '-' (standard input's name) is no flag to be
    written ./-; a stray word that is itself a flag (-x.y=1) is not a KEY=VALUE that left --set's list; an empty
    OUT of export.py asks for a new folder (not '.', which an export cannot replace)."""
    import export
    import train
    from tinygpt.errors import UserError
    cases = [(train.parse_args, ["--quiet"], "required: config", "--set takes"),
             (export.main, ["-"], "required: out", "reads as a flag"),
             (train.parse_args, ["c.yaml", "--stop-at", "5", "-x.y=1"], "unrecognized arguments: -x.y=1",
              "belongs to --set"),
             (export.main, ["out/x", ""], "an empty path names no folder; name a new one", "(. for")]
    for parse, argv, said, not_said in cases:
        with pytest.raises(UserError) as info:
            parse(argv)
        assert said in str(info.value) and not_said not in str(info.value), argv
    with pytest.raises(UserError, match="; --set takes every word after it"):  # where it applies, it is given
        train.parse_args(["--set", "a.b=1", "c.yaml"])


def test_a_long_value_is_cut_to_the_limit_with_its_ellipsis():
    from tinygpt.errors import MAX_VALUE, short
    text = short(["a" * 30] * 3)  # each item short enough for reprlib, the whole list not
    assert len(text) == MAX_VALUE and text.startswith("['aaa") and text.endswith("...")
    assert short("y" * 10, 12) == "'yyyyyyyyyy'"  # exactly the limit: whole


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero (a device that never ends)")
def test_the_message_helpers_cut_and_count_as_they_say():
    """A line of MAX_LINE characters is whole; a longer one keeps its first two thirds (the culprit) and its end
    (the fix) around ' ... ', MAX_LINE in all; first_few counts only the names it leaves out; a path is its text."""
    from tinygpt.errors import capped, first_few, short
    whole = "x" * 60 + "y" * 60
    assert capped(whole, 120) == whole
    assert capped("a" * 100 + "b" * 100, 120) == "a" * 80 + " ... " + "b" * 35
    assert first_few(["a", "b", "c"]) == "a, b, c" and first_few(list("abcde")) == "a, b, c and 2 more"
    assert short(Path("a/b")) == "'a/b'"
    from tinygpt.errors import escaped, folder_ending  # (bash's $'...': four hex digits up to U+FFFF, eight past it)
    assert [folder_ending(p) for p in ("a/", "a/.", "a/..", "a/b", "..")] == [
        "a/ ends in '/', which names a folder", "a/. ends in '.', which names a folder",
        "a/.. ends in '..', which names a folder", None, None]
    assert [escaped(c) for c in ("\u200f", "\U000e0001", "\n", "a")] == ["\\u200f", "\\U000e0001", "\\n", "a"]


def test_read_capped_refuses_a_device_past_its_limit_and_says_why_it_cannot_read(tmp_path):
    """A device or a pipe has no size: read one byte past the limit, it is refused (not cut to its first
    `limit` bytes); a file that cannot be read is told in the caller's words. A file of exactly the limit
    is read whole; a file over it is refused by its size, unread."""
    from tinygpt.errors import UserError, read_capped
    (tmp_path / "ten").write_bytes(b"abcdefghij")
    assert read_capped(tmp_path / "ten", 10, str) == b"abcdefghij"
    with pytest.raises(UserError, match="^too big: 10$"):
        read_capped(tmp_path / "ten", 5, lambda size: f"too big: {size}")
    with pytest.raises(UserError, match="^too big: None$"):
        read_capped("/dev/zero", 10, lambda size: f"too big: {size}")
    with pytest.raises(UserError, match="^--prompt-file missing cannot be read: No such file or directory$"):
        read_capped(tmp_path / "missing", 10, str, lambda why: f"--prompt-file missing cannot be read: {why}")


@pytest.mark.parametrize("word", ["plain", "with space", "it's", "a\nb", "tab\there", "back\\slash\nq'",
                                  "x\udcff.txt", "rtl\u200fmark", "héllo", "-dash", "a\\b\n", "x\\n\n",
                                  "x\u00adeb.txt"])  # (\\b, \\n: escapes bash knows; U+00AD, then hex letters)
def test_shell_quote_pastes_back_to_the_word_on_one_line(word):
    """A command a message suggests names the user's paths: with a line break in one, it split into
    two lines, and pasted, named another file. bash reads the quoted word back as the word itself."""
    from tinygpt.errors import shell_join, shell_quote
    quoted = shell_quote(word)
    assert "\n" not in quoted and quoted.isprintable()
    done = subprocess.run(["bash", "-c", f"printf %s {shell_join([word, word])}"], capture_output=True, check=True)
    assert done.stdout == os.fsencode(word) * 2


@pytest.mark.parametrize("where", ["configs", "tinygpt", ".", "/", "HOME"])
def test_a_run_into_a_shared_folder_is_refused(tmp, capsys, monkeypatch, where):
    """`train.out_dir=configs` (or /, the home folder, the repository): the run's ckpt.pt, config.yaml
    and metrics.csv went in among the repository's files."""
    monkeypatch.chdir(ROOT)
    if where == "HOME":
        monkeypatch.setenv("HOME", str(tmp / "home"))
        (tmp / "home").mkdir(exist_ok=True)
        where = str(tmp / "home")
    before = sorted(p.name for p in Path(where).iterdir())
    result = in_process("train.py", [*sets(tmp, Path(where)), "--quiet"], capsys)
    one_line(result, f"train.out_dir={where!r} is the ", "give it one of its own, e.g. out/NAME")
    assert sorted(p.name for p in Path(where).iterdir()) == before


def test_a_path_with_a_line_break_keeps_each_output_line_whole(run, tmp, capsys):
    """`saved`, `wrote` and `probe of` lines printed a path's line break as it is: one message on two
    lines. A path holding a control character is now shown as bash reads it back ($'...')."""
    import shutil
    odd = tmp / "nl\nrun"
    if not odd.exists():
        shutil.copytree(run, odd)
    page = tmp / "p\nq.html"
    done = in_process("sample.py", [run, "--prompt", "the", "--max-new-tokens", "2", "--attention-html", page], capsys)
    assert done.code == 0, done.err
    saved = [line for line in done.out.splitlines() if line.startswith("saved ")]
    assert saved == [f"saved $'{tmp}/p\\nq.html'"], done.out
    if importlib.util.find_spec("matplotlib"):  # (without it --plot-only is refused, and prints no path)
        done = in_process("compare.py", [odd, "--plot-only"], capsys)
        assert done.code == 0 and done.out == f"wrote $'{odd}/loss.png'".replace("\n", "\\n") + "\n", done.out
    from tinygpt.errors import shown_path
    assert shown_path(tmp / "plain dir") == f"{tmp}/plain dir"  # (an ordinary path: as it is)


def test_an_error_naming_a_path_with_a_line_break_stays_one_line(run, tmp, capsys):
    """About 40 messages (a config not found or not YAML, a damaged checkpoint, an export folder) put
    a path in as it is: a line break in its name split `error: ...` over two lines. The last step
    that prints any error now escapes control characters, whichever message quotes them."""
    bad_yaml = tmp / "bad\nname.yaml"
    bad_yaml.write_text("model: [\n", encoding="utf-8")
    damaged = tmp / "dam\naged"
    damaged.mkdir(exist_ok=True)
    (damaged / "ckpt.pt").write_bytes(b"not a checkpoint")
    for script, args, culprit in [("train.py", [tmp / "no\nsuch.yaml"], "no\\nsuch.yaml"),
                                  ("train.py", [bad_yaml], "bad\\nname.yaml"),
                                  ("sample.py", [damaged, "--prompt", "a"], "dam\\naged"),
                                  ("export.py", [damaged, tmp / "out\x1bdir"], "dam\\naged")]:
        one_line(in_process(script, args, capsys), culprit)
    from tinygpt.errors import one_line as escaped_line
    assert escaped_line("plain é text") == "plain é text"  # (nothing to escape: as it is)
    assert escaped_line("a\tb\udcff\u200f") == "a\\tb\\xff\\u200f"


def test_a_long_flag_value_is_cut_and_any_error_line_stays_under_1000_characters(run, capsys):
    """`--device`, bench.py's `--dtypes` and tokenization_table's `--sizes` quoted a 5,000-character
    value whole: a 5 KB error line. They now quote it as errors.short does, and the last step that
    prints an error keeps any line to MAX_LINE characters, its start and its end."""
    long = "y" * 5000
    line = one_line(in_process("sample.py", [run, "--device", long], capsys), "--device='yyy", "must be auto")
    assert len(line) < 300, line
    line = one_line(in_process("bench.py", ["--dtypes", long], capsys), "--dtypes='yyy", "use float32")
    assert len(line) < 300, line
    from tinygpt.errors import MAX_LINE, UserError, run_cli

    def says_much(argv):
        raise UserError("culprit " + "x" * 5000 + " the fix")
    with pytest.raises(SystemExit):
        run_cli(says_much, [])
    line = capsys.readouterr().err.rstrip("\n")
    assert len(line) == MAX_LINE and line.startswith("error: culprit xx") and line.endswith("xx the fix")
    assert " ... " in line


def test_a_run_whose_best_pt_is_another_runs_is_refused_where_it_is_read(run, tmp, capsys):
    """A best.pt copied in from another run was sampled, exported and trained on from (init_from)
    under this run's name, without a word: only --resume compared the two files' run ids."""
    mixed = damaged_copy(run, tmp / "mixed", name="ckpt.pt")  # ckpt.pt of this run ...
    other = damaged_copy(run, tmp / "other", run_id="another run")
    shutil.copy(other / "ckpt.pt", mixed / "best.pt")  # ... its best.pt not
    culprits = ("best.pt and ckpt.pt are of two runs", "give the file you mean")
    one_line(in_process("sample.py", [mixed, "--prompt", "a", "--max-new-tokens", "2"], capsys), *culprits)
    one_line(in_process("export.py", [mixed, tmp / "mixed_hf"], capsys), *culprits)
    assert not (tmp / "mixed_hf").exists()
    one_line(in_process("train.py", [*sets(tmp, tmp / "from_mixed", f"train.init_from={mixed}"), "--quiet"], capsys),
             *culprits)
    done = in_process("sample.py", [mixed / "best.pt", "--prompt", "a", "--max-new-tokens", "2"], capsys)
    assert done.code == 0, done.err  # the file itself, named: as asked
    shutil.copy(run / "best.pt", mixed / "best.pt")  # one run again
    assert in_process("sample.py", [mixed, "--prompt", "a", "--max-new-tokens", "2"], capsys).code == 0


def test_a_run_and_prepared_data_never_share_a_folder(run, tmp, capsys):
    """train.out_dir equal to data.prepared_dir (or holding it) put the cache's folder among the run's
    files; a run into a data.prepared_dir holding prepared folders put its checkpoints among them; and
    a data.prepared_dir inside another run gave that run a folder of data. Each ran, exit 0."""
    same = tmp / "same"
    one_line(in_process("train.py", [tmp / "config.yaml", "--set", f"data.dataset={tmp / 'corpus.txt'}",
                                     f"data.prepared_dir={same}", f"train.out_dir={same}", "--quiet"], capsys),
             f"data.prepared_dir={str(same)!r} is train.out_dir=", "give them separate folders")
    assert not same.exists()
    holder = tmp / "holder"  # (the cache in a folder inside the run's)
    one_line(in_process("train.py", [tmp / "config.yaml", "--set", f"data.dataset={tmp / 'corpus.txt'}",
                                     f"data.prepared_dir={holder / 'cache'}", f"train.out_dir={holder}", "--quiet"],
                        capsys),
             f"data.prepared_dir={str(holder / 'cache')!r} is train.out_dir={str(holder)!r} or a folder inside it",
             "give them separate folders")
    assert not holder.exists()
    one_line(in_process("train.py", [tmp / "config.yaml", "--set", f"data.dataset={tmp / 'corpus.txt'}",
                                     f"data.prepared_dir={tmp / 'cache2'}", f"train.out_dir={tmp / 'prepared'}",
                                     "--quiet"], capsys),
             f"train.out_dir={str(tmp / 'prepared')!r} holds prepared data", "choose another out_dir")
    assert not (tmp / "prepared" / "ckpt.pt").exists()
    before = sorted(p.name for p in run.iterdir())
    one_line(in_process("train.py", [*sets(tmp, tmp / "beside", f"data.prepared_dir={run}"), "--quiet"], capsys),
             f"data.prepared_dir={str(run)!r} is inside the training run {run}", "choose a folder outside it")
    assert sorted(p.name for p in run.iterdir()) == before
    # a run into the very folder its preparation is about to make: it replaced the run's folder, the run then
    # blamed a folder "removed or moved" and left prepared data beside its config.yaml
    cache = tmp / "cache3"
    one_line(in_process("train.py", [*sets(tmp, cache / "corpus-char-0123456789", f"data.prepared_dir={cache}"),
                                     "--quiet"], capsys),
             f"is named as a folder of data.prepared_dir={str(cache)!r}", "give the run another name")
    assert not cache.exists()
    done = in_process("train.py", [*sets(tmp, cache / "myrun", f"data.prepared_dir={cache}"), "--quiet"], capsys)
    assert done.code == 0, done.err  # a name no preparation makes: trained, as before


def test_a_loop_of_links_is_named_as_one(run, tmp, capsys):
    """A config or run that is a loop of links read "not found"; bench.py --json through one passed its
    check, and the results would replace the link after minutes of measurement."""
    (tmp / "loop_a").symlink_to(tmp / "loop_b")
    (tmp / "loop_b").symlink_to(tmp / "loop_a")
    loop = tmp / "loop_a"
    one_line(in_process("train.py", [loop], capsys), f"config file {loop} is a link", "runs into a loop of links")
    one_line(in_process("sample.py", [loop], capsys), f"{loop} is a link", "runs into a loop of links",
             "give a run directory or a checkpoint")
    import bench
    from tinygpt.errors import UserError
    with pytest.raises(UserError, match="--json: cannot write .*loop_a: it is a link .* that runs into a loop"):
        bench.check_json_target(str(loop))
    (tmp / "to_nothing").symlink_to(tmp / "nothing")  # a link to nothing is said as before
    one_line(in_process("train.py", [tmp / "to_nothing"], capsys), "that leads to no file or folder")


# ---- tinygpt/runs.py's checks at their edges (each once dropped or moved, and no test failed) ----


def test_a_run_in_the_home_folder_resumes(tmp_path, monkeypatch):
    """A new run into the home folder is refused (its files would mix with everything there); one already there
    resumes."""
    from tinygpt import runs
    from tinygpt.errors import UserError
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ckpt.pt").write_bytes(b"a run's checkpoint")
    runs.check_run_dir(tmp_path, resume=True)
    with pytest.raises(UserError, match="is the home folder"):
        runs.check_run_dir(tmp_path, resume=False)


def test_a_best_pt_of_step_0_without_a_runs_config_yaml_is_kept(tmp, run, capsys):
    """A best.pt of step 0 counts as a run that died at its first save only beside that run's config.yaml: alone
    (copied in, or the user's), it is no dead run's starting point, and a new run there would overwrite it."""
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    out = tmp / "best_of_step_0_alone"
    out.mkdir()
    save_checkpoint(out / "best.pt", {**load_checkpoint(run / "best.pt"), "step": 0})
    kept = (out / "best.pt").read_bytes()
    one_line(in_process("train.py", [*sets(tmp, out), "--quiet"], capsys), "holds best.pt but no ckpt.pt",
             "move best.pt away")
    assert (out / "best.pt").read_bytes() == kept


def test_a_terminal_that_hung_up_is_a_reader_who_left_and_stderrs_loss_is_not_said(tmp_path, capsys):
    """EIO (a terminal that hung up) drops the output as a broken pipe does, on write and on flush alike;
    a lost stderr is not told (there is nowhere to tell it)."""
    from tinygpt.errors import ReaderMayLeave

    class HungUp:
        def __init__(self):
            self.fd = os.open(tmp_path / "out.txt", os.O_WRONLY | os.O_CREAT)

        def write(self, text=""):
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        def flush(self):
            self.write()

        def fileno(self):
            return self.fd
    for name in ("stdout", "stderr"):
        stream = ReaderMayLeave(HungUp(), name)
        assert stream.write("abc") == 3 and stream.left
        told = capsys.readouterr().err
        assert told == ("warning: stdout was closed (its reader left); going on without printing there\n"
                        if name == "stdout" else "")
        os.close(stream.fd)
        stream = ReaderMayLeave(HungUp(), name, full_disk_too=False)  # a reader who left is no error, either way
        stream.flush()
        assert stream.left
        capsys.readouterr()
        os.close(stream.fd)


def test_an_empty_or_folder_path_is_refused_by_each_argument_type(monkeypatch, tmp_path):
    """path_arg, new_folder_arg and file_arg refuse an empty path (each with its own hint); file_arg refuses a
    path that names a folder by how it ends; each expands a leading ~."""
    from tinygpt.errors import file_arg, folder_ending, new_folder_arg, path_arg
    monkeypatch.setenv("HOME", str(tmp_path))
    for kind in (path_arg, new_folder_arg, file_arg):
        with pytest.raises(argparse.ArgumentTypeError, match="^an empty path"):
            kind("")
        assert kind("~/x") == tmp_path / "x"
    with pytest.raises(argparse.ArgumentTypeError, match="new one"):
        new_folder_arg("")
    for text in ("out/", "out/.", "out/.."):
        with pytest.raises(argparse.ArgumentTypeError) as info:
            file_arg(text)
        assert str(info.value) == f"{folder_ending(text)}; give a file name"
    assert file_arg("out/x.pt") == Path("out/x.pt")


def test_a_path_of_200_characters_is_whole_and_one_more_is_elided():
    """environment_error keeps a name of 200 characters whole; at 201 it keeps its first 100 and its last 97."""
    from tinygpt.errors import environment_error
    for length in (200, 201):
        path = "/" + "a" * 99 + "m" * (length - 197) + "z" * 97
        assert len(path) == length
        line = environment_error(OSError(errno.ENAMETOOLONG, "File name too long", path))
        assert line == "File name too long: " + (path if length == 200 else f"{path[:100]}...{path[-97:]}")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_run_cli_blames_a_full_device_stdout_and_lets_a_bugs_oserror_through(capsys):
    """An ENOSPC naming no file, stdout `> /dev/full` (a character device, no terminal): the line names standard
    output. An OSError that is no refusal by the machine (ENOENT) keeps its traceback."""
    from tinygpt.errors import output_culprit, run_cli

    def full(argv):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    saved = os.dup(1)
    try:
        with open("/dev/full", "w") as device:
            os.dup2(device.fileno(), 1)
        culprit = output_culprit(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        with pytest.raises(SystemExit) as info:
            run_cli(full, [])
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert culprit == ": standard output"
    assert (info.value.code, capsys.readouterr().err) == (2, f"error: {os.strerror(errno.ENOSPC)}: standard output\n")

    def bug(argv):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "some/file")
    with pytest.raises(FileNotFoundError):
        run_cli(bug, [])


def test_run_cli_says_out_of_memory_with_exit_2_and_lets_another_runtime_error_through(capsys):
    """MemoryError is a refusal by the machine: one line, exit 2. A RuntimeError that is no allocation refused
    is a bug: its traceback is kept, never called out of memory."""
    from tinygpt.errors import run_cli

    def refused(argv):
        raise MemoryError()
    with pytest.raises(SystemExit) as info:
        run_cli(refused, [])
    assert info.value.code == 2 and capsys.readouterr().err.startswith("error: out of memory")

    def bug(argv):
        raise RuntimeError("shape mismatch")
    with pytest.raises(RuntimeError, match="^shape mismatch$"):
        run_cli(bug, [])
    assert capsys.readouterr().err == ""


def test_an_ascii_control_character_is_escaped_in_two_hex_digits():
    """bash's $'...' form: a control character below U+0080 (ESC, DEL) is \\xNN, as escaped's doc says."""
    from tinygpt.errors import escaped, shell_quote
    assert [escaped(c) for c in ("\x1b", "\x7f", "\x00")] == ["\\x1b", "\\x7f", "\\x00"]
    assert shell_quote("a\x1bb") == "$'a\\x1bb'"


def test_a_torchrun_worker_but_rank_0_stops_on_ctrl_c_without_a_word(monkeypatch, capsys):
    """Under torchrun only rank 0 says `interrupted`; another rank exits 130 without a word."""
    from tinygpt.errors import run_cli

    def stopped(argv):
        raise KeyboardInterrupt
    for name, value in {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    for rank, said in (("1", ""), ("0", "interrupted\n")):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(SystemExit) as info:
            run_cli(stopped, [])
        assert (info.value.code, capsys.readouterr().err) == (130, said)

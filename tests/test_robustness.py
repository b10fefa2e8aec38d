"""Guards issue 5 (scale out, never lose work): two-process DDP equals one process with the same
global batch, resume is exact even with dropout, a checkpoint survives SIGKILL at any moment of
saving, SIGINT/SIGTERM save and stop, a closed stdout stops nothing, and a diverging run stops keeping
its last good checkpoint."""
from __future__ import annotations

import csv
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
import torch

from tinygpt.checkpoint import load_checkpoint, save_checkpoint
from conftest import ROOT

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hum old songs "
         "about rivers and mountains far away").split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(1500)))
    return path


def train_args(corpus: Path, run: Path, *extra: str) -> list[str]:
    return [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", f"data.dataset={corpus}",
            f"data.prepared_dir={run.parent / 'prepared'}", f"train.out_dir={run}", "model.n_layer=2",
            "model.n_head=2", "model.n_embd=32", "model.block_size=32", "train.batch_size=8",
            "train.max_iters=40", "train.eval_interval=10", "train.eval_iters=4", "train.log_interval=5",
            "train.warmup_iters=5", "train.dtype=float32", "train.plot=never",  # float32: losses compared to 1e-3
            *extra]


def metrics(run: Path) -> list[dict]:
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


def losses(run: Path) -> list[tuple[str, str, str]]:
    return [(r["step"], r["train_loss"], r["val_loss"]) for r in metrics(run)]


def torchrun(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess:
    """train.py under torchrun, 2 processes of one thread each (2 cores), its output captured;
    torchrun's log folder (a new torchelastic_* folder it leaves in the temp folder at every
    launch) goes inside the test's own."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(ROOT / "train.py"), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_ddp_two_processes_match_one_process(corpus, tmp_path):
    """2 gloo processes with batch 4 each == 1 process with batch 8 (same global batch)."""
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    import train
    train.main(train_args(corpus, single, "train.max_iters=20"))
    done = torchrun(tmp_path, train_args(corpus, ddp, "train.max_iters=20", "train.batch_size=4"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("parameters") == 1  # only rank 0 prints: the model line, each eval, the end
    assert done.stdout.count("step 20: train loss") == 1 and done.stdout.count("done: step 20") == 1, done.stdout
    a, b = metrics(single), metrics(ddp)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):  # stated tolerance: 1e-3 (float summation order differs across processes)
        for key in ("train_loss", "val_loss"):
            if ra[key]:
                assert abs(float(ra[key]) - float(rb[key])) < 1e-3, (ra, rb)
    assert load_checkpoint(ddp / "ckpt.pt")["step"] == 20
    import io
    import sample
    text = io.StringIO()
    sample.main([str(ddp), "--max-new-tokens", "20", "--prompt", "the"], out=text)  # DDP's checkpoint samples
    assert len(text.getvalue()) >= 20
    # a fine-tune under torchrun said "train.init_from: starting from ..." once a process
    tuned = torchrun(tmp_path, train_args(corpus, tmp_path / "tuned", "train.max_iters=5", "train.batch_size=4",
                                          f"train.init_from={single}"))
    assert tuned.returncode == 0 and tuned.stdout.count("train.init_from: starting from") == 1, tuned.stdout


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the workers' ranks in /proc")
def test_ddp_a_signal_to_one_worker_stops_every_process_as_interrupted(corpus, tmp_path):
    """SIGTERM to rank 1 alone: every process saves and stops together, and rank 0 says
    `interrupted` too (it said "stopped", as after --stop-at, and exited 0)."""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             str(ROOT / "train.py"), *train_args(corpus, run, "train.max_iters=100000",
                                                                 "train.eval_interval=100000")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "ckpt.pt").exists():  # step 0's eval saves one
        time.sleep(0.2)
    time.sleep(1.0)  # some steps
    os.kill(workers_of(proc.pid)[1], signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert "interrupted at step" in out and "stopped at step" not in out, out[-2000:]
    assert err.count("interrupted\n") == 1, err[-3000:]  # rank 0 speaks for the run, as it prints the rest
    assert load_checkpoint(run / "ckpt.pt")["step"] > 0
    # each exits as a SIGTERM'd process (143), rank 0 too, which only heard of it: not as a Ctrl-C (130)
    codes = re.findall(r"exitcode\s*:\s*(-?\d+)", err)
    assert proc.returncode != 0 and codes and set(codes) == {"143"}, err[-3000:]


def workers_of(launcher: int) -> dict[int, int]:
    """{rank: pid} of the processes `launcher` (torchrun) started, from /proc."""
    workers = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == launcher:
            workers.update({int(e[5:]): pid for e in environ if e.startswith(b"RANK=")})
    return workers


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_ddp_workers_stop_and_save_when_torchrun_is_killed(corpus, tmp_path):
    """`kill -9` of torchrun (its own clean-up never runs): its workers trained on alone, holding the
    run's lock, for good. Now the kernel sends each SIGTERM: they save and stop together."""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             str(ROOT / "train.py"), *train_args(corpus, run, "train.max_iters=100000",
                                                                 "train.eval_interval=100000")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "ckpt.pt").exists():  # step 0's eval saves one
        time.sleep(0.2)
    workers = workers_of(proc.pid)
    assert len(workers) == 2
    proc.kill()
    proc.wait()
    deadline = time.time() + 60
    while time.time() < deadline and any(Path(f"/proc/{pid}").exists() for pid in workers.values()):
        time.sleep(0.2)
    alive = [pid for pid in workers.values() if Path(f"/proc/{pid}").exists()]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the workers trained on without torchrun"
    assert load_checkpoint(run / "ckpt.pt")["step"] > 0 and not (run / ".lock").exists()


@pytest.mark.slow
def test_ddp_a_second_torchrun_on_a_folder_in_use_says_only_that(corpus, tmp_path):
    """A torchrun training into a folder another training holds: rank 0 said it is in use, and rank
    1, checking the folder on its own, `already holds a run; continue it with --resume`, which would
    be refused too. The other ranks follow rank 0's checks of the folder."""
    from tinygpt.runs import run_lock
    run = tmp_path / "run"
    run.mkdir()
    (run / "ckpt.pt").write_bytes(b"a run's")
    with run_lock(run):
        done = torchrun(tmp_path, train_args(corpus, run))
    assert done.returncode != 0 and "is in use by another training" in done.stderr, done.stderr[-3000:]
    assert "already holds a run" not in done.stderr and done.stderr.count("interrupted") == 0, done.stderr[-3000:]


def test_a_process_but_rank_0_without_the_run_folder_says_it_must_be_shared(corpus, tmp_path, monkeypatch):
    """Two machines, train.out_dir on each one's own disk: --resume on the one without ckpt.pt said
    `no checkpoint ...; drop --resume`, and dropping it, rank 0 `already holds a run; continue it
    with --resume`. Every process reads ckpt.pt: the folder must be one they share."""
    import train
    from tinygpt.config import load_config
    from tinygpt.errors import UserError
    from tinygpt.runtime import Distributed
    monkeypatch.setattr(Distributed, "barrier", lambda self: None)  # rank 0 found its ckpt.pt
    # the same settings, and rank 0 found ckpt.pt: every process says which one lacks it (rank 0 too, first)
    monkeypatch.setattr(Distributed, "gather", lambda self, obj: [None if isinstance(obj, str) else obj, obj])
    args = train.parse_args([*train_args(corpus, tmp_path / "elsewhere"), "--resume"])
    cfg = load_config(args.config, args.set)
    with pytest.raises(UserError, match=r"^process 1: --resume: .*ckpt.pt, which process 0 resumes from, is not on "
                                        r"its machine: .* must be a folder that all the run's machines share"):
        train.train(args, cfg, Distributed(1, 2, torch.device("cpu")))


def test_a_worker_that_loses_its_peer_mid_step_says_so_in_one_line():
    """A worker killed mid-step: the other's backward pass fails in gloo ("Connection closed by
    peer"); that is one line naming what happened, not gloo's traceback."""
    from tinygpt.errors import UserError
    from tinygpt.runtime import Distributed
    with pytest.raises(UserError, match="process 1: another process of this torchrun run stopped"):
        with Distributed(1, 2, torch.device("cpu")).peers():
            raise RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:3456")
    with pytest.raises(RuntimeError, match="a bug"):  # anything else is not hidden
        with Distributed(1, 2, torch.device("cpu")).peers():
            raise RuntimeError("a bug")
    # waiting at the data barrier past gloo's timeout while process 0 prepares a large dataset: its traceback
    with pytest.raises(UserError, match=r"^process 1: another process of this torchrun run did not answer within "
                                        r"the process group's timeout .*prepare it first \(python -m data.prepare "
                                        r"CONFIG\)"):
        with Distributed(1, 2, torch.device("cpu")).peers():
            raise RuntimeError("[../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv "
                               "operation to complete")


@pytest.mark.slow
def test_ddp_a_refusal_on_rank_0_is_one_line_on_every_rank(tmp_path):
    """Rank 0 refuses the dataset while preparing it; rank 1, waiting at the barrier, stops with one
    line too (or `interrupted`, if torchrun's SIGTERM comes first), not gloo's traceback. The only
    traceback left is torchrun's own report (docs/design.md)."""
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9 " * 100)
    done = torchrun(tmp_path, train_args(bad, tmp_path / "run"))
    assert done.returncode != 0
    assert "error: " in done.stderr and "is not UTF-8" in done.stderr, done.stderr[-3000:]
    assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr[-3000:]  # torchrun's
    assert "ChildFailedError" in done.stderr and "by peer" not in done.stderr


def test_a_resume_on_another_number_of_processes_says_the_global_batch_changed(corpus, tmp_path, capsys):
    """A run trained on 2 processes and resumed on 1 halved its global batch (train.batch_size is per
    process) without a word."""
    import train
    run = tmp_path / "run"
    train.main(train_args(corpus, run, "train.threads=1") + ["--stop-at", "5"])
    ckpt = load_checkpoint(run / "ckpt.pt")
    ckpt.update(rng_ranks=[ckpt["rng"], ckpt["rng"]], loss_sum_ranks=[ckpt["loss_sum"]] * 2)  # as 2 processes save it
    save_checkpoint(run / "ckpt.pt", ckpt)
    capsys.readouterr()
    train.main(train_args(corpus, run, "train.threads=1", "train.max_iters=10") + ["--resume"])
    assert ("note: resumed on 1 process, trained on 2: the global batch is now 8 sequences, was 16 "
            "(train.batch_size is per process: train.batch_size=16 keeps it)") in capsys.readouterr().err


def test_a_resume_on_another_number_of_processes_logs_the_whole_batchs_loss(corpus, tmp_path, capsys):
    """Resumed on 1 process from 2, the first log row took rank 0's loss sum alone (its half of the batch): the
    ranks' mean is the batch's. The same global batch is said to be the same ('now 16, was 16' read as a change)."""
    from types import SimpleNamespace
    import train
    ckpt = {"loss_sum": 3.0, "loss_sum_ranks": [3.0, 5.0], "rng": "r0", "rng_ranks": ["r0", "r1"]}
    one = SimpleNamespace(dist=SimpleNamespace(rank=0, world_size=1))
    assert train.Run.own(one, ckpt, "loss_sum") == 4.0 and train.Run.own(one, ckpt, "rng") == "r0"
    two = SimpleNamespace(dist=SimpleNamespace(rank=1, world_size=2))
    assert train.Run.own(two, ckpt, "loss_sum") == 5.0 and train.Run.own(two, ckpt, "rng") == "r1"  # its own
    run = tmp_path / "run"
    train.main(train_args(corpus, run, "train.threads=1") + ["--stop-at", "5"])
    saved = load_checkpoint(run / "ckpt.pt")
    saved.update(rng_ranks=[saved["rng"], saved["rng"]], loss_sum_ranks=[saved["loss_sum"]] * 2)
    save_checkpoint(run / "ckpt.pt", saved)
    capsys.readouterr()
    train.main(train_args(corpus, run, "train.threads=1", "train.max_iters=10", "train.batch_size=16") + ["--resume"])
    err = capsys.readouterr().err
    assert ("note: resumed on 1 process, trained on 2: the global batch is 16 sequences, as before "
            "(train.batch_size is per process)") in err
    # nor is train.batch_size=16 a change to undo: the note said "to go on exactly, give the run's own" (8), which
    # would have halved the global batch
    assert "--resume with train.batch_size" not in err, err
    from tinygpt.config import load_config
    args = train_args(corpus, run, "train.batch_size=16")
    cfg, two_processes = load_config(args[0], args[3:]), {**saved, "step": 5}
    assert train.changed_training(cfg, two_processes, 1) is None
    assert "train.batch_size=16 (was 8)" in train.changed_training(cfg, two_processes, 2)  # the same 2: a change
    # a batch that changes the global one on another number of processes: "give the run's own" (8) changed it
    # too; the note on the global batch names the batch_size that keeps it (above), this one says nothing more
    cfg = load_config(args[0], [*args[3:], "train.batch_size=12"])
    assert train.changed_training(cfg, two_processes, 1) is None


def test_the_machines_of_one_torchrun_run_must_be_given_the_same_settings():
    """On several machines each reads its own config and --set: another machine's train.lr trained on without a
    word, its weights drifting from the others'. Every process compares (paths and threads may differ)."""
    from types import SimpleNamespace
    import train
    from tinygpt.config import Config, flat_config
    from tinygpt.errors import UserError
    here, there = Config(), Config()
    there.train.lr, there.train.out_dir, there.data.prepared_dir = 0.03, "/elsewhere/run", "/elsewhere/prepared"

    def keep(c: Config) -> dict:
        return {k: v for k, v in flat_config(c).items() if k not in train.PER_MACHINE}

    def dist(of: list) -> SimpleNamespace:
        return SimpleNamespace(rank=1, world_size=2, gather=lambda mine: [keep(c) for c in of])
    with pytest.raises(UserError, match=r"^process 1: the processes of this torchrun run were given other settings: "
                                        r"train.lr=0.001 here, 0.03 on process 0; give every machine the same"):
        train.check_same_settings(here, dist([there, here]), {})
    here.train.out_dir = "/here/run"  # where each machine finds its files may differ
    same = Config()
    same.train.out_dir = "/elsewhere/run"
    train.check_same_settings(here, dist([same, here]), {})


def test_the_machines_of_one_torchrun_run_must_be_given_the_same_flags():
    """--resume (or --stop-at) on one machine alone: gloo's C++ abort (`Is there a distributed collective mismatch`),
    and the stop's checkpoint lost."""
    from types import SimpleNamespace
    import train
    from tinygpt.config import Config, flat_config
    from tinygpt.errors import UserError
    settings = {k: v for k, v in flat_config(Config()).items() if k not in train.PER_MACHINE}
    flags = {"--resume": True, "--stop-at": 13}
    for theirs, shown in [({"--resume": False, "--stop-at": 13}, "--resume=True here, False on process 0"),
                          ({"--resume": True, "--stop-at": None}, "--stop-at=13 here, None on process 0")]:
        dist = SimpleNamespace(rank=1, world_size=2, gather=lambda mine: [{**settings, **theirs}, mine])
        with pytest.raises(UserError, match=f"^process 1: .* other settings: {re.escape(shown)}; give every machine "
                                            f"the same config, --set and flags$"):
            train.check_same_settings(Config(), dist, flags)
    train.check_same_settings(Config(), SimpleNamespace(rank=1, gather=lambda mine: [mine, mine]), flags)


def test_the_machines_of_one_torchrun_run_must_read_the_same_data_and_checkpoint():
    """Each machine reads its own prepared data and ckpt.pt: other text trained each process on its own without a
    word (another vocabulary: DDP's traceback), and another run's ckpt.pt was resumed beside this one's."""
    from types import SimpleNamespace
    import train
    from tinygpt.errors import UserError
    data = SimpleNamespace(meta={"digest": "a" * 64})
    ckpt = {"run_id": "0123abcd", "step": 13}

    def dist(theirs: dict) -> SimpleNamespace:
        return SimpleNamespace(rank=0, gather=lambda mine: [mine, {**mine, **theirs}])
    with pytest.raises(UserError, match=r"^process 0: the processes of this torchrun run read other files: prepared "
                                        r"data \(aaaaaaaaaaaa on process 0, bbbbbbbbbbbb on process 1\): the run's "
                                        r"machines must find the same data.dataset and share train.out_dir$"):
        train.check_same_start(dist({"prepared data": "b" * 12}), data, ckpt)
    with pytest.raises(UserError, match=r"ckpt.pt \(run 0123abcd, step 13 on process 0, run 99, step 17 on "
                                        r"process 1\)"):
        train.check_same_start(dist({"ckpt.pt": "run 99, step 17"}), data, ckpt)
    train.check_same_start(dist({}), data, ckpt)


def test_a_machine_without_the_prepared_data_is_named_not_called_damaged(corpus, tmp_path):
    """Process 0 prepares the data on its machine; another machine without it (another data.prepared_dir, not
    shared) said `the prepared data in ... is damaged (FileNotFoundError); delete the folder`: there was none."""
    from types import SimpleNamespace
    import train
    from tinygpt.config import load_config
    from tinygpt.errors import UserError
    cfg = load_config(str(ROOT / "configs/stories.yaml"), train_args(corpus, tmp_path / "run")[3:])
    dist = SimpleNamespace(master=False, rank=1, world_size=2, barrier=lambda: None, gather=lambda mine: [None, mine])
    with pytest.raises(UserError, match=rf"^process 1: the prepared data {re.escape(str(tmp_path))}/prepared/\S+ is "
                                        r"not on its machine: process 0 prepares it on its own; prepare the data on "
                                        r"each machine first \(python -m data.prepare CONFIG \[--set ...\]\), or "
                                        r"share data.prepared_dir, the dataset at the same path on each machine"):
        train.load_data(cfg, dist, "test")


def test_resume_is_exact_with_dropout(corpus, tmp_path):
    """40 steps straight == 20 steps, stop, --resume to 40: bit-identical losses (dropout uses the RNG).
    Bit for bit with the thread count pinned (README): a busy neighbour would change it otherwise."""
    import train
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train.main(train_args(corpus, straight, "model.dropout=0.1", "train.threads=1"))
    train.main(train_args(corpus, resumed, "model.dropout=0.1", "train.threads=1") + ["--stop-at", "15"])
    assert load_checkpoint(resumed / "ckpt.pt")["step"] == 15
    train.main(train_args(corpus, resumed, "model.dropout=0.1", "train.threads=1") + ["--resume"])
    assert losses(straight) == losses(resumed)
    a, b = load_checkpoint(straight / "ckpt.pt"), load_checkpoint(resumed / "ckpt.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_no_progress_bar_into_a_log_file(corpus, tmp_path, capsys):
    """`train.py CONFIG 2> log`: the bar's redraws went into the file, ten \\r-joined copies a second
    (hours of training: megabytes of one line). The bar now draws at a terminal only; the eval lines
    and the end line are still there."""
    import train
    args = train_args(corpus, tmp_path / "run", "train.max_iters=10")
    args.remove("--quiet")
    train.main(args)
    out, err = capsys.readouterr()
    assert "\r" not in err and "tok/s" not in err, err
    assert "step 10: train loss" in out and "done: step 10" in out


@pytest.mark.slow
def test_at_80_columns_the_bar_shows_tokens_per_second(corpus, tmp_path):
    """At a terminal 80 columns wide the bar's tail ended `mfu=4%, tok_s` (steps/s and key=value took
    the room): the figure a user watches was cut. Now the bar's last draw, within 80 columns, holds the
    loss, tokens/s and MFU."""
    pty = pytest.importorskip("pty")
    import fcntl
    import select
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    args = train_args(corpus, tmp_path / "run", "train.max_iters=300", "train.eval_interval=300",
                      "train.eval_iters=1", "train.log_interval=50")
    args.remove("--quiet")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], stdin=slave, stdout=slave,
                            stderr=slave, env={**env, "OMP_NUM_THREADS": "1"})
    os.close(slave)
    seen = b""
    while True:  # read until the terminal's other end closes (EIO on Linux) or the output ends
        if select.select([master], [], [], 1.0)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=120) == 0, seen[-2000:]
    draws = [d.rstrip() for d in re.split(r"[\r\n]", seen.decode(errors="replace")) if "300/300" in d]
    assert draws, seen[-2000:]
    assert len(draws[-1]) <= 80 and re.search(r"loss \d\.\d{4}, [\d,]+ tok/s, mfu \d+%]$", draws[-1]), draws


@pytest.mark.parametrize("done, elapsed, tok_s", [(4900, 4000, 1_500_000), (1500, 60, 30_123)],
                         ids=["gpu-past-an-hour", "cpu"])
def test_the_bars_tail_fits_80_columns_on_a_gpu_run_past_an_hour(done, elapsed, tok_s):
    """configs/shakespeare_char_gpu.yaml's 5,000 steps past an hour at 1.5M tokens/s: the tail ended
    `1,500,000 tok/s, mfu` (the lr took the room), its figure cut."""
    from tqdm import tqdm
    import train
    row = {"train_loss": "1.2345", "lr": "6.000e-04", "tokens_per_s": str(tok_s), "mfu": "0.3500"}
    line = tqdm.format_meter(done, 5000, elapsed, ncols=80, bar_format=train.BAR_FORMAT, postfix=train.bar_postfix(row))
    assert len(line) <= 80 and line.endswith(f", loss 1.2345, {tok_s:,} tok/s, mfu 35%]"), line


def stopped_and_resumed(corpus: Path, tmp_path: Path, monkeypatch, module, at: int, extra: tuple,
                        check: Callable[[Path], None]) -> None:
    """A straight run, and the same run sent Ctrl-C at the at-th call of module.get_batch (train's: a
    micro-batch; tinygpt.training's: an eval batch), checked by `check` as the signal left it, then
    resumed: both must end bit for bit alike."""
    import train
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train.main(train_args(corpus, straight, *extra))
    calls = {"n": 0}
    real = module.get_batch

    def signal_at(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at:
            signal.raise_signal(signal.SIGINT)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, "get_batch", signal_at)
    with pytest.raises(SystemExit) as stop:
        train.main(train_args(corpus, stopped, *extra))
    assert stop.value.code == 128 + signal.SIGINT
    assert calls["n"] == at  # no batch after the signal
    check(stopped)
    monkeypatch.setattr(module, "get_batch", real)
    train.main(train_args(corpus, stopped, *extra) + ["--resume"])
    assert losses(straight) == losses(stopped)
    a, b = load_checkpoint(straight / "ckpt.pt"), load_checkpoint(stopped / "ckpt.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_a_signal_mid_step_undoes_the_step_and_resumes_exactly(corpus, tmp_path, monkeypatch):
    """A Ctrl-C between the micro-batches of a long step (train.grad_accum) stops there, the step
    undone, instead of after the whole step (grad_accum=30000 took 128 s to stop): its checkpoint is
    at the step before, with the batch and dropout random states of before it, so a resume redoes the
    step and ends bit for bit where a straight run does."""
    import train

    def step_7_undone(stopped: Path) -> None:
        assert load_checkpoint(stopped / "ckpt.pt")["step"] == 7  # not finished
    extra = ("model.dropout=0.1", "train.threads=1", "train.grad_accum=4", "train.max_iters=12")
    stopped_and_resumed(corpus, tmp_path, monkeypatch, train, 7 * 4 + 3, extra, step_7_undone)  # step 7's 3rd


@pytest.mark.parametrize("eval_step", [10, 20])  # an eval on the way, the last one
def test_a_signal_during_an_eval_stops_it_and_the_resume_evaluates_again(corpus, tmp_path, monkeypatch, eval_step):
    """A Ctrl-C during an eval waited for all of it (train.eval_iters batches per split: minutes for a
    large one). It stops between eval batches: nothing is logged for the step, the checkpoint is of the
    step, and the resume evaluates it, ending bit for bit as a straight run (exit 130 even at the last
    step, whose eval did not finish)."""
    from tinygpt import training

    def not_evaluated(stopped: Path) -> None:
        assert load_checkpoint(stopped / "ckpt.pt")["step"] == eval_step
        assert str(eval_step) not in [r["step"] for r in metrics(stopped) if r["val_loss"]]
    extra = ("model.dropout=0.1", "train.threads=1", "train.max_iters=20", "train.eval_iters=4")
    before = 8 * (eval_step // 10)  # eval batches before that eval's: 2 splits x 4 per eval at 0 (and 10)
    stopped_and_resumed(corpus, tmp_path, monkeypatch, training, before + 3, extra, not_evaluated)


@pytest.mark.slow
def test_ddp_on_cpus_stops_between_micro_batches(corpus, tmp_path):
    """Under torchrun on CPUs, a Ctrl-C is agreed between micro-batches too: a step of 100,000 of
    them (minutes; torchrun kills its workers 30 s after passing the signal on) is undone, saved."""
    run = tmp_path / "run"
    args = train_args(corpus, run, "train.max_iters=100000", "train.eval_interval=100000", "train.batch_size=4",
                      "train.grad_accum=100000")
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             str(ROOT / "train.py"), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)})
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run / "ckpt.pt").exists():  # step 0's eval saves one
            time.sleep(0.1)
        time.sleep(1.0)  # inside step 0
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=25)
    finally:
        proc.kill()
        proc.wait()
    assert "interrupted at step 0: saved" in out, err[-2000:]
    assert len(load_checkpoint(run / "ckpt.pt")["rng_ranks"]) == 2


@pytest.mark.slow
def test_a_resume_on_more_processes_gives_each_rank_its_own_dropout(corpus, tmp_path):
    """A run of 1 process resumed on 2: every rank took rank 0's RNG states, and drew the same dropout masks as the
    others for the rest of the run (the checkpoint then kept two equal states)."""
    run = tmp_path / "run"
    import train
    train.main(train_args(corpus, run, "model.dropout=0.1", "train.max_iters=20", "train.threads=1")
               + ["--stop-at", "13"])
    done = torchrun(tmp_path, [*train_args(corpus, run, "model.dropout=0.1", "train.max_iters=20",
                                           "train.batch_size=4"), "--resume"])
    assert done.returncode == 0, done.stderr[-2000:]
    ranks = load_checkpoint(run / "ckpt.pt")["rng_ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["torch"], ranks[1]["torch"])


@pytest.mark.slow
def test_ddp_ranks_draw_their_own_dropout_and_resume_exactly(corpus, tmp_path):
    """Under DDP each rank has its own random stream (seeded train.seed + rank), so its dropout
    masks differ from the other ranks' as they would within one batch (they used to be the same),
    and the checkpoint keeps every rank's RNG states: 2 processes stopped at step 13 and resumed ==
    20 steps straight, bit for bit (one thread each). (--stop-at stops at its step, not at the next
    log step, 15: under DDP it waited for one, and with a log_interval beyond it never stopped.)"""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"

    def ddp(run: Path, *extra: str) -> None:
        args = train_args(corpus, run, "model.dropout=0.1", "train.max_iters=20", "train.batch_size=4")
        done = torchrun(tmp_path, [*args, *extra])
        assert done.returncode == 0, done.stderr[-2000:]

    ddp(straight)
    ddp(resumed, "--stop-at", "13")
    assert load_checkpoint(resumed / "ckpt.pt")["step"] == 13
    ranks = load_checkpoint(resumed / "ckpt.pt")["rng_ranks"]
    assert len(ranks) == 2 and not torch.equal(ranks[0]["torch"], ranks[1]["torch"])
    ddp(resumed, "--resume")
    assert losses(straight) == losses(resumed)
    a, b = load_checkpoint(straight / "ckpt.pt"), load_checkpoint(resumed / "ckpt.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_a_resume_of_a_run_killed_while_drawing_its_last_plot_draws_it(corpus, tmp_path):
    """`kill -9` while the finished run drew loss.png (train.plot=end): a resume said `done` and drew
    nothing, and the dead writer's temp files stayed for good (they went only when the same file was
    written again, which a finished run's resume never does)."""
    from tinygpt import plots
    if not plots.can_plot():
        pytest.skip("needs matplotlib")
    import train
    run = tmp_path / "run"
    args = train_args(corpus, run, "train.max_iters=10", "train.plot=end")
    train.main(args)
    (run / "loss.png").unlink()  # as if killed while drawing it
    dead = [run / f".{name}.999999999.abcd1234.tmp" for name in ("loss.png", "best.pt", "ckpt.pt")]
    for temp in dead:
        temp.write_bytes(b"half")
    train.main(args + ["--resume"])
    assert (run / "loss.png").is_file() and not any(temp.exists() for temp in dead)


def test_sigkill_while_saving_never_breaks_the_checkpoint(tmp_path):
    """20 kills at random moments of saving: what is left always loads, old or new."""
    path = tmp_path / "ckpt.pt"
    weights = {f"w{i}": torch.randn(256, 1024) for i in range(8)}  # 8 MB: a save takes a while
    state = {"config": {}, "tokenizer": {}, "model": weights}
    save_checkpoint(path, {**state, "step": 0})
    rng, last = random.Random(0), 0
    for kill in range(20):
        pid = os.fork()
        if pid == 0:  # child: save new versions until killed
            try:
                step = last
                while True:
                    step += 1
                    save_checkpoint(path, {**state, "step": step})
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        ckpt = load_checkpoint(path)  # raises if the file were truncated
        assert ckpt["step"] >= last
        assert torch.equal(ckpt["model"]["w3"], weights["w3"])
        last = ckpt["step"]
    assert last > 0  # some saves did complete between kills
    save_checkpoint(path, {**state, "step": last + 1})  # the next save sweeps stale temp files
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT])  # SIGTERM: the next test, SIGHUP: the one after
def test_signal_saves_a_checkpoint_and_stops(corpus, tmp_path, signum):
    run = tmp_path / "run"
    args = train_args(corpus, run, "train.max_iters=100000", "train.eval_interval=100000")
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "ckpt.pt").exists():  # step 0's eval saves one
        time.sleep(0.2)
    time.sleep(1.0)  # let it train some steps
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert err == "interrupted\n"  # docs/errors.md: the line on stderr, as after any Ctrl-C
    assert "continue with --resume" in out
    step = load_checkpoint(run / "ckpt.pt")["step"]
    assert step > 0
    import train
    train.main(args + ["--resume", "--stop-at", str(step + 3)])
    assert load_checkpoint(run / "ckpt.pt")["step"] == step + 3


@pytest.mark.slow
def test_a_second_sigterm_during_the_step_still_saves(corpus, tmp_path):
    """torchrun, a job scheduler or a process-group kill signals the launcher and the worker
    together, and the launcher passes its signal on: the worker got two SIGTERMs at once, stopped
    unsaved (exit 130) and lost the steps since its last checkpoint. A duplicate is now ignored.
    And the stop comes between micro-batches: a step of 100,000 of them (minutes) is not waited for."""
    run = tmp_path / "run"
    # 100,000 micro-steps per step: the step after step 0's save lasts long enough for both signals
    args = train_args(corpus, run, "train.max_iters=100000", "train.eval_interval=100000", "train.grad_accum=100000")
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run / "ckpt.pt").exists():
            time.sleep(0.05)
        time.sleep(0.3)  # inside step 0
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)  # the first handler has run (Python merges a signal that is pending twice)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM and err == "interrupted\n", err[-2000:]
    assert "interrupted at step 0: saved" in out and "continue with --resume" in out  # step 0 undone


@pytest.mark.slow
@pytest.mark.parametrize("nohup", [False, True], ids=["hang-up", "nohup"])
def test_a_terminal_that_hangs_up_saves_and_stops(corpus, tmp_path, nohup):
    """An SSH connection that drops: the terminal hangs up, the kernel sends SIGHUP, and every later
    write to it fails (EIO). Training died at once, the steps since its last checkpoint lost; now it
    saves and exits 129, as after SIGTERM, its output dropped. Under `nohup` (SIGHUP ignored, so that
    the run outlives the terminal) it trains on: it used to stop all the same."""
    pty = pytest.importorskip("pty")
    import fcntl
    import select
    import termios
    run = tmp_path / "run"
    args = train_args(corpus, run, "train.max_iters=100000", "train.eval_interval=100000")
    args.remove("--quiet")  # the progress bar writes to the terminal too
    master, slave = pty.openpty()

    def own_terminal() -> None:  # a session whose controlling terminal is the pty, as a login's
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        if nohup:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], stdin=slave, stdout=slave,
                            stderr=slave, preexec_fn=own_terminal)
    os.close(slave)
    seen, deadline = b"", time.time() + 120
    while b"step 0:" not in seen and time.time() < deadline and proc.poll() is None:
        if select.select([master], [], [], 0.5)[0]:
            seen += os.read(master, 65536)
    time.sleep(1.0)  # let it train some steps (and write to the terminal)
    os.close(master)  # the hang-up
    if nohup:
        time.sleep(1.0)
        assert proc.poll() is None, seen[-2000:]  # still training, its output dropped
        proc.send_signal(signal.SIGTERM)  # (to end the test: saved, 143)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM and load_checkpoint(run / "ckpt.pt")["step"] > 0
        return
    assert proc.wait(timeout=120) == 128 + signal.SIGHUP, seen[-2000:]
    step = load_checkpoint(run / "ckpt.pt")["step"]
    assert step > 0  # saved where it stopped, not only step 0's checkpoint
    import train
    train.main(args + ["--quiet", "--resume", "--stop-at", str(step + 3)])
    assert load_checkpoint(run / "ckpt.pt")["step"] == step + 3


@pytest.mark.slow
@pytest.mark.parametrize("buffered", [False, True])
def test_a_closed_stdout_does_not_stop_training(corpus, tmp_path, buffered):
    """`train.py | head -1`: the reader of stdout leaves early, and the training goes on to its end,
    saying so once on stderr. (It used to end at its next print with exit 0, the steps since the last
    checkpoint lost; with a buffered stdout it failed at exit, 120.)"""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if buffered:  # the usual case: stdout is a pipe, so Python writes it in blocks, the first one at exit
        del env["PYTHONUNBUFFERED"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"),
                             *train_args(corpus, run, "train.max_iters=100", "train.eval_interval=10")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if not buffered:
        assert proc.stdout.readline().startswith("model:")
    proc.stdout.close()  # the reader leaves: every later write to stdout meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err[-2000:]
    assert load_checkpoint(run / "ckpt.pt")["step"] == 100 and metrics(run)[-1]["step"] == "100"
    assert err == "warning: stdout was closed (its reader left); going on without printing there\n"


@pytest.mark.slow
def test_ctrl_c_with_the_reader_of_stdout_gone_still_says_how_to_continue(corpus, tmp_path):
    """`train.py | tee log` and Ctrl-C, which stops tee too: the line `interrupted at step N: saved ...;
    continue with --resume` met the closed pipe and was lost, and the warning said the run was going on."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"),
                             *train_args(corpus, run, "train.max_iters=100000", "train.eval_interval=100000")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 120
    while not (run / "ckpt.pt").is_file():  # training (stdout, a pipe, holds its lines in Python's buffer)
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.2)
    time.sleep(1)
    proc.stdout.close()  # the reader leaves, as tee does on the same Ctrl-C
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, err[-2000:]
    lines = err.splitlines()
    assert "warning: stdout was closed (its reader left)" in lines, err  # not "going on": it stops
    assert re.fullmatch(r"interrupted at step \d+: saved \S+ckpt.pt; continue with --resume", lines[-2]), err
    assert lines[-1] == "interrupted"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a file whose disk is always full)")
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_log_on_a_full_disk_does_not_stop_the_training(corpus, tmp_path, stream):
    """`train.py > log.txt` on a full disk (out_dir on another): ENOSPC on every write to the log
    ended the run at once, unsaved (stderr: with its error line lost). The output is dropped."""
    run = tmp_path / "run"
    args = train_args(corpus, run, "train.max_iters=20")
    args.remove("--quiet")  # the progress bar writes to stderr too
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, str(ROOT / "train.py"), *args], text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"},
                              **{stream: full, "stdout" if stream == "stderr" else "stderr": subprocess.PIPE})
    assert done.returncode == 0, (done.stdout or done.stderr)[-2000:]
    assert load_checkpoint(run / "ckpt.pt")["step"] == 20 and metrics(run)[-1]["step"] == "20"
    if stream == "stdout":  # said where it can be read
        assert done.stderr.startswith("warning: stdout cannot be written (No space left on device); going on")


@pytest.mark.slow
def test_a_run_folder_removed_while_training_is_not_made_again(corpus, tmp_path):
    """`rm -rf` of a live run's folder: its next save made the folder again (no config.yaml, no
    lock), and a second training started there meanwhile wrote into the same files."""
    import shutil
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"),
                             *train_args(corpus, run, "train.max_iters=3000", "train.eval_interval=20")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "ckpt.pt").exists():
        time.sleep(0.05)
    shutil.rmtree(run)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 2, err[-2000:]
    assert err.startswith(f"error: train.out_dir={str(run)!r} was removed or moved (or its .lock) while this "
                          f"training ran")
    assert not run.exists()


@pytest.mark.parametrize("removal", ["rm -rf", "mv", "mv, then mkdir"])
def test_a_run_folder_removed_during_a_save_is_not_left_holding_it(corpus, tmp_path, monkeypatch, removal):
    """The removal landing while ckpt.pt's temp file was written: `rm -rf` failed (the temp file came
    after its listing) and a folder holding only ckpt.pt was left, with "stopped ... without writing
    there"; after `mv`, "cannot write .../ckpt.pt: No such file or directory". A new empty folder the
    user made in its place is theirs: left as it is."""
    import train
    from tinygpt import checkpoint
    from tinygpt.errors import UserError
    run, written = tmp_path / "run", checkpoint.temp_beside
    def removed_meanwhile(path, write):
        tmp = written(path, write)
        if path.name == "ckpt.pt" and run.exists():
            if removal.startswith("mv"):
                run.rename(tmp_path / "moved")
                if removal.endswith("mkdir"):
                    run.mkdir()
            else:  # rm -rf listed the folder before the temp file was made: its rmdir fails
                for entry in run.iterdir():
                    if entry != tmp:
                        entry.unlink()
                with pytest.raises(OSError):
                    run.rmdir()
        return tmp
    monkeypatch.setattr(checkpoint, "temp_beside", removed_meanwhile)
    with pytest.raises(UserError, match=re.escape(f"train.out_dir={str(run)!r} was removed or moved (or its .lock) "
                                                  f"while this training ran: stopped at step")):
        train.main(train_args(corpus, run, "train.max_iters=20", "train.threads=1"))
    assert (list(run.iterdir()) == []) if removal.endswith("mkdir") else not run.exists()


@pytest.mark.parametrize("removal", ["rm", "mv"])
def test_a_run_folder_removed_while_its_data_load_does_not_come_back(corpus, tmp_path, monkeypatch, removal):
    """Removed (or moved) while the data were prepared, before the first checkpoint: train.py said
    "without writing there", but its config.yaml made the folder again, and a second training that had
    taken the name meanwhile found the first one's config.yaml over its own (its --resume refused)."""
    import train
    from tinygpt.errors import UserError
    run, loading = tmp_path / "run", train.load_data

    def removed_meanwhile(*args, **kwargs):
        data = loading(*args, **kwargs)
        if removal == "mv":
            run.rename(tmp_path / "moved")
        else:
            shutil.rmtree(run)
        return data
    monkeypatch.setattr(train, "load_data", removed_meanwhile)
    with pytest.raises(UserError, match=re.escape(f"train.out_dir={str(run)!r} was removed or moved (or its .lock) "
                                                  f"while this training ran: stopped at step 0")):
        train.main(train_args(corpus, run, "train.threads=1"))
    assert not run.exists()
    assert removal == "rm" or [p.name for p in (tmp_path / "moved").iterdir()] == [".lock"]  # (stale: no harm)


@pytest.mark.slow
def test_after_a_closed_stdout_ctrl_c_says_how_to_continue_on_stderr(corpus, tmp_path):
    """The note "saved ...; continue with --resume" went to the closed stdout: nobody read it."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"),
                             *train_args(corpus, run, "train.max_iters=100000", "train.eval_interval=100000")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    assert proc.stdout.readline().startswith("model:")
    proc.stdout.close()
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "ckpt.pt").exists():  # step 0's eval: stdout written, found closed
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, err[-2000:]
    lines = err.splitlines()
    assert lines[0].startswith("warning: stdout was closed") and "continue with --resume" in lines[1]
    assert lines[-1] == "interrupted"


@pytest.mark.slow  # (a real process: test_a_diverged_run_says_so_in_compare_until_a_resume_trains_on runs it here)
def test_divergence_stops_and_keeps_the_last_good_checkpoint(corpus, tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, str(ROOT / "train.py"),
                           *train_args(corpus, run, "train.lr=1e6", "train.grad_clip=0")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: training diverged") and "at step" in lines[-1]
    assert "train.lr" in lines[-1] and "Traceback" not in done.stderr
    assert load_checkpoint(run / "ckpt.pt")["step"] == 0  # the state evaluated at step 0


def test_a_diverged_run_says_so_in_compare_until_a_resume_trains_on(corpus, tmp_path, capsys):
    """compare.py showed a diverged run as `step 0/40`, like one stopped on its way, and a report
    counted it among the runs to finish with --resume (which diverges again): nothing in its folder
    said it diverged. The diverged step's row goes into metrics.csv, and a resume drops it."""
    import train
    from tinygpt.errors import run_cli
    from tinygpt.report import ended_in_error
    from tinygpt.runs import summarize_run
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        run_cli(train.main, train_args(corpus, run, "train.lr=1e6", "train.grad_clip=0"))
    assert stopped.value.code == 2 and "training diverged: the train loss is nan at step 5" in capsys.readouterr().err
    assert metrics(run)[-1]["step"] == "5" and metrics(run)[-1]["train_loss"] == "nan"
    row = summarize_run(run)
    assert row["status"] == "diverged at step 5 (ckpt.pt: step 0)" and ended_in_error(row), row["status"]
    train.main([str(run / "config.yaml"), "--resume", "--quiet", "--set", "train.lr=1e-3"])
    assert summarize_run(run)["status"] == "done" and all(r["train_loss"] != "nan" for r in metrics(run))


def test_a_stop_does_not_save_a_diverged_state_over_the_last_good_checkpoint(corpus, tmp_path, capsys):
    """--stop-at (or Ctrl-C, SIGTERM) between logs saved NaN weights over step 0's ckpt.pt and said
    `continue with --resume`, which then refused the checkpoint as damaged (its loss_sum is nan)."""
    import train
    from tinygpt.errors import run_cli
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        run_cli(train.main, train_args(corpus, run, "train.lr=1e6", "train.grad_clip=0", "train.log_interval=100",
                                       "train.eval_interval=100", "train.max_iters=200") + ["--stop-at", "3"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith("error: training diverged: the train loss is nan at step 3"), err
    assert "keeps the last good state" in err and "Traceback" not in err
    assert load_checkpoint(run / "ckpt.pt")["step"] == 0


def test_a_stop_checks_the_weights_too():
    """Its last step's loss was finite, the update after it was not: the weights are checked as well."""
    from types import SimpleNamespace
    import train
    from tinygpt.config import TrainConfig
    from tinygpt.errors import UserError
    from tinygpt.runtime import Distributed
    model = torch.nn.Linear(2, 2)
    run = SimpleNamespace(cfg=SimpleNamespace(train=TrainConfig()), step=7, out_dir=Path("out/x"), model=model,
                          loss_count=2, loss_sum=torch.tensor(3.0), dist=Distributed(0, 1, torch.device("cpu")),
                          metrics=[], last_lr=1e-3)
    train.check_finite(run)  # finite: nothing to say
    with torch.no_grad():
        model.weight[0, 0] = float("inf")
    with pytest.raises(UserError, match="training diverged: a weight is not finite at step 7"):
        train.check_finite(run)


def test_the_divergence_hint_does_not_suggest_clipping_already_on():
    from types import SimpleNamespace
    import train
    from tinygpt.config import TrainConfig
    run = SimpleNamespace(cfg=SimpleNamespace(train=TrainConfig(grad_clip=1.0)), step=7, out_dir=Path("out/x"),
                          metrics=[], last_lr=3.25e-4)  # (the lr step 6 trained with)
    nan = {"train": 2.5, "val": float("nan")}
    assert "lower train.lr (train.grad_clip=1.0 is on)" in str(train.diverged("the val loss", nan["val"], run, nan))
    run.cfg.train.grad_clip = 0.0
    assert "lower train.lr or set train.grad_clip" in str(train.diverged("the val loss", nan["val"], run, nan))
    run.cfg.train.lr, run.cfg.train.weight_decay = 1e-3, 1e6  # the decay, not the step, flips and grows the weights
    assert ("lower train.weight_decay=1e+06 or train.lr=0.001: each step scales the weights by 1 - lr * weight_decay "
            "= -999;") in str(train.diverged("the val loss", nan["val"], run, nan))
    assert run.metrics[-1] == {"step": 7, "train_loss": "2.5000", "val_loss": "nan",
                               "lr": "3.250e-04"}  # (the lr of the step that led here, 7 - 1)


def test_more_threads_than_cores_is_warned(monkeypatch):
    """train.threads=1024 on 2 cores trained 300x slower without a word (the MFU looked normal), and
    sample.py --threads 1024 sampled 2.3x slower."""
    from tinygpt import runtime
    monkeypatch.setattr(runtime, "usable_cores", lambda: 2)
    policy = object()  # (a CPU run's thread policy; None on a GPU)
    warn = runtime.too_many_threads
    assert warn(policy, 3, "train.threads", "training") == (
        "warning: train.threads=3 is more than the 2 cores this process can use: the threads take turns and training "
        "is much slower (0 follows the free cores)")
    assert warn(policy, 2, "x", "y") is None and warn(policy, 0, "x", "y") is None and warn(None, 3, "x", "y") is None
    # torchrun's processes on one machine share its cores: 2 threads in each of 2 processes on 2 cores ran 3.3x slower
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert warn(policy, 2, "train.threads", "training") == (
        "warning: train.threads=2 in each of the 2 processes of this machine is more than the 2 cores they can use: "
        "the threads take turns and training is much slower (0 follows the free cores)")
    assert warn(policy, 1, "train.threads", "training") is None


def test_without_matplotlib_the_missing_loss_png_is_said_once(corpus, tmp_path, monkeypatch, capsys):
    """train.plot=eval (or end, the default) without matplotlib drew nothing and said nothing."""
    import train
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import -> ImportError
    train.main(train_args(corpus, tmp_path / "run", "train.plot=eval", "train.max_iters=20"))
    assert capsys.readouterr().err == ("note: matplotlib is not installed: no loss.png (pip install matplotlib, "
                                       "or set train.plot=never)\n")
    assert not (tmp_path / "run" / "loss.png").exists()
    train.main(train_args(corpus, tmp_path / "never", "train.max_iters=6"))  # train.plot=never: nothing to say
    assert capsys.readouterr().err == ""


def test_a_resume_sweeps_a_killed_container_trainings_temp_files(corpus, tmp_path):
    """A training killed mid-save in a container leaves `.ckpt.pt.1.*.tmp` (it was pid 1 there); resumed
    on the host, where pid 1 is always alive, the file (a checkpoint's size) was kept for good. Under the
    run lock only the training writes its files; loss.png's are left (compare.py --plot-only draws it too)."""
    import train
    run = tmp_path / "run"
    train.main(train_args(corpus, run, "train.max_iters=4"))
    dead = [run / f".{name}.1.a1b2c3d4.tmp" for name in ("ckpt.pt", "best.pt", "metrics.csv", "config.yaml")]
    drawing = run / ".loss.png.1.a1b2c3d4.tmp"
    for path in (*dead, drawing):
        path.write_bytes(b"half")
    train.main(train_args(corpus, run, "train.max_iters=6") + ["--resume"])
    assert not any(path.exists() for path in dead) and drawing.exists()


def test_a_warmup_as_long_as_the_run_is_said(corpus, tmp_path, capsys):
    """train.warmup_iters=10**18 trained at a learning rate of about 0 and reported done, the loss flat,
    without a word (the warmup ends after the last step: the rate never reaches train.lr)."""
    import train
    train.main(train_args(corpus, tmp_path / "run", "train.max_iters=4", "train.warmup_iters=1000000000000000000"))
    assert capsys.readouterr().err == ("note: train.warmup_iters=1000000000000000000 >= train.max_iters=4: the learning "
                                       "rate rises to 8e-21 at most, never to train.lr=0.002; lower train.warmup_iters\n")


def test_quiet_prepares_the_data_without_its_progress_bar(corpus, tmp_path, monkeypatch):
    """--quiet ("no progress bar") still drew the tokenizing bar of a big dataset."""
    import train
    calls, prepare = [], train.prepare

    def spy(cfg, show_progress=True):
        calls.append(show_progress)
        return prepare(cfg, show_progress=show_progress)
    monkeypatch.setattr(train, "prepare", spy)
    train.main(train_args(corpus, tmp_path / "run", "train.max_iters=2"))  # (train_args has --quiet)
    assert calls == [False]


def test_init_from_starts_from_the_saved_weights(corpus, tmp_path):
    """Fine-tuning: a new run from another run's weights starts at that run's loss, with its model."""
    import train
    from tinygpt.errors import UserError
    source, tuned = tmp_path / "source", tmp_path / "tuned"
    train.main(train_args(corpus, source, "train.max_iters=20"))
    train.main(train_args(corpus, tuned, "train.max_iters=10", f"train.init_from={source}", "model.n_layer=5"))
    first = metrics(tuned)[0]
    assert first["step"] == "0" and first["val_loss"] == metrics(source)[-1]["val_loss"]
    ckpt = load_checkpoint(tuned / "ckpt.pt")
    assert ckpt["config"]["model"]["n_layer"] == 2  # the starting checkpoint's model, not the override
    weights_only = {k: v for k, v in load_checkpoint(source / "best.pt").items() if k not in ("format", "version")}
    save_checkpoint(tmp_path / "imported" / "ckpt.pt", weights_only)
    with pytest.raises(UserError, match="weights only"):
        train.main(train_args(corpus, tmp_path / "imported") + ["--resume"])


@pytest.mark.parametrize("steps, refused", [((0,), False), ((0, 5, 10), True)], ids=["died at step 0", "past step 0"])
def test_a_new_run_refuses_the_events_of_a_run_past_step_0_whose_checkpoints_were_removed(tmp_path, steps, refused):
    """`rm out/x/*.pt` leaves config.yaml, metrics.csv and tensorboard/: a new run there added its events
    beside those of steps 0 to 10, every step twice. Events of step 0 only (a run that died before its
    first checkpoint) are no loss: that folder may be started again."""
    from tinygpt.config import Config
    from tinygpt.errors import UserError
    from tinygpt.runs import check_run_dir, write_config, write_metrics
    run = tmp_path / "run"
    write_config(run, Config())
    write_metrics(run, [{"step": step, "train_loss": 2.5, "val_loss": 2.5} for step in steps])
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.out.tfevents.1700000000.host.1.0").write_bytes(b"")
    if refused:
        with pytest.raises(UserError, match=r"holds TensorBoard events \(tensorboard/\) but no ckpt.pt to resume"):
            check_run_dir(run, resume=False)
    else:
        check_run_dir(run, resume=False)  # started again: its events of step 0 are replaced


@pytest.mark.slow
def test_a_test_that_hangs_fails_the_suite_instead_of_hanging_it(tmp_path):
    """A check that regresses into a hang (a training that never stops) hung CI: the suite's timeout
    ends it, the test named, and the run fails at once."""
    tests = tmp_path / "tests"
    tests.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tests)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tests / "test_hang.py").write_text("import time\n\n\ndef test_hangs():\n    time.sleep(200)\n")
    env = {**os.environ, "TINYGPT_TEST_TIMEOUT": "2", "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_hang.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100)
    assert done.returncode == 1 and time.monotonic() - start < 100, done.stdout
    assert "crashed while running 'tests/test_hang.py::test_hangs'" in done.stdout, done.stdout
    # a test marked within(2) ends in 2 s of its own (the suite's limit left at its default); its fixture's
    # setup is not counted: a slow shared fixture is not blamed on the test that first needs it
    (tests / "test_within.py").write_text(
        "import time\n\nimport pytest\n\n\n@pytest.fixture\ndef slow_setup():\n    time.sleep(3)\n\n\n"
        "@pytest.mark.within(2)\ndef test_setup_not_counted(slow_setup):\n    pass\n\n\n"
        "@pytest.mark.within(2)\ndef test_expands():\n    time.sleep(200)\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1",
                           "tests/test_within.py"], cwd=tmp_path, env={**env, "TINYGPT_TEST_TIMEOUT": ""},
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 1 and time.monotonic() - start < 100, done.stdout
    assert "crashed while running 'tests/test_within.py::test_expands'" in done.stdout, done.stdout
    assert "1 failed, 1 passed" in done.stdout, done.stdout


def sparse(path: Path, size: int = 70 << 20) -> Path:
    """path grown to `size` bytes by a hole (a few KB on disk): what `truncate -s` makes."""
    with open(path, "ab") as f:
        f.truncate(size)
    return path


@pytest.mark.within(60)
def test_files_of_holes_are_refused_before_they_are_read(tmp_path, monkeypatch):
    """Small files on disk, large in size, each read whole before it was found damaged: a safetensors whose
    bias claimed 8 GB (10.7 GB of memory), a metrics.csv of 250 MB (2 GB), a best.pt of 8 GB hashed for a
    probe.json (28 s), a TensorBoard event file of 1 GB walked 16 bytes at a time (67 M steps)."""
    from tinygpt import hf, runs, tensorboard_log
    from tinygpt.checkpoint import mostly_holes
    from tinygpt.errors import UserError
    weights = tmp_path / "model.safetensors"
    hf.save_safetensors(weights, {"w": torch.zeros(4)}, {"format": "pt"})
    if not mostly_holes(sparse(weights)):
        pytest.skip("this file system keeps no holes")
    started = time.monotonic()
    with pytest.raises(UserError, match=r"model.safetensors is not a valid safetensors file: most of its 73,400,320 "
                                        r"bytes were never written \(a file of holes\)"):
        hf.load_safetensors(weights)
    run = tmp_path / "run"
    run.mkdir()
    runs.write_metrics(run, [{"step": 0, "train_loss": "4.0", "val_loss": "4.0"}])
    sparse(run / "metrics.csv")
    with pytest.raises(UserError, match=r"metrics.csv is damaged or not a tinygpt metrics file \(most of its "
                                        r"73,400,320 bytes were never written: a file of holes\)$"):
        runs.read_metrics(run)
    (run / "metrics.csv").unlink()
    sparse(run / "best.pt")
    (run / "probe.json").write_text('{"references": 0, "behaviour": {"antecedent": 0, "distractor": 0, "other": 0}, '
                                    '"attention_attribute": {"best": null}, "attention": {"best": null}, '
                                    '"checkpoint_mtime_ns": 1, "checkpoint_sha256": "x"}')
    monkeypatch.setattr(runs, "file_sha256", lambda path: pytest.fail("a file of holes was hashed"))
    assert runs.read_probe(run) is None
    events = tmp_path / "events.out.tfevents.0"
    events.write_bytes(bytes(1 << 20))  # (zeros: every record length 0)
    assert tensorboard_log.whole_records(sparse(events)) == float("inf")
    assert time.monotonic() - started < 10


def test_the_runs_and_preparations_inside_a_folder_are_read_up_to_the_limit(tmp_path):
    """A folder's first `limit` entries are read (a home folder is not read whole): every one of them, not one
    fewer (a mutation round found no test of the bound)."""
    from tinygpt import runs
    for name in ("a", "b", "c"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "ckpt.pt").touch()
        (tmp_path / "prepared" / name).mkdir(parents=True)
        for file in ("meta.json", "train.bin"):
            (tmp_path / "prepared" / name / file).touch()
    (tmp_path / "runs" / "not_a_run").mkdir()
    assert runs.runs_inside(tmp_path / "runs") == ["a", "b", "c"]
    assert runs.prepared_inside(tmp_path / "prepared", limit=3) == ["a", "b", "c"]
    assert runs.runs_inside(tmp_path / "runs", limit=4) == ["a", "b", "c"]  # (4 entries: one is no run)
    assert len(runs.prepared_inside(tmp_path / "prepared", limit=1)) == 1
    assert runs.prepared_inside(tmp_path / "prepared", limit=0) == []


def test_a_new_run_refuses_a_metrics_csv_that_is_not_a_runs(tmp_path):
    """A metrics.csv that does not read as a run's (the user's own table) in a folder with no other run file: a
    new run there would overwrite it (trained_steps reads no step of it, so only _foreign_file refuses it)."""
    from tinygpt.errors import UserError
    from tinygpt.runs import check_run_dir
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("date,amount\n2024-01-01,3\n")
    with pytest.raises(UserError, match=r"holds metrics.csv, which is not from a tinygpt run: a run would "
                                        r"overwrite it"):
        check_run_dir(run, resume=False)
    assert (run / "metrics.csv").read_text() == "date,amount\n2024-01-01,3\n"


def test_a_new_run_inside_a_folder_being_trained_is_refused(tmp_path):
    """A training in its first seconds holds only its .lock (no ckpt.pt yet): a new run in a folder inside it
    would put its files among that run's."""
    from tinygpt.errors import UserError
    from tinygpt.runs import check_run_dir, run_lock
    outer = tmp_path / "outer"
    outer.mkdir()
    with run_lock(outer):
        with pytest.raises(UserError, match=rf"is inside {re.escape(str(outer))}, the folder of a training under "
                                            rf"way \(process {os.getpid()}\)"):
            check_run_dir(outer / "inner", resume=False)
    check_run_dir(outer / "inner", resume=False)  # (its training ended: no refusal)


def test_a_folder_named_as_a_source_folder_elsewhere_is_no_shared_folder(tmp_path):
    """out/data or out/tests is the user's folder; only the repository's own data/, tests/, ... are shared."""
    from tinygpt import runs
    for name in runs.SOURCE_FOLDERS:
        assert runs.shared_folder(tmp_path / name) is None
        assert runs.shared_folder(runs.REPOSITORY / name) == f"the repository's {name}/ folder"


def test_a_lock_file_left_with_a_longer_pid_names_only_the_new_holder(tmp_path, monkeypatch):
    """A killed training's .lock held a pid longer than this one's: the new holder's pid replaces it whole (its
    old tail made a second training name a process that never was); a lock file system error that says
    nothing of a holder (ENOLCK: locks emulated, or none) names no holder."""
    import errno
    import fcntl
    from tinygpt import runs
    run = tmp_path / "run"
    run.mkdir()
    (run / runs.LOCK).write_text("98765432109876543210\n")
    with runs.run_lock(run):
        assert (run / runs.LOCK).read_text() == f"{os.getpid()}\n"
        assert runs.lock_holder(run) == str(os.getpid())

        def no_locks(fd, op):
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        monkeypatch.setattr(fcntl, "flock", no_locks)
        assert runs.lock_holder(run) is None


def test_a_training_in_its_first_seconds_is_a_run_inside_its_folder(tmp_path):
    """A folder holding only a live training's .lock (no checkpoint yet) is a run inside out/; once the training
    ends (its lock released and removed, nothing saved) it is none."""
    from tinygpt import runs
    with runs.run_lock(tmp_path / "starting"):
        (tmp_path / "starting" / "notes.txt").write_text("x")  # (kept: the folder stays when the lock is released)
        assert runs.runs_inside(tmp_path) == ["starting"]
    assert runs.runs_inside(tmp_path) == []

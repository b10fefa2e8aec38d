"""Guards sweep.py, compare.py, tinygpt/report.py and tinygpt/plots.py: experiments side by side.

A sweep of configs/stories.yaml shrunk to CI size over model.n_head=1,2 trains both combinations
through train.py subprocesses, restarting the one whose directory has no checkpoint yet, and writes results.md / results.csv
with one row per valid run and the documented columns. Running it again over n_head=1,2,4 retrains
nothing finished (ckpt.pt untouched) and resumes a run stopped with --stop-at; with another --set
it is refused before training anything, its report left as it was. A bad grid key is one line and
exit 2, as are too many runs, equal grid values and --jobs beyond the cores; a SIGKILLed sweep's
run gets SIGTERM; a second sweep on a folder a live sweep holds is refused before it plans.
compare.py shows the config column that differs; `compare.py --plot-only` draws
each run's loss.png and the val-loss comparison, its legend naming the varied values; plot_run
returns None without matplotlib and writes a PNG with it, its y-axis fitted below the step-0 loss. Ctrl-C reaches every running run once (a stand-in
train.py, one run at a time and two) and starts no other, the report listing the runs not started;
the seeds-and-probe sweep trains two runs at a time (--jobs 2), their lines relayed behind their
names. A rerun with the grid's keys in another order, or with --seeds added, finds its finished or
stopped runs by their settings under their old names; a run killed by a signal is said to be; a
missing dataset or device is refused before any training. One sweep is shared by the module (the
trainings dominate); the tests of what is done with a run use a stand-in train.py.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import compare
from tinygpt import plots, report, runs
import sweep
import train
from tinygpt.checkpoint import load_checkpoint, save_checkpoint
from tinygpt.config import MAX_INT, load_config
from conftest import ROOT, capture_figures, fake_cores
from tinygpt.errors import UserError, short

CONFIG = str(ROOT / "configs" / "stories.yaml")
COLUMNS = ["run", "model.n_head", *report.RESULT_COLUMNS]


def shrink(prepared_dir) -> list[str]:
    """The --set list that makes configs/stories.yaml a CI-sized run."""
    return ["--set", "data.stories_chars=20000", f"data.prepared_dir={prepared_dir}", "model.n_layer=1",
            "model.n_embd=16", "model.block_size=32", "train.max_iters=10", "train.eval_interval=5",
            "train.eval_iters=2", "train.batch_size=4", "train.device=cpu", "train.plot=never"]


def run_sweep(argv: list[str]) -> tuple[dict, str]:
    """sweep.main in this process; returns (its result, what it printed itself)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = sweep.main(argv)
    return result, out.getvalue()


def read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def first_sweep(tmp_path_factory):
    """The shared sweep over n_head=1,2, where n_head=2 had died before its first checkpoint;
    the results files are read at once, before later tests add runs."""
    tmp = tmp_path_factory.mktemp("sweep")
    (tmp / "sw" / "n_head=2").mkdir(parents=True)
    (tmp / "sw" / "n_head=2" / "metrics.csv").write_text("step,train_loss\n0,4.0\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")  # the training subprocesses: tiny models, 2 shared cores
        result, printed = run_sweep([CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp / "prepared"),
                                     "--out", str(tmp / "sw"), "--quiet"])
    return {"tmp": tmp, "out": tmp / "sw", "result": result, "printed": printed,
            "csv": read_csv(tmp / "sw" / "results.csv"), "md": (tmp / "sw" / "results.md").read_text()}


def test_sweep_runs_valid_combinations_and_reports(first_sweep):
    out, printed = first_sweep["out"], first_sweep["printed"]
    assert "n_head=2: " in printed and "has no checkpoint" in printed and "starting it again" in printed
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["n_head=1", "n_head=2"]
    for name in ("n_head=1", "n_head=2"):
        assert load_checkpoint(out / name / "ckpt.pt")["step"] == 10

    rows = first_sweep["csv"]
    assert list(rows[0]) == COLUMNS and [r["run"] for r in rows] == ["n_head=1", "n_head=2"]
    assert [r["model.n_head"] for r in rows] == ["1", "2"]
    for r in rows:
        assert r["status"] == "done" and int(r["params"]) > 0 and float(r["tokens_per_s"]) > 0
        assert 0 < float(r["best_val_loss"]) < 10 and 0 < float(r["final_train_loss"]) < 10 and r["wall_s"]
    ckpt = load_checkpoint(out / "n_head=1" / "ckpt.pt")
    assert int(rows[0]["params"]) == sum(t.numel() for k, t in ckpt["model"].items() if k != "lm_head.weight")

    md_rows = [line for line in first_sweep["md"].splitlines() if line.startswith("|")]
    assert md_rows[0] == "| " + " | ".join(COLUMNS) + " |" and len(md_rows) == 2 + 2  # header, rule, 2 runs
    try:
        import matplotlib  # noqa: F401
        assert (out / "val_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    except ImportError:
        assert "matplotlib is not installed" in printed and not (out / "val_loss.png").exists()


def test_a_sweep_on_a_folder_holding_another_grids_runs_says_so(first_sweep, tmp_path, capsys):
    """A second sweep with another grid on the default folder replaced the first's report without a
    word, the folder then mixing both sweeps' runs."""
    import shutil
    out = tmp_path / "sw"
    shutil.copytree(first_sweep["out"], out)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        _, printed = run_sweep([CONFIG, "--grid", "model.n_head=1", *shrink(first_sweep["tmp"] / "prepared"),
                                "--out", str(out), "--quiet"])
    assert "n_head=1: finished earlier (step 10), skipped" in printed
    assert (f"note: --out={str(out)!r} also holds 1 run(s) that are not in this grid (n_head=2): they stay, but this "
            f"sweep's report replaces the folder's (results.md and the files beside it") in capsys.readouterr().err
    assert (out / "n_head=2" / "ckpt.pt").is_file()


@pytest.mark.slow
def test_rerun_skips_finished_and_resumes_unfinished(first_sweep):
    tmp, out = first_sweep["tmp"], first_sweep["out"]
    mtimes = {n: (out / n / "ckpt.pt").stat().st_mtime_ns for n in ("n_head=1", "n_head=2")}
    # n_head=4 was stopped at step 5 (run as the sweep runs it)
    overrides = shrink(tmp / "prepared")[1:] + ["model.n_head=4", f"train.out_dir={json.dumps(str(out / 'n_head=4'))}"]
    with contextlib.redirect_stdout(io.StringIO()):
        train.main([CONFIG, "--set", *overrides, "--stop-at", "5", "--quiet"])
    assert load_checkpoint(out / "n_head=4" / "ckpt.pt")["step"] == 5

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        _, printed = run_sweep([CONFIG, "--grid", "model.n_head=1,2,4", *shrink(tmp / "prepared"),
                                "--out", str(out), "--quiet"])
    assert "n_head=1: finished earlier (step 10), skipped" in printed
    assert "n_head=4: resuming from step 5 of 10" in printed
    assert {n: (out / n / "ckpt.pt").stat().st_mtime_ns for n in mtimes} == mtimes  # not retrained
    assert load_checkpoint(out / "n_head=4" / "ckpt.pt")["step"] == 10
    steps = [int(float(r["step"])) for r in read_csv(out / "n_head=4" / "metrics.csv") if r["val_loss"]]
    assert steps == [0, 5, 10]  # the resumed run continued its own metrics
    rows = read_csv(out / "results.csv")
    assert [r["run"] for r in rows] == ["n_head=1", "n_head=2", "n_head=4"]
    assert all(r["status"] == "done" for r in rows)

    # the same grid with another --set is not the run asked for: refused before anything is
    # trained (n_head=8 is new), and the folder's report of the runs it holds is left as it is
    report_before = (out / "results.md").read_bytes()
    with pytest.raises(UserError, match=r"holds a run with other settings \(train.lr=0.002 \(now 0.005\)\)"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "model.n_head=1,8", *shrink(tmp / "prepared"), "train.lr=5e-3",
                    "--out", str(out)])
    assert (out / "n_head=1" / "ckpt.pt").stat().st_mtime_ns == mtimes["n_head=1"]
    assert (out / "results.md").read_bytes() == report_before and not (out / "n_head=8").exists()


def test_a_rerun_that_cannot_report_or_reproduce_a_run_is_refused_before_training(first_sweep, tmp_path):
    """Refused before anything trains (n_head=8 is new): a finished run whose metrics.csv is damaged
    or gone and whose checkpoint (an older tinygpt's) does not carry its rows (its row would be blank
    or the sweep would fail after training the others), and more train.max_iters (the cosine schedule
    decays over it: the resumed run is not a run of that length)."""
    def refused(folder: Path, match: str, *more: str) -> None:
        with pytest.raises(UserError, match=match), contextlib.redirect_stdout(io.StringIO()):
            sweep.main([CONFIG, "--grid", "model.n_head=1,8", *shrink(tmp_path / "prepared"), *more,
                        "--out", str(folder)])
        assert not (folder / "n_head=8").exists()

    for case in ("damaged", "missing", "longer"):
        folder = tmp_path / case
        shutil.copytree(first_sweep["out"] / "n_head=1", folder / "n_head=1")
        older = {k: v for k, v in load_checkpoint(folder / "n_head=1" / "ckpt.pt").items() if k != "metrics_csv"}
        save_checkpoint(folder / "n_head=1" / "ckpt.pt", older)
        if case == "damaged":
            (folder / "n_head=1" / "metrics.csv").write_text("garbage\n")
            refused(folder, r"metrics.csv is damaged")
        elif case == "missing":
            (folder / "n_head=1" / "metrics.csv").unlink()
            refused(folder, r"holds a finished run without its metrics.csv")
        else:
            refused(folder, r"other settings \(train.max_iters=10 \(now 15\)\)", "train.max_iters=15")


@pytest.mark.slow
def test_a_finished_run_whose_metrics_are_lost_is_restored_from_its_checkpoint(first_sweep, tmp_path):
    """A finished run's metrics.csv deleted or damaged was refused ("move the folder away to retrain"),
    though its ckpt.pt carries the rows and train.py --resume restores them: the sweep resumes it. A
    config.yaml cut short was read as the defaults (a row of a 4-layer model): restored alike."""
    run = tmp_path / "sw" / "n_head=1"
    shutil.copytree(first_sweep["out"] / "n_head=1", run)
    rows = (run / "metrics.csv").read_text()
    (run / "metrics.csv").write_text("garbage\n")
    cfg = load_config(CONFIG, [*shrink(tmp_path / "prepared")[1:], "model.n_head=1", f"train.out_dir={run}"])
    assert sweep.existing_run(run, cfg) == ("resume", "finished earlier (step 10), its metrics.csv lost or damaged: "
                                                      "restored from its ckpt.pt")
    (run / "metrics.csv").unlink()
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config[:40])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        _, printed = run_sweep([CONFIG, "--grid", "model.n_head=1", *shrink(tmp_path / "prepared"),
                                "--out", str(tmp_path / "sw"), "--quiet"])
    assert ("n_head=1: finished earlier (step 10), its config.yaml and metrics.csv lost or damaged: restored from "
            "its ckpt.pt") in printed
    assert (run / "metrics.csv").read_text() == rows and {**vars(runs.read_config(run).model), "vocab_size": 0} == vars(cfg.model)
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == ["done"]
    # a config.yaml of the user's there (no run's header): train.py --resume refuses to overwrite it, so
    # the sweep leaves the run as it is (it said "restored from its ckpt.pt", then the resume failed)
    (run / "config.yaml").write_text("my: notes\n")
    assert sweep.existing_run(run, cfg) == ("refuse", f"{run} holds a config.yaml that is not from a tinygpt run; "
                                                      f"it is left as it is: move it away, and the run's own is "
                                                      f"restored from its ckpt.pt")


@pytest.mark.slow
def test_a_finished_run_whose_config_yaml_was_edited_is_restored_from_its_checkpoint(first_sweep, tmp_path):
    """A finished run's config.yaml edited by hand (n_embd, lr) was trusted: `finished earlier,
    skipped`, and the report gave the edit's parameter count as the run's. Its ckpt.pt holds what it
    trained with: config.yaml is restored from it, as a damaged one is, and the rerun after skips it."""
    out = tmp_path / "sw"
    run = out / "n_head=1"
    shutil.copytree(first_sweep["out"] / "n_head=1", run)
    written = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(re.sub(r"lr: .*", "lr: 0.5", written.replace("n_embd: 16", "n_embd: 32")))
    argv = [CONFIG, "--grid", "model.n_head=1", *shrink(first_sweep["tmp"] / "prepared"), "--out", str(out), "--quiet"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        _, printed = run_sweep(argv)
    assert ("[1/1] n_head=1: finished earlier (step 10), its config.yaml edited (model.n_embd=32 (ckpt.pt: 16), "
            "train.lr=0.5 (ckpt.pt: 0.002), train.min_lr=0.5 (ckpt.pt: 0.0002)): restored from its ckpt.pt") in printed
    restored = runs.read_config(run)
    assert (restored.model.n_embd, restored.train.lr, restored.train.min_lr) == (16, 0.002, 0.0002)
    assert [(r["params"], r["status"]) for r in read_csv(out / "results.csv")] == [(first_sweep["csv"][0]["params"],
                                                                                    "done")]
    _, again = run_sweep(argv)
    assert "[1/1] n_head=1: finished earlier (step 10), skipped" in again


def recording_train(tmp_path: Path, monkeypatch) -> Path:
    """A stand-in train.py that trains nothing and notes each run it was started for (its out_dir's
    name, and --resume if given) in the file it returns, one line each."""
    log = tmp_path / "started"
    fake = tmp_path / "fake_train.py"
    fake.write_text(f"import json, pathlib, sys\nout = [json.loads(a.split('=', 1)[1]) for a in sys.argv "
                    f"if a.startswith('train.out_dir=')][0]\nwith open({str(log)!r}, 'a') as f:\n"
                    f"    f.write(pathlib.Path(out).name + ' --resume' * ('--resume' in sys.argv) + '\\n')\n")
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    return log


def stand_in_train(tmp_path: Path, monkeypatch, source: str) -> None:
    """Make sweep.py run `source` (Python, no torch: fast) as its train.py."""
    fake = tmp_path / "fake_train.py"
    fake.write_text(source)
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)


def sweep_exit_code(tmp_path: Path, *extra: str) -> int:
    """The exit code of a sweep over n_head=1,2 into tmp_path/sw that ends in SystemExit."""
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw"),
                    *extra])
    return exit_info.value.code


def without(argv: list[str], *dropped: str) -> list[str]:
    return [a for a in argv if a not in dropped]


def test_a_rerun_with_the_grid_keys_in_another_order_reuses_its_runs(first_sweep, tmp_path, monkeypatch, capsys):
    """--grid model.n_head=1,2 model.n_layer=1, then the same keys the other way round: the names
    differ (n_layer=1,n_head=1), and both finished runs were trained again beside the first, which
    a note called another grid's. Now each is found by its settings and skipped in its folder."""
    out = tmp_path / "sw"
    for head in (1, 2):  # the first sweep's runs, as the first order names them
        shutil.copytree(first_sweep["out"] / f"n_head={head}", out / f"n_head={head},n_layer=1")
    mtimes = {d.name: (d / "ckpt.pt").stat().st_mtime_ns for d in out.iterdir()}
    started = recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep([CONFIG, "--grid", "model.n_layer=1", "model.n_head=1,2",
                            *without(shrink(first_sweep["tmp"] / "prepared"), "model.n_layer=1"), "--out", str(out)])
    assert not started.exists()  # nothing trained
    assert "n_layer=1,n_head=1: the same settings as the run in n_head=1,n_layer=1, under another name: reused " \
           "there" in printed
    assert "[1/2] n_head=1,n_layer=1: finished earlier (step 10), skipped" in printed
    assert sorted(d.name for d in out.iterdir() if d.is_dir()) == sorted(mtimes)  # no new folder
    assert {d: (out / d / "ckpt.pt").stat().st_mtime_ns for d in mtimes} == mtimes
    assert "not in this grid" not in capsys.readouterr().err
    rows = read_csv(out / "results.csv")
    assert [(r["run"], r["model.n_head"], r["status"]) for r in rows] == [("n_head=1,n_layer=1", "1", "done"),
                                                                          ("n_head=2,n_layer=1", "2", "done")]


def test_adding_seeds_to_a_finished_sweep_reuses_its_run_as_the_first_seed(first_sweep, tmp_path, monkeypatch, capsys):
    """--seeds 2 on a finished sweep named its runs n_head=1,seed=1337 and trained the seed that
    n_head=1 already is again. Only the whole config makes two runs one: with another --set the
    run in n_head=1 is not this sweep's (trained anew, the note naming it another grid's)."""
    prepared = first_sweep["tmp"] / "prepared"
    for case, more in (("same", []), ("other lr", ["train.lr=5e-3"])):
        out = tmp_path / case
        shutil.copytree(first_sweep["out"] / "n_head=1", out / "n_head=1")
        started = recording_train(tmp_path / case, monkeypatch)
        _, printed = run_sweep([CONFIG, "--grid", "model.n_head=1", "--seeds", "2", *shrink(prepared), *more,
                                "--out", str(out)])
        note = capsys.readouterr().err
        rows = read_csv(out / "results.csv")
        if case == "same":
            assert "n_head=1,seed=1337: the same settings as the run in n_head=1, under another name" in printed
            assert "[1/2] n_head=1: finished earlier (step 10), skipped" in printed
            assert started.read_text() == "n_head=1,seed=1338\n" and "not in this grid" not in note
            assert [(r["run"], r["train.seed"], r["status"]) for r in rows] == [("n_head=1", "1337", "done"),
                                                                               ("n_head=1,seed=1338", "1338", "")]
        else:
            assert "same settings" not in printed
            assert started.read_text() == "n_head=1,seed=1337\nn_head=1,seed=1338\n"
            assert "also holds 1 run(s) that are not in this grid (n_head=1)" in note
            assert [r["run"] for r in rows] == ["n_head=1,seed=1337", "n_head=1,seed=1338"]


def test_a_grid_over_a_setting_a_rerun_may_change_asks_for_a_run_of_each_value():
    """train.compile may differ between a run and its rerun (the same training), but a grid over it
    asks for one run of each value: the compiled run would have passed for the uncompiled one."""
    from tinygpt.config import flat_config
    compiled = flat_config(load_config(CONFIG, ["train.compile=true"]))
    plain = load_config(CONFIG, ["train.compile=false"])
    assert sweep.same_run(compiled, plain, ["model.n_head"])  # not in the grid: the same run
    assert not sweep.same_run(compiled, plain, ["train.compile"])
    # nor does a TensorBoard log change what a run computes (a rerun that turned it off was refused)
    logged = flat_config(load_config(CONFIG, ["train.tensorboard=true"]))
    assert sweep.same_run(logged, load_config(CONFIG, ["train.tensorboard=false"]), ["model.n_head"])


def test_a_run_stopped_under_another_name_is_resumed_in_its_folder(first_sweep, tmp_path, monkeypatch):
    """An unfinished run of the same settings under another name (the grid's keys in another order)
    is resumed where it is, not started again beside it."""
    out, prepared = tmp_path / "sw", first_sweep["tmp"] / "prepared"
    run = out / "n_head=1,n_layer=1"  # stopped at step 5, as the sweep runs it
    with contextlib.redirect_stdout(io.StringIO()):
        train.main([CONFIG, "--set", *shrink(prepared)[1:], "model.n_head=1",
                    f"train.out_dir={json.dumps(str(run))}", "--stop-at", "5", "--quiet"])
    started = recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep([CONFIG, "--grid", "model.n_layer=1", "model.n_head=1",
                            *without(shrink(prepared), "model.n_layer=1"), "--out", str(out)])
    assert "[1/1] n_head=1,n_layer=1: resuming from step 5 of 10" in printed
    assert started.read_text() == "n_head=1,n_layer=1 --resume\n"
    assert sorted(d.name for d in out.iterdir() if d.is_dir()) == ["n_head=1,n_layer=1"]


@pytest.mark.slow
def test_of_two_folders_holding_the_run_the_finished_one_is_reused(first_sweep, tmp_path, monkeypatch):
    """--out holds the run twice under other names, stopped (in a, first by name) and finished (in b):
    the finished one is skipped, not the stopped one resumed (training it again to the same end)."""
    out, prepared = tmp_path / "sw", first_sweep["tmp"] / "prepared"
    with contextlib.redirect_stdout(io.StringIO()):
        train.main([CONFIG, "--set", *shrink(prepared)[1:], "model.n_head=1",
                    f"train.out_dir={json.dumps(str(out / 'a'))}", "--stop-at", "5", "--quiet"])
    shutil.copytree(first_sweep["out"] / "n_head=1", out / "b")
    started = recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep([CONFIG, "--grid", "model.n_head=1", *shrink(prepared), "--out", str(out)])
    assert "n_head=1: the same settings as the run in b, under another name: reused there" in printed
    assert "[1/1] b: finished earlier (step 10), skipped" in printed
    assert not started.exists()  # nothing trained or resumed
    assert [(r["run"], r["status"]) for r in read_csv(out / "results.csv")] == [("b", "done")]


@pytest.mark.parametrize("case", ["dataset", "device"])
def test_a_value_that_train_py_would_refuse_at_its_start_is_refused_before_any_training(first_sweep, tmp_path,
                                                                                         monkeypatch, case):
    """A grid's dataset file that is not there, or train.device=cuda without CUDA, failed only when
    that run started, after the runs before it trained (hours, at full size): now the sweep is
    refused up front, one line naming the run and the key."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    started = recording_train(tmp_path, monkeypatch)
    (tmp_path / "a.txt").write_text("hello world. " * 400)
    grid, match = {"dataset": (f"data.dataset={tmp_path / 'a.txt'},{tmp_path / 'gone.txt'}",
                               r"^dataset=\S+: data.dataset='.*gone.txt' is neither stories nor shakespeare"),
                   "device": ("train.device=cpu,cuda",
                              r"^device=cuda: train.device='cuda': CUDA is not available here; use auto or cpu$")}[case]
    with pytest.raises(UserError, match=match) as refused, contextlib.redirect_stdout(io.StringIO()) as printed:
        sweep.main([CONFIG, "--grid", grid, *without(shrink(first_sweep["tmp"] / "prepared"), "train.device=cpu"),
                    "--out", str(tmp_path / "sw")])
    assert "\n" not in str(refused.value) and "cannot train " in printed.getvalue()
    assert not started.exists() and not (tmp_path / "sw").exists()  # nothing trained, nothing written


def test_a_sweep_that_logs_to_tensorboard_without_the_package_is_refused_up_front(first_sweep, tmp_path, monkeypatch):
    """train.tensorboard=true without the tensorboard package: each run failed in turn (exit 2), and the
    sweep wrote a report of failures, exit 1. train.py's check now runs first, as its other checks do."""
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # (its import fails: not installed)
    started = recording_train(tmp_path, monkeypatch)
    with pytest.raises(UserError, match=r"^n_head=1: train.tensorboard=true needs the tensorboard package"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "model.n_head=1,2", *shrink(first_sweep["tmp"] / "prepared"),
                    "train.tensorboard=true", "--out", str(tmp_path / "sw")])
    assert not started.exists() and not (tmp_path / "sw").exists()


@pytest.mark.parametrize("case, match", [
    ("users_config", r"^n_head=2: train.out_dir='\S+n_head=2' holds config.yaml, which is not from a tinygpt run"),
    ("file", r"^n_head=2: train.out_dir=\S+n_head=2' is a file, not a directory$"),
    ("dead_link", r"^n_head=2: train.out_dir=\S+n_head=2' is a link \(.* -> \S+gone\) that leads to no file or "
                  r"folder$"),
    ("foreign", r"^\S+n_head=2 holds notes.txt but no file of a run: it is not one of this sweep's runs"),
    ("size", r"^batch_size=100000000: training \(1 layer, n_embd 16, block 32, batch 100000000\) needs at least "
             r"[\d,.]+ GB")])
def test_a_run_folder_or_a_size_train_py_would_refuse_is_refused_before_any_training(first_sweep, tmp_path,
                                                                                     monkeypatch, case, match):
    """A run folder holding a config.yaml of the user's, a file or a link to nothing where a run's folder
    goes, or a model that cannot fit in memory: the runs before it trained, then train.py refused it
    (and with the user's config.yaml the report itself died, none written). A folder of the user's (or
    of another sweep, nested) with no run's file was trained into, its files mixed with the run's, "it
    stopped before its first". Now each is refused before any training, in one line."""
    started = recording_train(tmp_path, monkeypatch)
    sw, grid = tmp_path / "sw", "model.n_head=1,2"
    sw.mkdir()
    run = sw / "n_head=2"
    if case == "users_config":
        run.mkdir()
        (run / "config.yaml").write_text("model:\n  n_layer: 3\n")
    elif case == "file":
        run.write_text("x")
    elif case == "dead_link":
        run.symlink_to(tmp_path / "gone")
    elif case == "foreign":
        run.mkdir()
        (run / "notes.txt").write_text("mine")
    else:
        grid = "train.batch_size=4,100000000"
    with pytest.raises(UserError, match=match) as refused, contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", grid, *without(shrink(first_sweep["tmp"] / "prepared"), "train.batch_size=4"),
                    "--out", str(sw)])
    assert "\n" not in str(refused.value) and not started.exists()
    assert not (sw / "results.md").exists()
    if case == "foreign":
        assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]


def test_a_grid_over_the_model_of_init_from_weights_trains_their_model_once(first_sweep, tmp_path, monkeypatch):
    """train.init_from with --grid model.n_head=1,2: a run from other weights takes their model config,
    so both runs trained the weights' model (1 head), one labelled n_head=2, exit 0. Now a value that
    no combination can train refuses the sweep, and one that only some weights have is skipped beside
    the others, with a note."""
    started = recording_train(tmp_path, monkeypatch)
    one, two = first_sweep["out"] / "n_head=1", first_sweep["out"] / "n_head=2"  # 1 and 2 heads, 16 wide
    argv = [CONFIG, "--out", str(tmp_path / "sw"), *shrink(first_sweep["tmp"] / "prepared")]
    with pytest.raises(UserError, match=r"^--grid model.n_head=2 is invalid in every combination: model.n_head=2 "
                                        r"is not the model of train.init_from=\S+n_head=1': a run from other weights "
                                        r"takes their model config, model.n_head=1 \(all but model.dropout\)$"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([*argv, f"train.init_from={one}", "--grid", "model.n_head=1,2"])
    assert not started.exists() and not (tmp_path / "sw").exists()
    _, printed = run_sweep([*argv, "--grid", f"train.init_from={one},{two}", "model.n_head=1,2"])
    assert re.search(r"skip init_from=\S+n_head=1,n_head=2-[0-9a-f]{8}: model.n_head=2 is not the model of "
                     r"train.init_from=", printed)  # (a path's '/' made '_': the name ends in a hash of the values)
    names = [line.rsplit(",", 1)[1].split("-")[0] for line in started.read_text().splitlines()]
    assert names == ["n_head=1", "n_head=2"]


@pytest.mark.slow
def test_a_sweep_from_weights_of_another_model_than_the_configs_reports_and_reuses_its_run(
        first_sweep, tmp_path, capsys):
    """A run from train.init_from takes its model from the weights (1 head here; the config says 4): the sweep
    took the checkpoint's n_head=1 for a config edited as the run started, left the run out of the means (exit 1),
    and a rerun refused its folder as holding other settings."""
    weights = tmp_path / "weights"
    shutil.copytree(first_sweep["out"] / "n_head=1", weights)
    argv = [CONFIG, "--grid", "model.dropout=0.0", *shrink(first_sweep["tmp"] / "prepared"),
            f"train.init_from={weights}", "--out", str(tmp_path / "sw"), "--quiet"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        run_sweep(argv)  # (a run left out of the means ends the sweep in SystemExit(1))
        assert "other settings" not in capsys.readouterr().err
        (row,) = read_csv(tmp_path / "sw" / "results.csv")
        assert row["status"] == "done" and load_checkpoint(tmp_path / "sw" / row["run"] / "ckpt.pt")["config"][
            "model"]["n_head"] == 1
        weights.rename(tmp_path / "moved")  # (a finished run needs its starting weights no more)
        _, printed = run_sweep(argv)
    assert f"{row['run']}: finished earlier (step 10), skipped" in printed


def test_a_grid_over_dropout_from_init_from_weights_trains_each_value(first_sweep, tmp_path, monkeypatch):
    """model.dropout is a run's own, whatever weights it starts from: each value is a run of its own."""
    started = recording_train(tmp_path, monkeypatch)
    run_sweep([CONFIG, "--grid", "model.dropout=0.0,0.1", "--out", str(tmp_path / "sw"),
               *shrink(first_sweep["tmp"] / "prepared"), f"train.init_from={first_sweep['out'] / 'n_head=1'}"])
    assert started.read_text().split() == ["dropout=0.0", "dropout=0.1"]


def test_missing_init_from_weights_or_a_block_longer_than_the_data_is_refused_before_any_training(
        first_sweep, tmp_path, monkeypatch):
    """A grid's train.init_from that is not there, or a model.block_size longer than a split of the
    data: the runs before it trained, then train.py refused it, crediting the value to --set. Now the
    sweep is refused up front, naming --grid (the data prepared as the first run would)."""
    started = recording_train(tmp_path, monkeypatch)
    prepared = first_sweep["tmp"] / "prepared"
    weights = first_sweep["out"] / "n_head=1"
    with pytest.raises(UserError, match=r"^--grid train.init_from=\S+gone is invalid in every combination: "
                                        r"train.init_from: run directory or checkpoint not found: \S+gone$"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, *shrink(prepared), "--grid", f"train.init_from={weights},{tmp_path / 'gone'}",
                    "--out", str(tmp_path / "sw")])
    with pytest.raises(UserError, match=r"^block_size=100000: the train split has [\d,]+ tokens, not more than "
                                        r"model.block_size=100000 \(--grid\): use a model.block_size below \d+ or "
                                        r"more text$"), contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, *without(shrink(prepared), "model.block_size=32"), "--grid", "model.block_size=16,100000",
                    "--out", str(tmp_path / "sw")])
    # data tokenized otherwise than the weights' run (another text: another learned vocabulary): its run failed
    # after the first had trained
    with pytest.raises(UserError, match=r"^stories_chars=30000: train.init_from=\S+ was trained with another "
                                        r"tokenizer or vocabulary than this data"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, *without(shrink(prepared), "data.stories_chars=20000"), f"train.init_from={weights}",
                    "--grid", "data.stories_chars=20000,30000", "--out", str(tmp_path / "sw")])
    assert not started.exists() and not (tmp_path / "sw").exists()


def test_a_config_edited_during_the_sweep_starts_no_run_of_the_new_settings(first_sweep, tmp_path, monkeypatch, capfd):
    """Each run reads the config file when it starts: edited during a sweep, the later runs trained
    with other settings than the first, in one report. Now a run the edit would change is not
    started (an edited comment changes nothing), and the sweep says so, exit 1."""
    config = tmp_path / "c.yaml"
    config.write_text(Path(CONFIG).read_text())
    edit = ("import pathlib, sys\nc = pathlib.Path(sys.argv[1])\n"
            "if 'model.n_head=1' in sys.argv: c.write_text(c.read_text() + '# a comment\\n')\n"
            "if 'model.n_head=2' in sys.argv: c.write_text(c.read_text().replace('lr: 2.0e-3', 'lr: 5.0e-3'))\n")
    stand_in_train(tmp_path, monkeypatch, edit)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([str(config), "--grid", "model.n_head=1,2,4", *shrink(first_sweep["tmp"] / "prepared"),
                    "--out", str(tmp_path / "sw")])
    printed = capfd.readouterr()
    assert exit_info.value.code == 1
    assert f"[3/3] n_head=4: not started: {config} was edited during the sweep: it now sets train.lr=0.005" \
        in printed.out
    assert f"1 of 3 run(s) not started: {config} was edited while the sweep ran" in printed.err
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")][2] == sweep.NOT_AS_PLANNED


def test_a_dataset_edited_during_the_sweep_starts_no_run_on_the_new_text(tmp_path, monkeypatch, capfd):
    """The data.dataset file edited while a sweep ran: the later runs trained on the new text, two texts in one
    report (its seeds then no seeds of one setting), exit 0, and the same command refused afterwards. Now a run
    the edit would change is not started, and the sweep says so, exit 1."""
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 100)
    edit = (f"import pathlib, sys\np = pathlib.Path({str(text)!r})\n"
            f"if 'model.n_head=1' in sys.argv: p.write_text(p.read_text().replace('question', 'answer'))\n")
    stand_in_train(tmp_path, monkeypatch, edit)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared"), f"data.dataset={text}",
                    "data.tokenizer=char", "--out", str(tmp_path / "sw")])
    printed = capfd.readouterr()
    assert exit_info.value.code == 1
    dataset = short(str(text))  # (short: a long temp folder's path is elided)
    assert f"[2/2] n_head=2: not started: data.dataset={dataset} was edited during the sweep: its runs would mix " \
        "two texts" in printed.out
    assert "1 of 2 run(s) not started: the data they train on were edited while the sweep ran" in printed.err
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")][1] == sweep.DATA_EDITED


@pytest.mark.slow
@pytest.mark.parametrize("what", ["config", "data"])
def test_a_file_edited_as_a_run_starts_leaves_that_run_out_of_the_means(tmp_path, monkeypatch, capfd, what):
    """The sweep looks at the config and the data just before a run; train.py reads them seconds later, after torch
    has loaded. An edit in between went into the run, which was reported `done` beside runs of the plan (and the
    rerun refused its folder). Its ckpt.pt now tells: the run is `not as planned (... edited as it started)`, exit 1.
    (The stand-in edits the file, then runs the real train.py, as if the edit came in those seconds.)"""
    config, text = tmp_path / "c.yaml", tmp_path / "t.txt"
    config.write_text(Path(CONFIG).read_text())
    text.write_text("to be or not to be, that is the question\n" * 100)
    target, old, new = (config, "lr: 2.0e-3", "lr: 5.0e-3") if what == "config" else (text, "question", "answer")
    stand_in_train(tmp_path, monkeypatch, (
        f"import pathlib, runpy, sys\np = pathlib.Path({str(target)!r})\n"
        f"if 'model.n_head=1' in sys.argv: p.write_text(p.read_text().replace({old!r}, {new!r}))\n"
        f"sys.argv[0] = {str(sweep.TRAIN_PY)!r}\nsys.path.insert(0, {str(ROOT)!r})\n"
        f"runpy.run_path(sys.argv[0], run_name='__main__')\n"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = [f"data.dataset={text}", "data.tokenizer=char"] if what == "data" else []
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([str(config), "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared"), *data,
                    "--out", str(tmp_path / "sw"), "--quiet"])
    printed = capfd.readouterr()
    assert exit_info.value.code == 1
    if what == "config":
        assert "[1/2] n_head=1: trained with other settings than planned (train.lr=0.005 (now 0.002)): the config " \
            "was edited as it started" in printed.out
    else:
        dataset = short(str(text))  # (short: a long temp folder's path is elided)
        assert f"[1/2] n_head=1: trained on other data than planned: data.dataset={dataset} was edited as it " \
            "started" in printed.out
    assert "1 of 2 run(s) trained on a config or data edited as they started, not as planned: n_head=1" in printed.err
    rows = read_csv(tmp_path / "sw" / "results.csv")
    assert [r["status"] for r in rows] == [sweep.TRAINED_OTHERWISE.format(what),
                                           sweep.NOT_AS_PLANNED if what == "config" else sweep.DATA_EDITED]
    assert not report.finished_run(rows[0])  # (so not in the means)


def test_a_run_whose_folder_stops_reading_as_a_run_leaves_the_report_written(tmp_path, monkeypatch, capfd):
    """A config.yaml of the user's put into a run's folder while the sweep ran (after its checks): the
    run failed, and writing the report then died on that file (`... is damaged`), exit 2, no report for
    the runs that trained. The run's row says why; the others are reported."""
    stand_in_train(tmp_path, monkeypatch, "import json, pathlib, sys\nout = pathlib.Path([json.loads(a.split('=', 1)[1]) "
                   "for a in sys.argv if a.startswith('train.out_dir=')][0])\nout.mkdir(parents=True, exist_ok=True)\n"
                   "(out / 'config.yaml').write_text('model:\\n  n_layer: 3\\n')\nsys.exit(2)\n")
    assert sweep_exit_code(tmp_path) == 1 and "n_head=1: not in the tables: " in capfd.readouterr().out
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == [
        "failed (exit 2), its files do not read (see above)"] * 2


def test_a_finished_run_is_reported_whatever_device_this_machine_has(first_sweep, tmp_path, monkeypatch):
    """Only a run that will train is checked up front: a finished one needs its device no more."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    started = recording_train(tmp_path, monkeypatch)
    out = tmp_path / "sw"
    shutil.copytree(first_sweep["out"] / "n_head=1", out / "n_head=1")
    _, printed = run_sweep([CONFIG, "--grid", "model.n_head=1", *shrink(first_sweep["tmp"] / "prepared"),
                            "train.device=cuda", "--out", str(out)])
    assert "[1/1] n_head=1: finished earlier (step 10), skipped" in printed and not started.exists()


def test_bad_grid_key_is_one_line_exit_2(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "sweep.py"), CONFIG, "--grid", "model.n_heads=1,2",
                             "--out", str(tmp_path / "sw")], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "did you mean 'model.n_head'" in result.stderr
    # (it said "(--set)", or "(CONFIG with --set)", of a key given in --grid)
    assert result.stderr.startswith("error: unknown config key 'model.n_heads' (--grid); did you mean")
    assert not (tmp_path / "sw").exists()


def test_an_out_folder_holding_a_training_run_is_refused(tmp_path, monkeypatch):
    # the sweep's report and runs were mixed into the run's own folder
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ckpt.pt").write_bytes(b"a run's checkpoint")
    with pytest.raises(UserError, match="holds a training run"):
        sweep.main([CONFIG, "--grid", "model.n_head=1", "--out", str(tmp_path / "run"), *shrink(tmp_path / "p")])
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["ckpt.pt"]


@pytest.mark.slow
def test_a_closed_stdout_does_not_stop_the_sweep(tmp_path):
    """`sweep.py ... | head -1`: every run still trains to its end and the report is written (the
    sweep ended at its next print, exit 0, the rest of the grid never trained)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "sweep.py"), CONFIG, "--grid", "model.n_head=1,2",
                             "--out", str(tmp_path / "sw"), *shrink(tmp_path / "prepared")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    proc.stdout.readline()
    proc.stdout.close()  # the reader leaves
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err[-2000:]
    assert "stdout was closed" in err and (tmp_path / "sw" / "results.md").is_file()
    assert all(load_checkpoint(tmp_path / "sw" / name / "ckpt.pt")["step"] == 10 for name in ("n_head=1", "n_head=2"))


@pytest.mark.parametrize("argv, match", [
    (["--grid", "model.n_head"], "must look like SECTION.KEY=V1,V2"),
    (["--grid", "modeln_head=1,2"], "must look like SECTION.KEY=V1,V2"),  # (no section: not a key to look up)
    (["--grid", "model.n_head=1,,2"], "must look like SECTION.KEY=V1,V2"),
    (["--grid", "model.n_head.x=1,2"], "must look like SECTION.KEY=V1,V2"),  # (one dot: not an unknown key)
    (["--grid", "model.n_head=1", "model.n_head=2"], "given twice"),
    (["--grid", "model.vocab_size=100,200"], "comes from the tokenizer"),
    (["--grid", "model.n_head=1,2", "--set", "model.n_head=4"], "--set model.n_head and --grid model.n_head both"),
    (["--grid", "model.n_head=1,2", "--set", "model.n_layer=abc"],
     "no valid combination in --grid model.n_head=1,2: model.n_layer='abc'"),  # the cause, not "see the notes"
    (["--grid", "train.out_dir=a,b"], "its own out_dir"),
    (["--grid", "model.n_head=1", "--set", "train.out_dir=x"], "choose the sweep folder with --out"),
    (["--grid", "model.n_head=1", "--set", "train.max_iter=5"], "did you mean 'train.max_iters'"),
    (["--grid", "model.n_head=3,5", "--set", "model.n_embd=16"], "no valid combination"),
    (["--grid", "model.n_head=1", "--jobs", "0"], "--jobs=0 must be >= 1"),
    (["--grid", "model.n_head=1", "--seeds", "0"], "--seeds=0 must be >= 1"),
    (["--grid", "model.n_head=1", "--jobs", "3"], "--jobs=3 is more than the 2 CPU core"),
    # (a billion held-out stories: 10 GB and counting, deaf to Ctrl-C)
    (["--grid", "model.n_head=1", "--probe", "--probe-stories", "1000000000"],
     r"--probe-stories=1000000000 must be in \[1, 10,000\] \(probe.py --stories\)"),
    (["--grid", "model.n_head=1", "--probe-stories", "100"],  # (it was ignored: no probe, no word)
     r"^--probe-stories=100 sets the stories of the probe, which runs with --probe only: add --probe"),
])
def test_sweep_user_errors(tmp_path, monkeypatch, argv, match):
    fake_cores(monkeypatch, {0, 1})  # 2 cores
    stand_in_train(tmp_path, monkeypatch, "raise SystemExit('a run started')")  # a refusal missed: no full-size run
    with pytest.raises(UserError, match=match), contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, *argv, "--out", str(tmp_path / "sw")])
    assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("jobs", [1, 2])
def test_failed_runs_are_reported_and_the_sweep_goes_on(tmp_path, monkeypatch, capfd, jobs):
    """A stand-in train.py (no torch: fast) fails with a user error for n_head=1 and crashes for 2."""
    fake_cores(monkeypatch, {0, 1})  # --jobs 2 on any machine
    stand_in_train(tmp_path, monkeypatch, "import sys\nif 'model.n_head=1' in sys.argv:\n"
                   "    print('error: a user error', file=sys.stderr)\n    sys.exit(2)\nraise RuntimeError('a crash')\n")
    code = sweep_exit_code(tmp_path, "--jobs", str(jobs))
    printed = capfd.readouterr()
    assert code == 1 and "2 of 2 run(s) failed: n_head=1, n_head=2" in printed.err
    assert "n_head=1: failed with exit code 2" in printed.out and "n_head=2: failed with exit code 1" in printed.out
    if jobs > 1:  # the runs' own errors, behind their names
        assert "[1/2] n_head=1: error: a user error" in printed.out and "[2/2] n_head=2: RuntimeError: a crash" in printed.out
    # the row says the run's own error where the sweep relayed it (--jobs 2); it said only `failed (exit 2)`
    first = "failed (exit 2: a user error)" if jobs > 1 else "failed (exit 2)"
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == [first, "failed (exit 1)"]


def test_a_diverged_run_is_an_error_in_the_sweep_and_read_back(tmp_path, capfd):
    """A sweep's run that diverged read `failed (exit 2), step 0/10` (one job: its error not relayed),
    and compare.py over its folder later `step 0/10`, a run to finish with --resume."""
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", "train.lr=1e6", *shrink(tmp_path / "prepared"), "train.grad_clip=0",
                    "--out", str(tmp_path / "sw")])
    assert exit_info.value.code == 1 and "Traceback" not in capfd.readouterr().err
    status = read_csv(tmp_path / "sw" / "results.csv")[0]["status"]
    assert re.fullmatch(r"failed \(exit 2\), diverged at step \d+ \(ckpt\.pt: step 0\)", status), status
    with contextlib.redirect_stdout(io.StringIO()):
        compared = compare.main([str(tmp_path / "sw" / "lr=1e6"), "--out", str(tmp_path / "cmp")])
    assert compared["rows"][0]["status"] == status.removeprefix("failed (exit 2), ")
    assert report.ended_in_error(compared["rows"][0])  # (not one to finish with --resume: it diverges again)


def test_a_failed_run_is_not_probed(tmp_path, monkeypatch, capfd):
    """--probe and a run that failed: the probe of what it left (here no checkpoint) ended the whole
    sweep with 'run directory or checkpoint not found' instead of its report of the failure."""
    fake = tmp_path / "fake_train.py"
    fake.write_text("import sys\nprint('error: a user error', file=sys.stderr)\nsys.exit(2)\n")
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", "model.n_head=1", "--probe", "--probe-stories", "3",
                    *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw")])
    printed = capfd.readouterr()
    assert exit_info.value.code == 1 and "1 of 1 run(s) failed: n_head=1" in printed.err
    assert "Traceback" not in printed.err and ": probe" not in printed.out
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == ["failed (exit 2)"]
    assert not (tmp_path / "sw" / "n_head=1" / "probe.json").exists()


def test_a_damaged_probe_json_is_probed_again(tmp_path):
    """A sweep's damaged probe.json (a disk fault, a hand edit) refused the whole rerun with `delete it and
    probe again`: the sweep wrote it, and --probe probes, so it says so and probes the run again."""
    argv = [CONFIG, "--grid", "model.n_head=1", "--probe", "--probe-stories", "3", *shrink(tmp_path / "prepared"),
            "data.tokenizer=char", "--out", str(tmp_path / "sw"), "--quiet"]
    run_sweep(argv)
    probe_json = tmp_path / "sw" / "n_head=1" / "probe.json"
    first = json.loads(probe_json.read_text())
    for damage in ("{", "[]"):  # not JSON; JSON, but not the probe's figures
        probe_json.write_text(damage)
        _, printed = run_sweep(argv)
        assert f"note: {probe_json} " in printed and ": removed, to probe the run again" in printed, damage
        assert json.loads(probe_json.read_text()) == first, damage  # the same weights, the same held-out stories


def test_a_copied_runs_probe_is_still_its_own(tmp_path):
    """A probed run copied with `cp -r` (new times) lost its probe columns without a word: probe.json was
    matched to best.pt by its mtime alone. Its bytes tell now; a probe of other weights is named in a note."""
    argv = [CONFIG, "--grid", "model.n_head=1", "--probe", "--probe-stories", "3", *shrink(tmp_path / "prepared"),
            "data.tokenizer=char", "--out", str(tmp_path / "sw"), "--quiet"]
    run_sweep(argv)
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "sw" / "n_head=1", copy, copy_function=shutil.copy)  # (cp -r: new times)
    assert (copy / "best.pt").stat().st_mtime_ns != json.loads((copy / "probe.json").read_text())["checkpoint_mtime_ns"]
    row = runs.summarize_run(copy)
    assert row["references"] > 0 and not row["note"]
    figures = json.loads((copy / "probe.json").read_text())
    (copy / "probe.json").write_text(json.dumps({**figures, "checkpoint_sha256": "0" * 64}))  # of other weights
    row = runs.summarize_run(copy)
    assert "references" not in row
    assert row["note"] == (f"note: {copy / 'probe.json'} is of other weights than its best.pt (trained on since): "
                           f"left out; sweep.py --probe probes it again")
    # a run without best.pt is probed on ckpt.pt: its probe was kept as current however far ckpt.pt trained on
    (copy / "best.pt").unlink()
    ckpt = copy / "ckpt.pt"
    (copy / "probe.json").write_text(json.dumps({**figures, "checkpoint_sha256": runs.file_sha256(ckpt)}))
    assert runs.summarize_run(copy)["references"] > 0  # of ckpt.pt's weights: its own
    (copy / "probe.json").write_text(json.dumps({**figures, "checkpoint_sha256": "0" * 64}))
    row = runs.summarize_run(copy)
    assert "references" not in row and "of other weights than its ckpt.pt" in row["note"]


def test_a_probe_json_that_cannot_be_read_is_left_not_removed_as_damaged(tmp_path, monkeypatch, capsys):
    """A probe.json the sweep cannot read (no permission, an I/O error) was removed as a damaged one: only one
    that reads, but not as the probe's figures, is the sweep's to replace."""
    from types import SimpleNamespace
    from tinygpt.errors import UserError
    from tinygpt.runs import DamagedProbe
    (tmp_path / "probe.json").write_text("{}")
    plan = [SimpleNamespace(run_dir=tmp_path)]
    monkeypatch.setattr(sweep, "read_probe", lambda run_dir: (_ for _ in ()).throw(
        UserError(f"cannot read {run_dir / 'probe.json'}: Permission denied")))
    sweep.drop_damaged_probes(plan)
    assert (tmp_path / "probe.json").exists() and capsys.readouterr().out == ""
    monkeypatch.setattr(sweep, "read_probe", lambda run_dir: (_ for _ in ()).throw(
        DamagedProbe(f"{run_dir / 'probe.json'} is damaged (x)")))
    sweep.drop_damaged_probes(plan)
    assert not (tmp_path / "probe.json").exists()
    note = f"note: {tmp_path / 'probe.json'} is damaged (x): removed, to probe the run again\n"
    assert capsys.readouterr().out == note


def test_parallel_runs_share_the_cores_between_their_threads(monkeypatch):
    """--jobs 2 on 4 cores: each run gets OMP_NUM_THREADS=2; all 4 each, the runs' threads would
    fight over the cores. One job keeps the threads as they are."""
    fake_cores(monkeypatch, {0, 1, 2, 3})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert sweep.Runner(2).env["OMP_NUM_THREADS"] == "2"
    assert sweep.Runner(4).env["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in sweep.Runner(1).env


def test_runs_finished_earlier_share_no_cores():
    """A rerun with --jobs 2 and one run of two left to train: it trained on one thread of two, as if beside
    the finished one, which was skipped."""
    from types import SimpleNamespace
    plan = [SimpleNamespace(action=action) for action in ("skip", "resume", "train", "skip")]
    assert sweep.runs_at_once(2, plan[:2]) == 1 and sweep.runs_at_once(2, plan[:3]) == 2
    assert sweep.runs_at_once(4, plan) == 2 and sweep.runs_at_once(2, [plan[0]]) == 1


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_killed_run_is_said_to_be_killed_not_to_have_printed_an_error(tmp_path, monkeypatch, capfd, jobs):
    """`kill -9` of a run (the kernel's out-of-memory killer sends SIGKILL) was `failed with exit code
    -9 (its error is above)`, with nothing above; a run that printed nothing is said to have printed
    nothing where the sweep sees its output (--jobs 2)."""
    fake_cores(monkeypatch, {0, 1})  # --jobs 2 on any machine
    fake = tmp_path / "fake_train.py"
    fake.write_text("import os, signal, sys\nif 'model.n_head=1' in sys.argv:\n"
                    "    os.kill(os.getpid(), signal.SIGKILL)\nsys.exit(3)\n")
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw"),
                    "--jobs", str(jobs)])
    out = capfd.readouterr().out
    assert exit_info.value.code == 1
    assert "[1/2] n_head=1: killed by SIGKILL (signal 9; out of memory?); the sweep does not stop for it" in out
    assert "exit code -9" not in out
    silent = "it printed no error" if jobs > 1 else "its error is above"  # one at a time: unseen, on the terminal
    # (the last run said "going on with the next run": there was none)
    assert f"[2/2] n_head=2: failed with exit code 3 ({silent}); the sweep does not stop for it" in out
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == ["failed (killed by SIGKILL)",
                                                                                 "failed (exit 3)"]


def test_a_run_stopped_unsaved_is_not_said_to_be_saved(tmp_path):
    """A second Ctrl-C stops train.py at once, its ckpt.pt as it was: the sweep said `its checkpoint saved`."""
    ckpt = tmp_path / "ckpt.pt"
    assert sweep.what_it_left(None, ckpt) == "before its first checkpoint (it will start again)"
    ckpt.write_bytes(b"step 0")
    before = sweep.mtime_ns(ckpt)
    assert sweep.what_it_left(before, ckpt).startswith("unsaved (stopped at once: a second Ctrl-C)")
    assert sweep.what_it_left(None, ckpt) == "its checkpoint saved"  # its first, written meanwhile
    os.utime(ckpt, ns=(before + 10**9, before + 10**9))  # saved again at the stop
    assert sweep.what_it_left(before, ckpt) == "its checkpoint saved"


def test_a_run_that_finished_as_the_sweep_was_stopped_is_done(tmp_path, monkeypatch, capfd):
    """The sweep's Ctrl-C came as its run finished (the run exits 0: its work was done): the sweep
    said `stopped, its checkpoint saved` where results.md said `done`."""
    fake = tmp_path / "fake_train.py"
    fake.write_text("import os, signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)  # (its work is done)\n"
                    "os.kill(os.getppid(), signal.SIGINT)\ntime.sleep(0.5)\nsys.exit(0)\n")
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw")])
    out = capfd.readouterr().out
    assert exit_info.value.code == 130 and "sweep interrupted" in out
    assert "[1/2] n_head=1: done in" in out and "stopped" not in out.split("sweep interrupted")[0], out
    assert "n_head=2" not in out.split("sweep interrupted")[0]  # no run starts after the signal


def test_an_interrupted_sweeps_report_gives_the_runs_it_did_not_reach_as_their_folders_have_them(
        first_sweep, tmp_path, monkeypatch, capfd):
    """Interrupted before it reached them, runs an earlier call had trained (finished, or in part) were
    'not started' in the report, which replaced the one that showed them."""
    out = tmp_path / "sw"
    shutil.copytree(first_sweep["out"] / "n_head=2", out / "n_head=2")  # finished by an earlier call
    fake = tmp_path / "fake_train.py"
    fake.write_text("import os, signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "os.kill(os.getppid(), signal.SIGINT)\ntime.sleep(0.5)\nsys.exit(0)\n")
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", "model.n_head=4,2,1", *shrink(first_sweep["tmp"] / "prepared"),
                    "--out", str(out)])
    assert exit_info.value.code == 130 and "sweep interrupted" in capfd.readouterr().out
    rows = {r["run"]: r for r in read_csv(out / "results.csv")}
    assert rows["n_head=2"]["status"] == "done" and float(rows["n_head=2"]["best_val_loss"]) > 0
    assert rows["n_head=1"]["status"] == "not started"  # (no folder: it never trained)


def test_a_signal_before_the_first_run_starts_leaves_the_folders_report_as_it_was(
        first_sweep, tmp_path, monkeypatch, capsys):
    """Interrupted before any run started (each 'not started'), the sweep writes no report: one would replace
    the folder's earlier one with a table of nothing."""
    out = tmp_path / "sw"
    shutil.copytree(first_sweep["out"], out)
    before = {name: (out / name).read_bytes() for name in ("results.md", "results.csv")}
    started = recording_train(tmp_path, monkeypatch)

    @contextlib.contextmanager
    def signalled_at_once(self):
        self.signum = signal.SIGINT  # (as forward() records a Ctrl-C that came before any run began)
        yield

    monkeypatch.setattr(sweep.Runner, "forwarding_signals", signalled_at_once)
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", "model.n_head=4", *shrink(first_sweep["tmp"] / "prepared"), "--out", str(out)])
    assert exit_info.value.code == 130 and not started.exists()
    assert "results so far" not in capsys.readouterr().out
    assert {name: (out / name).read_bytes() for name in before} == before


def test_a_run_to_resume_is_checked_before_any_training_as_a_new_one_is(first_sweep, tmp_path, monkeypatch):
    """cannot_start asks of a run the sweep resumes what it asks of a new one: a device that is not here
    refuses the sweep before anything trains, not the run after its start."""
    out = tmp_path / "sw"
    shutil.copytree(first_sweep["out"], out)
    (out / "n_head=2" / "config.yaml").unlink()  # (a finished run without it is resumed, to write it again)
    started = recording_train(tmp_path, monkeypatch)
    argv = [CONFIG, "--grid", "model.n_head=1,2", "--out", str(out), *shrink(first_sweep["tmp"] / "prepared")]
    with pytest.raises(UserError, match=r"^n_head=2: train.device='cuda:99': "), \
            contextlib.redirect_stdout(io.StringIO()) as printed:
        sweep.main([*argv, "train.device=cuda:99"])
    assert "n_head=2: " in printed.getvalue() and not started.exists()
    run_sweep(argv)
    assert started.read_text() == "n_head=2 --resume\n"  # (the same sweep on this machine's device: resumed)


def test_the_largest_grid_and_seeds_are_taken_and_one_more_is_refused(tmp_path, monkeypatch):
    sweep.check_size({"k": ["1"] * sweep.MAX_RUNS}, 1)
    sweep.check_size({"k": ["1"] * (sweep.MAX_RUNS // 2)}, 2)
    with pytest.raises(UserError, match=rf"ask for {sweep.MAX_RUNS + 1:,} runs"):
        sweep.check_size({"k": ["1"] * (sweep.MAX_RUNS + 1)}, 1)
    # --seeds up to the largest seed, MAX_INT - 1, and not past it
    started = recording_train(tmp_path, monkeypatch)
    argv = [CONFIG, "--grid", "model.n_head=1", "--out", str(tmp_path / "sw"), "--seeds", "2",
            *shrink(tmp_path / "prepared")]
    with pytest.raises(UserError, match=rf"would go up to {MAX_INT}, past the largest seed, {MAX_INT - 1}"):
        sweep.main([*argv, f"train.seed={MAX_INT - 1}"])
    assert not started.exists()
    run_sweep([*argv, f"train.seed={MAX_INT - 2}"])
    assert sorted(started.read_text().split()) == [f"n_head=1,seed={MAX_INT - 2}", f"n_head=1,seed={MAX_INT - 1}"]


def test_a_run_stopped_by_a_signal_of_its_own_is_said_to_be_stopped(tmp_path, monkeypatch, capfd):
    """A SIGTERM sent to one run (not the sweep): train.py saves and exits 143, and the sweep said
    `failed with exit code 143 (its error is above)` above its `interrupted` line."""
    fake = tmp_path / "fake_train.py"
    fake.write_text("import sys\nprint('interrupted at step 5: saved ckpt.pt', file=sys.stderr)\nsys.exit(143)\n")
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    with pytest.raises(SystemExit):
        sweep.main([CONFIG, "--grid", "model.n_head=1", *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw")])
    out = capfd.readouterr().out
    assert "[1/1] n_head=1: stopped by SIGTERM (exit 143), its checkpoint saved: a rerun resumes it" in out
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == ["failed (stopped by SIGTERM)"]


def test_a_link_to_a_run_is_not_taken_for_the_run(first_sweep, tmp_path, monkeypatch):
    """A symlink in --out to a run folder was reused as the run under its own name (the report's row
    named the link, the real folder was 'not in this grid')."""
    out = tmp_path / "sw"
    shutil.copytree(first_sweep["out"] / "n_head=1", out / "n_head=1,n_layer=1")
    (out / "a_link").symlink_to("n_head=1,n_layer=1")
    recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep([CONFIG, "--grid", "model.n_layer=1", "model.n_head=1",
                            *without(shrink(first_sweep["tmp"] / "prepared"), "model.n_layer=1"), "--out", str(out)])
    assert "the same settings as the run in n_head=1,n_layer=1, under another name" in printed
    assert [r["run"] for r in read_csv(out / "results.csv")] == ["n_head=1,n_layer=1"]


FAKE_LONG_RUN = """import json, os, pathlib, signal, sys, time
out = pathlib.Path(json.loads([a.split('=', 1)[1] for a in sys.argv if a.startswith('train.out_dir=')][0]))
out.mkdir(parents=True, exist_ok=True)
got = []
def note(signum, frame):  # every signal that arrives, one line each
    got.append(signum)
    with open(out / 'signals', 'a') as f:
        f.write(f'{signum}\\n')
signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGHUP, note)
(out / 'started').write_text(os.environ.get('OMP_NUM_THREADS', '') + ' ' + ' '.join(sys.argv[1:]))
print('running', flush=True)
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.5)  # a second signal would be noted too
sys.exit(130)
"""


@pytest.mark.parametrize("jobs, heads, signum", [(1, "1,2,4", signal.SIGINT), (2, "1,2,4", signal.SIGINT),
                                                 (5, "1,2", signal.SIGINT), (2, "1,2", signal.SIGHUP)])
@pytest.mark.slow
def test_ctrl_c_stops_the_running_runs_once_and_starts_no_more(tmp_path, monkeypatch, capfd, jobs, heads, signum):
    """A stand-in train.py (no torch) that runs until Ctrl-C: the sweep's Ctrl-C reaches every run
    that is running exactly once, no other run starts, the report is written and the sweep exits
    130. Runs side by side share the cores (--jobs 5 with 2 runs: 2 at once, half the cores each).
    A terminal that hangs up (SIGHUP) does the same, exit 129: the runs, in their own sessions,
    hear of it only from the sweep."""
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_LONG_RUN)
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    fake_cores(monkeypatch, set(range(8)))  # 8 cores
    out = tmp_path / "sw"
    names = [f"n_head={h}" for h in heads.split(",")]
    running = min(jobs, len(names))

    def interrupt_when_running() -> None:
        deadline = time.monotonic() + 60
        while not all((out / n / "started").exists() for n in names[:running]) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # let the runs install their handler
        os.kill(os.getpid(), signum)
    threading.Thread(target=interrupt_when_running, daemon=True).start()
    with pytest.raises(SystemExit) as exit_info:
        sweep.main([CONFIG, "--grid", f"model.n_head={heads}", "--jobs", str(jobs), *shrink(tmp_path / "prepared"),
                    "--out", str(out)])
    printed, err = capfd.readouterr()
    assert exit_info.value.code == 128 + signum and "sweep interrupted" in printed
    # `interrupted` on stderr, as every command says it: the sweep's own line where its runs' output is
    # relayed (one run at a time, the run says it on the terminal: the stand-in here says nothing)
    assert err == ("interrupted\n" if running > 1 else ""), err
    # the stand-in saves no checkpoint: the sweep says so, and claims none
    assert printed.count("stopped, before its first checkpoint") == running and "saved" not in printed
    for name in names[:running]:
        assert (out / name / "signals").read_text() == f"{int(signum)}\n", name  # once, the same signal
        threads, argv = (out / name / "started").read_text().split(" ", 1)
        assert threads == ("" if running == 1 else str(8 // running))
        assert ("--quiet" in argv.split()) == (running > 1)  # no progress bars when runs share the terminal
        if running > 1:
            assert f"] {name}: running" in printed  # its output, behind its tag
    assert not any((out / name).exists() for name in names[running:])  # never started
    assert "over model.n_head (interrupted)" in (out / "results.md").read_text()  # (its title said no key)
    # ...but listed: the report of 3 planned runs listed only the 2 that started, the grid looking smaller
    rows = read_csv(out / "results.csv")
    assert [r["run"] for r in rows] == names and [r["model.n_head"] for r in rows] == heads.split(",")
    assert [r["status"] for r in rows[running:]] == ["not started"] * (len(names) - running)


def test_a_crash_in_the_sweep_itself_starts_no_more_runs(tmp_path, monkeypatch):
    """--jobs 2: when the sweep's own bookkeeping fails for one run, the runs already going finish,
    none of those waiting starts, and the error surfaces (as with one run at a time)."""
    fake_cores(monkeypatch, {0, 1})  # --jobs 2 on any machine
    fake = tmp_path / "fake_train.py"
    fake.write_text("import json, pathlib, sys, time\n"
                    "out = pathlib.Path(json.loads([a.split('=', 1)[1] for a in sys.argv if a.startswith('train.out_dir=')][0]))\n"
                    "out.mkdir(parents=True)\n(out / 'started').touch()\n(out / 'config.yaml').touch()\n"
                    "time.sleep(0 if out.name == 'n_head=1' else 3)\n")  # n_head=1 ends first, on a busy machine too
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)

    def broken(run_dir, label):  # reading n_head=1's results, after its run
        if run_dir.name == "n_head=1":
            raise RuntimeError("a bug")
        return {"run": label}
    monkeypatch.setattr(sweep, "summarize_run", broken)
    with pytest.raises(RuntimeError, match="a bug"), contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "model.n_head=1,2,4,8", "--jobs", "2", *shrink(tmp_path / "prepared"),
                    "--out", str(tmp_path / "sw")])
    assert (tmp_path / "sw" / "n_head=1" / "started").exists()  # it failed after its run
    assert (tmp_path / "sw" / "n_head=2" / "started").exists()  # it was running: it finished
    assert not (tmp_path / "sw" / "n_head=8").exists()  # it was waiting: it never started


def test_run_names_are_filesystem_safe_and_unique():
    names = sweep.run_names(["data.dataset", "model.n_head"], [("a/b c.txt", "1"), ("a_b c.txt", "1")])
    assert names[0].startswith("dataset=a_b_c.txt,n_head=1-") and names[0] != names[1]
    assert sweep.run_names(["model.dropout", "train.lr"], [("0.1", "3e-4")]) == ["dropout=0.1,lr=3e-4"]
    # a field name two sections share keeps its section, or the name would say seed=1,seed=2
    assert sweep.run_names(["model.seed", "train.seed"], [("1", "2")]) == ["model.seed=1,train.seed=2"]
    combos = [(str(i), d) for i in range(10_000) for d in ("a/b", "a_b")]  # every name twice: all hashed
    t0 = time.perf_counter()
    names = sweep.run_names(["model.n_head", "data.dataset"], combos)
    assert time.perf_counter() - t0 < 1.0  # in linear time (it took 2.3 s for 20,000)
    assert len(set(names)) == len(combos) and all("-" in n for n in names)


def test_run_names_of_values_that_read_alike_differ_across_sweeps():
    """A sweep over data.dataset=d/x/a.txt into the folder of one over d/x_a.txt found its run there
    (both `dataset=d_x_a.txt`, hashed only where one grid held both) and was refused, with the advice
    to delete that run. A name whose values lost characters is hashed in any grid; names that differ
    only in case are hashed (one folder on a case-insensitive disk)."""
    first, second = (sweep.run_names(["data.dataset"], [(value,)])[0] for value in ("d/x_a.txt", "d/x/a.txt"))
    assert first.startswith("dataset=d_x_a.txt-") and second.startswith("dataset=d_x_a.txt-") and first != second
    assert sweep.run_names(["data.dataset"], [("d_x_a.txt",)]) == ["dataset=d_x_a.txt"]  # nothing lost: as before
    names = sweep.run_names(["data.dataset"], [("A.txt",), ("a.txt",), ("b.txt",)])
    assert len({n.casefold() for n in names}) == 3 and names[2] == "dataset=b.txt"


@pytest.mark.slow
def test_a_second_sweep_over_a_value_that_reads_alike_trains_beside_the_first(tmp_path):
    (tmp_path / "d" / "x").mkdir(parents=True)
    for path in ("d/x_a.txt", "d/x/a.txt"):
        (tmp_path / path).write_text("hello world. " * 400)
    out = tmp_path / "sw"
    for path in ("d/x_a.txt", "d/x/a.txt"):
        result, printed = run_sweep([CONFIG, "--grid", f"data.dataset={tmp_path / path}", *shrink(tmp_path / "prep"),
                                     "data.tokenizer=char", "--out", str(out)])
        assert [row["status"] for row in result["rows"]] == ["done"], printed
    runs_there = sorted(p.name for p in out.iterdir() if (p / "ckpt.pt").is_file())
    assert len(runs_there) == 2, runs_there


def test_a_missing_grid_is_said_alone(tmp_path, monkeypatch):
    """`sweep.py CONFIG --set train.lr=0.1` (no --grid) added the hint for a config swallowed by
    --set, though the config came first: only a missing positional can have been swallowed."""
    with pytest.raises(UserError) as info:
        sweep.main([CONFIG, "--set", "train.lr=0.1"])
    assert str(info.value) == "the following arguments are required: --grid (see sweep.py --help)"


@pytest.mark.parametrize("argv, count", [
    (["--grid", "model.n_head=3", "--seeds", "100000000"], "100,000,000 runs (1 combination(s) x 100,000,000"),
    (["--grid", f"model.n_layer={','.join(map(str, range(1, 42)))}",
      f"model.n_head={','.join(map(str, range(1, 26)))}"], "1,025 runs (1,025 combination(s) x 1 seed"),
])
def test_a_sweep_of_too_many_runs_is_refused_before_planning(tmp_path, monkeypatch, argv, count):
    def planned(*args, **kwargs):
        raise AssertionError("a combination was planned")
    monkeypatch.setattr(sweep, "load_config", planned)
    with pytest.raises(UserError, match=rf"--grid and --seeds ask for {re.escape(count)}.*at most 1,000"):
        sweep.main([CONFIG, *argv, "--out", str(tmp_path / "sw")])


def test_grid_values_the_config_reads_as_one_are_refused(tmp_path, monkeypatch):
    fake = tmp_path / "fake_train.py"
    fake.write_text("")  # nothing should run
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    for grid, match in (("model.n_head=1,0x1", "--grid model.n_head: 1 and 0x1 are the same value"),
                        ("train.lr=1e-3,2e-3,0.001", "--grid train.lr: 1e-3 and 0.001 are the same value")):
        with pytest.raises(UserError, match=match), contextlib.redirect_stdout(io.StringIO()):
            sweep.main([CONFIG, "--grid", grid, *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw")])
        assert not (tmp_path / "sw").exists()


@pytest.mark.parametrize("value, match", [("abc", r"model.n_head='abc' \(--grid\) must be of type int, not str$"),
                                          ("02", r"model.n_head='02' \(--grid\) must be of type int, not str: write it "
                                                 r"in plain digits, 2$")])
def test_a_grid_value_of_the_wrong_type_is_refused_before_any_training(tmp_path, monkeypatch, value, match):
    """A typo in a grid value was taken for an impossible combination: `skip n_head=abc: ...`, the
    rest trained, exit 0, and the report never said. It is refused up front, one line naming key and
    value; an impossible combination (n_head=3 with n_embd=16 of 16,48) is still skipped
    (test_a_grid_value_invalid_in_every_combination_is_refused_before_any_training)."""
    started = recording_train(tmp_path, monkeypatch)
    with pytest.raises(UserError, match=f"^{match}") as refused, contextlib.redirect_stdout(io.StringIO()) as printed:
        sweep.main([CONFIG, "--grid", f"model.n_head={value},2", *shrink(tmp_path / "prepared"),
                    "--out", str(tmp_path / "sw")])
    assert "\n" not in str(refused.value) and printed.getvalue() == ""
    assert not started.exists() and not (tmp_path / "sw").exists()


def test_a_grid_written_as_a_yaml_list_gets_the_plain_form():
    """`--grid 'model.n_head=[1,2]'` was split at its comma into '[1' and '2]', and '[1' refused with
    a hint on quoting '@' and '*', which did not apply."""
    with pytest.raises(UserError, match=r"^--grid 'model.n_head=\[1, 2\]': the values are listed without brackets, "
                                        r"e\.g\. model.n_head=1,2$"):
        sweep.parse_grid(["model.n_head=[1, 2]"])
    assert sweep.parse_grid(["data.dataset=a].txt,b"]) == {"data.dataset": ["a].txt", "b"]}  # a bracket inside
    assert sweep.parse_grid(["data.dataset=a.txt,b]"]) == {"data.dataset": ["a.txt", "b]"]}  # one at the end only


@pytest.mark.parametrize("item", ['data.dataset="/d/a,b.txt",stories', "data.dataset=stories,'a,b'",
                                  "data.dataset=',b"])
def test_a_grid_value_holding_a_comma_in_quotes_is_told_it_cannot(item):
    """The comma inside the quotes split the value: `"/d/a` was refused as not a valid YAML scalar,
    with a hint to write the quotes the user had written."""
    with pytest.raises(UserError, match=r"the values are split at every comma, in quotes too, so a value cannot hold "
                                        r"one; give that value with --set data.dataset=\.\.\. in a sweep of its own$"):
        sweep.parse_grid([item])
    assert sweep.parse_grid(["data.dataset='a b',\"c\""]) == {"data.dataset": ["'a b'", '"c"']}  # whole quotes pass


def test_a_run_name_keeps_a_plus_sign():
    assert sweep.run_names(["train.lr"], [("1e+3",)]) == ["lr=1e+3"]  # (no other character: no hash needed)


def test_how_a_failed_run_ended_is_said_as_the_sweep_saw_it():
    """A run stopped by a hang-up saved its checkpoint, as one stopped by Ctrl-C did; a run of --jobs 2 (relayed)
    that printed a traceback printed its error above; the report keeps an error line of 100 characters whole."""
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        stopped = sweep.Ended(128 + signum, seen=False)
        assert sweep.how_it_failed(stopped) == (f"stopped by {signum.name} (exit {128 + signum}), its checkpoint "
                                                f"saved: a rerun resumes it")
        assert sweep.failed_status(stopped) == f"failed (stopped by {signum.name})"
    ended = sweep.Runner(2).run([sys.executable, "-c", "import sys; print('Traceback'); sys.exit(1)"], "t")
    assert sweep.how_it_failed(ended) == "failed with exit code 1 (its error is above)"
    ended = sweep.Runner(2).run([sys.executable, "-c", "import sys; sys.exit(1)"], "t")
    assert sweep.how_it_failed(ended) == "failed with exit code 1 (it printed no error)"
    assert sweep.failed_status(sweep.Ended(2, True, True, "x" * 100)).endswith("x" * 100 + ")")


def test_the_first_signal_is_the_sweeps_and_a_run_hears_it_only_while_it_runs():
    """`interrupted` on stderr is the sweep's to print where no run was running to print it (--jobs 1): a
    Ctrl-C between runs, or after one ended; and a SIGTERM after a Ctrl-C keeps the exit of the Ctrl-C."""
    runner = sweep.Runner(1)
    with contextlib.redirect_stdout(io.StringIO()):
        assert runner.run([sys.executable, "-c", "pass"], "t").code == 0
    assert not runner.running  # (the ended run is no longer one a signal reaches)
    runner.forward(signal.SIGINT, None)
    runner.forward(signal.SIGTERM, None)
    assert runner.signum == signal.SIGINT and not runner.told_a_run


def test_a_grid_value_given_twice_is_trained_once_with_a_note(tmp_path, monkeypatch):
    """README: a duplicate combination "is skipped with a note"; it was dropped without one."""
    started = recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep([CONFIG, "--grid", "model.n_head=2,1,2", *shrink(tmp_path / "prepared"),
                            "--out", str(tmp_path / "sw")])
    assert "note: --grid model.n_head: 2 is given twice; its runs are trained once\n" in printed
    assert started.read_text() == "n_head=2\nn_head=1\n"


@pytest.mark.parametrize("grid, culprit", [("train.dtype=float32,bfloat17", "train.dtype=bfloat17"),
                                           ("data.tokenizer=chr,char", "data.tokenizer=chr"),
                                           ("model.n_layer=0,1", "model.n_layer=0"), ("train.lr=-1,0.001", "train.lr=-1")])
def test_a_grid_value_invalid_in_every_combination_is_refused_before_any_training(tmp_path, monkeypatch, grid, culprit):
    """A value of the right type that no combination can train (n_layer=0, dtype=bfloat17) was skipped
    with a note, the rest trained, exit 0, and results.md had no trace of it: refused up front, one
    line naming key and value, nothing printed or written."""
    started = recording_train(tmp_path, monkeypatch)
    with pytest.raises(UserError, match=f"^--grid {re.escape(culprit)} is invalid in every combination: ") as refused, \
            contextlib.redirect_stdout(io.StringIO()) as printed:
        sweep.main([CONFIG, "--grid", grid, "model.n_head=1,2", "--out", str(tmp_path / "sw"),
                    *(a for a in shrink(tmp_path / "prepared") if a.split("=")[0] != grid.split("=")[0])])
    assert "\n" not in str(refused.value) and printed.getvalue() == ""
    assert not started.exists() and not (tmp_path / "sw").exists()


def test_a_value_refused_everywhere_is_refused_for_its_own_reason(tmp_path, monkeypatch):
    """`--grid train.lr=-1,0.001 model.n_layer=0,1`: `train.lr=-1 is invalid in every combination:
    model.n_layer=0 ... must be >= 1`, the first combination's error, about the other key."""
    recording_train(tmp_path, monkeypatch)
    with pytest.raises(UserError, match=r"^--grid train.lr=-1 is invalid in every combination: train.lr=-1"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "train.lr=-1,0.001", "model.n_layer=0,1", "--out", str(tmp_path / "sw"),
                    *(a for a in shrink(tmp_path / "prepared") if a.split("=")[0] not in ("train.lr", "model.n_layer"))])


def test_a_value_refused_everywhere_keeps_its_own_reason_when_a_later_error_is_the_other_keys(tmp_path, monkeypatch):
    """`--grid model.n_layer=1,0 train.lr=-1,0.001`: lr=-1's last combination (n_layer=0) fails for n_layer's
    value, which must not take the place of lr=-1's own reason; and the second value no combination trains is
    counted after the first."""
    recording_train(tmp_path, monkeypatch)
    with pytest.raises(UserError, match=r"^--grid train.lr=-1 is invalid in every combination: train.lr=-1.* \(and 1 "
                                        r"more value\(s\) no combination can train\)$"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "model.n_layer=1,0", "train.lr=-1,0.001", "--out", str(tmp_path / "sw"),
                    *without(shrink(tmp_path / "prepared"), "model.n_layer=1")])


def test_a_value_impossible_beside_some_values_only_is_skipped_with_a_note(tmp_path, monkeypatch):
    """n_head=3 trains with n_embd=48, not with 16: that combination alone is skipped; where every
    n_embd is 16, n_head=3 can never train, and is refused."""
    started = recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep([CONFIG, "--grid", "model.n_head=1,3", "model.n_embd=16,48",
                            *without(shrink(tmp_path / "prepared"), "model.n_embd=16"), "--out", str(tmp_path / "sw")])
    assert "skip n_head=3,n_embd=16: model.n_embd=16 is not divisible by model.n_head=3" in printed
    assert started.read_text().splitlines() == ["n_head=1,n_embd=16", "n_head=1,n_embd=48", "n_head=3,n_embd=48"]
    assert f"sweep: 3 run(s) of 4 combination(s) into {tmp_path / 'sw'}" in printed
    # results.md says so too: it listed 3 runs, and never that the grid had 4 combinations
    assert ("\nNot trained: 1 combination(s) of the grid, skipped:\n- n_head=3,n_embd=16: model.n_embd=16 is not "
            "divisible by model.n_head=3") in (tmp_path / "sw" / "results.md").read_text()
    with pytest.raises(UserError, match=r"^--grid model.n_head=3 is invalid in every combination: model.n_embd=16 is "
                                        r"not divisible by model.n_head=3"), contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "model.n_head=1,3", *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw2")])
    assert not (tmp_path / "sw2").exists()


def test_seeds_past_the_largest_seed_are_refused(tmp_path, monkeypatch):
    """--seeds 3 from train.seed=2**63 - 3 trained 2 seeds: the third is past the largest."""
    started = recording_train(tmp_path, monkeypatch)
    with pytest.raises(UserError, match=r"^--seeds 3 from train.seed=9223372036854775805 would go up to "
                                        r"9223372036854775807, past the largest seed, 9223372036854775806"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "model.n_head=1", "--seeds", "3", *shrink(tmp_path / "prepared"),
                    "train.seed=9223372036854775805", "--out", str(tmp_path / "sw")])
    assert not started.exists() and not (tmp_path / "sw").exists()


def test_one_dataset_spelt_two_ways_is_refused(tmp_path, monkeypatch):
    """--grid data.dataset=d.txt,./d.txt trained one text twice, as two settings."""
    started = recording_train(tmp_path, monkeypatch)
    (tmp_path / "d.txt").write_text("hello world. " * 400)
    monkeypatch.chdir(tmp_path)
    for values in (f"{tmp_path / 'd.txt'},{tmp_path}/./d.txt", f"d.txt,{tmp_path / 'd.txt'}"):
        with pytest.raises(UserError, match=r"^--grid data.dataset: \S+ and \S+ name the same data \('[^']*d.txt'\); "
                                            r"give each value once$"), contextlib.redirect_stdout(io.StringIO()):
            sweep.main([CONFIG, "--grid", f"data.dataset={values}", *shrink(tmp_path / "prepared"),
                        "--out", str(tmp_path / "sw")])
    assert not started.exists() and not (tmp_path / "sw").exists()


def test_a_finished_run_whose_data_changed_since_is_refused(first_sweep, tmp_path, monkeypatch):
    """A finished run was skipped ("finished earlier") though its dataset file was rewritten since:
    with --seeds 2 its seed, trained on the old text, was averaged with one trained on the new.
    train.py --resume refuses such a run (its data_digest); the sweep refuses it before training."""
    from data.prepare import prepare
    from tinygpt.config import config_to_dict, config_to_yaml
    data, out = tmp_path / "d.txt", tmp_path / "sw"
    lines = [f"line {i}: the quick brown fox.\n" for i in range(200)]
    data.write_text("".join(lines))
    argv = [CONFIG, "--grid", "model.n_head=1", *shrink(first_sweep["tmp"] / "prepared"),
            f"data.dataset={json.dumps(str(data))}", "data.tokenizer=char", "--out", str(out)]
    run = out / "n_head=1"  # the first sweep's run, as if trained on d.txt (faster than training one)
    shutil.copytree(first_sweep["out"] / "n_head=1", run)
    cfg = load_config(CONFIG, [*argv[4:-2], "model.n_head=1", f"train.out_dir={json.dumps(str(run))}"])
    digest = json.loads((prepare(cfg, show_progress=False) / "meta.json").read_text())["digest"]
    ckpt = load_checkpoint(run / "ckpt.pt")
    save_checkpoint(run / "ckpt.pt", {**ckpt, "config": config_to_dict(cfg), "data_digest": digest})
    (run / "config.yaml").write_text(config_to_yaml(cfg))
    started = recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep(argv)
    assert "[1/1] n_head=1: finished earlier (step 10), skipped" in printed and not started.exists()
    report = (out / "results.md").read_bytes()
    data.write_text("".join(reversed(lines)))  # the same size, other text
    for more in ([], ["--seeds", "2"]):  # (with --seeds, the run is this sweep's first seed under another name)
        with pytest.raises(UserError, match=rf"^{re.escape(str(run))} holds a run trained on other data: data.dataset="
                                            rf"'\S+d.txt' changed since; it is not reused: choose another --out, or "
                                            rf"remove the run") as refused, contextlib.redirect_stdout(io.StringIO()):
            sweep.main([*argv, *more])
        assert "\n" not in str(refused.value) and not started.exists()
        assert (out / "results.md").read_bytes() == report


def test_a_run_folder_another_training_holds_is_refused_before_any_training(tmp_path, monkeypatch):
    """train.py started by hand into the sweep's own run folder: the sweep ran its train.py there,
    which was refused (`failed (exit 2), training, step ...`, exit 1, called an error a rerun
    repeats). Refused before any training, naming the process."""
    started = recording_train(tmp_path, monkeypatch)
    run = tmp_path / "sw" / "n_head=2"
    run.mkdir(parents=True)
    with runs.run_lock(run), pytest.raises(UserError, match=rf"^n_head=2: its run folder \S+n_head=2 is in use by "
                                                            rf"another training \(process {os.getpid()}\); wait for "
                                                            rf"it to end") as refused, \
            contextlib.redirect_stdout(io.StringIO()):  # held by this process, as a training holds it
        sweep.main([CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw")])
    assert "\n" not in str(refused.value) and not started.exists()
    assert not (tmp_path / "sw" / "results.md").exists()
    # a killed training's .lock stays, naming a process that ended or, by now, another (here: a live one)
    (run / runs.LOCK).write_text(f"{os.getpid()}\n")
    assert runs.lock_holder(run) is None
    with contextlib.redirect_stdout(io.StringIO()):  # (it was refused: "in use by another training")
        sweep.main([CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw")])
    assert "n_head=2" in started.read_text().splitlines()


def test_the_settings_plot_of_a_sweep_orders_its_numbers(tmp_path, monkeypatch):
    """--grid model.n_head=4,1,2 drew its x axis 4, 1, 2 (the grid's values reached the report as
    texts); compare.py over the same runs drew 1, 2, 4. The rows now hold the values as typed."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    fake = tmp_path / "fake_train.py"  # a run that leaves a config.yaml: its row is summarize_run's
    fake.write_text("import json, pathlib, sys\nout = pathlib.Path([json.loads(a.split('=', 1)[1]) for a in sys.argv "
                    "if a.startswith('train.out_dir=')][0])\nout.mkdir(parents=True, exist_ok=True)\n"
                    "(out / 'config.yaml').write_text('')\n")
    monkeypatch.setattr(sweep, "TRAIN_PY", fake)
    monkeypatch.setattr(sweep, "summarize_run", lambda run_dir, label=None: {
        "run": label, "status": "done", "best_val_loss": 1 + int(label.split("=")[1]) / 10, "config": {}})
    result, _ = run_sweep([CONFIG, "--grid", "model.n_head=4,1,2", *shrink(tmp_path / "prepared"),
                           "--out", str(tmp_path / "sw")])
    assert [r["model.n_head"] for r in result["rows"]] == [4, 1, 2]
    (ax,) = figures["settings.png"].axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]


def test_a_stopped_runs_status_is_the_step_its_checkpoint_holds(first_sweep, tmp_path):
    """A run stopped between log rows (SIGTERM at step 1347, its last row of 1340) was reported at
    its last row's step: a resume continues from its ckpt.pt's."""
    run = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        train.main([CONFIG, "--set", *shrink(first_sweep["tmp"] / "prepared")[1:], "train.log_interval=5",
                    f"train.out_dir={json.dumps(str(run))}", "--stop-at", "7", "--quiet"])
    assert max(r["step"] for r in runs.read_metrics(run)) == 5 and load_checkpoint(run / "ckpt.pt")["step"] == 7
    assert runs.summarize_run(run)["status"] == "step 7/10"
    ckpt = load_checkpoint(run / "ckpt.pt")
    # rows past the checkpoint (its save there failed on a full disk): the resume trains them again, and
    # a run whose last save failed is not done (it was reported done, and its last row's step)
    lines = (run / "metrics.csv").read_text().splitlines()
    last = lines[-1].split(",")
    (run / "metrics.csv").write_text("\n".join([*lines, ",".join(["10", *last[1:]])]) + "\n")
    assert runs.summarize_run(run)["status"] == "step 7/10"
    torch.save({**ckpt, "step": 10}, run / "ckpt.pt")
    assert runs.summarize_run(run)["status"] == "done"
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    torch.save({**ckpt, "step": 3}, run / "ckpt.pt")
    assert runs.summarize_run(run)["status"] == "step 3/10"
    torch.save({**ckpt, "step": 10**30}, run / "ckpt.pt")  # not this run's step: the last row's
    assert runs.summarize_run(run)["status"] == "step 5/10"
    (run / "ckpt.pt").write_bytes(b"damaged")  # unreadable: the last row's step, and said so
    assert runs.summarize_run(run)["status"] == "step 5/10, ckpt.pt damaged"


@pytest.mark.slow
def test_an_unfinished_run_whose_metrics_csv_is_damaged_is_resumed_as_train_py_would(first_sweep, tmp_path):
    """The sweep refused an unfinished run whose metrics.csv was damaged, though train.py --resume
    restores its rows from the checkpoint: it asks what train.py would (runs.resumed_metrics)."""
    out, prepared = tmp_path / "sw", first_sweep["tmp"] / "prepared"
    run = out / "n_head=1"
    with contextlib.redirect_stdout(io.StringIO()):
        train.main([CONFIG, "--set", *shrink(prepared)[1:], "model.n_head=1",
                    f"train.out_dir={json.dumps(str(run))}", "--stop-at", "5", "--quiet"])
    rows = (run / "metrics.csv").read_text()
    (run / "metrics.csv").write_text("garbage\n\x00")
    _, printed = run_sweep([CONFIG, "--grid", "model.n_head=1", *shrink(prepared), "--out", str(out), "--quiet"])
    assert "[1/1] n_head=1: resuming from step 5 of 10" in printed
    assert (run / "metrics.csv").read_text().startswith(rows)  # restored by the resumed train.py
    assert [r["status"] for r in read_csv(out / "results.csv")] == ["done"]


def test_a_grid_point_that_a_data_key_does_not_change_is_one_run(tmp_path, monkeypatch):
    """--grid data.bpe_vocab_size over char runs trained the same run twice, and the report said the
    runs differ in their vocabularies: a point whose only difference is a data key its tokenizer does
    not use is the run planned before it, skipped with a note."""
    started = recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep([CONFIG, "--grid", "data.tokenizer=char,bpe", "data.bpe_vocab_size=300,400",
                            *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw")])
    assert ("skip tokenizer=char,bpe_vocab_size=400: the same run as tokenizer=char,bpe_vocab_size=300 "
            "(data.bpe_vocab_size does not change the tokens of a data.tokenizer='char' run)") in printed
    assert started.read_text().splitlines() == ["tokenizer=char,bpe_vocab_size=300", "tokenizer=bpe,bpe_vocab_size=300",
                                                "tokenizer=bpe,bpe_vocab_size=400"]
    assert ("- tokenizer=char,bpe_vocab_size=400: the same run as tokenizer=char,bpe_vocab_size=300"
            in (tmp_path / "sw" / "results.md").read_text())  # the report's skipped list names it too
    # a grid over a key that changes no result: said so (it said "( does not change the tokens of ...)")
    _, printed = run_sweep([CONFIG, "--grid", "train.plot=end,never",
                            *[a for a in shrink(tmp_path / "prepared") if a != "train.plot=never"],
                            "--out", str(tmp_path / "sw2")])
    assert ("skip plot=never: the same run as plot=end (train.plot changes where a run's files go or what it "
            "draws or logs, not the run)") in printed


def test_an_auto_device_or_dtype_that_is_another_value_here_is_one_run(tmp_path, monkeypatch):
    """--grid train.device=cpu,auto on a CPU (or train.dtype=auto,bfloat16 where auto is bfloat16) trained one
    run twice, the report listing its two copies as two settings."""
    from tinygpt import runtime
    monkeypatch.setattr(runtime, "cpu_computes", lambda dtype: dtype == "bfloat16")  # (auto: bfloat16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    started = recording_train(tmp_path, monkeypatch)
    _, printed = run_sweep([CONFIG, "--grid", "train.device=cpu,auto", "train.dtype=auto,bfloat16,float32",
                            *[a for a in shrink(tmp_path / "prepared") if a != "train.device=cpu"],
                            "--out", str(tmp_path / "sw")])
    assert started.read_text().splitlines() == ["device=cpu,dtype=auto", "device=cpu,dtype=float32"]
    assert ("skip device=cpu,dtype=bfloat16: the same run as device=cpu,dtype=auto (train.dtype=auto is bfloat16 "
            "on this machine)") in printed
    assert ("skip device=auto,dtype=bfloat16: the same run as device=cpu,dtype=auto (train.device=auto is cpu on "
            "this machine; train.dtype=auto is bfloat16 on this machine)") in printed


def test_a_report_shows_a_grid_key_that_changes_no_result(tmp_path):
    """--grid data.prepared_dir=A,B trains A (B is the same run, skipped with a note): its column was blank, as
    if the key did not apply to the run."""
    rows = [{"run": "prepared_dir=A", "status": "done", "best_val_loss": 1.0,
             "config": {"data.tokenizer": "char", "data.prepared_dir": "A", "train.seed": 1}}]
    report.write_report(rows, ["data.prepared_dir"], tmp_path, title="Sweep of x")
    table = list(csv.DictReader(io.StringIO((tmp_path / "results.csv").read_text())))
    assert [r["data.prepared_dir"] for r in table] == ["A"]


def test_a_report_leaves_out_a_grid_value_that_does_not_apply(tmp_path):
    """A sweep's rows carry each grid value as text: a char run's data.bpe_vocab_size showed as a
    setting, and the report said the runs' losses were per token of different vocabularies."""
    rows = [{"run": f"v{v}", "data.bpe_vocab_size": str(v), "status": "done", "best_val_loss": 1.0,
             "config": {"data.tokenizer": "char", "data.bpe_vocab_size": v, "train.seed": 1}} for v in (300, 400)]
    text, _ = report.write_report(rows, ["data.bpe_vocab_size"], tmp_path, title="Sweep of x")
    assert "differ in data.bpe_vocab_size" not in text
    assert [r["data.bpe_vocab_size"] for r in read_csv(tmp_path / "results.csv")] == ["", ""]


def test_a_config_that_is_not_a_mapping_is_named(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(UserError, match="list.yaml must hold a mapping"), contextlib.redirect_stdout(io.StringIO()):
        sweep.main([str(tmp_path / "list.yaml"), "--grid", "model.n_head=1,2", "--out", str(tmp_path / "sw")])


FAKE_RUN_UNTIL_SIGTERM = """import json, os, pathlib, signal, sys, time
out = pathlib.Path(json.loads([a.split('=', 1)[1] for a in sys.argv if a.startswith('train.out_dir=')][0]))
out.mkdir(parents=True, exist_ok=True)
def stop(signum, frame):  # train.py saves its checkpoint here
    (out / 'stopped').write_text(str(signum))
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
(out / 'pid').write_text(str(os.getpid()))
time.sleep(30)
"""


def written(path: Path) -> str:
    """What the stand-in run wrote into `path` so far ('' before it made the file, and until it
    wrote into it: polled, it can be seen empty)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_sweep_stops_its_runs(tmp_path):
    """SIGKILL leaves the sweep no handler to pass it on: the kernel sends its run SIGTERM, so the
    run saves its checkpoint and exits instead of holding its folder (the rerun found it in use)."""
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_RUN_UNTIL_SIGTERM)
    driver = tmp_path / "driver.py"  # sweep.py with the stand-in train.py
    driver.write_text(f"import pathlib, sys\nsys.path.insert(0, {str(ROOT)!r})\nimport sweep\n"
                      f"sweep.TRAIN_PY = pathlib.Path({str(fake)!r})\nsweep.main(sys.argv[1:])\n")
    run = tmp_path / "sw" / "n_head=1"
    proc = subprocess.Popen([sys.executable, str(driver), CONFIG, "--grid", "model.n_head=1", *shrink(tmp_path / "p"),
                             "--out", str(tmp_path / "sw")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not written(run / "pid") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert written(run / "pid"), "the run never started"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while not written(run / "stopped") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert written(run / "stopped") == str(int(signal.SIGTERM))
    finally:
        proc.kill()
        if written(run / "pid") and not (run / "stopped").exists():  # do not leave it behind
            with contextlib.suppress(OSError):
                os.kill(int(written(run / "pid")), signal.SIGKILL)


def test_a_second_sweep_on_the_same_folder_is_refused_at_once(tmp_path, monkeypatch):
    """Two sweeps on one --out each failed the runs the other was training and restarted its live
    ones: while one runs (a real process, its run a stand-in waiting for SIGTERM), the second is
    refused before it plans anything, naming the first's pid, the folder untouched. The lock dies
    with the first sweep, even by SIGKILL: then the folder can be taken."""
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_RUN_UNTIL_SIGTERM)
    driver = tmp_path / "driver.py"  # sweep.py with the stand-in train.py
    driver.write_text(f"import pathlib, sys\nsys.path.insert(0, {str(ROOT)!r})\nimport sweep\n"
                      f"sweep.TRAIN_PY = pathlib.Path({str(fake)!r})\nsweep.main(sys.argv[1:])\n")
    out, run = tmp_path / "sw", tmp_path / "sw" / "n_head=1"
    argv = [CONFIG, "--grid", "model.n_head=1", *shrink(tmp_path / "p"), "--out", str(out)]
    proc = subprocess.Popen([sys.executable, str(driver), *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not written(run / "pid") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert written(run / "pid"), "the first sweep's run never started"
        monkeypatch.setattr(sweep, "TRAIN_PY", tmp_path / "nothing.py")  # (were it not refused: no real training)
        with pytest.raises(UserError) as refused, contextlib.redirect_stdout(io.StringIO()) as printed:
            sweep.main(argv)
        assert str(refused.value) == (f"--out={str(out)!r} is in use by another sweep or comparison (process {proc.pid}); "
                                      f"wait for it to end, or choose another --out")
        assert printed.getvalue() == ""  # not even planned
        # nor is a training into a run folder the sweep plans (it trained there; the sweep's run then failed,
        # and its report gave the other run's numbers under the sweep's settings), resumed or new
        for resume in ([], ["--resume"]):
            with pytest.raises(UserError, match=rf"^train.out_dir='\S+sw/n_head=2' is inside \S+sw, the folder of a "
                                                rf"sweep or a comparison under way \(process {proc.pid}\)"):
                train.main([CONFIG, "--set", *shrink(tmp_path / "p")[1:], f"train.out_dir={out / 'n_head=2'}",
                            "--quiet", *resume])
        assert sorted(p.name for p in out.iterdir()) == [".sweep.lock", "n_head=1"]
        assert sorted(p.name for p in run.iterdir()) == ["pid"]  # its live run untouched
        proc.kill()
        proc.wait()
        with runs.run_lock(out, "--out", "sweep", runs.REPORT_LOCK):  # the killed sweep's lock is gone with it
            assert (out / runs.REPORT_LOCK).read_text() == f"{os.getpid()}\n"
        assert not (out / runs.REPORT_LOCK).exists()
    finally:
        proc.kill()
        deadline = time.monotonic() + 5  # its run gets SIGTERM (PR_SET_PDEATHSIG): let it go first
        while written(run / "pid") and not (run / "stopped").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if written(run / "pid") and not (run / "stopped").exists():  # do not leave it behind
            with contextlib.suppress(OSError):
                os.kill(int(written(run / "pid")), signal.SIGKILL)


def test_compare_shows_the_differing_config_column(first_sweep, tmp_path):
    runs = [str(first_sweep["out"] / n) for n in ("n_head=1", "n_head=2")]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = compare.main([*runs, "--out", str(tmp_path / "cmp")])
    assert result["varied"] == ["model.n_head"]  # not train.out_dir, which always differs
    header = printed.getvalue().splitlines()[0]
    assert header == "| " + " | ".join(COLUMNS) + " |"
    rows = read_csv(tmp_path / "cmp" / "results.csv")
    assert [(r["run"], r["model.n_head"], r["status"]) for r in rows] == [("n_head=1", "1", "done"),
                                                                          ("n_head=2", "2", "done")]
    assert rows == first_sweep["csv"]  # the same table code as sweep.py
    with pytest.raises(UserError, match="no config.yaml"):
        compare.main([str(tmp_path), "--out", str(tmp_path / "cmp2")])


def test_plot_run_without_matplotlib_returns_none(first_sweep, tmp_path, monkeypatch):
    shutil.copy(first_sweep["out"] / "n_head=1" / "metrics.csv", tmp_path / "metrics.csv")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib...` now fails
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert plots.plot_run(tmp_path) is None and not (tmp_path / "loss.png").exists()


def test_plot_run_writes_png(first_sweep, tmp_path):
    pytest.importorskip("matplotlib")
    shutil.copy(first_sweep["out"] / "n_head=1" / "metrics.csv", tmp_path / "metrics.csv")
    path = plots.plot_run(tmp_path)
    assert path == tmp_path / "loss.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots.plot_run(tmp_path / "missing") is None  # no metrics yet: nothing to draw


@pytest.mark.parametrize("bias", [False, True])  # biases add 11 * C per block and C at the end
def test_count_params_matches_a_built_model(tiny_model_config, bias):
    from dataclasses import replace
    from model import GPT
    cfg = replace(tiny_model_config, bias=bias)
    assert runs.count_params(cfg) == GPT(cfg).num_params()  # from the config alone


# ---- seeds and the probe in a sweep ----


def test_stats_mean_spread_and_interval():
    s = report.stats([1.0, 2.0, 3.0])
    assert s["mean"] == 2.0 and s["std"] == 1.0 and s["n"] == 3
    half = 4.302653 / 3 ** 0.5  # Student's t, 2 degrees of freedom
    assert abs(s["lo"] - (2 - half)) < 1e-9 and abs(s["hi"] - (2 + half)) < 1e-9
    assert report.stats([5.0]) == {"mean": 5.0, "std": None, "lo": None, "hi": None, "n": 1}


def test_stats_over_31_values_take_t_of_30_degrees_of_freedom():
    """The table of Student's t holds 30 degrees of freedom (2.042), the last: 31 seeds took 1.96 instead."""
    s = report.stats([0.0] * 15 + [1.0] + [2.0] * 15)  # mean 1, std 1 (30 / 30)
    assert s["mean"] == 1.0 and s["std"] == 1.0 and s["n"] == 31
    half = 2.042272 / 31 ** 0.5
    assert abs(s["lo"] - (1 - half)) < 1e-9 and abs(s["hi"] - (1 + half)) < 1e-9


def test_stats_mean_is_the_mean_not_the_median():
    """Over skewed seeds (1, 2, 6) the mean is 3: a median (2) would have shipped in every "mean ± std"."""
    s = report.stats([1.0, 2.0, 6.0])
    assert s["mean"] == 3.0 and s["std"] == pytest.approx(7 ** 0.5)  # deviations -2, -1, 3: (4 + 1 + 9) / 2


def test_summary_csv_gives_the_mean_of_skewed_seeds_and_its_interval(tmp_path):
    """summary.csv over 3 skewed seeds (11, 12, 16): mean 13, std sqrt(7), 13 ± t(2) sqrt(7) / sqrt(3),
    all by hand: a median (12) would have shipped as the setting's mean, its interval around it."""
    rows = [{"run": f"s{seed}", "model.n_head": 1, "train.seed": seed, "status": "done", "best_val_loss": loss}
            for seed, loss in ((1, 11.0), (2, 12.0), (3, 16.0))]
    report.write_report(rows, ["model.n_head", "train.seed"], tmp_path, title="t")
    (row,) = read_csv(tmp_path / "summary.csv")
    std = 7 ** 0.5  # deviations -2, -1, 3 from 13: (4 + 1 + 9) / (3 - 1)
    half = 4.302653 * std / 3 ** 0.5
    assert row["setting"] == "n_head=1" and row["best_val_loss_n"] == "3"
    assert float(row["best_val_loss_mean"]) == 13.0 and float(row["best_val_loss_std"]) == pytest.approx(std)
    assert float(row["best_val_loss_lo"]) == pytest.approx(13 - half)
    assert float(row["best_val_loss_hi"]) == pytest.approx(13 + half)


def test_runs_that_did_not_finish_are_left_out_of_the_summary(tmp_path):
    """A failed or unfinished seed is listed with its status but not averaged with the finished
    ones (its loss is of fewer steps), n counts the finished runs, and the report says so."""
    rows = [{"run": "a", "model.n_head": 1, "train.seed": 1, "status": "done", "best_val_loss": 2.0},
            {"run": "b", "model.n_head": 1, "train.seed": 2, "status": "done", "best_val_loss": 2.2},
            {"run": "c", "model.n_head": 1, "train.seed": 3, "status": "failed (stopped by SIGTERM), step 970/1500",
             "best_val_loss": 4.8},
            {"run": "d", "model.n_head": 2, "train.seed": 1, "status": "step 5/10", "best_val_loss": 5.0},
            {"run": "e", "model.n_head": 2, "train.seed": 2, "best_val_loss": None,
             "status": "failed (exit 2: training diverged: the train loss is nan at step 10; ...)"},
            # the same read from its folder (compare.py, a later sweep): it was `step 0/10`, "finish them"
            {"run": "f", "model.n_head": 2, "train.seed": 3, "best_val_loss": 4.1,
             "status": "diverged at step 10 (ckpt.pt: step 0)"}]
    groups = report.group_by_setting(rows, ["model.n_head", "train.seed"])
    assert groups[0]["stats"]["best_val_loss"]["mean"] == pytest.approx(2.1) and groups[0]["left_out"] == 1
    assert groups[1]["stats"]["best_val_loss"]["n"] == 0 and groups[1]["left_out"] == 3
    text, _ = report.write_report(rows, ["model.n_head", "train.seed"], tmp_path, title="t")
    assert "| n_head=1 | 2 | 2.1000 ± 0.1414" in text and "| n_head=2 | 0 |" in text
    # a run that ended in an error is not sent to `--resume`, which would only repeat it
    assert "2 run(s) that did not finish (see their status above) are left out of these figures: finish them" in text
    assert "2 run(s) that ended in an error (see their status above) are left out of these figures: a rerun " \
           "repeats the error until its cause is fixed" in text


def test_a_picture_not_drawn_again_is_removed(tmp_path):
    """A report over one setting draws no settings.png: an earlier report's would pass for this one's."""
    pytest.importorskip("matplotlib")
    (tmp_path / "settings.png").write_bytes(b"an earlier sweep's picture")
    rows = [{"run": "a", "model.n_head": 1, "status": "done", "best_val_loss": 2.0,
             "metrics": [{"step": 0.0, "val_loss": 3.0}, {"step": 10.0, "val_loss": 2.0}]}]
    _, pngs = report.write_report(rows, ["model.n_head"], tmp_path, title="t")
    assert [p.name for p in pngs] == ["val_loss.png"] and not (tmp_path / "settings.png").exists()


def test_a_diverged_seed_makes_its_settings_mean_nan_not_a_crash():
    rows = [{"model.n_head": 1, "train.seed": 1, "best_val_loss": float("nan")},
            {"model.n_head": 1, "train.seed": 2, "best_val_loss": 2.0},
            {"model.n_head": 2, "train.seed": 1, "best_val_loss": float("inf")},
            {"model.n_head": 2, "train.seed": 2, "best_val_loss": 1.0}]
    groups = report.group_by_setting(rows, ["model.n_head", "train.seed"])
    first, second = (g["stats"]["best_val_loss"] for g in groups)
    assert first["mean"] != first["mean"] and first["n"] == 2 and first["std"] is None  # nan: no spread
    assert second["mean"] == float("inf") and second["lo"] is None
    table = report.summary_markdown(groups, ["best_val_loss"])
    assert "| n_head=1 | 2 | nan |" in table and "| n_head=2 | 2 | inf |" in table
    assert report.differences(groups) == []


def test_only_intervals_that_do_not_overlap_are_called_different():
    rows = [{"model.n_head": h, "train.seed": s, "best_val_loss": v}
            for h, vals in ((1, [2.0, 2.1, 2.2]), (2, [1.0, 1.1, 1.2]), (4, [1.9, 2.3, 1.0]))
            for s, v in zip((1, 2, 3), vals)]
    groups = report.group_by_setting(rows, ["model.n_head", "train.seed"])
    assert [g["label"] for g in groups] == ["n_head=1", "n_head=2", "n_head=4"]
    diffs = report.differences(groups, ["best_val_loss"])
    assert len(diffs) == 1 and diffs[0].startswith("best_val_loss: n_head=1 2.1000") and "vs n_head=2 1.1000" in diffs[0]


def test_an_interval_is_cut_where_its_metric_cannot_go(tmp_path):
    """Over 2 seeds Student's t reached below 0 for tokens/s and wall time ([-2,905, 5,722]), which
    cannot be negative, and would pass 100% for a share: the interval is cut there, and the table says so."""
    rows = [{"run": f"s{seed}", "model.n_head": 1, "train.seed": seed, "status": "done", "best_val_loss": loss,
             "tokens_per_s": speed, "wall_s": wall, "antecedent": share}
            for seed, loss, speed, wall, share in ((1, 2.0, 1000.0, 10.0, 0.05), (2, 2.1, 5000.0, 90.0, 0.95))]
    s = report.group_by_setting(rows, ["model.n_head", "train.seed"])[0]["stats"]
    assert (s["tokens_per_s"]["lo"], s["wall_s"]["lo"], s["antecedent"]["lo"], s["antecedent"]["hi"]) == (0, 0, 0, 1)
    assert s["tokens_per_s"]["hi"] == report.stats([1000.0, 5000.0])["hi"] and s["best_val_loss"]["lo"] > 0
    text, _ = report.write_report(rows, ["model.n_head", "train.seed"], tmp_path, title="t")
    assert "[-" not in text and "3,000 ± 2,828 [0, 28,412]" in text
    assert "An interval is cut at 0 (a share's also at 100%), which its metric cannot pass." in text
    assert read_csv(tmp_path / "summary.csv")[0]["wall_s_lo"] == "0.0"


@pytest.mark.slow
def test_sweep_with_seeds_and_probe_summarizes_each_setting(tmp_path):
    out = tmp_path / "sw"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        fake_cores(mp, {0, 1})  # --jobs 2 on any machine
        result, printed = run_sweep([CONFIG, "--grid", "model.n_head=1,2", "--seeds", "2", "--probe", "--jobs", "2",
                                     "--probe-stories", "3", *shrink(tmp_path / "prepared"), "data.tokenizer=char",
                                     "--out", str(out), "--quiet"])  # two runs at a time
    names = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert names == ["n_head=1,seed=1337", "n_head=1,seed=1338", "n_head=2,seed=1337", "n_head=2,seed=1338"]
    summary = {r["setting"]: r for r in read_csv(out / "summary.csv")}
    assert sorted(summary) == ["n_head=1", "n_head=2"]
    for head in (1, 2):
        runs_ = [out / f"n_head={head},seed={seed}" for seed in (1337, 1338)]
        val = [min(m["val_loss"] for m in runs.read_metrics(r) if m["val_loss"] is not None) for r in runs_]
        probes = [json.loads((r / "probe.json").read_text()) for r in runs_]
        share = [p["behaviour"]["antecedent"] / p["references"] for p in probes]
        row = summary[f"n_head={head}"]
        expected = report.stats(val)
        assert row["best_val_loss_n"] == "2" and val[0] != val[1]  # the seeds differ
        for key in ("mean", "std", "lo", "hi"):
            assert abs(float(row[f"best_val_loss_{key}"]) - expected[key]) < 1e-9, key
        assert abs(float(row["antecedent_mean"]) - sum(share) / 2) < 1e-9
    md = (out / "results.md").read_text()
    assert "Per setting over seeds" in md and "| n_head=1 | 2 |" in md
    assert "Differences beyond the 95% intervals" in md or "No two settings differ" in md
    # the ratio columns say what they are: probe.py qualifies the same figure where the distractor is out of sight
    assert "which counts 0 where the distractor is outside the window" in md
    assert "probe: antecedent" in printed
    for i, name in enumerate(names, 1):
        assert f"[{i}/4] {name}: done: step 10" in printed  # the run's own last line, behind its tag
    if plots.can_plot():
        assert result["plots"] == [str(out / "val_loss.png"), str(out / "settings.png")]
    # a rerun trains and probes nothing again
    _, again = run_sweep([CONFIG, "--grid", "model.n_head=1,2", "--seeds", "2", "--probe", "--probe-stories", "3",
                          *shrink(tmp_path / "prepared"), "data.tokenizer=char", "--out", str(out), "--quiet"])
    assert again.count("finished earlier") == 4 and "probe: antecedent" not in again
    # compare.py groups the same runs by setting over their seeds
    with contextlib.redirect_stdout(io.StringIO()) as printed_compare:
        compare.main([str(out / name) for name in names] + ["--out", str(tmp_path / "cmp")])
    again_summary = {r["setting"]: r for r in read_csv(tmp_path / "cmp" / "summary.csv")}
    assert again_summary["n_head=1"]["best_val_loss_mean"] == summary["n_head=1"]["best_val_loss_mean"]
    assert "Per setting over seeds" in printed_compare.getvalue()


def test_probe_refuses_a_sweep_not_on_stories(tmp_path):
    (tmp_path / "t.txt").write_text("hello world. " * 400)
    with pytest.raises(UserError, match="--probe"):
        run_sweep([CONFIG, "--grid", "model.n_head=1,2", "--probe", *shrink(tmp_path / "prepared"),
                   f"data.dataset={tmp_path / 't.txt'}", "--out", str(tmp_path / "sw")])


# ---- pictures ----


def test_compare_plot_only_draws_each_run_labelled_by_its_values(first_sweep, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    runs = [first_sweep["out"] / n for n in ("n_head=1", "n_head=2")]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = compare.main([*map(str, runs), "--plot-only", "--out", str(tmp_path / "cmp")])
    assert result["plots"] == [str(r / "loss.png") for r in runs] + [str(tmp_path / "cmp" / "val_loss.png")]
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == ["val_loss.png"]  # no tables
    assert printed.getvalue().startswith("wrote ")
    legend = figures["val_loss.png"].axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["n_head=1", "n_head=2"]  # not folder names
    with contextlib.redirect_stdout(io.StringIO()):
        one = compare.main([str(runs[0]), "--plot-only", "--out", str(tmp_path / "one")])
    assert one["plots"] == [str(runs[0] / "loss.png")] and not (tmp_path / "one").exists()
    blocker = tmp_path / "a_file"
    blocker.write_text("")  # an --out that cannot be made (as in a read-only checkout): one run's plot needs none
    with contextlib.redirect_stdout(io.StringIO()):
        assert compare.main([str(runs[0]), "--plot-only", "--out", str(blocker / "cmp")])["plots"] == one["plots"]
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(UserError, match="--plot-only needs matplotlib"):
        compare.main([str(runs[0]), "--plot-only"])


def test_loss_plot_is_not_squashed_by_the_step_0_loss(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    rows = [{"step": 0, "train_loss": "6.9", "val_loss": "6.9"}]  # ln(1000): an untrained model
    rows += [{"step": s, "train_loss": f"{1.5 + 2 / s:.4f}", "tokens_per_s": "1", "mfu": "0.1"} for s in range(10, 1001, 10)]
    rows += [{"step": s, "train_loss": "1.55", "val_loss": f"{1.6 + 1 / s:.4f}"} for s in (500, 1000)]
    rows.sort(key=lambda row: row["step"])  # (in a training's order: a step's log row, then its eval)
    runs.write_metrics(tmp_path, rows)
    plots.plot_run(tmp_path)
    ax = figures["loss.png"].axes[0]
    low, high = ax.get_ylim()
    assert 1.5 < high < 2.0 and low < 1.51  # the curve after the first 5% of the steps fills the axis
    notes = [t.get_text() for t in ax.texts]
    assert notes and notes[0].startswith("off the top: ") and "up to 6.90 at step 0" in notes[0]
    short = [{"step": 0, "train_loss": "6.9", "val_loss": "6.9"}]  # a short run: the early points hardly stand out
    short += [{"step": s, "train_loss": f"{1.1 + 5.8 * math.exp(-s / 80):.4f}", "tokens_per_s": "1", "mfu": "0.1"}
              for s in range(10, 401, 10)]
    runs.write_metrics(tmp_path, short)
    plots.plot_run(tmp_path)
    ax = figures["loss.png"].axes[0]
    assert ax.get_ylim()[1] > 6.9 and not ax.texts  # drawn whole, no note


def test_the_off_the_top_note_is_outside_the_axes_where_no_legend_covers_it(tmp_path, monkeypatch):
    """Long legend labels took the axes' top right corner, where the note was, and hid it."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    figures = capture_figures(monkeypatch)
    long = "a long label, " * 4
    groups = [{"label": f"{long}{h}", "runs": [{"metrics": [{"step": s, "val_loss": 6.9 if s == 0 else 1.5 + h / 10 + 1 / s}
                                                          for s in range(0, 1001, 50)]}]} for h in (1, 2)]
    plots.val_loss_png(groups)
    fig = figures["val_loss.png"]
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax = fig.axes[0]
    (note,) = ax.texts
    assert note.get_text().startswith("off the top: ") and note.get_text().endswith("up to 6.90 at step 0")
    box, legend = note.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
    assert not box.overlaps(legend) and box.y1 < ax.get_window_extent(renderer).y0  # below the axes
    assert box.y0 >= 0 and box.x1 <= fig.bbox.x1  # and inside the picture


def test_settings_plot_shows_each_setting_with_its_interval(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    rows = [{"model.n_head": h, "model.n_layer": L, "train.seed": s, "best_val_loss": 1.0 + h / 10 + L / 100 + s / 1000,
             "antecedent": 0.5 + L / 10 + s / 100, "attribute_ratio": 2.0 * h ** 3 + s}  # 3 to 131: log axis
            for h in (1, 2, 4) for L in (1, 2) for s in (1, 2, 3)]
    groups = report.group_by_setting(rows, ["model.n_head", "model.n_layer", "train.seed"])
    plots.settings_png(groups)
    fig = figures["settings.png"]
    assert [ax.get_ylabel() for ax in fig.axes] == [p[1] for p in plots.SETTING_PANELS]
    ax = fig.axes[1]  # the antecedent share, in %
    assert ax.get_legend_handles_labels()[1] == ["n_layer=1", "n_layer=2"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]
    line = ax.lines[0]  # n_layer=1 against n_head: the mean of its 3 seeds
    assert list(ax.get_xticks()) == pytest.approx([0, 1, 2]) and ax.get_xlabel() == "n_head (log scale)"  # (1 to 4)
    expected = report.stats([0.5 + 0.1 + s / 100 for s in (1, 2, 3)])
    assert list(line.get_ydata()) == pytest.approx([100 * expected["mean"]] * 3)
    bars = ax.containers[0][2][0].get_segments()  # the error bar of the first point: the 95% interval
    assert bars[0][0][1] == pytest.approx(100 * expected["lo"]) and bars[0][1][1] == pytest.approx(100 * expected["hi"])
    assert fig.axes[2].get_yscale() == "log"
    assert not any(t.get_text() for t in fig.axes[2].get_yticklabels(minor=True))  # minor ticks unlabelled
    small = [{**r, "attribute_ratio": 1.2 + r["model.n_head"] / 100} for r in rows]  # within a decade: linear
    plots.settings_png(report.group_by_setting(small, ["model.n_head", "model.n_layer", "train.seed"]))
    assert figures["settings.png"].axes[2].get_yscale() == "linear"
    unprobed = [{k: v for k, v in r.items() if k in ("model.n_head", "model.n_layer", "train.seed", "best_val_loss")}
                for r in rows]
    plots.settings_png(report.group_by_setting(unprobed, ["model.n_head", "model.n_layer", "train.seed"]))
    assert len(figures["settings.png"].axes) == 1  # no probe, no probe panels
    assert plots.settings_png(groups[:1]) is None  # one setting: nothing to compare


def test_the_share_panel_leaves_room_above_its_highest_bar(monkeypatch):
    """The % panel's top is 10% above its highest interval (its cap sat on the frame)."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    rows = [{"model.n_head": h, "train.seed": 1, "best_val_loss": 1.5 + h / 10, "antecedent": 0.5 + h / 10}
            for h in (1, 2)]
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.seed"]))
    assert figures["settings.png"].axes[1].get_ylim() == pytest.approx((0.0, 77.0))  # 70% x 1.1


def test_loss_png_on_a_full_disk_keeps_the_old_picture(tmp_path):
    """Written whole or not at all: a write cut short (here a 4 KiB file-size limit) leaves the earlier
    loss.png as it was, and says so in one line."""
    pytest.importorskip("matplotlib")
    resource = pytest.importorskip("resource")
    rows = [{"step": 0, "train_loss": "6.9", "val_loss": "7.0"}, {"step": 10, "train_loss": "3.0", "tokens_per_s": "1"}]
    runs.write_metrics(tmp_path, rows)
    plots.plot_run(tmp_path)
    old = (tmp_path / "loss.png").read_bytes()
    assert len(old) > 4096
    runs.write_metrics(tmp_path, [*rows, {"step": 20, "train_loss": "2.0", "tokens_per_s": "1"}])
    ignored, limit = signal.signal(signal.SIGXFSZ, signal.SIG_IGN), resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limit[1]))
    try:
        with pytest.raises(UserError, match=r"cannot write .*loss.png: File too large \(the previous file is intact\)"):
            plots.plot_run(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, ignored)
    assert (tmp_path / "loss.png").read_bytes() == old


def test_an_interval_cut_at_0_is_drawn_cut(tmp_path, monkeypatch):
    """Seeds 0.1, 0.2, 3.0: the interval, 1.1 ± 4.09, is cut at 0 below and not above. Its lower bar
    drawn as long as the upper one would have reached below 0 again, undoing the cut in settings.png."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    rows = [{"model.n_head": h, "train.seed": s, "best_val_loss": v}
            for h, values in ((1, (0.1, 0.2, 3.0)), (2, (1.0, 1.1, 1.2))) for s, v in zip((1, 2, 3), values)]
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.seed"]))
    ax = figures["settings.png"].axes[0]
    std = ((1.0 ** 2 + 0.9 ** 2 + 1.9 ** 2) / 2) ** 0.5  # deviations from the mean 1.1
    (low, high), _ = ax.containers[0][2][0].get_segments()  # the error bars of n_head=1, then n_head=2
    assert low[1] == pytest.approx(0.0) and high[1] == pytest.approx(1.1 + 4.302653 * std / 3 ** 0.5)


def test_the_settings_plot_neither_magnifies_nor_hides(tmp_path, monkeypatch):
    """Two single runs 0.0001 apart filled the whole height (ticks 0.00030-0.00040 under an offset
    +5.774) with a legend "mean"; with several lines the legend sat over the y label."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    figures = capture_figures(monkeypatch)
    rows = [{"model.n_head": h, "best_val_loss": 5.7743 + h / 10_000} for h in (1, 2)]
    plots.settings_png(report.group_by_setting(rows, ["model.n_head"]))
    fig = figures["settings.png"]
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert high - low >= 0.01 * 5.77 and not fig.legends and ax.get_legend() is None
    FigureCanvasAgg(fig).draw()
    assert ax.yaxis.get_offset_text().get_text() == ""  # no offset: the ticks read as losses
    rows = [{"model.n_head": h, "model.n_layer": L, "best_val_loss": 1 + h / 10 + L / 100} for h in (1, 2) for L in (1, 2)]
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "model.n_layer"]))
    fig = figures["settings.png"]
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert not box.overlaps(fig.axes[0].yaxis.label.get_window_extent(renderer))
    assert box.y1 <= fig.axes[0].get_window_extent(renderer).y0  # below the panel


def test_default_run_table_marks_each_seed_against_the_targets():
    from scripts import default_run
    run = {"wall_s": 600.0, "best_val_loss": 0.8, "antecedent": 0.9, "distractor": 0.02, "other": 0.08,
           "head": "L3H0", "head_antecedent": 0.8, "head_distractor": 0.01, "ratio": 80.0}
    rows = {"current default, seed 1337": run, "current default, seed 1338": {**run, "antecedent": 0.8},
            "previous default": {**run, "wall_s": 1000.0}}
    lines = default_run.table(rows).splitlines()
    assert lines[2].endswith("| met |") and "0.60x" in lines[2]
    assert lines[3].endswith("| NOT met |")  # antecedent 80% < 85%
    assert lines[-1].startswith("| current default, mean ± sd (2 seeds) | 600 ± 0 | 0.60x ± 0.00 |")
    assert "85.0% ± 7.1" in lines[-1] and lines[-1].endswith("| 1 of 2 met |")


def test_default_run_table_compares_with_the_previous_defaults_mean_over_its_seeds():
    from scripts import default_run
    run = {"wall_s": 660.0, "best_val_loss": 0.8, "antecedent": 0.9, "distractor": 0.02, "other": 0.08,
           "head": "L3H0", "head_antecedent": 0.8, "head_distractor": 0.01, "ratio": 80.0}
    rows = {"current default, seed 1337": run,
            "previous default, seed 1337": {**run, "wall_s": 1000.0, "antecedent": 0.95},
            "previous default, seed 1338": {**run, "wall_s": 1200.0, "antecedent": 0.85}}
    lines = default_run.table(rows).splitlines()
    assert "| 0.60x |" in lines[2] and lines[2].endswith("| met |")  # 660 s against the old runs' mean, 1,100
    assert lines[3].endswith("|  |") and lines[4].endswith("|  |")  # old runs are not marked against targets
    assert lines[-1].startswith("| previous default, mean ± sd (2 seeds) | 1100 ± 141 | 1.00x ± 0.13 |")
    assert "90.0% ± 7.1" in lines[-1] and len(lines) == 6  # one current run: no mean row for it


def test_default_run_table_merges_outputs_and_names_the_old_unseeded_run(tmp_path, monkeypatch, capsys):
    from scripts import default_run
    run = {"wall_s": 600.0, "best_val_loss": 0.8, "antecedent": 0.9, "distractor": 0.02, "other": 0.08,
           "head": "L3H0", "head_antecedent": 0.8, "head_distractor": 0.01, "ratio": 80.0}
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("training ...\n" + json.dumps({"runs": {"current default, seed 1337": run,
                                                               "previous default": {**run, "wall_s": 1000.0}}}))
    second.write_text(json.dumps({"runs": {"previous default, seed 1338": {**run, "wall_s": 1200.0}}}))
    monkeypatch.setattr(sys, "argv", ["default_run", "--table", str(first), str(second)])
    default_run.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == [
        "| current default, seed 1337", "| previous default, seed 1337", "| previous default, seed 1338",
        "| previous default, mean ± sd (2 seeds)"]
    assert "| 0.55x |" in lines[2]  # 600 s against the old runs' mean, 1,100


@pytest.mark.parametrize("last", [0, 20])
def test_the_step_axis_has_whole_steps(tmp_path, monkeypatch, last):
    """loss.png of a 20-step run had ticks at 2.5, 7.5, ...; of a 0-step run at -0.04 to 0.04."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    figures = capture_figures(monkeypatch)
    runs.write_metrics(tmp_path, [{"step": s, "train_loss": "6.9", "val_loss": "6.9"} for s in sorted({0, last})])
    plots.plot_run(tmp_path)
    ax = figures["loss.png"].axes[0]
    FigureCanvasAgg(figures["loss.png"]).draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_a_single_log_row_is_drawn_as_a_point(tmp_path, monkeypatch):
    """A one-step run's train curve was a line through one point: drawn, but nothing to see."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    runs.write_metrics(tmp_path, [{"step": 0, "train_loss": "6.9", "val_loss": "6.9"},
                                  {"step": 1, "train_loss": "6.8", "tokens_per_s": "1", "mfu": "0.1"}])
    plots.plot_run(tmp_path)
    train = [line for line in figures["loss.png"].axes[0].get_lines() if line.get_label() == "train"]
    assert len(train) == 1 and len(train[0].get_xdata()) == 1 and train[0].get_marker() not in ("None", None, "")


def test_loss_png_without_log_rows_draws_the_evals_train_loss_and_names_the_run(tmp_path, monkeypatch):
    """log_interval past max_iters: the train curve is the eval rows' train_loss (not their val_loss, which
    would hide under the val curve); the title names the run's folder, given as `.` too."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    run = tmp_path / "my_run"
    runs.write_metrics(run, [{"step": 0, "train_loss": "6.9", "val_loss": "7.0"},
                             {"step": 10, "train_loss": "3.0", "val_loss": "4.0"}])
    monkeypatch.chdir(run)
    plots.plot_run(Path("."))
    ax = figures["loss.png"].axes[0]
    assert [(line.get_label(), list(line.get_ydata())) for line in ax.lines] == [("train (eval)", [6.9, 3.0]),
                                                                                 ("val", [7.0, 4.0])]
    assert ax.get_title() == "my_run: loss"


def test_every_early_point_above_the_axis_is_counted_off_the_top(tmp_path, monkeypatch):
    """A point just above the axis's top (3.99 over 3.972) is off the chart too: counted, not only those past
    the padding above it."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    rows = [{"step": s, "train_loss": y, "tokens_per_s": "1", "mfu": "0.1"} for s, y in ((0, "10.0"), (2, "3.99"))]
    rows += [{"step": s, "train_loss": f"{3.9 - 0.9 * (s - 10) / 90:.4f}", "tokens_per_s": "1", "mfu": "0.1"}
             for s in range(10, 101, 10)]
    runs.write_metrics(tmp_path, [*rows, {"step": 100, "train_loss": "3.0", "val_loss": "3.0"}])
    plots.plot_run(tmp_path)
    ax = figures["loss.png"].axes[0]
    assert ax.get_ylim()[1] < 3.99 and [t.get_text() for t in ax.texts] == [
        "off the top: 2 early point(s), up to 10.00 at step 0"]


@pytest.mark.parametrize("command", ["sweep", "compare"])
def test_a_training_that_takes_the_folder_as_the_report_starts_is_refused(tmp_path, monkeypatch, command):
    """A training that took --out between the sweep's (or comparison's) check and its lock was not seen, nor did
    the training see the sweep, whose lock was not there yet: both went on, into one mixed folder. Held, the
    folder is checked again."""
    from tinygpt.errors import UserError
    module = sweep if command == "sweep" else compare
    real = module.run_lock

    @contextlib.contextmanager
    def training_meanwhile(out, *args, **kwargs):
        with runs.run_lock(Path(out)):  # a training starting on the folder, just after the first check
            with real(out, *args, **kwargs) as held:
                yield held
    monkeypatch.setattr(module, "run_lock", training_meanwhile)
    out = tmp_path / "out"
    if command == "sweep":
        argv = [CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared"), "--out", str(out)]
    else:  # a run's files as a training writes them (compare.py reads config.yaml and metrics.csv)
        from tinygpt.config import Config
        (tmp_path / "run").mkdir()
        runs.write_config(tmp_path / "run", Config())
        runs.write_metrics(tmp_path / "run", [{"step": 0, "train_loss": 4.0, "val_loss": 4.0}])
        argv = [str(tmp_path / "run"), "--out", str(out)]
    with pytest.raises(UserError, match=rf"^--out={re.escape(repr(str(out)))} is the folder of a training under way"):
        module.main(argv)
    assert not (out / "n_head=1").exists() and not (out / "results.md").exists()


def test_a_sweeps_runs_do_not_inherit_torchrun_variables(monkeypatch):
    """RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the sweep's environment (a cluster's job) made
    every run wait for peers that never came, 30 minutes each: each run is one process."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29577"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TINYGPT_KEPT", "yes")
    for jobs in (1, 2):
        env = sweep.Runner(jobs).env
        assert not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"} & set(env) and env["TINYGPT_KEPT"] == "yes"


def test_a_run_killed_between_its_first_two_saves_is_started_again(first_sweep, tmp_path):
    """best.pt of step 0 and no ckpt.pt: the starting point only, nothing to lose; not refused as a run whose
    weights would be deleted (which refused the whole sweep)."""
    run = tmp_path / "n_head=1"
    shutil.copytree(first_sweep["out"] / "n_head=1", run)
    save_checkpoint(run / "best.pt", {**load_checkpoint(run / "best.pt"), "step": 0})
    (run / "ckpt.pt").unlink()
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    (run / "metrics.csv").write_text("".join(lines[:2]))  # the header and step 0's eval
    assert lines[1].startswith("0,")
    cfg = load_config(CONFIG, [*shrink(first_sweep["tmp"] / "prepared")[1:], "model.n_head=1"])
    assert sweep.existing_run(run, cfg) == ("train", f"{run} has no checkpoint (it stopped before its first); "
                                                     f"starting it again")


def test_a_probe_of_another_number_of_stories_is_probed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "read_probe", lambda run_dir: {"stories": 2, "skipped_stories": 1})
    assert sweep.probed(tmp_path, 3) and not sweep.probed(tmp_path, 5) and not sweep.probed(tmp_path, 2)


def test_a_run_name_is_hashed_from_one_character_past_max_name():
    kept, cut = (sweep.run_names(["data.dataset"], [("a" * n,)])[0] for n in (112, 113))
    assert kept == "dataset=" + "a" * 112 and len(kept) == sweep.MAX_NAME
    assert re.fullmatch(rf"dataset=a{{{sweep.MAX_NAME - 8}}}-[0-9a-f]{{8}}", cut), cut


def test_only_folders_holding_a_checkpoint_are_another_grids_runs(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "n_head=8").mkdir()
    (tmp_path / "n_head=8" / "ckpt.pt").write_bytes(b"a run")
    assert sweep.other_runs(tmp_path, []) == ["n_head=8"]


def test_a_value_given_three_times_is_said_so(capsys):
    assert sweep.parse_grid(["model.n_head=1,1,1,2,2"]) == {"model.n_head": ["1", "2"]}
    assert capsys.readouterr().out == ("note: --grid model.n_head: 1 is given 3 times; its runs are trained once\n"
                                       "note: --grid model.n_head: 2 is given twice; its runs are trained once\n")


def test_a_sweep_stopped_before_its_first_run_started_writes_no_report(tmp_path, monkeypatch, capsys):
    def stopped(args, runner, tag, run):  # the signal came before any run was reached
        runner.signum = signal.SIGINT

    monkeypatch.setattr(sweep, "train_one", stopped)
    assert sweep_exit_code(tmp_path) == 128 + signal.SIGINT
    assert "sweep interrupted: rerun the same command to resume it\n" in capsys.readouterr().out
    assert not (tmp_path / "sw" / "results.md").exists()


def test_grid_keys_and_values_around_their_signs_are_stripped():
    assert sweep.parse_grid([" model.n_head = 1, 2 "]) == {"model.n_head": ["1", "2"]}


def test_seeds_and_a_train_seed_grid_are_refused_together(tmp_path, monkeypatch):
    stand_in_train(tmp_path, monkeypatch, "raise SystemExit('a run started')")  # a refusal missed: no full-size run
    with pytest.raises(UserError, match="--seeds and --grid train.seed both choose the seeds"), \
            contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "train.seed=1,2", "--seeds", "2", "--out", str(tmp_path / "sw")])
    assert not (tmp_path / "sw").exists()


def test_an_omp_num_threads_of_the_environment_is_kept(monkeypatch):
    fake_cores(monkeypatch, {0, 1, 2, 3})
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert sweep.Runner(2).env["OMP_NUM_THREADS"] == "3"


def test_a_run_asked_for_after_the_sweeps_signal_is_not_started(tmp_path):
    """A run asked for once the sweep heard its Ctrl-C (another job's thread, under --jobs 2) never starts."""
    runner = sweep.Runner(1)
    runner.signum = signal.SIGINT
    marker = tmp_path / "started"
    assert runner.run([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], "t") is None
    assert not marker.exists() and not runner.running


def test_a_signal_that_comes_as_a_run_starts_reaches_it(monkeypatch):
    """The sweep's Ctrl-C between run()'s check and the run's start: the run hears it at once (it was in
    no list of running runs to forward it to)."""
    runner = sweep.Runner(1)
    real = subprocess.Popen

    def signalled_as_it_starts(*args, **kwargs):
        proc = real(*args, **kwargs)
        runner.signum = signal.SIGTERM  # (as forward() records it, the run not yet in runner.running)
        return proc
    monkeypatch.setattr(sweep.subprocess, "Popen", signalled_as_it_starts)
    t = time.perf_counter()
    ended = runner.run([sys.executable, "-c", "import time; time.sleep(20)"], "t")
    assert ended.code == -signal.SIGTERM and time.perf_counter() - t < 15


def test_each_run_is_in_a_session_of_its_own_with_its_share_of_the_threads(monkeypatch, capsys):
    """A terminal's Ctrl-C reaches a run only through the sweep (once): each run leads its own session;
    and --jobs 2 on 4 cores gives it OMP_NUM_THREADS=2 in the environment it runs with."""
    fake_cores(monkeypatch, {0, 1, 2, 3})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    ended = sweep.Runner(2).run([sys.executable, "-c", "import os; print(os.getsid(0) == os.getpid(), "
                                 "os.environ.get('OMP_NUM_THREADS'))"], "t")
    assert ended.code == 0 and capsys.readouterr().out == "t: True 2\n"


def test_runs_of_several_jobs_are_quiet(tmp_path, monkeypatch):
    """--jobs 2 relays each run's output line by line: a progress bar, redrawn in place, would be a line each
    redraw, so each run gets --quiet; one at a time, only where the sweep is --quiet."""
    fake_cores(monkeypatch, {0, 1})
    log = tmp_path / "argv"
    stand_in_train(tmp_path, monkeypatch,
                   f"import sys\nopen({str(log)!r}, 'a').write(str('--quiet' in sys.argv) + '\\n')\n")
    argv = [CONFIG, "--grid", "model.n_head=1,2", *shrink(tmp_path / "prepared")]
    run_sweep([*argv, "--out", str(tmp_path / "a"), "--jobs", "2"])
    assert log.read_text() == "True\nTrue\n"
    log.unlink()
    run_sweep([*argv, "--out", str(tmp_path / "b")])
    assert log.read_text() == "False\nFalse\n"


def test_a_run_stopped_by_the_sweep_before_its_first_checkpoint_says_so(tmp_path, monkeypatch, capfd):
    """A run the sweep's Ctrl-C stopped before it saved anything is said to start again, and reported so."""
    stand_in_train(tmp_path, monkeypatch, "import os, signal, time\nos.kill(os.getppid(), signal.SIGINT)\n"
                   "time.sleep(10)\n")  # the sweep forwards its Ctrl-C: the run stops (KeyboardInterrupt)
    assert sweep_exit_code(tmp_path) == 128 + signal.SIGINT
    printed = capfd.readouterr()
    assert "[1/2] n_head=1: stopped, before its first checkpoint (it will start again)" in printed.out
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == [
        "interrupted before its first checkpoint", "not started"]


def test_a_run_that_trained_otherwise_than_planned_fails_the_sweep(tmp_path, monkeypatch, capfd):
    """A run that finished on a config or data edited as it started is a failure of the sweep, row by row."""
    stand_in_train(tmp_path, monkeypatch, "pass\n")
    monkeypatch.setattr(sweep, "trained_otherwise", lambda run: ("config", "trained with other settings"))
    assert sweep_exit_code(tmp_path) == 1
    printed = capfd.readouterr()
    assert "[1/2] n_head=1: trained with other settings" in printed.out
    assert "2 of 2 run(s) trained on a config or data edited as they started" in printed.err
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == [
        sweep.TRAINED_OTHERWISE.format("config")] * 2


def test_a_run_probed_already_is_not_probed_again(tmp_path, monkeypatch):
    """--probe on a rerun probes only the runs without a probe.json of these stories."""
    stand_in_train(tmp_path, monkeypatch, "pass\n")
    probed = []
    monkeypatch.setattr(sweep, "probe_run", lambda run_dir, n, runner: probed.append(run_dir.name))
    monkeypatch.setattr(sweep, "probed", lambda run_dir, n: run_dir.name == "n_head=1")
    run_sweep([CONFIG, "--grid", "model.n_head=1,2", "--probe", "--probe-stories", "3",
               *shrink(tmp_path / "prepared"), "--out", str(tmp_path / "sw")])
    assert probed == ["n_head=2"]


def test_a_runs_probe_takes_its_share_of_the_cores_and_stops_with_the_sweep(tmp_path, monkeypatch):
    """--jobs 2 on 4 cores: a probe runs on at most 2 threads, and stops when the sweep is stopped."""
    fake_cores(monkeypatch, {0, 1, 2, 3})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = {}

    def stopped_probe(model, tokenizer, n_stories, seed, device, threads=None, stop=None):
        seen.update(threads=threads, stop=stop)
        return None
    cfg = load_config(CONFIG, [])
    monkeypatch.setattr(sweep, "resolve_checkpoint", lambda run_dir: run_dir / "best.pt")
    monkeypatch.setattr(sweep, "load_model", lambda path: (None, cfg, None, None))
    monkeypatch.setattr(sweep, "probe", stopped_probe)
    runner = sweep.Runner(2)
    assert sweep.probe_run(tmp_path, 3, runner) is None and not (tmp_path / "probe.json").exists()
    assert seen["threads"].max_threads == 2 and not seen["stop"]()
    runner.signum = signal.SIGINT
    assert seen["stop"]()


def test_a_sweep_stopped_with_no_run_running_says_interrupted_itself(tmp_path, monkeypatch, capsys):
    """One run at a time, a run that hears the Ctrl-C prints `interrupted` itself; one that came between runs
    (no run to hear it) is the sweep's to say."""
    def stopped(args, runner, tag, run):  # the signal came before any run was reached
        runner.signum = signal.SIGINT

    monkeypatch.setattr(sweep, "train_one", stopped)
    assert sweep_exit_code(tmp_path) == 128 + signal.SIGINT
    assert capsys.readouterr().err.endswith("interrupted\n")


def test_a_run_not_started_for_an_edit_keeps_how_its_folder_has_it(tmp_path, monkeypatch, capfd):
    """A run not started for an edit whose folder holds an earlier try (stopped at a step) is reported with
    both: why it was not started, then its folder's status."""
    stand_in_train(tmp_path, monkeypatch, "raise SystemExit('a run started')")  # (none must start)
    monkeypatch.setattr(sweep, "config_edited", lambda config, run: "the config was edited")
    monkeypatch.setattr(sweep, "run_row", lambda run, runner: {"run": run.name, "status": "stopped at step 5"})
    assert sweep_exit_code(tmp_path) == 1
    assert "2 of 2 run(s) not started" in capfd.readouterr().err
    assert [r["status"] for r in read_csv(tmp_path / "sw" / "results.csv")] == [
        f"{sweep.NOT_AS_PLANNED}, stopped at step 5"] * 2


def test_names_that_differ_only_in_case_are_both_hashed():
    """Names that differ only in case are one folder on macOS's and Windows' disks: each of them is hashed,
    not only the second, so neither takes the plain name another sweep gives."""
    names = sweep.run_names(["data.dataset"], [("A.txt",), ("a.txt",)])
    plain = [sweep.UNSAFE.sub("_", f"dataset={v}") for v in ("A.txt", "a.txt")]
    assert all(n.startswith(p + "-") for n, p in zip(names, plain)), names


def test_a_grid_value_holding_an_equals_sign_keeps_it():
    """Only the first '=' parts the key from its values: a file name may hold one."""
    assert sweep.parse_grid(["data.dataset=a=b.txt,c"]) == {"data.dataset": ["a=b.txt", "c"]}


def test_a_grid_with_no_valid_combination_for_several_reasons_prints_each_skip(tmp_path, monkeypatch):
    """Refused with "(see the notes above)": the notes, one per combination, must be printed."""
    started = recording_train(tmp_path, monkeypatch)
    with pytest.raises(UserError, match=r"no valid combination in --grid model.n_head=3,5 \(see the notes above\)$"), \
            contextlib.redirect_stdout(io.StringIO()) as printed:
        sweep.main([CONFIG, "--grid", "model.n_head=3,5", *shrink(tmp_path / "prepared"),
                    "--out", str(tmp_path / "sw")])
    lines = printed.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["skip n_head=3", "skip n_head=5"], lines
    assert not started.exists()


def test_an_unknown_set_key_is_refused_up_front_with_configs_own_line(tmp_path, monkeypatch):
    """check_keys refuses it before planning, in config's own words, not as every combination's failure
    ("no valid combination in --grid ...: ...") after the sweep folder was made and locked."""
    started = recording_train(tmp_path, monkeypatch)
    with pytest.raises(UserError) as own:
        load_config(CONFIG, ["train.max_iter=5"])
    with pytest.raises(UserError) as refused, contextlib.redirect_stdout(io.StringIO()):
        sweep.main([CONFIG, "--grid", "model.n_head=1,2", "--set", "train.max_iter=5", "--out", str(tmp_path / "sw")])
    assert str(refused.value) == str(own.value)
    assert not started.exists() and not (tmp_path / "sw").exists()


def test_a_config_that_is_not_a_mapping_is_refused_once_in_configs_own_words(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(UserError) as own:
        load_config(str(tmp_path / "list.yaml"))
    with pytest.raises(UserError) as refused, contextlib.redirect_stdout(io.StringIO()):
        sweep.main([str(tmp_path / "list.yaml"), "--grid", "model.n_head=1,2", "--out", str(tmp_path / "sw")])
    assert str(refused.value) == str(own.value) and not (tmp_path / "sw").exists()

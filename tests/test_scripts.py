"""The helper scripts under scripts/ keep the commands' rules (docs/errors.md): bad input is one line
`error: ...` naming the flag, file or value, exit 2, found before any long work (a training, a probe,
a measurement), never a traceback; Ctrl-C is `interrupted`, exit 130; no small input reads, loops or
grows without end. Each runs its `main` in this process through `errors.run_cli`, as its `__main__`
does, with the long work (`run`, the children) replaced by a stand-in that fails the test if reached;
only the Ctrl-C case starts a real process. Nothing trains, nothing touches the network.
"""
from __future__ import annotations

import json
import os
import re
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from tinygpt.errors import UserError, run_cli

SCRIPTS = ("default_run", "reproduce", "tokenization_table", "ablation_table", "page_faults", "explorer_bench",
           "gpu_table")
RUN = {"wall_s": 600.0, "best_val_loss": 0.8, "antecedent": 0.9, "distractor": 0.02, "other": 0.08,
       "head": "L3H0", "head_antecedent": 0.8, "head_distractor": 0.01, "ratio": 80.0}


def script(name: str):
    import importlib
    return importlib.import_module(f"scripts.{name}")


def cli(main, args, capsys) -> tuple[int, str, str]:
    """main(args) through run_cli: (exit code, stdout, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        run_cli(main, [str(a) for a in args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def one_line(result: tuple[int, str, str], *culprits: str) -> str:
    """Exit 2, stderr exactly one `error: ...` line naming every culprit, no traceback."""
    code, out, err = result
    report = f"exit {code}\nstdout:\n{out[-2000:]}\nstderr:\n{err[-2000:]}"
    assert code == 2 and "Traceback" not in err, report
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), report
    for culprit in culprits:
        assert culprit in lines[0], f"{culprit!r} not named in: {lines[0]}"
    return lines[0]


def no_long_work(*args, **kwargs):
    raise AssertionError("long work started before the input was checked")


class Started(Exception):
    """The long work began: the checks let the input through."""


def started(*args, **kwargs):
    raise Started


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_runs_through_run_cli_and_keeps_its_help(name, capsys):
    module = script(name)
    assert "run_cli(main)" in Path(module.__file__).read_text(encoding="utf-8")
    code, out, err = cli(module.main, ["--help"], capsys)
    assert code == 0 and out.startswith(f"usage: python -m scripts.{name}") and not err
    positional = {"reproduce": ["stories"], "ablation_table": ["RUN"], "gpu_table": ["OUT"]}.get(name, [])
    one_line(cli(module.main, [*positional, "--no-such-flag"], capsys), "--no-such-flag")


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_run_as_a_file_says_how_to_run_it(name):
    """`python scripts/X.py` was a ModuleNotFoundError traceback (tinygpt is not importable from
    scripts/): one line saying the command, exit 2, before anything loads."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / f"{name}.py"), "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"error: run it from the repository root as python -m scripts.{name}\n"


@pytest.mark.slow
def test_ctrl_c_in_a_script_is_interrupted_exit_130(tmp_path):
    """Ctrl-C while a script waits on its child (page_faults' measurement): one line, exit 130."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scripts.page_faults", "--steps", "10000", "--reps", "1"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")  # (Linux; elsewhere: at once)
        deadline = time.time() + 60
        while children.exists() and not children.read_text().strip():  # until it waits on its measurement
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and err.splitlines() == ["interrupted"], err


@pytest.mark.slow
def test_a_script_killed_takes_its_measurement_with_it(tmp_path):
    """kill -9 of page_faults (or of reproduce, default_run: the same run()): its child went on
    alone, 10,000 steps with a core busy, for half an hour."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scripts.page_faults", "--steps", "10000", "--reps", "1"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    if not children.exists():
        proc.kill()
        pytest.skip("no /proc children file (Linux only)")
    deadline = time.time() + 60
    while not children.read_text().strip():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    child = int(children.read_text().split()[0])
    proc.kill()
    proc.wait()
    deadline = time.time() + 20
    while Path(f"/proc/{child}").exists() and time.time() < deadline:
        stat = Path(f"/proc/{child}/stat").read_text() if Path(f"/proc/{child}/stat").exists() else ""
        if stat.split(") ", 1)[-1][:1] == "Z":  # (a zombie left for init to reap: it has ended)
            break
        time.sleep(0.1)
    try:
        alive = Path(f"/proc/{child}/stat").read_text().split(") ", 1)[-1][:1] != "Z"
    except OSError:
        alive = False
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the measurement outlived the script"


# ---- default_run ----


@pytest.mark.parametrize("content, culprit", [
    (None, "cannot read it"),  # missing
    ("folder", "cannot read it"),
    (b"", "not the JSON line"),
    (b"\xff\xfe\x00binary", "not the JSON line"),
    (b"training ...\nnot json", "not the JSON line"),
    (b"[" * 100_000, "not the JSON line"),  # nested deeper than Python's recursion limit
    ('{"a": 1}', '"runs"'),
    ("[1, 2]", '"runs"'),
    ('{"runs": []}', '"runs"'),
    ('{"runs": {}}', '"runs"'),
    ('{"runs": {"cur": 5}}', "run 'cur' is 5"),
    (json.dumps({"runs": {"cur": {k: v for k, v in RUN.items() if k != "other"}}}), "no 'other'"),
    (json.dumps({"runs": {"cur": {**RUN, "wall_s": "10"}}}), "wall_s='10'"),
    (json.dumps({"runs": {"cur": RUN, "previous default": {**RUN, "wall_s": 0}}}), "wall_s=0"),
    (json.dumps({"runs": {"cur": {**RUN, "antecedent": 10 ** 400}}}), "antecedent="),
    (json.dumps({"runs": {"cur": {**RUN, "distractor": float("nan")}}}), "distractor=nan"),
    (json.dumps({"runs": {"cur": {**RUN, "head": 3}}}), "head=3"),
    (json.dumps({"runs": {"cur": {**RUN, "antecedent": float("inf")}}}), "antecedent=inf"),  # (only a ratio may be)
], ids=lambda v: v[:24] if isinstance(v, str) else None)
def test_default_run_table_refuses_a_bad_saved_output(tmp_path, capsys, content, culprit):
    path = tmp_path / "saved.txt"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    one_line(cli(script("default_run").main, ["--table", path], capsys), f"--table {path}", culprit)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_default_run_table_reads_a_bounded_amount(capsys, tmp_path):
    t0 = time.perf_counter()
    one_line(cli(script("default_run").main, ["--table", "/dev/zero"], capsys), "/dev/zero", "bytes")
    assert time.perf_counter() - t0 < 5
    with open(tmp_path / "big.txt", "wb") as f:  # (5 MiB: a saved output is a few KB)
        f.truncate(5 << 20)
    one_line(cli(script("default_run").main, ["--table", tmp_path / "big.txt"], capsys), "big.txt is over 4,194,304 "
             "bytes")


def test_the_scripts_shared_checks_refuse_a_true_figure_and_a_link_to_nothing(tmp_path):
    """True read as the figure 1, and a link to nothing at an output's path taken (written through, anywhere)."""
    from scripts import reproduce
    assert reproduce.is_figure(1) and not reproduce.is_figure(True)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UserError, match="--out: it would overwrite .*dangling, which this script did not write"):
        reproduce.check_own_output(tmp_path / "dangling", "probe of ", "--out")
    assert not (tmp_path / "nowhere").exists()


def test_default_run_table_still_reads_a_real_output(tmp_path, capsys):
    path = tmp_path / "saved.txt"
    path.write_text("training ...\n" + json.dumps({"runs": {"current default, seed 1337": {**RUN, "ratio": float("inf")},
                                                           "previous default": {**RUN, "wall_s": 1000}}}))
    code, out, err = cli(script("default_run").main, ["--table", path], capsys)
    assert code == 0 and not err and "| previous default, seed 1337 |" in out and "(infx)" in out


def test_default_run_table_refuses_the_training_flags(tmp_path, capsys):
    """`--table OUTPUT --seeds 5 --out DIR` printed the table, the training flags dropped without a word."""
    path = tmp_path / "saved.txt"
    path.write_text(json.dumps({"runs": {"current default, seed 1337": RUN}}))
    one_line(cli(script("default_run").main, ["--table", path, "--seeds", "5", "--out", tmp_path / "x"], capsys),
             "--seeds --out: --table only prints the table of saved outputs, it trains nothing")
    assert cli(script("default_run").main, ["--table", path], capsys)[0] == 0


def test_default_run_table_of_runs_one_with_an_infinite_ratio(tmp_path, capsys):
    """Two current runs, one whose best head put no weight on the distractor (ratio inf, a figure
    saved_runs accepts): the mean row was a TypeError (no sd of an infinite value); now the mean alone."""
    path = tmp_path / "saved.txt"
    path.write_text(json.dumps({"runs": {"current default, seed 1337": {**RUN, "ratio": float("inf")},
                                         "current default, seed 1338": RUN}}))
    code, out, err = cli(script("default_run").main, ["--table", path], capsys)
    assert code == 0 and not err, err
    mean = out.splitlines()[-1]
    assert mean.startswith("| current default, mean ± sd (2 seeds) |") and "(infx) | 2 of 2 met |" in mean


def default_run_children(monkeypatch, run_dir: Path, spec: dict) -> tuple:
    """default_run with its `run` a stand-in: train.py writes run_dir/metrics.csv of spec["csv"], probe.py prints
    spec["behaviour"] (of 10 references) and spec["best"] head, each read as it runs (a test changes them between
    calls). -> (the module, the train.py commands run)."""
    module, trained = script("default_run"), []

    def train_or_probe(args, cwd):
        if args[0] == "train.py":
            trained.append(args)
            run_dir.mkdir(exist_ok=True)
            (run_dir / "metrics.csv").write_text(spec["csv"])
            return 60.0, ""
        return 1.0, json.dumps({"behaviour": spec["behaviour"], "references": 10,
                                "attention_attribute": {"best": spec["best"]}})
    monkeypatch.setattr(module, "run", train_or_probe)
    return module, trained


PROBED = {"csv": "step,train_loss,val_loss\n100,1.5,1.4\n", "behaviour": {"antecedent": 9, "distractor": 1, "other": 0},
          "best": {"layer": 0, "head": 1, "antecedent": 0.6, "distractor": 0.1, "ratio": 6.0}}


def test_default_run_keeps_a_head_ratio_of_zero(tmp_path, monkeypatch):
    """A best head with no weight on the antecedent has ratio 0.0, which `or inf` made inf (and so
    "met"); only probe.py's None (no weight on the distractor) is inf."""
    spec = {**PROBED, "best": {**PROBED["best"], "antecedent": 0.0, "distractor": 0.3}}
    module, _ = default_run_children(monkeypatch, tmp_path / "run", spec)
    for spec["best"]["ratio"], expected in ((0.0, 0.0), (None, float("inf")), (12.5, 12.5)):
        assert module.train_and_probe(ROOT, tmp_path, [])["ratio"] == expected


def test_default_run_reports_the_best_val_loss_not_the_last(tmp_path, monkeypatch):
    """The column `best val loss` read the last eval's (1.6 here), not the lowest. The file was also split
    on commas by hand, its third column taken for val_loss: it is read by its header now, as every other
    reader of metrics.csv reads it (runs.read_metrics)."""
    spec = dict(PROBED)
    module, _ = default_run_children(monkeypatch, tmp_path / "run", spec)
    for spec["csv"] in ("step,train_loss,val_loss\n100,1.5,1.4\n150,1.3,\n200,1.2,1.6\n",
                        "step,val_loss,train_loss\n100,1.4,1.5\n200,1.6,1.2\n"):  # (columns in another order)
        assert module.train_and_probe(ROOT, tmp_path, [])["best_val_loss"] == 1.4


def test_default_run_trains_each_seed_once_with_its_train_seed(tmp_path, capsys, monkeypatch):
    """The current runs trained without their train.seed (every seed the config's own: the same
    run n times), or every previous-default run with the first seed, each row overwriting the last."""
    import types

    module = script("default_run")
    trained, commands = [], []

    def train_and_probe(cwd, out, sets):
        trained.append((cwd == ROOT, out.name, sets))
        return {**RUN, "wall_s": 600.0 if cwd == ROOT else 1000.0}

    def git_or_tar(command, **kwargs):  # git rev-parse (check_args), git archive, tar -x: no repository read
        commands.append(command[:2])
        return subprocess.CompletedProcess(command, 0, "c0ffee\n" if command[1] == "rev-parse" else b"", b"")
    monkeypatch.setattr(module, "train_and_probe", train_and_probe)
    monkeypatch.setattr(module, "subprocess", types.SimpleNamespace(run=git_or_tar,
                                                                    CalledProcessError=subprocess.CalledProcessError))
    code, out, err = cli(module.main, ["--seeds", "2", "--old-seeds", "2", "--out", tmp_path / "out"], capsys)
    assert code == 0 and not err, err
    assert trained == [(True, "seed1337", ["train.seed=1337"]), (True, "seed1338", ["train.seed=1338"]),
                       (False, "old1337", ["train.seed=1337"]), (False, "old1338", ["train.seed=1338"])]
    assert commands == [["git", "rev-parse"], ["git", "archive"], ["tar", "-x"]]
    runs = json.loads(out.splitlines()[-1])["runs"]
    assert list(runs) == ["current default, seed 1337", "current default, seed 1338", "previous default, seed 1337",
                          "previous default, seed 1338"]
    assert "| previous default, mean ± sd (2 seeds) |" in out


def test_default_run_a_run_at_each_target_meets_it():
    """The targets are bounds that count as met: 85% antecedent, 10% distractor, a ratio of 5, 0.8x the time
    (17 of 20 references is 85%). The previous default's mean row counts no targets."""
    module = script("default_run")
    edge = {**RUN, "antecedent": 0.85, "distractor": 0.10, "ratio": 5.0, "wall_s": 80.0}
    rows = {"current default, seed 1337": edge, "previous default, seed 1337": {**RUN, "wall_s": 100.0},
            "previous default, seed 1338": {**RUN, "wall_s": 100.0}}
    lines = module.table(rows).splitlines()
    assert lines[2].startswith("| current default, seed 1337 | 80 | 0.80x |") and lines[2].endswith("| met |")
    assert lines[3].startswith("| previous default, seed 1337 |") and lines[3].endswith("|  |")  # (not NOT met)
    assert lines[-1].startswith("| previous default, mean ± sd (2 seeds) |") and lines[-1].endswith("|  |")


def test_default_run_trains_with_its_sets_and_reads_each_figure_of_the_probe(tmp_path, monkeypatch):
    module, trained = default_run_children(monkeypatch, tmp_path / "run", {
        **PROBED, "behaviour": {"antecedent": 7, "distractor": 1, "other": 2}})
    r = module.train_and_probe(ROOT, tmp_path, ["train.seed=7"])
    assert (r["antecedent"], r["distractor"], r["other"]) == (0.7, 0.1, 0.2)
    assert (r["head"], r["head_antecedent"], r["head_distractor"]) == ("L0H1", 0.6, 0.1)
    assert trained[0][-1] == "train.seed=7"


@pytest.mark.parametrize("flags", [{"seeds": 100}, {"first_seed": 0}, {"old_seeds": 0, "old": "not-a-commit"}],
                         ids=["most seeds", "seed 0", "no old runs: --old unread"])
def test_default_run_takes_the_flags_at_their_bounds(tmp_path, flags):
    from types import SimpleNamespace
    module = script("default_run")
    args = SimpleNamespace(**{"seeds": 1, "old_seeds": 0, "first_seed": 1337, "old": module.OLD,
                              "out": tmp_path / "out", **flags})
    assert module.check_args(args) is None


def test_default_run_a_run_too_slow_for_the_time_target_is_not_met():
    """A run that met every target but wall time (0.9x the previous default's, over 0.8x) read `met`."""
    module = script("default_run")
    rows = {"current default, seed 1337": {**RUN, "wall_s": 900.0},
            "current default, seed 1338": {**RUN, "wall_s": 700.0},
            "previous default, seed 1337": {**RUN, "wall_s": 1000.0}}
    lines = module.table(rows).splitlines()
    assert lines[2].startswith("| current default, seed 1337 | 900 | 0.90x |") and lines[2].endswith("| NOT met |")
    assert lines[3].startswith("| current default, seed 1338 | 700 | 0.70x |") and lines[3].endswith("| met |")
    assert lines[-1].endswith("| 1 of 2 met |")
    assert [r["meets_targets"] for r in rows.values()] == [False, True, None]


@pytest.mark.parametrize("args, culprits", [
    (["--old", "no-such-commit-xyz"], ["--old='no-such-commit-xyz'", "not a commit"]),
    (["--old", ""], ["--old=''"]),
    (["--old=-x"], ["--old='-x'"]),
    (["--out", "FILE"], ["--out=", "is a file"]),
    (["--out", ""], ["--out", "empty path"]),
    (["--seeds", "-1"], ["--seeds=-1"]),
    (["--old-seeds", "-3"], ["--old-seeds=-3"]),
    (["--seeds", "1000000"], ["--seeds=1000000"]),
    (["--seeds", "0", "--old-seeds", "0"], ["nothing to run"]),
    (["--first-seed", "-5"], ["--first-seed=-5"]),
])
def test_default_run_refuses_bad_flags_before_any_training(tmp_path, capsys, monkeypatch, args, culprits):
    module = script("default_run")
    monkeypatch.setattr(module, "run", no_long_work)
    (tmp_path / "FILE").write_text("x")
    args = [str(tmp_path / "FILE") if a == "FILE" else a for a in args]
    if "--out" not in args:
        args += ["--out", tmp_path / "out"]
    one_line(cli(module.main, args, capsys), *culprits)
    assert not (tmp_path / "out").exists()


def test_default_run_refuses_an_out_holding_an_earlier_run(tmp_path, capsys, monkeypatch):
    """After an interrupted default_run, the same command ended in train.py's advice to --resume or
    --set train.out_dir, which default_run does not take (and a resumed run's wall time is no figure)."""
    module = script("default_run")
    monkeypatch.setattr(module, "run", no_long_work)
    (tmp_path / "out" / "seed1338" / "run").mkdir(parents=True)  # the second run was stopped
    (tmp_path / "out" / "seed1338" / "run" / "ckpt.pt").write_bytes(b"an earlier run's")
    line = one_line(cli(module.main, ["--seeds", "2", "--old-seeds", "0", "--out", tmp_path / "out"], capsys),
                    f"--out {tmp_path / 'out'} already holds {tmp_path / 'out' / 'seed1338'}", "choose another --out",
                    "delete or move")
    assert "--resume" not in line
    monkeypatch.setattr(module, "run", started)  # seeds whose folders are not there yet start
    with pytest.raises(Started):
        module.main(["--seeds", "1", "--old-seeds", "0", "--first-seed", "1339", "--out", str(tmp_path / "out")])


# ---- reproduce (and every script that runs a child through its `run`) ----


def test_a_failing_child_ends_the_script_with_its_own_error_line(capsys, tmp_path):
    from scripts import reproduce
    child = ["-c", "import sys; print('some', file=sys.stderr); sys.exit('error: no run at out/x (probe.py)')"]
    line = one_line(cli(lambda argv: reproduce.run(child), [], capsys), "failed (exit 1): no run at out/x (probe.py)")
    assert "error: error:" not in line
    one_line(cli(lambda argv: reproduce.run(child, tmp_path), [], capsys), f"failed in {tmp_path}")
    killed = ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]  # (no exit code: -9, no message)
    one_line(cli(lambda argv: reproduce.run(killed), [], capsys), "failed (exit -9): no message")


def test_reproduce_stories_gives_up_on_a_model_that_writes_no_words(tmp_path, capsys, monkeypatch):
    from scripts import reproduce
    calls = []

    def silent_model(args, cwd=ROOT):  # train.py succeeds; sample.py writes no word, ever
        calls.append(args[0])
        if len(calls) > 100:
            raise AssertionError("sampled without end")
        return 1.0, "" if args[0] == "sample.py" else "trained"
    monkeypatch.setattr(reproduce, "run", silent_model)
    one_line(cli(lambda argv: reproduce.stories(tmp_path / "run", []), [], capsys), "0 words in 10 samples")
    assert calls.count("sample.py") == reproduce.SAMPLES


STORIES_METRICS = ("step,train_loss,val_loss,elapsed_s\n0,3.0,2.9,1.0\n100,1.5,1.3,50.0\n150,1.4,,70.0\n"
                   "200,1.2,1.4,90.0\n")


def stories_children(calls: list, samples: dict[int, str]):
    """reproduce's `run` for `stories`: train.py leaves a run's metrics.csv in its train.out_dir;
    sample.py --seed S prints samples[S] (nothing for a seed not in it). Each command goes in calls."""
    def run(args, cwd=ROOT):
        calls.append(list(args))
        if args[0] == "train.py":
            from tinygpt.config import parse_overrides  # (as train.py reads it: YAML)
            out = Path(parse_overrides([next(a for a in args if a.startswith("train.out_dir="))])["train"]["out_dir"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "metrics.csv").write_text(STORIES_METRICS)
            return 100.0, ""
        assert args[0] == "sample.py", args
        return 1.0, samples.get(int(args[args.index("--seed") + 1]), "")
    return run


def test_reproduce_trains_into_an_out_dir_whose_name_yaml_would_cut(tmp_path, capsys, monkeypatch):
    """`--out-dir "r #1"`: the path went into --set unquoted, YAML read ' #1/run' as a comment, the run
    landed in r/, and the script ended in an IndexError reading r #1/run."""
    from data.stories import generate_stories
    from scripts import reproduce
    words = sorted(set(reproduce.WORD.findall(generate_stories(20000, 1337)[0])))
    calls = []
    monkeypatch.setattr(reproduce, "run", stories_children(calls, {0: " ".join(words * (2000 // len(words) + 1))}))
    code, out, err = cli(reproduce.main,
                         ["stories", "--out-dir", tmp_path / "r #1", "--set", "data.stories_chars=20000"], capsys)
    assert code == 0 and not err, err
    assert (tmp_path / "r #1" / "run" / "metrics.csv").is_file() and not (tmp_path / "r").exists()


def test_reproduce_stories_measures_2000_words_of_different_samples(tmp_path, monkeypatch):
    """Every sample drawn with seed 0 (the same text each time), or all the words sampled counted
    (3,000, not the 2,000 measured), or the run's last val loss as its best, would have shipped."""
    from scripts import reproduce
    calls = []
    monkeypatch.setattr(reproduce, "run", stories_children(calls, {0: "had " * 1500, 1: "Zorblax " * 1500}))
    result = reproduce.stories(tmp_path / "run", ["data.stories_chars=20000"])
    assert result["sampled_words"] == 2000
    assert result["share_in_corpus"] == 0.75 and result["unknown_examples"] == ["Zorblax"]  # 1,500 + 500
    assert [a[a.index("--seed") + 1] for a in calls if a[0] == "sample.py"] == ["0", "1"]
    assert result["best_val_loss"] == 1.3 and result["train_seconds"] == 90.0


def test_reproduce_stories_measures_the_words_against_the_corpus_trained_on(tmp_path, monkeypatch):
    """A name of the default corpus that a 20,000-character corpus lacks is no word of the corpus trained on."""
    from data.stories import generate_stories
    from scripts import reproduce
    from tinygpt.config import DataConfig
    assert "Abel" not in reproduce.WORD.findall(generate_stories(20000, 1337)[0])
    assert "Abel" in reproduce.WORD.findall(generate_stories(DataConfig.stories_chars, 1337)[0])
    monkeypatch.setattr(reproduce, "run", stories_children([], {0: "Abel " * 2000}))
    result = reproduce.stories(tmp_path / "run", ["data.stories_chars=20000"])
    assert result["share_in_corpus"] == 0 and result["unknown_examples"] == ["Abel"]


def test_reproduce_stories_trains_and_measures_the_corpus_of_its_sets(tmp_path, capsys, monkeypatch):
    """`--set` was checked but left out of the training (the default corpus trained), or the share
    of real words was measured against another seed's corpus than the one trained on."""
    from data.stories import generate_stories
    from scripts import reproduce
    words = sorted(set(reproduce.WORD.findall(generate_stories(20000, 7)[0])))  # every word of that corpus
    calls = []
    monkeypatch.setattr(reproduce, "run", stories_children(calls, {0: " ".join(words * (2000 // len(words) + 1))}))
    code, out, err = cli(reproduce.main, ["stories", "--out-dir", tmp_path / "out", "--set", "data.stories_chars=20000",
                                          "data.stories_seed=7"], capsys)
    assert code == 0 and not err, err
    train = calls[0]
    assert train[0] == "train.py" and train[-2:] == ["data.stories_chars=20000", "data.stories_seed=7"], train
    result = json.loads(out.splitlines()[-1])
    assert result["share_in_corpus"] == 1.0 and result["unknown_examples"] == [], result
    assert result["run"] == str((tmp_path / "out" / "run").resolve())  # (--out-dir DIR trains DIR/run: said)


def test_reproduce_whole_val_loss_scores_every_token_once_against_the_next(tmp_path, monkeypatch, tiny_model_config,
                                                                          one_thread):
    """whole_val_split_loss scored each token as its own next token (targets not shifted), or
    divided the windows' summed losses by the number of batches of 64 (2 here), not of windows (70).
    Beside it, the loss with sample.py --dtype int8's weights; a width they cannot read says why."""
    from dataclasses import replace
    from types import SimpleNamespace

    import numpy as np
    import torch
    import torch.nn.functional as F

    from data import prepare
    from model import GPT
    from scripts import reproduce
    from tinygpt import checkpoint
    from tinygpt.runtime import Int8Linear
    import copy
    torch.manual_seed(0)
    model, T = GPT(tiny_model_config).eval(), tiny_model_config.block_size
    with torch.no_grad():  # logits far from uniform: the loss depends on the weights (int8 or not)
        model.tok_emb.weight.mul_(10)
    base = copy.deepcopy(model)
    val = np.random.default_rng(0).integers(0, tiny_model_config.vocab_size, 70 * T + 5).astype(np.uint16)
    config = SimpleNamespace(model=tiny_model_config, data=None)
    monkeypatch.setattr(checkpoint, "load_model", lambda run_dir, device: (model, config, None, {}))
    monkeypatch.setattr(prepare, "prepared_dir", lambda d: tmp_path)
    monkeypatch.setattr(prepare, "load_prepared", lambda folder: SimpleNamespace(val=val))
    tokens = torch.from_numpy(val.astype(np.int64))
    # window i: tokens [iT, (i+1)T) predict [iT+1, (i+1)T+1); 70 windows, the last 4 tokens unused
    with torch.no_grad():
        logits = model(tokens[:70 * T].view(70, T))
        expected = float(F.cross_entropy(logits.reshape(70 * T, -1), tokens[1:70 * T + 1]))
    losses = reproduce.whole_val_losses(tmp_path / "run")
    assert losses["whole_val_split_loss"] == pytest.approx(expected, abs=5.1e-5)  # (rounded to 4 places)
    assert losses["whole_val_split_loss_int8"] == pytest.approx(expected, rel=1e-2) and expected > 5
    assert isinstance(model.lm_head, Int8Linear)  # (int8_weights changed the model in place)
    # a split of exactly 70 windows' tokens: the last token of the last window has no next one, so 69 windows
    val, model = val[:70 * T], copy.deepcopy(base)
    with torch.no_grad():
        expected = float(F.cross_entropy(base(tokens[:69 * T].view(69, T)).reshape(69 * T, -1), tokens[1:69 * T + 1]))
    assert reproduce.whole_val_losses(tmp_path / "run")["whole_val_split_loss"] == pytest.approx(expected, abs=5.1e-5)
    config.model = replace(tiny_model_config, n_embd=24)
    model = GPT(config.model).eval()
    assert reproduce.whole_val_losses(tmp_path / "run")["int8"].startswith("int8 weights need model.n_embd a multiple")


@pytest.mark.parametrize("args, culprits", [
    (["--set", "train.out_dir=elsewhere"], ["train.out_dir", "--out-dir"]),
    (["--set", "train.max_iters=5", " train.out_dir =x"], ["train.out_dir"]),
    (["--out-dir", ""], ["--out-dir", "empty path"]),
    (["--out-dir", "FILE"], ["--out-dir=", "is a file"]),
    (["--config", "nonexistent.yaml"], ["--config nonexistent.yaml", "is for shakespeare"]),  # (it was ignored)
    (["--text", "/nonexistent/file.txt"], ["--text /nonexistent/file.txt", "is for shakespeare"]),  # (so was this)
    # trained on it, yet measured against the generated stories, the override recorded nowhere
    (["--set", "data.dataset=other.txt"], ["--set data.dataset=... is not taken", "generated stories"]),
])
def test_reproduce_refuses_bad_flags_before_training(tmp_path, capsys, monkeypatch, args, culprits):
    from scripts import reproduce
    monkeypatch.setattr(reproduce, "run", no_long_work)
    (tmp_path / "FILE").write_text("x")
    args = [str(tmp_path / "FILE") if a == "FILE" else a for a in args]
    if "--out-dir" not in args:
        args += ["--out-dir", tmp_path / "out"]
    one_line(cli(reproduce.main, ["stories", *args], capsys), *culprits)


def test_reproduce_refuses_an_empty_config(tmp_path, capsys, monkeypatch):
    """`--config ''` (an unset variable) trained the default config without a word."""
    from scripts import reproduce
    monkeypatch.setattr(reproduce, "run", no_long_work)
    (tmp_path / "text.txt").write_text("x")
    one_line(cli(reproduce.main, ["shakespeare", "--text", tmp_path / "text.txt", "--config", "",
                                  "--out-dir", tmp_path / "out"], capsys), "--config '' names no file")


def test_reproduce_refuses_an_earlier_run_in_its_out_dir(tmp_path, capsys, monkeypatch):
    """A rerun with the same --out-dir ended in train.py's `already holds a run; continue it with
    --resume, or choose another: --set train.out_dir=...`, neither of which reproduce takes."""
    from scripts import reproduce
    monkeypatch.setattr(reproduce, "run", no_long_work)
    (tmp_path / "out" / "run").mkdir(parents=True)
    (tmp_path / "out" / "run" / "ckpt.pt").write_bytes(b"an earlier run's")
    line = one_line(cli(reproduce.main, ["stories", "--out-dir", tmp_path / "out"], capsys),
                    f"--out-dir {tmp_path / 'out'} already holds {tmp_path / 'out' / 'run'}",
                    "choose another --out-dir", "delete or move")
    assert "--resume" not in line and "train.out_dir" not in line
    (tmp_path / "out" / "run" / "ckpt.pt").unlink()  # an empty run folder is a fresh one
    monkeypatch.setattr(reproduce, "run", started)
    with pytest.raises(Started):
        reproduce.main(["stories", "--out-dir", str(tmp_path / "out")])


def test_reproduce_does_not_call_a_folder_of_the_users_an_earlier_run(tmp_path, capsys, monkeypatch):
    """`--out-dir /` was told it `already holds /run, an earlier run's: ... delete or move /run` (the
    system's), and so was a folder run/ of the user's own files."""
    from scripts import reproduce
    monkeypatch.setattr(reproduce, "run", no_long_work)
    (tmp_path / "out" / "run").mkdir(parents=True)
    (tmp_path / "out" / "run" / "thesis.tex").write_text("mine")
    line = one_line(cli(reproduce.main, ["stories", "--out-dir", tmp_path / "out"], capsys),
                    f"already holds {tmp_path / 'out' / 'run'}, which this script did not make (a folder or file of "
                    f"yours?)", "choose another --out-dir")
    assert "delete" not in line and "earlier run" not in line


def test_reproduce_shakespeare_says_when_the_text_is_not_tiny_shakespeare(tmp_path, capsys, monkeypatch):
    """`--text` of a cut or other text reported the speedrun's figures, exit 0, nothing said; and
    `--config configs/stories.yaml` trained stories' BPE on it (stories refuses a shakespeare config)."""
    from scripts import reproduce
    calls = []
    monkeypatch.setattr(reproduce, "run", lambda args, cwd=ROOT: calls.append(args) or started())
    (tmp_path / "short.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    with pytest.raises(Started):
        reproduce.main(["shakespeare", "--text", str(tmp_path / "short.txt"), "--out-dir", str(tmp_path / "out")])
    assert calls[0][:2] == ["train.py", "configs/shakespeare_char.yaml"]  # (trained on --text, not the config's)
    assert reproduce.set_word("data.dataset", str((tmp_path / "short.txt").resolve())) in calls[0]
    assert capsys.readouterr().err == (f"note: --text {tmp_path / 'short.txt'} is not tiny shakespeare (its size or "
                                       f"sha256 differs): the figures are of this text, not comparable with "
                                       f"docs/results.md's\n")
    one_line(cli(reproduce.main, ["shakespeare", "--text", tmp_path / "short.txt", "--config", "configs/stories.yaml",
                                  "--out-dir", tmp_path / "out2"], capsys),
             "--config configs/stories.yaml trains data.dataset=stories")
    one_line(cli(reproduce.main, ["shakespeare", "--text", tmp_path / "nope.txt"], capsys),
             f"no tiny shakespeare at {tmp_path / 'nope.txt'}: give --text PATH/tinyshakespeare.txt")
    monkeypatch.setattr(reproduce, "ROOT", tmp_path / "repo")  # (the default: shared/data beside the repository)
    one_line(cli(reproduce.main, ["shakespeare"], capsys),
             f"no tiny shakespeare at {tmp_path / 'shared' / 'data' / 'tinyshakespeare.txt'}:")


def test_reproduce_knows_tiny_shakespeare_itself():
    """The text the note above is not given for: the real tiny shakespeare (a data folder at hand, or a skip
    that the report shows; it was an `if` inside the test above, passing silently without the folder)."""
    from conftest import SHARED_DATA
    from scripts import reproduce
    if not (SHARED_DATA / "tinyshakespeare.txt").is_file():
        pytest.skip(f"needs {SHARED_DATA / 'tinyshakespeare.txt'}")
    assert reproduce.is_tiny_shakespeare(SHARED_DATA / "tinyshakespeare.txt")


@pytest.mark.parametrize("sets, culprit", [(["foo"], "--set 'foo' must look like SECTION.KEY=VALUE"),
                                           (["train.nope=1"], "unknown config key 'train.nope'")])
def test_reproduce_refuses_a_bad_set_before_making_its_temp_folder(tmp_path, capsys, monkeypatch, sets, culprit):
    """train.py refused it, but the temp folder made for the run was left behind, empty."""
    import tempfile

    from scripts import reproduce
    monkeypatch.setattr(reproduce, "run", no_long_work)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    one_line(cli(reproduce.main, ["stories", "--set", *sets], capsys), culprit)
    assert list(tmp_path.iterdir()) == []


def test_reproduce_removes_its_temp_folder_when_the_training_fails_before_a_checkpoint(tmp_path, capsys, monkeypatch):
    """A refusal only train.py could make (`--text /bin/true`: a binary file) left the temp folder behind, empty,
    after printing `the run: ...`; one that holds a checkpoint stays (to resume or sample from)."""
    import tempfile

    from scripts import reproduce

    def refused(*args, **kwargs):
        raise UserError("data.dataset='/usr/bin/true' is a binary file")
    monkeypatch.setattr(reproduce, "run", refused)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code, _, err = cli(reproduce.main, ["stories", "--set", "train.max_iters=1"], capsys)
    assert code == 2 and err.splitlines()[-1] == "error: data.dataset='/usr/bin/true' is a binary file", err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "mine").mkdir()  # an --out-dir is the user's: kept, with what it held, however the training ends
    (tmp_path / "mine" / "thesis.tex").write_text("mine")
    assert cli(reproduce.main, ["stories", "--out-dir", tmp_path / "mine"], capsys)[0] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["mine"] and (tmp_path / "mine" / "thesis.tex").is_file()

    def checkpointed_then_refused(*args, **kwargs):
        run = next(tmp_path.glob("tinygpt-*")) / "run"
        run.mkdir()
        (run / "ckpt.pt").write_bytes(b"a checkpoint")
        raise UserError("stopped")
    monkeypatch.setattr(reproduce, "run", checkpointed_then_refused)
    code, _, err = cli(reproduce.main, ["stories", "--set", "train.max_iters=1"], capsys)
    assert code == 2 and err.splitlines()[-1] == "error: stopped", err
    assert [p.name for p in tmp_path.glob("tinygpt-*/run/*")] == ["ckpt.pt"]


# ---- tokenization_table ----


@pytest.mark.parametrize("args, culprit", [
    (["--chars", "0"], "--chars=0"), (["--chars", "-1"], "--chars=-1"),
    (["--chars", "10000000000"], "--chars=10000000000"),  # grew memory without bound
    (["--sizes", "abc"], "--sizes='abc'"), (["--sizes", ""], "--sizes=''"), (["--sizes", "1024,,"], "--sizes='1024,,'"),
    (["--sizes", "0"], "--sizes='0'"), (["--sizes", "-5"], "--sizes='-5'"), (["--sizes", "256"], "--sizes='256'"),
    (["--sizes", "1024,100"], "--sizes='1024,100'"), (["--sizes", "70000"], "--sizes='70000'"),
    (["--sizes", "300,300"], "gives a size twice"),  # (the same row was printed twice)
])
def test_tokenization_table_refuses_bad_flags_before_generating(capsys, monkeypatch, args, culprit):
    module = script("tokenization_table")
    monkeypatch.setattr(module.stories, "generate_stories", no_long_work)
    one_line(cli(module.main, args, capsys), culprit)


def offline_gpt2(module, monkeypatch) -> None:
    """The tokenization table's GPT-2 row refused as offline: no download of GPT-2's file in a test."""
    real = module.build_tokenizer

    def offline(name, text, **kwargs):
        if name == "gpt2":
            raise UserError("offline")
        return real(name, text, **kwargs)
    monkeypatch.setattr(module, "build_tokenizer", offline)


def test_tokenization_table_of_a_small_corpus(capsys, monkeypatch):
    """--chars 5000 ended in 'text has 13 word(s) not in the word vocabulary': the word tokenizer was
    learned from the training split, then encoded the whole text. Now every tokenizer is learned from
    the whole text (as data.prepare does), and the probe's words the corpus lacks are left out."""
    module = script("tokenization_table")
    offline_gpt2(module, monkeypatch)
    code, out, err = cli(module.main, ["--chars", "5000", "--sizes", "300,65000"], capsys)
    assert code == 0 and not err, err
    assert "do not occur in this corpus: left out" in out and "| word |" in out and "| bpe, 300 | 300 |" in out
    # a size the text cannot reach: the row said `bpe, 65000` beside a vocabulary of about 1,000
    assert re.search(r"\| bpe, 65000 asked: the text has no more pairs to merge \| \d,?\d+ \|", out), out
    # --chars 1 and --chars 40 printed the same table without a word: one whole story is the least there is
    for chars in (5000, 1):
        code, out, err = cli(module.main, ["--chars", str(chars), "--sizes", "300"], capsys)
        said = re.search(rf"^\(the corpus: ([\d,]+) characters, whole stories until --chars {chars:,} is reached\)$",
                         out, re.M)
        assert code == 0 and said and int(said[1].replace(",", "")) >= chars, out


def test_tokenization_table_counts_the_probes_words_of_its_corpus(capsys, monkeypatch):
    """Each figure as its header names it: the corpus's own length, the attribute values and names it holds (as
    words, after a space), how many of each it lacks, each split count in its column; GPT-2's row left out, said.
    The flags' largest values are taken."""
    from types import SimpleNamespace

    from data.stories import generate_stories
    from data.story_words import ATTRIBUTE_POOLS, FEMALE_NAMES, MALE_NAMES
    from tinygpt.tokenizer import WordTokenizer
    module = script("tokenization_table")
    assert module.check_args(SimpleNamespace(chars=module.MAX_CHARS, sizes="65536")) == [65536]
    line = one_line(cli(module.main, ["--sizes", "9" * 5000], capsys), "--sizes='999", "comma-separated")
    assert len(line) < 300, line  # (the value cut, as errors.short does)
    offline_gpt2(module, monkeypatch)
    code, out, err = cli(module.main, ["--chars", "5000", "--sizes", "300"], capsys)
    assert code == 0 and not err, err
    text = generate_stories(5000, module.DataConfig.stories_seed)[0]
    present = set(WordTokenizer.split(text))
    values, everyone = [v for pool in ATTRIBUTE_POOLS.values() for v in pool], FEMALE_NAMES + MALE_NAMES
    attributes, names = [v for v in values if " " + v in present], [n for n in everyone if " " + n in present]
    assert 0 < len(attributes) < len(values) and 0 < len(names) < len(everyone) and len(text) != 5000
    assert f"(the corpus: {len(text):,} characters," in out
    assert f"({len(values) - len(attributes)} attribute values and {len(everyone) - len(names)} names do not" in out
    assert f"(of {len(attributes)}) | names in > 1 token (of {len(names)}) |" in out
    bpe = module.build_tokenizer("bpe", text, bpe_vocab_size=300)
    split = [sum(len(bpe.encode(" " + w)) > 1 for w in words) for words in (attributes, names)]
    assert split[0] != split[1] and f"| bpe, 300 | 300 | {len(bpe.encode(text)):,} | {split[0]} | {split[1]} |" in out
    assert "(gpt2 left out: offline)" in out
    # every name there, some values not: still said (the names the table asks for made those of the corpus)
    monkeypatch.setattr(module, "stories", SimpleNamespace(
        generate_stories=generate_stories, ATTRIBUTE_POOLS=ATTRIBUTE_POOLS,
        FEMALE_NAMES=tuple(n for n in FEMALE_NAMES if n in names),
        MALE_NAMES=tuple(n for n in MALE_NAMES if n in names)))
    out = cli(module.main, ["--chars", "5000", "--sizes", "300"], capsys)[1]
    assert f"({len(values) - len(attributes)} attribute values and 0 names do not occur" in out


def test_tokenization_table_marks_the_default_bpe_size(capsys, monkeypatch):
    """docs/results.md's row `bpe, 1024 (the default)` was printed `bpe, 1024`: the size that is
    data.bpe_vocab_size's default is marked (here made 300, which a small corpus learns at once)."""
    module = script("tokenization_table")
    monkeypatch.setattr(module.DataConfig, "bpe_vocab_size", 300)
    offline_gpt2(module, monkeypatch)
    code, out, err = cli(module.main, ["--chars", "5000", "--sizes", "300,320"], capsys)
    assert code == 0 and not err, err
    assert "| bpe, 300 (the default) | 300 |" in out and "| bpe, 320 | 320 |" in out


def test_tokenization_table_counts_the_default_seeds_corpus(capsys, monkeypatch):
    """The table measured the corpus of another seed than data.stories_seed's, the one data.prepare
    generates and the default run trains on."""
    from data.stories import generate_stories
    module = script("tokenization_table")
    offline_gpt2(module, monkeypatch)
    code, out, err = cli(module.main, ["--chars", "3000", "--sizes", "257"], capsys)
    assert code == 0 and not err, err
    text, _ = generate_stories(3000, module.DataConfig.stories_seed)
    word = module.build_tokenizer("word", text)
    assert f"| word | {word.vocab_size:,} | {len(word.encode(text)):,} |" in out, out


# ---- ablation_table ----


def ablation_result() -> dict:
    """The figures of a probe.py --ablate output that ablation_table reads (2 layers x 2 heads)."""
    head = {"layer": 1, "head": 0, "drop": 0.2}
    return {"n_layer": 2, "n_head": 2, "ablation": {
        "drop": {"zero": [[0, 0], [0.2, 0]], "mean": [[0, 0], [0.1, 0]]}, "references": 10, "baseline": 0.9,
        "most_attention": {"layer": 1, "head": 0, "attention": 0.7, "drop_zero": 0.2, "drop_mean": 0.1,
                           "rank_zero": "1", "rank_mean": "1-2"},  # (texts, as coreference.rank_among writes them)
        "median_drop": {"zero": 0.0, "mean": 0.0}, "most_harmful": {"zero": head, "mean": head},
        "together": [{"what": "top two by attention", "heads": ["1.0", "0.1"], "drop": {"zero": 0.3, "mean": 0.2}}]}}


def damaged(**changes) -> dict:
    result = ablation_result()
    result["ablation"].update(changes)
    return result


@pytest.mark.parametrize("content, culprit", [
    (None, "cannot read it"),
    ("", "not the JSON line"),
    ("probe tables\nnot json", "not the JSON line"),
    ("[" * 100_000, "not the JSON line"),
    ("[1, 2]", "not the JSON line"),
    ('{"ablation": 5}', "no per-head ablation"),
    ('{"ablation": {"drop": 1, "most_attention": 1}}', "lacks a figure"),
    ('{"ablation": {"drop": 1}}', "no reference with its antecedent's attribute inside the model's window"),
    (json.dumps(damaged(baseline="0.9")), "accuracy"),
    (json.dumps(damaged(baseline=[0.9])), "accuracy"),
    (json.dumps(damaged(baseline=10 ** 400)), "accuracy"),
    (json.dumps(damaged(together=[{"what": "top two by attention", "heads": [1, 2]}])), "lacks a figure"),
    (json.dumps(damaged(most_harmful=None)), "lacks a figure"),
    (json.dumps({**ablation_result(), "n_layer": "2"}), "n_layer and n_head are '2' and 2, not counts"),
    (json.dumps({**ablation_result(), "n_head": 10 ** 9}), "not counts of 1 to 10000"),
    (json.dumps(damaged(most_harmful={"zero": {"layer": "<b>|x", "head": 0, "drop": 0.2},
                                      "mean": {"layer": 1, "head": 0, "drop": 0.2}})), "names a head"),
    (json.dumps(damaged(together=[{"what": "top two by attention", "heads": ["1.0", "a|b"],
                                   "drop": {"zero": 0.3, "mean": 0.2}}])), "names a head"),
    (json.dumps({**ablation_result(), "n_layer": True}), "n_layer and n_head are True and 2, not counts"),
    (json.dumps(damaged(most_attention={**ablation_result()["ablation"]["most_attention"], "head": 2})),
     "not one of its 2 x 2 heads"),
    (json.dumps(damaged(most_attention={**ablation_result()["ablation"]["most_attention"], "layer": 2})),
     "not one of its 2 x 2 heads"),
    (json.dumps(damaged(most_attention={**ablation_result()["ablation"]["most_attention"], "rank_zero": "0"})),
     "a rank"),  # (ranks count from 1)
    (json.dumps(damaged(most_attention={**ablation_result()["ablation"]["most_attention"], "rank_mean": "1-2 |"})),
     "a rank"),
    (json.dumps(damaged(most_attention={**ablation_result()["ablation"]["most_attention"], "rank_zero": "5"})),
     "a rank"),  # (of 4 heads)
    (json.dumps(damaged(most_attention={**ablation_result()["ablation"]["most_attention"], "rank_mean": "3-2"})),
     "a rank"),
], ids=lambda v: v[:24] if isinstance(v, str) else None)
def test_ablation_table_refuses_a_bad_saved_output(tmp_path, capsys, monkeypatch, content, culprit):
    module = script("ablation_table")
    monkeypatch.setattr(module, "run", no_long_work)
    path = tmp_path / "seed1.json"
    if content is not None:
        path.write_text(content)
    one_line(cli(module.main, [path], capsys), str(path), culprit)


def test_ablation_table_mean_row_of_runs_without_pairs(tmp_path, capsys):
    """Where no run has a pair (fewer than two heads matter), the runs' rows show `-`; the mean row
    showed ` / ` in those columns."""
    (tmp_path / "seed1.json").write_text(json.dumps(damaged(together=[])))
    code, out, err = cli(script("ablation_table").main, [tmp_path / "seed1.json"], capsys)
    assert code == 0 and not err
    run_row, mean_row = (line for line in out.splitlines() if line.startswith(("| seed1 |", "| mean ± sd")))
    assert run_row.endswith("| - | - |") and mean_row.endswith("| - | - |")


def test_ablation_table_given_its_own_out_folder_names_the_saved_outputs(tiny_stories_run, tmp_path, capsys,
                                                                         monkeypatch):
    """The --out folder of an earlier table, given as a run, was told `no checkpoint in DIR (expected best.pt or
    ckpt.pt): train first`, which it needs no more: its saved outputs are read, given as files. A run that kept
    its probe outputs beside one checkpoint (ckpt.pt, no best.pt) is still a run, probed."""
    module = script("ablation_table")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "probe_seed1.txt").write_text("probe of seed1\n")
    one_line(cli(module.main, [tmp_path / "tables"], capsys),
             f"{tmp_path / 'tables'} holds saved probe outputs, not a run: give the files, e.g. python -m "
             f"scripts.ablation_table {tmp_path / 'tables'}/probe_*.txt")
    monkeypatch.setattr(module, "run", no_long_work)
    shutil.copy(tiny_stories_run / "best.pt", tmp_path / "tables" / "ckpt.pt")
    with pytest.raises(AssertionError, match="long work started"):
        module.main([str(tmp_path / "tables")])


def test_page_faults_without_faults_kept_is_no_ratio(capsys, monkeypatch):
    """keep_freed_memory() with no fault at all printed "ratio 9200.0x fewer": the other count over 1."""
    module = script("page_faults")
    monkeypatch.setattr(module, "measure", lambda mode, steps: (0.0 if mode == "keep" else 9200.0, 0.1))
    code, out, err = cli(module.main, ["--reps", "1"], capsys)
    assert code == 0 and not err
    assert "no faults at all with keep_freed_memory(); step time 1.00x" in out and "9200.0x" not in out
    monkeypatch.setattr(module, "measure", lambda mode, steps: (0.5 if mode == "keep" else 9200.0, 0.1))
    assert "ratio 18400.0x fewer" in cli(module.main, ["--reps", "1"], capsys)[1]
    # keep_freed_memory() faulting more (a busy machine): "ratio 0.0x fewer" before
    monkeypatch.setattr(module, "measure", lambda mode, steps: (1.0 if mode == "keep" else 0.0, 0.1))
    assert "no faults at all with the glibc defaults" in cli(module.main, ["--reps", "1"], capsys)[1]
    monkeypatch.setattr(module, "measure", lambda mode, steps: (30.0 if mode == "keep" else 10.0, 0.1))
    assert "ratio 3.0x more with keep_freed_memory()" in cli(module.main, ["--reps", "1"], capsys)[1]
    # equal counts: "ratio 1.0x fewer", under "medians of 1 processes each"; the modes always went keep first
    order = []
    monkeypatch.setattr(module, "measure", lambda mode, steps: order.append(mode) or (4096.0, 0.1))
    out = cli(module.main, ["--reps", "1"], capsys)[1]
    assert "the same count with both" in out and "fewer" not in out and "medians of 1 process each" in out
    order.clear()
    cli(module.main, ["--reps", "2"], capsys)
    assert order == ["keep", "glibc defaults", "glibc defaults", "keep"]  # each first in turn


def test_ablation_table_reads_a_good_saved_output(tmp_path, capsys):
    (tmp_path / "seed1.json").write_text("tables\n" + json.dumps(ablation_result()))
    code, out, err = cli(script("ablation_table").main, [tmp_path / "seed1.json"], capsys)
    assert code == 0 and not err and "| seed1 | 90.0% | 1.0 (70.0%) |" in out


def test_ablation_table_keeps_zero_and_mean_ablation_apart(tmp_path, capsys):
    """Figures of one kind of ablation shown as the other's: the best head's mean-ablation drop that
    read its zero-ablation drop, the median head's zero-ablation drop its mean-ablation one, and the
    count of runs whose most-attended head hurts most taken from mean ablation, not zero."""
    result = damaged(median_drop={"zero": 0.01, "mean": 0.02},
                     most_harmful={"zero": {"layer": 1, "head": 0, "drop": 0.2},
                                   "mean": {"layer": 0, "head": 1, "drop": 0.15}})
    (tmp_path / "seed1.json").write_text(json.dumps(result))
    code, out, err = cli(script("ablation_table").main, [tmp_path / "seed1.json"], capsys)
    assert code == 0 and not err, err
    lines = out.splitlines()
    assert lines[2] == ("| seed1 | 90.0% | 1.0 (70.0%) | 20.0 / 10.0 | 1.0 / 2.0 | 1 / 1-2 of 4 "
                        "| 1.0 (20.0) / 0.1 (15.0) | 1.0+0.1: 30.0 / 20.0 | - |")
    assert lines[3] == ("| mean ± sd (1 run) | 90.0 | 70.0 | 20.0 / 10.0 | 1.0 / 2.0 | | 20.0 / 15.0 "
                        "| 30.0 / 20.0 | - |")
    assert "hurts most (zero ablation; a tie counts) in 1 of 1 runs" in out
    assert json.loads(lines[-1])["most_attention_is_most_harmful"] == 1


@pytest.mark.parametrize("args, culprits", [
    (["RUN", "typo_run"], ["run directory or checkpoint not found", "typo_run"]),
    (["RUN", "empty"], ["no checkpoint in", "empty"]),
    (["RUN", "damaged.json"], ["damaged.json", "not the JSON line"]),
    (["RUN", "--stories", "0"], ["--stories=0 must be in [1, 10,000]"]),
    (["RUN", "--device", "gpu"], ["--device='gpu' must be auto, cpu"]),
])
def test_ablation_table_checks_every_run_and_flag_before_the_first_probe(tiny_stories_run, tmp_path, capsys,
                                                                         monkeypatch, args, culprits):
    """A typo in the second RUN (or a bad --stories) was found after the first run's probe: minutes."""
    module = script("ablation_table")
    monkeypatch.setattr(module, "run", no_long_work)
    (tmp_path / "RUN").mkdir()
    shutil.copy(tiny_stories_run / "best.pt", tmp_path / "RUN" / "ckpt.pt")  # a checkpoint: checked, never probed
    (tmp_path / "empty").mkdir()
    (tmp_path / "damaged.json").write_text("probe tables\nnot json")
    args = [str(tmp_path / a) if a in ("RUN", "typo_run", "empty", "damaged.json") else a for a in args]
    one_line(cli(module.main, args, capsys), *culprits)


@pytest.mark.parametrize("out", ["FILE", ""])
def test_ablation_table_refuses_an_out_that_is_a_file_before_probing(tmp_path, capsys, monkeypatch, out):
    module = script("ablation_table")
    monkeypatch.setattr(module, "run", no_long_work)
    (tmp_path / "FILE").write_text("x")
    out = str(tmp_path / "FILE") if out == "FILE" else out
    one_line(cli(module.main, [tmp_path / "run", "--out", out], capsys), "--out")
    assert (tmp_path / "FILE").read_text() == "x"


def test_the_scripts_outputs_never_overwrite_a_file_of_the_users(tiny_stories_run, tmp_path, capsys, monkeypatch):
    """ablation_table --out DIR wrote DIR/probe_LABEL.txt over a user's notes of that name, after the
    probe; explorer_bench --out DIR its pages over a user's explorer_bench_init.html. Refused before
    any work; their own earlier outputs are replaced as before."""
    module = script("ablation_table")
    monkeypatch.setattr(module, "run", no_long_work)
    (tmp_path / "run").mkdir()
    shutil.copy(tiny_stories_run / "best.pt", tmp_path / "run" / "ckpt.pt")  # a checkpoint: checked, never probed
    (tmp_path / "abl").mkdir()
    (tmp_path / "abl" / "probe_run.txt").write_text("MY NOTES")
    one_line(cli(module.main, [str(tmp_path / "run"), "--out", str(tmp_path / "abl")], capsys),
             "--out: it would overwrite", "probe_run.txt, which this script did not write")
    assert (tmp_path / "abl" / "probe_run.txt").read_text() == "MY NOTES"
    (tmp_path / "abl" / "probe_run.txt").write_text("probe of run: 1 layer x 1 head ...")  # an earlier output: taken
    with pytest.raises(AssertionError, match="long work started"):
        module.main([str(tmp_path / "run"), "--out", str(tmp_path / "abl")])
    # two runs whose labels differ only in a '/' and a '_' (a_b/c and a/b_c beside z/c) share one file name: the
    # second run's output was written over the first's, the table's three rows resting on two kept outputs
    for folder in ("a_b/c", "a/b_c", "z/c"):
        (tmp_path / "col" / folder).mkdir(parents=True)
        shutil.copy(tiny_stories_run / "best.pt", tmp_path / "col" / folder / "ckpt.pt")
    one_line(cli(module.main, [*(str(tmp_path / "col" / f) for f in ("a_b/c", "a/b_c", "z/c")),
                               "--out", str(tmp_path / "abl2")], capsys),
             "a_b/c and ", "b_c would both keep their probe output in ", "probe_a_b_c.txt")
    bench = script("explorer_bench")
    monkeypatch.setattr(bench, "generate_stories", no_long_work)
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "explorer_bench_sharp.html").write_text("<html>mine</html>")
    one_line(cli(bench.main, ["--out", str(tmp_path / "pages")], capsys), "explorer_bench_sharp.html, which this")
    assert (tmp_path / "pages" / "explorer_bench_sharp.html").read_text() == "<html>mine</html>"


# ---- page_faults, explorer_bench, gpu_table ----


@pytest.mark.parametrize("args, culprit", [
    (["--steps", "0", "--reps", "1"], "--steps=0"), (["--steps", "-1"], "--steps=-1"),
    (["--reps", "0"], "--reps=0"), (["--reps", "-2"], "--reps=-2"), (["--steps", "10000000"], "--steps=10000000"),
    (["--reps", "1000000"], "--reps=1000000"),
])
def test_page_faults_refuses_counts_out_of_range_at_once(capsys, monkeypatch, args, culprit):
    module = script("page_faults")
    monkeypatch.setattr(module, "measure", no_long_work)
    one_line(cli(module.main, args, capsys), culprit)


@pytest.mark.parametrize("out, culprit", [("FILE", "is a file"), ("FILE/sub", "cannot be created"),
                                          ("", "empty path")])
def test_explorer_bench_refuses_an_out_that_is_no_folder(tmp_path, capsys, monkeypatch, out, culprit):
    module = script("explorer_bench")
    monkeypatch.setattr(module, "generate_stories", no_long_work)
    (tmp_path / "FILE").write_text("x")
    out = out.replace("FILE", str(tmp_path / "FILE"))
    one_line(cli(module.main, ["--out", out], capsys), "--out", culprit)


def test_explorer_bench_sizes_are_the_ones_docs_attention_quotes(tmp_path, capsys, monkeypatch):
    """The page sizes docs/attention.md quotes are the ones the script prints: a change to the page's
    script had left them 10 bytes too large."""
    module = script("explorer_bench")
    monkeypatch.setattr(module, "render_ms", lambda page, out, name="": None)  # (sizes only: no browser)
    module.measure(tmp_path)
    printed = json.loads(capsys.readouterr().out.splitlines()[-1])
    doc = " ".join((ROOT / "docs" / "attention.md").read_text().split())
    quoted = re.search(r"The pages are ([\d,]+) and ([\d,]+) bytes", doc)
    assert quoted, "docs/attention.md no longer quotes the explorer's sizes as this test reads them"
    assert [int(q.replace(",", "")) for q in quoted.groups()] == [printed["init_bytes"], printed["sharp_bytes"]]


def test_explorer_bench_times_every_single_head_and_all_heads(tmp_path):
    """The timed renders alternated all heads with `i % 4` on the even i: heads 0 and 2, never 1 or 3."""
    browser = next((shutil.which(b) for b in ("chromium", "chromium-browser") if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no headless browser (chromium) found")
    module = script("explorer_bench")
    text = "the cat sat on the mat and the dog sat too"
    tok = module.WordTokenizer.from_text(text)
    torch.manual_seed(0)
    model = module.GPT(module.ModelConfig(block_size=16, n_layer=1, n_head=4, n_embd=16,
                                          vocab_size=tok.vocab_size)).eval()
    page = module.attention_html.explorer_html(module.attention_html.explorer_data(model, tok, tok.encode(text)))
    record = ("<script>const heads = new Set(); const drawn = render; "
              "render = () => { heads.add(String(state.head)); drawn(); };</script>")
    report = '<script>document.body.dataset.heads = [...heads].sort().join(",");</script></body>'
    path = tmp_path / "timed.html"
    path.write_text(page.replace("</body>", record + module.TIMING.replace("</body>", report)), encoding="utf-8")
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert 'data-heads="0,1,2,3,all"' in done.stdout, re.findall(r'data-heads="[^"]*"', done.stdout)


def stand_in_browser(tmp_path, monkeypatch, script_body: str):
    """explorer_bench with `chromium` a shell script of `script_body`, and $TMPDIR a folder of its own ->
    (the module, that folder)."""
    module = script("explorer_bench")
    browser, user_tmp = tmp_path / "chromium", tmp_path / "tmp"
    browser.write_text("#!/bin/sh\n" + script_body)
    browser.chmod(0o755)
    user_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(user_tmp))
    monkeypatch.setattr(module.tempfile, "tempdir", None)  # (read $TMPDIR again)
    monkeypatch.setattr(module.shutil, "which", lambda name: str(browser) if name == "chromium" else None)
    return module, user_tmp


def test_explorer_bench_keeps_the_browsers_files_in_a_folder_it_removes(tmp_path, monkeypatch):
    """Chromium killed with the script (Ctrl-C, kill) left its profile folder in $TMPDIR, one per kill.
    Its profile and temp files now go in a folder of the script's, removed whatever happens. (The
    stand-in browser leaves its files, as a killed Chromium does.)"""
    module, user_tmp = stand_in_browser(tmp_path, monkeypatch, 'mkdir "$TMPDIR/org.chromium.Chromium.x"\n'
                                        'for a; do case "$a" in --user-data-dir=*) own="${a#*=}";; esac; done\n'
                                        '[ -d "$own" ] || exit 3\ntouch "$own/Local State"\n'  # (else ~/.config's)
                                        'echo "<p>RENDER_MS=1.5</p>"\n')
    assert module.render_ms("<body></body>", tmp_path) == 1.5
    assert list(user_tmp.iterdir()) == []
    assert "RENDER_MS=" in (tmp_path / "explorer_bench.html").read_text()  # (the page it rendered times itself)
    (tmp_path / "quiet").mkdir()  # a browser whose page reported no time: no time, not 0
    module, _ = stand_in_browser(tmp_path / "quiet", monkeypatch, 'echo "<p>no time</p>"\n')
    assert module.render_ms("<body></body>", tmp_path) is None


def test_explorer_bench_says_when_the_browser_times_out(tmp_path, monkeypatch):
    """A browser that does not finish the page (a busy machine): one line, not subprocess's traceback; the
    browser ended, its folder gone."""
    module, user_tmp = stand_in_browser(tmp_path, monkeypatch, "exec sleep 30\n")
    monkeypatch.setattr(module, "BROWSER_TIMEOUT_S", 0.5)
    started = time.monotonic()
    with pytest.raises(UserError, match=r"chromium did not render .*explorer_bench\.html within 0.5 s"):
        module.render_ms("<body></body>", tmp_path)
    assert time.monotonic() - started < 10 and list(user_tmp.iterdir()) == []


def test_explorer_bench_ends_the_browsers_helpers_before_removing_their_folder(tmp_path, monkeypatch):
    """Ctrl-C while Chromium rendered: its helper processes, which the signal reached too, wrote on into its
    profile folder as the script removed it, and the folder stayed (1 time in 4). The browser runs in a process
    group of its own, ended and waited for before the folder goes. (The stand-in's helper writes for ever.)"""
    module, user_tmp = stand_in_browser(tmp_path, monkeypatch,
                                        'for a; do case "$a" in --user-data-dir=*) dir="${a#*=}";; esac; done\n'
                                        '[ -d "$dir" ] || exit 9\n'  # (never "/f..." where no folder is given)
                                        '(while :; do touch "$dir/f$$$(date +%N)"; done) > /dev/null 2>&1 &\n'
                                        'sleep 0.3\necho "<p>RENDER_MS=2.5</p>"\n')
    assert module.render_ms("<body></body>", tmp_path) == 2.5
    time.sleep(0.3)  # (a helper left running would write its folder back)
    assert list(user_tmp.iterdir()) == []


@pytest.mark.parametrize("csv", ["step,val_loss\n100,1.4\n", "step,val_loss,elapsed_s\n100,1.4,\n"],
                         ids=["no elapsed_s column", "an empty elapsed_s cell"])
def test_gpu_table_reports_a_damaged_baby_run_as_a_row(tmp_path, capsys, csv):
    from scripts import gpu_table
    (tmp_path / "baby").mkdir()
    (tmp_path / "baby" / "metrics.csv").write_text(csv)
    (tmp_path / "status").write_text("baby=exit 0\n")
    code, out, err = cli(gpu_table.main, [tmp_path, "--device", "cpu"], capsys)
    assert code == 0 and not err
    assert f"| baby GPT: time to val 1.47 | damaged: {tmp_path / 'baby' / 'metrics.csv'} has no elapsed time" in out


def test_gpu_table_reports_a_figure_too_large_for_a_float_as_damaged(tmp_path, capsys):
    """tokens_per_s 10**400 (valid JSON) ended the table in an OverflowError traceback; it never fails on a damaged
    file, its docstring says."""
    from scripts import gpu_table
    (tmp_path / "status").write_text("fp32=exit 0\ndecode=exit 0\n")
    (tmp_path / "fp32.json").write_text('{"train": {"float32": {"tokens_per_s": 1' + "0" * 400 + ', "mfu": 0.1}}}')
    (tmp_path / "decode.json").write_text('{"generate": {"speedup": 1' + "0" * 400 + ', "cached_tokens_per_s": 1}}')
    code, out, err = cli(gpu_table.main, [tmp_path, "--device", "cpu"], capsys)
    assert code == 0 and not err and out.count("figures are missing or damaged") >= 2, out


@pytest.mark.parametrize("name", ["status", "decode.json"])
def test_gpu_table_refuses_a_file_too_large_to_be_the_checks(tmp_path, capsys, name):
    """A 100 MB status file of NULs was read whole (424 MB at the peak), then gave a table of stages
    that "did not run", exit 0."""
    from scripts import gpu_table
    (tmp_path / "status").write_text("decode=exit 0\n")
    with open(tmp_path / name, "ab") as f:
        f.truncate(gpu_table.MAX_FILE + 1)
    one_line(cli(gpu_table.main, [tmp_path, "--device", "cpu"], capsys), str(tmp_path / name), "not a file")


@pytest.mark.parametrize("damage", ["nested", "fifo"])
def test_gpu_table_reads_a_stage_json_nested_deep_or_a_fifo_as_damaged(tmp_path, capsys, damage):
    """A decode.json of '[' x 100,000 ended in RecursionError's traceback (the table promises never to fail on a
    damaged file); a FIFO in its place was waited on for good."""
    from scripts import gpu_table
    (tmp_path / "status").write_text("decode=exit 0\n")
    if damage == "nested":
        (tmp_path / "decode.json").write_text("[" * 100_000)
    else:
        os.mkfifo(tmp_path / "decode.json")
    code, out, err = cli(gpu_table.main, [tmp_path, "--device", "cpu"], capsys)
    assert code == 0 and not err
    assert "| decoding, KV cache | exit 0, but its figures are missing or damaged |" in out


def test_gpu_table_keeps_a_device_name_with_a_bar_or_a_line_break_in_its_cell(tmp_path, capsys):
    """`--device 'A|B'` split the first row into three cells; a line break ended the table there."""
    from scripts import gpu_table
    (tmp_path / "status").write_text("tests=exit 0\n")
    code, out, err = cli(gpu_table.main, [tmp_path, "--device", "A|B\nC"], capsys)
    assert code == 0 and not err
    assert "\n| device | A\\|B C |\n" in out


def test_reproduce_stories_lists_the_first_20_unknown_words(tmp_path, monkeypatch):
    """unknown_examples: the sorted first 20 of the sampled words not in the corpus (not all, not fewer)."""
    from scripts import reproduce
    unknown = [f"Zorb{a}{b}" for a in "abcde" for b in "abcdef"]  # 30 words that no story holds
    calls = []
    monkeypatch.setattr(reproduce, "run", stories_children(calls, {0: "had " * 1500,
                                                                   1: " ".join(unknown * 50) + " "}))
    result = reproduce.stories(tmp_path / "run", ["data.stories_chars=20000"])
    assert result["unknown_examples"] == sorted(unknown)[:20]


def test_reproduce_names_a_failed_childs_last_error_line_without_its_prefix():
    from scripts import reproduce
    assert reproduce.child_error_line(b"a warning\nerror: the config is bad\n\n") == "the config is bad"
    assert reproduce.child_error_line("") == "no message"


def test_reproduce_keeps_every_set(tmp_path, capsys, monkeypatch):
    """`--set model.n_layer=0 --set train.seed=1`: the second --set replaced the first, which was
    dropped without a word (the run trained another config); now both are read, and the bad one refused."""
    from scripts import reproduce
    monkeypatch.setattr(reproduce, "run", no_long_work)
    one_line(cli(reproduce.main, ["stories", "--set", "model.n_layer=0", "--set", "train.seed=1"], capsys),
             "model.n_layer=0")


def test_ablation_table_refuses_a_run_given_twice(tmp_path, capsys):
    """The same saved output twice: `mean ± sd (2 runs) | 80.0 ± 0.0`, one run counted as two seeds."""
    (tmp_path / "seed1.json").write_text("tables\n" + json.dumps(ablation_result()))
    for args in ([tmp_path / "seed1.json", tmp_path / "seed1.json"],
                 [tmp_path / "seed1.json", tmp_path / "." / "seed1.json"]):
        one_line(cli(script("ablation_table").main, args, capsys), "seed1.json is given twice", "give it once")


def test_ablation_table_refuses_an_empty_run_at_once(tiny_stories_run, capsys, monkeypatch):
    """'' (an unset $RUN) from inside a run folder passed the checks as '.', printed `probing  ...`, then
    failed in probe.py's own refusal; probe.py, compare.py and sample.py refuse it up front."""
    module = script("ablation_table")
    monkeypatch.setattr(module, "run", no_long_work)
    monkeypatch.chdir(tiny_stories_run)
    one_line(cli(module.main, [""], capsys), "argument runs: an empty path names no file or folder")


def test_ablation_table_knows_a_run_by_its_checkpoint(tiny_stories_run, tmp_path, capsys, monkeypatch):
    """RUN and RUN/best.pt (the checkpoint probe.py reads for RUN), or RUN and a saved probe output of
    RUN, were two runs: `mean ± sd (2 runs) | 0.0 ± 0.0`, an interval built from one checkpoint."""
    module = script("ablation_table")
    monkeypatch.setattr(module, "run", no_long_work)
    run = str(tiny_stories_run)
    one_line(cli(module.main, [run, f"{run}/best.pt"], capsys), "best.pt is given twice", f"as {run}")
    (tmp_path / "saved.json").write_text(json.dumps({**ablation_result(), "run": run}))
    one_line(cli(module.main, [tmp_path / "saved.json", run], capsys), f"{run} is given twice", "saved.json")
    # RUN/ckpt.pt (not the checkpoint RUN stands for) and a copy of RUN: the same run, known by its run id
    one_line(cli(module.main, [run, f"{run}/ckpt.pt"], capsys), "ckpt.pt is given twice", f"as {run}")
    import shutil
    shutil.copytree(run, tmp_path / "copy")
    one_line(cli(module.main, [run, str(tmp_path / "copy")], capsys), "copy is given twice", f"as {run}")


def test_ablation_table_refuses_a_run_not_of_the_stories_before_any_probe(tiny_stories_run, tmp_path, capsys,
                                                                          monkeypatch):
    """A run trained on other data came to light at its own probe, after the probes of the runs
    before it (minutes each at the default --stories 100), the table lost."""
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    module = script("ablation_table")
    monkeypatch.setattr(module, "run", no_long_work)
    ckpt = load_checkpoint(tiny_stories_run / "best.pt")
    ckpt["config"]["data"]["dataset"] = "shakespeare.txt"
    (tmp_path / "other").mkdir()
    save_checkpoint(tmp_path / "other" / "best.pt", ckpt)
    one_line(cli(module.main, [tiny_stories_run, tmp_path / "other"], capsys),
             f"{tmp_path / 'other'} was trained on data.dataset='shakespeare.txt'", "stories corpus")


@pytest.mark.parametrize("bad", ["device", "empty"])
def test_ablation_table_refuses_a_damaged_checkpoint_or_a_device_before_any_probe(tiny_stories_run, tmp_path,
                                                                                  capsys, monkeypatch, bad):
    """/dev/zero, or a run whose best.pt is 0 bytes, passed the checks (unreadable, so no dataset to
    check) and failed at its own probe, after the probes of the runs before it."""
    module = script("ablation_table")
    monkeypatch.setattr(module, "run", no_long_work)
    target = Path("/dev/zero") if bad == "device" else tmp_path / "empty"
    if bad == "empty":
        target.mkdir()
        (target / "best.pt").write_bytes(b"")
    one_line(cli(module.main, [tiny_stories_run, target], capsys), str(target))


def test_ablation_table_escapes_a_bar_in_a_runs_name(tmp_path, capsys):
    """A run named s|x broke its row into one column too many (compare.py escapes it)."""
    (tmp_path / "s|x.json").write_text(json.dumps(ablation_result()))
    code, out, err = cli(script("ablation_table").main, [tmp_path / "s|x.json"], capsys)
    assert code == 0 and "| s\\|x | 90.0% |" in out, err


def test_ablation_table_labels_a_whole_path_once(tmp_path):
    from scripts.ablation_table import labels
    assert labels([str(tmp_path / "a.json"), str(tmp_path / "a.txt")])[0] == str(tmp_path / "a")  # not '//tmp/...'


def test_default_run_table_refuses_a_run_in_two_outputs(tmp_path, capsys):
    """Two outputs holding the same run name: the last won, half the runs lost without a word."""
    for name, wall in (("one.txt", 100), ("two.txt", 300)):
        (tmp_path / name).write_text(json.dumps({"runs": {"current default, seed 1337": {**RUN, "wall_s": wall}}}))
    one_line(cli(script("default_run").main, ["--table", tmp_path / "one.txt", tmp_path / "two.txt"], capsys),
             "'current default, seed 1337' is in both", "one.txt", "two.txt")


def test_gpu_table_refuses_a_missing_out_and_says_exit_0_without_figures(tmp_path, capsys):
    """A typo in OUT printed a table of stages that "did not run", exit 0; a stage that exited 0 but
    left damaged figures read `failed (exit 0)`."""
    from scripts import gpu_table
    one_line(cli(gpu_table.main, [tmp_path / "typo", "--device", "cpu"], capsys), "typo is not a folder")
    (tmp_path / "status").write_text("decode=exit 0\n")
    (tmp_path / "decode.json").write_text('{"tinygpt_tok_s": "fast"}')
    code, out, err = cli(gpu_table.main, [tmp_path, "--device", "cpu"], capsys)
    assert code == 0 and "failed (exit 0)" not in out and "exit 0, but its figures are missing or damaged" in out


def test_explorer_bench_keeps_both_pages(tmp_path, monkeypatch, capsys):
    """`--out DIR` ("where to write the pages") held one page: the sharp one overwrote the first."""
    module = script("explorer_bench")
    browser = tmp_path / "bin" / "chromium"
    browser.parent.mkdir()
    browser.write_text('#!/bin/sh\necho "RENDER_MS=0.00"\n')  # (a time under 0.005 ms is 0.0 ms, not "no time")
    browser.chmod(0o755)
    monkeypatch.setattr(module.shutil, "which", lambda name: str(browser) if name == "chromium" else None)
    pages = tmp_path / "pages"
    code, out, err = cli(module.main, ["--out", pages], capsys)
    assert code == 0 and "one render: 0.0 ms" in out, err
    assert sorted(p.name for p in pages.iterdir()) == ["explorer_bench_init.html", "explorer_bench_sharp.html"]


def test_explorer_bench_writes_its_pages_without_a_browser_and_leaves_no_temp_folder(tmp_path, monkeypatch, capsys):
    """Without Chromium, `--out DIR` ("where to write the pages") stayed empty; without --out, each call
    left a tinygpt-explorer-* folder in the temp folder, never named."""
    module = script("explorer_bench")
    monkeypatch.setattr(module.shutil, "which", lambda name: None)
    code, out, err = cli(module.main, ["--out", tmp_path / "pages" / "new"], capsys)  # (its parent made too)
    assert code == 0 and "no time (no browser" in out, err
    pages = sorted(p.name for p in (tmp_path / "pages" / "new").iterdir())
    assert pages == ["explorer_bench_init.html", "explorer_bench_sharp.html"]
    monkeypatch.setattr(module.tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    assert cli(module.main, [], capsys)[0] == 0
    assert not list((tmp_path / "temp").iterdir())


def test_page_faults_reports_medians_and_keeps_step_time_against_the_defaults(capsys, monkeypatch):
    """A mean in place of a median (one slow, faulting process moving the figure), or the step time's
    ratio inverted (keep_freed_memory() at half the defaults' step time read `2.00x`)."""
    module = script("page_faults")
    figures = {"keep": iter([(10.0, 0.1), (70.0, 0.7), (10.0, 0.1)]),
               "glibc defaults": iter([(400.0, 0.2), (400.0, 0.2), (1000.0, 0.5)])}
    monkeypatch.setattr(module, "measure", lambda mode, steps: next(figures[mode]))
    code, out, err = cli(module.main, ["--reps", "3"], capsys)
    assert code == 0 and not err, err
    res = json.loads(out.splitlines()[-1])
    assert (res["keep"]["faults_per_step"], res["glibc defaults"]["faults_per_step"]) == (10.0, 400.0)
    assert (res["keep"]["ms_per_step"], res["glibc defaults"]["ms_per_step"]) == pytest.approx((100, 200))
    assert "ratio 40.0x fewer; step time 0.50x" in out, out
    assert "runs: 10, 70, 10)" in out and "runs: 400, 400, 1,000)" in out  # (each run in the order it ran)
    monkeypatch.setattr(module, "measure", lambda mode, steps: (1.0, 0.1))
    assert cli(module.main, ["--steps", "10000", "--reps", "100"], capsys)[0] == 0  # (the largest of each)


def test_page_faults_reads_its_childs_two_figures_and_names_a_failed_one(monkeypatch):
    import types
    module = script("page_faults")

    def child(code: int, out: str, err: str):
        return types.SimpleNamespace(run=lambda *a, **k: subprocess.CompletedProcess(a, code, out, err))
    monkeypatch.setattr(module, "subprocess", child(0, "1234.5 0.25\n", ""))
    assert module.measure("keep", 5) == (1234.5, 0.25)  # (faults per step, then seconds per step)
    monkeypatch.setattr(module, "subprocess", child(1, "", "Traceback ...\nAssertionError: not glibc\n"))
    with pytest.raises(UserError, match=r"^the 'keep' measurement failed \(exit 1\): AssertionError: not glibc$"):
        module.measure("keep", 5)


def gpu_out(folder: Path, status: str) -> None:
    """An OUT of scripts/gpu_check.sh: bench.py's JSON of TF32 off and of TF32 on + bfloat16, each
    its own figures, and the baby GPT's evals, under 1.47 first at step 500, then over, then under."""
    (folder / "fp32.json").write_text(json.dumps({"train": {"float32": {"tokens_per_s": 1000, "mfu": 0.1}}}))
    (folder / "tf32_bf16.json").write_text(json.dumps({"train": {"float32": {"tokens_per_s": 3000, "mfu": 0.3},
                                                                 "bfloat16": {"tokens_per_s": 5000, "mfu": 0.5}}}))
    (folder / "baby").mkdir(exist_ok=True)
    (folder / "baby" / "metrics.csv").write_text("step,val_loss,elapsed_s\n250,1.6,30\n500,1.46,60\n750,1.5,90\n"
                                                 "1000,1.4,120\n")
    (folder / "status").write_text(status)


def test_gpu_table_reads_each_training_row_from_its_stage(tmp_path):
    """The TF32-on row read fp32.json: TF32 off's figures twice, and TF32's own never shown."""
    from scripts import gpu_table
    gpu_out(tmp_path, "baby=exit 0\nfp32=exit 0\ntf32_bf16=exit 0\n")
    table = dict(gpu_table.rows(tmp_path, "cpu"))
    assert table["training, float32, TF32 off"] == "1,000 tok/s, MFU 10%"
    assert table["training, float32, TF32 on"] == "3,000 tok/s, MFU 30%"
    assert table["training, bfloat16"] == "5,000 tok/s, MFU 50%"


def test_gpu_table_time_to_val_is_the_first_eval_under_it(tmp_path):
    """The baby GPT's time to val 1.47 read its last eval under it (120 s), not its first (60 s)."""
    from scripts import gpu_table
    gpu_out(tmp_path, "baby=exit 0\n")
    assert dict(gpu_table.rows(tmp_path, "cpu"))["baby GPT: time to val 1.47"] == "60 s (step 500, val 1.460)"


def test_gpu_table_marks_each_stage_as_its_status_line_says(tmp_path):
    """A figure's row beside its stage's status line as gpu_check.sh writes it: a failure that holds an '='
    (status lines split at their first), a stage skipped for the budget (not "failed (skipped: ...)"), a stage
    with figures and no status line (a folder of figures alone: no failure added), a stage JSON that is a list."""
    from scripts import gpu_table
    gpu_out(tmp_path, "baby=exit 0\nfp32=exit 1 (x=y)\ntf32_bf16=skipped: the 600 s budget was spent\n"
                      "decode=exit 0\n")
    (tmp_path / "decode.json").write_text("[1]")
    table = dict(gpu_table.rows(tmp_path, "cpu"))
    assert table["training, float32, TF32 off"] == "1,000 tok/s, MFU 10%; then the stage ended: failed (exit 1 (x=y))"
    assert table["training, bfloat16"] == ("5,000 tok/s, MFU 50%; then the stage ended: skipped: the 600 s budget "
                                           "was spent")
    assert table["decoding, KV cache"] == "exit 0, but its figures are missing or damaged"
    (tmp_path / "status").write_text("baby=exit 0\n")
    assert dict(gpu_table.rows(tmp_path, "cpu"))["training, float32, TF32 off"] == "1,000 tok/s, MFU 10%"


@pytest.mark.parametrize("csv, status, row", [
    ("500,1.47,60\n", "baby=exit 0\n", "60 s (step 500, val 1.470)"),  # (1.47 itself reaches it)
    ("250,2.0,30\n500,1.8,60\n", "baby=exit 0\n", "not reached (best 1.800; exit 0)"),
    ("250,2.0,30\n500,1.8,60\n", "", "not reached (best 1.800; did not run)"),  # (figures, no status line)
    ("250,nan,30\n", "baby=exit 2\n", "not reached (best none; exit 2)"),  # (diverged at its first eval: no best)
    ("250,2.0,30\n500,inf,60\n", "baby=exit 2\n", "not reached (best 2.000; exit 2)"),
])
def test_gpu_table_time_to_val_row_when_it_is_reached_or_not(tmp_path, csv, status, row):
    from scripts import gpu_table
    gpu_out(tmp_path, status)
    (tmp_path / "baby" / "metrics.csv").write_text("step,val_loss,elapsed_s\n" + csv)
    assert dict(gpu_table.rows(tmp_path, "cpu"))["baby GPT: time to val 1.47"] == row


def test_gpu_table_vs_transformers_row_and_a_skipped_baby_run(tmp_path):
    """The sub-row of decode.json's vs_hf (its own figures, shown even without the generate figures; logits
    not compared: 'not checked'), and a baby stage skipped for the budget with no metrics: its status alone."""
    from scripts import gpu_table
    vs_hf = {"ratio": 1.5, "transformers_tokens_per_s": 1000.0, "same_tokens": True,
             "bandwidth_limit_tokens_per_s": 98765.0}
    (tmp_path / "decode.json").write_text(json.dumps({"vs_hf": vs_hf}))
    skipped = "skipped: the 16 s budget was spent"
    (tmp_path / "status").write_text(f"baby={skipped}\ndecode=exit 0\n")
    table = dict(gpu_table.rows(tmp_path, "cuda"))
    assert table["  vs transformers generate"] == (
        f"{vs_hf['ratio']:.2f}x ({vs_hf['transformers_tokens_per_s']:,.0f} tok/s), same tokens: True, logits agree: "
        f"not checked; bandwidth limit {vs_hf['bandwidth_limit_tokens_per_s']:,.0f} tok/s")
    assert table[f"baby GPT: time to val {gpu_table.TARGET_VAL_LOSS}"] == skipped


def test_gpu_table_survives_a_status_file_that_is_not_text_and_names_a_damaged_baby_run(tmp_path):
    """A status of non-UTF-8 bytes reads as no status (the table still prints); a damaged baby metrics.csv is
    named in its row; a stage JSON with a device name but no torch version names no device."""
    from scripts import gpu_table
    (tmp_path / "status").write_bytes(b"baby=exit 0\n\xff\xfe\n")
    assert dict(gpu_table.rows(tmp_path, "cpu"))["tests (TESTS)"] == "did not run"
    (tmp_path / "status").write_text("baby=exit 0\n")
    (tmp_path / "baby").mkdir()
    (tmp_path / "baby" / "metrics.csv").write_text("step,val_loss\n100,1.4")  # cut short: no line end
    row = dict(gpu_table.rows(tmp_path, "cpu"))[f"baby GPT: time to val {gpu_table.TARGET_VAL_LOSS}"]
    assert row.startswith("not reached (best none; exit 0; ") and str(tmp_path / "baby" / "metrics.csv") in row
    (tmp_path / "fp32.json").write_text(json.dumps({"device_name": "H100"}))
    assert gpu_table.recorded_device(tmp_path) is None


def test_gpu_table_names_the_device_given_and_keeps_a_sub_rows_indent(tmp_path, capsys):
    """--device names the first row even where the stages' JSON records a device; a sub-row's indent of two
    spaces is two &nbsp; (Markdown drops the spaces)."""
    from scripts import gpu_table
    gpu_out(tmp_path, "fp32=exit 0\n")
    (tmp_path / "fp32.json").write_text(json.dumps({"device_name": "NVIDIA H100", "torch": "2.5.0",
                                                    "train": {"float32": {"tokens_per_s": 1000, "mfu": 0.1}}}))
    assert "\n| device | my box |\n" in cli(gpu_table.main, [tmp_path, "--device", "my box"], capsys)[1]
    assert "\n| device | NVIDIA H100, torch 2.5.0 |\n" in cli(gpu_table.main, [tmp_path], capsys)[1]
    assert gpu_table.markdown([("  vs x", "1x")]).splitlines()[-1] == "| &nbsp;&nbsp;vs x | 1x |"


@pytest.mark.parametrize("status, row", [("", "did not run"), ("ddp=exit 124\n", "out of time (exit 124)"),
                                         ("ddp=exit 1\n", "failed (exit 1)"), ("ddp=exit 0\n", "ok")])
def test_gpu_table_torchrun_is_ok_only_where_it_exited_0(tmp_path, status, row):
    """A torchrun stage that never ran, or ran out of time, read `ok`: any status but `exit 1` was one."""
    from scripts import gpu_table
    gpu_out(tmp_path, "baby=exit 0\n" + status)
    assert dict(gpu_table.rows(tmp_path, "NVIDIA H100 80GB HBM3"))["torchrun, 1 process (NCCL starts; no collective)"] \
        == row
    # a rehearsal (REHEARSE=1) runs torchrun on the CPU, over gloo: the row said NCCL
    assert dict(gpu_table.rows(tmp_path, "cpu: a rehearsal"))["torchrun, 1 process (gloo starts; no collective)"] == row

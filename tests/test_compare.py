"""Guards compare.py against what a run directory may hold besides a sound run: a diverged run's
nan and inf losses (shown in the tables, left out of the plots), and a probe.json that is not the
probe's figures (one line naming it)."""
from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import re
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import compare
import sweep
from tinygpt import plots, runs
from tinygpt.checkpoint import FORMAT
from tinygpt.config import Config
from tinygpt.errors import UserError
from conftest import ROOT, capture_figures


SWEEP_CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "stories.yaml")


def fake_run(path, seed: int, rows: list[tuple]) -> str:
    """A run directory with config.yaml and metrics.csv (step, train_loss, val_loss), nothing trained."""
    cfg = Config()
    cfg.train.seed, cfg.train.max_iters = seed, rows[-1][0]
    path.mkdir()
    runs.write_config(path, cfg)
    runs.write_metrics(path, [{"step": s, "train_loss": t, "val_loss": v} for s, t, v in rows])
    return str(path)


def test_a_diverged_run_is_tabulated_and_plotted_not_a_crash(tmp_path):
    pytest.importorskip("matplotlib")
    diverged = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9"), (21, "inf", "nan")])
    sound = fake_run(tmp_path / "b", 2, [(0, "4.1", "4.1"), (10, "3.8", "3.8"), (21, "3.7", "3.6")])
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = compare.main([diverged, sound, "--out", str(tmp_path / "cmp")])
    assert "| a | 1 |" in printed.getvalue() and "| inf |" in printed.getvalue()  # final train loss: diverged
    assert str(tmp_path / "cmp" / "val_loss.png") in result["plots"]
    with contextlib.redirect_stdout(io.StringIO()):
        drawn = compare.main([diverged, sound, "--plot-only", "--out", str(tmp_path / "plots")])
    assert drawn["plots"][0] == str(tmp_path / "a" / "loss.png")


@pytest.mark.parametrize("rows, culprit", [
    ([(0, "4.1", "1e308"), (10, "3.9", "-1e308")], "row 1: val_loss=1e+308 is not a loss"),  # plots: a traceback
    ([(0, "4.1", "4.1"), (10, "3.9", "1e308")], "row 2: val_loss=1e+308 is not a loss"),
    ([(0, "4.1", "4.1"), (10, "3.9", "-1e308")], "row 2: val_loss=-1e+308 is not a loss"),  # its best val loss
    ([(0, "4.1", "4.1"), (10, "-0.5", "3.9")], "row 2: train_loss=-0.5 is not a loss"),
    ([(0, "4.1", "4.1"), (10.5, "3.9", "3.9"), (20, "3.8", "3.8")], "row 2: step=10.5 is not a step"),
    ([(-10, "4.1", "4.1"), (10, "3.9", "3.9")], "row 1: step=-10 is not a step"),
    ([(0, "4.1", "4.1"), (10, "3.9", "3.9")], "huge step"),
])
def test_numbers_no_training_logs_are_a_damaged_metrics_csv(tmp_path, rows, culprit):
    run = fake_run(tmp_path / "a", 1, rows)
    if culprit == "huge step":  # past any train.max_iters: it made the run `done`, its losses shown
        culprit = "row 2: step=1e+23 is not a step"
        text = (tmp_path / "a" / "metrics.csv").read_text()
        (tmp_path / "a" / "metrics.csv").write_text(text.replace("\n10,", "\n99999999999999999999999,"))
    with pytest.raises(UserError, match=re.escape(f"a/metrics.csv is damaged or not a tinygpt metrics file ({culprit}")):
        compare.main([run, "--out", str(tmp_path / "cmp")])


@pytest.mark.parametrize("rows, culprit", [
    ([(0, "4.1", "4.1"), (20, "3.9", "3.9"), (20, "3.0", "3.0")], "row 3 is a second row of step 20 with a val_"),
    ([(0, "4.1", "4.1"), (20, "3.9", "3.9"), (10, "3.8", "3.8")], "row 3 goes back to step 10 after step 20"),
    ([(0, "4.1", "4.1"), (10, "3.9", "nan"), (20, "3.8", "3.8")], "row 2 has a loss that is not finite, and rows"),
])
def test_rows_out_of_a_trainings_order_are_a_damaged_metrics_csv(tmp_path, rows, culprit):
    """A second evaluation of step 20 pasted into one seed's metrics.csv set its best val loss (3.9 -> 3.0) and
    counted as a seed of its own in val_loss.png; a nan before the last row (a diverged run's is its last) was
    left out of the figures without a word."""
    run = fake_run(tmp_path / "a", 1, rows)
    damaged = "a/metrics.csv is damaged or not a tinygpt metrics file"
    with pytest.raises(UserError, match=re.escape(f"{damaged} ({culprit}")):
        compare.main([run, "--out", str(tmp_path / "cmp")])


@pytest.mark.parametrize("key", ["elapsed_s", "tokens_per_s", "mfu"])
def test_a_measurement_no_training_logs_is_a_damaged_metrics_csv(tmp_path, key):
    """A wall time (or tokens/s, MFU) of 1e308 in two seeds' metrics.csv overflowed the mean over seeds:
    a traceback (OverflowError in fsum), and one run alone printed a 300-digit number."""
    for name in ("a", "b"):
        fake_run(tmp_path / name, 1 if name == "a" else 2, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
        path = tmp_path / name / "metrics.csv"
        head, *lines = path.read_text().splitlines()
        column = head.split(",").index(key)
        cells = lines[-1].split(",")
        cells[column] = "1.5e308"
        path.write_text("\n".join([head, *lines[:-1], ",".join(cells)]) + "\n")
    with pytest.raises(UserError, match=re.escape(f"(row 2: {key}=1.5e+308 is not a value a training logs)")):
        compare.main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")])


def test_a_metrics_csv_saved_by_a_spreadsheet_or_without_losses(tmp_path):
    """A byte-order mark before "step" (a spreadsheet saved the file again) was refused as "no step column";
    a -0.0 loss showed as a best val loss of -0.0000; a header with no loss column (renamed, or written
    with ", ") made the run `done` with every loss empty."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "-0.0")])
    path = tmp_path / "a" / "metrics.csv"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    with contextlib.redirect_stdout(io.StringIO()):
        result = compare.main([run, "--out", str(tmp_path / "cmp")])
    assert result["rows"][0]["best_val_loss"] == 0.0 and str(result["rows"][0]["best_val_loss"]) == "0.0"
    assert "-0.0" not in (tmp_path / "cmp" / "results.md").read_text()
    path.write_text("step,loss_train,loss_val\n0,4.1,4.1\n10,3.9,3.9\n")
    with pytest.raises(UserError, match=re.escape("metrics.csv is damaged or not a tinygpt metrics file (it has no "
                                                  "train_loss or val_loss column)")):
        compare.main([run, "--out", str(tmp_path / "cmp")])
    path.write_text("step,val_loss\n0,4.0\n")  # one loss column is enough, either one
    assert runs.read_metrics(path.parent) == [{"step": 0.0, "val_loss": 4.0}]
    path.write_text("step,train_loss\n0,4.1\n10,3.9\n")  # (no evaluation: no best)
    with contextlib.redirect_stdout(io.StringIO()):
        result = compare.main([run, "--out", str(tmp_path / "cmp2")])
    row = result["rows"][0]
    assert row["metrics"] == [{"step": 0.0, "train_loss": 4.1}, {"step": 10.0, "train_loss": 3.9}]
    assert row["status"] == "done" and row["best_val_loss"] is None


HUGE_COUNTS = ('{"references": 1, "behaviour": {"antecedent": 1%s, "distractor": 0, "other": 0}, '
               '"attention_attribute": {"best": null, "references": 0}, "attention": {"best": null, "references": 0}}'
               % ("0" * 400))  # (its share made no float: an OverflowError traceback)


@pytest.mark.parametrize("text", ['{"behaviour": 1}', "1e999999", "[" * 100_000, "[]", "{not json", HUGE_COUNTS],
                         ids=["no references", "a number", "deep", "a list", "not json", "a count of 401 digits"])
def test_a_probe_json_that_is_not_the_probes_figures_is_one_line(tmp_path, text):
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (tmp_path / "a" / "probe.json").write_text(text)
    with pytest.raises(UserError, match=r"a/probe.json (is damaged|does not hold the probe's figures)"):
        compare.main([run, "--out", str(tmp_path / "cmp")])


def probe_figures(references: int, antecedent: int, stories: int) -> dict:
    """A probe.json's figures (tinygpt.coreference.probe) of `references` over `stories` held-out stories."""
    best = {"layer": 0, "head": 1, "antecedent": 0.4, "ratio": 2.0}
    return {"references": references, "stories": stories, "skipped_stories": 0,
            "behaviour": {"antecedent": antecedent, "distractor": 1, "other": references - antecedent - 1},
            "attention_attribute": {"best": best, "references": references},
            "attention": {"best": best, "references": references}}


@pytest.mark.parametrize("damage", [
    {"behaviour": {"antecedent": 50, "distractor": 3, "other": 1}},  # 54 outcomes of 36: shares of 138.9%
    {"references": -3, "behaviour": {"antecedent": -1, "distractor": -1, "other": -1}},
    {"references": float("nan")},
    {"attention": {"best": {"layer": 0, "head": 1, "antecedent": float("-inf"), "ratio": float("inf")},
                   "references": 36}},
    {"attention": {"best": {"layer": -1, "head": 1, "antecedent": 0.4, "ratio": 2.0}, "references": 36}},
], ids=["counts that do not add up", "negative", "nan", "infinite", "a negative layer"])
def test_a_probe_json_of_impossible_figures_is_damaged(tmp_path, damage):
    """A probe.json whose values were numbers passed as the probe's figures, whatever they were: rows of
    138.9% / 8.3% / 2.8%, `nan%`, `-inf% | infx` (and settings.png dropped the point unsaid)."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (tmp_path / "a" / "probe.json").write_text(json.dumps({**probe_figures(36, 30, 5), **damage}))
    with pytest.raises(UserError, match=r"a/probe.json does not hold the probe's figures"):
        compare.main([run, "--out", str(tmp_path / "cmp")])
    (tmp_path / "a" / "probe.json").write_text(json.dumps(probe_figures(36, 30, 5)))  # (whole: read)
    with contextlib.redirect_stdout(io.StringIO()):
        assert compare.main([run, "--out", str(tmp_path / "cmp")])["rows"][0]["references"] == 36


def test_probe_figures_of_different_held_out_sets_say_so(tmp_path):
    """Runs probed with --probe-stories 5 and 12 were averaged and compared as one measure, with no word, and no
    column said how many references each share was of."""
    a = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    b = fake_run(tmp_path / "b", 2, [(0, "4.1", "4.1"), (10, "3.8", "3.8")])
    for run, figures in ((a, probe_figures(40, 30, 5)), (b, probe_figures(95, 70, 12))):
        (Path(run) / "probe.json").write_text(json.dumps(figures))
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        compare.main([a, b, "--out", str(tmp_path / "cmp")])
    text = printed.getvalue()
    assert "| references | antecedent | distractor | other |" in text
    assert "| 40 | 75.0% |" in text and "| 95 | 73.7% |" in text
    assert "probed on different numbers of held-out stories (5, 12)" in text
    assert "attribute_share: the best head's (attribute_head's) mean weight on the antecedent's attribute" in text
    header = (tmp_path / "cmp" / "results.csv").read_text().splitlines()[0].split(",")
    assert header.index("attribute_share") == header.index("attribute_head") + 1  # each run's, as averaged
    (Path(b) / "probe.json").write_text(json.dumps(probe_figures(40, 28, 5)))
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        compare.main([a, b, "--out", str(tmp_path / "cmp")])
    assert "different numbers of held-out stories" not in printed.getvalue()


def test_a_run_given_twice_or_an_out_holding_a_run_is_refused_before_writing(tmp_path, monkeypatch):
    """The same run under two spellings would be two identical rows; a report written into a run's
    folder would mix with its files (sweep.py refuses the same)."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"run directory a is given twice \(also as .*/a\)"):
        compare.main([run, "a/", "--out", "cmp"])
    (tmp_path / "a" / "ckpt.pt").write_bytes(b"")
    with pytest.raises(UserError, match=r"--out='a' holds a training run"):
        compare.main([run, "--out", "a"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"] and len(list((tmp_path / "a").iterdir())) == 3


def test_an_out_holding_a_runs_files_without_its_checkpoint_or_a_linked_report_file_is_refused(tmp_path):
    """--out a run killed before its first checkpoint (config.yaml, metrics.csv): the report was written
    among its files (only ckpt.pt and best.pt were looked for). A results.md in --out linking to another
    comparison's: that one's results.md got this report's tables beside its own CSVs and pictures."""
    pytest.importorskip("matplotlib")
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    other = fake_run(tmp_path / "b", 2, [(0, "4.1", "4.1"), (10, "3.8", "3.8")])
    with pytest.raises(UserError, match=r"--out='.*b' holds a training run's files \(config.yaml, metrics.csv"):
        compare.main([run, "--out", other])
    assert sorted(p.name for p in Path(other).iterdir()) == ["config.yaml", "metrics.csv"]
    with contextlib.redirect_stdout(io.StringIO()):
        compare.main([run, "--out", str(tmp_path / "cmp1")])
    before = (tmp_path / "cmp1" / "results.md").read_bytes()
    (tmp_path / "uo").mkdir()
    (tmp_path / "uo" / "results.md").symlink_to(tmp_path / "cmp1" / "results.md")
    with pytest.raises(UserError, match=r"--out='.*uo' holds results.md, a link \(.*uo/results.md -> "
                                        r".*cmp1/results.md\): the report would write through it"):
        compare.main([run, other, "--out", str(tmp_path / "uo")])
    assert (tmp_path / "cmp1" / "results.md").read_bytes() == before


def test_a_runs_name_for_titles_is_its_folders_however_it_is_given(tmp_path, monkeypatch):
    """`.`, `..`, a checkpoint in it, or a folder whose own name ends in .pt (a run named so): its folder's name."""
    run = tmp_path / "exp.pt" / "inner"
    run.mkdir(parents=True)
    (run / "best.pt").touch()
    monkeypatch.chdir(run)
    assert [runs.run_name(p) for p in (".", "..", "best.pt", run / "best.pt", tmp_path / "exp.pt")] == \
        ["inner", "exp.pt", "inner", "inner", "exp.pt"]
    assert runs.run_name(os.fsdecode(b"ex_\xff")) == "ex_\ufffd"  # (a name that is not UTF-8)


def test_a_run_named_with_a_bar_or_a_line_break_keeps_the_table_whole(tmp_path):
    """A run folder named `a\\nb`: its line break cut results.md's table row in two."""
    run = fake_run(tmp_path / "a|x\nb", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    with contextlib.redirect_stdout(io.StringIO()):
        compare.main([run, "--out", str(tmp_path / "cmp")])
    rows = [line for line in (tmp_path / "cmp" / "results.md").read_text().splitlines() if line.startswith("| a")]
    assert len(rows) == 1 and rows[0].startswith("| a\\|x b |")


def test_a_setting_or_run_name_holding_markup_stays_one_cell_of_text(tmp_path):
    """The summary's setting (a sweep over data.dataset=`d|1.txt`) was written raw: its | split the row
    into one cell more, a line break it in two. A backslash before a | ate it (`\\|back` showed `|back`), and
    `<!--` in a folder's name hid the rest of results.md on GitHub."""
    from tinygpt import report
    rows = [{"data.dataset": name, "train.seed": seed, "best_val_loss": 1.0 + seed / 10}
            for name in ("d|1.txt", "d\n2.txt") for seed in (1, 2)]
    table = report.summary_markdown(report.group_by_setting(rows, ["data.dataset", "train.seed"]), ["best_val_loss"])
    lines = table.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| dataset=d\\|1.txt | 2 |")
    assert lines[3].startswith("| dataset=d 2.txt |")
    assert report.markdown_cell("\\|back <!-- x") == "\\\\\\|back &lt;!-- x"


def test_results_csv_keeps_every_digit_as_summary_csv_does(tmp_path):
    """results.csv wrote 6 significant digits: 1,790,122 tokens/s in results.md was 1.79012e+06 there."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    path = tmp_path / "a" / "metrics.csv"
    path.write_text(path.read_text() + "10,3.8,,1.0e-03,1790122.5,0.25,12.0\n")
    with contextlib.redirect_stdout(io.StringIO()):
        compare.main([run, "--out", str(tmp_path / "cmp")])
    assert "1790122.5" in (tmp_path / "cmp" / "results.csv").read_text()


def test_a_comparison_into_a_folder_a_sweep_is_writing_is_refused(tmp_path):
    """sweep.py holds its --out while it runs; a comparison written there would mix two reports."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    with runs.run_lock(tmp_path / "sw", "--out", "sweep", runs.REPORT_LOCK):
        with pytest.raises(UserError, match=r"--out='.*sw' is in use by another sweep or comparison"):
            compare.main([run, "--out", str(tmp_path / "sw")])
    assert not (tmp_path / "sw").exists()


def test_a_sweeps_folder_a_checkpoint_or_a_config_is_refused(tmp_path):
    """--out a sweep's folder: its report would be replaced by a comparison; a checkpoint or a config
    given for a run said "run directory not found" of a file that is there."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (tmp_path / "sw" / "n_head=1").mkdir(parents=True)
    (tmp_path / "sw" / "n_head=1" / "ckpt.pt").write_bytes(b"a sweep's run")
    with pytest.raises(UserError, match=r"--out='.*sw' holds runs in its folders \(n_head=1\): this report would "
                                        r"mix with them"):  # (it said "a sweep's runs" of any folder of runs)
        compare.main([run, "--out", str(tmp_path / "sw")])
    (tmp_path / "sw" / "results.md").write_text("# Sweep of configs/stories.yaml\n")
    with pytest.raises(UserError, match=r"--out='.*sw' holds a sweep's runs \(n_head=1\)"):
        compare.main([run, "--out", str(tmp_path / "sw")])
    (tmp_path / "a" / "ckpt.pt").write_bytes(b"")
    with pytest.raises(UserError, match=r"a/ckpt.pt is a file; give the run directory"):
        compare.main([str(tmp_path / "a" / "ckpt.pt"), "--out", str(tmp_path / "cmp")])


def test_losses_of_other_tokenizers_are_said_not_to_compare(tmp_path):
    a = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    b = tmp_path / "b"
    cfg = Config()
    cfg.data.tokenizer, cfg.train.max_iters = "word", 10  # (a default Config is char)
    b.mkdir()
    runs.write_config(b, cfg)
    runs.write_metrics(b, [{"step": 0, "train_loss": "3.0", "val_loss": "3.0"}, {"step": 10, "train_loss": "2.0",
                                                                                 "val_loss": "2.0"}])
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        compare.main([a, str(b), "--out", str(tmp_path / "cmp")])
    assert "differ in data.tokenizer: their losses are per token" in printed.getvalue()


def test_runs_that_differ_only_in_where_their_files_go_are_one_setting(tmp_path):
    """Two seeds whose data was prepared in different folders (or one drew loss.png and the other
    not, or logged to TensorBoard) computed the same: one setting, averaged, not two settings labelled
    by folder paths (train.tensorboard was a column, and settings.png plotted the loss against it)."""
    a = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    b = tmp_path / "b"
    cfg = Config()
    cfg.train.seed, cfg.train.max_iters, cfg.train.plot, cfg.train.tensorboard = 2, 10, "never", True
    cfg.data.prepared_dir = str(tmp_path / "elsewhere")
    b.mkdir()
    runs.write_config(b, cfg)
    runs.write_metrics(b, [{"step": 0, "train_loss": "4.0", "val_loss": "4.0"}, {"step": 10, "train_loss": "3.7",
                                                                                 "val_loss": "3.7"}])
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = compare.main([a, str(b), "--out", str(tmp_path / "cmp")])
    assert result["varied"] == ["train.seed"]
    assert "| all runs | 2 | 3.8000 ± 0.1414" in printed.getvalue(), printed.getvalue()


# ---- seeds trained twice, a report replaced whole or not at all, a user's files, odd --out and runs ----


def config_run(path, rows: list[tuple], **settings) -> str:
    """fake_run with config values set, e.g. config_run(p, rows, **{"model.n_head": 2, "train.seed": 1})."""
    cfg = Config()
    cfg.train.max_iters = rows[-1][0]
    for key, value in settings.items():
        section, name = key.split(".")
        setattr(getattr(cfg, section), name, value)
    path.mkdir()
    runs.write_config(path, cfg)
    runs.write_metrics(path, [{"step": s, "train_loss": t, "val_loss": v} for s, t, v in rows])
    return str(path)


def compared(argv: list[str]) -> tuple[dict, str]:
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = compare.main(argv)
    return result, printed.getvalue()


def test_runs_of_one_setting_and_one_seed_count_as_one_seed(tmp_path, monkeypatch):
    """The same config trained twice is one seed, not two: no spread of 0 and interval of nothing
    between settings, no 'differences beyond the intervals' resting on one seed each, no 'mean of 2'
    in the plot; every run is still listed."""
    labels = []
    monkeypatch.setattr(plots, "_png", lambda fig, name: labels.extend(  # (nothing drawn without matplotlib)
        t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()) or b"")
    rows = [(0, "4.1", "4.1"), (10, "0.8169", "0.8169")]
    same = [config_run(tmp_path / f"h{h}_{i}", rows, **{"model.n_head": h, "train.seed": 1})
            for h in (1, 2) for i in (1, 2)]
    _, printed = compared([*same, "--out", str(tmp_path / "cmp")])
    assert "note: h1_1 and h1_2 (n_head=1) share train.seed=1: the same training twice, counted as one seed" in printed
    assert "note: h2_1 and h2_2 (n_head=2)" in printed
    assert "±" not in printed and "Differences beyond" not in printed and "interval" not in printed, printed
    assert (tmp_path / "cmp" / "results.csv").read_text().count("\nh") == 4  # every run listed
    summary = list(csv.DictReader(io.StringIO((tmp_path / "cmp" / "summary.csv").read_text())))
    assert [r["best_val_loss_n"] for r in summary] == ["1", "1"] and summary[0]["best_val_loss_std"] == ""
    assert labels in ([], ["n_head=1", "n_head=2"]), labels  # (val_loss.png's legend)
    # two seeds, one of them trained twice: n = 2, the mean over seeds (the repeat's mean, then the other seed)
    again = config_run(tmp_path / "h1_again", [(0, "4.1", "4.1"), (10, "0.6", "0.6")], **{"model.n_head": 1,
                                                                                          "train.seed": 1})
    seed2 = config_run(tmp_path / "h1_seed2", [(0, "4.1", "4.1"), (10, "1.0", "1.0")], **{"model.n_head": 1,
                                                                                          "train.seed": 2})
    _, printed = compared([same[0], again, seed2, "--out", str(tmp_path / "cmp2")])
    assert "| all runs | 2 | 0.8542 ± 0.2062" in printed, printed  # seed 1: (0.8169 + 0.6) / 2; seed 2: 1.0


def full_disk_on(name: str, monkeypatch) -> None:
    """The disk refuses the temp file of a write to a file whose name holds `name` (every atomic write
    makes one with tempfile.mkstemp, named after the file)."""
    import tempfile
    real = tempfile.mkstemp

    def mkstemp(*args, prefix="", **kwargs):
        if name in prefix:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, prefix=prefix, **kwargs)
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("name", ["val_loss.png", "results.csv"])
def test_a_full_disk_while_writing_the_report_leaves_the_old_one_whole(tmp_path, monkeypatch, name):
    """A report is replaced whole or not at all: a picture refused on a full disk left the new tables
    beside the old pictures (and the old settings.png, which the new report would remove)."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "cmp"
    rows = [(0, "4.1", "4.1"), (10, "3.9", "3.9")]
    two = [config_run(tmp_path / f"h{h}", rows, **{"model.n_head": h}) for h in (1, 2)]
    compared([*two, "--out", str(out)])  # two settings: settings.png too
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "settings.png" in before
    # another seed of n_head=1: one setting, so this report draws no settings.png and would remove the old one
    one = config_run(tmp_path / "other", [(0, "4.0", "4.0"), (10, "3.0", "3.0")], **{"model.n_head": 1,
                                                                                      "train.seed": 7})
    full_disk_on(name, monkeypatch)
    with pytest.raises(UserError, match="No space left on device") as refused:
        compared([two[0], one, "--out", str(out)])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # every file as it was, no temp file left
    assert refused.match(r"^cannot write .*cmp/(val_loss.png|results.csv): No space left on device \(the previous "
                         r"report is intact\)$")  # the file's own name, not a temp file's


def png(*texts: tuple[bytes, bytes]) -> bytes:
    """A 1x1 PNG carrying tEXt chunks (keyword, text): a user's picture, or one from matplotlib."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + b"".join(chunk(b"tEXt", k + b"\0" + v) for k, v in texts)
            + chunk(b"IDAT", zlib.compress(b"\0\0")) + chunk(b"IEND", b""))


MATPLOTLIB_PNG = png((b"Software", b"Matplotlib version3.9.0, https://matplotlib.org/"))


@pytest.mark.parametrize("name, content", [("results.md", b"# My notes\n"), ("results.csv", b"name,score\nx,1\n"),
                                           ("summary.csv", b"run,params\n"), ("val_loss.png", png()),
                                           ("settings.png", MATPLOTLIB_PNG)],
                         ids=["results.md", "results.csv", "summary.csv", "a picture", "a matplotlib picture"])
def test_a_users_file_of_a_reports_name_is_refused_not_overwritten(tmp_path, monkeypatch, name, content):
    """compare.py and sweep.py overwrote a results.md (or a picture) of the user's in --out without a word;
    a report's own files are replaced, pictures from before the report marked them too (beside its results.md)."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / name).write_bytes(content)
    picture = r" \(a picture of yours, or one drawn before reports marked theirs\)" if name.endswith(".png") else ""
    with pytest.raises(UserError, match=rf"--out='.*mine' holds {name}, which is not from a tinygpt report{picture}: "
                                        rf"the report would overwrite it; move it away, or choose another --out"):
        compare.main([run, "--out", str(mine)])
    monkeypatch.setattr(sweep, "train_grid", lambda *a: pytest.fail("the sweep went on"))
    with pytest.raises(UserError, match=rf"holds {name}, which is not from a tinygpt report"):
        sweep.main([SWEEP_CONFIG, "--grid", "model.n_head=1,2", "--out", str(mine)])
    assert [p.name for p in mine.iterdir()] == [name] and (mine / name).read_bytes() == content
    # a report's files are its own: replaced by the next report, as are the pictures of one from before the mark
    compared([run, "--out", str(tmp_path / "cmp")])
    (tmp_path / "cmp" / "settings.png").write_bytes(MATPLOTLIB_PNG)
    compared([run, "--out", str(tmp_path / "cmp")])
    assert not (tmp_path / "cmp" / "settings.png").exists()  # (one run draws none: the old one is removed)


def test_plot_only_minds_only_the_picture_it_writes(tmp_path):
    """compare.py --plot-only writes val_loss.png alone: a results.md of the user's beside it stays, and
    is no reason to refuse; a val_loss.png of the user's still is."""
    pytest.importorskip("matplotlib")
    runs_ = [fake_run(tmp_path / n, s, [(0, "4.1", "4.1"), (10, "3.9", "3.9")]) for n, s in (("a", 1), ("b", 2))]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.md").write_text("# my notes\n")
    compared([*runs_, "--plot-only", "--out", str(mine)])
    assert sorted(p.name for p in mine.iterdir()) == ["results.md", "val_loss.png"]
    assert (mine / "results.md").read_text() == "# my notes\n"
    (mine / "val_loss.png").write_bytes(b"my picture")
    with pytest.raises(UserError, match=r"holds val_loss.png, which is not from a tinygpt report"):
        compare.main([*runs_, "--plot-only", "--out", str(mine)])
    # a report's folder (out/compare is the default of both): the new picture beside its tables would mix
    # two reports (runs of the same names, another sweep's, look alike); compare.py redraws a whole report
    other = fake_run(tmp_path / "c", 3, [(0, "4.1", "4.1"), (10, "3.7", "3.7")])
    compared([runs_[0], other, "--out", str(tmp_path / "cmp")])
    before = {p.name: p.read_bytes() for p in (tmp_path / "cmp").iterdir()}
    for plotted in (runs_, [runs_[0], other]):
        with pytest.raises(UserError, match=r"holds a report \(results.md\): --plot-only would replace its "
                                            r"val_loss.png alone"):
            compare.main([*plotted, "--plot-only", "--out", str(tmp_path / "cmp")])
    assert {p.name: p.read_bytes() for p in (tmp_path / "cmp").iterdir()} == before


def test_a_sweep_into_a_comparisons_folder_is_refused(tmp_path, monkeypatch):
    """compare.py refuses a sweep's folder (its report would be replaced); the sweep replaced a comparison's."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    compared([run, "--out", str(tmp_path / "cmp")])
    before = {p.name: p.read_bytes() for p in (tmp_path / "cmp").iterdir()}
    monkeypatch.setattr(sweep, "train_grid", lambda *a: pytest.fail("the sweep went on"))
    with pytest.raises(UserError, match=r"--out='.*cmp' holds a comparison's report \(compare.py's results.md\), "
                                        r"which this sweep's would replace; choose another --out"):
        sweep.main([SWEEP_CONFIG, "--grid", "model.n_head=1,2", "--out", str(tmp_path / "cmp")])
    assert {p.name: p.read_bytes() for p in (tmp_path / "cmp").iterdir()} == before


def test_a_report_into_a_hugging_face_export_or_inside_a_run_is_refused(tmp_path, monkeypatch):
    """compare.py and sweep.py wrote their report into export.py's folder (config.json, model.safetensors
    beside results.md), or into a folder inside a run (a sweep's runs inside the run). Now refused,
    nothing written."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (tmp_path / "a" / "best.pt").write_bytes(b"")
    hf, hub = tmp_path / "hf", tmp_path / "hub"  # export.py's folder; a Hub model's of older weights only
    for folder, weights in ((hf, "model.safetensors"), (hub, "pytorch_model.bin")):
        folder.mkdir()
        for name in ("config.json", weights):
            (folder / name).write_bytes(b"{}")
    monkeypatch.setattr(sweep, "train_grid", lambda *a: pytest.fail("the sweep went on"))
    for command in (lambda out: compare.main([run, "--out", out]),
                    lambda out: sweep.main([SWEEP_CONFIG, "--grid", "model.n_head=1,2", "--out", out])):
        for folder in (hf, hub):  # (the second was written into: only model.safetensors was looked for)
            with pytest.raises(UserError, match=r"^--out='\S+/h(f|ub)' holds a Hugging Face model \(config.json and "
                                                r"its weights, as export.py writes\)"):
                command(str(folder))
        with pytest.raises(UserError, match=r"^--out='\S+a/cmp' is inside the training run \S+a \(its best.pt\); a "
                                            r"report written there would sit among the run's files"):
            command(str(tmp_path / "a" / "cmp"))
        (tmp_path / "loop").unlink(missing_ok=True)
        (tmp_path / "loop").symlink_to("loop")  # (a traceback, RuntimeError: Symlink loop, before Python 3.13)
        for out in (tmp_path / "loop", tmp_path / "loop" / "x"):
            with pytest.raises(UserError, match=r"^--out \S+ cannot be reached: it runs into a loop of links"):
                command(str(out))
    assert sorted(p.name for p in hf.iterdir()) == ["config.json", "model.safetensors"]
    assert not (tmp_path / "a" / "cmp").exists()


def test_an_empty_out_is_refused_not_the_current_folder(tmp_path, monkeypatch):
    """--out '' (an unset variable) wrote the report, and a sweep's runs, into the current folder."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sweep, "train_grid", lambda *a: pytest.fail("the sweep went on"))
    with pytest.raises(UserError, match=r"argument --out: an empty path names no file or folder"):
        compare.main([run, "--out", ""])
    with pytest.raises(UserError, match=r"argument --out: an empty path names no file or folder"):
        sweep.main([SWEEP_CONFIG, "--grid", "model.n_head=1,2", "--out", ""])
    # an empty run directory (an unset $RUN) read the current folder as a run
    with pytest.raises(UserError, match=r"argument RUN_DIR: an empty path names no file or folder"):
        compare.main(["", "--out", str(tmp_path / "cmp")])
    assert [p.name for p in tmp_path.iterdir()] == ["a"]


def test_a_setting_that_does_not_apply_to_a_runs_tokenizer_is_not_compared(tmp_path):
    """A char and a word run have no bpe_vocab_size: 'differ in data.tokenizer, data.bpe_vocab_size' and
    1024 in their rows said otherwise."""
    rows = [(0, "4.1", "4.1"), (10, "3.9", "3.9")]
    char = config_run(tmp_path / "char", rows)
    word = config_run(tmp_path / "word", rows, **{"data.tokenizer": "word"})
    bpe = config_run(tmp_path / "bpe512", rows, **{"data.tokenizer": "bpe", "data.bpe_vocab_size": 512})
    result, printed = compared([char, word, bpe, "--out", str(tmp_path / "cmp")])
    assert result["varied"] == ["data.tokenizer"] and "differ in data.tokenizer: their losses" in printed
    bpe1024 = config_run(tmp_path / "bpe1024", rows, **{"data.tokenizer": "bpe"})
    result, _ = compared([char, word, bpe, bpe1024, "--out", str(tmp_path / "cmp")])  # two bpe runs: it differs
    assert result["varied"] == ["data.tokenizer", "data.bpe_vocab_size"]
    table = list(csv.DictReader(io.StringIO((tmp_path / "cmp" / "results.csv").read_text())))
    assert [r["data.bpe_vocab_size"] for r in table] == ["", "", "512", "1024"]


def test_the_vocabulary_size_the_tokenizer_makes_is_no_setting_beside_the_data_keys_that_make_it(tmp_path):
    """Runs on two datasets and tokenizers differ in model.vocab_size too, which the tokenizer sets: the first
    key in schema order, settings.png drew it as the x axis (58 and 65 on a log scale, their labels on top of
    each other) and split the lines by dataset. Where no data key differs, it is still the one that does."""
    rows = [(0, "4.1", "4.1"), (10, "3.9", "3.9")]
    a = config_run(tmp_path / "a", rows, **{"model.vocab_size": 58})
    b = config_run(tmp_path / "b", rows, **{"model.vocab_size": 300, "data.tokenizer": "bpe",
                                            "data.bpe_vocab_size": 300})
    c = config_run(tmp_path / "c", rows, **{"model.vocab_size": 65, "data.dataset": "other.txt"})
    result, printed = compared([a, b, c, "--out", str(tmp_path / "cmp")])
    assert result["varied"] == ["data.dataset", "data.tokenizer"]
    assert "differ in data.dataset, data.tokenizer: their losses" in printed  # (vocab_size alone: test below)


def test_a_sweeps_folder_given_for_a_run_names_its_runs(tmp_path):
    """compare.py SWEEP_DIR said `it has no config.yaml (train into it first)` of a folder of runs."""
    (tmp_path / "sw").mkdir()
    for h in (1, 2):
        fake_run(tmp_path / "sw" / f"n_head={h}", h, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (tmp_path / "sw" / "results.md").write_text("# Sweep of x.yaml over model.n_head\n")
    with pytest.raises(UserError, match=r"sw is not a run directory: it holds 2 run\(s\) \(n_head=1, n_head=2\), as "
                                        r"a sweep's folder does; give them: .*compare.py .*sw/\*/$"):
        compare.main([str(tmp_path / "sw"), "--out", str(tmp_path / "cmp")])
    assert not (tmp_path / "cmp").exists()


def test_a_run_without_metrics_rows_says_so_and_how_to_finish_it(tmp_path):
    """A run whose metrics.csv holds no row read as `step 0/10`, as if it had not begun, and the advice
    for unfinished runs was a sweep's ("rerun the same command") in a comparison too."""
    done = [(0, "4.1", "4.1"), (10, "3.9", "3.9")]
    runs_ = [fake_run(tmp_path / f"a{s}", s, done) for s in (1, 2)]
    empty = config_run(tmp_path / "empty", done, **{"train.seed": 3})
    runs.write_metrics(Path(empty), [])
    result, printed = compared([*runs_, empty, "--out", str(tmp_path / "cmp")])
    assert [r["status"] for r in result["rows"]] == ["done", "done", "no metrics.csv rows"]
    assert "finish them (the sweep's command again resumes the stopped ones and starts those not started" in printed
    assert "rerun the same command" not in printed
    (Path(empty) / "metrics.csv").unlink()  # none at all (or a folder of that name): not "no rows"
    (Path(empty) / "metrics.csv").mkdir()
    result, _ = compared([*runs_, empty, "--out", str(tmp_path / "cmp2")])
    assert result["rows"][-1]["status"] == "no metrics.csv file"


def test_a_config_yaml_cut_short_or_emptied_is_refused_not_read_as_the_defaults(tmp_path):
    """An emptied config.yaml was read as the defaults (a row of `(no params)`), one cut after
    `block_size` as a 4-layer model with the default tokenizer: the report said what the run never was."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    config = Path(run) / "config.yaml"
    whole = config.read_text()
    for damaged in ("", whole[:whole.index("n_layer")]):
        config.write_text(damaged)
        with pytest.raises(UserError, match=r"config.yaml is damaged \(cut short or emptied\): it lacks model\.\w+"):
            compare.main([run, "--out", str(tmp_path / "cmp")])
    assert not (tmp_path / "cmp").exists()


def test_the_legends_of_runs_differing_in_many_keys_lie_whole_inside_the_pictures(tmp_path, monkeypatch):
    """Five runs differing in a dozen config values, one a long dataset path: settings.png's legend ran
    off both sides of its 4.2 in panel (4 columns), val_loss.png's covered the curves and ran off the
    right edge, and tight layout warned on stderr. Now one entry a line below the plot, the paths cut
    to their file names, the labels wrapped to the picture's width, the picture grown to hold them."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    figures = capture_figures(monkeypatch)
    folder = "corpora/" + "a_folder_with_a_long_name/" * 12
    many = [config_run(tmp_path / f"r{i}", [(0, "4.1", "4.1"), (10, f"{3.9 - i / 10}", f"{3.9 - i / 10}")], **{
        "model.n_head": 2 ** (i % 3), "model.n_layer": 2 + i, "model.n_embd": 32 * (i + 1), "model.dropout": i / 10,
        "data.dataset": f"{folder}tinyshakespeare_{i}.txt", "data.tokenizer": ("char", "word")[i % 2],
        "train.lr": 1e-3 * (i + 1), "train.min_lr": 1e-4 * (i + 1), "train.warmup_iters": 10 * i,
        "train.batch_size": 8 + i, "train.weight_decay": i / 100, "train.grad_clip": 1 + i})
        for i in range(5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compared([*many, "--out", str(tmp_path / "cmp")])
    assert [str(w.message) for w in caught] == []  # (tight layout's "cannot be made large enough")
    for name in ("val_loss.png", "settings.png"):
        fig = figures[name]
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        (legend,) = fig.legends or [fig.axes[0].get_legend()]
        box, picture = legend.get_window_extent(renderer), fig.bbox
        assert picture.x0 <= box.x0 and box.x1 <= picture.x1 and picture.y0 <= box.y0 and box.y1 <= picture.y1, name
        assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes), name  # no curve covered
        texts = legend.get_texts()
        assert len({round(t.get_window_extent(renderer).x0) for t in texts}) == 1, name  # one entry a line
        assert all("dataset=tinyshakespeare_" in t.get_text() and "folder" not in t.get_text() for t in texts), name


def test_an_unfinished_run_among_runs_of_many_keys_leaves_the_pictures_whole(tmp_path, monkeypatch):
    """An unfinished run's "off the chart: dataset=..., tokenizer=..., ... (unfinished)" note and settings.png's
    "not drawn, no finished run: ..." title line were one line each, wider than the picture: val_loss.png's axes
    were squeezed into its right third, the note and the title cut at the edges, and the legend ran off the
    right (with four runs, constrained layout warned that the axes collapsed). Now both are wrapped."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    figures = capture_figures(monkeypatch)
    keys = {"train.lr": 2e-3, "train.min_lr": 2e-4, "train.dtype": "auto"}
    shk = config_run(tmp_path / "shk", [(0, "4.2", "4.2"), (10, "3.96", "3.96"), (20, "3.85", "3.85")],
                     **{"data.dataset": "tinyshakespeare.txt", "data.tokenizer": "char"})
    unfinished = config_run(tmp_path / "unf", [(s, "5.7", f"{5.7 - s / 200}") for s in range(0, 400, 20)],
                            **{"data.tokenizer": "bpe", "train.max_iters": 100000, **keys})
    trained_on(unfinished, "", step=380)
    others = [config_run(tmp_path / name, [(0, "4.1", "4.1"), (10, "3.7", "3.7"), (20, "3.5", f"{3.5 + i}")],
                         **{"data.tokenizer": tokenizer, **keys})
              for i, (name, tokenizer) in enumerate((("sc", "char"), ("sb", "bpe")))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compared([shk, unfinished, *others, "--out", str(tmp_path / "cmp")])
    assert [str(w.message) for w in caught] == []  # ("constrained_layout not applied because axes sizes collapsed")
    for name in ("val_loss.png", "settings.png"):
        fig = figures[name]
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
        texts = [t for t in [fig._suptitle, *fig.texts, *(t for ax in fig.axes for t in (ax.title, *ax.texts)),
                             *(t for legend in legends for t in legend.get_texts())]
                 if t is not None and t.get_text().strip()]
        assert any("unfinished" in t.get_text() or "no finished run" in t.get_text() for t in texts), name
        for t in texts:  # every title, note, label and legend entry lies whole inside the picture
            box = t.get_window_extent(renderer)
            assert fig.bbox.x0 - 1 <= box.x0 and box.x1 <= fig.bbox.x1 + 1, (name, t.get_text())
        assert fig.axes[0].get_window_extent(renderer).width > 0.5 * fig.bbox.width, name  # not squeezed


def test_a_run_training_now_is_told_from_a_stopped_one_and_its_final_train_loss_is_an_evals(tmp_path):
    """compare.py showed a killed run as `step 20/30`, exactly as one still training, and took its
    final train loss from the last row, a log row (the mean of the last few batches) where it stopped
    between evals. Its lock is tried: held, a training now; not held, killed, even where the pid its
    .lock names is alive (in a container every training is pid 1: shown as training forever)."""
    run = tmp_path / "run"
    fake_run(run, 1, [(0, "4.1", "4.1"), (10, "3.9", "3.8"), (20, "3.2", "")])  # (a log row last)
    cfg = runs.read_config(run)
    cfg.train.max_iters = 30
    runs.write_config(run, cfg)
    (run / runs.LOCK).write_text("99999999\n")  # beyond Linux's pid_max: a killed training's lock file
    summary = runs.summarize_run(run)
    assert (summary["status"], summary["final_train_loss"]) == ("step 20/30", 3.9)
    (run / runs.LOCK).write_text("1\n")  # a live pid, no lock held
    assert runs.summarize_run(run)["status"] == "step 20/30"
    with runs.run_lock(run, resume=True):  # a training holds it
        assert runs.summarize_run(run)["status"] == "training, step 20/30"
        # its rows reached the end but its last save failed (ckpt.pt at step 10): not done, and a resume
        # training it now is told (it was not: the rows alone said done)
        cfg.train.max_iters = 20
        runs.write_config(run, cfg)
        torch.save({"format": FORMAT, "step": 10}, run / "ckpt.pt")
        assert runs.summarize_run(run)["status"] == "training, step 20/20"
    assert runs.summarize_run(run)["status"] == "step 10/20"


def test_a_training_starting_while_a_report_tries_its_lock_waits_for_it(tmp_path, monkeypatch):
    """summarize_run (compare.py, a sweep's report between runs) holds a run's lock for microseconds to
    see whether a training does; a training starting in that moment tries again instead of being refused."""
    import fcntl
    run = tmp_path / "run"
    run.mkdir()
    fd = os.open(run / runs.LOCK, os.O_RDONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_SH)  # as lock_holder takes it
    waits = []
    def report_done(seconds):  # the report lets go while the training waits
        waits.append(seconds)
        os.close(fd)
    monkeypatch.setattr(runs.time, "sleep", report_done)
    with runs.run_lock(run) as held:
        assert held()
    assert waits == [0.05]
    monkeypatch.undo()
    fd = os.open(run / runs.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held for good: still refused
    try:
        with pytest.raises(UserError, match="is in use by another training"):
            with runs.run_lock(run):
                pass
    finally:
        os.close(fd)


def test_a_path_with_spaces_is_cut_to_its_file_name_in_a_legend():
    """`dataset=/data/sub dir with spaces/a.txt` showed as `dataset=sub dir with a.txt`: neither the
    path nor its file name."""
    assert plots.shortened(["n_head=2, dataset=/data/sub dir with spaces/a b.txt, lr=0.1", "n_head=4, dataset=stories"]) \
        == ["n_head=2, dataset=a b.txt, lr=0.1", "n_head=4, dataset=stories"]
    # two files of one name: as many of their last parts as tell them apart (whole paths crowded the ticks)
    assert plots.shortened(["dataset=/a/x.txt", "dataset=/b/x.txt"]) == ["dataset=a/x.txt", "dataset=b/x.txt"]
    assert plots.shortened(["dataset=/home/alice/corpora/v1/in.txt", "dataset=/home/alice/corpora/v2/in.txt"]) \
        == ["dataset=v1/in.txt", "dataset=v2/in.txt"]


def test_a_long_tick_label_is_cut_after_a_late_underscore_or_at_the_width():
    """A piece longer than a line is cut after its last '_' or '-' within the width, where that leaves over half a
    line; an earlier one would leave a sliver of a line ('a_'), so it is cut at the width instead."""
    assert plots.wrapped("a_verylongfilenamewithoutbreaks_v2.txt") == "a_verylongfilenamewi\nthoutbreaks_v2.txt"
    assert plots.wrapped("abcdefghij_klmnopqrstuvwxyz_0123456789.txt") == \
        "abcdefghij_\nklmnopqrstuvwxyz_\n0123456789.txt"
    assert plots.wrapped("dataset=/data/d1/train v2.txt") == "dataset=/data/d1/\ntrain v2.txt"


# ---- the pictures: lines told apart however many, points at their ticks, labels as the reader sees them ----


def setting_rows(settings: list[dict], seeds=(1,)) -> list[dict]:
    """Results rows of finished runs, one per setting and seed: a best val loss and a val-loss curve
    from 4.2 at step 0 down (an untrained model's loss, above the plot's y-range) to about 1.5."""
    rows = []
    for i, setting in enumerate(settings):
        for seed in seeds:
            final = 1.5 + i / 40 + seed / 200
            curve = [{"step": s, "val_loss": 4.2 if s == 0 else final + 1 / s} for s in range(0, 101, 10)]
            rows.append({**setting, "train.seed": seed, "best_val_loss": final, "metrics": curve})
    return rows


def drawn_as(line) -> tuple:
    """What tells a line from another: its colour, line style and marker."""
    from matplotlib.colors import to_hex
    return to_hex(line.get_color()), line.get_linestyle(), line.get_marker()


def test_forty_lines_are_forty_different_lines_in_both_pictures(monkeypatch):
    """The colours repeated after 10 lines, all solid with the same marker: 20 runs of a sweep had
    pairs of identical legend entries (n_head=1, lr=1e-4 and n_head=2, lr=1e-4 alike)."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"model.n_head": h, "train.lr": lr} for h in (1, 2, 4, 8) for lr in range(1, 11)])
    groups = report.group_by_setting(rows, ["model.n_head", "train.lr", "train.seed"])
    plots.val_loss_png(groups)
    ax = figures["val_loss.png"].axes[0]
    assert len(ax.lines) == 40 and len({drawn_as(line) for line in ax.lines}) == 40
    assert len({drawn_as(handle) for handle in ax.get_legend().legend_handles}) == 40  # and so are their legend entries
    assert {drawn_as(line)[1:] for line in ax.lines[:10]} == {("-", ".")}  # up to 10 lines: as before
    rows = setting_rows([{"model.n_head": h, "train.lr": lr} for h in (1, 2) for lr in range(1, 13)])
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.lr", "train.seed"]))  # 12 lr lines
    data_lines = [bar[0] for bar in figures["settings.png"].axes[0].containers]  # each error bar's line of means
    assert len(data_lines) == 12 and len({drawn_as(line) for line in data_lines}) == 12


def test_curves_on_the_same_values_all_show(monkeypatch):
    """A sweep over model.n_head=1,2,4 starts every setting from the same weights: its three val-loss curves lay on
    one another, and the picture showed the last one only (not a pixel of the other two's colours), while the legend
    listed three. A line with later ones on it is drawn wider, and shows around them; lines apart keep one width."""
    pytest.importorskip("matplotlib")
    import matplotlib.image
    from matplotlib.colors import to_rgb
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = [{**row, "best_val_loss": 1.5} for row in setting_rows([{"model.n_head": h} for h in (1, 2, 4)], (1, 2))]
    for row in rows:  # the same curve for every setting
        row["metrics"] = [{"step": s, "val_loss": 4.2 if s == 0 else 1.5 + 1 / s} for s in range(0, 101, 10)]
    png = plots.val_loss_png(report.group_by_setting(rows, ["model.n_head", "train.seed"]))
    ax = figures["val_loss.png"].axes[0]
    box = ax.get_window_extent()  # the axes, in the PNG's pixels from its bottom left (its legend is below them)
    pixels = matplotlib.image.imread(io.BytesIO(png))[..., :3]
    pixels = pixels[pixels.shape[0] - int(box.y1):pixels.shape[0] - int(box.y0), int(box.x0):int(box.x1)]
    lines = ax.lines
    assert len(lines) == 3
    for line in lines:
        assert (np.abs(pixels - np.array(to_rgb(line.get_color()))).max(axis=-1) < 0.02).sum() > 200, line.get_label()
    widths = [line.get_linewidth() for line in lines]
    assert widths[0] > widths[1] > widths[2]
    plots.val_loss_png(report.group_by_setting(setting_rows([{"model.n_head": h} for h in (1, 2, 4)], (1, 2)),
                                               ["model.n_head", "train.seed"]))  # curves apart: as before
    assert len({line.get_linewidth() for line in figures["val_loss.png"].axes[0].lines}) == 1
    # curves that share step 0's loss alone (off the top), another eval_interval's, are apart: one width
    rows = [{"train.eval_interval": 10, "train.seed": 1, "best_val_loss": 1.5,
             "metrics": [{"step": s, "val_loss": 4.2 if s == 0 else 1.5 + 1 / s} for s in range(0, 101, 10)]},
            {"train.eval_interval": 25, "train.seed": 1, "best_val_loss": 1.9,
             "metrics": [{"step": s, "val_loss": 4.2 if s == 0 else 1.9 + 1 / s} for s in (0, 25, 75)]}]
    plots.val_loss_png(report.group_by_setting(rows, ["train.eval_interval", "train.seed"]))
    assert len({line.get_linewidth() for line in figures["val_loss.png"].axes[0].lines}) == 1
    # ten curves on one another: nested, but none wider than 1.5 + 7.2 points (it gave 17.7)
    same = [{"step": s, "val_loss": 4.2 if s == 0 else 1.5 + 1 / s} for s in range(0, 101, 10)]
    rows = [{"train.threads": n, "train.seed": 1, "best_val_loss": 1.5, "metrics": same} for n in range(1, 11)]
    plots.val_loss_png(report.group_by_setting(rows, ["train.threads", "train.seed"]))
    widths = [line.get_linewidth() for line in figures["val_loss.png"].axes[0].lines]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 10 and max(widths) <= 1.5 + 7.2 + 1e-9


def test_a_numbers_axis_runs_from_small_to_large(monkeypatch):
    """`compare.py` of runs with n_head 4, 1 and 2, in that order, drew settings.png's axis 4, 1, 2;
    words keep the order they came in."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    for key, given, drawn in [("model.n_head", [4, 1, 2], [1, 2, 4]), ("train.lr", [3e-3, 1e-4], [1e-4, 3e-3]),
                              ("data.tokenizer", ["word", "char"], ["word", "char"])]:
        plots.settings_png(report.group_by_setting(setting_rows([{key: v} for v in given]), [key, "train.seed"]))
        ax = figures["settings.png"].axes[0]
        assert len(ax.get_xticklabels()) == len(drawn)
        # setting_rows gives the i-th setting the best val loss 1.5 + i/40 (+ 1/200 for seed 1)
        line = ax.containers[0][0]
        means = [y for _, y in sorted(zip(line.get_xdata(), line.get_ydata()))]  # from the left tick to the right
        assert means == pytest.approx([1.5 + given.index(v) / 40 + 1 / 200 for v in drawn]), key


def test_a_key_that_does_not_apply_is_a_tick_of_its_own_beside_the_numbers(monkeypatch):
    """A sweep over data.bpe_vocab_size=280,300 and data.tokenizer=char,bpe: the char run's vocabulary size does
    not apply (None), and settings.png's ticks read `None, 280, 300`, evenly apart as words, the bpe points not
    joined by a line."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"data.bpe_vocab_size": v, "data.tokenizer": t}
                         for v, t in ((300, "bpe"), (None, "char"), (280, "bpe"))])
    plots.settings_png(report.group_by_setting(rows, ["data.bpe_vocab_size", "data.tokenizer", "train.seed"]))
    ax = figures["settings.png"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [plots.NOT_APPLIED, "280", "300"]
    assert list(ax.get_xticks()) == [-1.0, 0.0, 1.0]  # the numbers at their distance, 'does not apply' left of them
    bpe, char = sorted(ax.containers, key=lambda c: len(c[0].get_xdata()), reverse=True)
    assert len(bpe[0].get_xdata()) == 2 and bpe[0].get_linestyle() != "None"  # 280 to 300: a line
    assert char[0].get_linestyle() == "None" and round(char[0].get_xdata()[0]) == -1


def test_the_settings_points_stay_near_their_ticks_however_many_lines(monkeypatch):
    """Ten lines drawn 0.06 apart lay up to 0.27 from their tick, half-way to the next one's."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    for lines in (2, 10, 30):
        rows = setting_rows([{"model.n_head": h, "train.lr": lr} for h in (1, 2) for lr in range(lines)])
        plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.lr", "train.seed"]))
        ax = figures["settings.png"].axes[0]
        xs = [x for c in ax.containers for x in c[0].get_xdata()]
        assert max(abs(x - round(x)) for x in xs) <= 0.2 + 1e-9, lines
        assert len({round(x, 6) for x in xs if round(x) == 0}) == lines  # still side by side, none on another
    rows = setting_rows([{"model.n_head": h, "train.lr": lr} for h in (1, 2) for lr in range(2)])
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.lr", "train.seed"]))
    assert sorted({round(x, 2) for c in figures["settings.png"].axes[0].containers
                   for x in c[0].get_xdata()}) == [-0.03, 0.03, 0.97, 1.03]  # few lines: 0.06 apart, as before


def test_the_settings_x_ticks_are_file_names_that_do_not_run_together(monkeypatch):
    """settings.png's ticks were the whole paths (`/long/dir/tinyshakespeare.txt`), one running into the
    next: shortened() cut only `key=value` labels, the legend's. Now file names, paths where two files
    share a name, slanted where they would touch."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from tinygpt import report
    figures = capture_figures(monkeypatch)

    def ticks(datasets: list[str]) -> list[str]:
        rows = setting_rows([{"data.dataset": d, "model.n_head": h} for d in datasets for h in (1, 2)])
        plots.settings_png(report.group_by_setting(rows, ["data.dataset", "model.n_head", "train.seed"]))
        fig = figures["settings.png"]
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        boxes = [t.get_window_extent(renderer) for t in fig.axes[0].get_xticklabels()]
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), datasets
        return [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks(["/long/dir/a.txt", "/long/dir/tinyshakespeare.txt", "/other/dir/stories_copy.txt"]) == [
        "a.txt", "tinyshakespeare.txt", "stories_copy.txt"]
    assert ticks(["/x/a.txt", "/y/a.txt"]) == ["x/a.txt", "y/a.txt"]  # one name, two files: what tells them apart
    long = ["/tmp/data/a very long folder name for testing labels/x/text.txt",
            "/tmp/data/another quite long folder name here/x/text.txt"]  # (the axes collapsed, labels cut)
    assert ticks(long) == ["a very long folder\nname for testing\nlabels/x/text.txt",  # wrapped after / or at a space
                           "another quite long\nfolder name here/x/\ntext.txt"]
    # one file name of 70 characters without a space stayed one piece: the panel collapsed, with a warning
    name = "shakespeare_first_30k_chars_lowercased_v2_cleaned_dedup_tokfix"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shown = ticks([f"/d/{name}_a.txt", f"/d/{name}_b.txt"])
        figures["settings.png"].savefig(io.BytesIO(), format="png")
    assert [str(w.message) for w in caught] == [], [str(w.message) for w in caught]
    assert all(max(map(len, label.split("\n"))) <= plots.TICK_WIDTH for label in shown), shown
    assert [label.replace("\n", "") for label in shown] == [f"{name}_a.txt", f"{name}_b.txt"]


def test_labels_that_differ_only_in_characters_the_font_lacks_are_told_apart(monkeypatch):
    """`日本.txt` and `中国.txt` were both drawn `dataset=□□.txt` (DejaVu Sans has no CJK): two runs alike.
    Now they are written as code points, only where they would look alike; a file name that is not
    UTF-8 is written with its bytes."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    from matplotlib.font_manager import FontProperties, fontManager, get_font
    if any(ord("日") in get_font(f).get_charmap() for f in fontManager._find_fonts_by_props(FontProperties())):
        pytest.skip("matplotlib's font here draws CJK: nothing looks alike")
    figures = capture_figures(monkeypatch)
    labels = ["dataset=日本.txt", "dataset=中国.txt", "dataset=シェイクスピア.txt", "dataset=tiny.txt",
              "dataset=\udce9.txt", "dataset=\udce8.txt"]  # (the last two: bytes 0xe9 and 0xe8 as Python holds them)
    plots.val_loss_png([{"label": label, "runs": [{"metrics": [{"step": 0, "val_loss": 4.0},
                                                               {"step": 10, "val_loss": 3.0 + i / 10}]}]}
                        for i, label in enumerate(labels)])
    shown = [t.get_text() for t in figures["val_loss.png"].axes[0].get_legend().get_texts()]
    assert shown == ["dataset=\\u65e5\\u672c.txt", "dataset=\\u4e2d\\u56fd.txt", "dataset=シェイクスピア.txt",
                     "dataset=tiny.txt", "dataset=\\xe9.txt", "dataset=\\xe8.txt"]  # (a lone box: left as it is)
    rows = setting_rows([{"data.dataset": f"/corpora/{d}", "model.n_head": h}
                         for d in ("日本.txt", "中国.txt", "a.txt") for h in (1, 2)])
    plots.settings_png(report.group_by_setting(rows, ["data.dataset", "model.n_head", "train.seed"]))
    assert [t.get_text() for t in figures["settings.png"].axes[0].get_xticklabels()] == [
        "\\u65e5\\u672c.txt", "\\u4e2d\\u56fd.txt", "a.txt"]


@pytest.mark.parametrize("seeds", [(1,), (1, 2)], ids=["one seed", "two seeds"])
def test_the_off_the_top_note_counts_each_hidden_point_once(monkeypatch, seeds):
    """Two runs' step-0 losses above the axis were 'off the top: 4 early point(s)': each setting's band
    edges (mean + std and mean - std, the same line for one seed) were counted, not its points."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"model.n_head": h} for h in (1, 2)], seeds)
    plots.val_loss_png(report.group_by_setting(rows, ["model.n_head", "train.seed"]))
    (note,) = figures["val_loss.png"].axes[0].texts
    assert note.get_text().startswith("off the top: 2 early point(s), up to 4.20 at step 0"), note.get_text()


# ---- runs on other data, the n the pictures show, a diverged run, a key that does not apply ----


def trained_on(run: str, digest: str, step: int = 10) -> str:
    """Give a fake run the ckpt.pt of a run trained on data of `digest` (train.py records data_digest)."""
    torch.save({"format": FORMAT, "step": step, "data_digest": digest}, Path(run) / "ckpt.pt")
    return run


def test_a_run_diverged_at_its_first_eval_names_no_checkpoint_it_lacks(tmp_path):
    """A run whose step-0 eval diverged saved no ckpt.pt: its status named one, `(ckpt.pt: step 0)`."""
    run = config_run(tmp_path / "d", [(0, "inf", "inf")], **{"train.max_iters": 40})
    assert runs.summarize_run(run)["status"] == "diverged at step 0"
    trained_on(run, "a" * 64, step=0)  # with its checkpoint, where a resume starts is said
    assert runs.summarize_run(run)["status"] == "diverged at step 0 (ckpt.pt: step 0)"
    # the val loss alone not finite (train.py's row of a diverged eval: the train loss was finite)
    run = config_run(tmp_path / "v", [(0, "4.1", "4.1"), (10, "3.9", "nan")], **{"train.max_iters": 40})
    assert runs.summarize_run(run)["status"] == "diverged at step 10"


def test_runs_of_one_config_on_other_process_counts_are_different_settings(tmp_path):
    """A one-process run and a torchrun run of two, both train.batch_size=4 (each process's: global batches 4
    and 8), were 'the same training twice, counted as one seed' and their configs 'identical'. A torchrun run's
    ckpt.pt keeps one random state per process: the report's train.processes column tells them apart."""
    rows = [(0, "4.1", "4.1"), (10, "3.9", "3.9")]
    one = trained_on(config_run(tmp_path / "one", rows, **{"train.seed": 1337}), "a" * 64)
    two = config_run(tmp_path / "two", [(0, "4.0", "4.0"), (10, "3.0", "3.0")], **{"train.seed": 1337})
    torch.save({"format": FORMAT, "step": 10, "data_digest": "a" * 64, "rng_ranks": [torch.zeros(2)] * 2},
               Path(two) / "ckpt.pt")
    assert runs.summarize_run(two)["config"][runs.PROCESSES] == 2
    assert runs.summarize_run(one)["config"][runs.PROCESSES] == 1
    _, printed = compared([one, two, "--out", str(tmp_path / "cmp")])
    assert "share train.seed" not in printed and "configs are identical" not in printed, printed
    assert "| one | 1 |" in printed and "| two | 2 |" in printed


def test_runs_trained_on_different_data_are_different_settings(tmp_path):
    """Two runs of one config whose dataset file's text changed between them (the same path) were
    'the same training twice, counted as one seed' (with other seeds: two seeds of one setting, averaged),
    and the configs 'identical'; with a new vocabulary they differed only in model.vocab_size, and
    nothing said their losses do not compare. Each checkpoint records the data's digest."""
    rows = [(0, "4.1", "4.1"), (10, "3.9", "3.9")]
    a = trained_on(config_run(tmp_path / "cA", rows, **{"train.seed": 1337}), "a" * 64)
    b = trained_on(config_run(tmp_path / "cB", [(0, "4.0", "4.0"), (10, "3.0", "3.0")], **{"train.seed": 1337}),
                   "b" * 64)
    assert runs.summarize_run(a)["data_digest"] == "a" * 64
    _, printed = compared([a, b, "--out", str(tmp_path / "cmp")])
    assert "share train.seed" not in printed and "configs are identical" not in printed, printed
    assert "the dataset's text changed between them" in printed and "do not compare as numbers" in printed
    assert "| cA | aaaaaaaaaa |" in printed  # the digest column tells the runs apart
    # another seed on the new data: two settings of one seed each, not one setting of 2 seeds
    c = trained_on(config_run(tmp_path / "cC", rows, **{"train.seed": 7}), "b" * 64)
    _, printed = compared([a, c, "--out", str(tmp_path / "cmp2")])
    assert "±" not in printed
    summary = list(csv.DictReader(io.StringIO((tmp_path / "cmp2" / "summary.csv").read_text())))
    assert [r["setting"] for r in summary] == ["digest=aaaaaaaaaa", "digest=bbbbbbbbbb"]
    # a new text of another vocabulary: the runs differ in model.vocab_size alone, and their losses do not compare
    d = trained_on(config_run(tmp_path / "cD", rows, **{"train.seed": 1337, "model.vocab_size": 70}), "d" * 64)
    result, printed = compared([a, d, "--out", str(tmp_path / "cmp3")])
    assert result["varied"] == ["model.vocab_size"] and "do not compare as numbers" in printed
    # the same data, or no digest recorded (an older checkpoint): one setting of two seeds, as before
    e = trained_on(config_run(tmp_path / "cE", rows, **{"train.seed": 8}), "a" * 64)
    old = config_run(tmp_path / "old", rows, **{"train.seed": 9})
    _, printed = compared([a, e, old, "--out", str(tmp_path / "cmp4")])
    assert "| all runs | 3 |" in printed and "digest" not in printed, printed


def test_one_dataset_spelt_two_ways_is_one_setting(tmp_path):
    """Two seeds trained on one file, given once by its absolute path and once by a relative one, were two
    settings whose losses "do not compare as numbers"; both checkpoints recorded the same data_digest."""
    rows = [(0, "4.1", "4.1"), (10, "3.9", "3.9")]
    a = trained_on(config_run(tmp_path / "cA", rows, **{"train.seed": 1, "data.dataset": "/data/d.txt"}), "a" * 64)
    b = trained_on(config_run(tmp_path / "cB", rows, **{"train.seed": 2, "data.dataset": "../data/d.txt"}), "a" * 64)
    result, printed = compared([a, b, "--out", str(tmp_path / "cmp")])
    assert result["varied"] == ["train.seed"] and "do not compare" not in printed and "| all runs | 2 |" in printed
    c = trained_on(config_run(tmp_path / "cC", rows, **{"train.seed": 3, "data.dataset": "/data/e.txt"}), "c" * 64)
    result, printed = compared([a, c, "--out", str(tmp_path / "cmp2")])  # other data: other settings, as before
    assert "data.dataset" in result["varied"] and "do not compare as numbers" in printed
    d = config_run(tmp_path / "cD", rows, **{"train.seed": 4, "data.dataset": "/data/d.txt"})  # no checkpoint:
    e = config_run(tmp_path / "cE", rows, **{"train.seed": 5, "data.dataset": "/data/e.txt"})  # no digest to go by
    assert "data.dataset" in compared([d, e, "--out", str(tmp_path / "cmp3")])[0]["varied"]


def test_a_run_resumed_on_another_schedule_is_said_to_be_one(tmp_path):
    """A run trained 20 steps of a 20-step schedule, then resumed with train.max_iters=40, was averaged as
    a seed of 40-step runs without a word: its lr had decayed by step 20 and rose again after. The logged
    rates (a row at step s logs the step before's) against the config's schedule now say so."""
    from tinygpt.training import lr_at

    def run(name: str, seed: int, schedule_iters: list[int]) -> str:
        cfg = Config()
        cfg.train.seed, cfg.train.max_iters, cfg.train.warmup_iters = seed, 40, 0
        path = tmp_path / name
        path.mkdir()
        runs.write_config(path, cfg)
        rows = []
        for step in range(0, 41, 10):
            t = Config().train
            t.max_iters, t.warmup_iters = schedule_iters[0] if step <= 20 else schedule_iters[1], 0
            lr = lr_at(max(step - 1, 0), t)  # (a row logs the rate of the step before it)
            rows.append({"step": step, "train_loss": "3.9", "val_loss": "3.9", "lr": f"{lr:.3e}"})
        runs.write_metrics(path, rows)
        return str(path)
    straight = run("a", 1, [40, 40])
    resumed = run("b", 2, [20, 40])
    with contextlib.redirect_stderr(io.StringIO()) as err:
        compared([straight, resumed, "--out", str(tmp_path / "cmp")])
    notes = [line for line in err.getvalue().splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith(f"note: {resumed}: its metrics.csv logs lr=")
    assert " at step 10, " in notes[0]
    assert "(resumed with a larger train.max_iters or another train.lr?)" in notes[0]


def test_a_metric_no_pair_could_be_compared_in_is_not_said_to_show_no_difference():
    """Probe shares alike in every seed (± 0: no interval) were listed among the metrics in which 'No two
    settings differ', though no pair was compared in them; the parenthesis gave the n >= 2 rule alone."""
    from tinygpt import report
    rows = [{"run": f"h{head}s{seed}", "status": "done", "model.n_head": head, "train.seed": seed,
             "best_val_loss": loss, "antecedent": 0.5, "distractor": 0.25, "attribute_ratio": 1 + seed * head / 10}
            for head, losses in ((1, (2.0, 2.1)), (2, (2.05, 2.15))) for seed, loss in zip((1, 2), losses)]
    groups = report.group_by_setting(rows, ["model.n_head", "train.seed"])
    last = report.summary_text(groups, report.DIFFERENCES_IN, True).splitlines()[-1]
    assert last.startswith("No two settings differ beyond their 95% intervals in best_val_loss, attribute_ratio (2 "
                           "comparisons, of the pairs with an interval on both sides: 2 finished seeds or more, not "
                           "all alike; antecedent, distractor not compared: no pair has an interval on both sides)")


def test_one_setting_has_no_pairs_to_speak_of_and_a_seed_run_three_times_is_counted_once():
    """One setting over seeds is a table, not a comparison: no 'No two settings ...' line; the same seed
    trained three times is said to be so, its three runs one seed."""
    from tinygpt import report
    rows = [{"run": f"h1s{seed}", "status": "done", "model.n_head": 1, "train.seed": seed, "best_val_loss": loss}
            for seed, loss in ((1, 2.0), (2, 2.1))]
    text = report.summary_text(report.group_by_setting(rows, ["model.n_head", "train.seed"]), ["best_val_loss"],
                               False)
    assert text.endswith("| n_head=1 | 2 | 2.0500 ± 0.0707 [1.4147, 2.6853] |\n"), text
    rows = [{"run": f"r{i}", "status": "done", "model.n_head": 1, "train.seed": 1, "best_val_loss": 2.0 + i / 10}
            for i in range(3)]
    groups = report.group_by_setting(rows, ["model.n_head", "train.seed"])
    assert report.repeats_note(groups) == ("note: r0, r1 and r2 (n_head=1) share train.seed=1: the same training 3 "
                                           "times, counted as one seed (their mean), not 3\n")
    stats = groups[0]["stats"]["best_val_loss"]
    assert stats["n"] == 1 and stats["mean"] == pytest.approx(2.1)


def test_the_n_shown_is_the_n_counted(tmp_path, monkeypatch):
    """val_loss.png said `n_head=2 (mean of 2)`, averaging a seed stopped early, where the table said
    n=1; settings.png's title said 'over 2 seeds' of a setting of one (a point with no bar, looking
    precise); results.md said 'No two settings differ beyond their 95% intervals' where no pair had
    an interval; a probe column of one seed of two showed no n of its own."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    curve = [(0, "4.1", "4.1"), (20, "3.0", "3.0"), (40, "2.0", "2.0")]
    a = [config_run(tmp_path / f"A{s}", curve, **{"model.n_head": 1, "train.seed": s}) for s in (1, 2)]
    b1 = config_run(tmp_path / "B1", curve, **{"model.n_head": 2, "train.seed": 1})
    b2 = config_run(tmp_path / "B2", [(0, "4.1", "4.1"), (10, "9.0", "9.0")],  # stopped at step 15 of 40
                    **{"model.n_head": 2, "train.seed": 2, "train.max_iters": 40})
    trained_on(b2, "", step=15)
    _, printed = compared([*a, b1, b2, "--out", str(tmp_path / "cmp")])
    assert "| n_head=2 | 1 |" in printed and "step 15/40" in printed
    ax = figures["val_loss.png"].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["n_head=1 (mean of 2)",
                                                                   "n_head=2 (n=1, 1 unfinished left out)"]
    assert list(ax.lines[1].get_ydata()) == [4.1, 3.0, 2.0]  # B1's curve, not its mean with B2's
    title = figures["settings.png"]._suptitle.get_text()
    assert "over 2 seeds" not in title and "n = 1 to 2" in title, title
    assert title.count("\n") == 1, title  # two lines, as written: the first was 2 characters too wide for a panel
    assert sorted(t.get_text() for t in figures["settings.png"].axes[0].texts) == ["n=1", "n=2"]
    assert "No two settings could be compared in best_val_loss" in printed and "No two settings differ" not in printed
    rows = [{"model.n_head": 1, "train.seed": s, "best_val_loss": 1.0 + s / 10, "antecedent": 0.5} for s in (1, 2)]
    del rows[1]["antecedent"]  # (its probe.json is missing)
    table = report.summary_markdown(report.group_by_setting(rows, ["model.n_head", "train.seed"]),
                                    ["best_val_loss", "antecedent"])
    assert "| n_head=1 | 2 | 1.1500 ± 0.0707 [0.5147, 1.7853] | 50.0% (n=1) |" in table, table


def test_a_diverged_run_does_not_flatten_the_others(monkeypatch):
    """A sweep over train.lr=1e-3,1e4: the 1e4 run's loss rose to 1.75e11 before it failed, the y-axis
    ran to 1.75e11 and the finished run's curve was a flat line at its bottom."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    good = {"train.lr": 1e-3, "train.seed": 1, "status": "done", "best_val_loss": 2.0,
            "metrics": [{"step": s, "val_loss": 4.0 - s / 50} for s in range(0, 101, 10)]}
    bad = {"train.lr": 1e4, "train.seed": 1, "status": "failed (exit 2: training diverged)", "best_val_loss": 3.0,
           "metrics": [{"step": 0, "val_loss": 4.0}, {"step": 10, "val_loss": 5e3}, {"step": 20, "val_loss": 1.75e11}]}
    report.seeds_val_loss_png(report.group_by_setting([good, bad], ["train.lr", "train.seed"]))
    ax = figures["val_loss.png"].axes[0]
    assert ax.get_ylim()[1] < 5, ax.get_ylim()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lr=0.001", "lr=10000.0 (failed)"]
    (note,) = ax.texts
    assert "off the chart: lr=10000.0 (failed), up to 1.75e+11 at step 20" in note.get_text(), note.get_text()


def test_an_unfinished_runs_first_eval_off_the_top_is_an_early_point(monkeypatch):
    """A sweep interrupted at step 500 of 1500: both runs' step-0 points (4.18) above the axis were "off the top: 1
    early point(s)" and "off the chart: n_head=2 (unfinished), up to 4.18 at step 0", as if that run had left the
    chart (the note of a diverged one); it is the other early point."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    done = {"model.n_head": 1, "train.seed": 1, "status": "done", "best_val_loss": 2.4,
            "metrics": [{"step": s, "val_loss": 4.18 if s == 0 else 2.5 - s / 15000} for s in range(0, 1501, 250)]}
    stopped = {"model.n_head": 2, "train.seed": 1, "status": "step 500/1500", "best_val_loss": 2.45,
               "metrics": [{"step": s, "val_loss": 4.18 if s == 0 else 2.5 - s / 14000} for s in range(0, 501, 250)]}
    report.seeds_val_loss_png(report.group_by_setting([done, stopped], ["model.n_head", "train.seed"]))
    (note,) = figures["val_loss.png"].axes[0].texts
    assert note.get_text() == "off the top: 2 early point(s), up to 4.18 at step 0", note.get_text()


def test_an_unfinished_run_doing_better_sets_the_bottom_of_the_axis(monkeypatch):
    """An unfinished run at 2.45 beside a finished one at 5.0: the axis fitted the finished run alone
    (4.97 to 5.19), the unfinished one a line leaving the bottom, its note `up to 2.45`."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    done = {"train.max_iters": 20, "train.seed": 1, "status": "done", "best_val_loss": 4.97,
            "metrics": [{"step": s, "val_loss": 5.2 - s / 100} for s in range(0, 21, 10)]}
    going = {"train.max_iters": 100000, "train.seed": 1, "status": "step 900/100000", "best_val_loss": 2.45,
             "metrics": [{"step": s, "val_loss": 5.2 - s * 0.003} for s in range(0, 901, 50)]}
    report.seeds_val_loss_png(report.group_by_setting([done, going], ["train.max_iters", "train.seed"]))
    ax = figures["val_loss.png"].axes[0]
    assert ax.get_ylim()[0] < 2.5 and not ax.texts, (ax.get_ylim(), [t.get_text() for t in ax.texts])


def test_a_key_that_does_not_apply_is_not_named_none_in_the_settings_legend(monkeypatch):
    """A grid of data.tokenizer=char,bpe x data.bpe_vocab_size=300,400: the char line was `bpe_vocab_size=None`."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"data.tokenizer": "char", "data.bpe_vocab_size": None},
                         {"data.tokenizer": "bpe", "data.bpe_vocab_size": 300},
                         {"data.tokenizer": "bpe", "data.bpe_vocab_size": 400}])
    plots.settings_png(report.group_by_setting(rows, ["data.tokenizer", "data.bpe_vocab_size", "train.seed"]))
    (legend,) = figures["settings.png"].legends
    assert [t.get_text() for t in legend.get_texts()] == ["bpe_vocab_size: does not apply", "bpe_vocab_size=300",
                                                          "bpe_vocab_size=400"]


def test_a_runs_summary_takes_the_best_val_loss_the_median_speed_and_the_longest_time(tmp_path):
    """best_val_loss is the lowest eval (not the last), tokens_per_s the median of the log rows (a
    fast outlier, e.g. a row right after a resume, does not pull it up), wall_s the largest elapsed_s
    (not the last row's)."""
    run = tmp_path / "run"
    fake_run(run, 1, [(30, "2.0", "")])
    runs.write_metrics(run, [
        {"step": 0, "train_loss": "4.0", "val_loss": "3.0", "elapsed_s": "1.0"},
        {"step": 10, "train_loss": "3.5", "tokens_per_s": "10", "elapsed_s": "9.0"},
        {"step": 10, "train_loss": "3.0", "val_loss": "1.0", "elapsed_s": "5.0"},
        {"step": 20, "train_loss": "2.5", "tokens_per_s": "10", "elapsed_s": "7.0"},
        {"step": 20, "train_loss": "2.4", "val_loss": "2.0", "elapsed_s": "8.0"},
        {"step": 30, "train_loss": "2.3", "tokens_per_s": "1000", "elapsed_s": "6.0"}])
    summary = runs.summarize_run(run)
    assert summary["best_val_loss"] == 1.0
    assert summary["tokens_per_s"] == 10.0
    assert summary["wall_s"] == 9.0
    rows = runs.read_metrics(run, as_text=True)[:-1]  # log rows of 10, 10, then 30 and 20 tokens/s: median 15
    runs.write_metrics(run, [*rows, {"step": 30, "train_loss": "2.3", "tokens_per_s": "30", "elapsed_s": "6.0"},
                             {"step": 40, "train_loss": "2.2", "tokens_per_s": "20", "elapsed_s": "6.5"}])
    assert runs.summarize_run(run)["tokens_per_s"] == 15.0  # (an even count: not the lower middle, 10)


def test_a_stopped_runs_wall_s_counts_its_training_past_the_last_row(tmp_path):
    """A run stopped at step 5 (--stop-at, Ctrl-C) saves ckpt.pt at its step, 0.182 s of training, past its
    last metrics.csv row, the step-0 eval at 0.041 s: its wall_s read 0.0. A checkpoint at or before the
    last row (done; its save at the last row failed) adds nothing, nor a checkpoint's odd elapsed_s."""
    run = tmp_path / "run"
    fake_run(run, 1, [(30, "2.0", "")])
    runs.write_metrics(run, [{"step": 0, "train_loss": "4.0", "val_loss": "3.0", "elapsed_s": "0.041"}])
    for step, held, wall_s in ((5, 0.182, 0.182), (0, 0.5, 0.041), (5, float("nan"), 0.041), (5, True, 0.041),
                               (5, "0.9", 0.041)):
        torch.save({"format": FORMAT, "step": step, "elapsed_s": held}, run / "ckpt.pt")
        summary = runs.summarize_run(run)
        assert (summary["status"], summary["wall_s"]) == (f"step {step}/30", wall_s), (step, held)


def test_a_val_loss_band_stops_at_zero(tmp_path, monkeypatch):
    """One seed's spike (50 among 3.8s) drew val_loss.png's mean - 1 std band down to -7.5, and the loss
    axis to -10: a loss is never under 0."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    seeds = [config_run(tmp_path / f"s{s}", [(0, "4.1", "4.1"), (20, "3.8", "50.0" if s == 3 else "3.8")],
                        **{"train.seed": s}) for s in (1, 2, 3)]
    compared([*seeds, "--out", str(tmp_path / "cmp")])
    ax = figures["val_loss.png"].axes[0]
    (band,) = ax.collections
    lowest = min(float(y) for path in band.get_paths() for _, y in path.vertices)
    assert lowest == 0.0 and ax.get_ylim()[0] >= 0.0, (lowest, ax.get_ylim())


def test_a_long_run_names_loss_title_is_wrapped_inside_the_picture(tmp_path, monkeypatch):
    """loss.png's title, the run folder's name, ran off both edges for a 168-character name; wrapped, every
    '$' still escaped (a '\\$' cut in two starts mathtext)."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    figures = capture_figures(monkeypatch)
    name = "a_very_long_run_name_" * 7 + "$x$" + "_tail" * 5
    run = config_run(tmp_path / name, [(0, "4.1", "4.1"), (20, "3.8", "3.8")])
    plots.plot_run(run)
    fig = figures["loss.png"]
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    title = fig.axes[0].title
    box = title.get_window_extent(renderer)
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, title.get_text()
    assert "".join(title.get_text().split()).replace("\\$", "$") == name + ":loss", title.get_text()


def test_a_seed_trained_twice_is_drawn_at_the_mean_of_its_runs():
    """Two runs of one seed (val loss 2.0 and 3.0 at step 10) are one curve at 2.5: the lower of
    the two would have shipped as the seed's curve, hiding the unlucky repeat."""
    from tinygpt import report
    twice = [{"train.seed": 1, "metrics": [{"step": 0, "val_loss": 4.0}, {"step": 10, "val_loss": loss}]}
             for loss in (2.0, 3.0)]
    other = {"train.seed": 2, "metrics": [{"step": 10, "val_loss": 1.0}]}
    merged = report.one_run_per_seed([*twice, other])
    assert merged[0]["metrics"] == [{"step": 0, "val_loss": 4.0}, {"step": 10, "val_loss": 2.5}]
    assert merged[1] is other  # a seed trained once is its run


def test_two_seeds_get_a_band_of_one_sample_standard_deviation(monkeypatch):
    """A setting of 2 seeds is drawn with its ± 1 std band, the sample std (n - 1): the band was
    left out below 3 runs, or drawn with the population std (0.5 instead of 0.7071 here)."""
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PolyCollection
    figures = capture_figures(monkeypatch)
    runs_ = [{"metrics": [{"step": 0, "val_loss": 4.0 + d}, {"step": 10, "val_loss": 2.0 + d}]} for d in (0.0, 1.0)]
    plots.val_loss_png([{"label": "n_head=1", "runs": runs_}, {"label": "n_head=2", "runs": runs_[:1]}])
    ax = figures["val_loss.png"].axes[0]
    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]  # the single run has none
    std = (0.5 ** 2 * 2 / (2 - 1)) ** 0.5  # deviations ±0.5 from the mean, over n - 1 = 1
    vertices = band.get_paths()[0].vertices
    for step, mean in ((0, 4.5), (10, 2.5)):
        ys = vertices[vertices[:, 0] == step][:, 1]
        assert min(ys) == pytest.approx(mean - std) and max(ys) == pytest.approx(mean + std)


def seeds(*curves: tuple[float, ...]) -> list[dict]:
    """Runs (one per seed) whose val losses at steps 0, 50 and 100 are each of `curves`."""
    return [{"metrics": [{"step": s, "val_loss": v} for s, v in zip((0, 50, 100), curve)]} for curve in curves]


def test_the_val_loss_lines_are_means_their_bands_fit_and_their_labels_count_seeds(monkeypatch):
    """The line is the seeds' mean (a median passed for it), the axis fits the band (its top was cut off),
    the legend's n is the summary's (not the runs counted), and a title speaks of means and bands only
    where a finished setting is drawn as one."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    plots.val_loss_png([{"label": "s", "runs": seeds((7, 4, 3), (7, 4, 3.1), (7, 5, 4.9))}])
    ax = figures["val_loss.png"].axes[0]
    assert list(ax.lines[0].get_ydata()) == pytest.approx([7, 13 / 3, 11 / 3])
    plots.val_loss_png([{"label": "s", "runs": seeds((7, 3, 2), (7, 5, 4))}])
    low, high = figures["val_loss.png"].axes[0].get_ylim()
    assert low <= 3 - 2 ** 0.5 and high >= 3 + 2 ** 0.5  # (step 100: mean 3, std 1.414)
    plots.val_loss_png([{"label": "a", "n": 1, "runs": seeds((7, 4, 3), (7, 4, 3))},  # one seed trained twice
                        {"label": "b", "runs": seeds((7, 4, 3), (7, 5, 4))}])
    assert [t.get_text() for t in figures["val_loss.png"].axes[0].get_legend().get_texts()] == ["a (n=1)",
                                                                                                "b (mean of 2)"]
    plots.val_loss_png([{"label": "n_head=1", "runs": seeds((7, 4, 3))},
                        {"label": "n_head=2", "runs": seeds((7, 4, 3), (7, 5, 4)), "finished": False}])
    ax = figures["val_loss.png"].axes[0]
    assert ax.get_title() == "validation loss"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["n_head=1", "n_head=2 (unfinished)"]
    # every setting unfinished (a sweep's picture mid-way): fitted all the same, step 0's loss off the top
    plots.val_loss_png([{"label": "n_head=2", "finished": False, "runs": [{"metrics": [
        {"step": s, "val_loss": v} for s, v in zip((0, 10, 50, 100), (7.0, 3.0, 2.5, 2.0))]}]}])
    ax = figures["val_loss.png"].axes[0]
    assert ax.get_ylim()[1] < 4 and [t.get_text() for t in ax.texts] == [
        "off the top: 1 early point(s), up to 7.00 at step 0"]


# ---- labels, a sweep's folder named, what is said of one run, a run with nothing to draw ----


def test_runs_of_one_folder_name_are_labelled_by_their_paths_and_dot_is_a_label(tmp_path, monkeypatch):
    """Two seeds each in a folder named `run` (s1/run, s2/run) would be two rows `run`, told apart by
    nothing; `compare.py .` inside a run would be a row with an empty name (Path('.').name is '')."""
    rows = [(0, "4.1", "4.1"), (10, "3.9", "3.9")]
    for s in (1, 2):
        (tmp_path / f"s{s}").mkdir()
        fake_run(tmp_path / f"s{s}" / "run", s, rows)
    monkeypatch.chdir(tmp_path)
    result, printed = compared(["s1/run", "s2/run", "--out", "cmp"])
    assert [r["run"] for r in result["rows"]] == ["s1/run", "s2/run"] and "| s2/run |" in printed
    monkeypatch.chdir(tmp_path / "s1" / "run")
    result, printed = compared([".", "--out", str(tmp_path / "cmp1")])
    assert [r["run"] for r in result["rows"]] == ["."] and "\n| . |" in printed


@pytest.mark.parametrize("n, shown", [(3, "(h1, h2, h3)"), (4, "(h1, h2, h3 and 1 more)")])
def test_a_sweeps_folder_names_its_first_three_runs_in_order(tmp_path, n, shown):
    """The runs named in order, made last first (the folder's own order is not the names'), three at most."""
    (tmp_path / "sw").mkdir()
    for h in reversed(range(1, n + 1)):
        fake_run(tmp_path / "sw" / f"h{h}", h, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    with pytest.raises(UserError, match=rf"sw is not a run directory: it holds {n} run\(s\) {re.escape(shown)}, as"):
        compare.main([str(tmp_path / "sw"), "--out", str(tmp_path / "cmp")])


def test_a_run_given_twice_the_same_way_is_not_also_itself(tmp_path):
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    with pytest.raises(UserError, match=r"a is given twice$"):  # not "(also as .../a)" of the same spelling
        compare.main([run, run, "--out", str(tmp_path / "cmp")])


def test_one_run_is_one_run_and_no_configs_are_compared(tmp_path):
    """One run's report: 'Comparison of 1 run' (not '1 runs'), and no note that 'the runs' configs
    are identical' where there is nothing to compare it with."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    _, printed = compared([run, "--out", str(tmp_path / "cmp")])
    assert (tmp_path / "cmp" / "results.md").read_text().startswith("# Comparison of 1 run\n")
    assert "identical" not in printed, printed
    other = fake_run(tmp_path / "b", 1, [(0, "4.1", "4.1"), (10, "3.8", "3.8")])  # the same config: said so
    _, printed = compared([run, other, "--out", str(tmp_path / "cmp2")])
    assert (tmp_path / "cmp2" / "results.md").read_text().startswith("# Comparison of 2 runs\n")
    assert "(the runs' configs are identical apart from " in printed, printed


def test_the_matplotlib_note_is_said_only_without_pictures(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    result, printed = compared([run, "--out", str(tmp_path / "cmp")])
    assert result["plots"] and "matplotlib is not installed" not in printed
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # `import matplotlib.figure` now fails
    result, printed = compared([run, "--out", str(tmp_path / "cmp2")])
    assert result["plots"] == [] and "matplotlib is not installed: no val_loss.png and settings.png" in printed


def test_plot_only_does_not_write_through_a_runs_loss_png_link(tmp_path):
    """RUN/loss.png a link to a file outside the run: --plot-only rewrote that file with the picture (train.py
    refuses such a link, and --out's val_loss.png link is refused). Nothing is drawn, the target untouched."""
    pytest.importorskip("matplotlib")
    runs_ = [fake_run(tmp_path / n, s, [(0, "4.1", "4.1"), (10, "3.9", "3.9")]) for n, s in (("a", 1), ("b", 2))]
    (tmp_path / "victim.png").write_bytes(b"someone's picture")
    (Path(runs_[1]) / "loss.png").symlink_to(tmp_path / "victim.png")
    with pytest.raises(UserError, match=r"b/loss.png is a link to \S+victim.png .*--plot-only writes the run's own"):
        compare.main([*runs_, "--plot-only", "--out", str(tmp_path / "cmp")])
    assert (tmp_path / "victim.png").read_bytes() == b"someone's picture"
    assert not (Path(runs_[0]) / "loss.png").exists() and not (tmp_path / "cmp").exists()


def test_plot_only_of_a_run_without_metrics_draws_nothing_and_says_so(tmp_path):
    """A run just started (no metrics.csv yet): no 'None' among the pictures drawn."""
    pytest.importorskip("matplotlib")
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (Path(run) / "metrics.csv").unlink()
    result, printed = compared([run, "--plot-only", "--out", str(tmp_path / "cmp")])
    assert result["plots"] == [] and f"{run}: no metrics.csv yet, nothing to draw" in printed
    assert printed.endswith("wrote nothing\n") and not (Path(run) / "loss.png").exists()


# ---- what a run trained with: its ckpt.pt, where config.yaml was edited since ----


def test_runs_without_a_val_loss_get_no_empty_picture(tmp_path):
    """Two runs killed before their first evaluation: compare.py drew an empty val_loss.png (no line,
    no legend) beside the table and `--plot-only` listed 'None' among the pictures it wrote. Now there
    is no picture, a line says why, and an earlier report's val_loss.png does not stay behind."""
    pytest.importorskip("matplotlib")
    runs = [fake_run(tmp_path / name, 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")]) for name in ("a", "b")]
    out = tmp_path / "cmp"
    compared([*runs, "--out", str(out)])
    assert (out / "val_loss.png").is_file()  # (the report of the runs as they were)
    for run in runs:
        (Path(run) / "metrics.csv").write_text("step,train_loss,val_loss,lr,tokens_per_s,mfu,wall_s\n")
    result, printed = compared([*runs, "--out", str(out)])
    assert result["plots"] == [] and not (out / "val_loss.png").exists()
    assert "no val_loss.png: no run has a val loss yet" in printed and "matplotlib" not in printed
    result, printed = compared([*runs, "--plot-only", "--out", str(tmp_path / "only")])
    assert result["plots"] == [] and "None" not in printed and "no val_loss.png: no run has a val loss yet" in printed
    assert not (tmp_path / "only" / "val_loss.png").exists()


def test_a_matplotlib_that_fails_as_it_starts_is_one_line(tmp_path):
    """`MPLBACKEND=foo` (or a broken install) made every command that draws end in a traceback, exit 1."""
    pytest.importorskip("matplotlib")
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    done = subprocess.run([sys.executable, str(ROOT / "compare.py"), run, "--out", str(tmp_path / "cmp")],
                          capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "foo"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: matplotlib fails as it is imported (MPLBACKEND='foo'?): ") and \
        done.stderr.count("\n") == 1


def test_a_hand_edited_config_yaml_is_not_the_runs_settings(tmp_path, tiny_stories_run, capsys):
    """compare.py read config.yaml alone: n_embd doubled by hand reported the parameters of a model
    the run never had, and an edit that no longer reads (an unknown key) refused the whole
    comparison. The checkpoint's config is shown, with a note; an unedited run has none."""
    import shutil
    real = runs.summarize_run(tiny_stories_run)
    assert real["note"] is None and real["status"] == "done"
    run = tmp_path / "edited"
    shutil.copytree(tiny_stories_run, run)
    text = (run / "config.yaml").read_text()
    n_embd = real["config"]["model.n_embd"]
    assert f"  n_embd: {n_embd}\n" in text
    (run / "config.yaml").write_text(text.replace(f"  n_embd: {n_embd}\n", f"  n_embd: {2 * n_embd}\n"))
    row = runs.summarize_run(run)
    assert row["params"] == real["params"] and row["config"]["model.n_embd"] == n_embd
    assert row["note"] == (f"note: {run / 'config.yaml'} disagrees with its ckpt.pt (model.n_embd): the checkpoint's "
                           f"settings, which the run trained with, are shown")
    # a moved run resumed with --set train.out_dir=its new folder, stopped before its first save: config.yaml names the
    # new folder, ckpt.pt the old; where the run was written is no setting it trained with (no note)
    out_dir = real["config"]["train.out_dir"]
    assert f"  out_dir: {out_dir}\n" in text
    (run / "config.yaml").write_text(text.replace(f"  out_dir: {out_dir}\n", f"  out_dir: {run}\n"))
    assert runs.summarize_run(run)["note"] is None
    # train settings too: lr and seed edited showed as the run's (another setting), max_iters raised made it unfinished
    lr, seed, steps = (real["config"][f"train.{k}"] for k in ("lr", "seed", "max_iters"))
    assert f"  lr: {lr}\n" in text and f"  seed: {seed}\n" in text and f"  max_iters: {steps}\n" in text
    (run / "config.yaml").write_text(text.replace(f"  lr: {lr}\n", "  lr: 0.5\n").replace(
        f"  seed: {seed}\n", f"  seed: {seed + 1}\n").replace(f"  max_iters: {steps}\n", f"  max_iters: {2 * steps}\n"))
    row = runs.summarize_run(run)
    assert (row["config"]["train.lr"], row["config"]["train.seed"], row["status"]) == (lr, seed, "done")
    assert row["note"].startswith(f"note: {run / 'config.yaml'} disagrees with its ckpt.pt (train.max_iters, "
                                  f"train.lr, train.seed)")
    (run / "config.yaml").write_text(text + "frob: 1\n")
    compare.main([str(run), "--out", str(tmp_path / "cmp")])
    out, err = capsys.readouterr()
    assert f"| edited | {real['params']:,} | done |" in out
    assert err.startswith("note: unknown config key 'frob'") and err.endswith("'s ckpt.pt's settings are shown\n")


def test_a_run_whose_ckpt_pt_is_damaged_is_not_done(tmp_path, tiny_stories_run):
    """ckpt.pt emptied: its last metrics.csv row made it `done`, though a resume is refused."""
    import shutil
    run = tmp_path / "damaged"
    shutil.copytree(tiny_stories_run, run)
    (run / "ckpt.pt").write_bytes(b"")
    row = runs.summarize_run(run)
    assert re.fullmatch(r"step (\d+)/\1, ckpt.pt damaged", row["status"]), row["status"]


def test_a_config_yaml_that_is_no_file_is_called_so(tmp_path):
    """A folder (or a link to a device) named config.yaml: 'it has no config.yaml (train into it first)'."""
    (tmp_path / "config.yaml").mkdir()
    with pytest.raises(UserError, match=r"config.yaml is a folder; a run's config.yaml is a file$"):
        runs.read_config(tmp_path)


def test_a_run_in_its_first_seconds_is_called_a_training_not_a_stray_folder(tmp_path):
    """While a training prepares its data, its folder holds only .lock: compare.py said "not a run
    directory ... (train into it first)" of a folder being trained, where sample.py says to try again."""
    starting = tmp_path / "starting"
    starting.mkdir()  # (the user's: it stays when the lock goes)
    with runs.run_lock(starting):
        with pytest.raises(UserError, match=rf"^{re.escape(str(starting))} is being trained now \(process "
                                            rf"{os.getpid()}\) and has no config.yaml yet: .*; try again then$"):
            compare.main([str(starting), "--out", str(tmp_path / "report")])
    with pytest.raises(UserError, match="is not a run directory: it has no config.yaml"):  # (left as it was)
        compare.main([str(starting), "--out", str(tmp_path / "report")])


def test_a_report_into_a_folder_in_use_is_refused(tmp_path):
    """compare.py --out into a training's folder in its first seconds (only its .lock there yet): both
    exited 0, the report among the run's files; --out into a running sweep's folder: that sweep's run
    there failed (its folder held a report), or an inner sweep broke the outer one; --out above a running
    sweep's folder: every run that sweep started next was refused (inside a folder held by a report)."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    with runs.run_lock(tmp_path / "training"):  # a training just started there
        with pytest.raises(UserError, match=r"^--out='\S+training' is the folder of a training under way "
                                            r"\(process \d+\)"):
            compare.main([run, "--out", str(tmp_path / "training")])
    swept = tmp_path / "sweep"
    with runs.run_lock(swept, "--out", "sweep", runs.REPORT_LOCK):  # a sweep under way
        for out in (swept / "n_head=2", swept / "n_head=2" / "deeper"):
            with pytest.raises(UserError, match=rf"^--out='{re.escape(str(out))}' is inside {re.escape(str(swept))}, "
                                                r"the folder a sweep or a comparison \(process \d+\) is writing now"):
                compare.main([run, "--out", str(out)])
        with pytest.raises(UserError, match=r"is inside .*, the folder a sweep or a comparison"):
            sweep.main([SWEEP_CONFIG, "--grid", "model.n_head=1", "--out", str(swept / "inner")])
        assert not (swept / "n_head=2").exists() and not (swept / "inner").exists()
        # the other way round: a report over a sweep under way (its later runs were refused, inside a held folder)
        with pytest.raises(UserError, match=rf"^--out='{re.escape(str(tmp_path))}' holds {re.escape(str(swept))}, "
                                            r"the folder a sweep or a comparison \(process \d+\) is writing now: the "
                                            r"runs it starts would be refused"):
            compare.main([run, "--out", str(tmp_path)])
        with pytest.raises(UserError, match=r"holds .*sweep, the folder a sweep or a comparison"):
            sweep.main([SWEEP_CONFIG, "--grid", "model.n_head=1", "--out", str(tmp_path)])
        assert not (tmp_path / "results.md").exists() and not (tmp_path / "model.n_head=1").exists()
    compare.main([run, "--out", str(tmp_path / "training")])  # once they are done: written
    assert (tmp_path / "training" / "results.md").is_file()


def test_a_fifo_of_the_locks_name_below_out_does_not_stop_a_report(tmp_path):
    """compare.py looks for a sweep under way below its --out: a FIFO named .sweep.lock there was opened to
    try its lock, and the open waited for a writer for good."""
    import signal
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (tmp_path / "out" / "sub").mkdir(parents=True)
    os.mkfifo(tmp_path / "out" / "sub" / runs.REPORT_LOCK)
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the report waited on the FIFO"))
    signal.alarm(20)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            compare.main([run, "--out", str(tmp_path / "out")])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert (tmp_path / "out" / "results.md").is_file()


def test_a_sweeps_folder_given_as_a_run_gets_a_command_that_pastes(tmp_path):
    """`compare.py 'sw #2'`: the hint `compare.py sw #2/*/` had no `python`, and pasted, bash read
    `#2/*/` as a comment; a line break in the name split it in two."""
    folder = tmp_path / "sw #2\nx"
    folder.mkdir()
    for name in ("n_head=1", "n_head=2"):
        fake_run(folder / name, 1, [(0, "4.1", "4.1")])
    with pytest.raises(UserError) as refused:
        compare.main([str(folder)])
    line = str(refused.value)
    assert "\n" not in line
    hint = line.split("give them: ", 1)[1]
    words = subprocess.run(["bash", "-c", f"set -- {hint}; printf '%s\\0' \"$@\""], capture_output=True, text=True,
                           check=True).stdout.split("\0")[:-1]
    assert words[0] == "python" and words[1].endswith("compare.py")
    assert words[2:] == [f"{folder}/n_head=1/", f"{folder}/n_head=2/"]


def test_a_title_stays_one_line_whatever_the_run_is_named(tmp_path, monkeypatch):
    """A run folder named with a line break drew its loss.png title on two lines (`nl` / `x: loss`)."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    plots.plot_run(config_run(tmp_path / "nl\nx $5 tab\there", [(0, "4.1", "4.1"), (20, "3.8", "3.8")]))
    assert figures["loss.png"].axes[0].get_title() == "nl\\nx \\$5 tab\\there: loss"


def test_a_run_that_is_a_dead_link_a_pipe_or_a_device_is_named_so(tmp_path):
    """A link to nothing was `... is a file`, a pipe and /dev/null `run directory not found`."""
    (tmp_path / "dang").symlink_to("nowhere")
    os.mkfifo(tmp_path / "ff")
    for path, said in ((tmp_path / "dang", "is a link ("), (tmp_path / "ff", "is a pipe;"),
                       (Path("/dev/null"), "is a device;")):
        with pytest.raises(UserError, match=f"^{re.escape(str(path))} {re.escape(said)}"):
            compare.main([str(path)])


def test_losses_on_other_data_are_not_listed_as_differences():
    """results.md said the losses of two datasets "do not compare as numbers", then listed them under
    "Differences beyond the 95% intervals" (2.67 vs 1.03). A loss is compared only between settings
    of the same data and tokens; the probe's shares still compare."""
    from tinygpt import report
    losses = {"a.txt": (2.67, 2.68), "b.txt": (1.02, 1.03)}
    share = {"a.txt": lambda s: 0.9 + s / 100, "b.txt": lambda s: 0.5 + s / 100}  # the probe's: apart
    rows = [{"data.dataset": d, "train.seed": s, "best_val_loss": v, "antecedent": share[d](s)}
            for d, vs in losses.items() for s, v in zip((1, 2), vs)]
    groups = report.group_by_setting(rows, ["data.dataset", "train.seed"])
    assert [d.split(":")[0] for d in report.differences(groups)] == ["antecedent"]
    unprobed = report.group_by_setting([{k: v for k, v in r.items() if k != "antecedent"} for r in rows],
                                       ["data.dataset", "train.seed"])
    only_loss = report.summary_text(unprobed, ["best_val_loss"], probed=False)
    assert "Differences beyond" not in only_loss
    assert ("a comparison needs a 95% interval on both sides, 2 finished seeds or more each (n above), not all alike "
            "(± 0), and for a loss the same data and tokens") in only_loss
    sizes = [{**r, "model.n_embd": 16 if r.pop("data.dataset") == "a.txt" else 32} for r in rows]  # one dataset
    groups = report.group_by_setting(sizes, ["model.n_embd", "train.seed"])
    assert [d.split(":")[0] for d in report.differences(groups)] == ["best_val_loss", "antecedent"]


def test_the_settings_lines_run_in_order_and_a_line_with_nothing_to_draw_is_said(monkeypatch):
    """The legend listed lr=0.01, 0.001, 0.003 (the order the runs came in) beside an axis sorted from
    small to large; a setting whose runs all failed (lr=50, diverged) was left out of the legend
    without a word, and its empty place still pushed the other line off its ticks."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"model.n_embd": e, "train.lr": lr} for lr in (1e-2, 1e-3, 3e-3) for e in (16, 32)])
    plots.settings_png(report.group_by_setting(rows, ["model.n_embd", "train.lr", "train.seed"]))
    (legend,) = figures["settings.png"].legends
    assert [t.get_text() for t in legend.get_texts()] == ["lr=0.001", "lr=0.003", "lr=0.01"]
    rows = setting_rows([{"model.n_embd": e, "train.lr": lr} for lr in (3e-3, 50) for e in (16, 32)])
    for r in rows:
        if r["train.lr"] == 50:
            r["status"] = "failed (exit 1)"
    plots.settings_png(report.group_by_setting(rows, ["model.n_embd", "train.lr", "train.seed"]))
    fig = figures["settings.png"]
    assert fig._suptitle.get_text().endswith("\nnot drawn, no finished run: lr=50")
    (line,) = [c[0] for c in fig.axes[0].containers]
    assert list(line.get_xdata()) == [0.0, 1.0]  # at its ticks: the only line drawn


def test_an_x_value_with_no_finished_run_has_no_tick_and_is_said(monkeypatch):
    """--grid train.lr=1e-3,3e-3,1e3, the lr=1000 runs diverged: settings.png kept an empty tick for 1000 at the
    right edge, which made the axis a log one and crowded 0.001 and 0.003 at its left edge ('0.0010.003'), the
    title naming no setting left out. An `n=` (the settings' seeds differ) sat across its own error bar."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"train.lr": lr} for lr in (1e-3, 3e-3, 1e3)], seeds=(1, 2, 3))[:-1]  # lr=1000: n=2
    for r in rows:
        if r["train.lr"] == 1e3:
            r["status"] = "failed (exit 2), diverged at step 3 (ckpt.pt: step 0)"
    plots.settings_png(report.group_by_setting(rows, ["train.lr", "train.seed"]))
    fig = figures["settings.png"]
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.001", "0.003"] and ax.get_xlabel() == "lr"
    assert fig._suptitle.get_text().endswith("\nnot drawn, no finished run: lr=1000.0")
    rows = setting_rows([{"train.lr": lr} for lr in (1e-3, 3e-3)], seeds=(1, 2, 3))[:-1]  # n=3, then n=2
    plots.settings_png(report.group_by_setting(rows, ["train.lr", "train.seed"]))
    ax = figures["settings.png"].axes[0]
    (bar,) = ax.containers
    tops = [max(seg[:, 1]) for seg in bar[2][0].get_segments()]  # (each bar from its lower to its upper cap)
    labels = [t for t in ax.texts if t.get_text().startswith("n=")]
    assert [t.get_text() for t in labels] == ["n=3", "n=2"]
    for label, top in zip(labels, tops):  # above the bar's upper cap (it was 6 points above the mean, on the bar)
        assert label.xy[1] >= top - 1e-9 and label.get_va() == "bottom", (label.xy, top)


# ---- what the summary over seeds claims, and how ----


def _groups(values: dict[int, list[float]], metric: str = "best_val_loss", extra=None):
    """Settings n_head=h of seeds 1, 2, ... with these values of `metric` (and `extra(h, seed)`'s columns)."""
    from tinygpt import report
    rows = [{"model.n_head": h, "train.seed": s, "status": "done", metric: v, **(extra(h, s) if extra else {})}
            for h, vs in values.items() for s, v in enumerate(vs, 1)]
    return report.group_by_setting(rows, ["model.n_head", "train.seed"])


def test_a_shown_mean_is_rounded_as_a_reader_rounds_the_csvs_number():
    """The mean of 1.5965 and 1.9058, 1.75115 in summary.csv, showed as 1.7511 (its float is 1.75114999...);
    a share of 91.625% as 91.6% (half up: 91.6|25)."""
    from tinygpt import report
    mean = report.stats([1.5965, 1.9058])["mean"]
    assert repr(mean) == "1.75115" and report._num("best_val_loss", mean) == "1.7512"
    assert report._num("best_val_loss", (1.7181 + 1.6874) / 2) == "1.7028"
    assert report._num("antecedent", 0.91625) == "91.6%" and report._num("antecedent", 0.91675) == "91.7%"
    assert report._num("best_val_loss", float("nan")) == "nan" and report._num("best_val_loss", -0.0) == "-0.0000"


def test_every_column_rounds_half_up_as_the_losses_do():
    """tokens_per_s is a median of an even number of rates: 68099.5 showed as 68,100 but 28928.5 as
    28,928 in one column (Python rounds half to even); wall_s 0.25 as 0.2, the ratio 2.25 as 2.2x."""
    from tinygpt import report
    assert [report._num("tokens_per_s", v) for v in (68099.5, 28928.5, 38273.5)] == ["68,100", "28,929", "38,274"]
    assert report._num("params", 1234567.0) == "1,234,567" and report._num("tokens_per_s", float("nan")) == "nan"
    assert report._num("wall_s", 0.25) == "0.3" and report._num("attribute_ratio", 2.25) == "2.3x"
    assert report._num("name_ratio", 0.125) == "0.13x" and report._num("name_ratio", 2.25, 1) == "2.25x"


def test_settings_alike_are_apart_by_chance_as_often_as_the_summary_says():
    """The summary's CHANCE (1 comparison of 200): over 100 settings of one distribution, 3 seeds each, 15 of
    4,950 pairs were listed as differing, all chance, under 'among many, one may be chance'."""
    import random
    from tinygpt import report
    rng, apart = random.Random(0), 0
    for _ in range(20_000):
        a, b = (report.stats([rng.gauss(0, 1) for _ in range(3)]) for _ in range(2))
        apart += a["hi"] < b["lo"] or b["hi"] < a["lo"]
    assert 0.6 * report.CHANCE < apart / 20_000 < 1.4 * report.CHANCE


def test_settings_alike_of_unequal_seeds_are_apart_as_often_as_the_summary_expects():
    """'About 1 comparison of 200' held for equal numbers of seeds only: 2 seeds against 10 are apart 1.5% of the
    time, and the expected count was 3x too low. The count takes each pair's two n (simulated here)."""
    import random
    from tinygpt import report
    rng = random.Random(1)
    for n1, n2 in ((2, 10), (3, 3)):
        apart = 0
        for _ in range(20_000):
            a, b = (report.stats([rng.gauss(0, 1) for _ in range(n)]) for n in (n1, n2))
            apart += a["hi"] < b["lo"] or b["hi"] < a["lo"]
        assert 0.8 * report.chance(n1, n2) < apart / 20_000 < 1.2 * report.chance(n1, n2), (n1, n2)
    assert report.chance(2, 10) > 2.5 * report.chance(3, 3)  # (3 and 3 seeds: about CHANCE)
    assert 0.8 * report.CHANCE < report.chance(3, 3) < 1.2 * report.CHANCE
    groups = _groups({1: [1.10, 1.11], 2: [1.30 + i / 100 for i in range(10)], 4: [1.50 + i / 100 for i in range(10)]})
    expected = report.expected_by_chance(groups, ["best_val_loss"])
    assert expected == pytest.approx(2 * report.chance(2, 10) + report.chance(10, 10))
    assert f"so about {expected:.2g} of these are expected" in report.summary_text(groups, ["best_val_loss"], False)


def test_losses_on_another_val_split_or_stories_are_not_compared():
    """A grid of data.stories_chars=60000,240000 (bpe: 36 of 44 merges learned otherwise, 4,061 val tokens against
    16,160) or data.val_fraction=0.02,0.5 was compared in val loss, without a note."""
    from tinygpt import report
    for key, values in (("data.stories_chars", (60_000, 240_000)), ("data.val_fraction", (0.02, 0.5)),
                        ("data.stories_seed", (1, 2))):
        rows = [{key: v, "train.seed": s, "status": "done", "best_val_loss": 2.0 + 0.5 * (v == values[1]) + s / 100}
                for v in values for s in (1, 2, 3)]
        groups = report.group_by_setting(rows, [key, "train.seed"])
        assert report.differences(groups) == [] and not report.same_data(*groups), key
    rows = [{"data.compact_vocab": c, "train.seed": s, "status": "done", "best_val_loss": 2.0 + c + s / 100}
            for c in (False, True) for s in (1, 2, 3)]  # the same tokens of the same text: compared
    assert len(report.differences(report.group_by_setting(rows, ["data.compact_vocab", "train.seed"]))) == 1


def test_the_summary_names_its_rule_and_how_many_pairs_it_compared():
    """'Differences beyond the 95% intervals' said neither the rule nor that 66 pairs were tried, and 'No two
    settings differ' read as 'the same': over many pairs some are chance (how many: 1 of 200 said "one may be"),
    and overlap shows no equality."""
    from tinygpt import report
    apart = report.summary_text(_groups({1: [1.10, 1.11, 1.12], 2: [1.30, 1.31, 1.33], 4: [1.31, 1.32, 1.30]}),
                                ["best_val_loss"], probed=False)
    assert ("Differences beyond the 95% intervals (the two intervals do not overlap; 3 comparisons of a pair of "
            "settings in a metric, not corrected for their number: the intervals of two settings alike are apart in "
            "about 1 comparison of 200 (more often where their numbers of seeds differ), so about 0.014 of these are "
            "expected by chance alone):") in apart
    close = report.summary_text(_groups({1: [1.10, 1.20, 1.15], 2: [1.12, 1.22, 1.16]}), ["best_val_loss"], False)
    assert "No two settings differ beyond their 95% intervals in best_val_loss (1 comparison)." in close
    assert "Intervals that overlap do not show two settings equal" in close


def test_seeds_with_one_value_have_no_interval_and_are_not_compared():
    """Three seeds at 0.1% (a share counted in whole references) against three at 0.0% were listed as a difference,
    '0.0% [0.0%, 0.0%] vs 0.1% [0.1%, 0.1%]': a spread of 0 made an interval of width 0."""
    from tinygpt import report
    groups = _groups({1: [0.0, 0.0, 0.0], 2: [0.001, 0.001, 0.001]}, "antecedent")
    assert groups[0]["stats"]["antecedent"]["std"] == 0 and groups[0]["stats"]["antecedent"]["lo"] is None
    assert report.differences(groups, ["antecedent"]) == []
    text = report.summary_text(groups, ["antecedent"], probed=False)
    assert "0.1% ± 0 (no interval)" in text and "a spread of 0 is not a measured spread" in text


def test_a_listed_difference_shows_the_digits_that_tell_its_intervals_apart():
    """Ratios of 1.300-1.302 against 1.340-1.342 were listed as '1.3x [1.3x, 1.3x] vs 1.3x [1.3x, 1.3x]'."""
    from tinygpt import report
    groups = _groups({1: [1.300, 1.301, 1.302], 2: [1.340, 1.341, 1.342]}, "attribute_ratio")
    [line] = report.differences(groups, ["attribute_ratio"])
    assert line == "attribute_ratio: n_head=1 1.30x [1.30x, 1.30x] vs n_head=2 1.34x [1.34x, 1.34x]"
    assert "± 0.001 [" in report.summary_markdown(groups, ["attribute_ratio"])  # a spread is not '± 0.001x'
    # the table's own interval, too: `1.3x ± 0.001 [1.3x, 1.3x]` read as no spread
    assert "| 1.301x ± 0.001 [1.299x, 1.303x] |" in report.summary_markdown(groups, ["attribute_ratio"])
    groups = _groups({1: [0.600, 0.600, 0.601], 2: [0.603, 0.603, 0.604]}, "antecedent")  # shares: 60.0% vs 60.3%
    assert report.differences(groups, ["antecedent"]) == [
        "antecedent: n_head=1 60.03% [59.89%, 60.18%] vs n_head=2 60.33% [60.19%, 60.48%]"]


def test_student_t_past_30_degrees_of_freedom():
    """32 seeds (31 degrees of freedom) took the normal's 1.96, an interval 4% narrow: t is 2.0395 there."""
    from tinygpt import report
    assert [round(report.t95(df), 4) for df in (2, 30, 31, 60, 120)] == [4.3027, 2.0423, 2.0395, 2.0003, 1.9799]


def test_every_t_quantile_is_students_t_computed_here():
    """The table's 30 values (only 2 and 30 degrees of freedom were checked: a wrong one for 3 passed) and the
    expansion past them, against quantiles computed here from t's density (Simpson's rule, then bisection)."""
    from tinygpt import report

    def upper_half(t: float, df: int, n: int = 800) -> float:  # P(0 <= T <= t)
        c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
        h = t / n
        weights = [1] + [4 if i % 2 else 2 for i in range(1, n)] + [1]
        return h / 3 * sum(w * c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i, w in enumerate(weights))
    for df in [*range(1, 31), 31, 45, 100]:
        lo, hi = 1.9, 13.0
        for _ in range(36):
            lo, hi = ((lo + hi) / 2, hi) if upper_half((lo + hi) / 2, df) < 0.475 else (lo, (lo + hi) / 2)
        assert report.t95(df) == pytest.approx(lo, abs=2e-6), df


def test_single_runs_are_said_to_be_single_and_best_val_loss_what_it_is(tmp_path):
    from tinygpt import report
    rows = [{"run": f"h{h}", "model.n_head": h, "train.seed": 1, "status": "done", "best_val_loss": 1.0 + h / 10}
            for h in (1, 2)]
    text, _ = report.write_report(rows, ["model.n_head"], tmp_path, title="t")
    assert "One run per setting: single runs, whose differences may be the seed's alone" in text
    assert "best_val_loss: the lowest of a run's evaluations" in text


def test_runs_started_on_other_thread_counts_are_said_so(tmp_path):
    """A sweep rerun with --jobs 2 beside runs trained one at a time: n_head=4 read 36,581 tokens/s against
    113,249 for n_head=2 (the same parameters; alone, n_head=4 does 114,802), with no word. The checkpoints'
    start thread counts (their MFU peak's) are read, and a difference is said."""
    from tinygpt import report, runs
    rows = [{"run": f"h{h}", "model.n_head": h, "train.seed": 1, "status": "done", "best_val_loss": 1.0 + h / 10,
             "tokens_per_s": 110_000 if h == 2 else 36_000, "threads": 2 if h == 2 else 1} for h in (2, 4)]
    text, _ = report.write_report(rows, ["model.n_head"], tmp_path / "a", title="t")
    assert ("The runs started on different numbers of threads (1, 2: sweep.py --jobs, train.threads, or cores other "
            "processes held): their tokens_per_s and wall_s show that") in text
    for r in rows:
        r["threads"] = 2
    text, _ = report.write_report(rows, ["model.n_head"], tmp_path / "b", title="t")
    assert "different numbers of threads" not in text
    assert runs.started_threads({"mfu_peak": {"threads": 1, "flops": 1e9}}) == 1
    assert runs.started_threads({"mfu_peak": {"threads": 0, "flops": 1e9}}) is None  # no run starts on 0 threads
    assert runs.started_threads({"mfu_peak": {"threads": True}}) is runs.started_threads(None) is None


def test_pictures_of_losses_that_do_not_compare_say_so(tmp_path, monkeypatch):
    """results.md said a char run's and a word run's losses do not compare; settings.png and val_loss.png drew
    3.6 and 7.9 on one 'nats/token' axis, saying nothing."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    for tokenizers, said in ((("char", "word"), True), (("char", "char"), False)):
        rows = setting_rows([{"data.tokenizer": t, "model.n_head": h} for t, h in zip(tokenizers, (1, 2))],
                            seeds=(1, 2))
        for r in rows:
            r.update(status="done", run=f"{r['data.tokenizer']}{r['model.n_head']}-{r['train.seed']}")
        report.write_report(rows, ["data.tokenizer", "model.n_head"], tmp_path / str(said), title="t")
        settings_title = figures["settings.png"].axes[0].get_title()
        assert ("they do not compare" in settings_title) is said, settings_title
        assert ("they do not compare" in figures["val_loss.png"].axes[0].get_title()) is said


def test_grouping_keeps_unknown_seeds_and_digests_apart_and_counts_a_heads_wins():
    """Five rules of report.py no test pinned (a mutation round): a run without a recorded data digest joins
    its setting's digest only where there is one (of two, it is a setting of its own, not averaged into the
    first); runs of unknown seed are seeds of their own; an interval cut at 100% alone is said to be cut; a
    head that wins in two runs shows its count; t95(30) is the table's last entry, not the expansion."""
    from tinygpt import report
    rows = [{"run": run, "model.n_head": 4, "train.seed": seed, "data_digest": digest, "best_val_loss": 1.0}
            for run, seed, digest in (("a", 1, "a" * 64), ("b", 2, "b" * 64), ("c", 3, None))]
    assert [g["label"] for g in report.group_by_setting(rows, ["model.n_head"])] == [
        "n_head=4, digest=aaaaaaaaaa", "n_head=4, digest=bbbbbbbbbb", "n_head=4, digest=unrecorded"]
    unseeded = [{"run": run, "best_val_loss": loss, "config": {}} for run, loss in (("x", 1.0), ("y", 2.0))]
    (g,) = report.group_by_setting(unseeded, [])
    assert g["n"] == 2 and g["repeats"] == [] and g["stats"]["best_val_loss"]["lo"] is not None
    for share in ("antecedent", "distractor", "other", "attribute_share"):  # (each a share: cut at 100%)
        top = report.within_bounds(share, report.stats([0.97, 0.99, 0.995]))
        assert top["hi"] == 1.0 and top["lo"] > 0 and top["cut"] is True, share
    heads = [{"run": run, "attribute_head": "L0H1", "config": {}} for run in "ab"]
    assert report.group_by_setting(heads, [])[0]["attribute_heads"] == "L0H1×2"
    assert report.t95(30) == report.T95[-1] == 2.042272 and report.t95(31) < 2.042272


def test_interval_rules_a_later_mutation_round_left_unpinned():
    """A setting of one seed has no interval: it is compared with none, either side of the pair (a traceback
    where only the first side was checked), and no chance is counted for it (chance() of 1 seed has no degrees of
    freedom); every interval is cut at 0 (tokens/s of 1,000 and 5,000; each share's also at 100%: above); a listed
    difference with the higher setting first shows the digits that part them; chance() is seeded (2 against 10
    seeds lies on a rounding edge: 0.014 or 0.015)."""
    from tinygpt import report
    groups = _groups({1: [0.5, 0.6], 2: [0.9]}, "antecedent")
    assert report.differences(groups, ["antecedent"]) == [] and report.comparable_pairs(groups, ["antecedent"]) == 0
    groups = _groups({1: [2.01, 2.02], 2: [1.0, 1.01], 4: [1.5]})
    assert report.expected_by_chance(groups, ["best_val_loss"]) == pytest.approx(report.chance(2, 2))
    assert report.differences(groups, ["best_val_loss"]) == [
        "best_val_loss: n_head=1 2.0150 [1.9515, 2.0785] vs n_head=2 1.0050 [0.9415, 1.0685]"]
    speed = report.within_bounds("tokens_per_s", report.stats([1000.0, 5000.0]))
    assert speed["lo"] == 0.0 and speed["cut"] is True
    report.chance.cache_clear()
    first = report.chance(2, 10)
    report.chance.cache_clear()
    assert report.chance(2, 10) == first


def test_small_numbers_keep_the_digits_their_intervals_need():
    """A ratio under 1 and a ratio just under 1 take the extra digits asked for (the interval of 0.950-0.952
    read [0.95x, 0.95x]); a share's spread too small for its digits is still in percent (not 6e-05); the note
    that an interval is cut at 0 stands where one is, and only there."""
    from tinygpt import report
    groups = _groups({1: [0.950, 0.951, 0.952]}, "attribute_ratio")
    assert "| 0.951x ± 0.001 [0.949x, 0.953x] |" in report.summary_markdown(groups, ["attribute_ratio"])
    assert report._num("attribute_ratio", 0.9996, 1) == "0.999x"
    groups = _groups({1: [0.6000, 0.6001, 0.6000]}, "antecedent")
    assert "| 60.00% ± 0.006% [59.99%, 60.02%] |" in report.summary_markdown(groups, ["antecedent"])
    cut = _groups({1: [0.01, 0.05, 0.02], 2: [0.5, 0.6, 0.7]}, "antecedent")
    assert "An interval is cut at 0 (a share's also at 100%)" in report.summary_text(cut, ["antecedent"], False)
    assert "cut at 0" not in report.summary_text(_groups({1: [0.5, 0.6, 0.7]}, "antecedent"), ["antecedent"], False)


def test_a_report_looks_six_folders_down_for_a_sweep_under_way(tmp_path):
    """A sweep writing six folders below --out is found (seven folders walked: more than a cap of a few); one
    seven folders below is not looked for."""
    from tinygpt import report, runs
    deep = tmp_path / "a" / "b" / "c" / "d" / "e" / "f"
    (deep / "g").mkdir(parents=True)
    for where, found in ((deep, True), (deep / "g", False)):
        with runs.run_lock(where, "--out", "sweep", runs.REPORT_LOCK):
            assert (report.report_under_way_below(tmp_path) is not None) == found, where


def test_a_runs_config_alone_a_users_csv_or_a_folder_of_a_reports_name_is_refused_as_out(tmp_path):
    """A run killed before its first metrics (its config.yaml alone), a user's results.csv whose header starts
    as a report's, and a folder named val_loss.png are refused as a report's --out, before any work (the last
    was refused only at the report's write, without the picture hint, which is for a file)."""
    from tinygpt import report
    from tinygpt.config import RUN_HEADER
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text(RUN_HEADER + "\n")
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "results.csv").write_text("run,score\nmine,1\n")
    (tmp_path / "dir" / "val_loss.png").mkdir(parents=True)
    for name, said in (("run", "holds a training run's files"), ("csv", "holds results.csv, which is not"),
                       ("dir", r"holds val_loss.png, which is not from a tinygpt report: the report would")):
        with pytest.raises(UserError, match=said):
            report.check_report_folder(tmp_path / name)


def test_metrics_checks_and_report_numbers_a_mutation_round_left_unpinned():
    """check_order from row 2 on and for a second log row; off_schedule's tolerance, the rate it names (the
    step before's) and a nan lr skipped; best_val_loss past a nan; one digest of a setting not labelled; a ratio
    of exactly 1 and one just under it; a ratio's spread to 2 digits and a spread that would read 0."""
    from tinygpt import report
    from tinygpt.training import lr_at
    with pytest.raises(ValueError, match="row 2 goes back to step 10 after step 20"):
        runs.check_order([{"step": 20.0, "val_loss": 4.1}, {"step": 10.0, "val_loss": 3.9}])
    with pytest.raises(ValueError, match="row 2 is a second row of step 10 with a tokens_per_s"):
        runs.check_order([{"step": 10.0, "tokens_per_s": 1.0}, {"step": 10.0, "tokens_per_s": 2.0}])
    cfg = Config()
    cfg.train.max_iters, cfg.train.warmup_iters = 40, 0
    assert runs.off_schedule([{"step": 10.0, "lr": lr_at(9, cfg.train)}], cfg) is None
    note = runs.off_schedule([{"step": 10.0, "lr": lr_at(9, cfg.train) * 1.005}], cfg)
    assert note is not None and f"schedule gives {lr_at(9, cfg.train):.4g}:" in note, note
    assert runs.off_schedule([{"step": 10.0, "lr": float("nan")}], cfg) is None
    assert runs.best_val_loss([{"val_loss": float("nan")}]) is None
    assert runs.best_val_loss([{"val_loss": 4.0}, {"val_loss": float("-inf")}]) == 4.0
    rows = [{"run": run, "model.n_head": heads, "train.seed": 1, "data_digest": digest * 64, "best_val_loss": 1.0}
            for run, heads, digest in (("a", 1, "a"), ("b", 1, "b"), ("c", 2, "c"))]
    assert [g["label"] for g in report.group_by_setting(rows, ["model.n_head"])] == [
        "n_head=1, digest=aaaaaaaaaa", "n_head=1, digest=bbbbbbbbbb", "n_head=2"]
    assert (report.times(1.0), report.times(0.996)) == ("1.0x", "0.99x")
    assert report._spread("attribute_ratio", 0.0123) == "0.012"
    assert report._spread("best_val_loss", 0.00004) == "4e-05"


# ---- compare.py at its edges (each once dropped or moved, and no test failed) ----


def test_a_training_that_starts_in_out_while_the_lock_is_taken_is_refused(tmp_path, monkeypatch):
    """--out is checked again once its lock is held: a training that started there in between is refused, not
    mixed with the report's files."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    out, real = tmp_path / "cmp", compare.run_lock

    @contextlib.contextmanager
    def a_training_starts_first(*args, **kwargs):
        out.mkdir(exist_ok=True)
        (out / "metrics.csv").write_text("step,train_loss\n0,4.0\n")
        with real(*args, **kwargs):
            yield
    monkeypatch.setattr(compare, "run_lock", a_training_starts_first)
    with pytest.raises(UserError, match="holds a training run's files"), contextlib.redirect_stdout(io.StringIO()):
        compare.main([run, "--out", str(out)])
    assert not (out / "results.md").exists()


def test_plot_only_of_one_run_writes_nothing_into_out_and_a_run_holding_a_run_is_a_run(tmp_path):
    pytest.importorskip("matplotlib")
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    with contextlib.redirect_stdout(io.StringIO()):
        compare.main([run, "--plot-only", "--out", str(tmp_path / "cmp")])
    assert not (tmp_path / "cmp").exists()  # (a read-only checkout: only the run's own loss.png)
    fake_run(tmp_path / "a" / "inner", 2, [(0, "4.1", "4.1"), (10, "3.8", "3.8")])  # a run nested in a run
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        compare.main([run, "--out", str(tmp_path / "cmp")])
    wrote = [line for line in printed.getvalue().splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1 and all(name in wrote[0] for name in ("results.md", "results.csv", "summary.csv"))


def test_a_probe_json_with_a_share_over_1_is_damaged(tmp_path):
    """A head's share of attention is a fraction: 1.5 would read as 150%."""
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    over = {"attention_attribute": {"best": {"layer": 0, "head": 1, "antecedent": 1.5, "ratio": 2.0},
                                    "references": 36}}
    (tmp_path / "a" / "probe.json").write_text(json.dumps({**probe_figures(36, 30, 5), **over}))
    with pytest.raises(UserError, match=r"a/probe.json does not hold the probe's figures"):
        compare.main([run, "--out", str(tmp_path / "cmp")])


def test_a_checkpoint_past_the_runs_end_is_not_its_own(tmp_path):
    """A ckpt.pt of a step past train.max_iters is another run's, copied in: the run's rows say where it is
    (step 10 of 40), not the checkpoint (done), and its data digest is not the run's."""
    run = config_run(tmp_path / "r", [(0, "4.1", "4.1"), (10, "3.9", "3.9")], **{"train.max_iters": 40})
    trained_on(run, "a" * 64, step=100)
    row = runs.summarize_run(run)
    assert (row["status"], row["data_digest"]) == ("step 10/40", None)


def test_a_finished_run_whose_lock_is_held_is_done_not_training(tmp_path):
    """A finished run is done even while a process holds its lock (a resume of it, which trains nothing):
    not `training, done`."""
    run = fake_run(tmp_path / "run", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    with runs.run_lock(Path(run), resume=True):
        assert runs.summarize_run(run)["status"] == "done"


def test_a_checkpoint_past_config_yamls_end_does_not_override_it(tmp_path, tiny_stories_run):
    """A ckpt.pt of a step past config.yaml's train.max_iters is no record of this run's settings (another
    run's, copied in): config.yaml's are shown, without a `disagrees with its ckpt.pt` note."""
    import shutil
    real = runs.summarize_run(tiny_stories_run)
    run = tmp_path / "copied"
    shutil.copytree(tiny_stories_run, run)
    text = (run / "config.yaml").read_text()
    seed, steps = real["config"]["train.seed"], real["config"]["train.max_iters"]
    assert f"  seed: {seed}\n" in text and f"  max_iters: {steps}\n" in text
    (run / "config.yaml").write_text(text.replace(f"  seed: {seed}\n", f"  seed: {seed + 1}\n").replace(
        f"  max_iters: {steps}\n", f"  max_iters: {steps // 2}\n"))
    row = runs.summarize_run(run)
    assert (row["config"]["train.seed"], row["config"]["train.max_iters"]) == (seed + 1, steps // 2)
    assert "disagrees with its ckpt.pt" not in (row["note"] or "")


def test_loss_png_is_against_steps_with_a_legend_and_its_axis_never_under_zero(tmp_path, monkeypatch):
    """loss.png: x is the step, each curve is named in a legend, and a loss near 0 pads the axis down to 0,
    not below it (a loss is never negative)."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    rows = [(0, "4.1", "4.1"), (10, "1.0", "1.2"), (20, "0.05", "0.08")]
    plots.plot_run(config_run(tmp_path / "run", rows))
    ax = figures["loss.png"].axes[0]
    assert ax.get_xlabel() == "step", ax.get_xlabel()
    assert sorted(ax.get_lines()[-1].get_xdata()) == [s for s, _, _ in rows]
    assert ax.get_legend() is not None
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [line.get_label() for line in ax.lines]
    lowest = min(float(v) for _, t, v in rows for v in (t, v))
    assert 0.0 <= ax.get_ylim()[0] <= lowest, ax.get_ylim()


def test_val_loss_png_ticks_whole_steps_and_its_banded_title_says_what_the_band_is(monkeypatch):
    """val_loss.png's x ticks are whole steps (a 2-step run read 0.25, 0.5, ...), and where a line is a mean
    of seeds the title says it is, with its ± 1 std band."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    runs = [{"metrics": [{"step": s, "val_loss": v} for s, v in zip((0, 1, 2), curve)]}
            for curve in ((7, 4, 3), (7, 5, 4))]
    plots.val_loss_png([{"label": "s", "runs": runs}])
    ax = figures["val_loss.png"].axes[0]
    low, high = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if low <= t <= high]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert len(ax.collections) == 1  # the band is drawn...
    assert "mean ± 1 std over seeds" in ax.get_title(), ax.get_title()  # ...and said


def test_lines_meeting_at_one_step_only_are_not_widened(monkeypatch):
    """Two settings evaluated at other steps (eval_interval 50 and 40) meet only at step 0's shared loss, in
    view: one point is no overlap, neither line is drawn wider; lines that coincide at every step are."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)

    def run(steps, losses):
        return {"metrics": [{"step": s, "val_loss": v} for s, v in zip(steps, losses)]}
    plots.val_loss_png([{"label": "a", "runs": [run((0, 50, 100), (4, 3.5, 3))]},
                        {"label": "b", "runs": [run((0, 40, 80), (4, 4.5, 5))]}])
    ax = figures["val_loss.png"].axes[0]
    assert ax.get_ylim()[0] <= 4 <= ax.get_ylim()[1]  # (step 0's loss is in view)
    first, second = ax.lines
    assert first.get_linewidth() == second.get_linewidth()
    plots.val_loss_png([{"label": "a", "runs": seeds((4, 3.5, 3))}, {"label": "b", "runs": seeds((4, 3.5, 3))}])
    first, second = figures["val_loss.png"].axes[0].lines
    assert first.get_linewidth() > second.get_linewidth()


def test_an_unfinished_run_below_the_axis_is_said_to_go_down(monkeypatch):
    """An unfinished run whose first eval lies under the axis fitted to the finished one is named in the
    note as going down to it, not up."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    plots.val_loss_png([{"label": "a", "runs": seeds((7, 5, 5))},
                        {"label": "b", "finished": False, "runs": seeds((0.5, 5, 5))}])
    ax = figures["val_loss.png"].axes[0]
    low, _ = ax.get_ylim()
    notes = "\n".join(t.get_text() for t in ax.texts)
    assert 0.5 < low and "off the chart: b (unfinished), down to 0.5 at step 0" in notes, notes


def two_head_settings(monkeypatch, metric: str | None = None, values=(), seeds=(1,), apart: bool = False):
    """settings.png of model.n_head 1 and 2 (from setting_rows), `metric` set to `values` in turn -> the figure."""
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"model.n_head": h} for h in (1, 2)], seeds)
    for row, value in zip(rows, values):
        row[metric] = value
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.seed"]), apart=apart)
    return figures["settings.png"]


def settings_panel(fig, i: int):
    """settings.png's panel of SETTING_PANELS[i], found by its y label."""
    return next(ax for ax in fig.axes if ax.get_ylabel() == plots.SETTING_PANELS[i][1])


def test_settings_png_says_one_run_per_setting_where_no_setting_has_seeds(monkeypatch):
    """settings.png of one seed per setting: no interval "over 1 seeds", the title says each point is one
    run; two seeds a setting: the interval is over them."""
    pytest.importorskip("matplotlib")
    assert two_head_settings(monkeypatch)._suptitle.get_text() == "one run per setting"
    assert two_head_settings(monkeypatch, seeds=(1, 2))._suptitle.get_text() == "mean and 95% interval over 2 seeds"


def test_a_small_probe_share_fills_its_panel_from_zero(monkeypatch):
    """Probe shares of 2% and 4%: the share panel runs from 0 to a little above the highest point, not to 100%
    (the two points were a flat line at the bottom)."""
    pytest.importorskip("matplotlib")
    ax = settings_panel(two_head_settings(monkeypatch, "antecedent", (0.02, 0.04)), 1)
    highest = max(y for line in ax.lines for y in line.get_ydata())
    low, high = ax.get_ylim()
    assert low == 0 and highest < high <= 1.2 * highest, (ax.get_ylim(), highest)


def test_attention_ratios_go_on_a_log_axis_only_over_more_than_a_decade(monkeypatch):
    """The best head's antecedent / distractor ratio: 1.0 and 5.0 stay on a linear axis (under a tenfold),
    1.0 and 20.0 go on a log one."""
    pytest.importorskip("matplotlib")
    for top, scale in ((5.0, "linear"), (20.0, "log")):
        ax = settings_panel(two_head_settings(monkeypatch, "attribute_ratio", (1.0, top)), 2)
        assert ax.get_yscale() == scale, (top, ax.get_yscale())


def test_other_data_is_said_over_the_loss_panel_only(monkeypatch):
    """Settings trained on other data: APART is said over settings.png's loss panel, not over the probe's
    share, which is no loss per token."""
    pytest.importorskip("matplotlib")
    fig = two_head_settings(monkeypatch, "antecedent", (0.2, 0.4), apart=True)
    assert settings_panel(fig, 0).get_title() == plots.APART.replace(": ", ":\n")
    assert settings_panel(fig, 1).get_title() == ""


def test_a_nonfinite_train_loss_before_the_last_row_is_damage_and_a_diverged_log_row_a_divergence(tmp_path):
    """check_order refuses a nan train_loss (not only a val_loss) before the last row; a run whose last row is a
    log row of nan train loss (no val_loss in it) is diverged, not stopped on its way."""
    with pytest.raises(ValueError, match="row 1 has a loss that is not finite, and rows after it"):
        runs.check_order([{"step": 10.0, "train_loss": float("nan")}, {"step": 20.0, "train_loss": 3.0}])
    run = tmp_path / "run"
    fake_run(run, 1, [(30, "2.0", "")])
    runs.write_metrics(run, [{"step": 0, "train_loss": "4.0", "val_loss": "3.0"}, {"step": 10, "train_loss": "nan"}])
    assert runs.summarize_run(run)["status"] == f"{runs.DIVERGED} 10"


def test_a_nan_or_inf_step_is_a_row_without_a_step():
    """An inf step reached int() (OverflowError: a traceback, not 'damaged'), a nan step said 'cannot convert'."""
    for step in ("nan", "inf", "-inf"):
        with pytest.raises(ValueError, match="^a row has no step$"):
            runs.parse_metrics(["step,train_loss", f"{step},1.0"])


def test_an_infinite_elapsed_s_in_ckpt_pt_adds_nothing_to_wall_s(tmp_path):
    """A nan elapsed_s was left out by max() anyway; an inf one made wall_s inf."""
    run = tmp_path / "run"
    fake_run(run, 1, [(30, "2.0", "")])
    runs.write_metrics(run, [{"step": 0, "train_loss": "4.0", "val_loss": "3.0", "elapsed_s": "0.041"}])
    torch.save({"format": FORMAT, "step": 5, "elapsed_s": float("inf")}, run / "ckpt.pt")
    summary = runs.summarize_run(run)
    assert (summary["status"], summary["wall_s"]) == ("step 5/30", 0.041)


def test_a_checkpoint_past_the_runs_max_iters_does_not_make_it_done(tmp_path):
    """A ckpt.pt at a step past train.max_iters is not this run's (copied in): the last row says where it is."""
    run = tmp_path / "run"
    fake_run(run, 1, [(0, "4.0", "3.0"), (10, "3.5", "3.4")])
    cfg = runs.read_config(run)
    cfg.train.max_iters = 30
    runs.write_config(run, cfg)
    torch.save({"format": FORMAT, "step": 50, "elapsed_s": 1.0}, run / "ckpt.pt")
    assert runs.summarize_run(run)["status"] == "step 10/30"


def test_a_metrics_csv_with_val_loss_alone_has_no_final_train_loss(tmp_path):
    """Eval rows without a train_loss (one loss column is enough) give no final train loss, not a KeyError."""
    run = tmp_path / "run"
    fake_run(run, 1, [(10, "2.0", "")])
    (run / "metrics.csv").write_text("step,val_loss\n0,4.0\n10,3.5\n")
    summary = runs.summarize_run(run)
    assert (summary["best_val_loss"], summary["final_train_loss"]) == (3.5, None)


def test_a_metrics_csv_of_holes_is_called_one(tmp_path):
    run = tmp_path / "run"
    fake_run(run, 1, [(0, "4.1", "4.1")])
    with open(run / "metrics.csv", "r+b") as f:
        f.truncate(80 << 20)
    if (run / "metrics.csv").stat().st_blocks * 512 >= 40 << 20:  # (a file system without sparse files)
        pytest.skip("this file system writes no holes")
    with pytest.raises(UserError, match=r"metrics\.csv is damaged or not a tinygpt metrics file \(most of its "
                                        r"[\d,]+ bytes were never written: a file of holes\)"):
        runs.read_metrics(run)


def test_the_chance_count_is_of_the_metrics_the_differences_are_looked_for_in():
    """Differences are looked for in DIFFERENCES_IN only: the 'expected by chance' count is of those comparisons,
    not of the speed and time columns the table also shows (their intervals are never compared)."""
    from tinygpt import report
    groups = _groups({1: [1.10, 1.11, 1.12], 2: [1.30, 1.31, 1.33]},
                     extra=lambda h, s: {"tokens_per_s": 1000.0 * h + s, "wall_s": 10.0 * h + s})
    text = report.summary_text(groups, ["best_val_loss", "tokens_per_s", "wall_s"], probed=False)
    alone = report.expected_by_chance(groups, ["best_val_loss"])
    assert alone != report.expected_by_chance(groups, ["best_val_loss", "tokens_per_s", "wall_s"])
    assert f"so about {alone:.2g} of these are expected by chance alone" in text
    assert "1 comparison of a pair of settings in a metric" in text


def test_a_probed_summary_names_each_settings_best_head():
    """With probe figures, the summary lists each setting's winning head(s) (group_by_setting's attribute_heads)."""
    from tinygpt import report
    groups = _groups({1: [0.5, 0.6], 2: [0.7, 0.8]}, "antecedent",
                     extra=lambda h, s: {"attribute_head": f"L0H{h - 1}"})
    text = report.summary_text(groups, ["antecedent"], probed=True)
    assert ("Best head on the antecedent's attribute, per run: "
            + "; ".join(f"{g['label']}: {g['attribute_heads']}" for g in groups)) in text
    assert groups[0]["attribute_heads"] != groups[1]["attribute_heads"]
    assert "Best head" not in report.summary_text(groups, ["antecedent"], probed=False)


def test_a_report_stops_looking_below_out_after_its_cap_of_folders(tmp_path, monkeypatch):
    """report_under_way_below walks at most BELOW_FOLDERS folders (a home folder given as --out is not searched
    whole): a sweep's lock found within the cap, not past it."""
    from tinygpt import report, runs
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    with runs.run_lock(deep, "--out", "sweep", runs.REPORT_LOCK):
        assert report.report_under_way_below(tmp_path) is not None
        monkeypatch.setattr(report, "BELOW_FOLDERS", 3)  # tmp_path, a, b: c is the fourth
        assert report.report_under_way_below(tmp_path) is None


def test_a_report_is_told_by_its_title_at_the_start_of_results_md(tmp_path):
    """results.md is a report's by a first line that starts with a report's title, not one that holds it."""
    from tinygpt import report
    for title, maker in report.TITLES.items():
        (tmp_path / "results.md").write_text(f"{title}x\n")
        assert report.report_maker(tmp_path) == maker
        (tmp_path / "results.md").write_text(f"My notes {title}x\n")
        assert report.report_maker(tmp_path) is None
        assert report.foreign_report_file(tmp_path) == "results.md"


def test_a_csv_is_a_reports_only_where_its_first_column_is_the_reports(tmp_path):
    """A user's results.csv or summary.csv holding a report's columns after one of its own is not a report's."""
    from tinygpt import report
    (tmp_path / "results.csv").write_text(",".join(["name", "run", *report.RESULT_COLUMNS]) + "\n")
    assert report.foreign_report_file(tmp_path) == "results.csv"
    (tmp_path / "results.csv").write_text(",".join(["run", *report.RESULT_COLUMNS]) + "\n")
    (tmp_path / "summary.csv").write_text("name,setting,best_val_loss_mean\n")
    assert report.foreign_report_file(tmp_path) == "summary.csv"
    (tmp_path / "summary.csv").write_text("setting,best_val_loss_mean\n")
    assert report.foreign_report_file(tmp_path) is None


def test_a_plot_only_picture_alone_is_a_reports_by_its_mark(tmp_path):
    """compare.py --plot-only writes val_loss.png alone (no results.md beside it): its mark tells it a report's,
    so a second --plot-only into that folder replaces it."""
    pytest.importorskip("matplotlib")
    from tinygpt import report

    def curve(h, s):
        return {"metrics": [{"step": 0, "val_loss": 2.0 + s}, {"step": 10, "val_loss": 1.5 + s}]}
    groups = _groups({1: [1.5, 1.6]}, extra=curve)
    assert report.write_val_loss(groups, tmp_path) == tmp_path / "val_loss.png"
    assert not (tmp_path / "results.md").exists()
    assert report.is_report_file(tmp_path, "val_loss.png")
    report.check_report_folder(tmp_path, plot_only=True)


def test_one_run_alone_is_not_called_one_run_per_setting(tmp_path):
    """The 'One run per setting' note is for settings compared over single runs: one run alone has nothing to
    compare with, and says no such thing; two settings of one run each do."""
    from tinygpt import report
    rows = [{"run": f"h{h}", "model.n_head": h, "train.seed": 1, "status": "done", "best_val_loss": 1.0 + h / 10}
            for h in (1, 2)]
    text, _ = report.write_report(rows[:1], ["model.n_head"], tmp_path / "one", title="t")
    assert "One run per setting" not in text
    text, _ = report.write_report(rows, ["model.n_head"], tmp_path / "two", title="t")
    assert "One run per setting" in text


def test_plot_only_into_a_folder_of_runs_says_its_picture_would_mix_with_them(tmp_path):
    """--plot-only writes only val_loss.png: refused among runs, it says so (not 'mix with them', as a report)."""
    from tinygpt import report
    from tinygpt.errors import UserError
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "ckpt.pt").write_bytes(b"x")
    with pytest.raises(UserError, match="mix its val_loss.png with them"):
        report.check_report_folder(tmp_path, plot_only=True)
    with pytest.raises(UserError, match="this report would mix with them"):
        report.check_report_folder(tmp_path)


def test_a_key_that_does_not_apply_to_a_run_is_not_named_among_what_the_runs_differ_in(tmp_path):
    """A char run and a BPE run of bpe_vocab_size 300 differ in their tokenizer; bpe_vocab_size, which the char
    run does not use, is not a second difference (its None is no value)."""
    from tinygpt import report
    rows = [{"run": tokenizer, "status": "done", "best_val_loss": loss,
             "config": {"data.tokenizer": tokenizer, "data.bpe_vocab_size": 300, "train.seed": 1}}
            for tokenizer, loss in (("char", 1.0), ("bpe", 2.0))]
    text, _ = report.write_report(rows, ["data.tokenizer", "data.bpe_vocab_size"], tmp_path, title="Sweep of x")
    assert "\nThe runs differ in data.tokenizer: their losses are per token" in text


def test_a_report_without_val_loss_png_says_why_even_with_settings_png(tmp_path):
    """settings.png drawn from the runs' best val losses, val_loss.png not (no curve in their metrics.csv): the
    report still says why val_loss.png is missing; drawn, nothing is said."""
    from tinygpt import report
    assert report.pictures_note([tmp_path / "val_loss.png", tmp_path / "settings.png"]) is None
    assert "val_loss.png" in report.pictures_note([tmp_path / "settings.png"])


def test_a_results_csv_whose_first_line_holds_a_nul_is_not_a_reports(tmp_path):
    """csv reads a NUL as an error on Python 3.10 ('line contains NUL'): a file that cannot be read as a report's
    CSV is not one (the check refuses to replace it), never a traceback."""
    from tinygpt import report
    (tmp_path / "results.csv").write_bytes(b"run\x00," + ",".join(report.RESULT_COLUMNS).encode() + b"\n")
    assert not report.is_report_file(tmp_path, "results.csv")


# ---- plots.py's second round: loss.png's curves, settings.png's axes, bars and legend ----


def metrics_run(path: Path, rows: list[dict]) -> Path:
    """A run folder of a config and these metrics.csv rows (log rows carry tokens_per_s, eval rows val_loss)."""
    cfg = Config()
    cfg.train.max_iters = rows[-1]["step"]
    path.mkdir()
    runs.write_config(path, cfg)
    runs.write_metrics(path, rows)
    return path


def test_loss_png_draws_the_log_rows_as_train_and_the_eval_rows_as_val(tmp_path, monkeypatch):
    """loss.png: the train curve is the log rows' running means (the rows with tokens_per_s), not the evals'
    train-split estimates mixed in; the val curve is the evals' val_loss; each is named in the legend."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    rows = [{"step": 0, "train_loss": 4.3, "val_loss": 4.4},
            {"step": 5, "train_loss": 3.5, "lr": 1e-3, "tokens_per_s": 100.0},
            {"step": 10, "train_loss": 3.0, "lr": 1e-3, "tokens_per_s": 100.0},
            {"step": 10, "train_loss": 3.1, "val_loss": 3.2}]
    plots.plot_run(metrics_run(tmp_path / "run", rows))
    ax = figures["loss.png"].axes[0]
    lines = {line.get_label(): line for line in ax.lines}
    logs = [r for r in rows if r.get("tokens_per_s") is not None]
    evals = [r for r in rows if r.get("val_loss") is not None]
    assert set(lines) == {"train", "val"}
    assert list(lines["train"].get_xdata()) == [r["step"] for r in logs]
    assert list(lines["train"].get_ydata()) == [r["train_loss"] for r in logs]
    assert list(lines["val"].get_xdata()) == [r["step"] for r in evals]
    assert list(lines["val"].get_ydata()) == [r["val_loss"] for r in evals]
    assert ax.get_ylabel() == "loss (nats/token)"


def test_loss_png_without_log_rows_draws_the_evals_train_loss_and_one_log_row_as_a_point(tmp_path, monkeypatch):
    """No log rows (log_interval > max_iters): the train curve is the evals' estimates, named so and drawn
    with markers; a single log row is drawn as a point (a line of one point shows nothing)."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    evals = [{"step": 0, "train_loss": 4.3, "val_loss": 4.4}, {"step": 10, "train_loss": 3.1, "val_loss": 3.2}]
    plots.plot_run(metrics_run(tmp_path / "evals", evals))
    lines = {line.get_label(): line for line in figures["loss.png"].axes[0].lines}
    assert set(lines) == {"train (eval)", "val"}
    assert list(lines["train (eval)"].get_ydata()) == [r["train_loss"] for r in evals]
    assert lines["train (eval)"].get_marker() not in (None, "None", "")
    one_log = [evals[0], {"step": 10, "train_loss": 3.0, "tokens_per_s": 100.0}, evals[1]]
    plots.plot_run(metrics_run(tmp_path / "one", one_log))
    lines = {line.get_label(): line for line in figures["loss.png"].axes[0].lines}
    assert lines["train"].get_marker() not in (None, "None", "")


def test_loss_png_ticks_whole_steps_only(tmp_path, monkeypatch):
    """A 2-step run's loss.png would read 0, 0.25, 0.5 ... on matplotlib's own step axis: a step is a whole number."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    plots.plot_run(metrics_run(tmp_path / "run", [{"step": 0, "train_loss": 4.3, "val_loss": 4.4},
                                                  {"step": 2, "train_loss": 3.1, "val_loss": 3.2}]))
    ticks = figures["loss.png"].axes[0].get_xticks()
    assert len(ticks) and all(float(t).is_integer() for t in ticks), ticks


def test_loss_png_is_written_through_atomic_write_and_its_guard(tmp_path):
    """plot_run writes loss.png as the run's other files are: its guard (train.Run.check_folder) is asked
    before anything is written, and a folder in loss.png's place is a UserError, not a traceback."""
    pytest.importorskip("matplotlib")
    from tinygpt.errors import UserError
    run = metrics_run(tmp_path / "run", [{"step": 0, "train_loss": 4.3, "val_loss": 4.4},
                                         {"step": 2, "train_loss": 3.1, "val_loss": 3.2}])

    def gone():
        raise UserError("the run folder is gone")
    with pytest.raises(UserError, match="the run folder is gone"):
        plots.plot_run(run, gone)
    assert not (run / "loss.png").exists()
    (run / "loss.png").mkdir()
    with pytest.raises(UserError, match="loss.png"):
        plots.plot_run(run)


def test_lines_of_one_point_are_told_apart_by_colour_and_marker():
    """A setting of one point draws no line, so its line style shows nothing: colour and marker alone tell
    the first (colours x markers) lines apart, in both pictures; and (colour, line style, marker) 200 lines."""
    pytest.importorskip("matplotlib")
    from matplotlib import rcParams
    colours = rcParams["axes.prop_cycle"].by_key()["color"]
    for markers in (plots.SETTINGS_MARKERS, plots.VAL_LOSS_MARKERS):
        styles = [plots.line_style(i, markers) for i in range(len(colours) * len(markers))]
        assert len({(s["color"], s["marker"]) for s in styles}) == len(styles)
        styles = [plots.line_style(i, markers) for i in range(200)]
        assert len({(s["color"], s["linestyle"], s["marker"]) for s in styles}) == 200


def test_a_log_x_axis_of_settings_png_says_so_in_its_label(monkeypatch):
    """Values spanning a factor of 4 or more are drawn on a log scale, and the x label says it (the ticks 16,
    32, 128 evenly spaced read as a linear axis); an axis of evenly spaced values is no log one."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    for key, values, log in [("model.n_embd", [16, 32, 128], True), ("model.n_head", [1, 2, 3], False)]:
        plots.settings_png(report.group_by_setting(setting_rows([{key: v} for v in values]), [key, "train.seed"]))
        name = key.split(".", 1)[1]
        assert figures["settings.png"].axes[0].get_xlabel() == name + (" (log scale)" if log else "")


def test_a_settings_error_bar_cut_at_zero_keeps_its_upper_end(monkeypatch):
    """An interval cut at a bound (a loss is never under 0) is no longer symmetric about its mean: each end of
    the error bar is the interval's own end, the upper one not mirrored from the cut lower one."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"model.n_head": h} for h in (1, 2)], seeds=(1, 2))
    for row in rows:  # two seeds far apart: Student's t over 1 degree of freedom reaches below 0
        row["best_val_loss"] = 0.1 if row["train.seed"] == 1 else 2.0
    groups = report.group_by_setting(rows, ["model.n_head", "train.seed"])
    stats = groups[0]["stats"]["best_val_loss"]
    assert stats["lo"] == 0.0 and stats["hi"] - stats["mean"] != stats["mean"] - stats["lo"]  # (cut: asymmetric)
    plots.settings_png(groups)
    bars = figures["settings.png"].axes[0].containers[0].lines[2][0].get_segments()
    ends = sorted((min(y for _, y in seg), max(y for _, y in seg)) for seg in bars)
    assert ends == pytest.approx(sorted((g["stats"]["best_val_loss"]["lo"], g["stats"]["best_val_loss"]["hi"])
                                        for g in groups))


def test_settings_png_of_unequal_seeds_says_a_single_seeds_point_has_no_interval(monkeypatch):
    """Where a setting has a single seed among settings of several, its point has no error bar: the title says
    n=1 means no interval (not a precise mean); where every setting has 2 seeds or more it says nothing of it."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"model.n_head": 1}], seeds=(1, 2)) + setting_rows([{"model.n_head": 2}], seeds=(1,))
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.seed"]))
    assert "(n=1: no interval)" in figures["settings.png"]._suptitle.get_text()
    rows = setting_rows([{"model.n_head": 1}], seeds=(1, 2)) + setting_rows([{"model.n_head": 2}], seeds=(1, 2, 3))
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.seed"]))
    title = figures["settings.png"]._suptitle.get_text()
    assert "n = 2 to 3" in title and "n=1" not in title


def test_settings_alike_within_a_fraction_of_a_percent_are_not_blown_up_to_the_whole_panel(monkeypatch):
    """Best val losses 1.500 and 1.501 would fill the panel's whole height, a 0.07% difference drawn as a vast
    one: the y-axis spans at least 1% of the values."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"model.n_head": h} for h in (1, 2)])
    for row, loss in zip(rows, (1.500, 1.501)):
        row["best_val_loss"] = loss
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.seed"]))
    low, high = figures["settings.png"].axes[0].get_ylim()
    assert low <= 1.500 and high >= 1.501 and high - low >= 0.01 * 1.5005 * (1 - 1e-9), (low, high)


def test_settings_png_names_its_lines_in_a_legend_from_two_lines_on(monkeypatch):
    """Two lines (two values of a second key) are told apart by a legend naming each; one line needs none."""
    pytest.importorskip("matplotlib")
    from tinygpt import report
    figures = capture_figures(monkeypatch)
    rows = setting_rows([{"model.n_head": h, "train.lr": lr} for h in (1, 2) for lr in (1e-3, 3e-3)])
    plots.settings_png(report.group_by_setting(rows, ["model.n_head", "train.lr", "train.seed"]))
    fig = figures["settings.png"]
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["lr=0.001", "lr=0.003"]
    plots.settings_png(report.group_by_setting(setting_rows([{"model.n_head": h} for h in (1, 2)]),
                                               ["model.n_head", "train.seed"]))
    assert figures["settings.png"].legends == []


def test_a_first_point_that_would_not_squash_the_curve_is_drawn_whole(monkeypatch):
    """The first 5% of the steps are left out of the y-range only where they would more than double its height
    (plots.SQUASH): a short run's step-0 loss just above the rest stays on the axes, with no off-the-top note."""
    pytest.importorskip("matplotlib")
    figures = capture_figures(monkeypatch)
    ys = [3.9, 3.8, 3.7, 3.6]  # step 0 is 0.1 above the rest, whose own span is 0.2: not more than doubled
    plots.val_loss_png([{"label": "s", "runs": [{"metrics": [{"step": s, "val_loss": y}
                                                             for s, y in zip((0, 10, 20, 30), ys)]}]}])
    ax = figures["val_loss.png"].axes[0]
    assert ax.get_ylim()[1] >= max(ys), ax.get_ylim()
    assert not any("off the top" in t.get_text() for t in ax.texts)


# ---- compare.py's own checks (a second round) ----


def test_a_sweeps_folder_names_only_the_folders_that_are_runs(tmp_path):
    """Beside its runs a sweep's folder may hold other folders (logs/): they are not counted or named as runs."""
    (tmp_path / "sw").mkdir()
    for h in (1, 2):
        fake_run(tmp_path / "sw" / f"n_head={h}", h, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (tmp_path / "sw" / "logs").mkdir()
    with pytest.raises(UserError, match=r"sw is not a run directory: it holds 2 run\(s\) \(n_head=1, n_head=2\), as "
                                        r"a sweep's folder does"):
        compare.main([str(tmp_path / "sw"), "--out", str(tmp_path / "cmp")])


def test_a_sweeps_folder_named_with_a_leading_dash_gets_a_hint_that_is_no_flag(tmp_path, monkeypatch):
    """`compare.py -- -sw`: the hint's `compare.py -sw/*/` would be read as a flag; it says ./-sw/*/."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-sw").mkdir()
    for name in ("n_head=1", "n_head=2"):
        fake_run(tmp_path / "-sw" / name, 1, [(0, "4.1", "4.1")])
    with pytest.raises(UserError) as refused:
        compare.main(["--", "-sw"])
    assert str(refused.value).endswith(" ./-sw/*/")


def test_a_run_directory_that_does_not_exist_is_named_not_a_traceback(tmp_path):
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    missing = tmp_path / "nope"
    with pytest.raises(UserError, match=rf"^run directory not found: {re.escape(str(missing))}$"):
        compare.main([run, str(missing), "--out", str(tmp_path / "cmp")])
    assert not (tmp_path / "cmp").exists()


def test_runs_that_differ_are_not_said_to_have_identical_configs(tmp_path):
    runs_ = [fake_run(tmp_path / f"a{s}", s, [(0, "4.1", "4.1"), (10, "3.9", "3.9")]) for s in (1, 2)]
    result, printed = compared([*runs_, "--out", str(tmp_path / "cmp")])
    assert result["varied"]
    assert "configs are identical" not in printed


def test_the_default_out_is_out_compare_below_the_current_folder(tmp_path, monkeypatch):
    runs_ = [fake_run(tmp_path / f"a{s}", s, [(0, "4.1", "4.1"), (10, "3.9", "3.9")]) for s in (1, 2)]
    monkeypatch.chdir(tmp_path)
    result, _ = compared(runs_)
    assert result["out"] == str(Path("out") / "compare")
    assert (tmp_path / "out" / "compare" / "results.md").is_file()


def test_no_run_directory_is_a_usage_error_that_writes_nothing(tmp_path):
    with pytest.raises(UserError, match=r"the following arguments are required: RUN_DIR"):
        compare.main(["--out", str(tmp_path / "cmp")])
    assert not (tmp_path / "cmp").exists()


def test_a_seed_as_text_is_one_seed_and_a_key_that_does_not_apply_changes_no_data_and_labels_nothing():
    """A seed the sweep's grid gives as text ('1') and a run's config gives as a number (1) is one seed; a data
    key that does not apply to the tokenizer (a char run's bpe_vocab_size) neither hides a change of the text
    from data_changed nor labels a setting (compare.py --plot-only groups rows that only their config fills);
    two settings on different data, each on its own one text, are no change of data."""
    from tinygpt import report
    char = {"data.dataset": "d.txt", "data.tokenizer": "char", "data.val_fraction": 0.1}
    rows = [{"run": "a", "train.seed": "1", "best_val_loss": 1.0, "config": {**char, "train.seed": 1}},
            {"run": "b", "best_val_loss": 2.0, "config": {**char, "train.seed": 1}}]
    (g,) = report.group_by_setting(rows, ["train.seed"])
    assert g["n"] == 1 and len(g["repeats"]) == 1 and g["stats"]["best_val_loss"]["mean"] == 1.5
    edited = [{"data_digest": d * 64, "config": {**char, "data.bpe_vocab_size": v}}
              for d, v in (("a", 512), ("b", 1024))]
    assert report.data_changed(edited)
    two_texts = [{"data_digest": d * 64, "config": {**char, "data.dataset": f"{d}.txt"}} for d in "ab"]
    assert not report.data_changed(two_texts)
    bpe = {**char, "data.tokenizer": "bpe", "data.bpe_vocab_size": 512}
    groups = report.group_by_setting([{"run": "c", "config": {**char, "data.bpe_vocab_size": 1024}},
                                      {"run": "b", "config": bpe}], ["data.tokenizer", "data.bpe_vocab_size"])
    assert [g["label"] for g in groups] == ["tokenizer=char", "tokenizer=bpe, bpe_vocab_size=512"]

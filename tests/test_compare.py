"""Guards compare.py against what a run directory may hold besides a sound run: a diverged run's
nan and inf losses (shown in the tables, left out of the plots), and a probe.json that is not the
probe's figures (one line naming it)."""
from __future__ import annotations

import contextlib
import io

import pytest

import compare
from tinygpt import runs
from tinygpt.config import Config
from tinygpt.errors import UserError


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
    diverged = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9"), (20, "nan", "nan"), (21, "inf", "-inf")])
    sound = fake_run(tmp_path / "b", 2, [(0, "4.1", "4.1"), (10, "3.8", "3.8"), (21, "3.7", "3.6")])
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = compare.main([diverged, sound, "--out", str(tmp_path / "cmp")])
    assert "| a | 1 |" in printed.getvalue() and "| inf |" in printed.getvalue()  # final train loss: diverged
    assert str(tmp_path / "cmp" / "val_loss.png") in result["plots"]
    with contextlib.redirect_stdout(io.StringIO()):
        drawn = compare.main([diverged, sound, "--plot-only", "--out", str(tmp_path / "cmp")])
    assert drawn["plots"][0] == str(tmp_path / "a" / "loss.png")


@pytest.mark.parametrize("text", ['{"behaviour": 1}', "1e999999", "[" * 100_000, "[]", "{not json"],
                         ids=["no references", "a number", "deep", "a list", "not json"])
def test_a_probe_json_that_is_not_the_probes_figures_is_one_line(tmp_path, text):
    run = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    (tmp_path / "a" / "probe.json").write_text(text)
    with pytest.raises(UserError, match=r"a/probe.json (is damaged|does not hold the probe's figures)"):
        compare.main([run, "--out", str(tmp_path / "cmp")])


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
    with pytest.raises(UserError, match=r"--out='.*sw' holds a sweep's runs"):
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
    not) computed the same: one setting, averaged, not two settings labelled by folder paths."""
    a = fake_run(tmp_path / "a", 1, [(0, "4.1", "4.1"), (10, "3.9", "3.9")])
    b = tmp_path / "b"
    cfg = Config()
    cfg.train.seed, cfg.train.max_iters, cfg.train.plot = 2, 10, "never"
    cfg.data.prepared_dir = str(tmp_path / "elsewhere")
    b.mkdir()
    runs.write_config(b, cfg)
    runs.write_metrics(b, [{"step": 0, "train_loss": "4.0", "val_loss": "4.0"}, {"step": 10, "train_loss": "3.7",
                                                                                 "val_loss": "3.7"}])
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = compare.main([a, str(b), "--out", str(tmp_path / "cmp")])
    assert result["varied"] == ["train.seed"]
    assert "| all runs | 2 | 3.8000 ± 0.1414" in printed.getvalue(), printed.getvalue()

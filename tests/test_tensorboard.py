"""Guards train.tensorboard: a tiny run writes an event file that TensorBoard's own reader reads back
with the scalars of metrics.csv (train loss, lr, tokens/s and MFU at every log step, the train and
val loss estimates at every eval) and, at every eval, one attention image per layer; without the
tensorboard package the option is a one-line error before anything is written."""
from __future__ import annotations

import csv
import io
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import train
from conftest import ROOT
from tinygpt.errors import UserError

SETTINGS = ["data.stories_chars=20000", "data.tokenizer=char", "model.n_layer=2", "model.n_embd=32",
            "model.n_head=2", "model.block_size=32", "train.max_iters=20", "train.eval_interval=10",
            "train.log_interval=5", "train.eval_iters=2", "train.batch_size=4", "train.device=cpu",
            "train.dtype=float32", "train.plot=never", "train.tensorboard=true"]


@pytest.fixture
def quick_images(monkeypatch):
    """Each attention image a blank square: a real heatmap takes about a second to draw on 2 cores, and the tests
    using this look at which steps have images, not at them (test_event_file_holds_the_scalars_and_attention_images
    draws and reads real ones). Without matplotlib: ImportError, as the real one raises."""
    from tinygpt import attention_view

    def square(*args, **kwargs):
        from matplotlib.figure import Figure
        return Figure(figsize=(1, 1))

    monkeypatch.setattr(attention_view, "heatmap_figure", square)


def test_event_file_holds_the_scalars_and_attention_images(tmp_path, one_thread):
    pytest.importorskip("tensorboard")
    pytest.importorskip("matplotlib")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from PIL import Image  # matplotlib's own dependency

    run = tmp_path / "run"
    train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS,
                f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"])
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    tags = events.Tags()
    assert set(tags["scalars"]) == {"train/loss", "train/lr", "speed/tokens_per_s", "speed/mfu",
                                    "eval/train_loss", "eval/val_loss"}
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    logs = [r for r in rows if r["tokens_per_s"]]
    evals = [r for r in rows if r["val_loss"]]
    assert [e.step for e in events.Scalars("train/loss")] == [int(r["step"]) for r in logs] == [5, 10, 15, 20]
    assert [e.step for e in events.Scalars("eval/val_loss")] == [int(r["step"]) for r in evals] == [0, 10, 20]
    for tag, column, rows_of in [("train/loss", "train_loss", logs), ("train/lr", "lr", logs),
                                 ("speed/tokens_per_s", "tokens_per_s", logs), ("speed/mfu", "mfu", logs),
                                 ("eval/val_loss", "val_loss", evals), ("eval/train_loss", "train_loss", evals)]:
        values = [e.value for e in events.Scalars(tag)]
        assert values == pytest.approx([float(r[column]) for r in rows_of], rel=1e-3, abs=1e-4), tag
    assert set(tags["images"]) == {"attention/layer0", "attention/layer1"}
    for tag in tags["images"]:
        images = events.Images(tag)
        assert [i.step for i in images] == [0, 10, 20]
        picture = Image.open(io.BytesIO(images[-1].encoded_image_string))
        assert picture.size == (images[-1].width, images[-1].height) and min(picture.size) > 200
        pixels = np.asarray(picture.convert("RGB")).reshape(-1, 3)
        assert len(np.unique(pixels, axis=0)) > 10  # a heatmap, not a blank canvas


def test_a_resumed_run_keeps_the_checkpoints_step(tmp_path, one_thread, quick_images):
    """Stopped at step 15 and resumed: the events are those of metrics.csv, step 15 included (the
    resumed writer purged from the checkpoint's step on, which the resumed run never logs again)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run = tmp_path / "run"
    args = [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS, "train.max_iters=30",
            f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"]
    train.main([*args, "--stop-at", "15"])
    train.main([*args, "--resume"])
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    logged = [int(r["step"]) for r in rows if r["tokens_per_s"]]
    assert [e.step for e in events.Scalars("train/loss")] == logged == [5, 10, 15, 20, 25, 30]
    assert [e.step for e in events.Scalars("eval/val_loss")] == [int(r["step"]) for r in rows if r["val_loss"]]


def event_steps(run) -> tuple[list[int], list[int]]:
    """The steps of the eval/val_loss scalars and of the attention/layer0 images, as TensorBoard reads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    images = events.Images("attention/layer0") if "attention/layer0" in events.Tags()["images"] else []
    return [e.step for e in events.Scalars("eval/val_loss")], [i.step for i in images]


class Killed(BaseException):
    """A kill -9, as far as the run's files go: nothing after it is written for that step."""


def events_and_rows(run: Path) -> tuple:
    """The run's TensorBoard events, as TensorBoard's own reader reads them (every scalar and image), and
    its metrics.csv rows."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    with open(run / "metrics.csv", newline="") as f:
        return events, list(csv.DictReader(f))


def test_turned_on_at_a_resume_the_steps_before_come_from_metrics_csv(tmp_path, one_thread, capsys, quick_images):
    """train.tensorboard turned on at a --resume: the curves began at the resume, the steps before it
    missing. metrics.csv's rows up to it are now logged as scalars, with a note; the images cannot be."""
    pytest.importorskip("tensorboard")
    import train
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run = tmp_path / "run"
    args = [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS, "train.max_iters=30",
            f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"]
    train.main([*args, "train.tensorboard=false", "--stop-at", "15"])
    assert not (run / "tensorboard").exists()
    capsys.readouterr()
    train.main([*args, "--resume"])
    assert ("note: this run's TensorBoard log held none of its steps (train.tensorboard is new to the run, or its log "
            "was removed): its scalars up to step 15 come from metrics.csv; the attention images start with this "
            "resume") in capsys.readouterr().err
    events, rows = events_and_rows(run)
    logs, evals = [r for r in rows if r["tokens_per_s"]], [r for r in rows if r["val_loss"]]
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("train/loss")] == \
        [(int(r["step"]), float(r["train_loss"])) for r in logs]
    assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20, 25, 30]
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("eval/val_loss")] == \
        [(int(r["step"]), float(r["val_loss"])) for r in evals]
    assert [e.step for e in events.Scalars("eval/val_loss")] == [0, 10, 20, 30]
    assert [e.step for e in events.Images("attention/layer0")] == [20, 30]
    capsys.readouterr()
    train.main([*args, "train.max_iters=35", "--resume"])  # a log of its own: nothing filled in again
    assert "held none of its steps" not in capsys.readouterr().err
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20, 25, 30, 35]


@pytest.mark.slow
def test_an_eval_killed_while_drawing_is_drawn_again_on_resume(tmp_path, monkeypatch, one_thread):
    """ckpt.pt was saved before the attention images were drawn (~0.5 s): a kill in between left a
    checkpoint of step 10 without its image, and the resume (purging after step 10) never drew it."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("matplotlib")
    from tinygpt import tensorboard_log
    run = tmp_path / "run"
    args = [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS,
            f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"]
    draw, drawn = tensorboard_log.figure_pixels, []

    def killed_at_step_10(fig):
        drawn.append(fig)
        if len(drawn) == 3:  # step 10's first layer (steps 0 and 10 have two layers each)
            raise Killed
        return draw(fig)

    monkeypatch.setattr(tensorboard_log, "figure_pixels", killed_at_step_10)
    with pytest.raises(Killed):
        train.main(args)
    monkeypatch.setattr(tensorboard_log, "figure_pixels", draw)
    train.main([*args, "--resume"])
    with open(run / "metrics.csv", newline="") as f:
        evals = [int(r["step"]) for r in csv.DictReader(f) if r["val_loss"]]
    assert event_steps(run) == (evals, evals) == ([0, 10, 20], [0, 10, 20])


@pytest.mark.slow
def test_a_new_run_never_mixes_its_events_with_an_earlier_runs(tmp_path, monkeypatch, one_thread, quick_images):
    """`rm out/x/*` leaves tensorboard/ (a folder): a new run there added its events beside the old
    ones, every step twice. Now refused; a run that died before its first checkpoint (events of
    step 0 only) is started again, and its new events replace the old."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    args = [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS,
            f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"]
    train.main(args)
    for path in run.iterdir():
        if path.is_file():
            path.unlink()
    before = sorted(p.name for p in (run / "tensorboard").iterdir())
    with pytest.raises(UserError, match=f"train.out_dir='{run}' holds TensorBoard events \\(tensorboard/\\) but no "
                                        f"ckpt.pt to resume from: a new run's events would mix with them; move "
                                        f"tensorboard away to start a run there, or choose another out_dir"):
        train.main(args)
    assert [p.name for p in run.iterdir()] == ["tensorboard"]
    assert sorted(p.name for p in (run / "tensorboard").iterdir()) == before

    shutil.rmtree(run)
    save = train.Run.save

    def killed_at_the_first_checkpoint(self, name, with_optimizer=True):
        if name == "ckpt.pt":
            raise Killed
        save(self, name, with_optimizer)

    monkeypatch.setattr(train.Run, "save", killed_at_the_first_checkpoint)
    with pytest.raises(Killed):
        train.main(args)
    assert not (run / "ckpt.pt").exists() and event_steps(run)[0] == [0]
    monkeypatch.setattr(train.Run, "save", save)
    train.main(args)  # started again
    assert event_steps(run) == ([0, 10, 20], [0, 10, 20])


@pytest.mark.parametrize("kind", ["file", "link to nothing", "read-only folder"])
def test_a_tensorboard_folder_that_cannot_take_the_logs_is_one_line(tmp_path, kind, capsys):
    """tensorboard's writer thread printed its traceback (a folder that takes no file) or train.py
    ended in one (a link to nothing), after config.yaml was written."""
    import subprocess
    pytest.importorskip("tensorboard")
    folder = tmp_path / "run" / "tensorboard"
    folder.parent.mkdir()
    immutable = False
    if kind == "file":
        folder.write_text("mine")
    elif kind == "link to nothing":
        folder.symlink_to(tmp_path / "gone")
    else:
        folder.mkdir()
        folder.chmod(0o500)
        if os.access(folder, os.W_OK):  # root: an immutable folder (Linux, where chattr works) takes no file
            immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
            if not immutable:
                pytest.skip("root writes into read-only folders, and chattr +i failed")
    try:
        with pytest.raises(UserError, match=f"the TensorBoard folder {folder} is"):
            train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS,
                        f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={folder.parent}"])
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert [p.name for p in folder.parent.iterdir()] == ["tensorboard"]  # nothing else written
    assert not (tmp_path / "prepared").exists()


def test_a_tensorboard_folder_that_is_a_link_to_another_runs_is_refused(tmp_path):
    """Run B's tensorboard/ a link to run A's: B's resume wrote its events into A's folder, and TensorBoard,
    purging from B's step on, dropped A's later steps and showed B's values in their place (A's metrics.csv
    still right). A linked metrics.csv was refused; the folder is now too, before any work."""
    pytest.importorskip("tensorboard")
    other = tmp_path / "A" / "tensorboard"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text("A's")  # (events there: a new run is refused for them, a resume was not)
    folder = tmp_path / "B" / "tensorboard"
    folder.parent.mkdir()
    folder.symlink_to(other)
    with pytest.raises(UserError, match=f"^train.tensorboard=true: {folder} is a link to {other}, and a run writes "
                                        f"its own events .*; copy the folder instead, or remove the link$"):
        train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS,
                    f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={folder.parent}"])
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    assert [p.name for p in folder.parent.iterdir()] == ["tensorboard"]


def test_a_full_disk_under_the_log_is_one_line_without_the_threads_traceback(tmp_path, monkeypatch):
    """ENOSPC in tensorboard's writer thread printed that thread's traceback, then train.py ended
    with `error: No space left on device`, naming no file; after the last flush, close() let it pass."""
    import errno
    import threading
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    printed = []
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(args.exc_value))  # the hook before
    monkeypatch.setattr(tensorboard_log, "WRITER_ERRORS", [])
    board = tensorboard_log.TensorBoardLog(tmp_path, CharTokenizer.from_text("abc"), [0, 1, 2])
    assert threading.excepthook is tensorboard_log._quiet_writer_thread
    full = OSError(errno.ENOSPC, "No space left on device")

    class _AsyncWriterThread(threading.Thread):  # named as tensorboard's writer thread
        def run(self):
            raise full

    class Other(threading.Thread):
        def run(self):
            raise ValueError("not tensorboard's")

    for thread in (_AsyncWriterThread(), Other()):
        thread.start()
        thread.join()
    assert [type(e) for e in printed] == [ValueError]  # only the other thread's error reached the old hook
    with pytest.raises(UserError, match=f"cannot write the TensorBoard log {tmp_path / 'tensorboard'}: No space left"):
        board.close()  # tensorboard's close() does not raise its thread's error: this does


@pytest.mark.parametrize("error, fix", [("ENOSPC", "make room"), ("EFBIG", r"raise the file size limit \(ulimit -f\)"),
                                        ("EACCES", "mend that")])
@pytest.mark.parametrize("checkpoint", ["none", "file", "folder"])
def test_a_log_that_cannot_be_written_gives_the_fix_for_its_error_and_a_way_on_that_works(
        tmp_path, monkeypatch, error, fix, checkpoint):
    # a file-size limit was told to "make room", and a run stopped before its first checkpoint (the
    # step-0 images are the first big write) to "continue with --resume", which found no checkpoint
    # (nor in a folder named ckpt.pt: --resume refuses that too)
    import errno
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    monkeypatch.setattr(tensorboard_log, "WRITER_ERRORS", [])
    board = tensorboard_log.TensorBoardLog(tmp_path, CharTokenizer.from_text("abc"), [0, 1, 2])
    if checkpoint == "file":
        (tmp_path / "ckpt.pt").write_bytes(b"")
    elif checkpoint == "folder":
        (tmp_path / "ckpt.pt").mkdir()
    code = getattr(errno, error)
    tensorboard_log.WRITER_ERRORS.append(OSError(code, os.strerror(code)))
    then = "continue with --resume" if checkpoint == "file" else "run the command again"
    with pytest.raises(UserError, match=rf"cannot write the TensorBoard log .*: {os.strerror(code)}; {fix}, or set "
                                        rf"train.tensorboard=false, and {then}$"):
        board.close()


def test_a_run_folder_removed_while_it_logs_says_so_not_that_the_log_cannot_be_written(tmp_path, monkeypatch,
                                                                                       one_thread):
    """`rm -rf` of a training's folder with train.tensorboard on: the event file, opened again at each flush, was
    the first write to fail, and the line blamed the log (`cannot write the TensorBoard log ...: No such file or
    directory: b'...'`), where a training without it says the folder was removed."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    run, logged = tmp_path / "run", tensorboard_log.TensorBoardLog.log
    monkeypatch.setattr(tensorboard_log, "WRITER_ERRORS", [])  # (its writer thread's error stays in this test)

    def removed_meanwhile(board, step, row):
        if step == 10:
            shutil.rmtree(run)
        logged(board, step, row)
    monkeypatch.setattr(tensorboard_log.TensorBoardLog, "log", removed_meanwhile)
    with pytest.raises(UserError, match=f"^train.out_dir={str(run)!r} was removed or moved .* while this training ran"):
        train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS,
                    f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"])
    assert not run.exists()


def test_a_file_name_given_as_bytes_is_shown_as_text():
    """TensorBoard's writer names its file as bytes: the line showed `b'/runs/x/tensorboard/events...'`."""
    import errno
    from tinygpt.errors import environment_error
    error = OSError(errno.ENOENT, "No such file or directory", b"/runs/x/tensorboard/events.out.tfevents.1")
    assert environment_error(error) == "No such file or directory: /runs/x/tensorboard/events.out.tfevents.1"


def test_one_missing_step_is_named_alone(tmp_path):
    """A gap of one log step was told as `its scalars of steps 25 to 25`."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    board = tensorboard_log.TensorBoardLog(tmp_path, CharTokenizer.from_text("abc"), [0, 1, 2], resumed_at=25)
    board.logged = {tag: {20} for tag in tensorboard_log.SCALARS.values()}  # what an earlier session logged
    rows = [{"step": step, "train_loss": "2.0", "lr": "1e-3", "tokens_per_s": "100", "mfu": "0.1"} for step in (20, 25)]
    assert board.backfill(rows) == ("note: part of this run was trained without train.tensorboard: its scalars of "
                                    "step 25 come from metrics.csv now; that step has no attention images")
    board.close()


def test_a_missing_step_with_a_log_row_and_an_eval_row_is_named_once(tmp_path):
    """A step that has both rows in metrics.csv (an eval step that is a log step too) was counted twice:
    `its scalars of steps 30 to 30`."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    board = tensorboard_log.TensorBoardLog(tmp_path, CharTokenizer.from_text("abc"), [0, 1, 2], resumed_at=30)
    board.logged = {tag: {20} for tag in [*tensorboard_log.SCALARS.values(), *tensorboard_log.EVAL_SCALARS.values()]}
    log = {"train_loss": "2.0", "lr": "1e-3", "tokens_per_s": "100", "mfu": "0.1", "val_loss": ""}
    rows = [{"step": step, **log} for step in (20, 30)] + [{"step": 30, "train_loss": "2.1", "val_loss": "2.2"}]
    assert board.backfill(rows) == ("note: part of this run was trained without train.tensorboard: its scalars of "
                                    "step 30 come from metrics.csv now; that step has no attention images")
    board.close()


def test_a_damaged_event_file_is_named_not_blamed_on_a_session_without_the_flag(tmp_path):
    """An event file of bytes TensorBoard cannot read (its loader skips it without a word) was told as `part of
    this run was trained without train.tensorboard` (or as the flag being new to the run): the note names it."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    (tmp_path / "tensorboard").mkdir()
    damaged = tmp_path / "tensorboard" / "events.out.tfevents.1.host.1.0"
    damaged.write_bytes(bytes(range(256)) * 12)
    board = tensorboard_log.TensorBoardLog(tmp_path, CharTokenizer.from_text("abc"), [0, 1, 2], resumed_at=20)
    rows = [{"step": step, "train_loss": "2.0", "lr": "1e-3", "tokens_per_s": "100", "mfu": "0.1"} for step in (10, 20)]
    note = board.backfill(rows)
    assert note == (f"note: TensorBoard cannot read {damaged} (damaged): its scalars of steps 10 to 20 come from "
                    f"metrics.csv now; those steps have no attention images")
    board.close()
    assert tensorboard_log.logged_steps(tmp_path / "tensorboard", 20)[1] == [damaged]  # the new file reads

    # damaged from the middle on: its loader reads the first records and stops without a word, and the note again
    # blamed a session without the flag ("steps 10 to 20"), or called the flag new to the run
    for name in [p.name for p in (tmp_path / "tensorboard").iterdir()]:
        (tmp_path / "tensorboard" / name).unlink()
    loss_events(tmp_path / "tensorboard", (0, 10, 20))
    written = next((tmp_path / "tensorboard").iterdir())
    assert tensorboard_log.logged_steps(tmp_path / "tensorboard", 20) == ({"train/loss": {0, 10, 20}}, [])
    data = bytearray(written.read_bytes())
    data[len(data) // 2:] = bytes((b * 7 + 13) % 256 for b in data[len(data) // 2:])
    written.write_bytes(bytes(data))
    steps, unreadable = tensorboard_log.logged_steps(tmp_path / "tensorboard", 20)
    assert unreadable == [written] and steps.get("train/loss", set()) < {0, 10, 20}


def loss_events(board: Path, steps) -> None:
    """One session's event file in `board` (TensorBoard's own writer): train/loss 2.0 at each of `steps`."""
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(str(board))
    for step in steps:
        writer.add_scalar("train/loss", 2.0, step)
    writer.close()


def test_the_step_a_later_session_purges_from_counts_as_dropped(tmp_path):
    """A session started at purge_step=5 drops step 5 too (TensorBoard keeps steps below it): a resume must log it
    again, or its curves have a gap there."""
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter
    from tinygpt import tensorboard_log
    board = tmp_path / "tensorboard"
    loss_events(board, (4, 5, 6))
    time.sleep(1.1)  # (the event file's name starts with its second: the later session's sorts after it)
    SummaryWriter(str(board), purge_step=5).close()
    assert tensorboard_log.logged_steps(board, 10) == ({"train/loss": {4}}, [])


def test_a_session_without_the_flag_marks_its_own_log_not_a_linked_one(tmp_path):
    """A session without train.tensorboard marks its run's log (a purge_step event file); where RUN/tensorboard is
    a link to another run's log, that log is left alone: the mark would drop the other run's later steps."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    other, run = tmp_path / "other" / "tensorboard", tmp_path / "run"
    other.mkdir(parents=True)
    run.mkdir()
    (run / "tensorboard").symlink_to(other)
    tensorboard_log.mark_a_session_without(run, 5)
    assert list(other.iterdir()) == []
    tensorboard_log.mark_a_session_without(other.parent, 5)  # (its own log: marked)
    assert len(list(other.iterdir())) == 1


def test_an_event_file_with_a_few_bytes_past_its_last_record_is_named_damaged(tmp_path):
    """Fewer bytes after the last record than a record's header: TensorBoard's loader reads the records and stops
    without a word, so the file must be counted as damaged, not as whole."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    board = tmp_path / "tensorboard"
    loss_events(board, (10,))
    written = next(board.iterdir())
    assert tensorboard_log.logged_steps(board, 20) == ({"train/loss": {10}}, [])
    with open(written, "ab") as f:
        f.write(b"junk!")
    assert tensorboard_log.logged_steps(board, 20) == ({"train/loss": {10}}, [written])
    os.truncate(written, written.stat().st_size - 6)  # (the last record cut short: no count of records)
    assert tensorboard_log.whole_records(written) == math.inf


def test_the_images_name_the_run_when_its_folder_is_given_as_a_dot(tmp_path, monkeypatch):
    # train.out_dir=. titled every attention image ", step 2, layer 0: ..."
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    (tmp_path / "my-run").mkdir()
    monkeypatch.chdir(tmp_path / "my-run")
    board = tensorboard_log.TensorBoardLog(Path("."), CharTokenizer.from_text("abc"), [0, 1, 2])
    assert board.run_name == "my-run"
    board.close()


def test_the_attention_images_show_the_weights_without_dropout(tmp_path, monkeypatch):
    """A model trained with dropout 0.5 is drawn in eval mode, so two evals of the same weights draw
    the same attention (with dropout's random masks, each image would be of another model), and
    it goes back to training after."""
    import torch
    pytest.importorskip("tensorboard")
    from model import GPT, ModelConfig
    from tinygpt import attention_view, tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    drawn = []
    monkeypatch.setattr(attention_view, "heatmap_figure", lambda weights, *args, **kwargs: drawn.append(weights))
    monkeypatch.setattr(tensorboard_log, "figure_pixels", lambda fig: np.zeros((8, 8, 3), np.uint8))
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=8, n_layer=2, n_head=2, n_embd=16, vocab_size=3, dropout=0.5)).train()
    board = tensorboard_log.TensorBoardLog(tmp_path, CharTokenizer.from_text("abc"), [0, 1, 2, 1, 0])
    try:
        for step in (0, 10):
            board.eval(step, {"train": 1.0, "val": 1.0}, model)
        assert model.training and len(drawn) == 4  # 2 evals x 2 layers
        model.eval()  # and a model in eval mode stays in it
        board.eval(20, {"train": 1.0, "val": 1.0}, model)
        assert not model.training
    finally:
        board.close()
    assert torch.equal(drawn[0], drawn[2]) and torch.equal(drawn[1], drawn[3])


def test_an_error_of_any_other_kind_in_the_writer_thread_reaches_the_hook_before(tmp_path, monkeypatch):
    """Only the writer thread's OSError (a full disk) is kept for one line: any other error of that
    thread, a bug, is printed by the hook there was before, not swallowed."""
    import threading
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    printed = []
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(args.exc_value))  # the hook before
    monkeypatch.setattr(tensorboard_log, "_prior_hook", tensorboard_log._prior_hook)  # (put back after the test)
    monkeypatch.setattr(tensorboard_log, "WRITER_ERRORS", [])
    board = tensorboard_log.TensorBoardLog(tmp_path, CharTokenizer.from_text("abc"), [0, 1, 2])
    bug = ValueError("a bug in the writer thread")

    class _AsyncWriterThread(threading.Thread):  # named as tensorboard's writer thread
        def run(self):
            raise bug

    class OtherThread(threading.Thread):  # an OSError of any other thread is not the log's to keep
        def run(self):
            raise other

    other = OSError("another thread's")
    for thread in (_AsyncWriterThread(), OtherThread()):
        thread.start()
        thread.join()
    assert printed == [bug, other] and tensorboard_log.WRITER_ERRORS == []
    board.close()  # nothing kept for it to raise
    # a second log in the same process (a notebook, the tests) hands other errors on as the first did, once
    tensorboard_log.TensorBoardLog(tmp_path / "second", CharTokenizer.from_text("abc"), [0, 1, 2]).close()
    thread = _AsyncWriterThread()
    thread.start()
    thread.join()
    assert printed == [bug, other, bug]


def test_without_the_package_it_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import -> ImportError
    with pytest.raises(UserError, match="needs the tensorboard package: pip install tensorboard"):
        train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS,
                    f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={tmp_path / 'run'}"])
    assert not any(tmp_path.iterdir())  # nothing prepared, nothing written


def test_a_session_trained_without_the_flag_leaves_no_gap_once_it_is_back(tmp_path, one_thread, capsys,
                                                                          quick_images):
    """A resume that forgot train.tensorboard=true said nothing, and the next resume with it filled nothing in: the
    curves lacked those steps for good (metrics.csv had them). The resume without it says so; the next fills the
    gap's scalars in from metrics.csv, with a note."""
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    args = [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS, "train.max_iters=40",
            f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"]
    train.main([*args, "--stop-at", "12"])
    capsys.readouterr()
    train.main([*args, "train.tensorboard=false", "--resume", "--stop-at", "27"])
    assert "note: this run logs to TensorBoard" in capsys.readouterr().err
    train.main([*args, "--resume"])
    assert ("note: part of this run was trained without train.tensorboard: its scalars of steps 15 to 25 come from "
            "metrics.csv now; those steps have no attention images") in capsys.readouterr().err
    events, rows = events_and_rows(run)
    for tag, column, kind in (("train/loss", "train_loss", "tokens_per_s"), ("train/lr", "lr", "tokens_per_s"),
                              ("eval/val_loss", "val_loss", "val_loss")):
        assert [e.step for e in events.Scalars(tag)] == [int(r["step"]) for r in rows if r[kind]], tag
    assert [e.step for e in events.Scalars("eval/val_loss")] == [0, 10, 20, 30, 40]
    assert [e.step for e in events.Images("attention/layer0")] == [0, 10, 30, 40]


def test_a_killed_sessions_late_events_do_not_outlive_a_session_without_the_flag(
        tmp_path, one_thread, capsys, quick_images):
    """Killed after logging steps its checkpoint never reached, then resumed without train.tensorboard, then
    with it: the killed session's events of those steps stayed (only a session with the flag marked them
    dropped), and the last resume took them for logged, so TensorBoard showed values metrics.csv does not
    have (another lr, here). The session without the flag now marks them dropped too; the resume with it
    fills those steps in from metrics.csv. A dangling link named like an event file is one line."""
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    args = [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS, "train.max_iters=40",
            f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"]
    train.main([*args, "--stop-at", "20"])
    at_20 = {name: (run / name).read_bytes() for name in ("ckpt.pt", "best.pt", "metrics.csv")}
    train.main([*args, "--resume", "--stop-at", "30"])  # logs 25 and 30 ...
    for name, data in at_20.items():  # ... and is killed before its checkpoint: as if it never saved
        (run / name).write_bytes(data)
    train.main([*args, "train.tensorboard=false", "train.lr=5e-4", "--resume", "--stop-at", "30"])
    capsys.readouterr()
    train.main([*args, "train.lr=5e-4", "--resume"])
    assert "its scalars of steps 25 to 30 come from metrics.csv now" in capsys.readouterr().err
    events, rows = events_and_rows(run)
    logged = {int(r["step"]): float(r["lr"]) for r in rows if r["tokens_per_s"]}
    assert {e.step: pytest.approx(e.value, rel=1e-3) for e in events.Scalars("train/lr")} == logged
    (run / "tensorboard" / "events.out.tfevents.0.link").symlink_to(tmp_path / "nothing")
    config = (run / "config.yaml").read_bytes()
    with pytest.raises(UserError, match=r"events.out.tfevents.0.link is named as a TensorBoard event file, but is a "
                                        r"link to nothing; remove it$"):
        train.main([*args, "train.max_iters=45", "--resume"])
    assert (run / "config.yaml").read_bytes() == config  # (it was rewritten first: max_iters 45, never trained)
    (run / "tensorboard" / "events.out.tfevents.0.link").unlink()
    (run / "tensorboard" / "events.out.tfevents.0.dir").mkdir()
    with pytest.raises(UserError, match=r"events.out.tfevents.0.dir is named as a TensorBoard event file, but is a "
                                        r"folder; remove it$"):
        train.main([*args, "train.max_iters=45", "--resume"])
    assert (run / "config.yaml").read_bytes() == config


def test_a_run_folder_whose_name_is_not_utf8_is_refused_before_any_work(tmp_path):
    """TensorBoard writes its paths as UTF-8: a folder name holding the byte 0xff ended in a
    UnicodeEncodeError traceback, after config.yaml and an empty tensorboard/ were written."""
    run = Path(os.fsdecode(bytes(tmp_path) + b"/tb\xff"))
    with pytest.raises(UserError, match=r"^train.tensorboard=true: train.out_dir=.* holds a byte that is not UTF-8"):
        train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", *SETTINGS,
                    f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}"])
    assert not run.exists()


def test_a_new_runs_session_without_the_flag_drops_a_dead_first_starts_events(tmp_path):
    """A new run trained without train.tensorboard, in a folder whose log holds a dead first start's events: the
    mark it leaves (purge_step 0) drops them all, so a later resume with the flag fills every step in from
    metrics.csv instead of keeping the dead start's values."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    board = tmp_path / "tensorboard"
    loss_events(board, (0, 5, 10))
    assert tensorboard_log.logged_steps(board, 10) == ({"train/loss": {0, 5, 10}}, [])
    time.sleep(1.1)  # (the event file's name starts with its second: the mark's sorts after it)
    tensorboard_log.mark_a_session_without(tmp_path, None)
    assert tensorboard_log.logged_steps(board, 10) == ({"train/loss": set()}, [])


def test_an_event_file_whose_last_record_is_damaged_is_named_damaged(tmp_path):
    """The lengths of every record add up, but the last one's data fails its checksum: TensorBoard's loader reads
    the records before it and stops without a word, so the file is damaged, and that step not logged."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    board = tmp_path / "tensorboard"
    loss_events(board, (5, 10))
    written = next(board.iterdir())
    records = tensorboard_log.whole_records(written)
    assert tensorboard_log.logged_steps(board, 20) == ({"train/loss": {5, 10}}, [])
    data = bytearray(written.read_bytes())
    data[-5] ^= 0xFF  # (the last byte of the last record's data, before its 4 bytes of checksum)
    written.write_bytes(bytes(data))
    assert tensorboard_log.whole_records(written) == records  # (its lengths still add up)
    steps, unreadable = tensorboard_log.logged_steps(board, 20)
    assert unreadable == [written] and steps.get("train/loss", set()) < {5, 10}


def test_steps_past_the_resume_are_not_taken_for_logged(tmp_path):
    """A killed session's events past the checkpoint the run resumes from (dropped by TensorBoard at the resume's
    purge_step) are not what the log holds of the run: a log holding only those held none of its steps."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    from tinygpt.tokenizer import CharTokenizer
    loss_events(tmp_path / "tensorboard", (10, 25, 30))
    assert tensorboard_log.logged_steps(tmp_path / "tensorboard", 20) == ({"train/loss": {10}}, [])
    for path in (tmp_path / "tensorboard").iterdir():
        path.unlink()
    loss_events(tmp_path / "tensorboard", (25, 30))  # only the late steps of a session killed before its checkpoint
    board = tensorboard_log.TensorBoardLog(tmp_path, CharTokenizer.from_text("abc"), [0, 1, 2], resumed_at=20)
    rows = [{"step": step, "train_loss": "2.0", "lr": "1e-3", "tokens_per_s": "100", "mfu": "0.1"} for step in (10, 20)]
    note = board.backfill(rows)
    board.close()
    assert note.startswith("note: this run's TensorBoard log held none of its steps") and "up to step 20" in note


def test_a_record_of_length_zero_is_no_count_of_records(tmp_path):
    """A hole of zeros (a sparse or zero-filled tail) reads as records of length 0: no event is empty, so the file has
    no count of records (inf), and is not walked 16 bytes at a time (67 M steps a GB)."""
    pytest.importorskip("tensorboard")
    from tinygpt import tensorboard_log
    board = tmp_path / "tensorboard"
    loss_events(board, (10,))
    written = next(board.iterdir())
    assert tensorboard_log.whole_records(written) < math.inf
    with open(written, "ab") as f:
        f.write(bytes(16))  # (exactly one record's header and checksums: the lengths still add up)
    assert tensorboard_log.whole_records(written) == math.inf
    assert tensorboard_log.logged_steps(board, 20) == ({"train/loss": {10}}, [written])

"""TensorBoard logging of a training run (`train.tensorboard: true`), into RUN_DIR/tensorboard:

    python train.py configs/stories.yaml --set train.tensorboard=true
    tensorboard --logdir out/stories/tensorboard

Scalars: at every log step `train/loss` (the running mean since the last log, as in metrics.csv),
`train/lr`, `speed/tokens_per_s` and `speed/mfu`; at every eval `eval/train_loss` and
`eval/val_loss`. Images: at every eval, `attention/layerL`, the heatmap of layer L's heads over a
fixed prompt (the first tokens of the training split, the same at every eval), so the slider shows
the heads learning where to look. The `tensorboard` package is optional: `require_tensorboard`
turns its absence into a one-line error before training starts; the images also need matplotlib.
"""
from __future__ import annotations

import errno
import importlib
import math
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from model import GPT
from tinygpt import attention_view
from tinygpt.checkpoint import check_writable, is_utf8, not_regular
from tinygpt.errors import FULL_DISK, UserError, environment_error, first_few, short
from tinygpt.plots import missing_glyphs_quiet
from tinygpt.runs import run_name

LOG_DIR = "tensorboard"  # inside the run directory
PROMPT_TOKENS = attention_view.SHOWN  # the fixed prompt of the attention images: as many tokens as the tables show
SCALARS = {"train_loss": "train/loss", "lr": "train/lr", "tokens_per_s": "speed/tokens_per_s", "mfu": "speed/mfu"}
EVAL_SCALARS = {"train_loss": "eval/train_loss", "val_loss": "eval/val_loss"}


def logged_steps(log_dir: Path, through: int) -> tuple[dict[str, set[int]], list[Path]]:
    """The steps up to `through` at which the event files in log_dir hold each scalar tag: what earlier sessions
    of the run logged (a session trained without train.tensorboard logged nothing); and the event files
    TensorBoard cannot read whole (damaged: its loader stops at the first bad record without a word)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog
    steps: dict[str, set[int]] = {}
    unreadable = []
    for path in event_files(log_dir):
        read = 0
        for event in EventFileLoader(str(path)).Load():
            read += 1
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                for seen in steps.values():  # a later session (purge_step) replaced these: TensorBoard drops them
                    seen.difference_update([s for s in seen if s >= event.step])
            if event.step <= through and event.HasField("summary"):
                for value in event.summary.value:
                    steps.setdefault(value.tag, set()).add(event.step)
        if path.is_file() and read < whole_records(path):
            unreadable.append(path)
    return steps, unreadable


def event_files(log_dir: Path) -> list[Path]:
    """The event files in log_dir, in TensorBoard's order; a UserError for one that is no file (a link to nothing:
    tensorboard's NotFoundError, a traceback; a folder, a FIFO)."""
    paths = sorted(log_dir.glob("events.out.tfevents.*")) if log_dir.is_dir() else []
    for path in paths:
        if not path.is_file():
            what = "a link to nothing" if not path.exists() else not_regular(path)
            raise UserError(f"{path} is named as a TensorBoard event file, but is {what}; remove it")
    return paths


def mark_a_session_without(run_dir: Path, resumed_at: int | None) -> None:
    """A session that trains without train.tensorboard in a run whose log has events: the log is marked
    as a session with it marks it (its writer's purge_step), where the tensorboard package is there and the
    folder takes a file: the events an interrupted session wrote after this one's start (killed between an
    eval and its checkpoint; a new run's dead first start) are then dropped by TensorBoard, and filled in
    from metrics.csv by a later resume with it, not shown beside metrics.csv's other values for those steps."""
    log_dir = Path(run_dir) / LOG_DIR
    if log_dir.is_symlink() or not log_dir.is_dir() or not os.access(log_dir, os.W_OK | os.X_OK):
        return  # (the log is optional here: no error for a session that does not write it)
    try:
        from torch.utils.tensorboard import SummaryWriter
        SummaryWriter(str(log_dir), purge_step=0 if resumed_at is None else resumed_at + 1).close()
    except (ImportError, OSError):
        pass


def whole_records(path: Path) -> int | float:
    """How many records an event file holds, by their lengths alone (a record: its length in 8 bytes, 4 of
    checksum, the data, 4 more); inf where the lengths do not add up to the file's size (damaged, or cut) or
    one is 0 (no event is empty)."""
    size, at, records = path.stat().st_size, 0, 0
    with open(path, "rb") as f:
        while at + 12 <= size:
            f.seek(at)
            length = int.from_bytes(f.read(8), "little")
            if length == 0:  # (no event is empty: a hole, whose zeros took 67 M steps a GB to walk)
                return math.inf
            at += 16 + length
            records += 1
    return records if at == size else math.inf


def require_tensorboard(run_dir: Path) -> None:
    """A one-line UserError, before any work, when the tensorboard package is missing or
    RUN_DIR/tensorboard cannot take its files (a file of that name, a link to nothing, a folder
    that takes no new file): tensorboard's writer thread would print a traceback. Nor may the
    folder's name hold a byte that is not UTF-8: TensorBoard writes its paths as UTF-8 (a traceback,
    after config.yaml and an empty tensorboard/ were written)."""
    if not is_utf8(str(run_dir)):
        raise UserError(f"train.tensorboard=true: train.out_dir={short(str(run_dir))} holds a byte that is not "
                        f"UTF-8, and TensorBoard writes its paths as UTF-8; give a folder whose name is UTF-8 (or set "
                        f"train.tensorboard=false)")
    try:
        importlib.import_module("torch.utils.tensorboard")  # imports the tensorboard package
    except ImportError:
        raise UserError("train.tensorboard=true needs the tensorboard package: pip install tensorboard "
                        "(or set train.tensorboard=false)") from None
    board = Path(run_dir) / LOG_DIR
    if board.is_symlink() and board.exists():  # (a link to nothing: check_writable says so)
        # another run's folder, maybe: its events would be purged from our resume's step on (what TensorBoard
        # does when a run goes back), its curves showing ours
        raise UserError(f"train.tensorboard=true: {board} is a link to {os.path.realpath(board)}, and a run writes "
                        f"its own events (the link's target would get them, another run's maybe, whose later steps "
                        f"TensorBoard would drop); copy the folder instead, or remove the link")
    check_writable(board, "the TensorBoard folder")
    event_files(board)  # (found when the log was opened, after a resume's config.yaml was rewritten)


def figure_pixels(fig) -> np.ndarray:
    """A matplotlib Figure rendered to an RGB array (H, W, 3), uint8."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    with missing_glyphs_quiet():
        canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


class TensorBoardLog:
    """Writes a run's scalars and attention images; one per run, on the main process only."""

    def __init__(self, run_dir: Path, tokenizer, prompt: Sequence[int], resumed_at: int | None = None,
                 guard: Callable[[], None] | None = None) -> None:
        """`guard`: checkpoint.atomic_write's (train.Run.check_folder), asked first when a write fails."""
        from torch.utils.tensorboard import SummaryWriter
        self.guard = guard
        # purge_step: a resumed run drops what an interrupted session wrote after its checkpoint (the
        # steps after it; metrics.csv keeps the checkpoint's own step, and so does this: eval writes a
        # step's events before its checkpoint); a new run drops all earlier events, those of a run
        # started again after it died before its first checkpoint (runs.check_run_dir refuses others)
        self.dir = Path(run_dir) / LOG_DIR
        if threading.excepthook is not _quiet_writer_thread:
            global _prior_hook
            _prior_hook, threading.excepthook = threading.excepthook, _quiet_writer_thread
        # a resume: what the log holds up to it (nothing where train.tensorboard is turned on now, a gap
        # where a session trained without it): backfill() fills the rest in from metrics.csv
        self.logged, self.unreadable = logged_steps(self.dir, resumed_at) if resumed_at is not None else (None, [])
        self.resumed_at = resumed_at
        with self._writing():
            self.writer = SummaryWriter(str(self.dir), purge_step=0 if resumed_at is None else resumed_at + 1)
        self.prompt = [int(i) for i in prompt]
        self.labels = attention_view.token_labels(tokenizer, self.prompt)
        self.text = tokenizer.decode(self.prompt)
        self.run_name = run_name(run_dir)
        self.images = True

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A file the writer cannot write (a full disk) is the user's to fix: one line naming the
        folder. (tensorboard writes from a thread of its own, whose error the writer raises again
        at its next call, but not at close(); _quiet_writer_thread keeps it for here, without that
        thread's traceback.)"""
        try:
            yield
            if WRITER_ERRORS:
                raise WRITER_ERRORS.pop()
        except OSError as e:  # the fix for the error, and how to go on: --resume only where there is a checkpoint
            if self.guard is not None:
                self.guard()  # the run folder removed (rm -rf) or moved while it trained: that is the cause to tell
            fix = "raise the file size limit (ulimit -f)" if e.errno == errno.EFBIG else \
                "make room" if e.errno in FULL_DISK else "mend that"
            then = "continue with --resume" if (self.dir.parent / "ckpt.pt").is_file() else "run the command again"
            raise UserError(f"cannot write the TensorBoard log {self.dir}: {environment_error(e)}; {fix}, or set "
                            f"train.tensorboard=false, and {then}") from None

    def log(self, step: int, row: dict[str, Any]) -> None:
        """A log row of metrics.csv (values as written) -> scalars."""
        with self._writing():
            for column, tag in SCALARS.items():
                if row.get(column) not in (None, ""):
                    self.writer.add_scalar(tag, float(row[column]), step)
            self.writer.flush()

    def backfill(self, rows: list[dict[str, Any]]) -> str | None:
        """A resumed run whose log lacks steps up to the resume (trained without train.tensorboard until now,
        or in one of its sessions): those of metrics.csv's rows go in as scalars, so the curves have no gap,
        with a note; the attention images of those steps cannot (their weights are gone). None where there
        was nothing to fill in."""
        if self.logged is None:
            return None
        filled = set()
        with self._writing():
            for row in rows:
                step = int(row["step"])
                # an eval's row has a val loss, a log row has none
                tags = EVAL_SCALARS if row.get("val_loss") not in (None, "") else SCALARS
                missing = {column: tag for column, tag in tags.items()
                           if row.get(column) not in (None, "") and step not in self.logged.get(tag, ())}
                for column, tag in missing.items():
                    self.writer.add_scalar(tag, float(row[column]), step)
                if missing:
                    filled.add(step)  # (a step has a log row and an eval row)
            self.writer.flush()
        if not filled:
            return None
        first, last = min(filled), max(filled)
        steps = f"step {first}" if first == last else f"steps {first} to {last}"
        no_images = f"{'that step has' if first == last else 'those steps have'} no attention images"
        if self.unreadable:
            return (f"note: TensorBoard cannot read {first_few([str(path) for path in self.unreadable])} (damaged): "
                    f"its scalars of {steps} come from metrics.csv now; {no_images}")
        if not self.logged:
            return (f"note: this run's TensorBoard log held none of its steps (train.tensorboard is new to the run, "
                    f"or its log was removed): its scalars up to step {self.resumed_at} come from metrics.csv; the "
                    f"attention images start with this resume")
        return (f"note: part of this run was trained without train.tensorboard: its scalars of {steps} come from "
                f"metrics.csv now; {no_images}")

    @torch.no_grad()
    def eval(self, step: int, losses: dict[str, float], model: GPT) -> None:
        """The eval's loss estimates -> scalars; every layer's attention over the prompt -> an image."""
        with self._writing():
            for split in ("train", "val"):
                self.writer.add_scalar(EVAL_SCALARS[f"{split}_loss"], losses[split], step)
        if self.images:
            was_training = model.training
            model.eval()  # no dropout in the weights shown
            _, traces = attention_view.window_traces(model, self.prompt)  # per layer: weights (1, nh, T, T)
            model.train(was_training)
            try:
                for layer, trace in enumerate(traces):
                    fig = attention_view.heatmap_figure(
                        trace.weights[0], self.labels, len(self.prompt), model.config.causal,
                        title=f"{self.run_name}, step {step}, layer {layer}: {self.text!r}")
                    with self._writing():
                        self.writer.add_image(f"attention/layer{layer}", figure_pixels(fig), step, dataformats="HWC")
            except ImportError:
                print("note: train.tensorboard draws the attention images with matplotlib, which is not "
                      "installed (pip install matplotlib); logging the scalars only", file=sys.stderr)
                self.images = False
        with self._writing():
            self.writer.flush()

    def close(self) -> None:
        with self._writing():
            self.writer.close()


WRITER_ERRORS: list[OSError] = []  # the writer thread's, for TensorBoardLog to raise in one line
_prior_hook = threading.excepthook


def _quiet_writer_thread(args: threading.ExceptHookArgs) -> None:
    """threading.excepthook: an OSError of tensorboard's writer thread is kept for TensorBoardLog to
    say in one line, its traceback not printed; anything else goes to the hook there was before."""
    if type(args.thread).__name__ == "_AsyncWriterThread" and issubclass(args.exc_type, OSError):
        WRITER_ERRORS.append(args.exc_value)
        return
    _prior_hook(args)

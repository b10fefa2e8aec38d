"""The run directory: what a training run writes into `train.out_dir`, and every reader of it.

    config.yaml   the resolved config (model.vocab_size included)
    ckpt.pt       the latest state, enough to resume exactly, metrics rows too (tinygpt/checkpoint.py)
    best.pt       the weights with the lowest val loss (sample.py's choice)
    metrics.csv   one row per log step and per eval (METRICS)
    loss.png      train and val loss curves                          (tinygpt/plots.py)
    probe.json    the coreference probe's figures, when sweep.py --probe ran it
    tensorboard/  TensorBoard event files, with train.tensorboard   (tinygpt/tensorboard_log.py)
    .lock         while a training writes the folder                 (run_lock)

train.py writes them, and sweep.py, compare.py, probe.py and export.py read them, through this module and
tinygpt/checkpoint.py (the checkpoints' format, which of a run's two to read, and the atomic writes); the
scripts themselves only ask whether a run's file exists, or how old it is.
"""
from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import math
import os
import stat
import statistics
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from model import GPT, ModelConfig
from tinygpt.checkpoint import (atomic_write_text, check_writable, checkpoint_config, dead_link, file_kind,
                                load_checkpoint, make_folder, mostly_holes, not_regular, of_two_runs, peek_checkpoint,
                                prepared_data, remove_empty, resolved, run_around, saved_step_and_data)
from tinygpt.config import (CHECKPOINTS, MAX_INT, RUN_HEADER, Config, config_from_dict, config_to_yaml, flat_config,
                            is_run_config, is_run_header, is_runs_own_config, read_yaml, same_path, set_word)
from tinygpt.errors import (UserError, count, first_few, read_capped, reason, shell_quote, short, shown_as_unicode,
                            shown_path)

try:  # the run lock: flock on POSIX, msvcrt's byte lock on Windows; both die with their process
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
    import msvcrt

METRICS = ["step", "train_loss", "val_loss", "lr", "tokens_per_s", "mfu", "elapsed_s"]
TRAIN_FILES = ("config.yaml", *CHECKPOINTS, "metrics.csv", "loss.png")  # what train.py writes
RUN_FILES = (*TRAIN_FILES, "probe.json")
LOCK = ".lock"
HELD = {errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES}  # flock's errors for a lock another process holds
MAX_METRICS_BYTES = 256 << 20  # metrics.csv: ~80 bytes a row, 3 million rows (30 million steps at log_interval 10)
MAX_PROBE_BYTES = 8 << 20  # probe.json: a few KB
REPORT_LOCK = ".sweep.lock"  # in a sweep's or a comparison's --out while one writes there (run_lock)
DIVERGED = "diverged at step"  # the status of a run whose training diverged (its metrics.csv's nan row)
PROCESSES = "train.processes"  # a report's column: the processes (torchrun's) that trained a run, not a config key


def run_name(path: str | Path) -> str:
    """A run's name for titles: its folder's name, also when it is given as `.` or `..` or by a
    checkpoint file in it, with a byte of the name that is not UTF-8 shown as '\ufffd' (a page or a
    picture holds no such byte)."""
    folder = Path(os.path.abspath(path))  # (not resolve(): a link's own name is the one the user gave)
    if folder.suffix == ".pt" and not folder.is_dir():
        folder = folder.parent
    return shown_as_unicode(folder.name or str(folder))


# ---- one training per run directory ----


@contextmanager
def run_lock(out_dir: Path, setting: str = "train.out_dir", user: str = "training",
             name: str = LOCK, resume: bool = False, in_use: str | None = None) -> Iterator[Callable[[], bool]]:
    """Hold out_dir for one training (or, with sweep.py's arguments, one sweep: `setting` names
    the folder in messages, `user` the kind of holder, `name` the lock file): a second one on the
    same folder is refused with one line instead of mixing two runs' files. The lock is the
    operating system's (flock), so a process that dies, even by SIGKILL, releases it, and the
    stale lock file it leaves is taken over. Folders this creates are removed again if nothing
    was written into them (`resume`: the folder holds the run to continue, for check_writable's
    advice; `in_use`: the refusal's words, for a lock on one file of the folder). Yields `held()`: is the lock
    file at its place still the one held here (False once the folder was removed, and perhaps made again by a new
    training)?"""
    check_writable(out_dir, setting, resume)
    created = make_folder(out_dir, setting)
    fd = _acquire(out_dir / name, in_use or f"{setting}={str(out_dir)!r} is in use by another {user}",
                  setting.removeprefix("train."))
    def held() -> bool:
        try:
            return os.path.samestat(os.fstat(fd), os.stat(out_dir / name))
        except OSError:
            return False

    try:
        yield held
    finally:
        ours = held()  # (else the folder was removed: what is there now is another training's, or the user's)
        if ours:
            with suppress(OSError):  # (Windows cannot remove an open file: it stays, and is taken over)
                (out_dir / name).unlink(missing_ok=True)  # before releasing it: see _acquire
        os.close(fd)
        if ours:
            remove_empty(created)


def _acquire(path: Path, in_use: str, setting: str) -> int:
    """Open and lock `path` without waiting; the file holds the holder's pid for the message. A
    lock that is not a plain file (a folder, a symlink: its target would be overwritten) is refused.
    A lock held is tried again 3 times, 50 ms apart: training_now and lock_holder hold it for
    microseconds to see whether a training does."""
    tries = 0
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a named pipe or a device opens and locks, then fails
                os.close(fd)
                raise OSError(errno.EINVAL, "a named pipe or a device")
        except OSError as e:
            raise UserError(f"{setting}: its lock file {path} cannot be used ({e.strerror or reason(e)}: not a plain "
                            f"file); remove it, or choose another {setting}") from None
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            else:  # pragma: no cover - Windows
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError as e:
            if fcntl is not None and e.errno not in HELD:  # not a holder: a file system without locks
                os.close(fd)
                raise UserError(f"{setting}: cannot lock {path} ({e.strerror or reason(e)}): its file system takes no "
                                f"locks (some network or FUSE mounts); choose a {setting} on a local disk") from None
            holder = _holder(fd)
            os.close(fd)
            if (tries := tries + 1) <= 3:
                time.sleep(0.05)
                continue
            raise UserError(f"{in_use} (process {holder}); wait for it to end, or choose another {setting}") from None
        # the holder removes the file just before releasing it: if ours is no longer the file at
        # `path`, another process may lock the new one, so start again
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                os.ftruncate(fd, 0)
                # the pid only names the holder to a second process: on a full disk the lock holds all
                # the same, and the first file the work writes says that the disk is full, naming it
                with suppress(OSError):
                    os.write(fd, f"{os.getpid()}\n".encode())
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


# ---- starting or resuming ----


def new_run_from(weights: str | Path) -> str:
    """The settings that start a new run from these weights (a run directory or a checkpoint), quoted
    for the shell to paste: in another folder, as the run's own still holds it (a new run there is refused)."""
    return f"--set {shell_quote(set_word('train.init_from', str(weights)))} train.out_dir=NEW_DIR"


REPOSITORY = Path(__file__).resolve().parents[1]
SOURCE_FOLDERS = (".ci", ".git", "configs", "data", "docs", "notebooks", "scripts", "tests", "tinygpt")


def shared_folder(out_dir: Path) -> str | None:
    """What `out_dir` is, where it is a folder no run should be trained into (the file system's root,
    the home folder, the repository or one of its source folders: a run's files would go among others);
    None for any other folder."""
    path = Path(os.path.realpath(out_dir))
    if path == Path(path.anchor):
        return "the file system's root"
    try:
        home = Path(os.path.realpath(Path.home()))
    except (RuntimeError, KeyError):  # (no HOME and no entry in the password database)
        home = None
    if path == home:
        return "the home folder"
    if path == REPOSITORY:
        return "the repository's own folder"
    if path.parent == REPOSITORY and path.name in SOURCE_FOLDERS:
        return f"the repository's {path.name}/ folder"
    return None


def check_run_dir(out_dir: Path, resume: bool, config: str | Path = "", out_dir_set: bool = False,
                  prepared_dir: str | Path | None = None) -> None:
    """Refuse what would mix two runs or overwrite a user's file: a new run into a folder holding a
    run's checkpoints or TensorBoard events, or holding a config.yaml, metrics.csv or loss.png that
    no tinygpt run wrote; a resume with nothing to resume from. A folder whose run died before its
    first checkpoint holds only config.yaml and metrics.csv of step 0 (and, killed between its first two
    saves, best.pt of step 0; with train.tensorboard, events of step 0): it may be started again
    (they are rewritten; the new run's events hide the old ones, see tensorboard_log). A resume
    rewrites config.yaml too: one of the user's there is refused, unless it is `config`, the file read.
    A resume from a run's config.yaml whose train.out_dir names another folder (the run was moved,
    or copied: its config still names the original) is refused, saying which, unless `out_dir_set`
    (--set train.out_dir: the folder was named on purpose). A new run shares no folder with prepared
    data: neither data.prepared_dir (`prepared_dir`) in it, nor prepared folders."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"train.out_dir={str(out_dir)!r} is {file_kind(out_dir)}, not a directory")
    if (pid := lock_holder(out_dir, REPORT_LOCK)) is not None:  # (its first seconds: no run folder in it yet)
        raise UserError(f"train.out_dir={str(out_dir)!r} is the folder of a sweep or a comparison under way (process "
                        f"{pid}): this run's files would mix with its runs and report; choose another out_dir")
    ours = (str(os.getpid()), str(os.getppid()))  # the sweep checking its plan, and its runs (its children)
    for folder in resolved(out_dir, "train.out_dir").parents:  # a run the sweep plans there: it would find it
        # trained with another's settings, and report it as its own
        if (pid := lock_holder(folder, REPORT_LOCK)) is not None and pid not in ours:
            raise UserError(f"train.out_dir={str(out_dir)!r} is inside {folder}, the folder of a sweep or a comparison "
                            f"under way (process {pid}): its runs would mix with this one; choose a folder outside "
                            f"it, or wait for it to end")
    if not resume and (what := shared_folder(out_dir)) is not None:
        raise UserError(f"train.out_dir={str(out_dir)!r} is {what}: a run writes its checkpoints, config.yaml, "
                        f"metrics.csv and loss.png into its folder; give it one of its own, e.g. out/NAME")
    for name in TRAIN_FILES:
        odd = not_a_run_file(out_dir / name)
        if odd:
            raise UserError(f"train.out_dir={str(out_dir)!r} holds {name}, {odd}, where a run writes its {name}; "
                            f"remove it, or choose another out_dir")
    if resume:
        here = Path(config).parent
        elsewhere = (bool(config) and not out_dir_set and (here / "ckpt.pt").is_file()  # (a run to resume there)
                     and is_runs_own_config(config) and not same_path(str(here), str(out_dir)))
        if elsewhere and (out_dir / "ckpt.pt").is_file():  # a copy: it would continue the original, not the copy
            raise UserError(f"--resume: {config} is in the run folder {here}, but its train.out_dir names another run, "
                            f"{out_dir}, which --resume would continue instead (a copied run); continue this one with "
                            f"--set {shell_quote(set_word('train.out_dir', str(here)))}, or give "
                            f"{out_dir / 'config.yaml'}")
        if not (out_dir / "ckpt.pt").is_file():
            fix = "drop --resume to start a new run"
            if died_at_its_first_save(out_dir):  # its best.pt is the starting point: nothing to keep
                fix += " (its best.pt is of step 0, before any training: nothing is lost)"
            elif (out_dir / "best.pt").is_file():
                fix = ("best.pt holds the weights but not the optimizer's state a resume needs: start a new run "
                       f"from its weights with {new_run_from(out_dir / 'best.pt')}")
            if elsewhere:
                fix = (f"{config} is in the run folder {here}, but its train.out_dir names {out_dir} (a run moved "
                       f"or renamed since): add --set {shell_quote(set_word('train.out_dir', str(here)))}")
            raise UserError(f"--resume: no checkpoint at {out_dir / 'ckpt.pt'}; {fix}")
        if users_config(out_dir) and not same_path(str(config), str(out_dir / "config.yaml")):
            raise UserError(f"train.out_dir={str(out_dir)!r} holds config.yaml, which is not from a tinygpt run (not "
                            f"its header): --resume would overwrite it with the run's settings; move it away (the "
                            f"run's settings are in its ckpt.pt)")
        return
    if (out_dir / "ckpt.pt").exists():
        raise UserError(f"train.out_dir={str(out_dir)!r} already holds a run; continue it with --resume, "
                        f"or choose another: --set train.out_dir=out/new_run")
    if (out_dir / "best.pt").exists() and not died_at_its_first_save(out_dir):
        raise UserError(f"train.out_dir={str(out_dir)!r} holds best.pt but no ckpt.pt to resume from; move best.pt "
                        f"away to start a run there, or choose another out_dir")
    if (around := run_around(out_dir, "train.out_dir")) is not None:
        raise UserError(f"train.out_dir={str(out_dir)!r} is inside the training run {around.parent} (its "
                        f"{around.name}): choose a folder outside it")
    for folder in resolved(out_dir, "train.out_dir").parents:  # one in its first seconds: no checkpoint yet
        if (pid := lock_holder(folder)) is not None:
            raise UserError(f"train.out_dir={str(out_dir)!r} is inside {folder}, the folder of a training under way "
                            f"(process {pid}): choose a folder outside it")
    if prepared_data(out_dir):
        raise UserError(f"train.out_dir={str(out_dir)!r} is a folder of prepared data (data.prepared_dir's): a run "
                        f"there would block its preparing again; choose another out_dir")
    if prepared_dir is not None:  # the cache's folders would be made among the run's files, and go with it
        cache, run = resolved(Path(prepared_dir), "data.prepared_dir"), resolved(out_dir, "train.out_dir")
        if cache == run or run in cache.parents:
            raise UserError(f"data.prepared_dir={short(str(prepared_dir))} is train.out_dir={str(out_dir)!r} or a "
                            f"folder inside it: the prepared data would mix with the run's files; give them "
                            f"separate folders")
        from data.prepare import PREPARED_NAME  # (here: data/prepare.py imports this module)
        if run.parent == cache and PREPARED_NAME.fullmatch(run.name):  # (its own preparation replaced it, and the
            # run blamed a folder "removed or moved")
            raise UserError(f"train.out_dir={str(out_dir)!r} is named as a folder of data.prepared_dir="
                            f"{short(str(prepared_dir))}, which data preparation makes and replaces whole: "
                            f"give the run another name")
    cached = prepared_inside(out_dir)
    if cached:  # a data.prepared_dir, of this config or another: the run's files would sit among its folders
        raise UserError(f"train.out_dir={str(out_dir)!r} holds prepared data ({first_few(cached)}: a "
                        f"data.prepared_dir's folders): this run's files would mix with them; choose another out_dir")
    held = runs_inside(out_dir)
    if held:  # out/ itself, or a sweep's folder: the run's files would sit among its runs
        raise UserError(f"train.out_dir={str(out_dir)!r} holds runs in its folders ({first_few(held)}): this run's "
                        f"files would mix with them; choose another out_dir, e.g. {out_dir / 'new_run'}")
    from tinygpt.report import report_maker  # (here: report.py imports this module)
    kind = report_maker(out_dir)
    if kind:
        raise UserError(f"train.out_dir={str(out_dir)!r} holds a {kind}'s report (results.md): this run's files "
                        f"would mix with it; choose another out_dir")
    foreign = _foreign_file(out_dir)
    if foreign is not None:
        raise UserError(f"train.out_dir={str(out_dir)!r} holds {foreign.name}, which is not from a tinygpt run: "
                        f"a run would overwrite it; choose another out_dir")
    trained = trained_steps(out_dir)  # (no ckpt.pt here: a folder with rows past step 0 lost its checkpoints)
    if _events_of_an_earlier_run(out_dir, trained):
        raise UserError(f"train.out_dir={str(out_dir)!r} holds TensorBoard events (tensorboard/) but no ckpt.pt to "
                        f"resume from: a new run's events would mix with them; move tensorboard away to start a run "
                        f"there, or choose another out_dir")
    if trained:
        raise UserError(f"train.out_dir={str(out_dir)!r} holds metrics.csv of a run trained to step {trained:,} but "
                        f"no ckpt.pt to resume from (its checkpoints are gone): a new run would overwrite it; move "
                        f"metrics.csv away to start a run there, or choose another out_dir")


def runs_inside(folder: Path, limit: int = 10_000) -> list[str]:
    """The folders in `folder` that hold a run's ckpt.pt, or a training under way (in its first seconds:
    no checkpoint yet), by name (of its first `limit` entries: a home folder is not read whole)."""
    return folders_inside(folder, lambda sub: (sub / "ckpt.pt").is_file() or lock_holder(sub) is not None, limit)


def prepared_inside(folder: Path, limit: int = 10_000) -> list[str]:
    """The folders in `folder` that hold prepared data (data/prepare.py's), by name, as runs_inside."""
    return folders_inside(folder, prepared_data, limit)


def folders_inside(folder: Path, holds: Callable[[Path], bool], limit: int) -> list[str]:
    """The names of the folders among `folder`'s first `limit` entries for which holds(path) is true."""
    names = []
    with suppress(OSError):
        with os.scandir(folder) as entries:
            for entry, _ in zip(entries, range(limit)):
                with suppress(OSError):
                    if entry.is_dir() and holds(Path(entry.path)):
                        names.append(entry.name)
    return sorted(names)


def users_config(out_dir: Path) -> bool:
    """Is out_dir/config.yaml a file of the user's, not a run's (without a run's header; an empty one,
    or one cut short within the header, is a damaged run's)? A resume, which rewrites it, would lose it."""
    own = out_dir / "config.yaml"
    first = first_line(own) if own.is_file() else None
    return first is not None and not is_run_header(first) and not RUN_HEADER.startswith(first)


def not_a_run_file(path: Path) -> str | None:
    """What is odd about `path`, where train.py writes one of its files, or None (missing, or a plain
    file): a link (to nothing, or to a file: the write would land outside the folder, in another
    run's maybe), a folder, a pipe or a device."""
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink():
        return dead_link(path) or (f"a link to {os.path.realpath(path)} (a run writes its own files: the link's "
                                   f"target would be written, another run's maybe; copy the files instead)")
    if path.is_file():
        return None
    return not_regular(path)


def trained_steps(out_dir: Path) -> int:
    """The last step in out_dir's metrics.csv (0 without one, or without rows of ours). A run writes
    rows after step 0 only once its step-0 ckpt.pt is saved: in a folder without ckpt.pt, such rows
    are of a run whose checkpoints were removed, not of one that died before its first (nothing lost)."""
    if not (out_dir / "metrics.csv").is_file():
        return 0
    try:
        return int(max((row["step"] for row in read_metrics(out_dir)), default=0))
    except UserError:  # not ours: _foreign_file says so
        return 0


def _events_of_an_earlier_run(out_dir: Path, trained: int) -> bool:
    """Does out_dir/tensorboard hold event files of a run that got past its first checkpoint (its
    metrics.csv has rows after step 0: `trained`, trained_steps), or of a run whose files are gone
    (no config.yaml of a run)?
    Unlike the files a run rewrites, TensorBoard's are added to: a new run's events would sit beside
    them, every step twice. A run that died before its first checkpoint (step 0's) lost nothing."""
    board = out_dir / "tensorboard"
    try:
        if not board.is_dir() or not any("tfevents" in p.name for p in board.iterdir()):  # (what TensorBoard reads)
            return False
    except OSError:  # unreadable: no run of ours wrote it (require_tensorboard says so, if one would now)
        return False
    if not is_run_config(out_dir / "config.yaml"):
        return True
    return trained > 0


def died_at_its_first_save(out_dir: Path) -> bool:
    """Was out_dir's run killed between its first two saves (best.pt, then ckpt.pt, at step 0's
    eval)? Its best.pt then holds step 0's weights, the starting point, and nothing is lost by
    starting the run again."""
    if (out_dir / "ckpt.pt").exists() or not (out_dir / "best.pt").is_file():
        return False
    if not is_run_config(out_dir / "config.yaml"):
        return False
    try:
        return load_checkpoint(out_dir / "best.pt").get("step") == 0
    except UserError:  # damaged: left as it is
        return False


def _foreign_file(out_dir: Path) -> Path | None:
    """The first run file in out_dir that a tinygpt run did not write: a config.yaml without the
    header of a run's resolved config (a valid config of the user's is theirs, maybe the very
    config being trained), a config.yaml or metrics.csv that does not read as ours, or a loss.png
    with neither beside it."""
    if (out_dir / "config.yaml").exists() and not is_run_config(out_dir / "config.yaml"):
        return out_dir / "config.yaml"
    for name, read in (("config.yaml", read_config), ("metrics.csv", read_metrics)):
        if (out_dir / name).exists():
            try:
                read(out_dir)
            except UserError:
                return out_dir / name
    if (out_dir / "loss.png").exists() and not any((out_dir / n).exists() for n in ("config.yaml", "metrics.csv")):
        return out_dir / "loss.png"
    return None


def write_config(out_dir: Path, cfg: Config, guard: Callable[[], None] | None = None) -> None:
    atomic_write_text(out_dir / "config.yaml", config_to_yaml(cfg), guard)  # (guard: checkpoint.atomic_write's)


def first_line(path: Path, limit: int = 200) -> str | None:
    """The first line of `path` (at most `limit` bytes, without its line end), or None if it cannot be read:
    a config.yaml's header, a report's title or CSV header."""
    try:
        with open(path, "rb") as f:
            return f.readline(limit).decode("utf-8", "replace").rstrip("\r\n")
    except OSError:
        return None


# keys every config.yaml that train.py wrote holds (it writes them all): one without them is damaged
ALWAYS_WRITTEN = {"model": ("block_size", "n_layer", "n_head", "n_embd", "vocab_size"),
                  "data": ("dataset", "tokenizer"), "train": ("max_iters",)}


def read_config(run_dir: str | Path) -> Config:
    """A run's config.yaml (the resolved config, with model.vocab_size) -> Config. One cut short or
    emptied is refused: read as a config, the defaults would stand in for the run's settings."""
    run_dir = Path(run_dir)
    path = run_dir / "config.yaml"
    if path.exists() and not path.is_file():  # (a folder, a pipe, a link to a device)
        raise UserError(f"{path} is {not_regular(path)}; a run's config.yaml is a file")
    if not path.is_file():
        if (trainer := lock_holder(run_dir)) is not None:  # (a training starting: its data prepared, say)
            raise UserError(f"{run_dir} is being trained now (process {trainer}) and has no config.yaml yet: it is "
                            f"written once the data are loaded and the model built; try again then")
        raise UserError(f"{run_dir} is not a run directory: it has no config.yaml (train into it first)")
    raw = read_yaml(path)
    lacking = [f"{section}.{key}" for section, keys in ALWAYS_WRITTEN.items() for key in keys
               if not (isinstance(raw, dict) and isinstance(raw.get(section), dict) and key in raw[section])]
    if lacking:
        raise UserError(f"{path} is damaged (cut short or emptied): it lacks {first_few(lacking)}, "
                        f"which train.py always writes; train.py CONFIG "
                        f"--resume writes it again (with the run's settings), if the run's ckpt.pt is there")
    return config_from_dict(raw, str(path), recorded=True)


# ---- metrics.csv ----


def metrics_text(rows: list[dict[str, Any]]) -> str:
    """metrics.csv's text for `rows` (dicts keyed by METRICS; missing keys stay empty)."""
    lines = [",".join(METRICS)] + [",".join(str(r.get(k, "")) for k in METRICS) for r in rows]
    return "\n".join(lines) + "\n"


def write_metrics(out_dir: Path, rows: list[dict[str, Any]], guard: Callable[[], None] | None = None) -> None:
    """Rewrite metrics.csv with `rows` (`guard`: checkpoint.atomic_write's)."""
    atomic_write_text(out_dir / "metrics.csv", metrics_text(rows), guard)


def read_metrics(run_dir: str | Path, as_text: bool = False) -> list[dict[str, Any]]:
    """metrics.csv -> rows of floats (None where a column is empty: log rows have no val_loss,
    eval rows no tokens_per_s), or with as_text the rows as written (what write_metrics takes,
    for a resumed run); [] when the file is missing. A damaged file is a UserError."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return []
    damaged = f"{path} is damaged or not a tinygpt metrics file"
    if path.stat().st_size <= MAX_METRICS_BYTES and mostly_holes(path):  # (a sparse 250 MB file, 8 KB on disk,
        # took 2 GB to be found damaged; a larger one read_capped refuses by its size)
        raise UserError(f"{damaged} (most of its {path.stat().st_size:,} bytes were never written: a file of holes)")
    data = read_capped(path, MAX_METRICS_BYTES,
                       lambda size: f"{damaged} (larger than the {MAX_METRICS_BYTES >> 20} MiB a run writes)")
    try:
        text = data.decode("utf-8-sig")  # (saved again by a spreadsheet: a byte-order mark before "step")
        if text and not text.endswith("\n"):  # tinygpt ends every row with one: a file cut off mid-row
            raise ValueError("its last row is cut short: no line end")
        return parse_metrics(io.StringIO(text), as_text)
    except (ValueError, UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{damaged} ({e})") from None


def best_val_loss(rows: Iterable[dict[str, Any]]) -> float | None:
    """The lowest val_loss of read_metrics' rows, None where none was evaluated: a diverged run's nan or
    inf (its last row) is no best."""
    return min((r["val_loss"] for r in rows if r.get("val_loss") is not None and math.isfinite(r["val_loss"])),
               default=None)


def parse_metrics(lines: Iterable[str], as_text: bool = False) -> list[dict[str, Any]]:
    """read_metrics' rows from the lines of a metrics.csv; ValueError or csv.Error if damaged: also where the rows
    are not as a training writes them (check_order)."""
    reader = csv.DictReader(lines)
    if reader.fieldnames is None or "step" not in reader.fieldnames:
        raise ValueError("it has no step column")
    if "train_loss" not in reader.fieldnames and "val_loss" not in reader.fieldnames:  # (a renamed header:
        raise ValueError("it has no train_loss or val_loss column")  # the run was reported done, with no loss)
    texts, rows = [], []
    for raw in reader:
        if None in raw or None in raw.values():  # (DictReader's keys for extra fields, values for missing ones)
            raise ValueError(f"row {reader.line_num - 1} has another number of fields than the header")
        text = {k: v or "" for k, v in raw.items() if k in METRICS}
        row = {k: float(v) + 0.0 if v else None for k, v in text.items()}  # (+ 0.0: a -0.0 loss is 0.0)
        check_values(row, reader.line_num - 1)
        texts.append(text)
        rows.append(row)
    check_order(rows)
    return texts if as_text else rows


def check_order(rows: list[dict[str, float | None]]) -> None:
    """The rows are in a training's order (ValueError if not): steps never going back, one evaluation (val_loss)
    and one log row (tokens_per_s) a step at most, a nan or inf loss only in the last row (a diverged run's).
    A second evaluation of a step, pasted in, counted as a seed of its own in val_loss.png and set the best."""
    seen: set[tuple[float, str]] = set()
    for n, row in enumerate(rows, start=1):  # (check_values has made every step a whole number)
        if n > 1 and row["step"] < rows[n - 2]["step"]:
            raise ValueError(f"row {n} goes back to step {int(row['step'])} after step {int(rows[n - 2]['step'])}")
        for column in ("val_loss", "tokens_per_s"):
            if row.get(column) is not None:
                if (row["step"], column) in seen:
                    raise ValueError(f"row {n} is a second row of step {int(row['step'])} with a {column}")
                seen.add((row["step"], column))
        if n < len(rows) and any(row.get(k) is not None and not math.isfinite(row[k])
                                 for k in ("train_loss", "val_loss")):
            raise ValueError(f"row {n} has a loss that is not finite, and rows after it (a diverged run's is its last)")


FLOAT32_MAX = 3.4028234663852886e38  # a loss is a float32 cross-entropy: at most this when finite


MEASURED = ("tokens_per_s", "mfu", "elapsed_s")  # (lr is the config's: any finite number train.lr takes)
MAX_MEASURED = 1e15  # no tokens/s, MFU or seconds a training logs reaches it (a second is 31 million years)


def check_values(row: dict[str, float | None], n: int) -> None:
    """Row n's numbers are ones a training can log (ValueError if not): a whole step, no negative
    number, a loss in float32's range, a measurement under MAX_MEASURED. A nan or inf (a diverged run:
    compare.py shows it, the plots leave it out) is kept; a finite 1e308 broke the plots' axes, -1e308
    was shown as a best loss, and a wall time of 1e308 overflowed the mean over seeds (a traceback)."""
    if row.get("step") is None or not math.isfinite(row["step"]):
        raise ValueError("a row has no step")
    if row["step"] < 0 or row["step"] != int(row["step"]) or row["step"] > MAX_INT:  # (train.max_iters's bound)
        raise ValueError(f"row {n}: step={row['step']:g} is not a step")
    for key, value in row.items():
        if value is None or not math.isfinite(value):
            continue
        if value < 0 or (key.endswith("_loss") and value > FLOAT32_MAX) or (key in MEASURED and value > MAX_MEASURED):
            raise ValueError(f"row {n}: {key}={value:g} is not {'a loss' if key.endswith('_loss') else 'a value'} "
                             f"a training logs")


def resumed_metrics(out_dir: Path, ckpt: dict[str, Any]) -> tuple[list[dict[str, str]], str | None]:
    """The metrics rows a resumed run continues from, and a note for the user (or None).

    A checkpoint carries the rows written up to its step (`metrics_csv`), so that they belong to
    it: rows missing from metrics.csv (a file deleted or cut short, or a run killed between
    saving ckpt.pt and metrics.csv) come back from it, with a note. Rows that differ (an edited
    metrics.csv, or a ckpt.pt copied in from another run), or a best.pt of another run (its
    run_id), would mix two runs' files: refused. A checkpoint from before it carried its rows takes
    metrics.csv's rows up to its step, as they are."""
    step, ckpt_path, path = ckpt["step"], out_dir / "ckpt.pt", out_dir / "metrics.csv"
    saved = ckpt.get("metrics_csv")
    check_best_pt(out_dir, ckpt)
    if not isinstance(saved, str):  # (an older tinygpt's checkpoint: metrics.csv's word is all there is)
        kept = [r for r in read_metrics(out_dir, as_text=True) if float(r["step"]) <= step]
        lost = not path.is_file() and step > 0
        return kept, (f"note: {path} is missing, and {ckpt_path} (from an older tinygpt) does not carry its rows: "
                      f"the loss curve starts at step {step}" if lost else None)
    ours = saved.splitlines()
    try:
        rows = parse_metrics(ours, as_text=True)
    except (ValueError, csv.Error) as e:
        raise UserError(f"{ckpt_path} cannot be resumed: its copy of metrics.csv is damaged ({e})") from None
    # an eval still due at the step (a Ctrl-C stopped it) runs again on resume: a row of it that a resume wrote
    # before it died unsaved (a full disk, a kill) is not ckpt.pt's, and is written again
    due = ckpt.get("evaluated_step", step) != step
    try:
        kept = [r for r in read_metrics(out_dir, as_text=True) if float(r["step"]) < step
                or (float(r["step"]) == step and not (due and r["val_loss"]))]
        theirs, state = (metrics_text(kept).splitlines(), "lacked") if path.is_file() else ([], "was missing")
    except UserError:  # the checkpoint has the rows: take them
        theirs, state = [], "was damaged"
    if at := _first_difference(ours, theirs):
        raise UserError(f"--resume: {path} and {ckpt_path}'s copy of it differ in the {at}: metrics.csv was "
                        f"edited, or ckpt.pt is another run's (copied in); move metrics.csv away to continue from "
                        f"ckpt.pt's rows, or put this run's ckpt.pt back")
    missing = rows[max(len(theirs) - 1, 0):]  # (theirs[0] is the header)
    if not missing:
        return rows, None
    steps = missing[0]["step"] + (f" to {missing[-1]['step']}" if len(missing) > 1 else "")
    rows_of = f"{count(len(missing), 'row')}, of step{'s' * (len(missing) > 1)} {steps}"
    if state == "lacked":
        return rows, (f"note: {path} lacked {rows_of} (cut short, or not yet written when the run stopped): "
                      f"restored from ckpt.pt")
    return rows, f"note: {path} {state}: its {rows_of}, restored from ckpt.pt"


def check_best_pt(out_dir: Path, ckpt: dict[str, Any]) -> None:
    """Refuse a resume whose best.pt is another run's (its run_id: a checkpoint copied in from
    another folder), which the resumed run would keep as its best weights, or is damaged: the run
    would end `done` with a best.pt that sample.py refuses (only a lower val loss rewrites it). One
    from before run ids is no other run's."""
    if not (out_dir / "best.pt").is_file():
        return
    try:
        best = load_checkpoint(out_dir / "best.pt")
    except UserError as e:
        raise UserError(f"--resume: {e}; its weights are lost: move it away to resume (sample.py then reads "
                        f"ckpt.pt, and a new lowest val loss writes another best.pt)") from None
    if of_two_runs(best, ckpt):
        raise UserError(f"--resume: {out_dir / 'best.pt'} and {out_dir / 'ckpt.pt'} are of two runs (one copied in "
                        f"from another folder?): resuming would mix them; resume each run in its own folder, or "
                        f"move best.pt away to continue ckpt.pt's run here")


def best_pt_ahead(out_dir: Path, ckpt: dict[str, Any]) -> int:
    """The step of out_dir's best.pt where it is later than ckpt's (best.pt is saved first: a failed or
    stopped save of ckpt.pt leaves it ahead), else 0 (its tensors mapped, not read: check_best_pt has
    refused a damaged one)."""
    best = peek_checkpoint(out_dir / "best.pt")
    step = best.get("step") if best is not None else None
    return step if isinstance(step, int) and step > ckpt["step"] else 0


def _first_difference(ours: list[str], theirs: list[str]) -> str | None:
    """Where ckpt.pt's copy of metrics.csv (`ours`) and metrics.csv's lines up to its step (`theirs`)
    disagree ("eval row of step 10", "columns"); None when theirs is the start of ours (metrics.csv cut
    short: ckpt.pt restores the rest). Theirs longer than ours disagrees too: no training writes a row at a
    step its checkpoint has seen after saving it (a row added by hand was reported as the run's result, and a
    resume dropped it unsaid)."""
    for i, b in enumerate(theirs):
        a = ours[i] if i < len(ours) else None
        if a != b:
            if not i:
                return "columns"
            row = dict(zip(METRICS, (a or b).split(",")))  # (a step has a log row and an eval row: say which)
            return f"{'eval' if row.get('val_loss') else 'log'} row of step {row['step']}"
    return None


# ---- probe.json ----


def write_probe(run_dir: Path, result: dict[str, Any]) -> None:
    atomic_write_text(run_dir / "probe.json", json.dumps(result) + "\n")


class DamagedProbe(UserError):
    """A probe.json that reads, but not as the probe's figures; `what` says so without the fix."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}; delete it and probe again")
        self.what = what


def read_probe(run_dir: str | Path) -> dict[str, Any] | None:
    """The probe's figures saved in a run directory, or None (not probed, or probed before its
    last checkpoint was written); DamagedProbe where it holds something else (a UserError where it
    cannot be read)."""
    path = Path(run_dir) / "probe.json"
    if not path.is_file():
        return None
    too_big = f"{path} is damaged: larger than the {MAX_PROBE_BYTES >> 20} MiB a probe writes"
    if path.stat().st_size > MAX_PROBE_BYTES:  # (read_capped refuses it too, but as no damage)
        raise DamagedProbe(too_big)
    try:
        result = json.loads(read_capped(path, MAX_PROBE_BYTES, lambda _: f"{too_big}; delete it and probe again"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: '[' x 100,000
        raise DamagedProbe(f"{path} is damaged ({e})") from None
    if not _is_probe(result):
        raise DamagedProbe(f"{path} does not hold the probe's figures (sweep.py --probe writes them)")
    probed = probed_checkpoint(Path(run_dir))  # (checked against best.pt alone, a run without one trained on kept
    # its probe of ckpt.pt's older weights)
    if probed is not None and result.get("checkpoint_mtime_ns") != probed.stat().st_mtime_ns and (
            mostly_holes(probed) or result.get("checkpoint_sha256") != file_sha256(probed)):  # (a copy, `cp -r`, has
        # new times: its bytes tell; not those of a file of holes, 8 GB hashed for nothing)
        return None  # a stale probe of older weights
    return result


def probed_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint a probe of the run reads, as resolve_checkpoint finds it: best.pt, else ckpt.pt; None."""
    return next((p for p in (run_dir / "best.pt", run_dir / "ckpt.pt") if p.is_file()), None)


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in pieces (a checkpoint may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(1 << 24):
            digest.update(piece)
    return digest.hexdigest()


def _is_probe(result: Any) -> bool:
    """Does `result` have the shape probe_columns reads (numbers where it takes numbers), with counts
    that are counts (whole, not negative, the outcomes adding up to the references) and shares in [0, 1]?"""
    def number(value: Any) -> bool:  # (an integer of 401 digits makes no float: its shares were a traceback)
        return isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)
                                            and abs(value) <= MAX_INT)

    def count(value: Any) -> bool:  # (a NaN or negative count read nan% or -0.0%)
        return type(value) is int and 0 <= value <= MAX_INT

    def share(value: Any) -> bool:
        return number(value) and 0 <= value <= 1

    try:
        # (a best head of None: no reference had the tokens in the window, so none was measured)
        measured = [best for best in (result["attention_attribute"]["best"], result["attention"]["best"])
                    if best is not None]
        counts = [result["behaviour"][k] for k in ("antecedent", "distractor", "other")]
        return (count(result["references"]) and all(count(n) for n in counts)
                and sum(counts) == result["references"]  # (50 + 3 + 1 of 36 references read 138.9% / 8.3% / 2.8%)
                and all(count(best[k]) for best in measured for k in ("layer", "head"))
                and all(share(best[k]) for best in measured for k in ("antecedent", "distractor") if k in best)
                and all(best["ratio"] is None or (number(best["ratio"]) and math.isfinite(best["ratio"])
                                                  and best["ratio"] >= 0) for best in measured)  # None: no distractor
                and number(result.get("checkpoint_mtime_ns", 0)))
    except (KeyError, TypeError, AttributeError):  # not a mapping, or a key missing at some level
        return False


# ---- summaries (sweep.py, compare.py) ----


def probe_columns(result: dict[str, Any] | None) -> dict[str, Any]:
    """The probe's figures (tinygpt.coreference.probe) -> the results tables' probe columns; none
    when it found no reference to measure (shares of nothing would read as 0%), and no head's where
    no reference had the attribute's (or the name's) tokens in its window."""
    if not result or not result["references"]:
        return {}
    b, n = result["behaviour"], result["references"]
    columns = {"references": n, "antecedent": b["antecedent"] / n, "distractor": b["distractor"] / n,
               "other": b["other"] / n}
    counts = [result.get("stories"), result.get("skipped_stories")]
    if all(type(count) is int for count in counts):  # the held-out stories it was probed on (--probe-stories)
        columns["probe_stories"] = sum(counts)
    attr, name = result["attention_attribute"]["best"], result["attention"]["best"]
    if attr is not None and result["attention_attribute"]["references"]:
        columns.update(attribute_head=f"L{attr['layer']}H{attr['head']}", attribute_share=attr["antecedent"],
                       attribute_ratio=attr["ratio"])
    if name is not None and result["attention"]["references"]:
        columns.update(name_head=f"L{name['layer']}H{name['head']}", name_ratio=name["ratio"])
    return columns


def count_params(cfg: ModelConfig) -> int | None:
    """Parameters of GPT(cfg) (from the config: nothing is built); None without a vocab."""
    return GPT.count_params(cfg) if cfg.vocab_size > 0 else None


def training_now(run_dir: Path) -> bool:
    """Is a training writing run_dir now? Its lock is tried (lock_holder): a killed training's .lock
    stays behind, naming a process that has ended, or by now another live one (in a container,
    every training is pid 1, and pid 1 is always alive)."""
    return lock_holder(run_dir) is not None


def training_note(checkpoint: Path, step: Any, doing: str) -> str | None:
    """'note: RUN is being trained now: this {doing} best.pt as of step 500' where a training writes the
    checkpoint's run folder now (what a command reads from it is of one moment: the next evaluation
    replaces it), else None."""
    if not training_now(checkpoint.parent):
        return None
    return (f"note: {shown_path(checkpoint.parent)} is being trained now: this {doing} {checkpoint.name} as of "
            f"step {step}")


def _holder(fd: int) -> str:
    """The pid a lock file holds (its holder wrote it), as text for a message."""
    return os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"


def lock_holder(run_dir: Path, name: str = LOCK) -> str | None:
    """The pid (as its .lock says it) of the training that holds run_dir's lock now (or of the process
    holding the lock file `name` there), else None. The
    lock is tried, not just read: a killed training's .lock stays behind, naming a process that has
    ended, or by now another process of that number. (Tried and released at once: a training starting
    in that microsecond tries again, _acquire.)"""
    if fcntl is None:  # pragma: no cover - Windows: its byte locks cannot be tried from outside
        return None
    try:  # (O_NONBLOCK: a FIFO of the lock's name would wait for a writer for good, a compare.py above it too)
        fd = os.open(run_dir / name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:  # no lock file: nobody holds it
        return None
    try:  # shared: it conflicts with a training's exclusive lock, needs no write access (NFS emulates flock with
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # fcntl locks, where an exclusive one needs a file open to write)
    except OSError as e:
        return _holder(fd) if e.errno in HELD else None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def summarize_run(run_dir: str | Path, label: str | None = None) -> dict[str, Any]:
    """One results row for a run directory, plus its metrics and flat config for plots and columns,
    and `data_digest`, what its checkpoint was trained on (None where unknown): runs of one config
    trained on different texts are different settings (report.group_by_setting)."""
    run_dir = Path(run_dir)
    ckpt = peek_checkpoint(run_dir / "ckpt.pt")
    cfg, note = trained_config(run_dir, ckpt)
    metrics = read_metrics(run_dir)
    tok_s = [r["tokens_per_s"] for r in metrics if r.get("tokens_per_s") is not None]
    elapsed = [r["elapsed_s"] for r in metrics if r.get("elapsed_s") is not None]
    last_step = int(metrics[-1]["step"]) if metrics else 0
    saved, digest = saved_step_and_data(ckpt) if metrics else (None, None)
    if saved is not None and saved > cfg.train.max_iters:  # not this run's: the last row is all there is
        saved, digest = None, None
    # done: ckpt.pt holds the last step (where the save at the last row failed, a full disk, it does not)
    damaged = ckpt is None and (run_dir / "ckpt.pt").exists()  # a resume would be refused: not done
    done = bool(metrics) and not damaged and (last_step if saved is None else saved) >= cfg.train.max_iters
    live = not done and training_now(run_dir)
    if saved is not None and not live:
        # where a resume continues, not the last row: past it (stopped by a signal, Ctrl-C, --stop-at), or
        # before it (its save failed), whose rows the resume trains again
        held = ckpt.get("elapsed_s")
        if saved > last_step and type(held) in (int, float) and math.isfinite(held):  # (its training past the
            elapsed.append(held)  # last row counts: wall_s read the last row's, a --stop-at 5 run's step-0 0.0 s)
        last_step = saved
    status = ("done" if done else f"step {last_step}/{cfg.train.max_iters}" if metrics else
              "no metrics.csv rows" if (run_dir / "metrics.csv").is_file() else "no metrics.csv file")
    # train.py writes the row of a diverged step, its loss nan or inf, before it exits (a resume drops it)
    nonfinite = [r["step"] for r in metrics if any(not math.isfinite(r[k]) for k in ("train_loss", "val_loss")
                                                   if r.get(k) is not None)]
    if nonfinite and not done and not live:  # (a run diverged looked stopped on its way: "finish it with --resume")
        status = f"{DIVERGED} {int(nonfinite[0]):,}" + (f" (ckpt.pt: step {saved:,})" if saved is not None else "")
    if live:
        status = f"training, {status}"
    elif damaged:
        status += ", ckpt.pt damaged"
    evals = [r for r in metrics if r.get("val_loss") is not None and r.get("train_loss") is not None]
    if off := off_schedule(metrics, cfg):
        note = "\n".join(filter(None, [note, f"note: {shown_path(run_dir)}: {off}"]))
    probed = read_probe(run_dir)
    if probed is None and (run_dir / "probe.json").is_file():  # (its columns were left empty without a word)
        of = probed_checkpoint(run_dir).name  # (a stale probe.json is of one: read_probe)
        stale = (f"note: {shown_path(run_dir / 'probe.json')} is of other weights than its {of} (trained on "
                 f"since): left out; sweep.py --probe probes it again")
        note = "\n".join(filter(None, [note, stale]))
    return {
        "run": label if label is not None else str(run_dir),
        "params": count_params(cfg.model),
        "status": status,
        "best_val_loss": best_val_loss(metrics),
        # the last eval's estimate (a row of its own at each eval_interval); between evals a row holds
        # the mean of the last log_interval batches, which is not comparable
        "final_train_loss": evals[-1]["train_loss"] if evals else None,
        "tokens_per_s": statistics.median(tok_s) if tok_s else None,
        "wall_s": max(elapsed) if elapsed else None,  # train.py's elapsed_s carries over a resume
        **probe_columns(probed),
        # train.batch_size is each process's: 1 x 4 and 2 x 4 under torchrun are other trainings (their global
        # batches 4 and 8), which the report called "the same training twice", one seed
        "config": {**flat_config(cfg), PROCESSES: trained_processes(ckpt)},
        "metrics": metrics,
        "data_digest": digest,
        "threads": started_threads(ckpt),
        "note": note,
    }


def trained_processes(ckpt: dict[str, Any] | None) -> int:
    """How many processes trained a peeked ckpt.pt's last session: a torchrun run's checkpoint keeps every
    process's random state (rng_ranks, one each); one process (and no checkpoint): 1."""
    ranks = ckpt.get("rng_ranks") if ckpt is not None else None
    return len(ranks) if isinstance(ranks, list) and len(ranks) > 1 else 1


def started_threads(ckpt: dict[str, Any] | None) -> int | None:
    """The threads a peeked checkpoint's run started its CPU training on (its MFU peak's), or None."""
    peak = ckpt.get("mfu_peak") if ckpt is not None else None
    threads = peak.get("threads") if isinstance(peak, dict) else None
    return threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else None


def off_schedule(metrics: list[dict[str, Any]], cfg: Config) -> str | None:
    """Where the learning rates metrics.csv logged are not the schedule `cfg` gives (a row at step s logs
    the rate of the step before it, lr_at(s - 1), to its 4 digits): the first such row, said, else None. So
    shows a run resumed with a larger train.max_iters (its cosine had decayed over the old length) or
    another train.lr, which a report grouped with runs trained so from the start."""
    from tinygpt.training import lr_at  # (here: training.py imports data.prepare, which imports this module)

    def scheduled(lr: float, step: int) -> bool:  # (older files logged lr_at(step) in eval rows: either is)
        return any(math.isclose(lr, lr_at(s, cfg.train), rel_tol=1e-3, abs_tol=1e-12) for s in (step - 1, step))
    for r in metrics:
        step, lr = int(r["step"]), r.get("lr")
        if lr is not None and math.isfinite(lr) and not scheduled(lr, step):
            return (f"its metrics.csv logs lr={lr:.4g} at step {step}, where its config's schedule gives "
                    f"{lr_at(max(step - 1, 0), cfg.train):.4g}: it was trained on other settings there (resumed "
                    f"with a larger train.max_iters or another train.lr?), so its results are not one training's "
                    f"with its config.yaml")
    return None


def trained_config(run_dir: Path, ckpt: dict[str, Any] | None) -> tuple[Config, str | None]:
    """The config run_dir's run trained with (`ckpt`: its ckpt.pt, peek_checkpoint), and a note where
    config.yaml says otherwise: config.yaml, unless ckpt.pt records other settings (a hand edit, say
    of train.lr or train.max_iters, which a report would show as the run's; or a resume with other
    settings stopped before its first save) or config.yaml does not read and ckpt.pt's config does."""
    saved = None
    if ckpt is not None and isinstance(ckpt.get("config"), dict):
        with suppress(UserError):  # (damaged: config.yaml decides)
            saved = checkpoint_config(ckpt, run_dir / "ckpt.pt")
    try:
        cfg = read_config(run_dir)
    except UserError as e:
        if saved is None:
            raise
        return saved, f"note: {e}; {run_dir}'s ckpt.pt's settings are shown"
    step = saved_step_and_data(ckpt)[0]
    if saved is None or step is None or step > cfg.train.max_iters:  # past the run's end: another run's, copied in
        return cfg, None
    # (train.out_dir names where the run was written: a copied or moved run keeps the old one in both files)
    edited = [f"{section}.{key}" for section in ("model", "data", "train")
              for key, value in vars(getattr(cfg, section)).items()
              if getattr(getattr(saved, section), key) != value and f"{section}.{key}" != "train.out_dir"]
    if not edited:
        return cfg, None
    return saved, (f"note: {run_dir / 'config.yaml'} disagrees with its ckpt.pt ({first_few(edited)}): "
                   f"the checkpoint's settings, which the run trained with, "
                   f"are shown")

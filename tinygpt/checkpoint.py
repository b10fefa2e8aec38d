"""Checkpoint I/O and atomic writes: the one place files are written safely and checkpoints read.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts, so it loads with
`torch.load(..., weights_only=True)`: a file that carries pickled Python objects is refused, never
run. It also stores a CRC-32 of all its contents, so a byte flipped on disk is refused instead of
loading silently. Every write in tinygpt goes through `atomic_write` (or `atomic_dir` for a whole
folder): a temp file in the same folder, fsync, then rename over the target, so a crash or a kill
at any moment leaves either the old file or the new one, never half of one; a write the machine
refuses (disk full, permission) is a one-line UserError that leaves the old file as it was.
"""
from __future__ import annotations

import errno
import math
import os
import pickle
import pickletools
import random
import re
import shutil
import signal
import stat
import struct
import tempfile
import threading
import time
import warnings
import zipfile
import zlib
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Sequence

import numpy as np
import torch

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: a temp file's writer is told by its pid alone
    fcntl = None

from model import GPT
from tinygpt.config import CHECKPOINTS, Config, all_keys, config_from_dict, set_arg
from tinygpt.errors import (STOP_SIGNALS, UserError, check_path_length, count, dead_link, first_few, link_loop,
                            name_max, out_of_memory, path_word, reason, script_word, shell_join, shell_quote, short)
from tinygpt.runtime import check_memory, model_memory
from tinygpt.tokenizer import DamagedTokenizer, Tokenizer, same_tokens, tokenizer_from_dict

FORMAT = "tinygpt-checkpoint"
HF_GPT2_NAME = re.compile(r"^(openai-community/)?(distil)?gpt2(-medium|-large|-xl)?$")  # model names on the Hub
VERSION = 3  # 2: the config records model.vocab_size; 3: a checksum of the contents
READS = (2, 3)  # the versions this tinygpt loads (2 without the checksum check)
REQUIRED = ("config", "tokenizer", "model", "step")
MAX_STEP = 2**62  # no run gets there (146 years at a billion steps a second): a step beyond is damage


# ---- atomic writes ----


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None],
                 guard: Callable[[], None] | None = None) -> None:
    """Write `path` via write(fileobj) into a temp file beside it, fsync, then rename over it. An
    OSError (disk full, permission, a path through a file) is a UserError naming the file; the
    old file, if any, is untouched. `guard` (a training's files: train.Run.check_folder, which
    raises once its folder is gone) runs before the write, again just before the rename, and on an
    OSError; with it the folder is not made: one removed (or renamed) while the file was written
    must not come back holding it, nor hold a temp file that makes `rm -rf` fail."""
    path = regular_file_target(Path(path))
    tmp = None
    try:
        if guard is not None:
            guard()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        sweep_temp_files(path)
        tmp = temp_beside(path, write)
        if guard is not None:
            try:
                guard()
            except BaseException:  # the folder is gone, as this run knows it
                tmp, orphan = None, tmp
                remove_orphan(orphan)
                raise
        os.replace(tmp, path)  # atomic on POSIX and Windows
        fsync_dir(path.parent)  # make the rename itself durable
    except BaseException as e:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if (cause := os_error_behind(e)) is not None:
            if guard is not None:
                guard()  # the folder is gone (no such file): say that
            # (from cause: inside atomic_dir, the refusal then names the folder made, not its temp folder)
            raise cannot_write(path, cause, "the previous file is intact" if path.is_file() else None) from cause
        raise


def remove_orphan(tmp: Path) -> None:
    """The temp file of a write whose folder was removed meanwhile (atomic_write's guard): removed,
    and its folder too if that empties it (`rm -rf` listed the folder before the file was made, and
    failed on it). One moved away with its folder (`mv`) is no longer at its path: the folder there,
    if any, is someone else's, and is left."""
    try:
        tmp.unlink()
    except OSError:
        return
    with suppress(OSError):
        tmp.parent.rmdir()


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back while the block runs (microseconds: renames), then handled
    as they would have been. (pthread_sigmask cannot: another thread of torch's takes the signal.) In
    the main thread only, where Python runs its handlers; elsewhere nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    kinds = list(STOP_SIGNALS)
    before = {kind: signal.getsignal(kind) for kind in kinds}
    for kind, handler in before.items():
        if handler not in (signal.SIG_IGN, None):  # (an ignored signal stays ignored)
            signal.signal(kind, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        for kind, handler in before.items():
            if handler is not None:
                signal.signal(kind, handler)
        for signum in got:  # as they would have been handled: the handler's work, or the default's
            handler = before[signum]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


def atomic_write_all(folder: Path, files: dict[str, bytes], drop: Sequence[str] = (),
                     what: str = "set of files") -> None:
    """Replace several files in `folder` together (a report's tables and pictures): each is written
    to a temp file beside its place, and only once all are written are they renamed into place; then the
    `drop` ones (an earlier set's that this one lacks) are removed. A refusal (a full disk) while
    writing removes the temp files and leaves every earlier file as it was, never new tables beside
    an old picture; the message names the file, and says what is left (`what`: "report"). The
    renames are not one atomic step, but only a folder changed meanwhile makes one fail."""
    targets = {name: regular_file_target(folder / name) for name in files}
    existed = any(t.is_file() for t in targets.values())
    staged: list[tuple[Path, Path]] = []
    name, renamed = "", False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in drop:  # (a writer killed mid-write of a file this set no longer has: nobody else sweeps it)
            sweep_temp_files(folder / stale)
        for name, data in files.items():
            sweep_temp_files(targets[name])
            staged.append((temp_beside(targets[name], lambda f, data=data: f.write(data)), targets[name]))
        with signals_held():  # (a Ctrl-C between two renames left a report part new, part old)
            for tmp, target in staged:
                os.replace(tmp, target)
                renamed = True
            for stale in drop:
                (folder / stale).unlink(missing_ok=True)
        for parent in {target.parent for _, target in staged}:
            fsync_dir(parent)
    except BaseException as e:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        if (cause := os_error_behind(e)) is None:
            raise
        kept = (f"the {what} is part new, part old: write it again" if renamed else
                f"the previous {what} is intact" if existed else None)
        raise cannot_write(folder / name, cause, kept) from cause


def temp_beside(path: Path, write: Callable[[BinaryIO], None]) -> Path:
    """A temp file beside `path` holding what write(fileobj) wrote, fsynced. Its name carries this
    process's pid, and it is locked while written (hold_while_written): a later sweep
    (sweep_temp_files) tells a live writer's from a dead one's."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    hold_while_written(fd)
    try:
        with os.fdopen(fd, "wb") as f:
            os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; give what a plain open() would
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def cannot_write(path: Path, cause: OSError, kept: str | None) -> UserError:
    """The refusal of a write the machine refused: what it said, and what is left on disk."""
    return UserError(f"cannot write {path}: {cause.strerror or reason(cause)} ({kept or 'nothing was written'})")


def os_error_behind(e: BaseException) -> OSError | None:
    """The OSError that e is, or that it was raised from or while handling: torch.save reports a
    full disk as its zip writer's RuntimeError ("unexpected pos"), raised while handling the OSError."""
    seen = set()
    while e is not None and not isinstance(e, UserError) and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):  # a stop (Ctrl-C, SIGTERM) that came while an OSError was handled
            return None  # (say, inside Path.exists()): the stop is what happened, not that error
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    return None


def file_head(path: Path, n: int = 4096) -> bytes | None:
    """The first `n` bytes of the regular file at `path` (to tell a file tinygpt wrote, by its mark,
    from a user's of the same name), or None: missing, unreadable, or no regular file (a pipe is not
    opened: it would wait for a writer for good)."""
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return None


def check_name_fits(path: Path, kind: str = "file") -> None:
    """Refuse a file (or folder: `kind`) name too long for the temp file a write goes through (temp_beside and
    atomic_dir add about 22 bytes): the write would fail with `File name too long` only after the work, naming
    the temp file."""
    name, longest = len(os.fsencode(path.name)), name_max(path.parent)
    extra = len(f"..{os.getpid()}.XXXXXXXX.tmp")
    if name + extra > longest:
        raise UserError(f"cannot write {short(str(path))}: its name is {name} bytes, and the temp {kind} it is "
                        f"written through adds {extra}: give a name of at most {longest - extra} bytes")


def regular_file_target(path: Path) -> Path:
    """The file a write to `path` means: a symlink's target (the rename would replace the link
    itself); a device, a pipe or a folder is refused (the rename would replace /dev/full with a
    plain file, or a reader's pipe); so is a name too long for its temp file (check_name_fits)."""
    check_name_fits(path)
    if path.is_symlink():
        if link_loop(path):  # (realpath would give the loop's own path)
            raise UserError(f"cannot write {path}: it is {dead_link(path)}; give the path of a file")
        path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise UserError(f"cannot write {path}: it is {not_regular(path)}; give the path of a file")
    return path


STARTED = time.time()  # about when this process started (this module is among its first imports)


# the name of a temp file or folder tinygpt makes for NAME (temp_beside, atomic_dir): .NAME.PID.xxxxxxxx.tmp
# or .old, the last part mkstemp's 8 characters
LEFTOVER = re.compile(r"\.(.+)\.(\d+)\.[a-z0-9_]{8}\.(?:tmp|old)")


def leftover_pid(name: str, of: Path) -> int | None:
    """The writer's pid if `name` is exactly the name of a temp file or folder tinygpt makes for `of`
    (LEFTOVER), else None: a user's `.page.html.draft.tmp`, or the leftovers of a neighbour
    (`.hf1.x.PID.xxxxxxxx.old` beside hf1), are not ours to remove."""
    found = LEFTOVER.fullmatch(name)
    return int(found[2]) if found and found[1] == of.name else None


def sweep_folder_temp_files(folder: Path, pattern: re.Pattern | None = None) -> None:
    """sweep_temp_files of every name in `folder` that has leftovers (LEFTOVER), not one path's: the
    writers of a cache's other entries may have died too. `pattern`: only the names it matches (a set of
    files of which a call writes some: heatmaps of a model with fewer layers)."""
    try:
        names = {found[1] for entry in folder.iterdir() if (found := LEFTOVER.fullmatch(entry.name))}
    except OSError:  # no such folder yet, or not one to read
        return
    for name in sorted(name for name in names if pattern is None or pattern.fullmatch(name)):
        sweep_temp_files(folder / name)


def sweep_temp_files(path: Path, only_writer: bool = False) -> None:
    """Remove the temp files (or atomic_dir's temp folders, and the old folders it was replacing)
    of `path` left by writers that died mid-write, but put an old folder back where nothing replaced
    it (a kill between atomic_dir's two renames); a live writer's (its pid is running: another
    process writing the same path) is never touched. One with this process's own pid from before
    it started was left by an earlier process with the same pid (in a container, every restart
    is pid 1). `only_writer`: no other process may write `path` (a training's files, under its run
    lock), so every one is a dead writer's, whatever process its pid names now (a training killed in
    a container left pid 1's, alive on the host). Only names exactly of tinygpt's form are looked at,
    and a .old only where it is a folder holding `path`'s name or nothing."""
    prefix = glob_escape(f".{path.name}.")
    for stale in [*path.parent.glob(f"{prefix}*.tmp"), *path.parent.glob(f"{prefix}*.old")]:
        pid = leftover_pid(stale.name, path)
        try:
            if pid is None or held(stale) or (not only_writer and pid_alive(pid)
                                              and not (pid == os.getpid() and stale.stat().st_mtime < STARTED)):
                continue  # not ours, or a live writer's (this pid from before this process: an earlier one's)
            if stale.suffix == ".old":
                if not stale.is_dir() or {p.name for p in stale.iterdir()} - {path.name}:
                    continue
                if not path.exists():  # killed between atomic_dir's two renames
                    put_back(stale, path)
                    continue
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
        except OSError:  # vanished meanwhile, or not ours to remove: leave it
            pass


def put_back(aside: Path, path: Path) -> None:
    """Move the folder atomic_dir set aside in `aside` (a .old folder) back to `path`, where no new
    one came: a replacement stopped half-way leaves the old folder, not none. Where it cannot be
    moved (and nothing else came), it stays aside: never deleted while path is missing."""
    if (aside / path.name).exists():
        try:
            os.replace(aside / path.name, path)
        except OSError:
            if not path.exists():
                return
    shutil.rmtree(aside, ignore_errors=True)


def glob_escape(text: str) -> str:
    """`text` as a literal in a glob pattern (a run named 'n_head=[1]' must not be a pattern)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def hold_while_written(fd: int) -> None:
    """Lock the temp file or folder open as `fd` for as long as it stays open (flock; the kernel drops
    the lock when its writer dies): a writer in another pid namespace (a second container on a shared
    folder), whose pid means nothing here or is this process's own, is still known to be alive."""
    if fcntl is not None:
        with suppress(OSError):  # (a file system without locks: the pid alone tells)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def held(stale: Path) -> bool:
    """Does a live writer hold `stale`, a temp file or folder, locked (hold_while_written)?"""
    if fcntl is None:
        return False
    try:
        fd = os.open(stale, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError as e:
        return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Is process `pid` running on this machine? (Unknown -> True: nothing is removed.)"""
    if pid == os.getpid():
        return True
    if os.name != "posix":  # os.kill(pid, 0) would signal the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. PermissionError: it exists, under another user
        return True
    return True


def resolved(path: Path, what: str) -> Path:
    """path.resolve(), or a UserError naming `what` (a flag, a setting) where the path runs into a loop of
    links: before Python 3.13, resolve() raises RuntimeError there, a traceback."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        raise UserError(f"{what} {path} cannot be reached: it runs into a loop of links (a link that leads back "
                        f"to itself)") from None


def prepared_data(folder: Path) -> bool:
    """Is `folder` one of data/prepare.py's (meta.json and train.bin), not a run's?"""
    return all((folder / name).is_file() for name in ("meta.json", "train.bin"))


def run_around(path: Path, what: str) -> Path | None:
    """The checkpoint of a training run that `path` lies inside (in a folder above it), else None: what
    is written there would sit among that run's files, and go with it. `what` names the setting in the
    message of a path that runs into a loop of links (resolved)."""
    return next((folder / name for folder in resolved(path, what).parents for name in CHECKPOINTS
                 if (folder / name).is_file()), None)


def file_kind(path: Path) -> str:
    """What `path`, which is no folder, is, for a message: 'a file', 'a pipe', 'a device' or 'a socket'."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "a file"
    return ("a pipe" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a file")


def odd_file(path: Path) -> str | None:
    """What is odd about `path` where a regular file is wanted, for a message: a link to nothing, a
    folder, a pipe or a device; None if it is missing or a regular file (or a link to one)."""
    return dead_link(path) or (not_regular(path) if path.exists() and not path.is_file() else None)


def not_regular(path: Path) -> str:
    """What `path`, which exists and is no regular file, is, for a message: 'a folder', or 'a pipe, not
    a regular file' (a device, a socket)."""
    if path.is_dir():
        return "a folder"
    kind = file_kind(path)
    return "not a regular file" if kind == "a file" else f"{kind}, not a regular file"


def check_writable(path: str | Path, what: str, resume: bool = False) -> None:
    """Refuse, before any work, a folder that cannot be created or written into: a file, a path
    through a file, or a folder (or its nearest existing parent) without write permission or on
    a read-only file system. `what` names the setting: 'train.out_dir', '--out', 'output folder';
    `resume`: the folder holds a run to continue (another folder would hold none: copy it there)."""
    path = Path(path)
    named = f"{what}={short(str(path))}" if what.startswith("-") or "." in what else f"{what} {path}"
    check_path_length(path, named)
    if path.exists() and not path.is_dir():
        raise UserError(f"{named} is {file_kind(path)}, not a directory")
    if (dead := dead_link(path)) is not None:
        raise UserError(f"{named} is {dead}")
    existing = path
    while not existing.exists():  # a path through a file does not exist either
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{named} cannot be created: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        fix = ""
        if what in all_keys():  # a setting: say what to set (a resume needs its run there too)
            fix = (f"; copy the run into a folder you can write and resume it there: cp -a {shell_quote(str(path))} "
                   f"/tmp/tinygpt, then --resume --set {what}=/tmp/tinygpt" if resume else
                   f"; give a folder you can write, e.g. --set {what}=/tmp/tinygpt")
        raise UserError(f"{named} is not writable: {existing} denies writing (permissions or a read-only "
                        f"file system){fix}")
    try:  # root passes that test everywhere, yet /proc and /sys take no new file
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as e:
        raise UserError(f"{named} is not writable: {existing} takes no new file ({e.strerror})") from None


def make_folder(path: Path, what: str) -> list[Path]:
    """mkdir -p `path`; returns the folders it created, innermost first (remove_empty takes them
    away again). One that cannot be made (under /proc, say) is a one-line UserError naming the
    setting `what`, and nothing made is left behind. (A name no file system can encode never gets
    here: config.py refuses it when the config is read.)"""
    created = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        remove_empty(created)
        # a parent that is a dead link: mkdir says "File exists", of a path that seems not to
        why = next((f"it lies under {dead}" for link in path.parents if (dead := dead_link(link))), e.strerror)
        raise UserError(f"{what}={short(str(path))} cannot be created: {why}") from None
    return created


def remove_empty(folders: list[Path]) -> None:
    """Remove the folders (innermost first) that make_folder created; stop at the first that is not empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


def fsync_dir(folder: Path) -> None:
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextmanager
def atomic_dir(path: str | Path, keep_existing: Callable[[Path], bool] = lambda p: False) -> Iterator[Path]:
    """Build the folder `path` inside a temp folder beside it (yielded); on success fsync its files
    and rename it into place, so readers see the old folder or the whole new one. If meanwhile
    another process put a folder there that keep_existing(path) accepts, that one stays and ours
    is dropped, even when it appears between our check and our rename; an outdated one is
    replaced: moved aside, ours renamed in, and only then deleted. On an error (a Ctrl-C
    included) the temp folder is removed and an old folder moved aside is put back; after the
    rename, a stop still removes the old folder and leaves the new one, whole. Parent folders it
    made are removed on an error too, once empty."""
    path = Path(path)
    if os.path.ismount(path):  # (a Docker volume): the folder cannot be renamed, and tmp would be on the parent's disk
        raise UserError(f"cannot replace {path}: it is a mount point (the top of another file system); give a "
                        f"new folder inside it, e.g. {path / 'export'}")
    check_name_fits(path, "folder")  # (a name of 240 bytes: 'File name too long' of the temp folder, after the work)
    made = [p for p in path.parents if not p.exists()]  # the parents we make: removed again on an error
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_temp_files(path)  # the temp folders of writers killed mid-write
    # the writer's pid in the name, and its lock on the folder (hold_while_written): sweep_temp_files
    # removes the folder once its writer is dead
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent))
    locks = [os.open(tmp, os.O_RDONLY)]  # (closed at the end: the locks go with them)
    hold_while_written(locks[0])
    aside: list[Path] = []  # the folders moved away from path, the first one the folder we replace
    try:
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes 0700; give what a plain mkdir would
        yield tmp
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        while True:
            if path.exists():
                if keep_existing(path):
                    shutil.rmtree(tmp, ignore_errors=True)
                    return
                old = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".old", dir=path.parent))
                aside.append(old)
                locks.append(os.open(old, os.O_RDONLY))
                hold_while_written(locks[-1])
                with suppress(FileNotFoundError):  # another process may have moved it first
                    os.replace(path, old / path.name)
            try:
                os.replace(tmp, path)
                break
            except OSError as e:  # a folder appeared between the check and the rename: look again
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        try:
            fsync_dir(path.parent)
        finally:  # ours is in place, whole: even stopped here, the old folder goes (a kill leaves a .old, swept)
            for old in aside:
                shutil.rmtree(old, ignore_errors=True)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if aside and not path.exists():  # stopped between moving the old folder away and renaming ours in
            put_back(aside[0], path)
        for old in aside:  # one whose move aside failed is empty: removed (rmdir leaves any other)
            with suppress(OSError):
                old.rmdir()
        remove_empty(made)  # (Ctrl-C leaves nothing: not even OUT's new parent folders, empty)
        # a full disk (numpy's short write has no errno), or atomic_write's refusal of a file in tmp,
        # which would name a temp folder the user never named
        cause = os_error_behind(e) or (e.__cause__ if isinstance(e.__cause__, OSError) else None)
        if cause is not None:
            raise cannot_write(path, cause, "the previous folder is intact" if path.is_dir() else None) from None
        raise
    finally:
        for fd in locks:
            os.close(fd)


def current_umask() -> int:
    """The process umask (reading it means setting it, so set it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str, guard: Callable[[], None] | None = None) -> None:
    """`text` as UTF-8, atomically (`guard`: atomic_write's). A path in it that is not UTF-8 (a file
    name's byte 0xff, which Python holds as the surrogate \\udcff) is written as its own bytes, as the
    file system has it."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8", "surrogateescape")), guard)


def save_checkpoint(path: str | Path, state: dict[str, Any], guard: Callable[[], None] | None = None) -> None:
    """Atomically save a checkpoint dict (see REQUIRED) with its format tag, version and checksum
    (`guard`: atomic_write's)."""
    state = {k: v for k, v in state.items() if k not in ("format", "version", "checksum")}
    atomic_write(path, lambda f: torch.save({"format": FORMAT, "version": VERSION, **state,
                                             "checksum": checksum(state)}, f), guard)


def checksum(state: dict[str, Any]) -> str:
    """CRC-32 of a checkpoint's contents in order: each tensor's dtype, shape and bytes, every other
    value's repr; a container met twice (shared) counts once, so a shared structure is never
    expanded. Catches corruption (a flipped byte), not tampering."""
    crc, seen = 0, set()
    stack: list[Any] = [state]
    while stack:
        value = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if id(value) in seen:
                crc = zlib.crc32(b"<shared>", crc)
                continue
            seen.add(id(value))
            items = [x for kv in value.items() for x in kv] if isinstance(value, dict) else list(value)
            crc = zlib.crc32(f"<{type(value).__name__} {len(items)}>".encode(), crc)
            stack.extend(reversed(items))
        elif isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous().reshape(-1)
            crc = zlib.crc32(f"<{t.dtype} {tuple(value.shape)}>".encode(), crc)
            crc = zlib.crc32(t.view(torch.uint8).numpy() if t.numel() else b"", crc)
        else:
            crc = zlib.crc32(repr(value).encode("utf-8", "surrogatepass"), crc)
    return f"crc32:{crc:08x}"


# ---- loading ----


SPARSE_MIN = 2**26  # a smaller file costs little to read, holes or not


def mostly_holes(path: Path) -> bool:
    """Is most of this file a hole, bytes never written that read as zeros (a sparse file)? Nothing
    tinygpt writes has one, and its size is no bound on the work: a checkpoint of 76 KB on disk and
    8.6 GB in size took 8.6 GB of memory and 22 s to be found damaged. Holes are asked of the file
    system (SEEK_DATA, SEEK_HOLE), not guessed from its blocks: a compressing file system stores
    fewer blocks than bytes and no hole. (False where the file cannot be read: its reader says why.)"""
    try:
        st = path.stat()
        if st.st_size < SPARSE_MIN or getattr(st, "st_blocks", st.st_size) * 512 >= st.st_size // 2 or \
                not hasattr(os, "SEEK_DATA"):
            return False
        with open(path, "rb") as f:
            written = position = 0
            while position < st.st_size and written < st.st_size // 2:
                try:
                    start = os.lseek(f.fileno(), position, os.SEEK_DATA)
                except OSError as e:  # ENXIO: no data after position; else the file system cannot say
                    return e.errno == errno.ENXIO
                position = os.lseek(f.fileno(), start, os.SEEK_HOLE)
                written += position - start
    except OSError:
        return False
    return written < st.st_size // 2


def check_archive(path: Path) -> None:
    """torch.save writes a zip archive whose entries are stored, not compressed. A compressed entry
    would be inflated in full before any check (a 0.6 MB file with a 2 GB pickle inside), so an
    archive that holds one, or claims more bytes than the file has, is refused unread; so is a file
    mostly of holes (mostly_holes)."""
    if mostly_holes(path):
        raise UserError(f"{path} is damaged: most of its {path.stat().st_size:,} bytes were never written (a sparse "
                        f"file, holes that read as zeros), which torch.save never leaves; it was not loaded")
    if not zipfile.is_zipfile(path):
        return  # not an archive: torch.load refuses it, or reads the legacy format (torch_load: a claim past memory)
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError):
        raise UserError(f"{path} is truncated, corrupted or not a checkpoint") from None
    packed = [e.filename for e in entries if e.compress_type != zipfile.ZIP_STORED]
    if packed or sum(e.file_size for e in entries) > path.stat().st_size:
        raise UserError(f"{path} is not a checkpoint torch.save wrote: it holds compressed entries "
                        f"({short(packed[0]) if packed else 'sizes beyond the file'}) that could unpack to "
                        f"any size; it was not loaded")
    for pickled in (e for e in entries if e.filename.endswith(".pkl")):  # data.pkl (any that torch might read)
        try:  # its bytes read where torch reads them, the CRC unchecked as torch leaves it (a stored entry: they
            with open(path, "rb") as f:  # follow its local header, 30 bytes, and the name and extra field it sizes)
                f.seek(pickled.header_offset + 26)
                name_length, extra_length = struct.unpack("<HH", f.read(4))
                f.seek(pickled.header_offset + 30 + name_length + extra_length)
                data = f.read(pickled.file_size)
        except (OSError, struct.error):  # (unreadable, or cut short: torch.load says so)
            return
        check_pickled_keys(data, path)


SAME_HASH_MAX = 64  # distinct dict keys of one hash in a checkpoint's pickle: a real one has none (keys: texts, ids)
KEY_SIZE_MAX = 64  # a dict key's steps to hash (key_size): a real one is a text, an id or a pair of ids (3)
KEYS_OF = {"SETITEM": slice(1, 2), "SETITEMS": slice(0, None, 2), "DICT": slice(0, None, 2),
           "ADDITEMS": slice(None), "FROZENSET": slice(None)}  # which popped items an opcode makes keys of


class WalkedTuple(tuple):
    """A tuple check_pickled_keys rebuilt, with its size: what hashing it costs (see key_size)."""
    size: int


def key_size(key: Any) -> int:
    """The steps hashing `key` takes: a tuple, 1 and its items' (Python hashes every item again, each time: no
    hash is cached), capped just past KEY_SIZE_MAX; a number, 1 a 64-bit word; a text, 1 (its hash is cached)."""
    if isinstance(key, WalkedTuple):
        return key.size
    return max(1, (key.bit_length() + 63) // 64) if isinstance(key, int) else 1


def check_pickled_keys(data: bytes, path: Path) -> None:
    """Refuse a pickle whose dict keys are chosen to be slow. Python hashes an integer modulo 2**61 - 1, and a
    tuple by its items' hashes, so 100,000 keys that are multiples of 2**61 - 1 (a 1.3 MB file), or pairs of
    numbers solved to hash alike, make unpickling the dict quadratic: minutes before anything can be checked. So
    does one huge key set again and again, and a tuple of a tuple of ... (pairs of the one below, through the memo)
    hashes 2**depth items. The opcodes are walked as pickletools.dis walks them, by their stack effects, no object
    built: numbers, texts and tuples of them are followed (through the memo too) to the keys they become.
    Milliseconds for a real checkpoint; a pickle that cannot be walked so is left to torch.load to refuse."""
    mark, stack, marks, memo, by_hash = object(), [], [], {}, {}  # marks: where the stack holds `mark`, in order
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name == "MARK":
                marks.append(len(stack))
                stack.append(mark)
                continue
            if op.name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):  # (store the top, pop nothing)
                memo[len(memo) if op.name == "MEMOIZE" else arg] = stack[-1]
                continue
            if pickletools.markobject in op.stack_before:  # the items above the mark, and those it takes below it
                if not marks:
                    return
                top = marks[-1]
                items, below = stack[top + 1:], op.stack_before.index(pickletools.markobject)
                del stack[top - below:]
            else:
                below = len(op.stack_before)
                items = stack[len(stack) - below:] if below else []
                del stack[len(stack) - below:]
            while marks and marks[-1] >= len(stack):  # (the marks just taken off)
                marks.pop()
            pushed_from = len(stack)
            for key in items[KEYS_OF[op.name]] if op.name in KEYS_OF else ():
                if key_size(key) > KEY_SIZE_MAX:
                    raise UserError(f"{path} is not a checkpoint tinygpt wrote: its pickle builds a dict key that "
                                    f"takes more than {KEY_SIZE_MAX} steps to hash (a step for each tuple and number "
                                    f"in it, and for each 64 bits of a number: made to make loading it take hours, or "
                                    f"crash); it was not loaded")
                try:
                    same = by_hash.setdefault(hash(key), set())
                except TypeError:  # (a placeholder holding an unhashable: no key a dict could take)
                    continue
                same.add(key)
                if len(same) > SAME_HASH_MAX:
                    raise UserError(f"{path} is not a checkpoint tinygpt wrote: its pickle builds a dict of more than "
                                    f"{SAME_HASH_MAX} keys of one hash (made to make loading it take hours); it was "
                                    f"not loaded")
            if op.name.startswith("TUPLE"):
                walked = WalkedTuple(items)
                walked.size = min(1 + sum(key_size(item) for item in items), KEY_SIZE_MAX + 1)
                stack.append(walked)
            elif op.name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo.get(arg, object()))
            elif op.name == "DUP":
                stack += [items[0], items[0]]
            elif isinstance(arg, (int, float, str, bytes)) and not op.stack_before and len(op.stack_after) == 1 \
                    and op.name not in ("GLOBAL", "STACK_GLOBAL", "INST", "PERSID", "EXT1", "EXT2", "EXT4"):
                stack.append(arg)  # a number or a text the opcode pushes
            else:  # anything else: an object of no interest, each its own (its hash is its identity)
                stack += [object() for _ in op.stack_after]
            marks += [at for at in range(pushed_from, len(stack)) if stack[at] is mark]  # (a mark DUP or GET pushed)
    except (ValueError, KeyError, IndexError, struct.error):  # (not a pickle this walk can follow: torch.load says)
        return


def is_utf8(text: str) -> bool:
    """Does `text` (a path) hold no byte that is not UTF-8 (kept by Python as a lone surrogate)?"""
    return not any("\udc80" <= c <= "\udcff" for c in text)


def torch_load(path: Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> Any:
    """torch.load with weights_only=True; a refused or unreadable file is a one-line UserError
    naming it (a pickled Python object is said to be one: it was refused, never run). `mmap`: the
    tensors mapped, not read (milliseconds at any size)."""
    check_archive(path)
    if mmap and not is_utf8(str(path)):  # (torch maps a file by its name as UTF-8: a finished run read as damaged)
        mmap = False
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error says enough
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM, errno.EIO, errno.EISDIR):
            raise UserError(f"cannot read {path}: {e.strerror}") from None
        # torch's reader says "Invalid argument" (EINVAL) of an archive cut short
        raise UserError(f"{path} is truncated, corrupted or not a checkpoint ({e.strerror or type(e).__name__})") from None
    except pickle.UnpicklingError as e:
        if (name := flipped_torch_name(str(e))) is not None:  # a byte flipped in a name torch writes: damage
            raise UserError(f"{path} is corrupted: it names {name} (a byte changed on disk or in a copy?); use "
                            f"another copy") from None
        if re.search(r"unsupported global", str(e), re.IGNORECASE):  # a class or function: code could run
            raise UserError(f"{path} holds pickled Python objects (code could run when they load); "
                            f"weights_only loading refused them and it was not loaded") from None
        raise UserError(f"{path} is truncated, corrupted or not a checkpoint") from None
    except Exception as e:  # torch reports damaged files with many exception types
        # not damage (run_cli says out of memory): a whole best.pt on too small a GPU. But a file in torch's legacy
        # format (not a zip archive: check_archive cannot bound it) allocates what its tensors claim before reading
        # them: a 116 KB one claiming 100 GB was "out of memory", naming no file
        if out_of_memory(e) and zipfile.is_zipfile(path):
            raise
        what = "claims more memory than there is" if out_of_memory(e) else type(e).__name__
        raise UserError(f"{path} is truncated, corrupted or not a checkpoint ({what})") from None


def flipped_torch_name(refusal: str) -> str | None:
    """'NAME, one character off torch's KNOWN' where the global torch's weights_only refusal names is one character
    away from a global that loader allows (`torch._utils._rebuild_tdnsor_v2`: one bit of `_rebuild_tensor_v2`
    flipped), else None: any other name, one torch has (`torch.utils.cpp_extension.load_inline`) or not, is a
    pickled object's."""
    found = re.search(r"GLOBAL ([\w.]+)", refusal)
    try:
        from torch._weights_only_unpickler import _get_allowed_globals  # (private: missing, nothing is damage)
        allowed = _get_allowed_globals()
    except (ImportError, AttributeError, TypeError):
        return None
    if found is None:
        return None
    name = found[1]
    near = [known for known in allowed if len(known) == len(name) and sum(a != b for a, b in zip(known, name)) == 1]
    return f"{short(name)}, one character off torch's {near[0]}" if near else None


def check_one_run(run: Path) -> None:
    """Refuse a run directory whose best.pt and ckpt.pt are of two runs (their run_id differs: one
    was copied in from another folder). Its best weights would be another model's, sampled, probed,
    exported or trained on under this run's name. Checkpoints from before run ids pass."""
    if not (run / "ckpt.pt").is_file():
        return
    if of_two_runs(peek_checkpoint(run / "best.pt"), peek_checkpoint(run / "ckpt.pt")):
        raise UserError(f"{run}: its best.pt and ckpt.pt are of two runs (one copied in from another folder?), so "
                        f"the run's best weights would be another model's; give the file you mean, "
                        f"{shell_quote(path_word(run / 'best.pt'))} or {shell_quote(path_word(run / 'ckpt.pt'))}")


def of_two_runs(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Are checkpoints a and b (None: unread) of two runs, their run ids differing? Checkpoints from
    before run ids are of no other run."""
    ids = [ckpt.get("run_id") if ckpt else None for ckpt in (a, b)]
    return all(isinstance(i, str) for i in ids) and ids[0] != ids[1]


def peek_checkpoint(path: Path) -> dict[str, Any] | None:
    """The checkpoint at `path` with its tensors mapped, not read, and nothing checked (a resume
    checks it), or None without a readable one of tinygpt's: for a report of many runs."""
    if not path.is_file():
        return None
    try:
        ckpt = torch_load(path, mmap=True)
    except UserError:  # (damaged, or a legacy format torch cannot map)
        return None
    return ckpt if isinstance(ckpt, dict) and ckpt.get("format") == FORMAT else None  # (another program's .pt: none)


def saved_step_and_data(ckpt: dict[str, Any] | None) -> tuple[int | None, str | None]:
    """The step a peeked checkpoint holds (where a resume continues) and the digest of the data it
    was trained on (data/prepare.py's meta digest; None from before checkpoints recorded it); (None,
    None) without one (a run stopped by a signal saves at its step, past its last metrics.csv row;
    runs of one config trained on different texts are different settings)."""
    if ckpt is None:
        return None, None
    step, digest = ckpt.get("step"), ckpt.get("data_digest")
    step = step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None
    return step, digest if isinstance(digest, str) and digest else None


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and check a checkpoint: format, version, checksum and the types of REQUIRED; every
    failure is a one-line UserError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} is {not_regular(path)}; give a run directory or a checkpoint (.pt)"
                        if path.exists() and not path.is_dir() else f"checkpoint not found: {path}")
    ckpt = torch_load(path, map_location)
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise UserError(f"{path} is not a tinygpt checkpoint")
    if ckpt.get("version") not in READS:
        older = ", ".join(str(v) for v in READS if v != VERSION)
        raise UserError(f"{path} is checkpoint version {short(ckpt.get('version'))}; this tinygpt reads version "
                        f"{VERSION} (and {older}): retrain, or use the tinygpt that wrote it")
    missing = [k for k in REQUIRED + ("checksum",) * (ckpt["version"] >= 3) if k not in ckpt]
    if missing:
        raise UserError(f"{path} is incomplete: missing {', '.join(missing)}")
    check_tensors(ckpt, path)  # before the checksum reads their bytes
    if ckpt["version"] >= 3:
        contents = {k: v for k, v in ckpt.items() if k not in ("format", "version", "checksum")}
        if checksum(contents) != ckpt["checksum"]:
            raise UserError(f"{path} is corrupted: its contents do not match the checksum saved with them "
                            f"(a byte changed on disk or in a copy); use another copy")
    check_types(ckpt, path)
    return ckpt


def check_tensors(ckpt: dict[str, Any], path: Path) -> None:
    """Every tensor in the checkpoint is a plain one, as tinygpt saves them: dense, contiguous and
    within the bytes the file stores for it. Anything else is refused before the checksum reads it:
    a meta or sparse tensor has no bytes to read (a traceback), and a view of stride 0 (one stored
    float as 20000 x 20000) would be materialised, gigabytes from a small file. Views sharing a
    storage, and texts (pickle stores one text once, however often it is referred to), may add up to
    at most 4x the file (tied weights: 2x), so hashing takes a few reads of it (a 1.3 MB file naming
    one 1 MB text 20000 times took minutes). A tensor in the config or the tokenizer, which hold plain values, is
    refused too (compared with a number, `block_size: tensor([0., 0., 0.])` was a traceback)."""
    # (value, where: (parent's where, its key), top: the checkpoint's key it lies under)
    stack: list[tuple[Any, tuple | None, Any]] = [(ckpt, None, None)]
    seen, total, limit = set(), 0, 4 * path.stat().st_size
    while stack:
        value, where, top = stack.pop()
        if isinstance(value, (dict, list, tuple)) and id(value) not in seen:
            seen.add(id(value))
            for key, item in value.items() if isinstance(value, dict) else enumerate(value):
                under = key if where is None else top
                stack += [(key, (where, key), under), (item, (where, key), under)]  # (a key may be a tensor)
        elif isinstance(value, torch.Tensor):
            def damaged(why: str) -> UserError:  # (the entry's name built for the message only)
                return UserError(f"{path} is damaged: tensor {short(entry_name(where))}{why}")
            if top in ("config", "tokenizer"):
                raise damaged(" stands where tinygpt saves a plain value (a number, a text)")
            if not dense(value):
                raise damaged(f" is not a dense tensor ({value.layout}, on {value.device.type})")
            size, stored = value.numel() * value.element_size(), value.untyped_storage().nbytes()
            if not value.is_contiguous() or value.storage_offset() * value.element_size() + size > stored:
                raise damaged(f" of shape {tuple(value.shape)} is a view (strides {value.stride()}) of {stored} "
                              f"stored bytes, not a whole tensor as tinygpt saves them")
            total += size
            if total > limit:
                raise damaged(": the tensors up to it claim over 4x the file's bytes (views of shared bytes), not "
                              "whole tensors as tinygpt saves them")
        elif isinstance(value, (str, bytes, bytearray)):
            total += len(value)
            if total > limit:
                raise UserError(f"{path} is damaged: its values up to {short(entry_name(where))} claim over 4x "
                                f"the file's bytes (a text stored once, referred to many times), not as tinygpt "
                                f"saves them")


def entry_name(where: tuple | None) -> str:
    """check_tensors' (parent, key) chain as 'optimizer/state/0/exp_avg' (built only for a message:
    a path per entry would cost depth x key length in a deeply nested file)."""
    keys = []
    while where is not None:
        where, key = where
        keys.append(str(key) if isinstance(key, (str, int)) else f"<{type(key).__name__} key>")
    return "/".join(reversed(keys))


def dense(t: torch.Tensor) -> bool:
    """A tensor with bytes of its own in memory: not sparse, quantized, nested or on the meta device."""
    return t.layout == torch.strided and t.device.type != "meta" and not (t.is_quantized or t.is_nested)


def check_types(ckpt: dict[str, Any], path: Path) -> None:
    """REQUIRED's values have their types: config and tokenizer dicts, model a dict of tensors,
    step an int in [0, MAX_STEP] (a damaged or hand-made file is refused here, not deep inside torch)."""
    for key in ("config", "tokenizer", "model"):
        if not isinstance(ckpt[key], dict):
            raise UserError(f"{path} is damaged: its {key!r} is a {type(ckpt[key]).__name__}, not a dict")
    bad = [k for k, v in ckpt["model"].items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise UserError(f"{path} is damaged: its weights hold {short(bad[0])}, which is not a named tensor")
    step = ckpt["step"]
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP:
        raise UserError(f"{path} is damaged: its step is {short(step)}, not a count of steps")


HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")  # a Hugging Face model's
HF_FOLDER_FILES = ("config.json", *HF_WEIGHTS, "generation_config.json")  # its folder's files (export.py's: hf.py)


def is_hf_folder(folder: Path) -> bool:
    """Does `folder` hold a Hugging Face model: its config.json and its weights?"""
    return (folder / "config.json").is_file() and any((folder / name).is_file() for name in HF_WEIGHTS)


def hf_folder_given(path: Path, folder: Path) -> str:
    """The refusal of a Hugging Face model folder (or one of its files, `path`) given for a run."""
    what = f"{path} is a Hugging Face model folder" if path == folder else f"{path} is a file of the Hugging " \
        f"Face model folder {folder}"
    return (f"{what}, not a run: bring it in as one with "
            f"{shell_join(['python', script_word('export.py'), '--from-hf', path_word(folder), 'NEW_RUN_DIR'])}")


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory -> its best.pt if present (and of the run's ckpt.pt: check_one_run), else ckpt.pt;
    a file -> itself."""
    path = Path(path)
    if path.is_dir():
        for name in ("best.pt", "ckpt.pt"):
            if (path / name).is_file():
                if name == "best.pt":
                    check_one_run(path)
                return path / name
        for odd in (path / "best.pt", path / "ckpt.pt"):  # "no checkpoint" would not say which is wrong
            kind = odd_file(odd)
            if kind:
                raise UserError(f"{odd} is {kind}, not a checkpoint file; give a run directory whose best.pt or "
                                f"ckpt.pt is a file")
        if (path / "config.json").is_file():  # export.py's output, or a GPT-2 from the Hub
            raise UserError(hf_folder_given(path, path))
        others = sorted(p.name for p in path.glob("*.pt") if p.is_file())  # a checkpoint saved under another name
        if others:
            raise UserError(f"no best.pt or ckpt.pt in {path}, which holds {first_few(others)}: give the file itself, "
                            f"e.g. {shell_quote(path_word(path / others[0]))}")
        runs = sorted(d.name for d in path.iterdir()
                      if d.is_dir() and any((d / n).is_file() for n in CHECKPOINTS))
        if runs:  # a sweep's folder (its runs one level down)
            raise UserError(f"no checkpoint in {path}, which holds {len(runs)} run(s) ({first_few(runs)}), as a "
                            f"sweep's folder does: give one of them, e.g. {shell_quote(path_word(path / runs[0]))}")
        from tinygpt.runs import lock_holder  # (runs imports this module)
        trainer = lock_holder(path)
        if trainer is not None:
            raise UserError(f"{path} is being trained now (process {trainer}) and has no checkpoint yet: the first "
                            f"is saved after its first evaluation; try again then")
        if (path / "config.yaml").is_file():  # a run killed before its first save
            again = shell_join(["python", script_word("train.py"), path_word(path / "config.yaml")])
            raise UserError(f"no checkpoint in {path}: its training stopped before it saved one; run that training "
                            f"again, e.g. {again}")
        if prepared_data(path):
            raise UserError(f"{path} is a folder of prepared data (data.prepared_dir), not a run: give the run "
                            f"directory trained on it (its train.out_dir)")
        raise UserError(f"no checkpoint in {path} (expected best.pt or ckpt.pt): train first, "
                        f"e.g. python train.py configs/stories.yaml")
    if not path.exists():
        hint = ""
        if HF_GPT2_NAME.match(str(path)):  # e.g. train.init_from=gpt2: tinygpt downloads nothing
            hint = (f"; {path} names a Hugging Face GPT-2: download its folder (config.json, model.safetensors), "
                    f"e.g. hf download {path} --local-dir DIR, bring it in with "
                    f"python export.py --from-hf DIR out/{path.name}, then use out/{path.name}")
        dead = dead_link(path)
        raise UserError(f"{path} is {dead}; give a run directory or a checkpoint" if dead else
                        f"run directory or checkpoint not found: {path}{hint}")
    if path.suffix.lower() in (".yaml", ".yml"):  # `sample.py configs/stories.yaml`
        raise UserError(f"{path} is a config, not a run: give the run directory it trained into (its "
                        f"train.out_dir) or a checkpoint (.pt)")
    if path.name in HF_FOLDER_FILES and (path.parent / "config.json").is_file():  # model.safetensors of a GPT-2 folder
        raise UserError(hf_folder_given(path, path.parent))  # (was "not a tinygpt checkpoint", "truncated, ...")
    if path.name in ("metrics.csv", "loss.png", "probe.json") and (path.parent / "config.yaml").is_file():  # a run's
        # other file (tab completion), once called "truncated, corrupted or not a checkpoint (IndexError)"
        raise UserError(f"{path} is a file of the run {path.parent}, not its checkpoint: give the run directory, "
                        f"{shell_quote(path_word(path.parent))}")
    return path


def checkpoint_config(ckpt: dict[str, Any], source: str | Path) -> Config:
    """The Config a loaded checkpoint trained with (`source` names it in a refusal): recorded, so its paths are not
    checked again (a run trained on '$x.txt' was refused by every command once the file had moved)."""
    return config_from_dict(ckpt["config"], str(source), recorded=True)


def check_init_tokenizer(cfg: Config, init_ckpt: dict[str, Any], data_tokens: dict[str, Any]) -> None:
    """The data (its tokenizer's to_dict(), `data_tokens`) must be tokenized as train.init_from's run was:
    its weights know its token ids. The refusal names both tokenizers and how to get the run's: a full
    tiktoken vocabulary (GPT-2's) fits any text; a learned or compact one is the run's own text's, so only
    its data settings give it. train.py checks it at its start; sweep.py before any of its runs trains."""
    from data.prepare import token_keys  # (here: data/prepare.py imports this module)
    theirs = init_ckpt["tokenizer"]
    if same_tokens(theirs, data_tokens):
        return
    if theirs.get("kind") == "tiktoken" and "ids" not in theirs:
        fix = f"prepare the data with the run's: --set data.tokenizer={theirs.get('encoding')} data.compact_vocab=false"
    else:
        init_data = checkpoint_config(init_ckpt, cfg.train.init_from).data
        settings = [set_arg(f"data.{key}", getattr(init_data, key)) for key in token_keys(init_data)
                    if getattr(init_data, key) != getattr(cfg.data, key)]
        fix = (f"the run's vocabulary comes from its own data: prepare this data as it did, "
               f"--set {' '.join(settings)}" if settings else
               f"the run's vocabulary came from its data.dataset={short(init_data.dataset)} as it was then, and that "
               f"text has changed since")
    raise UserError(f"train.init_from={cfg.train.init_from!r} was trained with another tokenizer or vocabulary "
                    f"than this data (the run's: {tokenizer_words(theirs)}; this data's: "
                    f"{tokenizer_words(data_tokens)}); {fix}")


def tokenizer_words(tok: dict[str, Any]) -> str:
    """A saved tokenizer in data.tokenizer's words, 'char, 65 tokens' or 'gpt2 compact, 13256 tokens'
    (from its dict: a tiktoken encoding's file may be offline)."""
    name = tok.get("encoding") if tok.get("kind") == "tiktoken" else tok.get("kind")
    return f"{name}{' compact' if 'ids' in tok else ''}, {count(tok.get('vocab_size'), 'token')}"


def model_from_checkpoint(ckpt: dict[str, Any], path: str | Path) -> tuple[GPT, Config]:
    """A loaded checkpoint -> (model with its weights, Config). The tokenizer itself is not built
    (a tiktoken encoding may be offline), only checked to have the model's vocabulary size."""
    cfg = checkpoint_config(ckpt, path)
    tok = ckpt["tokenizer"]
    tok_size = tok.get("vocab_size") if isinstance(tok, dict) else None
    if cfg.model.vocab_size <= 0 or type(tok_size) is not int or tok_size != cfg.model.vocab_size:  # (300.0 too)
        theirs = "'s, which records none" if tok_size is None else f"'s {short(tok_size)}"  # (not "tokenizer's None")
        raise UserError(f"{path}: model.vocab_size={cfg.model.vocab_size} does not match its tokenizer{theirs}; "
                        f"the checkpoint is damaged")
    m = cfg.model
    weights = ckpt["model"]
    layers = {int(found[1]) for name in (weights if isinstance(weights, dict) else ())
              if isinstance(name, str) and (found := re.match(r"blocks\.(\d{1,9})\.", name))}
    if isinstance(weights, dict) and len(layers) != m.n_layer:  # (before the shell of 100,000 layers: minutes, GBs)
        raise UserError(f"{path}: its config gives model.n_layer={m.n_layer}, its weights hold "
                        f"{count(len(layers), 'layer')}; the checkpoint is damaged")
    check_memory(model_memory(m), torch.device("cpu"), f"the model of {path} ({count(m.n_layer, 'layer')}, "
                 f"n_embd {m.n_embd}, block {m.block_size}, vocab {m.vocab_size})",
                 "its config is damaged, or it needs a bigger machine")
    with torch.device("meta"):  # the shapes alone, nothing allocated: weights that are not of this config
        shell = GPT(m)          # (an edited block_size, say) are refused before a big model is built
    check_weights(shell, ckpt["model"], path)
    model = GPT(m)
    model.load_state_dict(ckpt["model"])
    return model, cfg


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], path: str | Path) -> None:
    """model.load_state_dict(weights), the weights checked first (check_weights)."""
    check_weights(model, weights, path)
    model.load_state_dict(weights)


def check_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], path: str | Path) -> None:
    """What model.load_state_dict(weights) would take, checked: a missing, unexpected, misshapen or
    non-float tensor is a one-line UserError naming the tensor (and both shapes), not torch's
    multi-line report (or, for an int64 or bool tensor, a silent cast); so are NaN or infinite
    values. `model` may live on the meta device (only its shapes are read)."""
    expected = model.state_dict()
    for name, t in expected.items():
        if name not in weights:
            raise UserError(f"{path}: the weights have no {name!r}; the checkpoint is damaged")
        w = weights[name]
        if tuple(w.shape) != tuple(t.shape):
            raise UserError(f"{path}: weight {name!r} has shape {tuple(w.shape)}, but its config "
                            f"gives {tuple(t.shape)}; the checkpoint is damaged")
        if not dense(w) or not w.is_floating_point():
            kind = w.dtype if dense(w) else f"{w.layout} on {w.device.type}"
            raise UserError(f"{path}: weight {name!r} is {kind}, not a dense floating-point tensor; the "
                            f"checkpoint is damaged")
    extra = [name for name in weights if name not in expected]
    if extra:
        raise UserError(f"{path}: the weights hold {short(extra[0])}, which its model has not; the checkpoint "
                        f"is damaged")
    for name, t in weights.items():  # a diverged run, or a damaged file: sampling would fail on NaN probabilities
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise UserError(f"{path}: weight {name!r} holds NaN or infinite values (a diverged run or a damaged "
                            f"file); nothing can be computed with it")
    tied: dict[int, list[str]] = {}  # names of one parameter: lm_head.weight is tok_emb.weight
    for name, p in model.named_parameters(remove_duplicate=False):
        tied.setdefault(id(p), []).append(name)
    for first, *others in tied.values():  # (load_state_dict would copy each into the one tensor, the last kept)
        for name in others:
            a, b = weights[first], weights[name]
            shared = a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.stride() == b.stride()  # (as saved)
            if not shared and not torch.equal(a, b):  # (finite, checked above: NaN equals no NaN)
                raise UserError(f"{path}: weight {name!r} differs from {first!r}, one tensor in the model (tied); "
                                f"the checkpoint is damaged")


MOMENTS = ("exp_avg", "exp_avg_sq")  # what AdamW keeps per weight (training.make_optimizer), beside its step


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict[str, Any], model: torch.nn.Module,
                   path: str | Path) -> None:
    """optimizer.load_state_dict(state), then what AdamW will read checked, each value by name: per
    weight a step (one finite number >= 0) and two finite floating-point moments of the weight's
    shape, the second >= 0; per group, betas two numbers in [0, 1), eps and weight_decay finite and >= 0.
    torch takes anything, and the first step then fails far from the cause (a traceback), hangs, casts
    an int moment silently, or "diverges" (advice to lower train.lr, for a damaged file)."""
    def damaged(what: str) -> UserError:
        return UserError(f"{path} cannot be resumed: {what}; the checkpoint is damaged")

    def number(x: Any, below: float = math.inf) -> bool:  # (NaN and inf are not)
        return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < below

    names = {id(p): name for name, p in model.named_parameters()}
    order = [names.get(id(p), "?") for group in optimizer.param_groups for p in group["params"]]  # state's keys
    saved_state = state.get("state") if isinstance(state, dict) else None
    for index, saved in (saved_state.items() if isinstance(saved_state, dict) else ()):
        for key in MOMENTS:  # (before load_state_dict, which casts a moment to its weight's dtype)
            t = saved.get(key) if isinstance(saved, dict) else None
            if isinstance(t, torch.Tensor) and dense(t) and not t.is_floating_point():
                weight = order[index] if isinstance(index, int) and 0 <= index < len(order) else index
                raise damaged(f"the optimizer's {key!r} of weight {weight!r} is {t.dtype}, not floating point")
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError, TypeError, IndexError, RuntimeError) as e:
        raise damaged(f"its optimizer state does not fit the model ({reason(e)})") from None
    for group in optimizer.param_groups:
        betas = group.get("betas")
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2 and all(number(b, 1) for b in betas)):
            raise damaged(f"the optimizer's betas are {short(betas)}, not two numbers in [0, 1)")
        for key in ("eps", "weight_decay"):
            if not number(group.get(key)):
                raise damaged(f"the optimizer's {key} is {short(group.get(key))}, not a number >= 0")
    for p, saved in optimizer.state.items():
        weight = names.get(id(p), "?")
        if not isinstance(saved, dict) or set(saved) != {"step", *MOMENTS}:
            keys = sorted(map(str, saved)) if isinstance(saved, dict) else short(saved)
            raise damaged(f"the optimizer's state of weight {weight!r} holds {keys}, not step and {', '.join(MOMENTS)}")
        step = saved["step"]
        value = step.item() if isinstance(step, torch.Tensor) and dense(step) and step.numel() == 1 else step
        if not number(value):
            raise damaged(f"the optimizer's step of weight {weight!r} is {short(step)}, not a count")
        for key in MOMENTS:
            t = saved[key]
            if not isinstance(t, torch.Tensor) or t.shape != p.shape:
                what = f"has shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else f"is a {type(t).__name__}"
                raise damaged(f"the optimizer's {key!r} of weight {weight!r} {what}, not {tuple(p.shape)}")
            if not torch.isfinite(t).all() or (key == "exp_avg_sq" and (t < 0).any()):
                raise damaged(f"the optimizer's {key!r} of weight {weight!r} holds values that are not finite"
                              + (" or are negative" if key == "exp_avg_sq" else ""))


def load_run_checkpoint(given: str | Path, device: str | torch.device = "cpu") -> tuple[Path, dict[str, Any]]:
    """A run directory or checkpoint file -> (the checkpoint's path, its contents). A run's damaged
    best.pt is refused with a pointer to its ckpt.pt where that one loads."""
    given = Path(given)
    path = resolve_checkpoint(given)
    try:
        return path, load_checkpoint(path, map_location=device)
    except UserError as e:  # a run's damaged best.pt: its ckpt.pt may be whole
        other = path.with_name("ckpt.pt")
        if not (given.is_dir() and path.name == "best.pt" and other.is_file()):
            raise
        try:
            load_checkpoint(other, map_location="cpu")
        except UserError:
            raise e from None
        raise UserError(f"{e}; the run's other checkpoint loads: give it instead, {path_word(other)}") from None


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[GPT, Config, Tokenizer, dict[str, Any]]:
    """Run directory or checkpoint -> (model in eval mode, Config, Tokenizer, checkpoint dict)."""
    path, ckpt = load_run_checkpoint(path, device)
    model, cfg = model_from_checkpoint(ckpt, path)
    try:
        tokenizer = tokenizer_from_dict(ckpt["tokenizer"])
    except DamagedTokenizer as e:
        raise UserError(f"{path}: its tokenizer is damaged ({e}); use another copy of the run, or train it "
                        f"again") from None
    return model.to(device).eval(), cfg, tokenizer, ckpt


# ---- random-number state (so that a resumed run continues exactly) ----


def capture_rng_state(device: torch.device | None = None) -> dict[str, Any]:
    """The python, numpy and torch RNG states, and that of the GPU `device` (the one this process
    trains on), as checkpoint-safe data. (Under DDP train.py saves every rank's.)"""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: dict[str, Any], device: torch.device | None = None) -> None:
    """Set the states capture_rng_state saved; the GPU's into `device`'s generator (the GPU this
    process trains on, whichever it was saved from)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"].cpu())
    saved = state.get("cuda")
    if saved is None or device is None or device.type != "cuda":
        return
    if isinstance(saved, torch.Tensor):
        torch.cuda.set_rng_state(saved.cpu(), device)
    else:  # an older checkpoint: every GPU's state by index, restored as it was then
        for i, s in enumerate(saved[:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s.cpu(), i)

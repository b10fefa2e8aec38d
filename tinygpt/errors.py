"""User errors and the command-line wrapper that turns them into one line and an exit code.

Every entry point (train.py, sample.py, data/prepare.py, ...) calls `run_cli(main, argv)`:
- a `UserError` (bad config, bad flag, missing file, ...) prints `error: <message>`, exit 2;
- the machine refusing (disk full, permission denied, read-only file system, out of memory)
  prints one `error: ...` line too, exit 2: nothing half-written is left, every write is atomic;
- Ctrl-C prints `interrupted`, exit 130 (train.py saves its checkpoint at the first Ctrl-C itself);
  SIGTERM and SIGHUP do the same with exit 143 and 129 (`stop_on_signals`), and before run_cli
  is reached, while the command imports torch, `stop_while_starting` (its first lines) does;
  a signal the process inherited ignored (`nohup`: SIGHUP) stays ignored (`handle_signals`);
- anything else is a bug and keeps its traceback (exit 1).
A reader of the output that leaves (`| head`) ends a command quietly, exit 0, unless its work is
its files (train.py): `ReaderMayLeave` then drops the output and the work goes on.
Text the output's encoding cannot hold is printed escaped (`print_anything`), never a traceback.
The lines go to stderr. Values quoted in messages are cut by `short`, so that a huge value (a YAML
alias bomb, a damaged checkpoint, a 16,000-bit integer) never makes a huge message.
"""
from __future__ import annotations

import argparse
import codecs
import errno
import os
import reprlib
import shlex
import signal
import stat
import sys
import threading
import unicodedata
from pathlib import Path
from typing import Any, Callable, Sequence

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

# OSErrors that mean "the machine refuses", not "tinygpt has a bug" (a FileNotFoundError can be a bug)
ENVIRONMENT_ERRNOS = {getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM",
                                                     "ENAMETOOLONG", "ENOTDIR", "EISDIR", "ELOOP", "EMFILE")
                      if hasattr(errno, name)}
FULL_DISK = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # of those, a file (or its disk, or a quota) that takes no more
MAX_VALUE = 80  # characters of a value quoted in a message
MAX_LINE = 1000  # characters of an error line at most (capped): the start and the end of a longer one

MAX_INT_BITS = 128  # a longer integer is described by its size (see _Repr)


class _Repr(reprlib.Repr):
    """reprlib's Repr, but an integer of more than MAX_INT_BITS is described by its size: its digits
    would say nothing, and Python refuses to write more than 4300 of them (ValueError)."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > MAX_INT_BITS:
            return f"{'a negative' if x < 0 else 'an'} integer of {x.bit_length()} bits"
        return super().repr_int(x, level)


_repr = _Repr()  # bounded work as well as bounded text: a few items per level, a few levels
_repr.maxlevel, _repr.maxlist, _repr.maxtuple, _repr.maxdict, _repr.maxset = 3, 4, 4, 4, 4
_repr.maxstring, _repr.maxother, _repr.maxlong = MAX_VALUE, MAX_VALUE, 40


class UserError(Exception):
    """A mistake the user can fix: the message names the culprit (key, file, value) and the fix."""


# what stops a command as Ctrl-C does: Ctrl-C, kill (SIGTERM), a terminal that hung up (SIGHUP, as
# when an SSH connection drops; not on Windows)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


# set once this process stops on a signal it was sent (stopping_on_a_signal); run_cli clears it
_stopping = False


CPU_ALLOCATOR_REFUSED = "DefaultCPUAllocator: can't allocate memory"  # torch's CPU allocator, refused


def out_of_memory(e: BaseException) -> bool:
    """Is `e` an allocation refused (Python's MemoryError, torch's CPU allocator, CUDA's
    OutOfMemoryError)? A reader that catches every error of a damaged file lets these pass: run_cli
    says "out of memory", not that the file is damaged."""
    return isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and (
        CPU_ALLOCATOR_REFUSED in str(e) or type(e).__name__ == "OutOfMemoryError"))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the process is (stop_on_signals): it unwinds like Ctrl-C's
    KeyboardInterrupt, so the same cleanups run (a temp folder is removed, a lock released)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def shown_as_unicode(text: str) -> str:
    """`text` with each byte of a file name that is not UTF-8 (a lone surrogate, as Python holds
    it) as '\ufffd': a page, a picture or a title holds no such byte."""
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def short(value: Any, limit: int = MAX_VALUE) -> str:
    """repr(value) for a message, at most `limit` characters: nested or long values are elided
    with '...' without ever being expanded whole. A path is shown as its text ('a/b', not PosixPath('a/b'))."""
    text = _repr.repr(str(value) if isinstance(value, Path) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_few(names: Sequence[str], n: int = 3) -> str:
    """'a, b, c and 4 more': the first `n` of `names` for a message, and how many are left out."""
    return ", ".join(names[:n]) + (f" and {len(names) - n:,} more" if len(names) > n else "")


def count(n: int, noun: str, plural: str | None = None) -> str:
    """(1, 'layer') -> '1 layer', (2, 'layer') -> '2 layers'; `plural` for other forms ('stories')."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def elide(text: str, limit: int = 120) -> str:
    """`text` on one line, at most `limit` characters (elided with '...')."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def reason(e: BaseException, limit: int = 120) -> str:
    """What an exception says, for a one-line message (elide), or its type where it says nothing."""
    return elide(str(e), limit) or type(e).__name__


def environment_error(e: OSError) -> str:
    """One line for an OSError the machine raised: what, and on which file (a path over 200
    characters, say 5,000 refused as too long, keeps its first 100 and its last 97)."""
    # (a file name given as bytes, as TensorBoard's writer gives it, is shown as text, not b'...')
    name = "" if e.filename is None else os.fsdecode(e.filename) if isinstance(e.filename, bytes) else str(e.filename)
    if len(name) > 200:
        name = f"{name[:100]}...{name[-97:]}"
    return f"{e.strerror or type(e).__name__}{': ' + name if name else ''}"


def output_culprit(e: OSError) -> str:
    """': standard output' where an error naming no file is a full disk and standard output is a
    file or a device (`sample.py > out.txt` on a full disk, `> /dev/full`): tinygpt's own writes name
    their file (checkpoint.cannot_write), so such an error is the output's. '' otherwise."""
    if e.filename is not None or e.errno not in FULL_DISK:
        return ""
    try:
        mode = os.fstat(1).st_mode
        redirected = (stat.S_ISREG(mode) or stat.S_ISCHR(mode)) and not os.isatty(1)
    except OSError:
        return ""
    return ": standard output" if redirected else ""


def run_cli(main: Callable[[Sequence[str] | None], object], argv: Sequence[str] | None = None) -> None:
    """Run `main(argv)` and exit: 0 on success, one line on stderr and 2 for a user's (or the
    machine's) refusal, 130 after Ctrl-C, 143 and 129 after SIGTERM and SIGHUP; see the module doc."""
    global _stopping
    _stopping = False
    print_anything()
    previous = stop_on_signals()
    try:
        main(argv)
        if argv is None:  # the output's last bytes written while a stop signal still stops the command:
            flush_stdout()  # Python's own flush at exit, on a pipe nobody reads, would wait unstoppably
    except UserError as e:
        if torchrun_rank() not in (None, 0):  # (after_peers_refused: silent if torchrun stops it meanwhile)
            after_peers_refused()
        _fail(f"error: {e}", 2)
    except BrokenPipeError:  # `python sample.py run | head`: the reader left, not an error
        sys.stderr.close()
        sys.exit(0)
    except KeyboardInterrupt as e:
        _fail("interrupted" if speaks_for_the_run() else None, 128 + e.signum if isinstance(e, Terminated) else 130)
    except OSError as e:
        if e.errno not in ENVIRONMENT_ERRNOS:
            raise
        _fail(f"error: {environment_error(e)}{output_culprit(e)}", 2)
    except MemoryError:
        _fail("error: out of memory; use a smaller model, batch or dataset", 2)
    except RuntimeError as e:
        if not out_of_memory(e):
            raise
        if CPU_ALLOCATOR_REFUSED in str(e):
            _fail("error: out of memory (an allocation was refused: the machine's memory, a container's limit or "
                  "ulimit -v); use a smaller model, batch or dataset", 2)
        _fail(f"error: out of device memory ({reason(e, MAX_VALUE)}); use a smaller model or batch", 2)
    finally:
        if argv is None:  # the command itself: its work is done or refused, and its exit code says which
            end_quietly(sys.exc_info()[1])
        else:
            restore_signals(previous)  # (for a caller in the same process: the tests)
    sys.exit(0)


def flush_stdout() -> None:
    """Write out what standard output still buffers (none: closed, or no stdout at all)."""
    if sys.stdout is not None and not sys.stdout.closed:
        sys.stdout.flush()


STOPPED_FLUSH_S = 2.0  # after a stop signal, how long the output still buffered may wait for its reader


def end_quietly(exiting: BaseException | None) -> None:
    """The end of a command whose work is done or refused (`exiting`: the SystemExit on its way out,
    None after success, another exception for a bug): a stop signal no longer changes its exit code.
    A SIGTERM while Python shut down (torch's teardown takes tenths of a second) killed it silently:
    exit 143 after a whole export, which a script took for a failed one. 1. Output a refusal left
    unwritten is written while a stop signal still ends the command, with the refusal's code; 2. then
    stop signals are ignored: nothing is left that could wait (SIG_IGN, which Python's shutdown keeps,
    where it sets a handler of its own back to the default). A command a signal stopped (exit code
    128 + n) gives its reader STOPPED_FLUSH_S to take the rest: on a full pipe nobody reads, the
    signal that was meant to stop it would otherwise leave it waiting for a second one."""
    code = exiting.code if isinstance(exiting, SystemExit) else 1 if exiting is not None else 0
    code = code if isinstance(code, int) else 1  # (a SystemExit's message, or None)

    def exit_now(signum, frame):
        os._exit(code)

    handle_signals(exit_now)
    stopped = code >= 128 and threading.current_thread() is threading.main_thread()
    if stopped:
        handle_signals(exit_now, [signal.SIGALRM])
        signal.setitimer(signal.ITIMER_REAL, STOPPED_FLUSH_S)
    try:
        flush_stdout()
    except (OSError, ValueError):  # the reader left, the disk is full: the exit code tells already
        with_stdout_discarded()
    if stopped:
        signal.setitimer(signal.ITIMER_REAL, 0)
    handle_signals(signal.SIG_IGN)


def with_stdout_discarded() -> None:
    """Point standard output at /dev/null: what it still buffers goes nowhere at exit, without a
    second error ('Exception ignored ... BrokenPipeError')."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def _bytes_back_or_escape(e: UnicodeError) -> tuple[bytes, int]:
    """An encoding error handler: surrogateescape's for the bytes of a name that is not UTF-8 (written
    back as they were), backslashreplace's for any other character the encoding lacks."""
    if not isinstance(e, UnicodeEncodeError):
        raise e
    return b"".join(bytes([ord(ch) - 0xDC00]) if "\udc80" <= ch <= "\udcff" else ch.encode("ascii", "backslashreplace")
                    for ch in e.object[e.start:e.end]), e.end


codecs.register_error("tinygpt_bytes_or_escape", _bytes_back_or_escape)


def print_anything() -> None:
    """Let stdout print what its encoding cannot hold as an escape (\\u2423, \\udcff), as Python's
    stderr does, instead of ending the command in a UnicodeEncodeError: a table's '␣' on an
    ASCII or Latin-1 terminal (PYTHONIOENCODING=ascii, a Windows console), a file name that is
    not UTF-8 in a UTF-8 locale. In the C locale without UTF-8 mode (LC_ALL=C PYTHONUTF8=0) stdout
    is surrogateescape, which writes a file name's bytes back but fails on any other character (a
    sample's text): there the name's bytes still go out as they were, the rest escaped."""
    for stream in (sys.stdout, sys.stderr):
        errors = getattr(stream, "errors", None)
        if errors in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace" if errors == "strict" else "tinygpt_bytes_or_escape")
            except (ValueError, OSError):  # closed, or not reconfigurable after all
                pass


def handle_signals(handler: Callable[..., Any], signals: Sequence[int] = STOP_SIGNALS) -> dict[int, Any]:
    """Install `handler` for each of `signals` this process does not ignore; returns the handlers
    replaced (for restore_signals). One it inherited ignored stays ignored: `nohup` ignores SIGHUP so
    that a run outlives the terminal, and a shell script's background job (`cmd &`) ignores SIGINT so
    that a Ctrl-C meant for the script does not reach it. Outside the main thread, where Python
    cannot set handlers, nothing."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, handler) for s in signals if signal.getsignal(s) is not signal.SIG_IGN}


def restore_signals(previous: dict[int, Any]) -> None:
    """Put back the handlers handle_signals replaced."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def stop_on_signals() -> dict[int, Any]:
    """From now on SIGTERM (kill, a job scheduler) and SIGHUP (a terminal that hung up) stop this
    process as Ctrl-C (KeyboardInterrupt) does, cleanups and the one line `interrupted` included, but
    with the signal's exit code, 128 + its number (143, 129): run_cli does this for every command.
    (Without it, Python dies at once, silently, leaving its temp files and locks.) train.py's loop
    and sweep.py's runs handle these signals themselves meanwhile (runtime.StopFlag, sweep.Runner).
    Returns the handlers replaced."""
    def raise_terminated(signum, frame) -> None:
        if not _stopping:
            raise Terminated(signum)
    # Ctrl-C raises KeyboardInterrupt again (stop_while_starting replaced that while the command started)
    previous = handle_signals(signal.default_int_handler, [signal.SIGINT])
    return {**previous, **handle_signals(raise_terminated, [s for s in STOP_SIGNALS if s != signal.SIGINT])}


TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # what torchrun sets in each worker


def torchrun_rank() -> int | None:
    """This process's rank where torchrun (or a launcher of its protocol) started it, else None. A
    RANK alone, left in the user's shell by another tool, is no launch (it made train.py end in
    torch.distributed's traceback, "WORLD_SIZE expected")."""
    if not all(name in os.environ for name in TORCHRUN_ENV):
        return None
    try:
        return int(os.environ["RANK"])
    except ValueError:
        return None


def speaks_for_the_run() -> bool:
    """Does this process say `interrupted`? Under torchrun only rank 0 does, as it prints the rest:
    torchrun stops every worker with SIGTERM once one has exited (a refusal of a --set value,
    while the others still import torch) and passes a Ctrl-C on, so each of them said
    `interrupted`, about a stop the user never asked for. Its own errors each rank still says."""
    return torchrun_rank() in (None, 0)


PEER_GRACE_S = 5.0


def after_peers_refused() -> None:
    """A torchrun worker other than rank 0 refusing a setting waits PEER_GRACE_S seconds before it
    says so: every worker reads the same config and refuses it alike, and the first to exit makes
    torchrun stop the others with SIGTERM. Where rank 1 was first, rank 0 then said `interrupted`
    after the refusal, of a stop the user never asked for; now rank 0's refusal comes first, and a
    worker stopped while it waits exits silently. A refusal of its own (a file missing on its machine)
    it still says, after the wait."""
    try:
        threading.Event().wait(PEER_GRACE_S)
    except KeyboardInterrupt as e:  # torchrun's SIGTERM (Terminated), or a Ctrl-C passed on
        _fail(None, 128 + e.signum if isinstance(e, Terminated) else 130)


def stopping_on_a_signal() -> None:
    """This process stops on a signal it was sent (train.py, once its loop has saved): from now on
    SIGTERM and SIGHUP are duplicates, ignored, and the one line `interrupted` is said once. Under
    torchrun one comes on the way out: a worker that stops on a signal exits with 128 + its number,
    and torchrun sends SIGTERM to the workers still running (as it does after passing a Ctrl-C on);
    rank 0 said `interrupted` twice, or stopped inside its clean-up."""
    global _stopping
    _stopping = True


def stop_while_starting() -> None:
    """For a command's first lines, before its imports: until run_cli takes over, Ctrl-C, SIGTERM
    and SIGHUP end the process at once with the one line `interrupted` and 128 + the signal's number,
    instead of a traceback from inside torch's import (a second or two in which nothing has been
    written yet, so nothing needs cleaning up). Also gives a closed standard stream os.devnull."""
    open_closed_streams()

    def stop_now(signum, frame) -> None:
        if _stopping:  # (back after run_cli, on the way out)
            return
        try:
            if speaks_for_the_run():
                os.write(2, b"interrupted\n")
        except OSError:  # stderr gone (a terminal that hung up): the exit code still tells
            pass
        os._exit(128 + signum)
    handle_signals(stop_now)


def open_closed_streams() -> None:
    """A command started with stdin, stdout or stderr closed (`>&-`, `<&-`): Python sets the stream
    to None, so its first print ended in a traceback, and the next file opened would take the
    stream's number. Each closed one reads from or writes to os.devnull instead, as with
    `</dev/null` or `>/dev/null`; and so does one opened the other way (`0>FILE`, `1<FILE`), whose
    every read or write failed (EBADF, a traceback)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        wrong_way = opened_the_other_way(fd, mode)
        if getattr(sys, name) is not None and not wrong_way:
            continue
        if wrong_way or not is_open(fd):  # (a closed one may be open after all: Python just did not take it)
            null = os.open(os.devnull, os.O_RDWR)  # fd itself where it is closed (the lowest free number)
            if null != fd:
                os.dup2(null, fd)  # replaces what fd was (a file opened the other way)
                os.close(null)
        setattr(sys, name, open(fd, mode, closefd=False))


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def opened_the_other_way(fd: int, mode: str) -> bool:
    """Is fd open for writing only where it is read (mode "r"), or for reading only where written?"""
    if fcntl is None:  # pragma: no cover - Windows
        return False
    try:
        access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:  # closed
        return False
    return access == (os.O_WRONLY if mode == "r" else os.O_RDONLY)


class ReaderMayLeave:
    """sys.stdout or sys.stderr for a command whose work is its files, not its output (train.py,
    sweep.py, sample.py writing attention pages): when the reader leaves (`train.py | head`, a
    `tee` that died, a terminal that hung up), a write would raise BrokenPipeError (or EIO) and end
    the work early, as would a log file on a full disk (`train.py > log.txt`, ENOSPC) while the run
    directory lies on another. This drops the output instead (its file descriptor now points at
    os.devnull, so buffered text and later writes vanish) and the work goes on; a lost stdout is
    said once on stderr, and `left` tells what must still be read to go to stderr. (When the output
    is the work, `sample.py | head` ends there, exit 0, and a full disk is an error; see run_cli.)"""

    def __init__(self, stream, name: str, full_disk_too: bool = True) -> None:
        self.stream, self.name = stream, name
        self.full_disk_too = full_disk_too  # False where the output is the work (sample.py's text)
        self.left = False  # the reader left: what must still be read goes to stderr

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as e:
            why = self._gone(e)
            if why is None:
                raise
            self._drop(why)
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as e:
            why = self._gone(e)
            if why is None:
                raise
            self._drop(why)

    def _gone(self, e: OSError) -> str | None:
        """Why the output takes no more: a broken pipe or EIO from a terminal that hung up (SSH
        dropped) mean its reader left; ENOSPC, EDQUOT or EFBIG that its file's disk is full.
        None for any other error."""
        if isinstance(e, BrokenPipeError) or e.errno == errno.EIO:
            return "was closed (its reader left)"
        if self.full_disk_too and e.errno in FULL_DISK:
            return f"cannot be written ({os.strerror(e.errno)})"
        return None

    def _drop(self, why: str) -> None:
        self.left = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)
        if self.name == "stdout":  # (stderr's own loss cannot be told; a run stopping on a signal goes on no more)
            print(f"warning: stdout {why}" + "; going on without printing there" * (not _stopping), file=sys.stderr)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, ...: the stream's own
        return getattr(self.stream, name)


def work_is_files() -> None:
    """For a command whose work is its files (train.py, sweep.py, export.py, bench.py --json): stdout and stderr
    become ReaderMayLeave, so that a reader who leaves or a log on a full disk ends no work."""
    sys.stdout, sys.stderr = ReaderMayLeave(sys.stdout, "stdout"), ReaderMayLeave(sys.stderr, "stderr")


def _fail(line: str | None, code: int) -> None:
    try:
        if line is not None:
            print(error_line(line), file=sys.stderr)
    except OSError:  # stderr gone (a terminal that hung up, a closed pipe): the exit code still tells
        pass
    sys.exit(code)


def clean_up(step: Callable[[], object], failing: bool) -> None:
    """A clean-up step on the way out (a `finally`): while an error is on its way out (`failing`), a
    refusal of the clean-up itself (the same full disk, say) must not replace it: it is dropped."""
    try:
        step()
    except UserError:
        if not failing:
            raise


def read_capped(path: str | Path, limit: int, too_big: Callable[[int | None], str],
                cannot_read: Callable[[str], str] | None = None) -> bytes:
    """The bytes of `path` (a file, or a pipe or a device: never read whole), at most `limit` of them;
    else a UserError: too_big(the size; None for a pipe read past the limit), or cannot_read(the
    system's reason; default `cannot read PATH: reason`). A regular file over the limit is refused by
    its size, unread."""
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise UserError(too_big(info.st_size))
            data = f.read(limit + 1)
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise UserError(cannot_read(why) if cannot_read else f"cannot read {path}: {why}") from None
    if len(data) > limit:
        raise UserError(too_big(None))
    return data


def path_arg(text: str) -> Path:
    """argparse's type for a path argument: an empty one is refused (Path("") is ".", the current
    folder, which nobody means by an empty argument: an unset $RUN), and a leading ~ is the home
    folder (the shell leaves it in `--flag=~/x`: a folder named ~ was made)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file or folder; name one (. for the current folder)")
    return Path(os.path.expanduser(text))


def new_folder_arg(text: str) -> Path:
    """path_arg for a folder that an output replaces whole (export.py's OUT): its hint for an empty
    one names a new folder, not the current one, which the output cannot replace."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no folder; name a new one (the output takes its "
                                         "place whole)")
    return path_arg(text)


def folder_ending(text: str) -> str | None:
    """Why the path `text` names a folder by how it ends (/, /. or /..: Path drops the first two, and
    a file was written under the folder's name), or None."""
    if text.endswith("/"):
        return f"{text} ends in '/', which names a folder"
    if text.endswith(("/.", "/..")):  # (`.` and `..` alone are folders that exist: said as such)
        return f"{text} ends in '{text.rpartition('/')[2]}', which names a folder"
    return None


def file_arg(text: str) -> Path:
    """argparse's type for a file to write: path_arg's, but a path that names a folder by how it
    ends (folder_ending) is refused before any work."""
    if (why := folder_ending(text)) is not None:
        raise argparse.ArgumentTypeError(f"{why}; give a file name")
    return path_arg(text)


def unseen(text: str) -> bool:
    """Does `text` hold a control or invisible character (Unicode's C* categories: a line break, a
    direction mark, a byte of a name that is not UTF-8)?"""
    return any(unicodedata.category(c).startswith("C") for c in text)


def shell_quote(word: str | Path) -> str:
    """shlex.quote, but a word holding a control or invisible character (a line break in a file
    name, a byte that is not UTF-8) in bash's $'...' form with that character escaped: a command in
    a message stays on one line and pastes as it is."""
    text = str(word)
    if not unseen(text):
        return shlex.quote(text)
    return "$'" + "".join("\\" + c if c in "\\'" else escaped(c) for c in text) + "'"


def escaped(c: str) -> str:
    """One character as bash's $'...' writes it: a control or invisible one (unseen) as its escape
    (\\n, \\x1b, \\u200f; a byte of a name that is not UTF-8 as \\xNN), any other as it is."""
    if "\ud800" <= c <= "\udfff":  # a byte of a name that is not UTF-8, as Python holds it
        return "".join(f"\\x{b:02x}" for b in os.fsencode(c))
    if not unseen(c):
        return c
    return ({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c) or
            (f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"))


def one_line(text: str) -> str:
    """`text` with each control or invisible character escaped (escaped): an error naming a file whose
    name holds a line break stays one line, whichever message names it."""
    return "".join(escaped(c) for c in text) if unseen(text) else text


def error_line(text: str) -> str:
    """An error as printed: one line whatever path or value it quotes (one_line), of at most MAX_LINE
    characters (capped)."""
    return capped(one_line(text))


def capped(line: str, limit: int = MAX_LINE) -> str:
    """`line` if at most `limit` characters, else its start and its end around ' ... ': the culprit comes
    first and the fix last, and a value quoted whole (a 5,000-character flag) must not fill the screen."""
    if len(line) <= limit:
        return line
    head = limit * 2 // 3
    return line[:head] + " ... " + line[len(line) - (limit - head - 5):]


def dead_link(path: Path) -> str | None:
    """'a link (PATH -> TARGET) that leads to no file or folder', or '... that runs into a loop of links',
    where `path` is such a link, else None: for messages, which would otherwise say it does not exist."""
    if not path.is_symlink() or path.exists():
        return None
    leads = "runs into a loop of links" if link_loop(path) else "leads to no file or folder"
    return f"a link ({path} -> {os.readlink(path)}) that {leads}"


def link_loop(path: Path) -> bool:
    """Does `path` run into a loop of links (a link that leads back to itself)?"""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def path_limit(folder: Path, name: str) -> int | None:
    """os.pathconf's `name` (PC_NAME_MAX, PC_PATH_MAX) for `folder`, or its nearest existing parent; None
    where it cannot be asked (no pathconf on Windows)."""
    while not os.path.exists(folder) and folder != folder.parent:  # (os.path's: False for a name too long)
        folder = folder.parent
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError, AttributeError):
        return None


def name_max(folder: Path) -> int:
    """The longest file name, in bytes, that `folder` (or its nearest existing parent) takes: 255
    on most file systems."""
    return path_limit(folder, "PC_NAME_MAX") or 255


def check_path_length(path: Path, named: str, cannot: str = "cannot be created") -> None:
    """Refuse a path with a part longer than a file name may be where it would go (255 bytes on most file systems),
    or longer as a whole than a path may be, in words naming the setting (`named`; `cannot`: what that rules out):
    it was `File name too long: PATH`, and only where the file system was asked (not under a folder still to be
    made)."""
    longest = max(path.parts, key=lambda part: len(os.fsencode(part)), default="")
    if len(os.fsencode(longest)) > name_max(path):
        raise UserError(f"{named} {cannot}: its part {short(longest)} is {len(os.fsencode(longest))} "
                        f"bytes, longer than a file name may be")
    path_max = path_limit(path.absolute(), "PC_PATH_MAX")
    if path_max is not None and len(os.fsencode(str(path.absolute()))) >= path_max:
        raise UserError(f"{named} {cannot}: it is {len(os.fsencode(str(path.absolute()))):,} bytes long, "
                        f"longer than a path may be ({path_max - 1:,})")


def shown_path(path: str | Path) -> str:
    """A path in a line of output: as it is, unless it holds a control or invisible character (a line
    break would split the line), then as shell_quote writes it."""
    text = str(path)
    return shell_quote(text) if unseen(text) else text


def shell_join(words: Sequence[str | Path]) -> str:
    """shlex.join with shell_quote: a command for the user to paste, on one line."""
    return " ".join(shell_quote(w) for w in words)


def stderr_is_terminal() -> bool:
    """Is standard error a terminal? Progress bars draw there only: in a log file (`2> log`) a bar's
    redraws pile up as one line of \r-joined copies."""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def path_word(path: str | Path) -> str:
    """A path as a command's argument in a hint: one that starts with '-' gets './', which a
    command line would read as a flag."""
    text = str(path)
    return f"./{text}" if text.startswith("-") else text


def script_word(name: str) -> str:
    """The repository's command `name` (sample.py) as typed from the current folder, for a hint the
    user pastes: `sample.py` from the repository root, else its path (relative below the current
    folder, absolute elsewhere)."""
    script = Path(__file__).resolve().parents[1] / name
    try:
        relative = os.path.relpath(script)
    except (ValueError, OSError):  # another drive (Windows); the current folder deleted meanwhile
        return path_word(script)
    above = relative == os.pardir or relative.startswith(os.pardir + os.sep)
    return path_word(script if above else relative)


class ArgParser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UserError: one line, exit code 2, no usage dump."""

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):  # type: ignore[override]
        self.words = list(sys.argv[1:] if args is None else args)
        return super().parse_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        words = getattr(self, "words", [])
        missing = message.partition(": ")[2].split(", ") if "arguments are required" in message else []
        set_at = next((i for i, w in enumerate(words) if w.startswith("--set")), len(words))
        # `export.py RUN -dash`, `train.py -dash.yaml --set ...`: a positional that starts with '-' (before
        # --set's list, which takes any word) is read as an unknown flag
        dashed = [w for w in words[:set_at] if w.startswith("-") and not w.startswith("--") and w != "-"
                  and w not in self._option_string_actions]
        if "arguments are required" in message and dashed:
            message += (f"; {elide(shell_quote(dashed[0]), 60)} reads as a flag: a path that starts with '-' is "
                        f"written {elide(shell_quote('./' + dashed[0]), 60)}")
        elif any(not name.startswith("-") for name in missing) and set_at < len(words):
            # `train.py --set a=1 CONFIG`: --set takes every word after it, the config too
            message += ("; --set takes every word after it, the config too: give the config first, "
                        "CONFIG --set KEY=VALUE ...")
        if message.startswith("unrecognized arguments: ") and "--set" in self._option_string_actions and any(
                "=" in w and "." in w.partition("=")[0] and not w.startswith("-")
                for w in message.removeprefix("unrecognized arguments: ").split()):
            # `train.py C --set a.b=1 --stop-at 5 c.d=2`: --set's list ended at --stop-at
            message += "; a KEY=VALUE belongs to --set's list, which ends at the next flag: write --set again before it"
        if message.endswith(": expected one argument"):  # `--prompt -x`: argparse reads -x as a flag
            flags = [f for f in message.removeprefix("argument ").split(":")[0].split("/") if f in words[:-1]]
            after = words[words.index(flags[0]) + 1] if flags else ""
            if after.startswith("-") and after != "-":
                message += f"; a value that starts with '-' is written {elide(shell_quote(f'{flags[0]}={after}'), 60)}"
        raise UserError(f"{message} (see {self.prog} --help)")

    def _print_message(self, message: str, file=None) -> None:
        """argparse's, without dropping a failed write: `--help > /dev/full` exited 0 without a word, its whole
        output lost (run_cli now names the full disk; a reader that left, `--help | head -1`, ends quietly)."""
        file = file or sys.stderr
        if message and file is not None:
            file.write(message)
            file.flush()

    def print_help(self, file=None) -> None:
        """The help, once: under torchrun by rank 0 alone (every process printed it, one copy after another)."""
        if torchrun_rank() in (None, 0):
            super().print_help(file)

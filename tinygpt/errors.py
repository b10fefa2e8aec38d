"""User errors and the command-line wrapper that turns them into one line and an exit code.

Every entry point (train.py, sample.py, data/prepare.py, ...) calls `run_cli(main, argv)`:
- a `UserError` (bad config, bad flag, missing file, ...) prints `error: <message>`, exit 2;
- the machine refusing (disk full, permission denied, read-only file system, out of memory)
  prints one `error: ...` line too, exit 2: nothing half-written is left, every write is atomic;
- Ctrl-C prints `interrupted`, exit 130 (train.py saves its checkpoint at the first Ctrl-C itself);
- anything else is a bug and keeps its traceback (exit 1).
The lines go to stderr. Values quoted in messages are cut by `short`, so that a huge value (a YAML
alias bomb, a damaged checkpoint) never makes a huge message.
"""
from __future__ import annotations

import argparse
import errno
import reprlib
import sys
from typing import Any, Callable, Sequence

# OSErrors that mean "the machine refuses", not "tinygpt has a bug" (a FileNotFoundError can be a bug)
ENVIRONMENT_ERRNOS = {getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "ENAMETOOLONG",
                                                     "ENOTDIR", "EISDIR", "ELOOP", "EMFILE") if hasattr(errno, name)}
MAX_VALUE = 80  # characters of a value quoted in a message

_repr = reprlib.Repr()  # bounded work as well as bounded text: a few items per level, a few levels
_repr.maxlevel, _repr.maxlist, _repr.maxtuple, _repr.maxdict, _repr.maxset = 3, 4, 4, 4, 4
_repr.maxstring, _repr.maxother, _repr.maxlong = MAX_VALUE, MAX_VALUE, 40


class UserError(Exception):
    """A mistake the user can fix: the message names the culprit (key, file, value) and the fix."""


def short(value: Any, limit: int = MAX_VALUE) -> str:
    """repr(value) for a message, at most `limit` characters: nested or long values are elided
    with '...' without ever being expanded whole."""
    text = _repr.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def environment_error(e: OSError) -> str:
    """One line for an OSError the machine raised: what, and on which file."""
    where = f": {e.filename}" if e.filename is not None else ""
    return f"{e.strerror or type(e).__name__}{where}"


def run_cli(main: Callable[[Sequence[str] | None], object], argv: Sequence[str] | None = None) -> None:
    """Run `main(argv)` and exit: 0 on success, one line on stderr and 2 for a user's (or the
    machine's) refusal, 130 after Ctrl-C; see the module doc."""
    try:
        main(argv)
    except UserError as e:
        _fail(f"error: {e}", 2)
    except BrokenPipeError:  # `python sample.py run | head`: the reader left, not an error
        sys.stderr.close()
        sys.exit(0)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except OSError as e:
        if e.errno not in ENVIRONMENT_ERRNOS:
            raise
        _fail(f"error: {environment_error(e)}", 2)
    except MemoryError:
        _fail("error: out of memory; use a smaller model, batch or dataset", 2)
    except RuntimeError as e:
        if type(e).__name__ != "OutOfMemoryError":  # torch's (CUDA) out-of-memory error
            raise
        _fail(f"error: out of device memory ({str(e).splitlines()[0][:MAX_VALUE]}...); use a smaller model or "
              f"batch", 2)
    sys.exit(0)


def _fail(line: str, code: int) -> None:
    print(line, file=sys.stderr)
    sys.exit(code)


class ArgParser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UserError: one line, exit code 2, no usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see {self.prog} --help)")

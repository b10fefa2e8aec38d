"""User errors and the command-line wrapper that turns them into one line and exit code 2.

Every entry point (train.py, sample.py, data/prepare.py, ...) calls `run_cli(main, argv)`:
a `UserError` (bad config, bad flag, missing file, ...) prints `error: <message>` on stderr and
exits 2; anything else is a bug and keeps its traceback (exit 1).
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence


class UserError(Exception):
    """A mistake the user can fix: the message names the culprit (key, file, value) and the fix."""


def run_cli(main: Callable[[Sequence[str] | None], object], argv: Sequence[str] | None = None) -> None:
    """Run `main(argv)` and exit: 0 on success, 2 with one line on stderr for a UserError."""
    try:
        main(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # `python sample.py run | head`: the reader left, not an error
        sys.stderr.close()
        sys.exit(0)
    sys.exit(0)


class ArgParser(argparse.ArgumentParser):
    """argparse, but a bad flag is a UserError: one line, exit code 2, no usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see {self.prog} --help)")

"""Reproduce the documented headline numbers (docs/results.md): train, time and measure a shipped config.

Each trains the config through the real CLI, times it, and measures what the README claims about
the result.

    python -m scripts.reproduce stories [--out-dir DIR]        # default config: time, then % real words
    python -m scripts.reproduce shakespeare --text FILE [--config configs/shakespeare_char.yaml]

(run from the repository root)

`stories`: trains configs/stories.yaml, samples 2,000 words with sample.py and reports the share of
them that occur in the training corpus. `shakespeare`: trains a shakespeare config on a local copy of
tiny shakespeare and reports the best val loss, and the whole val split's, in float32 and with the
int8 weights of sample.py --dtype int8. Both print one JSON line at the end.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

if __name__ == "__main__":  # before torch loads (the imports below): a Ctrl-C then is `interrupted`, not a traceback
    if not __package__:  # run as a file (python scripts/reproduce.py): tinygpt, a folder up, cannot be imported
        print("error: run it from the repository root as python -m scripts.reproduce", file=sys.stderr)
        sys.exit(2)
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

from data.prepare import is_tiny_shakespeare
from tinygpt.checkpoint import check_writable, file_head
from tinygpt.config import load_config, set_key, set_word
from tinygpt.errors import ArgParser, UserError, elide, path_arg, read_capped, run_cli
from tinygpt.runs import TRAIN_FILES
from tinygpt.runtime import run_child

ROOT = Path(__file__).resolve().parents[1]

WORD = re.compile(r"[A-Za-z]+")
SAMPLES = 10  # sample.py runs for 2,000 words: a model that writes words needs 2; one that never does, forever


def child_error_line(stderr: str | bytes) -> str:
    """A failed command's own one line (its last on stderr, `error: ` dropped), for ours."""
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    lines = [line for line in text.splitlines() if line.strip()]
    return elide(lines[-1].removeprefix("error: "), 300) if lines else "no message"


SAVED_BYTES = 4 << 20  # a saved output is a few KB; /dev/zero would be read forever


def is_figure(value, low: float = -1e12, high: float = 1e12) -> bool:
    """A number a table can print and average: not a bool, not NaN, within [low, high] (one over
    1e308 would overflow a mean)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and low <= value <= high


def saved_json(path: str | Path, named: str, what: str, limit: int = SAVED_BYTES):
    """The JSON of the last line of a saved output (a command's stdout, kept in a file), read up to
    `limit` bytes; a UserError naming it (`named`) otherwise, whose `what` wrote it. The caller
    checks what the JSON holds (is_figure)."""
    data = read_capped(path, limit, lambda size: f"{named} is over {limit:,} bytes; give the saved output of {what}",
                       lambda why: f"{named}: cannot read it ({why})")
    try:
        lines = data.decode("utf-8").strip().splitlines()
        return json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or JSON nested thousands deep
        return None


def run(args: list[str], cwd: Path = ROOT) -> tuple[float, str]:
    """Run a repo script with this Python from the repo root (or cwd); return (seconds, stdout).
    A failure is a UserError with the script's own error line (exit 2), not a traceback."""
    t0 = time.perf_counter()
    done = run_child([sys.executable, *args], cwd)  # stopped, a training of ours saves its checkpoint
    if done.returncode != 0:
        where = "" if cwd == ROOT else f" in {cwd}"
        raise UserError(f"{elide(' '.join(args))} failed{where} (exit {done.returncode}): "
                        f"{child_error_line(done.stderr)}")
    return time.perf_counter() - t0, done.stdout


def from_metrics(run_dir: Path) -> dict:
    """The run's best val loss, and the training loop's wall time (evals included, start-up
    excluded: the last elapsed_s), from its metrics.csv."""
    from tinygpt.runs import best_val_loss, read_metrics
    rows = read_metrics(run_dir)
    return {"train_seconds": rows[-1]["elapsed_s"], "best_val_loss": best_val_loss(rows)}


def check_own_output(path: Path, mark: str, flag: str) -> None:
    """Refuse, before any work, a file at `path` (where a script writes an output) that the script did
    not write: one whose first 4 KiB lack `mark` (a user's notes of that name), or no regular file."""
    if not (path.exists() or path.is_symlink()):
        return
    head = file_head(path)
    if head is None or mark.encode() not in head:
        raise UserError(f"{flag}: it would overwrite {path}, which this script did not write (a file of yours?); "
                        f"move it away, or choose another {flag}")


def check_fresh(folder: Path, flag: str, value: Path, marks: Sequence[str] = TRAIN_FILES) -> None:
    """Refuse a folder where an earlier run of the script left files (a rerun, or a run that was
    stopped): its figures are a fresh run's, timed from the start, so it neither resumes nor mixes
    with the old one; and train.py's own refusal would advise --resume or --set train.out_dir,
    which the scripts do not take. `flag` `value` is the folder's flag, as the user gave it. A folder
    holding none of `marks` (the files or folders the script makes there) is not called an earlier
    run's, to delete: `--out-dir /` was told to delete the system's /run."""
    try:
        empty = folder.is_dir() and not any(folder.iterdir())
    except OSError:  # unreadable: train.py would fail on it too
        empty = False
    if not (folder.exists() or folder.is_symlink()) or empty:
        return
    if not folder.is_dir() or not any((folder / name).exists() for name in marks):
        raise UserError(f"{flag} {value} already holds {folder}, which this script did not make (a folder or file of "
                        f"yours?); choose another {flag}")
    raise UserError(f"{flag} {value} already holds {folder}, an earlier run's: the figures are of a fresh run; "
                    f"choose another {flag}, or delete or move {folder}")


def stories(out_dir: Path, extra: list[str]) -> dict:
    from data.stories import generate_stories

    seconds, _ = run(["train.py", "configs/stories.yaml", "--quiet", "--set", set_word("train.out_dir", str(out_dir)),
                      *extra])
    words: list[str] = []
    for seed in range(SAMPLES):  # 2,000 words from as many samples as it takes, up to SAMPLES
        _, text = run(["sample.py", str(out_dir), "--max-new-tokens", "2000", "--seed", str(seed)])
        words += WORD.findall(text)
        if len(words) >= 2000:
            break
    else:
        raise UserError(f"the model of {out_dir} wrote {len(words)} words in {SAMPLES} samples of 2,000 tokens "
                        "(sample.py), not the 2,000 to measure: it has not learned to write words")
    words = words[:2000]
    cfg = load_config(ROOT / "configs/stories.yaml", extra)
    corpus = set(WORD.findall(generate_stories(cfg.data.stories_chars, cfg.data.stories_seed)[0]))
    known = sum(w in corpus for w in words)
    return {"config": "configs/stories.yaml", "seconds_with_startup": round(seconds, 1), **from_metrics(out_dir),
            "sampled_words": len(words),
            "share_in_corpus": known / len(words),
            "unknown_examples": sorted({w for w in words if w not in corpus})[:20]}


def whole_val_losses(run_dir: Path) -> dict:
    """Mean next-token loss of the best checkpoint over the whole validation split, in consecutive
    windows of block_size tokens (every token scored once): in float32, and with the weights of
    sample.py --dtype int8 (or why they cannot run it)."""
    import numpy as np
    import torch

    from tinygpt.checkpoint import load_model
    from tinygpt.runtime import int8_problem, int8_weights
    from data.prepare import load_prepared, prepared_dir
    from model import cross_entropy

    model, cfg, _, _ = load_model(run_dir, "cpu")
    folder = prepared_dir(cfg.data)
    val = load_prepared(folder if folder.is_absolute() else ROOT / folder).val
    T = cfg.model.block_size
    n = (len(val) - 1) // T
    x = torch.from_numpy(np.asarray(val[:n * T], dtype=np.int64)).view(n, T)
    y = torch.from_numpy(np.asarray(val[1:n * T + 1], dtype=np.int64)).view(n, T)

    @torch.no_grad()
    def loss(m: torch.nn.Module) -> float:
        losses = [cross_entropy(m(x[i:i + 64]), y[i:i + 64]) * len(x[i:i + 64]) for i in range(0, n, 64)]
        return round(float(sum(losses) / n), 4)
    result = {"whole_val_split_loss": loss(model)}
    if why_not := int8_problem(cfg.model, torch.device("cpu")):
        return {**result, "int8": why_not}
    return {**result, "whole_val_split_loss_int8": loss(int8_weights(model))}


def shakespeare(out_dir: Path, text: Path, config: str, extra: list[str]) -> dict:
    seconds, _ = run(["train.py", config, "--quiet", "--set", set_word("train.out_dir", str(out_dir)),
                      set_word("data.dataset", str(text)), *extra])
    return {"config": config, "seconds_with_startup": round(seconds, 1), **from_metrics(out_dir),
            **whole_val_losses(out_dir), "text_is_tiny_shakespeare": is_tiny_shakespeare(text)}


def main(argv: Sequence[str] | None = None) -> None:
    p = ArgParser(prog="python -m scripts.reproduce", description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["stories", "shakespeare"])
    p.add_argument("--out-dir", type=path_arg,
                   help="a new folder for the work: the run is trained into DIR/run (default: a fresh temp folder)")
    p.add_argument("--text", type=path_arg,
                   help="shakespeare: a local copy of tiny shakespeare (default: shared/data/tinyshakespeare.txt in the "
                        "folder that holds the repository)")
    p.add_argument("--config", help="shakespeare: the config to train (default: configs/shakespeare_char.yaml; "
                                    "stories always trains configs/stories.yaml)")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="override config keys, as train.py does (may be given more than once)")
    args = p.parse_args(argv)
    if args.what == "stories" and args.text is not None:  # (it was ignored, even a missing file)
        p.error(f"--text {args.text} is for shakespeare: stories trains on the generated stories of "
                f"configs/stories.yaml")
    args.text = args.text or ROOT.parent / "shared/data/tinyshakespeare.txt"
    if args.what == "stories" and args.config is not None:  # (it was ignored: the default run trained instead)
        p.error(f"--config {args.config} is for shakespeare: stories measures the default run, configs/stories.yaml "
                f"(change it with --set KEY=VALUE)")
    if args.config == "":  # (it trained the default config without a word)
        p.error("--config '' names no file: give a config, e.g. --config configs/shakespeare_char.yaml")
    args.config = args.config or "configs/shakespeare_char.yaml"
    if args.what == "shakespeare" and not args.text.is_file():
        p.error(f"no tiny shakespeare at {args.text}: give --text PATH/tinyshakespeare.txt")
    # the run folder is --out-dir/run: a train.out_dir of --set would train elsewhere, and the
    # metrics and samples be read from a folder with no run in it
    if any(set_key(s) == "train.out_dir" for s in args.set):
        p.error("--set train.out_dir=... is not taken: the run folder is --out-dir DIR (DIR/run)")
    # the figures are of the text the script names: stories measures its samples against the generated
    # stories, shakespeare trains on --text
    if any(set_key(s) == "data.dataset" for s in args.set):
        why = ("stories trains on and measures against the generated stories" if args.what == "stories" else
               "give the text with --text PATH")
        p.error(f"--set data.dataset=... is not taken: {why}")
    # what train.py would refuse, refused before the temp folder is made (it was left behind, empty)
    cfg = load_config(ROOT / ("configs/stories.yaml" if args.what == "stories" else args.config), args.set)
    if args.what == "shakespeare" and cfg.data.dataset != "shakespeare":  # (stories' BPE trained on shakespeare)
        p.error(f"--config {args.config} trains data.dataset={cfg.data.dataset}: shakespeare measures a config of "
                f"tiny shakespeare, e.g. configs/shakespeare_char.yaml")
    if args.out_dir is not None:
        check_writable(args.out_dir, "--out-dir")  # before the training, not after it
        check_fresh(args.out_dir.resolve() / "run", "--out-dir", args.out_dir)
    if args.what == "shakespeare" and not is_tiny_shakespeare(args.text):  # (figures of another text, said to
        # reproduce the speedrun's, exit 0)
        print(f"note: --text {args.text} is not tiny shakespeare (its size or sha256 differs): the figures are of "
              f"this text, not comparable with docs/results.md's", file=sys.stderr)
    out_dir = (args.out_dir or Path(tempfile.mkdtemp(prefix="tinygpt-"))).resolve() / "run"
    if args.out_dir is None:  # (a temp folder: say where the run is kept, to sample from or remove)
        print(f"the run: {out_dir}", file=sys.stderr, flush=True)
    try:
        if args.what == "stories":
            result = stories(out_dir, args.set)
        else:
            result = shakespeare(out_dir, args.text.resolve(), args.config, args.set)
    except BaseException:  # a refusal or a stop before the first checkpoint: nothing to sample from or resume,
        if args.out_dir is None and not (out_dir / "ckpt.pt").exists():  # and the temp folder stayed, empty
            shutil.rmtree(out_dir.parent, ignore_errors=True)
        raise
    result.update(run=str(out_dir), date=time.strftime("%Y-%m-%d"))
    print(json.dumps(result))


if __name__ == "__main__":
    run_cli(main)

"""Reproduce the documented headline numbers (docs/results.md): train, time and measure a shipped config.

Each trains the config through the real CLI, times it, and measures what the README claims about
the result.

    python -m scripts.reproduce stories [--out-dir DIR]        # default config: time, then % real words
    python -m scripts.reproduce shakespeare --text FILE [--config configs/shakespeare_char.yaml]

(run from the repository root)

`stories`: trains configs/stories.yaml, samples 2,000 words with sample.py and reports the share of
them that occur in the training corpus. `shakespeare`: trains a shakespeare config on a local copy of
tiny shakespeare and reports the best val loss. Both print one JSON line at the end.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORD = re.compile(r"[A-Za-z]+")


def run(args: list[str]) -> tuple[float, str]:
    """Run a repo script with this Python from the repo root; return (seconds, stdout)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - t0, done.stdout


def from_metrics(run_dir: Path) -> dict:
    """The run's best val loss, and the training loop's wall time (evals included, start-up
    excluded: the last elapsed_s), from its metrics.csv."""
    from tinygpt.runs import read_metrics
    rows = read_metrics(run_dir)
    return {"train_seconds": rows[-1]["elapsed_s"],
            "best_val_loss": min(r["val_loss"] for r in rows if r["val_loss"] is not None)}


def stories(out_dir: Path, extra: list[str]) -> dict:
    from tinygpt.config import load_config
    from data.stories import generate_stories

    seconds, _ = run(["train.py", "configs/stories.yaml", "--quiet", "--set", f"train.out_dir={out_dir}", *extra])
    words: list[str] = []
    seed = 0
    while len(words) < 2000:  # 2,000 words from as many samples as it takes
        _, text = run(["sample.py", str(out_dir), "--max-new-tokens", "2000", "--seed", str(seed)])
        words += WORD.findall(text)
        seed += 1
    words = words[:2000]
    cfg = load_config(ROOT / "configs/stories.yaml", extra)
    corpus = set(WORD.findall(generate_stories(cfg.data.stories_chars, cfg.data.stories_seed)[0]))
    known = sum(w in corpus for w in words)
    return {"config": "configs/stories.yaml", "seconds_with_startup": round(seconds, 1), **from_metrics(out_dir),
            "sampled_words": len(words),
            "share_in_corpus": known / len(words),
            "unknown_examples": sorted({w for w in words if w not in corpus})[:20]}


def whole_val_loss(run_dir: Path) -> float:
    """Mean next-token loss of the best checkpoint over the whole validation split, in consecutive
    windows of block_size tokens (every token scored once), in float32."""
    import numpy as np
    import torch

    from tinygpt.checkpoint import load_model
    from data.prepare import load_prepared, prepared_dir
    from model import cross_entropy

    model, cfg, _, _ = load_model(run_dir, "cpu")
    folder = prepared_dir(cfg.data)
    val = load_prepared(folder if folder.is_absolute() else ROOT / folder).val
    T = cfg.model.block_size
    n = (len(val) - 1) // T
    x = torch.from_numpy(np.asarray(val[:n * T], dtype=np.int64)).view(n, T)
    y = torch.from_numpy(np.asarray(val[1:n * T + 1], dtype=np.int64)).view(n, T)
    with torch.no_grad():
        losses = [cross_entropy(model(x[i:i + 64]), y[i:i + 64]) * len(x[i:i + 64]) for i in range(0, n, 64)]
    return float(sum(losses) / n)


def shakespeare(out_dir: Path, text: Path, config: str, extra: list[str]) -> dict:
    seconds, _ = run(["train.py", config, "--quiet", "--set", f"train.out_dir={out_dir}",
                      f"data.dataset={text}", *extra])
    return {"config": config, "seconds_with_startup": round(seconds, 1), **from_metrics(out_dir),
            "whole_val_split_loss": round(whole_val_loss(out_dir), 4)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["stories", "shakespeare"])
    p.add_argument("--out-dir", type=Path, help="run directory (default: a fresh temp folder)")
    p.add_argument("--text", type=Path, default=ROOT.parent / "shared/data/tinyshakespeare.txt",
                   help="shakespeare: a local copy of tiny shakespeare (default: %(default)s)")
    p.add_argument("--config", default="configs/shakespeare_char.yaml")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    if args.what == "shakespeare" and not args.text.is_file():
        p.error(f"no tiny shakespeare at {args.text}: give --text PATH/tinyshakespeare.txt")
    out_dir = (args.out_dir or Path(tempfile.mkdtemp(prefix="tinygpt-"))).resolve() / "run"
    if args.what == "stories":
        result = stories(out_dir, args.set)
    else:
        result = shakespeare(out_dir, args.text.resolve(), args.config, args.set)
    result["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

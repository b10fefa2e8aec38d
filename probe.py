"""Coreference probe: does the model resolve "she"/"he" to the right character, and which heads look?

    python probe.py RUN_DIR [--stories N] [--seed S] [--device D] [--ablate [L.H[,L.H...]]] [--force]

On held-out stories (a seed the training corpus did not use) it cuts each story where a pronoun's
attribute is due ("... Then she picked up her ▮"), decodes greedily and counts the antecedent's
attribute, the distractor's or something else; and for every layer and head it measures the weight
the predicting position puts on the antecedent's attribute mentions and name, beside the
distractor's (tinygpt/coreference.py explains each measure). `--ablate` also measures the accuracy
with each head's output removed (zero and mean ablation: tinygpt/ablation.py), a layer x head table
of the drop beside the attention, and the top two heads removed together; `--ablate 3.2,3.1`
removes the given heads together. It prints the tables and ends with one JSON line (its "step": the
checkpoint's; a run being trained now is probed as of that step, a note says so). A run not
trained on `stories` is refused (exit 2), as is one trained with model.causal=false (without --force,
as sample.py), and held-out stories that leave no reference to measure (their words outside the
vocabulary of a word-level run, say).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Sequence

if __name__ == "__main__":  # before the imports below load torch: a Ctrl-C then is `interrupted`, not a traceback
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

import torch

from data.prepare import stories_code_digest
from data.stories import REFERENCES_PER_STORY
from tinygpt.checkpoint import load_model, resolve_checkpoint
from tinygpt.ablation import looks_like_heads, parse_heads
from tinygpt.coreference import (HELD_OUT_OFFSET, MEAN_SEED_OFFSET, SEEDS, ablation, ablation_report, check_stories,
                                 held_out_seed, mean_ablation_cases, not_stories, probe, report)
from tinygpt.errors import ArgParser, UserError, count, path_arg, run_cli, short, shown_path
from tinygpt.runs import training_note
from tinygpt.runtime import ThreadPolicy, check_memory, resolve_device

EACH = "each"  # --ablate without a list: every head in turn
BYTES_PER_TOKEN = 40  # a window token held as a Python int in a list (pointer + int object)


def main(argv: Sequence[str] | None = None, out=None) -> dict:
    """Probe a run; print the tables and a final JSON line; return the figures."""
    out = out or sys.stdout
    p = ProbeParser(prog="probe.py", description="Coreference probe of a run trained on the stories corpus.")
    p.add_argument("run", type=path_arg, help="run directory (uses best.pt, else ckpt.pt) or a checkpoint file")
    p.add_argument("--stories", type=int, default=100, help="held-out stories to generate (about 11 references each; default: 100)")
    p.add_argument("--seed", type=int, default=None,
                   help=f"seed of the held-out stories (default: the run's data.stories_seed + {HELD_OUT_OFFSET})")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    p.add_argument("--ablate", nargs="?", const=EACH, default=None, metavar="L.H[,L.H...]",
                   help="also measure the accuracy with heads removed (zero and mean ablation): alone, every "
                        "head in turn; with a list (layer.head, from 0), those heads together")
    p.add_argument("--force", action="store_true", help="probe even a model trained without the causal mask")
    args = p.parse_args(argv)
    check_stories(args.stories, "--stories")
    if args.seed is not None and not 0 <= args.seed < 2**63:  # as sample.py: random.Random(-s) is Random(s)
        raise UserError(f"--seed={args.seed} must be in [0, 2**63)")
    device = resolve_device(args.device, "--device")
    model, cfg, tokenizer, ckpt = load_model(args.run, device)
    if cfg.data.dataset != "stories":
        raise not_stories(args.run, cfg.data.dataset)
    if not cfg.model.causal and not args.force:  # the probe decodes greedily: sample.py refuses the same
        raise UserError(f"{args.run} was trained with model.causal=false: every position saw the token it had "
                        f"to predict, so its greedy continuations are garbage; retrain with causal: true (or "
                        f"pass --force to probe it)")
    windows = max(REFERENCES_PER_STORY) * args.stories * cfg.model.block_size * BYTES_PER_TOKEN  # (at most)
    check_memory({"the held-out windows": windows * (2 if args.ablate is not None else 1)}, torch.device("cpu"),
                 f"--stories={args.stories}", "lower --stories")
    heads = None
    if args.ablate not in (None, EACH):  # checked before the slow part
        heads = parse_heads(args.ablate, cfg.model.n_layer, cfg.model.n_head)
    if note := training_note(resolve_checkpoint(args.run), ckpt["step"], "probes"):
        print(note, file=sys.stderr)
    if (trained_on := ckpt.get("stories_generator")) not in (None, stories_code_digest()):  # (edited since)
        print(f"note: {shown_path(args.run)} was trained on stories of another version of data/stories.py and "
              f"data/story_words.py (edited since, {short(str(trained_on))} then): the held-out stories are made by "
              f"today's, with names and words the model may never have seen", file=sys.stderr)
    seed = args.seed if args.seed is not None else held_out_seed(cfg.data.stories_seed)
    if seed == cfg.data.stories_seed:
        print(f"note: --seed {seed} is the training corpus's data.stories_seed: these stories are not held out",
              file=sys.stderr)
    elif args.ablate is not None and (seed + MEAN_SEED_OFFSET) % SEEDS == cfg.data.stories_seed:
        print(f"note: --ablate's mean-ablation stories (seed {cfg.data.stories_seed}, --seed + {MEAN_SEED_OFFSET}) are "
              f"the training corpus's data.stories_seed: those stories are not held out", file=sys.stderr)
    # mean ablation's windows, before the slow part: where they are none, the probe's minutes were thrown away
    mean_cases = (mean_ablation_cases(tokenizer, args.stories, seed, cfg.model.block_size)
                  if args.ablate is not None else None)
    # threads for the cores other processes leave free: with a busy process beside it, torch's one
    # thread per core probed 5x slower than one thread (docs/results.md)
    threads = ThreadPolicy() if device.type == "cpu" else None
    t0 = time.perf_counter()
    result = {"run": str(args.run), "step": ckpt["step"], "tokenizer": cfg.data.tokenizer, "n_layer": cfg.model.n_layer,
              "n_head": cfg.model.n_head, "block_size": cfg.model.block_size,
              **probe(model, tokenizer, args.stories, seed, device, threads=threads)}
    if not result["references"]:  # nothing to measure: empty tables would read as a result
        raise UserError(no_reference(args.stories, seed, result["skipped_stories"], cfg.data.tokenizer))
    if args.ablate is not None:
        looks = result["attention_attribute"]  # (none measured: no reference had its attribute in the window)
        result["ablation"] = ablation(model, tokenizer, args.stories, seed, device, heads,
                                      looks["antecedent"] if looks["references"] else None, threads=threads,
                                      mean_cases=mean_cases)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    out.write(f"probe of {shown_path(args.run)}: {count(cfg.model.n_layer, 'layer')} x "
              f"{count(cfg.model.n_head, 'head')}, block_size {cfg.model.block_size}, {cfg.data.tokenizer} tokens\n")
    out.write(report(result, cfg.model.n_layer, cfg.model.n_head) + "\n")
    if "ablation" in result:
        out.write("\n" + ablation_report(result["ablation"], result["attention_attribute"], cfg.model.n_layer,
                                         cfg.model.n_head) + "\n")
    out.write(json.dumps(result) + "\n")
    out.flush()
    return result


def no_reference(n_stories: int, seed: int, skipped: int, tokenizer: str) -> str:
    """Why the held-out stories gave no reference to probe, and what to try."""
    units = "words" if tokenizer == "word" else "characters"
    which = ("it uses" if n_stories == skipped == 1 else f"{skipped} of them {'uses' if skipped == 1 else 'use'}")
    were = "was" if skipped == 1 else "were"
    return (f"no usable reference in {count(n_stories, 'held-out story', 'held-out stories')} (seed {seed}): "
            f"{which} {units} outside this model's vocabulary and {were} skipped (a vocabulary from a small corpus "
            f"lacks rare ones); try more --stories, or another --seed")


class ProbeParser(ArgParser):
    """ArgParser, but `probe.py --ablate RUN` says what happened: --ablate's list is optional, so
    argparse takes RUN as the heads and then finds no run ("arguments are required: run")."""

    def error(self, message: str) -> None:  # type: ignore[override]
        value = ablate_value(getattr(self, "words", []))
        if "arguments are required: run" in message and value is not None and not looks_like_heads(value):
            looks = "is a folder (the run?)" if Path(value).is_dir() else "looks like the run"
            raise UserError(f"--ablate {short(value)}: that {looks}, not heads: --ablate takes nothing (every head "
                            f"in turn) or heads LAYER.HEAD[,LAYER.HEAD...] (e.g. --ablate 3.2,1.0); give the run "
                            f"first: {self.prog} RUN --ablate (see {self.prog} --help)")
        super().error(message)


def ablate_value(words: Sequence[str]) -> str | None:
    """The word argparse took as --ablate's list (`--ablate X` or `--ablate=X`), or None."""
    for i, word in enumerate(words):
        if word.startswith("--ablate="):
            return word.split("=", 1)[1]
        if word == "--ablate" and i + 1 < len(words) and not words[i + 1].startswith("-"):
            return words[i + 1]
    return None


if __name__ == "__main__":
    run_cli(main)

"""Does the head that looks at the answer carry it? The ablation table over several runs (seeds).

    python -m scripts.ablation_table RUN [RUN ...] [--stories N] [--device D] [--out DIR]

(run from the repository root). For each run it calls `probe.py RUN --ablate` (a RUN that is a
.json or .txt file is read instead: the last line of a saved probe.py --ablate output), then prints
one markdown row per run and a mean ± sd row: the accuracy; the head with the most attention on
the antecedent's attribute, its accuracy drop when removed (zero / mean ablation) beside the median
head's and its rank by drop; the head whose removal hurts most; the drop when the top two by
attention, and the top two by drop, are removed together. Ends with one JSON line. `--out DIR`
keeps each run's full probe output (the layer x head tables) as DIR/probe_<name>.txt.
"""
from __future__ import annotations

import json
import re
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any, Sequence

if __name__ == "__main__":  # before torch loads (the imports below): a Ctrl-C then is `interrupted`, not a traceback
    if not __package__:  # run as a file (python scripts/ablation_table.py): tinygpt, a folder up, cannot be imported
        print("error: run it from the repository root as python -m scripts.ablation_table", file=sys.stderr)
        sys.exit(2)
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

from scripts.reproduce import check_own_output, is_figure, run, saved_json
from tinygpt.checkpoint import atomic_write_text, check_writable, load_checkpoint, peek_checkpoint, resolve_checkpoint
from tinygpt.config import CHECKPOINTS
from tinygpt.errors import ArgParser, UserError, count, path_arg, run_cli, shell_quote, short
from tinygpt.report import markdown_cell, stats

SAVED = (".json", ".txt")  # a saved probe output, read instead of probing again


def labels(targets: list[str]) -> list[str]:
    """The shortest path tails that tell the runs apart: seed1337/run, seed1338/run, not run, run."""
    paths = [Path(t).resolve() for t in targets]
    parts = [(p.with_suffix("") if p.suffix in SAVED else p).parts for p in paths]  # ('/' has no suffix to drop)
    for k in range(1, max(map(len, parts)) + 1):
        tails = [str(Path(*p[-k:])) for p in parts]  # (the whole path: '/tmp/x', not '//tmp/x')
        if len(set(tails)) == len(tails):
            return tails
    return tails


def is_saved(target: str) -> bool:
    """Is `target` a saved probe output (read), not a run (probed)?"""
    return Path(target).suffix in SAVED


def saved_path(out: Path, label: str) -> Path:
    """Where --out keeps the full probe output of the run labelled `label`."""
    return out / f"probe_{label.replace('/', '_')}.txt"


def probe_result(target: str, label: str, stories: int, device: str, out: Path | None) -> dict:
    """The probe.py --ablate figures of one run (its final JSON line), labelled and checked."""
    if is_saved(target):
        result = saved_json(target, target, "probe.py --ablate")
    else:
        print(f"probing {target} ...", file=sys.stderr, flush=True)
        _, text = run(["probe.py", target, "--ablate", "--stories", str(stories), "--device", device])
        if out is not None:
            atomic_write_text(saved_path(out, label), text)
        result = json.loads(text.strip().splitlines()[-1])  # probe.py's own last line
    if not isinstance(result, dict):
        raise UserError(f"{target}: its last line is not the JSON line probe.py --ablate ends with")
    if not isinstance(result.get("ablation"), dict) or "drop" not in result["ablation"]:
        raise UserError(f"{target}: no per-head ablation in this probe output (run probe.py RUN --ablate)")
    if "drop" in result["ablation"] and "most_attention" not in result["ablation"]:  # (probe.py says so too)
        raise UserError(f"{target}: the probe found no reference with its antecedent's attribute inside the "
                        f"model's window, so no head to name as looking at it: the table needs a model of the "
                        f"stories with a block of a sentence or more (configs/stories.yaml)")
    return checked({**result, "label": label}, target)


def rank_text(rank: Any, heads: int) -> bool:
    """Is `rank` a rank as probe.py writes it (coreference.rank_among): "3", or "1-15" among tied heads, within
    the `heads`? (An untied rank, a text too, was refused: every real output whose head had no equal.)"""
    found = isinstance(rank, str) and re.fullmatch(r"([1-9]\d{0,6})(?:-([1-9]\d{0,6}))?", rank)
    return bool(found) and int(found[1]) <= int(found[2] or found[1]) <= heads


def checked(result: dict, target: str) -> dict:
    """`result` if summary() reads every figure of it as a number; a UserError naming `target` and
    the figure otherwise (a damaged or hand-edited output): the table never meets a bad value."""
    try:
        figures = summary(result)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise UserError(f"{target}: this probe output lacks a figure the table needs ({type(e).__name__}: "
                        f"{short(e.args[0] if e.args else '')}); give one that probe.py RUN --ablate printed") from None
    for key in NUMERIC:
        value = figures[key]
        if value is None and key.startswith("pair"):  # (no pair where fewer than two heads matter)
            continue
        if not is_figure(value):
            raise UserError(f"{target}: this probe output's {key} is {short(value)}, not a number in [-1e12, 1e12]")
    # its counts and head names too: "n_layer": "2" made the rank column `1 / 1-2 of 22` (text repeated), and a head
    # named "<b>|x" broke the Markdown row
    n_layer, n_head = result["n_layer"], result["n_head"]
    if not (whole(n_layer, 1, MAX_COUNT) and whole(n_head, 1, MAX_COUNT)):
        raise UserError(f"{target}: this probe output's n_layer and n_head are {short(n_layer)} and {short(n_head)}, "
                        f"not counts of 1 to {MAX_COUNT}")
    heads = n_layer * n_head
    ab = result["ablation"]
    harmful = [h for h in ab["most_harmful"].values()  # (layer and head None, drop 0: no head's removal lowers
               if h["drop"] > 0 or (h["layer"], h["head"]) != (None, None)]  # the accuracy, and none is named)
    named = [ab["most_attention"], *harmful]
    pairs = [h for t in ab["together"] for h in t["heads"]]
    ranks = [figures["best_rank_zero"], figures["best_rank_mean"]]
    if not (all(whole(h["layer"], 0, n_layer - 1) and whole(h["head"], 0, n_head - 1) for h in named)
            and all(isinstance(h, str) and re.fullmatch(r"\d+\.\d+", h) for h in pairs)
            and all(whole(r, 1, heads) or rank_text(r, heads) for r in ranks)
            and whole(figures["references"], 0, 10**12)):
        raise UserError(f"{target}: this probe output names a head, a rank or a count that is not one of its "
                        f"{n_layer} x {n_head} heads (layer.head, from 0); give one that probe.py RUN --ablate printed")
    return result


MAX_COUNT = 10_000  # layers or heads a probe output may count (GPT-2's largest has 48 layers, 25 heads)


def whole(value, low: int, high: int) -> bool:
    """Is `value` an int (not a bool) from `low` to `high`?"""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def summary(result: dict) -> dict:
    """One run's figures for the table (drops and accuracies in points, attention in %)."""
    ab = result["ablation"]
    best, together = ab["most_attention"], {t["what"]: t for t in ab["together"]}
    pair = together.get("top two by attention")
    by_drop = together.get("top two by zero-ablation drop")  # none where fewer than two heads matter
    harmful = ab["most_harmful"]
    return {
        "run": result["label"], "references": ab["references"], "accuracy": 100 * ab["baseline"],
        "best_head": f"{best['layer']}.{best['head']}", "best_attention": 100 * best["attention"],
        "best_drop_zero": 100 * best["drop_zero"], "best_drop_mean": 100 * best["drop_mean"],
        "best_rank_zero": best["rank_zero"], "best_rank_mean": best["rank_mean"],
        "median_drop_zero": 100 * ab["median_drop"]["zero"], "median_drop_mean": 100 * ab["median_drop"]["mean"],
        # none where no head's removal lowers the accuracy (the first of equal heads is no finding; as probe.py says)
        "harmful_zero": f"{harmful['zero']['layer']}.{harmful['zero']['head']}" if harmful["zero"]["drop"] > 0 else "none",
        "harmful_mean": f"{harmful['mean']['layer']}.{harmful['mean']['head']}" if harmful["mean"]["drop"] > 0 else "none",
        "harmful_drop_zero": 100 * harmful["zero"]["drop"], "harmful_drop_mean": 100 * harmful["mean"]["drop"],
        "pair": "+".join(pair["heads"]) if pair else "",
        "pair_drop_zero": 100 * pair["drop"]["zero"] if pair else None,
        "pair_drop_mean": 100 * pair["drop"]["mean"] if pair else None,
        "pair_by_drop": "+".join(by_drop["heads"]) if by_drop else "",
        "pair_by_drop_zero": 100 * by_drop["drop"]["zero"] if by_drop else None,
        "pair_by_drop_mean": 100 * by_drop["drop"]["mean"] if by_drop else None,
        "heads": result["n_layer"] * result["n_head"],
    }


NUMERIC = ("accuracy", "best_attention", "best_drop_zero", "best_drop_mean", "median_drop_zero", "median_drop_mean",
           "harmful_drop_zero", "harmful_drop_mean", "pair_drop_zero", "pair_drop_mean", "pair_by_drop_zero",
           "pair_by_drop_mean")


def table(rows: list[dict]) -> tuple[str, dict]:
    """The markdown table (a row per run, then mean ± sd) and the aggregate figures (tinygpt.report.stats:
    mean, sd, 95% interval of the mean, n)."""
    # a run that resolves no reference: no removal can lower its accuracy, so its drops say nothing of its heads
    # (probe.py says so): its accuracy and attention count, its drops do not
    told = [r for r in rows if r["accuracy"] > 0]
    agg = {key: stats([r[key] for r in (rows if key in ("accuracy", "best_attention") else told)
                       if r[key] is not None]) for key in NUMERIC}
    # the head hurts most where its drop is the largest, shared or not (its rank is then "1-5", a tie)
    same = sum(r["harmful_zero"] != "none" and r["best_drop_zero"] == r["harmful_drop_zero"] for r in told)

    def pm(key: str) -> str:
        """mean ± sd, and its n where fewer runs than the row's have the figure (a pair one run lacks)."""
        s = agg[key]
        return "" if s["mean"] is None else (f"{s['mean']:.1f}" + (f" ± {s['std']:.1f}" if s["std"] is not None else "")
                                             + (f" (n={s['n']})" if s["n"] < len(rows) else ""))

    def pair_pm(key: str) -> str:
        """Drops, zero / mean; `-` where no run has them (a pair no run has; every run at 0%: no drops counted)."""
        return "-" if agg[f"{key}_zero"]["mean"] is None else f"{pm(f'{key}_zero')} / {pm(f'{key}_mean')}"

    lines = ["| run | accuracy | most attention on the attribute | its drop, zero / mean | median head's drop, "
             "zero / mean | its rank by drop, zero / mean | hurts most when removed, zero / mean | top two by "
             "attention together, drop zero / mean | top two by drop together, drop zero / mean |",
             "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        pair = f"{r['pair']}: {r['pair_drop_zero']:.1f} / {r['pair_drop_mean']:.1f}" if r["pair"] else "-"
        by_drop = (f"{r['pair_by_drop']}: {r['pair_by_drop_zero']:.1f} / {r['pair_by_drop_mean']:.1f}"
                   if r["pair_by_drop"] else "-")
        lines.append(
            f"| {markdown_cell(r['run'])} | {r['accuracy']:.1f}% | {r['best_head']} ({r['best_attention']:.1f}%) | "
            f"{r['best_drop_zero']:.1f} / {r['best_drop_mean']:.1f} | {r['median_drop_zero']:.1f} / "
            f"{r['median_drop_mean']:.1f} | {r['best_rank_zero']} / {r['best_rank_mean']} of {r['heads']} | "
            f"{r['harmful_zero']} ({r['harmful_drop_zero']:.1f}) / {r['harmful_mean']} ({r['harmful_drop_mean']:.1f}) | "
            f"{pair} | {by_drop} |")
    lines.append(f"| mean ± sd ({count(len(rows), 'run')}) | {pm('accuracy')} | {pm('best_attention')} | "
                 f"{pair_pm('best_drop')} | {pair_pm('median_drop')} | | {pair_pm('harmful_drop')} | "
                 f"{pair_pm('pair_drop')} | {pair_pm('pair_by_drop')} |")
    lines.append("")
    if blind := [r["run"] for r in rows if r["accuracy"] <= 0]:
        lines.append(f"{', '.join(map(markdown_cell, blind))}: no reference resolved (accuracy 0%), so no removal "
                     f"can lower it: the drops say nothing of its heads and are left out of the mean ± sd (train it "
                     f"longer)")
    lines.append("drops in accuracy points" + (f"; the head with the most attention on the antecedent's attribute "
                                               f"is the one whose removal hurts most (zero ablation; a tie counts) "
                                               f"in {same} of {len(told)} runs" if told else ""))
    for key, what in (("best_drop_zero", "its drop (zero)"), ("median_drop_zero", "the median head's (zero)"),
                      ("pair_drop_zero", "the top two's together (zero)")):
        s = agg[key]
        if s["lo"] is not None:
            lines.append(f"95% interval of the mean, {what}: {s['lo']:.1f} to {s['hi']:.1f} points (n={s['n']})")
    return "\n".join(lines), {"runs": rows, "mean_sd": agg, "most_attention_is_most_harmful": same}


def check_args(args) -> None:
    """Refuse, before the first probe (minutes each), what would stop a later one: --stories and
    --device out of probe.py's range, a RUN that is no run (a typo, a folder without a checkpoint) or
    that was not trained on the stories, an --out that cannot be written. (Saved outputs are read and
    checked in main, before any probe.)"""
    from tinygpt.coreference import check_stories, not_stories
    from tinygpt.runtime import resolve_device
    check_stories(args.stories, "--stories", " (probe.py --stories)")
    resolve_device(args.device, "--device")
    if args.out is not None:
        check_writable(args.out, "--out")
    for target in args.runs:
        if not is_saved(target):
            kept = sorted(Path(target).glob("probe_*.txt")) if Path(target).is_dir() else []
            if kept and not any((Path(target) / name).exists() for name in CHECKPOINTS):  # an --out
                # folder of an earlier table: "no checkpoint ...: train first" was the advice
                folder = shell_quote(target.rstrip("/") or "/")
                raise UserError(f"{target} holds saved probe outputs, not a run: give the files, e.g. "
                                f"python -m scripts.ablation_table {folder}/probe_*.txt")
            path = resolve_checkpoint(target)  # as probe.py finds the run's checkpoint
            ckpt = peek_checkpoint(path)
            if ckpt is None:  # a device, a damaged file: loading says what is wrong, as probe.py would, at once
                ckpt = load_checkpoint(path)
            config = ckpt.get("config") if ckpt is not None else None
            dataset = config.get("data", {}).get("dataset") if isinstance(config, dict) else None
            if isinstance(dataset, str) and dataset != "stories":  # (a damaged one: probe.py names what is wrong)
                raise not_stories(target, dataset)


def same_run(target: str, saved: dict[str, dict]) -> Path | str:
    """What tells one run given twice: the run id its checkpoints carry (RUN, RUN/best.pt, RUN/ckpt.pt and a copy
    of RUN are one run; by path alone, the last two counted twice), else the checkpoint `target` stands for, or a
    saved output's run where it is still there (else the output file itself)."""
    path = Path(target).resolve()
    if target not in saved:
        path = resolve_checkpoint(target).resolve()
    elif isinstance(run := saved[target].get("run"), str) and run and Path(run).exists():
        with suppress(UserError):
            path = resolve_checkpoint(run).resolve()
    ckpt = peek_checkpoint(path) if path.suffix == ".pt" else None
    return ckpt["run_id"] if ckpt and isinstance(ckpt.get("run_id"), str) else path


def main(argv: Sequence[str] | None = None) -> None:
    p = ArgParser(prog="python -m scripts.ablation_table", description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=lambda text: str(path_arg(text)),  # ('' is no run: refused at once)
                   help="run directories (or saved probe.py --ablate outputs, .json/.txt)")
    p.add_argument("--stories", type=int, default=100, help="held-out stories per probe (probe.py --stories)")
    p.add_argument("--device", default="auto", help="where each probe runs (probe.py --device; default: auto)")
    p.add_argument("--out", type=path_arg, help="keep each run's full probe output here")
    args = p.parse_args(argv)
    check_args(args)
    targets = list(zip(args.runs, labels(args.runs)))
    if args.out is not None:  # (probe.py's output starts "probe of RUN:")
        named: dict[Path, str] = {}
        for target, label in targets:
            if not is_saved(target):
                kept = saved_path(args.out, label)
                check_own_output(kept, "probe of ", "--out")
                # (a/b_c and a_b/c: one file, the second run's output written over the first's)
                if (other := named.setdefault(kept, target)) != target:
                    raise UserError(f"--out: {other} and {target} would both keep their probe output in {kept}; "
                                    f"probe them in two calls, or rename a folder")

    def result(target: str, label: str) -> dict:
        return probe_result(target, label, args.stories, args.device, args.out)
    saved = {target: result(target, label) for target, label in targets if is_saved(target)}  # read: seconds
    seen: dict[Path, str] = {}
    for target in args.runs:  # (one run twice: its figures would count as two seeds, a spread of 0)
        first = seen.setdefault(same_run(target, saved), target)
        if first != target or args.runs.count(target) > 1:
            raise UserError(f"{target} is given twice{f' (as {first})' if first != target else ''}: each run "
                            f"counts once in the mean ± sd; give it once")
    rows = [summary(saved[target] if target in saved else result(target, label)) for target, label in targets]
    text, figures = table(rows)
    print(text)
    print(json.dumps(figures))


if __name__ == "__main__":
    run_cli(main)

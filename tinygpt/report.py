"""Results tables of several runs (sweep.py, compare.py): results.md, results.csv, the per-setting
summary over seeds and the plots (val-loss curves, each setting's results), written into one folder
by `write_report`.

Runs that differ only by `train.seed` are one *setting*: the summary gives, for every metric, the
mean, the standard deviation, the 95% confidence interval of the mean (Student's t) and n, and
lists the pairs of settings whose intervals do not overlap, the differences one can trust at that
level. A single run per setting is reported as such (n = 1, no interval). Only finished runs
(status `done`) enter the summary: a failed or unfinished run's figures are those of fewer steps.
"""
from __future__ import annotations

import csv
import io
import math
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from tinygpt.checkpoint import atomic_write_text
from tinygpt.plots import plot_settings, plot_val_loss

SEED = "train.seed"
# where a run's files go and whether it draws loss.png: runs that differ only there computed the same
NEVER_COMPARED = {"train.out_dir", "data.prepared_dir", "train.plot"}
# what every per-run table shows after the run name and the varied config values
RESULT_COLUMNS = ["params", "status", "best_val_loss", "final_train_loss", "tokens_per_s", "wall_s"]
# the probe's figures (sweep.py --probe): shares of the references, the best heads and their ratios
PROBE_COLUMNS = ["antecedent", "distractor", "other", "attribute_head", "attribute_ratio", "name_head", "name_ratio"]
# what the summary over seeds averages
SUMMARY_METRICS = ["best_val_loss", "final_train_loss", "tokens_per_s", "wall_s", "antecedent", "distractor",
                   "other", "attribute_share", "attribute_ratio", "name_ratio"]
LOWER_IS_BETTER = {"best_val_loss", "final_train_loss", "wall_s", "distractor", "other"}
DIFFERENCES_IN = ["best_val_loss", "antecedent", "distractor", "attribute_ratio"]  # listed when they differ
# two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then the normal 1.96)
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
       2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
       2.045, 2.042]


def differing_keys(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Config keys whose values are not the same in all runs (NEVER_COMPARED excepted), in schema order."""
    configs = [s["config"] for s in summaries if s.get("config")]
    if len(configs) < 2:
        return []
    keys = [k for k in configs[0] if k not in NEVER_COMPARED]
    return [k for k in keys if any(c.get(k) != configs[0].get(k) for c in configs[1:])]


# ---- statistics over seeds ----


def stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """mean, std (n-1), the 95% interval of the mean and n; std and interval are None for n = 1,
    and when a value is nan or inf (a diverged run: its mean says so, a spread would not)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "std": None, "lo": None, "hi": None, "n": 0}
    mean = statistics.fmean(values)
    if n == 1 or not all(map(math.isfinite, values)):  # (statistics.stdev fails on nan and inf)
        return {"mean": mean, "std": None, "lo": None, "hi": None, "n": n}
    std = statistics.stdev(values)
    half = (T95[n - 2] if n - 1 <= len(T95) else 1.96) * std / math.sqrt(n)
    return {"mean": mean, "std": std, "lo": mean - half, "hi": mean + half, "n": n}


def finished_run(row: dict[str, Any]) -> bool:
    """Whether a results row is of a run that reached its train.max_iters (a row without a status: yes)."""
    return row.get("status", "done") == "done"


def group_by_setting(rows: Sequence[dict[str, Any]], varied: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of runs -> one group per setting (the varied keys but train.seed), in first-seen order:
    {'setting': {key: value}, 'label': 'n_head=4', 'runs': [rows], 'stats': {metric: stats}, 'left_out': n};
    the stats are over the finished runs, `left_out` counts the others."""
    keys = [k for k in varied if k != SEED]
    groups: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        setting = {k: r[k] if k in r else r.get("config", {}).get(k) for k in keys}
        group = groups.setdefault(tuple(map(str, setting.values())), {"setting": setting, "runs": []})
        group["runs"].append(r)
    for g in groups.values():
        g["label"] = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in g["setting"].items()) or "all runs"
        finished = [r for r in g["runs"] if finished_run(r)]
        g["left_out"] = len(g["runs"]) - len(finished)
        g["stats"] = {m: stats([r[m] for r in finished if isinstance(r.get(m), (int, float))])
                      for m in SUMMARY_METRICS}
        heads = Counter(r["attribute_head"] for r in g["runs"] if r.get("attribute_head"))
        g["attribute_heads"] = ", ".join(f"{h}×{c}" if c > 1 else h for h, c in heads.most_common())
    return list(groups.values())


def differences(groups: Sequence[dict[str, Any]], metrics: Sequence[str] = DIFFERENCES_IN) -> list[str]:
    """'metric: A mean [lo, hi] vs B mean [lo, hi]' for each pair of settings whose 95% intervals
    do not overlap (both with n >= 2)."""
    lines = []
    for m in metrics:
        for i, a in enumerate(groups):
            for b in groups[i + 1:]:
                sa, sb = a["stats"][m], b["stats"][m]
                if sa["lo"] is None or sb["lo"] is None:
                    continue
                if sa["hi"] < sb["lo"] or sb["hi"] < sa["lo"]:
                    lines.append(f"{m}: {a['label']} {_num(m, sa['mean'])} [{_num(m, sa['lo'])}, {_num(m, sa['hi'])}]"
                                 f" vs {b['label']} {_num(m, sb['mean'])} [{_num(m, sb['lo'])}, {_num(m, sb['hi'])}]")
    return lines


# ---- tables ----


def times(x: float) -> str:
    """A ratio: 1.64 -> '1.6x'; under 1 to two significant digits, never '1.0x' ('0.96x', '0.6x',
    '0.031x'): a head that looks more at the distractor must not read as even."""
    if x >= 1:
        return f"{x:.1f}x"
    shown = f"{x:.2g}"
    return ("0.99" if shown == "1" else shown) + "x"


def _num(column: str, value: Any) -> str:
    """A number as the column shows it: shares in percent, losses to 4 decimals, ratios to 1."""
    if column in ("antecedent", "distractor", "other", "attribute_share"):
        return f"{100 * value:.1f}%"
    if column in ("best_val_loss", "final_train_loss"):
        return f"{value:.4f}"
    if column in ("attribute_ratio", "name_ratio"):
        return times(value)
    if column in ("params", "tokens_per_s"):
        return f"{value:,.0f}"
    if column == "wall_s":
        return f"{value:.1f}"
    return str(value)


def _fmt(column: str, value: Any, markdown: bool) -> str:
    """One cell of a per-run table: as _num shows it in Markdown, plain numbers in CSV."""
    if value is None:
        return ""
    if not markdown:
        return f"{value:.6g}" if isinstance(value, float) else str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _num(column, value)
    return str(value).replace("|", "\\|")


def table_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows -> a Markdown table with `columns` in order (numbers right-aligned)."""
    numeric = set(RESULT_COLUMNS + PROBE_COLUMNS) - {"status", "attribute_head", "name_head"}
    lines = ["| " + " | ".join(columns) + " |",
             "| " + " | ".join("---:" if c in numeric else "---" for c in columns) + " |"]
    lines += ["| " + " | ".join(_fmt(c, r.get(c), True) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def table_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows -> CSV text with a header row (plain numbers, no separators)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([_fmt(c, r.get(c), False) for c in columns])
    return buf.getvalue()


def summary_markdown(groups: Sequence[dict[str, Any]], metrics: Sequence[str]) -> str:
    """One row per setting: n, then each metric as 'mean ± std [95% interval]'."""
    lines = ["| setting | n | " + " | ".join(metrics) + " |", "| --- | ---: | " + " | ".join("---:" for _ in metrics) + " |"]
    for g in groups:
        cells = []
        for m in metrics:
            s = g["stats"][m]
            if s["mean"] is None:
                cells.append("")
            elif s["std"] is None:
                cells.append(_num(m, s["mean"]))
            else:
                cells.append(f"{_num(m, s['mean'])} ± {_num(m, s['std'])} [{_num(m, s['lo'])}, {_num(m, s['hi'])}]")
        n = sum(map(finished_run, g["runs"]))
        lines.append(f"| {g['label']} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_csv(groups: Sequence[dict[str, Any]], metrics: Sequence[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["setting", *[f"{m}_{s}" for m in metrics for s in ("mean", "std", "lo", "hi", "n")]])
    for g in groups:
        writer.writerow([g["label"], *[("" if g["stats"][m][s] is None else g["stats"][m][s])
                                       for m in metrics for s in ("mean", "std", "lo", "hi", "n")]])
    return buf.getvalue()


def summary_text(groups: Sequence[dict[str, Any]], metrics: Sequence[str], probed: bool) -> str:
    """The per-setting table over seeds, the best heads, and the differences one can trust."""
    text = "Per setting over seeds: mean ± std [95% interval of the mean]; n finished runs.\n\n"
    text += summary_markdown(groups, metrics)
    left_out = sum(g["left_out"] for g in groups)
    if left_out:
        text += (f"\n{left_out} run(s) that did not finish (see their status above) are left out of these "
                 f"figures: rerun the same command to finish them.\n")
    if probed:
        text += "\nBest head on the antecedent's attribute, per run: " + "; ".join(
            f"{g['label']}: {g['attribute_heads']}" for g in groups) + "\n"
    diffs = differences(groups)
    if diffs:
        return text + "\nDifferences beyond the 95% intervals:\n" + "".join(f"- {d}\n" for d in diffs)
    if len(groups) < 2:
        return text
    shown = ", ".join(m for m in DIFFERENCES_IN if m in metrics)
    return text + f"\nNo two settings differ beyond their 95% intervals in {shown}.\n"


def write_report(rows: Sequence[dict[str, Any]], varied: Sequence[str], out_dir: str | Path,
                 title: str) -> tuple[str, list[Path]]:
    """Write results.md (per run, then per setting over seeds), results.csv, summary.csv,
    val_loss.png and settings.png (each setting's result with its interval) into out_dir; return
    (the Markdown text printed, the plots drawn: none without matplotlib). Each row
    holds 'run', the `varied` config keys, RESULT_COLUMNS and, when probed, the probe's columns."""
    out_dir = Path(out_dir)
    for r in rows:  # the varied values come from each run's config unless the row sets them
        for k in varied:
            r.setdefault(k, r.get("config", {}).get(k))
    probed = any(r.get("antecedent") is not None for r in rows)
    columns = ["run", *varied, *RESULT_COLUMNS, *(PROBE_COLUMNS if probed else [])]
    metrics = [m for m in SUMMARY_METRICS if probed or m in RESULT_COLUMNS]
    groups = group_by_setting(rows, varied)
    text = table_markdown(rows, columns)
    per_token = [k for k in varied if k in ("data.dataset", "data.tokenizer", "data.bpe_vocab_size")]
    if per_token:  # a loss is per token: a character's and a word's do not compare
        text += (f"\nThe runs differ in {', '.join(per_token)}: their losses are per token of different "
                 f"vocabularies or texts, and do not compare as numbers.\n")
    if max(len(g["runs"]) for g in groups) > 1:  # several seeds per setting
        text += "\n" + summary_text(groups, metrics, probed)
    atomic_write_text(out_dir / "results.md", f"# {title}\n\n{text}")
    atomic_write_text(out_dir / "results.csv", table_csv(rows, columns))
    atomic_write_text(out_dir / "summary.csv", summary_csv(groups, metrics))
    pngs = [plot_val_loss(groups, out_dir / "val_loss.png"), plot_settings(groups, out_dir / "settings.png")]
    for name, png in zip(("val_loss.png", "settings.png"), pngs):
        if png is None:  # not drawn this time: an earlier report's picture would pass for this one's
            (out_dir / name).unlink(missing_ok=True)
    return text, [p for p in pngs if p is not None]

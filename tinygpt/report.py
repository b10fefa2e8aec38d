"""Results tables of several runs (sweep.py, compare.py): results.md, results.csv, the per-setting
summary over seeds and the plots (val-loss curves, each setting's results), written into one folder
by `write_report`.

Runs that differ only by `train.seed` are one *setting*: the summary gives, for every metric, the
mean, the standard deviation, the 95% confidence interval of the mean (Student's t, cut at the bounds
the metric cannot pass: 0, and a share's 100%) and n, and
lists the pairs of settings whose intervals do not overlap, saying how many pairs were compared: the
rule is strict for one pair, but the intervals of two settings alike are apart in about 1 comparison of
200 (CHANCE; more often for unequal numbers of seeds: chance), so among many some are chance (the report says
how many to expect); and intervals that overlap do not show two settings equal. A single run per setting is
reported as such (n = 1, no interval), and so are
runs of one setting that share their seed (the same training repeated): one seed, their mean; seeds
that all gave the same value (a share counted in whole references) have no interval either: a spread of
0 is not a measured spread. Only finished runs
(status `done`) enter the summary and the val-loss curves, each labelled with its n: a failed or unfinished
run's figures are those of fewer steps. Runs trained on different data (their checkpoints' data digest: the
dataset's text changed between them) are different settings, and their losses are said not to compare, as are
those of runs with another val split or stories corpus (PER_TOKEN).

The report's files are all made first, then put in place together (`atomic_write_all`): a refusal (a
full disk) leaves the folder's earlier report whole. Each is recognisable as a report's (results.md's
title, the CSV headers, a tEXt chunk in the pictures: `is_report_file`), so that a sweep or a
comparison refuses to overwrite a file of the user's of the same name (check_report_folder).
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
import os
import statistics
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from data.prepare import token_keys
from tinygpt.checkpoint import atomic_write_all, is_hf_folder, run_around
from tinygpt.config import CHECKPOINTS, DataConfig
from tinygpt.errors import UserError, count, first_few
from tinygpt.plots import (MATPLOTLIB_NOTE, PNG_MARK, can_plot, png_marked, settings_png, val_loss_png,
                           val_losses_by_step)
from tinygpt.runs import DIVERGED, REPORT_LOCK, first_line, lock_holder, runs_inside, users_config

SEED = "train.seed"
DIGEST = "data_digest"  # a row's: the data its checkpoint was trained on (runs.summarize_run), None where unknown
DATA = "data.digest"  # in a setting: its runs' data_digest, where runs of its config were trained on other data
# a loss is per token of these, on the val split they make: another val_fraction, or stories of another size or seed,
# is another val text (and with bpe or word tokens, another vocabulary learned from it). compact_vocab is not: the
# same tokens, the same text (a setting to compare)
PER_TOKEN = ("data.dataset", "data.tokenizer", "data.bpe_vocab_size", "data.val_fraction", "data.stories_chars",
             "data.stories_seed", DATA)
SHOWN_DIGEST = 10  # hex digits of a digest shown in a label or a Markdown table
# where a run's files go, whether it draws loss.png and logs to TensorBoard: runs that differ only there
# computed the same
NEVER_COMPARED = {"train.out_dir", "data.prepared_dir", "train.plot", "train.tensorboard"}
# what every per-run table shows after the run name and the varied config values
RESULT_COLUMNS = ["params", "status", "best_val_loss", "final_train_loss", "tokens_per_s", "wall_s"]
# the probe's figures (sweep.py --probe): shares of the references, the best heads and their ratios
PROBE_COLUMNS = ["references", "antecedent", "distractor", "other", "attribute_head", "attribute_share",
                 "attribute_ratio", "name_head", "name_ratio"]
# what the summary over seeds averages
SUMMARY_METRICS = ["best_val_loss", "final_train_loss", "tokens_per_s", "wall_s", "antecedent", "distractor",
                   "other", "attribute_share", "attribute_ratio", "name_ratio"]
DIFFERENCES_IN = ["best_val_loss", "antecedent", "distractor", "attribute_ratio"]  # listed when they differ
SHARES = {"antecedent", "distractor", "other", "attribute_share"}  # fractions of the references (or attention)
# two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then t95's expansion), to 6 decimals: the
# 3 of a printed table moved an interval's last shown digit (400 ± 435.9 over 3 seeds: [0, 1482.9], not 1482.8)
T95 = [12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
       2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
       2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272]
CHANCE = 0.005  # how often the 95% intervals of two settings alike do not overlap (2 to 10 seeds each: 0.4-0.55%)


@functools.lru_cache(maxsize=None)
def chance(n1: int, n2: int, draws: int = 200_000) -> float:
    """How often the 95% intervals of two settings alike, of n1 and n2 seeds, do not overlap: CHANCE where the two
    n are equal, more where they differ (2 against 10 seeds: 1.5%, 1 comparison of 70). For one distribution (sd 1)
    the means differ by a normal of variance 1/n1 + 1/n2, apart where beyond the two half-widths t * s / sqrt(n);
    averaged over `draws` pairs of sample sd's s (chi-square with n - 1 df; seeded: the same on every call)."""
    rng = np.random.default_rng(0)
    s1, s2 = (np.sqrt(rng.chisquare(n - 1, draws) / (n - 1)) for n in (n1, n2))
    half_widths = t95(n1 - 1) * s1 / math.sqrt(n1) + t95(n2 - 1) * s2 / math.sqrt(n2)
    z = half_widths / math.sqrt(1 / n1 + 1 / n2)  # in sd's of the difference of the means
    return sum(map(math.erfc, (z / math.sqrt(2)).tolist())) / draws  # P(|difference| > z), averaged


def differing_keys(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Config keys whose values are not the same in all runs (NEVER_COMPARED excepted), in schema
    order; a key compared only between the runs it applies to (a char run's bpe_vocab_size is none)."""
    configs = [s["config"] for s in summaries if s.get("config")]
    if len(configs) < 2:
        return []
    # every run trained on the same tokens (their checkpoints' data_digest): one dataset, however its path is
    # spelt (`d.txt`, `./d.txt`, absolute), is not two settings whose losses "do not compare"
    digests = [s.get(DIGEST) for s in summaries if s.get("config")]
    one_text = all(digests) and len(set(digests)) == 1

    def differs(key: str) -> bool:
        if key == "data.dataset" and one_text:
            return False
        values = [c.get(key) for c in configs if applies(c, key)]
        return any(v != values[0] for v in values[1:])
    keys = [k for k in configs[0] if k not in NEVER_COMPARED and differs(k)]
    if "model.vocab_size" in keys and any(k.startswith("data.") for k in keys):
        # the tokenizer makes it: it differs because a data key does (settings.png drew it as the setting on
        # its x axis, the dataset and tokenizer only in its legend); a key of its own where no data key differs
        keys.remove("model.vocab_size")
    return keys


def applies(config: dict[str, Any], key: str) -> bool:
    """Does the flat config's `key` change anything in its run? A data setting its tokens do not
    depend on does not (train.py's --resume ignores the same ones: data.prepare.token_keys)."""
    if not key.startswith("data."):
        return True
    names = {f.name for f in dataclasses.fields(DataConfig)}
    data = DataConfig(**{n: config[f"data.{n}"] for n in names if f"data.{n}" in config})
    return key.split(".", 1)[1] in token_keys(data)


# ---- statistics over seeds ----


def stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """mean, std (n-1), the 95% interval of the mean and n; std and interval are None for n = 1,
    and when a value is nan or inf (a diverged run: its mean says so, a spread would not); the
    interval alone is None where every value is the same (std 0)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "std": None, "lo": None, "hi": None, "n": 0}
    mean = statistics.fmean(values)
    if n == 1 or not all(map(math.isfinite, values)):  # (statistics.stdev fails on nan and inf)
        return {"mean": mean, "std": None, "lo": None, "hi": None, "n": n}
    std = statistics.stdev(values)
    if std == 0:  # identical seeds: an interval of width 0 would make any other value "differ"
        return {"mean": mean, "std": 0.0, "lo": None, "hi": None, "n": n}
    half = t95(n - 1) * std / math.sqrt(n)
    return {"mean": mean, "std": std, "lo": mean - half, "hi": mean + half, "n": n}


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with df degrees of freedom: the table to 30, then the
    Cornish-Fisher expansion around the normal's 1.96 (within 2e-6 of it past 30; 1.96 itself was 4%
    narrow at 31)."""
    if df <= len(T95):
        return T95[df - 1]
    z = 1.959963984540054
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def within_bounds(metric: str, s: dict[str, Any]) -> dict[str, Any]:
    """stats() of a summary metric with its interval cut at what the metric cannot pass: 0 for every
    one (a loss, a speed, a time, a share, a ratio), 100% for a share. Student's t knows no bounds:
    over 2 seeds a tokens/s interval read [-2,905, 5,722]. Cut, it holds the true mean as often (the
    mean lies within the bounds); 'cut' says whether it was, for the table's note."""
    if s["lo"] is None:
        return {**s, "cut": False}
    lo, hi = max(s["lo"], 0.0), min(s["hi"], 1.0) if metric in SHARES else s["hi"]
    return {**s, "lo": lo, "hi": hi, "cut": (lo, hi) != (s["lo"], s["hi"])}


def finished_run(row: dict[str, Any]) -> bool:
    """Whether a results row is of a run that reached its train.max_iters (a row without a status: yes)."""
    return row.get("status", "done") == "done"


ERROR_STATUS = "failed (exit"  # how the status of a run that ended in an error begins (sweep.failed_status)


def ended_in_error(row: dict[str, Any]) -> bool:
    """Whether a results row is of a run that ended in an error ('failed (exit 2: training diverged
    ...)' in the sweep that ran it, 'diverged at step 5 ...' read from its files), which a rerun
    repeats, unlike a run stopped or killed on its way."""
    return str(row.get("status", "")).startswith((ERROR_STATUS, DIVERGED))


def seed_of(row: dict[str, Any]) -> str | None:
    """A results row's train.seed (as text: a sweep's grid gives it as text), None where unknown."""
    seed = row[SEED] if SEED in row else row.get("config", {}).get(SEED)
    return None if seed is None else str(seed)


def runs_by_seed(runs: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Runs -> lists of the runs of one seed, in first-seen order (a run of unknown seed alone)."""
    by_seed: dict[Any, list[dict[str, Any]]] = {}
    for r in runs:
        seed = seed_of(r)
        by_seed.setdefault(("seed", seed) if seed is not None else ("run", id(r)), []).append(r)
    return list(by_seed.values())


def seed_means(runs: Sequence[dict[str, Any]], metric: str) -> list[float]:
    """One value of `metric` per seed: the mean of that seed's runs (the same training repeated is
    one sample of the seed's luck, not several)."""
    values = [[r[metric] for r in same if isinstance(r.get(metric), (int, float))] for same in runs_by_seed(runs)]
    return [statistics.fmean(v) for v in values if v]


def data_changed(rows: Sequence[dict[str, Any]]) -> bool:
    """Were two of the runs trained on different data (their checkpoints' data_digest) under the same
    data settings, the dataset file's text changed between them? Their losses do not compare, though
    their configs may be identical (or differ only in model.vocab_size, a new text's vocabulary)."""
    seen: dict[str, set[str]] = {}
    for r in rows:
        if r.get(DIGEST):
            config = r.get("config", {})
            data = {k: v for k, v in config.items() if k.startswith("data.") and k not in NEVER_COMPARED
                    and applies(config, k)}
            seen.setdefault(repr(sorted(data.items())), set()).add(r[DIGEST])
    return any(len(digests) > 1 for digests in seen.values())


def group_by_setting(rows: Sequence[dict[str, Any]], varied: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of runs -> one group per setting (the varied keys but train.seed), in first-seen order:
    {'setting': {key: value}, 'label': 'n_head=4', 'runs': [rows], 'stats': {metric: stats}, 'left_out': n,
    'errors': n, 'n': seeds, 'repeats': [[rows of one seed]]}; the stats are over the finished runs, one
    value per seed (the mean of its runs: `repeats` lists the seeds trained more than once), `left_out`
    counts the others, `errors` those of them that ended in an error. A key that does not apply to a
    run (applies) is None in its setting, and not labelled. Runs of one setting trained on different
    data (their data_digest: the dataset's text changed) are different settings, told apart by
    DATA ('digest=1a2b3c4d5e'); a run whose checkpoint records none joins the setting's only digest."""
    keys = [k for k in varied if k != SEED]
    settings = []
    digests: dict[tuple, list[str]] = {}  # each setting's digests, in first-seen order
    for r in rows:
        config = r.get("config", {})
        setting = {k: r[k] if k in r else config.get(k) if applies(config, k) else None for k in keys}
        settings.append((tuple(map(str, setting.values())), setting))
        if r.get(DIGEST) and r[DIGEST] not in digests.setdefault(settings[-1][0], []):
            digests[settings[-1][0]].append(r[DIGEST])
    split = any(len(d) > 1 for d in digests.values())
    groups: dict[tuple, dict[str, Any]] = {}
    for r, (key, setting) in zip(rows, settings):
        seen = digests.get(key, [])
        digest = r.get(DIGEST) or (seen[0] if len(seen) == 1 else None)
        if split:  # (every setting has the key, for settings.png's lines; None where its data never changed)
            setting = {**setting, DATA: (digest or "unrecorded")[:SHOWN_DIGEST] if len(seen) > 1 else None}
        group = groups.setdefault((*key, digest), {"setting": setting, "runs": []})
        group["runs"].append(r)
    for g in groups.values():
        g["label"] = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in g["setting"].items()
                               if v is not None) or "all runs"
        finished = [r for r in g["runs"] if finished_run(r)]
        g["left_out"] = len(g["runs"]) - len(finished)
        g["errors"] = sum(map(ended_in_error, g["runs"]))
        seeds = runs_by_seed(finished)
        g["n"] = len(seeds)
        g["repeats"] = [same for same in seeds if len(same) > 1]
        g["stats"] = {m: within_bounds(m, stats(seed_means(finished, m))) for m in SUMMARY_METRICS}
        heads = Counter(r["attribute_head"] for r in g["runs"] if r.get("attribute_head"))
        g["attribute_heads"] = ", ".join(f"{h}×{c}" if c > 1 else h for h, c in heads.most_common())
    return list(groups.values())


def comparable(a: dict[str, Any], b: dict[str, Any], metric: str) -> bool:
    """Can settings a and b be compared in `metric`: both with a 95% interval (n >= 2), and, for a
    loss, the same data and tokens (a loss is per token: a character's and a word's do not compare)?"""
    if a["stats"][metric]["lo"] is None or b["stats"][metric]["lo"] is None:
        return False
    return "loss" not in metric or same_data(a, b)


def same_data(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Were settings a and b trained on the same data and tokens (PER_TOKEN), so that their losses compare?"""
    return all(a["setting"].get(k) == b["setting"].get(k) for k in PER_TOKEN)


def one_data(groups: Sequence[dict[str, Any]]) -> bool:
    """Were all the settings trained on the same data and tokens (same_data), so that all their losses compare?"""
    return all(same_data(a, b) for i, a in enumerate(groups) for b in groups[i + 1:])


def comparable_pairs(groups: Sequence[dict[str, Any]], metrics: Sequence[str] = DIFFERENCES_IN) -> int:
    """How many (metric, pair of settings) differences() can test (comparable)."""
    return sum(comparable(a, b, m) for m in metrics for i, a in enumerate(groups) for b in groups[i + 1:])


def expected_by_chance(groups: Sequence[dict[str, Any]], metrics: Sequence[str]) -> float:
    """How many of the comparable pairs differences() tests would be apart were every setting alike (chance of
    each pair's two n: a lost seed makes it likelier)."""
    return sum(chance(a["stats"][m]["n"], b["stats"][m]["n"]) for m in metrics
               for i, a in enumerate(groups) for b in groups[i + 1:] if comparable(a, b, m))


def differences(groups: Sequence[dict[str, Any]], metrics: Sequence[str] = DIFFERENCES_IN) -> list[str]:
    """'metric: A mean [lo, hi] vs B mean [lo, hi]' for each comparable pair of settings whose 95%
    intervals do not overlap, with the digits that show them apart (apart_digits)."""
    lines = []
    for m in metrics:
        for i, a in enumerate(groups):
            for b in groups[i + 1:]:
                sa, sb = a["stats"][m], b["stats"][m]
                if not comparable(a, b, m):
                    continue
                if sa["hi"] < sb["lo"] or sb["hi"] < sa["lo"]:
                    d = apart_digits(m, *((sa["hi"], sb["lo"]) if sa["hi"] < sb["lo"] else (sb["hi"], sa["lo"])))
                    lines.append(f"{m}: {a['label']} {_mean_and_interval(m, sa, d)} vs {b['label']} "
                                 f"{_mean_and_interval(m, sb, d)}")
    return lines


def _mean_and_interval(metric: str, s: dict[str, Any], extra: int) -> str:
    """'1.30x [1.30x, 1.30x]': a setting's mean and 95% interval, `extra` digits past the column's own."""
    return f"{_num(metric, s['mean'], extra)} [{_num(metric, s['lo'], extra)}, {_num(metric, s['hi'], extra)}]"


def apart_digits(metric: str, below: float, above: float) -> int:
    """How many digits past the column's own _num needs to show below < above (two intervals' facing
    bounds): a listed difference read '1.3x [1.3x, 1.3x] vs 1.3x [1.3x, 1.3x]' at the table's digits."""
    def shown(x: float, extra: int) -> float:
        return float(_num(metric, x, extra).rstrip("%x").replace(",", ""))
    return next((d for d in range(6) if shown(below, d) < shown(above, d)), 6)


# ---- tables ----


def times(x: float, extra: int = 0) -> str:
    """A ratio: 1.64 -> '1.6x'; under 1 to two significant digits, never '1.0x' ('0.96x', '0.6x',
    '0.031x'): a head that looks more at the distractor must not read as even. `extra` digits more.
    Rounded as `rounded` rounds (the ratio 2.25 in results.csv: 2.3x, not Python's 2.2x)."""
    if x >= 1 or not math.isfinite(x):
        return f"{rounded(x, 1 + extra)}x"
    exact = Decimal(repr(float(x)))
    shown = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 1 - extra), rounding=ROUND_HALF_UP)
    return ("0." + "9" * (2 + extra) if shown >= 1 else f"{shown.normalize():f}") + "x"


def rounded(value: float, places: int, scale: int = 1) -> str:
    """`value` times `scale` to `places` decimals, rounded as a reader rounds the number the CSV files hold:
    the mean 1.75115 (summary.csv) showed as 1.7511, its float being 1.75114999...; now 1.7512."""
    if not math.isfinite(value):
        return f"{value * scale:.{places}f}"
    exact = Decimal(repr(float(value))) * scale
    return f"{exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):f}"


def _num(column: str, value: Any, extra: int = 0) -> str:
    """A number as the column shows it: shares in percent, losses to 4 decimals, ratios to 1; `extra`
    decimals more (a listed difference: apart_digits)."""
    if column in ("antecedent", "distractor", "other", "attribute_share"):
        return f"{rounded(value, 1 + extra, 100)}%"
    if column in ("best_val_loss", "final_train_loss"):
        return rounded(value, 4 + extra)
    if column in ("attribute_ratio", "name_ratio"):
        return times(value, extra)
    if column in ("params", "tokens_per_s"):  # (a median of two rates ends in .5: 28928.5 is 28,929)
        return f"{int(Decimal(rounded(value, 0))):,}" if math.isfinite(value) else f"{value:,.0f}"
    if column == "wall_s":
        return rounded(value, 1)
    return str(value)


def _spread(column: str, std: float) -> str:
    """A standard deviation as its column shows numbers, but a ratio's as a plain number (a spread is not a
    multiple: '± 0.001x') and one that would read 0 to one significant digit ('0.00004', not '0.0000')."""
    if column in ("attribute_ratio", "name_ratio"):
        return f"{std:.2g}"
    shown = _num(column, std)
    if any(ch in "123456789" for ch in shown):
        return shown
    return f"{100 * std:.1g}%" if shown.endswith("%") else f"{std:.1g}"


def _fmt(column: str, value: Any, markdown: bool) -> str:
    """One cell of a per-run table: as _num shows it in Markdown, plain numbers in CSV."""
    if value is None:
        return ""
    if not markdown:
        return str(value)  # every digit of a float, as summary.csv
    if column == DIGEST:
        return str(value)[:SHOWN_DIGEST]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _num(column, value)
    return markdown_cell(value)


def markdown_cell(value: Any) -> str:
    """Text for a Markdown table cell: a | would end the cell, a line break the row, a backslash before a
    | would eat it, and a < start HTML (`<!--` hid the rest of the page); a run folder may hold any."""
    text = " ".join(str(value).splitlines()).replace("\\", "\\\\").replace("|", "\\|")
    return text.replace("<", "&lt;")


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
    """One row per setting: n, then each metric as 'mean ± std [95% interval]', followed by its own n
    where that is not the setting's (the probe's figures of a seed whose probe.json is missing)."""
    lines = ["| setting | n | " + " | ".join(metrics) + " |", "| --- | ---: | " + " | ".join("---:" for _ in metrics) + " |"]
    for g in groups:
        cells = []
        for m in metrics:
            s = g["stats"][m]
            if s["mean"] is None:
                cells.append("")
            elif s["std"] is None:
                cells.append(_num(m, s["mean"]))
            elif s["lo"] is None:  # every seed the same value
                cells.append(f"{_num(m, s['mean'])} ± 0 (no interval)")
            else:  # (digits enough to tell the bounds apart: `1.6x ± 0.00043 [1.6x, 1.6x]` read as no spread)
                d = apart_digits(m, s["lo"], s["hi"])
                cells.append(f"{_num(m, s['mean'], d)} ± {_spread(m, s['std'])} [{_num(m, s['lo'], d)}, "
                             f"{_num(m, s['hi'], d)}]")
            if s["mean"] is not None and s["n"] != g["n"]:
                cells[-1] += f" (n={s['n']})"
        lines.append(f"| {markdown_cell(g['label'])} | {g['n']} | " + " | ".join(cells) + " |")
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
    text = "Per setting over seeds: mean ± std [95% interval of the mean]; n finished runs' seeds."
    if any(g["stats"][m].get("cut") for g in groups for m in metrics):  # (few seeds: t's interval is wide)
        text += " An interval is cut at 0 (a share's also at 100%), which its metric cannot pass."
    text += "\n\n"
    text += summary_markdown(groups, metrics)
    errors = sum(g["errors"] for g in groups)
    unfinished = sum(g["left_out"] for g in groups) - errors
    if unfinished:
        text += (f"\n{unfinished} run(s) that did not finish (see their status above) are left out of these "
                 f"figures: finish them (the sweep's command again resumes the stopped ones and starts those not "
                 f"started; train.py CONFIG --resume, a stopped one alone).\n")
    if errors:  # (a diverged run resumed diverges again: "finish them" would send the user round in circles)
        text += (f"\n{errors} run(s) that ended in an error (see their status above) are left out of these "
                 f"figures: a rerun repeats the error until its cause is fixed.\n")
    if any(g["stats"][m]["std"] == 0 for g in groups for m in metrics):
        text += ("\nA setting whose seeds all gave the same value (± 0) has no interval in that metric, and is not "
                 "compared in it: a spread of 0 is not a measured spread.\n")
    if probed:
        text += "\nBest head on the antecedent's attribute, per run: " + "; ".join(
            f"{g['label']}: {g['attribute_heads']}" for g in groups) + "\n"
    shown = [m for m in DIFFERENCES_IN if m in metrics]
    tested, pairs = comparable_pairs(groups, shown), len(shown) * len(groups) * (len(groups) - 1) // 2
    diffs = differences(groups)
    if diffs:
        return text + (f"\nDifferences beyond the 95% intervals (the two intervals do not overlap; "
                       f"{count(tested, 'comparison')} of a pair of settings in a metric, not corrected for their "
                       f"number: the intervals of two settings alike are apart in about 1 comparison of "
                       f"{1 / CHANCE:.0f} (more often where their numbers of seeds differ), so about "
                       f"{expected_by_chance(groups, shown):.2g} of these are expected by chance alone):\n"
                       ) + "".join(f"- {d}\n" for d in diffs)
    if len(groups) < 2:
        return text
    losses = ", and for a loss the same data and tokens" if not one_data(groups) else ""
    if not tested:  # (no interval on one side of every pair: nothing was tested)
        return text + (f"\nNo two settings could be compared in {', '.join(shown)}: a comparison needs a 95% "
                       f"interval on both sides, 2 finished seeds or more each (n above), not all alike (± 0)"
                       f"{losses}.\n")
    among = (f", of the pairs with an interval on both sides: 2 finished seeds or more, not all alike{losses}"
             if tested < pairs else "")
    compared = [m for m in shown if comparable_pairs(groups, [m])]  # (a metric no pair compares in is no finding)
    unseen = [m for m in shown if m not in compared]
    among += f"; {', '.join(unseen)} not compared: no pair has an interval on both sides" if unseen else ""
    return text + (f"\nNo two settings differ beyond their 95% intervals in {', '.join(compared)} "
                   f"({count(tested, 'comparison')}{among}). Intervals that overlap do not show two settings equal: "
                   f"a difference smaller than the seeds' spread goes unseen.\n")


def repeats_note(groups: Sequence[dict[str, Any]]) -> str:
    """A note for each seed trained more than once in a setting (the same config twice): its runs
    count as one seed, their mean; two would be a spread of 0 and an interval that is no interval."""
    notes = ""
    for g in groups:
        for same in g["repeats"]:
            names = [str(r.get("run", "?")) for r in same]
            times_ = "twice" if len(same) == 2 else f"{len(same)} times"
            notes += (f"note: {', '.join(names[:-1])} and {names[-1]} ({g['label']}) share train.seed="
                      f"{seed_of(same[0])}: the same training {times_}, counted as one seed (their mean), not "
                      f"{len(same)}\n")
    return notes


def one_run_per_seed(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs with each seed's repeats merged into one whose val loss is their mean at each step:
    the val-loss plot's mean and band are over seeds."""
    return [same[0] if len(same) == 1 else {"metrics": [{"step": step, "val_loss": statistics.fmean(losses)}
                                                        for step, losses in sorted(val_losses_by_step(same).items())]}
            for same in runs_by_seed(runs)]


def seeds_val_loss_png(groups: Sequence[dict[str, Any]]) -> bytes | None:
    """plots.val_loss_png over one run per seed (one_run_per_seed) of the finished runs, those the
    summary counts (its n); a setting none of whose runs finished is drawn from its runs all the
    same, said to be unfinished, and left out of the y-range (a diverged run's 1e11). None where no
    run has a val loss yet (an empty picture would pass for the report's curves: pictures_note)."""
    if not any(val_losses_by_step(g["runs"]) for g in groups):
        return None
    drawn = []
    for g in groups:
        finished = [r for r in g["runs"] if finished_run(r)]
        drawn.append({**g, "runs": one_run_per_seed(finished or g["runs"]), "n": len(runs_by_seed(finished)),
                      "finished": bool(finished), "left_out": len(g["runs"]) - len(finished),
                      "failed": not finished and any(map(ended_in_error, g["runs"]))})
    return val_loss_png(drawn, apart=not one_data(groups))


def write_report(rows: Sequence[dict[str, Any]], varied: Sequence[str], out_dir: str | Path,
                 title: str, skipped: Sequence[str] = ()) -> tuple[str, list[Path]]:
    """Write results.md (per run, then per setting over seeds), results.csv, summary.csv,
    val_loss.png and settings.png (each setting's result with its interval) into out_dir, all or
    none of them (checkpoint.atomic_write_all); return (the Markdown text printed, the plots drawn: none without
    matplotlib). Each row holds 'run', the `varied` config keys, RESULT_COLUMNS and, when probed,
    the probe's columns. `skipped`: a sweep's notes on the combinations it did not train (results.md
    lists them: the grid looked smaller, its report silent on them)."""
    out_dir = Path(out_dir)
    for r in rows:  # the varied values come from each run's config unless the row sets them
        config = r.get("config", {})
        for k in varied:  # (none where the key does not apply: a char run's bpe_vocab_size)
            r[k] = r.get(k, config.get(k)) if k in NEVER_COMPARED or applies(config, k) else None
    probed = any(r.get("antecedent") is not None for r in rows)
    changed = data_changed(rows)
    columns = ["run", *varied, *([DIGEST] if changed else []), *RESULT_COLUMNS, *(PROBE_COLUMNS if probed else [])]
    metrics = [m for m in SUMMARY_METRICS if probed or m in RESULT_COLUMNS]
    groups = group_by_setting(rows, varied)
    text = table_markdown(rows, columns)
    text += ("\nbest_val_loss: the lowest of a run's evaluations, each an estimate on train.eval_iters batches (the "
             "lowest of several noisy estimates reads a little low); final_train_loss: the last evaluation's; wall_s: "
             "seconds of training from the first step, evaluations included, setup not, over all its sessions.\n")
    started = sorted({r["threads"] for r in rows if isinstance(r.get("threads"), int)})
    if len(started) > 1:  # two at a time on 2 cores read 3x slower than the same setting alone, with no word
        text += (f"\nThe runs started on different numbers of threads ({', '.join(map(str, started))}: sweep.py "
                 f"--jobs, train.threads, or cores other processes held): their tokens_per_s and wall_s show that as "
                 f"much as their settings.\n")
    per_token = [k for k in varied if k in PER_TOKEN
                 and len({str(r[k]) for r in rows if r[k] is not None}) > 1]
    if changed:  # the same data settings, another text: the dataset file was edited between the runs
        per_token.append(f"the data they were trained on ({DIGEST}: the dataset's text changed between them, "
                         f"under the same data settings)")
    if per_token:  # a loss is per token: a character's and a word's do not compare
        text += (f"\nThe runs differ in {', '.join(per_token)}: their losses are per token of different "
                 f"vocabularies or texts, and do not compare as numbers.\n")
    if probed:  # what the probe's columns are, and what they are not
        text += ("\nreferences: the held-out references the probe measured, of which antecedent, distractor and other "
                 "are the shares; attribute_share: the best head's (attribute_head's) mean weight on the antecedent's "
                 "attribute; attribute_ratio, name_ratio: the best head's mean weight on the antecedent's tokens over "
                 "its mean weight on the distractor's, which counts 0 where the distractor is outside the window; "
                 "probe.py RUN also gives the ratio over the references with both in the window.\n")
        stories = sorted({r["probe_stories"] for r in rows if r.get("probe_stories") is not None})
        if len(stories) > 1:  # (sweep.py --probe-stories of another call, or probe.py's): other held-out sets
            text += (f"\nThe runs were probed on different numbers of held-out stories "
                     f"({', '.join(map(str, stories))}): their probe figures are of different reference sets, and "
                     f"compare only roughly.\n")
    if notes := repeats_note(groups):
        text += "\n" + notes
    if max(len(runs_by_seed(g["runs"])) for g in groups) > 1:  # several seeds per setting
        text += "\n" + summary_text(groups, metrics, probed)
    elif len(groups) > 1:  # (the standard: a training result is a mean over seeds, or said to be a single run)
        text += ("\nOne run per setting: single runs, whose differences may be the seed's alone; sweep.py --seeds 3 "
                 "or more gives each setting a mean and a spread over seeds.\n")
    pictures = {"val_loss.png": seeds_val_loss_png(groups),
                "settings.png": settings_png(groups, apart=not one_data(groups))}
    drawn = {name: png for name, png in pictures.items() if png is not None}
    if skipped:
        text += (f"\nNot trained: {len(skipped)} combination(s) of the grid, skipped:\n"
                 + "".join(f"- {markdown_cell(line.removeprefix('skip '))}\n" for line in skipped))
    files = {"results.md": f"# {title}\n\n{text}", "results.csv": table_csv(rows, columns),
             "summary.csv": summary_csv(groups, metrics)}
    # (a path in the text that is not UTF-8, a name's byte 0xff, is written as its own bytes: atomic_write_text)
    atomic_write_all(out_dir, {**{n: t.encode("utf-8", "surrogateescape") for n, t in files.items()}, **drawn},
                     # (a picture not drawn this time: an earlier report's would pass for this one's)
                     drop=[name for name in pictures if name not in drawn], what="report")
    return text, [out_dir / name for name in drawn]


def pictures_note(drawn: Sequence[Path]) -> str | None:
    """The line that says why a report has no val_loss.png: matplotlib is missing, or no run has a val
    loss yet (killed before its first evaluation); None where it was drawn."""
    if any(Path(p).name == "val_loss.png" for p in drawn):
        return None
    if not can_plot():
        return MATPLOTLIB_NOTE.format(name="val_loss.png and settings.png")
    return "no val_loss.png: no run has a val loss yet (nothing in their metrics.csv to draw)"


# ---- writing a report's files together ----


REPORT_FILES = ("results.md", "results.csv", "summary.csv", "val_loss.png", "settings.png")
TITLES = {"# Sweep of ": "sweep", "# Comparison of ": "comparison"}  # results.md's first line, by its writer


def write_val_loss(groups: Sequence[dict[str, Any]], out_dir: Path) -> Path | None:
    """The val-loss picture alone (compare.py --plot-only), or None without matplotlib."""
    png = seeds_val_loss_png(groups)
    if png is None:
        return None
    atomic_write_all(out_dir, {"val_loss.png": png}, what="report")
    return out_dir / "val_loss.png"


# ---- telling a report's files from a user's ----


BELOW_DEPTH, BELOW_FOLDERS = 6, 10_000  # how deep and how many folders report_under_way_below looks through


def report_under_way_below(out: Path) -> tuple[Path, str] | None:
    """A folder inside `out` where a sweep or a comparison is writing now, and its process: each run that
    sweep starts refuses a folder above it held by another (check_run_dir), so a report on `out` would make
    its later runs fail. Looked for BELOW_DEPTH folders deep, in at most BELOW_FOLDERS folders (a sweep's
    folder is a few below out/; a home folder given as --out is not searched whole)."""
    top, seen = os.path.abspath(out), 0
    for folder, subfolders, files in os.walk(top):
        seen += 1
        if seen > BELOW_FOLDERS:
            return None
        if folder.count(os.sep) - top.count(os.sep) >= BELOW_DEPTH:
            subfolders.clear()
        if folder != top and REPORT_LOCK in files and (pid := lock_holder(Path(folder), REPORT_LOCK)) is not None:
            return Path(folder), pid
    return None


def check_report_folder(out: Path, its_runs: bool = False, plot_only: bool = False) -> None:
    """Refuse, as the --out of a report (sweep.py, compare.py), a folder holding a training run:
    the report's files would mix with the run's; a file of a report's names that no report wrote
    (the user's own results.md or val_loss.png), which it would overwrite; and what holds a report of
    the other kind: for a comparison, a sweep's runs, whose report it would replace; for a sweep
    (`its_runs`: its own runs are there), a comparison's report; a Hugging Face export's folder, or a
    folder inside a run (its files and the report's would mix). `plot_only`: compare.py --plot-only,
    which writes val_loss.png alone: into a report's folder, that would mix two reports (a report
    of the same runs is drawn again by compare.py without --plot-only)."""
    writes = ["val_loss.png"] if plot_only else REPORT_FILES
    if (pid := lock_holder(out)) is not None:  # (a training's first seconds: its folder holds only .lock)
        raise UserError(f"--out={str(out)!r} is the folder of a training under way (process {pid}); a report "
                        f"written there would mix with the run's files: choose another folder")
    for folder in Path(os.path.abspath(out)).parents:  # a running sweep's (or comparison's) folder, above
        if (pid := lock_holder(folder, REPORT_LOCK)) is not None:
            raise UserError(f"--out={str(out)!r} is inside {folder}, the folder a sweep or a comparison (process "
                            f"{pid}) is writing now: its runs or report would meet this one; choose a folder "
                            f"outside it")
    if (below := report_under_way_below(out)) is not None:  # its runs would meet this folder's lock, above them
        raise UserError(f"--out={str(out)!r} holds {below[0]}, the folder a sweep or a comparison (process "
                        f"{below[1]}) is writing now: the runs it starts would be refused while this one holds "
                        f"the folder above them; choose another folder, or wait for it to end")
    if any((out / name).is_file() for name in CHECKPOINTS):
        raise UserError(f"--out={str(out)!r} holds a training run (its ckpt.pt); a report written there would "
                        f"mix with the run's files: choose another folder")
    if (out / "metrics.csv").is_file() or ((out / "config.yaml").is_file() and not users_config(out)):
        raise UserError(f"--out={str(out)!r} holds a training run's files (config.yaml, metrics.csv: one killed "
                        f"before its first checkpoint, or whose checkpoints were removed); a report written there "
                        f"would mix with them: choose another folder")
    if is_hf_folder(out):
        raise UserError(f"--out={str(out)!r} holds a Hugging Face model (config.json and its weights, as export.py "
                        f"writes); a report written there would mix with it: choose another folder")
    if ckpt := run_around(out, "--out"):
        raise UserError(f"--out={str(out)!r} is inside the training run {ckpt.parent} (its {ckpt.name}); a report "
                        f"written there would sit among the run's files: choose a folder outside it")
    held = [] if its_runs else runs_inside(out)
    if held:  # a sweep's, whose report this one would replace, or a folder of runs, among which it would sit
        whose = "a sweep's runs" if report_maker(out) == "sweep" else "runs in its folders"
        raise UserError(f"--out={str(out)!r} holds {whose} ({first_few(held)}): this report would "
                        f"{'mix its val_loss.png with them' if plot_only else 'mix with them'}; choose another --out")
    linked = [name for name in REPORT_FILES if (out / name).is_symlink()] if out.is_dir() else []
    if linked:  # (the write follows the link: another folder's report would get this one's tables, say)
        link = out / linked[0]
        raise UserError(f"--out={str(out)!r} holds {linked[0]}, a link ({link} -> {os.readlink(link)}): the report "
                        f"would write through it into another file, while its other files stay here; remove the "
                        f"link, or choose another --out")
    if out.is_dir() and (foreign := foreign_report_file(out, writes)) is not None:
        picture = (" (a picture of yours, or one drawn before reports marked theirs)"
                   if foreign.endswith(".png") and (out / foreign).is_file() else "")
        raise UserError(f"--out={str(out)!r} holds {foreign}, which is not from a tinygpt report{picture}: the report "
                        f"would overwrite it; move it away, or choose another --out")
    if its_runs and out.is_dir() and report_maker(out) == "comparison":
        raise UserError(f"--out={str(out)!r} holds a comparison's report (compare.py's results.md), which this "
                        f"sweep's would replace; choose another --out")
    if plot_only and out.is_dir() and report_maker(out) is not None:
        raise UserError(f"--out={str(out)!r} holds a report (results.md): --plot-only would replace its val_loss.png "
                        f"alone, beside that report's tables; choose another --out, or leave out --plot-only to "
                        f"replace the whole report")


def report_maker(out_dir: Path) -> str | None:
    """What wrote out_dir's results.md, by its title: 'sweep', 'comparison', or None (no report's)."""
    if (first := first_line(out_dir / "results.md", 65536)) is None:
        return None
    return next((maker for title, maker in TITLES.items() if first.startswith(title)), None)


def is_report_file(out_dir: Path, name: str) -> bool:
    """Did a report write out_dir's file `name` (one of REPORT_FILES)? By its content: results.md's
    title, the CSV's header, the picture's mark; a picture from before the mark by matplotlib's
    name in it, beside a report's results.md."""
    path = out_dir / name
    try:
        if name == "results.md":
            return report_maker(out_dir) is not None
        if name.endswith(".csv"):
            header = next(csv.reader([first_line(path, 65536) or ""]), [])
            first, wanted = ("run", RESULT_COLUMNS) if name == "results.csv" else ("setting", ["best_val_loss_mean"])
            return header[:1] == [first] and set(wanted) <= set(header)
        if png_marked(path, PNG_MARK):
            return True
        with open(path, "rb") as f:  # (matplotlib writes its tEXt entries before the image data)
            return b"Software\x00Matplotlib" in f.read(65536) and report_maker(out_dir) is not None
    except (OSError, csv.Error):  # unreadable: it cannot be told ours
        return False


def foreign_report_file(out_dir: Path, names: Sequence[str] = REPORT_FILES) -> str | None:
    """The first of `names` (REPORT_FILES: where a report writes) in out_dir that no report wrote
    (a user's results.md, picture or folder of that name), or None."""
    for name in names:
        path = out_dir / name
        if path.exists() and not (path.is_file() and is_report_file(out_dir, name)):
            return name
    return None

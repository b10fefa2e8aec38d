"""Results tables of several runs (sweep.py, compare.py): results.md, results.csv and the
val-loss plot, written into one folder by `write_report`."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Sequence

from tinygpt.checkpoint import atomic_write_text
from tinygpt.plots import plot_val_loss

# what every results table shows after the run name and the varied config values
RESULT_COLUMNS = ["params", "status", "best_val_loss", "final_train_loss", "tokens_per_s", "wall_s"]
NEVER_COMPARED = {"train.out_dir"}  # differs between any two runs by construction


def differing_keys(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Config keys whose values are not the same in all runs (train.out_dir excepted), in schema order."""
    configs = [s["config"] for s in summaries if s.get("config")]
    if len(configs) < 2:
        return []
    keys = [k for k in configs[0] if k not in NEVER_COMPARED]
    return [k for k in keys if any(c.get(k) != configs[0].get(k) for c in configs[1:])]


# ---- tables ----


def _fmt(column: str, value: Any, markdown: bool) -> str:
    """One cell: losses to 4 decimals, counts with thousands separators in Markdown."""
    if value is None:
        return ""
    if column in ("best_val_loss", "final_train_loss"):
        return f"{value:.4f}"
    if column in ("params", "tokens_per_s"):
        return f"{value:,.0f}" if markdown else f"{value:.0f}"
    if column == "wall_s":
        return f"{value:.1f}"
    text = str(value)
    return text.replace("|", "\\|") if markdown else text


def table_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows -> a Markdown table with `columns` in order (numbers right-aligned)."""
    numeric = {"params", "best_val_loss", "final_train_loss", "tokens_per_s", "wall_s"}
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


def write_report(rows: Sequence[dict[str, Any]], varied: Sequence[str], out_dir: str | Path,
                 title: str) -> tuple[str, Path | None]:
    """Write results.md, results.csv and val_loss.png into out_dir; return (the Markdown table, the
    plot path or None). Each row holds 'run', the `varied` config keys and RESULT_COLUMNS."""
    out_dir = Path(out_dir)
    columns = ["run", *varied, *RESULT_COLUMNS]
    for r in rows:  # the varied values come from each run's config unless the row sets them
        for k in varied:
            r.setdefault(k, r.get("config", {}).get(k))
    table = table_markdown(rows, columns)
    atomic_write_text(out_dir / "results.md", f"# {title}\n\n{table}")
    atomic_write_text(out_dir / "results.csv", table_csv(rows, columns))
    png = plot_val_loss(rows, out_dir / "val_loss.png", varied)
    return table, png



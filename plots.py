"""Run summaries, results tables and loss plots: shared by sweep.py and compare.py, and `plot_run`
for a single run.

    from plots import plot_run
    plot_run("out/stories")   # -> out/stories/loss.png, or None when matplotlib is not installed

`summarize_run` reads a run directory's config.yaml and metrics.csv only (no checkpoint, no
training): parameters, status, best val loss, final train loss, median tokens/s of the log rows and
wall time. `write_report` turns summaries into results.md, results.csv and val_loss.png in one folder.
matplotlib is optional: without it the plot functions return None and the tables still come out.
"""
from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path
from typing import Any, Sequence

import torch

from checkpoint import atomic_write, atomic_write_text, load_checkpoint, resolve_checkpoint
from config import Config, ModelConfig, config_from_dict, config_to_dict, read_yaml
from errors import UserError
from model import GPT

# what every results table shows after the run name and the varied config values
RESULT_COLUMNS = ["params", "status", "best_val_loss", "final_train_loss", "tokens_per_s", "wall_s"]
NEVER_COMPARED = {"train.out_dir"}  # differs between any two runs by construction
MATPLOTLIB_NOTE = "matplotlib is not installed: no {name} (pip install matplotlib); the tables are complete"

# ---- reading a run ----


def read_run_metrics(run_dir: str | Path) -> list[dict[str, float | None]]:
    """metrics.csv -> rows of floats (None where a column is empty: log rows have no val_loss,
    eval rows no tokens_per_s); [] when the file is missing."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return []
    rows = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            try:
                rows.append({k: float(v) if v not in ("", None) else None for k, v in raw.items()})
            except ValueError:
                raise UserError(f"{path} has a malformed row {raw}; it is not a tinygpt metrics file") from None
    return rows


def read_run_config(run_dir: str | Path) -> Config:
    """config.yaml of a run (the resolved config) -> Config, with model.vocab_size from the file
    when it records one, else from the tokenizer in the run's checkpoint (0 when there is none)."""
    run_dir = Path(run_dir)
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory: it has no config.yaml (train into it first)")
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise UserError(f"{path} must hold a mapping with sections model, data, train")
    raw = {s: dict(v) if isinstance(v, dict) else v for s, v in raw.items()}
    vocab_size = raw["model"].pop("vocab_size", 0) if isinstance(raw.get("model"), dict) else 0
    cfg = config_from_dict(raw, str(path))
    if not vocab_size and any((run_dir / name).is_file() for name in ("best.pt", "ckpt.pt")):
        vocab_size = load_checkpoint(resolve_checkpoint(run_dir))["tokenizer"].get("vocab_size", 0)
    cfg.model.vocab_size = int(vocab_size or 0)
    return cfg


def flat_config(cfg: Config) -> dict[str, Any]:
    """Config -> {'model.n_head': 4, ...} in schema order."""
    return {f"{s}.{k}": v for s, values in config_to_dict(cfg).items() for k, v in values.items()}


def count_params(cfg: ModelConfig) -> int | None:
    """Parameters of GPT(cfg), built on the meta device (no memory, no init); None without a vocab."""
    if cfg.vocab_size <= 0:
        return None
    with torch.device("meta"):
        return GPT(cfg).num_params()


def summarize_run(run_dir: str | Path, label: str | None = None) -> dict[str, Any]:
    """One results row for a run directory, plus its metrics and flat config for plots and columns."""
    run_dir = Path(run_dir)
    cfg = read_run_config(run_dir)
    metrics = read_run_metrics(run_dir)
    val = [r["val_loss"] for r in metrics if r.get("val_loss") is not None]
    train = [r["train_loss"] for r in metrics if r.get("train_loss") is not None]
    tok_s = [r["tokens_per_s"] for r in metrics if r.get("tokens_per_s") is not None]
    elapsed = [r["elapsed_s"] for r in metrics if r.get("elapsed_s") is not None]
    last_step = int(metrics[-1]["step"]) if metrics else 0
    status = "done" if metrics and last_step >= cfg.train.max_iters else f"step {last_step}/{cfg.train.max_iters}"
    return {
        "run": label if label is not None else str(run_dir),
        "params": count_params(cfg.model),
        "status": status,
        "best_val_loss": min(val) if val else None,
        "final_train_loss": train[-1] if train else None,  # the last row: the final eval's estimate
        "tokens_per_s": statistics.median(tok_s) if tok_s else None,
        "wall_s": max(elapsed) if elapsed else None,  # train.py's elapsed_s carries over a resume
        "config": flat_config(cfg),
        "metrics": metrics,
    }


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
    png = plot_val_loss(rows, out_dir / "val_loss.png")
    return table, png


# ---- plots (matplotlib optional) ----


def _new_figure():
    """A matplotlib Figure without pyplot (no GUI backend, no global state), or None."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure(figsize=(7, 4.5), dpi=100, layout="tight")


def _save(fig, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write(path, lambda f: f.write(buf.getvalue()))
    return path


def plot_val_loss(rows: Sequence[dict[str, Any]], path: str | Path) -> Path | None:
    """Val loss vs step, one line per run (rows from summarize_run) -> path, or None without matplotlib."""
    fig = _new_figure()
    if fig is None:
        return None
    ax = fig.subplots()
    for r in rows:
        evals = [m for m in r.get("metrics", []) if m.get("val_loss") is not None]
        if evals:
            ax.plot([m["step"] for m in evals], [m["val_loss"] for m in evals], marker=".", label=r["run"])
    ax.set(xlabel="step", ylabel="val loss", title="validation loss")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="small")
    return _save(fig, Path(path))


def plot_run(run_dir: str | Path) -> Path | None:
    """Train and val loss vs step from run_dir/metrics.csv -> run_dir/loss.png; None (nothing
    written) when matplotlib is missing or there are no metrics yet."""
    run_dir = Path(run_dir)
    metrics = read_run_metrics(run_dir)
    fig = _new_figure() if metrics else None
    if fig is None:
        return None
    logs = [m for m in metrics if m.get("tokens_per_s") is not None and m.get("train_loss") is not None]
    evals = [m for m in metrics if m.get("val_loss") is not None]
    ax = fig.subplots()
    if logs:  # the running mean over each log interval, in training mode
        ax.plot([m["step"] for m in logs], [m["train_loss"] for m in logs], label="train", alpha=0.8)
    else:  # no log rows (log_interval > max_iters): the eval estimates
        ax.plot([m["step"] for m in evals], [m["train_loss"] for m in evals], marker=".", label="train (eval)")
    ax.plot([m["step"] for m in evals], [m["val_loss"] for m in evals], marker="o", label="val")
    ax.set(xlabel="step", ylabel="loss (nats/token)", title=f"{run_dir.name or run_dir}: loss")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, run_dir / "loss.png")

"""Attention made visible: query x key tables (text) and heatmaps (PNG), one formatter for all.

The notebook (notebooks/attention_mechanics.ipynb) and `sample.py --show-attention` print through
these functions, so the worked example of docs/design.md and a real model's heads look the same.
A table has one row per query (the position doing the looking: it predicts the next token) and one
column per key (a position it may look at):

    query \\ key  The  cat  sat   on
    The          100    .    .    .
    cat           35   65    .    .
    sat           17   56   28    .
    on            14   24   43   19

Conventions (stated once here, printed by `legend`):
- a cell is the whole percent of its row's attention; every row sums to 100 up to rounding;
- "." is a future key under the causal mask: its weight is exactly 0, not just small ("0" is a
  real key that got under 0.5 %);
- "␣" is a space inside a token label, so "␣the" is the BPE token " the"; a newline is "\\n";
- "earlier" (when a long context is cropped to its last N tokens) is the summed weight on all
  keys before those N, so rows still sum to 100.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Sequence

import torch

from model import HeadTrace, causal_mask

MASKED = "."  # a future key, masked to weight exactly 0
SPACE = "␣"  # a space inside a token label
EARLIER = "earlier"  # the column summing every key before the shown window
CORNER = "query \\ key"
MAX_LABEL = 10  # longer token labels are cut with "…"


# ---- labels ----


def token_label(tokenizer, id: int) -> str:
    """One token as a table label: tokenizer.token_str with spaces shown as ␣, cut to MAX_LABEL."""
    label = tokenizer.token_str(id).replace(" ", SPACE)
    return label if len(label) <= MAX_LABEL else label[:MAX_LABEL - 1] + "…"


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    return [token_label(tokenizer, int(i)) for i in ids]


# ---- text tables ----


def format_grid(cells: Sequence[Sequence[str]], row_labels: Sequence[str], col_labels: Sequence[str],
                corner: str = CORNER) -> str:
    """A grid of strings: row labels left-aligned, cells right-aligned under their column label."""
    assert len(cells) == len(row_labels), f"{len(cells)} rows but {len(row_labels)} row labels"
    assert all(len(row) == len(col_labels) for row in cells), f"rows must have {len(col_labels)} cells"
    first = max([len(corner), *map(len, row_labels)])
    widths = [max([3, len(label), *(len(row[j]) for row in cells)]) for j, label in enumerate(col_labels)]
    lines = [corner.ljust(first) + "".join("  " + lab.rjust(w) for lab, w in zip(col_labels, widths))]
    for label, row in zip(row_labels, cells):
        lines.append(label.ljust(first) + "".join("  " + c.rjust(w) for c, w in zip(row, widths)))
    return "\n".join(line.rstrip() for line in lines)


def _square(values: torch.Tensor, query_labels: Sequence[str], key_labels: Sequence[str] | None,
            mask: torch.Tensor | None) -> tuple[list[str], torch.Tensor]:
    key_labels = list(query_labels if key_labels is None else key_labels)
    assert values.shape == (len(query_labels), len(key_labels)), \
        f"values {tuple(values.shape)} vs {len(query_labels)} query and {len(key_labels)} key labels"
    if mask is None:
        mask = torch.ones(values.shape, dtype=torch.bool)
    assert mask.shape == values.shape, f"mask {tuple(mask.shape)} vs values {tuple(values.shape)}"
    return key_labels, mask.cpu()


def mask_table(mask: torch.Tensor, query_labels: Sequence[str], key_labels: Sequence[str] | None = None) -> str:
    """mask (Tq, Tk) bool, True = may attend -> a ✓/✗ table."""
    key_labels, mask = _square(mask, query_labels, key_labels, mask)
    cells = [["✓" if m else "✗" for m in row] for row in mask.tolist()]
    return format_grid(cells, query_labels, key_labels)


def scores_table(scores: torch.Tensor, query_labels: Sequence[str], key_labels: Sequence[str] | None = None,
                 mask: torch.Tensor | None = None, decimals: int = 2) -> str:
    """Raw scores (Tq, Tk) -> a table with −∞ where the mask is False (what the softmax sees)."""
    key_labels, mask = _square(scores, query_labels, key_labels, mask)
    cells = [[f"{s:.{decimals}f}" if m else "−∞" for s, m in zip(srow, mrow)]
             for srow, mrow in zip(scores.detach().float().cpu().tolist(), mask.tolist())]
    return format_grid(cells, query_labels, key_labels)


def percent_table(weights: torch.Tensor, query_labels: Sequence[str], key_labels: Sequence[str] | None = None,
                  mask: torch.Tensor | None = None) -> str:
    """Attention weights (Tq, Tk), rows summing to 1 -> whole percents, MASKED where mask is False."""
    key_labels, mask = _square(weights, query_labels, key_labels, mask)
    percent = (weights.detach().float().cpu() * 100).round().int().tolist()
    cells = [[str(p) if m else MASKED for p, m in zip(prow, mrow)] for prow, mrow in zip(percent, mask.tolist())]
    return format_grid(cells, query_labels, key_labels)


# ---- real models: crop, tables for every head, heatmaps ----


def crop_last(weights: torch.Tensor, labels: Sequence[str], last: int, mask: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor | None, list[str], list[str]]:
    """Keep the last `last` queries and keys of weights (..., T, T); the weight on the keys cut off
    is summed into a first EARLIER column so that rows still sum to 1.
    -> (weights (..., N, N or N+1), mask of the same trailing shape or None, query labels, key labels)."""
    T = weights.size(-1)
    assert len(labels) == T, f"{len(labels)} labels for {T} positions"
    N = min(last, T)
    rows = weights[..., T - N:, :]  # (..., N, T): the last N queries
    view = rows[..., T - N:]  # (..., N, N)
    query_labels, key_labels = list(labels[T - N:]), list(labels[T - N:])
    view_mask = mask[T - N:, T - N:] if mask is not None else None
    if N < T:
        earlier = rows[..., :T - N].sum(dim=-1, keepdim=True)  # (..., N, 1)
        view = torch.cat([earlier, view], dim=-1)  # (..., N, N+1)
        key_labels = [EARLIER] + key_labels
        if view_mask is not None:  # earlier keys are always allowed under the causal mask
            view_mask = torch.cat([torch.ones(N, 1, dtype=torch.bool, device=view_mask.device), view_mask], dim=-1)
    return view, view_mask, query_labels, key_labels


def legend(shown: int, total: int, causal: bool) -> str:
    """The conventions of the tables, as a paragraph wrapped at 100 characters."""
    parts = [f"{total} tokens" + (f", showing the last {shown}" if shown < total else ""),
             "rows: queries (the position predicting the next token), columns: keys",
             "cells: % of the row's attention (rows sum to 100 up to rounding)"]
    if causal:
        parts.append(f"'{MASKED}' = future key, masked: weight exactly 0")
    else:
        parts.append("no causal mask: every position sees every other")
    parts.append(f"'{SPACE}' = space")
    if shown < total:
        parts.append(f"'{EARLIER}' = summed weight on the {total - shown} keys before")
    return textwrap.fill("; ".join(parts), width=100)


def attention_tables(traces: Sequence[HeadTrace], labels: Sequence[str], last: int = 12,
                     causal: bool = True) -> str:
    """Every layer's and head's weights (batch item 0, T = len(labels)) as percent tables of the
    last `last` tokens, under a legend line."""
    T = len(labels)
    mask = causal_mask(T, T) if causal else None
    blocks = [legend(min(last, T), T, causal)]
    for layer, trace in enumerate(traces):
        att = trace.weights[0].detach().float().cpu()  # (nh, T, T)
        view, view_mask, query_labels, key_labels = crop_last(att, labels, last, mask)
        for head in range(att.size(0)):
            blocks.append(f"layer {layer} head {head}\n"
                          + percent_table(view[head], query_labels, key_labels, view_mask))
    return "\n\n".join(blocks) + "\n"


def heatmap_figure(weights: torch.Tensor, labels: Sequence[str], last: int = 12, causal: bool = True,
                   title: str = ""):
    """One layer's weights (nh, T, T) as a matplotlib Figure: a heatmap per head on a near-square
    grid, cropped like the tables, percent colour scale, masked cells grey. Needs matplotlib
    (raises ImportError without it)."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    nh, T = weights.size(0), weights.size(-1)
    mask = causal_mask(T, T) if causal else None
    view, view_mask, query_labels, key_labels = crop_last(weights.detach().float().cpu(), labels, last, mask)
    percent = view * 100  # (nh, N, K)
    if view_mask is not None:
        percent = percent.masked_fill(~view_mask, float("nan"))  # drawn in the "bad" colour
    N, K = percent.shape[-2:]
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")
    cols = math.ceil(math.sqrt(nh))  # heads on a near-square grid: 4 heads -> 2 x 2
    rows = math.ceil(nh / cols)
    cell = 0.32  # inches per matrix cell
    fig = Figure(figsize=(cols * (cell * K + 1.0) + 1.2, rows * (cell * N + 1.0) + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[nh:]:
        ax.set_visible(False)
    for head, ax in enumerate(axes[:nh]):
        image = ax.imshow(percent[head].numpy(), cmap=cmap, vmin=0, vmax=100)
        ax.set_title(f"head {head}", fontsize=9)
        ax.set_xticks(range(K), key_labels, rotation=90, fontsize=7)
        ax.set_yticks(range(N), query_labels, fontsize=7)
        if K <= 16:  # small enough to print the numbers in the cells
            for i in range(N):
                for j in range(K):
                    value = percent[head, i, j].item()
                    if value == value:  # not NaN (masked)
                        ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=5,
                                color="black" if value > 60 else "white")
    fig.supxlabel("key", fontsize=9)
    fig.supylabel("query", fontsize=9)
    fig.colorbar(image, ax=list(axes[:nh]), label="% of the query's attention", shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def save_heatmaps(traces: Sequence[HeadTrace], labels: Sequence[str], out_dir: str | Path, last: int = 12,
                  causal: bool = True, prefix: str = "attention") -> list[Path]:
    """One PNG per layer, `out_dir/{prefix}_layer{L}.png`, heads as subplots. Needs matplotlib
    (raises ImportError before writing anything without it)."""
    import matplotlib  # noqa: F401  (fail before creating the folder)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for layer, trace in enumerate(traces):
        fig = heatmap_figure(trace.weights[0], labels, last, causal, title=f"layer {layer}")
        path = out_dir / f"{prefix}_layer{layer}.png"
        fig.savefig(path, dpi=100)
        paths.append(path)
    return paths

"""Attention made visible: query x key tables (text) and heatmaps (PNG), one formatter for all.

The notebook (notebooks/attention_mechanics.ipynb) and `sample.py --show-attention` print through
these functions, so the worked example of docs/design.md and a real model's heads look the same;
the HTML explorer (tinygpt/attention_html.py) labels tokens and generation steps with them too.
A table has one row per query (the position doing the looking: it predicts the next token) and one
column per key (a position it may look at):

    query \\ key  The  cat  sat   on
    The          100    .    .    .
    cat           35   65    .    .
    sat           17   56   28    .
    on            14   24   43   19

Conventions (stated once here, printed by `legend`):
- a cell is the whole percent of its row's attention, rounded on its own; a row sums to 100 up to
  that rounding, which adds up over many keys (a row of a hundred small weights can be far off);
- "." is a future key under the causal mask: its weight is exactly 0, not just small ("0" is a
  real key that got under 0.5 %);
- "␣" is a space inside a token label, so "␣the" is the BPE token " the"; a newline is "\\n", a tab
  "\\t", a backslash "\\\\"; "\\xNN" is one byte of a character that BPE split across tokens (é as
  "\\xc3" then "\\xa9"), "\\uNNNN" an invisible character past ASCII (a no-break space "\\u00a0")
  or a "␣" of the text ("\\u2423"); the token "." is quoted, "'.'", not to read as a masked cell;
- "earlier" (when a long context is cropped to its last N tokens) is the summed weight on all
  keys before those N, so rows still sum to 100.
"""
from __future__ import annotations

import io
import math
import re
import textwrap
import unicodedata
from pathlib import Path
from typing import Sequence

import torch

from model import GPT, HeadTrace, Step, causal_mask, next_token_probs
from tinygpt.checkpoint import atomic_write_all, make_folder, remove_empty, sweep_folder_temp_files
from tinygpt.plots import HEATMAP_MARK, controls_shown, fit_width, missing_glyphs_quiet, plain_text, png_marked

MASKED = "."  # a future key, masked to weight exactly 0
SPACE = "␣"  # a space inside a token label
EARLIER = "earlier"  # the column summing every key before the shown window
CORNER = "query \\ key"
MAX_LABEL = 10  # longer token labels are cut with "…"
SHOWN = 16  # the last tokens the tables and heatmaps show by default: the README's example prompt (13) whole
TOP_N = 5  # candidates shown per generation step
MAX_HEATMAP = 64  # tokens a heatmap draws at most: its pixels (and matplotlib's time and memory) grow
# with the square of the tokens; 128 took 2 GB and minutes for 11,000-pixel PNGs nobody can read
MAX_HEATMAP_HEADS = 32  # heads a heatmap draws at most (the first): 64 heads took 40 s and 0.8 GB a layer,
# 128 heads 2 minutes and 1.2 GB, for pictures of 7,000-11,000 pixels a side
# the heatmaps' token labels: monospace, then the sans-serif font for the characters it lacks (DejaVu Sans Mono
# has no Hebrew or Arabic letters: drawn as boxes, where DejaVu Sans has them)
LABEL_FONT = ["monospace", "sans-serif"]
NUMBERED = 24  # tokens up to which a heatmap writes each cell's percent on it (more: too crowded)


@torch.no_grad()
def window_traces(model: GPT, ids: Sequence[int]) -> tuple[list[int], list[HeadTrace]]:
    """The last block_size tokens of `ids` (the most the model sees at once) and every layer's
    HeadTrace over them, through the reference path: weights (1, nh, T, T), outputs (1, nh, T, hs)."""
    window = [int(i) for i in ids[-model.config.block_size:]]
    idx = torch.tensor([window], dtype=torch.long, device=next(model.parameters()).device)  # (1, T)
    return window, model.forward_with_attention(idx)[1]


# ---- labels ----


LABEL_UNIT = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|.)|.", re.DOTALL)  # an escape or a character


def token_label(tokenizer, id: int, cut: int | None = MAX_LABEL) -> str:
    """One token as a table label: tokenizer.token_str with spaces shown as ␣ (a ␣ of the text itself as
    \\u2423: it read as a space), cut with "…" to `cut` terminal columns (None: whole, as --list-vocab lists it)
    between whole escapes: `\\xf0\\x9f\\…` read as a backslash, and 10 CJK characters took 20 columns."""
    label = tokenizer.token_str(id).replace(SPACE, f"\\u{ord(SPACE):04x}").replace(" ", SPACE)
    if cut is None or columns(label) <= cut:
        return label
    end, used = 0, 0
    for unit in LABEL_UNIT.finditer(label):
        used += columns(unit.group())
        if used > cut - 1:  # (one column left for the "…")
            break
        end = unit.end()
    return label[:end] + "…"


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    return [token_label(tokenizer, int(i)) for i in ids]


# ---- generation steps (sample.py --show-steps, the HTML explorer) ----


def sampling_rule(temperature: float, top_k: int | None, top_p: float | None) -> str:
    """What a step's probabilities are, in words."""
    if temperature == 0:
        return "greedy: the argmax; probabilities at temperature 1"
    rule = f"probabilities after temperature {temperature:g}"
    rule += f", top-k {top_k}" if top_k is not None else ""
    return rule + (f", top-p {top_p:g}" if top_p is not None else "")


def step_candidates(step: Step, temperature: float, top_k: int | None, top_p: float | None
                    ) -> tuple[int, float, list[tuple[int, float]]]:
    """One Step of model.generate_steps (batch item 0) -> (chosen id, its probability, the TOP_N most
    likely (id, probability) of those it could draw), probabilities as the token was drawn (next_token_probs)."""
    probs = next_token_probs(step.logits, temperature, top_k, top_p)[0]  # (V,)
    chosen = int(step.token[0])
    top_probs, top_ids = torch.topk(probs, min(TOP_N, probs.numel()))
    # (a token the rule left out, probability 0, was never a candidate: top-k 1 lists one)
    return chosen, float(probs[chosen]), [(int(i), float(q)) for q, i in zip(top_probs, top_ids) if q > 0]


def step_percent(q: float) -> str:
    """A step's probability as `--show-steps` and the attention page print it: a percent to 0.1 ("7.5"), "<0.1"
    where it is not 0 but rounds to it (a weak model's drawn token read 0.0% above candidates at 0.1%). One
    rounding, here: the page once kept 4 digits and rounded again, and 0.07454 read 7.4 beside 7.5."""
    shown = f"{100 * q:.1f}"
    return "<0.1" if shown == "0.0" and q > 0 else shown


# ---- text tables ----


def columns(text: str) -> int:
    """The terminal columns `text` takes (len() counts characters): 2 for a wide one (East Asian wide
    or fullwidth: CJK, most emoji), 0 for a mark drawn on the one before (a combining accent, and the
    marks of combining class 0 too: Thai vowel signs, Devanagari's that sit above or below, an emoji's
    variation selector, as wcwidth counts them), else 1."""
    return sum(0 if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me")
               else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def left(text: str, width: int) -> str:
    """`text` padded on the right to `width` terminal columns (str.ljust counts characters: a row
    holding '猫' or '😀' was a column longer than the others)."""
    return text + " " * (width - columns(text))


def right(text: str, width: int) -> str:
    """`text` padded on the left to `width` terminal columns."""
    return " " * (width - columns(text)) + text


def format_grid(cells: Sequence[Sequence[str]], row_labels: Sequence[str], col_labels: Sequence[str],
                width: int | None = None) -> str:
    """A grid of strings: row labels left-aligned, cells right-aligned under their column label. A
    token whose label is MASKED itself (".") is quoted, so that it does not read as a masked cell.
    `width` (a terminal's columns): rows that would be wider go in blocks of columns, one under the
    other, each with the row labels again (a terminal wrapped each row's last cells onto a line of
    their own, which read as a row); None: every row whole, as a file or a pipe gets it."""
    row_labels, col_labels = ([f"'{label}'" if label == MASKED else label for label in labels]
                              for labels in (row_labels, col_labels))
    assert len(cells) == len(row_labels), f"{len(cells)} rows but {len(row_labels)} row labels"
    assert all(len(row) == len(col_labels) for row in cells), f"rows must have {len(col_labels)} cells"
    first = max([columns(CORNER), *map(columns, row_labels)])
    widths = [max([3, columns(label), *(columns(row[j]) for row in cells)]) for j, label in enumerate(col_labels)]
    blocks, start = [], 0
    while start < len(widths) or not blocks:  # (a block holds at least one column, however narrow the terminal)
        end, used = start + 1, first + 2 + sum(widths[start:start + 1])
        while end < len(widths) and (width is None or used + 2 + widths[end] <= width):
            used, end = used + 2 + widths[end], end + 1
        span = slice(start, end)
        lines = [left(CORNER, first) + "".join("  " + right(lab, w) for lab, w in zip(col_labels[span], widths[span]))]
        for label, row in zip(row_labels, cells):
            lines.append(left(label, first) + "".join("  " + right(c, w) for c, w in zip(row[span], widths[span])))
        blocks.append("\n".join(line.rstrip() for line in lines))
        start = end
    return "\n\n".join(blocks)


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
                  mask: torch.Tensor | None = None, width: int | None = None) -> str:
    """Attention weights (Tq, Tk), rows summing to 1 -> whole percents, MASKED where mask is False."""
    key_labels, mask = _square(weights, query_labels, key_labels, mask)
    percent = (weights.detach().float().cpu() * 100).round().int().tolist()
    cells = [[str(p) if m else MASKED for p, m in zip(prow, mrow)] for prow, mrow in zip(percent, mask.tolist())]
    return format_grid(cells, query_labels, key_labels, width=width)


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
    # (a token spelt like the summed column is quoted, as format_grid quotes a token '.')
    query_labels = [f"'{label}'" if label == EARLIER else label for label in labels[T - N:]]
    key_labels = list(query_labels)
    view_mask = mask[T - N:, T - N:] if mask is not None else None
    if N < T:
        earlier = rows[..., :T - N].sum(dim=-1, keepdim=True)  # (..., N, 1)
        view = torch.cat([earlier, view], dim=-1)  # (..., N, N+1)
        key_labels = [EARLIER] + key_labels
        if view_mask is not None:  # earlier keys are always allowed under the causal mask
            view_mask = torch.cat([torch.ones(N, 1, dtype=torch.bool, device=view_mask.device), view_mask], dim=-1)
    return view, view_mask, query_labels, key_labels


ESCAPED = {"\\n": "newline", "\\t": "tab", "\\r": "carriage return", "\\\\": "backslash"}  # (tokenizer._escape's)


def escapes(labels: Sequence[str], escape: str) -> bool:
    """Does a label hold `escape`, a regex of a backslash escape (say \\\\n), not a literal backslash's '\\\\'
    then the rest (n)?"""
    return any(re.search(r"(?<!\\)(?:\\\\)*" + escape, label) for label in labels)


def shows_bytes(labels: Sequence[str]) -> bool:
    """Does a label hold a \\xNN escape (tokenizer._escape: one byte of a character that BPE split
    across tokens, or a control character), not a literal backslash's '\\\\'?"""
    return escapes(labels, r"\\x[0-9a-f]{2}")


def label_notes(labels: Sequence[str]) -> list[str]:
    """What each escape that `labels` hold stands for, one note per kind: the tables' legend and the
    explorer page's (tinygpt/attention_html.py) both say them."""
    notes = [f"'{escape}' = {name}" for escape, name in ESCAPED.items() if escapes(labels, re.escape(escape))]
    if shows_bytes(labels):
        notes.append("'\\xNN' = one byte: of a character split across tokens, or a control character")
    if escapes(labels, r"\\(?:u[0-9a-f]{4}|U[0-9a-f]{8})"):
        notes.append("'\\uNNNN' = the character of that code point (an invisible one, or a ␣ of the text)")
    return notes


def legend(shown: int, total: int, causal: bool, labels: Sequence[str] = (), width: int | None = None) -> str:
    """The conventions of the tables, as a paragraph wrapped at 100 characters (or a narrower terminal's
    `width`); `labels` (the tokens shown) adds what the escapes they hold mean (label_notes)."""
    parts = [f"{total} token{'s' * (total != 1)}" + (f", showing the last {shown}" if shown < total else ""),
             "rows: queries (the position predicting the next token), columns: keys",
             "cells: % of the row's attention, each rounded on its own (0 = under 0.5%), so a row sums to 100 "
             "only up to that rounding, the further off the more keys it has"]
    if causal and shown > 1:  # (one token shown: its one cell is never masked)
        # (a cell, unquoted: the token '.' is a label, quoted)
        parts.append(f"a cell of a lone {MASKED} = a future key, masked: weight exactly 0")
    elif not causal:
        parts.append("no causal mask: every position sees every other")
    parts.append(f"'{SPACE}' = space")
    if MASKED in labels:  # (quoted however many tokens are shown)
        parts.append(f"'{MASKED}' (quoted) = the token {MASKED}")
    parts += label_notes(labels)
    if shown < total:
        earlier = total - shown
        parts.append(f"'{EARLIER}' = summed weight on the {earlier} key{'s' if earlier > 1 else ''} before")
    return textwrap.fill("; ".join(parts), width=min(100, width or 100), break_long_words=False)


def attention_tables(traces: Sequence[HeadTrace], labels: Sequence[str], last: int = SHOWN,
                     causal: bool = True, width: int | None = None) -> str:
    """Every layer's and head's weights (batch item 0, T = len(labels)) as percent tables of the
    last `last` tokens, under a legend line; `width`: a terminal's columns (format_grid)."""
    T = len(labels)
    mask = causal_mask(T, T) if causal else None
    blocks = [legend(min(last, T), T, causal, labels[-last:], width)]
    for layer, trace in enumerate(traces):
        att = trace.weights[0].detach().float().cpu()  # (nh, T, T)
        view, view_mask, query_labels, key_labels = crop_last(att, labels, last, mask)
        for head in range(att.size(0)):
            blocks.append(f"layer {layer} head {head}\n"
                          + percent_table(view[head], query_labels, key_labels, view_mask, width))
    return "\n\n".join(blocks) + "\n"


def quoted_on_axis(label: str) -> bool:
    """Is `label` quoted on a heatmap axis: a token of no letter or digit (".", ",", "␣"), so that a small mark
    still reads as a token?"""
    return not any(ch.isalnum() for ch in label)


def heatmap_label(label: str) -> str:
    """A token label for a heatmap axis: quoted where quoted_on_axis (an apostrophe in double quotes: three
    single ones read as one mark); '$' is escaped (plain_text)."""
    if not quoted_on_axis(label):
        return plain_text(label)
    return plain_text(f'"{label}"' if "'" in label else f"'{label}'")


def _cell_numbers(ax, values: torch.Tensor, fontsize: float, dark_when_high: bool) -> None:
    """Write each cell's whole percent (rows, cols) on it, not on NaN (masked) cells, in white where
    the colour map is dark: low values of viridis, high values of Greys."""
    for i, row in enumerate(values.tolist()):
        for j, value in enumerate(row):
            if value == value:  # not NaN
                dark = value > 55 if dark_when_high else value < 55
                ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=fontsize,
                        color="white" if dark else "black", in_layout=False)  # inside its cell: no layout work


def heatmap_figure(weights: torch.Tensor, labels: Sequence[str], last: int = SHOWN, causal: bool = True,
                   title: str = "", pyplot: bool = False):
    """One layer's weights (nh, T, T) as a matplotlib Figure: a heatmap per head on a near-square
    grid (the first MAX_HEATMAP_HEADS heads), cropped like the tables but to at most MAX_HEATMAP
    tokens, percent colour scale with each cell's number on it (up to NUMBERED tokens), masked (future)
    cells hatched grey, and the summed EARLIER column as its own grey column beside the real keys, off
    their colour scale.
    pyplot=True builds it through pyplot, whose inline backend shows it under a Jupyter cell; else
    no pyplot (no global state, no GUI backend). Needs matplotlib (raises ImportError without it)."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    heads = weights.size(0)
    weights = weights[:MAX_HEATMAP_HEADS]  # (nh, T, T), nh <= MAX_HEATMAP_HEADS
    nh, T = weights.size(0), weights.size(-1)
    mask = causal_mask(T, T) if causal else None
    last = min(last, MAX_HEATMAP)
    view, view_mask, query_labels, key_labels = crop_last(weights.detach().float().cpu(), labels, last, mask)
    percent = view * 100  # (nh, N, K)
    if view_mask is not None:
        percent = percent.masked_fill(~view_mask, float("nan"))  # masked: hatched below
    N = len(query_labels)
    earlier = percent[..., 0] if percent.size(-1) > N else None  # (nh, N): weight on the cut-off keys
    keys = percent[..., 1:] if earlier is not None else percent  # (nh, N, N)
    key_labels = [heatmap_label(k) for k in key_labels[1 if earlier is not None else 0:]]
    # what the labels' marks mean, as the tables' legend says it (a picture is shared on its own)
    marks = (["quoted: a token of no letter or digit"] * any(map(quoted_on_axis, query_labels))
             + [f"{SPACE} = space"] * any(SPACE in q for q in query_labels) + label_notes(query_labels))
    query_labels = [heatmap_label(q) for q in query_labels]
    numbers = 7.5 if N <= 16 else 6 if N <= NUMBERED else 0  # font size of the cell numbers; none when crowded

    cols = math.ceil(math.sqrt(nh))  # heads on a near-square grid: 4 heads -> 2 x 2
    rows = math.ceil(nh / cols)
    cell = 0.42 if numbers else 0.16  # inches per matrix cell: room for a two-digit number, else for a label
    extra = 1.4 if earlier is not None else 0  # the earlier column and its gap
    size = (cols * (cell * N + extra + 1.3) + 1.4, rows * (cell * N + 1.5) + 1.3)
    if pyplot:
        import matplotlib.pyplot as plt  # in Jupyter: the inline backend draws it under the cell
        fig = plt.figure(figsize=size, layout="constrained")
    else:
        fig = Figure(figsize=size, layout="constrained")
    ratios = ([1, 0.15, N] if earlier is not None else [N]) * cols  # per head: [earlier, gap,] keys
    grid = fig.add_gridspec(rows, len(ratios), width_ratios=ratios)
    per = len(ratios) // cols
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad=(0, 0, 0, 0))  # NaN: the hatched background
    key_axes = []
    for head in range(nh):
        r, c = divmod(head, cols)
        ax = fig.add_subplot(grid[r, c * per + per - 1])
        key_axes.append(ax)
        # masked cells are NaN, drawn transparent over one hatched background: unmistakably not a small weight
        ax.add_patch(Rectangle((-0.5, -0.5), N, N, facecolor="0.93", edgecolor="0.7", hatch="///", linewidth=0,
                               zorder=0))
        image = ax.imshow(keys[head].numpy(), cmap=cmap, vmin=0, vmax=100, zorder=1)
        ax.set_title(f"head {head}", fontsize=10)
        ax.set_xticks(range(N), key_labels, rotation=90, fontsize=8, family=LABEL_FONT)
        ax.set_yticks(range(N), query_labels, fontsize=8, family=LABEL_FONT)
        if numbers:
            _cell_numbers(ax, keys[head], numbers, dark_when_high=False)
        if earlier is not None:
            ax_e = fig.add_subplot(grid[r, c * per])
            grey = ax_e.imshow(earlier[head, :, None].numpy(), cmap="Greys", vmin=0, vmax=100)  # square cells
            ax_e.set_xticks([0], [EARLIER], rotation=90, fontsize=8)
            ax_e.set_yticks(range(N), query_labels, fontsize=8, family=LABEL_FONT)
            ax.set_yticks(range(N), [])  # the labels are on the earlier column, left of both
            if numbers:
                _cell_numbers(ax_e, earlier[head, :, None], numbers, dark_when_high=True)
    notes = ["hatched: a future key, masked (weight exactly 0)"] if causal and N > 1 else []  # 1 token: none
    if not causal:  # (the tables' legend said it; the picture, shared on its own, did not)
        notes.append("no causal mask: every position sees every other")
    if heads > nh:
        notes.append(f"heads 0-{nh - 1} of {heads} drawn, the most drawn in seconds")
    if earlier is not None:
        notes.append(f"grey column '{EARLIER}': the summed weight on the {T - N} key{'s' * (T - N > 1)} before "
                     + (f"these {N}" if N > 1 else "this one") + ", on its own grey scale (right)")
    if marks:
        notes.append("; ".join(marks))
    # lines that fit the figure (one sized for one head and a few tokens cut its title and notes at both edges)
    fig.supxlabel(fit_width("\n".join(["key (the position looked at)", *notes]), fig, 0.6 * 9, less=0), fontsize=9)
    fig.supylabel("query (the position looking)", fontsize=9)
    fig.colorbar(image, ax=key_axes, label="% of the query's attention", shrink=0.8)
    if earlier is not None:  # the grey column's scale: past NUMBERED tokens its cells carry no number
        fig.colorbar(grey, ax=key_axes, label=f"% on the keys before ('{EARLIER}')", shrink=0.8)
    if title:
        # a word wider than the figure (a long token, a run's name) cut too; '$' escaped after the cut (a '\\$' cut
        # in two starts mathtext)
        fig.suptitle(plain_text(fit_width(controls_shown(title), fig, 0.6 * 11, less=0)), fontsize=11)
    return fig


HEATMAP_NAME = re.compile(r"attention(_sample\d+)?_layer\d+\.png")  # every name heatmap_file gives


def heatmap_file(folder: str | Path, layer: int, sample: int | None = None) -> Path:
    """Where save_heatmaps puts layer `layer`'s heatmap: attention_layerL.png, or for sample N (from 0)
    of several drawn apart, attention_sample{N+1}_layerL.png."""
    prefix = "attention" if sample is None else f"attention_sample{sample + 1}"
    return Path(folder) / f"{prefix}_layer{layer}.png"


def save_heatmaps(traces: Sequence[HeadTrace], labels: Sequence[str], out_dir: str | Path, last: int = SHOWN,
                  causal: bool = True, sample: int | None = None, title: str = "",
                  replace_set: bool = False) -> list[Path]:
    """One PNG per layer, `heatmap_file(out_dir, L, sample)`, heads as subplots, titled
    "{title}, layer L", all drawn first, then written together (atomic_write_all: a Ctrl-C leaves the
    earlier call's set or this one, never half a PNG, nor this call's layer 0 beside an earlier call's
    layer 1). `replace_set` (a call's first): the heatmaps an earlier call left (more layers, more
    samples; told by their mark: a user's PNG of such a name stays) go in the same step, as they would
    pass for this call's, and so do dead writers' temp files of any heatmap name. Needs matplotlib
    (raises ImportError before writing anything without it). A folder it made is removed again if no
    PNG could be written in it (a full disk)."""
    import matplotlib  # noqa: F401  (fail before creating the folder)

    pngs = {}
    for layer, trace in enumerate(traces):
        fig = heatmap_figure(trace.weights[0], labels, last, causal,
                             title=f"{title}, layer {layer}" if title else f"layer {layer}")
        png = io.BytesIO()
        with missing_glyphs_quiet():
            fig.savefig(png, format="png", dpi=100, metadata=dict([HEATMAP_MARK]))  # marked: told from a user's PNG
        pngs[heatmap_file(out_dir, layer, sample).name] = png.getvalue()
    created = make_folder(Path(out_dir), "--attention-png")
    earlier = [path.name for path in Path(out_dir).iterdir() if HEATMAP_NAME.fullmatch(path.name)
               and path.name not in pngs and png_marked(path, HEATMAP_MARK)] if replace_set else []
    try:  # (the earlier ones dropped with the renames: a Ctrl-C between the two left a mixed set)
        atomic_write_all(Path(out_dir), pngs, drop=earlier, what="set of heatmaps")
    except BaseException:
        remove_empty(created)
        raise
    if replace_set:
        sweep_folder_temp_files(Path(out_dir), HEATMAP_NAME)  # (a killed writer's: of layers no longer drawn too)
    return [Path(out_dir) / name for name in pngs]

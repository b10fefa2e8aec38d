"""Loss plots: a run's loss.png, and the val-loss curves and per-setting results of several runs
(sweep.py, compare.py).

    python compare.py out/stories --plot-only   # -> out/stories/loss.png (train.py draws it too)
    from tinygpt.plots import plot_run
    plot_run("out/stories")   # -> out/stories/loss.png, or None when matplotlib is not installed

The y-axis fits the curves after the first 5% of the steps: the step-0 loss, about ln(vocab),
would otherwise squash the part worth reading; a note names the points left above it, and the
runs that did not finish (drawn, but not fitted: a diverged run's 1e11 flattened the rest). Several
runs are told apart by the config values that differ between them, in a legend below the plot: one
entry a line, paths cut to their file names, wrapped to the picture's width, the picture grown to hold it;
each line has its own colour, line style and marker, and a character the font lacks is written as its
code point where two labels would otherwise look alike.

matplotlib is optional: without it the plot functions return None and the tables still come out.
"""
from __future__ import annotations

import functools
import io
import math
import os
import statistics
import re
import textwrap
import unicodedata
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from tinygpt.checkpoint import atomic_write, file_head
from tinygpt.errors import UserError, reason, shown_as_unicode
from tinygpt.runs import read_metrics

MATPLOTLIB_NOTE = "matplotlib is not installed: no {name} (pip install matplotlib); the tables are complete"

# ---- plots (matplotlib optional) ----


def plain_text(text: str) -> str:
    """`text` for matplotlib as it is: each '$' escaped, else two of them (a prompt "It cost $5 and $6")
    start mathtext, which draws garbage or raises on what is no formula; a byte of a file name that is
    not UTF-8 (a surrogate, as Python holds it, which matplotlib refuses) drawn as '\ufffd'."""
    return shown_as_unicode(text).replace("$", r"\$")


def controls_shown(text: str) -> str:
    """`text` with a line break or another control character (a folder's name may hold one) as its
    escape, '\\n'."""
    return "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cc" else c for c in text)


def _new_figure():
    """A matplotlib Figure without pyplot (no GUI backend, no global state), or None."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    except Exception as e:  # installed, but it fails as it starts: MPLBACKEND=foo, a broken install (a traceback)
        backend = f" (MPLBACKEND={os.environ['MPLBACKEND']!r}?)" if os.environ.get("MPLBACKEND") else ""
        raise UserError(f"matplotlib fails as it is imported{backend}: {reason(e, 160)}; mend or unset what it "
                        f"names, or uninstall matplotlib (tinygpt then draws no pictures)") from None
    return Figure(figsize=(7, 4.5), dpi=100, layout="tight")


def can_plot() -> bool:
    """Is matplotlib there to draw with?"""
    return _new_figure() is not None


PNG_MARK = ("tinygpt", "report")  # a tEXt entry (keyword, text) in every picture drawn here: told from a user's
HEATMAP_MARK = ("tinygpt", "attention heatmap")  # the same in sample.py --attention-png's (attention_view.py)


def png_marked(path: Path, mark: tuple[str, str]) -> bool:
    """Does the file at `path` hold a PNG with `mark` in its metadata, i.e. one that tinygpt drew (not a
    user's picture of the same name)? matplotlib writes its tEXt entries before the image data. A pipe
    or a device is not opened (a pipe would wait for a writer for good)."""
    head = file_head(path, 65536)  # (unreadable: it cannot be told ours)
    return head is not None and head.startswith(b"\x89PNG") and "\0".join(mark).encode() in head


@contextmanager
def missing_glyphs_quiet() -> Iterator[None]:
    """Around drawing: matplotlib warns on stderr once per character its font lacks (a Japanese file
    name in a run's label, CJK tokens in a heatmap: 14 lines for one label), for a valid input; the
    picture shows a box there, and the warning tells the user nothing more."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font", category=UserWarning)
        yield


def _png(fig, name: str) -> bytes:
    """The figure as PNG bytes, with its file's name (as its title) and PNG_MARK in its metadata."""
    buf = io.BytesIO()
    with missing_glyphs_quiet():
        fig.savefig(buf, format="png", metadata={"Title": name, PNG_MARK[0]: PNG_MARK[1]})
    return buf.getvalue()


def shortened(labels: Sequence[str]) -> list[str]:
    """The labels with each path cut to its last parts, as few as tell the labels apart
    (`dataset=tinyshakespeare.txt`; `dataset=v1/input.txt` and `dataset=v2/input.txt` for two files of
    one name): the folders made a label too long to read, and whole paths crowded the ticks."""
    def last_parts(setting: str, k: int) -> str:  # ('dataset=/data/my texts/a.txt', 1) -> 'dataset=a.txt'
        key, eq, value = setting.partition("=")
        parts = value.rstrip("/").split("/")
        return f"{key}{eq}{'/'.join(parts[-k:])}" if eq and len(parts) > k else setting
    deepest = max((len(s.partition("=")[2].split("/")) for label in labels for s in label.split(", ")), default=1)
    for k in range(1, deepest):
        short = [", ".join(last_parts(setting, k) for setting in label.split(", ")) for label in labels]
        if len(set(short)) == len(set(labels)):
            return short
    return list(labels)


@functools.lru_cache(maxsize=None)
def _characters_of(fonts: tuple) -> frozenset[int]:
    """The code points the fonts (font_manager paths) have a glyph for."""
    from matplotlib.font_manager import get_font
    return frozenset(code for font in fonts for code in get_font(font).get_charmap())


def font_lacks(char: str) -> bool:
    """Would matplotlib draw `char` as the font's empty box? True for a CJK character in DejaVu Sans
    (matplotlib's default font), and for every character that none of the fonts it falls back on has
    (the fonts its text is drawn with: rcParams' font.family)."""
    from matplotlib.font_manager import FontProperties, findfont, fontManager
    try:
        fonts = tuple(fontManager._find_fonts_by_props(FontProperties()))  # (what matplotlib's text draws with)
    except AttributeError:  # (an older matplotlib: no fallback fonts)
        fonts = (findfont(FontProperties()),)
    return ord(char) not in _characters_of(fonts)


def _as_drawn(label: str) -> str:
    """The label as the reader sees it: a box for each character the font lacks, '\ufffd' for each
    byte of a file name that is not UTF-8 (plain_text)."""
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else "\0" if font_lacks(c) else c for c in label)


def _escaped(label: str) -> str:
    """The label with each character the font lacks written as its code point (`\\u65e5`), and each
    byte that is not UTF-8 (a surrogate, as Python holds it) as that byte (`\\xe9`)."""
    def code(c: str) -> str:
        if "\udc80" <= c <= "\udcff":
            return f"\\x{ord(c) - 0xDC00:02x}"
        return ascii(c)[1:-1] if _as_drawn(c) != c else c
    return "".join(map(code, label))


def told_apart(labels: Sequence[str]) -> list[str]:
    """The labels, with the characters the font cannot draw escaped (`dataset=\\u65e5\\u672c.txt`) in
    those that would otherwise look like another one: `日本.txt` and `中国.txt` were both drawn as
    `□□.txt` in DejaVu Sans, two legend entries alike. A label that looks like no other stays as it is
    (a box is still the closest to its name)."""
    drawn: dict[str, set[str]] = {}
    for label in labels:
        drawn.setdefault(_as_drawn(label), set()).add(label)
    return [_escaped(label) if len(drawn[_as_drawn(label)]) > 1 else label for label in labels]


def legend_labels(labels: Sequence[str], fig) -> list[str]:
    """Labels for a legend of one entry a line under the plot: shortened and told apart, then wrapped at
    ', ' to the figure's width, so that a label of many differing config values lies wholly inside the
    picture (it ran off both edges); drawn as text (plain_text)."""
    # ('small' characters are ~5.5 pt wide; 10 fewer: the marker beside the label)
    return [plain_text(fit_width(label, fig, 5.5, less=10)) for label in told_apart(shortened(labels))]


WIDEST = 0.84 / 0.6  # DejaVu Sans's widest common glyphs ('=', '+', 'm': 0.84 em) against its average


def fit_width(text: str, fig, char_points: float, share: float = 1.0, less: int = 4) -> str:
    """`text`, each of its lines wrapped at spaces to `share` of the figure's width in characters `char_points`
    wide (about 0.6 of the font's size), `less` fewer: a long label, note or title line ran off the picture's
    edges, and the layout squeezed the axes into a third of it to make room. A word longer than a line (a
    token of 64 '=', a sweep run's name) is cut into pieces that fit in the widest glyphs."""
    width = max(20, int(share * fig.get_figwidth() * 72 / char_points) - less)
    lines = []
    for line in text.split("\n"):
        for part in textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False) or [""]:
            lines += textwrap.wrap(part, max(10, int(width / WIDEST))) if len(part) > width else [part]
    return "\n".join(lines)


def tick_labels(values: Sequence[str], key: str) -> list[str]:
    """Tick labels for the values of the config `key`, shortened and told apart as legend labels are:
    `日本.txt`, not `/long/dir/日本.txt` (the ticks ran into each other), `v1/a.txt` and `v2/a.txt` where
    two files share a name."""
    named = told_apart(shortened([f"{key}={value}" for value in values]))
    return [plain_text(wrapped(label.partition("=")[2])) for label in named]


TICK_WIDTH = 20  # characters of a tick label's line (wrapped)


def wrapped(label: str, width: int = TICK_WIDTH) -> str:
    """`label` on lines of about `width` characters, broken after a '/' or at a space, and a piece longer
    than a line cut into lines of its own (after a '_' or '-' where one is): two long paths side by side
    ran into each other, slanted or not, and squeezed the panel to a sliver (a file name of 70 characters
    without a space: to nothing)."""
    lines, line = [], ""
    for piece in re.findall(r"[^/ ]*(?:/| +|$)", label):
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        while len(piece.rstrip()) > width:  # (line is empty here: a long piece starts a line)
            cut = max(piece.rfind("_", 0, width), piece.rfind("-", 0, width)) + 1  # after a '_' or '-' where one is
            cut = cut if cut > width // 2 else width
            lines.append(piece[:cut])
            piece = piece[cut:]
        line += piece
    return "\n".join([*lines, line.rstrip()])


LINE_STYLES = ["-", "--", ":", "-."]  # 4 line styles and 5 markers (no common factor): 20 rounds of the colours
VAL_LOSS_MARKERS = [".", "x", "+", "1", "2"]  # before a (colour, line style, marker) comes again
SETTINGS_MARKERS = ["o", "s", "^", "D", "v"]


def line_style(i: int, markers: Sequence[str]) -> dict[str, str]:
    """The i-th line's colour, line style and marker: matplotlib's 10 colours, solid; then the same
    colours dashed with the next marker, then dotted, ...: 200 lines each unlike the others (the colours
    alone repeated after 10, two runs alike in the legend). The marker changes with the line style so
    that a setting of one point, which draws no line, is told apart too."""
    from matplotlib import rcParams
    colours = rcParams["axes.prop_cycle"].by_key().get("color") or ["black"]
    round_ = i // len(colours)
    return {"color": colours[i % len(colours)], "linestyle": LINE_STYLES[round_ % len(LINE_STYLES)],
            "marker": markers[round_ % len(markers)]}


def grow_for(fig, legend) -> None:
    """Make the figure taller by the legend's own height, so that the legend below the plot takes no
    room from the axes, however many lines it has."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    with missing_glyphs_quiet():
        box = legend.get_window_extent(FigureCanvasAgg(fig).get_renderer())
    fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + box.height / fig.dpi + 0.1)


def step_axis(ax) -> None:
    """Ticks at whole steps only (a 20-step run read 0, 2.5, 5.0, 7.5; a 0-step run -0.04 to 0.04)."""
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # (one step: the tick 0 alone)


EARLY = 0.05  # the first 5% of the steps are left out when choosing the y-range...
SQUASH = 1.0  # ...if the points there would more than double its height


Curve = tuple[Sequence[float], Sequence[float]]  # (steps, losses)


def focus_y(ax, curves: Sequence[Curve], edges: Sequence[Curve] = (),
            aside: Sequence[tuple[str, Curve]] = ()) -> None:
    """Fit the y-axis to the curves (steps, losses) and the edges of their bands, each after the first
    EARLY share of its steps, so that the step-0 loss (about ln(vocab)) does not squash the rest into a
    flat line (when it would more than double the axis's height, SQUASH: a short run's curve is drawn
    whole); the curves' points left above the axis are counted in a note below its right end (outside
    the axes, where no legend can cover it). A band's edges are no points of their own: counted, a
    setting's band (mean ± std) made each hidden point two. A nan or inf loss (a diverged run) is left
    out: matplotlib draws it as a gap. The `aside` curves, (label, curve), are drawn but not fitted
    (unfinished and failed runs: one that diverged to 1e11 made the others a flat line) but where they
    go lower, unless there is nothing else; each that leaves the axis is named in the note, with its
    farthest point."""
    def finite(curves: Sequence[Curve]) -> list[Curve]:
        return [(steps, [y if math.isfinite(y) else math.nan for y in ys]) for steps, ys in curves]

    def after_early(curves: Sequence[Curve]) -> list[float]:  # each curve's losses past its first EARLY steps
        return [y for steps, ys in curves if len(steps) for x, y in zip(steps, ys)
                if x > 0 and x >= EARLY * max(steps) and not math.isnan(y)]
    if not curves:
        curves, aside = [curve for _, curve in aside], ()
    curves, fitted = finite(curves), finite([*curves, *edges])
    after = after_early(fitted)
    if not after:
        return
    high = max(after)
    # an aside curve's points below are not a divergence's: an unfinished run doing better sets the bottom (it was
    # a line leaving the chart at the bottom, under an axis fitted to the finished runs alone)
    low = min(after + after_early(finite([curve for _, curve in aside])))
    highest = max(y for _, ys in fitted for y in ys if not math.isnan(y))
    if highest <= high + SQUASH * (high - low):
        high = highest
    pad = 0.08 * (high - low or abs(high) or 1.0)
    top = high + pad
    hidden = [(x, y) for steps, ys in curves for x, y in zip(steps, ys) if y > top]
    early_top = {}
    for label, (steps, ys) in aside:
        early = EARLY * max(steps, default=0)  # (the curve's last step, found once)
        early_top[label] = [(x, y) for x, y in zip(steps, ys)
                            if math.isfinite(y) and y > top and not (x > 0 and x >= early)]
    hidden += [p for points in early_top.values() for p in points]  # (an aside curve's step 0 is an early point:
    # an interrupted run sharing the others' clipped first eval was said to have gone "off the chart")
    ax.set_ylim(max(low - pad, 0.0) if low >= 0 else low - pad, top)  # (a loss: its padding not under 0)
    notes = []
    if hidden:
        step, loss = max(hidden, key=lambda p: p[1])
        notes.append(f"off the top: {len(hidden)} early point(s), up to {loss:.2f} at step {step:.0f}")
    for label, (steps, ys) in aside:
        outside = [(x, y) for x, y in zip(steps, ys)
                   if math.isfinite(y) and not low - pad <= y <= top and (x, y) not in early_top[label]]
        if outside:
            step, loss = max(outside, key=lambda p: abs(p[1] - (low + high) / 2))
            way = "up" if loss > top else "down"
            notes.append(plain_text(f"off the chart: {label}, {way} to {loss:.3g} at step {step:.0f}"))
    if notes:  # (right-aligned at the axes' right end: wrapped to the width left of it)
        ax.annotate(fit_width("\n".join(notes), ax.figure, 0.6 * 8, share=0.85), xy=(1.0, 0.0),
                    xycoords="axes fraction", xytext=(0, -34),
                    textcoords="offset points", ha="right", va="top", fontsize=8, color="0.35")


def val_losses_by_step(runs: Sequence[dict[str, Any]]) -> dict[float, list[float]]:
    """step -> the runs' val losses there (their metrics rows); a diverged run's NaN or inf left
    out: a gap in its line."""
    by_step: dict[float, list[float]] = {}
    for r in runs:
        for m in r.get("metrics", []):
            if m.get("val_loss") is not None and math.isfinite(m["val_loss"]):
                by_step.setdefault(m["step"], []).append(m["val_loss"])
    return by_step


def curve_label(g: dict[str, Any], banded: bool) -> str:
    """A val-loss line's legend entry: the setting, its n (the seeds its mean is over, the summary's
    n) where some line is a mean, the unfinished runs left out of it, or what its runs are where none
    finished (drawn all the same, counted nowhere)."""
    if not g.get("finished", True):
        return g["label"] + (" (failed)" if g.get("failed") else " (unfinished)")
    n, left_out = g.get("n", len(g["runs"])), g.get("left_out", 0)
    told = [f"mean of {n}" if n > 1 else "n=1"] if banded else []
    told += [f"{left_out} unfinished left out"] if left_out else []
    return g["label"] + (f" ({', '.join(told)})" if told else "")


def nest_overlapping(ax, pixels: float = 3.0) -> None:
    """Lines that lie on one another (an n_head sweep's: every setting starts from the same weights) showed the
    last drawn alone, while the legend listed them all: a line with k later lines within `pixels` of it at every
    step both show on the axes (two at least: step 0's shared loss, often off the top, is no overlap) is drawn
    wider by k steps of 1.8 points (fewer, for many such lines: 7.2 points at most), and shows around them."""
    low, high = sorted(ax.get_ylim())
    per_pixel = (high - low) / max(ax.get_window_extent().height, 1.0)
    curves = [{x: y for x, y in zip(line.get_xdata(), line.get_ydata()) if low <= y <= high} for line in ax.lines]

    def on(a: dict, b: dict) -> bool:
        shared = a.keys() & b.keys()
        return len(shared) >= 2 and max(abs(a[s] - b[s]) for s in shared) <= pixels * per_pixel
    above = [sum(on(curve, later) for later in curves[i + 1:]) for i, curve in enumerate(curves)]
    step = min(1.8, 7.2 / max([*above, 1]))
    for line, k in zip(ax.lines, above):
        line.set_linewidth(line.get_linewidth() + step * k)


APART = "losses per token of other vocabularies or texts: they do not compare"  # (report.one_data: False)


def val_loss_png(groups: Sequence[dict[str, Any]], apart: bool = False) -> bytes | None:
    """Val loss vs step, one line per setting (report.group_by_setting): the mean over its runs
    (seeds) with a band of ± one standard deviation, labelled by the varied values and, where some
    line is a mean, each line's n: the PNG, or None without matplotlib. A group may say how many
    seeds it holds (`n`), how many runs were left out of it (`left_out`), and that its runs are not
    finished (`finished`: False, `failed`): drawn, but not fitted by the y-axis (focus_y). `apart`: the settings
    were trained on other data or tokens (APART is said under the title)."""
    fig = _new_figure()
    if fig is None:
        return None
    ax = fig.subplots()
    banded = any(g.get("n", len(g["runs"])) > 1 for g in groups if g.get("finished", True))
    curves, edges, aside = [], [], []
    for g in groups:
        by_step = val_losses_by_step(g["runs"])
        if not by_step:
            continue
        steps = sorted(by_step)
        mean = [statistics.fmean(by_step[s]) for s in steps]
        std = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
        label = curve_label(g, banded)
        line, = ax.plot(steps, mean, **line_style(len(ax.lines), VAL_LOSS_MARKERS), label=label)
        if not g.get("finished", True):
            aside.append((label, (steps, mean)))
            continue
        above = [m + d for m, d in zip(mean, std)]
        below = [max(0.0, m - d) for m, d in zip(mean, std)]  # (a loss is never under 0: one seed's spike drew
        if len(g["runs"]) > 1:  # the band, and the axis, down to -7.5)
            ax.fill_between(steps, below, above, color=line.get_color(), alpha=0.2, linewidth=0)
        curves.append((steps, mean))
        edges += [(steps, above), (steps, below)]
    step_axis(ax)
    ax.set(xlabel="step", ylabel="val loss (nats/token)",
           title="validation loss" + (": mean ± 1 std over seeds (n per line)" if banded else "")
           + (f"\n({APART.replace(': ', ':' + chr(10))})" if apart else ""))  # (on one line: wider than the picture)
    ax.grid(alpha=0.3)
    focus_y(ax, curves, edges, aside)
    nest_overlapping(ax)
    if ax.lines:  # below the axes and what hangs under them (tick labels, x label, the note): it covers no curve
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.transforms import offset_copy
        renderer = FigureCanvasAgg(fig).get_renderer()
        with missing_glyphs_quiet():
            below = ax.get_window_extent(renderer).y0 - ax.get_tightbbox(renderer).y0
        legend = ax.legend(ax.lines, legend_labels([line.get_label() for line in ax.lines], fig), fontsize="small",
                           loc="upper center", bbox_to_anchor=(0.5, 0),
                           bbox_transform=offset_copy(ax.transAxes, fig, y=-below, units="dots"),
                           handlelength=HANDLE_LENGTH)
        grow_for(fig, legend)
    fig.set_layout_engine("constrained")  # room for the legend (tight layout warned: "margins cannot be made large")
    return _png(fig, "val_loss.png")


HANDLE_LENGTH = 3.0  # a legend's line samples, in font sizes (2 by default): long enough to show '-.' as such

SHIFT, SPREAD = 0.06, 0.2  # settings.png: lines this far apart at a tick, all within ± SPREAD of it


def side_by_side(i: int, lines: int) -> float:
    """How far line i of `lines` is drawn from its x tick, so that the error bars do not hide each other:
    SHIFT apart, closer together where that would spread them beyond ± SPREAD (10 lines 0.06 apart lay
    ± 0.27 from their tick, half-way to the next one's)."""
    step = min(SHIFT, 2 * SPREAD / (lines - 1)) if lines > 1 else 0.0
    return (i - (lines - 1) / 2) * step


def slant_if_crowded(ax) -> None:
    """Slant the x tick labels when the widest is wider than the room between two ticks: file names
    (`tinyshakespeare.txt`) side by side ran into one another, one unreadable word."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    labels = ax.get_xticklabels()
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    with missing_glyphs_quiet():
        widest = max((t.get_window_extent(renderer).width for t in labels), default=0.0)
    if labels and widest > 0.9 * ax.get_window_extent(renderer).width / len(labels):
        for t in labels:
            t.set(rotation=30, ha="right", rotation_mode="anchor")


SETTING_PANELS = [("best_val_loss", "best val loss (nats/token)", 1.0),
                  ("antecedent", "probe: antecedent share (%)", 100.0),
                  ("attribute_ratio", "best head: antecedent / distractor attention", 1.0)]


def x_positions(values: Sequence[float] | None, n: int) -> tuple[list[float], bool]:
    """Where settings.png draws its x values, and whether on a log scale: categories (values None) one
    apart; numbers at their distances (16, 32, 128 were drawn evenly, and the line's slope lied), on a
    log scale where they span a factor of 4 or more (a tenfold as far as a tenth), in units of the
    closest two, so that evenly spaced values (1, 2, 3; 16, 32, 64) stay one apart."""
    if values is None or n < 2:
        return [float(i) for i in range(n)], False
    log = min(values) > 0 and max(values) >= 4 * min(values)
    at = [math.log(v) if log else float(v) for v in values]  # (sorted, distinct: each a setting of its own)
    gap = min(b - a for a, b in zip(at, at[1:]))
    if not gap > 0:  # two texts of one number (0 and 0.0): one apart, as categories
        return [float(i) for i in range(n)], False
    return [(a - at[0]) / gap for a in at], log


def all_numbers(values: Iterable[Any]) -> bool:
    """Are the values all finite numbers (not booleans), to be drawn and ordered as numbers, not as words?"""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def in_order(setting: dict[str, Any], keys: Sequence[str], groups: Sequence[dict[str, Any]]) -> tuple:
    """Where a line of `setting` comes among settings.png's lines: by each of `keys` in turn, numbers from
    small to large (lr=0.001, 0.003, 0.01, not the order the runs came in), anything else as first seen."""
    order = []
    for k in keys:
        values = [g["setting"][k] for g in groups if g["setting"][k] is not None]
        if values and all_numbers(values):
            order.append(-math.inf if setting[k] is None else setting[k])
        else:
            order.append([str(v) for v in values].index(str(setting[k])) if setting[k] is not None else -1)
    return tuple(order)


NOT_APPLIED = "does not\napply"  # settings.png's tick of the settings the x key does not apply to


def settings_png(groups: Sequence[dict[str, Any]], apart: bool = False) -> bytes | None:
    """Each setting's result (report.group_by_setting) against the first varied key (numbers from small to
    large, anything else in first-seen order), one line per value of the others: the mean with its 95%
    interval over seeds as an error bar, one panel per metric in SETTING_PANELS that at least 2 settings
    have (the probe's only when probed): the PNG, or None without matplotlib or without 2 settings to
    compare. `apart`: the settings were trained on other data or tokens (APART is said over a loss's panel)."""
    panels = [p for p in SETTING_PANELS if sum(g["stats"][p[0]]["mean"] is not None for g in groups) > 1]
    fig = _new_figure() if panels else None
    if fig is None:
        return None
    fig.set_size_inches(4.2 * len(panels), 4.2)
    fig.set_layout_engine("constrained")  # (a legend "outside" the panels needs it)
    keys = list(groups[0]["setting"])
    x_key, line_keys = keys[0], keys[1:]
    first = {}  # each x value's text -> the value, in first-seen order
    for g in groups:
        first.setdefault(str(g["setting"][x_key]), g["setting"][x_key])
    # an x value with no finished run has no point: its tick would stretch the axis (lr=1000 beside 0.001 and 0.003
    # made it a log axis, those two crowded at its left edge) and say nothing of why it is empty
    drawn = {str(g["setting"][x_key]) for g in groups for m, _, _ in panels if g["stats"][m]["mean"] is not None}
    undrawn = [f"{x_key.split('.', 1)[1]}={x}" for x in first if x not in drawn]
    first = {x: v for x, v in first.items() if x in drawn}
    xs = list(first)
    # a value None: the key does not apply to the setting (a char run's bpe_vocab_size): drawn left of the numbers
    # (as "None", it made them categories: 280 and 300 evenly apart, unjoined)
    applies = {x: v for x, v in first.items() if v is not None}
    numbers = bool(applies) and all_numbers(applies.values())
    if numbers:  # a number's axis runs from small to large, whatever order the runs came in
        xs = [x for x in xs if first[x] is None] + sorted(applies, key=applies.get)
        where, log = x_positions([first[x] for x in xs if first[x] is not None], len(applies))
        where = [where[0] - 1.0] * (len(xs) - len(applies)) + where
    else:
        where, log = x_positions(None, len(xs))
    lines: dict[str, list[dict[str, Any]]] = {}
    for g in groups:  # (a key that does not apply, a char run's bpe_vocab_size, is None: not named)
        name = ", ".join(f"{k.split('.', 1)[1]}={g['setting'][k]}" for k in line_keys if g["setting"][k] is not None)
        if not name and line_keys:
            name = ", ".join(k.split(".", 1)[1] for k in line_keys) + ": does not apply"
        lines.setdefault(name or "mean", []).append(g)
    lines = dict(sorted(lines.items(), key=lambda line: in_order(line[1][0]["setting"], line_keys, groups)))
    unfinished = [name for name, members in lines.items()  # (all its runs failed or stopped: no point to draw)
                  if not any(g["stats"][m]["mean"] is not None for g in members for m, _, _ in panels)]
    lines = {name: members for name, members in lines.items() if name not in unfinished}
    unfinished = undrawn + unfinished
    shown = dict(zip(lines, legend_labels(list(lines), fig)))
    ns = {g["stats"][m]["n"] for g in groups for m, _, _ in panels if g["stats"][m]["mean"] is not None}
    from matplotlib.ticker import FuncFormatter, NullFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 1.25, not 1.25x10^0 (log axis) or an offset +5.774
    for ax, (metric, ylabel, scale) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        values = []
        for i, (name, members) in enumerate(lines.items()):
            shift = side_by_side(i, len(lines))
            pts = [(where[xs.index(str(g["setting"][x_key]))] + shift, g["stats"][metric]) for g in members
                   if g["stats"][metric]["mean"] is not None]
            if not pts:
                continue
            x = [p for p, _ in pts]
            mean = [st["mean"] * scale for _, st in pts]
            err = [[(st["mean"] - st["lo"]) * scale if st["lo"] is not None else 0 for _, st in pts],
                   [(st["hi"] - st["mean"]) * scale if st["hi"] is not None else 0 for _, st in pts]]
            style = line_style(i, SETTINGS_MARKERS)
            # categories (datasets, tokenizers), or "does not apply" beside numbers: a line would be no trend
            if not numbers or any(first.get(str(g["setting"][x_key]), 0) is None for g in members):  # (0: undrawn)
                style["linestyle"] = "none"
            ax.errorbar(x, mean, yerr=err, capsize=3, label=shown[name], **style)
            if len(ns) > 1:  # the settings' n differ: each point says its own (n=1: no interval, not a precise one)
                for px, top, (_, st) in zip(x, [m + hi for m, hi in zip(mean, err[1])], pts):
                    ax.annotate(f"n={st['n']}", (px, top), xytext=(0, 3), textcoords="offset points", fontsize=7,
                                color="0.35", ha="center", va="bottom")  # (above the bar's cap, not across the bar;
                    # centred: at the right edge, not cut)
                ax.margins(y=0.12)  # (room above the highest cap for its label, under the frame)
            values += [m - lo for m, lo in zip(mean, err[0])] + [m + hi for m, hi in zip(mean, err[1])]
        ax.set_xticks(where, [NOT_APPLIED if first[x] is None else label
                              for x, label in zip(xs, tick_labels(xs, x_key.split(".", 1)[1]))])
        slant_if_crowded(ax)
        ax.set(xlabel=x_key.split(".", 1)[1] + (" (log scale)" if log else ""), ylabel=ylabel)
        if apart and "loss" in metric:  # (a char run's 3.6 and a word run's 7.9 on one axis, said nowhere)
            ax.set_title(APART.replace(": ", ":\n"), fontsize="small")
        if metric == "attribute_ratio" and values and min(values) > 0 and max(values) > 10 * min(values):
            ax.set_yscale("log")  # ratios over more than a decade (a tenfold is as far as a tenth)
            ax.yaxis.set_minor_formatter(NullFormatter())  # (labelled, minor ticks pile up)
        elif scale == 100.0 and values:  # a share in %: 0 to at most 100 (all 0: not -0.04 to 0.04)
            ax.set_ylim(0, min(105.0, max(1.0, 1.1 * max(values))))
        elif values:  # differences under 1% of the values would fill the whole height: show at least that span
            middle, half = (max(values) + min(values)) / 2, (max(values) - min(values)) / 2
            if half < 0.005 * abs(middle):
                ax.set_ylim(middle - 0.005 * abs(middle), middle + 0.005 * abs(middle))
        ax.yaxis.set_major_formatter(plain)
        ax.grid(alpha=0.3)
    if len(lines) > 1:  # below the panels, where it covers no axis label; one entry a line, each readable whole
        grow_for(fig, fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="outside lower center",
                                 fontsize="small", handlelength=HANDLE_LENGTH))
    if len(ns) > 1:  # (two lines: one panel is 4.2 in wide)
        title = (f"mean and 95% interval over the seeds:\nn = {min(ns)} to {max(ns)}, at each point"
                 + (" (n=1: no interval)" if 1 in ns else ""))
    else:
        title = f"mean and 95% interval over {max(ns)} seeds" if max(ns) > 1 else "one run per setting"
    if unfinished:  # (said, not left out without a word)
        title += "\nnot drawn, no finished run: " + "; ".join(unfinished)
    fig.suptitle(fit_width(title, fig, 0.6 * 10), fontsize=10)
    return _png(fig, "settings.png")


def plot_run(run_dir: str | Path, guard: Callable[[], None] | None = None) -> Path | None:
    """Train and val loss vs step from run_dir/metrics.csv -> run_dir/loss.png; None (nothing
    written) when matplotlib is missing or there are no metrics yet (`guard`: checkpoint.atomic_write's)."""
    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    fig = _new_figure() if metrics else None
    if fig is None:
        return None
    logs = [m for m in metrics if m.get("tokens_per_s") is not None and m.get("train_loss") is not None]
    evals = [m for m in metrics if m.get("val_loss") is not None]
    ax = fig.subplots()
    curves = []
    if logs:  # the running mean over each log interval, in training mode
        curves.append(([m["step"] for m in logs], [m["train_loss"] for m in logs]))
        ax.plot(*curves[-1], marker="." if len(logs) == 1 else None, label="train", alpha=0.8)  # 1 point: no line
    else:  # no log rows (log_interval > max_iters): the eval estimates
        curves.append(([m["step"] for m in evals], [m["train_loss"] for m in evals]))
        ax.plot(*curves[-1], marker=".", label="train (eval)")
    curves.append(([m["step"] for m in evals], [m["val_loss"] for m in evals]))
    ax.plot(*curves[-1], marker="o", label="val")
    step_axis(ax)
    ax.set(xlabel="step", ylabel="loss (nats/token)",  # (a long folder name ran off both edges: wrapped)
           # (escaped after it is cut into lines: a '\\$' cut in two starts mathtext)
           title=plain_text(fit_width(controls_shown(f"{run_dir.resolve().name}: loss"), fig, 0.6 * 12)))
    ax.grid(alpha=0.3)
    focus_y(ax, curves)
    ax.legend(loc="center right")
    png = _png(fig, "loss.png")
    atomic_write(run_dir / "loss.png", lambda f: f.write(png), guard)
    return run_dir / "loss.png"

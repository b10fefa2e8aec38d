"""The attention explorer: one self-contained HTML page per text (`sample.py --attention-html FILE`).

The page holds its data (JSON) and its script inline and loads nothing, so it works offline from a
file path in any current browser. It shows the tokens as running text; pick a layer and a head (or
"all": every head of the layer at once, each in its colour), then hover a token (the query) to
shade every key by the weight the query puts on it, with the weight in % under each key; click to
pin the query and hover keys for their weight in every head. Future keys are hatched and show no
weight (masked: exactly 0). Generated tokens are underlined; hovering one also shows the top-5
candidates it was drawn from (sample.py --show-steps's data). The address may select a view on
load, e.g. `page.html#layer=1&head=all&query=5` (the same code path as a click).

Weights are stored as whole thousandths (0.1 %), the precision the page shows; under the causal
mask only each query's allowed keys are stored (the lower triangle). A page holds at most PAGE_WEIGHTS of them
(page_tokens): a wide model's page covers its last tokens only.
"""
from __future__ import annotations

import html
import json
import math
import os
import re
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence
from urllib.parse import quote, unquote_to_bytes

import torch

from model import GPT, Step, causal_mask
from tinygpt.attention_view import label_notes, step_candidates, step_percent, token_label, window_traces
from tinygpt.checkpoint import atomic_write_text, file_head

if TYPE_CHECKING:  # (the notebook's; imported when notebook_view runs)
    from IPython.display import HTML

SCALE = 1000  # weights stored as integers in units of 1/SCALE (0.1 %)
# characters of a token the page shows (longer ones are cut with "…"): running text has no column to fit, unlike
# the tables' MAX_LABEL, where " Northumberland" and " Northumberlands" were both "␣Northumb…"; a word
# tokenizer's token is as long as a word of the text, so the page's size stays bounded
PAGE_LABEL = 64  # (terminal columns, as token_label counts them: a CJK character takes 2)


def recorded(steps: Iterable[Step], sink: list[dict] | deque[dict], temperature: float, top_k: int | None,
             top_p: float | None) -> Iterator[Step]:
    """Pass model.generate_steps's Steps through, appending each one's context length, chosen token's
    probability and top candidates (attention_view.step_candidates) to `sink`: a list keeps every
    step; the page shows at most block_size of them, so sample.py passes a deque of that length."""
    for step in steps:
        _, p, top = step_candidates(step, temperature, top_k, top_p)
        sink.append({"ctx": step.context, "p": p, "top": top})
        yield step


PAGE_WEIGHTS = 2_000_000  # weights a page holds at most, about 6 MB (2.8 bytes each): GPT-2's shape over its 1,024
# tokens (12 layers x 12 heads) made a page of 152 MB, 2.7 GB and 32 s to write, 50 s to open in Chromium


def page_tokens(cfg) -> int:
    """The most tokens a page shows for a model of config `cfg` (a ModelConfig): its block_size, or fewer where
    n_layer x n_head weights per pair of them (the lower triangle's, under the causal mask) pass PAGE_WEIGHTS."""
    heads = cfg.n_layer * cfg.n_head
    T = min(cfg.block_size, math.isqrt(2 * PAGE_WEIGHTS // heads) + 1)  # (then down to the first that fits)
    while T > 1 and heads * (T * (T + 1) // 2 if cfg.causal else T * T) > PAGE_WEIGHTS:
        T -= 1
    return T


@torch.no_grad()
def explorer_data(model: GPT, tokenizer, ids: Sequence[int], n_generated: int = 0,
                  steps: Sequence[dict] = (), title: str = "", rule: str = "") -> dict:
    """The page's data for the last block_size tokens of `ids` (page_tokens: fewer for a wide model), whose last
    n_generated tokens were generated (`steps`: the `recorded` data of the last len(steps) of them, at least those
    inside the window, drawn by `rule`, e.g. attention_view.sampling_rule's)."""
    cfg = model.config
    window, traces = window_traces(model, list(ids)[-page_tokens(cfg):])  # per layer weights (1, nh, T, T)
    T = len(window)
    att = torch.stack([t.weights[0] for t in traces]).float().cpu()  # (n_layer, nh, T, T)
    stored = (att * SCALE).round().int()
    if cfg.causal:  # keep each query's allowed keys only: row q holds keys 0..q
        stored = stored[..., causal_mask(T, T)]  # (n_layer, nh, T(T+1)/2), row by row: the model's own mask
    else:
        stored = stored.flatten(-2)  # (n_layer, nh, T*T)
    first_generated = max(T - n_generated, 0)
    if steps and not T - first_generated <= len(steps) <= n_generated:
        raise ValueError(f"{len(steps)} steps for {n_generated} generated tokens, {T - first_generated} of them in "
                         f"the window")
    shown_steps = list(steps)[len(steps) - (T - first_generated):] if steps else []  # those inside the window
    labels = [token_label(tokenizer, i, PAGE_LABEL) for i in window]
    tops = [[[token_label(tokenizer, i, PAGE_LABEL), step_percent(q)] for i, q in s["top"]] for s in shown_steps]
    return {
        "title": title, "rule": rule, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "block_size": cfg.block_size,
        "causal": cfg.causal, "scale": SCALE, "earlier": len(ids) - T,
        "tokens": labels, "notes": label_notes(labels + [label for top in tops for label, _ in top]),
        "breaks": [k for k, i in enumerate(window) if "\n" in tokenizer.decode([i])],  # line break after these
        "first_generated": first_generated,
        "steps": [{"ctx": s["ctx"], "p": step_percent(s["p"]), "top": top} for s, top in zip(shown_steps, tops)],
        "weights": stored.tolist(),
    }


def explorer_html(data: dict, page_set: str = "") -> str:
    """The page: PAGE with the data inlined as JSON ('<' escaped, so no text can end the script).
    `page_set`: the file name asked for, recorded in the page (written_for) as its %-escaped bytes: a
    name's byte that is not UTF-8 must not enter a page that says it is UTF-8."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    title = html.escape(data["title"] or "attention")
    # data first, then the set, then the title: each marker comes before the text put in earlier, so a
    # token "%TITLE%" (a file named "%TITLE%.html") stays as it is
    page = PAGE.replace("%DATA%", payload, 1).replace("%SET%", quote(os.fsencode(page_set), safe=""), 1)
    return page.replace("%TITLE%", title, 1)


def write_explorer(path: str | Path, model: GPT, tokenizer, ids: Sequence[int], n_generated: int = 0,
                   steps: Sequence[dict] = (), title: str = "", rule: str = "",
                   asked: str | Path | None = None) -> Path:
    """Write the explorer page for `ids` (see explorer_data) to `path`, atomically; return the path.
    `asked`: the page the user named, of which `path` is a numbered one (`numbered`); default `path`."""
    path = Path(path)
    page = explorer_html(explorer_data(model, tokenizer, ids, n_generated, steps, title, rule),
                         Path(asked if asked is not None else path).name)
    atomic_write_text(path, page)
    return path


GENERATOR = '<meta name="generator" content="tinygpt attention explorer">'  # in PAGE's head: told from a user's file


def is_explorer_page(path: Path) -> bool:
    """Did tinygpt write the file at `path` (a page that a new one may replace, unlike a user's own
    file of that name)? By GENERATOR in its first lines. A pipe or a device is not opened (a pipe
    would wait for a writer for good)."""
    head = file_head(path)  # (unreadable: it cannot be told ours)
    return head is not None and GENERATOR.encode() in head


def name_parts(path: Path) -> tuple[str, str]:
    """A page's name as (stem, suffix) for its numbered pages: the suffix .html (or .htm, any case) where
    the name ends in it, else the whole name and .html: `best.pt`'s pages are best.pt_sample1.html, not
    best_sample1.pt, a page passing for a checkpoint in the run's folder."""
    name = path.name
    suffix = next((name[-len(s):] for s in (".html", ".htm") if name.lower().endswith(s) and len(name) > len(s)), "")
    return (name[:-len(suffix)], suffix) if suffix else (name, ".html")


def numbered(path: Path, sample: int, n_samples: int) -> Path:
    """The page for sample `sample` (from 0): path itself for a single sample, else STEM_sampleN.html."""
    if n_samples == 1:
        return path
    stem, suffix = name_parts(path)
    return path.with_name(f"{stem}_sample{sample + 1}{suffix}")


SET_MARK = re.compile(rb'<meta name="tinygpt-page-set" content="([^"]*)">')  # in PAGE's head (written_for)


def written_for(path: Path) -> str | None:
    """The file name the page at `path` was asked for (PAGE.html for its PAGE_sampleN.html), or None:
    not an explorer page, or one written before pages recorded it. A page a user named
    story_sample2.html in a call of its own is not one of story.html's samples, though named alike."""
    head = file_head(path)
    if head is None or GENERATOR.encode() not in head or (found := SET_MARK.search(head)) is None:
        return None
    return os.fsdecode(unquote_to_bytes(found.group(1).decode("ascii", "replace")))


def page_set(page: Path) -> str:
    """The name of the set `page` belongs to (sample.py's lock of it): P.html for P.html and every
    P_sampleN.html (numbered), and for P, whose numbered pages are the same P_sampleN.html (name_parts)."""
    stem, suffix = name_parts(page)
    return re.sub(r"_sample\d+$", "", stem) + suffix


def in_page_set(page: Path) -> re.Pattern:
    """The file names of `page`'s set: page's own and its numbered ones."""
    stem, suffix = name_parts(page)
    return re.compile(rf"{re.escape(page.name)}|{re.escape(stem)}_sample\d+{re.escape(suffix)}")


def notebook_view(page: str, height: int = 520) -> HTML:
    """The page inline in a Jupyter notebook (an iframe, so its script and style stay its own).
    Needs IPython (raises ImportError without it)."""
    import warnings

    from IPython.display import HTML

    with warnings.catch_warnings():  # IPython suggests its IFrame, which takes an address, not a page
        warnings.simplefilter("ignore", UserWarning)
        return HTML(f'<iframe srcdoc="{html.escape(page)}" style="width:100%;height:{height}px;border:0"></iframe>')


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="tinygpt attention explorer">
<meta name="tinygpt-page-set" content="%SET%">
<title>%TITLE%</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #222; }
h1 { font-size: 1.2em; margin: 0 0 .3em; }
.controls { margin: .4em 0; }
.controls button { font: inherit; margin: 0 2px; padding: 1px 8px; border: 1px solid #999; border-radius: 3px;
                   background: #fff; cursor: pointer; }
.controls button.on { background: #333; color: #fff; }
.legend { color: #555; font-size: 12px; max-width: 70em; }
#text { margin: .8em 0; max-width: 75em; }
.tok { display: inline-block; margin: 2px 1px; padding: 1px 2px 0; border-radius: 3px; cursor: pointer;
       text-align: center; font-family: ui-monospace, monospace; vertical-align: top; }
.tok .w { display: block; min-height: 11px; font: 10px/11px system-ui, sans-serif; color: #444; }
.tok .bars { display: flex; justify-content: center; align-items: flex-end; gap: 1px; height: 12px; }
.tok .bars i { display: block; width: 3px; }
.tok.gen .t { border-bottom: 2px solid #c0392b; }
.tok.query { outline: 2px solid #111; }
.tok.masked { color: #aaa; background: repeating-linear-gradient(135deg, #eee 0 3px, #fff 3px 6px); }
#info { border-top: 1px solid #ccc; padding-top: .5em; min-height: 6em; font-size: 13px; }
#info .k { font-family: ui-monospace, monospace; unicode-bidi: isolate; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 3px; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div class="controls">layer <span id="layers"></span> &nbsp; head <span id="heads"></span></div>
<p class="legend" id="legend"></p>
<div id="text"></div>
<div id="info"></div>
<script type="application/json" id="data">%DATA%</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const T = D.tokens.length;
const COLORS = [[31, 119, 180], [214, 39, 40], [44, 160, 44], [148, 103, 189], [255, 127, 14],
                [140, 86, 75], [227, 119, 194], [23, 190, 207], [188, 189, 34], [127, 127, 127]];
const state = {layer: 0, head: 0, query: null, pinned: false};  // head: a number or "all"

// The weight (a fraction) that query q puts on key k in (layer, head); null for a masked key.
function weight(layer, head, q, k) {
  if (D.causal && k > q) return null;
  const start = D.causal ? q * (q + 1) / 2 : q * T;
  return D.weights[layer][head][start + k] / D.scale;
}
const pct = w => (100 * w).toFixed(1);
// a colour per head: the ten above while they last, else hues spread evenly (no two heads alike)
function rgb(head) {
  if (D.n_head <= COLORS.length) return COLORS[head];
  const hue = 360 * head / D.n_head, a = 0.7 * 0.42;  // HSL (hue, 70%, 42%) in RGB
  const f = n => {
    const k = (n + hue / 30) % 12;
    return Math.round(255 * (0.42 - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}
const rgba = (head, alpha) => `rgba(${rgb(head).join(",")},${alpha})`;
// the text colour that reads on a head's colour at alpha over the white page: white or black, whichever
// contrasts more (WCAG's relative luminance; either way at least 4.5:1)
function ink(head, alpha) {
  const lum = c => {  // a channel over white, linear
    c = (alpha * c + (1 - alpha) * 255) / 255;
    return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  };
  const [r, g, b] = rgb(head), L = 0.2126 * lum(r) + 0.7152 * lum(g) + 0.0722 * lum(b);
  return 1.05 / (L + 0.05) > (L + 0.05) / 0.05 ? "#fff" : "#000";
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function generated(i) { return i >= D.first_generated; }
function shownHeads() { return state.head === "all" ? [...Array(D.n_head).keys()] : [state.head]; }
// a token inside running text, isolated: a right-to-left one (Hebrew, Arabic) would otherwise take the
// numbers and commas beside it into its own direction, and "ו 1.9%" would read "1.9 ו"
// a token named in the panel or a list: one with no letter or digit quoted, as the heatmaps label it (a bare
// "." or "," read as the list's own punctuation: "top 5: . 81.5%, , 0.9%"); in a list, isolated too (U+2068..9)
function quoted(t) { return /[\\p{L}\\p{N}]/u.test(t) ? t : `'${t}'`; }
function iso(t) { return "\u2068" + quoted(t) + "\u2069"; }
function candidates(i) {  // the --show-steps data of generated token i, as text
  const s = D.steps[i - D.first_generated];
  if (!s) return "no step data";
  const top = s.top.map(([t, p]) => `${iso(t)} ${p}%`).join(", ");
  // the page is one pass over the tokens shown, where token i has i before it; when it was drawn the
  // model saw s.ctx (fewer after the window slid, more when earlier tokens are not shown)
  const pass = s.ctx === i ? "" : `; its weights here come from the page's one pass, where it has ${i} before it`;
  const context = `${s.ctx} token${s.ctx === 1 ? "" : "s"}`;
  return `drawn with p = ${s.p}% from a context of ${context}${pass}; top ${s.top.length}: ${top}`;
}

// ---- the page, built once ----
document.getElementById("title").textContent = D.title || "attention";
document.title = D.title || "attention";
document.getElementById("legend").textContent =
  `${T} token${T === 1 ? "" : "s"}, in one forward pass` + (D.earlier ? ` (the last ${T}; ${D.earlier} earlier tokens not shown)` : "") +
  `; ${D.n_layer} layer${D.n_layer === 1 ? "" : "s"} x ${D.n_head} head${D.n_head === 1 ? "" : "s"}. Hover a token to see where it looks (click to pin it, then hover ` +
  `the others for their weight in every head); shading = weight (square-root scale), number = % of the ` +
  `query's attention, to 0.1 (over many keys the rounded numbers of a row may not add up to 100)` +
  (!D.causal ? "; no causal mask" : T > 1 ? "; hatched = a future key, masked (weight exactly 0)" : "") +
  (D.first_generated < T ?
    "; underlined = generated (hover for its top candidates" + (D.rule ? `, ${D.rule}` : "") + ")" : "") +
  "; ␣ = space" + D.notes.map(note => "; " + note).join("") + ".";  // (what the escapes shown stand for)
function buttons(id, values, key) {
  const box = document.getElementById(id);
  for (const v of values) {
    const b = el("button", "", String(v));
    b.dataset.value = v;
    b.onclick = () => { state[key] = v; render(); };
    box.appendChild(b);
  }
}
buttons("layers", [...Array(D.n_layer).keys()], "layer");
buttons("heads", [...Array(D.n_head).keys(), "all"], "head");
const text = document.getElementById("text");
const spans = D.tokens.map((label, i) => {
  const span = el("span", "tok" + (generated(i) ? " gen" : ""));
  span.dataset.i = i;
  span.appendChild(el("span", "t", label));
  span.appendChild(el("span", "w"));
  if (generated(i)) span.title = candidates(i);
  span.onmouseenter = () => hover(i);
  span.onclick = () => pin(i);
  text.appendChild(span);
  if (D.breaks.includes(i)) text.appendChild(el("br"));
  return span;
});
const info = document.getElementById("info");

// ---- interaction: hover and click (and the address) all end in render() ----
function hover(i) {
  if (!state.pinned) { state.query = i; render(); } else { render(i); }
}
function pin(i) {
  state.pinned = !(state.pinned && state.query === i);
  state.query = i;
  render();
}
function render(hoveredKey) {
  for (const b of document.querySelectorAll(".controls button")) {
    const key = b.parentNode.id === "layers" ? "layer" : "head";
    b.classList.toggle("on", String(state[key]) === b.dataset.value);
  }
  const q = state.query, heads = shownHeads();
  spans.forEach((span, k) => {
    const w = q === null ? undefined : heads.map(h => weight(state.layer, h, q, k));
    const masked = w !== undefined && w[0] === null;
    span.classList.toggle("query", k === q);
    span.classList.toggle("masked", masked);
    const cell = span.querySelector(".w");
    cell.textContent = "";
    span.style.background = "";
    span.style.color = cell.style.color = "";
    if (w === undefined || masked) return;
    if (heads.length === 1) {  // one head: shading and the number
      span.style.background = rgba(heads[0], Math.sqrt(w[0]));
      span.style.color = cell.style.color = ink(heads[0], Math.sqrt(w[0]));
      cell.textContent = pct(w[0]);
    } else {  // every head: one bar each, height = weight
      const bars = el("span", "bars");
      if (D.n_head > 16) bars.style.gap = "0";  // many heads: 1 px each, so a token stays about as wide as 16
      w.forEach((x, h) => {
        const bar = el("i");
        if (D.n_head > 16) bar.style.width = "1px";
        bar.style.height = `${Math.max(12 * Math.sqrt(x), x > 0 ? 1 : 0)}px`;
        bar.style.background = rgba(h, 1);
        bars.appendChild(bar);
      });
      cell.appendChild(bars);
    }
  });
  describe(q, hoveredKey);
}
function describe(q, key) {  // the panel under the text
  info.textContent = "";
  if (q === null) { info.textContent = "Hover a token."; return; }
  const line = (...parts) => { const p = el("div"); parts.forEach(x => p.append(x)); info.appendChild(p); };
  line(`query ${q}: `, el("b", "k", quoted(D.tokens[q])), generated(q) ? ` (generated: ${candidates(q)})` : " (prompt)",
       state.pinned ? " [pinned: click it again to unpin]" : "");
  for (const h of shownHeads()) {
    const keys = [...Array(T).keys()].filter(k => weight(state.layer, h, q, k) !== null)
      .sort((a, b) => weight(state.layer, h, q, b) - weight(state.layer, h, q, a)).slice(0, 5);
    const sw = el("span", "swatch");
    sw.style.background = rgba(h, 1);
    line(sw, `layer ${state.layer} head ${h}, most weight on: ` +
         keys.map(k => `${iso(D.tokens[k])} (${k}) ${pct(weight(state.layer, h, q, k))}%`).join(", "));
  }
  if (key !== undefined && key !== q) {
    const ws = [...Array(D.n_head).keys()].map(h => weight(state.layer, h, q, key));
    line(`key ${key} `, el("b", "k", quoted(D.tokens[key])), ws[0] === null ? ": a future key, masked in every head" :
         `: layer ${state.layer}, ` + ws.map((w, h) => `head ${h} ${pct(w)}%`).join(", "));
  }
}

// ---- the address may pick the view: #layer=1&head=all&query=5 ----
// (a number past the last is the last; anything but digits, "1e1" or "-1", is ignored: the view stays as it was)
const asked = new URLSearchParams(location.hash.slice(1));
const number = (key, count) => /^[0-9]+$/.test(asked.get(key) ?? "") ? Math.min(count - 1, +asked.get(key)) : null;
const [layer, head, query] = [number("layer", D.n_layer), number("head", D.n_head), number("query", T)];
if (layer !== null) state.layer = layer;
if (head !== null || asked.get("head") === "all") state.head = head ?? "all";
if (query !== null) pin(query);
else render();
</script>
</body>
</html>
"""

"""The coreference probe: does the model resolve "she"/"he" to the right character, and which heads
look? probe.py is its command line; sweep.py --probe calls it too.

The `stories` corpus records, for every pronoun that selects an attribute ("Then she picked up her
red kite."), where the attribute is and where the antecedent's and the distractor's names are
(data.stories.Reference). On fresh held-out stories (a seed the training corpus did not use) the
probe cuts the text right where the attribute is due, keeps the model's last block_size tokens, and
measures:

(a) behaviour: greedy decoding from the cut yields the antecedent's own attribute, the distractor's
    attribute (the other character's of the same kind), or something else; beside it, the same over
    the references whose attribute value is in the window at all (elsewhere a model can only guess it),
    and what a rule with no model scores (`copy_rule`: the word that followed the last earlier "her",
    or whatever the window's last word is): most references repeat a possessive ("Mia played with her
    red kite. Then she played with her ▮"), so copying gets many right without resolving the pronoun,
    and the model's accuracy means something only above that line;
(b) attention: for every layer and head, the weight that the last position of the cut (the one
    predicting the attribute) puts on the antecedent's tokens, beside the same weight on the
    distractor's tokens and what uniform attention would put there, measured twice:
    - on the antecedent's *attribute*: its earlier mentions of the value now due (the "red" of
      "Mia had a red kite"), which is where a model that resolved the pronoun copies it from;
    - on the antecedent's *name*, summed over all tokens of all its mentions.
    Each counts the references with at least one whole such mention inside the window.

`report` prints both and names the best head of each measure (highest mean weight on the
antecedent, with its ratio to the distractor's: the ratio of the two means, and, where the
distractor is out of the window for some references (it then counts 0, which inflates that
ratio), the ratio over the references that have both in the window).

(c) ablation (`probe.py --ablate`): attention on the antecedent is a correlation; `ablation` removes
    each head in turn (tinygpt/ablation.py: its output set to 0, or to its mean over every position
    of the windows of other held-out stories) and measures (a)'s accuracy again, so the drop says
    which heads the behaviour needs; then the top two heads together, or a chosen set.
"""
from __future__ import annotations

import itertools
import os
import random
import re
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

from data.stories import Reference, generate_story, join_stories
from model import GPT
from tinygpt.ablation import Head, ablated, head_means, head_name
from tinygpt.errors import UserError, count
from tinygpt.report import rounded, times
from tinygpt.runtime import ThreadPolicy, following_free_cores

HELD_OUT_OFFSET = 1_000_003  # default seed = data.stories_seed + this: never the training corpus
SEEDS = 2**63  # a seed is in [0, 2**63), as probe.py --seed takes it: an offset seed wraps around
SLACK = 8  # extra tokens encoded before the window, so its first token is cut as in the full text
BATCH = 32  # cases run together (windows of equal length)
WORD = re.compile(r"\s*([A-Za-z]+)")  # the first word of a continuation
WHITESPACE = re.compile(r"\s")
MAX_STORIES = 10_000  # held-out stories at most: 100x the default, about 110,000 references, hours on a CPU


def check_stories(n: int, flag: str, note: str = "") -> None:
    """Refuse a number of held-out stories outside [1, MAX_STORIES] (`flag` names it, `note` follows): a
    billion were generated for 10 GB, deaf to Ctrl-C (probe.py, sweep.py --probe, the ablation table)."""
    if not 1 <= n <= MAX_STORIES:
        raise UserError(f"{flag}={n} must be in [1, {MAX_STORIES:,}]{note}")


def not_stories(run: object, dataset: str) -> UserError:
    """The refusal of a run trained on other data than the stories (probe.py, the ablation table)."""
    return UserError(f"{run} was trained on data.dataset={dataset!r}; the probe needs a run trained on the stories "
                     f"corpus, whose pronoun references it measures (e.g. python train.py configs/stories.yaml)")


def held_out_seed(stories_seed: int) -> int:
    """The probe's default seed of held-out stories for a run of data.stories_seed."""
    return (stories_seed + HELD_OUT_OFFSET) % SEEDS


# ---- held-out stories ----


def held_out_stories(n_stories: int, seed: int, tokenizer) -> tuple[str, list[tuple[int, Reference]], int]:
    """n_stories fresh stories joined as in the training corpus -> (text, [(offset of the story in
    text, its Reference)], stories skipped). A story the tokenizer cannot encode (a char vocabulary
    from a small corpus may lack a rare letter) is skipped."""
    rng = random.Random(seed)
    stories = [generate_story(rng) for _ in range(n_stories)]
    kept = [(story, refs) for story, refs in stories if encodable(tokenizer, story)]
    text, refs = join_stories(kept)
    return text, refs, len(stories) - len(kept)


def encodable(tokenizer, text: str) -> bool:
    try:
        tokenizer.encode(text)
    except UserError:
        return False
    return True


# ---- char offsets <-> token positions ----


def token_char_spans(tokenizer, ids: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) char offsets of each token in tokenizer.decode(ids), from cumulative decoded
    lengths. When a token splits a multi-byte character (its own decoding then differs), the ends
    are found prefix by prefix instead: a character belongs to the token that completes it."""
    ids = [int(i) for i in ids]
    pieces = [tokenizer.decode([i]) for i in ids]
    full = tokenizer.decode(ids)
    if "".join(pieces) == full:
        ends = list(itertools.accumulate(len(p) for p in pieces))
    else:
        ends = [len(os.path.commonprefix([tokenizer.decode(ids[:k + 1]), full])) for k in range(len(ids))]
    starts = [0] + ends[:-1]
    return list(zip(starts, ends))


def mention_positions(token_spans: Sequence[tuple[int, int]], mentions: Sequence[tuple[int, int]]) -> list[int]:
    """Token positions covering the char spans `mentions` that lie wholly inside the tokens' range
    (token_spans: each token's (start, end), in the same coordinates); partly cut-off mentions do
    not count."""
    if not token_spans:
        return []
    lo, hi = token_spans[0][0], token_spans[-1][1]
    visible = [(s, e) for s, e in mentions if lo <= s and e <= hi]
    return [p for p, (ts, te) in enumerate(token_spans) if any(ts < e and te > s for s, e in visible)]


@dataclass
class Case:
    """One reference, cut where its attribute is due and cropped to the model's window."""
    reference: Reference  # offsets relative to its story
    ids: list[int]  # the last <= block_size tokens before the attribute
    n_new: int  # tokens to decode: enough for either character's attribute, plus one
    antecedent_positions: list[int]  # window positions of the antecedent's visible name tokens
    distractor_positions: list[int]  # same for the distractor
    antecedent_attribute_positions: list[int]  # ... of earlier mentions of the antecedent's attribute
    distractor_attribute_positions: list[int]  # ... of the distractor's attribute of the same kind


def build_case(tokenizer, text: str, base: int, ref: Reference, block_size: int) -> Case:
    """Cut `text` (the story starts at `base`) at the last token boundary at or before the attribute
    (for BPE that is before " red", whose space belongs to the attribute's token), encoding only
    as much text as the window needs."""
    attribute_pos = base + ref.attribute_pos
    attribute_end = attribute_pos + len(ref.attribute)
    margin = 4 * block_size  # chars: plenty for block_size tokens unless tokens average > 4 chars
    while True:
        start = max(0, attribute_pos - margin)
        if start > 0:  # begin at the space before a word, so the cut tokenises as the full text does
            match = WHITESPACE.search(text, start, attribute_pos)
            start = match.start() if match else start
        ids = tokenizer.encode(text[start:attribute_end])
        spans = [(s + start, e + start) for s, e in token_char_spans(tokenizer, ids)]
        k = sum(e <= attribute_pos for _, e in spans)  # tokens wholly before the attribute
        if start == 0 or k >= block_size + SLACK:
            break
        margin *= 2
    if k == 0:
        raise ValueError(f"the attribute at {attribute_pos} has no context before it")
    cut = spans[k - 1][1]
    gap = text[cut:attribute_pos]  # "" for chars, " " for BPE
    n_new = max(len(ids) - k, len(tokenizer.encode(gap + ref.distractor_attribute))) + 1
    window, window_spans = ids[:k][-block_size:], spans[:k][-block_size:]

    def positions(spans_in_story: list[tuple[int, int]]) -> list[int]:
        return mention_positions(window_spans, [(s + base, e + base) for s, e in spans_in_story])

    def said_before(word: str) -> list[int]:  # whole-word mentions of `word` earlier in the story
        pattern = re.compile(rf"\b{re.escape(word)}\b")
        return mention_positions(window_spans, [m.span() for m in pattern.finditer(text, base, attribute_pos)])
    return Case(ref, window, n_new, positions(ref.antecedent_spans), positions(ref.distractor_spans),
                said_before(ref.attribute), said_before(ref.distractor_attribute))


# ---- measuring ----


def held_out_cases(tokenizer, n_stories: int, seed: int, block_size: int) -> tuple[list[Case], int, int]:
    """The probe's cases from n_stories fresh stories -> (cases, references, stories skipped)."""
    text, refs, skipped = held_out_stories(n_stories, seed, tokenizer)
    return [build_case(tokenizer, text, base, ref, block_size) for base, ref in refs], len(refs), skipped


def batches(cases: Sequence[Case], batch_size: int) -> Iterator[list[Case]]:
    """Cases in batches of windows of equal length (most are full, block_size; the first story's
    are shorter)."""
    by_length: dict[int, list[Case]] = {}
    for case in cases:
        by_length.setdefault(len(case.ids), []).append(case)
    for group in by_length.values():
        for i in range(0, len(group), batch_size):
            yield group[i:i + batch_size]


@torch.no_grad()
def run_batch(model: GPT, cases: Sequence[Case], device: torch.device,
              need_attention: bool = True) -> tuple[list[list[int]], torch.Tensor | None]:
    """Cases whose windows have the same length T, in one batch -> (each case's greedily decoded
    ids, the last position's attention weights (B, n_layer, nh, T), or None without need_attention)."""
    block_size = model.config.block_size
    seq = torch.tensor([c.ids for c in cases], dtype=torch.long, device=device)  # (B, T)
    last_row = None
    if need_attention:
        # only the last position's weights are wanted: the others go into a KV cache on the fast path, so
        # memory grows with T, not with every layer's (B, nh, T, T) (block_size 2048: 6.8 GB for a 1-layer model)
        caches = model.new_kv_caches(len(cases)) if model.config.causal and seq.size(1) > 1 else None
        if caches is not None:
            model(seq[:, :-1], caches)  # (B, T-1, V), unused: the caches now hold positions 0 .. T-2
        logits, traces = model.forward_with_attention(seq[:, -1:] if caches else seq, caches)  # per layer (B, nh, ., T)
        last_row = torch.stack([t.weights[:, :, -1, :] for t in traces], dim=1).float().cpu()  # (B, n_layer, nh, T)
    for step in range(max(c.n_new for c in cases)):
        if step or not need_attention:  # the window slides by one: always the last block_size tokens
            logits = model(seq[:, -block_size:])  # (B, T, V)
        seq = torch.cat([seq, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)  # (B, T+step+1)
    T = len(cases[0].ids)
    new = [row[T:T + c.n_new] for row, c in zip(seq.tolist(), cases)]
    return new, last_row


def classify(decoded: str, ref: Reference) -> str:
    """The first word decoded -> 'antecedent', 'distractor' or 'other'."""
    match = WORD.match(decoded)
    word = match.group(1) if match else ""
    return "antecedent" if word == ref.attribute else "distractor" if word == ref.distractor_attribute else "other"


def copy_rule(tokenizer, case: Case) -> str:
    """What copying, with no model and no pronoun resolved, would write at the cut: the word that followed
    the last earlier occurrence of the window's last word ("... Then she played with her ▮": the word after
    the previous "her"), classified as the model's output is; 'other' where there is none in the window."""
    text = tokenizer.decode(case.ids)
    words = list(re.finditer(r"[A-Za-z]+", text))
    earlier = [m for m in words[:-1] if m.group() == words[-1].group()] if words else []
    return classify(text[earlier[-1].end():], case.reference) if earlier else "other"


def r6(x: float) -> float:
    """A share, an accuracy or a drop, as probe.json keeps it: the text rounds it once more (to 0.1%), and 4
    decimals rounded twice (0.006459 as 0.0065, then 0.7%; 1 of 29 right as 0.0345, then 3.5% beside the
    count's 3.4%) disagreed with the unrounded figure."""
    return round(float(x), 6)


def tally(outcomes: Sequence[str]) -> dict:
    """classify's outcomes -> their counts and the accuracy (the antecedent's share; None of no
    outcome: a share of nothing would read as 0%)."""
    counts = {kind: sum(o == kind for o in outcomes) for kind in ("antecedent", "distractor", "other")}
    return {**counts, "accuracy": r6(counts["antecedent"] / len(outcomes)) if outcomes else None}


def behaviour(model: GPT, tokenizer, cases: Sequence[Case], device: torch.device,
              batch_size: int = BATCH, threads: ThreadPolicy | None = None) -> dict:
    """Greedy decoding of every case on the fast path (no attention weights) -> tally. `threads`:
    the CPU thread policy, re-checked before each batch (runtime.ThreadPolicy), as in sample.py."""
    outcomes = []
    for batch in following_free_cores(batches(cases, batch_size), threads):
        new, _ = run_batch(model, batch, device, need_attention=False)
        outcomes += [classify(tokenizer.decode(ids), case.reference) for case, ids in zip(batch, new)]
    return tally(outcomes)


def probe(model: GPT, tokenizer, n_stories: int, seed: int, device: torch.device,
          batch_size: int = BATCH, threads: ThreadPolicy | None = None,
          stop: Callable[[], bool] | None = None) -> dict | None:
    """Run the probe; returns the figures (weights as fractions of the position's attention).
    `threads`: as in behaviour. `stop`, asked before each batch: True ends it early, returning None
    (sweep.py after Ctrl-C)."""
    cfg = model.config
    cases, n_refs, skipped = held_out_cases(tokenizer, n_stories, seed, cfg.block_size)
    results = []  # (case, decoded ids, last_row (n_layer, nh, T))
    for batch in following_free_cores(batches(cases, batch_size), threads):
        if stop is not None and stop():
            return None
        new, last_rows = run_batch(model, batch, device)
        results.extend(zip(batch, new, last_rows))
    outcomes = [classify(tokenizer.decode(new), case.reference) for case, new, _ in results]
    return {
        "stories": n_stories - skipped, "skipped_stories": skipped, "seed": seed, "references": n_refs,
        "behaviour": tally(outcomes),
        # the same, only where the antecedent's name is in the window (nearly always), and only where the
        # value due is (the references a model can get right from the window at all)
        "behaviour_in_window": tally([o for o, (c, _, _) in zip(outcomes, results) if c.antecedent_positions]),
        "behaviour_attribute_in_window": tally([o for o, (c, _, _) in zip(outcomes, results)
                                                if c.antecedent_attribute_positions]),
        "copy_rule": tally([copy_rule(tokenizer, c) for c, _, _ in results]),
        "attention_attribute": attention_on(
            [(c.antecedent_attribute_positions, c.distractor_attribute_positions, row) for c, _, row in results],
            cfg.n_layer, cfg.n_head),
        "attention": attention_on(
            [(c.antecedent_positions, c.distractor_positions, row) for c, _, row in results], cfg.n_layer, cfg.n_head),
    }


def attention_on(cases: list[tuple[list[int], list[int], torch.Tensor]], n_layer: int, n_head: int) -> dict:
    """cases: (antecedent's window positions, distractor's, the predicting position's weights
    (n_layer, nh, T)) -> the mean weight per layer and head on each side, over the cases whose
    antecedent positions are not empty (the distractor counting 0 where its positions are empty);
    the uniform baseline; the best head, with the ratio of its two means and that ratio over the
    cases where both are in the window (`ratio_in_window`; each None without weight on the distractor).
    Where no case counts, no head was measured: the means, the baseline and the best head are None."""
    ant_sum, dis_sum = torch.zeros(n_layer, n_head), torch.zeros(n_layer, n_head)
    ant_paired_sum = torch.zeros(n_layer, n_head)  # the antecedent's weight where the distractor's is measured too
    counted = distractor_visible = 0
    uniform_sum = per_key_sum = 0.0
    for ant, dis, last_row in cases:
        if not ant:
            continue
        counted += 1
        T = last_row.size(-1)
        on_antecedent = last_row[..., ant].sum(dim=-1)  # (n_layer, nh)
        ant_sum += on_antecedent
        if dis:
            distractor_visible += 1
            dis_sum += last_row[..., dis].sum(dim=-1)
            ant_paired_sum += on_antecedent
        uniform_sum += len(ant) / T  # what 1/T on every key puts on these tokens
        per_key_sum += 1 / T
    if not counted:  # (shares of nothing, and a "best" head L0H0 among equal zeros, would read as results)
        return {"references": 0, "distractor_visible": 0, "uniform": None, "per_key": None,
                "antecedent": None, "distractor": None, "best": None}
    ant_mean, dis_mean = ant_sum / counted, dis_sum / counted  # (n_layer, nh)
    shown = [[r6(x) for x in row] for row in ant_mean.tolist()]
    # ranked as shown (ties: the first), as the ablation ranks it: two heads equal as shown named
    # one head "best" and the other "most attention" in one report
    layer, head = top_heads(torch.tensor(shown, dtype=torch.float64), 1)[0]
    best_ant, best_dis = float(ant_mean[layer, head]), float(dis_mean[layer, head])
    # over the same references on both sides (a ratio of sums is the ratio of means)
    paired_ant, paired_dis = float(ant_paired_sum[layer, head]), float(dis_sum[layer, head])
    return {
        "references": counted, "distractor_visible": distractor_visible,
        "uniform": r6(uniform_sum / counted), "per_key": r6(per_key_sum / counted),
        "antecedent": shown,
        "distractor": [[r6(x) for x in row] for row in dis_mean.tolist()],
        "best": {"layer": layer, "head": head, "antecedent": r6(best_ant), "distractor": r6(best_dis),
                 "ratio": ratio(best_ant, best_dis), "ratio_in_window": ratio(paired_ant, paired_dis)},
    }


# ---- ablation: which heads does the behaviour need? ----

MODES = ("zero", "mean")
MEAN_SEED_OFFSET = 1  # the mean-ablation stories: the probe's held-out seed + 1, not the probe's own


def mean_ablation_cases(tokenizer, n_stories: int, seed: int, block_size: int) -> tuple[list[Case], int]:
    """The windows mean ablation averages the heads' outputs over, those of n_stories other held-out
    stories (seed + MEAN_SEED_OFFSET), and how many of the stories were skipped; a UserError where they
    give none. probe.py asks first, before
    the probe's slow part (its result was thrown away by this refusal, after minutes)."""
    mean_seed = (seed + MEAN_SEED_OFFSET) % SEEDS
    mean_cases, _, mean_skipped = held_out_cases(tokenizer, n_stories, mean_seed, block_size)
    if not mean_cases:  # e.g. a word-level vocabulary that lacks a word of each story
        units = f"{tokenizer.unit}s" if hasattr(tokenizer, "unit") else "characters"  # (words, of a word vocabulary)
        raise UserError(f"no window to average the heads' outputs over for mean ablation: the "
                        f"{count(n_stories, 'held-out story', 'held-out stories')} of seed "
                        f"{mean_seed} gave no reference ({mean_skipped} skipped: {units} outside this model's "
                        f"vocabulary); try more --stories, or another --seed")
    return mean_cases, mean_skipped


def ablation(model: GPT, tokenizer, n_stories: int, seed: int, device: torch.device,
             heads: Sequence[Head] | None = None, attention: Sequence[Sequence[float]] | None = None,
             batch_size: int = BATCH, threads: ThreadPolicy | None = None,
             mean_cases: tuple[list[Case], int] | None = None) -> dict:
    """The probe's accuracy with heads removed (zero and mean ablation, tinygpt/ablation.py).
    heads None: every head alone (an n_layer x nh table), then together the top two by `attention`
    (n_layer x nh, e.g. the weight on the antecedent's attribute) and the top two by zero-ablation
    drop; else the given heads together. Means: every position of the windows of n_stories other
    held-out stories (seed + MEAN_SEED_OFFSET): `mean_cases` where the caller has them (mean_ablation_cases)."""
    cfg = model.config
    cases, n_refs, _ = held_out_cases(tokenizer, n_stories, seed, cfg.block_size)
    mean_seed = (seed + MEAN_SEED_OFFSET) % SEEDS
    mean_cases, mean_skipped = mean_cases or mean_ablation_cases(tokenizer, n_stories, seed, cfg.block_size)
    windows = (torch.tensor([c.ids for c in b], device=device) for b in batches(mean_cases, batch_size))
    means, positions = head_means(model, windows)  # (n_layer, nh, hs)

    def accuracy(removed: Sequence[Head]) -> dict[str, float]:
        out = {}
        for mode, values in (("zero", None), ("mean", means)):
            with ablated(model, removed, values):
                out[mode] = behaviour(model, tokenizer, cases, device, batch_size, threads)["accuracy"]
        return out

    baseline = behaviour(model, tokenizer, cases, device, batch_size, threads)["accuracy"]
    result = {"references": n_refs, "seed": seed, "baseline": baseline,
              "mean_over": {"stories": n_stories - mean_skipped, "seed": mean_seed, "positions": positions}}
    together: list[tuple[str, list[Head]]] = []
    if heads is None:
        grid = [[accuracy([(layer, head)]) for head in range(cfg.n_head)] for layer in range(cfg.n_layer)]
        drop = {mode: torch.tensor([[baseline - cell[mode] for cell in row] for row in grid]) for mode in MODES}
        result["accuracy"] = {mode: [[cell[mode] for cell in row] for row in grid] for mode in MODES}
        result["drop"] = {mode: [[r6(x) for x in row] for row in drop[mode].tolist()] for mode in MODES}
        # no head where no removal lowers the accuracy (the first of equal heads is no finding): layer and head null
        result["most_harmful"] = {mode: {**(head_dict(top_heads(drop[mode], 1)[0]) if drop[mode].max() > 0
                                            else {"layer": None, "head": None}),
                                         "drop": r6(drop[mode].max())} for mode in MODES}
        result["median_drop"] = {mode: r6(drop[mode].median()) for mode in MODES}  # a head's: the lower middle
        if attention is not None:
            looks = torch.tensor(attention, dtype=torch.float)  # (n_layer, nh)
            best = top_heads(looks, 1)[0]
            result["most_attention"] = {**head_dict(best), "attention": r6(looks[best]),
                                        **{f"drop_{m}": r6(drop[m][best]) for m in MODES},
                                        **{f"rank_{m}": rank_among(result["drop"][m], r6(drop[m][best]))
                                           for m in MODES}}
            together.append(("top two by attention", top_heads(looks, 2)))
        together.append(("top two by zero-ablation drop", harmful_heads(drop["zero"], 2)))
    else:
        together.append(("chosen", list(heads)))
    result["together"] = []
    for what, removed in together:
        if len(removed) < 2 and what != "chosen":
            continue  # a model with a single head, or fewer than two heads that matter, has no top two
        acc = accuracy(removed)
        result["together"].append({"what": what, "heads": [head_name(h) for h in removed], "accuracy": acc,
                                   "drop": {m: r6(baseline - acc[m]) for m in MODES}})
    return result


def top_heads(values: torch.Tensor, k: int) -> list[Head]:
    """The k (layer, head) cells of values (n_layer, nh) with the highest values, highest first
    (ties: the first in reading order)."""
    n_head = values.size(1)
    order = sorted(range(values.numel()), key=lambda i: -float(values.view(-1)[i]))
    return [divmod(i, n_head) for i in order[:k]]


def harmful_heads(drop: torch.Tensor, k: int) -> list[Head]:
    """Of the k heads whose removal lowers the accuracy most (drop: n_layer x nh), those whose removal
    lowers it at all: where nothing drops, the first of equals would read as a finding."""
    return [h for h in top_heads(drop, k) if drop[h] > 0]


def head_dict(head: Head) -> dict:
    return {"layer": head[0], "head": head[1]}


# ---- report ----


def report(result: dict, n_layer: int, n_head: int) -> str:
    """The human-readable part of the output (the JSON line follows it)."""
    b = result["behaviour"]
    R = max(result["references"], 1)
    skipped = result["skipped_stories"]
    lines = [f"{count(result['references'], 'reference')} in "
             f"{count(result['stories'], 'held-out story', 'held-out stories')} (seed {result['seed']}"
             + (f"; {skipped} skipped: {'words' if result.get('tokenizer') == 'word' else 'characters'} outside the "
                f"vocabulary" if skipped else "") + ")", "",
             "behaviour: greedy decoding where the attribute is due produces",
             f"  the antecedent's attribute  {b['antecedent']:5d}  {100 * b['antecedent'] / R:5.1f}%",
             f"  the distractor's attribute  {b['distractor']:5d}  {100 * b['distractor'] / R:5.1f}%",
             f"  something else              {b['other']:5d}  {100 * b['other'] / R:5.1f}%"]
    w = result["behaviour_in_window"]
    named = w["antecedent"] + w["distractor"] + w["other"]
    if named:
        lines.append(f"  (where the antecedent's name is in the window: {w['antecedent']} / {w['distractor']} / "
                     f"{w['other']} of {named}, {100 * w['accuracy']:.1f}% right)")
    if (v := result.get("behaviour_attribute_in_window")) and v["accuracy"] is not None:
        seen = v["antecedent"] + v["distractor"] + v["other"]
        lines.append(f"  (where its attribute is in the window, {seen} of {R}: {v['antecedent']} / {v['distractor']} / "
                     f"{v['other']}, {100 * v['accuracy']:.1f}% right; elsewhere only a guess can be right)")
    if (c := result.get("copy_rule")) and c["accuracy"] is not None:
        lines.append(f"  a rule with no model, copying the word that followed the last earlier 'her' (or whatever "
                     f"word the window ends with): {c['antecedent']} / {c['distractor']} / {c['other']}, "
                     f"{100 * c['accuracy']:.1f}% right: what needs no pronoun resolved")
    lines += ["", "attention of the position predicting the attribute (% of its attention; cell = antecedent / "
              "distractor, the distractor counting 0 where its tokens are not in the window)"]
    lines += attention_table(result["attention_attribute"], "earlier mentions of its attribute value", n_layer, n_head)
    lines += attention_table(result["attention"], "its name", n_layer, n_head)
    return "\n".join(lines)


def attention_table(a: dict, what: str, n_layer: int, n_head: int) -> list[str]:
    """One attention table of the report: mean weight per layer x head on the antecedent's `what`."""
    if not a["references"]:
        return ["", f"on {what}: no reference had one inside the window"]
    lines = ["", f"on {what}, mean over the {count(a['references'], 'reference')} with it in the window:"]
    cells = [[f"{rounded(a['antecedent'][i][h], 1, 100):>5} / {rounded(a['distractor'][i][h], 1, 100):>4}"
              for h in range(n_head)] for i in range(n_layer)]
    width = max(len(c) for row in cells for c in row)
    lines.append(" " * 9 + "".join(f"  {'head ' + str(h):>{width}}" for h in range(n_head)))
    lines += [f"{'layer ' + str(i):<9}" + "".join(f"  {c:>{width}}" for c in row) for i, row in enumerate(cells)]
    best = a["best"]
    lines += [f"uniform attention would put {rounded(a['uniform'], 1, 100)}% there (1/keys = "
              f"{rounded(a['per_key'], 2, 100)}% per key); the distractor's are in the window for "
              f"{a['distractor_visible']} of {a['references']}",
              f"best head: layer {best['layer']} head {best['head']}: {rounded(best['antecedent'], 1, 100)}% on the "
              f"antecedent's, {rounded(best['distractor'], 1, 100)}% on the distractor's ({best_ratio(a)})"]
    return lines


def ratio(a: float, b: float) -> float | None:
    """a / b to 6 decimals, never rounded up to 1 (0.9999996 must not read as 1); None where b is 0.
    (Tables round it once more, to 0.1: kept to 2 decimals, 5.1457 was 5.15, then shown as 5.2x.)"""
    if b <= 0:
        return None
    return r6(a / b) if a >= b else min(r6(a / b), 0.999999)


def best_ratio(a: dict) -> str:
    """The best head's antecedent / distractor ratio; where the distractor is out of the window for
    some references (its mean counts 0 there), also the ratio over those with both in it."""
    both, best = a["distractor_visible"], a["best"]
    if not both:
        return "the distractor's never in the window: no ratio"
    if best["ratio"] is None:
        return "no weight on the distractor's"
    said = f"{times(best['ratio'])} the distractor's"
    if best["ratio"] < 1:  # the head with the most on the antecedent's puts more still on the distractor's
        said += ": it attends more to the distractor's"
    if both == a["references"] or best.get("ratio_in_window") is None:  # (a probe.json from before it)
        return said
    return (f"{said}; {times(best['ratio_in_window'])} over the {count(both, 'reference')} with both in the "
            f"window")


def ablation_report(ab: dict, attention: dict | None, n_layer: int, n_head: int) -> str:
    """The ablation part of the output: the layer x head table of accuracy drops beside each head's
    attention on the antecedent's attribute (`attention`: the probe's attention_attribute)."""
    base = ab["baseline"]
    m = ab["mean_over"]
    lines = [f"ablation: accuracy {100 * base:.1f}% with every head ({count(ab['references'], 'reference')}, the "
             f"fast path); a head removed: its output set to 0 (zero) or to its mean over every position of the "
             f"windows of {count(m['stories'], 'other held-out story', 'other held-out stories')} (seed {m['seed']}, "
             f"{count(m['positions'], 'position')})"]
    if base == 0:
        lines.append("the model resolves no reference with every head, so no removal can lower that: the drops "
                     "below say nothing about its heads (train it longer)")
    if "drop" in ab:
        looks = attention["antecedent"] if attention and attention["references"] else None
        lines += ["", "drop in accuracy, points, zero / mean ablation"
                  + (" (after '|': the head's attention on the antecedent's attribute, as above)" if looks else "")]
        cells = [[f"{100 * ab['drop']['zero'][i][h]:5.1f} / {100 * ab['drop']['mean'][i][h]:5.1f}"
                  + (f" | {100 * looks[i][h]:4.1f}%" if looks else "") for h in range(n_head)] for i in range(n_layer)]
        width = max(len(c) for row in cells for c in row)
        lines.append(" " * 9 + "".join(f"  {'head ' + str(h):>{width}}" for h in range(n_head)))
        lines += [f"{'layer ' + str(i):<9}" + "".join(f"  {c:>{width}}" for c in row) for i, row in enumerate(cells)]
        for mode in MODES:
            worst = ab["most_harmful"][mode]
            median = f"the median head's drop: {100 * ab['median_drop'][mode]:.1f}"
            if worst["drop"] <= 0:  # (a first head among equals would read as a finding)
                lines.append(f"hurts most when removed ({mode}): none, no head's removal lowers the accuracy "
                             f"({median})")
                continue
            lines.append(f"hurts most when removed ({mode}): head {worst['layer']}.{worst['head']}, accuracy "
                         f"{100 * base:.1f}% -> {100 * (base - worst['drop']):.1f}% (drop {100 * worst['drop']:.1f} "
                         f"points; {median})")
        if "most_attention" not in ab:  # (a first head among zeros would read as a finding)
            lines.append("most attention on the antecedent's attribute: none, no reference had its attribute "
                         "inside the window")
        else:
            a = ab["most_attention"]
            lines.append(f"most attention on the antecedent's attribute: head {a['layer']}.{a['head']} "
                         f"({100 * a['attention']:.1f}%): removing it costs {100 * a['drop_zero']:.1f} / "
                         f"{100 * a['drop_mean']:.1f} points (rank {a['rank_zero']} / {a['rank_mean']} of "
                         f"{n_layer * n_head} by drop)")
    for t in ab["together"]:
        lines.append(f"removed together ({t['what']}): {' + '.join(t['heads'])}: accuracy "
                     f"{100 * t['accuracy']['zero']:.1f}% / {100 * t['accuracy']['mean']:.1f}% (zero / mean), "
                     f"drop {100 * t['drop']['zero']:.1f} / {100 * t['drop']['mean']:.1f} points")
    if "drop" in ab:  # a pair the docs promise, said missing rather than left out
        one_head = "the model has one head" if n_layer * n_head == 1 else ""
        for what, why in (("top two by attention", one_head or "no reference had its attribute inside the window"),
                          ("top two by zero-ablation drop",
                           one_head or "fewer than two heads lower the accuracy when removed")):
            if not any(t["what"] == what for t in ab["together"]):
                lines.append(f"removed together ({what}): none, {why}")
    return "\n".join(lines)


def rank_among(drops: Sequence[Sequence[float]], drop: float) -> str:
    """A head's rank by drop among every head (drops: n_layer x nh), "3", or "1-15" when tied (the
    first of equals would read as a finding)."""
    flat = [d for row in drops for d in row]
    higher, equal = sum(d > drop for d in flat), sum(d == drop for d in flat)
    return f"{higher + 1}" if equal <= 1 else f"{higher + 1}-{higher + equal}"

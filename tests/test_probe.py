"""Guards tinygpt/coreference.py, the coreference probe, and probe.py.

Char offsets map to the right token positions (char tokenizer, a hand-built BPE encoding including a
character split across byte tokens, and GPT-2's ranks when the shared offline copy is at hand); a
reference is cut right before its attribute, its window holds at most block_size tokens and its
antecedent positions spell the antecedent's name; the first decoded word is classified as the
antecedent's attribute, the distractor's or something else. On a tiny model trained in-process:
the behaviour counts add up to the number of references in the held-out stories, the JSON line
equals the returned figures, and with every query projection zeroed (uniform attention) the weight
on the antecedent's name equals the uniform baseline in every head. Exit 2 with one line: a run not
trained on `stories`, a non-causal run without --force, a negative --seed, --stories beyond its
bound or beyond memory, and held-out stories that give no reference at all. The output says what
it measures: the best head's ratio to the distractor beside the one over references with both in
the window, a ratio under 1 never as "1.0x", counts of one in the singular, and `--ablate RUN` (the
run after the flag) names what --ablate takes.
"""
from __future__ import annotations

import io
import json
import re
import random

import pytest
import tiktoken
import torch

import probe
import sweep
from tinygpt import coreference, runtime
from tinygpt.checkpoint import load_checkpoint, load_model, save_checkpoint
from conftest import TINY_STORIES, r50k_cache
from data.stories import Reference, generate_story
from model import GPT, ModelConfig, generate
from tinygpt.ablation import parse_heads
from tinygpt.errors import UserError, run_cli
from tinygpt.report import times
from tinygpt.runs import write_probe
from tinygpt.tokenizer import CharTokenizer, TiktokenTokenizer, WordTokenizer, tokenizer_from_dict

N_LAYER, N_HEAD, BLOCK = TINY_STORIES["n_layer"], TINY_STORIES["n_head"], TINY_STORIES["block_size"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(tiny_stories_run):
    return tiny_stories_run


def toy_encoding() -> tiktoken.Encoding:
    """All 256 single bytes plus a few merges, 'é' (two bytes) among them."""
    ranks = {bytes([b]): b for b in range(256)}
    for merge in [b" c", b" ca", b" cat", b" s", b" sat", b"\xc3\xa9", b"Mi", b"Mia"]:
        ranks[merge] = len(ranks)
    return tiktoken.Encoding(name="toy", pat_str=r""" ?\p{L}+| ?[^\s\p{L}]+|\s+""", mergeable_ranks=ranks,
                             special_tokens={})


# ---- char offsets -> token positions ----


def test_char_spans_with_the_char_tokenizer():
    text = "Mia had a kite. She"
    tok = CharTokenizer(text)
    spans = coreference.token_char_spans(tok, tok.encode(text))
    assert spans == [(i, i + 1) for i in range(len(text))]
    assert coreference.mention_positions(spans, [(0, 3)]) == [0, 1, 2]
    assert coreference.mention_positions(spans[1:], [(0, 3)]) == []  # partly cut off: not visible
    window = [(s + 100, e + 100) for s, e in spans]  # the same tokens further into a text
    assert coreference.mention_positions(window, [(100, 103), (110, 114)]) == [0, 1, 2, 10, 11, 12, 13]


def test_a_mention_cut_off_at_the_windows_end_is_not_visible():
    """A name whose last characters lie past the window's last token is cut off as much as one whose
    first lie before it: its visible tokens would have counted as the whole name."""
    spans = [(i, i + 1) for i in range(10, 16)]  # the tokens of chars 10..15
    assert coreference.mention_positions(spans, [(14, 17)]) == []  # chars 14-16: 16 is past the window
    assert coreference.mention_positions(spans, [(8, 11)]) == []  # chars 8-10: 8 and 9 before it
    assert coreference.mention_positions(spans, [(13, 16), (14, 17)]) == [3, 4, 5]  # the whole one only


def test_char_spans_with_bpe_and_a_split_character():
    enc = toy_encoding()
    full = TiktokenTokenizer("toy", None, encoding=enc)
    ids = full.encode("Mia sat. café")
    assert [full.decode([i]) for i in ids][:3] == ["Mia", " sat", "."]
    spans = coreference.token_char_spans(full, ids)
    assert spans[:3] == [(0, 3), (3, 7), (7, 8)]
    assert coreference.mention_positions(spans, [(0, 3)]) == [0]
    assert coreference.mention_positions(spans, [(4, 7)]) == [1]  # "sat" lies inside the token " sat"
    # A compact vocabulary without 'é' spells it with its two bytes: the character belongs to the
    # token that completes it, so each offset still lands in one token.
    compact = TiktokenTokenizer.from_text("toy", "Mia sat. caf", encoding=enc)
    ids = compact.encode("café cat")
    assert compact.decode(ids) == "café cat"
    spans = coreference.token_char_spans(compact, ids)
    assert spans[0][0] == 0 and spans[-1][1] == len("café cat")
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous
    e_acute = coreference.mention_positions(spans, [(3, 4)])
    assert len(e_acute) == 1 and compact.decode(ids[:e_acute[0] + 1]) == "café"


# ---- cases ----


def story_with_references(seed: int = 3) -> tuple[str, list[Reference]]:
    text, refs = generate_story(random.Random(seed))
    assert refs
    return text, refs


def test_build_case_cuts_before_the_attribute_char():
    text, refs = story_with_references()
    tok = CharTokenizer(text)
    for ref in refs:
        case = coreference.build_case(tok, text, 0, ref, block_size=48)
        assert len(case.ids) == min(48, ref.attribute_pos)
        assert text[:ref.attribute_pos].endswith(tok.decode(case.ids))
        assert case.n_new == max(len(ref.attribute), len(ref.distractor_attribute)) + 1
        name = tok.decode([case.ids[p] for p in case.antecedent_positions])
        assert name == ref.antecedent * (len(name) // max(len(ref.antecedent), 1))
        visible = [s for s in ref.antecedent_spans if s[0] >= ref.attribute_pos - 48]
        assert len(case.antecedent_positions) == len(ref.antecedent) * len(visible)


def test_build_case_with_word_tokens_finds_both_attribute_mentions():
    text, refs = story_with_references()
    tok = WordTokenizer.from_text(text)
    found = 0
    for ref in refs:
        case = coreference.build_case(tok, text, 0, ref, block_size=64)
        assert text[:ref.attribute_pos].endswith(tok.decode(case.ids) + " ")  # " red" is one token, cut before it
        for positions, word in ((case.antecedent_attribute_positions, ref.attribute),
                                (case.distractor_attribute_positions, ref.distractor_attribute)):
            assert all(tok.decode([case.ids[p]]).strip() == word for p in positions)
            window = tok.decode(case.ids)
            assert len(positions) == len(re.findall(rf"\b{word}\b", window))
        found += bool(case.antecedent_attribute_positions)
    assert found > len(refs) // 2  # most references restate the attribute within 64 words


def test_build_case_offsets_a_story_inside_a_longer_text():
    text, refs = story_with_references()
    prefix = "x" * 300 + "\n\n"
    tok = CharTokenizer(prefix + text)
    shifted = coreference.build_case(tok, prefix + text, len(prefix), refs[0], block_size=2000)
    alone = coreference.build_case(tok, text, 0, refs[0], block_size=2000)
    assert shifted.ids[len(prefix):] == alone.ids
    assert [p - len(prefix) for p in shifted.antecedent_positions] == alone.antecedent_positions


def test_the_attributes_earlier_mentions_are_whole_words_of_this_story():
    """In the window, "red" said in the story before (not inside "Fred", "bored" or "redder", not in the story
    before this one) is where the antecedent's attribute is; the same for the distractor's "blue" (not "bluebird")."""
    prefix = "Zed had a red hat and a blue cup.\n\n"  # the previous story, inside the window
    story = ("Mia had a red kite. Tom had a blue kite. Tom was bored and Fred was tired. A bluebird sang in the "
             "redder sky. Then she took her red kite.")
    ref = Reference(pronoun_pos=story.index("she"), pronoun="she", attribute_pos=story.rindex("red"), attribute="red",
                    kind="colour", antecedent="Mia", antecedent_spans=[(0, 3)], distractor="Tom",
                    distractor_spans=[(20, 23), (41, 44)], distractor_attribute="blue")
    text, base = prefix + story, len(prefix)
    case = coreference.build_case(CharTokenizer(text), text, base, ref, block_size=2000)
    assert len(case.ids) == base + ref.attribute_pos  # the whole text before the attribute is in the window
    red, blue = base + story.index("red"), base + story.index("blue")
    assert case.antecedent_attribute_positions == list(range(red, red + 3))
    assert case.distractor_attribute_positions == list(range(blue, blue + 4))
    assert case.antecedent_positions == [base, base + 1, base + 2]


def test_the_default_seed_is_one_probe_py_seed_takes_back():
    """data.stories_seed may be up to 2**63 - 2: the default seed (+ 1000003) was reported as
    9223372036855775803, which --seed then refused (it must be in [0, 2**63))."""
    assert coreference.held_out_seed(1337) == 1337 + 1_000_003  # as before for every seed that fits
    assert coreference.held_out_seed(2**63 - 2) == 1_000_001  # wrapped into [0, 2**63)


def test_an_attribute_with_nothing_before_it_is_refused():
    text = "red kite"
    ref = Reference(pronoun_pos=0, pronoun="she", attribute_pos=0, attribute="red", kind="colour", antecedent="Mia",
                    antecedent_spans=[], distractor="Tom", distractor_spans=[], distractor_attribute="blue")
    with pytest.raises(ValueError, match="the attribute at 0 has no context before it"):
        coreference.build_case(CharTokenizer(text + " blue"), text, 0, ref, block_size=8)


def test_held_out_stories_skip_and_count_the_stories_the_tokenizer_cannot_encode():
    """A char vocabulary without "B" skips the stories that use it and counts them; one with every
    character skips none."""
    rng = random.Random(11)
    stories = [generate_story(rng) for _ in range(6)]
    every_char = CharTokenizer("".join(s for s, _ in stories) + "\n")
    text, refs, skipped = coreference.held_out_stories(6, 11, every_char)
    assert skipped == 0 and len(refs) == sum(len(r) for _, r in stories)
    with_b = [("B" in s) for s, _ in stories]
    assert 0 < sum(with_b) < 6  # (seed 11: some stories use it, some do not)
    no_b = CharTokenizer("".join(s for s, _ in stories).replace("B", "") + "\n")
    text, refs, skipped = coreference.held_out_stories(6, 11, no_b)
    assert skipped == sum(with_b) and "B" not in text
    assert len(refs) == sum(len(r) for (_, r), b in zip(stories, with_b) if not b)
    torch.manual_seed(0)  # the probe counts the stories it kept, beside those it skipped: together the ones asked for
    model = GPT(ModelConfig(block_size=64, n_layer=1, n_head=2, n_embd=16, vocab_size=no_b.vocab_size)).eval()
    result = coreference.probe(model, no_b, 6, 11, torch.device("cpu"))
    assert (result["stories"], result["skipped_stories"]) == (6 - sum(with_b), sum(with_b))


def test_build_case_with_gpt2_tokens(tmp_path, monkeypatch):
    """With BPE the cut falls before " red": the attribute's token carries its leading space."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(r50k_cache(tmp_path)))
    text, refs = story_with_references()
    tok = TiktokenTokenizer.from_text("r50k_base", text)
    seen_names = 0
    for ref in refs:
        case = coreference.build_case(tok, text, 0, ref, block_size=40)
        context = tok.decode(case.ids)
        assert text[:ref.attribute_pos - 1].endswith(context) and text[ref.attribute_pos - 1] == " "
        assert len(case.ids) == 40
        assert case.n_new >= 2
        start = len(text[:ref.attribute_pos - 1]) - len(context)  # the window's first char
        visible = [(s, e) for s, e in ref.antecedent_spans if s >= start]
        names = "".join(tok.decode([case.ids[p]]) for p in case.antecedent_positions).replace(" ", "")
        assert names == ref.antecedent * len(visible)
        seen_names += len(visible)
    assert seen_names > 0


def assert_windows_are_the_full_texts_last_tokens(tok, text: str, refs, block_sizes) -> None:
    """Each reference's window of each block size is the last tokens of the full text's encoding up to the
    attribute, as the model saw them in training (not a re-encoding of the cut text)."""
    import bisect
    full = tok.encode(text)
    ends = [e for _, e in coreference.token_char_spans(tok, full)]
    for base, ref in refs:
        before = full[:bisect.bisect_right(ends, base + ref.attribute_pos)]
        for block_size in block_sizes:
            assert coreference.build_case(tok, text, base, ref, block_size).ids == [int(i) for i in
                                                                                    before[-block_size:]]


def test_the_window_is_the_full_texts_last_tokens_where_a_stop_and_its_line_breaks_are_one_token(tmp_path,
                                                                                                 monkeypatch):
    """cl100k_base's split keeps ".\n\n" whole: a cut at the space after a story's last stop starts "\n\n", one
    token that the full text does not have. The window is cut from SLACK tokens more than it keeps, so its first
    token is the full text's (GPT-2's ranks, here under cl100k's split, with ".\n\n" one token)."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(r50k_cache(tmp_path)))
    r50k = tiktoken.get_encoding("r50k_base")
    split = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|"""
             r"""\s+(?!\S)|\s+""")
    encoding = tiktoken.Encoding("cl100k_split", pat_str=split, special_tokens={},
                                 mergeable_ranks={**r50k._mergeable_ranks, b".\n\n": r50k.n_vocab})
    tok = TiktokenTokenizer("cl100k_split", None, encoding=encoding)
    text, refs, _ = coreference.held_out_stories(3, 1_000_003, tok)
    assert_windows_are_the_full_texts_last_tokens(tok, text, refs, range(106, 112))


def test_the_window_is_the_full_texts_last_tokens_with_word_sized_tokens_offline():
    """The same with no GPT-2 ranks at hand (a fresh clone): a BPE whose tokens are whole words (about 4
    characters each, so a cut encoded without SLACK holds barely block_size tokens) and ".\n\n" one token."""
    bytes_only = tiktoken.Encoding("bytes", pat_str=r".", special_tokens={},
                                   mergeable_ranks={bytes([b]): b for b in range(256)})
    text, refs, _ = coreference.held_out_stories(3, 1_000_003, TiktokenTokenizer("bytes", None, encoding=bytes_only))
    ranks = {bytes([b]): b for b in range(256)}
    for word in sorted(set(re.findall(r" ?[A-Za-z]+", text)) | {".\n\n"}):
        for i in range(2, len(word.encode()) + 1):
            ranks.setdefault(word.encode()[:i], len(ranks))
    encoding = tiktoken.Encoding("words", pat_str=r""" ?\p{L}+| ?[^\s\p{L}]++[\r\n]*|\s+(?!\S)|\s+""",
                                 mergeable_ranks=ranks, special_tokens={})
    tok = TiktokenTokenizer("words", None, encoding=encoding)
    assert_windows_are_the_full_texts_last_tokens(tok, text, refs, range(20, 70))


def test_no_reference_with_its_attribute_in_the_window_is_no_line_in_the_report():
    """behaviour_attribute_in_window of no reference has accuracy None: the report leaves its line out."""
    nothing = coreference.attention_on([], 1, 1)
    result = {"references": 2, "stories": 1, "skipped_stories": 0, "seed": 5,
              "behaviour": coreference.tally(["antecedent", "other"]), "behaviour_in_window": coreference.tally([]),
              "attention_attribute": nothing, "attention": nothing}
    text = coreference.report({**result, "behaviour_attribute_in_window": coreference.tally([])}, 1, 1)
    assert "where its attribute is in the window" not in text
    seen = coreference.report({**result, "behaviour_attribute_in_window": coreference.tally(["antecedent"])}, 1, 1)
    assert "(where its attribute is in the window, 1 of 2: 1 / 0 / 0, 100.0% right" in seen


def test_classify_reads_the_first_word():
    _, refs = story_with_references()
    ref = refs[0]
    assert coreference.classify(f" {ref.attribute} and", ref) == "antecedent"
    assert coreference.classify(f"{ref.distractor_attribute}.", ref) == "distractor"
    assert coreference.classify(f"{ref.attribute}x", ref) == "other"
    assert coreference.classify(". The", ref) == "other"
    # any whitespace before the word (a line end, two spaces): the model's answer is still its first word
    assert coreference.classify(f"  {ref.attribute}", ref) == coreference.classify(f"\n {ref.attribute}", ref) \
        == "antecedent"
    assert coreference.classify(f"\n\n{ref.distractor_attribute}", ref) == "distractor"


def test_run_batch_decodes_the_greedy_continuation_of_each_window():
    """run_batch returns, for each case, the n_new tokens greedy generation yields from its window,
    from the first new token on (an answer read from the wrong token is misclassified)."""
    text, refs = story_with_references()
    tok = CharTokenizer(text)
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=64, n_layer=1, n_head=2, n_embd=16, vocab_size=tok.vocab_size)).eval()
    with torch.no_grad():  # large random weights: varied continuations, not one token repeated
        for param in model.parameters():
            param.normal_(0, 1)
    cases = [coreference.build_case(tok, text, 0, ref, block_size=40) for ref in refs[:4]]  # 40 + n_new < 64: no slide
    for need_attention in (True, False):
        for batch in coreference.batches(cases, 2):
            new, _ = coreference.run_batch(model, batch, torch.device("cpu"), need_attention)
            for case, ids in zip(batch, new):
                greedy = generate(model, torch.tensor([case.ids]), case.n_new, temperature=0, use_cache=False)
                assert ids == [int(t) for t in greedy] and len(set(ids)) > 1


@pytest.mark.parametrize("causal", [True, False])
def test_run_batch_weighs_only_the_last_position_through_the_readable_path(monkeypatch, causal):
    """The probe reads the last position's attention only, yet it kept every layer's (B, nh, T, T) weights:
    block_size 2048 took 6.8 GB for a 1-layer, 32-wide model (memory growing with T squared, unchecked).
    The earlier positions go through the fast path into a KV cache; the weights are those of the full pass.
    (A model trained without the mask, probed with --force, has no cache: the full pass, as before.)"""
    text, refs = story_with_references()
    tok = CharTokenizer(text)
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=64, n_layer=2, n_head=2, n_embd=16, vocab_size=tok.vocab_size,
                            causal=causal)).eval()
    cases = [coreference.build_case(tok, text, 0, ref, block_size=40) for ref in refs[:2]]
    batch = next(coreference.batches(cases, 2))
    seq = torch.tensor([c.ids for c in batch])
    with torch.no_grad():
        full = torch.stack([t.weights[:, :, -1, :] for t in model.forward_with_attention(seq)[1]], dim=1)
    queries, readable = [], model.forward_with_attention  # the positions each readable pass weighs

    def recorded(idx, *args):
        queries.append(idx.size(1))
        return readable(idx, *args)

    monkeypatch.setattr(model, "forward_with_attention", recorded)
    new, last_row = coreference.run_batch(model, batch, torch.device("cpu"))
    assert queries == [1 if causal else seq.size(1)] and last_row.shape == full.shape
    assert torch.allclose(last_row, full, atol=1e-6) and abs(float(last_row.sum()) - 2 * 2 * 2) < 1e-4


def test_tally_accuracy_is_the_antecedents_share_of_all_outcomes():
    """'other' answers count against the accuracy: 2 right of 4 is 0.5, not 2 of 3."""
    result = coreference.tally(["antecedent", "other", "distractor", "antecedent"])
    assert result == {"antecedent": 2, "distractor": 1, "other": 1, "accuracy": 2 / 4}
    assert coreference.tally([])["accuracy"] is None  # no outcome: no share (0.0 read as a result)


def test_a_probe_that_measured_no_head_names_none_and_the_sweep_tables_leave_its_cells_empty():
    """A model whose window never held the attribute's tokens (block_size 16): probe.json named a best
    head L0H0 with 0.0 shares, and `sweep.py --probe` put L0H0 in its tables and 0.0 in summary.csv's
    means, as if measured. The head and its figures are None, and the tables' cells empty."""
    nothing = coreference.attention_on([([], [1], torch.ones(1, 1, 2) / 2)], 1, 1)
    assert nothing["best"] is None and nothing["references"] == 0 and nothing["antecedent"] is None
    from tinygpt import runs
    measured = coreference.attention_on([([0], [1], torch.tensor([[[0.6, 0.4]]]))], 1, 1)
    result = {"references": 3, "stories": 1, "skipped_stories": 0, "seed": 5,
              "behaviour": coreference.tally(["antecedent", "other", "other"]),
              "behaviour_in_window": coreference.tally([]), "attention_attribute": nothing, "attention": measured}
    assert runs._is_probe(result)  # (probe.json of such a run reads back)
    columns = runs.probe_columns(result)
    assert columns["antecedent"] == 1 / 3 and columns["name_head"] == "L0H0"
    assert not {"attribute_head", "attribute_share", "attribute_ratio"} & set(columns)
    assert "on earlier mentions of its attribute value: no reference had one inside the window" in \
        coreference.report(result, 1, 1)


# ---- the probe end to end ----


def expected_references(n_stories: int, seed: int, tok) -> int:
    rng, total = random.Random(seed), 0
    for _ in range(n_stories):
        story, refs = generate_story(rng)
        try:
            tok.encode(story)
        except UserError:
            continue
        total += len(refs)
    return total


def test_probe_counts_add_up(run):
    out = io.StringIO()
    result = probe.main([str(run), "--stories", "12"], out=out)
    ckpt = load_checkpoint(run / "best.pt")
    seed = ckpt["config"]["data"]["stories_seed"] + coreference.HELD_OUT_OFFSET
    tok = tokenizer_from_dict(ckpt["tokenizer"])
    assert result["seed"] == seed
    assert result["references"] == expected_references(12, seed, tok) > 0
    b = result["behaviour"]
    assert b["antecedent"] + b["distractor"] + b["other"] == result["references"]
    lines = out.getvalue().splitlines()
    assert json.loads(lines[-1]) == result
    for a in (result["attention"], result["attention_attribute"]):  # on the name, on the attribute
        assert 0 < a["references"] <= result["references"] and a["distractor_visible"] <= a["references"]
        assert len(a["antecedent"]) == N_LAYER and all(len(row) == N_HEAD for row in a["antecedent"])
        assert all(0 <= w <= 1 for row in a["antecedent"] + a["distractor"] for w in row)
        best = a["best"]
        assert a["antecedent"][best["layer"]][best["head"]] == max(max(row) for row in a["antecedent"])
        assert any(line.startswith(f"best head: layer {best['layer']} head {best['head']}") for line in lines)


def test_behaviour_in_window_counts_the_references_whose_antecedent_is_in_the_window(run):
    """behaviour_in_window tallies the cases with the antecedent's name in the window, not those with
    the distractor's (12 stories: the two numbers differ)."""
    result = probe.main([str(run), "--stories", "12"], out=io.StringIO())
    model, _, tok, _ = load_model(run)
    cases, _, _ = coreference.held_out_cases(tok, 12, result["seed"], model.config.block_size)
    with_antecedent = sum(bool(c.antecedent_positions) for c in cases)
    assert with_antecedent != sum(bool(c.distractor_positions) for c in cases)
    b = result["behaviour_in_window"]
    assert b["antecedent"] + b["distractor"] + b["other"] == with_antecedent == result["attention"]["references"]


def recording_policies(monkeypatch, module) -> list:
    """Replace module.ThreadPolicy by one that counts its re-checks; returns the policies made."""
    made = []

    class Recording(runtime.ThreadPolicy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.checks = 0
            made.append(self)

        def update(self, force: bool = False) -> int:
            self.checks += 1
            return super().update(force)
    monkeypatch.setattr(module, "ThreadPolicy", Recording)
    return made


def test_the_probe_follows_the_free_cores_batch_by_batch(run, monkeypatch):
    """probe.py runs on the thread policy's cores, re-checked before each batch it decodes, --ablate's
    too: with a busy process beside it, torch's one thread per core probed 5x slower than one thread.
    sweep.py --probe runs it on the sweep's share of the cores."""
    threads = torch.get_num_threads()
    try:
        made = recording_policies(monkeypatch, probe)
        probe.main([str(run), "--stories", "12", "--ablate", "0.0"], out=io.StringIO())
        model, cfg, tok, _ = load_model(run)
        seed = cfg.data.stories_seed + coreference.HELD_OUT_OFFSET
        cases, _, _ = coreference.held_out_cases(tok, 12, seed, cfg.model.block_size)
        n_batches = len(list(coreference.batches(cases, coreference.BATCH)))
        # the probe, then the ablation's baseline and the chosen head zeroed and mean-ablated
        assert len(made) == 1 and made[0].checks == 4 * n_batches > 0
        made = recording_policies(monkeypatch, sweep)
        monkeypatch.setattr(sweep, "usable_cores", lambda: 2)
        monkeypatch.setattr(sweep, "write_probe", lambda run_dir, result: None)
        sweep.probe_run(run, 12, sweep.Runner(2))  # beside another job's training: one of the 2 cores
        assert len(made) == 1 and made[0].max_threads == 1 and made[0].checks == n_batches
    finally:
        torch.set_num_threads(threads)


def test_sweeps_probe_stops_with_the_sweep_and_probes_what_it_is_asked(run, tmp_path, monkeypatch):
    """sweep.py --probe: Ctrl-C stops the probe at its next batch (it ran to its end first) and
    nothing is saved; a probe.json of another --probe-stories is probed again (it was reused); a run
    without best.pt is probed from its ckpt.pt (a traceback); no reference found gives empty cells,
    not 0% (and a 'best head')."""
    import shutil
    from tinygpt import runs
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    runner = sweep.Runner(1)
    runner.signum = 2  # Ctrl-C came
    assert sweep.probe_run(folder, 12, runner) is None and not (folder / "probe.json").exists()
    (folder / "best.pt").unlink()
    result = sweep.probe_run(folder, 12, sweep.Runner(1))
    assert result["checkpoint_mtime_ns"] == (folder / "ckpt.pt").stat().st_mtime_ns
    assert sweep.probed(folder, 12) and not sweep.probed(folder, 20)
    assert runs.probe_columns(result)["antecedent"] >= 0
    assert runs.probe_columns({**result, "references": 0}) == {}


def test_the_sweeps_probe_measures_on_the_held_out_stories(run, monkeypatch):
    """sweep.py --probe measures on the stories of stories_seed + HELD_OUT_OFFSET, as probe.py does:
    at the training corpus's own seed it would score the model on stories it was trained on."""
    seeds = []

    def stopped_probe(model, tokenizer, n_stories, seed, device, **kwargs):
        seeds.append(seed)
        return None  # as if the sweep was stopped: nothing saved
    monkeypatch.setattr(sweep, "probe", stopped_probe)
    assert sweep.probe_run(run, 3, sweep.Runner(1)) is None
    stories_seed = load_checkpoint(run / "best.pt")["config"]["data"]["stories_seed"]
    assert seeds == [stories_seed + 1_000_003] and 1_000_003 == coreference.HELD_OUT_OFFSET


def test_a_probe_with_skipped_stories_counts_them_as_probed(tmp_path):
    """probe.json of --probe-stories 3 where 1 story was skipped (a word outside the vocabulary):
    2 measured + 1 skipped are the 3 asked. Read as 2, every rerun of the sweep probed it again."""
    best = {"layer": 0, "head": 0, "antecedent": 0.5, "ratio": None}
    write_probe(tmp_path, {"stories": 2, "skipped_stories": 1, "references": 4,
                           "behaviour": {"antecedent": 2, "distractor": 1, "other": 1},
                           "attention_attribute": {"best": best}, "attention": {"best": best}})
    assert sweep.probed(tmp_path, 3)
    assert not sweep.probed(tmp_path, 2) and not sweep.probed(tmp_path, 4)  # another --probe-stories


@pytest.mark.parametrize("counts", [{}, {"stories": "2", "skipped_stories": 1}, {"stories": 2.5, "skipped_stories": 0.5}])
def test_a_probe_that_does_not_say_how_many_stories_is_probed_again(tmp_path, counts):
    """A hand-made probe.json without whole counts of stories (compare.py shows its figures): a
    sweep's rerun with --probe stopped on a KeyError traceback; it probes again."""
    best = {"layer": 0, "head": 0, "antecedent": 0.5, "ratio": None}
    write_probe(tmp_path, {**counts, "references": 4, "behaviour": {"antecedent": 2, "distractor": 1, "other": 1},
                           "attention_attribute": {"best": best}, "attention": {"best": best}})
    assert not sweep.probed(tmp_path, 3)


def test_uniform_attention_gives_the_uniform_baseline(run):
    """Zero every W_Q: all scores are 0, so each head spreads evenly over the allowed keys and its
    weight on the antecedent's name must be exactly what the uniform baseline says."""
    model, _, tok, _ = load_model(run)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.zero_()
    result = coreference.probe(model, tok, 12, seed=7, device=torch.device("cpu"), batch_size=5)
    for a in (result["attention"], result["attention_attribute"]):
        assert a["references"] > 0
        for row in a["antecedent"]:
            assert row == pytest.approx([a["uniform"]] * N_HEAD, abs=2e-4)
        assert a["uniform"] >= a["per_key"]  # at least one key per reference


def test_probe_refuses_a_run_not_trained_on_stories(run, tmp_path, capsys):
    ckpt = load_checkpoint(run / "best.pt")
    ckpt["config"]["data"]["dataset"] = "shakespeare"
    save_checkpoint(tmp_path / "shakespeare.pt", {k: v for k, v in ckpt.items() if k not in ("format", "version")})
    with pytest.raises(SystemExit) as exit_info:
        run_cli(probe.main, [str(tmp_path / "shakespeare.pt")])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "shakespeare" in err[0] and "stories" in err[0]
    assert captured.out == ""


def one_line_exit_2(capsys, argv) -> str:
    """probe.py argv through run_cli: exit 2, one line on stderr, nothing on stdout -> the line."""
    with pytest.raises(SystemExit) as exit_info:
        run_cli(probe.main, argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and captured.out == ""
    return err[0]


def test_probe_refuses_flags_out_of_range(run, capsys, monkeypatch):
    # random.Random(-s) is Random(s): a negative seed would probe stories of another seed
    assert "--seed=-1337" in one_line_exit_2(capsys, [str(run), "--seed", "-1337"])
    assert f"--seed={2**63} must be in [0, 2**63)" in one_line_exit_2(capsys, [str(run), "--seed", str(2**63)])
    assert "--stories=1000000000000" in one_line_exit_2(capsys, [str(run), "--stories", "1000000000000"])
    # within the bound, the windows must still fit in memory (the model itself does)
    monkeypatch.setattr("tinygpt.runtime.cpu_memory_limits", lambda: {"machine": 100 * 2**20})
    assert "lower --stories" in one_line_exit_2(capsys, [str(run), "--stories", str(coreference.MAX_STORIES)])


def test_probe_without_a_usable_reference_says_why(run, capsys, monkeypatch):
    """A word-level run lacks the rare words of some stories; when every story is skipped there is
    nothing to measure, and empty tables must not read as a result."""
    monkeypatch.setattr(coreference, "encodable", lambda tokenizer, text: False)
    line = one_line_exit_2(capsys, [str(run), "--stories", "2", "--seed", "6"])
    assert "no usable reference in 2 held-out stories (seed 6): 2 of them" in line and "--stories" in line


def test_probe_refuses_a_non_causal_run_without_force(run, tmp_path, capsys):
    ckpt = load_checkpoint(run / "best.pt")
    ckpt["config"]["model"]["causal"] = False
    save_checkpoint(tmp_path / "bidirectional.pt", {k: v for k, v in ckpt.items() if k not in ("format", "version")})
    line = one_line_exit_2(capsys, [str(tmp_path / "bidirectional.pt"), "--stories", "1"])
    assert "causal=false" in line and "--force" in line
    result = probe.main([str(tmp_path / "bidirectional.pt"), "--stories", "1", "--force"], out=io.StringIO())
    assert result["references"] > 0


def last_row(*weights: float) -> torch.Tensor:
    """The predicting position's attention over T = len(weights) keys, one layer of one head."""
    return torch.tensor(weights).view(1, 1, -1)


def best_head_line(a: dict) -> str:
    lines = coreference.attention_table(a, "its name", 1, 1)
    return next(line for line in lines if line.startswith("best head:"))


def test_the_mean_attention_is_over_the_references_with_the_antecedent_in_the_window():
    """A reference whose antecedent is outside the window has nothing to weigh: counted in the
    mean's denominator, it would have halved the head's 0.6 on the antecedent (and the distractor's
    0.2) to 0.3 (and 0.1)."""
    a = coreference.attention_on([([0], [1], last_row(0.6, 0.2, 0.2)), ([], [1], last_row(0.1, 0.8, 0.1))], 1, 1)
    assert a["references"] == 1 and a["antecedent"] == [[0.6]] and a["distractor"] == [[0.2]]
    assert a["uniform"] == a["per_key"] == pytest.approx(1 / 3, abs=1e-4)  # one key of 3, in the one counted


def test_the_best_head_is_found_in_a_grid_of_more_heads_than_layers():
    """2 layers of 3 heads, the most weight on the antecedent in layer 0 head 2 (the third of six
    cells): split by the number of layers, the cell's index 2 read as layer 1 head 0."""
    weights = torch.full((2, 3, 4), 0.1)  # (n_layer, nh, T): the predicting position's weights
    weights[0, 2] = torch.tensor([0.7, 0.1, 0.1, 0.1])
    weights[1, 0] = torch.tensor([0.4, 0.3, 0.2, 0.1])
    best = coreference.attention_on([([0], [1], weights)], 2, 3)["best"]
    assert (best["layer"], best["head"], best["antecedent"], best["distractor"]) == (0, 2, 0.7, 0.1)


def test_the_best_heads_shares_are_kept_to_6_decimals_so_a_table_rounds_them_once():
    """The best head's shares were rounded to 4 decimals (0.006459 to 0.0065), and a table printing them to
    0.1% rounded again: `93.2% / 0.7% (144.3x)`, where no 0.7% gives 144.3x (docs/results.md had that cell)."""
    weights = torch.tensor([[[0.932, 0.006459, 1 - 0.932 - 0.006459]]], dtype=torch.float64)  # (n_layer, nh, T)
    best = coreference.attention_on([([0], [1], weights)], 1, 1)["best"]
    assert (best["antecedent"], best["distractor"]) == (0.932, 0.006459)
    from scripts.default_run import table
    row = {"wall_s": 1262, "best_val_loss": 0.9145, "antecedent": 0.948, "distractor": 0.011, "other": 0.04,
           "head": "L3H2", "head_antecedent": best["antecedent"], "head_distractor": best["distractor"],
           "ratio": best["ratio"]}
    assert "L3H2: 93.2% / 0.6% (144.3x)" in table({"previous default, seed 1337": row})


def test_the_best_head_and_the_ablations_most_attention_are_one_head():
    """Two heads equal as probe.json keeps them (0.0316, an untrained model's): the best head was the higher
    of the unrounded means (head 1), the ablation's "most attention" the first of the rounded ones (head 0),
    two heads in one report. Both now rank what the report shows: ties go to the first."""
    weights = torch.tensor([[[0.0316000, 0.9684000], [0.0316004, 0.9683996]]])  # (n_layer, nh, T)
    a = coreference.attention_on([([0], [1], weights)], 1, 2)
    assert a["antecedent"] == [[0.0316, 0.0316]] and (a["best"]["layer"], a["best"]["head"]) == (0, 0)
    assert coreference.top_heads(torch.tensor(a["antecedent"]), 1) == [(0, 0)]  # what ablation() picks from it

# ---- what the output says ----


def test_the_ratio_over_the_references_with_both_in_the_window_is_said_beside_the_means():
    """Where both are in the window the head weighs them alike (0.4 / 0.4); in the second reference
    the distractor is out of the window. Its table mean counts that as 0 (0.2), and 0.6 / 0.2 said
    only 3x; the ratio of the means stays (sweeps and docs quote it), the fair one is said beside it."""
    a = coreference.attention_on([([0], [1], last_row(0.4, 0.4, 0.1, 0.1)),
                                  ([0], [], last_row(0.8, 0.1, 0.05, 0.05))], 1, 1)
    assert (a["best"]["antecedent"], a["best"]["distractor"]) == pytest.approx((0.6, 0.2))  # the table, as before
    assert a["best"]["ratio"] == pytest.approx(3.0) and a["best"]["ratio_in_window"] == pytest.approx(1.0)
    assert best_head_line(a).endswith("(3.0x the distractor's; 1.0x over the 1 reference with both in the window)")
    # always both in the window: one ratio, as before
    both = coreference.attention_on([([0], [1], last_row(0.6, 0.2, 0.2))] * 2, 1, 1)
    assert best_head_line(both).endswith("(3.0x the distractor's)")


def test_a_ratio_under_one_is_printed_under_one():
    """0.48 / 0.5 = 0.96 printed as "1.0x": a head that prefers the distractor read as even."""
    for weights, shown in (((0.48, 0.5, 0.02), "0.96x"), ((0.3, 0.5, 0.2), "0.6x"), ((0.498, 0.5, 0.002), "0.99x")):
        line = best_head_line(coreference.attention_on([([0], [1], last_row(*weights))], 1, 1))
        assert line.endswith(f"({shown} the distractor's: it attends more to the distractor's)") and "1.0x" not in line
    assert times(0.9996) == "0.99x" and times(0.031) == "0.031x" and times(1.64) == "1.6x"
    even = best_head_line(coreference.attention_on([([0], [1], last_row(0.4, 0.4, 0.2))], 1, 1))
    assert even.endswith("(1.0x the distractor's)")  # equal weights: not "it attends more to the distractor's"
    assert coreference.ratio(0.99996, 1.0) < 1 and coreference.ratio(0.5, 0.25) == 2.0  # (r4 rounded it up to 1.0)
    assert coreference.ratio(0.9999996, 1.0) == 0.999999  # (6 decimals would round it up to 1.0)
    from tinygpt.report import _num
    assert _num("attribute_ratio", 0.96) == "0.96x"  # the sweep and compare tables said 1.0x


def test_a_ratio_and_a_share_are_rounded_once():
    """probe.json kept the ratio 0.089608 / 0.017414 = 5.1457 as 5.15, printed 5.2x; a share of 0.006459 as
    0.0065, 0.7% in the layer x head table beside 0.6% for the same head on the best-head line."""
    a = coreference.attention_on([([0], [1], last_row(0.089608, 0.017414, 0.892978))], 1, 1)
    assert best_head_line(a).endswith("9.0% on the antecedent's, 1.7% on the distractor's (5.1x the distractor's)")
    a = coreference.attention_on([([0], [1], last_row(0.932, 0.006459, 0.061541))], 1, 1)
    assert coreference.attention_table(a, "its name", 1, 1)[3].split() == ["layer", "0", "93.2", "/", "0.6"]
    assert "93.2% on the antecedent's, 0.6% on the distractor's (144.3x" in best_head_line(a)
    a = coreference.attention_on([(list(range(6)), [6], torch.full((1, 1, 11), 1 / 11))], 1, 1)  # 6 keys of 11
    assert coreference.attention_table(a, "its name", 1, 1)[4].startswith("uniform attention would put 54.5% there")


def test_no_ratio_when_the_distractor_is_never_in_the_window():
    """No reference with both in the window: no ratio at all (before: "the distractor: 0", read as
    a head that ignores the distractor)."""
    a = coreference.attention_on([([0], [], last_row(0.5, 0.5)), ([1], [], last_row(0.2, 0.8))], 1, 1)
    assert a["best"]["ratio"] is None and a["distractor_visible"] == 0
    assert best_head_line(a).endswith("(the distractor's never in the window: no ratio)")


def test_a_table_cell_is_the_antecedents_weight_then_the_distractors():
    a = coreference.attention_on([([0], [1], last_row(0.6, 0.2, 0.2))], 1, 1)
    table = coreference.attention_table(a, "its name", 1, 1)
    (row,) = [line for line in table if line.startswith("layer 0")]
    assert row.split() == ["layer", "0", "60.0", "/", "20.0"]


def test_the_in_window_behaviour_is_said_only_where_some_antecedent_was_in_the_window():
    """No reference had the antecedent's name in the window: no "(... 0 / 0 / 0 of 0, 0.0% right)" line."""
    nothing = coreference.attention_on([], 1, 1)
    result = {"references": 2, "stories": 1, "skipped_stories": 0, "seed": 5,
              "behaviour": coreference.tally(["antecedent", "other"]), "behaviour_in_window": coreference.tally([]),
              "attention_attribute": nothing, "attention": nothing}
    assert "where the antecedent's name is in the window" not in coreference.report(result, 1, 1)
    result["behaviour_in_window"] = coreference.tally(["antecedent"])
    assert "(where the antecedent's name is in the window: 1 / 0 / 0 of 1, 100.0% right)" in coreference.report(
        result, 1, 1)


def test_ablate_before_the_run_says_what_ablate_takes(tmp_path, capsys):
    """argparse took the run folder as --ablate's heads, then said only "arguments are required: run"."""
    for argv in (["--ablate", str(tmp_path)], ["--ablate", str(tmp_path), "--stories", "2"], [f"--ablate={tmp_path}"]):
        line = one_line_exit_2(capsys, argv)
        assert line.startswith(f"error: --ablate '{tmp_path}': that is a folder (the run?), not heads")
        assert "LAYER.HEAD[,LAYER.HEAD...] (e.g. --ablate 3.2,1.0)" in line and "probe.py RUN --ablate" in line
    assert "looks like the run, not heads" in one_line_exit_2(capsys, ["--ablate", str(tmp_path / "missing")])
    # heads and no run: argparse's own line is the right one
    assert "arguments are required: run" in one_line_exit_2(capsys, ["--ablate", "3.2"])


def test_ablate_without_mean_ablation_windows_is_refused_before_the_probe(run, monkeypatch):
    """A word run whose mean-ablation stories held no reference was probed in full, then refused: the probe's
    tables and JSON line thrown away. Now those windows are built first; the refusal names the vocabulary's unit."""
    from tinygpt import coreference
    from tinygpt.errors import UserError
    real = coreference.held_out_cases
    monkeypatch.setattr(coreference, "held_out_cases", lambda tok, n, seed, block: (
        ([], 0, n) if seed == (coreference.held_out_seed(1337) + coreference.MEAN_SEED_OFFSET) % coreference.SEEDS
        else real(tok, n, seed, block)))
    monkeypatch.setattr(probe, "probe", lambda *a, **k: pytest.fail("the probe ran first"))
    with pytest.raises(UserError, match=r"^no window to average the heads' outputs over for mean ablation: the 2 "
                                        r"held-out stories of seed \d+ gave no reference \(2 skipped: characters "
                                        r"outside this model's vocabulary\)"):
        probe.main([str(run), "--stories", "2", "--ablate"], out=io.StringIO())


def test_a_run_of_an_edited_story_generator_is_probed_with_a_note(run, monkeypatch, capsys):
    """data/story_words.py edited after training (as it invites): the run was probed on stories of the new
    word lists, names it never saw, without a word. Its checkpoint records the generator's code now."""
    from data.prepare import stories_code_digest
    assert load_checkpoint(run / "best.pt")["stories_generator"] == stories_code_digest()
    probe.main([str(run), "--stories", "2"], out=io.StringIO())
    assert "another version of data/stories.py" not in capsys.readouterr().err
    monkeypatch.setattr(probe, "stories_code_digest", lambda: "0" * 12)  # the code edited since
    probe.main([str(run), "--stories", "2"], out=io.StringIO())
    assert (f"note: {run} was trained on stories of another version of data/stories.py and data/story_words.py "
            f"(edited since, {stories_code_digest()!r} then): the held-out stories are made by today's, with names "
            f"and words the model may never have seen\n") in capsys.readouterr().err


def test_a_checkpoint_that_does_not_record_its_story_generator_is_probed_without_the_note(run, tmp_path, capsys):
    """A checkpoint saved before checkpoints recorded the generator's code has no stories_generator: nothing says
    its stories were another version's (the note said so, "None then")."""
    ckpt = load_checkpoint(run / "best.pt")
    del ckpt["stories_generator"]
    save_checkpoint(tmp_path / "unrecorded.pt", ckpt)
    probe.main([str(tmp_path / "unrecorded.pt"), "--stories", "2"], out=io.StringIO())
    assert "another version of data/stories.py" not in capsys.readouterr().err


@pytest.fixture(scope="module")
def one_head_run(tiny_stories_run, tmp_path_factory):
    """A run of 1 layer x 1 head: the tiny stories run's tokenizer and config, fresh weights."""
    ckpt = load_checkpoint(tiny_stories_run / "best.pt")
    ckpt["config"]["model"].update(n_layer=1, n_head=1)
    torch.manual_seed(0)
    ckpt["model"] = GPT(ModelConfig(**ckpt["config"]["model"])).state_dict()
    path = tmp_path_factory.mktemp("one_head") / "one_head.pt"
    save_checkpoint(path, ckpt)
    return path


def test_counts_of_one_are_singular(one_head_run, capsys, monkeypatch):
    out = io.StringIO()
    probe.main([str(one_head_run), "--stories", "1", "--ablate"], out=out)
    text = out.getvalue()
    assert ": 1 layer x 1 head, block_size" in text and "1 layers" not in text and "1 heads" not in text
    assert " in 1 held-out story (seed " in text and "windows of 1 other held-out story (seed" in text
    assert "1 held-out stories" not in text
    assert "no head 0.3 (the model has layer 0 and head 0)" in one_line_exit_2(
        capsys, [str(one_head_run), "--ablate", "0.3"])
    # every story skipped (a word-level vocabulary lacking a word): the one story is "it"
    monkeypatch.setattr(coreference, "encodable", lambda tokenizer, text: False)
    line = one_line_exit_2(capsys, [str(one_head_run), "--stories", "1", "--seed", "6"])
    assert "no usable reference in 1 held-out story (seed 6): it uses characters outside" in line
    assert "and was skipped" in line


def test_a_single_reference_or_position_is_singular():
    a = coreference.attention_on([([0], [1], last_row(0.6, 0.4))], 1, 1)
    assert "mean over the 1 reference with it in the window:" in coreference.attention_table(a, "its name", 1, 1)[1]
    assert "the distractor's are in the window for 1 of 1\n" in "\n".join(coreference.attention_table(a, "x", 1, 1)) + "\n"
    ab = {"baseline": 1.0, "references": 1, "mean_over": {"stories": 1, "seed": 7, "positions": 1}, "together": []}
    text = coreference.ablation_report(ab, None, 1, 1)
    assert "(1 reference, the fast path)" in text and "1 other held-out story (seed 7, 1 position)" in text
    assert probe.no_reference(2, 6, 1, "word").startswith(
        "no usable reference in 2 held-out stories (seed 6): 1 of them uses words outside")
    with pytest.raises(UserError, match=r"the model has layers 0-1 and head 0\)"):
        parse_heads("0.1", 2, 1)


def test_probe_refuses_the_first_values_out_of_range(tmp_path, capsys):
    """--stories 0 and --seed -1, the values just out of range (-1 is Random(1): another seed's stories),
    are refused before the run is even read."""
    assert "--stories=0 must be in [1, 10,000]" in one_line_exit_2(capsys, [str(tmp_path / "no_run"), "--stories", "0"])
    assert "--seed=-1 must be in [0, 2**63)" in one_line_exit_2(capsys, [str(tmp_path / "no_run"), "--seed", "-1"])


def test_ablate_followed_by_a_flag_and_no_run_is_argparses_own_line(capsys):
    """`probe.py --ablate --force`: --ablate took no list, so the run is what is missing, not a misplaced one."""
    line = one_line_exit_2(capsys, ["--ablate", "--force"])
    assert "arguments are required: run" in line and "not heads" not in line


def test_a_run_being_trained_is_probed_and_sampled_as_of_the_step_it_holds(run, capsys):
    """probe.py (and sample.py) on a run still training: its best.pt changes at the next evaluation,
    and the figures gave no sign of the moment they are of (export.py said so). Now a note names the
    step, which the probe's JSON line also holds; a run no training holds gets no note."""
    import sample
    from tinygpt.runs import run_lock
    step = load_checkpoint(run / "best.pt")["step"]
    with run_lock(run, resume=True):  # a training holds it
        result = probe.main([str(run), "--stories", "2"], out=io.StringIO())
        assert f"note: {run} is being trained now: this probes best.pt as of step {step}" in capsys.readouterr().err
        sample.main([str(run), "--prompt", "Mia", "--max-new-tokens", "2"], out=io.StringIO())
        assert f"note: {run} is being trained now: this samples best.pt as of step {step}" in capsys.readouterr().err
    assert result["step"] == step
    probe.main([str(run), "--stories", "2"], out=io.StringIO())
    assert "is being trained now" not in capsys.readouterr().err


def test_a_copy_rule_with_no_model_is_the_line_the_accuracy_is_read_against():
    """Most references repeat a possessive ("... played with her red kite. Then she played with her ▮"): copying
    the word after the previous "her" gets them right with no pronoun resolved, and 91% meant nothing without
    that line beside it."""
    from types import SimpleNamespace
    from data.stories import Reference
    ref = Reference(0, "she", 0, "red", "colour", "Mia", [], "Tom", [], "blue")

    def case(text: str) -> SimpleNamespace:
        return SimpleNamespace(ids=text, reference=ref)
    plain = SimpleNamespace(decode=lambda ids: ids)  # the window's ids are its text here
    assert coreference.copy_rule(plain, case("Tom had his blue drum. Mia played with her red kite. Then she "
                                             "picked up her")) == "antecedent"
    assert coreference.copy_rule(plain, case("Mia played with her red kite. Tom showed her blue paint. Then she "
                                             "picked up her")) == "distractor"  # the last earlier 'her' it copies
    assert coreference.copy_rule(plain, case("Mia had a red kite. Then she picked up her")) == "other"  # no 'her'


def test_the_probe_reports_the_copy_rule_and_the_references_it_can_see(run):
    """Beside the model's figures: the copy rule's on the same windows, and the model's over the references whose
    attribute is in the window at all (elsewhere only a guess is right)."""
    out = io.StringIO()
    result = probe.main([str(run), "--stories", "12"], out=out)
    model, _, tok, _ = load_model(run)
    cases, _, _ = coreference.held_out_cases(tok, 12, result["seed"], model.config.block_size)
    assert result["copy_rule"] == coreference.tally([coreference.copy_rule(tok, c) for c in cases])
    seen = result["behaviour_attribute_in_window"]
    assert seen["antecedent"] + seen["distractor"] + seen["other"] == sum(
        bool(c.antecedent_attribute_positions) for c in cases)
    text = out.getvalue()
    assert "a rule with no model, copying the word that followed the last earlier 'her'" in text
    assert f"(where its attribute is in the window, {sum(bool(c.antecedent_attribute_positions) for c in cases)} of" \
        in text


def test_classify_reads_only_a_word_at_the_start_of_the_continuation():
    """A continuation that begins with punctuation ("... her. red") wrote no attribute where it was due: it
    is 'other', not the first word found further on."""
    ref = Reference(0, "she", 0, "red", "colour", "Mia", [], "Tom", [], "blue")
    assert coreference.classify(" red kite", ref) == "antecedent"
    assert coreference.classify(". red kite", ref) == "other"
    assert coreference.classify(", blue", ref) == "other"


def test_the_copy_rule_copies_after_the_windows_own_last_word_his_as_well_as_her():
    """The rule copies after the last earlier occurrence of the window's last word: after "his" for "he"."""
    from types import SimpleNamespace
    ref = Reference(0, "he", 0, "blue", "colour", "Tom", [], "Mia", [], "red")
    plain = SimpleNamespace(decode=lambda ids: ids)
    case = SimpleNamespace(ids="Tom had his blue drum. Mia had her red kite. Then he picked up his", reference=ref)
    assert coreference.copy_rule(plain, case) == "antecedent"


def test_the_copy_rule_line_reads_antecedent_then_distractor_then_other(run):
    result = probe.main([str(run), "--stories", "2"], out=io.StringIO())
    rule = {"antecedent": 5, "distractor": 3, "other": 1, "accuracy": 5 / 9}
    text = coreference.report({**result, "copy_rule": rule}, result["n_layer"], result["n_head"])
    line = next(line for line in text.splitlines() if "a rule with no model" in line)
    assert ": 5 / 3 / 1, 55.6% right" in line


def test_the_table_says_for_how_many_references_the_distractor_is_in_the_window():
    a = coreference.attention_on([([0], [1], last_row(0.5, 0.3, 0.2)), ([0], [], last_row(0.6, 0.2, 0.2))], 1, 1)
    assert a["references"] == 2 and a["distractor_visible"] == 1
    text = "\n".join(coreference.attention_table(a, "its name", 1, 1))
    assert "the distractor's are in the window for 1 of 2" in text


def test_probe_takes_seed_0_as_given(run):
    """0 is in [0, 2**63): it is a seed, not the default's absence."""
    result = probe.main([str(run), "--stories", "1", "--seed", "0"], out=io.StringIO())
    assert result["seed"] == 0


def test_the_default_number_of_stories_is_the_one_help_says(run, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        probe.main(["--help"])
    said = int(re.search(r"default:\s+(\d+)\)", capsys.readouterr().out.replace("\n", " ")).group(1))
    asked = []

    def recorded(model, tokenizer, n_stories, *args, **kwargs):
        asked.append(n_stories)
        raise KeyboardInterrupt
    monkeypatch.setattr(probe, "probe", recorded)
    with pytest.raises(KeyboardInterrupt):
        probe.main([str(run)], out=io.StringIO())
    assert asked == [said]


def test_probe_on_the_training_seed_says_the_stories_are_not_held_out(run, capsys):
    trained = load_checkpoint(run / "best.pt")["config"]["data"]["stories_seed"]
    probe.main([str(run), "--stories", "1", "--seed", str(trained)], out=io.StringIO())
    assert (f"note: --seed {trained} is the training corpus's data.stories_seed: these stories are not held "
            f"out") in capsys.readouterr().err
    probe.main([str(run), "--stories", "1", "--seed", str(trained + 1)], out=io.StringIO())
    assert "not held out" not in capsys.readouterr().err


def test_the_mean_ablation_seed_wraps_around_onto_a_training_seed_of_0(run, tmp_path, capsys):
    ckpt = load_checkpoint(run / "best.pt")
    ckpt["config"]["data"]["stories_seed"] = 0
    save_checkpoint(tmp_path / "seed0.pt", {k: v for k, v in ckpt.items() if k not in ("format", "version")})
    result = probe.main([str(tmp_path / "seed0.pt"), "--stories", "1", "--seed", str(coreference.SEEDS - 1),
                         "--ablate", "0.0"], out=io.StringIO())
    assert result["ablation"]["mean_over"]["seed"] == 0
    assert "mean-ablation stories (seed 0, --seed + 1) are the training corpus's" in capsys.readouterr().err

"""Guards tinygpt/ablation.py and `probe.py --ablate`.

Removing a head overwrites its columns of the merged heads entering out_proj. So: removing every
head of a layer equals running that layer without its attention branch (bias=False; with biases
the branch leaves exactly out_proj's bias), and mean-ablating every head with the means of the very
input leaves a one-token input's logits unchanged (so the columns are the right heads'). In a
model built by hand so that head 0 of its one layer copies the answer and head 1 adds noise,
removing head 0 (zero or mean) drops the accuracy to chance and removing head 1 changes nothing.
No hook outlives the `with`, also on an error. `probe.py --ablate` prints the drop table and its
JSON; `--ablate L.H,...` removes a set together; a bad head exits 2 with one line, as do held-out
stories for the heads' means that give no window (every one skipped for unknown words).
"""
from __future__ import annotations

import io
import json

import pytest
import torch

import probe
from scripts import ablation_table
from tinygpt import coreference
from conftest import TINY_STORIES
from model import GPT, ModelConfig
from tinygpt.ablation import ablated, head_means, parse_heads
from tinygpt.errors import UserError, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")


def random_model(bias: bool) -> GPT:
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=16, n_layer=2, n_head=4, n_embd=32, vocab_size=37, bias=bias)).eval()
    with torch.no_grad():  # weights larger than at init, so every head matters
        for p in model.parameters():
            p.mul_(4)
    return model


def forward_without_attention(model: GPT, idx: torch.Tensor, layer: int, branch: torch.Tensor | float = 0.0
                              ) -> torch.Tensor:
    """model.forward written out, with `layer`'s attention branch replaced by `branch` -> logits."""
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.size(1)))
    for i, block in enumerate(model.blocks):
        x = x + (branch if i == layer else block.attn(block.ln_1(x))[0])
        x = x + block.mlp(block.ln_2(x))
    return model.lm_head(model.ln_f(x))


def hooks(model: GPT) -> int:
    return sum(len(block.attn.out_proj._forward_pre_hooks) for block in model.blocks)


def test_parse_heads():
    assert parse_heads("3.2, 0.1", n_layer=4, n_head=4) == [(3, 2), (0, 1)]
    for bad, says in [("3", "not LAYER.HEAD"), ("3.2,", "not LAYER.HEAD"), ("4.0", "no head 4.0"),
                      ("0.4", "no head 0.4"), ("1.1,1.1", "named twice"), ("a.b", "not LAYER.HEAD"),
                      ("1:2", "not LAYER.HEAD"), ("1.2x", "not LAYER.HEAD"), ("0.1 0.2", "not LAYER.HEAD")]:
        with pytest.raises(UserError, match=says):
            parse_heads(bad, n_layer=4, n_head=4)
    with pytest.raises(UserError, match=r"\(the model has layers 0-3 and heads 0-3\)"):
        parse_heads("4.0", n_layer=4, n_head=4)
    with pytest.raises(UserError, match=r"\(the model has layer 0 and heads 0-3\)"):  # not "layers 0-0"
        parse_heads("1.0", n_layer=1, n_head=4)
    with pytest.raises(UserError, match=r"\(the model has layers 0-3 and head 0\)"):
        parse_heads("0.1", n_layer=4, n_head=1)
    from tinygpt.ablation import looks_like_heads
    assert looks_like_heads("0.1, 2.3") and not looks_like_heads("0.1,out/run")  # (the run given after --ablate)
    assert not any(looks_like_heads(bad) for bad in ["1:2", "1.2x", "0.1 0.2"])


def test_head_means_of_no_window_is_refused():
    with pytest.raises(ValueError, match="at least one window"):
        head_means(random_model(False), [])


@torch.no_grad()
@pytest.mark.parametrize("bias", [False, True])
def test_removing_every_head_of_a_layer_removes_its_attention_branch(bias):
    model = random_model(bias)
    idx = torch.randint(0, 37, (3, 16))
    for layer in range(2):
        with ablated(model, [(layer, h) for h in range(4)]):
            logits = model(idx)
        # the heads are gone; what out_proj adds without them is its bias (none when bias=False)
        branch = model.blocks[layer].attn.out_proj.bias if bias else 0.0
        expected = forward_without_attention(model, idx, layer, branch)
        torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)
        assert not torch.allclose(logits, model(idx), atol=1e-2)  # and the attention did matter
    assert hooks(model) == 0


@torch.no_grad()
def test_mean_ablation_with_the_inputs_own_means_changes_nothing():
    """A one-token input: each head's mean over it is its output there, so replacing every head of
    every layer by its mean must give the same logits, which fails if a head's mean lands in
    another head's columns."""
    model = random_model(bias=False)
    idx = torch.tensor([[5]])  # (1, 1)
    means, positions = head_means(model, [idx])
    assert positions == 1 and means.shape == (2, 4, 8)
    everything = [(layer, h) for layer in range(2) for h in range(4)]
    with ablated(model, everything, means):
        ablated_logits = model(idx)
    torch.testing.assert_close(ablated_logits, model(idx), rtol=1e-5, atol=1e-5)
    shuffled = means[:, [1, 0, 3, 2]]  # the same values in the wrong heads' columns
    with ablated(model, everything, shuffled):
        assert not torch.allclose(model(idx), ablated_logits, atol=1e-3)


@torch.no_grad()
def test_head_means_average_over_every_position_of_every_window():
    """Two (2, 5) windows are 20 positions: each head's mean is its output summed over batch and
    positions, divided by 20 (not by the number of rows)."""
    model = random_model(bias=False)
    torch.manual_seed(1)
    windows = [torch.randint(0, 37, (2, 5)) for _ in range(2)]
    means, positions = head_means(model, windows)
    assert positions == 20
    for layer in range(2):
        outputs = torch.cat([model.forward_with_attention(w)[1][layer].outputs for w in windows])  # (4, nh, 5, hs)
        torch.testing.assert_close(means[layer], outputs.mean(dim=(0, 2)))


def test_no_hook_outlives_the_with_block():
    model = random_model(bias=False)
    idx = torch.randint(0, 37, (2, 16))
    before = model(idx)
    with pytest.raises(RuntimeError, match="boom"):
        with ablated(model, [(0, 1), (1, 2)]):
            assert hooks(model) == 2
            raise RuntimeError("boom")
    assert hooks(model) == 0
    assert torch.equal(model(idx), before)


@torch.no_grad()
def test_an_ablation_leaves_the_heads_own_outputs_in_the_trace():
    """The hook replaces the heads in a copy of out_proj's input: for one token the merged heads share their
    memory with the trace's per-head outputs, which must still show what each head computed."""
    model = random_model(bias=False)
    idx = torch.tensor([[5]])  # (1, 1)
    _, before = model.forward_with_attention(idx)
    with ablated(model, [(0, 1), (0, 2)]):
        _, traces = model.forward_with_attention(idx)
    torch.testing.assert_close(traces[0].outputs, before[0].outputs)

# ---- a model in which one head carries the answer ----

V, BLOCK = 8, 8


def copy_first_token_model() -> GPT:
    """One layer, two heads, built by hand to predict, at every position, the sequence's first token.
    Codes: token v = e_v - e_(v+8) (dims 0-15), position p = e_(16+p) - e_(24+p) (dims 16-31); both
    have mean 0, so every LayerNorm only rescales. Head 0 attends to position 0 (score 20 there, 0
    elsewhere) and copies its token code into the residual stream with weight 5; head 1 attends
    evenly (zero queries) and adds the mean token code with weight 0.1; the MLP adds nothing. The
    tied LM head scores token v by its code: the first token's (about 28) beats the current one's (2)."""
    model = GPT(ModelConfig(block_size=BLOCK, n_layer=1, n_head=2, n_embd=32, vocab_size=V, bias=False)).eval()
    eye = torch.eye(16)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for v in range(V):
            model.tok_emb.weight[v, v], model.tok_emb.weight[v, v + 8] = 1.0, -1.0
        for p in range(BLOCK):
            model.pos_emb.weight[p, 16 + p], model.pos_emb.weight[p, 24 + p] = 1.0, -1.0
        for ln in (model.blocks[0].ln_1, model.blocks[0].ln_2, model.ln_f):
            ln.weight.fill_(1.0)
        attn = model.blocks[0].attn
        attn.q_proj.weight[0, 16:24] = 1.0  # head 0, query dim 0: the same at every position
        attn.k_proj.weight[0, 16] = 10.0  # head 0, key dim 0: large at position 0 only
        attn.v_proj.weight[0:16, 0:16] = eye  # head 0's value: the token code
        attn.v_proj.weight[16:32, 0:16] = eye  # head 1's value: the token code too
        attn.out_proj.weight[0:16, 0:16] = 5.0 * eye  # head 0 writes its value strongly
        attn.out_proj.weight[0:16, 16:32] = 0.1 * eye  # head 1 weakly
    return model


@torch.no_grad()
def copy_accuracy(model: GPT, idx: torch.Tensor) -> float:
    """Share of positions 1.. whose argmax is the sequence's first token."""
    predicted = model(idx)[:, 1:].argmax(dim=-1)  # (B, T-1)
    return (predicted == idx[:, :1]).float().mean().item()


def test_ablating_the_head_that_carries_the_answer_drops_the_accuracy():
    model = copy_first_token_model()
    gen = torch.Generator().manual_seed(0)
    test_idx = torch.randint(0, V, (256, BLOCK), generator=gen)
    mean_idx = torch.randint(0, V, (256, BLOCK), generator=gen)  # other sequences for the means
    means, _ = head_means(model, [mean_idx])
    assert copy_accuracy(model, test_idx) == 1.0
    for values in (None, means):  # zero, then mean ablation
        with ablated(model, [(0, 0)], values):
            carrier = copy_accuracy(model, test_idx)
        with ablated(model, [(0, 1)], values):
            other = copy_accuracy(model, test_idx)
        assert carrier < 0.25  # chance: the current token is the first one 1 time in 8
        assert other == 1.0


# ---- probe.py --ablate ----


@pytest.fixture(scope="module")
def run(tiny_stories_run):
    return str(tiny_stories_run)


@pytest.fixture(scope="module")
def ablate_output(run) -> tuple[str, dict]:
    out = io.StringIO()
    result = probe.main([run, "--stories", "3", "--ablate"], out=out)
    return out.getvalue(), result


def test_probe_ablate_prints_the_drop_table(ablate_output):
    text, result = ablate_output
    assert json.loads(text.splitlines()[-1]) == result
    ab = result["ablation"]
    n_layer, n_head = TINY_STORIES["n_layer"], TINY_STORIES["n_head"]
    assert ab["references"] == result["references"] and ab["mean_over"]["positions"] > 0
    for mode in ("zero", "mean"):
        acc, drop = ab["accuracy"][mode], ab["drop"][mode]
        assert len(acc) == n_layer and all(len(row) == n_head for row in acc)
        assert all(d == pytest.approx(ab["baseline"] - a, abs=1e-4)
                   for arow, drow in zip(acc, drop) for a, d in zip(arow, drow))
        worst = ab["most_harmful"][mode]
        assert worst["drop"] == max(max(row) for row in drop)
        if worst["drop"] > 0:  # (else no head: layer and head null)
            assert drop[worst["layer"]][worst["head"]] == worst["drop"]
    looks = result["attention_attribute"]["antecedent"]
    best = ab["most_attention"]
    assert looks[best["layer"]][best["head"]] == max(max(row) for row in looks)
    for mode in ("zero", "mean"):  # the JSON's rank is the range among equals the text prints
        assert best[f"rank_{mode}"] == coreference.rank_among(ab["drop"][mode], best[f"drop_{mode}"])
    assert f"{best['rank_zero']} / {best['rank_mean']} of" in text
    harmful = sum(d > 0 for row in ab["drop"]["zero"] for d in row)  # a tiny model's heads may all matter nothing
    assert [t["what"] for t in ab["together"]] == ["top two by attention"] + ["top two by zero-ablation drop"] * (harmful >= 2)
    assert "drop in accuracy, points, zero / mean ablation" in text
    assert sum(line.startswith("layer ") for line in text.split("drop in accuracy")[1].splitlines()) == n_layer


def test_ablation_table_over_saved_probe_outputs(ablate_output, tmp_path):
    text, result = ablate_output
    (tmp_path / "seed1.txt").write_text(text, encoding="utf-8")
    row = ablation_table.summary(ablation_table.probe_result(str(tmp_path / "seed1.txt"), "seed1", 3, "cpu", None))
    ab = result["ablation"]
    assert row["accuracy"] == pytest.approx(100 * ab["baseline"])
    assert row["best_drop_zero"] == pytest.approx(100 * ab["most_attention"]["drop_zero"])
    other = {**row, "run": "seed2", "accuracy": row["accuracy"] + 10}
    markdown, figures = ablation_table.table([row, other])
    lines = markdown.splitlines()
    assert len(lines) >= 2 + 2 + 1 + 2  # header, rule, two runs, mean ± sd, blank, the verdict, intervals
    accuracy = figures["mean_sd"]["accuracy"]
    assert (accuracy["mean"], accuracy["std"], accuracy["n"]) == pytest.approx((row["accuracy"] + 5, 10 / 2 ** 0.5, 2))
    assert lines[4].startswith("| mean ± sd (2 runs) |") and lines[2].startswith("| seed1 |")


def test_ablation_table_labels_tell_runs_of_the_same_name_apart():
    assert ablation_table.labels(["out/a/seed1337/run", "out/a/seed1338/run"]) == ["seed1337/run", "seed1338/run"]
    assert ablation_table.labels(["x/seed=1", "x/seed=2.txt"]) == ["seed=1", "seed=2"]


def test_when_no_head_hurts_none_is_named():
    """Every drop 0: the first head among equals was named as the one whose removal "hurts most"."""
    zeros = [[0.0, 0.0], [0.0, 0.0]]
    ab = {"baseline": 0.5, "references": 10, "mean_over": {"stories": 3, "seed": 1, "positions": 90},
          "drop": {"zero": zeros, "mean": zeros}, "median_drop": {"zero": 0.0, "mean": 0.0},
          "most_harmful": {m: {"layer": None, "head": None, "drop": 0.0} for m in ("zero", "mean")}, "together": []}
    text = coreference.ablation_report(ab, None, 2, 2)
    assert "hurts most when removed (zero): none, no head's removal lowers the accuracy" in text
    assert "head 0.0" not in text
    # nor in the table over runs, which counted "the head with the most attention hurts most" in such runs
    result = {"label": "run", "n_layer": 2, "n_head": 2, "ablation": {
        **ab, "most_attention": {"layer": 0, "head": 0, "attention": 0.4, "drop_zero": 0.0, "drop_mean": 0.0,
                                 "rank_zero": 1, "rank_mean": 1}}}
    row = ablation_table.summary(result)
    assert (row["harmful_zero"], row["harmful_mean"]) == ("none", "none")
    markdown, figures = ablation_table.table([row, {**row, "run": "run2"}])
    assert "| none (0.0) / none (0.0) |" in markdown and figures["most_attention_is_most_harmful"] == 0


def test_the_table_counts_a_tie_for_most_harmful_and_leaves_out_the_drops_of_a_run_that_resolves_nothing():
    """A head tied for the largest drop (rank 1-5) was counted as not the most harmful; a run at 0% accuracy,
    whose drops probe.py says say nothing, was averaged into the drops' mean ± sd without a word."""
    def row(run: str, baseline: float, best_drop: float, harmful_drop: float) -> dict:
        ab = {"baseline": baseline, "references": 10, "mean_over": {"stories": 3, "seed": 1, "positions": 90},
              "drop": {"zero": [[best_drop, harmful_drop]], "mean": [[best_drop, harmful_drop]]},
              "median_drop": {"zero": 0.0, "mean": 0.0},
              "most_harmful": {m: {"layer": 0, "head": 1, "drop": harmful_drop} for m in ("zero", "mean")},
              "together": [],
              "most_attention": {"layer": 0, "head": 0, "attention": 0.4, "drop_zero": best_drop,
                                 "drop_mean": best_drop, "rank_zero": "1-2", "rank_mean": "1-2"}}
        return ablation_table.summary({"label": run, "n_layer": 1, "n_head": 2, "ablation": ab})
    tied, blind = row("tied", 0.5, 0.2, 0.2), row("blind", 0.0, 0.0, 0.0)
    markdown, figures = ablation_table.table([tied, row("other", 0.5, 0.1, 0.3), blind])
    assert figures["most_attention_is_most_harmful"] == 1  # the tie
    assert "hurts most (zero ablation; a tie counts) in 1 of 2 runs" in markdown
    assert "blind: no reference resolved (accuracy 0%)" in markdown
    assert figures["mean_sd"]["best_drop_zero"]["n"] == 2 and figures["mean_sd"]["best_drop_zero"]["mean"] == 15.0
    assert figures["mean_sd"]["accuracy"]["n"] == 3  # (its accuracy counts)
    # every run at 0%: no drop counted, so '-' in each drop cell (it was ' / ' beside the pairs' '-') and no
    # "hurts most ... in 0 of 0 runs"
    markdown, _ = ablation_table.table([blind, {**blind, "run": "blind2"}])
    mean_row = next(line for line in markdown.splitlines() if line.startswith("| mean ± sd"))
    assert [cell.strip() for cell in mean_row.split("|")[3:-1]] == ["40.0 ± 0.0", "-", "-", "", "-", "-", "-"]
    assert "0 of 0" not in markdown and "drops in accuracy points\n" in markdown + "\n"
    # a pair one run lacks (fewer than two heads lower its accuracy): its mean was said over "(3 runs)", of 2
    paired = [{**r, "pair_by_drop": "0.0+0.1", "pair_by_drop_zero": 10.0 * i, "pair_by_drop_mean": 20.0 * i}
              for i, r in enumerate((tied, row("other", 0.5, 0.1, 0.3)), 1)]
    markdown, figures = ablation_table.table([*paired, {**tied, "run": "third"}])
    mean_row = next(line for line in markdown.splitlines() if line.startswith("| mean ± sd (3 runs)"))
    assert mean_row.split("|")[-2].strip() == "15.0 ± 7.1 (n=2) / 30.0 ± 14.1 (n=2)", mean_row
    assert mean_row.split("|")[2].strip() == "50.0 ± 0.0", mean_row  # (every run's accuracy: no n)


def test_only_heads_whose_removal_lowers_the_accuracy_are_top_heads():
    """All drops 0 (a model that has learned nothing to lose): "removed together (top two by
    zero-ablation drop)" named the first two heads; now there is no such pair."""
    assert coreference.harmful_heads(torch.zeros(2, 2), 2) == []
    assert coreference.harmful_heads(torch.tensor([[0.0, 0.1], [0.0, 0.0]]), 2) == [(0, 1)]
    assert coreference.harmful_heads(torch.tensor([[0.0, 0.1], [0.3, -0.1]]), 2) == [(1, 0), (0, 1)]


def ablation_of(monkeypatch, baseline: float, accuracy: dict, n_layer: int, n_head: int, n_stories: int = 1,
                mean_skipped: int = 0, attention: list[list[float]] | None = None) -> dict:
    """coreference.ablation of a model whose probe accuracy is `baseline` with every head and
    accuracy[removed heads] without them (either mode), no stories decoded (seed 3; of the n_stories
    for the heads' means, seed 4, mean_skipped are skipped)."""
    from contextlib import contextmanager
    removed_now = [()]

    @contextmanager
    def recorded(model, removed, values):
        removed_now.append(tuple(removed))
        yield
        removed_now.pop()
    monkeypatch.setattr(coreference, "ablated", recorded)
    monkeypatch.setattr(coreference, "held_out_cases", lambda tokenizer, n, seed, block_size: (
        ["a case"], 1, mean_skipped if seed == 3 + coreference.MEAN_SEED_OFFSET else 0))
    monkeypatch.setattr(coreference, "head_means", lambda model, windows: (None, 1))
    monkeypatch.setattr(coreference, "behaviour", lambda *args, **kwargs: {
        "accuracy": accuracy[removed_now[-1]] if removed_now[-1] else baseline})
    model = GPT(ModelConfig(block_size=8, n_layer=n_layer, n_head=n_head, n_embd=12, vocab_size=5))
    return coreference.ablation(model, None, n_stories, seed=3, device=torch.device("cpu"), attention=attention)


def test_when_no_removal_lowers_the_accuracy_the_json_names_no_head(monkeypatch):
    """probe.py --ablate printed "none" for the most harmful head while its JSON line named head 0.0, the first
    of equal heads, as a reader of the JSON would take it: layer and head are now null."""
    accuracy = {((0, 0),): 0.5, ((0, 1),): 0.6, ((0, 0), (0, 1)): 0.5}
    ab = ablation_of(monkeypatch, 0.5, accuracy, n_layer=1, n_head=2)
    for mode in ("zero", "mean"):
        assert ab["most_harmful"][mode] == {"layer": None, "head": None, "drop": 0.0}
    assert "hurts most when removed (zero): none" in coreference.ablation_report(ab, None, 1, 2)


def test_a_model_of_one_head_removes_no_pair(monkeypatch):
    """One head, which attends and whose removal costs accuracy: "removed together (top two by attention)" would
    be that head alone, a pair of one."""
    ab = ablation_of(monkeypatch, 0.5, {((0, 0),): 0.0}, n_layer=1, n_head=1, attention=[[0.5]])
    assert ab["most_attention"]["layer"] == 0 and ab["drop"]["zero"] == [[0.5]] and ab["together"] == []


def test_the_drop_is_the_accuracy_lost_and_its_median_a_heads(monkeypatch):
    """Removing head 0.2 takes the accuracy from 0.9 to 0.1: a drop of 0.8, the most harmful head.
    The sign flipped, every drop would read as a gain and the harmless head 0.0 as the most harmful;
    the median drop of 0, 0.1 and 0.8 is 0.1, where a mean (0.3) would have shipped as the median head's."""
    accuracy = {((0, 0),): 0.9, ((0, 1),): 0.8, ((0, 2),): 0.1, ((0, 2), (0, 1)): 0.0}
    ab = ablation_of(monkeypatch, 0.9, accuracy, n_layer=1, n_head=3)
    for mode in ("zero", "mean"):
        assert ab["accuracy"][mode] == [[0.9, 0.8, 0.1]]
        assert ab["drop"][mode] == [[0.0, 0.1, 0.8]]
        assert ab["most_harmful"][mode] == {"layer": 0, "head": 2, "drop": 0.8}
        assert ab["median_drop"][mode] == 0.1
    (pair,) = ab["together"]
    assert pair["heads"] == ["0.2", "0.1"] and pair["drop"] == {"zero": 0.9, "mean": 0.9}


def test_accuracies_drops_and_shares_are_rounded_once_for_the_text(monkeypatch):
    """1 of 29 right, kept to 4 decimals (0.0345), printed 3.5% beside the count's 3.4% (and a drop of 3.5 points);
    a head's share of 0.013488, kept as 0.0135, read 1.4% on the ablation's line and 1.3% in the attention table.
    probe.json keeps 6 decimals, which the text rounds once."""
    one_of_29 = coreference.tally(["antecedent"] + ["other"] * 28)["accuracy"]
    assert one_of_29 == 0.034483
    accuracy = {((0, 0),): 0.0, ((0, 1),): one_of_29, ((0, 0), (0, 1)): 0.0}
    ab = ablation_of(monkeypatch, one_of_29, accuracy, n_layer=1, n_head=2, attention=[[0.013488, 0.0]])
    assert ab["most_attention"]["attention"] == 0.013488 and ab["most_harmful"]["zero"]["drop"] == 0.034483
    text = coreference.ablation_report(ab, {"references": 29, "antecedent": [[0.013488, 0.0]]}, 1, 2)
    assert "accuracy 3.4% with every head" in text and "accuracy 3.4% -> 0.0% (drop 3.4 points" in text
    assert "most attention on the antecedent's attribute: head 0.0 (1.3%): removing it costs 3.4 / 3.4" in text
    assert "  3.4 /   3.4 |  1.3%" in text  # (the table: drops, then the share)


def test_the_means_are_said_over_the_stories_kept(monkeypatch):
    """Of 3 stories for the heads' means, 1 skipped (a word outside a word-level vocabulary): the
    means are over 2 stories, not the 3 asked."""
    ab = ablation_of(monkeypatch, 0.9, {((0, 0),): 0.5}, n_layer=1, n_head=1, n_stories=3, mean_skipped=1)
    assert ab["mean_over"] == {"stories": 2, "seed": 4, "positions": 1}
    assert "windows of 2 other held-out stories (seed 4, 1 position)" in coreference.ablation_report(ab, None, 1, 1)


def test_the_mean_seed_wraps_as_the_probes_does(monkeypatch):
    """The mean-ablation stories of seed 2**63 - 1 are of seed 0, one --seed takes, not 2**63."""
    monkeypatch.setattr(coreference, "MEAN_SEED_OFFSET", 1)
    seeds = []
    monkeypatch.setattr(coreference, "held_out_cases", lambda tokenizer, n, seed, block_size: (
        seeds.append(seed), (["a case"], 1, 0))[1])
    monkeypatch.setattr(coreference, "head_means", lambda model, windows: (None, 1))
    monkeypatch.setattr(coreference, "behaviour", lambda *args, **kwargs: {"accuracy": 0.5})
    model = GPT(ModelConfig(block_size=8, n_layer=1, n_head=1, n_embd=12, vocab_size=5))
    ab = coreference.ablation(model, None, 1, seed=2**63 - 1, device=torch.device("cpu"))
    assert seeds == [2**63 - 1, 0] and ab["mean_over"]["seed"] == 0


def test_probe_ablate_a_chosen_set(run):
    out = io.StringIO()
    result = probe.main([run, "--stories", "2", "--ablate", "0.1,1.0"], out=out)
    ab = result["ablation"]
    assert "drop" not in ab
    assert [(t["what"], t["heads"]) for t in ab["together"]] == [("chosen", ["0.1", "1.0"])]
    assert "removed together (chosen): 0.1 + 1.0" in out.getvalue()


def test_probe_ablate_on_the_training_stories_says_so(run, capsys):
    """--seed one below the run's data.stories_seed: the mean-ablation stories (--seed + 1) are the training
    corpus, and the output called them "other held-out" stories without a note (--seed itself got one)."""
    from tinygpt.checkpoint import load_checkpoint
    trained = load_checkpoint(f"{run}/best.pt")["config"]["data"]["stories_seed"]
    probe.main([run, "--stories", "1", "--seed", str(trained - 1), "--ablate", "0.0"], out=io.StringIO())
    assert (f"note: --ablate's mean-ablation stories (seed {trained}, --seed + 1) are the training corpus's "
            f"data.stories_seed: those stories are not held out") in capsys.readouterr().err
    probe.main([run, "--stories", "1", "--seed", str(trained - 1)], out=io.StringIO())  # no ablation: none
    assert "not held out" not in capsys.readouterr().err


def test_probe_refuses_a_head_the_model_lacks(run, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(probe.main, [run, "--ablate", "0.7"])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "0.7" in err[0] and captured.out == ""


def test_probe_ablate_without_windows_for_the_means_is_one_line(run, capsys, monkeypatch):
    """The mean-ablation stories (seed + 1) all skipped, as a word-level vocabulary skips stories
    with a word it lacks, while the probe's own stories are kept."""
    stories = coreference.held_out_stories

    def skip_the_mean_stories(n_stories, seed, tokenizer):
        if seed == 5 + coreference.MEAN_SEED_OFFSET:
            return "", [], n_stories
        return stories(n_stories, seed, tokenizer)
    monkeypatch.setattr(coreference, "held_out_stories", skip_the_mean_stories)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(probe.main, [run, "--stories", "1", "--seed", "5", "--ablate"])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "mean ablation" in err[0] and "seed 6" in err[0] and "--stories" in err[0]
    assert captured.out == ""


def test_the_report_of_a_model_that_resolves_nothing_says_so():
    """A 0% model's ablation printed drops that say nothing, as if they did, ranked a head tied with
    every other first, and left out the 'top two by drop' line without a word."""
    zeros = [[0.0, 0.0], [0.0, 0.0]]
    ab = {"baseline": 0.0, "references": 10, "mean_over": {"stories": 4, "seed": 6, "positions": 100},
          "accuracy": {"zero": zeros, "mean": zeros}, "drop": {"zero": zeros, "mean": zeros},
          "most_harmful": {m: {"layer": None, "head": None, "drop": 0.0} for m in ("zero", "mean")},
          "median_drop": {"zero": 0.0, "mean": 0.0},
          "most_attention": {"layer": 1, "head": 1, "attention": 0.4, "drop_zero": 0.0, "drop_mean": 0.0,
                             "rank_zero": coreference.rank_among(zeros, 0.0), "rank_mean": coreference.rank_among(zeros, 0.0)},
          "together": [{"what": "top two by attention", "heads": ["1.1", "0.0"], "accuracy": {"zero": 0.0, "mean": 0.0},
                        "drop": {"zero": 0.0, "mean": 0.0}}]}
    text = coreference.ablation_report(ab, None, 2, 2)
    assert "resolves no reference with every head" in text
    assert "(rank 1-4 / 1-4 of 4 by drop)" in text
    assert "removed together (top two by zero-ablation drop): none, fewer than two heads lower" in text
    ab["baseline"], ab["drop"]["zero"] = 0.5, [[0.1, 0.0], [0.0, 0.3]]
    ab["most_attention"]["drop_zero"] = 0.3
    ab["most_attention"]["rank_zero"] = coreference.rank_among(ab["drop"]["zero"], 0.3)
    text = coreference.ablation_report(ab, None, 2, 2)
    assert "resolves no reference" not in text and "(rank 1 / 1-4 of 4 by drop)" in text
    assert [coreference.rank_among(ab["drop"]["zero"], d) for d in (0.3, 0.1, 0.0)] == ["1", "2", "3-4"]
    # no reference had its attribute in the window: no attention measured, so no head "has the most"
    del ab["most_attention"]
    ab["together"] = []
    text = coreference.ablation_report(ab, {"references": 0}, 2, 2)
    assert "most attention on the antecedent's attribute: none, no reference had its attribute inside" in text
    assert "removed together (top two by attention): none, no reference had its attribute inside" in text
    assert "removed together (top two by zero-ablation drop): none, fewer than two" in text
    assert "removed together (top two by attention): none, the model has one head" in coreference.ablation_report(
        {**ab, "drop": {m: [[0.0]] for m in ("zero", "mean")}}, None, 1, 1)
    for n_layer, n_head in ((1, 2), (2, 1)):  # (two heads, in one layer or in two)
        text = coreference.ablation_report({**ab, "drop": {m: [[0.0] * n_head] * n_layer for m in ("zero", "mean")}},
                                           {"references": 0}, n_layer, n_head)
        assert "one head" not in text and "fewer than two heads lower" in text, (n_layer, n_head)


def test_probe_ablate_without_any_attention_measured_names_no_head(run, capsys, monkeypatch):
    """No reference had its attribute in the window: the ablation named head 0.0 "most attention"
    (0.0%) and ablated "the top two by attention", 0.0 + 0.1, as if they were findings."""
    real = coreference.probe

    def nothing_in_the_window(*args, **kwargs):
        result = real(*args, **kwargs)
        result["attention_attribute"]["references"] = 0
        return result
    monkeypatch.setattr(probe, "probe", nothing_in_the_window)
    out = io.StringIO()
    ab = probe.main([run, "--stories", "2", "--ablate"], out=out)["ablation"]
    assert "most_attention" not in ab and [t["what"] for t in ab["together"]] in ([], ["top two by zero-ablation drop"])
    assert "most attention on the antecedent's attribute: none" in out.getvalue()


def test_a_head_number_of_5000_digits_is_one_line():
    with pytest.raises(UserError, match="is not LAYER.HEAD"):  # int() of 5,000 digits raised ValueError
        parse_heads("9" * 5000 + ".0", 4, 4)


def test_the_skipped_stories_are_said_in_the_tokenizers_units(run):
    result = probe.main([run, "--stories", "2"], out=io.StringIO())
    for tokenizer, units in (("word", "words"), ("char", "characters")):
        text = coreference.report({**result, "tokenizer": tokenizer, "skipped_stories": 1}, 2, 2)
        assert f"1 skipped: {units} outside the vocabulary" in text.splitlines()[0]

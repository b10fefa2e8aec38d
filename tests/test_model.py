"""Guards model.py: the attention maths (the worked example of docs/design.md), the reference path against
the SDPA fast path, causality and why generation and the KV cache rely on it (docs/design.md), and the
parameter count, initialisation and sampling rules."""
from __future__ import annotations

import ast
import math
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

import torch.nn.functional as F

from conftest import ROOT
from model import (GPT, attention, causal_mask, cross_entropy, fast_attention, generate, generate_steps, masked_softmax,
                   matmul_attention, next_token_probs, sample_next)

# the worked example: the scores QK^T/sqrt(d_k) of "The cat sat on" (future keys are masked, their values never matter)
WORKED_SCORES = [[0.8, 9.9, 9.9, 9.9],
                 [0.3, 0.9, 9.9, 9.9],
                 [0.2, 1.4, 0.7, 9.9],
                 [0.1, 0.6, 1.2, 0.4]]
WORKED_PERCENT = [[100, 0, 0, 0],
                  [35, 65, 0, 0],
                  [17, 56, 28, 0],
                  [14, 24, 43, 19]]


def make_model(cfg, **changes) -> GPT:
    torch.manual_seed(0)
    return GPT(replace(cfg, **changes)).eval()


def test_worked_example_masked_softmax():
    weights = masked_softmax(torch.tensor(WORKED_SCORES), causal_mask(4, 4))
    percent = (weights * 100).round().int().tolist()
    assert percent == WORKED_PERCENT
    assert torch.all(weights[~causal_mask(4, 4)] == 0)  # exactly 0, not just small
    assert torch.allclose(weights.sum(-1), torch.ones(4))


def test_causal_mask_polarity_and_offset():
    assert causal_mask(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # two new queries at positions 3 and 4 of five keys (the KV-cache case)
    assert causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True] * 5]


def test_attention_is_the_formula():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    y, att = attention(q, k, v, causal_mask(5, 5))
    scores = q @ k.transpose(-2, -1) / math.sqrt(4)
    scores = scores.masked_fill(~causal_mask(5, 5), float("-inf"))
    assert torch.allclose(att, torch.softmax(scores, -1))
    assert torch.allclose(y, att @ v)


@pytest.mark.parametrize("T_q, causal", [(5, True), (2, True), (5, False)])  # training/prefill, a cache, no mask
def test_matmul_attention_is_the_formula(T_q, causal):
    torch.manual_seed(0)
    q = torch.randn(2, 3, T_q, 4)
    k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    mask = causal_mask(T_q, 5) if causal else None
    torch.testing.assert_close(matmul_attention(q, k, v, mask), attention(q, k, v, mask)[0], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bfloat16 on a CPU: matmul_attention
def test_a_future_key_is_hidden_even_behind_very_low_scores(dtype):
    """The mask sets a future key's score to -inf, not to a large negative number: with -1e4 the first
    query, whose only key scores -2e4, would put all its weight on the masked key at +2e4 instead."""
    q = torch.full((1, 1, 2, 4), 100.0, dtype=dtype)  # (B, nh, T, hs)
    k = torch.stack([torch.full((4,), -100.0), torch.full((4,), 100.0)]).to(dtype).view(1, 1, 2, 4)
    v = torch.stack([torch.full((4,), 1.0), torch.full((4,), 7.0)]).to(dtype).view(1, 1, 2, 4)
    mask = causal_mask(2, 2)
    assert masked_softmax(torch.tensor([[-2e4, 0.0]]), torch.tensor([[True, False]])).tolist() == [[1.0, 0.0]]
    for y in (attention(q, k, v, mask)[0], matmul_attention(q, k, v, mask), fast_attention(q, k, v, True)):
        assert y[0, 0, 0].tolist() == [1.0] * 4  # the first query's own value, none of the future's


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T_q", [5, 1, 2])  # no cache, one new query, several after a cache
def test_every_attention_path_drops_weights_when_asked(T_q, dtype):
    """dropout_p reaches the attention weights on every path: the formula, the matmuls and each fused
    kernel (training runs the fused ones, so a path that ignored it would train without that dropout)."""
    torch.manual_seed(0)
    q = torch.randn(1, 2, T_q, 4, dtype=dtype)
    k, v = torch.randn(1, 2, 5, 4, dtype=dtype), torch.randn(1, 2, 5, 4, dtype=dtype)
    mask = causal_mask(T_q, 5)
    paths = {"attention": lambda p: attention(q, k, v, mask, p)[0],
             "matmul_attention": lambda p: matmul_attention(q, k, v, mask, p),
             "fast_attention": lambda p: fast_attention(q, k, v, True, p)}
    for name, path in paths.items():
        torch.manual_seed(1)
        assert not torch.equal(path(0.5), path(0.0)), name


def test_fast_attention_masks_several_new_queries_after_a_cache():
    """Two new queries over five keys (Tq > 1, Tq < Tk: the KV cache fed several tokens) is the one
    case where the fused kernel must be given the mask: without it the first query sees the last key."""
    torch.manual_seed(0)
    q = torch.randn(2, 3, 2, 4)
    k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    mask = causal_mask(2, 5)
    torch.testing.assert_close(fast_attention(q, k, v, True), attention(q, k, v, mask)[0], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bfloat16 on a CPU: matmul_attention
@pytest.mark.parametrize("T_q, T_k", [(5, 5), (1, 5), (2, 5)])  # no cache, one new query, several
@pytest.mark.parametrize("causal", [True, False])
def test_fast_attention_is_attention_under_causal_mask_or_none(T_q, T_k, causal, dtype):
    """fast_attention took a mask it did not read where the fused kernels imply one: an edited mask
    changed the readable path only. It now takes `causal` and builds nothing else."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, T, 8).to(dtype) for T in (T_q, T_k, T_k))
    mask = causal_mask(T_q, T_k) if causal else None
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(fast_attention(q, k, v, causal), attention(q, k, v, mask)[0], atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bfloat16: the CPU's fast path with Tq > 1
@pytest.mark.parametrize("T_q", [5, 2])
def test_matmul_attention_gives_masked_keys_exactly_zero_weight(T_q, dtype):
    """A future key's weight must be exactly 0 (exp(-inf)), not merely small (exp(-30)): a huge value
    behind a masked key must leave every query that may not see it bit for bit unchanged."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, T, 4, dtype=dtype) for T in (T_q, 5, 5))
    mask = causal_mask(T_q, 5)
    clean = matmul_attention(q, k, v, mask)
    hidden = [j for j in range(5) if not mask[:, j].all()]  # keys that some query may not attend
    assert hidden == ([1, 2, 3, 4] if T_q == 5 else [4])
    for j in hidden:
        poisoned = v.clone()
        poisoned[:, :, j] = 1e30
        out = matmul_attention(q, k, poisoned, mask)
        blind = ~mask[:, j]  # the queries that may not attend key j
        assert torch.equal(out[:, :, blind], clean[:, :, blind]), j
        assert torch.isfinite(out[:, :, blind]).all()


def test_cpu_bfloat16_fast_path_agrees_and_stays_causal(tiny_model_config, monkeypatch):
    """On CPU in bfloat16 the fast path runs matmul_attention, not SDPA: it must still agree with
    the reference path and keep the past blind to the future, bit for bit."""
    import model as model_module
    calls = []
    monkeypatch.setattr(model_module, "matmul_attention", lambda *a: calls.append(1) or matmul_attention(*a))
    model = make_model(tiny_model_config)
    idx = torch.randint(0, model.config.vocab_size, (3, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = model(idx)
        assert len(calls) == model.config.n_layer  # the path under test is the one that ran
        slow, _ = model.forward_with_attention(idx)
        assert fast.dtype == torch.bfloat16
        torch.testing.assert_close(fast.float(), slow.float(), atol=0.05, rtol=0.05)
        assert _future_changes_past(model) == 0.0
        assert _future_changes_past(make_model(tiny_model_config, causal=False)) > 1e-3
    calls.clear()
    with torch.autocast("cpu", dtype=torch.float16):  # SDPA is the faster there (bench.py --attention)
        model(idx)
    assert not calls


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_reference_path_equals_sdpa(tiny_model_config, causal, bias):
    model = make_model(tiny_model_config, causal=causal, bias=bias)
    idx = torch.randint(0, model.config.vocab_size, (3, 16))
    fast = model(idx)
    slow, traces = model.forward_with_attention(idx)
    assert fast.shape == (3, 16, model.config.vocab_size)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    assert len(traces) == model.config.n_layer
    w = traces[0].weights
    assert w.shape == (3, 4, 16, 16) and traces[0].outputs.shape == (3, 4, 16, 8)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, 4, 16))
    future = ~causal_mask(16, 16)
    if causal:
        assert torch.all(w[..., future] == 0)
    else:
        assert torch.all(w[..., future] > 0)


def test_a_block_is_pre_layernorm_residuals_around_attention_and_an_erf_gelu_mlp(tiny_model_config):
    """Block: x + attn(ln_1(x)), then x + mlp(ln_2(x)), the MLP C -> 4C -> exact (erf) GELU -> C. Without it no
    test here failed for a block that dropped a residual (`x = attn_out`) or took ReLU for GELU (only the
    export's comparison with transformers did, which needs the optional extras)."""
    block = make_model(tiny_model_config).blocks[0]
    x = torch.randn(2, 5, tiny_model_config.n_embd, generator=torch.Generator().manual_seed(1))  # (B, T, C)
    with torch.no_grad():
        # at initialisation the MLP's inputs z stay within about ±0.3, where the two GELUs agree to 2e-7:
        # wider weights spread z over about ±4, where they part by up to 4e-4
        torch.nn.init.normal_(block.mlp.fc.weight, std=0.5)
        y, _ = block(x)
        h = x + block.attn(block.ln_1(x))[0]  # (attention's own maths: the tests above)
        z = block.mlp.fc(block.ln_2(h))  # (B, T, 4C)
        expected = h + block.mlp.out_proj(0.5 * z * (1 + torch.erf(z / math.sqrt(2))))
    assert block.mlp.fc.out_features == 4 * tiny_model_config.n_embd
    assert z.abs().max() > 3
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-6)


def _future_changes_past(model: GPT) -> float:
    """Largest change of logits at positions < 8 when only tokens >= 8 change."""
    idx = torch.randint(0, model.config.vocab_size, (2, 16))
    edited = idx.clone()
    edited[:, 8:] = (edited[:, 8:] + 1) % model.config.vocab_size
    return (model(idx)[:, :8] - model(edited)[:, :8]).abs().max().item()


def test_future_tokens_never_change_past_logits(tiny_model_config):
    """Why generation needs the mask (a): the past never sees the future."""
    assert _future_changes_past(make_model(tiny_model_config)) == 0.0
    assert _future_changes_past(make_model(tiny_model_config, causal=False)) > 1e-4


def _prefix_vs_full(model: GPT) -> float:
    """(b) logits at t from the full sequence vs from the prefix idx[:, :t+1]."""
    idx = torch.randint(0, model.config.vocab_size, (1, 16))
    full = model(idx)
    return max((model(idx[:, :t + 1])[:, -1] - full[:, t]).abs().max().item() for t in range(16))


def test_last_position_of_prefix_matches_training_view(tiny_model_config):
    assert _prefix_vs_full(make_model(tiny_model_config)) < 1e-5
    assert _prefix_vs_full(make_model(tiny_model_config, causal=False)) > 1e-4


def _cached_vs_uncached(model: GPT, steps: int) -> float:
    """(c) feed tokens one at a time through the KV cache vs the whole prefix each step."""
    idx = torch.randint(0, model.config.vocab_size, (2, steps))
    caches = model.new_kv_caches(2)
    worst = 0.0
    for t in range(steps):
        cached = model(idx[:, t:t + 1], caches)[:, -1]  # (B, V) only the new token is computed
        full = model(idx[:, :t + 1])[:, -1]  # (B, V) the whole prefix
        worst = max(worst, (cached - full).abs().max().item())
    return worst


def test_kv_cache_fed_three_tokens_at_a_time_equals_recomputation(tiny_model_config):
    """Several new tokens after a cache (a prefill, then chunks) need the offset causal mask (Tq < Tk):
    each chunk's logits must equal those of the uncached forward over the whole sequence."""
    model = make_model(replace(tiny_model_config, block_size=18))
    idx = torch.randint(0, model.config.vocab_size, (2, 18))
    full = model(idx)
    caches = model.new_kv_caches(2)
    for t in range(0, 18, 3):
        chunk = model(idx[:, t:t + 3], caches)  # (B, 3, V): three new queries over t + 3 keys
        torch.testing.assert_close(chunk, full[:, t:t + 3], atol=1e-5, rtol=1e-5)


def test_kv_cache_equals_recomputation_only_when_causal(tiny_model_config):
    cfg = replace(tiny_model_config, block_size=128)
    assert _cached_vs_uncached(make_model(cfg), 120) < 1e-5
    # without the mask earlier positions attend to later ones, so cached keys would go stale: refused
    # (it returned wrong logits)
    with pytest.raises(ValueError, match="a KV cache is exact only under the causal mask"):
        _cached_vs_uncached(make_model(cfg, causal=False), 120)


def test_generate_cached_equals_uncached_past_block_size(tiny_model_config):
    """Greedy text is the same with and without the cache, across several window slides."""
    model = make_model(tiny_model_config)  # block_size 16: 60 tokens slide the window often
    idx = torch.randint(0, model.config.vocab_size, (2, 5))
    cached = torch.stack(list(generate(model, idx, 60, temperature=0)), 1)
    uncached = torch.stack(list(generate(model, idx, 60, temperature=0, use_cache=False)), 1)
    assert cached.shape == (2, 60)
    assert torch.equal(cached, uncached)


def test_each_step_sees_the_prompt_and_the_tokens_drawn_before_it(tiny_model_config):
    """Token by token: step i's logits are those of the prompt followed by the i tokens already yielded
    (sampled, so not a repeat of one greedy token), with and without the cache, within block_size."""
    model = make_model(tiny_model_config)  # block_size 16
    idx = torch.randint(0, model.config.vocab_size, (2, 4))
    for use_cache in (True, False):
        gen = torch.Generator().manual_seed(0)
        seq = idx
        for step in generate_steps(model, idx, 12, temperature=2.0, use_cache=use_cache, generator=gen):
            torch.testing.assert_close(step.logits, model(seq)[:, -1], atol=1e-5, rtol=1e-5)
            seq = torch.cat([seq, step.token[:, None]], dim=1)


def test_generate_passes_top_k_top_p_and_use_cache_on(tiny_model_config):
    """generate forwards its settings to generate_steps: top_k=1 or a tiny top_p at temperature 1 is the greedy
    text, and use_cache=False never calls the one-token decode step."""
    model = make_model(tiny_model_config)
    idx = torch.randint(0, model.config.vocab_size, (2, 5))
    greedy = torch.stack(list(generate(model, idx, 20, temperature=0)), 1)
    for settings in (dict(top_k=1), dict(top_p=1e-9)):
        gen = torch.Generator().manual_seed(0)
        got = torch.stack(list(generate(model, idx, 20, temperature=1.0, generator=gen, **settings)), 1)
        assert torch.equal(got, greedy), settings
    calls = []

    def step(window, caches):
        calls.append(window.size(1))
        return model(window, caches)
    list(generate(model, idx, 5, temperature=0, use_cache=False, decode_step=step))
    assert calls == []


def test_sampling_draws_from_the_generator_it_is_given_not_the_global_seed(tiny_model_config):
    """sample.py --seed reaches the draw through `generator`: the same generator gives the same tokens whatever
    the global RNG holds, in sample_next and through generate."""
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    model = make_model(tiny_model_config)
    idx = torch.randint(0, model.config.vocab_size, (2, 5))

    def draws(global_seed):
        torch.manual_seed(global_seed)
        gen = torch.Generator().manual_seed(0)
        single = [sample_next(logits, 1.0, generator=gen).item() for _ in range(40)]
        gen = torch.Generator().manual_seed(0)
        return single, [t.tolist() for t in generate(model, idx, 20, temperature=1.0, generator=gen)]
    assert draws(1) == draws(2)


def test_kv_caches_take_the_models_dtype_and_a_bfloat16_model_generates_with_them(tiny_model_config):
    """sample.py --dtype bfloat16: the caches are made in the model's dtype (a float32 cache beside bfloat16
    queries is an SDPA dtype error at the first cached step)."""
    model = make_model(tiny_model_config).to(torch.bfloat16)
    for cache in model.new_kv_caches(2):
        assert cache.k.dtype == cache.v.dtype == torch.bfloat16
    idx = torch.randint(0, model.config.vocab_size, (2, 5))
    steps = list(generate_steps(model, idx, 4, temperature=0))
    assert [s.logits.dtype for s in steps] == [torch.bfloat16] * 4


def test_generate_window_slides_by_half_a_block_and_never_grows(tiny_model_config):
    """The model sees at most block_size tokens; a full window keeps its newest half. Also for
    block_size 1 (a bigram model), where half a block rounds to the one newest token."""
    model = make_model(tiny_model_config)  # block_size 16
    idx = torch.randint(0, model.config.vocab_size, (1, 5))
    seen = [step.context for step in generate_steps(model, idx, 40, temperature=0)]
    assert seen == list(range(5, 17)) + list(range(8, 17)) * 3 + [8]
    bigram = make_model(replace(tiny_model_config, block_size=1))
    for use_cache in (True, False):
        steps = list(generate_steps(bigram, idx, 4, temperature=0, use_cache=use_cache))
        assert [s.context for s in steps] == [1] * 4
        assert steps[0].token.item() == bigram(idx[:, -1:])[0, -1].argmax().item()


def test_generate_crops_long_prompts(tiny_model_config):
    model = make_model(tiny_model_config)
    idx = torch.randint(0, model.config.vocab_size, (1, 50))  # longer than block_size=16
    out = list(generate(model, idx, 3, temperature=0))
    assert len(out) == 3
    assert out[0].item() == model(idx[:, -16:])[0, -1].argmax().item()


def test_parameter_count_formula(tiny_model_config):
    for bias in (False, True):
        cfg = replace(tiny_model_config, bias=bias)
        C, V, T, L = cfg.n_embd, cfg.vocab_size, cfg.block_size, cfg.n_layer
        per_layer = 12 * C * C + 2 * C + (4 * C + 4 * C + C + 2 * C if bias else 0)
        expected = V * C + T * C + L * per_layer + C + (C if bias else 0)  # LM head tied: not counted
        assert make_model(cfg).num_params() == expected


def test_head_size_splits_n_embd_among_the_heads(tiny_model_config):
    """hs = C // nh: each head's queries, its trace and the KV cache are that wide."""
    cfg = replace(tiny_model_config, n_embd=48, n_head=6)
    assert cfg.head_size == 8
    model = make_model(cfg)
    _, traces = model.forward_with_attention(torch.zeros(1, 5, dtype=torch.long))
    assert traces[0].outputs.shape == (1, 6, 5, 8)  # (B, nh, T, hs)
    assert model.new_kv_caches(2)[0].k.shape == (2, cfg.block_size, 6, 8)  # (B, max_T, nh, hs)


def test_head_h_owns_columns_h_hs_to_h_plus_1_hs_of_each_projection(tiny_model_config):
    """Head h is `attention` over columns h*hs .. (h+1)*hs - 1 of q_proj, k_proj and v_proj, and the merge lays
    the heads side by side in that order before out_proj (the layout GPT-2's checkpoints and the export assume)."""
    attn = make_model(tiny_model_config).blocks[0].attn
    nh, hs, T = attn.n_head, attn.head_size, 5
    x = torch.randn(2, T, tiny_model_config.n_embd, generator=torch.Generator().manual_seed(1))  # (B, T, C)
    with torch.no_grad():
        y, trace = attn(x, need_weights=True)
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)  # (B, T, C)
        heads = []
        for h in range(nh):
            cols = slice(h * hs, (h + 1) * hs)
            out, att = attention(q[..., cols], k[..., cols], v[..., cols], causal_mask(T, T))  # (B, T, hs), (B, T, T)
            torch.testing.assert_close(trace.weights[:, h], att)
            torch.testing.assert_close(trace.outputs[:, h], out)
            heads.append(out)
        torch.testing.assert_close(y, attn.out_proj(torch.cat(heads, dim=-1)))


def test_flops_per_token_by_hand(tiny_model_config):
    """The formula in flops_per_token's comment written out: 6 FLOPs per weight (position embeddings excluded, the tied
    token embedding counted once) plus 12 * L * T * C for attention's two matmuls."""
    C, V, T, L = 32, 37, 16, 2
    assert (tiny_model_config.n_embd, tiny_model_config.vocab_size, tiny_model_config.block_size,
            tiny_model_config.n_layer) == (C, V, T, L)
    weights = V * C + L * (12 * C * C + 2 * C) + C  # embedding, blocks (no bias), final LayerNorm
    assert make_model(tiny_model_config).flops_per_token() == 6 * weights + 12 * L * T * C


def test_cross_entropy_of_bfloat16_logits_is_float32():
    """The softmax over V runs in float32 even when the model ran in bfloat16."""
    torch.manual_seed(0)
    logits = torch.randn(2, 8, 50) * 4
    targets = torch.randint(0, 50, (2, 8))
    loss = cross_entropy(logits.bfloat16(), targets)
    assert loss.dtype == torch.float32 and loss.dim() == 0
    expected = F.cross_entropy(logits.bfloat16().float().view(-1, 50), targets.view(-1))
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)


def test_initial_loss_is_near_uniform(tiny_model_config):
    model = make_model(tiny_model_config, vocab_size=200)
    idx = torch.randint(0, 200, (8, 16))
    loss = cross_entropy(model(idx), torch.randint(0, 200, (8, 16))).item()
    assert abs(loss - math.log(200)) < 0.1


def test_initialisation(tiny_model_config):
    model = make_model(replace(tiny_model_config, n_embd=128, n_layer=4, vocab_size=500))
    assert model.lm_head.weight is model.tok_emb.weight
    assert abs(model.tok_emb.weight.std().item() - 0.02) < 0.002
    assert abs(model.pos_emb.weight.std().item() - 0.02) < 0.002  # (not nn.Embedding's own N(0, 1))
    for block in model.blocks:  # the last layer of both residual branches, attention's and the MLP's
        for last in (block.attn.out_proj, block.mlp.out_proj):
            assert abs(last.weight.std().item() - 0.02 / math.sqrt(8)) < 0.001
    assert abs(model.blocks[0].mlp.fc.weight.std().item() - 0.02) < 0.002
    assert abs(model.blocks[0].attn.q_proj.weight.std().item() - 0.02) < 0.002
    assert list(model.buffers()) == []  # no (block_size, block_size) mask kept per layer: built per call


def test_sample_next_rules():
    torch.manual_seed(0)
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    assert sample_next(logits, temperature=0).item() == 1
    assert sample_next(logits, temperature=1.0, top_k=1).item() == 1
    assert sample_next(logits, temperature=1.0, top_p=0.01).item() == 1
    gen = torch.Generator().manual_seed(0)
    drawn = {sample_next(logits, 1.0, top_k=2, generator=gen).item() for _ in range(200)}
    assert drawn == {1, 2}
    drawn = {sample_next(logits, 1.0, generator=gen).item() for _ in range(500)}
    assert drawn == {0, 1, 2, 3}
    # greedy ignores top_k and top_p, and so do the probabilities shown for it (temperature 1, unfiltered)
    for top_k, top_p in ((None, None), (2, None), (None, 0.5), (2, 0.5)):
        assert torch.equal(next_token_probs(logits, 0, top_k, top_p), torch.softmax(logits, dim=-1))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logits_that_are_not_finite_are_refused_not_sampled(bad, temperature):
    # weights that overflow float32 (finite, ~1e25) gave NaN logits: greedy picked a NaN's index and
    # printed garbage with exit 0, sampling ended in multinomial's RuntimeError
    logits = torch.tensor([[0.5, 1.0, -2.0], [0.1, bad, 0.2]])
    with pytest.raises(FloatingPointError, match="the model's logits are not finite"):
        sample_next(logits, temperature)
    assert sample_next(torch.tensor([[0.5, 3.0, float("-inf")]]), temperature).tolist() in ([0], [1])


def test_generation_from_no_token_or_an_unknown_id_says_so(tiny_model_config):
    # an IndexError from deep inside ("index -1 is out of bounds", "index out of range in self")
    model = GPT(tiny_model_config).eval()
    V = tiny_model_config.vocab_size
    for idx, got in ((torch.zeros(1, 0, dtype=torch.long), "no token"), (torch.tensor([[1, V]]), f"ids 1..{V}"),
                     (torch.tensor([[-1]]), "ids -1..-1")):
        with pytest.raises(ValueError, match=rf"^idx must hold at least one token, each an id in 0\.\.{V - 1}: "
                                             rf"got {re.escape(got)}$"):
            next(generate_steps(model, idx, 3))
    assert len(list(generate_steps(model, torch.tensor([[V - 1]]), 3))) == 3


def test_top_k_and_top_p_keep_tied_tokens_alike():
    """Two tokens with the same logit are equally likely: top_p kept the one the sort put first
    (a 100/0 choice where top_k gave 50/50)."""
    logits = torch.tensor([[5.0, 5.0, 1.0, 0.0], [0.0, 2.0, 2.0, 2.0]])
    for probs in (next_token_probs(logits, 1.0, top_k=1), next_token_probs(logits, 1.0, top_p=0.3)):
        assert torch.allclose(probs[0], torch.tensor([0.5, 0.5, 0.0, 0.0]))
        assert torch.allclose(probs[1], torch.tensor([0.0, 1 / 3, 1 / 3, 1 / 3]))
    # the nucleus still stops where its mass is reached: 0.3 of [0.5, 0.3, 0.2] is the first token alone
    assert torch.allclose(next_token_probs(torch.tensor([[0.5, 0.3, 0.2]]).log(), 1.0, top_p=0.3),
                          torch.tensor([[1.0, 0.0, 0.0]]))


def test_top_p_at_its_ends_keeps_the_first_token_or_every_token():
    """A top_p below float32's smallest (1e-50 reads as 0) still keeps the likeliest token, not NaN everywhere;
    top_p=1.0 keeps the tail that a float32 cumulative sum reaching 1.0 early would cut off."""
    assert next_token_probs(torch.tensor([[2.0, 1.0, 0.0]]), 1.0, top_p=1e-50).tolist() == [[1.0, 0.0, 0.0]]
    logits = torch.tensor([[0.0, 0.0, -30.0]])
    full = next_token_probs(logits, 1.0, top_p=1.0)
    assert torch.equal(full, next_token_probs(logits, 1.0)) and full[0, 2] > 0


def test_top_p_stops_once_the_mass_before_a_token_reaches_p():
    """[0.5, 0.25, 0.25] with top_p 0.5: the first token alone reaches 0.5, so the nucleus is that
    token (the mass before the second is already >= p, not only > p)."""
    probs = next_token_probs(torch.tensor([[0.5, 0.25, 0.25]]).log(), 1.0, top_p=0.5)
    assert probs.tolist() == [[1.0, 0.0, 0.0]]
    # a nucleus of two: 0.5 before the second token is under 0.7, 0.8 before the third is not; renormalised
    probs = next_token_probs(torch.tensor([[0.2, 0.5, 0.3]]).log(), 1.0, top_p=0.7)
    assert torch.allclose(probs, torch.tensor([[0.0, 0.625, 0.375]]))


def test_tiny_temperature_is_near_greedy_not_nan():
    """logits / 1e-38 would overflow float32 to inf (and the softmax to NaN); the largest logit is
    subtracted first, so any temperature > 0 gives probabilities, all mass on the argmax."""
    logits = torch.tensor([[10.0, 30.0, 20.0, 30.0 - 1e-5]])
    for temperature in (1e-38, 1e-20, 1e-7):
        probs = next_token_probs(logits, temperature)
        assert torch.isfinite(probs).all(), temperature
        assert probs[0, 1].item() > 0.99 and abs(probs.sum().item() - 1) < 1e-6
    assert torch.allclose(next_token_probs(logits, 2.0), torch.softmax(logits / 2.0, dim=-1))


@pytest.mark.parametrize("setting, match", [
    ({"temperature": -1.0}, "temperature must be a finite number >= 0"),  # was the distribution upside down
    ({"temperature": float("nan")}, "temperature must be a finite number >= 0"),  # was all NaN
    ({"temperature": float("inf")}, "temperature must be a finite number >= 0"),
    ({"top_k": 0}, "top_k must be >= 1"),  # was a RuntimeError on sizes
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"), ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
])
def test_sampling_settings_with_no_meaning_are_refused_by_name(setting, match):
    """next_token_probs and sample_next, called from code, name the setting (sample.py refuses its flags alike);
    at temperature 0 sample_next takes the argmax, whatever valid top_k and top_p say, and refuses invalid ones."""
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    args = {"temperature": 1.0, **setting}
    with pytest.raises(ValueError, match=match):
        next_token_probs(logits, **args)
    with pytest.raises(ValueError, match=match):
        sample_next(logits, **args)
    if "temperature" not in setting:  # greedy too: it took the argmax of generate(top_k=-5), unsaid
        with pytest.raises(ValueError, match=match):
            sample_next(logits, **{**args, "temperature": 0.0})
    assert sample_next(logits, temperature=0.0, top_k=2, top_p=0.5).tolist() == [0]  # (valid: ignored)


def test_a_model_without_the_causal_mask_generates_without_the_cache(tiny_model_config):
    """Its earlier positions attend to later ones, so cached keys go stale: generate recomputes
    the window each step whatever use_cache says (what `sample.py --force` shows)."""
    model = make_model(tiny_model_config, causal=False)  # block_size 16: the window slides too
    idx = torch.randint(0, model.config.vocab_size, (2, 5))
    cached = [step.logits for step in generate_steps(model, idx, 30, temperature=0)]
    uncached = [step.logits for step in generate_steps(model, idx, 30, temperature=0, use_cache=False)]
    assert max((a - b).abs().max().item() for a, b in zip(cached, uncached)) < 1e-5


def test_sequence_longer_than_block_size_is_refused(tiny_model_config):
    model = make_model(tiny_model_config)
    with pytest.raises(ValueError, match="block_size=16"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_dropout_is_off_outside_training(tiny_model_config):
    """A run trained with dropout samples from its whole model: in eval mode every dropout, the attention
    weights' too (the fused kernels drop whatever mode the module is in), is off, so the logits, with
    and without the cache, are those of the same weights without dropout."""
    plain = make_model(tiny_model_config)
    dropped = make_model(tiny_model_config, dropout=0.5)  # the same seed: the same weights
    idx = torch.randint(0, tiny_model_config.vocab_size, (2, 16))
    want = plain(idx)
    torch.testing.assert_close(dropped(idx), want)
    torch.testing.assert_close(dropped.forward_with_attention(idx)[0], want, atol=1e-5, rtol=1e-5)
    caches = dropped.new_kv_caches(2)
    dropped(idx[:, :15], caches)  # then one new query over the cache, as generation decodes
    torch.testing.assert_close(dropped(idx[:, 15:], caches)[:, -1], want[:, -1], atol=1e-5, rtol=1e-5)


def test_every_dropout_site_drops_while_training(tiny_model_config):
    """In training, dropout acts at each of its four places: the embeddings, the attention weights and
    both residual branches. Turning any one of them off changes the output (the same random draws)."""
    model = make_model(tiny_model_config, dropout=0.5, n_layer=1).train()
    block = model.blocks[0]
    idx = torch.randint(0, tiny_model_config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))

    def run():
        torch.manual_seed(1)
        return model(idx)
    base = run()
    for site in (model.drop, block.attn.resid_dropout, block.mlp.dropout):
        site.p = 0.0
        assert not torch.equal(run(), base), site
        site.p = 0.5
    block.attn.attn_dropout_p = 0.0
    assert not torch.equal(run(), base)
    block.attn.attn_dropout_p = 0.5
    torch.testing.assert_close(run(), base, rtol=0, atol=0)  # the same draws: only the site turned off differed


def kept_and_scaled(got: torch.Tensor, want: torch.Tensor, p: float) -> None:
    """got is want under dropout p: about a fraction p exactly 0, the rest want / (1 - p)."""
    kept = got != 0
    assert 0.3 < kept.float().mean().item() < 0.7
    torch.testing.assert_close(got[kept], want[kept] / (1 - p))


def test_dropout_drops_what_is_added_to_the_residual_stream(tiny_model_config):
    """Dropout acts on the embeddings' sum and on each residual branch's output, after its last projection
    (GPT-2's placement), not on the input of out_proj or on one embedding alone."""
    model = make_model(tiny_model_config, dropout=0.5, n_layer=1)
    block = model.blocks[0]
    block.attn.attn_dropout_p = 0.0  # here only the residual dropouts
    x = torch.randn(2, 16, tiny_model_config.n_embd, generator=torch.Generator().manual_seed(1))
    for branch in (lambda: block.attn(x)[0], lambda: block.mlp(x)):
        with torch.no_grad():
            want = branch()
            model.train()
            torch.manual_seed(1)
            kept_and_scaled(branch(), want, 0.5)
            model.eval()
    idx = torch.randint(0, tiny_model_config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    seen = []
    block.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        want = model.tok_emb(idx) + model.pos_emb(torch.arange(16))
        model.train()
        torch.manual_seed(1)
        model(idx)
    kept_and_scaled(seen[0], want, 0.5)


def test_one_backward_pass_reaches_every_weight(tiny_model_config):
    """Every parameter, biases and LayerNorms included, takes part in the forward pass: one left out
    (an ln_2 that the MLP never reads) would be trained, saved and loaded for nothing."""
    model = make_model(tiny_model_config, bias=True).train()
    idx = torch.randint(0, tiny_model_config.vocab_size, (2, 16))
    cross_entropy(model(idx), torch.randint(0, tiny_model_config.vocab_size, (2, 16))).backward()
    assert [name for name, p in model.named_parameters() if p.grad is None or not p.grad.any()] == []


def test_biases_start_at_zero(tiny_model_config):
    """With model.bias, every Linear's bias starts at 0 (GPT-2's initialisation), not at PyTorch's
    default uniform noise."""
    model = make_model(tiny_model_config, bias=True)
    biases = [m.bias for m in model.modules() if isinstance(m, torch.nn.Linear) and m.bias is not None]
    assert len(biases) == 6 * tiny_model_config.n_layer  # q, k, v, out; fc, out: the LM head has none
    assert all(not b.any() for b in biases)


def test_bfloat16_logits_give_the_float32_nucleus():
    """sample.py --dtype bfloat16: the probabilities and the top-p nucleus are those of the same logits in
    float32 (a cumulative sum over thousands of tokens in bfloat16 lost 9 of these 319 tokens)."""
    logits = (torch.randn(1, 5000, generator=torch.Generator().manual_seed(0)) * 2).bfloat16()
    want = next_token_probs(logits.float(), 0.8, top_p=0.9)
    got = next_token_probs(logits, 0.8, top_p=0.9)
    assert got.dtype == torch.float32 and torch.equal(got > 0, want > 0)
    torch.testing.assert_close(got, want)


def test_a_long_prompt_fills_the_first_window_and_its_logits_are_the_last_positions(tiny_model_config):
    """A prompt longer than block_size is seen through a full first window, its last block_size tokens
    (not slid to half a block), and each Step carries the logits its token was drawn from: the last
    position's (what --show-steps and the attention page show as the candidates)."""
    model = make_model(tiny_model_config)  # block_size 16
    idx = torch.randint(0, model.config.vocab_size, (1, 50))
    for use_cache in (True, False):
        first = next(generate_steps(model, idx, 1, temperature=0, use_cache=use_cache))
        assert first.context == 16
        torch.testing.assert_close(first.logits, model(idx[:, -16:])[:, -1])


def test_top_k_beyond_the_vocabulary_keeps_every_token():
    """--top-k is typed without knowing the model's vocabulary: a k at or above it keeps every token
    (the plain softmax), not a torch.topk error."""
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    for top_k in (4, 5, 10**6):
        torch.testing.assert_close(next_token_probs(logits, 1.0, top_k=top_k), torch.softmax(logits, dim=-1))


def test_the_causal_mask_is_built_without_a_second_copy():
    """torch.ones(T, T).tril() held two T x T tensors at once: an imported GPT-2 of 40,000 positions
    peaked at 3.4 GB where the memory check counted 1.6 GB. It is now one comparison of two position
    vectors, which allocates only its result."""
    code = ("import resource, sys, torch, model\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "model.causal_mask(16_000, 16_000)\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)")
    grew = int(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout)
    assert grew < 1.5 * 16_000 ** 2  # one mask of 256 MB (two: 512)


@pytest.mark.parametrize("shape", [dict(n_layer=1, n_head=1, n_embd=8, bias=False),
                                   dict(n_layer=3, n_head=4, n_embd=32, bias=True)])
def test_count_params_states_the_architecture_a_built_model_has(tiny_model_config, shape):
    """GPT.count_params is the architecture in closed form (sweep.py's tables use it without building a
    model): an edit of the model must edit it too, or this fails."""
    from dataclasses import replace
    cfg = replace(tiny_model_config, **shape)
    assert GPT.count_params(cfg) == GPT(cfg).num_params()


def test_every_docstring_of_model_py_is_one_to_three_lines():
    """model.py reads in one sitting: each function and class says what it does, with its shapes, in 1-3 lines;
    the why and the maths go in comments beside the lines they explain."""
    tree = ast.parse((ROOT / "model.py").read_text(encoding="utf-8"))
    long_ones = {node.name: doc.strip().count("\n") + 1 for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                 and (doc := ast.get_docstring(node, clean=False)) and doc.strip().count("\n") >= 3}
    assert long_ones == {}


def test_a_full_cache_refuses_one_more_token_by_name(tiny_model_config):
    """With kv_caches the block counts the cached positions too: past a full cache a new token is refused
    with the block_size message (not an IndexError from the position embedding or the cache's assert)."""
    model = make_model(tiny_model_config)
    T = model.config.block_size
    caches = model.new_kv_caches(1)
    model(torch.zeros(1, T - 1, dtype=torch.long), caches)
    model(torch.zeros(1, 1, dtype=torch.long), caches)  # exactly full: fine
    with pytest.raises(ValueError, match=f"sequence of {T + 1} tokens exceeds block_size={T}"):
        model(torch.zeros(1, 1, dtype=torch.long), caches)
    caches = model.new_kv_caches(1)
    model(torch.zeros(1, T - 2, dtype=torch.long), caches)
    with pytest.raises(ValueError, match=f"sequence of {T + 1} tokens exceeds block_size={T}"):
        model(torch.zeros(1, 3, dtype=torch.long), caches)


def test_reference_path_after_a_cache_masks_a_chunk_of_queries_at_their_own_positions(tiny_model_config):
    """forward_with_attention with kv_caches and several new tokens: each chunk's logits and weights are the rows
    of the uncached pass (query i of a chunk after t cached keys sees keys 0 .. t + i, not 0 .. i)."""
    model = make_model(replace(tiny_model_config, block_size=12))
    idx = torch.randint(0, model.config.vocab_size, (2, 12))
    full_logits, full_traces = model.forward_with_attention(idx)
    caches = model.new_kv_caches(2)
    for t in range(0, 12, 3):
        logits, traces = model.forward_with_attention(idx[:, t:t + 3], caches)
        torch.testing.assert_close(logits, full_logits[:, t:t + 3], atol=1e-5, rtol=1e-5)
        for trace, full in zip(traces, full_traces):
            torch.testing.assert_close(trace.weights, full.weights[:, :, t:t + 3, :t + 3], atol=1e-5, rtol=1e-5)


def test_top_k_one_below_the_vocabulary_and_top_p_just_below_one_still_filter():
    """The filters switch off only where they cannot change anything (top_k >= V, top_p == 1): top_k = V - 1 drops
    the least likely token, and top_p = 0.999 drops a tail holding less than 0.001 of the mass."""
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    V = logits.size(-1)
    probs = next_token_probs(logits, 1.0, top_k=V - 1)
    assert probs[0, 3] == 0 and torch.allclose(probs[0, :3], torch.softmax(logits[0, :3], dim=-1))
    tail = torch.tensor([[0.6, 0.3995, 0.0005]]).log()
    probs = next_token_probs(tail, 1.0, top_p=0.999)
    assert probs[0, 2] == 0 and torch.allclose(probs[0, :2], torch.tensor([0.6, 0.3995]) / 0.9995)


def test_generate_decodes_with_the_step_it_is_given(tiny_model_config):
    """generate passes decode_step on (bench.py times the compiled step through it): after the prefill every
    token comes from that step, and the tokens are the plain model's."""
    model = make_model(tiny_model_config)
    idx = torch.randint(0, model.config.vocab_size, (1, 5))
    calls = []

    def step(window, caches):
        calls.append(window.size(1))
        return model(window, caches)

    got = [int(t) for t in generate(model, idx, 6, temperature=0, decode_step=step)]
    assert got == [int(t) for t in generate(model, idx, 6, temperature=0)]
    assert calls == [1] * 5  # the first token from the prefill, the other five from the step


def test_attention_returns_the_weights_before_dropout():
    """`attention` drops weights for the values it sums, but returns them undropped: rows that sum to 1."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    mask = causal_mask(5, 5)
    y_plain, att_plain = attention(q, k, v, mask)
    torch.manual_seed(1)
    y, att = attention(q, k, v, mask, 0.5)
    assert not torch.equal(y, y_plain)  # the dropout did act
    assert torch.equal(att, att_plain)


@pytest.mark.parametrize("changes, match", [(dict(vocab_size=0), "set it from the tokenizer"),
                                            (dict(n_embd=32, n_head=3), "n_head=3")])
def test_a_model_of_no_vocabulary_or_uneven_heads_is_refused_when_built(tiny_model_config, changes, match):
    """GPT checks its config when built, not with an IndexError or a view error at the first forward."""
    with pytest.raises(AssertionError, match=match):
        GPT(replace(tiny_model_config, **changes))

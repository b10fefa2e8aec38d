"""tinygpt: a decoder-only GPT built on causal multi-head attention, in plain PyTorch.

Shape legend: B batch, T time (tokens), C n_embd, nh n_head, hs head_size = C // nh, V vocab_size;
Tq queries and Tk keys (T_q, T_k as arguments): Tk = cached + new positions, Tq = Tk = T without a cache;
W the generation window's length (at most block_size).
Read top to bottom: masked_softmax, causal_mask -> attention (the formula) -> matmul_attention,
fast_attention (the same maths in faster kernels) -> HeadTrace -> CausalSelfAttention (heads) -> MLP
-> Block -> GPT -> cross_entropy -> KVCache -> check_sampling, next_token_probs (top_k_filter,
nucleus_filter), sample_next -> Step, generate_steps, generate (token by token).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V,   Q = X W_Q, K = X W_K, V = X W_V, d_k = hs

Under the causal mask the score of every future key is set to -inf *before* the softmax, so its
weight is exactly 0 and position t depends only on tokens <= t. That is what makes next-token
training honest and what lets generation (and the KV cache) run one token at a time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    """The model's shape. tinygpt/config.py builds it from the `model:` section of a YAML config."""
    block_size: int = 128  # context length: the most tokens the model sees at once (positions 0 .. block_size-1)
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block, each head_size wide
    n_embd: int = 128  # width C of the residual stream: x (B, T, C), which each block reads and adds its output to
    dropout: float = 0.0  # dropout probability on the embeddings, attention weights and residual branches
    bias: bool = False  # bias in Linear layers and LayerNorms (never in the LM head: it is the tied embedding)
    # causal: mask future keys; false = bidirectional (an experiment: it trains seeing the future, so it
    # generates garbage; sample.py refuses it without --force, and generation runs without the KV cache)
    causal: bool = True
    vocab_size: int = 0  # number of token ids: always the tokenizer's (set when the data is loaded)

    @property
    def head_size(self) -> int:
        """hs, one head's width: the n_embd columns split evenly among the n_head heads."""
        return self.n_embd // self.n_head

# ---- the attention math. `attention` is the formula: the notebook and the tests call it, and the model
# runs it whenever it shows its weights. Training and generation run the same maths in faster kernels
# (fast_attention), tested equal to it ----


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dim after setting scores where `mask` is False to -inf: scores (..., Tq, Tk),
    mask (Tq, Tk) bool, True = may attend -> weights (..., Tq, Tk), rows sum to 1, masked ones exactly 0."""
    # exp(-inf) = 0. Each row must allow a key (a row of -inf alone gives NaN): the causal mask always
    # allows the query's own position
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def causal_mask(T_q: int, T_k: int, device: torch.device | None = None) -> torch.Tensor:
    """(Tq, Tk) bool, True = may attend. The Tq queries are the last Tq of the Tk positions, so
    query i sits at position Tk - Tq + i and may attend keys 0 .. Tk - Tq + i."""
    query_pos = torch.arange(T_k - T_q, T_k, device=device)  # (Tq,)
    key_pos = torch.arange(T_k, device=device)  # (Tk,)
    return key_pos[None, :] <= query_pos[:, None]  # (Tq, Tk): a key at or before the query's own position


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference path, exactly the formula (steps 3-4 of CausalSelfAttention.forward): q (B, nh, Tq, hs),
    k and v (B, nh, Tk, hs), mask (Tq, Tk) True = may attend or None -> y (B, nh, Tq, hs), att (B, nh, Tq, Tk)
    the weights before dropout. dropout_p: 0.0 outside training (F.dropout drops whenever it is above 0)."""
    hs = q.size(-1)
    # q·k sums hs products, so its variance grows like hs; dividing by sqrt(hs) brings it back to about 1
    # (for unit-variance q and k), so a wide head's softmax does not saturate: Vaswani et al. 2017, §3.2.1, note 4
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # 3) scores (B, nh, Tq, Tk)
    att = masked_softmax(scores, mask)  # 3) mask, softmax: (B, nh, Tq, Tk)
    y = F.dropout(att, dropout_p) @ v  # 4) weight the values: (B, nh, Tq, hs)
    return y, att


# ---- the same maths in faster kernels (what training and generation run): skip on a first reading ----


def matmul_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                     dropout_p: float = 0.0) -> torch.Tensor:
    """The same formula as `attention` in two batched matmuls, the scale and the mask fused into the first:
    q (B, nh, Tq, hs), k and v (B, nh, Tk, hs), mask (Tq, Tk) True = may attend, or None -> y (B, nh, Tq, hs)."""
    # the CPU's bfloat16 fast path: there PyTorch's fused SDPA kernel is slower than this, while in float32 and
    # float16 SDPA is faster (docs/results.md, bench.py --attention; on GPUs SDPA's fused kernels run)
    B, nh, Tq, hs = q.shape
    Tk = k.size(2)
    # adding -inf before the softmax is masked_softmax's masked_fill, here fused into the first matmul (baddbmm)
    additive_mask = torch.zeros((Tq, Tk), dtype=q.dtype, device=q.device)  # (Tq, Tk): 0 = may attend
    if mask is not None:
        additive_mask.masked_fill_(~mask, float("-inf"))
    scores = torch.baddbmm(additive_mask.expand(B * nh, Tq, Tk), q.reshape(B * nh, Tq, hs),
                           k.reshape(B * nh, Tk, hs).transpose(1, 2), alpha=1.0 / math.sqrt(hs))  # (B*nh, Tq, Tk)
    att = F.dropout(torch.softmax(scores, dim=-1), dropout_p)  # (B*nh, Tq, Tk)
    return (att @ v.reshape(B * nh, Tk, hs)).view(B, nh, Tq, hs)  # (B*nh, Tq, hs) -> (B, nh, Tq, hs)


def fast_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   dropout_p: float = 0.0) -> torch.Tensor:
    """`attention` under causal_mask or none, in the fastest kernel, no weights (tested equal): q (B, nh, Tq, hs), k
    and v (B, nh, Tk, hs), the Tq queries the last of the Tk -> y (B, nh, Tq, hs). Without a cache SDPA builds the
    triangle (is_causal); one new query may see every key (no mask); queries after a cache get causal_mask(Tq, Tk)."""
    Tq, Tk = q.size(2), k.size(2)
    if Tq > 1 and q.device.type == "cpu" and q.dtype == torch.bfloat16:  # CPU + bfloat16: see matmul_attention
        return matmul_attention(q, k, v, causal_mask(Tq, Tk, q.device) if causal else None, dropout_p)
    # the next two branches assume causal_mask is the plain triangle (for one query its last row, which masks
    # nothing): after editing causal_mask, send every case through attn_mask=causal_mask(Tq, Tk, q.device)
    if not causal or Tq == 1:  # no mask, or one new query, which may attend every cached key
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)  # (B, nh, Tq, hs)
    if Tq == Tk:  # no cache: the plain lower triangle
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)  # (B, nh, Tq, hs)
    # queries after a cache: SDPA's is_causal would align the triangle top-left (query i sees keys 0..i)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(Tq, Tk, q.device),
                                          dropout_p=dropout_p)  # (B, nh, Tq, hs)


# ---- the transformer ----


class HeadTrace(NamedTuple):
    """What one layer's heads did, returned by GPT.forward_with_attention."""
    weights: torch.Tensor  # (B, nh, T, Tk) weights per head (query x key; Tk = T without a cache); rows sum to 1
    outputs: torch.Tensor  # (B, nh, T, hs) each head's output, before the heads are merged


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention: nh heads with their own W_Q, W_K, W_V slices, run in parallel."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        C = cfg.n_embd
        self.n_head, self.head_size = cfg.n_head, cfg.head_size
        self.causal = cfg.causal
        self.attn_dropout_p = cfg.dropout  # on the attention weights, while training
        # W_Q, W_K, W_V for all heads at once: head h owns output columns h*hs .. (h+1)*hs - 1
        self.q_proj = nn.Linear(C, C, bias=cfg.bias)
        self.k_proj = nn.Linear(C, C, bias=cfg.bias)
        self.v_proj = nn.Linear(C, C, bias=cfg.bias)
        self.out_proj = nn.Linear(C, C, bias=cfg.bias)  # mixes the concatenated heads
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, kv_cache: KVCache | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, HeadTrace | None]:
        """x (B, T, C) -> (y (B, T, C), HeadTrace or None). With a kv_cache, x holds only the new
        positions and attends over the cached ones too."""
        B, T, C = x.shape
        nh, hs = self.n_head, self.head_size
        # 1) project: every position makes a query, a key and a value
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C) each
        # 2) split heads: the C columns become nh heads of hs; with a cache, the past positions' keys and values
        #    come first (KVCache, below); then heads first, so that every head's matmuls run as one batch
        q, k, v = q.view(B, T, nh, hs), k.view(B, T, nh, hs), v.view(B, T, nh, hs)  # (B, T, nh, hs) each
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (B, Tk, nh, hs): the cached ones, then ours
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T, hs), k v (B, nh, Tk, hs)
        Tk = k.size(2)
        # 3) scores, mask, softmax  4) weight the values: `attention`, the formula, or `fast_attention`, the same
        #    maths in fused kernels
        dropout_p = self.attn_dropout_p if self.training else 0.0
        if need_weights:  # the reference path, exactly the formula
            mask = causal_mask(T, Tk, x.device) if self.causal else None  # (T, Tk): our T are the last of the Tk
            y, att = attention(q, k, v, mask, dropout_p)  # (B, nh, T, hs), (B, nh, T, Tk)
            trace = HeadTrace(att, y)
        else:  # the fast path: the same maths under the same mask, no weights
            y, trace = fast_attention(q, k, v, self.causal, dropout_p), None  # (B, nh, T, hs)
        # 5) merge the heads (concatenate them), project
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): view needs the memory in that order
        return self.resid_dropout(self.out_proj(y)), trace  # (B, T, C)


class MLP(nn.Module):
    """Position-wise feed-forward: C -> 4C -> GELU -> C."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.out_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) -> (B, T, C)"""
        hidden = F.gelu(self.fc(x))  # (B, T, 4C): each position on its own, 4x wider
        return self.dropout(self.out_proj(hidden))  # (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, kv_cache: KVCache | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, HeadTrace | None]:
        """x (B, T, C) -> (B, T, C) and the attention trace when asked."""
        attn_out, trace = self.attn(self.ln_1(x), kv_cache, need_weights)  # (B, T, C)
        x = x + attn_out  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))  # (B, T, C)
        return x, trace


class GPT(nn.Module):
    """Token + position embeddings, n_layer blocks, final LayerNorm, LM head tied to the embedding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        assert cfg.vocab_size > 0, f"vocab_size={cfg.vocab_size}: set it from the tokenizer"
        assert cfg.n_embd % cfg.n_head == 0, f"n_embd={cfg.n_embd} % n_head={cfg.n_head} != 0"
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        # weight tying (Press & Wolf 2017): the same matrix reads tokens in and scores them out
        self.lm_head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # each residual branch adds to x; scaling their last layer by 1/sqrt(2*n_layer) keeps the
        # residual stream's variance from growing with depth (GPT-2 paper, §2.3): 2 branches a block
        for block in self.blocks:
            for last in (block.attn.out_proj, block.mlp.out_proj):
                nn.init.normal_(last.weight, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2's initialisation: every Linear and Embedding weight N(0, 0.02), biases 0; LayerNorms keep their
        weight 1, bias 0 (the tied lm_head is the token embedding: drawn once more, harmlessly)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _forward(self, idx: torch.Tensor, kv_caches: list[KVCache] | None,
                 need_weights: bool) -> tuple[torch.Tensor, list[HeadTrace | None]]:
        """The forward pass: idx (B, T) -> logits (B, T, V) and one HeadTrace (or None) per layer."""
        T = idx.size(1)  # idx (B, T)
        if kv_caches and not self.config.causal:  # there, a later token changes earlier keys (from the second layer on)
            raise ValueError("a KV cache is exact only under the causal mask, and this model has causal=False: "
                             "call without kv_caches")
        start = kv_caches[0].length if kv_caches else 0  # absolute position of idx[:, 0]
        if start + T > self.config.block_size:
            raise ValueError(f"sequence of {start + T} tokens exceeds block_size={self.config.block_size}: pass at "
                             f"most block_size tokens (generate_steps crops the context)")
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))  # (B, T, C)
        traces = []
        for i, block in enumerate(self.blocks):
            x, trace = block(x, kv_caches[i] if kv_caches else None, need_weights)  # (B, T, C)
            traces.append(trace)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        return logits, traces

    def forward(self, idx: torch.Tensor, kv_caches: list[KVCache] | None = None) -> torch.Tensor:
        """idx (B, T) token ids -> logits (B, T, V): position t scores the token at t+1.
        With kv_caches (one per layer), idx holds only the new tokens."""
        return self._forward(idx, kv_caches, need_weights=False)[0]

    def forward_with_attention(self, idx: torch.Tensor,
                               kv_caches: list[KVCache] | None = None) -> tuple[torch.Tensor, list[HeadTrace]]:
        """Like forward, through the reference path (`attention`), also returning each layer's HeadTrace:
        weights (B, nh, T, Tk) and per-head outputs (B, nh, T, hs); Tk = T without kv_caches."""
        return self._forward(idx, kv_caches, need_weights=True)

    def new_kv_caches(self, batch_size: int) -> list[KVCache]:
        """Empty per-layer caches for generating `batch_size` sequences."""
        cfg = self.config
        weight = self.tok_emb.weight  # (the caches live where the model does, in its dtype)
        return [KVCache(batch_size, cfg.n_head, cfg.block_size, cfg.head_size, weight.device, weight.dtype)
                for _ in range(cfg.n_layer)]

    # ---- sizes (the memory check before training, MFU): not needed to follow the forward pass ----

    def num_params(self) -> int:
        """Number of parameters (the tied embedding/LM-head matrix counted once)."""
        return sum(param.numel() for param in self.parameters())

    @staticmethod
    def count_params(cfg: ModelConfig) -> int:
        """num_params() of GPT(cfg), computed from the config without building it (so a size check can run
        before any allocation)."""
        # embeddings V*C + block_size*C; per block 12*C*C + 2*C (4 attention and 2 MLP matrices, 2 LayerNorms);
        # a final LayerNorm; biases add 11*C per block and C at the end
        C, L = cfg.n_embd, cfg.n_layer
        per_block = 12 * C * C + 2 * C + (11 * C if cfg.bias else 0)
        return cfg.vocab_size * C + cfg.block_size * C + L * per_block + C + (C if cfg.bias else 0)

    def flops_per_token(self) -> int:
        """Training FLOPs per token (forward + backward), PaLM appendix B / nanoGPT's estimate."""
        # each weight does a multiply-add forward and two backward: 6 per parameter (position embeddings
        # excluded: a lookup; the token embedding counts, being the LM head's matmul too), plus attention's
        # QK^T and att@V over the whole context, 12 * L * T * C (the mask's skipped half counted, as PaLM and
        # nanoGPT count it)
        cfg = self.config
        n_weights = self.num_params() - self.pos_emb.weight.numel()
        return 6 * n_weights + 12 * cfg.n_layer * cfg.block_size * cfg.n_embd


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss: logits (B, T, V), targets (B, T) the next tokens (idx shifted by one)
    -> scalar. In float32 even when the model runs in bfloat16: a softmax over V needs the precision."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))  # (B*T, V), (B*T,)


# ---- generation, token by token ----


class KVCache:
    """One layer's keys and values for the positions seen so far. Correct only under the causal mask: an earlier
    position never attends to a later one, so its key and value never change when tokens are appended and can be
    computed once and reused."""

    def __init__(self, B: int, nh: int, max_T: int, hs: int, device: torch.device, dtype: torch.dtype):
        # laid out (B, max_T, nh, hs) as the projections make them, so append is a plain slice copy
        # (and for one sequence the filled part stays contiguous: one compiled graph for every length)
        self.k = torch.empty(B, max_T, nh, hs, device=device, dtype=dtype)  # (B, max_T, nh, hs), filled as we go
        self.v = torch.empty(B, max_T, nh, hs, device=device, dtype=dtype)  # (B, max_T, nh, hs)
        self.length = 0  # positions filled

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (B, T, nh, hs) after the cached ones; return all of them (B, Tk, nh, hs)."""
        T = k.size(1)
        assert self.length + T <= self.k.size(1), f"cache overflow: {self.length}+{T} > {self.k.size(1)}"
        self.k[:, self.length:self.length + T] = k
        self.v[:, self.length:self.length + T] = v
        self.length += T
        return self.k[:, :self.length], self.v[:, :self.length]


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Sampling settings with no meaning raise ValueError, greedy's too (temperature 0 ignores top_k and
    top_p, but a top_k of -5 is a mistake whatever the temperature)."""
    # a negative temperature would turn the distribution upside down without a word
    if not (0 <= temperature < math.inf):  # (a NaN fails every comparison)
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), not {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 (None: every token), not {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (None: no nucleus), not {top_p}")


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> torch.Tensor:
    """logits (B, V) -> the probabilities the next token is drawn from (B, V): softmax of logits / temperature,
    keeping only the top_k tokens and the top_p nucleus (ties kept: top_k_filter, nucleus_filter)."""
    check_sampling(temperature, top_k, top_p)
    logits = logits.float()
    if temperature == 0:  # greedy: sample_next takes the argmax, whatever top_k and top_p say; unfiltered
        return torch.softmax(logits, dim=-1)  # (B, V)
    # 1) temperature; the largest logit becomes 0 before dividing, so a tiny temperature cannot overflow to inf
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature  # (B, V), all <= 0
    # 2) top-k, on the logits
    if top_k is not None and top_k < logits.size(-1):
        logits = top_k_filter(logits, top_k)
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    # 3) the nucleus, on the probabilities
    if top_p is not None and top_p < 1.0:
        probs = nucleus_filter(probs, top_p)
    return probs


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """logits (B, V) with all but the k largest of each row set to -inf (those tied with the k-th kept)."""
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]  # (B, 1) the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))  # (B, V)


def nucleus_filter(probs: torch.Tensor, p: float) -> torch.Tensor:
    """probs (B, V) -> the smallest set of most likely tokens whose mass reaches p, renormalised (B, V);
    the most likely token always stays, and tokens tied with the least likely kept one stay too."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)  # (B, V)
    past_p = (sorted_p.cumsum(dim=-1) - sorted_p) >= p  # (B, V) bool: the mass before this token already reaches p
    past_p[:, 0] = False  # (a tiny p is 0 in float32: the first token must stay)
    least = sorted_p.masked_fill(past_p, float("inf")).amin(dim=-1, keepdim=True)  # (B, 1) least likely kept
    below_least = sorted_p < least  # (B, V) bool: dropped; ties with `least` stay (the sort's order must not choose)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_p.masked_fill(below_least, 0.0))  # (B, V), unsorted
    return kept / kept.sum(dim=-1, keepdim=True)


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """logits (B, V) -> next token ids (B,). temperature 0 = greedy (argmax). Logits that are not
    finite (weights that overflow float32: a diverged or damaged model) raise FloatingPointError:
    argmax would pick garbage among NaNs, and multinomial fail."""
    check_sampling(temperature, top_k, top_p)
    if not torch.isfinite(logits.amax(dim=-1)).all():  # (B,): a NaN or +inf logit is the max
        raise FloatingPointError("the model's logits are not finite (NaN or inf): its weights overflow float32 "
                                 "(a diverged or damaged model)")
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    probs = next_token_probs(logits, temperature, top_k, top_p)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


class Step(NamedTuple):
    """One step of generation, as generate_steps yields it."""
    token: torch.Tensor  # (B,) the chosen next tokens
    logits: torch.Tensor  # (B, V) the window's last position's logits, before temperature, top-k and top-p
    context: int  # how many tokens the model saw (the window's length)


@torch.no_grad()
def generate_steps(model: GPT, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                   top_k: int | None = None, top_p: float | None = None, use_cache: bool = True,
                   generator: torch.Generator | None = None, decode_step: Callable | None = None) -> Iterator[Step]:
    """Continue idx (B, T) by max_new_tokens tokens, one at a time, yielding each Step: feed the context,
    read the last position's logits, sample, append. Call model.eval() first (checkpoint loading does):
    dropout would change the tokens. `decode_step`: the one-token step, compiled (runtime.compile_decoding)."""
    if idx.size(1) == 0 or idx.min() < 0 or idx.max() >= model.config.vocab_size:
        got = f"ids {idx.min().item()}..{idx.max().item()}" if idx.numel() else "no token"
        raise ValueError(f"idx must hold at least one token, each an id in 0..{model.config.vocab_size - 1}: got {got}")
    block_size = model.config.block_size
    # a model trained without the causal mask never uses the cache: its earlier positions attend to later
    # ones, so from the second layer on their keys and values change with every new token
    use_cache = use_cache and model.config.causal
    decode_step = model if decode_step is None else decode_step  # the one-token step with the cache
    # positions are absolute and below block_size, so the context is a window (a longer prompt is cut to
    # its last block_size tokens)
    window = idx[:, -block_size:]  # (B, W): the tokens the model sees, W <= block_size
    caches = None
    for _ in range(max_new_tokens):
        if window.size(1) > block_size:  # the last token did not fit: slide the window, drop the cache
            # by half a block, not one token, so the cache is rebuilt every ~block_size/2 tokens, not every step
            # (docs/design.md gives the count); the uncached path slides the same way, so both give the same logits
            # (up to rounding: the same sums in another order)
            window, caches = window[:, -max(1, block_size // 2):], None  # (B, W), W = max(1, block_size // 2)
        if not use_cache:
            logits = model(window)  # (B, W, V): the whole window every step
        elif caches is None:
            caches = model.new_kv_caches(window.size(0))
            logits = model(window, caches)  # (B, W, V); prefill: the window's keys and values
        else:
            logits = decode_step(window[:, -1:], caches)  # (B, 1, V): only the newest token is new
        next_id = sample_next(logits[:, -1, :], temperature, top_k, top_p, generator)  # (B,)
        yield Step(next_id, logits[:, -1, :], window.size(1))
        window = torch.cat([window, next_id[:, None]], dim=1)  # (B, W+1)


def generate(model: GPT, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None, decode_step: Callable | None = None) -> Iterator[torch.Tensor]:
    """Yield the max_new_tokens next tokens (B,) continuing idx (B, T), one at a time."""
    for step in generate_steps(model, idx, max_new_tokens, temperature, top_k, top_p, use_cache, generator,
                               decode_step):
        yield step.token

"""Head ablation: remove chosen attention heads' outputs and see what breaks.

Attention on the right token is a correlation; knocking a head out is the causal test. Head h of a
layer is exactly columns h*hs .. (h+1)*hs - 1 of the merged heads that enter `block.attn.out_proj`
(model.py, CausalSelfAttention step 5: the heads are concatenated, then projected). So a forward
pre-hook on out_proj that overwrites those columns removes the head, at every position:

- zero ablation writes 0 (the head adds nothing to the residual stream; out_proj's bias, present
  only when model.bias is true, is not a head's and stays);
- mean ablation writes the head's mean output (`head_means`), so the layer still gets a typical
  value from the head, just none that depends on the input.

`ablated(...)` registers the hooks and removes them on exit. With no hook registered the model runs
exactly the code in model.py: ablation costs nothing when unused.
"""
from __future__ import annotations

import contextlib
import re
from typing import Iterable, Iterator

import torch

from model import GPT
from tinygpt.errors import UserError

Head = tuple[int, int]  # (layer, head)
HEAD_SPEC = re.compile(r"([0-9]{1,6})\.([0-9]{1,6})")  # (no model has a million layers; int() of 5,000 digits fails)


def parse_heads(spec: str, n_layer: int, n_head: int, flag: str = "--ablate") -> list[Head]:
    """'3.2,1.0' -> [(3, 2), (1, 0)] (layer.head, counted from 0); a malformed, repeated or
    out-of-range head is a UserError naming it."""
    heads: list[Head] = []
    for part in spec.split(","):
        match = HEAD_SPEC.fullmatch(part.strip())
        if not match:
            raise UserError(f"{flag} {spec!r}: {part.strip()!r} is not LAYER.HEAD (e.g. {flag} 3.2,1.0)")
        layer, head = int(match.group(1)), int(match.group(2))
        if layer >= n_layer or head >= n_head:
            raise UserError(f"{flag} {spec!r}: no head {layer}.{head} (the model has {numbered('layer', n_layer)} "
                            f"and {numbered('head', n_head)})")
        if (layer, head) in heads:
            raise UserError(f"{flag} {spec!r}: head {layer}.{head} is named twice")
        heads.append((layer, head))
    return heads


def numbered(noun: str, n: int) -> str:
    """The numbers of n things counted from 0: ('layer', 1) -> 'layer 0' (not 'layers 0-0'),
    ('layer', 4) -> 'layers 0-3'."""
    return f"{noun} 0" if n == 1 else f"{noun}s 0-{n - 1}"


def looks_like_heads(spec: str) -> bool:
    """Is spec a list of LAYER.HEAD, whatever the model (parse_heads checks the ranges)?"""
    return all(HEAD_SPEC.fullmatch(part.strip()) for part in spec.split(","))


def head_name(head: Head) -> str:
    return f"{head[0]}.{head[1]}"


@contextlib.contextmanager
def ablated(model: GPT, heads: Iterable[Head], means: torch.Tensor | None = None) -> Iterator[GPT]:
    """Inside the `with`, the given heads' outputs are replaced at every position by 0 (means None)
    or by means[layer, head] (means (n_layer, nh, hs), from head_means). The hooks are removed on
    exit, also on an error."""
    hs = model.config.head_size
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def replace(layer: int, layer_heads: list[int]):
        def hook(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            y = args[0].clone()  # (B, T, C): the heads' outputs side by side, head h in columns h*hs..
            for h in layer_heads:
                y[..., h * hs:(h + 1) * hs] = 0.0 if means is None else means[layer, h].to(y)
            return (y, *args[1:])
        return hook

    handles = [model.blocks[layer].attn.out_proj.register_forward_pre_hook(replace(layer, layer_heads))
               for layer, layer_heads in by_layer.items()]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def head_means(model: GPT, windows: Iterable[torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Each head's mean output over every position of the token windows (each (B, T)) ->
    (means (n_layer, nh, hs), number of positions averaged)."""
    total, count = None, 0
    for idx in windows:
        _, traces = model.forward_with_attention(idx)  # per layer outputs (B, nh, T, hs)
        sums = torch.stack([t.outputs.float().sum(dim=(0, 2)) for t in traces])  # (n_layer, nh, hs)
        total = sums if total is None else total + sums
        count += idx.numel()
    if total is None:
        raise ValueError("head_means needs at least one window")
    return total / count, count

"""The pieces of training: the learning-rate schedule, the optimizer, one optimizer step, and the
loss estimate. train.py's loop runs them; bench.py times the same optimizer and step, so that a
benchmark times exactly the step that trains."""
from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Callable

import numpy as np
import torch

from data.prepare import get_batch
from model import GPT, cross_entropy
from tinygpt.config import TrainConfig
from tinygpt.runtime import Distributed


def lr_at(step: int, t: TrainConfig) -> float:
    """Linear warmup to t.lr, then cosine decay to t.min_lr at t.max_iters."""
    if step < t.warmup_iters:
        return t.lr * (step + 1) / (t.warmup_iters + 1)
    progress = (step - t.warmup_iters) / max(1, t.max_iters - t.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))  # 1 -> 0
    return t.min_lr + coeff * (t.lr - t.min_lr)


def warmup_note(t: TrainConfig) -> str | None:
    """A note where the warmup does not end before the last step: the learning rate never reaches
    t.lr (a warmup_iters of 10**18 trained at about 0 and reported done, the loss flat)."""
    if t.max_iters == 0 or t.warmup_iters < t.max_iters:
        return None
    peak, digits = lr_at(t.max_iters - 1, t), 3
    while digits < 17 and float(f"{peak:.{digits}g}") >= t.lr:  # (0.0009995 is no "0.001, never 0.001")
        digits += 1
    return (f"note: train.warmup_iters={t.warmup_iters} >= train.max_iters={t.max_iters}: the learning rate rises to "
            f"{peak:.{digits}g} at most, never to train.lr={t.lr:g}; lower train.warmup_iters")


def make_optimizer(model: GPT, t: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on 2-D weights (matmuls, embeddings) only, not on biases or norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2]}, {"params": [p for p in params if p.dim() < 2]}]
    fused = device.type in ("cuda", "cpu")  # one kernel for all parameters instead of a loop
    optimizer = torch.optim.AdamW(groups, lr=t.lr, weight_decay=0.0, fused=fused)
    apply_settings(optimizer, t)  # betas, and the first group's weight decay
    return optimizer


def apply_settings(optimizer: torch.optim.AdamW, t: TrainConfig) -> None:
    """The config's betas and weight decay into make_optimizer's groups: when it is made, and after a resume's
    load_state_dict brought back the saved ones (a resume with train.weight_decay=50 trained on with 0.1, while
    its note and config.yaml said 50). The lr is set at every step (train_step)."""
    decay, _ = optimizer.param_groups  # make_optimizer's: the 2-D weights, then biases and norms (no decay)
    decay["weight_decay"] = t.weight_decay
    for group in optimizer.param_groups:
        group["betas"] = (t.beta1, t.beta2)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
               autocast, next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]], grad_accum: int,
               grad_clip: float, lr: float, stop: Callable[[], bool] | None = None) -> torch.Tensor | None:
    """One optimizer step over grad_accum micro-batches from next_batch(); returns the mean loss
    as a device tensor (reading it would sync with the device, so the caller decides when).
    stop() is asked before each micro-batch after the first: if it says stop, the gradients so far
    are dropped, nothing is stepped, and None is returned (a Ctrl-C need not wait for a long step;
    the caller puts back the random states the step drew from, so that a resume redoes it exactly)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    total = torch.zeros((), device=next(model.parameters()).device)
    for micro in range(grad_accum):
        if micro > 0 and stop is not None and stop():
            optimizer.zero_grad(set_to_none=True)
            return None
        idx, targets = next_batch()  # (B, T), (B, T)
        # under DDP, average gradients across processes only on the last micro-step
        no_sync = getattr(model, "no_sync", None)
        with no_sync() if no_sync is not None and micro < grad_accum - 1 else nullcontext():
            with autocast:
                loss = cross_entropy(model(idx), targets)
            # the gradients of grad_accum micro-batches add up; dividing each loss by grad_accum
            # makes their sum the gradient of the mean loss, as if it were one big batch
            scaler.scale(loss / grad_accum).backward()
        total += loss.detach() / grad_accum
    if grad_clip > 0:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return total


CHUNK = 1024  # estimate_loss's losses summed at a time


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict[str, np.ndarray], batch_size: int, block_size: int,
                  eval_iters: int, seed: int, device: torch.device, autocast, dist: Distributed,
                  stop: Callable[[], bool] | None = None) -> dict[str, float] | None:
    """Mean loss over eval_iters batches per split, on the same batches every time (own generator);
    under DDP each process takes its slice of each batch and the means are averaged. stop() is asked
    before each batch: if it says stop, None (nothing drawn from a random stream a resume needs).
    The model is left in the mode it came in (dropout on again after a training run's eval)."""
    was_training = model.training
    model.eval()
    out = {}
    for split, data in splits.items():
        gen = torch.Generator().manual_seed(seed + 1)
        # the losses in chunks of at most CHUNK, each summed into a float: a buffer of all of them was 4 GB at
        # eval_iters=10**9, and one float32 running sum drifted (4.1252 for 4.1271 over 300,000 batches)
        losses, total = torch.zeros(min(eval_iters, CHUNK), device=device), 0.0
        for i in range(eval_iters):
            if stop is not None and stop():
                model.train(was_training)
                return None
            idx, targets = get_batch(data, batch_size, block_size, gen, device, dist.rank, dist.world_size)
            with autocast:
                losses[i % CHUNK] = cross_entropy(model(idx), targets)
            if i % CHUNK == CHUNK - 1 or i == eval_iters - 1:
                total += losses[:i % CHUNK + 1].sum().item()
        out[split] = dist.mean(torch.tensor(total / eval_iters, device=device)).item()
    model.train(was_training)
    return out

"""Train a GPT on next-token prediction.

    python train.py CONFIG.yaml [--set KEY=VALUE ...] [--resume]

Reads top to bottom: config -> run directory -> data -> model -> optimizer -> loop. Every
`train.eval_interval` steps it estimates train/val loss, writes ckpt.pt (latest, with everything
needed to resume exactly) and best.pt (lowest val loss); metrics.csv gets a row per log and eval.
Ctrl-C or SIGTERM saves ckpt.pt and stops; `--resume` continues from it.
"""
from __future__ import annotations

import csv
import math
import os
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from checkpoint import (atomic_write_text, capture_rng_state, load_checkpoint, model_from_checkpoint,
                        resolve_checkpoint, restore_rng_state, save_checkpoint)
from config import Config, TrainConfig, config_to_dict, config_to_yaml, load_config, resolve_device, resolve_dtype
from data.prepare import get_batch, load_prepared, prepare, prepared_dir
from errors import ArgParser, UserError, run_cli
from model import GPT, cross_entropy
from perf import peak_flops
from plots import plot_run

METRICS = ["step", "train_loss", "val_loss", "lr", "tokens_per_s", "mfu", "elapsed_s"]
RUN_FILES = ("ckpt.pt", "best.pt", "config.yaml", "metrics.csv")


# ---- helpers ----


def lr_at(step: int, t: TrainConfig) -> float:
    """Linear warmup to t.lr, then cosine decay to t.min_lr at t.max_iters."""
    if step < t.warmup_iters:
        return t.lr * (step + 1) / (t.warmup_iters + 1)
    progress = (step - t.warmup_iters) / max(1, t.max_iters - t.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))  # 1 -> 0
    return t.min_lr + coeff * (t.lr - t.min_lr)


def make_optimizer(model: GPT, t: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on 2-D weights (matmuls, embeddings) only, not on biases or norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": t.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    fused = device.type in ("cuda", "cpu")  # one kernel for all parameters instead of a loop
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), fused=fused)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
               autocast, next_batch, grad_accum: int, grad_clip: float, lr: float) -> torch.Tensor:
    """One optimizer step over grad_accum micro-batches from next_batch(); returns the mean loss
    as a device tensor (reading it would sync with the device, so the caller decides when)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    total = torch.zeros((), device=next(model.parameters()).device)
    for micro in range(grad_accum):
        x, y = next_batch()  # (B, T), (B, T)
        # under DDP, average gradients across processes only on the last micro-step
        no_sync = getattr(model, "no_sync", None)
        with no_sync() if no_sync is not None and micro < grad_accum - 1 else nullcontext():
            with autocast:
                loss = cross_entropy(model(x), y)
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


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, data, cfg: Config, device: torch.device, autocast,
                  dist: "Distributed") -> dict[str, float]:
    """Mean loss over eval_iters batches per split, on the same batches every time (own generator);
    under DDP each process takes its slice of each batch and the means are averaged."""
    model.eval()
    out = {}
    for split in ("train", "val"):
        gen = torch.Generator().manual_seed(cfg.train.seed + 1)
        losses = torch.zeros(cfg.train.eval_iters, device=device)
        for i in range(cfg.train.eval_iters):
            x, y = get_batch(getattr(data, split), cfg.train.batch_size, cfg.model.block_size, gen, device,
                             dist.rank, dist.world_size)
            with autocast:
                losses[i] = cross_entropy(model(x), y)
        out[split] = dist.mean(losses.mean()).item()
    model.train()
    return out


class StopFlag:
    """Turns SIGINT/SIGTERM into a flag the loop checks after each step (then saves and exits)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.signum = signum

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)


class Distributed:
    """One process, or one of several launched by torchrun (PyTorch DDP). The single-process run
    goes through the same calls; they do nothing when world_size == 1."""

    def __init__(self, rank: int, world_size: int, device: torch.device):
        self.rank, self.world_size, self.device = rank, world_size, device

    @classmethod
    def from_env(cls, device: torch.device) -> "Distributed":
        if "RANK" not in os.environ:  # not launched by torchrun
            return cls(0, 1, device)
        import torch.distributed as tdist
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        tdist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        return cls(tdist.get_rank(), tdist.get_world_size(), device)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DDP averages the gradients across processes during backward."""
        if self.world_size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def barrier(self) -> None:
        if self.world_size > 1:
            torch.distributed.barrier()

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of x over processes (for logging the loss)."""
        if self.world_size > 1:
            x = x.clone()
            torch.distributed.all_reduce(x)
            x /= self.world_size
        return x

    def any(self, flag: bool) -> bool:
        """True if flag is true on any process (so that all stop together)."""
        if self.world_size == 1:
            return flag
        x = torch.tensor([float(flag)], device=self.device)
        torch.distributed.all_reduce(x)
        return bool(x.item())

    def close(self) -> None:
        if self.world_size > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def check_run_dir(out_dir: Path, resume: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"train.out_dir={str(out_dir)!r} is a file, not a directory")
    if resume:
        if not (out_dir / "ckpt.pt").is_file():
            raise UserError(f"--resume: no checkpoint at {out_dir / 'ckpt.pt'}; drop --resume to start a new run")
    elif out_dir.is_dir() and any((out_dir / f).exists() for f in RUN_FILES):
        raise UserError(f"train.out_dir={str(out_dir)!r} already holds a run; continue it with --resume, "
                        f"or choose another: --set train.out_dir=out/new_run")


def check_same_run(cfg: Config, saved: dict, path: Path) -> None:
    """A resumed run may change train settings, not the model or the data."""
    current = config_to_dict(cfg)
    for section in ("model", "data"):
        for key, value in current[section].items():
            old = saved[section].get(key)
            if key not in ("vocab_size", "prepared_dir") and old != value:
                raise UserError(f"--resume: {section}.{key}={value!r} differs from the checkpoint's {old!r} "
                                f"({path}); a resumed run keeps its model and data settings")


def write_metrics(path: Path, rows: list[dict]) -> None:
    lines = [",".join(METRICS)] + [",".join(str(r.get(k, "")) for k in METRICS) for r in rows]
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_metrics(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---- main ----


def main(argv: Sequence[str] | None = None) -> dict:
    p = ArgParser(prog="train.py", description="Train a tinygpt model from a YAML config.")
    p.add_argument("config", help="YAML config, e.g. configs/stories.yaml")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="override config keys, e.g. --set model.n_head=8 train.lr=3e-4")
    p.add_argument("--resume", action="store_true", help="continue the run in train.out_dir from ckpt.pt")
    p.add_argument("--stop-at", type=int, default=None, metavar="STEP",
                   help="save a checkpoint and stop once STEP steps are done (resume later)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)

    # ---- config and run directory (everything checked before any work) ----
    cfg = load_config(args.config, args.set)
    t = cfg.train
    out_dir = Path(t.out_dir)
    check_run_dir(out_dir, args.resume)
    ckpt = init = None
    if t.init_from:  # fine-tuning: the model (all but dropout) is the starting checkpoint's
        init_path = resolve_checkpoint(t.init_from)
        init = load_checkpoint(init_path)
        init_model, init_cfg = model_from_checkpoint(init, init_path)
        cfg.model = replace(init_cfg.model, dropout=cfg.model.dropout)
    if args.resume:
        ckpt = load_checkpoint(out_dir / "ckpt.pt")
        if "optimizer" not in ckpt:
            raise UserError(f"{out_dir / 'ckpt.pt'} holds weights only (e.g. from export.py --from-hf): it cannot "
                            f"be resumed; start a new run from it with --set train.init_from={out_dir}")
        check_same_run(cfg, ckpt["config"], out_dir / "ckpt.pt")
    device = resolve_device(t.device)
    dtype = resolve_dtype(t.dtype, device)  # "auto" -> bfloat16 where the hardware has it, else float32
    if dtype == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError("train.dtype=bfloat16 is not supported by this GPU; use float16 or float32")

    # ---- processes: one, or several under torchrun (DDP) ----
    dist = Distributed.from_env(device)
    device, master = dist.device, dist.rank == 0
    torch.manual_seed(t.seed)  # the same initial weights on every rank

    # ---- data (rank 0 prepares, the others wait and read) ----
    if master:
        prepare(cfg)
    dist.barrier()
    data = load_prepared(prepared_dir(cfg.data))
    for split in ("train", "val"):
        n = len(getattr(data, split))
        if n <= cfg.model.block_size:
            raise UserError(f"the {split} split has {n} tokens, not more than model.block_size="
                            f"{cfg.model.block_size} ({args.config}): use a smaller block_size, more text, "
                            f"or another data.val_fraction")
    if init is not None and init["tokenizer"] != data.tokenizer.to_dict():
        raise UserError(f"train.init_from={t.init_from!r} was trained with another tokenizer or vocabulary than "
                        f"this data ({data.tokenizer}); prepare the data with the same one, e.g. "
                        f"data.tokenizer=gpt2 data.compact_vocab=false for GPT-2 weights")
    cfg.model.vocab_size = data.tokenizer.vocab_size

    # ---- model and optimizer ----
    model = GPT(cfg.model)
    if init is not None and ckpt is None:
        model.load_state_dict(init_model.state_dict())
    model = model.to(device)
    optimizer = make_optimizer(model, t, device)
    # float16 gradients can underflow: the scaler multiplies the loss up and the gradients back down
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "float16"))
    autocast = (torch.autocast(device.type, dtype=getattr(torch, dtype))
                if dtype != "float32" else nullcontext())
    batch_gen = torch.Generator().manual_seed(t.seed)  # batch sampling only (the same on every rank)
    step, best_val, elapsed = 0, float("inf"), 0.0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scaler.load_state_dict(ckpt["scaler"])
        batch_gen.set_state(ckpt["batch_rng"])
        restore_rng_state(ckpt["rng"])
        step, best_val, elapsed = ckpt["step"], ckpt["best_val_loss"], ckpt["elapsed_s"]
    train_model = dist.wrap(torch.compile(model) if t.compile else model)
    tokens_per_step = t.batch_size * t.grad_accum * cfg.model.block_size * dist.world_size
    peak, peak_source = peak_flops(dtype, device, n=1024)  # quick; bench.py measures it carefully
    flops_per_step = model.flops_per_token() * tokens_per_step / dist.world_size  # per process
    if master:
        if init is not None:
            print(f"train.init_from: starting from {init_path} (step {init['step']}), with its model config")
        print(f"model: {model.num_params():,} parameters ({cfg.model.n_layer} layers, {cfg.model.n_head} heads, "
              f"{cfg.model.n_embd} wide, block {cfg.model.block_size}, vocab {cfg.model.vocab_size}); "
              f"data: {len(data.train):,} train / {len(data.val):,} val tokens; {dist.world_size} x {device}, "
              f"{dtype}; {tokens_per_step:,} tokens/step; MFU against {peak / 1e9:,.0f} GFLOP/s ({peak_source})")
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_dir / "config.yaml", config_to_yaml(cfg))
    metrics = [r for r in read_metrics(out_dir / "metrics.csv") if int(r["step"]) <= step] if master else []

    def state(with_optimizer: bool = True) -> dict:
        s = {"config": config_to_dict(cfg), "tokenizer": data.tokenizer.to_dict(), "model": model.state_dict(),
             "step": step, "best_val_loss": best_val, "elapsed_s": elapsed}
        if with_optimizer:  # + everything that makes a resumed run continue exactly
            s.update(optimizer=optimizer.state_dict(), scaler=scaler.state_dict(),
                     batch_rng=batch_gen.get_state(), rng=capture_rng_state(),
                     loss_sum=loss_sum.item(), loss_count=loss_count)  # the train loss since the last log
        return s

    def save(name: str, with_optimizer: bool = True) -> None:
        if master:
            save_checkpoint(out_dir / name, state(with_optimizer))

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        return get_batch(data.train, t.batch_size, cfg.model.block_size, batch_gen, device, dist.rank, dist.world_size)

    # ---- the loop ----
    from tqdm import tqdm
    stop = StopFlag()
    bar = tqdm(total=t.max_iters, initial=step, disable=args.quiet or not master, dynamic_ncols=True, file=sys.stderr)
    loss_sum = torch.tensor(ckpt["loss_sum"] if ckpt else 0.0, device=device)  # summed on the device between logs
    loss_count = ckpt["loss_count"] if ckpt else 0
    t_last, step_last, t_start = time.perf_counter(), step, time.perf_counter() - elapsed
    resumed_at = step if ckpt is not None else None
    exit_reason = "done"
    try:
        while True:
            # -- evaluate and checkpoint (not again at the step we resumed from) --
            if (step % t.eval_interval == 0 or step == t.max_iters) and step != resumed_at:
                losses = estimate_loss(model, data, cfg, device, autocast, dist)
                elapsed = time.perf_counter() - t_start
                if not math.isfinite(losses["val"]):
                    raise UserError(f"val loss is {losses['val']} at step {step}: training diverged; lower "
                                    f"train.lr or set train.grad_clip; {out_dir / 'ckpt.pt'} keeps the last good state")
                if master:
                    metrics.append({"step": step, "train_loss": f"{losses['train']:.4f}",
                                    "val_loss": f"{losses['val']:.4f}", "lr": f"{lr_at(step, t):.3e}",
                                    "elapsed_s": f"{elapsed:.1f}"})
                    write_metrics(out_dir / "metrics.csv", metrics)
                    if t.plot == "eval" or (t.plot == "end" and step == t.max_iters):
                        plot_run(out_dir)  # loss.png; returns None (no plot) without matplotlib
                    bar.write(f"step {step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
                if losses["val"] < best_val:
                    best_val = losses["val"]
                    save("best.pt", with_optimizer=False)
                save("ckpt.pt")
            if step >= t.max_iters:
                break
            if dist.any(stop.signum is not None) or (args.stop_at is not None and step >= args.stop_at):
                exit_reason = "interrupted" if stop.signum is not None else "stopped"
                elapsed = time.perf_counter() - t_start
                save("ckpt.pt")
                bar.write(f"{exit_reason} at step {step}: saved {out_dir / 'ckpt.pt'}; continue with --resume")
                break

            # -- one optimizer step over grad_accum micro-batches --
            lr = lr_at(step, t)
            loss_sum += train_step(train_model, optimizer, scaler, autocast, next_batch, t.grad_accum, t.grad_clip, lr)
            loss_count += 1
            step += 1
            bar.update(1)

            # -- log (one host sync per log_interval steps) --
            if step % t.log_interval == 0 or step == t.max_iters:
                train_loss = dist.mean(loss_sum / loss_count).item()
                if not math.isfinite(train_loss):
                    raise UserError(f"training diverged: loss is {train_loss} by step {step}; lower train.lr "
                                    f"or set train.grad_clip; {out_dir / 'ckpt.pt'} keeps the last good state")
                now = time.perf_counter()
                step_time = (now - t_last) / max(step - step_last, 1)
                tok_s, mfu = tokens_per_step / step_time, flops_per_step / step_time / peak
                t_last, step_last = now, step
                loss_sum.zero_()
                loss_count = 0
                metrics.append({"step": step, "train_loss": f"{train_loss:.4f}", "lr": f"{lr:.3e}",
                                "tokens_per_s": f"{tok_s:.0f}", "mfu": f"{mfu:.4f}", "elapsed_s": f"{now - t_start:.1f}"})
                bar.set_postfix(loss=f"{train_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}", mfu=f"{mfu:.0%}")
    finally:
        bar.close()
        stop.restore()
        if master:
            write_metrics(out_dir / "metrics.csv", metrics)
        dist.close()
    if stop.signum is not None:
        sys.exit(128 + stop.signum)
    if master:
        print(f"{exit_reason}: step {step}, best val loss {best_val:.4f}, {time.perf_counter() - t_start:.1f} s; "
              f"sample with: python sample.py {out_dir}")
    return {"step": step, "best_val_loss": best_val, "out_dir": str(out_dir)}


if __name__ == "__main__":
    run_cli(main)

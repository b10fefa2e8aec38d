"""Train a GPT on next-token prediction.

    python train.py CONFIG.yaml [--set KEY=VALUE ...] [--resume] [--stop-at STEP] [--quiet]

`main()`, at the bottom, reads the config and the flags, starts the processes (DDP) and takes the run
directory, then calls `train()`, above it: data -> model and optimizer -> the loop. The file runs in
that order: the setup steps, the loop, then the checks that several processes agree. Every
`train.eval_interval` steps the loop estimates train/val loss and writes ckpt.pt (everything needed
to resume exactly) and best.pt (lowest val loss); metrics.csv gets a row per log and eval. One
optimizer step (`train_step`), the optimizer, the schedule and the loss estimate live in
tinygpt/training.py; bench.py times the same step and optimizer. How a run stops (Ctrl-C,
SIGTERM, a closed terminal) and resumes: docs/design.md, "The run directory"; what it refuses (a
second training on its folder, a model that cannot fit in memory, ...): docs/errors.md.

The loop (`train_loop`), without what makes it robust (signals, DDP, --stop-at, logging, the progress bar):

    while step < max_iters:
        if step % eval_interval == 0:    # evaluate():
            losses = estimate_loss(...)  #   train and val loss, eval_iters batches each
            save best.pt if losses["val"] is the lowest yet, then ckpt.pt
        lr = lr_at(step, cfg.train)      # linear warmup, then cosine decay to min_lr
        loss = train_step(...)           # grad_accum micro-batches (forward, loss / grad_accum, backward),
        step += 1                        # then clip the gradients, AdamW step, zero them
    then a last evaluate() at max_iters
"""
from __future__ import annotations

import argparse
import math
import secrets
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

if __name__ == "__main__":  # before the imports below load torch: a Ctrl-C then is `interrupted`, not a traceback
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

import torch

from data.prepare import (Prepared, get_batch, load_for_training, moot_settings, prepare, prepared_dir, same_dataset,
                          token_keys, vocab_note)
from model import GPT, ModelConfig
from tinygpt.checkpoint import (capture_rng_state, check_init_tokenizer, checkpoint_config, load_checkpoint,
                                load_optimizer, load_run_checkpoint, load_weights, model_from_checkpoint,
                                resolve_checkpoint, restore_rng_state, save_checkpoint, sweep_temp_files)
from tinygpt.config import (CHECKPOINTS, FROM_WEIGHTS, MAX_INT, Config, TrainConfig, config_source, config_to_dict,
                            flat_config, load_config, same_path, set_arg, set_key)
from tinygpt.errors import (ArgParser, UserError, clean_up, count, elide, first_few, path_word, reason, run_cli,
                            script_word, shell_join, short, shown_path, stderr_is_terminal,
                            stopping_on_a_signal, work_is_files)
from tinygpt.plots import can_plot, plot_run
from tinygpt.runs import (TRAIN_FILES, best_pt_ahead, check_run_dir, metrics_text, new_run_from, resumed_metrics,
                          run_lock, write_config, write_metrics)
from tinygpt.runtime import (Distributed, StopFlag, ThreadPolicy, autocast, check_compile_cache, check_training_fits,
                             configure_cuda, device_name, emulated_dtype_warning, exit_as_torchrun_worker,
                             keep_freed_memory, peak_flops, resolve_device, resolve_dtype, tf32_enabled,
                             too_many_threads, torch_threads)
from tinygpt.tensorboard_log import LOG_DIR, PROMPT_TOKENS, TensorBoardLog, mark_a_session_without, require_tensorboard
from tinygpt.training import apply_settings, estimate_loss, lr_at, make_optimizer, train_step, warmup_note


def parse_args(argv: Sequence[str] | None):
    p = ArgParser(prog="train.py", description="Train a tinygpt model from a YAML config.")
    p.add_argument("config", help="YAML config, e.g. configs/stories.yaml")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="override config keys, e.g. --set model.n_head=8 train.lr=3e-4")
    p.add_argument("--resume", action="store_true", help="continue the run in train.out_dir from ckpt.pt")
    p.add_argument("--stop-at", type=int, default=None, metavar="STEP",
                   help="save a checkpoint and stop once STEP steps are done (resume later)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.stop_at is not None and args.stop_at < 0:  # 0 is a step: stop after step 0's checkpoint
        raise UserError(f"--stop-at={short(args.stop_at)} must be >= 0 (the step to save at and stop)")
    return args


# ---- setup: each step checks what it reads before any work is done ----


RESUME_KEYS = ("optimizer", "scaler", "batch_rng", "rng", "loss_sum", "loss_count", "best_val_loss", "elapsed_s")
RESUME_TYPES = {"optimizer": dict, "scaler": dict, "rng": dict, "loss_sum": (int, float), "loss_count": int,
                "best_val_loss": (int, float), "elapsed_s": (int, float)}


def stdout_left() -> bool:
    """Has stdout's reader left (ReaderMayLeave)? What must still be read then goes to stderr."""
    return getattr(sys.stdout, "left", False)


def adopt_model(cfg: Config, theirs: ModelConfig) -> None:
    """A run started from other weights (train.init_from) takes their model config, with this run's
    dropout; the vocabulary size comes from the data, as always."""
    cfg.model = replace(theirs, dropout=cfg.model.dropout, vocab_size=0)


def whole_best(out_dir: Path) -> str:
    """'; start a new run from its best.pt ...' where out_dir's best.pt loads, else ''."""
    try:
        load_checkpoint(out_dir / "best.pt")
    except UserError:
        return ""
    return f"; start a new run from its best.pt with {new_run_from(out_dir / 'best.pt')}"


def same_weights(a: str, b: str) -> bool:
    """Do two train.init_from settings name the same checkpoint, spelt two ways (a run's folder and
    the best.pt it resolves to, say)?"""
    if same_path(a, b):
        return True
    try:
        return bool(a and b) and resolve_checkpoint(a).resolve() == resolve_checkpoint(b).resolve()
    except (UserError, OSError):  # one no longer there, or not a checkpoint: not shown to be the same
        return False


def not_this_configs(ours: ModelConfig, theirs: ModelConfig) -> str:
    """', not this config's model.n_layer=3, ...': the model settings of this config that the weights'
    own (`theirs`, as saved with them) replace in a run from train.init_from, or ''."""
    replaced = [set_arg(f"model.{k}", getattr(ours, k)) for k in FROM_WEIGHTS
                if getattr(ours, k) != getattr(theirs, k)]  # (in --set's words: true, not True)
    if ours.vocab_size not in (0, theirs.vocab_size):  # (0: from the tokenizer)
        replaced.append(f"model.vocab_size={ours.vocab_size}")
    return f", not this config's {', '.join(replaced)}" if replaced else ""


def load_resume(cfg: Config, out_dir: Path) -> dict[str, Any]:
    """ckpt.pt of the run to continue; its model and data settings must be this config's."""
    path = out_dir / "ckpt.pt"
    try:
        ckpt = load_checkpoint(path)
    except UserError as e:  # damaged: its best.pt (weights only) may still be whole
        raise UserError(f"--resume: {e}{whole_best(out_dir)}") from None
    if "optimizer" not in ckpt:
        raise UserError(f"{path} holds weights only (e.g. from export.py --from-hf): it cannot be resumed; "
                        f"start a new run from it with {new_run_from(out_dir)}")
    missing = [k for k in RESUME_KEYS if k not in ckpt]
    if missing:
        raise UserError(f"{path} cannot be resumed: it is damaged (missing {', '.join(missing)}); "
                        f"start a new run from its weights with {new_run_from(out_dir)}")
    for key, types in RESUME_TYPES.items():  # a hand-made or damaged file fails here, not deep in the loop
        value = ckpt[key]  # (its numbers are sums, counts and seconds: never negative)
        if (not isinstance(value, types) or isinstance(value, bool) or (isinstance(value, float) and math.isnan(value))
                or (isinstance(value, (int, float)) and value < 0)
                or (isinstance(value, int) and value > MAX_INT)  # (2**1500 would not make a float: a traceback)
                or (key in ("loss_sum", "elapsed_s") and not math.isfinite(value))
                or (key == "loss_count" and value > ckpt["step"])):  # (losses since the last log: at most its steps)
            raise UserError(f"{path} cannot be resumed: it is damaged (its {key} is {short(value)}); "
                            f"start a new run from its weights with {new_run_from(out_dir)}")
    if cfg.train.max_iters < ckpt["step"]:  # its config.yaml would no longer describe the run
        raise UserError(f"--resume: train.max_iters={cfg.train.max_iters} is below step {ckpt['step']}, where {path} "
                        f"already is; give train.max_iters >= {ckpt['step']} (more steps train on)")
    saved_train = ckpt["config"].get("train")
    saved_init = saved_train.get("init_from") if isinstance(saved_train, dict) else None
    if not cfg.train.init_from and isinstance(saved_init, str):  # its config.yaml keeps what the run started from
        cfg.train.init_from = saved_init
    elif not same_weights(cfg.train.init_from, saved_init or ""):  # (the weights come from its ckpt.pt, not these)
        was = short(saved_init) if saved_init else "none (it started from scratch)"
        raise UserError(f"--resume: train.init_from={short(cfg.train.init_from)} differs from the checkpoint's "
                        f"{was} ({path}); a resumed run continues from its own ckpt.pt: drop it, or start "
                        f"a new run from those weights with {new_run_from(cfg.train.init_from)}")
    if cfg.train.init_from:  # a run started from other weights: its model config is theirs, as saved here
        adopt_model(cfg, checkpoint_config(ckpt, path).model)
    current = config_to_dict(cfg)
    seed = saved_train.get("seed") if isinstance(saved_train, dict) else None
    if seed is not None and seed != cfg.train.seed:  # (the random state is the checkpoint's: only eval would follow)
        raise UserError(f"--resume: train.seed={cfg.train.seed} differs from the checkpoint's {short(seed)} ({path}); "
                        f"a resumed run keeps its seed (its random state comes from the checkpoint)")
    for section in ("model", "data"):
        saved = ckpt["config"].get(section)
        for key, value in current[section].items():
            old = saved.get(key) if isinstance(saved, dict) else None
            if section == "data" and key not in token_keys(cfg.data):  # e.g. bpe_vocab_size of a char run
                continue
            if key == "dataset" and isinstance(old, str) and (same_dataset(old, value) or (
                    ckpt.get("data_digest") is not None and Path(value).expanduser().exists())):
                continue  # (the same data spelt another way, or moved: check_resume_data compares the tokens)
            if key != "vocab_size" and old != value:  # (a bool in --set's words: causal=false, not False)
                said = [str(v).lower() if isinstance(v, bool) else short(v) for v in (value, old)]
                raise UserError(f"--resume: {section}.{key}={said[0]} differs from the checkpoint's {said[1]} "
                                f"({path}); a resumed run keeps its model and data settings")
    return ckpt


TRAINING_KEYS = ("batch_size", "grad_accum", "lr", "min_lr", "warmup_iters", "weight_decay", "beta1", "beta2",
                 "grad_clip", "eval_iters", "dtype")  # what a step computes, and which eval picks best.pt


def processes_of(ckpt: dict[str, Any]) -> int:
    """How many processes the checkpoint was trained on (DDP saves each rank's random state)."""
    ranks = ckpt.get("rng_ranks")
    return len(ranks) if isinstance(ranks, list) else 1


def training_changes(cfg: Config, ckpt: dict[str, Any], processes: int = 1) -> list[str]:
    """The training settings a resume changes, 'train.lr=0.5 (was 0.001)' (TRAINING_KEYS). On another number of
    `processes`, train.batch_size (per process) and grad_accum are left to Run.resume's note on the global batch."""
    saved = ckpt["config"].get("train")
    saved, now = saved if isinstance(saved, dict) else {}, config_to_dict(cfg)["train"]
    other_processes = processes != processes_of(ckpt)
    return [f"train.{k}={short(now[k])} (was {short(saved[k])})" for k in TRAINING_KEYS
            if k in saved and saved[k] != now[k] and not (other_processes and k in ("batch_size", "grad_accum"))]


def changed_training(cfg: Config, ckpt: dict[str, Any], processes: int = 1) -> str | None:
    """A note for a resume whose training settings differ from the checkpoint's (allowed: a lower lr
    to go on with is a choice), or None: the steps from here train otherwise, and config.yaml will
    give the new values for the whole run. On another number of `processes`, train.batch_size (per
    process) and grad_accum are left to Run.resume's note on the global batch, which names the
    batch_size that keeps it: this note told to give the run's own, which changes it there."""
    changed = training_changes(cfg, ckpt, processes)
    more = f" and {count(len(changed) - 2, 'more setting')}" if len(changed) > 2 else ""
    notes = []
    if changed:
        notes.append(f"note: --resume with {', '.join(changed[:2])}{more}: the steps from {ckpt['step']} on train "
                     f"with the new values, and config.yaml will give them for the whole run (to go on exactly, give "
                     f"the run's own)")
    then = checkpoint_config(ckpt, "ckpt.pt").train
    if moved := schedule_moved(cfg.train, then, ckpt["step"]):
        notes.append(moved)
    return "\n".join(notes) or None


def schedule_moved(t: TrainConfig, then: TrainConfig, step: int) -> str:
    """A note for a resume with another train.max_iters than the run's (`then`) once the cosine decay has
    begun (a larger one is how a run trains on): the decay stretches or shrinks to the new last step, so the
    learning rate jumps at the resume, from the run's own schedule's lr; or "" where it does not move."""
    lr_now, lr_before = lr_at(step, t), lr_at(step, then)
    if t.max_iters == then.max_iters or f"{lr_now:.3g}" == f"{lr_before:.3g}":  # (the warmup: the same lr)
        return ""
    return (f"note: --resume with train.max_iters={t.max_iters} (was {then.max_iters}): the learning rate's cosine "
            f"decay now ends at step {t.max_iters}, so at step {step} the lr "
            f"{'rises' if lr_now > lr_before else 'falls'} from {lr_before:.3g} to {lr_now:.3g} (metrics.csv's lr "
            f"column shows the jump)")


def check_resume_data(cfg: Config, ckpt: dict[str, Any], data: Prepared) -> None:
    """The prepared data must be what the checkpoint was trained on (same text, same tokenizer):
    an edited dataset file would silently remap token ids. Checkpoints before version 3 record no
    fingerprint."""
    saved = ckpt.get("data_digest")
    if saved is None or saved == data.meta["digest"]:
        return
    out_dir = cfg.train.out_dir
    what = f"--resume: data.dataset={short(cfg.data.dataset)} is not the data {out_dir}/ckpt.pt was trained on"
    if ckpt["tokenizer"] != data.tokenizer.to_dict():
        raise UserError(f"{what}: it changed since, and its vocabulary changed with it (token ids would mean "
                        f"other tokens); restore it, or train a new run on the new data")
    raise UserError(f"{what}: it changed since; restore it, or train on the new data as a new run from these "
                    f"weights: {new_run_from(out_dir)}")


def load_init(cfg: Config) -> tuple[GPT, dict[str, Any], str]:
    """train.init_from (fine-tuning): the starting weights, their checkpoint, and the line that says
    so (printed once the data is known to fit them); the model config becomes theirs."""
    try:  # not found, a config given for a run, a file that is no checkpoint: the message names the key
        path, ckpt = load_run_checkpoint(cfg.train.init_from)
        model, init_cfg = model_from_checkpoint(ckpt, path)
    except UserError as e:
        raise UserError(f"train.init_from: {e}") from None
    not_ours = not_this_configs(cfg.model, init_cfg.model)
    adopt_model(cfg, init_cfg.model)  # check_init_tokenizer then says whether the data's vocabulary is theirs
    return model, ckpt, f"train.init_from: starting from {path} (step {ckpt['step']}), with its model config{not_ours}"


def eval_due(t: TrainConfig, step: int, evaluated: int) -> bool:
    """Is `step` one to evaluate (every eval_interval steps, and the last) and not evaluated yet (`evaluated`:
    the last step that was)?"""
    return (step % t.eval_interval == 0 or step == t.max_iters) and step != evaluated


def trains_on(t: TrainConfig, step: int, stop_at: int | None) -> bool:
    """Does a call that starts at `step` train any step (below train.max_iters and --stop-at)?"""
    return step < t.max_iters and (stop_at is None or step < stop_at)


def trained_with(cfg: Config, ckpt: dict[str, Any] | None, step: int, stop_at: int | None = None) -> Config:
    """The settings config.yaml records: this call's, except for a resume that does nothing (the run is
    at its train.max_iters, or at --stop-at, and its step evaluated): its checkpoint's (a changed
    train.lr, say, would be recorded for steps that never ran it; a lost config.yaml is written again,
    from them), with a note. An evaluation still due at the step runs under this call's settings, and
    so do the drawing and TensorBoard's backfill: those are recorded."""
    t = cfg.train
    if ckpt is None or trains_on(t, step, stop_at):
        return cfg
    if eval_due(t, step, ckpt.get("evaluated_step", step)):
        return cfg  # (the step's eval, stopped before it ran, runs now)
    try:
        saved = checkpoint_config(ckpt, "ckpt.pt")
    except UserError:  # (an older checkpoint's config that no longer reads: this call's, as before)
        return cfg
    saved.train.out_dir = cfg.train.out_dir  # (a moved run: where it is now)
    saved.train.plot, saved.train.tensorboard = t.plot, t.tensorboard  # (they act even so: a picture, a backfill)
    theirs = flat_config(saved)
    ignored = [key for key, value in flat_config(cfg).items() if theirs.get(key) != value]
    if ignored:
        if step < cfg.train.max_iters:  # (so --stop-at is what stops it)
            where, more = f"--stop-at {stop_at}", "a later --stop-at"
        else:
            where, more = "its train.max_iters", "a larger train.max_iters"
        print(f"note: the run is at step {step}, {where}: nothing is trained, so these settings are not "
              f"used, and config.yaml keeps the run's: {first_few(ignored)} "
              f"({more} trains on)", file=sys.stderr)
    return saved


def load_data(cfg: Config, dist: Distributed, source: str, quiet: bool = False,
              from_weights: str | None = None) -> Prepared:
    """Prepare the dataset (rank 0; the others wait; `quiet`: without its progress bar), then
    memory-map it; this sets cfg.model.vocab_size from the tokenizer (`from_weights`: load_for_training's)."""
    # the folder rank 0 prepared is the one loaded (a folder dataset that gained a file since would be named
    # otherwise by a new walk: a folder never made, called damaged)
    folder = prepare(cfg, show_progress=not quiet) if dist.master else None
    dist.barrier()
    if folder is None:  # the other processes name it once it is there
        folder = prepared_dir(cfg.data)
    if dist.world_size > 1:  # on several machines each finds it on its own disk: all say which process lacks it
        if lacking := first_lacking(dist, folder, folder.is_dir()):
            rank, path = lacking
            raise UserError(f"process {rank}: the prepared data {path} is not on its machine: process 0 prepares it "
                            f"on its own; prepare the data on each machine first (python -m data.prepare CONFIG "
                            f"[--set ...]), or share data.prepared_dir, the dataset at the same path on each machine "
                            f"(the folder's name depends on it)")
    return load_for_training(cfg, source, from_weights, folder)


def mfu_peak(ckpt: dict[str, Any] | None, dtype: str, device: torch.device, threads: int,
             free: int | None = None) -> dict[str, Any]:
    """MFU's peak for this run: the one its checkpoint holds when it was measured on the same
    device, dtype and threads (measured again at each resume, on a busy machine it read 96, then
    189 GFLOP/s, and the MFU curve halved at the resume while tokens/s stayed), else measured
    now on `threads` threads (peak_on)."""
    on = f"{device_name(device)}, {dtype}, {count(threads, 'thread')}"
    if device.type == "cuda" and dtype == "float32":  # (train.tf32 switched at a resume: the other peak, 7.4x apart)
        on += f", TF32 {'on' if tf32_enabled() else 'off'}"
    saved = ckpt.get("mfu_peak") if ckpt is not None else None
    if isinstance(saved, dict) and saved.get("on") == on and isinstance(saved.get("source"), str) \
            and isinstance(saved.get("flops"), float) and 0 < saved["flops"] < 1e18:  # (else: measured again)
        source = saved["source"]  # a measurement is said to be the start's (a GPU's nominal peak is no such)
        if source.startswith("measured") and not source.endswith("at the run's start") \
                and "measured again" not in source:  # (one measured mid-run says so: measure_peak_again)
            source += ", at the run's start"
        return {**saved, "source": source, "dtype": dtype, "threads": threads}
    flops, source = peak_on(dtype, device, threads, free)
    return {"flops": float(flops), "source": source, "on": on, "dtype": dtype, "threads": threads}


def peak_on(dtype: str, device: torch.device, threads: int, free: int | None, again: bool = False) -> tuple[float, str]:
    """peak_flops on `threads` threads; where the thread policy finds only `free` of them free (a busy
    machine), measured on those and scaled to all: on 2 threads beside a busy process every repeat of the
    matmul stalled (20-40 ms where it takes 0.3), and the run, on 1 thread, read an MFU of 130-200%."""
    if device.type == "cuda" or not free or free >= threads:
        with torch_threads(threads):
            return peak_flops(dtype, device, again=again)
    with torch_threads(free):
        flops, source = peak_flops(dtype, device, again=again)
    return flops * threads / free, f"{source} on {count(free, 'free core')}, x {threads / free:g}"


def gflops(flops: float) -> str:
    """FLOP/s as GFLOP/s for a line: whole ones (`1,979`), two digits under 10 (a stalled peak's `0.6`, not `1`,
    which read as no more than a run's `1`)."""
    return f"{flops / 1e9:,.0f}" if flops >= 1e10 else f"{flops / 1e9:.2g}"


def measure_peak_again(run: Run, speed: dict[str, float], achieved: float) -> None:
    """The run did more FLOP/s than its measured peak (an MFU above 100%): the peak was measured in a stalled
    moment (a busy machine read 2 GFLOP/s where it does 300, and every row of the run, resumes included, read
    3,000-8,000%). Measured again, as mfu_peak did, and never below what the run has just done; saved with it."""
    free = run.threads.threads if run.threads is not None else None
    flops, source = peak_on(run.peak["dtype"], run.dist.device, run.peak["threads"], free, again=True)
    flops = max(float(flops), achieved)
    source += f", measured again at step {run.step}"
    if run.dist.master:  # (on stdout with the eval lines: a figure of the run's log, not a problem to fix)
        from tqdm import tqdm  # (the bar's own write: a line between its redraws)
        tqdm.write(f"step {run.step}: training ran {gflops(achieved)} GFLOP/s, over the MFU peak it had "
                   f"measured ({gflops(speed['peak'])} GFLOP/s, at its start or resume, a busy moment's): "
                   f"measured again, MFU is against {gflops(flops)} GFLOP/s from here")
    run.peak = {**run.peak, "flops": flops, "source": source}
    speed["peak"] = flops


@dataclass
class Run:
    """Everything the loop works on. What changes (step, best_val, elapsed, the last step evaluated
    and the train loss summed since the last log, with its count) is saved in ckpt.pt with the
    model, optimizer and RNG states."""
    cfg: Config
    out_dir: Path
    data: Prepared
    dist: Distributed
    model: GPT  # the weights (what is saved)
    train_model: torch.nn.Module  # what the loop calls: the model, compiled and/or wrapped in DDP
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    autocast: Any
    batch_gen: torch.Generator  # batch sampling only (the same on every rank)
    step: int = 0
    best_val: float = float("inf")
    elapsed: float = 0.0  # training seconds, carried over a resume
    loss_sum: torch.Tensor | None = None  # train loss summed on the device since the last log
    loss_count: int = 0
    threads: ThreadPolicy | None = None  # CPU threads for the free cores (None on a GPU)
    resumed_at: int | None = None  # the step a resumed run started from
    evaluated: int | None = None  # the last step whose losses were estimated (saved: a resume does not repeat it)
    exit_code: int = 0  # 128 + the signal that stopped the run, else 0
    board: TensorBoardLog | None = None  # train.tensorboard, on the main process
    held: Callable[[], bool] | None = None  # is out_dir's lock still ours (runs.run_lock; the main process)
    metrics: list[dict] = field(default_factory=list)  # metrics.csv's rows so far (kept on the main process)
    # names the run in its checkpoints, kept over resumes: a best.pt of another run is told (runs.resumed_metrics)
    run_id: str = field(default_factory=lambda: secrets.token_hex(8))
    compiling: bool = False  # train.compile, until the first step (which compiles the model) has run
    peak: dict[str, Any] | None = None  # MFU's peak FLOP/s, where it comes from, and on what (mfu_peak)
    last_lr: float | None = None  # the lr the step that led to `step` trained with (resumed: its checkpoint's)

    def state(self, ranks: list[tuple[dict, float]] | None = None) -> dict[str, Any]:
        """The checkpoint; with every process's RNG states and train-loss sum since the last log
        (ranks, in rank order), all that a resumed run needs to continue exactly."""
        s = {"config": config_to_dict(self.cfg), "tokenizer": self.data.tokenizer.to_dict(),
             "model": self.model.state_dict(), "step": self.step, "best_val_loss": self.best_val,
             "elapsed_s": self.elapsed, "data_digest": self.data.meta["digest"], "evaluated_step": self.evaluated,
             "run_id": self.run_id, "mfu_peak": self.peak}
        if generator := self.data.meta.get("settings", {}).get("generator"):  # the stories' generator code: the
            s["stories_generator"] = generator  # probe's held-out stories are made by today's (probe.py compares)
        if ranks is not None:
            rngs, sums = [rng for rng, _ in ranks], [loss_sum for _, loss_sum in ranks]
            s.update(optimizer=self.optimizer.state_dict(), scaler=self.scaler.state_dict(),
                     batch_rng=self.batch_gen.get_state(), rng=rngs[0], loss_sum=sums[0], loss_count=self.loss_count,
                     metrics_csv=metrics_text(self.metrics))  # its rows are its own (runs.resumed_metrics)
            if len(ranks) > 1:  # DDP: each rank draws its own dropout masks and sums its own losses
                s.update(rng_ranks=rngs, loss_sum_ranks=sums)
        return s

    def restore(self, ckpt: dict[str, Any]) -> None:
        load_weights(self.model, ckpt["model"], self.out_dir / "ckpt.pt")
        load_optimizer(self.optimizer, ckpt["optimizer"], self.model, self.out_dir / "ckpt.pt")
        apply_settings(self.optimizer, self.cfg.train)  # (the saved betas and weight decay came back with it)
        if ckpt["scaler"] and self.scaler.is_enabled():  # empty: saved without float16 (train.dtype may change)
            self.scaler.load_state_dict(ckpt["scaler"])
        self.batch_gen.set_state(ckpt["batch_rng"])
        restore_rng_state(self.own(ckpt, "rng"), self.dist.device)
        if self.dist.rank > 0 and not saved_per_rank(ckpt, "rng", self.dist):
            # on another number of processes every rank took rank 0's states: the same dropout masks on every
            # rank for the rest of the run. A stream of its own instead, from the seed, its rank and the step
            torch.manual_seed((self.cfg.train.seed + self.dist.rank + ckpt["step"] * self.dist.world_size) % 2**63)
        self.step, self.best_val, self.elapsed = ckpt["step"], ckpt["best_val_loss"], ckpt["elapsed_s"]
        # (a resume with another schedule that evaluates its step first logged that step's lr as the new one gives)
        self.last_lr = lr_at(self.step - 1, checkpoint_config(ckpt, "ckpt.pt").train) if self.step else None
        self.loss_sum.fill_(self.own(ckpt, "loss_sum"))
        self.loss_count = ckpt["loss_count"]
        self.resumed_at = self.step
        if isinstance(ckpt.get("run_id"), str):  # (a checkpoint from before it: this resume names the run)
            self.run_id = ckpt["run_id"]
        saved_on = processes_of(ckpt)
        if saved_on != self.dist.world_size and self.dist.master:  # train.batch_size is per process
            t, then = self.cfg.train, checkpoint_config(ckpt, "ckpt.pt").train
            now = t.batch_size * t.grad_accum * self.dist.world_size
            before = then.batch_size * then.grad_accum * saved_on
            per, rest = divmod(before, t.grad_accum * self.dist.world_size)  # the batch_size that keeps it
            keeps = f": train.batch_size={per} keeps it" if now != before and per and not rest else ""
            batch = (f"the global batch is {now} sequences, as before" if now == before else
                     f"the global batch is now {now} sequences, was {before}")
            processes = count(self.dist.world_size, "process", "processes")
            print(f"note: resumed on {processes}, trained on {saved_on}: {batch} (train.batch_size is per "
                  f"process{keeps})", file=sys.stderr)
        # a run stopped between evals (Ctrl-C, --stop-at) was not evaluated at its step; older checkpoints say nothing
        self.evaluated = ckpt.get("evaluated_step", self.step)

    def own(self, ckpt: dict[str, Any], key: str) -> Any:
        """This process's `key` (rng, loss_sum): under DDP each rank's own, saved as KEY_ranks; on
        another number of processes (or from a checkpoint without them) rank 0's, `key`, for all, but
        for the loss sum, the ranks' mean: the mean over processes that the next log row takes is then
        the whole batch's (rank 0's alone was its share of the batch)."""
        ranks = ckpt.get(f"{key}_ranks")
        if saved_per_rank(ckpt, key, self.dist):
            return ranks[self.dist.rank]
        if key == "loss_sum" and isinstance(ranks, list) and ranks and all(isinstance(x, float) for x in ranks):
            return sum(ranks) / len(ranks)
        return ckpt[key]

    def save(self, name: str, with_optimizer: bool = True) -> None:
        """Rank 0 writes the file; with the optimizer, every rank sends its RNG states and loss sum
        (a collective: all ranks save together)."""
        ranks = (self.dist.gather((capture_rng_state(self.dist.device), self.loss_sum.item())) if with_optimizer
                 else None)
        if self.dist.master:
            save_checkpoint(self.out_dir / name, self.state(ranks), self.check_folder)

    def save_metrics(self, metrics: list[dict]) -> None:
        """metrics.csv, on the main process."""
        write_metrics(self.out_dir, metrics, self.check_folder)

    def plot(self) -> None:
        """loss.png, on the main process (nothing without matplotlib)."""
        plot_run(self.out_dir, self.check_folder)

    def check_folder(self) -> None:
        """Before a write, and again before its rename (checkpoint.atomic_write's guard): out_dir is
        still this training's. Removed while it ran (rm -rf, then perhaps a new training under the
        same name), writing on would make it again, or write into the new run's files."""
        if self.held is not None and not self.held():
            raise UserError(f"train.out_dir={str(self.out_dir)!r} was removed or moved (or its .lock) while this "
                            f"training ran: stopped at step {self.step} without writing there (a moved run resumes "
                            f"from its last checkpoint: --resume --set train.out_dir=NEW)")

    def take_step(self, lr: float, stop: Callable[[], bool] | None = None) -> torch.Tensor | None:
        """One optimizer step through train_model (tinygpt/training.py), or None where stop() ended it
        between micro-batches: then the batch and dropout random states are put back as they were, so
        that the checkpoint saved next resumes by redoing the whole step. The first step through a
        compiled model compiles it; where torch.compile cannot work here (no C++ compiler, say), the run
        goes on without it from the same batches, with a warning (under DDP it stops, step 0's ckpt.pt saved)."""
        t = self.cfg.train

        def step() -> torch.Tensor | None:
            return train_step(self.train_model, self.optimizer, self.scaler, self.autocast, self.next_batch,
                              t.grad_accum, t.grad_clip, lr, stop)
        if stop is None and not self.compiling:  # (the usual step: no state to keep)
            return step()
        batches = self.batch_gen.get_state()
        drawn = capture_rng_state(self.dist.device) if stop is not None else None  # (46 us: only where needed)
        loss = self.compile_step(step, batches) if self.compiling else step()
        if loss is None:
            self.batch_gen.set_state(batches)
            restore_rng_state(drawn, self.dist.device)
        return loss

    def compile_step(self, step: Callable[[], torch.Tensor | None], batches: torch.Tensor) -> torch.Tensor | None:
        """The first step(), which compiles the model, and where torch.compile fails, step() again
        from the same batches without it (see take_step)."""
        try:
            loss = step()
        except Exception as e:  # noqa: BLE001 (only the compiler's own errors are caught: see below)
            if not type(e).__module__.startswith(("torch._dynamo", "torch._inductor")):
                raise
            said = str(e).strip().split("\n", 1)[0]  # (its first line: the rest says where to read more)
            why = f"torch.compile failed ({type(e).__name__}{': ' * bool(said)}{elide(said, 200)})"
            if self.dist.world_size > 1:  # (DDP's wrapper holds the compiled model)
                raise UserError(f"train.compile: {why}; continue without it: --resume --set train.compile=false") \
                    from None
            self.optimizer.zero_grad(set_to_none=True)
            self.batch_gen.set_state(batches)
            self.train_model = self.model
            if self.dist.master:
                print(f"warning: train.compile: {why}; training without it", file=sys.stderr)
            loss = step()
        self.compiling = False
        return loss

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        t, d = self.cfg.train, self.dist
        return get_batch(self.data.train, t.batch_size, self.cfg.model.block_size, self.batch_gen, d.device,
                         d.rank, d.world_size)


def saved_per_rank(ckpt: dict[str, Any], key: str, dist: Distributed) -> bool:
    """Did the checkpoint keep `key` (rng, loss_sum) for each process of this run (KEY_ranks, saved on as many)?"""
    ranks = ckpt.get(f"{key}_ranks")
    return isinstance(ranks, list) and len(ranks) == dist.world_size and type(ranks[dist.rank]) is type(ckpt[key])


def build_run(cfg: Config, data: Prepared, dist: Distributed, dtype: str, ckpt: dict | None,
              init_model: GPT | None) -> Run:
    """Model, optimizer, gradient scaler and batch sampler; restored from ckpt when resuming."""
    t, device = cfg.train, dist.device
    model = GPT(cfg.model)
    if init_model is not None:
        model.load_state_dict(init_model.state_dict())
    model = model.to(device)
    # float16 gradients can underflow: the scaler multiplies the loss up and the gradients back down
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "float16"))
    run = Run(cfg, Path(t.out_dir), data, dist, model, dist.wrap(torch.compile(model) if t.compile else model),
              make_optimizer(model, t, device), scaler, autocast(dtype, device),
              torch.Generator().manual_seed(t.seed), loss_sum=torch.zeros((), device=device), compiling=t.compile)
    if device.type == "cpu":
        run.threads = ThreadPolicy(fixed=t.threads)
    if ckpt is not None:
        try:
            run.restore(ckpt)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as e:
            raise UserError(f"{run.out_dir / 'ckpt.pt'} cannot be resumed: its saved training state is damaged "
                            f"({reason(e)}); start a new run from its weights with "
                            f"{new_run_from(run.out_dir)}") from None
    return run


# ---- the loop ----


def logged_lr(run: Run) -> float:
    """The lr an eval row of run.step logs: the one the step that led there trained with, as the log row of
    that step gives it (at step 0: the first step's, by the config's schedule)."""
    return run.last_lr if run.last_lr is not None else lr_at(0, run.cfg.train)


def diverged(what: str, value: float | str, run: Run, losses: dict[str, float]) -> UserError:
    """The error that ends a diverged run. Its step's row, with `losses` (train, val: the one that
    diverged is nan or inf), goes into metrics.csv first (train_loop writes the file on its way out):
    compare.py and a sweep's report tell a diverged run from one stopped on its way. A resume drops
    the row, as any row past its checkpoint."""
    t = run.cfg.train
    run.metrics.append({"step": run.step, **{f"{k}_loss": f"{v:.4f}" for k, v in losses.items()},
                        "lr": f"{logged_lr(run):.3e}"})
    fix = (f"lower train.lr (train.grad_clip={t.grad_clip} is on)" if t.grad_clip else
           "lower train.lr or set train.grad_clip")
    if t.lr * t.weight_decay >= 1:  # AdamW multiplies the weights by 1 - lr * weight_decay each step: flipped, grown
        fix = (f"lower train.weight_decay={t.weight_decay:g} or train.lr={t.lr:g}: each step scales the weights by "
               f"1 - lr * weight_decay = {1 - t.lr * t.weight_decay:g}")
    return UserError(f"training diverged: {what} is {value} at step {run.step}; {fix}; {run.out_dir / 'ckpt.pt'} "
                     f"keeps the last good state")


def check_finite(run: Run) -> None:
    """Before a stop's save (evaluate and log check their own losses): the train loss since the last
    log and the weights must be finite, or the save would replace the last good ckpt.pt."""
    if run.loss_count:
        train_loss_since_log(run)
    finite = bool(torch.stack([torch.isfinite(p).all() for p in run.model.parameters()]).all())
    if run.dist.any(not finite):
        raise diverged("a weight", "not finite", run, {"train": math.nan})  # (so is the loss at such weights)


def evaluate(run: Run, metrics: list[dict], t_start: float,
             stop: Callable[[], bool] | None = None) -> dict[str, float] | None:
    """Estimate the losses; log them (metrics.csv, TensorBoard); save best.pt (a new lowest val
    loss) and ckpt.pt; plot. TensorBoard's events of this step are written before the checkpoints,
    so that a checkpoint covers only what is on disk: a run killed while they are drawn resumes
    from the checkpoint before and draws them again (a resume purges what follows its checkpoint).
    None, with nothing logged, where stop() ended the estimate (a signal: the loop saves; a resume
    evaluates this step again)."""
    cfg, t = run.cfg, run.cfg.train
    losses = estimate_loss(run.model, {"train": run.data.train, "val": run.data.val}, t.batch_size,
                           cfg.model.block_size, t.eval_iters, t.seed, run.dist.device, run.autocast, run.dist, stop)
    if losses is None:
        return None
    run.elapsed = time.perf_counter() - t_start
    if not math.isfinite(losses["val"]):
        raise diverged("the val loss", losses["val"], run, losses)
    if run.dist.master:
        metrics.append({"step": run.step, "train_loss": f"{losses['train']:.4f}", "val_loss": f"{losses['val']:.4f}",
                        "lr": f"{logged_lr(run):.3e}", "elapsed_s": f"{run.elapsed:.3f}"})
        run.save_metrics(metrics)
        if run.board is not None:
            run.board.eval(run.step, losses, run.model)
    run.evaluated = run.step
    if losses["val"] < run.best_val:
        run.best_val = losses["val"]
        run.save("best.pt", with_optimizer=False)
    run.save("ckpt.pt")
    # loss.png after the checkpoints: a plot that fails loses no training (it is drawn whole again later)
    if run.dist.master and (t.plot == "eval" or (t.plot == "end" and run.step == t.max_iters)):
        run.plot()  # (no plot without matplotlib)
    return losses


def plot_missed(out_dir: Path) -> bool:
    """Is loss.png missing, or older than the last checkpoint (the plot is drawn after it)?"""
    png, ckpt = out_dir / "loss.png", out_dir / "ckpt.pt"
    return not png.is_file() or (ckpt.is_file() and png.stat().st_mtime_ns < ckpt.stat().st_mtime_ns)


def train_loss_since_log(run: Run) -> float:
    """The mean train loss since the last log over every process (one host sync); diverged: refused."""
    loss = run.dist.mean(run.loss_sum / run.loss_count).item()
    if not math.isfinite(loss):
        raise diverged("the train loss", loss, run, {"train": loss})
    return loss


def log(run: Run, metrics: list[dict], lr: float, speed: dict[str, float]) -> dict[str, str]:
    """The train loss since the last log, tokens/s and MFU -> a metrics row."""
    train_loss = train_loss_since_log(run)
    now = time.perf_counter()
    step_time = (now - speed["t_last"]) / max(run.step - speed["step_last"], 1)
    achieved = speed["flops_per_step"] / step_time  # FLOP/s of this process
    # above the peak: only a stalled measurement explains it (the fastest of its repeats was slow too); once a
    # run (its source then says so)
    if (achieved > speed["peak"] and run.peak["source"].startswith("measured")
            and "measured again" not in run.peak["source"]):
        measure_peak_again(run, speed, achieved)
        now = time.perf_counter()  # (measuring is no step of the next row)
    tok_s, mfu = speed["tokens_per_step"] / step_time, achieved / speed["peak"]
    speed.update(t_last=now, step_last=run.step)
    run.loss_sum.zero_()
    run.loss_count = 0
    row = {"step": run.step, "train_loss": f"{train_loss:.4f}", "lr": f"{lr:.3e}", "tokens_per_s": f"{tok_s:.0f}",
           "mfu": f"{mfu:.4f}", "elapsed_s": f"{now - speed['t_start']:.3f}"}  # (to 0.1 s, the seeds of a
    # short run's wall_s tied, reported "the same value (± 0)")
    metrics.append(row)
    if run.board is not None:
        run.board.log(run.step, row)
    return row


# the bar's line: no steps/s (tokens/s says it), so at 80 columns its tail still holds tokens/s and MFU
# (5,000 steps past an hour at 1.5M tokens/s on a GPU: 72 columns)
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"


def bar_postfix(row: dict[str, str]) -> str:
    """What the bar shows of a log step's row: the loss and the speed (metrics.csv keeps the lr too)."""
    return f"loss {row['train_loss']}, {float(row['tokens_per_s']):,.0f} tok/s, mfu {float(row['mfu']):.0%}"


def train_loop(run: Run, speed: dict[str, float], stop_at: int | None, quiet: bool) -> str:
    """Step until max_iters (or a signal, or --stop-at); returns why it ended."""
    from tqdm import tqdm
    t, dist = run.cfg.train, run.dist
    metrics = run.metrics  # a resumed run's rows up to its step (a new run rewrites a killed one's)
    stop = StopFlag()
    # (a bar only at a terminal: into a log file, `2> log`, it wrote a \r-joined line ten times a second)
    bar = tqdm(total=t.max_iters, initial=run.step, disable=quiet or not dist.master or not stderr_is_terminal(),
               dynamic_ncols=True, file=sys.stderr, bar_format=BAR_FORMAT)
    failing = False  # an error on its way out: the clean-up below must not hide it
    # all processes stop together: --stop-at is the same step on each; a signal (here, or in another
    # process of the run) is agreed on every step, between the micro-batches of a step (its work undone:
    # train.grad_accum=30000 took two minutes to stop, past a scheduler's grace before SIGKILL) and between
    # an eval's batches (the eval left to the resume), but under DDP with NCCL (GPUs) only at log steps,
    # where the loop syncs the host anyway (on CPUs, gloo's agreement is cheap beside the gradients'
    # all-reduce; torchrun kills a worker 30 s after passing a signal on)
    every_step = dist.world_size == 1 or dist.device.type == "cpu"
    between = (lambda: dist.any(stop.signum is not None)) if every_step else None  # micro-batches, eval batches
    mid_step = between if t.grad_accum > 1 else None
    try:
        while True:
            if eval_due(t, run.step, run.evaluated):
                eval_start = time.perf_counter()
                losses = evaluate(run, metrics, speed["t_start"], between)  # (None: a signal, saved below)
                speed["t_last"] += time.perf_counter() - eval_start  # tokens/s and MFU: training steps only
                if losses is not None and dist.master:  # (tqdm's write prints even where its bar is off)
                    bar.write(f"step {run.step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if run.step >= t.max_iters and run.evaluated == run.step:  # (its last eval not stopped by a signal)
                if dist.master and t.plot != "never" and plot_missed(run.out_dir):  # killed while drawing it
                    run.plot()
                return "done"
            signalled = False
            if every_step or run.step % t.log_interval == 0:
                signalled = dist.any(stop.signum is not None)
            if signalled or (stop_at is not None and run.step >= stop_at):
                run.elapsed = time.perf_counter() - speed["t_start"]
                check_finite(run)  # a diverged state must not replace the last good ckpt.pt
                saving = signalled or run.step != run.resumed_at  # (a resume at --stop-at: ckpt.pt is this state,
                if saving:                                          # and keeps the settings it was trained with)
                    run.save("ckpt.pt")
                why = "interrupted" if signalled else "stopped"
                if signalled and stop.signum is None:  # (SIGTERM: what torchrun sends its workers)
                    run.exit_code = 128 + signal.SIGTERM
                if signalled:  # saved: a second signal now is the same stop, and a lost stdout no "going on"
                    stopping_on_a_signal()
                if dist.master:  # how to continue must still be read: on stderr where stdout's reader has left (|
                    # head), or leaves as the line is written (`| tee log`: a Ctrl-C stops tee too)
                    saved = shown_path(run.out_dir / "ckpt.pt")
                    told = f"saved {saved}" if saving else f"{saved} is already this step's, kept as it was"
                    line = f"{why} at step {run.step}: {told}; continue with --resume"
                    if not stdout_left():
                        bar.write(line)
                        sys.stdout.flush()
                    if stdout_left():
                        bar.write(line, file=sys.stderr)
                return why
            if run.threads is not None:
                run.threads.update()  # follow the cores other processes leave free (checked once a second)
            lr = lr_at(run.step, t)  # warmup, then cosine decay
            # one optimizer step (tinygpt/training.py): for each of grad_accum micro-batches, forward,
            # next-token cross-entropy, backward; then clip the gradients, step, zero them
            loss = run.take_step(lr, mid_step)
            if loss is None:  # a signal during the step: undone, and saved by the check above
                continue
            run.last_lr = lr
            run.loss_sum += loss
            run.loss_count += 1
            run.step += 1
            bar.update(1)
            if run.step % t.log_interval == 0 or run.step == t.max_iters:
                row = log(run, metrics, lr, speed)
                bar.set_postfix_str(bar_postfix(row))
    except BaseException:
        failing = True
        raise
    finally:
        if stop.signum is not None and (run.step < t.max_iters or run.evaluated != run.step):  # (else: done)
            run.exit_code = 128 + stop.signum
        if run.exit_code:  # a later SIGTERM (torchrun's, once a peer has exited) is the same stop
            stopping_on_a_signal()
        bar.close()
        stop.restore()
        if dist.master and metrics:
            clean_up(lambda: run.save_metrics(metrics), failing)


# ---- main ----


def threads_note(policy: ThreadPolicy | None, fixed: int) -> str:
    """' (2 threads, following the free cores)' on a CPU: on a busy machine training is slower, and
    the thread count, which the policy lowers there, says why; '' on a GPU."""
    if policy is None:
        return ""
    return f" ({count(torch.get_num_threads(), 'thread')}{', following the free cores' * (not fixed)})"


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    cfg = load_config(args.config, args.set)
    device = resolve_device(cfg.train.device)
    dist = Distributed.from_env(device)  # one process, or one of several under torchrun
    try:
        # one training per run directory (rank 0 writes it): a second one is refused, not mixed in
        with run_lock(Path(cfg.train.out_dir), resume=args.resume) if dist.master else nullcontext() as held:
            return train(args, cfg, dist, held)
    finally:
        dist.close()


# settings that may differ between the machines of one torchrun run: where each finds its files, its cores
PER_MACHINE = {"train.out_dir", "data.dataset", "data.prepared_dir", "train.init_from", "train.threads"}


def first_difference(dist: Distributed, mine: dict[str, Any]) -> tuple[int, dict[str, Any], list[str]] | None:
    """The first process whose `mine` is not this one's: (its rank, its `mine`, the keys that differ), else None.
    A collective: every process calls it."""
    for rank, theirs in enumerate(dist.gather(mine)):
        if differ := [key for key in mine if theirs.get(key) != mine[key]]:
            return rank, theirs, differ
    return None


def first_lacking(dist: Distributed, path: Path, present: bool) -> tuple[int, str] | None:
    """The first process that lacks its `path` (`present`: whether this one has it), with the path as that process
    names it (on several machines they may differ), else None. A collective: every process calls it."""
    return next(((rank, theirs) for rank, theirs in enumerate(dist.gather(None if present else str(path))) if theirs),
                None)


def check_same_settings(cfg: Config, dist: Distributed, flags: dict[str, Any]) -> None:
    """Every process of a torchrun run must train the same config and `flags` (--resume, --stop-at): on several
    machines each reads its own config and --set, and a train.lr of another machine's trained on without a word
    (its weights drifting from the others'), another model.n_embd ended in DDP's traceback, and --resume on one
    machine alone in gloo's abort. A collective: every process calls it."""
    mine = {**{k: v for k, v in flat_config(cfg).items() if k not in PER_MACHINE}, **flags}
    if found := first_difference(dist, mine):
        rank, theirs, differ = found
        shown = ", ".join(f"{k}={mine[k]!r} here, {theirs.get(k)!r} on process {rank}" for k in differ[:3])
        raise UserError(f"process {dist.rank}: the processes of this torchrun run were given other settings: "
                        f"{shown}{', ...' if len(differ) > 3 else ''}; give every machine the same config, "
                        f"--set and flags")


def check_same_start(dist: Distributed, data: Prepared, ckpt: dict[str, Any] | None) -> None:
    """Every process must train on the same tokens and resume the same checkpoint: on several machines each reads
    its own prepared folder and ckpt.pt, and other text trained each process on its own without a word (or ended in
    DDP's traceback: another vocabulary), another run's ckpt.pt mixed two runs' states. A collective."""
    mine = {"prepared data": str(data.meta.get("digest"))[:12],
            "ckpt.pt": None if ckpt is None else f"run {ckpt.get('run_id')}, step {ckpt['step']}"}
    if found := first_difference(dist, mine):
        rank, theirs, differ = found
        shown = "; ".join(f"{what} ({mine[what]} on process {dist.rank}, {theirs[what]} on process {rank})"
                          for what in differ)
        raise UserError(f"process {dist.rank}: the processes of this torchrun run read other files: {shown}: the "
                        f"run's machines must find the same data.dataset and share train.out_dir")


def train(args: argparse.Namespace, cfg: Config, dist: Distributed, held: Callable[[], bool] | None = None) -> dict:
    """Check, prepare, build, then run the loop; returns the run's summary."""
    t = cfg.train
    out_dir = Path(t.out_dir)
    if dist.world_size > 1:
        check_same_settings(cfg, dist, {"--resume": args.resume, "--stop-at": args.stop_at})
    if dist.master:  # under DDP rank 0 decides, holding the folder's lock; the others wait for its verdict
        check_run_dir(out_dir, args.resume, args.config,
                      out_dir_set=any(set_key(item) == "train.out_dir" for item in args.set),
                      prepared_dir=cfg.data.prepared_dir)
        for name in TRAIN_FILES:  # temp files of a writer killed mid-write: a resume may never write them again
            # (under the run lock only this training writes them, but for loss.png: compare.py --plot-only too)
            sweep_temp_files(out_dir / name, only_writer=name != "loss.png")
    dist.barrier()
    if args.resume and dist.world_size > 1:  # (rank 0 found it: check_run_dir) all say which one lacks it, together
        if lacking := first_lacking(dist, out_dir / "ckpt.pt", (out_dir / "ckpt.pt").is_file()):
            rank, path = lacking
            raise UserError(f"process {rank}: --resume: {path}, which process 0 resumes from, is not on its machine: "
                            f"every process reads it, so train.out_dir must be a folder that all the run's machines "
                            f"share")
    if t.tensorboard:
        require_tensorboard(out_dir)
    if t.compile:
        check_compile_cache("train.compile")
    asked = cfg.model  # (a resumed run from other weights keeps their model config: a note names what it drops)
    ckpt = load_resume(cfg, out_dir) if args.resume else None
    metrics, note = resumed_metrics(out_dir, ckpt) if ckpt is not None else ([], None)  # before anything is written
    kept = (not_this_configs(asked, checkpoint_config(ckpt, out_dir / "ckpt.pt").model)
            if ckpt is not None and t.init_from else "")
    kept_note = f"note: --resume: a run started from train.init_from keeps its weights' model config{kept}" * bool(kept)
    changed_note = (changed_training(cfg, ckpt, dist.world_size)
                    if ckpt is not None and trains_on(t, ckpt["step"], args.stop_at)
                    else None)  # (else trained_with's note says nothing is trained)
    if changed_note and (ahead := best_pt_ahead(out_dir, ckpt)):
        changed = first_few(training_changes(cfg, ckpt, dist.world_size)) or f"train.max_iters={t.max_iters}"
        raise UserError(f"--resume: {out_dir / 'best.pt'} is of step {ahead:,}, after ckpt.pt's step "
                        f"{ckpt['step']:,} (ckpt.pt's later save failed or was stopped), and the resume changes the "
                        f"training settings ({changed}): best.pt of the steps it undoes would stay unless beaten; "
                        f"resume with the run's own settings, which train those steps again, or move best.pt away")
    best_gone = ckpt is not None and math.isfinite(ckpt["best_val_loss"]) and not (out_dir / "best.pt").exists()
    best_note = (f"note: --resume: {out_dir} has no best.pt (removed since?): it is written again only at an "
                 f"evaluation that beats the run's best val loss, {ckpt['best_val_loss']:.4f}; sample.py reads ckpt.pt "
                 f"until then") if best_gone else None
    stale_png = ckpt is not None and t.plot == "never" and (out_dir / "loss.png").exists()
    png_note = (f"note: --resume with train.plot=never: {out_dir / 'loss.png'} stays as it was, at step {ckpt['step']} "
                f"or before (draw it again with: "
                f"{shell_join(['python', script_word('compare.py'), path_word(out_dir), '--plot-only'])})"
                ) if stale_png else None
    own = Path(t.init_from)  # (the folder, or a checkpoint in it)
    if t.init_from and ckpt is None and (same_path(t.init_from, t.out_dir) or (
            own.name in CHECKPOINTS and same_path(str(own.parent), t.out_dir))):
        raise UserError(f"train.init_from={short(t.init_from)} names this run's own train.out_dir: a run cannot start "
                        f"from itself; give another run (or checkpoint) to start from, or --resume to continue it")
    # train.init_from starts a new run; a resumed one continues from its own checkpoint
    init_model, init_ckpt, init_line = load_init(cfg) if t.init_from and ckpt is None else (None, None, None)
    dtype = resolve_dtype(t.dtype, dist.device)  # "auto" -> the fastest dtype the hardware computes natively
    check_training_fits(cfg, dtype, dist.device)  # before any allocation: memory and time per step
    if dist.device.type == "cuda":
        configure_cuda(t.tf32)
    keep_freed_memory()  # no page faults for the activations of every step

    # under DDP each rank its own random stream, so that dropout masks differ across ranks as within one
    # batch (DDP copies rank 0's initial weights to the others); one process: train.seed itself
    torch.manual_seed(t.seed + dist.rank)
    # (this sets cfg.model.vocab_size from the tokenizer)
    data = load_data(cfg, dist, config_source(args.config, args.set), args.quiet,
                     t.init_from if init_model is not None else None)
    if dist.world_size > 1:
        check_same_start(dist, data, ckpt)
    if init_ckpt is not None:
        check_init_tokenizer(cfg, init_ckpt, data.tokenizer.to_dict())
        if dist.master:  # (after the check: a refused start says only why; under torchrun once, not per process)
            print(init_line)
    if ckpt is not None:
        check_resume_data(cfg, ckpt, data)
    check_training_fits(cfg, dtype, dist.device)  # again, now with the vocabulary's embedding and logits
    run = build_run(cfg, data, dist, dtype, ckpt, init_model)
    run.held, run.metrics = held, metrics

    tokens_per_step = t.batch_size * t.grad_accum * cfg.model.block_size * dist.world_size
    # on a CPU the peak of every core the run may use: measured with the threads of a busy start (1), it read
    # half the cores', and the MFU of later steps on both cores came out above 100%
    most = run.threads.max_threads if run.threads is not None and not t.threads else torch.get_num_threads()
    run.peak = mfu_peak(ckpt, dtype, dist.device, most, run.threads.threads if run.threads is not None else None)
    peak, peak_source = run.peak["flops"], run.peak["source"]
    speed = {"tokens_per_step": tokens_per_step, "peak": peak, "step_last": run.step,
             "flops_per_step": run.model.flops_per_token() * tokens_per_step / dist.world_size,  # per process
             "t_last": time.perf_counter(), "t_start": time.perf_counter() - run.elapsed}
    if dist.master:
        m = cfg.model
        print(f"model: {run.model.num_params():,} parameters ({count(m.n_layer, 'layer')}, {count(m.n_head, 'head')}, "
              f"{m.n_embd} wide, block {m.block_size}, vocab {m.vocab_size}{vocab_note(cfg.data, m.vocab_size)})\n"
              f"data: {len(data.train):,} train / {len(data.val):,} val tokens; {tokens_per_step:,} tokens/step\n"
              f"device: {dist.world_size} x {dist.device}{threads_note(run.threads, t.threads)}, {dtype}; MFU against "
              f"{gflops(peak)} GFLOP/s ({peak_source})")
        passed = args.stop_at is not None and args.stop_at < run.step  # (a resume: it stops at once)
        stop_note = f"note: --stop-at {args.stop_at} is before step {run.step}, where the run already is" * passed
        too_many = too_many_threads(run.threads, t.threads, "train.threads", "training")
        for warning in (emulated_dtype_warning(dtype, dist.device), note, kept_note, changed_note, best_note, png_note,
                        too_many, warmup_note(t), stop_note, moot_settings(cfg.data, args.set)):
            if warning:
                print(warning, file=sys.stderr)
        if t.plot != "never" and not can_plot():
            print("note: matplotlib is not installed: no loss.png (pip install matplotlib, or set "
                  "train.plot=never)", file=sys.stderr)
        # (run_lock made out_dir; removed or moved since, while the data were prepared, it must not come back
        # holding a config.yaml, perhaps over a new run's there)
        write_config(out_dir, trained_with(cfg, ckpt, run.step, args.stop_at), run.check_folder)
        if t.tensorboard:  # the attention images look at the first tokens of the training split
            run.board = TensorBoardLog(out_dir, data.tokenizer, data.train[:min(PROMPT_TOKENS, cfg.model.block_size)],
                                       run.resumed_at, run.check_folder)
            backfilled = run.board.backfill(run.metrics)  # (turned on at a resume: the steps before it)
            if backfilled:
                print(backfilled, file=sys.stderr)
        elif any((out_dir / LOG_DIR).glob("events.out.tfevents.*")):  # (the flag forgotten, or a dead start's log)
            mark_a_session_without(out_dir, run.resumed_at if args.resume else None)
            if args.resume:
                print(f"note: this run logs to TensorBoard ({out_dir / LOG_DIR}), but train.tensorboard is off now: "
                      f"the steps of this resume are missing there until a resume with train.tensorboard=true fills "
                      f"their scalars in from metrics.csv", file=sys.stderr)
    now = time.perf_counter()  # the clocks start with the steps: the setup above (matplotlib's import, say) is no
    speed.update(t_last=now, t_start=now - run.elapsed)  # training time (it was in the first row's tokens/s)
    failing = False  # (as in train_loop)
    try:
        with dist.peers():  # under DDP a worker killed mid-step: one line, not gloo's traceback from backward
            why = train_loop(run, speed, args.stop_at, args.quiet)
    except BaseException:
        failing = True
        raise
    finally:
        if run.board is not None:
            clean_up(run.board.close, failing)
    if run.exit_code:  # a signal stopped it (saved): the one line run_cli prints for Ctrl-C, with its exit code
        if dist.master:
            print("interrupted", file=sys.stderr)
        sys.exit(run.exit_code)
    if dist.master:
        force = [] if cfg.model.causal else ["--force"]  # sample.py refuses a model trained without the mask
        # training time as metrics.csv's elapsed_s (and a sweep's wall_s) has it, to 3 decimals, then to 1 (0.3504
        # straight to 1 read 0.4 beside the file's 0.350, 0.3); in all: saves and the picture too
        trained = float(f"{run.elapsed:.3f}")
        print(f"{why}: step {run.step}, best val loss {run.best_val:.4f}, {trained:.1f} s of training "
              f"({time.perf_counter() - speed['t_start']:.1f} s in all); "
              f"sample with: {shell_join(['python', script_word('sample.py'), path_word(out_dir), *force])}")
    return {"step": run.step, "best_val_loss": run.best_val, "out_dir": str(out_dir)}


if __name__ == "__main__":
    # its work is the run directory: a reader of its output that leaves must not end it
    work_is_files()
    exit_as_torchrun_worker(lambda: run_cli(main))  # under torchrun, without Python's shutdown (see there)

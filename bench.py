"""Measure tinygpt's speed in one process: training tokens/s and MFU per dtype, generation tokens/s
with and without the KV cache, the machine's matmul peak, peak memory. Prints a table and JSON.

    python bench.py [CONFIG.yaml] [--set KEY=VALUE ...] [--dtypes float32,bfloat16] [--steps 10]
                    [--gen-layers 6 --gen-heads 6 --gen-embd 384 --gen-block 512 --gen-tokens 500]
                    [--loss-steps 200] [--compile] [--attention] [--vs-hf] [--under-load] [--json FILE]

CONFIG defaults to the repository's configs/stories.yaml (the default model on its generated data: no
download), from whichever folder bench.py is started.
--vs-hf races greedy decoding against transformers' generate on the same weights (with --compile,
the compiled step too); --under-load measures decoding and training (in the first of --dtypes)
idle and beside a busy process.

Machines are shared and noisy, so every claim is a ratio of medians measured in the same run:
repeated short measurements, alternated between the variants (each going first in turn, after a warm-up
round that is not counted: `race`), median of each, its range (fastest to slowest) beside it.
"""
from __future__ import annotations

import copy
import ctypes
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

if __name__ == "__main__":  # before the imports below load torch: a Ctrl-C then is `interrupted`, not a traceback
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

import torch

from data.prepare import get_batch, load_for_training, prepare
from model import GPT, ModelConfig, generate
from tinygpt.checkpoint import atomic_write_text, check_name_fits, check_writable, regular_file_target
from tinygpt.config import Config, config_source, load_config, set_key
from tinygpt.errors import (ArgParser, UserError, count, dead_link, elide, folder_ending, read_capped, run_cli,
                            short, work_is_files)
from tinygpt.runtime import (ThreadPolicy, autocast, check_memory, check_training_fits, configure_cuda,
                             compile_decoding, cpu_kind, device_name, following_free_cores, int8_problem,
                             int8_weights, keep_freed_memory, model_memory, peak_flops, resolve_device, sync,
                             usable_cores)
from tinygpt.runs import run_lock
from tinygpt.training import make_optimizer, train_step


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds fn() takes, the device's queued work included."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def turns(names: list, r: int) -> list:
    """`names` in round r's order: each goes first in turn (in a fixed order, the second of two modes ran
    6-11% slower idle at the same thread count: bench_under_load)."""
    k = r % len(names)
    return names[k:] + names[:k]


def race(variants: dict, rounds: int, device: torch.device, warmup: int = 1) -> dict:
    """Seconds each of `variants` (name -> fn) takes in each of `rounds` rounds, the variants alternated and
    taking turns to go first, after `warmup` rounds that are not counted (first calls allocate and fill caches)."""
    times: dict = {name: [] for name in variants}
    for r in range(warmup + rounds):
        for name in turns(list(variants), r):
            t = timed(variants[name], device)
            if r >= warmup:
                times[name].append(t)
    return times


def spread(values: Sequence[float], scale: float = 1.0) -> list[float]:
    """[fastest, slowest] of a series, times `scale` (1e3: ms); for rates, as tokens/s: [slowest, fastest]."""
    return [min(values) * scale, max(values) * scale]


class TrainBench:
    """A model + optimizer for one dtype, stepping on real batches exactly as train.py does."""

    def __init__(self, cfg: Config, data, dtype: str, device: torch.device, compile: bool):
        torch.manual_seed(cfg.train.seed)
        self.model = GPT(cfg.model).to(device)
        self.step_model = torch.compile(self.model) if compile else self.model
        self.optimizer = make_optimizer(self.model, cfg.train, device)
        self.scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "float16"))
        self.autocast = autocast(dtype, device)
        gen = torch.Generator().manual_seed(cfg.train.seed)
        self.next_batch = lambda: get_batch(data.train, cfg.train.batch_size, cfg.model.block_size, gen, device)
        self.cfg, self.device = cfg, device

    def step(self) -> torch.Tensor:
        t = self.cfg.train
        return train_step(self.step_model, self.optimizer, self.scaler, self.autocast, self.next_batch,
                          t.grad_accum, t.grad_clip, t.lr)


def training_table(train: dict[str, dict], peaks: dict[str, float], base: str) -> str:
    """bench_training's results (with their MFU) as the printed table, one row per dtype."""
    ranges = {d: "{:.1f}-{:.1f}".format(*r["step_ms_range"]) for d, r in train.items()}
    # 79 columns (at 82 an 80-column terminal wrapped each row's peak); a range wider than its 14 (five-digit
    # ms, a CPU without native bfloat16) widens the column, so that a space still parts it from the median
    width = max(14, 1 + max(map(len, ranges.values())))
    lines = [f"{'dtype':<10}{'ms/step':>10}{'range':>{width}}{'tokens/s':>12}{'vs ' + base:>12}{'MFU':>8}"
             f"{'peak GFLOP/s':>13}"]
    for d, r in train.items():
        versus = r["tokens_per_s"] / train[base]["tokens_per_s"]
        lines.append(f"{d:<10}{r['step_ms']:>10.1f}{ranges[d]:>{width}}{r['tokens_per_s']:>12,.0f}"
                     f"{versus:>11.2f}x{r['mfu']:>8.1%}{peaks[d] / 1e9:>13.0f}")
    return "\n".join(lines)


def bench_training(cfg: Config, data, dtypes: list[str], device: torch.device, steps: int,
                   compile: bool) -> dict[str, dict]:
    """Median step time per dtype, the dtypes' steps interleaved so noise hits all alike."""
    benches = {d: TrainBench(cfg, data, d, device, compile) for d in dtypes}
    for b in benches.values():  # warm-up (and compilation)
        for _ in range(3):
            b.step()
    times = race({d: (lambda b=b: b.step().item()) for d, b in benches.items()}, steps, device, warmup=0)
    tokens = cfg.train.batch_size * cfg.train.grad_accum * cfg.model.block_size
    flops_per_token = next(iter(benches.values())).model.flops_per_token()
    out = {}
    for d in dtypes:
        med = statistics.median(times[d])
        out[d] = {"step_ms": med * 1e3, "step_ms_range": spread(times[d], 1e3), "tokens_per_s": tokens / med,
                  "achieved_flops": flops_per_token * tokens / med}
    return out


def loss_parity(cfg: Config, data, dtypes: list[str], device: torch.device, steps: int) -> dict[str, float]:
    """Train each dtype `steps` steps from the same init on the same batches; mean loss of the last 10."""
    out = {}
    for d in dtypes:
        b = TrainBench(cfg, data, d, device, compile=False)
        losses = [b.step() for _ in range(steps)]
        out[d] = torch.stack(losses[-10:]).mean().item()
    return out


def bench_generation(mcfg: ModelConfig, n_tokens: int, device: torch.device, reps: int = 5) -> dict:
    """Greedy generation of n_tokens from a 1-token prompt, cached vs uncached, same text required."""
    torch.manual_seed(0)
    model = GPT(mcfg).to(device).eval()
    idx = torch.zeros(1, 1, dtype=torch.long, device=device)
    texts: dict[bool, list[int]] = {}

    def run(use_cache: bool) -> Callable[[], None]:
        def decode() -> None:
            texts[use_cache] = [int(t) for t in generate(model, idx, n_tokens, temperature=0, use_cache=use_cache)]
        return decode
    times = race({True: run(True), False: run(False)}, reps, device)
    cached, uncached = (n_tokens / statistics.median(times[c]) for c in (True, False))
    return {"cached_tokens_per_s": cached, "uncached_tokens_per_s": uncached, "speedup": cached / uncached,
            "cached_range": spread([n_tokens / t for t in times[True]]),
            "uncached_range": spread([n_tokens / t for t in times[False]]),
            "same_text": texts[True] == texts[False], "n_tokens": n_tokens,
            "model": f"{mcfg.n_layer}x{mcfg.n_head}x{mcfg.n_embd}, block {mcfg.block_size}"}


def bench_attention(cfg: Config, dtypes: list[str], device: torch.device, reps: int = 7) -> dict[str, dict]:
    """Forward + backward of one layer's causal attention at the config's shape, per dtype: PyTorch's
    fused SDPA kernel against model.matmul_attention (two batched matmuls), medians of alternated
    repeats. This is the measurement behind the model's choice of kernel on CPU in low precision."""
    import torch.nn.functional as F

    from model import causal_mask, matmul_attention
    m = cfg.model
    shape = (cfg.train.batch_size, m.n_head, m.block_size, m.head_size)  # (B, nh, T, hs)
    mask = causal_mask(m.block_size, m.block_size, device)
    kernels = {"sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
               "matmul": lambda q, k, v: matmul_attention(q, k, v, mask)}
    out = {}
    for d in dtypes:
        q, k, v = (torch.randn(shape, device=device, dtype=getattr(torch, d), requires_grad=True) for _ in range(3))

        def forward_backward(kernel: Callable) -> Callable[[], None]:
            def run() -> None:
                q.grad = k.grad = v.grad = None  # (not summed into the last call's)
                kernel(q, k, v).sum().backward()
            return run
        times = race({name: forward_backward(kernel) for name, kernel in kernels.items()}, reps, device)
        med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
        out[d] = {"sdpa_ms": med["sdpa"], "matmul_ms": med["matmul"], "sdpa_over_matmul": med["sdpa"] / med["matmul"],
                  "sdpa_ms_range": spread(times["sdpa"], 1e3), "matmul_ms_range": spread(times["matmul"], 1e3)}
    return out


def memory_bandwidth(device: torch.device, mbytes: int = 256, reps: int = 5) -> float:
    """Bytes per second this device reads: the median time of summing a large float32 tensor."""
    x = torch.ones(mbytes * 2**20 // 4, device=device)
    times = [timed(lambda: x.sum().item(), device) for _ in range(reps + 1)][1:]
    return x.numel() * 4 / statistics.median(times)


@torch.no_grad()
def matvec_time(model: GPT, device: torch.device, reps: int = 21) -> tuple[float, int]:
    """Seconds that one decoding step's matrix-vector products take alone, and the bytes they read:
    every Linear weight of the model (the tied LM head included) times a one-row input, in the
    model's order, as the step runs them; median of reps: what torch's own kernel (MKL's on a CPU)
    takes, outside the step."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    xs = {n: torch.randn(1, n, device=device, dtype=weights[0].dtype) for n in {w.size(1) for w in weights}}

    def products() -> None:
        for w in weights:
            torch.nn.functional.linear(xs[w.size(1)], w)  # (1, in) -> (1, out)
    times = [timed(products, device) for _ in range(reps + 1)][1:]
    return statistics.median(times), sum(w.numel() * w.element_size() for w in weights)


AGREE = 0.1  # logits "agree" within this share of their sd: float rounding stays under 0.04 (bfloat16 against
# float32), a model computed otherwise (one attention projection zeroed, other position embeddings) is 1-4 sds off


def logits_compared(model: GPT, hf, mcfg: ModelConfig, device: torch.device) -> dict:
    """tinygpt's and transformers' logits for one sequence of random tokens (the block, at most 256), no cache:
    the largest difference, their sd to read it against, and whether they agree (within AGREE sds). Greedy tokens
    alone said little: a random model's greedy path repeats a token or two, whatever its attention does."""
    seq = torch.randint(0, mcfg.vocab_size, (1, min(mcfg.block_size, 256)), generator=torch.Generator().manual_seed(1))
    seq = seq.to(device)
    with torch.no_grad():
        ours = model(seq).float()  # (1, T, V)
        theirs = hf(seq, attention_mask=torch.ones_like(seq)).logits.float()  # (1, T, V)
    largest, sd = float((ours - theirs).abs().max()), float(ours.std())
    return {"logits_max_diff": largest, "logits_sd": sd, "logits_agree": largest <= AGREE * sd}


def bench_vs_hf(mcfg: ModelConfig, n_tokens: int, device: torch.device, reps: int = 5,
                compile_decoding_step: bool = False) -> dict:
    """Greedy decoding of the same weights by tinygpt (KV cache) and by Hugging Face transformers'
    GPT2LMHeadModel.generate (its KV cache), alternated, medians of `reps`; the tokens must be the
    same, and so must the logits of random tokens (logits_compared: the same model). Beside them, the
    limit that memory bandwidth sets: decoding one token reads every weight once (the embedding is a
    lookup, but the tied LM head reads the whole matrix), at the faster of the rates a streaming sum and
    the matrix products alone read. Where the device runs them, tinygpt
    with int8 weights too (sample.py --dtype int8), quantized from the same weights. With
    compile_decoding_step, also tinygpt with its decoding step compiled (sample.py --compile), and
    the seconds that compiling took, and the int8 model with its step compiled, raced against the
    int8 model alone."""
    import transformers  # optional: pip install -r requirements-dev.txt

    from tinygpt.hf import gpt2_state_dict
    torch.manual_seed(0)
    # the weights as initialised: token embeddings scaled up (to keep float rounding from breaking near-ties)
    # made every greedy token the prompt's again, so "same tokens" held whatever the attention computed
    model = GPT(mcfg).to(device).eval()
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=mcfg.vocab_size, n_positions=mcfg.block_size, n_embd=mcfg.n_embd, n_layer=mcfg.n_layer,
        n_head=mcfg.n_head, activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None))
    missing, unexpected = hf.load_state_dict(gpt2_state_dict(model), strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)  # lm_head is tied
    hf = hf.to(device).eval()
    n_tokens = min(n_tokens, mcfg.block_size - 1)  # transformers cannot slide past its positions
    idx = torch.zeros(1, 1, dtype=torch.long, device=device)
    outputs: dict[str, list[int]] = {}

    def ours(gpt: GPT, name: str, decode_step: Callable | None = None) -> Callable[[], None]:
        def run() -> None:
            outputs[name] = [int(t) for t in generate(gpt, idx, n_tokens, temperature=0, decode_step=decode_step)]
        return run

    def theirs(hf_model, name: str) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                # (the mask given: transformers reads a prompt of pad_token_id as padding, and masked token 0)
                out = hf_model.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=n_tokens,
                                        min_new_tokens=n_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
            outputs[name] = out[0, 1:].tolist()
        return run

    def per_s(times: dict) -> dict[str, float]:  # each variant's median tokens/s
        return {name: n_tokens / statistics.median(ts) for name, ts in times.items()}

    low = copy.deepcopy(model).to(torch.bfloat16)  # the same weights in bfloat16, in both: half the bytes per token
    runs = {"tinygpt": ours(model, "tinygpt"), "transformers": theirs(hf, "transformers"),
            "tinygpt bfloat16": ours(low, "tinygpt bfloat16"),
            "transformers bfloat16": theirs(copy.deepcopy(hf).to(torch.bfloat16), "transformers bfloat16")}
    int8_why_not = int8_problem(mcfg, device, "--gen-embd")  # None: int8 weights run here (the shape: --gen-*)
    if int8_why_not is None:
        int8_model = int8_weights(copy.deepcopy(model))
        runs["tinygpt int8"] = ours(int8_model, "tinygpt int8")
    compile_s, step = None, None
    if compile_decoding_step:
        start = time.perf_counter()
        step = compile_decoding(model)
        compile_s = time.perf_counter() - start
        if step is not None:
            runs["tinygpt --compile"] = ours(model, "tinygpt --compile", step)
    times = race(runs, reps, device)
    int8_compiled = {}
    # the int8 model's step compiled, in a race of its own after the first: a second model compiled before
    # the first race slowed the first's compiled step 4x there (Zen 4), which sample.py, compiling one, never sees
    if compile_decoding_step and int8_why_not is None:
        int8_step = compile_decoding(int8_model)
        if int8_step is not None:
            compiled_race = race({"int8": runs["tinygpt int8"], "int8 --compile": ours(
                int8_model, "tinygpt int8 --compile", int8_step)}, reps, device)
            rates = per_s(compiled_race)
            int8_compiled = {"int8_compiled_tokens_per_s": rates["int8 --compile"],
                             "int8_in_compiled_race_tokens_per_s": rates["int8"],
                             "int8_compiled_over_int8": rates["int8 --compile"] / rates["int8"],
                             "int8_compiled_range": spread([n_tokens / t for t in compiled_race["int8 --compile"]]),
                             "same_tokens_int8_compiled": outputs["tinygpt int8 --compile"] == outputs["tinygpt int8"]}
    weight_bytes = read_per_token(model)
    matmul_share = matmul_time_share(runs["tinygpt"])
    matvec_s, matvec_bytes = matvec_time(model, device)
    # a streaming sum can read slower than the products do (an Intel Xeon whose 480 MiB L3 holds the
    # weights: 25 GB/s against 48, docs/results.md): the limit takes the faster of the two rates
    streaming = memory_bandwidth(device)
    bandwidth = max(streaming, matvec_bytes / matvec_s)
    tok_s = per_s(times)
    compiled = {}
    if step is not None:
        compiled = {"compiled_tokens_per_s": tok_s["tinygpt --compile"], "compile_s": compile_s,
                    "ratio_compiled": tok_s["tinygpt --compile"] / tok_s["transformers"],
                    "same_tokens_compiled": outputs["tinygpt --compile"] == outputs["transformers"]}
    int8_bytes = 0 if int8_why_not else read_per_token(int8_model)
    int8_results = {"int8_problem": int8_why_not} if int8_why_not else {
        "tinygpt_int8_tokens_per_s": tok_s["tinygpt int8"],
        "int8_weights_mb": int8_bytes / 2**20, "int8_bandwidth_limit_tokens_per_s": bandwidth / int8_bytes,
        "ratio_int8": tok_s["tinygpt int8"] / tok_s["transformers"],
        "ratio_int8_vs_bf16": tok_s["tinygpt int8"] / tok_s["transformers bfloat16"],
        "int8_same_tokens_share": sum(a == b for a, b in zip(outputs["tinygpt int8"], outputs["tinygpt"])) / n_tokens,
        **int8_compiled}
    return {**compiled, **int8_results, **logits_compared(model, hf, mcfg, device),
            "tinygpt_tokens_per_s": tok_s["tinygpt"],
            "transformers_tokens_per_s": tok_s["transformers"],
            "tinygpt_bf16_tokens_per_s": tok_s["tinygpt bfloat16"],
            "transformers_bf16_tokens_per_s": tok_s["transformers bfloat16"],
            "ratio_bf16": tok_s["tinygpt bfloat16"] / tok_s["transformers bfloat16"],
            "same_tokens_bf16": outputs["tinygpt bfloat16"] == outputs["transformers bfloat16"],
            "bf16_same_tokens_share": sum(a == b for a, b in zip(outputs["tinygpt bfloat16"], outputs["tinygpt"])) / n_tokens,
            "ratio": tok_s["tinygpt"] / tok_s["transformers"], "same_tokens": outputs["tinygpt"] == outputs["transformers"],
            "n_tokens": n_tokens, "rounds": reps, "weights_mb": weight_bytes / 2**20, "bandwidth_gb_s": bandwidth / 1e9,
            "streaming_gb_s": streaming / 1e9,
            "tokens_per_s_range": {name: spread([n_tokens / t for t in ts]) for name, ts in times.items()},
            "bandwidth_limit_tokens_per_s": bandwidth / weight_bytes, "matmul_share": matmul_share,
            "matvec_ms": matvec_s * 1e3, "matvec_gb_s": matvec_bytes / matvec_s / 1e9,
            "transformers": transformers.__version__}


def read_per_token(model: GPT) -> int:
    """Bytes of weights that decoding one token reads: every parameter and buffer (int8 weights and their
    scales too) but the embeddings, of which it reads one row each; the tied LM head reads the whole
    token embedding (with int8 weights the head has a copy of its own, and the embedding is a lookup)."""
    lookups = {id(model.pos_emb.weight)}
    if model.lm_head.weight is not model.tok_emb.weight:
        lookups.add(id(model.tok_emb.weight))
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()] if id(t) not in lookups}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def matmul_time_share(fn: Callable[[], None]) -> float:
    """The share of fn's CPU time (torch.profiler, self time of every op) spent in matrix products:
    for one-token decoding these are matrix-vector products, each reading a weight matrix once."""
    from torch.profiler import ProfilerActivity, profile
    # (torch 2.11 on CUDA warned, as the profile started, that the profiler clears its events at the
    # end of each cycle: this one profile is one cycle)
    with warnings.catch_warnings(), without_profiler_lines():
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    ops = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ops)
    return sum(e.self_cpu_time_total for e in ops if e.key in ("aten::mm", "aten::addmm", "aten::bmm")) / total


@contextmanager
def without_profiler_lines() -> Iterator[None]:
    """torch 2.13's profiler prints `USDT:... SyncActivityProfilerHandler.cpp:52] profiler_start` (and `_stop`) on
    stderr, in the middle of the table: the block runs with stderr in a temp file, whose other lines (a warning
    of the work profiled) are printed after it."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as caught:
        saved = os.dup(2)
        try:
            os.dup2(caught.fileno(), 2)
            yield
        finally:
            try:  # (C stdio's buffer: its lines come out at the process's exit otherwise)
                ctypes.CDLL(None).fflush(None)
            except (OSError, TypeError, AttributeError):  # (no C library to ask: Windows)
                pass
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            for line in caught.read().decode(errors="replace").splitlines(keepends=True):
                if "SyncActivityProfilerHandler" not in line:
                    sys.stderr.write(line)


# the spin loop asks the kernel itself (Linux's prctl PR_SET_PDEATHSIG) for SIGTERM when bench.py dies: a
# preexec_fn would run Python in a child forked from a process whose torch threads run (a deadlock risk)
BUSY_LOOP = """import ctypes, os, signal, time
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
except (AttributeError, OSError):  # not Linux: the loop below checks its parent now and then
    pass
end = time.monotonic() + {seconds}
while time.monotonic() < end and os.getppid() == {parent}:
    for _ in range(100_000):
        pass
"""


@contextmanager
def busy_process(seconds: float = 600.0) -> Iterator[None]:
    """One competing busy process beside the benchmark (a Python spin loop, like a busy browser tab),
    stopped on exit (Ctrl-C and SIGTERM included), killed with us on Linux (even by SIGKILL), and
    ending by itself after `seconds` whatever happens to us (ended before the block did, it is a
    UserError: the block's figures are not all loaded ones). In its own session, so that a Ctrl-C in
    the terminal reaches only us (it would print the loop's KeyboardInterrupt traceback)."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(seconds=seconds, parent=os.getpid())],
                            start_new_session=True)
    try:
        time.sleep(0.3)  # let it get going (a SIGTERM here, too, must not leave it spinning)
        yield
        if proc.poll() is not None:  # it ended first: part of the "loaded" round ran idle
            raise UserError(f"the busy process ended before the loaded round did (its limit is {seconds:.0f} s): "
                            f"the loaded figures would be partly idle ones; on cores this slow, lower --gen-block "
                            f"or --gen-layers, or the config's size")
    finally:
        proc.kill()
        proc.wait()


def bench_under_load(cfg: Config, data, gcfg: ModelConfig, device: torch.device, dtype: str = "float32",
                     n_tokens: int = 200, steps: int = 8, reps: int = 6) -> dict[str, dict[str, float]]:
    """Greedy decoding (gcfg, KV cache, float32 weights) and training (cfg, in `dtype`) tokens/s, idle
    and beside one busy process, with torch's default threads (one per core), with the thread policy
    (runtime.ThreadPolicy: the cores the other processes leave free), and pinned to one core fewer
    than the default (its idle figure is the ceiling beside a busy process: the most the cores it
    leaves can do), and the mean thread count per step each ran with. Medians of `reps` rounds, the
    modes taking turns to go first; a fresh policy for each measurement, as each sample.py or
    train.py run starts one."""
    torch.manual_seed(0)
    model = GPT(gcfg).to(device).eval()
    idx = torch.zeros(1, 1, dtype=torch.long, device=device)
    trainer = TrainBench(cfg, data, dtype, device, compile=False)
    tokens_per_step = cfg.train.batch_size * cfg.train.grad_accum * cfg.model.block_size
    default_threads = torch.get_num_threads()
    modes = {"default threads": default_threads, "policy": default_threads,
             "one core fewer": max(1, default_threads - 1)}

    def decode(policy: ThreadPolicy | None) -> tuple[float, list[int]]:
        used = []
        def run() -> None:
            for token in following_free_cores(generate(model, idx, n_tokens, temperature=0), policy):  # as sample.py
                int(token)
                used.append(torch.get_num_threads())
        return n_tokens / timed(run, device), used

    def train(policy: ThreadPolicy | None) -> tuple[float, list[int]]:
        used = []
        def run() -> None:
            for _ in range(steps):
                if policy is not None:  # as train.py
                    policy.update()
                used.append(torch.get_num_threads())
                trainer.step().item()
        return steps * tokens_per_step / timed(run, device), used

    results: dict[str, list[float]] = {}
    threads: dict[str, list[int]] = {}
    trainer.step()  # warm-up (the first calls allocate and fill caches)
    decode(None)
    for rep in range(reps):
        for load in turns(["idle", "loaded"], rep):  # (idle went first in every round until 2026-12-06)
            with busy_process() if load == "loaded" else nullcontext():
                for mode in turns(list(modes), rep):
                    torch.set_num_threads(modes[mode])
                    for work, fn in (("decode", decode), ("train", train)):
                        tokens_per_s, used = fn(ThreadPolicy() if mode == "policy" else None)
                        results.setdefault(f"{work}|{mode}|{load}", []).append(tokens_per_s)
                        threads.setdefault(f"{work}|{mode}|{load}", []).extend(used)
    torch.set_num_threads(default_threads)
    out: dict[str, dict[str, float]] = {}
    for key, values in results.items():
        work, mode, load = key.split("|")
        out.setdefault(f"{work}|{mode}", {})[load] = statistics.median(values)
        out[f"{work}|{mode}"][f"{load}_range"] = spread(values)
        out[f"{work}|{mode}"][f"{load}_threads"] = statistics.fmean(threads[key])
    for r in out.values():
        r["loaded_over_idle"] = r["loaded"] / r["idle"]
    return out


def peak_memory_mb(device: torch.device) -> float | None:
    """The device's peak allocation (CUDA), else this process's peak resident memory; None on Windows."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20  # (device: cuda:1's, not the current device's)
    try:
        import resource
    except ImportError:  # Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # macOS counts bytes, Linux KiB


# the most each count may ask for: 20-1000x the defaults, so a benchmark ends within hours, not never
MAX_COUNTS = {"steps": 10_000, "loss_steps": 10_000, "gen_tokens": 10_000}
GEN_MODEL = {"gen_layers": 6, "gen_heads": 6, "gen_embd": 384, "gen_block": 512}  # the decoding benches' model


def check_args(args) -> list[str]:
    """Flags out of range are user errors, found before any work; returns the dtypes."""
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in ("float32", "bfloat16", "float16")]
    if bad or not dtypes:
        raise UserError(f"--dtypes={short(args.dtypes)}: use float32, bfloat16 and/or float16")
    if len(set(dtypes)) < len(dtypes):  # (it measured each once, without a word)
        raise UserError(f"--dtypes={short(args.dtypes)} names a dtype twice; give each once")
    for flag, most in MAX_COUNTS.items():
        if not 0 <= getattr(args, flag) <= most:
            raise UserError(f"--{flag.replace('_', '-')}={getattr(args, flag)} must be in [0, {most:,}] (0 skips it)")
    for flag in ("gen_layers", "gen_heads", "gen_embd", "gen_block"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')}={getattr(args, flag)} must be >= 1")
    if args.gen_embd % args.gen_heads:
        raise UserError(f"--gen-embd={args.gen_embd} is not divisible by --gen-heads={args.gen_heads}")
    if not (args.steps or args.loss_steps or args.gen_tokens or args.attention or args.vs_hf or args.under_load):
        raise UserError("--steps 0 and --gen-tokens 0 leave nothing to measure: keep one, or add --loss-steps, "
                        "--attention, --vs-hf or --under-load")
    moved = [f"--{flag.replace('_', '-')}" for flag, default in GEN_MODEL.items() if getattr(args, flag) != default]
    if moved and not (args.gen_tokens or args.vs_hf or args.under_load):  # (ignored without a word)
        raise UserError(f"{' and '.join(moved)} set{'s' * (len(moved) == 1)} the model that --gen-tokens, --vs-hf "
                        f"and --under-load decode with: with none of them it changes nothing; add one, or leave "
                        f"{'it' if len(moved) == 1 else 'them'} out")
    if args.compile and not (args.steps or args.vs_hf):
        raise UserError("--compile compiles the training step of --steps and the decoding step of --vs-hf: with "
                        "neither it would change nothing; add one, or leave --compile out")
    for item in args.set:  # settings bench.py takes as flags: the config's would be ignored without a word
        key = set_key(item)
        value = elide(item.split("=", 1)[1].strip(), 40) if "=" in item else ""
        flag = {"train.dtype": f"--dtypes {value or 'bfloat16'} (a list: float32,bfloat16)",
                "train.compile": "--compile"}.get(key)
        if flag:
            raise UserError(f"--set {elide(item, 80)}: bench.py measures what its flags ask for, not {key}: "
                            f"give {flag}")
        if key == "train.init_from":  # (it timed random weights, the JSON listing the setting as if applied)
            raise UserError(f"--set {elide(item, 80)}: bench.py times random weights of the config's shape, never "
                            f"a run's: drop train.init_from")
    if args.vs_hf and args.gen_block < 2:  # transformers decodes at most gen_block - 1 tokens past the prompt
        raise UserError(f"--vs-hf needs --gen-block >= 2 (not {args.gen_block}): transformers cannot decode past "
                        f"its positions, so a context of one token leaves nothing to decode")
    if args.json is not None:
        check_json_target(args.json)
    if args.vs_hf:  # imported now: found missing (or broken: a dependency of another version) after the other
        try:  # benchmarks ran, their results were lost to a traceback
            importlib.import_module("transformers")
        except ModuleNotFoundError as e:
            if e.name != "transformers":
                raise UserError(f"--vs-hf: transformers cannot be imported ({e}); mend its install (pip install -U "
                                f"transformers), or leave --vs-hf out") from None
            raise UserError("--vs-hf needs Hugging Face transformers: pip install transformers "
                            "(or pip install -r requirements-dev.txt)") from None
        except Exception as e:  # (a version that does not import with this torch, say)
            raise UserError(f"--vs-hf: transformers cannot be imported ({type(e).__name__}: {short(str(e))}); mend "
                            f"its install (pip install -U transformers), or leave --vs-hf out") from None
    return dtypes


def check_json_target(text: str) -> None:
    """Refuse a --json path the results cannot be written to now: a refusal after the benchmark
    loses its results (minutes of measurement)."""
    if not text:  # Path('') is '.', the current folder
        raise UserError("--json '' is an empty path; give a file name, e.g. --json bench.json")
    if text == "-":  # (a file named '-' was written: the results are printed on standard output already)
        raise UserError("--json - would be a file named '-'; the results are printed on standard output already: "
                        "give a file name, e.g. --json bench.json")
    if (why := folder_ending(text)) is not None:  # Path drops a final / or /.: a file named like the folder
        raise UserError(f"--json {why}; give a file name, e.g. {os.path.join(os.path.normpath(text), 'bench.json')}")
    try:
        check_name_fits(Path(text))  # (first: a name over 255 bytes cannot even be looked up)
    except UserError as e:
        raise UserError(f"--json: {e}") from None
    if Path(text).is_dir():
        raise UserError(f"--json {text} is a folder; give a file name, e.g. {Path(text) / 'bench.json'}")
    try:
        target = regular_file_target(Path(text))  # /dev/null or a pipe: the write would replace it
    except UserError as e:
        raise UserError(f"--json: {e}") from None
    if (dead := dead_link(Path(text))) is not None:  # a link to nothing (a loop is refused above): written through,
        raise UserError(f"--json {short(text)} is {dead}; choose another file name")  # it made the missing folders
    if target.exists() and not is_bench_result(target):
        raise UserError(f"--json: it would overwrite {short(text)}, which is not a result that bench.py wrote "
                        f"(a file of yours); move it away, or choose another file name")
    check_writable(target.parent, "folder of --json")


# what every result of bench.py holds (main's first keys): an earlier result is told by them from a
# user's file of the same name, which --json must not replace
RESULT_KEYS = ("date", "machine", "device", "torch", "threads", "config", "overrides", "model")


def is_bench_result(path: Path) -> bool:
    """Did bench.py write the file at `path` (an earlier result, which a new one may replace, unlike
    the config it reads, a script, or notes of the user's)? By its content: a JSON object with
    RESULT_KEYS, which every result since the first has held."""
    try:  # a result is a few KB: a larger file is not ours, and is not read (nor a pipe read on)
        data = json.loads(read_capped(path, 2**20, lambda size: "larger than a result").decode("utf-8"))
    except (UserError, ValueError, RecursionError):  # too large, unreadable, not UTF-8, not JSON, nested too deep
        return False
    return isinstance(data, dict) and all(key in data for key in RESULT_KEYS)


DEFAULT_CONFIG = "configs/stories.yaml"  # of this repository, wherever bench.py is started from


def default_config() -> str:
    """The path of this repository's DEFAULT_CONFIG: as written from the repository's root (so results
    record it the same), else in full: from another folder, the relative path named no file."""
    shipped = Path(__file__).resolve().parent / DEFAULT_CONFIG
    return DEFAULT_CONFIG if Path(DEFAULT_CONFIG).resolve() == shipped else str(shipped)


def pin_or_note_threads(fixed: int) -> int | None:
    """train.threads: N pins the bench's CPU threads. Else it keeps torch's default, a thread a core,
    so that its figures are the machine's: and says so (on stderr, beside the table) when other processes
    keep cores busy now, since every parallel op then waits for the thread that shares a busy core (README,
    Performance). -> those busy cores, for the results (None where the threads are pinned)."""
    default = torch.get_num_threads()
    free = ThreadPolicy(fixed=fixed).threads  # (it sets torch's threads: `fixed`, else the cores free now)
    if fixed:
        return None
    torch.set_num_threads(default)
    if free < default:
        print(f"note: other processes keep {default - free} of the {default} cores busy now: on {default} threads "
              f"every parallel op waits for a busy core, so these figures measure that; rerun on an idle machine, "
              f"or pin the threads (--set train.threads={free})", file=sys.stderr)
    return default - free


def main(argv: Sequence[str] | None = None) -> dict:
    p = ArgParser(prog="bench.py", description="Measure training and generation speed (ratios in one run).")
    p.add_argument("config", nargs="?", default=None,
                   help="YAML config of the model and data to train (default: the repository's "
                        "configs/stories.yaml, offline)")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="override config keys, as train.py does")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated training dtypes (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="timed training steps per dtype, 0 skips (default: %(default)s)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the training model and, with --vs-hf, also race the compiled decoding step")
    p.add_argument("--loss-steps", type=int, default=0, help="also compare the loss after this many steps")
    p.add_argument("--gen-tokens", type=int, default=500,
                   help="greedy tokens the generation benchmark (and --vs-hf, at most --gen-block - 1) decodes; 0 "
                        "skips the benchmark, and --vs-hf then decodes 500 (default: %(default)s)")
    p.add_argument("--gen-layers", type=int, default=GEN_MODEL["gen_layers"],
                   help="layers of the decoding benchmarks' model, random weights (default: %(default)s)")
    p.add_argument("--gen-heads", type=int, default=GEN_MODEL["gen_heads"], help="its heads (default: %(default)s)")
    p.add_argument("--gen-embd", type=int, default=GEN_MODEL["gen_embd"],
                   help="its width, n_embd (default: %(default)s)")
    p.add_argument("--gen-block", type=int, default=GEN_MODEL["gen_block"],
                   help="its context, block_size (default: %(default)s)")
    p.add_argument("--attention", action="store_true",
                   help="also time one layer's attention, SDPA vs two matmuls, at the config's shape")
    p.add_argument("--vs-hf", action="store_true",
                   help="also decode the generation model's weights with Hugging Face transformers (needs it) "
                        "and compare tokens/s, beside the memory-bandwidth limit")
    p.add_argument("--under-load", action="store_true",
                   help="also measure decoding and training (in the first of --dtypes) idle and beside one busy "
                        "process, with torch's default threads, the thread policy and one core fewer")
    p.add_argument("--json", type=os.path.expanduser, help="also write the results here")
    args = p.parse_args(argv)
    if args.config is None:
        args.config = default_config()
    dtypes = check_args(args)
    if args.json is None:
        return run_benchmarks(args, dtypes)
    work_is_files()  # the results are a file too: a reader of the output who leaves must not lose them
    target = Path(args.json)  # (one bench.py at a time writes it: a second one's result replaced the first's)
    with run_lock(target.parent, "--json", name=f".{target.name}.lock",  # (a lock per file, not per folder)
                  in_use=f"--json={short(str(target))} is being written by another bench.py"):
        return run_benchmarks(args, dtypes)


def span(lo_hi: Sequence[float], fmt: str = ",.0f") -> str:
    """[lo, hi] -> '1,234-1,567': a median's range, as the tables print it."""
    return f"{lo_hi[0]:{fmt}}-{lo_hi[1]:{fmt}}"


def run_benchmarks(args, dtypes: list[str]) -> dict:
    """What main's flags ask for, printed, and written to --json; the results."""
    cfg = load_config(args.config, args.set)
    if args.under_load and cfg.train.threads:  # its rows would all run on the pinned count, labelled otherwise
        raise UserError(f"--under-load compares torch's default threads, the thread policy and one core fewer: "
                        f"train.threads={cfg.train.threads} pins them to one count; leave it out")
    device = resolve_device(cfg.train.device)
    if args.under_load and device.type == "cpu" and usable_cores() < 2:  # (every row ran on one thread, and "the
        # ceiling beside a busy process is 152% of the policy's idle figure" was printed: noise, as a result)
        raise UserError("--under-load compares torch's default threads, the thread policy and one core fewer beside "
                        "a busy process: it needs 2 cores or more, and this process may use 1")
    if device.type == "cuda":
        configure_cuda(cfg.train.tf32)
    keep_freed_memory()  # as train.py does
    data = load_for_training(cfg, config_source(args.config, args.set), folder=prepare(cfg))  # sets its vocab_size
    if args.steps or args.loss_steps or args.under_load:  # (--under-load trains the config too)
        for d in dtypes:
            check_training_fits(cfg, d, device)
    if args.attention:  # q, k, v, the scores, the weights and their gradients of one layer, in float32 at most
        B, T, C = cfg.train.batch_size, cfg.model.block_size, cfg.model.n_embd
        check_memory({"queries, keys, values": 6 * B * T * C * 4,
                      "attention weights": 4 * B * cfg.model.n_head * T * T * 4}, device,
                     f"--attention (batch {B}, block {T}, {cfg.model.n_head} heads)",
                     "lower train.batch_size or model.block_size")
    m = cfg.model
    gcfg = ModelConfig(block_size=args.gen_block, n_layer=args.gen_layers, n_head=args.gen_heads,
                       n_embd=args.gen_embd, vocab_size=m.vocab_size)  # the decoding benches' model
    if args.gen_tokens or args.vs_hf or args.under_load:
        parts = model_memory(gcfg)
        if args.vs_hf:  # transformers' float32 copy, ours in bfloat16, theirs in float32 on its way to bfloat16,
            parts["--vs-hf's copies"] = parts["weights"] * 15 // 4  # and ours in float32 on its way to int8 (1/4)
        check_memory(parts, device, "the --gen-* model", "lower --gen-layers, --gen-embd or --gen-block")
    busy = None if device.type == "cuda" else pin_or_note_threads(cfg.train.threads)  # (a refusal says only why)
    res: dict = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
                 "device": str(device), "device_name": device_name(device), "torch": torch.__version__,
                 **({"cpu": cpu_kind()} if device.type == "cpu" else {}),
                 "threads": torch.get_num_threads(),
                 **({"busy_cores_at_start": busy} if busy is not None else {}),  # (other processes': the note)
                 "config": args.config, "overrides": args.set,
                 "model": f"{m.n_layer}x{m.n_head}x{m.n_embd}, block {m.block_size}, batch {cfg.train.batch_size}"}
    if args.steps:  # MFU = achieved / peak, the peak measured here for each dtype (2 s each on a CPU)
        peaks, sources = {}, {}
        for d in dtypes:
            peaks[d], sources[d] = peak_flops(d, device, budget_s=2.0)
        res["peak_source"] = sources
        res["peak_gflops"] = {d: v / 1e9 for d, v in peaks.items()}
        train = bench_training(cfg, data, dtypes, device, args.steps, args.compile)
        for d, r in train.items():
            r["mfu"] = r.pop("achieved_flops") / peaks[d]
        res["train"] = train
        base = dtypes[0]
        print(f"training  {res['model']}, {device}, torch {torch.__version__}, {count(res['threads'], 'thread')}")
        print(training_table(train, peaks, base))
    if args.loss_steps:
        res["loss_after_steps"] = {"steps": args.loss_steps, **loss_parity(cfg, data, dtypes, device, args.loss_steps)}
        last = "the last step's" if args.loss_steps == 1 else f"the mean of the last {min(10, args.loss_steps)}"
        print(f"loss after {count(args.loss_steps, 'step')} ({last}): " +
              ", ".join(f"{d} {res['loss_after_steps'][d]:.4f}" for d in dtypes))
        diverged = [d for d in dtypes if not math.isfinite(res["loss_after_steps"][d])]
        if diverged:  # (train.py stops there, naming the step)
            print(f"note: the loss diverged in {', '.join(diverged)} (not finite): no comparison; lower train.lr "
                  f"(now {cfg.train.lr:g})", file=sys.stderr)
    if args.attention:
        res["attention"] = bench_attention(cfg, dtypes, device)
        print(f"attention of one layer, forward + backward, (B, nh, T, hs) = ({cfg.train.batch_size}, {m.n_head}, "
              f"{m.block_size}, {m.head_size}):")
        for d, r in res["attention"].items():
            print(f"  {d:<10} SDPA {r['sdpa_ms']:8.2f} ms ({span(r['sdpa_ms_range'], '.2f')})   two matmuls "
                  f"{r['matmul_ms']:8.2f} ms ({span(r['matmul_ms_range'], '.2f')})   SDPA / matmuls "
                  f"{r['sdpa_over_matmul']:.2f}")
    if args.gen_tokens:
        g = bench_generation(gcfg, args.gen_tokens, device)
        res["generate"] = g
        print(f"generation {g['model']}, {count(g['n_tokens'], 'token')}: KV cache "
              f"{g['cached_tokens_per_s']:,.0f} tok/s "
              f"({span(g['cached_range'])}), no cache {g['uncached_tokens_per_s']:,.0f} tok/s "
              f"({span(g['uncached_range'])}), {g['speedup']:.1f}x, same text: {g['same_text']}")
    if args.vs_hf:
        asked = args.gen_tokens or 500
        h = res["vs_hf"] = bench_vs_hf(gcfg, asked, device, compile_decoding_step=args.compile)
        rng = {name: f" ({span(r)})" for name, r in h["tokens_per_s_range"].items()}
        if h["n_tokens"] < asked:  # (transformers cannot slide past its positions)
            print(f"note: --vs-hf decodes at most --gen-block - 1 = {h['n_tokens']:,} tokens, not the "
                  f"{asked:,} asked: transformers' model has no position past its block",
                  file=sys.stderr)
        print(f"greedy decoding {gcfg.n_layer}x{gcfg.n_head}x{gcfg.n_embd}, block {gcfg.block_size}, "
              f"{count(h['n_tokens'], 'token')}, "
              f"same weights: tinygpt {h['tinygpt_tokens_per_s']:,.0f} tok/s{rng['tinygpt']}, transformers "
              f"{h['transformers']} generate {h['transformers_tokens_per_s']:,.0f} tok/s{rng['transformers']}: "
              f"{h['ratio']:.2f}x; same tokens: {h['same_tokens']} (medians of {h['rounds']} rounds, ranges in brackets)")
        print(f"  the same model: logits of {min(gcfg.block_size, 256)} random tokens differ by at most "
              f"{h['logits_max_diff']:.2g} (their sd {h['logits_sd']:.2g}): "
              f"{'they agree' if h['logits_agree'] else 'NOT the same model'}")
        if not h["logits_agree"] or not h["same_tokens"]:
            what = "computes other logits" if not h["logits_agree"] else "chose other greedy tokens"
            print(f"warning: --vs-hf: transformers {what} from the same weights: its tokens/s are no race with "
                  f"tinygpt's (a transformers version that reads GPT-2's weights otherwise?)", file=sys.stderr)
        if "compiled_tokens_per_s" in h:
            print(f"  tinygpt's decoding step compiled (sample.py --compile, {h['compile_s']:.0f} s to compile): "
                  f"{h['compiled_tokens_per_s']:,.0f} tok/s{rng['tinygpt --compile']}: {h['ratio_compiled']:.2f}x "
                  f"transformers; same tokens: "
                  f"{h['same_tokens_compiled']}")
        print(f"  bfloat16 weights in both (sample.py --dtype bfloat16): tinygpt {h['tinygpt_bf16_tokens_per_s']:,.0f} "
              f"tok/s{rng['tinygpt bfloat16']}, transformers {h['transformers_bf16_tokens_per_s']:,.0f} "
              f"tok/s{rng['transformers bfloat16']}: {h['ratio_bf16']:.2f}x; same "
              f"tokens: {h['same_tokens_bf16']}; {h['bf16_same_tokens_share']:.0%} of tinygpt's tokens equal its "
              f"float32 ones")
        if "int8_problem" in h:
            print(f"  int8 weights: not measured ({h['int8_problem']})")
        else:
            print(f"  int8 weights, quantized from the same weights (sample.py --dtype int8): tinygpt "
                  f"{h['tinygpt_int8_tokens_per_s']:,.0f} tok/s{rng['tinygpt int8']}: {h['ratio_int8']:.2f}x "
                  f"transformers' float32, {h['ratio_int8_vs_bf16']:.2f}x its bfloat16; "
                  f"{h['int8_same_tokens_share']:.0%} of tinygpt's tokens equal its float32 ones; "
                  f"{h['int8_weights_mb']:.1f} MiB read per token: about "
                  f"{h['int8_bandwidth_limit_tokens_per_s']:,.0f} tok/s for reading them alone")
            if "int8_compiled_tokens_per_s" in h:
                print(f"  int8 weights, the decoding step compiled (in a race with int8 alone, "
                      f"{h['int8_in_compiled_race_tokens_per_s']:,.0f} tok/s there): "
                      f"{h['int8_compiled_tokens_per_s']:,.0f} tok/s ({span(h['int8_compiled_range'])}), "
                      f"{h['int8_compiled_over_int8']:.2f}x int8 uncompiled; same tokens: "
                      f"{h['same_tokens_int8_compiled']}")
        print(f"  memory bandwidth {h['bandwidth_gb_s']:.1f} GB/s (the faster of a streaming sum, "
              f"{h['streaming_gb_s']:.1f}, and the products below) over {h['weights_mb']:.1f} MiB of weights read "
              f"per token: about {h['bandwidth_limit_tokens_per_s']:,.0f} tok/s for reading them alone (an estimate "
              f"from measured rates, the KV cache's reads not counted: not a hard ceiling)")
        ms = 1e3 / h["tinygpt_tokens_per_s"]
        print(f"  matrix products: {h['matmul_share']:.0%} of tinygpt's float32 decoding time (torch.profiler), "
              f"{h['matmul_share'] * ms:.1f} of its {ms:.1f} ms per token; 2x transformers needs "
              f"<= {1e3 / (2 * h['transformers_tokens_per_s']):.1f} ms per token in all")
        print(f"  the same products timed alone (F.linear, one row): {h['matvec_ms']:.1f} ms per token, reading "
              f"{h['matvec_gb_s']:.1f} GB/s: the floor with torch's own matrix-vector kernel")
    if args.under_load:
        res["under_load_dtype"] = dtypes[0]
        res["under_load"] = bench_under_load(cfg, data, gcfg, device, dtypes[0])
        u = res["under_load"]
        print(f"under load: one busy process beside us; decoding {gcfg.n_layer}x{gcfg.n_head}x{gcfg.n_embd} "
              f"(KV cache, float32), training {res['model']}, {dtypes[0]}; tokens/s, medians of 6 rounds, each mode first in 2")
        print(f"{'':<26}{'idle':>10}{'loaded':>10}{'loaded/idle':>13}   threads used (mean per step): idle, loaded;"
              f" ranges: idle, loaded")
        for key, r in u.items():
            work, mode = key.split("|")
            print(f"{work + ', ' + mode:<26}{r['idle']:>10,.0f}{r['loaded']:>10,.0f}{r['loaded_over_idle']:>12.0%}"
                  f"   {r['idle_threads']:.2f}, {r['loaded_threads']:.2f}; {span(r['idle_range'])}, "
                  f"{span(r['loaded_range'])}")
        for work in ("decode", "train"):
            ceiling = u[f"{work}|one core fewer"]["idle"]
            print(f"{work}: the ceiling beside a busy process (one core fewer, idle) is "
                  f"{ceiling / u[f'{work}|policy']['idle']:.0%} of the policy's idle figure; loaded, the policy "
                  f"reaches {u[f'{work}|policy']['loaded'] / ceiling:.0%} of that ceiling")
    res["peak_memory_mb"] = peak_memory_mb(device)
    if res["peak_memory_mb"] is not None:
        print(f"peak memory: {res['peak_memory_mb']:,.0f} MiB")
    print(json.dumps(json_numbers(res), allow_nan=False))
    if args.json:
        atomic_write_text(args.json, json.dumps(json_numbers(res), indent=1, allow_nan=False))
    return res


def json_numbers(value: Any) -> Any:
    """`value` with every NaN and infinity (a diverged loss) as None: JSON has no such numbers, and Python's
    `NaN` in the file fails every strict reader (JavaScript's JSON.parse among them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_numbers(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_numbers(item) for item in value]
    return value


if __name__ == "__main__":
    run_cli(main)

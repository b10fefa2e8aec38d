"""Page faults per training step of the default model, with and without keeping freed memory.

    python -m scripts.page_faults [--steps 20] [--reps 3]

(from the repository root). Each measurement is a fresh process that builds configs/stories.yaml's
model (4x4x128, block 128, batch 32; vocabulary 1,024), takes 3 warm-up steps, then counts the
minor page faults (getrusage) over --steps float32 training steps: once as train.py runs
(`runtime.keep_freed_memory()`, glibc's malloc keeps freed pages for reuse) and once with glibc's
defaults. Alternated --reps times; prints the medians and the ratio, then one JSON line.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Sequence

if __name__ == "__main__":  # before torch loads (the imports below): a Ctrl-C then is `interrupted`, not a traceback
    if not __package__:  # run as a file (python scripts/page_faults.py): tinygpt, a folder up, cannot be imported
        print("error: run it from the repository root as python -m scripts.page_faults", file=sys.stderr)
        sys.exit(2)
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

from scripts.reproduce import child_error_line
from tinygpt.errors import ArgParser, UserError, count, run_cli
from tinygpt.runtime import parent_death_signal

ROOT = Path(__file__).resolve().parents[1]
MAX_COUNTS = {"steps": 10_000, "reps": 100}  # (as bench.py's): a step takes ~0.1 s, each rep two processes
CHILD = """
import resource, sys, time, torch
from tinygpt import runtime
if sys.argv[1] == "keep":
    assert runtime.keep_freed_memory(), "not glibc"
from model import GPT, ModelConfig, cross_entropy
torch.manual_seed(0)
model = GPT(ModelConfig(block_size=128, n_layer=4, n_head=4, n_embd=128, vocab_size=1024))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(0, 1024, (32, 128))
def step():
    cross_entropy(model(x), x).backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
for _ in range(3):
    step()
steps = int(sys.argv[2])
before, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
for _ in range(steps):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / steps, (time.perf_counter() - t0) / steps)
"""


def measure(mode: str, steps: int) -> tuple[float, float]:
    """(faults per step, seconds per step) of one fresh process."""
    # (parent_death_signal: a measurement of 10,000 steps ran on alone, a core busy, after a kill -9 of this script)
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(steps)], cwd=ROOT, capture_output=True, text=True,
                          preexec_fn=parent_death_signal())
    if done.returncode != 0:  # (not glibc, or the machine refusing: out of memory)
        raise UserError(f"the {mode!r} measurement failed (exit {done.returncode}): {child_error_line(done.stderr)}")
    out = done.stdout.split()
    return float(out[0]), float(out[1])


def fewer(default: float, keep: float) -> str:
    """How many times fewer faults keep_freed_memory() takes; where it takes none there is no ratio
    (dividing by 1 instead printed the glibc defaults' count as one)."""
    if keep == default:  # (it said "ratio 1.0x fewer")
        return "the same count with both"
    if keep == 0:
        return "no faults at all with keep_freed_memory()"
    if keep > default:  # (a ratio below 1 printed "0.0x fewer" where the defaults faulted less)
        return f"ratio {keep / default:.1f}x more with keep_freed_memory()" if default else \
            "no faults at all with the glibc defaults"
    return f"ratio {default / keep:.1f}x fewer"


def main(argv: Sequence[str] | None = None) -> None:
    p = ArgParser(prog="python -m scripts.page_faults", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="float32 training steps a measurement (default 20)")
    p.add_argument("--reps", type=int, default=3, help="measurements of each kind, alternated (default 3)")
    args = p.parse_args(argv)
    for flag, most in MAX_COUNTS.items():  # before the first process: 0 steps divide by zero, 0 reps have no median
        if not 1 <= getattr(args, flag) <= most:
            raise UserError(f"--{flag}={getattr(args, flag)} must be in [1, {most:,}]")
    runs: dict[str, list[tuple[float, float]]] = {"keep": [], "glibc defaults": []}
    for rep in range(args.reps):  # each mode first in turn: a machine warming or cooling favours neither
        for mode in list(runs)[::1 if rep % 2 == 0 else -1]:
            runs[mode].append(measure(mode, args.steps))
    res = {mode: {"faults_per_step": statistics.median(f for f, _ in r), "ms_per_step": 1e3 * statistics.median(s for _, s in r),
                  "faults_each_run": [f for f, _ in r]} for mode, r in runs.items()}
    keep, default = res["keep"], res["glibc defaults"]
    print(f"minor page faults per training step, default model, medians of {count(args.reps, 'process', 'processes')} "
          f"each:")
    print(f"  glibc defaults        {default['faults_per_step']:>9,.0f}  ({default['ms_per_step']:.0f} ms/step; runs: "
          f"{', '.join(f'{f:,.0f}' for f in default['faults_each_run'])})")
    print(f"  keep_freed_memory()   {keep['faults_per_step']:>9,.0f}  ({keep['ms_per_step']:.0f} ms/step; runs: "
          f"{', '.join(f'{f:,.0f}' for f in keep['faults_each_run'])})")
    print(f"  {fewer(default['faults_per_step'], keep['faults_per_step'])}; "
          f"step time {keep['ms_per_step'] / default['ms_per_step']:.2f}x")
    print(json.dumps(res))


if __name__ == "__main__":
    run_cli(main)

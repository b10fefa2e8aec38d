"""Train every combination of a grid of config values, then tabulate and plot them side by side.

    python sweep.py CONFIG.yaml --grid model.n_head=1,2,4,8 model.n_embd=64,128
                    [--set KEY=VALUE ...] [--out DIR] [--quiet]

Each combination is checked like a `--set` (values are YAML scalars); an impossible one (say
n_embd=64 with n_head=3) is skipped with a note. Each valid one trains into its own run directory
under the sweep folder (default out/sweeps/<config stem>), named after its values, e.g.
`n_head=4,n_embd=128`. Running the same command again skips finished runs (ckpt.pt at max_iters),
resumes unfinished ones from their ckpt.pt, and restarts a run that stopped before its first
checkpoint; a run directory trained with other settings (say, another --set) is reported, not
reused. At the end it prints the table and writes results.md, results.csv and val_loss.png
(with matplotlib) into the sweep folder: the same report as compare.py.

Each run is `python train.py ...` in a subprocess, not train.main() in this process: a crash, an
out-of-memory kill or a user error in one run is reported and the sweep goes on with the next;
every run starts from a clean process (seeds, threads, device memory); and Ctrl-C is passed to the
run once, so it saves its checkpoint before the sweep stops. The cost is ~2 s of start-up per run.
Exit code: 0 when every run finished, 1 when some run failed (the report is still written), 2 for
a user error in the sweep's own arguments.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

from tinygpt.checkpoint import check_writable, load_checkpoint
from tinygpt.config import Config, all_keys, flat_config, load_config, parse_overrides, read_yaml
from tinygpt.errors import ArgParser, UserError, run_cli
from tinygpt.plots import MATPLOTLIB_NOTE
from tinygpt.report import write_report
from tinygpt.runs import summarize_run

TRAIN_PY = Path(__file__).resolve().parent / "train.py"
UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")  # anything else in a run directory name becomes '_'
MAX_NAME = 120
# a rerun may change these and still reuse a run: the step count decides skip or resume, the rest
# does not change what is computed
REUSABLE_ACROSS = {"train.out_dir", "train.max_iters", "train.device", "train.compile", "model.vocab_size"}

# ---- the grid ----


def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
    """['model.n_head=1,2,4', ...] -> {'model.n_head': ['1', '2', '4'], ...} (value texts, in order)."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        values = [v.strip() for v in text.split(",")]
        if not sep or key.count(".") != 1 or not all(values):
            raise UserError(f"--grid '{item}' must look like SECTION.KEY=V1,V2,..., e.g. model.n_head=1,2,4")
        if key in grid:
            raise UserError(f"--grid {key} is given twice; list all its values once: {key}=V1,V2,...")
        grid[key] = list(dict.fromkeys(values))  # drop repeated values, keep the order
    return grid


def check_keys(config: str, grid: dict[str, list[str]], sets: Sequence[str]) -> None:
    """Refuse unknown keys in --grid and --set up front (with config's own message), and the keys
    the sweep sets itself; a bad *value* only makes its combinations invalid."""
    read_yaml(config)  # a missing or broken config file: its one-line error
    known = set(all_keys())
    for key in (f"{s}.{k}" for s, d in parse_overrides(sets).items() for k in d):
        if key == "train.out_dir":
            raise UserError("--set train.out_dir: the sweep gives each run its own out_dir; choose the "
                            "sweep folder with --out")
        if key not in known:
            load_config(config, sets)  # raises config's unknown-key error, with its suggestion
    for key, values in grid.items():
        if key == "train.out_dir":
            raise UserError("--grid train.out_dir: the sweep gives each run its own out_dir under --out")
        if key not in known or key == "model.vocab_size":
            try:
                load_config(config, [f"{key}={values[0]}"])
            except UserError as e:
                raise UserError(f"--grid {key}: {e}") from None


def run_names(keys: Sequence[str], combos: Sequence[tuple[str, ...]]) -> list[str]:
    """Filesystem-safe, unique directory names from the varied values: 'n_head=4,n_embd=128'."""
    short = [k.split(".", 1)[1] for k in keys]
    if len(set(short)) != len(short):  # e.g. the same field name in two sections
        short = list(keys)
    raw = [",".join(f"{k}={v}" for k, v in zip(short, combo)) for combo in combos]
    names = [UNSAFE.sub("_", r) for r in raw]
    for i, (name, r) in enumerate(zip(names, raw)):
        if len(name) > MAX_NAME or names.count(name) > 1:  # too long, or two values that sanitize alike
            names[i] = f"{name[:MAX_NAME]}-{hashlib.sha1(r.encode()).hexdigest()[:8]}"
    return names


# ---- running one training ----


def run_training(cmd: list[str]) -> tuple[int, int | None]:
    """Run train.py as a subprocess; return (exit code, the signal that interrupted the sweep or None).

    The child runs in its own session, so a Ctrl-C in the terminal reaches it only through us,
    exactly once: it then saves ckpt.pt and exits, and a second Ctrl-C stops it at once."""
    received: list[int] = []
    sys.stdout.flush()  # our notes first, then the run's output
    proc = subprocess.Popen(cmd, start_new_session=True)

    def forward(signum: int, frame) -> None:
        received.append(signum)
        proc.send_signal(signum)

    old = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return rc, (received[0] if received else None)


def changed_settings(saved: dict, cfg: Config) -> list[str]:
    """'key=old (now new)' for each setting in which a run's checkpoint differs from this sweep's."""
    old = {f"{s}.{k}": v for s, values in saved.items() for k, v in values.items()}
    return [f"{k}={old.get(k)!r} (now {v!r})" for k, v in flat_config(cfg).items()
            if k not in REUSABLE_ACROSS and old.get(k) != v]


def existing_run(run_dir: Path, cfg: Config) -> tuple[str, str]:
    """What to do with run_dir: ('train' | 'resume' | 'skip' | 'refuse', a note saying why). A run
    that stopped before its first checkpoint is started again (train.py rewrites its config.yaml
    and metrics.csv); a folder with best.pt but no ckpt.pt is left alone: no weights file is ever
    deleted."""
    if (run_dir / "ckpt.pt").is_file():
        try:
            ckpt = load_checkpoint(run_dir / "ckpt.pt")
        except UserError as e:
            return "refuse", f"failed: {e}"
        changed = changed_settings(ckpt["config"], cfg)
        if changed:  # e.g. the same grid rerun with another --set: not the run asked for
            return "refuse", (f"failed: {run_dir} holds a run with other settings ({', '.join(changed)}); it is "
                              f"not reused: choose another --out, or delete it to retrain")
        if ckpt["step"] >= cfg.train.max_iters:
            return "skip", f"finished earlier (step {ckpt['step']}), skipped"
        return "resume", f"resuming from step {ckpt['step']} of {cfg.train.max_iters}"
    if (run_dir / "best.pt").is_file():
        return "refuse", (f"failed: {run_dir} has best.pt but no ckpt.pt to resume from; it is left as it is: "
                          f"move it away (or delete it) to retrain, or choose another --out")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        return "train", f"{run_dir} has no checkpoint (it stopped before its first); starting it again"
    return "train", "training"


# ---- main ----


def main(argv: Sequence[str] | None = None) -> dict:
    """Train the grid's valid combinations (skipping finished runs), then report; see the module doc."""
    p = ArgParser(prog="sweep.py", description="Train every combination of a grid of config values.")
    p.add_argument("config", help="YAML config, e.g. configs/stories.yaml")
    p.add_argument("--grid", nargs="+", action="extend", required=True, metavar="KEY=V1,V2",
                   help="values to combine, e.g. --grid model.n_head=1,2,4 model.n_embd=64,128")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="overrides shared by every run, e.g. --set train.max_iters=500")
    p.add_argument("--out", type=Path, default=None, help="sweep folder (default: out/sweeps/<config stem>)")
    p.add_argument("--quiet", action="store_true", help="no progress bars from the runs")
    args = p.parse_args(argv)

    grid = parse_grid(args.grid)
    check_keys(args.config, grid, args.set)
    out = args.out if args.out is not None else Path("out/sweeps") / Path(args.config).stem
    check_writable(out, "--out")  # before any training, not at the report
    keys = list(grid)
    combos = list(itertools.product(*grid.values()))
    names = run_names(keys, combos)

    # ---- validate every combination before any training ----
    plan = []
    for name, combo in zip(names, combos):
        run_dir = out / name
        # json.dumps quotes the path as a YAML string, whatever characters it holds
        overrides = [*args.set, *(f"{k}={v}" for k, v in zip(keys, combo)),
                     f"train.out_dir={json.dumps(str(run_dir))}"]
        try:
            cfg = load_config(args.config, overrides)
        except UserError as e:
            print(f"skip {name}: {e}")
            continue
        plan.append((name, combo, run_dir, overrides, cfg))
    if not plan:
        raise UserError(f"no valid combination in --grid {' '.join(args.grid)} (see the notes above)")
    print(f"sweep: {len(plan)} run(s) of {len(combos)} combination(s) into {out}")

    # ---- train (or skip, or resume) each run ----
    rows, failed = [], []
    for i, (name, combo, run_dir, overrides, cfg) in enumerate(plan, 1):
        tag = f"[{i}/{len(plan)}] {name}"
        action, why = existing_run(run_dir, cfg)
        print(f"{tag}: {why}")
        varied = dict(zip(keys, combo))
        if action == "refuse":
            failed.append(name)
            rows.append({"run": name, **varied, "status": "failed (not reusable)"})
            continue
        if action == "skip":
            rows.append({**summarize_run(run_dir, name), **varied})
            continue
        cmd = [sys.executable, str(TRAIN_PY), args.config, "--set", *overrides]
        cmd += ["--resume"] * (action == "resume") + ["--quiet"] * args.quiet
        t0 = time.perf_counter()
        rc, signum = run_training(cmd)
        if (run_dir / "config.yaml").is_file():
            row = {**summarize_run(run_dir, name), **varied}
        else:
            row = {"run": name, **varied, "status": ""}
        if signum is not None:
            rows.append(row)
            write_report(rows, keys, out, title=f"Sweep of {args.config} (interrupted)")
            print(f"{tag}: interrupted; rerun the same command to resume the sweep "
                  f"(results so far: {out / 'results.md'})")
            sys.exit(128 + signum)
        if rc != 0:
            failed.append(name)
            row["status"] = f"failed (exit {rc})" + (f", {row['status']}" if row["status"] else "")
            print(f"{tag}: failed with exit code {rc} (its error is above); going on with the next run")
        else:
            print(f"{tag}: done in {time.perf_counter() - t0:.1f} s")
        rows.append(row)

    # ---- report ----
    table, png = write_report(rows, keys, out, title=f"Sweep of {args.config} over {', '.join(keys)}")
    print()
    print(table, end="")
    print(f"wrote {out / 'results.md'}, {out / 'results.csv'}" + (f", {png}" if png else ""))
    if png is None:
        print(MATPLOTLIB_NOTE.format(name="val_loss.png"))
    if failed:
        print(f"{len(failed)} of {len(plan)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)
    return {"out": str(out), "rows": rows, "runs": [str(run_dir) for _, _, run_dir, _, _ in plan],
            "plot": str(png) if png else None}


if __name__ == "__main__":
    run_cli(main)

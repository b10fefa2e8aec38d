"""The default run, old against new, in one run of this script: wall time and what the model learns.

    python -m scripts.default_run [--seeds 3] [--old 802b8d0] [--out out/default_run] [--skip-old]

(from the repository root, on a machine with nothing else running: the wall times are the point.)

1. The current default, once per seed (train.seed = 1337, 1338, ...): `python train.py
   configs/stories.yaml`, then `python probe.py`.
2. The previous default: `git archive OLD` (the tinygpt and configs/stories.yaml of that commit) into
   a temp folder, and `python train.py configs/stories.yaml` there, as a user of that version ran it;
   then its own probe.py.

Every run prepares its data afresh (generating and tokenizing the corpus counts, as it does on a
new machine). It prints one table (wall time, val loss, the probe's shares, the best head on the
antecedent's attribute and its ratio to the distractor's) and whether each new run meets the
targets: antecedent >= 85%, distractor <= 10%, best head >= 5x, wall time <= 0.8x the old run's.
The last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = "802b8d0"  # the last commit of the previous default (configs/stories.yaml, word tokens, 4x4x128)
TARGETS = {"antecedent": 0.85, "distractor": 0.10, "ratio": 5.0, "time": 0.8}


def timed_run(args: list[str], cwd: Path) -> tuple[float, str]:
    """Run `python ARGS` in cwd; (seconds, stdout); a failure stops the script with its error."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} failed in {cwd} ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - t0, done.stdout


def train_and_probe(cwd: Path, out: Path, sets: list[str]) -> dict:
    """Train configs/stories.yaml in cwd into out (fresh data), probe it; the figures."""
    seconds, _ = timed_run(["train.py", "configs/stories.yaml", "--quiet", "--set", f"train.out_dir={out / 'run'}",
                            f"data.prepared_dir={out / 'prepared'}", "train.plot=never", *sets], cwd)
    _, printed = timed_run(["probe.py", str(out / "run"), "--device", "cpu"], cwd)
    probe = json.loads(printed.strip().splitlines()[-1])
    b, best = probe["behaviour"], probe["attention_attribute"]["best"]
    n = max(probe["references"], 1)
    val = [float(line.split(",")[2]) for line in (out / "run" / "metrics.csv").read_text().splitlines()[1:]
           if line.split(",")[2]]
    return {"wall_s": round(seconds, 1), "best_val_loss": min(val), "antecedent": b["antecedent"] / n,
            "distractor": b["distractor"] / n, "other": b["other"] / n,
            "head": f"L{best['layer']}H{best['head']}", "head_antecedent": best["antecedent"],
            "head_distractor": best["distractor"], "ratio": best["ratio"] or float("inf")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="runs of the current default (train.seed 1337, 1338, ...)")
    p.add_argument("--old", default=OLD, help="the commit whose default is the baseline")
    p.add_argument("--skip-old", action="store_true", help="only the current default")
    p.add_argument("--out", type=Path, default=Path("out/default_run"))
    args = p.parse_args()
    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for i in range(args.seeds):  # the current default first: its figures are the point
        seed = 1337 + i
        print(f"current default, seed {seed}: training ...", flush=True)
        rows[f"current default, seed {seed}"] = r = train_and_probe(ROOT, out / f"seed{seed}", [f"train.seed={seed}"])
        print(f"  {json.dumps(r)}", flush=True)
    if not args.skip_old:
        with tempfile.TemporaryDirectory(prefix="tinygpt-old-") as tmp:
            archive = subprocess.run(["git", "archive", args.old], cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            print(f"previous default ({args.old}): training ...", flush=True)
            rows["previous default"] = r = train_and_probe(Path(tmp), out / "old", [])
            print(f"  {json.dumps(r)}", flush=True)

    old = rows.get("previous default")
    print(f"\n| run | wall s | vs previous | best val loss | antecedent | distractor | other | best head: "
          f"antecedent / distractor | targets |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for name, r in rows.items():
        ratio = r["wall_s"] / old["wall_s"] if old else None
        met = (r["antecedent"] >= TARGETS["antecedent"] and r["distractor"] <= TARGETS["distractor"]
               and r["ratio"] >= TARGETS["ratio"] and (ratio is None or ratio <= TARGETS["time"]))
        r["meets_targets"] = met if name != "previous default" else None
        print(f"| {name} | {r['wall_s']:.0f} | {f'{ratio:.2f}x' if ratio else ''} | {r['best_val_loss']:.4f} | "
              f"{100 * r['antecedent']:.1f}% | {100 * r['distractor']:.1f}% | {100 * r['other']:.1f}% | "
              f"{r['head']}: {100 * r['head_antecedent']:.1f}% / {100 * r['head_distractor']:.1f}% "
              f"({r['ratio']:.1f}x) | {'' if name == 'previous default' else 'met' if met else 'NOT met'} |")
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "old": args.old, "runs": rows}))


if __name__ == "__main__":
    main()

"""The default run, old against new, in one run of this script: wall time and what the model learns.

    python -m scripts.default_run [--seeds 3] [--first-seed 1337] [--old 802b8d0] [--out out/default_run] [--skip-old]
    python -m scripts.default_run --table SAVED_OUTPUT   # the table again, from the last line of a run's output

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

from tinygpt.report import stats

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
    p.add_argument("--first-seed", type=int, default=1337, help="the first of those seeds")
    p.add_argument("--old", default=OLD, help="the commit whose default is the baseline")
    p.add_argument("--skip-old", action="store_true", help="only the current default")
    p.add_argument("--out", type=Path, default=Path("out/default_run"))
    p.add_argument("--table", type=Path, metavar="JSON", help="only print the table of a saved run's last line")
    args = p.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text(encoding="utf-8").strip().splitlines()[-1])["runs"]))
        return
    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for i in range(args.seeds):  # the current default first: its figures are the point
        seed = args.first_seed + i
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

    print()
    print(table(rows))
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "old": args.old, "runs": rows}))


def table(rows: dict[str, dict]) -> str:
    """The markdown table: a row per run (marking each current run against the targets), then the
    current runs' mean ± sd (tinygpt.report.stats)."""
    old = rows.get("previous default")
    lines = ["| run | wall s | vs previous | best val loss | antecedent | distractor | other | best head: "
             "antecedent / distractor | targets |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, r in rows.items():
        ratio = r["wall_s"] / old["wall_s"] if old else None
        met = (r["antecedent"] >= TARGETS["antecedent"] and r["distractor"] <= TARGETS["distractor"]
               and r["ratio"] >= TARGETS["ratio"] and (ratio is None or ratio <= TARGETS["time"]))
        r["meets_targets"] = met if name != "previous default" else None
        lines.append(f"| {name} | {r['wall_s']:.0f} | {f'{ratio:.2f}x' if ratio else ''} | {r['best_val_loss']:.4f} | "
                     f"{100 * r['antecedent']:.1f}% | {100 * r['distractor']:.1f}% | {100 * r['other']:.1f}% | "
                     f"{r['head']}: {100 * r['head_antecedent']:.1f}% / {100 * r['head_distractor']:.1f}% "
                     f"({r['ratio']:.1f}x) | {'' if name == 'previous default' else 'met' if met else 'NOT met'} |")
    current = [r for name, r in rows.items() if name != "previous default"]
    if len(current) > 1:
        def pm(key: str, scale: float = 1.0, unit: str = "", digits: int = 1) -> str:
            s = stats([scale * r[key] for r in current])
            return f"{s['mean']:.{digits}f}{unit} ± {s['std']:.{digits}f}"
        ratio = f"{pm('wall_s', 1 / old['wall_s'], 'x', 2)}" if old else ""
        lines.append(f"| current default, mean ± sd ({len(current)} seeds) | {pm('wall_s', digits=0)} | {ratio} | "
                     f"{pm('best_val_loss', digits=4)} | {pm('antecedent', 100, '%')} | {pm('distractor', 100, '%')} | "
                     f"{pm('other', 100, '%')} | {pm('head_antecedent', 100, '%')} / {pm('head_distractor', 100, '%')} "
                     f"({pm('ratio')}x) | {sum(bool(r['meets_targets']) for r in current)} of {len(current)} met |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

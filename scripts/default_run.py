"""The default run, old against new, in one run of this script: wall time and what the model learns.

    python -m scripts.default_run [--seeds 3] [--old-seeds 1] [--first-seed 1337] [--old 802b8d0] [--out out/default_run]
    python -m scripts.default_run --table SAVED_OUTPUT ...  # the table again, from the last lines of runs' outputs

(from the repository root, on a machine with nothing else running: the wall times are the point.)

1. The current default, once per seed (train.seed = 1337, 1338, ...): `python train.py
   configs/stories.yaml`, then `python probe.py`.
2. The previous default, once per old seed (`--old-seeds`, the same seeds; 0 skips it): `git archive
   OLD` (the code and configs/stories.yaml of that commit) into a temp folder, and `python train.py
   configs/stories.yaml` there, as a user of that version ran it; then its own probe.py.

Every run prepares its data afresh (generating and tokenizing the corpus counts, as it does on a
new machine). It prints one table (wall time, val loss, the probe's shares, the best head on the
antecedent's attribute and its ratio to the distractor's) and whether each new run meets the
targets: antecedent >= 85%, distractor <= 10%, best head >= 5x, wall time <= 0.8x the old runs'
mean. The last line is JSON; `--table` merges the runs of several such outputs.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

if __name__ == "__main__":  # before torch loads (the imports below): a Ctrl-C then is `interrupted`, not a traceback
    if not __package__:  # run as a file (python scripts/default_run.py): tinygpt, a folder up, cannot be imported
        print("error: run it from the repository root as python -m scripts.default_run", file=sys.stderr)
        sys.exit(2)
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

from scripts.reproduce import check_fresh, child_error_line, is_figure, run, saved_json
from tinygpt.checkpoint import check_writable
from tinygpt.config import set_word
from tinygpt.errors import ArgParser, UserError, path_arg, run_cli, short
from tinygpt.report import stats
from tinygpt.runs import best_val_loss, read_metrics

ROOT = Path(__file__).resolve().parents[1]
OLD = "802b8d0"  # the last commit of the previous default (configs/stories.yaml, word tokens, 4x4x128)
TARGETS = {"antecedent": 0.85, "distractor": 0.10, "ratio": 5.0, "time": 0.8}
PREVIOUS = "previous default"  # the name of its rows ("previous default, seed 1337"; one run before: no seed)
MAX_SEEDS = 100  # runs of one group: each takes minutes
NUMBERS = ("wall_s", "best_val_loss", "antecedent", "distractor", "other", "head_antecedent", "head_distractor",
           "ratio")  # a run's figures in the table; "head" is its name, L<layer>H<head>


def train_and_probe(cwd: Path, out: Path, sets: list[str]) -> dict:
    """Train configs/stories.yaml in cwd into out (fresh data), probe it; the figures."""
    seconds, _ = run(["train.py", "configs/stories.yaml", "--quiet", "--set",
                      set_word("train.out_dir", str(out / "run")), set_word("data.prepared_dir", str(out / "prepared")),
                      "train.plot=never", *sets], cwd)
    _, printed = run(["probe.py", str(out / "run"), "--device", "cpu"], cwd)
    probe = json.loads(printed.strip().splitlines()[-1])
    b, best = probe["behaviour"], probe["attention_attribute"]["best"]
    if best is None:  # (a --set block_size too small for the stories' attributes)
        raise UserError(f"the probe of {out / 'run'} measured no head: no reference had its attribute in the window")
    n = max(probe["references"], 1)
    return {"wall_s": round(seconds, 1), "best_val_loss": best_val_loss(read_metrics(out / "run")),
            "antecedent": b["antecedent"] / n, "distractor": b["distractor"] / n, "other": b["other"] / n,
            "head": f"L{best['layer']}H{best['head']}", "head_antecedent": best["antecedent"],
            "head_distractor": best["distractor"],
            "ratio": math.inf if best["ratio"] is None else best["ratio"]}  # None: no weight on the distractor


def saved_runs(path: Path) -> dict[str, dict]:
    """The runs of a saved output's last line (--table), checked: a UserError names the file and
    what is wrong with it, so that table() only ever sees the figures it prints."""
    named = f"--table {path}"
    saved = saved_json(path, named, "a default_run (its last line is the JSON of its runs)")
    if saved is None:
        raise UserError(f"{named}: its last line is not the JSON line a default_run ends with")
    runs = saved.get("runs") if isinstance(saved, dict) else None
    if not isinstance(runs, dict) or not runs:
        raise UserError(f"{named}: its last line has no \"runs\" (an object of runs by name), as a default_run's has")
    for name, r in runs.items():
        if not isinstance(r, dict):
            raise UserError(f"{named}: run {short(name)} is {short(r)}, not an object of its figures")
        for key in NUMBERS:
            value = r.get(key)
            if key not in r:
                raise UserError(f"{named}: run {short(name)} has no {key!r}")
            # a ratio may be inf (no attention on the distractor); a wall time must be above 0 (the
            # previous default's mean wall time divides the others')
            if key == "wall_s" and not (is_figure(value) and value > 0):
                raise UserError(f"{named}: run {short(name)} has wall_s={short(value)}; it must be a number above 0 "
                                "up to 1e12")
            if not (is_figure(value) or (key == "ratio" and value == math.inf)):
                raise UserError(f"{named}: run {short(name)} has {key}={short(value)}; it must be a number in "
                                "[-1e12, 1e12]")
        if not isinstance(r.get("head"), str):
            raise UserError(f"{named}: run {short(name)} has head={short(r.get('head'))}; it must be a name like L3H3")
    return runs


def check_args(args) -> str | None:
    """Refuse, before any training (minutes each), what would stop the script later; return --old's
    commit hash (None with --old-seeds 0)."""
    for flag in ("seeds", "old_seeds"):
        if not 0 <= getattr(args, flag) <= MAX_SEEDS:
            raise UserError(f"--{flag.replace('_', '-')}={getattr(args, flag)} must be in [0, {MAX_SEEDS}] "
                            "(0 skips it)")
    if args.seeds == 0 and args.old_seeds == 0:
        raise UserError("--seeds 0 --old-seeds 0 leaves nothing to run; give at least one run")
    if not 0 <= args.first_seed <= 2**63 - 2 - MAX_SEEDS:  # train.seed's range (tinygpt.config)
        raise UserError(f"--first-seed={short(args.first_seed)} must be in [0, 2**63 - {2 + MAX_SEEDS}]")
    check_writable(ROOT / args.out, "--out")
    for group, runs in (("seed", args.seeds), ("old", args.old_seeds)):  # each run prepares and trains afresh, timed
        for seed in range(args.first_seed, args.first_seed + runs):
            check_fresh((ROOT / args.out).resolve() / f"{group}{seed}", "--out", args.out, ("run", "prepared"))
    if not args.old_seeds:
        return None
    rev, done = args.old, None
    if rev and not rev.startswith("-"):  # '' names nothing; '-x' would be read by git as an option
        try:
            done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT,
                                  capture_output=True, text=True)
        except OSError as e:
            raise UserError(f"--old {rev}: git cannot be run ({e.strerror}); the previous default is a git commit, "
                            "so install git, or skip it: --old-seeds 0") from None
    if done is None or done.returncode != 0:
        raise UserError(f"--old={short(rev)} is not a commit of the repository at {ROOT} (git rev-parse --verify); "
                        f"give one, e.g. --old {OLD}, or skip it: --old-seeds 0")
    return done.stdout.strip()


def main(argv: Sequence[str] | None = None) -> None:
    p = ArgParser(prog="python -m scripts.default_run", description=__doc__.splitlines()[0])
    training = {"seeds": 3, "old_seeds": 1, "first_seed": 1337, "old": OLD, "out": Path("out/default_run")}
    p.add_argument("--seeds", type=int, help="runs of the current default (train.seed 1337, 1338, ...; default 3)")
    p.add_argument("--old-seeds", type=int, help="runs of the previous default, the same seeds (0: none; default 1)")
    p.add_argument("--first-seed", type=int, help="the first of those seeds (default 1337)")
    p.add_argument("--old", help=f"the commit whose default is the baseline (default {OLD})")
    p.add_argument("--out", type=path_arg, help="where the runs go (default out/default_run)")
    p.add_argument("--table", type=path_arg, nargs="+", metavar="OUTPUT",
                   help="only print the table of saved outputs' last lines (their runs merged)")
    args = p.parse_args(argv)
    given = [f"--{key.replace('_', '-')}" for key in training if getattr(args, key) is not None]
    if args.table and given:  # (they were dropped without a word)
        p.error(f"{' '.join(given)}: --table only prints the table of saved outputs, it trains nothing")
    for key, default in training.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    if args.table:
        rows, came_from = {}, {}
        for path in args.table:
            # an output from before --old-seeds: its one old run trained with that config's seed, 1337
            for name, r in saved_runs(path).items():
                name = f"{PREVIOUS}, seed 1337" if name == PREVIOUS else name
                if name in rows:  # (the last would win: half of two machines' runs lost without a word)
                    raise UserError(f"{name!r} is in both {came_from[name]} and {path}: merge outputs of different "
                                    f"runs (e.g. --seeds 0 --old-seeds 2 --first-seed 1338 for the second)")
                rows[name], came_from[name] = r, path
        print(table(rows))
        return
    old_commit = check_args(args)
    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = {}
    for i in range(args.seeds):  # the current default first: its figures are the point
        seed = args.first_seed + i
        print(f"current default, seed {seed}: training ...", flush=True)
        rows[f"current default, seed {seed}"] = r = train_and_probe(ROOT, out / f"seed{seed}", [f"train.seed={seed}"])
        print(f"  {json.dumps(r)}", flush=True)
    if args.old_seeds:
        with tempfile.TemporaryDirectory(prefix="tinygpt-old-") as tmp:
            try:  # (the commit was verified before the training: what fails here is the machine, a full disk)
                archive = subprocess.run(["git", "archive", old_commit], cwd=ROOT, capture_output=True,
                                         check=True).stdout
                subprocess.run(["tar", "-x", "-C", tmp], input=archive, capture_output=True, check=True)
            except subprocess.CalledProcessError as e:
                raise UserError(f"{e.cmd[0]} {e.cmd[1]} failed (exit {e.returncode}): "
                                f"{child_error_line(e.stderr)}") from None
            for i in range(args.old_seeds):
                seed = args.first_seed + i
                print(f"previous default ({args.old}), seed {seed}: training ...", flush=True)
                rows[f"{PREVIOUS}, seed {seed}"] = r = train_and_probe(Path(tmp), out / f"old{seed}",
                                                                        [f"train.seed={seed}"])
                print(f"  {json.dumps(r)}", flush=True)

    print()
    print(table(rows))
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "old": args.old, "runs": rows}))


def table(rows: dict[str, dict]) -> str:
    """The markdown table: a row per run (marking each current run against the targets, its wall
    time against the previous default's mean), then each group's mean ± sd where it has more than
    one run (tinygpt.report.stats)."""
    old = [r for name, r in rows.items() if name.startswith(PREVIOUS)]
    current = [r for name, r in rows.items() if not name.startswith(PREVIOUS)]
    old_wall = stats([r["wall_s"] for r in old])["mean"] if old else None
    # (the ratio counts the distractor's weight 0 where its attribute is outside the window, which raises it;
    # probe.py RUN prints it also over the references with both in view)
    lines = ["| run | wall s | vs previous | best val loss | antecedent | distractor | other | best head: "
             "antecedent / distractor (ratio; 0 for a distractor out of view) | targets |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, r in rows.items():
        ratio = r["wall_s"] / old_wall if old else None
        is_old = name.startswith(PREVIOUS)
        met = (r["antecedent"] >= TARGETS["antecedent"] and r["distractor"] <= TARGETS["distractor"]
               and r["ratio"] >= TARGETS["ratio"] and (ratio is None or ratio <= TARGETS["time"]))
        r["meets_targets"] = None if is_old else met
        lines.append(f"| {name} | {r['wall_s']:.0f} | {f'{ratio:.2f}x' if ratio else ''} | {r['best_val_loss']:.4f} | "
                     f"{100 * r['antecedent']:.1f}% | {100 * r['distractor']:.1f}% | {100 * r['other']:.1f}% | "
                     f"{r['head']}: {100 * r['head_antecedent']:.1f}% / {100 * r['head_distractor']:.1f}% "
                     f"({r['ratio']:.1f}x) | {'' if is_old else 'met' if met else 'NOT met'} |")
    for label, group in (("current default", current), (PREVIOUS, old)):
        if len(group) < 2:
            continue

        def pm(key: str, scale: float = 1.0, unit: str = "", digits: int = 1) -> str:
            """mean ± sd; the mean alone where a run's figure is infinite (a head's ratio with no weight
            on the distractor): the mean is then inf, and a spread would say nothing."""
            s = stats([scale * r[key] for r in group])
            sd = "" if s["std"] is None else f" ± {s['std']:.{digits}f}"
            return f"{s['mean']:.{digits}f}{unit}{sd}"
        ratio = f"{pm('wall_s', 1 / old_wall, 'x', 2)}" if old else ""
        met = f"{sum(bool(r['meets_targets']) for r in group)} of {len(group)} met" if group is current else ""
        lines.append(f"| {label}, mean ± sd ({len(group)} seeds) | {pm('wall_s', digits=0)} | {ratio} | "
                     f"{pm('best_val_loss', digits=4)} | {pm('antecedent', 100, '%')} | {pm('distractor', 100, '%')} | "
                     f"{pm('other', 100, '%')} | {pm('head_antecedent', 100, '%')} / {pm('head_distractor', 100, '%')} "
                     f"({pm('ratio')}x) | {met} |")
    return "\n".join(lines)


if __name__ == "__main__":
    run_cli(main)

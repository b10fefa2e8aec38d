"""Compare finished (or unfinished) runs side by side: one table, one plot.

    python compare.py RUN_DIR [RUN_DIR ...] [--out DIR]
    python compare.py RUN_DIR [RUN_DIR ...] --plot-only     # just the pictures, e.g. of one run

Reads each run's config.yaml and metrics.csv (nothing is trained or loaded onto a device) and
prints a table: the config keys whose values differ between the runs, parameters, status, best val
loss, final train loss, median tokens/s and training time (wall_s: from the first step, setup not
counted, summed over resumes). The same table goes to DIR/results.md and
DIR/results.csv, the val-loss curves to DIR/val_loss.png and, for two settings or more, each
setting's results to DIR/settings.png (when matplotlib is installed), each run labelled by its
differing config values. sweep.py writes its results with the same code (tinygpt/report.py). `--plot-only` draws
each run's RUN_DIR/loss.png (train and val loss, as train.py does) and, for several runs,
DIR/val_loss.png, and writes no table: the way to (re)draw the pictures of an existing run (a
folder holding a report is refused: its val_loss.png would sit beside another report's tables).
The report's files are replaced together or not at all (a full disk leaves the earlier report whole); a
file of theirs in DIR that no report wrote (the user's own results.md) is refused, not overwritten, and
so is a DIR that holds a run or a Hugging Face export, or lies inside a run. Runs of one setting with
the same train.seed are one seed in the statistics; runs trained on different data (their checkpoints'
data digest: the dataset's text changed) are different settings.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

if __name__ == "__main__":  # before the imports below load torch: a Ctrl-C then is `interrupted`, not a traceback
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

from tinygpt.checkpoint import dead_link, file_kind
from tinygpt.errors import (ArgParser, UserError, first_few, path_arg, path_word, run_cli, script_word, shell_join,
                            shell_quote, shown_path, work_is_files)
from tinygpt.plots import can_plot, plot_run
from tinygpt.report import (NEVER_COMPARED, check_report_folder, data_changed, differing_keys, group_by_setting,
                            pictures_note, write_report, write_val_loss)
from tinygpt.runs import REPORT_LOCK, not_a_run_file, run_lock, summarize_run


def run_labels(run_dirs: Sequence[Path]) -> list[str]:
    """Short unique labels: the folder names when they are distinct, else the paths as given."""
    names = [p.name or str(p) for p in run_dirs]
    return names if len(set(names)) == len(names) else [str(p) for p in run_dirs]


def check_not_a_sweep(run: Path) -> None:
    """Refuse a sweep's folder given for a run (it has no config.yaml but holds runs): name the runs."""
    if (run / "config.yaml").exists():
        return
    inner = sorted(d.name for d in run.iterdir() if d.is_dir() and (d / "config.yaml").is_file())
    if inner:  # (`DIR/*/`: the folders only, not the sweep's report files beside them)
        raise UserError(f"{shell_quote(run)} is not a run directory: it holds {len(inner)} run(s) "
                        f"({first_few(inner)}), as a "
                        f"sweep's folder does; give them: {shell_join(['python', script_word('compare.py')])} "
                        f"{shell_quote(path_word(run))}/*/")


def draw(args, rows: list[dict], varied: list[str]) -> list[str]:
    """--plot-only: each run's loss.png, and the val-loss comparison of several runs; the paths."""
    if not can_plot():
        raise UserError("--plot-only needs matplotlib: pip install matplotlib")
    for run in args.runs:  # before any is drawn: a link would be written through (as train.py refuses it)
        if odd := not_a_run_file(run / "loss.png"):
            raise UserError(f"{run / 'loss.png'} is {odd}: --plot-only writes the run's own loss.png; remove it")
    paths = []
    for run in args.runs:
        path = plot_run(run)
        if path is None:
            print(f"{run}: no metrics.csv yet, nothing to draw")
        else:
            paths.append(str(path))
    if len(rows) > 1:
        if (path := write_val_loss(group_by_setting(rows, varied), args.out)) is None:
            print(pictures_note([]))
        else:
            paths.append(str(path))
    print(f"wrote {', '.join(shown_path(p) for p in paths)}" if paths else "wrote nothing")
    return paths


def main(argv: Sequence[str] | None = None) -> dict:
    p = ArgParser(prog="compare.py", description="Tabulate and plot existing tinygpt runs side by side.")
    p.add_argument("runs", nargs="+", type=path_arg, metavar="RUN_DIR", help="run directories (train.out_dir)")
    p.add_argument("--out", type=path_arg, default=Path("out/compare"),
                   help="folder for results.md, results.csv, summary.csv, val_loss.png and (two settings or "
                        "more) settings.png (default: out/compare)")
    p.add_argument("--plot-only", action="store_true",
                   help="only draw: each RUN_DIR/loss.png, and for several runs --out/val_loss.png")
    args = p.parse_args(argv)

    given: dict[Path, Path] = {}
    for run in args.runs:
        if (dead := dead_link(run)) is not None:
            raise UserError(f"{run} is {dead}; give the run directory (train.out_dir)")
        if run.exists() and not run.is_dir():  # a checkpoint, a config (the run is the folder holding it), a pipe
            raise UserError(f"{run} is {file_kind(run)}; give the run directory (train.out_dir) that holds config.yaml "
                            f"and metrics.csv")
        if not run.is_dir():
            raise UserError(f"run directory not found: {run}")
        check_not_a_sweep(run)
        first = given.setdefault(run.resolve(), run)
        if first is not run:
            raise UserError(f"run directory {run} is given twice" + (f" (also as {first})" if first != run else ""))
    if args.plot_only and len(args.runs) == 1:  # only RUN/loss.png: --out is not written (a read-only checkout)
        return compare(args)
    check_report_folder(args.out, plot_only=args.plot_only)
    # held while it writes: a sweep or another comparison writing the same folder is refused
    with run_lock(args.out, "--out", "sweep or comparison", REPORT_LOCK):
        check_report_folder(args.out, plot_only=args.plot_only)  # again, held: a training that started meanwhile
        return compare(args)


def compare(args) -> dict:
    rows = [summarize_run(run, label) for run, label in zip(args.runs, run_labels(args.runs))]
    for row in rows:
        if row["note"]:
            print(row["note"], file=sys.stderr)
    varied = differing_keys(rows)
    if args.plot_only:
        return {"rows": rows, "varied": varied, "out": str(args.out), "plots": draw(args, rows, varied)}
    table, pngs = write_report(rows, varied, args.out, title=f"Comparison of {len(rows)} run{'s' * (len(rows) > 1)}")
    print(table, end="")
    if not varied and len(rows) > 1 and not data_changed(rows):  # (else the table says their data differ)
        print(f"(the runs' configs are identical apart from {', '.join(sorted(NEVER_COMPARED))}, which change no result)")
    written = [args.out / name for name in ("results.md", "results.csv", "summary.csv")] + [Path(p) for p in pngs]
    print("wrote " + ", ".join(shown_path(p) for p in written))
    if note := pictures_note(pngs):
        print(note)
    return {"rows": rows, "varied": varied, "out": str(args.out), "plots": [str(p) for p in pngs]}


if __name__ == "__main__":
    # its work is the report it writes (the table it prints is results.md's): a stdout that takes no more
    # (| head, a full disk) must not fail it
    work_is_files()
    run_cli(main)

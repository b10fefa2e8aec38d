"""The table that scripts/gpu_check.sh ends with: one row per check, read from what its stages left
in OUT (the `status` file of exit codes, bench.py's JSON files, the baby GPT's run directory).

    python -m scripts.gpu_table OUT [--device NAME]

(run from the repository root). A stage that failed or never ran shows as such in its row (one that
failed after writing its figures, with them); the table itself never fails on a missing or damaged
file. A folder without the `status` file, which the script writes first, is refused: no OUT of its.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable, Sequence

if __name__ == "__main__":  # before torch loads (the imports below): a Ctrl-C then is `interrupted`, not a traceback
    if not __package__:  # run as a file (python scripts/gpu_table.py): tinygpt, a folder up, cannot be imported
        print("error: run it from the repository root as python -m scripts.gpu_table", file=sys.stderr)
        sys.exit(2)
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

from tinygpt.errors import ArgParser, UserError, path_arg, read_capped, run_cli
from tinygpt.report import markdown_cell
from tinygpt.runs import best_val_loss, read_metrics

MAX_FILE = 1 << 20  # bytes: gpu_check.sh's status and JSON files are a few KB; a larger one is not its
TARGET_VAL_LOSS = 1.47  # nanoGPT's baby GPT on tiny shakespeare (its README)
TRAINING = (("fp32", "float32", "float32, TF32 off"), ("tf32_bf16", "float32", "float32, TF32 on"),
            ("tf32_bf16", "bfloat16", "bfloat16"), ("compile", "bfloat16", "bfloat16 + torch.compile"))


def read_small(path: Path) -> str:
    """A file gpu_check.sh wrote, as text ("" where it is missing); a UserError for one too large to be its
    (read whole, a 100 MB file took 424 MB, then gave a table of stages that "did not run")."""
    if not path.is_file():  # (missing; or a FIFO, whose read waits for a writer for good: none of the check's)
        return ""
    return read_capped(path, MAX_FILE, lambda _: f"{path} holds more than {MAX_FILE:,} bytes: not a file "
                       f"scripts/gpu_check.sh wrote (its files are a few KB); give the OUT folder of a check"
                       ).decode("utf-8")


def read_status(out: Path) -> dict[str, str]:
    """OUT/status: one `stage=result` line per stage that ran."""
    try:
        lines = read_small(out / "status").splitlines()
    except ValueError:  # not text
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def read_json(path: Path) -> dict:
    """A stage's JSON, or {} when it is missing or damaged."""
    try:
        data = json.loads(read_small(path))
    except (OSError, ValueError, RecursionError):  # RecursionError: '[' x 100,000
        return {}
    return data if isinstance(data, dict) else {}


def cell(result: Callable[[], str], failed: str) -> str:
    """result(), or `failed` when the stage left nothing, or something other than bench.py writes."""
    try:
        return result()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):  # (10**400: a float)
        return failed


def rows(out: Path, device: str) -> list[tuple[str, str]]:
    """(check, result) for every stage of the GPU check."""
    status = read_status(out)

    def failed(stage: str) -> str:
        """Why a stage left no figures: skipped (the budget was spent), out of time, or its exit code."""
        why = status.get(stage, "did not run")
        if why.startswith("skipped") or why == "did not run":
            return why
        if why == "exit 0":  # it passed, but left no figures that read as such
            return "exit 0, but its figures are missing or damaged"
        return "out of time (exit 124)" if why == "exit 124" else f"failed ({why})"

    def marked(stage: str, figures: str) -> str:
        """The stage's figures, with its failure beside them when it then failed: a stage that wrote
        its JSON and then ran out of time is no clean pass."""
        if status.get(stage, "exit 0") == "exit 0":  # (no status file: a folder of figures alone)
            return figures
        return f"{figures}; then the stage ended: {failed(stage)}"

    result = [("device", device), ("tests (TESTS)", status.get("tests", "did not run"))]

    try:
        metrics = read_metrics(out / "baby")
    except UserError as e:  # a damaged metrics.csv is a row, not a crash
        metrics, status["baby"] = [], f"{status.get('baby', '?')}; {e}"
    vals = [r for r in metrics if r.get("val_loss") is not None]
    hit = next((r for r in vals if r["val_loss"] <= TARGET_VAL_LOSS), None)
    if hit:  # (a metrics.csv without an elapsed_s column, or with an empty cell, is damaged: a row still)
        baby = cell(lambda: f"{hit['elapsed_s']:.0f} s (step {hit['step']:.0f}, val {hit['val_loss']:.3f})",
                    f"damaged: {out / 'baby' / 'metrics.csv'} has no elapsed time at val {hit['val_loss']:.3f} "
                    f"({status.get('baby', 'did not run')})")
    else:
        best = best_val_loss(vals)  # (a diverged run's nan or inf is no best)
        why = status.get("baby", "did not run")
        never_ran = best is None and (why.startswith("skipped") or why == "did not run")  # (nothing to reach)
        baby = why if never_ran else f"not reached (best {'none' if best is None else f'{best:.3f}'}; {why})"
    result.append((f"baby GPT: time to val {TARGET_VAL_LOSS}", baby))

    for name, dtype, label in TRAINING:
        r = read_json(out / f"{name}.json")
        result.append((f"training, {label}", cell(
            lambda: marked(name, f"{r['train'][dtype]['tokens_per_s']:,.0f} tok/s, MFU {r['train'][dtype]['mfu']:.0%}"),
            failed(name))))

    decode = read_json(out / "decode.json")
    g, h = decode.get("generate"), decode.get("vs_hf")
    result.append((cell(lambda: f"decoding {g['model']}, KV cache", "decoding, KV cache"), cell(
        lambda: marked("decode", f"{g['cached_tokens_per_s']:,.0f} tok/s ({g['speedup']:.1f}x no cache)"),
        failed("decode"))))
    if h:
        result.append(("  vs transformers generate", cell(
            lambda: f"{h['ratio']:.2f}x ({h['transformers_tokens_per_s']:,.0f} tok/s), same tokens: "
                    f"{h['same_tokens']}, logits agree: {h.get('logits_agree', 'not checked')}; bandwidth limit "
                    f"{h['bandwidth_limit_tokens_per_s']:,.0f} tok/s",
            "unreadable")))
    compiled = read_json(out / "decode_compiled.json").get("vs_hf", {})
    result.append(("  decoding step compiled (--compile)", cell(
        lambda: marked("decode_compiled", f"{compiled['compiled_tokens_per_s']:,.0f} tok/s "
                       f"({compiled['ratio_compiled']:.2f}x transformers), {compiled['compile_s']:.0f} s to compile; "
                       f"same tokens: {compiled['same_tokens_compiled']}"),
        "compiling failed (decode_compiled.txt says why)" if compiled
        else failed("decode_compiled"))))
    # a rehearsal's torchrun runs on the CPU: gloo (its device name is the CPU's, "AMD EPYC", where --device is not
    # given: the stages' JSON says which device they ran on)
    ran_on = next((d for d in (read_json(out / f"{s}.json").get("device") for s in BENCH_STAGES) if d), None)
    on_cpu = ran_on == "cpu" if ran_on else device.startswith("cpu")
    backend = "gloo" if on_cpu else "NCCL"
    result.append((f"torchrun, 1 process ({backend} starts; no collective)",  # (one process wraps no DDP)
                   "ok" if status.get("ddp") == "exit 0" else failed("ddp")))
    return result


def markdown(table: Sequence[tuple[str, str]]) -> str:
    """The rows as a Markdown table; a sub-row's indent as &nbsp; (Markdown drops leading spaces), so that
    the table goes into the docs as printed."""
    def indented(k: str) -> str:
        return "&nbsp;" * (len(k) - len(k.lstrip(" "))) + k.lstrip(" ")
    # (a | or a line break in a result, a --device name or a path, would end its cell or its row)
    return "\n".join(["| check | result |", "| --- | --- |",
                      *(f"| {indented(k)} | {markdown_cell(v)} |" for k, v in table)])


BENCH_STAGES = ("fp32", "tf32_bf16", "compile", "decode", "decode_compiled")  # those that write bench.py's JSON


def recorded_device(out: Path) -> str | None:
    """"NAME, torch VERSION" as the first of the bench stages' JSON files records it (the machine the
    check ran on, wherever the table is made again), or None when none does."""
    for stage in BENCH_STAGES:
        data = read_json(out / f"{stage}.json")
        name, torch_version = data.get("device_name"), data.get("torch")
        if isinstance(name, str) and isinstance(torch_version, str):
            return f"{name}, torch {torch_version}"
    return None


def main(argv: Sequence[str] | None = None) -> str:
    p = ArgParser(prog="python -m scripts.gpu_table", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=path_arg, help="the folder scripts/gpu_check.sh wrote (its OUT)")
    p.add_argument("--device", help="the device's name in the first row (default: the one the stages' figures "
                                    "record, else CUDA device 0's)")
    args = p.parse_args(argv)
    if not args.out.is_dir():  # (a typo would print a table of stages that "did not run")
        raise UserError(f"{args.out} is not a folder: give the OUT that scripts/gpu_check.sh wrote")
    if not (args.out / "status").is_file():  # (the script writes it first: a run's folder, an empty one, ...)
        raise UserError(f"{args.out} holds no status file, which scripts/gpu_check.sh writes before its first "
                        f"stage: give the OUT that it wrote")
    device = args.device or recorded_device(args.out)
    if device is None:  # (figures of a bench.py older than its device_name)
        import torch
        device = (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}" if torch.cuda.is_available()
                  else f"no CUDA device, torch {torch.__version__}")
    text = markdown(rows(args.out, device))
    print("\n" + text)
    return text


if __name__ == "__main__":
    run_cli(main)

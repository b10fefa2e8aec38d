"""Guards the command line end to end (train.py, sample.py, data/prepare.py).

A tiny char model trains through the real `python train.py` on a small generated text: exit 0, the
run directory holds ckpt.pt, best.pt, config.yaml and metrics.csv, the loss starts near ln(V) and
falls; `python sample.py` streams the right number of characters, greedy is the same with and
without the KV cache, a seed repeats; `--stop-at` + `--resume` ends bit-identical to an
uninterrupted run; `python data/prepare.py` reports its counts and reuses its folder; a model trained
with causal=false is refused unless --force. Every user error exits 2 with exactly one
`error: ...` line on stderr naming the culprit, no traceback, nothing on stdout and nothing written.

Everything lives in tmp (run dirs and data.prepared_dir); nothing touches the network. Speed: each
subprocess costs ~1.5 s of python + torch start-up, so one trained run is shared by the module,
independent subprocesses run concurrently, and the long list of user errors runs in-process through
`errors.run_cli(main, argv)` (the very wrapper the scripts' `__main__` calls) while a subset per
script also runs as a real subprocess. Torch uses one thread in the subprocesses and in this module
(restored afterwards): the models are tiny, and on 2 cores several 2-thread processes mostly wait.
"""
from __future__ import annotations

import csv
import io
import math
import os
import random
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch
import yaml

from conftest import ROOT
from model import generate as model_generate

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
SEPARATOR = "\n---------------\n"  # what sample.py prints between samples (each ends with "\n")
STEPS, STOP_AT = 50, 20
PROMPT = "Anna saw"
CONFIG = """\
model: {block_size: 32, n_layer: 2, n_head: 2, n_embd: 32, dropout: 0.0}
data: {tokenizer: char, val_fraction: 0.1}
train: {batch_size: 8, max_iters: 50, lr: 3.0e-3, min_lr: 3.0e-4, warmup_iters: 5, eval_interval: 25,
        eval_iters: 5, log_interval: 10, device: cpu, seed: 1337}
"""


def make_text(n_chars: int = 6000, seed: int = 0) -> str:
    """Deterministic simple English: names, verbs, objects, places (no 'Z', '#' or '-' in it)."""
    rng = random.Random(seed)
    names = ["Anna", "Ben", "Clara", "David", "Ella", "Finn"]
    verbs = ["saw", "liked", "found", "helped", "called", "met"]
    things = ["a red ball", "the old dog", "a small cat", "the big tree", "a blue kite", "the quiet river"]
    places = ["in the park", "at home", "by the lake", "near the school", "on the hill"]
    lines, size = [], 0
    while size < n_chars:
        line = f"{rng.choice(names)} {rng.choice(verbs)} {rng.choice(things)} {rng.choice(places)}.\n"
        if rng.random() < 0.3:
            line = line[:-2] + f", and {rng.choice(['she', 'he', 'they'])} {rng.choice(verbs)} it.\n"
        lines.append(line)
        size += len(line)
    return "".join(lines)


TEXT = make_text()
VOCAB = sorted(set(TEXT))


# ---- helpers ----


def cli(script: str, *args, cwd: Path) -> subprocess.CompletedProcess:
    """Run a repo script as a user would: `python <script> args...`, from a folder outside the repo;
    a module of a folder ("data.prepare") runs as `python -m data.prepare` from the repository root."""
    command = [str(ROOT / script)] if script.endswith(".py") else ["-m", script]
    return subprocess.run([sys.executable, *command, *map(str, args)], cwd=cwd if script.endswith(".py") else ROOT,
                          env=ENV, capture_output=True, text=True, timeout=300)


def cli_many(calls: dict[str, tuple], cwd: Path) -> dict[str, subprocess.CompletedProcess]:
    """Independent cli(script, *args) calls, run concurrently; results by name."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(cli, *call, cwd=cwd) for name, call in calls.items()}
        return {name: f.result() for name, f in futures.items()}


def in_process(script: str, args, capsys) -> subprocess.CompletedProcess:
    """Run a script's main() through errors.run_cli, as its `__main__` does; capture exit code and output."""
    import sample
    import train
    from data import prepare
    from tinygpt.errors import run_cli
    main = {"train.py": train.main, "sample.py": sample.main, "data.prepare": prepare.main}[script]
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        run_cli(main, [str(a) for a in args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([script, *args], info.value.code, out, err)


def sample_text(args) -> str:
    """sample.main in-process, returning what it prints."""
    import sample
    out = io.StringIO()
    sample.main([str(a) for a in args], out=out)
    return out.getvalue()


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


def assert_user_error(result: subprocess.CompletedProcess, *culprits: str) -> str:
    """Exit 2, exactly one stderr line `error: ...` naming every culprit, no traceback, empty stdout."""
    report = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 2, report
    assert "Traceback" not in result.stderr, report
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), report
    assert result.stdout == "", report
    for culprit in culprits:
        assert culprit in lines[0], f"{culprit!r} not named in: {lines[0]}"
    return lines[0]


def settings(tmp: Path, out_dir: Path, dataset: Path | None = None) -> list[str]:
    """--set arguments that keep every file of a run inside tmp."""
    return ["--set", f"data.dataset={dataset or tmp / 'corpus.txt'}", f"data.prepared_dir={tmp / 'prepared'}",
            f"train.out_dir={out_dir}"]


def read_metrics(run: Path) -> list[dict]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def val_losses(rows: list[dict]) -> dict[int, str]:
    return {int(r["step"]): r["val_loss"] for r in rows if r["val_loss"]}


def load(path: Path) -> dict:
    from tinygpt.checkpoint import load_checkpoint
    return load_checkpoint(path)


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def continuation(text: str) -> str:
    assert text.startswith(PROMPT), text
    return text[len(PROMPT):]


def split_samples(out: str) -> list[str]:
    """sample.py output -> the samples: each printed as prompt + continuation + newline."""
    parts = out.split(SEPARATOR)
    assert all(p.endswith("\n") for p in parts), repr(out)
    return [p[:-1] for p in parts]


# ---- shared fixtures: the data, one trained run, an interrupted twin ----


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    (folder / "corpus.txt").write_text(TEXT, encoding="utf-8")
    (folder / "config.yaml").write_text(CONFIG, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def runs(tmp) -> dict:
    """`train.py` for STEPS steps; the same config stopped at STOP_AT, then resumed.

    The data is prepared first (in-process) so that the two concurrent trainings do not race to."""
    from tinygpt.config import load_config
    from data.prepare import prepare
    prepare(load_config(tmp / "config.yaml", settings(tmp, tmp / "unused")[1:]), show_progress=False)
    main, split = tmp / "the run", tmp / "run_split"  # a space: the commands printed for it must still paste
    results = cli_many({
        "main": ("train.py", tmp / "config.yaml", *settings(tmp, main)),
        "stop": ("train.py", tmp / "config.yaml", *settings(tmp, split), "--stop-at", STOP_AT),
    }, cwd=tmp)
    stopped = {"metrics": read_metrics(split), "ckpt": load(split / "ckpt.pt")} if split.is_dir() else None
    results["resume"] = cli("train.py", tmp / "config.yaml", *settings(tmp, split), "--resume", cwd=tmp)
    return {"main": main, "split": split, "results": results, "stopped": stopped}


@pytest.fixture(scope="module")
def run(runs) -> Path:
    ok(runs["results"]["main"])
    return runs["main"]


# ---- training ----


def test_train_writes_a_complete_run(run):
    import importlib.util
    plot = ["loss.png"] if importlib.util.find_spec("matplotlib") else []  # train.plot: end (the default)
    assert sorted(p.name for p in run.iterdir()) == ["best.pt", "ckpt.pt", "config.yaml"] + plot + ["metrics.csv"]
    ckpt = load(run / "ckpt.pt")
    assert ckpt["step"] == STEPS and {"optimizer", "rng", "batch_rng"} <= set(ckpt)
    assert ckpt["tokenizer"]["vocab_size"] == ckpt["config"]["model"]["vocab_size"] == len(VOCAB)  # from the tokenizer
    assert load(run / "best.pt")["best_val_loss"] == ckpt["best_val_loss"]
    text = (run / "config.yaml").read_text()
    saved = yaml.safe_load(text)
    assert saved["model"]["n_embd"] == 32 and saved["model"]["vocab_size"] == len(VOCAB)
    assert saved["train"]["out_dir"] == str(run) and saved["data"]["dataset"].endswith("corpus.txt")


def test_train_prints_a_summary(runs, run):
    out = runs["results"]["main"].stdout
    assert f"vocab {len(VOCAB)}" in out and f"done: step {STEPS}" in out
    # its seconds: training as metrics.csv's last elapsed_s (a sweep's wall_s), then with the saves and loss.png
    # (the one figure, unlabelled, was the second: 1.1 s beside the report's 0.6)
    best, trained, in_all = re.search(r"best val loss ([\d.]+), ([\d.]+) s of training \(([\d.]+) s in all\);",
                                      out).groups()
    assert trained == f"{float(read_metrics(run)[-1]['elapsed_s']):.1f}" and float(in_all) >= float(trained)
    # the best val loss: the lowest metrics.csv logged, to its 4 decimals
    assert best == f"{min(float(r['val_loss']) for r in read_metrics(run) if r.get('val_loss')):.4f}"
    # one idea a line: the model, the data, the device (threads: fewer on a busy machine)
    assert re.match(r"model: [\d,]+ parameters \(.*\)\ndata: [\d,]+ train / [\d,]+ val tokens; ", out), out
    assert re.search(r"\ndevice: 1 x cpu \(\d+ threads?(, following the free cores)?\), float32;", out), out
    hint = out.split("sample with: ")[1].splitlines()[0]
    # quoted: a shell pastes it whole; trained from a folder outside the repository, it names sample.py's path
    assert shlex.split(hint) == ["python", str(ROOT / "sample.py"), str(run)]


def test_loss_starts_at_ln_vocab_and_falls(run):
    rows = read_metrics(run)
    vals = val_losses(rows)
    assert sorted(vals) == [0, 25, 50]
    first, last = float(vals[0]), float(vals[STEPS])
    assert abs(first - math.log(len(VOCAB))) < 0.15, (first, math.log(len(VOCAB)))
    assert last < first - 0.5, vals
    assert [int(r["step"]) for r in rows if not r["val_loss"]] == [10, 20, 30, 40, 50]


# ---- sampling ----


@pytest.fixture(scope="module")
def samples(run, tmp) -> dict[str, subprocess.CompletedProcess]:
    common = (run, "--prompt", PROMPT, "--max-new-tokens", 40)
    return cli_many({
        "greedy": ("sample.py", *common, "--temperature", 0),
        "seed7": ("sample.py", *common, "--num-samples", 2, "--seed", 7),
    }, cwd=tmp)


def test_sample_prints_max_new_tokens_characters(samples):
    (text,) = split_samples(ok(samples["greedy"]).stdout)
    generated = continuation(text)
    assert len(generated) == 40, repr(generated)
    assert set(generated) <= set(VOCAB)


def test_greedy_is_the_same_without_the_kv_cache(samples, run):
    greedy = ok(samples["greedy"]).stdout
    args = [run, "--prompt", PROMPT, "--max-new-tokens", 40, "--temperature", 0]
    assert sample_text(args) == greedy
    assert sample_text(args + ["--no-kv-cache"]) == greedy


def test_the_flags_reach_the_generation_the_seed_and_the_cache(run, monkeypatch):
    """The text is model.generate's from a generator seeded with --seed itself, and --no-kv-cache turns the cache
    off (equal outputs alone would pass with the flag ignored, or a seed shifted)."""
    import sample
    from tinygpt.checkpoint import load_model
    model, _, tokenizer, _ = load_model(run)  # (the checkpoint sample.py reads)
    idx = torch.tensor([tokenizer.encode(PROMPT)])
    gen = torch.Generator().manual_seed(7)
    tokens = [int(t) for t in model_generate(model, idx, 20, temperature=0.8, generator=gen)]
    used, real = [], sample.generate_steps
    monkeypatch.setattr(sample, "generate_steps", lambda *a, **k: used.append(k["use_cache"]) or real(*a, **k))
    args = [run, "--prompt", PROMPT, "--max-new-tokens", 20, "--seed", 7, "--threads", 1]
    assert sample_text(args) == PROMPT + tokenizer.decode(tokens) + "\n"
    sample_text(args + ["--no-kv-cache"])
    assert used == [True, False]


def test_greedy_says_that_its_samples_are_one_text(run):
    """Three identical samples, --top-k ignored, without a word, read as a bug: a note says why."""
    args = [run, "--prompt", PROMPT, "--max-new-tokens", 8, "--temperature", 0]
    with redirect_stderr(io.StringIO()) as err:
        parts = split_samples(sample_text(args + ["--num-samples", 3, "--top-k", 5]))
    assert len(parts) == 3 and len(set(parts)) == 1
    assert "note: --temperature 0 is greedy: --top-k changes nothing; the 3 samples are one text" in err.getvalue()
    with redirect_stderr(io.StringIO()) as err:
        sample_text(args)
        sample_text([run, "--prompt", PROMPT, "--max-new-tokens", 8, "--num-samples", 2, "--top-k", 5])
    assert "greedy" not in err.getvalue()  # one greedy sample, or sampling: nothing to say
    with redirect_stderr(io.StringIO()) as err:  # nothing generated: no token drawn, nothing to say either
        sample_text([*args[:4], 0, "--temperature", 0, "--num-samples", 2, "--top-k", 5])
    assert "greedy" not in err.getvalue()
    with redirect_stderr(io.StringIO()) as err:
        sample_text(args + ["--num-samples", 2, "--top-k", 5, "--top-p", 0.5])
    assert ("note: --temperature 0 is greedy: --top-k and --top-p change nothing; the 2 samples are one text\n"
            in err.getvalue())


def test_num_samples_prints_that_many(samples):
    parts = split_samples(ok(samples["seed7"]).stdout)
    assert len(parts) == 2 and parts[0] != parts[1]
    assert all(len(continuation(p)) == 40 for p in parts)


def test_same_seed_same_text(samples, run):
    args = [run, "--prompt", PROMPT, "--max-new-tokens", 40, "--num-samples", 2]
    assert sample_text(args + ["--seed", 7]) == ok(samples["seed7"]).stdout
    assert sample_text(args + ["--seed", 8]) != samples["seed7"].stdout  # (the seed alone: a seed ignored passed)
    other = sample_text(args + ["--seed", 8, "--top-k", 5, "--top-p", 0.9])
    assert other != samples["seed7"].stdout
    assert all(len(continuation(p)) == 40 for p in split_samples(other))


def test_sample_uses_the_kv_cache_unless_told_not_to(run, monkeypatch):
    """--no-kv-cache inverted (the cache off by default, on with the flag) passed every test: greedy text is the
    same either way."""
    import sample
    caches = []
    real = sample.generate_steps

    def spy(*args, **kwargs):
        caches.append(kwargs["use_cache"])
        return real(*args, **kwargs)
    monkeypatch.setattr(sample, "generate_steps", spy)
    args = [run, "--prompt", PROMPT, "--max-new-tokens", 5, "--temperature", 0]
    assert sample_text(args) == sample_text(args + ["--no-kv-cache"]) and caches == [True, False]


def test_dtype_bfloat16_generates_with_bfloat16_weights(run, monkeypatch):
    import sample
    seen = []
    real = sample.generate_steps

    def spy(model, *args, **kwargs):
        seen.append(next(model.parameters()).dtype)
        return real(model, *args, **kwargs)
    monkeypatch.setattr(sample, "generate_steps", spy)
    args = [run, "--prompt", PROMPT, "--max-new-tokens", 40, "--temperature", 0]
    text = sample_text(args + ["--dtype", "bfloat16"])
    generated = continuation(split_samples(text)[0])
    assert seen == [torch.bfloat16] and len(generated) == 40 and set(generated) <= set(VOCAB)
    sample_text(args)
    assert seen[-1] == torch.float32  # the default


def test_dtype_int8_generates_with_int8_weights(samples, run, monkeypatch):
    """--dtype int8: every Linear of the model holds int8 weights as it generates; refused with --compile
    (slower than int8 alone), and, naming the run, for a width torch's int8 kernel cannot read."""
    import sample
    from tinygpt import runtime
    from tinygpt.errors import UserError
    seen = []
    real = sample.generate_steps

    def spy(model, *args, **kwargs):
        seen.append(sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__}))
        return real(model, *args, **kwargs)
    monkeypatch.setattr(sample, "generate_steps", spy)
    args = [run, "--prompt", PROMPT, "--max-new-tokens", 40, "--temperature", 0, "--dtype", "int8"]
    generated = continuation(split_samples(sample_text(args))[0])
    assert seen == [["Int8Linear"]] and len(generated) == 40 and set(generated) <= set(VOCAB)
    with pytest.raises(UserError, match=r"^--compile with --dtype int8: the compiled step decodes int8 weights "
                                        r"slower than torch's int8 kernel alone: drop --compile$"):
        sample_text(args + ["--compile"])
    monkeypatch.setattr(runtime, "INT8_IN_MULTIPLE", 64)  # the run's n_embd is 32
    with pytest.raises(UserError, match=rf"^{re.escape(str(run))}: --dtype int8: int8 weights need model.n_embd a "
                                        rf"multiple of 64 .* this model's is 32: use --dtype bfloat16$"):
        sample_text(args)
    assert len(seen) == 1


def test_compile_decodes_through_the_compiled_step(samples, run, monkeypatch):
    """--compile hands generation the step compile_decoding returns (compiling itself is tested in
    test_runtime.py); when it returns None (compiling failed), the model decodes: the same text."""
    import sample
    from tinygpt.runtime import ThreadPolicy
    calls, compiled_for = [], []

    def fake_compile(model, threads=None):
        compiled_for.append(threads)

        def step(idx, caches):
            calls.append(idx.shape)
            return model(idx, caches)
        return step
    monkeypatch.setattr(sample, "compile_decoding", fake_compile)
    args = [run, "--prompt", PROMPT, "--max-new-tokens", 40, "--temperature", 0]
    greedy = ok(samples["greedy"]).stdout
    assert sample_text(args + ["--compile"]) == greedy
    # 40 tokens from an 8-token prompt, block_size 32: two prefills (the prompt, the slid window)
    assert len(calls) == 40 - 2 and set(calls) == {torch.Size([1, 1])}
    assert compiled_for == [ThreadPolicy(fixed=1).max_threads]  # the threads of an idle machine
    sample_text(args + ["--compile", "--threads", 1])
    assert compiled_for[-1] == 1  # or the count asked for
    monkeypatch.setattr(sample, "compile_decoding", lambda model, threads=None: None)
    assert sample_text(args + ["--compile"]) == greedy
    # nothing to decode: it compiled for 13 s to a minute all the same; now a note says it does not
    compiled_for.clear()
    monkeypatch.setattr(sample, "compile_decoding", fake_compile)
    with redirect_stderr(io.StringIO()) as err:
        sample_text([run, "--prompt", PROMPT, "--max-new-tokens", 0, "--compile"])
    assert compiled_for == [] and "note: --max-new-tokens 0 decodes nothing" in err.getvalue()


# ---- stop and resume ----


def test_stop_at_saves_and_stops(runs):
    out = ok(runs["results"]["stop"]).stdout
    assert f"stopped at step {STOP_AT}" in out and f"\nstopped: step {STOP_AT}, best val loss " in out, out  # not done
    stopped = runs["stopped"]
    assert stopped["ckpt"]["step"] == STOP_AT
    assert max(int(r["step"]) for r in stopped["metrics"]) == STOP_AT


def test_resume_reaches_max_iters(runs):
    ok(runs["results"]["resume"])
    split = runs["split"]
    assert max(int(r["step"]) for r in read_metrics(split)) == STEPS
    assert load(split / "ckpt.pt")["step"] == STEPS
    assert (split / "best.pt").is_file()


def test_an_ordinary_resume_restores_no_metrics_rows(runs):
    """A resume kept metrics.csv's rows before the checkpoint's step, not of it: every resume noted a
    false `metrics.csv lacked 1 row, of step 20 ... restored from ckpt.pt`."""
    result = ok(runs["results"]["resume"])
    assert "lacked" not in result.stderr and "restored from ckpt.pt" not in result.stderr, result.stderr
    assert [r["step"] for r in runs["stopped"]["metrics"]] == [r["step"] for r in read_metrics(runs["split"])
                                                            if int(r["step"]) <= STOP_AT]


def test_resume_is_exact(runs, run):
    """Stop at 20 + resume == one uninterrupted run: same metrics and the same final weights."""
    ok(runs["results"]["resume"])
    straight, resumed = read_metrics(run), read_metrics(runs["split"])
    after = {s: v for s, v in val_losses(straight).items() if s > STOP_AT}
    assert after and {s: val_losses(resumed)[s] for s in after} == after
    keys = ("step", "train_loss", "val_loss", "lr")
    assert [tuple(r[k] for k in keys) for r in resumed] == [tuple(r[k] for k in keys) for r in straight]
    a, b = load(run / "ckpt.pt"), load(runs["split"] / "ckpt.pt")
    assert a["best_val_loss"] == b["best_val_loss"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name


def test_resume_between_log_steps_logs_the_same_train_loss(tmp):
    import train
    base = [str(tmp / "config.yaml"), "--quiet", "--set", f"data.dataset={tmp / 'corpus.txt'}",
            f"data.prepared_dir={tmp / 'prepared'}", "train.max_iters=20", "train.eval_interval=20",
            "train.threads=1"]  # bit for bit needs a pinned thread count (README)
    train.main(base + [f"train.out_dir={tmp / 'inproc_straight'}"])
    train.main(base + [f"train.out_dir={tmp / 'inproc_split'}", "--stop-at", "15"])
    train.main(base + [f"train.out_dir={tmp / 'inproc_split'}", "--resume"])
    straight, resumed = read_metrics(tmp / "inproc_straight"), read_metrics(tmp / "inproc_split")
    assert val_losses(resumed) == val_losses(straight)  # the model itself resumes exactly
    assert [(r["step"], r["train_loss"]) for r in resumed] == [(r["step"], r["train_loss"]) for r in straight]


def test_a_stop_at_already_passed_is_said(tmp, capsys):
    """--resume --stop-at 3 of a run at step 6 stopped at once and said only 'stopped: step 6', and that it
    saved ckpt.pt, which it left as it was."""
    import train
    base = inproc_base(tmp, f"train.out_dir={tmp / 'stop_passed'}", "train.max_iters=10")
    train.main(base + ["--stop-at", "6"])
    capsys.readouterr()
    saved = (tmp / "stop_passed" / "ckpt.pt").read_bytes()
    assert train.main(base + ["--resume", "--stop-at", "3"])["step"] == 6
    out, err = capsys.readouterr()
    assert "note: --stop-at 3 is before step 6, where the run already is\n" in err
    # nothing was saved, and it says so (it said "saved ckpt.pt")
    assert f"stopped at step 6: {tmp / 'stop_passed' / 'ckpt.pt'} is already this step's, kept as it was; continue " \
        "with --resume" in out + err and (tmp / "stop_passed" / "ckpt.pt").read_bytes() == saved
    train.main(base + ["--resume", "--stop-at", "6"])
    assert "note: --stop-at" not in capsys.readouterr().err  # the step it is at: no note
    train.main(base + ["--resume", "--stop-at", "8"])
    assert "--stop-at" not in capsys.readouterr().err  # a step ahead: no note


def test_an_eval_row_and_a_log_row_of_one_step_give_the_same_lr(run):
    """Both give the lr of the step that led there (the eval row gave the next step's)."""
    rows = read_metrics(run)
    lr = {}
    for r in rows:
        lr.setdefault(r["step"], set()).add(r["lr"])
    both = [step for step in lr if sum(r["step"] == step for r in rows) == 2]
    assert both and all(len(lr[step]) == 1 for step in both), {s: lr[s] for s in both}
    # step 0's eval row, which no step led to: the first step's lr, by the run's schedule
    from tinygpt.runs import read_config
    from tinygpt.training import lr_at
    assert lr["0"] == {f"{lr_at(0, read_config(run).train):.3e}"} != {f"{lr_at(1, read_config(run).train):.3e}"}


def inproc_base(tmp: Path, *extra: str) -> list[str]:
    """train.py's arguments for an in-process run on this module's data (one thread, pinned)."""
    return [str(tmp / "config.yaml"), "--quiet", "--set", f"data.dataset={tmp / 'corpus.txt'}",
            f"data.prepared_dir={tmp / 'prepared'}", "train.threads=1", *extra]


def test_the_failed_save_is_the_error_told_not_the_clean_up_after_it(tmp, monkeypatch):
    """--stop-at's save of ckpt.pt fails (a full disk), then so does the write of metrics.csv on the
    way out: the error told was metrics.csv's, and nothing said that the stop was not saved."""
    import train
    from tinygpt.errors import UserError
    out, failed = tmp / "full_disk", []
    real_save, real_write = train.save_checkpoint, train.write_metrics

    def save(path, state, guard=None):
        if state["step"] == 3:
            failed.append(path)
            raise UserError(f"cannot write {path}: No space left on device (the previous file is intact)")
        real_save(path, state, guard)

    def write(run_dir, rows, guard=None):
        if failed:
            raise UserError(f"cannot write {run_dir / 'metrics.csv'}: No space left on device")
        real_write(run_dir, rows, guard)

    monkeypatch.setattr(train, "save_checkpoint", save)
    monkeypatch.setattr(train, "write_metrics", write)
    with pytest.raises(UserError, match=r"ckpt\.pt: No space left on device \(the previous file is intact\)"):
        train.main(inproc_base(tmp, f"train.out_dir={out}") + ["--stop-at", "3"])
    assert failed == [out / "ckpt.pt"]


def test_resume_may_change_data_settings_that_change_no_token(tmp):
    """A char run on a file: --resume with another data.bpe_vocab_size or data.stories_seed was refused
    ("differs from the checkpoint's"), though neither touches its tokens; data.tokenizer still is."""
    import train
    from tinygpt.errors import UserError
    out = tmp / "resume_unused_keys"
    train.main(inproc_base(tmp, f"train.out_dir={out}") + ["--stop-at", "5"])
    done = train.main(inproc_base(tmp, f"train.out_dir={out}", "data.bpe_vocab_size=300", "data.stories_seed=5",
                                  "train.max_iters=10") + ["--resume"])
    assert done["step"] == 10
    with pytest.raises(UserError, match="--resume: data.tokenizer='word' differs from the checkpoint's 'char'"):
        train.main(inproc_base(tmp, f"train.out_dir={out}", "data.tokenizer=word", "train.max_iters=12") + ["--resume"])
    with pytest.raises(UserError, match="--resume: model.bias=true differs from the checkpoint's false "):  # not True
        train.main(inproc_base(tmp, f"train.out_dir={out}", "model.bias=true", "train.max_iters=12") + ["--resume"])


def test_resume_takes_the_same_dataset_spelt_another_way(tmp, monkeypatch):
    """`data.dataset=DIR/corpus.txt` then, on --resume, `corpus.txt` from DIR (or `./corpus.txt`) was
    refused ("differs from the checkpoint's"): the same file. So is the same text in another file (a
    moved dataset): its tokens are the checkpoint's (test_training.py: other text is refused)."""
    import train
    from tinygpt.errors import UserError
    out = tmp / "resume_dataset_spelling"
    train.main(inproc_base(tmp, f"train.out_dir={out}") + ["--stop-at", "5"])
    monkeypatch.chdir(tmp)
    done = train.main(inproc_base(tmp, f"train.out_dir={out}", "data.dataset=./corpus.txt", "train.max_iters=8")
                      + ["--resume"])
    assert done["step"] == 8
    (tmp / "other.txt").write_text(TEXT, encoding="utf-8")  # the same text in another file: the same tokens
    done = train.main(inproc_base(tmp, f"train.out_dir={out}", "data.dataset=other.txt", "train.max_iters=10")
                      + ["--resume"])
    assert done["step"] == 10
    with pytest.raises(UserError, match=r"--resume: data.dataset='gone.txt' differs from the checkpoint's"):
        train.main(inproc_base(tmp, f"train.out_dir={out}", "data.dataset=gone.txt", "train.max_iters=12")
                   + ["--resume"])


def test_resume_at_max_iters_between_evals_evaluates_the_end(tmp):
    """Stopped at step 7 (no eval there), resumed with train.max_iters=7: the run's end is evaluated
    (metrics row, best.pt, the final line); it ended as "done" with step 0's weights as best.pt."""
    import train
    out = tmp / "finish_early"
    train.main(inproc_base(tmp, f"train.out_dir={out}", "train.eval_interval=20") + ["--stop-at", "7"])
    assert val_losses(read_metrics(out)).keys() == {0}
    summary = train.main(inproc_base(tmp, f"train.out_dir={out}", "train.eval_interval=20", "train.max_iters=7")
                         + ["--resume"])
    losses = {step: float(v) for step, v in val_losses(read_metrics(out)).items()}
    assert losses.keys() == {0, 7} and losses[7] < losses[0]
    assert round(summary["best_val_loss"], 4) == losses[7] and load(out / "best.pt")["step"] == 7
    assert load(out / "ckpt.pt")["evaluated_step"] == 7
    again = train.main(inproc_base(tmp, f"train.out_dir={out}", "train.eval_interval=20", "train.max_iters=7")
                       + ["--resume"])  # evaluated already: not again
    assert again["step"] == 7 and val_losses(read_metrics(out)).keys() == {0, 7}


def test_metrics_rows_lost_from_the_folder_come_back_from_the_checkpoint(tmp, capsys):
    """metrics.csv deleted, cut short or damaged before a --resume: its rows up to the checkpoint's
    step come back from ckpt.pt (with a note naming the file and the steps), so the resumed run's
    file equals an uninterrupted run's; they were lost (a deleted file: the curve began at the
    resume)."""
    import train
    base = inproc_base(tmp, "train.max_iters=30", "train.eval_interval=10", "train.log_interval=5")
    straight = tmp / "rows_straight"
    train.main(base + [f"train.out_dir={straight}"])
    keys = ("step", "train_loss", "val_loss", "lr")
    want = [tuple(r[k] for k in keys) for r in read_metrics(straight)]
    for damage, said in (("delete", "was missing: its 5 rows, of steps 0 to 15,"),
                         ("cut", "lacked 2 rows, of steps 10 to 15 (cut short"),
                         ("garble", "was damaged: its 5 rows, of steps 0 to 15,")):
        out = tmp / f"rows_{damage}"
        train.main(base + [f"train.out_dir={out}", "--stop-at", "15"])
        path = out / "metrics.csv"
        if damage == "delete":
            path.unlink()
        elif damage == "cut":
            path.write_text("".join(path.read_text().splitlines(keepends=True)[:4]))
        else:
            path.write_text("no metrics here\n\x00")
        capsys.readouterr()
        train.main(base + [f"train.out_dir={out}", "--resume"])
        assert f"note: {path} {said}" in capsys.readouterr().err
        assert [tuple(r[k] for k in keys) for r in read_metrics(out)] == want, damage


def test_an_older_checkpoint_without_rows_says_what_a_deleted_metrics_csv_loses(tmp, capsys):
    """A checkpoint from before they carried their rows: a deleted metrics.csv cannot come back, and
    the resumed run's curve began at its step without a word."""
    import train
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    out = tmp / "older_ckpt"
    base = inproc_base(tmp, f"train.out_dir={out}", "train.max_iters=20", "train.eval_interval=10")
    train.main(base + ["--stop-at", "10"])
    older = load_checkpoint(out / "ckpt.pt")
    del older["metrics_csv"], older["run_id"]
    save_checkpoint(out / "ckpt.pt", older)
    (out / "metrics.csv").unlink()
    capsys.readouterr()
    assert train.main(base + ["--resume"])["step"] == 20
    assert (f"note: {out / 'metrics.csv'} is missing, and {out / 'ckpt.pt'} (from an older tinygpt) does not carry "
            f"its rows: the loss curve starts at step 10") in capsys.readouterr().err


def test_an_older_checkpoint_resumes_from_the_rows_up_to_its_step(tmp_path):
    """Its rows are metrics.csv's, up to its step: the rows after it (a run killed before its next save) are
    trained again, so kept they would be written twice."""
    from tinygpt import runs
    rows = [{"step": 0, "train_loss": "4.2", "val_loss": "4.2"},
            {"step": 10, "train_loss": "4.1", "tokens_per_s": "100"},
            {"step": 10, "train_loss": "4.0", "val_loss": "4.0"},
            {"step": 20, "train_loss": "3.9", "tokens_per_s": "100"}]
    runs.write_metrics(tmp_path, rows)
    kept, note = runs.resumed_metrics(tmp_path, {"step": 10})  # (no metrics_csv: from an older tinygpt)
    assert [float(r["step"]) for r in kept] == [0, 10, 10] and note is None
    (tmp_path / "metrics.csv").unlink()  # at step 0, a missing metrics.csv lost nothing: no note
    assert runs.resumed_metrics(tmp_path, {"step": 0}) == ([], None)
    assert "the loss curve starts at step 10" in runs.resumed_metrics(tmp_path, {"step": 10})[1]


def test_a_checkpoint_copied_in_from_another_run_is_not_resumed(tmp, capsys):
    """ckpt.pt of run A copied into run B's folder: --resume continued A's run there, and B's
    metrics.csv then held both runs' rows (B's up to the step, A's after it), beside B's best.pt.
    It is refused (best.pt: another run's id; metrics.csv: other rows), and nothing in B changes;
    with B's best.pt and metrics.csv moved away, A's run continues there with A's own rows."""
    import shutil
    import train
    from tinygpt.errors import UserError
    base = inproc_base(tmp, "train.max_iters=20", "train.eval_interval=10")
    a, b = tmp / "copied_a", tmp / "copied_b"
    train.main(base + [f"train.out_dir={a}", "train.seed=1", "--stop-at", "10"])
    train.main(base + [f"train.out_dir={b}", "train.seed=2", "--stop-at", "10"])
    shutil.copy(a / "ckpt.pt", b / "ckpt.pt")
    before = snapshot(b)
    refusals = {"best.pt": r"best\.pt and .*ckpt\.pt are of two runs \(one copied in from another folder\?\)",
                "metrics.csv": r"metrics\.csv and .*ckpt\.pt's copy of it differ in the eval row of step 0: metrics\.csv "
                               r"was edited, or ckpt\.pt is another run's"}
    for name, refusal in refusals.items():
        with pytest.raises(UserError, match=refusal):
            train.main(base + [f"train.out_dir={b}", "train.seed=1", "--resume"])
        assert snapshot(b) == before
        (b / name).rename(tmp / f"copied_b_{name}")
        del before[name]
    train.main(base + [f"train.out_dir={b}", "train.seed=1", "--resume"])
    train.main(base + [f"train.out_dir={a}", "train.seed=1", "--resume"])
    keys = ("step", "train_loss", "val_loss", "lr")  # (tokens/s and the time differ)
    assert [[r[k] for k in keys] for r in read_metrics(b)] == [[r[k] for k in keys] for r in read_metrics(a)]


def test_a_best_pt_ahead_of_ckpt_pt_is_not_kept_by_a_resume(tmp):
    """best.pt is saved before ckpt.pt: a ckpt.pt save that failed at step 20 (a full disk, `ulimit -f`) left
    best.pt of step 20 beside ckpt.pt of step 10. --resume went back to step 10 and, with another train.lr
    that never again reached step 20's val loss, finished with best.pt of the steps it had undone. With
    the run's own settings it is resumed (test_a_best_pt_ahead_of_its_checkpoint_is_the_same_run)."""
    import shutil
    import train
    from tinygpt.checkpoint import load_checkpoint
    from tinygpt.errors import UserError
    out = tmp / "best_ahead_lr"
    base = inproc_base(tmp, f"train.out_dir={out}", "train.max_iters=30", "train.eval_interval=10")
    train.main(base + ["--stop-at", "10"])
    shutil.copy(out / "ckpt.pt", tmp / "best_ahead_lr_ckpt10.pt")
    train.main(base + ["--resume", "--stop-at", "20"])
    assert load_checkpoint(out / "best.pt")["step"] == 20  # (the val loss fell: best.pt of step 20)
    shutil.copy(tmp / "best_ahead_lr_ckpt10.pt", out / "ckpt.pt")  # as if step 20's save of ckpt.pt had failed
    before = snapshot(out)
    with pytest.raises(UserError, match=r"best\.pt is of step 20, after ckpt\.pt's step 10 \(ckpt\.pt's later save "
                                        r"failed or was stopped\), and the resume changes the training settings "
                                        r"\(train\.lr=0\.5 \(was 0\.\d+\)\): .* or move best\.pt away$"):
        train.main(inproc_base(tmp, f"train.out_dir={out}", "train.max_iters=30", "train.eval_interval=10",
                               "train.lr=0.5") + ["--resume"])
    assert snapshot(out) == before
    assert train.main(base + ["--resume"])["step"] == 30  # its own settings: steps 10-20 again, best.pt rewritten
    assert load_checkpoint(out / "best.pt")["step"] >= 20


def test_a_row_added_to_metrics_csv_before_the_checkpoints_step_is_not_resumed_over(tmp):
    """A row appended by hand to a stopped run's metrics.csv, at a step ckpt.pt has seen, passed as
    "written later": a sweep's rerun reported it as the run's loss, and --resume dropped it unsaid."""
    import train
    from tinygpt.errors import UserError
    out = tmp / "appended"
    base = inproc_base(tmp, f"train.out_dir={out}", "train.max_iters=20", "train.eval_interval=10")
    train.main(base + ["--stop-at", "10"])
    path = out / "metrics.csv"
    path.write_text(path.read_text() + "10,3.0000,,1.000e-03,,,0.1\n")  # (a second eval row would be damaged)
    before = snapshot(out)
    with pytest.raises(UserError, match=r"metrics\.csv and .*ckpt\.pt's copy of it differ in the log row of step 10: "
                                        r"metrics\.csv was edited"):
        train.main(base + ["--resume"])
    assert snapshot(out) == before
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-2]))  # cut short: restored, as before
    assert train.main(base + ["--resume"])["step"] == 20


def test_an_eval_row_a_dead_resume_wrote_at_a_step_still_to_evaluate_is_written_again(tmp_path):
    """Ctrl-C during step 10's eval saves ckpt.pt at step 10, its eval still due; the resume evaluates it,
    writes the row to metrics.csv, and dies before saving ckpt.pt (a full disk, a kill). That row is not
    ckpt.pt's, but no edit either: the next resume evaluates again. Where the eval was done (evaluated_step
    10), the same row is an edit, refused."""
    from tinygpt import runs
    from tinygpt.errors import UserError
    log = [{"step": 0, "train_loss": "4.2", "val_loss": "4.2", "lr": "0.0"},
           {"step": 10, "train_loss": "4.1", "lr": "9.9e-05", "tokens_per_s": "100", "mfu": "0.01", "elapsed_s": "1.0"}]
    eval_row = {"step": 10, "train_loss": "4.0", "val_loss": "4.1", "lr": "9.9e-05", "elapsed_s": "1.1"}
    runs.write_metrics(tmp_path, log + [eval_row])
    ckpt = {"step": 10, "evaluated_step": 0, "metrics_csv": runs.metrics_text(log)}
    rows, note = runs.resumed_metrics(tmp_path, ckpt)
    assert [r["step"] for r in rows] == ["0", "10"] and note is None  # ckpt.pt's rows: the eval runs again
    with pytest.raises(UserError, match=r"differ in the eval row of step 10: metrics\.csv was edited"):
        runs.resumed_metrics(tmp_path, {**ckpt, "evaluated_step": 10})


def test_counts_of_one_are_singular_in_what_train_py_says(tmp, capsys):
    """A 1-layer, 1-head model started as `(1 layers, 1 heads, ...)`; a restored row as `1 row(s)`."""
    import train
    out = tmp / "one_layer"
    train.main(inproc_base(tmp, f"train.out_dir={out}", "model.n_layer=1", "model.n_head=1", "train.max_iters=5",
                           "train.eval_interval=5", "train.log_interval=5") + ["--stop-at", "5"])
    assert " parameters (1 layer, 1 head, 32 wide, " in capsys.readouterr().out
    (out / "metrics.csv").write_text("".join((out / "metrics.csv").read_text().splitlines(keepends=True)[:3]))
    train.main(inproc_base(tmp, f"train.out_dir={out}", "model.n_layer=1", "model.n_head=1", "train.max_iters=5",
                           "train.eval_interval=5", "train.log_interval=5") + ["--resume"])
    assert f"note: {out / 'metrics.csv'} lacked 1 row, of step 5 (cut short" in capsys.readouterr().err


def test_a_best_pt_ahead_of_its_checkpoint_is_the_same_run(tmp):
    """Killed between saving best.pt and ckpt.pt (or an older ckpt.pt put back), a run's best.pt is
    ahead of its checkpoint; resumed and stopped before that step, its new rows (other tokens/s)
    differ from best.pt's: that is no other run, and the next --resume goes on."""
    import shutil
    import train
    base = inproc_base(tmp, "train.max_iters=30", "train.eval_interval=10", "train.log_interval=5")
    out = tmp / "best_ahead"
    train.main(base + [f"train.out_dir={out}", "--stop-at", "10"])
    shutil.copy(out / "ckpt.pt", tmp / "best_ahead_ckpt_10.pt")
    train.main(base + [f"train.out_dir={out}", "--resume", "--stop-at", "20"])
    assert load(out / "best.pt")["step"] == 20
    shutil.copy(tmp / "best_ahead_ckpt_10.pt", out / "ckpt.pt")  # best.pt now ahead of the checkpoint
    train.main(base + [f"train.out_dir={out}", "--resume", "--stop-at", "15"])
    assert train.main(base + [f"train.out_dir={out}", "--resume"])["step"] == 30


def test_a_fine_tuned_run_resumes_without_its_starting_weights(tmp, capsys):
    """A run started from train.init_from resumes from its own ckpt.pt, with the model config it
    was trained with (its starting weights'), even after those weights are gone; the YAML's own
    model settings (another width) do not matter to it, and the start says which it replaced."""
    import shutil
    import train
    source, tuned = tmp / "init_source", tmp / "init_tuned"
    train.main(inproc_base(tmp, f"train.out_dir={source}", "model.n_embd=16", "train.max_iters=5"))
    capsys.readouterr()
    train.main(inproc_base(tmp, f"train.out_dir={tuned}", f"train.init_from={source}", "train.max_iters=10",
                           "train.eval_interval=5") + ["--stop-at", "5"])
    n_embd = yaml.safe_load((tmp / "config.yaml").read_text())["model"]["n_embd"]
    assert f"with its model config, not this config's model.n_embd={n_embd}\n" in capsys.readouterr().out
    shutil.rmtree(source)
    done = train.main(inproc_base(tmp, f"train.out_dir={tuned}", f"train.init_from={source}", "train.max_iters=10",
                                  "train.eval_interval=5") + ["--resume"])
    assert done["step"] == 10
    assert load(tuned / "ckpt.pt")["config"]["model"]["n_embd"] == 16


def test_tokens_per_s_counts_training_steps_only(tmp):
    """An eval between two logs is not training time: with a slow eval every 10 steps, the logged
    tokens/s stays near a run without evals (it was 7x lower)."""
    import train
    speeds = {}
    for name, evals in (("no_evals", "train.eval_interval=1000"), ("slow_evals", "train.eval_interval=10")):
        train.main(inproc_base(tmp, f"train.out_dir={tmp / ('speed_' + name)}", evals, "train.eval_iters=100",
                               "train.max_iters=40", "train.log_interval=10", "train.warmup_iters=0"))
        rows = [r for r in read_metrics(tmp / ("speed_" + name)) if r["tokens_per_s"]]
        speeds[name] = sorted(float(r["tokens_per_s"]) for r in rows[1:])[len(rows[1:]) // 2]  # median after the first
    # (0.3, not 0.5: the two runs are timed apart, and another test process on the cores slows one;
    # counting the evals made it 0.14)
    assert speeds["slow_evals"] > 0.3 * speeds["no_evals"], speeds


# ---- data/prepare.py ----


def test_prepare_prints_counts_and_reuses_its_folder(tmp, capsys):
    prepared = tmp / "prepared_once"
    args = (tmp / "config.yaml", "--set", f"data.dataset={tmp / 'corpus.txt'}", f"data.prepared_dir={prepared}")
    first = ok(cli("data.prepare", *args, cwd=tmp))
    match = re.search(r"([\d,]+) train \+ ([\d,]+) val tokens, vocab (\d+)", first.stdout)
    assert match, first.stdout
    n_train, n_val, vocab = (int(g.replace(",", "")) for g in match.groups())
    assert n_train + n_val == len(TEXT) and n_val == int(len(TEXT) * 0.1) and vocab == len(VOCAB)
    (folder,) = list(prepared.iterdir())
    assert str(folder) in first.stdout
    assert {p.name for p in folder.iterdir()} == {"train.bin", "val.bin", "tokenizer.json", "meta.json"}
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} | {".": folder.stat().st_mtime_ns}
    second = in_process("data.prepare", args, capsys)  # the second call: same code, no start-up cost
    assert second.returncode == 0 and second.stdout == first.stdout
    after = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} | {".": folder.stat().st_mtime_ns}
    assert after == before and list(prepared.iterdir()) == [folder]


# ---- causal=false ----


def test_sample_refuses_a_non_causal_model_unless_forced(tmp, capsys):
    import train
    run = tmp / "run_bidirectional"
    with redirect_stdout(io.StringIO()) as out:
        train.main([str(tmp / "config.yaml"), "--quiet", *settings(tmp, run), "model.causal=false",
                    "train.max_iters=4", "train.eval_interval=2"])
    assert load(run / "ckpt.pt")["config"]["model"]["causal"] is False
    # the hint it ends with works: sample.py refuses such a model without --force
    assert out.getvalue().splitlines()[-1].endswith(f"sample.py {run} --force")
    # (in this process, as sample.py's __main__ runs it: test_user_error_through_the_real_cli runs real ones)
    refused = in_process("sample.py", [run, "--prompt", PROMPT, "--max-new-tokens", 10], capsys)
    assert_user_error(refused, "causal", str(run), "--force")
    forced = sample_text([run, "--prompt", PROMPT, "--max-new-tokens", 10, "--force"])
    (text,) = split_samples(forced)
    assert len(continuation(text)) == 10
    # --compile compiled (for a minute) the cached decoding step, which such a model never runs
    refused = in_process("sample.py", [run, "--prompt", PROMPT, "--force", "--compile"], capsys)
    assert_user_error(refused, "--compile", str(run), "causal=false")


# ---- user errors: exit 2, one line, names the culprit, writes nothing ----


def error_cases(tmp: Path, run: Path) -> dict[str, dict]:
    """name -> script, args, culprits (substrings of the message), fresh (a run dir that must not
    be created) and untouched (a run dir whose files must not change)."""
    files = tmp / "bad_inputs"
    files.mkdir(exist_ok=True)
    (files / "typo.yaml").write_text("model: {n_heads: 2}\n")
    (files / "empty.txt").write_text("")
    (files / "blank.txt").write_text("  \n\t\n   \n")
    (files / "latin1.txt").write_bytes("Caf\u00e9 au lait for Anna.\n".encode("latin-1") * 50)
    (files / "tiny.txt").write_text("Anna saw a red ball in the park.\n")  # 33 chars: 30 train, 3 val
    data = (run / "best.pt").read_bytes()
    (files / "truncated.pt").write_bytes(data[: len(data) // 2])
    (files / "no_run").mkdir(exist_ok=True)
    config = tmp / "config.yaml"

    def train_case(name, culprits, *extra, dataset=None, config=config):
        out = tmp / "refused_runs" / name
        return {"script": "train.py", "args": [config, *settings(tmp, out, dataset), *extra],
                "culprits": culprits, "fresh": out}

    def sample_case(culprits, *args):
        return {"script": "sample.py", "args": list(args), "culprits": culprits}

    return {
        "unknown key (file)": train_case("k1", ["model.n_heads", "typo.yaml", "model.n_head"],
                                         config=files / "typo.yaml"),
        "unknown key (--set)": train_case("k2", ["train.learning_rate", "config.yaml"], "train.learning_rate=0.1"),
        "n_embd % n_head": train_case("k3", ["model.n_embd=32", "model.n_head=3", "valid n_head"],
                                      "model.n_head=3"),
        "missing config": {"script": "train.py", "args": [tmp / "nope.yaml"],
                           "culprits": ["nope.yaml", "not found"]},
        "missing dataset": train_case("d1", ["missing.txt"], dataset=files / "missing.txt"),
        "empty dataset": train_case("d2", ["empty.txt", "no text"], dataset=files / "empty.txt"),
        "blank dataset": train_case("d3", ["blank.txt", "no text"], dataset=files / "blank.txt"),
        "non-UTF-8 dataset": train_case("d4", ["latin1.txt", "UTF-8", "0xe9"], dataset=files / "latin1.txt"),
        "dataset too small": train_case("d5", ["model.block_size=32", "split has", "with --set"],
                                        dataset=files / "tiny.txt"),
        "unknown flag (train)": train_case("f1", ["--epochs"], "--epochs", "3"),
        "--resume without checkpoint": train_case("r1", ["--resume", "ckpt.pt"], "--resume"),
        "vocab_size not the tokenizer's": train_case("v1", ["model.vocab_size=7", "tokenizer"], "model.vocab_size=7"),
        "out_dir is a file": {"script": "train.py", "culprits": ["train.out_dir", "empty.txt", "is a file"],
                              "args": [config, *settings(tmp, files / "empty.txt")]},
        "existing run without --resume": {"script": "train.py", "args": [config, *settings(tmp, run)],
                                          "culprits": [str(run), "--resume"], "untouched": run},
        "--resume with another model": {"script": "train.py", "untouched": run, "culprits": ["model.n_layer=3"],
                                        "args": [config, *settings(tmp, run), "model.n_layer=3", "--resume"]},
        "prompt outside the vocabulary": sample_case(["'#'", "'Z'", "char vocabulary"],
                                                     run, "--prompt", "Zoe#saw"),
        "missing run dir": sample_case([str(tmp / "no_such_run"), "not found"], tmp / "no_such_run"),
        "run dir without checkpoint": sample_case([str(files / "no_run"), "best.pt"], files / "no_run"),
        "truncated checkpoint": sample_case(["truncated.pt", "truncated"], files / "truncated.pt"),
        "temperature -1": sample_case(["--temperature"], run, "--temperature", "-1"),
        "top-p 0": sample_case(["--top-p"], run, "--top-p", "0"),
        "top-p 1.5": sample_case(["--top-p"], run, "--top-p", "1.5"),
        "top-k 0": sample_case(["--top-k"], run, "--top-k", "0"),
        "max-new-tokens -1": sample_case(["--max-new-tokens"], run, "--max-new-tokens", "-1"),
        "num-samples 0": sample_case(["--num-samples"], run, "--num-samples", "0"),
        "non-integer flag": sample_case(["--max-new-tokens", "ten"], run, "--max-new-tokens", "ten"),
        "unknown flag (sample)": sample_case(["--beam-width"], run, "--beam-width", "4"),
        "missing prompt file": sample_case(["nope.txt"], run, "--prompt-file", tmp / "nope.txt"),
        "--compile without the cache": sample_case(["--compile", "--no-kv-cache"], run, "--compile", "--no-kv-cache"),
        "unknown key (prepare)": {"script": "data.prepare", "culprits": ["data.tokeniser", "data.tokenizer"],
                                  "args": [config, "--set", "data.tokeniser=char"]},
    }


ERROR_CASES = ["unknown key (file)", "unknown key (--set)", "n_embd % n_head", "missing config",
               "vocab_size not the tokenizer's",
               "missing dataset", "empty dataset", "blank dataset", "non-UTF-8 dataset", "dataset too small",
               "unknown flag (train)", "--resume without checkpoint", "out_dir is a file",
               "existing run without --resume",
               "--resume with another model", "prompt outside the vocabulary", "missing run dir",
               "run dir without checkpoint", "truncated checkpoint", "temperature -1", "top-p 0", "top-p 1.5",
               "top-k 0", "max-new-tokens -1", "num-samples 0", "non-integer flag", "unknown flag (sample)",
               "missing prompt file", "--compile without the cache", "unknown key (prepare)"]
# also run as real subprocesses (a process of its own: exit status, stderr, no traceback): each script in the everyday
# suite; each other kind of culprit (data, run dir, checkpoint, flag) with the slow tests, as each process takes
# seconds to import torch
SUBPROCESS_CASES = ["unknown key (file)", "prompt outside the vocabulary", "unknown key (prepare)"]
SLOW_SUBPROCESS_CASES = ["non-UTF-8 dataset", "existing run without --resume", "truncated checkpoint",
                         "unknown flag (sample)"]


@pytest.fixture(scope="module")
def cases(tmp, run) -> dict[str, dict]:
    return error_cases(tmp, run)


def check_refusal(case: dict, result: subprocess.CompletedProcess, before) -> None:
    assert_user_error(result, *case["culprits"])
    if "fresh" in case:  # refused before any work: the run directory was never created
        assert not case["fresh"].exists()
    if "untouched" in case:
        assert snapshot(case["untouched"]) == before


def test_error_case_list_is_complete(cases):
    assert sorted(cases) == sorted(ERROR_CASES) and set(SUBPROCESS_CASES + SLOW_SUBPROCESS_CASES) <= set(cases)


@pytest.mark.parametrize("name", ERROR_CASES)
def test_user_error(cases, name, capsys):
    case = cases[name]
    before = snapshot(case["untouched"]) if "untouched" in case else None
    check_refusal(case, in_process(case["script"], case["args"], capsys), before)


def real_cli_errors(cases: dict, tmp: Path, run: Path, names: list[str]) -> dict:
    before = snapshot(run)
    results = cli_many({name: (cases[name]["script"], *cases[name]["args"]) for name in names}, cwd=tmp)
    return {"results": results, "before": before}


@pytest.fixture(scope="module")
def subprocess_errors(cases, tmp, run) -> dict:
    return real_cli_errors(cases, tmp, run, SUBPROCESS_CASES)


@pytest.fixture(scope="module")
def slow_subprocess_errors(cases, tmp, run) -> dict:
    return real_cli_errors(cases, tmp, run, SLOW_SUBPROCESS_CASES)


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_user_error_through_the_real_cli(cases, subprocess_errors, name):
    check_refusal(cases[name], subprocess_errors["results"][name], subprocess_errors["before"])


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW_SUBPROCESS_CASES)
def test_more_user_errors_through_the_real_cli(cases, slow_subprocess_errors, name):
    check_refusal(cases[name], slow_subprocess_errors["results"][name], slow_subprocess_errors["before"])


def test_the_pasted_hint_finds_sample_py_from_where_the_user_stands(tmp_path, monkeypatch):
    """`cd /tmp && python REPO/train.py ...` ended with `sample with: python sample.py out/stories`,
    which /tmp has no sample.py for."""
    from tinygpt.errors import script_word
    for cwd in (ROOT, ROOT.parent, tmp_path):
        monkeypatch.chdir(cwd)
        word = script_word("sample.py")
        assert (cwd / word).resolve() == ROOT / "sample.py" and not word.startswith("..")
    monkeypatch.chdir(ROOT)
    assert script_word("sample.py") == "sample.py"


def test_the_hint_survives_a_deleted_current_folder(tmp_path, monkeypatch):
    """relpath asks for the current folder: deleted during a training, the closing hint raised."""
    from tinygpt.errors import script_word
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert script_word("sample.py") == str(ROOT / "sample.py")

"""bench.py end to end on a tiny model: every section runs and reports sane, self-consistent figures.
Flags out of range (counts beyond their bound, a --json path through a file, to a device or a pipe,
or empty) are refused before any work. A stopped bench stops its busy process (--under-load)."""
from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from tinygpt.runtime import usable_cores

TWO_CORES = pytest.mark.skipif(usable_cores() < 2, reason="--under-load needs 2 cores (beside its busy process)")


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory, one_thread) -> tuple[dict, Path]:
    """bench.py's every section on a tiny model: (its result, its --json file)."""
    import bench
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "bench.json"
    cwd = os.getcwd()
    os.chdir(ROOT)  # no config given: the default, configs/stories.yaml, which needs no download
    try:
        res = bench.main(["--set", "data.stories_chars=20000",
                          f"data.prepared_dir={tmp / 'prepared'}", "model.n_layer=1", "model.n_head=2",
                          "model.n_embd=32", "model.block_size=32", "train.batch_size=4", "train.device=cpu",
                          "--dtypes", "float32,bfloat16", "--steps", "2", "--attention", "--gen-tokens", "20",
                          "--gen-layers", "1", "--gen-heads", "2", "--gen-embd", "32", "--gen-block", "64",
                          "--json", str(out)])
    finally:
        os.chdir(cwd)
    assert res["config"] == "configs/stories.yaml"
    return res, out


def test_bench_reports_every_section(bench_run):
    res, out = bench_run
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    assert set(res["cpu"]) == {"family", "model", "low_precision"}  # (the model name alone: 'AMD EPYC')
    flops_per_token = {}
    for d in ("float32", "bfloat16"):
        assert res["peak_gflops"][d] > 0
        train = res["train"][d]
        assert train["tokens_per_s"] == pytest.approx(4 * 32 / (train["step_ms"] / 1e3))
        assert train["step_ms_range"][0] <= train["step_ms"] <= train["step_ms_range"][1]  # the median's range
        assert train["mfu"] > 0
        flops_per_token[d] = train["mfu"] * res["peak_gflops"][d] * 1e9 / train["tokens_per_s"]
    # the same model does the same FLOPs per token in either dtype: MFU is achieved / peak, no more
    assert flops_per_token["bfloat16"] == pytest.approx(flops_per_token["float32"], rel=1e-6)
    # and the peak is measured in the model's own layout, x @ W^T: measured as x @ W, a bfloat16 peak
    # on an AVX2 CPU came out 15x too low and this MFU at 230-330%
    assert res["train"]["float32"]["mfu"] < 1.5 and res["train"]["bfloat16"]["mfu"] < 1.5
    for d in ("float32", "bfloat16"):
        att = res["attention"][d]
        assert att["sdpa_ms"] > 0 and att["matmul_ms"] > 0
    g = res["generate"]
    assert g["same_text"] and g["n_tokens"] == 20 and g["cached_tokens_per_s"] > 0
    assert 20 < res["peak_memory_mb"] < 64 * 1024  # this process's peak resident set, in MB


def scripted_times(monkeypatch, seconds: list[float]) -> None:
    """bench.timed runs what it times, then says it took the next of `seconds`."""
    import bench
    left = iter(seconds)

    def timed(fn, device):
        fn()
        return next(left)
    monkeypatch.setattr(bench, "timed", timed)


def tiny_bench_config(*overrides: str):
    """configs/stories.yaml shrunk to a 1x2x16 model on batches of 2 x 8 tokens, and stand-in
    training data of 11 token ids: (config, data) as bench_training takes them."""
    from types import SimpleNamespace
    import numpy as np
    from tinygpt.config import load_config
    cfg = load_config(ROOT / "configs/stories.yaml", ["model.n_layer=1", "model.n_head=2", "model.n_embd=16",
                                                      "model.block_size=8", "train.batch_size=2",
                                                      "train.device=cpu", *overrides])
    cfg.model.vocab_size = 11  # (what loading the prepared data sets)
    return cfg, SimpleNamespace(train=np.arange(500) % 11)


def test_training_speed_is_the_median_step_of_every_micro_batchs_tokens(monkeypatch, one_thread):
    """Steps of 0.1, 0.1 and 1.0 s (one hiccup) with train.grad_accum=2: the median step, 100 ms, of
    2 micro-batches x 2 x 8 tokens. A mean (400 ms) would let the hiccup set the speed; tokens
    counted without the micro-batches would halve it."""
    import bench
    scripted_times(monkeypatch, [0.1, 0.1, 1.0])
    cfg, data = tiny_bench_config("train.grad_accum=2")
    (r,) = bench.bench_training(cfg, data, ["float32"], torch.device("cpu"), 3, compile=False).values()
    assert r["step_ms"] == pytest.approx(100.0) and r["tokens_per_s"] == pytest.approx(2 * 2 * 8 / 0.1)


def test_the_kv_cache_speedup_is_cached_over_uncached_tokens_per_s(monkeypatch, one_thread):
    """5 tokens in 0.1 s with the cache and 0.4 s without: the cache is 4x faster, not 0.25x."""
    import bench
    from model import ModelConfig
    # a warm-up round, not counted (9 s each), then 3 rounds, each mode going first in turn: without the
    # cache first in round 1, with it in round 2, ...
    scripted_times(monkeypatch, [9.0, 9.0, 0.4, 0.1, 0.1, 0.4, 0.4, 0.125])
    g = bench.bench_generation(ModelConfig(block_size=16, n_layer=1, n_head=2, n_embd=16, vocab_size=11), 5,
                               torch.device("cpu"), reps=3)
    assert g["cached_tokens_per_s"] == pytest.approx(50.0) and g["uncached_tokens_per_s"] == pytest.approx(12.5)
    assert g["speedup"] == pytest.approx(4.0) and g["same_text"]
    assert g["cached_range"] == pytest.approx([40.0, 50.0]) and g["uncached_range"] == pytest.approx([12.5, 12.5])


def test_the_kv_cache_race_decodes_with_and_without_the_cache_and_compares_their_text(monkeypatch, one_thread):
    import bench
    from model import ModelConfig
    asked = []

    def generate(model, idx, n, temperature, use_cache):  # other tokens with the cache than without it
        asked.append(use_cache)
        return iter([1 if use_cache else 2] * n)
    monkeypatch.setattr(bench, "generate", generate)
    g = bench.bench_generation(ModelConfig(block_size=16, n_layer=1, n_head=2, n_embd=16, vocab_size=11), 5,
                               torch.device("cpu"), reps=1)
    assert set(asked) == {True, False} and not g["same_text"]


def test_a_race_alternates_its_variants_each_going_first_in_turn_after_a_warm_up(monkeypatch):
    """In a fixed order the second of two modes ran 6-11% slower idle: the first of each round rotates; the
    warm-up round (first calls allocate and fill caches) is run, and not counted."""
    import bench
    calls = []
    scripted_times(monkeypatch, [float(i) for i in range(12)])
    times = bench.race({name: (lambda name=name: calls.append(name)) for name in "abc"}, 3, torch.device("cpu"))
    assert calls == list("abc" "bca" "cab" "abc")
    assert times == {"a": [5.0, 7.0, 9.0], "b": [3.0, 8.0, 10.0], "c": [4.0, 6.0, 11.0]}  # 0, 1, 2: the warm-up


def test_loss_parity_is_the_mean_loss_of_the_last_10_steps(monkeypatch):
    """12 steps of losses 0, 1, ..., 11: the last 10 average 6.5; the first 10 (4.5) are mostly the
    untrained start that every dtype shares."""
    import bench

    class ScriptedLosses:
        def __init__(self, cfg, data, dtype, device, compile):
            self.losses = iter(range(12))

        def step(self) -> torch.Tensor:
            return torch.tensor(float(next(self.losses)))
    monkeypatch.setattr(bench, "TrainBench", ScriptedLosses)
    assert bench.loss_parity(None, None, ["float32", "bfloat16"], torch.device("cpu"), 12) == \
        {"float32": 6.5, "bfloat16": 6.5}


def test_peak_memory_is_in_mb_on_each_system(monkeypatch):
    """ru_maxrss counts KiB on Linux and bytes on macOS; Windows has no resource module."""
    import bench
    cpu = torch.device("cpu")
    linux = bench.peak_memory_mb(cpu)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert bench.peak_memory_mb(cpu) == pytest.approx(linux / 1024, rel=0.05)
    monkeypatch.setitem(sys.modules, "resource", None)  # import resource fails, as on Windows
    assert bench.peak_memory_mb(cpu) is None


POSIX = pytest.mark.skipif(os.name != "posix", reason="a device and a named pipe by their POSIX paths")


@pytest.mark.parametrize("flags, match", [
    (["--json", "{tmp}/afile/x.json"], "folder of --json .*afile is a file"),
    pytest.param(["--json", "/dev/null"], "--json: cannot write /dev/null: it is a device, not a regular file", marks=POSIX),
    pytest.param(["--json", "{tmp}/fifo"], "--json: cannot write .*fifo: it is a pipe, not a regular file", marks=POSIX),
    (["--json", ""], "--json '' is an empty path; give a file name"),
    (["--json", "{tmp}/newdir/"], "names a folder"),  # it wrote a file named newdir
    (["--gen-tokens", "1000000000000"], r"--gen-tokens=1000000000000 must be in \[0, 10,000\]"),
    (["--loss-steps", "1000000000000"], r"--loss-steps=1000000000000 must be in \[0, 10,000\]"),
    (["--steps", "10001"], r"--steps=10001 must be in \[0, 10,000\]"),
    (["--steps", "-1"], r"^--steps=-1 must be in \[0, 10,000\]"),
    (["--gen-tokens", "5", "--gen-layers", "0"], r"^--gen-layers=0 must be >= 1$"),
    (["--gen-tokens", "5", "--gen-embd", "30", "--gen-heads", "4"],
     r"^--gen-embd=30 is not divisible by --gen-heads=4$"),
    # a file that bench.py did not write: the config it reads (it became JSON), a user's JSON, bench.py itself
    (["--json", "{tmp}/my.yaml"], r"--json: it would overwrite '.*my.yaml', which is not a result that bench.py "
                                  r"wrote \(a file of yours\); move it away, or choose another file name"),
    (["--json", "{tmp}/notes.json"], r"--json: it would overwrite '.*notes.json', which is not a result"),
    (["--json", str(ROOT / "bench.py")], r"--json: it would overwrite '.*bench.py', which is not a result"),
    # transformers decodes at most --gen-block - 1 tokens: it failed at the end, in a traceback
    (["--vs-hf", "--gen-block", "1"], r"--vs-hf needs --gen-block >= 2 \(not 1\)"),
    (["--steps", "0", "--gen-tokens", "0"], r"--steps 0 and --gen-tokens 0 leave nothing to measure"),
    (["--dtypes", "float32,float32"], r"--dtypes='float32,float32' names a dtype twice; give each once"),
    (["--dtypes", ","], r"--dtypes=',': use float32, bfloat16 and/or float16"),
    (["--dtypes", "float32,int8"], r"^--dtypes='float32,int8': use float32, bfloat16 and/or float16$")])
def test_bench_refuses_flags_before_any_work(tmp_path, monkeypatch, flags, match):
    import bench
    from tinygpt.errors import UserError
    (tmp_path / "afile").write_text("a file, not a folder")
    (tmp_path / "my.yaml").write_text((ROOT / "configs/stories.yaml").read_text())
    (tmp_path / "notes.json").write_text('{"date": "2024-01-01", "notes": "mine"}')
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
    monkeypatch.setattr(bench, "prepare", lambda cfg: pytest.fail("the benchmark started"))
    with pytest.raises(UserError, match=match):
        bench.main([str(ROOT / "configs/stories.yaml"), *[f.format(tmp=tmp_path) for f in flags]])


def test_bench_takes_the_largest_step_count(monkeypatch):
    import bench
    monkeypatch.setattr(bench, "prepare", lambda cfg: pytest.fail("the benchmark started (as it should)"))
    with pytest.raises(pytest.fail.Exception, match="the benchmark started"):
        bench.main([str(ROOT / "configs/stories.yaml"), "--steps", "10000", "--gen-tokens", "0"])


def test_the_training_table_compares_each_dtype_with_the_first_given(tmp_path, monkeypatch, capsys):
    import bench
    monkeypatch.setattr(bench, "peak_flops", lambda dtype, device, budget_s: (1e12, "stub"))
    speed = {"float32": 1000.0, "bfloat16": 2000.0}
    monkeypatch.setattr(bench, "bench_training", lambda cfg, data, dtypes, device, steps, compile: {
        d: {"step_ms": 1e3 / speed[d], "step_ms_range": [1.0, 2.0], "tokens_per_s": speed[d], "achieved_flops": 1e11}
        for d in dtypes})
    bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000", "train.device=cpu",
                f"data.prepared_dir={tmp_path / 'prepared'}", "model.n_layer=1", "model.n_head=1", "model.n_embd=16",
                "model.block_size=16", "--steps", "1", "--gen-tokens", "0", "--dtypes", "float32,bfloat16"])
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("dtype"))
    assert lines[header].split()[4:6] == ["vs", "float32"]
    assert lines[header + 1].split()[4] == "1.00x" and lines[header + 2].split()[4] == "2.00x"


def test_train_threads_pins_the_bench_and_a_busy_machine_is_noted(tmp_path, monkeypatch, capsys):
    """`--set train.threads=1` was accepted and ignored (`2 threads` in the header and the JSON); on a
    busy machine bench.py measured two threads fighting a busy core (bfloat16 0.73x float32 where idle
    it is 1.7x, decoding 5 tok/s where 96) and said nothing."""
    import bench

    class OneCoreFree:  # the thread policy's first look: another process keeps one core of two busy
        threads = 1
    policy = bench.ThreadPolicy
    monkeypatch.setattr(bench, "ThreadPolicy", lambda fixed=0: policy(fixed=fixed) if fixed else OneCoreFree())
    args = [str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000", f"data.prepared_dir={tmp_path}",
            "model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32", "train.batch_size=4",
            "train.device=cpu", "--dtypes", "float32", "--steps", "1", "--gen-tokens", "0"]
    with torch_threads(2):
        result = bench.main(args)
        assert result["threads"] == 2
        # the note goes to stderr (on stdout, `bench.py | head -1` showed it, not the table) and into the results
        # (their JSON said nothing of the busy machine it warns of)
        printed = capsys.readouterr()
        assert "note: other processes keep 1 of the 2 cores busy now" in printed.err and ", 2 threads\n" in printed.out
        assert "note:" not in printed.out and result["busy_cores_at_start"] == 1
        result = bench.main([*args, "--set", "train.threads=1"])
        assert result["threads"] == 1 and "busy_cores_at_start" not in result  # pinned: not looked at
        printed = capsys.readouterr()
        assert "note:" not in printed.out + printed.err and ", 1 thread\n" in printed.out  # (not `1 threads`)
        table = printed.out.split(", 1 thread\n", 1)[1].splitlines()[:2]  # its header and float32's row
        assert table[0].startswith("dtype") and table[1].startswith("float32")
        assert all(len(row) <= 79 for row in table), table  # (82: an 80-column terminal wrapped the peak)


@contextlib.contextmanager
def torch_threads(n: int):
    """torch's intra-op threads at n inside the with block, and as they were after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("free, busy", [(4, 0), (1, 3)])
def test_the_busy_cores_are_those_the_free_ones_leave(monkeypatch, capsys, free, busy):
    """Of 4 threads with 1 core free, 3 are busy (the free count was written as the busy one); all 4 free: none,
    and nothing said."""
    import bench
    monkeypatch.setattr(bench, "ThreadPolicy", lambda fixed=0: type("Policy", (), {"threads": free})())
    with torch_threads(4):
        assert bench.pin_or_note_threads(0) == busy
    err = capsys.readouterr().err
    assert err.startswith("note: other processes keep 3 of the 4 cores busy now") if busy else err == ""


def test_vs_hf_asks_500_tokens_where_none_are_given(tmp_path, monkeypatch):
    import bench
    monkeypatch.setattr(bench, "bench_vs_hf", lambda gcfg, n, device, **kwargs: pytest.fail(f"asked {n}"))
    with pytest.raises(pytest.fail.Exception, match=r"^asked 500$"):
        bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000", "train.device=cpu",
                    f"data.prepared_dir={tmp_path / 'prepared'}", "--steps", "0", "--gen-tokens", "0", "--gen-layers",
                    "1", "--gen-heads", "1", "--gen-embd", "16", "--gen-block", "32", "--vs-hf"])


def test_logits_a_twentieth_apart_do_not_agree(one_thread):
    """Logits within AGREE (a tenth) of their sd agree: rounding. A final LayerNorm scaled by 1.05, a model computed
    otherwise, is about 0.2 sd off: no agreement (a threshold of half the sd called it the same model)."""
    transformers = pytest.importorskip("transformers")
    import bench
    from model import GPT, ModelConfig
    from tinygpt import hf
    torch.manual_seed(0)
    mcfg = ModelConfig(block_size=32, n_layer=1, n_head=2, n_embd=32, vocab_size=37)
    model = GPT(mcfg).eval()
    theirs = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=37, n_positions=32, n_embd=32, n_layer=1, n_head=2, activation_function="gelu")).eval()
    weights = hf.gpt2_state_dict(model)
    theirs.load_state_dict(weights, strict=False)
    same = bench.logits_compared(model, theirs, mcfg, torch.device("cpu"))
    assert same["logits_agree"] and same["logits_max_diff"] < 0.01 * same["logits_sd"]
    theirs.load_state_dict({k: v * 1.05 if k.endswith("ln_f.weight") else v for k, v in weights.items()}, strict=False)
    other = bench.logits_compared(model, theirs, mcfg, torch.device("cpu"))
    assert 0.12 < other["logits_max_diff"] / other["logits_sd"] < 0.4 and not other["logits_agree"]


def test_json_replaces_an_earlier_result_only(bench_run, tmp_path):
    """--json replaces bench.py's own earlier result (told by its keys, which every result has held),
    and nothing else: the check above refuses a user's file before any work."""
    import bench
    _, out = bench_run
    earlier = tmp_path / "bench.json"
    earlier.write_bytes(out.read_bytes())
    bench.check_json_target(str(earlier))  # no refusal
    assert bench.is_bench_result(earlier)
    for text in ("[1, 2]", '"a string"', "{", "x" * 10, json.dumps({"date": "2024-01-01"}), "[" * 100_000):
        earlier.write_text(text)
        assert not bench.is_bench_result(earlier), text[:20]
    earlier.write_bytes(b"\xff\xfe binary")
    assert not bench.is_bench_result(earlier)


def test_json_through_a_link_to_nothing_or_named_dash_is_refused(tmp_path, monkeypatch):
    """--json through a link to a missing file made the missing folders and wrote there (as root, at /), exit
    0; `--json -` wrote a file named '-'. Both are refused before any work, as sample.py's --attention-html is."""
    import bench
    from tinygpt.errors import UserError
    link = tmp_path / "dl.json"
    link.symlink_to(tmp_path / "gone" / "x.json")
    with pytest.raises(UserError, match=r"^--json .*dl\.json' is a link \(.* -> .*gone/x\.json\) that leads to no "):
        bench.check_json_target(str(link))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"^--json - would be a file named '-'; the results are printed on standard"):
        bench.check_json_target("-")
    assert not (tmp_path / "gone").exists() and not (tmp_path / "-").exists()


class Started(Exception):
    """The benchmark got past its checks."""


def test_a_second_bench_on_one_json_is_refused(tmp_path, monkeypatch):
    """Two bench.py --json to one file: both exit 0, the file held the second's result alone, the first's
    lost (and its figures, slowed by the second, without a note). One at a time now; the first is done
    before it writes, so the second is refused before any work."""
    import bench
    from tinygpt.errors import UserError
    from tinygpt.runs import run_lock
    monkeypatch.setattr(bench, "load_config", lambda path, overrides: (_ for _ in ()).throw(Started()))
    target = tmp_path / "b.json"
    # a first one (its lock as bench.main takes it); the refusal named the folder, though the lock is per file
    with run_lock(tmp_path, "--json", name=".b.json.lock", in_use=f"--json={str(target)!r} is being written by another "
                                                                  f"bench.py"):
        with pytest.raises(UserError, match=r"^--json='\S+b.json' is being written by another bench.py "
                                            r"\(process \d+\); wait for it to end, or choose another --json$"):
            bench.main(["--steps", "1", "--gen-tokens", "0", "--json", str(target)])
        with pytest.raises(Started):  # another file there: measured
            bench.main(["--steps", "1", "--gen-tokens", "0", "--json", str(tmp_path / "c.json")])
    with pytest.raises(Started):  # the first one done
        bench.main(["--steps", "1", "--gen-tokens", "0", "--json", str(target)])


def test_the_default_config_is_the_repositorys_from_any_folder(tmp_path, monkeypatch):
    """From another folder, bench.py's own default was `config file not found: configs/stories.yaml`;
    a relative CONFIG given stays relative to the current folder."""
    import bench
    from tinygpt.errors import UserError
    read = []
    real_load = bench.load_config
    def load_config(path, overrides):
        read.append(path)
        real_load(path, overrides)
        raise Started
    monkeypatch.setattr(bench, "load_config", load_config)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Started):
        bench.main(["--steps", "1", "--gen-tokens", "0"])
    assert Path(read[-1]) == ROOT / "configs/stories.yaml"
    with pytest.raises(UserError, match="config file not found: configs/stories.yaml"):
        bench.main(["configs/stories.yaml", "--steps", "1", "--gen-tokens", "0"])
    monkeypatch.chdir(ROOT)  # from the repository's root, as results have always recorded it
    with pytest.raises(Started):
        bench.main(["--steps", "1", "--gen-tokens", "0"])
    assert read[-1] == "configs/stories.yaml"


@pytest.mark.parametrize("flags, match", [
    (["--under-load"], r"^training \(1 layer, n_embd 16, block 256, batch 10000000\) needs at least [\d,.]+ GB"),
    (["--loss-steps", "1"], r"^training \(1 layer, n_embd 16, block 256, batch 10000000\) needs at least"),
    (["--attention"], r"^--attention \(batch 10000000, block 256, 1 heads\) needs at least [\d,.]+ GB")])
def test_a_config_too_big_for_under_load_loss_steps_or_attention_is_refused_at_once(
        tmp_path, monkeypatch, capsys, flags, match):
    """With --steps 0 the training memory check was skipped: --under-load (which trains the config) and
    --attention (one layer's attention) allocated it, and ended in `out of memory` naming no key. On a
    busy machine, the refusal came after a note on the busy cores: two lines for one refusal."""
    import bench
    from types import SimpleNamespace
    from tinygpt.errors import UserError
    for name in ("bench_under_load", "bench_attention", "loss_parity"):
        monkeypatch.setattr(bench, name, lambda *a, **k: pytest.fail("the benchmark started"))
    monkeypatch.setattr(bench, "ThreadPolicy", lambda fixed: SimpleNamespace(threads=1))  # a core busy
    monkeypatch.setattr(bench.torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(bench.torch, "set_num_threads", lambda n: None)
    with pytest.raises(UserError, match=match):
        bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000", "train.device=cpu",
                    f"data.prepared_dir={tmp_path / 'prepared'}", "model.n_layer=1", "model.n_head=1",
                    "model.n_embd=16", "model.block_size=256", "train.batch_size=10000000", "--steps", "0",
                    "--gen-tokens", "0", "--dtypes", "float32", *flags])
    assert "cores busy" not in capsys.readouterr().err  # (the refusal's line is all)


def test_a_busy_process_that_ended_before_its_round_refuses_the_figures():
    """The busy process stopped by itself after 120 s, whatever the round's length: on slow cores the
    "loaded" figures were partly idle ones, without a word."""
    import time
    import bench
    from tinygpt.errors import UserError
    with pytest.raises(UserError, match=r"^the busy process ended before the loaded round did \(its limit is 1 s\)"):
        with bench.busy_process(seconds=1):
            time.sleep(2.5)
    with bench.busy_process(seconds=30):  # still running at the end: no word
        pass


@pytest.mark.parametrize("failure", ["ModuleNotFoundError(\"No module named 'huggingface_hub.utils'\", "
                                     "name='huggingface_hub.utils')", "RuntimeError('built for another torch')"],
                         ids=["a dependency missing", "another error"])
def test_vs_hf_with_a_transformers_that_does_not_import_is_refused_before_any_work(tmp_path, monkeypatch, failure):
    """transformers installed, but one of its dependencies missing (or of another version): found (find_spec) but
    not imported until the end, a traceback after every other benchmark had run, their results lost."""
    import bench
    from tinygpt.errors import UserError
    (tmp_path / "transformers").mkdir()
    (tmp_path / "transformers" / "__init__.py").write_text(f"raise {failure}\n")
    monkeypatch.delitem(sys.modules, "transformers", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(bench, "prepare", lambda cfg: pytest.fail("the benchmark started"))
    with pytest.raises(UserError, match=r"^--vs-hf: transformers cannot be imported \(.*(huggingface_hub.utils|another "
                                        r"torch).*\); mend its install \(pip install -U transformers\), or leave "
                                        r"--vs-hf out$"):
        bench.main([str(ROOT / "configs/stories.yaml"), "--vs-hf"])


def test_under_load_with_the_threads_pinned_is_refused(monkeypatch):
    """--under-load's rows (torch's default threads, the policy, one core fewer) all ran on train.threads, labelled
    as the three."""
    import bench
    from tinygpt.errors import UserError
    monkeypatch.setattr(bench, "prepare", lambda cfg: pytest.fail("the benchmark started"))
    with pytest.raises(UserError, match=r"^--under-load compares torch's default threads, the thread policy and one "
                                        r"core fewer: train.threads=1 pins them to one count; leave it out$"):
        bench.main([str(ROOT / "configs/stories.yaml"), "--under-load", "--set", "train.threads=1"])
    # on one core (taskset -c 0) its three rows all ran on one thread, and "the ceiling beside a busy process (one
    # core fewer, idle) is 152% of the policy's idle figure" was printed: noise, as a result
    monkeypatch.setattr(bench, "usable_cores", lambda: 1)
    with pytest.raises(UserError, match=r"^--under-load compares .* beside a busy process: it needs 2 cores or more, "
                                        r"and this process may use 1$"):
        bench.main([str(ROOT / "configs/stories.yaml"), "--under-load"])


def test_vs_hf_counts_the_copies_it_makes(tmp_path, monkeypatch):
    """--vs-hf holds transformers' copy of the weights and two bfloat16 ones beside ours (a float32 copy on the
    way): a model whose weights alone fit was killed by the kernel, the memory check having counted them once."""
    import bench
    from tinygpt import runtime
    from tinygpt.errors import UserError
    pytest.importorskip("transformers")
    gen = ["--gen-layers", "1", "--gen-heads", "1", "--gen-embd", "256", "--gen-block", "4"]
    argv = [str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000", "data.tokenizer=char",
            "train.device=cpu", f"data.prepared_dir={tmp_path / 'prepared'}", "--steps", "0", *gen]
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": 10 << 20})  # 10 MiB: 3.2 MB of weights fit
    bench.main([*argv, "--gen-tokens", "1"])  # the model alone fits
    monkeypatch.setattr(bench, "bench_vs_hf", lambda *a, **k: pytest.fail("the benchmark started"))
    with pytest.raises(UserError, match=r"^the --gen-\* model needs at least .*--vs-hf's copies"):
        bench.main([*argv, "--gen-tokens", "0", "--vs-hf"])
    # 13 MiB: the model and 2.75 copies of its weights fit, not the 3.75 it holds at once
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": 13 << 20})
    with pytest.raises(UserError, match=r"^the --gen-\* model needs at least .*--vs-hf's copies"):
        bench.main([*argv, "--gen-tokens", "0", "--vs-hf"])


def test_the_profilers_own_lines_stay_out_of_the_table(capfd):
    """torch 2.13's profiler printed `USDT:... profiler_start` and `profiler_stop` on stderr, amid --vs-hf's table;
    what the profiled work itself prints still comes through."""
    import bench

    def work():
        torch.randn(8, 8) @ torch.randn(8, 8)
        os.write(2, b"a line of the work\n")  # (through fd 2, as a C library writes: capfd reads sys.stderr apart)
    share = bench.matmul_time_share(work)
    err = capfd.readouterr().err
    assert 0 < share <= 1 and "a line of the work" in err and "profiler_st" not in err, err


def test_a_diverged_loss_is_written_as_json_null():
    """A diverged --loss-steps run wrote `NaN` into --json: no JSON reader but Python's takes it."""
    import json
    import bench
    result = {"loss": {"float32": float("nan"), "bfloat16": 2.5}, "ranges": [1.0, float("inf")], "n": 3}
    assert json.dumps(bench.json_numbers(result), allow_nan=False) == \
        '{"loss": {"float32": null, "bfloat16": 2.5}, "ranges": [1.0, null], "n": 3}'


def test_vs_hf_without_transformers_is_refused_before_any_work(monkeypatch):
    """It was a traceback at the end, after every other benchmark had run, their results lost."""
    import bench
    from tinygpt.errors import UserError
    monkeypatch.setitem(sys.modules, "transformers", None)  # import -> ImportError
    monkeypatch.setattr(bench, "prepare", lambda cfg: pytest.fail("the benchmark started"))
    with pytest.raises(UserError, match="--vs-hf needs Hugging Face transformers: pip install transformers"):
        bench.main([str(ROOT / "configs/stories.yaml"), "--vs-hf"])


@pytest.mark.parametrize("flag", [pytest.param("--under-load", marks=TWO_CORES), "--vs-hf"])
def test_a_decoding_model_too_big_is_refused_before_any_benchmark(tmp_path, monkeypatch, flag):
    """The --gen-* model's memory was checked only with --gen-tokens: --under-load or --vs-hf alone
    built it after the training benchmarks, and the kernel killed the process."""
    import bench
    from tinygpt.errors import UserError
    if flag == "--vs-hf":
        pytest.importorskip("transformers")
    monkeypatch.setattr(bench, "bench_training", lambda *a, **k: pytest.fail("the benchmark started"))
    with pytest.raises(UserError, match=r"the --gen-\* model needs"):
        bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000", "train.device=cpu",
                    f"data.prepared_dir={tmp_path / 'prepared'}", "--gen-tokens", "0", "--gen-layers", "200",
                    "--gen-heads", "1", "--gen-embd", "65536", flag])


def test_bench_vs_transformers_decodes_the_same_tokens(tmp_path, one_thread, capsys):
    pytest.importorskip("transformers")
    import bench
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "train.device=cpu", "--steps", "0",
                      "--gen-tokens", "40", "--gen-layers", "1", "--gen-heads", "2", "--gen-embd", "32",
                      "--gen-block", "32", "--vs-hf", "--json", str(tmp_path / "decode.json")])
    h = res["vs_hf"]
    assert h["same_tokens"] and h["n_tokens"] == 31  # same weights, same greedy tokens: a fair race
    assert h["logits_agree"] and h["logits_max_diff"] <= bench.AGREE * h["logits_sd"]  # and the same model
    out, err = capsys.readouterr()  # (40 asked: capped at the block without a word, "40 tokens" then "31 tokens")
    assert "  the same model: logits of 32 random tokens differ by at most " in out and "warning" not in err
    assert "note: --vs-hf decodes at most --gen-block - 1 = 31 tokens, not the 40 asked" in err
    assert "generation 1x2x32, block 32, 40 tokens:" in out and "block 32, 31 tokens, same weights" in out
    assert h["tinygpt_tokens_per_s"] > 0 and h["transformers_tokens_per_s"] > 0 and h["tinygpt_bf16_tokens_per_s"] > 0
    assert h["ratio"] == pytest.approx(h["tinygpt_tokens_per_s"] / h["transformers_tokens_per_s"])
    assert h["ratio_bf16"] == pytest.approx(h["tinygpt_bf16_tokens_per_s"] / h["transformers_bf16_tokens_per_s"])
    assert 0 <= h["bf16_same_tokens_share"] <= 1 and h["bandwidth_limit_tokens_per_s"] > 0
    assert "int8_problem" not in h and 0 <= h["int8_same_tokens_share"] <= 1  # int8 weights: a CPU, n_embd 32
    assert h["ratio_int8"] == pytest.approx(h["tinygpt_int8_tokens_per_s"] / h["transformers_tokens_per_s"])
    int8 = h["tinygpt_int8_tokens_per_s"]
    assert h["ratio_int8_vs_bf16"] == pytest.approx(int8 / h["transformers_bf16_tokens_per_s"])
    assert 0 < h["matmul_share"] < 1
    assert h["matvec_ms"] > 0 and h["matvec_gb_s"] > 0
    # no read measured here is faster than the one the limit assumes, and the limit is that rate over
    # the weights read per token
    assert h["bandwidth_gb_s"] >= max(h["streaming_gb_s"], h["matvec_gb_s"]) * (1 - 1e-9)
    assert h["bandwidth_limit_tokens_per_s"] == pytest.approx(h["bandwidth_gb_s"] * 1e9 / (h["weights_mb"] * 2**20))
    per_token_ms = 1e3 / h["tinygpt_tokens_per_s"]
    assert h["matvec_ms"] < per_token_ms  # the products alone take less than a whole decoding step
    # scripts/gpu_check.sh's table reads this JSON as its decoding rows
    from scripts import gpu_table
    table = dict(gpu_table.rows(tmp_path, "cpu"))
    assert table["  vs transformers generate"].startswith(f"{h['ratio']:.2f}x (")
    assert "same tokens: True, logits agree: True;" in table["  vs transformers generate"]
    assert "\n| &nbsp;&nbsp;vs transformers generate | " in gpu_table.markdown(gpu_table.rows(tmp_path, "cpu"))
    assert table["decoding 1x2x32, block 32, KV cache"].endswith("x no cache)")


@pytest.mark.parametrize("changed", ["attn.c_proj.weight", "ln_f.weight"])
def test_bench_vs_transformers_tells_another_model_from_the_same(tmp_path, one_thread, capsys, monkeypatch, changed):
    """The weights were token embeddings scaled 50x, tied to the LM head: every greedy token was the prompt's again,
    so "same tokens: True" held with transformers' attention projections zeroed or other position embeddings. The
    logits of random tokens are compared now, and a model computed otherwise is said to be no race. (Its final
    LayerNorm negated: other greedy tokens too, which "same tokens" must say.)"""
    pytest.importorskip("transformers")
    import bench
    from tinygpt import hf
    real = hf.gpt2_state_dict

    def mangled(model):
        return {k: (v.clone().zero_() if changed.startswith("attn") else -v) if k.endswith(changed) else v
                for k, v in real(model).items()}
    monkeypatch.setattr(hf, "gpt2_state_dict", mangled)
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "train.device=cpu", "--steps", "0",
                      "--gen-tokens", "8", "--gen-layers", "1", "--gen-heads", "2", "--gen-embd", "32",
                      "--gen-block", "32", "--vs-hf"])
    h = res["vs_hf"]
    assert not h["logits_agree"] and h["logits_max_diff"] > h["logits_sd"] / 2
    assert h["same_tokens"] is (changed != "ln_f.weight")  # (zeroed attention still picks the same greedy tokens)
    if changed == "ln_f.weight":  # in bfloat16 too, while tinygpt's bfloat16 tokens are mostly its float32 ones
        assert not h["same_tokens_bf16"] and h["bf16_same_tokens_share"] > 0.5
    out, err = capsys.readouterr()
    assert "): NOT the same model" in out
    assert "warning: --vs-hf: transformers computes other logits from the same weights: its tokens/s are no race" in err
    assert "note: --vs-hf decodes at most" not in err  # (8 tokens asked, 31 fit: none cut)


def printed(tmp_path, monkeypatch, capsys, name: str, result: dict, *flags: str) -> tuple[str, str]:
    """What bench.main prints (stdout, stderr) for a decoding model of 1x1x16 when `name` (bench_generation,
    bench_vs_hf) returns `result`."""
    import bench
    monkeypatch.setattr(bench, name, lambda *a, **k: result)
    bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000", "train.device=cpu",
                f"data.prepared_dir={tmp_path / 'prepared'}", "--steps", "0", "--gen-layers", "1", "--gen-heads", "1",
                "--gen-embd", "16", "--gen-block", "32", *flags])
    return capsys.readouterr()


def test_the_generation_line_prints_the_speedup_and_the_text_check(tmp_path, monkeypatch, capsys):
    g = {"cached_tokens_per_s": 400.0, "uncached_tokens_per_s": 100.0, "speedup": 4.0, "cached_range": [390.0, 410.0],
         "uncached_range": [90.0, 110.0], "same_text": False, "n_tokens": 5, "model": "1x1x16, block 32"}
    out, _ = printed(tmp_path, monkeypatch, capsys, "bench_generation", g, "--gen-tokens", "5")
    assert "KV cache 400 tok/s (390-410), no cache 100 tok/s (90-110), 4.0x, same text: False" in out


def test_the_vs_hf_lines_print_the_ratio_the_token_check_and_the_limits(tmp_path, monkeypatch, capsys):
    """Each figure where the report says it is: the race's ratio (tinygpt over transformers) and whether the
    tokens were the same, the bandwidth limit, the time per token a 2x win needs; other greedy tokens from
    a model whose logits agree are warned of."""
    pytest.importorskip("transformers")
    rng = {name: [1.0, 2.0] for name in ("tinygpt", "transformers", "tinygpt bfloat16", "transformers bfloat16")}
    h = {"n_tokens": 31, "tinygpt_tokens_per_s": 300.0, "transformers": "9.9", "transformers_tokens_per_s": 100.0,
         "ratio": 3.0, "same_tokens": False, "rounds": 5, "logits_max_diff": 1e-6, "logits_sd": 1.0,
         "logits_agree": True, "tinygpt_bf16_tokens_per_s": 500.0, "transformers_bf16_tokens_per_s": 250.0,
         "ratio_bf16": 2.0, "same_tokens_bf16": True, "bf16_same_tokens_share": 1.0, "bandwidth_gb_s": 10.0,
         "streaming_gb_s": 5.0, "weights_mb": 2.0, "bandwidth_limit_tokens_per_s": 4768.0, "matmul_share": 0.5,
         "matvec_ms": 1.0, "matvec_gb_s": 10.0, "tokens_per_s_range": rng, "int8_problem": "n/a"}
    out, err = printed(tmp_path, monkeypatch, capsys, "bench_vs_hf", h, "--gen-tokens", "31", "--vs-hf")
    assert "tinygpt 300 tok/s (1-2), transformers 9.9 generate 100 tok/s (1-2): 3.00x; same tokens: False " \
           "(medians of 5 rounds" in out
    assert "over 2.0 MiB of weights read per token: about 4,768 tok/s for reading them alone" in out
    assert "2x transformers needs <= 5.0 ms per token in all" in out  # (half of transformers' 10 ms)
    assert "warning: --vs-hf: transformers chose other greedy tokens from the same weights" in err


def test_the_matmul_share_counts_addmm():
    """A linear layer with a bias is aten::addmm, not aten::mm (GPT-2's layers have biases)."""
    import bench
    b, x, w = torch.randn(256), torch.randn(256, 256), torch.randn(256, 256)
    assert bench.matmul_time_share(lambda: [torch.addmm(b, x, w) for _ in range(50)]) > 0.5


def test_the_matmul_share_prints_no_profiler_warning(monkeypatch):
    """bench.py --vs-hf profiles one decoding run. On an H200 (torch 2.11) torch.profiler warned there
    that it "clears events at the end of each cycle", two lines in the middle of the report: a profile
    prepared twice does so (replayed here), and one profile is one cycle, so the warning is dropped."""
    import warnings

    import torch.profiler
    import torch.profiler.profiler as profiler_module

    import bench
    monkeypatch.setattr(profiler_module, "_WARNINGS_SHOWN", set())  # (torch warns once a process)

    class PreparedTwice(torch.profiler.profile):
        def __enter__(self):
            self.prepare_trace()
            return super().__enter__()

    monkeypatch.setattr(torch.profiler, "profile", PreparedTwice)
    x, w = torch.randn(1, 64), torch.randn(64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        share = bench.matmul_time_share(lambda: [x @ w for _ in range(20)])
    assert 0 < share <= 1


def test_the_bandwidth_limit_counts_the_weights_a_token_reads(monkeypatch, one_thread):
    """Decoding a token reads every weight once, but the position embedding's one row only: the
    weights of a 1x2x32 model of 37 tokens are V*C + 12*C*C + 2*C + C float32s, without its 32 x 32
    position table (which would add 4 KiB, 8%)."""
    pytest.importorskip("transformers")
    import bench
    from model import ModelConfig
    # (a 256 MiB read, not measured here: a streaming rate slower than any product, so the limit is the products')
    monkeypatch.setattr(bench, "memory_bandwidth", lambda device: 1.0)
    h = bench.bench_vs_hf(ModelConfig(block_size=32, n_layer=1, n_head=2, n_embd=32, vocab_size=37), 8,
                          torch.device("cpu"), reps=1)
    assert h["bandwidth_gb_s"] == pytest.approx(h["matvec_gb_s"]) and h["rounds"] == 1
    C = 32
    weights = 37 * C + 12 * C * C + 2 * C + C  # embedding (the tied LM head), one block, the final LayerNorm
    assert h["weights_mb"] == pytest.approx(4 * weights / 2**20)
    assert h["bandwidth_limit_tokens_per_s"] == pytest.approx(h["bandwidth_gb_s"] * 1e9 / (4 * weights))
    # int8: one byte a weight of the six products and the LM head (its own copy), a bfloat16 scale a row,
    # the LayerNorms in bfloat16; the embedding is a lookup
    int8 = 12 * C * C + 37 * C + 2 * (9 * C + 37) + 2 * (2 * C + C)
    assert h["int8_weights_mb"] == pytest.approx(int8 / 2**20)
    assert h["int8_bandwidth_limit_tokens_per_s"] == pytest.approx(h["bandwidth_gb_s"] * 1e9 / int8)


@pytest.mark.slow
def test_vs_hf_compile_races_the_compiled_int8_step_against_int8_alone(tmp_path, one_thread, monkeypatch, capsys):
    """--vs-hf --compile: the float32 step compiled in the main race, the int8 one in a race of its own
    after it, both decoding the tokens of their uncompiled models."""
    pytest.importorskip("transformers")
    from test_runtime import has_cpp_compiler
    if not has_cpp_compiler():
        pytest.skip("no C++ compiler for torch.compile")
    import bench
    from tinygpt import runtime
    monkeypatch.setattr(runtime, "COMPILE_OPTIONS", {})  # (no search of matrix kernels: seconds, not a minute)
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "train.device=cpu", "--steps", "0",
                      "--gen-tokens", "8", "--gen-layers", "1", "--gen-heads", "2", "--gen-embd", "32",
                      "--gen-block", "16", "--vs-hf", "--compile"])
    h = res["vs_hf"]
    assert h["same_tokens_compiled"] and h["same_tokens_int8_compiled"]
    assert h["int8_compiled_tokens_per_s"] > 0 and h["int8_compiled_over_int8"] > 0
    assert "tinygpt int8 --compile" not in h["tokens_per_s_range"]  # (not in the main race)
    out = capsys.readouterr().out
    # (int8 alone's rate in that race printed too: the ratio is over it, not over the main race's int8 figure)
    alone = h["int8_in_compiled_race_tokens_per_s"]
    assert h["int8_compiled_over_int8"] == pytest.approx(h["int8_compiled_tokens_per_s"] / alone)
    assert f"int8 weights, the decoding step compiled (in a race with int8 alone, {alone:,.0f} tok/s there): " \
           f"{h['int8_compiled_tokens_per_s']:,.0f} tok/s (" in out and "x int8 uncompiled; same tokens: True" in out


def test_vs_hf_says_why_int8_weights_were_not_measured(tmp_path, monkeypatch, one_thread, capsys):
    """A width torch's int8 kernel cannot read (n_embd 24): the race runs without int8, and says why."""
    pytest.importorskip("transformers")
    import bench
    monkeypatch.setattr(bench, "memory_bandwidth", lambda device: 1e9)  # (a 256 MiB read, not measured here)
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "train.device=cpu", "--steps", "0",
                      "--gen-tokens", "4", "--gen-layers", "1", "--gen-heads", "2", "--gen-embd", "24",
                      "--gen-block", "16", "--vs-hf"])
    h = res["vs_hf"]
    # (the width is --gen-embd's: "model.n_embd" named a setting this race has not)
    assert h["int8_problem"].startswith("int8 weights need --gen-embd a multiple of 16")
    assert "tinygpt int8" not in h["tokens_per_s_range"] and "ratio_int8" not in h and h["same_tokens"]
    assert f"  int8 weights: not measured ({h['int8_problem']})\n" in capsys.readouterr().out


@pytest.mark.slow
@TWO_CORES
def test_bench_under_load_reports_idle_and_loaded_with_the_threads_used(tmp_path, one_thread, monkeypatch, capsys):
    import bench
    trained_in = []
    real_trainer = bench.TrainBench
    def spy(cfg, data, dtype, device, compile):
        trained_in.append(dtype)
        return real_trainer(cfg, data, dtype, device, compile)
    monkeypatch.setattr(bench, "TrainBench", spy)
    real_under_load = bench.bench_under_load  # 3 rounds, not 6: each mode still goes first once
    monkeypatch.setattr(bench, "bench_under_load", lambda *a, **k: real_under_load(*a, **k, reps=3))
    busy, loaded = [], []  # (is the busy process running, at each measurement?)
    real_busy, real_timed = bench.busy_process, bench.timed

    @contextlib.contextmanager
    def spied_busy():
        with real_busy():
            busy.append(True)
            yield
            busy.pop()
    monkeypatch.setattr(bench, "busy_process", spied_busy)
    monkeypatch.setattr(bench, "timed", lambda fn, device: loaded.append(bool(busy)) or real_timed(fn, device))
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "model.n_layer=1", "model.n_head=2",
                      "model.n_embd=32", "model.block_size=32", "train.batch_size=4", "train.device=cpu",
                      "--steps", "0", "--gen-tokens", "0", "--dtypes", "bfloat16,float32", "--gen-layers", "1",
                      "--gen-heads", "2", "--gen-embd", "32", "--gen-block", "64", "--under-load"])
    assert trained_in == ["bfloat16"] and res["under_load_dtype"] == "bfloat16"  # the first of --dtypes
    # after one uncounted decoding, 3 rounds of 2 blocks (idle, loaded) of 3 modes x 2 works: the busy block goes
    # first in turn (idle went first in every round), and each block is wholly idle or wholly loaded
    blocks = [loaded[1 + 6 * i:7 + 6 * i] for i in range(6)]
    assert len(loaded) == 37 and all(len(set(block)) == 1 for block in blocks)
    assert [block[0] for block in blocks] == [False, True, True, False, False, True]
    u = res["under_load"]
    assert sorted(u) == ["decode|default threads", "decode|one core fewer", "decode|policy",
                         "train|default threads", "train|one core fewer", "train|policy"]
    cores = len(os.sched_getaffinity(0))
    for key, r in u.items():
        assert r["idle"] > 0 and r["loaded"] > 0 and r["loaded_over_idle"] == pytest.approx(r["loaded"] / r["idle"])
        if key.endswith(("default threads", "one core fewer")):
            # torch's count, as the test set it; one core fewer than 1 is still 1
            assert r["idle_threads"] == r["loaded_threads"] == 1
        else:  # the policy: the free cores, and one fewer beside the busy process
            assert 1 <= r["idle_threads"] <= cores and 1 <= r["loaded_threads"] <= max(1, cores - 1)
    out = capsys.readouterr().out
    for work in ("decode", "train"):  # the ceiling over the policy's idle figure, the policy's loaded over the ceiling
        ceiling, policy = u[f"{work}|one core fewer"]["idle"], u[f"{work}|policy"]
        assert (f"{work}: the ceiling beside a busy process (one core fewer, idle) is "
                f"{ceiling / policy['idle']:.0%} of the policy's idle figure; loaded, the policy reaches "
                f"{policy['loaded'] / ceiling:.0%} of that ceiling") in out


def test_under_load_counts_the_threads_each_mode_decoded_with(monkeypatch):
    """With 2 threads by default: one core fewer is 1 thread (not 2), and a policy that decodes its tokens on 1 and 2
    threads in turn used 1.5 on the mean (not its most). (The work itself faked: the bookkeeping is tested.)"""
    import types

    import bench
    from tinygpt.config import ModelConfig

    def alternating(tokens, policy):  # (as runtime.following_free_cores: the policy sets the threads per token)
        for i, token in enumerate(tokens):
            if policy is not None:
                torch.set_num_threads(1 + i % 2)
            yield token
    monkeypatch.setattr(bench, "busy_process", contextlib.nullcontext)
    monkeypatch.setattr(bench, "timed", lambda fn, device: fn() or 1.0)
    monkeypatch.setattr(bench, "generate", lambda model, idx, n, temperature: iter(range(n)))
    monkeypatch.setattr(bench, "following_free_cores", alternating)
    monkeypatch.setattr(bench, "TrainBench", lambda *a, **k: types.SimpleNamespace(step=lambda: torch.zeros(())))
    cfg = types.SimpleNamespace(train=types.SimpleNamespace(batch_size=1, grad_accum=1), model=types.SimpleNamespace(
        block_size=8))
    gcfg = ModelConfig(block_size=8, n_layer=1, n_head=1, n_embd=8, vocab_size=5)
    with torch_threads(2):
        u = bench.bench_under_load(cfg, None, gcfg, torch.device("cpu"), n_tokens=4, steps=1, reps=1)
    assert u["decode|default threads"]["idle_threads"] == u["decode|default threads"]["loaded_threads"] == 2
    assert u["decode|one core fewer"]["idle_threads"] == u["decode|one core fewer"]["loaded_threads"] == 1
    assert u["decode|policy"]["idle_threads"] == u["decode|policy"]["loaded_threads"] == 1.5


def busy_child(pid: int) -> int | None:
    """The pid of bench.busy_process's spin loop among pid's children, or None."""
    for children in Path(f"/proc/{pid}/task").glob("*/children"):  # each thread's
        with contextlib.suppress(OSError):  # (a thread or child that ended meanwhile)
            for child in children.read_text().split():
                if "time.monotonic()" in Path(f"/proc/{child}/cmdline").read_text():
                    return int(child)
    return None


def running(pid: int) -> bool:
    """Is pid a live process (not gone, not a zombie that nobody reaped yet)?"""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("signum, code, stderr", [(signal.SIGTERM, 143, "interrupted\n"), (signal.SIGKILL, -9, "")],
                         ids=["SIGTERM", "SIGKILL"])
@pytest.mark.slow
@TWO_CORES
def test_a_stopped_bench_stops_its_busy_process(tmp_path, signum, code, stderr):
    """bench.py --under-load stopped beside its busy process: SIGTERM is one line, exit 143, and the
    busy process stopped on the way out; after a SIGKILL, when nothing of bench's runs, the kernel
    stops it (it spun on for 2 minutes)."""
    with (tmp_path / "stderr").open("w") as err:  # not a pipe: the busy process holds it too
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench.py"), str(ROOT / "configs/stories.yaml"), "--set",
                                 "data.stories_chars=20000", f"data.prepared_dir={tmp_path / 'prepared'}",
                                 "model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32",
                                 "train.batch_size=4", "train.device=cpu", "--steps", "0", "--gen-tokens", "0",
                                 "--dtypes", "float32", "--gen-layers", "1", "--gen-heads", "2", "--gen-embd", "32",
                                 "--gen-block", "64", "--under-load"], stdout=subprocess.DEVNULL,
                                stderr=err, env={**os.environ, "OMP_NUM_THREADS": "1"})
    busy = None
    try:
        deadline = time.monotonic() + 120
        while busy is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            busy = busy_child(proc.pid)
        assert busy is not None, "no busy process started"
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == code and (tmp_path / "stderr").read_text() == stderr
        deadline = time.monotonic() + 5
        while running(busy) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(busy), "the busy process spins on"
    finally:
        proc.kill()
        if busy is not None and running(busy):  # do not leave it behind
            os.kill(busy, signal.SIGKILL)


def test_peak_memory_is_the_benchmarked_gpus(monkeypatch):
    """torch.cuda.max_memory_allocated() without a device read the current device's (cuda:0): with train.device=
    cuda:1 the bench printed `peak memory: 0 MiB`."""
    import bench
    asked = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: asked.append(device) or 2**21)
    assert bench.peak_memory_mb(torch.device("cuda:1")) == 2.0 and asked == [torch.device("cuda:1")]


def test_gpu_table_reads_what_the_gpu_check_leaves(bench_run, tiny_stories_run, tmp_path):
    """scripts/gpu_check.sh's last step, on the files its stages leave (bench.py's JSON, a run's
    metrics.csv, the status lines), here from CPU runs: every row filled, or marked failed, out of
    time or not run."""
    import shutil

    from scripts import gpu_table
    from tinygpt.runs import read_metrics
    res, out = bench_run
    for name in ("fp32", "tf32_bf16", "decode"):  # compile.json is missing: that stage timed out
        shutil.copy(out, tmp_path / f"{name}.json")
    (tmp_path / "baby").mkdir()
    metrics = (tiny_stories_run / "metrics.csv").read_text()
    (tmp_path / "baby" / "metrics.csv").write_text(metrics)
    (tmp_path / "status").write_text("tests=433 passed, 13 skipped in 90s\nbaby=exit 0\nfp32=exit 0\n"
                                     "tf32_bf16=exit 0\ncompile=exit 124\ndecode=exit 0\nddp=exit 1\n")
    table = dict(gpu_table.rows(tmp_path, "cpu"))
    # the first row names the machine the figures record, not the one the table is made on
    assert gpu_table.main([str(tmp_path)]).startswith(f"| check | result |\n| --- | --- |\n| device | "
                                                      f"{res['device_name']}, torch {res['torch']} |\n")
    # made again without --device, the device is the CPU's name ("AMD EPYC"): the torchrun row said NCCL
    assert "| torchrun, 1 process (gloo starts; no collective) |" in gpu_table.main([str(tmp_path)])
    best = min(r["val_loss"] for r in read_metrics(tiny_stories_run) if r["val_loss"] is not None)
    f32, bf16 = res["train"]["float32"], res["train"]["bfloat16"]
    assert table == {
        "device": "cpu", "tests (TESTS)": "433 passed, 13 skipped in 90s",
        "baby GPT: time to val 1.47": f"not reached (best {best:.3f}; exit 0)",
        "training, float32, TF32 off": f"{f32['tokens_per_s']:,.0f} tok/s, MFU {f32['mfu']:.0%}",
        "training, float32, TF32 on": f"{f32['tokens_per_s']:,.0f} tok/s, MFU {f32['mfu']:.0%}",
        "training, bfloat16": f"{bf16['tokens_per_s']:,.0f} tok/s, MFU {bf16['mfu']:.0%}",
        "training, bfloat16 + torch.compile": "out of time (exit 124)",
        "decoding 1x2x32, block 64, KV cache": f"{res['generate']['cached_tokens_per_s']:,.0f} tok/s "
                                               f"({res['generate']['speedup']:.1f}x no cache)",
        "  decoding step compiled (--compile)": "did not run",
        "torchrun, 1 process (gloo starts; no collective)": "failed (exit 1)"}  # (on the CPU: gloo)
    # the first eval at or under 1.47 gives the time to it
    lines = metrics.splitlines()
    header = lines[0].split(",")
    row = next(i for i, line in enumerate(lines[1:], 1) if line.split(",")[header.index("val_loss")])
    cells = lines[row].split(",")
    cells[header.index("val_loss")] = "1.4600"
    lines[row] = ",".join(cells)
    (tmp_path / "baby" / "metrics.csv").write_text("\n".join(lines) + "\n")
    hit = dict(gpu_table.rows(tmp_path, "cpu"))["baby GPT: time to val 1.47"]
    assert hit == f"{float(cells[header.index('elapsed_s')]):.0f} s (step {int(cells[0])}, val 1.460)"
    # nothing there at all: every row says so, and the table still prints
    empty = dict(gpu_table.rows(tmp_path / "nothing", "cpu"))
    assert empty["tests (TESTS)"] == "did not run" and empty["training, bfloat16"] == "did not run"
    assert empty["baby GPT: time to val 1.47"] == "did not run"  # (it read "not reached (best none; did not run)")
    # a stage that left something else than bench.py writes: its row says it failed, the rest stand
    (tmp_path / "fp32.json").write_text('{"train": {"float32": {"tokens_per_s": "fast"}}}')
    (tmp_path / "decode.json").write_text("[1, 2]")
    odd = dict(gpu_table.rows(tmp_path, "cpu"))
    assert odd["training, float32, TF32 off"] == odd["decoding, KV cache"] == "exit 0, but its figures are missing or damaged"
    assert odd["training, bfloat16"] == table["training, bfloat16"]
    (tmp_path / "nothing").mkdir()  # (an OUT that is not there at all is refused: a typo)
    from tinygpt.errors import UserError
    with pytest.raises(UserError, match="holds no status file, which scripts/gpu_check.sh writes before"):
        gpu_table.main([str(tmp_path / "nothing"), "--device", "cpu"])  # (a run's folder, say: all "did not run")
    (tmp_path / "nothing" / "status").write_text("")  # the script's first write: then stopped
    text = gpu_table.main([str(tmp_path / "nothing"), "--device", "cpu"])
    assert text == gpu_table.markdown(list(empty.items())) and text.startswith("| check | result |\n| --- | --- |\n| device | cpu |")
    # a stage that wrote its figures, then ran out of time: the figures stand, marked (they stood unmarked)
    (tmp_path / "status").write_text("tf32_bf16=exit 124\n")
    late = dict(gpu_table.rows(tmp_path, "cpu"))["training, bfloat16"]
    assert late == f"{table['training, bfloat16']}; then the stage ended: out of time (exit 124)"


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the check runs for minutes")
def test_gpu_check_without_a_gpu_is_one_line_exit_2(tmp_path):
    import subprocess
    r = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh")], env={**os.environ, "OUT": str(tmp_path / "gc")},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr == \
        "error: no CUDA device here: this check needs a GPU (REHEARSE=1 runs it on the CPU)\n", r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("script, env, args, message", [
    ("gpu_check.sh", {"BUDGET": "abc"}, [], "error: BUDGET=abc must be a whole number of seconds\n"),
    ("experiments.sh", {}, ["bogus"], "usage: bash scripts/experiments.sh [all | default | "),
    ("experiments.sh", {}, ["bench", "extra"], "usage: bash scripts/experiments.sh [all | default | ")])
def test_the_scripts_refuse_what_they_do_not_know(tmp_path, script, env, args, message):
    """gpu_check.sh failed on `unbound variable` after clearing its earlier output; experiments.sh
    did nothing with an unknown part, exit 0 (and `bench extra` ran bench)."""
    import subprocess
    (tmp_path / "gc").mkdir()
    (tmp_path / "gc" / "status").write_text("an earlier check's")
    r = subprocess.run(["bash", str(ROOT / "scripts" / script), *args], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "OUT": str(tmp_path / "gc"), **env})
    assert r.returncode == 2 and r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == "" and [p.name for p in (tmp_path / "gc").iterdir()] == ["status"]


@pytest.mark.slow
def test_gpu_check_keeps_to_its_budget(tmp_path):
    """The stages share one budget (the check must end within 10 minutes): a stage that no longer
    fits is skipped and says so in the table, which still prints. (REHEARSE=1 with the whole budget,
    every stage on the CPU with a tiny model, takes ~3 minutes: run by hand, not here; a stand-in Python
    runs the stages, the first for 2 s of a 16 s budget: it starts with up to 1.9 s spent before it, on a busy
    machine (15 s are the least that starts a stage), and leaves too little for the next.)"""
    import subprocess
    from test_shell_scripts import fake_python
    text = tmp_path / "shakespeare.txt"
    text.write_text("To be, or not to be\n" * 50)
    (tmp_path / "gc").mkdir()  # an earlier check's output, in the same folder
    (tmp_path / "gc/tests.txt").write_text("== 12 passed in 3.0s ==\n")
    (tmp_path / "gc/compile.json").write_text(json.dumps({"train": {"bfloat16": {"tokens_per_s": 1e6, "mfu": 0.5}}}))
    r = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh")], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OUT": str(tmp_path / "gc"), "REHEARSE": "1", "BUDGET": "16",
                            "SHAKESPEARE": str(text),
                            "PYTHON": str(fake_python(tmp_path, 2, "== 1 passed in 1.0s =="))})
    assert r.returncode == 0, r.stderr
    status = (tmp_path / "gc/status").read_text().splitlines()
    assert status[:2] == ["tests=exit 0", "tests=1 passed in 1.0s"]  # (the stage's exit, then pytest's summary)
    assert [line.split("=")[0] for line in status[2:]] == \
        ["baby", "fp32", "tf32_bf16", "compile", "decode", "ddp", "decode_compiled"]
    assert all(line.endswith("=skipped: the 16 s budget was spent") for line in status[2:])
    # (and an earlier check's figures are gone, not shown as this one's)
    assert "| training, bfloat16 + torch.compile | skipped: the 16 s budget was spent |" in r.stdout
    assert "| tests (TESTS) | 1 passed in 1.0s |" in r.stdout
    assert "| device | cpu: a rehearsal with a tiny model, not a measurement |" in r.stdout


def test_gpu_table_shows_the_compiled_decoding_stage(tmp_path):
    """The compiled-decoding row: bench.py --vs-hf --compile's figures, or why they are missing
    (its stage failed, or compiling failed and bench.py wrote no compiled figures)."""
    from scripts import gpu_table
    label = "  decoding step compiled (--compile)"
    (tmp_path / "decode_compiled.json").write_text(json.dumps({"vs_hf": {
        "compiled_tokens_per_s": 1234.5, "ratio_compiled": 2.5, "compile_s": 61.2, "same_tokens_compiled": True}}))
    assert dict(gpu_table.rows(tmp_path, "cuda"))[label] == \
        "1,234 tok/s (2.50x transformers), 61 s to compile; same tokens: True"
    (tmp_path / "decode_compiled.json").write_text(json.dumps({"vs_hf": {"ratio": 1.2}}))
    (tmp_path / "status").write_text("decode_compiled=exit 0\n")
    assert dict(gpu_table.rows(tmp_path, "cuda"))[label] == "compiling failed (decode_compiled.txt says why)"
    (tmp_path / "decode_compiled.json").unlink()
    (tmp_path / "status").write_text("decode_compiled=exit 124\n")
    assert dict(gpu_table.rows(tmp_path, "cuda"))[label] == "out of time (exit 124)"
    (tmp_path / "status").write_text("decode_compiled=exit 1\n")
    assert dict(gpu_table.rows(tmp_path, "cuda"))[label] == "failed (exit 1)"


@pytest.mark.slow
def test_json_results_survive_a_reader_who_leaves(tmp_path):
    """`bench.py ... --json F | head -1` exited 0 at the first print after head left, without F."""
    out = tmp_path / "bench.json"
    with open("/dev/full", "w") as full:  # a stdout that takes nothing, as a reader who left
        done = subprocess.run([sys.executable, str(ROOT / "bench.py"), str(ROOT / "configs/stories.yaml"), "--set",
                               "data.stories_chars=20000", f"data.prepared_dir={tmp_path / 'prepared'}",
                               "train.device=cpu", "--steps", "1", "--gen-tokens", "4", "--gen-layers", "1",
                               "--gen-heads", "2", "--gen-embd", "16", "--gen-block", "16", "--dtypes", "float32",
                               "--json", str(out)], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(out.read_text())["generate"]["n_tokens"] == 4


def test_flags_that_would_do_nothing_or_lose_the_results_are_refused_at_once(tmp_path, monkeypatch):
    """Before any work: --compile with neither --steps nor --vs-hf (it compiled nothing, exit 0);
    --set train.dtype or train.compile (ignored: float32, uncompiled, was measured), train.init_from
    (random weights were timed, the JSON listing it as applied); a --json path
    that ends in /. or /.. (a file named like the folder, or `Device or resource busy` after the
    benchmark) or whose name leaves no room for its temp file (`File name too long` after it)."""
    import bench
    from tinygpt.errors import UserError
    monkeypatch.setattr(bench, "load_config", lambda *a: pytest.fail("the benchmark started"))
    cases = [(["--steps", "0", "--gen-tokens", "5", "--compile"], r"^--compile compiles the training step of "
              r"--steps and the decoding step of --vs-hf: with neither it would change nothing"),
             (["--set", "train.dtype=bfloat16"], r"^--set train.dtype=bfloat16: bench.py measures what its flags ask "
              r"for, not train.dtype: give --dtypes bfloat16"),
             (["--set", "train.dtype=float16"], r"not train.dtype: give --dtypes float16 \("),  # (not bfloat16)
             (["--set", "train.compile=true"], r"not train.compile: give --compile$"),
             # the decoding model's shape with nothing decoding: ignored, exit 0, the JSON not recording it
             (["--gen-layers", "7", "--gen-block", "3"], r"^--gen-layers and --gen-block set the model that "
              r"--gen-tokens, --vs-hf and --under-load decode with: with none of them it changes nothing; add one, "
              r"or leave them out$"),
             (["--gen-embd", "96"], r"^--gen-embd sets the model .*leave it out$"),
             (["--set", "train.init_from=/no/run"], r"^--set train.init_from=/no/run: bench.py times random "
              r"weights of the config's shape, never a run's: drop train.init_from$"),
             (["--json", f"{tmp_path}/newdir/."], r"^--json .*newdir/. ends in '.', which names a folder; give a "
              r"file name, e.g. .*newdir/bench.json$"),
             (["--json", f"{tmp_path}/gone/.."], r"^--json .*gone/.. ends in '..', which names a folder"),
             (["--json", str(tmp_path / ("a" * 250 + ".json"))], r"^--json: cannot write .*: its name is 255 "
              r"bytes, and the temp file it is written through adds \d+: give a name of at most \d+ bytes$"),
             (["--json", str(tmp_path / ("a" * 300))], r"^--json: cannot write .*: its name is 300 bytes")]
    for flags, match in cases:
        with pytest.raises(UserError, match=match):
            bench.main(["--steps", "1", "--gen-tokens", "0", *flags])
    assert list(tmp_path.iterdir()) == []  # (no folder made on the way)
    seen = []  # a leading ~ in --json=~/x (which the shell leaves) is the home folder: a folder `~` was made

    def check_json_target(text):
        seen.append(text)
        raise Started
    monkeypatch.setattr(bench, "check_json_target", check_json_target)
    with pytest.raises(Started):
        bench.main(["--steps", "1", "--gen-tokens", "0", "--json=~/bench.json"])
    assert seen == [str(Path.home() / "bench.json")]


def test_compile_with_vs_hf_alone_is_taken(monkeypatch):
    """--compile with --steps 0 compiles --vs-hf's decoding step: not the "would change nothing" above."""
    pytest.importorskip("transformers")
    import bench
    monkeypatch.setattr(bench, "load_config", lambda *a: (_ for _ in ()).throw(Started()))
    with pytest.raises(Started):
        bench.main(["--steps", "0", "--gen-tokens", "0", "--vs-hf", "--compile"])


@pytest.mark.parametrize("loss", [math.nan, math.inf])
def test_a_diverged_loss_comparison_says_so(monkeypatch, capsys, tmp_path, loss):
    """--loss-steps with a learning rate that diverges printed `float32 nan` as a result, exit 0."""
    import bench
    monkeypatch.setattr(bench, "loss_parity", lambda *a: {"float32": loss})
    argv = [str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000", "train.device=cpu",
            f"data.prepared_dir={tmp_path / 'prepared'}", "model.n_layer=1", "model.n_head=1", "model.n_embd=16",
            "model.block_size=16", "train.lr=100000", "--steps", "0", "--gen-tokens", "0", "--dtypes", "float32"]
    bench.main([*argv, "--loss-steps", "1"])
    out, err = capsys.readouterr()
    assert "note: the loss diverged in float32 (not finite): no comparison; lower train.lr (now 100000)\n" in err
    assert f"loss after 1 step (the last step's): float32 {loss}" in out  # (it said "1 steps (the mean of the last 1)")
    monkeypatch.setattr(bench, "loss_parity", lambda *a: {"float32": 2.5})
    bench.main([*argv, "--loss-steps", "12"])  # (loss_parity's mean is of the last 10 steps at most)
    out, err = capsys.readouterr()
    assert "loss after 12 steps (the mean of the last 10): float32 2.5000" in out and "diverged" not in err


def test_the_model_memory_check_counts_each_layers_modules():
    """--gen-layers 10000000 --gen-embd 1 was counted as 0.6 GB of weights and went on building a model
    that needs about 350 GB (37 KB of modules a layer), for hours, until memory ran out."""
    from model import ModelConfig
    from tinygpt import runtime
    from tinygpt.errors import UserError
    deep = ModelConfig(n_layer=10_000_000, n_head=1, n_embd=1, block_size=2, vocab_size=10)
    assert sum(runtime.model_memory(deep).values()) > 300e9
    with pytest.raises(UserError, match="layers' modules"):
        runtime.check_memory(runtime.model_memory(deep), torch.device("cpu"), "the --gen-* model", "lower --gen-layers")


def test_the_training_tables_columns_stay_apart_when_a_range_is_long():
    """A bfloat16 step of 35,972.9 ms ranging 23,300.6-48,755.0 printed `35972.923300.6-48755.0`: the range was
    wider than its 14 columns, and nothing parted it from the median."""
    import bench
    train = {"float32": {"step_ms": 530.0, "step_ms_range": (520.0, 540.0), "tokens_per_s": 241.7, "mfu": 0.2},
             "bfloat16": {"step_ms": 35972.9, "step_ms_range": (23300.6, 48755.0), "tokens_per_s": 3.6, "mfu": 0.001}}
    table = bench.training_table(train, {"float32": 5e10, "bfloat16": 2e10}, "float32")
    header, *rows = table.splitlines()
    assert header.split() == ["dtype", "ms/step", "range", "tokens/s", "vs", "float32", "MFU", "peak", "GFLOP/s"]
    assert rows[1].split() == ["bfloat16", "35972.9", "23300.6-48755.0", "4", "0.01x", "0.1%", "20"]
    assert rows[0].split() == ["float32", "530.0", "520.0-540.0", "242", "1.00x", "20.0%", "50"]
    assert len({len(line) for line in table.splitlines()}) == 1  # (the columns line up)
    short = bench.training_table({"float32": train["float32"]}, {"float32": 5e10}, "float32")
    assert max(map(len, short.splitlines())) == 79  # (an 80-column terminal does not wrap it)


def fake_under_load(monkeypatch):
    """bench_under_load's work faked (its bookkeeping tested): a busy process that only sets a flag, a thread
    policy that sets 1 thread and counts its re-checks, and timed() giving each measurement its own seconds
    (2 + its index, twice that beside the busy process). -> (log of (loaded, threads, seconds) per timed call,
    re-checks per policy)"""
    import types

    import bench
    busy, log, updates = [False], [], []

    @contextlib.contextmanager
    def busy_process():
        busy[0] = True
        try:
            yield
        finally:
            busy[0] = False

    class Policy:
        def __init__(self):
            torch.set_num_threads(1)
            self.threads = 1
            updates.append(0)

        def update(self, force=False):
            updates[-1] += 1
            return self.threads

    def timed(fn, device):
        fn()
        log.append((busy[0], torch.get_num_threads(), (2 + len(log)) * (2 if busy[0] else 1)))
        return log[-1][2]
    monkeypatch.setattr(bench, "busy_process", busy_process)
    monkeypatch.setattr(bench, "ThreadPolicy", Policy)
    monkeypatch.setattr(bench, "timed", timed)
    monkeypatch.setattr(bench, "generate", lambda model, idx, n, temperature: iter(range(n)))
    monkeypatch.setattr(bench, "TrainBench", lambda *a, **k: types.SimpleNamespace(step=lambda: torch.zeros(())))
    return log, updates


def under_load(monkeypatch, threads: int, batch_size: int = 1, grad_accum: int = 1, **counts):
    """bench_under_load of a tiny model with torch on `threads` threads, its work faked (fake_under_load)
    -> (its figures, the timed log, the re-checks per policy)."""
    import types

    import bench
    from tinygpt.config import ModelConfig
    log, updates = fake_under_load(monkeypatch)
    cfg = types.SimpleNamespace(train=types.SimpleNamespace(batch_size=batch_size, grad_accum=grad_accum),
                                model=types.SimpleNamespace(block_size=8))
    gcfg = ModelConfig(block_size=8, n_layer=1, n_head=1, n_embd=8, vocab_size=5)
    with torch_threads(threads):
        u = bench.bench_under_load(cfg, None, gcfg, torch.device("cpu"), **counts)
        assert torch.get_num_threads() == threads  # (put back: the policy left it at 1)
    return u, log, updates


def test_under_load_takes_medians_of_rounds_that_take_turns_loaded_and_idle(monkeypatch):
    """Each round runs an idle and a loaded block (the busy process running through the whole of the loaded one
    only), the blocks and the modes taking turns to go first; each figure is the median of its rounds with their
    range, tokens/s counting every token of a step (grad_accum too) and loaded/idle is loaded over idle; a policy
    re-checks the cores before every token and step; torch's threads are put back."""
    import statistics

    import bench
    n_tokens, steps, reps = 5, 2, 3
    u, log, updates = under_load(monkeypatch, 4, batch_size=2, grad_accum=3, n_tokens=n_tokens, steps=steps,
                                 reps=reps)
    modes = {"default threads": 4, "policy": 1, "one core fewer": 3}
    expected = [(False, 4)]  # the uncounted decoding first
    for rep in range(reps):
        for load in bench.turns(["idle", "loaded"], rep):
            for mode in bench.turns(list(modes), rep):
                expected += [(load == "loaded", modes[mode])] * 2  # decode, train
    assert [(loaded, threads) for loaded, threads, _ in log] == expected
    assert updates == [n_tokens, steps] * (2 * reps)
    per_token = {"decode": n_tokens, "train": steps * 2 * 3 * 8}
    measured = {"decode": log[1::2], "train": log[2::2]}  # (after the uncounted decoding, the two alternate)
    for key, r in u.items():
        work, mode = key.split("|")
        for load in ("idle", "loaded"):
            rates = [per_token[work] / seconds for loaded, threads, seconds in measured[work]
                     if loaded == (load == "loaded") and threads == modes[mode]]
            assert len(rates) == reps and r[load] == statistics.median(rates), (key, load)
            assert r[f"{load}_range"] == [min(rates), max(rates)]
        assert r["loaded_over_idle"] == r["loaded"] / r["idle"] and r["loaded_over_idle"] < 1


def test_under_load_on_one_thread_still_measures_one_core_fewer_on_one(monkeypatch):
    """torch on 1 thread (OMP_NUM_THREADS=1): "one core fewer" is 1 thread too, not 0."""
    u, _, _ = under_load(monkeypatch, 1, n_tokens=2, steps=1, reps=1)
    assert u["decode|one core fewer"]["idle_threads"] == u["train|one core fewer"]["loaded_threads"] == 1


def test_under_load_prints_its_table_and_the_ceiling_of_the_first_dtype(tmp_path, monkeypatch, capsys):
    """The table's rows (idle, loaded, loaded/idle) and the ceiling lines: one core fewer's idle figure over the
    policy's idle one, the policy's loaded figure over that ceiling; trained in the first of --dtypes."""
    import bench
    row = {"idle_range": [1.0, 2.0], "loaded_range": [1.0, 2.0], "idle_threads": 2.0, "loaded_threads": 1.0}
    fake = {f"{work}|{mode}": {**row, "idle": idle, "loaded": loaded, "loaded_over_idle": loaded / idle}
            for work in ("decode", "train")
            for mode, idle, loaded in [("default threads", 500.0, 100.0), ("policy", 400.0, 150.0),
                                       ("one core fewer", 300.0, 200.0)]}
    dtypes = []
    monkeypatch.setattr(bench, "bench_under_load", lambda cfg, data, gcfg, device, dtype: dtypes.append(dtype) or fake)
    monkeypatch.setattr(bench, "usable_cores", lambda: 2)
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "model.n_layer=1", "model.n_head=2",
                      "model.n_embd=32", "model.block_size=32", "train.batch_size=4", "train.device=cpu",
                      "--steps", "0", "--gen-tokens", "0", "--dtypes", "bfloat16,float32", "--gen-layers", "1",
                      "--gen-heads", "2", "--gen-embd", "32", "--gen-block", "64", "--under-load"])
    assert dtypes == ["bfloat16"] and res["under_load_dtype"] == "bfloat16"
    out = capsys.readouterr().out.splitlines()
    policy_row = next(line for line in out if line.startswith("decode, policy"))
    assert policy_row.split()[2:5] == ["400", "150", f"{150 / 400:.0%}"]
    for work in ("decode", "train"):
        assert (f"{work}: the ceiling beside a busy process (one core fewer, idle) is {300 / 400:.0%} of the policy's "
                f"idle figure; loaded, the policy reaches {150 / 300:.0%} of that ceiling") in out


def test_the_busy_process_has_its_own_session_and_is_always_stopped(monkeypatch):
    """A Ctrl-C in the terminal reaches only bench.py (its own session), and the spin loop is killed and reaped
    when the block ends, normally or by an exception (Ctrl-C)."""
    import bench
    procs = []

    class Popen:
        def __init__(self, cmd, **kwargs):
            self.kwargs, self.events = kwargs, []
            procs.append(self)

        def poll(self):
            return None

        def kill(self):
            self.events.append("kill")

        def wait(self):
            self.events.append("wait")
    monkeypatch.setattr(bench.subprocess, "Popen", Popen)
    monkeypatch.setattr(bench.time, "sleep", lambda s: None)
    with bench.busy_process(seconds=5):
        assert procs[0].events == []
    with pytest.raises(KeyboardInterrupt):
        with bench.busy_process(seconds=5):
            raise KeyboardInterrupt
    assert [p.kwargs.get("start_new_session") for p in procs] == [True, True]
    assert [p.events for p in procs] == [["kill", "wait"], ["kill", "wait"]]


def test_the_busy_cores_note_puts_torchs_threads_back(monkeypatch, capsys):
    """The policy's first look sets torch's threads to the free cores: the bench itself runs on torch's default."""
    import bench

    class Policy:
        def __init__(self, fixed=0):
            self.threads = fixed or 1
            torch.set_num_threads(self.threads)
    monkeypatch.setattr(bench, "ThreadPolicy", Policy)
    with torch_threads(4):
        assert bench.pin_or_note_threads(0) == 3 and torch.get_num_threads() == 4
    assert capsys.readouterr().err.startswith("note: other processes keep 3 of the 4 cores busy now")

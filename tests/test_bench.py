"""bench.py end to end on a tiny model: every section runs and reports sane, self-consistent figures."""
from __future__ import annotations

import json
import os

import pytest

from conftest import ROOT


def test_bench_reports_every_section(tmp_path, one_thread):
    import bench
    out = tmp_path / "bench.json"
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "model.n_layer=1", "model.n_head=2",
                      "model.n_embd=32", "model.block_size=32", "train.batch_size=4", "train.device=cpu",
                      "--dtypes", "float32,bfloat16", "--steps", "2", "--attention", "--gen-tokens", "20",
                      "--gen-layers", "1", "--gen-heads", "2", "--gen-embd", "32", "--gen-block", "64",
                      "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    flops_per_token = {}
    for d in ("float32", "bfloat16"):
        assert res["peak_gflops"][d] > 0
        train = res["train"][d]
        assert train["tokens_per_s"] == pytest.approx(4 * 32 / (train["step_ms"] / 1e3))
        assert train["mfu"] > 0
        flops_per_token[d] = train["mfu"] * res["peak_gflops"][d] * 1e9 / train["tokens_per_s"]
    # the same model does the same FLOPs per token in either dtype: MFU is achieved / peak, no more.
    # (No upper bound for bfloat16: on a CPU without native bfloat16 a big bfloat16 matmul, the peak's
    # yardstick, is emulated and slow, while a tiny model's small ones are not.)
    assert flops_per_token["bfloat16"] == pytest.approx(flops_per_token["float32"], rel=1e-6)
    assert res["train"]["float32"]["mfu"] < 1.5
    for d in ("float32", "bfloat16"):
        att = res["attention"][d]
        assert att["sdpa_ms"] > 0 and att["matmul_ms"] > 0
    g = res["generate"]
    assert g["same_text"] and g["n_tokens"] == 20 and g["cached_tokens_per_s"] > 0


def test_bench_vs_transformers_decodes_the_same_tokens(tmp_path, one_thread):
    pytest.importorskip("transformers")
    import bench
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "train.device=cpu", "--steps", "0",
                      "--gen-tokens", "16", "--gen-layers", "1", "--gen-heads", "2", "--gen-embd", "32",
                      "--gen-block", "32", "--vs-hf"])
    h = res["vs_hf"]
    assert h["same_tokens"] and h["n_tokens"] == 16  # same weights, same greedy tokens: a fair race
    assert h["tinygpt_tokens_per_s"] > 0 and h["transformers_tokens_per_s"] > 0 and h["tinygpt_bf16_tokens_per_s"] > 0
    assert h["ratio"] == pytest.approx(h["tinygpt_tokens_per_s"] / h["transformers_tokens_per_s"])
    assert h["ratio_bf16"] == pytest.approx(h["tinygpt_bf16_tokens_per_s"] / h["transformers_bf16_tokens_per_s"])
    assert 0 <= h["bf16_same_tokens_share"] <= 1 and h["bandwidth_limit_tokens_per_s"] > 0
    assert 0 < h["matmul_share"] < 1
    assert h["matvec_ms"] > 0 and h["matvec_gb_s"] > 0
    per_token_ms = 1e3 / h["tinygpt_tokens_per_s"]
    assert h["matvec_ms"] < per_token_ms  # the products alone take less than a whole decoding step


def test_bench_under_load_reports_idle_and_loaded_with_the_threads_used(tmp_path, one_thread):
    import bench
    res = bench.main([str(ROOT / "configs/stories.yaml"), "--set", "data.stories_chars=20000",
                      f"data.prepared_dir={tmp_path / 'prepared'}", "model.n_layer=1", "model.n_head=2",
                      "model.n_embd=32", "model.block_size=32", "train.batch_size=4", "train.device=cpu",
                      "--steps", "0", "--gen-tokens", "0", "--dtypes", "float32", "--gen-layers", "1",
                      "--gen-heads", "2", "--gen-embd", "32", "--gen-block", "64", "--under-load"])
    u = res["under_load"]
    assert sorted(u) == ["decode|default threads", "decode|policy", "train|default threads", "train|policy"]
    cores = len(os.sched_getaffinity(0))
    for key, r in u.items():
        assert r["idle"] > 0 and r["loaded"] > 0 and r["loaded_over_idle"] == pytest.approx(r["loaded"] / r["idle"])
        if key.endswith("default threads"):
            assert r["idle_threads"] == r["loaded_threads"] == 1  # torch's count, as the test set it
        else:  # the policy: the free cores, and one fewer beside the busy process
            assert 1 <= r["idle_threads"] <= cores and 1 <= r["loaded_threads"] <= max(1, cores - 1)

"""Guards the CUDA path (skipped without a GPU; scripts/gpu_check.sh runs it on one): the fused
attention kernels equal the formula, the KV cache equals recomputation, TF32 follows train.tf32,
a short bfloat16 training run on the GPU learns and reports MFU against the chip's peak, a run
with dropout resumes as if never stopped, and a float16 run learns and sample.py decodes from it there."""
from __future__ import annotations

import math

import pytest
import torch

from model import GPT, ModelConfig, attention, causal_mask, generate
from tinygpt import runtime

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check.sh)")
CUDA = torch.device("cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_attention_equals_the_formula_on_the_gpu(dtype):
    torch.manual_seed(0)
    cfg = ModelConfig(block_size=64, n_layer=2, n_head=4, n_embd=64, vocab_size=50)
    model = GPT(cfg).to(CUDA).eval()
    idx = torch.randint(0, 50, (3, 64), device=CUDA)
    with torch.no_grad(), runtime.autocast(str(dtype).split(".")[1], CUDA):
        fast = model(idx)  # SDPA: flash or memory-efficient kernels
        slow, _ = model.forward_with_attention(idx)  # the formula, step by step
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    assert (fast.float() - slow.float()).abs().max().item() < tol * max(1.0, slow.abs().max().item())
    q, k, v = torch.randn(3, 2, 4, 16, 8, device=CUDA)  # (three, B, nh, T, hs): swapped ones would differ
    y, _ = attention(q, k, v, causal_mask(16, 16, CUDA))
    assert torch.allclose(y, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5)


def test_kv_cache_equals_recomputation_on_the_gpu():
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=32, n_layer=2, n_head=2, n_embd=32, vocab_size=40)).to(CUDA).eval()
    idx = torch.randint(0, 40, (2, 5), device=CUDA)
    cached = [t.tolist() for t in generate(model, idx, 60, temperature=0, use_cache=True)]
    uncached = [t.tolist() for t in generate(model, idx, 60, temperature=0, use_cache=False)]
    assert cached == uncached


@pytest.mark.parametrize("tf32", [True, False])
def test_tf32_follows_the_config(tf32):
    runtime.configure_cuda(tf32)
    assert runtime.tf32_enabled() is tf32
    peak, source = runtime.peak_flops("float32", CUDA)
    assert peak > 0 and (("TF32" in source) == tf32 or source.startswith("measured"))


def test_a_short_bfloat16_run_learns_on_the_gpu(tmp_path):
    import train
    from conftest import ROOT
    result = train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", "data.stories_chars=50000",
                         f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={tmp_path / 'run'}",
                         "train.device=cuda", "train.dtype=bfloat16", "train.max_iters=60", "train.eval_interval=30",
                         "train.eval_iters=4", "model.block_size=64", "train.plot=never"])
    from tinygpt.runs import read_metrics
    rows = read_metrics(tmp_path / "run")
    vals = [r["val_loss"] for r in rows if r["val_loss"] is not None]
    assert result["step"] == 60 and vals[-1] < vals[0] - 1.0
    assert all(0 < r["mfu"] < 1 for r in rows if r["mfu"] is not None)  # against the GPU's nominal peak


def test_a_resumed_run_with_dropout_continues_as_if_never_stopped_on_the_gpu(tmp_path):
    """Stopped at step 10 and resumed == 20 steps straight, with dropout: the GPU's RNG state is
    saved and restored (a different dropout mask would move the losses in the third decimal; the
    tolerance allows for the GPU's non-deterministic sums)."""
    import train
    from conftest import ROOT
    from tinygpt.runs import read_metrics
    base = [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", "data.stories_chars=50000",
            f"data.prepared_dir={tmp_path / 'prepared'}", "train.device=cuda", "train.dtype=float32", "train.tf32=false",
            "model.dropout=0.2", "model.block_size=64", "train.max_iters=20", "train.eval_interval=10",
            "train.eval_iters=4", "train.log_interval=1", "train.plot=never"]
    train.main(base + [f"train.out_dir={tmp_path / 'straight'}"])
    train.main(base + [f"train.out_dir={tmp_path / 'split'}", "--stop-at", "10"])
    train.main(base + [f"train.out_dir={tmp_path / 'split'}", "--resume"])
    losses = [{r["step"]: r["train_loss"] for r in read_metrics(tmp_path / run) if r["train_loss"] is not None}
              for run in ("straight", "split")]
    after = [step for step in losses[0] if step > 10]
    assert len(after) == 10 and all(abs(losses[0][s] - losses[1][s]) < 2e-4 for s in after), losses


def test_a_float16_run_and_sample_py_on_the_gpu(tmp_path):
    """What no other GPU check ran: float16 training (its GradScaler) on the GPU, and sample.py itself there (its
    generator on the GPU; greedy text the same with and without the KV cache; a seed repeats; bfloat16 weights)."""
    import io

    import sample
    import train
    from conftest import ROOT
    from tinygpt.runs import read_metrics
    run = tmp_path / "run"
    train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", "data.stories_chars=50000",
                f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={run}", f"train.device={CUDA}",
                "train.dtype=float16", "train.max_iters=60", "train.eval_interval=30", "train.eval_iters=4",
                "model.block_size=64", "train.plot=never"])
    vals = [r["val_loss"] for r in read_metrics(run) if r["val_loss"] is not None]
    # finite (no overflow the scaler missed: v == v let an inf through), learning
    assert all(math.isfinite(v) for v in vals) and vals[-1] < vals[0] - 0.5, vals

    def text(*flags) -> str:
        return sample.main([str(run), "--prompt", "Mia had a", "--max-new-tokens", "40", "--device", str(CUDA),
                            *map(str, flags)], out=io.StringIO())[0]
    greedy = text("--temperature", 0)
    assert len(greedy) > 0 and greedy == text("--temperature", 0, "--no-kv-cache")
    assert text("--seed", 3) == text("--seed", 3) and text("--seed", 3, "--dtype", "bfloat16")

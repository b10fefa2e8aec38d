"""Guards tinygpt/runtime.py: dtype and device choice, peak FLOP/s for MFU."""
from __future__ import annotations

import pytest
import torch

from tinygpt import runtime
from tinygpt.errors import UserError


def test_dtype_auto_picks_bfloat16_only_where_the_hardware_has_it(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    assert runtime.resolve_dtype("auto", cpu) == "bfloat16"
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    assert runtime.resolve_dtype("auto", cpu) == "float32"
    assert runtime.resolve_dtype("auto", torch.device("mps")) == "float32"
    for name in ("float32", "bfloat16", "float16"):  # an explicit choice is never second-guessed
        assert runtime.resolve_dtype(name, cpu) == name


def test_cpu_bf16_detection_reads_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    for flags, expected in (("fpu avx512f avx512_bf16 sse", True), ("fpu amx_bf16 amx_tile", True),
                            ("fpu avx512f avx512_bf16x sse", False), ("fpu avx2", False)):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert runtime.cpu_has_native_bf16(cpuinfo) is expected
    assert runtime.cpu_has_native_bf16(tmp_path / "missing") is False


def test_gpu_names_match_whole_words_most_specific_first():
    assert runtime.gpu_peak("NVIDIA L4", "bfloat16", tf32=True)[1] == "nominal L4 bfloat16"
    assert runtime.gpu_peak("NVIDIA L40", "bfloat16", tf32=True)[1] == "nominal L40 bfloat16"
    assert runtime.gpu_peak("NVIDIA L40S", "bfloat16", tf32=True)[1] == "nominal L40S bfloat16"
    assert runtime.gpu_peak("NVIDIA H100 PCIe", "bfloat16", tf32=True)[0] == 756e12
    assert runtime.gpu_peak("NVIDIA H100 80GB HBM3", "bfloat16", tf32=True)[0] == 989e12
    assert runtime.gpu_peak("NVIDIA A100-SXM4-80GB", "float32", tf32=True)[0] == 156e12
    assert runtime.gpu_peak("NVIDIA A100-SXM4-80GB", "float32", tf32=False)[0] == 19.5e12
    assert runtime.gpu_peak("NVIDIA GeForce GTX 1080", "bfloat16", tf32=True) is None
    assert runtime.gpu_peak("NVIDIA A1000", "bfloat16", tf32=True) is None  # not an A100


def test_measured_peak_stays_within_its_budget():
    import time
    runtime.measured_matmul_peak.cache_clear()
    t0 = time.perf_counter()
    flops, n = runtime.measured_matmul_peak(torch.bfloat16, torch.device("cpu"), 0.3)
    assert flops > 0 and 256 <= n <= 2048
    assert time.perf_counter() - t0 < 5  # emulated bfloat16 stops at a small matmul, not at 2048^2


def test_unknown_devices_are_user_errors():
    with pytest.raises(UserError, match="must be auto"):
        runtime.resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA is not available"):
            runtime.resolve_device("cuda:0")


FAULTS = """
import resource, sys, torch
from tinygpt import runtime
if sys.argv[1] == "keep":
    assert runtime.keep_freed_memory()
def step():  # a training step's large temporaries, allocated and freed
    for n in (3 << 20, 5 << 20, 2 << 20):
        a = torch.ones(n); b = a * 2; del a, b
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_freed_memory_is_reused_without_page_faults():
    """keep_freed_memory: the same step's temporaries stop faulting their pages in every time."""
    import subprocess
    import sys
    from pathlib import Path
    if not runtime.keep_freed_memory():
        pytest.skip("not glibc's malloc")
    root = Path(__file__).resolve().parents[1]
    faults = {mode: int(subprocess.run([sys.executable, "-c", FAULTS, mode], cwd=root, capture_output=True, text=True,
                                       check=True).stdout) for mode in ("default", "keep")}
    assert faults["default"] > 10_000 and faults["keep"] < faults["default"] / 20, faults

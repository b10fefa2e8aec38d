"""Peak FLOP/s and model FLOPs utilisation (MFU), shared by train.py and bench.py.

MFU = FLOPs the model needs per second at the measured speed / FLOPs the hardware can do per second.
On a GPU the denominator is the chip's nominal dense peak; on a CPU, which has no single published
figure, it is measured: the speed of a large matmul in the same dtype, in the same process.
"""
from __future__ import annotations

import functools
import statistics
import time

import torch

# nominal dense bf16/fp16 tensor-core peaks in FLOP/s (float32 counted at half: TF32 tensor cores)
GPU_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12,
                 "A10": 125e12, "4090": 165e12, "3090": 71e12}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@functools.lru_cache(maxsize=None)
def measured_matmul_peak(dtype: torch.dtype, device: torch.device, n: int = 2048, reps: int = 3) -> float:
    """FLOP/s of an n x n matmul on this device (median of reps; measured once per process).
    Uses its own generator, so it never shifts the global random stream a resumed run relies on."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device, dtype)
    b = torch.randn(n, n, generator=gen).to(device, dtype)
    times = []
    for i in range(reps + 1):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        if i >= 1:  # the first warms up
            times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times)


def peak_flops(dtype: str, device: torch.device, n: int = 2048, reps: int = 3) -> tuple[float, str]:
    """(FLOP/s, where the figure comes from) for MFU: nominal on a known GPU, else measured."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, peak in GPU_PEAK_BF16.items():
            if key in name:
                return (peak / 2 if dtype == "float32" else peak), f"nominal {key}"
    return measured_matmul_peak(getattr(torch, dtype), device, n, reps), f"measured {n}^2 matmul"

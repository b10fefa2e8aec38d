"""Guards tinygpt/runtime.py: dtype and device choice, peak FLOP/s for MFU."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from conftest import fake_cores
from tinygpt import runtime
from tinygpt.errors import UserError


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on `device` (runtime.memory_left's figure), None where unknown."""
    left = runtime.memory_left(device)
    return None if left is None else left[0]


def test_dtype_auto_picks_bfloat16_only_where_the_hardware_has_it(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(runtime, "cpu_computes", lambda dtype: dtype == "bfloat16")
    assert runtime.resolve_dtype("auto", cpu) == "bfloat16"
    monkeypatch.setattr(runtime, "cpu_computes", lambda dtype: None)  # flags unreadable
    assert runtime.resolve_dtype("auto", cpu) == "float32"
    assert runtime.resolve_dtype("auto", torch.device("mps")) == "float32"
    for name in ("float32", "bfloat16", "float16"):  # an explicit choice is never second-guessed
        assert runtime.resolve_dtype(name, cpu) == name


@pytest.mark.parametrize("capability, dtype", [((9, 0), "bfloat16"), ((8, 0), "bfloat16"), ((7, 5), "float16"),
                                               ((7, 0), "float16"), ((6, 1), "float32")])
def test_dtype_auto_on_a_gpu_follows_its_tensor_cores(monkeypatch, capability, dtype):
    """Ampere on: bfloat16; Volta/Turing: float16 (their bfloat16 is emulated, and
    torch.cuda.is_bf16_supported() says yes to emulation); older: float32. Faked: no GPU needed."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert runtime.resolve_dtype("auto", torch.device("cuda")) == dtype


def test_bfloat16_on_a_gpu_without_it_is_refused(monkeypatch):
    """train.dtype=bfloat16 on a GPU that lacks it was taken without a word, left to torch's autocast."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(UserError, match="train.dtype=bfloat16 is not supported by this GPU; use float16 or float32"):
        runtime.resolve_dtype("bfloat16", torch.device("cuda"))
    assert runtime.resolve_dtype("float16", torch.device("cuda")) == "float16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert runtime.resolve_dtype("bfloat16", torch.device("cuda")) == "bfloat16"


def test_cpu_bf16_detection_reads_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    for flags, expected in (("fpu avx512f avx512_bf16 sse", True), ("fpu amx_bf16 amx_tile", True),
                            ("fpu avx512f avx512_bf16x sse", False), ("fpu avx2", False)):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert runtime.cpu_computes("bfloat16", cpuinfo) is expected
    assert runtime.cpu_computes("bfloat16", tmp_path / "missing") is None  # unknown


def test_cpu_kind_tells_two_cpus_of_one_model_name_apart(tmp_path):
    """bench.py's JSON said 'AMD EPYC' for a Zen 3, a Zen 4 and a Zen 5 alike: it records family, model and
    the low-precision flags, of the first core's block."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"
                       "flags\t\t: fpu avx512f avx512_bf16 amx_tile\n\nprocessor\t: 1\ncpu family\t: 26\n")
    assert runtime.cpu_kind(cpuinfo) == {"family": "25", "model": "17", "low_precision": "avx512_bf16"}
    assert runtime.cpu_kind(tmp_path / "missing") == {}


def test_training_in_an_emulated_dtype_is_warned_about(tmp_path, monkeypatch):
    """bfloat16 (or float16) asked for on a CPU without it: one warning line (training ran 16-18x
    slower); never for float32, a CPU that has it, or where the flags cannot be read. bfloat16 on a GPU before
    Ampere (a T4, a V100) is emulated too: it trained without a word (torch.cuda.is_bf16_supported() counts
    emulation)."""
    cpu, cpuinfo = torch.device("cpu"), tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n")
    warning = runtime.emulated_dtype_warning("bfloat16", cpu, cpuinfo)
    assert warning.startswith("warning: this CPU computes bfloat16 only by emulation (no avx512_bf16 or amx_bf16)")
    assert "\n" not in warning and "train.dtype: auto" in warning
    assert "avx512_fp16 or amx_fp16" in runtime.emulated_dtype_warning("float16", cpu, cpuinfo)
    assert runtime.emulated_dtype_warning("float32", cpu, cpuinfo) is None
    for major, warned in ((7, True), (8, False), (9, False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 5))
        said = runtime.emulated_dtype_warning("bfloat16", torch.device("cuda"), cpuinfo)
        assert (said is not None and said.startswith("warning: this GPU computes bfloat16 only by emulation")) == warned
        assert runtime.emulated_dtype_warning("float16", torch.device("cuda"), cpuinfo) is None
    assert runtime.emulated_dtype_warning("bfloat16", cpu, tmp_path / "missing") is None
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16 amx_tile amx_fp16\n")
    assert runtime.emulated_dtype_warning("bfloat16", cpu, cpuinfo) is None
    assert runtime.emulated_dtype_warning("float16", cpu, cpuinfo) is None


def test_gpu_names_match_whole_words_most_specific_first():
    assert runtime.gpu_peak("NVIDIA L4", "bfloat16", tf32=True)[1] == "nominal L4 bfloat16"
    assert runtime.gpu_peak("NVIDIA L40", "bfloat16", tf32=True)[1] == "nominal L40 bfloat16"
    assert runtime.gpu_peak("NVIDIA L40S", "bfloat16", tf32=True)[1] == "nominal L40S bfloat16"
    assert runtime.gpu_peak("NVIDIA H100 PCIe", "bfloat16", tf32=True)[0] == 756e12
    assert runtime.gpu_peak("NVIDIA H200", "bfloat16", tf32=True)[0] == 989e12
    assert runtime.gpu_peak("NVIDIA H200 NVL", "bfloat16", tf32=True)[0] == 835.5e12  # the PCIe card
    # the H100 NVL took the SXM card's peaks (MFU 16% low), the 3090 Ti the 3090's (12% high)
    assert runtime.gpu_peak("NVIDIA H100 NVL", "bfloat16", tf32=True) == (835.5e12, "nominal H100 NVL bfloat16")
    ti = runtime.gpu_peak("NVIDIA GeForce RTX 3090 Ti", "float32", tf32=False)
    assert ti == (40e12, "nominal RTX 3090 Ti float32")
    assert runtime.gpu_peak("NVIDIA GeForce RTX 3090", "float32", tf32=False)[0] == 35.6e12
    # Volta/Turing: float16 tensor cores; no TF32, so float32 is float32 either way; bfloat16 emulated
    assert runtime.gpu_peak("Tesla T4", "float16", tf32=True) == (65e12, "nominal T4 float16")
    assert runtime.gpu_peak("Tesla T4", "float32", tf32=True)[0] == runtime.gpu_peak("Tesla T4", "float32", tf32=False)[0] == 8.1e12
    assert runtime.gpu_peak("Tesla T4", "bfloat16", tf32=True) == (8.1e12, "nominal T4 float32 (its bfloat16 is emulated)")
    assert runtime.gpu_peak("Tesla V100-SXM2-16GB", "float16", tf32=True)[0] == 125e12
    assert runtime.gpu_peak("Tesla V100-PCIE-32GB", "float16", tf32=True)[0] == 112e12
    assert runtime.gpu_peak("Tesla V100S-PCIE-32GB", "float16", tf32=True)[0] == 130e12
    assert runtime.gpu_peak("NVIDIA H100 80GB HBM3", "bfloat16", tf32=True)[0] == 989e12
    assert runtime.gpu_peak("NVIDIA A100-SXM4-80GB", "float32", tf32=True)[0] == 156e12
    assert runtime.gpu_peak("NVIDIA A100-SXM4-80GB", "float32", tf32=False)[0] == 19.5e12
    assert runtime.gpu_peak("NVIDIA GeForce GTX 1080", "bfloat16", tf32=True) is None
    assert runtime.gpu_peak("NVIDIA A1000", "bfloat16", tf32=True) is None  # not an A100
    # a MIG slice (16 of an H100's 132 SMs) took the whole card's peak: MFU 8x too low
    assert runtime.gpu_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bfloat16", tf32=True) is None
    assert runtime.gpu_peak("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "float32", tf32=True) is None
    # T4 and V100 have no TF32: their float32 was labelled "TF32"; laptop and cut-down cards took the desktop
    # card's peak
    assert runtime.gpu_peak("Tesla T4", "float32", tf32=True) == (8.1e12, "nominal T4 float32 (no TF32 on it)")
    for name in ("NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 4090 D", "NVIDIA RTX A4000 Max-Q",
                 "NVIDIA GeForce RTX 4090 Max-Q"):
        assert runtime.gpu_peak(name, "bfloat16", tf32=True) is None, name
    # a name holding a known one inside a word (GH200: a Grace Hopper superchip, not an H200 card): measured
    assert runtime.gpu_peak("NVIDIA GH200 480GB", "bfloat16", tf32=True) is None
    # TF32 doubles an Ada card's float32 (the L4's 30.3 TFLOP/s), as the A100's and H100's are checked above
    assert runtime.gpu_peak("NVIDIA L4", "float32", tf32=True)[0] == 60e12
    assert runtime.gpu_peak("NVIDIA L4", "float32", tf32=False)[0] == 30.3e12


def test_a_resume_that_switches_tf32_looks_the_mfu_peak_up_again(monkeypatch):
    """train.tf32 switched at a resume kept the checkpoint's float32 peak: with TF32 on, an H100 run divided by
    66.9 TFLOP/s instead of 494.7 (its MFU 7.4x too high), and the other way round."""
    import train
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    cuda = torch.device("cuda")
    monkeypatch.setattr(train, "tf32_enabled", lambda: False)
    monkeypatch.setattr(runtime, "tf32_enabled", lambda: False)
    off = train.mfu_peak(None, "float32", cuda, 16)
    assert off["source"] == "nominal H100 float32"
    assert train.mfu_peak({"mfu_peak": off}, "float32", cuda, 16)["source"] == "nominal H100 float32"  # kept
    monkeypatch.setattr(train, "tf32_enabled", lambda: True)
    monkeypatch.setattr(runtime, "tf32_enabled", lambda: True)
    assert train.mfu_peak({"mfu_peak": off}, "float32", cuda, 16)["source"] == "nominal H100 TF32"


def test_tf32_follows_the_config_after_any_earlier_setting():
    """configure_cuda sets TF32 and tf32_enabled reads it back (MFU divides by the TF32 or the
    float32 peak by it), whatever set the flags before: torch 2.9+ has two APIs for them. The
    older getter, which torch.compile's inductor reads, must answer too: it raises a RuntimeError
    once only the newer API has set TF32, and compiling the float32 decoding step on an H200 failed so. The flags
    exist on every build, so this runs without a GPU; in a fresh process, as they are global."""
    import subprocess
    import sys
    script = ("import torch\nfrom tinygpt import runtime\n"
              "new = hasattr(torch.backends.cuda.matmul, 'fp32_precision')\n"
              "for before in ('none', 'high', 'highest', 'legacy', 'new'):\n"
              "    for tf32 in (True, False, True):\n"
              "        if before == 'legacy':\n"
              "            torch.backends.cuda.matmul.allow_tf32 = not tf32\n"
              "        elif before == 'new' and new:\n"
              "            torch.backends.cuda.matmul.fp32_precision = 'ieee' if tf32 else 'tf32'\n"
              "        elif before not in ('none', 'new'):\n"
              "            torch.set_float32_matmul_precision(before)\n"
              "        runtime.configure_cuda(tf32)\n"
              "        assert runtime.tf32_enabled() is tf32, (before, tf32)\n"
              "        assert torch.get_float32_matmul_precision() == ('high' if tf32 else 'highest'), (before, tf32)\n"
              "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-2000:]


def test_the_barrier_names_its_gpu_to_nccl(monkeypatch):
    """Under torchrun on GPUs, NCCL's barrier is given the process's GPU (else it guesses one from
    the rank and warns of a possible hang); gloo's (CPUs) takes no device."""
    calls = []
    monkeypatch.setattr(torch.distributed, "barrier", lambda **kw: calls.append(kw))
    runtime.Distributed(1, 2, torch.device("cuda", 1)).barrier()
    runtime.Distributed(1, 2, torch.device("cpu")).barrier()
    runtime.Distributed(0, 1, torch.device("cuda", 0)).barrier()  # one process: no collective at all
    assert calls == [{"device_ids": [1]}, {}]


def test_timing_waits_for_the_gpu_on_cuda_and_on_apples_mps(monkeypatch):
    """sync (which every timing of bench.py and the measured peak behind MFU go through) waits for
    a CUDA GPU and for Apple's MPS: without it a matmul timed on a Mac measured its launch alone,
    a peak thousands of times too high and an MFU near 0. Faked here: no GPU needed."""
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: waited.append(("mps", None)))
    for name in ("cpu", "cuda:1", "mps"):
        runtime.sync(torch.device(name))
    assert waited == [("cuda", torch.device("cuda", 1)), ("mps", None)]


def test_measured_peak_stays_within_its_budget():
    import time
    runtime.measured_matmul_peak.cache_clear()
    t0 = time.perf_counter()
    flops, n = runtime.measured_matmul_peak(torch.bfloat16, torch.device("cpu"), 0.3)
    assert flops > 0 and 256 <= n <= 2048
    assert time.perf_counter() - t0 < 5  # emulated bfloat16 stops at a small matmul, not at 2048^2


def test_unknown_devices_are_user_errors():
    with pytest.raises(UserError, match="train.device='tpu' must be auto"):
        runtime.resolve_device("tpu")
    for name in ("cuda:01", "cuda:\u0661", "cuda\n"):  # torch.device refuses them: its traceback, on a GPU
        with pytest.raises(UserError, match="must be auto, cpu, cuda, cuda:N or mps"):
            runtime.resolve_device(name)
    # (in plain digits, yet refused: it said only "N in plain digits")
    with pytest.raises(UserError, match=r"\(N a device's number, 0 to 999999, in plain digits, no leading 0: "
                                        r"cuda:1\)$"):
        runtime.resolve_device("cuda:99999999999999999999")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="--device='cuda:0': CUDA is not available"):
            runtime.resolve_device("cuda:0", "--device")
    if not torch.backends.mps.is_available():  # (anywhere but a Mac with Apple silicon)
        with pytest.raises(UserError, match=r"^train.device='mps': MPS is not available here; use auto or cpu$"):
            runtime.resolve_device("mps")


def test_a_gpu_number_beyond_the_machines_gpus_is_a_user_error(monkeypatch):
    """cuda:1 on a one-GPU machine (GPUs count from 0) was taken, and failed at the first tensor moved there."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match=r"train.device='cuda:1': this machine has 1 CUDA device\(s\)"):
        runtime.resolve_device("cuda:1")
    assert runtime.resolve_device("cuda:0") == torch.device("cuda", 0)


@pytest.mark.parametrize("first, second, after_s, stops_now", [
    (signal.SIGTERM, signal.SIGINT, 0.01, False),  # a process group's Ctrl-C, passed on by torchrun: one stop
    (signal.SIGTERM, signal.SIGTERM, 5.0, False),  # a scheduler's second SIGTERM: still save
    (signal.SIGINT, signal.SIGINT, 1.5, True),  # a second Ctrl-C past the grace: stop now, unsaved
], ids=["term-then-int-at-once", "term-then-term-later", "int-then-int-later"])
def test_only_a_second_ctrl_c_after_the_grace_stops_at_once(monkeypatch, first, second, after_s, stops_now):
    """A worker gets a signal twice within milliseconds (launcher and process group), and a second
    SIGTERM is no Ctrl-C: either stopping at once lost the save a stop is for."""
    clock = {"now": 100.0}
    monkeypatch.setattr(runtime.time, "monotonic", lambda: clock["now"])
    flag = runtime.StopFlag()
    try:
        flag._handle(first, None)
        clock["now"] += after_s
        if stops_now:
            with pytest.raises(KeyboardInterrupt):
                flag._handle(second, None)
        else:
            try:
                flag._handle(second, None)
            except KeyboardInterrupt:
                pytest.fail("stopped at once, unsaved")
        assert flag.signum == first  # the save reports the first
    finally:
        flag.restore()


FAULTS = """
import resource, sys, torch
from tinygpt import runtime
assert runtime.keep_freed_memory()
from model import GPT, ModelConfig, cross_entropy
torch.manual_seed(0)
model = GPT(ModelConfig(block_size=128, n_layer=2, n_head=4, n_embd=128, vocab_size=900))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(0, 900, (16, 128))
def step():  # ~100 MB of activations and gradients, allocated and freed
    cross_entropy(model(x), x).backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)
"""


@pytest.mark.slow
def test_freed_memory_is_reused_without_page_faults():
    """keep_freed_memory: after warm-up a training step reuses the pages it freed, so it faults in
    few new ones (without it glibc may hand ~100 MB a step back to the OS and fault it in again;
    whether it does varies, see docs/results.md)."""
    import subprocess
    import sys
    from pathlib import Path
    if not runtime.keep_freed_memory():
        pytest.skip("not glibc's malloc")
    root = Path(__file__).resolve().parents[1]
    faults = int(subprocess.run([sys.executable, "-c", FAULTS], cwd=root, capture_output=True, text=True,
                                check=True).stdout)
    assert faults < 2_000, f"{faults} page faults per step (~{faults * 4 // 1024} MB faulted in)"


def test_thread_policy_counts_the_cores_other_processes_leave_free(monkeypatch):
    """Per second of wall time: 2 cores, this process used `own` core-seconds, the machine `busy`."""
    clock = {"wall": 0.0, "own": 0.0, "busy": 0, "total": 0}
    monkeypatch.setattr(runtime, "_cpu_jiffies", lambda cpus: (clock["busy"], clock["total"]))
    monkeypatch.setattr(runtime, "_runnable_tasks", lambda: 1)  # only us, at the start
    monkeypatch.setattr(runtime.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(runtime.time, "process_time", lambda: clock["own"])
    monkeypatch.setattr(runtime.time, "sleep", lambda s: None)
    fake_cores(monkeypatch, {0, 1})  # 2 cores, no SMT, no CPU quota
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()

    def second(own: float, others: float) -> int:  # 100 ticks per core-second
        clock["wall"] += 1.0
        clock["own"] += own
        clock["busy"] += int(100 * (own + others))
        clock["total"] += 200
        return policy.update()
    try:
        policy = runtime.ThreadPolicy(interval_s=1.0)
        assert second(own=2.0, others=0.0) == 2  # alone: both cores
        assert second(own=1.0, others=1.0) == 1  # a busy neighbour: one thread
        assert second(own=1.0, others=0.5) == 1  # half a core busy is not free
        assert second(own=1.0, others=0.1) == 2  # a light load leaves the core free
        assert runtime.ThreadPolicy(fixed=1).update(force=True) == 1  # pinned: never re-checked
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's cap: one thread even on idle cores,
        policy = runtime.ThreadPolicy(interval_s=1.0)  # so a run repeats bit for bit
        assert second(own=1.0, others=0.0) == 1
        assert runtime.ThreadPolicy(max_threads=2).max_threads == 1  # a share never lifts the user's cap
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setattr(runtime, "cpu_quota", lambda dirs=None: 1.0)  # a container allowed 1 CPU:
        policy = runtime.ThreadPolicy(interval_s=1.0)  # one thread on idle cores (2 are throttled together)
        assert policy.threads == 1 and second(own=1.0, others=0.0) == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # a cap, not a count: it lifted the quota's 1 to 2 threads
        assert runtime.ThreadPolicy().max_threads == 1
        monkeypatch.setattr(runtime, "cpu_quota", lambda dirs=None: None)
        monkeypatch.setenv("OMP_NUM_THREADS", "999")
        assert runtime.ThreadPolicy().max_threads == 2  # (the 2 cores)
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert runtime.ThreadPolicy(max_threads=1).max_threads == 1  # a sweep job's share
    finally:
        torch.set_num_threads(threads)


def test_thread_policy_rechecks_once_an_interval_or_when_forced(monkeypatch):
    """update() re-checks the free cores once interval_s has passed, not before unless forced; a second check
    in the same window of ticks keeps the count (no division by 0); under a CPU quota of 2 on 4 CPUs, one CPU
    kept busy by another process still leaves this one its 2 cores."""
    clock = {"wall": 0.0, "busy": 0, "total": 0}
    monkeypatch.setattr(runtime, "_cpu_jiffies", lambda cpus: (clock["busy"], clock["total"]))
    monkeypatch.setattr(runtime, "_runnable_tasks", lambda: 1)
    monkeypatch.setattr(runtime.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(runtime.time, "process_time", lambda: 0.0)
    monkeypatch.setattr(runtime.time, "sleep", lambda s: None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    fake_cores(monkeypatch, {0, 1})
    threads = torch.get_num_threads()

    def later(wall_s: float, others: float, cpus: int = 2) -> None:  # others busy for wall_s seconds, we idle
        clock["wall"] += wall_s
        clock["busy"] += int(100 * others * wall_s)
        clock["total"] += int(100 * cpus * wall_s)
    try:
        policy = runtime.ThreadPolicy(interval_s=1.0)
        assert policy.threads == 2
        later(0.5, others=1.0)
        assert policy.update() == 2  # inside the interval: not re-checked
        assert policy.update(force=True) == 1  # forced: a busy neighbour
        later(1.0, others=0.0)
        assert policy.update() == 2  # the interval passed: idle again
        assert policy.update(force=True) == 2  # no tick since: the count kept
        fake_cores(monkeypatch, {0, 1, 2, 3})
        monkeypatch.setattr(runtime, "cpu_quota", lambda dirs=None: 2.0)
        policy = runtime.ThreadPolicy(interval_s=1.0)
        later(1.0, others=1.0, cpus=4)
        assert (policy.max_threads, policy.update()) == (2, 2)  # 3 CPUs free, 2 cores' time allowed
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("value", ["²", "١", "abc", "0", "-1"])
def test_an_omp_num_threads_that_is_no_count_is_ignored(monkeypatch, value):
    """OMP_NUM_THREADS=² ("²".isdigit() is True, int() refuses it) ended every command in a ValueError
    traceback; like abc, it is now no cap: the cores decide."""
    threads = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert runtime.ThreadPolicy().max_threads == max(1, min(runtime.usable_cores(), len(runtime.usable_cpus())))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("env, limit", [({"OMP_NUM_THREADS": " 1"}, 1), ({"OMP_NUM_THREADS": "1,1"}, 1),
                                        ({"OMP_NUM_THREADS": "4,2"}, 4),  # (the first level's count: torch's)
                                        ({"MKL_NUM_THREADS": "1"}, 1),
                                        ({"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "2"}, 2),
                                        ({"OMP_NUM_THREADS": "0", "MKL_NUM_THREADS": "2"}, 2),
                                        ({"OMP_NUM_THREADS": "+1"}, 1), ({"OMP_NUM_THREADS": "++1"}, None),
                                        ({"OMP_NUM_THREADS": "abc"}, None), ({}, None)])
def test_the_environments_thread_limit_is_read_as_torch_reads_it(monkeypatch, env, limit):
    """OMP_NUM_THREADS=' 1', '1,1' and MKL_NUM_THREADS=1 start torch on one thread; the policy took none of them
    for a limit and raised the count to the cores."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert runtime.env_threads() == limit
    threads = torch.get_num_threads()
    try:
        if limit == 1:
            assert runtime.ThreadPolicy().max_threads == 1
    finally:
        torch.set_num_threads(threads)


def test_a_pinned_thread_count_is_kept_beside_a_busy_neighbour(monkeypatch):
    """train.threads=2 is the user's: train.py's once-a-second re-check of the free cores set 1 instead."""
    clock = {"wall": 0.0, "busy": 0, "total": 0}
    monkeypatch.setattr(runtime, "_cpu_jiffies", lambda cpus: (clock["busy"], clock["total"]))
    monkeypatch.setattr(runtime.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(runtime.time, "process_time", lambda: 0.0)
    fake_cores(monkeypatch, {0, 1})  # 2 cores, no SMT, no CPU quota
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    try:
        policy = runtime.ThreadPolicy(fixed=2)
        for _ in range(3):  # each second another process keeps one core busy
            clock["wall"] += 1.0
            clock["busy"] += 100
            clock["total"] += 200
            assert policy.update() == 2 and policy.update(force=True) == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_cpu_ticks_waiting_for_the_disk_are_idle_not_busy(monkeypatch):
    """/proc/stat's iowait (a core idle while a read is pending) counted as busy: a machine reading its
    data slowly looked loaded by other processes, and the policy dropped threads for nobody."""
    stat = ["cpu  40 0 40 200 120 0 0 0 0 0", "cpu0 10 0 10 50 30 0 0 0 0 0", "cpu1 30 0 30 150 90 0 0 0 0 0",
            "procs_running 1"]  # user nice system idle iowait irq softirq steal guest guest_nice
    monkeypatch.setattr(runtime, "_proc_stat", lambda: [line.split() for line in stat])
    assert runtime._cpu_jiffies({0}) == (20, 100)
    assert runtime._cpu_jiffies({0, 1}) == (80, 400)
    assert runtime._cpu_jiffies({5}) is None  # no such CPU: nothing known


def test_cpu_ticks_taken_by_other_virtual_machines_are_busy(monkeypatch):
    """steal: the hypervisor ran another guest on this core. Left out, a busy host's cores looked free."""
    stat = ["cpu0 100 0 0 100 0 0 0 200 0 0", "cpu1 0 0 0 400 0 0 0 0 0 0", "procs_running 1"]
    monkeypatch.setattr(runtime, "_proc_stat", lambda: [line.split() for line in stat])
    monkeypatch.setattr(runtime, "niceness", lambda: 0)
    assert runtime._cpu_jiffies({0, 1}) == (300, 800)
    # guest time (running a VM) is inside user time already: its columns are not counted again
    stat[:] = ["cpu0 100 0 0 100 0 0 0 0 50 0", "procs_running 1"]
    assert runtime._cpu_jiffies({0}) == (100, 200)


def test_a_kernel_without_autogrouping_ranks_all_processes_by_nice(tmp_path, monkeypatch):
    """No sched_autogroup_enabled under /proc/sys/kernel: the kernel has no autogrouping (False); no
    /proc/sys/kernel at all (not Linux's /proc): unknown, taken as on (True)."""
    real = runtime.Path
    kernel = {"/proc/sys/kernel": tmp_path / "kernel", "/proc/sys/kernel/sched_autogroup_enabled": tmp_path / "none"}
    monkeypatch.setattr(runtime, "Path", lambda path: real(kernel.get(str(path), path)))
    (tmp_path / "kernel").mkdir()
    assert runtime.autogrouping() is False
    (tmp_path / "kernel").rmdir()
    assert runtime.autogrouping() is True
    (tmp_path / "none").write_text("0\n")
    assert runtime.autogrouping() is False


def test_cpu_ticks_of_niced_processes_are_free_to_a_process_of_normal_priority(monkeypatch):
    """A `nice -n 19` job on one of 2 cores: the policy left 1 thread (20,200 tokens/s), where 2 train 29,400 (the
    kernel gives the niced job little of its core). Started with nice itself, the process shares a core with its
    kind; under autogrouping a niced job of another session gets half its core: then their ticks are busy."""
    stat = ["cpu0 10 40 10 50 0 0 0 0 0 0", "cpu1 10 0 10 80 0 0 0 0 0 0", "procs_running 1"]
    monkeypatch.setattr(runtime, "_proc_stat", lambda: [line.split() for line in stat])
    monkeypatch.setattr(runtime, "niceness", lambda: 0)
    monkeypatch.setattr(runtime, "autogrouping", lambda: False)
    assert runtime._cpu_jiffies({0, 1}) == (40, 210)
    monkeypatch.setattr(runtime, "autogrouping", lambda: True)
    assert runtime._cpu_jiffies({0, 1}) == (80, 210)
    monkeypatch.setattr(runtime, "autogrouping", lambda: False)
    monkeypatch.setattr(runtime, "niceness", lambda: 10)
    assert runtime._cpu_jiffies({0, 1}) == (80, 210)


def test_thread_policy_first_look_counts_the_threads_ready_to_run(monkeypatch):
    """Before any window of ticks: the median of 5 instant counts of runnable threads, minus us."""
    fake_cores(monkeypatch, {0, 1})  # 2 cores, no SMT, no CPU quota
    monkeypatch.setattr(runtime.time, "sleep", lambda s: None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    try:
        for seen, expected in [([1, 1, 1, 1, 1], 2),  # alone
                               ([1, 2, 1, 1, 1], 2),  # a passing task is not a busy core
                               ([2, 2, 1, 2, 2], 1),  # a busy neighbour
                               ([4, 3, 4, 4, 3], 1)]:  # more busy tasks than cores: still one thread
            looks = iter(seen)
            monkeypatch.setattr(runtime, "_runnable_tasks", lambda: next(looks))
            assert runtime.ThreadPolicy().threads == expected, seen
        monkeypatch.setattr(runtime, "_runnable_tasks", lambda: None)  # no /proc: torch's default
        torch.set_num_threads(2)
        assert runtime.ThreadPolicy().threads == 2
    finally:
        torch.set_num_threads(threads)


def test_cgroup_limits_are_read_from_v1_and_v2_files(tmp_path, monkeypatch):
    def tree(files: dict[str, str]) -> Path:
        root = tmp_path / f"root{len(list(tmp_path.iterdir()))}"
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return root
    # cgroup v2: the lowest quota along the path counts (here the parent's 1.5 CPUs)
    root = tree({"cgroup.controllers": "cpu memory", "a/b/cpu.max": "max 100000\n", "a/cpu.max": "150000 100000\n",
                 "proc": "0::/a/b\n"})
    dirs = runtime.cgroup_dirs("cpu", root, root / "proc")
    assert dirs == [root / "a/b", root / "a", root] and runtime.cpu_quota(dirs) == 1.5
    (root / "a/b/cpu.max").write_text("100000 100000\n")  # 1 CPU inside a parent's 4: the inner one counts
    (root / "a/cpu.max").write_text("400000 100000\n")
    assert runtime.cpu_quota(dirs) == 1.0
    # cgroup v1 in a container: /proc names a path the container's mount does not have; its root
    # holds the container's limits. -1 = no quota.
    root = tree({"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
                 "memory/memory.limit_in_bytes": "9223372036854771712\n",
                 "proc": "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\nnot a cgroup line\n"})
    dirs = runtime.cgroup_dirs("cpu", root, root / "proc")
    assert dirs == [root / "cpu,cpuacct"] and runtime.cpu_quota(dirs) is None
    (root / "cpu,cpuacct/cpu.cfs_quota_us").write_text("50000\n")
    assert runtime.cpu_quota(dirs) == 0.5
    assert runtime.cgroup_dirs("memory", root, root / "proc") == [root / "memory"]
    assert runtime.cgroup_dirs("cpu", root, root / "absent") == []  # not Linux
    # v1 with the controllers in a folder of the one controller's name (cpu, where /proc says cpuacct,cpu)
    root2 = tree({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n", "proc": "4:cpuacct,cpu:/\n"})
    assert runtime.cgroup_dirs("cpu", root2, root2 / "proc") == [root2 / "cpu"]
    assert runtime.cpu_quota(runtime.cgroup_dirs("cpu", root2, root2 / "proc")) == 0.5
    # hybrid: v2's hierarchy under root/unified, beside v1's folders
    root2 = tree({"unified/job/cpu.max": "50000 100000\n", "proc": "0::/job\n"})
    dirs2 = runtime.cgroup_dirs("cpu", root2, root2 / "proc")
    assert dirs2 == [root2 / "unified/job", root2 / "unified"] and runtime.cpu_quota(dirs2) == 0.5
    (root / "cpu,cpuacct/cpu.cfs_period_us").write_text("garbage")
    assert runtime.cpu_quota(dirs) is None  # unreadable: no limit assumed
    # usable cores: the CPUs, capped by the quota (a core counts from ~75% of it), at least 1
    fake_cores(monkeypatch, {0, 1, 2, 3})
    for quota, cores in [(None, 4), (8.0, 4), (2.0, 2), (1.8, 2), (1.75, 2), (1.7, 1), (1.5, 1), (1.0, 1), (0.5, 1)]:
        monkeypatch.setattr(runtime, "cpu_quota", lambda dirs=None: quota)
        assert runtime.usable_cores() == cores, quota


def test_cores_are_physical_cores_as_torch_counts_them(tmp_path):
    """With SMT two CPUs share a core: the policy would otherwise run twice torch's own default."""
    for cpu, siblings in enumerate(["0,2", "1,3", "0,2", "1,3"]):  # 2 cores, 2 threads each
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    assert runtime.physical_cores({0, 1, 2, 3}, tmp_path) == 2
    assert runtime.physical_cores({0, 2}, tmp_path) == 1  # pinned to one core's two CPUs
    assert runtime.physical_cores({0, 1, 2, 3, 4}, tmp_path) == 5  # no topology for cpu4: count CPUs
    # and on this machine, as torch counts them in a fresh process (its default: one thread per
    # physical core), unless an affinity mask or a CPU quota leaves fewer
    import json
    import os
    import subprocess
    import sys
    from conftest import ROOT
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    code = ("import json, os, torch\nfrom tinygpt import runtime\n"
            "print(json.dumps([torch.get_num_threads(), runtime.usable_cores(), runtime.cpu_quota(), "
            "len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count(), os.cpu_count()]))")
    torch_default, ours, quota, affinity, cpus = json.loads(subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout)
    if quota is None and affinity == cpus:
        assert ours == torch_default
    else:
        assert 1 <= ours <= torch_default


def cgroup_folders(tmp_path) -> tuple[torch.device, int, Path, Path]:
    """(the CPU, the memory it has now, two empty folders to fake a cgroup v1's and a v2's files in); skips
    without /proc/meminfo."""
    cpu = torch.device("cpu")
    machine = available_memory(cpu)
    if machine is None:
        pytest.skip("no /proc/meminfo")
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir(), v2.mkdir()
    return cpu, machine, v1, v2


def test_available_memory_is_capped_by_the_cgroup_limit(tmp_path, monkeypatch):
    cpu, machine, v1, v2 = cgroup_folders(tmp_path)
    (v1 / "memory.limit_in_bytes").write_text(f"{2 ** 30}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{2 ** 28}\n")
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text("123\n")
    monkeypatch.setattr(runtime, "cgroup_dirs", lambda controller: [v2, v1])
    assert available_memory(cpu) == min(machine, 2 ** 30 - 2 ** 28)  # v2's "max": no cap
    (v2 / "memory.max").write_text(f"{2 ** 29}\n")
    assert available_memory(cpu) == min(machine, 2 ** 29 - 123)  # the tighter of the two


def test_a_cgroups_page_cache_is_not_counted_as_used_memory(tmp_path, monkeypatch):
    """memory.current (v1: memory.usage_in_bytes) counts the file cache the kernel drops when asked: a container at
    2 GiB whose cache had filled to 1.9 GiB (checkpoints written, data prepared) refused every training as having
    0.0 GB. Its inactive files are left out, as docker's and Kubernetes' working set does."""
    cpu, machine, v1, v2 = cgroup_folders(tmp_path)
    (v2 / "memory.max").write_text(f"{2 ** 31}\n")
    (v2 / "memory.current").write_text(f"{2 ** 31 - 50 * 2 ** 20}\n")
    (v2 / "memory.stat").write_text(f"anon 104857600\nfile 2040109465\nactive_file 100\ninactive_file {2 ** 30}\n")
    monkeypatch.setattr(runtime, "cgroup_dirs", lambda controller: [v2])
    assert available_memory(cpu) == min(machine, 2 ** 30 + 50 * 2 ** 20)
    (v1 / "memory.limit_in_bytes").write_text(f"{2 ** 31}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{2 ** 31}\n")
    (v1 / "memory.stat").write_text(f"cache 2\ninactive_file 7\ntotal_inactive_file {2 ** 29}\n")
    monkeypatch.setattr(runtime, "cgroup_dirs", lambda controller: [v1])
    assert available_memory(cpu) == min(machine, 2 ** 29)  # (the hierarchy's total)
    (v1 / "memory.stat").write_text("not a stat file")
    assert available_memory(cpu) == 0  # (unread: all of the usage counts, as before)


def test_a_real_cgroup_limit_reaches_the_thread_count_and_the_memory_check():
    """scripts/in_cgroup.sh runs a process as `docker run --cpus=1 --memory=1g` would (root and
    Linux cgroups needed: it skips elsewhere)."""
    import subprocess
    import sys
    from conftest import ROOT
    probe = ("import torch\nfrom tinygpt import runtime\nprint(runtime.usable_cores(), runtime.ThreadPolicy().threads, "
             "runtime.memory_left(torch.device('cpu'))[0])")
    r = subprocess.run(["bash", "scripts/in_cgroup.sh", "1", "1024", sys.executable, "-c", probe], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 77:
        pytest.skip(f"cannot make a cgroup here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    cores, threads, memory = map(int, r.stdout.split())
    assert cores == threads == 1 and memory <= 2 ** 30


def test_thread_policy_leaves_a_busy_core_to_its_process():
    import os
    import subprocess
    import sys
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores")
    threads = torch.get_num_threads()
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 20\nwhile time.monotonic() < end: pass"])
    try:
        import time
        time.sleep(0.3)  # its interpreter is up and spinning
        policy = runtime.ThreadPolicy(interval_s=0.5)
        assert policy.threads <= len(os.sched_getaffinity(0)) - 1  # the first look sees it
        time.sleep(1.0)
        assert policy.update(force=True) <= len(os.sched_getaffinity(0)) - 1
    finally:
        busy.kill()
        busy.wait()
        torch.set_num_threads(threads)


# ---- compiled decoding (sample.py --compile) ----


def has_cpp_compiler() -> bool:
    """torch.compile's CPU code is C++: is there a compiler for it (inductor's own search)?"""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        return bool(get_cpp_compiler())
    except Exception:  # noqa: BLE001 (none found, or the search itself moved in another torch)
        return False


@pytest.mark.slow
# (a string: evaluated as the test starts, not as the file is collected, where importing inductor took 2 s of every
# suite's start, the slow tests left out or not)
@pytest.mark.skipif("not has_cpp_compiler()", reason="no C++ compiler for torch.compile (--compile falls back)")
def test_compiled_decoding_gives_the_same_tokens_with_one_graph(tiny_model_config, monkeypatch):
    """The compiled one-token step decodes the same greedy tokens as the model, through window
    slides (each a fresh cache) and a full cache, without compiling a second graph: the cache
    length is symbolic and the cache's filled part keeps one layout at every length. Without
    max_autotune's search of matrix kernels here (12 s to compile cold instead of 34): `python
    bench.py --vs-hf --compile` runs it, and checks its tokens against transformers'."""
    monkeypatch.setattr(runtime, "COMPILE_OPTIONS", {})
    import io
    from dataclasses import replace

    from model import GPT, generate
    torch.manual_seed(0)
    model = GPT(replace(tiny_model_config, n_layer=1)).eval()  # block_size 16
    with torch.no_grad():
        model.tok_emb.weight.mul_(50)  # clear margins between logits: float rounding cannot flip a token
    idx = torch.randint(0, tiny_model_config.vocab_size, (1, 5))
    want = [int(t) for t in generate(model, idx, 40, temperature=0)]  # the window slides 3 times
    log = io.StringIO()
    step = runtime.compile_decoding(model, log=log)
    assert step is not None, log.getvalue()
    assert "compiled in" in log.getvalue() and "warning" not in log.getvalue()
    with torch.compiler.set_stance("fail_on_recompile"):
        got = [int(t) for t in generate(model, idx, 40, temperature=0, decode_step=step)]
        assert got == want
        with torch.no_grad():  # any (1, 1) tensor, after a 1-token prompt: the same graph
            caches = model.new_kv_caches(1)
            model(idx[:, :1], caches)
            logits = step(torch.tensor([[int(idx[0, 1])]]), caches)
            assert torch.allclose(logits, model(idx[:, :2])[:, -1:], atol=1e-4)
        threads = torch.get_num_threads()  # the thread policy moves (a busy machine): the model
        torch.set_num_threads(threads + 1)  # decodes while the count is not the compiled one
        try:
            assert [int(t) for t in generate(model, idx, 40, temperature=0, decode_step=step)] == want
        finally:
            torch.set_num_threads(threads)


def test_compiled_decoding_falls_back_to_the_model_with_one_warning(tiny_model_config, monkeypatch):
    """No C++ compiler (or any failure of the compiler): one warning line, and None, so that the
    caller decodes with the model itself."""
    import io
    from dataclasses import replace

    from model import GPT

    def no_compiler(*args, **kwargs):
        def fail(*a, **k):
            raise RuntimeError("no working C++ compiler found\n(the compiler's own long story)")
        return fail
    monkeypatch.setattr(torch, "compile", no_compiler)
    log = io.StringIO()
    assert runtime.compile_decoding(GPT(tiny_model_config).eval(), log=log) is None
    lines = log.getvalue().splitlines()
    assert lines[-1] == ("warning: --compile failed (RuntimeError: no working C++ compiler found (the compiler's "
                         "own long story)); decoding without it")  # one line, elided past 200 characters
    log = io.StringIO()  # block_size 1: every step refills the window, there is no step to compile
    assert runtime.compile_decoding(GPT(replace(tiny_model_config, block_size=1)), log=log) is None
    assert log.getvalue() == ""


@pytest.mark.parametrize("ending, code, said", [("sys.exit(3)", 3, ""), ("None", 0, ""),
                                                 ("sys.exit('why')", 1, "why"), ("1 / 0", 1, "ZeroDivisionError")])
@pytest.mark.slow
def test_a_torchrun_worker_exits_with_its_code_without_pythons_shutdown(ending, code, said):
    """Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) train.py ends without Python's
    shutdown, where gloo's threads can abort the process (exit_as_torchrun_worker's doc): the exit
    code, buffered output and a bug's traceback survive; atexit handlers (part of the shutdown) do not
    run. Without them, a plain run."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    script = ("import atexit, sys\nfrom tinygpt.runtime import exit_as_torchrun_worker\n"
              "atexit.register(lambda: print(' shutdown ran'))\n"
              f"def main():\n    print('buffered', end='')\n    {ending}\n"
              "exit_as_torchrun_worker(main)\n")
    root = Path(__file__).resolve().parents[1]
    for rank, shutdown in (("0", False), (None, True)) if code == 3 else (("0", False),):
        worker = {"RANK": rank, "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
        env = {k: v for k, v in os.environ.items() if k not in worker} | (worker if rank else {})
        done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == code, (rank, done.stderr)
        assert done.stdout.startswith("buffered") and ("shutdown ran" in done.stdout) is shutdown, (rank, done.stdout)
        assert said in done.stderr


def test_a_one_layer_model_is_one_layer_in_the_memory_refusal():
    """`training (1 layers, ...)`: counts of one in the singular (train.py, export.py and the checks)."""
    from tinygpt.config import Config
    from tinygpt.errors import UserError
    cfg = Config()
    cfg.model.n_layer, cfg.model.vocab_size, cfg.train.batch_size = 1, 100, 10**9
    with pytest.raises(UserError, match=r"^training \(1 layer, n_embd 128, block 128, batch 1000000000\) needs"):
        runtime.check_training_fits(cfg, "float32", torch.device("cpu"))


def test_the_measured_peak_counts_two_flops_a_multiply_add(monkeypatch):
    """An n x n matmul is 2 n^3 FLOPs (a multiply and an add each): counted as n^3, MFU read half."""
    from types import SimpleNamespace
    ticks = iter(range(1000))
    monkeypatch.setattr(runtime, "time", SimpleNamespace(perf_counter=lambda: next(ticks) * 0.25))  # 0.25 s a matmul
    runtime.measured_matmul_peak.cache_clear()
    try:
        flops, n = runtime.measured_matmul_peak(torch.float32, torch.device("cpu"), 0.3)
    finally:
        runtime.measured_matmul_peak.cache_clear()  # (no faked figure left for the other tests)
    assert n == 256  # one second spent: past the budget at once
    assert flops == 2 * 256 ** 3 / 0.25


def peak_timed(monkeypatch, durations: list[float]) -> tuple[float, int]:
    """measured_matmul_peak on the CPU, each matmul taking the next of `durations` (seconds, the warm-up first)
    by a faked clock; nothing left in its cache."""
    from types import SimpleNamespace
    clock = [0.0]
    for d in durations:
        clock += [clock[-1], clock[-1] + d]
    ticks = iter(clock[1:])
    monkeypatch.setattr(runtime, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    runtime.measured_matmul_peak.cache_clear()
    try:
        return runtime.measured_matmul_peak(torch.float32, torch.device("cpu"))
    finally:
        runtime.measured_matmul_peak.cache_clear()  # (no faked figure left for the other tests)


def test_the_measured_peak_is_the_fastest_repeat_not_a_stalled_one(monkeypatch):
    """Another process holding one of 2 cores stalls some matmuls of the measurement (16 ms where one takes 0.3):
    a median of 3 read 2 GFLOP/s where one core does 100, and the run's MFU read 150%. Contention only slows a
    repeat: the fastest is the machine's peak."""
    durations = [0.01] + [0.016, 0.0003, 0.016] * 10  # a warm-up, then two of every three repeats stalled
    flops, n = peak_timed(monkeypatch, durations)
    assert n == 256 and flops == pytest.approx(2 * 256 ** 3 / 0.0003)
    # the warm-up is not a repeat: faster than every repeat (a clock's coarse tick), it is not the peak either
    flops, n = peak_timed(monkeypatch, [0.0001] + [0.05] * 30)
    assert n == 256 and flops == pytest.approx(2 * 256 ** 3 / 0.05)


def test_a_peak_looked_up_again_is_measured_again(monkeypatch):
    """again=True (a measurement taken in a stall gave an MFU past 100%): the cached figure is not reused."""
    measured = []
    monkeypatch.setattr(runtime, "gpu_peak", lambda *args, **kwargs: None)
    runtime.measured_matmul_peak.cache_clear()
    try:
        for again in (False, False, True):
            runtime.peak_flops("float32", torch.device("cpu"), budget_s=0.01, again=again)
            info = runtime.measured_matmul_peak.cache_info()
            measured.append((info.hits, info.misses))
    finally:
        runtime.measured_matmul_peak.cache_clear()
    assert measured == [(0, 1), (1, 1), (0, 1)]  # measured, reused, then (the cache emptied) measured again


RUN_CHILD = """
import sys
from tinygpt.errors import stop_on_signals
from tinygpt.runtime import run_child
stop_on_signals()
CHILD = '''
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def save(signum, frame):
    (out / "saved").write_text(str(signum)); sys.exit(128 + signum)
signal.signal(signal.SIGTERM, save)
(out / "started").write_text("")
time.sleep(60)
'''
try:
    run_child([sys.executable, "-c", CHILD, sys.argv[1]])
except KeyboardInterrupt:
    sys.exit(143)
"""


def test_a_script_stopped_by_sigterm_lets_its_training_save(tmp_path):
    """scripts.reproduce ran train.py by subprocess.run, which SIGKILLs the child when the script
    is stopped: a SIGTERM to the script lost the training's steps since its last checkpoint and left
    its lock. run_child passes SIGTERM on and waits for the child to save."""
    import subprocess
    import sys
    import time
    root = Path(__file__).resolve().parents[1]
    parent = subprocess.Popen([sys.executable, "-c", RUN_CHILD, str(tmp_path)], cwd=root)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert parent.poll() is None and time.monotonic() < deadline, "the child never started"
            time.sleep(0.05)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) == 143
    finally:
        parent.kill()
    assert (tmp_path / "saved").read_text() == str(int(signal.SIGTERM))  # the child saved, not killed


# ---- int8 weights for decoding (sample.py --dtype int8) ----


@pytest.mark.parametrize("n_in, n_out, bias", [(32, 48, True), (64, 7, False)])
def test_int8_linear_is_its_rounded_weights_times_their_row_scales(n_in, n_out, bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        linear.weight[1] = 0  # an all-zero row stays zero
    q = runtime.Int8Linear(linear)
    assert q.weight.dtype == torch.int8 and q.weight.shape == (n_out, n_in) and q.scale.shape == (n_out,)
    assert 126 <= int(q.weight.abs().amax(dim=1)[0]) <= 127 and not q.weight[1].any()  # a row's largest |w|: ~127
    dequantized = q.weight.float() * q.scale.float()[:, None]  # (out, in)
    assert ((dequantized - linear.weight).abs() <= q.scale.float()[:, None] * 0.5 + 1e-7).all()  # round to nearest
    x = torch.randn(2, 3, n_in).bfloat16()  # (B, T, in)
    want = x.float() @ dequantized.T + (linear.bias.detach() if bias else 0)  # (B, T, out)
    got = q(x)
    assert got.shape == (2, 3, n_out) and got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), want, rtol=2e-2, atol=2e-2)


def test_int8_linear_refuses_a_width_the_kernel_cannot_read():
    with pytest.raises(ValueError, match="^in_features=30 is not a multiple of 16$"):
        runtime.Int8Linear(torch.nn.Linear(30, 7))


def test_int8_linear_copies_an_input_that_starts_off_alignment():
    """torch's kernel loads whole aligned rows: an input 16 bytes past an aligned start crashed the
    process; Int8Linear hands it a fresh copy. In a child process, so that a crash fails one test."""
    code = """
import torch
from tinygpt import runtime
torch.manual_seed(0)
q = runtime.Int8Linear(torch.nn.Linear(64, 40))
x = torch.randn(4 * 64 + 8).bfloat16()[8:].view(4, 64)  # (4, 64), contiguous, 16 bytes off alignment
assert x.is_contiguous() and x.data_ptr() % 32
want = q(x.clone())
assert torch.equal(q(x), want)
assert torch.equal(q(torch.randn(4, 80).bfloat16()[:, 8:72].copy_(x)), want)  # rows 160 bytes apart
print("ok")
"""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0 and done.stdout == "ok\n", (done.returncode, done.stderr[-2000:])


def test_int8_weights_decode_the_float32_tokens(tiny_model_config):
    """Every Linear becomes an Int8Linear (the tied LM head too, the embedding stays a bfloat16 lookup),
    and the greedy tokens are float32's where no two logits are near-tied."""
    import copy

    from model import GPT, generate
    torch.manual_seed(0)
    model = GPT(tiny_model_config).eval()
    with torch.no_grad():
        model.tok_emb.weight.mul_(50)  # clear margins between logits: rounding cannot flip a token
    idx = torch.randint(0, tiny_model_config.vocab_size, (1, 5))
    want = [int(t) for t in generate(model, idx, 40, temperature=0)]  # through window slides (block 16)
    assert runtime.int8_problem(tiny_model_config, torch.device("cpu")) is None
    low = runtime.int8_weights(copy.deepcopy(model))
    assert not any(isinstance(m, torch.nn.Linear) for m in low.modules())
    assert sum(isinstance(m, runtime.Int8Linear) for m in low.modules()) == 6 * tiny_model_config.n_layer + 1
    assert low.tok_emb.weight.dtype == torch.bfloat16 and not low.training
    # rounded from the float32 weights, not from their bfloat16 rounding (two roundings move some by a step)
    assert torch.equal(low.lm_head.weight, runtime.Int8Linear(model.lm_head).weight)
    assert low.lm_head.weight.dtype == torch.int8 and low.lm_head.scale.dtype == torch.bfloat16
    assert [int(t) for t in generate(low, idx, 40, temperature=0)] == want
    with torch.no_grad():
        assert torch.allclose(low(idx).float(), model(idx), atol=0.05 * model(idx).abs().max().item())


def test_int8_problem_names_the_device_or_the_width(tiny_model_config):
    from dataclasses import replace
    assert runtime.int8_problem(tiny_model_config, torch.device("cuda")) == \
        "int8 weights run on the CPU only (torch's CPU int8 kernel), not on cuda"  # (n_embd 32)
    assert runtime.int8_problem(replace(tiny_model_config, n_embd=24), torch.device("cpu")) == (
        "int8 weights need model.n_embd a multiple of 16 (torch's int8 kernel reads rows 16 values at a time); "
        "this model's is 24")


def test_torchruns_local_variables_that_are_no_numbers_are_refused_naming_them(tiny_stories_run, monkeypatch):
    """LOCAL_WORLD_SIZE=abc (or LOCAL_RANK under a launch) was int()'s ValueError traceback, in sample.py and
    train.py alike."""
    import io

    import sample
    from tinygpt import runtime
    from tinygpt.errors import UserError
    for value in ("abc", "-1", "1.5", "٣"):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
        with pytest.raises(UserError, match=rf"^the environment variable LOCAL_WORLD_SIZE='?{value}'? must be a whole "
                                            rf"number >= 0, as torchrun sets it; unset it"):
            sample.main([str(tiny_stories_run), "--max-new-tokens", "2"], out=io.StringIO())
    monkeypatch.setenv("LOCAL_RANK", " 3 ")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "")
    assert runtime.launcher_number("LOCAL_RANK", 0) == 3 and runtime.launcher_number("LOCAL_WORLD_SIZE", 1) == 1


def test_the_highest_port_is_a_port(monkeypatch):
    from tinygpt import runtime
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "65535"}.items():
        monkeypatch.setenv(name, value)
    runtime.check_launcher_env()  # (no error)
    monkeypatch.setenv("MASTER_PORT", "65536")
    with pytest.raises(UserError, match="MASTER_PORT='65536' is no port"):
        runtime.check_launcher_env()


@pytest.mark.parametrize("env, said", [
    ({"WORLD_SIZE": "0"}, "RANK=0 and WORLD_SIZE=0 name no process of a run"),
    ({"RANK": "3", "WORLD_SIZE": "2"}, "RANK=3 and WORLD_SIZE=2 name no process of a run"),  # (it waited for good)
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' must be a whole number >= 0"),
    ({"RANK": "-1"}, "RANK='-1' must be a whole number >= 0"),
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' must be a whole number >= 0"),  # (it trained as one process)
    ({"MASTER_PORT": "70000"}, "MASTER_PORT='70000' is no port (1 .. 65535)"),
    ({"MASTER_PORT": "http"}, "MASTER_PORT='http' must be a whole number >= 0"),
    ("busy", "cannot meet the others at MASTER_ADDR:MASTER_PORT=127.0.0.1:")])
def test_torchruns_variables_set_to_what_no_run_has_are_refused_in_one_line(monkeypatch, env, said):
    """torchrun's variables set by hand or left by another job: WORLD_SIZE=0 or 'two', MASTER_PORT=70000 or 'http'
    or a port another process listens on ended in torch.distributed's traceback (exit 1); RANK=3 of WORLD_SIZE=2
    waited for a rendezvous that could never be."""
    import socket

    from tinygpt import runtime
    from tinygpt.errors import UserError
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    base = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(listener.getsockname()[1])}
    for name, value in {**base, **(env if isinstance(env, dict) else {})}.items():
        monkeypatch.setenv(name, value)
    with listener, pytest.raises(UserError) as info:
        runtime.Distributed.from_env(torch.device("cpu"))
    assert said in str(info.value) and "unset" in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_compile_cache_folder_that_cannot_be_made_is_refused_naming_it(tiny_stories_run, tmp_path):
    """TORCHINDUCTOR_CACHE_DIR through a file (or read-only) stopped `sample.py --compile` with `error: Not a
    directory: ...`, and train.py with train.compile after preparing its data, naming neither the variable nor
    torch.compile (a compile failure is otherwise a warning). Refused first, naming both."""
    import os
    import subprocess
    import sys
    from conftest import ROOT
    (tmp_path / "file.txt").write_text("x")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "file.txt" / "cache")}
    r = subprocess.run([sys.executable, "sample.py", str(tiny_stories_run), "--compile", "--max-new-tokens", "2"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.startswith("error: --compile: torch.compile keeps its work in ") and r.stderr.count("\n") == 1
    assert "which cannot be made (Not a directory); the environment variable TORCHINDUCTOR_CACHE_DIR=" in r.stderr


def test_a_memory_refusal_names_the_bound_that_leaves_too_little(monkeypatch):
    """Under `ulimit -v 1500000` on a machine with 21 GB free, training was refused as 'this machine has 0.8 GB
    available'. The refusal names the bound that leaves the least: the machine, a container's limit, ulimit -v."""
    import re
    from tinygpt.errors import UserError
    GB = 2 ** 30
    cases = (({"machine": 21 * GB, "ulimit": GB}, "ulimit -v leaves this process 1.0 GB of address space"),
             ({"machine": 21 * GB, "cgroup": 2 * GB}, "its container's memory limit (a cgroup) leaves 2.0 GB"),
             ({"machine": GB, "cgroup": 2 * GB}, "this machine has 1.0 GB available"))
    for limits, said in cases:
        monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: limits)
        assert available_memory(torch.device("cpu")) == min(limits.values())
        with pytest.raises(UserError, match=rf"needs at least 5.0 GB of memory \(weights 5.0 GB\), but "
                                            rf"{re.escape(said)}; use less$"):
            runtime.check_memory({"weights": 5 * GB}, torch.device("cpu"), "training", "use less")
    # the limits are read once: the figure said is the bound's own (a container's usage moves between two reads)
    reads = iter([{"machine": 21 * GB, "cgroup": 2 * GB - 4096}])  # (a second read: StopIteration)
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: next(reads))
    with pytest.raises(UserError, match=r"but its container's memory limit \(a cgroup\) leaves 2.0 GB; use less$"):
        runtime.check_memory({"weights": 5 * GB}, torch.device("cpu"), "training", "use less")


def test_the_measured_peak_reaches_the_largest_size_where_the_budget_allows(monkeypatch):
    """A fast device measures every size up to 2048^2: the peak of the largest matmul, not of 1024^2."""
    flops, n = peak_timed(monkeypatch, [1e-6] * 200)  # every matmul far within the budget
    assert n == 2048 and flops == pytest.approx(2 * 2048 ** 3 / 1e-6)


def test_a_size_that_overruns_the_budget_is_not_repeated(monkeypatch):
    """One matmul past the whole budget (an emulated dtype, a stalled core) is not run PEAK_REPEATS more times."""
    sizes = []
    linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda a, b: sizes.append(a.size(0)) or linear(a, b))
    flops, n = peak_timed(monkeypatch, [10.0] * (1 + runtime.PEAK_REPEATS))  # 10 s a matmul
    assert sizes == [256] and n == 256


def test_the_cpus_name_is_its_model_name_not_its_model_number(monkeypatch):
    info = {"model name": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "model": "106", "cpu family": "6"}
    monkeypatch.setattr(runtime, "cpu_info", lambda cpuinfo="/proc/cpuinfo": info)
    assert runtime.device_name(torch.device("cpu")) == info["model name"]


def test_ulimit_v_leaves_its_limit_less_the_address_space_already_used(monkeypatch):
    import re
    import resource
    limit = 2 ** 50
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY))
    used = int(re.search(r"^VmSize:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024
    left = runtime.cpu_memory_limits()["ulimit"]
    assert limit - used - 2 ** 30 < left <= limit - used  # (VmSize may move a little between the two reads)


def test_training_memory_counts_each_part_at_its_bytes():
    """float32 weights, gradients and AdamW's two moments (3 x the weights), activations of 16 values of width C a
    token and layer at the dtype's bytes, logits at the dtype's bytes plus a float32 copy and gradient."""
    from model import GPT, ModelConfig
    m = ModelConfig(n_layer=2, n_embd=32, n_head=2, block_size=16, vocab_size=100)
    batch = 3
    tokens = batch * m.block_size
    f32, b16 = runtime.training_memory(m, batch, "float32"), runtime.training_memory(m, batch, "bfloat16")
    assert f32["gradients and AdamW state"] == 3 * f32["weights"] == 12 * GPT.count_params(m)
    assert f32["activations"] == 2 * b16["activations"] == tokens * m.n_layer * 16 * m.n_embd * 4
    assert f32["logits"] == tokens * m.vocab_size * (4 + 8) and b16["logits"] == tokens * m.vocab_size * (2 + 8)


def test_memory_just_enough_is_not_refused_and_the_message_leaves_out_tiny_parts(monkeypatch):
    GB = 2 ** 30
    parts = {"weights": 3 * GB, "activations": 2 * GB, "batch": 1}
    need = sum(parts.values())
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": need})
    runtime.check_memory(parts, torch.device("cpu"), "training", "use less")  # exactly enough: fits
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": need - 1})
    with pytest.raises(UserError) as e:
        runtime.check_memory(parts, torch.device("cpu"), "training", "use less")
    assert "weights 3.0 GB, activations 2.0 GB)" in str(e.value) and "batch" not in str(e.value)


@pytest.mark.skipif(not runtime.FP32_PRECISION_API, reason="torch before 2.9 has no fp32_precision")
def test_tf32_is_off_where_nothing_has_set_it():
    """A fresh process, before configure_cuda, reads fp32_precision 'none' (torch 2.9+): float32 matmuls in full
    precision, so the MFU peak is the float32 one, not TF32's."""
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        matmul.fp32_precision = "none"
        assert runtime.tf32_enabled() is False
    finally:
        matmul.fp32_precision = before


def test_a_step_is_refused_by_its_forward_and_backward_flops_and_an_evaluation_by_its_passes(monkeypatch):
    """One optimizer step is 3 forward passes' FLOPs a micro-batch (forward + backward); an evaluation runs
    eval_iters batches on each of 2 splits. Sized so that each is refused only counted in full."""
    from model import GPT
    from tinygpt.config import Config
    monkeypatch.setattr(runtime, "memory_left", lambda device: None)  # (the step time alone is checked)
    cfg = Config()
    cfg.model.vocab_size, cfg.train.batch_size = 100, 10 ** 6
    forward = 2 * GPT.count_params(cfg.model) * cfg.train.batch_size * cfg.model.block_size
    cfg.train.grad_accum = int(runtime.MAX_STEP_S * runtime.FAST_FLOPS / (2 * forward))  # 1.5 days of 3 x forward
    cfg.train.eval_iters = 1
    with pytest.raises(UserError, match="^one optimizer step"):
        runtime.check_training_fits(cfg, "float32", torch.device("cpu"))
    cfg.train.batch_size, cfg.train.grad_accum = 1, 1
    cfg.train.eval_iters = int(0.75 * runtime.MAX_STEP_S / runtime.MIN_PASS_S)  # 2 x that many passes: 1.5 days
    with pytest.raises(UserError, match="^one evaluation"):
        runtime.check_training_fits(cfg, "float32", torch.device("cpu"))


def test_the_first_look_counts_the_running_threads_not_the_blocked_ones(monkeypatch):
    """_runnable_tasks reads /proc/stat's procs_running (threads on or waiting for a CPU), not procs_blocked
    (threads waiting for the disk, using no core); without the line, nothing is known."""
    stat = ["cpu  10 0 10 80 0 0 0 0 0 0", "procs_blocked 7", "procs_running 3"]
    monkeypatch.setattr(runtime, "_proc_stat", lambda: [line.split() for line in stat])
    assert runtime._runnable_tasks() == 3
    stat[:] = ["cpu  10 0 10 80 0 0 0 0 0 0", "procs_blocked 7"]
    assert runtime._runnable_tasks() is None


def test_following_free_cores_rechecks_the_policy_before_each_item():
    """sample.py's and bench.py's decoding re-check the free cores before every token (a busy neighbour that
    starts mid-generation is followed); without a policy (a GPU) the items pass unchanged."""
    seen = []

    class Policy:
        def update(self):
            seen.append("update")
    for item in runtime.following_free_cores(iter("abc"), Policy()):
        seen.append(item)
    assert seen == ["update", "a", "update", "b", "update", "c"]
    assert list(runtime.following_free_cores(iter("ab"), None)) == ["a", "b"]


# ---- devices, dtypes, peaks, memory and time checks, torchrun (a second round) ----


def test_device_auto_takes_cuda_then_mps_then_cpu(monkeypatch):
    for cuda, mps, expected in ((True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        assert runtime.resolve_device("auto") == torch.device(expected)


def test_dtype_auto_off_cpu_and_cuda_is_float32_even_on_a_bfloat16_cpu(monkeypatch):
    """The CPU's AVX-512 BF16 says nothing of an Apple GPU: auto on mps stays float32."""
    monkeypatch.setattr(runtime, "cpu_computes", lambda dtype: True)
    assert runtime.resolve_dtype("auto", torch.device("cpu")) == "bfloat16"
    assert runtime.resolve_dtype("auto", torch.device("mps")) == "float32"


def test_a_mobile_gpu_takes_no_desktop_peak():
    """'Mobile' names a laptop chip as 'Laptop' and 'Max-Q' do: measured, not the desktop card's peak."""
    assert runtime.gpu_peak("NVIDIA GeForce RTX 4090", "bfloat16", tf32=True) is not None
    assert runtime.gpu_peak("NVIDIA GeForce RTX 4090 Mobile", "bfloat16", tf32=True) is None


@pytest.mark.parametrize("name", ["Tesla V100-SXM2-16GB", "Tesla V100-PCIE-32GB", "Tesla V100S-PCIE-32GB", "Tesla T4"])
def test_bfloat16_on_volta_and_turing_is_held_to_the_float32_peak(name):
    """Every Volta/Turing card emulates bfloat16: its peak is the card's float32 one, not its float16 tensor cores'."""
    fp32, _ = runtime.gpu_peak(name, "float32", tf32=False)
    peak, source = runtime.gpu_peak(name, "bfloat16", tf32=True)
    assert peak == fp32 < runtime.gpu_peak(name, "float16", tf32=True)[0]
    assert source.endswith("(its bfloat16 is emulated)")


def test_a_cpus_peak_is_measured_in_the_runs_dtype(monkeypatch):
    """MFU of a bfloat16 run on a CPU divides by a bfloat16 matmul's speed, not float32's."""
    asked = []

    def fake(dtype, device, budget_s=0.5):
        asked.append(dtype)
        return 1e9, 256
    fake.cache_clear = lambda: None
    monkeypatch.setattr(runtime, "measured_matmul_peak", fake)
    for dtype in ("bfloat16", "float16", "float32"):
        flops, source = runtime.peak_flops(dtype, torch.device("cpu"))
        assert source == f"measured 256^2 {dtype} matmul"
    assert asked == [torch.bfloat16, torch.float16, torch.float32]


def test_a_gpus_memory_left_is_its_free_memory_not_its_total(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * 2 ** 30, 80 * 2 ** 30))
    left, bound = runtime.memory_left(torch.device("cuda", 0))
    assert left == 3 * 2 ** 30 and bound.format("x") == "cuda:0 has x available"


def test_no_memory_figure_is_known_for_apples_gpu(monkeypatch):
    """The CPU's limits are not an MPS device's: nothing is refused there."""
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": 1})
    assert runtime.memory_left(torch.device("cpu")) is not None
    assert runtime.memory_left(torch.device("mps")) is None


def test_machine_memory_is_meminfos_kibibytes_in_bytes(monkeypatch):
    """/proc/meminfo counts kB that are KiB: MemAvailable 1000 kB is 1,024,000 bytes."""
    from types import SimpleNamespace
    real = runtime.Path
    meminfo = SimpleNamespace(read_text=lambda: "MemTotal:  4000 kB\nMemAvailable:   1000 kB\n")
    monkeypatch.setattr(runtime, "Path", lambda p, *a: meminfo if str(p) == "/proc/meminfo" else real(p, *a))
    monkeypatch.setattr(runtime, "cgroup_dirs", lambda controller: [])
    assert runtime.cpu_memory_limits()["machine"] == 1000 * 1024


def test_a_memory_refusal_names_the_three_largest_parts_of_at_least_a_hundredth(monkeypatch):
    GB = 2 ** 30
    parts = {"a": 40 * GB, "b": 30 * GB, "c": 20 * GB, "d": 10 * GB, "e": GB // 2}
    need = sum(parts.values())
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": need - 1})
    with pytest.raises(UserError) as e:
        runtime.check_memory(parts, torch.device("cpu"), "training", "use less")
    assert "(a 40.0 GB, b 30.0 GB, c 20.0 GB)" in str(e.value)
    small = {"w": 1000 * GB, "x": 5 * GB}  # x is 0.5% of the need: left out
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": 1})
    with pytest.raises(UserError) as e:
        runtime.check_memory(small, torch.device("cpu"), "training", "use less")
    assert "(w 1,000.0 GB), but" in str(e.value)


def test_a_refused_step_says_its_hours():
    flops = 3 * runtime.MAX_STEP_S * runtime.FAST_FLOPS  # three days at FAST_FLOPS
    with pytest.raises(UserError, match=r"^step takes at least 72 hours \(1 passes"):
        runtime.check_step_time(flops, 1, "step", "fix")


def test_an_evaluation_is_refused_by_its_flops_too(monkeypatch):
    """eval_iters batches on each of 2 splits: 2 forward passes' FLOPs a batch, checked as the step's are."""
    from model import GPT
    from tinygpt.config import Config
    monkeypatch.setattr(runtime, "memory_left", lambda device: None)
    cfg = Config()
    cfg.model.vocab_size, cfg.train.batch_size, cfg.train.grad_accum = 100, 10 ** 6, 1
    forward = 2 * GPT.count_params(cfg.model) * cfg.train.batch_size * cfg.model.block_size
    cfg.train.eval_iters = int(0.75 * runtime.MAX_STEP_S * runtime.FAST_FLOPS / forward)  # 1.5 days of 2 x forward
    assert 3 * forward < runtime.MAX_STEP_S * runtime.FAST_FLOPS  # (the step itself fits)
    with pytest.raises(UserError, match="^one evaluation"):
        runtime.check_training_fits(cfg, "float32", torch.device("cpu"))


def test_the_memory_check_counts_activations_at_the_runs_dtype(monkeypatch):
    from tinygpt.config import Config
    cfg = Config()
    cfg.model.vocab_size, cfg.train.batch_size = 100, 64
    bf16 = sum(runtime.training_memory(cfg.model, 64, "bfloat16").values())
    f32 = sum(runtime.training_memory(cfg.model, 64, "float32").values())
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": (bf16 + f32) // 2})
    runtime.check_training_fits(cfg, "bfloat16", torch.device("cpu"))  # fits in bfloat16
    with pytest.raises(UserError, match="^training"):
        runtime.check_training_fits(cfg, "float32", torch.device("cpu"))


def test_only_rank_0_is_the_master():
    assert runtime.Distributed(0, 2, torch.device("cpu")).master
    assert not runtime.Distributed(1, 2, torch.device("cpu")).master


def test_a_partial_torchrun_environment_is_one_process(monkeypatch):
    """RANK alone, left by another tool, is no launch: one process, nothing checked."""
    for name in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "abc")
    d = runtime.Distributed.from_env(torch.device("cpu"))
    assert (d.rank, d.world_size) == (0, 1)


@pytest.mark.parametrize("env, said", [({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 and WORLD_SIZE=2 name no process"),
                                       ({"MASTER_PORT": "0"}, "MASTER_PORT='0' is no port (1 .. 65535)")])
def test_the_first_values_past_torchruns_bounds_are_refused(monkeypatch, env, said):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "29500", **env}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UserError) as info:
        runtime.check_launcher_env()
    assert said in str(info.value)


def test_the_mean_over_processes_divides_the_sum_by_their_number(monkeypatch):
    world = 4
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda x: x.mul_(world))  # world equal processes: the sum
    x = torch.tensor([2.0, 6.0])
    assert torch.equal(runtime.Distributed(0, world, torch.device("cpu")).mean(x), x)
    assert torch.equal(x, torch.tensor([2.0, 6.0]))  # (its argument is left alone)

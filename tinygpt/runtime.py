"""The runtime: where and how the maths runs. Device, dtype and autocast, processes (DDP), signals,
CPU threads, the peak FLOP/s that MFU divides by, and whether a config fits the machine at all.

train.py, sample.py, probe.py and bench.py all set up through here, so a choice such as "bfloat16
where the hardware computes it natively" is made in one place.

MFU (model FLOPs utilisation) = FLOPs the model needs per second at the measured speed / FLOPs the
hardware can do per second. On a known GPU the denominator is the chip's nominal dense peak for the
dtype; on a CPU, which has no single published figure, it is measured: the speed of a matmul in the
same dtype, in the same process.
"""
from __future__ import annotations

import ctypes
import functools
import io
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import warnings
from contextlib import contextmanager, nullcontext, redirect_stderr
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

import torch

from model import GPT, ModelConfig
from tinygpt.config import DEVICE_RULE, DEVICES, Config
from tinygpt.errors import (TORCHRUN_ENV, UserError, count, handle_signals, reason, restore_signals, short,
                            torchrun_rank)

T = TypeVar("T")
LOW_PRECISION = ("bfloat16", "float16")

# ---- device and dtype ----


def resolve_device(name: str, setting: str = "train.device") -> torch.device:
    """'auto' -> cuda, then mps, then cpu; an unknown or unavailable device is a UserError naming
    `setting` (the config key, or sample.py's --device)."""
    named = f"{setting}={short(name)}"
    if not DEVICES.fullmatch(name):
        raise UserError(f"{named} {DEVICE_RULE}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{named}: CUDA is not available here; use auto or cpu")
    if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
        raise UserError(f"{named}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{named}: MPS is not available here; use auto or cpu")
    return torch.device(name)


NATIVE_FLAGS = {"bfloat16": ("avx512_bf16", "amx_bf16"), "float16": ("avx512_fp16", "amx_fp16")}  # x86 CPUs


def cpu_info(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, str] | None:
    """The first core's fields of /proc/cpuinfo ('model name', 'cpu family', 'flags', ...; Linux), None
    where it cannot be read."""
    try:
        first = Path(cpuinfo).read_text(errors="replace").split("\n\n")[0]
    except OSError:
        return None
    return {key.strip(): value.strip() for key, sep, value in (line.partition(":") for line in first.splitlines())
            if sep}


def cpu_computes(dtype: str, cpuinfo: str | Path = "/proc/cpuinfo") -> bool | None:
    """Does this CPU compute bfloat16 or float16 natively (NATIVE_FLAGS)? Read from the flags in
    /proc/cpuinfo (Linux); None where that cannot be read."""
    info = cpu_info(cpuinfo)
    return None if info is None else bool(set(info.get("flags", "").split()) & set(NATIVE_FLAGS[dtype]))


def cpu_kind(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, str]:
    """What tells this CPU from another of the same model name (bench.py's JSON): its family and model numbers
    and the NATIVE_FLAGS it has ('avx512_bf16 amx_bf16'); {} where /proc/cpuinfo cannot be read."""
    info = cpu_info(cpuinfo)
    if info is None:
        return {}
    flags = set(info.get("flags", "").split())
    native = sorted(f for names in NATIVE_FLAGS.values() for f in names if f in flags)
    return {"family": info.get("cpu family", "?"), "model": info.get("model", "?"), "low_precision": " ".join(native)}


def emulated_dtype_warning(dtype: str, device: torch.device, cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """A warning line when training in `dtype` was asked for on a CPU that only emulates it, else
    None. bfloat16 without AVX-512 BF16 or AMX trained the default model 16-18x slower than float32
    (`bench.py configs/stories.yaml`: 5.8-5.9 s a step against 0.32-0.37; AVX2, torch 2.13);
    float16 is native only with AVX-512 FP16 or AMX-FP16. ("auto" never picks an emulated dtype.)"""
    if device.type == "cuda" and dtype == "bfloat16" and torch.cuda.get_device_capability(device)[0] < 8:
        return ("warning: this GPU computes bfloat16 only by emulation (compute capability below 8: no bfloat16 "
                "tensor cores): training in it is many times slower than in float16; train.dtype: auto picks float16")
    if device.type != "cpu" or dtype not in NATIVE_FLAGS or cpu_computes(dtype, cpuinfo) is not False:
        return None  # (not Linux: unknown, say nothing)
    return (f"warning: this CPU computes {dtype} only by emulation (no {' or '.join(NATIVE_FLAGS[dtype])}): "
            f"training in it is many times slower than in float32 (16-18x for the default model on an AVX2 CPU); "
            f"train.dtype: auto picks the fastest dtype")


def resolve_dtype(name: str, device: torch.device) -> str:
    """train.dtype 'auto' -> 'bfloat16' where the hardware computes it natively: a CUDA GPU from
    Ampere on (compute capability 8), a CPU with AVX-512 BF16 or AMX (there it is 2-4x faster than
    float32); 'float16' on Volta and Turing GPUs (capability 7: float16 tensor cores, bfloat16 only
    emulated); else 'float32' (emulated low precision is far slower than float32). Any other name
    is checked against the device and returned."""
    if name == "auto":
        if device.type == "cuda":
            major = torch.cuda.get_device_capability(device)[0]
            return "bfloat16" if major >= 8 else "float16" if major == 7 else "float32"
        return "bfloat16" if device.type == "cpu" and cpu_computes("bfloat16") else "float32"  # unknown: no
    if name == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError("train.dtype=bfloat16 is not supported by this GPU; use float16 or float32")
    return name


def autocast(dtype: str, device: torch.device):
    """The context that runs the forward pass in `dtype` (weights stay float32): autocast for
    bfloat16/float16, nothing for float32."""
    if dtype == "float32":
        return nullcontext()
    return torch.autocast(device.type, dtype=getattr(torch, dtype))


# torch >= 2.9 also reads TF32 through fp32_precision, the newer API; tf32_enabled reads that one where it
# exists, as its older getters raise a RuntimeError once only the newer one has set the flag
FP32_PRECISION_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")


def configure_cuda(tf32: bool) -> None:
    """TF32 tensor cores for float32 matmuls on CUDA (Ampere and later): ~8x the float32 throughput
    with a 10-bit mantissa, which training does not notice (nanoGPT turns it on too).

    Set through torch.set_float32_matmul_precision, which every torch since 1.12 has and which keeps
    torch 2.9+'s two APIs in step. Setting only the newer fp32_precision left the older getters,
    which torch.compile's inductor reads, raising a RuntimeError: compiling the float32 decoding
    step failed so on an H200 (torch 2.11). The model has no convolutions: cuDNN's TF32 is left alone."""
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse instead of returning it to the OS.

    Each training step allocates and frees the same large activations. By default glibc serves
    blocks over its mmap threshold with fresh pages and trims the heap's top when it is freed, so
    every step faults its activations' pages in again: about 9,000 page faults a step for the
    default model, 27x as many as with this setting (`python -m scripts.page_faults`; on the
    machine of docs/results.md the faults were cheap and the step time did not change). Raising
    the mmap threshold to its maximum (32 MiB) and the trim threshold keeps those pages mapped; the
    process then holds on to its peak memory. Returns False where it does not apply (not glibc)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
        return bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)) and bool(libc.mallopt(M_MMAP_THRESHOLD, 32 << 20))
    except (OSError, AttributeError):
        return False


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (timing needs it on a GPU: CUDA or Apple's MPS, where a
    matmul timed without it measures only its launch, and MFU comes out near 0)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


# ---- processes: one, or several under torchrun (DDP) ----


def launched_by_torchrun() -> bool:
    """Did torchrun (or another launcher of the same protocol) start this process? (errors.torchrun_rank)"""
    return torchrun_rank() is not None


def launcher_number(name: str, default: int) -> int:
    """The environment variable `name` that torchrun sets (LOCAL_RANK, LOCAL_WORLD_SIZE) as a number >= 0; `default`
    where it is unset or empty. Anything else is refused (int('abc') was a traceback)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit()):
        raise UserError(f"the environment variable {name}={short(value)} must be a whole number >= 0, as torchrun sets "
                        f"it; unset it (unset {name}), or launch with torchrun")
    return int(value)


RENDEZVOUS_NOTE_S = 30.0  # waiting this long for the other processes of a torchrun run, a note says why
ONE_PROCESS = f"for a run of one process, unset {', '.join(TORCHRUN_ENV[:-1])} and {TORCHRUN_ENV[-1]}"  # the advice


def meeting() -> tuple[str, str]:
    """Whom and where torchrun's variables say this process meets: 'process R of W ... the others at ...'."""
    env = os.environ
    return (f"process {env['RANK']} of {env['WORLD_SIZE']}", f"the others at MASTER_ADDR:MASTER_PORT="
            f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}")


def init_process_group(backend: str) -> None:
    """torch.distributed's init_process_group, run in a thread while this one waits. torch retries its
    connection through every signal (EINTR): with no process to meet (torchrun's variables set by
    hand or left by a cluster's job, a mistyped MASTER_ADDR, a machine that never started), Ctrl-C
    and `kill` did nothing for the 30 minutes of its timeout. Here a signal stops the wait as it
    stops anything else (`interrupted`), and a wait past RENDEZVOUS_NOTE_S says what it waits for."""
    import torch.distributed as tdist
    done, failed = threading.Event(), []

    def init() -> None:
        try:
            tdist.init_process_group(backend=backend)
        except BaseException as e:  # (raised here, in the waiting thread)
            failed.append(e)
        finally:
            done.set()
    threading.Thread(target=init, name="init_process_group", daemon=True).start()
    start, noted = time.monotonic(), False
    while not done.wait(0.2):  # (between the waits this thread's signal handlers run)
        if not noted and time.monotonic() - start > RENDEZVOUS_NOTE_S:
            who, others = meeting()
            print(f"note: {who} has waited {RENDEZVOUS_NOTE_S:.0f} s for {others}; {ONE_PROCESS} (Ctrl-C stops)",
                  file=sys.stderr, flush=True)
            noted = True
    if failed:
        if isinstance(failed[0], getattr(tdist, "DistNetworkError", ())):  # a busy port, an address of no machine
            who, others = meeting()
            raise UserError(f"{who} cannot meet {others}: {reason(failed[0], 240)}; give another MASTER_PORT "
                            f"(torchrun --master_port), or {ONE_PROCESS}") from None
        raise failed[0]


def check_launcher_env() -> None:
    """Refuse torchrun's variables set by hand (or left by another job) to what no run can have: torch.distributed
    met WORLD_SIZE=0 or 'two', or MASTER_PORT=70000, with a traceback, and RANK=3 of WORLD_SIZE=2 waited for good."""
    rank, world = launcher_number("RANK", 0), launcher_number("WORLD_SIZE", 1)
    unset = f"{ONE_PROCESS}, or launch with torchrun"
    if not 0 <= rank < world:
        raise UserError(f"the environment variables RANK={rank} and WORLD_SIZE={world} name no process of a run (RANK "
                        f"is 0 .. WORLD_SIZE - 1, as torchrun sets them); {unset}")
    if not 0 < launcher_number("MASTER_PORT", 0) <= 65535:
        raise UserError(f"the environment variable MASTER_PORT={short(os.environ['MASTER_PORT'])} is no port (1 .. "
                        f"65535); {unset}")


class Distributed:
    """One process, or one of several launched by torchrun (PyTorch DDP). The single-process run
    goes through the same calls; they do nothing when world_size == 1."""

    def __init__(self, rank: int, world_size: int, device: torch.device):
        self.rank, self.world_size, self.device = rank, world_size, device
        self.master = rank == 0  # the process that prepares data, prints and writes files

    @classmethod
    def from_env(cls, device: torch.device) -> "Distributed":
        if all(name in os.environ for name in TORCHRUN_ENV):  # (RANK=abc is no launch to torchrun_rank: it trained
            check_launcher_env()  # as one process without a word)
        if not launched_by_torchrun():
            return cls(0, 1, device)
        import torch.distributed as tdist
        stop_with_the_launcher()
        local_rank = launcher_number("LOCAL_RANK", 0)
        if device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        init_process_group("nccl" if device.type == "cuda" else "gloo")
        return cls(tdist.get_rank(), tdist.get_world_size(), device)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """DDP averages the gradients across processes during backward."""
        if self.world_size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)

    def barrier(self) -> None:
        if self.world_size > 1:  # NCCL is told its GPU: else it guesses one from the rank, and warns
            gpu = {"device_ids": [self.device.index]} if self.device.type == "cuda" else {}
            self._collective(functools.partial(torch.distributed.barrier, **gpu))

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """The mean of x over processes (for logging the loss)."""
        if self.world_size > 1:
            x = x.clone()
            self._collective(torch.distributed.all_reduce, x)
            x /= self.world_size
        return x

    def gather(self, obj: object) -> list:
        """Every process's obj, in rank order (a collective: every process calls it)."""
        if self.world_size == 1:
            return [obj]
        out = [None] * self.world_size
        self._collective(torch.distributed.all_gather_object, out, obj)
        return out

    def any(self, flag: bool) -> bool:
        """True if flag is true on any process, so that all stop together (under DDP a collective
        and a host sync with the device: train.py calls it every step on CPUs, at log steps on GPUs)."""
        if self.world_size == 1:
            return flag
        x = torch.tensor([float(flag)], device=self.device)
        self._collective(torch.distributed.all_reduce, x)
        return bool(x.item())

    def _collective(self, op: Callable, *args) -> None:
        with self.peers():
            op(*args)

    @contextmanager
    def peers(self) -> Iterator[None]:
        """Around collectives (and train.py's loop, whose backward passes all-reduce gradients): a
        process that already stopped (rank 0 refusing a dataset while the others wait at the barrier;
        a worker killed mid-step) is one line, not gloo's traceback; the line of the process that
        stopped says why."""
        try:
            yield
        except RuntimeError as e:
            if self.world_size > 1 and "Timed out" in str(e):  # gloo's "Timed out waiting 1800000ms for recv"
                # (the others wait at a barrier while process 0 prepares the data: a large dataset took longer)
                raise UserError(f"process {self.rank}: another process of this torchrun run did not answer within "
                                f"the process group's timeout (30 minutes unless set); if process 0 was preparing a "
                                f"large dataset, prepare it first (python -m data.prepare CONFIG), then start "
                                f"torchrun again") from None
            if self.world_size == 1 or "by peer" not in str(e):  # gloo: "Connection closed by peer", "reset by peer"
                raise
            raise UserError(f"process {self.rank}: another process of this torchrun run stopped (its own "
                            f"message says why; one killed, by SIGKILL or for memory, says nothing)") from None

    def close(self) -> None:
        """Shut NCCL down as PyTorch asks. A gloo process group (CPUs) is left to the process's end
        (exit_as_torchrun_worker): destroying it can hang for good (torch 2.4: its destructor, run
        holding the GIL, joins threads that wait for the GIL to free an all-reduce's tensors)."""
        if self.world_size > 1 and torch.distributed.is_initialized() and self.device.type == "cuda":
            torch.distributed.destroy_process_group()


def exit_as_torchrun_worker(run: Callable[[], None]) -> None:
    """run() (a command's main, which ends in sys.exit), then, in a process torchrun launched, end
    with its exit code *without* Python's shutdown. With gloo (DDP on CPUs), the backend's threads
    live to the end (Distributed.close leaves the group be, and in torch 2.13 DDP would keep it
    alive past destroy_process_group anyway) and free each finished all-reduce's tensors later,
    which takes the GIL; if that comes while the interpreter shuts down, the thread is stopped
    inside a destructor and C++ aborts the process ("terminate called without an active
    exception", SIGABRT): 6 of 70 two-process CPU runs, after their last step, and torchrun then
    stopped the other rank and reported a failure. Skipping the shutdown is safe here: by then
    every file is written and closed, and stdout and stderr are flushed. Outside torchrun it is
    just run()."""
    if not launched_by_torchrun():
        run()
        return
    try:
        run()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)  # what sys.exit("text") would print
    except BaseException:  # a bug: its traceback, as Python would print it
        import traceback
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader left
            pass
    os._exit(code)


# ---- signals ----


class StopFlag:
    """Turns SIGINT/SIGTERM, and SIGHUP (the terminal closed: an SSH connection dropped), into a flag
    the training loop checks between steps (it then saves and exits with 128 + the signal; output to
    a terminal that hung up is dropped, errors.ReaderMayLeave). A second Ctrl-C more than GRACE_S
    later stops at once (KeyboardInterrupt), unsaved;
    any other second signal is a duplicate and is ignored: torchrun, a job scheduler or a process
    group kill signals the launcher and the worker together, and the launcher passes its signal on,
    so the worker gets two within milliseconds and must still save."""

    GRACE_S = 1.0

    def __init__(self) -> None:
        self.signum: int | None = None
        self._at = 0.0
        self._old = handle_signals(self._handle)  # those not ignored (nohup: SIGHUP)

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum, self._at = signum, time.monotonic()
        elif signum == signal.SIGINT and time.monotonic() - self._at > self.GRACE_S:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt

    def restore(self) -> None:
        restore_signals(self._old)


def parent_death_signal() -> Callable[[], None] | None:
    """On Linux, a subprocess preexec_fn that makes the kernel send the child SIGTERM when this
    process dies, even by SIGKILL, when no cleanup of ours runs: a sweep's train.py then saves its
    checkpoint and exits instead of training on alone, holding its run directory; bench's busy
    process stops spinning. None elsewhere (or without prctl): there a child outlives us.

    The signal comes when the *thread* that started the child ends: start children from a thread
    that outlives them (the main thread, or a pool thread that lives until every run has ended)."""
    sigterm_at_parents_death = _sigterm_at_parents_death()  # loaded here: the child only calls it
    if sigterm_at_parents_death is None:
        return None
    parent = os.getpid()

    def die_with_the_parent() -> None:
        sigterm_at_parents_death()
        if os.getppid() != parent:  # the parent died before the line above: no signal will come
            os._exit(1)
    return die_with_the_parent


def run_child(cmd: list[str], cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True), for a child that saves its work when
    stopped (a training): when we are stopped while it runs (Ctrl-C, SIGTERM, SIGHUP: the
    KeyboardInterrupt or Terminated run_cli turns them into), it gets SIGTERM and we wait for it to
    save and exit, where subprocess.run would SIGKILL it (losing its steps since the last checkpoint
    and leaving its run directory's lock). A second Ctrl-C while we wait kills it. If we are killed
    ourselves, parent_death_signal sends it SIGTERM."""
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace", preexec_fn=parent_death_signal()) as proc:
        try:
            out, err = proc.communicate()
        except BaseException:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # a Ctrl-C to the terminal reached it too: it saves once
            try:
                proc.communicate()
            except BaseException:
                proc.kill()
                raise
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def stop_with_the_launcher() -> None:
    """In a torchrun worker: SIGTERM when torchrun dies, even by SIGKILL, which stops its workers
    no more: they trained on alone, holding the run directory. The worker then saves and stops as
    on any SIGTERM. (torchrun starts its workers from its main thread, which lives as long as it.)"""
    sigterm_at_parents_death = _sigterm_at_parents_death()
    if sigterm_at_parents_death is None:
        return
    launcher = os.getppid()
    sigterm_at_parents_death()
    if os.getppid() != launcher:  # it died before the line above: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)


def _sigterm_at_parents_death() -> Callable[[], None] | None:
    """On Linux, a call that has the kernel send the calling process SIGTERM when its parent dies
    (PR_SET_PDEATHSIG, linux/prctl.h); None elsewhere, or without prctl."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, ctypes.c_ulong(signal.SIGTERM))


# ---- CPU threads: as many as the cores other processes leave free ----


def usable_cpus() -> set[int]:
    """The CPUs this process may run on: its affinity mask on Linux, else every CPU."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def cgroup_dirs(controller: str, root: Path = Path("/sys/fs/cgroup"),
                proc_cgroup: Path = Path("/proc/self/cgroup")) -> list[Path]:
    """The folders of this process's cgroup and of its ancestors that hold `controller`'s files
    (e.g. "cpu", "memory"), innermost first: in cgroup v1 under root/<controller>, in v2 under the one
    hierarchy (root, or root/unified beside v1). Inside a container the root is the container's own
    cgroup, and the path /proc shows may not exist there: the folders that exist are returned.
    Empty off Linux."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    dirs: list[Path] = []
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0" and not controllers:  # cgroup v2
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
        elif controller in controllers.split(","):  # cgroup v1: "cpu,cpuacct" or "cpu"
            base = next((root / name for name in (controllers, controller) if (root / name).is_dir()), None)
            if base is None:
                continue
        else:
            continue
        folder = base / path.lstrip("/")
        for d in [folder, *folder.parents]:  # up to base
            if d.is_dir() and d not in dirs:
                dirs.append(d)
            if d == base:
                break
    return dirs


def cpu_quota(dirs: list[Path] | None = None) -> float | None:
    """The CPUs' worth of time per period that this process's cgroups allow (the lowest along its
    path: `docker run --cpus=1`, a Kubernetes CPU limit, systemd's CPUQuota), or None if unlimited
    or unknown. Threads beyond it are throttled together at every period's end."""
    quotas = []
    for d in cgroup_dirs("cpu") if dirs is None else dirs:
        try:
            if (d / "cpu.max").exists():  # v2: "max 100000" or "150000 100000"
                quota, period = (d / "cpu.max").read_text().split()[:2]
            else:  # v1: -1 = no quota
                quota = (d / "cpu.cfs_quota_us").read_text().strip()
                period = (d / "cpu.cfs_period_us").read_text().strip()
            if quota != "max" and int(quota) > 0 and int(period) > 0:
                quotas.append(int(quota) / int(period))
        except (OSError, ValueError):
            continue
    return min(quotas) if quotas else None


def physical_cores(cpus: set[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> int:
    """How many physical cores the logical CPUs `cpus` sit on: with SMT (hyper-threading) two CPUs
    share a core, and torch, too, starts one thread per core, not per CPU. From Linux's topology
    files (the CPUs sharing each one's core); where they are missing, every CPU counts as a core."""
    cores = set()
    for cpu in cpus:
        try:
            cores.add((sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text().strip())
        except OSError:
            return len(cpus)
    return len(cores)


def whole_cores(cores: float) -> int:
    """The whole cores in `cores` cores' worth of CPU time: a core counts from ~75% of it (a thread
    on a core kept a quarter busy, or throttled a quarter of the time, waits little; on half, every
    parallel op waits for it)."""
    return int(cores + 0.25)


def usable_cores() -> int:
    """How many cores this process can keep busy at once: the physical cores of the CPUs it may run
    on, capped by its cgroup's CPU quota (whole_cores); at least 1. In a container allowed 1 CPU of
    2, two intra-op threads trained 14% slower than one and decoded at half its speed
    (docs/results.md)."""
    n, quota = physical_cores(usable_cpus()), cpu_quota()
    return max(1, n if quota is None else min(n, whole_cores(quota)))


def too_many_threads(policy: ThreadPolicy | None, fixed: int, flag: str, work: str) -> str | None:
    """A warning where `flag` (train.threads, --threads) asks for more threads than this process has
    cores: they take turns on them (1024 on 2 cores trained 300x slower, and the MFU, its peak
    measured likewise, looked normal; sampling ran 2.3x slower)."""
    cores = usable_cores()
    local = max(1, launcher_number("LOCAL_WORLD_SIZE", 1))  # torchrun's processes on this machine share them
    if policy is None or fixed * local <= cores:
        return None
    each, who = (f" in each of the {local} processes of this machine", "they") if local > 1 else ("", "this process")
    return (f"warning: {flag}={fixed}{each} is more than the {count(cores, 'core')} {who} can use: the "
            f"threads take turns and {work} is much slower (0 follows the free cores)")


def _proc_stat() -> list[list[str]]:
    """/proc/stat's lines split into fields (Linux), else no lines."""
    try:
        return [fields for line in Path("/proc/stat").read_text().splitlines() if (fields := line.split())]
    except OSError:
        return []


def _cpu_jiffies(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) clock ticks since boot of the given CPUs, from /proc/stat (Linux), else None. The ticks of
    niced processes (the nice column) are not busy for a process of normal priority where nice ranks all processes:
    the kernel gives it nearly all of a core a `nice -n 19` job holds (beside one, 2 threads trained 29,400 tokens/s,
    the 1 thread the policy left 20,200). Not under autogrouping, where nice ranks a terminal session's processes
    only and a niced job of another session gets half its core; nor for a niced process, whose own ticks are there."""
    busy = total = 0
    nice_is_free = niceness() <= 0 and not autogrouping()
    for name, *fields in _proc_stat():
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            total += sum(ticks)
            busy += sum(ticks) - ticks[3] - ticks[4] - (ticks[1] if nice_is_free else 0)
    return (busy, total) if total else None


def autogrouping() -> bool:
    """Does the scheduler group processes by session (sched_autogroup_enabled, on in many distributions), so that
    nice weighs a process only against its own session's? True where unknown to be off."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "0"
    except OSError:  # (a kernel without autogrouping: nice ranks all processes)
        return not Path("/proc/sys/kernel").is_dir()


def niceness() -> int:
    """This process's nice value (0 unless started with `nice`; 0 where unknown)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except (AttributeError, OSError):  # (not Unix)
        return 0


def _runnable_tasks() -> int | None:
    """Threads running or waiting for a CPU right now, machine-wide ('procs_running' in /proc/stat,
    the caller included), else None."""
    for name, *fields in _proc_stat():
        if name == "procs_running" and fields and fields[0].isdigit():
            return int(fields[0])
    return None


def env_threads() -> int | None:
    """The thread limit OMP_NUM_THREADS or MKL_NUM_THREADS sets, read as the OpenMP runtime and torch read them
    (the lower where both are set; spaces around it, and a list's first count, `1,1`), or None: ` 1`, `1,1` and
    MKL_NUM_THREADS=1 started torch on one thread, and the policy raised it to the cores; so did `+1`, a sign
    being C's strtoul's too. A value they ignore (`0`, `abc`, `²`) sets none."""
    limits = []
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        text = os.environ.get(name, "").split(",")[0].strip().removeprefix("+")
        if text.isascii() and text.isdigit() and int(text) > 0:  # ("²" is a digit, and no int)
            limits.append(int(text))
    return min(limits, default=None)


class ThreadPolicy:
    """Intra-op CPU threads for the cores that other processes leave free, re-checked as it runs.

    A parallel op waits for its slowest thread. With 2 threads on 2 cores and another busy process,
    one thread shares its core with that process, and every op waits for it: training ran at a third
    of its idle speed that way, decoding at a quarter, while the free cores keep most of it
    (docs/results.md). So every `interval_s` seconds `update()` measures how many cores the other
    processes kept busy since the last check (/proc/stat for this process's CPUs, minus this
    process's own CPU time) and sets torch's threads to the free cores, at least 1 and at most
    usable_cores() (the physical cores this process may use, as many as its container's CPU quota
    allows; torch's own default is one thread per physical core), at most the limit the environment
    sets (env_threads: OMP_NUM_THREADS=2 in a container allowed 1 CPU is still 1), and at most
    `max_threads` if given (a share of the cores). `fixed` > 0 pins the
    count instead. Off /proc (macOS, Windows) it keeps torch's default.

    The first count, before any window of ticks exists, is the number of other threads ready to run
    (`procs_running` minus this one), the median of 5 looks 10 ms apart: /proc/stat counts CPU time
    in ticks of 10 ms, and over a window short enough not to delay the start (say 50 ms) one tick
    of a passing process reads as a fifth of a core busy, two as 0.4, enough to start an idle
    machine on one core for a second. The count is machine-wide: a process pinned to a few CPUs of
    a busy host may start on fewer threads, until the first window of its own CPUs' ticks.

    Float sums split over a different number of threads round differently, so a run whose thread
    count moved is equal to float rounding, not bit for bit, to one that kept it: pin the count
    (`fixed`, train.threads: N) for bit-identical repeats and resumes (OMP_NUM_THREADS=N caps it: only
    N=1 pins it)."""

    def __init__(self, max_threads: int | None = None, fixed: int = 0, interval_s: float = 1.0):
        self.cpus = usable_cpus()
        limits = (usable_cores(), len(self.cpus), env_threads(), max_threads)  # (None: no limit set)
        self.max_threads = max(1, min(n for n in limits if n))
        self.fixed, self.interval_s = fixed, interval_s
        self.threads = torch.get_num_threads()
        self._last: tuple[float, float, int, int] | None = None  # (wall, own cpu, busy, total)
        if fixed:
            self._set(fixed)
        else:
            self._sample()  # the start of the first window of ticks
            self._first_look()

    def _sample(self) -> tuple[float, float, int, int] | None:
        jiffies = _cpu_jiffies(self.cpus)
        if jiffies is None:
            return None
        previous, self._last = self._last, (time.monotonic(), time.process_time(), *jiffies)
        return previous

    def _first_look(self, looks: int = 5, apart_s: float = 0.01) -> None:
        """Threads for the others' tasks ready to run now (see the class doc)."""
        counts = []
        for i in range(looks):
            if i:
                time.sleep(apart_s)
            n = _runnable_tasks()
            if n is None:
                return
            counts.append(n - 1)  # this thread is running while it reads
        self._set(self._free(statistics.median_low(counts)))

    def _free(self, others_busy: float) -> int:
        """Threads for the cores the others leave free: a core counts as free if the others keep it
        less than ~25% busy; at least 1, at most max_threads."""
        return max(1, min(self.max_threads, whole_cores(len(self.cpus) - others_busy)))

    def _set(self, n: int) -> None:
        if n != self.threads:
            torch.set_num_threads(n)
            self.threads = n

    def others_busy(self) -> float | None:
        """Cores kept busy by other processes since the last sample (and take a new sample)."""
        previous = self._sample()
        if previous is None or self._last is None:
            return None
        _, own0, busy0, total0 = previous
        _, own1, busy1, total1 = self._last
        if total1 <= total0:
            return None
        tick_s = (total1 - total0) / len(self.cpus) / max(self._last[0] - previous[0], 1e-9)  # ticks per second
        others = (busy1 - busy0) / tick_s - (own1 - own0)  # core-seconds
        return max(0.0, others / max(self._last[0] - previous[0], 1e-9))

    def update(self, force: bool = False) -> int:
        """Re-check the free cores (at most every interval_s seconds) and set the thread count."""
        if self.fixed or (not force and self._last is not None and time.monotonic() - self._last[0] < self.interval_s):
            return self.threads
        busy = self.others_busy()
        if busy is not None:
            self._set(self._free(busy))
        return self.threads


def following_free_cores(items: Iterable[T], policy: ThreadPolicy | None) -> Iterator[T]:
    """Yield items (e.g. generation steps), letting the policy re-check the free cores before each."""
    for item in items:
        if policy is not None:
            policy.update()
        yield item


# ---- compiled decoding (sample.py --compile) ----

# torch.compile's options for the one-token step. On a CPU, max_autotune lets inductor time its own
# C++ matrix kernels against MKL's and keep the faster (for one row of input, its own: the step
# decodes 2.1-2.8x faster, docs/results.md). No CUDA graphs: the cache grows every step, a new shape
# each time. Freezing (the weights become constants of the graph, which those kernels pre-pack;
# without it they are not used) is set around each call instead: passed among these options it
# does not take effect (torch 2.13).
COMPILE_OPTIONS = {"max_autotune": True}


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to `n` for the block, then put back."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def compile_decoding(model: GPT, log=None, threads: int | None = None) -> Callable | None:
    """`model`'s one-token decoding step with the KV cache, compiled: idx (B, 1), kv_caches ->
    logits (B, 1, V), the same function as model(idx, kv_caches) and the same tokens (tested). The
    cache length is a symbolic size (dynamic=True), so one graph serves every length.

    Compiling takes a while (about a minute on 2 CPU cores for a 6x6x384 model; inductor caches
    its work on disk, so the next process takes less) and happens here, on a one-token warm-up, so
    a failure (no C++ compiler, an unsupported device) is one warning line on `log` (default
    stderr) and None: the caller decodes with the model itself. The graph holds the weights as
    they are now (change them and compile again) and is compiled for `threads` CPU threads (default:
    the count set now): while another count is set (the thread policy on a busy machine), the model
    itself decodes."""
    log = log or sys.stderr
    if model.config.block_size < 2:  # every step refills a one-token window: there is no decoding step
        return None
    log.write("compiling the decoding step (torch.compile; about a minute the first time) ...\n")
    log.flush()
    start = time.perf_counter()
    import torch._inductor.config as inductor_config  # (here: only --compile needs it)
    step = torch.compile(model, dynamic=True, options=COMPILE_OPTIONS)
    device = model.tok_emb.weight.device
    threads = threads or torch.get_num_threads()

    def decode_step(idx: torch.Tensor, kv_caches: list) -> torch.Tensor:
        if torch.get_num_threads() != threads:  # the thread policy moved (a busy machine): the graph
            return model(idx, kv_caches)  # would compile again for this count; the model runs meanwhile
        # a fresh contiguous (B, 1) tensor: the graph would otherwise depend on where the newest
        # token sits in the window's storage (offsets and strides of 0 and 1 compile as constants).
        # Freezing around every call (20 us), so that a recompile, should one happen, freezes too
        with inductor_config.patch(freezing=True):
            return step(idx.clone(memory_format=torch.contiguous_format), kv_caches)

    try:
        # inductor's deprecation notices and its tables of kernel timings stay off the terminal
        with torch_threads(threads), torch.no_grad(), warnings.catch_warnings(), redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            # a 2-token prompt through the model itself, then one step through the graph, which
            # compiles it (at a cache length of 2: lengths 0 and 1 would compile as constants)
            caches = model.new_kv_caches(1)
            tokens = torch.zeros(1, min(3, model.config.block_size), dtype=torch.long, device=device)  # (1, W)
            model(tokens[:, :-1], caches)
            decode_step(tokens[:, -1:], caches)
    except Exception as e:  # noqa: BLE001 (whatever the compiler raised, decoding still works without it)
        log.write(f"warning: --compile failed ({type(e).__name__}: {reason(e, 200)}); decoding without it\n")
        return None
    log.write(f"compiled in {time.perf_counter() - start:.0f} s\n")
    return decode_step


def check_compile_cache(flag: str) -> None:
    """Refuse `flag` (train.compile, --compile) before any work where torch.compile cannot make the folder it keeps
    its work in (TORCHINDUCTOR_CACHE_DIR, else one in /tmp): it failed there with `Not a directory: ...`, naming
    neither, after the data were prepared."""
    asked = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    try:  # (importing torch._inductor makes the folder already; cache_dir is private: where it moved, torch says why)
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        cache_dir()
    except ImportError:
        return
    except OSError as e:
        folder = e.filename if isinstance(e.filename, str) else asked
        fix = (f"the environment variable TORCHINDUCTOR_CACHE_DIR={short(asked)} names it: give a folder that can be "
               f"written, or unset it" if asked else "set TORCHINDUCTOR_CACHE_DIR to a folder that can be written")
        raise UserError(f"{flag}: torch.compile keeps its work in {short(folder)}, which cannot be made "
                        f"({e.strerror or type(e).__name__}); {fix}") from None


# ---- int8 weights for decoding (sample.py --dtype int8) ----

INT8_IN_MULTIPLE = 16  # torch's CPU int8 kernel reads each input row 16 values at a time, with no tail


def int8_problem(m: ModelConfig, device: torch.device, width: str = "model.n_embd") -> str | None:
    """Why `int8_weights` cannot run a model of config m on device (a reason, the caller says the fix), or None.
    `width`: the setting that gave n_embd, as the reason names it (bench.py --vs-hf's shape: --gen-embd)."""
    if device.type != "cpu":
        return f"int8 weights run on the CPU only (torch's CPU int8 kernel), not on {device.type}"
    if not hasattr(torch.ops.aten, "_weight_int8pack_mm"):
        return f"torch {torch.__version__} lacks the int8 weight kernel"
    if m.n_embd % INT8_IN_MULTIPLE:  # (4 * n_embd then is too): every Linear reads n_embd or 4 * n_embd values
        return (f"int8 weights need {width} a multiple of {INT8_IN_MULTIPLE} (torch's int8 kernel reads rows "
                f"{INT8_IN_MULTIPLE} values at a time); this model's is {m.n_embd}")
    return None


class Int8Linear(torch.nn.Module):
    """An nn.Linear for decoding, its weight (out, in) stored as int8 with one scale per output row: a
    quarter of float32's bytes to read per token. x (..., in) bfloat16 -> (..., out) bfloat16; the
    kernel widens the weights in registers and sums in float32."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        if linear.in_features % INT8_IN_MULTIPLE:  # the kernel would read past each row, or crash
            raise ValueError(f"in_features={linear.in_features} is not a multiple of {INT8_IN_MULTIPLE}")
        w = linear.weight.detach().float()  # (out, in)
        # symmetric: each row's largest |w| becomes about 127 (an all-zero row stays zero). The kernel takes
        # the scales in the input's dtype, so w is rounded to the nearest multiple of the bfloat16 scale
        scale = (w.abs().amax(dim=1).clamp(min=1e-30) / 127).to(torch.bfloat16)  # (out,)
        q = torch.round(w / scale.float()[:, None]).clamp(-127, 127)  # (out, in): each within half a step
        self.register_buffer("weight", q.to(torch.int8))  # (out, in)
        self.register_buffer("scale", scale)  # (out,)
        bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16)
        self.register_buffer("bias", bias)  # (out,) or None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.size(-1))  # (N, in)
        if rows.data_ptr() % 64 or not rows.is_contiguous():  # the kernel loads whole aligned rows (a view
            rows = rows.clone(memory_format=torch.contiguous_format)  # at an offset would crash it): a fresh copy
        y = torch._weight_int8pack_mm(rows, self.weight, self.scale)  # (N, out): rows @ (weight * scale)^T
        y = y.view(*x.shape[:-1], y.size(-1))  # (..., out)
        return y if self.bias is None else y + self.bias


def int8_weights(model: GPT) -> GPT:
    """`model`, changed in place, for decoding only: every nn.Linear an Int8Linear (the tied LM head gets
    its own int8 copy), the rest (embeddings, LayerNorms) bfloat16. Check int8_problem first."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, Int8Linear(child))  # rounded from the weights as they are, not bfloat16's
    return model.to(torch.bfloat16).eval()  # (int8 tensors keep their dtype)


# ---- peak FLOP/s for MFU ----

# nominal dense peaks in TFLOP/s: (bfloat16/float16 tensor cores, TF32 tensor cores, plain float32).
# Matched against torch.cuda.get_device_name as whole words, most specific first ("L40S" before
# "L40" before "L4"; "H100 PCIe" and "H100 NVL" before "H100", "H200 NVL" before "H200", "RTX 3090 Ti"
# before "RTX 3090"). Volta and Turing (V100, T4: Colab's free GPU) have float16 tensor cores only: no
# TF32 (the float32 column twice), and bfloat16 runs emulated.
GPU_PEAKS = {
    "H200 NVL": (835.5, 417.5, 60.0), "H200": (989.0, 494.7, 66.9), "H100 PCIe": (756.0, 378.0, 51.2),
    "H100 NVL": (835.5, 417.5, 60.0), "H100": (989.0, 494.7, 66.9), "A100": (312.0, 156.0, 19.5),
    "L40S": (362.1, 183.0, 91.6), "L40": (181.0, 90.5, 90.5), "L4": (121.0, 60.0, 30.3), "A10": (125.0, 62.5, 31.2),
    "RTX 4090": (165.2, 82.6, 82.6), "RTX 3090 Ti": (80.0, 40.0, 40.0), "RTX 3090": (71.0, 35.6, 35.6),
    "V100S": (130.0, 16.4, 16.4), "V100-PCIE": (112.0, 14.0, 14.0), "V100": (125.0, 15.7, 15.7),
    "T4": (65.0, 8.1, 8.1),
}
NO_BFLOAT16 = {"V100S", "V100-PCIE", "V100", "T4"}  # bfloat16 emulated: no faster than float32


def gpu_peak(name: str, dtype: str, tf32: bool) -> tuple[float, str] | None:
    """(FLOP/s, source) for a GPU named `name` (as CUDA reports it), or None if it is not known."""
    if re.search(r"Laptop|Mobile|Max-Q|(?<![A-Za-z0-9])(D|M)$|(?<![A-Za-z0-9])MIG(?![A-Za-z0-9])", name):  # a
        # laptop's chip, a cut-down 4090 D, a MIG slice of an H100 (`... MIG 1g.10gb`: 16 of its 132 SMs): not the
        # whole card's peak (measured instead)
        return None
    for key, (low, tf32_peak, fp32) in GPU_PEAKS.items():
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", name):
            if dtype == "float16" or (dtype == "bfloat16" and key not in NO_BFLOAT16):
                return low * 1e12, f"nominal {key} {dtype}"
            if dtype == "bfloat16":
                return fp32 * 1e12, f"nominal {key} float32 (its bfloat16 is emulated)"
            if key in NO_BFLOAT16:  # (no TF32 either: "TF32" named what these chips lack)
                return fp32 * 1e12, f"nominal {key} float32 (no TF32 on it)"
            return (tf32_peak * 1e12, f"nominal {key} TF32") if tf32 else (fp32 * 1e12, f"nominal {key} float32")
    return None


PEAK_REPEATS = 8  # timed runs of each matmul size, after one that warms up: the fastest is the peak


@functools.lru_cache(maxsize=None)
def measured_matmul_peak(dtype: torch.dtype, device: torch.device, budget_s: float = 0.5) -> tuple[float, int]:
    """(FLOP/s, n) of the largest n x n matmul (n = 256, 512, ... 2048) this device does within
    the time budget, the fastest of PEAK_REPEATS; measured once per process. The fastest, not a median: another
    process holding a core stalls some repeats and never speeds one up (a median of 3 on a busy 2-core machine read
    2 GFLOP/s where one core does 100, and the run's MFU 150%). The product is x @ W^T, the
    layout of every nn.Linear the model runs: on some CPUs a bfloat16 x @ W without the transpose
    takes a path 10-15x slower (torch 2.13, AVX2), a peak no training step would be held to. A dtype
    the hardware only emulates (bfloat16 on most older CPUs) is ~10x slower than float32 even so,
    so the budget stops it at a small n instead of spending a minute. Its own generator: the global
    random stream is untouched."""
    gen = torch.Generator().manual_seed(0)
    best, best_n, spent, n = 0.0, 0, 0.0, 256
    while n <= 2048:
        a = torch.randn(n, n, generator=gen).to(device, dtype)
        b = torch.randn(n, n, generator=gen).to(device, dtype)
        times = []
        for _ in range(1 + PEAK_REPEATS):
            sync(device)
            t0 = time.perf_counter()
            torch.nn.functional.linear(a, b)  # a @ b.T
            sync(device)
            times.append(time.perf_counter() - t0)
            if sum(times) > budget_s:  # (a stalled or emulated size: no more of it)
                break
        spent += sum(times)
        fastest = min(times[1:] or times)  # the first run warms up
        flops = 2 * n ** 3 / fastest
        if flops > best:
            best, best_n = flops, n
        if spent > budget_s or 8 * statistics.median(times[1:] or times) * (1 + PEAK_REPEATS) > budget_s:
            break  # the next size costs 8x as much
        n *= 2
    return best, best_n


def tf32_enabled() -> bool:
    """Whether float32 matmuls on CUDA run on TF32 tensor cores (read as configure_cuda sets it)."""
    if FP32_PRECISION_API:
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's model name (/proc/cpuinfo; else what platform knows)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if name := (cpu_info() or {}).get("model name"):
        return name
    import platform
    return platform.processor() or platform.machine()


def peak_flops(dtype: str, device: torch.device, budget_s: float = 0.5, again: bool = False) -> tuple[float, str]:
    """(FLOP/s, where the figure comes from) for MFU: nominal on a known GPU, else measured (`again`: not the
    figure this process measured before, which measured_matmul_peak keeps)."""
    if device.type == "cuda":
        known = gpu_peak(torch.cuda.get_device_name(device), dtype, tf32_enabled())
        if known is not None:
            return known
    if again:
        measured_matmul_peak.cache_clear()
    flops, n = measured_matmul_peak(getattr(torch, dtype), device, budget_s)
    return flops, f"measured {n}^2 {dtype} matmul"


# ---- will it fit? Checked before anything is allocated ----

GB = 2**30
MAX_STEP_S = 24 * 3600  # one optimizer step or one evaluation that surely takes over a day is refused
# lower bounds of the time a pass takes, whatever the machine: PyTorch's overhead for even the
# smallest model (~1 ms measured on a CPU), and a petaFLOP/s, beyond any single device tinygpt runs on
MIN_PASS_S = 1e-4
FAST_FLOPS = 1e15


def memory_left(device: torch.device) -> tuple[int, str] | None:
    """(bytes that can still be allocated on `device`, what leaves no more, as words to format them into): a GPU's
    free memory; on a CPU the least of cpu_memory_limits (the machine's, a container's, ulimit -v's: a machine with
    21 GB free was said to have 0.8, ulimit -v's figure). None where unknown (nothing refused)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0], f"{device} has {{}} available"
    limits = cpu_memory_limits() if device.type == "cpu" else {}
    if not limits:
        return None
    bound = min(limits, key=limits.get)
    return limits[bound], MEMORY_LIMITS[bound]


MEMORY_LIMITS = {  # what bounds the memory a CPU process can still take, as check_memory says it
    "machine": "this machine has {} available",
    "cgroup": "its container's memory limit (a cgroup) leaves {}",
    "ulimit": "ulimit -v leaves this process {} of address space",
}


def cpu_memory_limits() -> dict[str, int]:
    """The bytes each bound of MEMORY_LIMITS leaves (where known): the kernel's MemAvailable, the cgroup limit of a
    container, and the address space `ulimit -v` leaves this process (clusters set it)."""
    limits = {}
    try:
        meminfo = Path("/proc/meminfo").read_text()
        match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.MULTILINE)
        if match:
            limits["machine"] = int(match.group(1)) * 1024
    except OSError:
        pass
    if "machine" not in limits and hasattr(os, "sysconf"):
        try:
            limits["machine"] = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            pass
    if "machine" not in limits:  # (nothing known of the machine: nothing refused)
        return {}
    for d in cgroup_dirs("memory"):  # a container may allow far less than the machine has
        try:
            v2 = (d / "memory.max").exists()
            limit = (d / ("memory.max" if v2 else "memory.limit_in_bytes")).read_text().strip()
            if limit != "max":  # (v1's "no limit" is a number above any free memory)
                used = int((d / ("memory.current" if v2 else "memory.usage_in_bytes")).read_text())
                left = max(int(limit) - (used - reclaimable_cache(d)), 0)
                limits["cgroup"] = min(left, limits.get("cgroup", left))
        except (OSError, ValueError):
            continue
    try:  # ulimit -v: every allocation takes address space, whatever memory is free
        import resource
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        status = Path("/proc/self/status").read_text()
        match = re.search(r"^VmSize:\s+(\d+) kB", status, re.MULTILINE)
        if limit != resource.RLIM_INFINITY and match:
            limits["ulimit"] = max(limit - int(match.group(1)) * 1024, 0)
    except (ImportError, OSError, ValueError):  # not Unix, or no /proc
        pass
    return limits


def reclaimable_cache(cgroup: Path) -> int:
    """Bytes of a memory cgroup's usage that are page cache the kernel drops when asked (its inactive files: the
    "working set" of docker and Kubernetes is the usage less them), 0 where unknown. Counted as used, a container
    whose cache had filled (checkpoints written, data prepared) refused every training and sample."""
    try:
        stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines() if line.count(" ") == 1)
        # (v1: total_inactive_file counts the cgroups below too; v2 has inactive_file only)
        return int(stat.get("total_inactive_file", stat.get("inactive_file", 0)))
    except (OSError, ValueError):
        return 0


LAYER_OBJECTS = 37_000  # bytes of Python and torch objects a Block takes beside its tensors (measured: 3,000 layers)


def model_memory(m: ModelConfig) -> dict[str, int]:
    """Bytes a GPT(m) takes at least, by part: float32 weights and each layer's modules (what counts in
    a model of millions of layers 1 wide: 37 KB each, 345 GB for 10 million, which the weights alone
    put at 0.6 GB)."""
    return {"weights": 4 * GPT.count_params(m), "layers' modules": m.n_layer * LAYER_OBJECTS}


def training_memory(m: ModelConfig, batch_size: int, dtype: str) -> dict[str, int]:
    """A lower bound of the bytes one training process needs, by part: the model, its gradients and
    AdamW's two moments (float32), the activations kept for backward (~16 values of width C per
    token and layer), the logits with their float32 copy and gradient, and the batch."""
    tokens = batch_size * m.block_size  # one micro-batch
    act = 2 if dtype in LOW_PRECISION else 4  # bytes per activation
    return {**model_memory(m), "gradients and AdamW state": 12 * GPT.count_params(m),
            "activations": tokens * m.n_layer * 16 * m.n_embd * act,
            "logits": tokens * m.vocab_size * (act + 8), "batch": 2 * tokens * 8}


def gigabytes(n: float) -> str:
    return f"{n / GB:,.1f} GB" if n < 1e6 * GB else f"{n / GB:.2g} GB"


def check_memory(parts: dict[str, int], device: torch.device, what: str, fix: str) -> None:
    """Refuse (one line) when `what` needs more bytes than `device` has available; the message
    says how much, and the largest parts."""
    need, left = sum(parts.values()), memory_left(device)
    if left is None or need <= left[0]:
        return
    have, bound = left
    largest = ", ".join(f"{k} {gigabytes(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:3]
                        if v >= need / 100)
    raise UserError(f"{what} needs at least {gigabytes(need)} of memory ({largest}), but "
                    f"{bound.format(gigabytes(have))}; {fix}")


def check_step_time(flops: float, passes: int, what: str, fix: str) -> None:
    """Refuse `what` when it surely takes longer than MAX_STEP_S: `passes` forward passes at
    MIN_PASS_S each, or `flops` at FAST_FLOPS, whichever is longer (a measured peak would refuse
    legitimate runs on a busy machine). Such a run would sit silent, not train."""
    seconds = max(flops / FAST_FLOPS, passes * MIN_PASS_S)
    if seconds > MAX_STEP_S:
        raise UserError(f"{what} takes at least {seconds / 3600:,.0f} hours ({passes:,} passes of at least "
                        f"{MIN_PASS_S * 1e3:g} ms, {flops:.1e} FLOPs at no more than {FAST_FLOPS:.0e} FLOP/s); {fix}")


def check_training_fits(cfg: Config, dtype: str, device: torch.device) -> None:
    """Refuse, before anything is allocated, a training config that cannot fit in memory, or whose
    one optimizer step or evaluation surely takes over a day (say grad_accum=10**9)."""
    m, t = cfg.model, cfg.train
    check_memory(training_memory(m, t.batch_size, dtype), device,
                 f"training ({count(m.n_layer, 'layer')}, n_embd {m.n_embd}, block {m.block_size}, "
                 f"batch {t.batch_size})",
                 "lower model.n_layer, model.n_embd, model.block_size or train.batch_size")
    # FLOPs of one micro-batch's forward, roughly (GPT.flops_per_token / 3, attention's term left out: no model
    # exists yet, and the check only needs to tell a day from minutes)
    forward = 2 * GPT.count_params(m) * t.batch_size * m.block_size
    check_step_time(3 * forward * t.grad_accum, t.grad_accum, f"one optimizer step (train.grad_accum="
                    f"{t.grad_accum} x train.batch_size={t.batch_size})", "lower train.grad_accum or train.batch_size")
    check_step_time(2 * forward * t.eval_iters, 2 * t.eval_iters, f"one evaluation (train.eval_iters="
                    f"{t.eval_iters} batches per split)", "lower train.eval_iters")

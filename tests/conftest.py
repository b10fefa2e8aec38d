"""Shared test fixtures: tiny configs, one shared trained run, and the shared data folder. The
repository root is importable through pyproject.toml's pytest `pythonpath`."""
from __future__ import annotations

import faulthandler
import hashlib
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from tinygpt.errors import STOP_SIGNALS

ROOT = Path(__file__).resolve().parents[1]


def _still_ignored(signum, frame) -> None:
    """What the suite does with a signal it inherited ignored: nothing, as before."""


# A suite started as a script's background job (`python -m pytest &`: SIGINT ignored) or under
# nohup (SIGHUP) would pass SIG_IGN on to every command its tests start, and the commands keep an
# inherited SIG_IGN on purpose (errors.handle_signals): a test's Ctrl-C would then be lost and the
# test wait out its timeout. A Python handler, unlike SIG_IGN, is not inherited across exec.
for _signum in STOP_SIGNALS:
    if signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(_signum, _still_ignored)
# tiny shakespeare (tinyshakespeare.txt) and GPT-2's BPE ranks (r50k_base.tiktoken), for the tests
# that use them: the folder TINYGPT_TEST_DATA names, else ../shared/data; those tests skip without it
SHARED_DATA = Path(os.environ.get("TINYGPT_TEST_DATA") or ROOT.parent / "shared" / "data")
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"


# A test (its fixtures' setup too) still running after this many seconds ends its process, exit 1 (its
# threads' stacks go to the captured stderr): a check that regresses into a hang (a training that never
# stops) fails the run, its test named by pytest-xdist, instead of hanging it. The slowest test took 27 s
# on 2 idle cores (`python -m pytest -q -m slow --durations=5`, 2026-12-03).
TEST_TIMEOUT_S = float(os.environ.get("TINYGPT_TEST_TIMEOUT") or 900)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A test marked `within(seconds)` (one of a limit on what a small file may expand to) ends its process after
    that many seconds of its own (its fixtures' setup not counted): a limit check that regresses (a YAML alias
    cycle no longer refused took 11 GB) fails in seconds, instead of taking the machine's memory for minutes."""
    mark = item.get_closest_marker("within")
    if mark is not None:
        faulthandler.dump_traceback_later(min(mark.args[0], TEST_TIMEOUT_S), exit=True)
    try:
        yield
    finally:
        if mark is not None:  # (its teardown: the whole test's limit again)
            faulthandler.dump_traceback_later(TEST_TIMEOUT_S, exit=True)


def pytest_collection_modifyitems(config, items) -> None:
    """`python -m pytest` with no paths, -m, -k or --lf leaves out the tests marked slow (pyproject.toml),
    so that the everyday run takes minutes; `-m slow` runs them, and naming tests (a file, a test, the
    tests folder, -k EXPR, --lf: the last run's failures) runs what it names, whatever its mark."""
    o = config.option
    marks_given = o.markexpr or "-m" in config.invocation_params.args  # (-m "": every test, as pytest reads it)
    if marks_given or o.keyword or getattr(o, "lf", False) or config.args_source is pytest.Config.ArgsSource.ARGS:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def fake_cores(monkeypatch, cpus: set[int]) -> None:
    """Make this process see exactly the CPUs `cpus`, one core each (no SMT) and no container CPU
    quota, whatever machine runs the test (tinygpt.runtime.usable_cores)."""
    from tinygpt import runtime
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(cpus), raising=False)
    monkeypatch.setattr(runtime, "physical_cores", lambda cpus, sysfs=None: len(cpus))
    monkeypatch.setattr(runtime, "cpu_quota", lambda dirs=None: None)


def only_small_models(monkeypatch, module, block_size: int) -> list[str]:
    """module.GPT, refusing to build a real (not meta) model of `block_size`: the devices it built on."""
    built = []

    def gpt(cfg):
        device = torch.get_default_device().type
        built.append(device)
        if device != "meta" and cfg.block_size == block_size:
            raise AssertionError(f"a model of block_size {block_size} was built for real before its weights were read")
        from model import GPT
        return GPT(cfg)
    monkeypatch.setattr(module, "GPT", gpt)
    return built


def capture_figures(monkeypatch) -> dict[str, object]:
    """File name -> the matplotlib Figure each plot of tinygpt/plots.py drew last."""
    from tinygpt import plots
    figures = {}
    real = plots._png

    def png(fig, name):
        figures[name] = fig
        return real(fig, name)
    monkeypatch.setattr(plots, "_png", png)
    return figures


def skip_unless_holes(path: Path) -> None:
    """Skip unless `path` (a file extended past its written bytes) holds a hole on disk: some file systems
    store none. Asked of the OS directly, so a skip never hides a failure of the code under test."""
    with open(path, "rb") as f:
        if not hasattr(os, "SEEK_HOLE") or os.lseek(f.fileno(), 0, os.SEEK_HOLE) == path.stat().st_size:
            pytest.skip("this file system stores no holes")


def r50k_cache(folder: Path) -> Path:
    """A tiktoken cache folder holding GPT-2's ranks (SHARED_DATA/r50k_base.tiktoken) under the sha1
    of their URL, for TIKTOKEN_CACHE_DIR: the r50k_base and gpt2 encodings offline. Skips without it."""
    source = SHARED_DATA / "r50k_base.tiktoken"
    if not source.is_file():
        pytest.skip(f"no offline copy of the GPT-2 ranks ({source})")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, folder / hashlib.sha1(R50K_URL.encode()).hexdigest())
    return folder


@pytest.fixture
def tiny_model_config():
    """The style guide's tiny model: fast enough for every test."""
    from model import ModelConfig
    return ModelConfig(block_size=16, n_layer=2, n_head=4, n_embd=32, vocab_size=37)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one thread is faster than two fighting over a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY_STORIES = {"n_layer": 2, "n_head": 2, "block_size": 64}


@pytest.fixture(scope="session")
def tiny_stories_run(tmp_path_factory) -> Path:
    """A tiny char-level model trained for a few steps on a shrunk stories corpus (in-process),
    shared by the tests that need a trained run directory."""
    import train
    tmp = tmp_path_factory.mktemp("stories_run")
    m = TINY_STORIES
    train.main([str(ROOT / "configs/stories.yaml"), "--quiet", "--set", "data.stories_chars=20000",
                "data.tokenizer=char",  # char-level: the tests' prompts need not be corpus words
                f"data.prepared_dir={tmp / 'prepared'}", f"train.out_dir={tmp / 'run'}",
                f"model.n_layer={m['n_layer']}", "model.n_embd=32", f"model.n_head={m['n_head']}",
                f"model.block_size={m['block_size']}", "train.max_iters=30", "train.eval_interval=15",
                "train.eval_iters=2", "train.batch_size=8", "train.device=cpu"])
    return tmp / "run"

"""Shared test fixtures: tiny configs, one shared trained run, and the shared data folder. The
repository root is importable through pyproject.toml's pytest `pythonpath`."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


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

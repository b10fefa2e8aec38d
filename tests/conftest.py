"""Shared test fixtures: the repo root on sys.path, tiny configs, and the shared data folder."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


@pytest.fixture
def tiny_model_config():
    """The style guide's tiny model: fast enough for every test."""
    from config import ModelConfig
    return ModelConfig(block_size=16, n_layer=2, n_head=4, n_embd=32, vocab_size=37)

"""Checkpoint I/O and atomic writes: the one place files are written safely and checkpoints read.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts, so it loads with
`torch.load(..., weights_only=True)`: a file that carries pickled Python objects is refused, never
run. Every write in tinygpt goes through `atomic_write` (or `atomic_dir` for a whole folder): a
temp file in the same folder, fsync, then rename over the target, so a crash or a kill at any
moment leaves either the old file or the new one, never half of one.
"""
from __future__ import annotations

import os
import pickle
import random
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np
import torch

from model import GPT
from tinygpt.config import Config, config_from_dict
from tinygpt.errors import UserError
from tinygpt.tokenizer import Tokenizer, tokenizer_from_dict

FORMAT = "tinygpt-checkpoint"
HF_GPT2_NAME = re.compile(r"^(openai-community/)?(distil)?gpt2(-medium|-large|-xl)?$")  # model names on the Hub
VERSION = 2  # 2: the config records model.vocab_size
REQUIRED = ("config", "tokenizer", "model", "step")


# ---- atomic writes ----


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Write `path` via write(fileobj) into a temp file beside it, fsync, then rename over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed mid-write
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; give what a plain open() would
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)  # make the rename itself durable


def fsync_dir(folder: Path) -> None:
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextmanager
def atomic_dir(path: str | Path, keep_existing: Callable[[Path], bool] = lambda p: False) -> Iterator[Path]:
    """Build the folder `path` inside a temp folder beside it (yielded); on success fsync its files
    and rename it into place, so readers see the old folder or the whole new one. If meanwhile
    another process put a folder there that keep_existing(path) accepts, that one stays and ours
    is dropped; an outdated one is replaced. On an error the temp folder is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes 0700; give what a plain mkdir would
        yield tmp
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if path.exists():
            if keep_existing(path):
                shutil.rmtree(tmp, ignore_errors=True)
                return
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def current_umask() -> int:
    """The process umask (reading it means setting it, so set it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Atomically save a checkpoint dict (see REQUIRED) with its format tag and version."""
    atomic_write(path, lambda f: torch.save({"format": FORMAT, "version": VERSION, **state}, f))


# ---- loading ----


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and check a checkpoint; every failure is a one-line UserError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Unsupported global" in str(e):  # a class or function reference: code could run
            raise UserError(f"{path} holds pickled Python objects, which weights_only loading refuses "
                            f"(they could run code); it was not loaded") from None
        raise UserError(f"{path} is truncated, corrupted or not a checkpoint") from None
    except Exception as e:  # torch reports damaged files with many exception types
        raise UserError(f"{path} is truncated, corrupted or not a checkpoint ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise UserError(f"{path} is not a tinygpt checkpoint")
    if ckpt.get("version") != VERSION:
        raise UserError(f"{path} is checkpoint version {ckpt.get('version')!r}; this tinygpt reads "
                        f"version {VERSION}: retrain, or use the tinygpt that wrote it")
    missing = [k for k in REQUIRED if k not in ckpt]
    if missing:
        raise UserError(f"{path} is incomplete: missing {', '.join(missing)}")
    return ckpt


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory -> its best.pt if present, else ckpt.pt; a file -> itself."""
    path = Path(path)
    if path.is_dir():
        for name in ("best.pt", "ckpt.pt"):
            if (path / name).is_file():
                return path / name
        raise UserError(f"no checkpoint in {path} (expected best.pt or ckpt.pt): train first, "
                        f"e.g. python train.py configs/stories.yaml")
    if not path.exists():
        hint = ""
        if HF_GPT2_NAME.match(str(path)):  # e.g. train.init_from=gpt2: tinygpt downloads nothing
            hint = (f"; {path} names a Hugging Face GPT-2: download its folder (config.json, model.safetensors), "
                    f"e.g. huggingface-cli download {path} --local-dir DIR, bring it in with "
                    f"python export.py --from-hf DIR out/{path.name}, then use out/{path.name}")
        raise UserError(f"run directory or checkpoint not found: {path}{hint}")
    return path


def model_from_checkpoint(ckpt: dict[str, Any], path: str | Path) -> tuple[GPT, Config]:
    """A loaded checkpoint -> (model with its weights, Config). The tokenizer itself is not built
    (a tiktoken encoding may be offline), only checked to have the model's vocabulary size."""
    cfg = config_from_dict(ckpt["config"], str(path))
    tok = ckpt["tokenizer"]
    tok_size = tok.get("vocab_size") if isinstance(tok, dict) else None
    if cfg.model.vocab_size <= 0 or tok_size != cfg.model.vocab_size:
        raise UserError(f"{path}: model.vocab_size={cfg.model.vocab_size} does not match its tokenizer's "
                        f"{tok_size!r}; the checkpoint is damaged")
    model = GPT(cfg.model)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise UserError(f"{path}: weights do not fit its config ({_first_line(e)})") from None
    return model, cfg


def load_model(path: str | Path, device: str | torch.device = "cpu", with_tokenizer: bool = True
               ) -> tuple[GPT, Config, Tokenizer | None, dict[str, Any]]:
    """Run directory or checkpoint -> (model in eval mode, Config, Tokenizer, checkpoint dict).
    with_tokenizer=False skips building the tokenizer (None): a tiktoken encoding may be offline,
    and an export does not need it."""
    path = resolve_checkpoint(path)
    ckpt = load_checkpoint(path, map_location=device)
    model, cfg = model_from_checkpoint(ckpt, path)
    tokenizer = tokenizer_from_dict(ckpt["tokenizer"]) if with_tokenizer else None
    return model.to(device).eval(), cfg, tokenizer, ckpt


# ---- random-number state (so that a resumed run continues exactly) ----


def capture_rng_state() -> dict[str, Any]:
    """The python, numpy, torch (and cuda) RNG states as checkpoint-safe data."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])

"""data/prepare.py: a source file that changes while it is prepared, a dataset that is not a file."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from data import prepare as prep
from tinygpt.config import load_config
from tinygpt.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def config(dataset, prepared):
    return load_config(ROOT / "configs/stories.yaml", [f"data.dataset={dataset}", "data.tokenizer=char",
                                                       f"data.prepared_dir={prepared}"])


def test_a_file_changed_while_it_is_prepared_is_refused_and_leaves_no_folder(tmp_path, monkeypatch):
    # meta.json recorded the file's new size and mtime beside the tokens of its old text, so the
    # stale folder was reused by the next preparation
    text = tmp_path / "corpus.txt"
    text.write_text("the cat sat on the mat\n" * 200)
    encode = prep._encode

    def encode_then_change(*args, **kwargs):  # the file is cut to half after it was read
        text.write_text("the cat sat on the mat\n" * 100)
        return encode(*args, **kwargs)

    monkeypatch.setattr(prep, "_encode", encode_then_change)
    cfg = config(text, tmp_path / "prepared")
    with pytest.raises(UserError, match=f"{text}.* changed while it was being prepared; run again"):
        prep.prepare(cfg, show_progress=False)
    assert list((tmp_path / "prepared").iterdir()) == []  # not even the temp folder
    monkeypatch.setattr(prep, "_encode", encode)
    data = prep.load_prepared(prep.prepare(cfg, show_progress=False))  # run again: the new text
    assert data.meta["chars"] == len(text.read_text()) == 2300


def test_a_file_added_to_a_folder_dataset_while_it_is_prepared_is_named(tmp_path, monkeypatch):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a.txt").write_text("one story\n" * 50)
    encode = prep._encode

    def encode_then_add(*args, **kwargs):
        (tmp_path / "books" / "b.txt").write_text("another\n")
        return encode(*args, **kwargs)

    monkeypatch.setattr(prep, "_encode", encode_then_add)
    with pytest.raises(UserError, match="b.txt changed while it was being prepared"):
        prep.prepare(config(tmp_path / "books", tmp_path / "prepared"), show_progress=False)


@pytest.mark.skipif(sys.platform == "win32", reason="no FIFOs")
def test_a_fifo_or_a_device_as_dataset_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.txt")
    for path in (tmp_path / "fifo.txt", "/dev/null"):
        with pytest.raises(UserError, match="is not a regular file"):
            prep.source_files(str(path))
    with pytest.raises(UserError, match="neither stories nor shakespeare"):  # a missing file still says so
        prep.source_files(str(tmp_path / "missing.txt"))

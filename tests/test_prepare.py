"""data/prepare.py: a source file that changes while it is prepared, a dataset that is not a file."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

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
    assert not (tmp_path / "prepared").exists()  # not even the temp folder, nor the empty folder made for it
    monkeypatch.setattr(prep, "_encode", encode)
    data = prep.load_prepared(prep.prepare(cfg, show_progress=False))  # run again: the new text
    assert data.meta["chars"] == len(text.read_text()) == 2300


def test_a_preparation_another_process_finished_first_is_kept(tmp_path, monkeypatch):
    """Two processes preparing the same data at once: whichever renames its folder in first stays, and the other
    drops its own (replacing it always passed every test)."""
    text = tmp_path / "corpus.txt"
    text.write_text("the cat sat on the mat\n" * 200)
    cfg = config(text, tmp_path / "prepared")
    out = prep.prepare(cfg, show_progress=False)
    shutil.copytree(out, tmp_path / "theirs")
    shutil.rmtree(out)
    check, theirs = prep._check_unchanged, []

    def the_other_finishes_first(*args, **kwargs):  # (ours is written, not yet renamed into place)
        shutil.copytree(tmp_path / "theirs", out)
        theirs.append(os.stat(out / "meta.json").st_ino)
        return check(*args, **kwargs)
    monkeypatch.setattr(prep, "_check_unchanged", the_other_finishes_first)
    assert prep.prepare(cfg, show_progress=False) == out
    assert os.stat(out / "meta.json").st_ino == theirs[0]  # theirs stayed
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # and ours is gone, temp folder and all


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
    for path, kind in ((tmp_path / "fifo.txt", "a pipe"), ("/dev/null", "a device")):
        with pytest.raises(UserError, match=f"is {kind}, not a regular file; give a .txt file"):
            prep.source_files(str(path))
    with pytest.raises(UserError, match="neither stories nor shakespeare"):  # a missing file still says so
        prep.source_files(str(tmp_path / "missing.txt"))


def test_a_prepared_dir_inside_the_dataset_folder_is_not_read_as_its_text(tmp_path, capsys):
    """data.dataset=data with data.prepared_dir=data/prepared (the defaults' folder): tiny shakespeare's
    download there was read as part of the dataset (1,000 characters given, 1.1 M tokens trained on), and
    the prepared files were named as text left out."""
    data = tmp_path / "data"
    (data / "prepared" / "downloads").mkdir(parents=True)
    (data / "prepared" / "downloads" / "tinyshakespeare.txt").write_text("ROMEO: not mine\n" * 100)
    (data / "mybook.txt").write_text("my own words, and only these\n" * 20)
    folder = prep.prepare(config(data, data / "prepared"), show_progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["train_tokens"] + meta["val_tokens"] == len("my own words, and only these\n" * 20)
    assert "prepared" not in capsys.readouterr().out  # (nor named as text left out)
    assert prep.source_files(str(data), prepared=data / "prepared") == [data / "mybook.txt"]


def test_the_users_text_in_a_prepared_dir_inside_the_dataset_folder_is_read(tmp_path):
    """Only what preparing writes there is skipped: data.prepared_dir=books/sub left books/sub/*.txt (93% of the
    text) out without a word."""
    books = tmp_path / "books"
    (books / "sub" / "deeper").mkdir(parents=True)
    (books / "a.txt").write_text("first file text\n" * 20)
    (books / "sub" / "b.txt").write_text("second file text more\n" * 200)
    (books / "sub" / "deeper" / "c.txt").write_text("third\n")
    for _ in range(2):  # the second time, the prepared folder and its files lie in books/sub
        folder = prep.prepare(config(books, books / "sub"), show_progress=False)
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["train_tokens"] + meta["val_tokens"] == 20 * 16 + 200 * 22 + 6 + 2 * 2  # 2 joins of "\n\n"
    (books / "sub" / "downloads").mkdir()
    (books / "sub" / "downloads" / "input.txt").write_text("ROMEO\n")
    # a folder of the user's named like a prepared one (<source>-<tokenizer>-<10 hex digits>) was left out unsaid:
    (books / "sub" / "log-run-2024061512").mkdir()  # a prepared folder holds a meta.json
    (books / "sub" / "log-run-2024061512" / "d.txt").write_text("fourth\n")
    assert [p.relative_to(books).as_posix() for p in prep.source_files(str(books), prepared=books / "sub")] == \
        ["a.txt", "sub/b.txt", "sub/deeper/c.txt", "sub/log-run-2024061512/d.txt"]


def test_a_sparse_dataset_file_is_refused_unread(tmp_path):
    """A 1 GB file of holes (4 KB on disk) was read whole for 10 s to be refused as zeros; 20 GB of them were
    refused as needing 340 GB of memory. As a file or in a folder: named at once, before the memory check."""
    (tmp_path / "books").mkdir()
    sparse = tmp_path / "books" / "holes.txt"
    with open(sparse, "wb") as f:
        f.truncate(20 << 30)
    if sparse.stat().st_blocks * 512 >= sparse.stat().st_size // 2:
        pytest.skip("this file system keeps no holes")
    for dataset in (sparse, tmp_path / "books"):
        with pytest.raises(UserError, match=r"holes.txt is no text: most of its 21,474,836,480 bytes were never "
                                            r"written \(a sparse file"):
            prep.prepare(config(dataset, tmp_path / "prepared"), show_progress=False)
    assert not (tmp_path / "prepared").exists()


def test_a_folder_nested_a_thousand_deep_is_read(tmp_path):
    """Path.rglob recursed once per level: ~990 levels deep was a RecursionError traceback."""
    deep = bottom = tmp_path / "books"
    deep.mkdir()
    for _ in range(1200):  # (os.makedirs recurses too)
        bottom = bottom / "a"
        bottom.mkdir()
    (bottom / "x.txt").write_text("deep down\n")
    (deep / "top.txt").write_text("at the top\n")
    try:
        assert [p.name for p in prep.source_files(str(deep))] == ["x.txt", "top.txt"]  # sorted by path
    finally:  # bottom up: pytest's own clean-up (shutil.rmtree) recurses as deep as the tree
        (bottom / "x.txt").unlink()
        while bottom != deep:
            bottom.rmdir()
            bottom = bottom.parent


@pytest.mark.skipif(sys.platform == "win32", reason="no FIFOs")
def test_what_a_folder_dataset_cannot_read_is_refused_not_left_out(tmp_path, monkeypatch):
    """A .txt that is a pipe or a link to nothing, or a subfolder that cannot be read, was skipped
    without a word: the run trained on part of the data. A link to a folder is not followed (a loop would never
    end), and is refused: skipped, the text in the folder it links was left out without a word."""
    books = tmp_path / "books"
    (books / "sub").mkdir(parents=True)
    (books / "a.txt").write_text("one\n")
    (books / "sub" / "b.txt").write_text("two\n")
    assert [p.name for p in prep.source_files(str(books))] == ["a.txt", "b.txt"]
    (books / "more").symlink_to(tmp_path)  # a loop, were it followed
    with pytest.raises(UserError, match=r"more is a link to a folder, which is not followed \(a loop would never "
                                        r"end\): move or copy the folder in, or link its .txt files$"):
        prep.source_files(str(books))
    (books / "more").unlink()
    (books / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(UserError, match=r"gone.txt is a link \(.*\) that leads to no file"):
        prep.source_files(str(books))
    (books / "gone.txt").unlink()
    os.mkfifo(books / "sub" / "fifo.txt")
    with pytest.raises(UserError, match="fifo.txt is a pipe, not a regular file"):
        prep.source_files(str(books))
    (books / "sub" / "fifo.txt").unlink()
    (books / "sub" / "c.txt").symlink_to(books / "sub")
    with pytest.raises(UserError, match="c.txt is a link to a folder, which is not followed"):
        prep.source_files(str(books))
    (books / "sub" / "c.txt").unlink()
    scandir = os.scandir

    def unreadable_sub(path):  # mode 000, as root cannot see it (root reads any folder)
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)
    monkeypatch.setattr(os, "scandir", unreadable_sub)
    with pytest.raises(UserError, match="cannot read the folder .*sub: Permission denied"):
        prep.source_files(str(books))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_utf16_text_is_refused_with_the_conversion_that_works(tmp_path, encoding):
    """UTF-16 without a byte order mark is valid UTF-8 (Latin letters and NULs): it trained on text
    of which every other character was NUL; with a mark it was refused with a hint to convert from
    latin1, which gave that same text. Only a mark makes the encoding certain enough to convert
    the file in place; without one the byte order is named, and the hint writes a new file."""
    path = tmp_path / "u16.txt"
    path.write_bytes("the cat sat on the mat\n".encode(encoding) * 50)
    wide = {"utf-16": "utf-16", "utf-16-le": "utf-16le", "utf-32": "utf-32"}[encoding]  # (Python's utf-32: a mark)
    d = re.escape(str(tmp_path))  # the commands name the file as given: they work from any folder
    in_place = rf"{d}/u16.txt.utf8.tmp && mv {d}/u16.txt.utf8.tmp {d}/u16.txt$" if encoding != "utf-16-le" else \
        rf"{d}/u16.utf8.txt \(utf-16le is a guess"
    with pytest.raises(UserError, match=rf"looks like {wide.upper()} text, not UTF-8.* iconv -f {wide} -t utf-8 "
                                        rf"{d}/u16.txt > {in_place}"):
        prep.read_text_file(path)
    path.write_bytes(b"caf\xe9\n")  # Latin-1
    with pytest.raises(UserError, match=r"is not UTF-8 \(byte 0xe9 at offset 3, line 1\).* iconv -f latin1"):
        prep.read_text_file(path)
    path.write_bytes(b"a few NULs\x00 in text\x00 are text\n")
    assert prep.read_text_file(path).count("\x00") == 2


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_of_a_script_without_zero_bytes_is_refused(tmp_path, encoding):
    """UTF-16 without a byte order mark of Cyrillic (Greek, Hindi) text is valid UTF-8 too, with
    only its spaces' and newlines' bytes 0 (10%, under the quarter that made a file binary): it
    trained on a vocabulary of NULs and control characters."""
    path = tmp_path / "ru.txt"
    path.write_bytes("Мой дядя самых честных правил, когда не в шутку занемог\n".encode(encoding) * 50)
    wide = encoding.replace("-", "").replace("utf16", "utf-16").upper()
    with pytest.raises(UserError, match=rf"looks like {wide} text, not UTF-8 \(550 of its 5,600 bytes are 0\)"):
        prep.read_text_file(path)
    path.write_bytes(("the cat sat on the mat\n" * 50).replace("a", "\x00").encode())  # NULs at both parities
    assert prep.read_text_file(path).count("\x00") == 150


def test_a_binary_file_is_refused_as_binary_and_a_guessed_encoding_is_not_converted_in_place(tmp_path):
    """An executable was called UTF-16 text (convert it with iconv -f utf-16, in place); a gzip file
    Latin-1 (convert it in place: the compressed file overwritten with mojibake, which then trained
    silently); UTF-16LE Chinese text without a byte order mark got the Latin-1 hint too."""
    import gzip
    import random
    path, d = tmp_path / "x.txt", re.escape(str(tmp_path))
    binaries = {"an executable": b"\x7fELF\x02\x01\x01" + bytes(1000),  # (how cp /bin/ls x.txt begins)
                "gzip data": gzip.compress(b"the cat sat on the mat\n" * 100),
                "a PNG image": b"\x89PNG\r\n\x1a\n" + bytes(100)}
    for kind, data in binaries.items():
        path.write_bytes(data)
        with pytest.raises(UserError, match=rf"^{re.escape(str(path))} is a binary file \({kind}\?\), not "
                                            r"text; data.dataset takes UTF-8 text files$"):
            prep.read_text_file(path)
    path.write_bytes(random.Random(0).randbytes(10_000))  # no known kind: its control bytes tell
    with pytest.raises(UserError, match=r"is a binary file, not text \(1,0\d\d of its first 10,000 bytes are control"):
        prep.read_text_file(path)
    path.write_bytes("从前有一只小猫，它住在一个大房子里。\n".encode("utf-16-le") * 20)
    with pytest.raises(UserError, match=r"looks like UTF-16LE text, not UTF-8 \(byte 0xce at offset 0 is not "
                                        r"UTF-8\); convert it into a new file, e.g. iconv -f utf-16le -t utf-8 "
                                        rf"{d}/x.txt > {d}/x.utf8.txt \(utf-16le is a guess: look at the new file, then use "
                                        r"it instead\)$"):
        prep.read_text_file(path)
    path.write_bytes("Le garçon était très content à la fête.\n".encode("latin-1") * 20)
    with pytest.raises(UserError, match=r"is not UTF-8 \(byte 0xe7 at offset 6, line 1\); convert it into a new "
                                        rf"file, e.g. iconv -f latin1 -t utf-8 {d}/x.txt > {d}/x.utf8.txt \(latin1 is "
                                        r"a guess: .*\)$"):
        prep.read_text_file(path)


def test_utf8_with_a_stray_byte_is_not_called_latin1_and_the_commands_work_from_anywhere(tmp_path):
    """A UTF-8 file with one cp1252 byte inside was called latin1, with an iconv command that turned
    every other é into Ã© (and named the file without its folder: from anywhere else it failed, and
    the shell left an empty file). Now the bad bytes are counted and located, and the command drops
    them; it is run here from another folder, as a user pastes it."""
    import shutil
    import subprocess
    folder = tmp_path / "my corpus"
    folder.mkdir()
    path = folder / "thé.txt"
    path.write_bytes("le thé est chaud\n".encode() * 3 + b"it\x92s late\n" + "café\n".encode() + b"\x93hi\n")
    with pytest.raises(UserError) as refused:
        prep.read_text_file(path)
    message = str(refused.value)
    assert re.match(rf"^{re.escape(str(path))} is UTF-8 text but for 2 bytes that are not \(the first: byte 0x92 "
                    r"at offset 56, line 4\); mend them, or write a copy without them: iconv -c ", message), message
    assert "latin1" not in message.split("(converting")[0]
    if shutil.which("iconv") is None:  # (it returned here, and passed: the command was read, not run)
        pytest.skip("no iconv: the pasted command was read, not run")
    command = message.split(": ", 2)[2].split(" (converting")[0]  # the iconv command, pasted
    subprocess.run(command, shell=True, cwd=tmp_path.parent)
    copy = folder / "thé.utf8.txt"
    assert prep.read_text_file(copy) == "le thé est chaud\n" * 3 + "its late\ncafé\nhi\n"


def test_a_long_file_name_gets_a_prepared_folder_within_name_max(tmp_path):
    """A 251-character stem (a legal name) made a prepared folder name, with its temp suffix, past
    255 bytes: `File name too long`, an empty data.prepared_dir left behind."""
    text = tmp_path / ("é" * 120 + ".txt")  # 240 bytes
    text.write_text("the cat sat on the mat\n" * 20)
    folder = prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    assert folder.name.startswith("é" * 32 + "-char-") and len(os.fsencode(folder.name)) < 100


@pytest.mark.parametrize("chars, block, fixes", [
    (1, 8, "more text$"),  # one character: no block size, no split works
    (40, 8, "a model.block_size below 4, more text or another data.val_fraction$"),  # val: 4 tokens of 40
    (40, 30, "a model.block_size below 4 or more text$"),  # 40 tokens cannot hold two blocks of 31
    (400, 64, "a model.block_size below 40, more text or another data.val_fraction$"),
    (400, 380, "a model.block_size below 40 or more text$"),  # the train split's 360 fails first: the val split's 40
    (40, 4, "a model.block_size below 4, more text or another data.val_fraction$"),  # val: exactly block_size
    (22, 10, "a model.block_size below 2, more text or another data.val_fraction$"),  # 22 = two blocks of 11 exactly
])
def test_a_corpus_too_short_for_the_block_is_told_only_the_fixes_that_work(tmp_path, chars, block, fixes):
    """A one-character corpus was told 'use a smaller block_size, more text, or another
    data.val_fraction', of which only more text could help."""
    text = tmp_path / "short.txt"
    text.write_text(("abcdefghi\n" * 40)[:chars])
    cfg = config(text, tmp_path / "prepared")
    cfg.model.block_size = block
    prep.prepare(cfg, show_progress=False)
    with pytest.raises(UserError, match=rf"split has \d+ tokens?, not more than model.block_size={block} \(x\): "
                                        rf"use {fixes}"):
        prep.load_for_training(cfg, "x")


def test_python_m_data_prepare_says_when_the_data_is_too_short_for_the_configs_model(tmp_path, capsys):
    """`python -m data.prepare` of a one-character file (or a data.val_fraction that leaves the val
    split empty) said `1 train + 0 val tokens`, exit 0: train.py then refused it. Now a note says so."""
    text = tmp_path / "one.txt"
    text.write_text("x")
    argv = [str(ROOT / "configs/stories.yaml"), "--set", f"data.dataset={text}", "data.tokenizer=char",
            f"data.prepared_dir={tmp_path / 'prepared'}"]
    prep.main(argv)
    config = ROOT / "configs/stories.yaml"
    assert capsys.readouterr().err == (f"note: train.py will refuse this config on this data: the train split has 1 "
                                       f"token, not more than model.block_size=128 ({config} with --set): use more "
                                       f"text\n")
    text.write_text("the cat sat on the mat\n" * 100)
    prep.main([*argv, "model.block_size=8"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("text, encoding", [("你好世界，这是一个测试。\n", "gb18030"), ("こんにちは世界、テストです。\n", "shift_jis"),
                                            ("안녕하세요 세계, 테스트입니다.\n", "euc-kr")])
def test_chinese_japanese_or_korean_text_is_not_told_to_convert_from_latin1(tmp_path, text, encoding):
    """A GB18030 (Shift-JIS, EUC-KR) file was told `iconv -f latin1 ...`, which turns every character
    into two of mojibake. Now the double-byte encodings it reads in are named, its own among them."""
    path = tmp_path / "cjk.txt"
    path.write_bytes(text.encode(encoding) * 20)
    with pytest.raises(UserError, match=r"^\S+cjk.txt is not UTF-8 \(byte 0x[0-9a-f]{2} at offset 0, line 1\); it "
                                        r"reads as text in [a-z0-9_, -]+ \(Chinese, Japanese or Korean encodings") \
            as refused:
        prep.read_text_file(path)
    assert encoding in str(refused.value) and "latin1" not in str(refused.value)


def test_utf8_with_a_few_curly_quotes_is_not_called_chinese_nor_converted_unwarned(tmp_path):
    """English UTF-8 with one é and two of Windows' apostrophes (0x92, fewer UTF-8 characters than stray
    bytes) was told `it reads as text in gb18030, shift_jis`: iconv -f gb18030 wrote `caf茅` and `don抰`.
    Each stray byte and the letter after it read as one CJK character alone; a CJK text's are side by side.
    Now the 8-bit guess, with a note that it would garble the UTF-8 characters the file also holds."""
    path = tmp_path / "mixed.txt"
    path.write_bytes("A café scene.\n".encode() + b"I don\x92t know, it\x92s late.\n" + b"the cat sat\n" * 500)
    with pytest.raises(UserError) as refused:
        prep.read_text_file(path)
    message = str(refused.value)
    assert "Chinese" not in message and "gb18030" not in message and "iconv -f cp1252" in message, message
    assert message.startswith(f"{path} is not UTF-8 (byte 0x92 at offset 20, line 2), though some of its characters "
                              f"read as UTF-8 (the first: 'é', line 1; if those are right, mend its 2 stray bytes by "
                              f"hand instead: converting garbles them); convert it into a new file"), message


def test_a_file_cut_inside_a_utf8_character_is_told_so(tmp_path):
    """A UTF-8 file cut short in the middle of a character (head -c, a killed copy), with one é: told it
    reads as gb18030 (without the é: cp1252), whose conversion garbles the é."""
    path = tmp_path / "cut.txt"
    data = "A café scene.\n".encode() + b"the cat sat\n" * 500 + "it’s".encode()[:4]  # ’ is 3 bytes: 2 left
    path.write_bytes(data)
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))} ends inside a UTF-8 character \(its last 2 bytes "
                                        rf"begin one: a file cut short\?\); write a copy without them: head -c "
                                        rf"{len(data) - 2} "):
        prep.read_text_file(path)
    # latin1 ending in `café`, no line end: its é alone is a UTF-8 lead byte, and no UTF-8 character before it
    path.write_bytes(b"the cat sat on the mat\nmy favourite place is a caf\xe9")
    with pytest.raises(UserError, match=r"is not UTF-8 \(byte 0xe9 at offset 50, line 2\); convert it into a new "
                                        r"file, e.g. iconv -f latin1 "):
        prep.read_text_file(path)


def test_8bit_text_with_a_chance_utf8_character_is_still_8bit_and_a_dash_name_is_pasted_safely(tmp_path, monkeypatch):
    """cp1252 French where 'É' and a no-break space (C9 A0) happen to read as one UTF-8 character was
    called UTF-8 with 390 stray bytes, and the command given dropped every accent; its curly quote
    (0x92) makes it cp1252, not latin1. A file named `-ofoo.txt` was written into the command as
    `iconv ... -ofoo.txt`, which iconv reads as `-o foo.txt`: another file overwritten."""
    monkeypatch.chdir(tmp_path)
    path = Path("french.txt")
    path.write_bytes("Il a dit: C’est l'ÉTÉ\xa0! Déjà très élégant.\n".encode("cp1252") * 30)
    # (the chance character is named, 'ɠ', which a reader of French tells from theirs)
    with pytest.raises(UserError, match=r"^french.txt is not UTF-8 \(byte 0x92 at offset 11, line 1\), though some of "
                                        r"its characters read as UTF-8 \(the first: 'ɠ', line 1; .*\); convert it "
                                        r"into a new file, e.g. iconv -f cp1252 -t utf-8 french.txt > french.utf8.txt"):
        prep.read_text_file(path)
    path = Path("-ofoo.txt")
    path.write_bytes(b"caf\xe9\n")
    with pytest.raises(UserError, match=r"iconv -f latin1 -t utf-8 ./-ofoo.txt > ./-ofoo.utf8.txt \(latin1"):
        prep.read_text_file(path)


def pasted_command(message: str) -> str:
    """The iconv command of a refusal, as the user pastes it (without the note in brackets after it)."""
    command = message[message.index("iconv "):]
    return command.rsplit(" (", 1)[0] if command.endswith(")") else command


def run_pasted(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)


CAN_RUN = shutil.which("iconv") is not None and shutil.which("bash") is not None  # to run a pasted command


@pytest.mark.parametrize("name", ["data.tmp", "data.txt.utf8.tmp", "-o it's \"my\" data.tmp"])
def test_a_pasted_conversion_never_writes_into_the_file_it_reads(tmp_path, monkeypatch, name):
    """The in-place conversion of UTF-16 text named its temp file after the source's stem: for data.tmp
    `iconv -f utf-16 -t utf-8 data.tmp > data.tmp && mv data.tmp data.tmp`, which emptied the user's
    only copy before iconv read it. No command (in place, or into a new file) now writes into its
    source, whatever the name; each, pasted, converts the file."""
    monkeypatch.chdir(tmp_path)
    path, text = Path(name), "héllo, wörld\n" * 20
    kinds = (("utf-16 in place", text.encode("utf-16"), text),  # a byte order mark: converted in place
             ("utf-16le guessed", text.encode("utf-16-le"), text),  # none: into a new file
             ("utf-8 with a stray byte", text.encode() + b"\x92\n", text + "\n"))  # copied without it
    for kind, data, converted in kinds:
        path.write_bytes(data)
        with pytest.raises(UserError) as refused:
            prep.read_text_file(path)
        command = pasted_command(str(refused.value))
        words = shlex.split(command)
        source, target = words[words.index(">") - 1], words[words.index(">") + 1]
        assert Path(source) == path and target.casefold() != source.casefold(), (kind, command)
        if not CAN_RUN:
            continue
        done = run_pasted(command)  # (iconv -c exits 1 after dropping a byte in newer glibc)
        assert done.returncode == 0 or "stray" in kind, (kind, command, done.stderr)
        if kind.endswith("in place"):
            assert prep.read_text_file(path) == converted and os.listdir() == [name], (kind, command)
        else:
            assert path.read_bytes() == data and prep.read_text_file(Path(target)) == converted, (kind, command)
    if not CAN_RUN:
        pytest.skip("no iconv or bash: the commands were read, not run")


def test_latin1_text_with_a_few_utf8_letters_gets_a_conversion_that_works(tmp_path):
    """Latin-1 French with one real UTF-8 word (ÁFRICA: Á is C3 81) was told `iconv -f cp1252`: the 0x81
    inside Á was taken for one of Windows' quotes, yet cp1252 has no character for it, and the pasted
    command stopped there (`illegal input sequence`), half the file converted. Now latin1, which
    converts every byte: the French right, the UTF-8 word garbled, as any one encoding must."""
    path = tmp_path / "mixed.txt"
    data = ("Le garçon était très fâché.\n" * 50).encode("latin-1") + "ÁFRICA\n".encode()
    path.write_bytes(data)
    with pytest.raises(UserError, match=r"is not UTF-8 \(byte 0xe7 at offset 6, line 1\), though some of its "
                                        r"characters read as UTF-8 \(the first: 'Á', line 51; .*\); convert it into a "
                                        r"new file, e.g. iconv -f latin1 -t utf-8 .*mixed.txt > .*mixed.utf8.txt "
                                        r"\(latin1"
                       ) as refused:
        prep.read_text_file(path)
    if not CAN_RUN:
        pytest.skip("no iconv or bash to run the pasted command with")
    done = run_pasted(pasted_command(str(refused.value)))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "mixed.utf8.txt").read_bytes().decode() == data.decode("latin-1")
    assert path.read_bytes() == data


def test_the_8bit_guess_is_cp1252_only_for_stray_windows_bytes_it_can_convert(tmp_path):
    """cp1252 was guessed from any byte 0x80-0x9f: one inside a UTF-8 character too (Á is C3 81, ‘ is
    E2 80 98), and one that cp1252 leaves undefined (0x81, 0x8d, 0x8f, 0x90, 0x9d), where iconv stops.
    Whatever it guesses must decode the whole file (Python's cp1252 leaves the same five bytes out)."""
    latin = "Le garçon était très fâché.\n".encode("latin-1") * 20
    cases = {latin: "latin1", latin + b"it\x92s late\n": "cp1252",  # a stray curly quote: Windows
             latin + "ÁFRICA\n".encode(): "latin1",  # 0x80-0x9f only inside UTF-8 characters: not Windows
             latin + "‘x’ – 9 €\n".encode(): "latin1",
             latin + b"it\x92s late\n" + "ÁFRICA\n".encode(): "latin1"}  # a quote, but iconv would stop at 0x81
    cases.update({latin + b"a \x93b\x94 c" + bytes([byte]) + b"\n": "latin1" if byte in b"\x81\x8d\x8f\x90\x9d"
                  else "cp1252" for byte in range(0x80, 0xA0)})
    path = tmp_path / "x.txt"
    for data, encoding in cases.items():
        path.write_bytes(data)
        with pytest.raises(UserError, match=r"is not UTF-8 \(byte 0xe7 at offset 6, line 1\)") as refused:
            prep.read_text_file(path)
        message = str(refused.value)
        guess = re.search(r"iconv -f (\S+) ", message)[1]
        assert guess == encoding, (data[-20:], message)
        data.decode(guess)  # (no UnicodeDecodeError)


def test_a_hidden_dataset_file_gets_a_visible_prepared_folder(tmp_path):
    for name, folder in ((".txt", "txt-char-"), (".notes.txt", "notes-char-")):
        (tmp_path / name).write_text("the cat sat on the mat\n" * 20)
        assert prep.prepared_dir(config(tmp_path / name, tmp_path / "p").data).name.startswith(folder)


def test_a_refused_preparation_leaves_no_empty_prepared_dir(tmp_path):
    text = tmp_path / "latin1.txt"
    text.write_bytes(b"caf\xe9\n" * 10)
    with pytest.raises(UserError, match="is not UTF-8"):
        prep.prepare(config(text, tmp_path / "new" / "prepared"), show_progress=False)
    assert not (tmp_path / "new").exists()


def test_a_dataset_link_to_nothing_or_a_builtin_in_capitals_is_named(tmp_path):
    (tmp_path / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    (tmp_path / "loop.txt").symlink_to(tmp_path / "loop.txt")
    for name, target, what in (("gone.txt", "nowhere.txt", "leads to no file or folder"),
                               ("loop.txt", "loop.txt", "runs into a loop of links")):
        with pytest.raises(UserError, match=rf"is a link \(.*{name} -> .*{target}\) that {what}"):
            prep.source_files(str(tmp_path / name))
    # the same loop inside a folder blamed the folder: `cannot read the folder books/sub: Too many levels ...`
    books = tmp_path / "books"
    (books / "sub").mkdir(parents=True)
    (books / "a.txt").write_text("text\n")
    (books / "sub" / "x.txt").symlink_to("y.txt")
    (books / "sub" / "y.txt").symlink_to("x.txt")
    with pytest.raises(UserError, match=rf"^data.dataset='{re.escape(str(books))}': .*sub/x.txt is a link \(.*x.txt -> "
                                        r"y.txt\) that runs into a loop of links$"):
        prep.source_files(str(books))
    with pytest.raises(UserError, match="nor an existing text file or folder; did you mean 'stories'"):
        prep.source_files("Stories")
    with pytest.raises(UserError, match="nor an existing text file or folder$"):
        prep.source_files("novels")
    # an address was told only "not an existing file": that it is not downloaded, and tiny shakespeare's by name
    with pytest.raises(UserError, match=r"folder; an address is not downloaded \(only data.dataset=shakespeare fetches "
                                        r"its text\): download the file, then give its path$"):
        prep.source_files("https://example.com/books.txt")
    with pytest.raises(UserError, match="then give its path, or data.dataset=shakespeare$"):
        prep.source_files(prep.SHAKESPEARE_URL)
    # a file:// address was told to be downloaded: its path is what to give (percent escapes undone)
    with pytest.raises(UserError, match=r"folder; give the file's path, not its address: --set "
                                        r"data.dataset='/tmp/my books.txt'$"):
        prep.source_files("file:///tmp/my%20books.txt")
    with pytest.raises(UserError, match=r"not its address: --set data.dataset=/srv/a.txt$"):
        prep.source_files("FILE://localhost/srv/a.txt")
    # a name typed with é as one code point, the file's with e and a combining accent (or the other way round)
    import unicodedata
    for on_disk, typed in (("NFD", "NFC"), ("NFC", "NFD")):
        folder = tmp_path / on_disk
        folder.mkdir()
        (folder / unicodedata.normalize(on_disk, "café.txt")).write_text("text\n")
        given, there = (str(folder / unicodedata.normalize(form, "café.txt")) for form in (typed, on_disk))
        with pytest.raises(UserError) as info:
            prep.source_files(given)
        assert str(info.value).endswith(f"; {there!r} is there: the same letters, its accents written in "
                                        f"Unicode's other form (one code point, or a letter and a combining "
                                        f"accent); give that one")


def test_a_run_of_zero_bytes_in_utf8_text_is_refused_a_stray_one_is_read(tmp_path):
    """Text with a zero-filled tail (a file a crash cut short) or 4,000 NULs up front is valid UTF-8 and was
    trained on without a word: --list-vocab showed token 0 '\\x00'. A few stray NULs are still read."""
    text = b"First Citizen:\nBefore we proceed any further, hear me speak.\n" * 300
    path = tmp_path / "x.txt"
    for data, at, run in ((text + bytes(3000), len(text), 3000), (bytes(4000) + text, 0, 4000)):
        path.write_bytes(data)
        with pytest.raises(UserError, match=rf"^{re.escape(str(path))} holds {run:,} zero bytes in a row at offset "
                                            rf"{at:,} \(a file zero-filled .* tr -d '\\000' < "):
            prep.read_text_file(path)
    path.write_bytes(text + bytes(63) + text)  # no text has 64 in a row; fewer may be a stray few
    assert "\0" * 63 in prep.read_text_file(path)
    path.write_bytes(text + bytes(64) + text)
    with pytest.raises(UserError, match=rf"holds 64 zero bytes in a row at offset {len(text):,} "):
        prep.read_text_file(path)


def test_the_bounds_at_which_bytes_are_no_utf8_text(tmp_path):
    """Each rule at its bound: 16 zeros all on one side (UTF-16LE Cyrillic, the fewest that tell), a third of the
    bytes 0 on both sides (past the quarter), and a text that is 7% control bytes (past the twentieth: binary, not
    text of another 8-bit encoding)."""
    path = tmp_path / "x.txt"
    path.write_bytes(" ".join(["привет"] * 17).encode("utf-16-le"))
    with pytest.raises(UserError, match=r"looks like UTF-16LE text, not UTF-8 \(16 of its 236 bytes are 0\)"):
        prep.read_text_file(path)
    path.write_bytes(b"ab\0" * 1000)
    with pytest.raises(UserError, match=r"text, not UTF-8 \(1,000 of its 3,000 bytes are 0\)"):
        prep.read_text_file(path)
    path.write_bytes(b"caf\xe9 " + b"abcdefghijklm\x01" * 100)
    with pytest.raises(UserError, match=r"is a binary file, not text \(100 of its first 1,405 bytes are control"):
        prep.read_text_file(path)


def test_a_folders_files_that_are_not_txt_are_named_in_a_note(tmp_path, capsys):
    """ch2.md and ch3.text of a folder dataset were left out without a word: a third of the corpus trained."""
    books = tmp_path / "books"
    books.mkdir()
    for name in ("ch1.txt", "ch2.md", "ch3.text"):
        (books / name).write_text(f"{name} says hello there.\n" * 50)
    text = prep.load_text(SimpleNamespace(dataset=str(books), prepared_dir=str(tmp_path / "prepared")))
    assert "ch1.txt" in text and "ch2.md" not in text
    err = capsys.readouterr().err
    assert err == (f"note: data.dataset={str(books)!r}: read its 1 .txt file; 2 other files left out (ch2.md, "
                   f"ch3.text): a folder's .txt files are its text\n")
    (books / "ch2.md").unlink()
    (books / "ch3.text").unlink()
    prep.load_text(SimpleNamespace(dataset=str(books), prepared_dir=str(tmp_path / "prepared")))
    assert capsys.readouterr().err == ""  # nothing left out, nothing said


@pytest.mark.parametrize("content", [b"caf\xe9\n", b"  \n"])
def test_a_refused_folder_gets_its_error_without_the_note(tmp_path, capsys, content):
    """A folder whose .txt was refused (not UTF-8, no text) printed `note: ... read its 1 .txt file; 1
    other file left out` before the error: two lines, the first saying a refused file was read."""
    books = tmp_path / "books"
    books.mkdir()
    (books / "readme.md").write_text("notes\n")
    (books / "a.txt").write_bytes(content)
    with pytest.raises(UserError, match="not UTF-8|holds no text"):
        prep.load_text(SimpleNamespace(dataset=str(books), prepared_dir=str(tmp_path / "prepared")))
    assert capsys.readouterr().err == ""


def test_hidden_files_and_folders_are_not_text(tmp_path):
    """.git/x.txt, .ipynb_checkpoints/*.txt and .secret.txt were trained on without a word."""
    books = tmp_path / "books"
    for name in ("a.txt", ".secret.txt", ".git/x.txt", ".ipynb_checkpoints/a-checkpoint.txt", "sub/b.txt"):
        (books / name).parent.mkdir(parents=True, exist_ok=True)
        (books / name).write_text("text\n")
    assert [p.relative_to(books).as_posix() for p in prep.source_files(str(books))] == ["a.txt", "sub/b.txt"]
    for name in ("a.txt", "sub/b.txt"):
        (books / name).unlink()
    with pytest.raises(UserError, match=r"holds no .txt files \(hidden ones, named with a leading '.', are left out\)"):
        prep.source_files(str(books))


@pytest.mark.skipif(sys.platform == "win32", reason="no FIFOs")
def test_a_pipe_that_appears_while_a_folder_is_prepared_is_named(tmp_path):
    """A pipe named zz.txt appearing mid-preparation was told as `B.txt changed while it was being prepared`: the
    after-look's own refusal was swallowed and the first file blamed."""
    books = tmp_path / "books"
    books.mkdir()
    (books / "B.txt").write_text("one\n")
    d = config(books, tmp_path / "prepared").data
    before = prep.fingerprint(d)
    os.mkfifo(books / "zz.txt")
    with pytest.raises(UserError, match=r"zz.txt is a pipe, not a regular file$"):
        prep._check_unchanged(d, before)
    (books / "zz.txt").unlink()
    (books / "A.txt").write_text("two\n")  # (two files changed: the first named)
    (books / "B.txt").write_text("three\n")
    with pytest.raises(UserError, match=r"/A.txt changed while it was being prepared; run again$"):
        prep._check_unchanged(d, before)
    shutil.rmtree(books)  # deleted meanwhile: told as a change, not as a setting that names nothing
    with pytest.raises(UserError, match=r"B.txt changed while it was being prepared; run again$"):
        prep._check_unchanged(d, before)


def test_a_folders_files_are_in_one_order_however_their_names_are_spelt(tmp_path):
    """`é.txt` spelt composed (NFC) in one copy of a folder and decomposed (NFD, as a Mac copy may spell it) in
    another sorted on either side of `f.txt`: the same text gave other tokens and another val split."""
    import unicodedata
    orders = []
    for form in ("NFC", "NFD"):
        folder = tmp_path / form
        folder.mkdir()
        (folder / unicodedata.normalize(form, "\u00e9.txt")).write_text("accent\n")
        (folder / "f.txt").write_text("plain\n")
        orders.append([unicodedata.normalize("NFC", p.name) for p in prep.source_files(str(folder))])
    assert orders[0] == orders[1] == ["f.txt", "\u00e9.txt"]


def test_a_folder_reads_its_upper_case_txt_files_too(tmp_path):
    """A folder holding a.TXT and b.txt trained on b.txt alone, half the data, without a word (a.TXT
    given on its own was read)."""
    books = tmp_path / "books"
    books.mkdir()
    for name in ("a.TXT", "b.txt", "c.Txt", "notes.md"):
        (books / name).write_text("text\n")
    assert [p.name for p in prep.source_files(str(books))] == ["a.TXT", "b.txt", "c.Txt"]


def test_a_file_rewritten_with_its_size_and_mtime_kept_is_prepared_again(tmp_path):
    """cp -p, rsync -t or an archive keep the mtime: the old preparation was reused for the new text."""
    text = tmp_path / "t.txt"
    text.write_text("aaaa bbbb\n" * 50)
    first = prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    stat = text.stat()
    time.sleep(0.05)  # (a file system's clock may tick coarsely: the change time must move)
    text.write_text("xxxx yyyy\n" * 50)  # the same size
    os.utime(text, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    again = prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    assert again == first and set((again / "tokenizer.json").read_text()) >= set("xy")


def test_a_dataset_folder_swapped_for_another_is_prepared_again(tmp_path):
    """Two versions of a corpus unpacked at once (same sizes, times within one clock tick), then `mv data old && mv
    new data`: the files' path, size, mtime and ctime matched, and the old version's tokens were trained on without
    a word. The file itself (device, inode) tells them apart."""
    for _ in range(20):  # both files' times in one tick of the kernel's clock, as an unpacked archive's often are
        for name, text in (("v1", "aaaa bbbb\n" * 50), ("v2", "xxxx yyyy\n" * 50)):
            (tmp_path / name).mkdir(exist_ok=True)
            (tmp_path / name / "x.txt").write_text(text)
        for name in ("v1", "v2"):
            os.utime(tmp_path / name / "x.txt", ns=(10**18, 10**18))
        a, b = ((tmp_path / name / "x.txt").stat() for name in ("v1", "v2"))
        if (a.st_size, a.st_mtime_ns, a.st_ctime_ns) == (b.st_size, b.st_mtime_ns, b.st_ctime_ns):
            break
    else:
        pytest.skip("this file system's change times never matched: the swap cannot look unchanged here")
    data = tmp_path / "data"
    (tmp_path / "v1").rename(data)
    first = prep.prepare(config(data, tmp_path / "prepared"), show_progress=False)
    assert set((first / "tokenizer.json").read_text()) >= set("ab")
    data.rename(tmp_path / "old")
    (tmp_path / "v2").rename(data)
    again = prep.prepare(config(data, tmp_path / "prepared"), show_progress=False)
    assert set((again / "tokenizer.json").read_text()) >= set("xy")


def test_a_pipe_or_a_device_in_a_prepared_folder_is_damage_not_a_hang(tmp_path):
    """meta.json replaced by a named pipe: train.py waited for a writer for good; tokenizer.json a
    link to /dev/zero: read until memory ran out. Either is a damaged folder: prepared again."""
    text = tmp_path / "t.txt"
    text.write_text("aaaa bbbb\n" * 50)
    folder = prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    (folder / "meta.json").unlink()
    os.mkfifo(folder / "meta.json")
    with pytest.raises(UserError, match=r"prepared data in .* is damaged \(FileNotFoundError\)"):
        prep.load_prepared(folder)
    assert prep.prepare(config(text, tmp_path / "prepared"), show_progress=False) == folder
    assert json.loads((folder / "meta.json").read_text())["train_tokens"] > 0
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to("/dev/zero")
    assert prep.prepare(config(text, tmp_path / "prepared"), show_progress=False) == folder
    assert (folder / "tokenizer.json").is_file() and not (folder / "tokenizer.json").is_symlink()


def test_an_outdated_preparation_in_a_folder_that_takes_no_file_names_the_folder_as_a_path(tmp_path, monkeypatch):
    """The refusal read `PosixPath('.../t-char-...') is to be prepared again`: the path's repr, not the path."""
    text = tmp_path / "t.txt"
    text.write_text("aaaa bbbb\n" * 50)
    folder = prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    (folder / "meta.json").write_text("{")

    def read_only(path, what, resume=False):
        raise UserError(f"{what}={str(path)!r} is not writable: [Errno 30] Read-only file system")
    monkeypatch.setattr(prep, "check_writable", read_only)
    with pytest.raises(UserError) as refused:
        prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    assert str(refused.value).startswith(f"{folder} is to be prepared again (outdated or damaged), but "
                                         f"data.prepared_dir='{tmp_path / 'prepared'}' is not writable")
    from tinygpt.errors import short
    assert short(Path("a") / "b") == "'a/b'"  # (any message's path)


def test_the_stories_generators_digest_is_the_same_with_windows_line_ends(tmp_path, monkeypatch):
    """A checkout that writes \\r\\n (git's autocrlf) holds the same generator: its stories are not prepared again,
    and a probe's check of the generator a checkpoint recorded still matches."""
    digest = prep.stories_code_digest  # (cached: cleared before each look, and after, for the other tests)
    digest.cache_clear()
    lf = digest()
    for name in ("stories.py", "story_words.py"):
        code = (Path(prep.__file__).parent / name).read_bytes()
        (tmp_path / name).write_bytes(code.replace(b"\n", b"\r\n"))
    monkeypatch.setattr(prep, "__file__", str(tmp_path / "prepare.py"))
    try:
        digest.cache_clear()
        assert b"\r\n" in (tmp_path / "stories.py").read_bytes() and digest() == lf
        (tmp_path / "stories.py").write_bytes((tmp_path / "stories.py").read_bytes() + b"# edited\r\n")
        digest.cache_clear()
        assert digest() != lf
    finally:
        digest.cache_clear()


def test_a_meta_json_whose_vocab_size_is_not_its_tokenizers_is_prepared_again(tmp_path):
    """meta.json's vocab_size one more than its tokenizer's (the same token dtype): the folder was reused, and its
    wrong size printed."""
    text = tmp_path / "t.txt"
    text.write_text("aaaa bbbb\n" * 50)
    folder = prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, "vocab_size": meta["vocab_size"] + 1}))
    assert prep.prepare(config(text, tmp_path / "prepared"), show_progress=False) == folder
    assert json.loads((folder / "meta.json").read_text())["vocab_size"] == meta["vocab_size"]


def test_a_prepared_folder_holding_a_run_is_not_replaced(tmp_path):
    """A run trained into a prepared folder (train.out_dir = it) was deleted whole, without a word,
    when the folder was prepared again (its meta.json damaged, or the text changed)."""
    text = tmp_path / "t.txt"
    text.write_text("aaaa bbbb\n" * 50)
    folder = prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    (folder / "ckpt.pt").write_bytes(b"a run's")
    (folder / ".DS_Store").write_bytes(b"")  # a file manager's: not named, and no reason to refuse
    (folder / "meta.json").write_text("{")
    with pytest.raises(UserError, match=rf"{re.escape(str(folder))} is to be prepared again \(outdated or damaged\), "
                                        r"which replaces the folder, but it holds ckpt.pt, which preparing never "
                                        r"writes \(a run trained into it\?\); move them away, or set another "
                                        r"data.prepared_dir$"):
        prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    assert (folder / "ckpt.pt").read_bytes() == b"a run's"
    (folder / "ckpt.pt").unlink()
    assert prep.prepare(config(text, tmp_path / "prepared"), show_progress=False) == folder  # prepared again
    assert not (folder / ".DS_Store").exists()
    assert json.loads((folder / "meta.json").read_text())["vocab_size"] > 0


def test_a_stories_corpus_too_big_to_generate_is_refused_at_once(tmp_path, monkeypatch):
    """10**9 characters passed the check (3 GB for its tokens) and the generator then took ~24 GB."""
    from data import stories
    from tinygpt import runtime
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": 20 * 2**30})

    def too_late(*args, **kwargs):  # (a regression must fail here, not fill the memory)
        raise AssertionError("the corpus was generated before the memory check refused it")
    monkeypatch.setattr(stories, "generate_stories", too_late)
    cfg = load_config(ROOT / "configs/stories.yaml", ["data.stories_chars=1000000000",
                                                      f"data.prepared_dir={tmp_path / 'prepared'}"])
    with pytest.raises(UserError, match=r"preparing data.dataset='stories' needs at least 2[0-9]\.\d GB"):
        prep.prepare(cfg, show_progress=False)
    assert not (tmp_path / "prepared").exists()


@pytest.mark.parametrize("tokenizer", ["word", "bpe"])
def test_a_word_or_bpe_text_too_big_to_prepare_is_refused_at_once(tmp_path, monkeypatch, tokenizer):
    """Word and BPE tokens were counted as 3 bytes a character: a 48 MB text passed the check under a
    700 MB limit and the kernel killed it at 1.2 GB, without a word. Measured, they take ~15."""
    from tinygpt import runtime
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 40_000)  # 960 kB: 2.9 MB at 3 bytes a character, 13 MB at 14
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": 8 * 2**20})
    cfg = config(text, tmp_path / "prepared")
    cfg.data.tokenizer = tokenizer
    with pytest.raises(UserError, match=r"^preparing data.dataset='\S+t.txt' needs at least [\d.]+ GB of memory"):
        prep.prepare(cfg, show_progress=False)
    assert not (tmp_path / "prepared").exists()


def test_learning_a_bpe_on_text_without_spaces_is_counted_at_its_own_cost(tmp_path, monkeypatch):
    """Text with no space (Chinese, DNA: each line one long piece) takes ~63 bytes a byte to learn a BPE on,
    not 14: a 50 MB one passed the check needing 0.7 GB and took 3 GB. The same size with spaces, and a char
    tokenizer on the unspaced text, still pass under the same limit."""
    from tinygpt import runtime
    unspaced, spaced = tmp_path / "u.txt", tmp_path / "s.txt"
    unspaced.write_text(("abcdefghij" * 10_000 + "\n") * 20)  # 2 MB: 28 MB at 14 bytes a byte, 128 MB at 64
    spaced.write_text(("abcd efghi " * 10_000 + "\n") * 20)
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": 64 * 2**20})
    cfg = config(unspaced, tmp_path / "prepared")
    cfg.data.tokenizer = "bpe"
    assert prep.corpus_memory(cfg.data) == 64 * unspaced.stat().st_size
    with pytest.raises(UserError, match=r"^preparing data.dataset='\S+u.txt' needs at least [\d.]+ GB of memory"):
        prep.prepare(cfg, show_progress=False)
    cfg.data.dataset = str(spaced)
    assert prep.corpus_memory(cfg.data) == 14 * spaced.stat().st_size
    cfg.data.dataset, cfg.data.tokenizer = str(unspaced), "char"
    assert prep.corpus_memory(cfg.data) == 17 * unspaced.stat().st_size
    cfg.data.tokenizer = "gpt2"  # encoding it takes as much (50 MB of ACGT: 2.75 GB, counted as 0.7)
    assert prep.corpus_memory(cfg.data) == 64 * unspaced.stat().st_size
    # words parted by tabs or carriage returns are spaced text; a file read to its sample is not read on (the next
    # one, gone meanwhile, was opened and made the text count as spaced)
    assert not prep.unspaced_text("word\t" * 1000) and not prep.unspaced_text("word\r" * 1000)
    (tmp_path / "big.txt").write_bytes(b"x" * (1 << 20))
    assert prep.unspaced([tmp_path / "big.txt", tmp_path / "gone.txt"])


def check_the_unspaced_note(tmp_path, monkeypatch, capsys):
    """Prepare a long text without whitespace, then one with, for gpt2: the note is said for the first alone.
    Returns the config of the last."""
    monkeypatch.setattr(prep, "LONG_TEXT", 1000)  # (instead of 4 MiB of text)
    for name, text in (("dna", "ACGT" * 500 + "\n"), ("words", "the cat sat on the mat. " * 100)):
        (tmp_path / f"{name}.txt").write_text(text)
        cfg = config(tmp_path / f"{name}.txt", tmp_path / "prepared")
        cfg.data.tokenizer = "gpt2"
        prep.prepare(cfg, show_progress=True)
        said = "encoding 0.0 M characters with gpt2: the text has almost no whitespace" in capsys.readouterr().err
        assert said == (name == "dna")
    return cfg


def test_encoding_a_long_text_without_spaces_with_tiktoken_is_said_first(tmp_path, monkeypatch, capsys):
    """tiktoken reads a text with no whitespace as one piece: 50 MB of it stood at 0% of the tokenizing bar
    for 3 minutes. A line says so first; a text with spaces gets the bar alone."""
    from conftest import r50k_cache
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(r50k_cache(tmp_path / "tiktoken")))
    cfg = check_the_unspaced_note(tmp_path, monkeypatch, capsys)
    cfg.data.dataset, cfg.data.tokenizer = str(tmp_path / "dna.txt"), "word"  # (its bar tells how far it is)
    prep.prepare(cfg, show_progress=True)
    assert "almost no whitespace" not in capsys.readouterr().err


def test_learning_many_bpe_merges_over_many_distinct_pieces_is_refused_before_the_merges(tmp_path, monkeypatch):
    """Learning merges takes memory for every byte of a distinct piece (its pairs, heap entries, node lists),
    more with more merges: 1 MB of random words at bpe_vocab_size 65536 took 120 MB, counted as 14 MB (14 bytes a
    byte of text), and a 6 MB Chinese text 2.1 GB, counted as 0.4. Refused before the merges, naming the fix;
    the same text at the default vocabulary, and English that repeats its words, still pass."""
    import random
    from tinygpt import runtime
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8)) for _ in range(30_000)]
    text = tmp_path / "t.txt"
    text.write_text(" ".join(words))  # 270 kB, all distinct pieces: 3.8 MB at 14 bytes a byte, 46 MB at 170 a node
    monkeypatch.setattr(runtime, "cpu_memory_limits", lambda: {"machine": 32 * 2**20})
    cfg = config(text, tmp_path / "prepared")
    cfg.data.tokenizer, cfg.data.bpe_vocab_size = "bpe", 65536
    refused = (r"^learning 65,280 BPE merges over 0\.3 MB of distinct pieces needs at least [\d.]+ GB of memory .*; "
               r"lower data\.bpe_vocab_size, or use a smaller dataset$")
    with pytest.raises(UserError, match=refused):
        prep.prepare(cfg, show_progress=False)
    assert not (tmp_path / "prepared").exists()
    cfg.data.bpe_vocab_size = 1024  # 90 a node: 24 MB
    assert prep.prepare(cfg, show_progress=False).is_dir()
    text.write_text("the cat sat on the mat. " * 11_000)  # as long, 7 distinct pieces
    cfg.data.bpe_vocab_size = 65536
    assert prep.prepare(cfg, show_progress=False).is_dir()


def test_learning_a_bpe_from_a_long_text_is_said_first(tmp_path, monkeypatch, capsys):
    """A 50 MB text with no space learned its BPE for minutes with nothing on the screen (the progress
    bar is the encoding's, after it): a line now says what is being done first."""
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat. " * 100)
    cfg = config(text, tmp_path / "prepared")
    cfg.data.tokenizer, cfg.data.bpe_vocab_size = "bpe", 300
    monkeypatch.setattr(prep, "LONG_TEXT", 1000)  # (instead of 4 MiB of text)
    prep.prepare(cfg, show_progress=True)
    assert "learning 44 BPE merges from 0.0 M characters (no progress bar" in capsys.readouterr().err
    cfg.data.bpe_vocab_size = 301
    prep.prepare(cfg, show_progress=False)  # (quiet: train.py --quiet, a sweep)
    assert "learning" not in capsys.readouterr().err
    # 360 characters, 1,080 bytes: learning costs by the byte (6 MB of Chinese, 2 M characters under
    text.write_text("猫が座った。" * 60)  # LONG_TEXT, was learned for 2 minutes without a word)
    prep.prepare(cfg, show_progress=True)
    assert "learning 45 BPE merges" in capsys.readouterr().err


def test_an_edited_stories_generator_prepares_its_stories_again(tmp_path, monkeypatch):
    """data/story_words.py invites edits ("Edit here to change what the stories say"), but the preparation was
    keyed on its settings alone: the old stories were reused without a word, and probe.py's held-out stories,
    made by the new code, were of text the model never saw. The generator's code is in the fingerprint."""
    cfg = load_config(ROOT / "configs/stories.yaml", ["data.stories_chars=10000", "data.tokenizer=char",
                                                      f"data.prepared_dir={tmp_path}"])
    folder = prep.prepare(cfg, show_progress=False)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["settings"]["generator"] == prep.stories_code_digest()
    monkeypatch.setattr(prep, "stories_code_digest", lambda: "edited")  # story_words.py changed
    assert prep.prepared_dir(cfg.data) == folder  # the same folder, prepared again
    assert prep.prepare(cfg, show_progress=False) == folder
    assert json.loads((folder / "meta.json").read_text())["settings"]["generator"] == "edited"


def test_a_bpe_that_runs_out_of_pairs_says_so(tmp_path, capsys):
    """bpe_vocab_size=65536 on a small text gave a vocabulary of 278 without a word."""
    text = tmp_path / "t.txt"
    text.write_text("ab ab ab\n" * 20)
    sets = [f"data.dataset={text}", "data.tokenizer=bpe", "data.bpe_vocab_size=1024", f"data.prepared_dir={tmp_path}"]
    vocab = prep.load_prepared(prep.main([str(ROOT / "configs/stories.yaml"), "--set", *sets])).tokenizer.vocab_size
    assert vocab < 1024
    assert f"vocab {vocab:,} (of data.bpe_vocab_size=1024: the text has no more pairs" in capsys.readouterr().out


def test_offline_shakespeare_names_its_address_and_the_way_round(tmp_path, monkeypatch):
    """No network: the error gave the way round (a local copy) but not the address to fetch the file
    from on another machine (it was only in this module); now both."""
    import urllib.error

    def offline(url, timeout):
        raise urllib.error.URLError("no network")
    monkeypatch.setattr(prep.urllib.request, "urlopen", offline)
    with pytest.raises(UserError, match=rf"could not download tiny shakespeare \(URLError\) from "
                                        rf"{re.escape(prep.SHAKESPEARE_URL)}; offline, point data.dataset at a "
                                        rf"local copy: --set data.dataset=path/to/tinyshakespeare.txt"):
        prep.download_shakespeare(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_earlier_download_is_named_when_the_network_is_away(tmp_path, monkeypatch):
    """An earlier download of tiny shakespeare, since changed (a line added): offline, the error said
    only "could not download", not that the copy there failed its check."""
    import urllib.error

    def offline(url, timeout):
        raise urllib.error.URLError("no network")
    monkeypatch.setattr(prep.urllib.request, "urlopen", offline)
    (tmp_path / "tinyshakespeare.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    with pytest.raises(UserError, match=r"could not download tiny shakespeare .*; offline, point data.dataset at a "
                                        r"local copy: .*; the copy downloaded before, .*tinyshakespeare.txt, is "
                                        r"damaged \(not the file's sha256\)"):
        prep.download_shakespeare(tmp_path)


def test_compact_vocab_is_a_token_setting_of_tiktoken_encodings_only(tmp_path):
    """data.compact_vocab changes no token of a char, word or bpe run, yet counted as a token setting:
    `--resume --set data.compact_vocab=false` of a char run was refused, and the setting made another
    prepared folder (and another run for a sweep). A folder prepared before keeps its name."""
    for tokenizer in ("char", "word", "bpe", "gpt2"):
        on, off = (load_config(ROOT / "configs/stories.yaml", [f"data.tokenizer={tokenizer}", f"data.compact_vocab={v}",
                                                                f"data.prepared_dir={tmp_path}"]).data
                   for v in ("true", "false"))
        tiktoken = tokenizer == "gpt2"
        assert ("compact_vocab" in prep.token_keys(off)) == tiktoken
        assert (prep.prepared_dir(on) != prep.prepared_dir(off)) == tiktoken
        # the name's hash is of what it was while every tokenizer counted compact_vocab (True, the default)
        keys = ["dataset", "tokenizer", "compact_vocab", "val_fraction", "stories_chars", "stories_seed"]
        old = {"version": prep.PREP_VERSION, "paths": [], **{key: getattr(on, key) for key in keys},
               **({"bpe_vocab_size": on.bpe_vocab_size} if tokenizer == "bpe" else {}),
               **({"word_rule": 2} if tokenizer == "word" else {})}  # (word folders: renamed with the rule)
        digest = hashlib.sha1(json.dumps(old, sort_keys=True).encode()).hexdigest()[:10]
        assert prep.prepared_dir(on).name == f"stories-{tokenizer}-{digest}"


# ---- get_batch and the digest ----


def test_get_batch_targets_are_the_inputs_shifted_by_one():
    """y is the token after each x (the next-token targets): swapped, the model learned the previous token."""
    import numpy as np
    import torch
    data = np.arange(100, dtype=np.uint16)
    x, y = prep.get_batch(data, 8, 10, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert x.shape == y.shape == (8, 10)
    assert torch.equal(y, x + 1)
    assert torch.equal(x[:, 1:], x[:, :1] + torch.arange(1, 10))  # windows of consecutive tokens


def test_get_batch_reaches_the_last_window():
    """A split of block_size + 2 tokens has two windows of block_size + 1, starting at 0 and 1; both are
    drawn (the last one was never drawn: the last token of a split was never a target)."""
    import numpy as np
    import torch
    data = np.arange(12, dtype=np.uint16)  # block 10
    x, y = prep.get_batch(data, 64, 10, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert set(x[:, 0].tolist()) == {0, 1}
    assert y.max().item() == 11


def test_the_digest_covers_the_val_tokens_too():
    """meta.json's digest (what a --resume checks its data against) changes with the val tokens alone."""
    import numpy as np
    tok = {"kind": "char", "vocab_size": 5}
    train = np.array([1, 2, 3, 4], dtype=np.uint16)
    same = prep._digest(tok, train, np.array([0, 1], dtype=np.uint16))
    assert same == prep._digest(tok, train.copy(), np.array([0, 1], dtype=np.uint16))
    assert same != prep._digest(tok, train, np.array([0, 2], dtype=np.uint16))
    assert same != prep._digest(tok, np.array([1, 2, 3, 0], dtype=np.uint16), np.array([0, 1], dtype=np.uint16))


# ---- mutation audit: what the tests above left open ----


def test_one_stray_byte_in_utf8_text_is_one_byte_in_the_singular(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("le thé est chaud\n".encode() * 3 + b"it\x92s late\n")
    with pytest.raises(UserError, match=r"is UTF-8 text but for 1 byte that is not \(byte 0x92 at offset 56, line 4\); "
                                        r"mend it, or write a copy without it: iconv -c "):
        prep.read_text_file(path)


def test_a_download_with_the_wrong_sha256_is_refused_and_not_saved(tmp_path, monkeypatch):
    """A captive portal's page or a changed file would be trained on, and kept as the cached copy."""
    monkeypatch.setattr(prep.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"<html>sign in</html>"))
    with pytest.raises(UserError, match=r"downloaded tiny shakespeare has sha256 [0-9a-f]{12}\.\.\., expected "
                                        rf"{prep.SHAKESPEARE_SHA256[:12]}\.\.\.: not saved"):
        prep.download_shakespeare(tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("reply", ["endless", "slow"])
def test_a_download_that_never_ends_is_cut_off(tmp_path, monkeypatch, reply):
    # the whole reply was read into memory, however long, for however long it took (a buffered read
    # waits for its whole block however slowly the bytes drip in: only what has come is read)
    class Reply(io.RawIOBase):
        sent = 0  # bytes; "slow": one byte a read, 100 s each

        def read(self, n=-1):  # all of it (40 MB stand in for an endless reply), or n bytes
            n = 40 * 2**20 if n < 0 else n
            Reply.sent += n
            if Reply.sent > 8 * 2**20:  # (a reading without its bound fails here, not after minutes of an endless loop)
                raise AssertionError(f"read {Reply.sent:,} bytes of an endless reply")
            return b"x" * n

        def read1(self, n=-1):  # what has come
            return self.read(1 if reply == "slow" else n)
    if reply == "slow":
        monkeypatch.setattr(prep.time, "monotonic", lambda: Reply.sent * 100.0)
    monkeypatch.setattr(prep.urllib.request, "urlopen", lambda url, timeout: Reply())
    said = r"took over 300 s; offline" if reply == "slow" else r"has sha256 [0-9a-f]{12}\.\.\., expected"
    with pytest.raises(UserError, match=said):
        prep.download_shakespeare(tmp_path)
    assert Reply.sent <= (4 if reply == "slow" else (prep.SHAKESPEARE_CHARS // 65536 + 2) * 65536)
    assert list(tmp_path.iterdir()) == []


def test_the_files_of_a_folder_are_joined_by_a_blank_line(tmp_path):
    """The last line of a.txt ran into the first of b.txt ("the endOnce upon"): a word that is in neither."""
    books = tmp_path / "books"
    books.mkdir()
    (books / "a.txt").write_text("the end")
    (books / "b.txt").write_text("Once upon")
    assert prep.load_text(config(books, tmp_path / "prepared").data) == "the end\n\nOnce upon"


def test_a_bpe_that_reaches_its_size_gets_no_note(tmp_path):
    d = load_config(ROOT / "configs/stories.yaml", ["data.tokenizer=bpe", "data.bpe_vocab_size=300"]).data
    assert prep.vocab_note(d, 300) == ""
    assert prep.vocab_note(d, 299) == (" (of data.bpe_vocab_size=300: the text has no more pairs to merge into tokens "
                                       "of at most 1,024 bytes)")


def test_token_ids_of_a_vocabulary_past_65536_are_stored_whole():
    """Ids from 65536 up do not fit in uint16: they would wrap round to other tokens."""
    import numpy as np
    assert prep.token_dtype(2**16) == np.uint16  # ids 0..65535
    assert prep.token_dtype(2**16 + 1) == np.uint32
    assert prep.token_dtype(100_277) == np.uint32  # cl100k_base


def test_get_batch_ranks_together_draw_the_one_process_batch():
    """Under DDP each rank keeps its own share of the global batch: rank 1 got rank 0's windows (the
    processes trained on the same data, half of the batch wasted)."""
    import numpy as np
    import torch
    data, cpu = np.arange(1000, dtype=np.uint16), torch.device("cpu")
    whole, _ = prep.get_batch(data, 8, 10, torch.Generator().manual_seed(0), cpu)
    shares = [prep.get_batch(data, 4, 10, torch.Generator().manual_seed(0), cpu, rank=rank, world_size=2)[0]
              for rank in (0, 1)]
    assert torch.equal(torch.cat(shares), whole)


def test_a_split_of_one_token_is_offered_no_block_size_below_1():
    with pytest.raises(UserError) as err:
        prep.check_block_fits(4, 1, 10, "--set")
    assert "block_size below" not in str(err.value)
    assert str(err.value).endswith("more text or another data.val_fraction")


def test_a_file_named_only_by_its_suffix_prepares_into_a_named_folder(tmp_path):
    """`..txt` (its stem '.', no name once the leading dots go): the folder was `-char-<hash>`, which no prepared
    folder's name matches (an odd folder beside the others, never swept)."""
    (tmp_path / "..txt").write_text("text\n")
    folder = prep.prepared_dir(config(tmp_path / "..txt", tmp_path / "prepared").data)
    assert folder.name.startswith("text-char-") and prep.PREPARED_NAME.fullmatch(folder.name)


def test_a_dataset_spelt_two_ways_is_the_same_dataset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.txt").write_text("text\n")
    (tmp_path / "e.txt").write_text("text\n")
    assert prep.same_dataset("d.txt", str(tmp_path / "d.txt")) and prep.same_dataset("./d.txt", "d.txt")
    assert not prep.same_dataset("d.txt", "e.txt")
    assert not prep.same_dataset("stories", "./stories")
    (tmp_path / "stories").mkdir()  # (a folder of that name here: still the generated stories, not it)
    assert not prep.same_dataset("./stories", "stories") and not prep.same_dataset("stories", "./stories")


def test_tokenizing_into_a_log_file_is_one_line(capsys):
    """The tokenizing bar of a long text drew its redraws into a log file (`2> log`), \\r-joined; a log
    now gets one line saying what is under way."""
    from tinygpt.tokenizer import build_tokenizer
    text = "the cat sat on the mat.\n" * 2000
    tokenizer = build_tokenizer("char", text)
    ids = prep._encode(tokenizer, text, True, chunk=1000)
    assert ids.tolist() == tokenizer.encode(text)
    assert capsys.readouterr().err == f"tokenizing {len(text) / 1e6:,.1f} M characters\n"
    for n, said in ((4000, True), (3999, False)):  # (a text of 4 chunks or more is said)
        prep._encode(tokenizer, text[:n], True, chunk=1000)
        assert capsys.readouterr().err.startswith("tokenizing") is said, n


def test_a_file_spelt_two_ways_is_prepared_once(tmp_path, monkeypatch):
    """`data.dataset=x.txt`, then `./x.txt` (or its absolute path, or a link to it): each spelling
    got a folder of its own, the same text prepared again."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.txt").write_text("To be, or not to be, that is the question.\n" * 40)
    (tmp_path / "link.txt").symlink_to("x.txt")
    made = set()
    for spelling in ("x.txt", "./x.txt", str(tmp_path / "x.txt"), "link.txt"):
        cfg = load_config(ROOT / "configs/shakespeare_char.yaml",
                          [f"data.dataset={spelling}", f"data.prepared_dir={tmp_path / 'prepared'}"])
        made.add(prep.prepare(cfg, show_progress=False))
        assert prep.load_for_training(cfg, "--set").train.size > 0
    assert len(made) == 1 and [p.name for p in (tmp_path / "prepared").iterdir()] == [made.pop().name]
    assert next((tmp_path / "prepared").iterdir()).name.startswith("x-char-")  # (the link: named as its file)


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k_base", "o200k_base"])
def test_chunked_encoding_gives_the_whole_texts_tokens_at_runs_of_whitespace(pattern, monkeypatch):
    # a chunk cut after the first of several line breaks split the run otherwise than the whole
    # text: GPT-2's pre-tokenizer keeps a run's last whitespace apart when text follows it, and
    # o200k's joins '.\n/' into one piece. Each encoding's own pattern, with a few merges that
    # tell the pieces apart (its file is not needed)
    import tiktoken
    import tiktoken_ext.openai_public as openai_public
    from tinygpt.tokenizer import GPT2_SPLIT
    ranks = {bytes([b]): b for b in range(256)}
    for token in (b"\n\n", b" \n", b".\n", b".\n/", b"\n ", b"  ", b"\n\n\n", b";\n", b" the", b"//"):
        ranks[token] = len(ranks)
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: ranks)
    pat_str = GPT2_SPLIT if pattern == "gpt2" else getattr(openai_public, pattern)()["pat_str"]
    encoding = tiktoken.Encoding(pattern, pat_str=pat_str, mergeable_ranks=ranks, special_tokens={})
    tokenizer = SimpleNamespace(encode=encoding.encode_ordinary)
    for text in ("the cat\n\n\n\nsat  \non the mat.\n \nthe end\n x;\n// c\na.\n/b\n  two\n" * 20,
                 ("w" * 30 + ".\n/" + "v" * 30 + "\n") * 20):  # (the first line break past a chunk: '.\n/')
        whole = encoding.encode_ordinary(text)
        for chunk in (11, 16, 33, 100, 257):  # (each span of CHUNK_SPAN chunks holds a place to cut)
            assert prep._encode(tokenizer, text, False, chunk=chunk).tolist() == whole, chunk
    # a text of exactly CHUNK_SPAN chunks with no place to cut is one piece (cut at its line break, '\n' | '\n\n'
    # parted a run of line breaks)
    text = "abc\n\n\n" + "d" * (prep.CHUNK_SPAN * 2 - 6)
    assert prep._encode(tokenizer, text, False, chunk=2).tolist() == encoding.encode_ordinary(text)


def test_a_text_with_no_place_to_cut_is_still_encoded_in_bounded_chunks():
    # every line ends in a space: no line break where the tokens surely stay the whole text's; the
    # whole text went to the tokenizer at once, its token list in memory (1.2 GB for 40 MB)
    lengths = []
    tokenizer = SimpleNamespace(encode=lambda text: lengths.append(len(text)) or [0] * len(text))
    ids = prep._encode(tokenizer, "a \n" * 1000, False, chunk=64)
    assert len(ids) == 3000 and max(lengths) <= prep.CHUNK_SPAN * 64 and len(lengths) > 3000 // (prep.CHUNK_SPAN * 64)
    assert max(lengths) <= 8 * 64  # (CHUNK_SPAN's own bound: a larger one held the whole text at once)


@pytest.mark.within(30)
def test_a_long_text_without_a_line_break_is_encoded_whole():
    """No line break past the chunk to cut at: the rest goes whole (a cut at `find`'s -1 looped for ever)."""
    seen = []
    tokenizer = SimpleNamespace(encode=lambda text: seen.append(text) or [0] * len(text))
    assert len(prep._encode(tokenizer, "x" * 200, False, chunk=16)) == 200 and "".join(seen) == "x" * 200


def test_a_vocab_size_the_data_does_not_have_offers_a_fix_from_the_command_line(tmp_path):
    # a run's own config.yaml records model.vocab_size; "remove the key" was the only fix offered
    text = tmp_path / "corpus.txt"
    text.write_text("the cat sat on the mat\n" * 200)
    cfg = config(text, tmp_path / "prepared")
    cfg.model.vocab_size = 5
    prep.prepare(cfg, show_progress=False)
    with pytest.raises(UserError, match=r"^model.vocab_size=5 \(run/config.yaml\) is not the tokenizer's 11: the "
                                        r"vocabulary comes from the data; remove the key, or --set "
                                        r"model.vocab_size=0 \(from the data\)$"):
        prep.load_for_training(cfg, "run/config.yaml")
    cfg.model.vocab_size = 0  # the fix works
    assert prep.load_for_training(cfg, "run/config.yaml").tokenizer.vocab_size == cfg.model.vocab_size == 11


def test_a_sparse_prepared_json_file_is_damage_found_at_its_first_hole(tmp_path):
    """A meta.json made sparse and 2 GB long (4 KB on disk) was read whole: 46 s and 4.4 GB before the folder
    was prepared again. Its first hole (NUL bytes, which no JSON holds) is damage, found in the first MiB; a long
    file that is JSON (a word vocabulary's tokenizer.json may be 100 MB) is read as before."""
    import tracemalloc
    from data import prepare as prep
    meta = tmp_path / "meta.json"
    meta.write_text('{"a": 1}')
    os.truncate(meta, 2**31)  # 2 GB, nothing on disk past the first bytes
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="holds a NUL byte"):
            prep.read_json(meta)
        assert tracemalloc.get_traced_memory()[1] < 16 * 2**20  # (the old reader held 2 GB)
    finally:
        tracemalloc.stop()
    long = tmp_path / "tokenizer.json"
    long.write_text('{"words": "' + "x" * (3 * 2**20) + '"}')
    assert len(prep.read_json(long)["words"]) == 3 * 2**20


def test_a_sparse_token_array_is_prepared_again_unread(tmp_path, monkeypatch):
    """A train.bin made sparse and 20 GB long (56 KB on disk), meta.json edited to match, was hashed whole
    to be found damaged: 38 s and 20 GB of page cache, Ctrl-C unheard. A file mostly of holes, which no
    preparation writes, is not current: the folder is prepared again at once."""
    from tinygpt.checkpoint import mostly_holes
    text = tmp_path / "corpus.txt"
    text.write_text("the cat sat on the mat\n" * 200)
    cfg = config(text, tmp_path / "prepared")
    out = prep.prepare(cfg, show_progress=False)
    meta = json.loads((out / "meta.json").read_text())
    tokens = meta["train_tokens"]
    meta["train_tokens"] = 2**26  # uint8 or uint16: 64 or 128 MiB, holes past the real tokens
    (out / "meta.json").write_text(json.dumps(meta))
    os.truncate(out / "train.bin", 2**26 * (2 if meta["dtype"] == "uint16" else 1))
    if not mostly_holes(out / "train.bin"):
        pytest.skip("this file system stores no holes")
    digest, hashed = prep._digest, []
    monkeypatch.setattr(prep, "_digest", lambda tok, train, val: hashed.append(len(train)) or digest(tok, train, val))
    prep.prepare(cfg, show_progress=False)
    assert 2**26 not in hashed  # prepared again, not hashed first
    assert json.loads((out / "meta.json").read_text())["train_tokens"] == tokens
    assert (out / "train.bin").stat().st_size < 2**20


def test_a_data_key_given_that_changes_nothing_is_said(tmp_path, capsys):
    """`--set data.bpe_vocab_size=300 data.stories_chars=5000000` over a char run of a file changed nothing, and
    nothing said so (data.prepare and train.py alike). A config file's own values of them are not named."""
    from tinygpt.config import DataConfig
    char_file = DataConfig(dataset="books.txt", tokenizer="char")
    assert prep.moot_settings(char_file, ["data.bpe_vocab_size=300", "Data.Stories_Seed=7", "data.stories_seed=8",
                                          "train.lr=1", "data.val_fraction=0.2"]) == (
        "note: --set data.bpe_vocab_size changes nothing here: it applies to data.tokenizer=bpe only; --set "
        "data.stories_seed changes nothing here: it applies to data.dataset=stories only")
    assert prep.moot_settings(DataConfig(tokenizer="bpe"), ["data.bpe_vocab_size=300", "data.stories_seed=7"]) is None
    assert "a tiktoken encoding" in prep.moot_settings(char_file, ["data.compact_vocab=false"])
    assert prep.moot_settings(char_file, []) is None
    assert "--set data.bpe_vocab_size changes nothing" in prep.moot_settings(char_file, ["Data.Bpe_Vocab_Size=300"])
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 50)
    prep.main([str(ROOT / "configs/shakespeare_char.yaml"), "--set", f"data.dataset={text}",
               f"data.prepared_dir={tmp_path / 'p'}", "data.bpe_vocab_size=300"])
    assert "note: --set data.bpe_vocab_size changes nothing here" in capsys.readouterr().err


def test_a_damaged_token_or_an_edited_dtype_in_a_prepared_folder_is_prepared_again(tmp_path):
    """A changed byte in train.bin is found by meta.json's digest; a meta.json whose dtype was edited (int16:
    the same bytes read as other numbers) by its vocabulary's. Either is prepared again, not read."""
    text = tmp_path / "a.txt"
    text.write_text("the cat sat on the mat\n" * 20)
    cfg = config(text, tmp_path / "prepared")
    out = prep.prepare(cfg, show_progress=False)
    with open(out / "train.bin", "r+b") as f:
        f.seek(4)
        f.write(b"\xff\x7f")
    data = prep.load_prepared(prep.prepare(cfg, show_progress=False))
    assert data.train.max() < data.tokenizer.vocab_size
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps({**meta, "dtype": "int16"}))
    assert prep.load_prepared(prep.prepare(cfg, show_progress=False)).meta["dtype"] == "uint16"


def test_a_folder_called_like_a_builtin_in_capitals_is_a_folder_whose_edits_are_prepared(tmp_path, monkeypatch):
    """data.dataset=Stories is the user's folder: a built-in name is fingerprinted without its files."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Stories").mkdir()
    (tmp_path / "Stories" / "a.txt").write_text("one story\n" * 60)
    cfg = config("Stories", tmp_path / "prepared")
    assert prep.load_prepared(prep.prepare(cfg, show_progress=False)).meta["chars"] == 600
    (tmp_path / "Stories" / "a.txt").write_text("another story\n" * 60)
    assert prep.load_prepared(prep.prepare(cfg, show_progress=False)).meta["chars"] == 840


def test_a_downloads_folder_of_the_users_text_is_read(tmp_path):
    """Only data.prepared_dir's own downloads/ (tiny shakespeare's copy) is not text: a folder of the
    user's named downloads is."""
    (tmp_path / "text" / "downloads").mkdir(parents=True)
    (tmp_path / "text" / "a.txt").write_text("a" * 500)
    (tmp_path / "text" / "downloads" / "b.txt").write_text("b" * 650)
    cfg = config(tmp_path / "text", tmp_path / "elsewhere")
    assert prep.load_prepared(prep.prepare(cfg, show_progress=False)).meta["chars"] == 500 + 2 + 650


def test_a_cjk_file_whose_first_64_kib_end_inside_a_character_is_named_as_such(tmp_path):
    """The sniffed head is cut at a line end: cut inside a double-byte character, GB18030 text was told
    that some characters read as UTF-8 and to convert from latin1, which garbles every one."""
    path = tmp_path / "cjk.txt"
    line = "你好世界，这是一个测试。\n".encode("gb18030")
    assert prep.SNIFFED % len(line) not in (0, len(line) - 1)  # the 64 KiB end inside a line, not at its end
    path.write_bytes(line * (prep.SNIFFED // len(line) + 300))
    with pytest.raises(UserError, match="reads as text in .*gb18030") as refused:
        prep.read_text_file(path)
    assert "latin1" not in str(refused.value)


def test_a_file_cut_after_3_bytes_of_a_4_byte_character_is_told_so(tmp_path):
    path = tmp_path / "cut.txt"
    data = ("café au lait\n" * 20 + "smile 😀").encode()[:-1]
    path.write_bytes(data)
    with pytest.raises(UserError, match=rf"ends inside a UTF-8 character \(its last 3 bytes begin one: .* head -c "
                                        rf"{len(data) - 3} "):
        prep.read_text_file(path)


def test_as_many_stray_bytes_as_utf8_characters_is_8bit_text_with_a_note(tmp_path):
    """One UTF-8 é and one latin1 é: damaged UTF-8 only where the UTF-8 characters outnumber the stray bytes."""
    path = tmp_path / "tie.txt"
    path.write_bytes("one café here\n".encode() + b"and caf\xe9 there\n" + b"the cat sat\n" * 50)
    with pytest.raises(UserError, match=r"is not UTF-8 \(byte 0xe9 at offset 22, line 2\), though some of its "
                                        r"characters read as UTF-8 .* iconv -f latin1 "):
        prep.read_text_file(path)


def test_a_dead_preparations_temp_folder_is_swept(tmp_path):
    """A preparation killed mid-write leaves .NAME.PID.XXXXXXXX.tmp, for settings maybe never prepared again:
    the next preparation of any setting removes it (its writer is dead)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    prepared = tmp_path / "prepared"
    stale = prepared / f".other-char-0123456789.{dead.pid}.abcdefgh.tmp"
    stale.mkdir(parents=True)
    (stale / "train.bin").write_bytes(b"\0" * 64)
    text = tmp_path / "a.txt"
    text.write_text("the cat sat on the mat\n" * 20)
    out = prep.prepare(config(text, prepared), show_progress=False)
    assert sorted(p.name for p in prepared.iterdir()) == [out.name]


def test_an_outdated_prepared_folder_that_is_a_link_is_replaced_not_what_it_leads_to(tmp_path):
    """A link where the prepared folder goes, to the user's folder: the link is replaced, the folder and
    its files are left alone (not refused as a preparation holding foreign files)."""
    text = tmp_path / "a.txt"
    text.write_text("the cat sat on the mat\n" * 20)
    cfg = config(text, tmp_path / "prepared")
    out = prep.prepare(cfg, show_progress=False)
    shutil.rmtree(out)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    out.symlink_to(tmp_path / "mine")
    assert prep.prepare(cfg, show_progress=False) == out
    assert out.is_dir() and not out.is_symlink() and (out / "meta.json").is_file()
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_a_good_download_of_tiny_shakespeare_is_saved_and_reused_offline(tmp_path, monkeypatch):
    """A download that passes the sha256 check is kept, and read again the next time, not fetched again:
    offline, data.dataset=shakespeare still prepares (a stand-in text, its digest the expected one)."""
    text = b"First Citizen:\nBefore we proceed any further, hear me speak.\n"
    monkeypatch.setattr(prep, "SHAKESPEARE_CHARS", len(text))
    monkeypatch.setattr(prep, "SHAKESPEARE_SHA256", hashlib.sha256(text).hexdigest())
    monkeypatch.setattr(prep.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(text))
    path = prep.download_shakespeare(tmp_path)
    assert path.read_bytes() == text
    monkeypatch.setattr(prep.urllib.request, "urlopen", lambda *a, **k: pytest.fail("downloaded again"))
    assert prep.download_shakespeare(tmp_path) == path


def test_the_val_split_is_the_last_val_fraction_of_the_tokens_rounded_down(tmp_path):
    """The text is one stream of tokens: its last data.val_fraction (int(): a part of a token is not one) is
    the val split, the rest before it the train split."""
    text = tmp_path / "corpus.txt"
    text.write_text(("abcdefghi\n" * 4)[:39])  # 39 * 0.25 = 9.75 tokens: 9 val
    cfg = config(text, tmp_path / "prepared")
    cfg.data.val_fraction = 0.25
    data = prep.load_prepared(prep.prepare(cfg, show_progress=False))
    whole = text.read_text()
    n_val = int(len(whole) * cfg.data.val_fraction)
    assert (len(data.train), len(data.val)) == (len(whole) - n_val, n_val)
    assert data.tokenizer.decode([int(i) for i in data.train]) == whole[:len(whole) - n_val]
    assert data.tokenizer.decode([int(i) for i in data.val]) == whole[len(whole) - n_val:]
    cfg.data.tokenizer = "word"  # (meta.json's chars: the text's, not its tokens', whatever the tokenizer)
    assert prep.load_prepared(prep.prepare(cfg, show_progress=False)).meta["chars"] == len(whole)


def test_a_long_unspaced_text_for_a_tiktoken_encoding_is_said_first_without_the_ranks(tmp_path, monkeypatch, capsys):
    """test_encoding_a_long_text_without_spaces_with_tiktoken_is_said_first skips without GPT-2's ranks: the
    same rule with a stand-in tokenizer, so the note is checked everywhere (a long spaced text gets none)."""
    build = prep.build_tokenizer
    monkeypatch.setattr(prep, "build_tokenizer", lambda name, text, **kw: build("char", text))
    check_the_unspaced_note(tmp_path, monkeypatch, capsys)


def test_a_file_deleted_between_the_walk_and_its_stat_is_a_change_not_a_traceback(tmp_path, monkeypatch):
    """The last look at the source (its size and times) finds the file gone after the walk named it: an
    OSError from its stat, refused as a change like any other (it was a FileNotFoundError traceback)."""
    text = tmp_path / "corpus.txt"
    text.write_text("the cat sat on the mat\n" * 200)
    monkeypatch.setattr(prep, "source_files", lambda *a, **k: [text])  # (the walk still names it)
    encode = prep._encode

    def encode_then_delete(*args, **kwargs):
        text.unlink()
        return encode(*args, **kwargs)
    monkeypatch.setattr(prep, "_encode", encode_then_delete)
    with pytest.raises(UserError, match=f"{re.escape(str(text))}.* changed while it was being prepared; run again"):
        prep.prepare(config(text, tmp_path / "prepared"), show_progress=False)
    assert not (tmp_path / "prepared").exists()


def test_python_m_data_prepare_prints_its_folder_each_splits_tokens_and_the_vocabulary(tmp_path, capsys):
    """The line `python -m data.prepare` prints: the folder as shown_path shows it (a tab in its name quoted),
    each split's own token count, the vocabulary (no BPE note for a char run) and its dtype."""
    from tinygpt.errors import shell_quote
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\n" * 50)
    prepared = tmp_path / "p\tq"
    out = prep.main([str(ROOT / "configs/shakespeare_char.yaml"), "--set", f"data.dataset={text}",
                     f"data.prepared_dir={prepared}"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["train_tokens"] != meta["val_tokens"]
    assert capsys.readouterr().out == (f"{shell_quote(str(out))}: {meta['train_tokens']:,} train + "
                                       f"{meta['val_tokens']:,} val tokens, vocab {meta['vocab_size']:,} "
                                       f"({meta['dtype']})\n")


def test_python_m_data_prepare_takes_set_more_than_once_or_not_at_all(tmp_path, monkeypatch):
    """`--set A --set B` applies both groups (not only the last); a config without --set is prepared too."""
    import urllib.error

    def offline(url, timeout):
        raise urllib.error.URLError("no network")
    monkeypatch.setattr(prep.urllib.request, "urlopen", offline)  # shakespeare.yaml's own dataset: never fetched
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\n" * 50)
    prepared = tmp_path / "prepared"
    out = prep.main([str(ROOT / "configs/shakespeare_char.yaml"), "--set", f"data.dataset={text}",
                     "--set", f"data.prepared_dir={prepared}"])
    assert out.parent == prepared
    assert prep.load_prepared(out).meta["chars"] == len(text.read_text())
    own = tmp_path / "own.yaml"
    own.write_text(f"data:\n  dataset: {text}\n  tokenizer: char\n  prepared_dir: {prepared}\n")
    assert prep.main([str(own)]) == out


def test_python_m_data_prepare_says_when_the_val_split_is_too_short_for_the_configs_model(tmp_path, capsys):
    """A train split long enough beside a val split of no more than model.block_size tokens: the note names
    the val split (train.py refuses either)."""
    source = ROOT / "configs/shakespeare_char.yaml"
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\n" * 100)
    out = prep.main([str(source), "--set", f"data.dataset={text}", f"data.prepared_dir={tmp_path / 'p'}",
                     "data.val_fraction=0.02"])
    meta = json.loads((out / "meta.json").read_text())
    block = load_config(source).model.block_size
    assert meta["val_tokens"] <= block < meta["train_tokens"]
    assert capsys.readouterr().err.startswith(f"note: train.py will refuse this config on this data: the val split "
                                              f"has {meta['val_tokens']:,} token")

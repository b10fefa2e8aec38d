"""Guards tinygpt/tokenizer.py: char and tiktoken BPE round trips, the compact BPE vocabulary (closed
under BPE merges, encoded by BPE restricted to it; the byte fallback of older vocabularies), the
closest-word suggestions for unknown words, stream decoding of characters split across tokens, plain-data save/load (also through
JSON), and the one-line user errors (unknown characters, unknown encoding, encoding not loadable
offline, a damaged compact vocabulary: never tiktoken's panic). BPE logic is tested on a hand-built
tiktoken Encoding; the real GPT-2 ranks are used only when the test data folder
(conftest.SHARED_DATA) holds r50k_base.tiktoken. No test touches the network.
"""
from __future__ import annotations

import json
import os
import random
import re

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from conftest import r50k_cache
from tinygpt import tokenizer as tk
from tinygpt.errors import UserError
from tinygpt.tokenizer import (CharTokenizer, TiktokenTokenizer, WordTokenizer, build_tokenizer, encode_prompt,
                       get_tiktoken_encoding, tokenizer_from_dict)

UNICODE_PARAGRAPH = ("Once upon a time, Zoë met a café owner in Zürich.\n"
                     "She said: «naïve» — 你好, 世界! Emoji: 🐈‍⬛ and \t tabs.\n<|endoftext|> stays text.")


def _no_network(*args, **kwargs):
    raise ConnectionError("network disabled in tests")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Every test: no downloads, and fresh encoding caches (ours and tiktoken's) before and after."""
    monkeypatch.setattr(tiktoken.load, "read_file", _no_network)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    get_tiktoken_encoding.cache_clear()
    yield
    get_tiktoken_encoding.cache_clear()


# ---- char ----

def test_char_round_trip_and_vocab():
    text = "hello world\nthe cat sat on the mat.\n"
    tok = build_tokenizer("char", text)
    assert tok.kind == "char"
    assert tok.vocab_size == len(set(text))
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.encode("\n ") == [0, 1]  # sorted order: "\n" < " " < letters
    assert tok.token_str(tok.encode("\n")[0]) == "\\n"
    assert tok.token_str(tok.encode(" ")[0]) == " "


def test_char_unknown_characters_are_listed():
    tok = CharTokenizer.from_text("abc abc")
    with pytest.raises(UserError) as err:
        tok.encode("abZcé")
    msg = str(err.value)
    assert "'Z', 'é'" in msg and "training text" in msg and "\n" not in msg


def test_char_stream_decoder_one_char_per_id():
    tok = CharTokenizer.from_text("Zoë\n")
    dec = tok.stream_decoder()
    assert [dec.push(i) for i in tok.encode("Zoë")] == ["Z", "o", "ë"]
    assert dec.flush() == ""


def test_char_dict_round_trip_through_json():
    text = "Quoth the raven, \"Nevermore.\"\n\tẞ"
    tok = build_tokenizer("char", text)
    d = json.loads(json.dumps(tok.to_dict()))
    assert d["kind"] == "char"
    back = tokenizer_from_dict(d)
    assert isinstance(back, CharTokenizer)
    assert back.vocab_size == tok.vocab_size and back.encode(text) == tok.encode(text)


# ---- word ----

def test_word_tokens_carry_their_space_and_round_trip():
    tok = build_tokenizer("word", UNICODE_PARAGRAPH + "  two spaces, 42 apples. Then she fed her cat.\n")
    assert tok.kind == "word"
    ids = tok.encode(" Then she fed her cat.\n")
    assert [tok.decode([i]) for i in ids] == [" Then", " she", " fed", " her", " cat", ".", "\n"]
    for text in (UNICODE_PARAGRAPH, "  two spaces, 42 apples."):
        ids = tok.encode(text)
        assert all(0 <= i < tok.vocab_size for i in ids) and tok.decode(ids) == text
    assert [tok.decode([i]) for i in tok.encode(" Zoë met")] == [" Zoë", " met"]
    assert [tok.decode([i]) for i in tok.encode("  two")] == [" ", " two"]
    assert tok.token_str(tok.encode("\n")[0]) == "\\n"
    dec = tok.stream_decoder()
    assert "".join(dec.push(i) for i in tok.encode(UNICODE_PARAGRAPH)) + dec.flush() == UNICODE_PARAGRAPH


def test_a_word_keeps_its_combining_marks():
    """Python's \\w holds no combining mark: 'près' written decomposed (e + U+0300) was ' pre', '\\u0300', 's', and
    'café' shared ' cafe' with 'cafe'; a Hindi word split at every vowel sign (3 words: 16 pieces)."""
    import unicodedata
    text = unicodedata.normalize("NFD", "le café est près de la rivière. ") + "नमस्ते दुनिया हिन्दी, cafe"
    pieces = WordTokenizer.split(text)
    assert "".join(pieces) == text  # every character in exactly one piece
    assert pieces == ["le", unicodedata.normalize("NFD", " café"), " est", unicodedata.normalize("NFD", " près"),
                      " de", " la", unicodedata.normalize("NFD", " rivière"), ".", " नमस्ते", " दुनिया",
                      " हिन्दी", ",", " cafe"]
    assert WordTokenizer.split("1\u0301 \u0301x") == ["1", "\u0301", " \u0301", "x"]  # a mark on no letter: alone
    tok = build_tokenizer("word", text)
    assert tok.decode(tok.encode(text)) == text and tok.vocab_size == len(set(pieces))


def test_word_unknown_words_are_listed():
    tok = WordTokenizer.from_text("the cat sat on the mat.")
    assert tok.decode(tok.encode("the mat sat on the cat.")) == "the mat sat on the cat."
    with pytest.raises(UserError) as err:
        tok.encode("the dog sat on the rug")
    msg = str(err.value)
    assert "' dog', ' rug'" in msg and "word vocabulary" in msg and "\n" not in msg
    for prompt in ("the cat ", "the  cat"):  # (the second's space alone is inside: "trailing" alone misled)
        with pytest.raises(UserError, match="so a space alone is no token: end a prompt without a trailing space, "
                                            "and put one space between words$"):
            tok.encode(prompt)


def test_unknown_words_get_the_closest_vocabulary_words():
    tok = WordTokenizer.from_text("Mia had a red kite. Then she picked up her dragonfly and his hat.")
    assert tok.closest(" dragon") == [" dragonfly"]
    assert tok.closest("hi") == [" his"]
    assert tok.closest("Red") == [" red"]  # case and the leading space do not matter
    assert tok.closest(" ") == [] and tok.closest(" zzzzzz") == []
    with pytest.raises(UserError) as err:
        tok.encode("hi dragon")
    msg = str(err.value)
    assert "'hi' (closest: ' his'" in msg and "' dragon' (closest: ' dragonfly')" in msg
    assert msg.endswith("e.g. ' Then', ' a', ' and', ' dragonfly', ' had', ' hat', ' her', ' his'")  # a taste
    char = CharTokenizer.from_text("abc")
    with pytest.raises(UserError, match=r"'C' \(closest: 'c'\)"):
        char.encode("aC")


def test_unknown_words_of_a_million_word_vocabulary_are_refused_at_once():
    """closest built a table of the whole vocabulary and ran difflib over all of it, once per
    unknown word: a prompt of 10 unknown words took ~45 s with these 1,048,576 words (minutes
    with 2M). Now a large vocabulary's words that sort nearest are compared: the suggestions are
    still as close as any word of it can be (5 letters of 8 in order: difflib's ratio 10/13)."""
    import difflib
    import itertools
    import time
    tok = WordTokenizer([" " + "".join(w) for w in itertools.product("abcdefghijklmnop", repeat=5)])
    unknown = ["abcdefgh", "ponmlkji", "aabbccdd", "ghijklmn", "mnopabcd",
               "fedcbapo", "ijklijkl", "pppooonn", "acegikmo", "bdfhjlnp"]
    t0 = time.process_time()
    with pytest.raises(UserError, match="text has 10 word"):
        tok.encode("".join(" " + w for w in unknown))
    assert time.process_time() - t0 < 3
    for word in unknown[:3]:
        near = tok.closest(" " + word)
        assert len(near) == 3 and all(difflib.SequenceMatcher(None, word, w.strip()).ratio() == 10 / 13
                                      for w in near)
    assert tok.closest("Abcdex")[0] == " abcde"  # case and the leading space still do not matter


def test_word_dict_round_trip_through_json():
    tok = build_tokenizer("word", UNICODE_PARAGRAPH)
    back = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert isinstance(back, WordTokenizer)
    assert back.vocab_size == tok.vocab_size and back.encode(UNICODE_PARAGRAPH) == tok.encode(UNICODE_PARAGRAPH)


@pytest.mark.parametrize("bad", [
    {"kind": "word"}, {"kind": "word", "words": []}, {"kind": "word", "words": ["b", "a"]},
    {"kind": "word", "words": ["a", "a"]}, {"kind": "word", "words": ["a", 1]},
    {"kind": "word", "words": ["a", "b"], "vocab_size": 3},
    None, [], {}, {"kind": "sentencepiece"}, {"kind": "char"}, {"kind": "char", "chars": "ba"},
    {"kind": "char", "chars": "ab", "vocab_size": 3}, {"kind": "char", "chars": "ab", "vocab_size": 1},
    {"kind": "tiktoken"},
    {"kind": "tiktoken", "encoding": "r50k_base", "ids": "0 1 2"}, {"kind": "char", "chars": ""},
    {"kind": "bpe", "merges": [[97, 256]]}, {"kind": "bpe", "merges": [[256, 97]]},  # (256: the first id not yet made)
    {"kind": "bpe", "merges": [[32, 32], [32, 32]]},  # (the same token twice)
    {"kind": "bpe", "vocab_size": 257, "merges": [[True, False]]},  # (booleans are no token ids)
])
def test_from_dict_rejects_malformed(bad):
    with pytest.raises(UserError):
        tokenizer_from_dict(bad)


def test_a_compact_tiktoken_vocabulary_whose_size_is_not_its_ids_is_damaged_without_the_encodings_file():
    """Checked before the encoding is loaded (offline here): the error blames the data, not the network, and
    export.py's import, which never loads the encoding, gets the check too."""
    with pytest.raises(tk.DamagedTokenizer, match=r"says vocab_size=300 but lists 256 ids$"):
        tk.tiktoken_data({"kind": "tiktoken", "encoding": "gpt2", "ids": list(range(256)), "vocab_size": 300})


def test_tiktoken_data_is_checked_as_far_as_it_can_be_without_the_encodings_file():
    """What an import (export.py --from-hf, offline) checks: GPT-2's size under either of its names, a saved
    size that may be absent, the single-byte tokens of the encodings that number them 0..255 (p50k_base too),
    and how many of them a damaged vocabulary lacks."""
    assert tk.tiktoken_data({"kind": "tiktoken", "encoding": "gpt2"}) == ("gpt2", None)
    for name in ("gpt2", "r50k_base"):
        with pytest.raises(tk.DamagedTokenizer, match=rf"says vocab_size=50000 but encoding '{name}' has 50257 tokens"):
            tk.tiktoken_data({"kind": "tiktoken", "encoding": name, "vocab_size": 50000})
    with pytest.raises(tk.DamagedTokenizer, match=r"lacks the single-byte token of id 0 \(and 1 more\): BPE needs all "
                                                  r"256"):
        tk.tiktoken_data({"kind": "tiktoken", "encoding": "gpt2", "ids": [*range(2, 256), 300, 301]})
    with pytest.raises(tk.DamagedTokenizer, match=r"'p50k_base' lacks the single-byte token of id 0: "):
        tk.tiktoken_data({"kind": "tiktoken", "encoding": "p50k_base", "ids": [*range(1, 256), 300]})


def test_a_token_label_puts_a_leading_mark_of_any_kind_on_a_circle_and_spells_bytes():
    """Combining marks of every kind (Mn, Mc, Me) start a label on the dotted circle, only where they start it;
    bytes that are no UTF-8 read \\xNN, from \\x80 to \\xff, and no other code point does."""
    circled = ["\u25cc\u0903", "\u25cc\u20dd", "\u25cc\u0301a", "a\u0301"]
    assert [tk._escape(s) for s in ("\u0903", "\u20dd", "\u0301a", "a\u0301")] == circled
    assert tk._escape(b"\x80\xff".decode("utf-8", "surrogateescape")) == "\\x80\\xff"
    assert tk._escape("\udc41") == "\\udc41"


def test_learning_a_few_merges_is_checked_at_the_smallest_cost_a_node(monkeypatch):
    from tinygpt import runtime
    asked = []
    monkeypatch.setattr(runtime, "check_memory", lambda need, *args: asked.append(sum(need.values())))
    tk.check_learning_memory(1000, 100)  # (under 768 merges: the table's smallest, 90 bytes a node)
    tk.check_learning_memory(1000, 8000)
    assert asked == [90_000, 170_000]


def test_text_files_are_read_without_a_byte_order_mark_and_with_newline_line_ends():
    """A Windows file's BOM and '\r\n' would be tokens of their own ('\r' in no other file's vocabulary)."""
    assert tk.clean_text("\ufeffab\r\nba\r\n") == "ab\nba\n"
    assert build_tokenizer("char", tk.clean_text("\ufeffab\r\nba\r\n")).chars == "\nab"
    assert tk.clean_text("a\ufeff\rb") == "a\ufeff\rb"  # (only a leading mark; a lone \r is text)


def test_an_empty_prompt_starts_from_a_newline_or_token_0():
    with_newline = CharTokenizer.from_text("ab\n cd")
    assert with_newline.decode(encode_prompt(with_newline, "")) == "\n"
    assert encode_prompt(CharTokenizer.from_text("bcd"), "") == [0]


def test_the_examples_of_an_unknown_word_are_words_and_a_char_vocabulary_points_to_bpe():
    with pytest.raises(UserError) as err:
        WordTokenizer.from_text("a, b; c!\n d? e: f.\n g").encode("zz")
    assert str(err.value).endswith("e.g. ' b', ' c', ' d', ' e', ' f', ' g', 'a'")  # (no '\n', '!' or ',')
    with pytest.raises(UserError, match=r"e\.g\. 'a', 'b', 'c'; or train with a byte-level BPE tokenizer, which spells "
                                        r"any text \(data\.tokenizer=bpe\)$"):
        CharTokenizer.from_text("abc").encode("abZ")


# ---- BPE on a hand-built encoding ----

def _toy_encoding() -> tiktoken.Encoding:
    """All 256 single bytes (rank = byte value) plus a few merges, including 'é' as one token."""
    ranks = {bytes([b]): b for b in range(256)}
    for merge in [b"th", b"the", b" t", b" the", b"at", b" c", b" cat", b" s", b" sat",
                  b"\xc3\xa9", b"caf", b"caf\xc3\xa9"]:
        ranks[merge] = len(ranks)
    return tiktoken.Encoding(
        name="toy", pat_str=r"""'s|'t| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        mergeable_ranks=ranks, special_tokens={"<|endoftext|>": len(ranks)})


@pytest.fixture
def toy(monkeypatch):
    """The toy encoding, also reachable by name so that to_dict/from_dict round trips work."""
    enc = _toy_encoding()
    names = tk.tiktoken_names()
    monkeypatch.setattr(tk, "get_tiktoken_encoding", lambda name: enc)
    monkeypatch.setattr(tk, "tiktoken_names", lambda: [*names, "toy"])
    return enc


def test_bpe_merges_follow_tiktoken():
    ranks = _toy_encoding()._mergeable_ranks
    assert tk.bpe_merges(b" cat", ranks) == [(b"a", b"t"), (b" ", b"c"), (b" c", b"at")]
    assert tk.bpe_merges(b"the", ranks) == [(b"t", b"h"), (b"th", b"e")]
    assert tk.bpe_merges(b"xyz", ranks) == []
    assert tk.closed_vocab([ranks[b" cat"]], ranks) == sorted(ranks[t] for t in (b"at", b" c", b" cat"))


def test_bpe_merges_the_leftmost_pair_on_a_tie():
    """In "aaa" both pairs form "aa" (the same rank): tiktoken merges the leftmost, so "aaa" is made
    of ("aa", "a"), never ("a", "aa")."""
    ranks = {bytes([b]): b for b in range(256)} | {b"aa": 256, b"aaa": 257}
    assert tk.bpe_merges(b"aaa", ranks) == [(b"a", b"a"), (b"aa", b"a")]


def test_bpe_merges_of_a_long_token_take_l_log_l_steps_not_l_squared():
    """export.py replays BPE on every token of the vocabulary: rescanning every pair after every merge, a
    1.4 MB checkpoint of 63,000 tokens of 1,024 bytes took 73 minutes. Counted in rank lookups, with the
    same merges as that rescan (a chain of doublings: a, aa, aaaa, ... 1,024 a's; and one more byte)."""
    class Counted(dict):
        lookups = 0

        def get(self, key, default=None):
            Counted.lookups += 1
            return super().get(key, default)

    ranks = Counted({b"a" * 2**k: k for k in range(11)})
    merges = tk.bpe_merges(b"a" * 1024, ranks)
    assert len(merges) == 1023 and merges[-1] == (b"a" * 512, b"a" * 512) and merges[0] == (b"a", b"a")
    assert Counted.lookups < 4 * 1024  # a rescan after each merge: about 1024 * 1024 / 2
    assert tk.bpe_merges(b"a" * 1025, ranks)[-1] == (b"a" * 512, b"a" * 512)  # the last byte stays alone


def _rescanning_bpe_merges(piece: bytes, ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """bpe_merges as it was until 2026-12 (commit 0ed9f7d): every adjacent pair rescanned after every merge."""
    parts, merges = [piece[i:i + 1] for i in range(len(piece))], []
    while len(parts) > 1:
        found = [(ranks[parts[i] + parts[i + 1]], i) for i in range(len(parts) - 1) if parts[i] + parts[i + 1] in ranks]
        if not found:
            break
        _, i = min(found)  # the lowest rank, the leftmost on a tie
        merges.append((parts[i], parts[i + 1]))
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return merges


def test_bpe_merges_are_the_rescans_on_random_vocabularies():
    """The heap gives the merges of the plain rescan, ties included (a token formed at two places at once)."""
    rng = random.Random(0)
    for _ in range(200):
        tokens = {bytes([c]) for c in b"abc"}
        while len(tokens) < 30:
            tokens.add(bytes(rng.choice(b"abc") for _ in range(rng.randint(2, 6))))
        ranks = {t: r for r, t in enumerate(rng.sample(sorted(tokens), len(tokens)))}
        for _ in range(20):
            piece = bytes(rng.choice(b"abc") for _ in range(rng.randint(0, 30)))
            assert tk.bpe_merges(piece, ranks) == _rescanning_bpe_merges(piece, ranks), (piece, ranks)


def test_bpe_compact_vocab_and_remap(toy):
    text = "the cat sat"
    tok = TiktokenTokenizer.from_text("toy", text, encoding=toy)
    seen = set(toy.encode_ordinary(text))
    assert seen - set(range(256))  # the text does use merged tokens
    # kept: the tokens seen, every single byte, and the tokens BPE forms on the way to the seen ones
    on_the_way = {toy.encode_single_token(t) for t in (b"th", b"at", b" c", b" s")}
    assert tok.ids.tolist() == sorted(seen | set(range(256)) | on_the_way)  # sorted by original id
    ids = tok.encode(text)
    assert tok.ids[ids].tolist() == toy.encode_ordinary(text)  # same tokens, renumbered
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.token_str(tok.encode(" cat")[0]) == " cat"


def test_bpe_unseen_tokens_use_the_kept_merges(toy):
    tok = TiktokenTokenizer.from_text("toy", "the cat sat", encoding=toy)
    assert len(toy.encode_ordinary("café")) == 1  # one token in the full encoding ...
    ids = tok.encode("café")
    assert len(ids) == 5  # ... but no kept token merges its bytes, so it is spelled out byte by byte
    assert [tok.ids[i] for i in ids] == list("café".encode())
    assert tok.decode(ids) == "café"
    assert tok.token_str(ids[-2]) == "\\xc3"  # half a character, shown as its byte
    # " the" is one unseen token; BPE over the kept tokens still makes "the" of its bytes
    assert [tok.token_str(i) for i in tok.encode(" the")] == [" ", "the"]
    text = "the naïve café said 'hi' <|endoftext|> 🐈\n"
    assert tok.decode(tok.encode(text)) == text  # any text round trips, specials as plain text


def test_bpe_vocabulary_saved_before_closing_keeps_its_byte_fallback(toy):
    old = {"kind": "tiktoken", "vocab_size": 259, "encoding": "toy",
           "ids": list(range(256)) + [toy.encode_single_token(t) for t in (b"the", b" cat", b" sat")]}
    tok = tokenizer_from_dict(old)  # no "closed": its compact ids came from the full encoding
    assert not tok.closed
    assert [tok.token_str(i) for i in tok.encode(" the cat")] == [" ", "t", "h", "e", " cat"]


def test_a_damaged_compact_vocabulary_is_one_line_never_a_panic(toy):
    """A compact vocabulary without a single-byte token made tiktoken panic when encoding (a Rust
    `no entry found for key`, a BaseException that no `except Exception` catches), an id past int64
    overflowed numpy, and a special token's id went in unchecked: each is refused as the tokenizer is
    rebuilt from its data, naming the id."""
    good = build_tokenizer("toy", "the cat sat").to_dict()
    a = good["ids"].index(ord("a"))  # the single-byte token of "a": its id is the byte's value

    def damaged(new_id):
        return {**good, "ids": [*good["ids"][:a], *([] if new_id is None else [new_id]), *good["ids"][a + 1:]],
                "vocab_size": good["vocab_size"] - (new_id is None)}
    for new_id, match in [(toy.eot_token, f"holds id {toy.eot_token}, which names no BPE token"),
                          (2**70, f"holds id {2**70}, which names no BPE token"),
                          (-1, "holds id -1, which names no BPE token"), (ord("b"), "holds id 98 twice"),
                          (None, "lacks the single-byte token of id 97: BPE needs all 256")]:
        with pytest.raises(UserError, match=match) as err:
            tokenizer_from_dict(damaged(new_id)).encode("a cat")
        assert "\n" not in str(err.value) and isinstance(err.value, tk.DamagedTokenizer)  # (its reader names the file)
    # without the encoding's file (an import), what the ids alone show: OpenAI's encodings number
    # their single-byte tokens 0..255
    gpt2 = {"kind": "tiktoken", "encoding": "gpt2", "vocab_size": 257, "ids": [*range(256), 2**40]}
    with pytest.raises(UserError, match=f"holds id {2**40}, which names no BPE token"):
        tk.tiktoken_data(gpt2)
    with pytest.raises(UserError, match="lacks the single-byte token of id 64: BPE"):
        tokenizer_from_dict({**gpt2, "ids": [50256 if i == 64 else i for i in range(257)]})  # never loads it


def test_bpe_full_vocab(toy):
    tok = TiktokenTokenizer.from_text("toy", "the cat", compact=False, encoding=toy)
    assert tok.vocab_size == toy.n_vocab and tok.ids is None
    assert tok.encode("the café") == toy.encode_ordinary("the café")
    assert tok.decode(tok.encode("the café")) == "the café"
    assert tok.token_str(toy.n_vocab - 1) == "<|endoftext|>"
    for bad in (toy.n_vocab, -1):  # (a negative id would index from the end: the last token, silently)
        with pytest.raises(ValueError, match=rf"token ids \[{bad}\] are outside the vocabulary"):
            tok.decode([bad])
    with pytest.raises(ValueError, match=r"token ids \[-1\] are outside the vocabulary 0\.\.2"):
        CharTokenizer.from_text("abc").decode([-1])


def test_bpe_stream_decoder_joins_split_character(toy):
    tok = TiktokenTokenizer.from_text("toy", "the cat", encoding=toy)
    ids = tok.encode("é!")
    assert len(ids) == 3  # 0xc3, 0xa9, '!'
    dec = tok.stream_decoder()
    assert [dec.push(i) for i in ids] == ["", "é", "!"]
    assert dec.flush() == ""
    dec = tok.stream_decoder()
    assert dec.push(ids[0]) == "" and dec.flush() == "\ufffd"  # a stream cut mid-character


def test_bpe_decode_of_half_a_character_is_a_replacement_character(toy):
    """A token holding only the first byte of 'é' (0xc3) decodes to U+FFFD, not to nothing."""
    tok = TiktokenTokenizer.from_text("toy", "the cat", encoding=toy)
    first_byte = tok.encode("é")[0]
    assert tok.decode([first_byte]) == "\ufffd"
    assert tok.decode([first_byte, *tok.encode("!")]) == "\ufffd!"


def test_bpe_dict_round_trip_through_json(toy):
    text = "the cat sat on the mat"
    for compact in (True, False):
        tok = build_tokenizer("toy", text, compact=compact)
        d = json.loads(json.dumps(tok.to_dict()))
        assert d["kind"] == "tiktoken" and d["encoding"] == "toy" and ("ids" in d) == compact
        assert d.get("closed") is (True if compact else None)
        back = tokenizer_from_dict(d)
        assert isinstance(back, TiktokenTokenizer) and back.vocab_size == tok.vocab_size
        assert back.encode(text + " café") == tok.encode(text + " café")


# ---- tiktoken loading ----

def test_unknown_encoding_lists_names():
    with pytest.raises(UserError) as err:
        get_tiktoken_encoding("gpt5_base")
    assert "gpt5_base" in str(err.value) and "r50k_base" in str(err.value) and "cl100k_base" in str(err.value)


@pytest.mark.parametrize("name", ["gpt2", "r50k_base", "cl100k_base"])
def test_offline_without_cache_is_a_user_error(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(UserError) as err:
        build_tokenizer(name, "hello")
    msg = str(err.value)
    assert "TIKTOKEN_CACHE_DIR" in msg and "\n" not in msg
    # the same error when sampling a run of those tokens: the advice must fit both (it said "or train with")
    assert "a new run can use data.tokenizer=bpe, char or word instead" in msg


def test_the_cache_folder_is_tiktokens_own_choice(tmp_path, monkeypatch):
    """TIKTOKEN_CACHE_DIR before DATA_GYM_CACHE_DIR, as tiktoken reads them: a check of the other folder's file
    refused an encoding tiktoken would load; and the offline advice names the variable the user set."""
    import tempfile
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    assert tk.tiktoken_cache_folder() == os.path.join(tempfile.gettempdir(), "data-gym-cache")
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "gym"))
    assert tk.tiktoken_cache_folder() == str(tmp_path / "gym")
    (tmp_path / "gym").mkdir()
    with pytest.raises(UserError, match=rf"offline, DATA_GYM_CACHE_DIR={re.escape(str(tmp_path / 'gym'))} must hold "
                                        r"the encoding file as [0-9a-f]{40}: copy r50k_base.tiktoken"):
        get_tiktoken_encoding("gpt2")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tik"))
    assert tk.tiktoken_cache_folder() == str(tmp_path / "tik")


def test_a_download_that_never_answers_is_refused_in_bounded_time(tmp_path, monkeypatch):
    """tiktoken downloads its file with no timeout: through a proxy that accepts and never answers,
    `data.prepare`, train.py and sample.py of a gpt2 run hung until killed. The load now has a deadline."""
    import threading
    import time

    import tiktoken

    from tinygpt import tokenizer as tk
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # nothing cached: a download
    answered = threading.Event()

    def never_answers(name):  # (waits 10 s at most: the old code would wait for it, then fail otherwise)
        answered.wait(10)
        raise RuntimeError("the connection was closed")
    monkeypatch.setattr(tiktoken, "get_encoding", never_answers)
    monkeypatch.setattr(tk, "TIKTOKEN_LOAD_S", 0.5)
    started = time.monotonic()
    with pytest.raises(UserError, match=r"could not be loaded: its download from https://\S+r50k_base.tiktoken gave "
                                        r"nothing in 0.5 s .*offline, set TIKTOKEN_CACHE_DIR"):
        get_tiktoken_encoding("gpt2")
    assert time.monotonic() - started < 5
    answered.set()
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: "the encoding")
    assert get_tiktoken_encoding("gpt2") == "the encoding"  # in time: its result


def test_a_damaged_cached_encoding_file_is_named(tmp_path, monkeypatch):
    """A cut r50k_base file in TIKTOKEN_CACHE_DIR: tiktoken removed it without a word and tried the
    network, and the error said to set TIKTOKEN_CACHE_DIR, which the user had done."""
    import hashlib
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    url = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
    cached = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    cached.write_bytes(b"IQ== 0\n")  # one token: not the file tiktoken expects
    with pytest.raises(UserError, match=rf"^the tiktoken encoding 'gpt2' could not be loaded: its cached file "
                                        rf"{re.escape(str(cached))} was damaged .* tiktoken removed it; copy the file "
                                        rf"there again \(e.g. cp r50k_base.tiktoken"):
        build_tokenizer("gpt2", "hello")


def test_a_huge_cache_file_is_refused_before_tiktoken_reads_it(tmp_path, monkeypatch):
    """A sparse 3 GB file (4 KB on disk) under the encoding's name: tiktoken read it whole to hash it,
    3.4 GB and 30 s, before calling it damaged; larger, the process was killed for memory, unsaid."""
    import hashlib
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    url = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
    cached = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    with open(cached, "wb") as f:
        f.truncate(tk.TIKTOKEN_FILE_MAX + 1)
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: pytest.fail("tiktoken read the file"))
    with pytest.raises(UserError, match=rf"^the tiktoken encoding 'gpt2' could not be loaded: its cache file "
                                        rf"{re.escape(str(cached))} is 67,108,865 bytes, not an encoding file "
                                        rf"\(those are 1-4 MB\); put the encoding file there \(e.g. cp "):
        get_tiktoken_encoding("gpt2")
    assert cached.exists()  # (not removed: it may be the user's)


def test_a_damaged_cache_file_that_stays_is_named_not_called_missing(tmp_path, monkeypatch):
    """A damaged file tiktoken could not remove (a read-only folder): the error said the folder must
    hold the file, which it did; an unreadable one alike."""
    import hashlib
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    url = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
    cached = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    cached.write_bytes(b"IQ== 0\n")  # one token: not the file tiktoken expects

    def cannot_remove(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    def offline(blobpath):
        raise ConnectionError("no network")
    monkeypatch.setattr(tiktoken.load.os, "remove", cannot_remove)
    monkeypatch.setattr(tiktoken.load, "read_file", offline)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # (none loaded before, in this process)
    with pytest.raises(UserError, match=rf"^the tiktoken encoding 'gpt2' could not be loaded: its cached file "
                                        rf"{re.escape(str(cached))} is damaged \(not the sha256 tiktoken expects\), "
                                        rf"and tiktoken could not remove it \(a read-only folder\?\); replace it "):
        get_tiktoken_encoding("gpt2")

    def unreadable(name):
        raise PermissionError(13, "Permission denied", str(cached))
    monkeypatch.setattr(tiktoken, "get_encoding", unreadable)
    with pytest.raises(UserError, match=rf"^the tiktoken encoding 'gpt2' could not be loaded: its cache file "
                                        rf"{re.escape(str(cached))} cannot be read \(.*Permission denied.*\)$"):
        get_tiktoken_encoding("gpt2")


def cl100k_cache_file(folder):
    import hashlib
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    return folder / hashlib.sha1(url.encode()).hexdigest()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
@pytest.mark.parametrize("kind", ["a pipe", "a device"])
def test_a_cache_file_that_is_no_regular_file_is_named_before_tiktoken_reads_it(kind, tmp_path, monkeypatch):
    # tiktoken opened whatever was there: a pipe waited for ever, a link to /dev/zero read until the
    # machine ran out of memory
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    cached = cl100k_cache_file(tmp_path)
    if kind == "a pipe":
        os.mkfifo(cached)
    else:
        cached.symlink_to("/dev/zero")
    said = f"{kind}, not a regular file"
    with pytest.raises(UserError, match=rf"^the tiktoken encoding 'cl100k_base' could not be loaded: its cache file "
                                        rf"{re.escape(str(cached))} is {said}; put the encoding file there"):
        build_tokenizer("cl100k_base", "hello")


def test_an_encoding_this_tiktoken_lacks_is_no_damage(monkeypatch):
    # a run on o200k_harmony sampled with an older tiktoken was called damaged ("train it again")
    monkeypatch.setattr(tk, "tiktoken_names", lambda: ["gpt2", "r50k_base", "cl100k_base"])
    version = re.escape(tiktoken.__version__)
    with pytest.raises(UserError, match=rf"^the tokenizer is tiktoken's 'o200k_harmony', which this tiktoken "
                                        rf"\({version}\) does not have: pip install -U tiktoken$") as err:
        tokenizer_from_dict({"kind": "tiktoken", "encoding": "o200k_harmony"})
    assert not isinstance(err.value, tk.DamagedTokenizer)
    with pytest.raises(tk.DamagedTokenizer, match="names 'gpt9', which is no tiktoken encoding"):
        tokenizer_from_dict({"kind": "tiktoken", "encoding": "gpt9"})


@pytest.mark.parametrize("setting", ["empty", "a file"])
def test_a_cache_setting_tiktoken_cannot_use_is_said(setting, tmp_path, monkeypatch):
    # the advice was to copy the file into $TIKTOKEN_CACHE_DIR: empty, that is the root folder, and
    # tiktoken reads no cache at all
    (tmp_path / "notes.txt").write_text("mine")
    value = "" if setting == "empty" else str(tmp_path / "notes.txt")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", value)
    said = "TIKTOKEN_CACHE_DIR is empty, which turns tiktoken's cache off" if setting == "empty" \
        else f"TIKTOKEN_CACHE_DIR={re.escape(value)} is not a folder"
    with pytest.raises(UserError, match=rf"network disabled in tests\); {said}; set TIKTOKEN_CACHE_DIR to a folder "
                                        rf"holding the encoding file"):
        build_tokenizer("cl100k_base", "hello")


def test_a_cache_folder_set_without_the_file_is_told_to_hold_it_not_to_be_set(tmp_path, monkeypatch):
    """TIKTOKEN_CACHE_DIR set to an empty folder: `offline, set TIKTOKEN_CACHE_DIR to a folder holding ...`, a
    variable already set; what is missing is the file, under the name tiktoken looks for."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    key = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"  # sha1 of cl100k_base's URL
    folder = re.escape(str(tmp_path))
    with pytest.raises(UserError, match=rf"network disabled in tests\); offline, TIKTOKEN_CACHE_DIR={folder} "
                                        rf"must hold the encoding file as {key}: copy cl100k_base.tiktoken \(from "
                                        rf"https://\S+\) to {re.escape(str(tmp_path / key))}; a new run"):
        build_tokenizer("cl100k_base", "hello")


@pytest.fixture
def gpt2_offline(tmp_path, monkeypatch):
    """TIKTOKEN_CACHE_DIR holding the GPT-2 ranks (skip if absent)."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(r50k_cache(tmp_path)))


def test_gpt2_ranks_from_offline_cache(gpt2_offline):
    for name in ("gpt2", "r50k_base"):
        full = build_tokenizer(name, "", compact=False)
        assert full.vocab_size == 50257
        assert full.encode("Hello world") == [15496, 995]
        assert full.decode(full.encode(UNICODE_PARAGRAPH)) == UNICODE_PARAGRAPH
        assert full.token_str(198) == "\\n"
    tok = build_tokenizer("gpt2", "Hello world. " + UNICODE_PARAGRAPH[:60])
    assert 256 < tok.vocab_size < 400
    assert tok.decode(tok.encode(UNICODE_PARAGRAPH)) == UNICODE_PARAGRAPH  # byte fallback
    assert tok.ids[tok.encode("Hello world")].tolist() == [15496, 995]
    back = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert back.encode(UNICODE_PARAGRAPH) == tok.encode(UNICODE_PARAGRAPH)
    dec = tok.stream_decoder()
    assert "".join(dec.push(i) for i in tok.encode(UNICODE_PARAGRAPH)) + dec.flush() == UNICODE_PARAGRAPH


def test_a_damaged_gpt2_vocabulary_is_refused(gpt2_offline):
    """The reviewer's case on GPT-2's own ranks: the id of "a" (64) replaced by <|endoftext|>'s (50256)
    or by 2**70 (sample.py: a Rust panic, an OverflowError). The check without the encoding's file
    holds for GPT-2: its single-byte tokens are 0..255."""
    ids = build_tokenizer("gpt2", "Hello world. " + UNICODE_PARAGRAPH).to_dict()["ids"]
    for bad, match in [(50256, "lacks the single-byte token of id 64"), (2**70, f"holds id {2**70}")]:
        with pytest.raises(UserError, match=match):
            tokenizer_from_dict({"kind": "tiktoken", "encoding": "gpt2", "vocab_size": len(ids), "closed": True,
                                 "ids": [bad if i == 64 else i for i in ids]}).encode("a")
    with pytest.raises(UserError, match="holds id 50256, which names no BPE token .*within 0..50255"):
        TiktokenTokenizer("gpt2", [50256 if i == ids[300] else i for i in ids])  # no byte's id: the encoding tells
    tk.check_compact_ids("gpt2", ids)
    ranks = get_tiktoken_encoding("gpt2")._mergeable_ranks
    assert sorted(ranks[bytes([b])] for b in range(256)) == list(range(256))


# ---- a BPE learned from the training text ----


def test_learned_bpe_merges_the_most_frequent_pair_first():
    merges = tk.learn_bpe_merges("aaab aaab aaab ab", 2)
    # pieces "aaab", " aaab" x2, " ab": (a, a) occurs 6 times, (a, b) 4; after merging (a, a),
    # (aa, a) occurs 3 times and (a, b) still 4, so (a, b) is next
    tok = tk.LearnedBPETokenizer(merges)
    assert tok.vocab_size == 258 and merges == [(ord("a"), ord("a")), (ord("a"), ord("b"))]
    assert tok.decode(tok.encode("aaab aaab")) == "aaab aaab"


def test_learned_bpe_round_trips_any_text_and_its_plain_data():
    from data.stories import generate_stories
    text = generate_stories(60_000, 3)[0]
    tok = build_tokenizer("bpe", text, bpe_vocab_size=600)
    assert tok.vocab_size == 600 and tok.kind == "bpe"
    for sample in (text[:2000], UNICODE_PARAGRAPH, "zyzzyva 東京 🙂 never seen\n\n"):
        ids = tok.encode(sample)
        assert tok.decode(ids) == sample and all(0 <= i < 600 for i in ids)
    assert len(tok.encode(text[:2000])) < 0.5 * len(text[:2000].encode())  # it learned to merge
    again = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert again.encode(text[:2000]) == tok.encode(text[:2000]) and again.vocab_size == 600
    with pytest.raises(UserError, match="merge"):
        tokenizer_from_dict({"kind": "bpe", "vocab_size": 257, "merges": [[0, 999]]})


def test_gpt2_split_keeps_contractions_whole():
    """GPT-2's pre-tokenization splits off 'll and 'd as pieces of their own (then spaces join the next word)."""
    import regex  # as learn_bpe_merges splits
    assert regex.findall(tk.GPT2_SPLIT, "they'll we'd") == ["they", "'ll", " we", "'d"]


def test_tokenization_table_counts_the_words_a_tokenizer_splits():
    from scripts.tokenization_table import split_words
    from tinygpt.tokenizer import build_tokenizer
    assert split_words(build_tokenizer("word", "a red kite, a red ball"), ["red", "kite"]) == 0
    assert split_words(build_tokenizer("char", "a red kite"), ["red", "kite", "a"]) == 3  # " a" is 2 chars too


@pytest.mark.parametrize("space", [" ", "\n"])
def test_a_million_whitespace_characters_in_a_row_encode(space):
    # tiktoken's pre-tokenizer panicked (a Rust stack overflow, past `except Exception`) here
    tok = tk.LearnedBPETokenizer([(32, 32), (10, 10)])
    text = "a" + space * 1_000_000 + "b"
    assert tok.decode(tok.encode(text)) == text
    short = "a" + space * 1000 + "b"  # below the limit nothing changes
    assert tok.encode(short) == tok.encoding.encode_ordinary(short)


def test_a_long_whitespace_run_is_given_to_tiktoken_in_parts_of_the_limit():
    """Every part at most LONG_SPACE_RUN: parts ten times longer passed the million-space test (900,000 is
    below tiktoken's panic) and panicked on 3,000,000."""
    class Lengths:  # an encoding that encodes each part as its length
        def encode_ordinary(self, text):
            return [len(text)]
    parts = tk.encode_ordinary(Lengths(), "a" + " " * 3_000_000 + "b")
    assert sum(parts) == 3_000_002 and max(parts) <= tk.LONG_SPACE_RUN + 1 and len(parts) == 30, parts


def test_long_whitespace_runs_below_the_limit_are_found_in_linear_time():
    """The check for runs past LONG_SPACE_RUN scanned each shorter run again from every position in it:
    a 600 kB file of 99,999-space runs took a minute to encode with bpe, a prompt of three 26 s. Two
    runs of 80,000 took 7 s; now milliseconds, and the runs past the limit are found as before."""
    import time
    t0 = time.process_time()
    assert tk.LONG_SPACE.search(" " * 80_000 + "b" + " " * 80_000) is None
    assert time.process_time() - t0 < 1.0  # (linear: about 1 ms)
    n = tk.LONG_SPACE_RUN + 1
    text = " " * n + "a" + "\n" * (n + 5) + "b" + " " * (n - 1)
    assert [m.span() for m in tk.LONG_SPACE.finditer(text)] == [(0, n), (n + 1, 2 * n + 6)]


def test_merges_that_double_a_token_forty_times_are_refused():
    # a 188 KB checkpoint asked for 2**40 bytes this way
    merges = [[32, 32]] + [[256 + i, 256 + i] for i in range(39)]
    with pytest.raises(UserError, match="beyond 1024"):
        tk.tokenizer_from_dict({"kind": "bpe", "merges": merges})
    with pytest.raises(UserError, match="more than 65,280"):
        tk.tokenizer_from_dict({"kind": "bpe", "merges": [[32, 32]] * 65_281})
    # at the bounds: a token of 1024 bytes and a vocabulary of 65,536 are taken, one byte or merge more is not
    doubling = [[97, 97]] + [[256 + i, 256 + i] for i in range(9)]  # "a" * 2 ** 10
    assert max(map(len, tk.tokenizer_from_dict({"kind": "bpe", "merges": doubling}).encoding.token_byte_values())) \
        == 1024 == tk.MAX_TOKEN_BYTES
    with pytest.raises(UserError, match="makes a token of 1,025 bytes, beyond 1024"):
        tk.tokenizer_from_dict({"kind": "bpe", "merges": doubling + [[265, 97]]})
    pairs = [[a, b] for a in range(256) for b in range(256)]  # 65,536 distinct two-byte tokens
    assert tk.tokenizer_from_dict({"kind": "bpe", "merges": pairs[:65_280]}).vocab_size == 65_536
    with pytest.raises(UserError, match="more than 65,280"):
        tk.tokenizer_from_dict({"kind": "bpe", "merges": pairs[:65_281]})


def test_learning_never_makes_a_token_beyond_the_limit():
    text = ("=" * 5000 + "\n") * 20 + "the cat sat on the mat\n" * 20
    tok = tk.LearnedBPETokenizer(tk.learn_bpe_merges(text, 200))
    assert max(len(t) for t in tok.encoding.token_byte_values()) == tk.MAX_TOKEN_BYTES
    assert tok.decode(tok.encode(text)) == text


def _rescanning_learn_bpe_merges(text: str, n_merges: int) -> list[tuple[int, int]]:
    """learn_bpe_merges as it was until 2026-12 (commit 56e5381), which rescanned every piece
    holding the merged pair: minutes for a text without spaces (one piece). The faster learner
    must make exactly its merges."""
    import regex
    from collections import Counter, defaultdict
    counts = Counter(regex.findall(tk.GPT2_SPLIT, text))
    pieces = [list(piece.encode("utf-8")) for piece in counts]
    weight = list(counts.values())
    length = [1] * 256
    pairs: Counter = Counter()
    where: dict = defaultdict(set)

    def count(i, ids):
        for pair in zip(ids, ids[1:]):
            if length[pair[0]] + length[pair[1]] <= tk.MAX_TOKEN_BYTES:
                pairs[pair] += weight[i]
                where[pair].add(i)

    for i, ids in enumerate(pieces):
        count(i, ids)
    merges = []
    while len(merges) < n_merges and pairs:
        best = max(pairs.items(), key=lambda item: (item[1], -item[0][0], -item[0][1]))[0]
        new = 256 + len(merges)
        merges.append(best)
        length.append(length[best[0]] + length[best[1]])
        for i in where.pop(best, ()):
            ids = pieces[i]
            for pair in zip(ids, ids[1:]):
                if pair in pairs:
                    pairs[pair] -= weight[i]
                    if pairs[pair] <= 0:
                        del pairs[pair]
            out, j = [], 0
            while j < len(ids):
                if j + 1 < len(ids) and (ids[j], ids[j + 1]) == best:
                    out.append(new)
                    j += 2
                else:
                    out.append(ids[j])
                    j += 1
            pieces[i] = out
            count(i, out)
    return merges


def _random_text(n: int, alphabet: str, seed: int = 0) -> str:
    import random
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


def _shakespeare() -> str:
    from conftest import SHARED_DATA
    path = SHARED_DATA / "tinyshakespeare.txt"
    if not path.is_file():
        pytest.skip(f"no tiny shakespeare ({path})")
    return path.read_text(encoding="utf-8")


def _stories() -> str:
    from data.stories import generate_stories
    return generate_stories()[0]


@pytest.mark.parametrize("text, n_merges", [
    pytest.param(_shakespeare, 768, id="shakespeare"),
    pytest.param(_stories, 1024 - 256, id="stories"),
    pytest.param(_random_text(4_000, "abcdefghij"), 768, id="letters without spaces"),
    pytest.param(_random_text(6_000, "ab"), 300, id="two letters"),
    pytest.param(_random_text(30_000, "abcde  \n"), 768, id="letters and spaces"),
    pytest.param(_random_text(10_000, "aé東🙂 ,.\n1'"), 500, id="unicode and punctuation"),
    pytest.param(" ".join("a" * k for k in range(1, 60)) + " " + "b" * 33 + "\n" * 9, 200, id="runs"),
    pytest.param("aaaaaaa", 10, id="aaaaaaa"),
    pytest.param(("=" * 5000 + "\n") * 20 + "the cat sat on the mat\n" * 20, 300, id="5000 ="),
    pytest.param(UNICODE_PARAGRAPH * 40 + "🙂" * 300, 300, id="unicode paragraph"),
])
@pytest.mark.slow
def test_learned_merges_are_exactly_the_rescanning_learners(text, n_merges):
    # the same counts (overlapping pairs: "aaa" holds (a, a) twice), ties, merges left to right
    text = text() if callable(text) else text
    assert tk.learn_bpe_merges(text, n_merges) == _rescanning_learn_bpe_merges(text, n_merges)


def test_learned_merges_are_exactly_the_rescanning_learners_under_a_small_length_limit(monkeypatch):
    for limit in (2, 3, 5):
        monkeypatch.setattr(tk, "MAX_TOKEN_BYTES", limit)
        for seed, alphabet in enumerate(["a", "ab", "abc ", "é🙂a ", "=\n"]):
            text = _random_text(3000, alphabet, seed)
            assert tk.learn_bpe_merges(text, 200) == _rescanning_learn_bpe_merges(text, 200), (limit, alphabet)


def test_learning_a_text_without_spaces_takes_a_moment():
    # one 100 KB piece: the rescanning learner took ~30 s (200 KB 66 s, 1 MB 6 minutes), as each
    # merge read the whole piece again; a merge now costs the occurrences it merges (~0.3 s). This
    # file's timings are of this process's CPU time: on a loaded machine the wall clock failed them
    import time
    text = _random_text(100_000, "abcdefghij")
    t0 = time.process_time()
    merges = tk.learn_bpe_merges(text, 768)
    assert len(merges) == 768 and time.process_time() - t0 < 5


def test_an_unknown_combining_mark_is_shown_as_its_escape():
    """'e\u0301' to a char model: the message showed the accent bare, drawn over the quote before it."""
    from tinygpt.tokenizer import CharTokenizer
    from tinygpt.errors import UserError
    with pytest.raises(UserError, match=r"not in the char vocabulary: '\\u0301'"):
        CharTokenizer.from_text("abe").encode("e\u0301")


def test_an_invisible_character_past_ascii_is_not_shown_as_a_byte():
    """A whole no-break space (U+00A0) was shown '\\xa0', as a lone byte 0xa0 of a split character is, and
    the legend then called it one byte: past ASCII, an invisible character is now \\uNNNN."""
    tok = CharTokenizer.from_text("a\u00a0b\u0085c\u00ad\x1b\U000e0001")
    shown = {tok.decode([i]): tok.token_str(i) for i in range(tok.vocab_size)}
    assert shown["\u00a0"] == "\\u00a0" and shown["\u0085"] == "\\u0085" and shown["\u00ad"] == "\\u00ad"
    assert shown["\x1b"] == "\\x1b" and shown["\U000e0001"] == "\\U000e0001"
    bpe = build_tokenizer("bpe", "voil\u00e0\u00a0! " * 50, bpe_vocab_size=300)  # the byte a0, and c2 a0 merged
    assert sorted(s for s in map(bpe.token_str, range(bpe.vocab_size)) if "a0" in s) == ["\\u00a0", "\\xa0"]


# ---- gaps found by a mutation audit ----

def test_unknown_characters_beyond_ten_are_cut_short():
    tok = CharTokenizer("abc")
    with pytest.raises(UserError) as err:
        tok.encode("a0123456789XYZ")
    msg = str(err.value)
    assert msg.startswith("text has 13 character(s) not in the char vocabulary: '0', '1', '2', '3', '4', '5', "
                          "'6', '7', '8', '9', ...; ")
    with pytest.raises(UserError) as err:  # ten: every one shown, nothing cut
        tok.encode("a0123456789")
    assert str(err.value).startswith("text has 10 character(s) not in the char vocabulary: '0', '1', '2', '3', '4', "
                                     "'5', '6', '7', '8', '9'; ")


def test_the_closest_word_keeps_the_typed_words_leading_space():
    """Of two spellings of the closest word, with and without the leading space, the one like the typed piece."""
    tok = WordTokenizer(["hello", " hello"])
    assert tok.closest(" helo") == [" hello"] and tok.closest("helo") == ["hello"]
    tok = WordTokenizer([" hello", "hello"])  # whichever comes first in the vocabulary
    assert tok.closest(" helo") == [" hello"] and tok.closest("helo") == ["hello"]


@pytest.mark.parametrize("kind", [CharTokenizer, WordTokenizer])
@pytest.mark.parametrize("corpus_form", ["NFC", "NFD"])
def test_a_prompt_spelt_in_the_other_unicode_form_is_encoded(kind, corpus_form):
    """"café" typed with a combining accent was refused by a vocabulary learned from "café" with a composed é
    (`' cafe' (closest: ' café'), '\\u0301'`): the two look the same. Either form now encodes, as the corpus's."""
    import unicodedata
    text = unicodedata.normalize(corpus_form, "le café est très bon. " * 20)
    tokenizer = kind.from_text(text)
    as_trained = tokenizer.encode(unicodedata.normalize(corpus_form, "le café"))
    for form in ("NFC", "NFD"):
        assert encode_prompt(tokenizer, unicodedata.normalize(form, "le café")) == as_trained
    with pytest.raises(UserError, match="not in the"):  # what neither form can encode is still refused
        encode_prompt(tokenizer, "le café x")


@pytest.mark.parametrize("bad", [
    {"kind": "char", "chars": "aab"},  # sorted, but a character twice
    {"kind": "word", "words": ["", " cat"]},  # an empty word: a token that spells nothing
    {"kind": "bpe", "merges": [[97, 98, 99]]},  # a merge of three tokens
])
def test_from_dict_refuses_damage_that_the_size_check_does_not_catch(bad):
    """Without a saved vocab_size to compare with, each piece of the data is checked itself, and the
    refusal is DamagedTokenizer, never a ValueError from unpacking."""
    with pytest.raises(tk.DamagedTokenizer):
        tokenizer_from_dict(bad)


def test_a_compact_tiktoken_vocabulary_may_be_saved_without_its_size():
    ids = [*range(256), 300]
    assert tk.tiktoken_data({"kind": "tiktoken", "encoding": "gpt2", "ids": ids}) == ("gpt2", ids)


def test_a_vocabulary_saved_before_closing_stays_unclosed_through_to_dict(toy):
    old = {"kind": "tiktoken", "vocab_size": 259, "encoding": "toy",
           "ids": list(range(256)) + [toy.encode_single_token(t) for t in (b"the", b" cat", b" sat")]}
    tok = tokenizer_from_dict(old)
    again = tokenizer_from_dict(tok.to_dict())
    assert again.closed is tok.closed is False
    assert again.encode(" the cat") == tok.encode(" the cat")


def test_gpt2_and_r50k_base_are_the_same_tokens_but_not_other_encodings():
    gpt2 = {"kind": "tiktoken", "vocab_size": tk.GPT2_VOCAB, "encoding": "gpt2"}
    assert tk.same_tokens(gpt2, {**gpt2, "encoding": "r50k_base"})
    assert not tk.same_tokens(gpt2, {**gpt2, "encoding": "p50k_base"})


def test_the_empty_text_round_trips_in_every_kind(toy):
    for tok in (CharTokenizer.from_text("ab"), WordTokenizer.from_text("a b"),
                TiktokenTokenizer.from_text("toy", "the cat", encoding=toy), TiktokenTokenizer("toy", None, toy)):
        assert tok.encode("") == [] and tok.decode([]) == ""


def test_an_unused_id_of_a_full_vocabulary_decodes_to_a_replacement_character():
    base = tiktoken.Encoding("gap", pat_str=tk.GPT2_SPLIT, mergeable_ranks={bytes([b]): b for b in range(256)},
                             special_tokens={"<|end|>": 300})  # ids 256..299 name nothing
    tok = TiktokenTokenizer("gap", None, encoding=base)
    assert tok.decode([65, 280, 66]) == "A\ufffdB"


def test_a_compact_vocabularys_stream_decoder_prints_its_own_ids(toy):
    tok = TiktokenTokenizer.from_text("toy", " the cat sat", encoding=toy)
    ids = tok.encode(" the cat sat é")
    stream = tok.stream_decoder()
    assert "".join(stream.push(i) for i in ids) + stream.flush() == tok.decode(ids) == " the cat sat é"


def test_booleans_are_no_compact_ids():
    with pytest.raises(tk.DamagedTokenizer, match="malformed 'ids'"):
        tk.tiktoken_data({"kind": "tiktoken", "encoding": "gpt2", "ids": [False, True, *range(2, 256)]})

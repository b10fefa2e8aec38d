"""Tokenizers: text <-> token ids, saved as plain data.

Three kinds, one interface (`Tokenizer`); char and word share `_TableTokenizer`:
- `CharTokenizer`: one token per character; the vocabulary is the sorted set of characters of the
  training text (Karpathy's char-level Shakespeare).
- `WordTokenizer`: one token per word, a run of letters (with the space before it, as GPT-2 does:
  " red"), per number, per punctuation mark and per other whitespace character (a combining mark
  is not a letter to `re`: a token of its own); the vocabulary is the sorted set of the
  training text's tokens. Offline like `char`, and for a closed-vocabulary text such as the stories
  corpus each name and attribute is one token, so a model copies it with one attention hop.
- `TiktokenTokenizer`: a tiktoken BPE encoding (`gpt2`, `r50k_base`, `cl100k_base`, ...). By default
  the vocabulary is *compacted*: only the token ids seen in the training text, the 256
  single-byte tokens and every token BPE forms on the way to a kept one are kept, renumbered
  0..n-1, so a small corpus does not carry ~50k embedding rows that never receive a gradient.
  Text is encoded by BPE restricted to the kept tokens (tiktoken's merge order): the training text
  gets exactly the full encoding's tokens (the kept set is closed under the merges that build them),
  and any other text still encodes, with kept tokens down to single bytes. That is a plain BPE
  (`bpe_merges`), so Hugging Face's `tokenizers` can reproduce it exactly (tinygpt/hf.py).

`to_dict()` returns plain data (str/int/list only) so that a tokenizer fits in a checkpoint loaded
with `torch.load(..., weights_only=True)` and in a JSON file; `tokenizer_from_dict` rebuilds it.
"""
from __future__ import annotations

import bisect
import codecs
import difflib
import functools
import hashlib
import heapq
import os
import re
import unicodedata
from abc import ABC, abstractmethod
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from tinygpt.errors import UserError, reason, short

if TYPE_CHECKING:  # tiktoken is imported lazily: char-level runs do not need it
    import tiktoken

_TIKTOKEN_URL = "https://openaipublic.blob.core.windows.net/encodings/{file}.tiktoken"
# encoding name -> the file tiktoken downloads for it (gpt2 is mapped onto r50k_base, see below)
_TIKTOKEN_FILES = {
    "r50k_base": "r50k_base",
    "p50k_base": "p50k_base",
    "p50k_edit": "p50k_base",
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
}
# tiktoken builds `gpt2` from two files (vocab.bpe, encoder.json); `r50k_base` has the same tokens,
# ids and regex from one file, so loading r50k_base for gpt2 lets one offline file serve both.
_ALIASES = {"gpt2": "r50k_base"}
GPT2_VOCAB = 50257  # tokens of gpt2 / r50k_base: 50,256 BPE tokens and <|endoftext|> = 50256


def _escape(text: str) -> str:
    """Readable one-line form of a token's text: '\\n' for a newline, spaces kept, bad bytes as \\xNN
    (and ASCII's control characters; an invisible one past ASCII as \\uNNNN, a no-break space \\u00a0);
    one that starts with a combining mark (a lone accent, U+0301) shows it on a dotted circle, '◌́',
    as Unicode's charts do: bare, it sat on whatever came before (a column's padding, a table's edge)."""
    out = ["\u25cc"] if text and unicodedata.category(text[0]).startswith("M") else []
    for ch in text:
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not valid UTF-8 on its own (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:  # an ASCII control character: \x1b
            out.append(f"\\x{code:02x}")
        else:  # an invisible character past ASCII: \u00a0, not \xa0, which a lone byte shows as
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return "".join(out)


def quoted(piece: str) -> str:
    """repr(piece) for a message, a combining mark (U+0301, ...) as its escape: bare, it would draw
    over the quote before it."""
    return "".join(f"\\u{ord(c):04x}" if unicodedata.combining(c) else c for c in repr(piece))


# ---- stream decoding ----

class StreamDecoder(ABC):
    """Turns token ids into text one id at a time, for printing while generating."""

    @abstractmethod
    def push(self, id: int) -> str:
        """Add one token id; return the text that is now complete (possibly '')."""

    def flush(self) -> str:
        """Return whatever is still pending at the end of the stream."""
        return ""


class _PieceStreamDecoder(StreamDecoder):
    """One whole character (or word) per id: nothing is ever pending."""

    def __init__(self, itos: Sequence[str]) -> None:
        self.itos = itos

    def push(self, id: int) -> str:
        return self.itos[id]


class _ByteStreamDecoder(StreamDecoder):
    """Feeds each token's bytes to an incremental UTF-8 decoder, so a character whose bytes are
    split across tokens is printed once, whole, when its last byte arrives."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self.token_bytes = token_bytes
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, id: int) -> str:
        return self.decoder.decode(self.token_bytes(id))

    def flush(self) -> str:
        return self.decoder.decode(b"", final=True)


# ---- tokenizers ----

class Tokenizer(ABC):
    """Common interface: `kind`, `vocab_size`, encode/decode, readable tokens, plain-data form."""

    kind: str  # "char", "word" or "tiktoken"
    vocab_size: int  # number of ids: every id is in range(vocab_size)

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Text -> token ids, each in range(vocab_size)."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Token ids -> text (invalid UTF-8 from partial tokens becomes U+FFFD)."""

    @abstractmethod
    def token_str(self, id: int) -> str:
        """Readable text of one token for tables: '\\n' for a newline, spaces kept."""

    @abstractmethod
    def stream_decoder(self) -> StreamDecoder:
        """A fresh decoder for printing ids one at a time as they are generated."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """Plain data (str/int/list) from which `tokenizer_from_dict` rebuilds this tokenizer."""

    def _check_ids(self, ids: np.ndarray) -> None:
        """Reject ids outside range(vocab_size): they can only come from a mismatched model."""
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            bad = ids[(ids < 0) | (ids >= self.vocab_size)][:5].tolist()
            raise ValueError(f"token ids {bad} are outside the vocabulary 0..{self.vocab_size - 1}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


CLOSEST_COMPARED = 4000  # vocabulary pieces compared with an unknown one, at most, for its closest (and
# looked at for a taste of the vocabulary): a refused prompt is answered at once, whatever the vocabulary


class _TableTokenizer(Tokenizer):
    """Char and word tokenizers: a sorted table of text pieces from the training text, id i <->
    pieces[i]; `split` cuts text into pieces, and decoding joins them back."""

    unit: str  # what one piece is called in messages: "character", "word"

    def __init__(self, pieces: Sequence[str]) -> None:
        # id i <-> self.pieces[i]; a dict, not a set, keeps their order: a vocabulary loaded from a
        # checkpoint is sorted already, and Python sorts a sorted list in one pass
        self.pieces = sorted(dict.fromkeys(pieces))
        self.vocab_size = len(self.pieces)
        self.stoi = {p: i for i, p in enumerate(self.pieces)}

    @classmethod
    @abstractmethod
    def split(cls, text: str) -> list[str]:
        """Text -> its pieces, in order; "".join(pieces) == text."""

    @classmethod
    def from_text(cls, text: str) -> "_TableTokenizer":
        """Vocabulary of every piece that occurs in `text`."""
        if not text:
            raise UserError(f"the training text is empty, so a {cls.kind} vocabulary cannot be built from it; "
                            "point data.dataset at a non-empty text file")
        return cls(cls.split(text))

    def _unknown_hint(self, unknown: list[str]) -> str:
        """Advice appended to the unknown-pieces error."""
        return ""

    def closest(self, piece: str, n: int = 3) -> list[str]:
        """Up to n pieces of the vocabulary spelled most like `piece` (case and the leading space
        ignored; of two spellings the one with piece's leading space), best first."""
        key = piece.strip().lower()
        if not key:
            return []
        forms: dict[str, list[str]] = {}
        for p in self._candidates(piece, key):
            forms.setdefault(p.strip().lower(), []).append(p)
        near = difflib.get_close_matches(key, [k for k in forms if k], n=n, cutoff=0.5)
        space = piece.startswith(" ")
        return [next((f for f in forms[k] if f.startswith(" ") == space), forms[k][0]) for k in near]

    def _candidates(self, piece: str, key: str) -> list[str]:
        """The pieces `closest` compares with piece, in vocabulary order: all of a vocabulary of up
        to CLOSEST_COMPARED pieces; of a larger one, those that sort nearest to piece's spellings
        (as it is, lower case, capitalized, upper case; with and without the leading space), that
        is, the words that begin most like it. difflib takes ~10 us a comparison: over a whole
        vocabulary of a million words, that was minutes for one refused prompt."""
        if self.vocab_size <= CLOSEST_COMPARED:
            return self.pieces
        stems = {piece.strip(), key, key.capitalize(), key.upper()}
        spellings = stems | {" " + s for s in stems}
        span = CLOSEST_COMPARED // (2 * len(spellings))  # on each side of each spelling
        ids: set[int] = set()
        for spelling in spellings:
            at = bisect.bisect_left(self.pieces, spelling)
            ids.update(range(max(0, at - span), min(self.vocab_size, at + span)))
        return [self.pieces[i] for i in sorted(ids)]

    def vocab_sample(self, n: int = 8) -> list[str]:
        """n pieces spread evenly over the sorted vocabulary, words before punctuation: a taste of it."""
        pool = self.pieces[::max(1, self.vocab_size // CLOSEST_COMPARED)]  # a large vocabulary's every k-th piece
        words = [p for p in pool if p.strip().isalpha()] or pool            # (filtering 2M took a second)
        step = max(1, len(words) // n)
        return words[::step][:n]

    def encode(self, text: str) -> list[int]:
        pieces = self.split(text)
        try:
            return [self.stoi[p] for p in pieces]
        except KeyError:
            unknown = list(dict.fromkeys(p for p in pieces if p not in self.stoi))  # in text order
            shown = []
            for p in unknown[:10]:
                near = self.closest(p)
                shown.append(quoted(p) + (f" (closest: {', '.join(map(quoted, near))})" if near else ""))
            more = ", ..." if len(unknown) > 10 else ""
            raise UserError(
                f"text has {len(unknown)} {self.unit}(s) not in the {self.kind} vocabulary: {', '.join(shown)}{more}; "
                f"the vocabulary comes from the training text, so use only its {self.unit}s, e.g. "
                f"{', '.join(map(repr, self.vocab_sample()))}" + self._unknown_hint(unknown)) from None

    def decode(self, ids: Sequence[int]) -> str:
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        self._check_ids(arr)
        return "".join([self.pieces[i] for i in arr.tolist()])

    def token_str(self, id: int) -> str:
        return _escape(self.pieces[id])

    def stream_decoder(self) -> StreamDecoder:
        return _PieceStreamDecoder(self.pieces)


class CharTokenizer(_TableTokenizer):
    """One token per character; vocabulary = sorted set of the training text's characters."""

    kind, unit = "char", "character"

    def __init__(self, chars: str) -> None:
        super().__init__(chars)
        self.chars = "".join(self.pieces)

    @classmethod
    def split(cls, text: str) -> list[str]:
        return list(text)

    def _unknown_hint(self, unknown: list[str]) -> str:
        return "; or train with a byte-level BPE tokenizer, which spells any text (data.tokenizer=bpe)"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "chars": self.chars}


class WordTokenizer(_TableTokenizer):
    """One token per word, punctuation mark or whitespace character; vocabulary = sorted set of the
    training text's tokens. Decoding concatenates the tokens, so decode(encode(text)) == text."""

    kind, unit = "word", "word"
    # a word (letters, and the combining marks on them), a number or one other visible character, each with the
    # space before it if there is one, else one whitespace character: every character of any text belongs to
    # exactly one match. (Python's \w holds no mark: "pre\u0300s", près decomposed, was ' pre', '\u0300', 's', and
    # a Hindi word split at every vowel sign.) The marks: combining_marks.
    RULE = r" ?[^\W\d_]+(?:[{marks}]+[^\W\d_]*)*| ?\d+| ?\S|\s"

    def __init__(self, words: Sequence[str]) -> None:
        super().__init__(words)
        self.words = self.pieces

    @classmethod
    def split(cls, text: str) -> list[str]:
        return word_regex().findall(text)

    def _unknown_hint(self, unknown: list[str]) -> str:
        return ("; a word token carries the space before it, so a space alone is no token: end a prompt without a "
                "trailing space, and put one space between words" if " " in unknown else "")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "words": list(self.words)}


@functools.cache
def combining_marks() -> str:
    """Every combining mark (Unicode's category M: the accents of decomposed text, vowel signs, variation
    selectors) as the ranges of a regex class, '\\U00000300-\\U0000036f...', by Python's own tables. (Found by
    looking at every code point: a quarter of a second, once a process.)"""
    marks = [c for c in range(0x110000) if unicodedata.category(chr(c)).startswith("M")]
    starts = [c for i, c in enumerate(marks) if i == 0 or marks[i - 1] != c - 1]
    ends = [c for i, c in enumerate(marks) if i == len(marks) - 1 or marks[i + 1] != c + 1]
    return "".join(f"\\U{a:08x}" + (f"-\\U{b:08x}" if b > a else "") for a, b in zip(starts, ends))


@functools.cache
def word_regex() -> re.Pattern:
    """WordTokenizer.RULE compiled, its marks filled in."""
    return re.compile(WordTokenizer.RULE.format(marks=combining_marks()))


LONG_SPACE_RUN = 100_000  # whitespace characters in a row that tiktoken's encoder is given at once
# (?<!\s): a match starts only where a run does; without it, each position inside a shorter run scanned
# the rest of the run again: quadratic, 11 s for one run of 99,999 spaces in a longer text
LONG_SPACE = re.compile(r"(?<!\s)\s{%d,}" % (LONG_SPACE_RUN + 1))


def encode_ordinary(encoding: "tiktoken.Encoding", text: str) -> list[int]:
    """encoding.encode_ordinary(text), with "<|endoftext|>" in the text as plain text. tiktoken's
    pre-tokenizer overflows its stack (a Rust panic, which no except Exception catches) on a run of
    ~1,000,000 whitespace characters, so a longer run than LONG_SPACE_RUN is encoded in parts of
    that length: the same tokens except where a part ends."""
    if not LONG_SPACE.search(text):
        return encoding.encode_ordinary(text)
    cuts = [c for m in LONG_SPACE.finditer(text) for c in range(m.start() + LONG_SPACE_RUN, m.end(), LONG_SPACE_RUN)]
    bounds = [0, *cuts, len(text)]
    return [i for a, b in zip(bounds, bounds[1:]) for i in encoding.encode_ordinary(text[a:b])]


def tiktoken_names() -> list[str]:
    """The names of tiktoken's encodings (known without their files)."""
    import tiktoken
    return tiktoken.list_encoding_names()


@functools.lru_cache(maxsize=None)
def get_tiktoken_encoding(name: str) -> "tiktoken.Encoding":
    """Load (once per process) the tiktoken encoding `name`; `gpt2` loads the identical r50k_base."""
    import tiktoken

    known = tiktoken_names()
    if name not in known:
        raise UserError(f"unknown tokenizer {name!r}: use 'char', 'word', 'bpe' or a tiktoken encoding: {', '.join(known)}")
    canonical = _ALIASES.get(name, name)
    file = _TIKTOKEN_FILES.get(canonical)
    url = _TIKTOKEN_URL.format(file=file) if file is not None else None
    key = hashlib.sha1(url.encode()).hexdigest() if url is not None else None  # its file's name in the cache
    folder = tiktoken_cache_folder()
    cached = os.path.join(folder, key) if folder and key else None
    how = f"e.g. cp {file}.tiktoken $TIKTOKEN_CACHE_DIR/{key}, file from {url}" if url is not None \
        else "URLs in tiktoken_ext/openai_public.py"
    cant = f"the tiktoken encoding {name!r} could not be loaded"
    if cached is not None and os.path.exists(cached) and not os.path.isfile(cached):  # tiktoken would read a
        from tinygpt.checkpoint import not_regular                                   # pipe or /dev/zero forever
        raise UserError(f"{cant}: its cache file {cached} is {not_regular(Path(cached))}; put the encoding file "
                        f"there ({how})")
    was_cached = cached is not None and os.path.isfile(cached)
    # tiktoken reads a cached file whole to hash it: a sparse 3 GB one took 3.4 GB and 30 s to be found damaged
    if was_cached and (size := os.path.getsize(cached)) > TIKTOKEN_FILE_MAX:
        raise UserError(f"{cant}: its cache file {cached} is {size:,} bytes, not an encoding file (those are "
                        f"1-4 MB); put the encoding file there ({how})")
    try:
        return within(TIKTOKEN_LOAD_S, tiktoken.get_encoding, canonical)
    except TimeoutError:  # tiktoken downloads with no timeout: a network that never answers hung every command
        raise UserError(f"{cant}: its download from {url or 'its URL'} gave nothing in {TIKTOKEN_LOAD_S} s (a "
                        f"network or proxy that does not answer); offline, set TIKTOKEN_CACHE_DIR to a folder "
                        f"holding the encoding file named by the sha1 of its URL ({how})") from None
    except Exception as e:  # no network and no cache, a proxy, a corrupt cached file, ...
        if was_cached and not os.path.exists(cached):  # (tiktoken removes a file that is not the one it expects)
            raise UserError(f"{cant}: its cached file {cached} was damaged (not the sha256 tiktoken expects), and "
                            f"tiktoken removed it; copy the file there again ({how})") from e
        if was_cached and os.path.isfile(cached):  # still there: unreadable, or damaged in a read-only folder
            if isinstance(e, OSError) and e.filename == cached:
                raise UserError(f"{cant}: its cache file {cached} cannot be read ({reason(e)})") from e
            raise UserError(f"{cant}: its cached file {cached} is damaged (not the sha256 tiktoken expects), and "
                            f"tiktoken could not remove it (a read-only folder?); replace it ({how})") from e
        variable = "TIKTOKEN_CACHE_DIR" if "TIKTOKEN_CACHE_DIR" in os.environ else "DATA_GYM_CACHE_DIR"
        where = f"to a folder holding the encoding file named by the sha1 of its URL ({how})"
        if not folder:
            fix = f"{variable} is empty, which turns tiktoken's cache off; set TIKTOKEN_CACHE_DIR {where}"
        elif os.path.exists(folder) and not os.path.isdir(folder):
            fix = f"{variable}={folder} is not a folder; set TIKTOKEN_CACHE_DIR {where}"
        elif variable in os.environ and cached is not None:  # set by the user: the file is what is missing
            fix = (f"offline, {variable}={folder} must hold the encoding file as {key}: copy {file}.tiktoken (from "
                   f"{url}) to {cached}")
        else:
            fix = f"offline, set TIKTOKEN_CACHE_DIR {where}"
        raise UserError(f"{cant} ({type(e).__name__}: {reason(e)}); {fix}; a new run can use data.tokenizer=bpe, "
                        f"char or word instead, which need no download") from e


TIKTOKEN_LOAD_S = 120  # seconds a tiktoken encoding may take to load: a download of its 1-4 MB file included
TIKTOKEN_FILE_MAX = 64 * 2**20  # bytes: a cached encoding file larger is none (o200k_base, the largest, is 3.6 MB)


def within(seconds: float, work: Callable[..., Any], *args: Any) -> Any:
    """work(*args), or TimeoutError after `seconds`: it runs in a thread, left behind if it hangs (a
    daemon: the command that then fails can still exit)."""
    import threading
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = work(*args)
        except BaseException as e:  # (raised again in the caller's thread)
            done["error"] = e
    thread = threading.Thread(target=run, daemon=True, name="tinygpt-load")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no result in {seconds} s")
    if "error" in done:
        raise done["error"]
    return done["value"]


def tiktoken_cache_folder() -> str:
    """Where tiktoken caches its files, by its own rule: TIKTOKEN_CACHE_DIR, else DATA_GYM_CACHE_DIR,
    else a temp folder ("" turns the cache off); each file is named by the sha1 of its URL."""
    import tempfile
    return os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR",
                                                               os.path.join(tempfile.gettempdir(), "data-gym-cache")))


def bpe_merges(piece: bytes, ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merges BPE makes, in order, encoding `piece` with `ranks` (token bytes -> rank) as
    tiktoken does: starting from single bytes, the adjacent pair whose concatenation has the lowest
    rank merges (the leftmost on a tie), until no adjacent pair forms a token. The candidate pairs wait
    in a heap, so a piece of L bytes takes L log L steps, not L * L (export.py replays every token of a
    vocabulary: 63,000 tokens of 1,024 bytes took 73 minutes)."""
    parts = [piece[i:i + 1] for i in range(len(piece))]  # parts[i]: the part starting at byte i, while alive
    after = [*range(1, len(parts)), None]  # the start of the next alive part
    before: list[int | None] = [None, *range(len(parts) - 1)]
    pairs: list[tuple[int, int, bytes, bytes]] = []  # (rank, start of the left part, left, right)

    def offer(i: int | None) -> None:  # the pair starting at part i, if it forms a token
        if i is not None and (j := after[i]) is not None and (rank := ranks.get(parts[i] + parts[j])) is not None:
            heapq.heappush(pairs, (rank, i, parts[i], parts[j]))

    for i in range(len(parts) - 1):
        offer(i)
    merges = []
    while pairs:
        _, i, left, right = heapq.heappop(pairs)
        j = after[i]
        if parts[i] != left or j is None or parts[j] != right:  # stale: a part of it merged since (parts only grow)
            continue
        merges.append((left, right))
        parts[i], parts[j], after[i] = left + right, b"", after[j]  # (an empty part matches no pair)
        if after[i] is not None:
            before[after[i]] = i
        offer(before[i])
        offer(i)
    return merges


def closed_vocab(ids: Sequence[int], ranks: dict[bytes, int]) -> list[int]:
    """ids plus every token BPE forms on the way to one of them, sorted. BPE restricted to a
    closed set encodes any text whose full encoding uses only the set exactly as the full encoding
    does: each merge that encoding makes is still available, and it still has the lowest rank."""
    token_bytes = {rank: token for token, rank in ranks.items()}
    kept = set(ids)
    for i in list(kept):
        kept.update(ranks[left + right] for left, right in bpe_merges(token_bytes[i], ranks))
    return sorted(kept)


class DamagedTokenizer(UserError):
    """Saved tokenizer data (a checkpoint's, a prepared folder's tokenizer.json, an export's record)
    that rebuilds no tokenizer. Its message says what is wrong with the data; the caller, which
    knows where the data came from, names the file and the fix."""


MAX_RANK = 2**32 - 1  # tiktoken's token ids (its BPE ranks) are 32-bit
BYTES_FIRST = ("r50k_base", "p50k_base")  # GPT-2's byte tokens are ids 0..255 (p50k extends r50k: checked on r50k)


def check_compact_ids(name: str, ids: Sequence[int], ranks: dict[bytes, int] | None = None) -> None:
    """Refuse a compact vocabulary (`ids`: original ids of tiktoken encoding `name`) that the
    encoder cannot work with: tiktoken panics on a byte without its single-byte token (a Rust panic,
    which no `except Exception` catches) and numpy overflows on an id past int64. The ids must be
    distinct ids of the encoding's BPE tokens (`ranks`: token bytes -> id; special tokens are not
    BPE tokens), its single-byte tokens among them. Without `ranks` (an import, which needs no
    encoding file), what the ids alone show: each a possible tiktoken id, and for the encodings
    known to number their 256 single-byte tokens 0..255 (BYTES_FIRST), those 256 among them."""
    what = f"the compact vocabulary of tokenizer {name!r}"
    kept: set[int] = set()
    for i in ids:
        if i in kept:
            raise DamagedTokenizer(f"{what} holds id {short(i)} twice")
        kept.add(i)
    if ranks is None:
        tokens: Any = range(MAX_RANK + 1)
        byte_tokens: Sequence[int] = range(256) if _TIKTOKEN_FILES.get(_ALIASES.get(name, name)) in BYTES_FIRST else []
        where = f"tiktoken's token ids lie within 0..{MAX_RANK}"
    else:
        tokens = set(ranks.values())
        byte_tokens = [ranks[bytes([b])] for b in range(256) if bytes([b]) in ranks]
        where = f"the encoding's BPE tokens have ids within 0..{max(tokens)}, special tokens excluded"
    bad = next((i for i in ids if i not in tokens), None)
    if bad is not None:
        raise DamagedTokenizer(f"{what} holds id {short(bad)}, which names no BPE token ({where})")
    missing = [t for t in byte_tokens if t not in kept]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise DamagedTokenizer(f"{what} lacks the single-byte token of id {missing[0]}{more}: BPE needs all "
                               f"{len(byte_tokens)} of them to spell any text")


def tiktoken_data(d: dict) -> tuple[str, list[int] | None]:
    """The encoding name and compact ids (None: the full vocabulary) of tiktoken tokenizer data,
    checked as far as they can be without the encoding's file (`check_compact_ids`)."""
    name, ids = d.get("encoding"), d.get("ids")
    if not isinstance(name, str):
        raise DamagedTokenizer("tiktoken tokenizer data has no 'encoding' name")
    if name not in tiktoken_names():  # (the encoding's file is not looked for)
        if name in _TIKTOKEN_FILES or name in _ALIASES:  # a newer tiktoken's: not damage
            import tiktoken
            raise UserError(f"the tokenizer is tiktoken's {name!r}, which this tiktoken ({tiktoken.__version__}) "
                            f"does not have: pip install -U tiktoken")
        raise DamagedTokenizer(f"tiktoken tokenizer data names {short(name)}, which is no tiktoken encoding")
    if ids is None:  # the full encoding: its size is known without its file for GPT-2's
        if _ALIASES.get(name, name) == "r50k_base" and d.get("vocab_size") not in (None, GPT2_VOCAB):
            raise DamagedTokenizer(f"tokenizer data says vocab_size={short(d['vocab_size'])} but encoding {name!r} "
                                   f"has {GPT2_VOCAB} tokens")
        return name, None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise DamagedTokenizer("tiktoken tokenizer data has a malformed 'ids' list (integers expected)")
    check_compact_ids(name, ids)
    if d.get("vocab_size") not in (None, len(ids)):
        raise DamagedTokenizer(f"tokenizer data says vocab_size={short(d['vocab_size'])} but lists {len(ids)} ids")
    return name, ids


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE encoding, optionally restricted to a compact vocabulary.

    `ids` (compact) lists the kept original ids in increasing order; compact id i <-> original
    id ids[i]; text is encoded by BPE restricted to them (`closed`: see `closed_vocab`). A compact
    vocabulary saved before they were closed (`closed=False`) keeps its old rule: the full
    encoding, with each token outside the vocabulary spelled out byte by byte. `ids=None` uses the
    full encoding (vocab_size = n_vocab).
    """

    kind = "tiktoken"

    def __init__(self, name: str, ids: Sequence[int] | None = None,
                 encoding: "tiktoken.Encoding | None" = None, closed: bool = True) -> None:
        self.name = name  # saved in to_dict; `encoding` lets tests wrap a hand-built Encoding
        self.encoding = encoding if encoding is not None else get_tiktoken_encoding(name)
        self.closed = closed
        n_vocab = self.encoding.n_vocab
        if ids is None:
            self.ids: np.ndarray | None = None
            self.vocab_size = n_vocab
            return
        check_compact_ids(name, ids, self.encoding._mergeable_ranks)
        self.ids = np.unique(np.asarray(ids, dtype=np.int64))
        self.vocab_size = int(self.ids.size)
        # original id -> compact id (-1: not in the compact vocabulary), one gather per encode
        self.lookup = np.full(n_vocab, -1, dtype=np.int64)
        self.lookup[self.ids] = np.arange(self.vocab_size)
        # the same encoding with only the kept tokens: tiktoken's own way to derive an encoding
        import tiktoken
        self.compact_encoding = tiktoken.Encoding(f"{name}_compact", pat_str=self.encoding._pat_str,
                                                  mergeable_ranks=self.bpe_ranks(), special_tokens={})
        # byte value -> compact id of its single-byte token, for the byte fallback of closed=False
        self.byte_ids: list[int] = []
        for b in range(256):
            try:
                compact = int(self.lookup[self.encoding.encode_single_token(bytes([b]))])
            except KeyError:
                compact = -1
            self.byte_ids.append(compact)

    @classmethod
    def from_text(cls, name: str, text: str, compact: bool = True,
                  encoding: "tiktoken.Encoding | None" = None) -> "TiktokenTokenizer":
        """Tokenizer for `name`; compact: keep the ids seen in `text` plus all single-byte tokens,
        closed under the merges that build them."""
        encoding = encoding if encoding is not None else get_tiktoken_encoding(name)
        if not compact:
            return cls(name, None, encoding)
        seen = np.unique(np.asarray(encode_ordinary(encoding, text), dtype=np.int64))
        single_bytes = []
        for b in range(256):
            try:
                single_bytes.append(encoding.encode_single_token(bytes([b])))
            except KeyError:  # an encoding without this byte cannot spell it out anyway
                pass
        ids = np.union1d(seen, np.asarray(single_bytes, dtype=np.int64))
        return cls(name, closed_vocab(ids.tolist(), encoding._mergeable_ranks), encoding)

    def bpe_ranks(self) -> dict[bytes, int]:
        """Token bytes -> original id (its BPE rank) of every token this tokenizer can produce."""
        if self.ids is None:
            return dict(self.encoding._mergeable_ranks)
        return {self.encoding.decode_single_token_bytes(int(i)): int(i) for i in self.ids}

    @property
    def pattern(self) -> str:
        """The regex that cuts text into the pieces BPE encodes one by one."""
        return self.encoding._pat_str

    def _original_ids(self, ids: Sequence[int]) -> np.ndarray:
        """Validate ids in our numbering and return them in the encoding's numbering."""
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        self._check_ids(arr)
        return arr if self.ids is None else self.ids[arr]

    def _token_bytes(self, original_id: int) -> bytes:
        """Bytes of one original id; unused ids of the full vocabulary (gaps before specials) -> U+FFFD."""
        try:
            return self.encoding.decode_single_token_bytes(original_id)
        except KeyError:
            return "\ufffd".encode()

    def encode(self, text: str) -> list[int]:
        if self.ids is None:
            return encode_ordinary(self.encoding, text)
        if self.closed:
            return self.lookup[np.asarray(encode_ordinary(self.compact_encoding, text), dtype=np.int64)].tolist()
        original = np.asarray(encode_ordinary(self.encoding, text), dtype=np.int64)
        compact = self.lookup[original]
        missing = np.flatnonzero(compact < 0)
        if missing.size == 0:
            return compact.tolist()
        # closed=False (an old vocabulary): a token outside it is spelled with single-byte tokens
        out: list[int] = []
        start = 0
        for pos in missing.tolist():
            out.extend(compact[start:pos].tolist())
            for b in self.encoding.decode_single_token_bytes(int(original[pos])):
                if self.byte_ids[b] < 0:
                    raise UserError(f"tiktoken encoding {self.name!r} has no single-byte token for "
                                    f"byte {b:#04x}; use data.tokenizer=char or a full vocabulary")
                out.append(self.byte_ids[b])
            start = pos + 1
        out.extend(compact[start:].tolist())
        return out

    def decode(self, ids: Sequence[int]) -> str:
        original = self._original_ids(ids).tolist()
        try:
            data = self.encoding.decode_bytes(original)
        except KeyError:  # an unused id of the full vocabulary
            data = b"".join(self._token_bytes(i) for i in original)
        return data.decode("utf-8", errors="replace")

    def token_str(self, id: int) -> str:
        original = int(self._original_ids([id])[0])
        # surrogateescape keeps the bytes of a partial UTF-8 character, shown as \xNN by _escape
        return _escape(self._token_bytes(original).decode("utf-8", errors="surrogateescape"))

    def stream_decoder(self) -> StreamDecoder:
        if self.ids is None:
            return _ByteStreamDecoder(self._token_bytes)
        ids = self.ids
        return _ByteStreamDecoder(lambda id: self._token_bytes(int(ids[id])))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "vocab_size": self.vocab_size, "encoding": self.name}
        if self.ids is not None:
            d["ids"] = self.ids.tolist()
            d["closed"] = self.closed
        return d

    def __repr__(self) -> str:
        compact = "compact" if self.ids is not None else "full"
        return f"TiktokenTokenizer({self.name!r}, {compact}, vocab_size={self.vocab_size})"


MAX_TOKEN_BYTES = 1024  # a learned token's length: GPT-2's longest is 128 bytes
MAX_MERGES = 65536 - 256  # data.bpe_vocab_size is at most 65536
# bytes a node (a byte of a distinct piece) takes while merges are learned, at least: its arrays, and the pairs,
# heap entries and node lists that merges make (measured on 1 MB of random CJK and of random words, less the
# text: 97-123 at 768 merges, 172-316 at 8,000 and more). Counted per byte of the text, a 6 MB CJK text at
# bpe_vocab_size 65536 was estimated at 0.4 GB and took 2.1 GB
BPE_NODE_BYTES = {768: 90, 8000: 170}  # at this many merges or more: bytes a node
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""  # GPT-2's pre-tokenization


def check_learning_memory(nodes: int, n_merges: int) -> None:
    """Refuse (one line) learning n_merges merges over `nodes` bytes of distinct pieces where the machine
    surely has too little memory for it (BPE_NODE_BYTES; English repeats its words: tiny shakespeare's
    1.1 MB hold 0.1 MB of distinct pieces, while a text without spaces is all one piece a line)."""
    import torch
    from tinygpt.runtime import check_memory
    per_node = max([b for m, b in BPE_NODE_BYTES.items() if n_merges >= m], default=min(BPE_NODE_BYTES.values()))
    check_memory({"the BPE's pair counts": nodes * per_node}, torch.device("cpu"),
                 f"learning {n_merges:,} BPE merges over {nodes / 1e6:,.1f} MB of distinct pieces",
                 "lower data.bpe_vocab_size, or use a smaller dataset")


def learn_bpe_merges(text: str, n_merges: int) -> list[tuple[int, int]]:
    """Byte-level BPE learned on `text`, as GPT-2's was: split the text with GPT-2's regex, start
    from single bytes, and merge the most frequent adjacent pair of tokens (counted over the
    pieces, weighted by how often each piece occurs; on a tie the lowest left token, then the
    lowest right one) until n_merges merges are made or no pair is left. Returns the merges in
    order: merge i makes token 256 + i from the tokens (left, right).

    A merge costs what it changes, not the length of the pieces it touches (a megabyte without a
    space is one piece): every distinct piece is a linked list of tokens, every pair keeps the
    nodes where it starts, and a merge visits only those nodes, updating the counts of the pairs
    beside them. The most frequent pair comes off a heap of (-count, pair), which breaks ties by
    the lowest pair; an entry whose count is no longer its pair's is stale and skipped."""
    import regex  # tiktoken's own dependency: GPT-2's pattern needs Unicode classes (\p{L})
    from array import array
    from collections import Counter
    from heapq import heappop, heappush
    # one node per byte of each distinct piece; arrays, not lists, as a piece can be the whole text
    token = array("i")  # node -> its token; -1 once merged into the node before it
    weight = array("q")  # node -> how often its piece occurs in the text
    nxt, prv = array("q"), array("q")  # node -> the next and the previous node of its piece, or -1
    pieces = [(piece.encode("utf-8"), n) for piece, n in Counter(regex.findall(GPT2_SPLIT, text)).items()]
    check_learning_memory(sum(len(ids) for ids, _ in pieces), n_merges)
    for ids, n in pieces:
        start = len(token)
        token.extend(ids)
        weight.extend([n] * len(ids))
        nxt.extend(range(start + 1, start + len(ids)))
        nxt.append(-1)
        prv.append(-1)
        prv.extend(range(start, start + len(ids) - 1))
    length = [1] * 256  # bytes of each token
    pairs: dict[tuple[int, int], int] = {}  # (left, right) -> weighted count, of the pairs short enough to merge
    where: dict[tuple[int, int], array] = {}  # pair -> the nodes where it starts (or once did)
    changed: set[tuple[int, int]] = set()  # pairs whose count changed since the heap last heard

    def count(node: int, sign: int) -> None:
        """Add (sign 1) or remove (-1) the pair that starts at node, if it has one."""
        right = nxt[node]
        if right < 0:
            return
        pair = (token[node], token[right])
        if length[pair[0]] + length[pair[1]] <= MAX_TOKEN_BYTES:
            pairs[pair] = pairs.get(pair, 0) + sign * weight[node]
            changed.add(pair)
            if sign > 0:
                where.setdefault(pair, array("q")).append(node)

    heap: list[tuple[int, tuple[int, int]]] = []  # (-count, pair): the most frequent, then the lowest pair first

    def settle() -> None:
        """Tell the heap the new counts; a pair counted 0 is gone for good (pairs appear only beside
        the token just made)."""
        for pair in changed:
            if pairs[pair] > 0:
                heappush(heap, (-pairs[pair], pair))
            else:
                del pairs[pair]
                where.pop(pair, None)
        changed.clear()

    for node in range(len(token)):
        count(node, 1)
    settle()
    merges: list[tuple[int, int]] = []
    while len(merges) < n_merges and heap:
        minus_count, best = heappop(heap)
        if pairs.get(best) != -minus_count:
            continue  # stale: the pair's count changed since, or it is gone
        new = 256 + len(merges)
        merges.append(best)
        length.append(length[best[0]] + length[best[1]])
        # left to right within a piece, so "aaa" merges its first two a's, as a scan would
        for node in sorted(where[best]):
            right = nxt[node]
            if right < 0 or (token[node], token[right]) != best:
                continue  # no longer here: e.g. the middle a of "aaa", taken by the merge before
            before, after = prv[node], nxt[right]
            if before >= 0:
                count(before, -1)
            count(node, -1)
            count(right, -1)
            token[node], token[right] = new, -1
            nxt[node] = after
            if after >= 0:
                prv[after] = node
            if before >= 0:
                count(before, 1)
            count(node, 1)
        settle()
    return merges


class LearnedBPETokenizer(TiktokenTokenizer):
    """A byte-level BPE learned from the training text (`data.tokenizer: bpe`, `data.bpe_vocab_size`
    tokens): GPT-2's way of tokenizing, without a download, fitted to this text. Frequent words
    become one token, rarer ones a few; any text encodes, down to single bytes. It encodes with
    tiktoken, built from the learned merges (merge i = the token of rank 256 + i)."""

    kind = "bpe"

    def __init__(self, merges: Sequence[tuple[int, int]]) -> None:
        import tiktoken
        if len(merges) > MAX_MERGES:
            raise DamagedTokenizer(f"the learned BPE has {len(merges):,} merges, more than {MAX_MERGES:,} "
                                   f"(a vocabulary beyond 65536 tokens)")
        tokens = [bytes([b]) for b in range(256)]
        for left, right in merges:
            if not (0 <= left < len(tokens) and 0 <= right < len(tokens)):
                raise DamagedTokenizer(f"the learned BPE's merge ({left}, {right}) names a token that does not "
                                       f"exist yet")
            if len(tokens[left]) + len(tokens[right]) > MAX_TOKEN_BYTES:  # 40 doubling merges: 2**40 bytes
                raise DamagedTokenizer(f"the learned BPE's merge ({left}, {right}) makes a token of "
                                       f"{len(tokens[left]) + len(tokens[right]):,} bytes, beyond {MAX_TOKEN_BYTES}")
            tokens.append(tokens[left] + tokens[right])
        if len(set(tokens)) != len(tokens):
            raise DamagedTokenizer("the learned BPE's merges make the same token twice")
        self.merges = [(int(a), int(b)) for a, b in merges]
        encoding = tiktoken.Encoding("bpe", pat_str=GPT2_SPLIT, special_tokens={},
                                     mergeable_ranks={token: rank for rank, token in enumerate(tokens)})
        super().__init__("bpe", None, encoding)

    @classmethod
    def from_text(cls, text: str, vocab_size: int) -> "LearnedBPETokenizer":
        if not text:
            raise UserError("the training text is empty, so a BPE vocabulary cannot be learned from it; "
                            "point data.dataset at a non-empty text file")
        return cls(learn_bpe_merges(text, vocab_size - 256))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "merges": [list(m) for m in self.merges]}

    def __repr__(self) -> str:
        return f"LearnedBPETokenizer(vocab_size={self.vocab_size})"


def clean_text(text: str) -> str:
    """A text file's text as tinygpt reads it, for training and for prompts alike: without a byte
    order mark, with '\n' line ends (a Windows file's '\r\n' would be two tokens, '\r' one no
    other file has)."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n")


def other_forms(text: str) -> list[str]:
    """`text` in Unicode's other forms, where they differ from it: "é" as one code point (NFC) or as "e" and a
    combining accent (NFD) look the same, and a keyboard, a copy or a file system gives either."""
    return sorted({unicodedata.normalize(form, text) for form in ("NFC", "NFD")} - {text})


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """Prompt -> ids; an empty prompt starts from a newline (or token 0 if there is none). A prompt that a char or
    word vocabulary refuses as typed is encoded in Unicode's other form where that one encodes: "é" as one code
    point (NFC) or as "e" and a combining accent (NFD) look the same, and a keyboard or a copy gives either."""
    try:
        ids = tokenizer.encode(prompt) if prompt else []
    except UserError:
        for form in other_forms(prompt):
            with suppress(UserError):
                ids = tokenizer.encode(form)
                break
        else:
            raise
    if not ids:
        try:
            ids = tokenizer.encode("\n")
        except UserError:
            ids = [0]
    return ids


def build_tokenizer(name: str, text: str, compact: bool = True, bpe_vocab_size: int = 1024) -> Tokenizer:
    """Tokenizer `name` ("char", "word", "bpe" or a tiktoken encoding) for training text `text`."""
    if name == "char":
        return CharTokenizer.from_text(text)
    if name == "word":
        return WordTokenizer.from_text(text)
    if name == "bpe":
        return LearnedBPETokenizer.from_text(text, bpe_vocab_size)
    return TiktokenTokenizer.from_text(name, text, compact=compact)


def same_tokens(a: dict, b: dict) -> bool:
    """Do two tokenizers' `to_dict()` forms give the same tokens and ids? Equal, where a tiktoken encoding
    may go by its other name: gpt2 is r50k_base (a fine-tune of a gpt2 run on r50k_base data was refused)."""
    def named_once(d: dict) -> dict:
        name = d.get("encoding")
        tiktoken = d.get("kind") == "tiktoken" and isinstance(name, str)
        return {**d, "encoding": _ALIASES.get(name, name)} if tiktoken else d
    return named_once(a) == named_once(b)


def tokenizer_from_dict(d: dict) -> Tokenizer:
    """Rebuild a tokenizer from `Tokenizer.to_dict()` output (e.g. from a checkpoint or JSON file)."""
    if not isinstance(d, dict):
        raise DamagedTokenizer(f"tokenizer data must be a dict, got {type(d).__name__}")
    kind = d.get("kind")
    if kind == "char":
        chars = d.get("chars")
        if not isinstance(chars, str) or not chars or len(set(chars)) != len(chars) \
                or list(chars) != sorted(chars):
            raise DamagedTokenizer("char tokenizer data has no valid 'chars' (distinct sorted characters)")
        tok: Tokenizer = CharTokenizer(chars)
    elif kind == "word":
        words = d.get("words")
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w for w in words) \
                or words != sorted(dict.fromkeys(words)):
            raise DamagedTokenizer("word tokenizer data has no valid 'words' (distinct sorted strings)")
        tok = WordTokenizer(words)
    elif kind == "bpe":
        merges = d.get("merges")
        if not isinstance(merges, list) or not all(
                isinstance(m, list) and len(m) == 2 and all(isinstance(i, int) and not isinstance(i, bool) for i in m)
                for m in merges):
            raise DamagedTokenizer("bpe tokenizer data has no valid 'merges' (pairs of token ids)")
        tok = LearnedBPETokenizer(merges)
    elif kind == "tiktoken":
        name, ids = tiktoken_data(d)
        tok = TiktokenTokenizer(name, ids, closed=d.get("closed") is True)  # absent: saved before closing
    else:
        raise DamagedTokenizer(f"tokenizer data has unknown kind {kind!r} (expected 'char', 'word', 'bpe' or "
                               f"'tiktoken')")
    vocab_size = d.get("vocab_size")
    if vocab_size is not None and vocab_size != tok.vocab_size:
        hint = " (a different tiktoken version?)" if kind == "tiktoken" else ""
        raise DamagedTokenizer(f"tokenizer data says vocab_size={vocab_size} but rebuilds with "
                               f"{tok.vocab_size} tokens{hint}")
    return tok

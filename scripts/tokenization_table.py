"""How each tokenizer cuts the stories: the table behind the default's `bpe_vocab_size`.

    python -m scripts.tokenization_table [--chars 1500000] [--sizes 1024,1152,1280,1536]

(from the repository root). For the default corpus (`data.stories_chars` characters, the default
seed) it prints, per tokenizer, the vocabulary, the corpus's length in tokens, and how many of the
attribute values (the words the probe asks for) and of the character names take more than one
token. The tokenizers are learned from the whole corpus, as `python -m data.prepare` does; GPT-2's
(`gpt2`, compact) is added when tiktoken can load it (offline: TIKTOKEN_CACHE_DIR). A corpus smaller
than the default may lack some of the names and values: those are left out of the counts (and said).
"""
from __future__ import annotations

import sys
from typing import Sequence

if __name__ == "__main__":  # before torch loads (the imports below): a Ctrl-C then is `interrupted`, not a traceback
    if not __package__:  # run as a file (python scripts/tokenization_table.py): tinygpt, a folder up, is not found
        print("error: run it from the repository root as python -m scripts.tokenization_table", file=sys.stderr)
        sys.exit(2)
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

from data import stories
from tinygpt.config import DataConfig
from tinygpt.errors import ArgParser, UserError, run_cli, short
from tinygpt.tokenizer import Tokenizer, WordTokenizer, build_tokenizer

MAX_CHARS = 20_000_000  # 13x the default corpus (2 s): the corpus and its tokens are held in memory
BPE_SIZES = (257, 65536)  # data.bpe_vocab_size's range (tinygpt.config): the 256 bytes and at least one merge


def split_words(tokenizer: Tokenizer, words: list[str]) -> int:
    """How many of the words (as they appear mid-sentence, after a space) take more than one token."""
    return sum(len(tokenizer.encode(" " + w)) > 1 for w in words)


def bpe_label(size: int) -> str:
    """A BPE row's name, marking data.bpe_vocab_size's default (as docs/results.md shows it)."""
    return f"bpe, {size}" + (" (the default)" if size == DataConfig.bpe_vocab_size else "")


def check_args(args) -> list[int]:
    """Refuse, before the corpus is generated, a --chars or --sizes out of range; the sizes."""
    if not 1 <= args.chars <= MAX_CHARS:
        raise UserError(f"--chars={args.chars} must be in [1, {MAX_CHARS:,}] (the default corpus has "
                        f"{DataConfig.stories_chars:,})")
    try:
        sizes = [int(n) for n in args.sizes.split(",")]
    except ValueError:
        sizes = []
    if not sizes or not all(BPE_SIZES[0] <= n <= BPE_SIZES[1] for n in sizes):
        raise UserError(f"--sizes={short(args.sizes)} must be comma-separated vocabulary sizes in "
                        f"{BPE_SIZES[0]}..{BPE_SIZES[1]} (256 bytes + the merges), e.g. 1024,1536")
    if len(set(sizes)) < len(sizes):  # (the same row was learned and printed twice)
        raise UserError(f"--sizes={short(args.sizes)} gives a size twice")
    return sizes


def main(argv: Sequence[str] | None = None) -> None:
    p = ArgParser(prog="python -m scripts.tokenization_table", description=__doc__.splitlines()[0])
    p.add_argument("--chars", type=int, default=DataConfig.stories_chars,
                   help=f"characters of the stories corpus to tokenize (default "
                        f"{DataConfig.stories_chars:,}, the default config's)")
    p.add_argument("--sizes", default="1024,1152,1280,1536", help="learned BPE vocabulary sizes")
    args = p.parse_args(argv)
    sizes = check_args(args)
    text, _ = stories.generate_stories(args.chars, DataConfig.stories_seed)
    # (--chars 1 and --chars 40 made the same table without a word: one whole story, 1,399 characters)
    print(f"(the corpus: {len(text):,} characters, whole stories until --chars {args.chars:,} is reached)")
    # learned from the text they encode, as data.prepare learns them: one learned from the training
    # split alone cannot encode a word only the validation split holds (a word tokenizer refuses it)
    present = set(WordTokenizer.split(text))  # the probe's words that this corpus holds (all, by default)
    attributes = [w for pool in stories.ATTRIBUTE_POOLS.values() for w in pool if " " + w in present]
    names = [w for w in stories.FEMALE_NAMES + stories.MALE_NAMES if " " + w in present]
    missing = (sum(map(len, stories.ATTRIBUTE_POOLS.values())) - len(attributes),
               len(stories.FEMALE_NAMES + stories.MALE_NAMES) - len(names))
    if any(missing):
        print(f"({missing[0]} attribute values and {missing[1]} names do not occur in this corpus: left out)")
    rows = [("word", build_tokenizer("word", text))]
    for n in sizes:
        tok = build_tokenizer("bpe", text, bpe_vocab_size=n)
        short_of = " asked: the text has no more pairs to merge" if tok.vocab_size < n else ""  # (the vocab column)
        rows.append((bpe_label(n) + short_of, tok))
    try:
        rows.append(("gpt2 (compact)", build_tokenizer("gpt2", text)))
    except UserError as e:
        print(f"(gpt2 left out: {e})")
    print(f"| tokenizer | vocab | tokens in the corpus | attribute values in > 1 token (of {len(attributes)}) | "
          f"names in > 1 token (of {len(names)}) |\n| --- | ---: | ---: | ---: | ---: |")
    for name, tok in rows:
        print(f"| {name} | {tok.vocab_size:,} | {len(tok.encode(text)):,} | {split_words(tok, attributes)} | "
              f"{split_words(tok, names)} |")


if __name__ == "__main__":
    run_cli(main)

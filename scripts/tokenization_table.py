"""How each tokenizer cuts the stories: the table behind the default's `bpe_vocab_size`.

    python -m scripts.tokenization_table [--chars 1500000] [--sizes 1024,1152,1280,1536]

(from the repository root). For the default corpus (`data.stories_chars` characters, the default
seed) it prints, per tokenizer, the vocabulary, the corpus's length in tokens, and how many of the
attribute values (the words the probe asks for) and of the character names take more than one
token. The learned BPEs are learned from the training split, as `python -m data.prepare` does;
GPT-2's (`gpt2`, compact) is added when tiktoken can load it (offline: TIKTOKEN_CACHE_DIR).
"""
from __future__ import annotations

import argparse

from data import stories
from tinygpt.config import DataConfig
from tinygpt.errors import UserError
from tinygpt.tokenizer import Tokenizer, build_tokenizer


def split_words(tokenizer: Tokenizer, words: list[str]) -> int:
    """How many of the words (as they appear mid-sentence, after a space) take more than one token."""
    return sum(len(tokenizer.encode(" " + w)) > 1 for w in words)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chars", type=int, default=DataConfig.stories_chars)
    p.add_argument("--sizes", default="1024,1152,1280,1536", help="learned BPE vocabulary sizes")
    args = p.parse_args()
    text, _ = stories.generate_stories(args.chars, DataConfig.stories_seed)
    train = text[: int(len(text) * (1 - DataConfig.val_fraction))]
    attributes = [w for pool in stories.ATTRIBUTE_POOLS.values() for w in pool]
    names = stories.FEMALE_NAMES + stories.MALE_NAMES
    rows = [("word", build_tokenizer("word", train))]
    rows += [(f"bpe, {n}", build_tokenizer("bpe", train, bpe_vocab_size=int(n))) for n in args.sizes.split(",")]
    try:
        rows.append(("gpt2 (compact)", build_tokenizer("gpt2", train)))
    except UserError as e:
        print(f"(gpt2 left out: {e})")
    print(f"| tokenizer | vocab | tokens in the corpus | attribute values in > 1 token (of {len(attributes)}) | "
          f"names in > 1 token (of {len(names)}) |\n| --- | ---: | ---: | ---: | ---: |")
    for name, tok in rows:
        print(f"| {name} | {tok.vocab_size:,} | {len(tok.encode(text)):,} | {split_words(tok, attributes)} | "
              f"{split_words(tok, names)} |")


if __name__ == "__main__":
    main()

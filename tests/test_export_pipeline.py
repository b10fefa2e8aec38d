"""Guards that a Hugging Face export stands alone: in a process that cannot import tinygpt,
`transformers.pipeline("text-generation", model=EXPORT)` continues a prompt greedily exactly as
`sample.py --temperature 0` does, and `AutoTokenizer` gives our token ids (and refuses what ours
refuses), for a char, a word and a BPE run. With the pad token README_EXPORT.md sets, a batch of two
prompts of different lengths continues as each prompt alone, through the pipeline and through
`model.generate` on the tokenizer's own (left) padding.

The BPE run's encoding is learned here from the stories text (a few hundred byte-pair merges), so
the test needs no encoding file; with r50k_base.tiktoken in the test data folder (conftest.SHARED_DATA), GPT-2's own
vocabulary is tested too, compact (a vocabulary from a Shakespeare excerpt: unseen words use its
kept merges, down to bytes) and full. Below the models, `tokenizer.json` is checked against our
tokenizers directly: the word regex splits assigned Unicode characters as Python's `re` does,
and BPE ids are equal on texts with unseen words, accents, CJK and emoji.

The export side runs in one subprocess, from an empty folder without PYTHONPATH; it checks that
`import tinygpt` and `import model` fail there. Needs transformers (skips without it).
"""
from __future__ import annotations

import functools
import importlib.util
import io
import json
import os
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
import tiktoken
import torch

if importlib.util.find_spec("transformers") is None:  # only the subprocess imports it (slow to import)
    pytest.skip("the export's pipeline test needs transformers", allow_module_level=True)
pytest.importorskip("safetensors")
tokenizers = pytest.importorskip("tokenizers")

import export  # noqa: E402
import sample  # noqa: E402
from conftest import SHARED_DATA, r50k_cache  # noqa: E402
from data.stories import generate_stories  # noqa: E402
from model import GPT, ModelConfig  # noqa: E402
from tinygpt import hf  # noqa: E402
from tinygpt import tokenizer as tk  # noqa: E402
from tinygpt.checkpoint import load_model, save_checkpoint  # noqa: E402
from tinygpt.config import Config, config_to_dict  # noqa: E402
from tinygpt.errors import UserError  # noqa: E402

NEW_TOKENS = 24  # prompt + NEW_TOKENS stay within block_size (64): GPT-2's positions end there
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
STORY = generate_stories(20_000, 1337)[0]  # what the stories runs train on (stories_chars=20000)
HARD = ["naïve café in Zürich", "東京 🙂 🐈\u200d⬛", "  two  spaces\t\ttabs \n\n", "zyzzyva quokka's 1234567",
        "<|endoftext|> stays text", "x" * 40, ""]


@functools.cache
def learn_bpe(text: str, n_merges: int) -> tiktoken.Encoding:
    """A byte-level BPE learned on text, GPT-2 style (the most frequent adjacent pair merges next):
    real merge trees, without an encoding file."""
    import regex  # tiktoken's own dependency
    words = Counter(regex.findall(GPT2_PATTERN, text))
    parts = {w: [bytes([b]) for b in w.encode()] for w in words}
    ranks = {bytes([b]): b for b in range(256)}
    for _ in range(n_merges):
        pairs: Counter = Counter()
        for w, n in words.items():
            pairs.update({pair: n for pair in zip(parts[w], parts[w][1:])})
        if not pairs:
            break
        (a, b), _ = pairs.most_common(1)[0]
        ranks.setdefault(a + b, len(ranks))
        for p in parts.values():
            i = 0
            while i < len(p) - 1:
                if p[i] == a and p[i + 1] == b:
                    p[i:i + 2] = [a + b]
                i += 1
    return tiktoken.Encoding("learned", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": len(ranks)})


def learned() -> tiktoken.Encoding:
    return learn_bpe(STORY, 400)


@pytest.fixture(scope="module")
def learned_encoding():
    """data.tokenizer=learned names the learned encoding (our tokenizers find encodings by name)."""
    real = tk.get_tiktoken_encoding
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tk, "get_tiktoken_encoding", lambda name: learned() if name == "learned" else real(name))
        mp.setattr(tk, "tiktoken_names", lambda names=tk.tiktoken_names(): [*names, "learned"])
        yield


def shakespeare() -> str:
    path = SHARED_DATA / "tinyshakespeare.txt"
    if not path.is_file():
        pytest.skip(f"no {path}")
    return path.read_text(encoding="utf-8")[:30_000]


def random_run(folder: Path, tokenizer: tk.Tokenizer) -> Path:
    """A run directory holding an untrained tiny model: for parity, random weights are as good as
    trained ones, and cost no training (the char run is a trained one)."""
    cfg = Config(model=ModelConfig(block_size=64, n_layer=2, n_head=2, n_embd=16, vocab_size=tokenizer.vocab_size))
    torch.manual_seed(0)
    save_checkpoint(folder / "ckpt.pt", {"config": config_to_dict(cfg), "tokenizer": tokenizer.to_dict(),
                                         "model": GPT(cfg.model).state_dict(), "step": 0})
    return folder


def windows(text: str, n: int = 4, size: int = 60) -> list[str]:
    """n excerpts of text, each from a space to before a space (whole word tokens)."""
    starts = [text.index(" ", i * len(text) // n) for i in range(n)]
    return [text[start:start + size].rsplit(" ", 1)[0] for start in starts]


def prompt_of(text: str) -> str:
    return text[:40].rsplit(" ", 1)[0]


@pytest.fixture(scope="module")
def cases(tmp_path_factory, tiny_stories_run, learned_encoding, one_thread) -> dict[str, dict]:
    """Per case: the run, its export, prompts and texts, and what our side gives for them."""
    tmp = tmp_path_factory.mktemp("pipeline")
    specs = {
        "char": (tiny_stories_run, [prompt_of(STORY), ""], windows(STORY) + ["Zebra #9"]),
        "word": (random_run(tmp / "word", tk.build_tokenizer("word", STORY)), [prompt_of(STORY), ""],
                 windows(STORY) + ["the dragon hi "]),
        "bpe": (random_run(tmp / "bpe", tk.build_tokenizer("learned", STORY)),
                [prompt_of(STORY), "Dragons fly over 東京 🙂", ""], windows(STORY) + HARD),
    }
    if (SHARED_DATA / "r50k_base.tiktoken").is_file() and (SHARED_DATA / "tinyshakespeare.txt").is_file():
        with pytest.MonkeyPatch.context() as mp:  # GPT-2's vocabulary, compact and full (random weights)
            mp.setenv("TIKTOKEN_CACHE_DIR", str(r50k_cache(tmp / "tiktoken")))
            text = shakespeare()
            for name, compact in (("gpt2-compact", True), ("gpt2-full", False)):
                run = random_run(tmp / name, tk.build_tokenizer("gpt2", text, compact=compact))
                # the full vocabulary starts an empty prompt at <|endoftext|>, as GPT-2 does: not compared
                prompts = [prompt_of(text), "unseen zyzzyva words 🙂"] + ([""] if compact else [])
                specs[name] = (run, prompts, windows(text) + HARD)
            return build_cases(tmp, specs)
    return build_cases(tmp, specs)


def build_cases(tmp: Path, specs: dict) -> dict[str, dict]:
    cases = {}
    for name, (run, prompts, texts) in specs.items():
        out = tmp / f"{name}-hf"
        export.main([str(run), "--format", "hf", str(out)])
        tokenizer = load_model(run)[2]
        greedy = [sample.main([str(run), "--prompt", p, "--temperature", "0", "--max-new-tokens", str(NEW_TOKENS),
                               "--device", "cpu"], out=io.StringIO())[0] for p in prompts]
        ids = []
        for text in texts:
            try:
                ids.append(tokenizer.encode(text))
            except UserError:
                ids.append("refused")
        batch = [prompts[0], prompts[0].rsplit(" ", 2)[0]]  # two whole words fewer: fewer tokens, padded
        cases[name] = {"dir": str(out), "prompts": prompts, "texts": texts, "greedy": greedy, "ids": ids,
                       "batch": batch}
    return cases


HF_SIDE = """
import importlib.util, json, sys
for name in ("tinygpt", "model"):
    assert importlib.util.find_spec(name) is None, f"{name} is importable: the test is not isolated"
from transformers import AutoTokenizer, pipeline


def batched(generate, folder, prompts, n):
    # README_EXPORT.md's recipe: a pad token set at run time (the files name none)
    generate.tokenizer.pad_token_id = generate.model.config.bos_token_id
    alone = [generate(p, max_new_tokens=n, do_sample=False)[0]["generated_text"] for p in prompts]
    piped = [r[0]["generated_text"] for r in generate(prompts, max_new_tokens=n, do_sample=False, batch_size=2)]
    tok = AutoTokenizer.from_pretrained(folder)  # as loaded: the pipeline turned its own to left padding
    tok.pad_token_id = generate.model.config.bos_token_id
    inputs = tok(prompts, padding=True, return_tensors="pt")  # (2, T): the shorter prompt padded
    out = generate.model.generate(**inputs, max_new_tokens=n, do_sample=False)  # (2, T + n)
    new = tok.batch_decode(out[:, inputs.input_ids.shape[1]:])  # the new tokens only: no padding
    # the recipe's last line: clear the pad token before saving, or the saved copy makes it a special token
    generate.tokenizer.pad_token = None
    generate.save_pretrained(folder + "-saved")
    pad_text = tok.decode([generate.model.config.bos_token_id])
    text = prompts[0] + pad_text + prompts[1]
    saved = AutoTokenizer.from_pretrained(folder + "-saved")
    return {"alone": alone, "piped": piped, "generated": [p + t for p, t in zip(prompts, new)],
            "pads": inputs.attention_mask.eq(0).sum(dim=1).tolist(),
            "saved": [saved.decode(saved(text)["input_ids"], skip_special_tokens=True),
                      AutoTokenizer.from_pretrained(folder).decode(tok(text)["input_ids"], skip_special_tokens=True)]}


result = {}
for name, job in json.load(open(sys.argv[1])).items():
    tok = AutoTokenizer.from_pretrained(job["dir"])
    ids = []
    for text in job["texts"]:
        try:
            ids.append(tok(text)["input_ids"])
        except Exception:  # tokenizers refuses a piece outside a WordLevel vocabulary
            ids.append("refused")
    generate = pipeline("text-generation", model=job["dir"], tokenizer=tok, device="cpu")
    texts = [generate(p, max_new_tokens=job["n"], do_sample=False)[0]["generated_text"] for p in job["prompts"]]
    prompt = next(p for p in job["prompts"] if p)
    try:  # the simplest call, every setting the export's own
        default = generate(prompt)[0]["generated_text"]
    except Exception as e:
        default = f"{type(e).__name__}: {e}"
    result[name] = {"ids": ids, "generated": texts, "tokenizer": type(tok).__name__, "default": [prompt, default],
                    "batch": batched(generate, job["dir"], job["batch"], job["n"])}
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def hf_side(cases, tmp_path_factory) -> dict[str, dict]:
    """Run every export through transformers alone, in one subprocess from an empty folder."""
    folder = tmp_path_factory.mktemp("no_tinygpt")
    (folder / "jobs.json").write_text(json.dumps({n: {**c, "n": NEW_TOKENS} for n, c in cases.items()}))
    (folder / "hf_side.py").write_text(HF_SIDE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run([sys.executable, "hf_side.py", "jobs.json"], cwd=folder, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


CASES = ["char", "word", "bpe", "gpt2-compact", "gpt2-full"]


def case(name: str, cases: dict) -> dict:
    if name not in cases:
        pytest.skip(f"GPT-2's vocabulary needs r50k_base.tiktoken and tinyshakespeare.txt in {SHARED_DATA}")
    return cases[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_pipeline_greedy_equals_sample_py(name, cases, hf_side):
    c = case(name, cases)
    for prompt, ours, theirs in zip(c["prompts"], c["greedy"], hf_side[name]["generated"]):
        # an empty prompt: both start from the export's bos, the newline, which the pipeline shows
        assert theirs == (prompt + ours if prompt else "\n" + ours), f"prompt {prompt!r}"
        assert len(ours) > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_a_batch_continues_each_prompt_as_alone(name, cases, hf_side):
    """Two prompts of different lengths, greedy, in one batch: the pipeline's and model.generate's on
    the tokenizer's padding give what each prompt gives alone. (The export names no pad token, and
    the tokenizer padded on the right: model.generate then continued the shorter prompt after its pads.)"""
    case(name, cases)
    batch = hf_side[name]["batch"]
    assert batch["pads"][0] == 0 and batch["pads"][1] > 0  # the shorter prompt was padded (on the left)
    assert batch["piped"] == batch["alone"]
    assert batch["generated"] == batch["alone"]
    assert batch["saved"][0] == batch["saved"][1]  # saved after clearing the pad token: text decodes as before


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_the_pipelines_defaults_fit_the_context(name, cases, hf_side):
    """pipeline(...)(prompt) with no length given: up to 65 tokens in all, the context's 64 and one more
    (transformers' own default, 256 new tokens, overran them with an IndexError)."""
    case(name, cases)
    prompt, default = hf_side[name]["default"]
    assert default.startswith(prompt) and len(default) > len(prompt), default


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_autotokenizer_gives_our_ids(name, cases, hf_side):
    c = case(name, cases)
    assert hf_side[name]["tokenizer"] != "GPT2Tokenizer"
    assert hf_side[name]["ids"] == c["ids"]
    if name in ("char", "word"):  # both refuse the text with a character or word outside the vocabulary
        assert c["ids"][-1] == "refused" and all(ids != "refused" for ids in c["ids"][:-1])
    else:
        assert "refused" not in c["ids"]


def test_the_export_holds_a_tokenizer_and_a_generation_config(cases):
    folder = Path(cases["word"]["dir"])
    assert sorted(p.name for p in folder.iterdir()) == sorted(hf.HF_FILES)
    gen = json.loads((folder / "generation_config.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    newline = config["tinygpt"]["tokenizer"]["words"].index("\n")
    assert gen["bos_token_id"] == config["bos_token_id"] == newline and gen["eos_token_id"] is None
    # no pad token (transformers would make the newline special); left padding; the context plus one in all
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert "pad_token" not in tokenizer_config and tokenizer_config["padding_side"] == "left"
    # GPT-2's inputs: transformers 4 also returned token_type_ids, added as token 0's embedding at every
    # position, so model.generate(**tok(text)) differed from the pipeline (logits off by up to 7.8)
    assert tokenizer_config["model_input_names"] == ["input_ids", "attention_mask"]
    assert "pad_token_id" not in gen and gen["max_length"] == 65
    assert "word vocabulary" in config["tinygpt"]["note"] and "None" not in config["tinygpt"]["note"]


# ---- tokenizer.json against our tokenizers, no model ----


def test_word_regex_splits_characters_as_python_does():
    # where Python's classes and Unicode's differ (marks, numerals that are not digits, connectors,
    # controls and spaces), every character; elsewhere every 50th (splitting all takes ~20 s)
    assigned = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    tricky = ("Mn", "Mc", "Me", "Nl", "No", "Pc", "Cc", "Cf", "Zs", "Zl", "Zp")
    chosen = [c for i, c in enumerate(assigned) if unicodedata.category(c) in tricky or ord(c) < 256 or i % 50 == 0]
    text = "\n".join(f"a{c}b 1{c}2 {c} {c}{c}" for c in chosen)
    pre = tokenizers.pre_tokenizers.Split(tokenizers.Regex(hf.word_pattern()), behavior="isolated")
    assert [piece for piece, _ in pre.pre_tokenize_str(text)] == tk.WordTokenizer.split(text)
    char = tokenizers.pre_tokenizers.Split(tokenizers.Regex(hf.CHAR_PATTERN), behavior="isolated")
    assert [piece for piece, _ in char.pre_tokenize_str(text)] == list(text)


def test_letters_newer_than_pythons_unicode_split_as_python_splits_them():
    """tokenizer.json said \\p{L} for a letter: the Unicode tables of `tokenizers`, which can be newer
    than Python's. A letter Python's tables lack (U+1C89 before Unicode 16: "the cat\\u1c89s sat")
    was one word there, three pieces here, and AutoTokenizer refused the text that ours encodes
    (`WordLevel error: Missing [UNK] token`). The pattern spells Python's classes as ranges instead."""
    unassigned = "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cn")
    others = tokenizers.pre_tokenizers.Split(tokenizers.Regex(r"[^\p{L}\p{N}]"), behavior="removed")
    newer = "".join(piece for piece, _ in others.pre_tokenize_str(unassigned))  # letters, digits to tokenizers only
    if not newer:
        pytest.skip("Python's Unicode tables are as new as those of tokenizers")
    text = "\n".join(f"a{c}b 1{c}2 {c} {c}{c}" for c in newer[::max(1, len(newer) // 1000)])
    pre = tokenizers.pre_tokenizers.Split(tokenizers.Regex(hf.word_pattern()), behavior="isolated")
    assert [piece for piece, _ in pre.pre_tokenize_str(text)] == tk.WordTokenizer.split(text)
    text = f"the cat{newer[0]}s sat"
    ours = tk.build_tokenizer("word", text)
    theirs = tokenizers.Tokenizer.from_str(hf.hf_tokenizer(ours).to_str())  # as tokenizer.json loads
    assert theirs.encode(text).ids == ours.encode(text) and theirs.decode(ours.encode(text)) == text
    # ranges of code points, not one entry per letter (~130,000; the letters' ranges are spelled twice, once
    # for a word's start, once after its marks)
    assert len(hf.word_pattern()) < 40_000


@pytest.mark.parametrize("compact", [True, False])
def test_bpe_tokenizer_json_gives_our_ids(compact, learned_encoding):
    tok = tk.build_tokenizer("learned", STORY[:5000], compact=compact)
    theirs = hf.hf_tokenizer(tok)
    for text in windows(STORY, 20, 200) + HARD:
        assert theirs.encode(text).ids == tok.encode(text), repr(text)
        assert theirs.decode(tok.encode(text)) == text
    if not compact:  # <|endoftext|> keeps its id and decodes, yet in text it is plain text, as in ours
        assert theirs.token_to_id("<|endoftext|>") == learned().eot_token
        assert theirs.decode([learned().eot_token]) == "<|endoftext|>"


def test_export_without_the_optional_packages_is_one_line(tmp_path, monkeypatch, tiny_stories_run):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    with pytest.raises(UserError, match="needs the tokenizers package: pip install tokenizers"):
        export.main([str(tiny_stories_run), str(tmp_path / "hf")])
    assert not (tmp_path / "hf").exists()  # nothing written
    # safetensors too, checked before anything is written: its refusal left the new folders of OUT's path
    monkeypatch.delitem(sys.modules, "tokenizers")
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(UserError, match="needs the safetensors package: pip install safetensors"):
        export.main([str(tiny_stories_run), str(tmp_path / "p1" / "p2" / "hf")])
    assert not (tmp_path / "p1").exists()
    # the import reads no tokenizer.json: it needs safetensors alone, as the docs say
    monkeypatch.delitem(sys.modules, "safetensors.torch")
    export.main([str(tiny_stories_run), str(tmp_path / "hf")])
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert (tmp_path / "back" / "ckpt.pt").is_file()

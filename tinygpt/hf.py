"""Hugging Face interop (export.py is its command line): a run as a GPT-2 checkpoint, and a GPT-2
checkpoint as a run.

The export loads in transformers with `GPT2LMHeadModel.from_pretrained(OUT_DIR)` and gives the same
logits. tinygpt's GPT *is* GPT-2's architecture (pre-LayerNorm blocks, learned positions, exact
GELU MLP of width 4C, LM head tied to the token embedding), written with four separate projections
where GPT-2 fuses q, k, v into one `c_attn`, and with nn.Linear weights (out, in) where GPT-2's
Conv1D stores (in, out). Per block i:

    tinygpt                               GPT-2 (transformers GPT2LMHeadModel)
    tok_emb, pos_emb                      transformer.wte, transformer.wpe
    blocks.i.ln_1, ln_2                   transformer.h.i.ln_1, ln_2
    attn.q_proj, k_proj, v_proj           attn.c_attn = [W_Q; W_K; W_V]^T  (C, 3C), bias [b_q; b_k; b_v]
    attn.out_proj, mlp.fc, mlp.out_proj   attn.c_proj, mlp.c_fc, mlp.c_proj (transposed)
    ln_f; lm_head tied to tok_emb         transformer.ln_f; lm_head tied to wte (not stored)

GPT-2 always has biases, so a `bias: false` model exports zeros there; a `causal: false` model
cannot be expressed as GPT-2 and is refused.

The export is self-contained: `transformers.pipeline("text-generation", model=OUT_DIR)` generates
with it, in a process without tinygpt. Besides config.json and model.safetensors it writes
- tokenizer.json (+ tokenizer_config.json): our tokenizer in the `tokenizers` library's own terms,
  giving our token ids. char and word: a WordLevel vocabulary (an unknown piece is refused, as
  ours refuses it) after a Split pre-tokenizer with our pieces' regex, a Fuse decoder that joins
  pieces back. BPE: tiktoken's split regex, byte-level BPE over the vocabulary's tokens (the compact
  ones renumbered) with one merge per token, the last merge tiktoken's BPE makes to form it
  (`bpe_merges`): the ids are equal to ours by construction (see docs/interop.md for why).
- generation_config.json: sample.py's defaults (temperature 0.8, no top-k), and as the start token
  (bos) the newline sample.py starts from when the prompt is empty (GPT-2's <|endoftext|> for the
  full GPT-2 vocabulary). Prompt plus new tokens must fit in the context plus one: GPT-2's positions
  end there (max_length, generation_config below).
No pad token is written (tokenizer_config below): set one where you batch, as README_EXPORT.md shows.
config.json also records tinygpt's tokenizer and config, so that the import restores them.

The import reads config.json and model.safetensors (or pytorch_model.bin, with weights_only=True),
e.g. the original GPT-2 weights, into a GPT with bias=True, and writes a checkpoint with the
tiktoken `gpt2` tokenizer that sample.py uses (tiktoken needs its encoding file: offline, set
TIKTOKEN_CACHE_DIR). Importing our own export restores the exact model, tokenizer and config.

Both directions write their output folder whole: built in a temp folder beside it, then renamed into
place (`whole_folder`), so Ctrl-C leaves nothing behind and two runs into one folder never mix their
files. So the folder must be new, empty, or hold only an earlier output (replaced with --force): a
file of the user's there would be lost with it, and is refused; so is the source folder or one inside it.

The `safetensors` and `tokenizers` packages (both come with transformers) are optional dependencies,
imported when needed: the export needs both, the import `safetensors` alone (for model.safetensors).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import stat
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Sequence

import torch

from model import GPT
from tinygpt.checkpoint import (atomic_dir, atomic_write, atomic_write_text, check_writable, file_kind, is_utf8,
                                load_model, load_weights, mostly_holes, odd_file, resolve_checkpoint, resolved,
                                save_checkpoint, sweep_folder_temp_files, torch_load)
from tinygpt.config import CHECKPOINTS, MAX_INT, Config, config_from_dict, config_to_dict
from tinygpt.errors import UserError, count, path_word, read_capped, reason, shell_join, short
from tinygpt.runs import LOCK, RUN_FILES, training_note, training_now, write_config
from tinygpt.runtime import check_memory, model_memory
from tinygpt.tokenizer import (GPT2_VOCAB, DamagedTokenizer, Tokenizer, TiktokenTokenizer, bpe_merges, combining_marks,
                               encode_prompt, tiktoken_data, tokenizer_from_dict)

# GPT2Config's defaults (the 124M GPT-2) for keys a config.json leaves out
GPT2_DEFAULTS = {"vocab_size": GPT2_VOCAB, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
                 "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.1,
                 "layer_norm_epsilon": 1e-5, "scale_attn_weights": True}
HF_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "README_EXPORT.md")
# config.json's size, at most: a GPT-2's is about 1 KB, but tinygpt's own export records the run's tokenizer in
# it (about 50 bytes a merge or word: 1.2 MB for a bpe_vocab_size of 24,000; a char vocabulary of every code
# point, 17 MB); parsed, 32 MiB of JSON takes 0.6 GB at most (a list of [1,2] pairs). 1 MiB refused the
# import of an export of 21,000 tokens or more
CONFIG_JSON_MAX = 32 << 20
IMPORT_FILES = (*RUN_FILES, "tensorboard")  # what a run directory may hold, for --force to replace


def need(module: str, package: str, what: str) -> ModuleType:
    """Import an optional dependency, or a one-line UserError saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"{what} needs the {package} package: pip install {package} "
                        f"(or pip install -r requirements-dev.txt)") from None


# ---- safetensors ----


def save_safetensors(path: str | Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Atomically write tensors to a .safetensors file."""
    st = need("safetensors.torch", "safetensors", "writing model.safetensors")
    data = st.save({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, metadata)
    atomic_write(path, lambda f: f.write(data))


def load_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a .safetensors file -> tensors by name; a missing or malformed file is a UserError."""
    st = need("safetensors.torch", "safetensors", "reading model.safetensors")
    path = Path(path)
    if not path.is_file():
        raise UserError(f"safetensors file not found: {path}")
    try:
        open(path, "rb").close()  # (safetensors says an unreadable file is "No such file or directory")
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    if mostly_holes(path):  # (a tensor's bytes in a hole, claimed as 8 GB of a bias: 10.7 GB read to check it)
        raise UserError(f"{path} is not a valid safetensors file: most of its {path.stat().st_size:,} bytes were "
                        f"never written (a file of holes), as no safetensors writer leaves them")
    try:
        if is_utf8(str(path)):
            return st.load_file(str(path))
        with open(path, "rb") as f:  # (safetensors opens a file by its name as UTF-8: a folder named $'\xff')
            return st.load(f.read())
    except Exception as e:  # safetensors reports damage as SafetensorError, OSError, ...
        raise UserError(f"{path} is not a valid safetensors file ({reason(e, 160)})") from None


# ---- tokenizer.json ----

CHAR_PATTERN = r"[\s\S]"  # any one character (Oniguruma's "." stops at a newline)
UNK = "[UNK]"  # never a piece of our vocabularies (the regexes split it), so an unknown piece is refused


def word_pattern() -> str:
    r"""WordTokenizer.RULE in the regex dialect of `tokenizers` (Oniguruma), each class spelled out
    as the code points Python's `re` puts in it: letters [^\W\d_], marks (combining_marks), digits \d,
    whitespace \s (that is \x1c-\x1f too, unlike \p{White_Space}). Unicode's classes (\p{L}, \p{M}, \p{Nd}) would
    follow the tables of `tokenizers`, which can be newer than Python's: a letter that Python's tables lack yet (U+1C89,
    Unicode 16) was part of a word there, a piece of its own here, and tokenizer.json refused the text."""
    every = "".join(map(chr, range(sys.maxunicode + 1)))

    def spelled(cls: str) -> str:  # the code points of cls as ranges: \x{30}-\x{39}\x{660}-\x{669}...
        return "".join(f"\\x{{{m.start():x}}}" + (f"-\\x{{{m.end() - 1:x}}}" if m.end() - m.start() > 1 else "")
                       for m in re.finditer(f"{cls}+", every))
    letters, marks, digits, spaces = map(spelled, (r"[^\W\d_]", f"[{combining_marks()}]", r"\d", r"\s"))
    return rf" ?[{letters}]+(?:[{marks}]+[{letters}]*)*| ?[{digits}]+| ?[^{spaces}]|[{spaces}]"


def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map: byte-level BPE vocabularies spell tokens with it."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


def hf_tokenizer(tok: Tokenizer):
    """Our tokenizer as a `tokenizers.Tokenizer` that gives the same ids for the same text."""
    tokenizers = need("tokenizers", "tokenizers", "the tokenizer.json of the export")
    from tokenizers import Regex, decoders, models, pre_tokenizers

    if not isinstance(tok, TiktokenTokenizer):  # char, word: a fixed table of pieces
        hf = tokenizers.Tokenizer(models.WordLevel({p: i for i, p in enumerate(tok.pieces)}, unk_token=UNK))
        pattern = CHAR_PATTERN if tok.kind == "char" else word_pattern()
        hf.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        hf.decoder = decoders.Fuse()  # pieces joined as they are (no spaces added)
        return hf
    alphabet = byte_level_alphabet()

    def spell(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    ranks = tok.bpe_ranks()  # token bytes -> original id = its BPE rank
    our_id = (lambda i: i) if tok.ids is None else (lambda i: int(tok.lookup[i]))
    vocab = {spell(token): our_id(rank) for token, rank in ranks.items()}
    if tok.ids is None:  # the full encoding's special tokens, e.g. <|endoftext|>: they decode, but as
        # plain vocabulary entries, not added tokens, so that text spelling one encodes as plain text, as ours
        specials = tok.encoding._special_tokens
        if any(t in vocab for t in specials):
            raise UserError(f"a special token of {tok.name!r} is spelled like one of its BPE tokens; this "
                            f"encoding cannot be exported with a full vocabulary")
        vocab.update(specials)
    merges = []  # one per token, in rank order: the pair tiktoken's BPE merges last to form it
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        steps = bpe_merges(token, ranks)
        if steps and steps[-1][0] + steps[-1][1] == token:  # else BPE never forms it from its bytes
            merges.append((spell(steps[-1][0]), spell(steps[-1][1])))
    # ignore_merges: a piece that is a whole token is that token, as in tiktoken
    hf = tokenizers.Tokenizer(models.BPE(vocab, merges, ignore_merges=True))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(tok.pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    return hf


def start_and_end_ids(tok: Tokenizer) -> tuple[int, int | None]:
    """(bos, eos) of the export: the full GPT-2 vocabulary keeps GPT-2's <|endoftext|> for both;
    otherwise generation starts where sample.py starts an empty prompt, and has no end token."""
    if isinstance(tok, TiktokenTokenizer) and tok.ids is None and "<|endoftext|>" in tok.encoding._special_tokens:
        eot = tok.encoding._special_tokens["<|endoftext|>"]
        return eot, eot
    return encode_prompt(tok, "")[0], None


# ---- tinygpt -> GPT-2 ----


def gpt2_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """Our weights under GPT-2's names and layouts (Conv1D (in, out), fused c_attn); zero biases
    where the model has none. lm_head is left out: it is tied to wte."""
    C = model.config.n_embd

    def w(linear: torch.nn.Linear) -> torch.Tensor:
        return linear.weight.detach().t()  # nn.Linear (out, in) -> Conv1D (in, out)

    def b(module: torch.nn.Module, n: int) -> torch.Tensor:
        return module.bias.detach() if module.bias is not None else torch.zeros(n)

    sd = {"transformer.wte.weight": model.tok_emb.weight.detach(),
          "transformer.wpe.weight": model.pos_emb.weight.detach()}
    for i, block in enumerate(model.blocks):
        h, attn, mlp = f"transformer.h.{i}.", block.attn, block.mlp
        sd[h + "ln_1.weight"], sd[h + "ln_1.bias"] = block.ln_1.weight.detach(), b(block.ln_1, C)
        # GPT-2 computes x @ c_attn then splits q, k, v along the output: their columns go side by side
        sd[h + "attn.c_attn.weight"] = torch.cat([w(attn.q_proj), w(attn.k_proj), w(attn.v_proj)], dim=1)  # (C, 3C)
        sd[h + "attn.c_attn.bias"] = torch.cat([b(attn.q_proj, C), b(attn.k_proj, C), b(attn.v_proj, C)])  # (3C,)
        sd[h + "attn.c_proj.weight"], sd[h + "attn.c_proj.bias"] = w(attn.out_proj), b(attn.out_proj, C)
        sd[h + "ln_2.weight"], sd[h + "ln_2.bias"] = block.ln_2.weight.detach(), b(block.ln_2, C)
        sd[h + "mlp.c_fc.weight"], sd[h + "mlp.c_fc.bias"] = w(mlp.fc), b(mlp.fc, 4 * C)  # (C, 4C)
        sd[h + "mlp.c_proj.weight"], sd[h + "mlp.c_proj.bias"] = w(mlp.out_proj), b(mlp.out_proj, C)  # (4C, C)
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = model.ln_f.weight.detach(), b(model.ln_f, C)
    return {k: v.float().contiguous() for k, v in sd.items()}


def tokenizer_note(tok: dict[str, Any]) -> str:
    """What the exported model's token ids mean, for config.json and README_EXPORT.md."""
    kind, encoding = tok.get("kind"), tok.get("encoding")
    if kind == "char":
        return ("token ids are tinygpt's character vocabulary, not GPT-2's BPE: id i is character i of "
                "config.json's tinygpt.tokenizer.chars; tokenizer.json gives these ids")
    if kind == "word":
        return ("token ids are tinygpt's word vocabulary, not GPT-2's BPE: id i is piece i of "
                "config.json's tinygpt.tokenizer.words (a word with the space before it, a punctuation mark or a "
                "whitespace character); tokenizer.json gives these ids")
    if kind == "bpe":
        return ("token ids are a byte-level BPE learned from the run's training text (GPT-2's way, other "
                "merges): config.json's tinygpt.tokenizer.merges; tokenizer.json gives these ids, a stock GPT-2 "
                "tokenizer does not")
    if "ids" in tok:
        return (f"token ids are remapped: a compact vocabulary of the tiktoken {encoding!r} encoding, "
                f"id i is {encoding} id ids[i], ids being config.json's tinygpt.tokenizer.ids; tokenizer.json gives "
                f"these ids, a stock GPT-2 tokenizer gives wrong ones")
    if encoding in ("gpt2", "r50k_base"):
        return ("token ids are GPT-2's own (tiktoken gpt2 = r50k_base): tokenizer.json and a stock GPT-2 tokenizer "
                "agree, but on `<|endoftext|>` written in the text: plain text here, id 50256 to a stock tokenizer")
    return f"token ids are those of the tiktoken {encoding!r} encoding, not GPT-2's; tokenizer.json gives them"


def hf_config(cfg: Config, tok: dict[str, Any], source: str, step: int, bos: int, eos: int | None) -> dict[str, Any]:
    """GPT-2 config.json for a tinygpt config, with tinygpt's tokenizer and config recorded."""
    m = cfg.model
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": m.vocab_size, "n_positions": m.block_size, "n_ctx": m.block_size,
        "n_embd": m.n_embd, "n_layer": m.n_layer, "n_head": m.n_head, "n_inner": None,
        "activation_function": "gelu",  # exact erf GELU, as in model.py ("gelu_new" is the tanh one)
        "resid_pdrop": m.dropout, "embd_pdrop": m.dropout, "attn_pdrop": m.dropout,
        "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True, "use_cache": True, "bos_token_id": bos, "eos_token_id": eos,
        "torch_dtype": "float32",
        "tinygpt": {"note": tokenizer_note(tok), "tokenizer": tok, "config": config_to_dict(cfg),
                    "source": source, "step": step},
    }


def generation_config(bos: int, eos: int | None, block_size: int) -> dict[str, Any]:
    """generation_config.json: sample.py's default sampling (temperature 0.8, no top-k), and at most
    block_size + 1 tokens in all (max_length): GPT-2's positions end at block_size, and the last token
    is predicted from the block_size before it, never fed back (sample.py slides its window there).
    A total, not max_new_tokens: a default count of new tokens would not shrink for a longer prompt
    (IndexError), and would override a max_length the user passes; transformers' own default, 256
    new tokens, overran a 128-token context. A max_new_tokens given takes precedence (transformers
    notes that both are set). No pad_token_id: ours would be an ordinary token (the newline), and
    generate() then masks it out of a prompt given without an attention mask."""
    return {"bos_token_id": bos, "eos_token_id": eos, "do_sample": True, "temperature": 0.8, "top_k": 0,
            "max_length": block_size + 1}


def tokenizer_config(cfg: Config) -> dict[str, Any]:
    """tokenizer_config.json: a plain fast tokenizer over tokenizer.json that leaves text as it is.
    No special tokens: transformers makes each one an added token, matched inside text before our
    split and dropped by decode(skip_special_tokens=True), the pipeline's default; ours are ordinary
    tokens (a pad token of the newline would drop every newline from generated text). So no pad token
    (a batch sets one at run time, README_EXPORT.md); padding on the left, as a decoder-only model must
    (the pipeline pads so anyway; tok(texts, padding=True) for model.generate reads it here). Its
    inputs are GPT-2's, ids and attention mask: transformers 4's PreTrainedTokenizerFast also returns
    token_type_ids by default, which GPT-2 adds as token 0's embedding at every position, so
    model(**tok(text)) and model.generate(**tok(text)) gave other logits."""
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.model.block_size,
            "clean_up_tokenization_spaces": False, "padding_side": "left",
            "model_input_names": ["input_ids", "attention_mask"]}


def refuse_overwrite(out_dir: Path, names: Sequence[str], force: bool) -> None:
    """Refuse an output folder the result cannot replace whole (it is written in a temp folder that
    then takes its place): a file, an unwritable folder, a folder holding anything but `names`
    (it would be lost with the folder), or one holding `names` (an earlier result) without force."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} is {file_kind(out_dir)}, not a folder")
    check_writable(out_dir, "output folder")
    if not out_dir.is_dir():
        return
    parent = resolved(out_dir, "output folder").parent  # the output takes the folder's place: a rename in it
    if not os.access(parent, os.W_OK | os.X_OK):  # (found after the work, it named our temp folder)
        raise UserError(f"output folder {out_dir} cannot be replaced: the output takes its place whole, and "
                        f"{parent} denies writing (permissions or a read-only file system); choose a folder in one "
                        f"you can write")
    if training_now(out_dir):
        raise UserError(f"{out_dir} is a run directory a training is writing now; wait for it to end, or choose "
                        f"another folder")
    present = []
    for entry in out_dir.iterdir():  # stops at the first stranger: a huge folder is not listed whole
        if entry.name not in names and not (entry.name == LOCK and "ckpt.pt" in names):  # (a killed run's lock)
            raise UserError(f"{out_dir} holds {short(entry.name)}, which is not one of the files written here; "
                            f"the output replaces the folder whole, so choose a new or empty folder")
        if entry.is_dir() and not entry.is_symlink() and entry.name != "tensorboard":
            # (a folder of the user's named config.json: --force deleted what it held)
            raise UserError(f"{out_dir} holds {short(entry.name)}, which is a folder, not the file written here; "
                            f"the output replaces the folder whole, so choose a new or empty folder")
        present.append(entry.name)
    if present and not force:
        trained = " (a trained run: --force deletes it)" if "metrics.csv" in present else ""
        raise UserError(f"{out_dir} already holds {', '.join(sorted(present))}{trained}; choose another folder or "
                        f"pass --force")


def refuse_inside(out_dir: Path, source: Path, what: str) -> None:
    """Refuse an output folder that is the source folder, inside it or around it (around a source
    file): the output would mix with the source's files, or, replacing the folder whole, destroy them."""
    out, src = resolved(out_dir, "output folder"), resolved(source, f"the {what}")
    if src.is_dir() and (out == src or src in out.parents):
        raise UserError(f"output folder {out_dir} is {'' if out == src else 'inside '}the {what} {source}, "
                        f"the source: its files would mix with the output; choose a folder outside it")
    if out in src.parents:
        raise UserError(f"output folder {out_dir} holds the {what} {source}, the source, and the output replaces "
                        f"the folder whole: choose a folder outside it")


@contextmanager
def whole_folder(out_dir: Path, names: Sequence[str], force: bool) -> Iterator[Path]:
    """A temp folder to write the output in, which then replaces out_dir in one rename (atomic_dir):
    an interrupted run leaves out_dir as it was, and two runs into one folder never mix their files.
    The folder is checked again just before the rename, so if another run filled it meanwhile,
    this one is refused as it would have been at the start (with force, the last to finish wins)."""
    def keep_existing(_: Path) -> bool:
        refuse_overwrite(out_dir, names, force)  # raises: atomic_dir then drops our temp folder
        return False

    # resolved: "." has no name to put a temp folder beside, and a symlinked folder stays a link
    target = resolved(out_dir, "output folder")
    if target == Path.cwd().resolve() or target in Path.cwd().resolve().parents:
        where = "is" if target == Path.cwd().resolve() else "holds"
        raise UserError(f"output folder {out_dir} {where} the current folder, and the output replaces it whole: "
                        f"name a new folder, e.g. {out_dir / 'hf'}")
    mode = stat.S_IMODE(target.stat().st_mode) if target.is_dir() else None
    # the temp folders of exports killed (SIGKILL) mid-write into this folder's neighbours: atomic_dir sweeps
    # only its own name's, and an export is mostly killed for a name that was wrong, never used again
    sweep_folder_temp_files(target.parent)
    with atomic_dir(target, keep_existing) as tmp:
        if mode is not None:  # the folder it replaces keeps its permissions (a group's setgid folder, say)
            tmp.chmod(mode)
        yield tmp


def export_source(ckpt_path: Path) -> tuple[Path, str]:
    """What an export of ckpt_path must stay out of (refuse_inside), and its name: the run directory
    the checkpoint is in (a folder holding a run's files, ckpt.pt and best.pt included), else the
    checkpoint file alone: the folder of a loose copy (L/model.pt) is no run, and an export beside
    it (L/hf) mixes with nothing."""
    folder = ckpt_path.parent
    if any((folder / name).exists() for name in IMPORT_FILES):
        return folder, "run directory"
    return ckpt_path, "checkpoint"


def export_hf(run: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Write HF_FILES as the folder out_dir for a tinygpt run: a folder transformers generates from
    alone. It appears whole or not at all (whole_folder); --force replaces an earlier export."""
    out_dir = Path(out_dir)
    ckpt_path = resolve_checkpoint(run)
    refuse_inside(out_dir, *export_source(ckpt_path))
    refuse_overwrite(out_dir, HF_FILES, force)
    model, cfg, tokenizer, ckpt = load_model(run)
    tok = ckpt["tokenizer"]
    source = str(ckpt_path)
    if note := training_note(ckpt_path, ckpt["step"], "exports"):  # (its best.pt goes on changing)
        print(note, file=sys.stderr)
    if not cfg.model.causal:
        raise UserError(f"{source} was trained with model.causal=false (bidirectional attention), which GPT-2 "
                        f"cannot express: its attention is always causal; retrain with causal: true")
    hf_tok = hf_tokenizer(tokenizer)  # before anything is written: it needs the optional packages
    need("safetensors.torch", "safetensors", "writing model.safetensors")  # (so does the weights file)
    bos, eos = start_and_end_ids(tokenizer)
    caution = ""
    if isinstance(tokenizer, TiktokenTokenizer) and tokenizer.ids is not None and not tokenizer.closed:
        caution = ("this run's compact vocabulary was made before compact vocabularies were closed under BPE "
                   "merges: tinygpt spells tokens outside it byte by byte, tokenizer.json encodes by BPE over "
                   "its tokens, and the two differ on some words; prepare the data again and retrain for an "
                   "exact tokenizer.json")
        print(f"note: {caution}", file=sys.stderr)
    config = json.dumps(hf_config(cfg, tok, source, int(ckpt["step"]), bos, eos), indent=2) + "\n"
    if len(config.encode()) > CONFIG_JSON_MAX:  # (then --from-hf could not bring it back)
        raise UserError(f"{source}: its vocabulary of {cfg.model.vocab_size:,} tokens is too large to record in "
                        f"config.json ({len(config.encode()) >> 20} MiB, past the {CONFIG_JSON_MAX >> 20} MiB an "
                        f"import reads)")
    with whole_folder(out_dir, HF_FILES, force) as tmp:  # in place only once every file is written
        save_safetensors(tmp / "model.safetensors", gpt2_state_dict(model), {"format": "pt"})
        atomic_write_text(tmp / "tokenizer.json", hf_tok.to_str())
        atomic_write_text(tmp / "tokenizer_config.json", json.dumps(tokenizer_config(cfg), indent=2) + "\n")
        generation = generation_config(bos, eos, cfg.model.block_size)
        atomic_write_text(tmp / "generation_config.json", json.dumps(generation, indent=2) + "\n")
        atomic_write_text(tmp / "config.json", config)
        command = shell_join(["python", "export.py", path_word(run), "--format", "hf", path_word(out_dir)])
        atomic_write_text(tmp / "README_EXPORT.md", export_readme(
            cfg, tok, f"`{source}` (step {ckpt['step']}) by `{command}`", os.path.abspath(out_dir), bos, eos,
            tokenizer.decode([bos]), caution))
    return out_dir


def export_readme(cfg: Config, tok: dict[str, Any], origin: str, folder: str, bos: int, eos: int | None,
                  pad: str, caution: str) -> str:
    """README_EXPORT.md: how to generate from the export with transformers alone, and where that differs
    from tinygpt. `pad` is the text of the start token, the pad that batches are told to use."""
    m = cfg.model
    L, ctx = m.block_size + 1, count(m.block_size, "token")  # max_length, the context
    stop = f"; it stops early at token {eos} (end of text)" if eos is not None else ""
    unknown = ("; a character or word outside the vocabulary fails in the tokenizer with `Missing [UNK] token` "
               "(sample.py names it, and first tries an accent's other Unicode form, é as one code point or as e and "
               "a combining accent: here write it as the training text did)" if tok.get("kind") in ("char", "word")
               else "")
    back = shell_join(["python", "export.py", "--from-hf", path_word(folder), "OUT_RUN_DIR"])
    hint = f"# PROMPT: at most {ctx}; do_sample=False: greedy; max_new_tokens=N: N more tokens"
    return f"""\
# GPT-2 export of a tinygpt run

Exported from {origin}.
It needs transformers only, not tinygpt:

    from transformers import pipeline
    generate = pipeline("text-generation", model={folder!r})
    print(generate("PROMPT")[0]["generated_text"])   {hint}

- Model: {count(m.n_layer, "layer")}, {count(m.n_head, "head")}, n_embd {m.n_embd}, context {m.block_size}, \
vocabulary {m.vocab_size}; exact GELU (`activation_function: gelu`).
- Tokens: {tokenizer_note(tok)}. The tokenizer is also recorded in config.json under `tinygpt.tokenizer`.
- Generation (generation_config.json): sampling at temperature 0.8 with no top-k, like sample.py, up to \
{L} tokens in all (`max_length`){stop}. GPT-2's positions end at the context, {ctx}, and the last token is \
predicted from the {ctx} before it. So a prompt of at most {ctx} continues to {L} tokens in all; a longer one is \
refused with transformers' ``ValueError: Input length of input_ids is N, but `max_length` is set to {L}``, \
and a `max_new_tokens` that takes prompt and continuation past {L} tokens ends in transformers' `IndexError: \
index out of range in self`, where tinygpt's sample.py slides its window and goes on (greedy, `do_sample=False` \
and `--temperature 0`, the two give the same tokens up to {L} in all). Given `max_new_tokens`, transformers 5 \
notes that `max_length` is set too: `max_new_tokens` takes precedence.
- Batches: set a pad token first. Any token will do (the attention mask hides padding), e.g. the start token \
(id {bos}, {pad!r}). The files name none: transformers makes a pad token of tokenizer_config.json a special \
token, and the pipeline drops special tokens from the text it decodes: every {pad!r} of a continuation would go.

      generate.tokenizer.pad_token_id = generate.model.config.bos_token_id
      generate(["PROMPT", "A LONGER PROMPT"], batch_size=2, max_new_tokens=N, do_sample=False)   # as each alone

  An empty prompt is the exception: in a batch it is all padding, masked whole, so it continues from nothing \
(alone, from the start token): generate it alone. Before `generate.save_pretrained(...)`, clear the pad token \
(`generate.tokenizer.pad_token = None`), or the saved copy names it, and its text drops every {pad!r}.

  tokenizer_config.json pads on the left, so `inputs = generate.tokenizer(prompts, padding=True, \
return_tensors="pt")` then `out = generate.model.generate(**inputs, ...)` works too; there the padding \
decodes as {pad!r}: decode only the new tokens, `out[:, inputs.input_ids.shape[1]:]`.
- Attention weights: transformers' default attention (sdpa) returns none, `.attentions == ()` (a None per layer \
in transformers 4); with \
`AutoModelForCausalLM.from_pretrained(FOLDER, attn_implementation="eager")`, \
`model(**inputs, output_attentions=True).attentions` holds one (1, {m.n_head}, T, T) tensor per layer (batch, \
head, query, key): tinygpt's own weights, as `sample.py --attention-png` draws them.
- tokenizer.json takes text as it is (sample.py first drops a byte-order mark and turns CRLF into LF){unknown}.
- {"Biases are zeros: the tinygpt model had none (bias: false)." if not m.bias else "Biases as trained."}
- Back to tinygpt, exactly: `{back}`.
""" + (f"- Caution: {caution}.\n" if caution else "")


# ---- GPT-2 -> tinygpt ----


def unique_keys(pairs: list[tuple[str, Any]], path: Path) -> dict[str, Any]:
    """A JSON object's pairs -> dict; a key given twice is refused (json keeps the last without a word)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise UserError(f"{path}: the key {short(key)} is given twice ({short(out[key])}, then {short(value)})")
        out[key] = value
    return out


def read_hf_config(folder: Path) -> dict[str, Any]:
    """config.json of a GPT-2 folder, refusing what tinygpt's GPT cannot represent."""
    path = folder / "config.json"
    if kind := odd_file(path):  # (a folder, a pipe, a link to nothing: not "missing")
        raise UserError(f"{path} is {kind}: a Hugging Face model folder holds config.json as a file")
    if not path.is_file():
        run = any((folder / name).is_file() for name in CHECKPOINTS)
        raise UserError(f"{folder} has no config.json: not a Hugging Face model folder" + (
            " but a tinygpt run; export it with "
            f"{shell_join(['python', 'export.py', path_word(folder), 'OUT'])}" * run))
    try:
        hf = json.loads(read_capped(path, CONFIG_JSON_MAX, lambda size: f"{path} is not a model config: a GPT-2 "
                                    f"config.json is about 1 KB (tinygpt's export, with its tokenizer, a few MB), "
                                    f"this one holds more than {CONFIG_JSON_MAX >> 20} MiB"),
                        object_pairs_hook=lambda pairs: unique_keys(pairs, path))
    except RecursionError:  # '[' * 100000: json nests by recursion
        raise UserError(f"{path} is not a model config: its JSON is nested too deeply") from None
    except ValueError as e:  # malformed JSON, not UTF-8, an integer of 5000 digits
        raise UserError(f"{path} is not valid JSON ({reason(e, 160)})") from None
    if not isinstance(hf, dict):
        raise UserError(f"{path} must hold a JSON object")
    hf = {**GPT2_DEFAULTS, **hf}  # transformers may leave out values equal to GPT2Config's defaults
    if hf.get("model_type", "gpt2") != "gpt2":
        raise UserError(f"{path}: model_type {hf.get('model_type')!r} is not gpt2; only GPT-2 checkpoints import")
    dropouts = ("resid_pdrop", "embd_pdrop", "attn_pdrop")  # tinygpt's one dropout is resid_pdrop's
    for key in ("n_embd", "n_layer", "n_head", "n_positions", "vocab_size", "layer_norm_epsilon", "n_inner", *dropouts):
        if hf.get(key) is None and key in ("n_inner", *dropouts):  # null: 4 * n_embd wide, no dropout
            continue
        if not isinstance(hf[key], (int, float)) or isinstance(hf[key], bool):
            raise UserError(f"{path}: {key}={short(hf[key])} must be a number")
    for key in ("n_embd", "n_layer", "n_head", "n_positions", "vocab_size"):  # (named as config.json names them)
        if type(hf[key]) is not int or not 1 <= hf[key] <= MAX_INT:  # (past 64 bits: named as config.json does)
            raise UserError(f"{path}: {key}={short(hf[key])} must be a whole number >= 1 that fits in 64 bits")
    if hf["n_embd"] % hf["n_head"]:
        raise UserError(f"{path}: n_embd={hf['n_embd']} is not divisible by n_head={hf['n_head']}")
    for key in ("scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention", "tie_word_embeddings",
                "reorder_and_upcast_attn"):  # (the last changes no number here, but "yes" is no setting of it)
        if key in hf and not isinstance(hf[key], bool):  # "false", a string, would read as true
            raise UserError(f"{path}: {key}={short(hf[key])} must be true or false")
    if hf["vocab_size"] < 1:  # (tinygpt's own model.vocab_size=0 means "from the tokenizer": not here)
        raise UserError(f"{path}: vocab_size={short(hf['vocab_size'])} must be >= 1")
    for key in dropouts:
        if hf.get(key) is not None and not 0 <= hf[key] < 1:  # (NaN too)
            raise UserError(f"{path}: {key}={short(hf[key])} must be in [0, 1) (a dropout probability)")
    n_embd = hf["n_embd"]
    checks = [
        (hf.get("n_inner") in (None, 4 * n_embd), f"n_inner={hf.get('n_inner')} (tinygpt's MLP is 4*n_embd wide)"),
        # (an integer is not 1e-5, and one of 401 digits made no float for the difference: a traceback)
        (isinstance(hf["layer_norm_epsilon"], float) and abs(hf["layer_norm_epsilon"] - 1e-5) < 1e-12,
         f"layer_norm_epsilon={short(hf['layer_norm_epsilon'])} (tinygpt uses 1e-5)"),
        (hf.get("scale_attn_weights", True), "scale_attn_weights=false"),
        (not hf.get("scale_attn_by_inverse_layer_idx", False), "scale_attn_by_inverse_layer_idx=true"),
        (not hf.get("add_cross_attention", False), "add_cross_attention=true"),
        (hf.get("tie_word_embeddings", True), "tie_word_embeddings=false (tinygpt's LM head is its token embedding)"),
        (hf.get("activation_function", "gelu_new") in ("gelu", "gelu_new", "gelu_pytorch_tanh"),
         f"activation_function={hf.get('activation_function')!r} (tinygpt's MLP uses GELU)"),
    ]
    for ok, what in checks:
        if not ok:
            raise UserError(f"{path}: {what} cannot be represented by tinygpt's GPT")
    return hf


def read_hf_weights(folder: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin (weights_only) -> GPT-2 tensors without the
    'transformer.' prefix, minus the causal-mask buffers some files carry. Sought in transformers'
    order: its shards come before pytorch_model.bin (a sharded save into a folder that held an older
    .bin left both, and the import took the old weights transformers never loads)."""
    if (folder / "model.safetensors").is_file():
        tensors = load_safetensors(folder / "model.safetensors")
    elif (folder / "model.safetensors.index.json").exists():
        before = ", and which transformers loads before its pytorch_model.bin" * (folder / "pytorch_model.bin").exists()
        raise UserError(f"{folder} holds a sharded checkpoint (model.safetensors.index.json), which is not supported"
                        f"{before}; save it as one file: model.save_pretrained(dir, max_shard_size='100GB')")
    elif (folder / "pytorch_model.bin").is_file():
        tensors = torch_load(folder / "pytorch_model.bin")  # weights_only: refused pickles are one line
        if not isinstance(tensors, dict) or not all(isinstance(t, torch.Tensor) for t in tensors.values()):
            raise UserError(f"{folder / 'pytorch_model.bin'} does not hold a dict of named tensors")
    elif any(folder.glob("*.index.json")):
        raise UserError(f"{folder} holds a sharded checkpoint, which is not supported; save it as one "
                        f"file: model.save_pretrained(dir, max_shard_size='100GB')")
    else:
        for name in ("model.safetensors", "pytorch_model.bin"):
            if kind := odd_file(folder / name):  # (a folder, a pipe, /dev/zero: not "missing")
                raise UserError(f"{folder / name} is {kind}: the weights must be a file")
        raise UserError(f"{folder} has neither model.safetensors nor pytorch_model.bin")
    out = {}
    for full, t in tensors.items():
        name = full.removeprefix("transformer.")
        if name.endswith((".attn.bias", ".attn.masked_bias")) and t.dim() != 1:  # old mask buffers
            continue
        if name in out:  # (one was kept without a word, and transformers loads the other)
            raise UserError(f"{folder}: the weights hold {name!r} twice, as {name!r} and {'transformer.' + name!r}; "
                            f"the checkpoint is damaged")
        out[name] = t
    return out


def _hf_to_tinygpt(hf: dict[str, Any], w: dict[str, torch.Tensor], folder: Path, bias: bool) -> dict[str, torch.Tensor]:
    """GPT-2 tensors -> our state dict (nn.Linear layouts, q/k/v split), float32."""
    L, C = hf["n_layer"], hf["n_embd"]
    used = {"lm_head.weight"}  # (checked below: it must be wte itself)

    def get(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        used.add(name)
        if name not in w:
            raise UserError(f"{folder}: the weights have no {name!r}; is this a GPT-2 checkpoint?")
        t = w[name]
        if tuple(t.shape) != shape:
            raise UserError(f"{folder}: {name} has shape {tuple(t.shape)}, config.json implies {shape}")
        if not t.is_floating_point():  # (.float() would make weights of an int64 or bool tensor without a word)
            raise UserError(f"{folder}: {name} is {t.dtype}, not a floating-point tensor; the weights are damaged")
        return t.float()

    sd = {"tok_emb.weight": get("wte.weight", (hf["vocab_size"], C)),
          "pos_emb.weight": get("wpe.weight", (hf["n_positions"], C))}
    for i in range(L):
        h, o = f"h.{i}.", f"blocks.{i}."
        q, k, v = get(h + "attn.c_attn.weight", (C, 3 * C)).t().split(C, dim=0)  # 3 x (C, C), (out, in)
        bq, bk, bv = get(h + "attn.c_attn.bias", (3 * C,)).split(C)
        pairs = [("ln_1.weight", get(h + "ln_1.weight", (C,)), None),
                 ("ln_1.bias", get(h + "ln_1.bias", (C,)), "b"),
                 ("attn.q_proj.weight", q, None), ("attn.q_proj.bias", bq, "b"),
                 ("attn.k_proj.weight", k, None), ("attn.k_proj.bias", bk, "b"),
                 ("attn.v_proj.weight", v, None), ("attn.v_proj.bias", bv, "b"),
                 ("attn.out_proj.weight", get(h + "attn.c_proj.weight", (C, C)).t(), None),
                 ("attn.out_proj.bias", get(h + "attn.c_proj.bias", (C,)), "b"),
                 ("ln_2.weight", get(h + "ln_2.weight", (C,)), None),
                 ("ln_2.bias", get(h + "ln_2.bias", (C,)), "b"),
                 ("mlp.fc.weight", get(h + "mlp.c_fc.weight", (C, 4 * C)).t(), None),
                 ("mlp.fc.bias", get(h + "mlp.c_fc.bias", (4 * C,)), "b"),
                 ("mlp.out_proj.weight", get(h + "mlp.c_proj.weight", (4 * C, C)).t(), None),
                 ("mlp.out_proj.bias", get(h + "mlp.c_proj.bias", (C,)), "b")]
        for name, t, kind in pairs:
            if kind is None or bias:
                sd[o + name] = t.contiguous()
    sd["ln_f.weight"] = get("ln_f.weight", (C,))
    ln_f_bias = get("ln_f.bias", (C,))  # (zeros where the tinygpt model had no biases, as every bias then)
    if bias:
        sd["ln_f.bias"] = ln_f_bias
    head = w.get("lm_head.weight")  # (its shape first: a float16 head of a claimed 1 GB took 3.4 GB as float32)
    wte = sd["tok_emb.weight"]
    if head is not None and (head.shape != wte.shape or not torch.equal(head.float(), wte)):
        raise UserError(f"{folder}: lm_head.weight is not tied to wte, but tinygpt's LM head is the embedding")
    sd["lm_head.weight"] = sd["tok_emb.weight"]
    extra = sorted(set(w) - used)  # e.g. the weights of layers config.json does not have: they would be dropped
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise UserError(f"{folder}: the weights hold {short(extra[0])}{more}, which config.json's model "
                        f"({count(L, 'layer')}, n_embd {C}) has not; config.json and the weights disagree")
    return sd


def _all_biases_zero(w: dict[str, torch.Tensor]) -> bool:
    return all(not t.any() for name, t in w.items() if name.endswith(".bias") and t.dim() == 1)


def tinygpt_record(hf: dict[str, Any], path: Path) -> dict[str, Any]:
    """The `tinygpt` record of a config.json that tinygpt's export wrote (its tokenizer and config), {}
    where there is none (a GPT-2 from elsewhere); a damaged one is refused, not taken for none."""
    record = hf.get("tinygpt")
    if record is None:
        return {}
    parts_ok = isinstance(record, dict) and all(isinstance(record.get(k, {}), dict) for k in ("config", "tokenizer"))
    tok = record.get("tokenizer", {}) if parts_ok else {}
    if not parts_ok or ("vocab_size" in tok and type(tok["vocab_size"]) is not int):
        raise UserError(f"{path}: the tinygpt record it holds (written by tinygpt's export) is damaged (its "
                        f"tokenizer and config must be mappings, the vocab_size a whole number); export the run again")
    for section, values in record.get("config", {}).items():  # (a train section of [1] became the defaults)
        if not isinstance(values, dict):
            named = section if section.isidentifier() and len(section) < 40 else short(section)
            raise UserError(f"{path}: the tinygpt.config.{named} it records is {short(values)}, not a "
                            f"mapping (damaged); export the run again")
    return record


def hf_folder(folder: Path) -> None:
    """Refuse a --from-hf source that is no folder."""
    if not folder.is_dir():
        raise UserError(f"{folder} is a file; --from-hf takes the folder that holds config.json" if folder.exists()
                        else f"Hugging Face model folder not found: {folder}")


def _read_hf(folder: str | Path) -> tuple[GPT, dict[str, Any]]:
    folder = Path(folder)
    hf_folder(folder)
    hf = read_hf_config(folder)
    meta = tinygpt_record(hf, folder / "config.json")
    weights = read_hf_weights(folder)
    # our own export of a bias-free model comes back bias-free (exactly the same computation)
    orig = meta.get("config", {}).get("model", {})  # (a mapping: tinygpt_record checked)
    bias = not (orig.get("bias") is False and _all_biases_zero(weights))
    dropout = hf["resid_pdrop"] or 0.0  # (checked by read_hf_config; null: no dropout)
    raw = {"block_size": hf["n_positions"], "n_layer": hf["n_layer"], "n_head": hf["n_head"], "n_embd": hf["n_embd"],
           "dropout": dropout, "bias": bias, "causal": True, "vocab_size": hf["vocab_size"]}
    cfg = config_from_dict({"model": raw}, str(folder / "config.json")).model  # types and ranges checked
    check_memory(model_memory(cfg), torch.device("cpu"), f"the model of {folder}", "its config.json is damaged, or it "
                 "needs a bigger machine")
    sd = _hf_to_tinygpt(hf, weights, folder, bias)  # every shape checked before a model of config.json's size is built
    model = GPT(cfg)
    load_weights(model, sd, folder)  # (NaN or infinite weights refused)
    return model.eval(), hf


def gelu_note(folder: Path, hf: dict[str, Any]) -> None:
    """Say that a GPT-2 of the tanh GELU computes slightly other logits here; once it has loaded (or
    imported), so that a refusal is the one line on stderr."""
    if hf.get("activation_function", "gelu_new") != "gelu":
        print(f"note: {folder} uses GPT-2's tanh-approximated GELU ({hf.get('activation_function')!r}); tinygpt's "
              f"MLP uses the exact one, so logits differ slightly from transformers' (fine-tuning absorbs it)",
              file=sys.stderr)


def load_hf_gpt2(folder: str | Path) -> GPT:
    """A local GPT-2 folder (config.json + model.safetensors or pytorch_model.bin) -> our GPT, eval mode:
    for use from Python (`export.py --from-hf` writes a run instead, through import_hf)."""
    model, hf = _read_hf(folder)
    gelu_note(Path(folder), hf)
    return model


def import_hf(folder: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Write a tinygpt run (ckpt.pt, config.yaml) from a GPT-2 folder; returns the checkpoint path.
    The run directory appears whole or not at all (whole_folder); --force replaces an earlier run."""
    folder, out_dir = Path(folder), Path(out_dir)
    hf_folder(folder)  # first: a file or a missing folder is no source for refuse_inside to protect
    refuse_inside(out_dir, folder, "Hugging Face folder")
    refuse_overwrite(out_dir, IMPORT_FILES, force)
    model, hf = _read_hf(folder)
    m = model.config
    meta = tinygpt_record(hf, folder / "config.json")
    tok = meta.get("tokenizer")
    if isinstance(tok, dict) and tok.get("vocab_size") == m.vocab_size and isinstance(meta.get("config"), dict):
        check_recorded_tokenizer(tok, folder / "config.json")
        raw = {s: dict(v) for s, v in meta["config"].items()}  # our own export (mappings: tinygpt_record checked)
    elif m.vocab_size == GPT2_VOCAB:
        check_gpt2_tokenizer(folder)  # its own tokenizer files, where it has them, must be GPT-2's
        # not instantiated here (tiktoken may be offline); sample.py builds it from this dict
        tok = {"kind": "tiktoken", "vocab_size": GPT2_VOCAB, "encoding": "gpt2"}
        raw = {"data": {"tokenizer": "gpt2", "compact_vocab": False}}
    else:
        raise UserError(f"{folder}: vocab_size={m.vocab_size} is not GPT-2's {GPT2_VOCAB} tokens and config.json "
                        f"records no tinygpt tokenizer of {m.vocab_size} tokens, so the token ids cannot be decoded")
    raw["model"] = config_to_dict(Config(model=m))["model"]  # vocab_size included: a saved config
    raw.setdefault("train", {})["out_dir"] = str(out_dir)
    cfg = config_from_dict(raw, str(folder / "config.json"), recorded=True)
    said = tok.get("encoding") if tok.get("kind") == "tiktoken" else tok.get("kind")
    if cfg.data.tokenizer != said:  # (a hand edit: the run's config.yaml would contradict its checkpoint)
        raise UserError(f"{folder / 'config.json'}: tinygpt.config says data.tokenizer={short(cfg.data.tokenizer)}, "
                        f"its tinygpt.tokenizer is {short(said)}: the record is damaged; export the run again")
    state = {"config": config_to_dict(cfg), "tokenizer": tok, "model": model.state_dict(), "step": 0,
             "best_val_loss": float("inf"), "elapsed_s": 0.0}
    with whole_folder(out_dir, IMPORT_FILES, force) as tmp:
        save_checkpoint(tmp / "ckpt.pt", state)
        write_config(tmp, cfg)
    gelu_note(folder, hf)
    return out_dir / "ckpt.pt"


# GPT-2's vocabulary as vocab.json spells it (byte_level_alphabet), <|endoftext|> = 50256, as vocab_digest hashes it
GPT2_VOCAB_DIGEST = "f0248afbc89ab1251601a24897e01a6b925407b3141bd6a4ca1455369bfcd337"
TOKENIZER_FILE_MAX = 64 * 2**20  # bytes: GPT-2's tokenizer.json is 1.4 MB


def vocab_digest(vocab: dict[str, int]) -> str:
    """A vocabulary (token -> id, as vocab.json and tokenizer.json spell tokens) as one hash of its
    'id<TAB>token' lines in id order: two vocabularies hash alike when they give every id the same token."""
    text = "\n".join(f"{i}\t{t}" for t, i in sorted(vocab.items(), key=lambda kv: kv[1]))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def folder_vocab(folder: Path) -> tuple[Path, dict[str, int]] | None:
    """The vocabulary of a Hugging Face folder's own tokenizer files (tokenizer.json's model vocab and added
    tokens, else vocab.json) with the file read, ids below GPT2_VOCAB (a pad token added past it is no id the
    model makes); None where it has neither file. A file that is no such vocabulary is a one-line UserError."""
    for name in ("tokenizer.json", "vocab.json"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(read_capped(path, TOKENIZER_FILE_MAX, lambda size: f"{path} is too large for a "
                                          f"tokenizer file ({size:,} bytes)"))
            if name == "tokenizer.json":
                vocab = dict(data["model"]["vocab"])
                vocab.update({t["content"]: t["id"] for t in data.get("added_tokens") or []})
            else:
                vocab = dict(data)
            if not all(isinstance(t, str) and type(i) is int for t, i in vocab.items()):
                raise TypeError("a token that is not text, or an id that is not a whole number")
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise UserError(f"{path}: not a tokenizer file tinygpt can read ({reason(e)}); remove it to import the "
                            f"model with GPT-2's tokenizer") from None
        return path, {t: i for t, i in vocab.items() if 0 <= i < GPT2_VOCAB}
    return None


def check_gpt2_tokenizer(folder: Path) -> None:
    """A GPT-2-sized folder (50,257 tokens) without tinygpt's record is imported with GPT-2's tokenizer; where
    its own tokenizer files give other tokens or ids (a GPT-2 retrained on another language's BPE), sampling
    from the import would decode its ids as other text: refused."""
    found = folder_vocab(folder)
    if found is not None and vocab_digest(found[1]) != GPT2_VOCAB_DIGEST:
        raise UserError(f"{found[0]}: this tokenizer is not GPT-2's (other tokens or ids), and tinygpt reads a "
                        f"GPT-2-sized model's ids with GPT-2's tokenizer only: its samples would be other text than "
                        f"its own tokenizer gives; tinygpt cannot import it")


def check_recorded_tokenizer(tok: dict[str, Any], path: Path) -> None:
    """Build the tokenizer config.json records (tinygpt.tokenizer), so that a damaged one is refused
    here rather than by sample.py on the imported run. A tiktoken one is checked as far as its data
    goes (tiktoken_data): building it needs its encoding file, which an offline import does not."""
    try:
        if tok.get("kind") == "tiktoken":
            tiktoken_data(tok)
        else:
            tokenizer_from_dict(tok)
    except DamagedTokenizer as e:
        raise UserError(f"{path}: the tinygpt.tokenizer it records is damaged ({e}); export the run again") from None

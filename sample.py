"""Generate text from a trained run, token by token.

    python sample.py RUN_DIR_OR_CKPT [--prompt TEXT | --prompt-file FILE|- | --interactive] [--max-new-tokens N]
                     [--temperature T] [--top-k K] [--top-p P] [--num-samples N] [--seed S]
                     [--no-kv-cache | --compile] [--show-steps]
                     [--show-attention] [--attention-of prompt|all] [--attention-last N]
                     [--attention-png DIR] [--attention-html FILE]
    python sample.py RUN_DIR_OR_CKPT --list-vocab

The run directory holds everything needed: config, tokenizer and weights (best.pt when present,
else ckpt.pt). Each step feeds the context to the model, reads the logits at the last position,
samples one token, prints it at once and appends it. That is only sound because the model was
trained under the causal mask: see docs/design.md, "Why generation needs the causal mask".

A prompt comes from --prompt, a file (or a pipe, `--prompt-file <(...)`), standard input
(`--prompt-file -`), at most 1 MiB, or, with `--interactive`, from each line typed (or piped) in
turn, answered with the model kept loaded until end of input. A char or word model knows only its
training text's characters or words: an unknown word is refused with the closest words it knows,
and `--list-vocab` prints them all.

Two teaching views (tables on stdout, see tinygpt/attention_view.py for their conventions):
- `--show-attention` prints every layer's and head's attention weights over the prompt (or, with
  `--attention-of all`, over the prompt plus each sample's generated text) as query x key percent
  tables of the last `--attention-last` tokens; `--attention-png DIR` also saves one heatmap per
  layer (needs matplotlib) of at most the last 64 of them and the first 32 heads (attention_view.MAX_HEATMAP,
  MAX_HEATMAP_HEADS).
- `--attention-html FILE` writes the attention explorer (tinygpt/attention_html.py): one offline
  page over the prompt and the generated text, every layer and head, hover a token to see where
  it looks, with each generated token's top-5 candidates (with --num-samples N, FILE_sample1..N; the
  pages of an earlier call's set that this call does not write are removed, and one sample.py at a
  time writes a set).
- `--show-steps` prints, instead of the streamed text, one row per generated token: the step, how
  many tokens of context the model saw, the token chosen and the top-5 candidates with their
  probabilities after temperature/top-k/top-p.

At a terminal, the control characters a model can write (ESC, '\\r', '\\b', BEL, the other C0 and
C1 controls, the bidi marks U+200E, U+200F and U+061C, overrides U+202A-U+202E and isolates
U+2066-U+2069, the line and paragraph separators U+2028 and U+2029) are shown as their
escapes, `\\x1b`, `\\r`, `\\u202e`, as --show-steps and --list-vocab write tokens, instead of moving
the cursor, recolouring, clearing the screen or reordering the text; '\\n' and '\\t' stay as they
are. Written to a file or a pipe (`> out.txt`, `| grep ...`), the text is exact, byte for byte.
"""
from __future__ import annotations

import math
import os
import shutil
import sys
from collections import deque
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

if __name__ == "__main__":  # before the imports below load torch: a Ctrl-C then is `interrupted`, not a traceback
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

import torch

from data.prepare import SNIFFED, convert, maybe_wide, wide_encoding
from model import GPT, Step, generate_steps
from tinygpt import attention_html, attention_view
from tinygpt.checkpoint import (check_name_fits, check_writable, file_kind, load_model, odd_file, regular_file_target,
                                resolve_checkpoint, sweep_folder_temp_files)
from tinygpt.config import MAX_THREADS
from tinygpt.errors import (ArgParser, ReaderMayLeave, Terminated, UserError, check_path_length, count, dead_link,
                            error_line, file_arg, path_arg, path_word, read_capped, run_cli, script_word, shell_join,
                            shell_quote, short, shown_path)
from tinygpt.plots import HEATMAP_MARK, png_marked
from tinygpt.runs import run_lock, run_name, training_note
from tinygpt.runtime import (ThreadPolicy, check_compile_cache, compile_decoding, following_free_cores, int8_problem,
                             int8_weights, keep_freed_memory, resolve_device, too_many_threads)
from tinygpt.tokenizer import clean_text, encode_prompt

TOKEN_COLUMN = 5  # the --show-steps token column is at least as wide as its header, "token"
MIN_TEMPERATURE = 1e-6  # below it sampling is greedy in all but name, and float32 cannot hold 1e-46 (use 0)
MAX_TEMPERATURE = 1e6  # above it every token is about as likely (float32: 4e38 is inf, and every logit ties)
MAX_PROMPT_BYTES = 1 << 20  # 1 MiB, a thousand times the biggest block (1024 tokens): the model sees only
# the last block_size tokens, and a 40 MB prompt cost 900 MB to encode and was echoed whole
MAX_SAMPLE_FILES = 10_000  # samples that each write a page or heatmaps (a million files is no one's wish)
TERMINAL_LINE = 4095  # bytes of a line Linux's terminal passes without line editing (it drops the rest unsaid)
MAX_SKIPPED = 64 << 20  # bytes of a piped line's rest skipped before --interactive stops (/dev/zero has no end)
SAMPLES_RULE = "-" * 15  # the line between the samples of one prompt (--num-samples)
ANSWERS_RULE = "=" * 15  # and between the answers of two lines of --interactive, where each has several samples


def build_parser() -> ArgParser:
    p = ArgParser(prog="sample.py", description="Generate text from a trained tinygpt run.",
                  epilog="At a terminal, control characters in the text (ESC, \\r, BEL, bidi overrides) are "
                         "shown as escapes (\\x1b); a file or a pipe gets the exact text.")
    p.add_argument("run", type=path_arg, help="run directory (uses best.pt, else ckpt.pt) or a checkpoint file")
    src = p.add_mutually_exclusive_group()
    # (default None, not "": argparse lets an explicit value equal to the default past the group's check)
    src.add_argument("--prompt", help="text to continue (default: a newline)")
    src.add_argument("--prompt-file", type=path_arg, help="read the prompt from this UTF-8 file; - = standard input")
    src.add_argument("--interactive", action="store_true",
                     help="keep the model loaded and answer each line of standard input as a prompt, until EOF")
    p.add_argument("--list-vocab", action="store_true", help="print the vocabulary (id and token) and exit")
    p.add_argument("--max-new-tokens", type=int, default=500, help="tokens to generate per sample (default: 500)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy; <1 sharper, >1 flatter (else 1e-6 to 1e6; default: 0.8)")
    p.add_argument("--top-k", type=int, default=None, help="sample only among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="nucleus: the smallest set with mass >= p")
    p.add_argument("--num-samples", type=int, default=1, help="independent samples to draw (default: 1)")
    p.add_argument("--seed", type=int, default=1337, help="random seed for sampling (default: 1337)")
    p.add_argument("--no-kv-cache", action="store_true", help="recompute the whole context every step")
    p.add_argument("--compile", action="store_true",
                   help="compile the one-token decoding step with torch.compile first (about a minute; then a "
                        "6x6x384 model decodes 1.4-3.0x faster on 2 CPU cores: worth it for big models, long or many samples)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "int8"), default="float32",
                   help="the weights' precision while generating: bfloat16 halves the bytes each token reads, int8 "
                        "(CPU only: int8 weights, one scale per row, bfloat16 activations) quarters them (faster where "
                        "decoding waits on memory; the greedy text may part from float32's, at the first token where "
                        "two candidates are near-tied: soon on a weakly trained model)")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads: 0 (default) = the cores other processes leave free and a CPU quota "
                        "allows, re-checked as it runs")
    p.add_argument("--force", action="store_true", help="sample even from a model trained without the causal mask")
    view = p.add_argument_group("seeing inside (tables on stdout)")
    view.add_argument("--show-steps", action="store_true",
                      help="instead of streaming the text, print one row per generated token: step, context "
                           "length, chosen token, top-5 candidates with probabilities")
    view.add_argument("--show-attention", action="store_true",
                      help="print each layer's and head's attention weights as query x key %% tables "
                           "('.' = masked future key)")
    view.add_argument("--attention-of", choices=("prompt", "all"), default=None,
                      help="prompt (default): the prompt's tokens; all: the prompt plus each sample's "
                           "generated text (implies --show-attention)")
    view.add_argument("--attention-last", type=int, default=None, metavar="N",
                      help=f"show the last N tokens (default {attention_view.SHOWN}); the weight on earlier keys is "
                           "summed into an 'earlier' column (implies --show-attention)")
    view.add_argument("--attention-png", type=path_arg, default=None, metavar="DIR",
                      help="also save one heatmap PNG per layer into DIR, heads as subplots (needs "
                           "matplotlib; implies --show-attention)")
    view.add_argument("--attention-html", type=file_arg, default=None, metavar="FILE",
                      help="write an interactive attention explorer over the prompt and the generated text: "
                           "one self-contained HTML page (att.html becomes att_sample1.html, ... for several samples)")
    return p


def check_args(args) -> None:
    """Sampling flags out of range are user errors."""
    if args.max_new_tokens < 0:
        raise UserError(f"--max-new-tokens={args.max_new_tokens} must be >= 0")
    # the model's own rules (model.next_token_probs raises ValueError) in the flags' words, then the command's
    # narrower ones: a temperature that means nothing
    if not math.isfinite(args.temperature) or args.temperature < 0:
        raise UserError(f"--temperature={args.temperature} must be a finite number >= 0 (0 = greedy)")
    if 0 < args.temperature < MIN_TEMPERATURE:
        raise UserError(f"--temperature={args.temperature} is too small to mean anything (below "
                        f"{MIN_TEMPERATURE:g} it is greedy in all but name); use 0 for greedy, "
                        f"or >= {MIN_TEMPERATURE:g}")
    if args.temperature > MAX_TEMPERATURE:
        raise UserError(f"--temperature={args.temperature} is too large to mean anything (above {MAX_TEMPERATURE:g} "
                        f"every token is about as likely, and --top-k/--top-p cannot tell them apart)")
    if not 0 <= args.seed < 2**63:
        raise UserError(f"--seed={args.seed} must be in [0, 2**63)")
    if args.top_k is not None and args.top_k < 1:
        raise UserError(f"--top-k={args.top_k} must be >= 1")
    if args.top_p is not None and not 0 < args.top_p <= 1:  # (a NaN is refused too)
        raise UserError(f"--top-p={args.top_p} must be in (0, 1]")
    if not 0 <= args.threads <= MAX_THREADS:  # libgomp fails, or segfaults, asked for tens of thousands
        raise UserError(f"--threads={short(args.threads)} must be in 0..{MAX_THREADS} (0 = the free cores; "
                        f"more threads than cores only slow it down)")
    if args.compile:
        check_compile_cache("--compile")
    if args.compile and args.no_kv_cache:
        raise UserError("--compile compiles the decoding step with the KV cache: drop --no-kv-cache")
    if args.compile and args.dtype == "int8":  # (measured: bench.py --vs-hf --compile, docs/results.md)
        raise UserError("--compile with --dtype int8: the compiled step decodes int8 weights slower than torch's "
                        "int8 kernel alone: drop --compile")
    if args.num_samples < 1:
        raise UserError(f"--num-samples={args.num_samples} must be >= 1")
    asked = {"--prompt": args.prompt is not None, "--prompt-file": args.prompt_file is not None,
             "--interactive": args.interactive, "--num-samples": args.num_samples != 1, "--compile": args.compile,
             "--show-steps": args.show_steps, "--show-attention": args.show_attention,
             "--attention-of": args.attention_of is not None, "--attention-last": args.attention_last is not None,
             "--attention-png": args.attention_png is not None, "--attention-html": args.attention_html is not None}
    if args.list_vocab and any(asked.values()):  # (they were ignored: no page written, exit 0)
        raise UserError(f"--list-vocab prints the vocabulary and nothing else: drop "
                        f"{' and '.join(flag for flag, given in asked.items() if given)}, or --list-vocab")
    files = [flag for flag in ("--attention-html", "--attention-png") if asked[flag]]
    if args.interactive and files:  # (each answer's files replaced the last one's, without a word)
        raise UserError(f"{' and '.join(files)} with --interactive: every answer would overwrite the last one's "
                        f"{'files' if len(files) > 1 else 'page' if asked['--attention-html'] else 'heatmaps'}; give "
                        f"each prompt its own call (--prompt TEXT), or drop {' and '.join(files)}")
    per_sample = args.attention_html is not None or (args.attention_png is not None and args.attention_of == "all")
    if per_sample and args.num_samples > MAX_SAMPLE_FILES:  # (their names were listed, and checked, first)
        raise UserError(f"--num-samples={args.num_samples:,} with --attention-html, or --attention-png and "
                        f"--attention-of all, writes files for each sample: at most {MAX_SAMPLE_FILES:,}")
    if args.attention_last is not None and args.attention_last < 1:
        raise UserError(f"--attention-last={args.attention_last} must be >= 1")
    check_output_folders(args)
    if args.attention_of is not None or args.attention_last is not None or args.attention_png is not None:
        args.show_attention = True
    args.attention_of = args.attention_of or "prompt"
    args.attention_last = args.attention_last or attention_view.SHOWN


def greedy_note(args) -> str | None:
    """--temperature 0 always takes the likeliest token: the flags that shape a random draw change nothing,
    and every sample is the same text. Said once, so that identical samples do not read as a bug."""
    if args.temperature != 0 or args.max_new_tokens == 0:
        return None
    idle = [flag for flag, given in (("--top-k", args.top_k is not None), ("--top-p", args.top_p is not None))
            if given]
    said = [f"{' and '.join(idle)} change{'' if len(idle) > 1 else 's'} nothing"] if idle else []
    if args.num_samples > 1:
        said.append(f"the {args.num_samples} samples are one text")
    return f"note: --temperature 0 is greedy: {'; '.join(said)}" if said else None


# ---- output paths, checked before any work ----


def check_output_folders(args) -> None:
    """Refuse the folders --attention-png and --attention-html cannot write into (a file, a path
    through a file, no permission, /proc), before the model is even loaded."""
    if args.attention_png is not None:
        if str(args.attention_png) == "-" and not args.attention_png.is_dir():  # (made a folder named '-' unsaid)
            raise UserError("--attention-png=-: the heatmaps are PNG files, one per layer, written into a folder (not "
                            "standard output); give a folder name, e.g. --attention-png attention")
        check_writable(args.attention_png, "--attention-png")
    if args.attention_html is not None:
        page = args.attention_html
        named = f"--attention-html={short(str(page))}"
        if str(page) == "-":  # (not standard output, as --prompt-file - is standard input: a page is a file)
            raise UserError(f"{named}: the page is a file (its data and script in one); give a file name, e.g. "
                            f"--attention-html attention.html")
        try:  # (the longest name: a page per sample, PAGE_sample10.html)
            check_name_fits(attention_html.numbered(page, args.num_samples - 1, args.num_samples))
        except UserError as e:  # (first: a name over 255 bytes cannot even be looked up)
            raise UserError(f"{named}: {e}") from None
        check_path_length(page, named)  # (a folder's name over 255 bytes, or the whole path too long)
        maps = Path(os.path.realpath(args.attention_png)) if args.attention_png is not None else None
        if maps is not None and (Path(os.path.realpath(page)) == maps or Path(os.path.realpath(page)) in maps.parents):
            raise UserError(f"--attention-png={short(str(args.attention_png))} and {named}: the page's file would be "
                            f"the heatmaps' folder, or hold it; give them different paths")
        if page.is_dir():
            raise UserError(f"{named} is a directory, not a file")
        try:  # a device or a pipe: the page would be refused only after the whole generation
            regular_file_target(page)
        except UserError as e:
            raise UserError(f"{named}: {e}") from None
        try:
            check_writable(page.parent, "its folder")
        except UserError as e:
            raise UserError(f"{named}: {e}") from None


def heatmap_sample(args, sample: int) -> int | None:
    """Which sample's heatmaps (attention_view.heatmap_file) `sample` (from 0) draws: None, one set, for the
    prompt or a single sample, else its own."""
    return None if args.attention_of == "prompt" or args.num_samples == 1 else sample


PICTURE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".webp"}  # not an --attention-html page's


def check_output_files(args, n_layer: int) -> None:
    """No file this run will write may be a folder (writing it would fail only after the generation),
    or a file that tinygpt did not write: a user's notes.html, the checkpoint sampled from, a picture
    of that name; nor a link to nothing (its target's folders would be made, anywhere), a pipe or a
    device, nor one file named by both flags. An earlier heatmap or page of tinygpt's is replaced (by
    its mark)."""
    files = []
    if args.attention_png is not None and args.attention_png.suffix.lower() == ".png" \
            and not args.attention_png.is_dir():  # (a folder of that name, made by the user, is taken)
        folder = shell_quote(path_word(args.attention_png.with_suffix("")))
        raise UserError(f"--attention-png takes a folder, not a file name: the heatmaps go into it, one per layer "
                        f"(attention_layer0.png, ...); give e.g. {folder}")
    if args.attention_png is not None:
        files += [("--attention-png", attention_view.heatmap_file(args.attention_png, layer, sample))
                  for sample in {heatmap_sample(args, i) for i in range(args.num_samples if args.attention_of == "all"
                                                                        else 1)}
                  for layer in range(n_layer)]
    if args.attention_html is not None:
        files += [("--attention-html", attention_html.numbered(args.attention_html, i, args.num_samples))
                  for i in range(args.num_samples)]
    named: dict[str, str] = {}  # the real path -> the flag that names it
    for flag, path in files:
        if named.setdefault(os.path.realpath(path), flag) != flag:
            raise UserError(f"--attention-png and --attention-html both name {short(str(path))}: one would "
                            f"overwrite the other; choose another file name")
        if path.is_dir():
            raise UserError(f"{flag}: it would write {short(str(path))}, which is a directory")
        odd = odd_file(path)
        if odd:
            raise UserError(f"{flag}: it would write {short(str(path))}, which is {odd}; choose another "
                            f"{'folder' if flag == '--attention-png' else 'file name'}")
        png = flag == "--attention-png"
        if path.exists() and not (png_marked(path, HEATMAP_MARK) if png else attention_html.is_explorer_page(path)):
            raise UserError(f"{flag}: it would overwrite {short(str(path))}, which is not "
                            f"{'an attention heatmap' if png else 'an attention explorer page'} that tinygpt wrote "
                            f"(a file of yours, or one written before tinygpt marked its own); move it away, or "
                            f"choose another {'folder' if png else 'file name'}")
    page = args.attention_html
    if page is not None and page.suffix.lower() in PICTURE_SUFFIXES:  # the flags mixed up (as --attention-png x.png)
        raise UserError(f"--attention-html={short(str(page))}: the page is HTML, not a "
                        f"{page.suffix.lower()[1:].upper()} picture; name it e.g. "
                        f"{shell_quote(path_word(page.with_suffix('.html')))} (the heatmaps' PNGs: "
                        f"--attention-png FOLDER)")


# ---- a terminal: control characters shown, not obeyed ----

# What a terminal obeys instead of showing: the C0 controls but '\t' and '\n' (ESC starts the
# sequences that move the cursor, recolour and clear the screen; '\r' and '\b' overwrite; BEL
# rings), DEL, the C1 controls (0x9b is ESC [ to many terminals), the bidi marks, embeddings, overrides
# and isolates, which reorder the text around them, and the line and paragraph separators, which break
# the line on some terminals. A toy model writes such tokens easily.
CONTROLS = [*range(0x00, 0x09), *range(0x0b, 0x20), *range(0x7f, 0xa0), 0x061c, 0x200e, 0x200f, 0x2028, 0x2029,
            *range(0x202a, 0x202f), *range(0x2066, 0x206a)]
SHOWN = {code: repr(chr(code))[1:-1] for code in CONTROLS}  # '\x1b', '\r', '\u202e': as token_str writes them


class ControlsShown:
    """A terminal's stdout: the control characters written are shown as their escapes (SHOWN).
    A decoded piece is whole characters (the stream decoders hold a split one back), so each
    write is translated alone; an escape sequence split across writes is shown all the same (its
    ESC is)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(text.translate(SHOWN))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, ...: the stream's own
        return getattr(self.stream, name)


def terminal_width(out) -> int | None:
    """The columns of the terminal `out` writes to (COLUMNS where set), for tables to fit; None for a
    file or a pipe, which gets every row whole."""
    try:
        return shutil.get_terminal_size().columns if out.isatty() else None
    except (AttributeError, ValueError):
        return None


def shown_safely(out):
    """`out` wrapped in ControlsShown at a terminal; a file or a pipe (scripts, `> out.txt`) gets
    the exact text, and so does a stream without isatty or a closed one."""
    try:
        terminal = out.isatty()
    except (AttributeError, ValueError):
        terminal = False
    return ControlsShown(out) if terminal else out


# ---- the prompt ----


def read_prompt(args) -> str:
    """--prompt, or the UTF-8 text of --prompt-file: a file, a pipe or a device, - = standard input;
    at most MAX_PROMPT_BYTES, never read whole when longer. An empty file (or a closed standard input)
    is sampled from with no prompt, as --prompt '' is, with a note: a file that was meant to hold one."""
    if args.prompt_file is None:
        return decode_prompt(text_bytes(args.prompt or "", "--prompt"), "--prompt")
    if str(args.prompt_file) == "-":  # its bytes: text mode would pass bad bytes on as surrogates
        named = "--prompt-file - (standard input)"
        text = decode_prompt(sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1), named)
    else:
        named = f"--prompt-file {short(str(args.prompt_file))}"
        text = decode_prompt(read_prompt_file(args.prompt_file, named), named, Path(args.prompt_file))
    if not text:
        print(f"note: {named} is empty: sampling with no prompt, as --prompt '' does", file=sys.stderr)
    return text


def text_bytes(text: str, named: str) -> bytes:
    """The bytes of a prompt given as text (an argument, a line typed): Python hands on bytes that
    are not UTF-8 as surrogates, which BPE would have read as U+FFFD without a word."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that stands for no byte
        raise UserError(f"{named} is not UTF-8 text") from None


def decode_prompt(data: bytes, named: str, path: Path | None = None) -> str:
    """A prompt's bytes as text, cleaned as training text is (no byte order mark, '\n' line ends):
    refused beyond MAX_PROMPT_BYTES or when not UTF-8; a file (`path`) of UTF-16 or UTF-32 text (Windows'
    "Unicode") is named so, with the command that converts it, as a data.dataset file is."""
    if len(data) > MAX_PROMPT_BYTES:
        raise UserError(prompt_too_long(named))
    if path is not None and maybe_wide(data):
        if (wide := wide_encoding(data[:SNIFFED])) is not None:  # (without a mark, Latin UTF-16 reads as UTF-8)
            raise UserError(f"{named} looks like {wide[0].upper()} text, not UTF-8; {convert(path, *wide)}")
    try:
        return clean_text(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{named} is not UTF-8 text (byte {e.start} is {data[e.start]:#04x})") from None


def read_prompt_file(path: Path, named: str) -> bytes:
    """The bytes of `path`, which may be a pipe (<(...)) or a device (/dev/stdin, /dev/null), at most
    MAX_PROMPT_BYTES (read_capped: a regular file over the limit is refused by its size, unread)."""
    if (link := dead_link(path)) is not None:  # (not "not found": the link is there)
        raise UserError(f"{named} is {link}")
    if not path.exists():
        raise UserError(f"--prompt-file not found: {short(str(path))}")
    if path.is_dir():
        raise UserError(f"{named} is a directory, not a file")
    if file_kind(path) == "a socket":  # (opening one fails with "No such device or address")
        raise UserError(f"{named} is a socket, not a file")
    return read_capped(path, MAX_PROMPT_BYTES, lambda size: prompt_too_long(named, size),
                       lambda why: f"{named} cannot be read: {why}")


def prompt_too_long(named: str, size: int | None = None) -> str:
    """Why a prompt over MAX_PROMPT_BYTES, of `size` bytes (None: unknown, a pipe read to the limit), is refused."""
    what = f"is {size:,} bytes, over" if size is not None else "has more than"
    return (f"{named} {what} the {MAX_PROMPT_BYTES:,} bytes a prompt may have (the model sees only its last "
            f"block_size tokens: keep the end, e.g. with tail -c 10000)")


# ---- --show-attention ----


@torch.no_grad()
def show_attention(model: GPT, tokenizer, ids: list[int], args, out, what: str, sample: int | None,
                   first: bool) -> list[Path]:
    """Print the attention tables of the last block_size tokens of `ids` (and save heatmaps: their paths;
    the `first` of this call's replace an earlier call's set)."""
    cfg = model.config
    window, traces = attention_view.window_traces(model, ids)  # per layer: weights (1, nh, T, T)
    labels = attention_view.token_labels(tokenizer, window)
    cut = f" (the last {len(window)} of {len(ids)}: block_size={cfg.block_size})" if len(window) < len(ids) else ""
    out.write(f"=== attention over {what}{cut} ===\n")
    out.write(attention_view.attention_tables(traces, labels, args.attention_last, cfg.causal, terminal_width(out)))
    out.flush()
    if args.attention_png is not None:
        text = tokenizer.decode(window)
        text = text if len(text) <= 60 else "…" + text[-59:]  # the end: the tokens shown
        try:
            paths = attention_view.save_heatmaps(traces, labels, args.attention_png, args.attention_last,
                                                 cfg.causal, sample=sample, replace_set=first,
                                                 title=f"{run_name(args.run)}: {text!r}{cut}")
        except ImportError:
            print("note: --attention-png needs matplotlib (pip install matplotlib); printed the text "
                  "tables only", file=sys.stderr)
            args.attention_png = None  # say it once
            return []
        else:
            out.write(f"saved {', '.join(shown_path(p) for p in paths)}\n")
            if min(args.attention_last, len(window)) > attention_view.MAX_HEATMAP:
                out.write(f"(the heatmaps show the last {attention_view.MAX_HEATMAP} tokens, the most that stay "
                          f"readable; the tables above show {min(args.attention_last, len(window))})\n")
            if cfg.n_head > attention_view.MAX_HEATMAP_HEADS:
                out.write(f"(the heatmaps show heads 0-{attention_view.MAX_HEATMAP_HEADS - 1} of {cfg.n_head}, the "
                          f"most drawn in seconds; the tables above and --attention-html show every head)\n")
            return paths
    return []


HEATMAP_LOCK = ".heatmaps.lock"  # in --attention-png's folder while a sample.py draws there (runs.run_lock)


def remove_other_pages(page: Path, written: list[Path]) -> None:
    """The explorer pages of `page`'s set (PAGE.html, PAGE_sampleN.html) that an earlier call left (more
    samples) would pass for this one's: remove those this call has not written (yet: they are written
    again), by their mark: written for PAGE.html too (a user's file of such a name stays, and so does a
    PAGE_sample2.html that a call of its own was asked for)."""
    names = attention_html.in_page_set(page)
    for path in page.parent.iterdir():
        if names.fullmatch(path.name) and path not in written and attention_html.written_for(path) == page.name:
            path.unlink(missing_ok=True)
    sweep_folder_temp_files(page.parent, names)  # (a killed writer's: of sample pages no longer written too)


# ---- --show-steps ----


def label_width(tokenizer) -> int:
    """Width of the token columns: the longest label of a small vocabulary, else MAX_LABEL."""
    if tokenizer.vocab_size > 1000:
        return attention_view.MAX_LABEL
    return max(attention_view.columns(attention_view.token_label(tokenizer, i)) for i in range(tokenizer.vocab_size))


def candidates_shown(width: int, columns: int | None) -> int:
    """How many of the TOP_N candidates a --show-steps row shows: all in a file or a pipe (`columns` None),
    as many as fit a terminal's `columns` (at least one): a row of five BPE tokens, 125 columns, wrapped
    at 80 into a second line that read as a row."""
    if columns is None:
        return attention_view.TOP_N
    before = 4 + 2 + 4 + 2 + max(width, TOKEN_COLUMN) + 2 + 6  # step, ctx, token, p
    return max(1, min(attention_view.TOP_N, (columns - before) // (2 + width + 1 + 6)))


def steps_header(args, width: int, shown: int = attention_view.TOP_N, columns: int | None = None) -> str:
    """The --show-steps table's header; where it would be wider than the terminal's `columns` (86 at 80:
    it wrapped above rows that fit), the sampling rule goes on a line of its own above it."""
    rule = attention_view.sampling_rule(args.temperature, args.top_k, args.top_p)
    head = f"{'step':>4}  {'ctx':>4}  {'token':<{max(width, TOKEN_COLUMN)}}  {'p':>6}  "
    what = f"top-{shown} candidate{'s' * (shown > 1)}"
    if columns is None or len(head) + len(what) + len(rule) + 3 <= columns:
        return f"{head}{what} ({rule})\n"
    return f"({rule})\n{head}{what if len(head) + len(what) <= columns else f'top-{shown}'}\n"


def steps_rows(tokenizer, steps: Iterator[Step], args, width: int, shown: int = attention_view.TOP_N
               ) -> Iterator[tuple[int, str]]:
    """For each Step of model.generate_steps, (token id, its table row of the `shown` top candidates); `width`:
    label_width's."""
    for n, step in enumerate(steps, start=1):
        chosen, p, top = attention_view.step_candidates(step, args.temperature, args.top_k, args.top_p)
        candidates = "  ".join(f"{attention_view.right(attention_view.token_label(tokenizer, i), width)} "
                               f"{attention_view.step_percent(q):>5}%" for i, q in top[:shown])
        label = attention_view.left(attention_view.token_label(tokenizer, chosen), max(width, TOKEN_COLUMN))
        yield chosen, f"{n:>4}  {step.context:>4}  {label}  {attention_view.step_percent(p):>5}%  {candidates}\n"


def main(argv: Sequence[str] | None = None, out=None) -> list[str]:
    """Print num_samples continuations, streaming each token (or, with --show-steps, a table of the
    steps then the text), and the attention tables asked for; return the generated texts."""
    args = build_parser().parse_args(argv)
    check_args(args)
    if out is None and (args.attention_html or args.attention_png):  # files asked for: a reader that leaves
        out = ReaderMayLeave(sys.stdout, "stdout", full_disk_too=False)  # (| head, |& head) must not end their
        sys.stderr = ReaderMayLeave(sys.stderr, "stderr", full_disk_too=False)  # writing
    out = shown_safely(out or sys.stdout)  # every mode's text and echoed prompt goes through `out`
    prompt = read_prompt(args)
    device = resolve_device(args.device, "--device")
    model, cfg, tokenizer, ckpt = load_model(args.run, device)
    if args.list_vocab:
        return list_vocab(tokenizer, out)
    if args.dtype == "int8":
        if why_not := int8_problem(cfg.model, device):
            fix = "add --device cpu, or use --dtype bfloat16" if device.type != "cpu" else "use --dtype bfloat16"
            raise UserError(f"{args.run}: --dtype int8: {why_not}: {fix}")
        model = int8_weights(model)
    else:
        model = model.to(getattr(torch, args.dtype))
    check_output_files(args, cfg.model.n_layer)
    if not cfg.model.causal and not args.force:
        raise UserError(f"{args.run} was trained with model.causal=false: every position saw the token it "
                        f"had to predict, so it never learned to predict from the past alone and generates "
                        f"garbage; retrain with causal: true (or pass --force to see it)")
    if not cfg.model.causal and args.compile:  # (it compiled for a minute a step that never ran)
        raise UserError(f"--compile compiles the decoding step with the KV cache, which {args.run}, trained with "
                        f"model.causal=false, cannot use (its past changes with every token): drop --compile")
    if note := training_note(resolve_checkpoint(args.run), ckpt["step"], "samples"):
        print(note, file=sys.stderr)
    if note := greedy_note(args):
        print(note, file=sys.stderr)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    threads = ThreadPolicy(fixed=args.threads) if device.type == "cpu" else None
    warning = too_many_threads(threads, args.threads, "--threads", "sampling")
    if warning:
        print(warning, file=sys.stderr)
    keep_freed_memory()
    decode_step = None
    if args.compile and args.max_new_tokens == 0:  # (it compiled for 13 s to a minute, then decoded nothing)
        print("note: --max-new-tokens 0 decodes nothing: the decoding step is not compiled", file=sys.stderr)
    elif args.compile:  # for the threads of an idle machine (a busy one decodes uncompiled, on fewer)
        decode_step = compile_decoding(model, threads=None if threads is None else threads.fixed or threads.max_threads)
    with output_locks(args):
        try:
            if args.interactive:
                return interactive(model, tokenizer, args, out, gen, threads, decode_step)
            return generate_samples(model, tokenizer, prompt, args, out, gen, threads, decode_step)
        except FloatingPointError as e:  # model.sample_next: the weights overflow
            raise UserError(f"{args.run}: {e}") from None


def output_locks(args) -> ExitStack:
    """The locks of the folders sample.py writes pictures into: one sample.py at a time draws heatmaps into a
    folder, or writes a set of pages, as each removes the heatmaps (pages) of the set it did not write."""
    with ExitStack() as locks:  # (the first is let go if the second is refused)
        if args.attention_png is not None:
            locks.enter_context(run_lock(args.attention_png, "--attention-png", "sample.py drawing heatmaps",
                                         HEATMAP_LOCK))
        if (page := args.attention_html) is not None:
            pages = attention_html.page_set(page)
            locks.enter_context(run_lock(page.parent, "folder of --attention-html",
                                         f"sample.py writing the pages of {short(pages)} there", f".{pages}.lock"))
        return locks.pop_all()


def generate_samples(model: GPT, tokenizer, prompt: str, args, out, gen: torch.Generator,
                     threads: ThreadPolicy | None = None, decode_step: Callable | None = None,
                     before: str = "") -> list[str]:
    """num_samples continuations of one prompt, printed as main describes; returns the texts.
    `decode_step`: the compiled decoding step (--compile), else None. `before`: printed first, once the
    prompt is encoded (a prompt the vocabulary refuses prints nothing)."""
    try:
        ids = encode_prompt(tokenizer, prompt)
    except UserError as e:
        raise UserError(f"{e}; see the whole vocabulary with: "
                        f"{shell_join(['python', script_word('sample.py'), path_word(args.run), '--list-vocab'])}") from None
    out.write(before)
    idx = torch.tensor([ids], dtype=torch.long, device=gen.device)  # (1, T)
    heatmaps = []
    if args.show_attention and args.attention_of == "prompt":
        # (first: an earlier call's heatmaps go as these are saved, not after: a Ctrl-C must not leave a mixed set)
        heatmaps += show_attention(model, tokenizer, ids, args, out, "the prompt", heatmap_sample(args, 0), first=True)
        out.write("\n")
    samples = []
    if args.show_steps:  # the table's token columns, and how many candidates a row has room for
        width = label_width(tokenizer)
        columns = terminal_width(out)
        shown = candidates_shown(width, columns)
    for i in range(args.num_samples):
        if i:
            out.write("\n" + SAMPLES_RULE + "\n")
        steps = following_free_cores(generate_steps(model, idx, args.max_new_tokens, args.temperature, args.top_k,
                                                    args.top_p, use_cache=not args.no_kv_cache, generator=gen,
                                                    decode_step=decode_step), threads)
        new_ids, recorded = [], deque(maxlen=model.config.block_size)
        if args.attention_html is not None:  # keep the candidates of the steps the page can show
            steps = attention_html.recorded(steps, recorded, args.temperature, args.top_k, args.top_p)
        if args.show_steps:  # the table replaces the streamed text; the text follows it whole
            if args.max_new_tokens:  # (no steps: no table, not a header over no rows)
                out.write(steps_header(args, width, shown, columns))
            for chosen, row in steps_rows(tokenizer, steps, args, width, shown):
                new_ids.append(chosen)
                out.write(row)
                out.flush()
            text = tokenizer.decode(new_ids) if new_ids else ""
            if args.max_new_tokens:  # a blank line between the table and the text (none without a table)
                out.write("\n")
            out.write(f"{prompt}{text}\n")
        else:
            out.write(prompt)
            decoder = tokenizer.stream_decoder()
            pieces = []
            try:
                for step in steps:
                    new_ids.append(int(step.token[0]))
                    piece = decoder.push(new_ids[-1])
                    pieces.append(piece)
                    out.write(piece)
                    out.flush()
            except KeyboardInterrupt:  # the text ends its line: `interrupted` (stderr) came after it, on its line
                if not args.interactive:  # (which writes its own, before `(stopped)`)
                    with suppress(OSError, ValueError):
                        out.write("\n")
                        out.flush()
                raise
            pieces.append(decoder.flush())
            out.write(pieces[-1] + "\n")
            text = "".join(pieces)
        out.flush()
        samples.append(text)
        if args.attention_html is not None:
            path = attention_html.write_explorer(
                attention_html.numbered(args.attention_html, i, args.num_samples), model, tokenizer, ids + new_ids,
                len(new_ids), recorded, f"{run_name(args.run)}: the prompt " + (
                    f"and sample {i + 1}" if new_ids else "(nothing generated)"),
                attention_view.sampling_rule(args.temperature, args.top_k, args.top_p), args.attention_html)
            if i == 0:  # at once: a generation stopped must not leave an earlier call's pages beside it
                remove_other_pages(args.attention_html, [path])
            out.write(f"saved {shown_path(path)}\n")
            cfg = model.config
            if (seen := min(len(ids) + len(new_ids), cfg.block_size)) > (shown := attention_html.page_tokens(cfg)):
                every = cfg.n_layer * cfg.n_head * seen * (seen + 1) // 2  # (a causal page keeps the lower triangle)
                out.write(f"(the page shows the last {shown} of {seen} tokens: {cfg.n_layer} layers x {cfg.n_head} "
                          f"heads over them all would hold {every:,} weights, past the {attention_html.PAGE_WEIGHTS:,} "
                          f"that keep a page quick to open)\n")
        if args.show_attention and args.attention_of == "all":
            out.write("\n")
            what = f"the prompt and sample {i + 1}'s generated text" if new_ids else "the prompt (nothing generated)"
            heatmaps += show_attention(model, tokenizer, ids + new_ids, args, out, what, heatmap_sample(args, i),
                                       first=i == 0)  # (the first sample's replace an earlier call's set)
    return samples


def read_prompts() -> Iterator[str | bytes]:
    """The lines of standard input, without their newline: at a terminal, typed (str) after a "> "
    prompt, with line editing and a one-line greeting on stderr; piped, each line's bytes, at most
    MAX_PROMPT_BYTES and a CRLF (a longer line has its rest skipped, then is yielded cut, for
    decode_prompt to refuse; a line without end, /dev/zero's, stops the command after MAX_SKIPPED
    bytes, with that one line)."""
    if not sys.stdin.isatty():
        stdin, cap = sys.stdin.buffer, MAX_PROMPT_BYTES + 2  # a prompt of the limit and its CRLF
        number = 0
        while line := stdin.readline(cap):
            number += 1
            longer = len(line) == cap and not line.endswith(b"\n")  # readline stopped at its cap
            skipped = 0
            while longer:  # skip the rest of the line
                rest = stdin.readline(cap)
                skipped += len(rest)
                longer = len(rest) == cap and not rest.endswith(b"\n")
                if longer and skipped > MAX_SKIPPED:
                    raise UserError(f"line {number} of standard input runs past {MAX_SKIPPED:,} bytes with no "
                                    f"newline: no prompts; stopped reading it")
            yield line[:-2] if line.endswith(b"\r\n") else line.removesuffix(b"\n")  # (a Windows file's lines too)
        return
    editing, longest = line_editing(), terminal_line()
    print("type a prompt and press Enter; Ctrl-C stops an answer, Ctrl-D quits", file=sys.stderr)
    while True:
        try:
            if sys.stdout.isatty():
                line = input("> ")
            else:  # (input() writes its prompt on stdout: into the file of answers, `> answers.txt`)
                print("> ", end="", file=sys.stderr, flush=True)
                line = input()
            if not editing and len(line.encode("utf-8", "surrogateescape")) >= longest:
                print(f"error: the line typed is {longest:,} bytes, the most a terminal passes without line "
                      f"editing{' (> FILE turns it off)' * (not sys.stdout.isatty())}: its rest may be lost; give a "
                      f"long prompt with --prompt-file", file=sys.stderr)
                continue
            yield line
        except EOFError:
            print(file=sys.stderr)
            return
        except KeyboardInterrupt as e:  # Ctrl-C at the prompt drops the line typed, as a shell does
            print(file=sys.stderr)  # (after the line typed: the next prompt, or `interrupted`, on a line of its own)
            if isinstance(e, Terminated):  # kill or a hang-up: stop
                raise


def terminal_line() -> int:
    """The longest line the terminal on stdin passes in its own line mode: Linux's 4,095 bytes; elsewhere
    its MAX_CANON less the newline (macOS: 1,023)."""
    if sys.platform.startswith("linux"):  # (its fpathconf says 255, the POSIX minimum, not its 4,096)
        return TERMINAL_LINE
    try:
        return os.fpathconf(sys.stdin.fileno(), "PC_MAX_CANON") - 1
    except (OSError, ValueError, AttributeError):
        return TERMINAL_LINE


def line_editing() -> bool:
    """Does input() edit the lines typed (arrow keys, history, lines of any length)? It does with the
    readline module, imported here, and only where standard output is the terminal too. Without, the
    terminal's own line mode took arrow keys as text (`To be\\x1b[D\\x1b[DX` reached the model) and
    dropped a line's bytes past 4,095 without a word."""
    try:
        import readline  # noqa: F401 (imported, it is what input() edits with)
    except ImportError:  # Windows: its console edits lines itself
        return sys.platform == "win32"
    return sys.stdout.isatty()


def interactive(model: GPT, tokenizer, args, out, gen: torch.Generator, threads: ThreadPolicy | None,
                decode_step: Callable | None = None) -> list[str]:
    """Answer prompt after prompt, the model loaded once, until EOF; a prompt that is too long, not
    UTF-8, or that the vocabulary cannot encode gets its one-line error on stderr and the next
    prompt is read. At a terminal, Ctrl-C stops the answer under way and the next prompt is read
    (piped, it stops the command, as everywhere). Every answer starts from --seed. Piped input with
    refused lines ends in an error (exit 2) once every line is answered: a script sees the failure."""
    samples, lines, refused = [], 0, 0
    for line in read_prompts():
        lines += 1
        # (piped, the errors name the line: a script's 4th line of 1,000 was refused, but which?)
        named = "the line typed" if isinstance(line, str) else f"line {lines:,} of standard input"
        try:
            prompt = decode_prompt(text_bytes(line, named) if isinstance(line, str) else line, named)
            gen.manual_seed(args.seed)  # each answer is the one `--prompt LINE` gives, whatever came before
            # a line's answers parted from the last line's, as its samples are from each other (piped, they ran on
            # unparted); printed once the line is encoded: a refused line left an empty answer between two rules
            rule = "\n" + ANSWERS_RULE + "\n" if samples and args.num_samples > 1 else ""
            samples += generate_samples(model, tokenizer, prompt, args, out, gen, threads, decode_step, rule)
        except UserError as e:
            which = "" if isinstance(line, str) or named in str(e) else f"{named}: "
            print(error_line(f"error: {which}{e}"), file=sys.stderr)
            refused += not isinstance(line, str)  # (piped: lines come as bytes)
        except KeyboardInterrupt as e:
            if isinstance(e, Terminated) or not isinstance(line, str):  # kill, a hang-up, or piped input
                raise
            out.write("\n")
            out.flush()
            print("(stopped)", file=sys.stderr)
    if refused:
        which = "the only line" if lines == 1 else f"{refused} of the {lines} lines"
        raise UserError(f"{which} of standard input {'was' if refused == 1 else 'were'} refused (the errors above)"
                        + "; the others were answered" * (refused < lines))
    return samples


def list_vocab(tokenizer, out) -> list[str]:
    """Print every token, one per line: its id and its text (␣ = a space); return the texts."""
    tokens = [attention_view.token_label(tokenizer, i, cut=None) for i in range(tokenizer.vocab_size)]
    notes = [f"'{attention_view.SPACE}' = space"] + attention_view.label_notes(tokens)  # (the escapes it shows)
    out.write(f"# {count(tokenizer.vocab_size, 'token')} of {tokenizer!r}; {'; '.join(notes)}\n")
    out.writelines(f"{i:>6}  {token}\n" for i, token in enumerate(tokens))
    return tokens


if __name__ == "__main__":
    run_cli(main)

"""Hugging Face interop: export a run as a GPT-2 checkpoint, import a GPT-2 checkpoint as a run.

    python export.py RUN_DIR_OR_CKPT --format hf OUT_DIR     # a folder transformers generates from alone
    python export.py --from-hf HF_DIR OUT_RUN_DIR            # a tinygpt run directory (ckpt.pt, config.yaml)

The export holds the weights (model.safetensors), config.json, generation_config.json and the
tokenizer (tokenizer.json), so `transformers.pipeline("text-generation", model=OUT_DIR)` works
without tinygpt. The mapping between the two (tinygpt's GPT *is* GPT-2's architecture) is in
tinygpt/hf.py; the export needs the optional `safetensors` and `tokenizers` packages, the import
`safetensors` alone (to read model.safetensors).
The output folder appears whole or not at all; it must be new, empty or an earlier output (which
--force replaces), outside the source.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

if __name__ == "__main__":  # before the imports below load torch: a Ctrl-C then is `interrupted`, not a traceback
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

from tinygpt.checkpoint import load_checkpoint
from tinygpt.errors import (ArgParser, UserError, count, new_folder_arg, path_arg, path_word, run_cli, script_word,
                            shell_join, shell_quote, work_is_files)
from tinygpt.hf import HF_FILES, export_hf, import_hf


# ---- main ----


def main(argv: Sequence[str] | None = None) -> Path:
    """Export a run to GPT-2 format, or (--from-hf) import a GPT-2 folder as a run; see the module doc."""
    p = ArgParser(prog="export.py", description="Export a tinygpt run as a Hugging Face GPT-2 checkpoint, "
                                                "or import one (--from-hf).")
    p.add_argument("src", type=path_arg, help="run directory or checkpoint; with --from-hf a GPT-2 folder")
    p.add_argument("out", type=new_folder_arg,
                   help="output folder: the GPT-2 checkpoint; with --from-hf the new run directory")
    p.add_argument("--format", choices=["hf"], default=None, help="export format: hf (GPT-2 for transformers; the "
                   "default)")
    p.add_argument("--from-hf", action="store_true", help="import: GPT-2 folder -> tinygpt run directory")
    p.add_argument("--force", action="store_true", help="replace an earlier export (or run) in the output folder")
    args = p.parse_args(argv)

    if args.from_hf and args.format is not None:
        raise UserError("--format is the export's format: it means nothing with --from-hf, which imports a GPT-2 "
                        "folder as a run")
    if args.from_hf:
        path = import_hf(args.src, args.out, args.force)
        ckpt = load_checkpoint(path)
        m = ckpt["config"]["model"]
        print(f"wrote {shell_quote(path)} and config.yaml ({count(m['n_layer'], 'layer')}, "
              f"{count(m['n_head'], 'head')}, n_embd {m['n_embd']}, vocab {ckpt['tokenizer']['vocab_size']}); "
              f"sample with: {shell_join(['python', script_word('sample.py'), path_word(args.out)])}"
              + (" (its tiktoken tokenizer needs the encoding's file: offline, set TIKTOKEN_CACHE_DIR)"
                 if ckpt["tokenizer"].get("kind") == "tiktoken" else ""))
        return path
    out = export_hf(args.src, args.out, args.force)
    print(f"wrote {', '.join(HF_FILES)} into {shell_quote(path_word(out))}; generate with transformers alone: "
          f"pipeline('text-generation', model={str(out)!r}) (see {shell_quote(path_word(out / 'README_EXPORT.md'))})")
    return out


if __name__ == "__main__":
    # its work is the folder it writes: a stdout that takes no more (| head, a full disk) must not fail it
    work_is_files()
    run_cli(main)

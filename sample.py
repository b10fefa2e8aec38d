"""Generate text from a trained run, token by token.

    python sample.py RUN_DIR_OR_CKPT [--prompt TEXT | --prompt-file FILE] [--max-new-tokens N]
                     [--temperature T] [--top-k K] [--top-p P] [--num-samples N] [--seed S]
                     [--no-kv-cache]

The run directory holds everything needed: config, tokenizer and weights (best.pt when present,
else ckpt.pt). Each step feeds the context to the model, reads the logits at the last position,
samples one token, prints it at once and appends it. That is only sound because the model was
trained under the causal mask: see README "Why generation needs the causal mask".
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import torch

from checkpoint import load_model
from config import resolve_device
from errors import ArgParser, UserError, run_cli
from model import generate


def build_parser() -> ArgParser:
    p = ArgParser(prog="sample.py", description="Generate text from a trained tinygpt run.")
    p.add_argument("run", help="run directory (uses best.pt, else ckpt.pt) or a checkpoint file")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", default="", help="text to continue (default: a newline)")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from this UTF-8 file")
    p.add_argument("--max-new-tokens", type=int, default=500, help="tokens to generate per sample")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy; <1 sharper, >1 flatter")
    p.add_argument("--top-k", type=int, default=None, help="sample only among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="nucleus: the smallest set with mass >= p")
    p.add_argument("--num-samples", type=int, default=1, help="independent samples to draw")
    p.add_argument("--seed", type=int, default=1337, help="random seed for sampling")
    p.add_argument("--no-kv-cache", action="store_true", help="recompute the whole context every step")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    p.add_argument("--force", action="store_true", help="sample even from a model trained without the causal mask")
    return p


def check_args(args) -> None:
    """Sampling flags out of range are user errors."""
    if args.max_new_tokens < 0:
        raise UserError(f"--max-new-tokens={args.max_new_tokens} must be >= 0")
    if args.temperature < 0:
        raise UserError(f"--temperature={args.temperature} must be >= 0 (0 = greedy)")
    if args.top_k is not None and args.top_k < 1:
        raise UserError(f"--top-k={args.top_k} must be >= 1")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UserError(f"--top-p={args.top_p} must be in (0, 1]")
    if args.num_samples < 1:
        raise UserError(f"--num-samples={args.num_samples} must be >= 1")


def read_prompt(args) -> str:
    if args.prompt_file is None:
        return args.prompt
    if not args.prompt_file.is_file():
        raise UserError(f"--prompt-file not found: {args.prompt_file}")
    try:
        return args.prompt_file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--prompt-file {args.prompt_file} is not UTF-8 text") from None


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Prompt -> ids; an empty prompt starts from a newline (or token 0 if there is none)."""
    ids = tokenizer.encode(prompt) if prompt else []
    if not ids:
        try:
            ids = tokenizer.encode("\n")
        except UserError:
            ids = [0]
    return ids


def main(argv: Sequence[str] | None = None, out=None) -> list[str]:
    """Print num_samples continuations, streaming each token; return them as strings."""
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    check_args(args)
    prompt = read_prompt(args)
    device = resolve_device(args.device)
    model, cfg, tokenizer, _ = load_model(args.run, device)
    if not cfg.model.causal and not args.force:
        raise UserError(f"{args.run} was trained with model.causal=false: every position saw the token it "
                        f"had to predict, so it never learned to predict from the past alone and generates "
                        f"garbage; retrain with causal: true (or pass --force to see it)")
    ids = encode_prompt(tokenizer, prompt)
    idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, T)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    samples = []
    for i in range(args.num_samples):
        if i:
            out.write("\n---------------\n")
        out.write(prompt)
        decoder = tokenizer.stream_decoder()
        pieces = []
        for next_id in generate(model, idx, args.max_new_tokens, args.temperature, args.top_k, args.top_p,
                                use_cache=not args.no_kv_cache, generator=gen):
            piece = decoder.push(int(next_id[0]))
            pieces.append(piece)
            out.write(piece)
            out.flush()
        pieces.append(decoder.flush())
        out.write(pieces[-1] + "\n")
        out.flush()
        samples.append("".join(pieces))
    return samples


if __name__ == "__main__":
    run_cli(main)

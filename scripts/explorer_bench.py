"""Size and speed of the attention explorer page at the default model's shape (docs/attention.md).

    python -m scripts.explorer_bench [--out DIR]

(run from the repository root). Builds the page of a 4-layer, 4-head model over 128 tokens (at
initialisation, and with 20x sharper queries, which put most weights near 0 as a trained model
does), prints its size, and, when Chromium is installed, the mean time of one full re-render (a
query and a head picked, all heads and each single head in turn alternating, 100 renders) in headless Chromium.
Ends with one JSON line.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

if __name__ == "__main__":  # before torch loads (the imports below): a Ctrl-C then is `interrupted`, not a traceback
    if not __package__:  # run as a file (python scripts/explorer_bench.py): tinygpt, a folder up, cannot be imported
        print("error: run it from the repository root as python -m scripts.explorer_bench", file=sys.stderr)
        sys.exit(2)
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

import torch

from data.stories import generate_stories
from model import GPT, ModelConfig
from scripts.reproduce import check_own_output
from tinygpt import attention_html
from tinygpt.checkpoint import atomic_write_text, check_writable
from tinygpt.errors import ArgParser, UserError, path_arg, run_cli
from tinygpt.tokenizer import WordTokenizer

TIMING = """<script>
const t0 = performance.now();
for (let i = 0; i < 100; i++) {
  state.head = i % 2 ? "all" : (i >> 1) % D.n_head; state.query = (7 * i) % 128; render();
}
document.getElementById("title").textContent = "RENDER_MS=" + ((performance.now() - t0) / 100).toFixed(2);
</script>
</body>"""


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")  # (the tests look for these)
BROWSER_TIMEOUT_S = 120
PAGES = {"init": 1.0, "sharp": 20.0}  # each page's name, and how much its queries are sharpened


def render_ms(page: str, out: Path, name: str = "explorer_bench.html") -> float | None:
    """Mean ms of one render() of the page (written to out/name, browser or not) in headless Chromium,
    or None without a browser (or when the page did not report its time)."""
    path = out / name
    atomic_write_text(path, page.replace("</body>", TIMING))
    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        return None
    # its profile and temp files in a folder of ours: stopped (Ctrl-C, kill), it left a folder in $TMPDIR. The
    # browser and its helpers are a process group of their own, ended and waited for before the folder goes:
    # a Ctrl-C reached them too, and they wrote on into the folder as it was removed (it stayed, 1 time in 4)
    with tempfile.TemporaryDirectory(prefix="tinygpt-chromium-", ignore_cleanup_errors=True) as own:
        browsing = subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={own}",
                                     "--dump-dom", path.resolve().as_uri()], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, env={**os.environ, "TMPDIR": own},
                                    start_new_session=True)
        try:
            stdout, _ = browsing.communicate(timeout=BROWSER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserError(f"{browser} did not render {path} within {BROWSER_TIMEOUT_S} s (a busy machine?); "
                            f"run it again when the machine is quieter") from None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(browsing.pid, signal.SIGKILL)  # (its helpers too, once it has ended)
            browsing.wait()
            shutil.rmtree(own, ignore_errors=True)  # (what its helpers wrote last, while they were ended)
    match = re.search(r"RENDER_MS=([\d.]+)", stdout)
    return float(match.group(1)) if match else None


def main(argv: Sequence[str] | None = None) -> None:
    p = ArgParser(prog="python -m scripts.explorer_bench", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=path_arg, help="keep the pages here, each with the timing script it ran (so a "
                   "little larger than the size printed, sample.py's page); default: a temp folder, removed at the end")
    args = p.parse_args(argv)
    if args.out is not None:
        check_writable(args.out, "--out")  # a file, or a path through one: one line, not a traceback
        for name in PAGES:
            check_own_output(args.out / f"explorer_bench_{name}.html", attention_html.GENERATOR, "--out")
        args.out.mkdir(parents=True, exist_ok=True)
        measure(args.out)
    else:
        with tempfile.TemporaryDirectory(prefix="tinygpt-explorer-") as temp:
            measure(Path(temp))


def measure(out: Path) -> None:
    """The two pages' sizes and render times, their pages written into `out`."""
    text = generate_stories(20_000, 1)[0]
    tokenizer = WordTokenizer.from_text(text)
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=128, n_layer=4, n_head=4, n_embd=128, vocab_size=tokenizer.vocab_size)).eval()
    ids = tokenizer.encode(text)[:128]
    result = {}
    for name, sharpen in PAGES.items():
        with torch.no_grad():
            for block in model.blocks:
                block.attn.q_proj.weight.mul_(sharpen)
        page = attention_html.explorer_html(attention_html.explorer_data(model, tokenizer, ids))
        result[f"{name}_bytes"] = len(page.encode("utf-8"))
        result[f"{name}_render_ms"] = render_ms(page, out, f"explorer_bench_{name}.html")  # (each its own page)
        print(f"{name}: {result[f'{name}_bytes']:,} bytes; one render: "
              + (f"{result[f'{name}_render_ms']:.1f} ms" if result[f"{name}_render_ms"] is not None
                 else "no time (no browser, or the page reported none)"))
    print(json.dumps(result))


if __name__ == "__main__":
    run_cli(main)

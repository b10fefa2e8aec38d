"""Guards tinygpt/attention_html.py (the attention explorer) and `sample.py --attention-html`.

Without a browser: the page is self-contained (no address it could load from), its data holds
the model's forward_with_attention weights to 0.1 % (the lower triangle under the causal mask,
every key without it) and marks the generated tokens, whose candidates are --show-steps's.
In a real headless browser (Chromium from the system's packages; skipped when there is none): the
page as rendered after its scripts ran, with a query picked through the address (the click's code
path), shows for every earlier key the weight of forward_with_attention to the displayed
precision, shows no weight on the future (masked) keys, one bar per head in the "all heads" view,
and each generated token's top-5 candidates. A page path that cannot be written is refused before
the generation.
"""
from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
import torch

import sample
from model import GPT, ModelConfig, generate_steps
from tinygpt import attention_html, attention_view
from tinygpt.attention_view import TOP_N, step_percent, token_label
from tinygpt.errors import UserError
from tinygpt.tokenizer import CharTokenizer
from data.stories import generate_stories
from scripts.explorer_bench import BROWSERS  # (the benchmark's: one list)

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "The cat sat on the mat."
N_NEW = 6


def tiny_model(causal: bool = True) -> tuple[GPT, CharTokenizer]:
    tokenizer = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=16, n_layer=2, n_head=4, n_embd=32, vocab_size=tokenizer.vocab_size,
                            causal=causal)).eval()
    with torch.no_grad():  # sharper attention than at init, so the weights differ from key to key
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(30)
    return model, tokenizer


def generated_page(model: GPT, tokenizer, prompt: str = "The cat") -> tuple[dict, str, list[int], list[dict]]:
    """Generate N_NEW tokens, recording the steps; -> (the page's data, the page, all ids, the steps)."""
    ids = tokenizer.encode(prompt)
    steps = []
    gen = torch.Generator().manual_seed(1)
    new = [int(s.token[0]) for s in attention_html.recorded(
        generate_steps(model, torch.tensor([ids]), N_NEW, temperature=1.0, generator=gen), steps, 1.0, None, None)]
    data = attention_html.explorer_data(model, tokenizer, ids + new, len(new), steps, "test")
    return data, attention_html.explorer_html(data), ids + new, steps


def page_data(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1))


@torch.no_grad()
def model_weights(model: GPT, ids: list[int]) -> torch.Tensor:
    _, traces = model.forward_with_attention(torch.tensor([ids]))
    return torch.stack([t.weights[0] for t in traces])  # (n_layer, nh, T, T)


# ---- the page's data (no browser) ----


def test_page_is_self_contained_and_holds_the_models_weights():
    model, tok = tiny_model()
    data, page, ids, steps = generated_page(model, tok)
    assert not re.search(r"https?:|\bsrc=|<link|@import", page)  # loads nothing
    assert page_data(page) == data
    T = len(ids)
    att = model_weights(model, ids)
    assert data["tokens"] == [token_label(tok, i) for i in ids] and data["first_generated"] == T - N_NEW
    for layer in range(2):
        for head in range(4):
            stored = torch.tensor(data["weights"][layer][head], dtype=torch.float) / data["scale"]
            rows, cols = torch.tril_indices(T, T)
            assert stored.numel() == T * (T + 1) // 2  # only the allowed keys
            torch.testing.assert_close(stored, att[layer, head, rows, cols], rtol=0, atol=0.5 / data["scale"] + 1e-6)
    assert [s["p"] for s in data["steps"]] == [step_percent(s["p"]) for s in steps]
    assert all(len(s["top"]) == TOP_N for s in data["steps"])


def test_without_the_causal_mask_every_key_is_stored():
    model, tok = tiny_model(causal=False)
    data, _, ids, _ = generated_page(model, tok)
    T = len(ids)
    assert not data["causal"] and len(data["weights"][0][0]) == T * T
    torch.testing.assert_close(torch.tensor(data["weights"][1][3], dtype=torch.float) / data["scale"],
                               model_weights(model, ids)[1, 3].flatten(), rtol=0, atol=5e-4 + 1e-6)


def test_a_long_text_shows_the_models_window():
    model, tok = tiny_model()
    ids = tok.encode(TEXT + TEXT)  # 46 tokens, block_size 16
    data = attention_html.explorer_data(model, tok, ids, n_generated=3, steps=[{"ctx": 16, "p": 1.0, "top": []}] * 3)
    assert len(data["tokens"]) == 16 and data["earlier"] == len(ids) - 16
    assert data["first_generated"] == 13 and len(data["steps"]) == 3


def test_a_token_holding_a_line_break_among_other_characters_breaks_the_line():
    """A BPE token "\\n\\n" is a line break on the page too, not only a token that is exactly "\\n"."""
    from tinygpt.tokenizer import LearnedBPETokenizer
    tok = LearnedBPETokenizer([(ord("\n"), ord("\n"))])  # token 256 = "\n\n"
    ids = tok.encode("The cat.\n\n\nOn")  # ... ".", "\n\n", "\n", "O", "n"
    assert ids[8:10] == [256, ord("\n")]
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=16, n_layer=1, n_head=2, n_embd=16, vocab_size=tok.vocab_size)).eval()
    assert attention_html.explorer_data(model, tok, ids)["breaks"] == [8, 9]
    tok = LearnedBPETokenizer([(ord("\n"), ord(" "))])  # token 256 = "\n ": the break is not its last character
    ids = tok.encode("ab\n  x")
    assert ids == [97, 98, 256, 32, 120] and attention_html.explorer_data(model, tok, ids)["breaks"] == [2]


def test_a_wide_models_page_holds_at_most_its_budget_of_weights(monkeypatch):
    """GPT-2's shape over its 1,024 tokens (12 layers x 12 heads) made a page of 152 MB (2.7 GB and 32 s to write, 50 s
    to open in Chromium). A page holds at most PAGE_WEIGHTS weights: the last page_tokens tokens, one pass over them;
    the default model's page (4 x 4 x 128) is whole."""
    from model import ModelConfig as M
    assert attention_html.page_tokens(M(block_size=128, n_layer=4, n_head=4, vocab_size=9)) == 128
    assert attention_html.page_tokens(M(block_size=1024, n_layer=12, n_head=12, n_embd=768, vocab_size=9)) == 166
    # without the mask every pair is stored: the most tokens whose T x T weights fit
    T = attention_html.page_tokens(M(block_size=2048, n_layer=1, n_head=1, n_embd=8, vocab_size=9, causal=False))
    assert T * T <= attention_html.PAGE_WEIGHTS < (T + 1) ** 2
    model, tok = tiny_model()  # 2 layers x 4 heads, block 16: 8 x 136 weights over 16 tokens
    monkeypatch.setattr(attention_html, "PAGE_WEIGHTS", 8 * 45)  # 9 tokens: 8 x 45
    ids = tok.encode("The cat sat on the mat.")[:16]
    data = attention_html.explorer_data(model, tok, ids)
    assert len(data["tokens"]) == 9 and data["earlier"] == 7 and len(data["weights"][0][0]) == 45
    assert data["weights"][1][3] == (model_weights(model, ids[-9:])[1, 3] * 1000).round().int()[
        torch.tril(torch.ones(9, 9, dtype=torch.bool))].tolist()  # one forward pass over the 9 shown


# ---- sample.py --attention-html ----


@pytest.fixture(scope="module")
def run(tiny_stories_run):
    return str(tiny_stories_run)


def test_sample_says_when_the_page_shows_fewer_tokens_than_the_model_saw(run, tmp_path, monkeypatch):
    prompt = generate_stories(20000, 1337)[0][:40]
    cfg = sample.load_model(run, torch.device("cpu"))[0].config
    whole_block = cfg.n_layer * cfg.n_head * cfg.block_size * (cfg.block_size + 1) // 2  # (a page of every token)
    for tokens, said, weights in ((8, True, 200), (1, False, 10**9), (cfg.block_size, False, whole_block)):
        monkeypatch.setattr(attention_html, "PAGE_WEIGHTS", weights)
        out = io.StringIO()
        sample.main([run, "--prompt", prompt, "--max-new-tokens", str(tokens), "--attention-html",
                     str(tmp_path / "page.html")], out=out)
        shown = len(page_data((tmp_path / "page.html").read_text(encoding="utf-8"))["tokens"])
        assert ("(the page shows the last" in out.getvalue()) is said and (shown < 40) is said
        assert said or shown == min(40 + tokens, cfg.block_size)  # (all it saw: the whole block, the last case)
        if said:  # the weights a whole page would hold, counted (it said "tens of megabytes" of any)
            seen, layers, heads, every = re.search(r"of (\d+) tokens: (\d+) layers x (\d+) heads over them all would "
                                                   r"hold ([\d,]+) weights, past the 200 that", out.getvalue()).groups()
            assert int(every.replace(",", "")) == int(layers) * int(heads) * int(seen) * (int(seen) + 1) // 2


def test_sample_writes_the_page_with_show_steps_candidates(run, tmp_path):
    prompt = generate_stories(20000, 1337)[0][:30]
    out = io.StringIO()
    sample.main([run, "--prompt", prompt, "--max-new-tokens", "8", "--show-steps", "--seed", "3",
                 "--attention-html", str(tmp_path / "page.html")], out=out)
    data = page_data((tmp_path / "page.html").read_text(encoding="utf-8"))
    rows = [line.split() for line in out.getvalue().splitlines() if re.match(r"\s*\d+\s+\d+\s", line)]
    assert len(rows) == len(data["steps"]) == 8
    for row, step in zip(rows, data["steps"]):
        assert row[1] == str(step["ctx"])
        # the chosen token's probability and the candidates', as printed (0.1%): the page's, digit for digit
        # (it kept 4 digits and rounded again: 0.07454 read 7.4 beside the table's 7.5)
        printed = [cell[:-1] for cell in row if re.fullmatch(r"(\d+\.\d|<0\.1)%", cell)]
        assert printed == [step["p"]] + [p for _, p in step["top"]], (row, step)
    assert f"saved {tmp_path / 'page.html'}" in out.getvalue()
    sample.main([run, "--prompt", prompt, "--max-new-tokens", "2", "--num-samples", "2",
                 "--attention-html", str(tmp_path / "two.html")], out=io.StringIO())
    assert (tmp_path / "two_sample1.html").is_file() and (tmp_path / "two_sample2.html").is_file()
    # a name not ending in .html keeps it whole: best.pt's pages were best_sample1.pt, passing for checkpoints
    sample.main([run, "--prompt", prompt, "--max-new-tokens", "2", "--num-samples", "2",
                 "--attention-html", str(tmp_path / "best.pt")], out=io.StringIO())
    assert sorted(p.name for p in tmp_path.glob("best*")) == ["best.pt_sample1.html", "best.pt_sample2.html"]
    # one set, one lock (sample.py's): a name and its numbered pages, which `notes` and `notes_sample1.html` share
    from tinygpt.attention_html import numbered, page_set
    for asked in ("x.html", "notes", "best.pt"):
        second = numbered(Path(asked), 1, 2)
        assert page_set(numbered(Path(asked), 0, 2)) == page_set(Path(asked)) == page_set(second)
    assert page_set(Path("notes")) == page_set(Path("notes_sample1.html"))  # (the same files)
    # a name that is its suffix alone keeps it whole, as a name without one: no stemless _sample1.html
    assert numbered(Path(".html"), 0, 2) == Path(".html_sample1.html") and page_set(Path(".HTM")) == ".HTM.html"
    assert page_set(Path("x_sample.html")) == "x_sample.html"  # (no number: a page of its own, not x.html's)
    assert page_set(Path("x_sample1_notes.html")) == "x_sample1_notes.html"  # (a number inside the name: its own)
    from tinygpt.attention_html import in_page_set
    assert in_page_set(Path("story.html")).fullmatch("story_sample12.html")  # (the 12th sample's page too)
    with pytest.raises(UserError, match="is a directory"):
        sample.main([run, "--attention-html", str(tmp_path)], out=io.StringIO())


@pytest.mark.parametrize("given", [".", "a link named with a byte that is not UTF-8", "its checkpoint file"])
def test_the_pages_title_names_the_run_however_it_is_given(run, tmp_path, monkeypatch, given):
    # `sample.py .` titled the page ": the prompt and sample 1"; a folder name holding a byte that is
    # not UTF-8 went into the page as that byte, in a page that says it is UTF-8
    import os
    name = Path(run).name
    if given == ".":
        monkeypatch.chdir(run)
        arg = "."
    elif given == "its checkpoint file":
        arg = str(Path(run) / "best.pt")
    else:
        link = os.fsdecode(bytes(tmp_path) + b"/bad\xffname")
        os.symlink(run, link)
        arg, name = link, "bad\ufffdname"
    sample.main([arg, "--prompt", "Mia", "--max-new-tokens", "2", "--attention-html", str(tmp_path / "p.html")],
                out=io.StringIO())
    page = (tmp_path / "p.html").read_bytes().decode("utf-8")  # (strict)
    assert page_data(page)["title"] == f"{name}: the prompt and sample 1"
    assert f"<title>{name}: the prompt and sample 1" in page


def test_a_page_of_nothing_generated_says_so(run, tmp_path):
    """--max-new-tokens 0: the page said `the prompt and sample 1`, of no sample; the tables said
    `the prompt (nothing generated)`."""
    sample.main([run, "--prompt", "Mia", "--max-new-tokens", "0", "--attention-html", str(tmp_path / "p.html")],
                out=io.StringIO())
    assert page_data((tmp_path / "p.html").read_text(encoding="utf-8"))["title"] == \
        f"{Path(run).name}: the prompt (nothing generated)"


def test_sample_keeps_only_the_steps_the_page_can_show(run, tmp_path, monkeypatch):
    # it kept every step's candidates (~0.5 kB a token) until the end, though the page shows one block
    block_size = sample.load_model(run, torch.device("cpu"))[0].config.block_size
    kept, write = [], attention_html.write_explorer
    def spy(path, model, tokenizer, ids, n_generated, steps, *rest):
        kept.append((n_generated, len(steps)))
        return write(path, model, tokenizer, ids, n_generated, steps, *rest)
    monkeypatch.setattr(attention_html, "write_explorer", spy)
    sample.main([run, "--prompt", "Mia", "--max-new-tokens", str(3 * block_size), "--seed", "3",
                 "--attention-html", str(tmp_path / "page.html")], out=io.StringIO())
    assert kept == [(3 * block_size, block_size)]
    data = page_data((tmp_path / "page.html").read_text(encoding="utf-8"))
    assert data["first_generated"] == 0 and len(data["steps"]) == block_size  # every shown token has its step
    with pytest.raises(ValueError, match="steps for"):  # fewer steps than the window's generated tokens
        model, tok = tiny_model()
        attention_html.explorer_data(model, tok, tok.encode(TEXT), 10, [{"ctx": 16, "p": 1.0, "top": []}] * 9)


def test_sample_checks_the_page_paths_before_generating(run, tmp_path, monkeypatch):
    """A page that cannot be written is refused before the generation, naming the flag and path."""
    monkeypatch.setattr(sample, "generate_steps", lambda *a, **k: pytest.fail("generated before refusing"))

    def refused(extra: list, match: str) -> None:
        out = io.StringIO()
        with pytest.raises(UserError, match=match):
            sample.main([run, "--prompt", "Mia", "--max-new-tokens", "2", *map(str, extra)], out=out)
        assert out.getvalue() == ""

    (tmp_path / "afile").write_text("")
    refused(["--attention-html", tmp_path / "afile" / "x.html"],
            "--attention-html=.*x.html': its folder .*afile is a file")
    (tmp_path / "two_sample2.html").mkdir()
    refused(["--attention-html", tmp_path / "two.html", "--num-samples", 2], "--attention-html: .*two_sample2.html")
    if Path("/proc/self").is_dir():  # even root cannot create a file in /proc
        refused(["--attention-html", "/proc/tinygpt.html"], "--attention-html=.*/proc")
    # the flags mixed up: an HTML page under a picture's name was written, and opened as a broken picture
    refused(["--attention-html", tmp_path / "heat.png"],
            r"the page is HTML, not a PNG picture; name it e\.g\. .*heat\.html")
    refused(["--attention-html", tmp_path / "heat.PNG"], r"the page is HTML, not a PNG picture")
    assert not (tmp_path / "heat.png").exists() and not (tmp_path / "heat.PNG").exists()


# ---- in a real browser ----


def browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"no headless browser found ({', '.join(BROWSERS)}); .ci/run installs chromium where it can")


class Tokens(HTMLParser):
    """The rendered tokens: {position: {"class": ..., "title": ..., "t": label, "w": weight text, "bars": n}}."""

    def __init__(self):
        super().__init__()
        self.tokens: dict[int, dict] = {}
        self.current, self.part = None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if "tok" in classes:
            self.current = int(a["data-i"])
            self.tokens[self.current] = {"class": classes, "title": a.get("title", ""), "t": "", "w": "", "bars": 0,
                                         "colours": [], "style": a.get("style") or "", "w_style": ""}
        elif self.current is not None and classes and classes[0] in ("t", "w"):
            self.part = classes[0]
            if self.part == "w":
                self.tokens[self.current]["w_style"] = a.get("style") or ""
        elif self.current is not None and tag == "i":
            self.tokens[self.current]["bars"] += 1
            style = dict(attrs).get("style") or ""
            self.tokens[self.current]["colours"].append(re.search(r"background(?:-color)?:\s*([^;]+)", style)[1])

    def handle_endtag(self, tag):
        if tag == "span":  # the end of a label or weight (nothing nests inside them)
            self.part = None

    def handle_data(self, data):
        if self.current is not None and self.part:
            self.tokens[self.current][self.part] += data


def dom(path: Path, fragment: str) -> str:
    """The page as headless Chromium shows it after its scripts ran, opened at path#fragment."""
    done = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           f"{path.resolve().as_uri()}#{fragment}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def doms(pages: list[tuple[Path, str]]) -> list[str]:
    """Each (path, fragment) page as dom() shows it, from one start of the browser (a start takes 1-3 s on
    2 cores): each page opens at path#fragment in a frame of one page, which copies the frames' documents
    out once they all ran (their scripts run as they load, before the frame page's load event)."""
    frames = "".join(f'<iframe width="800" height="600" src="{html.escape(f"{path.resolve().as_uri()}#{fragment}")}">'
                     f'</iframe>' for path, fragment in pages)
    copy = ("addEventListener('load', () => document.querySelectorAll('iframe').forEach((frame, i) => {"
            " const out = document.createElement('pre'); out.id = 'frame' + i;"
            " const doc = frame.contentDocument, type = doc.doctype ? `<!DOCTYPE ${doc.doctype.name}>\\n` : '';"
            " out.textContent = encodeURIComponent(type + doc.documentElement.outerHTML + '\\n');"
            " document.body.append(out); }));")
    harness = pages[0][0].parent / "frames.html"
    harness.write_text(f"<!DOCTYPE html><html><body>{frames}<script>{copy}</script></body></html>", encoding="utf-8")
    done = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                           "--dump-dom", harness.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = dict(re.findall(r'<pre id="frame(\d+)">([^<]*)</pre>', done.stdout))
    assert sorted(shown, key=int) == [str(i) for i in range(len(pages))], done.stdout[-2000:]
    return [unquote(shown[str(i)]) for i in range(len(pages))]


def tokens_of(page: str) -> dict[int, dict]:
    parser = Tokens()
    parser.feed(page)
    return parser.tokens


def rendered(path: Path, fragment: str) -> dict[int, dict]:
    """The page's tokens after its scripts ran, opened at path#fragment in headless Chromium."""
    return tokens_of(dom(path, fragment))


def rendered_each(path: Path, fragments: list[str]) -> list[dict[int, dict]]:
    """rendered() for each fragment, from one start of the browser (doms)."""
    return [tokens_of(page) for page in doms([(path, fragment) for fragment in fragments])]


def test_the_browser_shows_the_models_weights(tmp_path):
    browser()  # skip early without one
    model, tok = tiny_model()
    data, page, ids, steps = generated_page(model, tok)
    path = tmp_path / "explorer.html"
    path.write_text(page, encoding="utf-8")
    att = model_weights(model, ids)
    T, layer, head, query = len(ids), 1, 2, 7
    view = f"layer={layer}&head={head}&query={query}"
    alone = dom(path, view)  # the page opened alone, as a user opens it
    tokens = tokens_of(alone)
    assert sorted(tokens) == list(range(T))
    assert "query" in tokens[query]["class"]
    for k in range(T):
        shown = tokens[k]
        assert shown["t"] == data["tokens"][k]
        if k <= query:  # a key it may see: the model's weight, as displayed (0.1 %)
            assert "masked" not in shown["class"]
            assert abs(float(shown["w"]) - 100 * att[layer, head, query, k].item()) <= 0.05 + 1e-4, (k, shown)
        else:  # a future key: masked, no weight
            assert "masked" in shown["class"] and shown["w"] == ""
    assert sum(float(tokens[k]["w"]) for k in range(query + 1)) == pytest.approx(100, abs=0.05 * (query + 1))
    for k in range(data["first_generated"], T):  # generated: marked, with the top-5 candidates it was drawn from
        assert "gen" in tokens[k]["class"]
        step = steps[k - data["first_generated"]]
        top = step["top"][0]
        # each candidate isolated (U+2068 .. U+2069): a right-to-left one took the numbers beside it into its
        # own direction, and "ו 1.9%" read "1.9 ו"
        label = token_label(tok, top[0])
        label = label if any(ch.isalnum() for ch in label) else f"'{label}'"  # (punctuation: quoted)
        shown = re.search(rf"top {TOP_N}: \u2068{re.escape(label)}\u2069 (\d+\.\d)%", tokens[k]["title"])
        # as --show-steps prints it, to 0.1%, rounded once
        assert shown and shown[1] == step_percent(top[1]), (tokens[k]["title"], top)
        assert "page's one pass" not in tokens[k]["title"]  # no slide here: drawn from the context shown
    assert all("gen" not in tokens[k]["class"] for k in range(data["first_generated"]))
    # all heads of the layer at once: one bar per head on each key it may see, none on the future
    again, last, third = doms([(path, view), (path, f"layer=0&head=all&query={T - 1}"),
                               (path, "layer=0&head=all&query=2")])
    assert again == alone  # (a page in doms' frames shows what it shows alone, byte for byte)
    assert all(tokens_of(last)[k]["bars"] == 4 for k in range(T))
    assert [tokens_of(third)[k]["bars"] for k in range(T)] == [4, 4, 4] + [0] * (T - 3)


def test_the_address_picks_a_view_only_with_plain_numbers(tmp_path):
    """#query=1e1 pinned token 1 and #query=abc token 0 (parseInt): a view nobody asked for. Only digits pick
    one now (past the last: the last); anything else leaves the view as it opens."""
    browser()  # skip early without one
    model, tok = tiny_model()
    data, page, ids, steps = generated_page(model, tok)
    path = tmp_path / "explorer.html"
    path.write_text(page, encoding="utf-8")
    T = len(ids)

    odd = ["1e1", "abc", "-1", "", "2.5"]
    fragments = ["query=3", f"query={T + 5}", "", "layer=x&head=-1&query=2"] + [f"query={o}" for o in odd]
    pinned = {fragment: [k for k, shown in tokens.items() if "query" in shown["class"]]
              for fragment, tokens in zip(fragments, rendered_each(path, fragments))}
    assert pinned["query=3"] == [3] and pinned[f"query={T + 5}"] == [T - 1]
    for o in odd:
        assert pinned[f"query={o}"] == pinned[""], o
    assert pinned[""] == []
    # a bad layer or head is ignored too, and a good query still pins
    assert pinned["layer=x&head=-1&query=2"] == [2]


def luminance(rgb: list[float]) -> float:
    """WCAG's relative luminance of an sRGB colour (0-255 channels)."""
    lin = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def text_contrast(style: str, text_style: str) -> float:
    """The contrast ratio of text_style's colour on style's background (that colour at its alpha over
    the white page)."""
    *back, alpha = [float(x) for x in re.search(r"background(?:-color)?:\s*rgba?\(([^)]+)\)", style)[1].split(",")]
    if len(back) == 2:  # rgb(r, g, b): opaque
        back, alpha = back + [alpha], 1.0
    text = [float(x) for x in re.search(r"(?:^|;)\s*color:\s*rgb\(([^)]+)\)", text_style)[1].split(",")]
    over_white = [alpha * c + (1 - alpha) * 255 for c in back]
    lighter, darker = sorted([luminance(over_white), luminance(text)], reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


@pytest.mark.parametrize("n_head", [4, 16])
def test_a_shaded_token_and_its_number_stay_readable_at_every_weight(tmp_path, n_head):
    """Text turned white above a weight of 0.35, whatever the head's colour: white on the pale green,
    orange or yellow of a weight of 0.44 read at about 2:1. The page now picks white or black by the
    shade's luminance, for the token and its number alike (WCAG's 4.5:1 for text)."""
    browser()  # skip early without one
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=16, n_layer=1, n_head=n_head, n_embd=32, vocab_size=tok.vocab_size)).eval()
    ids = tok.encode(TEXT[:16])
    data = attention_html.explorer_data(model, tok, ids, 0, [], "contrast")
    T, q = len(ids), len(ids) - 1
    start = q * (q + 1) // 2  # the last query's row in the stored lower triangle
    for head in range(n_head):  # that row's weights spread from 0 to 1, to meet every shade
        data["weights"][0][head][start:start + T] = [round(data["scale"] * k / q) for k in range(T)]
    path = tmp_path / "contrast.html"
    path.write_text(attention_html.explorer_html(data), encoding="utf-8")
    heads = sorted({0, 2, 4, 8, n_head - 1} & set(range(n_head)))  # blue, green, orange, olive; a hue
    for head, tokens in zip(heads, rendered_each(path, [f"layer=0&head={head}&query={q}" for head in heads])):
        for k in range(1, T):  # (a weight of 0 draws no shade)
            for text_style in (tokens[k]["style"], tokens[k]["w_style"]):  # the token, its number
                assert text_contrast(tokens[k]["style"], text_style) >= 4.5, (head, k, tokens[k], text_style)


def test_the_page_says_what_a_byte_label_is_when_it_shows_one(tmp_path):
    """'\\xc3' labels (one byte of a character that BPE split) were explained nowhere on the page; nor were
    '\\n', '\\t' or '\\u2423' (a ␣ of the text), which the terminal's legend names."""
    browser()  # skip early without one
    model, tok = tiny_model()
    data = attention_html.explorer_data(model, tok, tok.encode("The cat"), 0, [], "bytes")
    assert data["notes"] == []
    pages = [tmp_path / f"page{i}.html" for i in range(3)]
    pages[0].write_text(attention_html.explorer_html(data), encoding="utf-8")
    tok = CharTokenizer.from_text(TEXT + "\n\t\u2423")
    model = GPT(ModelConfig(block_size=16, n_layer=1, n_head=1, n_embd=8, vocab_size=tok.vocab_size)).eval()
    data = attention_html.explorer_data(model, tok, tok.encode("The\n\tcat \u2423"), 0, [], "escapes")
    pages[1].write_text(attention_html.explorer_html(data), encoding="utf-8")
    data["tokens"][1] = "\\xc3"  # as tokenizer._escape writes such a byte
    data["notes"] = attention_view.label_notes(data["tokens"])
    pages[2].write_text(attention_html.explorer_html(data), encoding="utf-8")
    legend = re.compile(r'id="legend"[^>]*>(.*?)</', re.S)
    plain, escapes, byte = (legend.search(page)[1] for page in doms([(page, "") for page in pages]))
    assert plain.endswith("; ␣ = space.")
    assert "; ␣ = space; '\\n' = newline; '\\t' = tab; '\\uNNNN' = the character of that code point" in escapes
    assert "xNN" not in escapes
    assert "; '\\xNN' = one byte: of a character split across tokens" in byte


def test_a_one_token_page_speaks_of_no_hatched_key(tmp_path):
    """A page of one token said "hatched = a future key, masked", with nothing that could be hatched (the tables
    and the heatmaps leave that out for one token)."""
    browser()  # skip early without one
    model, tok = tiny_model()
    legend = re.compile(r'id="legend"[^>]*>(.*?)</', re.S)
    cases = (("T", False), ("Th", True))
    for prompt, _ in cases:
        page = attention_html.explorer_html(attention_html.explorer_data(model, tok, tok.encode(prompt)))
        (tmp_path / f"{prompt}.html").write_text(page, encoding="utf-8")
    for (prompt, hatched), page in zip(cases, doms([(tmp_path / f"{prompt}.html", "") for prompt, _ in cases])):
        assert ("hatched = a future key" in legend.search(page)[1]) == hatched, prompt


def test_a_token_of_no_letter_or_digit_is_quoted_where_the_panel_names_or_lists_it(tmp_path):
    """The panel read `query 20: . (generated: ... top 5: . 81.5%, ␣a 2.8%, , 0.9%)`: a bare "." or "," read as
    the text's own punctuation. They are quoted, as the heatmaps label them; in the text itself they stay bare."""
    browser()  # skip early without one
    model, tok = tiny_model()
    data, _, _, _ = generated_page(model, tok)
    g = data["first_generated"]
    data["tokens"][g] = "."
    data["steps"][0]["top"] = [[",", "0.9"], ["a", "0.5"], ["7", "0.3"]]
    path = tmp_path / "page.html"
    path.write_text(attention_html.explorer_html(data), encoding="utf-8")
    page = dom(path, f"layer=0&head=0&query={g}")
    text = re.sub(r"<[^>]+>", "", page)
    assert f"query {g}: '.' (generated: " in text
    assert "top 3: \u2068','\u2069 0.9%, \u2068a\u2069 0.5%, \u20687\u2069 0.3%" in text  # (a digit: bare)
    parser = Tokens()
    parser.feed(page)
    assert parser.tokens[g]["t"] == "."  # the text shows the token as it is


def test_the_page_shows_tokens_whole_not_cut_at_the_tables_width():
    """The page cut every token at the tables' 10 characters: ' Northumberland' and ' Northumberlands' were
    both '␣Northumb…', in the text, the hover panel and the candidates alike."""
    from tinygpt.tokenizer import WordTokenizer
    long_word = "x" * 100
    tok = WordTokenizer.from_text(f"KING: Northumberland Northumberlands {long_word}")
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=8, n_layer=1, n_head=2, n_embd=16, vocab_size=tok.vocab_size)).eval()
    ids = tok.encode(f"KING: Northumberland Northumberlands {long_word}")
    step = {"ctx": len(ids) - 1, "p": 0.5, "top": [(ids[2], 0.5), (ids[3], 0.25)]}
    data = attention_html.explorer_data(model, tok, ids, 1, [step], "words")
    assert data["tokens"][2:4] == ["␣Northumberland", "␣Northumberlands"]
    assert [label for label, _ in data["steps"][0]["top"]] == ["␣Northumberland", "␣Northumberlands"]
    cut = data["tokens"][-1]  # a word tokenizer's token is as long as the word: the page's size stays bounded
    assert len(cut) == attention_html.PAGE_LABEL and cut == "␣" + "x" * (attention_html.PAGE_LABEL - 2) + "…"


def test_a_page_with_nothing_generated_says_nothing_of_generated_tokens(tmp_path):
    """With --max-new-tokens 0 the legend still said 'underlined = generated (hover for its top candidates ...)'."""
    browser()  # skip early without one
    model, tok = tiny_model()
    legend = re.compile(r'id="legend"[^>]*>(.*?)</', re.S)
    cases = ((0, False), (2, True))
    for n_generated, _ in cases:
        data = attention_html.explorer_data(model, tok, tok.encode("The cat"), n_generated, [], "legend")
        (tmp_path / f"page{n_generated}.html").write_text(attention_html.explorer_html(data), encoding="utf-8")
    pages = doms([(tmp_path / f"page{n_generated}.html", "") for n_generated, _ in cases])
    for (n_generated, said), page in zip(cases, pages):
        assert ("underlined = generated" in legend.search(page)[1]) == said, n_generated


def test_many_heads_draw_narrow_bars_so_the_text_stays_readable(tmp_path):
    """64 heads drew 64 bars of 3 px and 63 gaps under every token in the all-heads view: about 256 px a
    token, four tokens a line. Past 16 heads each bar is 1 px, with no gap."""
    browser()  # skip early without one
    tok = CharTokenizer.from_text(TEXT)
    bar = re.compile(r'<i style="([^"]*)"')
    cases = ((16, False), (32, True))
    for n_head, _ in cases:
        torch.manual_seed(0)
        model = GPT(ModelConfig(block_size=16, n_layer=1, n_head=n_head, n_embd=64, vocab_size=tok.vocab_size)).eval()
        page = attention_html.explorer_html(attention_html.explorer_data(model, tok, tok.encode("The cat")))
        (tmp_path / f"heads{n_head}.html").write_text(page, encoding="utf-8")
    pages = doms([(tmp_path / f"heads{n_head}.html", "layer=0&head=all&query=6") for n_head, _ in cases])
    for (n_head, narrow), page in zip(cases, pages):
        styles = bar.findall(page)
        assert len(styles) == 7 * n_head
        assert all(("width: 1px" in style) == narrow for style in styles), styles[:2]


@pytest.mark.parametrize("name", ["story_sample2.html", 'quo"te <b>&amp;.html', os.fsdecode(b"bad\xffname.html")])
def test_a_page_records_the_name_it_was_asked_for_in_utf_8(tmp_path, name):
    """attention_html.written_for reads back the name given (sample.py removes a set's pages by it); a
    name's byte that is not UTF-8 enters the page %-escaped: the page says it is UTF-8."""
    model, tok = tiny_model()
    path = tmp_path / "page.html"
    attention_html.write_explorer(path, model, tok, tok.encode("The cat"), asked=tmp_path / name)
    path.read_bytes().decode("utf-8")  # strict: no byte of the name as it was
    assert attention_html.written_for(path) == name
    path.write_text("<html>my own page named alike</html>")
    assert attention_html.written_for(path) is None


def test_the_notebook_view_wraps_the_page_in_an_iframe():
    pytest.importorskip("IPython")
    model, tok = tiny_model()
    _, page, _, _ = generated_page(model, tok)
    shown = attention_html.notebook_view(page)._repr_html_()
    assert shown.startswith("<iframe srcdoc=") and "&lt;script" in shown and "<script" not in shown


def test_the_page_stays_small_at_block_128_with_4x4_heads():
    """The default model's shape: 16 heads over 128 tokens stay under half a megabyte (docs/attention.md)."""
    text = generate_stories(3000, 5)[0]
    tok = CharTokenizer.from_text(text)
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=128, n_layer=4, n_head=4, n_embd=64, vocab_size=tok.vocab_size)).eval()
    step = {"ctx": 128, "p": 0.5, "top": [(0, 0.5)] * TOP_N}
    page = attention_html.explorer_html(attention_html.explorer_data(model, tok, tok.encode(text)[:128], 28, [step] * 28))
    assert len(page.encode("utf-8")) < 500_000


def test_each_of_16_heads_has_its_own_colour_and_a_slid_window_is_said(tmp_path):
    browser()  # skip early without one
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=16, n_layer=1, n_head=16, n_embd=32, vocab_size=tok.vocab_size)).eval()
    ids, steps = tok.encode(TEXT[:15]), []  # 15 tokens, 6 new: the window slides at the third
    new = [int(s.token[0]) for s in attention_html.recorded(
        generate_steps(model, torch.tensor([ids]), N_NEW, temperature=1.0, generator=torch.Generator().manual_seed(1)),
        steps, 1.0, None, None)]
    data = attention_html.explorer_data(model, tok, ids + new, N_NEW, steps, "16 heads")
    path = tmp_path / "explorer.html"
    path.write_text(attention_html.explorer_html(data), encoding="utf-8")
    shown = dom(path, "layer=0&head=all&query=15")
    assert "; 1 layer x 16 heads." in shown  # (it said "1 layers")
    parser = Tokens()
    parser.feed(shown)
    tokens = parser.tokens
    assert len(set(tokens[0]["colours"])) == 16  # the ten fixed colours repeated from head 10 on
    first = data["first_generated"]
    slid = [k for k in range(first, 16) if data["steps"][k - first]["ctx"] != k]
    assert any(data["steps"][k - first]["ctx"] < k for k in slid)  # drawn from fewer tokens than the page shows
    for k in range(first, 16):  # the page's one pass differs from the step's context: said on the token
        said = f"its weights here come from the page's one pass, where it has {k} before it" in tokens[k]["title"]
        assert said == (k in slid), (k, tokens[k]["title"])


def test_a_token_drawn_from_one_token_says_token_not_tokens(tmp_path):
    """The first token after a one-token prompt read 'from a context of 1 tokens' on hover."""
    browser()  # skip early without one
    model, tok = tiny_model()
    data, page, ids, steps = generated_page(model, tok, prompt="T")
    path = tmp_path / "explorer.html"
    path.write_text(page, encoding="utf-8")
    tokens = rendered(path, "")
    assert data["first_generated"] == 1
    assert "from a context of 1 token; top" in tokens[1]["title"], tokens[1]["title"]
    assert "from a context of 2 tokens; top" in tokens[2]["title"], tokens[2]["title"]


def test_a_long_text_shows_its_last_tokens_not_its_first():
    """The window is the last block_size tokens, the ones the model sees when it generates the next."""
    from tinygpt.attention_view import window_traces
    model, tok = tiny_model()
    ids = tok.encode(TEXT + " " + TEXT[::-1])  # 47 tokens, block_size 16
    window, traces = window_traces(model, ids)
    assert window == ids[-16:]
    assert torch.equal(torch.stack([t.weights[0] for t in traces]), model_weights(model, ids[-16:]))
    data = attention_html.explorer_data(model, tok, ids)
    assert data["tokens"] == [token_label(tok, i) for i in ids[-16:]] and data["earlier"] == len(ids) - 16


def test_the_steps_shown_are_those_of_the_tokens_in_the_window():
    """With more steps than generated tokens in the window, each shown token gets its own step (the
    last ones), not the candidates of a token drawn earlier and no longer shown."""
    model, tok = tiny_model()
    ids = tok.encode(TEXT + TEXT)  # 46 tokens, block_size 16: the last 20 generated, 16 of them shown
    steps = [{"ctx": 16, "p": k / 100, "top": [(ids[26 + k], k / 100)]} for k in range(20)]
    data = attention_html.explorer_data(model, tok, ids, n_generated=20, steps=steps)
    assert data["first_generated"] == 0
    assert [s["p"] for s in data["steps"]] == [f"{k}.0" for k in range(4, 20)]
    assert [s["top"][0][0] for s in data["steps"]] == [token_label(tok, i) for i in ids[-16:]]


def test_a_steps_probability_is_rounded_once_as_the_table_rounds_it():
    """The page kept 4 digits of each probability and its script rounded them again to 0.1%: p = 0.07454
    read 7.4% where --show-steps printed 7.5%, 0.06052 read 6.0 for 6.1. It now stores the table's text."""
    model, tok = tiny_model()
    ids = tok.encode(TEXT)
    step = {"ctx": len(ids) - 1, "p": 0.07454, "top": [(ids[-1], 0.07454), (ids[0], 0.06052)]}
    data = attention_html.explorer_data(model, tok, ids, 1, [step])
    assert data["steps"][0]["p"] == "7.5" and [p for _, p in data["steps"][0]["top"]] == ["7.5", "6.1"]
    assert "${s.p}%" in attention_html.PAGE and "${p}%" in attention_html.PAGE  # shown as stored


def test_steps_must_be_of_the_generated_tokens_and_their_candidates_labels_are_explained():
    tok = CharTokenizer.from_text("ab\n")
    model = GPT(ModelConfig(block_size=8, n_layer=1, n_head=1, n_embd=8, vocab_size=tok.vocab_size)).eval()
    ids = tok.encode("abab")
    step = {"ctx": 4, "p": 0.5, "top": [(tok.encode("\n")[0], 0.5)]}
    with pytest.raises(ValueError, match="3 steps for 2 generated tokens"):
        attention_html.explorer_data(model, tok, ids, 2, [step] * 3)
    data = attention_html.explorer_data(model, tok, ids, 1, [step])  # a newline among the candidates only
    assert "\\n" not in "".join(data["tokens"]) and "'\\n' = newline" in data["notes"]


def test_a_titles_marker_in_the_text_stays_as_it_is():
    """The title goes in last and once: a token "%TITLE%" is not replaced by it."""
    page = attention_html.explorer_html({"title": "R&D", "tokens": ["%TITLE%"]})
    assert page_data(page)["tokens"] == ["%TITLE%"] and "<title>R&amp;D</title>" in page


def test_a_title_or_token_holding_markup_stays_text():
    """A prompt or run name holding "</script>" or "</title>" ended the page's script or title early:
    the data did not parse, and the rest of the text ran as markup."""
    data = {"title": "a </title><b>b & c</b>", "tokens": ["</script>", "<!--", "x"]}
    page = attention_html.explorer_html(data)
    assert page_data(page) == data
    assert page.count("</script>") == attention_html.PAGE.count("</script>")
    assert "<title>a &lt;/title&gt;&lt;b&gt;b &amp; c&lt;/b&gt;</title>" in page


def test_a_killed_writers_temp_page_of_a_sample_no_longer_written_is_swept(tmp_path):
    """A writer killed while staging att_sample2.html, then `--attention-html att.html` of one sample: the temp
    page (60-100 KB) stayed for good, as only the names written were swept."""
    import sample
    page = tmp_path / "att.html"
    page.write_text("<html>a page</html>")
    dead = tmp_path / ".att_sample2.html.99999999.abcdefgh.tmp"  # pid 99999999: beyond Linux's pid_max
    other = tmp_path / ".notes.html.99999999.abcdefgh.tmp"  # another file's: not this page set's to sweep
    dead.write_text("half a page")
    other.write_text("half a note")
    sample.remove_other_pages(page, [page])
    assert not dead.exists() and other.exists() and page.exists()


def test_a_candidates_probability_under_0_05_percent_reads_as_not_zero():
    """A top candidate's probability is printed as --show-steps prints it (step_percent): one that rounds to 0.0
    but is not 0 reads "<0.1", as the drawn token's own does, not "0.0" beside it."""
    model, tok = tiny_model()
    ids = tok.encode(TEXT)
    step = {"ctx": len(ids) - 1, "p": 0.0004, "top": [(ids[0], 0.9), (ids[-1], 0.0004)]}
    data = attention_html.explorer_data(model, tok, ids, 1, [step])
    assert data["steps"][0]["p"] == step_percent(0.0004) == "<0.1"
    assert [p for _, p in data["steps"][0]["top"]] == [step_percent(0.9), step_percent(0.0004)] == ["90.0", "<0.1"]


def test_numbered_pages_keep_an_html_suffix_of_any_case():
    """name_parts: a name ending in .HTML or .Htm (any case) keeps its suffix after the number, as x.html does;
    it is not taken for a name without one (PAGE.HTML_sample1.html)."""
    from tinygpt.attention_html import numbered, page_set
    for name in ("PAGE.HTML", "Page.Htm"):
        stem, suffix = name.rsplit(".", 1)
        assert numbered(Path(name), 1, 2) == Path(f"{stem}_sample2.{suffix}")
        assert page_set(numbered(Path(name), 1, 2)) == page_set(Path(name)) == name


def test_a_users_file_with_the_set_mark_but_not_the_generator_was_written_for_nothing(tmp_path):
    """written_for reads the set's name only from a page tinygpt wrote (GENERATOR in its head): a user's own file
    holding the tinygpt-page-set meta line is none of a set's pages."""
    model, tok = tiny_model()
    path = tmp_path / "page.html"
    attention_html.write_explorer(path, model, tok, tok.encode("The cat"), asked=tmp_path / "story.html")
    assert attention_html.written_for(path) == "story.html"
    path.write_text(path.read_text(encoding="utf-8").replace(attention_html.GENERATOR, ""), encoding="utf-8")
    assert not attention_html.is_explorer_page(path) and attention_html.written_for(path) is None


def test_a_tenth_samples_page_is_of_its_set():
    """page_set: the pages of a call of ten samples or more (x_sample10.html) belong to x.html's set, as
    numbered names them."""
    from tinygpt.attention_html import numbered, page_set
    for asked in ("x.html", "notes"):
        assert {page_set(numbered(Path(asked), k, 12)) for k in range(12)} == {page_set(Path(asked))}


def test_a_page_without_a_title_is_titled_attention_before_its_script_runs():
    """The <title> in the file (what a tab, a bookmark or a page without script shows) says "attention" when
    the run gave no title, as the script's heading does."""
    model, tok = tiny_model()
    data = attention_html.explorer_data(model, tok, tok.encode("The cat"), title="")
    assert "<title>attention</title>" in attention_html.explorer_html(data)


def test_a_page_named_just_its_suffix_keeps_its_name_in_its_numbered_pages():
    """A page named ".html" (a dot file) has no stem to cut the suffix from: its samples are
    .html_sample1.html, not a bare "_sample1.html" that names no set."""
    for name in (".html", ".HTM"):
        page = Path(name)
        first = attention_html.numbered(page, 0, 2)
        assert first.name.startswith(name + "_sample1")
        assert attention_html.page_set(first) == attention_html.page_set(page)
        assert attention_html.in_page_set(page).fullmatch(first.name)


def test_a_key_of_weight_0_draws_no_bar_and_ten_heads_take_the_ten_fixed_colours(tmp_path):
    """In the all-heads view a bar is at least 1 px for any weight above 0, and none for a weight of 0 (a
    sliver read as a small weight); up to ten heads take the page's ten fixed colours, in order."""
    browser()  # skip early without one
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(ModelConfig(block_size=16, n_layer=1, n_head=10, n_embd=40, vocab_size=tok.vocab_size)).eval()
    data = attention_html.explorer_data(model, tok, tok.encode("The cat"))
    data["weights"][0][0][1:3] = [0, data["scale"]]  # head 0, query 1 (keys 0 and 1 from offset 1): all on key 1
    path = tmp_path / "ten.html"
    path.write_text(attention_html.explorer_html(data), encoding="utf-8")
    page = dom(path, "layer=0&head=all&query=1")
    first_bars = re.findall(r'<i style="([^"]*)"', page.split('data-i="1"')[0])  # token 0's bars
    assert len(first_bars) == 10
    assert re.search(r"height:\s*0px", first_bars[0]), first_bars[0]  # head 0: weight 0, no bar
    fixed = re.findall(r"\[(\d+), (\d+), (\d+)\]", re.search(r"const COLORS = (.*?);", attention_html.PAGE, re.S)[1])
    assert tokens_of(page)[0]["colours"] == [f"rgb({r}, {g}, {b})" for r, g, b in fixed]


def test_a_click_on_another_token_moves_the_pin_and_the_pinned_query_names_no_key_of_itself(tmp_path):
    """Pinned on one token, a click on another pins that one (it does not unpin); hovering the pinned query
    itself adds no "key" line for it, hovering another key does."""
    browser()  # skip early without one
    model, tok = tiny_model()
    path = tmp_path / "page.html"
    path.write_text(attention_html.explorer_html(attention_html.explorer_data(model, tok, tok.encode("The cat"))),
                    encoding="utf-8")
    steps = ("const d = document.querySelector('iframe').contentDocument, s = d.querySelectorAll('.tok');"
             "const info = () => [...d.getElementById('info').children].map(x => x.textContent).join('\\n');"
             "const seen = []; s[1].click(); s[2].click(); s[2].dispatchEvent(new MouseEvent('mouseenter'));"
             "seen.push(info()); s[0].dispatchEvent(new MouseEvent('mouseenter')); seen.push(info());"
             "const out = document.createElement('pre'); out.id = 'out';"
             "out.textContent = encodeURIComponent(JSON.stringify(seen)); document.body.append(out);")
    harness = tmp_path / "click.html"
    harness.write_text(f'<!DOCTYPE html><html><body><iframe src="{html.escape(path.resolve().as_uri())}"></iframe>'
                       f"<script>addEventListener('load', () => {{ {steps} }});</script></body></html>",
                       encoding="utf-8")
    done = subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                           "--dump-dom", harness.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    on_itself, on_key = json.loads(unquote(re.search(r'<pre id="out">([^<]*)</pre>', done.stdout)[1]))
    assert on_itself.startswith("query 2: ") and "[pinned" in on_itself, on_itself
    assert not any(line.startswith("key ") for line in on_itself.splitlines()), on_itself
    assert "[pinned" in on_key and any(line.startswith("key 0 ") for line in on_key.splitlines()), on_key


def test_the_panel_lists_the_five_keys_of_most_weight(tmp_path):
    """Per head the panel names the query's five keys of most weight, heaviest first."""
    browser()  # skip early without one
    model, tok = tiny_model()
    data = attention_html.explorer_data(model, tok, tok.encode("The cat"))
    path = tmp_path / "page.html"
    path.write_text(attention_html.explorer_html(data), encoding="utf-8")
    q = len(data["tokens"]) - 1
    shown = dom(path, f"layer=0&head=0&query={q}")
    line = re.search(r"layer 0 head 0, most weight on: ([^<]*)", shown)[1]
    listed = [int(k) for k in re.findall(r"\((\d+)\) [\d.]+%", line)]
    row = data["weights"][0][0][q * (q + 1) // 2:][:q + 1]  # the query's stored weights, keys 0..q
    assert q + 1 > 5 and len(listed) == 5, line
    assert [row[k] for k in listed] == sorted(row, reverse=True)[:5], line

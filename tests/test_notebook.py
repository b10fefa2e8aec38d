"""Guards notebooks/attention_mechanics.ipynb: valid nbformat 4 JSON that runs top to bottom.

It runs as a Jupyter user runs it: through a real kernel (nbclient + ipykernel, from the repository
root), and what its cells print must be the worked example of docs/design.md: the ✓/✗ causal mask,
the raw scores with −∞ in the masked cells, and the percentages (The 100; cat 35 65; sat 17 56 28;
on 14 24 43 19) with the future cells masked; then, for a tiny model's real Q, K, V, every head's
masked cells are exactly 0, its rows sum to 1, and the hand computation equals the model's own
HeadTrace. The heatmap cell must display a PNG image (with matplotlib), not a Figure's text repr,
and the last cell the attention explorer's page, inline.
Without nbclient/ipykernel the code cells run in order in one namespace (exec), and the image
test skips.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re

import pytest
import torch

from tinygpt.attention_view import CORNER, MASKED
from conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "attention_mechanics.ipynb"
TOKENS = ["The", "cat", "sat", "on"]
# the worked example of docs/design.md, the masked cells printed as MASKED
PERCENT = [["100", MASKED, MASKED, MASKED], ["35", "65", MASKED, MASKED], ["17", "56", "28", MASKED],
           ["14", "24", "43", "19"]]
SCORES = [["0.8", "−∞", "−∞", "−∞"], ["0.3", "0.9", "−∞", "−∞"], ["0.2", "1.4", "0.7", "−∞"],
          ["0.1", "0.6", "1.2", "0.4"]]
MASK = [["✓", "✗", "✗", "✗"],
        ["✓", "✓", "✗", "✗"],
        ["✓", "✓", "✓", "✗"],
        ["✓", "✓", "✓", "✓"]]
KERNEL = all(importlib.util.find_spec(m) for m in ("nbclient", "nbformat", "ipykernel"))


@pytest.fixture(scope="module")
def notebook() -> dict:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def executed() -> dict | None:
    """The notebook run through a real Jupyter kernel from the repository root (None without nbclient)."""
    if not KERNEL:
        return None
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(NOTEBOOK, as_version=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MPLBACKEND", raising=False)  # the kernel's own inline backend, as in Jupyter
        mp.delenv("OMP_NUM_THREADS", raising=False)  # the machine's threads, as a reader's: the notebook sets its own
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    return nb


@pytest.fixture(scope="module")
def printed(notebook, executed) -> str:
    """What the code cells print: from the kernel's stdout, else by exec of each cell in order, in
    one namespace, from the repo root."""
    if executed is not None:
        return "".join(o["text"] for c in executed.cells if c.cell_type == "code"
                       for o in c.outputs if o.output_type == "stream" and o.name == "stdout")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is faster on a busy machine
    namespace: dict = {"__name__": "__main__"}
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.chdir(ROOT)
        try:
            for i, cell in enumerate(c for c in notebook["cells"] if c["cell_type"] == "code"):
                exec(compile("".join(cell["source"]), f"<notebook code cell {i}>", "exec"), namespace)
        finally:
            torch.set_num_threads(threads)
    return out.getvalue()


def worked_tables(text: str) -> list[list[list[str]]]:
    """Every printed table over the worked example's four tokens, as rows of cells."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines):
        if line.startswith(CORNER) and line[len(CORNER):].split() == TOKENS:
            rows = [lines[i + 1 + r].split() for r in range(4)]
            assert [row[0] for row in rows] == TOKENS
            tables.append([row[1:] for row in rows])
    return tables


def test_notebook_is_nbformat_4(notebook):
    assert notebook["nbformat"] == 4 and isinstance(notebook["metadata"], dict)
    kinds = [c["cell_type"] for c in notebook["cells"]]
    assert kinds[0] == "markdown" and kinds.count("markdown") >= 5 and kinds.count("code") >= 5
    ids = [cell.get("id") for cell in notebook["cells"]]  # nbformat 4.5 on: every cell has its own
    assert notebook["nbformat_minor"] < 5 or (all(ids) and len(set(ids)) == len(ids)), ids
    for cell in notebook["cells"]:
        assert isinstance(cell["source"], list) and "metadata" in cell
        if cell["cell_type"] == "code":
            assert "outputs" in cell and "execution_count" in cell


def test_notebook_prints_the_worked_example(printed):
    tables = worked_tables(printed)
    assert MASK in tables
    assert SCORES in tables
    assert PERCENT in tables
    # rows of the percent table sum to 100 up to rounding
    for row in PERCENT:
        assert abs(sum(int(c) for c in row if c != MASKED) - 100) <= 1


def test_notebook_real_heads_mask_exactly_and_match_the_model(printed):
    heads = [line for line in printed.splitlines() if "masked cells exactly 0:" in line]
    assert len(heads) >= 2
    assert all(line.endswith("masked cells exactly 0: True; every row sums to 1: True") for line in heads)
    assert "model.attention gives the same weights and outputs: True" in printed  # model.py's one formula
    assert "weights equal the model's layer 0: True" in printed
    assert "head outputs equal the model's layer 0: True" in printed
    assert "merged and projected, it equals the layer's output: True" in printed  # step 5, the heads concatenated
    assert "masked weights exactly 0: True" in printed


def test_notebook_shows_why_generation_needs_the_mask(printed):
    """The README's and design.md's reason generation works token by token, shown on the notebook's model: a
    prefix's logits do not change as tokens arrive (they do without the mask), and the KV cache agrees."""
    assert "with the causal mask, a prefix's logits do not change as tokens arrive: True" in printed
    assert "without it: False" in printed
    assert "without it, a cached key would go stale as tokens arrive: True" in printed  # why the cache is refused
    assert "token by token with the KV cache, the same logits as the whole: True" in printed


def test_notebook_shows_the_heatmap_as_an_image(executed):
    if executed is None:
        pytest.skip("running the notebook through a kernel needs nbclient, nbformat and ipykernel")
    pytest.importorskip("matplotlib")
    heatmap = next(c for c in executed.cells if c.cell_type == "code" and "heatmap_figure" in c.source)
    kinds = [(o.output_type, sorted(o.get("data", {}))) for o in heatmap.outputs]
    assert any(kind == "display_data" and "image/png" in data for kind, data in kinds), kinds
    assert not any("<Figure size" in o.get("data", {}).get("text/plain", "") and "image/png" not in o.get("data", {})
                   for o in heatmap.outputs)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_notebook_shows_the_explorer_inline(executed):
    """The attention explorer's page (tinygpt/attention_html.py) displayed in an iframe."""
    if executed is None:
        pytest.skip("running the notebook through a kernel needs nbclient, nbformat and ipykernel")
    cell = next(c for c in executed.cells if c.cell_type == "code" and "notebook_view" in c.source)
    shown = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    assert len(shown) == 1 and shown[0].startswith("<iframe srcdoc=") and "id=&quot;data&quot;" in shown[0]


def test_the_notebooks_saved_text_is_what_a_fresh_run_prints(notebook, executed):
    """What a reader sees saved on GitHub is what running the notebook prints, on any number of cores: on 2 cores
    one score printed -0.10 where the saved notebook (1 thread) said -0.11 (the notebook now trains on one thread).
    Another kind of CPU (AVX2 against AVX-512) may still round a score on the edge the other way: a number may
    differ by one unit in its last digit, nothing else may differ."""
    if executed is None:
        pytest.skip("needs nbclient, nbformat and ipykernel (requirements-dev.txt)")
    number = re.compile(r"-?\d+\.\d+")

    def stdout(cells) -> list[str]:
        return ["".join("".join(o["text"]) for o in c["outputs"]
                        if o["output_type"] == "stream" and o["name"] == "stdout")
                for c in cells if c["cell_type"] == "code"]
    for fresh, saved in zip(stdout(executed.cells), stdout(notebook["cells"]), strict=True):
        assert number.sub("#", fresh) == number.sub("#", saved)  # the same text around the numbers
        for a, b in zip(number.findall(fresh), number.findall(saved), strict=True):
            last = 10.0 ** -len(b.split(".")[1])  # one unit in the last printed digit
            assert abs(float(a) - float(b)) <= last * 1.001, (a, b)


def test_the_notebooks_saved_explorer_page_is_todays(notebook):
    """The page saved in the notebook's output (what a reader on GitHub sees before running it) is
    the explorer of today's tinygpt/attention_html.py, data aside: it was an older page, without
    the generator mark and saying "1 layers", and the cell's saved character count was stale."""
    import html
    import re

    from tinygpt.attention_html import PAGE
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "code" and "notebook_view" in "".join(c["source"]))
    saved = "".join(next(o["data"]["text/html"] for o in cell["outputs"] if "text/html" in o.get("data", {})))
    page = html.unescape(re.fullmatch(r'<iframe srcdoc="(.*)" style=[^>]*></iframe>', saved, re.DOTALL)[1])
    chunks = re.split("%DATA%|%SET%|%TITLE%", PAGE)
    assert all(chunk in page for chunk in chunks), [c[:80] for c in chunks if c not in page]
    said = "".join("".join(o["text"]) for o in cell["outputs"] if o["output_type"] == "stream")
    assert f": {len(page):,} characters," in said, said

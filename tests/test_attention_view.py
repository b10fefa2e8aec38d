"""Guards tinygpt/attention_view.py and the teaching flags of sample.py that print through it.

The formatter prints the worked example (docs/design.md) in its query x key layout (✓/✗ mask, −∞ scores,
whole percents, "." for masked cells); cropping to the last N tokens keeps rows summing to 1 by
summing the cut-off keys into an "earlier" column. On a tiny model trained in-process on the
stories corpus: `--show-attention` prints one table per layer and head whose rows sum to 100 (up to
rounding) with exactly the future cells masked (none for a causal=false model); `--attention-last`
crops; `--attention-of all` covers the generated text; `--show-steps` prints one row per token whose
chosen tokens are exactly the plain run's, with the context length of model.generate's window rule;
`--attention-png` saves one PNG per layer (skipped without matplotlib), titled with the run and the
prompt, and without matplotlib says so on one stderr line while the tables still print. A heatmap
figure puts each cell's number on it, hatches the masked cells, quotes punctuation tokens and draws
the summed "earlier" column on its own axes and grey scale. '$' in a token or title is drawn as
text, not as mathtext; a long window draws at most MAX_HEATMAP tokens (sample.py says so); a Ctrl-C
while a PNG is written leaves the previous one whole; --attention-png folders that cannot be
written are refused before the generation.
"""
from __future__ import annotations

import inspect
import io
import math
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tinygpt import attention_view
import sample
from tinygpt.attention_view import EARLIER, MASKED, crop_last, mask_table, percent_table, scores_table, token_label
from conftest import ROOT, TINY_STORIES
from data.stories import generate_stories
from tinygpt.errors import UserError
from model import GPT, causal_mask, generate_steps, masked_softmax
from tinygpt.tokenizer import CharTokenizer

N_LAYER, N_HEAD, BLOCK = TINY_STORIES["n_layer"], TINY_STORIES["n_head"], TINY_STORIES["block_size"]
WORKED_TOKENS = ["The", "cat", "sat", "on"]
WORKED_SCORES = [[0.8, 0.0, 0.0, 0.0], [0.3, 0.9, 0.0, 0.0], [0.2, 1.4, 0.7, 0.0], [0.1, 0.6, 1.2, 0.4]]
WORKED_TABLE = """\
query \\ key  The  cat  sat   on
The          100    .    .    .
cat           35   65    .    .
sat           17   56   28    .
on            14   24   43   19"""


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(tiny_stories_run):
    return str(tiny_stories_run)


@pytest.fixture(scope="module")
def prompt():
    """Text from the corpus itself, so every character is in the char vocabulary."""
    return generate_stories(20000, 1337)[0][:40]


def run_sample(args) -> str:
    out = io.StringIO()
    sample.main([str(a) for a in args], out=out)
    return out.getvalue()


def parse_tables(text: str) -> dict[tuple[int, int], tuple[list[str], list[tuple[str, list[str]]]]]:
    """'layer L head H' blocks -> {(L, H): (key labels, [(query label, cells)])}."""
    tables = {}
    for match in re.finditer(r"^layer (\d+) head (\d+)\n((?:.+\n?)+)", text, re.M):
        lines = match.group(3).rstrip("\n").split("\n")
        assert lines[0].startswith(attention_view.CORNER)
        keys = lines[0][len(attention_view.CORNER):].split()
        rows = [(line.split()[0], line.split()[1:]) for line in lines[1:]]
        tables[int(match.group(1)), int(match.group(2))] = (keys, rows)
    return tables


# ---- the formatter ----


def test_worked_example_tables():
    mask = causal_mask(4, 4)
    weights = masked_softmax(torch.tensor(WORKED_SCORES), mask)
    assert percent_table(weights, WORKED_TOKENS, mask=mask) == WORKED_TABLE
    scores = scores_table(torch.tensor(WORKED_SCORES), WORKED_TOKENS, mask=mask, decimals=1).splitlines()
    assert scores[2].split() == ["cat", "0.3", "0.9", "−∞", "−∞"]
    assert mask_table(mask, WORKED_TOKENS).splitlines()[3].split() == ["sat", "✓", "✓", "✓", "✗"]
    # without a mask nothing is shown as masked, even a weight that rounds to 0
    assert MASKED not in percent_table(torch.tensor([[0.999, 0.001]] * 2), ["a", "b"])


def test_design_md_draws_the_worked_example_as_the_formatter_prints_it():
    """The module's docstring says design.md's worked example and a real model's heads look the same. design.md
    wrote a masked weight as "0", which the convention keeps for a real key under 0.5 %, and left masked
    scores blank where the tables print −∞."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip() in WORKED_TOKENS]
    assert [row[0] for row in rows] == WORKED_TOKENS
    mask = causal_mask(4, 4)
    scores = scores_table(torch.tensor(WORKED_SCORES), WORKED_TOKENS, mask=mask, decimals=1).splitlines()[1:]
    percents = percent_table(masked_softmax(torch.tensor(WORKED_SCORES), mask), WORKED_TOKENS, mask=mask)
    assert [row[:5] for row in rows] == [line.split() for line in scores]
    assert [row[6:] for row in rows] == [line.split() for line in percents.splitlines()[1:]]


def test_the_legend_explains_only_the_escapes_of_the_tokens_shown():
    """The legend's notes ('\\n' = newline) are for the labels in the tables: a token cropped into 'earlier' gets
    none."""
    from model import HeadTrace
    weights = masked_softmax(torch.zeros(4, 4), causal_mask(4, 4))[None, None]  # (1, 1, T, T)
    labels = ["\\n", "a", "b", "c"]
    assert "newline" in attention_view.attention_tables([HeadTrace(weights, None)], labels, last=4)
    cropped = attention_view.attention_tables([HeadTrace(weights, None)], labels, last=2)
    assert "newline" not in cropped and "summed weight on the 2 keys before" in cropped


def test_wide_characters_keep_the_columns_aligned():
    """Widths were counted in characters: a row or column labelled '猫' or '😀' (two terminal columns
    each) pushed its cells one column right of the others'."""
    grid = attention_view.format_grid([["100", "."], ["40", "60"]], ["猫", "␣😀b"], ["猫", "␣😀b"])
    lines = grid.splitlines()
    assert len({attention_view.columns(line) for line in lines}) == 1, grid  # every row ends where the header does
    assert attention_view.columns("猫😀e\u0301") == 5 and attention_view.left("猫", 4) == "猫  "
    # marks of combining class 0 are drawn on the character before too: a Thai vowel sign (U+0E34), a
    # Devanagari one (U+0941), an emoji's variation selector (U+FE0F) were counted as a column each
    assert [attention_view.columns(t) for t in ("กิน", "गुरु", "\u2764\ufe0f", "\u25cc\u0e31")] == [2, 2, 1, 1]
    assert attention_view.columns("\uff21\uff11") == 4  # fullwidth A and 1 (East Asian width F): two columns each
    grid = attention_view.format_grid([["100", "."], ["40", "60"]], ["กิน", "the"], ["กิน", "the"])
    assert len({attention_view.columns(line) for line in grid.splitlines()}) == 1, grid


def test_crop_last_sums_cut_off_keys_into_earlier():
    T, last = 10, 4
    mask = causal_mask(T, T)
    weights = masked_softmax(torch.randn(3, T, T), mask)  # (nh, T, T)
    labels = [f"t{i}" for i in range(T)]
    view, view_mask, rows, keys = crop_last(weights, labels, last, mask)
    assert view.shape == (3, last, last + 1)
    assert rows == labels[-last:] and keys == [EARLIER] + labels[-last:]
    assert torch.allclose(view.sum(-1), torch.ones(3, last))
    assert torch.allclose(view[..., 0], weights[:, -last:, :T - last].sum(-1))
    assert view_mask[:, 0].all() and view_mask[:, 1:].equal(causal_mask(last, last))
    full, full_mask, _, full_keys = crop_last(weights, labels, T + 5, mask)  # nothing to cut
    assert full.equal(weights) and full_keys == labels and full_mask.equal(mask)


def test_token_labels_are_readable():
    tok = CharTokenizer("ab \n")
    assert [token_label(tok, i) for i in tok.encode("a \n")] == ["a", "␣", "\\n"]

    class Long:
        def token_str(self, id):
            return " " + "x" * 30
    label = token_label(Long(), 0)
    assert label.startswith("␣x") and label.endswith("…") and len(label) == attention_view.MAX_LABEL


def test_a_space_sign_of_the_text_is_not_labelled_as_a_space():
    """A '␣' (U+2423) in the text was labelled '␣', as a space is: the tables could not tell them apart."""
    tok = CharTokenizer("c␣d e")
    assert [token_label(tok, i) for i in tok.encode("c␣d e")] == ["c", "\\u2423", "d", "␣", "e"]


def test_the_legend_names_the_escapes_and_the_quoted_full_stop_its_tables_show():
    """A table of '\\n', '\\t' and a quoted '.' column (the notebook's section 4) said only "'␣' = space"."""
    from tinygpt.attention_view import legend
    said = legend(4, 4, True, ["a", "\\n", "\\t", "."])
    assert "'.' (quoted) = the token .; '\\n' = newline; '\\t' = tab" in said
    plain = legend(3, 3, True, ["a", "\\\\n", "b"])  # a literal backslash, then n: no newline
    assert "newline" not in plain and "'\\\\' = backslash" in plain and "quoted" not in plain
    assert "'\\uNNNN' = the character of that code point" in legend(2, 2, True, ["\\u2423", "a"])
    assert "'.' (quoted) = the token ." in legend(1, 1, True, ["."])  # (one token: quoted in its table too)


def test_a_table_wider_than_the_terminal_goes_in_blocks_of_columns_each_with_the_row_labels():
    """At an 80-column terminal the README's example prompt gave rows of 83 columns: the terminal put each
    row's last cell on a line of its own, which read as a row (and split a key's label in two)."""
    labels = [f"k{i}" for i in range(16)]
    weights = masked_softmax(torch.zeros(16, 16), causal_mask(16, 16))
    whole = percent_table(weights, labels, mask=causal_mask(16, 16))
    assert "\n\n" not in whole and max(map(attention_view.columns, whole.splitlines())) > 80
    fitted = percent_table(weights, labels, mask=causal_mask(16, 16), width=80)
    blocks = [block.splitlines() for block in fitted.split("\n\n")]
    assert len(blocks) == 2 and all(attention_view.columns(line) <= 80 for block in blocks for line in block)
    keys = [key for block in blocks for key in block[0][len(attention_view.CORNER):].split()]
    assert keys == labels  # every key once, in order
    for r, line in enumerate(whole.splitlines()[1:]):  # each row's cells are the whole table's, in two blocks
        cells = [cell for block in blocks for cell in block[1 + r].split()[1:]]
        assert [block[1 + r].split()[0] for block in blocks] == [labels[r]] * 2 and cells == line.split()[1:]
    assert percent_table(weights, labels, mask=causal_mask(16, 16), width=2000) == whole
    widest = max(map(attention_view.columns, whole.splitlines()))  # a terminal just as wide: one block still
    assert percent_table(weights, labels, mask=causal_mask(16, 16), width=widest) == whole
    assert percent_table(weights, labels, mask=causal_mask(16, 16), width=widest - 1) != whole
    narrow = percent_table(weights, labels, mask=causal_mask(16, 16), width=5).split("\n\n")
    assert len(narrow) == 16  # narrower than a label and a cell: one column a block, never none
    legend = attention_view.legend(16, 40, True, width=60)
    assert max(map(len, legend.splitlines())) <= 60
    assert max(map(len, attention_view.legend(16, 40, True).splitlines())) > 60  # (no terminal: 100)


def test_sample_fits_the_tables_to_a_terminal_and_keeps_a_pipes_rows_whole(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return super().isatty() or True  # (closed: ValueError, as a real stream's)
    monkeypatch.setenv("COLUMNS", "72")
    assert sample.terminal_width(Terminal()) == 72
    assert sample.terminal_width(io.StringIO()) is None
    closed = Terminal()
    closed.close()
    assert sample.terminal_width(closed) is None


# ---- sample.py --show-attention ----


def check_table(keys, rows, causal_last: int):
    """Rows sum to 100 up to rounding; exactly the future cells (of the last `causal_last` keys) are masked."""
    offset = len(keys) - causal_last  # an "earlier" column comes first, never masked
    for i, (_, cells) in enumerate(rows):
        assert len(cells) == len(keys)
        for j, cell in enumerate(cells):
            assert (cell == MASKED) == (j - offset > i), (i, j, cells)
        shown = [int(c) for c in cells if c != MASKED]
        assert abs(sum(shown) - 100) <= len(shown) / 2, cells


def test_show_attention_tables(run, prompt):
    text = run_sample([run, "--prompt", prompt[:9], "--max-new-tokens", 3, "--temperature", 0,
                       "--show-attention"])
    tables = parse_tables(text)
    assert sorted(tables) == [(layer, head) for layer in range(N_LAYER) for head in range(N_HEAD)]
    labels = [label.replace("␣", " ") for label in tables[0, 0][0]]
    assert "".join(labels) == prompt[:9]  # 9 tokens <= 12: no crop, the labels spell the prompt
    for keys, rows in tables.values():
        assert [r[0] for r in rows] == keys
        check_table(keys, rows, causal_last=len(keys))
    assert text.endswith(prompt[:9] + sample_greedy(run, prompt[:9], 3) + "\n")  # the text still follows


def sample_greedy(run, prompt, n) -> str:
    args = [run, "--prompt", prompt, "--max-new-tokens", str(n), "--temperature", "0"]
    return sample.main(args, out=io.StringIO())[0]


def test_each_heads_table_shows_that_heads_weights():
    """Head 0 attends evenly, head 1 to each token itself: each block holds its own head's numbers."""
    from types import SimpleNamespace
    T = 4
    even = masked_softmax(torch.zeros(T, T), causal_mask(T, T))
    weights = torch.stack([even, torch.eye(T)])[None]  # (1, nh=2, T, T)
    tables = parse_tables(attention_view.attention_tables([SimpleNamespace(weights=weights)], list("abcd")))
    assert [cells for _, cells in tables[0, 0][1]][3] == ["25", "25", "25", "25"]
    assert [cells for _, cells in tables[0, 1][1]] == [["100", ".", ".", "."], ["0", "100", ".", "."],
                                                       ["0", "0", "100", "."], ["0", "0", "0", "100"]]


def test_the_tables_show_16_tokens_by_default(run, prompt):
    """Enough for the README's example prompt (13 tokens of the default model) to show whole."""
    for n in (16, 17):
        tables = parse_tables(run_sample([run, "--prompt", prompt[:n], "--max-new-tokens", 0, "--show-attention"]))
        keys, rows = tables[0, 0]
        assert len(rows) == 16 and (keys[0] == EARLIER) == (n > 16)


def test_attention_last_crops(run, prompt):
    text = run_sample([run, "--prompt", prompt, "--max-new-tokens", 0, "--attention-last", 5])
    assert f"{len(prompt)} tokens, showing the last 5" in text
    tables = parse_tables(text)
    assert len(tables) == N_LAYER * N_HEAD
    for keys, rows in tables.values():
        assert len(rows) == 5 and keys[0] == EARLIER and len(keys) == 6
        assert "".join(r[0] for r in rows).replace("␣", " ") == prompt[-5:]
        check_table(keys, rows, causal_last=5)
        assert int(rows[0][1][0]) > 0  # the first shown query still looks at the 35 earlier keys


def test_attention_of_all_covers_the_generated_text(run, prompt):
    out = io.StringIO()
    generated = sample.main([run, "--prompt", prompt, "--max-new-tokens", "6", "--temperature", "0",
                             "--attention-of", "all", "--attention-last", "6"], out=out)[0]
    tables = parse_tables(out.getvalue())
    assert len(tables) == N_LAYER * N_HEAD
    keys, rows = tables[0, 0]
    assert "".join(r[0] for r in rows).replace("␣", " ").replace("\\n", "\n") == generated
    assert f"{len(prompt) + 6} tokens, showing the last 6" in out.getvalue()
    assert "=== attention over the prompt and sample 1's generated text" in out.getvalue()
    out = io.StringIO()  # nothing generated: the header said "and sample 1's generated text" all the same
    sample.main([run, "--prompt", prompt, "--max-new-tokens", "0", "--attention-of", "all"], out=out)
    printed = out.getvalue()
    assert "=== attention over the prompt (nothing generated)" in printed and "generated text" not in printed


def test_bidirectional_model_shows_no_masked_cells(run, prompt, tmp_path):
    """A causal=false checkpoint (the same weights; sampling needs --force): every key is shown."""
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    ckpt = load_checkpoint(f"{run}/best.pt")
    ckpt["config"]["model"]["causal"] = False
    save_checkpoint(tmp_path / "bidirectional.pt", {k: v for k, v in ckpt.items() if k not in ("format", "version")})
    text = run_sample([tmp_path / "bidirectional.pt", "--prompt", prompt[:6], "--max-new-tokens", 1, "--force",
                       "--show-attention"])
    assert "no causal mask" in text
    for keys, rows in parse_tables(text).values():
        for _, cells in rows:
            assert MASKED not in cells and abs(sum(map(int, cells)) - 100) <= len(cells) / 2
        assert int(rows[0][1][-1]) > 0  # the first query looks at the last key: the future


def test_attention_flags_are_checked(run):
    with pytest.raises(UserError, match="--attention-last"):
        run_sample([run, "--attention-last", 0])


def test_attention_png_without_matplotlib(run, prompt, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    text = run_sample([run, "--prompt", prompt[:8], "--max-new-tokens", 2, "--attention-png", tmp_path / "png"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib" in err[0]
    assert len(parse_tables(text)) == N_LAYER * N_HEAD
    assert not (tmp_path / "png").exists()


def test_attention_png_with_matplotlib(run, prompt, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    titles = []
    real = attention_view.heatmap_figure

    def spy(*args, **kwargs):
        titles.append(kwargs.get("title"))
        return real(*args, **kwargs)

    monkeypatch.setattr(attention_view, "heatmap_figure", spy)
    run_sample([run, "--prompt", prompt[:8], "--max-new-tokens", 2, "--attention-png", tmp_path / "png"])
    pngs = sorted((tmp_path / "png").iterdir())
    assert [p.name for p in pngs] == [f"attention_layer{i}.png" for i in range(N_LAYER)]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert titles == [f"{Path(run).name}: {prompt[:8]!r}, layer {i}" for i in range(N_LAYER)]
    # a prompt past block_size: the tables' header said "the last BLOCK of N", the PNGs did not
    titles.clear()
    run_sample([run, "--prompt", " ".join([prompt] * 20), "--max-new-tokens", 1, "--attention-png", tmp_path / "png"])
    assert all(re.search(rf" \(the last {BLOCK} of \d+: block_size={BLOCK}\), layer \d$", t) for t in titles), titles


@pytest.mark.parametrize("last", [1, 4, 12])
def test_the_earlier_column_lines_up_with_the_keys(last):
    # with --attention-last 1 the grey column (aspect auto) was drawn taller than its 1x1 key panel
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    T, nh = 16, 4
    torch.manual_seed(0)
    weights = masked_softmax(torch.randn(nh, T, T), causal_mask(T, T))  # (nh, T, T)
    fig = attention_view.heatmap_figure(weights, [f"t{i}" for i in range(T)], last=last)
    FigureCanvasAgg(fig).draw()  # the layout is made at drawing
    earlier = [ax for ax in fig.axes if [t.get_text() for t in ax.get_xticklabels()] == [EARLIER]]
    keys = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert len(earlier) == len(keys) == nh  # (an empty zip checked nothing)
    for ax_e, ax in zip(earlier, keys):
        e, k = ax_e.get_window_extent(), ax.get_window_extent()
        assert abs(e.y0 - k.y0) < 1 and abs(e.y1 - k.y1) < 1, (e, k)  # the same rows, the same height


@pytest.mark.parametrize("labels", [["earlier", "it", "rained"], ["x", "earlier", "it", "rained"]])
def test_a_token_spelt_earlier_is_a_key_not_the_summed_column(labels):
    """A first shown token `earlier` (a word run's, or the first word of a TensorBoard run's data) was
    taken for the summed column: the heatmap raised a matplotlib ValueError (a training with
    train.tensorboard died at its first eval), and the table's first column read as the sum."""
    pytest.importorskip("matplotlib")
    from types import SimpleNamespace
    T, cropped = len(labels), len(labels) > 3
    weights = masked_softmax(torch.randn(1, T, T), causal_mask(T, T))  # (1, T, T)
    fig = attention_view.heatmap_figure(weights, labels, last=3)
    heads = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    summed = [ax for ax in fig.axes if [t.get_text() for t in ax.get_xticklabels()] == [EARLIER]]
    assert len(summed) == cropped and [t.get_text() for t in heads[0].get_xticklabels()] == ["'earlier'", "it",
                                                                                             "rained"]
    table = attention_view.attention_tables([SimpleNamespace(weights=weights[None])], labels, last=3)
    header = table.split("layer 0 head 0\n", 1)[1].splitlines()[0].split()
    assert header[len(attention_view.CORNER.split()):] == [EARLIER] * cropped + ["'earlier'", "it", "rained"]


def test_heatmap_figure_is_legible():
    pytest.importorskip("matplotlib")
    T, nh, last = 7, 2, 4
    torch.manual_seed(0)
    weights = masked_softmax(torch.randn(nh, T, T), causal_mask(T, T))  # (nh, T, T)
    labels = ["The", "␣cat", "␣sat", "␣on", ".", "\\n", "␣mat"]
    fig = attention_view.heatmap_figure(weights, labels, last=last, title="run: 'The cat sat on.'")
    assert fig._suptitle.get_text() == "run: 'The cat sat on.'"
    earlier = [ax for ax in fig.axes if [t.get_text() for t in ax.get_xticklabels()] == [EARLIER]]
    keys = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert len(earlier) == len(keys) == nh  # the summed column on its own axes, beside each head
    for head, (ax_e, ax) in enumerate(zip(earlier, keys)):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["␣on", "'.'", "\\n", "␣mat"]  # quoted marks
        assert ax_e.images[0].get_cmap().name == "Greys" and ax.images[0].get_cmap().name.startswith("viridis")
        assert ax.images[0].get_array().shape == (last, last)  # the real keys alone on the colour scale
        summed = 100 * weights[head, T - last:, :T - last].sum(-1)  # (last,) weight on the cut-off keys
        assert [t.get_text() for t in ax_e.texts] == [f"{v:.0f}" for v in summed.tolist()]
        # each masked cell is transparent over one hatched background behind the image ...
        image = ax.images[0]
        future = ~torch.ones(last, last, dtype=torch.bool).tril()  # the crop's last queries see its last keys
        assert (np.ma.getmaskarray(image.get_array()) == future.numpy()).all()
        assert image.get_cmap().get_bad()[3] == 0  # a masked cell shows what lies behind it
        (hatched,) = ax.patches
        assert hatched.get_hatch() == "///" and hatched.get_zorder() < image.get_zorder()
        assert (hatched.get_x(), hatched.get_y(), hatched.get_width(), hatched.get_height()) == (-0.5, -0.5, last, last)
        assert len(ax.texts) == last * (last + 1) // 2  # ... and a number on every other cell
    # a scale for each: past 24 tokens the grey column carries no numbers, and its shades had none
    scales = sorted(ax.get_ylabel() for ax in fig.axes if ax.get_ylabel().startswith("%"))
    assert scales == ["% of the query's attention", f"% on the keys before ('{EARLIER}')"]
    whole = attention_view.heatmap_figure(weights, labels, last=T)  # no earlier column: one scale
    assert [ax.get_ylabel() for ax in whole.axes if ax.get_ylabel().startswith("%")] == ["% of the query's attention"]


def test_a_heatmap_numbers_its_cells_up_to_numbered_tokens():
    pytest.importorskip("matplotlib")
    for T, numbers in ((attention_view.NUMBERED, attention_view.NUMBERED * (attention_view.NUMBERED + 1) // 2),
                       (attention_view.NUMBERED + 1, 0)):
        weights = masked_softmax(torch.zeros(1, T, T), causal_mask(T, T))
        fig = attention_view.heatmap_figure(weights, [f"t{i}" for i in range(T)], last=T)
        (ax,) = [ax for ax in fig.axes if ax.get_title().startswith("head")]
        assert len(ax.texts) == numbers, (T, len(ax.texts))


def test_a_narrow_heatmaps_title_and_notes_fit_in_the_figure():
    """The figure is sized for its heads and tokens; with one head and one token its title and the note
    on the grey column ran past both edges of the PNG ("...of 56: block_size=16), laye"). They now break
    into lines that fit."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    T = 16
    torch.manual_seed(0)
    weights = masked_softmax(torch.randn(1, T, T), causal_mask(T, T))  # (1, T, T)
    title = "rc2: 'ot go to Mantua.' (the last 16 of 56: block_size=16), layer 0"
    for last in (1, 3):
        fig = attention_view.heatmap_figure(weights, [f"t{i}" for i in range(T)], last=last, title=title)
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)  # (the constrained layout runs here, as savefig runs it)
        box = fig.bbox
        for text in (fig._suptitle, fig._supxlabel):
            extent = text.get_window_extent(renderer)
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and box.y0 <= extent.y0, (last, text.get_text())
        assert " ".join(fig._suptitle.get_text().split()) == title  # all of it, in lines
    # a word wider than the figure (a token of 64 '=', a sweep run's name) ran off both edges, whole; now cut, each
    # '$' escaped after the cut (an escaped '\\$' cut in two ended a line in '\\' and left the '$' bare: mathtext)
    title = "run: '" + "=" * 64 + "$5$" + "=" * 18 + "'"
    fig = attention_view.heatmap_figure(weights, [f"t{i}" for i in range(T)], last=1, title=title)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    extent = fig._suptitle.get_window_extent(renderer)
    assert fig.bbox.x0 <= extent.x0 and extent.x1 <= fig.bbox.x1, fig._suptitle.get_text()
    lines = fig._suptitle.get_text().split("\n")
    assert len(lines) > 2 and "".join(lines).replace("\\$", "$") == title.replace(" ", ""), lines
    assert all(line.count("$") == line.count("\\$") for line in lines), lines


def test_a_heatmap_says_which_heads_it_leaves_out_and_when_no_mask_applies():
    """40 heads drew heads 0-31 without a word in the picture (sample.py said it on stdout only); a model
    trained without the causal mask got no note of it (the tables' legend says it)."""
    pytest.importorskip("matplotlib")
    T = 4
    weights = masked_softmax(torch.randn(40, T, T), None)  # (40, T, T)
    fig = attention_view.heatmap_figure(weights, [f"t{i}" for i in range(T)], causal=False)
    notes = " ".join(fig._supxlabel.get_text().split())
    assert "heads 0-31 of 40 drawn" in notes and "no causal mask: every position sees every other" in notes, notes
    assert "hatched" not in notes
    fig = attention_view.heatmap_figure(weights[:32], [f"t{i}" for i in range(T)])
    notes = " ".join(fig._supxlabel.get_text().split())
    assert "drawn" not in notes and "no causal mask" not in notes and "hatched" in notes, notes


def test_dollar_signs_are_drawn_as_text():
    """Two '$' in a prompt ("It cost $5 and $6") would start matplotlib's mathtext: a formula, or a
    ParseException on "a $ b $ c $$ d"."""
    pytest.importorskip("matplotlib")
    from matplotlib.cbook import is_math_text
    T = 6
    weights = masked_softmax(torch.randn(2, T, T), causal_mask(T, T))
    labels = ["a", "␣$", "5", "$$", "␣$\\alpha$", "$"]
    fig = attention_view.heatmap_figure(weights, labels, title="run: 'a $ b $ c $$ d', layer 0")
    fig.savefig(io.BytesIO(), format="png")  # draws every text
    texts = [fig._suptitle] + [t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
    assert not any(is_math_text(t.get_text()) for t in texts)
    # as matplotlib draws text that is no math: each escaped '$' as '$', the rest as typed
    assert [t.get_text().replace("\\$", "$") for t in fig.axes[0].get_xticklabels()] == \
        ["a", "'␣$'", "5", "'$$'", "␣$\\alpha$", "'$'"]
    assert fig._suptitle.get_text().replace("\\$", "$") == "run: 'a $ b $ c $$ d', layer 0"


def test_hebrew_and_arabic_token_labels_are_drawn_in_letters_not_boxes():
    """The labels were drawn in DejaVu Sans Mono alone, which has no Hebrew or Arabic letter: every one
    a box, though the title's font (DejaVu Sans) has them. The sans-serif font now draws what the
    monospace one lacks."""
    pytest.importorskip("matplotlib")
    T = 3
    weights = masked_softmax(torch.randn(1, T, T), causal_mask(T, T))
    fig = attention_view.heatmap_figure(weights, ["שלום", "␣سلام", "ab"], title="layer 0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(io.BytesIO(), format="png")  # (a letter no font in the list has: "Glyph ... missing")
    assert not [w for w in caught if "missing from font" in str(w.message)]


def test_a_long_window_draws_at_most_max_heatmap_tokens():
    """The PNG's pixels grow with the square of the tokens (128 took 2 GB): at most MAX_HEATMAP."""
    pytest.importorskip("matplotlib")
    T, cap = 100, attention_view.MAX_HEATMAP
    weights = masked_softmax(torch.randn(4, T, T), causal_mask(T, T))
    fig = attention_view.heatmap_figure(weights, [f"t{i}" for i in range(T)], last=T)
    heads = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert len(heads) == 4 and all(ax.images[0].get_array().shape == (cap, cap) for ax in heads)
    assert all(not ax.texts for ax in heads)  # no numbers when crowded
    assert max(fig.get_size_inches()) < 30  # 2 x 2 heads of 64 tokens: about 2700 pixels at 100 dpi


def test_a_layer_of_many_heads_draws_at_most_max_heatmap_heads(run, prompt, tmp_path, monkeypatch):
    """128 heads (n_embd 128, head size 1) took 2 minutes and 1.2 GB a layer for an 11,444 x 9,172 PNG:
    the first MAX_HEATMAP_HEADS are drawn, and sample.py says so."""
    pytest.importorskip("matplotlib")
    T, cap = 6, attention_view.MAX_HEATMAP_HEADS
    weights = masked_softmax(torch.randn(cap + 8, T, T), causal_mask(T, T))
    fig = attention_view.heatmap_figure(weights, [f"t{i}" for i in range(T)], last=T)
    heads = [ax.get_title() for ax in fig.axes if ax.get_title().startswith("head")]
    assert heads == [f"head {h}" for h in range(cap)]
    monkeypatch.setattr(attention_view, "MAX_HEATMAP_HEADS", 1)  # (the run's model has 2 heads or more)
    text = run_sample([run, "--prompt", prompt[:20], "--max-new-tokens", 0, "--attention-png", tmp_path / "png"])
    assert "(the heatmaps show heads 0-0 of " in text and "--attention-html show every head)" in text
    monkeypatch.setattr(attention_view, "MAX_HEATMAP_HEADS", N_HEAD)  # every head drawn: nothing to say
    text = run_sample([run, "--prompt", prompt[:20], "--max-new-tokens", 0, "--attention-png", tmp_path / "png"])
    assert "saved " in text and "(the heatmaps show heads" not in text


def test_sample_says_when_the_heatmaps_show_fewer_tokens(run, prompt, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(attention_view, "MAX_HEATMAP", 8)
    text = run_sample([run, "--prompt", prompt[:20], "--max-new-tokens", 0, "--attention-last", 12,
                       "--attention-png", tmp_path / "png"])
    assert "(the heatmaps show the last 8 tokens" in text and "show 12)" in text
    assert len(parse_tables(text)[0, 0][1]) == 12  # the tables keep all 12


def test_an_interrupted_heatmap_leaves_the_old_png(run, prompt, tmp_path, monkeypatch):
    """Ctrl-C while a PNG is written: the previous file stays whole, no temp file is left."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    folder = tmp_path / "png"
    run_sample([run, "--prompt", prompt[:8], "--max-new-tokens", 0, "--attention-png", folder])
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def interrupted(self, fname, **kwargs):
        (fname.write if hasattr(fname, "write") else open(fname, "wb").write)(b"\x89PNG half")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sample([run, "--prompt", prompt[:9], "--max-new-tokens", 0, "--attention-png", folder])
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_heatmaps_that_cannot_be_written_leave_no_empty_folder(run, prompt, tmp_path, monkeypatch):
    """On a full disk the one line was right, but the folder it made stayed behind, empty; save_heatmaps itself
    removes the folders it made (the notebook calls it without sample.py)."""
    pytest.importorskip("matplotlib")
    import errno
    from types import SimpleNamespace
    from tinygpt import checkpoint

    def full(path, write):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(checkpoint, "temp_beside", full)
    folder = tmp_path / "new" / "png"
    with pytest.raises(UserError, match=r"cannot write .*png/attention_layer0\.png: No space left on device"):
        run_sample([run, "--prompt", prompt[:8], "--max-new-tokens", 0, "--attention-png", folder])
    assert list(tmp_path.iterdir()) == []
    traces = [SimpleNamespace(weights=masked_softmax(torch.zeros(1, 1, 3, 3), causal_mask(3, 3)))]
    with pytest.raises(UserError, match="No space left on device"):
        attention_view.save_heatmaps(traces, list("abc"), folder)
    assert list(tmp_path.iterdir()) == []


def test_every_heatmap_name_is_one_of_the_set(tmp_path):
    """HEATMAP_NAME tells the files a call's set replaces: layer 10 and sample 12 too (a 12-layer set then a
    2-layer one left layers 10 and 11 behind, passing for this run's)."""
    for layer, n in ((0, None), (11, None), (10, 11), (3, 0)):
        assert attention_view.HEATMAP_NAME.fullmatch(attention_view.heatmap_file(tmp_path, layer, n).name)
    assert not attention_view.HEATMAP_NAME.fullmatch("attention_layer.png")


def refused_before_generating(args, match: str, monkeypatch) -> None:
    """sample.main refuses args with a UserError matching `match` before printing or generating anything."""
    monkeypatch.setattr(sample, "generate_steps", lambda *a, **k: pytest.fail("generated before refusing"))
    out = io.StringIO()
    with pytest.raises(UserError, match=match):
        sample.main([str(a) for a in args], out=out)
    assert out.getvalue() == ""


def test_attention_png_paths_are_checked_before_generating(run, prompt, tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("")
    args = [run, "--prompt", prompt[:8], "--max-new-tokens", 2, "--attention-png"]
    refused_before_generating(args + [afile / "sub"], "--attention-png=.*sub' cannot be created: .*afile is a file",
                              monkeypatch)
    (tmp_path / "png" / "attention_layer1.png").mkdir(parents=True)
    refused_before_generating(args + [tmp_path / "png"], "--attention-png: .*attention_layer1.png.* is a directory",
                              monkeypatch)
    (tmp_path / "all" / "attention_sample2_layer0.png").mkdir(parents=True)
    refused_before_generating(args + [tmp_path / "all", "--attention-of", "all", "--num-samples", 2],
                              "attention_sample2_layer0.png", monkeypatch)
    if Path("/proc/self").is_dir():  # even root cannot create a file in /proc
        refused_before_generating(args + ["/proc/tinygpt_png"], "--attention-png=.*/proc", monkeypatch)
    refused_before_generating(args + [afile], "--attention-png=.*afile' is a file", monkeypatch)
    # a hundred million samples, each with its heatmaps: their names were listed first, until memory ran out
    refused_before_generating(args + [tmp_path / "many", "--attention-of", "all", "--num-samples", 10**8],
                              r"--num-samples=100,000,000 with .* at most 10,000", monkeypatch)


# ---- sample.py --show-steps ----


def parse_steps(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if re.match(r"^\s+\d+\s+\d+\s", line)]


def test_show_steps_greedy_matches_the_plain_run(run, prompt):
    n = 12
    plain = sample_greedy(run, prompt, n)
    out = io.StringIO()
    shown = sample.main([run, "--prompt", prompt, "--max-new-tokens", str(n), "--temperature", "0",
                         "--show-steps"], out=out)[0]
    rows = parse_steps(out.getvalue())
    assert len(rows) == n and shown == plain
    assert [int(r[0]) for r in rows] == list(range(1, n + 1))
    assert [int(r[1]) for r in rows] == [len(prompt) + i for i in range(n)]  # prompt + 40 + n < block: no slide
    assert "".join(r[2] for r in rows).replace("␣", " ") == plain.replace("\n", "\\n")
    for r in rows:  # greedy: the chosen token is the top candidate, with its probability
        assert r[2] == r[4] and r[3] == r[5]
    assert out.getvalue().endswith("\n" + prompt + plain + "\n")  # the text, once, after the table


def test_show_steps_of_nothing_generated_prints_no_table(run, prompt):
    """--show-steps --max-new-tokens 0 printed the table's header over no rows, and then (no table) the blank
    line that parts a table from the text: the output began with it. It is the text alone, as without the flag."""
    out = io.StringIO()
    sample.main([run, "--prompt", prompt, "--max-new-tokens", "0", "--show-steps"], out=out)
    assert "candidates" not in out.getvalue() and out.getvalue() == prompt + "\n"


def test_show_steps_sampling_keeps_the_same_draws(run, prompt):
    args = [run, "--prompt", prompt, "--max-new-tokens", 10, "--temperature", 1.2, "--top-k", 3, "--seed", 5]
    plain = sample.main([str(a) for a in args], out=io.StringIO())
    out = io.StringIO()
    shown = sample.main([str(a) for a in args + ["--show-steps"]], out=out)
    assert shown == plain
    for r in parse_steps(out.getvalue()):
        candidates = dict(zip(r[4::2], r[5::2]))
        assert r[2] in list(candidates)  # drawn from the top-3
        assert len(candidates) == 3  # top-k 3: the rest cannot be drawn, so they are no candidates (listed at 0.0%)


def test_the_sampling_flags_reach_generate_steps(run, prompt, monkeypatch):
    """--temperature, --top-k and --top-p are passed on to generation, not silently dropped."""
    seen = []

    def spy(*args, **kwargs):
        given = inspect.signature(generate_steps).bind(*args, **kwargs).arguments
        seen.append((given["temperature"], given["top_k"], given["top_p"]))
        return generate_steps(*args, **kwargs)

    monkeypatch.setattr(sample, "generate_steps", spy)
    sample.main([run, "--prompt", prompt[:5], "--max-new-tokens", "1", "--temperature", "0.7",
                 "--top-k", "4", "--top-p", "0.5"], out=io.StringIO())
    assert seen == [(0.7, 4, 0.5)]


def test_step_candidates_gives_the_chosen_tokens_own_probability():
    """A drawn token that is not the most likely one is shown with its own probability, not the top one's."""
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    step = attention_view.Step(token=torch.tensor([1]), logits=logits, context=1)
    chosen, p, top = attention_view.step_candidates(step, 1.0, None, None)
    expected = math.exp(1) / (math.exp(2) + math.exp(1) + 1)
    assert chosen == 1 and p == pytest.approx(expected)
    assert top[0][0] == 0 and top[0][1] > p  # token 0 is still the top candidate


def test_step_context_is_what_the_model_saw(tiny_model_config):
    """The ctx column (Step.context) is the window the model was fed, here through a slide (uncached)."""
    torch.manual_seed(0)
    model = GPT(tiny_model_config).eval()  # block_size 16
    seen = []

    class Recorder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = model.config

        def forward(self, idx, kv_caches=None):
            seen.append(idx.size(1))
            return model(idx, kv_caches)

    prompt = torch.randint(0, tiny_model_config.vocab_size, (1, 20))
    steps = list(generate_steps(Recorder(), prompt, 15, temperature=0, use_cache=False))
    assert [s.context for s in steps] == seen
    assert min(seen) == tiny_model_config.block_size // 2  # it slid
    assert all(torch.equal(s.token, s.logits.argmax(-1)) for s in steps)


def test_the_legend_counts_one_earlier_key_in_the_singular():
    from tinygpt.attention_view import legend
    assert "on the 1 key before" in legend(12, 13, True) and "on the 5 keys before" in legend(12, 17, True)


def test_the_legend_explains_a_byte_label_and_how_far_a_wide_row_may_be_from_100():
    """Labels such as '\\xc3' (one byte of é, split by BPE) were explained nowhere; and a table of 128
    keys, each cell rounded on its own, had rows summing to 82-113 under "rows sum to 100 up to rounding"."""
    from tinygpt.attention_view import legend, shows_bytes
    assert shows_bytes(["caf", "\\xc3", "\\xa9"]) and shows_bytes(["\\x1b"])
    assert not shows_bytes(["\\\\x41", "a", "␣the"])  # a literal backslash before x41: no byte
    assert "'\\xNN' = one byte" in legend(3, 3, True, ["caf", "\\xc3", "\\xa9"])
    assert "xNN" not in legend(3, 3, True, ["The", "␣cat", "␣sat"])
    weights = torch.full((1, 128), 1 / 128)  # 0.78% each: every cell prints 1, the row sums to 128
    row = percent_table(weights, ["q"], [f"k{i}" for i in range(128)]).splitlines()[1].split()[1:]
    assert sum(map(int, row)) == 128
    assert "each rounded on its own" in legend(128, 128, True) and "up to rounding)" not in legend(128, 128, True)


def test_one_token_and_a_full_stop_read_right():
    """'1 tokens'; a '.' token read like a masked cell in the tables; a 1-token heatmap spoke of
    hatched cells it did not have."""
    from tinygpt.attention_view import legend
    assert legend(1, 1, True).startswith("1 token;") and legend(2, 2, True).startswith("2 tokens;")
    # one token shown: its one cell is never a masked one
    assert "future key" not in legend(1, 1, True) and "future key" not in legend(1, 5, True)
    assert "future key" in legend(2, 2, True) and "no causal mask" in legend(1, 1, False)
    mask = causal_mask(3, 3)
    table = percent_table(masked_softmax(torch.zeros(3, 3), mask), ["a", MASKED, "b"], mask=mask).splitlines()
    assert table[0].split()[-3:] == ["a", f"'{MASKED}'", "b"] and table[2].split()[:2] == [f"'{MASKED}'", "50"]
    assert [row.split()[1:].count(MASKED) for row in table[1:]] == [2, 1, 0]  # the masked cells alone are bare
    pytest.importorskip("matplotlib")
    fig = attention_view.heatmap_figure(torch.ones(1, 1, 1), ["a"])
    assert "hatched" not in fig._supxlabel.get_text()
    fig = attention_view.heatmap_figure(masked_softmax(torch.zeros(1, 2, 2), causal_mask(2, 2)), ["a", "b"])
    assert "hatched" in fig._supxlabel.get_text()


def test_a_heatmap_says_what_its_label_marks_mean():
    """The tables and the explorer page say what '␣', '\\n' and a quoted token mean; a heatmap PNG, shared on its
    own, said nothing of them, and an apostrophe token read as a triple quote (three single ones)."""
    pytest.importorskip("matplotlib")
    labels = ["it", "'", "␣s", "\\n", "."]
    T = len(labels)
    fig = attention_view.heatmap_figure(masked_softmax(torch.zeros(1, T, T), causal_mask(T, T)), labels)
    said = " ".join(fig._supxlabel.get_text().split())  # (as wrapped to the figure's width)
    assert said.endswith("(weight exactly 0) quoted: a token of no letter or digit; ␣ = space; '\\n' = newline")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["it", '"\'"', "␣s", "\\n", "'.'"]
    fig = attention_view.heatmap_figure(masked_softmax(torch.zeros(1, 2, 2), causal_mask(2, 2)), ["a", "b"])
    assert " ".join(fig._supxlabel.get_text().split()).endswith("weight exactly 0)")  # (no marks: nothing more)


def test_tokens_the_font_lacks_draw_without_a_warning_each(tmp_path):
    """A heatmap of CJK tokens (and a run's label of a Japanese file name, tinygpt/plots.py): one
    matplotlib warning on stderr per character the font lacks, for a valid input."""
    pytest.importorskip("matplotlib")
    import warnings
    from types import SimpleNamespace
    from tinygpt import plots
    T = 4
    weights = masked_softmax(torch.randn(1, 1, T, T), causal_mask(T, T))  # (B=1, nh=1, T, T)
    label = {"label": "dataset=シェイクスピア.txt", "runs": [{"metrics": [{"step": 0, "val_loss": 4.0},
                                                                        {"step": 10, "val_loss": 3.0}]}]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        attention_view.save_heatmaps([SimpleNamespace(weights=weights)], ["シ", "ェ", "イ", "ク"], tmp_path)
        assert plots.val_loss_png([label, {**label, "label": "dataset=a.txt"}]) is not None
    assert [str(w.message) for w in caught] == [] and (tmp_path / "attention_layer0.png").exists()


def test_a_stop_while_heatmaps_are_drawn_leaves_the_earlier_set_whole(tmp_path, monkeypatch):
    """Each layer's PNG was replaced as soon as it was drawn: a Ctrl-C while layer 1 was drawn left this call's
    layer 0 beside an earlier call's layer 1, both looking whole. The set is now drawn first, then written
    together; and a killed writer's temp file of a layer the next model lacks is swept by a call's first set."""
    pytest.importorskip("matplotlib")
    from types import SimpleNamespace
    T = 4
    traces = [SimpleNamespace(weights=masked_softmax(torch.randn(1, 2, T, T), causal_mask(T, T))) for _ in range(2)]
    earlier = attention_view.save_heatmaps(traces, list("abcd"), tmp_path)
    before = {path.name: path.read_bytes() for path in earlier}
    real, drawn = attention_view.heatmap_figure, []

    def stopped_at_layer_1(*args, **kwargs):
        drawn.append(1)
        if len(drawn) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(attention_view, "heatmap_figure", stopped_at_layer_1)
    with pytest.raises(KeyboardInterrupt):
        attention_view.save_heatmaps(traces, list("wxyz"), tmp_path, title="another prompt")
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
    dead = tmp_path / ".attention_layer5.png.99999999.abcdefgh.tmp"  # (pid beyond pid_max: a dead writer's)
    dead.write_bytes(b"half a png")
    monkeypatch.setattr(attention_view, "heatmap_figure", real)
    attention_view.save_heatmaps(traces, list("abcd"), tmp_path, replace_set=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(before)


def test_a_calls_first_heatmaps_replace_an_earlier_set_in_one_step(tmp_path, monkeypatch):
    """sample.py removed an earlier call's heatmaps (of samples 2 and 3, say) after its own first set was
    saved, and a Ctrl-C held during the renames was delivered between the two: this call's sample 1 was
    left beside the earlier call's samples 2 and 3, each whole and marked. They now go in the same step;
    a user's PNG of such a name (unmarked) stays."""
    pytest.importorskip("matplotlib")
    from types import SimpleNamespace
    T = 4
    traces = [SimpleNamespace(weights=masked_softmax(torch.randn(1, 2, T, T), causal_mask(T, T))) for _ in range(2)]
    for n in range(3):
        attention_view.save_heatmaps(traces, list("abcd"), tmp_path, sample=n)
    (tmp_path / "attention_sample4_layer0.png").write_bytes(b"\x89PNG a user's picture")
    first = (tmp_path / "attention_sample1_layer0.png").read_bytes()
    real = attention_view.atomic_write_all

    def stopped_as_the_renames_end(*args, **kwargs):  # (a Ctrl-C held by signals_held, delivered at its end)
        real(*args, **kwargs)
        raise KeyboardInterrupt
    monkeypatch.setattr(attention_view, "atomic_write_all", stopped_as_the_renames_end)
    with pytest.raises(KeyboardInterrupt):
        attention_view.save_heatmaps(traces, list("wxyz"), tmp_path, sample=0, title="another prompt", replace_set=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "attention_sample1_layer0.png", "attention_sample1_layer1.png", "attention_sample4_layer0.png"]
    assert (tmp_path / "attention_sample1_layer0.png").read_bytes() != first  # (this call's: another prompt)


class Word:
    """A tokenizer of one token that token_str spells `text`."""

    def __init__(self, text):
        self.text = text

    def token_str(self, id):
        return self.text


def test_a_label_of_max_label_characters_is_shown_whole():
    """A label that fits (10 characters: "␣something") was cut to 9 and "…", hiding its last letter."""
    fits = "x" * attention_view.MAX_LABEL
    assert token_label(Word(fits), 0) == fits
    assert token_label(Word(fits + "y"), 0) == "x" * (attention_view.MAX_LABEL - 1) + "…"


def test_a_long_label_is_cut_to_its_columns_between_whole_escapes():
    """A 3-byte token `\\xf0\\x9f\\x98` was cut to `\\xf0\\x9f\\…`, a stray backslash by the legend; 10 CJK
    characters (20 columns) were cut at 10 characters, and --show-steps rows of a word vocabulary shifted and
    wrapped past 80 columns."""
    cases = {"\\xf0\\x9f\\x98": "\\xf0\\x9f…", "abcdefgh\\\\x": "abcdefgh…", "abcdef\\u00a0z": "abcdef…",
             "洒拍偵擆菡砿惦澙": "洒拍偵擆…", "e\u0301" * 12: "e\u0301" * 9 + "…"}
    for text, label in cases.items():
        assert token_label(Word(text), 0) == label
        assert attention_view.columns(label) <= attention_view.MAX_LABEL
    assert token_label(Word("洒拍偵擆菡"), 0) == "洒拍偵擆菡"  # (10 columns: fits)


def test_the_heatmap_counts_one_earlier_key_in_the_singular():
    pytest.importorskip("matplotlib")
    weights = masked_softmax(torch.zeros(1, 5, 5), causal_mask(5, 5))
    one = attention_view.heatmap_figure(weights, list("abcde"), last=4).get_supxlabel()
    two = attention_view.heatmap_figure(weights, list("abcde"), last=3).get_supxlabel()
    assert "on the 1 key before these 4" in one and "on the 2 keys before these 3" in two
    last = attention_view.heatmap_figure(weights, list("abcde"), last=1).get_supxlabel()
    assert "on the 4 keys before this one," in " ".join(last.split())  # not "these 1" (the label wraps)


def test_the_header_says_the_window_was_cut_only_when_it_was(run, prompt):
    """A prompt within block_size is shown whole: no "(the last N of N: ...)" in the tables' header."""
    text = run_sample([run, "--prompt", prompt[:9], "--max-new-tokens", 0, "--show-attention"])
    assert text.startswith("=== attention over the prompt ===\n")
    text = run_sample([run, "--prompt", prompt * 2, "--max-new-tokens", 0, "--show-attention"])
    assert text.startswith(f"=== attention over the prompt (the last {BLOCK} of {2 * len(prompt)}: "
                           f"block_size={BLOCK}) ===\n")


def test_heatmaps_of_exactly_max_heatmap_tokens_say_nothing_more(run, prompt, tmp_path, monkeypatch):
    """The note on fewer tokens in the heatmaps is for more than MAX_HEATMAP: at exactly that many, they show all."""
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(attention_view, "MAX_HEATMAP", 8)
    text = run_sample([run, "--prompt", prompt[:20], "--max-new-tokens", 0, "--attention-last", 8,
                       "--attention-png", tmp_path / "png"])
    assert "saved " in text and "(the heatmaps show" not in text


def test_without_matplotlib_the_note_is_said_once_for_every_sample(run, prompt, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    text = run_sample([run, "--prompt", prompt[:8], "--max-new-tokens", 2, "--num-samples", 2, "--attention-of", "all",
                       "--attention-png", tmp_path / "png"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matplotlib" in err[0]
    assert text.count("=== attention over the prompt and sample ") == 2 and len(parse_tables(text)) == N_LAYER * N_HEAD


def test_the_steps_columns_line_up_with_their_header(run, prompt):
    """The chosen token's probability ends under the header's "p", whatever the width of the labels."""
    text = run_sample([run, "--prompt", prompt, "--max-new-tokens", 5, "--temperature", 0, "--show-steps"])
    header, *rows = text.splitlines()[:6]
    column = header.index("p  top-")
    assert header.startswith("step   ctx  token") and all(row[column] == "%" for row in rows), text


def test_the_steps_rows_fit_a_terminal_with_as_many_candidates_as_fit(run, prompt, monkeypatch):
    """A row of five BPE candidates is 125 columns: at 80 the terminal wrapped each row into a second line that
    read as a row. At a terminal a row shows as many candidates as fit, the header says how many; a file or a
    pipe gets all five. The header fits too: where the sampling rule does not, it goes on a line above (the
    header was 81-104 columns, wrapped above rows that fit)."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    args = [run, "--prompt", prompt, "--max-new-tokens", "5", "--temperature", "0", "--show-steps"]
    piped = run_sample(args).splitlines()[:6]
    assert "top-5 candidates" in piped[0] and max(map(len, piped[1:])) > 40
    monkeypatch.setenv("COLUMNS", "40")
    out = Terminal()
    sample.main(args, out=out)
    rule, header, *rows = out.getvalue().splitlines()[:7]
    shown = int(re.search(r"top-(\d)( candidates?)?$", header)[1])
    assert rule == piped[0][piped[0].index("("):] and header.startswith("step")
    assert 1 <= shown < 5 and all(attention_view.columns(row) <= 40 for row in [header] + rows), out.getvalue()
    assert all(row.startswith(whole[:len(row)]) for row, whole in zip(rows, piped[1:]))  # the first candidates
    assert sample.candidates_shown(10, 20) == 1  # narrower than one: one still
    monkeypatch.setenv("COLUMNS", "200")
    out = Terminal()
    sample.main(args, out=out)
    assert out.getvalue().splitlines()[0] == piped[0]  # wide enough: one line, as in a file


def test_a_probability_that_rounds_to_0_is_not_printed_as_0():
    """A weak model with a vocabulary of thousands: --show-steps and the page printed the drawn token at 0.0% above
    candidates at 0.1%. Below 0.05% it reads "<0.1"; an exact 0 (a token top-k left out) stays 0.0."""
    from tinygpt.attention_view import step_percent
    assert [step_percent(q) for q in (0.0, 1e-9, 0.00049, 0.0006, 0.07454, 1.0)] == \
        ["0.0", "<0.1", "<0.1", "0.1", "7.5", "100.0"]


def test_the_legend_wraps_at_100_characters_however_wide_the_terminal():
    """legend: a paragraph wrapped at 100 characters, or a narrower terminal's width; a wider terminal does not
    widen it."""
    from tinygpt.attention_view import legend
    labels = ["\\n", "\\xc3", MASKED]
    wide = legend(4, 10, True, labels, width=300).splitlines()
    assert len(wide) > 1 and max(map(len, wide)) <= 100
    assert wide == legend(4, 10, True, labels).splitlines()  # as a file or a pipe gets it
    assert max(map(len, legend(4, 10, True, labels, width=60).splitlines())) <= 60


def test_the_tables_of_one_token_speak_of_no_masked_key():
    """attention_tables of a text of one token, at the default --attention-last (more than one): its one cell is
    never masked, so the legend says nothing of future keys."""
    from model import HeadTrace
    text = attention_view.attention_tables([HeadTrace(torch.ones(1, 1, 1, 1), None)], ["a"])
    assert attention_view.SHOWN > 1 and text.startswith("1 token;") and "future key" not in text
    assert "future key" in attention_view.attention_tables(
        [HeadTrace(masked_softmax(torch.zeros(1, 1, 2, 2), causal_mask(2, 2)), None)], ["a", "b"])


def test_a_label_is_not_cut_inside_a_u_escape():
    """An invisible character's \\uNNNN escape is one unit: a cut keeps it whole or drops it, never leaves
    `\\u00a` (a different code point) before the "…"."""
    room = attention_view.MAX_LABEL - 1  # columns before the "…"
    escape = "\\u00a0"
    text = "a" * (room - len(escape) + 1) + escape + "zz"  # the whole escape passes `room` by one column
    label = token_label(Word(text), 0)
    assert label == "a" * (room - len(escape) + 1) + "…"
    assert attention_view.columns(label) <= attention_view.MAX_LABEL


def test_fullwidth_characters_take_two_columns():
    """Fullwidth forms ('Ａ', East Asian width F) are drawn two columns wide, as CJK is: a label of them
    is cut to its columns and the tables stay aligned."""
    assert attention_view.columns("ＡＢ") == 4
    text = "Ａ" * attention_view.MAX_LABEL
    label = token_label(Word(text), 0)
    assert label.endswith("…") and attention_view.columns(label) <= attention_view.MAX_LABEL


def test_an_enclosing_mark_takes_no_column():
    """An enclosing mark (category Me, combining class 0: U+20E3 of the keycap '1⃣') is drawn on the
    character before it, as a combining accent is."""
    assert attention_view.columns("1\u20e3") == attention_view.columns("1") == 1
    assert attention_view.left("1\u20e3", 3) == "1\u20e3  "


def test_the_legend_explains_a_long_u_escape_too():
    """An invisible character past U+FFFF (a language tag, U+E0001) is spelt \\UNNNNNNNN by the tokenizer;
    the legend says what it is, as it does for \\uNNNN."""
    label = CharTokenizer("a\U000e0001").token_str(1)
    assert label.startswith("\\U")
    assert any("\\uNNNN" in note for note in attention_view.label_notes([label]))
    assert "\\uNNNN" in attention_view.legend(1, 1, True, [label])


def test_a_token_of_digits_is_not_quoted_on_a_heatmap_axis():
    """Quotes mark a token of no letter or digit ('.', ','); a number token ('42') is a word and stays bare."""
    assert not attention_view.quoted_on_axis("42")
    assert attention_view.heatmap_label("42") == attention_view.plain_text("42")
    assert attention_view.quoted_on_axis(".")


def test_a_cells_number_is_white_where_its_colour_is_dark():
    """viridis is dark at low weights, Greys at high: a cell's number is white on those, black elsewhere."""
    pytest.importorskip("matplotlib")
    T = 3
    weights = torch.tensor([[[1.0, 0, 0], [0.02, 0.98, 0], [0.02, 0.03, 0.95]]])  # (1, T, T)
    fig = attention_view.heatmap_figure(weights, list("abc"), last=T - 1)  # an earlier column of 2 % and 2 %
    (ax,) = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    (ax_e,) = [ax for ax in fig.axes if [t.get_text() for t in ax.get_xticklabels()] == [EARLIER]]
    ink = {t.get_text(): t.get_color() for t in ax.texts}
    assert ink["98"] == "black" and ink["3"] == "white"  # viridis: bright high, dark low
    assert {t.get_color() for t in ax_e.texts} == {"black"}  # Greys: 2 % is near white


def test_a_one_token_heatmap_speaks_of_no_hatched_key():
    """One token has one cell, never masked: its picture says nothing of hatched future keys."""
    pytest.importorskip("matplotlib")
    weights = masked_softmax(torch.zeros(1, 1, 1), causal_mask(1, 1))
    assert "hatched" not in attention_view.heatmap_figure(weights, ["a"]).get_supxlabel()
    weights = masked_softmax(torch.zeros(1, 2, 2), causal_mask(2, 2))
    assert "hatched" in attention_view.heatmap_figure(weights, ["a", "b"]).get_supxlabel()

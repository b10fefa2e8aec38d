"""The docs stay true to the repository: every link lands, and the README's config table describes
the configs as they are."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: Path) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", markdown.read_text(encoding="utf-8"), flags=re.S)  # no '#' comments
    heads = re.findall(r"^#{1,6} (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_lands_on_a_file_and_heading(doc):
    broken = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no such heading in {file.name}")
    assert not broken, f"{doc.name}: {broken}"


def test_the_readme_config_table_describes_every_config_as_it_is():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(configs/[\w.]+\.yaml)` \| (.+) \|$", readme, flags=re.M))
    configs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("*.yaml"))
    assert sorted(rows) == configs
    for name, text in rows.items():
        cfg = yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))
        m, d = cfg.get("model", {}), cfg.get("data", {})
        shape = re.search(r"(\d+)×(\d+)×(\d+)", text)
        if shape is None:  # "the same ..." rows name no shape
            continue
        assert tuple(map(int, shape.groups())) == (m["n_layer"], m["n_head"], m["n_embd"]), (name, text)
        vocab = re.search(r"([\d,]+)-token BPE", text)
        if vocab:
            assert int(vocab.group(1).replace(",", "")) == d["bpe_vocab_size"], (name, text)


SECTION_REF = re.compile(r"\b(README|[a-z]+\.md)[,:] \"([^\"]+)\"")  # README, "Configs" / results.md: "Compiled ..."


def test_every_quoted_section_name_is_a_heading():
    """A comment or message that sends the reader to `README, "Data"` must find that section."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    files = [ROOT / name for name in tracked.stdout.splitlines() if not name.startswith("tests/")
             and Path(name).suffix in (".py", ".yaml", ".md", ".txt", ".sh", ".ipynb")]
    heads = {doc.stem if doc.name != "README.md" else "README":
             re.findall(r"^#{1,6} (.+)$", doc.read_text(encoding="utf-8"), flags=re.M) for doc in DOCS}
    missing = [f"{p.relative_to(ROOT)}: {doc}, {title!r}" for p in files
               for doc, title in SECTION_REF.findall(p.read_text(encoding="utf-8", errors="replace"))
               if not any(h.startswith(re.sub(r"\s*\n[\s#]*", " ", title)) for h in heads[doc.removesuffix(".md")])]
    assert not missing


def test_the_documented_fine_tune_settings_load_with_every_shipped_config():
    """The fine-tune overrides the README and docs/interop.md give (train.lr=3e-5) were refused with every config:
    each sets a train.min_lr above 3e-5. They now carry their own train.min_lr. The README's, given for any config,
    were then refused for the data: an imported GPT-2 needs GPT-2's whole vocabulary (interop.md's command, of the
    gpt2 config, said so; the README's did not)."""
    from tinygpt.config import load_config
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    interop = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")
    spans = re.search(r"fine-tune \(`--set (train\.init_from=[^`]*)`[^`]*`([^`]*)`\)", readme)
    command = re.search(r"python train\.py (\S+) --set (train\.init_from=.*?)\s+#", interop, re.S)
    given = [(sorted((ROOT / "configs").glob("*.yaml")), f"{spans[1]} {spans[2]}".split()),
             ([ROOT / command[1]], [o for o in command[2].split() if o != "\\"])]
    for configs, overrides in given:
        assert any(o.startswith("train.lr=") for o in overrides), overrides
        for config in configs:
            cfg = load_config(config, overrides)
            assert cfg.train.min_lr <= cfg.train.lr, (config.name, overrides)
            assert (cfg.data.tokenizer, cfg.data.compact_vocab) == ("gpt2", False), (config.name, overrides)


def test_the_attention_steps_are_numbered_alike_in_the_model_the_design_and_the_notebook():
    """model.py's forward numbered the KV cache as step 2 and the transpose as 3 (scores, mask, softmax inside
    `attention` as 4, labelled 3a and 3b there), where docs/design.md and the notebook number five other steps."""
    import inspect
    import json

    import model
    steps = ["project", "split heads", "scores, mask, softmax", "weight the values", "merge"]
    forward, formula = inspect.getsource(model.CausalSelfAttention.forward), inspect.getsource(model.attention)
    design = (ROOT / "docs" / "design.md").read_text()
    notebook = "".join("".join(cell["source"]) for cell in
                       json.loads((ROOT / "notebooks" / "attention_mechanics.ipynb").read_text())["cells"])
    for n, name in enumerate(steps, 1):
        assert f"{n}) {name}" in forward and f"{n}) {name}" in design and f"{n}. **{name}" in notebook, (n, name)
    assert "# 3) scores" in formula and "# 4) weight the values" in formula and "3a)" not in formula


def test_the_design_synopsis_of_sample_py_shows_its_exclusive_flags_as_one_choice():
    """docs/design.md listed --interactive apart from [--prompt TEXT | --prompt-file FILE], as if it went with
    either, where sample.py refuses --interactive beside them (`not allowed with argument`)."""
    import sample
    design = (ROOT / "docs" / "design.md").read_text()
    synopsis = design[design.index("python sample.py RUN_DIR_OR_CKPT"):design.index("python -m data.prepare")]
    groups = re.findall(r"\[([^\]]*\|[^\]]*)\]", synopsis)  # [--a X | --b Y]
    choices = [{flag.split()[0] for flag in group.split(" | ")} for group in groups]
    for group in sample.build_parser()._mutually_exclusive_groups:
        flags = {action.option_strings[0] for action in group._group_actions}
        assert flags in choices, (flags, choices)

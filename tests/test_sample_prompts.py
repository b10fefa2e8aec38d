"""Guards sample.py's ways in: `--list-vocab` prints every token with its id; `--prompt-file -`
reads standard input; `--interactive` loads the model once and answers each input line, streaming,
until EOF (through the real CLI too), a prompt outside the vocabulary costing one stderr line and not
the session; a refused prompt names the closest vocabulary entries and points at --list-vocab."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

import sample
from conftest import ROOT
from tinygpt.checkpoint import load_model
from tinygpt.errors import UserError

GREEDY = ["--temperature", "0", "--max-new-tokens", "12", "--device", "cpu"]


def run_sample(args: list, stdin: str | None = None, monkeypatch=None) -> tuple[list[str], str]:
    """sample.main in-process -> (its returned texts, what it printed)."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    texts = sample.main([str(a) for a in args], out=out)
    return texts, out.getvalue()


def test_list_vocab_prints_every_token(tiny_stories_run):
    tokenizer = load_model(tiny_stories_run)[2]
    tokens, printed = run_sample([tiny_stories_run, "--list-vocab"])
    lines = printed.splitlines()
    assert lines[0].startswith(f"# {tokenizer.vocab_size} tokens") and len(lines) == tokenizer.vocab_size + 1
    assert [line.split(maxsplit=1)[0] for line in lines[1:]] == [str(i) for i in range(tokenizer.vocab_size)]
    assert tokens[tokenizer.encode(" ")[0]] == "␣" and tokens[tokenizer.encode("\n")[0]] == "\\n"


def test_prompt_file_dash_reads_standard_input(tiny_stories_run, monkeypatch):
    from_stdin, printed = run_sample([tiny_stories_run, "--prompt-file", "-", *GREEDY], "Mia had", monkeypatch)
    from_flag, _ = run_sample([tiny_stories_run, "--prompt", "Mia had", *GREEDY])
    assert from_stdin == from_flag and printed == "Mia had" + from_flag[0] + "\n"


def test_interactive_answers_each_line_with_one_model(tiny_stories_run, monkeypatch, capsys):
    loads = []
    monkeypatch.setattr(sample, "load_model", lambda *a, **k: loads.append(a) or load_model(*a, **k))
    prompts = ["Mia had", "The dog ~", "", "Then she"]  # "~" is no character of the stories
    texts, printed = run_sample([tiny_stories_run, "--interactive", *GREEDY], "\n".join(prompts) + "\n", monkeypatch)
    assert len(loads) == 1  # loaded once for every prompt
    expected = [run_sample([tiny_stories_run, "--prompt", p, *GREEDY])[0][0] for p in prompts if "~" not in p]
    assert texts == expected  # greedy: each answer is what a separate sample.py call gives
    assert printed == "".join(p + t + "\n" for p, t in zip([p for p in prompts if "~" not in p], texts))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "'~'" in err[0] and "--list-vocab" in err[0]


def test_interactive_through_the_real_cli(tiny_stories_run, tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "sample.py"), str(tiny_stories_run), "--interactive", *GREEDY],
                            input="Mia had\nThen she\n", capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) >= 2 and lines[0].startswith("Mia had") and "Then she" in result.stdout
    assert result.stderr == ""  # not a terminal: no greeting, no "> " prompts


def test_a_refused_prompt_points_at_the_vocabulary(tiny_stories_run):
    with pytest.raises(UserError) as err:
        run_sample([tiny_stories_run, "--prompt", "Mia~", *GREEDY])
    msg = str(err.value)
    assert "'~'" in msg and f"python sample.py {tiny_stories_run} --list-vocab" in msg and "\n" not in msg

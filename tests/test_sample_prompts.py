"""Guards sample.py's ways in: `--list-vocab` prints every token with its id; `--prompt-file -`
reads standard input; `--interactive` loads the model once and answers each input line, streaming,
until EOF (through the real CLI too), a prompt outside the vocabulary costing one stderr line and not
the session, and at a terminal a Ctrl-C stopping the answer, not the session; a refused prompt names the closest vocabulary entries and points at --list-vocab.
Refused before any output: --threads over config.MAX_THREADS, an empty path flag, a prompt file or
standard input over MAX_PROMPT_BYTES (read no further), standard input that is not UTF-8 (like a
file); a pipe (`<(...)`) or a device is a prompt file like any other.
At a terminal, the control characters a model writes (ESC, '\\r', BEL, C1, bidi overrides) are shown
as escapes, in every mode and through the real CLI (a pseudo-terminal); a file or a pipe gets the
exact bytes, and a character split across byte-level tokens still comes out whole."""
from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

import sample
from conftest import ROOT
from tinygpt.checkpoint import load_model
from tinygpt.errors import UserError

GREEDY = ["--temperature", "0", "--max-new-tokens", "12", "--device", "cpu"]


def run_sample(args: list, stdin: str | None = None, monkeypatch=None) -> tuple[list[str], str]:
    """sample.main in-process -> (its returned texts, what it printed)."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
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


def test_list_vocab_shows_a_lone_combining_mark_on_a_dotted_circle():
    """A token that is a combining mark alone (U+0301 of a decomposed é) printed bare: it sat on the
    column's padding, and the line read `    18   ́` with the accent over a space."""
    import sample
    from tinygpt.tokenizer import CharTokenizer
    tokenizer = CharTokenizer.from_text("cafe\u0301 na\u0308ive")
    tokens = sample.list_vocab(tokenizer, io.StringIO())
    assert tokens[tokenizer.encode("\u0301")[0]] == "\u25cc\u0301"
    assert tokens[tokenizer.encode("\u0308")[0]] == "◌\u0308"
    assert tokens[tokenizer.encode("c")[0]] == "c"  # (the others as they are)


def test_list_vocab_tells_a_space_from_a_space_sign_of_the_text():
    """A '␣' (U+2423) of the text was listed as '␣', as a space is: two tokens that read alike."""
    import sample
    from tinygpt.tokenizer import CharTokenizer
    tokenizer = CharTokenizer.from_text("ab \u2423")
    tokens = sample.list_vocab(tokenizer, io.StringIO())
    assert tokens[tokenizer.encode(" ")[0]] == "␣" and tokens[tokenizer.encode("\u2423")[0]] == "\\u2423"
    assert len(set(tokens)) == tokenizer.vocab_size
    # the header said "␣ = a space, \\n = a newline" whatever the tokens: it names the escapes they hold
    out = io.StringIO()
    sample.list_vocab(CharTokenizer.from_text("ab \u2423\t"), out)
    header = out.getvalue().splitlines()[0]
    assert header.endswith("; '␣' = space; '\\t' = tab; '\\uNNNN' = the character of that code point (an "
                           "invisible one, or a ␣ of the text)") and "newline" not in header


def test_list_vocab_with_other_work_asked_for_is_refused(tiny_stories_run, tmp_path):
    """`--list-vocab --attention-html P` printed the vocabulary and exited 0 with no page written."""
    refused([tiny_stories_run, "--list-vocab", "--attention-html", tmp_path / "p.html", "--prompt", "Mia"],
            r"^--list-vocab prints the vocabulary and nothing else: drop --prompt and --attention-html, or --list-vocab$")
    assert list(tmp_path.iterdir()) == []
    run_sample([tiny_stories_run, "--list-vocab", "--temperature", "0"])  # a setting of sampling asks for no work


def test_prompt_file_dash_reads_standard_input(tiny_stories_run, monkeypatch):
    from_stdin, printed = run_sample([tiny_stories_run, "--prompt-file", "-", *GREEDY], "Mia had", monkeypatch)
    from_flag, _ = run_sample([tiny_stories_run, "--prompt", "Mia had", *GREEDY])
    assert from_stdin == from_flag and printed == "Mia had" + from_flag[0] + "\n"


def test_an_empty_prompt_file_is_sampled_from_with_a_note(tiny_stories_run, tmp_path, monkeypatch, capsys):
    """An empty --prompt-file (or standard input with nothing in it) sampled with no prompt, exit 0,
    without a word: a file that was meant to hold the prompt."""
    (tmp_path / "empty.txt").write_bytes(b"")
    unprompted, _ = run_sample([tiny_stories_run, "--prompt", "", *GREEDY])
    assert capsys.readouterr().err == ""
    monkeypatch.chdir(tmp_path)  # (a short name: a long one is elided in the note)
    for source, stdin in (["empty.txt", None], ["-", ""]):
        texts, _ = run_sample([tiny_stories_run, "--prompt-file", source, *GREEDY], stdin, monkeypatch)
        named = "- (standard input)" if source == "-" else "'empty.txt'"
        assert texts == unprompted
        note = f"note: --prompt-file {named} is empty: sampling with no prompt, as --prompt '' does\n"
        assert capsys.readouterr().err == note


def test_interactive_answers_each_line_with_one_model(tiny_stories_run, monkeypatch, capsys):
    loads = []
    monkeypatch.setattr(sample, "load_model", lambda *a, **k: loads.append(a) or load_model(*a, **k))
    prompts = ["Mia had", "The dog ~", "", "Then she"]  # "~" is no character of the stories
    out = io.StringIO()
    stdin = io.BytesIO(("\n".join(prompts) + "\n").encode())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stdin, encoding="utf-8"))
    with pytest.raises(UserError, match="^1 of the 4 lines of standard input was refused"):  # (piped: exit 2)
        sample.main([str(tiny_stories_run), "--interactive", *GREEDY], out=out)
    assert len(loads) == 1  # loaded once for every prompt
    expected = [run_sample([tiny_stories_run, "--prompt", p, *GREEDY])[0][0] for p in prompts if "~" not in p]
    # greedy: each answer is what a separate sample.py call gives
    assert out.getvalue() == "".join(p + t + "\n" for p, t in zip([p for p in prompts if "~" not in p], expected))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "'~'" in err[0] and "--list-vocab" in err[0]


def test_interactive_parts_each_lines_samples_from_the_next_lines(tiny_stories_run, monkeypatch):
    """With --num-samples 2, a rule parted a line's two samples, and nothing parted its last from the next line's
    first: piped, the answers could not be told apart."""
    prompts = ["Mia had", "Then she"]
    texts, printed = run_sample([tiny_stories_run, "--interactive", "--num-samples", "2", *GREEDY],
                                "\n".join(prompts) + "\n", monkeypatch)
    a, b = (p + t for p, t in zip(prompts, texts[::2]))
    assert texts[0] == texts[1] and printed == (f"{a}\n\n{sample.SAMPLES_RULE}\n{a}\n\n{sample.ANSWERS_RULE}\n"
                                                f"{b}\n\n{sample.SAMPLES_RULE}\n{b}\n")
    _, printed = run_sample([tiny_stories_run, "--interactive", *GREEDY], "\n".join(prompts) + "\n", monkeypatch)
    assert sample.ANSWERS_RULE not in printed  # (one sample a line: each answer is its line, as before)
    # a line the vocabulary refuses between them prints no answer, and no rule of its own: it printed a rule before
    # encoding the line, so an empty answer stood between two rules
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Mia had\nThe dog ~\nThen she\n"), encoding="utf-8"))
    with pytest.raises(UserError, match="^1 of the 3 lines of standard input was refused"):
        sample.main([str(tiny_stories_run), "--interactive", "--num-samples", "2", *GREEDY], out=out)
    assert out.getvalue() == (f"{a}\n\n{sample.SAMPLES_RULE}\n{a}\n\n{sample.ANSWERS_RULE}\n"
                              f"{b}\n\n{sample.SAMPLES_RULE}\n{b}\n")


def test_interactive_sampled_answers_are_the_prompts_own(tiny_stories_run, monkeypatch):
    """Sampling, each answer starts from --seed: the answer to a line is what `--prompt LINE` prints
    (it was drawn where the earlier answers left the random stream: not reproducible alone, and the
    same line typed twice answered differently)."""
    sampled = ["--temperature", "1", "--seed", "7", "--max-new-tokens", "20", "--device", "cpu"]
    prompts = ["Mia had", "Mia had", "Then she"]
    texts, _ = run_sample([tiny_stories_run, "--interactive", *sampled], "\n".join(prompts) + "\n", monkeypatch)
    alone = [run_sample([tiny_stories_run, "--prompt", p, *sampled])[0][0] for p in prompts]
    assert texts == alone and texts[0] == texts[1]


def test_interactive_refuses_an_overlong_or_non_utf8_line_and_goes_on(tiny_stories_run, monkeypatch, capsys):
    # each line was read whole (a 1 GB line, 1 GB) and bad bytes passed on as surrogates
    monkeypatch.setattr(sample, "MAX_PROMPT_BYTES", 64)
    data = b"Mia had\n" + b"a" * 500 + b"\n" + b"\xff\xfe\n" + b"Then she\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    out = io.StringIO()
    # ... and then, piped, it ended with exit 0, so a script feeding it prompts never saw a refusal
    with pytest.raises(UserError, match=r"^2 of the 4 lines of standard input were refused \(the errors above\); "
                                        r"the others were answered$"):
        sample.main([str(tiny_stories_run), "--interactive", *GREEDY], out=out)
    answers = out.getvalue()
    assert answers.startswith("Mia had") and "Then she" in answers  # the first and the last line answered
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "more than the 64 bytes" in err[0] and "not UTF-8 text (byte 0 is 0xff)" in err[1]
    # each names its line (nothing said which of the lines it was)
    assert err[0].startswith("error: line 2 of standard input has more than") and \
        err[1].startswith("error: line 3 of standard input is not UTF-8 text")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("Mia\nxyz€\n".encode()), encoding="utf-8"))
    with pytest.raises(UserError, match=r"^1 of the 2 lines of standard input was refused"):
        sample.main([str(tiny_stories_run), "--interactive", *GREEDY], out=io.StringIO())
    assert capsys.readouterr().err.startswith("error: line 2 of standard input: text has 1 character")


def test_an_empty_prompt_beside_another_source_is_refused(tiny_stories_run, tmp_path):
    """`--prompt "" --prompt-file F` (or `--interactive`) was let through, argparse taking "" for the
    default, and the empty prompt was dropped without a word; an empty --prompt alone is a newline."""
    (tmp_path / "f.txt").write_text("Mia had")
    for other in (["--prompt-file", tmp_path / "f.txt"], ["--interactive"]):
        refused([tiny_stories_run, "--prompt", "", *other], f"^argument {other[0]}: not allowed with argument --prompt")
    assert run_sample([tiny_stories_run, "--prompt", "", *GREEDY]) == run_sample([tiny_stories_run, *GREEDY])


def test_interactive_reads_a_windows_line_of_exactly_the_limit(tiny_stories_run, monkeypatch, capsys):
    """A piped CRLF line of MAX_PROMPT_BYTES was read up to its '\\r' alone and refused as one byte too long."""
    monkeypatch.setattr(sample, "MAX_PROMPT_BYTES", 64)
    data = b"a" * 64 + b"\r\n" + b"a" * 65 + b"\r\n" + b"a" * 66 + b"\n" + b"Mia\r\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    out = io.StringIO()
    with pytest.raises(UserError, match="^2 of the 4 lines of standard input were refused"):
        sample.main([str(tiny_stories_run), "--interactive", *GREEDY], out=out)
    assert out.getvalue().startswith("a" * 64) and "\nMia" in out.getvalue()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("more than the 64 bytes" in line for line in err), err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a" * 65 + b"\n"), encoding="utf-8"))
    with pytest.raises(UserError, match=r"^the only line of standard input was refused \(the errors above\)$"):
        sample.main([str(tiny_stories_run), "--interactive", *GREEDY], out=io.StringIO())


def test_interactive_reads_windows_lines_as_lines(tiny_stories_run, monkeypatch):
    """Piped lines ending in CRLF: the '\r' stayed in each prompt (a char model refused every line)."""
    windows, _ = run_sample([tiny_stories_run, "--interactive", *GREEDY], "Mia had\r\nThen she\r\n", monkeypatch)
    assert windows == run_sample([tiny_stories_run, "--interactive", *GREEDY], "Mia had\nThen she\n", monkeypatch)[0]


def test_an_html_page_that_is_a_device_is_refused_before_generating(tiny_stories_run):
    refused([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-html", "/dev/null"],
            r"--attention-html='/dev/null': cannot write /dev/null: it is a device, not a regular file")


def test_heatmaps_of_an_earlier_call_do_not_stay_beside_new_ones(tiny_stories_run, tmp_path):
    """--attention-png DIR reused: the earlier call's per-sample heatmaps (or a deeper model's layers)
    passed for this call's; they are removed, and nothing else in DIR is."""
    pytest.importorskip("matplotlib")
    folder = tmp_path / "heatmaps"
    run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", folder, "--attention-of", "all",
                "--num-samples", "2"])
    n_layer = load_model(tiny_stories_run)[1].model.n_layer
    # every sample's set is kept: the second's replaced the first's, each still said `saved`
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"attention_sample{s}_layer{i}.png" for s in (1, 2)
                                                              for i in range(n_layer))
    (folder / "notes.txt").write_text("mine")
    for of in ("prompt", "all"):  # one sample: no sample number in the names
        run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", folder, "--attention-of", of])
        assert sorted(p.name for p in folder.iterdir()) == sorted([f"attention_layer{i}.png" for i in range(n_layer)]
                                                                  + ["notes.txt"])


def test_no_prompt_starts_from_nothing_echoed(tiny_stories_run):
    """No --prompt is --prompt '': the printed text is the sample alone, and its line end."""
    assert run_sample([tiny_stories_run, "--max-new-tokens", "0"])[1] == "\n"


def test_two_samplers_do_not_draw_heatmaps_into_one_folder_at_once(tiny_stories_run, tmp_path):
    """Two sample.py --attention-png into one folder, the second started while the first generated:
    each removed the heatmaps it had not drawn, the other's, and both said `saved`."""
    pytest.importorskip("matplotlib")
    from tinygpt.runs import run_lock
    folder = tmp_path / "heatmaps"
    with run_lock(folder, "--attention-png", "sample.py drawing heatmaps", sample.HEATMAP_LOCK):  # the first
        refused([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", folder],
                rf"^--attention-png='{re.escape(str(folder))}' is in use by another sample.py drawing heatmaps "
                rf"\(process {os.getpid()}\); wait for it to end")
        assert [p.name for p in folder.iterdir()] == [sample.HEATMAP_LOCK]
    run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", folder])
    assert sample.HEATMAP_LOCK not in [p.name for p in folder.iterdir()]  # (held while drawing only)


def test_a_stopped_generation_leaves_no_earlier_heatmaps_beside_new_ones(tiny_stories_run, tmp_path, monkeypatch):
    """Ctrl-C while generating after the prompt's heatmaps were saved: the earlier call's heatmaps
    (a deeper model's layer 9, another prompt's) stayed beside the new ones, removed only at the end."""
    pytest.importorskip("matplotlib")
    folder = tmp_path / "heatmaps"
    run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", folder])
    (folder / "attention_layer9.png").write_bytes((folder / "attention_layer0.png").read_bytes())  # marked
    (folder / "attention_sample2_layer0.png").write_bytes((folder / "attention_layer0.png").read_bytes())

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
        yield
    monkeypatch.setattr(sample, "generate_steps", stopped)
    with pytest.raises(KeyboardInterrupt):
        run_sample([tiny_stories_run, "--prompt", "Then she", *GREEDY, "--attention-png", folder])
    n_layer = load_model(tiny_stories_run)[1].model.n_layer
    assert sorted(p.name for p in folder.iterdir()) == [f"attention_layer{i}.png" for i in range(n_layer)]


def test_a_users_file_is_neither_overwritten_nor_removed_by_the_attention_files(tiny_stories_run, tmp_path):
    """--attention-html replaced any file without a word (the checkpoint sampled from, a user's
    notes.html), and --attention-png removed a user's files named like heatmaps (attention_layer9.png):
    tinygpt's pages and heatmaps carry a mark, and only they are replaced or removed."""
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    for f in tiny_stories_run.iterdir():
        if f.is_file():
            (run / f.name).write_bytes(f.read_bytes())
    weights = (run / "best.pt").read_bytes()
    refused([run, "--prompt", "Mia", *GREEDY, "--attention-html", run / "best.pt"],
            r"--attention-html: it would overwrite .*best.pt', which is not an attention explorer page that tinygpt wrote")
    assert (run / "best.pt").read_bytes() == weights
    notes = tmp_path / "notes.html"
    notes.write_text("mine")
    refused([run, "--prompt", "Mia", *GREEDY, "--attention-html", notes, "--num-samples", "1"], r"notes.html', which is not")
    assert notes.read_text() == "mine"
    page = tmp_path / "page.html"
    run_sample([run, "--prompt", "Mia", *GREEDY, "--attention-html", page])
    first = page.read_text()
    run_sample([run, "--prompt", "Then she", *GREEDY, "--attention-html", page])  # its own page: replaced
    assert page.read_text() != first

    folder = tmp_path / "pics"
    folder.mkdir()
    (folder / "attention_layer9.png").write_text("mine")  # a name of a deeper model's heatmap
    run_sample([run, "--prompt", "Mia", *GREEDY, "--attention-png", folder])
    assert (folder / "attention_layer9.png").read_text() == "mine"  # left where it was
    (folder / "attention_layer0.png").write_text("mine too")  # a name this call writes
    refused([run, "--prompt", "Mia", *GREEDY, "--attention-png", folder],
            r"--attention-png: it would overwrite .*attention_layer0.png', which is not an attention heatmap")
    assert (folder / "attention_layer0.png").read_text() == "mine too"
    (folder / "attention_layer0.png").unlink()  # the second sample's names are checked as the first's are
    (folder / "attention_sample2_layer0.png").write_text("mine as well")
    refused([run, "--prompt", "Mia", "--max-new-tokens", "3", "--num-samples", "2", "--attention-of", "all",
             "--attention-png", folder], r"would overwrite .*attention_sample2_layer0.png', which is not")
    assert (folder / "attention_sample2_layer0.png").read_text() == "mine as well"


def test_attention_files_that_are_pipes_dead_links_or_named_twice_are_refused(tiny_stories_run, tmp_path):
    """A pipe named like a heatmap or a numbered page: sample.py waited for a writer for good (before
    any output, or after the text, at a stale heatmap); --attention-html through a link to nothing
    made the link's target folders (/nonexistent/) and wrote there; --attention-html naming one of
    --attention-png's heatmaps replaced it, both 'saved'."""
    pytest.importorskip("matplotlib")
    folder = tmp_path / "pics"
    folder.mkdir()
    os.mkfifo(folder / "attention_layer0.png")
    refused([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", folder],
            r"--attention-png: it would write .*attention_layer0.png', which is a pipe, not a regular file")
    os.unlink(folder / "attention_layer0.png")
    os.mkfifo(folder / "attention_layer9.png")  # a deeper model's, stale: not opened, not removed
    run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", folder])
    assert (folder / "attention_layer0.png").is_file() and (folder / "attention_layer9.png").is_fifo()
    os.mkfifo(tmp_path / "p_sample2.html")
    refused([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--num-samples", "2", "--attention-html",
             tmp_path / "p.html"], r"--attention-html: it would write .*p_sample2.html', which is a pipe")
    (tmp_path / "d.html").symlink_to(tmp_path / "nowhere" / "x.html")
    refused([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-html", tmp_path / "d.html"],
            r"d.html', which is a link \(.*d.html -> .*nowhere/x.html\) that leads to no file or folder")
    assert not (tmp_path / "nowhere").exists()
    refused([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", folder, "--attention-html",
             folder / "attention_layer0.png"], r"--attention-png and --attention-html both name .*attention_layer0.png")
    assert (folder / "attention_layer0.png").read_bytes().startswith(b"\x89PNG")


def end_child(pid: int, fd: int) -> None:
    """After a pseudo-terminal's child: kill it if it still runs, reap it, close its terminal."""
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os.close(fd)


def test_interactive_through_the_real_cli(tiny_stories_run, tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "sample.py"), str(tiny_stories_run), "--interactive", *GREEDY],
                            input="Mia had\nThen she\n", capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) >= 2 and lines[0].startswith("Mia had") and "Then she" in result.stdout
    assert result.stderr == ""  # not a terminal: no greeting, no "> " prompts


def test_more_threads_than_cores_is_warned(tiny_stories_run, capsys):
    """--threads 1024 on 2 cores sampled 2.3x slower without a word (train.py warned)."""
    from tinygpt.runtime import usable_cores
    cores = usable_cores()
    run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--threads", str(cores + 1)])
    err = capsys.readouterr().err
    assert f"warning: --threads={cores + 1} is more than the {cores} core" in err and "sampling is much slower" in err
    run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--threads", str(cores)])
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("flags, named", [
    (["--attention-html", "PAGE"],
     "--attention-html with --interactive: every answer would overwrite the last one's page"),
    (["--attention-png", "DIR"],
     "--attention-png with --interactive: every answer would overwrite the last one's heatmaps"),
    (["--attention-html", "PAGE", "--attention-png", "DIR"], "--attention-html and --attention-png with --interactive"),
])
def test_interactive_refuses_the_files_each_answer_would_overwrite(tiny_stories_run, tmp_path, monkeypatch,
                                                                   flags, named):
    """Two piped prompts with --attention-html: `saved page.html` twice, the second answer's page in
    place of the first's, titled "sample 1". Refused before any answer."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Mia had\nTom had\n"), encoding="utf-8"))
    flags = [str(tmp_path / "page.html") if f == "PAGE" else str(tmp_path / "maps") if f == "DIR" else f for f in flags]
    answers = io.StringIO()
    with pytest.raises(UserError, match=f"^{re.escape(named)}"):
        sample.main([str(tiny_stories_run), "--interactive", *GREEDY, *flags], out=answers)
    assert answers.getvalue() == "" and not (tmp_path / "page.html").exists()


def test_interactive_stops_at_a_piped_line_without_end(tiny_stories_run, monkeypatch, capsys):
    """`sample.py RUN --interactive < /dev/zero` spun for good, without a word: an overlong line was
    refused only at its newline. Past MAX_SKIPPED bytes, reading stops, with one line for the one
    cause (the line's own refusal came first, two errors for one line)."""
    monkeypatch.setattr(sample, "MAX_PROMPT_BYTES", 64)
    monkeypatch.setattr(sample, "MAX_SKIPPED", 1000)
    stdin = io.TextIOWrapper(io.BytesIO(b"Mia had\n" + bytes(100_000)), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    answers = io.StringIO()
    with pytest.raises(UserError, match=r"^line 2 of standard input runs past 1,000 bytes with no newline: no "
                                        r"prompts; stopped reading it$"):
        sample.main([str(tiny_stories_run), "--interactive", *GREEDY], out=answers)
    assert stdin.buffer.tell() < 2000  # (not read to its end)
    assert "Mia had" in answers.getvalue()  # the line before was answered
    assert "error" not in capsys.readouterr().err
    # a long line that does end is refused alone, and the next one answered
    stdin = io.TextIOWrapper(io.BytesIO(b"x" * 500 + b"\nMia had\n"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    answers = io.StringIO()
    with pytest.raises(UserError, match=r"^1 of the 2 lines of standard input was refused"):
        sample.main([str(tiny_stories_run), "--interactive", *GREEDY], out=answers)
    assert "Mia had" in answers.getvalue()
    assert "error: line 1 of standard input has more than the 64 bytes" in capsys.readouterr().err


@pytest.mark.slow
def test_at_a_terminal_with_answers_into_a_file_the_prompts_stay_on_the_terminal(tiny_stories_run, tmp_path):
    """`sample.py RUN --interactive > answers.txt` at a terminal: input() wrote its "> " prompts into
    the file, between the answers."""
    pty = pytest.importorskip("pty")
    import select
    answers = tmp_path / "answers.txt"
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdin and stderr the terminal, stdout the file
        os.environ["OMP_NUM_THREADS"] = "1"
        out = os.open(answers, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.execv(sys.executable, [sys.executable, str(ROOT / "sample.py"), str(tiny_stories_run), "--interactive",
                                  *GREEDY])
    seen, deadline = b"", time.time() + 120
    try:
        for typed in (b"Mia had\n", b"\x04"):  # a prompt, then Ctrl-D
            while seen.count(b"> ") < (1 if typed != b"\x04" else 2):
                assert time.time() < deadline, seen[-500:]
                if select.select([fd], [], [], 0.5)[0]:
                    seen += os.read(fd, 65536)
            os.write(fd, typed)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, seen[-500:]
    finally:
        end_child(pid, fd)
    text = answers.read_text()
    assert text.startswith("Mia had") and "> " not in text, text


@pytest.mark.slow
def test_at_a_terminal_ctrl_c_stops_the_answer_not_the_session(tiny_stories_run):
    """As in a shell: Ctrl-C during an answer stops it and the next prompt comes; at the prompt it
    drops the line typed; Ctrl-D quits (exit 0). The model stays loaded throughout."""
    pty = pytest.importorskip("pty")
    import select
    pid, fd = pty.fork()
    if pid == 0:  # the child: sample.py at a terminal, answering at length
        os.environ["OMP_NUM_THREADS"] = "1"
        os.execv(sys.executable, [sys.executable, str(ROOT / "sample.py"), str(tiny_stories_run), "--interactive",
                                  "--temperature", "0", "--max-new-tokens", "100000", "--device", "cpu"])
    seen = b""

    def read_until(marker: bytes, after: int = 0, wait_s: float = 120) -> bool:
        """Read the terminal until `marker` shows up past offset `after` of what it printed (True),
        or, given a shorter wait_s, until that passed (False)."""
        nonlocal seen
        deadline = time.time() + wait_s
        while seen.find(marker, after) < 0:
            if wait_s < 120 and time.time() > deadline:
                return False
            assert time.time() < deadline, seen[-500:]
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:  # EIO: the terminal's other end closed, sample.py ended
                    pytest.fail(f"sample.py ended before {marker!r}: {seen[-500:]!r}")
        return True

    try:
        read_until(b"> ")
        os.write(fd, b"Mia had\n")
        read_until(b"Mia had", len(seen))  # the echo, then the answer streams...
        start = len(seen)
        read_until(b"", start + 200)  # (b"" is found once that much was printed)
        os.write(fd, b"\x03")  # ...until Ctrl-C
        read_until(b"(stopped)\r\n> ", start)
        start = len(seen)
        os.write(fd, b"half a prompt")
        read_until(b"half a prompt", start)  # echoed by readline: it is waiting for keys
        start = seen.index(b"half a prompt", start)
        os.write(fd, b"\x03")  # Ctrl-C at the prompt: a fresh prompt, the line typed dropped
        if not read_until(b"\r\n> ", start, wait_s=10):
            # CPython's readline handles a signal only while it waits for a key: one that lands just
            # before (this process descheduled, under load) stays pending, whatever key comes next,
            # until the line ends. A second Ctrl-C, as a user would press, ends it.
            os.write(fd, b"\x03")
            read_until(b"\r\n> ", start)
        os.write(fd, b"\x04")  # Ctrl-D
        _, status = os.waitpid(pid, 0)
    finally:
        end_child(pid, fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen[-500:]
    assert b"interrupted" not in seen and b"Traceback" not in seen


def at_terminal(argv: list, stdout_file: Path | None = None) -> tuple[int, int, Callable]:
    """sample.py run with a pseudo-terminal as stdin and stderr (and stdout, or `stdout_file`): its pid, the
    terminal's fd, and read_until(marker, after=0) which reads the terminal until `marker` shows past offset
    `after` of what it printed and returns all printed so far."""
    pty = pytest.importorskip("pty")
    import select
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["OMP_NUM_THREADS"] = "1"
        if stdout_file is not None:
            os.dup2(os.open(stdout_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.execv(sys.executable, [sys.executable, str(ROOT / "sample.py"), *map(str, argv)])
    seen = [b""]

    def read_until(marker: bytes, after: int = 0) -> bytes:
        deadline = time.time() + 120
        while seen[0].find(marker, after) < 0:
            assert time.time() < deadline, seen[0][-500:]
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    seen[0] += os.read(fd, 65536)
                except OSError:  # EIO: sample.py ended
                    pytest.fail(f"sample.py ended before {marker!r}: {seen[0][-500:]!r}")
        return seen[0]
    return pid, fd, read_until


@pytest.mark.slow
def test_at_a_terminal_the_line_typed_is_edited_not_sent_with_its_keys(tiny_stories_run, tmp_path):
    """docs/usage.md promised line editing, but nothing imported readline: the terminal's own line mode
    sent arrow keys as text (`To be\\x1b[D\\x1b[DX` reached the model). With stdout a file (no editing
    there), a line cut at the terminal's 4,095 bytes was answered cut: now refused, naming --prompt-file."""
    pid, fd, read_until = at_terminal([tiny_stories_run, "--interactive", *GREEDY])
    try:
        start = len(read_until(b"> "))
        os.write(fd, b"Mia hd\x7fad\x1b[D\x1b[Do\n")  # "Mia had", Backspace, then "o" two to the left
        seen = read_until(b"\n> ", start)  # the answer, then the next prompt
        os.write(fd, b"\x04")
        _, status = os.waitpid(pid, 0)
    finally:
        end_child(pid, fd)
    assert os.waitstatus_to_exitcode(status) == 0 and b"Mia hoad" in seen and b"\\x1b" not in seen, seen[-500:]
    answers = tmp_path / "answers.txt"
    pid, fd, read_until = at_terminal([tiny_stories_run, "--interactive", *GREEDY], answers)
    try:
        read_until(b"> ")
        for _ in range(5):  # 5,000 bytes and Enter: the terminal keeps 4,095
            os.write(fd, b"a" * 1000)
            time.sleep(0.05)
        os.write(fd, b"\n")
        seen = read_until(b"--prompt-file")
        os.write(fd, b"\x04")
        _, status = os.waitpid(pid, 0)
    finally:
        end_child(pid, fd)
    assert b"error: the line typed is 4,095 bytes, the most a terminal passes without line editing" in seen
    assert answers.read_text() == ""  # not answered cut


@pytest.mark.slow
def test_ctrl_c_during_a_streamed_answer_says_interrupted_on_a_line_of_its_own(tiny_stories_run):
    """`interrupted` came after the text on its line (`...Mia had a^Cinterrupted`)."""
    pid, fd, read_until = at_terminal([tiny_stories_run, "--prompt", "Mia had", "--temperature", "0",
                                       "--max-new-tokens", "100000", "--device", "cpu"])
    try:
        start = len(read_until(b"Mia had"))
        read_until(b"", start + 200)
        os.write(fd, b"\x03")
        seen = read_until(b"interrupted\r\n")
        _, status = os.waitpid(pid, 0)
    finally:
        end_child(pid, fd)
    assert os.waitstatus_to_exitcode(status) == 130
    assert re.search(rb"\n\r?\n?interrupted\r\n$", seen) and not re.search(rb"[^\n]interrupted", seen), seen[-200:]


def test_a_refused_prompt_points_at_the_vocabulary(tiny_stories_run):
    with pytest.raises(UserError) as err:
        run_sample([tiny_stories_run, "--prompt", "Mia~", *GREEDY])
    msg = str(err.value)
    assert "'~'" in msg and f"python sample.py {tiny_stories_run} --list-vocab" in msg and "\n" not in msg


# ---- refusals: threads, empty paths, prompt files ----


def refused(args: list, match: str, stdin=None, monkeypatch=None) -> str:
    """sample.main refuses `args` with a UserError matching `match`, before printing anything."""
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", stdin)
    out = io.StringIO()
    with pytest.raises(UserError, match=match) as err:
        sample.main([str(a) for a in args], out=out)
    assert out.getvalue() == "" and "\n" not in str(err.value)
    return str(err.value)


def test_threads_are_capped(tiny_stories_run):
    """libgomp fails (16384) or segfaults (65536) asked for too many threads: refused, naming the value."""
    from tinygpt.config import MAX_THREADS
    refused([tiny_stories_run, "--list-vocab", "--threads", MAX_THREADS + 1],
            f"--threads={MAX_THREADS + 1} must be in 0..{MAX_THREADS}")
    refused([tiny_stories_run, "--list-vocab", "--threads", 65536], "--threads=65536")
    run_sample([tiny_stories_run, "--list-vocab", "--threads", MAX_THREADS])  # the cap itself is allowed


@pytest.mark.parametrize("flag", ["--prompt-file", "--attention-png", "--attention-html"])
def test_an_empty_path_is_refused(tiny_stories_run, flag, tmp_path, monkeypatch):
    """Path("") is ".": the PNGs would land in the current folder."""
    monkeypatch.chdir(tmp_path)
    refused([tiny_stories_run, "--list-vocab", flag, ""], f"{flag}: an empty path")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stderr", ["its own", "the same pipe"])
def test_a_closed_stdout_does_not_stop_the_pages_asked_for(tiny_stories_run, tmp_path, stderr):
    """`sample.py ... --attention-html p.html --num-samples 3 | head -1` wrote the first page only; with
    `|& head -1` (stderr on the same pipe) the warning that stdout was lost hit the closed pipe, and
    the command ended there, exit 0, without a page."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "sample.py"), str(tiny_stories_run), "--attention-html",
                             str(tmp_path / "p.html"), "--num-samples", "3", "--max-new-tokens", "30", *GREEDY],
                            stdout=subprocess.PIPE, cwd=tmp_path,
                            stderr=subprocess.PIPE if stderr == "its own" else subprocess.STDOUT,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    proc.stdout.read(1)
    proc.stdout.close()  # the reader leaves
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.wait(timeout=300) == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"p_sample{i}.html" for i in (1, 2, 3)]


def test_an_html_path_ending_in_a_slash_is_refused(tiny_stories_run, tmp_path):
    # Path drops the slash: a page was written as a file named like the folder meant
    refused([tiny_stories_run, "--list-vocab", "--attention-html", f"{tmp_path}/newhtml/"], "ends in '/'")
    assert list(tmp_path.iterdir()) == []


def test_html_paths_that_would_fail_after_the_generation_are_refused_first(tiny_stories_run, tmp_path, monkeypatch):
    """`newhtml/.` wrote a file `newhtml`; `gone/..` generated, then `Device or resource busy`; a
    name of 250 bytes (legal) generated, then `File name too long` for its temp file; one of 300
    said `File name too long`, naming no flag. And `--attention-html=~/a.html` (the shell leaves that
    ~) made a folder named `~`, then printed `saved ~/a.html`."""
    for path, match in ((f"{tmp_path}/newhtml/.", "newhtml/. ends in '.'"),
                        (f"{tmp_path}/gone/..", "gone/.. ends in '..'")):
        refused([tiny_stories_run, "--attention-html", path], f"{re.escape(match)}, which names a folder")
    refused([tiny_stories_run, "--attention-html", str(tmp_path / ("c" * 245 + ".html"))],
            r"^--attention-html=.*: cannot write .*: its name is 250 bytes, and the temp file it is written through")
    refused([tiny_stories_run, "--attention-html", str(tmp_path / ("c" * 300))], r"^--attention-html=.*its name is 300")
    assert list(tmp_path.iterdir()) == []
    from tinygpt.errors import path_arg
    assert path_arg("~/a.html") == Path.home() / "a.html" and path_arg("a~/b") == Path("a~/b")


def test_page_paths_found_wrong_after_the_generation_are_refused_first(tiny_stories_run, tmp_path):
    """`--attention-html same --attention-png same` made the heatmaps' folder, generated, then failed on
    `same` (a folder); with --num-samples 2, a name that fits but whose `_sample2` does not failed after
    sample 1; `--attention-html -` wrote a file named `-`."""
    same = str(tmp_path / "same")
    refused([tiny_stories_run, *GREEDY, "--attention-html", same, "--attention-png", same],
            r"^--attention-png='\S+same' and --attention-html='\S+same': the page's file would be the heatmaps' folder")
    refused([tiny_stories_run, *GREEDY, "--attention-html", same, "--attention-png", f"{same}/maps"],
            r"^--attention-png=\S+ and --attention-html=\S+: the page's file would be the heatmaps' folder, or hold it")
    long_name = str(tmp_path / ("b" * 225 + ".html"))
    refused([tiny_stories_run, *GREEDY, "--num-samples", "2", "--attention-html", long_name],
            r"^--attention-html=.*: cannot write .*b_sample2.html': its name is 238 bytes")
    refused([tiny_stories_run, *GREEDY, "--attention-html", "-"], r"^--attention-html='-': the page is a file")
    assert list(tmp_path.iterdir()) == []


def test_heatmaps_into_a_dash_are_refused_not_a_folder_named_dash(tiny_stories_run, tmp_path, monkeypatch):
    """`--attention-png -` wrote ./-/attention_layer0.png, exit 0 (`--attention-html -` was refused); a folder
    the user named '-' is taken."""
    monkeypatch.chdir(tmp_path)
    refused([tiny_stories_run, *GREEDY, "--attention-png", "-"], r"^--attention-png=-: the heatmaps are PNG files")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "-").mkdir()
    run_sample([tiny_stories_run, *GREEDY, "--prompt", "Mia", "--attention-png", "-"])
    assert any(p.suffix == ".png" for p in (tmp_path / "-").iterdir())


def test_a_set_of_pages_is_one_calls_and_one_call_writes_it_at_a_time(tiny_stories_run, tmp_path):
    """Three samples' pages, then one sample's: p_sample1..3.html stayed beside the new p.html, passing for
    this call's. Two sample.py writing one set at once mixed their pages (both said `saved`)."""
    from tinygpt.runs import run_lock
    page = tmp_path / "p.html"
    run_sample([tiny_stories_run, *GREEDY, "--num-samples", "3", "--attention-html", page])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p_sample1.html", "p_sample2.html", "p_sample3.html"]
    (tmp_path / "p_sample4.html").write_text("my notes")  # (not a page tinygpt wrote: it stays)
    run_sample([tiny_stories_run, *GREEDY, "--num-samples", "2", "--attention-html", page])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p_sample1.html", "p_sample2.html", "p_sample4.html"]
    run_sample([tiny_stories_run, *GREEDY, "--attention-html", page])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.html", "p_sample4.html"]
    with run_lock(tmp_path, "folder of --attention-html", "sample.py writing 'p.html' there", ".p.html.lock"):
        refused([tiny_stories_run, *GREEDY, "--attention-html", page],
                r"^folder of --attention-html='\S+' is in use by another sample.py writing the pages of 'p.html' there")
        run_sample([tiny_stories_run, *GREEDY, "--attention-html", tmp_path / "q.html"])  # another set: written
        # p_sample2.html may be one of that call's pages (it writes it with --num-samples 2): the two would mix
        refused([tiny_stories_run, *GREEDY, "--attention-html", tmp_path / "p_sample2.html"],
                r"^folder of --attention-html='\S+' is in use by another sample.py writing the pages of 'p.html' there")


def test_pages_asked_for_by_name_in_calls_of_their_own_are_no_set_to_clean(tiny_stories_run, tmp_path):
    """story_sample1.html and story_sample2.html, each named in a call of its own, were deleted without a
    word by a later call writing story.html: named like its samples, they passed for an earlier call's."""
    for n in (1, 2):
        run_sample([tiny_stories_run, *GREEDY, "--attention-html", tmp_path / f"story_sample{n}.html"])
    run_sample([tiny_stories_run, *GREEDY, "--attention-html", tmp_path / "story.html"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["story.html", "story_sample1.html", "story_sample2.html"]
    run_sample([tiny_stories_run, *GREEDY, "--num-samples", "3", "--attention-html", tmp_path / "story.html"])
    run_sample([tiny_stories_run, *GREEDY, "--attention-html", tmp_path / "story.html"])  # the samples were its set
    assert sorted(p.name for p in tmp_path.iterdir()) == ["story.html"]


def test_a_prepared_data_folder_is_no_run(tiny_stories_run, tmp_path):
    """A data.prepared_dir folder given as the run was told `train first, e.g. python train.py ...`."""
    prepared = tmp_path / "stories-bpe-0123456789"
    prepared.mkdir()
    for name in ("meta.json", "train.bin", "val.bin", "tokenizer.json"):
        (prepared / name).write_text("x")
    refused([prepared], r"is a folder of prepared data \(data.prepared_dir\), not a run: give the run directory "
                        r"trained on it \(its train.out_dir\)$")


def test_a_prompt_file_over_the_limit_is_refused_by_its_size(tiny_stories_run, tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(sample.MAX_PROMPT_BYTES + 1)  # sparse: no disk used
    msg = refused([tiny_stories_run, "--prompt-file", big, *GREEDY], "big.txt")
    assert f"{sample.MAX_PROMPT_BYTES + 1:,} bytes" in msg and f"{sample.MAX_PROMPT_BYTES:,}" in msg


def test_standard_input_is_read_up_to_the_limit_only(tiny_stories_run, monkeypatch):
    stdin = io.TextIOWrapper(io.BytesIO(b"a" * (2 * sample.MAX_PROMPT_BYTES)), encoding="utf-8")
    msg = refused([tiny_stories_run, "--prompt-file", "-", *GREEDY], "standard input", stdin, monkeypatch)
    assert f"more than the {sample.MAX_PROMPT_BYTES:,} bytes" in msg
    assert stdin.buffer.tell() == sample.MAX_PROMPT_BYTES + 1  # never read whole


def test_non_utf8_standard_input_is_refused_like_a_file(tiny_stories_run, tmp_path, monkeypatch):
    """Python's real stdin turns bad bytes into surrogates (errors='surrogateescape'), silently."""
    bad = b"Mia \xff\xfe"
    stdin = io.TextIOWrapper(io.BytesIO(bad), encoding="utf-8", errors="surrogateescape")
    refused([tiny_stories_run, "--prompt-file", "-", *GREEDY], r"standard input\) is not UTF-8 .*byte 4", stdin,
            monkeypatch)
    (tmp_path / "bad.txt").write_bytes(bad)
    refused([tiny_stories_run, "--prompt-file", tmp_path / "bad.txt", *GREEDY], r"bad.txt' is not UTF-8 .*byte 4")


def test_a_utf16_prompt_file_is_named_so_with_the_command_that_converts_it(tiny_stories_run, tmp_path):
    """A prompt saved as Windows' "Unicode": `is not UTF-8 text (byte 0 is 0xff)` (with its byte order
    mark), or read as UTF-8 with a NUL after each letter (without one), where the same file as a
    data.dataset was named UTF-16 with the iconv command that converts it."""
    marked, bare = tmp_path / "marked.txt", tmp_path / "bare.txt"
    marked.write_bytes("Mia had a kite".encode("utf-16"))
    bare.write_bytes("Mia had a red kite and she flew it high. ".encode("utf-16-le") * 2)
    refused([tiny_stories_run, "--prompt-file", marked, *GREEDY],
            r"marked.txt' looks like UTF-16 text, not UTF-8; convert it first, e.g. iconv -f utf-16 -t utf-8 ")
    refused([tiny_stories_run, "--prompt-file", bare, *GREEDY],
            r"bare.txt' looks like UTF-16LE text, not UTF-8; convert it into a new file, e.g. iconv -f utf-16le ")


def test_non_utf8_bytes_in_the_prompt_argument_are_refused_too(tiny_stories_run):
    """`--prompt $'Mia \\xff'`: Python hands the byte on as a surrogate, which the BPE read as U+FFFD,
    silently (the text printed was not the text the model saw); a char model named the surrogate."""
    refused([tiny_stories_run, "--prompt", "Mia \udcff", *GREEDY], r"--prompt is not UTF-8 text \(byte 4 is 0xff\)")
    refused([tiny_stories_run, "--prompt", "Mia \ud800", *GREEDY], r"--prompt is not UTF-8 text")


def test_a_prompt_file_is_read_as_training_text_is(tiny_stories_run, tmp_path):
    """A Windows file (a byte order mark, CRLF line ends) gives the prompt its text gives on Linux."""
    (tmp_path / "windows.txt").write_bytes("\ufeffMia had a red kite.\r\nThen she".encode("utf-8"))
    (tmp_path / "linux.txt").write_bytes(b"Mia had a red kite.\nThen she")
    windows = run_sample([tiny_stories_run, "--prompt-file", tmp_path / "windows.txt", *GREEDY])
    assert windows == run_sample([tiny_stories_run, "--prompt-file", tmp_path / "linux.txt", *GREEDY])
    assert windows[1].startswith("Mia had a red kite.\nThen she")


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd")
def test_a_prompt_file_may_be_a_pipe_or_a_device(tiny_stories_run, tmp_path):
    """`--prompt-file <(echo Mia had)` is /dev/fd/N, a pipe; /dev/null an empty prompt."""
    read_end, write_end = os.pipe()
    os.write(write_end, "Mia had".encode())
    os.close(write_end)
    try:
        from_pipe, _ = run_sample([tiny_stories_run, "--prompt-file", f"/dev/fd/{read_end}", *GREEDY])
    finally:
        os.close(read_end)
    assert from_pipe == run_sample([tiny_stories_run, "--prompt", "Mia had", *GREEDY])[0]
    assert run_sample([tiny_stories_run, "--prompt-file", os.devnull, *GREEDY])[0] == \
        run_sample([tiny_stories_run, *GREEDY])[0]
    refused([tiny_stories_run, "--prompt-file", tmp_path, *GREEDY], "is a directory")
    refused([tiny_stories_run, "--prompt-file", tmp_path / "nope.txt", *GREEDY],
            "--prompt-file not found: .*nope.txt")
    # a link to nothing or into a loop was "not found" (the link is there), a socket "No such device or address"
    (tmp_path / "dangling").symlink_to(tmp_path / "gone.txt")
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    refused([tiny_stories_run, "--prompt-file", tmp_path / "dangling", *GREEDY],
            r"--prompt-file .*dangling' is a link \(.*dangling -> .*gone.txt\) that leads to no file or folder$")
    refused([tiny_stories_run, "--prompt-file", tmp_path / "loop_a", *GREEDY],
            r"--prompt-file .*loop_a' is a link \(.*\) that runs into a loop of links$")
    import socket
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tmp_path / "sock"))
        refused([tiny_stories_run, "--prompt-file", tmp_path / "sock", *GREEDY], r"sock' is a socket, not a file$")


# ---- control characters: shown at a terminal, exact in a file or a pipe ----

# Common characters of the stories, replaced (same ids: the model writes what it did) by what a
# terminal obeys: ESC (which starts the cursor, colour and clear-screen sequences), '\r', BEL, the C1
# CSI, the bidi override RLO, DEL; and a tab, which a terminal shows as it is.
CONTROLLED = {" ": "\x1b", "e": "\r", "a": "\x07", "o": "\x9b", "t": "\u202e", "h": "\x7f", "n": "\t"}
SAMPLED = ["--temperature", "1", "--seed", "1", "--max-new-tokens", "40", "--device", "cpu"]  # (greedy: spaces)
PROMPT = "Mia had".translate(str.maketrans(CONTROLLED))  # ESC, BEL, DEL: the prompt echoed has them


class Terminal(io.StringIO):
    """What sample.py writes to, as a terminal: isatty() is what it asks."""

    def isatty(self) -> bool:
        return True


def with_controls(module) -> None:
    """Make `module`.load_model's char tokenizer spell CONTROLLED's characters as its controls (in
    place: the ids, and so the text the model writes, stay). In-process, monkeypatch first saves
    the original load_model, which it puts back after the test."""
    load = module.load_model

    def load_controlled(*args, **kwargs):
        model, cfg, tokenizer, ckpt = load(*args, **kwargs)
        tokenizer.pieces = [CONTROLLED.get(p, p) for p in tokenizer.pieces]
        tokenizer.stoi = {p: i for i, p in enumerate(tokenizer.pieces)}
        return model, cfg, tokenizer, ckpt
    module.load_model = load_controlled


def shown(text: str) -> str:
    """`text` as a terminal should show it: each control as its escape, '\\t' and '\\n' kept."""
    return "".join(repr(c)[1:-1] if (not c.isprintable() and c not in "\t\n") else c for c in text)


def test_control_characters_shown_as_escapes(tiny_stories_run, monkeypatch):
    """A toy model's ESC, '\\r', BEL, C1 and bidi tokens moved the cursor, cleared the screen or
    reordered the text of the terminal: there, each is shown as its escape; the texts returned stay exact."""
    plain, _ = run_sample([tiny_stories_run, "--prompt", "Mia had", *SAMPLED])
    raw = PROMPT + plain[0].translate(str.maketrans(CONTROLLED))
    assert any(c in plain[0] for c in CONTROLLED)  # the model's own text has some too
    monkeypatch.setattr(sample, "load_model", sample.load_model)
    with_controls(sample)
    terminal = Terminal()
    texts = sample.main([str(tiny_stories_run), "--prompt", PROMPT, *SAMPLED], out=terminal)
    assert PROMPT + texts[0] == raw  # the text itself is exact
    assert terminal.getvalue() == shown(raw) + "\n" and "\\x1b" in terminal.getvalue()
    assert not any(c in terminal.getvalue() for c in "\x1b\r\x07\x9b\u202e\x7f")


@pytest.mark.parametrize("mode", [["--show-steps"], ["--interactive"], ["--num-samples", "2"]])
def test_every_mode_shows_control_characters_at_a_terminal(tiny_stories_run, monkeypatch, mode):
    """--show-steps' text after its table, --interactive's echoed prompt and answer, every sample."""
    monkeypatch.setattr(sample, "load_model", sample.load_model)
    monkeypatch.setenv("COLUMNS", "1000")  # (a narrower terminal gets fewer --show-steps candidates than a pipe)
    with_controls(sample)
    args = [str(tiny_stories_run), *mode, *SAMPLED] + ([] if mode == ["--interactive"] else ["--prompt", PROMPT])
    texts = {}
    for out in (exact := io.StringIO()), (terminal := Terminal()):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f"{PROMPT}\n".encode()), encoding="utf-8"))
        texts[type(out)] = sample.main(args, out=out)
    assert texts[io.StringIO] == texts[Terminal]
    assert "\x1b" in exact.getvalue()  # the prompt, echoed
    assert terminal.getvalue() == shown(exact.getvalue()) != exact.getvalue()


def test_stdout_is_asked_whether_it_is_a_terminal(tiny_stories_run, monkeypatch):
    """sample.py's own stdout (no `out`): a terminal gets the escapes, a file or a pipe the exact bytes."""
    monkeypatch.setattr(sample, "load_model", sample.load_model)
    with_controls(sample)
    args = [str(tiny_stories_run), "--prompt", PROMPT, *SAMPLED]
    monkeypatch.setattr(sys, "stdout", Terminal())
    sample.main(args)
    at_terminal = sys.stdout.getvalue()
    piped = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(piped, encoding="utf-8", write_through=True))
    texts = sample.main(args)
    assert piped.getvalue() == (PROMPT + texts[0] + "\n").encode()
    assert at_terminal == shown(piped.getvalue().decode()) != piped.getvalue().decode()


def test_a_character_split_across_byte_tokens_is_shown_whole(tiny_stories_run, monkeypatch):
    """Byte-level BPE tokens split characters (RLO's 3 bytes, an emoji's 4) and escape sequences:
    each character comes out whole, once its last byte came, controls shown, the rest as it is."""
    from tinygpt.tokenizer import _ByteStreamDecoder
    chunks = [b"caf\xc3", b"\xa9 \xe2\x80", b"\xae", b"txet\x1b", b"[2J\xf0\x9f", b"\x98", b"\x80\r\x07", b"\n\tok"]
    load = sample.load_model

    def byte_level(*args, **kwargs):  # a byte-level BPE's pieces, whatever the ids (the char model has none)
        model, cfg, tokenizer, ckpt = load(*args, **kwargs)
        tokenizer.stream_decoder = lambda: _ByteStreamDecoder(lambda id, rest=iter(chunks): next(rest, b""))
        return model, cfg, tokenizer, ckpt
    monkeypatch.setattr(sample, "load_model", byte_level)
    terminal = Terminal()
    texts = sample.main([str(tiny_stories_run), "--prompt", "Mia", *GREEDY], out=terminal)
    assert texts == [b"".join(chunks).decode()]
    assert terminal.getvalue() == "Miacafé \\u202etxet\\x1b[2J😀\\r\\x07\n\tok\n"


@pytest.mark.slow
def test_a_terminal_and_a_pipe_from_the_real_cli(tiny_stories_run, tmp_path):
    """sample.py's real stdout: a pseudo-terminal shows the controls as escapes; a pipe gets every byte."""
    pty = pytest.importorskip("pty")
    cli = [sys.executable, "-c", f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]; "
           "import sample, test_sample_prompts as t; t.with_controls(sample); "
           "from tinygpt.errors import run_cli; run_cli(sample.main)",
           str(tiny_stories_run), "--prompt", PROMPT, *SAMPLED]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    piped = subprocess.run(cli, capture_output=True, cwd=tmp_path, timeout=300, env=env)
    assert piped.returncode == 0, piped.stderr
    raw = piped.stdout.decode()
    assert raw.startswith(PROMPT) and "\x1b" in raw
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(env)
        os.execv(sys.executable, cli)
    import select
    seen, deadline = b"", time.time() + 120
    try:
        while time.time() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # EIO: sample.py ended, its terminal closed
                    break
                if not data:
                    break
                seen += data
        _, status = os.waitpid(pid, 0)
    finally:
        end_child(pid, fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen[-500:]
    assert seen.decode().replace("\r\n", "\n") == shown(raw)  # (the terminal's own "\n" -> "\r\n")


def test_files_for_each_of_too_many_samples_are_refused_at_once(tmp_path):
    """A page (or a set of heatmaps) per sample: more than MAX_SAMPLE_FILES samples is refused before the
    run is even read, not after hours of generation and thousands of files."""
    n = sample.MAX_SAMPLE_FILES + 1
    cap = f"--num-samples={n:,} with --attention-html.* at most {sample.MAX_SAMPLE_FILES:,}$"
    refused([tmp_path / "no_run", "--num-samples", n, "--attention-html", tmp_path / "p.html"], cap)
    refused([tmp_path / "no_run", "--num-samples", n, "--attention-png", tmp_path / "maps", "--attention-of", "all"],
            cap)
    assert list(tmp_path.iterdir()) == []
    sample.check_args(sample.build_parser().parse_args(  # exactly the most: taken
        [str(tmp_path / "no_run"), "--num-samples", str(n - 1), "--attention-html", str(tmp_path / "p.html")]))
    sample.check_args(sample.build_parser().parse_args(  # heatmaps of the prompt: one set, however many samples
        [str(tmp_path / "no_run"), "--num-samples", str(n), "--attention-png", str(tmp_path / "maps")]))


def test_list_vocab_with_several_samples_asked_for_is_refused(tiny_stories_run):
    """`--list-vocab --num-samples 3` printed the vocabulary and exited 0, as if the samples were drawn."""
    refused([tiny_stories_run, "--list-vocab", "--num-samples", 3], "drop --num-samples, or --list-vocab$")


def test_top_p_1_is_the_whole_distribution(tiny_stories_run):
    """--top-p 1 (the range's closed end) keeps every token: the same sampled text as without it."""
    sampled = [tiny_stories_run, "--prompt", "Mia had", "--max-new-tokens", 20, "--temperature", 1.0, "--seed", 3]
    assert run_sample([*sampled, "--top-p", 1]) == run_sample(sampled)


def test_a_prompt_of_exactly_the_limit_is_read(tiny_stories_run, tmp_path):
    """MAX_PROMPT_BYTES is the most a prompt may have: a file of exactly that size is a prompt."""
    exact = tmp_path / "exact.txt"
    exact.write_bytes(b"a" * sample.MAX_PROMPT_BYTES)
    texts, printed = run_sample([tiny_stories_run, "--prompt-file", exact, "--max-new-tokens", 0, "--device", "cpu"])
    assert texts == [""] and printed == "a" * sample.MAX_PROMPT_BYTES + "\n"


def test_piped_interactive_input_stops_at_a_ctrl_c(tiny_stories_run, monkeypatch):
    """Only at a terminal does a Ctrl-C stop just the answer: piped, it stops the command, as everywhere,
    and the lines after it are not answered."""
    answered = []

    def interrupted(model, tokenizer, prompt, *rest):
        answered.append(prompt)
        raise KeyboardInterrupt

    monkeypatch.setattr(sample, "generate_samples", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sample([tiny_stories_run, "--interactive", *GREEDY], "Mia\nTom\n", monkeypatch)
    assert answered == ["Mia"]


def test_heatmaps_of_the_prompt_are_one_set_whatever_the_samples(tiny_stories_run, tmp_path):
    """--attention-png over the prompt (the default --attention-of) draws the prompt once: one heatmap per
    layer, named attention_layerN.png, however many samples follow."""
    pytest.importorskip("matplotlib")
    run_sample([tiny_stories_run, "--prompt", "Mia", "--max-new-tokens", 2, "--num-samples", 2, "--temperature", 0,
                "--attention-png", tmp_path / "maps"])
    assert sorted(p.name for p in (tmp_path / "maps").iterdir()) == ["attention_layer0.png", "attention_layer1.png"]


def test_each_range_of_controls_is_shown_at_a_terminal_to_its_last_character():
    """Both ends of each range a terminal obeys (C0, DEL and C1, the bidi embeddings and overrides, the
    isolates U+2066-U+2069) are shown as escapes; '\\t', '\\n', NBSP and the characters just past the bidi
    ranges are written as they are."""
    terminal = Terminal()
    sample.ControlsShown(terminal).write("\x00\x08\x0b\x1f\x7f\x80\x9f\u202a\u202e\u2066\u2069|\t\n\xa0\u202f\u206a")
    assert terminal.getvalue() == ("\\x00\\x08\\x0b\\x1f\\x7f\\x80\\x9f\\u202a\\u202e\\u2066\\u2069"
                                   "|\t\n\xa0\u202f\u206a")


def test_the_bidi_marks_and_the_line_separators_are_shown_at_a_terminal():
    """U+200E, U+200F and U+061C (the directional marks) and U+2028, U+2029 were printed raw: the marks
    reorder the text around them, the separators break the line on some terminals."""
    terminal = Terminal()
    sample.ControlsShown(terminal).write("C\u200fD\u061cE\u200eF\u2028G\u2029H")
    assert terminal.getvalue() == "C\\u200fD\\u061cE\\u200eF\\u2028G\\u2029H"


def test_a_character_cut_off_by_the_last_token_is_not_dropped(tiny_stories_run, monkeypatch):
    """The last token's bytes ending mid-character (a byte-level model stopped by --max-new-tokens): the
    sample ends in U+FFFD, as tokenizer.decode gives, printed and returned, instead of losing it."""
    from tinygpt.tokenizer import _ByteStreamDecoder
    chunks = [b"ok", b"\xe2\x80"]
    load = sample.load_model

    def byte_level(*args, **kwargs):
        model, cfg, tokenizer, ckpt = load(*args, **kwargs)
        tokenizer.stream_decoder = lambda: _ByteStreamDecoder(lambda id, rest=iter(chunks): next(rest, b""))
        return model, cfg, tokenizer, ckpt
    monkeypatch.setattr(sample, "load_model", byte_level)
    texts, printed = run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY])
    assert texts == ["ok\ufffd"] and printed == "Miaok\ufffd\n"


def test_a_reader_leaving_does_not_stop_the_heatmaps_asked_for(tiny_stories_run, tmp_path, monkeypatch, capsys):
    """`sample.py ... --attention-png DIR | head -1`: as with --attention-html, the heatmaps are the work,
    so the reader who leaves costs the output, not the PNGs (in-process: stdout a pipe nobody reads)."""
    pytest.importorskip("matplotlib")
    read, write = os.pipe()
    os.close(read)  # the reader left: each write raises BrokenPipeError
    with open(write, "w", buffering=1) as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        texts = sample.main([str(tiny_stories_run), "--prompt", "Mia", *GREEDY, "--attention-png", str(tmp_path)])
        monkeypatch.undo()
    assert len(texts) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention_layer0.png", "attention_layer1.png"]
    assert "warning: stdout was closed (its reader left)" in capsys.readouterr().err


@pytest.mark.parametrize("temperature", ["0", "1"])
def test_a_model_whose_weights_overflow_is_one_line_naming_the_run(tiny_stories_run, tmp_path, temperature):
    # finite weights of 1e25 pass the checkpoint's checks, then overflow: a traceback from
    # multinomial (exit 1), or with --temperature 0 garbage text and exit 0
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    ckpt = load_checkpoint(tiny_stories_run / "best.pt")
    ckpt["model"]["blocks.0.mlp.fc.weight"] *= 1e25
    save_checkpoint(tmp_path / "big" / "best.pt", ckpt)
    with pytest.raises(UserError, match=rf"^{re.escape(str(tmp_path / 'big'))}: the model's logits are not finite "
                                        r"\(NaN or inf\): its weights overflow float32 \(a diverged or damaged "
                                        r"model\)$"):
        sample.main([str(tmp_path / "big"), "--prompt", "Mia", "--max-new-tokens", "3", "--temperature", temperature],
                    out=io.StringIO())


def test_a_steps_header_as_wide_as_the_terminal_stays_one_line():
    from types import SimpleNamespace
    args = SimpleNamespace(temperature=0.8, top_k=None, top_p=None)
    one = sample.steps_header(args, 10)
    assert one.count("\n") == 1
    assert sample.steps_header(args, 10, columns=len(one) - 1) == one  # (its newline aside: exactly as wide)
    assert sample.steps_header(args, 10, columns=len(one) - 2).startswith("(probabilities after temperature 0.8)\n")


def test_a_png_file_name_for_the_heatmaps_folder_is_refused(tiny_stories_run, tmp_path):
    # `--attention-png x.png` quietly made a folder named x.png holding attention_layer0.png, ...
    for name in ("x.png", "x.PNG"):
        refused([tiny_stories_run, "--prompt", "Mia", "--attention-png", tmp_path / name],
                rf"^--attention-png takes a folder, not a file name: .*; give e.g. {re.escape(str(tmp_path / 'x'))}$")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "shots.png").mkdir()  # a folder the user named so is taken
    pytest.importorskip("matplotlib")
    run_sample([tiny_stories_run, "--prompt", "Mia", *GREEDY, "--attention-png", tmp_path / "shots.png"])
    assert sorted(p.name for p in (tmp_path / "shots.png").iterdir()) == [f"attention_layer{i}.png" for i in (0, 1)]


@pytest.mark.parametrize("flag", [["--prompt-file", "-"], ["--interactive"], ["--compile"], ["--show-steps"],
                                  ["--show-attention"], ["--attention-of", "all"], ["--attention-last", "4"],
                                  ["--attention-png", "maps"]], ids=lambda flag: flag[0])
def test_list_vocab_with_any_other_work_is_refused(tiny_stories_run, tmp_path, monkeypatch, flag):
    """Each flag that asks for work is refused beside --list-vocab (only --prompt, --attention-html and
    --num-samples were tried): `--list-vocab --compile` listed the vocabulary, exit 0, and compiled nothing."""
    monkeypatch.chdir(tmp_path)
    refused([tiny_stories_run, "--list-vocab", *flag],
            rf"^--list-vocab prints the vocabulary and nothing else: drop {re.escape(flag[0])}, or --list-vocab$")
    assert list(tmp_path.iterdir()) == []


def test_negative_threads_are_refused(tiny_stories_run):
    """--threads -1 is below the range (0 = the free cores), refused naming the value, as the cap's + 1 is."""
    from tinygpt.config import MAX_THREADS
    refused([tiny_stories_run, "--list-vocab", "--threads", -1], rf"^--threads=-1 must be in 0\.\.{MAX_THREADS} ")

"""Guards hf.py: tinygpt <-> Hugging Face GPT-2.

With the optional `safetensors` and `tokenizers` packages (the module skips without them): reading a
malformed safetensors file is a one-line error; export -> import gives back exactly the same model
(bias false and true), tokenizer and config, through model.safetensors and through
pytorch_model.bin; a non-causal model is refused and nothing is overwritten without --force. The
output folder appears whole or not at all: Ctrl-C mid-export leaves nothing (or the previous export),
two exports into one folder leave one of them whole; the source folder, a folder inside it, an
empty path and a folder with other files are refused; a damaged config.json (a number written as a
string, a damaged tokenizer record, tiktoken's too) is refused before anything is written. With
`transformers` installed: GPT2LMHeadModel loads our export and gives our logits to 1e-4, and a GPT-2
saved by transformers imports with its logits. Models are tiny and random, with every parameter
perturbed so that biases and LayerNorm weights are not trivial. That the export generates on its
own, tokenizer included, is tests/test_export_pipeline.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import shutil
import struct
from pathlib import Path

import pytest
import torch

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

import export  # noqa: E402
from tinygpt import hf  # noqa: E402
from tinygpt.checkpoint import load_checkpoint, load_model, save_checkpoint  # noqa: E402
from model import ModelConfig  # noqa: E402
from tinygpt.config import Config, config_to_dict  # noqa: E402
from tinygpt.errors import UserError  # noqa: E402
from model import GPT  # noqa: E402

CHARS = "".join(chr(c) for c in range(ord("A"), ord("A") + 37))  # a char vocabulary of 37


def perturb(model: torch.nn.Module, seed: int = 0) -> None:
    """Add noise to every parameter: zero biases and unit LayerNorm weights would hide mapping bugs."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))


def make_run(tmp_path, bias: bool = True, causal: bool = True, seed: int = 0) -> tuple[str, GPT, Config]:
    """A tiny run directory holding a random (perturbed) model in ckpt.pt."""
    cfg = Config(model=ModelConfig(block_size=16, n_layer=2, n_head=4, n_embd=32, vocab_size=len(CHARS),
                                   bias=bias, causal=causal))
    cfg.train.out_dir = str(tmp_path / "run")
    torch.manual_seed(0)
    model = GPT(cfg.model)
    perturb(model, seed)
    save_checkpoint(tmp_path / "run" / "ckpt.pt", {
        "config": config_to_dict(cfg), "tokenizer": {"kind": "char", "vocab_size": len(CHARS), "chars": CHARS},
        "model": model.state_dict(), "step": 7, "best_val_loss": 1.0, "elapsed_s": 0.0})
    return str(tmp_path / "run"), model.eval(), cfg


def logits(model: torch.nn.Module, vocab_size: int, T: int = 16) -> torch.Tensor:
    idx = torch.randint(0, vocab_size, (3, T), generator=torch.Generator().manual_seed(1))  # (B, T)
    with torch.no_grad():
        out = model(idx)
    return out if isinstance(out, torch.Tensor) else out.logits  # ours (B, T, V) / transformers' output


def export_run(tmp_path) -> tuple[str, dict]:
    """A run (make_run) exported to tmp_path/hf: the run's path and the config.json written there."""
    run, _, _ = make_run(tmp_path)
    export.main([run, str(tmp_path / "hf")])
    return run, json.loads((tmp_path / "hf" / "config.json").read_text())


# ---- safetensors ----


def test_safetensors_round_trip_and_malformed_files(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {"f32": torch.randn(2, 3, generator=gen), "bf16": torch.randn(4, 4, generator=gen).bfloat16()}
    path = tmp_path / "t.safetensors"
    hf.save_safetensors(path, tensors, {"format": "pt"})
    back = hf.load_safetensors(path)
    assert all(torch.equal(back[k], t) and back[k].dtype == t.dtype for k, t in tensors.items())
    data = path.read_bytes()
    for name, blob in {"truncated": data[:-10], "tiny": data[:5], "garbage": b"\xff" * 64}.items():
        bad = tmp_path / f"{name}.safetensors"
        bad.write_bytes(blob)
        with pytest.raises(UserError, match="not a valid safetensors file") as err:
            hf.load_safetensors(bad)
        assert "\n" not in str(err.value)


@pytest.mark.within(60)
def test_a_safetensors_file_of_holes_is_refused_unread(tmp_path):
    """A header claiming a 256 MiB tensor, the file then extended to that size without writing it (a sparse
    file, 4 KB on disk): its zeros would load as weights, and a claimed 8 GB was read whole to check it."""
    n = 64 * 2**20
    header = json.dumps({"wte.weight": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4 * n)
    from conftest import skip_unless_holes
    skip_unless_holes(path)
    with pytest.raises(UserError, match=r"model.safetensors is not a valid safetensors file: most of its "
                                        r"268,435,\d+ bytes were never written"):
        hf.load_safetensors(path)


def test_safetensors_under_a_name_that_is_not_utf8_load(tmp_path):
    """`export.py --from-hf $'ex_\\xff' OUT` said `model.safetensors is not a valid safetensors file (Path
    ... is not valid UTF-8)`: safetensors opens a file by its name as UTF-8."""
    tensors = {"w": torch.arange(6.0).view(2, 3)}
    for folder in (tmp_path / "ex_\udcff", tmp_path / "plain"):
        hf.save_safetensors(folder / "model.safetensors", tensors, {"format": "pt"})
        assert torch.equal(hf.load_safetensors(folder / "model.safetensors")["w"], tensors["w"])
    (tmp_path / "ex_\udcff" / "bad.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(UserError, match="not a valid safetensors file"):
        hf.load_safetensors(tmp_path / "ex_\udcff" / "bad.safetensors")


# ---- export and import, no transformers needed ----


@pytest.mark.parametrize("bias", [False, True])
def test_export_import_round_trip_is_exact(tmp_path, bias):
    run, model, cfg = make_run(tmp_path, bias=bias)
    hf_dir, back_dir = tmp_path / "hf", tmp_path / "back"
    export.main([run, "--format", "hf", str(hf_dir)])
    hf_config = json.loads((hf_dir / "config.json").read_text())
    assert (hf_config["vocab_size"], hf_config["n_positions"], hf_config["n_embd"], hf_config["n_layer"], hf_config["n_head"]) == (37, 16, 32, 2, 4)
    assert hf_config["activation_function"] == "gelu" and hf_config["tie_word_embeddings"] is True
    assert hf_config["tinygpt"]["tokenizer"]["chars"] == CHARS and "character vocabulary" in hf_config["tinygpt"]["note"]
    tensors = hf.load_safetensors(hf_dir / "model.safetensors")
    assert "lm_head.weight" not in tensors  # tied to wte
    assert tensors["transformer.h.0.attn.c_attn.weight"].shape == (32, 96)  # Conv1D (in, 3 out)
    assert tensors["transformer.h.1.mlp.c_fc.weight"].shape == (32, 128)
    assert torch.equal(tensors["transformer.h.0.attn.c_attn.weight"][:, 32:64], model.blocks[0].attn.k_proj.weight.t())
    if not bias:  # GPT-2 always has biases: zeros stand in
        assert not tensors["transformer.h.0.attn.c_attn.bias"].any() and not tensors["transformer.ln_f.bias"].any()

    export.main(["--from-hf", str(hf_dir), str(back_dir)])
    model2, cfg2, tok2, ckpt2 = load_model(back_dir)
    assert cfg2.model == cfg.model  # bias: false comes back bias-free
    assert torch.equal(logits(model2, 37), logits(model, 37))
    assert ckpt2["tokenizer"]["chars"] == CHARS and cfg2.train.out_dir == str(back_dir)
    assert (back_dir / "config.yaml").is_file()

    # the same weights as pytorch_model.bin (loaded with weights_only=True) import the same way
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(hf_dir / "config.json", bin_dir / "config.json")
    torch.save({k.removeprefix("transformer."): v for k, v in tensors.items()}, bin_dir / "pytorch_model.bin")
    assert torch.equal(logits(hf.load_hf_gpt2(bin_dir), 37), logits(model, 37))

    with pytest.raises(UserError, match="already holds"):  # nothing overwritten without --force
        export.main([run, "--format", "hf", str(hf_dir)])
    export.main([run, "--format", "hf", str(hf_dir), "--force"])


def test_a_bias_set_in_an_export_of_a_bias_free_model_is_kept(tmp_path):
    """An export of a bias: false run whose biases were changed since (fine-tuned elsewhere) imports
    with biases: the record's bias: false only holds while every bias is still zero."""
    run, _, _ = make_run(tmp_path, bias=False)
    export.main([run, "--format", "hf", str(tmp_path / "hf")])
    weights = hf.load_safetensors(tmp_path / "hf" / "model.safetensors")
    weights["transformer.h.0.mlp.c_fc.bias"][3] = 0.5
    hf.save_safetensors(tmp_path / "hf" / "model.safetensors", weights, {"format": "pt"})
    model = hf.load_hf_gpt2(tmp_path / "hf")
    assert model.config.bias is True and model.blocks[0].mlp.fc.bias[3].item() == 0.5


def test_non_causal_model_is_refused(tmp_path):
    run, _, _ = make_run(tmp_path, causal=False)
    with pytest.raises(UserError, match="causal=false"):
        export.main([run, "--format", "hf", str(tmp_path / "hf")])
    assert not (tmp_path / "hf").exists()


# ---- the output folder: whole or not at all ----


def exported_from(folder) -> tuple[str, torch.Tensor]:
    """The checkpoint an export's config.json names, and its model.safetensors' wte."""
    source = json.loads((folder / "config.json").read_text())["tinygpt"]["source"]
    return source, hf.load_safetensors(folder / "model.safetensors")["transformer.wte.weight"]


def interrupt_at_the_second_file(monkeypatch, action) -> None:
    """Run action() when an export writes its second file (model.safetensors is the first)."""
    write = hf.atomic_write_text
    calls = []

    def hooked(path, text):
        if not calls:
            calls.append(path)
            action()
        write(path, text)
    monkeypatch.setattr(hf, "atomic_write_text", hooked)


def test_an_interrupted_export_leaves_nothing_or_the_previous_one(tmp_path, monkeypatch):
    run, _, _ = make_run(tmp_path)
    out = tmp_path / "hf"

    def ctrl_c():
        raise KeyboardInterrupt
    interrupt_at_the_second_file(monkeypatch, ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        export.main([run, str(out)])
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temp folder left
    monkeypatch.undo()
    export.main([run, str(out)])  # a rerun needs no --force: nothing was written
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == sorted(hf.HF_FILES)

    other, _, _ = make_run(tmp_path / "other", seed=1)
    interrupt_at_the_second_file(monkeypatch, ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        export.main([other, str(out), "--force"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the previous export, untouched


@pytest.mark.parametrize("force", [False, True])
def test_two_exports_into_one_folder_never_mix(tmp_path, monkeypatch, force):
    """Export `b` runs whole while export `a` is between its files: one of the two ends up there whole."""
    a, _, _ = make_run(tmp_path / "a", seed=1)
    b, _, _ = make_run(tmp_path / "b", seed=2)
    out = tmp_path / "hf"
    interrupt_at_the_second_file(monkeypatch, lambda: hf.export_hf(b, out, force))
    if force:  # the last to finish replaces the other's export
        export.main([a, str(out), "--force"])
        winner = a
    else:  # the folder b filled meanwhile is refused, as it would have been at the start
        with pytest.raises(UserError, match="already holds"):
            export.main([a, str(out)])
        winner = b
    source, wte = exported_from(out)
    assert source == str(hf.resolve_checkpoint(winner))
    assert torch.equal(wte, load_model(winner)[0].tok_emb.weight)
    assert sorted(p.name for p in out.iterdir()) == sorted(hf.HF_FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "hf"]  # no temp folder left


def test_the_output_folder_must_be_new_or_an_earlier_export(tmp_path):
    run, _, _ = make_run(tmp_path)
    for out, match in [(run, "is the run directory"), (f"{run}/hf", "is inside the run directory"),
                       (f"{run}/ckpt.pt", "is inside the run directory"), ("", "empty path")]:
        with pytest.raises(UserError, match=match):
            export.main([run, out])
    with pytest.raises(UserError, match="empty path"):
        export.main(["", str(tmp_path / "x")])
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["ckpt.pt"]

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")  # the export replaces the folder: refused, even with --force
    for force in ([], ["--force"]):
        with pytest.raises(UserError, match="holds 'notes.txt'"):
            export.main([run, str(mine), *force])
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    (mine / "notes.txt").unlink()
    export.main([run, str(mine)])  # an empty folder is fine
    assert sorted(p.name for p in mine.iterdir()) == sorted(hf.HF_FILES)

    # the import, too: into its own source, or over files of a run's that are not its own
    with pytest.raises(UserError, match="is the Hugging Face folder"):
        export.main(["--from-hf", str(mine), str(mine)])
    (tmp_path / "back").mkdir()
    (tmp_path / "back" / "data.txt").write_text("keep me")
    with pytest.raises(UserError, match="holds 'data.txt'"):
        export.main(["--from-hf", str(mine), str(tmp_path / "back"), "--force"])


def test_an_export_sweeps_the_temp_folders_of_killed_exports_beside_it(tmp_path):
    """An export killed mid-write (SIGKILL) for a name then never used again left its temp folder beside the
    output; the next export into that folder removes it (its writer, pid 3999999, is long dead)."""
    run, _, _ = make_run(tmp_path)
    (tmp_path / ".typo.3999999.x1y2z3w4.tmp").mkdir()
    (tmp_path / ".typo.3999999.x1y2z3w4.tmp" / "config.json").write_text("{}")
    export.main([run, str(tmp_path / "hf")])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]


def test_a_loose_checkpoint_exports_beside_itself(tmp_path):
    """`cp RUN/best.pt L/model.pt; export.py L/model.pt L/hf` was refused as "inside the run
    directory L": a loose file's folder is no run. A folder around the file, and a file in a run
    directory (its files beside it), are still refused."""
    run, model, _ = make_run(tmp_path)
    loose = tmp_path / "L"
    loose.mkdir()
    shutil.copy(tmp_path / "run" / "ckpt.pt", loose / "model.pt")
    export.main([str(loose / "model.pt"), str(loose / "hf")])
    assert sorted(p.name for p in (loose / "hf").iterdir()) == sorted(hf.HF_FILES)
    assert torch.equal(exported_from(loose / "hf")[1], model.tok_emb.weight)
    for out in (loose, tmp_path):
        with pytest.raises(UserError, match=f"output folder {out} holds the checkpoint {loose / 'model.pt'}, the "
                                            f"source, and the output replaces the folder whole"):
            export.main([str(loose / "model.pt"), str(out), "--force"])
    with pytest.raises(UserError, match=f"output folder {run}/hf is inside the run directory {run}, the source"):
        export.main([f"{run}/ckpt.pt", f"{run}/hf"])
    assert sorted(p.name for p in loose.iterdir()) == ["hf", "model.pt"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["ckpt.pt"]


def test_import_with_force_replaces_the_whole_run(tmp_path):
    """Over a trained run, the import's ckpt.pt must not sit beside the old best.pt (which sample.py
    would pick): --force replaces the run directory whole."""
    run, model, _ = make_run(tmp_path)
    export.main([run, str(tmp_path / "hf")])
    other, _, _ = make_run(tmp_path / "other", seed=1)
    shutil.copy(tmp_path / "other" / "run" / "ckpt.pt", tmp_path / "other" / "run" / "best.pt")
    with pytest.raises(UserError, match="already holds best.pt, ckpt.pt"):
        export.main(["--from-hf", str(tmp_path / "hf"), other])
    export.main(["--from-hf", str(tmp_path / "hf"), other, "--force"])
    assert sorted(p.name for p in (tmp_path / "other" / "run").iterdir()) == ["ckpt.pt", "config.yaml"]
    assert torch.equal(logits(load_model(other)[0], 37), logits(model, 37))


def test_force_never_deletes_a_folder_named_like_a_file_it_writes(tmp_path):
    """A folder of the user's named config.json (or best.pt, for --from-hf) in the output folder:
    --force took it for an earlier export's file and deleted it, with what it held."""
    run, _ = export_run(tmp_path)
    out = tmp_path / "s"
    (out / "config.json").mkdir(parents=True)
    (out / "config.json" / "thesis.txt").write_text("precious")
    with pytest.raises(UserError, match=r"s holds 'config.json', which is a folder, not the file written here"):
        export.main([run, str(out), "--force"])
    (tmp_path / "r" / "best.pt").mkdir(parents=True)
    with pytest.raises(UserError, match=r"r holds 'best.pt', which is a folder, not the file written here"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "r"), "--force"])
    assert (out / "config.json" / "thesis.txt").read_text() == "precious" and (tmp_path / "r" / "best.pt").is_dir()


def test_a_line_break_in_the_folders_name_keeps_each_command_on_one_line(tmp_path, capsys):
    """`export.py RUN $'out\\nhf'`: the success line split in two at the name; the import's "sample
    with:" command too, and pasted it named another folder. Names with a control character are
    written in bash's $'...' form, which pastes as it is."""
    import subprocess
    run, _, _ = make_run(tmp_path)
    hf_dir, back = tmp_path / "out\nhf", tmp_path / "back\nrun"
    export.main([run, str(hf_dir)])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and f"into $'{tmp_path}/out\\nhf';" in out, out
    export.main(["--from-hf", str(hf_dir), str(back)])
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    command = out.split("sample with: ", 1)[1].strip()
    folder = subprocess.run(["bash", "-c", f"set -- {command}; printf %s \"$3\""], capture_output=True,
                            text=True, check=True).stdout
    assert folder == str(back) and (back / "ckpt.pt").is_file()


def test_an_export_of_a_run_being_trained_says_so(tmp_path, capsys):
    """Its best.pt goes on changing: the export (exit 0) said nothing of the moment it holds."""
    from tinygpt.runs import run_lock
    run, _, _ = make_run(tmp_path)
    with run_lock(Path(run), resume=True):  # a training holds it
        export.main([run, str(tmp_path / "hf")])
    assert f"note: {run} is being trained now: this exports ckpt.pt as of step" in capsys.readouterr().err
    export.main([run, str(tmp_path / "hf2")])
    assert "is being trained now" not in capsys.readouterr().err


def test_import_over_a_run_says_what_force_would_delete_and_waits_for_a_training(tmp_path):
    """--from-hf into a trained run listed its files alone (--force then deleted the run); into a
    folder a training is writing, it blamed `.lock`, "not one of the files written here"."""
    from tinygpt.runs import LOCK, run_lock
    run, _ = export_run(tmp_path)
    (Path(run) / "metrics.csv").write_text("step,train_loss,val_loss\n0,4.1,4.1\n")
    with pytest.raises(UserError, match=r"already holds ckpt.pt, metrics.csv \(a trained run: --force "
                                        r"deletes it\)"):
        export.main(["--from-hf", str(tmp_path / "hf"), run])
    with run_lock(Path(run), resume=True):  # a training holds it
        with pytest.raises(UserError, match="is a run directory a training is writing now; wait for it to end"):
            export.main(["--from-hf", str(tmp_path / "hf"), run, "--force"])
    # a killed training's, naming a live pid (in a container, pid 1): part of the run, replaced with it
    (Path(run) / LOCK).write_text("1\n")
    export.main(["--from-hf", str(tmp_path / "hf"), run, "--force"])
    assert sorted(p.name for p in Path(run).iterdir()) == ["ckpt.pt", "config.yaml"]


def test_import_never_replaces_a_folder_that_holds_its_source(tmp_path):
    """The source folder named like a run file (tensorboard) inside the output: --force replaced the
    output folder whole, the source with it."""
    run, _, _ = make_run(tmp_path)
    source = tmp_path / "out" / "tensorboard"
    export.main([run, str(source)])
    with pytest.raises(UserError, match="holds the Hugging Face folder"):
        export.main(["--from-hf", str(source), str(tmp_path / "out"), "--force"])
    assert sorted(p.name for p in source.iterdir()) == sorted(hf.HF_FILES)
    with pytest.raises(UserError, match="config.json is a file; --from-hf takes the folder"):
        export.main(["--from-hf", str(source / "config.json"), str(tmp_path / "back")])
    with pytest.raises(UserError, match="config.json is a file; --from-hf takes the folder"):  # not "holds the source"
        export.main(["--from-hf", str(source / "config.json"), str(source)])
    with pytest.raises(UserError, match="Hugging Face model folder not found"):
        export.main(["--from-hf", str(tmp_path / "out" / "gone"), str(tmp_path / "out")])


def test_import_refuses_a_damaged_config_json_before_writing(tmp_path):
    run, _, _ = make_run(tmp_path)
    hf_dir, back = tmp_path / "hf", tmp_path / "back"
    export.main([run, str(hf_dir)])
    config = json.loads((hf_dir / "config.json").read_text())
    tokenizer = {"kind": "char", "vocab_size": 37, "chars": "ab"}  # 37 ids, 2 characters: sample.py would fail
    damaged = {**config, "tinygpt": {**config["tinygpt"], "tokenizer": tokenizer}}
    (hf_dir / "config.json").write_text(json.dumps(damaged))
    with pytest.raises(UserError, match="tinygpt.tokenizer it records is damaged") as err:
        export.main(["--from-hf", str(hf_dir), str(back)])
    assert "config.json" in str(err.value) and not back.exists()
    for text, match in [("[" * 100_000, "nested too deeply"), ('{"n_embd": 1' + "0" * 5000 + "}", "not valid JSON"),
                        ("{,}", "not valid JSON"), (None, "holds more than 32 MiB"),
                        ("[]", "must hold a JSON object$"), ('"gpt2"', "must hold a JSON object$")]:
        (hf_dir / "config.json").write_text(text or "")
        if text is None:  # (sparse: refused by its size, unread)
            os.truncate(hf_dir / "config.json", hf.CONFIG_JSON_MAX + 1)
        with pytest.raises(UserError, match=match) as err:
            export.main(["--from-hf", str(hf_dir), str(back)])
        assert "config.json" in str(err.value) and "\n" not in str(err.value) and not back.exists()


def test_an_export_of_a_large_vocabulary_imports_back(tmp_path, monkeypatch):
    """config.json records the run's tokenizer, about 50 bytes a merge: an export of a bpe_vocab_size
    of 24,000 wrote 1.2 MB, and its import refused it ('holds more than 1 MiB'). An export past what an
    import reads is refused, nothing written."""
    pytest.importorskip("tokenizers")
    merges = [[a, b] for a in range(256) for b in range(256)][:24_000 - 256]  # two-byte tokens
    cfg = Config(model=ModelConfig(block_size=8, n_layer=1, n_head=1, n_embd=8, vocab_size=24_000))
    cfg.data.tokenizer, cfg.train.out_dir = "bpe", str(tmp_path / "run")
    save_checkpoint(tmp_path / "run" / "ckpt.pt", {
        "config": config_to_dict(cfg), "tokenizer": {"kind": "bpe", "vocab_size": 24_000, "merges": merges},
        "model": GPT(cfg.model).state_dict(), "step": 1, "best_val_loss": 1.0, "elapsed_s": 0.0})
    with monkeypatch.context() as patch:  # (an import reading 1 MiB at most, as before)
        patch.setattr(hf, "CONFIG_JSON_MAX", 1 << 20)
        with pytest.raises(UserError, match=r"run/ckpt.pt: its vocabulary of 24,000 tokens is too large to record in "
                                            r"config.json \(1 MiB, past the 1 MiB an import reads\)$"):
            export.main([str(tmp_path / "run"), str(tmp_path / "hf")])
    assert not (tmp_path / "hf").exists()
    export.main([str(tmp_path / "run"), str(tmp_path / "hf")])
    assert (tmp_path / "hf" / "config.json").stat().st_size > 1 << 20
    export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert load_checkpoint(tmp_path / "back" / "ckpt.pt")["tokenizer"]["merges"] == merges


def test_an_output_folder_that_runs_into_a_loop_of_links_is_one_line(tmp_path):
    """`ln -s loop loop`, then an export (or an import) into loop or loop/sub: a traceback,
    RuntimeError: Symlink loop (Python before 3.13)."""
    run, _ = export_run(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    for argv in ([run], ["--from-hf", str(tmp_path / "hf")]):
        for out in (tmp_path / "loop", tmp_path / "loop" / "sub"):
            with pytest.raises(UserError, match=r"^output folder \S+ cannot be reached: it runs into a loop of links"):
                export.main([*argv, str(out)])


def test_force_into_a_folder_whose_parent_denies_writing_is_refused_before_the_work(tmp_path, monkeypatch):
    """The output replaces its folder whole, a rename in the parent: with a read-only parent, --force did
    all the work and then failed, `Permission denied: .../.hf.26850.qk3wklde.tmp` (our temp folder)."""
    run, _ = export_run(tmp_path)
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != tmp_path and access(path, mode, **kw))
    monkeypatch.setattr(hf, "load_model", lambda *a, **k: pytest.fail("the work began"))
    with pytest.raises(UserError, match=rf"^output folder \S+hf cannot be replaced: the output takes its place whole, "
                                        rf"and {re.escape(str(tmp_path))} denies writing"):
        export.main([run, str(tmp_path / "hf"), "--force"])


def test_an_import_names_what_its_files_are_not_only_that_they_are_missing(tmp_path, monkeypatch):
    """config.json as a folder or a pipe, model.safetensors as a pipe: 'has no config.json', 'has
    neither model.safetensors ...'; an unreadable model.safetensors: 'not a valid safetensors file (No
    such file or directory ...)'; a tinygpt run given to --from-hf: 'has no config.json' alone."""
    run, _ = export_run(tmp_path)
    hf_dir, out = tmp_path / "hf", str(tmp_path / "out")
    with pytest.raises(UserError, match=r"^\S+run has no config.json: not a Hugging Face model folder but a tinygpt "
                                        r"run; export it with python export.py \S+run OUT$"):
        export.main(["--from-hf", run, out])
    (hf_dir / "model.safetensors").rename(tmp_path / "weights")
    os.mkfifo(hf_dir / "model.safetensors")
    with pytest.raises(UserError, match=r"^\S+model.safetensors is a pipe, not a regular file: the weights must be a "
                                        r"file$"):
        export.main(["--from-hf", str(hf_dir), out])
    (hf_dir / "model.safetensors").unlink()
    (tmp_path / "weights").rename(hf_dir / "model.safetensors")
    real_open = open

    def unreadable_weights(path, *args, **kwargs):  # (chmod 000 is no obstacle to root)
        if str(path).endswith("model.safetensors"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr("builtins.open", unreadable_weights)
    with pytest.raises(UserError, match=r"^cannot read \S+model.safetensors: Permission denied$"):
        export.main(["--from-hf", str(hf_dir), out])
    monkeypatch.undo()
    (hf_dir / "config.json").rename(tmp_path / "config.json")
    (hf_dir / "config.json").mkdir()
    with pytest.raises(UserError, match=r"^\S+config.json is a folder: a Hugging Face model folder holds config.json "
                                        r"as a file$"):
        export.main(["--from-hf", str(hf_dir), out])
    assert not Path(out).exists()


def test_import_refuses_a_damaged_tiktoken_record_without_its_encoding_file(tmp_path):
    """A recorded compact tiktoken vocabulary went in unchecked (building it needs the encoding's
    file); sample.py then died of a Rust panic or an OverflowError. What its ids alone show is checked:
    here, no such file is needed (each tokenizer of 37 ids below lacks GPT-2's single-byte tokens)."""
    run, _, _ = make_run(tmp_path)
    hf_dir, back = tmp_path / "hf", tmp_path / "back"
    export.main([run, str(hf_dir)])
    config = json.loads((hf_dir / "config.json").read_text())
    for ids, match in [([*range(36), 2**70], f"holds id {2**70}, which names no BPE token"),
                       ([*range(1, 37)], r"lacks the single-byte token of id 0 \(and 219 more\)"),
                       ([*range(36), 35], "holds id 35 twice")]:
        tokenizer = {"kind": "tiktoken", "vocab_size": 37, "encoding": "gpt2", "ids": ids, "closed": True}
        (hf_dir / "config.json").write_text(json.dumps({**config, "tinygpt": {**config["tinygpt"], "tokenizer": tokenizer}}))
        with pytest.raises(UserError, match=f"tinygpt.tokenizer it records is damaged .*{match}") as err:
            export.main(["--from-hf", str(hf_dir), str(back)])
        assert "config.json" in str(err.value) and "\n" not in str(err.value) and not back.exists()


def test_import_refuses_a_full_gpt2_record_of_another_size(tmp_path):
    """The full gpt2 encoding recorded with vocab_size 37 (the model's) was imported without a word, and
    sample.py refused the run it wrote once it had the encoding's file; GPT-2's size is known without it."""
    run, _, _ = make_run(tmp_path)
    hf_dir, back = tmp_path / "hf", tmp_path / "back"
    export.main([run, str(hf_dir)])
    config = json.loads((hf_dir / "config.json").read_text())
    for name in ("gpt2", "r50k_base"):
        tokenizer = {"kind": "tiktoken", "vocab_size": 37, "encoding": name}
        (hf_dir / "config.json").write_text(json.dumps({**config, "tinygpt": {**config["tinygpt"],
                                                                              "tokenizer": tokenizer}}))
        with pytest.raises(UserError, match=f"damaged \\(tokenizer data says vocab_size=37 but encoding '{name}' has "
                                            r"50257 tokens\); export the run again$"):
            export.main(["--from-hf", str(hf_dir), str(back)])
        assert not back.exists()


def test_a_dropout_out_of_its_range_is_refused_not_dropped(tmp_path):
    """resid_pdrop 1.5, 1 or Infinity (JSON's) was imported as no dropout without a word."""
    run, _ = export_run(tmp_path)
    text = (tmp_path / "hf" / "config.json").read_text()
    assert '"resid_pdrop": 0.0' in text
    for bad, shown in [("1.5", "1.5"), ("1", "1"), ("-0.1", "-0.1"), ("Infinity", "inf"), ("NaN", "nan")]:
        (tmp_path / "hf" / "config.json").write_text(text.replace('"resid_pdrop": 0.0', f'"resid_pdrop": {bad}'))
        with pytest.raises(UserError, match=rf"config.json: resid_pdrop={shown} must be in \[0, 1\) \(a dropout "
                                            r"probability\)$"):
            hf.load_hf_gpt2(tmp_path / "hf")


def test_the_other_dropouts_and_an_untied_head_are_checked_too(tmp_path):
    """attn_pdrop 2.0, embd_pdrop 'x' and tie_word_embeddings false (transformers then reads the LM
    head as its own matrix, tinygpt as the token embedding) were imported without a word."""
    run, config = export_run(tmp_path)
    for change, match in [({"attn_pdrop": 2.0}, r"attn_pdrop=2.0 must be in \[0, 1\) \(a dropout probability\)$"),
                          ({"embd_pdrop": "x"}, r"embd_pdrop='x' must be a number$"),
                          ({"tie_word_embeddings": "false"}, r"tie_word_embeddings='false' must be true or "
                                                             r"false$"),
                          ({"tie_word_embeddings": False}, r"tie_word_embeddings=false \(tinygpt's LM head is its token "
                                                           r"embedding\) cannot be represented by tinygpt's GPT$")]:
        (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(UserError, match=match):
            hf.load_hf_gpt2(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "attn_pdrop": None, "embd_pdrop": 0.5}))
    hf.load_hf_gpt2(tmp_path / "hf")  # null, or another valid probability: imported (resid_pdrop is the one used)


def test_a_key_given_twice_or_integer_weights_are_refused(tmp_path):
    """config.json with n_layer given twice (the last one won without a word, as json keeps it), and
    an int64 weight tensor (.float() made weights of it without a word)."""
    run, config = export_run(tmp_path)
    text = (tmp_path / "hf" / "config.json").read_text()
    (tmp_path / "hf" / "config.json").write_text(text.replace("{", '{"n_layer": 5, ', 1))
    with pytest.raises(UserError, match=rf"config.json: the key 'n_layer' is given twice \(5, then "
                                        rf"{config['n_layer']}\)$"):
        hf.load_hf_gpt2(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(text)
    weights = hf.load_safetensors(tmp_path / "hf" / "model.safetensors")
    name = next(k for k in weights if k.endswith("wpe.weight"))
    weights[name] = weights[name].long()
    hf.save_safetensors(tmp_path / "hf" / "model.safetensors", weights, {"format": "pt"})
    with pytest.raises(UserError, match=r"hf: wpe.weight is torch.int64, not a floating-point tensor; the weights are "
                                        r"damaged$"):
        hf.load_hf_gpt2(tmp_path / "hf")


def test_a_tensor_given_twice_with_and_without_its_prefix_is_refused(tmp_path):
    """wte.weight beside a zeroed transformer.wte.weight: tinygpt kept one without a word and transformers loads
    the other, so the imported model was not the one transformers runs."""
    run, config = export_run(tmp_path)
    weights = hf.load_safetensors(tmp_path / "hf" / "model.safetensors")
    name = next(k for k in weights if k.endswith("wte.weight"))
    bare = name.removeprefix("transformer.")
    weights["transformer." + bare if name == bare else bare] = torch.zeros_like(weights[name])
    hf.save_safetensors(tmp_path / "hf" / "model.safetensors", weights, {"format": "pt"})
    with pytest.raises(UserError, match=r"hf: the weights hold 'wte.weight' twice, as 'wte.weight' and "
                                        r"'transformer.wte.weight'; the checkpoint is damaged$"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert not (tmp_path / "back").exists()


def test_a_recorded_model_section_or_encoding_that_is_damaged_is_refused(tmp_path):
    """tinygpt.config.model as a list ended in a traceback (AttributeError: 'list' object has no
    attribute 'get'); a tiktoken encoding name that is no encoding was imported, and sample.py refused
    the run it wrote."""
    run, config = export_run(tmp_path)
    back = tmp_path / "back"
    # (a train section of [1] was imported as the default training settings, without a word)
    for section, value, shown in [("model", [1, 2], r"\[1, 2\]"), ("model", "x", "'x'"), ("train", [1], r"\[1\]"),
                                  ("data", None, "None")]:
        meta = {**config["tinygpt"], "config": {**config["tinygpt"]["config"], section: value}}
        (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "tinygpt": meta}))
        with pytest.raises(UserError, match=rf"config.json: the tinygpt.config.{section} it records is {shown}, not a "
                                            r"mapping \(damaged\); export the run again$"):
            export.main(["--from-hf", str(tmp_path / "hf"), str(back)])
    tokenizer = {"kind": "tiktoken", "vocab_size": config["vocab_size"], "encoding": "../../etc/passwd"}
    meta = {**config["tinygpt"], "tokenizer": tokenizer}
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "tinygpt": meta}))
    with pytest.raises(UserError, match=r"config.json: the tinygpt.tokenizer it records is damaged \(tiktoken "
                                        r"tokenizer data names '../../etc/passwd', which is no tiktoken encoding\)"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(back)])
    assert not back.exists()


def test_a_config_json_the_weights_do_not_fit_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """n_positions edited to 60000 (the weights' 32 positions unchanged) built the model first (71 s
    and 10.8 GB here: its masks and position table) and then refused the weights."""
    from conftest import only_small_models
    run, config = export_run(tmp_path)
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "n_positions": 60000}))
    built = only_small_models(monkeypatch, hf, 60000)
    with pytest.raises(UserError, match=r"hf: wpe.weight has shape \(\d+, \d+\), config.json implies \(60000, \d+\)$"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert built == [] and not (tmp_path / "back").exists()


def test_a_number_written_as_a_string_is_called_so(tmp_path):
    """n_inner "128" (a string) for n_embd 32 said `n_inner=128 (tinygpt's MLP is 4*n_embd wide) cannot be
    represented`, though 4 * 32 = 128; a string resid_pdrop was taken as no dropout without a word."""
    run, config = export_run(tmp_path)
    assert config["n_embd"] == 32 and config["n_inner"] is None
    for change, match in [({"n_inner": "128"}, "n_inner='128' must be a number"),
                          ({"n_inner": True}, "n_inner=True must be a number"),
                          ({"resid_pdrop": "0.1"}, "resid_pdrop='0.1' must be a number")]:
        (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(UserError, match=match):
            hf.load_hf_gpt2(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "n_inner": 128, "resid_pdrop": None}))
    hf.load_hf_gpt2(tmp_path / "hf")  # 4 * n_embd as a number, and null dropout, import


def test_import_refuses_what_gpt2_cannot_say(tmp_path):
    run, config = export_run(tmp_path)
    for change, match in [({"n_inner": 7}, "n_inner"), ({"n_inner": 2 * config["n_embd"]}, "n_inner=64 "),
                          ({"activation_function": "relu"}, "activation"),
                          ({"model_type": "llama"}, "not gpt2"), ({"model_type": "gpt_neo"}, "not gpt2"),
                          ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon"),
                          ({"layer_norm_epsilon": 10**400}, "layer_norm_epsilon=an integer of 1329 bits")]:
        (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(UserError, match=match):
            hf.load_hf_gpt2(tmp_path / "hf")
    del config["tinygpt"]  # a vocabulary that is not gpt2's and no tokenizer record: cannot be decoded
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="vocab_size=37"):
        hf.import_hf(tmp_path / "hf", tmp_path / "back")
    with pytest.raises(UserError, match="invalid choice"):
        export.main([run, "--format", "onnx", str(tmp_path / "x")])


def test_a_refused_tanh_gelu_import_is_one_line(tmp_path, capsys):
    """A GPT-2 of the tanh GELU printed its note (logits differ slightly) before the error that
    refused it: two lines where the rule is one. The note comes once the import has succeeded."""
    run, config = export_run(tmp_path)
    weights = hf.load_safetensors(tmp_path / "hf" / "model.safetensors")
    untied = {**weights, "lm_head.weight": weights["transformer.wte.weight"] + 1}
    for name, change, tensors, match in [
            ("vocab", {"tinygpt": None}, weights, "vocab_size=37 is not GPT-2's 50257 tokens"),
            ("untied", {}, untied, "lm_head.weight is not tied to wte")]:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**config, **change, "activation_function": "gelu_new"}))
        hf.save_safetensors(folder / "model.safetensors", tensors)
        capsys.readouterr()
        with pytest.raises(UserError, match=match):
            export.main(["--from-hf", str(folder), str(tmp_path / f"{name}_run")])
        assert capsys.readouterr().err == "" and not (tmp_path / f"{name}_run").exists()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "activation_function": "gelu_new"}))
    export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert "tanh-approximated GELU" in capsys.readouterr().err and (tmp_path / "back" / "ckpt.pt").is_file()


def test_import_refuses_weights_its_config_does_not_describe(tmp_path):
    """config.json with a layer less than the weights (they were dropped without a word), a vocabulary
    of 0 (an AssertionError traceback) and NaN weights (written as a run sample.py then refused):
    one line each, nothing written."""
    run, config = export_run(tmp_path)
    weights = hf.load_safetensors(tmp_path / "hf" / "model.safetensors")
    back = tmp_path / "back"
    with pytest.raises(UserError, match="is a Hugging Face model folder, not a run: .* export.py --from-hf"):
        load_model(tmp_path / "hf")  # sample.py HF_DIR said "no checkpoint ...: train first"
    for change, match in [({"n_layer": config["n_layer"] - 1}, r"the weights hold 'h\.1\..*which config.json's model"),
                          ({"vocab_size": 0}, "vocab_size=0 must be a whole number >= 1"),
                          ({"scale_attn_weights": "false"}, "scale_attn_weights='false' must be true or false"),
                          ({"reorder_and_upcast_attn": "yes"}, "reorder_and_upcast_attn='yes' must be true or false")]:
        (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(UserError, match=match):
            export.main(["--from-hf", str(tmp_path / "hf"), str(back)])
        assert not back.exists()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    nan = {**weights, "transformer.wte.weight": torch.full_like(weights["transformer.wte.weight"], float("nan"))}
    hf.save_safetensors(tmp_path / "hf" / "model.safetensors", nan, {"format": "pt"})
    with pytest.raises(UserError, match="'tok_emb.weight' holds NaN or infinite values"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(back)])
    assert not back.exists()


def test_a_damaged_config_json_is_told_in_its_own_keys_and_a_damaged_record_is_not_taken_for_none(tmp_path):
    """config.json's n_positions=-1 was refused as `model.block_size=-1 ... must be >= 1`, a key it does
    not hold; a tinygpt record that is no mapping as `records no tinygpt tokenizer`; a record whose
    config names another tokenizer, or whose vocab_size is 58.0, was imported (exit 0), the run's
    config.yaml contradicting its checkpoint, and `vocab 58.0` printed."""
    run, config = export_run(tmp_path)
    path, back = tmp_path / "hf" / "config.json", tmp_path / "back"
    record = config["tinygpt"]
    other = {**record, "config": {**record["config"], "data": {**record["config"]["data"], "tokenizer": "word"}}}
    for change, match in [({"n_positions": -1}, r"config.json: n_positions=-1 must be a whole number >= 1 that fits "
                                                r"in 64 bits$"),
                          # (it was named model.block_size=..., a key config.json does not hold)
                          ({"n_positions": 10**30}, r"config.json: n_positions=10{30} must be a whole number >= 1 "),
                          ({"n_embd": 30}, r"config.json: n_embd=30 is not divisible by n_head=4$"),
                          ({"tinygpt": [1, 2]}, r"config.json: the tinygpt record it holds .* is damaged"),
                          ({"tinygpt": {**record, "tokenizer": {**record["tokenizer"], "vocab_size": 37.0}}},
                           r"config.json: the tinygpt record it holds .* is damaged"),
                          ({"tinygpt": other}, r"config.json: tinygpt.config says data.tokenizer='word', its "
                                               r"tinygpt.tokenizer is 'char': the record is damaged")]:
        path.write_text(json.dumps({**config, **change}))
        with pytest.raises(UserError, match=match):
            export.main(["--from-hf", str(tmp_path / "hf"), str(back)])
        assert not back.exists()
    with pytest.raises(UserError, match=r"^--format is the export's format: it means nothing with --from-hf"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(back), "--format", "hf"])


def test_byte_level_alphabet_is_gpt2s():
    """tokenizer.json spells BPE tokens in GPT-2's byte alphabet, which `tokenizers` decodes: a byte
    spelled otherwise ('®', 0xAE, left out of the printable ranges) decodes wrong."""
    from tokenizers import decoders, pre_tokenizers
    alphabet = hf.byte_level_alphabet()
    assert sorted(alphabet) == list(range(256)) and set(alphabet.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert alphabet[0xAE] == "®" and alphabet[ord(" ")] == "Ġ"
    text = "®î naïve"
    assert decoders.ByteLevel().decode(["".join(alphabet[b] for b in text.encode())]) == text


def test_tokenizer_notes_say_what_the_ids_are():
    note = hf.tokenizer_note({"kind": "tiktoken", "vocab_size": 3, "encoding": "gpt2", "ids": [0, 5, 9]})
    assert "remapped" in note and "tokenizer.json" in note
    assert "GPT-2's own" in hf.tokenizer_note({"kind": "tiktoken", "vocab_size": 50257, "encoding": "gpt2"})
    word = hf.tokenizer_note({"kind": "word", "vocab_size": 2, "words": [" a", "b"]})
    assert "word vocabulary" in word and "tiktoken" not in word and "None" not in word
    # where the note sends a reader is a key of config.json, which records the tokenizer under tinygpt.tokenizer:
    # `tinygpt.tokenizer.merges` read as a Python name (`from tinygpt import tokenizer`), which has no such thing
    for tok in ({"kind": "char", "vocab_size": 2, "chars": "ab"}, {"kind": "word", "vocab_size": 2, "words": ["a"]},
                {"kind": "bpe", "vocab_size": 257, "merges": []},
                {"kind": "tiktoken", "vocab_size": 3, "encoding": "gpt2", "ids": [0, 5, 9]}):
        named = re.findall(r"(config\.json's )?tinygpt\.tokenizer\.(\w+)", hf.tokenizer_note(tok))
        assert named == [("config.json's ", next(k for k in tok if k not in ("kind", "vocab_size", "encoding")))], tok


# ---- parity with transformers ----


@pytest.mark.parametrize("bias", [False, True])
def test_transformers_gives_our_logits(tmp_path, bias):
    transformers = pytest.importorskip("transformers")
    run, model, _ = make_run(tmp_path, bias=bias)
    export.main([run, "--format", "hf", str(tmp_path / "hf")])
    hf_model = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf")).eval()
    diff = (logits(hf_model, 37) - logits(model, 37)).abs().max().item()
    assert diff < 1e-4, f"max abs logit difference {diff}"


def test_generation_fills_the_context_plus_one(tmp_path):
    """generation_config.json's max_length is block_size + 1: the last token is predicted from the
    block_size before it. It was block_size, so a prompt of a full context (with block_size=1, any
    prompt) was refused with `Input length of input_ids is 16, but max_length is set to 16`."""
    transformers = pytest.importorskip("transformers")
    from model import generate
    run, model, _ = make_run(tmp_path)
    export.main([run, "--format", "hf", str(tmp_path / "hf")])
    hf_model = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf")).eval()  # + generation_config.json
    prompts = torch.randint(0, 37, (1, 17), generator=torch.Generator().manual_seed(2))  # (1, 17)
    for T in (1, 16):  # no length given: up to 17 tokens in all, greedy as ours (no window slides yet)
        out = hf_model.generate(prompts[:, :T], attention_mask=torch.ones(1, T, dtype=torch.long), do_sample=False)
        ours = torch.stack(list(generate(model, prompts[:, :T], 17 - T, temperature=0)), dim=1)  # (1, 17 - T)
        assert out.shape == (1, 17) and torch.equal(out[:, T:], ours), T
    with pytest.raises(ValueError, match="Input length of input_ids is 17, but `max_length` is set to 17"):
        hf_model.generate(prompts, attention_mask=torch.ones(1, 17, dtype=torch.long), do_sample=False)


def test_eager_attention_weights_are_ours(tmp_path):
    """README_EXPORT.md: attn_implementation="eager" gives the attention weights, (1, n_head, T, T) per
    layer, tinygpt's own (the default sdpa gives none)."""
    transformers = pytest.importorskip("transformers")
    run, model, _ = make_run(tmp_path)
    export.main([run, "--format", "hf", str(tmp_path / "hf")])
    hf_model = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "hf"), attn_implementation="eager").eval()
    idx = torch.randint(0, 37, (1, 12), generator=torch.Generator().manual_seed(3))  # (1, T)
    with torch.no_grad():
        theirs = hf_model(idx, output_attentions=True).attentions  # L x (1, nh, T, T)
        ours = [trace.weights for trace in model.forward_with_attention(idx)[1]]
    assert len(theirs) == 2 and theirs[0].shape == (1, 4, 12, 12)
    assert all(torch.allclose(t, o, atol=1e-5) for t, o in zip(theirs, ours))


def test_readme_export_says_the_limits_in_tokens():
    """With block_size=1 it said `at most 1 tokens` (and that a longer prompt ends in an IndexError)."""
    cfg = Config(model=ModelConfig(block_size=1, n_layer=1, n_head=1, n_embd=8, vocab_size=3))
    tok = {"kind": "char", "vocab_size": 3, "chars": "\nab"}
    readme = hf.export_readme(cfg, tok, "`x`", "/out/hf", 0, None, "\n", "")
    assert "1 layer, 1 head," in readme and "1 tokens" not in readme
    assert "a prompt of at most 1 token continues to 2 tokens in all" in readme
    assert "but `max_length` is set to 2``" in readme and "generate.tokenizer.pad_token_id = " in readme
    # sample.py takes an accent in either Unicode form; tokenizer.json takes text as typed: said
    assert "first tries an accent's other Unicode form" in " ".join(readme.split())
    assert "stops early" not in readme and "Biases are zeros: the tinygpt model had none" in readme
    cfg.model.bias = True  # and with an end-of-text token, of a model with biases
    readme = hf.export_readme(cfg, tok, "`x`", "/out/hf", 0, 2, "\n", "")
    assert "; it stops early at token 2 (end of text)" in readme
    assert "Biases as trained." in readme and "Biases are zeros" not in readme


def test_gpt2_saved_by_transformers_imports(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=hf.GPT2_VOCAB, n_positions=32, n_embd=16, n_layer=2,
                                     n_head=2, activation_function="gelu")
    torch.manual_seed(0)
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    perturb(hf_model)
    hf_model.save_pretrained(str(tmp_path / "hf"))
    ours = hf.load_hf_gpt2(tmp_path / "hf")
    diff = (logits(ours, hf.GPT2_VOCAB, T=32) - logits(hf_model, hf.GPT2_VOCAB, T=32)).abs().max().item()
    assert diff < 1e-4, f"max abs logit difference {diff}"

    path = hf.import_hf(tmp_path / "hf", tmp_path / "run")
    ckpt = load_checkpoint(path)
    assert ckpt["tokenizer"] == {"kind": "tiktoken", "vocab_size": 50257, "encoding": "gpt2"}
    assert ckpt["config"]["data"]["tokenizer"] == "gpt2" and ckpt["config"]["data"]["compact_vocab"] is False
    assert ckpt["config"]["model"]["bias"] is True and ckpt["config"]["model"]["block_size"] == 32

    # the original GPT-2 uses the tanh GELU: it imports, with a note that logits differ slightly
    config_json = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config_json, "activation_function": "gelu_new"}))
    hf.load_hf_gpt2(tmp_path / "hf")
    assert "tanh-approximated GELU" in capsys.readouterr().err


def test_a_gpt2_sized_folder_with_another_tokenizer_is_refused(tmp_path, monkeypatch):
    """A GPT-2 retrained on another BPE of 50,257 tokens was imported with GPT-2's tokenizer without a word:
    sample.py decoded its ids as other text ('Hello worldLegendaryLegendary...'). Its own tokenizer files are
    compared with GPT-2's vocabulary: GPT-2's imports, another is refused, a damaged file is named."""
    transformers = pytest.importorskip("transformers")
    import tiktoken
    from conftest import r50k_cache
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(r50k_cache(tmp_path / "tiktoken")))
    config = transformers.GPT2Config(vocab_size=hf.GPT2_VOCAB, n_positions=16, n_embd=8, n_layer=1, n_head=2,
                                     activation_function="gelu")
    transformers.GPT2LMHeadModel(config).save_pretrained(str(tmp_path / "hf"))
    enc, alphabet = tiktoken.get_encoding("r50k_base"), hf.byte_level_alphabet()
    gpt2 = {"".join(alphabet[b] for b in enc.decode_single_token_bytes(i)): i for i in range(hf.GPT2_VOCAB - 1)}
    gpt2["<|endoftext|>"] = hf.GPT2_VOCAB - 1
    (tmp_path / "hf" / "vocab.json").write_text(json.dumps(gpt2))
    hf.import_hf(tmp_path / "hf", tmp_path / "run")  # GPT-2's own: imported
    # and with a pad added past its ids (as transformers users do): no id the model makes, still GPT-2's
    # (with merges, as transformers writes it: 1.4 MB for GPT-2's, here past 2 MB)
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(
        {"model": {"vocab": gpt2, "merges": ["a b"] * 200_000},
         "added_tokens": [{"content": "[PAD]", "id": hf.GPT2_VOCAB}]}))
    assert (tmp_path / "hf" / "tokenizer.json").stat().st_size > 2 << 20
    hf.check_gpt2_tokenizer(tmp_path / "hf")
    # a token added over one of GPT-2's ids: that id decodes as the added token, not as GPT-2's
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(
        {"model": {"vocab": gpt2}, "added_tokens": [{"content": "<|pad|>", "id": 198}]}))
    with pytest.raises(UserError, match=r"tokenizer.json: this tokenizer is not GPT-2's \(other tokens or ids\)"):
        hf.check_gpt2_tokenizer(tmp_path / "hf")
    shifted = {token: (i + 1) % hf.GPT2_VOCAB for token, i in gpt2.items()}  # another BPE's ids
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(
        {"model": {"vocab": shifted}, "added_tokens": [{"content": "<pad>", "id": hf.GPT2_VOCAB}]}))
    with pytest.raises(UserError, match=r"tokenizer.json: this tokenizer is not GPT-2's \(other tokens or ids\)"):
        hf.import_hf(tmp_path / "hf", tmp_path / "run2")
    (tmp_path / "hf" / "tokenizer.json").write_text('{"model": {"vocab": [1, 2]}}')
    with pytest.raises(UserError, match=r"tokenizer.json: not a tokenizer file tinygpt can read"):
        hf.import_hf(tmp_path / "hf", tmp_path / "run2")
    assert not (tmp_path / "run2").exists()


def test_the_current_folder_is_never_replaced_and_a_folder_keeps_its_mode(tmp_path, monkeypatch):
    # `export.py RUN .` replaced the folder the shell stood in; an existing folder lost its setgid mode
    run, _, _ = make_run(tmp_path)
    here = tmp_path / "here"
    (here / "sub").mkdir(parents=True)
    monkeypatch.chdir(here / "sub")
    with pytest.raises(UserError, match="is the current folder"):
        export.main([run, "."])
    with pytest.raises(UserError, match="holds 'sub'"):  # the folder around it, refused too
        export.main([run, ".."])
    assert (here / "sub").is_dir() and list((here / "sub").iterdir()) == []
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2770)
    export.main([run, str(shared)])
    assert stat.S_IMODE(shared.stat().st_mode) == 0o2770 and sorted(p.name for p in shared.iterdir()) == sorted(hf.HF_FILES)


# ---- fine-tuning: train.init_from of another tokenizer ----


def test_init_from_of_another_tokenizer_names_both_and_the_way_to_the_runs(tmp_path, tiny_stories_run, capsys):
    """`train.init_from=CHAR_RUN data.tokenizer=word` named only this data's tokenizer and advised
    GPT-2's vocabulary (`data.tokenizer=gpt2 data.compact_vocab=false for GPT-2 weights`) whatever the
    run's was. Now both are named, with the settings that give the run's: GPT-2's full vocabulary
    (an imported GPT-2) on any text, a learned one only from the run's own data settings."""
    import train
    from conftest import ROOT
    gpt2 = Config(model=ModelConfig(block_size=16, n_layer=1, n_head=2, n_embd=16, vocab_size=hf.GPT2_VOCAB))
    gpt2.data.tokenizer, gpt2.data.compact_vocab = "gpt2", False  # as import_hf writes an imported GPT-2
    save_checkpoint(tmp_path / "gpt2" / "ckpt.pt", {
        "config": config_to_dict(gpt2), "tokenizer": {"kind": "tiktoken", "vocab_size": hf.GPT2_VOCAB, "encoding": "gpt2"},
        "model": GPT(gpt2.model).state_dict(), "step": 0, "best_val_loss": float("inf"), "elapsed_s": 0.0})
    base = [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", "data.stories_chars=20000", "train.device=cpu",
            f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={tmp_path / 'tuned'}"]
    for init, tokenizer, why in [
            (tiny_stories_run, "word", r"\(the run's: char, \d+ tokens; this data's: word, \d+ tokens\); the run's "
                                       r"vocabulary comes from its own data: prepare this data as it did, "
                                       r"--set data.tokenizer=char"),
            (tmp_path / "gpt2", "char", r"\(the run's: gpt2, 50257 tokens; this data's: char, \d+ tokens\); prepare "
                                        r"the data with the run's: --set data.tokenizer=gpt2 data.compact_vocab=false")]:
        with pytest.raises(UserError) as refused:
            train.main([*base, f"data.tokenizer={tokenizer}", f"train.init_from={init}"])
        assert re.fullmatch(f"train.init_from='{re.escape(str(init))}' was trained with another tokenizer or "
                            f"vocabulary than this data {why}", str(refused.value)), str(refused.value)
        # the refusal is all it says: "starting from ..." was printed first, of a start that never came
        assert "starting from" not in capsys.readouterr().out
    assert not (tmp_path / "tuned").exists()


# ---- gaps found by a mutation audit ----


def test_config_json_and_generation_config_json_give_the_same_special_tokens(tmp_path):
    """A char vocabulary has no end-of-text token: config.json's eos (which anything rebuilding the generation
    config reads) must be None, as generation_config.json's, not the start token."""
    _, config = export_run(tmp_path)
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    assert config["eos_token_id"] is None and generation["eos_token_id"] is None
    assert config["bos_token_id"] == generation["bos_token_id"] is not None


def test_an_export_into_the_folder_of_a_run_that_keeps_only_best_pt_is_refused(tmp_path):
    """Any of a run's files makes its folder the run directory, not only ckpt.pt."""
    run, _, _ = make_run(tmp_path)
    shutil.move(f"{run}/ckpt.pt", f"{run}/best.pt")
    with pytest.raises(UserError, match=f"output folder {run}/hf is inside the run directory {run}"):
        export.main([f"{run}/best.pt", f"{run}/hf"])
    assert sorted(p.name for p in Path(run).iterdir()) == ["best.pt"]


def test_a_one_dimensional_attn_bias_is_a_weight_not_a_mask_buffer(tmp_path):
    """Only the old mask buffers (4-D attn.bias, a scalar masked_bias) are skipped: a 1-D h.0.attn.bias is a
    tensor config.json's model has not, refused, not dropped."""
    run, _, _ = make_run(tmp_path)
    export.main([run, str(tmp_path / "hf")])
    tensors = hf.load_safetensors(tmp_path / "hf" / "model.safetensors")
    hf.save_safetensors(tmp_path / "hf" / "model.safetensors", {**tensors, "transformer.h.0.attn.bias": torch.ones(32)})
    with pytest.raises(UserError, match="the weights hold 'h.0.attn.bias', which config.json's model"):
        hf.load_hf_gpt2(tmp_path / "hf")


def test_an_export_deep_inside_its_run_directory_is_refused(tmp_path):
    """Not only the run directory's own folders: any folder below it would mix with the run."""
    run, _, _ = make_run(tmp_path)
    with pytest.raises(UserError, match=f"output folder {run}/exports/hf is inside the run directory {run}"):
        export.main([run, f"{run}/exports/hf"])
    assert sorted(p.name for p in Path(run).iterdir()) == ["ckpt.pt"]


def test_an_import_never_replaces_the_folder_around_the_current_one(tmp_path, monkeypatch):
    """From OUT/tensorboard (a run's own folder name, so --force would take OUT as an earlier run),
    `--from-hf HF .. --force` would replace OUT whole, the folder the shell stands in with it."""
    run, _ = export_run(tmp_path)
    here = tmp_path / "out" / "tensorboard"
    here.mkdir(parents=True)
    (here / "events.out").write_text("keep me")
    monkeypatch.chdir(here)
    with pytest.raises(UserError, match=r"output folder \.\. holds the current folder"):
        export.main(["--from-hf", str(tmp_path / "hf"), "..", "--force"])
    assert (here / "events.out").read_text() == "keep me"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tensorboard"]


def test_import_refuses_attention_tinygpt_lacks(tmp_path):
    """Attention scaled by 1/layer or with cross-attention: GPT-2 variants tinygpt's GPT cannot compute."""
    run, config = export_run(tmp_path)
    for change, what in [({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=true"),
                         ({"add_cross_attention": True}, "add_cross_attention=true"),
                         ({"scale_attn_weights": False}, "scale_attn_weights=false")]:  # (no 1/sqrt(hs): other maths)
        (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(UserError, match=f"config.json: {what} cannot be represented by tinygpt's GPT"):
            hf.load_hf_gpt2(tmp_path / "hf")


def test_pytorch_model_bin_of_an_old_gpt2_imports_without_its_mask_buffers(tmp_path):
    """Older transformers saved each layer's causal mask (attn.bias, (1, 1, T, T)) and masked_bias (a
    scalar) with the weights: they are no weights, and are skipped, not called extra tensors."""
    run, model, _ = make_run(tmp_path)
    export.main([run, str(tmp_path / "hf")])
    tensors = hf.load_safetensors(tmp_path / "hf" / "model.safetensors")
    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(tmp_path / "hf" / "config.json", old / "config.json")
    buffers = {}
    for i in range(2):
        buffers[f"h.{i}.attn.bias"] = torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16)
        buffers[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save({**{k.removeprefix("transformer."): v for k, v in tensors.items()}, **buffers},
               old / "pytorch_model.bin")
    assert torch.equal(logits(hf.load_hf_gpt2(old), 37), logits(model, 37))


def test_import_says_what_is_wrong_with_the_weight_files(tmp_path):
    """A sharded checkpoint and a pytorch_model.bin that holds no dict of tensors: one line each."""
    run, _ = export_run(tmp_path)
    folder = tmp_path / "other"
    folder.mkdir()
    shutil.copy(tmp_path / "hf" / "config.json", folder / "config.json")
    (folder / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(UserError, match=r"holds a sharded checkpoint \(model.safetensors.index.json\), which is not "
                                        r"supported; save it as one file"):
        hf.load_hf_gpt2(folder)
    # shards beside an older pytorch_model.bin (a sharded save into its folder): transformers loads the shards,
    # the import took the .bin's weights without a word
    shutil.copy(tmp_path / "hf" / "model.safetensors", tmp_path / "weights.safetensors")
    torch.save(hf.load_safetensors(tmp_path / "weights.safetensors"), folder / "pytorch_model.bin")
    with pytest.raises(UserError, match=r"holds a sharded checkpoint \(model.safetensors.index.json\), which is not "
                                        r"supported, and which transformers loads before its pytorch_model.bin; "):
        hf.load_hf_gpt2(folder)
    (folder / "model.safetensors.index.json").unlink()
    for content in ([torch.zeros(2)], {"wte.weight": [1.0, 2.0]}):  # (no dict; a dict of lists, not tensors)
        torch.save(content, folder / "pytorch_model.bin")
        with pytest.raises(UserError, match="pytorch_model.bin does not hold a dict of named tensors"):
            hf.load_hf_gpt2(folder)


def test_one_extra_tensor_is_named_alone(tmp_path):
    run, _ = export_run(tmp_path)
    weights = hf.load_safetensors(tmp_path / "hf" / "model.safetensors")
    weights["transformer.h.0.attn.extra"] = torch.zeros(2)
    hf.save_safetensors(tmp_path / "hf" / "model.safetensors", weights)
    with pytest.raises(UserError) as err:
        hf.load_hf_gpt2(tmp_path / "hf")
    assert str(err.value) == (f"{tmp_path / 'hf'}: the weights hold 'h.0.attn.extra', which config.json's model "
                              f"(2 layers, n_embd 32) has not; config.json and the weights disagree")
    weights["transformer.h.9.ln_1.weight"] = torch.zeros(2)  # two: the first named, the other counted
    hf.save_safetensors(tmp_path / "hf" / "model.safetensors", weights)
    with pytest.raises(UserError, match=r"the weights hold 'h.0.attn.extra' \(and 1 more\), which config.json's"):
        hf.load_hf_gpt2(tmp_path / "hf")


def test_a_recorded_tokenizer_of_another_vocabulary_size_is_not_used(tmp_path):
    """config.json's model has 37 tokens, its tinygpt.tokenizer 36 (consistent on its own): the
    import would write a run whose model makes ids its tokenizer cannot decode."""
    run, config = export_run(tmp_path)
    tokenizer = {"kind": "char", "vocab_size": 36, "chars": CHARS[:36]}
    config["tinygpt"]["tokenizer"] = tokenizer
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="records no tinygpt tokenizer of 37 tokens"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert not (tmp_path / "back").exists()


def test_every_tanh_gelu_gets_the_note_and_the_exact_one_none(tmp_path, capsys):
    run, config = export_run(tmp_path)
    capsys.readouterr()
    hf.load_hf_gpt2(tmp_path / "hf")  # our export: the exact GELU
    assert capsys.readouterr().err == ""
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "activation_function": "gelu_pytorch_tanh"}))
    hf.load_hf_gpt2(tmp_path / "hf")
    assert "tanh-approximated GELU ('gelu_pytorch_tanh')" in capsys.readouterr().err
    del config["activation_function"]  # (left out: GPT2Config's default, the tanh one)
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    hf.load_hf_gpt2(tmp_path / "hf")
    assert "tanh-approximated GELU ('gelu_new')" in capsys.readouterr().err


def test_dropout_goes_to_gpt2_and_back(tmp_path):
    run, _, _ = make_run(tmp_path)
    ckpt = load_checkpoint(Path(run) / "ckpt.pt")
    ckpt["config"]["model"]["dropout"] = 0.2
    save_checkpoint(Path(run) / "ckpt.pt", ckpt)
    export.main([run, str(tmp_path / "hf")])
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["resid_pdrop"] == config["embd_pdrop"] == config["attn_pdrop"] == 0.2
    export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert load_model(tmp_path / "back")[1].model.dropout == 0.2
    del config["resid_pdrop"], config["tinygpt"]["config"]["model"]["dropout"]  # (left out: GPT2Config's 0.1)
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back2")])
    assert load_model(tmp_path / "back2")[1].model.dropout == 0.1


def test_tokenizer_config_truncates_to_the_models_context_and_keeps_the_spaces(tmp_path):
    """model_max_length past the model's positions: a tokenizer truncating to it gave the model one position
    too many (IndexError); clean_up_tokenization_spaces on: a word-level run's decode(encode("a , b")) read "a, b"."""
    run, config = export_run(tmp_path)
    tok_config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert tok_config["model_max_length"] == config["n_positions"] == 16
    assert tok_config["clean_up_tokenization_spaces"] is False


def test_generation_config_samples_as_sample_py_does(tmp_path):
    """generation_config.json: sample.py's default temperature, and no top-k (0 to transformers), as sample.py."""
    import sample
    run, _ = export_run(tmp_path)
    gen = json.loads((tmp_path / "hf" / "generation_config.json").read_text())
    parser = sample.build_parser()
    assert parser.get_default("temperature") == 0.8 and parser.get_default("top_k") is None
    assert gen["do_sample"] is True and gen["temperature"] == 0.8 and gen["top_k"] == 0


@pytest.mark.parametrize("closed", [True, False])
def test_only_a_vocabulary_made_before_closing_gets_the_caution(tmp_path, monkeypatch, capsys, closed):
    """A compact tiktoken vocabulary saved before vocabularies were closed under BPE merges is exported
    with a caution (stderr and README_EXPORT.md); a closed one, the one made now, without."""
    import tiktoken
    from tinygpt import tokenizer as tk
    ranks = {**{bytes([b]): b for b in range(256)}, b"ab": 256, b"abc": 257}
    toy = tiktoken.Encoding("toy", pat_str=r" ?\w+| ?[^\w\s]+|\s+", mergeable_ranks=ranks, special_tokens={})
    monkeypatch.setattr(tk, "get_tiktoken_encoding", lambda name: toy)
    monkeypatch.setattr(tk, "tiktoken_names", lambda names=tk.tiktoken_names(): [*names, "toy"])
    tokenizer = tk.TiktokenTokenizer("toy", list(range(258)), closed=closed)
    cfg = Config(model=ModelConfig(block_size=8, n_layer=1, n_head=2, n_embd=16, vocab_size=258))
    save_checkpoint(tmp_path / "run" / "ckpt.pt", {"config": config_to_dict(cfg), "tokenizer": tokenizer.to_dict(),
                                                   "model": GPT(cfg.model).state_dict(), "step": 0})
    capsys.readouterr()
    export.main([str(tmp_path / "run"), str(tmp_path / "hf")])
    err, readme = capsys.readouterr().err, (tmp_path / "hf" / "README_EXPORT.md").read_text()
    assert ("made before compact vocabularies were closed" in err) is not closed
    assert ("- Caution: this run's compact vocabulary" in readme) is not closed


def test_bpe_tokenizer_json_gives_tiktokens_ids_where_merges_never_form_a_token():
    """Real encodings hold tokens BPE never forms from their bytes; here abcd (b+c merges first, and no
    token joins a+bc or bc+d). tiktoken takes a piece that is a token whole, and else never makes it:
    tokenizer.json must do both. Also: the full vocabulary starts and ends at <|endoftext|>, and every
    single-byte token decodes as ours does."""
    import tiktoken
    from tinygpt import tokenizer as tk
    ranks = {**{bytes([b]): b for b in range(256)}, b"bc": 256, b"ab": 257, b"cd": 258, b"abcd": 259}
    toy = tiktoken.Encoding("toy", pat_str=r" ?\w+|\s+|[^\w\s]+", mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 260})
    ours = tk.TiktokenTokenizer("toy", None, toy)
    theirs = hf.hf_tokenizer(ours)
    assert ours.encode("abcd") == [259] and ours.encode("abcdx") == [97, 256, 100, 120]
    for text in ["abcd", "abcdx", "xabcd ab cd", "ab abcd bcd", "ÿ þ"]:
        assert theirs.encode(text).ids == ours.encode(text), text
    assert [theirs.decode([b]) for b in range(256)] == [ours.decode([b]) for b in range(256)]
    assert hf.start_and_end_ids(ours) == (260, 260)


def test_a_special_token_spelled_like_a_bpe_token_is_refused():
    """A full vocabulary whose <|endoftext|> is also a BPE token's spelling: tokenizer.json would give the one
    spelling one id, and the other id would decode as nothing."""
    import tiktoken
    from tinygpt import tokenizer as tk
    ranks = {bytes([b]): b for b in range(256)}
    for n in range(2, len(b"<|endoftext|>") + 1):  # <|, <|e, ... <|endoftext|>: each a merge of the last
        ranks[b"<|endoftext|>"[:n]] = len(ranks)
    toy = tiktoken.Encoding("toy", pat_str=r"\S+|\s+", mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": len(ranks)})
    ours = tk.TiktokenTokenizer("toy", None, toy)
    assert ours.encode("<|endoftext|>") == [len(ranks) - 1]
    with pytest.raises(UserError, match=r"a special token of 'toy' is spelled like one of its BPE tokens"):
        hf.hf_tokenizer(ours)


def test_a_recorded_tiktoken_vocabulary_of_another_size_is_refused(tmp_path):
    """vocab_size 37 (the model's) but 256 ids listed: imported, sample.py would refuse the run."""
    run, config = export_run(tmp_path)
    config["tinygpt"]["tokenizer"] = {"kind": "tiktoken", "vocab_size": 37, "encoding": "gpt2", "ids": list(range(256)),
                                      "closed": True}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="damaged .*says vocab_size=37 but lists 256 ids"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert not (tmp_path / "back").exists()


def test_a_damaged_tokenizer_record_advises_exporting_again_not_preparing_data(tmp_path):
    run, config = export_run(tmp_path)
    config["tinygpt"]["tokenizer"] = {"kind": "char", "vocab_size": 37, "chars": "ab"}
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError) as err:
        export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    assert str(err.value) == (f"{tmp_path / 'hf' / 'config.json'}: the tinygpt.tokenizer it records is damaged "
                              f"(tokenizer data says vocab_size=37 but rebuilds with 2 tokens); export the run again")


def test_an_empty_output_folder_gets_a_hint_export_takes():
    """`export.py RUN ''` said "name one (. for the current folder)", and `.` is then refused: the
    output replaces its folder whole."""
    with pytest.raises(UserError, match=r"an empty path names no folder; name a new one \(the output takes") as info:
        export.main(["some_run", ""])
    assert "current folder" not in str(info.value)
    with pytest.raises(UserError, match=r"\. for the current folder"):  # the run it reads may be .
        export.main(["", "hf"])


def test_an_export_folder_name_too_long_for_its_temp_folder_is_refused_naming_it(tmp_path):
    """A folder name of 240 bytes (mkdir takes it) failed with `File name too long: .hhh...hhh.2516.n6wtxlml.tmp`,
    a temp folder the user never named. The name and its limit are said; nothing is left."""
    pytest.importorskip("safetensors")
    run, _, _ = make_run(tmp_path)
    long = tmp_path / "out" / ("h" * 250)
    with pytest.raises(UserError, match=r"cannot write .*: its name is 250 bytes, and the temp folder it is written "
                                        r"through adds \d+: give a name of at most \d+ bytes"):
        export.main([run, str(long)])
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    export.main([run, str(tmp_path / "out" / ("h" * 230))])
    assert (tmp_path / "out" / ("h" * 230) / "config.json").is_file()


def test_an_export_never_takes_a_lock_file_for_its_own(tmp_path):
    """A `.lock` is a run's file: a run directory (IMPORT_FILES) may hold a killed run's, an export folder
    never does, so an export into a folder holding one is refused as a stranger's, even with --force."""
    from tinygpt.runs import LOCK
    run, _, _ = make_run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text("1\n")
    with pytest.raises(UserError, match=f"holds {re.escape(repr(LOCK))}, which is not one of the files written here"):
        export.main([run, str(out), "--force"])
    assert sorted(p.name for p in out.iterdir()) == [LOCK]


def test_a_gpt2_sized_folders_tokenizer_is_compared_offline(tmp_path, monkeypatch):
    """check_gpt2_tokenizer without GPT-2's ranks (the test above needs them): a stand-in vocabulary of 50,257
    tokens as GPT-2's. Its ids below GPT2_VOCAB, tokenizer.json's added tokens included, are compared with it;
    vocab_digest hashes 'id<TAB>token' lines in id order."""
    gpt2 = {f"t{i}": i for i in range(hf.GPT2_VOCAB)}
    monkeypatch.setattr(hf, "GPT2_VOCAB_DIGEST", hf.vocab_digest(gpt2))
    assert hf.vocab_digest({"b": 0, "a": 1, "c": 10}) == hashlib.sha256(b"0\tb\n1\ta\n10\tc").hexdigest()
    (tmp_path / "vocab.json").write_text(json.dumps(gpt2))
    hf.check_gpt2_tokenizer(tmp_path)  # the same: accepted

    def write(vocab, added):
        (tmp_path / "tokenizer.json").write_text(json.dumps(
            {"model": {"vocab": vocab}, "added_tokens": [{"content": t, "id": i} for t, i in added]}))
    write(gpt2, [("[PAD]", hf.GPT2_VOCAB)])  # a pad past GPT-2's ids: no id the model makes
    hf.check_gpt2_tokenizer(tmp_path)
    for vocab, added in [(gpt2, [("<|pad|>", 198)]),  # an added token over one of its ids
                         ({t: (i + 1) % hf.GPT2_VOCAB for t, i in gpt2.items()}, [])]:  # other ids
        write(vocab, added)
        with pytest.raises(UserError, match=r"tokenizer.json: this tokenizer is not GPT-2's \(other tokens or ids\)"):
            hf.check_gpt2_tokenizer(tmp_path)


def test_config_json_gives_the_context_as_n_ctx_too_and_readme_names_the_pad_text(tmp_path):
    """n_ctx (GPT-2's older name for the context, which other GPT-2 readers still take) is n_positions; the
    README's batch advice names the start token's text, the pad whose every copy a saved pad token drops."""
    _, config = export_run(tmp_path)
    assert config["n_ctx"] == config["n_positions"] == 16
    chars = config["tinygpt"]["tokenizer"]["chars"]
    readme = (tmp_path / "hf" / "README_EXPORT.md").read_text()
    assert f"(id {config['bos_token_id']}, {chars[config['bos_token_id']]!r})" in readme


def test_config_json_records_the_exported_step(tmp_path):
    """tinygpt.step in config.json is the checkpoint's step, not a constant."""
    run, config = export_run(tmp_path)
    assert config["tinygpt"]["step"] == load_checkpoint(Path(run) / "ckpt.pt")["step"] != 0


def test_an_import_is_a_fresh_run_at_step_0_with_no_best_loss(tmp_path):
    """The imported checkpoint starts as a new run: step 0, best_val_loss inf (any finite value would stop
    train.py from saving a better best.pt)."""
    export_run(tmp_path)
    path = export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    ckpt = load_checkpoint(path)
    assert ckpt["step"] == 0 and ckpt["best_val_loss"] == float("inf")


def test_force_replaces_a_link_named_like_a_file_and_keeps_what_it_points_to(tmp_path):
    """A symlink named config.json that points to a folder is a link, not a folder of the user's: --force
    replaces it (the folder it points to is untouched)."""
    run, _, _ = make_run(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("x")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").symlink_to(theirs, target_is_directory=True)
    export.main([run, str(out), "--force"])
    assert (out / "config.json").is_file() and not (out / "config.json").is_symlink()
    assert (theirs / "keep.txt").read_text() == "x"


def test_a_sharded_pytorch_model_bin_is_named_sharded_not_missing(tmp_path):
    """pytorch_model.bin.index.json (a sharded .bin save) alone: the import says sharded, not that no weights exist."""
    export_run(tmp_path)
    folder = tmp_path / "hf"
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin.index.json").write_text("{}")
    with pytest.raises(UserError, match="holds a sharded checkpoint, which is not supported"):
        export.main(["--from-hf", str(folder), str(tmp_path / "back")])


def test_a_full_tiktoken_vocabulary_gets_no_caution(tmp_path, monkeypatch, capsys):
    """The caution is for compact vocabularies saved before closing; a full vocabulary (ids None) whose record
    has no `closed` key (as import_hf writes GPT-2's) is exported without it."""
    import tiktoken
    from tinygpt import tokenizer as tk
    ranks = {**{bytes([b]): b for b in range(256)}, b"ab": 256, b"abc": 257}
    toy = tiktoken.Encoding("toy", pat_str=r" ?\w+| ?[^\w\s]+|\s+", mergeable_ranks=ranks, special_tokens={})
    monkeypatch.setattr(tk, "get_tiktoken_encoding", lambda name: toy)
    monkeypatch.setattr(tk, "tiktoken_names", lambda names=tk.tiktoken_names(): [*names, "toy"])
    cfg = Config(model=ModelConfig(block_size=8, n_layer=1, n_head=2, n_embd=16, vocab_size=258))
    record = {"kind": "tiktoken", "vocab_size": 258, "encoding": "toy"}
    assert tk.tokenizer_from_dict(record).ids is None
    save_checkpoint(tmp_path / "run" / "ckpt.pt", {"config": config_to_dict(cfg), "tokenizer": record,
                                                   "model": GPT(cfg.model).state_dict(), "step": 0})
    capsys.readouterr()
    export.main([str(tmp_path / "run"), str(tmp_path / "hf")])
    assert "closed" not in capsys.readouterr().err
    assert "Caution" not in (tmp_path / "hf" / "README_EXPORT.md").read_text()


def test_format_means_nothing_with_from_hf_and_is_refused(tmp_path):
    export_run(tmp_path)
    with pytest.raises(UserError, match="--format is the export's format"):
        export.main(["--from-hf", str(tmp_path / "hf"), str(tmp_path / "back"), "--format", "hf"])
    assert not (tmp_path / "back").exists()


@pytest.mark.parametrize("kind", ["tiktoken", "char"])
def test_an_imported_tiktoken_run_is_told_it_needs_the_encoding_file(tmp_path, monkeypatch, capsys, kind):
    """The import's message names TIKTOKEN_CACHE_DIR for a tiktoken tokenizer only (sample.py needs its file)."""
    monkeypatch.setattr(export, "import_hf", lambda src, out, force: Path(out) / "ckpt.pt")
    monkeypatch.setattr(export, "load_checkpoint", lambda path: {
        "config": {"model": {"n_layer": 1, "n_head": 2, "n_embd": 16}},
        "tokenizer": {"kind": kind, "vocab_size": 50257}})
    (tmp_path / "gpt2").mkdir()
    export.main(["--from-hf", str(tmp_path / "gpt2"), str(tmp_path / "run")])
    assert ("TIKTOKEN_CACHE_DIR" in capsys.readouterr().out) is (kind == "tiktoken")

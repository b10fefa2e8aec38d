"""Guards tinygpt/config.py: YAML -> typed dataclasses, `--set` overrides, and validation.

Defaults load; file values land in the dataclasses with their types (ints and YAML 1.1's string
'1e-3' accepted for floats); `--set` parses dotted keys and YAML scalars and wins over the file;
unknown keys, wrong types and impossible values are UserErrors that name the key, the file and the
fix; `!!python/...` tags are refused without running anything; missing, malformed or non-mapping
files are UserErrors; config_to_dict -> config_from_dict round-trips.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import time

import pytest
import yaml

from model import ModelConfig
from tinygpt.config import (DEVICE_RULE, RUN_HEADER, Config, DataConfig, LimitedSafeLoader, TrainConfig, all_keys,
                            config_from_dict, config_to_dict, config_to_yaml, flat_config, is_run_config, is_run_header,
                            load_config, parse_overrides, same_path, yaml_load)
from tinygpt.errors import UserError
from conftest import ROOT


def write(tmp_path, text: str, name: str = "cfg.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def user_error(path, overrides=()) -> str:
    """load_config must refuse: return the message (one line)."""
    with pytest.raises(UserError) as info:
        load_config(path, overrides)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ---- defaults and file values ----


def test_empty_file_gives_the_defaults(tmp_path):
    cfg = load_config(write(tmp_path, ""))
    assert cfg == Config()
    assert cfg.model == ModelConfig() and cfg.data == DataConfig() and cfg.train == TrainConfig()
    assert (cfg.model.n_head, cfg.data.tokenizer, cfg.train.device) == (4, "char", "auto")


def test_every_field_has_a_default_and_a_dotted_key():
    keys = all_keys()
    assert "model.n_head" in keys and "data.val_fraction" in keys and "train.lr" in keys
    assert len(keys) == sum(len(dataclasses.fields(c)) for c in (ModelConfig, DataConfig, TrainConfig))


def test_file_values_land_in_the_dataclasses(tmp_path):
    path = write(tmp_path, """
model: {block_size: 16, n_layer: 2, n_head: 2, n_embd: 32, dropout: 0.1, bias: true, causal: false}
data: {dataset: some/file.txt, tokenizer: gpt2, val_fraction: 0.2}
train: {out_dir: runs/x, batch_size: 4, lr: 0.01, min_lr: 0.001, device: cpu, dtype: bfloat16, compile: true}
""")
    cfg = load_config(path)
    assert cfg.model == ModelConfig(block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.1,
                                    bias=True, causal=False)
    assert (cfg.data.dataset, cfg.data.tokenizer, cfg.data.val_fraction) == ("some/file.txt", "gpt2", 0.2)
    assert (cfg.train.out_dir, cfg.train.batch_size, cfg.train.device, cfg.train.dtype) == \
        ("runs/x", 4, "cpu", "bfloat16")
    assert cfg.train.compile is True
    assert cfg.train.max_iters == TrainConfig().max_iters  # untouched keys keep their defaults


def test_an_empty_section_keeps_its_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "model:\ntrain: {batch_size: 3}\n"))
    assert cfg.model == ModelConfig() and cfg.train.batch_size == 3


def test_int_is_accepted_for_a_float_field(tmp_path):
    cfg = load_config(write(tmp_path, "train: {lr: 1, min_lr: 0, grad_clip: 2}\nmodel: {dropout: 0}\n"))
    assert cfg.train.lr == 1.0 and isinstance(cfg.train.lr, float)
    assert cfg.train.min_lr == 0.0 and isinstance(cfg.train.min_lr, float)
    assert isinstance(cfg.train.grad_clip, float) and isinstance(cfg.model.dropout, float)


def test_yaml_1_1_string_1e_3_is_accepted_for_a_float_field(tmp_path):
    assert yaml.safe_load("lr: 1e-3")["lr"] == "1e-3"  # why the coercion exists: no dot -> a string
    cfg = load_config(write(tmp_path, "train: {lr: 1e-3, min_lr: 1e-4}\n"))
    assert cfg.train.lr == pytest.approx(1e-3) and isinstance(cfg.train.lr, float)
    assert cfg.train.min_lr == pytest.approx(1e-4)


# ---- --set overrides ----


def test_parse_overrides_reads_yaml_scalars():
    nested = parse_overrides(["model.n_head=8", "model.bias=true", "train.lr=0.5", "train.device=cpu",
                              "data.dataset=my corpus.txt", "train.out_dir=out/a=b"])
    assert nested == {"model": {"n_head": 8, "bias": True},
                      "train": {"lr": 0.5, "device": "cpu", "out_dir": "out/a=b"},
                      "data": {"dataset": "my corpus.txt"}}
    assert type(nested["model"]["n_head"]) is int and type(nested["model"]["bias"]) is bool


def test_set_overrides_land_typed(tmp_path):
    cfg = load_config(write(tmp_path, ""), ["model.n_head=8", "model.causal=false", "train.lr=3e-4",
                                            "train.min_lr=0", "train.device=cpu", "data.tokenizer=gpt2"])
    assert cfg.model.n_head == 8 and cfg.model.causal is False
    assert cfg.train.lr == pytest.approx(3e-4) and isinstance(cfg.train.lr, float)
    assert cfg.train.min_lr == 0.0 and cfg.train.device == "cpu" and cfg.data.tokenizer == "gpt2"


def test_set_wins_over_the_file_and_keeps_its_other_keys(tmp_path):
    path = write(tmp_path, "model: {n_layer: 2, n_embd: 64, n_head: 2}\ntrain: {batch_size: 5}\n")
    cfg = load_config(path, ["model.n_layer=3", "model.n_head=4"])
    assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) == (3, 4, 64)
    assert cfg.train.batch_size == 5
    assert load_config(path, ["model.n_layer=3", "model.n_layer=5"]).model.n_layer == 5  # last wins


def test_set_can_fill_a_section_the_file_leaves_empty(tmp_path):
    cfg = load_config(write(tmp_path, "model:\n"), ["model.n_layer=1"])
    assert cfg.model.n_layer == 1


@pytest.mark.parametrize("item", ["model.n_head", "n_head=8", "model.attn.n_head=8", "=8", "model=3"])
def test_malformed_set_is_refused(tmp_path, item):
    message = user_error(write(tmp_path, ""), [item])
    assert item in message and "SECTION.KEY=VALUE" in message


def test_set_value_that_is_not_yaml_is_refused(tmp_path):
    message = user_error(write(tmp_path, ""), ["train.out_dir=[1"])
    assert "train.out_dir=[1" in message and "YAML" in message


def test_set_with_wrong_type_names_key_and_source(tmp_path):
    path = write(tmp_path, "")
    message = user_error(path, ["model.n_layer=four"])
    assert "model.n_layer" in message and "int" in message and str(path) in message and "--set" in message


# ---- unknown keys ----


def test_unknown_key_in_file_suggests_the_closest(tmp_path):
    path = write(tmp_path, "model: {n_heads: 4}\n")
    message = user_error(path)
    assert "model.n_heads" in message and str(path) in message and "did you mean 'model.n_head'" in message


def test_unknown_key_via_set_suggests_the_closest(tmp_path):
    path = write(tmp_path, "")
    message = user_error(path, ["train.learning_rat=0.1"])
    assert "train.learning_rat" in message and str(path) in message
    assert user_error(path, ["model.n_embed=64"]).endswith("did you mean 'model.n_embd'?")
    # upper case: letter for letter, 'model.N_LAYER' was nearest to 'model.n_head', 'data.TOKENIZER' to nothing
    assert user_error(path, ["model.N_LAYER=2"]).endswith("did you mean 'model.n_layer'?")
    assert user_error(path, ["data.TOKENIZER=char"]).endswith("did you mean 'data.tokenizer'?")
    assert user_error(write(tmp_path, "MODEL: {n_layer: 2}\n", "c.yaml")).endswith("did you mean 'model'?")


@pytest.mark.parametrize("key, hint", [
    ("model.batch_size=64", "did you mean 'train.batch_size'?"),  # (was model.block_size: another context length)
    ("train.block_size=256", "did you mean 'model.block_size'?"),  # (was train.batch_size)
    ("train.n_layer=2", "did you mean 'model.n_layer'?"),  # (was train.min_lr)
    ("model.lr=0.1", "did you mean 'train.lr'?"),
    ("model.N_LAYER=2", "did you mean 'model.n_layer'?"),
    ("n_layer.model=2", "did you mean 'model.n_layer'?"),  # (was "'model' is a section of its own, not a key of ...")
])
def test_a_key_of_another_section_is_suggested_there(tmp_path, key, hint):
    """A real key in the wrong section was sent to the key nearest in spelling: `model.batch_size=64`
    to model.block_size, which trains (a context of 64) without a word."""
    assert user_error(write(tmp_path, ""), [key]).endswith(hint)


@pytest.mark.parametrize("text, hint", [
    ("n_layer: 1\n", "it is a key of section model: nest it, 'model:' with 'n_layer: ...' indented under it"),
    ("model:\n  n_layer: 1\n  train:\n    lr: 1\n",
     "'train' is a section of its own, not a key of model: write it unindented, at the top level"),
])
def test_a_key_or_section_at_the_wrong_depth_is_said_so(tmp_path, text, hint):
    """`n_layer: 1` at the top of a file said only 'valid sections'; a section nested in another was
    sent to `model.bias`."""
    assert user_error(write(tmp_path, text)).endswith(hint)


def test_unknown_section_is_refused(tmp_path):
    path = write(tmp_path, "optim: {lr: 0.1}\n")
    message = user_error(path)
    assert "'optim'" in message and str(path) in message and "model, data, train" in message
    message = user_error(write(tmp_path, "", "b.yaml"), ["optimizer.lr=0.1"])
    assert "optimizer.lr" in message and "--set" in message


def test_misspelled_section_suggests_the_section(tmp_path):
    path = write(tmp_path, "modle: {n_head: 4}\n")
    message = user_error(path)
    assert "'modle'" in message and str(path) in message
    assert "did you mean 'model'?" in message


# ---- wrong types ----


@pytest.mark.parametrize("text, key, expected", [
    ('model: {n_layer: "four"}', "model.n_layer", "int"),
    ("model: {causal: 3}", "model.causal", "bool"),
    ("model: {n_layer: true}", "model.n_layer", "int"),  # bool is not an int here
    ("model: {n_layer: 2.0}", "model.n_layer", "int"),
    ("train: {lr: fast}", "train.lr", "float"),
    ("train: {lr: true}", "train.lr", "float"),
    ("train: {device: 0}", "train.device", "str"),
    ("data: {dataset: [a, b]}", "data.dataset", "str"),
    ("data: {dataset: null}", "data.dataset", "str"),
])
def test_wrong_type_names_key_file_and_expected_type(tmp_path, text, key, expected):
    path = write(tmp_path, text + "\n")
    message = user_error(path)
    assert key in message and str(path) in message and f"must be of type {expected}" in message


def test_section_that_is_not_a_mapping_is_refused(tmp_path):
    path = write(tmp_path, "model: [1, 2]\n")
    message = user_error(path)
    assert "'model'" in message and str(path) in message and "mapping" in message


@pytest.mark.parametrize("text, expected", [
    # a hex or binary integer escapes Python's 4300-digit limit when read, not when printed: a traceback
    ("model:\n  ? 0x" + "f" * 5000 + "\n  : 1\n", "a config key in section 'model' (PATH) is an integer of 20000 bits"),
    ("? 0b" + "1" * 20000 + "\n: 1\n", "a config section (PATH) is an integer of 20000 bits"),
    ("model:\n  1: 2\n", "a config key in section 'model' (PATH) is 1"),
    ("true: {}\n", "a config section (PATH) is true"),
    ("model:\n  null: 2\n", "a config key in section 'model' (PATH) is null"),
])
def test_a_key_that_is_not_a_name_is_refused(tmp_path, text, expected):
    path = write(tmp_path, text)
    message = user_error(path)
    assert message.startswith(expected.replace("PATH", str(path)) + ", not a name; ")


# ---- impossible values ----


@pytest.mark.parametrize("text, expected", [
    ("model: {n_embd: 100, n_head: 3}", ["model.n_embd=100", "model.n_head=3", "valid n_head: 1, 2, 4, 5, 10"]),
    ("model: {n_embd: 32, n_head: 5}", ["model.n_head=5", "valid n_head: 1, 2, 4, 8, 16, 32"]),
    # the hint's divisors were searched up to n_embd: minutes at 10**9, years here (2**40 + 1 = 257 * 4278255361)
    ("model: {n_embd: 1099511627777, n_head: 2}", ["model.n_embd=1099511627777", "valid n_head: 1, 257, ..."]),
    ("model: {dropout: 1.0}", ["model.dropout=1.0", "[0, 1)"]),
    ("model: {dropout: -0.1}", ["model.dropout"]),
    ("model: {n_layer: 0}", ["model.n_layer=0", ">= 1"]),
    ("model: {block_size: -4}", ["model.block_size"]),
    ("data: {val_fraction: 0}", ["data.val_fraction=0.0", "(0, 1)"]),
    ("data: {val_fraction: 1}", ["data.val_fraction"]),
    ("data: {dataset: '  '}", ["data.dataset"]),
    ("train: {lr: 0.001, min_lr: 0.01}", ["train.min_lr=0.01", "train.lr=0.001", "e.g. train.min_lr=0.0001"]),
    ("train: {lr: 0}", ["train.lr=0.0", "> 0"]),
    ("train: {lr: .nan}", ["train.lr=nan"]),
    ("train: {device: gpu}", ["train.device='gpu'", "cuda:N"]),
    ("train: {device: 'cuda:x'}", ["train.device"]),
    ("train: {device: 'cuda:01'}", ["train.device='cuda:01'", "cuda:N"]),  # torch.device's traceback on a GPU
    ("train: {device: 'cuda:\u0661'}", ["train.device", "cuda:N"]),  # an Arabic-Indic 1 (\\d took it)
    ("train: {device: \"cuda\\n\"}", ["train.device", "cuda:N"]),  # ($ matched before a final line break)
    ("train: {plot: off}", ["train.plot=False", "one of end, eval or never"]),  # (it said: write "no" in quotes)
    ("train: {lr: \"\u0661\"}", ["train.lr", "type float"]),  # float() reads any script's digits; ints did not
    ("train: {lr: 1" + "0" * 400 + "}", ["train.lr", "too large for a float"]),
    ("train: {dtype: fp16}", ["train.dtype='fp16'", "float32, bfloat16, float16"]),
    ("train: {batch_size: 0}", ["train.batch_size=0"]),
    ("train: {beta2: 1.0}", ["train.beta2"]),
    ("train: {grad_clip: -1}", ["train.grad_clip"]),
    ("train: {max_iters: -1}", ["train.max_iters"]),
    ("train: {beta1: 1.0}", ["train.beta1=1.0", "[0, 1)"]),  # AdamW's momentum would never decay
    ("train: {weight_decay: -0.1}", ["train.weight_decay=-0.1", ">= 0"]),
    ("train: {warmup_iters: -1}", ["train.warmup_iters=-1", ">= 0"]),
    ("train: {eval_iters: 0}", ["train.eval_iters=0", ">= 1"]),  # a mean over no batches
    ("train: {grad_accum: 0}", ["train.grad_accum=0", ">= 1"]),
    ("data: {bpe_vocab_size: 256}", ["data.bpe_vocab_size=256", "257..65536"]),  # the 256 bytes plus one merge
    ("data: {bpe_vocab_size: 65537}", ["data.bpe_vocab_size=65537", "257..65536"]),
    ("train: {log_interval: 0}", ["train.log_interval=0", ">= 1"]),  # `step % 0`: a ZeroDivisionError at the first step
    ("train: {eval_interval: 0}", ["train.eval_interval=0", ">= 1"]),  # likewise, at step 0's eval
    ("train: {threads: -1}", ["train.threads=-1", "0..1024"]),  # torch.set_num_threads(-1): a RuntimeError traceback
    ("train: {min_lr: -0.0001}", ["train.min_lr=-0.0001", "[0, train.lr="]),  # the cosine decay ends at a negative rate
    ("data: {stories_chars: 9999}", ["data.stories_chars=9999", ">= 10000"]),
    ("train: {seed: 9223372036854775807}", ["train.seed=9223372036854775807", "[0, 2**63 - 1)"]),  # torch's limit
    ("data: {stories_seed: 9223372036854775807}", ["data.stories_seed=9223372036854775807", "[0, 2**63 - 1)"]),
    ("model: {vocab_size: -1}", ["model.vocab_size=-1", ">= 0 (0: from the tokenizer"]),
    ('train: {out_dir: "   "}', ["train.out_dir='   '", "must be a directory path"]),  # (--set strips; a file not)
    ('data: {prepared_dir: " "}', ["data.prepared_dir=' '", "must be a directory path"]),
])
def test_impossible_values_are_refused(tmp_path, text, expected):
    path = write(tmp_path, text + "\n")
    message = user_error(path)
    assert str(path) in message
    for part in expected:
        assert part in message, (part, message)


def test_the_values_at_the_edges_of_their_ranges_are_accepted(tmp_path):
    """The bounds the refusals above name are the ones accepted: the largest seed, the fewest story characters, a
    min_lr equal to lr (no decay)."""
    path = write(tmp_path, "train: {seed: 9223372036854775806, lr: 0.001, min_lr: 0.001}\n"
                           "data: {stories_chars: 10000}\n")
    cfg = load_config(path)
    assert (cfg.train.seed, cfg.train.min_lr, cfg.data.stories_chars) == (2**63 - 2, 0.001, 10_000)
    cfg = load_config(path, ["train.beta1=0", "train.beta2=0", "train.threads=1024", "train.max_iters=0",
                             "data.stories_seed=0"])  # the other ends: 0, the most threads, no steps
    assert (cfg.train.beta1, cfg.train.beta2, cfg.train.threads, cfg.train.max_iters, cfg.data.stories_seed) == \
        (0.0, 0.0, 1024, 0, 0)
    cfg = load_config(path, ["train.seed=0", "train.warmup_iters=0", "train.grad_clip=0", "data.tokenizer=word",
                             "data.bpe_vocab_size=65536"])  # 0 = no warmup, no clipping; the most BPE tokens
    assert (cfg.train.seed, cfg.train.warmup_iters, cfg.train.grad_clip, cfg.data.tokenizer,
            cfg.data.bpe_vocab_size) == (0, 0, 0.0, "word", 65536)
    assert user_error(path, ["model.n_embd=24", "model.n_head=5"]).endswith("valid n_head: 1, 2, 3, 4, 6, 8, 12, 24")


def test_limits_of_yaml_and_set_take_what_is_at_them(tmp_path):
    """A YAML of exactly MAX_NODES values is read (one more is refused: the tests of the limits); a --set key
    loses the spaces around it; a value keeps a no-break space, as YAML keeps it."""
    from tinygpt.config import MAX_NODES, read_yaml
    path = write(tmp_path, "[" + ",".join(["1"] * (MAX_NODES - 1)) + "]")
    assert len(read_yaml(path)) == MAX_NODES - 1  # (and the list itself: MAX_NODES in all)
    assert parse_overrides(["train.lr =3e-4"]) == {"train": {"lr": "3e-4"}}
    assert parse_overrides(["train.out_dir=run\xa0"])["train"]["out_dir"] == "run\xa0"


def test_a_path_from_a_block_scalar_loses_its_final_line_break(tmp_path):
    """`out_dir: |` keeps a line break at the end of the path: the run went to a folder whose name
    ends in one, and its `sample with:` line split in two. --set drops it; so does the file now."""
    path = write(tmp_path, "train:\n  out_dir: |\n    runs/lit\n")
    assert load_config(path).train.out_dir == "runs/lit"


def test_a_float_beyond_64_bit_integers_is_a_number(tmp_path):
    """grad_clip: 10000000000000000000 (1e19 in digits) was 'must be a finite number'; 1e19 was taken."""
    path = write(tmp_path, "train: {grad_clip: 10000000000000000000}\n")
    assert load_config(path).train.grad_clip == 1e19


def test_a_negative_vocab_size_is_refused(tmp_path):
    """model.vocab_size is the tokenizer's (train.py checks a given one against it); a config may
    record it, as a run's config.yaml does, but not as a negative number."""
    path = write(tmp_path, "model: {vocab_size: -3}\n")
    assert "model.vocab_size=-3" in user_error(path, [])
    assert load_config(write(tmp_path, "model: {vocab_size: 65}\n", "ok.yaml")).model.vocab_size == 65


# ---- unsafe and malformed files ----


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system", "!!python/object/new:os.system",
                                 "!!python/object/apply:subprocess.call"])
def test_python_tags_are_refused_and_never_run(tmp_path, tag):
    marker = tmp_path / "MARKER"
    arg = f'["touch {marker}"]' if "subprocess" not in tag else f'[["touch", "{marker}"]]'
    for text in (f"{tag} {arg}\n", f"model:\n  n_layer: {tag} {arg}\n"):
        path = write(tmp_path, text)
        message = user_error(path)
        assert str(path) in message and "python/object" in message
        assert not marker.exists(), "the YAML payload ran"


def test_python_name_tag_is_refused(tmp_path):
    path = write(tmp_path, "train: {out_dir: !!python/name:os.getcwd ''}\n")
    message = user_error(path)
    assert str(path) in message and "python/name" in message


def test_an_empty_config_path_and_a_run_folder_say_what_to_give(tmp_path):
    """`train.py "$CONFIG"` with CONFIG unset read Path("") as the current folder (". is a directory");
    a run's folder given as the config suggested configs/stories.yaml, not the run's own config.yaml."""
    assert user_error("") == ("the config file's path is empty; give a config file (.yaml), e.g. "
                              "configs/stories.yaml")
    (tmp_path / "config.yaml").write_text("model: {n_layer: 1}\n")
    assert user_error(tmp_path).endswith(f"is a directory; give a config file (.yaml), e.g. {tmp_path / 'config.yaml'}")


def test_missing_config_file(tmp_path):
    path = tmp_path / "nope.yaml"
    message = user_error(path)
    assert "not found" in message and str(path) in message


@pytest.mark.parametrize("text", ["model: {n_layer: [1, 2\n", "model:\n  n_layer: 2\n n_head: 3\n",
                                  "model: {n_layer: 2}}\n", "\tmodel: 1\n"])
def test_invalid_yaml_syntax(tmp_path, text):
    path = write(tmp_path, text)
    message = user_error(path)
    assert str(path) in message and "not valid YAML" in message


def test_two_yaml_documents_say_what_was_expected(tmp_path):
    path = write(tmp_path, "model: {n_layer: 2}\n---\nmodel: {n_layer: 3}\n")
    assert user_error(path).endswith("is not valid YAML: expected a single document in the stream, but found "
                                     "another document, line 2, column 1")


def test_non_utf8_config_is_refused(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("data: {dataset: caf\u00e9.txt}\n".encode("latin-1"))
    message = user_error(path)
    assert str(path) in message


@pytest.mark.parametrize("text", ["- model\n- train\n", "42\n", "just a string\n"])
def test_yaml_that_is_not_a_mapping(tmp_path, text):
    path = write(tmp_path, text)
    message = user_error(path)
    assert str(path) in message and "mapping" in message and "model, data, train" in message


# ---- round trip ----


def test_config_to_dict_is_plain_data():
    d = config_to_dict(Config())
    assert set(d) == {"model", "data", "train"}
    plain = (str, int, float, bool)
    assert all(isinstance(v, plain) for section in d.values() for v in section.values())


def test_config_dict_round_trip_keeps_every_key(tmp_path):
    """config_to_dict / config_to_yaml (a run's config.yaml, with the tokenizer's vocab_size) read back equal."""
    cfg = load_config(write(tmp_path, "model: {n_layer: 2, n_embd: 32, n_head: 2, causal: false}\n"
                                      "train: {lr: 1e-3, min_lr: 0, device: cpu}\n"),
                      ["data.dataset=x.txt", "train.max_iters=7"])
    cfg.model.vocab_size = 65
    for raw in (config_to_dict(cfg), yaml.safe_load(config_to_yaml(cfg))):
        assert raw["model"]["vocab_size"] == 65
        back = config_from_dict(raw, "round trip")
        assert back == cfg
        assert math.isclose(back.train.lr, 1e-3) and back.model.causal is False


def test_config_dict_round_trip():
    cfg = Config()
    assert config_from_dict(config_to_dict(cfg), "round trip") == cfg


def test_a_runs_config_yaml_loads_as_a_config(tmp_path):
    cfg = load_config(write(tmp_path, "model: {n_layer: 2, n_embd: 32, n_head: 2}\n"))
    cfg.model.vocab_size = 65  # train.py sets this before writing config.yaml
    saved = write(tmp_path, config_to_yaml(cfg), "config.yaml")
    again = load_config(saved)
    assert again.model.n_layer == 2 and again.model.n_embd == 32 and again.model.vocab_size == 65


def test_dtype_auto_is_a_valid_config_value(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train: {dtype: auto}\n")
    assert load_config(path).train.dtype == "auto"
    path.write_text("train: {dtype: bf16}\n")
    with pytest.raises(UserError, match="train.dtype"):
        load_config(path)


# ---- limits of the YAML reader ----


def test_aliases_within_the_limits_still_work(tmp_path):
    cfg = load_config(write(tmp_path, "model: {n_layer: &n 3, n_head: *n, n_embd: 48}\n"))
    assert cfg.model.n_layer == cfg.model.n_head == 3


@pytest.mark.within(60)
@pytest.mark.parametrize("text, expected", [
    ("model: {n_layer: &a [1, *a]}\n", "cycle"),
    ("model: {n_layer: &a [1,1,1,1,1,1,1,1,1,1], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], "
     "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], d: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]}\n", "more than 10,000 values"),
    ("model: " + "[" * 60 + "]" * 60 + "\n", "deeper than 50 levels"),
    ("model: " + "[" * 50 + "]" * 50 + "\n", "deeper than 50 levels"),
    ("model: {n_layer: [" + "1," * 10_000 + "1]}\n", "it holds more than 10,000 values"),  # (no alias: refused early)
])
def test_yaml_beyond_the_limits_is_refused(tmp_path, text, expected):
    assert expected in user_error(write(tmp_path, text))


def test_yaml_at_the_depth_limit_is_read(tmp_path):
    """49 lists deep under a key is 50 levels: read, then refused for what it is (no mapping), not for its depth."""
    assert "must be a mapping" in user_error(write(tmp_path, "model: " + "[" * 49 + "]" * 49 + "\n"))


@pytest.mark.parametrize("override, expected", [
    (f"model.n_layer={2**63}", "64 bits"), ("train.lr=.nan", "finite"), ("train.lr=1e400", "finite"),
    ('train.out_dir="a\\0b"', "NUL"), ("train.seed=-1", "train.seed"),
])
def test_values_beyond_what_the_machine_represents_are_refused(tmp_path, override, expected):
    assert expected in user_error(write(tmp_path, ""), [override])


@pytest.mark.parametrize("text, expected", [
    ("model: {n_layer: !!int abc}\n", "a value cannot be read"),
    ("train: {lr: !!float abc}\n", "a value cannot be read"),
    ("train: {out_dir: !!timestamp foo}\n", "a value cannot be read"),
    ("model: {n_layer: " + "9" * 5000 + "}\n", "a value cannot be read"),
    ("model: {n_layer: !!int }\n", "a !!tag with no value after it"),  # an IndexError, a traceback
    ("model: {bias: !!bool }\n", "a !!tag with no value after it"),  # a KeyError, a traceback
    ("model.n_layer: 2\n", "is written dotted, as --set takes it; in a file, nest it"),  # "did you mean itself?"
], ids=["int", "float", "timestamp", "5000 digits", "bare !!int", "bare !!bool", "dotted key"])
def test_a_value_pyyaml_cannot_build_is_a_one_line_error(tmp_path, text, expected):
    assert expected in user_error(write(tmp_path, text))


def test_a_key_given_twice_is_refused_not_silently_dropped(tmp_path):
    # PyYAML keeps the last of two `model:` sections: n_layer 2 would have been lost
    message = user_error(write(tmp_path, "model:\n  n_layer: 2\ntrain:\n  lr: 0.01\nmodel:\n  n_head: 2\n"))
    assert "'model' appears twice" in message and "line 5" in message


def test_a_merge_key_may_be_overridden(tmp_path):
    cfg = load_config(write(tmp_path, "model:\n  <<: {n_layer: 2, n_head: 2}\n  n_layer: 3\n"))
    assert (cfg.model.n_layer, cfg.model.n_head) == (3, 2)


def test_a_merge_key_given_twice_is_refused_but_one_merging_a_list_works(tmp_path):
    # PyYAML let the second `<<` win without a word: n_layer was 6
    message = user_error(write(tmp_path, "model:\n  <<: {n_layer: 1}\n  <<: {n_layer: 6}\n"))
    assert "the key '<<' appears twice in one mapping (line 3)" in message
    cfg = load_config(write(tmp_path, "model:\n  <<: [&a {n_layer: 2}, {n_head: 2, n_layer: 5}]\n  n_embd: 32\n"))
    assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) == (2, 2, 32)  # the first mapping wins


def test_merge_keys_read_alike_under_every_pyyaml(tmp_path, monkeypatch):
    """PyYAML 6.0.4 (what a fresh install picks) let the later mapping of `<<: [*a, *b]` win: n_layer 5
    where 6.0.3, and YAML's merge spec, give 2. The loader merges by itself, never by PyYAML's code."""
    def pyyamls_merge(self, node):
        raise AssertionError("PyYAML's own flatten_mapping ran")
    monkeypatch.setattr(yaml.constructor.SafeConstructor, "flatten_mapping", pyyamls_merge)
    text = ("base: &base {n_layer: 3, n_head: 4}\nmodel:\n  <<: [&a {n_layer: 2}, {n_head: 2, n_layer: 5}]\n"
            "  n_embd: 32\n  block_size: 16\n")
    assert yaml.load(text, Loader=LimitedSafeLoader)["model"] == {"n_layer": 2, "n_head": 2, "n_embd": 32,
                                                                  "block_size": 16}
    nested = "a: &a {n_layer: 1, n_head: 1}\nb: &b {<<: *a, n_head: 2}\nmodel:\n  <<: [*b, {n_layer: 9, n_embd: 8}]\n"
    assert yaml.load(nested, Loader=LimitedSafeLoader)["model"] == {"n_layer": 1, "n_head": 2, "n_embd": 8}
    cfg = load_config(write(tmp_path, "model:\n  <<: [{n_layer: 2}, {n_head: 2, n_layer: 5}]\n  n_embd: 32\n"))
    assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd) == (2, 2, 32)


@pytest.mark.parametrize("text", ["model:\n  <<: {n_layer: 1, n_layer: 2}\n",
                                  "model:\n  <<: [{n_head: 2}, {n_layer: 1, n_layer: 2}]\n"])
def test_a_key_given_twice_inside_a_merged_mapping_is_refused(tmp_path, text):
    # the merged mapping is never built as a mapping of its own: n_layer 2 won without a word
    assert "the key 'n_layer' appears twice in one mapping (line 2)" in user_error(write(tmp_path, text))


@pytest.mark.parametrize("text, expected", [
    ("model:\n  <<: 5\n", "a merge key '<<' takes a mapping or a list of mappings, not 5 (line 2)"),
    ("model:\n  n_layer: 2\n  <<: [5]\n", "a merge key '<<' takes a mapping or a list of mappings, not 5 (line 3)"),
    ("model: !!map [1, 2]\n", "!!map takes a mapping, not a list (line 1)"),
    ("train:\n  compile: !!bool maybe\n", "a value cannot be read (line 2: !!bool 'maybe' is not a boolean"),
], ids=["merge of 5", "merge of [5]", "!!map of a list", "!!bool maybe"])
def test_a_value_pyyaml_cannot_build_says_what_is_wrong_and_where(tmp_path, text, expected):
    # each was `unsupported YAML tag 'scalar'` (or 'sequence') or `a !!tag with no value after it`, with no line
    path = write(tmp_path, text)
    message = user_error(path)
    assert str(path) in message and expected in message, message
    assert "unsupported YAML tag" not in message and "no value after it" not in message


@pytest.mark.parametrize("text, where", [("1.0e-400", "file"), ("1e-400", "file"), ("1.0e-400", "--set"),
                                         ("1e-400", "--set")])
def test_a_float_too_small_to_hold_is_named_as_written_not_as_0(tmp_path, text, where):
    """train.weight_decay: 1e-400 read as 0.0 without a word (train.lr=1e-400 was told 'train.lr=0.0 must be
    > 0', a value the user never wrote); 0.0, 0e5 and 1e-300 still read."""
    body, sets = (f"train:\n  weight_decay: {text}\n", []) if where == "file" else ("", [f"train.weight_decay={text}"])
    message = user_error(write(tmp_path, body), sets)
    assert f"'{text}'" in message and "too small for a float: it would read as 0.0" in message, message
    for fine, value in (("0.0", 0.0), ("0e5", 0.0), ("1e-300", 1e-300)):
        assert load_config(write(tmp_path, ""), [f"train.weight_decay={fine}"]).train.weight_decay == value


def test_dates_and_base_60_are_not_guessed(tmp_path):
    cfg = load_config(write(tmp_path, "train: {out_dir: 2024-12-01}\n"))
    assert cfg.train.out_dir == "2024-12-01"  # not a datetime.date, refused as "not str" before
    assert yaml_load("a: 1:30\nb: 12\nc: 0x10\nd: 1.5\n") == {"a": "1:30", "b": 12, "c": 16, "d": 1.5}


def test_octal_is_not_guessed_and_number_texts_say_how_to_write_them(tmp_path):
    """YAML 1.1 read 0500 as octal 320 (a max_iters of 320 without a word); 1e3 is text there."""
    assert yaml_load("a: 0500\nb: 0\nc: -7\n") == {"a": "0500", "b": 0, "c": -7}
    for value, plain in (("0500", "500"), ("1e3", "1000")):
        with pytest.raises(UserError, match=rf"train.max_iters='{value}' .* must be of type int, not str: write it in "
                                            rf"plain digits, {plain}$"):
            load_config(write(tmp_path, ""), [f"train.max_iters={value}"])


def test_a_tag_does_not_bring_back_octal_or_base_60(tmp_path):
    """`!!int 0500` trained 320 steps, `n_embd: !!int 040` 32 wide, `!!float 1:30` read 90.0 (PyYAML's YAML 1.1
    constructors, reached through the tag); a 900 KB `!!int 1:59:59:...` took 40 s of CPU to be refused."""
    for body, sets, value, kind in (("model: {n_embd: !!int 040}\n", [], "040", "octal"),
                                    ("", ["train.max_iters=!!int 0500"], "0500", "octal"),
                                    ("", ["train.lr=!!float 1:30"], "1:30", "base-60"),
                                    ("train: {max_iters: !!int 1:0}\n", [], "1:0", "base-60")):
        with pytest.raises(UserError, match=rf"a value cannot be read \(line \d: !!(int|float) '{value}' is YAML 1.1's "
                                            rf"{kind} number, which tinygpt does not read: write it in plain digits\)"):
            load_config(write(tmp_path, body), sets)
    assert yaml_load("a: !!int 0\nb: !!int -12\nc: !!int 0x10\nd: !!float 1\ne: !!float 1e3\n") == {
        "a": 0, "b": -12, "c": 16, "d": 1.0, "e": 1000.0}  # (what the tags read as the plain resolvers do)
    start = time.perf_counter()
    with pytest.raises(yaml.YAMLError, match="base-60 number"):
        yaml_load("n_layer: !!int 1" + ":59" * 300_000)
    assert time.perf_counter() - start < 10


def test_a_quoted_number_is_told_to_drop_its_quotes(tmp_path):
    """model.n_layer: "1" (or !!str 1) was told `write it in plain digits, 1`, which it already was."""
    for body, sets in (('model: {n_layer: "1"}\n', []), ("model: {n_layer: !!str 1}\n", []),
                       ("", ['model.n_layer="1"'])):
        with pytest.raises(UserError, match=r"model.n_layer='1' .* must be of type int, not str: a number in quotes "
                                            r"\(or tagged !!str\) is text; write it without them, 1$"):
            load_config(write(tmp_path, body), sets)


def test_a_negative_stories_seed_is_refused(tmp_path):
    """random.Random(-5) is Random(5): the corpus of -5 would be the corpus of 5 under another name."""
    for seed in (-5, -1):
        with pytest.raises(UserError, match=rf"data.stories_seed={seed} .* must be in \[0, 2\*\*63 - 1\)"):
            load_config(write(tmp_path, ""), [f"data.stories_seed={seed}"])


def test_a_plot_setting_is_one_of_its_three_words(tmp_path):
    assert "train.plot='off'" in user_error(write(tmp_path, ""), ["train.plot=off"])


def test_a_negative_integer_beyond_64_bits_is_refused_by_the_type_check_too(tmp_path):
    """sweep.py checks --grid values by their type alone: -2**63 - 1 passed it (only its magnitude is too large)."""
    from tinygpt.config import check_type
    with pytest.raises(UserError, match="64 bits"):
        check_type(f"model.n_layer={-2**63 - 1}", "--grid")
    assert "64 bits" in user_error(write(tmp_path, ""), [f"model.n_layer={-2**63 - 1}"])


def test_a_recorded_configs_long_path_is_not_checked_against_this_file_system():
    """A run's config.yaml or checkpoint records the out_dir of the machine that trained it: read back, a part
    longer than a file name may be here is no error (only a path given to this machine is checked)."""
    cfg = config_from_dict({"train": {"out_dir": "x" * 300}}, "ckpt.pt", recorded=True)
    assert cfg.train.out_dir == "x" * 300


def test_two_keys_read_as_one_number_are_called_a_key_given_twice(tmp_path):
    assert "appears twice" in user_error(write(tmp_path, "1: {}\n0x1: {}\n"))


def test_a_value_yaml_reads_only_in_quotes_says_so(tmp_path):
    with pytest.raises(UserError, match=r"not a valid YAML scalar \(YAML reads a text that starts with @.*: "
                                        r"--set 'train.out_dir=\"@runs\"'\)$"):
        load_config(write(tmp_path, ""), ["train.out_dir=@runs"])
    from tinygpt.config import parse_overrides  # a grid's fix in the grid's words; a number's, none to quote
    with pytest.raises(UserError, match=r"quotes: --grid 'data.dataset=\"@x\"'\)$"):
        parse_overrides(["data.dataset=@x"], "--grid")
    with pytest.raises(UserError, match=r"only in quotes\)$"):
        parse_overrides(["model.n_layer=*2"])
    assert load_config(write(tmp_path, ""), ['train.out_dir="@runs"']).train.out_dir == "@runs"


def test_a_bare_tilde_in_a_file_is_told_apart_from_the_home_folder(tmp_path):
    with pytest.raises(UserError, match=r"train.out_dir=None .* not NoneType: ~, null or an empty value is YAML's null"):
        load_config(write(tmp_path, "train:\n  out_dir: ~\n"))


@pytest.mark.parametrize("text, sets, expected", [
    ("model:\n  n_layer:\n", [],
     "model.n_layer (CFG) has no value (~, null or an empty value is YAML's null); give an integer"),
    ("", ["model.bias=~"], "model.bias (CFG with --set) has no value (~, null or an empty value is YAML's null); "
                           "give true or false"),
    ("", ["train.lr="], "give a number"),
    ("train:\n  plot: null\n", [], "give one of end, eval or never"),
])
def test_a_setting_without_a_value_says_so(tmp_path, text, sets, expected):
    """`n_layer:` with nothing after it: `model.n_layer=None ... must be of type int, not NoneType`,
    Python's words for what the user did not write."""
    path = write(tmp_path, text)
    assert user_error(path, sets).endswith(expected.replace("CFG", str(path)))


@pytest.mark.parametrize("text, where", [("model: \x07\n", r"U\+0007 .* line 1, column 8"),
                                         ("\ufeffmodel:\n  n_layer: 2\n\x00\n", r"U\+0000 .* line 3, column 1")])
def test_a_control_character_in_a_config_is_placed(tmp_path, text, where):
    """`unacceptable character #x0007: special characters are not allowed`, with no line or column,
    the only YAML error that named none."""
    path = write(tmp_path, text)
    assert re.search(rf"is not valid YAML: character {where}$", user_error(path))


@pytest.mark.parametrize("text, expected", [
    ("train:\n  out_dir: yes\n", 'train.out_dir=True .* not bool: write it in quotes, e.g. out_dir: "yes"$'),
    ("train:\n  out_dir: 2024\n", 'train.out_dir=2024 .* not int: write it in quotes, e.g. out_dir: "2024"$'),
    ("data:\n  tokenizer: 1.5\n", 'data.tokenizer=1.5 .* not float: write it in quotes, e.g. tokenizer: "1.5"$'),
])
def test_a_number_or_boolean_for_a_text_key_in_a_file_says_to_quote_it(tmp_path, text, expected):
    # --set keeps such a value as text (out_dir=2024 is the folder 2024); a file needs the quotes
    with pytest.raises(UserError, match=expected):
        load_config(write(tmp_path, text))
    assert load_config(write(tmp_path, 'train:\n  out_dir: "2024"\n')).train.out_dir == "2024"


def test_a_path_with_bytes_that_are_not_utf8_is_taken_as_it_is(tmp_path):
    """A folder named with a byte that is not UTF-8 (the shell passes it as a surrogate escape) was
    "not a valid YAML scalar (... starts with @ ...)": PyYAML refuses the surrogate."""
    for given in ("/tmp/bad\udcffdir/run", '"/tmp/bad\udcffdir/run"'):
        assert load_config(write(tmp_path, ""), [f"train.out_dir={given}"]).train.out_dir == "/tmp/bad\udcffdir/run"
    with pytest.raises(UserError, match="' #' starting a comment"):  # (a comment cut from a path: refused)
        load_config(write(tmp_path, ""), ["train.out_dir=/tmp/bad\udcffdir/run # a note"])
    with pytest.raises(UserError, match="holds bytes that are not UTF-8 text"):
        load_config(write(tmp_path, ""), ["train.lr=1\udcff"])
    with pytest.raises(UserError, match="did you mean 'train.out_dir'"):  # a misspelt key is told as one
        load_config(write(tmp_path, ""), ["train.outdir=/tmp/bad\udcffdir"])


def test_a_string_key_set_from_the_command_line_keeps_the_text(tmp_path):
    cfg = load_config(write(tmp_path, ""), ["train.out_dir=2024", "data.dataset=2001-02-29", "train.init_from=null"])
    assert (cfg.train.out_dir, cfg.data.dataset, cfg.train.init_from) == ("2024", "2001-02-29", "null")
    assert load_config(write(tmp_path, ""), ["train.out_dir=~"]).train.out_dir == os.path.expanduser("~")


def test_a_line_break_or_tab_in_a_set_value_is_kept_or_named(tmp_path):
    """A file name with a line break (`--set $'data.dataset=a\\nb.txt'`) became 'a b.txt', YAML's
    folding, so the error named a file that does not exist; one with a tab was 'not a valid YAML
    scalar (... starts with @, *, ...)', which it did not. A number with one says what is wrong."""
    folder = tmp_path / "names"
    folder.mkdir()
    for name in ("a\nb.txt", "tab\tx.txt", "nel\x85x.txt"):  # (NEL: a line break to YAML too)
        (folder / name).write_text("the cat sat on the mat\n" * 20)
        cfg = load_config(write(tmp_path, ""), [f"data.dataset={folder / name}", f"train.out_dir= out/{name} "])
        assert (cfg.data.dataset, cfg.train.out_dir) == (str(folder / name), f"out/{name}")
    assert load_config(write(tmp_path, ""), ["model.n_head=2\n"]).model.n_head == 2  # as YAML reads it
    with pytest.raises(UserError, match=r"^--set 'model.n_head=2\\t3': the value is not a valid YAML scalar: it "
                                        r"holds a tab or a line break$"):
        load_config(write(tmp_path, ""), ["model.n_head=2\t3"])


def test_a_set_value_from_a_crlf_script_loses_its_carriage_return(tmp_path):
    """A shell script saved with Windows line ends passes its last argument with a \r: the run
    trained into 'run\r' (sample.py run found nothing), train.dtype=float32\r was refused."""
    cfg = load_config(write(tmp_path, ""), ["train.out_dir=runs/a\r", "train.dtype=float32\r", "data.tokenizer=char\t",
                                            "model.n_head=2\r"])
    assert (cfg.train.out_dir, cfg.train.dtype, cfg.data.tokenizer, cfg.model.n_head) == ("runs/a", "float32", "char", 2)


def test_a_yaml_syntax_error_says_what_and_where(tmp_path):
    message = user_error(write(tmp_path, "model:\n\tn_layer: 2\n"))
    assert "'\\t'" in message and "line 2, column 1" in message


def test_a_malformed_section_is_refused_with_set_too(tmp_path):
    message = user_error(write(tmp_path, "model: [1, 2]\n"), ["model.n_layer=2"])
    assert "'model'" in message and "mapping" in message


def test_a_directory_is_not_a_config_file(tmp_path):
    assert "is a directory" in user_error(tmp_path)


def test_a_thread_count_beyond_any_cpu_is_refused(tmp_path):
    # libgomp segfaulted (no message, exit 139) when asked for 100,000 threads
    assert "train.threads=100000" in user_error(write(tmp_path, ""), ["train.threads=100000"])
    assert load_config(write(tmp_path, ""), ["train.threads=64"]).train.threads == 64


@pytest.mark.parametrize("key", ["data.dataset", "data.prepared_dir", "train.out_dir", "train.init_from"])
def test_a_tilde_is_expanded_in_every_path_key(tmp_path, key):
    """'~' is expanded in each path key: one left out read '~/runs/x' as a folder named '~' in the working folder."""
    section, name = key.split(".")
    cfg = load_config(write(tmp_path, f"{section}: {{{name}: '~/runs/x'}}\n"))
    assert getattr(getattr(cfg, section), name) == os.path.join(os.path.expanduser("~"), "runs", "x")


def test_a_tilde_of_no_user_is_refused_not_made_a_folder(tmp_path):
    # os.path.expanduser leaves '~nosuchuser/x' as it is: a run made a folder named '~nosuchuser'
    message = user_error(write(tmp_path, ""), ["train.out_dir=~nosuchuser_tinygpt/x"])
    assert "~nosuchuser_tinygpt names no user" in message


@pytest.mark.parametrize("key", ["data.dataset", "data.prepared_dir", "train.out_dir", "train.init_from"])
def test_an_environment_variable_in_a_path_is_refused_unless_the_path_exists(tmp_path, key, monkeypatch):
    """`out_dir: $HOME/runs` made a folder named `$HOME` in the working folder, and train.py said to
    sample from '$HOME/runs'."""
    section, name = key.split(".")
    for variable in ("$HOME", "${HOME}"):
        message = user_error(write(tmp_path, f"{section}: {{{name}: '{variable}/runs/x'}}\n"))
        assert f"{key}='{variable}/runs/x'" in message and f"{variable} is not expanded in a config" in message
    monkeypatch.chdir(tmp_path)
    (tmp_path / "price$5").mkdir()  # a path that exists is its own name; a lone `$` or `$5` names no variable
    for value in ("price$5", "cost$/x", "$HOME_made_by_hand"):
        if value.startswith("$"):
            (tmp_path / value).mkdir()
        cfg = load_config(write(tmp_path, f"{section}: {{{name}: '{value}'}}\n"))
        assert getattr(getattr(cfg, section), name) == value


def test_a_config_may_come_through_a_pipe_but_not_without_end(tmp_path):
    read, write_end = os.pipe()
    os.write(write_end, b"model: {n_layer: 3}\n")
    os.close(write_end)
    try:
        assert load_config(f"/dev/fd/{read}").model.n_layer == 3  # train.py <(...): it said "not found"
    finally:
        os.close(read)
    big = write(tmp_path, "# " + "x" * (2 << 20) + "\n")
    assert "over 1,048,576 bytes" in user_error(big)


def test_an_empty_prepared_dir_is_refused(tmp_path):
    # it prepared into the current folder
    assert "data.prepared_dir=''" in user_error(write(tmp_path, ""), ["data.prepared_dir="])


def test_the_schema_in_design_md_is_the_code_s_defaults():
    """docs/design.md's config schema lists every key with its default, as the dataclasses have
    them (model.vocab_size, set from the tokenizer, aside): a default changed in the code changes
    the doc, or this fails."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    block = text.split("## Config schema", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    documented = yaml.safe_load(block)
    defaults = config_to_dict(Config())
    del defaults["model"]["vocab_size"]
    assert documented == defaults


def test_set_before_the_config_says_that_set_took_it():
    """`train.py --set model.n_layer=2 CONFIG`: "the following arguments are required: config", with
    the config right there on the line (--set takes every word after it)."""
    import train
    with pytest.raises(UserError, match="--set takes every word after it, the config too: give the config first"):
        train.parse_args(["--set", "model.n_layer=2", "configs/stories.yaml"])


def test_a_path_that_starts_with_a_dash_is_said_to_read_as_a_flag():
    """`export.py RUN -dash`: "the following arguments are required: out", of an out given."""
    import export
    import train
    with pytest.raises(UserError, match=r"required: out; -dash reads as a flag: a path that starts with '-' is "
                                        r"written ./-dash \(see"):
        export.main(["out/run", "-dash"])
    with pytest.raises(UserError, match=r"required: config; -c.yaml reads as a flag: .* is written ./-c.yaml"):
        train.parse_args(["-c.yaml"])
    # with --set after it: the config was first, and was told to come first (--set took nothing of it)
    with pytest.raises(UserError, match=r"required: config; -c.yaml reads as a flag: .* is written ./-c.yaml \(see"):
        train.parse_args(["-c.yaml", "--set", "train.max_iters=1"])


def test_a_key_value_after_another_flag_is_said_to_need_set_again():
    """`train.py C --stop-at 13 train.eval_interval=1`: a bare `unrecognized arguments: ...`."""
    import train
    with pytest.raises(UserError, match=r"unrecognized arguments: train.eval_interval=1; a KEY=VALUE belongs to "
                                        r"--set's list, which ends at the next flag: write --set again before it"):
        train.parse_args(["configs/stories.yaml", "--stop-at", "13", "train.eval_interval=1"])


def test_an_unknown_tokenizer_is_refused_with_the_config_not_after_reading_the_data(tmp_path):
    """It was refused only when the data was prepared, after the dataset was read, and a name with
    a '/' left a prepared folder behind."""
    message = user_error(write(tmp_path, ""), ["data.tokenizer=../../evil"])
    assert message.startswith("data.tokenizer='../../evil'") and "char, word, bpe or a tiktoken encoding: gpt2" in message


def test_an_unknown_key_of_a_known_section_lists_that_sections_keys():
    """With no close match, `model.<a long typo>` was answered `valid sections: model, data, train`,
    though its section was right."""
    with pytest.raises(UserError) as info:
        load_config(str(ROOT / "configs/stories.yaml"), ["model.averyveryverylongkeythatmatchesnothing=1"])
    assert "model's keys: block_size, n_layer, n_head, n_embd" in str(info.value) and "sections" not in str(info.value)
    with pytest.raises(UserError, match="valid sections: model, data, train"):
        load_config(str(ROOT / "configs/stories.yaml"), ["averyveryverylongsectionname.averyverylongkey=1"])
    with pytest.raises(UserError, match="did you mean 'model.n_layer'"):  # (a key of a section: that key)
        load_config(str(ROOT / "configs/stories.yaml"), ["averyveryverylongsectionname.n_layer=1"])


@pytest.mark.parametrize("value", ["out/x", "/tmp/moved #1", "*star", "'quoted", "2024", "~", "trailing ", "@runs",
                                   "a\tb", "x\udcff", "null"])
def test_set_word_reads_back_as_the_path(value):
    """A hint's --set 'train.out_dir=/tmp/moved #1', pasted, trained into /tmp/moved: YAML took ' #1' for a
    comment. set_word quotes what YAML would change, and leaves the rest as typed."""
    from tinygpt.config import parse_overrides, set_word
    word = set_word("train.out_dir", value)
    assert parse_overrides([word])["train"]["out_dir"] == value
    assert (word == f"train.out_dir={value}") == (value in ("out/x", "2024", "~", "a\tb", "x\udcff", "null"))


def test_a_comment_cut_from_a_path_value_is_refused():
    """`--set "train.out_dir=/x/run #2"` trained into /x/run without a word."""
    from tinygpt.config import parse_overrides
    with pytest.raises(UserError, match=r"^--set 'train.out_dir=/x/run #2': YAML reads the value as '/x/run', ' #' "
                                        r"starting a comment; to keep it, quote it: "
                                        r"--set 'train.out_dir=\"/x/run #2\"'$"):
        parse_overrides(["train.out_dir=/x/run #2"])
    assert parse_overrides(["train.lr=3e-4 # a note"]) == {"train": {"lr": "3e-4"}}  # (a number's comment stays one)
    # in a sweep's --grid, the fix is the grid's (it said --set, which a grid key refuses: both would give it)
    with pytest.raises(UserError, match=r"quote it: --grid 'data.dataset=\"/d/x #1.txt\"', its other values after "
                                        r"a comma$"):
        parse_overrides(["data.dataset=/d/x #1.txt"], "--grid")


@pytest.mark.parametrize("value, read", [("&x /runs/a", "/runs/a"), ("--- a", "a"), ("|", ""), ("!!str a", "a")])
def test_yaml_syntax_read_out_of_a_path_value_is_refused(value, read):
    """`--set "train.out_dir=&x /runs/a"` trained into /runs/a (YAML's anchor dropped), `--- a` into a, and
    `|` was refused as an empty path: the text given was not the one used, without a word."""
    import re

    from tinygpt.config import parse_overrides, set_word
    with pytest.raises(UserError, match=rf"^--set 'train.out_dir={re.escape(value)}': YAML reads the value as "
                                        rf"'{re.escape(read)}', not as the text given; to keep the text, quote it: "
                                        rf"--set 'train.out_dir=\"{re.escape(value)}\"'$"):
        parse_overrides([f"train.out_dir={value}"])
    assert parse_overrides([set_word("train.out_dir", value)]) == {"train": {"out_dir": value}}  # (the fix given)


def test_a_device_number_written_otherwise_is_said_why(tmp_path):
    """`--set train.device=cuda:01` (or cuda:1000000) said only `must be auto, cpu, cuda, cuda:N or mps`, where
    sample.py --device says what N may be."""
    for device in ("cuda:01", "cuda:1000000", "cuda:٣"):
        message = user_error(write(tmp_path, ""), [f"train.device={device}"])
        assert message.endswith("must be auto, cpu, cuda, cuda:N or mps (N a device's number, 0 to 999999, in plain "
                                "digits, no leading 0: cuda:1)"), message


@pytest.mark.parametrize("key", ["data.dataset", "data.prepared_dir", "train.out_dir", "train.init_from"])
def test_a_path_no_file_system_takes_is_refused_naming_its_key(tmp_path, key):
    """A part over 255 bytes (`data.prepared_dir=/tmp/ppp...`, `data.dataset=/tmp/ppp....txt`) ended in
    `error: File name too long: PATH`, naming no key, once a file was opened (train.out_dir's alone was named)."""
    path = write(tmp_path, "")
    part = "p" * 300
    message = user_error(path, [f"{key}={tmp_path}/{part}/x.txt"])
    assert message.startswith(f"{key}=") and "is no possible path: its part 'ppp" in message
    assert message.endswith("is 300 bytes, longer than a file name may be"), message
    message = user_error(path, [f"{key}={tmp_path}/" + "/".join(["y" * 200] * 25)])  # 5,000 bytes in all
    assert message.startswith(f"{key}=") and "longer than a path may be (4,095)" in message
    assert load_config(path, [f"{key}={tmp_path}/{'p' * 255}"])  # the longest name is taken


def test_a_moved_runs_own_config_resumes_though_its_paths_hold_a_dollar(tmp_path):
    """`train.py RUN/config.yaml --resume` of a run trained on 'd$x.txt' into 'r$v', moved since, was refused as
    '$v is not expanded in a config'. A run's own config.yaml holds what tinygpt wrote; a --set is the user's."""
    run = tmp_path / "moved"
    run.mkdir()
    (run / "ckpt.pt").write_bytes(b"")  # (what makes the folder a run's; not read here)
    (run / "config.yaml").write_text(f"{RUN_HEADER}\ndata:\n  dataset: {tmp_path}/gone/d$x.txt\ntrain:\n"
                                     f"  out_dir: {tmp_path}/r$v\n")
    cfg = load_config(run / "config.yaml")
    assert cfg.train.out_dir == f"{tmp_path}/r$v" and cfg.data.dataset == f"{tmp_path}/gone/d$x.txt"
    assert "$HOME is not expanded" in user_error(run / "config.yaml", ["train.out_dir=$HOME/x"])
    (run / "plain.yaml").write_text(f"train:\n  out_dir: {tmp_path}/r$v\n")  # a config a user wrote: checked
    assert "$v is not expanded in a config" in user_error(run / "plain.yaml")
    # the header copied along, to edit for a new run, does not make a copy the run's: it made a folder named `$HOME`
    (tmp_path / "copy.yaml").write_text((run / "config.yaml").read_text())
    assert "$x is not expanded in a config" in user_error(tmp_path / "copy.yaml")  # (data.dataset's, the first)


def test_an_empty_path_setting_is_not_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert same_path("text/", "text") and same_path("", "")
    # realpath("") is the current folder: an unset setting ("") names no folder, not this one
    assert not same_path("", ".") and not same_path(str(tmp_path), "")


def test_a_config_path_that_is_a_dead_link_is_called_a_link(tmp_path):
    link = tmp_path / "cfg.yaml"
    link.symlink_to(tmp_path / "gone.yaml")
    message = user_error(link)
    assert "link" in message and "gone.yaml" in message, message


def test_a_non_utf8_config_names_the_byte(tmp_path):
    data = "model:\n  n_layer: 2\n".encode() + b"\xff\n"
    path = tmp_path / "cfg.yaml"
    path.write_bytes(data)
    at = data.index(b"\xff")
    assert f"at byte {at}" in user_error(path)


def test_a_runs_header_is_read_as_written_then_or_now_and_with_crlf(tmp_path):
    old = "# model.vocab_size = 65 (from the tokenizer)"
    assert is_run_header(RUN_HEADER) and is_run_header(old)
    assert not is_run_header(old + " and more") and not is_run_header(RUN_HEADER + " and more")
    path = tmp_path / "config.yaml"
    path.write_bytes((RUN_HEADER + "\r\nmodel:\r\n  n_layer: 2\r\n").encode())
    assert is_run_config(path)


def test_a_pipe_is_never_a_runs_config_and_is_not_read(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)  # (Linux: a FIFO opened both ways never blocks, and holds the header unread)
    try:
        os.write(fd, (RUN_HEADER + "\nmodel: {}\n").encode())
        assert not is_run_config(fifo)  # (`train.py <(cat c.yaml)`: its bytes are read once, by read_yaml)
    finally:
        os.close(fd)


def test_a_runs_config_yaml_lists_keys_in_schema_order():
    cfg = Config()
    read = yaml.safe_load(config_to_yaml(cfg))
    assert [f"{s}.{k}" for s, values in read.items() for k in values] == list(flat_config(cfg))


@pytest.mark.parametrize("device", ["auto", "cpu", "mps", "cuda", "cuda:0", "cuda:999999"])
def test_every_device_the_rule_names_is_accepted(tmp_path, device):
    """DEVICE_RULE's words, and its largest N, are taken (only refusals were tested)."""
    assert device.split(":")[0] in DEVICE_RULE and "999999" in DEVICE_RULE
    assert load_config(write(tmp_path, ""), [f"train.device={device}"]).train.device == device


@pytest.mark.parametrize("key", ["block_size", "n_layer", "n_head", "n_embd"])
def test_each_model_size_of_0_is_refused_by_its_own_name(tmp_path, key):
    """n_head=0 would reach `n_embd % n_head` (a ZeroDivisionError); n_embd=0 is divisible by any n_head."""
    path = write(tmp_path, "")
    assert user_error(path, [f"model.{key}=0"]) == f"model.{key}=0 ({path} with --set) must be >= 1"


@pytest.mark.parametrize("key", ["beta1", "beta2"])
def test_a_negative_adam_beta_is_refused(tmp_path, key):
    path = write(tmp_path, "")
    assert user_error(path, [f"train.{key}=-0.1"]).endswith(f"train.{key}=-0.1 ({path} with --set) must be in [0, 1)")


def test_a_negative_min_lr_is_not_told_to_lower_train_lr(tmp_path):
    """The 'a train.lr below it needs a lower one too' hint is for min_lr > lr only."""
    path = write(tmp_path, "train: {lr: 0.001, min_lr: -0.0001}\n")
    assert user_error(path).endswith(f"train.min_lr=-0.0001 ({path}) must be in [0, train.lr=0.001]")


@pytest.mark.parametrize("n_embd, tail", [(2018, ""), (200006, ", ...")])
def test_the_n_head_hint_lists_divisors_above_1000_and_says_when_it_stopped_looking(tmp_path, n_embd, tail):
    """2018 = 2 * 1009: its divisors above 1000 are listed; 200006 = 2 * 100003: the search stops at 10**5, and
    the '...' says that there are more."""
    divisors = [d for d in range(1, n_embd + 1) if n_embd % d == 0]
    shown = [d for d in divisors if d <= 10**5]
    message = user_error(write(tmp_path, f"model: {{n_embd: {n_embd}, n_head: 3}}\n"))
    assert message.endswith("valid n_head: " + ", ".join(map(str, shown)) + tail)


def test_a_text_that_is_no_whole_number_gets_no_plain_digits_hint(tmp_path):
    """'1e-3' is text in YAML 1.1 (no dot): for an integer key it must not be 'write it in plain digits, 0'."""
    message = user_error(write(tmp_path, ""), ["train.max_iters=1e-3"])
    assert message.endswith("must be of type int, not str"), message


def test_a_typo_far_from_the_key_still_gets_the_suggestion(tmp_path):
    """'model.embed_dim' is 0.74 alike to model.n_embd: the suggestion is not kept for near-exact spellings."""
    assert user_error(write(tmp_path, ""), ["model.embed_dim=64"]).endswith("did you mean 'model.n_embd'?")

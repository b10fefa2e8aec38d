"""Fuzzes the entry points with Hypothesis (docs/errors.md): random config files, --set overrides
and sampling flags go through train.main and sample.main in this process, through `run_cli` as a
user's command would; every outcome must be success (exit 0) or one `error: ...` line with exit 2:
never a traceback, never a hang (each example has a deadline).

The values mix the valid, the out of range, the absurd (10**9, 2**63, NaN, 1e-45), the wrong type,
nested YAML and garbage. Left out, on purpose: keys whose valid values make slow but legitimate
runs (train.compile compiles for a minute, data.dataset=stories generates a corpus, a tiktoken
tokenizer may need the network) and the paths (everything stays in tmp). A fixed profile keeps CI
fast and repeatable: few examples, derandomized. A longer hunt: FUZZ_EXAMPLES=1000 python -m pytest
tests/test_fuzz.py (the examples of each test).
"""
from __future__ import annotations

import json
import os
import random
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
settings.register_profile("tinygpt-ci", max_examples=EXAMPLES, derandomize=True, deadline=timedelta(seconds=60),
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                          print_blob=True)
PROFILE = settings.get_profile("tinygpt-ci")

BASE = {"model": {"block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16},
        "data": {"tokenizer": "char"},
        "train": {"batch_size": 4, "max_iters": 4, "eval_interval": 100, "eval_iters": 2, "log_interval": 1,
                  "device": "cpu", "plot": "never"}}
FUZZED_KEYS = ["model.block_size", "model.n_layer", "model.n_head", "model.n_embd", "model.dropout", "model.bias",
               "model.causal", "model.vocab_size", "data.tokenizer", "data.compact_vocab", "data.val_fraction",
               "data.stories_chars", "data.stories_seed", "train.batch_size", "train.grad_accum", "train.max_iters",
               "train.lr", "train.min_lr", "train.warmup_iters", "train.weight_decay", "train.beta1", "train.beta2",
               "train.grad_clip", "train.eval_interval", "train.eval_iters", "train.log_interval", "train.device",
               "train.dtype", "train.seed", "train.init_from", "train.plot"]
BAD_KEYS = ["model.n_heads", "train.learning_rate", "optim.lr", "model", "data.dataset.x", "model."]
ABSURD = [0, -1, 10**9, 10**12, 2**63, 2**64, -2**63, 10**30]
WORDS = ["", "abc", "1e9", "1e-45", "nan", "-inf", "true", "~", "[1, 2]", "{a: 1}", "&a [*a]", "!!python/none ''",
         "\x00", "\u00e9\u00e9"]
STRINGS = {"data.tokenizer": ["char", "word", "Char", "abc"],
           "train.device": ["cpu", "auto", "cuda", "cuda:7", "mps", "tpu"],
           "train.dtype": ["float32", "bfloat16", "float16", "auto", "int8"],
           "train.plot": ["end", "eval", "never", "x"],
           "train.init_from": ["", "trained", "missing_run", "corpus.txt"]}  # trained: the module's run (cwd is tmp)

# small valid-or-not sizes (a legitimate slow config would be a false finding), and absurd ones
ints = st.one_of(st.integers(1, 4), st.sampled_from(ABSURD), st.integers(-2, 8))
floats = st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1e-45, 1e300, 3e-3, -1.0, 2.0]),
                   st.floats(allow_nan=True, allow_infinity=True))
wrong = st.one_of(st.sampled_from(WORDS), st.none(), st.lists(st.integers(0, 3), max_size=3),
                  st.dictionaries(st.sampled_from(["a", "n_layer"]), st.integers(0, 2), max_size=2))


def value_for(key: str) -> st.SearchStrategy:
    """Mostly the key's own type (in range or not), sometimes a value of another type."""
    from tinygpt.config import SECTIONS, _field_types
    section, _, name = key.partition(".")
    typ = _field_types(SECTIONS[section]).get(name) if section in SECTIONS else None
    strings = st.sampled_from(STRINGS.get(key, ["x"]))
    right = {int: ints, float: floats, bool: st.booleans(), str: strings}.get(typ, ints)
    return st.integers(0, 9).flatmap(lambda i: wrong if i == 0 else right)  # 1 in 10 of another type


overrides = st.lists(st.sampled_from(FUZZED_KEYS + BAD_KEYS).flatmap(lambda k: st.tuples(st.just(k), value_for(k))),
                     max_size=3)
set_texts = st.one_of(st.sampled_from(["model.n_layer", "=3", "a.b.c=1", "model.n_layer=[[[", "train.lr=1e-3e",
                                       "model.n_layer=*x", "model.n_layer=&a [*a]"]), st.text(max_size=20))


def outcome_is_success_or_one_line(result) -> None:
    code, out, err = result
    assert code in (0, 2), f"exit {code}\nstderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
        assert len(lines[0]) < 1000, lines[0][:300]  # bounded, whatever the value


def run(main, args, capsys):
    from tinygpt.errors import run_cli
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        run_cli(main, [str(a) for a in args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread(one_thread):
    """Tiny models: one thread (conftest's one_thread)."""


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """The corpus, a finished run to sample from (and to init_from), and a counter for run dirs."""
    import train
    tmp = tmp_path_factory.mktemp("fuzz")
    rng = random.Random(0)
    words = "Anna Ben saw a red kite and the old dog ran by the lake".split()
    (tmp / "corpus.txt").write_text("".join(" ".join(rng.choice(words) for _ in range(9)) + ".\n" for _ in range(300)))
    (tmp / "base.yaml").write_text(yaml.safe_dump(BASE))
    train.main([str(tmp / "base.yaml"), "--quiet", "--set", f"data.dataset={tmp / 'corpus.txt'}",
                f"data.prepared_dir={tmp / 'prepared'}", f"train.out_dir={tmp / 'trained'}"])
    return {"tmp": tmp, "count": [0]}


@pytest.fixture
def sandbox(place, monkeypatch):
    """Relative paths and '~' land in tmp; returns (tmp, a fresh run dir maker)."""
    tmp = place["tmp"]
    monkeypatch.chdir(tmp)
    monkeypatch.setenv("HOME", str(tmp / "home"))

    def fresh_out_dir() -> Path:
        place["count"][0] += 1
        return tmp / "runs" / str(place["count"][0])
    return tmp, fresh_out_dir


def override_text(key: str, value) -> str:
    """key=value as a --set item: the value as YAML text (a str as written, to be parsed as YAML)."""
    if isinstance(value, str):
        return f"{key}={value}"
    if isinstance(value, float):
        return f"{key}={json.dumps(value)}".replace("Infinity", ".inf").replace("NaN", ".nan")
    return f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"


@settings(PROFILE, max_examples=EXAMPLES * 3 // 2)
@given(items=overrides, raw=st.one_of(st.just([]), st.just([]), st.lists(set_texts, min_size=1, max_size=1)))
def test_train_with_random_overrides(sandbox, capsys, items, raw):
    import train
    tmp, fresh_out_dir = sandbox
    sets = [override_text(k, v) for k, v in items]
    args = [tmp / "base.yaml", "--quiet", "--stop-at", "1", "--set", f"data.dataset={tmp / 'corpus.txt'}",
            f"data.prepared_dir={tmp / 'prepared'}", f"train.out_dir={fresh_out_dir()}", *sets, *raw]
    outcome_is_success_or_one_line(run(train.main, args, capsys))


yaml_docs = st.one_of(
    st.dictionaries(st.sampled_from(["model", "data", "train", "optim", "1", "null"]),
                    st.one_of(wrong, st.dictionaries(st.sampled_from([k.split(".")[-1] for k in FUZZED_KEYS]),
                                                     st.one_of(ints, floats, wrong), max_size=4)), max_size=3),
    st.text(max_size=60),
    st.sampled_from(["model: [", "model: {n_layer: 2", "- 1\n- 2", "model: !!python/object/apply:os.system [ls]",
                     "\t\tmodel: 1", "model: {n_layer: 2}\nmodel: {n_layer: 3}", "---\n---\n", "%YAML 9.9\n---\n1"]),
)


@PROFILE
@given(doc=yaml_docs)
def test_train_with_a_random_config_file(sandbox, capsys, doc):
    import train
    tmp, fresh_out_dir = sandbox
    path = tmp / "fuzzed.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True) if isinstance(doc, dict) else doc, encoding="utf-8")
    base = [f"{s}.{k}={v}" for s, d in BASE.items() if not (isinstance(doc, dict) and s in doc) for k, v in d.items()]
    args = [path, "--quiet", "--stop-at", "1", "--set", f"data.dataset={tmp / 'corpus.txt'}",
            f"data.prepared_dir={tmp / 'prepared'}", f"train.out_dir={fresh_out_dir()}", *base]
    outcome_is_success_or_one_line(run(train.main, args, capsys))


flags = st.lists(st.one_of(
    st.tuples(st.just("--temperature"), st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                                   st.sampled_from([0, 1e-45, 1e-7, 1e308, "abc"]))),
    st.tuples(st.just("--top-k"), st.one_of(st.integers(-2, 40), st.sampled_from([10**20, "x"]))),
    st.tuples(st.just("--top-p"), st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(1e-300))),
    st.tuples(st.just("--max-new-tokens"), st.integers(-3, 12)),
    st.tuples(st.just("--num-samples"), st.integers(-1, 3)),
    st.tuples(st.just("--seed"), st.one_of(st.integers(-2, 5), st.sampled_from([2**63 - 1, 2**63, 2**64, -2**63]))),
    st.tuples(st.just("--prompt"), st.text(max_size=12)),
    st.tuples(st.just("--attention-last"), st.integers(-1, 40)),
    st.tuples(st.just("--attention-of"), st.sampled_from(["prompt", "all", "none"])),
    st.tuples(st.sampled_from(["--no-kv-cache", "--show-steps", "--show-attention", "--force", "--beam"]), st.none()),
), max_size=5)


@settings(PROFILE, max_examples=EXAMPLES * 3 // 2)
@given(chosen=flags)
def test_sample_with_random_flags(sandbox, capsys, chosen):
    import sample
    tmp, _ = sandbox
    args = [tmp / "trained", "--max-new-tokens", "8", "--device", "cpu"]
    for flag, value in chosen:
        args += [flag] if value is None else [flag, str(value)]
    outcome_is_success_or_one_line(run(sample.main, args, capsys))


def test_the_profile_keeps_ci_fast_and_repeatable():
    assert PROFILE.derandomize and PROFILE.deadline is not None

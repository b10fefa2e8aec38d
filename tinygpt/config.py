"""Configuration: YAML -> typed dataclasses, `--set` overrides, validation.

The only place a config is parsed. A config file has three sections, `model` (model.ModelConfig),
`data` and `train`; every field has a default, so a YAML file lists only what it changes. Everything is
checked before any work starts: an unknown key is refused with the closest valid key suggested, a
wrong type names the key, the file and the expected type, and impossible values are refused with
a hint. YAML is read with a safe loader only (no `!!python/...` tags) that also bounds what a tiny
file can ask for: nesting depth, and the values aliases expand to (a "billion laughs" file).
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import math
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable

import yaml

from model import ModelConfig
from tinygpt.errors import UserError, check_path_length, dead_link, elide, read_capped, reason, shell_quote, short

# ---- the schema ----


@dataclass
class DataConfig:
    dataset: str = "stories"  # stories | shakespeare | path/to/file.txt | path/to/folder of .txt
    tokenizer: str = "char"  # char | word | bpe (learned from the text) | a tiktoken encoding: gpt2, cl100k_base, ...
    bpe_vocab_size: int = 1024  # bpe only: tokens of the learned vocabulary (256 bytes + merges)
    compact_vocab: bool = True  # tiktoken only: keep the ids the data uses, the 256 bytes, what BPE builds them from
    val_fraction: float = 0.1  # share of the tokens held out (the end of the text) for validation
    stories_chars: int = 1_500_000  # stories only: size of the generated corpus, in characters
    stories_seed: int = 1337  # stories only: the corpus is a pure function of this seed
    prepared_dir: str = "data/prepared"  # where prepared token arrays are cached


@dataclass
class TrainConfig:
    out_dir: str = "out/stories"  # run directory: config.yaml, ckpt.pt, best.pt, metrics.csv
    batch_size: int = 32  # sequences per micro-step
    grad_accum: int = 1  # micro-steps per optimizer step (tokens/step = batch*accum*block)
    max_iters: int = 2000  # optimizer steps
    lr: float = 1.0e-3  # peak learning rate after warmup
    min_lr: float = 1.0e-4  # cosine decay ends here at max_iters
    warmup_iters: int = 100  # linear warmup steps
    weight_decay: float = 0.1  # AdamW decay on 2-D weights only (not on biases, norms)
    beta1: float = 0.9  # AdamW beta1
    beta2: float = 0.99  # AdamW beta2
    grad_clip: float = 1.0  # clip the global gradient norm to this; 0 = off
    eval_interval: int = 250  # steps between train/val loss estimates and checkpoints
    eval_iters: int = 50  # batches per loss estimate
    log_interval: int = 10  # steps between progress-bar updates and metrics.csv rows (the file is written at evals)
    device: str = "auto"  # auto (cuda, then mps, then cpu) | cpu | cuda | cuda:N | mps
    dtype: str = "float32"  # auto | float32 | bfloat16 | float16 (autocast; float16 adds a grad scaler);
    # auto = bfloat16 where the hardware computes it natively, float16 on Volta/Turing GPUs, else float32
    # (tinygpt/runtime.py resolve_dtype)
    compile: bool = False  # torch.compile the model
    tf32: bool = True  # CUDA: TF32 tensor cores for float32 matmuls (Ampere and later; no effect elsewhere)
    # CPU threads: 0 = the cores other processes leave free and a CPU quota allows, re-checked every second; N = N
    threads: int = 0
    seed: int = 1337  # seeds initialisation, batch sampling and dropout
    init_from: str = ""  # run dir or checkpoint whose weights start a new run (fine-tuning); its model config is used
    plot: str = "end"  # loss.png in the run directory: end (of the run) | eval (at every eval) | never; needs matplotlib
    tensorboard: bool = False  # TensorBoard scalars and attention images in out_dir/tensorboard; needs tensorboard


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


SECTIONS: dict[str, type] = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}
# cuda:N in plain digits, no leading zero (torch refuses cuda:01, and \d would take any script's digits)
DEVICES = re.compile(r"auto|cpu|mps|cuda(:(0|[1-9][0-9]{0,5}))?")
# the keys that take one of a few words: what to write instead of a YAML bool (`plot: off`)
WORDS = {"train.device": "auto, cpu, cuda, cuda:N or mps", "train.plot": "end, eval or never"}
DEVICE_RULE = (f"must be {WORDS['train.device']} (N a device's number, 0 to 999999, in plain digits, no leading 0: "
               f"cuda:1)")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# the model settings a run from other weights (train.init_from) takes from them: only its dropout is its own
# (and its vocabulary size comes from the data, which must be tokenized as theirs was)
FROM_WEIGHTS = ("block_size", "n_layer", "n_head", "n_embd", "bias", "causal")
PATHS = ("data.dataset", "data.prepared_dir", "train.out_dir", "train.init_from")  # '~' is expanded in each
MAX_INT = 2**63 - 1  # every integer setting fits in 64 bits (torch's seeds, sizes and counts do)


def same_path(a: str, b: str) -> bool:
    """Do two path settings (either may be "") name the same file or folder, spelt two ways (`text/`
    and `text`, relative and absolute, seen from the current folder)?"""
    return a == b or (bool(a) and bool(b) and os.path.realpath(a) == os.path.realpath(b))


# ---- safe YAML with limits ----

MAX_DEPTH = 50  # nesting levels; a config needs 2
MAX_THREADS = 1024  # train.threads: libgomp crashes (a segfault, no message) asked for 100,000
MAX_CONFIG_BYTES = 1 << 20  # a config file; ours are under 1 KB
MAX_NODES = 10_000  # values after expanding aliases; a config has ~50


class YAMLRefused(yaml.YAMLError):
    """A YAML document LimitedSafeLoader refuses: beyond MAX_DEPTH or MAX_NODES, a key given twice,
    or a value that cannot be built (`!!int abc`, an integer of thousands of digits)."""


# YAML 1.1's implicit int and float patterns (yaml/resolver.py) without their base-60 forms, in
# which 1:30 reads as 90
# no YAML 1.1 octal: 0500 is not 320 (it stays text, and an integer key says how to write it)
PLAIN_INT = re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$")
PLAIN_FLOAT = re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
                         r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
TAG = "tag:yaml.org,2002:"
NODES = {yaml.ScalarNode: "a single value", yaml.SequenceNode: "a list", yaml.MappingNode: "a mapping"}
# the node each of YAML's own tags is built from (a single value for the others: !!int, !!str ...)
TAG_NODES = {TAG + "map": yaml.MappingNode, TAG + "set": yaml.MappingNode, TAG + "seq": yaml.SequenceNode,
             TAG + "omap": yaml.SequenceNode, TAG + "pairs": yaml.SequenceNode}
KINDS = {"!!bool": "a boolean (true or false)", "!!timestamp": "a date"}  # what PyYAML looks a value up as


def underflows(text: str, number: Any) -> bool:
    """Is `number`, read from `text`, a 0.0 that the text does not mean (1e-400: past float's smallest)?"""
    return isinstance(number, float) and number == 0 and re.search(r"[1-9]", re.split("[eE]", text)[0]) is not None


class LimitedSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader (plain data only, never Python objects) that refuses documents nested deeper
    than MAX_DEPTH, holding more than MAX_NODES values, or expanding to more through aliases: PyYAML
    shares an aliased value, so a 300-byte file can stand for 10^8 values, which any walk (a
    message, a copy) would expand. A key given twice in one mapping is refused (PyYAML keeps the
    last silently, so a second `model:` section would drop the first), and YAML 1.1's surprises are
    not guessed: a date stays a string (an out_dir named 2024-12-01), 1:30 is not the base-60
    number 90 and 0500 not the octal 320."""

    yaml_implicit_resolvers = {
        first: [(tag, PLAIN_INT if tag == TAG + "int" else PLAIN_FLOAT if tag == TAG + "float" else regexp)
                for tag, regexp in resolvers if tag != TAG + "timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._composed = 0
        self._flattened: set[int] = set()  # the mappings whose merge keys are done (by id)

    def compose_node(self, parent, index):  # recursive in PyYAML: count the levels, and the values
        self._depth += 1
        self._composed += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YAMLRefused(f"it nests deeper than {MAX_DEPTH} levels (a config needs 2)")
            if self._composed > MAX_NODES:  # at once: PyYAML composes a 1 MB file's 500,000 values in 35 s
                raise YAMLRefused(f"it holds more than {MAX_NODES:,} values (a config has ~50)")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node):
        _check_expanded_size(node)
        return super().construct_document(node)

    def construct_object(self, node, deep=False):
        """PyYAML's, but a value that YAML's own tag cannot build is refused naming the tag, the value
        and the line: `!!map [1, 2]`, `!!bool maybe`, `!!int` with nothing after it (an IndexError)."""
        line, tag = node.start_mark.line + 1, node.tag.replace(TAG, "!!")
        want = TAG_NODES.get(node.tag, yaml.ScalarNode)
        if node.tag in self.yaml_constructors and not isinstance(node, want):
            raise YAMLRefused(f"{tag} takes {NODES[want]}, not {NODES[type(node)]} (line {line})")
        if node.tag in (TAG + "int", TAG + "float") and isinstance(node, yaml.ScalarNode):  # what the plain
            # resolvers do not guess, the tag made PyYAML read: !!int 0500 as the octal 320, !!int 1:30 as the base-60
            # 90 (and 1:59:59:... in a 900 KB file took 40 s, its cost the square of its digits)
            guessed = ("base-60" if ":" in node.value else
                       "octal" if node.tag == TAG + "int" and re.fullmatch(r"[-+]?0[0-9_]+", node.value) else None)
            if guessed:
                raise YAMLRefused(f"a value cannot be read (line {line}: {tag} {short(node.value)} is YAML 1.1's "
                                  f"{guessed} number, which tinygpt does not read: write it in plain digits)")
        try:
            value = super().construct_object(node, deep)
            if node.tag == TAG + "float" and underflows(node.value, value):
                raise YAMLRefused(f"a value cannot be read (line {line}: {short(node.value)} is too small for a "
                                  f"float: it would read as 0.0)")
            return value
        except (LookupError, ValueError, TypeError, AttributeError, OverflowError) as e:
            if not isinstance(node, yaml.ScalarNode):  # (yaml_load says what it can)
                raise
            if not node.value.strip():
                what = "a !!tag with no value after it"
            elif isinstance(e, (ValueError, OverflowError)):  # int('abc'), or thousands of digits
                what = reason(e).split(";")[0]
            else:  # not found where PyYAML looks it up: `!!bool maybe`, `!!timestamp foo`
                what = f"{tag} {short(node.value)} is not {KINDS.get(tag, 'a value of that type')}"
            raise YAMLRefused(f"a value cannot be read (line {line}: {what})") from None

    def flatten_mapping(self, node):
        """YAML's merge key, done here so that every PyYAML reads a config alike: `<<: *base` gives the
        mapping the keys of `base` it does not set itself, and `<<: [*a, *b]` those of a, then of b
        (the earlier mapping wins, as YAML's merge spec says: PyYAML 6.0.4 let the later win where
        6.0.3 let the earlier). PyYAML's error for `<<: 5` named neither the value nor the line. A key
        given twice in the mapping as written is refused first (flattened, a merged key and the
        mapping's own may both be there, the own one last)."""
        if id(node) in self._flattened:  # an anchored mapping merged again, or built and then merged
            return
        self.check_unique_keys(node)
        merged, own = [], []
        for key_node, value_node in node.value:
            if key_node.tag != TAG + "merge":
                own.append((key_node, value_node))
                continue
            for source in value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]:
                if not isinstance(source, yaml.MappingNode):
                    raise YAMLRefused(f"a merge key '<<' takes a mapping or a list of mappings, not "
                                      f"{short(self.construct_object(source, deep=True))} "
                                      f"(line {source.start_mark.line + 1})")
                self.flatten_mapping(source)  # (its own merges first)
                merged.append(source.value)
        # construct_mapping keeps the last of a key: the later sources first, then the earlier, then our own
        node.value = [pair for pairs in reversed(merged) for pair in pairs] + own
        self._flattened.add(id(node))

    def check_unique_keys(self, node: yaml.MappingNode) -> None:
        """Refuse a key given twice in one mapping: the second would silently replace the first."""
        seen = set()
        for key_node, _ in node.value:
            # `<<: *base` then a key of its own overrides it, as meant; but a second `<<` is a key given twice
            key = "<<" if key_node.tag == TAG + "merge" else self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise YAMLRefused(f"the key {short(key)} appears twice in one mapping (line "
                                      f"{key_node.start_mark.line + 1}); the second would silently replace the first")
                seen.add(key)
            except TypeError:  # a list or a mapping as a key: SafeLoader's own error says so
                pass


def _check_expanded_size(root: yaml.Node) -> None:
    """Count the values the node graph stands for with aliases expanded (each shared node once,
    memoised), refusing a cycle (an alias inside its own anchor) and more than MAX_NODES."""
    sizes: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if done:
            entered.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(node)] > MAX_NODES:
                raise YAMLRefused(f"its aliases expand to more than {MAX_NODES:,} values (a config has ~50)")
        elif id(node) not in sizes:
            if id(node) in entered:
                raise YAMLRefused("an alias refers to the value that holds it (a cycle)")
            entered.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in children)


def yaml_load(text: str) -> Any:
    """Plain data from YAML text through LimitedSafeLoader."""
    loader = LimitedSafeLoader(text)
    try:
        return loader.get_single_data()
    except (LookupError, ValueError, TypeError, AttributeError, OverflowError) as e:  # (construct_object says more)
        raise YAMLRefused(f"a value cannot be read ({reason(e).split(';')[0]})") from None
    finally:
        loader.dispose()

# ---- parsing ----


def _field_types(cls: type) -> dict[str, type]:
    return typing.get_type_hints(cls)


def all_keys() -> list[str]:
    """Every valid dotted key, e.g. 'model.n_head'."""
    return [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]


def unknown_key(key: str, source: str) -> UserError:
    """'did you mean' the closest valid key (a bare section name is matched against sections)."""
    if key in all_keys():  # `model.n_layer: 2` at the top of a file: a dotted key is --set's spelling
        section, name = key.split(".", 1)
        return UserError(f"config key {short(key)} ({source}) is written dotted, as --set takes it; in a file, "
                         f"nest it: '{section}:' with '{name}: ...' indented under it")
    candidates = all_keys() if "." in key else list(SECTIONS)
    # (matched lower-cased, as every key is: 'model.N_LAYER' was nearest to 'model.n_head' letter for letter)
    near = difflib.get_close_matches(key.lower(), candidates, n=1, cutoff=0.5)
    section, name = key.lower().split(".", 1) if key.count(".") == 1 else (key.lower(), None)
    # a key of another section is that key, not the one nearest in spelling ('model.batch_size' was sent to
    # model.block_size, a run of another context length); a section nested in another is misplaced
    elsewhere = [k for k in all_keys() if k.split(".", 1)[1] == (key.lower() if name is None else name)]
    if elsewhere and name is None:  # `n_layer: 1` at the top of a file
        where = elsewhere[0].split(".", 1)[0]
        hint = f"; it is a key of section {where}: nest it, '{where}:' with '{key.lower()}: ...' indented under it"
    elif elsewhere:
        hint = f"; did you mean '{elsewhere[0]}'?"
    elif name in SECTIONS and f"{name}.{section}" in all_keys():  # `n_layer.model`: written the other way round
        hint = f"; did you mean '{name}.{section}'?"
    elif name in SECTIONS:
        hint = f"; '{name}' is a section of its own, not a key of {section}: write it unindented, at the top level"
    elif near:
        hint = f"; did you mean '{near[0]}'?"
    elif "." in key and section in SECTIONS:  # a known section: its keys, not the sections
        hint = f"; {section}'s keys: {', '.join(k.split('.', 1)[1] for k in all_keys() if k.startswith(section + '.'))}"
    else:
        hint = f"; valid sections: {', '.join(SECTIONS)}"
    return UserError(f"unknown config key {short(key)} ({source}){hint}")


def _coerce(value: Any, typ: type, key: str, source: str, recorded: bool = False) -> Any:
    """Check one value against its field type; ints are accepted for floats. Integers must fit
    in 64 bits, floats must be finite, strings must not hold a NUL; a path must be encodable as a
    file name and has '~' expanded, and a `$VAR` in it is refused unless `recorded` (see config_from_dict)."""
    if typ is bool and isinstance(value, bool):
        return value
    if typ is int and isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > MAX_INT:
            raise UserError(f"{key}={short(value)} ({source}) is too large: integers must fit in 64 bits")
        return value
    if typ is float and not isinstance(value, bool):
        number = None
        if isinstance(value, int):
            try:
                number = float(value)
            except OverflowError:  # past 1.8e308
                raise UserError(f"{key}={short(value)} ({source}) is too large for a float") from None
        elif isinstance(value, float):
            number = value
        elif isinstance(value, str) and value.isascii():  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            if not math.isfinite(number):
                raise UserError(f"{key}={short(value)} ({source}) must be a finite number")
            if isinstance(value, str) and underflows(value, number):  # (YAML 1.1 leaves 1e-400 text: no dot)
                raise UserError(f"{key}={short(value)} ({source}) is too small for a float: it would read as 0.0")
            return number
    if typ is str and isinstance(value, str):
        if "\0" in value:
            raise UserError(f"{key}={short(value)} ({source}) holds a NUL character")
        if key in PATHS:
            try:
                os.fsencode(value)
            except UnicodeEncodeError:  # a lone surrogate ("\ud800" in YAML): no file name holds it
                raise UserError(f"{key}={short(value)} ({source}) holds a character the file system cannot "
                                f"encode") from None
            # a line break at either end (a YAML block scalar, `out_dir: |`, keeps one) goes, as --set drops it
            value = os.path.expanduser(value.strip(BREAKS))
            user = value.split("/", 1)[0]
            if user.startswith("~") and user != "~":  # '~name' of no user: expanduser left it as it was
                raise UserError(f"{key}={short(value)} ({source}): {user} names no user of this machine (no home "
                                f"folder to expand it to)")
            variable = re.search(r"\$(\{\w+\}|[A-Za-z_]\w*)", value)
            if variable and not recorded and not os.path.lexists(value):  # (it would make a folder named `$HOME`)
                raise UserError(f"{key}={short(value)} ({source}): {variable.group()} is not expanded in a config; "
                                f"write the path itself (a leading ~ is your home folder)")
            if not recorded:  # (it was `File name too long: PATH`, naming no key, once a file was opened)
                check_path_length(Path(value), f"{key}={short(value)} ({source})", "is no possible path")
        return value
    if (value is None and key not in PATHS) or (value == "" and typ is not str):  # `n_layer:` read as None, NoneType
        wanted = WORDS.get(key) or {int: "an integer", float: "a number", bool: "true or false"}.get(typ, "a text")
        raise UserError(f"{key} ({source}) has no value (~, null or an empty value is YAML's null); "
                        f"give {'one of ' * (key in WORDS)}{wanted}")
    hint = ""
    if typ is int and isinstance(value, str):  # 0500, 1e3: numbers YAML reads as text
        with contextlib.suppress(ValueError, OverflowError):
            number = float(value)
            if number.is_integer() and value == str(int(number)):  # "1" (quoted, or tagged !!str): plain already
                hint = f": a number in quotes (or tagged !!str) is text; write it without them, {value}"
            elif number.is_integer():
                hint = f": write it in plain digits, {int(number)}"
    if typ is str and value is None and key in PATHS:  # `out_dir: ~` meant the home folder
        hint = ": ~, null or an empty value is YAML's null; quote a path, e.g. '~' or '~/runs'"
    if key in WORDS:  # `plot: off` is a bool, and "off" no word of it either
        hint = f": one of {WORDS[key]}"
    elif typ is str and isinstance(value, (bool, int, float)):  # `out_dir: 2024` or `yes` in a file (--set keeps text)
        example = ("yes" if value else "no") if isinstance(value, bool) else elide(str(value), 40)
        hint = f': write it in quotes, e.g. {key.split(".", 1)[1]}: "{example}"'
    raise UserError(f"{key}={short(value)} ({source}) must be of type {typ.__name__}, "
                    f"not {type(value).__name__}{hint}")


def _yaml_word(key: Any) -> str:
    """A key that is not a text, as YAML spells it: `true`, `null`, `1`, or an integer of 20000 bits."""
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    return short(key)


def config_from_dict(raw: Any, source: str, recorded: bool | Collection[str] = False) -> Config:
    """Build a validated Config from nested plain data (as read from YAML). `recorded`: a config tinygpt wrote
    (a run's config.yaml, a checkpoint's), or those of its keys ('train.out_dir') that hold what it wrote, whose
    paths were checked when it was written: a `$` in one is a name (a run trained on '$x.txt' was refused by
    every command once the file had moved)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(f"{source} must hold a mapping with sections {', '.join(SECTIONS)}, "
                        f"not {type(raw).__name__}")
    cfg = Config()
    for section, values in raw.items():
        if not isinstance(section, str):  # `1: ...` or `? 0x<5000 digits>` (an f-string cannot print that one)
            raise UserError(f"a config section ({source}) is {_yaml_word(section)}, not a name; valid sections: "
                            f"{', '.join(SECTIONS)}")
        if section not in SECTIONS:
            raise unknown_key(section, source)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise UserError(f"section '{section}' ({source}) must be a mapping of keys to values")
        types = _field_types(SECTIONS[section])
        for name, value in values.items():
            if not isinstance(name, str):
                raise UserError(f"a config key in section '{section}' ({source}) is {_yaml_word(name)}, not a name; "
                                f"{section}'s keys: {', '.join(types)}")
            key = f"{section}.{name}"
            if name not in types:
                raise unknown_key(key, source)
            as_written = recorded if isinstance(recorded, bool) else key in recorded
            setattr(getattr(cfg, section), name, _coerce(value, types[name], key, source, as_written))
    validate(cfg, source)
    return cfg


BREAKS = "\t\n\r\x0b\x0c\x85\u2028\u2029"  # a tab and what YAML (or Python) reads as a line break


def set_key(item: str) -> str:
    """The dotted key of one --set item as parse_overrides reads it: 'train.lr' of ' train.lr =3e-4'."""
    return item.partition("=")[0].strip()


def parse_overrides(overrides: Iterable[str], source: str = "--set") -> dict:
    """['model.n_head=8', 'train.lr=3e-4'] -> {'model': {'n_head': 8}, 'train': {'lr': '3e-4'}}.

    Values are parsed as YAML scalars, so 8 is an int, true a bool, and 'abc' a string; a key
    that takes a string (a path, a name) keeps its text where YAML would read another type:
    out_dir=~ is the home folder, not YAML's null, and out_dir=2024 the folder 2024, not a number
    (the text is still YAML: ' #' starts a comment, quotes are taken off), except one holding a line
    break or a tab, which YAML would fold into a space or refuse: that text is kept as given, but
    for spaces, tabs and line breaks at either end, which YAML drops too."""
    nested: dict[str, dict] = {}
    for item in overrides:
        _, sep, text = item.partition("=")
        key = set_key(item)
        if not sep or key.count(".") != 1:
            raise UserError(f"{source} {short(item)} must look like SECTION.KEY=VALUE, e.g. model.n_head=8")
        section, name = key.split(".")
        types = _field_types(SECTIONS[section]) if section in SECTIONS else {}
        # bytes the shell passed that are not UTF-8 (a folder's name) come as surrogates, which YAML refuses:
        # they are read as private-use characters and put back in the text YAML gives
        surrogates = {ch: chr(0xF0000 + ord(ch) - 0xDC80) for ch in set(text) if "\udc80" <= ch <= "\udcff"}
        if surrogates and name in types and types[name] is not str:
            raise UserError(f"{source} {short(item)}: the value holds bytes that are not UTF-8 text")
        bare = text.strip(" " + BREAKS)  # as YAML: a CRLF script's last argument ends in \r, not its file's name
        if types.get(name) is str and any(ch in bare for ch in BREAKS):  # (a file name may hold them)
            nested.setdefault(section, {})[name] = bare
            continue
        try:
            value = yaml_load(bare.translate({ord(s): p for s, p in surrogates.items()})) if bare else ""
            if surrogates and isinstance(value, str):
                value = value.translate({ord(p): s for s, p in surrogates.items()})
        except YAMLRefused as e:
            raise UserError(f"{source} {short(item)}: the value is refused: {e}") from None
        except (yaml.YAMLError, RecursionError):
            if any(ch in text for ch in BREAKS):
                raise UserError(f"{source} {short(item)}: the value is not a valid YAML scalar: it holds a "
                                f"tab or a line break") from None
            quoted = f": {source} {shell_quote(quoted_word(key, bare))}" if types.get(name) is str else ""
            raise UserError(f"{source} {short(item)}: the value is not a valid YAML scalar (YAML reads a text "
                            f"that starts with @, *, !, &, % or a quote only in quotes{quoted})") from None
        if types.get(name) is str and not isinstance(value, str):
            value = bare
        if types.get(name) is str and value != bare and bare[:1] not in ("'", '"'):
            # YAML syntax read out of the unquoted text, without a word: `train.out_dir=/x/run #2` trained into
            # /x/run (a comment), `&x /runs/a` into /runs/a (an anchor), `--- a` into a; `|` was empty
            comment = " #" in bare and value == bare.partition(" #")[0].rstrip()
            why, kept = ("' #' starting a comment", "it") if comment else ("not as the text given", "the text")
            more = ", its other values after a comma" if source == "--grid" else ""  # (the grid's fix, not --set's)
            raise UserError(f"{source} {short(item)}: YAML reads the value as {short(value)}, {why}; to keep {kept}, "
                            f"quote it: {source} {shell_quote(quoted_word(key, bare))}{more}")
        nested.setdefault(section, {})[name] = value
    return nested


def set_word(key: str, value: str) -> str:
    """KEY=VALUE for --set that reads back as the text `value` (a path): as it is where parse_overrides
    keeps it, else in YAML's double quotes (JSON's are YAML's): ' #' would start a comment, a leading
    '*' or quote is refused."""
    plain = f"{key}={value}"
    section, _, name = key.partition(".")
    try:
        if parse_overrides([plain]).get(section, {}).get(name) == value:
            return plain
    except UserError:
        pass
    return quoted_word(key, value)


def set_arg(key: str, value: Any) -> str:
    """KEY=VALUE as --set takes it (true, not True; a text YAML would change, a path with ' #', in
    quotes: set_word), quoted for the shell."""
    if isinstance(value, str):
        return shell_quote(set_word(key, value))
    return shell_quote(f"{key}={'true' if value is True else 'false' if value is False else value}")


def quoted_word(key: str, value: str) -> str:
    """KEY="VALUE" in YAML's double quotes (JSON's are YAML's), read back as the text `value` whatever it holds:
    parse_overrides' advice for a value it misreads or refuses (set_word there recursed into parse_overrides
    until Python's recursion limit, which the refusal of a bad scalar caught)."""
    return f"{key}={json.dumps(value)}"


def check_type(item: str, source: str) -> None:
    """Refuse a KEY=VALUE (a known key) whose value cannot be of the key's type, a typo such as
    model.n_head=abc or 02, with the line load_config would give; its range is not checked (sweep.py:
    a value impossible beside others only skips their combinations)."""
    [(section, values)] = parse_overrides([item], source).items()
    [(name, value)] = values.items()
    _coerce(value, _field_types(SECTIONS[section])[name], f"{section}.{name}", source)


def _yaml_problem(e: yaml.YAMLError, text: str = "") -> str:
    """What PyYAML found and where ('found character '\\t' that cannot start any token, line 2,
    column 1'), not only its first line ('while scanning for the next token'). A character YAML
    refuses (a control character, a NUL) has its offset in `text`, not a mark."""
    mark = getattr(e, "problem_mark", None)
    where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    if isinstance(e, yaml.reader.ReaderError) and 0 <= e.position <= len(text):
        before = text[:e.position].lstrip("\ufeff")  # (a byte order mark is no column)
        code = e.character if isinstance(e.character, int) else ord(e.character)
        return (f"character U+{code:04X} is not allowed (a control character), line {before.count(chr(10)) + 1}, "
                f"column {len(before) - before.rfind(chr(10))}")
    problem = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
    if problem.startswith("but ") and getattr(e, "context", None):  # "but found another document"
        problem = f"{e.context}, {problem}"
    return f"{elide(problem, 200)}{where}"


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file safely (LimitedSafeLoader); a missing or unreadable file, a syntax error, a
    Python tag or a document the loader refuses is a UserError naming the file."""
    if not str(path):  # (Path("") is ".", the current folder: an unset variable, `train.py "$CONFIG"`)
        raise UserError("the config file's path is empty; give a config file (.yaml), e.g. configs/stories.yaml")
    path = Path(path)
    if path.is_dir():
        example = path / "config.yaml" if (path / "config.yaml").is_file() else "configs/stories.yaml"  # (a run's)
        raise UserError(f"{path} is a directory; give a config file (.yaml), e.g. {example}")
    if not path.exists():
        dead = dead_link(path)
        raise UserError(f"config file {path} is {dead}" if dead else f"config file not found: {path}")
    data = read_capped(path, MAX_CONFIG_BYTES,  # (or a pipe)
                       lambda size: f"{path} is refused: it is over {MAX_CONFIG_BYTES:,} bytes, and a config is a "
                                    f"few plain keys", lambda why: f"cannot read config file {path}: {why}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not valid YAML: it is not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        return yaml_load(text)
    except YAMLRefused as e:
        raise UserError(f"{path} is refused: {e}") from None
    except RecursionError:
        raise UserError(f"{path} is refused: it nests too deeply") from None
    except yaml.constructor.ConstructorError as e:
        line = f" (line {e.problem_mark.line + 1})" if e.problem_mark else ""
        problem = e.problem or ""
        if "unhashable" in problem:
            raise UserError(f"{path}: a list or a mapping is used as a key{line}; keys are plain names "
                            f"such as n_layer") from None
        if problem.startswith("could not determine a constructor"):  # `!!python/object/apply:os.system`
            tag = problem.split()[-1].strip("'\"").replace(TAG, "!!")
            where = f"line {e.problem_mark.line + 1}; " if e.problem_mark else ""
            raise UserError(f"{path}: unsupported YAML tag {short(tag)} ({where}only plain YAML is read, never "
                            f"Python objects)") from None
        context = f"{e.context}: " if e.context else ""  # 'while constructing an ordered map: expected ...'
        raise UserError(f"{path} is refused: {context}{elide(problem, 200)}{line}") from None
    except yaml.YAMLError as e:
        raise UserError(f"{path} is not valid YAML: {_yaml_problem(e, text)}") from None


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> Config:
    """YAML file + dotted overrides -> validated Config."""
    raw = read_yaml(path)
    if raw is not None and not isinstance(raw, dict):
        raise UserError(f"{path} must hold a mapping with sections {', '.join(SECTIONS)}, not {type(raw).__name__}")
    merged = {k: dict(v) if isinstance(v, dict) else v for k, v in (raw or {}).items()}
    overrides = list(overrides)
    given = parse_overrides(overrides)
    for section, values in given.items():
        if section not in SECTIONS:
            raise unknown_key(f"{section}.{next(iter(values))}", "--set")
        base = merged.get(section)
        if base is not None and not isinstance(base, dict):  # config_from_dict would say so without --set
            raise UserError(f"section '{section}' ({path}) must be a mapping of keys to values")
        merged[section] = {**(base or {}), **values}
    # a run's own config.yaml (`train.py RUN/config.yaml --resume`, the run moved since) holds what tinygpt wrote;
    # a --set is the user's
    recorded = ({f"{s}.{k}" for s, v in (raw or {}).items() if isinstance(v, dict) for k in v}
                - {f"{s}.{k}" for s, v in given.items() for k in v}) if is_runs_own_config(path) else set()
    return config_from_dict(merged, config_source(path, overrides), recorded)


def config_source(path: str | Path, overrides: Iterable[str] = ()) -> str:
    """Where a config's values came from, for messages: 'configs/stories.yaml with --set'."""
    return f"{path}" + (" with --set" if overrides else "")


def config_to_dict(cfg: Config) -> dict:
    """Plain nested data (safe to store in YAML or a checkpoint) that config_from_dict reads back."""
    return dataclasses.asdict(cfg)


CHECKPOINTS = ("ckpt.pt", "best.pt")  # a run's checkpoints (its other files: runs.py's RUN_FILES)
RUN_HEADER = "# the resolved config of this run; model.vocab_size comes from the tokenizer"  # config.yaml's first line
OLD_HEADER = re.compile(r"# model\.vocab_size = \d+ \(from the tokenizer\)")  # the same, before 2026-11-29


def config_to_yaml(cfg: Config) -> str:
    """The resolved config of a run, as its config.yaml."""
    return RUN_HEADER + "\n" + yaml.safe_dump(config_to_dict(cfg), sort_keys=False)


def is_run_header(line: str) -> bool:
    """Is `line` the first line a run writes in its config.yaml (or wrote, OLD_HEADER)?"""
    return line == RUN_HEADER or OLD_HEADER.fullmatch(line) is not None


def is_run_config(path: str | Path) -> bool:
    """Did a run write the file at `path` (its config.yaml: is_run_header first)? False where it cannot be read, and
    for what is no regular file (a pipe's bytes, `train.py <(cat c.yaml)`, are read once)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:
            return is_run_header(f.readline(len(RUN_HEADER) + 3).decode("utf-8", "replace").rstrip("\r\n"))
    except OSError:
        return False


def is_runs_own_config(path: str | Path) -> bool:
    """Is the file at `path` a run's own config.yaml, is_run_config beside the run's checkpoint? A copy taken out
    of its run to edit (the header came along) is the user's: its `$HOME` made a folder of that name."""
    return is_run_config(path) and any(os.path.isfile(Path(path).parent / name) for name in CHECKPOINTS)


# ---- validation ----


def _divisors(n: int) -> str:
    """The first 8 divisors of n >= 1, then "..." if there are more (found among 1..10**5: n_embd can be
    any size a YAML file spells, and the search took minutes at 10**9)."""
    divs = [d for d in range(1, min(n, 10**5) + 1) if n % d == 0]
    return ", ".join(map(str, divs[:8])) + (", ..." if len(divs) > 8 or n > 10**5 else "")


def validate(cfg: Config, source: str) -> None:
    """Refuse impossible values, naming the key and the file."""
    m, d, t = cfg.model, cfg.data, cfg.train

    def need(ok: bool, key: str, value: Any, why: str) -> None:
        if not ok:
            raise UserError(f"{key}={short(value)} ({source}) {why}")

    for name in ("block_size", "n_layer", "n_head", "n_embd"):
        need(getattr(m, name) >= 1, f"model.{name}", getattr(m, name), "must be >= 1")
    need(m.vocab_size >= 0, "model.vocab_size", m.vocab_size, "must be >= 0 (0: from the tokenizer, as always)")
    if m.n_embd % m.n_head != 0:
        raise UserError(f"model.n_embd={m.n_embd} is not divisible by model.n_head={m.n_head} "
                        f"({source}); valid n_head: {_divisors(m.n_embd)}")
    need(0.0 <= m.dropout < 1.0, "model.dropout", m.dropout, "must be in [0, 1)")
    need(bool(d.dataset.strip()), "data.dataset", d.dataset, "must name a dataset or a path")
    import tiktoken  # (its names only: an encoding is loaded, or downloaded, when the data is prepared)
    encodings = tiktoken.list_encoding_names()
    need(d.tokenizer in ("char", "word", "bpe", *encodings), "data.tokenizer", d.tokenizer,
         f"must be char, word, bpe or a tiktoken encoding: {', '.join(encodings)}")
    need(257 <= d.bpe_vocab_size <= 65536, "data.bpe_vocab_size", d.bpe_vocab_size, "must be in 257..65536")
    need(0.0 < d.val_fraction < 1.0, "data.val_fraction", d.val_fraction, "must be in (0, 1)")
    need(d.stories_chars >= 10_000, "data.stories_chars", d.stories_chars, "must be >= 10000")
    # (Python's random.Random(-5) is Random(5): a negative seed would repeat a positive one's corpus)
    need(0 <= d.stories_seed < MAX_INT, "data.stories_seed", d.stories_seed, "must be in [0, 2**63 - 1)")
    for name in ("batch_size", "grad_accum", "eval_interval", "eval_iters", "log_interval"):
        need(getattr(t, name) >= 1, f"train.{name}", getattr(t, name), "must be >= 1")
    need(t.max_iters >= 0, "train.max_iters", t.max_iters, "must be >= 0")
    need(0 <= t.seed < MAX_INT, "train.seed", t.seed, "must be in [0, 2**63 - 1)")
    need(t.warmup_iters >= 0, "train.warmup_iters", t.warmup_iters, "must be >= 0")
    need(math.isfinite(t.lr) and t.lr > 0, "train.lr", t.lr, "must be > 0")
    need(0 <= t.min_lr <= t.lr, "train.min_lr", t.min_lr, f"must be in [0, train.lr={t.lr}]"
         + (f": a train.lr below it needs a lower one too, e.g. train.min_lr={t.lr / 10:g}" if t.min_lr > t.lr else ""))
    need(t.weight_decay >= 0, "train.weight_decay", t.weight_decay, "must be >= 0")
    need(0 <= t.beta1 < 1, "train.beta1", t.beta1, "must be in [0, 1)")
    need(0 <= t.beta2 < 1, "train.beta2", t.beta2, "must be in [0, 1)")
    need(t.grad_clip >= 0, "train.grad_clip", t.grad_clip, "must be >= 0 (0 turns clipping off)")
    need(bool(DEVICES.fullmatch(t.device)), "train.device", t.device, DEVICE_RULE)
    need(t.dtype in DTYPES, "train.dtype", t.dtype, f"must be one of {', '.join(DTYPES)}")
    need(bool(t.out_dir.strip()), "train.out_dir", t.out_dir, "must be a directory path")
    need(bool(d.prepared_dir.strip()), "data.prepared_dir", d.prepared_dir, "must be a directory path")
    need(t.plot in ("end", "eval", "never"), "train.plot", t.plot, f"must be {WORDS['train.plot']}")
    need(0 <= t.threads <= MAX_THREADS, "train.threads", t.threads,
         f"must be in 0..{MAX_THREADS} (0 = the free cores; more threads than cores only slow it down)")


def flat_config(cfg: Config) -> dict[str, Any]:
    """Config -> {'model.n_head': 4, ...} in schema order."""
    return {f"{s}.{k}": v for s, values in config_to_dict(cfg).items() for k, v in values.items()}

"""Train every combination of a grid of config values, then tabulate and plot them side by side.

    python sweep.py CONFIG.yaml --grid model.n_head=1,2,4,8 model.n_embd=64,128
                    [--set KEY=VALUE ...] [--seeds N] [--probe] [--jobs N] [--out DIR] [--quiet]

Each combination is checked like a `--set` (values are YAML scalars; a value that cannot be of its key's
type, a typo such as n_head=abc, refuses the sweep at once, and so does a value that no combination can
train, model.n_layer=0 or a train.init_from with no checkpoint there, or two values that are one, 1 and 0x1,
d.txt and ./d.txt); an impossible one (say n_embd=64 with n_head=3, where n_head=3 trains with another
n_embd; or a model key that train.init_from's weights decide, at a value that is not theirs: a run from them
takes their model), one that differs from another only in a data key its tokenizer does not use (a char
run's data.bpe_vocab_size: the same run) or in an `auto` that this machine resolves to the other's value
(train.device=cpu,auto on a CPU), or a value given twice, is skipped with a note. Each valid one
trains into its own run directory under the sweep folder (default out/sweeps/<config stem>), named after its
values, e.g. `n_head=4,n_embd=128` (a hash of the values added where a value holds a character a name cannot,
`dataset=d_x.txt-1f0e3a2b` for d/x.txt, or where two names differ only in case). Running the same command
again skips finished runs (ckpt.pt at max_iters), resumes unfinished ones from their ckpt.pt, and restarts a
run that stopped before its first checkpoint (a finished run's config.yaml or metrics.csv lost or damaged, or
its config.yaml edited, is restored from its ckpt.pt); a run the folder holds under another name with the same
settings (the grid's keys given in another order, --seeds added to a sweep without it: its run is that of the
config's train.seed) is skipped or resumed there, a line saying so (new runs keep their names). A second sweep
on the same folder while one runs is refused at once, one line naming the other's process id (the sweep folder
is locked for the whole sweep). A run directory it cannot reuse (trained with other settings, say another
--set or train.max_iters, over which the learning rate decays; trained on a data.dataset file that changed
since; holding best.pt but no ckpt.pt; a finished run whose metrics.csv is damaged or gone, its ckpt.pt an
older tinygpt's, carrying no rows; a folder of files no run wrote) refuses the sweep before anything is
trained, the folder's report left as it was; so does a run train.py would refuse at its start (a train.device
this machine lacks, a data.dataset that is not there, its run folder in use by another training, a file, a
link to nothing or holding a config.yaml of the user's, a model that cannot fit in memory, a model.block_size
longer than a split of its data, which the sweep prepares as its first run would), one line naming the run and
the key. Runs of another grid in the folder stay, but are not in this sweep's report, which replaces the
folder's sweep report: a note says so before any training (--out keeps two sweeps' reports apart); a
comparison's report there, a file of a report's name that no report wrote, a Hugging Face export's folder or a
folder inside a run, is refused. The report's files are replaced together or not at all (compare.py's
docstring). At the end it prints the table and writes results.md, results.csv, summary.csv, val_loss.png and
settings.png (with matplotlib; settings.png for two settings or more) into the sweep folder: the same report
as compare.py.

One run per setting says little: runs differ from seed to seed. `--seeds N` trains every setting
with N seeds (a `train.seed` grid key: seed=1337, seed=1338, ...), and the report then gives, per
setting, every metric's mean, standard deviation and 95% interval over the seeds, says which
settings differ beyond their intervals, and plots the mean val-loss curves with a band and each
setting's results with their intervals (settings.png: against the first grid key, one line per
value of the others); a run that failed or did not finish is listed but not averaged. `--probe`
adds the coreference probe (tinygpt/coreference.py) to every run (each must train on `stories`: a
grid with another data.dataset is refused before any training): the shares of references resolved
to the antecedent, the distractor or neither, and the best heads' attention ratios; it is saved as
probe.json in the run directory, so a rerun does not probe again (unless --probe-stories changed).

Each run reads the config file as it starts: one edited during the sweep so that it gives a run other
settings than planned (an edited comment does not) leaves that run `not started (config edited)`, exit 1,
rather than mix two configs in one report; a data.dataset file edited meanwhile, `not started (data edited)`. An edit
in the seconds a run takes to read them, after the sweep's last look, is found in the run's ckpt.pt once it has
trained: `not as planned (config edited as it started)` (or data), exit 1, left out of the means; remove its folder to
train it again.

Each run is `python train.py ...` in a subprocess, not train.main() in this process: a crash, an
out-of-memory kill or a user error in one run is reported (a signal by its name, `killed by
SIGKILL`; with --jobs, the run's `error:` line in its report row) and the sweep goes on with the
next; every run starts from a clean process (seeds, threads, device memory); and Ctrl-C is passed
to each running run once, so it saves its checkpoint before the sweep stops (no other run starts;
the report lists those as their folders have them: `not started` where none is). The cost is ~2 s
of start-up per run. `--jobs N` trains N runs at once, each on its share of the CPU cores, their
output line by line behind each run's name:
small models use several cores poorly, so on a CPU side by side is faster than one after the other.
A sweep plans at most 1,000 runs (combinations x seeds), and --jobs at most one run per CPU core
this process may use. On Linux, a sweep that dies (even by SIGKILL) sends its running runs SIGTERM
(prctl's PR_SET_PDEATHSIG): each saves its checkpoint and exits, and the rerun resumes it. Exit
code: 0 when every run finished, 1 when some run failed (the report is still written), 2 for a user
error in the sweep's own arguments, a run directory it cannot reuse or a run train.py would refuse.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

if __name__ == "__main__":  # before the imports below load torch: a Ctrl-C then is `interrupted`, not a traceback
    from tinygpt.errors import stop_while_starting
    stop_while_starting()

import torch

from data.prepare import BUILTIN, check_block_fits, fingerprint, prepare, prepared_dir, read_json, same_dataset
from model import ModelConfig
from tinygpt.checkpoint import (check_init_tokenizer, check_writable, checkpoint_config, load_checkpoint, load_model,
                                peek_checkpoint, resolve_checkpoint, saved_step_and_data)
from tinygpt.config import (FROM_WEIGHTS, MAX_INT, Config, all_keys, check_type, config_source, flat_config,
                            load_config, parse_overrides, read_yaml, unknown_key)
from tinygpt.coreference import check_stories, held_out_seed, probe
from tinygpt.errors import (TORCHRUN_ENV, ArgParser, UserError, elide, first_few, handle_signals, path_arg,
                            restore_signals, run_cli, short, shown_path, work_is_files)
from tinygpt.report import (ERROR_STATUS, NEVER_COMPARED, SEED, applies, check_report_folder, pictures_note,
                            write_report)
from tinygpt.runs import (DIVERGED, REPORT_LOCK, TRAIN_FILES, DamagedProbe, check_run_dir, died_at_its_first_save,
                          file_sha256, lock_holder, read_config, read_probe, resumed_metrics, run_lock, summarize_run,
                          trained_steps, users_config, write_probe)
from tinygpt.runtime import (ThreadPolicy, check_training_fits, parent_death_signal, resolve_device, resolve_dtype,
                             usable_cores)
from tinygpt.tensorboard_log import require_tensorboard

TRAIN_PY = Path(__file__).resolve().parent / "train.py"
UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")  # anything else in a run directory name becomes '_'
MAX_NAME = 120
NOT_AS_PLANNED = "not started (config edited)"  # the status of a run the sweep did not start: config_edited
DATA_EDITED = "not started (data edited)"  # and of one whose data.dataset changed since the sweep planned: data_edited
# the status of a run that trained on a config or data.dataset file edited in the seconds it took to read them (after
# the sweep's last look): trained_otherwise, from its ckpt.pt
TRAINED_OTHERWISE = "not as planned ({} edited as it started)"
# runs in one sweep (combinations x seeds): planning reads the config file once per run (2-3 ms,
# so 10,000 took 30 s just to plan), and each run takes seconds to hours: more is a typo
# (--seeds 100000000), not an experiment
MAX_RUNS = 1_000
# a rerun may change these and still reuse a run: they do not change what is computed (train.max_iters
# does: the learning rate's cosine decays over it, so a run resumed to more steps is not the run asked for)
REUSABLE_ACROSS = {"train.out_dir", "train.device", "train.compile", "train.threads", "train.plot", "train.tf32",
                   "train.tensorboard", "data.prepared_dir", "model.vocab_size"}

# ---- the grid ----


def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
    """['model.n_head=1,2,4', ...] -> {'model.n_head': ['1', '2', '4'], ...} (value texts, in order); a
    value given twice is one value, with a note (on stdout, where the skipped combinations are noted)."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        values = [v.strip() for v in text.split(",")]
        if not sep or key.count(".") != 1 or not all(values):
            raise UserError(f"--grid '{item}' must look like SECTION.KEY=V1,V2,..., e.g. model.n_head=1,2,4")
        if text.strip().startswith("[") and text.strip().endswith("]"):  # a YAML list: its commas split it in halves
            raise UserError(f"--grid {short(item)}: the values are listed without brackets, e.g. "
                            f"{key}={','.join(v.strip(' []') for v in values)}")
        if any(v[0] in "'\"" and (len(v) == 1 or v[-1] != v[0]) for v in values):  # a quote the comma cut open
            raise UserError(f"--grid {short(item)}: the values are split at every comma, in quotes too, so a value "
                            f"cannot hold one; give that value with --set {key}=... in a sweep of its own")
        if key in grid:
            raise UserError(f"--grid {key} is given twice; list all its values once: {key}=V1,V2,...")
        grid[key] = list(dict.fromkeys(values))  # drop repeated values, keep the order
        for value, n in Counter(values).items():
            if n > 1:
                print(f"note: --grid {key}: {value} is given {'twice' if n == 2 else f'{n} times'}; its runs are "
                      f"trained once")
    return grid


def check_keys(config: str, grid: dict[str, list[str]], sets: Sequence[str]) -> None:
    """Refuse unknown keys in --grid and --set up front (with config's own message), and the keys
    the sweep sets itself; a bad *value* only makes its combinations invalid."""
    if not isinstance(read_yaml(config), (dict, type(None))):  # a missing or broken file: its one-line error
        load_config(config)  # a list, say: config's error, once, not as a note on every combination
    known = set(all_keys())
    for key in (f"{s}.{k}" for s, d in parse_overrides(sets).items() for k in d):
        if key in grid:
            raise UserError(f"--set {key} and --grid {key} both give it: the grid's values would win; give it in "
                            f"one of them")
        if key == "train.out_dir":
            raise UserError("--set train.out_dir: the sweep gives each run its own out_dir; choose the "
                            "sweep folder with --out")
        if key not in known:
            load_config(config, sets)  # raises config's unknown-key error, with its suggestion
    for key, values in grid.items():
        if key == "train.out_dir":
            raise UserError("--grid train.out_dir: the sweep gives each run its own out_dir under --out")
        if key == "model.vocab_size":
            raise UserError("--grid model.vocab_size: the vocabulary size comes from the tokenizer; vary "
                            "data.tokenizer or data.bpe_vocab_size instead")
        if key not in known:  # (parse_grid let only SECTION.KEY through)
            raise unknown_key(key, "--grid")


def check_types(grid: dict[str, list[str]]) -> None:
    """Refuse, before any planning, a grid value that cannot be of its key's type ('abc' or '02' for
    model.n_head), with config's own line naming key and value: a typo, which make_plan would take
    for an impossible combination and skip, training the rest. A value of the right type that is
    impossible beside the others (n_head=3 with n_embd=16) still only skips its combinations."""
    for key, values in grid.items():
        for text in values:
            check_type(f"{key}={text}", "--grid")


def run_names(keys: Sequence[str], combos: Sequence[tuple[str, ...]]) -> list[str]:
    """Filesystem-safe, unique directory names from the varied values: 'n_head=4,n_embd=128'. A name
    whose values held other characters ('/', a space: made '_'), or too long, ends in a hash of the
    values ('dataset=d_x_a.txt-1f0e3a2b'): d/x_a.txt and d/x/a.txt would read alike, in this grid or
    in another sweep into the same folder, where the second would find the first's run in its folder.
    Names that differ only in case are hashed too (one folder on macOS's and Windows' disks)."""
    short = [k.split(".", 1)[1] for k in keys]
    if len(set(short)) != len(short):  # e.g. the same field name in two sections
        short = list(keys)
    raw = [",".join(f"{k}={v}" for k, v in zip(short, combo)) for combo in combos]
    names = [UNSAFE.sub("_", r) for r in raw]
    counts = Counter(name.casefold() for name in names)  # not names.count(): quadratic, seconds for a large grid
    return [f"{name[:MAX_NAME]}-{hashlib.sha1(r.encode()).hexdigest()[:8]}"
            if name != r or len(name) > MAX_NAME or counts[name.casefold()] > 1 else name
            for name, r in zip(names, raw)]


# ---- running one training ----


@dataclass
class Ended:
    """How a run's train.py ended: its exit code (negative: the signal that killed it) and what the
    sweep saw of its output, which it sees only when it relays it (--jobs > 1; one run at a time
    writes straight to the terminal, its progress bar as it draws it)."""
    code: int
    seen: bool  # whether its output came through the sweep
    printed: bool = False  # whether it printed any line (where seen)
    error: str | None = None  # its last `error: ...` line, without `error: ` (where seen)


def signal_name(signum: int) -> str:
    """9 -> 'SIGKILL (signal 9; out of memory?)': the kernel's out-of-memory killer sends SIGKILL,
    and the killed run prints nothing to say so."""
    try:
        name = signal.Signals(signum).name
    except ValueError:  # a real-time signal, say: no name
        return f"signal {signum}"
    return f"{name} (signal {signum}" + ("; out of memory?)" if signum == signal.SIGKILL else ")")


STOPPED = {128 + s: s.name for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)}  # train.py's exits after saving


def mtime_ns(path: Path) -> int | None:
    """The file's modification time, None where there is none."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def what_it_left(saved_before: int | None, ckpt: Path) -> str:
    """What a run the sweep's signal stopped left behind, by its ckpt.pt's time before it started (None: none):
    a second Ctrl-C stops train.py at once, unsaved, and the sweep said `its checkpoint saved` all the same."""
    saved = mtime_ns(ckpt)
    if saved is None:
        return "before its first checkpoint (it will start again)"
    if saved != saved_before:
        return "its checkpoint saved"
    return "unsaved (stopped at once: a second Ctrl-C): a rerun resumes it from its last checkpoint"


def how_it_failed(ended: Ended) -> str:
    """The sweep's line on a run that failed: a signal by its name (the run printed nothing), a stop
    by a signal sent to the run alone (train.py saved its checkpoint and exits 128 + the signal),
    else its exit code, pointing at its error only where it printed one (or may have: unseen)."""
    if ended.code < 0:
        return f"killed by {signal_name(-ended.code)}"
    if ended.code in STOPPED:
        return f"stopped by {STOPPED[ended.code]} (exit {ended.code}), its checkpoint saved: a rerun resumes it"
    above = "its error is above" if ended.printed or not ended.seen else "it printed no error"
    return f"failed with exit code {ended.code} ({above})"


def failed_status(ended: Ended) -> str:
    """A failed run's status in the report: 'failed (exit 2: its error, shortened)' where the sweep saw its
    error line, 'failed (killed by SIGKILL)' for a signal."""
    if ended.code < 0:
        return f"failed (killed by {signal_name(-ended.code).split(' ')[0]})"
    if ended.code in STOPPED:
        return f"failed (stopped by {STOPPED[ended.code]})"
    return f"{ERROR_STATUS} {ended.code}" + (f": {elide(ended.error, 100)})" if ended.error else ")")


class Runner:
    """Runs train.py subprocesses, up to `jobs` at once, and passes each Ctrl-C or SIGTERM the sweep
    receives to every running one.

    Each child runs in its own session, so a Ctrl-C in the terminal reaches it only through us,
    exactly once: it then saves ckpt.pt and exits, and a second Ctrl-C stops it at once. After the
    first, no new run starts. With jobs > 1 the runs' output (no progress bars) is relayed line by
    line behind each run's tag, and each run gets OMP_NUM_THREADS = its share of the cores (unless
    the environment sets it): small models train faster side by side on one thread each than one
    after the other on all of them. Each run is one process: torchrun's variables, where the
    environment holds them (a cluster's job), are not passed on; a run would wait for peers that never
    come."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.running: set[subprocess.Popen] = set()
        self.signum: int | None = None  # the first signal received
        self.told_a_run = False  # whether a run was running to hear it
        self.lock = threading.RLock()  # an RLock: the signal handler may run while the main thread holds it
        self.env = {name: value for name, value in os.environ.items() if name not in TORCHRUN_ENV}
        if jobs > 1 and not os.environ.get("OMP_NUM_THREADS"):
            self.env["OMP_NUM_THREADS"] = str(max(1, usable_cores() // jobs))
        self.preexec_fn = parent_death_signal()  # a run gets SIGTERM if the sweep dies

    def say(self, line: str) -> None:
        with self.lock:
            print(line, flush=True)

    def forward(self, signum: int, frame) -> None:
        with self.lock:
            if self.signum is None:
                self.signum = signum
                self.told_a_run = bool(self.running)  # a run then prints `interrupted` itself (one at a time)
            for proc in self.running:
                proc.send_signal(signum)

    @contextlib.contextmanager
    def forwarding_signals(self) -> Iterator[None]:
        """Install forward() for SIGINT, SIGTERM and SIGHUP (a terminal that hung up: the runs, in
        their own sessions, would not get it), in the main thread, where signal handlers live."""
        old = handle_signals(self.forward)  # those not ignored: a sweep under nohup outlives the terminal
        try:
            yield
        finally:
            restore_signals(old)

    def run(self, cmd: list[str], tag: str) -> Ended | None:
        """Run one training to its end -> how it ended, or None when the sweep was interrupted
        before it started."""
        relay = self.jobs > 1
        with self.lock:
            if self.signum is not None:
                return None
            sys.stdout.flush()  # our notes first, then the run's output
            pipe = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") if relay else {}
            proc = subprocess.Popen(cmd, start_new_session=True, env=self.env, preexec_fn=self.preexec_fn, **pipe)
            self.running.add(proc)
            if self.signum is not None:  # a signal came after the check above, before the line above
                proc.send_signal(self.signum)
        ended = Ended(0, seen=relay)
        try:
            if relay:
                for line in proc.stdout:
                    line = line.rstrip()
                    self.say(f"{tag}: {line}")
                    ended.printed = True
                    if line.startswith("error: "):  # run_cli's one line: the report row says it too
                        ended.error = line.removeprefix("error: ")
            ended.code = proc.wait()
            return ended
        finally:
            with self.lock:
                self.running.discard(proc)


def changed_settings(saved: dict, cfg: Config) -> list[str]:
    """'key=old (now new)' for each setting in which a run's checkpoint differs from this sweep's. A run from
    train.init_from takes the model keys its weights decide (FROM_WEIGHTS) from them, not from the config, as
    train.py does: those are not compared (check_from_weights refuses a grid value of one that is not theirs)."""
    old = {f"{s}.{k}": v for s, values in saved.items() for k, v in values.items()}
    theirs = {f"model.{k}" for k in FROM_WEIGHTS} if cfg.train.init_from else set()
    return [f"{k}={old.get(k)!r} (now {v!r})" for k, v in flat_config(cfg).items()
            if k not in REUSABLE_ACROSS and k not in theirs and old.get(k) != v]


def edited_settings(run_dir: Path, ckpt: dict) -> list[str]:
    """'key=value (ckpt.pt: value)' for each setting in which run_dir's config.yaml differs from the
    config its ckpt.pt trained with (a hand edit: the report reads config.yaml, and would show the
    edit as the run's settings); [] where config.yaml does not read (readable_config says so).
    Settings a rerun may change are left out (a resume rewrites config.yaml, not a finished run's
    ckpt.pt), but not model.vocab_size: both files hold it resolved."""
    try:
        written = flat_config(read_config(run_dir))
    except UserError:
        return []
    saved = {f"{s}.{k}": v for s, values in ckpt["config"].items() if isinstance(values, dict)
             for k, v in values.items()}
    return [f"{k}={v!r} (ckpt.pt: {saved[k]!r})" for k, v in written.items()
            if k in saved and saved[k] != v and (k not in REUSABLE_ACROSS or k == "model.vocab_size")]


def readable_config(run_dir: Path) -> bool:
    """Does run_dir's config.yaml read as a run's (not missing, cut short or edited into an error)?"""
    try:
        read_config(run_dir)
    except UserError:
        return False
    return True


Prepared = dict[Path, "dict[str, Any] | str"]  # each prepared data folder's meta.json, or why it cannot be had


def prepared_meta(cfg: Config, prepared: Prepared) -> dict[str, Any] | str:
    """meta.json of the data a run of cfg trains on, prepared as its first run would prepare it
    (reused where up to date), or why it cannot be (a file removed, a download refused offline).
    Once per prepared folder: `prepared` keeps each answer (a reuse checks the folder's digest,
    reading every token)."""
    try:
        folder = prepared_dir(cfg.data)
    except UserError as e:
        return str(e)
    if folder not in prepared:
        if not (folder / "meta.json").is_file():  # (a large text's BPE takes a while: not in silence)
            print(f"sweep: preparing {folder} (the runs on the same data reuse it)")
        try:
            prepared[folder] = read_json(prepare(cfg, show_progress=False) / "meta.json")  # (prepare's own reader)
        except (UserError, OSError, ValueError) as e:
            prepared[folder] = str(e)
    return prepared[folder]


def current_digest(cfg: Config, prepared: Prepared) -> str | None:
    """The digest of the data a run of cfg would train on now (meta.json's, which train.py compares
    with a checkpoint's data_digest): a data.dataset file or folder is prepared (prepared_meta).
    None for a built-in corpus (its text is that of its settings, which changed_settings compares),
    and where the data cannot be prepared (a file removed: its finished runs are still reported,
    and a run to train is refused by cannot_start)."""
    if cfg.data.dataset in BUILTIN:
        return None
    meta = prepared_meta(cfg, prepared)
    return meta["digest"] if isinstance(meta, dict) else None


def existing_run(run_dir: Path, cfg: Config, prepared: Prepared | None = None) -> tuple[str, str]:
    """What to do with run_dir: ('train' | 'resume' | 'skip' | 'refuse' | 'stale', a note saying why). A run
    that stopped before its first checkpoint is started again (train.py rewrites its config.yaml
    and metrics.csv); a folder with best.pt but no ckpt.pt is left alone: no weights file is ever
    deleted. A run trained on data that changed since (current_digest; `prepared` keeps its answers)
    is 'stale', refused: skipped, its results are of the old text; resumed, train.py would refuse it."""
    if (run_dir / "ckpt.pt").is_file():
        try:
            ckpt = load_checkpoint(run_dir / "ckpt.pt")
        except UserError as e:
            return "refuse", str(e)
        changed = changed_settings(ckpt["config"], cfg)
        if changed:  # e.g. the same grid rerun with another --set: not the run asked for
            return "refuse", (f"{run_dir} holds a run with other settings ({', '.join(changed)}); it is "
                              f"not reused: choose another --out, or delete it to retrain")
        saved = ckpt.get("data_digest")  # (none in a checkpoint of before version 3)
        now = current_digest(cfg, {} if prepared is None else prepared) if saved is not None else None
        if now is not None and now != saved:
            return "stale", (f"{run_dir} holds a run trained on other data: data.dataset={cfg.data.dataset!r} "
                              f"changed since; it is not reused: choose another --out, or remove the run to "
                              f"retrain it on the data as it is now")
        try:  # what the report reads, and what train.py --resume would refuse: refused now, before any training
            # (rows the checkpoint carries come back: train.py --resume restores them, and config.yaml)
            _, restored = resumed_metrics(run_dir, ckpt)
            if users_config(run_dir):  # (train.py --resume would refuse to overwrite it)
                return "refuse", (f"{run_dir} holds a config.yaml that is not from a tinygpt run; it is left as it "
                                  f"is: move it away, and the run's own is restored from its ckpt.pt")
            if ckpt["step"] < cfg.train.max_iters:
                return "resume", f"resuming from step {ckpt['step']} of {cfg.train.max_iters}"
            lost = [name for name, gone in (("config.yaml", not readable_config(run_dir)),
                                            ("metrics.csv", restored is not None)) if gone]
            edited = edited_settings(run_dir, ckpt)
            # (train.py --resume rewrites config.yaml from the sweep's settings, which are the checkpoint's;
            # metrics.csv's rows only from a checkpoint that carries them)
            if (lost or edited) and (isinstance(ckpt.get("metrics_csv"), str) or "metrics.csv" not in lost):
                what = [f"{' and '.join(lost)} lost or damaged"] * bool(lost) + [
                    f"config.yaml edited ({first_few(edited)})"] * bool(edited)
                return "resume", (f"finished earlier (step {ckpt['step']}), its {' and its '.join(what)}: restored "
                                  f"from its ckpt.pt")
            missing = [name for name in ("config.yaml", "metrics.csv") if not (run_dir / name).is_file()]
            if missing:
                return "refuse", (f"{run_dir} holds a finished run without its {' and '.join(missing)}, which the "
                                  f"report reads; restore it, or move the folder away to retrain")
            summarize_run(run_dir)
        except UserError as e:
            return "refuse", str(e)
        return "skip", f"finished earlier (step {ckpt['step']}), skipped"
    if (run_dir / "best.pt").is_file() and not died_at_its_first_save(run_dir):
        return "refuse", (f"{run_dir} has best.pt but no ckpt.pt to resume from; it is left as it is: "
                          f"move it away (or delete it) to retrain, or choose another --out")
    trained = trained_steps(run_dir)  # (no ckpt.pt here)
    if trained:
        return "refuse", (f"{run_dir} holds metrics.csv of a run trained to step {trained:,} but no checkpoint: "
                          f"it is left as it is: move it away (or delete it) to retrain, or choose another --out")
    if run_dir.is_dir() and not run_dir.is_symlink() and any(run_dir.iterdir()):
        if not any((run_dir / name).exists() or (run_dir / name).is_symlink() for name in TRAIN_FILES):
            theirs = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith("."))
            if theirs:  # (a killed run's lock or temp files alone: its folder, made before its first file)
                return "refuse", (f"{run_dir} holds {first_few(theirs)} but no file of a run: it is not one of "
                                  f"this sweep's runs, and a run there would mix with them; move them away, or "
                                  f"choose another --out")
        return "train", f"{run_dir} has no checkpoint (it stopped before its first); starting it again"
    return "train", "training"


# ---- the probe (--probe) ----

PROBE_STORIES = 100  # held-out stories of each run's probe, unless --probe-stories


def probe_run(run_dir: Path, n_stories: int, runner: Runner) -> dict | None:
    """The coreference probe of a finished run (its best.pt, else ckpt.pt), saved as probe.json
    beside it; in this process, on its share of the cores (the others train the other jobs' runs).
    None when the sweep was stopped meanwhile (nothing saved: the rerun probes it)."""
    path = resolve_checkpoint(run_dir)
    model, cfg, tokenizer, _ = load_model(path)
    seed = held_out_seed(cfg.data.stories_seed)  # the same held-out stories for every run
    threads = ThreadPolicy(max_threads=max(1, usable_cores() // runner.jobs))
    result = probe(model, tokenizer, n_stories, seed, torch.device("cpu"), threads=threads,
                   stop=lambda: runner.signum is not None)
    if result is None:
        return None
    result["checkpoint_mtime_ns"] = path.stat().st_mtime_ns  # which weights it measured (their bytes too: a
    result["checkpoint_sha256"] = file_sha256(path)  # copy of the run has new times, and is the same run)
    write_probe(run_dir, result)
    return result


def probed(run_dir: Path, n_stories: int) -> bool:
    """Whether probe.json holds a probe of this run's weights over n_stories held-out stories (one that
    does not say how many, hand-made, is probed again)."""
    result = read_probe(run_dir)
    if result is None:
        return False
    counts = [result.get("stories"), result.get("skipped_stories")]
    return all(type(n) is int for n in counts) and sum(counts) == n_stories


# ---- main ----


def parse_args(argv: Sequence[str] | None):
    p = ArgParser(prog="sweep.py", description="Train every combination of a grid of config values.")
    p.add_argument("config", help="YAML config, e.g. configs/stories.yaml")
    p.add_argument("--grid", nargs="+", action="extend", required=True, metavar="KEY=V1,V2",
                   help="values to combine, e.g. --grid model.n_head=1,2,4 model.n_embd=64,128 (commas part "
                        "the values: a value cannot hold one, so name such a file through a link)")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="overrides shared by every run, e.g. --set train.max_iters=500")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="train every setting with N seeds (train.seed, train.seed+1, ...) and report the mean, "
                        "spread and 95%% interval of each metric over them")
    p.add_argument("--probe", action="store_true",
                   help="also run the coreference probe on every run (each must train on data.dataset=stories)")
    p.add_argument("--probe-stories", type=int, default=None, metavar="N",
                   help=f"held-out stories the probe uses, with --probe (default: {PROBE_STORIES})")
    p.add_argument("--out", type=path_arg, default=None, help="sweep folder (default: out/sweeps/<config stem>)")
    p.add_argument("--quiet", action="store_true", help="no progress bars from the runs")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="train N runs at once, each on its share of the CPU cores (no progress bars; each "
                        "line of a run's output behind its name)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        raise UserError(f"--jobs={args.jobs} must be >= 1")
    cores = usable_cores()
    if args.jobs > cores:  # each run is a process of ~230 MB and wants a core of its own
        raise UserError(f"--jobs={args.jobs} is more than the {cores} CPU core(s) this process may use; "
                        f"use --jobs {cores} or fewer")
    if args.seeds < 1:
        raise UserError(f"--seeds={args.seeds} must be >= 1")
    if args.probe_stories is not None and not args.probe:
        raise UserError(f"--probe-stories={args.probe_stories} sets the stories of the probe, which runs with --probe "
                        f"only: add --probe, or drop --probe-stories")
    args.probe_stories = PROBE_STORIES if args.probe_stories is None else args.probe_stories
    check_stories(args.probe_stories, "--probe-stories", " (probe.py --stories)")
    return args


def check_size(grid: dict[str, list[str]], seeds: int) -> None:
    """Refuse more than MAX_RUNS runs before listing any."""
    combos = math.prod(len(values) for values in grid.values())
    if combos * seeds > MAX_RUNS:
        raise UserError(f"--grid and --seeds ask for {combos * seeds:,} runs ({combos:,} combination(s) x {seeds:,} "
                        f"seed(s)); a sweep trains at most {MAX_RUNS:,}")


@dataclass
class Planned:
    """One valid combination of the grid, checked before any training."""
    name: str  # its run directory's name, e.g. n_head=4,seed=1337
    varied: dict[str, str]  # the grid's values for it
    run_dir: Path
    overrides: list[str]  # the --set list that makes it
    cfg: Config
    action: str = "train"  # what to do with its run directory, and why (existing_run)
    why: str = "training"
    weights: ModelConfig | None = None  # train.init_from's model, which a new run from them takes (weights_model)
    data_state: dict | None = None  # its data as they were when planned (data_edited), None if unknown
    data_digest: str | None = None  # the prepared data's digest when planned (trained_otherwise), None if none

    def values(self) -> dict:
        """The grid's values for it as its config reads them (4, not '4'), as compare.py's rows hold
        them: settings.png orders numbers from small to large, texts as they come."""
        flat = flat_config(self.cfg)
        return {k: flat[k] for k in self.varied}


def make_plan(args, grid: dict[str, list[str]], out: Path) -> tuple[list[Planned], list[str]]:
    """Every combination checked like a --set, before any training; the invalid ones are skipped
    with a note (returned too, for the report), but a value invalid in every combination it is in
    (model.n_layer=0, train.dtype=bfloat17) refuses the sweep, naming it: its runs would be missing
    from the report without a word."""
    keys = list(grid)
    combos = list(itertools.product(*grid.values()))
    plan = []
    texts: dict[str, dict] = {k: {} for k in keys}  # each key's values as the config reads them -> their text
    runs: dict[tuple, tuple[str, dict]] = {}  # each planned run's settings (those that change it) -> its name, flat
    reasons = []  # why each invalid combination is
    notes = []  # the skipped combinations, said once the grid is known to be trainable
    refused: dict[tuple[str, str], str | None] = {}  # (key, value) of an invalid combination -> the error naming it
    valid: set[tuple[str, str]] = set()  # each (key, value) of a valid one
    models: dict[str, ModelConfig | str] = {}  # each train.init_from's model config, or why it has none
    for name, combo in zip(run_names(keys, combos), combos):
        run_dir = out / name
        # json.dumps quotes the path as a YAML string, whatever characters it holds
        overrides = [*args.set, *(f"{k}={v}" for k, v in zip(keys, combo)), f"train.out_dir={json.dumps(str(run_dir))}"]
        weights = None
        try:
            cfg = load_config(args.config, overrides)
            # (a run with a checkpoint of its own continues from it, with its model: it needs no init_from)
            if cfg.train.init_from and not (run_dir / "ckpt.pt").exists():
                weights = weights_model(cfg.train.init_from, models)
                check_from_weights(cfg, keys, weights)
        except UserError as e:
            notes.append(f"skip {name}: {e}")
            reasons.append(str(e))
            for key, value in zip(keys, combo):
                if key in str(e):  # the error's own words, where it names this key
                    refused[key, value] = str(e)
                else:
                    refused.setdefault((key, value), None)
            continue
        valid.update(zip(keys, combo))
        flat = flat_config(cfg)
        check_distinct(texts, flat, combo)
        if (same := same_as_planned(runs, flat, name)) is not None:
            notes.append(f"skip {name}: the same run as {same[0]} ({why_the_same(keys, flat, same[1])})")
            continue
        if args.probe and cfg.data.dataset != "stories":
            raise UserError(f"--probe measures coreference in the stories corpus, but {name} trains on "
                            f"data.dataset={cfg.data.dataset!r}; drop --probe or use data.dataset=stories")
        plan.append(Planned(name, dict(zip(keys, combo)), run_dir, overrides, cfg, weights=weights))
    if not plan:
        if len(set(reasons)) == 1:  # every combination fails alike: a bad --set value, say
            raise UserError(f"no valid combination in --grid {' '.join(args.grid)}: {reasons[0]}")
        print("\n".join(notes))
        raise UserError(f"no valid combination in --grid {' '.join(args.grid)} (see the notes above)")
    # a value no combination can train (n_layer=0; n_head=3 where every n_embd is 16): refused, not skipped
    # (a value impossible beside some values of the others only, n_head=3 with n_embd=16 of 16,48, is skipped)
    if dead := [key_value for key_value in refused if key_value not in valid]:
        key, value = dead[0]
        more = f" (and {len(dead) - 1} more value(s) no combination can train)" if len(dead) > 1 else ""
        why = refused[key, value] or "each combination with it is refused for another key's value"
        raise UserError(f"--grid {key}={value} is invalid in every combination: {why}{more}")
    for line in notes:
        print(line)
    print(f"sweep: {len(plan)} run(s) of {len(combos)} combination(s) into {out}")
    return plan, notes


def weights_model(init_from: str, models: dict[str, ModelConfig | str]) -> ModelConfig:
    """The model config of train.init_from's weights, which a new run from them takes (train.py's
    load_init), read once per value (`models` keeps each answer); none there is a UserError naming
    the key, before any run trains (train.py found it only when that run started)."""
    if init_from not in models:
        try:
            path = resolve_checkpoint(init_from)
            models[init_from] = checkpoint_config(load_checkpoint(path), path).model
        except UserError as e:
            models[init_from] = f"train.init_from: {e}"
    if isinstance(models[init_from], str):
        raise UserError(models[init_from])
    return models[init_from]


def check_from_weights(cfg: Config, keys: Sequence[str], theirs: ModelConfig) -> None:
    """Refuse a grid value of a model key that train.init_from's weights decide (config.FROM_WEIGHTS)
    and that is not theirs: the run would train their model under this value's name (n_head=1, a run
    of their 4 heads; a grid over n_head=1,2 trained one model twice). Their own value trains."""
    for key in keys:
        section, _, name = key.partition(".")
        if section == "model" and name in FROM_WEIGHTS and getattr(cfg.model, name) != getattr(theirs, name):
            raise UserError(f"{key}={getattr(cfg.model, name)} is not the model of train.init_from="
                            f"{short(cfg.train.init_from)}: a run from other weights takes their model config, "
                            f"{key}={getattr(theirs, name)} (all but model.dropout)")


def as_trained(flat: dict) -> dict:
    """`flat` (a point's config) with train.device and train.dtype as this machine resolves them: `auto`
    trains on the cpu in bfloat16 here, say, so device=cpu,auto is one run twice. A device not at hand stays
    as it is (the sweep refuses it before training: cannot_start)."""
    with contextlib.suppress(UserError):
        device = resolve_device(flat["train.device"])
        flat = {**flat, "train.device": str(device), "train.dtype": resolve_dtype(flat["train.dtype"], device)}
    return flat


def same_as_planned(runs: dict[tuple, tuple[str, dict]], flat: dict, name: str) -> tuple[str, dict] | None:
    """The name and config of a planned run that `flat` (a point's config) is the same run as, where the
    grid varies a data key its tokenizer does not use (data.bpe_vocab_size of a char run), or names by
    `auto` the device or dtype another point names (as_trained); else None, and the point is noted in `runs`."""
    settings = tuple((k, repr(v)) for k, v in as_trained(flat).items()
                     if k not in NEVER_COMPARED and applies(flat, k))
    if settings in runs:
        return runs[settings]
    runs[settings] = name, flat
    return None


def why_the_same(keys: Sequence[str], flat: dict, planned: dict) -> str:
    """Why a grid point is the same run as one planned before it, of config `planned` (same_as_planned): the
    grid keys that change no result, those its tokenizer does not use, and an `auto` that is the other's value."""
    moot = [k for k in keys if k in NEVER_COMPARED]
    unused = [k for k in keys if k not in NEVER_COMPARED and not applies(flat, k)]
    trained = as_trained(flat)
    reasons = [f"{k}=auto is {trained[k]} on this machine" for k in keys
               if k not in moot + unused and flat[k] != planned[k]]  # (the rest are equal: one of the two is auto)
    if moot:
        reasons.append(f"{', '.join(moot)} changes where a run's files go or what it draws or logs, not the run")
    if unused:
        reasons.append(f"{', '.join(unused)} does not change the tokens of a data.tokenizer={flat['data.tokenizer']!r} run")
    return "; ".join(reasons)


def check_distinct(texts: dict[str, dict], flat: dict, combo: tuple[str, ...]) -> None:
    """Refuse two values of one grid key that the config reads as the same (1 and 0x1; 1e-3
    and 0.001; a data.dataset file spelt two ways, d.txt and ./d.txt: data.prepare.same_dataset):
    the same run would be trained twice as two settings. `texts` collects, per key, each value
    read so far -> its text."""
    for (key, seen), text in zip(texts.items(), combo):
        value = flat[key]
        if key == "data.dataset":  # (the values seen so far: a few datasets, not one per combination)
            value = next((v for v in seen if same_dataset(v, value)), value)
        first = seen.setdefault(value, text)
        if first != text:
            same = "name the same data" if key == "data.dataset" else "are the same value"
            raise UserError(f"--grid {key}: {first} and {text} {same} ({value!r}); give each value once")


def check_reusable(config: str, plan: list[Planned], out: Path) -> None:
    """Decide what to do with each run's directory before training any (existing_run; a run to
    train may be in --out under another name: reuse_elsewhere). One that cannot be reused (another
    run's settings, say the same grid with another --set), or a run that train.py would refuse at
    its start (cannot_start), refuses the sweep, before anything is trained or the folder's report
    is rewritten: not after the runs before it trained for hours."""
    prepared: Prepared = {}  # each prepared data folder's meta.json, read once
    for run in plan:
        run.action, run.why = existing_run(run.run_dir, run.cfg, prepared)
        run.data_state = data_state(run.cfg)
    reuse_elsewhere(config, plan, out, prepared)
    refused = []
    for run in plan:
        if run.action in ("refuse", "stale"):
            print(f"not reusable {run.name}: {run.why}")
            refused.append(run.why)
    checked: dict[tuple[str, str], str | None] = {}
    for run in (run for run in plan if run.action in ("train", "resume")):
        if problem := cannot_start(run, config, checked, prepared):
            print(f"cannot train {run.name}: {problem}")
            refused.append(f"{run.name}: {problem}")
        else:
            run.data_digest = current_digest(run.cfg, prepared)  # (prepared by now: cannot_start's checks)
    if refused:
        more = f" (and {len(refused) - 1} more run(s), see the notes above)" if len(refused) > 1 else ""
        raise UserError(refused[0] + more)


def cannot_start(run: Planned, config: str, checked: dict[tuple[str, str], str | None], prepared: Prepared
                 ) -> str | None:
    """What train.py would refuse the run for at its start, where that is cheap and certain now: its
    train.out_dir in use by another training (train.py run there by hand), or holding what train.py
    refuses (check_writable, runs.check_run_dir: a file, a link to nothing, a user's config.yaml), a
    device this machine lacks, a data.dataset file or folder that is not there, a model that cannot fit
    in memory, a new run's block longer than a split of its data, or its data tokenized otherwise than
    its train.init_from's weights (train.py's own functions, so its own message naming the key), else
    None. `checked` keeps each value's answer: a grid of many runs on
    one dataset folder walks it once (and `prepared` prepares it once, as its first run would)."""
    cfg, resume = run.cfg, run.action == "resume"
    out_dir = Path(cfg.train.out_dir)
    if pid := lock_holder(out_dir):
        return (f"its run folder {cfg.train.out_dir} is in use by another training (process {pid}); wait for it "
                f"to end, or choose another --out")
    try:
        check_writable(out_dir, "train.out_dir", resume)
        check_run_dir(out_dir, resume, prepared_dir=cfg.data.prepared_dir)
    except UserError as e:
        return str(e)
    checks = (("train.device", cfg.train.device, lambda: resolve_device(cfg.train.device)),
              # prepare() -> prepared_dir() lists a path dataset's files (source_files) before any work
              ("data.dataset", cfg.data.dataset, lambda: prepared_dir(cfg.data)))
    for key, value, check in checks:
        if (key, value) not in checked:
            try:
                check()
                checked[key, value] = None
            except UserError as e:
                checked[key, value] = str(e)
        if checked[key, value]:
            return checked[key, value]
    try:  # as train.py checks first, before the data's vocabulary is known (arithmetic: no cache needed)
        device = resolve_device(cfg.train.device)
        check_training_fits(cfg, resolve_dtype(cfg.train.dtype, device), device)
        if cfg.train.tensorboard:  # (the package, the log folder: each run failed in turn, a report of failures)
            require_tensorboard(out_dir)
    except UserError as e:
        return str(e)
    if not resume:  # (a resumed run's block fitted its data, which existing_run has found unchanged)
        return refused_by_its_data(run, config, prepared)
    return None


def refused_by_its_data(run: Planned, config: str, prepared: Prepared) -> str | None:
    """Why a new run's model.block_size does not fit a split of its data (data.prepare.check_block_fits,
    train.py's check), naming where the size came from, or why its data does not fit train.init_from's
    weights (checkpoint.check_init_tokenizer, train.py's too); else None. The data is prepared as the
    run would prepare it (prepared_meta: a later run reuses it)."""
    meta = prepared_meta(run.cfg, prepared)
    if isinstance(meta, str):  # (a download refused offline, say: every run of it would fail alike)
        return meta
    block, source = run.cfg.model.block_size, ("--grid" if "model.block_size" in run.varied
                                               else config_source(config, run.overrides))
    from_weights = None
    if run.weights is not None:  # a run from other weights has their block
        block, from_weights = run.weights.block_size, run.cfg.train.init_from
    try:
        check_block_fits(block, meta["train_tokens"], meta["val_tokens"], source, from_weights)
        if from_weights is not None:  # and their tokens (an earlier run of the grid trained, then this one failed)
            init_ckpt = peek_checkpoint(resolve_checkpoint(from_weights))  # (mapped: weights_model read it whole)
            if init_ckpt is not None and isinstance(init_ckpt.get("tokenizer"), dict):
                check_init_tokenizer(run.cfg, init_ckpt, read_json(prepared_dir(run.cfg.data) / "tokenizer.json"))
    except (UserError, OSError, ValueError) as e:
        return str(e) if isinstance(e, UserError) else f"the prepared data's tokenizer.json does not read ({e})"
    return None


def same_run(flat: dict, cfg: Config, grid_keys: Iterable[str]) -> bool:
    """Whether a run of the settings `flat` (flat_config) is the run cfg asks for: the same in every
    setting but those a rerun may change (REUSABLE_ACROSS, as existing_run reuses a run), and in
    the grid's own keys even so (a grid over train.compile asks for a run of each)."""
    keys = set(grid_keys)
    return all(flat.get(k) == v for k, v in flat_config(cfg).items() if k not in REUSABLE_ACROSS or k in keys)


def runs_elsewhere(out: Path, names: set[str]) -> list[tuple[Path, dict]]:
    """The runs in --out in folders the plan does not name, with their resolved settings (config.yaml,
    flat): only those with a ckpt.pt (nothing else can be skipped or resumed) whose config.yaml
    reads; the others are left alone, as before."""
    found = []
    for folder in sorted(out.iterdir()) if out.is_dir() else []:
        if folder.name in names or folder.is_symlink() or not (folder / "ckpt.pt").is_file():
            continue  # (a link to a run is that run under a second name: its own folder is found)
        try:
            found.append((folder, flat_config(read_config(folder))))
        except UserError:
            continue
    return found


def reuse_elsewhere(config: str, plan: list[Planned], out: Path, prepared: Prepared) -> None:
    """Point each run to train at a run of the same settings that --out holds under another name,
    finished (skipped) or resumable (resumed there), and say so: the grid's keys in another order
    (n_layer=1,n_head=1 is n_head=1,n_layer=1), or --seeds added (n_head=1,seed=1337 is n_head=1).
    Trained again under its new name, it would be trained twice and its first copy listed as
    another grid's. New runs keep their names, so existing sweeps keep theirs."""
    todo = [run for run in plan if run.action == "train"]
    others = runs_elsewhere(out, {run.run_dir.name for run in plan}) if todo else []
    taken: set[str] = set()
    for run in todo:
        found = []
        for folder, flat in others:
            if folder.name not in taken and same_run(flat, run.cfg, run.varied):
                overrides = [*(o for o in run.overrides if not o.startswith("train.out_dir=")),
                             f"train.out_dir={json.dumps(str(folder))}"]
                cfg = load_config(config, overrides)
                action, why = existing_run(folder, cfg, prepared)
                # (one it could not reuse: trained anew, as before; but one of data changed since is this
                # run on the old data: refused, as under its own name, not trained again beside it)
                if action in ("skip", "resume", "stale"):
                    found.append((folder, overrides, cfg, action, why))
        if not found:
            continue
        found.sort(key=lambda f: ("skip", "resume", "stale").index(f[3]))  # a finished one first
        folder, run.overrides, run.cfg, run.action, run.why = found[0]
        if run.action != "stale":
            print(f"{run.name}: the same settings as the run in {folder.name}, under another name: reused there")
        run.name, run.run_dir = folder.name, folder
        taken.add(folder.name)


def train_one(args, runner: Runner, tag: str, run: Planned) -> dict | None:
    """Train (or skip, or resume) one run and probe it if asked -> its results row ('failed' in
    its status if it did not finish), or None when the sweep was interrupted before it started."""
    if runner.signum is not None:
        return None
    edit = status = None
    if run.action != "skip":
        edit, status = config_edited(args.config, run), NOT_AS_PLANNED
        if not edit:
            edit, status = data_edited(run), DATA_EDITED
    if edit:
        runner.say(f"{tag}: not started: {edit}")
        row = run_row(run, runner) or {"run": run.name}
        row["status"] = status + (f", {row['status']}" if row.get("status") else "")
        return {**row, **run.values()}
    runner.say(f"{tag}: {run.why}")
    rc = 0
    if run.action != "skip":
        cmd = [sys.executable, str(TRAIN_PY), args.config, "--set", *run.overrides]
        cmd += ["--resume"] * (run.action == "resume") + ["--quiet"] * (args.quiet or runner.jobs > 1)
        t0, saved_before = time.perf_counter(), mtime_ns(run.run_dir / "ckpt.pt")
        ended = runner.run(cmd, tag)
        if ended is None:
            return None
        rc = ended.code
        if runner.signum is not None and rc != 0:  # it stopped (saving a checkpoint if it had begun): resumable
            # (a run that had finished when the signal came exits 0: it is done, whatever the sweep does next)
            runner.say(f"{tag}: stopped, {what_it_left(saved_before, run.run_dir / 'ckpt.pt')}")
            row = run_row(run, runner) or {"run": run.name, "status": "interrupted before its first checkpoint"}
            return {**row, **run.values()}
        # (a failure said "going on with the next run", of the last run too)
        runner.say(f"{tag}: " + (f"done in {time.perf_counter() - t0:.1f} s" if rc == 0 else
                                 f"{how_it_failed(ended)}; the sweep does not stop for it"))
        otherwise = trained_otherwise(run) if rc == 0 else None
        if otherwise:  # not the plan's run: left out of the means, and not probed
            runner.say(f"{tag}: {otherwise[1]}")
            row = run_row(run, runner) or {"run": run.name}
            return {**row, "status": TRAINED_OTHERWISE.format(otherwise[0]), **run.values()}
    if rc == 0 and args.probe and not probed(run.run_dir, args.probe_stories):
        result = probe_run(run.run_dir, args.probe_stories, runner)
        if result is None:
            runner.say(f"{tag}: probe stopped (the rerun probes it)")
        elif not result["references"]:  # empty cells, not shares of nothing
            runner.say(f"{tag}: probe: no usable reference in {args.probe_stories} held-out stories (their words "
                       f"are outside this model's vocabulary); try more --probe-stories")
        else:
            b = result["behaviour"]
            runner.say(f"{tag}: probe: antecedent {b['antecedent']}, distractor {b['distractor']}, "
                       f"other {b['other']}")
    row = run_row(run, runner) or {"run": run.name}
    if rc != 0:
        own = row.get("status")  # (its "diverged at step 5 ...": where the sweep relayed its error, that says so)
        row["status"] = failed_status(ended) + (f", {own}" if own and not (own.startswith(DIVERGED) and ended.error)
                                                else "")
    return {**row, **run.values()}


def config_edited(config: str, run: Planned) -> str | None:
    """Why a run cannot start as planned: the config file, which each run reads when it starts, was
    edited since the sweep planned it and now gives it other settings (or does not read); None while it
    gives the planned ones (an edited comment, or a key this run's --set overrides, changes nothing).
    A sweep's runs share one config: trained on, the edit would mix two configs in one report."""
    try:
        now = flat_config(load_config(config, run.overrides))
    except UserError as e:
        return f"{config} was edited during the sweep and no longer reads ({e})"
    planned = flat_config(run.cfg)
    changed = [f"{key}={short(value)}" for key, value in now.items() if planned.get(key) != value]
    if not changed:
        return None
    return f"{config} was edited during the sweep: it now sets {first_few(changed)}"


def trained_otherwise(run: Planned) -> tuple[str, str] | None:
    """('config' or 'data', why) for a run that trained on other settings or other data than planned: its config file
    or its data.dataset file edited in the seconds between the sweep's last look (config_edited, data_edited) and
    train.py reading it, as its ckpt.pt tells (its settings, its data's digest); None where it trained as planned."""
    ckpt = peek_checkpoint(run.run_dir / "ckpt.pt")
    if ckpt is None or not isinstance(ckpt.get("config"), dict):
        return None  # (a run that saved nothing readable is reported by its row)
    changed, digest = changed_settings(ckpt["config"], run.cfg), saved_step_and_data(ckpt)[1]
    if changed:
        what, why = "config", f"trained with other settings than planned ({first_few(changed)}): the config was edited"
    elif run.data_digest is not None and digest is not None and digest != run.data_digest:
        what, why = "data", f"trained on other data than planned: data.dataset={short(run.cfg.data.dataset)} was edited"
    else:
        return None
    return what, f"{why} as it started; it is left out of the means, and a rerun refuses its folder: remove it to " \
                 f"train it again"


def data_state(cfg: Config) -> dict | None:
    """What cfg's data are now, as data.prepare tells an edit (fingerprint: the settings, and a data.dataset file's
    size, times and inode), None where it cannot be told (a file removed: cannot_start says so)."""
    try:
        return fingerprint(cfg.data)
    except UserError:
        return None


def data_edited(run: Planned) -> str | None:
    """Why a run cannot start as planned: its data.dataset file (or folder) was edited since the sweep planned
    it, so its runs would mix two texts in one report (runs of different data are no seeds of one setting);
    None while it is as it was."""
    if run.data_state is None or data_state(run.cfg) == run.data_state:
        return None
    return f"data.dataset={short(run.cfg.data.dataset)} was edited during the sweep: its runs would mix two texts"


def run_row(run: Planned, runner: Runner) -> dict | None:
    """The report's row of a run that trained or tried to (summarize_run); None where its folder has
    no config.yaml. One whose files do not read as a run's (a file of the user's put there while the
    sweep ran, which the run then refused) is its name and why: the report of the others is still
    written."""
    if not (run.run_dir / "config.yaml").is_file():
        return None
    try:
        return summarize_run(run.run_dir, run.name)
    except UserError as e:
        runner.say(f"{run.name}: not in the tables: {e}")
        return {"run": run.name, "status": "its files do not read (see above)"}


def main(argv: Sequence[str] | None = None) -> dict:
    """Train the grid's valid combinations (skipping finished runs), then report; see the module doc."""
    args = parse_args(argv)
    grid = parse_grid(args.grid)
    check_size(grid, args.seeds)
    check_keys(args.config, grid, args.set)
    check_types(grid)
    if args.seeds > 1:
        if SEED in grid:
            raise UserError("--seeds and --grid train.seed both choose the seeds: use one of them")
        first = load_config(args.config, args.set).train.seed
        if first + args.seeds > MAX_INT:  # (config's seeds are < MAX_INT: the last ones would be skipped)
            raise UserError(f"--seeds {args.seeds} from train.seed={first} would go up to {first + args.seeds - 1}, "
                            f"past the largest seed, {MAX_INT - 1}: choose a smaller train.seed")
        grid[SEED] = [str(first + i) for i in range(args.seeds)]
    out = args.out if args.out is not None else Path("out/sweeps") / Path(args.config).stem
    check_report_folder(out, its_runs=True)
    # the folder checked (writable) and held before any training: a second sweep on it is refused at once
    with run_lock(out, "--out", "sweep or comparison", REPORT_LOCK):
        check_report_folder(out, its_runs=True)  # again, held: a training that started on it meanwhile
        return train_grid(args, grid, out)


def other_runs(out: Path, plan: Sequence[Planned]) -> list[str]:
    """The runs in the sweep folder that this sweep's plan does not name (another grid's, sorted)."""
    if not out.is_dir():
        return []
    mine = {run.run_dir.name for run in plan}
    return sorted(d.name for d in out.iterdir() if d.name not in mine and (d / "ckpt.pt").is_file())


def drop_damaged_probes(plan: Sequence[Planned]) -> None:
    """With --probe, a run's damaged probe.json (a disk fault, a hand edit) is removed with a note, so the
    run is probed again: the sweep wrote it. (Without --probe, the report's reading of it refuses.)"""
    for run in plan:
        try:
            read_probe(run.run_dir)
        except DamagedProbe as e:
            try:
                (run.run_dir / "probe.json").unlink()
            except OSError:
                continue
            print(f"note: {e.what}: removed, to probe the run again")
        except UserError:  # one that cannot be read (no permission) is left as it is: the plan's reading says so
            continue


def runs_at_once(jobs: int, plan: Sequence[Planned]) -> int:
    """--jobs, or fewer where fewer runs are left to train: a finished run, skipped, shares no cores (one run
    left of two, --jobs 2, trained on one thread of two)."""
    return max(1, min(jobs, sum(run.action != "skip" for run in plan)))


def train_grid(args, grid: dict[str, list[str]], out: Path) -> dict:
    """Plan the grid's runs, train them and write the report, the sweep folder held."""
    plan, skipped = make_plan(args, grid, out)
    if args.probe:
        drop_damaged_probes(plan)
    check_reusable(args.config, plan, out)
    if others := other_runs(out, plan):
        print(f"note: --out={str(out)!r} also holds {len(others)} run(s) that are not in this grid "
              f"({first_few(others)}): they stay, but this sweep's report "
              f"replaces the folder's (results.md and the files beside it; give this sweep another --out to keep "
              f"both)", file=sys.stderr)

    runner = Runner(runs_at_once(args.jobs, plan))  # the cores are shared by the runs that can run at once
    tags = [f"[{i}/{len(plan)}] {run.name}" for i, run in enumerate(plan, 1)]
    with runner.forwarding_signals():
        if runner.jobs == 1:
            results = [train_one(args, runner, tag, run) for tag, run in zip(tags, plan)]
        else:
            with ThreadPoolExecutor(runner.jobs) as pool:
                results = list(pool.map(lambda job: train_one(args, runner, *job), zip(tags, plan)))
    started = any(row is not None for row in results)
    # a run the interruption kept this call from reaching is listed too (without it the grid looks smaller), as
    # its folder has it: an earlier call may have trained it, whole or in part
    rows = [row if row is not None else {**(run_row(run, runner) or {"run": run.name, "status": "not started"}),
                                         **run.values()}
            for row, run in zip(results, plan)]
    if runner.signum is not None:
        if started:  # none when the signal came before the first run started
            write_report(rows, list(grid), out, title=f"Sweep of {args.config} over {', '.join(grid)} (interrupted)",
                         skipped=skipped)
        print("sweep interrupted: rerun the same command to resume it"
              + (f" (results so far: {out / 'results.md'})" if started else ""))
        if runner.jobs > 1 or not runner.told_a_run:  # (one run at a time prints it on the terminal itself)
            print("interrupted", file=sys.stderr)
        sys.exit(128 + runner.signum)
    failed = [r["run"] for r in rows if str(r.get("status", "")).startswith("failed")]
    unstarted = [r["run"] for r in rows if str(r.get("status", "")).startswith(NOT_AS_PLANNED)]
    data_unstarted = [r["run"] for r in rows if str(r.get("status", "")).startswith(DATA_EDITED)]
    otherwise = {TRAINED_OTHERWISE.format(what) for what in ("config", "data")}
    raced = [r["run"] for r in rows if str(r.get("status", "")) in otherwise]

    text, pngs = write_report(rows, list(grid), out, title=f"Sweep of {args.config} over {', '.join(grid)}",
                              skipped=skipped)
    print()
    print(text, end="")
    written = [out / name for name in ("results.md", "results.csv", "summary.csv")] + [Path(p) for p in pngs]
    print("wrote " + ", ".join(shown_path(p) for p in written))
    if note := pictures_note(pngs):
        print(note)
    if unstarted:
        print(f"{len(unstarted)} of {len(plan)} run(s) not started: {shown_path(args.config)} was edited while the "
              f"sweep ran, and a sweep's runs share one config; restore it and rerun the sweep to finish them, or "
              f"sweep the new config into another --out", file=sys.stderr)
    if data_unstarted:
        print(f"{len(data_unstarted)} of {len(plan)} run(s) not started: the data they train on were edited while "
              f"the sweep ran; restore the text and rerun the sweep to finish them, or sweep into another --out",
              file=sys.stderr)
    if raced:
        print(f"{len(raced)} of {len(plan)} run(s) trained on a config or data edited as they started, not as "
              f"planned: {', '.join(raced)}; restore the file, remove their folders and rerun the sweep",
              file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(plan)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
    if failed or unstarted or data_unstarted or raced:
        sys.exit(1)
    return {"out": str(out), "rows": rows, "runs": [str(run.run_dir) for run in plan], "plots": [str(p) for p in pngs]}


if __name__ == "__main__":
    # its work is its runs: a reader of its output that leaves (`sweep.py ... | head`) must not end them
    work_is_files()
    run_cli(main)

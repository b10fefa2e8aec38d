"""Guards tinygpt/training.py (the schedule, the optimizer's groups, one optimizer step, the loss
estimate) and the bookkeeping of train.py's loop around them: the best val loss over evals and a
resume, the train loss and tokens/s of each log row, the tokens a step counts with grad_accum."""
from __future__ import annotations

import contextlib
import copy
import csv
import importlib.util
import io
import math
import os
import re
import time as time_module
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from model import GPT, cross_entropy
from tinygpt import training
from tinygpt.config import Config, TrainConfig
from tinygpt.runtime import Distributed
from conftest import ROOT

CPU = torch.device("cpu")
TEXT = "the quick brown fox jumps over a lazy dog while seven wizards hum old songs\n" * 40


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread(one_thread):
    """Tiny models: one thread (conftest's one_thread)."""


def no_scaler() -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", enabled=False)  # float32: the scaler passes everything through


def a_batch(vocab: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(vocab, (4, 17), generator=g)
    return w[:, :-1], w[:, 1:]


# ---- train_step ----


def test_a_step_leaves_no_gradient_and_a_stop_before_the_second_micro_batch_drops_the_first(tiny_model_config):
    """Each step starts from no gradient (else a step trains on the sum of every earlier one's); a stop asked
    before the second micro-batch draws no more and drops what the first gave."""
    torch.manual_seed(0)
    model = GPT(tiny_model_config)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = a_batch(tiny_model_config.vocab_size)
    reference = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        training.train_step(model, opt, no_scaler(), contextlib.nullcontext(), lambda: (x, y), 1, 0.0, 0.1)
        ref_opt.zero_grad()
        cross_entropy(reference(x), y).backward()
        ref_opt.step()
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), reference.parameters()))
    drawn = []

    def next_batch():
        drawn.append(1)
        return x, y
    assert training.train_step(model, opt, no_scaler(), contextlib.nullcontext(), next_batch, 2, 0.0, 0.1,
                               stop=lambda: True) is None
    assert len(drawn) == 1 and all(p.grad is None for p in model.parameters())


def test_grad_accum_of_one_batch_twice_steps_as_that_batch_once(tiny_model_config):
    """Each micro-batch's loss is divided by grad_accum (the gradients add up to the mean loss's), and
    so is the loss returned: undivided, grad_accum=2 took a step twice as long, and reported twice the loss."""
    torch.manual_seed(0)
    one = GPT(tiny_model_config)
    two = copy.deepcopy(one)
    x, y = a_batch(tiny_model_config.vocab_size)
    with torch.no_grad():
        expected_loss = cross_entropy(one(x), y).item()
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=1.0)  # plain SGD: the step is the gradient itself
    opt_one, opt_two = sgd(one), sgd(two)
    loss_one = training.train_step(one, opt_one, no_scaler(), contextlib.nullcontext(), lambda: (x, y), 1, 0.0, 1.0)
    loss_two = training.train_step(two, opt_two, no_scaler(), contextlib.nullcontext(), lambda: (x, y), 2, 0.0, 1.0)
    assert loss_one.item() == pytest.approx(expected_loss, abs=1e-6)
    assert loss_two.item() == pytest.approx(expected_loss, abs=1e-6)
    moved = max((p - q).abs().max().item() for p, q in zip(GPT(tiny_model_config).parameters(), one.parameters()))
    assert moved > 1e-3  # (the step did move the weights: the comparison below means something)
    for (name, p), q in zip(one.named_parameters(), two.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_grad_accum_of_four_micro_batches_steps_as_their_batch_of_four(tiny_model_config):
    """grad_accum=4 over four different one-row micro-batches (next_batch drawn once per micro-step) takes
    the step of one batch of the four rows, and returns its loss: accumulation is a bigger batch, in pieces."""
    torch.manual_seed(0)
    whole = GPT(tiny_model_config)
    pieces = copy.deepcopy(whole)
    x, y = a_batch(tiny_model_config.vocab_size)  # (4, 16): four different rows
    with torch.no_grad():
        expected_loss = cross_entropy(whole(x), y).item()
    rows = iter([(x[i:i + 1], y[i:i + 1]) for i in range(4)])

    def sgd(m: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(m.parameters(), lr=1.0)
    loss_whole = training.train_step(whole, sgd(whole), no_scaler(), contextlib.nullcontext(), lambda: (x, y), 1,
                                     0.0, 1.0)
    loss_pieces = training.train_step(pieces, sgd(pieces), no_scaler(), contextlib.nullcontext(),
                                      lambda: next(rows), 4, 0.0, 1.0)
    assert next(rows, None) is None  # each micro-step drew its own micro-batch
    assert loss_whole.item() == pytest.approx(expected_loss, abs=1e-6)
    assert loss_pieces.item() == pytest.approx(expected_loss, abs=1e-6)
    for (name, p), q in zip(whole.named_parameters(), pieces.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_grad_clip_clips_at_any_positive_norm_and_zero_turns_it_off(tiny_model_config, monkeypatch):
    """train.grad_clip > 0 clips the gradient norm to it (1.0, the default, included); 0 is off."""
    calls, real = [], torch.nn.utils.clip_grad_norm_

    def recorder(parameters, max_norm, *args, **kwargs):
        calls.append(max_norm)
        return real(parameters, max_norm, *args, **kwargs)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recorder)
    torch.manual_seed(0)
    model = GPT(tiny_model_config)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = a_batch(tiny_model_config.vocab_size)
    for clip in (1.0, 0.0, 0.5):
        training.train_step(model, opt, no_scaler(), contextlib.nullcontext(), lambda: (x, y), 1, clip, 0.1)
    assert calls == [1.0, 0.5]


# ---- make_optimizer ----


def test_weight_decay_falls_on_matrices_only(tiny_model_config):
    """AdamW decays the 2-D weights (matmuls, embeddings) by train.weight_decay, and never the biases
    or the LayerNorms' weights (0.0): each parameter in exactly one group."""
    model = GPT(replace(tiny_model_config, bias=True))
    t = TrainConfig(weight_decay=0.25)
    groups = training.make_optimizer(model, t, CPU).param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert [g["weight_decay"] for g in groups] == [0.25, 0.0]
    decayed, kept = ([names[id(p)] for p in g["params"]] for g in groups)
    assert len(decayed) + len(kept) == len(set(decayed + kept)) == len(names)  # each once, all of them
    assert set(kept) == {n for n in names.values() if n.endswith(".bias") or "ln_" in n}
    assert {"tok_emb.weight", "pos_emb.weight", "blocks.0.attn.q_proj.weight", "blocks.1.mlp.fc.weight"} <= set(decayed)
    assert "ln_f.weight" in kept and "blocks.0.attn.q_proj.bias" in kept


# ---- lr_at ----


def test_the_schedule_warms_up_then_decays_to_min_lr():
    """Warmup 5 to lr 1.0, then a cosine to min_lr 0.1 at step 50 (values worked out by hand):
    (step + 1) / 6 while warming up; 0.1 + 0.45 * (1 + cos(pi * (step - 5) / 45)) after."""
    t = TrainConfig(lr=1.0, min_lr=0.1, warmup_iters=5, max_iters=50)
    assert training.lr_at(0, t) == pytest.approx(1 / 6)
    assert training.lr_at(4, t) == pytest.approx(5 / 6)
    assert training.lr_at(5, t) == pytest.approx(1.0)
    assert training.lr_at(27, t) == pytest.approx(0.565705, abs=1e-5)  # progress 22/45: just above the middle, 0.55
    assert training.lr_at(28, t) == pytest.approx(0.534295, abs=1e-5)  # 23/45
    assert training.lr_at(50, t) == pytest.approx(0.1)
    assert training.lr_at(60, t) == pytest.approx(0.1)  # past max_iters: stays at min_lr


# ---- estimate_loss ----


def recorded_batches(monkeypatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every (x, y) batch training.get_batch draws from now on, in order."""
    drawn, real = [], training.get_batch

    def recorder(*args, **kwargs):
        drawn.append(real(*args, **kwargs))
        return drawn[-1]
    monkeypatch.setattr(training, "get_batch", recorder)
    return drawn


def test_the_loss_estimate_runs_in_eval_mode_on_the_same_batches(tiny_model_config, monkeypatch):
    """With dropout 0.5, an estimate in train mode differs from call to call and from the model's loss;
    in eval mode it is the mean eval-mode loss of its batches, the same every time, and the model is
    left in train mode."""
    torch.manual_seed(0)
    model = GPT(replace(tiny_model_config, dropout=0.5))
    batches = recorded_batches(monkeypatch)
    data = np.arange(200, dtype=np.uint16) % tiny_model_config.vocab_size
    estimate = lambda: training.estimate_loss(model, {"val": data}, 4, 16, 3, 1337, CPU, contextlib.nullcontext(),
                                             Distributed(0, 1, CPU))
    first, second = estimate(), estimate()
    assert model.training
    assert training.estimate_loss(model, {"val": data}, 4, 16, 3, 1337, CPU, contextlib.nullcontext(),
                                  Distributed(0, 1, CPU), stop=lambda: True) is None
    assert len(batches) == 6  # stop() is asked before the first batch too: a stop at once draws none
    assert model.training  # (a stopped estimate puts the mode back too)
    assert first == second
    model.eval()
    with torch.no_grad():
        by_hand = sum(cross_entropy(model(x), y).item() for x, y in batches[:3]) / 3
    assert first["val"] == pytest.approx(by_hand, abs=1e-5)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches[:3], batches[3:]))
    assert estimate() == first and not model.training  # a model in eval mode stays so (it was put in train mode)


def test_the_loss_estimate_holds_no_buffer_of_eval_iters_losses(tiny_model_config):
    """train.eval_iters=430000000 passed the time check (0.1 ms batches) and allocated a buffer of its
    losses, 1.7 GB, that no memory check counted; 2**40 failed to allocate. The losses are summed."""
    model = GPT(tiny_model_config)
    data = np.arange(200, dtype=np.uint16) % tiny_model_config.vocab_size
    asked = []

    def stop() -> bool:  # at the third batch
        asked.append(1)
        return len(asked) > 2
    assert training.estimate_loss(model, {"val": data}, 4, 16, 2**40, 1337, CPU, contextlib.nullcontext(),
                                  Distributed(0, 1, CPU), stop) is None
    assert len(asked) == 3


def test_the_loss_estimate_stays_exact_over_many_batches():
    """Summed one by one into a float32, 300,000 losses of log(62) came out 4.1252 (4.1271): the sum is taken
    in chunks, each added to a float."""
    class Uniform(torch.nn.Module):  # the same loss for every batch: log(62), whatever the tokens
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def forward(self, idx):
            return torch.zeros(*idx.shape, 62) + 0 * self.p
    data = (np.arange(1000) % 62).astype(np.uint16)
    estimate = training.estimate_loss(Uniform(), {"val": data}, 1, 4, 30_000, 1337, CPU, contextlib.nullcontext(),
                                      Distributed(0, 1, CPU))
    assert estimate["val"] == pytest.approx(math.log(62), abs=2e-6)


def test_under_ddp_the_loss_estimate_takes_its_slice_of_each_batch_and_averages_the_means(
        tiny_model_config, monkeypatch):
    """Process 1 of 2 draws the global batch of 2 * batch_size windows (what one process with the whole batch
    draws) and keeps its half; its mean loss goes through dist.mean, the average across processes."""
    torch.manual_seed(0)
    model = GPT(tiny_model_config).eval()
    data = np.arange(200, dtype=np.uint16) % tiny_model_config.vocab_size
    drawn, averaged = recorded_batches(monkeypatch), []

    class SecondOfTwo(Distributed):
        def mean(self, x: torch.Tensor) -> torch.Tensor:
            averaged.append(x.item())
            return x * 0 + 100.0  # (stands for the average with the other process)
    training.estimate_loss(model, {"val": data}, 8, 16, 3, 1337, CPU, contextlib.nullcontext(), Distributed(0, 1, CPU))
    whole, drawn[:] = list(drawn), []
    estimate = training.estimate_loss(model, {"val": data}, 4, 16, 3, 1337, CPU, contextlib.nullcontext(),
                                      SecondOfTwo(1, 2, CPU))
    assert estimate == {"val": 100.0}
    assert len(drawn) == 3 and all(torch.equal(mine[0], all_of[0][4:]) for mine, all_of in zip(drawn, whole))
    with torch.no_grad():
        by_hand = sum(cross_entropy(model(x), y).item() for x, y in drawn) / 3
    assert averaged == [pytest.approx(by_hand, abs=1e-5)]

# ---- train.py: a Run built by build_run ----


def tiny_run(tmp_path: Path, **train_settings):
    """A train.Run on a char tokenization of TEXT (train.build_run, no data folder), writing to tmp_path."""
    import train
    from data.prepare import Prepared
    from tinygpt.tokenizer import build_tokenizer
    tok = build_tokenizer("char", TEXT)
    ids = np.asarray(tok.encode(TEXT), dtype=np.uint16)
    cfg = Config()
    cfg.model = replace(cfg.model, block_size=16, n_layer=1, n_head=2, n_embd=16, vocab_size=tok.vocab_size)
    cfg.train = replace(cfg.train, out_dir=str(tmp_path / "run"), batch_size=4, eval_iters=2, device="cpu",
                        plot="never", threads=1, **train_settings)
    data = Prepared(ids[:2500], ids[2500:], tok, {"digest": "0" * 64})
    (tmp_path / "run").mkdir()
    return train.build_run(cfg, data, Distributed(0, 1, CPU), "float32", None, None)


def test_the_train_split_estimate_is_not_on_the_first_training_batches(tmp_path, monkeypatch):
    """The loss estimate draws its batches from its own generator (seed + 1): seeded as the training
    batches are (seed), its train loss would be measured on the very batches the run trains on first."""
    run = tiny_run(tmp_path)
    training_batches = [run.next_batch()[0] for _ in range(2)]
    drawn = recorded_batches(monkeypatch)
    t = run.cfg.train
    training.estimate_loss(run.model, {"train": run.data.train}, t.batch_size, 16, 2, t.seed, CPU,
                           contextlib.nullcontext(), run.dist)
    assert len(drawn) == 2
    for (ours, _), theirs in zip(drawn, training_batches):
        assert not torch.equal(ours, theirs)


def test_best_val_is_the_lowest_and_best_pt_holds_it(tmp_path, monkeypatch):
    """An eval whose val loss is higher than the best so far neither becomes the best nor replaces
    best.pt (it used to on any change of the loss)."""
    import train
    from tinygpt.checkpoint import load_checkpoint
    run = tiny_run(tmp_path)
    val = iter([1.0, 2.0])
    monkeypatch.setattr(train, "estimate_loss", lambda *a, **k: {"train": 1.5, "val": next(val)})
    metrics = []
    train.evaluate(run, metrics, 0.0)
    run.step = 10
    train.evaluate(run, metrics, 0.0)
    assert run.best_val == 1.0
    best = load_checkpoint(tmp_path / "run" / "best.pt")
    assert best["best_val_loss"] == 1.0 and best["step"] == 0
    assert [r["val_loss"] for r in metrics] == ["1.0000", "2.0000"]


def test_each_log_row_covers_only_the_steps_since_the_last(tmp_path, monkeypatch):
    """A log row's train loss is the mean since the previous row (the count is reset with the sum), and its
    tokens/s is over the steps since then (the step of the last log is kept with its time)."""
    import train
    run = tiny_run(tmp_path)
    clock = [0.0]
    monkeypatch.setattr(train, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    speed = {"t_last": 0.0, "step_last": 0, "t_start": 0.0, "tokens_per_step": 100, "flops_per_step": 50.0,
             "peak": 1000.0}
    metrics = []
    run.loss_sum.fill_(6.0)
    run.loss_count, run.step, clock[0] = 3, 3, 3.0  # 3 steps of loss 2 in 3 s
    first = train.log(run, metrics, 0.5, speed)
    run.loss_sum += 8.0
    run.loss_count, run.step, clock[0] = 2, 5, 4.0  # then 2 steps of loss 4 in 1 s
    second = train.log(run, metrics, 0.25, speed)
    assert (first["train_loss"], first["tokens_per_s"], first["mfu"]) == ("2.0000", "100", "0.0500")
    assert (second["train_loss"], second["tokens_per_s"], second["mfu"]) == ("4.0000", "200", "0.1000")
    assert run.loss_count == 0 and run.loss_sum.item() == 0.0
    assert metrics == [first, second]


# ---- train.py: in-process runs ----


def run_args(tmp_path: Path, run: str, *extra: str) -> list[str]:
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(TEXT)
    return [str(ROOT / "configs/stories.yaml"), "--quiet", "--set", f"data.dataset={corpus}", "data.tokenizer=char",
            f"data.prepared_dir={tmp_path / 'prepared'}", f"train.out_dir={tmp_path / run}", "model.n_layer=1",
            "model.n_head=2", "model.n_embd=16", "model.block_size=16", "train.batch_size=4", "train.eval_iters=2",
            "train.eval_interval=2", "train.log_interval=1", "train.warmup_iters=1", "train.dtype=float32",
            "train.plot=never", "train.threads=1", "train.device=cpu", *extra]


def test_a_folder_dataset_that_gains_a_file_as_training_starts_trains_on_what_was_prepared(tmp_path, monkeypatch):
    """A file added to a folder dataset just after its preparation: training named the prepared folder by a
    new walk of the dataset, a folder never made, and said `the prepared data ... is damaged (FileNotFoundError);
    delete the folder` of none. It loads the folder prepare() made (the next run prepares the new file too)."""
    import train
    books = tmp_path / "books"
    books.mkdir()
    (books / "a.txt").write_text(TEXT)
    preparing = train.prepare

    def a_file_lands_meanwhile(*args, **kwargs):
        folder = preparing(*args, **kwargs)
        (books / "late.txt").write_text(TEXT[:500])
        return folder
    monkeypatch.setattr(train, "prepare", a_file_lands_meanwhile)
    with contextlib.redirect_stdout(io.StringIO()):
        done = train.main(run_args(tmp_path, "run", f"data.dataset={books}", "train.max_iters=1"))
    assert done["step"] == 1


def test_tokens_per_step_count_every_micro_batch(tmp_path):
    """tokens/step (and with it tokens/s and MFU) is batch_size * grad_accum * block_size: 4 * 2 * 16."""
    import train
    with contextlib.redirect_stdout(io.StringIO()) as out:
        train.main(run_args(tmp_path, "run", "train.max_iters=1", "train.grad_accum=2"))
    assert "; 128 tokens/step\n" in out.getvalue()


def test_a_resume_keeps_the_best_val_loss_and_best_pt(tmp_path):
    """A resumed run goes on from its checkpoint's best val loss: from inf, its first eval, however
    worse, replaced best.pt."""
    import train
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    run = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--stop-at", "2"])
        ckpt = load_checkpoint(run / "ckpt.pt")
        assert ckpt["step"] == 2
        ckpt["best_val_loss"] = 0.001  # better than any loss this run reaches
        save_checkpoint(run / "ckpt.pt", ckpt)
        best = (run / "best.pt").read_bytes()
        done = train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--resume"])
    assert done["step"] == 4 and done["best_val_loss"] == 0.001
    assert (run / "best.pt").read_bytes() == best
    assert load_checkpoint(run / "ckpt.pt")["best_val_loss"] == 0.001


def test_a_resume_with_other_training_settings_says_so(tmp_path, capsys):
    """A resume that forgot the run's --set train.lr=... trained on with the config's lr, and config.yaml
    then gave that lr for the whole run (compare.py called the two runs the same training), without a word.
    Allowed (a lower lr to go on with is a choice), but said; the run's own values say nothing."""
    import train
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.lr=1e-3") + ["--stop-at", "2"])
    capsys.readouterr()
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.lr=1e-3") + ["--resume", "--stop-at", "3"])
    assert "note: --resume with" not in capsys.readouterr().err
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.batch_size=3") + ["--resume"])
    assert ("note: --resume with train.batch_size=3 (was 4), train.lr=0.002 (was 0.001): the steps from 3 on train "
            "with the new values, and config.yaml will give them for the whole run (to go on exactly, give the run's "
            "own)\n") in capsys.readouterr().err


def test_a_resume_note_names_two_changed_settings_and_counts_the_rest():
    import train
    from tinygpt.config import config_to_dict, load_config
    config = str(ROOT / "configs/stories.yaml")
    ckpt = {"config": config_to_dict(load_config(config)), "step": 3}
    two = ["train.lr=0.5", "train.min_lr=1e-5"]
    for sets, more in ((two, ""), ([*two, "train.grad_clip=0.5"], " and 1 more setting"),
                       ([*two, "train.grad_clip=0.5", "train.beta1=0.8"], " and 2 more settings")):
        note = train.changed_training(load_config(config, sets), ckpt).splitlines()[0]
        assert note.startswith(f"note: --resume with train.lr=0.5 (was 0.002), train.min_lr=1e-05 (was 0.0002){more}: "
                               f"the steps from 3 on train with the new values"), note


def test_a_resume_with_another_weight_decay_and_betas_trains_with_them(tmp_path):
    """--resume --set train.weight_decay=50 train.beta2=0.5 said "the steps from 5 on train with the new values",
    and config.yaml gave them, yet it trained on bit for bit as the run without them: the optimizer's
    load_state_dict brought back the saved ones. Now its optimizer holds them, and its weights end elsewhere."""
    import train
    from tinygpt.checkpoint import load_checkpoint
    new = ["train.weight_decay=50", "train.beta1=0.5", "train.beta2=0.5"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        train.main(run_args(tmp_path, "a", "train.max_iters=4") + ["--stop-at", "2"])
        train.main(run_args(tmp_path, "a", "train.max_iters=4", *new) + ["--resume"])
        train.main(run_args(tmp_path, "b", "train.max_iters=4"))
    group = load_checkpoint(tmp_path / "a" / "ckpt.pt")["optimizer"]["param_groups"]
    assert [(g["weight_decay"], tuple(g["betas"])) for g in group] == [(50, (0.5, 0.5)), (0.0, (0.5, 0.5))]
    a, b = (load_checkpoint(tmp_path / run / "ckpt.pt")["model"] for run in "ab")
    assert not all(torch.equal(a[k], b[k]) for k in a)  # (before: equal, bit for bit)


def test_a_resume_with_more_steps_says_the_learning_rate_jumps(tmp_path, capsys):
    """`a larger train.max_iters trains on`, but the cosine decay then stretches to the new end: at the
    resume the learning rate jumped back up (5x in a run of 20 steps resumed to 40) without a word, where
    a changed train.lr got a note. Now it gets one, with the two learning rates; in the warmup, where the
    length does not move the lr, none."""
    import train
    train.main(run_args(tmp_path, "run", "train.max_iters=6", "train.warmup_iters=2", "train.min_lr=2e-4") +
               ["--stop-at", "1"])
    capsys.readouterr()
    train.main(run_args(tmp_path, "run", "train.max_iters=12", "train.warmup_iters=2", "train.min_lr=2e-4") +
               ["--resume", "--stop-at", "2"])
    assert "note: --resume with" not in capsys.readouterr().err  # step 1: still warming up, the same lr
    train.main(run_args(tmp_path, "run", "train.max_iters=6", "train.warmup_iters=2", "train.min_lr=2e-4") +
               ["--resume"])
    capsys.readouterr()
    train.main(run_args(tmp_path, "run", "train.max_iters=12", "train.warmup_iters=2", "train.min_lr=2e-4") +
               ["--resume"])
    err = capsys.readouterr().err
    note = re.search(r"note: --resume with train.max_iters=12 \(was 6\): the learning rate's cosine decay now ends at "
                     r"step 12, so at step 6 the lr rises from (\S+) to (\S+) \(metrics.csv's lr column shows the "
                     r"jump\)\n", err)
    assert note and err.count("note:") == 1, err
    with open(tmp_path / "run" / "metrics.csv") as f:  # the lr of the step from 6 to 7, the resume's first
        lr_7 = next(float(row["lr"]) for row in csv.DictReader(f) if row["step"] == "7")
    assert note[1] == "0.0002" and note[2] == f"{lr_7:.3g}" and lr_7 > 5 * 2e-4  # (from the end's train.min_lr)
    # with train.lr changed too, "from" is the run's own schedule's lr: a lower lr over more steps falls
    train.main(run_args(tmp_path, "run2", "train.max_iters=12", "train.warmup_iters=2", "train.min_lr=2e-4") +
               ["--stop-at", "9"])
    capsys.readouterr()
    train.main(run_args(tmp_path, "run2", "train.max_iters=24", "train.warmup_iters=2", "train.min_lr=1e-5",
                        "train.lr=1e-4") + ["--resume", "--stop-at", "10"])
    saved = train.TrainConfig(lr=2e-3, min_lr=2e-4, warmup_iters=2, max_iters=12)  # (stories.yaml's lr)
    assert (f"so at step 9 the lr falls from {train.lr_at(9, saved):.3g} to "
            f"{train.lr_at(9, train.TrainConfig(lr=1e-4, min_lr=1e-5, warmup_iters=2, max_iters=24)):.3g} "
            f"(metrics.csv") in capsys.readouterr().err


def test_a_resumes_first_eval_row_logs_the_lr_its_step_trained_with(tmp_path, capsys):
    """Stopped at step 5 of 12, resumed with train.max_iters=5: the resume evaluates step 5 first, and its
    row logged lr_at(4) of the new schedule, beside the log row's lr of the step that ran (under the old).
    Both rows of a step give the lr that step trained with."""
    import train
    train.main(run_args(tmp_path, "run", "train.max_iters=12", "train.eval_interval=4") + ["--stop-at", "5"])
    train.main(run_args(tmp_path, "run", "train.max_iters=5", "train.eval_interval=4") + ["--resume"])
    capsys.readouterr()
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["step"] == "5"]
    trained = train.TrainConfig(lr=2e-3, min_lr=2e-4, warmup_iters=1, max_iters=12)  # (stories.yaml's lr)
    assert [row["val_loss"] != "" for row in rows] == [False, True], rows  # the log row, then the resume's eval
    assert {row["lr"] for row in rows} == {f"{train.lr_at(4, trained):.3e}"}, rows
    resumed = train.TrainConfig(lr=2e-3, min_lr=2e-4, warmup_iters=1, max_iters=5)
    assert f"{train.lr_at(4, trained):.3e}" != f"{train.lr_at(4, resumed):.3e}"  # (the old code's, told apart)


def test_a_resume_says_when_best_pt_is_gone_or_loss_png_stays_behind(tmp_path, capsys):
    """best.pt deleted, then --resume: it came back only at an evaluation that beat the best val loss,
    perhaps never, and sample.py read ckpt.pt meanwhile, without a word. With train.plot=never, a
    resume left the loss.png of an earlier step, without a word."""
    import train
    run = tmp_path / "run"
    train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--stop-at", "2"])
    (run / "best.pt").unlink()
    capsys.readouterr()
    train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--resume"])
    assert f"note: --resume: {run} has no best.pt (removed since?): it is written again only at an evaluation " \
        in capsys.readouterr().err
    (run / "loss.png").write_bytes(b"a picture of step 4")  # (run_args: train.plot=never)
    train.main(run_args(tmp_path, "run", "train.max_iters=5") + ["--resume"])
    assert f"note: --resume with train.plot=never: {run / 'loss.png'} stays as it was, at step 4 or before (draw " \
        f"it again with: python compare.py {run} --plot-only)" in capsys.readouterr().err
    had_best = (run / "best.pt").exists()  # (written again if an evaluation beat the best, else still none)
    train.main(run_args(tmp_path, "run", "train.max_iters=6") + ["--resume"])
    assert ("has no best.pt" in capsys.readouterr().err) != had_best


def test_a_resume_of_a_finished_run_keeps_its_settings_in_config_yaml(tmp_path, capsys):
    """`--resume --set train.lr=0.5` on a run at its max_iters trains nothing, but config.yaml was
    rewritten with lr 0.5, which no step ran (compare.py then had to note it disagrees with ckpt.pt).
    It keeps the run's, with a note; a larger max_iters trains on and records the new settings."""
    import train
    from tinygpt import runs
    train.main(run_args(tmp_path, "run", "train.max_iters=2"))
    train.main(run_args(tmp_path, "run", "train.max_iters=2", "train.lr=0.5") + ["--resume"])
    assert runs.read_config(tmp_path / "run").train.lr != 0.5
    err = capsys.readouterr().err
    assert "note: the run is at step 2, its train.max_iters: nothing is trained, so these settings are not used, and " \
        "config.yaml keeps the run's: train.lr (a larger train.max_iters trains on)\n" in err
    assert "note: --resume with" not in err  # (no note of steps that train with them: there are none)
    (tmp_path / "run" / "config.yaml").unlink()  # lost: written again, the run's
    train.main(run_args(tmp_path, "run", "train.max_iters=2") + ["--resume"])
    assert runs.read_config(tmp_path / "run").train.max_iters == 2 and "not used" not in capsys.readouterr().err
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.lr=0.5") + ["--resume"])
    assert runs.read_config(tmp_path / "run").train.lr == 0.5


@pytest.mark.slow
def test_a_signal_once_the_last_step_is_evaluated_and_saved_still_ends_done(tmp_path, monkeypatch, capsys):
    """A SIGTERM while loss.png of the last step is drawn (the checkpoint of the finished run saved): the run is
    done, exit 0, not 'interrupted' (143) with nothing left to resume."""
    import signal
    import train
    real = train.plot_run

    def signalled_while_drawing(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        real(*args)
    monkeypatch.setattr(train, "plot_run", signalled_while_drawing)
    assert train.main(run_args(tmp_path, "run", "train.max_iters=2", "train.plot=end"))["step"] == 2
    out, err = capsys.readouterr()
    assert "interrupted" not in out + err, out + err


def test_a_resume_that_evaluates_or_draws_records_the_settings_it_ran_with(tmp_path, capsys):
    """Stopped at step 3 (no eval there), resumed with train.max_iters=3: the note said nothing is trained and
    the settings are not used, yet step 3 was evaluated as the run's last (a metrics row, best.pt) under
    max_iters 3, which ckpt.pt recorded while config.yaml kept 4. Turning TensorBoard on at a finished run
    backfills its events: config.yaml said it was off."""
    import train
    from tinygpt import runs
    from tinygpt.checkpoint import load_checkpoint
    run = tmp_path / "run"
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.eval_interval=2") + ["--stop-at", "3"])
    capsys.readouterr()
    train.main(run_args(tmp_path, "run", "train.max_iters=3", "train.eval_interval=2") + ["--resume"])
    assert "not used" not in capsys.readouterr().err
    assert max(r["step"] for r in runs.read_metrics(run) if r.get("val_loss") is not None) == 3  # evaluated
    saved = load_checkpoint(run / "ckpt.pt")["config"]["train"]
    assert runs.read_config(run).train.max_iters == 3 == saved["max_iters"]
    if importlib.util.find_spec("tensorboard") is not None:
        train.main(run_args(tmp_path, "run", "train.max_iters=3", "train.eval_interval=2", "train.tensorboard=true")
                   + ["--resume"])
        assert any((run / "tensorboard").glob("events.out.tfevents.*")) and runs.read_config(run).train.tensorboard


def test_a_resume_at_its_stop_at_keeps_the_settings_it_was_trained_with(tmp_path, capsys):
    """`--resume --stop-at 2 --set train.batch_size=2` on a run stopped at step 2 trains nothing, but config.yaml
    and ckpt.pt then named batch_size 2 for steps trained with 4. Both keep the run's, with a note; a later
    --stop-at trains on, and records the new settings."""
    import train
    from tinygpt import runs
    from tinygpt.checkpoint import load_checkpoint
    train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--stop-at", "2"])
    before = (tmp_path / "run" / "ckpt.pt").read_bytes()
    capsys.readouterr()
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.batch_size=2") + ["--resume", "--stop-at", "2"])
    assert "the run is at step 2, --stop-at 2: nothing is trained, so these settings are not used, and config.yaml " \
        "keeps the run's: train.batch_size (a later --stop-at trains on)" in capsys.readouterr().err
    assert runs.read_config(tmp_path / "run").train.batch_size == 4
    assert (tmp_path / "run" / "ckpt.pt").read_bytes() == before
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.batch_size=2") + ["--resume", "--stop-at", "3"])
    assert runs.read_config(tmp_path / "run").train.batch_size == 2
    assert load_checkpoint(tmp_path / "run" / "ckpt.pt")["config"]["train"]["batch_size"] == 2


def test_the_mfu_peak_is_measured_on_every_core_the_run_may_use(tmp_path, monkeypatch):
    """A busy start gave the thread policy 1 thread, the peak was measured on it, and once the other
    process ended the run's MFU read 109%: the peak is that of the most threads the policy gives (measured
    on the free core and scaled: on both, beside the busy process, every repeat stalled)."""
    import train
    from tinygpt import runtime

    class BusyStart(runtime.ThreadPolicy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.max_threads = 2
            self._set(1)  # another process keeps a core busy

    seen = []
    monkeypatch.setattr(train, "ThreadPolicy", BusyStart)
    monkeypatch.setattr(train, "peak_flops",
                        lambda dtype, device, again=False: seen.append(torch.get_num_threads()) or (1e12, "x"))
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=1", "train.threads=0"))
    from tinygpt.checkpoint import load_checkpoint
    peak = load_checkpoint(tmp_path / "run" / "ckpt.pt")["mfu_peak"]
    assert seen == [1] and peak["flops"] == 2e12 and peak["threads"] == 2
    assert peak["source"] == "x on 1 free core, x 2"


def test_a_resume_keeps_the_mfu_peak_measured_at_the_runs_start(tmp_path, monkeypatch):
    """The peak was measured again at each resume: on a busy machine it read 96, then 189 GFLOP/s,
    and the MFU curve halved at the resume while tokens/s stayed. The checkpoint keeps it, for a
    resume on the same device, dtype and threads; anything else (or a damaged record) measures anew."""
    import train
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    peaks = iter([1e12, 2e12, 3e12])  # (above what the tiny run does: else measured again)
    monkeypatch.setattr(train, "peak_flops", lambda dtype, device, again=False: (next(peaks), "measured"))
    run = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.threads=1") + ["--stop-at", "2"])
        assert load_checkpoint(run / "ckpt.pt")["mfu_peak"]["flops"] == 1e12
        train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.threads=1") + ["--resume", "--stop-at", "3"])
    assert "MFU against 1,000 GFLOP/s (measured, at the run's start)" in out.getvalue()
    ckpt = load_checkpoint(run / "ckpt.pt")
    assert ckpt["mfu_peak"]["flops"] == 1e12 and ckpt["mfu_peak"]["source"] == "measured, at the run's start"
    ckpt["mfu_peak"]["flops"] = float("nan")  # damaged: measured again
    save_checkpoint(run / "ckpt.pt", ckpt)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.threads=2") + ["--resume", "--stop-at", "3"])
        train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.threads=1") + ["--resume"])  # other threads
    assert "MFU against 2,000 GFLOP/s (measured)" in out.getvalue()
    assert "MFU against 3,000 GFLOP/s (measured)" in out.getvalue()


def test_a_peak_measured_in_a_stalled_moment_is_measured_again(tmp_path, monkeypatch, capsys):
    """A busy moment at the start measured 2 GFLOP/s where the machine does 300: every row of the run read an MFU
    of 3,000-6,200%, and the checkpoint kept the peak, so every resume did too. A log step that does over the peak's
    FLOP/s (it was over twice: 130-200% went on unmeasured) measures it again (not the figure the process keeps:
    measured_matmul_peak's cache), once, and the checkpoint keeps the new one, said to be measured mid-run."""
    import functools
    import train
    from tinygpt import runs, runtime
    from tinygpt.checkpoint import load_checkpoint
    measures = iter([2e6, 1e15])

    @functools.lru_cache(maxsize=None)  # as the real one: measured once per process, unless cleared
    def measured(dtype, device, budget_s=0.5):
        return next(measures), 256
    monkeypatch.setattr(runtime, "measured_matmul_peak", measured)
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.log_interval=2") + ["--stop-at", "2"])
    # ("at the run's start" was said of a peak measured at a resume too)
    assert "over the MFU peak it had measured (0.002 GFLOP/s, at its start or resume, a busy moment's): measured " \
        "again, MFU is against 1,000,000 GFLOP/s from here" in capsys.readouterr().out
    assert all(row["mfu"] < 1 for row in runs.read_metrics(tmp_path / "run") if row.get("mfu") is not None)
    peak = load_checkpoint(tmp_path / "run" / "ckpt.pt")["mfu_peak"]
    assert peak["flops"] == 1e15 and peak["source"] == "measured 256^2 float32 matmul, measured again at step 2"
    train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.log_interval=2") + ["--resume"])  # kept
    assert "MFU against 1,000,000 GFLOP/s (measured 256^2 float32 matmul, measured again at step 2)" in \
        capsys.readouterr().out


def test_the_peak_of_a_busy_machine_is_measured_on_its_free_cores(monkeypatch):
    """On 2 threads beside a busy process every repeat of the peak's matmul stalled (20-40 ms for 0.3), and a
    run the thread policy had put on 1 thread read an MFU of 130-200%. The peak is measured on the free cores
    and scaled to all of them; with every core free, on all."""
    import train
    seen = []

    def peak(dtype, device, again=False):
        seen.append(torch.get_num_threads())
        return 100e9, "measured 512^2 float32 matmul"
    monkeypatch.setattr(train, "peak_flops", peak)
    busy = train.mfu_peak(None, "float32", torch.device("cpu"), 2, free=1)
    assert seen == [1] and busy["flops"] == 200e9 and busy["threads"] == 2
    assert busy["source"] == "measured 512^2 float32 matmul on 1 free core, x 2"
    idle = train.mfu_peak(None, "float32", torch.device("cpu"), 2, free=2)
    assert seen == [1, 2] and idle["flops"] == 100e9 and idle["source"] == "measured 512^2 float32 matmul"


def test_stop_at_0_saves_step_0_and_stops(tmp_path):
    """--stop-at 0 is a step, not a refusal (only a negative one is refused): the run evaluates step 0,
    saves its ckpt.pt and stops there, to be resumed."""
    import train
    from tinygpt.checkpoint import load_checkpoint
    with contextlib.redirect_stdout(io.StringIO()) as out:
        done = train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--stop-at", "0"])
    assert done["step"] == 0 and load_checkpoint(tmp_path / "run" / "ckpt.pt")["step"] == 0
    assert "stopped at step 0: saved" in out.getvalue()


def test_init_from_a_compact_run_names_the_data_settings_that_give_its_vocabulary():
    """A run trained on a compact gpt2 vocabulary (its own text's ids), started from on a full gpt2
    one: the fix is that run's data setting, in --set's words (true, not True), not a tokenizer
    change (for a full tiktoken vocabulary, which fits any text, data.tokenizer alone would do)."""
    from tinygpt.checkpoint import check_init_tokenizer
    from tinygpt.config import config_to_dict
    from tinygpt.errors import UserError
    theirs = Config()
    theirs.data = replace(theirs.data, dataset="corpus.txt", tokenizer="gpt2", compact_vocab=True)
    ours = Config()
    ours.data = replace(ours.data, dataset="corpus.txt", tokenizer="gpt2", compact_vocab=False)
    ours.train = replace(ours.train, init_from="out/run")
    init_ckpt = {"config": config_to_dict(theirs),
                 "tokenizer": {"kind": "tiktoken", "vocab_size": 300, "encoding": "gpt2", "ids": list(range(300)),
                               "closed": False}}
    full = {"kind": "tiktoken", "vocab_size": 50257, "encoding": "gpt2"}
    with pytest.raises(UserError) as refused:
        check_init_tokenizer(ours, init_ckpt, full)
    said = str(refused.value)
    assert "(the run's: gpt2 compact, 300 tokens; this data's: gpt2, 50257 tokens)" in said
    assert said.endswith("prepare this data as it did, --set data.compact_vocab=true")


def test_init_from_a_gpt2_run_takes_r50k_base_data():
    """r50k_base is gpt2 under its other name (the same ranks, regex and ids): a fine-tune of a gpt2 run
    on data tokenized with r50k_base was refused as `another tokenizer`. Another encoding still is."""
    from tinygpt.checkpoint import check_init_tokenizer
    from tinygpt.errors import UserError
    ours = Config()
    ours.train = replace(ours.train, init_from="out/run")
    init_ckpt = {"config": {}, "tokenizer": {"kind": "tiktoken", "vocab_size": 50257, "encoding": "gpt2"}}
    for name, fits in (("r50k_base", True), ("gpt2", True), ("p50k_base", False)):
        data = {"kind": "tiktoken", "vocab_size": 50257, "encoding": name}
        if fits:
            check_init_tokenizer(ours, init_ckpt, data)
        else:
            with pytest.raises(UserError, match="another tokenizer or vocabulary"):
                check_init_tokenizer(ours, init_ckpt, data)


def test_a_block_from_init_from_too_long_for_the_data_names_the_weights_not_model_block_size(tmp_path):
    """The refusal named `model.block_size=16 (CONFIG with --set)`, a size the user never gave (they set 4),
    and told them to lower model.block_size, which the weights of train.init_from override."""
    import train
    from tinygpt.errors import UserError
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=0"))
    with pytest.raises(UserError) as refused:
        train.main(run_args(tmp_path, "new", "train.max_iters=0", f"train.init_from={tmp_path / 'run'}",
                            "model.block_size=4", "data.val_fraction=0.004"))
    message = str(refused.value)
    assert "not more than model.block_size=16 (the weights of train.init_from=" in message, message
    assert "a model.block_size below" not in message and "another train.init_from" in message, message


def test_init_from_says_which_model_settings_of_this_config_it_replaces(tmp_path):
    """train.init_from takes the saved run's model config: the line it prints names exactly this
    config's settings that differ from it (what the user asked for and will not get), no others."""
    import train
    run = tiny_run(tmp_path)
    run.save("best.pt", with_optimizer=False)
    cfg = Config()
    bias = not run.cfg.model.bias  # (said as --set takes it: true, not True)
    cfg.model = replace(run.cfg.model, n_layer=2, n_embd=32, dropout=0.25, vocab_size=0, bias=bias)
    cfg.train = replace(cfg.train, init_from=str(tmp_path / "run"))
    _, _, line = train.load_init(cfg)
    assert line == (f"train.init_from: starting from {tmp_path / 'run' / 'best.pt'} (step 0), with its model config, "
                    f"not this config's model.n_layer=2, model.n_embd=32, model.bias={str(bias).lower()}")
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.dropout) == (1, 16, 0.25)  # theirs, with our dropout


def test_weight_decay_that_zeroes_the_weights_each_step_is_named_in_the_divergence_hint(tmp_path):
    """lr * weight_decay = 1 exactly (10 * 0.1): AdamW's decay multiplies every weight by 0 each step;
    the hint names the decay, not the learning rate alone."""
    import train
    run = tiny_run(tmp_path, lr=10.0, weight_decay=0.1)
    said = str(train.diverged("the val loss", float("nan"), run, {"train": 2.0, "val": float("nan")}))
    assert ("lower train.weight_decay=0.1 or train.lr=10: each step scales the weights by "
            "1 - lr * weight_decay = 0;") in said


def test_an_infinite_val_loss_is_a_divergence_not_a_best_pt(tmp_path, monkeypatch):
    """An eval whose val loss is inf (not only nan) stops the run: no best.pt or ckpt.pt of it; its row, which
    says so in metrics.csv (compare.py: `diverged at step 0`), is its only trace."""
    import train
    from tinygpt.errors import UserError
    run = tiny_run(tmp_path)
    monkeypatch.setattr(train, "estimate_loss", lambda *a, **k: {"train": float("inf"), "val": float("inf")})
    with pytest.raises(UserError, match="training diverged: the val loss is inf at step 0"):
        train.evaluate(run, run.metrics, 0.0)
    assert [r["val_loss"] for r in run.metrics] == ["inf"] and run.best_val == float("inf")
    assert not (tmp_path / "run" / "best.pt").exists() and not (tmp_path / "run" / "ckpt.pt").exists()


def test_an_equal_val_loss_keeps_the_first_best_pt(tmp_path, monkeypatch):
    """best.pt is replaced by a new lowest val loss only: a later eval that only equals it keeps the earlier weights."""
    import train
    from tinygpt.checkpoint import load_checkpoint
    run = tiny_run(tmp_path)
    monkeypatch.setattr(train, "estimate_loss", lambda *a, **k: {"train": 1.5, "val": 1.0})
    train.evaluate(run, [], 0.0)
    run.step = 10
    train.evaluate(run, [], 0.0)
    assert load_checkpoint(tmp_path / "run" / "best.pt")["step"] == 0
    assert load_checkpoint(tmp_path / "run" / "ckpt.pt")["step"] == 10


def test_plot_end_draws_loss_png_at_the_last_eval_only(tmp_path, monkeypatch):
    """train.plot=end draws once, at the eval of step max_iters; plot=eval at every eval."""
    import train
    drawn = []
    monkeypatch.setattr(train, "plot_run", lambda out_dir, check=None: drawn.append(run.step))
    monkeypatch.setattr(train, "estimate_loss", lambda *a, **k: {"train": 1.5, "val": 1.0})
    for plot, expected in (("end", [4]), ("eval", [0, 2, 4])):
        drawn.clear()
        (tmp_path / plot).mkdir()
        run = tiny_run(tmp_path / plot, max_iters=4)
        run.cfg.train.plot = plot
        for step in (0, 2, 4):
            run.step = step
            train.evaluate(run, [], 0.0)
        assert drawn == expected, plot


def test_a_log_rows_elapsed_s_counts_from_the_start_of_training(tmp_path, monkeypatch):
    """elapsed_s is the time since the training started (as the eval rows give it), not since the last log."""
    import train
    run = tiny_run(tmp_path)
    clock = [0.0]
    monkeypatch.setattr(train, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    speed = {"t_last": 0.0, "step_last": 0, "t_start": -10.0, "tokens_per_step": 100, "flops_per_step": 50.0,
             "peak": 1000.0}
    rows = []
    for step in (1, 2):
        run.loss_sum.fill_(2.0)
        run.loss_count, run.step, clock[0] = 1, step, float(step)
        train.log(run, rows, 0.5, speed)
    assert [r["elapsed_s"] for r in rows] == ["11.000", "12.000"]


def test_threads_note_says_whether_the_count_follows_the_free_cores():
    """' (1 thread, following the free cores)' for train.threads=0; a fixed count follows nothing; '' on a GPU."""
    import train
    policy = object()  # (a CPU run's thread policy; None on a GPU)
    assert train.threads_note(policy, 0) == " (1 thread, following the free cores)"  # (one_thread: torch runs 1)
    assert train.threads_note(policy, 1) == " (1 thread)"
    assert train.threads_note(None, 0) == ""


def test_without_matplotlib_plot_end_says_there_will_be_no_loss_png(tmp_path, monkeypatch, capsys):
    """train.plot=end (the default) without matplotlib is told too, not only plot=eval."""
    import train
    monkeypatch.setattr(train, "can_plot", lambda: False)
    monkeypatch.setattr(train, "plot_run", lambda *a, **k: None)
    train.main(run_args(tmp_path, "run", "train.max_iters=2", "train.plot=end"))
    assert "note: matplotlib is not installed: no loss.png" in capsys.readouterr().err


def test_the_warmup_note_is_for_a_warmup_as_long_as_the_run_or_longer():
    """warmup_iters >= max_iters: the note gives the lr of the last step, lr * max_iters / (warmup_iters + 1);
    a shorter warmup, or a run of 0 steps (nothing trains), gets no note."""
    t = TrainConfig(lr=1.0, warmup_iters=9, max_iters=9)
    assert training.warmup_note(t) == ("note: train.warmup_iters=9 >= train.max_iters=9: the learning rate rises to "
                                       "0.9 at most, never to train.lr=1; lower train.warmup_iters")
    assert "rises to 0.5 at most" in training.warmup_note(replace(t, warmup_iters=19, max_iters=10))
    assert training.warmup_note(replace(t, warmup_iters=8)) is None
    # a peak a hair under train.lr is shown with the digits that tell them apart (it read "rises to 0.001
    # at most, never to train.lr=0.001")
    near = training.warmup_note(replace(t, lr=1e-3, min_lr=1e-4, warmup_iters=2000, max_iters=2000))
    shown = float(near.split("rises to ")[1].split(" ")[0])
    peak = training.lr_at(1999, replace(t, lr=1e-3, warmup_iters=2000))
    assert shown < 1e-3 and shown == pytest.approx(peak, rel=1e-3)
    assert training.warmup_note(replace(t, max_iters=0)) is None


def test_adamw_takes_beta1_and_beta2_in_that_order(tiny_model_config):
    t = TrainConfig(beta1=0.8, beta2=0.95)
    optimizer = training.make_optimizer(GPT(tiny_model_config), t, CPU)
    assert [g["betas"] for g in optimizer.param_groups] == [(0.8, 0.95), (0.8, 0.95)]


def test_a_loss_png_older_than_the_checkpoint_is_drawn_again(tmp_path):
    """loss.png is drawn after ckpt.pt: one older than ckpt.pt (a run killed while drawing it) is missed,
    a newer one is not, nor is one without a checkpoint."""
    import os
    import train
    png, ckpt = tmp_path / "loss.png", tmp_path / "ckpt.pt"
    png.write_bytes(b"png")
    assert not train.plot_missed(tmp_path)
    ckpt.write_bytes(b"ckpt")
    os.utime(png, ns=(1_000_000_000, 1_000_000_000))
    os.utime(ckpt, ns=(2_000_000_000, 2_000_000_000))
    assert train.plot_missed(tmp_path)
    os.utime(png, ns=(3_000_000_000, 3_000_000_000))
    assert not train.plot_missed(tmp_path)
    png.unlink()
    assert train.plot_missed(tmp_path)


@pytest.mark.slow
def test_a_finished_run_resumed_draws_loss_png_again_only_where_it_was_missed(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import train
    drawn, real = [], train.plot_run
    monkeypatch.setattr(train, "plot_run", lambda *args: (drawn.append(args[0]), real(*args))[1])
    args = run_args(tmp_path, "run", "train.max_iters=2", "train.plot=end")
    train.main(args)
    assert len(drawn) == 1  # at the last eval, not again as the run ends
    train.main([*args, "--resume"])
    assert len(drawn) == 1  # nothing trained, loss.png up to date
    (tmp_path / "run" / "loss.png").unlink()
    train.main([*args, "--resume"])
    assert len(drawn) == 2 and (tmp_path / "run" / "loss.png").is_file()


def test_a_moved_finished_run_resumed_keeps_its_new_folder_in_config_yaml(tmp_path):
    """A resume that trains nothing keeps the run's settings in config.yaml, but its train.out_dir is where the
    run is now: the old one would send the next --resume from its config.yaml to a folder that is gone."""
    import shutil
    import train
    from tinygpt import runs
    train.main(run_args(tmp_path, "old", "train.max_iters=2"))
    shutil.move(tmp_path / "old", tmp_path / "new")
    train.main(run_args(tmp_path, "new", "train.max_iters=2") + ["--resume"])
    assert runs.read_config(tmp_path / "new").train.out_dir == str(tmp_path / "new")


def test_a_resume_at_an_evaluated_step_does_not_evaluate_it_again(tmp_path):
    """Stopped at step 2, an eval step (evaluated and saved there), the resumed run goes on from it:
    metrics.csv holds one eval row per eval step, not a second one of step 2."""
    import train
    from tinygpt.runs import read_metrics
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--stop-at", "2"])
        train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--resume"])
    evals = [row["step"] for row in read_metrics(tmp_path / "run") if row["val_loss"] is not None]
    assert evals == [0, 2, 4]


def test_the_last_step_is_logged_between_log_intervals(tmp_path):
    """train.max_iters=4 with train.log_interval=3: the steps after step 3 get their log row at the end."""
    import train
    from tinygpt.runs import read_metrics
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.log_interval=3"))
    logs = [row["step"] for row in read_metrics(tmp_path / "run") if row["tokens_per_s"] is not None]
    assert logs == [3, 4]
    # elapsed_s to the millisecond: to 0.1 s, short runs' wall_s tied across seeds ("the same value (± 0)")
    cells = [line.split(",")[-1] for line in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[1:]]
    assert cells and all(re.fullmatch(r"\d+\.\d{3}", cell) for cell in cells), cells


def test_train_step_steps_with_the_lr_it_is_given(tiny_model_config):
    """The schedule's lr reaches the optimizer: a step at lr 0 (not the optimizer's own train.lr) moves no weight."""
    torch.manual_seed(0)
    model = GPT(tiny_model_config)
    before = copy.deepcopy(model.state_dict())
    optimizer = training.make_optimizer(model, TrainConfig(lr=1.0, weight_decay=0.0), CPU)
    x, y = a_batch(tiny_model_config.vocab_size)
    training.train_step(model, optimizer, no_scaler(), contextlib.nullcontext(), lambda: (x, y), 1, 0.0, 0.0)
    assert [g["lr"] for g in optimizer.param_groups] == [0.0, 0.0]
    assert all(torch.equal(p, before[n]) for n, p in model.state_dict().items())


def test_runs_from_other_weights_resume_as_they_started_and_refuse_to_start_from_themselves(tmp_path, capsys):
    """A run from train.init_from: resumed with the same weights spelt another way (the folder it
    started from, then its best.pt) it continues (it was refused as "differs from the checkpoint's");
    resumed with a model setting of its config changed, a note says the weights' model config stays
    (it was dropped without a word); and a new run whose init_from is its own out_dir is refused as
    such (it was told that it was "being trained now", by itself)."""
    import train
    from tinygpt.errors import UserError
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "base", "train.max_iters=2"))
        train.main(run_args(tmp_path, "fine", "train.max_iters=2", f"train.init_from={tmp_path / 'base'}"))
        capsys.readouterr()
        done = train.main(run_args(tmp_path, "fine", "train.max_iters=4", "model.n_layer=3",
                                   f"train.init_from={tmp_path / 'base' / 'best.pt'}") + ["--resume"])
    assert done["step"] == 4
    assert ("note: --resume: a run started from train.init_from keeps its weights' model config, not this config's "
            "model.n_layer=3\n") in capsys.readouterr().err
    with pytest.raises(UserError, match=r"train.init_from='.*own' names this run's own train.out_dir: a run cannot "
                                        r"start from itself"):
        train.main(run_args(tmp_path, "own", f"train.init_from={tmp_path / 'own'}"))
    with pytest.raises(UserError, match="names this run's own train.out_dir"):
        train.main(run_args(tmp_path, "own", f"train.init_from={tmp_path / 'own' / 'best.pt'}"))


def test_a_new_run_is_refused_among_other_runs_or_a_report(tmp_path):
    """out_dir=out (the folder of all runs) or a sweep's --out: the new run's ckpt.pt and config.yaml
    landed beside the runs and the report, and sweep.py and compare.py then refused that folder."""
    import train
    from tinygpt.errors import UserError
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "out/a", "train.max_iters=0"))
    with pytest.raises(UserError, match=r"train.out_dir='.*out' holds runs in its folders \(a\): this run's files "
                                        r"would mix with them; choose another out_dir, e.g. .*out/new_run"):
        train.main(run_args(tmp_path, "out", "train.max_iters=0"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a"]
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "results.md").write_text("# Sweep of configs/stories.yaml\n\n...\n")
    with pytest.raises(UserError, match=r"holds a sweep's report \(results.md\)"):
        train.main(run_args(tmp_path, "sweep", "train.max_iters=0"))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "results.md").write_text("# my notes\n")  # a results.md of the user's: no report
    with contextlib.redirect_stdout(io.StringIO()):
        assert train.main(run_args(tmp_path, "notes", "train.max_iters=0"))["step"] == 0
    # a folder inside a run (its files went with the run's), or the prepared data's (it then could not be
    # prepared again): both trained, exit 0
    with pytest.raises(UserError, match=r"train.out_dir='\S+a/sub' is inside the training run \S+a \(its ckpt.pt\): "
                                        r"choose a folder outside it$"):
        train.main(run_args(tmp_path, "out/a/sub", "train.max_iters=0"))
    prepared = next((tmp_path / "prepared").iterdir())
    with pytest.raises(UserError, match=r"is a folder of prepared data \(data.prepared_dir's\)"):
        train.main(run_args(tmp_path, str(prepared.relative_to(tmp_path)), "train.max_iters=0"))
    assert not (tmp_path / "out" / "a" / "sub").exists() and not (prepared / "config.yaml").exists()


def test_a_training_in_its_first_seconds_is_a_run_to_the_folders_around_it(tmp_path):
    """A training, or a sweep, holds its lock a moment before its first checkpoint, or run folder, exists: a
    training started then on a folder inside it, around it, or on the sweep's folder went ahead, and left a run
    inside a run, or a run mixed with a sweep's runs and report (each refused once the other had written)."""
    import train
    from tinygpt import runs
    from tinygpt.errors import UserError
    with runs.run_lock(tmp_path / "out" / "a"):  # a training starting: .lock, nothing else yet
        with pytest.raises(UserError, match=r"^train.out_dir='\S+a/sub' is inside \S+a, the folder of a training "
                                            rf"under way \(process {os.getpid()}\): choose a folder outside it$"):
            train.main(run_args(tmp_path, "out/a/sub", "train.max_iters=0"))
        with pytest.raises(UserError, match=r"^train.out_dir='\S+out' holds runs in its folders \(a\)"):
            train.main(run_args(tmp_path, "out", "train.max_iters=0"))
    with runs.run_lock(tmp_path / "sweep", "--out", "sweep", runs.REPORT_LOCK):  # a sweep starting
        with pytest.raises(UserError, match=r"^train.out_dir='\S+sweep' is the folder of a sweep or a comparison under "
                                            rf"way \(process {os.getpid()}\): this run's files would mix"):
            train.main(run_args(tmp_path, "sweep", "train.max_iters=0"))
    assert not (tmp_path / "out" / "a" / "sub").exists() and not (tmp_path / "sweep" / "config.yaml").exists()
    with contextlib.redirect_stdout(io.StringIO()):  # the locks let go: a run inside a folder with no run is fine
        assert train.main(run_args(tmp_path, "out/a/sub", "train.max_iters=0"))["step"] == 0


def read_metrics_steps(run: Path) -> int:
    from tinygpt.runs import read_metrics
    return max(row["step"] for row in read_metrics(run))


def test_a_moved_run_is_told_where_its_config_says_it_is(tmp_path):
    """`mv runs/m1 runs/m2; train.py runs/m2/config.yaml --resume`: its config.yaml still names runs/m1,
    and the error said to drop --resume, which trained a new run there from scratch."""
    import train
    from tinygpt.errors import UserError
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "m1", "train.max_iters=2"))
    (tmp_path / "m1").rename(tmp_path / "m2")
    config = tmp_path / "m2" / "config.yaml"
    with pytest.raises(UserError) as info:
        train.main([str(config), "--resume", "--quiet"])
    assert str(info.value) == (f"--resume: no checkpoint at {tmp_path / 'm1' / 'ckpt.pt'}; {config} is in the run "
                               f"folder {tmp_path / 'm2'}, but its train.out_dir names {tmp_path / 'm1'} (a run moved "
                               f"or renamed since): add --set train.out_dir={tmp_path / 'm2'}")
    with contextlib.redirect_stdout(io.StringIO()):
        assert train.main([str(config), "--resume", "--quiet", "--set", f"train.out_dir={tmp_path / 'm2'}",
                           "train.max_iters=3"])["step"] == 3
    # a copy: `cp -r m2 bk; train.py bk/config.yaml --resume` continued m2, the original, not the copy
    import shutil
    shutil.copytree(tmp_path / "m2", tmp_path / "bk")
    copy = tmp_path / "bk" / "config.yaml"
    with pytest.raises(UserError, match=re.escape(  # (m2's config.yaml names m2 since its resume)
            f"--resume: {copy} is in the run folder {tmp_path / 'bk'}, but its train.out_dir names another run, "
            f"{tmp_path / 'm2'}, which --resume would continue instead")):
        train.main([str(copy), "--resume", "--quiet", "--set", "train.max_iters=5"])
    assert read_metrics_steps(tmp_path / "m2") == 3  # the original untouched


def test_a_resume_follows_its_dataset_moved_and_refuses_another(tmp_path):
    """The dataset file moved (the same text): --resume --set data.dataset=NEW_PATH was refused as
    `differs from the checkpoint's`, with no way on but moving it back. Its tokens decide now: the
    same ones resume (config.yaml then names the new path); other text is refused."""
    import train
    from tinygpt.errors import UserError
    from tinygpt.runs import read_config
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=2"))
    moved = tmp_path / "moved" / "corpus.txt"
    moved.parent.mkdir()
    (tmp_path / "corpus.txt").rename(moved)
    with contextlib.redirect_stdout(io.StringIO()):
        done = train.main(run_args(tmp_path, "run", "train.max_iters=3", f"data.dataset={moved}") + ["--resume"])
    assert done["step"] == 3 and read_config(tmp_path / "run").data.dataset == str(moved)
    other = tmp_path / "other.txt"
    other.write_text(TEXT[::-1])
    with pytest.raises(UserError, match=r"is not the data .*ckpt.pt was trained on"):
        train.main(run_args(tmp_path, "run", "train.max_iters=4", f"data.dataset={other}") + ["--resume"])


def test_a_warmup_as_long_as_the_run_ends_at_lr_then_min_lr():
    """warmup_iters == max_iters: the decay has no steps (its length counts as 1, no division by 0): lr at
    the warmup's end, min_lr after (a resume's note asks the old schedule for the lr at its step)."""
    t = TrainConfig(lr=1.0, min_lr=0.1, warmup_iters=10, max_iters=10)
    assert training.lr_at(10, t) == pytest.approx(t.lr)
    assert training.lr_at(11, t) == pytest.approx(t.min_lr)


def test_the_optimizer_is_fused_on_cpu(tiny_model_config):
    """One fused kernel for all parameters on the CPU, as on CUDA (a loop over them is slower)."""
    model = GPT(tiny_model_config)
    assert training.make_optimizer(model, TrainConfig(), CPU).defaults["fused"] is True


def test_ddp_syncs_gradients_on_the_last_micro_batch_only(tiny_model_config):
    """Under DDP (model.no_sync), every micro-batch but the last runs in no_sync(): the last one's backward
    averages the summed gradients across processes."""
    torch.manual_seed(0)
    model = GPT(tiny_model_config)
    in_no_sync, flags = [False], []

    @contextlib.contextmanager
    def no_sync():
        in_no_sync[0] = True
        yield
        in_no_sync[0] = False
    model.no_sync = no_sync
    x, y = a_batch(tiny_model_config.vocab_size)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    real_forward = model.forward
    model.forward = lambda *a, **k: (flags.append(in_no_sync[0]), real_forward(*a, **k))[1]
    training.train_step(model, opt, torch.amp.GradScaler("cpu", enabled=False), contextlib.nullcontext(),
                        lambda: (x, y), 3, 0.0, 0.1)
    assert flags == [True, True, False]


def test_clipping_clips_the_unscaled_gradients_and_the_scaler_updates(tiny_model_config):
    """With a gradient scaler on (float16), the gradients are unscaled before clipping: the step is the one
    without a scaler; and the scaler's update runs (its scale grows after a good step)."""
    x, y = a_batch(tiny_model_config.vocab_size)
    params = []
    for scaler in (torch.amp.GradScaler("cpu", enabled=False),
                   torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1)):
        torch.manual_seed(0)
        model = GPT(tiny_model_config)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        training.train_step(model, opt, scaler, contextlib.nullcontext(), lambda: (x, y), 1, 0.5, 0.1)
        params.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*params))
    assert scaler.get_scale() == 2.0**11


def test_an_eval_row_before_any_step_logs_the_first_steps_lr(tmp_path):
    """At step 0 (no step trained yet) the eval row's lr is the first step's by the schedule, lr_at(0): under a
    warmup that is not train.lr."""
    import train
    run = tiny_run(tmp_path, warmup_iters=10, max_iters=20)
    assert run.last_lr is None
    assert train.logged_lr(run) == training.lr_at(0, run.cfg.train) != run.cfg.train.lr


def test_a_resume_of_a_checkpoint_that_records_no_data_digest_is_not_refused(tmp_path):
    """Checkpoints before version 3 record no data digest: nothing to compare, so their resume goes on (it was
    refused as 'not the data ... it changed since', the None digest compared with this data's)."""
    import train
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    run = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--stop-at", "2"])
        ckpt = load_checkpoint(run / "ckpt.pt")
        del ckpt["data_digest"]  # (an older checkpoint's)
        save_checkpoint(run / "ckpt.pt", ckpt)
        done = train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--resume"])
    assert done["step"] == 4


def a_measured_peak(monkeypatch) -> dict:
    """mfu_peak's record of a peak measured now (peak_flops: 100 GFLOP/s the first time, 200 after)."""
    import train
    measures = iter([100e9, 200e9])
    monkeypatch.setattr(train, "peak_flops", lambda dtype, device, again=False: (next(measures), "measured"))
    return train.mfu_peak(None, "float32", CPU, 1)


@pytest.mark.parametrize("flops", [0.0, -100e9])
def test_a_saved_peak_of_no_flops_is_measured_again(monkeypatch, flops):
    """A damaged record's peak of 0 (or below) made every MFU a division by zero (or negative): measured again."""
    import train
    first = a_measured_peak(monkeypatch)
    peak = train.mfu_peak({"mfu_peak": {**first, "flops": flops}}, "float32", CPU, 1)
    assert peak["flops"] == 200e9 and peak["source"] == "measured"


def test_a_peak_kept_over_two_resumes_says_at_the_runs_start_once(monkeypatch):
    """The second resume of a run said its peak was `measured, at the run's start, at the run's start`."""
    import train
    first = a_measured_peak(monkeypatch)
    kept = train.mfu_peak({"mfu_peak": first}, "float32", CPU, 1)
    assert kept == {**first, "source": "measured, at the run's start"}
    assert train.mfu_peak({"mfu_peak": kept}, "float32", CPU, 1) == kept


def test_a_peak_saved_without_its_dtype_and_threads_is_given_them(monkeypatch):
    """ckpt.pt kept the peak (flops, source, on) before it kept its dtype and threads too: a resume of such a
    run kept it without them, and a log step over that peak, measuring it again on run.peak's dtype, failed
    with a KeyError."""
    import train
    first = a_measured_peak(monkeypatch)
    older = {key: value for key, value in first.items() if key not in ("dtype", "threads")}
    kept = train.mfu_peak({"mfu_peak": older}, "float32", CPU, 1)
    assert kept == {**first, "source": "measured, at the run's start"}


def test_a_resume_of_a_finished_run_from_before_evaluated_step_keeps_its_settings(tmp_path, capsys):
    """A checkpoint that records no evaluated_step (an older train.py's) is taken as evaluated at its step, by
    the run and by what config.yaml records alike: a finished one trains and evaluates nothing, so config.yaml
    keeps the run's settings (it was rewritten with train.lr=0.5, which no step or eval ran)."""
    import train
    from tinygpt import runs
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    train.main(run_args(tmp_path, "run", "train.max_iters=2"))
    ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
    del ckpt["evaluated_step"]
    save_checkpoint(tmp_path / "run" / "ckpt.pt", ckpt)
    rows = (tmp_path / "run" / "metrics.csv").read_text()
    train.main(run_args(tmp_path, "run", "train.max_iters=2", "train.lr=0.5") + ["--resume"])
    assert (tmp_path / "run" / "metrics.csv").read_text() == rows  # (no eval ran)
    assert runs.read_config(tmp_path / "run").train.lr != 0.5
    assert "config.yaml keeps the run's: train.lr" in capsys.readouterr().err


def test_an_infinite_train_loss_is_a_divergence(tmp_path):
    """A train loss of inf (not only nan: float16 logits that overflow) ends the run as diverged, the row of its
    step marking it, instead of logging on and saving the state that gave it."""
    from tinygpt.errors import UserError
    import train
    run = tiny_run(tmp_path)
    run.loss_sum.fill_(math.inf)
    run.loss_count, run.step = 1, 3
    with pytest.raises(UserError, match="training diverged: the train loss is inf at step 3"):
        train.train_loss_since_log(run)
    assert [row["train_loss"] for row in run.metrics] == ["inf"]


def test_a_run_from_other_weights_says_what_it_starts_from_once_on_stdout(tmp_path, capsys):
    """train.init_from: the line naming the weights a run starts from is printed (on stdout, before the model
    line), not only returned by load_init."""
    import train
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "base", "train.max_iters=2"))
    capsys.readouterr()
    train.main(run_args(tmp_path, "fine", "train.max_iters=0", f"train.init_from={tmp_path / 'base'}"))
    out = capsys.readouterr().out
    said = f"train.init_from: starting from {tmp_path / 'base' / 'best.pt'} (step "
    assert out.count(said) == 1 and out.index(said) < out.index("model: "), out


def test_a_resume_of_a_run_never_evaluated_does_not_say_best_pt_is_gone(tmp_path, capsys):
    """A ckpt.pt saved before any evaluation (stopped during step 0's eval) has an infinite best val loss and no
    best.pt: nothing was removed, and no "beats the run's best val loss, inf" note is due."""
    import train
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    run = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=2") + ["--stop-at", "0"])
    ckpt = load_checkpoint(run / "ckpt.pt")
    save_checkpoint(run / "ckpt.pt", {**ckpt, "best_val_loss": float("inf")})
    (run / "best.pt").unlink()
    capsys.readouterr()
    train.main(run_args(tmp_path, "run", "train.max_iters=2") + ["--resume"])
    assert "has no best.pt" not in capsys.readouterr().err


def test_a_resume_that_names_its_train_out_dir_on_purpose_continues_that_folder(tmp_path):
    """`train.py bk/config.yaml --resume --set train.out_dir=m1`: a copy's config.yaml with the run folder named on
    purpose continues that folder (only a train.out_dir left from the copied config is refused as "a copied run")."""
    import shutil
    import train
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "m1", "train.max_iters=2"))
    shutil.copytree(tmp_path / "m1", tmp_path / "bk")
    with contextlib.redirect_stdout(io.StringIO()):
        done = train.main([str(tmp_path / "bk" / "config.yaml"), "--resume", "--quiet", "--set",
                           f"train.out_dir={tmp_path / 'm1'}", "train.max_iters=3"])
    assert (done["step"], done["out_dir"]) == (3, str(tmp_path / "m1"))
    assert (read_metrics_steps(tmp_path / "m1"), read_metrics_steps(tmp_path / "bk")) == (3, 2)


def test_a_resume_with_its_own_max_iters_says_nothing_of_the_schedule_moving():
    """schedule_moved is about train.max_iters: a resume with another train.lr but the run's own max_iters has an
    lr that differs at the step (changed_training's note says so), but its cosine decay did not move."""
    import train
    then = replace(Config().train, max_iters=100, warmup_iters=10)
    t = replace(then, lr=then.lr / 2)
    assert f"{training.lr_at(50, t):.3g}" != f"{training.lr_at(50, then):.3g}"
    assert train.schedule_moved(t, then, 50) == ""
    assert train.schedule_moved(replace(t, max_iters=200), then, 50).startswith(
        "note: --resume with train.max_iters=200 (was 100)")


def test_a_resume_on_another_number_of_processes_leaves_batch_size_and_grad_accum_to_the_global_batch_note():
    import train
    from tinygpt.config import config_to_dict, load_config
    config = str(ROOT / "configs/stories.yaml")
    saved = load_config(config)
    ckpt = {"config": config_to_dict(saved), "step": 3}
    cfg = load_config(config, [f"train.batch_size={saved.train.batch_size + 1}",
                               f"train.grad_accum={saved.train.grad_accum + 1}", f"train.lr={saved.train.lr / 2}"])
    names = [[c.split("=")[0] for c in train.training_changes(cfg, ckpt, n)] for n in (1, 2)]
    assert names == [["train.batch_size", "train.grad_accum", "train.lr"], ["train.lr"]]


def test_init_from_names_a_model_vocab_size_of_this_config_that_its_weights_replace():
    """A model.vocab_size given in this config (0: from the tokenizer) that is not the weights' is one they replace."""
    import train
    theirs = replace(Config().model, vocab_size=65)
    assert train.not_this_configs(replace(theirs, vocab_size=100), theirs) == ", not this config's model.vocab_size=100"
    assert train.not_this_configs(replace(theirs, vocab_size=0), theirs) == ""
    assert train.not_this_configs(theirs, theirs) == ""


def test_a_torchrun_process_checks_its_settings_and_flags_against_the_others_before_any_work(tmp_path):
    """train() under torchrun (world_size > 1) compares this process's settings and flags with the others' first:
    --resume on one machine alone is refused in one line, before the run folder is looked at."""
    import argparse
    import train
    from tinygpt.config import flat_config
    from tinygpt.errors import UserError
    cfg = Config()
    cfg.train.out_dir = str(tmp_path / "run")
    theirs = {**{k: v for k, v in flat_config(cfg).items() if k not in train.PER_MACHINE},
              "--resume": True, "--stop-at": None}
    dist = SimpleNamespace(rank=1, world_size=2, master=False, gather=lambda mine: [theirs, mine])
    args = argparse.Namespace(config="config.yaml", set=[], resume=False, stop_at=None, quiet=True)
    with pytest.raises(UserError, match=r"^process 1: the processes of this torchrun run were given other settings: "
                                        r"--resume=False here, True on process 0"):
        train.train(args, cfg, dist)
    assert not (tmp_path / "run").exists()


def test_a_resumed_run_continues_its_batches_losses_and_clock(tmp_path, monkeypatch):
    """Stopped at step 3 (between evals and log rows) and resumed, a run trains the batches, logs the train
    loss means and counts the seconds of one that never stopped: the batch generator, the loss sum with its
    count and the elapsed time come back from ckpt.pt; the stop saves its state and its step's log row."""
    import train
    from tinygpt.checkpoint import load_checkpoint, save_checkpoint
    from tinygpt.runs import read_metrics
    losses, real = [], train.Run.take_step

    def recording(self, lr, stop=None):
        loss = real(self, lr, stop)
        losses.append(loss.item())
        return loss
    monkeypatch.setattr(train.Run, "take_step", recording)
    settings = ("train.max_iters=6", "train.eval_interval=4", "train.log_interval=2")
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "whole", *settings))
        whole = losses[:]
        losses.clear()
        train.main(run_args(tmp_path, "run", *settings) + ["--stop-at", "3"])
        stopped = read_metrics(tmp_path / "run")
        ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
        assert ckpt["step"] == 3 and [r["step"] for r in stopped] == [0, 2]  # the log row of step 2 written
        assert ckpt["elapsed_s"] + 5e-4 >= stopped[-1]["elapsed_s"] > 0  # saved at the stop, not the last eval
        ckpt["elapsed_s"] = 1000.0  # a long first part
        save_checkpoint(tmp_path / "run" / "ckpt.pt", ckpt)
        train.main(run_args(tmp_path, "run", *settings) + ["--resume"])
    assert losses == whole  # the same batches (and dropout masks) as the run that never stopped
    logs = {r["step"]: r["train_loss"] for r in read_metrics(tmp_path / "run") if r["tokens_per_s"] is not None}
    assert logs == {2: pytest.approx(sum(whole[:2]) / 2, abs=1e-4), 4: pytest.approx(sum(whole[2:4]) / 2, abs=1e-4),
                    6: pytest.approx(sum(whole[4:6]) / 2, abs=1e-4)}
    resumed = [r for r in read_metrics(tmp_path / "run") if r["step"] > 3]
    assert resumed and all(r["elapsed_s"] >= 1000.0 for r in resumed), resumed


def shifted_clock(monkeypatch) -> list[float]:
    """train.py's clock, running ahead of the real one by the seconds a test adds to the one-item list returned."""
    offset, real = [0.0], time_module.perf_counter
    import train
    monkeypatch.setattr(train, "time", SimpleNamespace(perf_counter=lambda: real() + offset[0]))
    return offset


def test_eval_rows_give_the_time_and_lr_of_their_step_and_evals_are_no_training_time(tmp_path, monkeypatch, capsys):
    """An eval row's elapsed_s is the time at its eval (after the log row of its step), and its lr the one its step
    trained with (the log row's); the seconds of an eval count in elapsed_s, not in the tokens/s of the next row.
    The printed eval line and the closing line give the file's losses."""
    import train
    from tinygpt.runs import read_metrics
    offset, real_estimate = shifted_clock(monkeypatch), train.estimate_loss

    def slow_estimate(*args, **kwargs):
        offset[0] += 1000.0  # an eval of 1000 s
        return real_estimate(*args, **kwargs)
    monkeypatch.setattr(train, "estimate_loss", slow_estimate)
    done = train.main(run_args(tmp_path, "run", "train.max_iters=4", "train.warmup_iters=3"))
    out = capsys.readouterr().out
    rows = read_metrics(tmp_path / "run")
    for step in (2, 4):
        log_row, eval_row = [r for r in rows if r["step"] == step]
        assert eval_row["elapsed_s"] >= log_row["elapsed_s"] > 0 and eval_row["lr"] == log_row["lr"]
        assert f"step {step}: train loss {eval_row['train_loss']:.4f}, val loss {eval_row['val_loss']:.4f}\n" in out
    assert training.lr_at(0, train.TrainConfig(lr=2e-3, min_lr=2e-4, warmup_iters=3, max_iters=4)) != rows[-1]["lr"]
    tokens_per_step = 4 * 16
    assert all(r["tokens_per_s"] > tokens_per_step / 100 for r in rows if r["tokens_per_s"] is not None), rows
    assert rows[-1]["elapsed_s"] > 3000  # the three evals' seconds are the run's
    assert f"done: step 4, best val loss {done['best_val_loss']:.4f}, " in out


def test_a_stop_at_weights_that_are_not_finite_keeps_the_last_good_ckpt_pt(tmp_path, monkeypatch):
    """--stop-at saves ckpt.pt only from finite weights: a step that left a nan weight is a divergence, and
    ckpt.pt stays the last eval's."""
    import train
    from tinygpt.checkpoint import load_checkpoint
    from tinygpt.errors import UserError
    real = train.Run.take_step

    def breaking(self, lr, stop=None):
        loss = real(self, lr, stop)
        if self.step == 2:  # the step to 3
            next(self.model.parameters()).data.fill_(float("nan"))
        return loss
    monkeypatch.setattr(train.Run, "take_step", breaking)
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(UserError, match="a weight is not finite at step 3"):
        train.main(run_args(tmp_path, "run", "train.max_iters=6") + ["--stop-at", "3"])
    assert load_checkpoint(tmp_path / "run" / "ckpt.pt")["step"] == 2


def test_a_resumes_first_log_row_counts_only_the_steps_since_the_resume(tmp_path, monkeypatch):
    """tokens/s of the first log row after a resume is over the steps this call trained, not all the run's."""
    import train
    from tinygpt.runs import read_metrics
    offset, real_step = shifted_clock(monkeypatch), train.Run.take_step

    def a_second_a_step(self, lr, stop=None):
        offset[0] += 1.0
        return real_step(self, lr, stop)
    monkeypatch.setattr(train.Run, "take_step", a_second_a_step)
    settings = ("train.max_iters=6", "train.eval_interval=4", "train.log_interval=2")
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", *settings) + ["--stop-at", "3"])
        train.main(run_args(tmp_path, "run", *settings) + ["--resume"])
    tokens_per_step = 4 * 16
    speeds = [r["tokens_per_s"] for r in read_metrics(tmp_path / "run") if r["tokens_per_s"] is not None]
    assert len(speeds) == 3 and all(tokens_per_step / 2 < s <= tokens_per_step for s in speeds), speeds


@pytest.mark.slow
def test_a_signal_during_the_last_eval_saves_the_last_step_to_be_evaluated_by_the_resume(tmp_path, monkeypatch):
    """A SIGTERM while the losses of step max_iters are estimated: the run is not done; it saves ckpt.pt of that
    step (its eval still due), exits 143, and the resume evaluates it."""
    import signal
    import train
    from tinygpt.checkpoint import load_checkpoint
    from tinygpt.runs import read_metrics
    calls, real = [], train.estimate_loss

    def stopped_at_the_last(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # steps 0, 2, then 4
            os.kill(os.getpid(), signal.SIGTERM)
            return None
        return real(*args, **kwargs)
    monkeypatch.setattr(train, "estimate_loss", stopped_at_the_last)
    with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit) as stopped:
        train.main(run_args(tmp_path, "run", "train.max_iters=4"))
    assert stopped.value.code == 128 + signal.SIGTERM
    assert "interrupted at step 4: saved " in out.getvalue() and "done" not in out.getvalue()
    ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
    assert (ckpt["step"], ckpt["evaluated_step"]) == (4, 2)
    with contextlib.redirect_stdout(io.StringIO()):
        train.main(run_args(tmp_path, "run", "train.max_iters=4") + ["--resume"])
    assert [r["step"] for r in read_metrics(tmp_path / "run") if r["val_loss"] is not None] == [0, 2, 4]

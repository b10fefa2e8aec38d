"""Guards tinygpt/training.py (the schedule, the optimizer's groups, one optimizer step, the loss
estimate) and the bookkeeping of train.py's loop around them: the best val loss over evals and a
resume, the train loss and tokens/s of each log row, the tokens a step counts with grad_accum."""
from __future__ import annotations

import contextlib
import copy
import io
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


def test_the_loss_estimate_runs_in_eval_mode_on_the_same_batches(tiny_model_config, monkeypatch):
    """With dropout 0.5, an estimate in train mode differs from call to call and from the model's loss;
    in eval mode it is the mean eval-mode loss of its batches, the same every time, and the model is
    left in train mode."""
    torch.manual_seed(0)
    model = GPT(replace(tiny_model_config, dropout=0.5))
    batches, real = [], training.get_batch

    def recorder(*args, **kwargs):
        batches.append(real(*args, **kwargs))
        return batches[-1]
    monkeypatch.setattr(training, "get_batch", recorder)
    data = np.arange(200, dtype=np.uint16) % tiny_model_config.vocab_size
    estimate = lambda: training.estimate_loss(model, {"val": data}, 4, 16, 3, 1337, CPU, contextlib.nullcontext(),
                                             Distributed(0, 1, CPU))
    first, second = estimate(), estimate()
    assert model.training
    assert first == second
    model.eval()
    with torch.no_grad():
        by_hand = sum(cross_entropy(model(x), y).item() for x, y in batches[:3]) / 3
    assert first["val"] == pytest.approx(by_hand, abs=1e-5)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches[:3], batches[3:]))


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
    seen, real = [], training.get_batch

    def recorder(*args, **kwargs):
        batch = real(*args, **kwargs)
        seen.append(batch[0])
        return batch
    monkeypatch.setattr(training, "get_batch", recorder)
    t = run.cfg.train
    training.estimate_loss(run.model, {"train": run.data.train}, t.batch_size, 16, 2, t.seed, CPU,
                           contextlib.nullcontext(), run.dist)
    assert len(seen) == 2
    for ours, theirs in zip(seen, training_batches):
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


def test_tokens_per_step_count_every_micro_batch(tmp_path):
    """tokens/step (and with it tokens/s and MFU) is batch_size * grad_accum * block_size: 4 * 2 * 16."""
    import train
    with contextlib.redirect_stdout(io.StringIO()) as out:
        train.main(run_args(tmp_path, "run", "train.max_iters=1", "train.grad_accum=2"))
    assert "; 128 tokens/step;" in out.getvalue()


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

"""Training of independent endpoints of any family an adapter handles (LMs on text, ViTs on images).

One loop serves both: AdamW (weight decay on matrices only), linear warmup then cosine decay to
``min_lr_ratio`` × lr, gradient-norm clipping, validation every ``eval_every`` steps with the best weights
kept in memory, optional early stopping after ``patience`` evaluations without improvement, and a budget in
steps, epochs or minutes (the first reached stops). The best weights are restored at the end.

Reproducibility: ``seed`` seeds torch before the model is built (initialisation and dropout) and the data
order (epoch e of the training split is drawn with seed ``seed * 1_000_003 + e``). On the same machine and
thread count the same seed gives bit-identical weights, unless a ``minutes`` budget cuts the run short.
Final metrics are measured in float32 on fixed batches (recorded in glmc.json under "eval"), so
``evaluate(load_model(dir)[0], ds.batches("test", eval_batch_size))`` reproduces them exactly.

glmc.json (the record written beside the weights)::

    glmc_version, kind ("trained-endpoint"), family (an adapter name, glmc.adapters.FAMILIES)
    model        build_model(family, **model) rebuilds the architecture (vocab/context/image sizes included)
    data         the completed data spec: glmc.data.load(record["data"]) rebuilds the data set and its batches
    tokenizer    LMs only: {"kind", "vocab_size"}; the tokenizer files themselves sit in the same directory
    training     TrainConfig fields + optimizer, schedule, steps_done, best_step (weights kept), stopped
                 ("steps" | "epochs" | "time" | "early") and history (step, train_loss, val_loss, val_acc, lr, seconds)
    metrics      {"train" | "val" | "test": {"loss", "acc", "n"}}: final weights, float32, eval batch size;
                 train = the first train_eval_batches training batches in order, val/test = the whole split
    eval         {"batch_size", "dtype", "split_batches"}: how to reproduce the metrics
    baseline     LMs only: {"unigram_test_loss"}: test cross-entropy under the training unigram distribution
    timing       wall_seconds (data + training + evaluation), train_seconds, periodic_eval_seconds,
                 final_eval_seconds, tokens_seen / images_seen, tokens_per_second / images_per_second
    environment  device, torch, transformers, threads, machine, python

Intermediate checkpoints (``save_every`` = K): the initial weights (step0) and those after every K-th optimiser
step (as trained, not the best validated ones) go to OUT/checkpoints/step{K·j}/, each a loadable model directory
(weights, tokenizer and a glmc.json of kind "training-checkpoint" with model, data, tokenizer and training {…,
"step"}), the layout of a suite with revisions; OUT itself holds the final (best) model. `glmc sweep
--checkpoints RUN_A RUN_B` reads it.
"""

import math
import platform
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

import glmc
import glmc.data
from glmc.adapters import adapter_named
from glmc.data import training_stream
from glmc.models import build_model, save_model
from glmc.models.evaluate import evaluate, loss_and_correct
from glmc.provenance import provenance
from glmc.tasks import task, task_of_batch


@dataclass
class TrainConfig:
    seed: int = 0
    steps: int | None = None  # budget: optimiser steps ...
    epochs: float | None = None  # ... or passes over the training split ...
    minutes: float | None = None  # ... or wall-clock minutes (the first reached stops)
    batch_size: int = 64
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_batches: int | None = None  # validation batches per periodic evaluation (None: whole split)
    patience: int | None = None  # evaluations without improvement before stopping (None: never)
    eval_batch_size: int = 64
    train_eval_batches: int = 20  # deterministic training batches for the final "train" metric
    save_every: int | None = None  # keep the weights every this many steps under OUT/checkpoints/step{N}/


@dataclass
class LoopResult:
    steps_done: int = 0
    best_step: int | None = None
    best_val: float = math.inf
    stopped: str = "steps"  # what ended the run: steps, epochs, time or early (stopping)
    train_seconds: float = 0.0  # the whole loop, periodic validation included
    eval_seconds: float = 0.0  # periodic validation only
    samples: int = 0  # tokens for LMs, images for classifiers
    history: list = field(default_factory=list)


def total_steps(cfg: TrainConfig, steps_per_epoch: int) -> int | None:
    """Steps the schedule spans: --steps, else --epochs × steps per epoch, else None (time budget only)."""
    if cfg.steps is not None:
        return int(cfg.steps)
    if cfg.epochs is not None:
        return max(1, math.ceil(cfg.epochs * steps_per_epoch))
    return None


def make_optimizer(model, cfg: TrainConfig):
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas))


def lr_factor(step: int, total: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak lr at `step` (0-based): linear warmup, then cosine down to min_lr_ratio."""
    warmup = min(cfg.warmup, max(total // 10, 1))
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def train_batches(ds, cfg: TrainConfig):
    """An endless stream of training batches, each epoch in its own seeded order (glmc.data.training_stream)."""
    return training_stream(ds, cfg.batch_size, cfg.seed)


def batch_samples(batch: dict) -> int:
    """Predictions the batch trains (tokens or images: its task's targets)."""
    return int(batch[task(task_of_batch(batch)).target_key].numel())


def snapshot(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_loop(model, ds, cfg: TrainConfig, progress=True, save=None) -> LoopResult:
    """Train `model` in place (module docstring); `save(model, step)` is called every `cfg.save_every` steps."""
    total = total_steps(cfg, ds.num_batches("train", cfg.batch_size))
    deadline = None if cfg.minutes is None else time.perf_counter() + 60 * cfg.minutes
    opt = make_optimizer(model, cfg)
    result, best, bad, ema, shown = LoopResult(), None, 0, None, {}
    result.stopped = "epochs" if cfg.steps is None and cfg.epochs is not None else "steps"
    horizon = total or 10**6  # time budget only: re-sized once the first 20 steps have been timed
    bar = tqdm(total=total, desc="train", unit="step", disable=not progress, dynamic_ncols=True)
    stream = train_batches(ds, cfg)
    if save is not None and cfg.save_every:  # the initialisation: step 0 of the suite
        save(model, 0)
    model.train()
    start = time.perf_counter()
    for step in range(total if total is not None else 10**12):
        if deadline is not None and time.perf_counter() >= deadline:
            result.stopped = "time"
            break
        for g in opt.param_groups:
            g["lr"] = cfg.lr * lr_factor(step, horizon, cfg)
        batch = next(stream)
        loss = _step(model, opt, batch, cfg)
        result.steps_done, result.samples = step + 1, result.samples + batch_samples(batch)
        ema = loss if ema is None else 0.95 * ema + 0.05 * loss
        shown.update(loss=f"{ema:.3f}", lr=f"{opt.param_groups[0]['lr']:.1e}")
        bar.update(1)
        bar.set_postfix(shown, refresh=False)
        if save is not None and cfg.save_every and (step + 1) % cfg.save_every == 0:
            model.eval()
            save(model, step + 1)
            model.train()
        if deadline is not None and total is None and step == 19:  # time budget only: size the schedule
            horizon = bar.total = max(20, int(20 * (deadline - start) / (time.perf_counter() - start)))
        if (step + 1) % cfg.eval_every == 0 or step + 1 == total:
            t = time.perf_counter()
            val = evaluate(model, ds.batches("val", cfg.eval_batch_size, max_batches=cfg.eval_batches))
            result.eval_seconds += time.perf_counter() - t
            result.history.append({"step": step + 1, "train_loss": round(ema, 5), "val_loss": val["loss"],
                                   "val_acc": val["acc"], "lr": opt.param_groups[0]["lr"],
                                   "seconds": round(time.perf_counter() - start, 2)})
            shown["val"] = f"{val['loss']:.3f}"
            if val["loss"] < result.best_val:
                result.best_val, result.best_step, best, bad = val["loss"], step + 1, snapshot(model), 0
            else:
                bad += 1
                if cfg.patience is not None and bad >= cfg.patience:
                    result.stopped = "early"
                    break
    bar.close()
    result.train_seconds = time.perf_counter() - start
    if total is None and result.stopped != "early":
        result.stopped = "time"
    model.load_state_dict(_final_state(model, ds, cfg, best, result))
    model.eval()
    return result


def _step(model, opt, batch, cfg: TrainConfig) -> float:
    loss_sum, _, n = loss_and_correct(model, batch)
    loss = loss_sum / n
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    return loss.item()


def _final_state(model, ds, cfg, best, result: LoopResult) -> dict:
    """The weights to keep: the best validated ones, after one last check of the final weights if the run
    stopped between evaluations (a time budget), so the last steps are not thrown away unseen."""
    evaluated_last = result.history and result.history[-1]["step"] == result.steps_done
    if result.steps_done and not evaluated_last:
        val = evaluate(model, ds.batches("val", cfg.eval_batch_size, max_batches=cfg.eval_batches))
        result.history.append({"step": result.steps_done, "val_loss": val["loss"], "val_acc": val["acc"]})
        if val["loss"] < result.best_val:
            result.best_val, result.best_step = val["loss"], result.steps_done
            return model.state_dict()
    return best if best is not None else model.state_dict()


def final_metrics(model, ds, cfg: TrainConfig) -> dict:
    """float32 metrics on fixed batches: the first `train_eval_batches` of train in order, all of val/test."""
    bs = cfg.eval_batch_size
    return {
        "train": evaluate(model, ds.batches("train", bs, shuffle=False, max_batches=cfg.train_eval_batches)),
        "val": evaluate(model, ds.batches("val", bs)),
        "test": evaluate(model, ds.batches("test", bs)),
    }


def environment(device) -> dict:
    import transformers

    env = {"device": str(device), "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "machine": platform.machine(), "python": platform.python_version()}
    if torch.device(device).type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env


def fit(model, ds, cfg: TrainConfig, progress=True, save=None) -> dict:
    """Train `model` in place and return the "training", "metrics" and "timing" parts of the record."""
    loop = train_loop(model, ds, cfg, progress, save)
    t = time.perf_counter()
    metrics = final_metrics(model, ds, cfg)
    unit = task(ds.task).unit
    training = dict(asdict(cfg), optimizer="AdamW", schedule="warmup-cosine", steps_done=loop.steps_done,
                    best_step=loop.best_step, stopped=loop.stopped, history=loop.history)
    optimising = max(loop.train_seconds - loop.eval_seconds, 1e-9)
    timing = {"train_seconds": round(loop.train_seconds, 2), "periodic_eval_seconds": round(loop.eval_seconds, 2),
              "final_eval_seconds": round(time.perf_counter() - t, 2), f"{unit}_seen": loop.samples,
              f"{unit}_per_second": round(loop.samples / optimising, 1)}  # optimisation steps only
    return {"training": training, "metrics": metrics, "timing": timing}


# ---------------------------------------------------------------------------------------------- whole runs

def seed_everything(seed: int):
    torch.manual_seed(seed)  # model initialisation and dropout; data order has its own generators


def record_for(family: str, shape: dict, ds, parts: dict, wall: float, device="cpu") -> dict:
    """The glmc.json of a trained model (see docs in glmc/models/__init__.py and the README)."""
    record = {"glmc_version": glmc.__version__, "kind": "trained-endpoint", "family": family, "model": shape,
              "data": ds.spec, **parts, "eval": {"batch_size": parts["training"]["eval_batch_size"],
                                                 "dtype": "float32", "split_batches": "all (train: first "
                                                 f"{parts['training']['train_eval_batches']} in order)"},
              "environment": environment(device),
              "provenance": provenance(options=parts["training"], data={"spec": ds.spec}, device=device,
                                       seeds=[parts["training"].get("seed")])}
    record["timing"]["wall_seconds"] = round(wall, 2)
    if task(ds.task).reads_text:
        record["tokenizer"] = {"kind": ds.spec["tokenizer"], "vocab_size": ds.vocab_size}
    if task(ds.task).causal:  # next-token prediction: the unigram loss a model must beat
        record["baseline"] = {"unigram_test_loss": ds.unigram_entropy("test"),
                              "note": "cross-entropy of the test split under the training split's unigram "
                                      "distribution (add-one smoothed), nats/token"}
    return record


def run(family: str, data_spec: dict, shape: dict, cfg: TrainConfig, out=None, progress=True, overwrite=False,
        log=print, device="cpu") -> tuple:
    """Load data, build a `family` model of `shape` (data-dependent sizes filled in), train, save to `out`.

    The model is initialised on the CPU (the same seed gives the same initial weights on every device),
    then trained and evaluated on `device`; the recorded metrics hold for that device. Returns
    (model, record)."""
    t0 = time.perf_counter()
    ds = glmc.data.load(data_spec)
    log(f"data: {ds.describe()}")
    shape = dict(shape, **data_shape(family, ds, shape))
    seed_everything(cfg.seed)
    model = build_model(family, **shape).to(device)
    log(f"model: {family}, {sum(p.numel() for p in model.parameters()):,} parameters, {shape}")
    parts = fit(model, ds, cfg, progress, _saver(family, shape, ds, cfg, out) if out is not None else None)
    record = record_for(family, shape, ds, parts, time.perf_counter() - t0, device)  # wall time excludes the save
    if out is not None:
        save_model(model, out, record=record, tokenizer=getattr(ds, "tokenizer", None), overwrite=overwrite)
        if _staging(out).is_dir():  # the intermediate checkpoints join the final model (which replaced OUT whole)
            _staging(out).replace(checkpoint_dir(out, 0).parent)
    return model, record


CHECKPOINTS = "checkpoints"


def checkpoint_dir(out, step: int):
    """Where `save_every` puts the weights after `step` steps: OUT/checkpoints/step{step}."""
    return Path(out) / CHECKPOINTS / f"step{step}"


def _staging(out):
    """Where intermediate checkpoints wait until the final model is saved (saving it replaces OUT whole)."""
    return Path(out).parent / f".{Path(out).name}.{CHECKPOINTS}"


def _saver(family, shape, ds, cfg: TrainConfig, out):
    """save(model, step): an intermediate checkpoint, atomically (a directory either complete or absent)."""
    if not cfg.save_every:
        return None

    shutil.rmtree(_staging(out), ignore_errors=True)  # left by an interrupted run

    def save(model, step: int) -> None:
        record = {"glmc_version": glmc.__version__, "kind": "training-checkpoint", "family": family, "model": shape,
                  "data": ds.spec, "training": dict(asdict(cfg), step=step)}
        if task(ds.task).reads_text:
            record["tokenizer"] = {"kind": ds.spec["tokenizer"], "vocab_size": ds.vocab_size}
        save_model(model, _staging(out) / f"step{step}", record=record, tokenizer=getattr(ds, "tokenizer", None),
                   overwrite=True)

    return save


def data_shape(family: str, ds, shape: dict | None = None) -> dict:
    """The sizes the data decides (vocabulary and context for LMs; image size, channels, classes for images)."""
    return adapter_named(family).training.data_shape(ds)

"""Learned matching (the paper's Algorithm 1) in the native architecture.

Latent parameters for every declared group, initialised at the weight-matching solution; each group's kind
(glmc/symmetry/kinds/) says how its latent is parametrised and projected, e.g.
  orthogonal-fixing-ones   Z ∈ R^{(d−1)×(d−1)}, O = 11ᵀ/d + U·polar(Z)·Uᵀ (the LayerNorm residual)
  permutation              Z ∈ R^{n×n}, P = Hungarian(Z) (straight-through; Sinkhorn with `soft`): heads, MLP
                           units, and the residual with `permutations_only` (its declared subgroup). Trained only
                           at `perm_lr` > 0; by default weight matching's permutations are kept (DEFAULT_PERM_LR)
  invertible               A ∈ GL(d_head) per head, learned directly (inverses by a linear solve); per-head maps
                           are not learned in perm-only mode
  free                     for an embedded narrower model (`fill`): its free reader weights, filled toward the
                           reference plus learned offsets (`learn_free`, start 0); exact for any value
                           (glmc/matching/nullspace.py)
Each step: project, build π(θ_B) from the canonical view, draw λ, evaluate the training loss of
(1−λ)·θ_A + λ·π(θ_B) on a training batch (the model is called with the substituted parameters through
torch.func.functional_call, no copy), back-propagate into the latents, AdamW step (cosine schedule, warmup).
What keeps a step near the cost of a plain training step (benchmarks/learned_speed.py): permutations act by
indexing with the dense product's gradient, scales elementwise (Kind.differentiable), and a language model's loss
is taken from its final hidden states in one pass over the logits (glmc/models/head_loss.py).
Every `eval_every` steps the hard projection is scored on validation batches (`score_points`); the best is kept,
and training stops early after `patience` checks without improvement. The result is projected to exact
symmetries (soft permutations are rounded by Hungarian), so B′ = π(B) has B's function, checked before
anything is returned.

Under a multi-process launch (glmc/distributed.py) each process takes its share of every training and validation
batch; training losses are divided by the whole batch's count and the gradients summed over the processes before
each step, so every process makes the single-process full-batch update (up to float summation order). λ draws, the
data order and the projections are the same on every process, so the processes stay in lockstep.
"""

from __future__ import annotations

import itertools
import math
import random
import time

import torch
from tqdm.auto import tqdm

from glmc import distributed
from glmc.adapters import untied
from glmc.data import training_stream
from glmc.errors import BadOption
from glmc.matching import nullspace
from glmc.matching.alternation import weight_matching
from glmc.matching.checkpointing import checkpointed
from glmc.matching.common import canonical_pair, finish
from glmc.models.evaluate import summed, training_loss
from glmc.options import LEARNED_STEPS, PERM_LR, PERMUTATIONS_ONLY_LR, LearnedOptions, MergeOptions
from glmc.paths.interpolate import eval_dtype
from glmc.symmetry.spec import split_name
from glmc.symmetry.structure import STREAM
from glmc.symmetry.transform import Transform, apply_elements, constant_first
from glmc.view.circuit import circuit_model, circuit_params

# The defaults live with the options (glmc/options.py: LearnedOptions, MergeOptions), which say why.
DEFAULT_STEPS = LEARNED_STEPS  # when no budget is given: what benchmarks/barriers.py measures
# AdamW's learning rate for the latents (decision D6; the paper's code: 3e-4)
DEFAULT_LR = LearnedOptions.lr
# learned matching keeps weight matching's permutations (heads, MLP units) and learns the continuous maps around
# them: AdamW moves every entry of a one-hot latent by ~lr whatever its gradient's size, so at 0.02 assignments
# flipped on noise
# (decision D7). A latent that does not move is not differentiated.
DEFAULT_PERM_LR = PERM_LR
L = LearnedOptions  # the options' defaults

LAMBDA_SAMPLERS = {
    "narrow": lambda rng: rng.uniform(0.4, 0.6),
    "uniform": lambda rng: rng.uniform(0.0, 1.0),
    "fixed": lambda rng: 0.5,
    "gaussian": lambda rng: min(1.0, max(0.0, rng.gauss(0.5, 0.1))),
}
# where validation scores the barrier of a pair: the centre, or for samplers that train the whole path, the
# worst of three interior points (the barrier of a path between unequal models is rarely at λ = 0.5)
SCORE_POINTS = {"uniform": (0.25, 0.5, 0.75)}
# joint refinement of k > 2 models (glmc/matching/merge.py says why these differ from the paper's
# Dirichlet(0.1), lr 3e-4; perm_lr 0.02 is the pairs' earlier value, not re-measured on k > 2)
SIMPLEX_DEFAULTS = {"lr": MergeOptions.lr, "perm_lr": MergeOptions.perm_lr, "concentration": MergeOptions.concentration,
                    "simplex_score": MergeOptions.simplex_score}


def score_points(k: int, sampler: str, simplex_score: str) -> list[list[float]]:
    """Interpolation weights where validation scores the barrier (the worst excess loss among them): for pairs
    the sampler's probes of the path; for k > 2 the centre, and with "edges" every pair's midpoint too (the grid
    barrier is a max over the whole simplex, often reached on an edge)."""
    if k == 2:
        return [[1.0 - t, t] for t in SCORE_POINTS.get(sampler, (0.5,))]
    points = [[1.0 / k] * k]
    if simplex_score == "edges":
        points += [[0.5 * (i in pair) for i in range(k)] for pair in itertools.combinations(range(k), 2)]
    return points


class Latents(torch.nn.Module):
    """The learnable parameters of one transform, and their projections (soft for training, hard for output).
    `kinds`: role -> kind overriding the declaration (a declared subgroup, e.g. a permutation residual)."""

    def __init__(self, init: Transform, arch, kinds: dict | None = None, soft: bool = False):
        super().__init__()
        self.arch, self.soft = arch, soft
        # group name -> the Kind that parametrises it (bound to the declared parameters)
        self.kinds = {name: arch.groups[split_name(name)[0]].group((kinds or {}).get(split_name(name)[0]))
                      for name in init.groups()}
        # the batch tells block-structured kinds (grouped permutations) their block count
        self.z = torch.nn.ParameterDict({_key(n): torch.nn.Parameter(
            k.latent(init[n], batch=arch.groups[split_name(n)[0]].batch)) for n, k in self.kinds.items()})
        self._constant = {}  # projections of latents that do not train (see dense)

    def discrete(self) -> list[torch.nn.Parameter]:
        """Latents of permutation-like kinds (one-hot starts: see LearnedMatcher.fit's perm_lr)."""
        return [self.z[_key(n)] for n, k in self.kinds.items() if k.discrete]

    def dense(self, hard: bool = False) -> dict:
        """group name -> its current projection as an element acting on tensors (differentiable unless `hard`).
        A latent that does not train (a permutation at perm_lr 0) is projected once, not by a Hungarian solve
        every step; its version counter says when something changed it in place."""
        out = {}
        for name, k in self.kinds.items():
            z = self.z[_key(name)]
            if z.requires_grad:
                out[name] = k.differentiable(z, hard=hard, soft=self.soft)
                continue
            key = (name, hard, z.device, z._version)
            if key not in self._constant:
                self._constant = {c: v for c, v in self._constant.items() if c[:2] != key[:2]}
                self._constant[key] = k.differentiable(z, hard=hard, soft=self.soft)
            out[name] = self._constant[key]
        return out

    def constant_state(self, hard: bool) -> tuple:
        """What the constant projections depend on: their latents' versions (and `hard`, where soft differs)."""
        return (hard and self.soft,) + tuple((n, z.device, z._version) for n, z in
                                             ((n, self.z[_key(n)]) for n in self.kinds) if not z.requires_grad)

    @torch.no_grad()
    def transform(self) -> Transform:
        """The exact symmetry these latents stand for (hard permutations, exact orthogonal residual), projected in
        float64 on the CPU wherever the latents live: a float32 polar factor from a GPU's SVD is orthogonal only
        to ~1e-5, which moved logits by 1.6e-4 (over the 1e-4 check) on an H200."""
        out = {}
        for name, k in self.kinds.items():
            group, z = k, self.z[_key(name)].detach().to("cpu", torch.float64)
            out[name] = group.element(group.project(z, hard=True, soft=self.soft))
        return Transform(out)


def _mix(weights, tensors) -> torch.Tensor:
    """Σ weights[m]·tensors[m]: one lerp for two weights summing to 1 (the pair path), else one multiply and one
    fused multiply-add per further tensor."""
    if len(tensors) == 2 and weights[0] + weights[1] == 1.0:
        return torch.lerp(tensors[0], tensors[1], float(weights[1]))
    out = tensors[0] * weights[0]
    for w, t in zip(weights[1:], tensors[1:]):
        out = out.add(t, alpha=w)
    return out


def _key(name: str) -> str:
    return name.replace(".", "_")


def _train_batches(data, batch_size, seed):
    return training_stream(data, batch_size, seed)


def sample_weights(sampler: str, k: int, rng: random.Random, bias: float = 0.0,
                   concentration: float = SIMPLEX_DEFAULTS["concentration"]) -> list[float]:
    """Interpolation weights for k endpoints: λ from a sampler for pairs (shifted by `bias` toward the second
    model, clipped to [0, 1]), Dirichlet(concentration) on the simplex for k > 2 (0.1: the paper's Eq. 2)."""
    if k == 2:
        lam = min(1.0, max(0.0, LAMBDA_SAMPLERS[sampler](rng) + bias))
        return [1.0 - lam, lam]
    g = [rng.gammavariate(concentration, 1.0) + 1e-12 for _ in range(k)]
    return [x / sum(g) for x in g]


class LearnedMatcher:
    """Learns one transform per model m ≥ 1 that brings it to model 0 (the reference, held fixed)."""

    def __init__(self, views: list, adapter, arch, template, data, inits: list, kinds: dict | None = None,
                 soft=False, device=None, mode: str = "native", probes: list | None = None, learn_free=False,
                 autocast=None, checkpoint: bool = False):
        self.adapter, self.arch, self.data, self.task, self.mode = adapter, arch, data, data.task, mode
        self.device = device or torch.device("cpu")
        # the training forward and backward in low precision (bfloat16, float16); the latents, their projections
        # and the interpolated weights stay float32, validation and the result are float32
        dtype = eval_dtype(autocast)
        self.autocast = None if dtype in (None, torch.float32) else dtype
        if mode == "circuit":  # interpolate whole circuits, as the paper's code does (glmc/view/circuit.py)
            template = circuit_model(template)
        else:
            template = untied(adapter, template)
        self.template = template.to(self.device)
        for p in self.template.parameters():
            p.requires_grad_(False)
        self.blocks = self._blocks(adapter) if checkpoint else []
        self.views = [{k: v.to(self.device) for k, v in view.items()} for view in views]
        self.latents = torch.nn.ModuleList(Latents(t, arch, kinds, soft) for t in inits).to(self.device)
        # per moved model: its null-space probes (an embedded narrower model, glmc/matching/nullspace.py) or None
        self.probes = [None if p is None else {k: v.to(self.device) for k, v in p.items()}
                       for p in (probes or [None] * len(inits))]
        self._first = [None] * len(inits)  # per moved model: (constant_state, its view under the constant groups)
        # learnable free weights: the fill's target is the reference plus these offsets (start: 0, the plain fill)
        self.free = torch.nn.ModuleList(
            torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(torch.zeros_like(self.views[0][k]))
                                    for k in nullspace.filled_keys(self.views[0], arch.n_layer)} if p is not None
                                   and learn_free else {})
            for p in self.probes)

    def _blocks(self, adapter) -> list:
        """The template's blocks, for gradient checkpointing (glmc/matching/checkpointing.py)."""
        if self.mode == "circuit":
            raise BadOption("gradient checkpointing recomputes the native model's blocks; circuit mode has none "
                            "(use --mode native, or drop --checkpoint)")
        return [m for k, m in adapter.hook_modules(self.template).items() if k.count(".") == 1]

    def fill_target(self, m: int) -> dict:
        """The view model m+1's free weights are filled toward: the reference plus the learned offsets."""
        free = self.free[m]
        return {**self.views[0], **{k.replace("_", "."): self.views[0][k.replace("_", ".")] + z
                                    for k, z in free.items()}}

    def moved(self, hard: bool) -> list:
        n, arch = self.arch.n_layer, self.arch
        out = [self.views[0]]
        for i, (view, lat, probes) in enumerate(zip(self.views[1:], self.latents, self.probes)):
            dense = lat.dense(hard)
            b = apply_elements(*self._constant_applied(i, view, lat, dense, hard), arch)
            if probes is not None:  # filled toward the reference inside every step, so training sees the fill
                moved_p = nullspace.move_probes(probes, dense, lambda v, part: apply_elements(v, part, arch, False))
                b = nullspace.fill(self.fill_target(i), b, moved_p, n)
            out.append(b)
        return out

    def _constant_applied(self, i: int, view: dict, lat: Latents, dense: dict, hard: bool) -> tuple[dict, dict]:
        """(view under the groups that do not train and may act first, the remaining elements). The first part
        is computed once per change of those latents: at perm_lr 0 the permutations' gathers, forward and
        backward, were a fifth of a small ViT's step overhead."""
        state = lat.constant_state(hard)
        if self._first[i] is None or self._first[i][0] != state:
            self._first[i] = None  # the old copy goes before the new one is made
            first = constant_first(view, [n for n in dense if not lat.z[_key(n)].requires_grad], self.arch)
            with torch.no_grad():
                moved = apply_elements(view, {n: dense[n] for n in first}, self.arch, strict=False)
            self._first[i] = (state, moved, first)
        _, moved, first = self._first[i]
        return moved, {n: e for n, e in dense.items() if n not in first}

    def params_at(self, weights, hard: bool = False) -> dict:
        if isinstance(weights, (int, float)):
            weights = [1.0 - weights, float(weights)]
        moved = self.moved(hard)
        if self.mode == "circuit":
            reps = [circuit_params(m, self.arch.n_layer) for m in moved]
            return self.template.state({k: _mix(weights, [r[k] for r in reps]) for k in reps[0]})
        mixed = {k: _mix(weights, [m[k] for m in moved]) for k in self.views[0]}
        return self.adapter.native_state(mixed, self.template)

    def batch_loss(self, batch, params) -> torch.Tensor:
        """Mean training loss of `batch`; under a multi-process launch this process's share of the loss summed
        over its rows, divided by the whole batch's count (the shares add up to the batch's mean). An empty share
        gives a constant 0."""
        part = distributed.shard(batch)
        if distributed.rows(part):
            with (torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None),
                  checkpointed(self.blocks)):
                loss, n = training_loss(self.template, part, self.task, params=params, device=self.device)
        else:  # fewer rows than processes
            loss, n = torch.zeros((), device=self.device), 0
        return loss / distributed.all_sum([n])[0]

    @torch.no_grad()
    def mean_loss(self, batches, weights, hard=True) -> float:
        total, _, n = summed(self.template, batches, self.task, self.params_at(weights, hard), self.device,
                             accuracy=False)
        return total / n

    def transforms(self) -> list[Transform]:
        return [lat.transform() for lat in self.latents]

    @torch.no_grad()
    def targets(self) -> list:
        """Per moved model: the view its free weights are filled toward (None without probes), detached, on CPU."""
        return [None if p is None else {k: v.detach().cpu() for k, v in self.fill_target(i).items()}
                for i, p in enumerate(self.probes)]

    def optimizer(self, lr=DEFAULT_LR, perm_lr=DEFAULT_PERM_LR, weight_decay=0.0) -> torch.optim.Optimizer:
        """AdamW over every latent. Permutation latents start one-hot: an assignment flips only once entries
        move by ~1, so they get their own learning rate; orthogonal and GL latents move at `lr`. At perm_lr 0
        the permutations are constants (no gradient is formed for them)."""
        perm = [p for lat in self.latents for p in lat.discrete()]
        rest = [p for p in self.latents.parameters() if all(p is not q for q in perm)] + list(self.free.parameters())
        for p in perm:
            p.requires_grad_(perm_lr > 0)
        groups = [{"params": rest, "lr": lr}] + ([{"params": perm, "lr": perm_lr}] if perm_lr > 0 else [])
        return torch.optim.AdamW(groups, weight_decay=weight_decay)

    def train_step(self, batch, weights, opt) -> torch.Tensor:
        """One step: project, build Σ_m weights[m]·π_m(θ_m), training loss on `batch`, backward, `opt.step()`
        (under a multi-process launch, with the gradients summed over the processes first). Returns the loss
        (detached; the whole batch's on every process)."""
        loss = self.batch_loss(batch, self.params_at(weights))
        opt.zero_grad()
        if loss.requires_grad:  # not for an empty share of the batch
            loss.backward()
        distributed.sum_gradients(p for group in opt.param_groups for p in group["params"])  # one process: no-op
        opt.step()
        if distributed.launched():  # the whole batch's loss, as in one process
            return loss.new_tensor(distributed.all_sum([loss.item()])[0])
        return loss.detach()

    def fit(self, steps=None, epochs=None, minutes=None, lr=DEFAULT_LR, weight_decay=MergeOptions.weight_decay,
            warmup=MergeOptions.warmup, batch_size=L.train_batch_size, sampler=MergeOptions.sampler, bias=L.bias,
            eval_every=L.eval_every, eval_batches=L.eval_batches, patience=L.patience, seed=L.seed,
            progress=L.progress, perm_lr=DEFAULT_PERM_LR, concentration=SIMPLEX_DEFAULTS["concentration"],
            simplex_score=SIMPLEX_DEFAULTS["simplex_score"]) -> dict:
        rng = random.Random(seed)
        torch.manual_seed(seed)
        k = len(self.views)
        val = list(self.data.batches("val", batch_size, max_batches=eval_batches, shuffle=False))
        ends = [self.mean_loss(val, [float(i == m) for i in range(k)]) for m in range(k)]
        points = score_points(k, sampler, simplex_score)
        per_epoch = self.data.num_batches("train", batch_size)
        total = steps or (math.ceil(epochs * per_epoch) if epochs else None)
        if total is None and minutes is None:
            total = DEFAULT_STEPS
        opt = self.optimizer(lr, perm_lr, weight_decay)
        horizon = total or 10**9
        warm = max(1, int(warmup * horizon)) if total else 10

        def lr_factor(s):
            cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, s / horizon))) if total else 1.0
            return min(1.0, (s + 1) / warm) * cosine

        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)

        def score():  # worst excess loss over the scoring points, hard projection
            return max(self.mean_loss(val, w) - sum(a * b for a, b in zip(w, ends)) for w in points)

        def snapshot(step, barrier):  # what the result is made of, kept for the best validation score
            return {"step": step, "val_barrier": barrier, "transforms": self.transforms(), "targets": self.targets()}

        best = snapshot(0, score())
        history = [{"step": 0, "val_barrier": best["val_barrier"]}]
        t0 = time.perf_counter()
        step_times, bad, step = [], 0, 0
        batches = _train_batches(self.data, batch_size, seed)
        bar = tqdm(total=total, desc="learned matching", disable=not (progress and distributed.is_main()), leave=False)

        def out_of_time():  # every process stops at the same step, whatever its own clock says
            return minutes is not None and distributed.any_process(time.perf_counter() - t0 >= 60 * minutes)

        last = total == 0 or out_of_time()
        while not last:
            ts = time.perf_counter()
            loss = self.train_step(next(batches), sample_weights(sampler, k, rng, bias, concentration), opt)
            sched.step()
            step += 1
            step_times.append(time.perf_counter() - ts)
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.4f}", best=f"{float(best['val_barrier']):.4f}")
            last = step == total or out_of_time()
            if step % eval_every == 0 or last:  # a time budget's last steps are scored too, not thrown away
                b = score()
                history.append({"step": step, "val_barrier": b, "train_loss": loss.item()})
                if b < best["val_barrier"]:
                    best, bad = snapshot(step, b), 0
                else:
                    bad += 1
                    if patience is not None and bad >= patience:
                        break
        bar.close()
        return {"steps": step, "best_step": best["step"], "best_val_barrier": best["val_barrier"],
                "init_val_barrier": history[0]["val_barrier"], "val_endpoints": ends, "history": history,
                "seconds": time.perf_counter() - t0, "seconds_per_step": sum(step_times) / max(1, len(step_times)),
                "transforms": best["transforms"], "targets": best["targets"]}


def align(model_a, model_b, options: LearnedOptions | None = None, *, data=None, permutations_only: bool = False,
          fill: bool = False, learn_free: bool = False):
    """Learned matching (module docstring) with `options`, a LearnedOptions (glmc/options.py) that arrives whole:
    `steps` / `epochs` / `minutes` budget (default DEFAULT_STEPS), AdamW
    at `lr` (`perm_lr` for permutation latents; None: DEFAULT_PERM_LR, PERMUTATIONS_ONLY_LR with
    `permutations_only`), λ from `sampler`, validation every `eval_every` steps on
    `eval_batches` batches with early stopping after `patience` checks; `permutations_only` learns the
    permutation subgroups only (the Git Re-Basin STE baseline); `soft`: Sinkhorn permutations; `mode`
    "circuit" interpolates the paper's circuit form; `fill`/`learn_free`: an embedded narrower B's null space;
    `autocast` ("bfloat16", "float16"): the training steps' forward and backward in that precision; `checkpoint`:
    recompute each block's activations during backward instead of keeping them (less memory, ~⅓ more compute);
    `restarts`: the weight-matching start's (glmc/matching/alternation.py; None: 1)."""
    o = options if options is not None else LearnedOptions()
    soft, iterations, progress, steps, epochs, minutes = o.soft, o.iterations, o.progress, o.steps, o.epochs, o.minutes
    lr, sampler, bias, eval_every, eval_batches, patience = o.lr, o.sampler, o.bias, o.eval_every, o.eval_batches, \
        o.patience
    train_batch_size, seed, mode, perm_lr, autocast, checkpoint, restarts = o.train_batch_size, o.seed, o.mode, \
        o.perm_lr, o.autocast, o.checkpoint, o.restarts
    if data is None:
        raise ValueError("learned matching trains on data (the models' glmc.json or --data)")
    sampler = sampler or "narrow"  # the paper's λ ~ U(0.4, 0.6)
    if sampler not in LAMBDA_SAMPLERS:
        raise BadOption(f"unknown λ sampler {sampler!r}; choose from {', '.join(LAMBDA_SAMPLERS)}")
    if perm_lr is None:
        perm_lr = PERMUTATIONS_ONLY_LR if permutations_only else DEFAULT_PERM_LR
    if perm_lr < 0:
        raise BadOption(f"perm_lr is a learning rate, at least 0; got {perm_lr}")
    adapter, arch, view_a, view_b = canonical_pair(model_a, model_b)
    device = next(model_a.parameters()).device
    kinds = {STREAM: "permutation"} if permutations_only else None
    init, wm_log = weight_matching(view_a, view_b, arch, iterations, "permutation" if permutations_only else None,
                                   head_maps=not permutations_only and mode == "native", progress=progress,
                                   # the unweighted fit (decision D1)
                                   balanced=False, restarts=restarts or 1)
    template = adapter.from_canonical(view_a, model_a)
    probes = nullspace.free_probes(view_b, arch.n_layer) if fill and mode == "native" else None
    m = LearnedMatcher([view_a, view_b], adapter, arch, template, data, [init], kinds, soft, device,
                       mode, probes=[probes], learn_free=learn_free, autocast=autocast, checkpoint=checkpoint)
    fit = m.fit(steps, epochs, minutes, lr, batch_size=train_batch_size, sampler=sampler, bias=bias,
                eval_every=eval_every, eval_batches=eval_batches, patience=patience, seed=seed, progress=progress,
                perm_lr=perm_lr)
    t = fit.pop("transforms")[0]
    target = fit.pop("targets")[0]
    report = {"method": "learned-perm" if permutations_only else "learned", "mode": mode, "soft": soft,
              "sampler": sampler,
              "lr": lr, "perm_lr": perm_lr, **fit, "weight_matching": wm_log, "transform": t.describe()}
    if soft:
        report["soft_endpoint_loss_change"] = _soft_endpoint_change(m, data, train_batch_size)
    return finish(model_a, model_b, adapter, arch, view_a, view_b, t, report, probes=probes, fill_target=target)


@torch.no_grad()
def _soft_endpoint_change(m: LearnedMatcher, data, batch_size) -> float:
    """Soft permutations are not exact symmetries: |L(soft π(B)) − L(B)| on validation batches."""
    val = list(data.batches("val", batch_size, max_batches=4, shuffle=False))
    return abs(m.mean_loss(val, 1.0, hard=False) - m.mean_loss(val, 1.0, hard=True))

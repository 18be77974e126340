"""Learned matching (the paper's Algorithm 1) in the native architecture.

Latent parameters for every symmetry, initialised at the weight-matching solution:
  residual   Z_R ∈ R^{(d−1)×(d−1)}, O = 11ᵀ/d + U·polar(Z_R)·Uᵀ (orthogonal, fixes the all-ones direction);
             with `permutations_only`, Z_O ∈ R^{d×d} and O = Hungarian(Z_O) (straight-through)
  heads      Z_P ∈ R^{H×H} per layer, P = Hungarian(Z_P) (straight-through; Sinkhorn with `soft`)
  qk, ov     A, B ∈ GL(d_head) per head, learned directly (inverses by a linear solve); not in perm-only mode
  MLP units  Z ∈ R^{n×n} per layer, Hungarian (straight-through; Sinkhorn with `soft`)
Each step: project, build π(θ_B) from the canonical view, draw λ, evaluate the training loss of
(1−λ)·θ_A + λ·π(θ_B) on a training batch (the model is called with the substituted parameters through
torch.func.functional_call, no copy), back-propagate into the latents, AdamW step (cosine schedule, warmup).
Every `eval_every` steps the hard projection is scored on validation batches at λ = 0.5; the best is kept,
and training stops early after `patience` checks without improvement. The result is projected to exact
symmetries (soft permutations are rounded by Hungarian), so B′ = π(B) has B's function, checked before
anything is returned.
"""

from __future__ import annotations

import itertools
import math
import random
import time

import torch
from tqdm.auto import tqdm

from glmc.align.common import canonical_pair, finish
from glmc.align.projections import hard_permutation, hungarian_ste, polar, sinkhorn, src_of
from glmc.align.weight import weight_matching
from glmc.evaluate import loss_and_correct
from glmc.symmetry.groups import IndexMap, LinearMap, ones_complement_basis
from glmc.symmetry.spec import actions
from glmc.symmetry.transform import Transform

LAMBDA_SAMPLERS = {
    "narrow": lambda rng: rng.uniform(0.4, 0.6),
    "uniform": lambda rng: rng.uniform(0.0, 1.0),
    "fixed": lambda rng: 0.5,
    "gaussian": lambda rng: min(1.0, max(0.0, rng.gauss(0.5, 0.1))),
}


class Latents(torch.nn.Module):
    """The learnable parameters of one transform, and their projections (soft for training, hard for output)."""

    def __init__(self, init: Transform, arch, permutations_only: bool = False, soft: bool = False):
        super().__init__()
        self.arch, self.perm_only, self.soft = arch, permutations_only, soft
        d = arch.d_model
        res = init["residual"]
        if permutations_only:
            self.res = torch.nn.Parameter(res.matrix().float() if isinstance(res, IndexMap) else torch.eye(d))
        else:
            u = ones_complement_basis(d)
            self.register_buffer("u", u.float())
            self.res = torch.nn.Parameter((u.T @ res.matrix.double() @ u).float())
        self.perms = torch.nn.ParameterDict()
        self.maps = torch.nn.ParameterDict()
        for name in init.groups():
            key = name.replace(".", "_")
            if name.startswith(("heads.", "mlp.")):
                self.perms[key] = torch.nn.Parameter(init[name].matrix().float())
            elif name.startswith(("qk.", "ov.")) and not permutations_only:
                self.maps[key] = torch.nn.Parameter(init[name].matrix.float().clone())

    def residual_matrix(self, hard: bool) -> torch.Tensor:
        if self.perm_only:
            return hard_permutation(self.res) if hard else hungarian_ste(self.res)
        d = self.arch.d_model
        return torch.full((d, d), 1.0 / d, device=self.res.device) + self.u @ polar(self.res) @ self.u.T

    def perm_matrix(self, key: str, hard: bool) -> torch.Tensor:
        z = self.perms[key]
        if hard:
            return hard_permutation(z)
        return sinkhorn(z) if self.soft else hungarian_ste(z)

    def dense(self, hard: bool = False) -> dict:
        """group name -> (matrix, kind) where kind "orth" acts as M on both sides, "gl" as M and M^-T."""
        out = {"residual": (self.residual_matrix(hard), "orth")}
        for key in self.perms:
            out[key.replace("_", ".")] = (self.perm_matrix(key, hard), "orth")
        for key, m in self.maps.items():
            out[key.replace("_", ".")] = (m, "gl")
        return out

    @torch.no_grad()
    def transform(self) -> Transform:
        """The exact symmetry these latents stand for (hard permutations, exact orthogonal residual)."""
        t = Transform()
        for name, (m, kind) in self.dense(hard=True).items():
            m = m.detach().cpu()
            is_perm = name.startswith(("heads.", "mlp.")) or (name == "residual" and self.perm_only)
            t.elements[name] = IndexMap(src_of(m), None, m.shape[0]) if is_perm else LinearMap(m.double() if kind == "orth" else m)
        return t


def _act(t: torch.Tensor, m: torch.Tensor, axis: int, batch_axis) -> torch.Tensor:
    axis = axis % t.ndim
    if batch_axis is None:
        return torch.tensordot(t.movedim(axis, -1), m, dims=1).movedim(-1, axis)
    x = t.movedim((batch_axis, axis), (0, -1))
    lead = x.shape
    out = torch.matmul(x.reshape(lead[0], -1, lead[-1]), m).reshape(*lead[:-1], m.shape[-1])
    return out.movedim((0, -1), (batch_axis, axis))


def apply_dense(view: dict, dense: dict, n_layer: int) -> dict:
    """π(view) with dense (differentiable) group matrices, following the same spec as Transform.apply."""
    out = dict(view)
    acts = actions(n_layer, view.keys())
    inverses = {}
    for name in sorted(dense, key=lambda n: ("residual", "heads", "qk", "ov", "mlp").index(n.split(".")[0])):
        m, kind = dense[name]
        for a in acts.get(name, []):
            if kind == "gl" and a.mode == "contra":
                if name not in inverses:
                    inverses[name] = torch.linalg.inv(m).transpose(-1, -2)
                mat = inverses[name]
            else:
                mat = m
            out[a.key] = _act(out[a.key], mat, a.axis, a.batch_axis)
    return out


def _train_batches(data, batch_size, seed):
    for epoch in itertools.count():
        yield from data.batches("train", batch_size, seed=seed * 1_000_003 + epoch, shuffle=True)


class LearnedMatcher:
    def __init__(self, model_a, model_b, data, permutations_only=False, soft=False, init=None, iterations=15,
                 device=None, progress=True):
        self.adapter, self.arch, self.view_a, self.view_b = canonical_pair(model_a, model_b)
        self.device = device or next(model_a.parameters()).device
        self.template = self.adapter.untie(self.adapter.from_canonical(self.view_a, model_a.cpu())).to(self.device)
        model_a.to(self.device)
        for p in self.template.parameters():
            p.requires_grad_(False)
        self.data, self.task = data, data.task
        if init is None:
            init, self.wm_log = weight_matching(self.view_a, self.view_b, self.arch, iterations,
                                                "permutation" if permutations_only else "orthogonal",
                                                head_maps=not permutations_only, progress=progress)
        self.latents = Latents(init, self.arch, permutations_only, soft).to(self.device)
        self.va = {k: v.to(self.device) for k, v in self.view_a.items()}
        self.vb = {k: v.to(self.device) for k, v in self.view_b.items()}

    def params_at(self, lam: float, hard: bool = False) -> dict:
        moved = apply_dense(self.vb, self.latents.dense(hard), self.arch.n_layer)
        mixed = {k: (1 - lam) * self.va[k] + lam * moved[k] for k in self.va}
        return self.adapter.native_state(mixed, self.template)

    def batch_loss(self, batch, params) -> torch.Tensor:
        loss, _, n = loss_and_correct(self.template, batch, self.task, params=params, device=self.device)
        return loss / n

    @torch.no_grad()
    def mean_loss(self, batches, lam, hard=True, params=None) -> float:
        params = params if params is not None else self.params_at(lam, hard)
        total, n = 0.0, 0
        for batch in batches:
            loss, _, count = loss_and_correct(self.template, batch, self.task, params=params, device=self.device)
            total, n = total + float(loss), n + count
        return total / n

    def fit(self, steps=None, epochs=None, minutes=None, lr=1e-3, weight_decay=0.0, warmup=0.05, batch_size=32,
            sampler="narrow", eval_every=50, eval_batches=8, patience=None, seed=0, progress=True) -> dict:
        rng = random.Random(seed)
        torch.manual_seed(seed)
        val = list(self.data.batches("val", batch_size, max_batches=eval_batches, shuffle=False))
        ends = [self.mean_loss(val, 0.0), self.mean_loss(val, 1.0)]
        per_epoch = self.data.num_batches("train", batch_size)
        total = steps or (math.ceil(epochs * per_epoch) if epochs else None)
        if total is None and minutes is None:
            total = 300
        opt = torch.optim.AdamW(self.latents.parameters(), lr=lr, weight_decay=weight_decay)
        sched_total = total or 10**9
        warm = max(1, int(warmup * sched_total)) if total else 10
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
            0.5 * (1 + math.cos(math.pi * min(1.0, s / sched_total)))) if total else min(1.0, (s + 1) / warm))

        def score():
            mid = self.mean_loss(val, 0.5)
            return mid - sum(ends) / 2

        best = {"step": 0, "val_barrier": score(), "transform": self.latents.transform()}
        history = [{"step": 0, "val_barrier": best["val_barrier"]}]
        t0 = time.perf_counter()
        step_times, bad = [], 0
        batches = _train_batches(self.data, batch_size, seed)
        bar = tqdm(total=total, desc="learned matching", disable=not progress, leave=False)
        step = 0
        while (total is None or step < total) and (minutes is None or time.perf_counter() - t0 < 60 * minutes):
            ts = time.perf_counter()
            lam = LAMBDA_SAMPLERS[sampler](rng)
            loss = self.batch_loss(next(batches), self.params_at(lam))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            step_times.append(time.perf_counter() - ts)
            bar.update(1)
            bar.set_postfix(lam=f"{lam:.2f}", loss=f"{float(loss):.4f}", best=f"{best['val_barrier']:.4f}")
            if step % eval_every == 0 or step == total:
                b = score()
                history.append({"step": step, "val_barrier": b, "train_loss": float(loss)})
                if b < best["val_barrier"]:
                    best, bad = {"step": step, "val_barrier": b, "transform": self.latents.transform()}, 0
                else:
                    bad += 1
                    if patience is not None and bad >= patience:
                        break
        bar.close()
        return {"steps": step, "best_step": best["step"], "best_val_barrier": best["val_barrier"],
                "init_val_barrier": history[0]["val_barrier"], "val_endpoints": ends, "history": history,
                "seconds": time.perf_counter() - t0, "seconds_per_step": sum(step_times) / max(1, len(step_times)),
                "transform": best.pop("transform")}


def align(model_a, model_b, data=None, permutations_only: bool = False, soft: bool = False, iterations: int = 15,
          progress: bool = True, steps=None, epochs=None, minutes=None, lr: float = 1e-3, sampler: str = "narrow",
          eval_every: int = 50, eval_batches: int = 8, patience=None, batch_size: int = 32, seed: int = 0, **_):
    if data is None:
        raise ValueError("learned matching trains on data (the models' glmc.json or --data)")
    if sampler not in LAMBDA_SAMPLERS:
        raise ValueError(f"unknown λ sampler {sampler!r}; choose from {', '.join(LAMBDA_SAMPLERS)}")
    m = LearnedMatcher(model_a, model_b, data, permutations_only, soft, None, iterations, progress=progress)
    fit = m.fit(steps, epochs, minutes, lr, batch_size=batch_size, sampler=sampler, eval_every=eval_every,
                eval_batches=eval_batches, patience=patience, seed=seed, progress=progress)
    t = fit.pop("transform")
    report = {"method": "learned-perm" if permutations_only else "learned", "soft": soft, "sampler": sampler,
              "lr": lr, **fit, "weight_matching": m.wm_log, "transform": t.describe()}
    return finish(model_a, model_b, m.adapter, m.arch, m.view_a, m.view_b, t, report)

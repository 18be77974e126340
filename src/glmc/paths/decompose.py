"""Where the barrier lives: the path with only one part of the network interpolated, and with only that part kept.

On the canonical view (norm gains folded, LayerNorm writers centred: glmc/view/canonical.py), for a part P (a set
of canonical keys, glmc/symmetry/parts.py) and λ on a grid:

  only P      θ_P(λ): P's tensors at (1−λ)·θ_A + λ·θ_B′, every other tensor at θ_A
  all but P   θ_¬P(λ): every tensor interpolated except P's, which stay at θ_A

and for each two measures, each with its worst λ, and the end loss L(1) (A with B′'s part, or B′ with A's part):
  barrier       the paper's barrier of that path: max_λ L(λ) − [(1−λ)·L(0) + λ·L(1)], over its own chord. The
                nonlinearity of the partial path; a part whose hybrid end is poor can have a small one.
  peak_excess   max_λ L(λ) − [(1−λ)·L(A) + λ·L(B′)], over the whole path's chord: how far above the endpoints'
                line the partial path climbs (hybrid ends included). A part that changes nothing scores
                max(0, L(A) − L(B′)), the endpoints' own difference.
Both are the whole path's barrier when every part moves together.
Interpolating all parts together is the whole path; `decompose_path` checks that on every call by evaluating the
whole path independently (glmc/paths/interpolate.py) and reporting the largest |difference| of the two curves,
which is 0 when the parts cover every key.
"""

from __future__ import annotations

import copy

import torch
from tqdm.auto import tqdm

from glmc.adapters import adapter_for
from glmc.errors import BadOption
from glmc.models.evaluate import model_device
from glmc.paths.barrier import evaluate_batches, path_curve
from glmc.paths.interpolate import Interpolation, eval_dtype, harmonise
from glmc.symmetry.parts import groupings
from glmc.view.canonical import canonicalise, is_canonical

GROUPINGS = ("roles", "layers", "cells")


def canonical_views(model_a, model_b):
    """(adapter, [view A, view B], [model A, model B] rebuilt from the views). A pair already canonical (what every
    alignment method but "none" returns) is used as it is, so its curve is the one `glmc barrier` measured."""
    models = harmonise([model_a, model_b])
    adapter = adapter_for(models[0])
    arch = adapter.arch(models[0])
    views = []
    for m in models:
        v = adapter.to_canonical(m)
        views.append(v if is_canonical(v, arch) else canonicalise(v, arch, inplace=True))
    ends = [adapter.from_canonical(dict(v), m).to(model_device(m)).eval() for v, m in zip(views, models)]
    return adapter, views, ends


class PartialInterpolation:
    """A working model whose canonical tensors in a chosen key set are interpolated and the rest held at A's."""

    def __init__(self, adapter, views, model, dtype=None):
        self.adapter, self.views = adapter, views
        self.work = copy.deepcopy(model).eval()
        if dtype is not None:
            self.work.to(dtype)
        self.state = self.work.state_dict(keep_vars=True)

    @torch.no_grad()
    def set(self, lam: float, keys) -> torch.nn.Module:
        a, b = self.views
        mixed = {k: (torch.lerp(v, b[k], float(lam)) if k in keys else v) for k, v in a.items()}
        for name, t in self.adapter.native_state(mixed, self.work).items():
            self.state[name].copy_(t)
        return self.work


def _curve(interp, keys, lams, batches, task, ends_loss) -> dict:
    loss, acc = [], []
    for lam in lams:
        if lam == 0 or not keys:  # θ_A exactly
            loss.append(ends_loss["a"]), acc.append(ends_loss["acc_a"])
            continue
        r = evaluate_batches(interp.set(lam, keys), batches, task)
        loss.append(r["loss"]), acc.append(r["acc"])
    return {"loss": loss, "acc": acc}


def excess_summary(lams, loss, whole=None) -> dict:
    """The excess over the path's own chord at each λ, its maximum and where, the loss at λ = 1, and (given the
    whole path's losses) the excess over the whole path's chord, its maximum and where."""
    own = _excess(lams, loss, loss[0], loss[-1])
    ref = _excess(lams, loss, (whole or loss)[0], (whole or loss)[-1])
    i = max(range(len(lams)), key=lambda k: own[k])
    j = max(range(len(lams)), key=lambda k: ref[k])
    return {"excess": own, "barrier": own[i], "lambda": lams[i], "end_loss": loss[-1], "excess_vs_path": ref,
            "peak_excess": ref[j], "peak_lambda": lams[j]}


def _excess(lams, loss, la: float, lb: float) -> list:
    return [x - ((1 - t) * la + t * lb) for t, x in zip(lams, loss)]


def decompose_path(model_a, model_b, batches: list, task: str, lambdas, by=GROUPINGS, dtype=None,
                   progress: bool = False) -> dict:
    """The decomposition of the path A → B′ over `lambdas` (endpoints included) on the same `batches`.

    Returns {"lambdas", "whole": {"loss", "acc", "barrier", "lambda"}, "all_parts_max_abs_diff",
    "parts": {grouping: {part: {"role", "layer", "keys", "parameters", "only": {...}, "all_but": {...}}}}}, where
    "only"/"all_but" hold "loss", "acc", "excess" (per λ, over the own chord), "barrier" (its max), "lambda" (its
    λ), "end_loss" (the loss at λ = 1: A with B′'s part, or B′ with A's), "excess_vs_path" (per λ, over the whole
    path's chord), "peak_excess" (its max) and "peak_lambda"."""

    lams = [float(x) for x in lambdas]
    if lams[0] != 0.0 or lams[-1] != 1.0:
        raise ValueError("a decomposition grid runs from λ = 0 to λ = 1")
    bad = [g for g in by if g not in GROUPINGS]
    if bad:
        raise BadOption(f"unknown decomposition grouping {bad[0]!r}; choose from {', '.join(GROUPINGS)}")
    adapter, views, ends = canonical_views(model_a, model_b)
    dtype = eval_dtype(dtype)
    whole = path_curve(ends, batches, task, len(lams), progress=False, dtype=dtype) if _uniform(lams) else \
        _grid_curve(ends, batches, task, lams, dtype)
    ends_loss = {"a": whole["loss"][0], "acc_a": whole["acc"][0]}
    interp = PartialInterpolation(adapter, views, ends[0], dtype)
    all_keys = set(views[0])
    parts = groupings(views[0], adapter.arch(ends[0]).part_roles)
    union = set().union(*(set(k) for g in parts.values() for k in g.values()))
    together = _curve(interp, union, lams, batches, task, ends_loss)
    out = {"lambdas": lams, "parts": {},
           "whole": {"loss": whole["loss"], "acc": whole["acc"], **excess_summary(lams, whole["loss"])},
           "all_parts_max_abs_diff": max(abs(x - y) for x, y in zip(together["loss"], whole["loss"])),
           "uncovered_keys": sorted(all_keys - union)}
    todo = [(g, name, keys) for g in by for name, keys in parts[g].items()]
    bar = tqdm(todo, desc="decompose", disable=not progress, leave=False)
    for g, name, keys in bar:
        bar.set_postfix(part=f"{g}:{name}")
        keyset = set(keys)
        role, layer = _role_layer(g, name)
        entry = {"role": role, "layer": layer, "keys": len(keys),
                 "parameters": sum(views[0][k].numel() for k in keys)}
        for variant, chosen in (("only", keyset), ("all_but", all_keys - keyset)):
            c = _curve(interp, chosen, lams, batches, task, ends_loss)
            entry[variant] = {**c, **excess_summary(lams, c["loss"], whole["loss"])}
        out["parts"].setdefault(g, {})[name] = entry
    return out


def _role_layer(grouping: str, name: str):
    if grouping == "roles":
        return name, None
    if grouping == "layers":
        return None, None if name == "outside" else int(name.split()[-1])
    role, where = name.split("@")
    return role, None if where == "outside" else int(where)


def _uniform(lams) -> bool:
    n = len(lams) - 1
    return all(abs(t - i / n) < 1e-12 for i, t in enumerate(lams))


def _grid_curve(ends, batches, task, lams, dtype) -> dict:
    interp = Interpolation(ends, dtype)
    rows = [evaluate_batches(interp.set(t), batches, task) for t in lams]
    return {"lambdas": lams, "loss": [r["loss"] for r in rows], "acc": [r["acc"] for r in rows]}

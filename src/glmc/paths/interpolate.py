"""θ(λ) = Σ_m λ_m·θ_m, evaluated without copying whole models per λ.

One working model is allocated (≈ one model of memory beside the endpoints) and its parameters are
overwritten in place for each λ: the cost per point is one pass over the parameters, negligible beside an
evaluation. With two endpoints `torch.lerp` gives θ_A at λ=0 and θ_B at λ=1 bit-exactly. With a `dtype`
(bfloat16, float16) the working model holds that dtype: the average is formed in the endpoints' precision and
rounded once, so only the evaluation runs in low precision (half the memory of a float32 working model, and on a
GPU its faster kernels).
"""

from __future__ import annotations

import copy

import torch

from glmc.adapters import adapter_for, untied
from glmc.errors import BadOption, IncompatibleModels
from glmc.view.circuit import CircuitModel


def harmonise(models: list) -> list:
    """Models with identical parameter names and shapes, so they can be averaged; raises a clear error if the
    architectures differ. A tied LM head is untied when another endpoint's is not."""
    if not any(isinstance(m, CircuitModel) for m in models):
        adapters = [adapter_for(m) for m in models]
        tied = [a.is_tied(m) for a, m in zip(adapters, models)]
        if len(set(tied)) > 1:
            models = [untied(a, m) for a, m in zip(adapters, models)]
    shapes = [{k: tuple(v.shape) for k, v in m.state_dict().items()} for m in models]
    for i, s in enumerate(shapes[1:], 1):
        if s != shapes[0]:
            diff = sorted(set(s.items()) ^ set(shapes[0].items()))[:3]
            raise IncompatibleModels(f"model {i + 1} has a different architecture from model 1 (first differences: "
                                     f"{diff}); align them first (different widths: `glmc align NARROW WIDE`)")
    return models


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def eval_dtype(dtype) -> torch.dtype | None:
    """None (the endpoints' own), a torch floating dtype, or its name ("float32", "bfloat16", "float16")."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise BadOption(f"unknown evaluation dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    return DTYPES[dtype]


class Interpolation:
    """A working model whose parameters are set to a weighted average of the endpoints' on demand, in `dtype`
    (None: the endpoints')."""

    def __init__(self, models: list, dtype=None):
        self.models = harmonise(list(models))
        self.dtype = eval_dtype(dtype)
        self.work = copy.deepcopy(self.models[0]).eval()
        if self.dtype is not None:
            self.work.to(self.dtype)
        names = [n for n, _ in self.work.named_parameters()]
        self.endpoint_params = [dict(m.named_parameters()) for m in self.models]
        self.params = dict(self.work.named_parameters())
        missing = [n for n in names if any(n not in p for p in self.endpoint_params)]
        if missing:
            raise ValueError(f"endpoints lack parameters {missing[:3]}")

    @torch.no_grad()
    def set(self, weights) -> torch.nn.Module:
        """Sets the working model to Σ weights[m]·θ_m (weights: a float λ for two models, else a sequence)."""
        if isinstance(weights, (int, float)):
            weights = [1.0 - float(weights), float(weights)]
        if len(weights) != len(self.models):
            raise ValueError(f"{len(weights)} weights for {len(self.models)} models")
        for name, p in self.params.items():
            if len(self.models) == 2 and p.dtype != self.endpoint_params[0][name].dtype:
                p.copy_(torch.lerp(self.endpoint_params[0][name], self.endpoint_params[1][name], float(weights[1])))
            elif len(self.models) == 2:
                torch.lerp(self.endpoint_params[0][name], self.endpoint_params[1][name], float(weights[1]), out=p)
            elif p.dtype != self.endpoint_params[0][name].dtype:
                p.copy_(sum(float(w) * ep[name] for w, ep in zip(weights, self.endpoint_params) if w))
            else:
                p.zero_()
                for w, ep in zip(weights, self.endpoint_params):
                    if w:
                        p.add_(ep[name], alpha=float(w))
        return self.work

"""Exact embedding of a narrower model into a wider architecture (narrow → wide).

Residual: x ↦ x·O with O ∈ R^{N×M}, O·Oᵀ = I_N and O·1_M ∝ 1_N (mean-zero streams stay mean-zero). ‖x·O‖ = ‖x‖
but LayerNorm divides by √(‖x‖²/M + ε), so with ε_M = ε_N·N/M: LN_M(x·O) = √(M/N)·LN_N(x)·O. Readers are
therefore scaled by c = √(N/M) and surviving LayerNorm biases by 1/c. The same holds for an RMS norm (any
orthonormal O, no mean condition).
Heads: per-head dimensions are zero-padded (Q scaled by √(d_head_wide/d_head) to keep the softmax temperature,
since attention divides by √d_head); extra heads are all-zero. MLP: extra units have zero in- and out-weights.
Works on canonical views (see glmc/view/canonical.py); family-agnostic.
"""

from __future__ import annotations

import math

import torch

from glmc.errors import UnsupportedModel
from glmc.symmetry.elements import LinearMap
from glmc.symmetry.kinds import zero_pad
from glmc.symmetry.spec import NORM_BIASES, READERS, WRITERS, expand_keys
from glmc.symmetry.transform import Transform


def residual_embedding(arch, d_model: int, gen: torch.Generator | None = None) -> torch.Tensor:
    """The exact N×M embedding of the residual stream the model's residual group allows (LayerNorm: mean-preserving;
    RMS norm: any orthonormal rows); random with `gen`."""
    return arch.groups["residual"].group().embed(arch.d_model, d_model, gen)


def embed_residual(view: dict, arch, o: torch.Tensor) -> dict:
    n, m = o.shape
    c = math.sqrt(n / m)
    v = dict(view)
    lm = LinearMap(o)
    for k in expand_keys(WRITERS, arch.n_layer, view):
        v[k] = lm.act(v[k], -1, "co")
    for k in expand_keys(NORM_BIASES, arch.n_layer, view):
        v[k] = lm.act(v[k], -1, "co") / c
    for k in expand_keys(READERS, arch.n_layer, view):
        v[k] = lm.act(v[k], -1, "contra") * c
    # folded gains sit at their identity value (1, or 0 for a 1 + w gain; glmc/symmetry/declarations.py)
    identity = {name + ".w": spec.identity_gain for name, spec in arch.norms.items()
                if spec.placement == "input" and spec.gain is not None}
    for k in expand_keys([*identity, "blocks.{i}.ls1", "blocks.{i}.ls2"], arch.n_layer, view):
        value = identity.get(k if k in identity else _template(k), 1.0)
        if not torch.all(v[k] == value):
            raise ValueError("embed a canonical view: norm gains and LayerScale must be folded first")
        v[k] = torch.full((m,), value, dtype=v[k].dtype)
    return v


def _template(key: str) -> str:
    """"blocks.3.ln1.w" → "blocks.{i}.ln1.w"."""
    parts = key.split(".")
    return ".".join("{i}" if p.isdigit() else p for p in parts)


def pad_heads(view: dict, arch, n_head: int, d_head: int) -> dict:
    """Zero-pad each head's dimension to d_head and the head count to n_head."""
    v = dict(view)
    scale = math.sqrt(d_head / arch.d_head)
    t = Transform()
    for i in range(arch.n_layer):
        t.elements[f"heads.{i}"] = zero_pad(arch.n_head, n_head)
    v = t.apply(v, arch)
    dim_pad = zero_pad(arch.d_head, d_head)
    for i in range(arch.n_layer):
        for p in "qkvo":
            k = f"blocks.{i}.attn.{p}.w"
            v[k] = dim_pad.act(v[k], 1, "copy")
            if p != "o" and k[:-1] + "b" in v:  # q/k/v biases are absent with qkv_bias=False
                v[k[:-1] + "b"] = dim_pad.act(v[k[:-1] + "b"], 1, "copy")
        v[f"blocks.{i}.attn.q.w"] = v[f"blocks.{i}.attn.q.w"] * scale
        if f"blocks.{i}.attn.q.b" in v:
            v[f"blocks.{i}.attn.q.b"] = v[f"blocks.{i}.attn.q.b"] * scale
    return v


def pad_mlp(view: dict, arch, d_mlp: int) -> dict:
    return Transform({f"mlp.{i}": zero_pad(arch.d_mlp, d_mlp) for i in range(arch.n_layer)}).apply(view, arch)


def widen(view: dict, arch, d_model: int, n_head: int | None = None, d_mlp: int | None = None,
          o: torch.Tensor | None = None, d_head: int | None = None) -> tuple[dict, float]:
    """(wide canonical view, norm eps for the wide model). Head count defaults to the narrow model's; head size
    to d_model / n_head (HF GPT-2 and ViT need n_head·d_head = d_model), or to the narrow one's where the family
    cannot pad heads (`arch.unsupported["rectangular-heads"]`: padded heads would need padded key/value groups) or
    their size (`"rectangular-head-size"`: RoPE frequencies depend on the head size; more heads of the same size are
    zero heads, which is exact)."""
    n_head = n_head or arch.n_head
    fixed_heads = arch.unsupported.get("rectangular-heads")
    fixed_size = fixed_heads or arch.unsupported.get("rectangular-head-size")
    if fixed_size and not fixed_heads and d_head is None:
        n_head = n_head if n_head != arch.n_head or d_model == arch.d_model else d_model // arch.d_head
    d_head = d_head or (arch.d_head if fixed_size else d_model // n_head)
    if not fixed_heads and n_head * d_head != d_model:
        raise ValueError(f"d_model {d_model} is not n_head {n_head} × d_head {d_head}")
    if d_model < arch.d_model or n_head < arch.n_head or d_head < arch.d_head or (d_mlp or arch.d_mlp) < arch.d_mlp:
        raise ValueError("widen only grows widths; for a narrower target swap the models")
    if (fixed_heads and (n_head, d_head) != (arch.n_head, arch.d_head)) or (fixed_size and d_head != arch.d_head):
        what = "residual and MLP widths can differ" if fixed_heads else "the head count can grow"
        raise UnsupportedModel(f"cannot widen the heads of this {arch.family} model ({arch.n_head} × {arch.d_head} → "
                               f"{n_head} × {d_head}): {fixed_size}; {what}")
    o = residual_embedding(arch, d_model) if o is None else o
    v = embed_residual(view, arch, o)
    if (n_head, d_head) != (arch.n_head, arch.d_head):
        v = pad_heads(v, arch, n_head, d_head)
    if d_mlp and d_mlp != arch.d_mlp:
        v = pad_mlp(v, arch, d_mlp)
    return v, arch.ln_eps * arch.d_model / d_model

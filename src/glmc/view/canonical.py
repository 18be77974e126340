"""Canonicalisation: make a model's residual stream rotation-ready without changing its function.

1. Fold LayerNorm gains γ (and biases β, where the reader has a bias) into the layers that read the norm:
   W ← W·diag(γ) (residual axis last), b ← b + W·β; then γ = 1, β = 0. A reader without bias (GPT-2's LM
   head) keeps β as the norm's bias (γ is still folded).
2. Fold LayerScale (timm ls1/ls2) into the writer it scales.
3. LayerNorm models only (arch.centred_stream): mean-centre every residual writer (last axis): every reader sees
   the stream through a LayerNorm, which subtracts the mean anyway, so the function is unchanged and the stream
   becomes mean-zero. An RMS norm does not subtract the mean, so its writers stay as they are.
What is folded follows the declared norms (Arch.norms, glmc/symmetry/declarations.py): norms before a sublayer
("input") fold their gain (w, or 1 + w) into the readers behind them; per-head norms ("head") stay; norms on the
stream's coordinates ("stream": post-norm, an embedding norm; "output": sandwich norms) stay too, with their gains
and biases, as residual tensors the residual map moves (glmc/symmetry/declarations.py). Writers are centred only when
every reader sees the stream through a mean-subtracting input norm (arch.centred_stream): a post-norm model's readers
see the stream itself, whose LayerNorm bias is not mean-zero. (Centring the writers of a post-norm model would keep
its function too, since a LayerNorm follows every writer, except where a tied decoder reads the token embedding; it
buys nothing, as the permutations it would prepare for fix the all-ones direction anyway.)
Family-agnostic: works on the canonical view only.
`inplace=True` replaces the tensors of the given dict one by one (each old tensor is freed as soon as its replacement
exists: one model-sized copy at the peak, not two), and products with a float32 weight are formed in float32 (a float32
product of float32 factors is the correctly rounded double product: the same bits without a float64 copy of an
embedding).
"""

from __future__ import annotations

import torch

from glmc.errors import UnsupportedModel
from glmc.memory import row_slices
from glmc.symmetry.declarations import residual_bound, standard_norms
from glmc.symmetry.kinds import kind
from glmc.symmetry.spec import WRITERS, expand_keys

# norm -> the readers behind it: (weight key, bias key or None)
NORM_READERS = {
    "blocks.{i}.ln1": [("blocks.{i}.attn.q.w", "blocks.{i}.attn.q.b"), ("blocks.{i}.attn.k.w", "blocks.{i}.attn.k.b"),
                       ("blocks.{i}.attn.v.w", "blocks.{i}.attn.v.b")],
    "blocks.{i}.ln2": [("blocks.{i}.mlp.in.w", "blocks.{i}.mlp.in.b"),
                       ("blocks.{i}.mlp.gate.w", "blocks.{i}.mlp.gate.b")],  # a gated MLP's gate reads it too
    "ln_final": [("head.w", "head.b")],
}
LAYER_SCALE = {"blocks.{i}.ls1": ("blocks.{i}.attn.o.w", "blocks.{i}.attn.o.b"),
               "blocks.{i}.ls2": ("blocks.{i}.mlp.out.w", "blocks.{i}.mlp.out.b")}


def fold_norms(view: dict, n_layer: int, inplace: bool = False, norms: dict | None = None) -> dict:
    """Fold every declared "input" norm (default: the standard pre-norm stack) into its readers."""
    v = view if inplace else dict(view)
    for norm_t, spec in (standard_norms() if norms is None else norms).items():
        if spec.placement != "input" or spec.gain is None:
            continue  # per-head norms stay; a norm without parameters has nothing to fold
        if norm_t not in NORM_READERS:
            raise UnsupportedModel(f"no readers known for a norm at {norm_t!r} (known: {', '.join(NORM_READERS)})")
        readers_t = NORM_READERS[norm_t]
        for i in range(n_layer) if "{i}" in norm_t else [None]:
            norm = norm_t.format(i=i)
            gamma = v[norm + ".w"].double() + spec.offset
            beta = v[norm + ".b"].double() if norm + ".b" in v else torch.zeros_like(gamma)
            # readers the model lacks (the gate of an ungated MLP) do not count
            readers = [(w.format(i=i), b.format(i=i)) for w, b in readers_t if w.format(i=i) in v]
            keep_beta = any(b not in v for _, b in readers)
            for wk, bk in readers:
                w = v[wk]
                if bk in v and not keep_beta:
                    v[bk] = (v[bk].double() + w.double() @ beta).to(v[bk].dtype)
                v[wk] = w * gamma.to(w.dtype) if w.dtype == torch.float32 else (w.double() * gamma).to(w.dtype)
                del w
            v[norm + ".w"] = torch.full_like(v[norm + ".w"], spec.identity_gain)
            if norm + ".b" in v:  # an RMS norm has none
                v[norm + ".b"] = (beta / gamma).to(v[norm + ".b"].dtype) if keep_beta else torch.zeros_like(beta).to(
                    v[norm + ".b"].dtype)
    return v


def fold_layer_scale(view: dict, n_layer: int, inplace: bool = False) -> dict:
    v = view if inplace else dict(view)
    for ls_t, (w_t, b_t) in LAYER_SCALE.items():
        for i in range(n_layer):
            ls = ls_t.format(i=i)
            if ls in v:
                s, w, b = v[ls], w_t.format(i=i), b_t.format(i=i)
                v[w] = v[w] * s
                if b in v:  # absent when the writer has no bias (timm proj_bias=False)
                    v[b] = v[b] * s
                v[ls] = torch.ones_like(s)
    return v


def centre_writers(view: dict, n_layer: int, inplace: bool = False) -> dict:
    v = view if inplace else dict(view)
    for k in expand_keys(WRITERS, n_layer, v):
        x = v[k]
        mean = _row_means(x)
        v[k] = x - mean.to(x.dtype) if x.dtype == torch.float32 else (x.double() - mean).to(x.dtype)
        del x
    return v


def _row_means(x: torch.Tensor, rows_elements: int = 1 << 21) -> torch.Tensor:
    """x.mean(-1, keepdim=True) in float64, a slice of rows at a time: an embedding gets no float64 copy."""
    flat = x.reshape(-1, x.shape[-1])
    means = [flat[rows].mean(-1, keepdim=True, dtype=torch.float64) for rows in row_slices(*flat.shape, rows_elements)]
    return torch.cat(means).reshape(*x.shape[:-1], 1)


def check_norms(norms: dict, groups: dict | None = None) -> None:
    """Refuse, by name, mixed centring, and a declared residual group larger than the norms on residual coordinates
    allow (glmc/symmetry/declarations.py: those keep their gains and biases, which only (signed) permutations move)."""
    kinds = {spec.kind for spec in norms.values() if spec.placement == "input"}
    if len(kinds) > 1:
        raise UnsupportedModel(f"the norms before the sublayers mix kinds ({', '.join(sorted(kinds))}): writers can be "
                               "mean-centred only when every reader subtracts the mean")
    bound = residual_bound(norms)
    residual = (groups or {}).get("residual")
    if bound is not None and residual is not None and not kind(bound).admits(residual.kind):
        on = sorted(name for name, spec in norms.items() if spec.on_stream)
        raise UnsupportedModel(f"the residual group is declared {residual.kind}, but the norms {', '.join(on)} keep "
                               f"their gains on the stream's coordinates, which leaves only {bound} maps exact")


def canonicalise(view: dict, arch, inplace: bool = False) -> dict:
    check_norms(arch.norms, arch.groups)
    # after the first fold `v` is a dict of our own (or the caller's, inplace): the later folds replace entries
    v = fold_norms(fold_layer_scale(view, arch.n_layer, inplace), arch.n_layer, inplace=True, norms=arch.norms)
    return centre_writers(v, arch.n_layer, inplace=True) if arch.centred_stream else v


def is_canonical(view: dict, arch, atol: float = 1e-5) -> bool:
    """Folded norm gains are at identity, LayerScale is folded and (LayerNorm models) every writer is mean-centred."""
    n_layer = arch.n_layer
    for norm_t, spec in arch.norms.items():
        if spec.placement != "input" or spec.gain is None:
            continue
        for k in expand_keys([norm_t + ".w"], n_layer, view):
            if not torch.all(view[k] == spec.identity_gain):
                return False
    for k, t in view.items():
        if k.endswith(("ls1", "ls2")) and not torch.all(t == 1):
            return False
    for k in expand_keys(WRITERS, n_layer, view) if arch.centred_stream else []:
        if view[k].double().mean(-1).abs().max() > atol * max(1.0, float(view[k].abs().max())):
            return False
    return True

"""The null-space freedom of an embedded (narrower) model, used to bring it closer to the wide one.

A narrow model embedded into a wider architecture (glmc/view/widen.py) never puts anything into most of the wide
space: its residual stream stays in an N-dimensional subspace S, the padded dimensions of each head carry
nothing, padded MLP units have zero output weights. Whatever its *readers* hold in those places is multiplied
by zero, so they are free: any value there leaves the embedded model's function exactly unchanged.
Zero-padding picks 0, the value furthest from any trained wide model. Filling them with the wide model's
weights (the least-squares choice, Δ = A − B projected onto the free set) is an exact reparametrisation of B
that removes that distance, and in learned matching it is applied inside every step, so the latents are
trained for the filled path.

The free set, for B's canonical view (S: span of B's residual writes; P_S, P_⊥ the projectors):
  q.w, head.w    Δ·P_⊥                       (rows reading directions B never writes)
  k.w            Δ·P_⊥ + Π_K·Δ·P_S          Π_K: key dimensions B's queries never use (Q·Π_K = 0)
  v.w            Δ·P_⊥ + Π_V·Δ·P_S          Π_V: value dimensions B's output map drops (Π_V·O = 0)
  k.b, v.b       Π_K·Δb, Π_V·Δb
  mlp.in.w, .b   Δ·P_⊥ + m⊙Δ·P_S, m⊙Δb       m: units with zero output weights (a gate like mlp.in.w)
(Only keys or queries can take the free dimensions, not both: keys do. Under grouped-query attention a key or
value dimension is free only where all the query heads of its group leave it.) The free directions are found once,
on the embedded view, and carried through the symmetry transform as "probes": tensors the spec moves like the
real ones (S like a writer, Π_K's directions like K, Π_V's like V, m like an MLP bias), so the fill stays
exact, and differentiable, for any transform.
"""

from __future__ import annotations

import torch

from glmc.symmetry.spec import NORM_BIASES, WRITERS, expand_keys, split_name
from glmc.symmetry.structure import STREAM
from glmc.symmetry.transform import apply_elements

RELATIVE_RANK_TOL = 1e-9  # eigenvalues of B's residual-write Gram matrix below this (× the largest) are null


def free_probes(view: dict, n_layer: int) -> dict:
    """The free directions of B's canonical view, as probe tensors keyed like the tensors they move with."""
    keys = expand_keys(WRITERS + NORM_BIASES, n_layer, view)
    d = view[keys[0]].shape[-1]
    writes = [view[k].double().reshape(-1, d) for k in keys]
    ev, vecs = torch.linalg.eigh(sum(w.T @ w for w in writes))
    basis = vecs[:, ev > RELATIVE_RANK_TOL * ev.max()].T  # [r, d], orthonormal rows spanning S
    probes = {keys[0]: basis.to(view[keys[0]].dtype)}  # keyed as a writer, so the residual map moves it as one
    for i in range(n_layer):
        p = f"blocks.{i}."
        q, o, n_kv = view[p + "attn.q.w"], view[p + "attn.o.w"], view[p + "attn.k.w"].shape[0]  # [H, dh, d]

        def unused(w, n_kv=n_kv):  # dims no query head of a key/value group uses: [H_kv, dh]
            return (w.abs().sum(-1) == 0).reshape(n_kv, -1, w.shape[1]).all(1).float()

        probes[p + "attn.k.w"] = torch.diag_embed(unused(q))  # key dims no query reads
        probes[p + "attn.v.w"] = torch.diag_embed(unused(o))  # value dims every O drops
        probes[p + "mlp.in.b"] = (view[p + "mlp.out.w"].abs().sum(-1) == 0).float()
    return probes


def filled_keys(view: dict, n_layer: int, head: bool = True) -> list[str]:
    """The tensors `fill` changes."""
    keys = expand_keys([f"blocks.{{i}}.{k}" for k in ("attn.q.w", "attn.k.w", "attn.v.w", "attn.k.b", "attn.v.b",
                                                     "mlp.in.w", "mlp.in.b", "mlp.gate.w")], n_layer, view)
    return keys + (["head.w"] if head and "head.w" in view else [])


def residual_probe(probes: dict) -> str:
    return next(k for k in probes if k in WRITERS)


def split_probes(probes: dict) -> tuple[dict, dict]:
    """(the residual probe, the others): each part moves with its own groups (see split_groups)."""
    key = residual_probe(probes)
    return {key: probes[key]}, {k: v for k, v in probes.items() if k != key}


def has_freedom(probes: dict) -> bool:
    res, rest = split_probes(probes)
    (basis,) = res.values()
    return basis.shape[0] < basis.shape[1] - 1 or any(float(v.sum()) > 0 for v in rest.values())


def split_groups(elements: dict) -> tuple[dict, dict]:
    """(residual part, everything else) of a transform's elements or dense matrices: the residual probe moves with
    the residual map only, the others with the head and MLP maps only (their last axis is not the residual)."""
    def residual(name):
        return split_name(name)[0] == STREAM

    return ({k: v for k, v in elements.items() if residual(k)}, {k: v for k, v in elements.items() if not residual(k)})


def move_probes(probes: dict, elements: dict, apply) -> dict:
    """The probes moved by a transform's elements (group matrices or group elements): the residual probe by the
    residual map alone, the others by the head and MLP maps. `apply(view, elements)` applies a subset."""
    (res, rest), (residual, others) = split_groups(elements), split_probes(probes)
    return {**(apply(residual, res) if res else residual), **(apply(others, rest) if rest else others)}


def moved_probes(probes: dict, transform, arch) -> dict:
    """The probes moved by a Transform."""
    return move_probes(probes, transform.elements, lambda view, part: apply_elements(view, part, arch, strict=False))


def _range_projector(f: torch.Tensor) -> torch.Tensor:
    """Orthogonal projector onto the column space of f [..., n, n] whose all-zero columns are ignored."""
    unused = (f.abs().sum(-2) == 0).to(f.dtype)
    gram = f.transpose(-1, -2) @ f + torch.diag_embed(unused)
    return f @ torch.linalg.solve(gram, f.transpose(-1, -2))


def fill(view_a: dict, view_b: dict, probes: dict, n_layer: int, head: bool = True) -> dict:
    """B's view with its free reader weights set to A's (least squares); `probes` already moved with B's
    transform. Differentiable in view_b and the probes."""
    u = probes[residual_probe(probes)]
    p_s = u.T @ torch.linalg.solve(u @ u.T, u)
    p_perp = torch.eye(p_s.shape[0], dtype=p_s.dtype, device=p_s.device) - p_s
    out = dict(view_b)

    def delta(k):
        return view_a[k].to(view_b[k]) - view_b[k]

    def plus(k, change):
        out[k] = view_b[k] + change

    for i in range(n_layer):
        p = f"blocks.{i}."
        plus(p + "attn.q.w", delta(p + "attn.q.w") @ p_perp)
        for x in "kv":
            pi = _range_projector(probes[p + f"attn.{x}.w"])
            dw = delta(p + f"attn.{x}.w")
            plus(p + f"attn.{x}.w", dw @ p_perp + pi @ dw @ p_s)
            if p + f"attn.{x}.b" in view_b:
                plus(p + f"attn.{x}.b", (pi @ delta(p + f"attn.{x}.b").unsqueeze(-1)).squeeze(-1))
        m = probes[p + "mlp.in.b"]
        for w in ("mlp.in.w", "mlp.gate.w"):  # a gated MLP's gate reads the stream like its up projection
            if p + w in view_b:
                dw = delta(p + w)
                plus(p + w, dw @ p_perp + m[:, None] * (dw @ p_s))
        if p + "mlp.in.b" in view_b:  # absent in bias-free MLPs
            plus(p + "mlp.in.b", m * delta(p + "mlp.in.b"))
    if head and "head.w" in view_b:
        plus("head.w", delta("head.w") @ p_perp)
    return out


def fill_exact(target: dict, view: dict, probes: dict, transform, arch) -> tuple[dict, dict]:
    """(filled view, what was added: key -> tensor) for B's transformed view and its untransformed probes; computed
    in double, where the projectors leave B's function unchanged to ~1e-6 instead of ~1e-4 in float32."""
    double = lambda v: {k: t.double() for k, t in v.items()}  # noqa: E731
    out = fill(double(target), double(view), double(moved_probes(probes, transform, arch)), arch.n_layer)
    out = {k: t.to(view[k].dtype) for k, t in out.items()}
    return out, {k: out[k] - view[k] for k in out if not torch.equal(out[k], view[k])}


def save_fill(added: dict, path) -> None:
    """What `fill_exact` added, as safetensors (canonical key -> tensor added after the transform)."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in added.items()}, str(path))

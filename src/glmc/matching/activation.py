"""Activation matching (correlation baseline, after Verma & Elbayad 2024), in the native architecture.

Both models are canonicalised, run on the same training batches, and matched by Pearson correlation:
  residual   one global map from the residual stream after every block: a permutation on the summed
             correlations (the baseline's), or, with `residual` naming the model's residual group, its nearest
             element to the summed cross second moments E[x_B x_Aᵀ] (each block's scaled to unit weight): the
             orthogonal map that best carries B's stream onto A's in least squares (DEFAULT_RESIDUAL); a
             discrete global sign (±P after post-LN) is not decided by the moments (the LayerNorm biases' means
             dominate them, and the sign they gave was wrong on a trained pair, docs/encoders.md): the nearest
             element of each sign is formed and the one that brings B's weights closer to A's is kept (exact
             for a planted symmetry, and on trained pairs the sign their path midpoints prefer too);
  heads      per layer, heads by linear assignment on the best within-head matching of per-head outputs
             (the value side, z_h = softmax(·)·V_h), and the dimensions inside each head by that matching
             (an OV map that is a permutation); under grouped-query attention, key/value groups and the query
             heads inside them on the same scores (assignments.grouped_assignment), and one dimension permutation
             per key/value head from the summed correlations of its matched query heads (they share V);
  MLP units  per layer, linear assignment on the hidden activations' correlations.
Everything found is an exact symmetry, so B′ keeps B's function.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from glmc.adapters import forward
from glmc.errors import BadOption, UnsupportedModel
from glmc.matching.assignments import assignment, grouped_assignment
from glmc.matching.common import canonical_pair, finish
from glmc.matching.nullspace import free_probes
from glmc.matching.residual_fit import residual_kind, streamed_distance
from glmc.models.evaluate import model_device
from glmc.options import ActivationOptions
from glmc.symmetry.elements import IndexMap, LinearMap
from glmc.symmetry.kinds import kind
from glmc.symmetry.spec import group_name
from glmc.symmetry.structure import STREAM, structure
from glmc.symmetry.transform import Transform

# decision D8. "orthogonal" names whatever residual group the model declares.
DEFAULT_RESIDUAL = ActivationOptions.residual


class Correlation:
    """Running Pearson correlation between two feature sets (rows are samples)."""

    def __init__(self):
        self.n, self.sx, self.sy, self.sxx, self.syy, self.sxy = 0, 0, 0, 0, 0, 0

    def add(self, x: torch.Tensor, y: torch.Tensor):
        x, y = x.reshape(-1, x.shape[-1]).double().cpu(), y.reshape(-1, y.shape[-1]).double().cpu()
        self.n += x.shape[0]
        self.sx, self.sy = self.sx + x.sum(0), self.sy + y.sum(0)
        self.sxx, self.syy = self.sxx + (x * x).sum(0), self.syy + (y * y).sum(0)
        self.sxy = self.sxy + x.T @ y

    def value(self) -> torch.Tensor:
        mx, my = self.sx / self.n, self.sy / self.n
        cov = self.sxy / self.n - torch.outer(mx, my)
        sdx = (self.sxx / self.n - mx * mx).clamp_min(1e-12).sqrt()
        sdy = (self.syy / self.n - my * my).clamp_min(1e-12).sqrt()
        return cov / torch.outer(sdx, sdy)

    def cross_moment(self) -> torch.Tensor:
        """E[y xᵀ] [d_y, d_x], scaled by 1 / sqrt(E‖x‖² E‖y‖²) so that every layer weighs the same."""
        scale = (self.sxx.sum() * self.syy.sum()).sqrt().clamp_min(1e-300)
        return self.sxy.T / scale


def _record(adapter, model, store: dict):
    hooks = []
    for name, module in adapter.hook_modules(model).items():
        if name.endswith((".attn.o", ".mlp.out")):
            hooks.append(module.register_forward_pre_hook(lambda m, args, n=name: store.__setitem__(n, args[0])))
        else:
            hooks.append(module.register_forward_hook(
                lambda m, args, out, n=name: store.__setitem__(n, out[0] if isinstance(out, tuple) else out)))
    return hooks


@torch.no_grad()
def correlations(adapter, model_a, model_b, batches) -> dict[str, Correlation]:
    acts_a, acts_b, corr = {}, {}, {}
    hooks = _record(adapter, model_a, acts_a) + _record(adapter, model_b, acts_b)
    try:
        for batch in batches:
            for model in (model_a, model_b):
                forward(model, {k: v.to(model_device(model)) for k, v in batch.items()})
            for name in acts_a:
                corr.setdefault(name, Correlation()).add(acts_a[name], acts_b[name])
    finally:
        for h in hooks:
            h.remove()
    return corr


def _block_scores(c: torch.Tensor, n_head: int):
    """Per head pair of the [H·dh, H·dh] output correlations: (blocks [h_a, h_b, dh, dh], score of their best
    dimension matching [h_a, h_b])."""
    dh = c.shape[0] // n_head
    blocks = c.reshape(n_head, dh, n_head, dh).permute(0, 2, 1, 3)
    score = torch.zeros(n_head, n_head, dtype=torch.float64)
    for h in range(n_head):
        for j in range(n_head):
            score[h, j] = blocks[h, j][torch.arange(dh), assignment(blocks[h, j]).src].sum()
    return blocks, score


def _dim_maps(blocks: torch.Tensor, src: torch.Tensor, r: int) -> LinearMap:
    """One value-dimension permutation per group of r query heads (they share a value head), on the summed
    correlations of the group's matched head pairs; v ↦ v·P: new dim k takes old dim src[k]."""
    n, dh = blocks.shape[0] // r, blocks.shape[-1]
    mats = torch.zeros(n, dh, dh)
    for g in range(n):
        total = sum(blocks[h, int(src[h])] for h in range(g * r, (g + 1) * r))
        mats[g, assignment(total).src, torch.arange(dh)] = 1.0
    return LinearMap(mats)


def match_heads_by_outputs(c: torch.Tensor, n_head: int) -> tuple[IndexMap, LinearMap]:
    """c: correlations of concatenated head outputs [H·dh, H·dh] → (head permutation, per-head dim permutation)."""
    blocks, score = _block_scores(c, n_head)
    heads = assignment(score)
    return heads, _dim_maps(blocks, heads.src, 1)


def match_grouped_heads_by_outputs(c: torch.Tensor, n_head: int, n_kv: int):
    """Grouped-query attention: (key/value-group permutation, query permutation inside the groups, one value
    dimension permutation per key/value head), from the query heads' output correlations."""
    blocks, score = _block_scores(c, n_head)
    groups, query = grouped_assignment(score, n_head // n_kv)
    total = groups._shared(n_head)[0][query.src]  # the B head each position takes
    return groups, query, _dim_maps(blocks, total, n_head // n_kv)


def align(model_a, model_b, options: ActivationOptions | None = None, *, data=None, fill: bool = False):
    """Activation matching on `train_batches` training batches of `train_batch_size` from `data` (module docstring;
    `options`, an ActivationOptions of glmc/options.py, arrives whole); `fill`: an embedded narrower B's free
    reader weights are filled with A's (glmc/matching/nullspace.py); `residual`: "permutation" (the correlation
    baseline) or the model's residual group ("orthogonal"; None: DEFAULT_RESIDUAL)."""
    o = options if options is not None else ActivationOptions()
    train_batches, train_batch_size, progress, residual = o.train_batches, o.train_batch_size, o.progress, o.residual
    if data is None:
        raise ValueError("activation matching needs data (the models' glmc.json or --data)")
    if train_batches < 1:
        raise BadOption(f"activation matching needs at least 1 batch, got {train_batches}")
    adapter, arch, view_a, view_b = canonical_pair(model_a, model_b)
    residual = DEFAULT_RESIDUAL if residual is None else residual
    res_kind = "permutation" if residual == "permutation" else residual_kind(arch, residual)
    _check_kinds(arch, res_kind)
    canon_a = adapter.from_canonical(view_a, model_a).to(model_device(model_a)).eval()
    canon_b = adapter.from_canonical(view_b, model_b).to(model_device(model_a)).eval()
    train = list(tqdm(data.batches("train", train_batch_size, max_batches=train_batches, seed=0, shuffle=False),
                      desc="activations", disable=not progress, leave=False, total=train_batches))
    corr = correlations(adapter, canon_a, canon_b, train)
    inner = Transform()
    declared = structure(arch.groups)
    heads, units = declared.heads, declared.units
    for i in range(arch.n_layer):
        found = {}
        if heads is not None:  # the hook on the output projection reads the heads' concatenated outputs
            out = corr[heads.factors(i)[3]].value()
            if heads.within is None and heads.size == arch.n_head:
                order, dims = match_heads_by_outputs(out, arch.n_head)
                found = {heads.order: order, heads.value_maps: dims}
            else:
                order, within, dims = match_grouped_heads_by_outputs(out, arch.n_head, heads.size)
                found = {heads.order: order, heads.within: within, heads.value_maps: dims}
        if units is not None:  # the hook on the down projection reads the hidden units
            found[units.order] = assignment(corr[units.prefixes(i)[1]].value())
        inner.elements.update({group_name(role, i): e for role, e in found.items() if role in arch.groups})
    if res_kind == "permutation":
        candidates = [assignment(sum(corr[f"blocks.{i}"].value() for i in range(arch.n_layer)))]
    else:
        moments = sum(corr[f"blocks.{i}"].cross_moment() for i in range(arch.n_layer))
        candidates = kind(res_kind).nearest_per_sign(moments)
    transforms = [Transform({STREAM: res, **inner.elements}) for res in candidates]
    signs = None
    if len(transforms) > 1:  # a global sign (±P after post-LN): decided by the weights, not the moments
        distances = [streamed_distance(view_a, view_b, t.elements, arch) for t in transforms]
        signs = {"weight_distance": dict(zip(("+", "-"), distances))}
        transforms = [transforms[min(range(len(distances)), key=distances.__getitem__)]]
    t = transforms[0]
    report = {"method": "activation", "batches": len(train), "residual": res_kind, "transform": t.describe()}
    if signs:
        report["global_sign"] = signs
    probes = free_probes(view_b, arch.n_layer) if fill else None
    return finish(model_a, model_b, adapter, arch, view_a, view_b, t, report, probes=probes)


def _check_kinds(arch, res_kind: str) -> None:
    """Activation matching finds permutations (and the residual kind asked for); each group must admit them."""
    found = structure(arch.groups)
    heads = (found.heads.order, found.heads.value_maps) if found.heads else ()
    roles = heads + ((found.units.order,) if found.units else ()) + ((STREAM,) if res_kind == "permutation"
                                                                   else ())
    for role in roles:  # the order inside key/value groups: grouped by construction
        spec = arch.groups.get(role)
        if spec is not None and not spec.group().admits("permutation") and "permutation" not in spec.subgroups:
            raise UnsupportedModel(f"activation matching finds permutations, which the {spec.kind} {role} group of "
                                   f"this {arch.family} model does not contain")

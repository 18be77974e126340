"""Which canonical tensor axes each symmetry group acts on, and how — as data.

The canonical view (see glmc/adapters/base.py) stores every matrix that touches the residual stream with the
residual axis LAST, and attention weights per head as [n_heads, d_head, d_model] (Q, K, V and O alike). With
that layout a residual map acts on the last axis of every such tensor: writers "co" (x·O), readers "contra"
(x·O^-T, which is x·O for orthogonal O).

Rows: (group, key template, axis, mode, batch axis). `{i}` ranges over blocks. Keys a model lacks (e.g. the
patch projection of a GPT-2) are skipped. Groups:
  residual   the residual stream (orthogonal fixing 1; rectangular for narrow→wide; permutation)
  heads.{i}  the order of heads in block i (permutation; semi-permutation splits OV, copies QK)
  qk.{i}     per-head invertible A on the query/key dimension (batched over heads)
  ov.{i}     per-head invertible B on the value/output dimension (batched over heads)
  mlp.{i}    hidden units of block i's MLP (permutation; semi-permutation for ReLU)
"""

from __future__ import annotations

from dataclasses import dataclass

WRITERS = ["embed", "pos_embed", "patch.w", "patch.b", "cls", "registers",
           "blocks.{i}.attn.o.w", "blocks.{i}.attn.o.b", "blocks.{i}.mlp.out.w", "blocks.{i}.mlp.out.b"]
READERS = ["blocks.{i}.attn.q.w", "blocks.{i}.attn.k.w", "blocks.{i}.attn.v.w", "blocks.{i}.mlp.in.w", "head.w"]
# LayerNorm biases live in the residual space; after canonicalisation only those whose reader has no bias
# (GPT-2's final norm before the bias-free LM head) are non-zero.
NORM_BIASES = ["blocks.{i}.ln1.b", "blocks.{i}.ln2.b", "ln_final.b"]

SPEC = (
    [("residual", k, -1, "co", None) for k in WRITERS + NORM_BIASES]
    + [("residual", k, -1, "contra", None) for k in READERS]
    + [("heads.{i}", f"blocks.{{i}}.attn.{p}.{w}", 0, "copy", None) for p in "qk" for w in "wb"]
    + [("heads.{i}", f"blocks.{{i}}.attn.v.{w}", 0, "co", None) for w in "wb"]
    + [("heads.{i}", "blocks.{i}.attn.o.w", 0, "contra", None)]
    + [("qk.{i}", f"blocks.{{i}}.attn.q.{w}", 1, "co", 0) for w in "wb"]
    + [("qk.{i}", f"blocks.{{i}}.attn.k.{w}", 1, "contra", 0) for w in "wb"]
    + [("ov.{i}", f"blocks.{{i}}.attn.v.{w}", 1, "co", 0) for w in "wb"]
    + [("ov.{i}", "blocks.{i}.attn.o.w", 1, "contra", 0)]
    + [("mlp.{i}", "blocks.{i}.mlp.in.w", 0, "co", None),
       ("mlp.{i}", "blocks.{i}.mlp.in.b", 0, "co", None),
       ("mlp.{i}", "blocks.{i}.mlp.out.w", 0, "contra", None)]
)

# Order in which a Transform applies its groups. Per-head maps come after the head permutation, so qk.{i}[h]
# is the map of the head that ends up at position h.
GROUP_ORDER = ("residual", "heads", "qk", "ov", "mlp")


@dataclass(frozen=True)
class Action:
    group: str
    key: str
    axis: int
    mode: str
    batch_axis: int | None


def actions(n_layer: int, keys) -> dict[str, list[Action]]:
    """The spec instantiated for a model: group name -> actions on the keys it has."""
    keys = set(keys)
    out: dict[str, list[Action]] = {}
    for group, key, axis, mode, batch in SPEC:
        layers = range(n_layer) if "{i}" in group or "{i}" in key else [None]
        for i in layers:
            k = key.format(i=i)
            if k in keys:
                g = group.format(i=i)
                out.setdefault(g, []).append(Action(g, k, axis, mode, batch))
    return out


def expand_keys(templates, n_layer: int, keys=None) -> list[str]:
    """Key templates instantiated for every block ({i}), kept only if present in `keys` (when given)."""
    out = []
    for t in templates:
        for i in range(n_layer) if "{i}" in t else [None]:
            k = t.format(i=i)
            if keys is None or k in keys:
                out.append(k)
    return out


def group_rank(name: str) -> tuple:
    base, _, idx = name.partition(".")
    return (GROUP_ORDER.index(base), int(idx) if idx else -1)

"""Symmetry groups as data: what each group is (a `GroupSpec`, declared per model by its adapter's Arch) and
which canonical tensor axes it acts on, and how (`ROWS`).

The canonical view (see glmc/adapters/base.py) stores every matrix that touches the residual stream with the
residual axis LAST, and attention weights per head as [n_heads, d_head, d_model] (Q, K, V and O alike). With
that layout a residual map acts on the last axis of every such tensor: writers "co" (x·O), readers "contra"
(x·O^-T, which is x·O for orthogonal O).

Rows: (role, key template, axis, mode, batch axis). `{i}` ranges over blocks; a per-layer role has one group per
block, named "role.i" ("heads.3"). Keys a model lacks (the patch projection of a GPT-2, a bias of a bias-free
layer) are skipped. Roles:
  residual   the residual stream (one map for the whole model)
  heads      the order of heads in a block (a semi-permutation would split OV and copy QK, hence "copy")
  qk         per-head maps on the query/key dimension (batched over heads; they follow the head permutation)
  ov         per-head maps on the value/output dimension (likewise)
  mlp        hidden units of a block's MLP (gate, in = up, out = down together in a gated MLP)
  kv_heads   grouped-query attention: the order of key/value heads; query heads move with theirs, as blocks
  query_heads  grouped-query attention: the order of query heads inside each key/value group
  mlp_scale  a gated MLP's per-unit scale: s on mlp.in (up: weight and bias), 1/s on mlp.out (down); the gate
             (weight and bias) is left alone: silu(x·W_gate + b_gate) is not homogeneous
An adapter may add rows of its own to a role (GroupSpec.acts: the MLM head of an encoder, a pooler), and the
norms its declarations put on residual coordinates add theirs to the residual (glmc/symmetry/declarations.py).
A fifth mode, "gain", moves a norm's gain on residual coordinates: by the permutation part |S| of a signed
permutation S (glmc/symmetry/elements.py).
A batched map of b copies acting on a batch axis of b·r entries serves r consecutive entries with each copy:
one key/value head's map shared by its r query heads under grouped-query attention (see elements.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glmc.symmetry.kinds import kind

WRITERS = ["embed", "pos_embed", "type_embed", "patch.w", "patch.b", "cls", "registers",
           "blocks.{i}.attn.o.w", "blocks.{i}.attn.o.b", "blocks.{i}.mlp.out.w", "blocks.{i}.mlp.out.b"]
READERS = ["blocks.{i}.attn.q.w", "blocks.{i}.attn.k.w", "blocks.{i}.attn.v.w", "blocks.{i}.mlp.in.w", "head.w",
           "blocks.{i}.mlp.gate.w"]  # the gate of a gated (SwiGLU) MLP reads the stream like mlp.in
# LayerNorm biases live in the residual space; after canonicalisation only those whose reader has no bias
# (GPT-2's final norm before the bias-free LM head) are non-zero.
NORM_BIASES = ["blocks.{i}.ln1.b", "blocks.{i}.ln2.b", "ln_final.b"]

ROWS = (
    [("residual", k, -1, "co", None) for k in WRITERS + NORM_BIASES]
    + [("residual", k, -1, "contra", None) for k in READERS]
    + [("heads", f"blocks.{{i}}.attn.{p}.{w}", 0, "copy", None) for p in "qk" for w in "wb"]
    + [("heads", f"blocks.{{i}}.attn.v.{w}", 0, "co", None) for w in "wb"]
    + [("heads", "blocks.{i}.attn.o.w", 0, "contra", None)]
    + [("qk", f"blocks.{{i}}.attn.q.{w}", 1, "co", 0) for w in "wb"]
    + [("qk", f"blocks.{{i}}.attn.k.{w}", 1, "contra", 0) for w in "wb"]
    + [("ov", f"blocks.{{i}}.attn.v.{w}", 1, "co", 0) for w in "wb"]
    + [("ov", "blocks.{i}.attn.o.w", 1, "contra", 0)]
    + [("mlp", "blocks.{i}.mlp.in.w", 0, "co", None),
       ("mlp", "blocks.{i}.mlp.in.b", 0, "co", None),
       ("mlp", "blocks.{i}.mlp.out.w", 0, "contra", None),
       ("mlp", "blocks.{i}.mlp.gate.w", 0, "co", None),
       ("mlp", "blocks.{i}.mlp.gate.b", 0, "co", None)]
    # grouped-query attention: an index map of n_kv entries moves the r query heads of a group as a block
    + [("kv_heads", f"blocks.{{i}}.attn.{p}.{w}", 0, "copy", None) for p in "qk" for w in "wb"]
    + [("kv_heads", f"blocks.{{i}}.attn.v.{w}", 0, "co", None) for w in "wb"]
    + [("kv_heads", "blocks.{i}.attn.o.w", 0, "contra", None)]
    + [("query_heads", f"blocks.{{i}}.attn.q.{w}", 0, "copy", None) for w in "wb"]
    + [("query_heads", "blocks.{i}.attn.o.w", 0, "contra", None)]
    + [("mlp_scale", "blocks.{i}.mlp.in.w", 0, "co", None),
       ("mlp_scale", "blocks.{i}.mlp.in.b", 0, "co", None),
       ("mlp_scale", "blocks.{i}.mlp.out.w", 0, "contra", None)]
)


@dataclass(frozen=True)
class GroupSpec:
    """What one role's group is, for one model: declared by the adapter (glmc/adapters/base.py, Arch.groups)."""

    kind: str  # a name from glmc/symmetry/kinds/
    size: int
    batch: int | None = None  # independent copies (one map per head, or per key/value head)
    per_layer: bool = False
    follows: str | None = None  # role of the permutation that reorders this group's batch axis
    subgroups: tuple = ()  # kinds that may stand in for `kind` (the residual permutation of perm-only matching)
    extensions: tuple = ()  # non-invertible kinds that also keep the function (semi-permutation, zero-pad)
    # the kind's parameters (glmc/symmetry/kinds: Kind.parameters), e.g. {"rotary": 8} for a partial-rotary head
    params: dict = field(default_factory=dict, hash=False)
    # rows beyond ROWS this role acts on, declared by the adapter: (key template, axis, mode, batch axis)
    acts: tuple = ()

    def group(self, k: str | None = None):
        """The Kind that solves for this group: the declared kind with its parameters, or (`k`) one of its
        declared subgroups or extensions, which take no parameters."""
        return kind(self.kind, **self.params) if k is None or k == self.kind else kind(k)


def transformer_groups(d_model: int, n_head: int, d_head: int, d_mlp: int, relu: bool,
                       residual: str = "orthogonal-fixing-ones", drop=()) -> dict[str, GroupSpec]:
    """The groups of a pre-norm Transformer block stack (GPT-2, ViT), in the order transforms apply them: per-head
    maps come after the head permutation, so qk.i[h] is the map of the head that ends up at position h."""
    groups = {
        "residual": GroupSpec(residual, d_model, subgroups=("permutation",)),
        "heads": GroupSpec("permutation", n_head, per_layer=True),
        "qk": GroupSpec("invertible", d_head, batch=n_head, per_layer=True, follows="heads"),
        "ov": GroupSpec("invertible", d_head, batch=n_head, per_layer=True, follows="heads"),
        "mlp": GroupSpec("permutation", d_mlp, per_layer=True,
                         extensions=(("semi-permutation",) if relu else ()) + ("zero-pad",)),
    }
    return {role: g for role, g in groups.items() if role not in drop}


def role_rows(role: str, spec: GroupSpec) -> list:
    """ROWS of `role`, then the spec's own rows (GroupSpec.acts) on any (key, axis) ROWS does not already move."""
    rows = [row for row in ROWS if row[0] == role]
    seen = {(key, axis) for _, key, axis, _, _ in rows}
    return rows + [(role, *a) for a in spec.acts if (a[0], a[1]) not in seen]


@dataclass(frozen=True)
class Action:
    group: str
    key: str
    axis: int
    mode: str
    batch_axis: int | None


@dataclass
class Group:
    """One instance of a role's group in a model (e.g. "qk.2"), with the tensor axes it acts on."""

    name: str
    role: str
    layer: int | None
    spec: GroupSpec
    actions: list = field(default_factory=list)


def group_name(role: str, layer: int | None) -> str:
    return role if layer is None else f"{role}.{layer}"


def split_name(name: str) -> tuple[str, int | None]:
    role, _, layer = name.partition(".")
    return role, (int(layer) if layer else None)


def instantiate(groups: dict[str, GroupSpec], n_layer: int, keys) -> dict[str, Group]:
    """Every group of a model (name → Group), in application order, with the actions on the keys it has."""
    keys = set(keys)
    out: dict[str, Group] = {}
    for role, spec in groups.items():
        rows = role_rows(role, spec)
        for i in range(n_layer) if spec.per_layer else [None]:
            name = group_name(role, i)
            # a per-layer group acts on its own block's tensors; a model-wide one on every block's
            layers = [i] if spec.per_layer else range(n_layer)
            acts = [Action(name, k, axis, mode, batch) for _, key, axis, mode, batch in rows
                    for k in dict.fromkeys(key.format(i=j) for j in layers) if k in keys]
            if acts:
                out[name] = Group(name, role, i, spec, acts)
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

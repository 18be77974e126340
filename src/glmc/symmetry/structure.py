"""What the matchers solve in a block, read off the declared groups (their kinds, rows and `follows`), never off
their role names: weight, activation and the paper's matching ask `structure(arch.groups)` which group orders a
block's heads, which per-head maps and unit scales follow it, and which tensors each moves. A new attention or MLP
layout is then a declaration (glmc/symmetry/spec.py rows, GroupSpec.acts), not an edit of three matchers.

The one role named here is the residual stream's, STREAM: the model-wide group every writer and reader shares, the
anchor of every transform (glmc/symmetry/spec.py). The rest is recognised by what it does:
  head order   a per-layer group following none that moves some tensors by "copy" (the same index map on the
               query and key heads, which a split would break): its copy rows name the query then the key
               projection, its "co" row the value, its "contra" row the output (bias-augmented factors, in that order)
  within       a per-layer group following the head order and acting on the head axis (axis 0) with no batch axis:
               the order of query heads inside each key/value group (grouped-query attention); heads per group is
               n_head / the head order's size
  head maps    per-layer groups following the head order that act on a head's own dimensions (a batch axis): the
               score maps move tensors the head order copies (query "co", key "contra"), the value maps the others
               (value "co", output "contra")
  units        a per-layer group following none, copying nothing, acting on axis 0 of tensors it moves "co" (read
               the stream: up, and a gate) and "contra" (write it: down)
  unit scale   a per-layer group following the units: the "co" tensors it moves are the up projection, those it
               leaves are the gate (not homogeneous, so no scale reaches it)
Every other declared group (an encoder's MLM-head units, a pooler, a second attention) is `own`: solved from its
rows alone (glmc/matching/declared.py). Tensors are given as canonical prefixes with "{i}" for the block
("blocks.{i}.attn.q"; the weight is prefix + ".w", its bias prefix + ".b").
"""

from __future__ import annotations

from dataclasses import dataclass

from glmc.symmetry.spec import role_rows

STREAM = "residual"  # the model-wide residual-stream group's role (glmc/symmetry/spec.py ROWS)


@dataclass(frozen=True)
class Heads:
    """A block's attention heads as the declarations give them (module docstring)."""

    order: str  # role of the head order (one element per block)
    size: int  # entries of the head order: heads, or key/value heads under grouped-query attention
    query: str
    key: str
    value: str
    output: str
    within: str | None = None  # role of the query order inside each key/value group
    score_maps: str | None = None  # role of the per-head maps on the query/key side
    value_maps: str | None = None  # role of the per-head maps on the value/output side

    @property
    def maps(self) -> tuple[str, ...]:
        return tuple(r for r in (self.score_maps, self.value_maps) if r is not None)

    def factors(self, i: int) -> tuple[str, str, str, str]:
        """Block i's query, key, value and output prefixes."""
        return tuple(p.format(i=i) for p in (self.query, self.key, self.value, self.output))

    def map_sides(self, role: str) -> tuple[int, int]:
        """Which factors (indices into factors()) the per-head maps `role` move "co" and "contra"."""
        return (0, 1) if role == self.score_maps else (2, 3)


@dataclass(frozen=True)
class Units:
    """A block's MLP units as the declarations give them (module docstring)."""

    order: str  # role of the unit permutation
    up: str  # the "co" tensor a unit scale moves (the only one without a gate)
    down: str  # the "contra" tensor
    gate: str | None = None  # a "co" tensor no unit scale reaches
    scale: str | None = None  # role of the per-unit scale

    def prefixes(self, i: int) -> tuple[str, str, str | None]:
        """Block i's up, down and gate prefixes."""
        return self.up.format(i=i), self.down.format(i=i), None if self.gate is None else self.gate.format(i=i)


@dataclass(frozen=True)
class Structure:
    heads: Heads | None
    units: Units | None
    own: tuple[str, ...]  # declared roles solved from their rows alone (glmc/matching/declared.py)

    @property
    def plain_heads(self) -> bool:
        """Whether a block's heads are ordered one by one (no grouped-query attention)."""
        return self.heads is not None and self.heads.within is None


def _prefix(key: str) -> str:
    return key[:-2] if key.endswith((".w", ".b")) else key


def _prefixes(rows, mode: str) -> list[str]:
    return list(dict.fromkeys(_prefix(key) for _, key, _, m, _ in rows if m == mode))


def _heads(groups: dict, rows: dict) -> Heads | None:
    for role, spec in groups.items():
        r = rows[role]
        if not spec.per_layer or spec.follows or not any(m == "copy" for *_, m, _ in r):
            continue
        copied, co, contra = _prefixes(r, "copy"), _prefixes(r, "co"), _prefixes(r, "contra")
        if len(copied) != 2 or len(co) != 1 or len(contra) != 1:
            continue
        heads = dict(order=role, size=spec.size, query=copied[0], key=copied[1], value=co[0], output=contra[0])
        for other, follower in groups.items():
            if follower.follows != role or not follower.per_layer:
                continue
            fr = rows[other]
            if all(batch is None and axis == 0 for _, _, axis, _, batch in fr):
                heads["within"] = other
            elif all(batch is not None for *_, batch in fr):
                side = "score_maps" if {_prefix(k) for _, k, *_ in fr} <= set(copied) else "value_maps"
                heads[side] = other
        return Heads(**heads)
    return None


def _units(groups: dict, rows: dict, taken: set) -> Units | None:
    for role, spec in groups.items():
        r = rows[role]
        if (role in taken or not spec.per_layer or spec.follows or any(m == "copy" for *_, m, _ in r)
                or any(axis != 0 for _, _, axis, _, _ in r)):
            continue
        co, contra = _prefixes(r, "co"), _prefixes(r, "contra")
        if not co or len(contra) != 1:
            continue
        scale = next((s for s, g in groups.items() if g.follows == role and g.per_layer), None)
        scaled = set(_prefixes(rows[scale], "co")) if scale else set()
        up = [p for p in co if p in scaled] or co[:1]
        gate = [p for p in co if p not in up]
        return Units(order=role, up=up[0], down=contra[0], gate=gate[0] if gate else None, scale=scale)
    return None


def structure(groups: dict) -> Structure:
    """The structure the matchers solve in the declared `groups` (role → GroupSpec; module docstring)."""
    rows = {role: role_rows(role, spec) for role, spec in groups.items()}
    heads = _heads(groups, rows)
    taken = {STREAM} | ({heads.order, heads.within, *heads.maps} - {None} if heads else set())
    units = _units(groups, rows, taken)
    if units:
        taken |= {units.order, units.scale} - {None}
    return Structure(heads, units, tuple(role for role in groups if role not in taken))

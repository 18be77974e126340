"""Which part of the network each canonical key belongs to, for the barrier decomposition (glmc/paths/decompose.py).

A part is a (role, layer) cell: role one of ROLES, layer a block index or None (keys outside the blocks). The
declarations below are written against the canonical names of glmc/adapters/base.py, which every family shares;
a family that adds keys of its own declares their roles in `Arch.part_roles` (same template syntax), and a key
nobody declared is placed by RULES (norm-like names to "norms", other keys outside the blocks to "embed_head",
anything else in a block to "other"), so every key lands in exactly one cell.

Templates: "{i}" stands for a block index, "*" for any rest of the key (fnmatch).
"""

from __future__ import annotations

import fnmatch
import re

ROLES = ("embed_head", "qk", "ov", "mlp", "norms", "other")
ROLE_LABELS = {"embed_head": "embeddings+head", "qk": "attention QK", "ov": "attention OV", "mlp": "MLP",
               "norms": "norms", "other": "other"}

PART_ROLES = {
    # what writes the stream before the blocks, and what reads it after them
    "embed": "embed_head", "pos_embed": "embed_head", "patch.*": "embed_head", "cls": "embed_head",
    "registers": "embed_head", "head.*": "embed_head",
    # attention scores: queries, keys and the per-head norms on them (timm qk_norm)
    "blocks.{i}.attn.q.*": "qk", "blocks.{i}.attn.k.*": "qk",
    "blocks.{i}.attn.q_norm.*": "qk", "blocks.{i}.attn.k_norm.*": "qk",
    # what attention moves: values and the output projection
    "blocks.{i}.attn.v.*": "ov", "blocks.{i}.attn.o.*": "ov",
    "blocks.{i}.mlp.*": "mlp",
    # after canonicalisation gains are 1 and most biases are folded into their readers (glmc/view/canonical.py)
    "blocks.{i}.ln1.*": "norms", "blocks.{i}.ln2.*": "norms", "blocks.{i}.ls1": "norms", "blocks.{i}.ls2": "norms",
    "ln_final.*": "norms",
}

BLOCK = re.compile(r"^blocks\.(\d+)\.")
NORM_LIKE = re.compile(r"(^|[._])(ln[a-z0-9_]*|[a-z0-9_]*norm[a-z0-9_]*|ls\d)($|\.)")


def _matches(template: str, key: str) -> bool:
    return fnmatch.fnmatchcase(key, template.replace("{i}", "[0-9]*"))


def part_of(key: str, extra: dict | None = None) -> tuple[str, int | None]:
    """(role, layer) of a canonical key: the family's own declarations first, then PART_ROLES, then RULES."""
    m = BLOCK.match(key)
    layer = int(m.group(1)) if m else None
    for table in (extra or {}, PART_ROLES):
        for template, role in table.items():
            if _matches(template, key):
                return role, layer
    rest = key[m.end():] if m else key
    if NORM_LIKE.search(rest):
        return "norms", layer
    return ("other" if m else "embed_head"), layer


def cells(keys, extra: dict | None = None) -> dict[str, tuple[str, int | None]]:
    """key -> (role, layer) for every key."""
    return {k: part_of(k, extra) for k in keys}


def groupings(keys, extra: dict | None = None) -> dict[str, dict[str, list[str]]]:
    """Three partitions of `keys`, each a dict part name -> its keys: "roles" (a role over all layers), "layers"
    ("layer i": every key of block i; "outside": the keys outside the blocks) and "cells" ("role@i", "role@outside").
    Parts with no key are left out."""
    out: dict[str, dict[str, list[str]]] = {"roles": {}, "layers": {}, "cells": {}}
    for k, (role, layer) in cells(keys, extra).items():
        where = "outside" if layer is None else str(layer)
        out["roles"].setdefault(role, []).append(k)
        out["layers"].setdefault("outside" if layer is None else f"layer {layer}", []).append(k)
        out["cells"].setdefault(f"{role}@{where}", []).append(k)
    out["roles"] = {r: out["roles"][r] for r in ROLES if r in out["roles"]}
    return out

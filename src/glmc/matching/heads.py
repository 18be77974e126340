"""Attention heads under weight matching: per-head bias-augmented factors, the circuit similarity that ranks
heads (the one each declared kind of per-head map leaves unchanged: Kind.head_similarity), head permutations
(plain and grouped-query), and the per-head invertible maps of a Kind (glmc/symmetry/kinds, solvers.py)."""

from __future__ import annotations

import torch

from glmc.matching.assignments import assignment, grouped_assignment
from glmc.matching.common import (
    SCORING_FLOAT64_UP_TO,
)
from glmc.symmetry.elements import IndexMap
from glmc.symmetry.kinds import kind
from glmc.symmetry.solvers import circuit_similarity
from glmc.symmetry.structure import Heads


def _aug(w, b):
    """Bias-augmented per-head factor [H, d_head, d+1] (a zero column for a bias-free projection)."""
    b = torch.zeros(w.shape[:-1], dtype=torch.float64) if b is None else b.double()
    return torch.cat([w.double(), b.unsqueeze(-1)], -1)


def head_factors(view: dict, heads: Heads, i: int):
    """Block i's bias-augmented query, key, value and output factors [H, d_head, d+1] (the output's last column
    zero), the tensors read off the declared head order (glmc/symmetry/structure.py)."""
    q, k, v, o = heads.factors(i)
    q, k, v = (_aug(view[p + ".w"], view.get(p + ".b")) for p in (q, k, v))
    o = torch.cat([view[o + ".w"].double(), torch.zeros_like(view[o + ".w"][..., :1]).double()], -1)
    return q, k, v, o


def score_keys(k: torch.Tensor, centred_stream: bool) -> torch.Tensor:
    """The part of a bias-augmented key factor [H, k, d+1] that attention scores can see: softmax ignores what
    is constant along a query's row (Tran et al. 2026's row-centred QK circuit), which is the key bias (q·b_k is
    the same for every key) and, behind a LayerNorm (`centred_stream`: inputs sum to zero), each key row's mean
    over the stream."""
    w = k[..., :-1]
    if centred_stream:
        w = w - w.mean(-1, keepdim=True)
    return torch.cat([w, torch.zeros_like(k[..., -1:])], -1)


def similarity_for(group):
    """The similarity of two heads' circuits that the Kind `group` of their maps leaves unchanged (per rotary plane
    under RoPE; Kind.head_similarity); None: the whole circuit."""
    return circuit_similarity if group is None else group.head_similarity


def _ranking(factors) -> tuple:
    """Head factors for a similarity that only ranks heads: big ones in float32, twice as fast as float64 (small
    ones, as in planted-symmetry checks, stay float64)."""
    return tuple(f.float() if f.numel() > SCORING_FLOAT64_UP_TO else f for f in factors)


def match_heads(fa, fb, qk=None, ov=None) -> IndexMap:
    """Head permutation by QK plus OV circuit similarity; `qk`, `ov`: the Kinds of the heads' maps (None: whole
    circuits)."""
    qa, ka, va, oa = _ranking(fa)
    qb, kb, vb, ob = _ranking(fb)
    s = similarity_for(qk)(qa, ka, qb, kb) + similarity_for(ov)(va, oa, vb, ob)
    return assignment(s)


def centred_scores(f, centred_stream: bool):
    """Head factors with the key factor reduced to what scores see (score_keys), for the head similarity."""
    q, k, v, o = f
    return q, score_keys(k, centred_stream), v, o



def fit_head_maps(group, xa, xb, ya, yb) -> torch.Tensor:
    """Per-head maps C of the Kind `group` (or a kind name) with C·X_B ≈ X_A and C^-T·Y_B ≈ Y_A (column action)."""
    return (kind(group) if isinstance(group, str) else group).fit_head_maps(xa, xb, ya, yb)


def match_grouped_heads(fa, fb, r: int, qk=None, ov=None) -> tuple[IndexMap, IndexMap]:
    """(key/value-group permutation, query-head permutation inside the groups) under grouped-query attention:
    circuit similarity of query heads, each with its group's key and value (grouped_assignment)."""
    qa, ka, va, oa = _ranking(fa)
    qb, kb, vb, ob = _ranking(fb)
    ka, va, kb, vb = (t.repeat_interleave(r, 0) for t in (ka, va, kb, vb))  # each query head's key/value head
    s = similarity_for(qk)(qa, ka, qb, kb) + similarity_for(ov)(va, oa, vb, ob)
    return grouped_assignment(s, r)



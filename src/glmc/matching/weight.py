"""Weight matching (data-free), in the native architecture.

Minimises the weight distance Σ_t ‖A_t − π(B)_t‖² over the symmetry group, alternating:
  1. residual map O given the inner maps: orthogonal Procrustes over every residual-touching tensor (rows
     stacked, residual axis last), restricted to maps that fix the all-ones direction: with U a basis of 1^⊥,
     O = 11ᵀ/d + U·R·Uᵀ and R = polar(Uᵀ·M·U), M = Σ_t π_inner(B_t)ᵀ·A_t / (‖A_t‖·‖B_t‖): every tensor weighs
     the same, whatever its scale, so a few large ones (a position table, a classifier) cannot decide the map
     alone. (`residual="permutation"`: linear assignment on M.) The first O uses only the input-side writers
     (token/patch/position embeddings, class token), the one place the stream's basis is pinned before any
     block is matched. These two choices, and
     learned matching's start from the unweighted fit (`balanced=False`), are decision D1 (docs/decisions/).
  2. per layer, given O: heads by linear assignment on ⟨QK_A,h, QK_B,j⟩ + ⟨OV_A,h, OV_B,j⟩ with bias-augmented
     circuits, computed from d_head×d_head Gram blocks (⟨XᵀY, X′ᵀY′⟩ = Σ (X·X′ᵀ) ⊙ (Y·Y′ᵀ)), never d×d;
  3. per head, invertible maps that bring B's factors onto A's: with C = Aᵀ acting as q ↦ C·q, k ↦ C^-T·k
     (likewise D = Bᵀ on v and o), minimise ‖C·Q_B − Q_A‖²/‖Q_A‖² + ‖C^-T·K_B − K_A‖²/‖K_A‖². Solver: the best
     of three closed-form starts (orthogonal Procrustes on [Q K] stacked; least squares on Q alone; on K alone),
     then L-BFGS in GL(d_head) (float64); a refined map is kept only if it lowers the objective and its
     condition number stays below 1e4;
  4. per layer, MLP units by linear assignment on ⟨W_in⟩ + b_in·b_in′ + ⟨W_out⟩.
Grouped-query attention (declared `kv_heads` / `query_heads`): the same circuit similarity per query head (with
its group's key and value head); key/value groups by linear assignment on the sum of each group pair's best
within-group query assignment, then that assignment inside the groups; per-kv-head maps are fitted on the factors
of all their query heads side by side. Under RoPE (`scale-rotation` QK maps) heads are compared on their per-plane
circuits (rotary_circuit_similarity), which see exactly what rotary attention computes (chosen on the Llama
tuning pair, decision D10), so it is the default. The head comparison and the per-head fit of each role belong to
its declared kind (Kind.head_similarity, head_problem / solve_head_problems; glmc/symmetry/kinds, solvers.py), so a
new kind brings its own. `scale-rotation` QK maps are solved per rotary plane in closed form
(a complex scale c = a + ib; best of the Q-side and K-side least squares and their geometric mean). A gated MLP
with a declared `mlp_scale` matches units on the gate's inner products plus |cosine| of up and down rows (blind to
the per-unit scale), then fits each unit's scale in closed form the same way (real c).
With data and below 2^25 parameters, align runs several alternations and keeps the one whose path midpoint has
the lowest training loss (glmc/matching/select.py). Otherwise circuit mode, and GPT-2 below 2^25 parameters (its
declared Arch.weight_matching), run the paper's own alternation instead (glmc/matching/paper.py; `algorithm`,
resolve_algorithm).
Stops when an iteration lowers the relative distance by less than `tol` (3e-3 for the weight method, TOL), or
after `iterations`. Memory: the alternation walks the model one block at a time (layer_chunks), never holding a
transformed copy of the whole model; big similarities and residual crosses are float32 products with float64
sums; every layer's per-head invertible maps are fitted in one batched L-BFGS run on k×k Gram blocks; MLP
assignments run in background threads while the next layer's similarity is formed.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import torch
from scipy.optimize import linear_sum_assignment
from tqdm.auto import tqdm

from glmc.errors import BadOption
from glmc.matching.common import (
    canonical_pair,
    finish,
    layer_chunks,
    residual_actions,
    residual_keys,
    simple_residual,
    squared_norm,
    view_distance,
)
from glmc.matching.nullspace import free_probes
from glmc.memory import park, trim
from glmc.symmetry.elements import IndexMap, LinearMap, ScaleMap, float32_moves
from glmc.symmetry.kinds import kind
from glmc.symmetry.solvers import (  # noqa: F401  (the per-head solvers lived here; kept importable)
    LBFGS_FLOAT64_UP_TO,
    LBFGS_HISTORY,
    FactorGrams,
    best_complex_scale,
    circuit_similarity,
    fit_factor_grams,
    fit_factor_map,
    fit_scale_rotation,
    rotary_circuit_similarity,
)
from glmc.symmetry.spec import group_name
from glmc.symmetry.transform import Transform, apply_elements

HEAD_SIMILARITIES = ("auto", "circuit")
INIT_KEYS = ("embed", "pos_embed", "patch.w", "patch.b", "cls", "registers")
RAW_INIT_KEYS = INIT_KEYS + ("head.w",)  # balanced=False: the unweighted variant also starts from the head


# Tensors the matching passes score (moves, residual crosses, head similarities) are float64 up to this many
# entries and float32 above: float32 is 2-5x faster, and models of up to ~256 wide (every tuning pair of
# benchmarks/suite.py) keep the float64 results their defaults were chosen on, which a rounding change can flip
# through near-tied assignments. GPT-2-124M's attention matrices (589,824 entries) are above it.
SCORING_FLOAT64_UP_TO = 1 << 18


def start_keys(view) -> tuple:
    """The tensors the first residual map is fitted on. Without a position table (rotary positions) the token
    embeddings are the only input-side anchor, a few dozen rows of a char vocabulary for a d-dimensional stream,
    so the first map is mostly unconstrained; the untied LM head, whose rows are the same tokens, pins more of
    it (decision D10); with a position table it stays off."""
    return INIT_KEYS if "pos_embed" in view else INIT_KEYS + ("head.w",)


# --- step 1: residual -----------------------------------------------------------------------------------------

def _cross(a, b, weighting: str, mask=None) -> torch.Tensor:
    """w_t·B_tᵀ·A_t (_weight), float64, over the rows in `mask` (all by default). Big tensors multiply in float32
    (SCORING_FLOAT64_UP_TO), 5-10× faster than float64 and accurate to ~1e-6 relative: a Procrustes target needs no
    more."""
    d = a.shape[-1]
    if mask is not None:
        a, b = a[mask], b[mask]
    work = torch.float64 if a.numel() <= SCORING_FLOAT64_UP_TO else torch.float32
    a, b = a.reshape(-1, d).to(work), b.reshape(-1, d).to(work)
    m = (b.T @ a).double()
    norms = weighting == "norms"
    return m * _weight(weighting, squared_norm(a) if norms else 0.0, squared_norm(b) if norms else 0.0, a.shape[0])


WEIGHTINGS = ("norms", "none", "rows")


def _weight(weighting: str, na: float, nb: float, rows: int) -> float:
    """A residual tensor's weight in the Procrustes fit (WEIGHTINGS): "norms" 1/(‖A_t‖·‖B_t‖), so every tensor
    weighs the same whatever its scale; "none" 1 (the plain sum); "rows" 1/rows (the paper's code divides each
    block's rows by √rows)."""
    if weighting == "rows":
        return 1.0 / max(rows, 1)
    return 1.0 / max(math.sqrt(na * nb), 1e-30) if weighting == "norms" else 1.0


def moved_part(view: dict, keys, elements: dict, arch) -> dict:
    """π(view) restricted to `keys` (a new dict; the view is not modified). Every streaming pass calls this once
    per block, so it is also where the previous block's freed temporaries go back to the OS (glmc/memory.py)."""
    trim()
    with float32_moves(SCORING_FLOAT64_UP_TO):  # the parts are only scored, never written
        return apply_elements({k: view[k] for k in keys}, elements, arch, strict=False)


class ResidualPass:
    """One streamed pass over π_inner(B) (layer_chunks) that yields both what the residual fit needs and the weight
    distance after any orthogonal residual map O, so no second pass over the model is made per iteration:
    ‖A_t − B′_t·O‖² = ‖A_t‖² + ‖B′_t‖² − 2⟨B′_tᵀ·A_t, O⟩ for a tensor whose residual axis is last, and the rest
    (head and unit biases) are compared directly."""

    def __init__(self, view_a: dict, view_b: dict, elements: dict, arch, keys, weighting: str,
                 rows: dict | None = None, unmoved: dict | None = None, known: dict | None = None):
        """`unmoved`: a cache the caller keeps across iterations for the summed terms of the tensors no element
        moves (embeddings, LM head, norm biases: the biggest products, and the same every iteration); which tensors
        those are depends only on which groups `elements` names, so the sums are cached under those names.
        `known`: key -> terms (_terms) of tensors of B the caller has measured already (the first map's)."""
        d = view_a[keys[0]].shape[-1]
        wanted, rows = set(keys), rows or {}
        cached = None if unmoved is None else unmoved.get(frozenset(elements))
        # tensors the residual moves other than on the last axis of a fitted tensor (a norm's gain on the stream, a
        # tied MLM head's dense layer on both axes): kept aside, and measured exactly for each residual element
        acts = residual_actions(view_b, arch) if "residual" in arch.groups else {}
        odd = {k for k, a in acts.items() if k not in wanted or not simple_residual(a)}
        self.arch, self.odd, odd_norm = arch, {}, 0.0
        # [Σ ‖A_t‖², Σ ‖A_t‖² + ‖B′_t‖² over residual tensors (+ the rest's distances), Σ B′_tᵀ·A_t, Σ w_t·B′_tᵀ·A_t]
        moved = [0.0, 0.0, torch.zeros(d, d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64)]
        fresh = [0.0, 0.0, torch.zeros(d, d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64)]
        for chunk in layer_chunks(view_b, arch.n_layer):
            part = moved_part(view_b, chunk, elements, arch)
            for k in chunk:
                if k in odd:
                    self.odd[k] = (view_a[k], part[k])
                    odd_norm += squared_norm(view_a[k])
                    continue
                same = part[k] is view_b[k]
                if same and cached is not None:
                    continue
                terms = (known or {}).get(k) if same else None
                if terms is None:
                    terms = self._terms(view_a[k], part[k], k in wanted, weighting, rows.get(k))
                _add(fresh if same else moved, terms)
        if cached is None:
            cached = fresh
            if unmoved is not None:
                unmoved[frozenset(elements)] = fresh
        _add(moved, cached)
        self.norm_a, self.fixed, self.raw, self.fit = moved
        self.norm_a += odd_norm

    @staticmethod
    def _terms(a, b, residual: bool, weighting: str, mask=None) -> tuple:
        """(‖A_t‖², its share of `fixed`, B′_tᵀ·A_t, its weighted share of the fit; None for a non-residual one)."""
        na = squared_norm(a)
        if not residual:
            return na, squared_norm(a, b), None, None
        nb = squared_norm(b)
        raw = _cross(a, b, "none")
        fit = _cross(a, b, weighting, mask) if mask is not None else raw * _weight(
            weighting, na, nb, a.reshape(-1, a.shape[-1]).shape[0])
        return na, na + nb, raw, fit

    def distance(self, res) -> float | None:
        """Σ‖A − O·π_inner(B)‖² / Σ‖A‖² for the residual element `res`; None if `res` is not orthogonal (then only
        a pass over the moved model can tell)."""
        d = self.raw.shape[0]
        eye = torch.eye(d, dtype=torch.float64)
        co, contra = res.act(eye, -1, "co"), res.act(eye, -1, "contra")
        if not (torch.allclose(co, contra, atol=1e-9) and torch.allclose(co @ co.T, eye, atol=1e-9)):
            return None
        odd = 0.0
        if self.odd:
            there = apply_elements({k: b for k, (_, b) in self.odd.items()}, {"residual": res}, self.arch, strict=False)
            odd = sum(squared_norm(a, there[k]) for k, (a, _) in self.odd.items())
        return (max(self.fixed - 2 * float((self.raw * co).sum()), 0.0) + odd) / self.norm_a


def _add(totals: list, terms) -> None:
    """totals += terms, entry by entry (ResidualPass's sums; a None term adds nothing)."""
    for i, x in enumerate(terms):
        if x is not None:
            totals[i] = totals[i] + x


def streamed_distance(view_a: dict, view_b: dict, elements: dict, arch) -> float:
    """view_distance(A, π(B)) computed one chunk at a time."""
    num = den = 0.0
    for keys in layer_chunks(view_b, arch.n_layer):
        part = moved_part(view_b, keys, elements, arch)
        for k in keys:
            num += squared_norm(view_a[k], part[k])
            den += squared_norm(view_a[k])
    return num / den


def seen_token_rows(data, view: dict) -> dict:
    """{"embed": mask of the vocabulary rows whose token occurs in `data`'s training split}: an embedding row of
    a token never seen in training is its initialisation (shrunk by weight decay), noise to a Procrustes fit. The
    LM head's rows all take part (training pushes every one of them). Empty when there is no such data."""
    tokens = getattr(data, "tokens", None)
    if tokens is None or "embed" not in view or "train" not in tokens:
        return {}
    seen = torch.bincount(tokens["train"].reshape(-1), minlength=view["embed"].shape[0]) > 0
    return {"embed": seen[: view["embed"].shape[0]]}


def residual_kind(arch, residual: str | None = None) -> str:
    """The kind weight matching fits for the residual: the declared one, or one of its declared subgroups
    ("orthogonal" names the declared kind, for the CLI's --residual)."""
    spec = arch.groups["residual"]
    if residual in (None, "orthogonal", spec.kind):
        return spec.kind
    if residual not in spec.subgroups:
        raise BadOption(f"residual {residual!r} is not a subgroup this {arch.family} model declares for its "
                        f"{spec.kind} residual group (choose from {', '.join((spec.kind,) + spec.subgroups)})")
    return residual


def solve_residual(m: torch.Tensor, kind_name: str):
    """The residual element of `kind_name` nearest to the cross-correlation M (maximising ⟨O, M⟩)."""
    return kind(kind_name).nearest(m)


# --- step 2: heads --------------------------------------------------------------------------------------------

def _aug(w, b):
    """Bias-augmented per-head factor [H, d_head, d+1] (a zero column for a bias-free projection)."""
    b = torch.zeros(w.shape[:-1], dtype=torch.float64) if b is None else b.double()
    return torch.cat([w.double(), b.unsqueeze(-1)], -1)


def head_factors(view: dict, i: int):
    p = f"blocks.{i}.attn."
    q, k = _aug(view[p + "q.w"], view.get(p + "q.b")), _aug(view[p + "k.w"], view.get(p + "k.b"))
    v = _aug(view[p + "v.w"], view.get(p + "v.b"))
    o = torch.cat([view[p + "o.w"].double(), torch.zeros_like(view[p + "o.w"][..., :1]).double()], -1)
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
    return _assignment(s)


def centred_scores(f, centred_stream: bool):
    """Head factors with the key factor reduced to what scores see (score_keys), for the head similarity."""
    q, k, v, o = f
    return q, score_keys(k, centred_stream), v, o


# One assignment solves while the caller forms the next similarity, and one more waits (as float32): on 2 cores
# GPT-2-124M took as long as with two solving at once (59.9 s against 59.7 s) at a 50 MB lower peak (2.49 GB).
LSA_WORKERS, LSA_QUEUED = 1, 1


class Assignments:
    """Linear assignments solved in background threads (scipy releases the GIL) while the caller computes the next
    similarity; at most `workers` solve and `queued` wait at a time, to bound memory."""

    def __init__(self, workers: int | None = None, queued: int = 0):
        self.workers = workers or max(1, min(4, torch.get_num_threads()))
        self.queued = queued
        self.pool = ThreadPoolExecutor(self.workers)
        self.futures: dict = {}

    def submit(self, key, s: torch.Tensor) -> None:
        waiting = [f for f in self.futures.values() if not f.done()]
        if len(waiting) >= self.workers + self.queued:
            wait(waiting, return_when=FIRST_COMPLETED)
        # a queued job holds the float32 similarity; its worker makes the float64 cost only when it starts
        self.futures[key] = self.pool.submit(_assignment_job, [s], s.shape[1])

    def results(self) -> dict:
        out = {k: f.result() for k, f in self.futures.items()}
        self.pool.shutdown()
        return out


def _assignment(s: torch.Tensor) -> IndexMap:
    """src[h] = j: B's unit j goes to position h, maximising Σ_h s[h, src[h]]."""
    return _assignment_of_cost(_cost(s), s.shape[1])


def _cost(s: torch.Tensor) -> torch.Tensor:
    # the one float64 copy scipy needs, negated in place (maximize=True would make a second); s is not modified
    return s.double().neg_() if s.dtype != torch.float64 else -s


def _assignment_job(holder: list, n: int) -> IndexMap:
    """An assignment of the similarity in `holder`, which is emptied once its float64 cost is made, so the float32
    copy is freed before the solve."""
    return _assignment_of_cost(_cost(holder.pop()), n)


def _assignment_of_cost(cost: torch.Tensor, n: int) -> IndexMap:
    rows, cols = linear_sum_assignment(cost.numpy())
    src = torch.empty(cost.shape[0], dtype=torch.long)
    src[torch.as_tensor(rows)] = torch.as_tensor(cols)
    return IndexMap(src, None, n)


def fit_head_maps(group, xa, xb, ya, yb) -> torch.Tensor:
    """Per-head maps C of the Kind `group` (or a kind name) with C·X_B ≈ X_A and C^-T·Y_B ≈ Y_A (column action)."""
    return (kind(group) if isinstance(group, str) else group).fit_head_maps(xa, xb, ya, yb)


# --- step 4: MLP units ----------------------------------------------------------------------------------------

def match_gated_mlp(view_a, view_b, i) -> IndexMap:
    return _assignment(gated_mlp_similarity(view_a, view_b, i))


def _unit_rows(view, p: str, k: str) -> torch.Tensor:
    """A unit's rows of the gated MLP's `k` ("gate", "in"), with its bias as one more column where it has one."""
    w = view[p + k + ".w"]
    return w if p + k + ".b" not in view else torch.cat([w, view[p + k + ".b"][:, None]], -1)


def gated_mlp_similarity(view_a, view_b, i) -> torch.Tensor:
    """Units of a gated MLP whose up/down rows may be rescaled per unit (mlp_scale): the gate rows (and bias) by
    inner product, up (with its bias) and down by |cosine|, which no per-unit scale (or sign) changes."""
    p = f"blocks.{i}.mlp."

    def cos(a, b):
        a, b = a.float(), b.float()
        a, b = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-30), b / b.norm(dim=-1, keepdim=True).clamp_min(1e-30)
        return (a @ b.T).abs()

    gate_a, gate_b = _unit_rows(view_a, p, "gate").float(), _unit_rows(view_b, p, "gate").float()
    s = gate_a @ gate_b.T / (gate_a.norm() * gate_b.norm() / gate_a.shape[0]).clamp_min(1e-30)
    return (s + cos(_unit_rows(view_a, p, "in"), _unit_rows(view_b, p, "in"))
            + cos(view_a[p + "out.w"], view_b[p + "out.w"]))


def fit_mlp_scale(view_a, view_b, i) -> ScaleMap:
    """Per-unit s with s·up_B ≈ up_A (bias included) and down_B/s ≈ down_A, in closed form (best_complex_scale,
    real)."""
    p = f"blocks.{i}.mlp."
    ua, ub = (_unit_rows(view, p, "in").double() for view in (view_a, view_b))
    da, db = (view[p + "out.w"].double() for view in (view_a, view_b))
    s = best_complex_scale(ub.to(torch.complex128), ua.to(torch.complex128), db.to(torch.complex128),
                           da.to(torch.complex128), ua.pow(2).sum().clamp_min(1e-30), da.pow(2).sum().clamp_min(1e-30))
    return ScaleMap(s.real.float())


def match_mlp(view_a, view_b, i) -> IndexMap:
    return _assignment(mlp_similarity(view_a, view_b, i))


UNIT_SIMILARITIES = ("inner", "cosine", "l1")


def unit_signatures(view, i) -> torch.Tensor:
    """[n, 2d+1]: each MLP unit's input row, input bias and output row, normalised to unit length."""
    p = f"blocks.{i}.mlp."
    parts = [view[p + "in.w"].float()]
    if p + "in.b" in view:
        parts.append(view[p + "in.b"].float()[:, None])
    parts.append(view[p + "out.w"].float())
    sig = torch.cat(parts, -1)
    return sig / sig.norm(dim=-1, keepdim=True).clamp_min(1e-30)


def signature_similarity(view_a, view_b, i, kind_name: str) -> torch.Tensor:
    """MLP units compared on normalised signatures: by cosine, or by minus their L1 distance (the paper's code)."""
    sa, sb = unit_signatures(view_a, i), unit_signatures(view_b, i)
    return sa @ sb.T if kind_name == "cosine" else -torch.cdist(sa, sb, p=1)


def mlp_similarity(view_a, view_b, i, kind_name: str = "inner") -> torch.Tensor:
    if kind_name != "inner":
        return signature_similarity(view_a, view_b, i, kind_name)
    p = f"blocks.{i}.mlp."
    # float32 products: an assignment needs the ranking of similarities, not their last digits; the second one
    # accumulates in place (an n×n temporary fewer: 38 MB at GPT-2-124M, beside the assignments' float64 costs)
    s = view_a[p + "in.w"].float() @ view_b[p + "in.w"].float().T
    s.addmm_(view_a[p + "out.w"].float(), view_b[p + "out.w"].float().T)
    if p + "in.b" in view_a:
        s.addr_(view_a[p + "in.b"].float(), view_b[p + "in.b"].float())
    return s


# --- the alternation ------------------------------------------------------------------------------------------

def match_grouped_heads(fa, fb, r: int, qk=None, ov=None) -> tuple[IndexMap, IndexMap]:
    """(key/value-group permutation, query-head permutation inside the groups) under grouped-query attention:
    circuit similarity of query heads, each with its group's key and value (grouped_assignment)."""
    qa, ka, va, oa = _ranking(fa)
    qb, kb, vb, ob = _ranking(fb)
    ka, va, kb, vb = (t.repeat_interleave(r, 0) for t in (ka, va, kb, vb))  # each query head's key/value head
    s = similarity_for(qk)(qa, ka, qb, kb) + similarity_for(ov)(va, oa, vb, ob)
    return grouped_assignment(s, r)


def grouped_assignment(s: torch.Tensor, r: int) -> tuple[IndexMap, IndexMap]:
    """Query-head similarities s [H_a, H_b] → (group permutation, query permutation inside the groups): groups
    of r consecutive heads assigned on the sum over a group pair's best within-group query assignment."""
    g = s.shape[0] // r
    blocks = s.reshape(g, r, g, r).permute(0, 2, 1, 3)  # [group a, group b, query in a, query in b]
    within = {(x, y): _assignment(blocks[x, y]) for x in range(g) for y in range(g)}
    score = torch.tensor([[float(blocks[x, y][torch.arange(r), within[x, y].src].sum()) for y in range(g)]
                          for x in range(g)])
    groups = _assignment(score)
    # query head j·r + s (after the group move) takes B's query head src·r + t: within the moved block, s ← t
    src = torch.cat([within[x, int(groups.src[x])].src + x * r for x in range(g)])
    return groups, IndexMap(src, None, g * r)


def _grouped(t: torch.Tensor, b: int) -> torch.Tensor:
    """[H, k, m] per query head → [b, k, r·m]: the factors of a group's r query heads side by side."""
    h, k, m = t.shape
    return t.reshape(b, h // b, k, m).permute(0, 2, 1, 3).reshape(b, k, -1)


def match_inner(view_a, view_b, arch, head_maps: bool = True, head_similarity: str = "auto",
                residual=None, centred_keys: bool = False, unit_similarity: str = "inner",
                permutations: bool = True) -> Transform:
    """Heads, per-head maps and MLP units, per layer, for the groups the model declares, between A and B moved by
    the residual element `residual` (None: B as it is), one block at a time. `head_similarity`: "auto" (per
    rotary plane where the QK maps are scale-rotations) or "circuit" (the whole QK circuit); `centred_keys`:
    heads compared on what their scores see (score_keys); `unit_similarity`: UNIT_SIMILARITIES (plain MLPs);
    `permutations=False`: B's heads and units stay where they are (only the per-head maps and MLP scales are
    fitted)."""
    groups, t = arch.groups, Transform()
    chunks = layer_chunks(view_b, arch.n_layer)
    pending: dict[str, list] = {}  # role -> (layer, its Kind's head problem), solved after the loop
    units = Assignments(LSA_WORKERS, LSA_QUEUED)
    for i in range(arch.n_layer):
        rotated_b = moved_part(view_b, chunks[i], {} if residual is None else {"residual": residual}, arch)
        fa, fb = head_factors(view_a, i), head_factors(rotated_b, i)
        # the head comparison each declared kind of per-head maps leaves unchanged ("circuit": whole circuits)
        qk, ov = ((groups[r].group() if r in groups and head_similarity == "auto" else None) for r in ("qk", "ov"))
        sa, sb = ((centred_scores(fa, arch.centred_stream), centred_scores(fb, arch.centred_stream))
                  if centred_keys else (fa, fb))
        if permutations and "heads" in groups:
            perm = match_heads(sa, sb, qk, ov)
            t.elements[group_name("heads", i)] = perm
            fb = tuple(f[perm.src] for f in fb)
        elif permutations and "kv_heads" in groups:
            n_kv = groups["kv_heads"].size
            kv, query = match_grouped_heads(sa, sb, arch.n_head // n_kv, qk, ov)
            t.elements[group_name("kv_heads", i)] = kv
            if "query_heads" in groups:
                t.elements[group_name("query_heads", i)] = query
            total = kv._shared(arch.n_head)[0][query.src]
            qb, kb, vb, ob = fb
            fb = (qb[total], kb[kv.src], vb[kv.src], ob[total])
        qa, ka, va, oa = fa
        qb, kb, vb, ob = fb
        for role, (xa, xb, ya, yb) in (("qk", (qa, qb, ka, kb)), ("ov", (va, vb, oa, ob))):
            if head_maps and role in groups:
                b = groups[role].batch or arch.n_head
                # a map shared by r query heads fits all of them at once: their factors side by side
                xa, xb, ya, yb = (_grouped(f, b) if f.shape[0] != b else f for f in (xa, xb, ya, yb))
                pending.setdefault(role, []).append((i, groups[role].group().head_problem(xa, xb, ya, yb)))
        if "mlp" in groups and permutations:
            gated = "mlp_scale" in groups and f"blocks.{i}.mlp.gate.w" in view_a
            units.submit(i, gated_mlp_similarity(view_a, rotated_b, i) if gated
                         else mlp_similarity(view_a, rotated_b, i, unit_similarity))
    # without permutations B's units stay where they are, and a gated MLP's scales are still fitted
    unit_perms = units.results() if permutations else {i: None for i in range(arch.n_layer)}
    trim()  # the similarities and costs of every layer are freed by now
    for i, perm in unit_perms.items():
        if perm is not None:
            t.elements[group_name("mlp", i)] = perm
        if "mlp_scale" in groups and f"blocks.{i}.mlp.gate.w" in view_a:
            keys = [k for k in chunks[i] if ".mlp." in k]
            moving = {} if residual is None else {"residual": residual}
            moving.update({} if perm is None else {group_name("mlp", i): perm})
            moved = moved_part(view_b, keys, moving, arch)
            t.elements[group_name("mlp_scale", i)] = fit_mlp_scale(view_a, moved, i)
    for role, parts in pending.items():
        maps = groups[role].group().solve_head_problems([p for _, p in parts])
        for (i, _), c in zip(parts, maps, strict=True):
            t.elements[group_name(role, i)] = LinearMap(c.transpose(-1, -2).float().contiguous())
        trim()  # L-BFGS's history and line-search temporaries
    if permutations:  # the adapter's own groups (an MLM head's hidden units, a pooler), from their declared rows
        from glmc.matching.declared import match_declared

        t.elements.update(match_declared(view_a, view_b, arch, {} if residual is None else {"residual": residual}))
    return t


# the first maps weight matching can start from (`restarts`: the default one, the other weighting's, B's stream as it
# is); it alternates from each and keeps the lowest weight distance
RESTARTS = 3
# align's default restarts: 2 for models up to this many parameters, 1 above (decision D2): twice the time, which
# costs seconds below this size and would take GPT-2-124M's weight matching from ~60 s to ~100 s
AUTO_RESTARTS_UP_TO = 1 << 25


def default_restarts(view) -> int:
    """align's restarts when none is given: 2 up to AUTO_RESTARTS_UP_TO parameters (counted on the view), else 1."""
    return 2 if sum(t.numel() for t in view.values()) <= AUTO_RESTARTS_UP_TO else 1


def weight_matching(view_a, view_b, arch, iterations: int = 15, residual: str | None = None,
                    head_maps: bool = True, progress: bool = True, log=None, balanced: bool = True,
                    head_similarity: str = "auto", tol: float = 1e-6, centred_keys: bool = False,
                    unit_similarity: str = "inner", rows: dict | None = None, weighting: str | None = None,
                    restarts: int = 1, first_maps: list | None = None, permutations: bool = True,
                    every_start: bool = False):
    """(Transform π with π(B) ≈ A, per-iteration log). `residual`: the declared residual kind (None) or one of
    its subgroups ("permutation"). `balanced=False`: the unweighted residual fit started from the embeddings
    and the head, the variant learned matching starts from (see glmc/matching/learned.py). Stops when an iteration
    lowers the distance by less than `tol` (relative), or after `iterations`. `centred_keys`, `unit_similarity`:
    match_inner's; `rows`: the rows of residual tensors the residual fits use (_cross); `weighting`:
    the residual fit's tensor weights (WEIGHTINGS; default "norms", or "none" when not `balanced`); `restarts`
    (1–RESTARTS): also alternate from the other weighting's first map and from B's stream as it is, keeping the
    lowest weight distance; `first_maps`: residual elements to alternate from instead (e.g. activation matching's,
    benchmarks/activation_starts.py); `permutations=False`: B's heads and units stay where they are (match_inner);
    `every_start`: return every start's result, a list in start order, instead of the closest (glmc/matching/select.py
    chooses among them by loss)."""
    if not 1 <= restarts <= RESTARTS:
        raise BadOption(f"weight matching restarts from 1 to {RESTARTS} first maps, got {restarts}")
    if iterations < 1:
        raise BadOption(f"weight matching needs at least 1 iteration, got {iterations}")
    if head_similarity not in HEAD_SIMILARITIES:
        raise BadOption(f"unknown head similarity {head_similarity!r}; choose from {', '.join(HEAD_SIMILARITIES)}")
    if unit_similarity not in UNIT_SIMILARITIES:
        raise BadOption(f"unknown unit similarity {unit_similarity!r}; choose from {', '.join(UNIT_SIMILARITIES)}")
    weighting = weighting or ("norms" if balanced else "none")
    if weighting not in WEIGHTINGS:
        raise BadOption(f"unknown residual weighting {weighting!r}; choose from {', '.join(WEIGHTINGS)}")
    residual = residual_kind(arch, residual)
    log = [] if log is None else log
    keys_all = residual_keys(view_a, arch.n_layer, arch)
    t0 = time.perf_counter()
    # the first map's products are the first ResidualPass's for these tensors (no inner element moves them)
    known = {k: ResidualPass._terms(view_a[k], view_b[k], True, weighting, (rows or {}).get(k))
             for k in first_map_keys(view_a, keys_all, weighting)}
    firsts = (list(first_maps) if first_maps is not None
              else _restart_maps(view_a, view_b, keys_all, known, residual, weighting, rows, restarts))
    start_dist = view_distance(view_a, view_b)
    # the embeddings and the head are not read again until the end: off to disk meanwhile (0.6 GB at GPT-2-124M)
    for view in (view_a, view_b):
        park(view, [k for k in view if not k.startswith("blocks.")])
    log.append({"step": "start", "distance": start_dist})
    unmoved: dict = {}  # ResidualPass's terms of the tensors only the residual map moves, reused every iteration

    def alternate(res):
        """The alternation from the first residual map `res`: (best transform, its distance, per-iteration log)."""
        found, found_dist, steps = None, start_dist, []
        bar = tqdm(range(iterations), desc="weight matching", disable=not progress, leave=False)
        for it in bar:
            t1 = time.perf_counter()
            inner = match_inner(view_a, view_b, arch, head_maps, head_similarity, residual=res,
                                centred_keys=centred_keys, unit_similarity=unit_similarity,
                                permutations=permutations)
            t2 = time.perf_counter()
            fitted = ResidualPass(view_a, view_b, inner.elements, arch, keys_all, weighting, rows, unmoved, known)
            res = solve_residual(fitted.fit, residual)
            t3 = time.perf_counter()
            full = Transform({"residual": res, **inner.elements})
            dist = fitted.distance(res)
            if dist is None:
                dist = streamed_distance(view_a, view_b, full.elements, arch)
            steps.append({"step": it + 1, "distance": dist, "inner_seconds": t2 - t1, "residual_seconds": t3 - t2})
            bar.set_postfix(distance=f"{dist:.4f}")
            if found is not None and dist >= found_dist - tol * found_dist:
                if dist < found_dist:
                    found, found_dist = full, dist
                break
            found, found_dist = full, dist
        return found, found_dist, steps

    best, best_dist, every = None, start_dist, []
    for r, first in enumerate(firsts):
        found, dist, steps = alternate(first)
        log.extend({**s, "restart": r} if len(firsts) > 1 else s for s in steps)
        every.append(found)
        if best is None or dist < best_dist:
            best, best_dist = found, dist
    log.append({"step": "done", "seconds": time.perf_counter() - t0, "distance": best_dist})
    return (every if every_start else best), log


def _restart_maps(view_a, view_b, keys_all, known: dict, residual: str, weighting: str, rows, restarts: int) -> list:
    """The first residual maps of `restarts` alternations: `weighting`'s fit (its products `known`), the other
    weighting's, then B's stream as it is."""
    firsts = [solve_residual(sum(t[3] for t in known.values()), residual)]
    if restarts > 1:
        other = "none" if weighting != "none" else "norms"
        firsts.append(solve_residual(sum(_cross(view_a[k], view_b[k], other, (rows or {}).get(k))
                                         for k in first_map_keys(view_a, keys_all, other)), residual))
    if restarts > 2:
        firsts.append(solve_residual(torch.eye(view_a[keys_all[0]].shape[-1], dtype=torch.float64), residual))
    return firsts


def first_map_keys(view, keys_all, weighting: str) -> list:
    """The residual tensors the first residual map is fitted on for `weighting` (start_keys; the unweighted fit
    also uses the head)."""
    return [k for k in keys_all if k in (start_keys(view) if weighting != "none" else RAW_INIT_KEYS)]


# The weight method's stopping tolerance (decision D11): past this relative gain per iteration the distance still
# creeps down but the barrier does not follow
TOL = 3e-3


def align(model_a, model_b, *, iterations: int = 15, residual: str | None = None, head_maps: bool = True,
          progress: bool = True, mode: str = "native", fill: bool = False, head_similarity: str = "auto",
          tol: float = TOL, data=None, seen_tokens: bool = False, centred_keys: bool = False,
          unit_similarity: str = "inner", weighting: str = "norms", restarts: int | None = None,
          algorithm: str = "auto", select_batches: int | None = None, candidates=None):
    """Weight matching (module docstring). `residual`: None (the declared residual group) or "permutation";
    `head_maps`: fit per-head maps (native mode only: circuits absorb them); `fill`: an embedded narrower B's
    free reader weights are filled with A's (glmc/matching/nullspace.py); `head_similarity`: "auto" (heads
    compared per rotary plane under RoPE, `rotary_circuit_similarity`) or "circuit" (whole QK circuits); `tol`:
    stop when an iteration lowers the weight distance by less than this fraction (TOL); `seen_tokens`: the
    residual fits use only the embedding rows of tokens in `data`'s training split (seen_token_rows; no effect
    without token data); `centred_keys`, `unit_similarity`: match_inner's; `weighting`: the residual fit's
    tensor weights (_weight); `restarts`: weight_matching's, None for default_restarts (2 up to
    AUTO_RESTARTS_UP_TO = 2^25 parameters, else 1). The candidates behind these last five are decisions D1
    and D2: restarts=2 is the default where it is cheap; none of the others is. `algorithm` (ALGORITHMS): "glmc",
    this module's alternation; "paper", the paper's own (glmc/matching/paper.py: of the options above it takes
    `iterations`, `residual` and `data`, whose seen tokens it always uses), followed in native mode by per-head maps
    fitted given its residual map and permutations; "auto": resolve_algorithm's choice. `select_batches`: with
    `data`, run every alternation of `candidates` (glmc/matching/select.py; default DEFAULT_CANDIDATES) and keep the
    one whose path midpoint has the lowest loss on this many training batches; None: resolve_select's default,
    0: off."""
    glmc_only = dict(fill=fill, head_similarity=head_similarity, tol=tol, seen_tokens=seen_tokens,
                     centred_keys=centred_keys, unit_similarity=unit_similarity, weighting=weighting, restarts=restarts)
    n_select = resolve_select(model_a, algorithm, select_batches, data, candidates, **glmc_only)
    if n_select:
        from glmc.matching.select import align_selected

        return align_selected(model_a, model_b, data=data, batches=n_select, candidates=candidates,
                              iterations=iterations, residual=residual, tol=tol, mode=mode, head_maps=head_maps,
                              progress=progress)
    if resolve_algorithm(model_a, mode, algorithm, **glmc_only) == "paper":
        return _align_paper(model_a, model_b, iterations, residual, data, progress, restarts, mode, head_maps)
    adapter, arch, view_a, view_b = canonical_pair(model_a, model_b)
    restarts = default_restarts(view_a) if restarts is None else restarts
    head_maps = head_maps and mode == "native"  # circuits absorb the per-head maps
    rows = seen_token_rows(data, view_a) if seen_tokens and data is not None else None
    t, log = weight_matching(view_a, view_b, arch, iterations, residual, head_maps, progress,
                             head_similarity=head_similarity, tol=tol, centred_keys=centred_keys,
                             unit_similarity=unit_similarity, rows=rows, weighting=weighting, restarts=restarts)
    report = {"method": "weight", "residual": residual_kind(arch, residual), "head_maps": head_maps,
              "restarts": restarts, "iterations": log,
              "transform": t.describe(), "distance_before": log[0]["distance"]}
    probes = free_probes(view_b, arch.n_layer) if fill else None
    return finish(model_a, model_b, adapter, arch, view_a, view_b, t, report, probes=probes)


ALGORITHMS = ("auto", "glmc", "paper")
# "auto" uses the family's declared algorithm (Arch.weight_matching) in native mode only up to this many parameters:
# the paper's L1 unit costs (d_mlp² rows of 2d+1 per layer) and fixed 15 iterations took GPT-2-124M's weight
# matching past 10 minutes on 2 cores, against ~60 s for glmc's (issue #18)
PAPER_UP_TO = 1 << 25
_GLMC_DEFAULTS = dict(fill=False, head_similarity="auto", tol=TOL, seen_tokens=False, centred_keys=False,
                      unit_similarity="inner", weighting="norms", restarts=None)


def resolve_algorithm(model, mode: str = "native", algorithm: str = "auto", **options) -> str:
    """"glmc" or "paper": what align runs. "auto": the paper's in circuit mode; in native mode the family's
    declared one (Arch.weight_matching) up to PAPER_UP_TO parameters, and glmc's when any option only glmc's
    alternation takes (restarts, weighting, fill, …) is given a value other than its default. Other options (any of
    align's) are ignored, so a caller may pass all of its own."""
    from glmc.adapters import adapter_for

    if algorithm not in ALGORITHMS:
        raise BadOption(f"unknown weight-matching algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    if algorithm != "auto":
        return algorithm
    if mode == "circuit":
        return "paper"
    if any(options.get(k, v) != v for k, v in _GLMC_DEFAULTS.items()):
        return "glmc"
    small = sum(p.numel() for p in model.parameters()) <= PAPER_UP_TO
    return adapter_for(model).arch(model).weight_matching if small else "glmc"


# align selects among candidate alternations by their midpoint's training loss (glmc/matching/select.py) on this
# many batches of 32 by default, in either mode, for models up to SELECT_UP_TO parameters, given data (decision
# D4). `algorithm="paper"` runs the paper's alternation alone.
SELECT_BATCHES = 4
# one alternation per candidate (five) and a forward pass of each midpoint: seconds at the suite's sizes, minutes
# at GPT-2-124M's, where glmc's alternation alone is the default
SELECT_UP_TO = 1 << 25


def resolve_select(model, algorithm: str = "auto", select_batches: int | None = None, data=None, candidates=None,
                   **options) -> int:
    """How many training batches align's candidate selection uses; 0: no selection. Given explicitly, it needs
    `data` and algorithm "auto". By default SELECT_BATCHES when `data` is given, `algorithm` is "auto", the model
    has at most SELECT_UP_TO parameters and no option only glmc's alternation takes is set (as resolve_algorithm).
    The mode does not matter: each mode scores midpoints in its own parametrisation. Other options are ignored."""
    if select_batches is not None:
        if select_batches < 0:
            raise BadOption(f"select_batches counts training batches; got {select_batches}")
        if select_batches and data is None:
            raise BadOption("choosing among weight-matching candidates needs the models' data; give --data, or "
                            "--select-batches 0")
        if select_batches and algorithm != "auto":
            raise BadOption(f"--algorithm {algorithm} runs one alternation, so there is nothing to choose among; "
                            "drop --select-batches, or use --algorithm auto")
        # each candidate runs with its own settings (select.CANDIDATES); only the tolerance is passed on
        unused = [k for k, v in _GLMC_DEFAULTS.items() if k != "tol" and options.get(k, v) != v]
        if select_batches and unused:
            raise BadOption(f"choosing among weight-matching candidates runs each with its own settings, so "
                            f"{unused[0]} cannot apply; drop it, or turn the choice off with --select-batches 0")
        return select_batches
    if candidates is not None:  # asking for candidates asks for the selection
        return resolve_select(model, algorithm, SELECT_BATCHES, data, None, **options)
    if data is None or algorithm != "auto" or \
            any(options.get(k, v) != v for k, v in _GLMC_DEFAULTS.items()):
        return 0
    return SELECT_BATCHES if sum(p.numel() for p in model.parameters()) <= SELECT_UP_TO else 0


def wants_data(model, mode: str = "native", algorithm: str = "auto", **options) -> bool:
    """Whether weight matching would use the models' data: the paper's seen-token rows, or candidate selection."""
    options.pop("data", None)
    if options.get("select_batches") not in (None, 0):
        return True
    return resolve_algorithm(model, mode, algorithm, **options) == "paper" or bool(
        resolve_select(model, algorithm, data=True, **options))


def _align_paper(model_a, model_b, iterations, residual, data, progress, restarts, mode, head_maps):
    """align(algorithm="paper"): the paper's alternation (glmc/matching/paper.py), then in native mode the
    per-head maps that bring B's factors onto A's given its residual map and permutations."""
    if restarts not in (None, 1):
        raise BadOption("the paper's weight matching runs from one first map; drop --restarts, or use "
                        "--algorithm glmc")
    adapter, arch, view_a, view_b = canonical_pair(model_a, model_b)
    if mode == "circuit":
        adapter.io_spec(model_a)  # a model without a circuit form (RoPE, register tokens, …) is refused by name
    rows = seen_token_rows(data, view_a) if data is not None else None
    head_maps = fits_head_maps(head_maps, mode, arch)
    t, log = paper_transform(view_a, view_b, arch, iterations, residual, rows, progress, head_maps)
    seen = None if not rows else int(rows["embed"].sum())
    report = {"method": "weight", "mode": mode, "algorithm": "paper", "residual": residual_kind(arch, residual),
              "head_maps": head_maps, "restarts": 1, "seen_token_rows": seen, "iterations": log,
              "transform": t.describe(), "distance_before": log[0]["distance"]}
    return finish(model_a, model_b, adapter, arch, view_a, view_b, t, report)


def fits_head_maps(head_maps: bool, mode: str, arch) -> bool:
    """Whether per-head maps are fitted after an alternation: asked for, native mode (circuits absorb them), and
    declared by the model."""
    return head_maps and mode == "native" and any(r in arch.groups for r in ("qk", "ov"))


def paper_transform(view_a, view_b, arch, iterations, residual, rows, progress, head_maps: bool):
    """(π, log): the paper's alternation (glmc/matching/paper.py), then, with `head_maps`, the per-head maps that
    bring B's factors onto A's given its residual map and permutations."""
    from glmc.matching.paper import paper_weight_matching

    t, log = paper_weight_matching(view_a, view_b, arch, iterations, residual, rows, progress)
    from glmc.matching.declared import match_declared

    # the adapter's own groups (an MLM head's units, a pooler), which the paper's alternation does not know
    t.elements.update(match_declared(view_a, view_b, arch, {"residual": t.elements["residual"]}
                                     if "residual" in t.elements else {}))
    if head_maps:  # B moved once (a model-sized copy), then one pass fitting the maps alone
        maps = match_inner(view_a, apply_elements(view_b, t.elements, arch), arch, permutations=False)
        t = t.then(maps, arch)
        log.append({"step": "head maps", "distance": streamed_distance(view_a, view_b, t.elements, arch)})
    return t, log

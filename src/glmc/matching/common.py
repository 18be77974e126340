"""Pieces every alignment method shares: canonical pair in, checked aligned model out.

Alignment works on canonical views held as float32 CPU tensors (weight matching's solvers are CPU code);
learned matching moves them to the models' device deliberately. The caller's models are never moved or
modified: results are built as new models and placed on the device their input was on.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from glmc.adapters import adapter_for
from glmc.errors import IncompatibleModels
from glmc.invariance import probe_inputs
from glmc.matching.nullspace import fill_exact
from glmc.memory import FilePages, is_parked, paged_forward, park, release_keys, row_slices, trim
from glmc.models.evaluate import model_device
from glmc.symmetry.spec import NORM_BIASES, READERS, WRITERS, expand_keys, instantiate
from glmc.symmetry.structure import STREAM
from glmc.symmetry.transform import Transform, apply_elements
from glmc.view.canonical import canonicalise
from glmc.view.model_ops import logits

RESIDUAL_KEYS = WRITERS + NORM_BIASES + READERS

# Tensors the matching passes score (moves, residual crosses, head similarities) are float64 up to this many
# entries and float32 above: float32 is 2-5x faster, and models of up to ~256 wide (every tuning pair of
# benchmarks/suite.py) keep the float64 results their defaults were chosen on, which a rounding change can flip
# through near-tied assignments. GPT-2-124M's attention matrices (589,824 entries) are above it.
SCORING_FLOAT64_UP_TO = 1 << 18

# Unit similarities (an assignment's costs) whose product takes at least this many multiply-adds are formed from
# bfloat16 inputs (float32 sums, the result rounded to bfloat16) where the hardware multiplies bfloat16 natively
# (3.7× float32's speed on these AVX-512 cores: 790 against 212 GFLOP/s). An assignment needs the ranking of
# similarities, and the rounding (2^-9 relative per entry) only reorders units whose similarities are tied to that
# precision. GPT-2-124M's
# MLP (3072² × 768 ≈ 2^32.7) is above it; every model of the suite (benchmarks/suite.py; at most 1024² × 256) keeps
# the float32 products its defaults were chosen on.
SCORING_BFLOAT16_FROM = 1 << 32


def ranking_product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x·yᵀ in float32, from bfloat16 inputs where ranks_in_bfloat16: for similarities that only rank."""
    if ranks_in_bfloat16(x, y):
        return (x.bfloat16() @ y.bfloat16().T).float()  # float32 sums, rounded once to bfloat16 at the end
    return x.float() @ y.float().T


def ranks_in_bfloat16(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether ranking_product forms x·yᵀ from bfloat16 inputs: the product is big enough (SCORING_BFLOAT16_FROM)
    and bfloat16 products are native here."""
    return x.shape[0] * y.shape[0] * x.shape[-1] >= SCORING_BFLOAT16_FROM and bfloat16_native(x.device)


def bfloat16_native(device: torch.device) -> bool:
    """Whether bfloat16 matrix products are fast on `device` (CUDA with bfloat16 support; a CPU with oneDNN's
    bfloat16 kernels)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


@dataclass
class Alignment:
    model_a: object
    model_b: object
    transform: Transform | None
    report: dict = field(default_factory=dict)
    moved: str = "B"  # which endpoint the transform moved ("A" when A was the narrower model, embedded)
    # an embedded narrower model's null-space fill: canonical key -> tensor added after the transform
    # (glmc/matching/nullspace.py); None when there was none
    fill: dict | None = None


def check_compatible(model_a, model_b):
    """(adapter, arch) shared by both models; refuses pairs of different families or shapes."""
    adapter = adapter_for(model_a)
    if adapter_for(model_b).family != adapter.family:
        raise IncompatibleModels(f"cannot align a {adapter.family} model with a {adapter_for(model_b).family} model")
    arch_a, arch_b = adapter.arch(model_a), adapter.arch(model_b)
    shape = ("n_layer", "d_model", "n_head", "d_mlp")
    if any(getattr(arch_a, k) != getattr(arch_b, k) for k in shape):
        raise IncompatibleModels("models differ in shape "
                                 f"({', '.join(f'{k} {getattr(arch_a, k)} vs {getattr(arch_b, k)}' for k in shape)}); "
                                 "embed the narrower one first (glmc align NARROW WIDE)")
    if arch_a.groups != arch_b.groups:  # e.g. a different number of key/value heads, or qk_norm in only one
        differ = [r for r in {**arch_a.groups, **arch_b.groups} if arch_a.groups.get(r) != arch_b.groups.get(r)]
        raise IncompatibleModels(f"the models declare different symmetry groups ({', '.join(differ)}): they are "
                                 "not the same architecture, so they cannot be aligned or averaged")
    return adapter, arch_a


def canonical_pair(model_a, model_b, park_big: bool = False):
    """(adapter, arch, canonical view of A, canonical view of B); refuses pairs of different architectures.
    `park_big`: canonical_cpu_view's."""
    adapter, arch = check_compatible(model_a, model_b)
    return (adapter, arch, canonical_cpu_view(adapter, model_a, park_big),
            canonical_cpu_view(adapter, model_b, park_big))


# Views of at least this many entries are parked (glmc/memory.py park) by the streaming methods: the two float32
# views of a 1.1B pair are 8.8 GB, and weight matching reads them one block at a time (release_keys after each)
PARK_VIEWS_FROM = 1 << 28
PARK_TENSORS_FROM = 1 << 16  # entries; smaller tensors (norms, biases) stay resident


def canonical_cpu_view(adapter, model, park_big: bool = False) -> dict:
    """The model's canonical view, canonicalised, as float32 CPU tensors detached from the model. Each weight's
    mapped checkpoint pages go back to the OS as soon as it has been copied, and the freed temporaries after
    canonicalisation (glmc/memory.py): the peak is the view plus one tensor, not the view plus the checkpoint.
    `park_big`: a view of PARK_VIEWS_FROM entries or more is parked before it is returned, so a pair holds one
    view at a time resident while it is built, and the caller's streaming passes one block."""
    pages = FilePages()
    view = adapter.to_canonical(model, copy=_float32_cpu_copy, after=pages.release)
    view = canonicalise(view, adapter.arch(model), inplace=True)
    if park_big and sum(t.numel() for t in view.values()) >= PARK_VIEWS_FROM:
        park(view, list(view), min_elements=PARK_TENSORS_FROM)
    trim(force=True)
    return view


def _float32_cpu_copy(t: torch.Tensor) -> torch.Tensor:
    return t.to(device="cpu", dtype=torch.float64 if t.dtype == torch.float64 else torch.float32, copy=True)


def residual_keys(view, n_layer: int, arch=None) -> list[str]:
    """The tensors a residual fit stacks: the standard writers, norm biases and readers (residual axis last), and,
    with `arch`, every other tensor its residual group moves on the last axis alone, co- or contravariantly (an
    encoder's MLM-head input, a pooler). Tensors it moves otherwise (a norm's gain by "gain", a tied MLM head's
    dense layer on both axes) are left to residual_actions' callers."""
    keys = expand_keys(RESIDUAL_KEYS, n_layer, view)
    if arch is None or STREAM not in arch.groups:
        return keys
    acts = residual_actions(view, arch)
    plain = [k for k in keys if k not in acts or simple_residual(acts[k])]
    return plain + [k for k, a in acts.items() if k not in plain and simple_residual(a)]


def residual_actions(view, arch) -> dict[str, list]:
    """key -> [(axis, mode), …] of every action of the residual group on `view`."""
    group = instantiate({STREAM: arch.groups[STREAM]}, arch.n_layer, view.keys()).get(STREAM)
    out: dict[str, list] = {}
    for a in group.actions if group is not None else []:
        out.setdefault(a.key, []).append((a.axis % max(view[a.key].dim(), 1) - view[a.key].dim(), a.mode))
    return out


def simple_residual(acts: list) -> bool:
    """Whether the residual moves a tensor on its last axis alone, as a writer or a reader."""
    return len(acts) == 1 and acts[0][0] == -1 and acts[0][1] in ("co", "contra")


def view_distance(view_a: dict, view_b: dict) -> float:
    """Σ‖A − B‖² / Σ‖A‖² over every tensor: 0 when B's weights coincide with A's."""
    num = den = 0.0
    for k in view_a:
        num += squared_norm(view_a[k], view_b[k])
        den += squared_norm(view_a[k])
        release_keys([k], view_a, view_b)
    return num / den


def squared_norm(x: torch.Tensor, y: torch.Tensor | None = None) -> float:
    """‖x − y‖² (‖x‖² without y): float32 differences squared and summed in float64, a slice of rows at a time,
    so a vocabulary-sized matrix never gets a float64 or difference copy of its own (0.3 GB and 0.15 GB at 124M).
    Slices of 2^18 entries (1 MB) stay in cache: 4× faster than 2^21 with vector_norm's float64 cast."""
    x = x.reshape(-1, x.shape[-1]) if x.dim() > 1 else x.reshape(1, -1)
    y = None if y is None else y.reshape(x.shape)
    total = 0.0
    for rows in row_slices(*x.shape, 1 << 18):
        part = x[rows] if y is None else x[rows] - y[rows]
        total += float(part.pow(2).sum(dtype=torch.float64))
    return total


@torch.no_grad()
def max_logit_change(model, other, n: int = 2) -> float:
    x = probe_inputs(model, n=n).to(next(model.parameters()).device)
    with paged_forward(model):  # a model mapped from its checkpoint keeps about one layer resident
        ref = logits(model, x)
    with paged_forward(other):
        return float((ref - logits(other, x)).abs().max())


# the core invariant, checked on every aligned model before it is returned or written (the same bound as
# `glmc verify`)
FUNCTION_TOL = 1e-4


def model_shape(model) -> tuple[int, int, int, int, int]:
    """(layers, d_model, heads, d_head, d_mlp): the widths a pair must share or one must embed into the other."""
    arch = adapter_for(model).arch(model)
    return arch.n_layer, arch.d_model, arch.n_head, arch.d_head, arch.d_mlp


def finish(model_a, model_b, adapter, arch, view_a, view_b, transform: Transform, report: dict,
           tol: float = FUNCTION_TOL, probes: dict | None = None, fill_target: dict | None = None):
    """Build canonical A and B′ = π(B) as native models on the inputs' devices; check B′ has B's function before
    anything is returned (max |Δlogits| in the report; an error if over `tol`). With `probes` (an embedded
    narrower B, glmc/matching/nullspace.py), B′'s free reader weights are then filled with A's. Consumes the
    two views (the methods' own, from canonical_pair): each is emptied as its native model is built, so the
    peak holds about three model-sized copies rather than five."""
    if "distance_before" not in report:  # a method that has measured it already says so
        report["distance_before"] = view_distance(view_a, view_b)
    moved = move_consuming(view_b, transform, arch)
    filled = None
    if probes is not None:
        plain = moved
        moved, filled = fill_exact(view_a if fill_target is None else fill_target, plain, probes, transform, arch)
        report["null_space_fill"] = {"tensors": len(filled), "distance_without": view_distance(view_a, plain)}
        del plain
    if filled is not None or "distance_after" not in report:  # a method that has measured it already says so
        report["distance_after"] = view_distance(view_a, moved)
    b_aligned = adapter.from_canonical(moved, model_b, consume=True).to(model_device(model_b))
    trim(force=True)
    report["max_dlogits_b"] = max_logit_change(model_b, b_aligned)
    canon_a = adapter.from_canonical(view_a, model_a, consume=True).to(model_device(model_a))
    trim(force=True)
    report["max_dlogits_a"] = max_logit_change(model_a, canon_a)
    worst = max(report["max_dlogits_a"], report["max_dlogits_b"])
    if not worst <= tol:
        raise RuntimeError(f"alignment changed the function: max |Δlogits| {worst:.3g} > {tol:g} (a bug: please "
                           "report it with the models' configs)")
    return Alignment(canon_a, b_aligned, transform, report, fill=filled)


def layer_chunks(view: dict, n_layer: int) -> list[list[str]]:
    """The view's keys, one list per block, then each other tensor alone (embeddings, head, final norm): the
    streaming passes walk the model one chunk at a time, so none holds a transformed copy of the whole model,
    nor of two vocabulary-sized matrices at once."""
    blocks = [[k for k in view if k.startswith(f"blocks.{i}.")] for i in range(n_layer)]
    inside = {k for b in blocks for k in b}
    return blocks + [[k] for k in view if k not in inside]


def move_consuming(view: dict, transform: Transform, arch, keep_parked: bool = False) -> dict:
    """π(view), one chunk at a time (layer_chunks), popping each chunk's tensors from `view` as it is moved: one
    model-sized copy at the peak rather than two. `view` is left empty. `keep_parked`: a chunk read from parked
    tensors is parked again once moved (a merge of big models holds several moved views)."""
    out = {}
    for keys in layer_chunks(view, arch.n_layer):
        was_parked = keep_parked and any(is_parked(view[k]) for k in keys)
        out.update(apply_elements({k: view.pop(k) for k in keys}, transform.elements, arch, strict=False))
        if was_parked:
            park(out, keys, min_elements=PARK_TENSORS_FROM)
        trim()
    return out


def check_options(method: str, func, options: dict) -> None:
    """Refuse options `func` (a method's align) does not take, naming the ones it does."""
    params = inspect.signature(func).parameters
    valid = sorted(k for k, p in params.items() if p.kind is p.KEYWORD_ONLY or
                   (p.kind is p.POSITIONAL_OR_KEYWORD and k not in ("model_a", "model_b")))
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise TypeError(f"{method} matching got unknown option(s) {', '.join(unknown)}; "
                        f"its options: {', '.join(valid)}")

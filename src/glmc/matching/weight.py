"""Weight matching (data-free unless given data), in the native architecture: `align`, the entry point the rest of
glmc calls, and the policy that decides what it runs.

Which alternation runs: glmc's (glmc/matching/alternation.py, whose docstring states the algorithm) or the
paper's (glmc/matching/paper.py): `algorithm`, resolved by resolve_algorithm; "auto" runs the paper's in circuit
mode and, in native mode, the family's declared one (Arch.weight_matching: the paper's for GPT-2 below
PAPER_UP_TO parameters, glmc's otherwise). With data and below SELECT_UP_TO parameters, align instead runs several
alternations and keeps the one whose path midpoint has the lowest training loss (glmc/matching/select.py;
resolve_select, decision D4). glmc's alternation restarts from default_restarts first maps unless told otherwise
(decision D2). The numerical steps both alternations share live in residual_fit.py, assignments.py, heads.py and
mlp_units.py.
"""

from __future__ import annotations

from glmc.adapters import adapter_for
from glmc.errors import BadOption
from glmc.matching.alternation import TOL, default_restarts, weight_matching
from glmc.matching.common import canonical_pair, finish
from glmc.matching.nullspace import free_probes
from glmc.matching.paper import fits_head_maps, paper_transform
from glmc.matching.residual_fit import residual_kind, seen_token_rows
from glmc.matching.select import align_selected
from glmc.options import SELECT_BATCHES, WeightOptions
from glmc.options import WeightOptions as W

# the defaults are WeightOptions' (glmc/options.py), which documents each option


def align(model_a, model_b, options: WeightOptions | None = None, *, data=None, fill: bool = False):
    """Weight matching (module docstring) with `options`, a WeightOptions (glmc/options.py) that arrives whole:
    `residual`: None or "orthogonal" (the declared residual group) or a declared subgroup ("permutation");
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
    o = options if options is not None else WeightOptions()
    glmc_only = dict(fill=fill, head_similarity=o.head_similarity, tol=o.tol, seen_tokens=o.seen_tokens,
                     centred_keys=o.centred_keys, unit_similarity=o.unit_similarity, weighting=o.weighting,
                     restarts=o.restarts)
    n_select = resolve_select(model_a, o.algorithm, o.select_batches, data, o.candidates, **glmc_only)
    if n_select:
        return align_selected(model_a, model_b, data=data, batches=n_select, candidates=o.candidates,
                              iterations=o.iterations, residual=o.residual, tol=o.tol, mode=o.mode,
                              head_maps=o.head_maps, progress=o.progress)
    if resolve_algorithm(model_a, o.mode, o.algorithm, **glmc_only) == "paper":
        return _align_paper(model_a, model_b, o.iterations, o.residual, data, o.progress, o.restarts, o.mode,
                            o.head_maps)
    adapter, arch, view_a, view_b = canonical_pair(model_a, model_b, park_big=True)
    restarts = default_restarts(view_a) if o.restarts is None else o.restarts
    head_maps = o.head_maps and o.mode == "native"  # circuits absorb the per-head maps
    rows = seen_token_rows(data, view_a) if o.seen_tokens and data is not None else None
    t, log = weight_matching(view_a, view_b, arch, o.iterations, o.residual, head_maps, o.progress,
                             head_similarity=o.head_similarity, tol=o.tol, centred_keys=o.centred_keys,
                             unit_similarity=o.unit_similarity, rows=rows, weighting=o.weighting, restarts=restarts)
    report = {"method": "weight", "residual": residual_kind(arch, o.residual), "head_maps": head_maps,
              "restarts": restarts, "iterations": log,
              "transform": t.describe(), "distance_before": log[0]["distance"],
              # the alternation measured the distance of the transform it returns (a pass over both views fewer)
              "distance_after": log[-1]["distance"]}
    probes = free_probes(view_b, arch.n_layer) if fill else None
    return finish(model_a, model_b, adapter, arch, view_a, view_b, t, report, probes=probes)


ALGORITHMS = ("auto", "glmc", "paper")
# "auto" uses the family's declared algorithm (Arch.weight_matching) in native mode only up to this many parameters:
# the paper's L1 unit costs (d_mlp² rows of 2d+1 per layer) and fixed 15 iterations took GPT-2-124M's weight
# matching past 10 minutes on 2 cores, against ~60 s for glmc's (issue #18)
PAPER_UP_TO = 1 << 25
_GLMC_DEFAULTS = dict(fill=False, head_similarity=W.head_similarity, tol=TOL, seen_tokens=W.seen_tokens,
                      centred_keys=W.centred_keys, unit_similarity=W.unit_similarity, weighting=W.weighting,
                      restarts=W.restarts)


def resolve_algorithm(model, mode: str = "native", algorithm: str = "auto", **options) -> str:
    """"glmc" or "paper": what align runs. "auto": the paper's in circuit mode; in native mode the family's
    declared one (Arch.weight_matching) up to PAPER_UP_TO parameters, and glmc's when any option only glmc's
    alternation takes (restarts, weighting, fill, …) is given a value other than its default. Other options (any of
    align's) are ignored, so a caller may pass all of its own."""
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
# D4). `algorithm="paper"` runs the paper's alternation alone. SELECT_BATCHES lives with the options (glmc/options.py).
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

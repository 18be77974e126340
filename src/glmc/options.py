"""glmc's options: one frozen, typed class per method, the single source of every default.

    WeightOptions      glmc.align(method="weight")
    ActivationOptions  glmc.align(method="activation" | "activation-perm")
    LearnedOptions     glmc.align(method="learned" | "learned-perm")
    MergeOptions       glmc.merge (universe weight matching, and the learned refinement's training)
    BarrierOptions     glmc.barrier's evaluation (λ grid, split, batches, precision, seeds)

Each field carries its type, default, allowed choices where they are finite, bounds, and a one-line help text with
its unit; a value chosen by measurement names its decision (docs/decisions/, D1…). The CLI flags and their help
(glmc/cli/flags.py), the merge recipe's schema (glmc/cli/recipe.py), the options part of `help(glmc.align)`,
`help(glmc.barrier)` and `help(glmc.merge)`, and the matching functions' defaults are all read from here.

A name means one thing wherever it appears (tests/e2e/test_options.py checks that a name shared by classes has one
type and one help text; only its default may differ, e.g. `iterations`: 15 for a pair, 5 per universe round).
Renamed options keep their old spelling for one release (`RENAMED`), with a DeprecationWarning naming the new one.

This module imports nothing heavier than glmc.errors, so `import glmc` and `glmc --help` stay fast.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
import warnings
from dataclasses import dataclass, field

from glmc.errors import BadOption

# What a None means where the field's default is None and the choice is made later (the matching code reads these).
LEARNED_STEPS = 300  # learned matching's steps when no budget (steps, epochs, minutes) is given
PERM_LR = 0.0  # learned matching's permutation learning rate: weight matching's permutations kept (decision D7)
PERMUTATIONS_ONLY_LR = 0.02  # learned-perm's (the Git Re-Basin straight-through baseline learns nothing else)
SELECT_BATCHES = 4  # weight matching's candidate selection, training batches (decision D4)
PARAMETERS_2_25 = "2^25 parameters"

# old name -> new name, per options class (one release: 0.2 drops them)
RENAMED: dict[str, dict[str, str]] = {
    "ActivationOptions": {"batches": "train_batches", "batch_size": "train_batch_size"},
    "LearnedOptions": {"batch_size": "train_batch_size"},
    "MergeOptions": {"batch_size": "train_batch_size"},
    "BarrierOptions": {"dtype": "eval_dtype"},
}


def option(default, help: str, *, choices: tuple | None = None, low=None, high=None, open_low: bool = False,
           none: str | None = None, decision: str | None = None, meaning: str | None = None):
    """A field of an options class: `help` is one line with units; `none` says what a None default stands for;
    `decision`, the decision (docs/decisions/) that chose the default, where a shared help text cannot say it;
    `meaning`, the part of `help` every class sharing the name agrees on (default: all of it), where a class's
    help also lists what only it accepts."""
    return field(default=default, metadata={"help": help, "choices": choices, "low": low, "high": high,
                                            "open_low": open_low, "none": none, "decision": decision,
                                            "meaning": meaning or help})


# Help texts of names several classes share: one text, so one meaning (tests/e2e/test_options.py).
HELP = {
    "iterations": "Weight-matching iterations, at most (each: one residual fit and one matching of heads and units).",
    "mode": "native: the standard models of the original size; circuit: the paper's circuit form (heads as "
            "bias-augmented QK/OV circuits, interpolated whole).",
    "progress": "Show progress bars.",
    "residual": "Residual symmetry fitted: orthogonal (the residual group the family declares) or a declared "
                "subgroup (permutation: the correlation baseline; Llama: signed-permutation).",
    "restarts": "Weight matching alternates from this many first residual maps (1–3) and keeps the closest result.",
    "null_space": "Models of different widths: the embedded model's free reader weights, exact either way",
    "steps": "Training budget in optimiser steps (AdamW, one batch each).",
    "epochs": "Training budget in passes over the training split (instead of steps).",
    "minutes": "Training budget in wall-clock minutes (instead of steps).",
    "lr": "Peak learning rate of the latent transforms (AdamW, warm-up then cosine decay; the paper's code: 3e-4).",
    "perm_lr": "Learning rate of the permutation latents (straight-through; 0: permutations kept).",
    "sampler": "How λ is drawn in training (pairs): narrow λ ~ U(0.4, 0.6), uniform U(0, 1), fixed 0.5, "
               "gaussian N(0.5, 0.1) clipped.",
    "bias": "Added to each λ draw (pairs), clipped to [0, 1]: shifts training toward model B.",
    "train_batch_size": "Training batch size (sequences or images per batch) of a data-driven method.",
    "eval_every": "Validate (the barrier on validation batches) every this many steps.",
    "eval_batches": "Validation batches per check.",
    "patience": "Stop after this many validation checks without improvement (None: never).",
    "seed": "Random seed of a stochastic method (learned matching: its λ draws and batch order).",
}


def _shared(name: str, default, **kw):
    return option(default, HELP[name], **kw)


# what each null-space mode does; a class's help describes only the values it accepts (merge has no "learned")
NULL_SPACE_VALUES = {"learned": "trained with learned matching", "fixed": "the wide model's", "off": "zero"}


def _null_space(default, choices: tuple[str, ...], none: str | None = None):
    values = "; ".join(f"{c}: {NULL_SPACE_VALUES[c]}" for c in choices)
    return option(default, f"{HELP['null_space']} ({values}).", choices=choices, none=none,
                  meaning=HELP["null_space"])


MODES = ("native", "circuit")


class Options:
    """Behaviour shared by the options classes: validation on construction, field descriptions, renames."""

    method: typing.ClassVar[str] = ""  # how error messages name the method

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = _checked(self.method, f.name, getattr(self, f.name), hints[f.name], f.metadata)
            object.__setattr__(self, f.name, value)

    @classmethod
    def fields(cls) -> list[dataclasses.Field]:
        """The options' fields, in declaration order (each with .name, .default and .metadata help/choices/…)."""
        return list(dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def names(cls) -> list[str]:
        """The options' names."""
        return [f.name for f in cls.fields()]

    @classmethod
    def types(cls) -> dict[str, type]:
        """name -> its base type (int, float, bool, str or tuple), None left out."""
        hints = typing.get_type_hints(cls)
        return {f.name: _base(hints[f.name])[0] for f in cls.fields()}

    @classmethod
    def build(cls, options=None, _stacklevel: int = 2, **kw):
        """An instance from `options` (an instance of this class, or None) with keyword values on top. An unknown
        name raises TypeError listing the valid ones; a renamed one warns (DeprecationWarning) and is used; a bad
        value raises BadOption. (`_stacklevel`: frames from here up to the caller the warning names.)"""
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"{cls.method} takes {cls.__name__}, not {type(options).__name__}")
        kw = renamed(cls, kw, _stacklevel + 1)
        unknown = sorted(set(kw) - set(cls.names()))
        if unknown:
            raise TypeError(f"{cls.method} got unknown option(s) {', '.join(unknown)}; its options: "
                            f"{', '.join(sorted(cls.names()))}")
        return dataclasses.replace(options, **kw) if options is not None else cls(**kw)  # type: ignore[type-var]

    def as_dict(self) -> dict:
        """{name: value} of every field."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def changed(self) -> dict:
        """{name: value} of the fields that differ from their defaults."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)  # type: ignore[arg-type]
                if getattr(self, f.name) != f.default}

    @classmethod
    def describe(cls, indent: str = "    ") -> str:
        """The fields as docstring lines: `name=default (type)` and the help text (generated; see the module)."""
        hints = typing.get_type_hints(cls)
        lines = []
        for f in cls.fields():
            lines.append(f"{indent}{f.name}={f.default!r} ({type_name(hints[f.name])})")
            lines.append(f"{indent}    {help_text(f)}")
        return "\n".join(lines)


def help_text(f: dataclasses.Field) -> str:
    """A field's help, with its choices and what a None default stands for."""
    meta = f.metadata
    text = meta["help"] + (f" Default: decision {meta['decision']}." if meta["decision"] else "")
    if meta["choices"]:
        text += f" Choices: {', '.join(map(str, meta['choices']))}."
    if f.default is None and meta["none"]:
        text += f" None: {meta['none']}."
    return text


def renamed(cls, kw: dict, stacklevel: int = 3) -> dict:
    """`kw` with renamed options under their new names, each warning once (DeprecationWarning) with the new name."""
    old = RENAMED.get(cls.__name__, {})
    out = dict(kw)
    for name in [k for k in kw if k in old]:
        new = old[name]
        if new in kw:
            raise TypeError(f"{cls.method}: give {new} only ({name} is its old name)")
        warnings.warn(f"{cls.method} option {name!r} is now {new!r}; the old name goes in glmc 0.2",
                      DeprecationWarning, stacklevel=stacklevel)
        out[new] = out.pop(name)
    return out


def _base(hint) -> tuple[type, bool]:
    """(base type, whether None is allowed) of `int | None`, `tuple[str, ...]`, …"""
    args = typing.get_args(hint)
    optional = type(None) in args
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint)
    return (origin or hint), optional


def type_name(hint) -> str:
    """A field's type as written: `int | None`, `tuple[str, ...]`."""
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _checked(method: str, name: str, value, hint, meta):
    """`value` validated against the field's type, choices and bounds (ints accepted as floats, comma-separated
    strings and lists as tuples); a bad one raises BadOption in one line."""
    base, optional = _base(hint)
    where = f"{method} option {name}"
    if value is None:
        if optional:
            return None
        raise BadOption(f"{where} may not be None; give a{'n' if base is int else ''} {base.__name__}")
    if base is str and type(value).__name__ == "dtype":  # a torch dtype, by its name
        value = str(value).removeprefix("torch.")
    if base is tuple:
        value = _sequence(where, value, typing.get_args(typing.get_args(hint)[0] if optional else hint))
    elif base is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    elif not isinstance(value, base) or (base is not bool and isinstance(value, bool)):
        what = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[base]
        raise BadOption(f"{where} must be {what}, got {value!r}")
    choices = meta["choices"]
    if choices and value not in choices:
        raise BadOption(f"{where} must be one of {', '.join(map(str, choices))}, got {value!r}")
    low, high = meta["low"], meta["high"]
    if low is not None and (value < low or (meta["open_low"] and value == low)):
        raise BadOption(f"{where} must be {'>' if meta['open_low'] else '≥'} {low}, got {value!r}")
    if high is not None and value > high:
        raise BadOption(f"{where} must be ≤ {high}, got {value!r}")
    return value


def _sequence(where: str, value, args) -> tuple:
    item = args[0] if args else str
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        try:
            value = [item(p) for p in parts]
        except ValueError:
            raise BadOption(f"{where} must be a comma-separated list of {item.__name__}s, got {value!r}") from None
    if not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(v, item) and not isinstance(v, bool) for v in value):
        raise BadOption(f"{where} must be a non-empty list of {item.__name__}s, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class WeightOptions(Options):
    """Weight matching (`glmc.align(method="weight")`): data-free, unless given data for the paper's seen tokens
    or for choosing among candidate alternations. The fields are listed below (generated)."""

    method: typing.ClassVar[str] = "weight matching"

    iterations: int = _shared("iterations", 15, low=1, decision="D11")
    tol: float = option(3e-3, "Stop when an iteration lowers the weight distance ‖A−π(B)‖²/‖A‖² by less than this "
                        "fraction (decision D11).", low=0.0)
    residual: str = _shared("residual", "orthogonal")
    head_maps: bool = option(True, "Fit the per-head invertible maps (native mode only: circuits absorb them).")
    head_similarity: str = option("auto", "How heads are compared: auto (per rotary plane under RoPE, else whole "
                                  "circuits) or circuit (whole QK circuits).", choices=("auto", "circuit"))
    mode: str = _shared("mode", "native", choices=MODES)
    restarts: int | None = _shared("restarts", None, low=1, high=3,
                                   none=f"2 up to {PARAMETERS_2_25}, else 1, as two cost twice the time (decision D2)")
    algorithm: str = option("auto", "Which alternation: glmc's, or the paper's (its costs, residual blocks and 15 "
                            "iterations; native mode adds per-head maps); auto: the candidate selection where it "
                            "applies, else paper in circuit mode and the family's own in native mode up to "
                            f"{PARAMETERS_2_25} (decisions D3, D10).", choices=("auto", "glmc", "paper"))
    select_batches: int | None = option(
        None, "With data: run every candidate alternation and keep the one whose path midpoint has the lowest loss "
        "on this many training batches of 32 (0: off) (decision D4).", low=0,
        none=f"{SELECT_BATCHES} up to {PARAMETERS_2_25} with algorithm auto and data, when no glmc-only option is set")
    candidates: tuple[str, ...] | None = option(
        None, "The alternations select_batches chooses among, comma-separated: glmc, paper, glmc-l1, "
        "glmc-unweighted (decision D4).", none="all four, less paper for grouped-query models")
    seen_tokens: bool = option(False, "The embedding's part of the residual fit uses only tokens seen in the "
                               "training split of the data (decision D1).")
    centred_keys: bool = option(False, "Heads compared on what attention scores see (centred keys) (decision D1).")
    unit_similarity: str = option("inner", "MLP units compared by inner products, cosines or L1 distances of their "
                                  "signatures (decision D1).", choices=("inner", "cosine", "l1"))
    weighting: str = option("norms", "Residual fit's tensor weights: by norms, by row counts, or none "
                            "(decision D1).", choices=("norms", "rows", "none"))
    null_space: str | None = _null_space(None, ("learned", "fixed", "off"), none="fixed")
    progress: bool = _shared("progress", True)


@dataclass(frozen=True)
class ActivationOptions(Options):
    """Activation matching (`glmc.align(method="activation" | "activation-perm")`): correlations of both models'
    activations on training batches. The fields are listed below (generated)."""

    method: typing.ClassVar[str] = "activation matching"

    train_batches: int = option(32, "Training batches whose activations are correlated.", low=1)
    train_batch_size: int = _shared("train_batch_size", 32, low=1)
    residual: str = _shared("residual", "orthogonal", decision="D8")
    null_space: str | None = _null_space(None, ("learned", "fixed", "off"), none="fixed")
    progress: bool = _shared("progress", True)


@dataclass(frozen=True)
class LearnedOptions(Options):
    """Learned matching (`glmc.align(method="learned" | "learned-perm")`, the paper's Algorithm 1, started from
    weight matching): AdamW on latent transforms, λ drawn on the path. The fields are listed below (generated)."""

    method: typing.ClassVar[str] = "learned matching"

    steps: int | None = _shared("steps", None, low=1, none=f"{LEARNED_STEPS} when neither epochs nor minutes is given")
    epochs: float | None = _shared("epochs", None, low=0.0, open_low=True)
    minutes: float | None = _shared("minutes", None, low=0.0, open_low=True)
    lr: float = _shared("lr", 2e-2, low=0.0, open_low=True, decision="D6")
    perm_lr: float | None = _shared("perm_lr", None, low=0.0,
                                    none=f"learned: {PERM_LR:g}, weight matching's permutations kept (decision D7); "
                                         f"learned-perm: {PERMUTATIONS_ONLY_LR:g}")
    sampler: str | None = _shared("sampler", None, choices=("narrow", "uniform", "fixed", "gaussian"),
                                  none="narrow; uniform for models of different widths (decision D13)")
    bias: float = _shared("bias", 0.0)
    train_batch_size: int = _shared("train_batch_size", 32, low=1)
    eval_every: int = _shared("eval_every", 50, low=1)
    eval_batches: int = _shared("eval_batches", 8, low=1)
    patience: int | None = _shared("patience", None, low=1)
    seed: int = _shared("seed", 0)
    soft: bool = option(False, "Sinkhorn soft permutations in training (rounded to exact ones at the end).")
    iterations: int = _shared("iterations", 15, low=1)
    restarts: int | None = _shared("restarts", None, low=1, high=3, none="1")
    mode: str = _shared("mode", "native", choices=MODES)
    autocast: str | None = option(None, "Run the training steps' forward and backward in this precision (latents, "
                                  "validation and result stay float32; for GPUs).", choices=("bfloat16", "float16"),
                                  none="the models' own")
    checkpoint: bool = option(False, "Gradient checkpointing: recompute each block's activations in backward "
                              "(less memory, about a third more compute).")
    null_space: str | None = _null_space(None, ("learned", "fixed", "off"), none="learned")
    progress: bool = _shared("progress", True)


@dataclass(frozen=True)
class MergeOptions(Options):
    """Merging (`glmc.merge`): universe weight matching, and for method="learned" the joint refinement on the
    simplex, whose defaults differ from the paper's (decision D14). The fields are listed below (generated)."""

    method: typing.ClassVar[str] = "merge"

    rounds: int = option(3, "Universe rounds: align every model to the average, re-average.", low=1)
    iterations: int = _shared("iterations", 5, low=1)
    mode: str = _shared("mode", "native", choices=MODES)
    null_space: str = _null_space("fixed", ("fixed", "off"))
    steps: int = _shared("steps", LEARNED_STEPS, low=1)
    epochs: float | None = _shared("epochs", None, low=0.0, open_low=True)
    minutes: float | None = _shared("minutes", None, low=0.0, open_low=True)
    lr: float = _shared("lr", 1e-2, low=0.0, open_low=True, decision="D14")
    perm_lr: float = _shared("perm_lr", 0.02, low=0.0)
    concentration: float = option(1.0, "Refinement draws λ ~ Dirichlet(concentration) on the simplex (1: uniform; "
                                  "the paper: 0.1) (decision D14).", low=0.0, open_low=True)
    simplex_score: str = option("edges", "Validation scores the centre of the simplex, or the centre and every "
                                "edge's midpoint (decision D14).", choices=("edges", "centre"))
    sampler: str = _shared("sampler", "narrow", choices=("narrow", "uniform", "fixed", "gaussian"))
    bias: float = _shared("bias", 0.0)
    train_batch_size: int = _shared("train_batch_size", 32, low=1)
    eval_every: int = _shared("eval_every", 50, low=1)
    eval_batches: int = _shared("eval_batches", 8, low=1)
    patience: int | None = _shared("patience", None, low=1)
    seed: int = _shared("seed", 0)
    weight_decay: float = option(0.0, "Refinement's AdamW weight decay.", low=0.0)
    warmup: float = option(0.05, "Refinement's linear warm-up, as a fraction of its steps.", low=0.0, high=1.0)
    progress: bool = _shared("progress", True)


@dataclass(frozen=True)
class BarrierOptions(Options):
    """A barrier's evaluation (`glmc.barrier`): the λ grid (or simplex grid), which batches, in which precision,
    and the seeds of repeated stochastic alignments. The fields are listed below (generated)."""

    method: typing.ClassVar[str] = "barrier"

    points: int = option(11, "λ grid points on the path, endpoints included.", low=2)
    split: str = option("test", "Which split of the data is evaluated.",
                        choices=("train", "val", "test"))
    batch_size: int = option(32, "Evaluation batch size (sequences or images per batch).", low=1)
    max_batches: int | None = option(None, "Evaluate on at most this many batches.", low=1, none="all")
    mode: str = _shared("mode", "native", choices=MODES)
    eval_dtype: str | None = option(None, "Precision of the interpolated models during evaluation (the averages "
                                    "are formed in the endpoints' precision first).",
                                    choices=("float32", "bfloat16", "float16"),
                                    none="the endpoints' (the compute dtype)")
    seeds: tuple[int, ...] | None = option(
        None, "Align a stochastic method (learned, learned-perm) once per seed and report the barrier's spread.",
        none="one alignment")
    resolution: int = option(10, "3 models: simplex grid steps per edge.", low=1)
    samples: int = option(64, "More than 3 models: random simplex points evaluated.", low=1)
    progress: bool = _shared("progress", True)


ALL: tuple[type[Options], ...] = (WeightOptions, ActivationOptions, LearnedOptions, MergeOptions, BarrierOptions)


def field_of(cls: type[Options], name: str) -> dataclasses.Field:
    """One field of an options class by name."""
    return next(f for f in cls.fields() if f.name == name)


for _cls in ALL:  # each class's help lists its fields
    _cls.__doc__ = f"{inspect.cleandoc(_cls.__doc__ or '')}\n\nFields:\n{_cls.describe()}\n"

"""Alignment methods as declared records: one `Method` per method, from which every list of methods, CLI choice,
help text, capability check and documentation table is derived (tests/e2e/test_method_records.py checks that no
second list exists). A method from another package is one record behind an entry point (glmc/plugins.py):

    METHOD = Method(name="my-method", summary="…", align="my_package.matching:align", options=MyOptions)

Its `align(model_a, model_b, options, *, data=None, ...)` returns a glmc.matching.common.Alignment (both endpoints,
the transform as glmc.symmetry Elements, a report dict); `options` is an instance of its options class
(glmc/options.py), built and validated from the caller's keywords and passed whole; its keyword-only parameters are
what glmc hands it besides (`data` when it takes data, `fill` for an embedded narrower model). This module imports
no torch: listing the methods costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glmc import plugins
from glmc.errors import BadOption
from glmc.options import ActivationOptions, LearnedOptions, Options, WeightOptions

DATA = ("never", "optional", "required")


@dataclass(frozen=True, kw_only=True)
class Method:
    """One alignment method.

    name: how the API (`glmc.align(a, b, name)`), the CLI (`--method`, `--align`) and results name it.
    summary: one line for help texts and the documentation's table.
    align: "module:function" (imported when first used) or the function itself, `(model_a, model_b, options,
        *, data=None, ...) -> Alignment`; None for the raw pair ("none").
    options: its options class (its fields are its keyword options and its CLI flags; an instance reaches `align`
        whole); None: it takes none (but a pair of different widths' null_space).
    preset: what this method fixes, options or `align` keywords (activation-perm: residual="permutation";
        learned-perm: permutations_only=True).
    data: "never", "optional" (only when `wants_data(model, **options)` says so) or "required".
    stochastic: its result depends on its options' `seed` (glmc barrier --seeds repeats it, reports the spread).
    trains: it trains the transform on the task loss, so it can also train an embedded model's free reader
        weights (null_space="learned", its default there) and draws λ over the whole path for pairs of widths.
    merge: how glmc merge and glmc.merge run it (universe alignment of k models), "module:function" or the
        function, with glmc.matching.merge.merge_models' signature; None: it cannot merge.
    simplex: barriers of 3+ models run it (through the merge's universe alignment).
    """

    name: str
    summary: str
    align: Any = None
    options: type[Options] | None = None
    preset: Mapping[str, Any] = field(default_factory=dict)
    data: str = "never"
    wants_data: Any = None
    stochastic: bool = False
    trains: bool = False
    merge: Any = None
    simplex: bool = False

    def __post_init__(self):
        if not self.name or self.name != self.name.strip().lower() or "," in self.name:
            raise ValueError(f"a method's name is lower case, without commas or spaces around it: {self.name!r}")
        if self.data not in DATA:
            raise ValueError(f"method {self.name!r}: data must be one of {', '.join(DATA)}, not {self.data!r}")
        if (self.data == "optional") != (self.wants_data is not None):
            raise ValueError(f"method {self.name!r}: data='optional' goes with wants_data (and only it)")
        if self.options is not None and not (isinstance(self.options, type) and issubclass(self.options, Options)):
            raise ValueError(f"method {self.name!r}: options must be a glmc.options.Options subclass")
        if self.stochastic and (self.options is None or "seed" not in self.options.names()):
            raise ValueError(f"method {self.name!r} is stochastic, so its options have a 'seed' field (glmc barrier "
                             "--seeds repeats it over seeds)")
        if self.align is None and (self.options is not None or self.data != "never"):
            raise ValueError(f"method {self.name!r} has no align function, so it takes no options and no data")

    def function(self):
        """The align function (imported on first use), or None for the raw pair."""
        return plugins.resolve(self.align)

    def merge_function(self):
        """The merge function (imported on first use); BadOption if this method cannot merge."""
        if self.merge is None:
            raise BadOption(f"glmc cannot merge with {self.name!r}; choose {', '.join(names(merges=True))}")
        return plugins.resolve(self.merge)

    def needs_data(self, model, options: Mapping) -> bool:
        """Whether this alignment of `model` reads data, given its options."""
        if self.data == "optional":
            return bool(plugins.resolve(self.wants_data)(model, **{k: v for k, v in options.items() if k != "data"}))
        return self.data == "required"


# universe weight matching of k models, then, for a method that trains, every transform refined on the simplex
MERGE_MODELS = "glmc.matching.merge:merge_models"

BUILTIN = (
    Method(name="none", summary="the raw checkpoints, averaged as they are (the paper's vanilla averaging)",
           simplex=True),
    Method(name="weight", summary="data-free weight matching: the residual map, head permutations, per-head "
           "maps and MLP units that bring B's weights closest to A's", align="glmc.matching.weight:align",
           options=WeightOptions, data="optional", wants_data="glmc.matching.weight:wants_data",
           merge=MERGE_MODELS, simplex=True),
    Method(name="activation", summary="activation matching: the same groups, fitted to the correlations of both "
           "models' activations on training batches", align="glmc.matching.activation:align",
           options=ActivationOptions, data="required"),
    Method(name="activation-perm", summary="activation matching with a permutation of the residual stream (Verma "
           "& Elbayad's baseline)", align="glmc.matching.activation:align", options=ActivationOptions,
           preset={"residual": "permutation"}, data="required"),
    Method(name="learned", summary="the paper's learned matching (Algorithm 1): every transform trained on the "
           "loss along the path, started from weight matching", align="glmc.matching.learned:align",
           options=LearnedOptions, data="required", stochastic=True, trains=True, merge=MERGE_MODELS, simplex=True),
    Method(name="learned-perm", summary="learned matching of permutations only (Git Re-Basin's straight-through "
           "estimator)", align="glmc.matching.learned:align", options=LearnedOptions,
           preset={"permutations_only": True}, data="required", stochastic=True, trains=True),
)

REGISTRY = plugins.Registry("method", Method, "name", BUILTIN)
register_method = REGISTRY.register


def methods() -> dict[str, Method]:
    """Every registered method by name: glmc's own, then installed plugins' (entry points glmc.methods)."""
    return REGISTRY.all()


def method(name: str) -> Method:
    """The record of the method `name`; an unknown name is refused, listing the known ones."""
    known = methods()
    if name not in known:
        raise BadOption(f"unknown alignment method {name!r}; choose from {', '.join(known)}")
    return known[name]


def names(**capabilities) -> list[str]:
    """The names of the methods with every given capability, in registration order: names(simplex=True),
    names(trains=True); `aligns=True`: those with an align function (what `glmc align --method` offers),
    `merges=True`: those with a merge function (glmc merge's)."""
    aligns, merges = capabilities.pop("aligns", None), capabilities.pop("merges", None)
    out = []
    for m in methods().values():
        if aligns is not None and (m.align is not None) != aligns:
            continue
        if merges is not None and (m.merge is not None) != merges:
            continue
        if all(getattr(m, k) == v for k, v in capabilities.items()):
            out.append(m.name)
    return out


def option_classes() -> tuple[type[Options], ...]:
    """The options classes of the alignment methods, each once, in registration order: the flags of glmc align
    and glmc barrier, and the names any alignment option may have."""
    out: list[type[Options]] = []
    for m in methods().values():
        if m.options is not None and m.options not in out:
            out.append(m.options)
    return tuple(out)


def methods_doc(records=None) -> str:
    """The generated options part of `help(glmc.align)`: the fields of every method (of `records`; default: all
    registered), by class. glmc's own docstrings list BUILTIN's, so importing glmc loads no plugin."""
    records = list(methods().values() if records is None else records)
    classes = list(dict.fromkeys(m.options for m in records if m.options is not None))
    parts = [f"{'/'.join(m.name for m in records if m.options is cls)} (glmc.{cls.__name__}):\n"
             f"{cls.describe('        ')}" for cls in classes]
    return "\n".join(f"    {p}" for p in parts)


def summary_lines(names_: list[str] | None = None) -> str:
    """"name: summary" for each method (all by default), joined by "; ": a help text's list of methods."""
    known = methods()
    return "; ".join(f"{n}: {known[n].summary}" for n in (names_ or list(known)))

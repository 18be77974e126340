"""glmc: generalized linear mode connectivity for Transformers.

    import glmc
    a, b = glmc.load_model("runs/g0"), glmc.load_model("runs/g1")
    al = glmc.align(a, b, method="weight")            # al.model_b = π(B), same function as B
    curve = glmc.barrier(a, b, align=al)              # data from the models' glmc.json, or data="shakespeare"
    print(curve.barrier, curve.barrier_mean)
    merged = glmc.merge([a, b], method="weight").model

help(glmc.align), help(glmc.barrier), … document each call; each method's options are a frozen class
(glmc.WeightOptions, glmc.LearnedOptions, …: the single source of every default), passed as `options=` or as
keywords. The names below are imported on first use, so
`import glmc` (and the CLI) stays fast.
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["load_model", "save_model", "convert", "inspect",
           "align", "barrier", "merge", "verify", "evaluate", "Alignment", "Curve",
           "Simplex", "Merge", "Transform", "Verification", "__version__",
           "WeightOptions", "ActivationOptions", "LearnedOptions", "MergeOptions", "BarrierOptions",
           "sweep", "SweepResult"]
# the options classes (glmc/options.py) come without the API's imports (torch), so reading them stays fast
_OPTIONS = ("WeightOptions", "ActivationOptions", "LearnedOptions", "MergeOptions", "BarrierOptions")
# sweeps run above the API (glmc/experiments): their function and result come from there
_STUDIES = ("sweep", "SweepResult")

if TYPE_CHECKING:
    from glmc.api import (
        ActivationOptions,
        Alignment,
        BarrierOptions,
        Curve,
        LearnedOptions,
        Merge,
        MergeOptions,
        Simplex,
        Transform,
        Verification,
        WeightOptions,
        align,
        barrier,
        convert,
        evaluate,
        inspect,
        load_model,
        merge,
        save_model,
        verify,
    )
    from glmc.experiments.study import SweepResult, sweep


def __getattr__(name: str):
    if name in _OPTIONS:
        return getattr(importlib.import_module("glmc.options"), name)
    if name in _STUDIES:
        return getattr(importlib.import_module("glmc.experiments.study"), name)
    if name in __all__:
        return getattr(importlib.import_module("glmc.api"), name)
    if importlib.util.find_spec(f"glmc.{name}") is not None:  # subpackages, e.g. glmc.data after `import glmc`
        return importlib.import_module(f"glmc.{name}")
    raise AttributeError(f"module 'glmc' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

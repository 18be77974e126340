"""glmc's Python API (re-exported as `glmc.align`, `glmc.barrier`, …; see glmc/__init__.py)."""

from glmc.api.checkpoints import convert, inspect
from glmc.api.functions import Verification, align, barrier, evaluate, load_model, merge, save_model, verify
from glmc.api.results import Alignment, Curve, Merge, Simplex
from glmc.api.transform import Transform
from glmc.options import ActivationOptions, BarrierOptions, LearnedOptions, MergeOptions, WeightOptions

__all__ = ["load_model", "save_model", "convert", "inspect",
           "align", "barrier", "merge", "verify", "evaluate", "Alignment", "Curve",
           "Simplex", "Merge", "Transform", "Verification",
           "WeightOptions", "ActivationOptions", "LearnedOptions", "MergeOptions", "BarrierOptions"]

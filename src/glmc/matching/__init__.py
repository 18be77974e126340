"""Alignment methods: bring model B next to model A by a symmetry transform.

Every method returns an `Alignment`: the two endpoints to interpolate (A as used, B′ = π(B)), the transform
(None for `none`) and a report dict. For every method but `none`, both endpoints are canonical (LayerNorm
gains folded, writers centred; same function as the inputs), since the residual symmetries live there.
`none` is the paper's vanilla averaging: the raw checkpoints.
"""

from __future__ import annotations

import copy
import inspect

from glmc.errors import BadOption, IncompatibleModels
from glmc.matching.common import Alignment, check_options, max_logit_change, model_shape
from glmc.methods import method as method_record
from glmc.methods import methods, option_classes
from glmc.models.evaluate import model_device
from glmc.options import RENAMED
from glmc.paths.interpolate import Interpolation
from glmc.view.model_ops import widen_model

NULL_SPACE_MODES = ("learned", "fixed", "off")
# options `align` itself consumes for pairs of different widths, before a method sees them
PAIR_OPTIONS = ("null_space",)


def available_methods() -> list[str]:
    return list(methods())


def _method_function(method: str):
    return method_record(method).function()  # an unknown method is refused by name


def method_options(method: str, options: dict) -> dict:
    """The subset of `options` (one set shared by several methods, as the CLI has) that `method` takes (the
    fields of its options class, glmc/options.py, and their old names); an option no method takes is refused."""
    record = method_record(method)  # an unknown method is refused by name
    known = {k for cls in option_classes() for k in _names(cls)} | set(PAIR_OPTIONS) | {"data"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown alignment option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    take = set(_names(record.options)) if record.options is not None else set()
    # the data a method trains on (or selects with) is not an option of its class, but goes where it is taken
    func = record.function()
    take |= {"data"} & set(_accepted(func) if func is not None else ())
    return {k: v for k, v in options.items() if k in take or k in PAIR_OPTIONS}


def _names(cls) -> list[str]:
    return cls.names() + list(RENAMED.get(cls.__name__, {}))


def _accepted(func) -> list[str]:
    """What a method's align function takes besides the two models and its options object, by keyword (data,
    fill, …: glmc's own, not the options class's)."""
    return [k for k, p in inspect.signature(func).parameters.items() if p.kind is p.KEYWORD_ONLY]


def align(model_a, model_b, method: str = "weight", options=None, **kw) -> Alignment:
    """Bring `model_b` next to `model_a` by a symmetry transform; see the module docstring. `options`: the
    method's options object (its record's class, glmc/options.py), and keywords on top: its fields, validated by
    the class (an unknown one raises TypeError, a bad value BadOption), and what the method's align function takes
    besides (data, fill, …). The method's function gets the options object whole."""
    record = method_record(method)
    func = record.function()
    if model_shape(model_a) != model_shape(model_b):
        return _align_widths(model_a, model_b, method, options, **kw)
    kw.pop("null_space", None)  # only pairs of different widths have a null space to fill
    if func is None:
        if options is not None:
            raise TypeError(f"method {method!r} takes no options object")
        check_options(method, lambda: None, kw)
        return Alignment(model_a, model_b, None, {"method": method})
    kw.update(record.preset)
    context = {k: kw.pop(k) for k in list(kw) if k in _accepted(func)}
    if record.options is None:  # a method without options: its keywords are its own
        check_options(method, func, kw)
        return func(model_a, model_b, **context, **kw)
    return func(model_a, model_b, record.options.build(options, _stacklevel=3, **kw), **context)


def _align_widths(model_a, model_b, method, options=None, **kw) -> Alignment:
    """Different widths: embed the narrower model exactly into the wider architecture (glmc/view/widen.py), then
    align it to the wider one, which stays the reference; the pair keeps the caller's order (A first)."""
    record = method_record(method)
    func = record.function()
    if func is not None and "fill" not in _accepted(func):  # e.g. a plugin's method written for one width
        raise IncompatibleModels(f"the models differ in width ({model_shape(model_a)} vs {model_shape(model_b)}) and "
                                 f"method {method!r} aligns models of one width only (its align function takes no "
                                 "'fill'); use weight, activation or learned matching")
    (la, da, ha, dha, na), (lb, db, hb, dhb, nb) = model_shape(model_a), model_shape(model_b)
    if la != lb:
        raise IncompatibleModels(f"models differ in depth ({la} vs {lb} layers); glmc aligns widths, not depths")
    a_narrow = (da, ha, dha, na) <= (db, hb, dhb, nb)
    narrow, wide = (model_a, model_b) if a_narrow else (model_b, model_a)
    w = model_shape(wide)
    if any(x > y for x, y in zip(model_shape(narrow), w)):
        raise IncompatibleModels("one model must be at most as wide as the other in every width (residual, heads, "
                                 f"head size, MLP): {model_shape(model_a)} vs {model_shape(model_b)}")
    embedded = widen_model(narrow, w[1], n_head=w[2], d_mlp=w[4], d_head=w[3]).to(model_device(narrow))
    # the pair is interpolated with the wide model's LayerNorm eps; report what that does to the embedded one
    eps_effect = _eps_effect(embedded, wide)
    learned = record.trains
    if learned and kw.get("sampler") is None and getattr(options, "sampler", None) is None:
        # λ over the whole path: the paper's code draws λ nearer the wide model, which leaves the barrier on the
        # narrow side of the path untrained (decision D13)
        kw["sampler"] = "uniform"
    # the embedded model's free reader weights (glmc/matching/nullspace.py): "learned" trains them with the other
    # latents, "fixed" copies the wide model's, "off" leaves the zeros of the embedding
    null_space = kw.pop("null_space", None) or getattr(options, "null_space", None) or \
        ("learned" if learned else "fixed")
    if null_space not in NULL_SPACE_MODES:
        raise BadOption(f"unknown null-space mode {null_space!r}; choose from {', '.join(NULL_SPACE_MODES)}")
    if null_space == "learned" and not learned:
        raise BadOption("null_space='learned' needs learned matching (it trains on the task loss)")
    if func is not None:
        kw["fill"] = null_space != "off"
    if learned:
        kw["learn_free"] = null_space == "learned"
    inner = align(wide, embedded, method, options, **kw)
    widened = {"from": list(model_shape(narrow)), "to": list(w), "narrow_is": "A" if a_narrow else "B",
               "eps_effect_max_dlogits": eps_effect, "embedding_max_dlogits": max_logit_change(narrow, embedded)}
    report = {**inner.report, "null_space": null_space if inner.transform is not None else "off",
              "widened": widened}
    pair = (inner.model_b, inner.model_a) if a_narrow else (inner.model_a, inner.model_b)
    return Alignment(pair[0], pair[1], inner.transform, report, moved="A" if a_narrow else "B", fill=inner.fill)


def _eps_effect(embedded, wide) -> float:
    probe = Interpolation([wide, embedded]).set(1.0)  # embedded weights in a model with the wide model's eps
    return max_logit_change(embedded, copy.deepcopy(probe))

"""Command-line flags generated from the options classes (glmc/options.py): a flag's name, type, bounds, choices,
default and help are its field's, so `glmc align --help` shows what `help(glmc.align)` does.

    @method_flags(WeightOptions, LearnedOptions)     every field of the classes, once per name
    @flag(BarrierOptions, "points")                  one field
"""

from __future__ import annotations

import click

from glmc.options import RENAMED, Options, field_of


def dashed(name: str) -> str:
    """A field's flag: --train-batch-size for train_batch_size."""
    return "--" + name.replace("_", "-")


def flag(cls: type[Options], name: str, *decls: str, **override):
    """The click option of one field (`decls`: extra declarations, e.g. a parameter name)."""
    f = field_of(cls, name)
    meta, base = f.metadata, cls.types()[name]
    help = meta["help"] + (f" Default: decision {meta['decision']}." if meta["decision"] else "") + \
        (f" [{meta['none']}]" if f.default is None and meta["none"] else "")
    kw: dict = dict(default=f.default, help=help, show_default=f.default is not None)
    if base is bool:
        names = [f"{dashed(name)}/--no-{dashed(name)[2:]}"]
    else:
        names = [dashed(name)]
        kw["type"] = _type(base, meta)
    kw.update(override)
    return click.option(*names, *decls, **kw)


def _type(base, meta):
    if meta["choices"]:
        return click.Choice([str(c) for c in meta["choices"]])
    if base is int:
        return click.IntRange(min=meta["low"], max=meta["high"]) if meta["low"] is not None else int
    if base is float:
        if meta["low"] is None and meta["high"] is None:
            return float
        return click.FloatRange(min=meta["low"], max=meta["high"], min_open=meta["open_low"])
    return str  # strings, and comma-separated lists (the options class splits them)


def method_flags(*classes: type[Options], skip: tuple[str, ...] = ()):
    """Every field of `classes` as a flag, the first class's for a name several share (one meaning, and for the
    classes one command shares, one default: tests/test_options.py), less `skip`; with the old names of renamed
    fields as hidden, deprecated flags."""
    seen: dict[str, type[Options]] = {}
    for cls in classes:
        for name in cls.names():
            if name not in skip:
                seen.setdefault(name, cls)
    old = {o: new for cls in classes for o, new in RENAMED.get(cls.__name__, {}).items() if new in seen}

    def decorate(func):
        for name, cls in reversed(seen.items()):
            func = flag(cls, name)(func)
        for o, new in old.items():
            if o not in skip and o not in seen:
                f = field_of(seen[new], new)
                func = click.option(dashed(o), f"old_{o}", default=None, hidden=True,
                                    type=_type(seen[new].types()[new], f.metadata),
                                    deprecated=f"use {dashed(new)}")(func)
        return func

    return decorate


def take(kw: dict, *classes: type[Options], skip: tuple[str, ...] = ()) -> dict:
    """Pop the fields of `classes` (and the old names given on the command line, under their new names) out of a
    command's keyword arguments."""
    names = {n for cls in classes for n in cls.names() if n not in skip}
    out = {n: kw.pop(n) for n in list(kw) if n in names}
    for key in [k for k in kw if k.startswith("old_")]:
        value = kw.pop(key)
        new = next(RENAMED[c.__name__][key[4:]] for c in classes if key[4:] in RENAMED.get(c.__name__, {}))
        if value is not None:
            out[new] = value
    return out


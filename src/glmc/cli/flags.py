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


def flag(cls: type[Options], name: str, *decls: str, shared_by: tuple[type[Options], ...] = (), **override):
    """The click option of one field (`decls`: extra declarations, e.g. a parameter name). `shared_by`: the other
    classes one flag serves; where their defaults differ, the help gives each (`[default: fixed; learned
    matching: learned]`), not only this class's."""
    f = field_of(cls, name)
    meta, base = f.metadata, cls.types()[name]
    help = meta["help"] + (f" Default: decision {meta['decision']}." if meta["decision"] else "") + \
        (f" [{meta['none']}]" if f.default is None and meta["none"] else "")
    others = {_default_text(c, name) for c in shared_by} - {_default_text(cls, name)}
    if others and f.default is None:
        each = [f"{c.method}: {_default_text(c, name)}" for c in shared_by if _default_text(c, name) in others]
        help = help.removesuffix(f" [{meta['none']}]") + f" [default: {'; '.join([meta['none'], *each])}]"
    kw: dict = dict(default=f.default, help=help, show_default=f.default is not None)
    if base is bool:
        names = [f"{dashed(name)}/--no-{dashed(name)[2:]}"]
    else:
        names = [dashed(name)]
        kw["type"] = _type(base, meta)
    kw.update(override)
    return click.option(*names, *decls, **kw)


def _default_text(cls: type[Options], name: str) -> str:
    f = field_of(cls, name)
    return str(f.metadata["none"] if f.default is None else f.default)


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
    classes one command shares, one default: tests/e2e/test_options.py), less `skip`; with the old names of renamed
    fields as hidden, deprecated flags."""
    seen: dict[str, type[Options]] = {}
    for cls in classes:
        for name in cls.names():
            if name not in skip:
                seen.setdefault(name, cls)
    old = {o: new for cls in classes for o, new in RENAMED.get(cls.__name__, {}).items() if new in seen}

    def decorate(func):
        for name, cls in reversed(seen.items()):
            func = flag(cls, name, shared_by=tuple(c for c in classes if name in c.names()))(func)
        for o, new in old.items():
            if o not in skip and o not in seen:
                f = field_of(seen[new], new)
                func = renamed_flag(dashed(o), dashed(new), f"old_{o}",
                                    type=_type(seen[new].types()[new], f.metadata))(func)
        return func

    return decorate


def renamed_flag(old: str, new: str, dest: str, **option):
    """A hidden flag `old` kept for `new`: given, it warns naming both flags (click's own `deprecated=` names the
    parameter, `dest`, which users never typed) and its value goes to `dest`."""

    def warn(ctx, param, value):
        if value is not None:
            click.echo(f"DeprecationWarning: {old} is deprecated; use {new}", err=True)
        return value

    return click.option(old, dest, default=None, hidden=True, callback=warn, expose_value=True, **option)


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


"""One declarative native ⇄ canonical name map per adapter, read in both directions.

An adapter lists `Entry(canonical, native, convert)` rows: `canonical` is a key template of the view (or a tuple
of them, when one fused native tensor holds several canonical ones), `native` a state-dict key template.
"{i}" runs over the blocks; other fields ("{p}", "{head}", ...) are the model's `Layout.fields`. Converters
are named pairs of pure reshapes, transposes, slices and concatenations, so `native_state` stays
differentiable (learned matching back-propagates through it) and native → canonical → native is bit-exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Converter:
    name: str
    to_canonical: Callable  # (native tensor, dims) -> tensor, or a tuple for a fused entry
    to_native: Callable  # (canonical tensor, or a tuple for a fused entry, dims) -> tensor


@dataclass(frozen=True)
class Entry:
    canonical: str | tuple[str, ...]
    native: str
    convert: Converter | None = None  # None: the same tensor on both sides
    optional: bool = False  # a bias or LayerScale the model may lack: then absent on both sides


@dataclass
class Layout:
    """What one model adds to its adapter's map: block count, names that vary by model class, and the sizes
    the converters need (n_head; "conv": (in_channels, kernel_size) of a patch embedding)."""

    n_layer: int
    fields: dict[str, str] = field(default_factory=dict)
    dims: dict = field(default_factory=dict)


class NameMap:
    def __init__(self, entries: list[Entry]):
        self.entries = list(entries)

    def _rows(self, layout: Layout):
        """(entry, canonical keys, native key) with every template filled in; a run of per-block entries is
        read block by block, so the view lists block 0's tensors, then block 1's, as the model does."""
        run = []
        for e in self.entries + [None]:
            if e is not None and "{i}" in e.native:
                run.append(e)
                continue
            for i in range(layout.n_layer) if run else []:
                yield from (self._fill(b, layout, i) for b in run)
            run = []
            if e is not None:
                yield self._fill(e, layout, None)

    @staticmethod
    def _fill(e: Entry, layout: Layout, i):
        keys = (e.canonical,) if isinstance(e.canonical, str) else e.canonical
        names = dict(layout.fields, i=i)
        return e, tuple(k.format(**names) for k in keys), e.native.format(**names)

    def to_canonical(self, state: dict, layout: Layout, copy=None, after=None) -> dict[str, torch.Tensor]:
        """The canonical view of a native state dict, as tensors that share no memory with it. `copy` makes each
        canonical tensor from its converted native one (default: clone; it must not share memory either), and
        `after(native tensor)` runs once that tensor is no longer needed (e.g. to page its file out again)."""
        copy = copy or torch.clone
        view = {}
        for e, keys, native in self._rows(layout):
            if e.optional and native not in state:
                continue
            t = state[native].detach()
            out = t if e.convert is None else e.convert.to_canonical(t, layout.dims)
            for k, v in zip(keys, out if isinstance(out, tuple) else (out,), strict=True):
                view[k] = copy(v)
            if after is not None:
                after(t)
        return view

    def to_native(self, view: dict, layout: Layout, consume: bool = False) -> dict[str, torch.Tensor]:
        """The native tensors holding `view` (differentiable; shapes follow the view, so wider views work). With
        `consume`, each canonical tensor is popped from `view` as soon as its native tensor exists, and that one
        is made contiguous: a rebuild then holds one model-sized copy at the peak instead of two."""
        state = {}
        for e, keys, native in self._rows(layout):
            if e.optional and keys[0] not in view:
                continue
            parts = tuple(view.pop(k) if consume else view[k] for k in keys)
            src = parts if len(parts) > 1 else parts[0]
            out = src if e.convert is None else e.convert.to_native(src, layout.dims)
            state[native] = out.contiguous() if consume else out
            del parts, src, out
        return state


# ---------------------------------------------------------------------------------------------- converters

def _heads_from_columns(w, n_head):
    """[d_in, H·d_head] (x·W layout) → [H, d_head, d_in]."""
    return w.T.reshape(n_head, w.shape[1] // n_head, w.shape[0])


def _heads_to_columns(w):
    """[H, d_head, d_in] → [d_in, H·d_head]."""
    return w.reshape(-1, w.shape[-1]).T


TRANSPOSE = Converter("transpose", lambda t, dims: t.T, lambda t, dims: t.T)
# [1, n, d] parameters (class / register tokens, position embeddings) ↔ [n, d]
UNBATCH = Converter("unbatch", lambda t, dims: t[0], lambda t, dims: t[None])
# [H·d_head, d] (rows head-major) ↔ [H, d_head, d]
HEAD_ROWS = Converter("head-rows", lambda t, dims: t.reshape(dims["n_head"], -1, t.shape[-1]),
                      lambda t, dims: t.reshape(-1, t.shape[-1]))
# [H·d_head] ↔ [H, d_head]
HEAD_VECTOR = Converter("head-vector", lambda t, dims: t.reshape(dims["n_head"], -1), lambda t, dims: t.reshape(-1))
# nn.Linear output projection [d, H·d_head] (columns head-major) ↔ [H, d_head, d]
HEAD_COLUMNS = Converter("head-columns", lambda t, dims: t.T.reshape(dims["n_head"], -1, t.shape[0]),
                         lambda t, dims: t.reshape(-1, t.shape[-1]).T)
# Conv1D fused q | k | v [d, 3·H·d_head] (x·W) ↔ (q, k, v) each [H, d_head, d]
QKV_COLUMNS = Converter("qkv-columns",
                        lambda t, dims: tuple(_heads_from_columns(p, dims["n_head"]) for p in t.chunk(3, dim=1)),
                        lambda ts, dims: torch.cat([_heads_to_columns(x) for x in ts], 1))
# nn.Linear fused q | k | v [3·H·d_head, d] ↔ (q, k, v) each [H, d_head, d]
QKV_ROWS = Converter("qkv-rows", lambda t, dims: tuple(t.reshape(3, dims["n_head"], -1, t.shape[-1]).unbind(0)),
                     lambda ts, dims: torch.cat([x.reshape(-1, x.shape[-1]) for x in ts]))
# fused q | k | v bias [3·H·d_head] ↔ (q, k, v) each [H, d_head]
QKV_BIAS = Converter("qkv-bias", lambda t, dims: tuple(t.reshape(3, dims["n_head"], -1).unbind(0)),
                     lambda ts, dims: torch.cat([x.reshape(-1) for x in ts]))


def _patch_to_conv(w, dims):
    in_channels, kernel = dims["conv"]
    return w.T.reshape(w.shape[1], in_channels, *kernel)


# patch-embedding Conv2d weight [d, C, p, p] ↔ canonical patch.w [C·p·p, d] (pixel side untouched)
CONV_PATCH = Converter("conv-patch", lambda t, dims: t.reshape(t.shape[0], -1).T, _patch_to_conv)


def layer_norm(canonical: str, native: str, optional: bool = False) -> list[Entry]:
    """The two rows of a LayerNorm: canonical.w/.b ← native.weight/.bias."""
    return [Entry(f"{canonical}.w", f"{native}.weight", optional=optional),
            Entry(f"{canonical}.b", f"{native}.bias", optional=optional)]

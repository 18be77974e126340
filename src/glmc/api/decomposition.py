"""`Decomposition`: where along the network a path's barrier lives (`glmc.Curve.decompose`, `glmc barrier
--decompose`); see glmc/paths/decompose.py for the definitions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from glmc.io import atomic_path
from glmc.symmetry.parts import ROLE_LABELS, ROLES


@dataclass
class Decomposition:
    """The excess loss along the path with only one part interpolated ("only", the rest at A's weights) and with
    only that part kept at A's ("all_but"), per part of three groupings: "roles" (embeddings and head, attention QK,
    attention OV, MLP, norms; "other" for keys a family left undeclared), "layers" (each block; "outside": the
    keys outside the blocks) and "cells" (role × layer).

    Attributes:
        lambdas: the λ grid (0 = A, 1 = B′).
        whole: the whole path on the canonical view: "loss", "acc", "excess", "barrier" (max excess) and "lambda".
        parts: grouping -> part -> {"role", "layer", "keys", "parameters", "only": {...}, "all_but": {...}}, each
            variant with "loss", "acc", "excess" per λ over its own chord, "barrier" (its max), "lambda" (where),
            "end_loss" (at λ = 1), "excess_vs_path" per λ over the whole path's chord, "peak_excess" (its max) and
            "peak_lambda" (glmc/paths/decompose.py).
        all_parts_max_abs_diff: max_λ |L(all parts interpolated) − L(whole path)|, evaluated independently; 0 when
            the parts cover every key (the check that the decomposition is complete).
        method: the alignment method of the path.
    """

    lambdas: list
    whole: dict
    parts: dict
    all_parts_max_abs_diff: float
    method: str = "none"
    info: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict, method: str = "none") -> "Decomposition":
        info = {k: v for k, v in d.items() if k not in ("lambdas", "whole", "parts", "all_parts_max_abs_diff",
                                                        "method")}
        return cls(d["lambdas"], d["whole"], d["parts"], d["all_parts_max_abs_diff"], d.get("method", method), info)

    def __repr__(self) -> str:
        roles = self.parts.get("roles", {})
        worst = max(roles, key=lambda r: roles[r]["only"]["peak_excess"]) if roles else None
        where = f", largest alone: {worst} {roles[worst]['only']['peak_excess']:.4f}" if worst else ""
        return f"glmc.Decomposition(method={self.method!r}, barrier={self.whole['barrier']:.4f}{where})"

    def to_dict(self) -> dict:
        return {"method": self.method, "lambdas": self.lambdas, "whole": self.whole, "parts": self.parts,
                "all_parts_max_abs_diff": self.all_parts_max_abs_diff, **self.info}

    def to_json(self, path=None) -> str:
        text = json.dumps(self.to_dict(), indent=2, default=str) + "\n"
        if path is not None:
            with atomic_path(path) as tmp:
                Path(tmp).write_text(text)
        return text

    def table(self) -> str:
        """A text table: one row per part, the barrier of each variant with its worst λ and the loss at λ = 1."""
        return format_decomposition(self.to_dict())

    def heatmap(self, variant: str = "only", metric: str = "peak_excess"):
        """(row labels, column roles, matrix of `metric` — "peak_excess" or "barrier" —; None where a cell has no
        key): layers × roles."""
        return heatmap_matrix(self.to_dict(), variant, metric)

    def plot(self, axes=None, metric: str = "peak_excess"):
        """Heat maps (layers × roles) of `metric` with only each cell interpolated, and with only it kept at A;
        returns the figure."""
        return draw_decomposition(self.to_dict(), axes, metric=metric)


def format_decomposition(d: dict) -> str:
    """A text table of a decomposition dict: per part and variant, peak excess (over the whole path's chord) and
    barrier (over the partial path's own chord), each at its λ, and the loss at λ = 1."""
    rows = [f"whole path: barrier {d['whole']['barrier']:.4f} at λ={d['whole']['lambda']:.2f}; all parts together "
            f"reproduce it to {d['all_parts_max_abs_diff']:.2e}",
            f"{'':<32}{'only this part interpolated':^36}{'all but this part (kept at A)':^36}",
            f"{'part':<22}{'params':>10}" + f"{'peak':>9}{'@λ':>5}{'barrier':>9}{'@λ':>5}{'L(1)':>8}" * 2]
    for grouping in ("roles", "layers", "cells"):
        for name, p in d["parts"].get(grouping, {}).items():
            label = ROLE_LABELS.get(name, name) if grouping == "roles" else name
            rows.append(f"{label:<22}{p['parameters']:>10,}" + "".join(
                f"{v.get('peak_excess', float('nan')):>9.4f}{v.get('peak_lambda', float('nan')):>5.2f}"
                f"{v['barrier']:>9.4f}{v['lambda']:>5.2f}{v['end_loss']:>8.4f}" for v in (p["only"], p["all_but"])))
        if d["parts"].get(grouping):
            rows.append("")
    return "\n".join(rows).rstrip()


def heatmap_matrix(d: dict, variant: str = "only", metric: str = "peak_excess"):
    """(row labels: "layer i" then "outside", roles, matrix of `metric` per cell; None where a cell has no key)."""
    cells = d["parts"].get("cells", {})
    roles = [r for r in ROLES if any(name.split("@")[0] == r for name in cells)]
    layers = sorted({name.split("@")[1] for name in cells}, key=lambda w: (w == "outside", int(w) if w.isdigit()
                                                                             else 0))
    matrix = [[cells.get(f"{r}@{w}", {}).get(variant, {}).get(metric) for r in roles] for w in layers]
    labels = [w if w == "outside" else f"layer {w}" for w in layers]
    return labels, roles, matrix


def draw_decomposition(d: dict, axes=None, title: str = "", vmax: float | None = None, metric: str = "peak_excess"):
    """Two heat maps (layers × roles) of `metric` of a decomposition dict on `axes` (a new figure if None), coloured
    on a scale of ± `vmax` (None: this decomposition's largest |value|); returns the figure."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10.4, 0.55 * max(3, len(heatmap_matrix(d)[0])) + 1.8))
    values = [v for variant in ("only", "all_but") for row in heatmap_matrix(d, variant, metric)[2] for v in row
              if v is not None]
    vmax = vmax or max([abs(v) for v in values] + [1e-6])
    whats = ("only this cell interpolated", "only this cell kept at A")
    for ax, variant, what in zip(axes, ("only", "all_but"), whats):
        labels, roles, matrix = heatmap_matrix(d, variant, metric)
        m = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
        im = ax.imshow(m, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
        ax.set_xticks(range(len(roles)), [ROLE_LABELS[r] for r in roles], rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        for (i, j), v in np.ndenumerate(m):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=7)
        ax.set_title(f"{d.get('method', '')}: {what}", fontsize=9)
        ax.figure.colorbar(im, ax=ax, shrink=0.8, label="peak excess loss" if metric == "peak_excess" else
                           "barrier of the partial path")
    fig = axes[0].figure
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig

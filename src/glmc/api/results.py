"""Result objects of the Python API: what `glmc.align`, `glmc.barrier` and `glmc.merge` return.

Every result keeps its numbers as plain attributes, says what it holds in its repr, and turns into JSON (the
same schema the CLI writes) with `to_json()`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from glmc.adapters import adapter_for
from glmc.api.data import evaluation_batches, resolve_data
from glmc.api.decomposition import Decomposition
from glmc.api.sources import write_like
from glmc.api.transform import Transform
from glmc.errors import BadOption
from glmc.io import atomic_dir, atomic_path
from glmc.matching.nullspace import save_fill
from glmc.paths.barrier import barrier_metrics, lambda_grid
from glmc.paths.decompose import decompose_path
from glmc.paths.simplex import simplex_metrics
from glmc.view.circuit import circuit_model


@dataclass
class Alignment:
    """Model B brought next to model A by a symmetry transform (`glmc.align`).

    Attributes:
        model_a: A as interpolated: canonical (norm gains folded, writers centred), same function as the input A;
            the input itself for method "none". For pairs of different widths, the embedded model when A was the
            narrower one.
        model_b: B′ = π(B), a native model of B's architecture with exactly B's function (checked).
        transform: π (a `glmc.Transform`), or None for method "none".
        report: what the method measured (distances before/after, max |Δlogits|, timings, per-method details).
        method: the alignment method.
        moved: "B" (usually), or "A" when A was the narrower model of a width pair and was embedded.
        fill: an embedded narrower model's null-space fill (canonical key -> tensor), or None.
    """

    model_a: Any
    model_b: Any
    transform: Transform | None
    report: dict = field(default_factory=dict)
    method: str = "weight"
    moved: str = "B"
    fill: dict | None = None
    sources: tuple = (None, None)  # directories the inputs were loaded from, when glmc loaded them
    dtype: str | None = None  # what save() writes the moved model in (its input's stored dtype by default)
    provenance: dict | None = field(default=None, repr=False)  # glmc/provenance.py: code, versions, options, …

    @property
    def moved_model(self):
        """The model the transform moved: B′, or the embedded A of a width pair."""
        return self.model_b if self.moved == "B" else self.model_a

    def __repr__(self) -> str:
        r = self.report
        dist = (f", distance {r['distance_before']:.4f} → {r['distance_after']:.4f}" if "distance_after" in r else "")
        return f"glmc.Alignment(method={self.method!r}{dist}, moved {self.moved})"

    def save(self, directory, overwrite: bool = False, mode: str = "native", max_shard_size=None) -> Path:
        """Write the moved model (a standard checkpoint in `.dtype`, its input's stored dtype unless glmc.align was
        given another; with mode="circuit" the paper's circuit form), the transform (transform.safetensors), any
        null-space fill and the report (align.json), atomically. `max_shard_size`: see glmc.save_model."""
        source = self.sources[1] if self.moved == "B" else self.sources[0]
        with atomic_dir(directory, overwrite=overwrite, inputs=self.sources) as tmp:
            if mode == "circuit":
                circuit_model(self.moved_model).write_files(tmp)
            else:
                write_like(self.moved_model, source, tmp, dtype=self.dtype, max_shard_size=max_shard_size)
            if self.transform is not None:
                self.transform.save(tmp / "transform.safetensors")
            if self.fill:
                save_fill(self.fill, tmp / "null_space_fill.safetensors")
            (tmp / "align.json").write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        return Path(directory)

    def to_dict(self) -> dict:
        """What `glmc align` writes as align.json (schema "glmc.align/1"): the two models' paths, the method and
        its report (distances before/after, max |Δlogits|, timings, per-method details)."""
        a, b = (None if s is None else str(s) for s in self.sources)
        return {"schema": "glmc.align/1", "model_a": a, "model_b": b, "method": self.method, "moved": self.moved,
                **self.report, "provenance": self.provenance}


@dataclass
class Curve:
    """Loss and accuracy along θ(λ) = (1−λ)·θ_A + λ·θ_B′ (`glmc.barrier`).

    Attributes:
        lambdas, loss, accuracy: the grid (0 = A, 1 = B′) and the mean loss and accuracy at each point.
        method: how B was aligned first ("none": the raw checkpoints).
        alignment: the `Alignment` used (for "none", the raw pair, or a narrower model embedded).
        info: data, split, batches, timings and mode.
    """

    lambdas: list
    loss: list
    accuracy: list
    method: str = "none"
    alignment: Alignment | None = None
    info: dict = field(default_factory=dict)
    batch_stats: dict | None = None  # per evaluation batch: {"n", "loss_sum", "correct"} (standard errors)
    batches: list | None = field(default=None, repr=False)  # the evaluation batches, for `decompose`
    decomposition: Any = None  # the last `decompose()` result
    provenance: dict | None = field(default=None, repr=False)  # glmc/provenance.py: code, versions, options, …

    @property
    def metrics(self) -> dict:
        """Every barrier metric (glmc/paths/barrier.py): loss_barrier, loss_barrier_mean, acc_drop, …, and with
        per-batch figures their standard errors over evaluation batches (…_se, loss_se per λ)."""
        return barrier_metrics({"lambdas": self.lambdas, "loss": self.loss, "acc": self.accuracy,
                                "batch_stats": self.batch_stats})

    def decompose(self, data=None, *, batches=None, points: int = 5, by=("roles", "layers", "cells"),
                  dtype=None, progress: bool = False, **split_options):
        """Where the barrier lives: the path with only one part interpolated (the rest at A's weights) and with
        only that part kept at A's, per role, per layer and per cell (glmc/paths/decompose.py).

        Args:
            data, batches, split_options (split, batch_size, max_batches): the evaluation batches; default: the
                ones this curve was measured on.
            points: λ grid points, endpoints included (every part costs 2·(points − 1) evaluations).
            by: which groupings: "roles", "layers", "cells" (the layers × roles heat map).

        Returns:
            A `glmc.Decomposition` (also kept as `.decomposition`, and in `to_dict()`).
        """
        if self.alignment is None:
            raise ValueError("this curve has no endpoints to decompose (it was not measured by glmc.barrier)")
        if self.info.get("mode") == "circuit":
            raise BadOption("decomposition runs on the native canonical view; measure the curve with mode='native'")
        ends = [self.alignment.model_a, self.alignment.model_b]
        if batches is None and (data is not None or split_options):
            ds = resolve_data(data, ends[0], required="a decomposition")
            batches = evaluation_batches(ds, ends[0], split_options.get("split", "test"),
                                         split_options.get("batch_size", 32), split_options.get("max_batches"), None)
        batches = batches if batches is not None else self.batches
        if batches is None:
            raise ValueError("give data or batches: this curve does not hold its evaluation batches")

        task = adapter_for(ends[0]).arch(ends[0]).task
        d = decompose_path(ends[0], ends[1], batches, task, lambda_grid(points), by=by,
                           dtype=dtype if dtype is not None else self.info.get("dtype"), progress=progress)
        self.decomposition = Decomposition.from_dict(d, self.method)
        return self.decomposition

    @property
    def barrier(self) -> float:
        """The paper's loss barrier: max_λ L(λ) − [(1−λ)·L(0) + λ·L(1)]."""
        return self.metrics["loss_barrier"]

    @property
    def barrier_mean(self) -> float:
        """Git Re-Basin's loss barrier: max_λ L(λ) − [L(0) + L(1)]/2."""
        return self.metrics["loss_barrier_mean"]

    @property
    def accuracy_drop(self) -> float:
        """max_λ [(1−λ)·A(0) + λ·A(1)] − A(λ)."""
        return self.metrics["acc_drop"]

    def __repr__(self) -> str:
        return (f"glmc.Curve(method={self.method!r}, {len(self.lambdas)} points, barrier={self.barrier:.4f}, "
                f"barrier_mean={self.barrier_mean:.4f})")

    def to_dict(self) -> dict:
        """The CLI's per-method JSON entry (glmc barrier --json): curve, metrics, timings, alignment report."""
        out = {"lambdas": list(self.lambdas), "loss": list(self.loss), "acc": list(self.accuracy), **self.metrics,
               **self.info}
        if self.alignment is not None:
            out["alignment"] = self.alignment.report
        if self.batch_stats is not None:
            out["per_batch"] = self.batch_stats
        if self.decomposition is not None:
            out["decomposition"] = self.decomposition.to_dict()
        if self.provenance is not None:
            out["provenance"] = self.provenance
        return out

    def to_json(self, path=None) -> str:
        """The curve as JSON text; also written (atomically) to `path` when given."""
        return _json(self.to_dict(), path)

    def plot(self, ax=None, accuracy: bool = False, **style):
        """Draw the loss (or, with accuracy=True, the accuracy in %) against λ on `ax` (a new figure if None);
        returns the axes."""
        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=(5.2, 3.8))
        y = [100 * a for a in self.accuracy] if accuracy else self.loss
        ax.plot(self.lambdas, y, marker="o", ms=3, label=style.pop("label", self.method), **style)
        ax.set(xlabel="λ  (0 = model A, 1 = model B′)", ylabel="accuracy (%)" if accuracy else "loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        return ax


@dataclass
class Simplex:
    """Loss over the simplex θ(λ) = Σ λ_m·θ_m of k ≥ 3 models (`glmc.barrier` with a list of models).

    Attributes:
        points: the interpolation weights evaluated (a triangular grid for 3 models, sampled beyond).
        loss, accuracy: at each point.
        method: how the models were aligned to a shared universe first.
        aligned: the aligned models (the inputs for "none").
    """

    points: list
    loss: list
    accuracy: list
    method: str = "none"
    aligned: list = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @property
    def metrics(self) -> dict:
        """The simplex metrics (glmc/paths/simplex.py): "barrier", the largest excess loss L(Σλθ) − ΣλL(θ) over
        the points, "barrier_at" (its λ), "vertex_loss" (each model's loss), "excess" (per point) and
        "centre_excess" (at the point nearest the centre)."""
        return simplex_metrics({"points": [tuple(p) for p in self.points], "loss": self.loss})

    @property
    def barrier(self) -> float:
        """The multi-model barrier max_λ [L(Σλ_m·θ_m) − Σλ_m·L(θ_m)]."""
        return self.metrics["barrier"]

    def __repr__(self) -> str:
        return f"glmc.Simplex(method={self.method!r}, k={len(self.points[0])}, barrier={self.barrier:.4f})"

    def to_dict(self) -> dict:
        """The simplex as the CLI's JSON entry: points (λ per model), loss and accuracy at each, metrics, timings."""
        return {"points": [list(p) for p in self.points], "loss": list(self.loss), "acc": list(self.accuracy),
                **self.metrics, **self.info}

    def to_json(self, path=None) -> str:
        """The simplex as JSON text; also written (atomically) to `path` when given."""
        return _json(self.to_dict(), path)

    def plot(self, ax=None):
        """A ternary heat map of the excess loss with its zero contour (3 models); returns the axes."""
        if len(self.points[0]) != 3:
            raise ValueError("a ternary plot needs exactly 3 models")
        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=(4.4, 4.0))
        excess = self.metrics["excess"]
        draw_ternary(ax, self.points, excess, f"{self.method}: barrier {self.barrier:.3f}", max(excess) or 1.0)
        return ax


def draw_ternary(ax, points, excess, title: str, vmax: float):
    """A ternary heat map of the excess loss over the simplex of 3 models on `ax`, with its zero contour and the
    vertices labelled M1–M3 (the paper's Fig. 4); returns the filled contour set (for a colour bar)."""
    import matplotlib.tri as mtri

    p, z = np.array(points), np.array(excess)
    tri = mtri.Triangulation(p[:, 1] + 0.5 * p[:, 2], (np.sqrt(3) / 2) * p[:, 2])
    cs = ax.tricontourf(tri, z, levels=np.linspace(min(0.0, z.min()), vmax, 21), cmap="magma_r")
    if z.min() < 0 < z.max():
        ax.tricontour(tri, z, levels=[0.0], colors="cyan", linewidths=1.2)
    ax.plot([0, 1, 0.5, 0], [0, 0, np.sqrt(3) / 2, 0], color="k", lw=0.8)
    for (vx, vy), name in zip([(0, 0), (1, 0), (0.5, np.sqrt(3) / 2)], ["M1", "M2", "M3"]):
        ax.annotate(name, (vx, vy), textcoords="offset points", xytext=(0, -12 if vy == 0 else 4), ha="center",
                    fontsize=8)
    ax.set_title(title, fontsize=9, pad=16)
    ax.set_aspect("equal")
    ax.axis("off")
    return cs


@dataclass
class Merge:
    """Several models aligned to a shared universe and averaged (`glmc.merge`).

    Attributes:
        model: the merged model (a native checkpoint of the widest input's architecture; a glmc CircuitModel
            with mode="circuit").
        aligned: each input, aligned (same function as that input, checked).
        transforms: each input's `glmc.Transform` into the universe.
        report: weights, universe rounds, refinement log, max |Δlogits| of every aligned model.
    """

    model: Any
    aligned: list
    transforms: list
    report: dict = field(default_factory=dict)
    sources: list = field(default_factory=list)
    mode: str = "native"
    dtype: str | None = None  # what save() writes the merged model in (model 1's stored dtype by default)
    dtypes: list = field(default_factory=list)  # ... and each aligned model in (its input's)

    def __repr__(self) -> str:
        return f"glmc.Merge({len(self.aligned)} models, method={self.report.get('method')!r}, mode={self.mode!r})"

    def save(self, directory, overwrite: bool = False, max_shard_size=None) -> Path:
        """Write the merged model (in `.dtype`), aligned/model{i}/ (each aligned model in its input's stored dtype,
        with its transform and any null-space fill) and merge.json, atomically. `max_shard_size`: see
        glmc.save_model."""
        sources = list(self.sources) + [None] * (len(self.aligned) - len(self.sources))
        report = {k: v for k, v in self.report.items() if k != "fills"}
        fills = self.report.get("fills", {})
        with atomic_dir(directory, overwrite=overwrite, inputs=self.sources) as tmp:
            if self.mode == "circuit":
                self.model.write_files(tmp)  # a CircuitModel
            else:
                write_like(self.model, sources[0], tmp, dtype=self.dtype, max_shard_size=max_shard_size)
            for i, (a, t) in enumerate(zip(self.aligned, self.transforms)):
                sub = tmp / "aligned" / f"model{i + 1}"
                dtype = self.dtypes[i] if i < len(self.dtypes) else None
                write_like(a, sources[i], sub, dtype=dtype, max_shard_size=max_shard_size)
                if t.elements:
                    t.save(sub / "transform.safetensors")
                if fills.get(i):  # an embedded narrower model: added after its transform
                    save_fill(fills[i], sub / "null_space_fill.safetensors")
            (tmp / "merge.json").write_text(json.dumps({"schema": "glmc.merge/1", **report}, indent=2,
                                                       default=str) + "\n")
        return Path(directory)


def _json(obj: dict, path) -> str:
    text = json.dumps(obj, indent=2, default=str) + "\n"
    if path is not None:
        with atomic_path(path) as tmp:
            Path(tmp).write_text(text)
    return text

"""Figures: loss (and accuracy) along the path per alignment method, in the style of the paper's Fig. 3."""

from __future__ import annotations

from pathlib import Path

from glmc.api.decomposition import draw_decomposition, heatmap_matrix
from glmc.api.results import draw_ternary
from glmc.io import atomic_path


def plot_curves(curves: dict, path, title: str = "", show_acc: bool = True) -> Path:
    """curves: method -> {"lambdas", "loss", "acc"} (and "loss_se": error bars of ± one standard error over the
    evaluation batches). Writes a PNG (or any format matplotlib knows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if show_acc else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 3.8), squeeze=False)
    for method, c in curves.items():
        se = c.get("loss_se")
        if se and all(v is not None for v in se):
            axes[0][0].errorbar(c["lambdas"], c["loss"], yerr=se, marker="o", ms=3, capsize=2, label=method)
        else:
            axes[0][0].plot(c["lambdas"], c["loss"], marker="o", ms=3, label=method)
        if show_acc:
            axes[0][1].plot(c["lambdas"], [100 * a for a in c["acc"]], marker="o", ms=3, label=method)
    axes[0][0].set(xlabel="λ  (0 = model A, 1 = model B′)", ylabel="loss", title="loss along the path")
    if show_acc:
        axes[0][1].set(xlabel="λ", ylabel="accuracy (%)", title="accuracy along the path")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path, title)


def plot_simplex(surfaces: dict, path, title: str = "") -> Path:
    """surfaces: method -> {"points" (3 weights each), "excess"}; one ternary heat map per method of the excess
    loss L(θ(λ)) − Σ λ_m L(θ_m), with the zero contour (the paper's Fig. 4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    n = len(surfaces)
    fig, axes = plt.subplots(1, n, figsize=(4.4 * n, 4.0), squeeze=False)
    vmax = max(max(s["excess"]) for s in surfaces.values()) or 1.0
    for ax, (method, s) in zip(axes[0], surfaces.items()):
        cs = draw_ternary(ax, s["points"], s["excess"], f"{method}: barrier {max(s['excess']):.3f}", vmax)
        fig.colorbar(cs, ax=ax, shrink=0.7, label="excess loss")
    return _save(fig, path, title)


def plot_decompositions(results: dict, path, title: str = "") -> Path:
    """results: method -> a glmc.barrier entry with a "decomposition"; one row of two heat maps (layers × roles:
    only the cell interpolated, only the cell kept at A) per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    decs = {m: r["decomposition"] for m, r in results.items() if r.get("decomposition")}
    rows = max(3, max(len(heatmap_matrix(d)[0]) for d in decs.values()))
    fig, axes = plt.subplots(len(decs), 2, figsize=(10.4, len(decs) * (0.55 * rows + 1.8)), squeeze=False)
    values = [abs(v) for d in decs.values() for variant in ("only", "all_but")
              for row in heatmap_matrix(d, variant, "peak_excess")[2] for v in row if v is not None]
    vmax = max(values + [1e-6])  # one colour scale for every method, so their maps compare
    for ax_row, (method, d) in zip(axes, decs.items()):
        draw_decomposition({**d, "method": method}, ax_row, vmax=vmax)
    return _save(fig, path, title)


def _save(fig, path, title: str) -> Path:
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path

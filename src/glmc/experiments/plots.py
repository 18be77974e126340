"""Figures: loss (and accuracy) along the path per alignment method, in the style of the paper's Fig. 3."""

from __future__ import annotations

from pathlib import Path

from glmc.io import atomic_path


def plot_curves(curves: dict, path, title: str = "", show_acc: bool = True) -> Path:
    """curves: method -> {"lambdas", "loss", "acc"}. Writes a PNG (or any format matplotlib knows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if show_acc else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 3.8), squeeze=False)
    for method, c in curves.items():
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
    import matplotlib.tri as mtri
    import numpy as np

    n = len(surfaces)
    fig, axes = plt.subplots(1, n, figsize=(4.4 * n, 4.0), squeeze=False)
    vmax = max(max(s["excess"]) for s in surfaces.values()) or 1.0
    for ax, (method, s) in zip(axes[0], surfaces.items()):
        p = np.array(s["points"])
        x, y = p[:, 1] + 0.5 * p[:, 2], (np.sqrt(3) / 2) * p[:, 2]
        tri = mtri.Triangulation(x, y)
        z = np.array(s["excess"])
        cs = ax.tricontourf(tri, z, levels=np.linspace(min(0.0, z.min()), vmax, 21), cmap="magma_r")
        if z.min() < 0 < z.max():
            ax.tricontour(tri, z, levels=[0.0], colors="cyan", linewidths=1.2)
        ax.plot([0, 1, 0.5, 0], [0, 0, np.sqrt(3) / 2, 0], color="k", lw=0.8)
        for (vx, vy), name in zip([(0, 0), (1, 0), (0.5, np.sqrt(3) / 2)], ["M1", "M2", "M3"]):
            ax.annotate(name, (vx, vy), textcoords="offset points", xytext=(0, -12 if vy == 0 else 4),
                        ha="center", fontsize=8)
        ax.set_title(f"{method}: barrier {max(s['excess']):.3f}", fontsize=9, pad=16)
        ax.set_aspect("equal")
        ax.axis("off")
        fig.colorbar(cs, ax=ax, shrink=0.7, label="excess loss")
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

"""The paper's circuit form, as a reproduction mode (`--mode circuit`).

arXiv 2506.22712's code interpolates every attention head as its full circuits. From a canonical view
(LayerNorm gains folded, writers mean-centred — so each LayerNorm acts as an RMS norm, plus the offset β it
keeps where the reader has no bias), with bias-augmented inputs x̂ = [x, 1]:
    Q̂_h = [W_Q,h | b_Q,h] ∈ R^{d_head×(d+1)}, likewise K̂_h, V̂_h;
    QK_h = Q̂_hᵀ·K̂_h ∈ R^{(d+1)×(d+1)}     scores_ij = x̂_i·QK_h·x̂_jᵀ / √d_head
    OV_h = V̂_hᵀ·W_O,h ∈ R^{(d+1)×d}        out_i = Σ_h (Σ_j a_h,ij·x̂_j)·OV_h + b_O
The paper stores each head as query = QK_hᵀ·√((d+1)/d_head), key = value = I_{d+1}, output = OV_hᵀ, i.e. a
standard attention layer of head dimension d+1 (the √ factor undoes its 1/√(d+1) scaling); `CircuitModel`
computes the same numbers directly. Per-head invertible maps leave QK_h and OV_h unchanged — the circuits
absorb them — so alignment in this mode only needs the residual map and the permutations, and interpolation
mixes whole circuits: the midpoint is not a model of the original size (see `parameter_count`).
Saved as `circuit.safetensors` + `circuit_config.json`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from glmc.errors import UnsupportedModel
from glmc.io import atomic_dir
from glmc.tasks import task
from glmc.view.model_ops import canonical_view

ATTN_KEYS = ("q.w", "q.b", "k.w", "k.b", "v.w", "v.b", "o.w")


def circuit_params(view: dict, n_layer: int) -> dict:
    """Canonical view → circuit parameters (differentiable; every non-attention tensor is kept as it is)."""
    out = {k: v for k, v in view.items() if not any(k.endswith(".attn." + a) for a in ATTN_KEYS)}
    for i in range(n_layer):
        p = f"blocks.{i}.attn."
        aug = {}
        for n in "qkv":
            w = view[p + n + ".w"]
            b = view.get(p + n + ".b")
            b = torch.zeros(w.shape[:2], dtype=w.dtype, device=w.device) if b is None else b
            aug[n] = torch.cat([w, b.unsqueeze(-1)], -1)  # [H, d_head, d+1]
        out[p + "qk"] = torch.einsum("hpd,hpe->hde", aug["q"], aug["k"])
        out[p + "ov"] = torch.einsum("hpd,hpe->hde", aug["v"], view[p + "o.w"])
    return out


def parameter_count(params: dict) -> int:
    return sum(int(v.numel()) for v in params.values())


def _key(name: str) -> str:
    return name.replace(".", "__")


class CircuitModel(torch.nn.Module):
    """Evaluates a circuit-form model. `config`: the adapter's io_spec plus n_layer, n_head, d_head, ln_eps."""

    reads_batch = True  # called with a glmc.data batch dict as keywords (glmc.adapters.forward)

    def __init__(self, config: dict, params: dict):
        super().__init__()
        self.config = dict(config)
        self.p = torch.nn.ParameterDict({_key(k): torch.nn.Parameter(v.detach().clone(), requires_grad=False)
                                         for k, v in params.items()})
        from transformers.activations import ACT2FN

        self.act = ACT2FN[config["activation"]]

    def state(self, params: dict) -> dict:
        """Names for torch.func.functional_call: circuit parameters (by canonical key) → module parameters."""
        return {"p." + _key(k): v for k, v in params.items()}

    def _get(self, name):
        return self.p[_key(name)] if _key(name) in self.p else None

    def _bias(self, x, name):
        b = self._get(name)  # absent in bias-free layers
        return x if b is None else x + b

    def _norm(self, x, name):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config["ln_eps"])
        b = self._get(name + ".b")
        return x if b is None else x + b

    def _attention(self, x, i):
        c = self.config
        xh = torch.cat([x, torch.ones_like(x[..., :1])], -1)
        scores = torch.einsum("bid,hde,bje->bhij", xh, self._get(f"blocks.{i}.attn.qk"), xh) / math.sqrt(c["d_head"])
        if c["causal"]:
            t = x.shape[1]
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        z = torch.einsum("bhij,bjd->bhid", scores.softmax(-1), xh)
        return self._bias(torch.einsum("bhid,hde->bie", z, self._get(f"blocks.{i}.attn.ov")), f"blocks.{i}.attn.o.b")

    def _embed(self, inputs):
        c = self.config
        if c["input"] == "tokens":
            t = inputs.shape[1]
            return self._get("embed")[inputs] + self._get("pos_embed")[:t]
        w = self._get("patch.w")
        d = w.shape[1]
        conv = w.T.reshape(d, c["channels"], *c["patch"])
        x = F.conv2d(inputs, conv, self._get("patch.b"), stride=c["patch"]).flatten(2).transpose(1, 2)
        cls = self._get("cls")
        x = torch.cat([cls.expand(x.shape[0], -1, -1), x], 1)
        return x + self._get("pos_embed")

    def forward(self, **batch):
        """Logits for a glmc.data batch (its input under its task's input key; targets are ignored)."""
        c = self.config
        key = c.get("input_key") or next(k for k in batch if k not in ("targets", "labels"))
        x = self._embed(batch[key])
        for i in range(c["n_layer"]):
            x = x + self._attention(self._norm(x, f"blocks.{i}.ln1"), i)
            h = self._bias(self._norm(x, f"blocks.{i}.ln2") @ self._get(f"blocks.{i}.mlp.in.w").T,
                           f"blocks.{i}.mlp.in.b")
            x = x + self._bias(self.act(h) @ self._get(f"blocks.{i}.mlp.out.w"), f"blocks.{i}.mlp.out.b")
        if c["pool"] == "cls":
            x = x[:, 0]
        elif c["pool"] == "avg":
            x = x[:, 1:].mean(1)
        x = self._norm(x, "ln_final")
        return self._bias(x @ self._get("head.w").T, "head.b")

    def save(self, path) -> Path:
        with atomic_dir(path) as tmp:
            self.write_files(tmp)
        return Path(path)

    def write_files(self, directory: Path) -> None:
        """circuit.safetensors + circuit_config.json into an existing (temporary) directory."""
        from safetensors.torch import save_file

        save_file({k: v.detach().contiguous().cpu() for k, v in self.p.items()}, str(directory / "circuit.safetensors"))
        (directory / "circuit_config.json").write_text(json.dumps({"format": "glmc-circuit", "version": 1,
                                                                   **self.config}, indent=2) + "\n")

    @classmethod
    def load(cls, path) -> "CircuitModel":
        from safetensors.torch import load_file

        p = Path(path)
        cfg = json.loads((p / "circuit_config.json").read_text())
        if cfg.get("format") != "glmc-circuit":
            raise ValueError(f"{p / 'circuit_config.json'} is not a glmc circuit-form config")
        params = {k.replace("__", "."): v for k, v in load_file(str(p / "circuit.safetensors")).items()}
        return cls(cfg, params).eval()


def circuit_model(model) -> CircuitModel:
    """A native model in circuit form (same function; see the module docstring)."""
    view, adapter = canonical_view(model)
    arch = adapter.arch(model)
    if arch.block != "sequential":
        raise UnsupportedModel(f"circuit mode builds sequential blocks; this {arch.family} model's blocks are "
                               f"{arch.block}; use --mode native")
    config = {**adapter.io_spec(model), "input_key": task(adapter.task).input_key, "n_layer": arch.n_layer,
              "n_head": arch.n_head, "d_head": arch.d_head, "ln_eps": arch.ln_eps}
    return CircuitModel(config, circuit_params(view, arch.n_layer)).eval()

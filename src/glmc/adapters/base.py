"""What an adapter is: the only code that knows a model family.

The canonical view is a flat dict of float tensors with role names. Row-vector convention, residual axis LAST:
  embed [V, d]            token embedding (GPT-2)                    — residual writer
  pos_embed [P, d]        position embedding                         — writer
  patch.w [C·p·p, d], patch.b [d], cls [1, d], registers [R, d]      — ViT writers
  blocks.{i}.ln1.w/.b [d] LayerNorm before attention
  blocks.{i}.attn.{q,k,v}.w [H, d_head, d], .b [H, d_head]           — readers (q_h = W_q,h · x + b_q,h)
  blocks.{i}.attn.o.w [H, d_head, d], .o.b [d]                       — writer (out = Σ_h z_h · W_o,h + b)
  blocks.{i}.ls1 / ls2 [d]  LayerScale (timm), folded into the writer by canonicalisation
  blocks.{i}.ln2.w/.b [d]  LayerNorm before the MLP
  blocks.{i}.mlp.in.w [n, d], .in.b [n]                              — reader
  blocks.{i}.mlp.out.w [n, d], .out.b [d]                            — writer
  ln_final.w/.b [d]        final LayerNorm
  head.w [V or classes, d], head.b                                    — reader (LM head / classifier)
Every symmetry in glmc/symmetry/spec.py is written against these names. A bias the model does not have (e.g.
qkv_bias=False) is simply absent. An adapter may add family-specific keys outside this list (timm's
blocks.{i}.attn.q_norm.w/.b); no symmetry touches them, so the adapter must list in Arch.unsupported every
class that would have to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch


class UnsupportedModel(ValueError):
    """The model has a feature that glmc cannot transform exactly; the message names it."""


@dataclass
class Arch:
    family: str  # "gpt2" | "hf-vit" | "timm-vit"
    task: str  # "lm" | "cls"
    n_layer: int
    d_model: int
    n_head: int
    d_head: int
    d_mlp: int
    activation: str
    ln_eps: float
    # symmetry class -> why it is not exact for this model (e.g. "qk" under timm's qk_norm); exact_classes,
    # random_full_transform, transform_model, widen_model and verify all honour it
    unsupported: dict[str, str] = field(default_factory=dict)

    @property
    def relu(self) -> bool:
        return self.activation == "relu"

    def to_dict(self):
        return asdict(self)


class Adapter:
    """Maps a native model to the canonical view and back. Subclasses implement the four methods."""

    family: str = ""

    @staticmethod
    def matches(model) -> bool:
        raise NotImplementedError

    def check_supported(self, model) -> None:
        """Raise UnsupportedModel naming the feature glmc cannot transform exactly."""

    def arch(self, model) -> Arch:
        raise NotImplementedError

    def to_canonical(self, model) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def from_canonical(self, view: dict[str, torch.Tensor], model, ln_eps: float | None = None):
        """A new native model of the same family holding `view` (shapes may differ from `model`'s: wider
        layers, an untied head, a rescaled LayerNorm eps). `model` itself is not modified."""
        raise NotImplementedError

    def hook_modules(self, model) -> dict:
        """Modules whose activations activation matching reads: "blocks.{i}" (output: the residual stream after
        block i), "blocks.{i}.attn.o" and "blocks.{i}.mlp.out" (inputs: per-head outputs concatenated, MLP hidden
        units)."""
        raise NotImplementedError(f"{self.family} adapter exposes no activation hooks")

    def native_state(self, view: dict[str, torch.Tensor], model) -> dict[str, torch.Tensor]:
        """The native parameters (name → tensor) that hold `view` in a model shaped like `model`; built from
        differentiable tensor ops only, so learned matching can back-propagate through it."""
        raise NotImplementedError

    def io_spec(self, model) -> dict:
        """What glmc's circuit-form model (glmc/circuit.py) needs to know about inputs and outputs: "input"
        ("tokens" | "patches", with "channels" and "patch"), "causal", "pool" ("none" | "cls" | "avg") and an
        "activation" name from transformers' ACT2FN. Raise UnsupportedModel for variants it cannot express."""
        raise UnsupportedModel(f"the {self.family} adapter has no circuit form")

    def is_tied(self, model) -> bool:
        """Whether the output head shares its weights with the token embedding."""
        return False

    def untie(self, model):
        """The same function with an untied head (needed to interpolate a tied with an untied model)."""
        return model


def heads_from_columns(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """[d_in, H·d_head] (x·W layout) → [H, d_head, d_in]."""
    d_in, hd = w.shape
    return w.T.reshape(n_head, hd // n_head, d_in)


def heads_to_columns(w: torch.Tensor) -> torch.Tensor:
    """[H, d_head, d_in] → [d_in, H·d_head]."""
    h, dh, d_in = w.shape
    return w.reshape(h * dh, d_in).T


def patch_from_conv(w: torch.Tensor) -> torch.Tensor:
    """Patch-embedding conv weight [d, C, p, p] → canonical patch.w [C·p·p, d] (pixel side untouched)."""
    return w.reshape(w.shape[0], -1).T.clone()


def patch_to_conv(w: torch.Tensor, in_channels: int, kernel_size) -> torch.Tensor:
    """Canonical patch.w [C·p·p, d] → conv weight [d, C, p, p]."""
    return w.T.reshape(w.shape[1], in_channels, *kernel_size)


def copy_view(view: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in view.items()}

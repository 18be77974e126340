"""What an adapter declares about a model's structure besides its groups (glmc/symmetry/spec.py): how its blocks
combine their sublayers and what each norm is and where it sits. Canonicalisation (glmc/view/canonical.py) and the
checks that refuse what glmc cannot transform read these, never a family's name.

Block structure (Arch.block):
  sequential   x ← x + attn(norm1(x)); x ← x + mlp(norm2(x))
  parallel     x ← x + attn(norm1(x)) + mlp(norm2(x))   (GPT-NeoX use_parallel_residual, Phi): both sublayers read
               norms of the same stream and write to it, so every group of the sequential block applies unchanged

Norms (Arch.norms: canonical key prefix, "{i}" for per-block ones → NormSpec):
  kind       "layernorm" (subtracts the mean, so writers may be mean-centred) | "rmsnorm"
  gain       "w" (γ = w) | "1+w" (γ = 1 + w, Gemma) | None (no affine parameters: nothing to fold)
  placement  "input"  before a sublayer (pre-norm; its gain and bias fold into the readers behind it)
             "stream" on the residual stream itself (post-norm): declared, refused by canonicalisation until the
                      residual group it leaves (permutations) is implemented
             "head"   over each query/key head's dimensions (QK-norm): left in place; the adapter declares the
                      per-head groups that commute with it
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCKS = ("sequential", "parallel")
NORM_KINDS = ("layernorm", "rmsnorm")
GAINS = ("w", "1+w", None)
PLACEMENTS = ("input", "stream", "head")
# the canonical norms of a pre-norm block stack (glmc/adapters/base.py)
STANDARD_NORMS = ("blocks.{i}.ln1", "blocks.{i}.ln2", "ln_final")


@dataclass(frozen=True)
class NormSpec:
    """One norm of a model (see the module docstring)."""

    kind: str = "layernorm"
    gain: str | None = "w"
    placement: str = "input"

    def __post_init__(self):
        for value, allowed, what in ((self.kind, NORM_KINDS, "kind"), (self.gain, GAINS, "gain"),
                                     (self.placement, PLACEMENTS, "placement")):
            if value not in allowed:
                raise ValueError(f"norm {what} {value!r} is not one of {', '.join(map(str, allowed))}")

    @property
    def identity_gain(self) -> float:
        """The stored gain value that makes the norm's gain 1 (what canonicalisation leaves behind)."""
        return 0.0 if self.gain == "1+w" else 1.0

    @property
    def offset(self) -> float:
        """γ = stored + offset."""
        return 1.0 if self.gain == "1+w" else 0.0

    @property
    def centres(self) -> bool:
        return self.kind == "layernorm"


def standard_norms(kind: str = "layernorm", gain: str | None = "w") -> dict[str, NormSpec]:
    """The norms of a pre-norm stack: one before each sublayer of every block, and one before the head."""
    return {name: NormSpec(kind, gain, "input") for name in STANDARD_NORMS}


def check_block(block: str) -> str:
    if block not in BLOCKS:
        raise ValueError(f"block structure {block!r} is not one of {', '.join(BLOCKS)}")
    return block

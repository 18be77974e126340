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
             "stream" on the residual stream itself: post-norm blocks x ← LN(x + sublayer(x)) (BERT, RoBERTa), an
                      embedding norm (BERT's, CLIP's pre_layrnorm); its output *is* the stream
             "output" on a sublayer's output before the residual addition, x ← x + norm(sublayer(x)) (Gemma-2 /
                      OLMo-2 sandwich norms); its output is added to the stream
             "head"   over each query/key head's dimensions (QK-norm): left in place; the adapter declares the
                      per-head groups that commute with it

Norms on residual coordinates ("stream" and "output"): their gain γ and bias β multiply and shift the stream's
coordinates themselves, behind a normalisation, so nothing can absorb them: they stay in the model and are residual
tensors the residual map moves (residual_norm_actions). A residual map S must then commute with the normalisation
*and* with a generic diagonal gain: S·diag(γ′)·S⁻¹ must be diagonal, so S is a signed permutation (σP), and the gain
moves by the permutation alone (γ′ = γ·|S|, mode "gain") while the bias moves like any residual vector (β′ = β·S):
  norm(x·S)·|S|-moved γ + β·S = (norm(x)⊙γ + β)·S   holds when norm(x·S) = norm(x)·S, i.e.
  rmsnorm    for every signed permutation (mean(x²) ignores order and signs)            → "signed-permutation"
  layernorm  for permutations and one global sign only: mean(x·P) = mean(x), mean(−x) = −mean(x), but a sign on
             some coordinates changes the mean (LN(x·D) ≠ LN(x)·D)                     → "sign-permutation"
The global sign survives a LayerNorm bias because β is moved with the stream (β′ = −β): LN′(−x) = −n(x)⊙γ − β =
−LN(x). `residual_bound(norms)` gives the largest residual kind the declared norms allow; canonicalisation refuses a
declared residual group outside it. Nothing is folded or centred for such norms (glmc/view/canonical.py).
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCKS = ("sequential", "parallel")
NORM_KINDS = ("layernorm", "rmsnorm")
GAINS = ("w", "1+w", None)
PLACEMENTS = ("input", "stream", "output", "head")
# placements whose gain and bias act on the residual stream's coordinates (see the module docstring)
ON_STREAM = ("stream", "output")
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

    @property
    def on_stream(self) -> bool:
        """Whether the gain and bias act on the residual stream's coordinates (placement "stream" or "output")."""
        return self.placement in ON_STREAM


def standard_norms(kind: str = "layernorm", gain: str | None = "w") -> dict[str, NormSpec]:
    """The norms of a pre-norm stack: one before each sublayer of every block, and one before the head."""
    return {name: NormSpec(kind, gain, "input") for name in STANDARD_NORMS}


def check_block(block: str) -> str:
    if block not in BLOCKS:
        raise ValueError(f"block structure {block!r} is not one of {', '.join(BLOCKS)}")
    return block


def residual_bound(norms: dict) -> str | None:
    """The largest residual kind the norms on residual coordinates allow (module docstring): None when there are
    none (the residual group is then whatever the pre-norm stack allows), "sign-permutation" when one of them is a
    LayerNorm, else "signed-permutation"."""
    on = [spec for spec in norms.values() if spec.on_stream]
    if not on:
        return None
    return "sign-permutation" if any(spec.centres for spec in on) else "signed-permutation"


def residual_norm_actions(norms: dict) -> tuple:
    """The residual group's actions on the norms on residual coordinates: (key template, axis, mode, batch axis)
    rows, the gain by the permutation alone ("gain"), the bias like any residual vector ("co")."""
    rows = []
    for name, spec in norms.items():
        if spec.on_stream:
            if spec.gain is not None:
                rows.append((name + ".w", -1, "gain", None))
            rows.append((name + ".b", -1, "co", None))  # a model without the bias simply lacks the key
    return tuple(rows)

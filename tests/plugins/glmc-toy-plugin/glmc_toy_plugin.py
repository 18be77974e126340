"""A glmc plugin: what a third party writes to add an alignment method, a model family and a data source (no edit
inside glmc).

The method, "random-symmetry", is a control: it moves B by a random element of every group its family declares,
so B′ keeps B's function but lands somewhere arbitrary on its orbit; its barrier is what alignment must beat.
The family is Ministral (transformers' MinistralForCausalLM): Llama's layout (read off modeling_ministral.py:
q/k/v/o without biases, rotate_half RoPE, RMSNorm pre-norms, SwiGLU), with sliding-window attention on some
layers, which no weight symmetry sees, so it reuses glmc's RoPE-decoder adapter with its own classes.
The data source, "docstrings", is English prose about code: the docstrings of the standard library's modules.
"""

from __future__ import annotations

import ast
import sysconfig
from dataclasses import dataclass, replace
from pathlib import Path

from glmc.adapters.rope_decoders import RoPEDecoderAdapter, decoder_names
from glmc.data.sources import DataSource
from glmc.methods import Method
from glmc.options import HELP, Options, option


@dataclass(frozen=True)
class RandomSymmetryOptions(Options):
    """The random-symmetry control's options."""

    method = "random-symmetry"

    seed: int = option(0, HELP["seed"])  # the name glmc's stochastic methods share, so one meaning


def align(model_a, model_b, seed: int = 0):
    """B moved by a random element of its declared groups (A canonicalised, as every method's endpoints are)."""
    import torch

    from glmc.matching.common import canonical_pair, finish
    from glmc.symmetry.random import random_full_transform

    adapter, arch, view_a, view_b = canonical_pair(model_a, model_b)
    transform = random_full_transform(arch, torch.Generator().manual_seed(seed))
    report = {"method": "random-symmetry", "seed": seed, "transform": transform.describe()}
    return finish(model_a, model_b, adapter, arch, view_a, view_b, transform, report)


METHOD = Method(name="random-symmetry", summary="a control: B moved by a random element of its declared groups",
                align=align, options=RandomSymmetryOptions, stochastic=True)


class MinistralAdapter(RoPEDecoderAdapter):
    family = "ministral"
    label = "Ministral"
    names = decoder_names()
    classes = {"ministral": "MinistralForCausalLM"}
    training = replace(RoPEDecoderAdapter.training,  # Llama's presets and options; its own demo and help
                       demo_shape=dict(layers=2, width=64, heads=4, kv_heads=2, mlp=172, tied=False),
                       demo_label="Ministral decoders",
                       help="A Ministral decoder (Llama's layout, sliding-window attention on some layers) on text.")


def read_docstrings(source: str, limit: int = 400_000) -> str:
    """The standard library modules' docstrings, module by module in name order, up to `limit` characters."""
    parts, total = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if doc:
            parts.append(doc.strip() + "\n")
            total += len(parts[-1])
        if total >= limit:
            break
    return "\n".join(parts)[:limit]


SOURCE = DataSource(kind="docstrings", form="docstrings", summary="the standard library's module docstrings",
                    task="lm", read_text=read_docstrings)

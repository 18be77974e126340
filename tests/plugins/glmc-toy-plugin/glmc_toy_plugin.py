"""A glmc plugin: what a third party writes to add an alignment method, a model family, a data source and a task (no
edit inside glmc).

The method, "random-symmetry", is a control: it moves B by a random element of every group its family declares,
so B′ keeps B's function but lands somewhere arbitrary on its orbit; its barrier is what alignment must beat.
The family is Ministral (transformers' MinistralForCausalLM): Llama's layout (read off modeling_ministral.py:
q/k/v/o without biases, rotate_half RoPE, RMSNorm pre-norms, SwiGLU), with sliding-window attention on some
layers, which no weight symmetry sees, so it reuses glmc's RoPE-decoder adapter with its own classes.
The data source, "docstrings", is English prose about code: the docstrings of the standard library's modules.
The task, "induction", is next-token prediction on h random tokens repeated once (the probe of induction heads),
scored on the repeat only, with its generated data source "repeats:V"; any causal language model learns it.
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
from glmc.tasks import Task


@dataclass(frozen=True)
class RandomSymmetryOptions(Options):
    """The random-symmetry control's options."""

    method = "random-symmetry"

    seed: int = option(0, HELP["seed"])  # the name glmc's stochastic methods share, so one meaning


def align(model_a, model_b, options: RandomSymmetryOptions):
    """B moved by a random element of its declared groups (A canonicalised, as every method's endpoints are)."""
    seed = options.seed
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


# --- a task: induction on repeated random tokens -------------------------------------------------------------------
# The classic probe of induction heads: each example is h random tokens followed by the same h again; a model that
# has learned to copy predicts the second half exactly, and nothing can predict the first. Models of it are
# language models (model_task="lm"): any causal LM family trains on it with `glmc train <family> --data repeats:V`.

IGNORE_INDEX = -100  # glmc's loss and accuracy skip these targets (the unpredictable first half)
SPLIT_SEEDS = {"train": 1, "val": 2, "test": 3}


def complete_induction(spec: dict) -> dict:
    """The full spec of repeated random tokens: {"task": "induction", "source": "repeats:V", "context": T,
    "examples": N}; synthetic tokens take no tokenizer (the default one a text preset names is dropped)."""
    check_repeats(spec["source"])
    tokenizer = spec.pop("tokenizer", None)
    if tokenizer not in (None, "char"):
        raise ValueError(f"induction data is synthetic token ids: it takes no tokenizer, got {tokenizer!r}")
    unknown = set(spec) - {"task", "source", "context", "examples"}
    if unknown:
        raise ValueError(f"options {sorted(unknown)} do not apply to induction data {spec['source']!r}")
    spec["context"], spec["examples"] = int(spec.get("context", 32)), int(spec.get("examples", 4096))
    if spec["context"] < 3:
        raise ValueError(f"an induction example repeats at least two tokens: context ≥ 3, got {spec['context']}")
    return spec


class InductionData:
    """Examples of context + 1 tokens, h = (context + 1) // 2 random ones repeated (cut to length), per split:
    `examples` for training, an eighth of that for validation and for test, each split from its own seed."""

    task = "induction"

    def __init__(self, spec: dict):
        import torch

        self.spec, self.context = spec, spec["context"]
        self.vocab_size = int(spec["source"].partition(":")[2])
        h = (self.context + 1) // 2
        self.rows = {}
        for split, seed in SPLIT_SEEDS.items():
            n = spec["examples"] if split == "train" else max(1, spec["examples"] // 8)
            first = torch.randint(0, self.vocab_size, (n, h), generator=torch.Generator().manual_seed(seed))
            self.rows[split] = torch.cat([first, first], 1)[:, : self.context + 1]

    def num_batches(self, split: str, batch_size: int, *, shuffle=None) -> int:
        n = len(self.rows[split])
        return max(1, n // batch_size) if (split == "train" if shuffle is None else shuffle) else -(-n // batch_size)

    def batches(self, split: str, batch_size: int, *, max_batches=None, seed=None, shuffle=None):
        import torch

        rows = self.rows[split]
        shuffle = split == "train" if shuffle is None else shuffle
        order = (torch.randperm(len(rows), generator=torch.Generator().manual_seed(int(seed or 0))) if shuffle
                 else torch.arange(len(rows)))
        h = (self.context + 1) // 2
        for b in range(self.num_batches(split, batch_size, shuffle=shuffle)):
            if max_batches is not None and b >= max_batches:
                return
            seq = rows[order[b * batch_size:(b + 1) * batch_size]]
            targets = seq[:, 1:].clone()
            targets[:, : h - 1] = IGNORE_INDEX  # target t is token t + 1: the first h − 1 are random
            yield {"input_ids": seq[:, :-1].contiguous(), "targets": targets}

    def unigram_entropy(self, split: str = "test") -> float:
        """Uniform random tokens: log V nats per predicted token without copying."""
        import math

        return math.log(self.vocab_size)

    def describe(self) -> str:
        return f"{self.spec['source']}: {self.spec['examples']:,} training examples of {self.context + 1} tokens"


def load_induction(spec: dict, tokenizer=None) -> InductionData:
    return InductionData(spec)


TASK = Task("induction", "input_ids", "targets", "tokens", "induction on repeated random tokens",
            per_position=True, data_label="repeated random tokens", model_label="a language model", causal=True,
            probe_targets="next", model_task="lm", complete=complete_induction, load=load_induction)


def check_repeats(source: str) -> None:
    vocab = source.partition(":")[2]
    if not vocab.isdigit() or int(vocab) < 2:
        raise ValueError(f"induction data is repeats:V with a vocabulary V ≥ 2, got {source!r}")


REPEATS = DataSource(kind="repeats", form="repeats:V", summary="random tokens from a vocabulary of V, repeated",
                     task="induction", generated=True, check=check_repeats)

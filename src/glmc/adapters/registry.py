"""Which adapter handles a model, a family name or a checkpoint directory, and the forward call for any model
glmc runs (native ones through their adapter). glmc's own families are ADAPTERS; an installed package adds one
with an entry point in the group glmc.families naming its Adapter subclass (glmc/plugins.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from glmc import plugins
from glmc.adapters.base import Adapter, UnsupportedModel, logits
from glmc.adapters.bert import BertAdapter, RobertaAdapter
from glmc.adapters.common import hf_config
from glmc.adapters.gemma import GemmaAdapter
from glmc.adapters.gpt2 import GPT2Adapter
from glmc.adapters.hf_vit import HFViTAdapter
from glmc.adapters.llama import LlamaAdapter
from glmc.adapters.neox import NeoXAdapter
from glmc.adapters.olmo import OlmoAdapter
from glmc.adapters.qwen3 import Qwen3Adapter
from glmc.adapters.timm_vit import TimmViTAdapter

ADAPTERS: list[type[Adapter]] = [GPT2Adapter, HFViTAdapter, TimmViTAdapter, LlamaAdapter, NeoXAdapter, Qwen3Adapter,
                                 GemmaAdapter, OlmoAdapter, BertAdapter, RobertaAdapter]
FAMILIES = tuple(cls.family for cls in ADAPTERS)
REGISTRY = plugins.Registry("family", Adapter, "family", ADAPTERS, subclasses=True)


def adapters() -> list[type[Adapter]]:
    """Every family's adapter class: glmc's own, then installed plugins' (loaded on first use)."""
    return list(REGISTRY.all().values())


def families() -> tuple[str, ...]:
    return tuple(cls.family for cls in adapters())


def adapter_for(model, check: bool = True) -> Adapter:
    """The adapter of `model`'s family. With `check` (the default), a model with a feature glmc cannot
    transform exactly raises UnsupportedModel; without it (running, saving) any model of the family passes."""
    for cls in adapters():
        if cls.matches(model):
            adapter = cls()
            if check:
                adapter.check_supported(model)
            return adapter
    raise UnsupportedModel(f"no glmc adapter for {type(model).__module__}.{type(model).__name__} "
                           f"(supported families: {', '.join(families())})")


def adapter_named(family: str) -> Adapter:
    for cls in adapters():
        if cls.family == family:
            return cls()
    raise UnsupportedModel(f"unknown model family {family!r}; expected one of {', '.join(families())}")


def adapter_for_dir(path) -> Adapter:
    """The adapter whose on-disk format the checkpoint directory `path` holds."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    claims = [cls for cls in adapters() if cls.checkpoint.claims(p)]
    if len(claims) == 1:
        return claims[0]()
    if claims:
        raise UnsupportedModel(f"{path} holds files of several families ({', '.join(c.family for c in claims)}); "
                               "keep one model per directory")
    formats = ", ".join(f"{cls.label} ({cls.checkpoint.format})" for cls in adapters())
    files = sorted(f.name for f in p.iterdir())
    if not files:
        raise FileNotFoundError(f"{path} holds no model (it is empty); glmc reads {formats}")
    config = hf_config(p) if (p / "config.json").is_file() else None
    if isinstance(config, dict):
        got = f"model_type {config['model_type']!r}" if config.get("model_type") else "no model_type"
        raise UnsupportedModel(f"{p / 'config.json'} has {got}; glmc supports {formats}")
    raise UnsupportedModel(f"{path} holds no model glmc can load (files: {', '.join(files)}); glmc reads {formats}")


def output_head(model) -> tuple[str, torch.nn.Linear] | None:
    """(name, module) of the linear head whose input is the final hidden state, where the family declares its logits
    are exactly that head's output (Training.head_loss), or None."""
    if getattr(model, "reads_batch", False) or not adapter_for(model, check=False).training.head_loss:
        return None
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        return None
    return next(((name, module) for name, module in model.named_modules() if module is head), None)


def forward(model, batch: dict, params: dict | None = None) -> torch.Tensor:
    """Logits of `model` on a glmc.data batch, optionally with `params` substituted (functional_call). glmc's own
    models that read a batch dict themselves (`reads_batch = True`, e.g. the circuit form) are called with it."""
    if getattr(model, "reads_batch", False):
        return model(**batch) if params is None else torch.func.functional_call(model, params, (), batch)
    return logits(adapter_for(model, check=False), model, batch, params)

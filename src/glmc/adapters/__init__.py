"""Adapters: the only code that knows model families. `adapter_for(model)` picks one."""

from glmc.adapters.base import Adapter, Arch, UnsupportedModel
from glmc.adapters.gpt2 import GPT2Adapter
from glmc.adapters.hf_vit import HFViTAdapter
from glmc.adapters.timm_vit import TimmViTAdapter

ADAPTERS: list[type[Adapter]] = [GPT2Adapter, HFViTAdapter, TimmViTAdapter]


def adapter_for(model) -> Adapter:
    for cls in ADAPTERS:
        if cls.matches(model):
            adapter = cls()
            adapter.check_supported(model)
            return adapter
    names = ", ".join(c.family for c in ADAPTERS)
    raise UnsupportedModel(f"no glmc adapter for {type(model).__name__} (supported families: {names})")


__all__ = ["Adapter", "Arch", "UnsupportedModel", "adapter_for", "ADAPTERS"]

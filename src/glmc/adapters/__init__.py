"""Adapters: the only code that knows model families. `adapter_for(model)`, `adapter_named(family)` and
`adapter_for_dir(path)` pick one; `forward(model, batch)` runs any model glmc handles."""

from glmc.adapters.base import Adapter, Arch, UnsupportedModel, batch_of, canonical_shapes, untied
from glmc.adapters.registry import (
    ADAPTERS,
    FAMILIES,
    adapter_for,
    adapter_for_dir,
    adapter_named,
    adapters,
    families,
    forward,
    output_head,
)

__all__ = ["Adapter", "Arch", "UnsupportedModel", "adapter_for", "adapter_named", "adapter_for_dir", "forward",
           "output_head", "ADAPTERS", "FAMILIES", "adapters", "families", "batch_of", "canonical_shapes", "untied"]

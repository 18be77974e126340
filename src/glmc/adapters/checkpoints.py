"""A family's checkpoint directories as one declared part (Adapter.checkpoint): which directories it claims, what
they hold (for error messages), which weights their config implies, and how they are read and written. Two formats
exist: a Hugging Face save_pretrained directory (HFCheckpoint) and a format of glmc's own marked by its config file
(FileCheckpoint: timm's, glmc/adapters/timm_config.py). The pickle, shard and rename rules every format shares are
glmc/adapters/files.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from glmc.adapters.common import hf_config, hf_expected_weights, load_pretrained, save_pretrained
from glmc.errors import UnsupportedModel


@dataclass(frozen=True, kw_only=True)
class HFCheckpoint:
    """A save_pretrained directory (config.json + safetensors, or pytorch_model.bin), claimed when config.json's
    model_type is a key of `classes` (model_type -> the transformers classes served, the first by default).
    `by_architecture`: the class is the one config.json's `architectures` names (refused by name when it is in
    `refused`, class name -> why; refused when not served), as for families whose one model type has several
    heads; otherwise the model type's class, whatever `architectures` says (as AutoModelForCausalLM does).
    `renames`: stored tensor name (regex) -> the name the class loads, for names transformers does not rename
    itself (its own legacy renames, glmc/adapters/files.py, apply to every family)."""

    classes: dict[str, tuple[str, ...]]
    by_architecture: bool = False
    refused: dict[str, str] = field(default_factory=dict)
    renames: dict[str, str] = field(default_factory=dict)
    format: str = ""  # what the directory holds, for error messages (default: from the model types)
    config_file: str = "config.json"
    config_format: str = "Hugging Face"

    def __post_init__(self):
        if not self.format:
            types = [repr(t) for t in self.classes]
            types = " or ".join([", ".join(types[:-1]), types[-1]] if len(types) > 1 else types)
            held = f"config.json with model_type {types} + *.safetensors (save_pretrained)"
            object.__setattr__(self, "format", held)

    @property
    def native_classes(self) -> tuple[str, ...]:
        """The model classes served or refused by name: with the native names of Adapter.names, no module outside
        adapters/ may name them (tests/meta/test_layering.py)."""
        return tuple(dict.fromkeys([c for served in self.classes.values() for c in served] + list(self.refused)))

    @property
    def model_types(self) -> tuple[str, ...]:
        return tuple(self.classes)

    def claims(self, path: Path) -> bool:
        """Whether the checkpoint directory `path` holds a model of this format."""
        config = hf_config(path)
        return config is not None and config.get("model_type") in self.classes

    def class_name(self, path: Path) -> str:
        """The transformers class that loads the directory (UnsupportedModel for a class refused or not served)."""
        config = hf_config(path) or {}
        served = self.classes[config.get("model_type", next(iter(self.classes)))]
        if not self.by_architecture:
            return served[0]
        name = (config.get("architectures") or served)[0]
        if name in self.refused:
            raise UnsupportedModel(f"{name} in {path}: {self.refused[name]}")
        if name not in served:
            raise UnsupportedModel(f"{path} holds a {name}; glmc serves {', '.join(served)} for this model type")
        return name

    def expected_weights(self, path: Path, label: str) -> dict | None:
        """{weight name on disk: shape} that the directory's config implies, checked against the safetensors
        headers before loading (a loader that silently initialises missing weights at random would hide them)."""
        return hf_expected_weights(path, self.class_name(path), label)

    def load(self, path: Path):
        """The model in the directory (local files only, never a hub)."""
        import transformers

        return load_pretrained(getattr(transformers, self.class_name(path)), path, self.renames)

    def save(self, model, directory: Path) -> None:
        """Write the model's files into the existing directory `directory`."""
        save_pretrained(model, directory)


@dataclass(frozen=True, kw_only=True)
class FileCheckpoint:
    """A format of glmc's own (timm's models have no config file of their own): claimed when `config_file` exists,
    read and written by `load(path)` and `save(model, directory)`; the loader checks weights strictly itself."""

    config_file: str
    config_format: str
    format: str
    reader: object  # path -> model
    writer: object  # (model, directory) -> None
    native_classes: tuple[str, ...] = ()  # the model classes read (as HFCheckpoint.native_classes)
    renames: dict[str, str] = field(default_factory=dict)
    model_types: tuple[str, ...] = ()

    def claims(self, path: Path) -> bool:
        return (Path(path) / self.config_file).is_file()

    def expected_weights(self, path: Path, label: str) -> dict | None:
        return None

    def load(self, path: Path):
        return self.reader(path)

    def save(self, model, directory: Path) -> None:
        self.writer(model, directory)

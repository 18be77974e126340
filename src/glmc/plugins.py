"""Extensions from other packages: Python entry points, as pytest and MkDocs find their plugins.

A package extends glmc by declaring, in its own pyproject.toml, one entry point per record:

    [project.entry-points."glmc.methods"]
    my-method = "my_package.glmc_plugin:METHOD"          # a glmc.methods.Method
    [project.entry-points."glmc.families"]
    my-family = "my_package.glmc_plugin:MyAdapter"       # a glmc.adapters.base.Adapter subclass
    [project.entry-points."glmc.tasks"]
    my-task = "my_package.glmc_plugin:TASK"              # a glmc.tasks.Task
    [project.entry-points."glmc.data_sources"]
    my-corpus = "my_package.glmc_plugin:SOURCE"          # a glmc.data.sources.DataSource

Each registry loads its group the first time it is read (glmc's own records first), so installing the package
is all it takes: no edit inside glmc. The entry point's name must be the record's name; a plugin that fails to
import, names a record wrongly or reuses a name glmc already has is refused by name (PluginError).
"""

from __future__ import annotations

import importlib
import importlib.metadata

from glmc.errors import GlmcError

GROUPS = {"method": "glmc.methods", "family": "glmc.families", "data_source": "glmc.data_sources",
          "task": "glmc.tasks"}


class PluginError(GlmcError, RuntimeError):
    """An installed package's glmc entry point that cannot be used; the message names the package and the fix."""


def entry_points(kind: str) -> list[importlib.metadata.EntryPoint]:
    """The installed entry points of one extension point (`kind`: a key of GROUPS), sorted by name."""
    return sorted(importlib.metadata.entry_points(group=GROUPS[kind]), key=lambda e: e.name)


def load(kind: str, check=None) -> list:
    """Every installed plugin record of `kind`, loaded. `check(record, entry_point)` raises what is wrong with
    one (its message then names the package)."""
    out = []
    for ep in entry_points(kind):
        where = f"{ep.name} = {ep.value!r} (package {_package(ep)}, entry point group {GROUPS[kind]!r})"
        try:
            record = ep.load()
        except Exception as e:  # noqa: BLE001 — any failure of a third party's import is reported, by name
            raise PluginError(f"the glmc {kind} plugin {where} failed to load: {type(e).__name__}: {e} (fix or "
                              "uninstall that package)") from e
        try:
            if check is not None:
                check(record, ep)
        except (TypeError, ValueError) as e:
            raise PluginError(f"the glmc {kind} plugin {where} is not usable: {e}") from e
        out.append(record)
    return out


class Registry:
    """The records of one extension point by key: glmc's own (`builtin`, registered first) and installed plugins'
    (loaded the first time the registry is read). `key`: the record attribute naming it (its entry point's name).
    A record is an instance of `record_type`, or with `subclasses` a subclass of it (a family's Adapter class)."""

    def __init__(self, kind: str, record_type: type, key: str, builtin=(), subclasses: bool = False):
        self.kind, self.record_type, self.key, self.builtin = kind, record_type, key, tuple(builtin)
        self.subclasses = subclasses
        self._records: dict = {}
        self._loaded = False

    def _label(self) -> str:
        name = f"{self.record_type.__module__}.{self.record_type.__name__}"
        return f"{name} subclass" if self.subclasses else name

    def _accepts(self, record) -> bool:
        if self.subclasses:
            return isinstance(record, type) and issubclass(record, self.record_type)
        return isinstance(record, self.record_type)

    def register(self, record):
        """Add a record (glmc's own, or one a test or notebook defines); its key must be new."""
        if not self._accepts(record):
            raise TypeError(f"a glmc {self.kind} is a {self._label()}, not {record!r}")
        name = getattr(record, self.key)
        if name in self._records:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        self._records[name] = record
        return record

    def all(self) -> dict:
        """Every record by key: glmc's own, then installed plugins'."""
        if not self._loaded:
            self._loaded = True
            for record in self.builtin:
                if getattr(record, self.key) not in self._records:
                    self.register(record)
            load(self.kind, check=self._check_plugin)
        return dict(self._records)

    def _check_plugin(self, record, ep) -> None:
        if not self._accepts(record):
            raise TypeError(f"it is {record!r}, not a {self._label()}")
        if getattr(record, self.key) != ep.name:
            raise ValueError(f"its record is named {getattr(record, self.key)!r}: name the entry point the same")
        self.register(record)


def _package(ep) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "unknown"


def resolve(ref):
    """A function a record gives as itself or as "module:function" (imported on first use, so that listing records
    imports no heavy module: `glmc --help` loads every method's and task's record)."""
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)

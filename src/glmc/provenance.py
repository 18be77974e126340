"""Where a result came from: the "provenance" block of every JSON file glmc writes.

A figure that cannot be traced to the code, data, options and models that made it is not a research result, so
align.json, a barrier's JSON, merge.json, a sweep's cells and sweep.json, glmc.json of a trained model and the
benchmark suite's rows all carry the same block (schema "glmc.provenance/1"):

    glmc        the installed version
    code        {"commit", "dirty", "checkout"} of the git checkout glmc was imported from, when it runs from
                one (an editable install or PYTHONPATH); None for an installed wheel
    versions    python, torch, transformers, timm, numpy (and submitit / ray when loaded)
    device      where the work ran: "cpu", "cuda:0", … with the GPU's name and torch's CPU threads
    seeds       the seeds the work drew from (None where nothing random ran)
    options     the full options objects, every field (defaults included)
    data        the data spec, a sha256 of the evaluation batches' contents (whatever their source), and a sha256
                of each local file the spec names
    models      per model: its path (None for an in-memory model), class and a fingerprint of its weights
    command     the command line, when run from one
    created     UTC time, ISO 8601

Fingerprints are cheap on any size: a weights file's is the sha256 of its size, its header (safetensors: the JSON
index of names, dtypes, shapes and offsets) and 64 blocks of 4 KiB spread over the file, so two seeds with the
same header still differ, and a 1B-parameter checkpoint costs well under a megabyte of reading.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import platform
import subprocess
import sys
import warnings
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from glmc import __version__
from glmc.methods import methods

SCHEMA = "glmc.provenance/1"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
SAMPLES, BLOCK = 64, 4096


def provenance(*, options=None, data=None, models=(), seeds=None, device=None, command=None) -> dict:
    """The provenance block (see the module docstring). `options`: an options object, a dict of them, or a plain
    dict; `data`: {"spec": …, "batches": [...], "files": [...]} (any part may be missing) or a spec string;
    `models`: paths and/or in-memory models; `device`: a torch device or its name (default: the first model's)."""
    models = list(models)
    return {"schema": SCHEMA, "glmc": __version__, "code": code_state(), "versions": versions(),
            "device": _device(device, models), "seeds": seeds, "options": _plain(options),
            "data": data_record(data), "models": [model_record(m) for m in models],
            "command": command if command is not None else _command(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


@lru_cache(maxsize=1)
def code_state() -> dict | None:
    """{"commit", "dirty", "checkout"} of the git work tree holding glmc's source, or None when glmc was
    installed from a wheel (no work tree) or git is missing. Asked once per process: the tree does not change
    under a running command in a way a result could reflect."""
    src = Path(__file__).resolve().parent
    try:
        top = _git(src, "rev-parse", "--show-toplevel")
        if top is None or not (Path(top) / "src" / "glmc").resolve() == src:
            return None  # glmc sits in some other repository's tree (e.g. a venv inside a project): not ours
        commit = _git(src, "rev-parse", "HEAD")
        status = _git(src, "status", "--porcelain", "--untracked-files=no")
    except OSError:
        return None
    return {"commit": commit, "dirty": bool(status), "checkout": top}


def _git(cwd: Path, *args) -> str | None:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    return proc.stdout.strip() if proc.returncode == 0 else None


def versions() -> dict:
    """Versions of Python and of the libraries a result depends on (those not installed are left out)."""
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "timm", "numpy", "safetensors", "tokenizers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    for name in ("ray", "submitit"):  # the executors: recorded only where a sweep used them
        if name in sys.modules:
            out[name] = version(name)
    return out


def _device(device, models) -> dict:
    if device is None:
        first = next((m for m in models if hasattr(m, "parameters")), None)
        param = next(first.parameters(), None) if first is not None else None
        device = param.device if param is not None else "cpu"
    device = torch.device(device)
    out = {"type": str(device), "threads": torch.get_num_threads()}
    if device.type == "cuda":
        out["name"] = torch.cuda.get_device_name(device)
    else:
        out["name"] = platform.processor() or platform.machine()
    return out


def full_options(method: str, given: dict) -> dict:
    """Every field of `method`'s options class (glmc/options.py), the given values on the defaults, plus the
    given values no class field holds (mode, a pair option): what ran, not only what was typed."""
    record = methods().get(method)
    cls = record.options if record is not None else None
    if cls is None:
        return {"method": method, **_plain(given)}
    with warnings.catch_warnings():  # old option names: the caller already warned
        warnings.simplefilter("ignore", DeprecationWarning)
        fields = cls.build(**{k: v for k, v in given.items() if k in cls.names()}).as_dict()
    return {"method": method, **_plain(fields), **_plain({k: v for k, v in given.items() if k not in fields})}


def _plain(options):
    """Options as plain JSON: an options dataclass -> its fields; dicts and lists recursively; other values
    as they are (json's default=str handles the rest)."""
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options)}
    if isinstance(options, dict):
        return {str(k): _plain(v) for k, v in options.items() if k != "data"}  # data has its own record
    if isinstance(options, (list, tuple)):
        return [_plain(v) for v in options]
    if hasattr(options, "spec") and hasattr(options, "batches"):  # a data set object given as an option
        return {"spec": _plain(options.spec)}
    return options


def data_record(data) -> dict | None:
    """{"spec", "batches_sha256", "batches", "files"}: what was read and a hash of its contents."""
    if data is None:
        return None
    if isinstance(data, (str, dict)) and not ({"spec", "batches", "files"} & set(data if isinstance(data, dict)
                                                                               else ())):
        data = {"spec": data}
    spec = data.get("spec")
    out = {"spec": _plain(spec)}
    if data.get("batches") is not None:
        out["batches"] = len(data["batches"])
        out["batches_sha256"] = batches_hash(data["batches"])
    files = list(data.get("files") or []) + spec_files(spec)
    out["files"] = [{"path": str(f), "sha256": file_hash(f)} for f in dict.fromkeys(Path(f) for f in files)
                    if Path(f).is_file()]
    return out


def spec_files(spec) -> list[Path]:
    """Local files a data spec names (jsonl:PATH:…, parquet:PATH, csv:…, a plain path): every part of the spec
    that is an existing file, or the files of an existing folder (hf-disk: save_to_disk folders)."""
    if isinstance(spec, dict):
        spec = spec.get("source")
    if not isinstance(spec, str):
        return []
    found = []
    for part in spec.split(":"):
        p = Path(part).expanduser()
        if part and p.is_file():
            found.append(p)
        elif part and p.is_dir():
            found += sorted(f for f in p.rglob("*") if f.is_file())[:1000]
    return found


def batches_hash(batches) -> str:
    """sha256 over the evaluation batches' tensors (keys, dtypes, shapes and bytes), in order: equal batches
    give equal hashes whatever their source."""
    h = hashlib.sha256()
    for batch in batches:
        items = batch.items() if isinstance(batch, dict) else enumerate(batch if isinstance(batch, (list, tuple))
                                                                         else [batch])
        for k, v in items:
            h.update(str(k).encode())
            if isinstance(v, torch.Tensor):
                t = v.detach().to("cpu").contiguous()
                h.update(f"{t.dtype}{tuple(t.shape)}".encode())
                h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            else:
                h.update(repr(v).encode())
    return h.hexdigest()


def file_hash(path) -> str:
    """sha256 of a data file's whole content (data files are read whole anyway)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_record(model) -> dict:
    """A model given as a path: {"path", "weights": [{"file", "fingerprint"}]}; in memory: {"path": None,
    "class", "parameters", "fingerprint"} (sampled values of every parameter)."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        files = sorted(f for f in path.iterdir() if f.suffix in WEIGHT_SUFFIXES) if path.is_dir() else [path]
        return {"path": str(model), "weights": [{"file": f.name, "fingerprint": weights_fingerprint(f)}
                                                for f in files if f.is_file()]}

    h = hashlib.sha256()
    n = 0
    with torch.no_grad():
        for name, p in model.state_dict().items():
            flat = p.detach().reshape(-1)
            n += flat.numel()
            step = max(1, flat.numel() // 1024)
            sample = flat[::step].to("cpu", torch.float64).contiguous()
            h.update(f"{name}{tuple(p.shape)}{p.dtype}".encode() + sample.numpy().tobytes())
    return {"path": getattr(model, "name_or_path", None) or None, "class": type(model).__name__,
            "parameters": n, "fingerprint": h.hexdigest()}


def weights_fingerprint(path) -> str:
    """sha256 of a weights file's size, header and SAMPLES blocks of BLOCK bytes spread evenly over it."""
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        head = f.read(8)
        h.update(head)
        if path.suffix == ".safetensors" and len(head) == 8:
            h.update(f.read(min(int.from_bytes(head, "little"), 100 << 20)))  # the JSON header
        for i in range(SAMPLES):
            f.seek(size * i // SAMPLES)
            h.update(f.read(BLOCK))
    return h.hexdigest()


def _command() -> list[str] | None:
    argv = list(sys.argv)
    if not argv or not argv[0]:
        return None
    name = Path(argv[0]).name
    if name in ("glmc", "__main__.py") or "benchmarks" in argv[0] or "sweep_cell" in " ".join(argv[:2]):
        return [name if name == "glmc" else argv[0], *argv[1:]]
    return None  # a notebook or a test runner: its argv says nothing about this result

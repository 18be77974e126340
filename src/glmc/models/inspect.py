"""What a checkpoint is, and whether checkpoints can be aligned, before any work is done (`glmc inspect`).

Per model: family, class, task, sizes, parameter count, the dtype and layout of its weight files, a fingerprint
of its tokenizer, and every symmetry group glmc declares for it (Arch.groups: kind, size, how many copies) with
those it refuses and why (Arch.unsupported).

For two or more models, `incompatibility` gives the first reason they cannot be aligned, interpolated or merged,
as (code, one-line message); `align`, `barrier` and `merge` run the same check first (check_models). Codes, in the
order they are checked: family, depth, vocabulary, positions, patch, classes, heads, width, groups, tokenizer.
Models that differ only in width pass when one is at most as wide as the other in every width (residual, heads,
head size, MLP): the narrower one is embedded exactly. Tokenizers are compared only when both directories have
one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from glmc.adapters import adapter_for, canonical_shapes
from glmc.adapters.files import BIN_SINGLE, SAFE_SINGLE, weight_files
from glmc.errors import IncompatibleModels
from glmc.tasks import task

# canonical roles whose leading sizes do not depend on the width -> the reason code a difference gives
FIXED_ROLES = {"embed": "vocabulary", "pos_embed": "positions", "patch.w": "patch", "cls": "patch",
               "registers": "patch"}
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "spiece.model")


def tokenizer_fingerprint(directory) -> dict | None:
    """{"sha256": first 16 hex digits, "files": [...]} over what decides the token ids: tokenizer.json's model,
    normaliser, pre-tokeniser and added tokens (not its padding or truncation settings), or the vocabulary files
    of older tokenizers; None when the directory has no tokenizer."""
    if directory is None:
        return None
    d = Path(directory)
    files = [f for f in TOKENIZER_FILES if (d / f).is_file()]
    if not files:
        return None
    h = hashlib.sha256()
    if "tokenizer.json" in files:
        try:
            data = json.loads((d / "tokenizer.json").read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            data = None
        if isinstance(data, dict):
            parts = {k: data.get(k) for k in ("model", "normalizer", "pre_tokenizer", "added_tokens")}
            h.update(json.dumps(parts, sort_keys=True).encode())
            return {"sha256": h.hexdigest()[:16], "files": ["tokenizer.json"]}
    for f in files:
        h.update(f.encode() + b"\0" + (d / f).read_bytes())
    return {"sha256": h.hexdigest()[:16], "files": files}


def weights_layout(directory) -> dict:
    """{"format": "safetensors" | "pickle", "files": n, "sharded": bool} of a model directory's weight files."""
    kind, files = weight_files(directory)
    sharded = kind is not None and [f.name for f in files] not in ([SAFE_SINGLE], [BIN_SINGLE]) and (
        len(files) > 1 or "-of-" in files[0].name)
    return {"format": kind, "files": len(files), "sharded": sharded}


def describe(model, directory=None, stored_dtype=None) -> dict:
    """Everything `glmc inspect` reports about one model (JSON-serialisable)."""

    adapter = adapter_for(model, check=False)
    arch = adapter.arch(model)
    sizes = {"layers": arch.n_layer, "d_model": arch.d_model, "heads": arch.n_head, "d_head": arch.d_head,
             "mlp": arch.d_mlp, "activation": arch.activation, "norm": arch.norm}
    try:
        fixed = {ROLE_LABELS.get(k, k): list(v) for k, v in _fixed(adapter, model).items()}
    except Exception as e:  # a model glmc cannot transform: its canonical shapes are refused with the reason
        fixed, arch.unsupported = {}, {**arch.unsupported, "model": str(e)}
    dtype = stored_dtype or next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    out = {"path": None if directory is None else str(directory), "family": adapter.family,
           "class": type(model).__name__, "task": arch.task, "sizes": {**sizes, **fixed},
           "parameters": sum(p.numel() for p in model.parameters()),
           "dtype": str(dtype).removeprefix("torch."),
           "tied_head": adapter.is_tied(model),
           "weights": weights_layout(directory) if directory is not None else None,
           "tokenizer": tokenizer_fingerprint(directory),
           "groups": {role: {k: v for k, v in asdict(g).items() if v not in (None, (), False)}
                      for role, g in arch.groups.items()},
           "refused": dict(arch.unsupported)}
    return out


ROLE_LABELS = {"embed": "vocabulary", "pos_embed": "positions", "patch.w": "patch_inputs", "head.w": "outputs",
               "cls": "class_token", "registers": "registers"}


def _fixed(adapter, model) -> dict:
    roles = set(FIXED_ROLES) | {"head.w"}
    return {k: shape[:-1] for k, shape in canonical_shapes(adapter, model).items() if k in roles}


def incompatibility(models, paths) -> tuple[str, str] | None:
    """(reason code, one-line message) for the first reason `models` cannot be aligned together, or None."""
    adapters = [adapter_for(m, check=False) for m in models]
    pa = paths[0]
    for adapter, p in zip(adapters[1:], paths[1:]):
        if adapter.family != adapters[0].family:
            return "family", (f"cannot combine a {adapters[0].family} model ({pa}) with a {adapter.family} model "
                              f"({p}): glmc aligns models of one family and task")
    arches = [ad.arch(m) for ad, m in zip(adapters, models)]
    for arch, p in zip(arches[1:], paths[1:]):
        if arch.n_layer != arches[0].n_layer:
            return "depth", (f"models differ in depth ({pa}: {arches[0].n_layer} layers, {p}: {arch.n_layer}); glmc "
                             "aligns models of the same depth (widths may differ)")
    fixed = [_fixed(ad, m) for ad, m in zip(adapters, models)]
    for f, p in zip(fixed[1:], paths[1:]):
        for role in sorted(set(fixed[0]) | set(f)):
            if fixed[0].get(role) != f.get(role):
                code = FIXED_ROLES.get(role) or ("vocabulary" if task(arches[0].task).reads_text else "classes")
                what = {"vocabulary": "vocabulary size", "positions": "positions (context length or number of "
                        "patches)", "patch": "patch size × channels", "classes": "output size (classes)"}[code]
                return code, (f"models differ in {what} ({pa}: {_size(fixed[0].get(role))}, {p}: "
                              f"{_size(f.get(role))}); glmc aligns models that differ only in width")
    shapes = [(x.d_model, x.n_head, x.d_head, x.d_mlp) for x in arches]
    for s, arch, p in zip(shapes[1:], arches[1:], paths[1:]):
        nested = all(x <= y for x, y in zip(s, shapes[0])) or all(x >= y for x, y in zip(s, shapes[0]))
        if not nested:
            code = "heads" if s[1] != shapes[0][1] else "width"
            return code, (f"one model must be at most as wide as the other in every width (residual, heads, head "
                          f"size, MLP): {pa}: {shapes[0]}, {p}: {s}")
        if s == shapes[0] and arch.groups != arches[0].groups:
            differ = [r for r in {**arch.groups, **arches[0].groups} if arch.groups.get(r) != arches[0].groups.get(r)]
            return "groups", (f"{pa} and {p} declare different symmetry groups ({', '.join(differ)}): they are not the "
                              "same architecture, so they cannot be aligned or averaged")
    tokenizers = [tokenizer_fingerprint(p) for p in paths]
    for t, p in zip(tokenizers[1:], paths[1:]):
        if t is not None and tokenizers[0] is not None and t["sha256"] != tokenizers[0]["sha256"]:
            return "tokenizer", (f"models differ in tokenizer ({pa}: {tokenizers[0]['sha256']}, {p}: {t['sha256']}): "
                                 "the same token id means different text to them; glmc aligns models that read the "
                                 "same tokens")
    return None


def check_models(models, paths) -> None:
    """Raise IncompatibleModels with the first reason of `incompatibility`."""
    found = incompatibility(models, [None if p is None else str(p) for p in paths])
    if found is not None:
        raise IncompatibleModels(found[1])


def _size(shape) -> str:
    if shape is None:
        return "none"
    return str(shape[0]) if len(shape) == 1 else "×".join(map(str, shape))

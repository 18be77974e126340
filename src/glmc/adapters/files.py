"""The weight files of a Hugging Face model directory, as the releases people hold lay them out:

- ``model.safetensors``, or shards ``model-0000k-of-0000n.safetensors`` listed by ``model.safetensors.index.json``
  (every shard the index names must be there);
- older releases only: ``pytorch_model.bin``, or shards listed by ``pytorch_model.bin.index.json``. These are
  pickle-based; glmc reads them only through ``torch.load(weights_only=True)``, PyTorch's restricted unpickler that
  rebuilds tensors and plain containers and refuses anything else (code, arbitrary classes). Whatever it refuses
  stays refused, in one line. Each such read prints a one-line note on stderr; ``glmc convert`` rewrites the
  directory as safetensors.

Tensor names: some checkpoints use names transformers renames on load. glmc's checks read them the same way:
`renamed` applies LEGACY_RENAMES (the renames transformers itself applies to every model, as in its
conversion_mapping "legacy" table) and an adapter's own (Adapter.checkpoint.renames, also passed to from_pretrained as
its key_mapping, so a family may declare a rename transformers does not make).
"""

from __future__ import annotations

import json
import pickle
import re
import sys
import warnings
import zipfile
from pathlib import Path

import torch

from glmc.errors import BadCheckpoint

SAFE_INDEX = "model.safetensors.index.json"
SAFE_SINGLE = "model.safetensors"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"
# regex on a stored name -> its replacement; transformers 5 applies these on load to every model (LayerNorm modules
# of BERT-era checkpoints were saved with TensorFlow's gamma/beta names)
SHARD = re.compile(r"^model-\d+-of-\d+\.safetensors$")
LEGACY_RENAMES = {r"LayerNorm\.gamma$": "LayerNorm.weight", r"LayerNorm\.beta$": "LayerNorm.bias"}
TORCH_DTYPE_CODES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64", "int64": "I64",
                     "int32": "I32", "int8": "I8", "uint8": "U8", "bool": "BOOL"}
CONVERT_HINT = "rewrite it as safetensors (glmc convert DIR OUT)"


def weight_files(path) -> tuple[str | None, list[Path]]:
    """("safetensors" | "pickle" | None, the weight files of the model directory `path`), in transformers' order of
    preference: model.safetensors, a safetensors index's shards, every other *.safetensors (a timm directory's),
    pytorch_model.bin, a pickle index's shards. Raises BadCheckpoint when an index names a shard that is not
    there, or shards have no index."""
    p = Path(path)
    if (p / SAFE_SINGLE).is_file():
        return "safetensors", [p / SAFE_SINGLE]
    if (p / SAFE_INDEX).is_file():
        return "safetensors", _indexed(p, SAFE_INDEX)
    loose = sorted(f for f in p.glob("*.safetensors") if f.is_file())
    shards = [f.name for f in loose if SHARD.match(f.name)]
    if shards:
        raise BadCheckpoint(f"{p} has shards ({shards[0]}, …) but no {SAFE_INDEX} to say which tensor is where: "
                            "the download is incomplete; download it again")
    if loose:
        return "safetensors", loose
    if (p / BIN_SINGLE).is_file():
        return "pickle", [p / BIN_SINGLE]
    if (p / BIN_INDEX).is_file():
        return "pickle", _indexed(p, BIN_INDEX)
    return None, []


def _indexed(p: Path, name: str) -> list[Path]:
    try:
        index = json.loads((p / name).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadCheckpoint(f"{p / name} is not valid JSON ({e}); download or write the checkpoint again") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise BadCheckpoint(f"{p / name} has no weight_map: it does not index any shard; download or write the "
                            "checkpoint again")
    shards = sorted(set(weight_map.values()))
    missing = [s for s in shards if not (p / s).is_file()]
    if missing:
        raise BadCheckpoint(f"{p / name} names shard {missing[0]}, which is not in {p} ({len(missing)} of "
                            f"{len(shards)} shards missing): the download is incomplete; download it again")
    return [p / s for s in shards]


def renamed(name: str, renames: dict | None = None) -> str:
    """A stored tensor name as transformers (and the adapter's `renames`) load it."""
    for pattern, replacement in {**(renames or {}), **LEGACY_RENAMES}.items():
        name = re.sub(pattern, replacement, name)
    return name


def read_pickled(files) -> dict:
    """{name: tensor} from pickle-based weight files through torch.load(weights_only=True) (memory-mapped where
    the file is in PyTorch's zip format); anything it refuses, or that is not a dict of tensors, raises
    BadCheckpoint in one line."""

    state = {}
    for f in files:
        try:
            with warnings.catch_warnings():  # "Detected pickle protocol 4": torch's note on files it reads anyway
                warnings.simplefilter("ignore", UserWarning)
                part = torch.load(str(f), map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(f))
        except pickle.UnpicklingError as e:
            raise BadCheckpoint(f"{f}: torch.load(weights_only=True), which rebuilds only tensors, refuses it "
                                f"({_refusal(e)}); glmc never unpickles anything else: only if you trust its "
                                "source, rewrite it as safetensors with the code that wrote it") from e
        except (RuntimeError, EOFError, OSError, ValueError) as e:
            raise BadCheckpoint(f"{f} is truncated or corrupt ({_first_line(e)}); download or write it again") from e
        if not isinstance(part, dict) or not all(isinstance(v, torch.Tensor) for v in part.values()):
            raise BadCheckpoint(f"{f} does not hold a state dict (name -> tensor) but a {type(part).__name__}; "
                                "give a directory written by save_pretrained")
        state.update(part)
    return state


def pickled_headers(files) -> dict:
    """{name: (dtype code as in safetensors, shape, file name)} of pickle-based weight files."""
    out = {}
    for f in files:
        for k, v in read_pickled([f]).items():
            code = TORCH_DTYPE_CODES.get(str(v.dtype).removeprefix("torch."), str(v.dtype))
            out[k] = (code, tuple(v.shape), f.name)
    return out


def note_pickled(path, files) -> None:
    """The one-line note a read of pickle-based weights prints on stderr."""
    names = ", ".join(f.name for f in files[:2]) + (", …" if len(files) > 2 else "")
    print(f"note: {path}: read pickle-based weights ({names}) through torch.load(weights_only=True), which rebuilds "
          f"tensors only; {CONVERT_HINT}", file=sys.stderr)


def _refusal(e: BaseException) -> str:
    """What the restricted unpickler objected to (its 'WeightsUnpickler error: …' line), without its advice to
    load the file unrestricted."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", x).strip() for x in str(e).splitlines()]
    why = [x for x in lines[1:] if x and not x.startswith(("Check the documentation", "Please file an issue"))]
    return " ".join(why) or _first_line(e)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

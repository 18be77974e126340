"""Data sets held as tables: JSON lines, Parquet, a `datasets` folder written by save_to_disk, or a data set in the
local `datasets` cache by name. All offline: nothing is ever downloaded.

Sources (a data spec's "source"):
    jsonl:PATH[:FIELD]           one JSON object per line; PATH a file, or a folder of train/validation/test.jsonl
    parquet:PATH[:FIELD]         a Parquet file, or a folder of train/validation/test.parquet
    hf-disk:PATH[:FIELD]         a Dataset or DatasetDict folder written by save_to_disk
    hf:NAME[:CONFIG][:SPLIT]     a data set in the local `datasets` cache (HF_DATASETS_CACHE), read in offline mode
FIELD is the text column (default "text"); texts are tokenised with model A's tokenizer. Image classification
sets name their columns instead, as a last part: ``parquet:PATH:image=COL,label=COL`` (``hf:NAME::train:image=img,
label=label``); images are decoded with Pillow and, when the model folder has a preprocessor_config.json, resized
and normalised as it says.

Splits (recorded as the spec's "split_rule" and printed with every result):
- "own": the data set has train, validation (also named valid, val or dev) and test: each is used as it is;
- "val-from-train": it has train and test only: validation is the last 5 % of train's rows (at least one);
- "90/5/5": anything else: every row in order, text joined and cut 90/5/5 on characters like text:PATH, images
  90/5/5 on rows.
Documents are joined by a newline into each split's text.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from glmc.errors import BadData, DataUnavailable

from .text import split_text

KINDS = ("jsonl", "parquet", "hf-disk", "hf")
SPLIT_NAMES = {"train": "train", "validation": "val", "valid": "val", "val": "val", "dev": "val", "test": "test"}
VAL_FROM_TRAIN = 0.05
# between documents: a lone newline, where a 90/5/5 cut may fall without changing how the pieces tokenise
# (glmc/data/text.py safe_cut)
DOC_SEP = "\n"


def parse(source: str) -> dict:
    """{"kind", "path" | "name", "config", "split", "field", "image", "label"} from a table source string."""
    kind, _, rest = source.partition(":")
    if kind not in KINDS or not rest:
        form = "NAME[:CONFIG][:SPLIT]" if kind == "hf" else "PATH[:FIELD]"
        raise ValueError(f"data {source!r}: expected {kind}:{form}")
    parts = rest.split(":")
    columns = {}
    if "=" in parts[-1]:
        for item in parts.pop().split(","):
            key, _, value = item.partition("=")
            if key not in ("image", "label", "text") or not value:
                raise ValueError(f"data {source!r}: column names are image=COL,label=COL (or text=COL), got {item!r}")
            columns[key] = value
    if "image" in columns and "label" not in columns:
        raise ValueError(f"data {source!r}: an image set needs its label column too (…:image=COL,label=COL)")
    if kind == "hf":
        if len(parts) > 3:
            raise ValueError(f"data {source!r}: expected hf:NAME[:CONFIG][:SPLIT]")
        name, config, split = (parts + [None, None])[:3]
        out = {"kind": kind, "name": name, "config": config or None, "split": split or None}
    else:
        if len(parts) > 2:
            raise ValueError(f"data {source!r}: expected {kind}:PATH[:FIELD]")
        out = {"kind": kind, "path": parts[0], "split": None, "config": None}
        if len(parts) == 2 and parts[1]:
            columns.setdefault("text", parts[1])
    out.update({"field": columns.get("text", "text"), "image": columns.get("image"), "label": columns.get("label")})
    return out


def task(source: str) -> str:
    return "cls" if parse(source)["image"] else "lm"


def absolute(source: str, base=None) -> str:
    """The source with its path made absolute (relative to `base`, else the working directory)."""
    kind, _, rest = source.partition(":")
    if kind == "hf":
        return source
    path, sep, tail = rest.partition(":")
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = (Path(base) if base is not None else Path.cwd()) / p
    return f"{kind}:{p.resolve()}{sep}{tail}"


# ------------------------------------------------------------------------------------------------ reading

def read_columns(source: str, columns: list[str]) -> dict[str, dict[str, list]]:
    """{split as named by the data set: {column: values}} for the requested columns."""
    t = parse(source)
    if t["kind"] == "hf":
        return _from_datasets(_load_cached(t), columns, source)
    path = Path(t["path"])
    if not path.exists():
        raise FileNotFoundError(f"data file not found: {path}")
    if t["kind"] == "hf-disk":
        import datasets

        try:
            return _from_datasets(datasets.load_from_disk(str(path)), columns, source)
        except FileNotFoundError as e:
            raise BadData(f"{path} is not a folder written by save_to_disk ({e}); give hf-disk:FOLDER") from None
    suffix = ".jsonl" if t["kind"] == "jsonl" else ".parquet"
    files = {path.stem: path} if path.is_file() else {
        f.stem: f for f in sorted(path.iterdir()) if f.suffix == suffix and f.stem in SPLIT_NAMES}
    if not files:
        raise BadData(f"{path} holds no {suffix} file named train, validation or test")
    read = _read_jsonl if t["kind"] == "jsonl" else _read_parquet
    return {name: read(f, columns, source) for name, f in files.items()}


def _read_jsonl(path: Path, columns, source) -> dict:
    out: dict = {c: [] for c in columns}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadData(f"{path} line {i} is not JSON ({e.msg}); one JSON object per line") from None
            if not isinstance(row, dict):
                raise BadData(f"{path} line {i} is not a JSON object")
            for c in columns:
                if c not in row:
                    raise BadData(f"{path} line {i} has no field {c!r} (fields: {', '.join(row)}); name it in "
                                  f"--data {source.split(':')[0]}:PATH:FIELD")
                out[c].append(row[c])
    return out


def _read_parquet(path: Path, columns, source) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise BadData(f"{path} is not a Parquet file ({e})") from None
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise BadData(f"{path} has no column {missing[0]!r} (columns: {', '.join(schema.names)}); name it in --data")
    return pq.read_table(path, columns=columns).to_pydict()


def _load_cached(t: dict):
    """load_dataset in offline mode, from the local cache only (the offline switches are restored afterwards)."""
    import datasets
    import huggingface_hub.constants

    switches = [(datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"),
                (huggingface_hub.constants, "HF_HUB_OFFLINE")]
    before = [getattr(module, name) for module, name in switches]
    for module, name in switches:
        setattr(module, name, True)
    datasets.utils.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(t["name"], t["config"], split=t["split"])
    except Exception as e:  # ConnectionError, FileNotFoundError, ValueError ("Couldn't find cache"): not cached
        where = datasets.config.HF_DATASETS_CACHE
        what = t["name"] + (f" (config {t['config']})" if t["config"] else "") + (
            f", split {t['split']}" if t["split"] else "")
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DataUnavailable(f"data set {what} is not in the local datasets cache ({where}): {first}; glmc never "
                              "downloads: load it once with datasets.load_dataset while online, or give it as "
                              "jsonl:, parquet: or hf-disk:") from None
    finally:
        for (module, name), value in zip(switches, before):
            setattr(module, name, value)


def _from_datasets(ds, columns, source) -> dict:
    import datasets

    parts = dict(ds) if isinstance(ds, datasets.DatasetDict) else {"train": ds}
    out = {}
    for name, part in parts.items():
        missing = [c for c in columns if c not in part.column_names]
        if missing:
            raise BadData(f"data {source!r} has no column {missing[0]!r} (columns: {', '.join(part.column_names)}); "
                          "name it in the spec")
        out[name] = {c: part[c] for c in columns}
        if "label" in columns:
            feature = part.features.get(columns[columns.index("label")])
            if hasattr(feature, "names"):
                out[name]["__label_names__"] = list(feature.names)
    return out


# ------------------------------------------------------------------------------------------------ splits

def normalise_splits(raw: dict, rows) -> tuple[dict, str]:
    """({"train", "val", "test"} or {"all"}: the data set's parts, renamed; the split rule to apply)."""
    named = {}
    for name, part in raw.items():
        key = SPLIT_NAMES.get(name)
        if key is not None and key not in named:
            named[key] = part
    if {"train", "val", "test"} <= set(named):
        return {k: named[k] for k in ("train", "val", "test")}, "own"
    if {"train", "test"} <= set(named):
        n = rows(named["train"])
        k = max(1, round(n * VAL_FROM_TRAIN))
        if n - k < 1:
            raise BadData(f"the train split has {n} rows: too few to carve a validation split from its end")
        train, val = _cut(named["train"], n - k)
        return {"train": train, "val": val, "test": named["test"]}, "val-from-train"
    order = [named.get(k) for k in ("train", "val", "test")] + [p for n, p in raw.items() if n not in SPLIT_NAMES]
    order = [p for p in order if p is not None]
    joined = {c: [v for p in order for v in p[c]] for c in order[0]} if order else {}
    return {"all": joined}, "90/5/5"


def _cut(part: dict, at: int) -> tuple[dict, dict]:
    return ({c: v[:at] for c, v in part.items() if not c.startswith("__")},
            {c: v[at:] for c, v in part.items() if not c.startswith("__")})


def text_pieces(source: str, split) -> tuple[dict[str, str], str]:
    """({"train", "val", "test": text}, split rule) of a text table: documents joined by DOC_SEP."""
    field = parse(source)["field"]
    raw = read_columns(source, [field])
    for name, part in raw.items():
        bad = next((v for v in part[field] if not isinstance(v, str)), None)
        if bad is not None:
            raise BadData(f"data {source!r}: field {field!r} holds a {type(bad).__name__}, not text (split {name})")
    parts, rule = normalise_splits(raw, lambda p: len(p[field]))
    if rule == "90/5/5":
        return split_text(DOC_SEP.join(parts["all"][field]), split), rule
    pieces = {k: DOC_SEP.join(v[field]) for k, v in parts.items()}
    empty = [k for k, v in pieces.items() if not v]
    if empty:
        raise BadData(f"data {source!r}: the {empty[0]} split has no text")
    return pieces, rule


def image_splits(source: str, image_size=None, channels=None):
    """({"train", "val", "test": (uint8 [N, C, H, W], int64 [N])}, class names, split rule, image size)."""
    t = parse(source)
    raw = read_columns(source, [t["image"], t["label"]])
    label_names = next((p.pop("__label_names__") for p in raw.values() if "__label_names__" in p), None)
    for p in raw.values():
        p.pop("__label_names__", None)
    parts, rule = normalise_splits(raw, lambda p: len(p[t["label"]]))
    labels_all = [v for p in parts.values() for v in p[t["label"]]]
    if label_names is None:
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in labels_all):
            label_names = [str(i) for i in range(max(labels_all) + 1)]
        else:
            label_names = sorted({str(v) for v in labels_all})
    index = {n: i for i, n in enumerate(label_names)}
    decoded = {k: [_image(v, source) for v in p[t["image"]]] for k, p in parts.items()}
    images = [im for v in decoded.values() for im in v]
    if not images:
        raise BadData(f"data {source!r} has no images")
    size = int(image_size or images[0].size[0])
    channels = channels or (1 if all(im.mode in ("1", "L", "I", "I;16", "F") for im in images) else 3)
    out = {}
    for k, p in parts.items():
        x = np.stack([_pixels(im, size, channels) for im in decoded[k]]) if decoded[k] else None
        y = np.asarray([v if isinstance(v, (int, np.integer)) else index[str(v)] for v in p[t["label"]]],
                       dtype=np.int64)
        out[k] = (x, y)
    if rule == "90/5/5":
        x, y = out.pop("all")
        n = len(y)
        a, b = int(n * 0.9), int(n * 0.95)
        if a < 1 or b <= a or b >= n:
            raise BadData(f"data {source!r} has {n} images: too few for a 90/5/5 split")
        out = {"train": (x[:a], y[:a]), "val": (x[a:b], y[a:b]), "test": (x[b:], y[b:])}
    return out, label_names, rule, size


def _image(value, source):
    from PIL import Image

    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict) and value.get("bytes") is not None:
        value = value["bytes"]
    elif isinstance(value, dict) and value.get("path"):
        return Image.open(value["path"])
    if isinstance(value, (bytes, bytearray)):
        return Image.open(io.BytesIO(value))
    if isinstance(value, (list, np.ndarray)):
        arr = np.asarray(value)
        if arr.ndim in (2, 3) and arr.size:
            return Image.fromarray(arr.astype(np.uint8))
    raise BadData(f"data {source!r}: cannot read an image from a {type(value).__name__} (give PIL images, encoded "
                  "image bytes, or pixel arrays)")


def _pixels(im, size: int, channels: int) -> np.ndarray:
    from PIL import Image

    im = im.convert("L" if channels == 1 else "RGB")
    if im.size != (size, size):
        im = im.resize((size, size), Image.BILINEAR)
    arr = np.asarray(im, dtype=np.uint8)
    return arr[None] if channels == 1 else arr.transpose(2, 0, 1)


def preprocessor(directory) -> dict:
    """{"image_size", "normalize", "channels"} from a model folder's preprocessor_config.json ({} without one)."""
    f = Path(directory) / "preprocessor_config.json" if directory is not None else None
    if f is None or not f.is_file():
        return {}
    try:
        config = json.loads(f.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadData(f"{f} is not valid JSON ({e})") from None
    out: dict = {}
    size = config.get("size")
    if isinstance(size, dict):
        size = size.get("height") or size.get("shortest_edge")
    if isinstance(size, int):
        out["image_size"] = size
    mean, std = config.get("image_mean"), config.get("image_std")
    if config.get("do_normalize", True) and isinstance(mean, list) and isinstance(std, list):
        out["normalize"] = {"mean": [float(v) for v in mean], "std": [float(v) for v in std]}
        out["channels"] = len(mean)
    return out

"""`glmc merge --config recipe.yaml`: a merge described as data (in the spirit of mergekit's YAML recipes).

    models: [runs/g0, runs/g1, runs/g2]     # 2+ model directories (relative paths: from the recipe's folder) or
                                            # hub ids in the local cache (ORG/NAME[@REVISION])
    method: learned                         # weight | learned
    weights: [0.5, 0.25, 0.25]              # optional, one per model, summing to 1 (default uniform)
    mode: native                            # native | circuit
    options:                                # optional; the merge's own: any field of glmc.MergeOptions
      rounds: 3                             # (glmc merge --help lists them) but mode, which is a top-level key
      iterations: 5
      steps: 300
      lr: 0.01
      concentration: 1.0
      null_space: fixed
    data: shakespeare                       # optional: data override (default: model 1's glmc.json); any --data
                                            # spec, e.g. jsonl:texts.jsonl:body (paths from the recipe's folder)
    evaluation: {split: test, batch_size: 32, max_batches: 20}   # optional
    output: runs/merged                     # where to write (--out overrides)

Every problem (an unknown key, a wrong type, a missing model) is one line naming the key and what it accepts.
The keys of `options` and `evaluation`, their types, choices and bounds are the options classes' fields
(glmc/options.py: MergeOptions, and BarrierOptions' split, batch_size, max_batches).
"""

from __future__ import annotations

from pathlib import Path

from glmc.errors import BadOption
from glmc.io import read_yaml
from glmc.methods import names
from glmc.options import MODES, BarrierOptions, MergeOptions, field_of

TOP = {"models", "method", "weights", "mode", "options", "data", "tokenizer", "evaluation", "output"}
# a recipe's mode is a top-level key; progress belongs to the command line
OPTIONS = {k: t for k, t in MergeOptions.types().items() if k not in ("mode", "progress")}
EVALUATION_FIELDS = ("split", "batch_size", "max_batches")
EVALUATION = {**{k: BarrierOptions.types()[k] for k in EVALUATION_FIELDS}, "max_tokens": int}  # max_tokens: the CLI's
CHOICES = {"method": tuple(names(merges=True)), "mode": MODES}


def read_recipe(path) -> dict:
    """The recipe at `path`, validated, with model paths resolved; raises BadOption naming the first problem."""
    path = Path(path)
    recipe = read_yaml(path, "merge recipe")
    if not isinstance(recipe, dict):
        raise BadOption(f"{path}: a recipe is a mapping with keys {', '.join(sorted(TOP))}")
    unknown = sorted(set(recipe) - TOP)
    if unknown:
        raise BadOption(f"{path}: unknown key {unknown[0]!r}; a recipe has {', '.join(sorted(TOP))}")
    models = recipe.get("models")
    if not isinstance(models, list) or len(models) < 2 or not all(isinstance(m, str) for m in models):
        raise BadOption(f"{path}: 'models' must be a list of at least two model directories")
    from glmc.models.hub import looks_like_hub_id

    base = path.parent
    resolved = []
    for p in models:
        m = Path(p).expanduser() if Path(p).expanduser().is_absolute() else base / p
        if not m.is_dir() and not (not Path(p).is_absolute() and looks_like_hub_id(p)):
            raise BadOption(f"{path}: model {m} is not a directory")
        resolved.append(str(m) if m.is_dir() else p)  # else a hub id, looked up in the local cache
    recipe["models"] = resolved
    recipe.setdefault("method", "weight")
    recipe.setdefault("mode", "native")
    for key in ("method", "mode"):
        _choice(path, key, recipe[key])
    weights = recipe.get("weights")
    if weights is not None:
        if (not isinstance(weights, list) or len(weights) != len(models)
                or not all(isinstance(w, (int, float)) and w >= 0 for w in weights)):
            raise BadOption(f"{path}: 'weights' must be {len(models)} non-negative numbers, one per model")
        if abs(sum(weights) - 1) > 1e-6:
            raise BadOption(f"{path}: 'weights' must sum to 1 (they sum to {sum(weights):g})")
        recipe["weights"] = [float(w) for w in weights]
    recipe["options"] = _typed(path, "options", recipe.get("options") or {}, OPTIONS)
    recipe["evaluation"] = _typed(path, "evaluation", recipe.get("evaluation") or {}, EVALUATION)
    for key in ("data", "tokenizer", "output"):
        if recipe.get(key) is not None and not isinstance(recipe[key], str):
            raise BadOption(f"{path}: {key!r} must be a string")
    if recipe.get("output") is not None and not Path(recipe["output"]).is_absolute():
        recipe["output"] = str(base / recipe["output"])
    if recipe.get("data") is not None:
        recipe["data"] = _data_from(base, recipe["data"])
    return recipe


def _data_from(base: Path, data: str) -> str:
    """A data source whose relative path is relative to the recipe's folder, like its models (an unknown or
    malformed source is refused here, by name)."""
    from glmc.data.sources import absolute

    return absolute(data, base)


def _choice(path, key, value, choices=None) -> None:
    choices = choices or CHOICES[key]
    if value not in choices:
        raise BadOption(f"{path}: {key} must be one of {', '.join(choices)}, got {value!r}")


def _typed(path, section: str, values, types: dict) -> dict:
    """`values` checked against the options fields' types, choices and bounds (one line per problem)."""
    if not isinstance(values, dict):
        raise BadOption(f"{path}: {section!r} must be a mapping of {', '.join(types)}")
    out = {}
    for key, value in values.items():
        if key not in types:
            raise BadOption(f"{path}: unknown {section} key {key!r}; known: {', '.join(types)}")
        f = _field(key) if key != "max_tokens" else None
        if value is None and f is not None and f.default is None:
            out[key] = None
            continue
        want = types[key]
        if want is str and isinstance(value, bool) and f is not None and "off" in (f.metadata["choices"] or ()):
            value = "on" if value else "off"  # YAML 1.1 reads a bare off as false
        ok = isinstance(value, want) or (want is float and isinstance(value, int))
        if not ok or (want is not bool and isinstance(value, bool)):
            raise BadOption(f"{path}: {section}.{key} must be a{'n' if want is int else ''} {want.__name__}, "
                            f"got {value!r}")
        meta = f.metadata if f is not None else {"choices": None, "low": 1, "high": None, "open_low": False}
        if meta["choices"]:
            _choice(path, f"{section}.{key}", value, meta["choices"])
        elif meta["low"] is not None and (value < meta["low"] or (meta["open_low"] and value == meta["low"])):
            positive = (meta["low"] == 0 and meta["open_low"]) or (meta["low"] == 1 and want is int)
            what = "positive" if positive else f"≥ {meta['low']:g}"
            raise BadOption(f"{path}: {section}.{key} must be {what}, got {value!r}")
        elif meta["high"] is not None and value > meta["high"]:
            raise BadOption(f"{path}: {section}.{key} must be ≤ {meta['high']}, got {value!r}")
        out[key] = want(value)
    return out


def _field(key: str):
    return field_of(BarrierOptions if key in EVALUATION_FIELDS else MergeOptions, key)

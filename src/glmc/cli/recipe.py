"""`glmc merge --config recipe.yaml`: a merge described as data (in the spirit of mergekit's YAML recipes).

    models: [runs/g0, runs/g1, runs/g2]     # 2+ model directories (relative paths: from the recipe's folder) or
                                            # hub ids in the local cache (ORG/NAME[@REVISION])
    method: learned                         # weight | learned
    weights: [0.5, 0.25, 0.25]              # optional, one per model, summing to 1 (default uniform)
    mode: native                            # native | circuit
    options:                                # optional; the merge's own (glmc merge --help)
      rounds: 3
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
"""

from __future__ import annotations

from pathlib import Path

from glmc.errors import BadOption

TOP = {"models", "method", "weights", "mode", "options", "data", "tokenizer", "evaluation", "output"}
OPTIONS = {"rounds": int, "iterations": int, "steps": int, "lr": float, "concentration": float, "null_space": str}
EVALUATION = {"split": str, "batch_size": int, "max_batches": int, "max_tokens": int}
CHOICES = {"method": ("weight", "learned"), "mode": ("native", "circuit"), "null_space": ("fixed", "off"),
           "split": ("train", "val", "test")}


def read_recipe(path) -> dict:
    """The recipe at `path`, validated, with model paths resolved; raises BadOption naming the first problem."""
    import yaml

    path = Path(path)
    try:
        recipe = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise BadOption(f"{path} is not valid YAML{at}: {getattr(e, 'problem', e)}") from None
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
    """A table data source whose relative path is relative to the recipe's folder, like its models."""
    from glmc.data import tables

    kind, _, rest = data.partition(":")
    if kind in tables.KINDS and kind != "hf" and rest and not Path(rest.split(":")[0]).expanduser().is_absolute():
        return tables.absolute(data, base)
    return data


def _choice(path, key, value) -> None:
    if value not in CHOICES[key]:
        raise BadOption(f"{path}: {key} must be one of {', '.join(CHOICES[key])}, got {value!r}")


def _typed(path, section: str, values, types: dict) -> dict:
    if not isinstance(values, dict):
        raise BadOption(f"{path}: {section!r} must be a mapping of {', '.join(types)}")
    out = {}
    for key, value in values.items():
        if key not in types:
            raise BadOption(f"{path}: unknown {section} key {key!r}; known: {', '.join(types)}")
        want = types[key]
        ok = isinstance(value, want) or (want is float and isinstance(value, int))
        if not ok or isinstance(value, bool):
            raise BadOption(f"{path}: {section}.{key} must be a{'n' if want is int else ''} {want.__name__}, "
                            f"got {value!r}")
        if key in CHOICES:
            _choice(path, key, value)
        elif want in (int, float) and value <= 0:
            raise BadOption(f"{path}: {section}.{key} must be positive, got {value!r}")
        out[key] = want(value)
    return out

"""The package layout is the architecture: each layer imports only the layers below it, and outside the adapters
no module names a model family's classes, native parameters or input keywords."""

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "glmc"
# lowest first; a package may import itself and anything listed before it
LAYERS = ["glmc", "memory", "errors", "io", "distributed", "data", "symmetry", "adapters", "models", "view",
          "invariance", "paths", "matching", "api", "experiments", "training", "cli"]


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "glmc"


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("glmc"):
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("glmc"))


def _modules():
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        yield path, _package(".".join(p for p in rel.parts if p != "__init__"))


def test_every_package_has_a_layer():
    assert {pkg for _, pkg in _modules()} <= set(LAYERS)


def test_imports_run_one_way():
    upward = []
    for path, pkg in _modules():
        for target in _imports(path):
            if pkg == "glmc" and target == "glmc.api":  # glmc/__init__.py: the public facade re-exports the API
                continue
            if LAYERS.index(_package(target)) > LAYERS.index(pkg):
                upward.append(f"{path.relative_to(SRC)} imports {target}")
    assert not upward, upward


def test_family_knowledge_stays_in_the_adapters():
    # native parameter names, model classes and model input keywords of the families glmc supports
    native = re.compile(r"\b(c_attn|c_proj|c_fc|wte|wpe|ln_f|layernorm_before|q_proj|o_proj|fc1|fc2|patch_embed"
                        r"|GPT2LMHeadModel|ViTForImageClassification|VisionTransformer|model_type"
                        r"|input_ids=|pixel_values=)\b")
    found = []
    for path, pkg in _modules():
        if pkg in ("adapters", "data"):  # data sets name their own batch keys; the adapters map them
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if native.search(code) and not code.strip().startswith(('"', "'")):
                found.append(f"{path.relative_to(SRC)}:{i}: {line.strip()}")
    assert not found, found

"""The package layout is the architecture: each layer imports only the layers below it, and outside the adapters
no module names a model family's classes, native parameters or input keywords."""

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "glmc"
# lowest first; a package may import itself and anything listed before it
LAYERS = ["glmc", "memory", "errors", "io", "distributed", "data", "tasks", "symmetry", "adapters", "models", "view",
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


# Words of native names that are also the field's ordinary vocabulary (and glmc's: its norm kinds, parameter
# roles); a native name is forbidden by its distinctive words (c_attn, q_proj, embed_tokens, …).
GENERIC = {"weight", "bias", "model", "layers", "norm", "attention", "gamma", "qkv", "layernorm", "proj", "embeddings",
           "projection", "transformer", "dense",
           # BERT's attention.self.query / key / value, attention.output, encoder.layer, LayerNorm
           "key", "value", "output", "self", "query", "layer", "LayerNorm"}


def _forbidden_names() -> dict[str, str]:
    """word -> the adapter that owns it: every word of every adapter's native parameter names, its model classes
    and its config model_type values, less glmc's own vocabulary (canonical names, family names, GENERIC)."""
    from glmc.adapters import ADAPTERS, FAMILIES

    def words(name: str) -> set[str]:
        return {w for w in re.split(r"[.{}]+", name) if len(w) > 2}

    canonical = set()
    for cls in ADAPTERS:
        for e in cls.names.entries:
            canonical |= set().union(*(words(c) for c in ((e.canonical,) if isinstance(e.canonical, str)
                                                            else e.canonical)))
    out = {}
    for cls in ADAPTERS:
        assert cls.names is not None and cls.native_classes, f"{cls.family}: declare names and native_classes"
        native = set().union(*(words(e.native) for e in cls.names.entries))
        for w in native | set(cls.native_classes) | set(cls.model_types):
            if w not in canonical and w not in GENERIC and w not in FAMILIES:
                out.setdefault(w, cls.family)
    return out


def _code_words(path: Path):
    """(line, word) for every identifier, attribute, keyword and word of a string constant in the code, docstrings
    and comments left out."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.value.lineno, node.arg
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield from ((node.lineno, w) for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", node.value))


def test_no_core_module_names_what_an_adapter_declares():
    forbidden = _forbidden_names()
    # the list is derived, not written here: it must hold each family's distinctive names
    assert {"c_attn", "q_proj", "GPT2LMHeadModel", "LlamaForCausalLM", "VisionTransformer", "mistral"} <= set(forbidden)
    found = []
    for path, pkg in _modules():
        if pkg in ("adapters", "data"):
            continue
        for line, word in _code_words(path):
            if word in forbidden:
                found.append(f"{path.relative_to(SRC)}:{line}: {word} ({forbidden[word]})")
    assert not found, found

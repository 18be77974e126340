"""The package layout is the architecture: each layer imports only the layers below it, and outside the adapters
no module names a model family's classes, native parameters or input keywords."""

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "glmc"
# lowest first; a package may import itself and anything listed before it
LAYERS = ["glmc", "memory", "errors", "plugins", "options", "methods", "io", "provenance", "distributed", "tasks",
          "data", "symmetry", "adapters", "models", "view", "invariance", "paths", "matching", "api", "experiments",
          "training", "cli"]


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
            if pkg == "glmc" and target in ("glmc.api", "glmc.experiments.study"):
                continue  # glmc/__init__.py: the public facade re-exports the API and glmc.sweep
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
        classes = cls.checkpoint.native_classes
        assert cls.names is not None and classes, f"{cls.family}: declare names and the checkpoint's classes"
        native = set().union(*(words(e.native) for e in cls.names.entries))
        for w in native | set(classes) | set(cls.checkpoint.model_types):
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


# --- the module graph ------------------------------------------------------------------------------------------
# Every import counts, at module level or inside a function (a function-level import that closes a circle is still
# a circle: it only moves the failure from import time to the first call); `if TYPE_CHECKING:` blocks do not run.
# An import names one module: `from glmc.a import b` is glmc.a.b where that is a module, else glmc.a; a package's
# __init__ is not implied by importing one of its modules (Python runs it first, but it cannot import back what
# it has not reached).

def _module_names() -> dict[str, Path]:
    return {".".join(p for p in path.relative_to(SRC.parent).with_suffix("").parts if p != "__init__"): path
            for path in SRC.rglob("*.py")}


def _type_checking_nodes(tree) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for part in node.body for n in ast.walk(part)}
    return skip


def _imported(node, module: str, path: Path, known) -> list[str]:
    """The glmc modules an import node names (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    base = node.module or ""
    if node.level:
        parts = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            if (f"{base}.{a.name}" in known or base in known)]


def _graph() -> dict[str, set[str]]:
    known = _module_names()
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skip:
                graph[module] |= {t for t in _imported(node, module, path, known) if t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_level_and_relative_imports():
    graph = _graph()
    assert "glmc.matching.alternation" in graph["glmc.matching.weight"]  # module level
    assert "glmc.data.lm" in graph["glmc.data"]  # relative (from .lm import …)
    assert "glmc.api" not in graph["glmc"]  # under `if TYPE_CHECKING:` only


def test_no_module_imports_itself_round_a_circle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (break them by moving what both sides need below both): " + "; ".join(
        " <-> ".join(c) for c in cycles)


# --- function-level imports ------------------------------------------------------------------------------------
# Outside the CLI (whose sub-commands import their implementation on use, so `glmc --help` stays fast) an import
# inside a function is allowed only for a third-party library that is optional or slow to import, imported where it
# is used; a glmc module is always imported at module level, so the graph above is the whole truth.
DEFERRED_LIBRARIES = {
    "matplotlib", "scipy", "sklearn", "transformers", "timm", "datasets", "pyarrow", "accelerate", "safetensors",
    "huggingface_hub", "yaml", "tokenizers", "PIL", "torchvision",
    "fcntl",  # POSIX only: glmc/io.py's output lock imports it when it takes the lock
}


def _guarded_by_import_error(tree) -> set[int]:
    """Imports inside `try: … except ImportError` (a version fallback, or an optional dependency's probe)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is not None and "ImportError" in ast.unparse(h.type) for h in node.handlers):
            out |= {id(n) for part in node.body + [x for h in node.handlers for x in h.body] for n in ast.walk(part)}
    return out


def test_function_level_imports_only_defer_heavy_libraries():
    found = set()  # a nested function's import is seen from each enclosing one
    for path, pkg in _modules():
        if pkg == "cli":
            continue
        tree = ast.parse(path.read_text())
        guarded = _guarded_by_import_error(tree)
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in guarded:
                    continue
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                    "." * node.level + (node.module or "")]
                if any(n.startswith(".") or n.split(".")[0] not in DEFERRED_LIBRARIES for n in names):
                    found.add(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, sorted(found)


# --- matchers read declarations ---------------------------------------------------------------------------------
# Weight, activation and the paper's matching, and the paths built on them, find what to solve through
# glmc/symmetry/structure.py (a group's kind, rows and `follows`), never by a role's name: a new attention or MLP
# layout is then a declaration. The role names are derived: the spec's rows and every GroupSpec an adapter declares.
READ_DECLARATIONS = ("matching", "paths")


def _declared_roles() -> set[str]:
    from glmc.symmetry.spec import ROWS

    roles = {row[0] for row in ROWS}
    for path in (SRC / "adapters").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                roles |= {k.value for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)
                          and isinstance(v, ast.Call) and getattr(v.func, "id", "") == "GroupSpec"}
            elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                  and getattr(node.value.func, "id", "") == "GroupSpec"):
                roles |= {t.slice.value for t in node.targets
                          if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)}
    return roles


def _role_constants(tree, roles: set[str]) -> list[int]:
    """Lines of string constants equal to a role name, less docstrings and the field names of a report (a dict
    literal with a "method" key: `"residual": residual_kind(...)` there names an output field, not a group)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    fields = {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict)
              and any(isinstance(k, ast.Constant) and k.value == "method" for k in n.keys) for k in n.keys}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in roles
            and id(n) not in docs and id(n) not in fields]


def test_no_matcher_names_a_role():
    roles = _declared_roles()
    assert {"heads", "kv_heads", "qk", "mlp_scale", "mlm_hidden", "pooler"} <= roles  # derived, and complete
    found = [f"{path.relative_to(SRC)}:{line}" for path, pkg in _modules() if pkg in READ_DECLARATIONS
             for line in _role_constants(ast.parse(path.read_text()), roles)]
    assert not found, found


def test_the_role_scan_finds_a_role_and_spares_docstrings_and_reports():
    tree = ast.parse('"""heads"""\nx = groups["heads"]\nr = {"method": "weight", "residual": 1}\n')
    assert _role_constants(tree, {"heads", "residual"}) == [2]

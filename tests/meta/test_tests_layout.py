"""The tests' own layout (docs/getting-started.md, "Where the tests live"): every test module sits in one layer
folder, module names are unique (pytest imports test modules by their base name), and test modules share code
only through tests/factories.py, tests/conftest.py and the conformance suite, never by importing one another."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ("unit", "conformance", "e2e", "meta")


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def test_every_test_module_sits_in_a_layer_folder():
    stray = [str(p.relative_to(TESTS)) for p in _modules() if p.parent.parent != TESTS or p.parent.name not in LAYERS]
    assert not stray, f"move these into tests/unit, tests/conformance, tests/e2e or tests/meta: {stray}"


def test_test_module_names_are_unique():
    seen: dict[str, Path] = {}
    for p in _modules():
        assert p.stem not in seen, f"{p.relative_to(TESTS)} and {seen[p.stem].relative_to(TESTS)}: rename one"
        seen[p.stem] = p
    assert len(seen) > 30  # the walk found the suite


def test_test_modules_import_no_other_test_module():
    bad = []
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{p.relative_to(TESTS)} imports {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not bad, f"share builders through tests/factories.py and fixtures through tests/conftest.py: {bad}"

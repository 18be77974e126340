"""Outside the code that declares them, glmc reads a task's or a method's record, never branches on its name: a
new task or method (a plugin's) then needs no edit elsewhere (issue #48 counted 13 task-name branches)."""

import ast
from pathlib import Path

from glmc.methods import methods
from glmc.tasks import tasks

SRC = Path(__file__).resolve().parents[2] / "src" / "glmc"
# where names are declared and mapped: the records themselves, and the adapters and data sets that produce a task
OWNERS = ("tasks.py", "methods.py", "adapters/", "data/")


def _name(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


def _constants(node) -> list:
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def branches(tree, about: str, names: set) -> list[int]:
    """Lines comparing something named like `about` (task, method) with one of `names`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(about in _name(s).lower() for s in sides) and any(
                    set(_constants(s)) & names for s in sides):
                out.append(node.lineno)
    return out


def test_no_task_or_method_name_is_branched_on_outside_its_owners():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(OWNERS):
            continue
        tree = ast.parse(path.read_text())
        found += [f"{rel}:{n} (task)" for n in branches(tree, "task", set(tasks()))]
        found += [f"{rel}:{n} (method)" for n in branches(tree, "method", set(methods()))]
    assert not found, found


def test_the_scan_finds_a_branch():
    tree = ast.parse('if ds.task == "lm" or method in ("weight", "x"):\n    pass\nif pool == "cls":\n    pass\n')
    assert branches(tree, "task", {"lm", "cls"}) == [1] and branches(tree, "method", {"weight"}) == [1]

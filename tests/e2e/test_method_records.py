"""Methods are declared records (glmc/methods.py): every list of methods, CLI choice, help text, capability check and
documentation table is derived from them, so no second list can drift (as `glmc align --method activation-perm`
once did: the API took it, the CLI refused it)."""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

import glmc
from glmc.cli.align import command as align_command
from glmc.cli.barrier import command as barrier_command
from glmc.cli.common import parse_methods
from glmc.cli.merge import command as merge_command
from glmc.cli.recipe import CHOICES
from glmc.errors import BadOption
from glmc.methods import BUILTIN, Method, method, methods, names, option_classes
from glmc.options import ActivationOptions, LearnedOptions, WeightOptions

SRC = Path(glmc.__file__).parent
# collections of method names that are choices of what to run, not lists of what exists (with why)
ALLOWED = {("cli/demo.py", "PRESETS"): "the methods each demo preset shows",
           ("experiments/study.py", "DEFAULT_METHODS"): "what a sweep compares by default"}


def _option(command, name) -> click.Option:
    return next(p for p in command.params if p.name == name)


def test_every_cli_choice_is_derived_from_the_records():
    assert list(methods()) == [m.name for m in BUILTIN]
    assert list(_option(align_command, "method_name").type.choices) == names(aligns=True)
    assert "activation-perm" in names(aligns=True) and "none" not in names(aligns=True)
    assert list(_option(merge_command, "method").type.choices) == names(merges=True) == ["weight", "learned"]
    assert list(CHOICES["method"]) == names(merges=True)
    assert parse_methods(",".join(methods()), "--align") == list(methods())
    assert parse_methods("none,weight,learned", "--align", simplex=True) == names(simplex=True)
    with pytest.raises(click.BadParameter, match="simplex barriers"):
        parse_methods("activation", "--align", simplex=True)
    help_text = " ".join(_option(barrier_command, "methods").help.split())
    assert all(f"{m.name}: {m.summary}" in help_text for m in BUILTIN)
    for m in BUILTIN:  # each method's help line is its record's summary
        assert m.summary in " ".join((_option(align_command, "method_name").help or "").split()) or m.align is None


def test_capabilities_come_from_the_records():
    from glmc.api.functions import stochastic

    assert option_classes() == (WeightOptions, ActivationOptions, LearnedOptions)
    assert [m for m in methods() if stochastic(m)] == names(stochastic=True) == ["learned", "learned-perm"]
    assert method("activation-perm").preset == {"residual": "permutation"}
    with pytest.raises(BadOption, match="unknown alignment method 'nosuch'; choose from none, weight"):
        method("nosuch")
    with pytest.raises(BadOption, match="cannot merge with 'activation'; choose weight, learned"):
        method("activation").merge_function()
    docs = glmc.align.__doc__
    assert all(f"glmc.{cls.__name__}" in docs for cls in option_classes())


def test_a_record_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError, match="stochastic, so its options have a 'seed' field"):
        Method(name="x", summary="x", align="m:f", options=WeightOptions, stochastic=True)
    with pytest.raises(ValueError, match="data='optional' goes with wants_data"):
        Method(name="x", summary="x", align="m:f", options=WeightOptions, data="optional")
    with pytest.raises(ValueError, match="lower case"):
        Method(name="Weight ", summary="x")
    with pytest.raises(ValueError, match="no align function, so it takes no options"):
        Method(name="x", summary="x", options=WeightOptions)


def _method_lists(path: Path):
    """(owner, names) of every tuple, list or set literal holding two or more method names in a source file,
    `owner` the name assigned (or the enclosing function)."""
    known = set(methods())
    tree = ast.parse(path.read_text())
    owners = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.FunctionDef)):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            name = node.name if isinstance(node, ast.FunctionDef) else getattr(targets[0], "id", None)
            for child in ast.walk(node):
                owners.setdefault(id(child), name)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            hits = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in known]
            if len(hits) >= 2:
                yield owners.get(id(node)), hits


def test_no_second_list_of_methods_in_the_source():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "methods.py":
            continue
        found += [(rel, owner, hits) for owner, hits in _method_lists(path) if (rel, owner) not in ALLOWED]
    assert not found, f"lists of method names outside glmc/methods.py (derive them from the records): {found}"


def test_the_docs_methods_table_is_generated_from_the_records():
    import sys

    sys.path.insert(0, str(SRC.parents[1] / "scripts"))
    try:
        from docs_options_hook import on_page_markdown
    finally:
        sys.path.pop(0)
    table = on_page_markdown("<!-- methods -->")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(methods())
    assert "<!-- methods -->" in (SRC.parents[1] / "docs" / "reference" / "options.md").read_text()


def test_the_readme_lists_the_methods_in_record_order():
    readme = (SRC.parents[1] / "README.md").read_text()
    table = readme[readme.index("| method | what it does |"):].split("\n\n")[0]
    assert [row.split("`")[1] for row in table.splitlines()[2:]] == list(methods())

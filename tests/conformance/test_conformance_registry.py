"""Every adapter glmc registers has a conformance subclass (adapter_suite.py) with at least 3 configs, so a
family added without factories fails the suite."""

import importlib
from pathlib import Path

from adapter_suite import AdapterConformance
from glmc.adapters import ADAPTERS, FAMILIES


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_adapter_has_a_conformance_subclass_with_configs():
    for f in sorted(Path(__file__).parent.glob("test_conformance_*.py")):
        importlib.import_module(f.stem)
    by_family = {}
    for sub in _subclasses(AdapterConformance):
        assert sub.__name__.startswith("Test"), f"{sub.__name__} would not be collected"
        assert sub.family in FAMILIES, f"{sub.__name__}: unknown family {sub.family!r}"
        assert sub.family not in by_family, f"two conformance subclasses for {sub.family}"
        by_family[sub.family] = sub
    missing = [a.family for a in ADAPTERS if a.family not in by_family]
    assert not missing, f"adapters without a conformance subclass: {missing}"
    few = {f: len(s.configs) for f, s in by_family.items() if len(s.configs) < 3}
    assert not few, f"conformance subclasses with fewer than 3 configs: {few}"
    # every family states the checks verify must report on all its configs (its derived groups), so a declaration
    # that loses a group fails; each Transformer has at least these
    floor = {"canonical", "residual", "residual:permutation", "qk", "ov", "mlp", "composed", "composed∘inverse"}
    weak = {f: sorted(floor - s.declared_checks) for f, s in by_family.items()
            if not floor - {"qk"} <= s.declared_checks or not {"heads", "query_heads"} & s.declared_checks}
    assert not weak, f"conformance subclasses that do not declare the checks every family has: {weak}"

"""The adapter contract stays narrow: shared behaviour comes from small parts mixed in beside the base (each part
built on nothing) and at most two levels of Adapter subclasses, never a deep chain."""

from glmc.adapters import ADAPTERS
from glmc.adapters.base import Adapter


def chain(cls) -> int:
    """The longest path of Adapter subclasses from `cls` up to Adapter (a direct subclass: 1)."""
    if cls is Adapter:
        return 0
    return 1 + max(chain(b) for b in cls.__bases__ if issubclass(b, Adapter))


def parts(cls) -> set:
    """The classes mixed in beside Adapter anywhere above `cls`."""
    return {b for k in cls.__mro__ for b in k.__bases__ if b is not object and not issubclass(b, Adapter)}


def test_no_family_is_more_than_two_subclasses_below_the_base():
    deep = {cls.family: chain(cls) for cls in ADAPTERS if chain(cls) > 2}
    assert not deep, deep


def test_every_part_mixed_in_is_built_on_nothing():
    stacked = {p.__name__: [b.__name__ for b in p.__bases__] for cls in ADAPTERS for p in parts(cls)
               if p.__bases__ != (object,)}
    assert not stacked, stacked


def test_the_measures_see_a_chain_and_a_stacked_part():
    class Part:
        pass

    class Stacked(Part):
        pass

    class One(Stacked, Adapter):
        pass

    class Two(One):
        pass

    class Three(Two):
        pass

    assert chain(Three) == 3 and chain(One) == 1
    assert Stacked in parts(Three) and Stacked.__bases__ != (object,)

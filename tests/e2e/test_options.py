"""The options classes (glmc/options.py) are the single source of every default: the CLI's flags, the merge
recipe's schema, the API's help and the matching functions' defaults are read from them, a name means one thing
wherever it appears, and renamed options keep working for one release with a warning."""

import dataclasses
import inspect
import subprocess
import sys
import warnings

import pytest
import torch

import glmc
from conftest import tiny_gpt2
from glmc.cli.align import command as align_command
from glmc.cli.barrier import command as barrier_command
from glmc.cli.demo import command as demo_command
from glmc.cli.merge import command as merge_command
from glmc.cli.recipe import read_recipe
from glmc.cli.sweep import command as sweep_command
from glmc.errors import BadOption
from glmc.methods import option_classes
from glmc.options import (
    ALL,
    HELP,
    RENAMED,
    ActivationOptions,
    BarrierOptions,
    LearnedOptions,
    MergeOptions,
    WeightOptions,
    field_of,
)

# command -> (options class, the fields of it the command takes as flags)
BARRIER_OWN = ("points", "split", "batch_size", "max_batches", "mode", "eval_dtype", "seeds", "resolution", "samples",
               "progress")
COMMANDS = {
    "align": (align_command, [(cls, cls.names()) for cls in option_classes()]),
    "barrier": (barrier_command, [(cls, [n for n in cls.names() if n not in ("mode", "progress")])
                                  for cls in option_classes()]
                + [(BarrierOptions, list(BARRIER_OWN)), (MergeOptions, ["concentration"])]),
    "merge": (merge_command, [(MergeOptions, MergeOptions.names()), (BarrierOptions, ["split", "batch_size",
                                                                                      "max_batches"])]),
    "sweep": (sweep_command, [(BarrierOptions, ["points", "seeds", "split", "batch_size", "max_batches"]),
                              (LearnedOptions, ["steps"]), (WeightOptions, ["iterations"])]),
    "demo": (demo_command, [(BarrierOptions, ["max_batches", "progress"])]),
}


def _argv(name, tmp_path, extra=()):
    """A command line the real parser accepts: its required arguments, then `extra`."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(exist_ok=True)
    b.mkdir(exist_ok=True)
    required = {"align": [a, b, "--out", tmp_path / "out"], "barrier": [a, b], "merge": [a, b],
                "sweep": [a, b, "--out", tmp_path / "sweep"], "demo": []}[name]
    return [str(x) for x in [*required, *extra]]


def _parse(name, tmp_path, extra=()) -> dict:
    command = COMMANDS[name][0]
    with command.make_context(f"glmc {name}", _argv(name, tmp_path, extra)) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_flag_default_is_its_options_class_default(name, tmp_path):
    params = _parse(name, tmp_path)
    for cls, fields in COMMANDS[name][1]:
        for field in fields:
            assert field in params, (name, cls.__name__, field)
            assert params[field] == field_of(cls, field).default, (name, cls.__name__, field, params[field])


def _other_value(cls, f):
    """(command-line tokens, the value the options class then holds): a value other than the field's default."""
    base, meta, flag = cls.types()[f.name], f.metadata, "--" + f.name.replace("_", "-")
    if base is bool:
        return ([flag] if not f.default else ["--no-" + flag[2:]]), not f.default
    if meta["choices"]:
        value = next(c for c in meta["choices"] if c != f.default)
    elif base is tuple:
        return [flag, "glmc,paper" if f.name == "candidates" else "1,2"], \
            ("glmc", "paper") if f.name == "candidates" else (1, 2)
    elif base is int:
        value = (meta["low"] or 0) + 2 if f.default is None else f.default + 1
        value = min(value, meta["high"]) if meta["high"] is not None else value
    elif base is float:
        value = 0.5 if f.default is None else f.default + 0.25
    else:
        value = "permutation"
    return [flag, str(value)], value


@pytest.mark.parametrize("name", COMMANDS)
def test_every_field_reaches_the_command_line(name, tmp_path):
    for cls, fields in COMMANDS[name][1]:
        for field in fields:
            tokens, value = _other_value(cls, field_of(cls, field))
            given = _parse(name, tmp_path, tokens)[field]
            assert getattr(cls(**{field: given}), field) == value, (name, field, tokens, given)


def test_every_option_class_is_reachable_from_some_command():
    covered = {(cls, f) for _, pairs in COMMANDS.values() for cls, fields in pairs for f in fields}
    for cls in ALL:
        missing = [f for f in cls.names() if (cls, f) not in covered]
        assert not missing, (cls.__name__, missing)


def _recipe(tmp_path, body: str):
    for m in ("a", "b"):
        (tmp_path / m).mkdir(exist_ok=True)
    path = tmp_path / "recipe.yaml"
    path.write_text("models: [a, b]\n" + body)
    return path


def test_every_merge_field_reaches_a_recipe(tmp_path):
    options = {f.name: _other_value(MergeOptions, f)[1] for f in MergeOptions.fields()
               if f.name not in ("mode", "progress")}
    lines = "".join(f"  {k}: {v}\n" for k, v in options.items())
    r = read_recipe(_recipe(tmp_path, "mode: circuit\noptions:\n" + lines +
                            "evaluation: {split: val, batch_size: 7, max_batches: 3}\n"))
    merged = MergeOptions(mode=r["mode"], **r["options"])
    assert merged.changed() == {**options, "mode": "circuit"}
    assert r["evaluation"] == {"split": "val", "batch_size": 7, "max_batches": 3}


@pytest.mark.parametrize("body, expected", [
    ("options: {rounds: 2, colour: red}\n", "unknown options key 'colour'; known: rounds, iterations"),
    ("options: {rounds: many}\n", "options.rounds must be an int"),
    ("options: {simplex_score: corners}\n", "options.simplex_score must be one of edges, centre"),
    ("options: {warmup: 2.0}\n", "options.warmup must be ≤ 1"),
    ("options: {weight_decay: -1}\n", "options.weight_decay must be ≥ 0"),
    ("evaluation: {split: dev}\n", "evaluation.split must be one of train, val, test"),
])
def test_a_bad_recipe_is_one_line_naming_the_key(tmp_path, body, expected):
    with pytest.raises(BadOption) as e:
        read_recipe(_recipe(tmp_path, body))
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_recipe_accepts_zero_where_zero_is_allowed(tmp_path):
    r = read_recipe(_recipe(tmp_path, "options: {seed: 0, weight_decay: 0, bias: -0.1, patience: null}\n"))
    assert MergeOptions(**r["options"]).changed() == {"bias": -0.1}


def test_help_of_align_barrier_and_merge_names_every_field():
    for cls in option_classes():
        for name in cls.names():
            assert f"\n        {name}=" in glmc.align.__doc__, (cls.__name__, name)
    for func, cls in ((glmc.barrier, BarrierOptions), (glmc.merge, MergeOptions)):
        for name in cls.names():
            assert f"\n    {name}=" in func.__doc__, (func.__name__, name)
    for cls in ALL:  # and each class lists its own, with the help text
        assert all(field_of(cls, n).metadata["help"] in cls.__doc__ for n in cls.names()), cls.__name__


def test_a_shared_name_means_one_thing():
    seen = {}
    for cls in ALL:
        for f in cls.fields():
            here = (cls.types()[f.name], f.metadata["meaning"])
            assert seen.setdefault(f.name, here) == here, (cls.__name__, f.name)
    shared = {n for n in seen if sum(n in c.names() for c in ALL) > 1}
    assert shared <= set(HELP) | {"mode", "progress"}, shared - set(HELP)
    # barrier takes the evaluation's options and every alignment option by keyword: no name may mean both
    assert set(BarrierOptions.names()) & {n for c in option_classes() for n in c.names()} == {"mode", "progress"}
    for cls in option_classes():  # the glmc align command has one flag per name: one default per name
        for other in option_classes():
            for name in set(cls.names()) & set(other.names()):
                assert field_of(cls, name).default == field_of(other, name).default, name


def test_matching_functions_take_their_options_object_whole():
    """Each method's align gets its options class's instance (the defaults live in the class alone), and by keyword
    only what glmc adds besides (data, the null-space fill); no option field is a parameter of its own."""
    from glmc.matching import _method_function
    from glmc.matching.learned import LearnedMatcher

    for method, cls in (("weight", WeightOptions), ("activation", ActivationOptions), ("learned", LearnedOptions)):
        params = inspect.signature(_method_function(method)).parameters
        assert list(params)[:3] == ["model_a", "model_b", "options"], method
        assert cls.__name__ in str(params["options"].annotation), method
        assert not set(params) & set(cls.names()), method
        assert {k for k, p in params.items() if p.kind is p.KEYWORD_ONLY} <= {"data", "fill", "learn_free",
                                                                             "permutations_only"}, method
    fit = inspect.signature(LearnedMatcher.fit).parameters
    for name in ("weight_decay", "warmup", "sampler", "bias", "eval_every", "eval_batches", "patience", "seed"):
        assert fit[name].default == field_of(MergeOptions, name).default, name


def test_options_are_frozen_hashable_and_equal_by_value():
    a, b = WeightOptions(iterations=5, candidates="glmc,paper"), WeightOptions(iterations=5, candidates=["glmc",
                                                                                                          "paper"])
    assert a == b and hash(a) == hash(b) and len({a, b, WeightOptions()}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.iterations = 6
    assert BarrierOptions(seeds="3, 4").seeds == (3, 4) and LearnedOptions(epochs=1).epochs == 1.0


@pytest.mark.parametrize("cls, kw, expected", [
    (WeightOptions, {"iterations": 0}, "weight matching option iterations must be ≥ 1, got 0"),
    (WeightOptions, {"head_maps": 1}, "head_maps must be true or false"),
    (LearnedOptions, {"lr": 0.0}, "lr must be > 0"),
    (LearnedOptions, {"sampler": "wide"}, "sampler must be one of narrow, uniform, fixed, gaussian"),
    (BarrierOptions, {"seeds": "1,x"}, "seeds must be a comma-separated list of ints"),
    (MergeOptions, {"steps": None}, "merge option steps may not be None"),
])
def test_a_bad_value_is_one_line(cls, kw, expected):
    with pytest.raises(BadOption) as e:
        cls(**kw)
    assert expected in str(e.value) and "\n" not in str(e.value)


def _tokens(n=3, batch=4, length=17, vocab=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (batch, length), generator=g) for _ in range(n)]


def test_the_api_validates_through_the_classes_and_takes_an_options_object():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    with pytest.raises(TypeError, match="iteration; its options: .*iterations"):
        glmc.align(a, b, "weight", iteration=3)
    with pytest.raises(BadOption, match="iterations must be ≥ 1"):
        glmc.align(a, b, "weight", iterations=0)
    with pytest.raises(TypeError, match="weight matching takes WeightOptions, not LearnedOptions"):
        glmc.align(a, b, "weight", options=LearnedOptions())
    al = glmc.align(a, b, "weight", options=WeightOptions(iterations=1, restarts=1, progress=False), tol=0.0)
    assert al.report["restarts"] == 1  # not the default's 2 (a model this small), so the object was used
    m = glmc.merge([a, b], options=MergeOptions(rounds=1, iterations=1), progress=False)
    assert len(m.report["universe"]) == 1
    c = glmc.barrier(a, b, data=_tokens(), options=BarrierOptions(points=3, progress=False))
    assert len(c.lambdas) == 3 and c.info["dtype"] == "float32"
    both = (BarrierOptions(points=2, progress=False), WeightOptions(restarts=1, iterations=1))
    c = glmc.barrier(a, b, data=_tokens(), align="weight", options=both)
    assert len(c.lambdas) == 2 and c.alignment.report["restarts"] == 1
    with pytest.raises(BadOption, match="a barrier's mode is its alignment's too"):
        glmc.barrier(a, b, data=_tokens(), align="weight", options=WeightOptions(mode="circuit"))


def test_old_names_warn_once_and_still_work():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    with pytest.warns(DeprecationWarning, match="'batches' is now 'train_batches'"):
        al = glmc.align(a, b, "activation", data=_tokens(), batches=1, progress=False)
    assert al.report["batches"] == 1
    with pytest.warns(DeprecationWarning, match="'dtype' is now 'eval_dtype'") as caught:
        c = glmc.barrier(a, b, data=_tokens(), points=2, dtype="bfloat16", progress=False)
    assert c.info["dtype"] == "bfloat16" and len([w for w in caught if w.category is DeprecationWarning]) == 1
    assert caught[0].filename == __file__  # the warning points at the caller's line
    for cls, renames in RENAMED.items():  # each old name maps onto a field of its class
        target = next(c for c in ALL if c.__name__ == cls)
        assert set(renames.values()) <= set(target.names()) and not set(renames) & set(target.names())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert MergeOptions.build(batch_size=8).train_batch_size == 8 and "train_batch_size" in str(w[0].message)


def test_barrier_batch_size_is_the_evaluation_and_train_batch_size_the_training():
    a, b = tiny_gpt2(seed=0), tiny_gpt2(seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = glmc.barrier(a, b, data=_tokens(), points=2, align="activation", batch_size=2, train_batch_size=2,
                         train_batches=1, progress=False)
    assert not [w for w in caught if "is now" in str(w.message)]  # neither name is an old one here
    assert c.info["n_batches"] >= 1 and c.alignment.report["batches"] == 1


def test_old_flags_still_parse_and_their_warnings_name_the_flags(tmp_path, capsys):
    params = _parse("align", tmp_path, ["--batches", "3"])
    assert params["old_batches"] == 3 and params["train_batches"] == 32
    assert capsys.readouterr().err.strip() == "DeprecationWarning: --batches is deprecated; use --train-batches"
    assert _parse("barrier", tmp_path, ["--dtype", "bfloat16"])["old_dtype"] == "bfloat16"
    assert capsys.readouterr().err.strip() == "DeprecationWarning: --dtype is deprecated; use --eval-dtype"
    _parse("barrier", tmp_path)
    assert "Deprecation" not in capsys.readouterr().err  # only a flag given warns
    assert {p.name: p for p in barrier_command.params}["old_dtype"].hidden


def test_the_classes_import_without_torch():
    code = "import sys, glmc; glmc.WeightOptions(); glmc.MergeOptions; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_method_options_pass_the_data_to_the_methods_that_take_it():
    from glmc.matching import method_options

    shared = {"data": object(), "steps": 5, "train_batches": 2, "iterations": 3}
    assert set(method_options("learned", shared)) == {"data", "steps", "iterations"}
    assert set(method_options("activation", shared)) == {"data", "train_batches"}
    assert set(method_options("weight", shared)) == {"data", "iterations"}  # it selects among alternations with data
    assert set(method_options("none", shared)) == set()
    with pytest.raises(TypeError, match="unknown alignment option"):
        method_options("weight", {"dataa": 1})

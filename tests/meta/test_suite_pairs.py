"""The many-pair suite (benchmarks/suite.py) covers what issue #15 asks of it, and each pair's training command
is one `glmc train` accepts."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import suite  # noqa: E402


def _arg(pair, flag, default=None):
    args = list(pair.train)
    return args[args.index(flag) + 1] if flag in args else default


def test_suite_has_tuning_and_evaluation_pairs_of_both_families():
    assert len(suite.PAIRS) >= 12 and len({p.name for p in suite.PAIRS}) == len(suite.PAIRS)
    for family in ("gpt2", "vit"):
        for role in ("tune", "eval"):
            assert any(p.family == family and p.role == role for p in suite.PAIRS), (family, role)
    tune_seeds = {s for p in suite.PAIRS if p.role == "tune" for s in p.seeds}
    eval_seeds = {s for p in suite.PAIRS if p.role == "eval" for s in p.seeds}
    assert not tune_seeds & eval_seeds  # no tuning model shares an initialisation seed with a reported one


def test_suite_pairs_vary_what_issue_15_names():
    gpt2 = [p for p in suite.PAIRS if p.family == "gpt2"]
    vit = [p for p in suite.PAIRS if p.family == "vit"]
    depths = {int(_arg(p, "--layers", 4)) for p in suite.PAIRS}
    widths = {int(_arg(p, "--width", 128)) for p in suite.PAIRS}
    head_sizes = {int(_arg(p, "--width", 128)) // int(_arg(p, "--heads", 4)) for p in suite.PAIRS}
    assert min(depths) <= 2 and max(depths) >= 6 and min(widths) <= 64 and max(widths) >= 256
    assert {16, 64} <= head_sizes
    assert {_arg(p, "--tokenizer", "char").split(":")[0] for p in gpt2} == {"char", "bpe", "gpt2"}
    assert {_arg(p, "--data") for p in gpt2} == {"shakespeare", "python-stdlib"}
    assert {_arg(p, "--data") for p in vit} == {"mnist", "fashion-mnist", "digits"}
    assert {_arg(p, "--family", "hf") for p in vit} == {"hf", "timm"}
    assert {_arg(p, "--pool", "cls") for p in vit} == {"cls", "avg"}
    assert {"--untied" in p.train for p in gpt2} == {True, False}
    assert {_arg(p, "--activation", "gelu") for p in suite.PAIRS} >= {"gelu", "relu"}
    assert any("--dropout" in p.train for p in suite.PAIRS) and any("--weight-decay" in p.train for p in suite.PAIRS)


@pytest.mark.parametrize("pair", suite.PAIRS, ids=lambda p: p.name)
def test_every_training_command_parses(pair):
    from glmc.cli import train

    group = train.command
    sub = group.get_command(None, pair.train[0])  # sub-commands are generated from the adapter registry
    ctx = sub.make_context(pair.train[0], list(pair.train[1:]) + ["--seed", "0"])  # an unknown flag raises
    for flag in ("--layers", "--width", "--heads"):
        if flag in pair.train:
            assert ctx.params[flag[2:]] == int(_arg(pair, flag))


def test_a_generated_block_is_replaced_and_the_rest_kept(tmp_path):
    import tables  # benchmarks/tables.py: what `suite.py --publish` writes with

    readme = tmp_path / "README.md"
    begin, end = tables.BEGIN.format("readme"), tables.END.format("readme")
    readme.write_text(f"intro\n{begin}\nold table\n{end}\noutro\n")
    tables.replace(readme, "readme", ["| new | table |"])
    assert readme.read_text() == f"intro\n{begin}\n| new | table |\n{end}\noutro\n"
    bare = tmp_path / "BARE.md"
    bare.write_text("no block here\n")
    with pytest.raises(ValueError, match="no generated block"):
        tables.replace(bare, "readme", ["x"])
    assert bare.read_text() == "no block here\n"

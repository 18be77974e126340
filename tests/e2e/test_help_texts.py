"""What `--help` says is what the commands do: each text found wrong when glmc was tried as a new user would."""

from __future__ import annotations

from click.testing import CliRunner

from glmc.cli import main


def _help(*command: str) -> str:
    result = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_null_space_help_gives_each_methods_default_and_only_the_values_a_command_accepts():
    align = _help("align")
    assert "--null-space [learned|fixed|off]" in align and "[default: fixed; learned matching: learned]" in align
    merge = _help("merge")
    assert "--null-space [fixed|off]" in merge and "learned: trained" not in merge  # merge refuses "learned"


def test_merge_config_help_names_the_recipe_keys_and_where_the_format_is():
    from glmc.cli.recipe import TOP

    text = _help("merge")
    assert all(key in text.split("--out")[0] for key in TOP)
    assert "docs/howto/merge-recipe.md" in text and "README" not in text


def test_tokenizer_flag_takes_a_directory_only_and_says_so(tmp_path):
    assert "--tokenizer DIRECTORY" in _help("barrier") and "spec" not in _help("barrier").split("--tokenizer")[1][:80]
    result = CliRunner().invoke(main, ["barrier", str(tmp_path), str(tmp_path), "--tokenizer", "char"])
    assert result.exit_code == 2 and "'--tokenizer': Directory 'char' does not exist" in result.output


def test_glmc_help_names_every_registered_family():
    from glmc.adapters import adapters

    text = _help()
    assert all(cls.label in text for cls in adapters()) and len(adapters()) >= 10

"""The `glmc` command line. Each sub-command lives in glmc/commands/<name>.py and is registered here."""

import importlib
import importlib.util

import click

# name -> module under glmc.commands that defines a click command called `command`
COMMANDS = ["train", "verify", "align", "barrier", "merge", "demo"]


class LazyGroup(click.Group):
    """Imports a sub-command's module only when it runs, so `glmc --help` stays fast."""

    def list_commands(self, ctx):
        return [c for c in COMMANDS if importlib.util.find_spec(f"glmc.commands.{c}") is not None]

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        try:
            module = importlib.import_module(f"glmc.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"glmc.commands.{name}":
                return None
            raise
        return module.command


@click.group(cls=LazyGroup)
@click.version_option()
def main():
    """Align, interpolate and merge independently trained Transformers (GPT-2, ViT)."""


if __name__ == "__main__":
    main()

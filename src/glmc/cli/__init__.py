"""The `glmc` command line. Each sub-command lives in glmc/cli/<name>.py and is registered here.

Many processes (`accelerate launch … -m glmc.cli align|barrier|merge …`, glmc/distributed.py): every process runs
the command on its share of the data; only the main process prints and writes files, and the others wait for it at
the end. The other commands refuse to run under a multi-process launch.

Errors: every error a user's input causes (glmc.errors.GlmcError, and the OS errors of missing, unreadable or
unwritable paths and full disks) is printed as one line, ``Error: …``, with exit code 1; click's usage errors
exit with 2. Anything else is a bug: one line saying so, exit code 70, and the traceback with GLMC_DEBUG=1.
"""

import errno
import importlib
import importlib.util
import os
import sys
from inspect import cleandoc  # not `import inspect`: the subcommand module glmc.cli.inspect takes that name

import click

from glmc.errors import GlmcError

DEBUG_ENV = "GLMC_DEBUG"
INTERNAL_EXIT_CODE = 70  # EX_SOFTWARE (sysexits.h)
# OS errors a user causes (paths, permissions, space), reported as one line, never as a traceback
USER_OS_ERRORS = (FileNotFoundError, PermissionError, FileExistsError, IsADirectoryError, NotADirectoryError)
USER_ERRNOS = {errno.ENOSPC: "free some space or write somewhere else", errno.EDQUOT: "free some space or write "
               "somewhere else", errno.EROFS: "write somewhere else", errno.ENAMETOOLONG: "choose a shorter path"}
OS_FIXES = {FileNotFoundError: "check the path", PermissionError: "check its permissions or choose another path",
            FileExistsError: "remove it or choose another path", IsADirectoryError: "give a file path, not a directory",
            NotADirectoryError: "a part of the path is a file, not a directory: choose another path"}


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(str(text).split())


def os_error_message(e: OSError) -> str:
    """One line for an OSError: what failed, on which path, and what to do."""
    if e.strerror is None or e.filename is None:  # raised by glmc with its own message
        return one_line(e)
    path = e.filename if e.filename2 is None else f"{e.filename} -> {e.filename2}"
    fix = USER_ERRNOS.get(e.errno) or next(f for cls, f in OS_FIXES.items() if isinstance(e, cls))
    return one_line(f"{path}: {e.strerror} ({fix})")


class InternalError(click.ClickException):
    """An exception glmc did not expect: a bug. One line, and the way to see the traceback."""

    exit_code = INTERNAL_EXIT_CODE

    def __init__(self, e: BaseException):
        where = f"{type(e).__module__}.{type(e).__name__}".removeprefix("builtins.")
        super().__init__(one_line(f"internal error (a bug in glmc, please report it): {where}: {e} "
                                  f"(rerun with {DEBUG_ENV}=1 for the traceback)"))


def is_user_os_error(e: BaseException) -> bool:
    return isinstance(e, USER_OS_ERRORS) or (isinstance(e, OSError) and e.errno in USER_ERRNOS)


def translate(e: Exception) -> click.ClickException:
    """The ClickException the CLI shows for an exception that escaped a command."""
    if isinstance(e, GlmcError):
        return click.ClickException(one_line(e))
    if is_user_os_error(e):
        return click.ClickException(os_error_message(e))
    return InternalError(e)

# name -> module under glmc.cli that defines a click command called `command`
COMMANDS = ["train", "verify", "align", "barrier", "merge", "demo", "convert", "inspect", "sweep", "report"]
# the commands that run under a multi-process launch (their data passes are sharded)
LAUNCHABLE = ("align", "barrier", "merge")


class LazyGroup(click.Group):
    """Imports a sub-command's module only when it runs, so `glmc --help` stays fast."""

    def list_commands(self, ctx):
        return [c for c in COMMANDS if importlib.util.find_spec(f"glmc.cli.{c}") is not None]

    def format_help_text(self, ctx, formatter):
        """The group's help, with the families of every registered adapter (glmc's own and plugins')."""
        from glmc.adapters import adapters

        labels = list(dict.fromkeys(cls.label for cls in adapters()))
        self.help = f"{cleandoc(main.__doc__ or '')} Families: {', '.join(labels)}."
        super().format_help_text(ctx, formatter)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        try:
            module = importlib.import_module(f"glmc.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"glmc.cli.{name}":
                return None
            raise
        except GlmcError as e:  # e.g. a broken plugin, met while a command builds its choices from the records
            raise click.ClickException(one_line(str(e))) from e
        return module.command

    def invoke(self, ctx):
        try:
            result = super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:
            if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
                raise  # the whole traceback, user errors included
            raise translate(e) from e
        from glmc import distributed

        distributed.close()  # under a launch: every process leaves once the main one has written its files
        return result


def join_launch(command: str | None) -> None:
    """Under a multi-process launch: refuse a command that does not shard its work, and silence the standard
    output of every process but the main one (errors still reach stderr)."""
    from glmc import distributed

    if not distributed.launched() or command is None:
        return
    if command not in LAUNCHABLE:
        raise click.UsageError(f"glmc {command} runs in one process; under a multi-process launch only "
                               f"{', '.join(LAUNCHABLE)} run (run it without the launcher)")
    if not distributed.is_main():
        sys.stdout = open(os.devnull, "w")  # for the life of the process


@click.group(cls=LazyGroup)
@click.version_option()
@click.pass_context
def main(ctx):
    """Align, interpolate and merge independently trained Transformers."""
    from glmc.io import terminate_cleanly
    from glmc.memory import release_freed_memory

    release_freed_memory()
    terminate_cleanly()  # SIGTERM unwinds like Ctrl-C: no temporary output or lock is left behind
    join_launch(ctx.invoked_subcommand)


if __name__ == "__main__":
    main()

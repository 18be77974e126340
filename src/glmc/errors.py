"""The errors a user's input causes. The CLI (glmc/cli/__init__.py) prints ``Error: <message>`` for each, without a
traceback, so every message is one line that names the problem and, where there is one, the fix.

Each class also derives from the built-in exception that code raised before these existed (ValueError,
RuntimeError), so ``except ValueError`` keeps catching them. Anything else that escapes a command is a bug in
glmc: the CLI says so and shows its traceback when GLMC_DEBUG=1.
"""


class GlmcError(Exception):
    """A problem with what the user gave glmc (files, options, models); the message is one line."""


class BadCheckpoint(GlmcError, ValueError):
    """A model directory that cannot be loaded as it is: missing, truncated or corrupt files, pickle-only
    weights, invalid config.json, non-floating, mis-shaped or non-finite weights."""


class UnsupportedModel(GlmcError, ValueError):
    """The model has a feature that glmc cannot transform exactly; the message names it."""


class IncompatibleModels(GlmcError, ValueError):
    """Two or more models that cannot be aligned, interpolated or merged with each other (different family,
    task, depth, vocabulary, positions, classes or head layout)."""


class BadOption(GlmcError, ValueError):
    """An option value that glmc cannot use (the message names the option and the values it accepts)."""


class DataUnavailable(GlmcError, RuntimeError):
    """A package or system data set is missing; the message says how to install it."""


class BadData(GlmcError, ValueError):
    """Data glmc cannot read: batches of the wrong form, type or shape, or an empty split."""

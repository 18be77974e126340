"""The error raised when a data set or tokenizer needs something that is not installed."""


class DataUnavailable(RuntimeError):
    """A package or system data set is missing; the message says how to install it."""

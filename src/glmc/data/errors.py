"""The error raised when a data set or tokenizer needs something that is not installed (see glmc/errors.py)."""

from glmc.errors import DataUnavailable

__all__ = ["DataUnavailable"]

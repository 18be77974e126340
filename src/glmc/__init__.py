"""glmc: generalized linear mode connectivity for Transformers."""

__version__ = "0.1.0"

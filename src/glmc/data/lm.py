"""Language-modelling data: a tokenized corpus split into train/val/test token streams, served as windows.

Batches are ``{"input_ids": [B, T], "targets": [B, T]}`` (int64) where ``targets`` are the inputs shifted by
one token, already aligned (nanoGPT style; do not pass them as HF ``labels``, which HF would shift again).
- training (shuffle=True): random contiguous windows of ``context`` + 1 tokens, drawn with a seeded generator;
  one "epoch" is ``len(train) // (batch_size * context)`` batches.
- evaluation (shuffle=False): non-overlapping windows covering the whole split in order, so every token
  after the first is predicted exactly once; the last, shorter window comes as its own batch.
"""

import math

import numpy as np
import torch

from .sources import source_of
from .text import sha256
from .tokenizer import build_tokenizer, encode, load_tokenizer

SPLITS = ("train", "val", "test")


class TokenSplits:
    """A text data set's token stream per split (1-D int64), its tokenizer and its spec; what the causal and the
    masked LM data sets share (they cut the streams into examples differently)."""

    def __init__(self, spec: dict, tokenizer, tokens: dict):
        self.spec = spec
        self.tokenizer = tokenizer
        self.tokens = {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in tokens.items()}
        self.context = spec["context"]

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    def num_tokens(self, split: str) -> int:
        return len(self._stream(split))

    def _stream(self, split: str) -> torch.Tensor:
        if split not in self.tokens:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        return self.tokens[split]


class LMDataset(TokenSplits):
    task = "lm"

    def num_batches(self, split: str, batch_size: int, *, shuffle=None) -> int:
        n, t = self.num_tokens(split), self.context
        if shuffle if shuffle is not None else split == "train":
            return max(1, n // (batch_size * t))
        full = (n - 1) // t
        return math.ceil(full / batch_size) + (1 if (n - 1) % t else 0)

    def batches(self, split: str, batch_size: int, *, max_batches=None, seed=None, shuffle=None):
        """Yield batches of one pass over `split` (see module docstring); at most `max_batches` of them."""
        shuffle = split == "train" if shuffle is None else shuffle
        gen = self._random_batches if shuffle else self._ordered_batches
        for i, batch in enumerate(gen(self._stream(split), batch_size, seed)):
            if max_batches is not None and i >= max_batches:
                return
            yield batch

    def _random_batches(self, stream, batch_size, seed):
        t = self.context
        if len(stream) < t + 1:
            raise ValueError(f"split has {len(stream)} tokens, fewer than context + 1 = {t + 1}")
        g = torch.Generator().manual_seed(0 if seed is None else int(seed))
        offsets = torch.arange(t + 1)
        for _ in range(max(1, len(stream) // (batch_size * t))):
            starts = torch.randint(0, len(stream) - t, (batch_size,), generator=g)
            yield _window_batch(stream[starts[:, None] + offsets])

    def _ordered_batches(self, stream, batch_size, seed):
        t = self.context
        full = (len(stream) - 1) // t
        offsets = torch.arange(t + 1)
        for i in range(0, full, batch_size):
            starts = torch.arange(i, min(i + batch_size, full)) * t
            yield _window_batch(stream[starts[:, None] + offsets])
        if (len(stream) - 1) % t:
            yield _window_batch(stream[full * t:][None, :])

    def unigram_entropy(self, split: str = "test") -> float:
        """Cross-entropy (nats/token) of `split` under the training split's unigram distribution.

        The baseline a model must beat: predicting every token by its training frequency, add-one smoothed
        over the whole vocabulary so tokens unseen in training still get a finite cost."""
        counts = torch.bincount(self.tokens["train"], minlength=self.vocab_size).double() + 1.0
        logp = counts.log() - counts.sum().log()
        return float(-logp[self._stream(split)].mean())

    def describe(self) -> str:
        sizes = ", ".join(f"{k} {self.num_tokens(k):,}" for k in SPLITS)
        rule = f"; splits: {self.spec['split_rule']}" if "split_rule" in self.spec else ""
        return f"{self.spec['source']} / {self.spec['tokenizer']} (vocab {self.vocab_size:,}): {sizes} tokens{rule}"


def _window_batch(windows: torch.Tensor) -> dict:
    return {"input_ids": windows[:, :-1].contiguous(), "targets": windows[:, 1:].contiguous()}


def read_pieces(spec: dict) -> tuple[dict, dict, str, str]:
    """(spec with its split rule, {"train", "val", "test": text}, the whole text, its sha256) of a text source:
    a table (JSON lines, Parquet, datasets) with its own splits, or a corpus split by the spec. Every task that
    reads text goes through here; a recorded text that has changed is refused."""
    pieces, rule = source_of(spec["source"]).pieces(spec["source"], spec["split"])
    text = "".join(pieces[k] for k in SPLITS)
    if rule is not None:  # a source with its own splits says how it cut them
        spec = dict(spec, split_rule=rule)
    digest = sha256(text)
    if spec.get("text_sha256") not in (None, digest):
        raise ValueError(f"the text of {spec['source']} has changed since this spec was recorded "
                         f"(sha256 {digest[:12]}… != {spec['text_sha256'][:12]}…)")
    return spec, pieces, text, digest


def load_lm(spec: dict, tokenizer=None) -> LMDataset:
    """Read, split and tokenize. `tokenizer`: None (build from the spec), a loaded tokenizer, or a directory."""
    spec, pieces, text, digest = read_pieces(spec)
    if tokenizer is None:
        tokenizer = build_tokenizer(spec["tokenizer"], pieces["train"])
    elif not hasattr(tokenizer, "get_vocab"):
        tokenizer = load_tokenizer(tokenizer)
    tokens = {k: encode(tokenizer, v) for k, v in pieces.items()}
    _check_ids(tokens, len(tokenizer), spec)
    full = dict(spec, text_sha256=digest, n_chars=len(text), n_tokens={k: int(len(v)) for k, v in tokens.items()})
    return LMDataset(full, tokenizer, tokens)


def _check_ids(tokens: dict, vocab_size: int, spec: dict):
    top = max(int(v.max(initial=0)) for v in tokens.values())
    if top >= vocab_size:
        raise ValueError(f"tokenizer for {spec['source']} produced id {top} >= its size {vocab_size}")

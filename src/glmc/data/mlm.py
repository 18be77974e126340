"""Masked-language-modelling data (task "mlm"): a corpus tokenized with the encoder's own tokenizer, cut into blocks
of the model's length, with masks drawn per batch.

Blocks: the split's token stream (no special tokens) cut into consecutive pieces of context − 2 tokens, each
wrapped as ``[CLS] … [SEP]`` (style "bert") or ``<s> … </s>`` (style "roberta"); the last, shorter piece is padded
(attention_mask 0). For RoBERTa the model holds context + 2 positions: its position ids start past the padding
index (Hugging Face computes them from the input ids), so a block of `context` tokens fits.
Masks: 15 % of the non-special, non-padding positions of each sequence are chosen (each independently with
probability MASK_RATE); of those 80 % become the mask token, 10 % a random non-special token, 10 % stay. The
generator is seeded by (split, batch index, seed), so every call — every λ of a path, every method — sees the same
masks for the same batch. Training batches (shuffle=True) draw the block order from `seed`, and so new masks each
epoch (dynamic masking, as RoBERTa).
Batches: ``{"input_ids", "attention_mask", "token_type_ids" (zeros), "masked_targets"}`` [B, context], int64;
masked_targets holds the original token at masked positions and -100 elsewhere, so the loss and accuracy of
glmc.models.evaluate count the masked positions only (the paper's barrier on the masked-LM loss).

Tokenizers (the spec's "tokenizer"), trained offline with `tokenizers` on the training split:
  wordpiece:N   BERT's: lower-cased WordPiece, specials [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0–4)
  bpe:N         RoBERTa's: byte-level BPE, specials <s> <pad> </s> <unk> <mask> (ids 0–4; padding index 1)
  pretrained:DIR  a saved tokenizer with mask, pad and the style's boundary tokens
Saved with the model (save_pretrained), they add the boundary tokens themselves, so a fill-mask pipeline works.
"""

from __future__ import annotations

import torch

from .lm import SPLITS, TokenSplits, read_pieces
from .tokenizer import _chunks, encode, load_tokenizer

MASK_RATE, MASK_TOKEN, RANDOM_TOKEN = 0.15, 0.8, 0.1  # chosen share; of those: [MASK], random (the rest stay)
IGNORE_INDEX = -100
STYLES = ("bert", "roberta")
SPECIALS = {"bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            "roberta": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]}
_SPLIT_SEED = {"train": 0, "val": 1, "test": 2}


def check_kind(kind: str) -> str:
    """A masked-LM tokenizer kind, normalised; ValueError naming what is wrong."""
    if kind.startswith("pretrained:"):
        return kind
    name, _, n = kind.partition(":")
    if name in ("wordpiece", "bpe") and n.isdigit() and int(n) >= (300 if name == "bpe" else 20):
        return f"{name}:{int(n)}"
    raise ValueError(f"masked-LM tokenizer {kind!r}: expected wordpiece:N (BERT, N >= 20), bpe:N (RoBERTa, N >= 300) "
                     "or pretrained:DIR")


def wordpiece_tokenizer(vocab_size: int, text: str):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    pad, unk, cls, sep, mask = SPECIALS["bert"]
    tok = Tokenizer(models.WordPiece(unk_token=unk))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS["bert"], show_progress=False)
    tok.train_from_iterator(_chunks(text), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=unk, pad_token=pad, cls_token=cls, sep_token=sep,
                                   mask_token=mask)


def roberta_bpe_tokenizer(vocab_size: int, text: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bos, pad, eos, unk, mask = SPECIALS["roberta"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS["roberta"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_chunks(text), trainer=trainer)
    tok.post_processor = processors.RobertaProcessing((eos, tok.token_to_id(eos)), (bos, tok.token_to_id(bos)))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, unk_token=unk, pad_token=pad,
                                   cls_token=bos, sep_token=eos, mask_token=mask, clean_up_tokenization_spaces=False)


def build_tokenizer(kind: str, train_text: str):
    kind = check_kind(kind)
    if kind.startswith("pretrained:"):
        return load_tokenizer(kind[len("pretrained:"):])
    name, n = kind.split(":")
    return (wordpiece_tokenizer if name == "wordpiece" else roberta_bpe_tokenizer)(int(n), train_text)


class MLMDataset(TokenSplits):
    task = "mlm"

    def __init__(self, spec: dict, tokenizer, tokens: dict):
        super().__init__(spec, tokenizer, tokens)
        ids = {name: tokenizer.convert_tokens_to_ids(getattr(tokenizer, f"{name}_token") or "")
               for name in ("cls", "sep", "pad", "mask")}
        missing = [n for n, i in ids.items() if i is None or getattr(tokenizer, f"{n}_token") is None]
        if missing:
            raise ValueError(f"the tokenizer of {spec['source']!r} has no {', '.join(missing)} token; a masked LM "
                             "needs cls, sep, pad and mask tokens")
        self.cls_id, self.sep_id, self.pad_id, self.mask_id = ids["cls"], ids["sep"], ids["pad"], ids["mask"]
        self.special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        self._blocks: dict = {}

    def blocks(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(input ids, attention mask) [N, context] of every block of `split`, unmasked."""
        if split not in self._blocks:
            stream, inner = self._stream(split), self.context - 2
            full = len(stream) // inner
            pieces = list(stream[: full * inner].view(full, inner)) + ([stream[full * inner:]] if len(stream) % inner
                                                                      or not full else [])
            ids = torch.full((len(pieces), self.context), self.pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            ids[:, 0] = self.cls_id
            for r, piece in enumerate(pieces):  # every row but the last is full
                ids[r, 1:1 + len(piece)] = piece
                ids[r, 1 + len(piece)] = self.sep_id
                mask[r, : 2 + len(piece)] = 1
            self._blocks[split] = (ids, mask)
        return self._blocks[split]

    def num_batches(self, split: str, batch_size: int, *, shuffle=None) -> int:
        n = self.blocks(split)[0].shape[0]
        if shuffle if shuffle is not None else split == "train":
            return max(1, n // batch_size)
        return -(-n // batch_size)

    def batches(self, split: str, batch_size: int, *, max_batches=None, seed=None, shuffle=None):
        """Batches of one pass over `split` (module docstring); at most `max_batches` of them."""
        shuffle = split == "train" if shuffle is None else shuffle
        ids, attention = self.blocks(split)
        n = ids.shape[0]
        if shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(0 if seed is None else int(seed)))
            order = order[: max(1, n // batch_size) * batch_size] if n >= batch_size else order
        else:
            order = torch.arange(n)
        for b, start in enumerate(range(0, len(order), batch_size)):
            if max_batches is not None and b >= max_batches:
                return
            rows = order[start:start + batch_size]
            yield self.masked(ids[rows], attention[rows], self.mask_seed(split, b, seed))

    @staticmethod
    def mask_seed(split: str, batch: int, seed=None) -> int:
        """The seed of batch `batch`'s masks: the same batch of the same split always gets the same masks."""
        return (_SPLIT_SEED.get(split, 3) * 1_000_003 + batch) * 7919 + (0 if seed is None else int(seed))

    def masked(self, ids: torch.Tensor, attention: torch.Tensor, seed: int) -> dict:
        """The batch dict of blocks `ids` with masks drawn by a generator seeded with `seed`."""
        gen = torch.Generator().manual_seed(seed)
        candidates = (attention > 0) & ~torch.isin(ids, self.special)
        chosen = (torch.rand(ids.shape, generator=gen) < MASK_RATE) & candidates
        how = torch.rand(ids.shape, generator=gen)
        random_ids = self._random_tokens(ids.shape, gen)
        inputs = torch.where(chosen & (how < MASK_TOKEN), self.mask_id, ids)
        inputs = torch.where(chosen & (how >= MASK_TOKEN) & (how < MASK_TOKEN + RANDOM_TOKEN), random_ids, inputs)
        targets = torch.where(chosen, ids, IGNORE_INDEX)
        return {"input_ids": inputs, "attention_mask": attention.clone(), "token_type_ids": torch.zeros_like(ids),
                "masked_targets": targets}

    def _random_tokens(self, shape, gen) -> torch.Tensor:
        ordinary = torch.ones(self.vocab_size, dtype=torch.bool)
        ordinary[self.special[self.special < self.vocab_size]] = False
        pool = torch.nonzero(ordinary).flatten()
        return pool[torch.randint(0, len(pool), shape, generator=gen)]

    def describe(self) -> str:
        sizes = ", ".join(f"{k} {self.num_tokens(k):,}" for k in SPLITS)
        return (f"{self.spec['source']} / {self.spec['tokenizer']} (vocab {self.vocab_size:,}, {self.spec['style']} "
                f"blocks of {self.context}): {sizes} tokens")


def load_mlm(spec: dict, tokenizer=None) -> MLMDataset:
    """Read, split and tokenize. `tokenizer`: None (build from the spec), a loaded tokenizer, or a directory."""
    spec, pieces, text, digest = read_pieces(spec)  # tables with their own splits, or a corpus
    if tokenizer is None:
        tokenizer = build_tokenizer(spec["tokenizer"], pieces["train"])
    elif not hasattr(tokenizer, "get_vocab"):
        tokenizer = load_tokenizer(tokenizer)
    tokens = {k: encode(tokenizer, v) for k, v in pieces.items()}
    full = dict(spec, text_sha256=digest, n_chars=len(text), n_tokens={k: int(len(v)) for k, v in tokens.items()})
    return MLMDataset(full, tokenizer, tokens)

"""Hugging Face post-LN encoders with a masked-LM head (BertForMaskedLM, BertForPreTraining, RobertaForMaskedLM) ⇄
canonical view.

Native layout (nn.Linear, weights stored [out, in], y = x·Wᵀ + b), {p} = bert | roberta:
  {p}.embeddings.word_embeddings [V, d], position_embeddings [P, d], token_type_embeddings [T, d], LayerNorm
  {p}.encoder.layer.{i}.attention.self.query / key / value [H·d_head, d] (+ bias), attention.output.dense
  [d, H·d_head] (+ bias), attention.output.LayerNorm; intermediate.dense [n, d], output.dense [d, n],
  output.LayerNorm: x ← LN(x + attn(x)); x ← LN(x + mlp(x)) (post-LN)
  MLM head: cls.predictions.transform.dense [d, d] → hidden_act → transform.LayerNorm → cls.predictions.decoder
  [V, d] + bias (BERT); lm_head.dense → gelu → lm_head.layer_norm → lm_head.decoder (RoBERTa); the decoder weight
  is the word embedding when tie_word_embeddings; the head's own `bias` parameter is the decoder's bias when tied
  (and an unused parameter of an untied BERT, carried along unchanged)
  BertForPreTraining: {p}.pooler.dense [d, d] → tanh on the first token, read by cls.seq_relationship [2, d]
RoBERTa computes position ids past the padding index (create_position_ids_from_input_ids), so its blocks hold
max_position_embeddings − 2 tokens.

Canonical keys beyond the standard ones (glmc/adapters/base.py): type_embed [T, d] (a writer), embed_ln.w/.b and
blocks.{i}.ln1/ln2 (norms on the stream), mlm.dense.w [d_h, d] / .b, mlm.ln.w/.b [d_h], mlm_head.w [V, d_h] /
.b [V] (the decoder and the bias it uses), mlm_head.b0 (the head's own bias parameter), pooler.w [d_p, d] / .b,
nsp_head.w [2, d_p] / .b.

Groups (derivations in docs/encoders.md and glmc/symmetry/declarations.py):
  residual    permutations and one global sign (sign-permutation; subgroup: permutation). The norms on the stream keep
              their gains and biases, which the map moves; it also reads into the MLM head's dense layer and the
              pooler. Tied decoder: the MLM head's hidden space *is* the residual's (decoder = word embedding), so the
              residual's permutation also moves the head's dense outputs and LayerNorm (the gain and bias with the
              sign: LN′ = −LN by γ′ = −γ, β′ = −β) and the decoder's columns.
  heads, qk, ov, mlp   as in GPT-2 (absolute positions: GL(d_head) per head; GELU units: permutations).
  mlm_hidden  untied decoder only: a permutation of the head's hidden units (GELU passes nothing more), through its
              LayerNorm into the decoder's columns.
  mlm_scale   untied decoder only: non-zero scales s on the head LayerNorm's output: γ·s, β·s, decoder columns / s.
  pooler      BertForPreTraining: signed permutations of the pooler's units (tanh is odd), into the NSP head.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from glmc.adapters.base import Adapter, Arch, Training, TrainOption, UnsupportedModel
from glmc.adapters.checkpoints import HFCheckpoint
from glmc.adapters.common import (
    ELEMENTWISE,
    block_hooks,
    check_heads,
    rebuild,
)
from glmc.adapters.namemap import HEAD_COLUMNS, HEAD_ROWS, HEAD_VECTOR, TRANSPOSE, Entry, Layout, NameMap, layer_norm
from glmc.data import task_of
from glmc.symmetry.declarations import NormSpec
from glmc.symmetry.spec import GroupSpec, transformer_groups
from glmc.tasks import task

# model_type -> (the MLM class, every class served)
CLASSES = {"bert": ("BertForMaskedLM", "BertForPreTraining"), "roberta": ("RobertaForMaskedLM",)}
# encoder classes whose heads glmc has no groups for: refused by name rather than transformed wrongly
REFUSED = {name: "only the masked-LM classes (BertForMaskedLM, BertForPreTraining, RobertaForMaskedLM) are "
                 "supported; this head is not declared yet"
           for name in ("BertForSequenceClassification", "BertForTokenClassification", "BertForQuestionAnswering",
                        "BertForMultipleChoice", "BertForNextSentencePrediction", "BertLMHeadModel", "BertModel",
                        "RobertaForSequenceClassification", "RobertaForTokenClassification",
                        "RobertaForQuestionAnswering", "RobertaForMultipleChoice", "RobertaForCausalLM",
                        "RobertaModel")}

_L = "{p}.encoder.layer.{i}."
NAMES = NameMap([
    Entry("embed", "{p}.embeddings.word_embeddings.weight"),
    Entry("pos_embed", "{p}.embeddings.position_embeddings.weight"),
    Entry("type_embed", "{p}.embeddings.token_type_embeddings.weight"),
    *layer_norm("embed_ln", "{p}.embeddings.LayerNorm"),
    Entry("blocks.{i}.attn.q.w", _L + "attention.self.query.weight", HEAD_ROWS),
    Entry("blocks.{i}.attn.q.b", _L + "attention.self.query.bias", HEAD_VECTOR),
    Entry("blocks.{i}.attn.k.w", _L + "attention.self.key.weight", HEAD_ROWS),
    Entry("blocks.{i}.attn.k.b", _L + "attention.self.key.bias", HEAD_VECTOR),
    Entry("blocks.{i}.attn.v.w", _L + "attention.self.value.weight", HEAD_ROWS),
    Entry("blocks.{i}.attn.v.b", _L + "attention.self.value.bias", HEAD_VECTOR),
    Entry("blocks.{i}.attn.o.w", _L + "attention.output.dense.weight", HEAD_COLUMNS),
    Entry("blocks.{i}.attn.o.b", _L + "attention.output.dense.bias"),
    *layer_norm("blocks.{i}.ln1", _L + "attention.output.LayerNorm"),
    Entry("blocks.{i}.mlp.in.w", _L + "intermediate.dense.weight"),
    Entry("blocks.{i}.mlp.in.b", _L + "intermediate.dense.bias"),
    Entry("blocks.{i}.mlp.out.w", _L + "output.dense.weight", TRANSPOSE),
    Entry("blocks.{i}.mlp.out.b", _L + "output.dense.bias"),
    *layer_norm("blocks.{i}.ln2", _L + "output.LayerNorm"),
    Entry("pooler.w", "{p}.pooler.dense.weight", optional=True),
    Entry("pooler.b", "{p}.pooler.dense.bias", optional=True),
    Entry("mlm.dense.w", "{head}.dense.weight"),
    Entry("mlm.dense.b", "{head}.dense.bias"),
    *layer_norm("mlm.ln", "{head}.{head_ln}"),
    Entry("mlm_head.w", "{decoder}.decoder.weight"),  # present in the state dict even when tied
    Entry("mlm_head.b", "{decoder}.decoder.bias"),
    Entry("mlm_head.b0", "{decoder}.bias"),
    Entry("nsp_head.w", "cls.seq_relationship.weight", optional=True),
    Entry("nsp_head.b", "cls.seq_relationship.bias", optional=True),
])

# the model's norms: all on the stream (post-LN), the embedding's too
NORMS = {"embed_ln": NormSpec("layernorm", "w", "stream"), "blocks.{i}.ln1": NormSpec("layernorm", "w", "stream"),
         "blocks.{i}.ln2": NormSpec("layernorm", "w", "stream")}

# Model shape and optimisation defaults (glmc train bert|roberta --preset). "cpu": minutes on 2 cores.
PRESETS = {
    "cpu": dict(layers=4, width=128, heads=4, mlp=512, context=64, dropout=0.0, tied=True, vocab=2000,
                batch_size=32, lr=1e-3, steps=1000, warmup=100, eval_every=200, eval_batches=8),
}


def encoder_groups(d_model: int, n_head: int, d_head: int, d_mlp: int, relu: bool, tied: bool,
                   pooler: bool) -> dict[str, GroupSpec]:
    """The exact groups of a post-LN encoder with a masked-LM head (module docstring), in application order."""
    head_in = (("mlm.dense.w", -1, "contra", None),)
    if tied:  # the head's hidden space is the residual's: the decoder is the word embedding
        head_in += (("mlm.dense.w", 0, "gain", None), ("mlm.dense.b", -1, "gain", None), ("mlm.ln.w", -1, "co", None),
                    ("mlm.ln.b", -1, "co", None), ("mlm_head.w", -1, "contra", None))
    residual_acts = head_in + ((("pooler.w", -1, "contra", None),) if pooler else ())
    inner = transformer_groups(d_model, n_head, d_head, d_mlp, relu)
    groups = {"residual": GroupSpec("sign-permutation", d_model, subgroups=("permutation",), acts=residual_acts),
              **{role: g for role, g in inner.items() if role != "residual"}}
    if not tied:
        groups["mlm_hidden"] = GroupSpec("permutation", d_model, acts=(
            ("mlm.dense.w", 0, "co", None), ("mlm.dense.b", -1, "co", None), ("mlm.ln.w", -1, "co", None),
            ("mlm.ln.b", -1, "co", None), ("mlm_head.w", -1, "contra", None)))
        groups["mlm_scale"] = GroupSpec("diagonal", d_model, follows="mlm_hidden", acts=(
            ("mlm.ln.w", -1, "co", None), ("mlm.ln.b", -1, "co", None), ("mlm_head.w", -1, "contra", None)))
    if pooler:
        groups["pooler"] = GroupSpec("signed-permutation", d_model, acts=(
            ("pooler.w", 0, "co", None), ("pooler.b", -1, "co", None), ("nsp_head.w", -1, "contra", None)))
    return groups


def max_tokens(model) -> int:
    """Tokens one block may hold, special tokens included (RoBERTa's positions start past its padding index)."""
    c = model.config
    return c.max_position_embeddings - (c.pad_token_id + 1 if c.model_type == "roberta" else 0)


def mlm_data_spec(p: dict, given: set, log, *, style: str) -> dict:
    """`glmc train bert|roberta`'s data spec: masked-LM blocks with a tokenizer trained on the corpus (WordPiece for
    BERT, byte-level BPE for RoBERTa) unless --tokenizer pretrained:DIR names one."""
    tokenizer = p.pop("tokenizer", None) or f"{'wordpiece' if style == 'bert' else 'bpe'}:{p['vocab']}"
    return {"task": "mlm", "source": p["data"], "tokenizer": tokenizer, "context": p["context"], "style": style}


def mlm_reading(model, source: str, tokenizer_dir, *, style: str) -> dict | None:
    """A text source read as masked-LM blocks of the model's length, with the tokenizer saved beside it."""
    try:
        if task_of(source) != "lm":
            return None  # not text (an image set): refused later by name
    except ValueError:
        return None  # an unknown source: refused later by name
    if not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        raise ValueError(f"{tokenizer_dir} holds no tokenizer.json; a masked LM reads text with its own tokenizer "
                         "(--tokenizer DIR)")
    return {"task": "mlm", "source": source, "tokenizer": f"pretrained:{Path(tokenizer_dir).resolve()}",
            "context": max_tokens(model), "style": style}


def mlm_shape(ds, *, extra_positions: int = 0) -> dict:
    """The build() sizes masked-LM data decides; `extra_positions`: positions below the first token's (RoBERTa's
    padding index and the one before it)."""
    if ds.task != "mlm":
        raise ValueError(f"a masked language model needs masked-LM data, got {ds.spec['source']} ({ds.task})")
    return {"vocab_size": ds.vocab_size, "context": ds.context + extra_positions, "pad_token_id": ds.pad_id}


class BertAdapter(Adapter):
    family = "bert"
    model_type = "bert"
    task = "mlm"
    names = NAMES
    label = "BERT (BertForMaskedLM, BertForPreTraining)"
    checkpoint = HFCheckpoint(classes={"bert": CLASSES["bert"]}, by_architecture=True, refused=REFUSED)
    training = Training(
        data_spec=partial(mlm_data_spec, style="bert"),
        reading=partial(mlm_reading, style="bert"),
        data_shape=mlm_shape,
        presets=PRESETS,
        model_options=("layers", "width", "heads", "mlp", "dropout", "tied", "activation"),
        demo_shape=dict(layers=2, width=64, heads=4, mlp=256, dropout=0.0, tied=True, activation="gelu"),
        demo_label="BERT encoders (post-LN, masked LM, WordPiece 1000)",
        demo_data=lambda context: {"task": "mlm", "source": "shakespeare", "tokenizer": "wordpiece:1000",
                                                "context": context, "style": "bert"},
        help=("A post-LN BERT encoder (BertForMaskedLM) on the masked-LM task: 15 % of the tokens of [CLS] … [SEP] "
              "blocks masked, with its own WordPiece tokenizer trained on the corpus. Preset: cpu (4 layers, "
              "width 128, 4 heads, MLP 512, blocks of 64 tokens, WordPiece 2000, tied decoder, 1000 steps)."),
        data=("shakespeare", "shakespeare, python-stdlib (a code corpus) or text:PATH."),
        options=(
            TrainOption("vocab", "count", "Tokenizer vocabulary (trained on the training split) [preset: 2000]."),
            TrainOption("tokenizer", "text", "pretrained:DIR to use a saved tokenizer instead of training one."),
            TrainOption("context", "count", "Block length in tokens, special tokens included."),
            TrainOption("tied", "switch", "Tie the decoder to the word embeddings [preset: tied].", off="untied"),
            TrainOption("activation", "choice", "", ("gelu", "relu", "gelu_new"), default="gelu")))

    # --- which models --------------------------------------------------------------------------------------------

    @classmethod
    def served(cls) -> tuple:
        return CLASSES[cls.model_type]

    @classmethod
    def matches(cls, model) -> bool:
        name = type(model).__name__
        return name in cls.served() or (name in REFUSED and getattr(model.config, "model_type", "") == cls.model_type)

    def check_supported(self, model) -> None:
        name, c = type(model).__name__, model.config
        if name in REFUSED:
            raise UnsupportedModel(f"{name}: {REFUSED[name]}")
        if getattr(c, "is_decoder", False) or getattr(c, "add_cross_attention", False):
            raise UnsupportedModel("a BERT/RoBERTa used as a decoder (is_decoder / add_cross_attention): causal or "
                                   "cross-attention encoders are not declared")
        position = getattr(c, "position_embedding_type", None)
        if position not in (None, "absolute"):
            raise UnsupportedModel(f"position_embedding_type {position!r}: relative position scores are not "
                                   "declared (only absolute position embeddings)")
        if c.hidden_act not in ELEMENTWISE:
            raise UnsupportedModel(f"activation {c.hidden_act!r} is not a known elementwise function, so MLP unit "
                                   "permutations may not preserve the function")

    def is_tied(self, model) -> bool:
        return bool(getattr(model.config, "tie_word_embeddings", True))

    @staticmethod
    def has_pooler(model) -> bool:
        return any(k.endswith("pooler.dense.weight") for k, _ in model.named_parameters())

    def arch(self, model) -> Arch:
        c = model.config
        d_head = c.hidden_size // c.num_attention_heads
        relu = c.hidden_act == "relu"
        why = ("the LayerNorms sit on the residual stream (post-LN) with their gains, so the stream cannot be embedded "
               "into a wider one by an orthogonal map; not supported")
        return Arch(family=self.family, task="mlm", n_layer=c.num_hidden_layers, d_model=c.hidden_size,
                    n_head=c.num_attention_heads, d_head=d_head, d_mlp=c.intermediate_size,
                    activation=c.hidden_act, ln_eps=c.layer_norm_eps, unsupported={"rectangular": why},
                    norms=dict(NORMS),
                    groups=encoder_groups(c.hidden_size, c.num_attention_heads, d_head, c.intermediate_size, relu,
                                          self.is_tied(model), self.has_pooler(model)))

    def layout(self, model) -> Layout:
        c = model.config
        fields = ({"p": "bert", "head": "cls.predictions.transform", "head_ln": "LayerNorm",
                   "decoder": "cls.predictions"} if self.model_type == "bert" else
                  {"p": "roberta", "head": "lm_head", "head_ln": "layer_norm", "decoder": "lm_head"})
        return Layout(c.num_hidden_layers, fields=fields, dims={"n_head": c.num_attention_heads})

    # --- building and files --------------------------------------------------------------------------------------

    def config_for(self, vocab_size, context, layers, width, heads, mlp, dropout=0.0, tied=True, activation="gelu",
                   pad_token_id=0):
        from transformers import BertConfig

        return BertConfig(vocab_size=vocab_size, max_position_embeddings=context, hidden_size=width,
                          num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
                          hidden_act=activation, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                          tie_word_embeddings=tied, pad_token_id=pad_token_id)

    def build(self, vocab_size, context, layers, width, heads, mlp, dropout=0.0, tied=True, activation="gelu",
              pad_token_id=0, pretraining=False):
        """A fresh masked-LM encoder (`pretraining`: BertForPreTraining, with the pooler and NSP head); `context`
        counts the tokens of one block, special tokens included."""
        import transformers

        check_heads(width, heads)
        cfg = self.config_for(vocab_size, context, layers, width, heads, mlp, dropout, tied, activation, pad_token_id)
        cls = getattr(transformers, self.served()[1] if pretraining else self.served()[0])
        return cls(cfg)

    def from_canonical(self, view, model, ln_eps=None, tie=None, consume=False):
        h, dh, d = view["blocks.0.attn.q.w"].shape
        config = copy.deepcopy(model.config)
        if dh * h != d:
            raise UnsupportedModel(f"{type(model).__name__} needs heads·d_head = hidden size, got {h}·{dh} != {d}")
        config.hidden_size, config.num_attention_heads = d, h
        config.intermediate_size = view["blocks.0.mlp.in.w"].shape[0]
        if ln_eps is not None:
            config.layer_norm_eps = ln_eps
        same = torch.equal(view["embed"], view["mlm_head.w"]) and torch.equal(view["mlm_head.b"], view["mlm_head.b0"])
        decoder = self.layout(model).fields["decoder"] + ".decoder."  # `same` first: native_state may consume the view
        return rebuild(model, config, self.native_state(view, model, consume), view, type(model).__name__,
                       same=same, was_tied=self.is_tied(model), tie=tie, head=(decoder + "weight", decoder + "bias"))

    # --- running -------------------------------------------------------------------------------------------------

    def native_inputs(self, model, batch):
        kwargs = {"input_ids": batch[task(self.task).input_key]}
        for key in ("attention_mask", "token_type_ids"):
            if key in batch:
                kwargs[key] = batch[key]
        return (), kwargs

    def output_logits(self, model, out):
        return out.prediction_logits if hasattr(out, "prediction_logits") else out.logits

    def side_outputs(self, model, batch) -> dict:
        if not hasattr(model, "cls") or not hasattr(model.cls, "seq_relationship"):
            return {}
        args, kwargs = self.native_inputs(model, batch)
        return {"nsp": model(*args, **kwargs).seq_relationship_logits}

    def probe_inputs(self, model, n=2, seq=32, gen=None):
        gen = gen or torch.Generator().manual_seed(0)
        return torch.randint(0, model.config.vocab_size, (n, min(seq, max_tokens(model))), generator=gen)

    # --- alignment -----------------------------------------------------------------------------------------------

    def hook_modules(self, model) -> dict:
        base = getattr(model, self.layout(model).fields["p"])
        return block_hooks(base.encoder.layer, lambda b: b.attention.output.dense, lambda b: b.output.dense)

    def io_spec(self, model) -> dict:
        raise UnsupportedModel("circuit mode rewrites pre-LN blocks (norms folded into readers); a post-LN encoder "
                               "keeps its LayerNorms on the stream, so it has no circuit form: use --mode native")


class RobertaAdapter(BertAdapter):
    family = "roberta"
    model_type = "roberta"
    label = "RoBERTa (RobertaForMaskedLM)"
    checkpoint = HFCheckpoint(classes={"roberta": CLASSES["roberta"]}, by_architecture=True, refused=REFUSED)
    training = replace(BertAdapter.training,
        data_spec=partial(mlm_data_spec, style="roberta"),
        reading=partial(mlm_reading, style="roberta"),
        data_shape=partial(mlm_shape, extra_positions=2),
        demo_shape={},
        help=("A post-LN RoBERTa encoder (RobertaForMaskedLM) on the masked-LM task: <s> … </s> blocks, position "
              "ids past the padding index, its own byte-level BPE trained on the corpus. Preset: cpu (as bert's)."))

    def config_for(self, vocab_size, context, layers, width, heads, mlp, dropout=0.0, tied=True, activation="gelu",
                   pad_token_id=1):
        from transformers import RobertaConfig

        # `context` is max_position_embeddings: data_shape adds the two positions up to and at the padding index
        return RobertaConfig(vocab_size=vocab_size, max_position_embeddings=context, hidden_size=width,
                             num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
                             hidden_act=activation, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                             tie_word_embeddings=tied, pad_token_id=pad_token_id, bos_token_id=0, eos_token_id=2,
                             type_vocab_size=1)

    def build(self, vocab_size, context, layers, width, heads, mlp, dropout=0.0, tied=True, activation="gelu",
              pad_token_id=1, pretraining=False):
        if pretraining:
            raise UnsupportedModel("RoBERTa has no pre-training class with a pooler; build the masked-LM model")
        return super().build(vocab_size, context, layers, width, heads, mlp, dropout, tied, activation, pad_token_id)

    def probe_inputs(self, model, n=2, seq=32, gen=None):
        gen = gen or torch.Generator().manual_seed(0)
        # no padding token in a probe (it would take the padding position); ids above it
        pad = model.config.pad_token_id
        ids = torch.randint(0, model.config.vocab_size - 1, (n, min(seq, max_tokens(model))), generator=gen)
        return ids + (ids >= pad).long()

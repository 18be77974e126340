"""What the RoPE decoders beside Llama share (Qwen3, Gemma, OLMo: glmc/adapters/{qwen3,gemma,olmo}.py): the Llama
adapter's canonical view, rebuild and run code, parametrised by the family's transformers classes, the classes it
refuses by name, and its name map and groups.

Every one of them lays its attention out as Llama does (read off the installed modeling files: q_proj
[H·d_head, d], k_proj / v_proj [H_kv·d_head, d], o_proj [d, H·d_head], each with a bias when
`attention_bias`; `repeat_kv` serves query heads j·r … (j+1)·r − 1 from key/value head j; `rotate_half` RoPE on
the planes (i, i + d_head/2)) and gates its MLP as act(gate_proj x) ⊙ up_proj x.
"""

from __future__ import annotations

from dataclasses import replace

import transformers

from glmc.adapters.base import LM_OPTIONS, Arch, TrainOption
from glmc.adapters.llama import NAMES as LLAMA_NAMES
from glmc.adapters.llama import LlamaAdapter, llama_groups
from glmc.adapters.namemap import Entry, NameMap
from glmc.symmetry.declarations import standard_norms

_L = "model.layers.{i}."
# the output projection's bias (`attention_bias`), a residual writer like the projection itself
O_BIAS = Entry("blocks.{i}.attn.o.b", _L + "self_attn.o_proj.bias", optional=True)


def decoder_names(replace: dict | None = None, after_o: tuple = (), drop: tuple = ()) -> NameMap:
    """Llama's name map with rows replaced (canonical key -> Entry), rows dropped, and rows inserted after the
    output projection (block rows stay together, so the view lists block 0's tensors, then block 1's)."""
    entries = []
    for e in LLAMA_NAMES.entries:
        if e.canonical in drop:
            continue
        entries.append((replace or {}).get(e.canonical, e))
        if e.canonical == "blocks.{i}.attn.o.w":
            entries += [O_BIAS, *after_o]
    return NameMap(entries)


class RoPEDecoderAdapter(LlamaAdapter):
    """A Llama-shaped decoder family: `classes` (model_type -> transformers class name) are served, `refused`
    (class name -> why) are recognised and refused by name."""

    classes: dict[str, str] = {}
    refused: dict[str, str] = {}
    training = replace(LlamaAdapter.training,
        demo_shape={},
        options=LM_OPTIONS + (
            TrainOption("kv_heads", "count", "Key/value heads (grouped-query attention; must divide --heads)."),
            TrainOption("head_dim", "int", "Head size, even (RoPE pairs) [width / heads].", minimum=2),
            TrainOption("tied", "switch", "Tie the LM head to the embeddings [preset's].", off="untied")))

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # what tests/meta/test_layering.py keeps out of core code: the classes served and refused, their model types
        cls.native_classes = tuple(cls.classes.values()) + tuple(cls.refused)
        cls.model_types = tuple(cls.classes)

    def _check_attention_bias(self, model) -> None:
        """Llama and Mistral's rule (only Qwen2's q/k/v biases are served) is theirs; these families were never
        refused on `attention_bias` here."""

    def groups(self, model) -> dict:
        """The family's groups (default: Llama's)."""
        c = model.config
        return llama_groups(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, self._d_head(model),
                            c.intermediate_size)

    def unsupported(self, model) -> dict[str, str]:
        return {"rectangular-heads": "RoPE's frequencies depend on the head size, and padded heads would need "
                                     "padded key/value groups"}

    def norm(self, model) -> str:
        return "rmsnorm"

    def norms(self, model) -> dict:
        """The declared norms (glmc/symmetry/declarations.py; default: pre-norm RMSNorms with plain gains)."""
        return standard_norms(self.norm(model))

    def ln_eps(self, model) -> float:
        return model.config.rms_norm_eps

    def arch(self, model) -> Arch:
        c = model.config
        return Arch(family=self.family, task="lm", n_layer=c.num_hidden_layers, d_model=c.hidden_size,
                    n_head=c.num_attention_heads, d_head=self._d_head(model), d_mlp=c.intermediate_size,
                    activation="gated-" + c.hidden_act, ln_eps=self.ln_eps(model), norm=self.norm(model),
                    norms=self.norms(model), unsupported=self.unsupported(model), groups=self.groups(model))

    def build(self, vocab_size, context, layers, width, heads, mlp, kv_heads=None, tied=False, activation=None,
              head_dim=None, model_type=None, **extra):
        kv_heads = kv_heads or heads
        if heads % kv_heads or (head_dim is None and width % heads):
            raise ValueError(f"need heads % kv_heads == 0 and, without head_dim, width % heads == 0; got width "
                             f"{width}, heads {heads}, kv_heads {kv_heads}")
        if head_dim is not None and head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates coordinate pairs), got {head_dim}")
        cls = getattr(transformers, self.classes[model_type or next(iter(self.classes))])
        fields = dict(vocab_size=vocab_size, max_position_embeddings=context, hidden_size=width,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      intermediate_size=mlp, tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0,
                      pad_token_id=None, head_dim=head_dim or width // heads)
        fields.update(extra)
        if activation is not None:
            fields["hidden_act"] = activation
        return cls(cls.config_class(**fields))

"""What every Hugging Face RoPE decoder glmc serves shares (Llama, Mistral, Qwen2: glmc/adapters/llama.py; Qwen3,
Gemma, OLMo: glmc/adapters/{qwen3,gemma,olmo}.py; a plugin's Ministral): one adapter base, parametrised by the
family's transformers classes, the classes it refuses by name, its name map, norms and groups. A family is one
subclass of RoPEDecoderAdapter (the inheritance stops there: tests/meta/test_adapter_contract.py).

Native layout (nn.Linear, weights stored [out, in], y = x·Wᵀ + b), read off the installed modeling files:
  model.embed_tokens [V, d]; model.layers.{i}.input_layernorm / post_attention_layernorm / model.norm: RMSNorm
  self_attn.q_proj [H·d_head, d], k_proj / v_proj [H_kv·d_head, d] (each with a bias when `attention_bias`, or
  Qwen2's q/k/v biases), o_proj [d, H·d_head]; key/value head j serves query heads j·r … (j+1)·r − 1, r = H / H_kv
  (`repeat_kv`)
  mlp.gate_proj / up_proj [n, d], down_proj [d, n]: (act(x·W_gateᵀ + b_g) ⊙ (x·W_upᵀ + b_u))·W_downᵀ + b_d, the
  biases only with mlp_bias: b_g follows the unit permutation, b_u the permutation and the per-unit scale, b_d is a
  residual writer
  lm_head [V, d] (tied to embed_tokens when tie_word_embeddings)
RoPE (`rotate_half`) rotates the head-coordinate planes (i, i + d_head/2), so the QK maps are scale-rotations.
"""

from __future__ import annotations

import copy

import torch

from glmc.adapters.base import LM_OPTIONS, Adapter, Arch, Training, TrainOption, UnsupportedModel
from glmc.adapters.checkpoints import HFCheckpoint
from glmc.adapters.common import (
    ELEMENTWISE,
    RotaryLM,
    TokenLM,
    block_hooks,
    rebuild,
)
from glmc.adapters.namemap import HEAD_COLUMNS, HEAD_ROWS, HEAD_VECTOR, TRANSPOSE, Converter, Entry, Layout, NameMap
from glmc.symmetry.declarations import standard_norms
from glmc.symmetry.spec import GroupSpec

# key/value projections hold n_kv heads
KV_ROWS = Converter("kv-rows", lambda t, dims: t.reshape(dims["n_kv_head"], -1, t.shape[-1]),
                    lambda t, dims: t.reshape(-1, t.shape[-1]))
KV_VECTOR = Converter("kv-vector", lambda t, dims: t.reshape(dims["n_kv_head"], -1), lambda t, dims: t.reshape(-1))

_L = "model.layers.{i}."
NAMES = NameMap([
    Entry("embed", "model.embed_tokens.weight"),
    Entry("blocks.{i}.ln1.w", _L + "input_layernorm.weight"),
    Entry("blocks.{i}.attn.q.w", _L + "self_attn.q_proj.weight", HEAD_ROWS),
    Entry("blocks.{i}.attn.q.b", _L + "self_attn.q_proj.bias", HEAD_VECTOR, optional=True),
    Entry("blocks.{i}.attn.k.w", _L + "self_attn.k_proj.weight", KV_ROWS),
    Entry("blocks.{i}.attn.k.b", _L + "self_attn.k_proj.bias", KV_VECTOR, optional=True),
    Entry("blocks.{i}.attn.v.w", _L + "self_attn.v_proj.weight", KV_ROWS),
    Entry("blocks.{i}.attn.v.b", _L + "self_attn.v_proj.bias", KV_VECTOR, optional=True),
    Entry("blocks.{i}.attn.o.w", _L + "self_attn.o_proj.weight", HEAD_COLUMNS),
    Entry("blocks.{i}.ln2.w", _L + "post_attention_layernorm.weight"),
    Entry("blocks.{i}.mlp.gate.w", _L + "mlp.gate_proj.weight"),
    Entry("blocks.{i}.mlp.gate.b", _L + "mlp.gate_proj.bias", optional=True),  # mlp_bias=True
    Entry("blocks.{i}.mlp.in.w", _L + "mlp.up_proj.weight"),
    Entry("blocks.{i}.mlp.in.b", _L + "mlp.up_proj.bias", optional=True),
    Entry("blocks.{i}.mlp.out.w", _L + "mlp.down_proj.weight", TRANSPOSE),
    Entry("blocks.{i}.mlp.out.b", _L + "mlp.down_proj.bias", optional=True),
    Entry("ln_final.w", "model.norm.weight"),
    Entry("head.w", "lm_head.weight"),  # present in the state dict even when tied
])

PRESETS = {
    # like GPT-2's cpu preset: 4 query heads sharing 2 key/value heads, SwiGLU with ~8/3·d units, untied
    "cpu": dict(layers=4, width=128, heads=4, kv_heads=2, mlp=344, context=128, tokenizer="char", tied=False,
                batch_size=32, lr=2e-3, steps=1000, warmup=100, eval_every=200, eval_batches=8),
}


def llama_groups(d_model: int, n_head: int, n_kv: int, d_head: int, d_mlp: int) -> dict[str, GroupSpec]:
    """The exact groups of an RMSNorm / RoPE / grouped-query / gated-MLP decoder, in application order."""
    return {
        # gains folded: any orthogonal map commutes with the gain-free RMS norm; signed permutations keep gains
        "residual": GroupSpec("orthogonal", d_model, subgroups=("signed-permutation", "permutation")),
        "kv_heads": GroupSpec("permutation", n_kv, per_layer=True),
        "query_heads": GroupSpec("grouped-permutation", n_head, batch=n_kv, per_layer=True, follows="kv_heads"),
        # one map per key/value head, shared by its query heads; under RoPE only scale-rotations commute
        "qk": GroupSpec("scale-rotation", d_head, batch=n_kv, per_layer=True, follows="kv_heads"),
        "ov": GroupSpec("invertible", d_head, batch=n_kv, per_layer=True, follows="kv_heads"),
        # act(gate) ⊙ up: not homogeneous in the gate, so no unit splitting; zero units stay zero
        "mlp": GroupSpec("permutation", d_mlp, per_layer=True, extensions=("zero-pad",)),
        "mlp_scale": GroupSpec("diagonal", d_mlp, per_layer=True, follows="mlp"),
    }


# the output projection's bias (`attention_bias`), a residual writer like the projection itself
O_BIAS = Entry("blocks.{i}.attn.o.b", _L + "self_attn.o_proj.bias", optional=True)


def decoder_names(replace: dict | None = None, after_o: tuple = (), drop: tuple = ()) -> NameMap:
    """The decoder name map with rows replaced (canonical key -> Entry), rows dropped, and rows inserted after the
    output projection (block rows stay together, so the view lists block 0's tensors, then block 1's)."""
    entries = []
    for e in NAMES.entries:
        if e.canonical in drop:
            continue
        entries.append((replace or {}).get(e.canonical, e))
        if e.canonical == "blocks.{i}.attn.o.w":
            entries += [O_BIAS, *after_o]
    return NameMap(entries)


ROPE_OPTIONS = LM_OPTIONS + (
    TrainOption("kv_heads", "count", "Key/value heads (grouped-query attention; must divide --heads)."),
    TrainOption("head_dim", "int", "Head size, even (RoPE pairs) [width / heads].", minimum=2),
    TrainOption("tied", "switch", "Tie the LM head to the embeddings [preset's].", off="untied"))


class RoPEDecoderAdapter(TokenLM, RotaryLM, Adapter):
    """A Llama-shaped decoder family: `classes` (model_type -> transformers class name) are served, `refused`
    (class name -> why) are recognised and refused by name; `norms`, `groups`, `unsupported` and `ln_eps` say
    what differs from Llama's (RMSNorm before each sublayer, llama_groups)."""

    task = "lm"
    names = NAMES
    classes: dict[str, str] = {}
    refused: dict[str, str] = {}
    training = Training(presets=PRESETS, head_loss=True,
                        model_options=("layers", "width", "heads", "kv_heads", "head_dim", "mlp", "tied",
                                       "activation"),
                        options=ROPE_OPTIONS)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # one class per model type, whatever config.json's `architectures` says (as AutoModelForCausalLM); the
        # refused classes are the adapter's to refuse (check_supported), listed there for the layering test
        cls.checkpoint = HFCheckpoint(classes={t: (name,) for t, name in cls.classes.items()}, refused=cls.refused)

    @classmethod
    def matches(cls, model) -> bool:
        return type(model).__name__ in set(cls.classes.values()) | set(cls.refused)

    def check_supported(self, model) -> None:
        name, c = type(model).__name__, model.config
        if name in self.refused:
            raise UnsupportedModel(f"{name}: {self.refused[name]}")
        if c.hidden_act not in ELEMENTWISE:
            raise UnsupportedModel(f"MLP activation {c.hidden_act!r} is not a known elementwise function, so unit "
                                   "permutations may not preserve the function")
        self._check_attention_bias(model)
        rope = getattr(c, "rope_parameters", None) or {}
        if float(rope.get("partial_rotary_factor", getattr(c, "partial_rotary_factor", 1.0)) or 1.0) != 1.0:
            raise UnsupportedModel("partial rotary embeddings (partial_rotary_factor < 1): the QK maps would have "
                                   "to split into rotated and free head dimensions; not supported")
        if self._d_head(model) % 2:
            raise UnsupportedModel(f"odd head size {self._d_head(model)}: RoPE needs coordinate pairs")

    def _check_attention_bias(self, model) -> None:
        """A family's rule on `attention_bias` (none here: these families serve it; Llama's is its own)."""

    @staticmethod
    def _d_head(model) -> int:
        c = model.config
        return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads

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

    def layout(self, model) -> Layout:
        c = model.config
        return Layout(c.num_hidden_layers, dims={"n_head": c.num_attention_heads, "n_kv_head": c.num_key_value_heads})

    def build(self, vocab_size, context, layers, width, heads, mlp, kv_heads=None, tied=False, activation=None,
              head_dim=None, model_type=None, **extra):
        import transformers

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

    def hook_modules(self, model) -> dict:
        return block_hooks(model.model.layers, lambda b: b.self_attn.o_proj, lambda b: b.mlp.down_proj)

    def from_canonical(self, view, model, ln_eps=None, tie=None, consume=False):
        h, dh, d = view["blocks.0.attn.q.w"].shape
        config = copy.deepcopy(model.config)
        config.hidden_size, config.num_attention_heads, config.head_dim = d, h, dh
        config.num_key_value_heads = view["blocks.0.attn.k.w"].shape[0]
        config.intermediate_size = view["blocks.0.mlp.in.w"].shape[0]
        if ln_eps is not None:
            config.rms_norm_eps = ln_eps
        same = torch.equal(view["embed"], view["head.w"])  # before native_state, which may consume the view
        return rebuild(model, config, self.native_state(view, model, consume), view, type(model).__name__, same=same,
                       was_tied=self.is_tied(model), tie=tie, head=("lm_head.weight",))

"""Hugging Face Llama-family decoders (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM) ⇄ canonical view.

Native layout (nn.Linear, weights stored [out, in], y = x·Wᵀ + b):
  model.embed_tokens [V, d]; model.layers.{i}.input_layernorm / post_attention_layernorm / model.norm: RMSNorm
  self_attn.q_proj [H·d_head, d] (+ bias in Qwen2), k_proj / v_proj [H_kv·d_head, d] (+ bias in Qwen2),
  o_proj [d, H·d_head]; key/value head j serves query heads j·r … (j+1)·r − 1, r = H / H_kv (`repeat_kv`)
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
from glmc.adapters.common import (
    ELEMENTWISE,
    RotaryLM,
    block_hooks,
    hf_config,
    hf_expected_weights,
    load_pretrained,
    rebuild,
)
from glmc.adapters.namemap import HEAD_COLUMNS, HEAD_ROWS, HEAD_VECTOR, TRANSPOSE, Converter, Entry, Layout, NameMap
from glmc.symmetry.spec import GroupSpec

# model_type -> transformers class; the classes one adapter serves (their modules differ only where noted above)
CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
# Llama-shaped classes whose symmetry groups differ: refused by name rather than transformed wrongly
REFUSED: dict[str, str] = {}  # Qwen3 (QK-norm) has its own adapter: glmc/adapters/qwen3.py

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


def _model_type(model) -> str:
    return model.config.model_type


class LlamaAdapter(RotaryLM, Adapter):
    family = "llama"
    task = "lm"
    input_key = "input_ids"
    names = NAMES
    classes: dict[str, str] = CLASSES  # model_type -> the transformers class served
    refused: dict[str, str] = REFUSED  # class name -> why it is refused by name
    native_classes = tuple(CLASSES.values()) + tuple(REFUSED)
    model_types = tuple(CLASSES)
    label = "Llama-family (Llama, Mistral, Qwen2)"
    dir_format = "config.json with model_type 'llama', 'mistral' or 'qwen2' + *.safetensors (save_pretrained)"
    training = Training(
        presets=PRESETS,
        model_options=("layers", "width", "heads", "kv_heads", "head_dim", "mlp", "tied", "activation"),
        # the `glmc train llama` CPU preset's shape (4 query heads sharing 2 key/value heads, SwiGLU)
        demo_shape=dict(layers=4, width=128, heads=4, kv_heads=2, mlp=344, tied=False),
        demo_label="Llama decoders (RMSNorm, RoPE, SwiGLU, 4 query / 2 key-value heads)",
        help=("A Llama-family decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention) on text. Preset: cpu (4 "
              "layers, width 128, 4 query heads sharing 2 key/value heads, SwiGLU 344 units, untied, char "
              "tokenizer)."),
        options=LM_OPTIONS + (
            TrainOption("kv_heads", "count", "Key/value heads (grouped-query attention; must divide --heads)."),
            TrainOption("head_dim", "int", "Head size, even (RoPE pairs) [width / heads]; a narrower model that keeps "
                        "the wide one's head size can be aligned to it (narrow → wide).", minimum=2),
            TrainOption("tied", "switch", "Tie the LM head to the embeddings [preset: untied].", off="untied")))

    @classmethod
    def matches(cls, model) -> bool:
        return type(model).__name__ in set(cls.classes.values()) | set(cls.refused)

    @classmethod
    def claims_dir(cls, path) -> bool:
        config = hf_config(path)
        return config is not None and config.get("model_type") in cls.classes

    def _class_name(self, path) -> str:
        return self.classes[hf_config(path)["model_type"]]

    def expected_weights(self, path):
        return hf_expected_weights(path, self._class_name(path), self.label)

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
        if _model_type(model) != "qwen2" and getattr(model.config, "attention_bias", False):
            raise UnsupportedModel("attention_bias=True (biases on q/k/v and o_proj): not supported; only Qwen2's "
                                   "q/k/v biases are")

    @staticmethod
    def _d_head(model) -> int:
        c = model.config
        return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads

    def arch(self, model) -> Arch:
        c = model.config
        d_head, n_kv = self._d_head(model), c.num_key_value_heads
        act = "gated-" + c.hidden_act  # never "relu": gated units do not split (Arch.relu)
        return Arch(family="llama", task="lm", n_layer=c.num_hidden_layers, d_model=c.hidden_size,
                    n_head=c.num_attention_heads, d_head=d_head, d_mlp=c.intermediate_size, activation=act,
                    ln_eps=c.rms_norm_eps, norm="rmsnorm",
                    unsupported={"rectangular-heads": "RoPE's frequencies depend on the head size, and padded "
                                                      "heads would need padded key/value groups"},
                    groups=llama_groups(c.hidden_size, c.num_attention_heads, n_kv, d_head, c.intermediate_size))

    def layout(self, model) -> Layout:
        c = model.config
        return Layout(c.num_hidden_layers, dims={"n_head": c.num_attention_heads, "n_kv_head": c.num_key_value_heads})

    def build(self, vocab_size, context, layers, width, heads, mlp, kv_heads=None, tied=False, activation="silu",
              model_type="llama", qkv_bias=None, head_dim=None):
        import transformers

        kv_heads = kv_heads or heads
        if heads % kv_heads or (head_dim is None and width % heads):
            raise ValueError(f"need heads % kv_heads == 0 and, without head_dim, width % heads == 0; got width "
                             f"{width}, heads {heads}, kv_heads {kv_heads}")
        if head_dim is not None and head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates coordinate pairs), got {head_dim}")
        cls = getattr(transformers, CLASSES[model_type])
        cfg = cls.config_class(vocab_size=vocab_size, max_position_embeddings=context, hidden_size=width,
                               num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                               intermediate_size=mlp, hidden_act=activation, tie_word_embeddings=tied,
                               bos_token_id=0, eos_token_id=0, pad_token_id=None,
                               head_dim=head_dim or width // heads)
        return cls(cfg)

    def load(self, path):
        import transformers

        return load_pretrained(getattr(transformers, self._class_name(path)), path, self.renames)

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

"""The one home of the tests' model factories: small random models of every registered family, in eval mode.

Every factory moves norm gains, biases and LayerScale off their identity initialisation and scales the weights up
(logits of a few units), otherwise folding and float32 error would go untested. A family's conformance entry
(tests/conformance/test_conformance_<family>.py) lists configs built here; unit tests import the same builders.
Nothing here trains and nothing is downloaded: models come from the installed transformers / timm classes.
"""

from __future__ import annotations

import math

import torch
import transformers

# ---------------------------------------------------------------------------------------------- helpers


def seeded(make, **kw):
    """`make` with its keyword arguments bound: a conformance config, factory(seed) -> model."""
    return lambda seed: make(seed=seed, **kw)


# ---------------------------------------------------------------------------------------------- GPT-2


def tiny_gpt2(n_layer=2, n_embd=32, n_head=4, n_inner=None, activation="gelu_new", tied=True, vocab=97, seed=0,
              perturb_norms=True):
    """A random GPT-2 whose LayerNorms are not the identity (otherwise folding would go untested)."""
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_inner=n_inner, vocab_size=vocab,
                                  n_positions=64, activation_function=activation, tie_word_embeddings=tied,
                                  bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    if perturb_norms:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".ln_" in name or "ln_f" in name:
                    p.add_(torch.randn_like(p) * 0.3)
                elif p.ndim == 2:
                    p.mul_(3.0)  # larger weights: logits of a few units, so float32 error is realistic
    return model


def gpt2(seed=0, **kw):
    """tiny_gpt2 (norms perturbed, weights ×3) with non-zero biases as well (GPT-2 initialises them to 0)."""
    model = tiny_gpt2(seed=seed, **kw)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and ".ln_" not in name and "ln_f" not in name:
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return model.eval()


def init_gpt2(vocab: int, seed=0, layers=1, width=32, heads=2, mlp=64, context=32, scale=1.0):
    """A GPT-2 at transformers' initialisation (every parameter × `scale`), eval mode: the start of a run, for
    tests of checkpoint files and data rather than of symmetries (those want tiny_gpt2's perturbed norms)."""
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=context, n_embd=width, n_layer=layers, n_head=heads,
                                  n_inner=mlp, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    if scale != 1.0:
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
    return model


# ---------------------------------------------------------------------------------------------- RoPE decoders

LLAMA_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def decoder(cls_name: str, seed: int = 0, layers=2, width=32, heads=4, kv=2, mlp=40, vocab=61, tied=False, **extra):
    """A `cls_name` (a transformers causal-LM class of a Llama-like decoder) model in eval mode: 1-D parameters
    (gains, biases) + 0.3·N(0, 1), the embedding ×10 (a tied head reads it: logits of a few units), every other
    matrix ×3. `extra` goes to the config (head_dim, hidden_act, attention_bias, clip_qkv, …)."""
    cls = getattr(transformers, cls_name)
    torch.manual_seed(seed)
    cfg = cls.config_class(vocab_size=vocab, max_position_embeddings=64, hidden_size=width, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=mlp,
                           tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0, pad_token_id=None, **extra)
    model = cls(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.mul_(10.0 if "embed" in name else 3.0)
    return model.eval()


def factory(cls_name: str, **kw):
    """A conformance config of `decoder(cls_name, **kw)`: factory(seed) -> model."""
    return lambda seed: decoder(cls_name, seed=seed, **kw)


def llama(seed=0, model_type="llama", act="silu", **kw):
    """A Llama, Mistral or Qwen2 (`model_type`) decoder; the rest as `decoder` (Qwen2's q/k/v biases non-zero)."""
    return decoder(LLAMA_CLASSES[model_type], seed=seed, hidden_act=act, **kw)


def neox(seed=0, layers=2, width=32, heads=4, mlp=48, rotary=0.25, parallel=True, tied=False, vocab=61,
         act="gelu", bias=True, legacy=False):
    """A tiny random GPT-NeoX with norms and biases moved off their init and weights ×3 (realistic logits).
    `legacy`: the rotary fraction given as Pythia's configs give it (rotary_pct, rotary_emb_base)."""
    torch.manual_seed(seed)
    rope = (dict(rotary_pct=rotary, rotary_emb_base=10000) if legacy else
            dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": rotary}))
    cfg = transformers.GPTNeoXConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=mlp, max_position_embeddings=64,
                                     hidden_act=act, use_parallel_residual=parallel, tie_word_embeddings=tied,
                                     attention_bias=bias, bos_token_id=0, eos_token_id=0, **rope)
    model = transformers.GPTNeoXForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norm gains and biases
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.mul_(10.0 if "embed" in name else 3.0)
    return model.eval()


# ---------------------------------------------------------------------------------------------- encoders


def _perturbed_encoder(model, seed: int):
    """Every parameter moved off its initialisation (norm gains and biases included; weights ×3 for logits of a few
    units), in eval mode."""
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.mul_(3.0)
    return model.eval()


def bert(layers=2, width=32, heads=4, mlp=48, act="gelu", tied=True, pretraining=False, vocab=61):
    """A factory(seed) of BertForMaskedLM (or BertForPreTraining with `pretraining`)."""
    def make(seed):
        torch.manual_seed(seed)
        cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                                      num_attention_heads=heads, intermediate_size=mlp, hidden_act=act,
                                      max_position_embeddings=40, type_vocab_size=2, tie_word_embeddings=tied)
        cls = transformers.BertForPreTraining if pretraining else transformers.BertForMaskedLM
        return _perturbed_encoder(cls(cfg), seed)
    return make


def roberta(layers=2, width=32, heads=4, mlp=48, act="gelu", tied=True, vocab=61):
    """A factory(seed) of RobertaForMaskedLM."""
    def make(seed):
        torch.manual_seed(seed)
        cfg = transformers.RobertaConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                                         num_attention_heads=heads, intermediate_size=mlp, hidden_act=act,
                                         max_position_embeddings=42, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                         type_vocab_size=1, tie_word_embeddings=tied)
        return _perturbed_encoder(transformers.RobertaForMaskedLM(cfg), seed)
    return make


# ---------------------------------------------------------------------------------------------- vision


def perturb_vit(model, seed=0):
    """Weights of realistic scale (logits of a few units) and LayerNorm / LayerScale / qk_norm parameters far
    from their identity init, so that folding them is really tested."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen)
            if name.endswith(("cls_token", "reg_token", "pos_embed", "position_embeddings")):
                p.copy_(r * 0.5)
            elif p.ndim >= 2:
                p.copy_(r / math.sqrt(p[0].numel()))
            elif name.endswith("gamma"):  # LayerScale
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.3 * r)
            else:
                p.copy_(0.3 * r)
    return model.eval()


def hf_vit(image=8, patch=4, channels=3, layers=2, width=16, heads=2, mlp=32, act="gelu", classes=5, qkv_bias=True,
           pooler_model=False, eps=1e-6, seed=0):
    """A Hugging Face ViTForImageClassification (or ViTModel with its pooler, `pooler_model`)."""
    torch.manual_seed(seed)
    cfg = transformers.ViTConfig(image_size=image, patch_size=patch, num_channels=channels, hidden_size=width,
                                 num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
                                 hidden_act=act, num_labels=classes, qkv_bias=qkv_bias, layer_norm_eps=eps,
                                 pooler_output_size=classes)
    model = transformers.ViTModel(cfg) if pooler_model else transformers.ViTForImageClassification(cfg)
    return perturb_vit(model, seed)


def timm_vit(seed=0, **kw):
    """A timm VisionTransformer built as glmc builds it; `kw` are its constructor arguments (8×8 images, 4×4
    patches, width 16, 2 layers, 2 heads unless given)."""
    from glmc.models import _timm_from_kwargs

    kwargs = dict(img_size=8, patch_size=4, in_chans=3, num_classes=5, embed_dim=16, depth=2, num_heads=2,
                  mlp_ratio=2.0)
    kwargs.update(kw)
    torch.manual_seed(seed)
    return perturb_vit(_timm_from_kwargs(kwargs), seed)


def init_vit(seed=0, image=8, patch=4, channels=3, classes=3, layers=1, width=16, heads=2, mlp=32):
    """A ViTForImageClassification at transformers' initialisation (eval mode), for file and data tests."""
    torch.manual_seed(seed)
    cfg = transformers.ViTConfig(image_size=image, patch_size=patch, num_channels=channels, num_labels=classes,
                                 hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                                 intermediate_size=mlp)
    return transformers.ViTForImageClassification(cfg).eval()


# ---------------------------------------------------------------------------------------------- by family name

# one small shape per registered family for glmc.models.build_model (what `glmc train` builds; init weights)
SHAPES = {
    "gpt2": dict(vocab_size=30, context=12, layers=1, width=16, heads=2, mlp=24, tied=False),
    "hf-vit": dict(image_size=8, patch=4, channels=1, num_classes=3, layers=1, width=16, heads=2, mlp=24),
    "timm-vit": dict(image_size=8, patch=4, channels=1, num_classes=3, layers=1, width=16, heads=2, mlp=24),
    "llama": dict(vocab_size=30, context=12, layers=1, width=16, heads=2, kv_heads=1, mlp=24, tied=False),
    "neox": dict(vocab_size=30, context=12, layers=1, width=16, heads=2, mlp=24, rotary=0.25, parallel=True),
    "qwen3": dict(vocab_size=30, context=12, layers=1, width=16, heads=2, kv_heads=1, mlp=24, tied=False),
    "gemma": dict(vocab_size=30, context=12, layers=1, width=16, heads=2, kv_heads=1, mlp=24, tied=False),
    "olmo": dict(vocab_size=30, context=12, layers=1, width=16, heads=2, kv_heads=1, mlp=24, tied=False, clip_qkv=8.0),
    "bert": dict(vocab_size=30, context=12, layers=1, width=16, heads=2, mlp=24, tied=False),
    "roberta": dict(vocab_size=30, context=14, layers=1, width=16, heads=2, mlp=24, tied=False),
}

"""Tiny random RoPE decoders of any transformers class for the family conformance tests (Qwen3, Gemma, OLMo):
norm gains and biases moved off their init and weights scaled up, so folding and float32 error are tested."""

import torch
import transformers


def decoder(cls_name: str, seed: int = 0, layers=2, width=32, heads=4, kv=2, mlp=40, vocab=61, tied=False, **extra):
    """A `cls_name` model in eval mode: 1-D parameters (gains, biases) + 0.3·N(0, 1), the embedding ×10 (a tied
    head reads it: logits of a few units), every other matrix ×3."""
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
    return lambda seed: decoder(cls_name, seed=seed, **kw)

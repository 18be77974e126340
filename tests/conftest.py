import logging
from pathlib import Path

import pytest
import torch

# transformers warns that GPT-2's default bos/eos ids lie outside tiny test vocabularies; harmless here.
logging.getLogger("transformers").setLevel(logging.ERROR)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def tiny_gpt2(n_layer=2, n_embd=32, n_head=4, n_inner=None, activation="gelu_new", tied=True, vocab=97, seed=0,
              perturb_norms=True):
    """A random GPT-2 whose LayerNorms are not the identity (otherwise folding would go untested)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_inner=n_inner, vocab_size=vocab,
                     n_positions=64, activation_function=activation, tie_word_embeddings=tied,
                     bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    if perturb_norms:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".ln_" in name or "ln_f" in name:
                    p.add_(torch.randn_like(p) * 0.3)
                elif p.ndim == 2:
                    p.mul_(3.0)  # larger weights: logits of a few units, so float32 error is realistic
    return model


@pytest.fixture
def shared_dir():
    return SHARED

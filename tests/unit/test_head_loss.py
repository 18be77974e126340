"""The training loss computed from hidden states (glmc/models/head_loss.py) against F.cross_entropy on logits."""

import pytest
import torch
import torch.nn.functional as F

import glmc.models.head_loss as head_loss
from factories import llama, tiny_gpt2
from glmc.models.evaluate import loss_and_correct, training_loss
from glmc.models.head_loss import linear_cross_entropy


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("chunk", [1 << 20, 7])  # one chunk, and row chunks of one row (7 entries < vocab)
def test_linear_cross_entropy_equals_cross_entropy_of_the_logits(bias, chunk, monkeypatch):
    monkeypatch.setattr(head_loss, "CHUNK_ENTRIES", chunk)
    gen = torch.Generator().manual_seed(0)
    h0, w0 = torch.randn(20, 6, generator=gen), 2 * torch.randn(11, 6, generator=gen)
    b0 = torch.randn(11, generator=gen) if bias else None
    target = torch.randint(0, 11, (20,), generator=gen)
    target[[3, 8]] = -100  # ignored rows add nothing and get no gradient
    grads, losses = [], []
    for fused in (True, False):
        h, w = h0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
        b = None if b0 is None else b0.clone().requires_grad_(True)
        if fused:
            loss = linear_cross_entropy(h, w, b, target)
        else:
            loss = F.cross_entropy(F.linear(h, w, b), target, reduction="sum", ignore_index=-100)
        (1.7 * loss).backward()
        losses.append(loss.detach())
        grads.append([h.grad, w.grad] + ([b.grad] if bias else []))
    assert torch.allclose(losses[0], losses[1], rtol=1e-6)
    for g_fused, g_ref in zip(*grads):
        assert torch.allclose(g_fused, g_ref, atol=1e-5)
    assert grads[0][0][3].abs().max() == 0


@pytest.mark.parametrize("make", [lambda: tiny_gpt2(tied=False), lambda: tiny_gpt2(tied=True),
                                  lambda: llama(model_type="qwen2"), lambda: llama(tied=True)],
                         ids=["gpt2", "gpt2-tied", "qwen2", "llama-tied"])
def test_training_loss_has_the_logits_loss_and_gradients(make):
    """Through the model, with substituted parameters as learned matching calls it: same loss, same gradients,
    and the head module is itself again afterwards."""
    model = make()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (3, 9), generator=gen)
    targets = torch.roll(ids, -1, 1)
    targets[0, :4] = -100
    batch = {"input_ids": ids, "targets": targets}
    results = []
    for fn in (training_loss, lambda *a, **k: loss_and_correct(*a, **k)[::2]):
        params = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
        loss, n = fn(model, batch, "lm", params=params)
        loss.backward()
        results.append((loss.detach(), n, {k: v.grad for k, v in params.items()}))
    (loss_f, n_f, g_f), (loss_r, n_r, g_r) = results
    assert n_f == n_r == 3 * 9 - 4
    assert torch.allclose(loss_f, loss_r, rtol=1e-5)
    for k in g_r:
        assert torch.allclose(g_f[k], g_r[k], atol=1e-4 * (1 + g_r[k].abs().max())), k
    with torch.no_grad():
        assert model(ids).logits.shape[-1] == model.config.vocab_size

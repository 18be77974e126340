"""The summed cross-entropy of a linear output head, computed from the hidden states without F.cross_entropy.

A training step of a language model with a large vocabulary spends most of its time not in the head's matmuls
but in memory passes over the [tokens, vocab] logits: log-softmax writes a second copy, the loss's backward
zero-fills a third and the softmax backward writes a fourth (a 2-layer, width-128 GPT-2 with GPT-2's 50257-token
vocabulary and 2048 tokens per batch: ~0.4 GB per pass, about half of the step on 2 CPU cores). Here the logits
are made once; the forward reads them for each row's log-sum-exp (in cache-sized row chunks) and the backward
turns them into the softmax gradient in place, then does the head's two matmuls. Same loss and gradients as
cross_entropy(h·Wᵀ + b, targets, reduction="sum") up to float rounding, with no extra memory.
"""

from __future__ import annotations

import torch

CHUNK_ENTRIES = 1 << 20  # logits per chunk of rows in the element-wise passes (4 MB of float32)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, b, target, ignore_index):
        logits = h @ w.t()
        if b is not None:
            logits += b
        valid = target != ignore_index
        safe = torch.where(valid, target, 0)
        rows = max(1, CHUNK_ENTRIES // logits.shape[1])
        lse = torch.cat([torch.logsumexp(logits[i:i + rows], -1) for i in range(0, logits.shape[0], rows)])
        picked = logits.gather(1, safe[:, None]).squeeze(1)
        ctx.logits, ctx.has_bias = logits, b is not None  # turned into the gradient in place: used once
        ctx.save_for_backward(h, w, lse, safe, valid)
        return ((lse - picked) * valid).sum()

    @staticmethod
    def backward(ctx, g):
        h, w, lse, safe, valid = ctx.saved_tensors
        grad = ctx.logits
        del ctx.logits
        rows = max(1, CHUNK_ENTRIES // grad.shape[1])
        for i in range(0, grad.shape[0], rows):
            block = grad[i:i + rows]
            block.sub_(lse[i:i + rows, None]).exp_()
        grad.scatter_add_(1, safe[:, None], -torch.ones_like(lse)[:, None])
        grad.mul_((g * valid).to(grad.dtype)[:, None])
        grad_h = grad @ w if ctx.needs_input_grad[0] else None
        grad_w = grad.t() @ h if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_h, grad_w, grad_b, None, None


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
                         ignore_index: int = -100) -> torch.Tensor:
    """Σ over rows of cross-entropy(h·weightᵀ + bias, target), rows whose target is `ignore_index` left out; h is
    [rows, d], weight [vocab, d], target [rows]. Everything in float32."""
    return _LinearCrossEntropy.apply(h.float(), weight.float(), None if bias is None else bias.float(), target,
                                     ignore_index)

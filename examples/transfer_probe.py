"""Transfer a linear probe (or a steering vector) from one seed's residual stream to another's through the
residual map that glmc's alignment found.

    python examples/transfer_probe.py runs/g0 runs/g1 --layer 2

Two GPT-2s trained from different seeds (e.g. `glmc demo`'s, or two `glmc train gpt2` runs) write their residual
streams in different bases. Aligning B to A gives a residual map O (`alignment.transform.elements["residual"]`,
x ↦ x·O) such that the aligned model B′ = π(B) — which computes exactly B's function — writes B's stream, centred,
times O. So a probe w trained on A's (centred) stream reads B through x_B ↦ centre(x_B)·O, and a steering vector
v for A becomes v·Oᵀ for B. The script checks that identity on B′ itself, then trains a logistic-regression probe on
A's stream at one layer (which half of the vocabulary the current token is in) and scores it on B with and without
the map, against a probe trained on B directly. Models with RMS norms need no centring; the script centres only
when the residual group fixes the all-ones direction (LayerNorm models).
"""

import argparse

import torch
from sklearn.linear_model import LogisticRegression

import glmc
import glmc.data


def streams(model, batches, layer: int, centre: bool) -> torch.Tensor:
    """The residual stream entering block `layer` at every position of `batches`: [positions, d_model] (Hugging
    Face's last hidden state is the final norm's output, not the stream, so it is not offered)."""
    with torch.no_grad():
        out = [model(input_ids=b["input_ids"], output_hidden_states=True).hidden_states[layer] for b in batches]
    x = torch.cat([h.reshape(-1, h.shape[-1]) for h in out]).double()
    return x - x.mean(-1, keepdim=True) if centre else x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_a")
    parser.add_argument("model_b")
    parser.add_argument("--layer", type=int, default=1, help="the stream entering this block is probed (0-based)")
    parser.add_argument("--batches", type=int, default=4, help="test batches of 32 for each of fit and score")
    args = parser.parse_args()

    a, b = glmc.load_model(args.model_a), glmc.load_model(args.model_b)
    alignment = glmc.align(a, b, method="weight", progress=False)
    o = alignment.transform.elements["residual"].matrix.double()  # [d_model, d_model]: x ↦ x·O
    centre = bool(torch.allclose(o.sum(0), torch.ones(o.shape[0], dtype=o.dtype), atol=1e-6))

    ds = glmc.data.load_for_model(args.model_a)
    batches = list(ds.batches("test", 32, max_batches=2 * args.batches, shuffle=False))
    fit, score = batches[: args.batches], batches[args.batches:]
    x_a, x_b = streams(a, fit, args.layer, centre), streams(b, fit, args.layer, centre)
    moved = streams(alignment.model_b, fit, args.layer, centre)
    print(f"B′'s stream vs centre(x_B)·O: max |Δ| {float((moved - x_b @ o).abs().max()):.1e}")

    vocab = a.config.vocab_size
    half = torch.randperm(vocab, generator=torch.Generator().manual_seed(0))[: vocab // 2]
    label = lambda bs: torch.isin(torch.cat([x["input_ids"].reshape(-1) for x in bs]), half).numpy()  # noqa: E731
    probe_a = LogisticRegression(max_iter=2000).fit(x_a.numpy(), label(fit))
    probe_b = LogisticRegression(max_iter=2000).fit(x_b.numpy(), label(fit))
    s_a, s_b, y = streams(a, score, args.layer, centre), streams(b, score, args.layer, centre), label(score)
    print(f"probe accuracy on the stream entering block {args.layer} (held-out batches, chance ≈ 0.5):")
    print(f"  A's probe on A                       {probe_a.score(s_a.numpy(), y):.3f}")
    print(f"  A's probe on B, no map               {probe_a.score(s_b.numpy(), y):.3f}")
    print(f"  A's probe on B through O             {probe_a.score((s_b @ o).numpy(), y):.3f}")
    print(f"  B's own probe on B                   {probe_b.score(s_b.numpy(), y):.3f}")


if __name__ == "__main__":
    main()

"""Model-level operations on the canonical view: canonicalise, widen, the circuit form."""

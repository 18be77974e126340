"""Training of independent endpoints."""

"""The linear path between models and the simplex of several: interpolation, barriers."""

"""The acceptance checks, one module per group of the matrix."""

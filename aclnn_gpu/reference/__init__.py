"""NumPy implementations of every operator: what the cpu device runs, and the tests' second reference."""

"""Benchmarks: `python -m bench` runs every operator against PyTorch (see bench/README.md)."""

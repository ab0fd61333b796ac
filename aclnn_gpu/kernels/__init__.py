"""CUDA kernel sources, the manifest of their names, the loader, the emulator and the compile report."""

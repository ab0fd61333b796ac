"""Device implementations behind one interface: cpu, cuda (CuPy) and emulated."""

"""Layer 11, operators: the host side of every operator family, one package each (`api.py`: checks in
CANN order, plan types and the two-phase entry points; `launch.py`: the GPU launcher; `registers.json`:
its kernels' register counts), and `registry.py`, which gathers the entry points."""

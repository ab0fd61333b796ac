"""Layer 3, kernels: the CUDA sources and what the host knows of them, without any operator.

The `.cu` sources and their shipped cubins (`cubins.py`, `shipped.py`), the manifest of their
instantiations and register counts (`manifest.py`: the operators register their tables), the
KernelContext interface plans launch through (`context.py`), the loader and NVRTC (`loader.py`,
`nvrtc.py`), the compile report and occupancy (`report.py`, `occupancy.py`), and the GEMMs
(`gemm.py`: cuBLAS; `gemm_host.py`: NumPy).
"""

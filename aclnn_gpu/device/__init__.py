"""The devices (layer 8 of docs/DESIGN.md, "Import layers": below the runtime, above the plans):
one interface, three kinds.

Modules: `base` (the interface: memory, streams, events, running a plan), `cpu` (NumPy over host
buffers, a worker thread per stream), `cuda` (CuPy, RawModule kernels, cuBLAS), `emulated` (the cuda
device's code over the emulator's CuPy stand-in), `current` (which kind runs, the device of each id,
each thread's current device), `registry` (the live allocations and the pointer check), `hostpins`
(caller host memory page-locked for captured copies), `uploads` (host tables into the workspace),
`capture_mode` (the thread's CUDA stream-capture interaction mode).
"""

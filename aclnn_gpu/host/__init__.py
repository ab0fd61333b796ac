"""Host machinery (layer 4 of docs/DESIGN.md, "Import layers": it imports only base, reference and
kernels): what the host-side devices build on where a GPU has hardware.

Modules: `stream` (HostStream, one worker thread draining a FIFO per stream, its event marks and the
work a capture records), `memory` (aligned host buffers, the host's physical memory, the number of
virtual devices the cpu and emulated kinds offer).
"""

"""ACL graphs (layer 12 of docs/DESIGN.md, "Import layers": above the runtime and the operators):
acl_mdl.h's model run instances built by stream capture. `api.py` has the aclmdlRI* functions; the
capture state and the rules the runtime checks while a stream captures are the runtime's
(`runtime/capture.py`). The devices record and replay (`device/cpu.py`, `device/cuda.py`,
`emulator/fakecupy/`).

This file imports nothing, so that importing the package runs no more than the module asked for;
the package `aclnn_gpu` re-exports the aclmdlRI* functions."""

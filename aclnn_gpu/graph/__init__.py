"""ACL graphs (acl_mdl.h's model run instances built by stream capture): `api.py` has the
aclmdlRI* functions, `state.py` the capture state and the rules the runtime checks while a stream
captures. The devices record and replay (`device/cpu.py`, `device/cuda.py`, `emulator/fakecupy.py`).

This file imports nothing: the runtime imports `state.py`, and `api.py` imports the runtime, so a
re-export of `api.py` here would run it in the middle of the runtime's own import. The package
`aclnn_gpu` re-exports the aclmdlRI* functions."""

"""Layer 1, base: what every other layer may import and which imports nothing of the library.

`status.py` (CANN's status codes and enums: aclnnStatus, aclError, aclDataType, aclFormat ...),
`errors.py` (the internal OpError and the public AclnnError with their CANN code and message, the
recent-error message, and `c_api`, which turns a function into a C-style entry point), `dtypes.py`
(the one aclDataType <-> NumPy <-> CUDA C type table).
"""

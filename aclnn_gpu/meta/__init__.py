"""Layer 6, meta objects: the host descriptors of CANN's acl_meta.h.

`tensor.py` (aclTensor: a strided view of device memory, with its rebinds and versions; aclIntArray
and aclScalar), `lists.py` (aclFloatArray, aclBoolArray, aclTensorList, aclScalarList and the size
getters). No device work: the operators read these in phase 1.
"""

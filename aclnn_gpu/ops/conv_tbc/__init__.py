"""The ConvTbc operator package: `api.py` holds the public names, the checks in CANN's order and
the plans; `launch.py` the GPU launcher (kernels in `aclnn_gpu/kernels/conv_tbc.cu`); the cpu device runs
`aclnn_gpu/reference/conv_tbc.py`."""
from .api import (
    aclnnConvTbc,
    aclnnConvTbcGetWorkspaceSize,
    aclnnConvTbcBackward,
    aclnnConvTbcBackwardGetWorkspaceSize,
)

__all__ = [
    "aclnnConvTbc",
    "aclnnConvTbcGetWorkspaceSize",
    "aclnnConvTbcBackward",
    "aclnnConvTbcBackwardGetWorkspaceSize",
]

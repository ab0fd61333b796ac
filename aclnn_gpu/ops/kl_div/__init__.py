"""The KL divergence operator package: `api.py` holds the public names, the checks in CANN's order and
the plans; `launch.py` the GPU launcher (kernels in `aclnn_gpu/kernels/kl_div.cu`); the cpu device runs
`aclnn_gpu/reference/kl_div.py`."""
from .api import (
    aclnnKlDiv,
    aclnnKlDivGetWorkspaceSize,
    aclnnKlDivBackward,
    aclnnKlDivBackwardGetWorkspaceSize,
)

__all__ = [
    "aclnnKlDiv",
    "aclnnKlDivGetWorkspaceSize",
    "aclnnKlDivBackward",
    "aclnnKlDivBackwardGetWorkspaceSize",
]

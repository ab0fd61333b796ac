"""The cross-entropy loss operator package: `api.py` holds the public names, the checks in CANN's order and
the plans; `launch.py` the GPU launcher (kernels in `aclnn_gpu/kernels/cross_entropy.cu`); the cpu device runs
`aclnn_gpu/reference/cross_entropy.py`."""
from .api import (
    aclnnCrossEntropyLoss,
    aclnnCrossEntropyLossGetWorkspaceSize,
    aclnnCrossEntropyLossGrad,
    aclnnCrossEntropyLossGradGetWorkspaceSize,
)

__all__ = [
    "aclnnCrossEntropyLoss",
    "aclnnCrossEntropyLossGetWorkspaceSize",
    "aclnnCrossEntropyLossGrad",
    "aclnnCrossEntropyLossGradGetWorkspaceSize",
]

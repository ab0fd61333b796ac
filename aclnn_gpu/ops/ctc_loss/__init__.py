"""The CTC loss operator package: `api.py` holds the public names, the checks in CANN's order and
the plans; `launch.py` the GPU launcher (kernels in `aclnn_gpu/kernels/ctc_loss.cu`); the cpu device runs
`aclnn_gpu/reference/ctc_loss.py`."""
from .api import (
    aclnnCtcLoss,
    aclnnCtcLossGetWorkspaceSize,
    aclnnCtcLossBackward,
    aclnnCtcLossBackwardGetWorkspaceSize,
)

__all__ = [
    "aclnnCtcLoss",
    "aclnnCtcLossGetWorkspaceSize",
    "aclnnCtcLossBackward",
    "aclnnCtcLossBackwardGetWorkspaceSize",
]

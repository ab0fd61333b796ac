"""The scaled masked softmax operator package: `api.py` holds the public names, the checks in CANN's order and
the plans; `launch.py` the GPU launcher (kernels in `aclnn_gpu/kernels/scaled_masked_softmax.cu`); the cpu device runs
`aclnn_gpu/reference/scaled_masked_softmax.py`."""
from .api import (
    aclnnScaledMaskedSoftmax,
    aclnnScaledMaskedSoftmaxGetWorkspaceSize,
    aclnnScaledMaskedSoftmaxBackward,
    aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize,
)

__all__ = [
    "aclnnScaledMaskedSoftmax",
    "aclnnScaledMaskedSoftmaxGetWorkspaceSize",
    "aclnnScaledMaskedSoftmaxBackward",
    "aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize",
]

"""The operators' public entry points, gathered from their host modules (one per family), and the list of
families whose `functional.py` holds the bodies of aclnn_gpu.functional's operators (FUNCTIONAL).

Adding a family: its package under ops/, its names here, and (for a functional API) its name in
FUNCTIONAL; aclnn_gpu.functional builds its public functions from that list."""
from __future__ import annotations

import importlib
from types import ModuleType

from .kl_div import aclnnKlDiv, aclnnKlDivBackward, aclnnKlDivBackwardGetWorkspaceSize, aclnnKlDivGetWorkspaceSize
from .conv_tbc import (aclnnConvTbc, aclnnConvTbcBackward, aclnnConvTbcBackwardGetWorkspaceSize,
                       aclnnConvTbcGetWorkspaceSize)
from .ctc_loss import (aclnnCtcLoss, aclnnCtcLossBackward, aclnnCtcLossBackwardGetWorkspaceSize,
                       aclnnCtcLossGetWorkspaceSize)
from .scaled_masked_softmax import (aclnnScaledMaskedSoftmax, aclnnScaledMaskedSoftmaxBackward,
                                    aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize,
                                    aclnnScaledMaskedSoftmaxGetWorkspaceSize)
from .cross_entropy import (aclnnCrossEntropyLoss, aclnnCrossEntropyLossGetWorkspaceSize,
                            aclnnCrossEntropyLossGrad, aclnnCrossEntropyLossGradGetWorkspaceSize)

# The families with a functional.py (OPERATORS, BY_VALUE and the bodies), in the order aclnn_gpu.functional
# lists them. Names only: this module must not import those modules (aclnn_gpu.functional does).
FUNCTIONAL = ("kl_div", "conv_tbc", "scaled_masked_softmax", "cross_entropy", "ctc_loss")

__all__ = [
    "aclnnKlDiv", "aclnnKlDivGetWorkspaceSize", "aclnnKlDivBackward", "aclnnKlDivBackwardGetWorkspaceSize",
    "aclnnConvTbc", "aclnnConvTbcGetWorkspaceSize", "aclnnConvTbcBackward", "aclnnConvTbcBackwardGetWorkspaceSize",
    "aclnnScaledMaskedSoftmax", "aclnnScaledMaskedSoftmaxGetWorkspaceSize", "aclnnScaledMaskedSoftmaxBackward",
    "aclnnScaledMaskedSoftmaxBackwardGetWorkspaceSize",
    "aclnnCrossEntropyLoss", "aclnnCrossEntropyLossGetWorkspaceSize", "aclnnCrossEntropyLossGrad",
    "aclnnCrossEntropyLossGradGetWorkspaceSize",
    "aclnnCtcLoss", "aclnnCtcLossGetWorkspaceSize", "aclnnCtcLossBackward", "aclnnCtcLossBackwardGetWorkspaceSize",
]


# The families with PyTorch definitions (`<family>/torch_ops.py`: their `aclnn::` custom operators as data),
# in the order `aclnn_gpu.torch` registers them. Names only: nothing here imports torch.
TORCH = ("ctc_loss", "cross_entropy", "kl_div", "conv_tbc", "scaled_masked_softmax")


# The families with samples (`<family>/samples.py`: the demo's cases, the profiler's cases and coverage
# variants; `<family>/traffic_budget.json`: the CI traffic budget of its kernels). Names only: the demo and
# the profiler import those modules. SAMPLES is the order of the profiler's listing, its coverage run and
# the budget's cases; DEMO_ORDER the order of the demo's table (its cases draw their inputs from one random
# generator in this order, so the order is part of the table's figures).
SAMPLES = ("kl_div", "cross_entropy", "scaled_masked_softmax", "ctc_loss", "conv_tbc")
DEMO_ORDER = ("kl_div", "cross_entropy", "ctc_loss", "conv_tbc", "scaled_masked_softmax")


def family_modules(families: tuple[str, ...], part: str) -> list[ModuleType]:
    """`ops/<family>/<part>.py` of each of `families` (one of the lists above), in its order: what the
    layers above read by name. Imported when asked for, so `import aclnn_gpu` loads no family's
    functional, PyTorch or sample module (nor PyTorch itself)."""
    return [importlib.import_module(f"{__package__}.{family}.{part}") for family in families]

"""The kernel files and, for each, the name expressions of every instantiation the host launches.
The lists come from the launchers that launch them (one place: a launcher's kernel names sit next to
its launches), gathered here for the loader (cuda/emulated devices), the emulator and the compile
report."""
from __future__ import annotations

from ..ops.conv_tbc import launch as conv_tbc
from ..ops.cross_entropy import launch as cross_entropy
from ..ops.ctc_loss import launch as ctc_loss
from ..ops.kl_div import launch as kl_div
from ..ops.plan import STRIDED_COPY_EXPRESSIONS
from ..ops.scaled_masked_softmax import launch as scaled_masked_softmax

KERNELS: dict[str, list[str]] = {
    "strided_copy.cu": STRIDED_COPY_EXPRESSIONS,  # ops/plan.py's Staging
    "kl_div.cu": kl_div.all_name_expressions(),
    "cross_entropy.cu": cross_entropy.all_name_expressions(),
    "ctc_loss.cu": ctc_loss.all_name_expressions(),
    "conv_tbc.cu": conv_tbc.all_name_expressions(),
    "scaled_masked_softmax.cu": scaled_masked_softmax.all_name_expressions(),
}

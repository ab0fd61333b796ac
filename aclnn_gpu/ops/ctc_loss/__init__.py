"""The CTC loss operator family, whole: `api.py` (public names, checks in CANN's order, plans and their
outputs), `launch.py` (GPU launcher, kernel table; kernels in `kernels/ctc_loss.cu`), `registers.json`
(its kernels' registers), `functional.py` (aclnn_gpu.functional's bodies), `torch_ops.py` and
`torch_functions.py` (aclnn_gpu.torch's operators and functions), `samples.py` and `traffic_budget.json`
(the demo's and the profiler's cases, the budgets); the cpu device runs `reference/ctc_loss.py`. Only
`api.py` is imported here: the layers above import the rest."""
from .api import *  # noqa: F403 - the public names, listed in api.__all__
from .api import __all__  # noqa: F401

"""The scaled masked softmax operator package: `api.py` (public names, checks in CANN's order,
plans), `launch.py` (GPU launcher; kernels in `kernels/scaled_masked_softmax.cu`); the cpu device
runs `reference/scaled_masked_softmax.py`."""
from .api import *  # noqa: F403 - the public names, listed in api.__all__
from .api import __all__  # noqa: F401

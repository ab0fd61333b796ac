"""The operators for PyTorch, with PyTorch's signatures: each function calls a `torch.library` custom
operator of the `aclnn` namespace (`aclnn_gpu/torch/ops.py`) whose forward AND backward run this
library's aclnn operators, so models using them train, `torch.compile(fullgraph=True)` traces them,
`torch.export` holds them and CUDA graphs capture them.

The package `aclnn_gpu.torch` is layer 15, "PyTorch" (docs/DESIGN.md, "Import layers"). It owns the
public namespace of the PyTorch-shaped functions (this module: built from the families that
`aclnn_gpu/ops/registry.py` lists in TORCH, each family's functions in
`aclnn_gpu/ops/<family>/torch_functions.py`, the argument rules they share in
`aclnn_gpu/ops/torch_rules.py`), the registration of the `aclnn::` custom operators (`ops.py`, from the
families' definitions in `aclnn_gpu/ops/<family>/torch_ops.py`), the machinery that defines them
(`library.py`: definition, Autograd and autocast kernels, the route of a call) and the calls on
PyTorch's streams and caching allocator (`stream.py`).

    import aclnn_gpu.torch as acl_torch
    loss = acl_torch.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0,
                              reduction="mean", zero_infinity=False)
    loss.backward()                     # aclnnCtcLossBackward computes d loss / d log_probs

Importing `aclnn_gpu` never imports torch; importing this module does (the `torch` extra).
Each function takes exactly the parameters (names, order, defaults) of its PyTorch counterpart (the
sections below give them, family by family), so a model switches by changing one import.

Where a call runs, and when it returns:
  * CUDA tensors, with the `cuda` device in use (ACLNN_GPU_DEVICE auto or cuda on a machine with a GPU):
    on PyTorch's current stream of the tensors' GPU (`torch.cuda.current_stream(device)`, as a CuPy
    external stream), with the results and the workspace from PyTorch's caching allocator on that
    stream, returning as soon as the work is enqueued, as PyTorch's own ops do. Every tensor a call
    reads is `record_stream`ed on that stream, so it may be dropped at once. Inside
    `torch.cuda.graph(...)` the calls are captured, in any capture_error_mode (warm up first, as for
    PyTorch's ops): the tables they upload live in pinned buffers from PyTorch's host allocator, kept
    (with the plans) until the CUDA graph and its instances are destroyed (a CUDA user object the
    graph holds); captured GEMMs share one cuBLAS workspace per stream, from PyTorch's
    allocator; a host tensor among the inputs is captured as its value then (CTC lengths: host
    values, not CUDA tensors, in a capture). The host waits only where PyTorch's own op
    would: CTC lengths given as CUDA tensors are read on the host. `aclnn_gpu/torch/stream.py` has
    the details.
  * CPU tensors: through `functional` on the cpu (or emulated) device, zero-copy: the tensors are lent
    to the library for the length of the call and the results come back as torch tensors over the
    library's output buffers. The call returns when its results are computed.
  * CUDA tensors while the library's device is cpu or emulated: staged through host memory, results
    moved back to the tensors' device (synchronous).
The two-phase C-style API keeps its own contract (the caller's streams and workspaces).

torch.compile: the wrappers are plain Python around the custom operators, so Dynamo traces them with
no graph break, with one exception PyTorch shares: CTC lengths given as tensors are read with
`.tolist()` (pass lists of ints to compile the loss in one graph; PyTorch's own F.ctc_loss with
tensor lengths breaks the graph too). Lengths that change between calls make torch.compile
recompile until each length that varies is symbolic (PyTorch's automatic dynamic shapes);
torch.compile(..., dynamic=True) makes one graph for any lengths. conv_tbc's matrix precision is a
constant to the compiler, which guards on PyTorch's float32 matmul precision (a change recompiles).

Errors where PyTorch raises, with the same exception type (each family's section says which), and
the deprecated size_average / reduce arguments mapped to a reduction exactly as PyTorch maps them (with
its deprecation warning); an unknown reduction string is a ValueError. An out-of-range class label of
cross_entropy / nll_loss on CPU tensors raises PyTorch's IndexError ("Target 9 is out of bounds."; on the
GPU cross_entropy's row becomes NaN instead of PyTorch's device-side assertion, since checking on the host
would wait for the GPU, and nll_loss's forward, PyTorch's own, asserts).

What the functions share, and where they differ from PyTorch:
  * Forward mode (torch.autograd.forward_ad, torch.func.jvp / jacfwd / hessian): exact tangents for
    cross_entropy, nll_loss, kl_div, conv_tbc and scaled_masked_softmax (and their backward operators,
    so forward-over-reverse works); ctc_loss raises NotImplementedError as PyTorch's does. A tangent
    on kl_div's target or on a class weight raises NotImplementedError (no gradient there either).
  * Double backward (create_graph=True, gradgradcheck, Hessians): every operator but CTC, whose second
    derivative raises, as PyTorch's (_ctc_loss_backward has no derivative); the z-loss has none in
    log_prob either (NotImplementedError).
  * Autocast (cpu and cuda): the losses run in float32 (PyTorch's float32 list: nll_loss, kl_div,
    log_softmax for cross_entropy; ctc_loss on the CPU list), conv_tbc in the autocast dtype (its
    lower-precision list); the fused softmax keeps its input's dtype, as apex's kernel does.
  * torch.jit.script of code calling these functions fails at once, naming the function and why
    (TorchScript compiles no Python, and the operators are Python custom operators); torch.jit.trace,
    torch.compile and torch.export work.
  * The former autograd.Function classes (CtcLossFunction, ..., ScaledMaskedSoftmaxFunction) remain as
    thin classes whose `apply` calls the custom operator, with the same arguments.
Failures raise `aclnn_gpu.AclnnError` (a RuntimeError with `.status`); arguments that are not torch
tensors raise TypeError.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..ops import registry
from . import ops as _ops   # registers the aclnn:: operators (and hands ops/torch_rules.py its stream question)


def _families() -> list[Any]:
    """The `torch_functions` module of each family the registry lists in TORCH, in its order."""
    return registry.family_modules(registry.TORCH, "torch_functions")


def _public(families: list[Any]) -> dict[str, Any]:
    """name -> public object: every family's functions, then every family's former autograd.Function
    classes (the order of `__all__`)."""
    objects = [o for family in families for o in family.PUBLIC]
    ordered = [o for o in objects if not isinstance(o, type)] + [o for o in objects if isinstance(o, type)]
    return {o.__name__: o for o in ordered}


def _section(family: Any) -> str:
    """A family's module docstring as a section of this one, headed by its file (without its layer line)."""
    name = family.__name__.rsplit(".", 2)[-2]
    text = "\n\n".join(p for p in (family.__doc__ or "").strip().split("\n\n") if not p.startswith("Layer 11"))
    return f"\nThe family {name} (aclnn_gpu/ops/{name}/torch_functions.py):\n\n{text}\n"


_FAMILIES = _families()
_PUBLIC = _public(_FAMILIES)
globals().update(_PUBLIC)   # ctc_loss, cross_entropy, ...: real attributes of this module
__doc__ = (__doc__ or "") + "".join(_section(family) for family in _FAMILIES)

if TYPE_CHECKING:   # the functions are attributes made from the registry, which a type checker cannot list
    def __getattr__(name: str) -> Any: ...


__all__ = list(_PUBLIC)

_ = _ops

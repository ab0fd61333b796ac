"""Layer 10, executor: `aclOpExecutor`, the plan that phase 1 froze, the two phases every operator's
entry points are made of (`make_get_workspace_size`, `make_execute`: phase 2's checks) and the
executor cache (`cache.py`).

Single-use by default, as in CANN: a second run of a non-repeatable executor is refused with
ACLNN_ERR_PARAM_INVALID instead of being the use-after-free it is on the NPU. A repeatable executor
keeps its phase-1 arguments (`source`), so aclSetInputTensorAddr / aclSetOutputTensorAddr can rebind
one of its tensors and plan it again over the new address.
"""
from __future__ import annotations

import contextlib
import inspect
import numbers
import threading
from typing import Any

from . import cache as executor_cache
from ..base.errors import c_api, fail
from ..runtime.capture import refuse_invalidated
from ..kernels.occupancy import DEFAULT_ARCH
from ..plans.plan import DESTROYED, check_plan_memory
from ..runtime import get_device, resolve_stream
from ..base.status import aclnnStatus
from ..meta.tensor import REBINDS, aclTensor

SUCCESS = aclnnStatus.ACLNN_SUCCESS
NULLPTR = aclnnStatus.ACLNN_ERR_PARAM_NULLPTR
INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID


class aclOpExecutor:
    __slots__ = ("op", "plan", "device", "repeatable", "spent", "destroyed", "lock", "checked_workspace",
                 "checked_generation", "source", "rebinds", "__weakref__")

    def __init__(self, op: str, plan: Any, device: Any):
        self.op = op
        self.plan = plan
        self.device = device
        self.repeatable = False
        self.spent = False
        self.destroyed = False
        self.lock = threading.Lock()
        self.checked_workspace: tuple[Any, int] | None = None  # (workspace, registry generation) that passed
        self.checked_generation = -1   # registry generation at which the plan's tensors last passed
        self.source: tuple | None = None   # (_Phase1, args, kwargs) of its GetWorkspaceSize: a rebind replans
        self.rebinds = getattr(plan, "rebinds", 0)   # the process's rebind count when its plan last matched its tensors

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else "spent" if self.spent else "ready"
        return f"aclOpExecutor({self.op}, workspace={self.plan.workspace_size}, {state})"


def _executor(executor: Any, fn: str) -> aclOpExecutor:
    if executor is None:
        fail(aclnnStatus.ACLNN_ERR_INNER_NULLPTR, f"{fn}: executor is null")
    if not isinstance(executor, aclOpExecutor):   # a bad argument, not an internal error
        fail(INVALID, f"{fn}: executor is not an aclOpExecutor: it is {type(executor).__name__}")
    return executor


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclSetAclOpExecutorRepeatable(executor: aclOpExecutor) -> int:
    ex = _executor(executor, "aclSetAclOpExecutorRepeatable")
    if ex.destroyed or ex.spent:
        fail(INVALID, f"aclSetAclOpExecutorRepeatable: executor of {ex.op} was already "
                      f"{'destroyed' if ex.destroyed else 'run'}; call it right after GetWorkspaceSize")
    ex.repeatable = True
    return aclnnStatus.ACLNN_SUCCESS


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclDestroyAclOpExecutor(executor: aclOpExecutor) -> int:
    ex = _executor(executor, "aclDestroyAclOpExecutor")
    # under the executor's lock, so a destroy never lands between an execute's checks and its use of
    # the plan; not for a stale device's executor (a fork() child: a parent thread may hold the lock)
    stale = ex.device is None or ex.device.stale is not None
    with contextlib.nullcontext() if stale else ex.lock:
        if ex.destroyed:
            fail(INVALID, f"aclDestroyAclOpExecutor: executor of {ex.op} was already destroyed")
        ex.destroyed = True
        ex.plan = None
    return aclnnStatus.ACLNN_SUCCESS


class _Phase1:
    """What an executor needs to plan again: its operator's phase 1 (`build(device, *args)`, then the
    launcher recorded on a kernel device), C parameter names and output parameters (its plan type's
    `outputs`)."""

    __slots__ = ("build", "names", "outputs")

    def __init__(self, build: Any, names: tuple[str, ...], outputs: tuple[str, ...]):
        self.build, self.names, self.outputs = build, names, outputs

    def plan_of(self, device: Any, args: tuple, kwargs: dict) -> Any:
        """The plan of `args` on `device`: `build`'s, with its launcher recorded on a kernel device
        (`Plan.with_frozen_launch`, `plans/frozen.py`)."""
        plan = self.build(device, *args, **kwargs)
        sm_count = getattr(device, "sm_count", None)
        if sm_count is not None:  # cuda and emulated: record the launcher once, for this device
            plan = plan.with_frozen_launch(sm_count, getattr(device, "arch", DEFAULT_ARCH))
        return plan


def _set_tensor_addr(fn: str, outputs: bool, executor: Any, index: Any, tensor: Any, addr: Any) -> int:
    """aclSetInputTensorAddr / aclSetOutputTensorAddr: the index-th input (output) tensor parameter of
    a repeatable executor is rebound to `addr` (`aclTensor.rebind`, so phase 1's cache sees a new
    version and misses) and the executor is planned again over it, as CANN refreshes the address in
    its launch arguments. A plan that fails (the new range is not live memory) leaves the tensor and
    the executor as they were."""
    ex = _executor(executor, fn)
    if ex.destroyed or ex.spent:
        fail(INVALID, f"{fn}: executor of {ex.op} was already {'destroyed' if ex.destroyed else 'run'}")
    if not ex.repeatable or ex.source is None:
        fail(INVALID, f"{fn}: executor of {ex.op} is not repeatable (call aclSetAclOpExecutorRepeatable "
                      "right after GetWorkspaceSize: only a reusable executor's addresses can be refreshed)")
    phase1, args, kwargs = ex.source
    bound = dict(zip(phase1.names, args), **kwargs)
    planned = getattr(ex.plan, "tensors", {})
    wanted = phase1.outputs
    names = [n for n in phase1.names if (n in planned or isinstance(bound.get(n), aclTensor))
             and (n in wanted) == outputs]
    kind = "output" if outputs else "input"
    if not isinstance(index, numbers.Integral) or isinstance(index, bool) or not 0 <= int(index) < len(names):
        fail(INVALID, f"{fn}: index {index!r} is out of range: {ex.op} has {len(names)} {kind} tensors "
                      f"({', '.join(names)})")
    name = names[int(index)]
    if tensor is None:
        fail(NULLPTR, f"{fn}: tensor is nullptr")
    if bound.get(name) is not tensor or not isinstance(tensor, aclTensor):
        fail(INVALID, f"{fn}: tensor is not {ex.op}'s {kind} {index} ({name}) of this executor")
    if addr is None:
        fail(NULLPTR, f"{fn}: addr is nullptr")
    if not isinstance(addr, numbers.Integral) or isinstance(addr, bool) or addr < 0:
        fail(INVALID, f"{fn}: addr {addr!r} must be a device address")
    old = tensor.data
    with ex.lock:
        tensor.rebind(int(addr))
        try:
            plan = phase1.plan_of(ex.device, args, kwargs)
        except Exception:
            tensor.rebind(old)
            raise
        ex.plan = plan
        ex.rebinds = plan.rebinds
        ex.checked_workspace = None
        ex.checked_generation = -1
    return SUCCESS


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclSetInputTensorAddr(executor: aclOpExecutor, index: int, tensor: aclTensor, addr: int) -> int:
    return _set_tensor_addr("aclSetInputTensorAddr", False, executor, index, tensor, addr)


@c_api(internal=aclnnStatus.ACLNN_ERR_INNER)
def aclSetOutputTensorAddr(executor: aclOpExecutor, index: int, tensor: aclTensor, addr: int) -> int:
    return _set_tensor_addr("aclSetOutputTensorAddr", True, executor, index, tensor, addr)


def follow_rebinds(op: str, executor: aclOpExecutor) -> None:
    """A tensor of the executor's plan was rebound after its GetWorkspaceSize (aclSetRawTensorAddr, or
    aclSetInputTensorAddr / aclSetOutputTensorAddr through another executor): as CANN reads a tensor's
    address when it launches, the executor plans again on the tensors as they are now (the checks
    included: a rebind to nullptr is refused here), never launching on the address it was planned with,
    which may be freed. Called with the executor's lock held."""
    count = REBINDS[0]   # read first: a rebind during the comparison is seen by the next execute
    plan = executor.plan
    if tuple(t.version for t in plan.present) != plan.versions:
        if executor.source is None:
            fail(INVALID, f"{op}: a tensor of this executor was rebound to another address after "
                          "GetWorkspaceSize; call GetWorkspaceSize again")
        phase1, args, kwargs = executor.source
        executor.plan = phase1.plan_of(executor.device, args, kwargs)
        executor.checked_workspace = None
        executor.checked_generation = -1
    executor.rebinds = count


def run_executor(op: str, workspace: Any, workspace_size: Any, executor: Any, stream: Any) -> int:
    """Phase 2 of every operator: check, then enqueue the frozen plan on the stream."""
    if executor is None:
        fail(NULLPTR, f"{op}: executor is null")
    if not isinstance(executor, aclOpExecutor):
        fail(INVALID, f"{op}: executor is a {type(executor).__name__}, not an aclOpExecutor")
    if executor.op != op:
        fail(INVALID, f"{op}: executor was built by {executor.op}GetWorkspaceSize, not {op}GetWorkspaceSize")
    # the executor runs on the device it was built on; checked before its lock, which a thread of the
    # parent may have held at fork()
    device = executor.device   # None: a spent or destroyed executor the C ABI re-creates (capi/bridge.py)
    if device is not None and device.stale is not None:
        fail(INVALID, f"{op}: executor was built on device {device.id}, which {device.stale}")
    with executor.lock:
        if executor.destroyed:
            fail(INVALID, f"{op}: executor was destroyed")
        if executor.spent:
            fail(INVALID, f"{op}: executor was already run and is not repeatable "
                          "(call aclSetAclOpExecutorRepeatable right after GetWorkspaceSize to reuse it)")
        if type(workspace_size) is not int and (not isinstance(workspace_size, numbers.Integral)
                                                or isinstance(workspace_size, bool)) or workspace_size < 0:
            fail(INVALID, f"{op}: workspaceSize {workspace_size!r} must be a non-negative integer")
        workspace_size = int(workspace_size)
        if executor.rebinds != REBINDS[0]:   # some tensor was rebound since: was it one of this plan's?
            follow_rebinds(op, executor)
        plan = executor.plan
        if workspace_size > 0 and workspace is None:
            fail(NULLPTR, f"{op}: workspace is null but workspaceSize is {workspace_size}")
        if workspace_size < plan.workspace_size:
            fail(INVALID, f"{op}: workspaceSize {workspace_size} is smaller than the {plan.workspace_size} bytes "
                          "GetWorkspaceSize asked for")
        if plan.workspace_size > 0:
            generation = device.registry.generation  # unchanged since the last pass: nothing was freed
            if type(workspace) is not int or executor.checked_workspace != (workspace, generation):
                device.registry.check_remembered(workspace, plan.workspace_size, f"{op}: workspace",
                                                 status=INVALID, on_device=True)
                if int(workspace) % 8:   # the kernels read int64 tiling words from it: a GPU faults otherwise
                    fail(INVALID, f"{op}: workspace {hex(int(workspace))} must be 8-byte aligned "
                                  "(aclrtMalloc's memory is; an offset into it must keep that)")
                executor.checked_workspace = (workspace, generation)
        impl = resolve_stream(stream, op, status=INVALID, device=device)
        if impl.capture is not None:   # before the executor is spent or the model holds the plan (all devices)
            refuse_invalidated(op, impl.capture)
        if executor.checked_generation != device.registry.generation or any(map(DESTROYED, plan.present)):
            executor.checked_generation = check_plan_memory(op, plan, device, executor.checked_generation)
        if not executor.repeatable:
            executor.spent = True
        if plan.has_work:
            device.enqueue(impl, plan, int(workspace) if plan.workspace_size else 0)
    return aclnnStatus.ACLNN_SUCCESS


def make_execute(op: str):
    """The phase-2 function of operator `op` (e.g. `aclnnKlDivBackward`)."""

    def execute(workspace: int | None, workspaceSize: int, executor: aclOpExecutor, stream: Any) -> int:
        return run_executor(op, workspace, workspaceSize, executor, stream)

    execute.__name__ = execute.__qualname__ = op
    execute.__doc__ = f"{op}(workspace, workspaceSize, executor, stream) -> status: enqueue the planned work."
    return c_api(internal=aclnnStatus.ACLNN_ERR_INNER)(execute)


def make_get_workspace_size(plan_type: Any, build):
    """Phase 1 of the operator of `plan_type` (its `op`, e.g. `aclnnKlDiv`, and its output parameters,
    `outputs`): `build(device, *args)` validates and returns a plan (of `plan_type`, or an EmptyPlan);
    on a kernel device the plan's launcher is recorded here (`Plan.with_frozen_launch`,
    `plans/frozen.py`), then the plan is wrapped into an executor."""
    op: str = plan_type.op
    params = list(inspect.signature(build).parameters.values())[1:]   # the C parameters (build's, without the device)
    phase1 = _Phase1(build, tuple(p.name for p in params), tuple(plan_type.outputs))
    plan_of = phase1.plan_of

    def get_workspace_size(*args: Any, **kwargs: Any) -> tuple[int, int, aclOpExecutor]:
        device = get_device()
        cache = executor_cache.cache
        key = cache.key(build, device, args) if cache.limit and not kwargs else None
        if key is None:
            plan = plan_of(device, args, kwargs)
            executor = aclOpExecutor(op, plan, device)
        else:
            found = cache.lookup(key, args)
            if found is not None:   # the same arguments, proven unchanged: the checks' and the plan's result
                plan = found[0].plan
                executor = aclOpExecutor(op, plan, device)
                executor.checked_generation = found[1]   # its tensors' memory was proven at that generation
            else:
                versions = cache.versions(args)
                plan = plan_of(device, args, kwargs)
                cache.insert(key, plan, device, args, versions)
                executor = aclOpExecutor(op, plan, device)
        executor.source = (phase1, args, kwargs)
        return SUCCESS, plan.workspace_size, executor

    def uncached(*args: Any, **kwargs: Any) -> tuple[int, int, aclOpExecutor]:
        device = get_device()
        plan = plan_of(device, args, kwargs)
        executor = aclOpExecutor(op, plan, device)
        executor.source = (phase1, args, kwargs)
        return SUCCESS, plan.workspace_size, executor

    get_workspace_size.__name__ = get_workspace_size.__qualname__ = f"{op}GetWorkspaceSize"
    get_workspace_size.__doc__ = build.__doc__
    # the C parameters: what a call with the wrong arguments is told
    get_workspace_size.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    uncached.__name__ = uncached.__qualname__ = get_workspace_size.__name__
    uncached.__signature__ = get_workspace_size.__signature__  # type: ignore[attr-defined]
    # the same entry point without executor_cache (callers whose descriptors are new at every call)
    get_workspace_size.uncached = c_api(n_out=2, internal=aclnnStatus.ACLNN_ERR_INNER)(uncached)  # type: ignore
    return c_api(n_out=2, internal=aclnnStatus.ACLNN_ERR_INNER)(get_workspace_size)

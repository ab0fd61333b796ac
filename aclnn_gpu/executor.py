"""`aclOpExecutor`: the plan that phase 1 froze, and the phase-2 checks every operator shares.

Single-use by default, as in CANN: a second run of a non-repeatable executor is refused with
ACLNN_ERR_PARAM_INVALID instead of being the use-after-free it is on the NPU.
"""
from __future__ import annotations

import contextlib
import inspect
import numbers
import threading
from typing import Any

from . import executor_cache
from .errors import c_api, fail
from .graph.state import refuse_invalidated
from .kernels.occupancy import DEFAULT_ARCH
from .ops.plan import DESTROYED, check_plan_memory
from .runtime import get_device, resolve_stream
from .status import aclnnStatus

SUCCESS = aclnnStatus.ACLNN_SUCCESS
NULLPTR = aclnnStatus.ACLNN_ERR_PARAM_NULLPTR
INVALID = aclnnStatus.ACLNN_ERR_PARAM_INVALID


class aclOpExecutor:
    __slots__ = ("op", "plan", "device", "repeatable", "spent", "destroyed", "lock", "checked_workspace",
                 "checked_generation", "__weakref__")

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

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else "spent" if self.spent else "ready"
        return f"aclOpExecutor({self.op}, workspace={self.plan.workspace_size}, {state})"


def _executor(executor: Any, fn: str) -> aclOpExecutor:
    if executor is None:
        fail(aclnnStatus.ACLNN_ERR_INNER_NULLPTR, f"{fn}: executor is null")
    if not isinstance(executor, aclOpExecutor):
        fail(aclnnStatus.ACLNN_ERR_INNER, f"{fn}: {type(executor).__name__} is not an aclOpExecutor")
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


def make_get_workspace_size(op: str, build):
    """Phase 1 of `op`: `build(device, *args)` validates and returns a plan; on a kernel device the
    plan's launcher is recorded here (`Plan.with_frozen_launch`, `ops/frozen.py`), then the plan is
    wrapped into an executor."""

    def plan_of(device: Any, args: tuple, kwargs: dict) -> Any:
        plan = build(device, *args, **kwargs)
        sm_count = getattr(device, "sm_count", None)
        if sm_count is not None:  # cuda and emulated: record the launcher once, for this device
            plan = plan.with_frozen_launch(sm_count, getattr(device, "arch", DEFAULT_ARCH))
        return plan

    def get_workspace_size(*args: Any, **kwargs: Any) -> tuple[int, int, aclOpExecutor]:
        device = get_device()
        cache = executor_cache.cache
        key = cache.key(build, device, args) if cache.limit and not kwargs else None
        if key is None:
            plan = plan_of(device, args, kwargs)
            return SUCCESS, plan.workspace_size, aclOpExecutor(op, plan, device)
        found = cache.lookup(key, args)
        if found is not None:   # the same arguments, proven unchanged: the checks' and the plan's result
            plan = found[0].plan
            executor = aclOpExecutor(op, plan, device)
            executor.checked_generation = found[1]   # its tensors' memory was proven at that generation
            return SUCCESS, plan.workspace_size, executor
        versions = cache.versions(args)
        plan = plan_of(device, args, kwargs)
        cache.insert(key, plan, device, args, versions)
        return SUCCESS, plan.workspace_size, aclOpExecutor(op, plan, device)

    def uncached(*args: Any, **kwargs: Any) -> tuple[int, int, aclOpExecutor]:
        device = get_device()
        plan = plan_of(device, args, kwargs)
        return SUCCESS, plan.workspace_size, aclOpExecutor(op, plan, device)

    get_workspace_size.__name__ = get_workspace_size.__qualname__ = f"{op}GetWorkspaceSize"
    get_workspace_size.__doc__ = build.__doc__
    # the C parameters (build's, without the device): what a call with the wrong arguments is told
    params = list(inspect.signature(build).parameters.values())[1:]
    get_workspace_size.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    get_workspace_size.build = build  # type: ignore[attr-defined]  # (bench/host_overhead.py times its phases)
    uncached.__name__ = uncached.__qualname__ = get_workspace_size.__name__
    uncached.__signature__ = get_workspace_size.__signature__  # type: ignore[attr-defined]
    # the same entry point without executor_cache (callers whose descriptors are new at every call)
    get_workspace_size.uncached = c_api(n_out=2, internal=aclnnStatus.ACLNN_ERR_INNER)(uncached)  # type: ignore
    return c_api(n_out=2, internal=aclnnStatus.ACLNN_ERR_INNER)(get_workspace_size)

"""The Python side of the C ABI: runs inside the interpreter that `libascendcl.so` embeds and turns
each exported C function into a call of the Python API with the same name.

Owns: the handle table (C's opaque pointers <-> Python objects), the conversions of C arguments
(`table.Param.kind`; the irregular signatures in `custom.py`), the writing of out-parameters, the
C callers' runtime rule (a function that needs the runtime, called before aclInit / aclnnInit or
after aclFinalize, returns its library's not-initialised code: `needs_init`), the wording of
messages for C (`c_words`), and `aclGetRecentErrMsg`'s per-thread C string.

Handles are integers from a counter, never Python object addresses: a handle the table does not know
(never created, or destroyed long ago) turns into an `UnknownHandle` object, which the Python API's
own type checks refuse with their usual code (the message then says "a handle that was never
created"); a recently destroyed or spent handle turns into a dead stand-in of its class
(`destroyed` / `spent` set), so the message says what happened. Nothing a C program passes can make
this layer dereference an object that is gone.
"""
from __future__ import annotations

import collections
import gc
import itertools
import operator
import os
import threading
from typing import Any, Callable

import aclnn_gpu as acl
from aclnn_gpu import dtypes, runtime
from aclnn_gpu.errors import set_recent_error
from aclnn_gpu.executor import aclOpExecutor
from aclnn_gpu.tensor import MAX_DIMS

from .custom import CONVERSIONS, CError
from .rules import UNINITIALIZED, c_words, init_refusal, needs_init
from .table import Entry, entries

HANDLE_BASE = 0x5A0000000000       # handles look like (aligned) pointers and are never NULL
HANDLE_STEP = 16
TOMBSTONES = 1 << 14               # how many retired handles keep saying why they are dead

# The codes the C layer itself returns, by return type: a NULL out-pointer, a function the Python
# package does not have (the §8 functions until their modules land), and a bug in this layer.
NULL_OUT = {"aclError": int(acl.ACL_ERROR_RT_PARAM_INVALID), "aclnnStatus": int(acl.ACLNN_ERR_PARAM_NULLPTR),
            "HcclResult": 2}       # HCCL_E_PTR
UNSUPPORTED = {"aclError": int(acl.ACL_ERROR_FEATURE_UNSUPPORTED), "aclnnStatus": int(acl.ACLNN_ERR_RUNTIME_ERROR),
               "HcclResult": 5}    # HCCL_E_NOT_SUPPORT
INTERNAL = {"aclError": int(acl.ACL_ERROR_INTERNAL_ERROR), "aclnnStatus": int(acl.ACLNN_ERR_INNER),
            "HcclResult": 4}       # HCCL_E_INTERNAL
INVALID = int(acl.ACLNN_ERR_PARAM_INVALID)

# C names whose Python function has another name (none today; the table's escape hatch).
PYTHON_NAME: dict[str, str] = {}


class UnknownHandle:
    """What a handle the table does not know becomes: an object of no API type."""

    __slots__ = ("value",)

    def __init__(self, value: int):
        self.value = value

    def __repr__(self) -> str:
        return f"UnknownHandle({hex(self.value)})"


_stand_ins: dict[type, Any] = {}


def _dead_stand_in(obj: Any) -> Any:
    """What a retired handle remembers: for an executor its operator and state (a fresh dead executor
    is made at each use, since the Python API may mark it destroyed), for any other class one shared
    dead object (the API only refuses those); `obj` itself is released."""
    if isinstance(obj, aclOpExecutor):
        return ("executor", obj.op, obj.repeatable, obj.spent, obj.destroyed)
    cls: Any = type(obj)
    dead = _stand_ins.get(cls)
    if dead is None:
        if cls is acl.aclTensor:
            dead = acl.aclTensor((), acl.aclDataType.ACL_FLOAT, (), 0, int(acl.ACL_FORMAT_ND), (), None)
        elif cls is acl.aclIntArray:
            dead = acl.aclIntArray(())
        elif cls in (acl.aclrtStream, acl.aclrtEvent):
            dead = cls(None, None)
        else:
            try:
                dead = cls.__new__(cls)
            except TypeError:
                return obj
        try:
            dead.destroyed = True
        except AttributeError:  # a class with no `destroyed`: remember the object itself
            return obj
        _stand_ins[cls] = dead
    return dead


def _revive(remembered: Any) -> Any:
    if type(remembered) is tuple:
        _, op, repeatable, spent, destroyed = remembered
        dead = aclOpExecutor(op, None, None)
        dead.repeatable, dead.spent, dead.destroyed = repeatable, spent, destroyed
        return dead
    return remembered


class Handles:
    """Live handles -> objects, objects -> their handle, and a bounded memory of retired handles."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._live: dict[int, Any] = {}
        self._of: dict[int, int] = {}          # id(obj) -> handle (objects in _live stay alive)
        # the live handles again, keyed by a `void *` cdata of the handle (install sets `pointer`): a C
        # argument (a cdata pointer, which hashes and compares by address) finds its object without a cast
        self.by_pointer: dict[Any, Any] = {}
        self.pointer: Callable[[int], Any] | None = None
        self._dead: collections.OrderedDict[int, Any] = collections.OrderedDict()

    def new(self, obj: Any) -> int:
        if obj is None:
            return 0
        with self._lock:
            handle = self._of.get(id(obj))
            if handle is None:
                handle = HANDLE_BASE + HANDLE_STEP * next(self._counter)
                self._live[handle] = obj
                self._of[id(obj)] = handle
                if self.pointer is not None:
                    self.by_pointer[self.pointer(handle)] = obj
            return handle

    def get(self, handle: int) -> Any:
        if handle == 0:
            return None
        obj = self._live.get(handle)
        if obj is None:
            remembered = self._dead.get(handle)
            return UnknownHandle(handle) if remembered is None else _revive(remembered)
        return obj

    def retire(self, handle: int, obj: Any) -> None:
        """`handle` (whose object, or revived stand-in, is `obj`) is destroyed or spent."""
        with self._lock:
            if self._live.pop(handle, None) is not None:
                del self._of[id(obj)]
                if self.pointer is not None:
                    self.by_pointer.pop(self.pointer(handle), None)
            elif handle not in self._dead:
                return
            self._dead[handle] = _dead_stand_in(obj)   # (a stand-in's new state too: spent, then destroyed)
            while len(self._dead) > TOMBSTONES:
                self._dead.popitem(last=False)

    def counts(self) -> tuple[int, int]:
        """(live handles, remembered retired handles): for the leak tests."""
        return len(self._live), len(self._dead)


handles = Handles()


def _reinit_lock_in_child() -> None:
    """A fork() child: a thread of the parent may have held the handle table's lock at fork time."""
    handles._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_lock_in_child)


def _address(ffi: Any, pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def _input(ffi: Any, entry: Entry, index: int, counts: dict[str, int]) -> Callable[[tuple], Any]:
    """The converter of C argument `index` of `entry` to its Python value."""
    p, NULL = entry.params[index], ffi.NULL
    if p.kind == "handle":
        # a live handle in one dict look-up of the C argument itself (the common case); NULL, retired and
        # unknown ones through Handles.get
        by_pointer, get = handles.by_pointer, handles.get

        def handle(a: tuple) -> Any:
            obj = by_pointer.get(a[index])
            return obj if obj is not None else get(_address(ffi, a[index]))
        return handle
    if p.kind == "handle_array":
        length = counts[p.name]
        get_handle = handles.get

        def handle_array(a: tuple) -> Any:
            if a[index] == NULL:
                return None
            return [None if a[index][i] == NULL else get_handle(_address(ffi, a[index][i])) for i in range(a[length])]
        return handle_array
    if p.kind == "addr":
        return lambda a: None if a[index] == NULL else _address(ffi, a[index])
    if p.kind == "str":
        return lambda a: None if a[index] == NULL else ffi.string(a[index]).decode("utf-8", "surrogateescape")
    if p.kind == "root_in":
        size = ffi.sizeof("HcclRootInfo")
        return lambda a: None if a[index] == NULL else bytes(ffi.buffer(a[index], size))
    if p.kind == "array":
        length = counts[p.name]
        dims = entry.name == "aclCreateTensor"

        def array(a: tuple) -> Any:
            n = a[length]
            if dims and n > MAX_DIMS:
                raise CError(INVALID, f"{entry.name}: {entry.params[length].name} {n} exceeds {MAX_DIMS} dims")
            if a[index] == NULL:
                if n and p.name in ("viewDims", "storageDims"):
                    raise CError(INVALID, f"{entry.name}: {p.name} is null but {entry.params[length].name} is {n}")
                return None
            return ffi.unpack(a[index], n)

        return array
    return lambda a: a[index]


def _writer(ffi: Any, p: Any) -> Callable[[Any, Any], None]:
    """How the value Python returned for out-parameter `p` is stored through its pointer."""
    if p.kind == "out_handle":
        target, cast, new = ffi.typeof(p.ctype).item, ffi.cast, handles.new

        def out_handle(ptr: Any, obj: Any) -> None:
            ptr[0] = cast(target, new(obj))
        return out_handle
    if p.kind == "out_addr":
        return lambda ptr, addr: ptr.__setitem__(0, ffi.cast("void *", addr or 0))
    if p.kind == "out_root":
        return lambda ptr, data: ffi.memmove(ptr, data, min(len(data), ffi.sizeof("HcclRootInfo")))

    def out_value(ptr: Any, value: Any) -> None:
        ptr[0] = value
    return out_value


def _memcpy_host_sides(ffi: Any, args: list) -> list:
    """aclrtMemcpy(Async)(dst, destMax, src, count, kind[, stream]): a C host pointer that is not an
    allocation of this library (a std::vector's data()) is the caller's memory: it is handed to the
    Python API as a buffer of `count` bytes, as a Python caller hands a NumPy array."""
    dst, _, src, count, kind = args[:5]
    host = {0: (True, True), 1: (False, True), 2: (True, False), 4: (True, True), 5: (False, True)}.get(
        kind, (False, False))
    try:
        registry = acl.runtime.get_device().registry
    except Exception:  # noqa: BLE001 - no device: the Python API reports it with its own code
        return args
    for position, is_host in ((0, host[0]), (2, host[1])):
        addr = args[position]
        if is_host and addr is not None and count > 0 and registry.find(addr, 0) is None:
            args[position] = ffi.buffer(ffi.cast("char *", addr), count)
    return args


def _scalar_value(ffi: Any, args: list) -> list:
    """aclCreateScalar(value, dataType): the value is read from host memory as `dataType`."""
    addr, dtype = args
    if addr is not None and dtypes.has_numpy(dtype):
        import numpy as np
        args[0] = np.frombuffer(ffi.buffer(ffi.cast("char *", addr), dtypes.itemsize(dtype)),
                                dtypes.to_numpy(dtype))[0].item()
    return args


def _memcpy2d_host_sides(ffi: Any, args: list) -> list:
    """aclrtMemcpy2d(Async)(dst, dpitch, src, spitch, width, height, kind[, stream]): a host side that is
    not an allocation of this library is the caller's memory, a buffer of the bytes its rows reach."""
    dst, dpitch, src, spitch, width, height, kind = args[:7]
    host = {0: (True, True), 1: (False, True), 2: (True, False), 4: (True, True), 5: (False, True)}.get(
        kind, (False, False))
    try:
        registry = acl.runtime.get_device().registry
    except Exception:  # noqa: BLE001 - no device: the Python API reports it with its own code
        return args
    for position, is_host, pitch in ((0, host[0], dpitch), (2, host[1], spitch)):
        addr = args[position]
        reach = pitch * (height - 1) + width if height else 0
        if is_host and addr is not None and reach > 0 and registry.find(addr, 0) is None:
            args[position] = ffi.buffer(ffi.cast("char *", addr), reach)
    return args


ADAPTERS: dict[str, Callable[[Any, list], list]] = {
    "aclrtMemcpy": _memcpy_host_sides, "aclrtMemcpyAsync": _memcpy_host_sides, "aclCreateScalar": _scalar_value,
    "aclrtMemcpy2d": _memcpy2d_host_sides, "aclrtMemcpy2dAsync": _memcpy2d_host_sides,
}


def make_wrapper(ffi: Any, entry: Entry, target: Callable | None) -> Callable:
    """The function cffi runs for C function `entry` (a closure over precomputed converters)."""
    name, restype, returns = entry.name, entry.restype, entry.returns
    status_type = restype if restype in NULL_OUT else "aclError"
    positions = {p.name: i for i, p in enumerate(entry.params)}
    counts = {p.name: positions[_length_name(entry, p.name)] for p in entry.params
              if p.kind in ("array", "handle_array")}
    inputs = [_input(ffi, entry, i, counts) for i, p in enumerate(entry.params)
              if not p.kind.startswith("out_") and p.kind != "count"]
    # the Python arguments: the C values as they are, then the few that need a conversion converted
    passed = [i for i, p in enumerate(entry.params) if not p.kind.startswith("out_") and p.kind != "count"]
    pick = operator.itemgetter(*passed) if len(passed) > 1 else None
    converted = [(k, inputs[k]) for k, i in enumerate(passed) if entry.params[i].kind != "value"]
    outs = [(i, p, _writer(ffi, p)) for i, p in enumerate(entry.params) if p.kind.startswith("out_")]
    handle_args = [i for i, p in enumerate(entry.params) if p.kind == "handle"]
    destroys = "Destroy" in name and bool(handle_args)
    # the handles a successful call may have retired: every one of a Destroy function, else the
    # executors (an execute spends a single-use one); no other call destroys what it is given
    retirable = handle_args if destroys else [i for i in handle_args if entry.params[i].base == "aclOpExecutor"]
    adapter = ADAPTERS.get(name)
    conversion = CONVERSIONS.get(name)
    guarded = needs_init(name)
    NULL = ffi.NULL

    def failed(status: int, message: str) -> Any:
        set_recent_error(c_words(message), status or None)
        return NULL if returns == "handle" else 0 if returns == "value" else status

    if returns == "value" and target is not None:
        def value(*cargs: Any) -> Any:
            try:
                return target(*[convert(cargs) for convert in inputs])
            except Exception as e:  # noqa: BLE001 - a bug of this layer: reported, never raised into C
                return failed(0, f"{name}: internal error in the C ABI: {type(e).__name__}: {e}")
        value.__name__ = name
        return value

    if target is None:
        def unsupported(*cargs: Any) -> Any:
            return failed(UNSUPPORTED[status_type], f"{name}: not available: this aclnn_gpu has no Python "
                                                    f"function {PYTHON_NAME.get(name, name)} (feature unsupported)")
        return unsupported

    def call(*cargs: Any) -> Any:
        try:
            if guarded and not (runtime._state.initialized or runtime._state.aclnn_initialized):
                refusal = init_refusal(name)
                if refusal is not None:
                    return failed(UNINITIALIZED[status_type], refusal)
            if conversion is not None:
                args, write_back = conversion(ffi, cargs, access)
                result = target(*args)
                if returns == "handle":
                    return NULL if result is None else ffi.cast(restype, handles.new(result))
                status = int(result[0] if isinstance(result, tuple) else result)
                if status == 0 and isinstance(result, tuple):
                    write_back(result[1:])
                elif status != 0:
                    set_recent_error(c_words(acl.aclGetRecentErrMsg()))
                return status
            for i, p, _ in outs:
                if cargs[i] == NULL:
                    return failed(NULL_OUT[status_type], f"{name}: {p.name} is null (out-parameter)")
            if pick is not None:
                args = list(pick(cargs))
                for k, convert in converted:
                    args[k] = convert(cargs)
            else:
                args = [convert(cargs) for convert in inputs]
            if adapter is not None:
                args = adapter(ffi, args)
            result = target(*args)
            if returns == "handle":
                if result is None:
                    set_recent_error(c_words(acl.aclGetRecentErrMsg()))
                    return NULL
                return ffi.cast(restype, handles.new(result))
            status = int(result[0] if outs else result)
            if status != 0:
                set_recent_error(c_words(acl.aclGetRecentErrMsg()))
            else:
                if outs:
                    for (i, _, write), value in zip(outs, result[1:]):
                        write(cargs[i], value)
                for i in retirable:
                    obj = args[inputs_index[i]]
                    # (only an executor is ever spent: a getattr that misses would raise and catch inside)
                    if destroys or getattr(obj, "destroyed", False) or (type(obj) is aclOpExecutor and obj.spent):
                        handles.retire(_address(ffi, cargs[i]), obj)
            return status
        except CError as e:
            return failed(e.status, e.message)
        except Exception as e:  # noqa: BLE001 - a bug of this layer: reported, never raised into C
            return failed(INTERNAL[status_type], f"{name}: internal error in the C ABI: {type(e).__name__}: {e}")

    # position of each C argument among the Python arguments (outs and counts are left out)
    python_args = [i for i, p in enumerate(entry.params) if not p.kind.startswith("out_") and p.kind != "count"]
    inputs_index = {c: k for k, c in enumerate(python_args)}
    call.__name__ = name
    return call


def _length_name(entry: Entry, array: str) -> str:
    from .table import ARRAY_LENGTH
    return ARRAY_LENGTH.get(array, array + "Num")


class _Access:
    """What custom.py's conversions use: handle -> object (a C pointer), and object -> new handle."""

    def __init__(self, ffi: Any):
        self.ffi = ffi

    def __call__(self, pointer: Any) -> Any:
        obj = handles.by_pointer.get(pointer)
        return obj if obj is not None else handles.get(_address(self.ffi, pointer))

    def new(self, obj: Any) -> int:
        return handles.new(obj)


access: Any = None   # set by install


def _static_string(ffi: Any, entry: Entry, target: Callable | None) -> Callable:
    """A const char * answer (aclrtGetSocName, HcclGetErrorString): each distinct string is kept for
    the life of the process, as a C caller expects of such a pointer (there are few of them)."""
    kept: dict[str, Any] = {}
    convert = [_input(ffi, entry, i, {}) for i in range(len(entry.params))]

    def string(*cargs: Any) -> Any:
        try:
            text = "" if target is None else str(target(*[c(cargs) for c in convert]))
        except Exception:   # noqa: BLE001 - a bug of this layer: an empty string, never an exception into C
            text = ""
        data = kept.get(text)
        if data is None:
            data = kept[text] = ffi.new("char[]", text.encode("utf-8", "replace"))
        return data
    string.__name__ = entry.name
    return string


_recent = threading.local()


def _recent_message(ffi: Any) -> Callable:
    def aclGetRecentErrMsg() -> Any:
        # the C string lives in a per-thread slot until the next call on this thread replaces it
        _recent.buffer = ffi.new("char[]", acl.aclGetRecentErrMsg().encode("utf-8", "replace"))
        return _recent.buffer
    return aclGetRecentErrMsg


def python_function(entry: Entry) -> Callable | None:
    return getattr(acl, PYTHON_NAME.get(entry.name, entry.name), None)


def at_exit() -> None:
    """The C program's exit(): stop the streams before the libraries' exit handlers run
    (device/current.py `at_exit`). Never raises into C."""
    try:
        from aclnn_gpu.device.current import at_exit as stop
        stop()
    except BaseException:   # noqa: BLE001 - at exit there is nobody to report to
        pass


def install(ffi: Any) -> None:
    """Attach a Python implementation to every `extern "Python"` function of the built library."""
    void_p = ffi.typeof("void *")
    with handles._lock:
        handles.pointer = lambda handle: ffi.cast(void_p, handle)
        handles.by_pointer.update((handles.pointer(h), obj) for h, obj in handles._live.items())
    global access
    access = _Access(ffi)
    for entry in entries():
        if entry.name == "aclGetRecentErrMsg":
            wrapper = _recent_message(ffi)
        elif entry.returns == "string":
            wrapper = _static_string(ffi, entry, python_function(entry))
        else:
            wrapper = make_wrapper(ffi, entry, python_function(entry))
        ffi.def_extern(name=f"_py_{entry.name}")(wrapper)
    ffi.def_extern(name="_py_aclnn_gpu_at_exit")(at_exit)
    # what the first call imported (the library, NumPy) lives as long as the process: out of the cyclic
    # collector's way, so its collections (many small objects per call) no longer walk it
    gc.freeze()

"""The Python side of the C ABI: runs inside the interpreter that `libascendcl.so` embeds and turns
each exported C function into a call of the Python API with the same name.

Owns: the Python side of each call (`wrapper_source`: one function written out per C function, over
the arguments the generated C marshalled; `generic_wrapper` for a declaration the C does not
marshal, running the irregular signatures' conversions of `custom.py`), the writing of
out-parameters, the C callers' runtime rule (a function that needs the runtime, called before
aclInit / aclnnInit or after aclFinalize, returns its library's not-initialised code:
`needs_init`, with the wording of messages for C, `c_words`, in `rules.py`), `aclGetRecentErrMsg`'s
per-thread C string, and `install` (every `extern "Python"` function of the built library).

The handle table (C's opaque pointers <-> Python objects, and what a forged or retired handle
becomes) is `handles.py`; the conversions of arrays and of the caller's host memory are
`adapters.py`.
"""
from __future__ import annotations

import gc
import threading
from typing import Any, Callable

import aclnn_gpu as acl
from aclnn_gpu import runtime
from aclnn_gpu.base.errors import set_recent_error
from aclnn_gpu.executor import aclOpExecutor

from .adapters import ADAPTERS, INVALID, MAX_ARRAY_ITEMS, int_array
from .build import marshalled
from .custom import CONVERSIONS, CError
from .rules import UNINITIALIZED, c_words, init_refusal, needs_init
from .handles import HANDLE_SHIFT, TOMBSTONES, handles, key_of
from .table import Entry, entries

# The codes the C layer itself returns, by return type: a NULL out-pointer, a function the Python
# package does not have (the §8 functions until their modules land), and a bug in this layer.
NULL_OUT = {"aclError": int(acl.ACL_ERROR_RT_PARAM_INVALID), "aclnnStatus": int(acl.ACLNN_ERR_PARAM_NULLPTR),
            "HcclResult": 2}       # HCCL_E_PTR
UNSUPPORTED = {"aclError": int(acl.ACL_ERROR_FEATURE_UNSUPPORTED), "aclnnStatus": int(acl.ACLNN_ERR_RUNTIME_ERROR),
               "HcclResult": 5}    # HCCL_E_NOT_SUPPORT
INTERNAL = {"aclError": int(acl.ACL_ERROR_INTERNAL_ERROR), "aclnnStatus": int(acl.ACLNN_ERR_INNER),
            "HcclResult": 4}       # HCCL_E_INTERNAL

# C names whose Python function has another name (none today; the table's escape hatch).
PYTHON_NAME: dict[str, str] = {}


def fail(status: int, message: str) -> int:
    """The C layer's own refusals (a NULL out-parameter, checked in C): the message, then the code."""
    set_recent_error(c_words(message), status)
    return status


def wrapper_source(entry: Entry) -> str:
    """The Python source of the function cffi runs for C function `entry`, written out for this entry
    alone: straight-line code, no loops over parameter descriptions, the Python function called with
    positional arguments. C arguments arrive marshalled by the generated C (build.py): handles and
    addresses as integers, out-handles and out-addresses as `uintptr_t *`, NULL out-parameters already
    refused; the C names are renamed c0, c1, ... (a C parameter may be called `self` or `target`)."""
    name, params = entry.name, entry.params
    position = {p.name: i for i, p in enumerate(params)}
    lines: list[str] = []
    args: list[str] = []
    writes: list[str] = []
    retires: list[str] = []
    destroys = "Destroy" in name and any(p.kind == "handle" for p in params)
    spends: list[str] = []
    for i, p in enumerate(params):
        c, a = f"c{i}", f"a{i}"
        if p.kind == "handle":
            # a live handle in one dict subscript of its key; NULL (0), retired and unknown ones through get_key
            lines += ["try:", f"    {a} = _live[{c}]", "except KeyError:", f"    {a} = _get({c})"]
            if destroys:
                retires.append(f"_retire({c}, {a})")
                if p.base in ("aclTensorList", "aclScalarList"):   # its members were destroyed with it
                    retires.append(f"if {a} is not None:\n    for _m in {a}.values:\n        _retire_object(_m)")
            elif p.base == "aclOpExecutor":
                # an execute spends a single-use executor: Handles._remember written out (no call in a
                # call), without the lock: only the thread whose pop finds the executor records it
                # (whether the call succeeded or not: an execute that failed after spending it, in its
                # enqueue, must not leave its handle live)
                spends.append(f"if type({a}) is _Executor and {a}.spent and _live_pop({c}, None) is not None:\n"
                              f"    _p = {c} % _TOMBSTONES\n    _dead_key[_p] = {c}\n    _dead_record[_p] = {a}.op")
        elif p.kind == "addr":
            lines.append(f"{a} = {c} or None")
        elif p.kind == "str":
            lines.append(f"{a} = None if {c} == _NULL else _string({c}).decode('utf-8', 'surrogateescape')")
        elif p.kind == "root_in":
            lines.append(f"{a} = None if {c} == _NULL else bytes(_buffer({c}, _ROOT_SIZE))")
        elif p.kind == "array":
            lines.append(f"{a} = _array{i}({c}, c{position[_length_name(entry, p.name)]})")
        elif p.kind == "out_handle" and p.base == "aclOpExecutor":
            # a GetWorkspaceSize's executor is always a new object: a new key, no reverse entry (nothing
            # asks `new` about it again), no lock (the counter's step and the insertion are atomic)
            writes.append(f"e = r[{len(writes) + 1}]\nif e is None:\n    {c}[0] = 0\nelse:\n"
                          f"    k = _next_key()\n    _live[k] = e\n    {c}[0] = k << {HANDLE_SHIFT}")
            continue
        elif p.kind == "out_handle":
            writes.append(f"{c}[0] = _new(r[{len(writes) + 1}])")
            continue
        elif p.kind == "out_addr":
            writes.append(f"{c}[0] = r[{len(writes) + 1}] or 0")
            continue
        elif p.kind == "out_root":
            writes.append(f"_memmove({c}, r[{len(writes) + 1}], min(len(r[{len(writes) + 1}]), _ROOT_SIZE))")
            continue
        elif p.kind.startswith("out_"):
            writes.append(f"{c}[0] = r[{len(writes) + 1}]")
            continue
        elif p.kind == "count":   # an array's length: passed with its array
            continue
        else:
            a = c
        args.append(a)
    call = (f"r = _target(*_adapter(_ffi, [{', '.join(args)}]))" if name in ADAPTERS
            else f"r = _target({', '.join(args)})")
    body = []
    if needs_init(name):   # the C callers' runtime rule (a C call that needs the runtime, before aclInit)
        body += ["if not (_runtime.acl_state.initialized or _runtime.acl_state.aclnn_initialized):",
                 f"    m = _init_refusal({name!r})", "    if m is not None:",
                 "        _set_recent_error(_c_words(m), _UNINITIALIZED)",
                 f"        return {'0' if entry.returns == 'handle' else '_UNINITIALIZED'}"]
    body += [*lines, call]
    if entry.returns == "handle":
        body += ["if r is None:", "    _set_recent_error(_c_words(_recent()))", "    return 0", "return _new(r)"]
    else:
        body.append("s = r[0]" if writes else "s = r")
        after = writes + retires
        body.append("if s != 0:")   # the Python API's message in C's words
        body.append("    _set_recent_error(_c_words(_recent()))")
        if after:
            body.append("else:")
            body += [f"    {line}" for w in after for line in w.splitlines()]
        body += [line for w in spends for line in w.splitlines()]
        body.append("return s")
    c_params = ", ".join(f"c{i}" for i in range(len(params)))
    text = [f"def {name}({c_params}):", "    try:"]
    text += [f"        {line}" for line in "\n".join(body).splitlines()]
    text += ["    except _CError as e:", "        _set_recent_error(_c_words(e.message), e.status)",
             f"        return {'0' if entry.returns == 'handle' else 'e.status'}",
             "    except Exception as e:  # a bug of this layer: reported, never raised into C",
             f"        _set_recent_error(_c_words(f'{name}: internal error in the C ABI: {{type(e).__name__}}: {{e}}'),"
             " _INTERNAL)",
             f"        return {'0' if entry.returns == 'handle' else '_INTERNAL'}"]
    return "\n".join(text) + "\n"


def _address(ffi: Any, pointer: Any) -> int:
    return int(ffi.cast("uintptr_t", pointer))


def _generic_input(ffi: Any, entry: Entry, index: int, position: dict[str, int]) -> Callable[[tuple], Any]:
    """The converter of C argument `index` (as declared) of an entry the C does not marshal."""
    p, NULL = entry.params[index], ffi.NULL
    if p.kind == "handle":
        return lambda a: handles.get(_address(ffi, a[index]))
    if p.kind == "handle_array":
        at = position[_length_name(entry, p.name)]

        def handle_array(a: tuple) -> Any:
            if a[index] == NULL:
                return None
            if a[at] > MAX_ARRAY_ITEMS:
                raise CError(INVALID, f"{entry.name}: {p.name} of {a[at]} handles exceeds {MAX_ARRAY_ITEMS}, the most "
                                      "the C ABI reads from an array")
            return [None if a[index][i] == NULL else handles.get(_address(ffi, a[index][i])) for i in range(a[at])]
        return handle_array
    if p.kind == "addr":
        return lambda a: None if a[index] == NULL else _address(ffi, a[index])
    if p.kind == "str":
        return lambda a: None if a[index] == NULL else ffi.string(a[index]).decode("utf-8", "surrogateescape")
    if p.kind == "root_in":
        size = ffi.sizeof("HcclRootInfo")
        return lambda a: None if a[index] == NULL else bytes(ffi.buffer(a[index], size))
    if p.kind == "array":
        length = _length_name(entry, p.name)
        convert, at = int_array(ffi, entry, p, length), position[length]
        return lambda a: convert(a[index], a[at])
    return lambda a: a[index]


def _generic_writer(ffi: Any, p: Any) -> Callable[[Any, Any], None]:
    """How the value Python returned for out-parameter `p` (as declared) is stored through its pointer."""
    if p.kind == "out_handle":
        target, cast, new = ffi.typeof(p.ctype).item, ffi.cast, handles.new
        return lambda ptr, obj: ptr.__setitem__(0, cast(target, new(obj)))
    if p.kind == "out_addr":
        return lambda ptr, addr: ptr.__setitem__(0, ffi.cast("void *", addr or 0))
    if p.kind == "out_root":
        return lambda ptr, data: ffi.memmove(ptr, data, min(len(data), ffi.sizeof("HcclRootInfo")))
    return lambda ptr, value: ptr.__setitem__(0, value)


def generic_wrapper(ffi: Any, entry: Entry, target: Callable) -> Callable:
    """The function cffi runs for an entry the C does not marshal (`build.marshalled`: a custom
    conversion of `custom.py`, or a parameter or return kind `wrapper_source` does not know): its
    arguments arrive as declared, NULL out-parameters are refused here, one converter per parameter;
    slower than a written-out wrapper, and general."""
    name, restype, returns = entry.name, entry.restype, entry.returns
    status_type = restype if restype in NULL_OUT else "aclError"
    position = {p.name: i for i, p in enumerate(entry.params)}
    passed = [i for i, p in enumerate(entry.params) if not p.kind.startswith("out_") and p.kind != "count"]
    inputs = [_generic_input(ffi, entry, i, position) for i in passed]
    outs = [(i, p, _generic_writer(ffi, p)) for i, p in enumerate(entry.params) if p.kind.startswith("out_")]
    handle_args = [(i, k) for k, i in enumerate(passed) if entry.params[i].kind == "handle"]
    destroys = "Destroy" in name and bool(handle_args)
    adapter, conversion, guarded, NULL = ADAPTERS.get(name), CONVERSIONS.get(name), needs_init(name), ffi.NULL

    def failed(status: int, message: str) -> Any:
        set_recent_error(c_words(message), status or None)
        return NULL if returns == "handle" else 0 if returns == "value" else status

    if returns == "value":
        def value(*cargs: Any) -> Any:
            try:
                return target(*[convert(cargs) for convert in inputs])
            except Exception as e:  # noqa: BLE001 - a bug of this layer: reported, never raised into C
                return failed(0, f"{name}: internal error in the C ABI: {type(e).__name__}: {e}")
        value.__name__ = name
        return value

    def call(*cargs: Any) -> Any:
        try:
            if guarded and not (runtime.acl_state.initialized or runtime.acl_state.aclnn_initialized):
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
                return status
            if outs:
                for (i, _, write), value in zip(outs, result[1:]):
                    write(cargs[i], value)
            for i, k in handle_args:
                obj = args[k]
                if destroys or (type(obj) is aclOpExecutor and (obj.spent or obj.destroyed)):
                    handles.retire(key_of(_address(ffi, cargs[i])), obj)
            return status
        except CError as e:
            return failed(e.status, e.message)
        except Exception as e:  # noqa: BLE001 - a bug of this layer: reported, never raised into C
            return failed(INTERNAL[status_type], f"{name}: internal error in the C ABI: {type(e).__name__}: {e}")

    call.__name__ = name
    return call


def make_wrapper(ffi: Any, entry: Entry, target: Callable | None) -> Callable:
    """The function cffi runs for C function `entry`: `wrapper_source(entry)` compiled over its names,
    or `generic_wrapper` for an entry the C does not marshal."""
    name, restype = entry.name, entry.restype
    status_type = restype if restype in NULL_OUT else "aclError"
    if target is None:
        def unsupported(*cargs: Any) -> Any:
            set_recent_error(f"{name}: not available: this aclnn_gpu has no Python function "
                             f"{PYTHON_NAME.get(name, name)} (feature unsupported)", UNSUPPORTED[status_type])
            if entry.returns == "handle":
                return 0 if marshalled(entry) else ffi.NULL
            return 0 if entry.returns == "value" else UNSUPPORTED[status_type]
        return unsupported
    if not marshalled(entry):
        return generic_wrapper(ffi, entry, target)
    scope: dict[str, Any] = {
        "_target": target, "_live": handles._live, "_live_pop": handles._live.pop, "_get": handles.get_key,
        "_new": handles.new, "_next_key": handles._counter.__next__, "_dead_key": handles._dead_key,
        "_dead_record": handles._dead_record, "_TOMBSTONES": TOMBSTONES,
        "_retire": handles.retire, "_retire_object": handles.retire_object,
        "_Executor": aclOpExecutor, "_NULL": ffi.NULL, "_string": ffi.string,
        "_buffer": ffi.buffer, "_memmove": ffi.memmove, "_ROOT_SIZE": ffi.sizeof("HcclRootInfo"), "_ffi": ffi,
        "_adapter": ADAPTERS.get(name), "_CError": CError, "_set_recent_error": set_recent_error, "_c_words": c_words,
        "_recent": acl.aclGetRecentErrMsg, "_runtime": runtime, "_init_refusal": init_refusal,
        "_UNINITIALIZED": UNINITIALIZED[status_type],
        "_INTERNAL": INTERNAL[status_type]}
    for i, p in enumerate(entry.params):
        if p.kind == "array":
            scope[f"_array{i}"] = int_array(ffi, entry, p, _length_name(entry, p.name))
    exec(compile(wrapper_source(entry), f"<C ABI {name}>", "exec"), scope)   # noqa: S102 - our own generated code
    return scope[name]


def _length_name(entry: Entry, array: str) -> str:
    from .table import ARRAY_LENGTH
    return ARRAY_LENGTH.get(array, array + "Num")


class _Access:
    """What custom.py's conversions use: handle -> object (a C pointer), and object -> new handle."""

    def __init__(self, ffi: Any):
        self.ffi = ffi

    def __call__(self, pointer: Any) -> Any:
        return handles.get(_address(self.ffi, pointer))

    def new(self, obj: Any) -> int:
        return handles.new(obj)


access: Any = None   # set by install


def _static_string(ffi: Any, entry: Entry, target: Callable | None) -> Callable:
    """A const char * answer (aclrtGetSocName, HcclGetErrorString): each distinct string is kept for
    the life of the process, as a C caller expects of such a pointer (there are few of them)."""
    kept: dict[str, Any] = {}
    convert = [_generic_input(ffi, entry, i, {}) for i in range(len(entry.params))]

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
    ffi.def_extern(name="_py_aclnn_gpu_fail")(lambda status, message: fail(
        status, ffi.string(message).decode("utf-8", "replace")))
    # what the first call imported (the library, NumPy) lives as long as the process: out of the cyclic
    # collector's way, so its collections (many small objects per call) no longer walk it
    gc.freeze()

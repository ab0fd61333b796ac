"""The C functions whose parameters the generic conversions of `bridge.py` cannot express, each
with a hand-written conversion to its Python function: out-arrays the caller frees
(aclGetViewShape, ...), HCCL's structs (HcclCommConfig, HcclSendRecvItem), its per-rank count
arrays (the V collectives), a comm passed by pointer (HcclCreateSubCommConfig), an array of comms
written back (HcclCommInitAll) and a caller's name buffer (HcclGetCommName).

Each entry of `CONVERSIONS` takes (ffi, C arguments) and returns the Python arguments, plus a
function that writes the Python results (after the status) through the C out-parameters; it
raises `CError` for what C alone can tell is wrong (a null pointer). `bridge.make_wrapper` runs it
in place of the generic conversions, under the same error handling.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable

from ..base.status import aclError, aclnnStatus


class CError(Exception):
    """A failure the C layer detects before Python sees the call (a NULL out-pointer, a NULL array)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message

Writer = Callable[[tuple], None]
Conversion = Callable[[Any, tuple, Any], tuple[list, Writer]]

NULLPTR = aclnnStatus.ACLNN_ERR_PARAM_NULLPTR
HCCL_E_PTR = 2   # HcclResult.HCCL_E_PTR (hccl/types.py, not imported here: the hccl package loads its engines)
# (aclrtPointerGetAttributes' null out-pointer answers ACL_ERROR_RT_PARAM_INVALID, as bridge.NULL_OUT)
_new_array: Any = None


def new_array(nbytes: int) -> int:
    """`new (std::nothrow) char[nbytes]`: memory that `delete[]` releases, as CANN's aclGetViewShape
    allocates its array (`new int64_t[n]`, a trivial type: no array cookie). The operator is looked up
    in the process's global scope, so a program built with AddressSanitizer gets ASan's own operator,
    which its `delete[]` matches; libstdc++ is loaded globally first when the program is plain C. 0
    when the memory cannot be had."""
    global _new_array
    if _new_array is None:
        name = "_ZnamRKSt9nothrow_t"   # operator new[](std::size_t, const std::nothrow_t&)
        try:
            function = getattr(ctypes.CDLL(None), name)
        except AttributeError:
            ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
            function = getattr(ctypes.CDLL(None), name)
        function.restype = ctypes.c_void_p
        function.argtypes = [ctypes.c_size_t, ctypes.c_void_p]
        _new_array = function
    tag = ctypes.c_char(0)   # std::nothrow: an empty tag object; only its type matters
    return _new_array(nbytes, ctypes.byref(tag)) or 0


def _out_array(name: str) -> Conversion:
    """aclGetViewShape / aclGetStorageShape / aclGetViewStrides(tensor, int64_t **values, uint64_t *num):
    *values is a new[] array, as CANN's (`delete[]` in C++; `free()` in C, since libstdc++'s operator
    new[] takes its memory from malloc: a program under ASan's alloc/dealloc check must be C++)."""
    def convert(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
        tensor, values, num = cargs
        for ptr, what in ((values, "the array pointer"), (num, "the count pointer")):
            if ptr == ffi.NULL:
                raise CError(NULLPTR, f"{name}: {what} is nullptr (out-parameter)")

        def write(results: tuple) -> None:
            items = list(results[0])
            address = new_array(max(1, len(items)) * 8)
            if not address:
                raise MemoryError(f"{name}: cannot allocate {len(items)} int64 values")
            array = ffi.cast("int64_t *", address)
            for i, v in enumerate(items):
                array[i] = v
            values[0] = array
            num[0] = len(items)
        return [handle_of(tensor)], write
    return convert


def _config(ffi: Any, ptr: Any) -> Any:
    """A C HcclCommConfig as the Python dataclass (None for a null pointer)."""
    if ptr == ffi.NULL:
        return None
    from aclnn_gpu.hccl.types import HcclCommConfig
    return HcclCommConfig(int(ptr.hcclBufferSize), int(ptr.hcclDeterministic),
                          ffi.string(ptr.hcclCommName, 128).decode("utf-8", "replace"),
                          ffi.string(ptr.hcclUdi, 128).decode("utf-8", "replace"), int(ptr.hcclOpExpansionMode),
                          int(ptr.hcclRdmaTrafficClass), int(ptr.hcclRdmaServiceLevel))


def _root(ffi: Any, ptr: Any) -> Any:
    return None if ptr == ffi.NULL else bytes(ffi.buffer(ptr, ffi.sizeof("HcclRootInfo")))


def _out_comm(fn: str, ffi: Any, ptr: Any, new: Any) -> Writer:
    if ptr == ffi.NULL:
        raise CError(HCCL_E_PTR, f"{fn}: the comm pointer is nullptr (out-parameter)")

    def write(results: tuple) -> None:
        ptr[0] = ffi.cast("HcclComm", new(results[0]))
    return write


def _init_root_info_config(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    n, root, rank, config, comm = cargs
    write = _out_comm("HcclCommInitRootInfoConfig", ffi, comm, handle_of.new)
    return [n, _root(ffi, root), rank, _config(ffi, config)], write


def _init_cluster_info_config(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    info, rank, config, comm = cargs
    write = _out_comm("HcclCommInitClusterInfoConfig", ffi, comm, handle_of.new)
    path = None if info == ffi.NULL else ffi.string(info).decode("utf-8", "surrogateescape")
    return [path, rank, _config(ffi, config)], write


def _sub_comm(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    comm_ptr, n, ids, sub_id, sub_rank, config, sub = cargs
    fn = "HcclCreateSubCommConfig"
    if comm_ptr == ffi.NULL:
        raise CError(HCCL_E_PTR, f"{fn}: comm is nullptr")
    write = _out_comm(fn, ffi, sub, handle_of.new)
    rank_ids = None if ids == ffi.NULL else ffi.unpack(ids, n)
    parent = handle_of(ffi.cast("void *", comm_ptr[0]))
    return [parent, n, rank_ids, sub_id, sub_rank, _config(ffi, config)], write


def _init_all(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    n, devices, comms = cargs
    fn = "HcclCommInitAll"
    if comms == ffi.NULL:
        raise CError(HCCL_E_PTR, f"{fn}: comms is nullptr (out-parameter, ndev entries)")
    ids = None if devices == ffi.NULL else ffi.unpack(devices, n)

    def write(results: tuple) -> None:
        for i, comm in enumerate(results[0]):
            comms[i] = ffi.cast("HcclComm", handle_of.new(comm))
    return [n, ids], write


def _comm_name(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    comm, name = cargs
    if name == ffi.NULL:
        raise CError(HCCL_E_PTR, "HcclGetCommName: commName is nullptr (a buffer of COMM_NAME_MAX_LENGTH bytes)")

    def write(results: tuple) -> None:
        data = results[0].encode("utf-8")[:127]
        ffi.memmove(name, data + b"\0", len(data) + 1)
    return [handle_of(comm)], write


def _counts(ffi: Any, ptr: Any, comm: Any) -> Any:
    """A host array of one uint64_t per rank of `comm` (None for null; the comm's size from Python)."""
    if ptr == ffi.NULL:
        return None
    size = getattr(comm, "size", None)
    if not isinstance(size, int) or getattr(comm, "destroyed", True):
        return []   # the Python function refuses the comm itself, naming it
    return ffi.unpack(ffi.cast("uint64_t *", ptr), size)


def _address(ffi: Any, ptr: Any) -> Any:
    return None if ptr == ffi.NULL else int(ffi.cast("uintptr_t", ptr))


def _reduce_scatter_v(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    send, counts, displs, recv, recv_count, dtype, op, comm, stream = cargs
    c = handle_of(comm)
    return [_address(ffi, send), _counts(ffi, counts, c), _counts(ffi, displs, c), _address(ffi, recv), recv_count,
            dtype, op, c, handle_of(stream)], _nothing


def _all_gather_v(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    send, send_count, recv, counts, displs, dtype, comm, stream = cargs
    c = handle_of(comm)
    return [_address(ffi, send), send_count, _address(ffi, recv), _counts(ffi, counts, c), _counts(ffi, displs, c),
            dtype, c, handle_of(stream)], _nothing


def _all_to_all_v(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    send, scounts, sdispls, stype, recv, rcounts, rdispls, rtype, comm, stream = cargs
    c = handle_of(comm)
    return [_address(ffi, send), _counts(ffi, scounts, c), _counts(ffi, sdispls, c), stype, _address(ffi, recv),
            _counts(ffi, rcounts, c), _counts(ffi, rdispls, c), rtype, c, handle_of(stream)], _nothing


def _batch_send_recv(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    items, n, comm, stream = cargs
    from aclnn_gpu.hccl.types import HcclSendRecvItem
    info = None if items == ffi.NULL else [
        HcclSendRecvItem(int(items[i].sendRecvType), _address(ffi, items[i].buf), int(items[i].count),
                         int(items[i].dataType), int(items[i].remoteRank)) for i in range(n)]
    return [info, n, handle_of(comm), handle_of(stream)], _nothing


def _pointer_attributes(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    ptr, attributes = cargs
    if attributes == ffi.NULL:
        raise CError(aclError.ACL_ERROR_RT_PARAM_INVALID,
                     "aclrtPointerGetAttributes: attributes is nullptr (out-parameter)")

    def write(results: tuple) -> None:
        kind, device_id, page = results
        attributes.location.type = kind
        attributes.location.id = device_id
        attributes.pageSize = page
    return [_address(ffi, ptr)], write


def _launch_callback(ffi: Any, cargs: tuple, handle_of: Any) -> tuple[list, Writer]:
    """aclrtLaunchCallback(fn, userData, blockType, stream): the C function pointer becomes a Python
    callable that calls it with the caller's userData pointer (NULL stays NULL)."""
    fn, data, block, stream = cargs
    if fn == ffi.NULL:
        return [None, None, block, handle_of(stream)], _nothing
    pointer = ffi.cast("void *", data)

    def call(_user_data: Any) -> None:
        fn(pointer)
    return [call, _address(ffi, data), block, handle_of(stream)], _nothing


def _nothing(results: tuple) -> None:
    return None


CONVERSIONS: dict[str, Conversion] = {
    "aclGetViewShape": _out_array("aclGetViewShape"), "aclGetStorageShape": _out_array("aclGetStorageShape"),
    "aclGetViewStrides": _out_array("aclGetViewStrides"),
    "HcclCommInitRootInfoConfig": _init_root_info_config, "HcclCommInitClusterInfoConfig": _init_cluster_info_config,
    "HcclCreateSubCommConfig": _sub_comm, "HcclCommInitAll": _init_all, "HcclGetCommName": _comm_name,
    "HcclReduceScatterV": _reduce_scatter_v, "HcclAllGatherV": _all_gather_v, "HcclAlltoAllV": _all_to_all_v,
    "HcclBatchSendRecv": _batch_send_recv, "aclrtPointerGetAttributes": _pointer_attributes,
    "aclrtLaunchCallback": _launch_callback,
}

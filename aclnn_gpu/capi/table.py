"""The binding table of the C ABI: one `Entry` per exported C function (its C signature and the Python
function it calls), read from the headers under `include/`.

The headers are the one source of the C signatures: every `ACL_FUNC_VISIBILITY` declaration becomes
an entry, so adding a function to the C ABI is adding its declaration to the right header (and, when
its Python name differs or its arguments need more than the generic conversions of `bridge.py`, a
line in `PYTHON_NAME` / `ADAPTERS` there). The build compiles the generated definitions against the
same headers, so a definition that disagrees with its declaration does not compile.

How a C parameter reaches Python is decided from its type and name (`Param.kind`):
  handle      an opaque handle in (aclTensor*, aclIntArray*, aclOpExecutor*, aclrtStream, aclrtEvent, ...)
  out_handle  a handle written back (aclrtStream *, aclOpExecutor **, aclmdlRI *, HcclComm *)
  addr        a device or host address in (void *)          out_addr  void ** written back
  array       const int64_t * whose length is another parameter (`count`), passed as a list
  count       that length (not passed to Python on its own)
  str         const char * / char *, None for NULL          out_value  a scalar written back
  root_in     const HcclRootInfo * (bytes)                   out_root  HcclRootInfo * written back
  handle_array  const aclTensor *const * (and the like): a list of handles, its length `size`
  value       any other scalar (integers, enums, bool, float, double)
Functions whose parameters need more than these (an out-array, a struct, HCCL's count arrays) have a
hand-written conversion in `custom.py`.
Python receives the inputs in C order (out-parameters and array lengths left out) and returns the
status followed by the out-parameters, the convention of the Python API (API.md §1).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

INCLUDE_DIR = Path(__file__).resolve().parent / "include"

HANDLE_TYPES = ("aclTensor", "aclIntArray", "aclScalar", "aclOpExecutor", "aclrtStream", "aclrtEvent", "aclmdlRI",
                "HcclComm", "aclFloatArray", "aclBoolArray", "aclTensorList", "aclScalarList", "aclrtContext")
# A handle type that is itself a pointer typedef (its out-parameter has one star less).
POINTER_TYPEDEFS = ("aclrtStream", "aclrtEvent", "aclmdlRI", "HcclComm", "aclrtContext")
# Return types that are a plain value (aclFloat16ToFloat's float, aclDataTypeSize's size_t, ...): 0 on failure.
VALUE_RETURNS = ("float", "aclFloat16", "size_t", "uint32_t")

# cffi's view of the types the headers add beyond build.py's base list (sizes and layouts it reads from
# the real headers at build time: `...` leaves them to the compiler).
CDEF_TYPES = [
    "typedef int... aclFloat16;", "typedef void *aclrtContext;", "typedef int... aclrtRunMode;",
    "typedef int... aclrtEventStatus;", "typedef int... aclrtEventWaitStatus;", "typedef int... aclrtStreamStatus;",
    "typedef int... aclrtMemAttr;", "typedef int... HcclSendRecvType;", "typedef int... aclrtDeviceStatus;",
    "typedef int... aclrtMemLocationType;", "typedef int... aclrtLastErrLevel;",
    "typedef int... aclrtCallbackBlockType;", "typedef void (*aclrtCallback)(void *userData);",
    "typedef struct { uint32_t id; aclrtMemLocationType type; ...; } aclrtMemLocation;",
    "typedef struct { aclrtMemLocation location; uint32_t pageSize; ...; } aclrtPtrAttributes;",
    "typedef struct aclFloatArray aclFloatArray;", "typedef struct aclBoolArray aclBoolArray;",
    "typedef struct aclTensorList aclTensorList;", "typedef struct aclScalarList aclScalarList;",
    "typedef struct { uint32_t hcclBufferSize; uint32_t hcclDeterministic; char hcclCommName[128]; "
    "char hcclUdi[128]; uint32_t hcclOpExpansionMode; uint32_t hcclRdmaTrafficClass; uint32_t hcclRdmaServiceLevel; "
    "...; } HcclCommConfig;",
    "typedef struct { HcclSendRecvType sendRecvType; void *buf; uint64_t count; HcclDataType dataType; "
    "uint32_t remoteRank; ...; } HcclSendRecvItem;",
]
# Lengths of arrays that are not named after their array (aclCreateTensor's stride has viewDims' length).
ARRAY_LENGTH = {"viewDims": "viewDimsNum", "stride": "viewDimsNum", "storageDims": "storageDimsNum",
                "value": "size"}

_DECLARATION = re.compile(r"ACL_FUNC_VISIBILITY\s+([^;(]*?)\b(\w+)\s*\(([^)]*)\)\s*;", re.S)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


@dataclass(frozen=True)
class Param:
    ctype: str      # the C type as declared ("const aclTensor *")
    name: str
    kind: str       # see the module docstring
    base: str       # the type without const and stars ("aclTensor")


@dataclass(frozen=True)
class Entry:
    name: str           # the C function's name (and, unless PYTHON_NAME says otherwise, the Python one)
    restype: str        # "aclError", "aclnnStatus", "HcclResult", "aclTensor *", "const char *", ...
    params: tuple[Param, ...]
    header: str         # the header declaring it, relative to include/

    @property
    def c_params(self) -> str:
        return ", ".join(f"{p.ctype} {p.name}" for p in self.params) or "void"

    @property
    def c_args(self) -> str:
        return ", ".join(p.name for p in self.params)

    @property
    def returns(self) -> str:
        """'status' (an error code), 'value' (a plain number), 'handle' (a new descriptor or NULL) or 'string'."""
        if self.restype in ("aclError", "aclnnStatus", "HcclResult"):
            return "status"
        if self.restype in VALUE_RETURNS:
            return "value"
        return "string" if self.restype.replace(" ", "") == "constchar*" else "handle"


def _base(ctype: str) -> str:
    return ctype.replace("const", " ").replace("*", " ").split()[0]


def _kind(ctype: str, name: str, names: set[str]) -> str:
    base, stars = _base(ctype), ctype.count("*")
    if base in HANDLE_TYPES and stars == 2 and ctype.count("const") == 2:
        return "handle_array"
    if base in HANDLE_TYPES:
        direct = 0 if base in POINTER_TYPEDEFS else 1
        return "handle" if stars == direct else "out_handle"
    if base == "HcclRootInfo":
        return "root_in" if "const" in ctype else "out_root"
    if base == "void":
        return "addr" if stars == 1 else "out_addr"
    if base == "char" and stars == 1:
        return "str"
    if base in ("int64_t", "float", "bool") and stars == 1 and "const" in ctype:
        return "array"
    if stars:
        return "out_value"
    if name in names:
        return "count"
    return "value"


def _parse(text: str, header: str) -> list[Entry]:
    entries = []
    for m in _DECLARATION.finditer(_COMMENT.sub(" ", text)):
        restype, name, raw = " ".join(m.group(1).split()), m.group(2), m.group(3).strip()
        pieces = [] if raw in ("", "void") else [" ".join(p.split()) for p in raw.split(",")]
        declared = []
        for piece in pieces:
            pm = re.match(r"(.*?)(\w+)$", piece)
            assert pm, f"{header}: cannot read parameter {piece!r} of {name}"
            declared.append((pm.group(1).strip(), pm.group(2)))
        lengths = {ARRAY_LENGTH.get(n, n + "Num") for t, n in declared
                   if _kind(t, n, set()) in ("array", "handle_array")}
        params = tuple(Param(t, n, _kind(t, n, lengths), _base(t)) for t, n in declared)
        entries.append(Entry(name, restype, params, header))
    return entries


def entries() -> list[Entry]:
    """Every function the headers declare, in header order (acl/, aclnn/, aclnnop/, hccl/)."""
    out: list[Entry] = []
    for path in sorted(INCLUDE_DIR.rglob("*.h")):
        out.extend(_parse(path.read_text(), path.relative_to(INCLUDE_DIR).as_posix()))
    names = [e.name for e in out]
    assert len(names) == len(set(names)), "a function is declared twice in the headers"
    return out


def headers() -> list[str]:
    """The headers, relative to include/, in an order that compiles (each includes what it needs)."""
    return sorted(p.relative_to(INCLUDE_DIR).as_posix() for p in INCLUDE_DIR.rglob("*.h"))

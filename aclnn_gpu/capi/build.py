"""Building the C ABI: cffi's embedding mode turns the table into `libascendcl.so`, cached.

Owns: the cffi declarations and C source generated from `table.entries()`, the compiler command,
the cached prefix laid out as CANN's (`include/`, `lib64/` with `libascendcl.so` and the other link
names as symbolic links to it, `lib64/pkgconfig/aclnn_gpu.pc`, `lib64/cmake/aclnn_gpu/`), and the
cache under `$ACLNN_GPU_CACHE/capi/<key>` (default `~/.cache/aclnn_gpu/capi/<key>`). `install.py`
copies a built prefix into a CANN toolkit's layout that outlives the cache.

Why a build at first use: a wheel of this pure-Python package cannot ship a compiled library, and
the library bakes in the interpreter and package it starts (below), so it is built on the machine
that runs it, once per key (the key hashes the headers, this package's C ABI sources, cffi's
version, the interpreter and the compiler). Builds take a file lock, write under a temporary name
and rename, so concurrent processes build once.

The embedded interpreter: each exported function first runs `aclnn_gpu_start()`, which (once per
process, `pthread_once`) initialises CPython with `program_name` set to the interpreter this library
was built with, so CPython finds that virtual environment's site-packages the way it does when that
interpreter runs, then puts this package's parent directory first on `sys.path` and lets cffi run
`bridge.install`. The host program's PYTHONPATH / PYTHONHOME (and every other PYTHON* variable)
are ignored unless `ACLNN_GPU_PYTHON_ENV=1`: they belong to the program's own Python, not to the
interpreter this library was built with. A host program that already runs Python (a C extension
loading the library) keeps its own interpreter (its `sys.path` must reach this package and cffi).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from ..emulator.build import _locked, _tmp_name
from .custom import CONVERSIONS
from .table import CDEF_TYPES, INCLUDE_DIR, Entry, Param, entries, headers

HERE = Path(__file__).resolve().parent
PACKAGE_PARENT = HERE.parents[1]            # the directory holding `aclnn_gpu/`
LIBRARY = "libascendcl.so"
# CANN's link names (acl, the aclnn framework, the operator libraries of ops-nn and ops-math, HCCL):
# one library answers to all of them.
LINK_NAMES = ("libnnopbase.so", "libopapi.so", "libopapi_nn.so", "libopapi_math.so", "libhccl.so")
MODULE = "_aclnn_gpu_capi"
CC = os.environ.get("ACLNN_GPU_CC", "cc")


class CapiBuildError(RuntimeError):
    """The C ABI library could not be built (the message carries the command and compiler output)."""


def _cdef() -> str:
    """cffi's view of the types (sizes it reads from the real headers) and the extern "Python" functions."""
    lines = ["typedef int... aclError;", "typedef int... aclnnStatus;", "typedef int... HcclResult;",
             "typedef int... aclDataType;", "typedef int... aclFormat;", "typedef int... aclrtMemMallocPolicy;",
             "typedef int... aclrtMemcpyKind;", "typedef int... aclrtEventRecordedStatus;",
             "typedef int... aclSysParamOpt;", "typedef int... aclmdlRICaptureMode;",
             "typedef int... aclmdlRICaptureStatus;", "typedef int... HcclDataType;", "typedef int... HcclReduceOp;",
             "typedef void *aclrtStream;", "typedef void *aclrtEvent;", "typedef void *aclmdlRI;",
             "typedef void *HcclComm;", "typedef struct { char internal[4108]; } HcclRootInfo;"]
    lines += [f"typedef struct {t} {t};" for t in ("aclTensor", "aclIntArray", "aclScalar", "aclOpExecutor")]
    lines += CDEF_TYPES
    lines += [f'extern "Python" {_bridge_restype(e)} _py_{e.name}({_bridge_params(e)});' for e in entries()]
    lines.append('extern "Python" void _py_aclnn_gpu_at_exit(void);')   # bridge.at_exit
    lines.append('extern "Python" int _py_aclnn_gpu_fail(int, const char *);')   # bridge.fail
    return "\n".join(lines)


# How a C argument crosses into Python (the C side marshals, so each call makes as few Python
# objects as it can): handles and addresses as integers (`uintptr_t`: a Python int hashes and
# compares without a cffi object), a handle as its table key (rotated right by 4 bits, `aclnn_gpu_key`,
# handles.key_of), out-handles and out-addresses as `uintptr_t *` into the caller's pointer-sized slot;
# every other parameter as declared.
# An entry with a parameter kind or a return kind outside these crosses as declared (cffi's own
# conversions) and `bridge.generic_wrapper` converts it, one converter per parameter.
_AS_INTEGER = {"handle": "uintptr_t", "addr": "uintptr_t", "out_handle": "uintptr_t *", "out_addr": "uintptr_t *"}
MARSHALLED_KINDS = frozenset({*_AS_INTEGER, "str", "root_in", "array", "count", "value", "out_root", "out_value"})


def marshalled(e: Entry) -> bool:
    """Whether the generated C marshals `e`'s arguments (and `bridge.wrapper_source` writes its Python)."""
    return (e.returns in ("status", "handle") and e.name not in CONVERSIONS
            and all(p.kind in MARSHALLED_KINDS for p in e.params))


def _bridge_restype(e: Entry) -> str:
    return "uintptr_t" if e.returns == "handle" and marshalled(e) else e.restype


def _bridge_params(e: Entry) -> str:
    if not marshalled(e):
        return e.c_params
    return ", ".join(f"{_AS_INTEGER.get(p.kind, p.ctype)} {p.name}" for p in e.params) or "void"


def _bridge_args(e: Entry) -> str:
    if not marshalled(e):
        return e.c_args

    def arg(p: Param) -> str:
        ctype = _AS_INTEGER.get(p.kind)
        if ctype is None:
            return p.name
        # through `const void *`: a handle's pointer type (const or not) and a typedef'd pointer alike
        if p.kind == "handle":
            return f"aclnn_gpu_key((const void *){p.name})"
        return f"({ctype})(const void *){p.name}" if p.kind == "addr" else f"({ctype}){p.name}"
    return ", ".join(arg(p) for p in e.params)


def _source(python: str) -> str:
    """The C preamble: the headers, then one exported definition per entry that starts Python and
    calls its extern "Python" twin (the compiler checks each definition against its declaration)."""
    fail = {"aclError": "ACL_ERROR_INTERNAL_ERROR", "aclnnStatus": "ACLNN_ERR_INNER", "HcclResult": "HCCL_E_INTERNAL"}
    out = ["#include <pthread.h>", "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>"]
    out += [f'#include "{h}"' for h in headers()]
    out += [f"static {_bridge_restype(e)} _py_{e.name}({_bridge_params(e)});" for e in entries()]
    out.append("static void _py_aclnn_gpu_at_exit(void);")
    out.append("static int _py_aclnn_gpu_fail(int, const char *);")
    out.append(f"""
/* a handle's key in the bridge's table (handles.key_of): the value rotated right by 4 bits */
static inline uintptr_t aclnn_gpu_key(const void *handle)
{{
    uintptr_t v = (uintptr_t)handle;
    return v >> 4 | v << (sizeof(uintptr_t) * 8 - 4);
}}
static pthread_once_t aclnn_gpu_once = PTHREAD_ONCE_INIT;
static int aclnn_gpu_state = -1;
/* exit() of a program that never finalises Python: the streams stop (their queued work abandoned,
   the running task finished) before the destructors of the libraries a kernel runs in. Registered
   after the interpreter and the package started, so it runs before their exit handlers; a host that
   runs Python itself has finalised it by then (its own atexit stopped the streams): nothing to do. */
static void aclnn_gpu_exit_hook(void)
{{
    if (aclnn_gpu_state == 0 && Py_IsInitialized())
        _py_aclnn_gpu_at_exit();
}}
static void aclnn_gpu_boot(void)
{{
    if (!Py_IsInitialized()) {{
        PyConfig config;
        PyStatus status;
        const char *honour = getenv("ACLNN_GPU_PYTHON_ENV");
        PyConfig_InitPythonConfig(&config);
        config.install_signal_handlers = 0;   /* the host program owns its signals */
        /* The caller's PYTHONPATH / PYTHONHOME / PYTHON* describe its own Python (CANN's set_env.sh
           puts its tools on PYTHONPATH): read only when ACLNN_GPU_PYTHON_ENV=1 asks for them. */
        config.use_environment = honour != NULL && strcmp(honour, "1") == 0;
        config.parse_argv = 0;
        status = PyConfig_SetBytesString(&config, &config.program_name, {_c_string(python)});
        if (!PyStatus_Exception(status))
            status = Py_InitializeFromConfig(&config);
        PyConfig_Clear(&config);
        if (PyStatus_Exception(status)) {{
            fprintf(stderr, "aclnn_gpu: cannot start the Python interpreter %s: %s\\n", {_c_string(python)},
                    status.err_msg ? status.err_msg : "unknown error");
            return;
        }}
        PyEval_SaveThread();   /* cffi takes the GIL per call */
    }}
    else {{
        /* A host that already runs Python: cffi's start-up lock (Python < 3.12) is
           PyCapsule_Type.tp_version_tag, which it waits to read 0; PyType_Modified resets that tag
           (the type cache assigns a new one on the next lookup). */
        PyGILState_STATE gil = PyGILState_Ensure();
        PyType_Modified(&PyCapsule_Type);
        PyGILState_Release(gil);
    }}
    aclnn_gpu_state = cffi_start_python();
    if (aclnn_gpu_state == 0)
        atexit(aclnn_gpu_exit_hook);
}}
static int aclnn_gpu_start(void)
{{
    pthread_once(&aclnn_gpu_once, aclnn_gpu_boot);
    return aclnn_gpu_state;
}}
static const char aclnn_gpu_no_python[] = "aclnn_gpu: the embedded Python interpreter failed to start (see stderr)";
""")
    for e in entries():
        if e.returns == "status":
            bad = fail[e.restype]
        elif e.returns == "string":
            bad = "aclnn_gpu_no_python"
        elif e.returns == "value":
            bad = "0"
        else:
            bad = "NULL"
        body = [f"    if (aclnn_gpu_start() != 0)\n        return {bad};"]
        # a NULL out-parameter is refused here, before Python sees the call (bridge.fail sets the message)
        for p in e.params:
            if p.kind.startswith("out_") and e.returns == "status" and marshalled(e):
                message = _c_string(f"{e.name}: {p.name} is null (out-parameter)")
                body.append(f"    if ({p.name} == NULL)\n"
                            f"        return ({e.restype})_py_aclnn_gpu_fail({NULL_OUT[e.restype]}, {message});")
        call = f"_py_{e.name}({_bridge_args(e)})"
        body.append(f"    return ({e.restype}){call};" if e.returns == "handle" and marshalled(e)
                    else f"    return {call};")
        out.append(f"{e.restype} {e.name}({e.c_params})\n{{\n" + "\n".join(body) + "\n}")
    return "\n".join(out) + "\n"


# The code of a NULL out-parameter, by return type (CANN's: the runtime's invalid parameter, aclnn's
# null pointer, HCCL's pointer error).
NULL_OUT = {"aclError": "ACL_ERROR_RT_PARAM_INVALID", "aclnnStatus": "ACLNN_ERR_PARAM_NULLPTR",
            "HcclResult": "HCCL_E_PTR"}


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _init_code() -> str:
    return (f"import sys\n"
            f"if {str(PACKAGE_PARENT)!r} not in sys.path:\n"
            f"    sys.path.insert(0, {str(PACKAGE_PARENT)!r})\n"
            f"from {MODULE} import ffi\n"
            f"from aclnn_gpu.capi import bridge\n"
            f"bridge.install(ffi)\n")


def _python_link() -> tuple[list[str], list[str]]:
    """Include and link flags of the running interpreter's libpython (with an rpath to it)."""
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        raise CapiBuildError(f"the C ABI needs the Python headers ({include}/Python.h is missing: install "
                             f"the interpreter's development package, e.g. python3-dev)")
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    soname = sysconfig.get_config_var("INSTSONAME") or ""
    version = sysconfig.get_config_var("LDVERSION") or f"{sys.version_info.major}.{sys.version_info.minor}"
    library = f"-l:{soname}" if soname and (Path(libdir) / soname).exists() else f"-lpython{version}"
    return [f"-I{include}"], [f"-L{libdir}", f"-Wl,-rpath,{libdir}", library]


def _compiler_version() -> str:
    try:
        return subprocess.run([CC, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return "none"


def _key() -> str:
    import cffi
    h = hashlib.sha256()
    parts = [sys.executable, str(PACKAGE_PARENT), cffi.__version__, _compiler_version(), sys.version]
    parts += [p.read_text() for p in sorted(INCLUDE_DIR.rglob("*.h"))]
    # custom.py's CONVERSIONS decide which entries the C marshals (`marshalled`), so the exported
    # functions' C signatures; bridge.py writes the Python those signatures call; handles.py's key
    # rotation is the one the generated C writes out
    parts += [(HERE / name).read_text() for name in ("build.py", "table.py", "custom.py", "bridge.py", "handles.py")]
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def cache_root() -> Path:
    root = os.environ.get("ACLNN_GPU_CACHE") or str(Path.home() / ".cache" / "aclnn_gpu")
    return Path(root) / "capi"


def prefix() -> Path:
    """The install prefix of this package's C ABI (built or not)."""
    return cache_root() / _key()


def build(verbose: bool = False) -> Path:
    """Build the library and its prefix if the cache has none; returns the prefix."""
    root = prefix()
    lib = root / "lib64" / LIBRARY
    if lib.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lock"):
        if lib.exists():
            return root
        _build_into(root, verbose)
    return root


def _build_into(root: Path, verbose: bool) -> None:
    try:
        import cffi
    except ImportError:
        raise CapiBuildError("the C ABI needs cffi: pip install 'aclnn_gpu[capi]'") from None
    lib64, work = root / "lib64", root / "build"
    for d in (lib64, work):
        d.mkdir(parents=True, exist_ok=True)
    include = root / "include"
    if not include.exists():
        tmp = _tmp_name(include)
        shutil.copytree(INCLUDE_DIR, tmp)
        os.replace(tmp, include)
    ffibuilder = cffi.FFI()
    ffibuilder.cdef(_cdef())
    ffibuilder.set_source(MODULE, _source(sys.executable))
    ffibuilder.embedding_init_code(_init_code())
    c_file = work / f"{MODULE}.c"
    with contextlib.redirect_stdout(sys.stderr if verbose else io.StringIO()):  # cffi says "generating ..."
        ffibuilder.emit_c_code(str(c_file))
    py_include, py_link = _python_link()
    tmp_lib = _tmp_name(lib64 / LIBRARY)
    # -DNDEBUG as for any CPython extension (cffi's start-up code asserts what holds only then)
    cmd = [CC, "-shared", "-fPIC", "-O2", "-DNDEBUG", "-fvisibility=hidden", "-pthread", f"-I{include}", *py_include,
           str(c_file), "-o", str(tmp_lib), f"-Wl,-soname,{LIBRARY}", *py_link]
    if verbose:
        print(" ".join(cmd), file=sys.stderr)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise CapiBuildError(f"building {LIBRARY} failed:\n{' '.join(cmd)}\n{r.stderr}")
    write_around_library(root)
    os.replace(tmp_lib, lib64 / LIBRARY)   # last: its presence means the prefix is complete


def write_around_library(root: Path) -> None:
    """What a prefix holds beside `lib64/libascendcl.so`: CANN's other link names as symbolic links
    to it, the pkg-config file and the CMake package (both find the prefix from their own place)."""
    lib64 = root / "lib64"
    for d in (lib64 / "pkgconfig", lib64 / "cmake" / "aclnn_gpu"):
        d.mkdir(parents=True, exist_ok=True)
    for name in LINK_NAMES:
        link = lib64 / name
        if not link.is_symlink():
            link.symlink_to(LIBRARY)
    _write(lib64 / "pkgconfig" / "aclnn_gpu.pc", _pkg_config())
    _write(lib64 / "cmake" / "aclnn_gpu" / "aclnn_gpuConfig.cmake", _cmake_config())


def _write(path: Path, text: str) -> None:
    tmp = _tmp_name(path)
    tmp.write_text(text)
    os.replace(tmp, path)


def cflags(root: Path) -> list[str]:
    return [f"-I{root / 'include'}"]


def libs(root: Path) -> list[str]:
    lib64 = root / "lib64"
    return [f"-L{lib64}", f"-Wl,-rpath,{lib64}", "-lascendcl", "-lnnopbase", "-lopapi"]


def _pkg_config() -> str:
    from .. import __version__
    # ${pcfiledir} (lib64/pkgconfig): the file finds its prefix wherever the prefix is copied
    return (f"prefix=${{pcfiledir}}/../..\nincludedir=${{prefix}}/include\nlibdir=${{prefix}}/lib64\n\n"
            f"Name: aclnn_gpu\nDescription: CANN's acl / aclnn C ABI on aclnn_gpu (NVIDIA GPUs and CPUs)\n"
            f"Version: {__version__}\nCflags: -I${{includedir}}\n"
            f"Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lascendcl -lnnopbase -lopapi\n")


def _cmake_config() -> str:
    """find_package(aclnn_gpu): imported targets with CANN's library names, plus aclnn_gpu::aclnn_gpu."""
    targets = ["ascendcl", "nnopbase", "opapi", "opapi_nn", "opapi_math", "hccl"]
    lines = ["# aclnn_gpu's C ABI: CANN's libraries, all answered by libascendcl.so of this prefix.",
             "get_filename_component(_aclnn_gpu_prefix \"${CMAKE_CURRENT_LIST_DIR}/../../..\" ABSOLUTE)",
             "set(aclnn_gpu_INCLUDE_DIRS \"${_aclnn_gpu_prefix}/include\")",
             "set(aclnn_gpu_LIBRARY_DIR \"${_aclnn_gpu_prefix}/lib64\")",
             "set(ASCEND_PATH \"${_aclnn_gpu_prefix}\" CACHE PATH \"CANN-style root of the aclnn_gpu C ABI\")"]
    for t in targets:
        lines += [f"if(NOT TARGET aclnn_gpu::{t})",
                  f"  add_library(aclnn_gpu::{t} SHARED IMPORTED)",
                  f"  set_target_properties(aclnn_gpu::{t} PROPERTIES",
                  f"    IMPORTED_LOCATION \"${{aclnn_gpu_LIBRARY_DIR}}/lib{t}.so\"",
                  f"    IMPORTED_SONAME \"{LIBRARY}\"",
                  "    INTERFACE_INCLUDE_DIRECTORIES \"${aclnn_gpu_INCLUDE_DIRS}\")",
                  "endif()"]
    lines += ["if(NOT TARGET aclnn_gpu::aclnn_gpu)",
              "  add_library(aclnn_gpu::aclnn_gpu INTERFACE IMPORTED)",
              "  set_target_properties(aclnn_gpu::aclnn_gpu PROPERTIES INTERFACE_LINK_LIBRARIES",
              "    \"aclnn_gpu::ascendcl;aclnn_gpu::nnopbase;aclnn_gpu::opapi\")",
              "endif()",
              "set(aclnn_gpu_LIBRARIES aclnn_gpu::aclnn_gpu)",
              "set(aclnn_gpu_FOUND TRUE)"]
    return "\n".join(lines) + "\n"

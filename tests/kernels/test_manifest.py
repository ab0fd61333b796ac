"""The kernel manifest (aclnn_gpu/kernels/manifest.py) against the sources it names and the launchers
that use it: every name expression is a `__global__` kernel of its `.cu` file with as many template
arguments as the kernel has parameters; a launcher cannot build a name outside its file's table; and
phase 1's recorder refuses a launch outside the plan type's declared kernel files."""
from __future__ import annotations

import re

import numpy as np
import pytest

from aclnn_gpu.kernels import manifest
from aclnn_gpu.kernels.context import KERNEL_DIR, KernelFile
from aclnn_gpu.plans.frozen import freeze
from aclnn_gpu.ops.kl_div import launch as kl_launch

_KERNEL = re.compile(r"(?:template\s*<(?P<params>[^{;]*?)>\s*)?__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?"
                     r"(?P<name>\w+)\s*\(")


def _top_level_count(text: str) -> int:
    """Comma-separated items at angle-bracket depth 0 (0 for an empty list)."""
    if not text.strip():
        return 0
    depth, count = 0, 1
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        count += ch == "," and depth == 0
    return count


def _kernels(file: str) -> dict[str, int]:
    """{kernel name: number of template parameters} of kernels/<file>."""
    source = (KERNEL_DIR / file).read_text()
    return {m["name"]: _top_level_count(m["params"] or "") for m in _KERNEL.finditer(source)}


def _parse(expr: str) -> tuple[str, int]:
    base, _, args = expr.partition("<")
    return base.split("::")[-1], _top_level_count(args[:-1]) if args else 0


@pytest.mark.parametrize("file", sorted(manifest.KERNELS))
def test_every_name_is_a_kernel_of_its_file(file):
    kernels = _kernels(file)
    assert kernels, f"no __global__ kernel found in {file}"
    names = manifest.KERNELS[file]
    assert len(set(names)) == len(names), f"{file}: a name expression is listed twice"
    for expr in names:
        base, arity = _parse(expr)
        assert base in kernels, f"{file}: {expr} names no __global__ kernel of the file"
        assert arity == kernels[base], f"{file}: {expr} gives {arity} template arguments, the kernel takes {kernels[base]}"


def test_parser_sees_template_arity():
    # the check above must be able to fail: a kernel of two parameters is seen as such
    assert _kernels("cross_entropy.cu")["ce_grad"] == 2
    assert _parse("aclg::ctc_beta<float, long long>") == ("ctc_beta", 2)


def test_a_launcher_cannot_name_an_instantiation_outside_its_table():
    assert kl_launch.KERNELS.name("kl_bwd_contig", "float") == "kl_bwd_contig<float>"
    with pytest.raises(LookupError, match="kl_bwd_contig<int>"):
        kl_launch.KERNELS.name("kl_bwd_contig", "int")
    table = KernelFile("x.cu", ("plain", "t<1, 2>"))
    assert table.name("plain") == "plain" and table.name("t", 1, 2) == "t<1, 2>"


class _Launches:
    """A plan-like object whose launcher launches `expr` of `file`."""

    workspace_size = 0
    kernel_files = ("kl_div.cu",)

    def __init__(self, file: str, expr: str):
        self.file, self.expr = file, expr

    def launch_kernels(self, ctx, workspace):
        ctx.launch(self.file, self.expr, (1,), (32,), (np.int64(0),))


def test_recorder_refuses_a_kernel_the_plan_type_does_not_declare():
    freeze(_Launches("kl_div.cu", "kl_fwd_final<float>"), 4)
    with pytest.raises(AssertionError, match="do not list"):
        freeze(_Launches("cross_entropy.cu", "ce_loss_reduce<float>"), 4)   # another operator's file
    with pytest.raises(AssertionError, match="do not list"):
        freeze(_Launches("kl_div.cu", "kl_fwd_final<int>"), 4)              # not instantiated


def test_every_kernel_source_is_registered():
    # the operator packages register their tables when imported (importing aclnn_gpu imports them
    # all): a .cu file nobody registered would never be loaded or compiled by the report
    sources = {path.name for path in KERNEL_DIR.glob("*.cu")}
    assert sources == set(manifest.KERNELS) == set(manifest.KNOWN)


def test_a_file_registers_one_table():
    table = kl_launch.KERNELS
    assert manifest.register(KernelFile(table.file, table.names)) == table   # the same table again: kept
    with pytest.raises(ValueError, match="kl_div.cu is already registered"):
        manifest.register(KernelFile(table.file, table.names[:1]))
    assert manifest.KERNELS[table.file] == list(table.names)

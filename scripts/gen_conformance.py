"""Writes tests/conformance/cases/*.json from a local hicann/ops-nn git directory (run by hand: CI has
no network; `fetch` or `git clone --bare` gives the directory):

    python scripts/gen_conformance.py /path/to/ops-nn.git [--rev HEAD]

Per operator it reads ops-nn's op_api unit tests (C++ gtest files: every OP_API_UT call whose phase 1
is run, with the status the test expects) and its system-test case table (ATK JSON: shapes, dtypes,
value ranges, attributes), and writes one data file: the ops-nn commit, the paths read, and the cases.
The unit tests are read by a small interpreter of the subset of C++ they use (TensorDesc /
IntArrayDesc declarations, integer globals and their reassignments, dtype-list loops, OP_API_UT,
TestGetWorkspaceSize and EXPECT_EQ / EXPECT_NE on its status). A system-test case whose tensors hold
more than MAX_ELEMENTS elements is drawn smaller ("cap" in its data says from what and why), and the
cases whose expectation this library decides otherwise carry "mark" (tests/conformance/marks.py:
the docs/API.md §7 row and what the runner checks instead).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "conformance"))
from caps import cap  # noqa: E402  (the size rules, beside the runner)
from marks import mark_for, xfail_for  # noqa: E402  (the rules live beside the runner that applies them)

CASES_DIR = ROOT / "tests" / "conformance" / "cases"

# operator -> (unit-test files, system-test table); paths inside ops-nn
SOURCES: dict[str, tuple[list[str], str | None]] = {
    "aclnnCtcLoss": (["loss/ctc_loss_v2/tests/ut/op_api/test_aclnn_ctc_loss.cpp"],
                     "loss/ctc_loss_v2/tests/st/aclnnCtcLoss/atk_aclnnCtcLoss.json"),
    "aclnnCtcLossBackward": (["loss/ctc_loss_v2_grad/tests/ut/op_api/test_aclnn_ctclossbackward.cpp"],
                             "loss/ctc_loss_v2_grad/tests/st/aclnnCtcLossBackward/atk_aclnnCtcLossBackward.json"),
    "aclnnCrossEntropyLoss": (
        [], "loss/cross_entropy_loss/tests/st/aclnnCrossEntropyLoss/atk_aclnnCrossEntropyLoss.json"),
    "aclnnCrossEntropyLossGrad": (
        [], "loss/cross_entropy_loss_grad/tests/st/aclnnCrossEntropyLossGrad/atk_aclnnCrossEntropyLossGrad.json"),
    "aclnnKlDivBackward": (["loss/kl_div_loss_grad/tests/ut/op_api/test_aclnn_kl_div_backward.cpp"],
                           "loss/kl_div_loss_grad/tests/st/aclnnKlDivBackward/atk_aclnnKlDivBackward.json"),
    "aclnnConvTbc": (["conv/convolution_forward/tests/ut/op_host/test_aclnn_conv_tbc.cpp"],
                     "conv/convolution_forward/tests/st/aclnnConvTbc/atk_aclnnConvTbc.json"),
    "aclnnConvTbcBackward": (["conv/convolution_backward/tests/ut/op_api/test_aclnn_convolution_tbc_backward.cpp"],
                             "conv/convolution_backward/tests/st/aclnnConvTbcBackward/atk_aclnnConvTbcBackward.json"),
    "aclnnScaledMaskedSoftmax": (
        ["vfusion/scaled_masked_softmax_v2/tests/ut/op_host/op_api/test_aclnn_scaled_masked_softmax.cpp"],
        "vfusion/scaled_masked_softmax_v2/tests/st/aclnnScaledMaskedSoftmax/atk_aclnnScaledMaskedSoftmax.json"),
    "aclnnScaledMaskedSoftmaxBackward": (
        ["vfusion/scaled_masked_softmax_grad_v2/tests/ut/op_host/op_api/test_aclnn_scaled_masked_softmax_backward.cpp"],
        "vfusion/scaled_masked_softmax_grad_v2/tests/st/aclnnScaledMaskedSoftmaxBackward/"
        "atk_aclnnScaledMaskedSoftmaxBackward.json"),
}

# the status names the unit tests expect, as numbers
STATUS = {"ACLNN_SUCCESS": 0, "ACL_SUCCESS": 0, "ACLNN_ERR_PARAM_NULLPTR": 161001,
          "ACLNN_ERR_PARAM_INVALID": 161002, "ACLNN_ERR_INNER_TILING_ERROR": 561002}

# the largest tensor a system-test case is drawn at (elements, over all its tensors): the suite runs
# every case on two devices in CI within about a minute on two cores
MAX_ELEMENTS = 4096


def git_show(git_dir: str, rev: str, path: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{rev}:{path}"], check=True,
                          capture_output=True, text=True).stdout


# ------------------------------------------------------------------------- unit tests (C++ subset)
SCALAR_TYPES = r"(?:int64_t|int32_t|int8_t|int|uint64_t|double|float|bool)"
GLOBAL_DECL = r"(?:static\s+)?(?:const\s+)?" + SCALAR_TYPES + r"\s+(\w+)\s*=\s*(.+)"
LOCAL_DECL = r"(?:" + SCALAR_TYPES + r"|auto)\s+(\w+)\s*=\s*(.+)"

def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside (), {}, [] and string literals."""
    parts, depth, start, quoted = [], 0, 0, False
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def matching(text: str, open_at: int) -> int:
    """Index of the bracket closing the one at `open_at`."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    for i in range(open_at, len(text)):
        if text[i] in pairs:
            stack.append(pairs[text[i]])
        elif stack and text[i] == stack[-1]:
            stack.pop()
            if not stack:
                return i
    raise ValueError("unbalanced brackets")


class UnitTestReader:
    """Runs the statements of one gtest file's tests far enough to know each OP_API_UT call's
    arguments and the status its test expects."""

    def __init__(self, text: str, path: str):
        self.text = strip_comments(text)
        self.path = path
        # cubeMathType's names (aclnn's documented values)
        self.globals: dict[str, Any] = {"KEEP_DTYPE": 0, "ALLOW_FP32_DOWN_PRECISION": 1, "USE_FP16": 2, "USE_HF32": 3}
        self.cases: list[dict[str, Any]] = []

    def value(self, expr: str, env: dict[str, Any]) -> Any:
        expr = expr.strip()
        expr = re.sub(r"\((?:const\s+)?aclTensor\s*\*\)\s*nullptr", "None", expr)
        if expr in ("nullptr", "NULL"):
            return None
        if expr.startswith('"'):
            return expr.strip('"')
        m = re.fullmatch(r"(\w+)\[(\w+)\]", expr)
        if m and m.group(1) in env:
            return env[m.group(1)][int(self.value(m.group(2), env))]
        if re.fullmatch(r"ACL_[A-Z0-9_]+", expr):
            return expr
        if re.fullmatch(r"[\w]+::[\w:]+", expr):
            return expr
        if expr.startswith("{"):
            return [self.value(p, env) for p in split_top(expr[1:-1], ",") if p]
        m = re.fullmatch(r"vector<[\w:]+>\s*(\{.*\})", expr, flags=re.S)
        if m:
            return self.value(m.group(1), env)
        py = expr.replace("true", "True").replace("false", "False")
        py = re.sub(r"(?<=\d)[fFlL]\b", "", py)
        py = py.replace("/", "//") if "." not in py else py   # C integer division
        py = re.sub(r"static_cast<[\w:]+>", "", py)
        return eval(py, {"__builtins__": {}}, dict(env))  # noqa: S307 (numbers and names of the test file)

    def tensor_desc(self, expr: str, env: dict[str, Any]) -> dict[str, Any]:
        m = re.match(r"TensorDesc\s*\(", expr)
        assert m
        close = matching(expr, m.end() - 1)
        args = split_top(expr[m.end():close], ",")
        desc: dict[str, Any] = {"tensor": True, "shape": self.value(args[0], env), "dtype": self.value(args[1], env),
                                "format": self.value(args[2], env) if len(args) > 2 else "ACL_FORMAT_ND"}
        rest = expr[close + 1:]
        for call in re.finditer(r"\.(\w+)\s*\(", rest):
            end = matching(rest, call.end() - 1)
            inner = split_top(rest[call.end():end], ",")
            if call.group(1) == "ValueRange":
                desc["range"] = [self.value(a, env) for a in inner]
            elif call.group(1) == "Value":
                desc["value"] = self.value(inner[0], env)
        return desc

    def run(self) -> list[dict[str, Any]]:
        first = self.text.find("TEST_F")
        for define in re.finditer(r"^#define\s+(\w+)\s+(-?\d+)\s*$", self.text[:first], flags=re.M):
            self.globals[define.group(1)] = int(define.group(2))
        for chunk in split_top(self.text[:first], ";"):
            lines = [line for line in chunk.split("\n") if line.strip() and not line.startswith("#")]
            stmt = lines[-1].strip() if lines else ""
            m = re.fullmatch(GLOBAL_DECL, stmt, flags=re.S)
            if m:
                self.globals[m.group(1)] = self.value(m.group(2), self.globals)
        for m in re.finditer(r"TEST_F\s*\(\s*\w+\s*,\s*(\w+)\s*\)\s*\{", self.text):
            close = matching(self.text, m.end() - 1)
            self.body(m.group(1), self.text[m.end():close], dict(self.globals), {})
        return self.cases

    def body(self, name: str, body: str, env: dict[str, Any], ut_state: dict[str, Any]) -> None:
        soc = None
        uts: dict[str, dict[str, Any]] = {}
        last: dict[str, Any] | None = None
        pos = 0
        loop_count = 0
        while pos < len(body):
            rest = body[pos:]
            loop = re.match(r"\s*for\s*\(\s*int\s+(\w+)\s*=\s*0\s*;\s*\1\s*<\s*(\w+)\s*;\s*\1\+\+\s*\)\s*\{", rest)
            if loop:
                close = matching(rest, loop.end() - 1)
                for k in range(int(self.value(loop.group(2), env))):
                    inner_env = dict(env)
                    inner_env[loop.group(1)] = k
                    self.body(f"{name}#loop{loop_count}.{k}", rest[loop.end():close], inner_env, ut_state)
                loop_count += 1
                pos += close + 1
                continue
            end = self.statement_end(rest)
            stmt = rest[:end].strip()
            pos += end + 1
            if not stmt:
                continue
            if "SocVersion::" in stmt:
                soc = re.search(r"SocVersion::(\w+)", stmt).group(1)  # type: ignore[union-attr]
                continue
            m = re.fullmatch(r"(?:auto|TensorDesc)\s+(\w+)\s*=\s*(TensorDesc\s*\(.*)", stmt, flags=re.S)
            if m:
                env[m.group(1)] = self.tensor_desc(m.group(2), env)
                continue
            m = re.fullmatch(r"auto\s+(\w+)\s*=\s*IntArrayDesc\s*\((.*)\)", stmt, flags=re.S)
            if m:
                env[m.group(1)] = {"int_array": self.value(m.group(2), env)}
                continue
            m = re.fullmatch(r"auto\s+(\w+)\s*=\s*OP_API_UT\s*\((.*)\)", stmt, flags=re.S)
            if m:   # OP_API_UT(api, INPUT(...), OUTPUT(...)[, more arguments after the outputs])
                parts = split_top(m.group(2), ",")
                args = []
                for part in parts[1:]:
                    group = re.fullmatch(r"(?:INPUT|OUTPUT)\s*\((.*)\)", part, flags=re.S)
                    items = split_top(group.group(1), ",") if group else [part]
                    args += [self.value(a, env) for a in items if a]
                uts[m.group(1)] = {"api": parts[0], "args": args}
                continue
            m = re.search(r"(\w+)\s*\.\s*TestGetWorkspaceSize\w*\s*\(", stmt)
            if m:
                call = uts[m.group(1)]
                case_id = f"ut:{name}"
                taken = {c["id"] for c in self.cases}
                k = 1
                while case_id in taken:   # a test with several calls: #1, #2, ...
                    case_id = f"ut:{name}#{k}"
                    k += 1
                last = {"id": case_id, "kind": "ut", "ut": name.split("#")[0], "api": call["api"],
                        "args": call["args"], "expect": None, "soc": soc}
                self.cases.append(last)
                continue
            m = re.fullmatch(r"EXPECT_(EQ|NE)\s*\(\s*aclRet\s*,\s*(\w+)\s*\)", stmt)
            if m and last is not None:
                code = STATUS[m.group(2)]
                last["expect"] = code if m.group(1) == "EQ" else {"not": code}
                continue
            m = re.fullmatch(r"(?:std::)?vector<(?:aclDataType|int64_t|int)>\s+(\w+)\s*=\s*(\{.*\})", stmt, flags=re.S)
            if m:
                env[m.group(1)] = self.value(m.group(2), env)
                continue
            m = re.fullmatch(r"int\s+(\w+)\s*=\s*(\w+)\.size\(\)", stmt)
            if m:
                env[m.group(1)] = len(env[m.group(2)])
                continue
            m = re.fullmatch(LOCAL_DECL, stmt, flags=re.S)
            if m:
                env[m.group(1)] = self.value(m.group(2), env)
                continue
            m = re.fullmatch(r"(\w+)\s*=\s*([^=].*)", stmt, flags=re.S)
            if m and m.group(1) not in ("aclRet", "workspaceSize", "workspace_size"):
                try:
                    env[m.group(1)] = self.value(m.group(2), env)
                except Exception:
                    pass
                if m.group(1) in self.globals:   # a test that changes a global changes it for the next tests
                    self.globals[m.group(1)] = env[m.group(1)]
                continue

    @staticmethod
    def statement_end(text: str) -> int:
        depth = 0
        for i, ch in enumerate(text):
            if ch in "({[":
                depth += 1
            elif ch in ")}]":
                depth -= 1
            elif ch == ";" and depth == 0:
                return i
        return len(text)


# ------------------------------------------------------------------------- system tests (ATK JSON)
def st_inputs(case: dict[str, Any]) -> list[dict[str, Any]]:
    """A case's inputs in call order: name, type, dtype, shape, range (attr_tuple lists flattened)."""
    out = []
    for item in case["inputs"]:
        if isinstance(item, list):   # an integer array, one entry per element
            out.append({"name": item[0]["name"], "type": "int_array", "dtype": item[0]["dtype"],
                        "values": [e["range_values"] for e in item]})
        else:
            out.append({"name": item["name"], "type": item["type"], "dtype": item["dtype"], "shape": item["shape"],
                        "range": item["range_values"]})
    return out


def numel(shape: Any) -> int:
    return math.prod(shape) if isinstance(shape, list) and all(isinstance(d, int) for d in shape) else 0


def read_operator(git_dir: str, rev: str, op: str) -> dict[str, Any]:
    ut_paths, st_path = SOURCES[op]
    cases: list[dict[str, Any]] = []
    for path in ut_paths:
        for case in UnitTestReader(git_show(git_dir, rev, path), path).run():
            if case["api"] != op:
                continue
            case["source"] = path
            cases.append(case)
    if st_path:
        for raw in json.loads(git_show(git_dir, rev, st_path)):
            inputs = st_inputs(raw)
            case: dict[str, Any] = {"id": f"st:{raw['id']}", "kind": "st", "inputs": inputs}
            if sum(numel(i.get("shape")) for i in inputs if i["type"] == "tensor") > MAX_ELEMENTS:
                case["inputs"] = cap(op, inputs, MAX_ELEMENTS)
                case["cap"] = {"from": {i["name"]: i["shape"] for i in inputs if i["type"] == "tensor"} | {
                                   i["name"]: f"{len(i['values'])} values, max {max(i['values'], default=0)}"
                                   for i in inputs if i["type"] == "int_array"} | {
                                   i["name"]: i["range"] for i in inputs if i["type"] == "attr"}}
            cases.append(case)
    for case in cases:
        mark = mark_for(op, case)
        if mark:
            case["mark"] = mark
        xfail = xfail_for(op, case)
        if xfail:
            case["xfail"] = xfail
    return {"op": op, "ops_nn": {"repository": "hicann/ops-nn", "commit": rev, "unit_tests": ut_paths,
                                 "system_tests": st_path},
            "cap": f"a case with \"cap\" is drawn at <= {MAX_ELEMENTS} elements over its tensors (the CI budget): "
                   "the same ranks, broadcast pattern, dtypes and options, with the sizes and the indices that "
                   "depend on them scaled down (tests/conformance/caps.py); \"from\" holds the case's own values",
            "cases": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("git_dir", help="a local ops-nn git directory (bare is fine)")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--only", nargs="*", help="operators to write (default: all)")
    args = parser.parse_args()
    rev = subprocess.run(["git", f"--git-dir={args.git_dir}", "rev-parse", args.rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    CASES_DIR.mkdir(parents=True, exist_ok=True)
    for op in args.only or SOURCES:
        data = read_operator(args.git_dir, rev, op)
        path = CASES_DIR / f"{op}.json"
        with open(path, "w") as f:   # one case per line: a regenerated file diffs case by case
            head = json.dumps({k: v for k, v in data.items() if k != "cases"})
            f.write(head[:-1] + ', "cases": [\n')
            f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in data["cases"]))
            f.write("\n]}\n")
        ut = sum(c["kind"] == "ut" for c in data["cases"])
        print(f"{path.relative_to(ROOT)}: {ut} unit-test cases, {len(data['cases']) - ut} system-test cases, "
              f"{sum('cap' in c for c in data['cases'])} capped, {sum('mark' in c for c in data['cases'])} marked")


if __name__ == "__main__":
    main()

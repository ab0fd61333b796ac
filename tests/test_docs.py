"""The user's first hour, kept from rotting: the README's snippets run (and check every status they
get), every command's --help is complete, the contract lives in the repository (no file points
outside it, the enum tables of docs/API.md are the package's), the install extras cover both
CUDA majors, and aclGetRecentErrMsg behaves as documented."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def run_python(code: str, device: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, ACLNN_GPU_DEVICE=device, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def two_phase_snippet() -> str:
    (snippet,) = [b for b in python_blocks(README) if "GetWorkspaceSize" in b and "aclmdlRI" not in b]
    return snippet


# ---------------------------------------------------------------------------- README snippets
@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_readme_python_snippets_run(index):
    r = run_python(python_blocks(README)[index], "cpu")
    assert r.returncode == 0, r.stderr


GUIDE_SNIPPETS = [(page.name, i) for page in sorted((ROOT / "docs").glob("*.md"))
                  for i in range(len(python_blocks(page.read_text())))]


@pytest.mark.parametrize("page,index", GUIDE_SNIPPETS, ids=[f"{p}-{i}" for p, i in GUIDE_SNIPPETS])
def test_guide_python_snippets_run(page, index):
    """The guide pages' Python examples run as written, on two virtual cpu devices (DEVICES.md's
    threads use each)."""
    code = python_blocks((ROOT / "docs" / page).read_text())[index]
    env = dict(os.environ, ACLNN_GPU_DEVICE="cpu", ACLNN_GPU_DEVICE_COUNT="2", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_readme_two_phase_snippet_computes_the_documented_result():
    """The snippet's printed result is the KL gradient it says: -target / 32 ("mean")."""
    check = "\nassert np.allclose(result, -target_host / 32, rtol=1e-6), result\nprint('CHECKED')\n"
    cleanup = two_phase_snippet().index("for tensor in (grad")
    r = run_python(two_phase_snippet()[:cleanup] + check, "cpu")
    assert r.returncode == 0 and "CHECKED" in r.stdout, r.stderr


def test_readme_two_phase_snippet_checks_every_status():
    """Every acl* call whose result is a status is passed to check(), or its `ret` is checked by the
    next statement: the snippet cannot print zeros while its calls failed."""
    tree = ast.parse(two_phase_snippet())
    unchecked = []

    def is_acl_call(node):
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "acl"
                and node.func.attr not in ("aclCreateTensor", "aclGetRecentErrMsg"))

    def visit(body):
        for i, stmt in enumerate(body):
            for field in ("body", "orelse"):
                if isinstance(getattr(stmt, field, None), list):
                    visit(getattr(stmt, field))
            if isinstance(stmt, ast.Expr) and is_acl_call(stmt.value):
                unchecked.append(ast.unparse(stmt))          # a status dropped on the floor
            if isinstance(stmt, ast.Assign) and is_acl_call(stmt.value):
                target = stmt.targets[0]
                first = target.elts[0] if isinstance(target, ast.Tuple) else target
                nxt = ast.unparse(body[i + 1]) if i + 1 < len(body) else ""
                if not (isinstance(first, ast.Name) and nxt.startswith(f"check({first.id}")):
                    unchecked.append(ast.unparse(stmt))
    visit(tree.body)
    assert not unchecked, unchecked


def test_readme_two_phase_snippet_fails_loudly_without_a_gpu():
    """Under ACLNN_GPU_DEVICE=cuda on a machine without a GPU the snippet stops at aclrtSetDevice with
    207004 and the library's message, instead of printing zeros."""
    if run_python("import cupy, sys; sys.exit(0 if cupy.is_available() else 1)", "cpu").returncode == 0:
        pytest.skip("a GPU is present: the snippet runs on it")
    r = run_python(two_phase_snippet(), "cuda")
    assert r.returncode != 0
    assert "aclrtSetDevice returned 207004" in r.stderr, r.stderr


# ---------------------------------------------------------------------------- --help texts
HELP_COMMANDS = [["-m", "aclnn_gpu"], ["-m", "bench"], ["-m", "aclnn_gpu.kernels.report"], ["-m", "aclnn_gpu.profile"],
                 ["-m", "aclnn_gpu.profile.ncu_compare"], ["-m", "aclnn_gpu.kernels"], ["scripts/cold_start.py"]] + \
    [[str(p.relative_to(ROOT))] for p in sorted((ROOT / "examples").glob("train_*.py"))] + \
    [["examples/capture_training_step.py"], ["examples/data_parallel_ctc.py"]] + \
    [[f"bench/{op}.py"] for op in ("conv_tbc", "cross_entropy", "ctc_loss", "kl_div", "scaled_masked_softmax")]


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=lambda c: " ".join(c))
def test_help_is_complete(command):
    """--help exits 0, its description is whole sentences (ends with a full stop, not mid-sentence),
    and every option says what it does."""
    r = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr
    usage, _, rest = r.stdout.partition("\n\n")
    description, _, options = rest.partition("\n\n")
    assert " ".join(description.split()).endswith("."), description
    lines = options.splitlines()[1:]                    # after "options:"
    for i, line in enumerate(lines):
        opt = re.match(r"^  (-\S+(?:[ ,]+\S+)*?)(\s{2,}\S.*)?$", line)
        if opt and not opt.group(2):                     # the help text, if any, is on the next line
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            assert re.match(r"^ {10,}\S", nxt), f"{command}: option without help: {line.strip()}"


# ---------------------------------------------------------------------------- the contract in the repository
def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / f for f in out.stdout.split()]


def test_no_file_points_outside_the_repository():
    forbidden = [".." + "/shared", "/work" + "/shared"]           # spelled apart: this file is tracked too
    hits = []
    for path in tracked_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        hits += [f"{path.relative_to(ROOT)}: {f}" for f in forbidden if f in text]
    assert not hits, hits


def test_references_to_the_contract_name_files_that_exist():
    """Modules cite `docs/API.md §N` and `docs/OPERATORS.md §N`: the files exist and have section N."""
    api, ops = (ROOT / "docs/API.md").read_text(), (ROOT / "docs/OPERATORS.md").read_text()
    sections = {"docs/API.md": set(re.findall(r"^## (\d+)\.", api, re.M)),
                "docs/OPERATORS.md": set(re.findall(r"^## (\d+)\.", ops, re.M))}
    bad = []
    for path in tracked_files():
        if path.suffix not in (".py", ".md", ".cu", ".cuh", ".sh"):
            continue
        for doc, number in re.findall(r"(docs/(?:API|OPERATORS)\.md) §(\d+)", path.read_text()):
            if number not in sections[doc]:
                bad.append(f"{path.relative_to(ROOT)}: {doc} §{number}")
    assert not bad, bad


def test_api_reference_enum_tables_are_the_package_enums():
    import enum

    import aclnn_gpu.base.status as status
    api = (ROOT / "docs/API.md").read_text()
    for name in dir(status):
        cls = getattr(status, name)
        if isinstance(cls, type) and issubclass(cls, enum.IntEnum) and cls.__module__ == status.__name__:
            assert f"### `{name}`" in api, name
            for member in cls:
                assert f"| `{member.name}` | {int(member)} |" in api, (name, member.name)


def test_recent_error_message_survives_a_success_as_documented():
    """ACL's rule, documented in docs/API.md §1 and the README: a successful call does not clear
    aclGetRecentErrMsg()."""
    code = (
        "import aclnn_gpu as acl\n"
        "acl.aclInit(None); acl.aclrtSetDevice(0)\n"
        "assert acl.aclrtMalloc(-1, 0)[0] != 0\n"
        "failure = acl.aclGetRecentErrMsg()\n"
        "assert failure and 'aclrtMalloc' in failure, failure\n"
        "ret, ptr = acl.aclrtMalloc(64, 0); assert ret == 0\n"
        "assert acl.aclGetRecentErrMsg() == failure, acl.aclGetRecentErrMsg()\n")
    r = run_python(code, "cpu")
    assert r.returncode == 0, r.stderr
    assert "does not clear" in (ROOT / "docs/API.md").read_text().replace("\n", " ")
    assert "does not clear" in README.replace("\n", " ")


# ---------------------------------------------------------------------------- install extras
def test_extras_cover_both_cuda_majors():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for major, cupy in (("12", "cupy-cuda12x"), ("13", "cupy-cuda13x")):
        names = [re.split(r"[<>=!~ \[]", d)[0] for d in extras[f"cuda{major}"]]
        assert cupy in names
        suffix = "-cu12" if major == "12" else ""
        for wheel in ("nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cublas"):
            assert wheel + suffix in names, (major, wheel)
        assert f"nvidia-nccl-cu{major}" in names
        assert not [n for n in names if n.startswith("cupy") and n != cupy], names   # one CuPy per major
    assert extras["cuda"] == ["aclnn_gpu[cuda13]"]
    assert any(d.startswith("torch") for d in extras["torch"])
    for line in ("pip install -e .", "'.[torch]'", "'.[cuda13]'", "'.[cuda12]'", "scripts/test.sh"):
        assert line in README, line


def test_compile_cuda12_script_reads_its_pins_from_pyproject():
    text = (ROOT / "pyproject.toml").read_text()
    for wheel in ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12"):
        assert re.search(rf'"{wheel}==[0-9.]+"', text), wheel
        assert f"pin {wheel}" in (ROOT / "scripts/compile_cuda12.sh").read_text()


# ---------------------------------------------------------------------------- the generated API reference
def test_sphinx_reference_builds_without_warnings_and_covers_every_public_name(tmp_path):
    """docs/sphinx builds with warnings as errors (the CI step of the `docs` extra) and documents every
    public name of `aclnn_gpu` (acl*, aclnn*, enums, AclnnError, current_device_kind)."""
    import importlib.util
    import zlib
    if importlib.util.find_spec("sphinx") is None or importlib.util.find_spec("myst_parser") is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs the docs extra: Sphinx and myst-parser must be present")
        pytest.skip("Sphinx or myst-parser not installed (the `docs` extra)")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                        str(ROOT / "docs/sphinx"), str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stdout + r.stderr
    raw = (tmp_path / "objects.inv").read_bytes()
    body = zlib.decompress(raw[raw.index(b"zlib") + 5:].split(b"\n", 1)[1]).decode()
    documented = {line.split(" ", 1)[0].rsplit(".", 1)[-1] for line in body.splitlines()}
    import aclnn_gpu
    public = [n for n in dir(aclnn_gpu) if n.startswith(("acl", "Acl", "current_device_kind"))]
    assert len(public) > 50
    missing = [n for n in public if n not in documented]
    assert not missing, missing


def test_readme_says_where_bench_runs():
    """`python -m bench` runs from the repository root (bench/ is not installed): the README says so."""
    text = " ".join(README.split())
    assert "`python -m bench` (run it from the repository root" in text


# ---------------------------------------------------------------------------- the guide
DOCS = ROOT / "docs"
GUIDE_PAGES = sorted(p.name for p in DOCS.glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *(DOCS / name for name in GUIDE_PAGES)] + \
        ([ROOT / "CHANGELOG.md"] if (ROOT / "CHANGELOG.md").exists() else [])


def test_every_docs_page_is_reachable_from_the_readme_and_in_the_sphinx_build():
    """Each docs/*.md is listed by docs/README.md (which the README links), has a stub of its name in
    docs/sphinx/guide/ including it, and that stub is in a toctree of docs/sphinx/index.rst."""
    index = (DOCS / "README.md").read_text()
    toctree = (DOCS / "sphinx" / "index.rst").read_text()
    assert "(docs/README.md)" in README
    for name in GUIDE_PAGES:
        if name != "README.md":
            assert f"]({name})" in index, f"docs/README.md does not list {name}"
        stub = DOCS / "sphinx" / "guide" / name
        assert stub.exists() and f"../../{name}" in stub.read_text(), stub
        assert f"guide/{name[:-3]}\n" in toctree, f"docs/sphinx/index.rst does not list guide/{name[:-3]}"


def test_relative_links_in_the_docs_name_files_that_exist():
    bad = []
    for path in markdown_files():
        for target in LINK.findall(path.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (path.parent / target.split("#")[0]).exists():
                bad.append(f"{path.relative_to(ROOT)}: {target}")
    assert not bad, bad


def test_readme_is_a_front_door():
    """About 250 lines, with the two commands of a fresh machine and a link to each guide page."""
    assert len(README.splitlines()) <= 300, len(README.splitlines())
    assert "python -m aclnn_gpu" in README and "scripts/test.sh" in README
    for name in GUIDE_PAGES:
        if name not in ("README.md", "API.md", "OPERATORS.md"):
            assert f"(docs/{name})" in README, name


def test_the_files_and_modules_the_readme_names_exist():
    """Every repository path (`scripts/...`, `examples/...`, `bench/...`, `docs/...`, `tests/...`) and
    every `python -m` module the README names exists, so its commands can be pasted as written."""
    import importlib.util
    sys.path.insert(0, str(ROOT))
    try:
        paths = set(re.findall(r"\b((?:scripts|examples|bench|docs|tests)/[\w./-]*\w)", README))
        missing = [p for p in sorted(paths) if not (ROOT / p).exists()]
        modules = set(re.findall(r"python -m ([\w.]+)", README)) - {"venv", "pytest", "sphinx"}
        missing += [m for m in sorted(modules) if importlib.util.find_spec(m) is None]
    finally:
        sys.path.remove(str(ROOT))
    assert not missing, missing


def test_no_tracker_numbers_in_the_repository():
    """Code, tests and docs say what a thing is, not which ticket asked for it: no issue number and no
    "#" followed by a number anywhere in the tracked text files (history, dated, goes to CHANGELOG.md
    in words)."""
    tracker = re.compile(r"issue ?#?[0-9]|#[0-9]{2}\b", re.I)
    hits = []
    for path in tracked_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if tracker.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not hits, hits

"""The import structure of `aclnn_gpu` and `bench`, read from the sources (no module is imported):
no two modules import each other, directly or around a circle, and every import goes down the
layer order the docs give (the "## Import layers" section, in docs/DESIGN.md), and each of the
library's layers is one folder (or one module). Imports inside functions count: a function-level
import that closes a circle is still a circle, only postponed. So do the packages an import runs on
the way: importing `a.b.c` from outside `a.b` runs `a/b/__init__.py` first. So do the imports under
`if TYPE_CHECKING:` (they never run, but a type that needs an upper layer is a layering fault all
the same). Beside the imports: no module of the library over 600 lines (the NumPy references
excepted), and every package's `__init__` says what it owns."""
from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("aclnn_gpu", "bench")
HEADING = "## Import layers"

Graph = dict[str, dict[str, tuple[Path, int]]]   # module -> {imported module: (file, line)}


# ------------------------------------------------------------------------------ the import graph
def find_modules(root: Path, packages: tuple[str, ...]) -> dict[str, tuple[Path, bool]]:
    """{dotted module name: (file, is a package's __init__)} of every .py file under the packages."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            modules[".".join(parts)] = (path, is_package)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST, type_checking: bool = False):
    """Every node, function bodies included; the bodies of `if TYPE_CHECKING:` only when `type_checking`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imported_names(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement (or importlib.import_module("literal")) asks for."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        # `from package import name`: the submodule when `name` is one, else the package itself
        return [f"{source}.{alias.name}" for alias in node.names] + [source]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        name = node.args[0].value
        if name.startswith("."):   # relative to the calling package (the `__name__` of a package's __init__)
            base = module if is_package else module.rpartition(".")[0]
            return [base + name]
        return [name]
    return []


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES, type_checking: bool = False) -> Graph:
    modules = find_modules(root, packages)

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: Graph = {}
    for module, (path, is_package) in modules.items():
        edges = graph.setdefault(module, {})
        for node in _nodes(ast.parse(path.read_text(), str(path)), type_checking):
            names = _imported_names(node, module, is_package)
            if isinstance(node, ast.ImportFrom):
                *wanted, source = names
                # a name that is a module imports that module only; any other name, its package
                names = [name if name in modules else source for name in wanted]
            for name in names:
                target = owner(name)
                # the packages above the target that are not already running above this module
                while target is not None and target != module and not module.startswith(target + "."):
                    edges.setdefault(target, (path, node.lineno))
                    target = target.rpartition(".")[0] or None
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe_circle(graph: Graph, component: list[str], root: Path = ROOT) -> str:
    """One circle through the component's first module, each step with the file and line that imports."""
    members, start = set(component), component[0]
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:   # breadth first: the shortest way back to `start`
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w not in members or w in came_from:
                continue
            came_from[w] = v
            if w == start:
                queue.clear()
                break
            queue.append(w)
    steps, w = [], start
    while True:
        v = came_from[w]
        path, line = graph[v][w]
        steps.append(f"{v} -> {w} ({path.relative_to(root)}:{line})")
        w = v
        if w == start:
            break
    return f"import circle among {', '.join(component)}:\n    " + "\n    ".join(reversed(steps))


# ------------------------------------------------------------------------------ the layer order
def documented_layers(text: str) -> list[tuple[str, list[str]]]:
    """[(layer name, [module names])] of the "Import layers" list, lowest layer first."""
    section = re.search(rf"^{HEADING}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, f"no {HEADING!r} section"
    layers = [(m["name"], re.findall(r"`([\w.]+)`", m["modules"]))
              for m in re.finditer(r"^\d+\. (?P<name>[^:\n]+): (?P<modules>.+(?:\n +\S.*)*)", section[1], re.M)]
    assert layers, f"the {HEADING!r} section lists no layer"
    return layers


def layer_of(module: str, layers: list[tuple[str, list[str]]]) -> int | None:
    """The index of the layer whose longest name covers `module` (the module itself or a package above it)."""
    best, best_length = None, -1
    for i, (_, names) in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best_length:
                best, best_length = i, len(name)
    return best


def upward_imports(graph: Graph, layers: list[tuple[str, list[str]]], root: Path = ROOT) -> list[str]:
    wrong = []
    for module, edges in sorted(graph.items()):
        here = layer_of(module, layers)
        for target, (path, line) in sorted(edges.items()):
            there = layer_of(target, layers)
            if here is not None and there is not None and there > here:
                wrong.append(f"{path.relative_to(root)}:{line}: {module} (layer {layers[here][0]!r}) imports "
                             f"{target} (layer {layers[there][0]!r}, above it)")
    return wrong


# ------------------------------------------------------------------------------ the project
@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph(type_checking=True)


@pytest.fixture(scope="module")
def layers() -> list[tuple[str, list[str]]]:
    # found by its heading, wherever the docs keep it
    (doc,) = [path for path in sorted((ROOT / "docs").rglob("*.md")) if f"\n{HEADING}\n" in path.read_text()]
    return documented_layers(doc.read_text())


def test_no_import_circle(graph):
    found = [describe_circle(graph, component) for component in circles(graph)]
    assert not found, "\n".join(found)


def test_every_import_goes_down_the_layers(graph, layers):
    wrong = upward_imports(graph, layers)
    assert not wrong, "imports against the documented layer order:\n" + "\n".join(wrong)


def test_every_module_has_a_layer_and_every_listed_name_exists(graph, layers):
    assert [m for m in graph if layer_of(m, layers) is None] == []
    listed = [name for _, names in layers for name in names]
    assert [name for name in listed if name not in graph] == [], "the layer list names modules that do not exist"
    assert len(listed) == len(set(listed)), "the layer list names a module twice"


def test_the_graph_sees_the_kinds_of_import(graph):
    # the project's own: a package's relative import, a function-level import, importlib with a literal
    assert "aclnn_gpu.ops.kl_div.launch" in graph["aclnn_gpu.ops.kl_div.api"]
    assert "aclnn_gpu.emulator" in graph["aclnn_gpu.device.emulated"]   # inside a method
    assert "aclnn_gpu.functional" in graph["aclnn_gpu"]                         # importlib.import_module
    assert "aclnn_gpu.kernels.context" in graph["aclnn_gpu.kernels.manifest"]   # under TYPE_CHECKING
    assert "aclnn_gpu.kernels.context" not in import_graph()["aclnn_gpu.kernels.manifest"]   # (left out on request)


LIBRARY = "aclnn_gpu"
LONGEST_MODULE = 600   # lines
EXEMPT = ("aclnn_gpu/reference/",)   # the NumPy references: one operator's whole math in one file


def test_each_layer_of_the_library_is_one_folder_or_module(layers):
    modules = find_modules(ROOT, (LIBRARY,))
    for name, names in layers:
        if not names[0].startswith(LIBRARY):
            continue
        assert len(names) == 1, f"layer {name!r} lists {names}: one folder (or module) per layer of the library"
        assert names[0] in modules, f"layer {name!r}: {names[0]} is no module or package"


def test_no_module_of_the_library_is_over_600_lines():
    long = [f"{path.relative_to(ROOT)}: {n} lines" for path in sorted((ROOT / LIBRARY).rglob("*.py"))
            if not str(path.relative_to(ROOT)).startswith(EXEMPT)
            and (n := len(path.read_text().splitlines())) > LONGEST_MODULE]
    assert not long, f"modules over {LONGEST_MODULE} lines (cut them by concern):\n" + "\n".join(long)


def test_every_package_says_what_it_owns_and_the_layers_say_which_layer(layers):
    docs = {name: ast.get_docstring(ast.parse(path.read_text())) or ""
            for name, (path, is_package) in find_modules(ROOT, (LIBRARY,)).items() if is_package}
    for name, doc in docs.items():
        assert len(doc) > 40, f"{name}: no docstring saying what the package owns"
    for number, (layer, names) in enumerate(layers, 1):
        if names[0] != LIBRARY and names[0] in docs:   # a layer that is a package below the root
            assert f"layer {number}" in docs[names[0]].lower(), \
                f"{names[0]}: its docstring does not say it is layer {number} ({layer})"


# ------------------------------------------------------------------------------ the checker can fail
def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_circle_through_a_function_level_import_is_found_and_named(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from .high import g\n    return g\n",
        "pkg/high.py": "from . import low\n",
        "pkg/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import g\n",
        "pkg/sub/__init__.py": "from ..low import f\n",
        "pkg/sub/inner.py": "",
        "pkg/user.py": "import pkg.sub.inner\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.typed"] == {} and set(graph["pkg.sub"]) == {"pkg.low"}
    assert set(graph["pkg.user"]) == {"pkg.sub.inner", "pkg.sub"}   # the package runs first, not pkg itself
    (component,) = circles(graph)
    assert component == ["pkg.high", "pkg.low"]
    text = describe_circle(graph, component, tmp_path)
    assert "pkg.high -> pkg.low (pkg/high.py:1)" in text and "pkg.low -> pkg.high (pkg/low.py:2)" in text


def test_a_circle_through_a_package_init_is_found(tmp_path):
    # importing pkg.box.state runs pkg/box/__init__.py, which imports the importer back
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/core.py": "from .box import state\n",
        "pkg/box/__init__.py": "from .api import f\n",
        "pkg/box/api.py": "from ..core import g\n",
        "pkg/box/state.py": "",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert circles(graph) == [["pkg.box", "pkg.box.api", "pkg.core"]]


def test_an_import_up_the_layers_is_reported(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/base.py": "import pkg.top\n", "pkg/top.py": ""})
    graph = import_graph(tmp_path, ("pkg",))
    layers = documented_layers("## Import layers\n\n1. low: `pkg.base`,\n   `pkg.low`\n2. high: `pkg`\n\n## Next\n")
    assert layers == [("low", ["pkg.base", "pkg.low"]), ("high", ["pkg"])]
    assert layer_of("pkg.base", layers) == 0 and layer_of("pkg.top", layers) == 1
    (line,) = upward_imports(graph, layers, tmp_path)
    assert line == "pkg/base.py:1: pkg.base (layer 'low') imports pkg.top (layer 'high', above it)"


def _families() -> tuple[str, ...]:
    """The families ops/registry.py lists (read from its source: no import)."""
    tree = ast.parse((ROOT / LIBRARY / "ops" / "registry.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "FUNCTIONAL" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("ops/registry.py lists no FUNCTIONAL families")


def _code_words(tree: ast.AST) -> set[str]:
    """The names, attributes, imported modules and string constants of a module's code (docstrings
    and comments left out: they may name a family as an example)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.alias):
            words.add(node.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            words.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.add(node.value)
    return words


def test_an_operator_family_is_named_only_in_its_own_folder():
    """Adding a family touches its folder, the registry, its kernels and its NumPy reference: no other
    module of the library names it in code (docs/DESIGN.md, "Adding an operator")."""
    families = _families()
    assert len(families) >= 5
    # the profiler's latency model of the CTC recursions: a study of one kernel (built on the model's own
    # types, which its sensitivity analysis varies), not something a new family adds to
    exempt = {("profile/latency.py", "ctc_loss")}
    patterns = {f: re.compile(rf"(?<![A-Za-z0-9]){f}(?![A-Za-z0-9])|{''.join(w.title() for w in f.split('_'))}")
                for f in families}
    found = []
    for path in sorted((ROOT / LIBRARY).rglob("*.py")):
        relative = path.relative_to(ROOT / LIBRARY).as_posix()
        words = _code_words(ast.parse(path.read_text()))
        for family, pattern in patterns.items():
            if (relative.startswith(f"ops/{family}/") or relative in (f"reference/{family}.py", "ops/registry.py")
                    or (relative, family) in exempt):
                continue
            named = sorted(w for w in words if pattern.search(w))
            if named:
                found.append(f"{relative} names {family}: {named[:4]}")
    assert not found, "families named outside their folders:\n" + "\n".join(found)

"""The one direction of dependence between qsynth's packages (docs/architecture.md):

    isa_specs <- sketches <- synth (the verifier) <- emit <- tvm_integration <- qsynth (the application)

A module may import only from its own package or from packages before it, wherever the import
statement sits (module top or inside a function), and neither the subpackages of one package nor its
modules import each other in a cycle. Read from the source with ``ast``, so a violation fails here before it runs.

Inside the model pipeline (tvm_integration/qnn/), the folders follow one order too (``QNN_ORDER``:
prim <- semantics <- float <- the frontends and lower <- runtime); each frontend only reads its format
into the shared integer ops: no ONNX module imports a TFLite one or the reverse, and TVM's Relax
frontend is touched only by the ONNX importer.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORDER = ("isa_specs", "sketches", "synth", "emit", "tvm_integration", "qsynth")
NOT_LIBRARY = ("scripts", "tests")          # their users; no package imports them

# tvm_integration/qnn/'s folders in order: a module may import from its own folder or from one on an
# earlier line. The frontends and the lowering share a line: none of them imports another.
QNN = "tvm_integration.qnn"
QNN_ORDER = (("prim",), ("semantics",), ("float",), ("onnx", "tflite", "lower"), ("runtime",))
# The module cycles not broken yet, each hidden by an import inside a function. A new one fails, and so
# does one listed here that is gone: the list only shrinks.
KNOWN_CYCLES = [
    ["synth.kernel", "synth.trust"],                            # trust re-proves an entry with kernel.verify
    ["tvm_integration.qnn.runtime.arm_model", "tvm_integration.qnn.runtime.model"],  # ArmModel is a CompiledModel
]
# TVM's Relax frontend: our ONNX importer subclasses its converters and graph importer; elsewhere only
# its public ``from_onnx``, in bench/models.py, which times TVM's own import as the tvm_default baseline.
RELAX_FRONTEND = "tvm.relax.frontend"
FRONTEND_USERS = {f"{QNN}.onnx.importer": None, "tvm_integration.bench.models": {"tvm.relax.frontend.onnx.from_onnx"}}


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in ``source``, relative imports resolved against
    ``module`` (the importing module's dotted name)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[:-node.level]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            # ``from package import module`` imports the module: name each one
            out += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return out


def _modules():
    for package in ORDER:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            yield path, ".".join(parts), ".".join(path.relative_to(ROOT).parts[:-1])


def violations(modules) -> list[str]:
    """Imports against ``ORDER`` from ``modules`` = [(path, dotted name, dotted package)]."""
    rank = {p: i for i, p in enumerate(ORDER)}
    found = []
    for path, module, _ in modules:
        own = module.split(".")[0]
        for line, name in imported_modules(Path(path).read_text(), module):
            top = name.split(".")[0]
            if top in NOT_LIBRARY or (top in rank and rank[top] > rank[own]):
                found.append(f"{Path(path).relative_to(ROOT)}:{line} {module} imports {name} "
                             f"({own} comes before {top})")
    return found


def package_cycles(modules) -> list[list[str]]:
    """Cycles in the graph of (sub)packages, an edge wherever a module of one imports the other."""
    packages = {package for _, _, package in modules}
    edges = defaultdict(set)
    for path, module, package in modules:
        for _, name in imported_modules(Path(path).read_text(), module):
            target = max((p for p in packages if name == p or name.startswith(p + ".")), key=len, default=None)
            if target and target != package:
                edges[package].add(target)
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for p in sorted(packages):
        if p not in state:
            visit(p, [p])
    return cycles


def module_cycles(modules) -> list[list[str]]:
    """The groups of modules that import each other in a cycle (strongly connected components of more
    than one module), each sorted; an import of a name resolves to the module that defines it."""
    names = {module for _, module, _ in modules}
    edges = defaultdict(set)
    for path, module, _ in modules:
        for _, name in imported_modules(Path(path).read_text(), module):
            while name and name not in names:
                name = name.rpartition(".")[0]
            if name and name != module:
                edges[module].add(name)
    order, low, stack, groups = {}, {}, [], []

    def visit(node):                     # Tarjan's algorithm
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            group = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(names):
        if node not in order:
            visit(node)
    return sorted(groups)


def _library_and_scripts():
    yield from _modules()
    for path in sorted((ROOT / "scripts").rglob("*.py")):
        yield path, ".".join(path.relative_to(ROOT).with_suffix("").parts), "scripts"


def _within(name: str, modules) -> str | None:
    return next((m for m in modules if name == m or name.startswith(m + ".")), None)


def qnn_folder(module: str) -> str | None:
    """The folder of tvm_integration/qnn/ that holds ``module``, or None outside them."""
    parts = module.split(".")
    return parts[2] if module.startswith(QNN + ".") and len(parts) > 3 else None


def qnn_order_violations(modules) -> list[str]:
    """Imports by a module of one qnn folder of a module of a folder later in QNN_ORDER, or of another
    folder on its own line (one frontend importing the other, or a frontend the lowering)."""
    rank = {folder: i for i, line in enumerate(QNN_ORDER) for folder in line}
    found = []
    for path, module, _ in modules:
        own = qnn_folder(module)
        for line, name in imported_modules(Path(path).read_text(), module) if own else ():
            other = qnn_folder(name)
            if other and other != own and rank[other] >= rank[own]:
                found.append(f"{module}:{line} ({own}) imports {name} ({other})")
    return found


def relax_frontend_uses(modules) -> list[str]:
    """Every import of ``tvm.relax.frontend`` (or attribute ``relax.frontend``) outside FRONTEND_USERS,
    and every name a user imports from it beyond those it is allowed."""
    found = []
    for path, module, _ in modules:
        source = Path(path).read_text()
        allowed = FRONTEND_USERS.get(module, set())
        uses = [(line, name) for line, name in imported_modules(source, module) if _within(name, {RELAX_FRONTEND})]
        uses += [(node.lineno, RELAX_FRONTEND) for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.Attribute) and node.attr == "frontend"
                 and ast.unparse(node.value).split(".")[-1] == "relax"]
        found += [f"{module}:{line} uses {name}" for line, name in uses if allowed is not None and name not in allowed]
    return found


def test_every_import_follows_the_package_order():
    assert violations(list(_modules())) == []


def test_no_cycle_between_subpackages():
    assert package_cycles(list(_modules())) == []


def test_no_cycle_between_modules():
    assert module_cycles(list(_modules())) == KNOWN_CYCLES


def test_qnn_folders_import_one_way():
    folders = {qnn_folder(module) for _, module, _ in _modules()} - {None}
    assert folders == {f for line in QNN_ORDER for f in line}      # a new folder takes its place here
    assert qnn_order_violations(list(_modules())) == []


def test_only_the_onnx_importer_uses_tvms_relax_frontend():
    assert relax_frontend_uses(list(_library_and_scripts())) == []


def test_no_module_over_500_lines():
    """One idea per module: nothing outside the instruction tables (one row per instruction) and the
    tests grows past 500 lines."""
    from isa_specs import ISA_NAMES
    tables = {ROOT / "isa_specs" / f"{name}.py" for name in ISA_NAMES}
    long = [f"{path.relative_to(ROOT)}: {n} lines"
            for package in (*ORDER, "scripts") for path in sorted((ROOT / package).rglob("*.py"))
            if path not in tables and (n := len(path.read_text().splitlines())) > 500]
    assert long == []


def test_the_check_sees_a_late_import_and_a_cycle(tmp_path):
    """The checks above can fail: a verifier module importing the application from inside a
    function, two subpackages importing each other, and two modules, one from inside a function."""
    (tmp_path / "synth").mkdir()
    bad = tmp_path / "synth" / "late.py"
    bad.write_text("def f():\n    from qsynth.commands import demo\n    from . import cache\n")
    for name, text in (("a", "from b import x\n"), ("b", "import a.y\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.py").write_text(text)
    (tmp_path / "a" / "p.py").write_text("def f():\n    from a.q import x\n")
    (tmp_path / "a" / "q.py").write_text("from a import p\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = violations([(bad, "synth.late", "synth")])
        cycles = package_cycles([(tmp_path / "a" / "m.py", "a.m", "a"), (tmp_path / "b" / "m.py", "b.m", "b")])
        modules = module_cycles([(tmp_path / "a" / "p.py", "a.p", "a"), (tmp_path / "a" / "q.py", "a.q", "a")])
    finally:
        ROOT = saved
    assert found == ["synth/late.py:2 synth.late imports qsynth.commands.demo (synth comes before qsynth)"]
    assert cycles == [["a", "b", "a"]]
    assert modules == [["a.p", "a.q"]]


@pytest.mark.parametrize("source, module, want", [
    ("from . import cache", "synth.kernel", ["synth.cache"]),
    ("from ..lanes import NUMPY", "isa_specs.sub.mod", ["isa_specs.lanes.NUMPY"]),
    ("import tvm_integration.ops.gemm as g", "qsynth.cli", ["tvm_integration.ops.gemm"]),
])
def test_imports_are_resolved(source, module, want):
    assert [name for _, name in imported_modules(source, module)] == want


def test_the_qnn_check_sees_an_import_against_the_order(tmp_path):
    """A prim module importing a float one, and one frontend the other inside a function, both fail;
    a frontend importing semantics does not."""
    cases = {"prim.a": "from tvm_integration.qnn.float import float_ops\n",
             "onnx.b": "def f():\n    from tvm_integration.qnn.tflite.importer import read\n",
             "tflite.c": "from tvm_integration.qnn.semantics import quant\n"}
    modules = []
    for name, text in cases.items():
        (path := tmp_path / f"{name}.py").write_text(text)
        modules.append((path, f"{QNN}.{name}", f"{QNN}.{name.split('.')[0]}"))
    assert qnn_order_violations(modules) == [
        f"{QNN}.prim.a:1 (prim) imports {QNN}.float.float_ops (float)",
        f"{QNN}.onnx.b:2 (onnx) imports {QNN}.tflite.importer.read (tflite)"]


def test_pyproject_lists_every_package():
    """A package missing from pyproject.toml's explicit list is missing from a (non-editable) install."""
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for package in ORDER for init in (ROOT / package).rglob("__init__.py")}
    assert listed == found

"""Layering (STYLE §1, §8; issue 22): one-way package order, no import cycle, no hidden imports.

The packages import one way: ``poem`` ← ``data_checks`` ← ``flows``, and ``deploy`` (serving:
the pyfunc, request parsing, the decision log) sits on ``poem`` below ``flows``. The module
graph is built from the AST of every ``.py`` file of the four packages: top-level and
function-level imports, and the literal names of :class:`flows.commands.Deferred` (the CLI's
imports made when a command runs). It must be acyclic, and no function imports a project
package (third-party optional imports, e.g. ``distributed``, are fine).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("poem", "data_checks", "flows", "deploy")
# package -> the project packages it may import (besides itself)
ALLOWED = {
    "poem": set(),
    "data_checks": {"poem"},
    "deploy": {"poem"},
    "flows": {"poem", "data_checks", "deploy"},
}
# Import-cycle edges allowed (none).
KNOWN_CYCLE_EDGES: set[tuple[str, str]] = set()
# Function-local project imports allowed (path, imported module): none.
KNOWN_LOCAL_IMPORTS: set[tuple[str, str]] = set()


def _imports(package: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(REPO)))
    return found


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the four packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _deferred_name(node: ast.AST) -> str | None:
    """The module of a ``Deferred("a.b")`` call (None for any other node)."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Deferred"):
        return None
    arg = node.args[0] if node.args else None
    assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), ast.dump(node)
    return arg.value


def _import_nodes(module: str, path: Path) -> list[tuple[ast.AST, list[str], bool]]:
    """(node, imported dotted names, inside a function) of every import of ``module``."""
    out = []

    def visit(node: ast.AST, in_function: bool) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, *([node.module] if node.module else [])])
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        elif (name := _deferred_name(node)) is not None:
            names = [name]
        if names:
            out.append((node, names, in_function))
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text(), filename=str(path)), False)
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` denotes (``a.b.func`` -> ``a.b``), or None (third party)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node, names, _ in _import_nodes(module, path):
            if isinstance(node, ast.ImportFrom):  # `from a import b`: a.b if a module, else a
                base, members = names[-1], names[:-1]
                targets = [m if m in modules else base for m in members]
            else:
                targets = names
            for target in targets:
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != module:
                    graph[module].add(resolved)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path a -> ... -> a), or None when it is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_flows_never_import_numpy():
    imports = _imports("flows")
    assert "numpy" not in imports, imports.get("numpy")
    assert "prefect" in imports and "mlflow" in imports  # the scan sees real imports


@pytest.mark.parametrize("forbidden", ["prefect", "mlflow", "great_expectations"])
def test_poem_never_imports_pipeline_stack(forbidden):
    imports = _imports("poem")
    assert forbidden not in imports, imports.get(forbidden)
    assert "numpy" in imports


def test_packages_import_one_way():
    graph = _graph()
    wrong = sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if b.split(".")[0] != a.split(".")[0] and b.split(".")[0] not in ALLOWED[a.split(".")[0]]
    )
    assert wrong == []
    # the graph sees real edges of each kind (top level, Deferred, relative imports)
    assert "deploy.pyfunc" in graph["flows.registry"]
    assert "flows.registry" in graph["flows.commands.rollback"]  # Deferred("flows.registry")
    assert "flows.retrain" in graph["flows.closed_loop"]


def test_the_module_import_graph_is_acyclic():
    graph = _graph()
    for a, b in KNOWN_CYCLE_EDGES:
        assert b in graph[a], f"{a} -> {b} is gone: delete it from KNOWN_CYCLE_EDGES"
        graph[a].discard(b)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_cycle_through_other_modules():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_function_imports_a_project_package():
    modules = _modules()
    local = set()
    for module, path in modules.items():
        for node, names, in_function in _import_nodes(module, path):
            if not in_function or isinstance(node, ast.Call):
                continue
            imported = [names[-1]] if isinstance(node, ast.ImportFrom) else names
            local |= {
                (str(path.relative_to(REPO)), name)
                for name in imported
                if name.split(".")[0] in PACKAGES
            }
    assert local - KNOWN_LOCAL_IMPORTS == set()
    assert KNOWN_LOCAL_IMPORTS - local == set(), "gone: delete them from KNOWN_LOCAL_IMPORTS"


def test_deferred_modules_are_declared_at_the_top_of_command_modules():
    modules = _modules()
    for module, path in modules.items():
        for node, names, in_function in _import_nodes(module, path):
            if isinstance(node, ast.Call):
                where = str(path.relative_to(REPO))
                assert where.startswith("flows/commands/") and not in_function, where
                assert names[0] in modules, names


def test_help_and_serving_import_no_heavy_or_upper_layer():
    """``--help`` builds every parser without Prefect/MLflow/GX/numpy; ``deploy`` without flows."""
    help_check = (
        "import sys\nfrom flows.cli import build_parser\nbuild_parser()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'numpy', 'prefect', 'mlflow', 'great_expectations', 'sklearn', 'poem', 'data_checks'}))"
    )
    serve_check = (
        "import sys\nimport deploy.pyfunc, deploy.serve\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'flows', 'prefect', 'data_checks', 'great_expectations'}))"
    )
    for script in (help_check, serve_check):
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[]", (script, done.stdout)

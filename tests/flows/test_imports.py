"""Layering (STYLE §1, §8): ``flows/`` never imports numpy; ``poem/`` no pipeline stack."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


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


def test_flows_never_import_numpy():
    imports = _imports("flows")
    assert "numpy" not in imports, imports.get("numpy")
    assert "prefect" in imports and "mlflow" in imports  # the scan sees real imports


@pytest.mark.parametrize("forbidden", ["prefect", "mlflow", "great_expectations"])
def test_poem_never_imports_pipeline_stack(forbidden):
    imports = _imports("poem")
    assert forbidden not in imports, imports.get(forbidden)
    assert "numpy" in imports

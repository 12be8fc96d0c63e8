"""The documentation site builds with no warnings, and its results page is the benchmarks' JSON.

``mkdocs build --strict`` (``mkdocs.yml``: broken links, anchors and pages missing from the nav
are warnings, so errors here) runs in CI through ``.ci/test``. ``docs/changes/`` holds notes for
the coordinator and is never built.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _results_page():
    spec = importlib.util.spec_from_file_location(
        "results_page", REPO / "benchmarks" / "results_page.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(docs_root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(docs_root / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_mkdocs_build_strict_passes_with_no_warnings(tmp_path):
    done = _build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    for page in ("index", "your-own-log", "gate", "results", "team"):
        assert (tmp_path / "site" / page / "index.html").is_file() or page == "index"
    assert (tmp_path / "site" / "index.html").is_file()
    assert not (tmp_path / "site" / "changes").exists()


def test_a_broken_link_fails_the_strict_build_and_changes_notes_are_not_built(tmp_path):
    """The check has teeth: a link to a missing page is a failure; a note in changes/ is not."""
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(REPO / "docs", copy / "docs")
    (copy / "docs" / "changes").mkdir(exist_ok=True)
    (copy / "docs" / "changes" / "someone.md").write_text("see [nowhere](missing.md)\n")
    assert _build(copy, tmp_path / "site").returncode == 0
    with open(copy / "docs" / "gate.md", "a") as fh:
        fh.write("\nSee [a page that is not there](no-such-page.md).\n")
    done = _build(copy, tmp_path / "site2")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr


def test_results_page_equals_the_rendering_of_the_committed_json():
    module = _results_page()
    results = module.load_results()
    assert len(results) >= 15, sorted(results)
    for name, record in results.items():
        assert record["command"].startswith("python benchmarks/"), (name, record["command"])
        assert record["date"][:4] == "2026", (name, record["date"])
    assert module.PAGE.read_text(encoding="utf-8") == module.render(results), (
        "docs/results.md is stale: run python benchmarks/results_page.py"
    )


def test_a_figure_changed_in_its_json_changes_the_page(tmp_path):
    module = _results_page()
    for path in module.RESULTS.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    record = json.loads((tmp_path / "serving_latency.json").read_text())
    record["summary"]["figure"] = "p50 ratio 0.42 (edited)"
    (tmp_path / "serving_latency.json").write_text(json.dumps(record))
    page = module.render(module.load_results(tmp_path))
    assert "p50 ratio 0.42 (edited)" in page
    assert page != module.PAGE.read_text(encoding="utf-8")


def test_a_result_without_its_command_is_refused(tmp_path):
    module = _results_page()
    (tmp_path / "x.json").write_text(
        json.dumps({"benchmark": "x", "title": "X", "date": "2026-01-01"})
    )
    with pytest.raises(ValueError, match=r"x\.json: missing key\(s\) \['command'\]"):
        module.load_results(tmp_path)

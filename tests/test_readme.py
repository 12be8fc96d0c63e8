"""The README works verbatim: its ``<!-- runnable -->`` bash blocks run, in order, in a fresh folder.

Each marked block runs with ``bash -euo pipefail`` in one temporary folder (the blocks build on
each other as a reader's shell would: the demo's store serves the later blocks), with the
environment the Quick start activates (the interpreter's ``bin/`` on ``PATH``, ``.ci/env.sh``)
and none of the caller's MLflow/Prefect targets. A sibling ``shared`` link makes ``../shared``
resolve when the repository's sibling exists; blocks mentioning it are skipped otherwise. The
serving port 5001 is replaced by a free port so parallel test runs do not collide.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARK = "<!-- runnable -->"


def runnable_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, body) of every bash block whose fence follows the runnable mark."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```bash":
            raise AssertionError(f"README line {i + 1}: {MARK} must precede a ```bash fence")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
        blocks.append((i + 3, "\n".join(lines[i + 2 : end])))
    return blocks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_marks_blocks_and_uses_one_way_to_call_the_tools():
    text = README.read_text()
    blocks = runnable_blocks(text)
    assert len(blocks) >= 3, blocks
    bodies = "\n".join(body for _, body in blocks)
    for command in ("poem-pipeline demo", "poem-pipeline retrain", "curl"):
        assert command in bodies, command
    # activation is stated once; no block calls tools through .venv/bin
    fenced = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    assert not [b for b in fenced if ".venv/bin/" in b and "activate" not in b]


@pytest.mark.slow
@pytest.mark.readme
def test_runnable_readme_blocks_work_verbatim(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    shared = REPO.parent / "shared"
    if shared.is_dir():
        (tmp_path / "shared").symlink_to(shared)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    port = str(_free_port())
    ran = []
    for line, body in runnable_blocks(README.read_text()):
        if "../shared" in body and not shared.is_dir():
            continue
        script = f"source {REPO / '.ci' / 'env.sh'}\n{body.replace('5001', port)}\n"
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, (
            f"README block at line {line} failed (exit {done.returncode}):\n{body}\n"
            f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        )
        ran.append((body, done.stdout))
    outputs = "\n".join(out for _, out in ran)
    # the demo, in an empty folder: day 1 promoted v1; day 2's better challenger is promoted
    # against the policy champion v1 (total-variation terms, no declared floor needed)
    assert "decision=promoted champion=2" in outputs
    assert re.search(r'"propensity": 0\.\d+', outputs)  # a real prediction from the server
    assert re.search(r"^decision=(promoted|rejected) champion=\d+$", outputs, flags=re.M)

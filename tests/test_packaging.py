"""What every user of the repository sees: the build metadata and the quiet environment."""

from __future__ import annotations

import os
import pydoc
import subprocess
import sys
import tomllib
from pathlib import Path

from poem.learners import POEM

REPO = Path(__file__).resolve().parents[1]


def test_license_is_an_spdx_string_with_a_setuptools_that_reads_it():
    """A TOML-table license makes setuptools print 52 lines of BuildBackendWarning per install."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    assert "setuptools>=77" in pyproject["build-system"]["requires"]  # PEP 639 support


def test_env_sh_silences_mlflow_info_lines(tmp_path):
    """Creating a store and an experiment printed three ``INFO mlflow...`` lines."""
    script = (
        f"source {REPO / '.ci' / 'env.sh'} && {sys.executable} -c "
        "\"import mlflow; mlflow.set_tracking_uri('sqlite:///store.db'); "
        "mlflow.set_experiment('quiet'); print('ok')\""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    out = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok\n" and " INFO " not in out.stderr, out.stderr


def test_poem_help_names_the_clip_without_a_dangling_symbol():
    text = pydoc.render_doc(POEM, renderer=pydoc.plaintext)
    assert "no clipping, i.e. M." not in text
    assert "None for no clip), i.e. M." in text

"""A tracking store on a PostgreSQL server with a password (issue 37, items 3 and 8): the
password is never written to the store, the artifacts or Prefect, and a wrong one is reported
in one line within seconds. A real PostgreSQL 15 (``initdb``/``pg_ctl``, run as the
unprivileged ``postgres`` user when we are root), password authentication (SCRAM) on
127.0.0.1, a free port; stopped and removed at the end of the module."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from flows.cli import main

PASSWORD = "Pw-9f3kq-s3cret"  # a string no other part of the store holds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _missing_tools() -> list[str]:
    missing = [t for t in ("initdb", "pg_ctl", "psql") if shutil.which(t) is None]
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            missing.append("runuser")
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            missing.append("the user postgres (PostgreSQL refuses to run as root)")
    return missing


@pytest.fixture(scope="module")
def postgres():
    """``(port, root)`` of a running PostgreSQL with the user ``postgres`` / :data:`PASSWORD`
    and a database ``mlflow``."""
    missing = _missing_tools()
    if missing:
        message = f"these tests need {', '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="poem-pg-"))
    root.chmod(0o755)
    pwfile = root / "pwfile"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(pwfile, "postgres")
    port = _free_port()
    data = root / "data"
    try:
        subprocess.run(
            [*as_postgres, "initdb", "-D", str(data), "-U", "postgres", "--no-sync"]
            + ["--auth=scram-sha-256", f"--pwfile={pwfile}"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [*as_postgres, "pg_ctl", "-D", str(data), "-o", options, "-l", str(root / "log")]
            + ["-w", "start"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            ["psql", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres"]
            + ["-c", "CREATE DATABASE mlflow"],
            check=True,
            capture_output=True,
            timeout=60,
            env={**os.environ, "PGPASSWORD": PASSWORD},
        )
        yield port, root
    finally:
        subprocess.run(
            [*as_postgres, "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


def _config(tmp_path: Path, uri: str) -> Path:
    import yaml

    config = tmp_path / "mlflow.yml"
    config.write_text(
        yaml.safe_dump(
            {"tracking": {"uri": uri, "artifact_location": str(tmp_path / "mlartifacts")}}
        )
    )
    return config


def test_a_wrong_database_password_is_one_line_within_seconds(postgres, tmp_path, capsys):
    """It was reported after 2-3 minutes of silence (MLflow's hidden connection retries)."""
    port, _ = postgres
    uri = f"postgresql://postgres:not-{PASSWORD}@127.0.0.1:{port}/mlflow"
    config = _config(tmp_path, uri)
    for command in (["rollback"], ["compare"], ["retrain", "--logs", str(tmp_path)]):
        started = time.monotonic()
        code = main([*command, "--config", str(config)])
        elapsed = time.monotonic() - started
        err = capsys.readouterr().err
        assert code == 1, (command, err)
        assert len(err.splitlines()) == 1, err
        assert (
            f"cannot connect to the tracking database postgresql://postgres:***@127.0.0.1:{port}"
            f'/mlflow: connection to server at "127.0.0.1", port {port} failed: FATAL: '
            'password authentication failed for user "postgres"'
        ) in err, err
        assert PASSWORD not in err
        assert elapsed < 20, (command, elapsed)  # MLflow alone: minutes


def _store_text(port: int) -> str:
    """Every row of every table of the ``mlflow`` database, as text."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(
        f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/mlflow",
        poolclass=sqlalchemy.pool.NullPool,
    )
    rows = []
    with engine.connect() as db:
        tables = db.execute(
            sqlalchemy.text(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ).scalars()
        for table in list(tables):
            rows += db.execute(sqlalchemy.text(f'SELECT t::text FROM "{table}" t')).scalars()
    engine.dispose()
    return "\n".join(rows)


def _files_holding(root: Path, secret: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_a_database_password_is_in_no_param_tag_artifact_or_prefect_record(
    postgres, tmp_path, logs_dir, write_config
):
    """``tracking.uri: postgresql://user:PW@host/db`` was logged in clear as the param
    ``tracking.uri`` and in ``config/resolved.yml``."""
    from prefect.settings import get_current_settings

    from flows.config import load_config
    from flows.retrain import retrain
    from flows.tracking import client_for

    port, _ = postgres
    uri = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/mlflow"
    config = write_config(logs_dir / "good", tracking={"uri": uri})
    result = retrain(config)
    assert result.challenger_version == "1"
    client = client_for(load_config(config).tracking)
    run = client.get_run(result.mlflow_run_id)
    assert run.data.params["tracking.uri"] == (f"postgresql://postgres:***@127.0.0.1:{port}/mlflow")
    resolved = client.download_artifacts(run.info.run_id, "config/resolved.yml", str(tmp_path))
    assert f"uri: postgresql://postgres:***@127.0.0.1:{port}/mlflow" in Path(resolved).read_text()
    store = _store_text(port)
    assert "postgres:***@" in store and run.info.run_id in store  # the search reads the store
    assert PASSWORD not in store
    assert _files_holding(tmp_path / "mlartifacts", PASSWORD.encode()) == []
    prefect_db = get_current_settings().server.database.connection_url
    prefect_file = Path(prefect_db.get_secret_value().split(":///", 1)[1])
    assert prefect_file.is_file()
    assert PASSWORD.encode() not in prefect_file.read_bytes()  # flow runs, logs, artifacts

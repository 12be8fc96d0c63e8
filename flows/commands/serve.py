"""``poem-pipeline serve``: serve the champion (or ``--version N``) after verifying it.

The version's model folder is downloaded and checked against the digests recorded at
registration (its files, the model code MLflow imports, the policy) *before* anything in it is
imported; then ``mlflow models serve -m <that folder> --env-manager local`` serves exactly what
was checked, on 127.0.0.1 by default. A deleted or edited model is refused in one line naming
the version and the file, and nothing is served. Answers carry the version
(``model_version``). Stop it with Ctrl-C or SIGTERM (the server stops with it).

Exit codes: 0 when the server was stopped, 1 when the version is refused or cannot be read
(or the server failed), 2 for an invalid config.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flows.commands import Deferred, command_parser
from flows.commands._console import EXIT_CONFIG, EXIT_FAILED, fail, quiet
from flows.config import ConfigError, load_config
from flows.store_faults import StoreError

integrity = Deferred("flows.integrity")  # MLflow: imported when the command runs
registry = Deferred("flows.registry")
tracking = Deferred("flows.tracking")

REGISTERED_META = "registered_model_meta"  # read by deploy.pyfunc: the version it serves


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``serve`` and its arguments."""
    parser = command_parser(
        subparsers,
        "serve",
        help="verify the champion's model files and code, then serve it (mlflow models serve)",
        run=run,
        config="pipeline config file naming the tracking store and model",
    )
    parser.add_argument(
        "--version", default=None, help="version to serve (default: the champion alias)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=5001, help="port (default: %(default)s)")


def _verified_folder(cfg, version: str | None, folder: Path) -> tuple[str, Path]:
    """The version served and its verified local model folder (registry meta written)."""
    from mlflow.exceptions import MlflowException

    t = cfg.tracking
    client = tracking.client_for(t)
    role = t.champion_alias if version is None else "version to serve"
    if version is None:
        version = registry.resolve_champion(client, t)
        if version is None:
            raise registry.RollbackError(
                f"registered model {t.registered_model!r} has no {t.champion_alias!r} to serve "
                "(run retrain first, or pass --version N)"
            )
    try:
        client.get_model_version(t.registered_model, version)
    except MlflowException as exc:
        raise registry.RollbackError(
            f"registered model {t.registered_model!r} has no version {version!r}"
        ) from exc
    local = integrity.verify_model_version(client, t, version, folder, role)
    (local / REGISTERED_META).write_text(
        f"model_name: {t.registered_model}\nmodel_version: '{version}'\n"
    )
    return str(version), local


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline serve``."""
    quiet(libraries=False)  # no artifact progress bars before the "serving version" line
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)
    from mlflow.exceptions import MlflowException

    work = Path(tempfile.mkdtemp(prefix="poem-serve-"))
    try:
        try:
            version, folder = _verified_folder(cfg, args.version, work)
        except (
            integrity.ArtifactError,
            registry.ChampionMissingError,
            registry.RollbackError,
            StoreError,
            MlflowException,
            OSError,
        ) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return fail(f"{first}; nothing is served", EXIT_FAILED)
        return _serve(cfg, version, folder, args.host, args.port)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _serve(cfg, version: str, folder: Path, host: str, port: int) -> int:
    """Run ``mlflow models serve`` on the verified folder until it ends or we are stopped."""
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),  # it execs uvicorn
        "MLFLOW_TRACKING_URI": cfg.tracking.uri,  # deploy.pyfunc re-reads the version's digest
        "MLFLOW_REGISTRY_URI": cfg.tracking.uri,
    }
    cmd = [str(Path(bin_dir) / "mlflow"), "models", "serve", "-m", str(folder)]
    cmd += ["--env-manager", "local", "-h", host, "-p", str(port)]
    print(
        f"serving version {version} of {cfg.tracking.registered_model!r} (files, code and "
        f"policy verified) on http://{host}:{port}",
        flush=True,
    )
    server = subprocess.Popen(cmd, env=env, start_new_session=True)

    def stop(signum, frame):  # SIGTERM / SIGINT: stop the server's whole process group
        raise KeyboardInterrupt(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        code = server.wait()
        return 0 if code == 0 else fail(f"mlflow models serve exited with {code}", EXIT_FAILED)
    except KeyboardInterrupt:
        _stop_group(server)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we cannot signal is still a member
        return True
    return True


def _stop_group(server: subprocess.Popen) -> None:
    """SIGTERM the server's process group, then SIGKILL; return when no member is left.

    Waiting for ``mlflow`` alone is not enough: its uvicorn workers are in the same group
    and may still hold the port after the leader has exited.
    """
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        if not _group_alive(server.pid):
            break
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            server.poll()  # reap the leader so the group can empty
            if not _group_alive(server.pid):
                return
            time.sleep(0.1)

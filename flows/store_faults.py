"""A damaged, full or read-only tracking store: refused, not retried, cleaned up after.

A corrupt sqlite store is refused before anything is written to it (:func:`check_store`), and a
database server that refuses the connection (a wrong password) in one line within seconds
(:func:`check_database`, not after MLflow's minutes of hidden retries); a full disk or a
read-only store is a permanent error (:func:`is_permanent_store_error`), not retried; a failed
run's half-written model folders are removed (:func:`discard_unfinished_models`).
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from flows.redact import redact

if TYPE_CHECKING:  # MLflow is imported by the callers; this module stays light (the CLI)
    from mlflow import MlflowClient

__all__ = [
    "StoreError",
    "check_database",
    "check_store",
    "discard_unfinished_models",
    "is_permanent_store_error",
    "sqlite_path",
]

# OS errors a retry cannot fix: read-only file system, no permission, disk or quota full
PERMANENT_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT})
# the same conditions as sqlite reports them (MLflow wraps them in MlflowException)
PERMANENT_SQLITE_MESSAGES = (
    "database or disk is full",
    "attempt to write a readonly database",
    "database disk image is malformed",
    "file is not a database",
)


def is_permanent_store_error(exc: BaseException) -> bool:
    """True for a full disk, a read-only or corrupt store, anywhere in ``exc``'s chain.

    Messages are inspected too: MLflow wraps sqlite's errors in an ``MlflowException``.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in PERMANENT_ERRNOS:
            return True
        if any(message in str(current) for message in PERMANENT_SQLITE_MESSAGES):
            return True
        current = current.__cause__ or current.__context__
    return False


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None: another store, or in memory)."""
    if not uri.startswith("sqlite:///") or ":memory:" in uri:
        return None
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])


class StoreError(RuntimeError):
    """The tracking store cannot be used (a corrupt sqlite database); nothing was written."""


def check_store(uri: str) -> None:
    """Refuse a corrupt sqlite tracking store, or an unreachable database, before any write.

    Runs sqlite's ``PRAGMA quick_check`` on the database file of ``uri``, opened read-only
    (a missing file is fine: MLflow creates it); a database server's URI is checked by
    :func:`check_database`; other stores (``http``, ``file``) are not checked here.

    Raises
    ------
    StoreError
        Naming the file and sqlite's first finding, when the check does not answer ``ok``.
    """
    if is_database_uri(uri):
        check_database(uri)
        return
    path = sqlite_path(uri)
    if path is None or not path.is_file():
        return
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            found = [row[0] for row in db.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as exc:
        found = [str(exc)]
    if found != ["ok"]:
        first = " ".join(found[0].replace("*** in database main ***", "").split())
        raise StoreError(
            f"the tracking store {path} is corrupt (sqlite quick_check: {first}"
            f"{f'; {len(found) - 1} more finding(s)' if len(found) > 1 else ''}); nothing was "
            "written to it. Restore it from a backup, or set tracking.uri to a new store"
        )


def is_database_uri(uri: str) -> bool:
    """True for a database server's SQLAlchemy URI (``postgresql://``, ``mysql+pymysql://``…)."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in uri else ""
    return scheme in DATABASE_SCHEMES


DATABASE_SCHEMES = frozenset({"postgresql", "postgres", "mysql", "mssql"})
CONNECT_TIMEOUT = 10  # seconds for one connection attempt to a database server


def check_database(uri: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Connect once to the tracking database of ``uri``; refuse it in one line if that fails.

    MLflow retries a failed connection for minutes without a word (a wrong password shows
    after 2–3 minutes); one attempt with a ``timeout``-second connect timeout says at once
    which server refused and why. The message holds no password (:func:`flows.redact.redact`).

    Raises
    ------
    StoreError
        Naming the server (URI without its password) and the driver's reason.
    """
    import sqlalchemy
    from sqlalchemy.exc import SQLAlchemyError

    scheme = uri.split("://", 1)[0].split("+", 1)[0].lower()
    connect_args = (
        {"connect_timeout": int(timeout)} if scheme in ("postgresql", "postgres", "mysql") else {}
    )
    try:
        engine = sqlalchemy.create_engine(
            uri, connect_args=connect_args, poolclass=sqlalchemy.pool.NullPool
        )
        try:
            with engine.connect() as connection:
                connection.execute(sqlalchemy.text("SELECT 1"))
        finally:
            engine.dispose()
    except (SQLAlchemyError, ImportError, ValueError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip()
        lines = [" ".join(line.split()) for line in reason.splitlines() if line.strip()]
        found = "; ".join(lines[:2]) or type(exc).__name__
        raise StoreError(
            f"cannot connect to the tracking database {redact(uri)}: {redact(found)}; nothing "
            "was written. Check that the server runs and the user and password (PGPASSWORD, "
            "~/.pgpass, or the URI) are right"
        ) from exc


def discard_unfinished_models(client: MlflowClient, experiment_id: str, run_id: str) -> list[str]:
    """Remove what a failed run left of the models it was logging; returns their ids.

    The local folder of a ``PENDING`` model, or of a ``FAILED`` one (MLflow's ``log_model``
    marks the model FAILED itself when an upload fails, e.g. on a full disk), is deleted
    (freeing the disk), and the model is marked ``FAILED``; ``READY`` models stay. Best effort
    (the caller is already reporting an error).
    """
    from mlflow.exceptions import MlflowException

    try:
        models = client.search_logged_models(
            [experiment_id], filter_string=f"source_run_id = '{run_id}'"
        )
    except (MlflowException, OSError):
        return []
    discarded = []
    for model in models:
        status = str(model.status).rsplit(".", 1)[-1]
        if status not in ("PENDING", "FAILED"):
            continue  # READY: logged completely (and maybe registered)
        location = urlparse(model.artifact_location)
        folder = Path(location.path)  # <root>/models/m-<id>/artifacts
        if location.scheme in ("", "file") and folder.name == "artifacts":
            shutil.rmtree(folder.parent, ignore_errors=True)
        if status == "PENDING":
            with contextlib.suppress(MlflowException, OSError):
                client.finalize_logged_model(model.model_id, "FAILED")
        discarded.append(model.model_id)
    return discarded

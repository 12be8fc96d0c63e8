"""Passwords out of everything the pipeline logs or prints: one function, :func:`redact`.

Light (no MLflow): the CLI's error messages use it too.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REDACTED", "redact"]

REDACTED = "***"
# scheme://user:PASSWORD@host (the password up to the last '@' of the token, so one holding an
# unencoded '@' is hidden whole) and ?password=… style query keys of database and HTTP URIs
_URI_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]*:)\S*@")
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:password|passwd|pwd|secret|token|access_token|api_key|sslpassword)=)"
    r"[^&;\s'\"]*",
    re.IGNORECASE,
)


def redact(value: Any) -> str:
    """``str(value)`` with the passwords of URIs replaced by ``***``.

    ``postgresql://user:PW@host/db`` → ``postgresql://user:***@host/db``; ``?password=PW`` →
    ``?password=***``. Every value :mod:`flows.tracking` logs (params, tags, texts, run names) goes
    through it, and so do the CLI's messages naming the tracking store: credentials belong in the
    environment (``PGPASSWORD``, ``~/.pgpass``, ``MLFLOW_TRACKING_PASSWORD``), not the config.
    """
    text = str(value)
    if "://" not in text and "=" not in text:
        return text  # the common case, fast
    text = _URI_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['head']}{REDACTED}", text)

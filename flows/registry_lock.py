"""A lock on a registered model that holds through the MLflow tracking server (DESIGN §6).

The moves of the aliases (:func:`flows.registry.promote`, ...) must not interleave between runs,
also on machines sharing one tracking server, so the lock is a row in the registry's database:
acquiring is ``create_registered_model("<model>.promotion-lock")`` (the unique name lets one
caller create it; the others get ``RESOURCE_ALREADY_EXISTS`` and retry until ``timeout``),
releasing deletes it. Its tags name the holder (host, pid, the pid's start time, a token), so a
waiter on the holder's host breaks the lock of a dead holder; the timeout's error names a holder
on another host and how to remove its lock. This works for a sqlite store and for an
``http(s)://`` server backed by PostgreSQL (the team topology).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from flows.tracking import _owner_gone, _owner_tags, store_lock

__all__ = ["LOCK_SUFFIX", "RegistryLockTimeout", "lock_name", "registry_lock"]

LOCK_SUFFIX = ".promotion-lock"
TOKEN_TAG = "poem.lock_token"
_POLL_SECONDS = 0.1


class RegistryLockTimeout(TimeoutError):
    """Another process held the registered model's promotion lock for longer than the timeout."""


def lock_name(registered_model: str) -> str:
    """Name of the registered model that is the lock of ``registered_model``."""
    return registered_model + LOCK_SUFFIX


def _holder(client: MlflowClient, name: str) -> dict[str, str] | None:
    """Tags of the lock's holder, or None when the lock is free."""
    try:
        return dict(client.get_registered_model(name).tags)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise


def _break_if_dead(client: MlflowClient, uri: str, name: str) -> bool:
    """Delete the lock if its holder was a process on this host that has ended.

    One waiter at a time (:func:`store_lock`), re-reading the holder's token just before
    deleting, so a lock just taken by a live process is never deleted.
    """
    holder = _holder(client, name)
    if holder is None or not _owner_gone(holder):
        return False
    with store_lock(uri):
        again = _holder(client, name)
        if again is None or again.get(TOKEN_TAG) != holder.get(TOKEN_TAG):
            return False
        with contextlib.suppress(MlflowException):
            client.delete_registered_model(name)
    return True


def _describe(holder: dict[str, str] | None) -> str:
    if not holder:
        return "a process that has released it since"
    return f"process {holder.get('poem.pid', '?')} on host {holder.get('poem.host', '?')}"


@contextlib.contextmanager
def registry_lock(
    client: MlflowClient, uri: str, registered_model: str, timeout: float = 300.0
) -> Iterator[None]:
    """Hold the promotion lock of ``registered_model`` in the registry of ``client``.

    Parameters
    ----------
    client : MlflowClient
        Client of the registry (a sqlite store or a tracking server).
    uri : str
        The store's URI (names the local file lock used only to break a dead holder's lock).
    registered_model : str
        The model whose aliases the block moves.
    timeout : float, default=300.0
        Seconds to wait for a live holder.

    Raises
    ------
    RegistryLockTimeout
        If the lock was not free within ``timeout``; the message names the holder and the
        registered model to delete if that holder is known to be gone.
    """
    name = lock_name(registered_model)
    token = uuid.uuid4().hex
    tags = {**_owner_tags(), TOKEN_TAG: token}
    description = (
        f"Lock of {registered_model!r}: held while a process moves its aliases, deleted when "
        "done. Delete it by hand only if its holder (tags) is gone."
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.create_registered_model(name, tags=tags, description=description)
            break
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                # released between our failed insert and MLflow's re-read: free again, retry
                continue
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        if _break_if_dead(client, uri, name):
            continue
        if time.monotonic() > deadline:
            raise RegistryLockTimeout(
                f"the registry lock {name!r} was held by {_describe(_holder(client, name))} "
                f"for more than {timeout:g} s; if that process is gone, delete the registered "
                f"model {name!r} (MLflow UI, or MlflowClient().delete_registered_model)"
            )
        time.sleep(_POLL_SECONDS)  # lock poll interval
    try:
        yield
    finally:
        # a failed release (server unreachable) leaves the lock to the next run of this host,
        # which breaks it once this process has ended; it never masks the block's own error
        with contextlib.suppress(MlflowException):
            holder = _holder(client, name)
            if holder is not None and holder.get(TOKEN_TAG) == token:
                client.delete_registered_model(name)

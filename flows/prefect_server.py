"""A temporary Prefect API server that cannot outlive the command that started it.

Without ``PREFECT_API_URL`` Prefect starts its own temporary server as a child sharing the
command's terminal, stdout and process group: it survives ``kill -9`` of the command (keeping
a piped stdout open) and gets Ctrl-C first. :class:`TemporaryServer` starts the same server in
its own session, stdin closed, output to a log file, with ``PR_SET_PDEATHSIG`` so the kernel
kills it when the command dies; :func:`prefect_api` points Prefect at it for a block. It also

- starts early (:meth:`TemporaryServer.start` only spawns), so the server boots while the
  command imports Prefect, MLflow and GX;
- serializes start-ups per Prefect home with a file lock (concurrent migrations of one fresh
  ``prefect.db`` kill a server);
- raises :class:`PrefectServerError` with the cause (port, lock, database, disk) when the server
  exits during start-up, and interrupts the main thread with :class:`PrefectServerDied` (a
  ``KeyboardInterrupt``: the run is marked KILLED, nothing is promoted) when it dies later;
  a lost interrupt is sent again, and a run that still does not stop exits
  (:meth:`TemporaryServer.watch`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import importlib.util
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from deploy.serve import free_port

__all__ = [
    "OUTAGE_CODES",
    "PrefectServerDied",
    "PrefectServerError",
    "TemporaryServer",
    "configured_api_url",
    "prefect_api",
]

OUTAGE_CODES = (500,)  # a persistent Prefect server's answers retried besides 408/429/502/503
_PR_SET_PDEATHSIG = 1
_EXIT_FAILED = 1  # the CLI's EXIT_FAILED (flows.commands._console imports Prefect: not here)
REDELIVER_SECONDS = 60.0  # the kill-9 test stops 11 s after the kill (62 s whole under load)
_DEFAULT_TIMEOUT = 90.0  # PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS when unset here
_LOCK_NAME = ".poem-server-start.lock"
_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit)):?\s*(.*)$")
# (pattern in the server's output, what it means) — first match wins
_CAUSES = (
    (r"address already in use|Errno 98", "port: the port is already in use"),
    (r"database is locked", "lock: another process holds the Prefect database"),
    (r"No space left on device|Errno 28|disk is full|disk I/O error", "disk: the disk is full"),
    (r"Read-only file system|Errno 30|readonly database", "disk: the file system is read-only"),
    (r"Permission denied|Errno 13", "permission: the Prefect home is not writable"),
    (
        r"file is not a database|malformed|unable to open database|no such table",
        "database: the Prefect database is unusable",
    ),
)


class PrefectServerError(RuntimeError):
    """Prefect's temporary API server did not start; the message is one line with the cause."""


class PrefectServerDied(KeyboardInterrupt):  # noqa: N818 - an interrupt, like KeyboardInterrupt
    """Raised in the main thread when the temporary server dies during the run."""


def configured_api_url() -> str | None:
    """``PREFECT_API_URL`` if set (environment, or the settings of an imported Prefect)."""
    if "prefect.settings" in sys.modules:  # profiles, temporary_settings, the test harness
        from prefect.settings import PREFECT_API_URL

        return PREFECT_API_URL.value() or None
    return os.environ.get("PREFECT_API_URL") or None


def _die_with_parent(parent: int) -> None:
    """``preexec_fn``: SIGKILL this child when its parent exits (Linux ``prctl``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _exit_status(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def startup_failure_reason(output: str) -> str:
    """The cause of a failed start-up, in one line, from the server's output.

    Parameters
    ----------
    output : str
        What the server wrote (its log file).

    Returns
    -------
    str
        ``"<kind>: <meaning> (<last exception line>)"``, or the last exception line, or
        ``"no reason in its output"``.
    """
    exceptions = [m for m in map(_EXCEPTION_LINE.match, output.splitlines()) if m is not None]
    last = f"{exceptions[-1].group(1)}: {exceptions[-1].group(2)}".strip() if exceptions else ""
    last = last.rstrip(":")[:200]
    for pattern, meaning in _CAUSES:
        if re.search(pattern, output):
            return f"{meaning} ({last})" if last else meaning
    return last or "no reason in its output"


class TemporaryServer:
    """A temporary Prefect API server process tied to this process.

    Parameters
    ----------
    log_file : str or Path or None
        Where the server's output goes (default: a temporary file, removed when the server
        stops cleanly and named in the error when it fails).
    """

    def __init__(self, log_file: str | Path | None = None) -> None:
        self.home = Path(os.environ.get("PREFECT_HOME") or "~/.prefect").expanduser()
        self._own_log = log_file is None
        self.log_file = Path(log_file) if log_file is not None else None
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.url: str | None = None
        self.died: str | None = None  # "killed by SIGKILL", when it died during the run
        self._lock: int | None = None
        self._stopping = False
        self._out = None
        self._previous_handler: object = None
        self._stopped = threading.Event()
        #: seconds after the server's death before the interrupt is sent again, and again
        #: until this process exits itself (:meth:`watch`)
        self.redeliver_after = REDELIVER_SECONDS

    def has_database(self) -> bool:
        """Whether ``$PREFECT_HOME/prefect.db`` exists and no other database is configured.

        Then a start only checks the migrations, so a command may start the server before it
        knows it will use it and stop it at once on a mistake.
        """
        configured = (
            "PREFECT_API_DATABASE_CONNECTION_URL",
            "PREFECT_SERVER_DATABASE_CONNECTION_URL",
        )
        if any(os.environ.get(name) for name in configured):
            return False
        return (self.home / "prefect.db").is_file()

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> TemporaryServer:
        """Spawn the server if no other start-up holds the Prefect home's lock; never waits.

        Cheap (no ``import prefect``): call it first, import the libraries, then :meth:`wait`.
        """
        if self._try_lock(blocking=False):
            self._spawn()
        return self

    def _try_lock(self, *, blocking: bool) -> bool:
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            if self._lock is None:
                self._lock = os.open(self.home / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._lock, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        except OSError as exc:
            raise PrefectServerError(
                f"Prefect's temporary API server cannot start: "
                f"{startup_failure_reason(f'OSError: {exc}')} under PREFECT_HOME={self.home}"
            ) from None
        return True

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # releases the flock
            self._lock = None

    def _command(self) -> list[str]:
        spec = importlib.util.find_spec("prefect")
        if spec is None or spec.origin is None:
            raise PrefectServerError("Prefect's temporary API server cannot start: no prefect")
        app_dir = str(Path(spec.origin).resolve().parent.parent)
        command = [sys.executable, "-m", "uvicorn", "--app-dir", app_dir]
        command += ["--factory", "prefect.server.api.server:create_app"]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        return command + ["--log-level", "error", "--lifespan", "on"]

    def _environment(self) -> dict[str, str]:
        env = {  # as prefect.server.api.server.SubprocessASGIServer sets them
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
        }
        if "prefect.settings" in sys.modules:  # settings changed in this process (profiles, tests)
            from prefect.settings import get_current_settings

            env.update(get_current_settings().to_environment_variables(exclude_unset=True))
        # its start-up errors go to its log file, where the error message finds them
        env["PREFECT_SERVER_LOGGING_LEVEL"] = "ERROR"
        env.pop("PREFECT_API_URL", None)
        return env

    def _spawn(self) -> None:
        if self.log_file is None:
            fd, name = tempfile.mkstemp(prefix="poem-prefect-server-", suffix=".log")
            os.close(fd)
            self.log_file = Path(name)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/api"
        parent = os.getpid()
        self._out = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            self._command(),
            env=self._environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: _die_with_parent(parent),  # noqa: PLW1509 - main thread only
        )

    def wait(self, timeout: float | None = None) -> str:
        """Block until the server answers ``/health``; returns its API URL.

        Raises
        ------
        PrefectServerError
            One line: the server exited (with the cause from its output), or another command's
            start-up held the Prefect home, or it was not healthy within ``timeout`` (default
            ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``, else 90 s).
        """
        if timeout is None:
            timeout = float(
                os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", _DEFAULT_TIMEOUT)
            )
        deadline = time.monotonic() + timeout
        if self.process is None:  # another command was starting a server on this home
            while not self._try_lock(blocking=False):
                if time.monotonic() > deadline:
                    raise PrefectServerError(
                        "Prefect's temporary API server cannot start: lock: another command "
                        f"has been starting a server on PREFECT_HOME={self.home} for over "
                        f"{timeout:g} s ({self.home / _LOCK_NAME})"
                    )
                time.sleep(0.2)  # lock poll interval
            self._spawn()
        assert self.process is not None and self.url is not None
        retried = False
        while True:
            code = self.process.poll()
            if code is not None:
                reason = startup_failure_reason(self._output())
                if reason.startswith("port:") and not retried:  # lost the free-port race
                    retried = True
                    self._close_output()
                    self._spawn()
                    continue
                self._unlock()
                raise PrefectServerError(
                    f"Prefect's temporary API server exited during start-up "
                    f"({_exit_status(code)}): {reason}; PREFECT_HOME={self.home}, "
                    f"server output in {self.log_file}"
                )
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        self._unlock()
                        return self.url
            if time.monotonic() > deadline:
                self.stop()
                raise PrefectServerError(
                    f"Prefect's temporary API server at {self.url} was not ready after "
                    f"{timeout:g} s (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS; the "
                    f"first start in a new PREFECT_HOME={self.home} migrates its database)"
                )
            time.sleep(0.1)  # readiness poll interval

    def _output(self) -> str:
        if self.log_file is None or not self.log_file.exists():
            return ""
        return self.log_file.read_text(errors="replace")[-20_000:]

    # -- run -----------------------------------------------------------------------------------
    def watch(self) -> None:
        """Interrupt the main thread with :class:`PrefectServerDied` if the server dies.

        Call from the main thread (it installs the SIGUSR1 handler the watcher triggers). An
        interrupt the run does not act on (lost in a finalizer, caught by a library) is sent
        again :attr:`redeliver_after` seconds later; after as many again this process prints
        one line and exits 1 itself, its MLflow run left for the next run to mark KILLED.
        :meth:`stop` ends the watch.
        """
        if self.process is None or threading.current_thread() is not threading.main_thread():
            return
        process = self.process

        def interrupt(signum: int, frame: object) -> None:
            if self.died is not None and not self._stopping:
                # from here on every Prefect log line is about the dead API ("Crash detected",
                # "Error logging to API", websocket retries): the command reports it once
                logging.disable(logging.CRITICAL)
                for name in list(logging.root.manager.loggerDict):
                    if name.startswith("prefect"):  # prefect._internal ignores disable()
                        logging.getLogger(name).disabled = True
                raise PrefectServerDied(f"Prefect's temporary API server {self.died}")

        self._previous_handler = signal.signal(signal.SIGUSR1, interrupt)

        def watcher() -> None:
            code = process.wait()
            if self._stopping:
                return
            self.died = f"(pid {process.pid}) died during the run: {_exit_status(code)}"
            # a real signal to the main thread: it also wakes a blocking wait (futures)
            signal.pthread_kill(main, signal.SIGUSR1)
            # The interrupt can be lost: Python ignores an exception raised while the main
            # thread runs a __del__ or a weakref callback, and library code may catch
            # BaseException. Then the run waits for its task as if nothing happened (a fit
            # of hours; the kill-9 test once waited out its 500 s guard). So: once more after
            # a grace, then exit here; the next run on this host marks the MLflow run KILLED.
            if self._stopped.wait(self.redeliver_after):
                return
            signal.pthread_kill(main, signal.SIGUSR1)
            if self._stopped.wait(self.redeliver_after):
                return
            print(
                f"error: Prefect's temporary API server {self.died}; the run did not stop "
                f"within {2 * self.redeliver_after:.0f}s of it: exiting without closing its "
                "MLflow run (shown KILLED? until the next run on this host marks it KILLED)",
                file=sys.stderr,
                flush=True,
            )
            os._exit(_EXIT_FAILED)

        main = threading.main_thread().ident
        threading.Thread(target=watcher, name="prefect-server-watch", daemon=True).start()

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s); remove its own log."""
        self._stopping = True
        self._stopped.set()
        self._unlock()
        if (
            callable(self._previous_handler)  # else the (now inert) handler stays: a late
            and threading.current_thread() is threading.main_thread()  # SIGUSR1 must not kill
        ):
            signal.signal(signal.SIGUSR1, self._previous_handler)
            self._previous_handler = None
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._close_output()
        if self._own_log and self.log_file is not None and self.died is None:
            with contextlib.suppress(OSError):
                self.log_file.unlink()

    def _close_output(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


@contextlib.contextmanager
def prefect_api(
    log_file: str | Path | None = None, *, server: TemporaryServer | None = None
) -> Iterator[str | None]:
    """Use the configured Prefect API, or run a temporary one tied to this process.

    Parameters
    ----------
    log_file : str or Path or None
        Where the temporary server's output goes (default: a temporary file).
    server : TemporaryServer or None
        A server already started (:meth:`TemporaryServer.start`) while this process imported
        its libraries; it is stopped when the block ends. Default: start one here.

    Yields
    ------
    str or None
        The temporary server's API URL, or None when ``PREFECT_API_URL`` is already set
        (a persistent server, or the test harness): nothing is started then.

    Raises
    ------
    PrefectServerError
        From :meth:`TemporaryServer.wait` (one line naming the cause).
    PrefectServerDied
        In the main thread, if the server dies while the block runs.
    """
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_CLIENT_MAX_RETRIES,
        PREFECT_CLIENT_RETRY_EXTRA_CODES,
        temporary_settings,
    )

    if PREFECT_API_URL.value():
        if server is not None:
            server.stop()
        # a team's server answers 500 while its database is down (a PostgreSQL restart):
        # retried like 502/503, within PREFECT_CLIENT_MAX_RETRIES (5: 2 + 4 + … + 32 ≈ 62 s)
        codes = set(PREFECT_CLIENT_RETRY_EXTRA_CODES.value()) | set(OUTAGE_CODES)
        with temporary_settings(updates={PREFECT_CLIENT_RETRY_EXTRA_CODES: codes}):
            yield None
        return
    server = server or TemporaryServer(log_file).start()
    try:
        url = server.wait()
        server.watch()
        # a dead temporary server does not come back: 2 retries (2 + 4 s) instead of 5 (62 s)
        retries = min(int(PREFECT_CLIENT_MAX_RETRIES.value()), 2)
        with temporary_settings(
            updates={PREFECT_API_URL: url, PREFECT_CLIENT_MAX_RETRIES: retries}
        ):
            yield url
    finally:
        server.stop()

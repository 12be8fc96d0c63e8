"""``poem-pipeline retrain``: run the ``retrain`` flow once.

The config (with ``--set`` and the log flags applied) and the log path are checked before
Prefect is imported; Prefect's temporary API server (no ``PREFECT_API_URL``) boots meanwhile
when its database exists (and is stopped at once on a mistake). Prints one line per finished
stage, then a headline: both risks, the difference with its interval and upper bound, the
decision and the versions.

Exit codes say what the registry holds: 0 when this run's outcome is in the registry (decision
``promoted`` or ``rejected``; also when only closing the run failed afterwards: a warning on
stderr), 1 when it failed and promoted nothing (the logs failed their checks, a store or server
failed before ``promote-policy``, or the champion alias, read after the failure, is not this
run's version), 2 for an invalid config, a bad ``--set`` or a missing file, 3 when it failed
after ``promote-policy`` started and the registry cannot be read (a tracking server down: the
champion may have moved; the last line says how to check the alias), 130 when interrupted
(Ctrl-C; the MLflow run is marked KILLED, ``champion`` does not move). The last line on stdout
is ``decision=<promoted|rejected> champion=<version>``, ``decision=failed champion=<version>
(not promoted)`` or ``decision=unknown champion=unknown: …``; a failure prints at most five
lines on stderr before it: the error, the report's path and the failed MLflow run.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from flows._yaml import file_kind
from flows.commands import Deferred, add_bounds_arguments, command_parser
from flows.commands._console import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNKNOWN,
    StageProgress,
    drain_prefect,
    exit_now,
    fail,
    interruptible,
    quiet,
)
from flows.config import (
    ConfigError,
    PipelineConfig,
    default_config_path,
    load_config,
    parse_overrides,
)
from flows.prefect_server import (
    PrefectServerDied,
    PrefectServerError,
    TemporaryServer,
    configured_api_url,
    prefect_api,
)
from flows.redact import redact
from flows.store_faults import StoreError, check_store

# imported when the flow runs: Prefect, MLflow and GX take seconds to import and configure logging
exceptions = Deferred("poem.exceptions")
retrain_flow = Deferred("flows.retrain")
tracking = Deferred("flows.tracking")
track = Deferred("flows.tasks.track")

__all__ = ["add_log_arguments", "add_parser", "log_overrides", "run", "run_retrain"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``retrain`` and its arguments."""
    parser = command_parser(
        subparsers,
        "retrain",
        help="validate logs, learn a policy, gate it against the champion, register and promote",
        run=run,
        config="pipeline config file",
    )
    parser.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="log file or date-partitioned folder; overrides data.path of the config",
    )
    add_log_arguments(parser)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value (YAML value; repeatable), e.g. --set search.scoring=snips "
        "--set training.params.max_iter=50",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="keep Prefect's own log lines on stderr"
    )
    parser.add_argument(
        "--start-over-from-logger",
        action="store_true",
        help="gate against the logging policy although the registered model had a champion "
        "that no longer resolves (a deleted version); recorded on the new version "
        "(tracking.start_over_from_logger)",
    )


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """``--family``, ``--loss-bounds``, ``--reward-bounds``, ``--n-actions``, ``--window``."""
    parser.add_argument(
        "--family",
        choices=("discrete", "multilabel", "candidates"),
        default=None,
        help="the log's family (sets data.family and training.params.policy)",
    )
    add_bounds_arguments(
        parser,
        {
            "loss": "declared loss bounds, for logs without metadata (data.loss_bounds)",
            "reward": "declared reward (loss = -reward) bounds, for logs without metadata "
            "(data.reward_bounds)",
        },
    )
    parser.add_argument(
        "--n-actions", type=int, default=None, help="number of actions K (data.n_actions)"
    )
    parser.add_argument(
        "--window",
        nargs=2,
        metavar=("START", "END"),
        default=None,
        help="accepted timestamp window, ISO 8601 (data.window_start, data.window_end)",
    )


def log_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config overrides of the log flags (dotted keys → values)."""
    out: dict[str, Any] = {}
    if args.family is not None:
        out |= {"data.family": args.family, "training.params.policy": args.family}
    for name in ("loss_bounds", "reward_bounds", "n_actions"):
        if getattr(args, name) is not None:
            out[f"data.{name}"] = getattr(args, name)
    if args.window is not None:
        out |= {"data.window_start": args.window[0], "data.window_end": args.window[1]}
    return out


def run_retrain(
    config: Path,
    logs: Path | None,
    overrides: dict[str, Any] | None = None,
    *,
    verbose: bool = False,
) -> int:
    """Check the config and the logs, run the flow, print stages and headline; the exit code."""
    quiet(libraries=not verbose)
    if logs is not None and not Path(logs).exists():
        return fail(f"--logs: {logs} does not exist", EXIT_CONFIG)
    server = _early_server()
    try:
        return _checked_run(config, logs, overrides, verbose, server)
    finally:
        if server is not None:
            server.stop()


def _early_server() -> TemporaryServer | None:
    """Spawn the temporary server to boot while the config is validated, when that is harmless.

    Only when its database exists (:meth:`TemporaryServer.has_database`); a start-up problem is
    left to the regular start, which reports it.
    """
    if configured_api_url():
        return None
    server = TemporaryServer()
    if not server.has_database():
        return None
    try:
        return server.start()
    except PrefectServerError:
        return None


def _checked_run(
    config: Path,
    logs: Path | None,
    overrides: dict[str, Any] | None,
    verbose: bool,
    server: TemporaryServer | None,
) -> int:
    try:
        cfg = load_config(config, overrides)
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)
    path = Path(logs) if logs is not None else Path(cfg.data.path)
    where = "--logs" if logs is not None else f"data.path of {config}"
    if not path.exists():
        return fail(f"{where}: {path} does not exist", EXIT_CONFIG)
    if (kind := file_kind(path)) not in ("a regular file", "a folder"):  # before Prefect starts
        return fail(f"{where}: {path} is {kind}: give a log file or folder", EXIT_CONFIG)
    try:
        check_store(cfg.tracking.uri)  # a corrupt store: refused before anything is written
    except StoreError as exc:
        return fail(str(exc), EXIT_FAILED)
    which = "the packaged default config" if Path(config) == default_config_path() else config
    print(f"retrain on {path} (config: {which})", flush=True)
    t0 = time.perf_counter()
    # the temporary server boots while Prefect, MLflow and GX import (not with PREFECT_API_URL)
    try:
        if server is None and not configured_api_url():
            server = TemporaryServer().start()
    except PrefectServerError as exc:  # e.g. a Prefect home that cannot be written
        return fail(str(exc), EXIT_FAILED)
    with interruptible():
        try:
            return _run_flow(cfg.with_data_path(path), verbose, t0, server)
        except KeyboardInterrupt as exc:
            run_id = _run_id(exc)
            what = (
                f"MLflow run {run_id} is marked KILLED" if run_id else "no MLflow run had started"
            )
            after = f"after {time.perf_counter() - t0:.1f}s: {what}; champion did not move"
            if server is not None and server.died:  # kill -9 of the server: stop now, one line
                print(
                    f"error: Prefect's temporary API server {server.died} {after}", file=sys.stderr
                )
                exit_now(EXIT_FAILED)
            print(f"interrupted {after}", file=sys.stderr)
            return EXIT_INTERRUPTED
        except PrefectServerError as exc:
            return fail(str(exc), EXIT_FAILED)
        finally:
            if server is not None:
                server.stop()


def _run_id(exc: BaseException | None) -> str | None:
    """The MLflow run id an interrupt carries, also when Prefect re-raised another error."""
    seen = 0
    while exc is not None and seen < 20:  # the chain is short; bounded against cycles
        if getattr(exc, "run_id", None):
            return exc.run_id
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _run_flow(cfg: PipelineConfig, verbose: bool, t0: float, server: TemporaryServer | None) -> int:
    """Run the flow on ``cfg``, the settings loaded once by :func:`_checked_run`."""
    # imported here: Prefect, MLflow and GX take seconds to import and configure logging
    import great_expectations.data_context.types.base  # noqa: F401
    import prefect.main  # noqa: F401 - configures Prefect's loggers: before quiet(), not after

    retrain_flow.load()  # imports MLflow, which configures its loggers
    retrain = retrain_flow.run_retrain  # threads, or Dask by config.dask

    quiet(libraries=not verbose)
    if server is None:
        print(f"    (Prefect API {configured_api_url()})", flush=True)
    else:
        print("    (starting Prefect's temporary API server)", flush=True)
    failure: tuple[int, list[str], list[str]] | None = None
    with (
        prefect_api(server=server),
        StageProgress().attached() as progress,
        retrain_flow.retrain_progress() as state,
    ):
        quiet(libraries=not verbose)  # again: Prefect configures its loggers when it starts
        progress.start = t0
        try:
            result = retrain(cfg)  # the settings object: not loaded again
        except Exception as exc:  # noqa: BLE001 - the CLI reports any failure as an exit code
            if server is not None and server.died:  # Prefect's calls to the dead API failed
                raise PrefectServerDied(server.died) from exc
            failure = _failure(exc, cfg, state)
        drain_prefect()  # before the server stops, not at exit (not after Ctrl-C: exit at once)
    if failure is not None:
        code, lines, out = failure
        if code == EXIT_OK:  # the outcome is in the registry: the headline, then the warning
            print(redact("\n".join(out[:-1])), flush=True)
            lines[0] = lines[0].replace("error: retrain failed:", "warning: after the outcome:", 1)
        print(redact("\n".join(lines)), file=sys.stderr, flush=True)  # the store URI: no password
        if out:
            print(redact(out[-1]))
        return code
    for line in result.headline():
        print(line)
    for reason in result.reasons:
        print(f"  {reason}")
    print(
        f"done in {time.perf_counter() - t0:.0f}s; MLflow run {result.mlflow_run_id} "
        f"(experiment {result.experiment_id})"
    )
    print(result.summary_line())
    return EXIT_OK


_MAX_LINE = 300  # characters of one error line


def _first_line(text: str) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 1] + "…"


def _failure(
    exc: BaseException, cfg: PipelineConfig, state: Any
) -> tuple[int, list[str], list[str]]:
    """Exit code, at most five stderr lines and the stdout lines (the last one last).

    The code and the last line say what the registry holds (:func:`_registry_after`).
    """
    lines: list[str] = []
    if isinstance(exc, exceptions.InvalidLogError):
        code = EXIT_FAILED
        found = [str(v) for v in exc.violations] or [str(exc)]
        lines.append(
            "error: the logs failed their checks; nothing was trained or registered: "
            + _first_line(found[0])
        )
        if len(found) > 1:
            more = f" (+{len(found) - 2} more in the report)" if len(found) > 2 else ""
            lines.append(f"  also: {_first_line(found[1])}{more}")
    elif isinstance(exc, ConfigError | FileNotFoundError):
        code = EXIT_CONFIG
        lines.append(f"error: {_first_line(exc)}")
    else:
        code = EXIT_FAILED
        lines.append(f"error: retrain failed: {_outage(exc) or _described(exc)}")
    lines += [f"  {_first_line(note)}" for note in getattr(exc, "__notes__", [])[:1]]
    run_id = getattr(exc, "mlflow_run_id", None) or state.run_id
    if run_id:
        lines += _run_lines(cfg, run_id, report=isinstance(exc, exceptions.InvalidLogError))
    if code == EXIT_CONFIG:  # as the mistakes found before the flow: stderr only
        return code, lines[:5], []
    code, out = _registry_after(cfg, state)
    return code, lines[:5], out


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _registry_after(cfg: PipelineConfig, state: Any) -> tuple[int, list[str]]:
    """After a failed flow: the exit code and the stdout lines that say what the registry holds.

    The outcome is complete (registered, promoted if the gate said so): 0, the headline. Before
    ``promote-policy``'s body started the champion cannot have moved: 1. Once it started, the
    ``champion`` alias is read (retried through an outage): this run's version 0, another 1,
    unreadable 3.
    """
    if state.result is not None:
        return EXIT_OK, [*state.result.headline(), state.result.summary_line()]
    run = tracking.TrackedRun(cfg.tracking, "", state.run_id or "")
    alias = cfg.tracking.champion_alias
    if state.champion_may_have_moved and state.planned is not None:
        read, champion = track.read_alias(run, alias)
        if not read:
            return EXIT_UNKNOWN, [
                f"decision=unknown champion=unknown: the registry could not be read after "
                f"promote-policy of v{state.version} started; check the alias with "
                f"{_alias_command(cfg)}"
            ]
        if champion == state.version:
            return EXIT_OK, [*state.planned.headline(), state.planned.summary_line()]
        return EXIT_FAILED, [_not_promoted(champion)]
    read, champion = track.read_alias(run, alias, ()) if state.run_id else (False, None)
    if not read:  # nothing this run did can have moved it
        known = state.planned is not None  # the gate read it: champion_before
        champion = (state.champion_before or "logging-policy") if known else "unchanged"
    return EXIT_FAILED, [_not_promoted(champion)]


def _not_promoted(champion: str | None) -> str:
    return f"decision=failed champion={champion or 'logging-policy'} (not promoted)"


def _without_password(uri: str) -> str:
    """``uri`` with a password in its user part replaced by ``***``."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _alias_command(cfg: PipelineConfig) -> str:
    """A command that prints the champion alias of the configured model (server or store)."""
    uri = _without_password(cfg.tracking.uri)
    name, alias = cfg.tracking.registered_model, cfg.tracking.champion_alias
    if uri.startswith(("http://", "https://")):
        query = urllib.parse.urlencode({"name": name, "alias": alias})
        return f"curl -s '{uri.rstrip('/')}/api/2.0/mlflow/registered-models/alias?{query}'"
    return (
        f"python -c \"from mlflow import MlflowClient; print(MlflowClient('{uri}')"
        f".get_model_version_by_alias('{name}', '{alias}').version)\""
    )


def _chain(exc: BaseException) -> list[BaseException]:
    found, current = [], exc
    while current is not None and len(found) < 20:  # bounded against cycles
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _outage(exc: BaseException) -> str | None:
    """One line for a failed server (Prefect's API, the tracking server), naming its database.

    A Prefect server that answers 5xx is asked ``GET /api/ready`` (503: its database is down).
    """
    import httpx
    from mlflow.exceptions import MlflowException

    for error in _chain(exc):
        if isinstance(error, httpx.HTTPStatusError) and error.response.status_code >= 500:
            api = str(error.request.url).split("/api/", 1)[0] + "/api"
            status = f"{error.response.status_code} {error.response.reason_phrase}"
            return (
                f"the Prefect server at {api} answered {status} to "
                f"{error.request.method} {error.request.url.path} after its retries: "
                f"{_prefect_ready(api)}"
            )
        if isinstance(error, httpx.TransportError) and error.request is not None:
            api = str(error.request.url).split("/api/", 1)[0] + "/api"
            return f"the Prefect server at {api} is unreachable ({_described(error)})"
        if isinstance(error, MlflowException) and "API request to" in error.message:
            text = error.message
            down = _DATABASE_DOWN.search(text)
            if "failed with error code 5" in text and down is not None:
                return (
                    f"the tracking server's database is not available ({down.group(0)}); check "
                    "the PostgreSQL server of its --backend-store-uri. "
                    f"{_first_line(text)[:150]}"
                )
            many = re.search(r"too many (5\d\d) error responses", text)
            where = re.match(r"API request to (\S+) failed", text)
            url = _without_password(where.group(1)) if where else "the tracking server"
            if many is not None:
                return (
                    f"the tracking server answered {many.group(1)} to every retry of {url}: its "
                    "database is not available; check the PostgreSQL server of its "
                    "--backend-store-uri"
                )
            if "failed with exception" in text:
                return f"the tracking server is unreachable: {_first_line(text)}"
    return None


_DATABASE_DOWN = re.compile(
    r"psycopg2?\.\w*Error|OperationalError|could not connect to server|"
    r"the database system is (?:shutting down|starting up)",
    re.IGNORECASE,
)


def _prefect_ready(api: str) -> str:
    """What ``GET <api>/ready`` says now (Prefect checks its database there)."""
    try:
        with urllib.request.urlopen(f"{api}/ready", timeout=5) as response:
            return f"its database answers now (GET /api/ready: {response.status}); retry"
    except urllib.error.HTTPError as error:
        body = error.read().decode(errors="replace")[:100]
        return (
            f"its database is not available (GET /api/ready: {error.code} {body}); check the "
            "PostgreSQL server of its PREFECT_API_DATABASE_CONNECTION_URL"
        )
    except OSError as error:
        return f"it does not answer now (GET /api/ready: {error}); check that it runs"


def _run_lines(cfg: PipelineConfig, run_id: str, *, report: bool) -> list[str]:
    """Where the failed run is: the check report's path and the run's id (and URL)."""
    uri = cfg.tracking.uri
    try:
        info = tracking.client_for(cfg.tracking).get_run(run_id).info
    except Exception:  # noqa: BLE001 - a broken store: the id is all there is
        return [f"  MLflow run {run_id} in {uri}"]
    lines = [f"  report: {info.artifact_uri}/checks/data_check_report.json"] if report else []
    if uri.startswith(("http://", "https://")):
        where = f"{uri.rstrip('/')}/#/experiments/{info.experiment_id}/runs/{run_id}"
    else:
        where = f"experiment {info.experiment_id} of {uri}"
    return [*lines, f"  MLflow run {run_id} ({info.status}): {where}"]


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline retrain``."""
    try:
        overrides = {**log_overrides(args), **parse_overrides(args.set)}
        if args.start_over_from_logger:
            overrides["tracking.start_over_from_logger"] = True
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)
    code = run_retrain(args.config, args.logs, overrides, verbose=args.verbose)
    if code == EXIT_INTERRUPTED:
        exit_now(code)  # do not wait for the trials still running in worker threads
    return code

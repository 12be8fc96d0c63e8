"""``poem-pipeline retrain``: run the ``retrain`` flow once.

The config (with ``--set`` and the log flags applied) and the log path are checked before
Prefect is imported; Prefect's temporary API server (no ``PREFECT_API_URL``) boots meanwhile
when its database exists (and is stopped at once on a mistake). Prints one line per finished
stage, then a headline: both risks, the difference with its interval and upper bound, the
decision and the versions.

Exit codes (the same for every command): 0 when the flow completes (decision ``promoted`` or
``rejected``), 1 when the logs fail their checks or the run fails (a corrupt, full or read-only
store included), 2 for an invalid config, a bad ``--set`` or a missing file, 130 when interrupted
(Ctrl-C; the MLflow run is marked KILLED, ``champion`` does not move). The last line printed is
``decision=<promoted|rejected> champion=<version>``; a failure prints at most five lines on
stderr: the error, the report's path and the failed MLflow run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from flows._yaml import file_kind
from flows.commands import Deferred, add_bounds_arguments, command_parser
from flows.commands._console import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
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
            return _run_flow(config, path, overrides, verbose, t0, cfg, server)
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


def _run_flow(
    config: Path,
    logs: Path,
    overrides: dict[str, Any] | None,
    verbose: bool,
    t0: float,
    cfg: PipelineConfig,
    server: TemporaryServer | None,
) -> int:
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
    failure: tuple[int, list[str]] | None = None
    with prefect_api(server=server), StageProgress().attached() as progress:
        quiet(libraries=not verbose)  # again: Prefect configures its loggers when it starts
        progress.start = t0
        try:
            result = retrain(config, logs, overrides or None)
        except Exception as exc:  # noqa: BLE001 - the CLI reports any failure as an exit code
            if server is not None and server.died:  # Prefect's calls to the dead API failed
                raise PrefectServerDied(server.died) from exc
            failure = _failure(exc, cfg)
        drain_prefect()  # before the server stops, not at exit (not after Ctrl-C: exit at once)
    if failure is not None:
        code, lines = failure
        print(redact("\n".join(lines)), file=sys.stderr)  # the store's URI: no password
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


def _failure(exc: BaseException, cfg: PipelineConfig) -> tuple[int, list[str]]:
    """Exit code and at most five stderr lines: the error(s), the report, the failed MLflow run."""
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
        lines.append(f"error: retrain failed: {type(exc).__name__}: {_first_line(exc)}")
    lines += [f"  {_first_line(note)}" for note in getattr(exc, "__notes__", [])[:1]]
    run_id = getattr(exc, "mlflow_run_id", None)
    if run_id:
        lines += _run_lines(cfg, run_id, report=isinstance(exc, exceptions.InvalidLogError))
    return code, lines


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

"""``poem-pipeline compare``: a table of the last runs' key metrics and gate decisions (MLflow).

Reads the store without writing to it (a read-only store works). Exit codes: 0 (also when
there are no runs yet), 1 when the store cannot be read (corrupt, unreachable), 2 for an
invalid config.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from flows.commands import Deferred, command_parser
from flows.commands._console import EXIT_CONFIG, EXIT_FAILED, fail, quiet
from flows.config import ConfigError, load_config
from flows.redact import redact
from flows.store_faults import StoreError

registry = Deferred("flows.registry")  # MLflow: imported when the command runs
tracking = Deferred("flows.tracking")

_COLUMNS = (
    ("started (UTC)", "start_time"),
    ("run", "run_id"),
    ("status", "status"),
    ("rows", "n_rows"),
    ("trials", "n_trials"),
    ("val IPS", "validation_ips_risk"),
    ("chal risk", "challenger_risk"),
    ("champ risk", "champion_risk"),
    ("diff UCB", "risk_difference_ucb"),
    ("ESS", "challenger_effective_sample_size"),
    ("version", "version"),
    ("decision", "decision"),
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``compare`` and its arguments."""
    parser = command_parser(
        subparsers,
        "compare",
        help="table of the last runs' key metrics and gate decisions",
        run=run,
        config="pipeline config file naming the tracking store",
    )
    parser.add_argument(
        "-n", "--last", type=int, default=10, help="number of runs to show (default: %(default)s)"
    )


def _cell(key: str, value: object) -> str:
    if value is None or value == "":
        return "-"
    if key == "start_time":
        return datetime.fromtimestamp(int(value) / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    if key == "run_id":
        return str(value)[:8]
    if isinstance(value, float) and key in ("n_rows", "challenger_effective_sample_size"):
        return f"{value:,.0f}"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def format_table(rows: list[dict]) -> str:
    """Fixed-width text table of :func:`flows.tracking.recent_runs` rows."""
    cells = [[title for title, _ in _COLUMNS]] + [
        [_cell(k, r.get(k)) for _, k in _COLUMNS] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline compare``."""
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)
    from mlflow.exceptions import MlflowException

    quiet()
    try:
        t = cfg.tracking
        client = tracking.client_for(t, read_only=True)
        rows = tracking.recent_runs(client, cfg.tracking, args.last)
        names = (t.champion_alias, t.previous_champion_alias, t.challenger_alias)
        aliases = {a: registry.alias_version(client, t, a) for a in names}
    except (StoreError, MlflowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return fail(f"cannot read the tracking store {cfg.tracking.uri}: {first}", EXIT_FAILED)
    if not rows:
        where = redact(cfg.tracking.uri)
        print(f"no runs yet in experiment {cfg.tracking.experiment!r} of {where}")
        return 0
    print(format_table(rows))
    print("aliases: " + ", ".join(f"{a}={v or '-'}" for a, v in aliases.items()))
    return 0

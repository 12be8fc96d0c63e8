"""Run a suite on a DataFrame with an ephemeral Great Expectations context (DESIGN §2).

GX is imported lazily (the import costs about 4 s). Every failed expectation yields its count,
example event ids and the positions of the offending rows, through a positional ``__row__``
column (event ids may be missing or duplicated, which some expectations look for).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from data_checks.report import DataCheckReport, ExpectationFailure, mistyped_reason
from data_checks.suites import KNOWN_COLUMNS, suite_columns

__all__ = ["ROW", "make_context", "row_count_failure", "validate_frame"]

logger = logging.getLogger(__name__)

ROW = "__row__"
_N_EXAMPLES = 5


def make_context() -> Any:
    """Create an ephemeral GX context with progress bars off (reuse one per process or module)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # GX sets this module's logger to INFO at import: "Created temporary directory ... for
    # ephemeral docs site" on every console; back to the level of the great_expectations logger
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.NOTSET)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def validate_frame(
    frame: pd.DataFrame,
    suite: Any,
    params: dict[str, Any],
    *,
    context: Any = None,
    docs_dir: str | Path | None = None,
    max_quarantine_fraction: float = 0.05,
    event_id: str = "event_id",
    source: str = "",
    row_failures: list[tuple[ExpectationFailure, np.ndarray]] = (),
    duplicates: np.ndarray | None = None,
) -> DataCheckReport:
    """Validate a log table against a suite and summarise the result.

    Parameters
    ----------
    frame : DataFrame
        The log table (canonical columns, see :mod:`poem.io.parquet`).
    suite : great_expectations.ExpectationSuite
        From :func:`data_checks.suites.build_log_suite` (not yet added to any context).
    params : dict
        Expectation parameters (``{"$PARAMETER": name}`` values), e.g. from
        :func:`data_checks.suites.default_parameters`.
    context : GX context or None, default=None
        Reused when given; else a new ephemeral one (:func:`make_context`).
    docs_dir : str or Path or None, default=None
        When given, the Data Docs HTML site is written there (``index.html``).
    max_quarantine_fraction : float, default=0.05
        Above this fraction of rows with row-level failures the report fails hard.
    event_id : str, default="event_id"
        Column whose values identify rows in the report.
    source : str, default=""
        File name shown in the report.
    row_failures : list of (ExpectationFailure, ndarray), default=()
        Row-level failures found outside GX (e.g. list columns) with the offending row
        positions; quarantined like the suite's row-level failures.
    duplicates : ndarray of int or None, default=None
        Positions of the rows whose ``event_id`` occurs elsewhere in the whole log (of which
        ``frame`` may be one partition): the result of the suite's uniqueness expectation,
        in place of GX's (which sees this frame only).

    Returns
    -------
    DataCheckReport
    """
    if not 0.0 <= max_quarantine_fraction <= 1.0:
        raise ValueError(
            f"max_quarantine_fraction must be in [0, 1], got {max_quarantine_fraction!r}"
        )
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction

    context = context if context is not None else make_context()
    tag = uuid.uuid4().hex[:10]
    n = len(frame)
    data = frame.reset_index(drop=True).assign(**{ROW: np.arange(n, dtype=np.int64)})
    index_cols = ([event_id] if event_id in frame.columns else []) + [ROW]
    suite = context.suites.add(
        gx.ExpectationSuite(
            name=f"{suite.name}-{tag}",
            expectations=[e.copy(update={"id": None}) for e in suite.expectations],
        )
    )
    batch = (
        context.data_sources.add_pandas(f"pandas-{tag}")
        .add_dataframe_asset(name="log")
        .add_batch_definition_whole_dataframe("whole")
    )
    vd = context.validation_definitions.add(
        gx.ValidationDefinition(name=f"vd-{tag}", data=batch, suite=suite)
    )
    actions, docs_path = [], None
    if docs_dir is not None:
        docs_dir = Path(docs_dir).resolve()
        docs_dir.mkdir(parents=True, exist_ok=True)
        site = f"site-{tag}"
        context.add_data_docs_site(
            site,
            {
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(docs_dir),
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        actions = [UpdateDataDocsAction(name="docs", site_names=[site])]
        docs_path = str(docs_dir / "index.html")
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name=f"cp-{tag}",
            validation_definitions=[vd],
            actions=actions,
            result_format={
                "result_format": "COMPLETE",
                "unexpected_index_column_names": index_cols,
            },
        )
    )
    run = checkpoint.run(batch_parameters={"dataframe": data}, expectation_parameters=params)
    result = next(iter(run.run_results.values()))
    failures, positions = _failures(result.results, params, n, event_id, data, duplicates)
    failures = [_count_mistyped(f, data) for f in failures] + _label_width_failures(frame, suite, n)
    failures += [f for f, _ in row_failures]
    positions = [*positions, *(pos for _, pos in row_failures)]
    features = set((frame.attrs.get("poem") or {}).get("context_columns") or ())
    known = suite_columns(suite) | KNOWN_COLUMNS | features
    extra = tuple(c for c in frame.columns if c not in known and not _is_feature(c))
    row_reason = np.full(n, -1, dtype=np.int64)
    reasons: list[str] = []
    for failure, pos in zip([f for f in failures if f.level == "row"], positions, strict=True):
        if failure.reason not in reasons:
            reasons.append(failure.reason)
        free = pos[row_reason[pos] < 0]
        row_reason[free] = reasons.index(failure.reason)
    counts = np.bincount(row_reason[row_reason >= 0], minlength=len(reasons))
    by_reason = {r: int(c) for r, c in zip(reasons, counts, strict=True) if c}
    report = DataCheckReport(
        suite=suite.name.rsplit("-", 1)[0],
        n_rows=n,
        n_expectations=len(result.results),
        failures=tuple(failures),
        n_quarantined=int((row_reason >= 0).sum()),
        quarantined_by_reason=by_reason,
        max_quarantine_fraction=float(max_quarantine_fraction),
        extra_columns=extra,
        source=source,
        docs_path=docs_path,
        row_reasons=(row_reason, tuple(reasons)),
    )
    logger.info("validated %s: %d rows, %d failures", source or report.suite, n, len(failures))
    return report


def _count_mistyped(failure: ExpectationFailure, data: pd.DataFrame) -> ExpectationFailure:
    """Give a wrong-type failure the number of values that are not numbers (and examples)."""
    if (
        failure.expectation != "expect_column_values_to_be_in_type_list"
        or failure.column == "timestamp"
    ):
        return failure
    values = data[failure.column]
    bad = (pd.to_numeric(values, errors="coerce").isna() & values.notna()).to_numpy()
    ids = data["event_id"] if "event_id" in data.columns else data[ROW]
    return replace(
        failure,
        level="dataset",
        reason=mistyped_reason(failure.reason, int(bad.sum())),
        unexpected_count=int(bad.sum()),
        examples=tuple(_plain(v) for v in ids[bad][:_N_EXAMPLES]),
    )


def _is_feature(column: Any) -> bool:
    return isinstance(column, str) and column[:2] in ("x_", "y_") and column[2:].isdigit()


def _label_width_failures(frame: pd.DataFrame, suite: Any, n: int) -> list[ExpectationFailure]:
    """Label columns beyond the declared width (GX has no 'column must not exist')."""
    declared = {c for c in suite_columns(suite) if c.startswith("y_")}
    if not declared:
        return []
    extra = sorted(
        (c for c in frame.columns if _is_feature(c) and c.startswith("y_") and c not in declared),
        key=lambda c: int(c[2:]),
    )
    if not extra:
        return []
    return [
        ExpectationFailure(
            "action",
            "label_width",
            "dataset",
            f"multilabel vector has {len(declared) + len(extra)} label columns, "
            f"expected {len(declared)} (extra: {', '.join(extra)})",
            0,
            n,
        )
    ]


def row_count_failure(n: int, min_rows: int) -> ExpectationFailure | None:
    """The row-count expectation's failure for a log of ``n`` rows (None when enough)."""
    if n >= min_rows:
        return None
    return ExpectationFailure(
        "rows",
        "expect_table_row_count_to_be_between",
        "dataset",
        f"the table has {n} rows; at least {min_rows} needed",
        0,
        n,
    )


def _failures(
    results: Any,
    params: dict[str, Any],
    n: int,
    event_id: str,
    data: pd.DataFrame,
    duplicates: np.ndarray | None,
) -> tuple[list, list]:
    """ExpectationFailures (suite order) and, for row-level ones, the offending positions."""
    failures, positions, dead = [], [], set()
    results = sorted(
        results, key=lambda r: (r.expectation_config.meta or {}).get("level") != "dataset"
    )
    for r in results:
        cfg = r.expectation_config
        meta = cfg.meta or {}
        column = cfg.kwargs.get("column") or cfg.kwargs.get("column_B") or "table"
        if cfg.type == "expect_table_row_count_to_be_between":
            column = "rows"
        res = r.result or {}
        success = r.success
        if cfg.type == "expect_column_values_to_be_unique" and duplicates is not None and res:
            index = [
                {event_id: data[event_id].iat[p], ROW: int(p)} for p in duplicates[:_N_EXAMPLES]
            ]
            res = {**res, "unexpected_index_list": index, "unexpected_count": int(duplicates.size)}
            success = not duplicates.size
        if success:
            continue
        level = meta.get("level", "row")
        raised = isinstance(r.exception_info, dict) and r.exception_info.get("raised_exception")
        if column in dead and (level == "row" or raised or not r.result):
            continue  # the column is missing or mistyped: already reported once
        reason = meta.get("reason", cfg.type).format(**params)
        if cfg.type == "expect_table_row_count_to_be_between":
            failures += [f for f in [row_count_failure(n, params.get("min_rows", 1))] if f]
            continue
        if level == "dataset" or raised or "unexpected_index_list" not in res:
            dead.add(column)
            observed = str(res.get("observed_value", ""))
            failures.append(
                ExpectationFailure(column, cfg.type, "dataset", reason, 0, n, (), observed)
            )
            continue
        index = res.get("unexpected_index_list") or []
        pos = np.fromiter((d[ROW] for d in index), dtype=np.int64, count=len(index))
        if cfg.type == "expect_column_values_to_be_unique" and duplicates is not None:
            pos = duplicates
        examples = tuple(_plain(d.get(event_id, d[ROW])) for d in index[:_N_EXAMPLES])
        failures.append(
            ExpectationFailure(
                column,
                cfg.type,
                "row",
                reason,
                int(res.get("unexpected_count", pos.size)),
                int(res.get("element_count", n)),
                examples,
            )
        )
        positions.append(pos)
    return failures, positions


def _plain(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    return value.item() if hasattr(value, "item") else value

"""Load the logs named in ``cfg.data`` (I/O: the only tasks here that retry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import DataConfig
from flows.tasks import IO_RETRIES, stage_done, task_logger
from flows.tracking import data_fingerprint
from poem.io.csv import read_csv_frame
from poem.io.parquet import frame_to_log, read_frame


@task(name="fingerprint-logs", cache_policy=NO_CACHE, **IO_RETRIES)
def fingerprint_logs(data: DataConfig) -> str:
    """SHA-256 of the log files (names and bytes): the data fingerprint of runs and versions."""
    if not Path(data.path).exists():
        raise FileNotFoundError(f"data.path: log {data.path} does not exist")
    return data_fingerprint(data.path)


@task(name="load-logs", cache_policy=NO_CACHE, **IO_RETRIES)
def load_logs(data: DataConfig) -> Any:
    """Read the log table (Parquet file or partitioned folder, or CSV) without validating values."""
    if Path(data.path).suffix.lower() == ".csv":
        frame = read_csv_frame(data.path, family=data.family, **data.overrides())
    else:
        frame = read_frame(data.path)
    task_logger().info("loaded %d rows from %s", len(frame), data.path)
    return frame


@task(name="build-log", cache_policy=NO_CACHE, on_completion=[stage_done])
def build_log(frame: Any, data: DataConfig) -> Any:
    """Convert the validated table to a :class:`poem.data.LoggedBandit` (invariants rechecked)."""
    return frame_to_log(frame, family=data.family, **data.overrides())

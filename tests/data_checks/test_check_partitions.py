"""``check`` on k partitions (data_checks.check) equals the check of the log as one partition."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_checks.check import (
    PartitionOptions,
    check_logs,
    check_partitioned,
    check_pieces,
    open_client,
    use_partitions,
)
from data_checks.stages import CheckSettings, read_stage
from poem._dask_cluster import WORKER_MALLOC
from poem.diagnostics.mergeable import SKETCH_RELATIVE_ERROR, LogHistogram, Moments
from poem.diagnostics.propensity import (
    merge_summaries,
    propensity_report,
    propensity_summary,
    summary_report,
)
from poem.io.parquet import METADATA_KEY, write_log
from poem.io.partitions import LocalPartitions, log_partitions

SIZES = (150, 0, 37, 300, 113)  # uneven row groups, one empty


def _write_groups(table: pa.Table, path, sizes=SIZES) -> None:
    with pq.ParquetWriter(path, table.schema) as writer:
        start = 0
        for size in sizes:
            writer.write_table(table.slice(start, size), row_group_size=max(size, 1))
            start += size


def _defective_table(tmp_path, log_factory, cross_duplicate=False) -> pa.Table:
    write_log(log_factory("discrete", n=sum(SIZES), seed=3), tmp_path / "clean.parquet")
    table = pq.read_table(tmp_path / "clean.parquet")
    frame = table.to_pandas()
    frame.loc[[5, 300], "propensity"] = 1.5  # row rule / GX range: quarantined
    frame.loc[[100, 101, 420], "loss"] = 7.0  # out of the loss bounds
    frame.loc[51, "event_id"] = frame.loc[50, "event_id"]  # duplicate within a partition
    if cross_duplicate:
        frame.loc[400, "event_id"] = frame.loc[10, "event_id"]  # partitions 0 and 3
    return pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(
        table.schema.metadata
    )


@pytest.fixture
def parts_log(tmp_path, log_factory):
    path = tmp_path / "parts.parquet"
    _write_groups(_defective_table(tmp_path, log_factory), path)
    return path


def _core(report) -> dict:
    d = report.to_dict()
    for key in ("source", "docs_path"):
        d.pop(key)
    return d


def test_row_groups_are_uneven_with_an_empty_one(parts_log):
    assert [p.n_rows for p in log_partitions(parts_log)] == list(SIZES)


def _quarantined(folder) -> pd.DataFrame:
    files = [folder / "quarantine.parquet"] + sorted(folder.glob("quarantine/part-*.parquet"))
    frames = [pd.read_parquet(f) for f in files if f.exists()]
    return pd.concat(frames, ignore_index=True)[["event_id", "reason"]]


def _same_propensity_report(a, b) -> None:
    """Equal statuses and explanations; values equal up to the moments' merge rounding."""
    assert (a is None) == (b is None)
    if a is None:
        return
    assert (a.n_rows, a.family, a.status) == (b.n_rows, b.family, b.status)
    assert (a.quantiles, a.suggested_clip) == (b.quantiles, b.suggested_clip)
    for ca, cb in zip(a.checks, b.checks, strict=True):
        assert (ca.name, ca.status, ca.explanation) == (cb.name, cb.status, cb.explanation)
        assert cb.value == pytest.approx(ca.value, rel=1e-10, abs=1e-12), ca.name
        assert set(cb.details) == set(ca.details), ca.name
        for key, value in ca.details.items():
            if isinstance(value, float):
                assert cb.details[key] == pytest.approx(value, rel=1e-10, abs=1e-12), key
            else:
                assert cb.details[key] == value, key


def _check_slices(table, cuts, settings, out):
    """check_pieces on the table cut at ``cuts`` (k = len(cuts) + 1 local partitions)."""
    bounds = [0, *cuts, table.n_rows]
    rows = np.arange(table.n_rows)
    tables = [
        table.take((rows >= lo) & (rows < hi))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return check_pieces(LocalPartitions(tables), settings, source="log", out_dir=out)


def _mistyped(frame):
    return frame.assign(loss=frame["loss"].map(lambda v: "x" if v > 0 else v)), {}


def _many_bad(frame):
    frame.loc[::9, "propensity"] = 2.0
    return frame, {}


CASES = {
    "row-defects-and-duplicates": lambda f: (f, {}),
    "future-rows-quarantined": lambda f: (
        f,
        {
            "future_timestamps": "quarantine",
            "now": "2026-11-03T00:00:00Z",
            "max_quarantine_fraction": 0.5,
        },
    ),
    "mistyped-column": _mistyped,
    "too-many-quarantined": _many_bad,
    "too-few-rows": lambda f: (f, {"min_rows": 1000}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("cuts", [(150, 150, 187, 487), (1, 599)], ids=["5-uneven", "3-tiny"])
def test_k_partitions_give_the_report_of_one(tmp_path, log_factory, case, cuts):
    """Property: k local partitions (uneven, one empty) report exactly what one partition does.

    Counts, failures (column, reason, counts, examples), quarantined rows and reasons,
    pass/fail and the propensity report; duplicated event ids across and within partitions.
    """
    path = tmp_path / "log.parquet"
    pq.write_table(_defective_table(tmp_path, log_factory, cross_duplicate=True), path)
    table, _ = read_stage(path, CheckSettings())
    frame, over = CASES[case](table.frame.copy())
    frame.attrs = dict(table.frame.attrs)
    settings = CheckSettings(**{"now": "2030-01-01", "max_quarantine_fraction": 0.05, **over})
    table = replace(table, frame=frame)
    one = check_pieces(LocalPartitions([table]), settings, source="log", out_dir=tmp_path / "1")
    many = _check_slices(table, list(cuts), settings, tmp_path / "k")
    assert _core(many[0]) == _core(one[0])
    _same_propensity_report(one[1], many[1])
    if one[0].n_quarantined and not any(f.level == "dataset" for f in one[0].failures):
        pd.testing.assert_frame_equal(_quarantined(tmp_path / "k"), _quarantined(tmp_path / "1"))
    if case == "row-defects-and-duplicates":  # 2 + 3 + 2 within + 2 across
        assert one[0].quarantined_by_reason == {
            "event_id duplicated": 4,
            "propensity outside (0, 1]": 2,
            "loss outside the declared bounds [0, 1] (or infinite)": 3,
        }
        assert one[0].passed and one[1] is not None
    if case == "mistyped-column":
        (f,) = [f for f in many[0].failures if f.column == "loss"]
        assert f.reason.endswith(f"{(frame['loss'] == 'x').sum():,} values are not numbers")
    if case == "too-few-rows":
        assert "rows: the table has 600 rows; at least 1000 needed" in map(
            str, many[0].hard_failures
        )


def test_partitioned_check_equals_in_memory(parts_log, tmp_path, gx_context):
    memory = check_logs(parts_log, out_dir=tmp_path / "mem", context=gx_context, plots=False)
    parts = check_logs(
        parts_log,
        out_dir=tmp_path / "parts",
        partitions=PartitionOptions(mode="always", scheduler="sync"),
    )
    assert memory.report.n_quarantined == 7  # 2 propensity + 3 loss + 2 duplicated ids
    assert _core(parts.report) == _core(memory.report)
    _same_propensity_report(memory.propensity, parts.propensity)
    # quarantine: one file per partition with bad rows; together the in-memory file
    files = sorted((tmp_path / "parts" / "quarantine").glob("part-*.parquet"))
    assert [f.name for f in files] == ["part-00000.parquet", "part-00003.parquet"]
    together = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    pd.testing.assert_frame_equal(
        together, pd.read_parquet(tmp_path / "mem" / "quarantine.parquet")
    )


def test_cross_partition_duplicate_ids_are_quarantined(tmp_path, log_factory):
    path = tmp_path / "dup.parquet"
    table = _defective_table(tmp_path, log_factory, cross_duplicate=True)
    _write_groups(table, path)
    opts = PartitionOptions(mode="always", scheduler="sync", rows_per_bucket=7)  # 86 buckets
    out = check_logs(path, partitions=opts, out_dir=tmp_path / "o", max_quarantine_fraction=0.05)
    (f,) = [f for f in out.report.failures if f.column == "event_id"]
    assert (f.level, f.unexpected_count, f.element_count) == ("row", 4, sum(SIZES))
    ids = table["event_id"].to_pylist()
    assert f.examples == (ids[10], ids[50], ids[51], ids[10])  # rows 10, 50, 51; 400
    assert str(f).startswith("event_id: 4 of 600 rows: event_id duplicated")
    assert out.exit_code == 0 and out.report.quarantined_by_reason["event_id duplicated"] == 4
    q = _quarantined(tmp_path / "o")
    assert sorted(q.loc[q["reason"] == "event_id duplicated", "event_id"]) == sorted(
        [ids[10], ids[50], ids[51], ids[400]]
    )


@pytest.mark.parametrize("family", ["discrete", "multilabel", "candidates"])
def test_merged_summaries_give_the_report_of_one_partition(family, log_factory):
    log = log_factory(family, n=500, seed=1)
    cuts = np.split(np.arange(log.n_rows), [90, 91, 300])
    merged = merge_summaries([propensity_summary(log.take(rows)) for rows in cuts])
    a, b = propensity_report(log), summary_report(merged)
    # the same checks and caveats (the kurtosis one needs the merged fourth moment)
    _same_propensity_report(a, b)
    levels = [0.0, 0.01, 0.1, 0.5, 0.9, 1.0]
    np.testing.assert_allclose(
        list(a.quantiles.values()),
        np.quantile(log.propensities, levels),
        rtol=SKETCH_RELATIVE_ERROR,
        atol=0,
    )


def test_a_heavy_weight_tail_is_named_in_the_merged_report(log_factory):
    log = log_factory("discrete", n=500, seed=1)
    p = np.array(log.propensities, dtype=np.float64)
    p[:3] /= 5  # a few heavier weights; 500 rows: n/kurtosis < 300 for any kurtosis > 1.7
    log = replace(log, propensities=p)
    parts = [propensity_summary(log.take(r)) for r in np.split(np.arange(500), [2, 250])]
    report = summary_report(merge_summaries(parts))
    assert "few rows carry the variance" in report.check("uniform_weight").explanation


def test_moments_merge_equals_numpy():
    rng = np.random.default_rng(0)
    w = rng.lognormal(0.0, 1.5, 10_001)
    m = Moments()
    for part in np.split(w, [3, 3, 5000, 7000]):
        m = m.merge(Moments.of(part))
    c = w - w.mean()
    assert (m.n, m.nonzero) == (w.size, w.size)
    assert m.mean == pytest.approx(w.mean(), rel=1e-13)
    assert m.standard_error == pytest.approx(w.std(ddof=1) / np.sqrt(w.size), rel=1e-12)
    assert m.ess == pytest.approx(w.sum() ** 2 / (w @ w), rel=1e-12)
    assert m.skewness == pytest.approx(np.mean(c**3) / np.mean(c**2) ** 1.5, rel=1e-10)
    assert m.kurtosis == pytest.approx(np.mean(c**4) / np.mean(c**2) ** 2, rel=1e-10)
    assert Moments.of(np.ones(7)).merge(Moments.of(np.ones(3))).skewness == 0.0
    assert Moments.of(np.ones(7)).merge(Moments.of(np.ones(3))).kurtosis is None


def test_sketch_quantiles_within_stated_error():
    rng = np.random.default_rng(1)
    p = np.concatenate([rng.uniform(1e-6, 1.0, 5000), rng.beta(0.3, 3.0, 3001) + 1e-9])
    h = LogHistogram.of(p[:17]).merge(LogHistogram.of(p[17:]))
    q = np.array([0.0, 0.01, 0.1, 0.37, 0.5, 0.9, 1.0])
    np.testing.assert_allclose(h.quantile(q), np.quantile(p, q), rtol=SKETCH_RELATIVE_ERROR, atol=0)
    assert h.n == p.size and h.bins.size < p.size


def test_switch(tmp_path, parts_log):
    csv = tmp_path / "x.csv"
    csv.write_text("a\n1\n")
    assert not use_partitions(csv, PartitionOptions(mode="always"))
    assert use_partitions(parts_log, PartitionOptions(mode="always"))
    assert not use_partitions(parts_log, PartitionOptions(mode="auto"))  # < 1 GiB
    assert use_partitions(parts_log, PartitionOptions(mode="auto", min_bytes=1))
    assert not use_partitions(parts_log, None)
    with pytest.raises(ValueError, match="mode must be auto, always or never, got 'sometimes'"):
        PartitionOptions(mode="sometimes")


@pytest.mark.slow
def test_two_worker_cluster_equals_in_memory(parts_log, tmp_path, gx_context):
    pytest.importorskip("distributed")
    memory = check_logs(parts_log, context=gx_context, plots=False, max_quarantine_fraction=0.05)
    # `check --scheduler local`'s cluster: the flow's LocalCluster, workers' allocator set
    with open_client(PartitionOptions(scheduler="local", n_workers=2)) as client:
        env = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert set(env.values()) == {str(WORKER_MALLOC["MALLOC_TRIM_THRESHOLD_"])}
        parts = check_logs(
            parts_log, out_dir=tmp_path / "c", client=client, max_quarantine_fraction=0.05
        )
    assert _core(parts.report) == _core(memory.report)
    assert parts.propensity.check("uniform_weight").value == pytest.approx(
        memory.propensity.check("uniform_weight").value, rel=1e-12
    )
    n_q = sum(len(pd.read_parquet(f)) for f in (tmp_path / "c" / "quarantine").glob("*.parquet"))
    assert n_q == parts.report.n_quarantined


def test_cli_check_on_partitions(parts_log, tmp_path, capsys):
    import json

    from flows.cli import main

    code = main(
        ["check", str(parts_log), "--out", str(tmp_path / "o"), "--json"]
        + ["--partitions", "always", "--scheduler", "sync"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if out["passed"] else 1)
    d = out["data_checks"]
    assert (d["n_rows"], d["n_kept"], d["n_quarantined"]) == (600, 593, 7)
    assert out["files"]["quarantine"] == str(tmp_path / "o" / "quarantine")


def test_kept_partitions_equal_the_in_memory_log(parts_log, tmp_path):
    from data_checks.stages import (
        CheckSettings,
        build_stage,
        quarantine_stage,
        read_stage,
        validate_stage,
    )

    settings = CheckSettings(family="discrete", max_quarantine_fraction=0.05)
    table, _ = read_stage(parts_log, settings)
    report = validate_stage(table, settings)
    log, _ = build_stage(quarantine_stage(table, report)[0], report)
    got, _, _, kept = check_partitioned(parts_log, settings, out_dir=tmp_path, keep=True)
    assert got.passed and log.n_rows == sum(SIZES) - 7
    logs = [part for part in kept.items if part is not None]
    assert [part.n_rows for part in logs] == [145, 37, 298, 113]  # one empty; 5 + 2 quarantined
    assert all(part.event_ids is None for part in logs)  # ids serve the checks only
    np.testing.assert_array_equal(np.concatenate([p.contexts for p in logs]), log.contexts)
    for name in ("actions", "losses", "propensities", "timestamps"):
        got_values = np.concatenate([getattr(p, name) for p in logs])
        np.testing.assert_array_equal(got_values, getattr(log, name), err_msg=name)


def _as_rewards(table: pa.Table) -> pa.Table:
    """The same rows as rewards: reward = −loss with reward bounds [−δ_max, −δ_min]."""
    frame = table.to_pandas()
    meta = json.loads(table.schema.metadata[METADATA_KEY.encode()])
    lo, hi = meta.pop("loss_bounds")
    frame = frame.rename(columns={"loss": "reward"}).assign(reward=-frame["loss"])
    stored = {**meta, "loss_bounds": None, "reward_bounds": [-hi, -lo]}
    out = pa.Table.from_pandas(frame, preserve_index=False)
    return out.replace_schema_metadata({METADATA_KEY: json.dumps(stored)})


@pytest.mark.parametrize("in_memory", [True, False], ids=["in-memory", "partitions"])
def test_a_log_declaring_reward_bounds_is_reported_as_rewards(tmp_path, log_factory, in_memory):
    """The report says whether the log gave rewards, from the partitions' resolved metadata."""
    write_log(log_factory("discrete", n=300, seed=3), tmp_path / "losses.parquet")
    table = pq.read_table(tmp_path / "losses.parquet")
    _write_groups(_as_rewards(table), tmp_path / "rewards.parquet", (150, 150))
    settings = CheckSettings(family="discrete")
    for name, rewards in (("losses", False), ("rewards", True)):
        path = tmp_path / f"{name}.parquet"
        report, *_ = check_partitioned(path, settings, in_memory=in_memory)
        assert report.passed and report.rewards is rewards, report.to_markdown()
        assert report.to_dict()["rewards"] is rewards


def test_partitions_of_rewards_and_of_losses_are_refused_naming_them(tmp_path, log_factory):
    """A log is rewards or losses as a whole: a folder mixing both is never read as one."""
    write_log(log_factory("discrete", n=300, seed=3), tmp_path / "losses.parquet")
    table = pq.read_table(tmp_path / "losses.parquet")
    (tmp_path / "log").mkdir()
    pq.write_table(table.slice(0, 150), tmp_path / "log" / "part-0.parquet")
    pq.write_table(_as_rewards(table.slice(150)), tmp_path / "log" / "part-1.parquet")
    settings = CheckSettings(family="discrete")
    report, *_ = check_partitioned(tmp_path / "log", settings)
    assert not report.passed and not report.rewards
    (failure,) = [f for f in report.hard_failures if f.expectation == "partitions_agree"]
    assert re.search(
        r"^1 of 2 partitions .*\(e\.g\. \S+part-1\.parquet \(row group 0\): "
        r"rewards True vs False\)",
        failure.reason,
    ), failure.reason
    report, *_ = check_partitioned(tmp_path / "log", settings, in_memory=True)
    (failure,) = report.hard_failures  # in memory: the files' columns and metadata differ
    assert not report.rewards and "part-1.parquet: does not match part-0.parquet" in str(failure)

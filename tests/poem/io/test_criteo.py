"""Criteo test-bed reader: impression counts, logged candidate and propensity, malformed lines."""

from __future__ import annotations

import numpy as np
import pytest

from poem.data import check_logged_bandit
from poem.io.criteo import CriteoFormatError, parse_criteo_lines, read_criteo

FILES = ("test_train", "test_val", "test_test")


@pytest.fixture(scope="module")
def sample_dir(shared_data_dir):
    path = shared_data_dir / "criteo_testbed_sample"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


def _blocks(path):
    """Independent parse: (shared id, label fields, number of candidate lines) per block."""
    blocks = []
    for line in path.read_text().splitlines():
        if line.startswith("shared"):
            blocks.append([line.split("|")[0].split()[1], None, 0])
        elif line.strip():
            if not line.startswith("|"):
                blocks[-1][1] = (blocks[-1][2], *line.split("|")[0].strip().split(":"))
            blocks[-1][2] += 1
    return blocks


@pytest.mark.shared_data
@pytest.mark.parametrize("name", FILES)
def test_sample_files(sample_dir, name):
    log = read_criteo(sample_dir / name)
    blocks = _blocks(sample_dir / name)
    assert log.n_rows == 23 == len(blocks)
    assert log.family == "candidates" and log.loss_bounds == (-1.0, 0.0)
    np.testing.assert_array_equal(log.candidates.sizes, [b[2] for b in blocks])
    np.testing.assert_array_equal(
        log.actions, [b[1][0] for b in blocks]
    )  # the labelled line's index (0 here)
    np.testing.assert_array_equal(log.propensities, [float(b[1][3]) for b in blocks])  # bit for bit
    np.testing.assert_array_equal(log.losses, [-1.0 if b[1][2] == "0.001" else 0.0 for b in blocks])
    np.testing.assert_array_equal(log.event_ids, [b[0] for b in blocks])
    check_logged_bandit(log, min_rows=2)


@pytest.mark.shared_data
def test_sample_clicks_and_first_impression(sample_dir):
    clicks = {name: int(-read_criteo(sample_dir / name).losses.sum()) for name in FILES}
    assert clicks == {"test_train": 1, "test_val": 2, "test_test": 1}
    log = read_criteo(sample_dir / "test_train", n_features=2**10)
    assert log.candidates.sizes[0] == 12 and log.propensities[0] == 0.0029735810000000003
    assert log.candidates.features.shape == (int(log.candidates.sizes.sum()), 2**10)
    assert log.contexts.shape == (23, 2**10)


@pytest.mark.shared_data
def test_corrupted_sample_line_names_file_and_line(sample_dir, tmp_path):
    lines = (sample_dir / "test_train").read_text().splitlines(keepends=True)
    lines[4] = lines[4].replace("|", "", 1)  # line 5 loses its separator
    bad = tmp_path / "bad_train"
    bad.write_text("".join(lines))
    with pytest.raises(CriteoFormatError, match=r"bad_train, line 5: no '\|'") as info:
        read_criteo(bad)
    assert info.value.line_number == 5


def test_hand_written_block():
    lines = [
        "shared 7| 1:300 3_0",
        "| 11_1 12_0",
        "0:0.001:0.25 | 11_0 16_2:2",
        "",
        "shared 8| 1:2",
        "0:0.999:1 | a",
        "| b",
    ]
    impressions = parse_criteo_lines(lines)
    assert [(i["id"], i["action"], i["click"], i["propensity"]) for i in impressions] == [
        ("7", 1, 1, 0.25),
        ("8", 0, 0, 1.0),
    ]
    assert impressions[0]["candidates"][1] == [("11_0", 1.0), ("16_2", 2.0)]
    assert impressions[0]["shared"] == [("1", 300.0), ("3_0", 1.0)]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["| a"], r"line 1: candidate line before any 'shared' line"),
        (
            ["shared 1| x", "0:0.999 | a"],
            r"line 2: label '0:0\.999' must be '<action>:<cost>:<propensity>'",
        ),
        (
            ["shared 1| x", "0:0.5:0.1 | a"],
            r"line 2: cost 0\.5 is neither the click cost nor the no-click cost",
        ),
        (["shared 1| x", "0:0.999:1.5 | a"], r"line 2: propensity 1\.5 is outside \(0, 1\]"),
        (["shared 1| x", "0:0.999:abc | a"], r"line 2: label .* non-numeric"),
        (["shared 1| x", "0:0.999:0.1 a"], r"line 2: no '\|' separating"),
        (
            ["shared 1| x", "0:0.999:0.1 | a", "0:0.999:0.1 | b"],
            r"line 3: second labelled candidate in impression 1",
        ),
        (
            ["shared 1| x", "| a", "shared 2| x", "0:0.999:0.1 | a"],
            r"line 1: impression 1 has no labelled candidate",
        ),
        (
            ["shared 1| x", "", "shared 2| y", "0:0.999:0.1 | a"],
            r"line 1: impression 1 has no candidate lines",
        ),
        (
            ["shared 1| x", "0:0.999:0.1 | a:xyz"],
            r"line 2: feature value of token 'a:xyz' is not a number",
        ),
        (["shared | x", "0:0.999:0.1 | a"], r"line 1: shared line without an impression id"),
    ],
)
def test_malformed_lines_rejected_with_line_number(lines, message):
    with pytest.raises(CriteoFormatError, match=message):
        parse_criteo_lines(lines)


def test_empty_file(tmp_path):
    path = tmp_path / "empty"
    path.write_text("\n\n")
    with pytest.raises(ValueError, match=r"holds no impression"):
        read_criteo(path)

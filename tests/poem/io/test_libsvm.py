import numpy as np
import pytest
import scipy.sparse as sp

from poem.io.libsvm import load_libsvm_multilabel


def write(tmp_path, text, name="data.svm"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_reads_labels_features_comments_and_empty_label_sets(tmp_path):
    path = write(
        tmp_path,
        "# header comment\n0,2 1:0.5 3:-1.25\n\n1 2:0.25  # trailing comment\n 3:4\n",
    )
    X, Y = load_libsvm_multilabel(path)
    assert sp.isspmatrix_csr(X) and X.dtype == np.float64
    np.testing.assert_array_equal(
        X.toarray(), [[0.5, 0.0, -1.25], [0.0, 0.25, 0.0], [0.0, 0.0, 4.0]]
    )
    assert Y.dtype == np.int64
    np.testing.assert_array_equal(Y, [[1, 0, 1], [0, 1, 0], [0, 0, 0]])


def test_declared_widths_pad_features_and_labels(tmp_path):
    path = write(tmp_path, "0 1:1\n1 2:1\n")
    X, Y = load_libsvm_multilabel(path, n_features=5, n_labels=4)
    assert X.shape == (2, 5)
    np.testing.assert_array_equal(Y, [[1, 0, 0, 0], [0, 1, 0, 0]])


def test_zero_based_indices(tmp_path):
    path = write(tmp_path, "0 0:2 1:3\n")
    X, _ = load_libsvm_multilabel(path, zero_based=True)
    np.testing.assert_array_equal(X.toarray(), [[2.0, 3.0]])


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("0 1:1\n0 1:abc\n", {}, r"line 2: feature value 'abc' of index 1 is not a number"),
        ("0 1:1\n\n# c\n0 1\n", {}, r"line 4: feature '1' is not of the form index:value"),
        ("a 1:1\n", {}, r"line 1: label 'a' is not a number"),
        ("0,,1 1:1\n", {}, r"line 1: label '' is not a number"),
        ("0 x:1\n", {}, r"line 1: feature index 'x' is not an integer"),
        ("0 1:1\n0 0:1\n", {}, r"line 2: feature index 0 is below 1"),
        ("0 3:1 1:1\n", {}, r"line 1: feature index 1 is not larger than the previous index 3"),
        ("0 1:1 5:1\n", {"n_features": 3}, r"line 1: feature index 5 exceeds n_features=3"),
    ],
    ids=[
        "value",
        "no-colon",
        "label",
        "empty-label",
        "index",
        "zero-index",
        "unsorted",
        "too-wide",
    ],
)
def test_malformed_lines_are_reported_with_their_line_number(tmp_path, text, kwargs, message):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as info:
        load_libsvm_multilabel(path, **kwargs)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        (
            "0 1:1\n1.5 1:1\n",
            {},
            r"label ids must be non-negative integers; 1 of 2 rows are not; first lines: \[2\]",
        ),
        ("# c\n-1 1:1\n", {}, r"1 of 1 rows are not; first lines: \[2\]"),
        (
            "0 1:1\n3 1:1\n\n4 1:1\n",
            {"n_labels": 3},
            r"2 of 3 rows have label ids >= n_labels=3; first lines: \[2, 4\]",
        ),
        (
            "0 1:1\n0 1:nan\n0 1:inf\n",
            {},
            r"2 of 3 rows have non-finite feature values \(NaN or inf\); first lines: \[2, 3\]",
        ),
        ("# nothing\n", {}, r"holds no data rows"),
        (" 1:1\n", {}, r"no row carries a label; pass n_labels"),
    ],
    ids=["fractional-label", "negative-label", "label-range", "non-finite", "empty", "no-labels"],
)
def test_invalid_content_names_counts_and_lines(tmp_path, text, kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_libsvm_multilabel(write(tmp_path, text), **kwargs)


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="LibSVM file not found: .*absent.svm"):
        load_libsvm_multilabel(tmp_path / "absent.svm")
    path = write(tmp_path, "0 1:1\n")
    with pytest.raises(ValueError, match=r"n_labels must be a positive integer or None, got 0"):
        load_libsvm_multilabel(path, n_labels=0)
    with pytest.raises(ValueError, match=r"n_features must be a positive integer or None, got 2.5"):
        load_libsvm_multilabel(path, n_features=2.5)


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("split", "n_rows", "cardinality"), [("train", 1500, 4.228), ("test", 917, 4.252)]
)
def test_yeast_files_have_the_documented_shapes(shared_data_dir, split, n_rows, cardinality):
    path = shared_data_dir / "yeast" / f"yeast_{split}.svm"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    X, Y = load_libsvm_multilabel(path, n_features=103, n_labels=14)
    assert X.shape == (n_rows, 103)
    assert Y.shape == (n_rows, 14)
    assert Y.sum(axis=1).mean() == pytest.approx(cardinality, abs=5e-4)
    assert set(np.unique(Y)) == {0, 1} and Y.sum(axis=0).min() > 0
    if split == "train":  # SOURCES.md: the first line starts with "2,3"
        np.testing.assert_array_equal(np.flatnonzero(Y[0]), [2, 3])

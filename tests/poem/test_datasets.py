import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from poem.datasets import SupervisedDataset, load_dataset, load_files


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_digits_is_a_scaled_stratified_ten_class_problem(digits):
    assert isinstance(digits, SupervisedDataset)
    assert (digits.name, digits.family, digits.n_labels, digits.n_features) == (
        "digits",
        "discrete",
        10,
        64,
    )
    assert digits.X_train.shape == (1198, 64) and digits.X_test.shape == (599, 64)
    assert digits.Y_train.shape == (1198,) and digits.Y_test.shape == (599,)
    assert digits.Y_train.dtype == np.int64
    for X in (digits.X_train, digits.X_test):
        assert X.min() == 0.0 and X.max() == 1.0
    # stratified 2/3 split: every class keeps its share within one row
    total = np.bincount(np.concatenate([digits.Y_train, digits.Y_test]), minlength=10)
    assert np.all(np.abs(np.bincount(digits.Y_train, minlength=10) - total * 2 / 3) <= 1)
    assert len(digits.feature_names) == 64 and digits.feature_names[0] == "pixel_0_0"
    with pytest.raises(dataclasses.FrozenInstanceError):
        digits.name = "other"


def test_digits_split_is_seeded(digits):
    again = load_dataset("digits", random_state=0)
    np.testing.assert_array_equal(again.X_train, digits.X_train)
    np.testing.assert_array_equal(again.Y_test, digits.Y_test)
    other = load_dataset("digits", random_state=1)
    assert not np.array_equal(other.Y_train, digits.Y_train)


@pytest.mark.parametrize(
    ("name", "data_dir", "exception", "message"),
    [
        (
            "mnist",
            None,
            ValueError,
            r"name must be one of \('digits', 'yeast', 'tmc2007', 'emotions', 'medical'\), got 'mnist'",
        ),
        (
            "yeast",
            None,
            FileNotFoundError,
            r"the yeast data set is read from files: pass data_dir .*--data-dir",
        ),
        (
            "tmc2007",
            None,
            FileNotFoundError,
            r"the tmc2007 data set is read from files: pass data_dir",
        ),
        (
            "yeast",
            "/nonexistent/folder",
            FileNotFoundError,
            r"data_dir /nonexistent/folder is not a folder \(pass --data-dir\)",
        ),
    ],
)
def test_real_data_sets_need_a_data_dir(name, data_dir, exception, message):
    with pytest.raises(exception, match=message):
        load_dataset(name, data_dir)


@pytest.mark.parametrize(
    ("name", "missing"), [("yeast", "yeast_train.svm"), ("tmc2007", "tmc2007-500-train.arff")]
)
def test_missing_files_are_named(tmp_path, name, missing):
    with pytest.raises(FileNotFoundError, match=missing):
        load_dataset(name, tmp_path)


def test_load_files_pads_libsvm_pairs(tmp_path):
    (tmp_path / "a_train.svm").write_text("0 1:1\n1 2:1\n")
    (tmp_path / "a_test.svm").write_text("2 3:1\n")
    data = load_files(tmp_path / "a_train.svm", tmp_path / "a_test.svm")
    assert (data.name, data.family, data.n_labels, data.n_features) == (
        "a_train",
        "multilabel",
        3,
        3,
    )
    np.testing.assert_array_equal(data.Y_train, [[1, 0, 0], [0, 1, 0]])
    np.testing.assert_array_equal(data.Y_test, [[0, 0, 1]])
    np.testing.assert_array_equal(data.X_train.toarray(), [[1, 0, 0], [0, 1, 0]])
    assert data.feature_names == ("f1", "f2", "f3")


def test_load_files_reads_arff_pairs_and_checks_formats(tmp_path):
    header = "@relation r\n@attribute w numeric\n@attribute l1 {0,1}\n@attribute l2 {0,1}\n@data\n"
    (tmp_path / "b-train.arff").write_text(header + "{0 2,1 1}\n{2 1}\n")
    (tmp_path / "b-test.arff").write_text(header + "1,0,1\n")
    data = load_files(tmp_path / "b-train.arff", tmp_path / "b-test.arff", n_labels=2, name="b")
    assert (data.name, data.n_labels, data.feature_names) == ("b", 2, ("w",))
    np.testing.assert_array_equal(data.Y_train, [[1, 0], [0, 1]])
    with pytest.raises(ValueError, match=r"n_labels is required for ARFF files"):
        load_files(tmp_path / "b-train.arff", tmp_path / "b-test.arff")
    with pytest.raises(ValueError, match=r"same format, got b-train.arff and x.svm"):
        load_files(tmp_path / "b-train.arff", tmp_path / "x.svm")


def test_dataset_infers_label_count_and_checks_parts():
    X, y = np.zeros((4, 2)), np.array([0, 2, 1, 0])
    assert SupervisedDataset("t", "discrete", X, y, X[:2], y[:2], ["a", "b"]).n_labels == 3
    with pytest.raises(ValueError, match=r"X_test has 2 rows but Y_test has 3"):
        SupervisedDataset("t", "discrete", X, y, X[:2], y[:3], ["a", "b"])
    with pytest.raises(ValueError, match=r"X_train has 2 features but X_test has 1"):
        SupervisedDataset("t", "discrete", X, y, X[:2, :1], y[:2], ["a", "b"])
    with pytest.raises(
        ValueError, match=r"family must be 'discrete' or 'multilabel', got 'candidates'"
    ):
        SupervisedDataset("t", "candidates", X, y, X, y, ["a", "b"])


@pytest.mark.shared_data
def test_yeast_matches_sources(shared_data_dir):
    if not (shared_data_dir / "yeast").is_dir():
        pytest.skip("yeast is absent")
    data = load_dataset("yeast", shared_data_dir)
    assert (data.family, data.n_labels, data.n_features) == ("multilabel", 14, 103)
    assert isinstance(data.X_train, np.ndarray)  # dense: every feature is present
    assert data.X_train.shape == (1500, 103) and data.X_test.shape == (917, 103)
    assert data.Y_train.shape == (1500, 14) and data.Y_test.shape == (917, 14)
    assert data.feature_names[:2] == ("f1", "f2") and len(data.feature_names) == 103


@pytest.mark.shared_data
def test_tmc2007_matches_sources(shared_data_dir):
    if not (shared_data_dir / "tmc2007").is_dir():
        pytest.skip("tmc2007 is absent")
    data = load_dataset("tmc2007", shared_data_dir)
    assert (data.family, data.n_labels, data.n_features) == ("multilabel", 22, 500)
    assert sp.isspmatrix_csr(data.X_train) and sp.isspmatrix_csr(data.X_test)
    assert data.X_train.shape == (21519, 500) and data.X_test.shape == (7077, 500)
    assert data.Y_train.shape == (21519, 22) and data.Y_test.shape == (7077, 22)
    assert len(data.feature_names) == 500


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("name", "shape", "n_labels", "never_positive"),
    [("emotions", (391, 72), 6, 0), ("medical", (333, 1449), 45, 7)],
)
def test_mulan_sets_match_sources(shared_data_dir, name, shape, n_labels, never_positive):
    if not (shared_data_dir / "mulan").is_dir():
        pytest.skip("mulan/ is absent")
    data = load_dataset(name, shared_data_dir)
    assert (data.name, data.family, data.n_labels) == (name, "multilabel", n_labels)
    assert data.X_train.shape == shape and data.Y_train.shape == (shape[0], n_labels)
    # rare labels: 7 of medical's 45 never occur in its training part
    assert int((np.asarray(data.Y_train).sum(axis=0) == 0).sum()) == never_positive

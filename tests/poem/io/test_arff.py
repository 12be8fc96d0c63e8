import numpy as np
import pytest
import scipy.sparse as sp

from poem.io.arff import load_mulan_arff

HEADER = (
    "% a MULAN-style relation: two features, two labels\n"
    "@RELATION 'tiny test'\n"
    "\n"
    "@attribute 'word one' numeric\n"
    "@ATTRIBUTE colour {red,'dark blue'}\n"
    "@attribute class01 {0,1}\n"
    "@attribute class02 {0,1}\n"
    "@data\n"
)  # the @data line is line 8


def write(tmp_path, text, name="data.arff"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_sparse_rows_omit_zeros(tmp_path):
    path = write(tmp_path, HEADER + "{0 2.5,1 'dark blue',3 1}\n% comment\n\n{}\n{2 1,3 1}\n")
    X, Y, names = load_mulan_arff(path, n_labels=2, return_feature_names=True)
    assert sp.isspmatrix_csr(X) and X.dtype == np.float64
    np.testing.assert_array_equal(X.toarray(), [[2.5, 1.0], [0.0, 0.0], [0.0, 0.0]])
    assert Y.dtype == np.int64
    np.testing.assert_array_equal(Y, [[0, 1], [0, 0], [1, 1]])
    assert names == ("word one", "colour")


def test_dense_rows_with_quotes_and_nominal_positions(tmp_path):
    path = write(tmp_path, HEADER + "1.5,'dark blue',1,0\n-2,red,0,1\n")
    X, Y = load_mulan_arff(path, n_labels=2)
    np.testing.assert_array_equal(X.toarray(), [[1.5, 1.0], [-2.0, 0.0]])
    np.testing.assert_array_equal(Y, [[1, 0], [0, 1]])


def test_sparse_and_dense_encodings_agree(tmp_path):
    dense = write(tmp_path, HEADER + "0,red,0,1\n3,'dark blue',1,1\n", "dense.arff")
    sparse = write(tmp_path, HEADER + "{3 1}\n{0 3,1 'dark blue',2 1,3 1}\n", "sparse.arff")
    (Xd, Yd), (Xs, Ys) = load_mulan_arff(dense, n_labels=2), load_mulan_arff(sparse, n_labels=2)
    np.testing.assert_array_equal(Xd.toarray(), Xs.toarray())
    np.testing.assert_array_equal(Yd, Ys)


NUMERIC = "@relation r\n@attribute a numeric\n@attribute l numeric\n@data\n"  # @data on line 4


@pytest.mark.parametrize(
    ("text", "n_labels", "message"),
    [
        (HEADER + "1.5,?,1,0\n", 2, r"line 9: attribute 'colour' is missing \('\?'\)"),
        (
            HEADER + "1,red,0,0\n1.5,green,1,0\n",
            2,
            r"line 10: attribute 'colour' value 'green' is not one of its declared",
        ),
        (
            HEADER + "1,red,0,0\n\nabc,red,1,0\n",
            2,
            r"line 11: attribute 'word one' value 'abc' is not a number",
        ),
        (HEADER + "1,red,0\n", 2, r"line 9: dense row has 3 values, expected 4 attributes"),
        (HEADER + "{0 1,7 1}\n", 2, r"line 9: sparse index 7 is outside 0..3"),
        (HEADER + "{0 1,0 2}\n", 2, r"line 9: sparse index 0 appears twice"),
        (HEADER + "{0 1,3}\n", 2, r"line 9: sparse entry '3' is not of the form 'index value'"),
        (HEADER + "{x 1}\n", 2, r"line 9: sparse index 'x' is not an integer"),
        (
            HEADER + "{0 1}, {3}\n",
            2,
            r"line 9: sparse row must end with '\}' \(instance weights are not supported\)",
        ),
        (
            NUMERIC + "1,0\n2,1\n3,2\n",
            1,
            r"lines \[7\]: 1 of 3 rows have label values other than 0/1 \(labels \['l'\]\)",
        ),
        (NUMERIC + "1,0\n", 2, r"line 4: n_labels=2 but the relation has only 2 attributes"),
        (NUMERIC, 1, r"line 4: the @data section holds no rows"),
        ("@relation r\n@attribute a numeric\n", 1, r"end of file reached without an @data section"),
        (
            "@relation r\n@attribute a string\n@data\n",
            1,
            r"line 2: attribute 'a' has unsupported type 'string'",
        ),
        (
            "@relation r\n@attribute a {x,y\n@data\n",
            1,
            r"line 2: nominal attribute 'a' lacks its closing brace",
        ),
        ("@relation r\n@attribute\n", 1, r"line 2: malformed @attribute declaration"),
        (
            "@relation r\nhello\n",
            1,
            r"line 2: expected @relation, @attribute or @data, got 'hello'",
        ),
    ],
    ids=[
        "missing",
        "nominal",
        "number",
        "width",
        "sparse-range",
        "sparse-duplicate",
        "sparse-form",
        "sparse-index",
        "weights",
        "label-values",
        "too-many-labels",
        "no-rows",
        "no-data",
        "string",
        "brace",
        "attribute",
        "garbage",
    ],
)
def test_malformed_files_are_reported_with_line_numbers(tmp_path, text, n_labels, message):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as info:
        load_mulan_arff(path, n_labels=n_labels)
    assert str(info.value).startswith(str(path))


def test_missing_file_and_bad_label_count(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"ARFF file not found: .*absent.arff"):
        load_mulan_arff(tmp_path / "absent.arff", n_labels=2)
    with pytest.raises(ValueError, match=r"n_labels must be a positive integer, got 0"):
        load_mulan_arff(write(tmp_path, HEADER), n_labels=0)


@pytest.mark.shared_data
@pytest.mark.parametrize(
    ("split", "n_rows", "cardinality"), [("train", 21519, 2.226), ("test", 7077, 1.952)]
)
def test_tmc2007_500_has_the_documented_shapes(shared_data_dir, split, n_rows, cardinality):
    path = shared_data_dir / "tmc2007" / f"tmc2007-500-{split}.arff"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    X, Y, names = load_mulan_arff(path, n_labels=22, return_feature_names=True)
    assert X.shape == (n_rows, 500)
    assert Y.shape == (n_rows, 22)
    assert len(names) == 500 and names[0] == "abort"
    assert Y.sum(axis=1).mean() == pytest.approx(cardinality, abs=5e-4)
    np.testing.assert_array_equal(np.unique(X.data), [1.0])  # binary word features

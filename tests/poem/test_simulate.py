import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import expit, softmax
from sklearn.linear_model import LogisticRegression

from poem.datasets import SupervisedDataset
from poem.policies import StochasticPolicy, make_family
from poem.simulate import fit_logging_policy, map_loss, supervised_to_bandit, true_expected_loss


@pytest.fixture(scope="module")
def multilabel_data():
    """120 rows, 4 features, 3 labels drawn from a known per-label logistic model."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 4))
    W = rng.normal(size=(3, 4)) * 2
    Y = (rng.random((120, 3)) < expit(X @ W.T)).astype(np.int64)
    return X, Y


@pytest.fixture(scope="module")
def discrete_data():
    """150 rows, 3 features, 4 classes from a known softmax model."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(150, 3))
    P = softmax(X @ rng.normal(size=(4, 3)).T * 2, axis=1)
    y = (P.cumsum(1) < rng.random(150)[:, None]).sum(1).clip(max=3)
    return X, y


# -- fit_logging_policy ----------------------------------------------------------------------------
def test_multilabel_h0_is_one_logistic_regression_per_label(multilabel_data):
    X, Y = multilabel_data
    h0 = fit_logging_policy(X, Y, family="multilabel", fraction=1.0, random_state=0)
    assert h0.family.name == "multilabel" and h0.coef.shape == (3, 5)
    for label in range(3):
        reference = LogisticRegression(C=1.0, max_iter=1000).fit(X, Y[:, label])
        np.testing.assert_allclose(h0.coef[label, :4], reference.coef_[0], atol=1e-4)
        np.testing.assert_allclose(h0.coef[label, 4], reference.intercept_[0], atol=1e-4)
        np.testing.assert_allclose(
            h0.predict_proba(X)[:, label], reference.predict_proba(X)[:, 1], atol=1e-4
        )
    assert h0.metadata["n_fit_rows"] == 120 and h0.metadata["constant_labels"] == []
    assert h0.metadata["version"].startswith("h0-")


def test_discrete_h0_is_a_multinomial_logistic_regression(discrete_data):
    X, y = discrete_data
    h0 = fit_logging_policy(X, y, family="discrete", fraction=1.0, random_state=0)
    reference = LogisticRegression(C=1.0, max_iter=1000).fit(X, y)
    assert h0.coef.shape == (4, 4)
    np.testing.assert_allclose(h0.predict_proba(X), reference.predict_proba(X), atol=1e-4)


def test_two_classes_map_to_a_two_row_softmax(discrete_data):
    X, y = discrete_data
    y2 = (y >= 2).astype(np.int64)
    h0 = fit_logging_policy(X, y2, family="discrete", fraction=1.0, fit_intercept=False)
    reference = LogisticRegression(C=1.0, max_iter=1000, fit_intercept=False).fit(X, y2)
    assert h0.coef.shape == (2, 3)
    np.testing.assert_allclose(h0.predict_proba(X), reference.predict_proba(X), atol=1e-4)


@pytest.mark.parametrize("value", [0, 1])
def test_constant_label_gets_the_laplace_smoothed_rate(multilabel_data, value):
    X, Y = multilabel_data
    Y = Y.copy()
    Y[:, 1] = value
    with pytest.warns(
        UserWarning, match=r"h0: 1 label\(s\) constant in the 120 sampled rows: \[1\]"
    ):
        h0 = fit_logging_policy(X, Y, family="multilabel", fraction=1.0)
    assert h0.metadata["constant_labels"] == [1]
    rate = (120 * value + 0.5) / 121  # (k + ½)/(n + 1)
    np.testing.assert_allclose(h0.predict_proba(X)[:, 1], rate, rtol=1e-12)
    np.testing.assert_array_equal(h0.coef[1, :4], 0.0)
    # the other labels are the ordinary fits
    reference = LogisticRegression(C=1.0, max_iter=1000).fit(X, Y[:, 0])
    np.testing.assert_allclose(h0.coef[0, :4], reference.coef_[0], atol=1e-4)
    with pytest.warns(UserWarning, match=r"constant .*\[1\]"):
        h0 = fit_logging_policy(X, Y, family="multilabel", fraction=1.0, fit_intercept=False)
    np.testing.assert_array_equal(h0.coef[1], 0.0)  # no intercept: σ = ½, the only choice


def test_rare_labels_in_a_small_sample_do_not_crash(multilabel_data):
    X, Y = multilabel_data
    Y = np.hstack([Y, np.zeros((120, 2), dtype=np.int64)])
    Y[7, 3] = 1  # label 3 occurs once, label 4 never
    with pytest.warns(UserWarning, match=r"h0: \d+ label\(s\) constant in the 6 sampled rows"):
        h0 = fit_logging_policy(X, Y, family="multilabel", fraction=0.05, random_state=0)
    assert 4 in h0.metadata["constant_labels"]
    log = supervised_to_bandit(X, Y, h0, n_replays=2, random_state=0)
    assert np.all((log.propensities > 0) & (log.propensities <= 1))


def test_absent_class_keeps_a_small_probability(discrete_data):
    X, y = discrete_data
    y = np.where(y == 0, 1, y)  # class 0 never observed, K still 4 from y.max()
    with pytest.warns(
        UserWarning, match=r"h0: 1 class\(es\) absent in the 150 sampled rows: \[0\]"
    ):
        h0 = fit_logging_policy(X, y, family="discrete", fraction=1.0)
    assert h0.metadata["absent_classes"] == [0]
    assert h0.coef.shape == (4, 4)
    assert h0.predict_proba(X)[:, 0].max() < 0.05


def test_fraction_subsample_and_temperature(multilabel_data):
    X, Y = multilabel_data
    h0 = fit_logging_policy(
        X, Y, family="multilabel", fraction=0.25, temperature=0.5, random_state=3
    )
    again = fit_logging_policy(
        X, Y, family="multilabel", fraction=0.25, temperature=0.5, random_state=3
    )
    other = fit_logging_policy(
        X, Y, family="multilabel", fraction=0.25, temperature=0.5, random_state=4
    )
    assert h0.metadata["n_fit_rows"] == 30 and h0.temperature == 0.5
    np.testing.assert_array_equal(h0.coef, again.coef)
    assert not np.array_equal(h0.coef, other.coef)
    scores = np.hstack([X, np.ones((120, 1))]) @ h0.coef.T
    np.testing.assert_allclose(h0.predict_proba(X), expit(scores / 0.5))  # τ divides the scores


def test_dataset_argument_uses_its_training_part(discrete_data):
    X, y = discrete_data
    data = SupervisedDataset("toy", "discrete", X, y, X[:10], y[:10], ("a", "b", "c"), 4)
    from_data = fit_logging_policy(data, fraction=0.5, random_state=0)
    from_arrays = fit_logging_policy(X, y, family="discrete", fraction=0.5, random_state=0)
    np.testing.assert_array_equal(from_data.coef, from_arrays.coef)
    wider = SupervisedDataset("toy", "discrete", X, y, X[:10], y[:10], ("a", "b", "c"), 5)
    with pytest.warns(UserWarning, match=r"absent .*: \[4\]"):
        h0 = fit_logging_policy(wider, fraction=1.0)
    assert h0.coef.shape == (5, 4) and h0.metadata["absent_classes"] == [4]
    with pytest.raises(
        ValueError, match=r"family='multilabel' differs from the data set's family 'discrete'"
    ):
        fit_logging_policy(data, family="multilabel")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"family": "candidates"},
            r"family must be one of \('discrete', 'multilabel'\), got 'candidates'",
        ),
        ({"family": "multilabel", "fraction": 0.0}, r"fraction must be in \(0, 1\], got 0.0"),
        ({"family": "multilabel", "fraction": 1.5}, r"fraction must be in \(0, 1\], got 1.5"),
        ({"family": "multilabel", "temperature": 0.0}, r"temperature must be > 0, got 0.0"),
        (
            {"family": "multilabel", "fraction": 0.001},
            r"fraction=0.001 of 120 rows gives 1 row\(s\); h0 needs at least 2",
        ),
        ({"family": "discrete"}, r"discrete Y must be a non-empty 1-d array of class indices"),
    ],
)
def test_fit_logging_policy_rejects_bad_arguments(multilabel_data, kwargs, message):
    X, Y = multilabel_data
    with pytest.raises(ValueError, match=message):
        fit_logging_policy(X, Y, **kwargs)


def test_fit_logging_policy_rejects_bad_labels(multilabel_data):
    X, Y = multilabel_data
    bad = Y.copy()
    bad[[4, 9], 0] = 2
    with pytest.raises(
        ValueError, match=r"Y: 2 of 120 rows have entries other than 0/1; first rows: \[4, 9\]"
    ):
        fit_logging_policy(X, bad, family="multilabel")
    with pytest.raises(ValueError, match=r"Y has 119 rows but X has 120"):
        fit_logging_policy(X, Y[1:], family="multilabel")
    with pytest.raises(ValueError, match=r"Y \(the supervised labels\) is required"):
        fit_logging_policy(X, family="multilabel")


# -- supervised_to_bandit --------------------------------------------------------------------------
def test_multilabel_log_records_hamming_loss_and_h0_probabilities(multilabel_data):
    X, Y = multilabel_data
    h0 = fit_logging_policy(X, Y, family="multilabel", fraction=0.5, random_state=0)
    log = supervised_to_bandit(
        X, Y, h0, n_replays=3, random_state=0, start_time="2026-01-01T00:00:00"
    )
    assert (log.family, log.n_rows, log.n_actions, log.loss_bounds) == (
        "multilabel",
        360,
        3,
        (0.0, 3.0),
    )
    rows = np.tile(np.arange(120), 3)
    np.testing.assert_array_equal(log.contexts, X[rows])
    np.testing.assert_allclose(
        log.propensities, h0.action_probability(X[rows], log.actions), rtol=1e-12
    )
    np.testing.assert_array_equal(log.losses, np.abs(log.actions - Y[rows]).sum(axis=1))
    assert (
        log.event_ids[0] == "e0"
        and log.event_ids[-1] == "e359"
        and np.unique(log.event_ids).size == 360
    )
    assert log.timestamps[0] == np.datetime64("2026-01-01T00:00:00")
    assert np.all(np.diff(log.timestamps) == np.timedelta64(1, "s"))
    assert log.logging_model_version == h0.metadata["version"]
    assert log.logging_distribution is None


def test_discrete_log_records_zero_one_loss_and_full_distribution(discrete_data):
    X, y = discrete_data
    h0 = fit_logging_policy(X, y, family="discrete", fraction=0.5, random_state=0)
    log = supervised_to_bandit(
        X, y, h0, n_replays=2, random_state=1, event_id_prefix="d-", feature_names=["a", "b", "c"]
    )
    rows = np.tile(np.arange(150), 2)
    assert (log.family, log.n_rows, log.n_actions, log.loss_bounds) == (
        "discrete",
        300,
        4,
        (0.0, 1.0),
    )
    P = h0.predict_proba(X[rows])
    np.testing.assert_allclose(log.logging_distribution, P)
    np.testing.assert_allclose(log.propensities, P[np.arange(300), log.actions], rtol=1e-12)
    np.testing.assert_array_equal(log.losses, (log.actions != y[rows]).astype(float))
    assert log.event_ids[5] == "d-5" and log.timestamps is None
    assert log.feature_names == ("a", "b", "c")


def test_sampling_is_seeded_and_sparse_contexts_work(multilabel_data):
    X, Y = multilabel_data
    h0 = fit_logging_policy(sp.csr_matrix(X), Y, family="multilabel", fraction=0.5, random_state=0)
    first = supervised_to_bandit(sp.csr_matrix(X), Y, h0, n_replays=2, random_state=7)
    again = supervised_to_bandit(sp.csr_matrix(X), Y, h0, n_replays=2, random_state=7)
    other = supervised_to_bandit(sp.csr_matrix(X), Y, h0, n_replays=2, random_state=8)
    assert sp.issparse(first.contexts)
    np.testing.assert_array_equal(first.actions, again.actions)
    assert not np.array_equal(first.actions, other.actions)


def test_context_order_keeps_replays_together_so_a_time_split_separates_contexts(
    multilabel_data,
):
    X, Y = multilabel_data
    h0 = fit_logging_policy(X, Y, family="multilabel", fraction=0.5, random_state=0)
    by_pass = supervised_to_bandit(X, Y, h0, n_replays=4, random_state=0, start_time="2026-01-01")
    log = supervised_to_bandit(
        X, Y, h0, n_replays=4, random_state=0, start_time="2026-01-01", order="context"
    )
    rows = np.repeat(np.arange(120), 4)
    np.testing.assert_array_equal(log.contexts, X[rows])
    np.testing.assert_array_equal(log.losses, np.abs(log.actions - Y[rows]).sum(axis=1))
    np.testing.assert_allclose(
        log.propensities, h0.action_probability(X[rows], log.actions), rtol=1e-12
    )
    # the last quarter by time: 30 contexts never seen before it (pass order: none)
    cut = 360
    for built, unseen in ((log, 30), (by_pass, 0)):
        seen = {tuple(x) for x in built.contexts[:cut]}
        assert sum(tuple(x) not in seen for x in built.contexts[cut:]) == 4 * unseen


def test_supervised_to_bandit_rejects_bad_arguments(multilabel_data):
    X, Y = multilabel_data
    h0 = fit_logging_policy(X, Y, family="multilabel", fraction=0.5, random_state=0)
    with pytest.raises(ValueError, match=r"n_replays must be an integer >= 1, got 0"):
        supervised_to_bandit(X, Y, h0, n_replays=0)
    with pytest.raises(ValueError, match=r"order must be 'pass' or 'context', got 'time'"):
        supervised_to_bandit(X, Y, h0, order="time")
    with pytest.raises(
        ValueError, match=r"multilabel Y must have shape \(120, 3\), got \(120, 2\)"
    ):
        supervised_to_bandit(X, Y[:, :2], h0)
    candidates = StochasticPolicy.uniform(make_family("candidates", 4))
    with pytest.raises(ValueError, match=r"supports the families .* got 'candidates'"):
        supervised_to_bandit(X, Y, candidates)
    uniform = StochasticPolicy.uniform(make_family("discrete", 4, 3))
    with pytest.raises(
        ValueError, match=r"Y: 1 of 120 rows are not class indices in 0..2; first rows: \[7\]"
    ):
        supervised_to_bandit(X, np.where(np.arange(120) == 7, 3, 0), uniform)


# -- true_expected_loss / map_loss -----------------------------------------------------------------
def test_uniform_policies_have_hand_computed_losses(multilabel_data):
    X, Y = multilabel_data
    assert true_expected_loss(
        StochasticPolicy.uniform(make_family("multilabel", 4, 3)), X, Y
    ) == pytest.approx(1.5)
    assert true_expected_loss(
        StochasticPolicy.uniform(make_family("discrete", 4, 5)), X, Y[:, 0]
    ) == pytest.approx(0.8)


def test_map_loss_is_hand_computed():
    family = make_family("multilabel", 1, 2, fit_intercept=False)
    policy = StochasticPolicy(
        family, np.array([[1.0], [-1.0]])
    )  # MAP: label0 = [x > 0], label1 = [x < 0]
    X = np.array([[1.0], [-1.0], [2.0]])
    Y = np.array([[1, 0], [1, 1], [0, 1]])  # Hamming errors 0, 1, 2
    assert map_loss(policy, X, Y) == pytest.approx(1.0)
    assert true_expected_loss(policy, X, Y) == pytest.approx(
        np.mean([2 * expit(-1.0), 1.0, 2 * expit(2.0)])
    )


@pytest.mark.parametrize("family", ["multilabel", "discrete"])
def test_closed_form_matches_monte_carlo(multilabel_data, discrete_data, family):
    X, Y = multilabel_data if family == "multilabel" else discrete_data
    h0 = fit_logging_policy(X, Y, family=family, fraction=0.5, temperature=1.5, random_state=0)
    log = supervised_to_bandit(X, Y, h0, n_replays=200, random_state=0)
    exact = true_expected_loss(h0, X, Y)
    # 200 replays per row: the Monte Carlo mean has standard error sd(δ)/sqrt(n·R)
    tolerance = 4.0 * log.losses.std() / np.sqrt(log.n_rows)
    assert abs(log.losses.mean() - exact) < tolerance
    assert tolerance < 0.05 * exact

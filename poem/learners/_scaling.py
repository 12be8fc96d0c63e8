r"""Feature standardization inside the learners, folded back into raw-space coefficients.

AdaGrad's per-coordinate step is about η/√t in units of w, so a fixed η only works when every
feature has about the same scale. The learner therefore optimises over standardized inputs

.. math:: z_j = (x_j - m_j) / s_j, \qquad s_j = \sqrt{d'}\,\sigma_j,

and maps the solution back to the raw inputs, so the fitted policy, its artifact and serving
never see the transform:

.. math:: w^{raw}_{l,j} = w_{l,j} / s_j, \qquad
          b^{raw}_l = b_l - \sum_j w_{l,j}\, m_j / s_j,

where σ_j is the feature's standard deviation (or root mean square, below), d' the number of
non-constant features, l indexes the rows of the coefficient array (labels or classes), j the
raw features and b the intercept column. The factor √d' gives a standardized row a mean squared
norm of 1, the intercept's own, whatever the dimension. The map is exact
(w·z + b = w^{raw}·x + b^{raw} for every x). Dense inputs with an intercept are centred and
divided by their standard deviation; sparse inputs, or inputs without an intercept, are only
divided by their root mean square (centring needs an intercept to absorb it and would densify);
a sparse matrix more than half non-zero is made dense first. Constant-zero columns keep s = 1.
The L2 penalty μ‖w‖² applies to the standardized coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["FeatureScaling", "fit_feature_scaling", "scaling_from_moments", "standardize"]

DENSE_FRACTION = 0.5  # sparse inputs with more non-zeros than this are treated as dense


@dataclass(frozen=True)
class FeatureScaling:
    """Per-feature centre m and scale s of prepared inputs (intercept column untouched).

    Attributes
    ----------
    mean : ndarray of shape (n_features,)
        Centres m_j (zeros when not centring).
    scale : ndarray of shape (n_features,)
        Scales s_j > 0.
    fit_intercept : bool
        Whether the last input column is the intercept.
    """

    mean: np.ndarray
    scale: np.ndarray
    fit_intercept: bool

    @property
    def centred(self) -> bool:
        """Whether the transform subtracts the centres."""
        return bool(np.any(self.mean != 0))

    def transform(self, inputs: Any) -> Any:
        """Standardized copy of prepared inputs (the intercept column stays 1)."""
        d = self.scale.size
        factor = 1.0 / self.scale
        if self.fit_intercept:
            factor = np.append(factor, 1.0)
        if sp.issparse(inputs):
            return sp.csr_matrix(inputs @ sp.diags(factor))
        Z = np.asarray(inputs, dtype=np.float64) * factor
        if self.centred:
            Z[:, :d] -= self.mean / self.scale
        return Z

    def to_raw(self, coef: np.ndarray) -> np.ndarray:
        """Raw-space coefficients of standardized-space ``coef`` (module docstring)."""
        d = self.scale.size
        out = np.array(coef, dtype=np.float64)
        out[..., :d] = out[..., :d] / self.scale
        if self.fit_intercept and self.centred:
            out[..., d] -= out[..., :d] @ self.mean
        return out

    def from_raw(self, coef: np.ndarray) -> np.ndarray:
        """Standardized-space coefficients of raw ``coef`` (inverse of :meth:`to_raw`)."""
        d = self.scale.size
        out = np.array(coef, dtype=np.float64)
        if self.fit_intercept and self.centred:
            out[..., d] += out[..., :d] @ self.mean
        out[..., :d] = out[..., :d] * self.scale
        return out


def fit_feature_scaling(inputs: Any, n_features: int, fit_intercept: bool) -> FeatureScaling:
    r"""Centres and scales of prepared inputs (module docstring).

    .. math:: m_j = \bar x_j,\; s_j = \sqrt{d'}\,\mathrm{sd}(x_j) \quad\text{or}\quad
              m_j = 0,\; s_j = \sqrt{d'}\sqrt{\overline{x_j^2}}

    where x̄_j is the column mean over the n rows and d' the number of non-constant columns
    (the first form for dense inputs with an intercept, the second otherwise).

    Parameters
    ----------
    inputs : ndarray or sparse matrix of shape (n_samples, n_inputs)
        Prepared inputs (the intercept column last when ``fit_intercept``).
    n_features : int
        Number of raw feature columns (n_inputs minus the intercept).
    fit_intercept : bool
        Whether the last column is the intercept.

    Returns
    -------
    FeatureScaling
        The transform; columns with s = 0 (constant zero, or constant when centred) get s = 1.
    """
    X = inputs[:, :n_features]
    if sp.issparse(X):
        mean = np.zeros(n_features)
        scale = np.sqrt(np.asarray(X.multiply(X).mean(axis=0)).ravel())
    elif fit_intercept:  # dense with an intercept: centred
        mean = np.asarray(X, dtype=np.float64).mean(axis=0)
        scale = np.asarray(X, dtype=np.float64).std(axis=0)
    else:
        mean = np.zeros(n_features)
        scale = np.sqrt(np.mean(np.square(np.asarray(X, dtype=np.float64)), axis=0))
    return scaling_from_moments(mean, scale, fit_intercept)


def scaling_from_moments(
    mean: np.ndarray, spread: np.ndarray, fit_intercept: bool
) -> FeatureScaling:
    """The transform of :func:`fit_feature_scaling` from the columns' centres and spreads.

    ``spread`` is the standard deviation (centred) or the root mean square (not centred) of
    each raw column, however it was computed (in memory, or merged over partitions).
    """
    varying = spread > 1e-12 * max(1.0, float(np.max(spread, initial=0.0)))
    # mean squared row norm 1 (the intercept's): Σ_j E[z_j²] = 1 over the d' varying columns
    scale = np.where(varying, spread * np.sqrt(max(1, int(varying.sum()))), 1.0)
    return FeatureScaling(mean, scale, bool(fit_intercept))


def standardize(inputs: Any, n_features: int, fit_intercept: bool) -> tuple[Any, FeatureScaling]:
    """Standardized prepared inputs and their transform (module docstring).

    Parameters
    ----------
    inputs, n_features, fit_intercept
        As :func:`fit_feature_scaling`'s.

    Returns
    -------
    Z : ndarray or sparse matrix of shape (n_samples, n_inputs)
        Standardized inputs (dense when the input is more than half non-zero).
    scaling : FeatureScaling
        The transform, for :meth:`FeatureScaling.to_raw`.
    """
    if sp.issparse(inputs) and (
        inputs[:, :n_features].nnz > DENSE_FRACTION * inputs.shape[0] * n_features
    ):
        inputs = inputs.toarray()
    scaling = fit_feature_scaling(inputs, n_features, fit_intercept)
    return scaling.transform(inputs), scaling

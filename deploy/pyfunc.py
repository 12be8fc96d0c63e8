"""MLflow pyfunc serving a :class:`~poem.policies.StochasticPolicy` (DESIGN §7, STYLE §9).

Every request row (discrete, multilabel) or every request id (candidate sets, long format)
gets one decision: the sampled action yᵢ ~ π(·|xᵢ), **its propensity under exactly the served
distribution** (temperature α and exploration floor ε applied, so today's served policy is
tomorrow's logging policy π₀), the MAP action, the registered model version and the time of
the decision; with ``params={"return_distribution": true}`` also the full served distribution.

Request layout
--------------
``discrete`` / ``multilabel``
    one row per decision, one float column per feature (names from the artifact's
    ``metadata["feature_names"]``, else ``x0..x{d-1}``), optional string column ``event_id``.
``candidates``
    long format: one row per candidate with the candidate's feature columns and a string
    column ``event_id``; the rows of one request must be contiguous. ``action`` is the
    0-based position of the chosen candidate inside its request.

Params (all optional): ``seed`` (integer ≥ 0 → reproducible draws; the default −1 means a
fresh OS-entropy generator per request, so draws are independent across requests — an
omitted signature param takes its default, ECOSYSTEM §3) and ``return_distribution``.

Malformed requests (no rows, missing or non-numeric feature columns, NaN/inf, bad candidate
layout, bad params) raise :class:`mlflow.exceptions.MlflowException` with error code
``INVALID_PARAMETER_VALUE``; the scoring server turns it into HTTP 400 with the message.

The model is logged as *models from code*: MLflow executes this file and :func:`set_model`
at the bottom selects the model, so no pickle is stored. The policy itself is the
``.npz`` + JSON artifact of :mod:`poem.io.artifact`, checksum-verified in ``load_context``.
"""

from __future__ import annotations

import datetime as _dt
import uuid
import warnings
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from poem.data import CandidateSets
from poem.io.artifact import ArtifactError, load_policy
from poem.policies import StochasticPolicy

__all__ = [
    "ARTIFACT_KEY",
    "EVENT_ID",
    "OUTPUT_COLUMNS",
    "StochasticPolicyModel",
    "example_request",
    "feature_names_of",
    "invalid_request",
    "log_policy_model",
    "model_signature",
]

ARTIFACT_KEY = "policy"
EVENT_ID = "event_id"
OUTPUT_COLUMNS = ("event_id", "action", "propensity", "map_action", "model_version", "timestamp")
UNSEEDED = -1
_N_EXAMPLES = 5
_REGISTERED_META = (
    "registered_model_meta"  # written by MLflow beside MLmodel when loading models:/...
)


def invalid_request(message: str) -> MlflowException:
    """Build the exception every request-validation failure raises (HTTP 400 when served)."""
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


def feature_names_of(policy: StochasticPolicy) -> list[str]:
    """Column names of the policy's features: ``metadata["feature_names"]`` or ``x0..x{d-1}``."""
    names = policy.metadata.get("feature_names")
    d = policy.family.n_features
    if names is not None and len(names) == d:
        return [str(n) for n in names]
    return [f"x{j}" for j in range(d)]


def _rows(mask: np.ndarray) -> str:
    idx = np.flatnonzero(mask)[:_N_EXAMPLES]
    return ", ".join(str(int(i)) for i in idx)


def _model_version(model_dir: Path) -> str:
    """Read the registered version (``registered_model_meta``), else the logged model id."""
    meta = model_dir / _REGISTERED_META
    if meta.is_file():
        for line in meta.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model_version" and value.strip():
                return value.strip().strip("'\"")
    mlmodel = model_dir / "MLmodel"
    if mlmodel.is_file():
        for line in mlmodel.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model_id" and value.strip():
                return value.strip()
    return "unregistered"


class StochasticPolicyModel(mlflow.pyfunc.PythonModel):
    """Pyfunc wrapper that samples decisions from a stochastic policy and reports propensities.

    Parameters
    ----------
    policy : StochasticPolicy or None, default=None
        A policy to serve directly (tests, benchmarks); when None, ``load_context`` loads
        the artifact ``context.artifacts["policy"]``.
    model_version : str, default="unregistered"
        Version reported with each decision when ``policy`` is given directly.
    """

    def __init__(self, policy: StochasticPolicy | None = None, model_version: str = "unregistered"):
        self.policy = policy
        self.model_version = model_version
        if policy is not None:
            self._configure(policy)

    def _configure(self, policy: StochasticPolicy) -> None:
        self.family_name = policy.family.name
        self.feature_names = feature_names_of(policy)

    def load_context(self, context: Any) -> None:
        """Load the policy artifact; a tampered or incomplete artifact fails here, loudly.

        Raises
        ------
        MlflowException
            Wrapping :class:`~poem.io.artifact.ArtifactError` (file named, checksum reported).
        """
        directory = Path(context.artifacts[ARTIFACT_KEY])
        try:
            self.policy = load_policy(directory)
        except ArtifactError as exc:
            raise MlflowException(f"cannot load the served policy: {exc}") from exc
        self.model_version = _model_version(directory.parent.parent)
        self._configure(self.policy)

    # -- request validation -------------------------------------------------------------------
    def _features(self, frame: pd.DataFrame) -> np.ndarray:
        names = self.feature_names
        columns = frame.columns
        if columns.is_unique:
            positions = columns.get_indexer(names)
            missing = [n for n, i in zip(names, positions, strict=True) if i < 0]
        else:
            missing = [n for n in names if n not in columns]
        if missing:
            raise invalid_request(
                f"{len(missing)} of {len(names)} feature columns are missing from "
                "the request: "
                f"{missing[:10]}{' …' if len(missing) > 10 else ''}"
            )
        if list(columns) == names:  # the usual case after MLflow's schema enforcement
            block = frame
        elif columns.is_unique:
            block = frame.iloc[:, positions]
        else:
            block = frame[names]
        problems = []
        for name, dtype in zip(self.feature_names, block.dtypes, strict=True):
            if getattr(dtype, "kind", "O") in "biuf":
                continue
            col = block[name]
            numeric = pd.to_numeric(col, errors="coerce")
            bad = (numeric.isna() & col.notna()).to_numpy()
            if bad.any():
                problems.append(
                    f"column {name!r} has {int(bad.sum())} non-numeric value(s) (rows {_rows(bad)})"
                )
        if problems:
            raise invalid_request("feature columns must be numeric: " + "; ".join(problems[:10]))
        try:
            X = block.to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError) as exc:
            raise invalid_request(f"feature columns must be numeric ({exc})") from exc
        finite = np.isfinite(X)
        if not finite.all():
            bad_cols = np.flatnonzero(~finite.all(axis=0))
            parts = [
                f"{self.feature_names[j]!r}: {int((~finite[:, j]).sum())} row(s) "
                f"(rows {_rows(~finite[:, j])})"
                for j in bad_cols[:10]
            ]
            raise invalid_request(
                f"{len(bad_cols)} feature column(s) contain NaN or infinite values: "
                + "; ".join(parts)
            )
        return X

    def _event_ids(self, frame: pd.DataFrame, required: bool) -> np.ndarray | None:
        if EVENT_ID not in frame.columns:
            if required:
                raise invalid_request(
                    f"candidate-set requests need an {EVENT_ID!r} column (long format: one row per "
                    "candidate, the rows of one request contiguous)"
                )
            return None
        ids = frame[EVENT_ID]
        bad = ids.isna().to_numpy() | (ids.astype(str).str.len() == 0).to_numpy()
        if bad.any():
            raise invalid_request(
                f"column {EVENT_ID!r} has {int(bad.sum())} empty value(s) (rows {_rows(bad)})"
            )
        return ids.astype(str).to_numpy()

    def _candidate_sets(self, X: np.ndarray, ids: np.ndarray) -> tuple[CandidateSets, np.ndarray]:
        codes, uniques = pd.factorize(ids, sort=False)
        steps = np.diff(codes)
        if np.any(steps < 0):
            split = np.flatnonzero(steps < 0)
            offenders = sorted({str(ids[i + 1]) for i in split})
            raise invalid_request(
                f"candidate rows of {len(offenders)} request(s) are not contiguous "
                f"in column {EVENT_ID!r} "
                f"(e.g. {offenders[:_N_EXAMPLES]}); send each request's candidates as one block"
            )
        sizes = np.bincount(codes, minlength=len(uniques))
        floor = self.policy.exploration_floor
        if floor > 0 and np.any(sizes * floor > 1.0 + 1e-12):
            too_big = sizes * floor > 1.0 + 1e-12
            raise invalid_request(
                f"{int(too_big.sum())} request(s) have more than {int(np.floor(1 / floor))} "
                "candidates, the "
                f"most the exploration floor ε={floor:g} allows (kε ≤ 1), e.g. "
                f"{[str(u) for u in np.asarray(uniques)[too_big][:_N_EXAMPLES]]}"
            )
        return CandidateSets.from_sizes(X, sizes), np.asarray(uniques).astype(str)

    @staticmethod
    def _params(params: dict[str, Any] | None) -> tuple[int | None, bool]:
        params = dict(params or {})
        unknown = sorted(set(params) - {"seed", "return_distribution"})
        if unknown:
            raise invalid_request(
                f"unknown params {unknown}; allowed: ['return_distribution', 'seed']"
            )
        seed = params.get("seed", UNSEEDED)
        if seed is None:
            seed = UNSEEDED
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < UNSEEDED:
            raise invalid_request(
                f"param 'seed' must be an integer ≥ 0 (or -1 for unseeded), got {seed!r}"
            )
        flag = params.get("return_distribution", False)
        if not isinstance(flag, (bool, np.bool_)):
            raise invalid_request(f"param 'return_distribution' must be a boolean, got {flag!r}")
        return (None if seed == UNSEEDED else int(seed)), bool(flag)

    # -- prediction ----------------------------------------------------------------------------
    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        r"""Sample one decision per request row (or per request id for candidate sets).

        The returned propensity is π(yᵢ|xᵢ) of the sampled action under the served
        distribution (family docstrings give the formulas, e.g. discrete
        :math:`\pi(y|x) = (1 - K\varepsilon)\,\mathrm{softmax}(w_y \cdot x / \alpha)
        + \varepsilon`).

        Parameters
        ----------
        context : PythonModelContext or None
            Unused (the policy is loaded in ``load_context``).
        model_input : pandas.DataFrame
            The request (see the module docstring for the layout).
        params : dict or None
            ``seed`` (int, −1 = unseeded) and ``return_distribution`` (bool).

        Returns
        -------
        pandas.DataFrame
            Columns ``event_id, action, propensity, map_action, model_version, timestamp``
            (+ ``distribution``); multilabel actions are 0/1 lists.

        Raises
        ------
        MlflowException
            ``INVALID_PARAMETER_VALUE`` for a malformed request.
        """
        if self.policy is None:
            raise MlflowException("the model has no policy; load it with mlflow.pyfunc.load_model")
        seed, want_distribution = self._params(params)
        if not isinstance(model_input, pd.DataFrame):
            raise invalid_request(
                f"the request must be a table (dataframe_split), got {type(model_input).__name__}"
            )
        if model_input.shape[0] == 0:
            raise invalid_request("the request has no rows")
        X = self._features(model_input)
        policy, family = self.policy, self.policy.family
        rng = np.random.default_rng(seed)
        now = _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        if self.family_name == "candidates":
            inputs, event_ids = self._candidate_sets(X, self._event_ids(model_input, required=True))
        else:
            inputs = family.prepare(X)
            ids = self._event_ids(model_input, required=False)
            event_ids = (
                ids if ids is not None else np.array([uuid.uuid4().hex for _ in range(X.shape[0])])
            )
        kw = {"temperature": policy.temperature, "exploration_floor": policy.exploration_floor}
        actions, propensities = family.sample(policy.coef, inputs, rng, **kw)
        map_actions = family.predict(policy.coef, inputs)
        out = {
            "event_id": event_ids,
            "action": actions.tolist() if actions.ndim == 2 else actions.astype(np.int64),
            "propensity": np.asarray(propensities, dtype=np.float64),
            "map_action": map_actions.tolist()
            if map_actions.ndim == 2
            else map_actions.astype(np.int64),
            "model_version": self.model_version,
            "timestamp": now,
        }
        if want_distribution:
            dist = family.predict_proba(policy.coef, inputs, **kw)
            if self.family_name == "candidates":
                out["distribution"] = [p.tolist() for p in np.split(dist, inputs.offsets[1:-1])]
            else:
                out["distribution"] = dist.tolist()
        return pd.DataFrame(out)


def example_request(policy: StochasticPolicy, n_rows: int = 2) -> pd.DataFrame:
    """Build a small valid request (zeros; candidates: two requests of two candidates)."""
    names = feature_names_of(policy)
    if policy.family.name == "candidates":
        frame = pd.DataFrame(np.zeros((2 * n_rows, len(names))), columns=names)
        frame.insert(0, EVENT_ID, [f"request-{i // 2}" for i in range(2 * n_rows)])
        return frame
    return pd.DataFrame(np.zeros((n_rows, len(names))), columns=names)


def model_signature(policy: StochasticPolicy, example: pd.DataFrame) -> Any:
    """Build the signature: float features, ``event_id`` (required for candidates), params.

    ``seed`` defaults to −1 (unseeded) because MLflow fills an omitted param with its default
    (ECOSYSTEM §3); a default of 0 would make every unseeded request deterministic.
    """
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types import ColSpec, Schema

    names = feature_names_of(policy)
    required_ids = policy.family.name == "candidates"
    inputs = Schema(
        [ColSpec("string", EVENT_ID, required=required_ids)] + [ColSpec("double", n) for n in names]
    )
    output = StochasticPolicyModel(policy).predict(None, example, {"seed": 0})
    with (
        warnings.catch_warnings()
    ):  # "integer columns cannot represent missing values": outputs only
        warnings.simplefilter("ignore", UserWarning)
        inferred = infer_signature(
            example, output, params={"seed": UNSEEDED, "return_distribution": False}
        )
    return ModelSignature(inputs=inputs, outputs=inferred.outputs, params=inferred.params)


def log_policy_model(
    policy: StochasticPolicy | str | Path,
    name: str = "policy",
    *,
    input_example: pd.DataFrame | None = None,
    registered_model_name: str | None = None,
    **log_model_kwargs: Any,
) -> Any:
    """Log a policy as a :class:`StochasticPolicyModel` pyfunc (models from code, no pickle).

    The policy artifact (``policy.npz`` + ``policy.json`` with its SHA-256,
    :mod:`poem.io.artifact`) becomes the model artifact ``artifacts/<folder name>``;
    ``code_paths`` ships the ``poem`` package so the model directory is self-contained;
    ``pip_requirements`` are explicit (no slow inference); the signature and input example
    make MLflow write ``serving_input_example.json`` beside the model.

    Parameters
    ----------
    policy : StochasticPolicy or path
        A fitted policy (saved here into a temporary ``policy/`` folder), or the folder of an
        already saved artifact (verified by loading it).
    name : str, default="policy"
        Name of the logged model (``mlflow.pyfunc.log_model(name=...)``).
    input_example : DataFrame or None
        Request example; default :func:`example_request`.
    registered_model_name : str or None
        Also register the model under this name (new version).
    **log_model_kwargs
        Passed to :func:`mlflow.pyfunc.log_model` (e.g. ``model_id``, ``tags``).

    Returns
    -------
    mlflow.models.model.ModelInfo
        Info of the logged model (``model_uri``, ``registered_model_version``).

    Raises
    ------
    poem.io.artifact.ArtifactError
        If ``policy`` is a folder whose artifact is missing or fails its checksum.
    """
    import tempfile

    import scipy
    import sklearn

    import poem
    from poem.io.artifact import save_policy

    requirements = [
        f"mlflow=={mlflow.__version__}",
        f"numpy=={np.__version__}",
        f"pandas=={pd.__version__}",
        f"scipy=={scipy.__version__}",
        f"scikit-learn=={sklearn.__version__}",
    ]
    with tempfile.TemporaryDirectory(prefix="poem-policy-") as tmp:
        if isinstance(policy, StochasticPolicy):
            artifact_dir = Path(tmp) / ARTIFACT_KEY
            save_policy(policy, artifact_dir)
        else:
            artifact_dir = Path(policy)
            policy = load_policy(artifact_dir)
        example = example_request(policy) if input_example is None else input_example
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=str(Path(__file__).resolve()),
            artifacts={ARTIFACT_KEY: str(artifact_dir)},
            code_paths=[str(Path(poem.__file__).resolve().parent)],
            pip_requirements=requirements,
            signature=model_signature(policy, example),
            input_example=example,
            registered_model_name=registered_model_name,
            **log_model_kwargs,
        )


# Models from code: MLflow executes this file under a generated module name and takes the model
# from set_model. Imported normally (``deploy.pyfunc``) this is a no-op.
if __name__ not in ("deploy.pyfunc", "__main__"):
    mlflow.models.set_model(StochasticPolicyModel())

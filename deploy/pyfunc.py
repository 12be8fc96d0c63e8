"""MLflow pyfunc serving a :class:`~poem.policies.StochasticPolicy` (DESIGN §7, STYLE §9).

Every request row (discrete, multilabel) or request id (candidate sets) gets one decision: the
sampled action yᵢ ~ π(·|xᵢ), **its propensity under exactly the served distribution**
(temperature α and exploration floor ε applied: today's served policy is tomorrow's logging
policy π₀), the MAP action, the registered model version and the time of the decision; with
``params={"return_distribution": true}`` also the full served distribution.

Request layout
--------------
``discrete`` / ``multilabel``
    one row per decision, one float column per feature (:func:`feature_names_of`), optional
    string column ``event_id``.
``candidates``
    long format: one row per candidate with its feature columns and a string column
    ``event_id``; the rows of one request are contiguous. ``action`` is the 0-based position of
    the chosen candidate inside its request.

Params (optional): ``seed`` (integer ≥ 0 → reproducible draws; the default −1 draws from fresh
OS entropy per request, since MLflow fills an omitted param with its default) and
``return_distribution``. A malformed request (no rows, missing or non-numeric features,
NaN/inf, a bad candidate layout, an ``event_id`` repeated in a discrete or multilabel request,
bad params) raises :class:`mlflow.exceptions.MlflowException` with code
``INVALID_PARAMETER_VALUE`` (HTTP 400 with the message).

The model is logged as *models from code* (MLflow executes this file; :func:`set_model` at the
bottom selects the model, no pickle); the policy is the checksum-verified ``.npz`` + JSON
artifact of :mod:`poem.io.artifact`.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import uuid
import warnings
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

import poem
from poem.io.artifact import ArtifactError, load_policy, save_policy
from poem.io.requests import (
    EVENT_ID,
    MAX_REQUEST_BYTES,
    MAX_REQUEST_ROWS,
    UNSEEDED,
    InvalidRequestError,
    RequestTooLargeError,
    check_body_size,
    check_columns,
    check_row_count,
    check_score_range,
    check_served_propensities,
    group_candidates,
    parse_event_ids,
    parse_features,
    parse_params,
)
from poem.policies import StochasticPolicy

__all__ = [
    "ARTIFACT_KEY",
    "EVENT_ID",
    "OUTPUT_COLUMNS",
    "StochasticPolicyModel",
    "example_request",
    "feature_names_of",
    "guard_scoring_server",
    "invalid_request",
    "log_policy_model",
    "model_signature",
    "serving_limits",
    "without_values",
]

ARTIFACT_KEY = "policy"
OUTPUT_COLUMNS = ("event_id", "action", "propensity", "map_action", "model_version", "timestamp")
# written by MLflow beside MLmodel when loading models:/...
_REGISTERED_META = "registered_model_meta"


def invalid_request(message: str) -> MlflowException:
    """Build the exception every request-validation failure raises (HTTP 400 when served)."""
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


def _limit(name: str, default: int) -> int:
    """A positive integer limit from the environment variable ``name``, else ``default``."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise MlflowException(f"{name}={raw[:40]!r} must be a positive integer")
    return value


def serving_limits() -> tuple[int, int]:
    """``(max_rows, max_body_bytes)``: the limits of one served request.

    ``POEM_SERVING_MAX_ROWS`` and ``POEM_SERVING_MAX_BODY_BYTES`` when set, else
    :data:`~poem.io.requests.MAX_REQUEST_ROWS` (10,000) and
    :data:`~poem.io.requests.MAX_REQUEST_BYTES` (8 MiB).

    Raises
    ------
    MlflowException
        If a variable is not a positive integer (the server does not start).
    """
    return (
        _limit("POEM_SERVING_MAX_ROWS", MAX_REQUEST_ROWS),
        _limit("POEM_SERVING_MAX_BODY_BYTES", MAX_REQUEST_BYTES),
    )


# Messages of MLflow and pandas that quote request values; the value is cut (STYLE §6: an error
# names the column and the rows, and never echoes the request back).
_PREDICT_PREFIX = re.compile(r"^Failed to predict data '.*'\. \nError: ", re.DOTALL)
_QUOTED_VALUE = re.compile(
    r"(could not convert string to float|invalid literal for int\(\) with base \d+|"
    r"could not convert [^:'\"]{1,40} to [^:'\"]{1,40}): .*",
    re.DOTALL,
)


def without_values(message: str) -> str:
    """``message`` without the request values MLflow and pandas quote in their errors."""
    message = _PREDICT_PREFIX.sub("", message, count=1)
    return _QUOTED_VALUE.sub(r"\1 (the value is not shown)", message)


def guard_scoring_server() -> None:
    """Make ``mlflow models serve`` refuse, before parsing, what it should not parse.

    In the scoring server's process (MLflow 3.17; a no-op elsewhere), around MLflow's
    ``invocations`` (which gets the body already read by FastAPI):

    * no ``Content-Type`` header: 415 with what to send;
    * a body over ``max_body_bytes`` (:func:`serving_limits`): 413, before it is parsed;
    * any failure of the JSON stage (``_parse_json_data``: huge integers, deep nesting, a wrong
      ``dataframe_split`` shape) is a 400 naming the error;
    * after parsing, before MLflow's schema enforcement (which drops unknown columns and quotes
      values in its errors): more than ``max_rows`` rows, an unknown column (a misspelt
      ``eventid``), an unknown param or a non-numeric feature is a 400 naming them;
    * no error message quotes request values (:func:`without_values`).
    """
    import sys

    server = sys.modules.get("mlflow.pyfunc.scoring_server")
    original = getattr(server, "_parse_json_data", None)
    if original is None or getattr(original, "_poem_guard", False):
        return
    max_rows, max_bytes = serving_limits()
    invocations = server.invocations

    def invocations_guarded(data: Any, content_type: Any, *args: Any) -> Any:
        if not content_type:  # MLflow would call None.split(";"): HTTP 500
            return server.InvocationsResponse(
                response="the request has no Content-Type header; send "
                "'Content-Type: application/json' (or text/csv)",
                status=415,
                mimetype="text/plain",
            )
        try:
            check_body_size(len(data or b""), max_bytes)
        except RequestTooLargeError as exc:
            body = {"error_code": "INVALID_PARAMETER_VALUE", "message": str(exc)}
            return server.InvocationsResponse(
                response=json.dumps(body), status=413, mimetype="application/json"
            )
        try:
            return invocations(data, content_type, *args)
        except MlflowException as exc:
            exc.message = without_values(exc.message)
            raise

    server.invocations = invocations_guarded

    def parse_json_data(data: Any, metadata: Any, input_schema: Any) -> Any:
        try:
            parsed = original(data, metadata, input_schema)
        except MlflowException as exc:
            exc.message = without_values(exc.message)
            raise
        except (ValueError, TypeError, KeyError, IndexError, RecursionError, OverflowError) as exc:
            raise invalid_request(
                f"the request body is not a valid scoring request ({type(exc).__name__}: "
                f"{without_values(str(exc))[:200]})"
            ) from None
        try:  # MLflow drops params its schema does not list: refuse them, named
            parse_params({k: None for k in (parsed.params or {}) if k != "return_distribution"})
        except InvalidRequestError as exc:
            raise invalid_request(str(exc)) from None
        frame = parsed.data
        if isinstance(frame, pd.DataFrame) and input_schema is not None:
            features = [n for n in input_schema.input_names() if n != EVENT_ID]
            try:
                check_row_count(len(frame), max_rows)
                check_columns(frame.columns, features)
                if frame.columns.is_unique and set(features) <= set(frame.columns):
                    parse_features(frame, features)  # MLflow names missing ones
            except InvalidRequestError as exc:
                raise invalid_request(str(exc)) from None
        return parsed

    parse_json_data._poem_guard = True  # type: ignore[attr-defined]
    server._parse_json_data = parse_json_data


def feature_names_of(policy: StochasticPolicy) -> list[str]:
    """Column names of the policy's features: ``metadata["feature_names"]`` or ``x_0..x_{d-1}``.

    The fallback is the log format's names (:mod:`poem.io.log_format`).
    """
    names = policy.metadata.get("feature_names")
    d = policy.family.n_features
    if names is not None and len(names) == d:
        return [str(n) for n in names]
    return [f"x_{j}" for j in range(d)]


def _yaml_value(path: Path, key: str, *, unquote: bool = True) -> str | None:
    """The first non-empty ``key: value`` line of a file MLflow writes, or None."""
    if path.is_file():
        for line in path.read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key and value.strip():
                return value.strip().strip("'\"") if unquote else value.strip()
    return None


def _registered_digest(model_dir: Path) -> str | None:
    """The ``policy_sha256`` tag of the registered version being loaded (``models:/`` URIs).

    Read from the registry, outside the artifact; None for a model loaded from a path, or a
    version registered without the tag.
    """
    name = _yaml_value(model_dir / _REGISTERED_META, "model_name")
    number = _yaml_value(model_dir / _REGISTERED_META, "model_version")
    if {name, number} & {None, "", "null"}:
        return None
    try:
        version = mlflow.MlflowClient().get_model_version(name, number)
    except MlflowException as exc:
        raise ArtifactError(
            f"cannot read the registered digest of {name!r} version {number} ({exc})"
        ) from exc
    return version.tags.get("policy_sha256")


class StochasticPolicyModel(mlflow.pyfunc.PythonModel):
    """Pyfunc wrapper that samples decisions from a stochastic policy and reports propensities.

    Parameters
    ----------
    policy : StochasticPolicy or None, default=None
        A policy to serve directly (tests, benchmarks); when None, ``load_context`` loads
        the artifact ``context.artifacts["policy"]``.
    model_version : str, default="unregistered"
        Version reported with each decision when ``policy`` is given directly.

    Notes
    -----
    A model loaded by MLflow (``load_context``: ``mlflow models serve``,
    ``mlflow.pyfunc.load_model``) refuses requests of more than ``max_rows`` rows
    (:func:`serving_limits`); a policy given directly has no row limit.
    """

    def __init__(self, policy: StochasticPolicy | None = None, model_version: str = "unregistered"):
        self.policy = policy
        self.model_version = model_version
        self.max_rows: int | None = None  # no row limit for a policy served in-process
        if policy is not None:
            self._configure(policy)

    def _configure(self, policy: StochasticPolicy) -> None:
        self.family_name = policy.family.name
        self.feature_names = feature_names_of(policy)
        ids = policy.metadata.get("action_ids")  # the log's own action ids (data.action_ids)
        self.action_ids = None if ids is None else np.asarray([str(a) for a in ids], dtype=object)

    def load_context(self, context: Any) -> None:
        """Load the policy artifact; a tampered or incomplete artifact fails here, loudly.

        Raises
        ------
        MlflowException
            Wrapping :class:`~poem.io.artifact.ArtifactError` (file named, checksum reported).
        """
        guard_scoring_server()
        directory = Path(context.artifacts[ARTIFACT_KEY])
        model_dir = directory.parent.parent
        try:
            expected = _registered_digest(model_dir)
            self.policy = load_policy(directory, expected_digest=expected)
        except ArtifactError as exc:
            raise MlflowException(f"cannot load the served policy: {exc}") from exc
        # the registered version, else the logged model id
        version = _yaml_value(model_dir / _REGISTERED_META, "model_version")
        if version is None:
            version = _yaml_value(model_dir / "MLmodel", "model_id", unquote=False)
        self.model_version = "unregistered" if version is None else version
        self.max_rows = serving_limits()[0]
        self._configure(self.policy)

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
            (+ ``distribution``); multilabel actions are 0/1 lists; a policy trained with
            ``data.action_ids`` answers with those ids (the distribution in their order).

        Raises
        ------
        MlflowException
            ``INVALID_PARAMETER_VALUE`` for a malformed request.
        """
        if self.policy is None:
            raise MlflowException("the model has no policy; load it with mlflow.pyfunc.load_model")
        try:
            seed, want_distribution = parse_params(params)
            if not isinstance(model_input, pd.DataFrame):
                raise InvalidRequestError(
                    "the request must be a table (dataframe_split), got "
                    f"{type(model_input).__name__}"
                )
            if model_input.shape[0] == 0:
                raise InvalidRequestError("the request has no rows")
            if self.max_rows is not None:
                check_row_count(model_input.shape[0], self.max_rows)
            check_columns(model_input.columns, self.feature_names)
            X = parse_features(model_input, self.feature_names)
            check_score_range(X, self.policy.coef, self.policy.temperature)
            if self.family_name == "candidates":
                ids = parse_event_ids(model_input, required=True)
                inputs, event_ids = group_candidates(X, ids, self.policy.exploration_floor)
            else:
                inputs = self.policy.family.prepare(X)
                ids = parse_event_ids(model_input, required=False, unique=True)
                event_ids = (
                    ids if ids is not None else np.array([uuid.uuid4().hex for _ in range(len(X))])
                )
        except InvalidRequestError as exc:
            raise invalid_request(str(exc)) from exc
        policy, family = self.policy, self.policy.family
        rng = np.random.default_rng(seed)
        now = _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        kw = {"temperature": policy.temperature, "exploration_floor": policy.exploration_floor}
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported just below
            actions, propensities = family.sample(policy.coef, inputs, rng, **kw)
        try:
            propensities = check_served_propensities(propensities)
        except InvalidRequestError as exc:
            raise invalid_request(str(exc)) from exc
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
        if getattr(self, "action_ids", None) is not None and self.family_name == "discrete":
            out["action"] = self.action_ids[actions].tolist()  # the log's own ids
            out["map_action"] = self.action_ids[map_actions].tolist()
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
    # "integer columns cannot represent missing values": outputs only
    with warnings.catch_warnings():
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

    The policy artifact becomes the model artifact ``artifacts/<folder name>``; ``code_paths`` ships
    the ``poem`` package; ``pip_requirements`` are explicit; the signature and input example
    make MLflow write ``serving_input_example.json``.

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

    pinned = {"mlflow": mlflow, "numpy": np, "pandas": pd, "scipy": scipy, "scikit-learn": sklearn}
    requirements = [f"{name}=={module.__version__}" for name, module in pinned.items()]
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

r"""The champion re-tempered, no refit: candidates of the search beside the fitted trials.

A learned challenger has to beat what serving the champion at another temperature does
without any learning. For each serving temperature α of the search the candidate is
:func:`retempered_champion`, exactly what a ``warm_start: champion`` fit that took no step
would serve at α (α = 1 is the champion itself). Each candidate is scored like the
fitted trials (:func:`~poem.learners._trials.validation_scores`) in one probability pass
over the validation rows and enters the same selection
(:func:`~poem.learners._trials.select_trial`). Its :class:`~poem.learners._trials.Trial`
carries ``params = {"challenger_kind": "champion_retempered", "temperature": α}``; the
fit-only fields (objective, clipped fraction) are NaN and ``n_iter`` is 0.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from poem.learners._trials import Trial
from poem.learners.search import checked_temperatures, policy_scores
from poem.log_rows import log_header
from poem.policies.stochastic import StochasticPolicy

__all__ = [
    "KIND_KEY",
    "LEARNED",
    "RETEMPERED",
    "champion_trials",
    "challenger_kind",
    "retempered_champion",
    "selected_champion_policy",
]

KIND_KEY = "challenger_kind"  # trial param, run tag and version tag
LEARNED = "learned"  # the challenger is a fit of the learner
RETEMPERED = "champion_retempered"  # the champion at another temperature, no refit
_KINDS = (LEARNED, RETEMPERED)


def retempered_champion(
    champion: StochasticPolicy, temperature: float, exploration_floor: float | None = None
) -> StochasticPolicy:
    r"""The champion's served distribution re-tempered by α: :math:`\pi_{(w_c/\tau_c)/\alpha}`.

    Parameters
    ----------
    champion : StochasticPolicy
        The champion, coefficients w_c served at temperature τ_c.
    temperature : float
        Serving temperature α > 0 of the candidate, relative to the champion's served
        distribution (α = 1: the same probabilities), i.e. α.
    exploration_floor : float or None, default=None
        ε of the candidate (the challengers' floor, so it keeps the next log's support even
        when the champion had none); None keeps the champion's, i.e. ε.

    Returns
    -------
    StochasticPolicy
        Coefficients w_c/τ_c, temperature α, exploration floor ε; metadata of the
        champion plus ``challenger_kind``, ``retempered_from`` (the champion's
        :meth:`~poem.policies.StochasticPolicy.digest`) and ``retempered_by`` (α).

    Raises
    ------
    ValueError
        If ``temperature`` is not finite and > 0.
    """
    (alpha,) = checked_temperatures([temperature])
    metadata = {
        **champion.metadata,
        KIND_KEY: RETEMPERED,
        "retempered_from": champion.digest(),
        "retempered_by": alpha,
    }
    return StochasticPolicy(
        champion.family,
        champion.coef / champion.temperature,
        temperature=alpha,
        exploration_floor=(
            champion.exploration_floor if exploration_floor is None else exploration_floor
        ),
        metadata=metadata,
    )


def _check_fits(champion: StochasticPolicy, family: str, n_features: int, n_actions: Any) -> None:
    have = (champion.family.name, champion.family.n_features, champion.family.n_actions)
    want = (family, int(n_features), None if n_actions is None else int(n_actions))
    if have != want:
        raise ValueError(
            f"the champion (family, n_features, n_actions) = {have} cannot score a log with "
            f"{want}; its re-tempered candidates need the same action structure"
        )


def _trial(temperature: float, scores: tuple, seconds: float) -> Trial:
    ips_est, snips_est = scores
    nan = float("nan")
    return Trial(
        params={KIND_KEY: RETEMPERED, "temperature": temperature},
        ips=ips_est,
        snips=snips_est,
        effective_sample_size=float(ips_est.effective_sample_size),
        clipped_fraction=nan,
        objective=nan,
        n_iter=0,
        converged=True,
        seconds=seconds,
    )


def champion_trials(
    champion: StochasticPolicy | None,
    validation_log: Any,
    temperatures: Sequence[float] | None = None,
    *,
    confidence_level: float = 0.95,
    exploration_floor: float | None = None,
    logger: Any = None,
) -> list[Trial]:
    """Score the champion at each serving temperature on the validation rows (no fit).

    Parameters
    ----------
    champion : StochasticPolicy or None
        The champion; None (the logging policy, whose coefficients are unknown) gives no
        candidates.
    validation_log : LoggedBandit or (partition set, rows)
        The search's validation rows (as :func:`~poem.learners.search.run_trial`): every α
        is scored in one pass where the rows live.
    temperatures : sequence of float or None, default=None
        The search's serving temperatures α (None: α = 1 only, the champion as served).
    confidence_level : float, default=0.95
        Level of the reported intervals (as the fitted trials).
    exploration_floor : float or None, default=None
        ε the candidates are served with (:func:`retempered_champion`).
    logger : StochasticPolicy or None, default=None
        The logger of the validation rows: per-label weights
        (:func:`~poem.learners.search.policy_scores`), as the fits are scored.

    Returns
    -------
    list of Trial
        One per temperature, in order (empty without a champion); ``seconds`` is the scoring
        time shared equally by the candidates.

    Raises
    ------
    ValueError
        If a temperature is not finite and > 0, or the champion's family, feature or action
        count differs from the log's.
    """
    if champion is None:
        return []
    values = checked_temperatures([1.0] if temperatures is None else temperatures)
    shape = log_header(validation_log[0]) if isinstance(validation_log, tuple) else validation_log
    _check_fits(champion, shape.family, shape.n_features, shape.n_actions)
    start = time.perf_counter()
    policies = tuple(retempered_champion(champion, a, exploration_floor) for a in values)
    scores = policy_scores(policies, validation_log, confidence_level, logger)
    seconds = (time.perf_counter() - start) / len(values)
    return [_trial(alpha, s, seconds) for alpha, s in zip(values, scores, strict=True)]


def challenger_kind(params: Mapping[str, Any]) -> str:
    """``"champion_retempered"`` for a champion candidate's params, else ``"learned"``.

    Raises
    ------
    ValueError
        If ``params["challenger_kind"]`` is present but not a known kind.
    """
    kind = params.get(KIND_KEY, LEARNED)
    if kind not in _KINDS:
        raise ValueError(f"{KIND_KEY} must be one of {list(_KINDS)}, got {kind!r}")
    return kind


def selected_champion_policy(
    params: Mapping[str, Any],
    champion: StochasticPolicy | None,
    exploration_floor: float | None = None,
) -> StochasticPolicy:
    """The policy a selected champion candidate serves (:func:`retempered_champion`).

    Parameters
    ----------
    params : dict
        The selected trial's params (``challenger_kind: champion_retempered`` and its
        ``temperature``).
    champion : StochasticPolicy or None
        The champion the candidate was scored from.
    exploration_floor : float or None, default=None
        ε it was scored with (:func:`retempered_champion`).

    Returns
    -------
    StochasticPolicy
        The re-tempered champion (no fit).

    Raises
    ------
    ValueError
        If ``params`` is not a champion candidate's, or there is no champion.
    """
    if challenger_kind(params) != RETEMPERED:
        raise ValueError(f"params {dict(params)!r} are not a champion candidate's ({KIND_KEY})")
    if champion is None:
        raise ValueError("a champion candidate was selected but there is no champion policy")
    return retempered_champion(champion, params["temperature"], exploration_floor)

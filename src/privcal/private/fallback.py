"""The fallback rule of the private temperature fits (post-processing of their release).

:func:`release_check` keeps the fitted ``T`` only when the release itself shows, by at least
:data:`NOISE_Z` SDs of its own noise, that ``T`` beats ``T = 1``, and otherwise releases ``T =
1`` (``fallback="identity"``, the default) or keeps ``T`` with a warning (``fallback="none"``,
seed 000). The evidence of each search: :func:`gap_evidence`, :func:`nll_drop_evidence`,
:func:`golden_evidence`; a release with nothing to compare with ``T = 1`` falls back too.

*Privacy.* Only released values and the noise's public scale (``sensitivity / epsilon`` per
source) enter, so the rule is a function of the release: post-processing, no budget, no
change to the guarantee. The rule, its SDs (Efron-Stein for golden section) and what it gets:
docs/private.md#when-the-release-cannot-tell-t-from-1-the-fallback-rule-fallbackidentity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from privcal._params import check_option
from privcal.calibrators.base import FitWarning

__all__ = [
    "FALLBACKS",
    "IDENTITY_FACTOR",
    "NOISE_Z",
    "Evidence",
    "NoiseDominatedWarning",
    "curve_gap_evidence",
    "drop_coefficients",
    "gap_evidence",
    "golden_evidence",
    "identity_index",
    "nll_drop_evidence",
    "release_check",
]

#: The fallback rule keeps the fitted temperature only when the released evidence that it beats
#: ``T = 1`` is at least ``NOISE_Z`` SDs of its own noise (:func:`release_check`).
NOISE_Z = 2.0
#: ``fallback=``: ``"identity"`` releases ``T = 1`` when the evidence is below :data:`NOISE_Z`;
#: ``"none"`` keeps the fitted temperature (seed 000's behaviour) and warns.
FALLBACKS = ("identity", "none")


class NoiseDominatedWarning(FitWarning):
    """The released statistic cannot tell the fitted temperature from ``T = 1`` (no calibration):
    the temperature was fitted to noise (:func:`release_check`, which says what follows)."""


#: A release's evidence that its temperature beats ``T = 1``: ``(z in noise SDs, what was
#: compared)``, or ``None`` when it holds no value to compare with ``T = 1``.
Evidence = tuple[float, str] | None


def identity_index(grid: np.ndarray) -> int | None:
    """Index of the grid point ``T = 1`` (to rounding), or ``None`` when 1 is not on the grid."""
    i = int(np.argmin(np.abs(np.log(grid))))
    return i if abs(float(np.log(grid[i]))) < 1e-9 else None


def curve_gap_evidence(
    curve: np.ndarray, grid: np.ndarray, anchor: int, var: float, t: float
) -> Evidence:
    """Acc-T's curve: the released accuracy gap at ``T = 1`` in the direction of ``t``.

    The curve value at grid point ``j`` carries ``|j - anchor| + 1`` independent noise draws
    (:meth:`~privcal.private.DataSource.accuracy_gap_curve`), so its SD is
    ``sqrt((|j - anchor| + 1) var)``; :func:`gap_evidence` reads it. ``None`` when ``T = 1``
    is not on the grid (a ``t_range`` without it).
    """
    i = identity_index(grid)
    if i is None:
        return None
    return gap_evidence([(float(grid[i]), float(curve[i]), (abs(i - anchor) + 1) * var)], t)


def gap_evidence(seen: Sequence[tuple[float, float, float]], t: float) -> Evidence:
    """Evidence from released accuracy gaps ``(T', gap, variance)`` that ``t`` beats ``T = 1``.

    The gap :math:`g(T) = \\sum 1[c] - \\mathrm{conf}_T` is non-decreasing in ``T``, and Acc-T
    moves from ``T = 1`` toward its root. With ``d = sign(log t)``, a gap at ``T'`` between 1
    (included) and ``t`` bounds the gap at 1: ``d g(T') >= d g(1)``. So ``-d g(T') / SD`` is a
    conservative count of noise SDs by which the release says the model is over-confident
    (``t > 1``) or under-confident (``t < 1``) at ``T = 1``, i.e. that moving toward ``t``
    helps. The evaluation nearest ``T = 1`` is read (the least conservative bound); ``None``
    when none lies between 1 and ``t``.
    """
    d = float(np.sign(np.log(t)))
    between = [s for s in seen if 0.0 <= d * np.log(s[0]) <= d * np.log(t) + 1e-12]
    if d == 0.0 or not between:
        return None
    u, gap, var = min(between, key=lambda s: abs(np.log(s[0])))
    sd = float(np.sqrt(var))
    if not sd > 0.0:
        return None
    return (  # one wording for both directions: the CLI groups warnings by their words
        float(-d * gap / sd),
        f"the released accuracy gap at T = {u:.4g} is {gap:.4g} (noise SD {sd:.4g}; a fit "
        "above 1 needs it below 0, one below 1 above 0)",
    )


#: The golden searches compare with their evaluation nearest ``T = 1`` when it lies within this
#: factor of 1 (the default ECE-T search on ``[0.5, 3]`` evaluates ``T = 0.991`` first).
IDENTITY_FACTOR = 1.05


def golden_evidence(seen: Sequence[tuple[float, float, float]], t: float) -> Evidence:
    """Golden section: by how many SDs of their difference the evaluation nearest ``T = 1``
    is above the evaluation nearest the fitted ``t`` (the objective falls toward ``t``).

    ``seen`` holds ``(T, value, variance bound)`` of every evaluation, all of them released
    values. A value is a noisy sum (NLL-T), ``|noisy sum|`` (Acc-T) or ``sum_m |noisy sum_m|``
    over the ``M`` bins (ECE-T); each noisy coordinate is a sum over sources of independent
    Laplace draws with variance ``v`` (the searches' public noise variance), and the value is
    1-Lipschitz in each coordinate, so by the Efron-Stein inequality its variance is at most
    ``M v`` (``M = 1`` for the scalars). Two evaluations use independent draws, so their
    difference has SD at most ``sqrt(v_1 + v_2)``. Only released values and public scales
    enter: post-processing. ``None`` when no evaluation lies within :data:`IDENTITY_FACTOR` of
    1 (the search range excludes ``T = 1`` or never came near it) or when the fitted ``t`` is
    nearest that evaluation itself (nothing to compare).
    """
    temps = np.log([s[0] for s in seen])
    i = int(np.argmin(np.abs(temps)))
    j = int(np.argmin(np.abs(temps - np.log(t))))
    if abs(temps[i]) > np.log(IDENTITY_FACTOR) or i == j:
        return None
    (t_i, f_i, v_i), (t_j, f_j, v_j) = seen[i], seen[j]
    drop, sd = f_i - f_j, float(np.sqrt(v_i + v_j))
    return (
        float(drop / sd),
        f"the released objective falls by {drop:.4g} from T = {t_i:.4g} (next to T = 1) to "
        f"T = {t_j:.4g} (next to the fitted T) (noise SD {sd:.4g})",
    )


def drop_coefficients(grid: np.ndarray, i: int, t: float) -> np.ndarray:
    """``a`` with ``F(T_i) - S(t) = a . diff(F)``, ``S`` the not-a-knot cubic spline of ``F`` in
    ``log T`` (linear in ``F``: the spline of the unit vectors gives its weights ``w``)."""
    from scipy.interpolate import CubicSpline

    x = np.log(grid)
    c = -CubicSpline(x, np.eye(x.size), axis=0)(np.log(t))
    c[i] += 1.0
    return np.cumsum(c[::-1])[::-1][1:]


def nll_drop_evidence(inc: np.ndarray, grid: np.ndarray, var: float, t: float) -> Evidence:
    """NLL-T: by how many SDs the released clipped NLL at ``t`` is below that at ``T = 1``.

    The noisy curve is ``F_j = sum_{l < j} inc_l`` (independent increments, each with variance
    ``var``), read at ``t`` by the not-a-knot cubic spline in ``log T`` through the grid values,
    a linear map ``F(t) = w . F`` (the spline of the unit vectors gives ``w``). So the drop
    ``F(1) - F(t) = c . F = (L^T c) . inc`` with ``c = e_1 - w`` and ``L`` the cumulative-sum
    matrix, and its noise SD is exactly ``sqrt(var) ||L^T c||``, ``(L^T c)_l = sum_{j > l}
    c_j``. ``None`` when ``T = 1`` is not on the grid.
    """
    i = identity_index(grid)
    if i is None:
        return None
    coef = drop_coefficients(grid, i, t)
    drop = float(coef @ inc)
    sd = float(np.sqrt(var * np.sum(coef**2)))
    if not sd > 0.0:  # t is the grid point T = 1 itself: nothing to compare
        return None
    return (
        float(drop / sd),
        f"the released clipped NLL falls by {drop:.4g} from T = 1 to the fitted T (noise SD "
        f"{sd:.4g})",
    )


#: ``|log T|`` below which a fit is ``T = 1`` for the rule (reports show 4 significant digits).
AT_ONE = 5e-4


def release_check(t: float, evidence: Evidence, fallback: str = "identity") -> dict[str, Any]:
    """The fallback rule of the private temperature fits: keep ``t`` or release ``T = 1``.

    ``evidence`` is ``(z, what)``: the released statistic's own evidence that ``t`` beats
    ``T = 1`` (no calibration), in SDs of its noise, and what was compared; ``None`` when the
    release holds nothing to compare with ``T = 1``. The rule: ``t`` is kept when ``z >=``
    :data:`NOISE_Z`; otherwise, with ``fallback="identity"``, the release is ``T = 1`` (the
    uncalibrated model), and with ``fallback="none"`` (seed 000) ``t`` is kept with a warning.
    A fit at ``T = 1`` (within :data:`AT_ONE` in ``log T``, below the 4 digits a report shows)
    already has nothing to fall back from.

    Privacy: post-processing (``z`` reads released values and the noise's public scale only).

    What it gets: under pure noise ``z`` is about ``N(0, 1)`` in the direction the noise chose,
    so a noise-fitted temperature is kept in about ``P(|noise| > 2 SD)`` of fits (4.6 % for
    Gaussian noise, at most 5.9 % for one Laplace draw); a signal of ``z`` SDs is kept with
    probability ``Phi(z - 2)`` (half the time at 2 SDs). Where no data of the fit's size could
    reach 2 SDs the fits on arrays refuse before any release
    (:meth:`~privcal.private.PrivateTemperatureScaling.informative_rows`).

    Returns
    -------
    dict
        ``rule`` (``fallback``), ``z`` (``None`` without evidence), ``threshold``
        (:data:`NOISE_Z`), ``compared``, ``release_temperature`` (``t``), ``temperature``
        (what the fit releases), ``fell_back``, ``noise_dominated`` (``z`` below the threshold
        or no evidence, for a ``t`` other than 1) and ``warning`` (the message, or ``""``).
    """
    check_option(fallback, "fallback", "release_check", FALLBACKS)
    z = None if evidence is None else float(evidence[0])
    compared = (
        "the release holds no value at or next to T = 1 to compare with"
        if evidence is None
        else evidence[1]
    )
    # a fit within AT_ONE of T = 1 is T = 1 as every report shows it: nothing to fall back from
    dominated = abs(float(np.log(t))) > AT_ONE and (z is None or z < NOISE_Z)
    fell_back = dominated and fallback == "identity"
    why = (
        f"{compared}, {z:.2f} noise standard deviations (fewer than {NOISE_Z:g})"
        if z is not None
        else compared
    )
    if fell_back:
        warning = (
            f"The private fit cannot tell T = {t:.4g} from no calibration: {why}. It falls back "
            "to T = 1 (the uncalibrated model; post-processing, no privacy cost). Use more data "
            f"or sources, or a larger epsilon; fallback='none' keeps T = {t:.4g}."
        )
    elif dominated:
        warning = (
            f"The private fit cannot tell T = {t:.4g} from no calibration: {why}; T = {t:.4g} "
            "is kept (fallback='none') and may calibrate worse than no calibration (T = 1). "
            "Use more data or sources, or a larger epsilon."
        )
    else:
        warning = ""
    return {
        "rule": fallback,
        "z": z,
        "threshold": NOISE_Z,
        "compared": compared,
        "release_temperature": float(t),
        "temperature": 1.0 if fell_back else float(t),
        "fell_back": fell_back,
        "noise_dominated": dominated,
        "warning": warning,
    }

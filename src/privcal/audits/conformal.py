"""Deployed-path audits of the conformal layer: ``PrivateConformal``, ``private_quantile`` and
``PrivateRiskControl``.

Each audit calls the entry point exactly as a user does (default ``bins``, ``gamma`` and noise,
i.e. :class:`~privcal.privacy.SecureNoise`), reads the claim from the entry point's own privacy
report on ``D``, and picks the worst-case neighbours *of the relation that report declares*:

* ``"substitute"`` (``n`` public): one score moves from one extreme to the other (0 -> 1), which
  moves the counts below and above every edge in between;
* ``"add/remove"``: one score is removed (``PrivateConformal``) or added (``private_quantile``).

So a report that claimed add/remove while the computation depends on ``n`` (the defect of issue
12) is audited on add/remove neighbours and fails; see
``tests/audits/test_deployed_audits_conformal.py``.

The defaults audited: ``PrivateConformal`` with ``method="rank"`` (rank penalty on the logit grid,
weights ``exp(-epsilon p_j / (1 + r))``, Theorem R of :mod:`privcal.conformal.private.rank`) and
``private_quantile`` with ``weights="bounded-range"`` (``exp(-epsilon q(1-q) w_j)``, derived in
:mod:`privcal.conformal.quantile`). Both are bounded-range mechanisms whose loss can reach
``epsilon`` under substitute; at ``q = 1/2`` the bounded-range and the sensitivity scales coincide
(both 4), so ``private-quantile-substitute`` keeps its exact loss ``0.954 epsilon``. The rank
mechanism with ``k = k(n)`` is epsilon-DP even under add/remove *except* where ``k > n`` switches
to full sets: ``CONFORMAL_N`` sits on that boundary so that an add/remove claim is caught.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

import privcal.conformal.private.estimator as estimator_module
import privcal.conformal.private.risk as risk_module
import privcal.conformal.quantile as quantile_module
from privcal.audits._registry import AuditReport, audit_release, draws, register
from privcal.audits.plants import Plant, patched, reused_seed
from privcal.conformal.localize import LOCALIZE_MIN_N
from privcal.conformal.quantile import QUANTILE_BOUNDED_RANGE, RANK_QUANTILE

__all__ = [
    "CONFORMAL_N",
    "LOCALIZED_N",
    "RISK_N",
    "audit_private_conformal",
    "audit_private_conformal_localized",
    "audit_private_quantile",
    "audit_private_quantile_substitute",
    "audit_private_risk_control",
    "conformal_neighbours",
    "localized_neighbours",
    "quantile_neighbours",
    "risk_neighbours",
]

#: Calibration size of the ``private-conformal`` audit: the smallest ``n`` with a valid threshold
#: at ``alpha = 0.1``, ``epsilon = 1`` (96: target rank ``k = 96``), so the add/remove neighbour
#: (``n = 95``, ``k = 97 > n``) gets full sets. Asserted in the tests against
#: :func:`~privcal.conformal.min_calibration_size`.
CONFORMAL_N = 96

#: Calibration size of the ``private-conformal-localized`` audit: the smallest ``n`` at which
#: the default localises (:data:`~privcal.conformal.localize.LOCALIZE_MIN_N`).
LOCALIZED_N = LOCALIZE_MIN_N

_ALPHA, _EPSILON = 0.1, 1.0
_Q_LEVEL, _Q_BINS = 0.5, 4


def _lac_logits(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-class logits and labels 0 whose LAC scores ``1 - p_0`` are ``scores`` (0 and 1 exact)."""
    with np.errstate(divide="ignore"):
        t = np.log(scores) - np.log1p(-scores)
    t = np.clip(t, -800.0, 800.0)  # exp(-800) == 0: scores of exactly 0 and 1
    return np.column_stack([np.zeros_like(t), t]), np.zeros(scores.size, dtype=np.int64)


def _lac_neighbours(n: int, relation: str) -> tuple[Any, Any, str]:
    """``(D, D', description)`` on ``n`` calibration rows (:func:`conformal_neighbours`)."""
    base = 1.0 - 0.3 * (np.arange(n - 1) + 0.5) / (n - 1)
    d = np.append(base, 0.0)
    if relation == "substitute":
        d2, text = np.append(base, 1.0), "one calibration score moved from 0 to 1"
    else:
        d2, text = base, "one calibration example (score 0) removed"
    what = f"D: {n} LAC scores (0 and {n - 1} in [0.7, 1)); D': {text}"
    return _lac_logits(d), _lac_logits(d2), what


def conformal_neighbours(relation: str) -> tuple[Any, Any, str]:
    """``(D, D', description)`` for ``PrivateConformal``: ``D`` and ``D'`` are (logits, labels).

    ``D``: ``CONFORMAL_N - 1`` LAC scores evenly spread over ``[0.7, 1)`` (where the threshold
    falls) and one score of 0. Substitute: that score becomes 1. Add/remove: it is
    removed (``n`` drops by one).
    """
    return _lac_neighbours(CONFORMAL_N, relation)


def quantile_neighbours(relation: str) -> tuple[np.ndarray, np.ndarray, str]:
    """``(D, D', description)`` for ``private_quantile`` at ``q = 0.5`` with 4 bins.

    Found by exhaustive search over small score sets (at most 8 scores at bin centres) for the
    largest lower bound the audit can reach: substitute moves one score from the first bin to the
    last (exact loss ``0.954 epsilon``, see ``tests/conformal/test_conformal_audit.py``);
    add/remove adds a score in the first bin to one in the last (loss at most ``epsilon / 2``).
    """
    c = (np.arange(_Q_BINS) + 0.5) / _Q_BINS  # bin centres
    if relation == "substitute":
        d = c[[0] + [1] * 7 + [0]]
        d2 = c[[0] + [1] * 7 + [3]]
        return d, d2, "9 scores; one moved from the first bin to the last"
    return c[[3]], c[[3, 0]], "1 score in the last bin; D' adds one in the first"


# ------------------------------------------------------------------ planted defects
def _add_remove_claim() -> Any:
    """Issue 12's defect: ``PrivateConformal`` reports add/remove while its target rank and its
    full-set branch depend on ``n``."""
    from privcal.privacy import PrivacyReport

    def old_claim(*args: Any, **kwargs: Any) -> Any:
        kwargs["relation"] = "add/remove"
        return PrivacyReport(*args, **kwargs)

    return patched((estimator_module, "PrivacyReport", old_claim))


def _seeded(module: Any, seed: int, what: str) -> Plant:
    """Every call of ``module`` draws from ``SeededNoise(seed)``. With a reused seed each
    neighbour's output is one point, and for some seeds the two points coincide (then nothing
    can see the defect on this pair): ``seed`` is the first in ``range(200)`` that separates
    them (found once, asserted in the tests). 300 runs that separate reach epsilon >= 2.7."""
    return Plant(
        f"{what} draws its noise from SeededNoise({seed}) on every call (a hard-coded seed)",
        reused_seed(module, seed=seed),
        300,
    )


#: The audited ``PrivateConformal`` call (:func:`_fit_lac`), as a user writes it.
_LAC_CALL = "PrivateConformal(score='lac', alpha=0.1, epsilon=1.0).fit(logits, labels)"


def _fit_lac(data: Any) -> Any:
    """``PrivateConformal(score="lac", alpha=0.1, epsilon=1.0).fit(logits, labels)``."""
    from privcal.conformal import PrivateConformal

    return PrivateConformal(score="lac", alpha=_ALPHA, epsilon=_EPSILON).fit(*data)


def _audit_fits(
    name: str, entry: str, what: str, draw: Any, report: Any, runs: int, alpha: float
) -> AuditReport:
    """:func:`audit_release` as the ``PrivateConformal`` audits run it: a fit costs milliseconds,
    so a 10% pilot fixes 4 events (quantile buckets of the pilot's outputs)."""
    return audit_release(
        name, entry, what, draw, report, runs=runs, alpha=alpha, pilot_fraction=0.1, n_events=4
    )


@register(
    "private-conformal",
    summary="PrivateConformal(score='lac', alpha=0.1, epsilon=1.0).fit(logits, labels), defaults",
    runs=5000,
    slow=True,
    events=4,
    measurements=[RANK_QUANTILE],
    plants={
        # n = 96 (a finite threshold) against n = 95 (full sets): deterministic apart
        "add-remove-claim": Plant(
            "the report claims add/remove while k and the full-set branch depend on n",
            _add_remove_claim,
            300,
        ),
        "reused-seed": _seeded(estimator_module, 1, "PrivateConformal"),
    },
)
def audit_private_conformal(runs: int, alpha: float) -> AuditReport:
    """Audit ``PrivateConformal().fit`` (default method, bins, noise); output ``threshold_``."""
    from privcal.conformal import FullSetWarning

    # D is the same for both relations; the claim on D fixes which D' is the worst case
    report = _fit_lac(conformal_neighbours("substitute")[0]).privacy_report_
    d, d2, what = conformal_neighbours(report.relation)
    sides = (d, d2)

    def draw(side: int, k: int) -> np.ndarray:
        # full sets (threshold inf, when no threshold is valid) are recorded as 2.0, above every
        # edge, so that the audit's events can tell them apart (post-processing, no loss)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FullSetWarning)
            out = np.array([_fit_lac(sides[side]).threshold_ for _ in range(k)])
        return np.where(np.isinf(out), 2.0, out)

    entry = f"{_LAC_CALL}.threshold_"
    return _audit_fits("private-conformal", entry, what, draw, report, runs, alpha)


def localized_neighbours() -> tuple[Any, Any, str]:
    """``(D, D', description)`` for the localised default (``n = LOCALIZED_N``, substitute).

    ``D``: ``LOCALIZED_N - 1`` LAC scores evenly spread over ``[0.7, 1)`` and one score of 0;
    ``D'``: that score becomes 1. Wherever the random split puts it, the moved score changes
    the counts below every edge between 0 and 1 of the part it lands in: the window releases
    (part 1) or the threshold (part 2).
    """
    return _lac_neighbours(LOCALIZED_N, "substitute")


@register(
    "private-conformal-localized",
    summary=f"PrivateConformal(score='lac', alpha=0.1, epsilon=1.0).fit on n = {LOCALIZED_N} "
    "(localised default: window and threshold)",
    runs=2000,
    slow=True,
    events=4,
    measurements=[RANK_QUANTILE],
    plants={"reused-seed": _seeded(estimator_module, 13, "PrivateConformal")},
)
def audit_private_conformal_localized(runs: int, alpha: float) -> AuditReport:
    """Audit the localised default (Theorem L): the output is the window *and* the threshold.

    The three released edges (window ends, threshold) are edges of the public logit grid; the
    audit reads them as one code ``(i_lo, i_hi, i_threshold)`` in lexicographic order, so its
    events (intervals of codes, from a pilot) are sets of joint outcomes.
    """
    from privcal.conformal.private import conformal_plan

    edges = conformal_plan(LOCALIZED_N, _ALPHA, _EPSILON).edges
    size = edges.size + 1

    d, d2, what = localized_neighbours()
    report = _fit_lac(d).privacy_report_
    sides = (d, d2)

    def code(est: Any) -> float:
        idx = np.searchsorted(edges, [*est.window_, est.threshold_])  # inf -> edges.size
        return float((idx[0] * size + idx[1]) * size + idx[2])

    draw = draws(lambda side: code(_fit_lac(sides[side])))

    entry = f"{_LAC_CALL}: window_ and threshold_"
    return _audit_fits("private-conformal-localized", entry, what, draw, report, runs, alpha)


def _audit_quantile(name: str, relation: str | None, runs: int, alpha: float) -> AuditReport:
    """``private_quantile(scores, 0.5, 1.0, 4)`` as a user calls it (``relation`` only if given)."""
    from privcal.conformal import private_quantile, private_quantile_report

    claimed = relation or "add/remove"  # the default, which a user leaves out
    d0 = quantile_neighbours(claimed)[0]
    _, report = private_quantile_report(d0, _Q_LEVEL, _EPSILON, _Q_BINS, relation=claimed)
    d, d2, what = quantile_neighbours(report.relation)
    sides = (d, d2)

    def call(s: np.ndarray) -> float:
        if relation is None:
            return private_quantile(s, _Q_LEVEL, _EPSILON, _Q_BINS)
        return private_quantile(s, _Q_LEVEL, _EPSILON, _Q_BINS, relation=relation)

    draw = draws(lambda side: call(sides[side]))

    shown = ", relation='substitute'" if relation == "substitute" else ""
    return audit_release(
        name,
        f"private_quantile(scores, q=0.5, epsilon=1.0, n_bins=4{shown})",
        what,
        draw,
        report,
        runs=runs,
        alpha=alpha,
        events=np.arange(1, _Q_BINS + 1) / _Q_BINS,  # one bucket per candidate edge, fixed
    )


@register(
    "private-quantile",
    summary="private_quantile(scores, 0.5, 1.0, 4), default noise, add/remove neighbours",
    runs=6000,
    events=5,
    measurements=[QUANTILE_BOUNDED_RANGE],
    plants={"reused-seed": _seeded(quantile_module, 6, "private_quantile")},
)
def audit_private_quantile(runs: int, alpha: float) -> AuditReport:
    """Audit ``private_quantile`` with its defaults (add/remove, bounded range, ``SecureNoise``)."""
    return _audit_quantile("private-quantile", None, runs, alpha)


@register(
    "private-quantile-substitute",
    summary="private_quantile(scores, 0.5, 1.0, 4, relation='substitute'), default noise",
    runs=6000,
    events=5,
    measurements=[QUANTILE_BOUNDED_RANGE],
    plants={"reused-seed": _seeded(quantile_module, 29, "private_quantile")},
)
def audit_private_quantile_substitute(runs: int, alpha: float) -> AuditReport:
    """Audit ``private_quantile(..., relation="substitute")``: the worst case, loss 0.954 eps."""
    return _audit_quantile("private-quantile-substitute", "substitute", runs, alpha)


# ------------------------------------------------------------------ conformal risk control
#: Calibration size of the ``private-risk-control`` audit: the noiseless query at the crossing
#: sits 0.024 above the threshold ``B - a + t``, so the worst-case added row (loss 1 at every
#: ``lambda < 1``, query change ``a - 1 = -0.901``) moves it below (asserted in the tests).
RISK_N = 1999


def risk_neighbours() -> tuple[Any, Any, str]:
    """``(D, D', description)`` for ``PrivateRiskControl(loss="fnr")`` (add/remove, one label).

    ``D``: ``RISK_N`` rows with one true label each: ``c`` with ``p = 0`` (missed at every
    ``lambda < 1``), 40 at each of ``p = 1 - (j + 0.5)/100`` for ``j = 40..59`` (missed up to
    ``lambda_j``) and the rest at ``p = 1``; ``c = floor(n a - T)``, so the noiseless crossing is
    ``lambda = 0.6`` with its query just above ``T``. ``D'`` adds one row with ``p = 0``: every
    query below ``lambda = 1`` drops by the sensitivity ``1 - a``, and the crossing moves to
    ``lambda = 1``.
    """
    a = _ALPHA - 0.001  # the default beta, B = 1
    d = risk_module.query_sensitivity(a, 1.0)
    threshold = 1.0 - a + risk_module.noise_margin(_EPSILON, d, 101, 0.001)
    c = int(np.floor(RISK_N * a - threshold))
    spread = np.repeat(1.0 - (np.arange(40, 60) + 0.5) / 100, 40)
    p = np.concatenate([np.zeros(c), spread, np.ones(RISK_N - c - spread.size)])[:, None]
    p2 = np.append(p, [[0.0]], axis=0)
    what = f"D: {RISK_N} rows, one true label each; D': one row added whose label has p = 0"
    return (p, p > -1.0), (p2, p2 > -1.0), what


def _noiseless_crossing() -> Any:
    """The defect: the risk curve read without noise (the exact first crossing)."""

    def exact(queries: Any, threshold: float, *args: Any) -> int:
        hit = np.asarray(queries) >= threshold
        return int(hit.argmax()) if hit.any() else int(np.size(queries)) - 1

    return patched((risk_module, "first_crossing", exact))


@register(
    "private-risk-control",
    summary="PrivateRiskControl('fnr', alpha=0.1, epsilon=1.0).fit(probs, labels), defaults",
    runs=1000,
    slow=True,
    events=4,
    measurements=[risk_module.RISK_SPARSE_VECTOR],
    plants={
        # noiseless: lambda = 0.6 on D, 1.0 on D', deterministic apart
        "curve-without-noise": Plant(
            "the risk curve is compared with the threshold without noise", _noiseless_crossing, 300
        ),
        "reused-seed": _seeded(risk_module, 0, "PrivateRiskControl"),
    },
)
def audit_private_risk_control(runs: int, alpha: float) -> AuditReport:
    """Audit ``PrivateRiskControl().fit`` (defaults, ``SecureNoise``); output ``lambda_index_``."""
    from privcal.conformal import PrivateRiskControl

    def fit(data: Any) -> Any:
        return PrivateRiskControl("fnr", alpha=_ALPHA, epsilon=_EPSILON).fit(*data)

    d, d2, what = risk_neighbours()
    report = fit(d).privacy_report_
    sides = (d, d2)

    draw = draws(lambda side: fit(sides[side]).lambda_index_)

    return _audit_fits(
        "private-risk-control",
        "PrivateRiskControl('fnr', alpha=0.1, epsilon=1.0).fit(probs, labels).lambda_",
        what,
        draw,
        report,
        runs,
        alpha,
    )

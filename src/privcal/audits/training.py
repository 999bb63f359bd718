"""Deployed-path audits of the training layer: ``DPTemperatureScaling`` and ``DPPlattScaling``.

Each audit fits the calibrator exactly as a user does -- ``DPTemperatureScaling(epsilon=1.0)
.fit(logits, labels)``, default ``delta``, ``batch_size``, ``lr``, clipping, logit bound and
noise (:class:`~privcal.privacy.SecureNoise` for the count and the Gaussian steps, OS entropy for
the Poisson sampling) -- many times on each of two neighbouring validation sets, reads the
released parameter, and bounds epsilon from below with Clopper-Pearson intervals
(:func:`~privcal.audits.audit_release`) on tail events at the deciles of a pilot sample. The
claim (epsilon, delta, relation, public quantities) is read from the fit's own
``privacy_report_`` on ``D``.

Neighbours of the declared relation (add/remove one example, ``n`` private): ``D`` holds
:data:`TRAINING_N` moderate rows; ``D'`` adds one extreme row, logits ``(1e6, -1e6)`` labelled
with the *other* class, the row that pushes the temperature (or the Platt slope) hardest and that
made ``temperature_`` NaN before the logits were bounded.

One change from the user's defaults, stated in each ``entry_point``: ``epochs=5`` instead of 200.
``epochs`` is a public parameter; the claim's derivation (count; batch, schedule and clipping
norm (``auto_clip``) as post-processing of the count; Opacus's accountant over ``steps``
Poisson-subsampled Gaussian steps) holds for every value of it, and the report on ``D`` states
the epsilon that run spends and the clipping norm used. With 200 epochs one fit costs ~200
torch steps, which would put the thousands of fits an audit needs far beyond a test's time.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch  # noqa: F401  (this area needs the torch extra: fail here, not mid-audit)

from privcal.audits._registry import (
    AuditFunction,
    AuditReport,
    audit_release,
    draws,
    register,
    tail_events,
)
from privcal.audits.plants import Plant, patched
from privcal.private.queries import QUERY_MEASUREMENTS
from privcal.training import DPPlattScaling, DPTemperatureScaling
from privcal.training.dp_sgd import DP_SGD

__all__ = [
    "AUDIT_EPOCHS",
    "AUDIT_EPSILON",
    "TRAINING_N",
    "audit_dp_platt_scaling",
    "audit_dp_temperature_scaling",
    "training_neighbours",
]

#: Size of ``D`` (``D'`` has one row more).
TRAINING_N = 8
#: The budget the audited user asks for (public); low enough that a broken fit shows.
AUDIT_EPSILON = 1.0
#: Epochs of the audited fits (public parameter; see the module docstring).
AUDIT_EPOCHS = 5


def training_neighbours() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``((z, y), (z', y'))``: two-class logits; ``D'`` = ``D`` plus one extreme row.

    ``D``: margins ``z_1 - z_0`` spread over ``[-2, 2]``, labels agreeing with the sign (a
    well-separated set that wants a small temperature). ``D'`` adds ``(1e6, -1e6)`` labelled 1:
    maximally confident and wrong, its gradient asks for a large temperature (negative slope).
    """
    m = np.linspace(-2.0, 2.0, TRAINING_N)
    z = np.column_stack([np.zeros(TRAINING_N), m])
    y = (m > 0).astype(np.int64)
    return (z, y), (np.vstack([z, [1e6, -1e6]]), np.append(y, 1))


_NEIGHBOURS = (
    f"D: {TRAINING_N} two-class logit rows with margins in [-2, 2]; D': D plus one row "
    "(1e6, -1e6) labelled 1 (add/remove one example)"
)


def _audit(
    name: str, estimator: type, released: str, read: Any, runs: int, alpha: float
) -> AuditReport:
    """Audit ``estimator(epsilon=AUDIT_EPSILON, epochs=AUDIT_EPOCHS).fit(z, y)`` through
    ``read`` of the fitted estimator (the attribute ``released`` names)."""
    sides = training_neighbours()
    call = (
        f"{estimator.__name__}(epsilon={AUDIT_EPSILON:g}, epochs={AUDIT_EPOCHS}).fit(logits, "
        f"labels){released} (defaults otherwise; epochs is public and the claim holds for any "
        "value, fewer keep the audit fast)"
    )

    def fit(side: int) -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Optimal order is the")
            return estimator(epsilon=AUDIT_EPSILON, epochs=AUDIT_EPOCHS).fit(*sides[side])

    draw = draws(lambda side: read(fit(side)))

    report = fit(0).privacy_report_
    events = tail_events(draw, runs)
    return audit_release(
        name, call, _NEIGHBOURS, draw, report, runs=runs, alpha=alpha, events=events
    )


def _unbounded_influence() -> Any:
    """No logit bound and no per-example gradient clipping: the extreme row dominates the fit
    while the claim still assumes sensitivity ``C``."""
    from opacus.optimizers import DPOptimizer

    import privcal.training.recalibration as recalibration

    def unclipped_sum(self: DPOptimizer) -> None:
        for p in self.params:
            p.summed_grad = p.grad_sample.sum(0)

    return patched(
        (recalibration, "bounded_logits", lambda z, bound: z),
        (DPOptimizer, "clip_and_accumulate", unclipped_sum),
    )


#: 200 runs: the extreme row's unclipped gradient moves the parameter far outside the range
#: the neighbour without it reaches (epsilon_lower above 1.5 epsilon measured).
_PLANTS = {
    "unbounded-influence": Plant(
        "logits not bounded and per-example gradients not clipped", _unbounded_influence, 200
    )
}


#: A DP recalibration fit releases a noisy count (its step schedule) and the DP-SGD weights.
_MEASURED = (QUERY_MEASUREMENTS["count"], DP_SGD)


def _register_recalibration(
    name: str, summary: str, estimator: Callable[[], type], released: str, read: Any
) -> AuditFunction:
    """Register the audit of ``estimator()(epsilon=1.0, epochs=5).fit(z, y)`` read through
    ``read`` (``released`` names what it reads). ``estimator`` returns the class at each run:
    the audit fits this module's class as it is then."""

    def audit(runs: int, alpha: float) -> AuditReport:
        return _audit(name, estimator(), released, read, runs, alpha)

    audit.__doc__ = f"Audit ``{estimator().__name__}(epsilon=1.0, epochs=5).fit(z, y){released}``."
    return register(
        name,
        summary=summary,
        runs=600,
        slow=True,
        extra="torch",
        events=18,
        plants=_PLANTS,
        measurements=_MEASURED,
    )(audit)


audit_dp_temperature_scaling = _register_recalibration(
    "dp-temperature-scaling",
    "DPTemperatureScaling (DP-TS, Bu et al. 2023): one extreme row added; temperature_",
    lambda: DPTemperatureScaling,
    ".temperature_",
    lambda est: np.log(est.temperature_),
)
audit_dp_platt_scaling = _register_recalibration(
    "dp-platt-scaling",
    "DPPlattScaling (DP-PS, Bu et al. 2023), binary Platt: one extreme row added; slope a",
    lambda: DPPlattScaling,
    '.params_["a"]',
    lambda est: float(est.params_["a"][0]),
)

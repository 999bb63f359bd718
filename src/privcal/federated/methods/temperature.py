"""FedTemp: federated temperature scaling on the inverse temperature ``beta = 1/T``.

Its clients' statistics are the NLL's derivatives in ``beta`` of
:func:`privcal.metrics.statistics.temperature_rows`, the statistic the central
:class:`~privcal.calibrators.TemperatureScaling` fit sums too (one statistic, one function). Under
DP the release is checked against the noise (:func:`noise_dominance`) and falls back to ``T = 1``
where the noise dominates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from privcal.calibrators import Calibrator, TemperatureScaling
from privcal.calibrators.temperature import NLL_BOUND
from privcal.federated.methods.base import State
from privcal.federated.methods.newton import ScalingMethod
from privcal.metrics.statistics import temperature_rows

__all__ = [
    "FED_NOISE_Z",
    "FedTemp",
    "noise_dominance",
    "temperature_moments",
    "temperature_newton",
]


def temperature_moments(d: np.ndarray, beta: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Per-row mean and variance of ``d`` under ``p = softmax(beta * d)``.

    ``d = z - max z`` (rows ``<= 0``); ``beta`` is a scalar or one value per row. The NLL of
    row ``i`` at inverse temperature :math:`\\beta` has derivative
    :math:`E_{p_i}[d_i] - d_{iy_i}` and second derivative :math:`\\mathrm{Var}_{p_i}[d_i]`:
    the first two terms of :func:`privcal.metrics.statistics.temperature_rows`, read at a label
    whose gap :math:`d_{iy_i}` is 0 (the row's maximum), so the derivative is the mean itself.
    """
    d = np.asarray(d, dtype=np.float64)
    mean, var, _, _ = temperature_rows(d, np.argmax(d, axis=1), beta)
    return mean, var


def temperature_newton(
    z: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    n_groups: int,
    beta0: float,
    iters: int,
    beta_range: tuple[float, float],
) -> np.ndarray:
    """Per-group inverse temperatures minimising each group's mean NLL (vectorised Newton).

    The mean NLL of group ``k`` is convex in :math:`\\beta = 1/T` with derivative
    :math:`\\frac1{n_k}\\sum_{i\\in k}(E_{p_i}[d_i] - d_{iy_i})` and second derivative
    :math:`\\frac1{n_k}\\sum_{i\\in k}\\mathrm{Var}_{p_i}[d_i]` (:math:`d = z - \\max z`,
    :func:`~privcal.metrics.statistics.temperature_rows`), the same objective as
    :func:`privcal.calibrators.temperature.fit_temperature_nll`. ``iters`` Newton steps from
    ``beta0``, safeguarded by bisection inside ``beta_range``; one pass over the rows per step
    for all groups together (``np.bincount``). The simulator calls it for all clients of a
    parameter-averaging round, a Flower client for itself (``groups = 0``): the same arithmetic.
    """
    counts = np.maximum(np.bincount(groups, minlength=n_groups), 1).astype(np.float64)
    lo = np.full(n_groups, beta_range[0])
    hi = np.full(n_groups, beta_range[1])
    beta = np.clip(np.full(n_groups, float(beta0)), lo, hi)
    for _ in range(iters):
        grad, curv, _, _ = temperature_rows(z, y, beta[groups])
        g = np.bincount(groups, weights=grad, minlength=n_groups) / counts
        h = np.bincount(groups, weights=curv, minlength=n_groups) / counts
        hi = np.where(g > 0, beta, hi)
        lo = np.where(g <= 0, beta, lo)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = np.where(h > 0, beta - g / h, np.nan)
        bad = ~((new > lo) & (new < hi))
        new = np.where(bad, 0.5 * (lo + hi), new)
        if np.all(np.abs(new - beta) <= 1e-12 * beta):
            beta = new
            break
        beta = new
    return beta


class FedTemp(ScalingMethod):
    """FedTemp: temperature scaling on the inverse temperature ``beta = 1/T``.

    ``update="newton"`` (default): each round every client sends
    :math:`(\\sum_i E_{p_i}[d_i] - d_{iy_i},\\ \\sum_i \\mathrm{Var}_{p_i}[d_i])` at the global
    :math:`\\beta` (:func:`~privcal.metrics.statistics.temperature_rows`), the derivative and
    second derivative of its summed NLL; the server steps
    :math:`\\beta \\leftarrow \\beta - G/H`, moving :math:`\\beta` by at most half its value per
    round and staying inside ``1 / t_range``. Without DP this is
    the central Newton iteration of :class:`~privcal.calibrators.TemperatureScaling` on the
    union of the clients' rows. ``update="parameter-averaging"``: seed 003's FedTemp, each
    client's ``local_iters`` Newton steps averaged (``fedtemp-averaging``).

    Default DP rule: ``grad_clip = 2 sqrt(m)``, ``hess_clip = 1.5 m`` (``m = client_rows``):
    per row the curvature :math:`\\mathrm{Var}_p[d]` of trained CIFAR networks has median
    1.3-5.7 and the gradient is centred near the optimum with a spread of about 2.

    Parameters
    ----------
    update, local_iters, client_rows, grad_clip, hess_clip, grad_share
        The scaling methods' shared parameters (:class:`~privcal.federated.methods.newton.
        ScalingMethod`).
    t_range : (float, float), default=(0.05, 20.0)
        The public range of the temperature.
    """

    name: ClassVar[str] = "fedtemp"
    dp_ridge: ClassVar[bool] = False
    evidence: ClassVar[bool] = True

    def __init__(
        self,
        update: str = "newton",
        local_iters: int = 50,
        t_range: tuple[float, float] = (0.05, 20.0),
        **dp_rule: Any,
    ) -> None:
        super().__init__(update, local_iters, **dp_rule)
        self.t_range = t_range
        self.beta_range = (1.0 / t_range[1], 1.0 / t_range[0])

    def x0(self, c: int) -> np.ndarray:
        return np.ones(1)

    def curvature_size(self, c: int) -> int:
        return 1

    def project(self, x: np.ndarray) -> np.ndarray:
        return np.clip(x, *self.beta_range)

    def stats(self, x: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g, h = self._client_stats(x, z, y, np.zeros(z.shape[0], dtype=np.int64), 1)
        return g[0], h[0]

    def _client_stats(
        self, x: np.ndarray, z: np.ndarray, y: np.ndarray, groups: np.ndarray, n_groups: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`stats` of ``n_groups`` clients at once (``(n_groups, 1)`` each), client ``k``
        holding the rows ``groups == k``: one pass of
        :func:`~privcal.metrics.statistics.temperature_rows` over all rows, summed over the
        rows within the NLL bound as in :func:`~privcal.federated.methods.newton.
        within_nll_bound` (a true-class probability of 0, as in 20 newsgroups, would otherwise
        drive ``T`` to the end of its range).
        """
        grad, curv, nll, _ = temperature_rows(z, y, float(x[0]))
        keep = nll <= NLL_BOUND
        g = np.bincount(groups, weights=np.where(keep, grad, 0.0), minlength=n_groups)
        h = np.bincount(groups, weights=np.where(keep, curv, 0.0), minlength=n_groups)
        return g[:, None], h[:, None]

    def direction(self, x: np.ndarray, g: np.ndarray, h: np.ndarray, floor: float) -> np.ndarray:
        """:math:`-G/H`, moving :math:`\\beta` by at most half its value (trust region)."""
        step = -g / max(float(h[0]), floor, 1e-300)
        return np.clip(step, -0.5 * x, 0.5 * x)

    def client_steps(
        self, state: State, z: np.ndarray, y: np.ndarray, clients: Sequence[np.ndarray]
    ) -> np.ndarray:
        """Payloads (before clipping) of all ``clients`` at once, one row each: one pass over
        their rows for every client's Newton statistics, or for every client's local fit under
        parameter averaging (:func:`temperature_newton`)."""
        rows = np.concatenate([np.asarray(idx, dtype=np.int64) for idx in clients])
        groups = np.repeat(np.arange(len(clients)), [np.size(idx) for idx in clients])
        x = np.asarray(state["params"], dtype=np.float64)
        if self.newton:
            return np.hstack(self._client_stats(x, z[rows], y[rows], groups, len(clients)))
        beta = temperature_newton(
            z[rows], y[rows], groups, len(clients), float(x[0]), self.local_iters, self.beta_range
        )
        return (beta - x[0])[:, None]

    def client_step(self, state: State, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:meth:`client_steps` of one client holding all of ``(z, y)``."""
        return self.client_steps(state, z, y, [np.arange(z.shape[0])])[0]

    def calibrator(self, state: State, c: int) -> Calibrator:
        """The fitted :class:`~privcal.calibrators.TemperatureScaling`.

        Under DP (Newton) the release falls back to ``T = 1`` when the noise dominates
        (:func:`noise_dominance`, post-processing): once the run's last round is in, it warns
        :class:`~privcal.private.NoiseDominatedWarning` and keeps the message in
        ``fit_warnings_``. In memory, not saved: ``release_check_``, the decision (as
        :func:`privcal.private.release_check`), and ``release_temperature_``, the temperature
        before the fallback, what the privacy audits observe (a claim that holds for it holds
        for any post-processing of it).
        """
        beta = float(self.fitted_params(state)[0])
        check = noise_dominance(state, beta)
        cal = TemperatureScaling(objective="nll", t_range=self.t_range)
        cal.fit_warnings_ = []
        cal.release_temperature_ = float(1.0 / beta)
        if check is not None:  # the decision, for the reports (calibrators.summary)
            cal.release_check_ = {
                "rule": "identity",
                "z": check["z"],
                "threshold": FED_NOISE_Z,
                "compared": f"the released gradients of {check['rounds_used']} round(s) between "
                "T = 1 and the release",
                "release_temperature": cal.release_temperature_,
                "temperature": 1.0 if check["dominated"] else cal.release_temperature_,
                "fell_back": bool(check["dominated"]),
                "noise_dominated": bool(check["dominated"]),
            }
            if check["dominated"]:
                if check["final"]:
                    import warnings

                    from privcal.private.temperature import NoiseDominatedWarning

                    cal.fit_warnings_ = [check["message"]]
                    warnings.warn(check["message"], NoiseDominatedWarning, stacklevel=2)
                beta = 1.0
        cal.temperature_ = float(1.0 / beta)
        cal.n_classes_ = c
        return cal


#: FedTemp under DP keeps its fitted temperature only when the released gradients show, by at
#: least this many noise standard deviations, that moving from ``T = 1`` toward it lowers the
#: NLL (the data-source protocol's ``NOISE_Z``).
FED_NOISE_Z = 2.0


def noise_dominance(state: State, beta: float) -> dict[str, Any] | None:
    """Whether a DP FedTemp release can tell its temperature from ``T = 1`` (no calibration).

    ``beta = 1/T`` is the released inverse temperature; ``state`` holds, for every DP Newton
    round ``t``, the released noisy gradient sum :math:`G_t` and the iterate :math:`\\beta_t` it
    was taken at (``trace_g``, ``trace_x``), and the public noise std :math:`\\sigma_g = C_g
    s_g` of each :math:`G_t` (``grad_sd``).

    Derivation. The summed NLL is convex in :math:`\\beta`, so its derivative :math:`g` is
    non-decreasing. Let :math:`d = \\mathrm{sign}(1 - \\beta)` (``+1`` when the release
    softens the model, :math:`T > 1`). Moving from :math:`\\beta = 1` toward the release
    lowers the NLL at first iff :math:`d\\,g(1) > 0`, and every iterate :math:`\\beta_t` between
    1 and the release (1 included: the first round's) has :math:`d\\,g(\\beta_t) \\le d\\,g(1)`
    by monotonicity. So for the set :math:`S` of those rounds, :math:`\\sum_{t\\in S} d\\,G_t`
    is a noisy lower bound of :math:`|S|\\,d\\,g(1)` (of its clipped version), with independent
    Gaussian noise of std :math:`\\sigma_g\\sqrt{|S|}`. The check asks
    :math:`Z = \\sum_{t\\in S} d\\,G_t / (\\sigma_g \\sqrt{|S|}) \\ge` :data:`FED_NOISE_Z`;
    below it the released gradients cannot tell the direction of the calibration from the
    noise, and the release falls back to :math:`\\beta = 1`. (:math:`d` is read from the same
    release, so under pure noise :math:`Z` is close to :math:`|N(0, 1)|`: the check keeps a
    noise-fitted temperature about 5 % of the time, as the data-source protocol's 2-SD rule
    does.)

    Privacy: only released values (the noisy sums the accountant charged for, the iterates
    and the tail average computed from them) and public constants (``C_g``, ``s_g``, ``T``)
    enter, so the check and the fallback are post-processing; the guarantee is unchanged and
    no budget is spent.

    Returns
    -------
    dict or None
        ``None`` without a DP trace (no DP, parameter averaging, or a state from before this
        check); else ``z``, ``rounds_used``, ``dominated`` (``z <`` :data:`FED_NOISE_Z`),
        ``final`` (the run's last round is in) and ``message``.
    """
    if "trace_g" not in state or "grad_sd" not in state:
        return None
    gs = np.asarray(state["trace_g"], dtype=np.float64).ravel()
    xs = np.asarray(state["trace_x"], dtype=np.float64).ravel()
    sd = float(np.asarray(state["grad_sd"]).ravel()[0])
    final = float(np.asarray(state["rounds"]).ravel()[0]) >= float(
        np.asarray(state.get("dp_rounds", state["rounds"])).ravel()[0]
    )
    d = float(np.sign(1.0 - beta))
    if gs.size == 0 or d == 0.0 or not sd > 0:
        z, used = 0.0, 0
    else:
        lo, hi = min(1.0, beta), max(1.0, beta)
        between = (xs >= lo - 1e-12) & (xs <= hi + 1e-12)
        used = int(between.sum())
        z = float(d * gs[between].sum() / (sd * math.sqrt(used))) if used else 0.0
    dominated = z < FED_NOISE_Z
    t = 1.0 / beta
    message = (
        f"FedTemp under DP: the released gradients favour T = {t:.4g} over T = 1 by only "
        f"{z:.2f} noise standard deviations (fewer than {FED_NOISE_Z:g}); the noise dominates "
        "the clients' signal, so the release falls back to T = 1 (the uncalibrated model). "
        "Use more clients, a larger epsilon, or fewer rounds."
    )
    return {"z": z, "rounds_used": used, "dominated": dominated, "final": final, "message": message}

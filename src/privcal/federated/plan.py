"""A federation's plan, from what is public before it runs: will the release beat doing nothing?

User-level DP sizes the noise of every round to one client's *clipped* contribution, whatever
the number of clients, so a small federation at a small epsilon can spend every site's budget
and release a calibrator that the noise decided (FedTemp then falls back to ``T = 1``:
:func:`~privcal.federated.methods.noise_dominance`). :func:`plan_run` says so before any ledger
is touched, from the method, ``K``, the rows a site declares, the rounds, ``(epsilon, delta)``,
the aggregation and its threshold, and the clip bounds: all public.

FedTemp (federated Newton, the default). Each round ``r`` every site sends its summed NLL
gradient :math:`g_k(\beta_r)` at the current ``beta = 1/T`` (``beta_1 = 1``), clipped to
:math:`C_g`; the released sum carries Gaussian noise of std :math:`\\sigma_g` (trusted:
:math:`C_g s_g`; distributed: the sum of the ``K`` clients' shares, :math:`\\sqrt{K/t}` times
one release's). The release keeps its fit only when the released gradients of the rounds
:math:`S` between ``beta = 1`` and the release favour it over ``T = 1`` by
:data:`~privcal.federated.methods.FED_NOISE_Z` noise standard deviations:
:math:`Z = \\sum_{r \\in S} d\\,G_r / (\\sigma_g \\sqrt{|S|})`. Each clipped sum is at most
:math:`K C_g` and :math:`|S| \\le T`, so

.. math:: Z \\le Z_{\\max} + N(0, 1), \\qquad Z_{\\max} = \frac{\\sqrt{T}\\, K C_g}{\\sigma_g}
    = \\sqrt{K t \\cdot 2 f \rho},

(``f`` the gradient's share of each round's zCDP budget ``rho / T``; ``t = K`` when trusted):
it does not depend on ``T`` or on the data, only on ``K``, ``t`` and the run's ``rho``. So
:math:`P(\text{keep}) \\le \\Phi(Z_{\\max} - 2)`: below :data:`~privcal.federated.methods.
FED_NOISE_Z` the run is *expected to fall back* whatever the data (the server refuses it
unless forced); below :data:`PLAN_Z` it keeps its fit in fewer than 19 runs of 20 (the server
warns). The plan gives the smallest ``K`` at this epsilon and the smallest epsilon at this
``K`` that reach :data:`PLAN_Z`. Above it the bound is necessary, not sufficient (a site's
gradient may be below its clip bound): with a labelled ``reference`` set (data the operator
holds, e.g. the server's ``--val``) the plan also runs the protocol itself
(:func:`~privcal.federated.simulation.simulate`, the same client and server steps) ``repeats``
times on ``K`` sites of ``rows`` rows drawn from half of it, and counts the runs whose release
beat the uncalibrated model on the other half.

Privacy: the plan reads public quantities and, optionally, the operator's own reference data;
it touches no client and no ledger, and releases nothing about any site.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from privcal._params import NON_NEGATIVE, check_int
from privcal.federated.dp import DPConfig, default_threshold
from privcal.federated.methods import FED_NOISE_Z, FedTemp, get_method
from privcal.privacy.noise import SecureNoise

__all__ = ["PLAN_Z", "RunPlan", "plan_run"]

#: ``Z_max`` a plan needs for FedTemp to keep its fit in 95 % of runs: the fallback rule's
#: :data:`~privcal.federated.methods.FED_NOISE_Z` plus the one-sided 95 % normal quantile.
PLAN_Z = FED_NOISE_Z + 1.6448536269514722


@dataclass
class RunPlan:
    """What :func:`plan_run` found (every number public, or from the operator's reference).

    Attributes
    ----------
    settings : dict
        The plan's inputs.
    noise_std : float or None
        FedTemp: std of each round's released gradient sum (``sigma_g``).
    clip : float or None
        FedTemp: the clip bound ``C_g`` of one site's gradient (the most a site contributes).
    site_signal : float or None
        FedTemp with a reference: a typical site's clipped gradient at ``T = 1``
        (``min(rows |mean per-row gradient|, C_g)``).
    z_max : float or None
        FedTemp: ``sqrt(T) K C_g / sigma_g``, the largest expected evidence of the release.
    z_expected : float or None
        FedTemp with a reference: ``sqrt(T) K site_signal / sigma_g`` (the sites' gradient at
        ``T = 1``; it shrinks near the optimum, so this is an upper estimate too).
    min_clients, min_epsilon : int or None, float or None
        FedTemp: the smallest ``K`` at this epsilon, and the smallest epsilon at this ``K``,
        with ``z_max >= PLAN_Z`` (``None`` when above the search range).
    simulated : dict or None
        With a reference: ``runs``, ``beat`` (runs whose release had a lower held-out ECE than
        the uncalibrated model), ``fell_back`` (FedTemp releases at ``T = 1``).
    expected : {"helps", "may fall back", "falls back", "unknown"}
    reasons : list of str
    """

    settings: dict[str, Any]
    noise_std: float | None = None
    clip: float | None = None
    site_signal: float | None = None
    z_max: float | None = None
    z_expected: float | None = None
    min_clients: int | None = None
    min_epsilon: float | None = None
    simulated: dict[str, int] | None = None
    expected: str = "unknown"
    reasons: list[str] = field(default_factory=list)

    @property
    def falls_back(self) -> bool:
        """Whether the release is expected to be no better than doing nothing."""
        return self.expected == "falls back"

    def summary(self) -> str:
        """One line: the verdict and its main reason (what a client is shown)."""
        head = {
            "helps": "expected to calibrate",
            "may fall back": "may fall back to the uncalibrated model",
            "falls back": "expected to fall back to the uncalibrated model",
            "unknown": "no prediction",
        }[self.expected]
        return f"{head}: {self.reasons[0]}" if self.reasons else head

    def lines(self) -> list[str]:
        """The plan as short lines (what ``privcal federate plan`` prints)."""
        s = self.settings
        rows = "" if s["rows"] is None else f" of {s['rows']} rows"
        out = [
            f"{s['method']}: K={s['n_clients']} sites{rows}, {s['rounds']} rounds, "
            + (
                f"epsilon {s['epsilon']:g}, delta {s['delta']:g}, {s['aggregation']} aggregation"
                + (f" (t={s['threshold']} of K={s['n_clients']})" if s["threshold"] else "")
                if s["epsilon"] > 0
                else "no DP"
            )
        ]
        if self.noise_std is not None and self.clip is not None:
            out.append(
                f"noise per round: std {self.noise_std:.4g} on the summed gradient; one site "
                f"contributes at most C_g = {self.clip:.4g}"
                + (
                    ""
                    if self.site_signal is None
                    else f" (a typical site {self.site_signal:.4g}, from the reference)"
                )
            )
        if self.z_max is not None:
            out.append(
                f"evidence for the fit over T = 1: at most {self.z_max:.2f} noise std"
                + ("" if self.z_expected is None else f", expected {self.z_expected:.2f}")
                + f" (the release needs {FED_NOISE_Z:g}; {PLAN_Z:.2f} for 19 runs in 20)"
            )
        if self.min_clients is not None or self.min_epsilon is not None:
            parts = []
            if self.min_clients is not None:
                parts.append(f"K >= {self.min_clients} at epsilon {s['epsilon']:g}")
            if self.min_epsilon is not None:
                parts.append(f"epsilon >= {self.min_epsilon:.3g} with K = {s['n_clients']}")
            out.append(f"enough for 19 runs in 20 (at {s['rounds']} rounds): {' or '.join(parts)}")
        if self.simulated is not None:
            sim = self.simulated
            out.append(
                f"simulated on the reference: the release beat the uncalibrated model in "
                f"{sim['beat']} of {sim['runs']} runs"
                + (f" ({sim['fell_back']} fell back to T = 1)" if "fell_back" in sim else "")
            )
        out.append(f"verdict: {self.summary()}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return vars(self) | {"summary": self.summary()}


def _dp(
    epsilon: float, delta: float, rounds: int, aggregation: str, k: int, t: int | None
) -> DPConfig:
    return DPConfig(
        epsilon,
        delta,
        rounds,
        noise=SecureNoise(),
        aggregation=aggregation,
        n_clients=k,
        threshold=t if aggregation == "distributed" else None,
        bits=31 if aggregation == "distributed" else 64,
    )


def _gradient_noise(fm: FedTemp, dp: DPConfig, c: int) -> tuple[float, float]:
    """``(sigma_g, C_g)``: std of the released gradient sum of one round, and the clip bound."""
    group = fm.noise_groups(dp, fm.payload_shape(c))[0]
    if dp.aggregation != "distributed":
        return float(group.sigma), float(group.sensitivity)
    plan = dp.plan(group)  # every one of the K clients adds its share
    sigma = math.sqrt(plan.law.variance(dp.n_clients)) / plan.encoding.scale
    return sigma, float(group.sensitivity)


def _z_max(
    fm: FedTemp, eps: float, delta: float, rounds: int, agg: str, k: int, t: int | None, c: int
) -> float:
    sigma, cg = _gradient_noise(fm, _dp(eps, delta, rounds, agg, k, t), c)
    return math.sqrt(rounds) * k * cg / sigma


def plan_run(
    method: str = "fedtemp",
    *,
    n_clients: int,
    rows: int | None = None,
    rounds: int,
    epsilon: float,
    delta: float = 1e-5,
    n_classes: int = 10,
    aggregation: str = "trusted",
    threshold: int | None = None,
    reference: tuple[Any, Any] | None = None,
    repeats: int = 20,
    seed: int = 0,
) -> RunPlan:
    """Plan a federated calibration run from public quantities (module docstring).

    Parameters
    ----------
    method : str, default="fedtemp"
        A federated method (:func:`~privcal.federated.methods.get_method`).
    n_clients : int
        ``K``, the declared number of sites.
    rows : int or None
        The rows a typical site holds, as the sites declare it (the simulated sites' size; the
        clip bounds are the method's own, as in the run). Needed with ``reference``.
    rounds : int
        ``T``.
    epsilon : float
        The run's user-level epsilon (0: no DP, which always "helps" as far as noise goes).
    delta : float, default=1e-5
    n_classes : int, default=10
    aggregation : {"trusted", "distributed"}, default="trusted"
    threshold : int or None
        ``t`` of distributed shares (default :func:`~privcal.federated.dp.default_threshold`).
    reference : (logits, labels) or None
        Labelled data the operator holds (public to it). Half draws the simulated sites, half
        is held out.
    repeats : int, default=20
        Simulated runs on the reference (seeded noise: a plan, not a release).
    seed : int, default=0

    Returns
    -------
    RunPlan
    """
    owner = "plan_run"
    k = check_int(n_clients, "n_clients", owner, low=1)
    m = None if rows is None else check_int(rows, "rows", owner, low=1)
    t_rounds = check_int(rounds, "rounds", owner, low=1)
    eps = NON_NEGATIVE.check(epsilon, "epsilon", owner)
    c = check_int(n_classes, "n_classes", owner, low=2)
    repeats = check_int(repeats, "repeats", owner, low=1)
    if aggregation not in ("trusted", "distributed"):
        raise ValueError(
            f"The 'aggregation' parameter of {owner} must be 'trusted' or 'distributed'. "
            f"Got {aggregation!r} instead."
        )
    t = (threshold or default_threshold(k)) if aggregation == "distributed" and eps > 0 else None
    settings = {
        "method": method, "n_clients": k, "rows": m, "rounds": t_rounds, "epsilon": eps,
        "delta": delta, "n_classes": c, "aggregation": aggregation, "threshold": t,
    }  # fmt: skip
    plan = RunPlan(settings)
    fm = get_method(method)  # the run's own clip rule (the Flower apps use the defaults)
    if eps == 0:
        plan.expected = "helps"
        plan.reasons.append("no DP: the release is the non-private fit (nothing is private)")
    elif isinstance(fm, FedTemp) and fm.newton:
        _plan_fedtemp(plan, fm, eps, delta, t_rounds, aggregation, k, t, c)
    else:
        plan.reasons.append(
            f"{method} has no fallback rule to predict; pass a reference set to simulate it"
        )
    if reference is not None:
        if m is None:
            raise ValueError(
                f"The 'rows' parameter of {owner} is needed with 'reference': the simulated "
                "sites hold that many rows each."
            )
        _simulate(
            plan, method, reference, k, m, t_rounds, eps, delta, aggregation, t, repeats, seed
        )
    return plan


def _plan_fedtemp(
    plan: RunPlan, fm: FedTemp, eps: float, delta: float, rounds: int, agg: str, k: int,
    t: int | None, c: int,
) -> None:  # fmt: skip
    sigma, cg = _gradient_noise(fm, _dp(eps, delta, rounds, agg, k, t), c)
    plan.noise_std, plan.clip = sigma, cg
    plan.z_max = math.sqrt(rounds) * k * cg / sigma  # _z_max at (eps, k, t)
    distributed = agg == "distributed"
    for kk in range(3 if distributed else 1, 4097):
        tt = default_threshold(kk) if distributed else None
        if _z_max(fm, eps, delta, rounds, agg, kk, tt, c) >= PLAN_Z:
            plan.min_clients = kk
            break
    lo, hi = 1e-3, 1e3  # z_max grows with epsilon: bisect on the log scale
    if _z_max(fm, hi, delta, rounds, agg, k, t, c) >= PLAN_Z:
        for _ in range(50):
            mid = math.sqrt(lo * hi)
            if _z_max(fm, mid, delta, rounds, agg, k, t, c) >= PLAN_Z:
                hi = mid
            else:
                lo = mid
        plan.min_epsilon = hi
    keep = NormalDist().cdf(plan.z_max - FED_NOISE_Z)
    bound = (
        f"even if every site's gradient reached its clip bound C_g = {cg:.3g} in all {rounds} "
        f"rounds, the released gradients would favour the fit over T = 1 by at most "
        f"{plan.z_max:.2f} noise std (sqrt(T) K C_g / sigma_g, sigma_g = {sigma:.3g})"
    )
    if plan.z_max < FED_NOISE_Z:
        plan.expected = "falls back"
        plan.reasons.append(
            f"{bound}; the release keeps its fit only above {FED_NOISE_Z:g}, so at most "
            f"{keep:.0%} of such runs calibrate"
        )
    elif plan.z_max < PLAN_Z:
        plan.expected = "may fall back"
        plan.reasons.append(
            f"{bound}: at most {keep:.0%} of such runs keep their fit ({PLAN_Z:.2f} gives 19 in 20)"
        )
    else:
        plan.expected = "helps"
        plan.reasons.append(
            f"if the sites' gradients reach their clip bound, the evidence is {plan.z_max:.2f} "
            f"noise std, above the {PLAN_Z:.2f} that 19 runs in 20 need"
        )


def _simulate(
    plan: RunPlan, method: str, reference: tuple[Any, Any], k: int, m: int, rounds: int,
    eps: float, delta: float, agg: str, t: int | None, repeats: int, seed: int,
) -> None:  # fmt: skip
    """``repeats`` runs of the protocol on ``K`` sites of ``m`` rows from half the reference."""
    from privcal.data.validation import check_labels, check_scores
    from privcal.federated.simulation import evaluate, simulate
    from privcal.privacy import SeededNoise

    z = check_scores(reference[0], name="reference logits")
    y = check_labels(reference[1], z.shape[0], z.shape[1], name="reference labels")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(y.size)
    pool, held = perm[: y.size // 2], perm[y.size // 2 :]
    fedtemp = isinstance(get_method(method), FedTemp)
    if fedtemp and plan.clip is not None:
        g, _ = FedTemp().stats(np.ones(1), z[pool], y[pool])
        plan.site_signal = min(m * abs(float(g[0])) / pool.size, plan.clip)
        if plan.noise_std:
            plan.z_expected = math.sqrt(rounds) * k * plan.site_signal / plan.noise_std
    base = evaluate(None, z[held], y[held])["ece"]
    beat = fell = 0
    dp: dict[str, Any] = (
        {} if eps == 0 else {"epsilon": eps, "delta": delta, "aggregation": agg, "threshold": t}
    )
    for r in range(repeats):
        parts = [rng.choice(pool, size=m, replace=True) for _ in range(k)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seeded noise and fallback warnings: a plan
            cal, _ = simulate(
                method, z, y, parts, rounds=rounds, seed=seed + r,
                noise=SeededNoise(seed + r) if eps > 0 else None, **dp,
            )  # fmt: skip
        beat += evaluate(cal, z[held], y[held])["ece"] < base
        fell += bool(getattr(cal, "fit_warnings_", None))
    plan.simulated = {"runs": repeats, "beat": beat}
    if fedtemp and eps > 0:
        plan.simulated["fell_back"] = fell
    if beat < math.ceil(0.95 * repeats):
        plan.expected = "falls back" if beat <= repeats // 2 else "may fall back"
        plan.reasons.insert(
            0,
            f"on the reference, the release beat the uncalibrated model in {beat} of {repeats} "
            "simulated runs",
        )
    elif plan.expected == "unknown":
        plan.expected = "helps"

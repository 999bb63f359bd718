"""In-process simulation of federated calibration, vectorised over clients where it can be.

The simulator calls exactly the client and server steps of :mod:`privcal.federated.methods`
that the Flower apps call; only the loop over clients is replaced by array operations where
the result is the same:

* binning without DP: the sum of the sampled clients' histograms is the histogram of the union
  of their rows, one :func:`~privcal.metrics.statistics.class_histograms` call per round;
* every method: a round's sampled clients' payloads come from one
  :meth:`~privcal.federated.methods.FedMethod.client_steps` call (FedTemp: one pass over the
  rows for every client's Newton statistics, or for every client's local fit under parameter
  averaging; the others: each client's :meth:`~privcal.federated.methods.FedMethod.client_step`)
  and are validated, clipped and summed as one stack.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from privcal._params import FRACTION, check_int
from privcal.calibrators import Calibrator
from privcal.data.validation import check_labels, check_scores
from privcal.federated.dp import (
    DPConfig,
    expected_cohort,
    federated_report,
    validate_payload,
    validate_payloads,
)
from privcal.federated.methods import FedMethod, get_method
from privcal.metrics import accuracy, classwise_ece, ece
from privcal.metrics.statistics import softmax
from privcal.privacy.distributed import AggregatorView, SecureSum, TooFewSurvivorsError
from privcal.privacy.noise import NoiseSource, noise_kind, resolve_noise

__all__ = ["evaluate", "simulate"]

log = logging.getLogger("privcal.federated")


def evaluate(
    cal: Calibrator | None, z: np.ndarray, y: np.ndarray, n_bins: int = 15
) -> dict[str, float]:
    """cwECE, ECE and accuracy of ``cal`` (or of the uncalibrated logits when ``None``)."""
    p = softmax(z) if cal is None else cal.predict_proba(z)
    return {
        "cwece": classwise_ece(p, y, n_bins),
        "ece": ece(p, y, n_bins),
        "accuracy": accuracy(p, y),
    }


def _check_parts(parts: Any, n: int) -> list[np.ndarray]:
    if not isinstance(parts, (list, tuple)) or len(parts) == 0:
        raise ValueError(
            "The 'parts' parameter of simulate must be a non-empty list of index arrays. "
            f"Got {type(parts).__name__} instead."
        )
    out = []
    for k, idx in enumerate(parts):
        a = np.asarray(idx)
        if a.ndim != 1 or (a.size and (a.dtype.kind not in "iu" or a.min() < 0 or a.max() >= n)):
            raise ValueError(
                f"The 'parts' parameter of simulate must hold 1-D int index arrays into "
                f"range({n}); client {k} does not."
            )
        out.append(a.astype(np.int64))
    return out


def simulate(
    method: str | FedMethod,
    logits: Any,
    labels: Any,
    parts: list[np.ndarray],
    rounds: int,
    epsilon: float | None = None,
    delta: float | None = None,
    seed: int = 0,
    sample_rate: float = 1.0,
    *,
    clip: float = 0.5,
    clip_pos: float = 10.0,
    clip_neg: float = 50.0,
    eval_logits: Any = None,
    eval_labels: Any = None,
    eval_every: int = 1,
    noise: NoiseSource | None = None,
    input: str = "logits",
    aggregation: str = "distributed",
    threshold: int | None = None,
    ledger: Any = None,
    **method_params: Any,
) -> tuple[Calibrator, list[dict[str, Any]]]:
    """Simulate ``rounds`` rounds of federated calibration over clients ``parts``.

    Parameters
    ----------
    method : str or FedMethod
        ``"fedtemp"``, ``"fedvector"``, ``"fedmatrix"`` (federated Newton), their parameter
        averaging ``"fedtemp-averaging"``, ``"fedvector-averaging"``, ``"fedmatrix-averaging"``
        (seed 003), ``"fedopvector"``, ``"fedcal"``, ``"fedbin"``, ``"fedbbq"`` (unweighted),
        ``"fedbbq-all"``, ``"fedbbq-changed"``, or an instance (e.g.
        ``FedBBQ(weighting="all", n_levels=7)``).
    logits, labels : array_like
        Calibration data of all clients (``N x C`` logits, ``N`` labels).
    parts : list of index arrays
        Client ``k`` holds rows ``parts[k]`` (e.g. from :func:`dirichlet_partition`). The number
        of partitions is the *declared* size ``K`` of the federation (public); a client with an
        empty index array is enrolled but holds no data (that is how a federation with one
        client removed is written): it sends nothing, except under distributed DP, where it
        uploads a zero payload with its noise share (the aggregator sees who drops, so a
        client's silence must not reveal that it holds no data).
    rounds : int
        ``T >= 1``.
    epsilon, delta : float or None
        User-level ``(epsilon, delta)`` for the whole run; ``None`` (both) runs without DP.
    seed : int
        Seeds client sampling (never the DP noise: see ``noise``).
    sample_rate : float, default=1.0
        ``p`` in ``(0, 1]``: each client joins each round independently with probability ``p``.
    clip, clip_pos, clip_neg : float
        ``C`` (parameter-averaging updates) and ``C+``, ``C-`` (histograms), ``> 0``; used with
        DP only. Newton methods (the scaling default) clip with their own public rule
        (``client_rows``, ``grad_clip``, ``hess_clip``: pass them as ``**method_params``).
    eval_logits, eval_labels : array_like, optional
        Evaluation data (e.g. the union of the clients' test parts); adds cwECE, ECE and
        accuracy to the history. These are exact statistics of the evaluation data, outside the
        guarantee: under DP the report lists the evaluation set as public.
    eval_every : int, default=1
    noise : NoiseSource, optional
        The noise under DP (the clients' shares, or the server's noise when trusted). ``None``
        (default): :class:`~privcal.privacy.SecureNoise` (for the shares, privcal's discrete
        Gaussian sampler on a cryptographic stream; OpenDP for the server's noise when
        trusted). A :class:`~privcal.privacy.SeededNoise` makes the run reproducible, warns
        ``InsecureNoiseWarning`` and marks the report "not private: seeded noise".
    aggregation : {"distributed", "trusted"}, default="distributed"
        Who adds the noise under DP. ``"distributed"``: each client adds a discrete Gaussian
        share to its clipped payload in fixed point and an in-process secure sum
        (:class:`~privcal.privacy.distributed.SecureSum`, what SecAgg+ hands a server) gives the
        server only the noisy total; the server never sees a payload or an exact sum.
        ``"trusted"``: clients send clipped payloads and the server adds the noise (seed 003).
        Both spend the same zCDP per round. Ignored without DP.
    threshold : int or None, default=None
        ``t`` for ``"distributed"``: the shares are sized so that any ``t`` honest clients make
        up the noise; a round with fewer than ``t`` answering clients raises
        :class:`~privcal.privacy.distributed.TooFewSurvivorsError` and releases nothing. The
        cohorts are drawn from ``seed`` before the run, so a run some round of which samples
        fewer than ``t`` clients is refused so before the ledger is charged or a row is read.
        ``None``: :func:`~privcal.federated.dp.default_threshold` (``K - max(1, K // 5)``).
    ledger : PrivacyOdometer, str, Path or None, default=None
        A pipeline ledger (example level; a path must be an existing ledger file), charged
        before the first round with the whole DP run as one step (:func:`_charge_ledger`);
        refused: ``BudgetExceededError``, nothing recorded, no round run. DP runs only. Clients
        that share a row (an index, or equal logits and label) are refused first
        (``ValueError``): the example-level charge takes an example to be one client's data;
        so is an evaluation set holding a client's row (its metrics are exact).
    **method_params
        Passed to the method's constructor when ``method`` is a name (``update``,
        ``local_iters``, ``client_rows``, ``grad_clip``, ``hess_clip``, ``n_levels``,
        ``weighting`` ...).

    Returns
    -------
    calibrator : Calibrator
        Fitted privcal calibrator (``TemperatureScaling``, ``VectorScaling``, ``BBQ`` ...).
        Under DP it carries ``privacy_report_`` (:func:`~privcal.federated.dp.federated_report`).
    history : list of dict
        One dict per round (plus round 0, the uncalibrated model, when evaluating): ``round``,
        ``epsilon_spent`` and, with evaluation data, ``cwece``, ``ece``, ``accuracy``. Without
        DP also ``n_clients`` (accepted updates) and ``seconds``; under DP these are left out,
        since both depend on which clients took part.

    Privacy
    -------
    User-level add/remove-one-client neighbours, with ``K = len(parts)``, ``p``, ``T``, the
    clip bounds and the number of classes declared public. Each client's contribution is
    clipped (Newton: ``C_g`` and ``C_h``; parameter averaging: ``C``; binning: ``C+`` / ``C-``
    per class row), the noise has the multipliers of seed 003 Lemma B.7, and parameter
    averaging divides by the fixed public expected cohort ``p K``: the run is ``rho``-zCDP,
    hence ``(epsilon, delta)``-DP (the derivation: :mod:`privcal.federated.dp`). Client
    sampling is not used for amplification. Without DP nothing is private (class totals used
    by non-DP weighting are exact).
    """
    owner = "simulate"
    fm = get_method(method, **method_params)
    z = check_scores(logits, input=input)  # type: ignore[arg-type]
    y = check_labels(labels, z.shape[0], z.shape[1])
    n, c = z.shape
    clients = _check_parts(parts, n)
    k_total = len(clients)
    t_rounds = check_int(rounds, "rounds", owner, low=1)
    p = FRACTION.check(sample_rate, "sample_rate", owner)
    check_int(seed, "seed", owner, low=0)
    every = check_int(eval_every, "eval_every", owner, low=1)
    if (epsilon is None) != (delta is None):
        raise ValueError(f"{owner} needs both epsilon and delta for DP, or neither.")
    dp = None
    if epsilon is not None:
        dp = DPConfig(
            epsilon=epsilon,
            delta=delta,  # type: ignore[arg-type]
            rounds=t_rounds,
            noise=resolve_noise(noise, owner),
            clip=clip,
            clip_pos=clip_pos,
            clip_neg=clip_neg,
            aggregation=aggregation,
            n_clients=k_total,
            threshold=threshold,
        )
    elif threshold is not None:
        raise ValueError(
            f"The 'threshold' parameter of {owner} applies to DP runs with "
            "aggregation='distributed'; pass epsilon and delta, or drop it."
        )
    rng = np.random.default_rng(seed)
    cohorts = [_sample(rng, k_total, p) for _ in range(t_rounds)]
    if dp is not None and dp.aggregation == "distributed":
        _check_cohorts(cohorts, dp, k_total, p, seed, owner)
    ez = ey = None
    if eval_logits is not None:
        ez = check_scores(eval_logits, input=input)  # type: ignore[arg-type]
        ey = check_labels(eval_labels, ez.shape[0], ez.shape[1])
    if ledger is not None:
        _check_disjoint_clients(z, y, clients, owner, ez, ey)
        _charge_ledger(ledger, fm, dp, t_rounds, owner)
    views: list[AggregatorView] = []
    state = fm.init(c)
    if fm.kind == "binning" and dp is None:  # the rows some client holds, each once
        held = np.unique(np.concatenate(clients))
        state["class_totals"] = np.bincount(y[held], minlength=c).astype(np.float64)
    history: list[dict[str, Any]] = []
    if ez is not None and ey is not None:
        history.append(_row(0, dp, 0, 0.0, evaluate(None, ez, ey)))
    shape = fm.payload_shape(c)
    cohort = expected_cohort(p, k_total)
    for t in range(1, t_rounds + 1):
        t0 = time.perf_counter()
        sampled = cohorts[t - 1]
        if dp is None or dp.aggregation != "distributed":
            sampled = np.array([k for k in sampled if clients[k].size > 0], dtype=np.int64)
        total, n_ok = _round_total(fm, state, z, y, clients, sampled, dp, shape, views)
        if dp is not None or n_ok > 0:
            state = fm.server_step(state, total, n_ok, dp=dp, denominator=cohort)
        scores = {}
        if ez is not None and ey is not None and (t % every == 0 or t == t_rounds):
            scores = evaluate(fm.calibrator(state, c), ez, ey)
        history.append(_row(t, dp, n_ok, time.perf_counter() - t0, scores))
    cal = fm.calibrator(state, c)
    if dp is not None:
        evaluation = (
            ()
            if ez is None
            else (
                "the evaluation set (eval_logits, eval_labels): the history's metrics are exact "
                "statistics of it",
            )
        )
        survivors = min((k_total - len(v.dropped) for v in views), default=None)
        cal.privacy_report_ = federated_report(
            fm, dp, c, n_clients=k_total, sample_rate=p, public=evaluation, survivors=survivors
        )
        if dp.aggregation == "distributed":
            cal.aggregator_views_ = views
    return cal, history


def _sample(rng: np.random.Generator, k_total: int, p: float) -> np.ndarray:
    """One round's cohort: every client, or each with probability ``p`` (Poisson sampling)."""
    return np.arange(k_total) if p >= 1.0 else np.flatnonzero(rng.random(k_total) < p)


def _check_cohorts(
    cohorts: list[np.ndarray], dp: DPConfig, k_total: int, p: float, seed: int, owner: str
) -> None:
    """Refuse, before any budget is spent, a distributed run some round of which samples fewer
    than ``t`` clients: that round could not release (every sampled client uploads, so the
    cohorts, drawn from the public ``seed``, are the survivors)."""
    t = int(dp.threshold or k_total)
    for r, cohort in enumerate(cohorts, start=1):
        if cohort.size < t:
            raise TooFewSurvivorsError(
                f"{owner}: round {r} samples {cohort.size} of {k_total} clients "
                f"(sample_rate={p:g}, seed={seed}), fewer than the threshold t={t} the noise "
                "shares are sized for: the run could not release, so it is refused before any "
                "budget is spent. Pass a smaller threshold or a larger sample_rate."
            )


def _check_disjoint_clients(
    z: np.ndarray,
    y: np.ndarray,
    clients: list[np.ndarray],
    owner: str,
    ez: np.ndarray | None = None,
    ey: np.ndarray | None = None,
) -> None:
    """Refuse clients that share a row (the same index, or equal logits and label): the
    ledger's example-level charge (:func:`_charge_ledger`) takes one example to be one client's
    data; a row held by ``m`` clients is ``m`` users, a group of ``2 m`` (``4 m^2 rho``). Refuse
    too an evaluation set holding a client's row: its exact metrics are declared public."""
    from privcal.private.rows import row_digests

    digests = row_digests(z, y)
    if ez is not None and ey is not None:
        shared = np.intersect1d(row_digests(ez, ey), digests[np.concatenate(clients)]).size
        if shared:
            raise ValueError(
                f"The evaluation set of {owner} holds {shared} of the clients' rows (logits and "
                "label); its metrics are exact and declared public, so the ledger's rows would "
                "be released without noise. Evaluate on rows no client holds."
            )
    held = [np.unique(digests[idx]) for idx in clients]
    flat = np.concatenate(held)
    owners = np.repeat(np.arange(len(held)), [h.size for h in held])
    order = np.argsort(flat, kind="stable")
    clash = np.flatnonzero(flat[order][1:] == flat[order][:-1])
    if clash.size:
        i, j = sorted((int(owners[order][clash[0]]), int(owners[order][clash[0] + 1])))
        shared = np.intersect1d(held[i], held[j]).size
        raise ValueError(
            f"The 'parts' parameter of {owner}: clients {i} and {j} share {shared} identical "
            "rows (logits and label); the ledger charges one example as one client's data, "
            "which holds only when each example lies in one client. Give each row to one client."
        )


def _charge_ledger(
    ledger: Any, fm: FedMethod, dp: DPConfig | None, rounds: int, owner: str
) -> None:
    """Charge a pipeline ledger with a DP run, converted from user to example level.

    The run is ``rho``-zCDP for adding or removing one user (``rho = run_rho(epsilon, delta)``,
    module :mod:`privcal.federated.dp`). Adding or removing one *example* changes one user's
    data, i.e. removes that user and adds it back changed: a group of two users, so the run is
    ``4 rho``-zCDP per example (Bun & Steinke 2016, Prop. 1.9). The ledger gets ``4 rho``
    converted at ``delta`` as the run converts (``aggregation="trusted"``: continuous Gaussian
    releases, whose composition is exactly ``sqrt(8 rho)``-GDP per example; distributed shares:
    the zCDP conversion) and the curve ``4 rho alpha``.
    """
    from privcal.federated.dp import run_epsilon, run_rho
    from privcal.privacy.filter import zcdp_curve
    from privcal.privacy.odometer import as_odometer

    odometer = as_odometer(ledger, owner)
    if dp is None or odometer is None:
        raise ValueError(
            f"The 'ledger' parameter of {owner} charges DP runs; pass epsilon and delta too."
        )
    rho = 4.0 * run_rho(dp.epsilon, dp.delta, dp.conversion)
    epsilon = run_epsilon(rho, dp.delta, dp.conversion)
    odometer.spend(
        f"simulate({fm.name}, {rounds} rounds, example level)",
        epsilon,
        dp.delta,
        mechanism="gaussian (zCDP)",
        rdp=zcdp_curve(rho, odometer.rule.orders),
        noise=noise_kind(dp.noise),
    )


def _row(
    t: int, dp: DPConfig | None, n_ok: int, seconds: float, scores: dict[str, float]
) -> dict[str, Any]:
    """One history row. Under DP only the round, the accountant's epsilon and the evaluation
    scores: the number of accepted clients and the round's duration depend on who took part."""
    if dp is not None:
        return {"round": t, "epsilon_spent": dp.spent_epsilon() if t else 0.0, **scores}
    return {"round": t, "n_clients": int(n_ok), "seconds": seconds, "epsilon_spent": 0.0, **scores}


def _finite_or_zeros(payload: Any) -> Any:
    """``payload`` as floats, zeros where any entry is NaN or infinite (a ragged or
    non-numeric payload is returned as it is, for :func:`validate_payload` to refuse)."""
    try:
        arr = np.asarray(payload, dtype=np.float64)
    except (TypeError, ValueError):
        return payload
    return arr if np.isfinite(arr).all() else np.zeros_like(arr)


def _round_total(
    fm: FedMethod,
    state: dict[str, np.ndarray],
    z: np.ndarray,
    y: np.ndarray,
    clients: list[np.ndarray],
    sampled: np.ndarray,
    dp: DPConfig | None,
    shape: tuple[int, ...],
    views: list[AggregatorView],
) -> tuple[np.ndarray, int]:
    """Sum of the sampled clients' (clipped) payloads and how many were accepted.

    Distributed DP: each accepted client's clipped payload goes through
    :meth:`DPConfig.client_uploads` (fixed point plus shares) and the server receives only
    :meth:`DPConfig.secure_total` (the view is appended to ``views``); the others count as
    dropped. Every sampled enrolled client uploads, a client without rows a zero payload
    (neutral in every method's sum) with its share. Were it to stay silent, the view's
    ``dropped`` would tell the aggregator whether a client holds data, and the add/remove
    neighbours would carry ``t`` honest shares against ``t + 1``: the ``t + 1``-share sum is not
    within the claimed ``(epsilon, delta)`` of the ``t``-share one (its variance is
    ``(t + 1) / t`` times larger, so the privacy-loss ratio is unbounded in the tails; ``delta``
    is about 6% at ``t = 1`` and ``epsilon = 1``). The audit ``simulate-fedtemp-aggregator``
    compares such neighbours.
    Under DP a payload with a NaN or infinite entry (a step the method cannot compute on some
    data only) counts as zeros, as a deployed client sends it (``task.client_payload``):
    dropping it would name the client in the view, fail a round whose ``t`` counts it and log
    its index, all from its data and with no noise.
    """
    if dp is not None and dp.aggregation == "distributed":
        groups = fm.noise_groups(dp, shape)
        ring = SecureSum()
        uploads: list[list[np.ndarray] | None] = [None] * len(clients)
        n_ok = 0
        holders = [int(k) for k in sampled if clients[k].size]
        steps = fm.client_steps(state, z, y, [clients[k] for k in holders])
        payloads = dict(zip(holders, steps, strict=True))
        for k in sampled:
            if clients[k].size == 0:  # a zero payload and its share (see the docstring)
                uploads[int(k)] = dp.client_uploads(np.zeros(shape), groups, ring)
                continue
            arr = validate_payload(_finite_or_zeros(payloads[int(k)]), shape, int(k))
            if arr is not None:
                uploads[int(k)] = dp.client_uploads(fm.clip(arr, dp), groups, ring)
                n_ok += 1
        return dp.secure_total(uploads, groups, shape, ring, views), n_ok
    if sampled.size == 0:
        return np.zeros(shape), 0
    if fm.kind == "binning" and dp is None:
        rows = np.concatenate([clients[k] for k in sampled])
        return fm.client_step(state, z[rows], y[rows]), int(sampled.size)
    payloads_ = fm.client_steps(state, z, y, [clients[k] for k in sampled])
    if dp is not None:  # zeros for a non-finite payload, as in the distributed branch
        payloads_ = [_finite_or_zeros(q) for q in payloads_]
    # a payload of the wrong shape or with NaN counts as a dropout
    accepted = validate_payloads(payloads_, shape, [int(k) for k in sampled])
    if accepted.shape[0] == 0:
        return np.zeros(shape), 0
    return (accepted if dp is None else fm.clip(accepted, dp)).sum(axis=0), accepted.shape[0]

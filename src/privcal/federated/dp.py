"""User-level DP for federated calibration: client clipping + server Gaussian noise (seed 003).

Neighbouring relation: two federations are neighbours when one holds one more *client* (all of
that client's rows) than the other (user-level add/remove, seed 003 Def. B.4).

Scaling methods, federated Newton (the default; :mod:`privcal.federated.methods`): client ``k``
sends the gradient and the curvature of its summed NLL at the global parameters, clipped to L2
norms ``C_g`` and ``C_h`` (the method's public clip rule, not ``DPConfig.clip``); the server
releases both sums plus Gaussian noise (two mechanisms per round, L2 sensitivities ``C_g`` and
``C_h``, the round's zCDP budget split between them) and takes a Newton step: no denominator.

Scaling methods, parameter averaging (DP-FedAvg, McMahan et al. 2017; seed 003 App. B.2): client
``k`` sends its update :math:`u_k = w_k - w_t` clipped to L2 norm ``C``; the server releases
:math:`\\sum_k \\bar u_k + N(0, \\sigma^2 I)`, with L2 sensitivity ``C``.

Binning methods: client ``k`` sends, for every class ``j``, its positive histogram :math:`P^k_j`
clipped to L2 norm ``C+`` and its negative histogram :math:`N^k_j` clipped to ``C-``; the server
adds :math:`N(0, (C_\\pm s)^2)` to each summed histogram. That is ``2c`` Gaussian mechanisms per
round, each with noise-to-sensitivity ratio ``s``.

Noise (seed 003 Lemma B.7): with :math:`\\rho` the run's budget, ``T`` rounds of Gaussian
mechanisms with ratio ``s`` are :math:`\\rho`-zCDP when

* scaling, parameter averaging: :math:`s = \\sqrt{T / (2\\rho)}` (``T`` mechanisms, Def. B.5 +
  Lemma B.6);
* scaling, Newton: :math:`s_g = s/\\sqrt f`, :math:`s_h = s/\\sqrt{1-f}` with the same ``s`` and
  ``f`` the gradient's share (``2T`` mechanisms whose zCDP parameters sum to :math:`\\rho`);
* binning: :math:`s = \\sqrt{2cT / (2\\rho)}` (``2cT`` mechanisms).

Proof note: a Gaussian mechanism with sensitivity ``D`` and std ``D s`` is
:math:`1/(2s^2)`-zCDP (Bun & Steinke 2016, Prop. 1.6); ``m`` of them compose to
:math:`m/(2s^2)` (Lemma 2.3); setting that equal to :math:`\\rho` gives the two formulas above,
which is exactly :func:`~privcal.privacy.accounting.zcdp_gaussian_sigma` with
``rounds = T`` or ``2cT``. Client sampling (rate ``p``) is *not* used for amplification (the
guarantee holds for every client whether it is sampled or not), so it is conservative.

The run's budget :math:`\\rho` (:func:`run_rho`) depends on who adds the noise. The server's
continuous Gaussian noise (``aggregation="trusted"``): the whole plan of rounds is a composition
of Gaussian mechanisms, which is exactly :math:`\\sqrt{2\\rho}`-GDP (Dong, Roth & Su 2022, Cor.
3.3; adaptive composition included), so :math:`\\rho` is the largest with the exact Gaussian
profile within ``(epsilon, delta)`` (:func:`~privcal.privacy.accounting.gaussian_rho`, the figure
dp-accounting's PLD accountant gives for the same plan): 7.8 % less noise std at epsilon 1 than
the zCDP conversion seed 003 uses (Lemma B.3). Distributed discrete Gaussian shares are
:math:`\\rho`-zCDP by Kairouz et al.'s bound, not Gaussian: :math:`\\rho` is the largest whose
zCDP conversion is within budget (:func:`~privcal.privacy.accounting.zcdp_rho`).

Fixed public denominator (parameter averaging; McMahan et al. 2018): the server divides the
noisy *sum* by the declared expected cohort size :func:`expected_cohort` ``= p K`` (its
derivation), never by the observed number of participants, which changes by one between
neighbours (an audit of 2 vs 3 clients at a claimed epsilon of 1 measured epsilon >= 2.88).

What is released, and what is public: the noisy sums (hence the calibrator), the round index and
the accountant's epsilon. ``K``, ``p``, ``T``, the clip bounds and the number of classes are
declared public and listed in the run's :class:`~privcal.privacy.PrivacyReport`
(:func:`federated_report`); the number of clients that took part in a round is *not* released
(with Poisson sampling it is not public).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcal._params import EPSILON, FRACTION, POSITIVE, check_int, check_probability
from privcal.privacy.accounting import (
    ZCDPAccountant,
    gaussian_epsilon,
    gaussian_rho,
    zcdp_epsilon,
    zcdp_gaussian_sigma,
    zcdp_rho,
)
from privcal.privacy.distributed import (
    AggregatorView,
    DistributedPlan,
    SecureSum,
    check_aggregation,
    threat_model,
)
from privcal.privacy.guarantee import PrivacyReport
from privcal.privacy.noise import NoiseSource, noise_kind

__all__ = [
    "DPConfig",
    "NoiseGroup",
    "clip_l2",
    "clip_rows_l2",
    "default_threshold",
    "expected_cohort",
    "fallback_epsilon",
    "federated_report",
    "noise_multiplier",
]

log = logging.getLogger("privcal.federated")


def clip_l2(x: np.ndarray, bound: float) -> np.ndarray:
    """Scale ``x`` to L2 norm at most ``bound``: :math:`x \\min(1, C / \\|x\\|_2)`, all its
    entries taken as one vector (:func:`clip_rows_l2` of ``x`` flattened)."""
    x = np.asarray(x)
    return clip_rows_l2(x.ravel(), bound).reshape(x.shape)


def clip_rows_l2(x: np.ndarray, bound: float) -> np.ndarray:
    """Clip each row (last axis) of ``x`` to L2 norm at most ``bound``."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(norms > bound, bound / np.where(norms > 0, norms, 1.0), 1.0)
    return x * scale


def expected_cohort(sample_rate: float, n_clients: int) -> float:
    """The public denominator of a DP-FedAvg round: the expected cohort size ``p K``.

    Parameters
    ----------
    sample_rate : float
        ``p`` in ``(0, 1]``: each client joins a round independently with probability ``p``.
    n_clients : int
        ``K``: the number of clients in the federation, *declared* public by the operator before
        the run (in :func:`~privcal.federated.simulate`, the number of partitions passed; in the
        Flower apps, the run's ``num-nodes``). It is not measured from who replies.

    Returns
    -------
    float
        ``p K``.

    Notes
    -----
    Sensitivity (user-level add/remove of one client). Each client's clipped update has L2 norm
    at most ``C``, so the sum :math:`S = \\sum_k \\bar u_k` moves by at most ``C`` in L2 (seed
    003 Def. B.4). ``p K`` is fixed before any data is read, so the released average
    :math:`(S + N(0, (Cs)^2 I)) / (pK)` is the Gaussian mechanism on ``S`` (sensitivity ``C``,
    std ``C s``; accounted as in the module docstring) followed by post-processing. The
    guarantee holds for *any* public constant; ``K`` only matters for accuracy (unbiased when
    ``K`` is the true federation size). Dividing by the observed number of participants instead
    makes the noise scale ``C s / K_obs`` differ between neighbours, which no sensitivity bound
    covers.

    Examples
    --------
    >>> expected_cohort(0.1, 100)
    10.0
    """
    owner = "expected_cohort"
    p = FRACTION.check(sample_rate, "sample_rate", owner)
    k = check_int(n_clients, "n_clients", owner, low=1)
    return p * k


@functools.lru_cache(maxsize=256)
def run_rho(epsilon: float, delta: float, conversion: str = "zcdp") -> float:
    """The run's zCDP budget :math:`\\rho` for ``(epsilon, delta)`` (module docstring):
    ``"gaussian"`` (continuous Gaussian noise: exact, :func:`~privcal.privacy.accounting.
    gaussian_rho`) or ``"zcdp"`` (:func:`~privcal.privacy.accounting.zcdp_rho`)."""
    if conversion == "gaussian":
        return gaussian_rho(epsilon, delta)
    return zcdp_rho(epsilon, delta)


def conversion_of(aggregation: str) -> str:
    """``"gaussian"`` for the server's continuous noise (trusted), ``"zcdp"`` for shares."""
    return "gaussian" if aggregation == "trusted" else "zcdp"


@functools.lru_cache(maxsize=256)
def noise_multiplier(
    epsilon: float,
    delta: float,
    rounds: int,
    mechanisms_per_round: int = 1,
    conversion: str = "zcdp",
) -> float:
    """Noise-to-sensitivity ratio ``s`` of Lemma B.7 for ``rounds`` rounds.

    ``s = sqrt(rounds * mechanisms_per_round / (2 rho))`` with ``rho = run_rho(epsilon, delta,
    conversion)``: scaling methods use 1 mechanism per round, binning ``2c``. ``"zcdp"`` is
    seed 003's; the trusted runs use ``"gaussian"`` (module docstring).

    Examples
    --------
    >>> round(noise_multiplier(1.0, 1e-5, 12), 2)
    14.01
    >>> round(noise_multiplier(1.0, 1e-5, 12, conversion="gaussian"), 2)
    12.92
    """
    owner = "noise_multiplier"
    eps = EPSILON.check(epsilon, "epsilon", owner)
    dlt = check_probability(delta, "delta", owner)
    t = check_int(rounds, "rounds", owner, low=1)
    m = check_int(mechanisms_per_round, "mechanisms_per_round", owner, low=1)
    if conversion == "zcdp":
        return zcdp_gaussian_sigma(eps, dlt, sensitivity=1.0, rounds=t * m)
    return math.sqrt(t * m / (2.0 * run_rho(eps, dlt, conversion))) * (1.0 + 1e-9)


@dataclass(frozen=True)
class NoiseGroup:
    """One Gaussian mechanism of a round: a block of the payload and its noise.

    Attributes
    ----------
    index : ndarray of int
        Flat indices of the block in the payload.
    sensitivity : float
        L2 norm bound of one client's clipped block (user-level add/remove).
    sigma : float
        Noise std per coordinate of the released sum (``sensitivity * ratio``).
    bound : float
        Bound on the absolute value of one entry of a client's clipped block (sizes the
        secure sum under ``aggregation="distributed"``).
    """

    index: np.ndarray
    sensitivity: float
    sigma: float
    bound: float

    @property
    def rho(self) -> float:
        """zCDP of the block's continuous Gaussian mechanism: ``sensitivity^2 / (2 sigma^2)``."""
        return self.sensitivity**2 / (2.0 * self.sigma**2)


@dataclass
class DPConfig:
    """User-level DP settings of one federated run and its single accountant.

    Attributes
    ----------
    epsilon, delta : float
        Target budget of the whole run (all ``rounds``).
    rounds : int
    clip : float
        ``C`` for parameter-averaging updates (Newton methods clip with their own
        ``clip_bounds()``).
    clip_pos, clip_neg : float
        ``C+`` and ``C-`` for the positive / negative class histograms.
    noise : NoiseSource
    accountant : ZCDPAccountant
        One per run; every noisy release steps it, so :meth:`spent_epsilon` is cumulative. Its
        conversion is the run's (:func:`conversion_of`: exact Gaussian when trusted).
    aggregation : {"trusted", "distributed"}
        ``"trusted"``: the server adds the noise to the exact sum. ``"distributed"``: every
        client adds a discrete Gaussian share to its fixed-point payload and a secure sum hands
        the server only the noisy total (:meth:`client_uploads`, :meth:`secure_total`).
    n_clients, threshold : int
        ``K`` and ``t`` of the distributed shares (``threshold`` is ``None`` when trusted).
    bits : int
        The secure sum's ring ``Z / 2^bits`` (64 in process; 31 over Flower's SecAgg+, which
        quantises uploads to int32): every group's plan is sized and checked for it.
    """

    epsilon: float
    delta: float
    rounds: int
    noise: NoiseSource
    clip: float = 0.5
    clip_pos: float = 10.0
    clip_neg: float = 50.0
    accountant: ZCDPAccountant = field(default_factory=ZCDPAccountant)
    aggregation: str = "trusted"
    n_clients: int = 1
    threshold: int | None = None
    bits: int = 64

    def __post_init__(self) -> None:
        owner = "DPConfig"
        self.epsilon = EPSILON.check(self.epsilon, "epsilon", owner)
        self.delta = check_probability(self.delta, "delta", owner)
        self.rounds = check_int(self.rounds, "rounds", owner, low=1)
        for name in ("clip", "clip_pos", "clip_neg"):
            setattr(self, name, POSITIVE.check(getattr(self, name), name, owner))
        if not isinstance(self.noise, NoiseSource):
            raise ValueError(
                f"The 'noise' parameter of {owner} must be a privcal NoiseSource. "
                f"Got {self.noise!r} instead."
            )
        self.n_clients = check_int(self.n_clients, "n_clients", owner, low=1)
        self.bits = check_int(self.bits, "bits", owner, low=2)
        if self.bits > 64:
            raise ValueError(
                f"The 'bits' parameter of {owner} must be an int in [2, 64]. Got {self.bits} "
                "instead."
            )
        self.aggregation, self.threshold = check_aggregation(
            self.aggregation,
            default_threshold(self.n_clients)
            if self.aggregation == "distributed" and self.threshold is None
            else self.threshold,
            self.n_clients,
            owner,
            allowed=("distributed", "trusted"),
        )
        if not self.accountant.history:  # the run's own conversion (module docstring)
            self.accountant = ZCDPAccountant(conversion_of(self.aggregation))
        elif self.accountant.conversion != conversion_of(self.aggregation):
            raise ValueError(
                f"The 'accountant' of {owner} converts by {self.accountant.conversion!r}; a "
                f"{self.aggregation!r} run converts by {conversion_of(self.aggregation)!r}."
            )

    @property
    def conversion(self) -> str:
        """How the run's ``rho`` converts to ``(epsilon, delta)`` (:func:`conversion_of`)."""
        return conversion_of(self.aggregation)

    def multiplier(self, mechanisms_per_round: int = 1) -> float:
        return noise_multiplier(
            self.epsilon, self.delta, self.rounds, mechanisms_per_round, self.conversion
        )

    def plan(self, group: NoiseGroup) -> DistributedPlan:
        """The distributed plan of one noise group (public; the same on every client)."""
        k, t = int(self.n_clients), int(self.threshold or self.n_clients)
        size, sens, sigma = int(group.index.size), float(group.sensitivity), float(group.sigma)
        return _group_plan(sens, sigma, size, k, t, float(group.bound), int(self.bits))

    def release(self, total: np.ndarray, groups: list[NoiseGroup]) -> np.ndarray:
        """The released round total; steps the accountant once per group.

        Trusted: adds ``N(0, sigma^2)`` per coordinate of each group to the exact sum and
        records ``rho = sensitivity^2 / (2 sigma^2)``. Distributed: the secure total already
        holds the clients' shares (:meth:`secure_total`); records the group's plan's
        ``rho`` (Kairouz et al.'s bound with the rounding-inflated sensitivity, equal to the
        trusted ``rho`` by construction of the plan).
        """
        out = np.array(total, dtype=np.float64, copy=True)
        flat = out.reshape(-1)
        for g in groups:
            if self.aggregation == "distributed":
                plan = self.plan(g)
                self.accountant.step_rho(plan.law.rho(plan.integer_sensitivity, g.index.size))
            else:
                flat[g.index] = self.noise.add_gaussian(flat[g.index], float(g.sigma))
                self.accountant.step(sigma=float(g.sigma), sensitivity=float(g.sensitivity))
        return out

    def client_uploads(
        self, payload: np.ndarray, groups: list[NoiseGroup], ring: SecureSum
    ) -> list[np.ndarray]:
        """One client's uploads (one per group): fixed point plus a discrete Gaussian share."""
        flat = np.asarray(payload, dtype=np.float64).reshape(-1)
        return [self.plan(g).share(flat[g.index], self.noise, ring) for g in groups]

    def secure_total(
        self,
        uploads: list[list[np.ndarray] | None],
        groups: list[NoiseGroup],
        shape: tuple[int, ...],
        ring: SecureSum,
        views: list[AggregatorView] | None = None,
    ) -> np.ndarray:
        """The server's side: one secure sum per group, lifted and decoded into a payload.

        ``uploads[k]`` is client ``k``'s list (``None``: dropped or not sampled). Raises
        :class:`~privcal.privacy.distributed.TooFewSurvivorsError` with fewer than ``t``.
        """
        t = int(self.threshold or self.n_clients)
        out = np.zeros(int(np.prod(shape)))
        for j, g in enumerate(groups):
            view = ring.aggregate(
                [None if u is None else u[j] for u in uploads], t, (g.index.size,)
            )
            if views is not None:
                views.append(view)
            out[g.index] = self.plan(g).release(view)
        return out.reshape(shape)

    def spent_epsilon(self) -> float:
        """The accountant's epsilon at the run's delta (cumulative; 0 before any release)."""
        if not self.accountant.history:
            return 0.0
        return run_epsilon(self.accountant.rho, self.delta, self.accountant.conversion)


#: How a run's rounds compose, as its report states it.
_COMPOSITION = {
    "zcdp": "zCDP composition (Canonne-Kamath-Steinke conversion)",
    "gaussian": "Gaussian composition, exact (sqrt(2 rho)-GDP; Dong-Roth-Su 2022)",
}


def federated_report(
    method: Any,
    dp: DPConfig,
    n_classes: int,
    *,
    n_clients: int,
    sample_rate: float,
    public: tuple[str, ...] = (),
    survivors: int | None = None,
    transport: str = "in-process",
) -> PrivacyReport:
    """The privacy report of one federated run (user-level add/remove, zCDP over ``T`` rounds).

    One :class:`~privcal.privacy.Release` (the method's payload measurement,
    :mod:`privcal.federated.payloads`) covers the whole run: ``T`` rounds of Gaussian noisy
    sums composed in zCDP (per-round ``(epsilon, delta)`` shares would overstate the loss of a
    single round), with the accountant's epsilon and the run's delta.

    Parameters
    ----------
    method : FedMethod
    dp : DPConfig
        The run's configuration; its accountant has recorded every round.
    n_classes, n_clients : int
        ``c`` and ``K``, the declared number of clients in the federation.
    sample_rate : float
        ``p``.
    public : tuple of str, default=()
        Further quantities the caller declares public.
    survivors : int or None, default=None
        Under ``"distributed"``: the fewest clients that uploaded to any secure sum of the run
        (``None``: ``K``); the collusion tolerated is computed from it.
    transport : {"in-process", "secagg+"}, default="in-process"
        How the distributed shares were summed (:func:`~privcal.privacy.distributed.threat_model`).

    Returns
    -------
    PrivacyReport
        ``unit="user"``, ``relation="add/remove"``; ``public`` lists ``K``, ``p``, the expected
        cohort ``p K``, ``T``, the clip bounds and ``c``; ``noise`` says whether the server's
        noise was seeded (then the report's status is "not private: seeded noise").
    """
    t = dp.rounds
    terms = method.report_terms(dp, n_classes, expected_cohort(sample_rate, n_clients))
    mech, fallback = terms["mechanism"], None
    if dp.aggregation == "distributed":
        alone = fallback_epsilon(method, dp, n_classes)
        fallback = f"epsilon {alone:.3g} at delta {dp.delta:g} per client"
        mech = (
            f"{mech}, as distributed discrete Gaussian shares (t={dp.threshold} of "
            f"K={dp.n_clients}; Kairouz et al. 2021 Prop. 14, rounding included) summed by a "
            "secure sum"
        )
    release = terms["measurement"].record(
        f"{method.name}: {t} round(s) of noisy sums of {terms['what']}",
        dp.spent_epsilon(),
        source="federation",
        delta=dp.delta,
        mechanism=f"{mech}; {_COMPOSITION[dp.conversion]}, rho={dp.accountant.rho:.6g}",
        clip=terms["clip"],
    )
    declared = (
        f"number of clients in the federation K={n_clients} (declared before the run)",
        f"client sample rate p={sample_rate:g}",
        terms["cohort"],
        f"rounds T={t}",
        terms["clips"],
        f"number of classes c={n_classes}",
        *public,
    )
    threat = threat_model(
        dp.aggregation, n_clients, dp.threshold, survivors, transport=transport, fallback=fallback
    )
    noise = noise_kind(dp.noise)
    return PrivacyReport(
        [release], "user", "add/remove", public=declared, noise=noise, threat=threat
    )


def fallback_epsilon(method: Any, dp: DPConfig, n_classes: int) -> float:
    """The run's epsilon (at its delta) for one client whose uploads are all seen alone.

    A client's upload in one round carries one share per noise group, ``N_Z(0, sigma_Z^2 / t)``
    on a shift of integer L2 norm at most ``D2``: ``ShareLaw.fallback`` gives its zCDP ``rho_g``
    (Kairouz et al.'s bound with one share). Over the run's ``T`` rounds that is
    ``T sum_g rho_g``-zCDP, converted at ``delta``
    (:func:`~privcal.privacy.accounting.zcdp_epsilon`).
    It is what the server learns about that client if the secure sum fails to hide its upload
    (the server with ``t - 1`` colluders over SecAgg+): ``t`` times the zCDP of the release.
    """
    shape = method.payload_shape(n_classes)
    rho = 0.0
    for g in method.noise_groups(dp, shape):
        plan = dp.plan(g)
        rho += plan.law.fallback(plan.integer_sensitivity, int(g.index.size))
    return run_epsilon(dp.rounds * rho, dp.delta, "zcdp")


@functools.lru_cache(maxsize=256)
def _group_plan(
    sensitivity: float, sigma: float, size: int, k: int, t: int, bound: float, bits: int = 64
) -> DistributedPlan:
    return DistributedPlan.gaussian(
        sensitivity, sigma, n_parties=k, threshold=t, value_bound=bound, shape=(size,), bits=bits
    )


def default_threshold(n_clients: int) -> int:
    """``t`` when none is declared: ``K - max(1, floor(K / 5))`` (``K = 1``: 1).

    Tolerates at least one dropout, so removing one client (the user-level neighbour) or one
    client's failure still releases with the claimed noise, and about a fifth of the federation
    for large ``K`` (100 clients: t = 80), at ``K / t`` of one release's noise variance when
    everyone answers.
    """
    k = int(n_clients)
    return 1 if k <= 1 else k - max(1, k // 5)


@functools.lru_cache(maxsize=4096)
def run_epsilon(rho: float, delta: float, conversion: str = "zcdp") -> float:
    """``rho`` (a run's, or its first rounds') as ``epsilon`` at ``delta``, by ``conversion``
    (cached: every run of a configuration converts the same values)."""
    if conversion == "gaussian":
        return gaussian_epsilon(rho, delta)
    return zcdp_epsilon(rho, delta)


def validate_payload(payload: Any, shape: tuple[int, ...], client: Any) -> np.ndarray | None:
    """Return ``payload`` as a float array, or ``None`` (logged) if its shape or values are bad.

    The server drops such an update and the round continues with the others.
    """
    try:
        arr = np.asarray(payload, dtype=np.float64)
    except (TypeError, ValueError):
        log.warning("Rejected the update of client %s: not a numeric array.", client)
        return None
    if arr.shape != tuple(shape):
        log.warning(
            "Rejected the update of client %s: shape %s, expected %s.", client, arr.shape, shape
        )
        return None
    if not np.isfinite(arr).all():
        log.warning("Rejected the update of client %s: it holds NaN or inf values.", client)
        return None
    return arr


def validate_payloads(
    payloads: Sequence[Any] | np.ndarray, shape: tuple[int, ...], clients: Sequence[Any]
) -> np.ndarray:
    """The accepted payloads of ``clients`` (one each, in order), stacked: ``(n_ok, *shape)``.

    :func:`validate_payload` of each; a stack of the right shape (a vectorised method's
    :meth:`~privcal.federated.methods.FedMethod.client_steps`) is checked in one pass, a
    payload with NaN or inf values dropped and logged as there.
    """
    if isinstance(payloads, np.ndarray) and payloads.shape == (len(clients), *shape):
        arr = payloads.astype(np.float64, copy=False)
        finite = np.isfinite(arr.reshape(len(clients), -1)).all(axis=1)
        if finite.all():
            return arr
        for k in np.flatnonzero(~finite):
            validate_payload(arr[k], shape, clients[int(k)])  # logs the rejection
        return arr[finite]
    accepted = [validate_payload(p, shape, k) for p, k in zip(payloads, clients, strict=True)]
    kept = [a for a in accepted if a is not None]
    return np.stack(kept) if kept else np.zeros((0, *shape))

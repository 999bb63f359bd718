"""Distributed noise shares and the secure sum: many parties, no trusted aggregator.

Each of ``K`` parties holds a private vector ``x_k`` (a data source's answer to a query, a
client's clipped payload). Instead of adding the whole noise of a release itself (``"local"``
aggregation: the sum then carries ``K`` releases' noise) or sending ``x_k`` to a server that adds
the noise (``"trusted"``: the server sees the exact sum), each party

1. encodes ``x_k`` in fixed point at a public scale ``s`` (a power of two) by randomized rounding,
   ``floor(s x_k + U)`` with ``U`` uniform on ``[0, 1)`` (:class:`Encoding`);
2. adds an integer noise **share** drawn so that the shares of any ``t`` parties sum **exactly**
   (discrete Laplace) or provably nearly (discrete Gaussian) to the noise of one release
   (:class:`ShareLaw`);
3. uploads the result modulo ``2^b`` to a secure sum (Flower's SecAgg+, or :class:`SecureSum`
   in process), which hands the aggregator only the modular sum of the uploads and who dropped.

The aggregator lifts the modular sum to the centred integer, refuses it when it lies outside the
public range the run was sized for (a wrapped sum is never released), and divides by ``s``.

Laws whose shares sum to the target
-----------------------------------
* **Discrete Laplace** (the pure-epsilon data-source queries): a party's share is ``NB(1/t, 1 -
  a) - NB(1/t, 1 - a)``, so any ``t`` shares sum exactly to ``DLap(a)``, ``P(k) ∝ a^|k|``; with
  integer L1 sensitivity ``D`` and ``a = exp(-epsilon / D)`` the sum is ``epsilon``-DP.
* **Discrete Gaussian** (the federated methods; Kairouz, Liu & Steinke 2021): a party's share is
  ``N_Z(0, sigma^2 / t)`` per coordinate; ``n >= t`` shares with integer L2 sensitivity ``D2``
  in ``d`` coordinates are ``rho``-zCDP with ``rho = (D2 / (sqrt(n) sigma_p) + tau sqrt(d))^2 /
  2``, ``sigma_p`` the share's std and ``tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma_p^2 k / (k +
  1))`` (their Prop. 14; :meth:`ShareLaw.rho`, with ``n = t``).

*Sensitivity (add/remove one example, or one client for user-level runs).* Randomized rounding
is never credited: one example that moves the exact vector by ``Delta_1`` in L1 over at most
``m`` coordinates moves the encoded vector by at most ``D = ceil(s Delta_1) + m`` (L1); for an L2
bound ``C`` over ``d`` coordinates, ``D2 = s C + sqrt(d)``, whatever the rounding offsets. ``s``
is the smallest power of two with ``m / (s Delta) <= 2^-10`` (rounding costs at most 0.1% of the
noise). Proofs (share laws, rounding as a data-independent mixture):
docs/privacy.md#proof-of-the-share-laws-and-of-rounding.

Modulus, threshold and collusion
--------------------------------
Uploads live modulo ``2^b`` (``b = 64`` in process; SecAgg+'s ``modulus_range`` over Flower);
:meth:`DistributedPlan.check_modulus` refuses a plan whose honest sum (``K (s B + 1)`` plus the
noise's ``1 - 1e-9`` quantile, :meth:`ShareLaw.tail`) could reach ``2^(b-1)``, and the aggregator
refuses a lifted sum beyond it (:class:`WrappedSumError`): post-processing of public quantities
and the release. Shares are sized for ``t``: with ``S`` survivors the guarantee holds while at
most ``S - t`` collude with the aggregator (``min(S - t, t - 2)`` over SecAgg+,
:func:`collusion_tolerated`, from the fewest survivors of any sum of the fit); fewer than ``t``
survivors release nothing (:class:`TooFewSurvivorsError`). One upload seen alone is ``t
rho``-zCDP for the discrete Gaussian (:meth:`ShareLaw.fallback`); none is claimed for the
discrete Laplace. Who is trusted with what: docs/privacy.md, "Who adds the noise".

Sampling
--------
Shares come from privcal's vectorised samplers on a ChaCha20 stream keyed from the OS's CSPRNG
(:class:`~privcal.privacy.SecureNoise`; Canonne, Kamath & Steinke's discrete Gaussian sampler,
NumPy's gamma-Poisson negative binomial), whose laws are computed in floating point: the
guarantees are proved for the exact laws, and that gap is not bounded here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from privcal._params import EPSILON, POSITIVE, check_int, check_option
from privcal.privacy.noise import NoiseSource

__all__ = [
    "AGGREGATIONS",
    "ROUNDING_SLACK",
    "TRANSPORTS",
    "WRAP_PROBABILITY",
    "AggregatorView",
    "DistributedPlan",
    "Encoding",
    "SecureSum",
    "ShareLaw",
    "TooFewSurvivorsError",
    "WrappedSumError",
    "check_aggregation",
    "collusion_tolerated",
    "threat_model",
]

#: Who adds the noise of a multi-party release (see the module docstring).
AGGREGATIONS: tuple[str, ...] = ("distributed", "local", "trusted")
#: Largest probability that an honest sum leaves the range its modulus was sized for.
WRAP_PROBABILITY = 1e-9
#: Rounding may cost at most this fraction of the sensitivity (it picks the scale).
ROUNDING_SLACK = 2.0**-10


class TooFewSurvivorsError(RuntimeError):
    """Fewer parties survived than the threshold ``t`` the shares were sized for: no release."""


class WrappedSumError(RuntimeError):
    """The lifted secure sum lies outside the range the modulus was sized for: not released."""


def check_aggregation(
    aggregation: Any,
    threshold: Any,
    n_parties: int,
    owner: str,
    *,
    allowed: Sequence[str] = AGGREGATIONS,
    min_threshold: int = 1,
) -> tuple[str, int | None]:
    """Validate ``aggregation`` and ``threshold`` for ``n_parties`` parties.

    Returns ``(aggregation, t)`` with ``t = n_parties`` when ``threshold`` is ``None`` under
    ``"distributed"`` and ``t = None`` otherwise. ``min_threshold`` is the transport's own
    minimum (SecAgg+ reconstructs secrets from at least 2 parties).
    """
    mode = check_option(aggregation, "aggregation", owner, tuple(allowed))
    if mode != "distributed":
        if threshold is not None:
            raise ValueError(
                f"The 'threshold' parameter of {owner} applies to aggregation='distributed' "
                f"only (the number of parties whose shares must survive). Got threshold="
                f"{threshold!r} with aggregation={mode!r}; drop it or use 'distributed'."
            )
        return mode, None
    t = check_int(
        n_parties if threshold is None else threshold, "threshold", owner, low=min_threshold
    )
    if t > n_parties:
        raise ValueError(
            f"The 'threshold' parameter of {owner} must be at most the number of parties "
            f"K={n_parties} (t of K shares must survive). Got {t} instead."
        )
    return mode, t


@dataclass(frozen=True)
class Encoding:
    """Fixed point at scale ``s`` (grid step ``1/s``) with randomized rounding.

    Attributes
    ----------
    scale : float
        A power of two, so ``k / s`` is exact in floating point.
    """

    scale: float

    def encode(self, value: np.ndarray, noise: NoiseSource) -> np.ndarray:
        """``floor(s x + U)`` per coordinate, ``U`` uniform on ``[0, 1)`` from ``noise``.

        Unbiased: ``E floor(y + U) = y``. The offsets are not relied on for privacy (the module
        docstring bounds the sensitivity for every offset).
        """
        y = np.asarray(value, dtype=np.float64) * self.scale
        u = noise.uniform(size=y.shape) if y.ndim else noise.uniform()
        return np.floor(y + u).astype(np.int64)

    def decode(self, total: np.ndarray) -> np.ndarray:
        return np.asarray(total, dtype=np.float64) / self.scale


@dataclass(frozen=True)
class ShareLaw:
    """The law of one party's integer noise share, sized so ``t`` shares make one release.

    Attributes
    ----------
    kind : {"discrete_laplace", "discrete_gaussian"}
    parameter : float
        ``a`` of the target ``DLap(a)``, or the target std ``sigma`` (grid units) of the sum of
        ``t`` discrete Gaussian shares.
    threshold : int
        ``t``.
    """

    kind: str
    parameter: float
    threshold: int

    @property
    def share_sigma(self) -> float:
        """Std of one discrete Gaussian share: ``sigma / sqrt(t)``."""
        return self.parameter / math.sqrt(self.threshold)

    def sample(self, noise: NoiseSource, shape: tuple[int, ...]) -> np.ndarray:
        """One party's share (int64, ``shape``), drawn from ``noise``."""
        if self.kind == "discrete_laplace":
            r, p = 1.0 / self.threshold, 1.0 - self.parameter
            first = noise.negative_binomial(r, p, size=shape)
            return first - noise.negative_binomial(r, p, size=shape)
        return noise.discrete_gaussian(self.share_sigma, size=shape)

    def variance(self, n_shares: int) -> float:
        """Variance of the sum of ``n_shares`` shares (per coordinate)."""
        if self.kind == "discrete_laplace":
            a = self.parameter
            return n_shares / self.threshold * 2.0 * a / (1.0 - a) ** 2
        return n_shares * self.share_sigma**2  # a discrete Gaussian's variance is at most sigma^2

    def tail(self, n_shares: int, coordinates: int, probability: float = WRAP_PROBABILITY) -> int:
        """An integer ``L`` with ``P(max_j |sum of n shares|_j > L) <= probability``.

        Discrete Laplace: each coordinate is ``NB(n/t) - NB(n/t)``, bounded in absolute value by
        the larger of two ``NB(n/t, 1 - a)`` variables; a union bound over the ``2 d`` of them
        uses the negative binomial's exact quantile. Discrete Gaussian: a sum of discrete
        Gaussians is sub-Gaussian with variance proxy at most ``n sigma_p^2`` (Canonne, Kamath &
        Steinke 2020, Prop. 5.2), so ``L = sqrt(2 v log(2 d / probability))``.
        """
        d = max(int(coordinates), 1)
        if self.kind == "discrete_laplace":
            q = probability / (2 * d)
            return int(stats.nbinom.isf(q, n_shares / self.threshold, 1.0 - self.parameter)) + 1
        v = n_shares * self.share_sigma**2
        return math.ceil(math.sqrt(2.0 * v * math.log(2.0 * d / probability))) + 1

    def tau(self, n_shares: int) -> float:
        """Kairouz et al.'s ``tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma_p^2 k / (k + 1))``."""
        k = np.arange(1, max(int(n_shares), 1), dtype=np.float64)
        return float(10.0 * np.exp(-2.0 * np.pi**2 * self.share_sigma**2 * k / (k + 1)).sum())

    def rho(self, l2_sensitivity: float, coordinates: int) -> float:
        """zCDP of the sum of ``t`` discrete Gaussian shares for an integer L2 shift ``D2``."""
        n = self.threshold
        root = l2_sensitivity / (math.sqrt(n) * self.share_sigma)
        root += self.tau(n) * math.sqrt(coordinates)
        return 0.5 * root * root

    def fallback(self, l2_sensitivity: float, coordinates: int) -> float:
        """zCDP of one share alone (the secure sum broken): ``N_Z(0, sigma_p^2)`` on the shift."""
        return ShareLaw(self.kind, self.share_sigma, 1).rho(l2_sensitivity, coordinates)


def _scale_for(slack_units: float, sensitivity: float) -> float:
    """Smallest power of two ``s`` with ``slack_units / (s sensitivity) <= ROUNDING_SLACK``."""
    return float(2.0 ** max(0, math.ceil(math.log2(slack_units / (ROUNDING_SLACK * sensitivity)))))


@dataclass(frozen=True)
class AggregatorView:
    """What the aggregator of one secure sum sees: the modular sum and who dropped.

    Attributes
    ----------
    modular_sum : ndarray of uint64
        The sum of the uploads modulo ``2^bits`` (SecAgg+ hands the server exactly this).
    dropped : tuple of int
        Indices of the parties that did not upload.
    bits : int
    """

    modular_sum: np.ndarray
    dropped: tuple[int, ...]
    bits: int

    def lift(self) -> np.ndarray:
        """The centred integer in ``[-2^(b-1), 2^(b-1))`` congruent to the modular sum."""
        m = np.asarray(self.modular_sum, dtype=np.uint64)
        if self.bits == 64:
            return m.view(np.int64).copy()
        half = np.uint64(1) << np.uint64(self.bits - 1)
        full = np.int64(1) << np.int64(self.bits)
        out = m.astype(np.int64)
        return np.where(m >= half, out - full, out)


class SecureSum:
    """In-process secure aggregation: the aggregator learns the modular sum and the dropouts.

    It reproduces what Flower's SecAgg+ hands a server (the sum modulo ``2^bits`` of the
    surviving parties' integer vectors, and who dropped); the pairwise masks that hide each
    upload in SecAgg+ cancel in that sum, so they are not simulated. Uploads are checked before
    anything is summed: an upload of the wrong shape, a non-integer dtype or an entry outside
    ``[0, 2^bits)`` is refused with an error naming the party.

    Parameters
    ----------
    bits : int, default=64
        The modulus is ``2^bits`` (``2 <= bits <= 64``).
    """

    def __init__(self, bits: int = 64) -> None:
        self.bits = check_int(bits, "bits", "SecureSum", low=2)
        if self.bits > 64:
            raise ValueError(
                f"The 'bits' parameter of SecureSum must be an int in [2, 64]. Got {bits!r} "
                "instead."
            )

    def to_ring(self, value: np.ndarray) -> np.ndarray:
        """A signed int64 vector as its residues modulo ``2^bits`` (uint64)."""
        v = np.asarray(value, dtype=np.int64).astype(np.uint64)  # two's complement: mod 2^64
        if self.bits < 64:
            v &= np.uint64((1 << self.bits) - 1)
        return v

    def aggregate(
        self, uploads: Sequence[np.ndarray | None], threshold: int, shape: tuple[int, ...]
    ) -> AggregatorView:
        """Sum the surviving ``uploads`` (``None``: dropped) modulo ``2^bits``.

        Raises
        ------
        TooFewSurvivorsError
            Fewer than ``threshold`` uploads: the shares of the survivors do not make up the
            claimed noise, so nothing is released.
        ValueError
            An upload of the wrong shape, dtype or range (naming the party).
        """
        survivors = [k for k, u in enumerate(uploads) if u is not None]
        dropped = tuple(k for k, u in enumerate(uploads) if u is None)
        if len(survivors) < threshold:
            raise TooFewSurvivorsError(
                f"Only {len(survivors)} of {len(uploads)} parties uploaded their shares, fewer "
                f"than the threshold t={threshold} the noise shares were sized for: the sum "
                "would carry less noise than claimed, so nothing is released."
            )
        total = np.zeros(shape, dtype=np.uint64)
        top = (1 << self.bits) - 1
        for k in survivors:
            arr = np.asarray(uploads[k])
            if arr.shape != tuple(shape) or arr.dtype.kind not in "ui":
                raise ValueError(
                    f"The upload of party {k} to the secure sum must be an integer array of "
                    f"shape {tuple(shape)}. Got dtype {arr.dtype} and shape {arr.shape}."
                )
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) > top):
                raise ValueError(
                    f"The upload of party {k} to the secure sum holds entries outside "
                    f"[0, 2^{self.bits}); a share must be reduced modulo the ring first."
                )
            with np.errstate(over="ignore"):
                total = total + arr.astype(np.uint64)
        if self.bits < 64:
            total &= np.uint64(top)
        return AggregatorView(total, dropped, self.bits)


@dataclass(frozen=True)
class DistributedPlan:
    """One release by ``K`` parties with distributed noise: encoding, share law and checks.

    Build it with :meth:`laplace` (pure epsilon, L1 sensitivity) or :meth:`gaussian` (zCDP, L2
    sensitivity). Every field is public.

    Attributes
    ----------
    mechanism : {"discrete_laplace", "discrete_gaussian"}
    encoding : Encoding
    law : ShareLaw
    integer_sensitivity : float
        ``D`` (L1, Laplace) or ``D2`` (L2, Gaussian) of the encoded sum, rounding included.
    n_parties, threshold : int
        ``K`` and ``t``.
    value_bound : float
        Public bound on the absolute value of one party's coordinate before encoding.
    shape : tuple of int
    bits : int
        The ring ``Z / 2^bits``.
    """

    mechanism: str
    encoding: Encoding
    law: ShareLaw
    integer_sensitivity: float
    n_parties: int
    threshold: int
    value_bound: float
    shape: tuple[int, ...]
    bits: int = 64

    @property
    def entry_bound(self) -> float:
        """``value_bound`` with a relative slack of ``2^-20`` (floating-point clipping lands an
        ulp beyond its bound); both the modulus and the party's check use it."""
        return self.value_bound * (1.0 + 2.0**-20)

    @property
    def coordinates(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    @classmethod
    def laplace(
        cls,
        sensitivity: float,
        epsilon: float,
        moved: int,
        *,
        n_parties: int,
        threshold: int,
        value_bound: float,
        shape: tuple[int, ...],
        bits: int = 64,
    ) -> DistributedPlan:
        """Pure ``epsilon``-DP for an L1 ``sensitivity`` spread over at most ``moved`` coordinates.

        ``D = ceil(s sensitivity) + moved`` and ``a = exp(-epsilon / D)``: the sum of ``t``
        shares is ``DLap(a)``, ``epsilon``-DP for integer L1 shifts up to ``D``.
        """
        owner = "DistributedPlan.laplace"
        sens = POSITIVE.check(sensitivity, "sensitivity", owner)
        eps = EPSILON.check(epsilon, "epsilon", owner)
        m = check_int(moved, "moved", owner, low=0)
        scale = _scale_for(max(m, 1), sens)
        d = math.ceil(scale * sens) + m
        law = ShareLaw("discrete_laplace", math.exp(-eps / d), threshold)
        return cls._checked(law, scale, d, n_parties, threshold, value_bound, shape, bits)

    @classmethod
    def gaussian(
        cls,
        l2_sensitivity: float,
        sigma: float,
        *,
        n_parties: int,
        threshold: int,
        value_bound: float,
        shape: tuple[int, ...],
        bits: int = 64,
    ) -> DistributedPlan:
        """zCDP of ``N(0, sigma^2)`` on an L2 ``l2_sensitivity`` (``C^2 / (2 sigma^2)``).

        ``D2 = s C + sqrt(d)``; the target std of the sum of ``t`` shares is the ``sigma_Z`` that
        solves ``D2 / sigma_Z + tau sqrt(d) = C / sigma`` (Kairouz et al.'s bound equal to the
        continuous Gaussian's ``rho``), found by a fixed-point iteration on ``tau`` (negligible
        once a share's std exceeds a few grid steps).
        """
        owner = "DistributedPlan.gaussian"
        c = POSITIVE.check(l2_sensitivity, "l2_sensitivity", owner)
        sig = POSITIVE.check(sigma, "sigma", owner)
        d = int(np.prod(shape)) if shape else 1
        scale = _scale_for(math.sqrt(d), c)
        d2 = scale * c + math.sqrt(d)
        target = c / sig
        sigma_z = d2 / target
        for _ in range(50):
            tau = ShareLaw("discrete_gaussian", sigma_z, threshold).tau(threshold)
            room = target - tau * math.sqrt(d)
            if room <= 0:
                raise ValueError(
                    f"{owner}: shares of std {sigma_z / math.sqrt(threshold):.3g} grid steps over "
                    f"t={threshold} parties cannot meet the target; use fewer parties per share "
                    "or more noise."
                )
            new = d2 / room
            if abs(new - sigma_z) <= 1e-12 * new:
                break
            sigma_z = new
        law = ShareLaw("discrete_gaussian", sigma_z, int(threshold))
        return cls._checked(law, scale, d2, n_parties, threshold, value_bound, shape, bits)

    @classmethod
    def _checked(
        cls,
        law: ShareLaw,
        scale: float,
        integer_sensitivity: float,
        n_parties: int,
        threshold: int,
        value_bound: float,
        shape: tuple[int, ...],
        bits: int,
    ) -> DistributedPlan:
        """The plan releasing with ``law`` at grid ``scale``, refused (:meth:`check_modulus`)
        where its ring is too small."""
        sizes = float(integer_sensitivity), int(n_parties), int(threshold), float(value_bound)
        plan = cls(law.kind, Encoding(scale), law, *sizes, tuple(shape), bits)
        plan.check_modulus()
        return plan

    def sum_bound(self) -> int:
        """Public bound on the lifted sum: ``K (s B + 1)`` plus the noise's tail."""
        signal = self.n_parties * (self.encoding.scale * self.entry_bound + 1.0)
        return math.ceil(signal) + self.law.tail(self.n_parties, self.coordinates)

    def check_modulus(self) -> None:
        """Refuse a ring too small for :meth:`sum_bound` (a wrap would go unnoticed)."""
        need = self.sum_bound()
        if need >= 2 ** (self.bits - 1):
            raise ValueError(
                f"A modulus of 2^{self.bits} is too small for this release: {self.n_parties} "
                f"parties with entries up to {self.value_bound:g} at scale {self.encoding.scale:g}"
                f" plus the noise tail need sums up to {need} (2^{math.log2(need):.1f}). Use a "
                "larger modulus (more bits), fewer parties or smaller clip bounds."
            )

    def share(self, value: Any, noise: NoiseSource, ring: SecureSum) -> np.ndarray:
        """One party's upload: ``encode(value) + share`` as residues of the ring.

        Refuses a value beyond the public ``value_bound`` (checked before anything is drawn):
        an entry beyond it could wrap the sum.
        """
        x = np.asarray(value, dtype=np.float64).reshape(self.shape)
        if x.size and (not np.isfinite(x).all() or float(np.abs(x).max()) > self.entry_bound):
            raise ValueError(
                f"A party's value has an entry of {float(np.abs(x).max()):g}, beyond the public "
                f"bound {self.value_bound:g} the secure sum was sized for."
            )
        encoded = self.encoding.encode(x, noise)
        return ring.to_ring(encoded + self.law.sample(noise, self.shape))

    def release(self, view: AggregatorView) -> np.ndarray:
        """Decode the aggregator's view: lift, refuse a wrapped sum, divide by the scale."""
        lifted = view.lift()
        bound = self.sum_bound()
        if lifted.size and int(np.abs(lifted).max()) > bound:
            raise WrappedSumError(
                f"The secure sum lies outside the range +-{bound} its modulus 2^{view.bits} was "
                "sized for (a wrap-around or a malformed share); it is not released."
            )
        return self.encoding.decode(lifted)

    def variance(self) -> float:
        """Per-coordinate noise variance of the released (decoded) sum over ``t`` shares."""
        return self.law.variance(self.threshold) / self.encoding.scale**2

    def describe(self) -> str:
        """The mechanism line of a report."""
        s = self.encoding.scale
        if self.mechanism == "discrete_laplace":
            return (
                f"distributed discrete Laplace: NB(1/t) - NB(1/t) shares, t={self.threshold} of "
                f"K={self.n_parties}, a={self.law.parameter:.9g}, integer L1 sensitivity "
                f"{self.integer_sensitivity:g} at scale 2^{math.log2(s):g} (rounding included), "
                f"secure sum modulo 2^{self.bits}"
            )
        return (
            f"distributed discrete Gaussian: N_Z(0, {self.law.share_sigma:.6g}^2) shares, "
            f"t={self.threshold} of K={self.n_parties}, integer L2 sensitivity "
            f"{self.integer_sensitivity:.6g} at scale 2^{math.log2(s):g} (rounding included), "
            f"Kairouz et al. 2021 Prop. 14, secure sum modulo 2^{self.bits}"
        )


#: How the shares of a distributed release reached the aggregator (:func:`threat_model`).
TRANSPORTS: tuple[str, ...] = ("in-process", "secagg+")


def collusion_tolerated(threshold: int, survivors: int, transport: str) -> int:
    """How many colluding parties the full guarantee of one secure sum tolerates.

    With ``S`` survivors of whom ``c`` collude with the aggregator (and subtract their own
    shares), ``S - c`` honest shares remain, which carry the claimed noise when ``S - c >= t``:
    ``c <= S - t``. Over SecAgg+ (reconstruction threshold ``t``) the aggregator together with
    ``t - 1`` colluding clients can also unmask a single honest upload (one share, ``1 / t`` of
    the noise variance), so there ``c <= t - 2`` as well. In process there are no masks to
    unmask, only the first bound.
    """
    if transport not in TRANSPORTS:
        raise ValueError(
            f"The 'transport' of collusion_tolerated must be one of {', '.join(TRANSPORTS)}. "
            f"Got {transport!r} instead."
        )
    honest = int(survivors) - int(threshold)
    if transport == "secagg+":
        honest = min(honest, int(threshold) - 2)
    return max(honest, 0)


def threat_model(
    aggregation: str,
    n_parties: int,
    threshold: int | None,
    survivors: int | None = None,
    *,
    transport: str = "in-process",
    fallback: str | None = None,
) -> tuple[str, ...]:
    """The report's sentences on who is trusted with what (see :func:`check_aggregation`).

    Parameters
    ----------
    aggregation : {"local", "trusted", "distributed"}
    n_parties : int
        ``K``.
    threshold : int or None
        ``t`` (distributed only).
    survivors : int or None
        The fewest parties that uploaded to any one secure sum of the fit (``None``: ``K``);
        the collusion tolerated is computed from them (:func:`collusion_tolerated`).
    transport : {"in-process", "secagg+"}
        ``"in-process"``: every party ran in this one process, which held all their rows (a
        simulation of the protocol); ``"secagg+"``: each party in its own process behind
        Flower's SecAgg+.
    fallback : str or None
        What one upload unmasked alone gives away (e.g. ``"epsilon 3.1 at delta 1e-05"``).
    """
    k = int(n_parties)
    if aggregation == "local":
        return (
            "aggregation=local: each party adds the full noise of its own release; the "
            "aggregator and every other party see only noisy answers (no one is trusted)",
        )
    if aggregation == "trusted":
        return (
            "aggregation=trusted: the aggregator receives the parties' clipped, un-noised "
            "payloads (or their exact sum) and adds the noise: it is trusted with the exact "
            "statistics; the guarantee holds against whoever reads its output",
        )
    t = int(threshold) if threshold is not None else k
    s = k if survivors is None else int(survivors)
    c = collusion_tolerated(t, s, transport)
    if transport == "secagg+":
        where = (
            "transport: Flower's SecAgg+, each party in its own process; SecAgg+ protects the "
            "uploads against an honest-but-curious server (one that follows the protocol), its "
            f"reconstruction threshold is t={t}, and its masks come from NumPy's Mersenne "
            "Twister seeded with a 32-bit XOR fold of the shared key (flwrlabs/flower issue "
            "7522): at most 32 bits of entropy against a server that searches for them"
        )
        limit = f"min(S - t, t - 2) with S={s} survivors and t={t}: beyond t - 2 colluders the "
        limit += "server can unmask one client's upload"
    else:
        where = (
            "transport: simulated in one process, which held every party's rows; the "
            "aggregator's view is what a secure sum would hand it (aggregator_views_), not a "
            "deployment across parties"
        )
        limit = f"S - t with S={s} survivors and t={t}"
    lines = [
        "aggregation=distributed: each party adds an integer noise share; the aggregator sees "
        "only the secure sum modulo the ring (and who dropped), never a single upload",
        where,
        f"threshold t={t} of K={k}: the shares of any t honest survivors make up the noise; "
        f"fewer than t survivors release nothing",
        f"collusion tolerated per secure sum: up to {c} parties may reveal their shares to the "
        f"aggregator ({limit})",
    ]
    if fallback is not None:
        lines.append(
            f"one upload unmasked alone (a broken secure sum, or beyond the collusion "
            f"tolerated) carries 1/t of the noise variance: {fallback}"
        )
    lines.append("public: K, t, the fixed-point scale, the ring and the per-party value bounds")
    return tuple(lines)

"""Noise sources: where every random draw of a private release comes from.

Two sources implement one small interface (:class:`NoiseSource`):

* :class:`SecureNoise` draws released floats (Laplace, Gaussian, the exponential mechanism)
  through OpenDP's samplers. They sample exactly on the floating-point grid from
  cryptographically secure randomness, so a release is not open to the floating-point attacks of
  Mironov (2012) on naive ``value + numpy_noise`` implementations. The integer noise shares of
  distributed releases (discrete Gaussian, negative binomial) and randomized-rounding offsets are
  drawn by privcal's own vectorised samplers on a ChaCha20 stream keyed from the OS's CSPRNG:
  secure randomness, laws computed in floating point (:meth:`NoiseSource.discrete_gaussian`). It
  is the default of every data source and private estimator.
* :class:`SeededNoise` draws from a NumPy ``Generator``: vectorised, fast and reproducible. It is
  for simulation, experiments and statistical tests only. It is **not** safe against
  floating-point attacks and its randomness is not cryptographic; never use it to release data.

Mechanisms (:mod:`privcal.privacy.mechanisms`) never add noise themselves: they call
:meth:`NoiseSource.add_laplace`, :meth:`NoiseSource.add_gaussian` and
:meth:`NoiseSource.exponential_index`, so a secure source can add the noise to the value inside
OpenDP (the rounding of ``value + noise`` is then OpenDP's, not NumPy's).
"""

from __future__ import annotations

import math
import secrets
import threading
import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from privcal._params import FRACTION, POSITIVE, check_int
from privcal.exceptions import PrivcalWarning

__all__ = [
    "InsecureNoiseWarning",
    "NoiseSource",
    "SecureNoise",
    "SeededNoise",
    "check_noise",
    "noise_kind",
    "resolve_noise",
]

Size = int | tuple[int, ...] | None


def _check_size(size: Any, owner: str) -> tuple[int, ...] | None:
    if size is None:
        return None
    if isinstance(size, tuple):
        return tuple(check_int(s, "size", owner, low=0) for s in size)
    return (check_int(size, "size", owner, low=0),)


def _shown(value: Any) -> Any:
    """``value`` as an error message shows it: itself, or its shape when it is large."""
    return value if np.size(value) <= 10 else f"array of shape {np.shape(value)}"


def _check_log_weights(log_weights: Any, owner: str) -> np.ndarray:
    """A 1-D float array, no NaN, no +inf, at least one finite entry (-inf means weight 0)."""
    allowed = (
        "a non-empty 1-D array of floats without NaN or +inf and with at least one finite entry"
    )
    try:
        lw = np.asarray(log_weights, dtype=float)
    except (TypeError, ValueError):
        lw = None
    if (
        lw is None
        or lw.ndim != 1
        or lw.size == 0
        or np.isnan(lw).any()
        or np.isposinf(lw).any()
        or not np.isfinite(lw).any()
    ):
        raise ValueError(
            f"The 'log_weights' parameter of {owner} must be {allowed}. "
            f"Got {_shown(log_weights)!r} instead."
        )
    return lw


def _check_value(value: Any, owner: str) -> float | np.ndarray:
    """A finite float or a finite float array (the quantity a mechanism releases)."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        arr = None
    if arr is None or not np.isfinite(arr).all():
        raise ValueError(
            f"The 'value' parameter of {owner} must be a finite float or an array of finite "
            f"floats. Got {_shown(value)!r} instead."
        )
    return float(arr) if arr.ndim == 0 else arr


class NoiseSource(ABC):
    """Interface of a source of noise for private releases.

    Attributes
    ----------
    secure : bool
        Class attribute: ``True`` when draws are exact on the floating-point grid and use
        cryptographically secure randomness (safe for deployment).

    Notes
    -----
    ``size=None`` returns a Python ``float`` (or ``int``); an int or tuple returns an ndarray of
    that shape of independent draws.
    """

    secure: ClassVar[bool] = False

    @abstractmethod
    def laplace(self, scale: float, size: Size = None) -> float | np.ndarray:
        """Draw from Laplace(0, ``scale``): density ``exp(-|x|/scale) / (2 scale)``."""

    @abstractmethod
    def gaussian(self, sigma: float, size: Size = None) -> float | np.ndarray:
        """Draw from N(0, ``sigma``^2)."""

    @abstractmethod
    def exponential_index(self, log_weights: Any, size: Size = None) -> Any:
        """Draw index ``j`` with probability ``exp(log_weights[j]) / sum_k exp(log_weights[k])``.

        Works in log space (safe for 10^6 entries and for log-weights of any magnitude);
        ``-inf`` entries have probability 0. ``size=None`` returns one ``int``.
        """

    def uniform(self, size: Size = None) -> float | np.ndarray:
        """Draw from the uniform law on ``[0, 1)`` (randomized rounding of distributed shares)."""
        rng = self._share_rng("uniform")
        shape = _check_size(size, f"{type(self).__name__}.uniform")
        return float(rng.random()) if shape is None else rng.random(size=shape)

    def negative_binomial(self, r: float, p: float, size: Size = None) -> Any:
        """Draw ``NB(r, p)``: failures before ``r`` successes of probability ``p`` (real ``r``).

        ``P(k) = Gamma(k + r) / (Gamma(r) k!) p^r (1 - p)^k``; the shares of the distributed
        discrete Laplace (:mod:`privcal.privacy.distributed`). Returns int64.
        """
        owner = f"{type(self).__name__}.negative_binomial"
        rng = self._share_rng("negative_binomial")
        r = POSITIVE.check(r, "r", owner)
        p = FRACTION.check(p, "p", owner)
        return _negative_binomial(rng, r, p, _check_size(size, owner))

    def discrete_gaussian(self, sigma: float, size: Size = None) -> Any:
        """Draw from ``N_Z(0, sigma^2)``: ``P(k) ∝ exp(-k^2 / (2 sigma^2))`` on the integers, by
        privcal's vectorised form of Canonne, Kamath & Steinke's rejection sampler
        (:func:`_discrete_gaussian`), *not* OpenDP's exact sampler (~33 us a draw, too slow for
        every client's share of every round). The geometric proposals (inversion) and the
        acceptance test are computed in floating point, so the law is the discrete Gaussian up to
        floating-point rounding; the guarantees that use it are proved for the exact law and do
        not bound that gap."""
        owner = f"{type(self).__name__}.discrete_gaussian"
        rng = self._share_rng("discrete_gaussian")
        sigma = POSITIVE.check(sigma, "sigma", owner)
        shape = _check_size(size, owner)
        out = _discrete_gaussian(rng, sigma, 1 if shape is None else int(np.prod(shape)))
        return int(out[0]) if shape is None else out.reshape(shape)

    def _share_rng(self, what: str) -> np.random.Generator:
        """The generator the integer shares (:meth:`uniform`, :meth:`negative_binomial`,
        :meth:`discrete_gaussian`) are drawn from; a source that draws none raises."""
        raise TypeError(
            f"{type(self).__name__} does not draw {what}, which distributed noise shares need "
            "(aggregation='distributed'); use SecureNoise() or SeededNoise(seed)."
        )

    def add_laplace(self, value: Any, scale: float) -> float | np.ndarray:
        """Return ``value`` plus independent Laplace(0, ``scale``) noise in each coordinate."""
        v = _check_value(value, f"{type(self).__name__}.add_laplace")
        if isinstance(v, float):
            return v + float(self.laplace(scale))
        return v + self.laplace(scale, size=v.shape)

    def add_gaussian(self, value: Any, sigma: float) -> float | np.ndarray:
        """Return ``value`` plus independent N(0, ``sigma``^2) noise in each coordinate."""
        v = _check_value(value, f"{type(self).__name__}.add_gaussian")
        if isinstance(v, float):
            return v + float(self.gaussian(sigma))
        return v + self.gaussian(sigma, size=v.shape)


class SeededNoise(NoiseSource):
    """NumPy noise for simulation and experiments (vectorised, reproducible, **not secure**).

    Parameters
    ----------
    seed : int, numpy.random.Generator or None, default=0
        Passed to :func:`numpy.random.default_rng`; a ``Generator`` is used as is.

    Notes
    -----
    Laplace and Gaussian draws come from ``Generator.laplace`` / ``Generator.normal``;
    :meth:`exponential_index` uses the Gumbel-max trick: ``argmax_j (log_weights[j] + G_j)`` with
    ``G_j`` i.i.d. standard Gumbel has law ``softmax(log_weights)``.

    This source is **not** safe against floating-point attacks (Mironov 2012): the low bits of
    ``value + noise`` computed in doubles can leak the value, and the generator is a seeded PRNG.
    Use it to simulate and to test; a data source defaults to :class:`SecureNoise`.

    Examples
    --------
    >>> noise = SeededNoise(0)
    >>> noise.laplace(1.0, size=3).shape
    (3,)
    """

    def __init__(self, seed: int | np.random.Generator | None = 0) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def __repr__(self) -> str:
        return f"SeededNoise(seed={self.seed!r})"

    def laplace(self, scale: float, size: Size = None) -> float | np.ndarray:
        return self._centred(self.rng.laplace, scale, "scale", size, "SeededNoise.laplace")

    def gaussian(self, sigma: float, size: Size = None) -> float | np.ndarray:
        return self._centred(self.rng.normal, sigma, "sigma", size, "SeededNoise.gaussian")

    @staticmethod
    def _centred(draw: Any, scale: float, name: str, size: Size, owner: str) -> float | np.ndarray:
        """``draw(0, scale)``: a float for ``size=None``, else an array of that shape."""
        scale = POSITIVE.check(scale, name, owner)
        shape = _check_size(size, owner)
        if shape is None:
            return float(draw(0.0, scale))
        return draw(0.0, scale, size=shape)

    def _share_rng(self, what: str) -> np.random.Generator:
        return self.rng

    def exponential_index(self, log_weights: Any, size: Size = None) -> Any:
        lw = _check_log_weights(log_weights, "SeededNoise.exponential_index")
        shape = _check_size(size, "SeededNoise.exponential_index")
        lw = lw - lw.max()  # shift-invariant; keeps the sums away from overflow
        if shape is None:
            return int(np.argmax(lw + self.rng.gumbel(size=lw.shape)))
        n = int(np.prod(shape))
        out = np.empty(n, dtype=np.int64)
        # chunk so that the (chunk x m) Gumbel matrix stays below ~2^24 doubles
        chunk = max(1, (1 << 24) // lw.size)
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            g = self.rng.gumbel(size=(stop - start, lw.size))
            out[start:stop] = np.argmax(lw + g, axis=1)
        return out.reshape(shape)


class SecureNoise(NoiseSource):
    """Noise from secure randomness: OpenDP's samplers for released floats (exact on the float
    grid), privcal's samplers on a CSPRNG stream for integer shares.

    The default noise source of every data source and private estimator. Draws use OpenDP
    (``opendp.prelude``, feature ``"contrib"``) measurements built for the requested scale and
    cached:

    * Laplace: ``make_laplace`` on ``atom_domain(T=float, nan=False)`` with
      ``absolute_distance(T=float)`` (scalars) or ``vector_domain(...)`` with
      ``l1_distance(T=float)`` (arrays);
    * Gaussian: ``make_gaussian`` on the same domains (``l2_distance`` for arrays);
    * exponential index: ``make_noisy_max`` with ``zero_concentrated_divergence()``, which adds
      Gumbel noise (see :meth:`exponential_index` for the derivation).

    :meth:`add_laplace` and :meth:`add_gaussian` feed the value itself to OpenDP, so the released
    float is OpenDP's exact sample of ``value + noise``. :meth:`laplace` and :meth:`gaussian`
    release pure noise (OpenDP invoked on zeros); adding that noise to a value in NumPy gives up
    the floating-point guarantee, so mechanisms use the ``add_*`` methods.

    Notes
    -----
    Speed (one core): 65-110 us per scalar draw; 10^5 Laplace draws in 1.7-2.6 s, 10^5
    Gaussian draws in 4-6.3 s; one exponential index over 10^6 weights in 0.4-0.65 s.
    Prefer :class:`SeededNoise` for large simulations.

    References
    ----------
    OpenDP: https://docs.opendp.org ; I. Mironov, "On significance of the least significant bits
    for differential privacy", CCS 2012.
    """

    secure: ClassVar[bool] = True
    _CACHE_MAX: ClassVar[int] = 256
    #: OpenDP measurements by (kind, scale, vector), shared by every instance (they are
    #: immutable; building one costs milliseconds, and every DataSource holds its own instance).
    _cache: ClassVar[dict[tuple[str, float, bool], Any]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __repr__(self) -> str:
        return "SecureNoise()"

    def __getstate__(self) -> dict[str, Any]:
        """Nothing to keep: a copy or an unpickled one is a fresh ``SecureNoise()``.

        The class's cache holds OpenDP measurements (ctypes pointers) and a lock, neither of
        which can be copied; an instance holds neither. So ``copy.deepcopy``, ``pickle`` and
        scikit-learn's ``clone`` of an estimator with ``noise=SecureNoise()`` work.
        """
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A fresh ``SecureNoise()`` (see :meth:`__getstate__`)."""

    @staticmethod
    def _dp() -> Any:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        return dp

    def _measurement(self, kind: str, scale: float, vector: bool) -> Any:
        key = (kind, scale, vector)
        with self._lock:
            meas = self._cache.get(key)
        if meas is not None:
            return meas
        dp = self._dp()
        atom = dp.atom_domain(T=float, nan=False)
        if kind in ("laplace", "gaussian"):
            make = dp.m.make_laplace if kind == "laplace" else dp.m.make_gaussian
            if vector:
                distance = dp.l1_distance if kind == "laplace" else dp.l2_distance
                meas = make(dp.vector_domain(atom), distance(T=float), scale)
            else:
                meas = make(atom, dp.absolute_distance(T=float), scale)
        else:  # "noisy_max"
            meas = dp.m.make_noisy_max(
                dp.vector_domain(atom),
                dp.linf_distance(T=float),
                dp.zero_concentrated_divergence(),
                scale,
            )
        with self._lock:
            if len(self._cache) >= self._CACHE_MAX:
                self._cache.clear()
            self._cache[key] = meas
        return meas

    def _add(self, kind: str, value: float | np.ndarray, scale: float) -> float | np.ndarray:
        if isinstance(value, float):
            return float(self._measurement(kind, scale, False)(value))
        if value.size == 0:
            return value.copy()
        out = self._measurement(kind, scale, True)(value.ravel().tolist())
        return np.asarray(out, dtype=float).reshape(value.shape)

    def _draw(self, kind: str, scale: float, size: Size, owner: str) -> float | np.ndarray:
        shape = _check_size(size, owner)
        return self._add(kind, 0.0 if shape is None else np.zeros(shape), scale)

    def laplace(self, scale: float, size: Size = None) -> float | np.ndarray:
        scale = POSITIVE.check(scale, "scale", "SecureNoise.laplace")
        return self._draw("laplace", scale, size, "SecureNoise.laplace")

    def gaussian(self, sigma: float, size: Size = None) -> float | np.ndarray:
        sigma = POSITIVE.check(sigma, "sigma", "SecureNoise.gaussian")
        return self._draw("gaussian", sigma, size, "SecureNoise.gaussian")

    def add_laplace(self, value: Any, scale: float) -> float | np.ndarray:
        scale = POSITIVE.check(scale, "scale", "SecureNoise.add_laplace")
        return self._add("laplace", _check_value(value, "SecureNoise.add_laplace"), scale)

    def add_gaussian(self, value: Any, sigma: float) -> float | np.ndarray:
        sigma = POSITIVE.check(sigma, "sigma", "SecureNoise.add_gaussian")
        return self._add("gaussian", _check_value(value, "SecureNoise.add_gaussian"), sigma)

    def _share_rng(self, what: str) -> np.random.Generator:
        """A NumPy generator on ChaCha20 (``randomgen``) keyed with 256 bits from ``secrets``.

        A fresh key on every call: the stream is a cryptographically secure pseudo-random
        sequence that no one can predict or replay, and no two calls (so no two threads,
        forked processes, restored snapshots or copies) share one. Each thread keeps one
        generator and re-keys it in place (15 us; building a new generator per call costs 43 us,
        most of a distributed-noise simulation's time). The laws drawn from
        it (uniform, negative binomial by NumPy's gamma-Poisson sampler, the discrete Gaussian
        by rejection) are computed in floating point: the integer shares drawn here follow the
        exact laws only up to that rounding, a gap the distributed guarantees (proved for the
        exact laws) do not bound (:mod:`privcal.privacy.distributed`, "Sampling"). Released
        floats go through OpenDP instead (Mironov 2012).
        """
        streams = self.__dict__.get("_share_streams")
        if streams is None:  # a copy or an unpickled instance starts without (__getstate__)
            streams = self.__dict__.setdefault("_share_streams", threading.local())
        key = secrets.randbits(256)
        rng = getattr(streams, "rng", None)
        if rng is None:
            from randomgen import ChaCha

            streams.rng = rng = np.random.Generator(ChaCha(key=key, rounds=20))
        else:
            rng.bit_generator.seed(key=key)
        return rng

    def exponential_index(self, log_weights: Any, size: Size = None) -> Any:
        """Draw ``j`` with probability proportional to ``exp(log_weights[j])`` via OpenDP.

        Derivation: ``make_noisy_max`` with output measure ``zero_concentrated_divergence()``
        returns ``argmax_j (s_j + G_j)`` with ``G_j`` i.i.d. Gumbel(0, ``scale``) (the exponential
        mechanism as report-noisy-max; with ``max_divergence()`` it would add exponential noise
        instead, which is permute-and-flip and has a different law). By the Gumbel-max trick
        ``P(j) = exp(s_j / scale) / sum_k exp(s_k / scale)``. With ``scale = 1`` and
        ``s = log_weights - max(log_weights)`` (a shift does not change the law) this is exactly
        ``softmax(log_weights)``. Entries equal to ``-inf`` (weight 0) are dropped before the
        call and the index is mapped back. The law is checked by a chi-square test in
        ``tests/privacy/test_noise_samplers.py``.
        """
        lw = _check_log_weights(log_weights, "SecureNoise.exponential_index")
        shape = _check_size(size, "SecureNoise.exponential_index")
        keep = np.flatnonzero(np.isfinite(lw))
        scores = (lw[keep] - lw[keep].max()).tolist()
        meas = self._measurement("noisy_max", 1.0, True)
        if shape is None:
            return int(keep[int(meas(scores))])
        n = int(np.prod(shape))
        out = np.fromiter((keep[int(meas(scores))] for _ in range(n)), dtype=np.int64, count=n)
        return out.reshape(shape)


def _negative_binomial(
    rng: np.random.Generator, r: float, p: float, shape: tuple[int, ...] | None
) -> Any:
    if p >= 1.0:
        return 0 if shape is None else np.zeros(shape, dtype=np.int64)
    if shape is None:
        return int(rng.negative_binomial(r, p))
    return rng.negative_binomial(r, p, size=shape).astype(np.int64)


def _discrete_gaussian(rng: np.random.Generator, sigma: float, n: int) -> np.ndarray:
    """``n`` draws of ``N_Z(0, sigma^2)`` by Canonne, Kamath & Steinke (2020)'s Algorithm 3.

    Propose ``Y ~ DLap(t)`` with ``t = floor(sigma) + 1`` (a difference of two geometric
    variables) and accept with probability ``exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2))``;
    vectorised over rounds of proposals. The acceptance test is in floating point.
    """
    t = math.floor(sigma) + 1
    q = 1.0 - math.exp(-1.0 / t)
    out = np.empty(0, dtype=np.int64)
    while out.size < n:
        m = 2 * (n - out.size) + 16
        y = rng.geometric(q, size=m) - rng.geometric(q, size=m)
        keep = rng.random(m) < np.exp(-((np.abs(y) - sigma**2 / t) ** 2) / (2.0 * sigma**2))
        out = np.concatenate([out, y[keep].astype(np.int64)])
    return out[:n]


class InsecureNoiseWarning(PrivcalWarning):
    """A private release draws its noise from a non-secure source (e.g. ``SeededNoise``).

    Fine for simulation and tests; never for releasing real data (floating-point attacks, seeded
    PRNG; see :class:`SeededNoise`). Every privacy report built on such noise says
    ``"not private: seeded noise"``.
    """


def noise_kind(noise: NoiseSource) -> str:
    """``"secure"`` for a secure source, ``"seeded"`` otherwise (what a report records)."""
    return "secure" if noise.secure else "seeded"


def check_noise(noise: Any, owner: str) -> NoiseSource:
    """``noise`` validated, with ``None`` read as :class:`SecureNoise` (no warning)."""
    if noise is None:
        return SecureNoise()
    if not isinstance(noise, NoiseSource):
        raise ValueError(
            f"The 'noise' parameter of {owner} must be a NoiseSource (SecureNoise() or "
            f"SeededNoise(seed)) or None. Got {noise!r} instead."
        )
    return noise


def resolve_noise(noise: Any, owner: str, *, stacklevel: int = 3) -> NoiseSource:
    """The noise source a private entry point uses: ``None`` -> :class:`SecureNoise`.

    Parameters
    ----------
    noise : NoiseSource or None
        The caller's ``noise=`` argument.
    owner : str
        The entry point, named in the error and the warning.
    stacklevel : int, default=3
        Passed to :func:`warnings.warn` so the warning points at the user's call.

    Raises
    ------
    ValueError
        ``noise`` is neither ``None`` nor a :class:`NoiseSource`.

    Warns
    -----
    InsecureNoiseWarning
        ``noise`` is not secure (seeded): the release is reproducible and not private.
    """
    noise = check_noise(noise, owner)
    if not noise.secure:
        warnings.warn(
            f"{owner} draws noise from {noise!r}: seeded noise is not private (reproducible from "
            "the seed, not safe against floating-point attacks). Use it to simulate only; leave "
            "noise=None for SecureNoise.",
            InsecureNoiseWarning,
            stacklevel=stacklevel,
        )
    return noise

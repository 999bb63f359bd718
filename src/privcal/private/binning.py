"""Private top-label histogram binning over private data sources (seed 000, App. C.2.3).

One query per source (K = 1): the noisy per-bin numbers of correct and incorrect predictions at
``T = 1`` (:meth:`~privcal.private.source.DataSource.bin_counts`, L1 sensitivity 1), summed over
sources. Seed 000 averages the sources' ``(correct, total)`` answers and divides; with ``d``
public, the ratio of averages equals the ratio of sums, so summing changes nothing.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from privcal._params import EPSILON, Constraints, Int, Options
from privcal.calibrators.base import register, store_params
from privcal.calibrators.binning import HistogramBinning, bin_frequencies
from privcal.privacy import NoiseSource
from privcal.private.fallback import FALLBACKS, NoiseDominatedWarning
from privcal.private.parallel import split_budget
from privcal.private.plan import SearchPlan
from privcal.private.source import DataSource
from privcal.private.temperature import _PrivateCalibrator, _Protocol

__all__ = ["READABLE_WIDTH", "PrivateHistogramBinning", "noisy_bin_values", "readable_bins"]

#: ``fallback="identity"`` keeps a bin's released accuracy only when its noise SD is at most
#: this fraction of the bin's width (:func:`readable_bins`).
READABLE_WIDTH = 0.5


def noisy_bin_values(correct: Any, incorrect: Any) -> np.ndarray:
    """Bin accuracies from noisy counts: ``c+ / (c+ + i+)`` with counts clipped at 0.

    NaN where both clipped counts are 0 (the bin is treated as empty: the prediction keeps the
    input confidence there, as :class:`~privcal.calibrators.HistogramBinning` does). Clipping is
    post-processing; it keeps every value in [0, 1].
    """
    c = np.maximum(np.asarray(correct, dtype=np.float64), 0.0)
    i = np.maximum(np.asarray(incorrect, dtype=np.float64), 0.0)
    return bin_frequencies(c, c + i)


def readable_bins(
    values: Any, correct: Any, incorrect: Any, variance: float, width: float
) -> np.ndarray:
    """The fallback rule of private binning: NaN (keep the input confidence) in every bin
    whose released accuracy's noise SD exceeds :data:`READABLE_WIDTH` of the bin's ``width``.

    The released accuracy is ``v = c / t`` with ``t = c + i`` (clipped noisy counts, each
    coordinate with noise variance ``variance``); to first order its noise SD is
    ``sqrt((1 - v)^2 + v^2) sqrt(variance) / t`` (``dv/dc = (1 - v) / t``, ``dv/di = -v / t``),
    evaluated at the released values. The uncalibrated model's own confidence is off by at most
    the width ``w`` (``w / 2`` on average over a bin filled evenly) for a bin whose accuracy
    lies inside it, so a bin whose value has a larger noise error can only help by chance: it
    is kept when its SD is at most ``w / 2``, and otherwise falls back to the input confidence,
    as an empty bin does. Post-processing (released values and the public noise scale only).
    Measured: every default at least as good as no calibration (``docs/private.md``).
    """
    v = np.asarray(values, dtype=np.float64)
    c = np.maximum(np.asarray(correct, dtype=np.float64), 0.0)
    t = c + np.maximum(np.asarray(incorrect, dtype=np.float64), 0.0)
    finite = np.nan_to_num(v)
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(((1.0 - finite) ** 2 + finite**2) * variance) / t
    return np.where(sd <= READABLE_WIDTH * width, v, np.nan)


@register
class PrivateHistogramBinning(_PrivateCalibrator):
    """Top-label histogram binning from noisy per-bin counts (pure epsilon-DP per source).

    Parameters
    ----------
    epsilon : float, default=1.0
        Budget each source spends (one query), ``> 0``.
    n_bins : int, default=15
        Equal-width, right-closed bins of the top-label confidence.
    noise : NoiseSource or None, default=None
        Noise of the source built by ``fit(logits, labels)``; ``None`` means ``SecureNoise()``.
    aggregation : {"local", "distributed"}, default="local"
        ``"distributed"``: the sources' counts are summed by a secure sum with discrete Laplace
        shares (noise of one release); see :class:`PrivateTemperatureScaling`.
    threshold : int or None, default=None
        ``t`` for ``"distributed"`` (``None``: all sources).
    ledger : PrivacyOdometer, str, Path or None, default=None
        A pipeline ledger charged with the fit on arrays (one pure ``epsilon``-DP step) before
        the release; see :class:`~privcal.private.PrivateTemperatureScaling`.
    fallback : {"identity", "none"}, default="identity"
        ``"identity"``: a bin whose released accuracy has a noise SD above half the bin's
        width keeps the model's own confidence (:func:`readable_bins`, post-processing), with
        a :class:`~privcal.private.NoiseDominatedWarning` saying how many bins did. ``"none"``:
        every bin with a positive noisy count uses its released accuracy (seed 000).

    Attributes
    ----------
    bin_values_ : ndarray of shape (n_bins,)
        Calibrated top-label probability per bin (NaN: no evidence, the input is kept).
    release_bin_values_ : ndarray of shape (n_bins,)
        The released bin accuracies before the fallback rule (what the privacy audit reads:
        the rule is post-processing of them). In memory, not saved.
    bins_fell_back_ : int
        Bins with a released accuracy that the fallback rule replaced by the input confidence
        (in memory, not saved).
    privacy_report_ : PrivacyReport
    n_classes_, n_sources_ : int

    Privacy
    -------
    Neighbouring relation: add/remove one example of one source. Each source answers
    ``(correct_m, incorrect_m)_{m=1..M}`` with Laplace noise of scale ``1/epsilon`` per cell: one
    example adds 1 to one cell, so L1 sensitivity 1 and ``epsilon``-DP per source; parallel
    composition across sources. Everything after is post-processing, the fallback rule
    included. Public: ``n_bins`` (edges), and on arrays with ``fallback="identity"`` the one
    bit ``n >= informative_rows()`` (as in :class:`PrivateTemperatureScaling`).

    Examples
    --------
    >>> import numpy as np, warnings
    >>> from privcal.privacy import SeededNoise
    >>> rng = np.random.default_rng(0)
    >>> z = 3.0 * rng.normal(size=(2000, 4)); y = np.argmax(z + 3 * rng.normal(size=z.shape), 1)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     cal = PrivateHistogramBinning(epsilon=1.0, noise=SeededNoise(0)).fit(z, y)
    >>> cal.privacy_report_.epsilon, cal.bin_values_.shape
    (1.0, (15,))
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("bin_values_", "n_sources_")
    _public_terms = ("n_bins (bin edges)",)
    _parameter_constraints = Constraints(
        epsilon=EPSILON, n_bins=Int(1), fallback=Options(*FALLBACKS)
    )

    def __init__(
        self,
        epsilon: float = 1.0,
        n_bins: int = 15,
        noise: NoiseSource | None = None,
        aggregation: str = "local",
        threshold: int | None = None,
        ledger: Any = None,
        fallback: str = "identity",
    ) -> None:
        store_params(self, locals())

    def informative_rows(self, n_classes: int) -> float:
        """The fewest rows at which one party's release could keep any bin under the fallback
        rule: ``2 / (epsilon w)`` for bins of width ``w = 1 / n_bins``.

        :func:`readable_bins` keeps a bin when ``sqrt((1 - v)^2 + v^2) sqrt(var) / t <= w / 2``;
        the factor is smallest (``1 / sqrt 2``) at ``v = 1/2`` and a bin holds at most all
        ``n`` rows, so some bin can be kept only when ``n >= sqrt(2 var) / w``, with the
        Laplace variance ``var = 2 (1 / epsilon)^2`` of one count (sensitivity 1). A function
        of public quantities only; ``n_classes`` is not used (the signature of the temperature
        fit's).
        """
        from privcal.private.queries import query_sensitivity

        var = 2.0 * (query_sensitivity("bin_counts") / float(self.epsilon)) ** 2
        return float(np.sqrt(2.0 * var) * int(self.n_bins))

    def _too_few(self, n: int, needed: int, epsilon_needed: float) -> str:
        return (
            f"{type(self).__name__}(epsilon={float(self.epsilon):g}, n_bins={int(self.n_bins)}) "
            f"can calibrate no bin on {n} rows: a bin's released accuracy has a noise SD above "
            f"half its width below {needed} rows at this epsilon (or epsilon >= "
            f"{epsilon_needed:.3g} for {n} rows). Nothing was released or charged. Use more "
            "rows, fewer bins or a larger epsilon, or fallback='none' to fit anyway (seed 000)."
        )

    def _fit_sources(
        self, sources: list[DataSource], labels: list[str], aggregation: str, threshold: int | None
    ) -> _Protocol:
        plan = SearchPlan("none", None, False, 0, tuple(split_budget(float(self.epsilon), 1)))
        proto = _Protocol(sources, labels, plan, aggregation, threshold)
        m = int(self.n_bins)
        counts = proto.ask("bin_counts", n_bins=m)
        values = noisy_bin_values(counts.correct, counts.incorrect)
        kept = values
        if self.fallback == "identity":
            var = proto.variances[-1]
            kept = readable_bins(values, counts.correct, counts.incorrect, var, 1.0 / m)
        self.release_bin_values_ = values
        self.bins_fell_back_ = int(np.sum(np.isfinite(values) & ~np.isfinite(kept)))
        if self.bins_fell_back_:
            left = int(np.isfinite(kept).sum())
            empty = m - left - self.bins_fell_back_
            warnings.warn(
                f"{self.bins_fell_back_} of {m} bins released an accuracy whose noise SD is "
                f"above half the bin's width; they keep the model's own confidence "
                f"(post-processing, no privacy cost)"
                + (f", as do the {empty} bins released empty" if empty else "")
                + f". {left} bins are calibrated"
                + ("; the calibrator is the uncalibrated model." if left == 0 else ".")
                + " Use more data or sources, or a larger epsilon; fallback='none' keeps them.",
                NoiseDominatedWarning,
                stacklevel=3,
            )
        self.bin_values_ = kept
        return proto

    def _query_epsilons(self) -> tuple[float, ...]:
        return (float(self.epsilon),)

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        hb = HistogramBinning(mode="top", n_bins=int(self.n_bins))
        hb.bin_values_ = np.asarray(self.bin_values_, dtype=np.float64)
        return hb._predict_proba(z)

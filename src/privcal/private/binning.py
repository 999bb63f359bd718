"""Private top-label histogram binning over private data sources (seed 000, App. C.2.3).

One query per source (K = 1): the noisy per-bin numbers of correct and incorrect predictions at
``T = 1`` (:meth:`~privcal.private.source.DataSource.bin_counts`, L1 sensitivity 1), summed over
sources. Seed 000 averages the sources' ``(correct, total)`` answers and divides; with ``d``
public, the ratio of averages equals the ratio of sums, so summing changes nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from privcal._params import check_int, check_real
from privcal.calibrators.base import register
from privcal.calibrators.binning import HistogramBinning, bin_frequencies
from privcal.privacy import NoiseSource
from privcal.private.source import DataSource, split_budget
from privcal.private.temperature import SearchPlan, _PrivateCalibrator, _Protocol

__all__ = ["PrivateHistogramBinning", "noisy_bin_values"]


def noisy_bin_values(correct: Any, incorrect: Any) -> np.ndarray:
    """Bin accuracies from noisy counts: ``c+ / (c+ + i+)`` with counts clipped at 0.

    NaN where both clipped counts are 0 (the bin is treated as empty: the prediction keeps the
    input confidence there, as :class:`~privcal.calibrators.HistogramBinning` does). Clipping is
    post-processing; it keeps every value in [0, 1].
    """
    c = np.maximum(np.asarray(correct, dtype=np.float64), 0.0)
    i = np.maximum(np.asarray(incorrect, dtype=np.float64), 0.0)
    return bin_frequencies(c, c + i)


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

    Attributes
    ----------
    bin_values_ : ndarray of shape (n_bins,)
        Calibrated top-label probability per bin (NaN: no evidence, the input is kept).
    privacy_report_ : PrivacyReport
    n_classes_, n_sources_ : int

    Privacy
    -------
    Neighbouring relation: add/remove one example of one source. Each source answers
    ``(correct_m, incorrect_m)_{m=1..M}`` with Laplace noise of scale ``1/epsilon`` per cell: one
    example adds 1 to one cell, so L1 sensitivity 1 and ``epsilon``-DP per source; parallel
    composition across sources. Everything after is post-processing. Public: ``n_bins`` (edges).

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

    def __init__(
        self,
        epsilon: float = 1.0,
        n_bins: int = 15,
        noise: NoiseSource | None = None,
        aggregation: str = "local",
        threshold: int | None = None,
        ledger: Any = None,
    ) -> None:
        self.epsilon = epsilon
        self.n_bins = n_bins
        self.noise = noise
        self.aggregation = aggregation
        self.threshold = threshold
        self.ledger = ledger

    def _validate_params(self) -> None:
        owner = type(self).__name__
        check_real(self.epsilon, "epsilon", owner, low=0.0, low_open=True)
        check_int(self.n_bins, "n_bins", owner, low=1)

    def _fit_sources(
        self, sources: list[DataSource], labels: list[str], aggregation: str, threshold: int | None
    ) -> _Protocol:
        plan = SearchPlan("none", None, False, 0, tuple(split_budget(float(self.epsilon), 1)))
        proto = _Protocol(sources, labels, plan, aggregation, threshold)
        counts = proto.ask("bin_counts", n_bins=int(self.n_bins))
        self.bin_values_ = noisy_bin_values(counts.correct, counts.incorrect)
        return proto

    def _query_epsilons(self) -> tuple[float, ...]:
        return (float(self.epsilon),)

    def _public_terms(self) -> tuple[str, ...]:
        return ("n_bins (bin edges)",)

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        hb = HistogramBinning(mode="top", n_bins=int(self.n_bins))
        hb.bin_values_ = np.asarray(self.bin_values_, dtype=np.float64)
        return hb._predict_proba(z)

"""The closed vocabulary of DP queries a :class:`~privcal.private.DataSource` answers.

Each query is two methods. The public ``<query>(..., epsilon)`` derives, in its docstring, the
L1 sensitivity under add/remove one example (the proof that its
:class:`~privcal.privacy.measurement.Measurement` in
:data:`~privcal.private.queries.QUERY_MEASUREMENTS` names) and releases through the source's one
answering path (``DataSource._answer``: the ledger charged, then the Laplace noise). The private
``_<query>(...)`` checks the public parameters and computes the exact statistic with the shared
function of :mod:`privcal.metrics.statistics` (or :mod:`privcal.metrics.conformity`), the one
the non-private twins call, as a :class:`~privcal.private.queries.Statistic`; the distributed
path (:meth:`DataSource.share <privcal.private.DataSource.share>`) releases the same statistic.
A new query goes here (DESIGN.md, "Where a new piece goes").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from privcal._params import POSITIVE, check_int, check_option
from privcal.metrics.conformity import conformity, grouped_score_histogram, score_histogram
from privcal.metrics.statistics import (
    accuracy_gap_sum,
    calibration_bins,
    clipped_nll_sum,
    softmax,
    top_confidence,
    top_correct,
)
from privcal.private.queries import (
    QUERY_MEASUREMENTS,
    BinCounts,
    Statistic,
    check_edges,
    check_grid,
    check_part,
    curve_from_release,
    curve_release,
    to_scalar,
)
from privcal.private.rows import split_rows

__all__ = ["Vocabulary"]


class Vocabulary:
    """The queries of :class:`~privcal.private.DataSource` (module docstring).

    The source holds what they read: its rows (``_z``, ``_y``), their digests (``_digests``),
    the public ``n_classes``, and the answering path ``_answer(query, epsilon, *args)``.
    """

    _z: np.ndarray
    _y: np.ndarray
    _digests: np.ndarray
    n_classes: int
    _answer: Callable[..., Any]

    def _temperature(self, temperature: Any, query: str) -> float:
        return POSITIVE.check(temperature, "temperature", f"DataSource.{query}")

    def _n_bins(self, n_bins: Any, query: str) -> int:
        return check_int(n_bins, "n_bins", f"DataSource.{query}", low=1)

    # ------------------------------------------------------------------ queries
    def accuracy_gap_sum(self, temperature: float, epsilon: float) -> float:
        """Noisy :math:`\\sum_i (1[\\text{correct}_i] - \\mathrm{conf}_T(i))` (Acc-T's statistic).

        Parameters
        ----------
        temperature : float
            ``T > 0`` (public).
        epsilon : float
            Budget of this answer, ``> 0``.

        Returns
        -------
        float

        Privacy
        -------
        Each term lies in ``[-1, 1]`` (``conf_T`` in ``[1/C, 1]``, correctness in {0, 1}), so
        adding or removing one example changes the sum by at most 1: sensitivity 1. Laplace
        scale ``1 / epsilon``; pure ``epsilon``-DP.
        """
        return self._answer("accuracy_gap_sum", epsilon, temperature)

    def _accuracy_gap_sum(self, temperature: Any) -> Statistic:
        t = self._temperature(temperature, "accuracy_gap_sum")
        value = float(accuracy_gap_sum(self._z, self._y, t))
        return _statistic(
            "accuracy_gap_sum", f"accuracy_gap_sum(T={t:.6g})", value, 1, 1.0, to_scalar
        )

    def accuracy_gap_curve(self, temperatures: Any, epsilon: float, anchor: int = 0) -> np.ndarray:
        """Noisy :meth:`accuracy_gap_sum` at every temperature of a public increasing grid.

        One release answers the whole curve :math:`G(T_1), \\dots, G(T_k)`, with
        :math:`G(T) = \\sum_i 1[c_i] - \\mathrm{conf}_T(i)` computed by the shared
        ``accuracy_gap_sum`` at each :math:`T_j`. The released vector is the value at the anchor
        and the increments, :math:`(G(T_a), G(T_2) - G(T_1), \\dots, G(T_k) - G(T_{k-1}))`, each
        coordinate with Laplace noise; the curve is rebuilt from it by cumulative sums outward
        from the anchor (post-processing). So the noise of :math:`\\tilde G(T_j)` is the sum of
        ``|j - a| + 1`` Laplace draws: smallest at the anchor.

        Parameters
        ----------
        temperatures : array_like of shape (k,)
            Strictly increasing positive temperatures (public), ``k >= 1``.
        epsilon : float
            Budget of this answer (the whole curve), ``> 0``.
        anchor : int, default=0
            Index of the grid point whose value is released directly (public).

        Returns
        -------
        ndarray of shape (k,)
            The noisy curve :math:`\\tilde G(T_j)`.

        Privacy
        -------
        One example contributes :math:`g(T) = 1[c] - \\mathrm{conf}_T`, and the top-label
        confidence :math:`\\mathrm{conf}_T = 1 / \\sum_c e^{(z_c - z_{\\max}) / T}` is
        non-increasing in ``T`` (every exponent is ``<= 0`` and grows toward 0 with ``T``), so
        :math:`g` is non-decreasing and its increments on an increasing grid are all ``>= 0``.
        They telescope: :math:`\\sum_j |g(T_{j+1}) - g(T_j)| = \\mathrm{conf}_{T_1} -
        \\mathrm{conf}_{T_k} \\le 1 - 1/C`, and :math:`|g(T_a)| \\le 1`. Adding or removing the
        example therefore moves the released vector by at most :math:`2 - 1/C \\le 2` in L1,
        whatever ``k``: sensitivity 2. Laplace scale ``2 / epsilon`` per coordinate; pure
        ``epsilon``-DP. (Releasing the ``k`` values themselves would have sensitivity ``k``.)
        """
        return self._answer("accuracy_gap_curve", epsilon, temperatures, anchor)

    def _accuracy_gap_curve(self, temperatures: Any, anchor: Any = 0) -> Statistic:
        owner = "DataSource.accuracy_gap_curve"
        temps = check_grid(temperatures, owner)
        a = check_int(anchor, "anchor", owner, low=0)
        if a >= temps.size:
            raise ValueError(
                f"The 'anchor' parameter of {owner} must be an index into the {temps.size} "
                f"temperatures (0..{temps.size - 1}). Got {anchor!r} instead."
            )
        curve = np.asarray(accuracy_gap_sum(self._z, self._y, temps), dtype=np.float64)
        label = (
            f"accuracy_gap_curve(T={temps[0]:.6g}..{temps[-1]:.6g}, k={temps.size}, "
            f"anchor={temps[a]:.6g})"
        )

        # one example moves every coordinate (the anchor and each increment) by at most 1
        def finish(r: Any) -> np.ndarray:
            return curve_from_release(np.asarray(r), a)

        released = curve_release(curve, a)
        return _statistic("accuracy_gap_curve", label, released, temps.size, 1.0, finish)

    def clipped_nll_sum(self, temperature: float, epsilon: float, bound: float = 10.0) -> float:
        """Noisy :math:`\\sum_i \\min(\\ell_T(i), B)`: the NLL, each term clipped to ``[0, B]``.

        Parameters
        ----------
        temperature : float
            ``T > 0``.
        epsilon : float
        bound : float, default=10.0
            Clip bound ``B > 0`` (seed 000 uses 10).

        Returns
        -------
        float

        Privacy
        -------
        Each clipped term lies in ``[0, B]``: one example changes the sum by at most ``B``,
        sensitivity B. Without the clip one example's NLL is unbounded (``-log p_y`` grows without
        limit as ``p_y -> 0``), so no finite noise would make the sum private. Laplace scale
        ``B / epsilon``; pure ``epsilon``-DP.
        """
        return self._answer("clipped_nll_sum", epsilon, temperature, bound)

    def _clipped_nll_sum(self, temperature: Any, bound: Any = 10.0) -> Statistic:
        t = self._temperature(temperature, "clipped_nll_sum")
        b = POSITIVE.check(bound, "bound", "DataSource.clipped_nll_sum")
        value = float(clipped_nll_sum(self._z, self._y, t, b))
        label = f"clipped_nll_sum(T={t:.6g}, B={b:g})"
        return _statistic("clipped_nll_sum", label, value, 1, b, to_scalar, {"bound": b})

    def clipped_nll_increments(
        self, temperatures: Any, epsilon: float, bound: float = 10.0
    ) -> np.ndarray:
        """Noisy increments of :meth:`clipped_nll_sum` along a public increasing grid.

        One release answers the shape of the whole NLL curve: with
        :math:`F(T) = \\sum_i \\min(\\ell_T(i), B)` computed by the shared ``clipped_nll_sum``
        at every :math:`T_j`, the released vector is
        :math:`(F(T_2) - F(T_1), \\dots, F(T_k) - F(T_{k-1}))` with Laplace noise on each
        coordinate. The level :math:`F(T_1)` is not released: the minimiser of a sum of curves
        does not depend on it, and leaving it out saves ``B`` of sensitivity.

        Parameters
        ----------
        temperatures : array_like of shape (k,)
            Strictly increasing positive temperatures (public), ``k >= 2``.
        epsilon : float
            Budget of this answer (the whole curve), ``> 0``.
        bound : float, default=10.0
            Clip bound ``B > 0`` (public).

        Returns
        -------
        ndarray of shape (k - 1,)

        Privacy
        -------
        Add/remove one example moves the released vector by that example's own increments,
        whose L1 norm is the total variation (TV) of :math:`f(T) = \\min(\\ell_T, B)` along
        the grid. Write :math:`d_c = z_c - \\max z \\le 0`, :math:`\\beta = 1 / T` and
        :math:`\\ell(\\beta) = \\log \\sum_c e^{\\beta d_c} - \\beta d_y`: a log-sum-exp of
        functions linear in :math:`\\beta` minus a linear one, so convex in :math:`\\beta`.

        * :math:`d_y = 0` (the label has the top logit): :math:`\\ell' = E_p[d] \\le 0`, so
          :math:`f` is monotone along the grid and, as :math:`0 \\le \\ell \\le \\log C`,
          :math:`\\mathrm{TV} \\le \\min(B, \\log C)`.
        * :math:`d_y < 0`: :math:`f = \\min(\\ell, B)` is quasi-convex in :math:`\\beta` (its
          sublevel sets are those of :math:`\\ell`, or the whole line), so along the grid it
          falls to its smallest value :math:`m` and then rises:
          :math:`\\mathrm{TV} = (f(T_1) - m) + (f(T_k) - m)`. The falling part is at most
          :math:`B - m \\le B`. For the rising part, every :math:`e^{\\beta d_c} \\le 1` and the
          top class contributes 1, so :math:`\\beta |d_y| \\le \\ell(\\beta) \\le \\beta |d_y| +
          \\log C`; with :math:`\\beta_k = 1 / T_k` the smallest grid value of :math:`\\beta`,
          :math:`m \\ge \\min(B, \\beta_k |d_y|)` and :math:`f(T_k) \\le \\min(B, \\beta_k |d_y|
          + \\log C)`, so :math:`f(T_k) - m \\le \\min(B, \\log C)`.

        Hence :math:`\\mathrm{TV} \\le B + \\min(B, \\log C)` for every example, whatever the
        grid and its size :math:`k`: sensitivity B + min(B, log C)
        (:func:`nll_curve_sensitivity`; releasing the ``k`` values instead would cost ``k B``).
        ``C`` is public. For a label below the top logit the bound
        has a slack of at least :math:`\\log 2` (:math:`p_y \\le 1/2`, so :math:`m \\ge \\log 2`),
        which covers floating-point rounding of the computed terms. Laplace scale
        ``(B + min(B, log C)) / epsilon`` per coordinate; pure ``epsilon``-DP.
        """
        return self._answer("clipped_nll_increments", epsilon, temperatures, bound)

    def _clipped_nll_increments(self, temperatures: Any, bound: Any = 10.0) -> Statistic:
        owner = "DataSource.clipped_nll_increments"
        temps = check_grid(temperatures, owner)
        if temps.size < 2:
            raise ValueError(
                f"The 'temperatures' parameter of {owner} must hold at least 2 temperatures "
                f"(the release is their {temps.size - 1} increments). Got {temperatures!r} "
                "instead."
            )
        b = POSITIVE.check(bound, "bound", owner)
        curve = np.asarray(clipped_nll_sum(self._z, self._y, temps, b), dtype=np.float64)
        label = (
            f"clipped_nll_increments(T={temps[0]:.6g}..{temps[-1]:.6g}, k={temps.size}, B={b:g})"
        )
        # one clipped term lies in [0, B], so each increment moves by at most B
        params = {"bound": b, "n_classes": self.n_classes}
        increments = np.diff(curve)
        return _statistic(
            "clipped_nll_increments", label, increments, temps.size - 1, b, np.asarray, params
        )

    def bin_gaps(self, temperature: float, epsilon: float, n_bins: int = 15) -> np.ndarray:
        """Noisy per-bin sums of ``1[correct] - conf_T`` over equal-width confidence bins.

        The vector ECE-T needs: ``sum_m |gaps_m| / n`` is the binned ECE at ``T``.

        Parameters
        ----------
        temperature : float
        epsilon : float
        n_bins : int, default=15
            Equal-width, right-closed bins on [0, 1] (public edges).

        Returns
        -------
        ndarray of shape (n_bins,)

        Privacy
        -------
        One example falls in exactly one bin and changes that bin's sum by its term, at most 1
        in absolute value; the other bins are unchanged: L1 sensitivity 1 whatever ``n_bins``.
        Independent Laplace noise of scale ``1 / epsilon`` per bin; pure ``epsilon``-DP.
        """
        return self._answer("bin_gaps", epsilon, temperature, n_bins)

    def _bin_gaps(self, temperature: Any, n_bins: Any = 15) -> Statistic:
        t = self._temperature(temperature, "bin_gaps")
        m = self._n_bins(n_bins, "bin_gaps")
        stats = calibration_bins(top_confidence(self._z, t), top_correct(self._z, self._y), m)
        label = f"bin_gaps(T={t:.6g}, M={m})"
        return _statistic("bin_gaps", label, stats.gaps(), 1, 1.0, np.asarray)

    def bin_counts(self, epsilon: float, n_bins: int = 15, temperature: float = 1.0) -> BinCounts:
        """Noisy per-bin numbers of correct and of incorrect predictions (histogram binning).

        Parameters
        ----------
        epsilon : float
        n_bins : int, default=15
        temperature : float, default=1.0
            Temperature of the confidences that are binned.

        Returns
        -------
        BinCounts
            ``correct``, ``incorrect`` and ``total = correct + incorrect``.

        Privacy
        -------
        The released vector is ``(correct_1..M, incorrect_1..M)``: one example adds 1 to exactly
        one of these ``2M`` cells: L1 sensitivity 1. Seed 000 (App. C.2.3)
        releases ``(correct, total)`` instead, with sensitivity 2 (one example moves a correct
        cell and a total cell); both carry the same information (``total = correct +
        incorrect``), but ours needs half the noise scale. Laplace scale ``1 / epsilon`` per
        cell; pure ``epsilon``-DP.
        """
        return self._answer("bin_counts", epsilon, n_bins, temperature)

    def _bin_counts(self, n_bins: Any = 15, temperature: Any = 1.0) -> Statistic:
        m = self._n_bins(n_bins, "bin_counts")
        t = self._temperature(temperature, "bin_counts")
        stats = calibration_bins(top_confidence(self._z, t), top_correct(self._z, self._y), m)
        value = np.concatenate([stats.sum_correct, stats.counts - stats.sum_correct])

        def finish(released: Any) -> BinCounts:
            out = np.asarray(released, dtype=np.float64)
            return BinCounts(out[:m], out[m:])

        return _statistic("bin_counts", f"bin_counts(T={t:.6g}, M={m})", value, 1, 1.0, finish)

    def count(self, epsilon: float) -> float:
        """Noisy number of examples ``n`` (private under add/remove).

        Privacy
        -------
        Adding or removing one example changes ``n`` by 1: sensitivity 1, Laplace scale
        ``1 / epsilon``; pure ``epsilon``-DP.
        """
        return self._answer("count", epsilon)

    def _count(self) -> Statistic:
        return _statistic("count", "count", float(self._z.shape[0]), 1, 1.0, to_scalar)

    def score_histogram(
        self, edges: Any, epsilon: float, score: str = "lac", part: Any = None, by: Any = None
    ) -> np.ndarray:
        """Noisy counts of the conformity scores ``S(x_i, y_i)`` in the public bins of ``edges``.

        The statistic is :func:`~privcal.metrics.conformity.score_histogram` of the scores
        ``score`` (``"lac"`` or ``"aps"``, on the softmax of the logits), the one the central
        conformal estimators count. ``part=(key, fraction, side)`` counts only the rows on one
        side of the split by the public random ``key`` (:func:`~privcal.private.rows.split_rows`:
        side 0 holds about ``fraction`` of them). ``by="predicted"``: one histogram per
        predicted class, ``edges`` a list of one grid per class, the counts concatenated
        (:func:`~privcal.metrics.conformity.grouped_score_histogram`).

        Privacy
        -------
        One example's score lies in exactly one bin, so adding or removing it moves one count
        by 1: L1 sensitivity 1. Laplace scale ``1 / epsilon`` per bin; pure ``epsilon``-DP. On one
        side of a split the same holds for that side's rows, and an example is on one side only
        (its side is a function of its own row and the key), so answers on the two sides of one
        key compose in parallel: the source's ledger is charged the larger side's total. By
        predicted class, an example lies in one class's one bin: sensitivity 1 still.
        """
        return self._answer("score_histogram", epsilon, edges, score, part, by)

    def _score_histogram(
        self, edges: Any, score: Any = "lac", part: Any = None, by: Any = None
    ) -> Statistic:
        owner = "DataSource.score_histogram"
        check_option(by, "by", owner, (None, "predicted"))
        grids = [check_edges(e, owner) for e in edges] if by else [check_edges(edges, owner)]
        if by and len(grids) != self.n_classes:
            raise ValueError(
                f"The 'edges' parameter of {owner} with by='predicted' must hold one grid per "
                f"class ({self.n_classes}). Got {len(grids)}."
            )
        check_option(score, "score", owner, ("lac", "aps"))
        rows = np.ones(self._y.size, dtype=bool)
        split = None
        if part is not None:
            split = check_part(part, owner)
            rows = split_rows(self._digests, split.key, split.fraction) == (split.side == 0)
        z, y = self._z[rows], self._y[rows]
        s = conformity(score, softmax(z))[np.arange(y.size), y]
        where = ("" if split is None else f", side {split.side}") + (", by predicted" if by else "")
        label = f"score_histogram({score}, m={sum(e.size - 1 for e in grids)}{where})"
        value = (
            grouped_score_histogram(s, z.argmax(1), grids) if by else score_histogram(s, grids[0])
        )
        measurement = QUERY_MEASUREMENTS["score_histogram"]
        return Statistic(label, value, measurement, 1, 1.0, np.asarray, part=split)


def _statistic(
    query: str,
    label: str,
    value: Any,
    moved: int,
    row_bound: float,
    finish: Any,
    params: Any = None,
) -> Statistic:
    """A :class:`Statistic` of ``query`` with its measurement, read now from this module's
    ``QUERY_MEASUREMENTS`` (what a source's release goes through)."""
    m = QUERY_MEASUREMENTS[query]
    return Statistic(label, value, m, moved, row_bound, finish, {} if params is None else params)

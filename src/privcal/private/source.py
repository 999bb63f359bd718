"""A private data source: one party's validation data behind a closed vocabulary of DP queries.

A :class:`DataSource` holds one party's logits and labels and a
:class:`~privcal.privacy.PrivacyOdometer`. A calibrator (seed 000, Sec. 3.2) never sees the rows:
it sends queries of the vocabulary (:data:`privcal.private.queries.QUERY_MEASUREMENTS`: one
:class:`~privcal.privacy.measurement.Measurement` per query, its statistic a shared function of
:mod:`privcal.metrics.statistics`, its L1 sensitivity derived in the query method's docstring;
the table of ``docs/private.md`` is generated from them).

Neighbouring relation: add or remove one example. ``n`` is then private, so the source publishes
only ``n_classes`` and its name; the calibrators compare sums and need no ``n``
(:mod:`privcal.private.temperature`), and :meth:`DataSource.count` sells a noisy one.

Every answer follows one path: the query's private method (``_accuracy_gap_sum`` ...) validates
the arguments and computes the exact statistic, then :meth:`DataSource._release` **spends on the
odometer** (durable with a ledger) and only then draws the Laplace noise. A query that would
exceed the budget raises :class:`~privcal.privacy.BudgetExceededError` and spends nothing.
:meth:`DataSource.share` answers the same statistic as an upload to a secure sum with a
distributed noise share (``aggregation="distributed"``; :mod:`privcal.privacy.distributed`).

Disjointness is checked, not assumed: parallel composition across sources needs each example in
one source only, so every source keeps a digest of each row and a fingerprint of its data
(:mod:`privcal.private.rows`, refused together by :func:`~privcal.private.parallel.check_sources`),
and a ledger binds the fingerprint it was first opened with (one ledger, one data set).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from privcal._params import EPSILON, POSITIVE, check_int, check_option, warn_renamed
from privcal.data.validation import check_labels, check_scores
from privcal.metrics.conformity import conformity, grouped_score_histogram, score_histogram
from privcal.metrics.statistics import (
    accuracy_gap_sum,
    calibration_bins,
    clipped_nll_sum,
    softmax,
    top_confidence,
    top_correct,
)
from privcal.privacy import (
    NoiseSource,
    PrivacyOdometer,
    PrivacyReport,
    Release,
    noise_kind,
    resolve_noise,
    store,
)
from privcal.privacy.distributed import AggregatorView, DistributedPlan, SecureSum
from privcal.private.queries import (
    MAX_ROWS,
    QUERY_MEASUREMENTS,
    BinCounts,
    RowPart,
    Share,
    Statistic,
    check_edges,
    check_grid,
    check_part,
    curve_from_release,
    curve_release,
    distributed_laplace,
    query_measurement,
    share_plan,
    to_scalar,
)
from privcal.private.rows import data_fingerprint, row_digests, split_rows

__all__ = ["DataSource"]

#: What a source's answers treat as public (n, the number of rows, is private).
SOURCE_PUBLIC: tuple[str, ...] = (
    "n_classes (number of classes)",
    "the source's name",
    "query parameters (temperatures, bins, clip bounds)",
)


class DataSource:
    """One party's private logits and labels, answering only DP queries from a closed vocabulary.

    Parameters
    ----------
    logits : array_like of shape (n, C)
        Validation logits (or probabilities with ``input="probs"``). Private.
    labels : array_like of shape (n,)
        Labels in ``0..C-1``. Private.
    budget : float, default=1.0
        Epsilon budget of this source (``> 0``), kept by a :class:`PrivacyOdometer`.
    ledger : str, Path or None, default=None
        SQLite ledger of the odometer (spends survive restarts and concurrent processes).
    noise : NoiseSource or None, default=None
        ``None`` means :class:`~privcal.privacy.SecureNoise` (OpenDP samplers). A non-secure source
        (``SeededNoise``) raises an :class:`~privcal.privacy.InsecureNoiseWarning`: use it only to
        simulate.
    name : str, default=""
        Public label; recorded as the ``source`` of every release.
    input : {"logits", "probs"}, default="logits"
    delta_budget : float, default=0.0
        The delta budget of the odometer (its queries are pure epsilon-DP and spend none; a
        ledger shared with approximate-DP spends, such as a federated client's, holds one).

    Attributes
    ----------
    n_classes : int
        Public: the number of classes.
    name : str
        Public.
    odometer : PrivacyOdometer
    noise : NoiseSource
    fingerprint : str
        Order-free SHA-256 of the rows (:func:`~privcal.private.data_fingerprint`); kept in the
        ledger, never released. Sources with equal fingerprints or shared rows are refused together.

    Privacy
    -------
    Neighbouring relation: add/remove one example of this source. Each query is the Laplace
    mechanism with scale ``sensitivity / epsilon`` (pure ``epsilon``-DP, Dwork & Roth Thm. 3.6);
    the sensitivities are derived in each method's docstring. Answers compose by basic
    composition within the source (the odometer refuses to exceed ``budget``); different sources
    hold disjoint data and compose in parallel. Public: ``n_classes``, ``name``, the query
    parameters (temperatures, bin edges, clip bounds) chosen by the calibrator. Private: the rows
    and their number ``n``.

    Examples
    --------
    >>> import numpy as np, warnings
    >>> from privcal.privacy import SeededNoise
    >>> z = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]]); y = np.array([0, 0, 0])
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     src = DataSource(z, y, budget=1.0, noise=SeededNoise(0), name="h1")
    >>> v = src.accuracy_gap_sum(1.0, epsilon=0.5)
    >>> src.spent, src.remaining
    (0.5, 0.5)
    """

    #: Whether the source can upload a fixed-point answer plus a noise share to an in-process
    #: secure sum (:meth:`share`); sources answered over a transport add their own noise.
    uploads_shares: ClassVar[bool] = True
    #: How this source's shares reach a secure sum (the report's transport line):
    #: ``"in-process"`` (a simulation in one process) or ``"secagg+"`` (a Flower node).
    transport: ClassVar[str] = "in-process"
    #: The public bound on this source's rows that sizes its secure sums.
    max_rows: int = MAX_ROWS

    def __init__(
        self,
        logits: Any,
        labels: Any,
        budget: float = 1.0,
        ledger: str | Path | None = None,
        noise: NoiseSource | None = None,
        name: str = "",
        *,
        input: str = "logits",
        delta_budget: float = 0.0,
    ) -> None:
        owner = "DataSource"
        z = check_scores(logits, input=input)  # type: ignore[arg-type]
        y = check_labels(labels, z.shape[0], z.shape[1])
        if not isinstance(name, str):
            raise ValueError(
                f"The 'name' parameter of {owner} must be a str. Got {name!r} instead."
            )
        noise = resolve_noise(noise, f"DataSource {name!r}")
        self._z = z
        self._y = y
        self._z.setflags(write=False)
        self._y.setflags(write=False)
        self.n_classes = int(z.shape[1])
        self.name = name
        self.noise = noise
        self._digests = row_digests(z, y)
        self.fingerprint = data_fingerprint(self._digests, self.n_classes)
        self.odometer = PrivacyOdometer(budget, ledger=ledger, delta_budget=delta_budget, name=name)
        if self.odometer.ledger is not None:
            _bind_data(self.odometer.ledger, self.fingerprint, self.n_classes)
        self.history: list[Release] = []
        self._split_spent: dict[tuple[int, float], dict[int, float]] = {}
        self._charge_lock = threading.Lock()

    def privacy_report(self) -> PrivacyReport:
        """Every answer this object released (add/remove one example; public:
        :data:`SOURCE_PUBLIC`; ``noise``: secure or seeded).

        The two sides of one row split keep their labels (disjoint rows: parallel composition)
        only while they are all the source released; sides of several splits, or a side and
        the whole data, share rows, so then every answer is labelled with the source's name
        (basic composition: an upper bound on what the ledger charged)."""
        noise = noise_kind(self.noise)
        releases = self.history
        splits = sum(1 for sides in self._split_spent.values() if sides)
        if splits > 1 or (splits and any(r.source == self.name for r in releases)):
            releases = [r.for_source(self.name) for r in releases]
        return PrivacyReport(releases, "example", "add/remove", public=SOURCE_PUBLIC, noise=noise)

    # ------------------------------------------------------------------ public metadata
    @property
    def budget(self) -> float:
        return self.odometer.budget

    @property
    def spent(self) -> float:
        """Epsilon spent so far (all processes sharing the ledger)."""
        return self.odometer.spent

    @property
    def remaining(self) -> float:
        return self.odometer.remaining

    def can_spend(self, epsilon: float) -> bool:
        """Whether the ledger can pay ``epsilon`` now (public metadata; spends nothing)."""
        return bool(self.odometer.can_spend(epsilon))

    def __repr__(self) -> str:
        return (
            f"DataSource(name={self.name!r}, n_classes={self.n_classes}, "
            f"budget={self.budget:g}, spent={self.spent:g}, noise={self.noise!r})"
        )

    # ------------------------------------------------------------------ the one answering path
    def _charge(self, release: Release, part: RowPart | None = None) -> None:
        """Spend ``release`` on the odometer (durable with a ledger), then keep it.

        A release on one side of a row split (``part``) is charged only what it adds to the
        largest side's total of that split (parallel composition: the sides' rows are disjoint).
        A side's total grows only once the ledger has taken the charge: a refused release adds
        nothing, so it cannot pay for the other side's later ones.
        """
        spent, total = release.epsilon, 0.0
        sides: dict[int, float] = {}
        with self._charge_lock:
            if part is not None:
                # a split is its key and its fraction: the two sides of one (key, fraction) are
                # disjoint, sides of different fractions overlap and compose by basic composition
                sides = self._split_spent.setdefault((part.key, part.fraction), {})
                before = max(sides.values(), default=0.0)
                total = sides.get(part.side, 0.0) + release.epsilon
                spent = max(before, total) - before
            if spent > 0:
                self.odometer.spend_release(
                    replace(release, epsilon=spent), noise=noise_kind(self.noise)
                )
            if part is not None:
                sides[part.side] = total
            self.history.append(release)

    def _answer(self, query: str, epsilon: Any, *args: Any) -> Any:
        """``epsilon`` checked, then the exact statistic of ``_<query>(*args)`` released."""
        eps = EPSILON.check(epsilon, "epsilon", f"DataSource.{query}")
        return self._release(getattr(self, f"_{query}")(*args), eps)

    def _release(self, stat: Statistic, epsilon: float) -> Any:
        """The query's measurement: charged (recorded before anything leaves), then
        ``value + Lap``."""
        noisy, _ = stat.measurement.release(
            stat.value,
            epsilon,
            self.noise,
            query=stat.label,
            source=self.name if stat.part is None else stat.part.label(self.name),
            charge=lambda release: self._charge(release, stat.part),
            **stat.params,
        )
        return stat.finish(noisy)

    def share(
        self,
        query: str,
        epsilon: float,
        *,
        n_parties: int,
        threshold: int,
        ring: SecureSum | None = None,
        max_rows: int = MAX_ROWS,
        **params: Any,
    ) -> Share:
        """This source's upload to a secure sum of ``query`` with distributed noise.

        The same exact statistic as the query method ``query`` (the same shared function), then
        the distributed mechanism of :mod:`privcal.privacy.distributed` instead of the Laplace
        one: the vector is encoded in fixed point and a discrete Laplace share sized for
        ``threshold`` parties is added, so the sum of any ``t`` honest sources' uploads carries
        exactly the discrete Laplace noise of one ``epsilon``-DP release.

        Parameters
        ----------
        query : str
            A name of the vocabulary (:data:`~privcal.private.QUERIES`).
        epsilon : float
            Budget of this answer (charged here, before anything is drawn).
        n_parties, threshold : int
            ``K`` sources answer; the shares are sized for ``t`` (public).
        ring : SecureSum, optional
            The secure sum the upload is for (its modulus); default 2^64.
        max_rows : int, default=MAX_ROWS
            The public bound on any source's rows that sizes the secure sum (a smaller ring,
            such as SecAgg+'s 2^31, needs a smaller bound).
        **params
            The query's own parameters (temperatures, bins, clip bound ...).

        Returns
        -------
        Share
            The upload (residues of the ring) and the public plan to decode the sum.

        Privacy
        -------
        Add/remove one example of this source moves the exact vector by at most the query's L1
        sensitivity ``Delta`` over at most ``m`` coordinates (the query's docstring), so the
        encoded vector moves by at most ``D = ceil(s Delta) + m`` whatever the rounding offsets
        (:mod:`privcal.privacy.distributed`). The sum the aggregator sees holds, besides the
        other sources' encoded vectors (independent of this source's data), at least ``t`` shares
        that sum to ``DLap(exp(-epsilon / D))``: pure ``epsilon``-DP for this source's examples
        against the aggregator, provided ``t`` sources are honest. Public besides the query's
        parameters: ``K``, ``t``, the scale and :data:`~privcal.private.queries.MAX_ROWS` (a source
        holds at most that many rows; it bounds the sum for the modulus).
        """
        query_measurement(query)  # a name of the vocabulary
        eps = EPSILON.check(epsilon, "epsilon", f"DataSource.{query}")
        if self._z.shape[0] > max_rows:
            raise ValueError(
                f"DataSource {self.name!r} holds more than {max_rows} rows, the public bound its "
                "secure sums are sized for; split it into several sources."
            )
        stat = getattr(self, f"_{query}")(**params)
        ring = SecureSum() if ring is None else ring
        plan = share_plan(stat, eps, n_parties, threshold, ring.bits, max_rows)
        label = self.name if stat.part is None else stat.part.label(self.name)
        self._charge(stat.record(eps, label, distributed_laplace(threshold, n_parties)), stat.part)
        return Share(plan.share(stat.value, self.noise, ring), plan, stat.finish, stat.label)

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

    # ------------------------------------------------------------------ ledger-backed sources
    @classmethod
    def init_ledger(
        cls,
        data: str | Path,
        ledger: str | Path,
        budget: float = 1.0,
        name: str = "",
        *,
        input: str = "auto",
        allow_seeded_noise: bool = False,
    ) -> DataSource:
        """Create the ledger of a source over the scores file ``data`` (``privcal source init``).

        The ledger (a SQLite file) gets the odometer's tables and a ``source`` row with the
        absolute data path, its SHA-256, ``n_classes``, the input kind and whether :meth:`open`
        takes seeded noise (``allow_seeded_noise``, the owner's choice, fixed at creation). The
        data stay where they are, with the source. Returns the opened source (``SecureNoise``).
        """
        from privcal.private.ledgers import init_source_ledger

        return init_source_ledger(cls, data, ledger, budget, name, input, allow_seeded_noise)

    @classmethod
    def open(
        cls, ledger: str | Path, noise: NoiseSource | None = None, name: str | None = None
    ) -> DataSource:
        """Reopen a source created by :meth:`init_ledger` (``privcal source init``).

        Reads the budget and the data path from the ledger, checks the data's SHA-256 (a ledger's
        record is only meaningful for the data it was spent on) and continues the record. Seeded
        ``noise`` is refused unless the ledger was created with ``allow_seeded_noise``.
        """
        from privcal.private.ledgers import open_source_ledger

        return open_source_ledger(cls, ledger, noise, name)

    @classmethod
    def from_ledger(cls, *args: Any, **kwargs: Any) -> DataSource:
        """The old name of :meth:`open`, for one release (a ``DeprecationWarning``)."""
        warn_renamed("method", "from_ledger", "open", "DataSource", 2)
        return cls.open(*args, **kwargs)

    @classmethod
    def answer_together(
        cls, sources: Sequence[DataSource], method: str, **kwargs: Any
    ) -> list[Any]:
        """Every source's answer to one query of the vocabulary, in order.

        In process the sources answer one after the other; a transport where the round trip
        costs (:class:`~privcal.federated.flower.sources.RemoteSource`) sends one query to all
        of its sources at once. Each source charges its own ledger exactly as a single call
        does.
        """
        return [getattr(src, method)(**kwargs) for src in sources]

    @classmethod
    def share_together(
        cls,
        sources: Sequence[DataSource],
        method: str,
        epsilon: float,
        threshold: int,
        **kwargs: Any,
    ) -> tuple[AggregatorView, DistributedPlan, Callable[[Any], Any]]:
        """Every source's share of one query summed by an in-process :class:`SecureSum`
        (a simulation of the protocol: this process holds every source's rows).

        Returns the aggregator's view (the modular sum and who dropped), the public plan that
        decodes it and the query's post-processing. Transports override it
        (:class:`~privcal.federated.flower.sources.SecAggSource`: one SecAgg+ round).
        """
        ring = SecureSum()
        k = len(sources)
        shares = [
            src.share(method, epsilon, n_parties=k, threshold=threshold, ring=ring, **kwargs)
            for src in sources
        ]
        plan = shares[0].plan
        if any(sh.plan != plan for sh in shares[1:]):
            raise ValueError(
                f"The sources answered {method} with different public plans (scale, share law "
                "or shape); a secure sum needs one plan for all of them."
            )
        view = ring.aggregate([sh.upload for sh in shares], threshold, plan.shape)
        return view, plan, shares[0].finish


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


def _bind_data(ledger: Path, fingerprint: str, n_classes: int) -> None:
    """Record ``fingerprint`` in the ledger, or refuse when the ledger holds another data set."""
    values = {"fingerprint": fingerprint, "n_classes": int(n_classes), "created": time.time()}
    row = store.claim_row(ledger, "data", values, ("fingerprint",))
    if row is not None and row[0] != fingerprint:
        raise ValueError(
            f"The 'ledger' {str(ledger)!r} keeps the budget of another data set "
            f"(fingerprint {row[0][:12]}..., these rows give {fingerprint[:12]}...). "
            "A ledger belongs to one data set: give this data a ledger of its own."
        )

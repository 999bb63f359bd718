"""Private temperature scaling over private data sources (seed 000, Sec. 3-4, Alg. 1).

A one-dimensional search over the temperature; every evaluation of the objective is one query to
**every** source (:class:`~privcal.private.source.DataSource`, the statistic computed by the
shared function in :mod:`privcal.metrics.statistics`), answered with the Laplace mechanism, and
the answers are **summed** over sources (seed 000 averages; with the number of sources public
every comparison is the same, and no source's ``n`` is needed). The searches live in
:mod:`privcal.calibrators.search`.

Objectives (``L1 sensitivity`` per query, add/remove one example)
-----------------------------------------------------------------
* ``"acc"`` (Acc-T): the root of :math:`g(T) = \\sum_s G_s(T)`, :math:`G_s(T) = \\sum_{i \\in
  s} 1[c_i] - \\mathrm{conf}_T(i)`, non-decreasing in ``T``. ``search="curve"`` (default): one
  query, the whole curve on a public log-spaced grid (:meth:`DataSource.accuracy_gap_curve`,
  sensitivity 2 whatever the grid), summed, fitted isotonically, zero crossing interpolated
  (:func:`~privcal.calibrators.search.monotone_root`); ``"bisect"``: the sign of a noisy ``g``
  (sensitivity 1 per query); ``"golden-section"``: seed 000's Alg. 1 on ``|g|`` over ``[0.5,
  3]``; ``"golden"``: the same, preceded with ``t_range="auto"`` by a locating query.
* ``"nll"`` (NLL-T): minimise :math:`F(T) = \\sum_s \\mathrm{NLL}_s(T)`, each example's NLL clipped
  to ``[0, B]``. ``search="curve"`` (default): one query, the increments along the same grid
  (:meth:`DataSource.clipped_nll_increments`, sensitivity ``B + min(B, log C)``), minimiser of
  the convex fit (:func:`~privcal.calibrators.search.convex_argmin`); ``"golden"`` /
  ``"golden-section"``: :meth:`DataSource.clipped_nll_sum` (sensitivity ``B`` per query).
* ``"ece"`` (ECE-T): minimise :math:`\\sum_m |\\sum_s \\tilde g_{s,m}(T)|`, per-bin sums of ``1[c] -
  conf_T`` (sensitivity 1), by golden section only (per-bin curves would cost up to ``2 M``).

Budget: with ``q`` queries per source (one for a curve; ``K + 1`` for bisection and golden
section, ``iterations = K``, Alg. 1's final bracket without its unused last sample; one more for
``t_range="auto"`` with ``"golden"``: the sign of the accuracy gap at ``T = 3``), each query gets
``epsilon / q`` (:func:`~privcal.private.parallel.split_budget`), so each source spends exactly
``epsilon`` (basic composition) and ``privacy_report_.epsilon == epsilon`` (parallel composition
over disjoint sources). Falling back to ``T = 1`` (:mod:`privcal.private.fallback`) is
post-processing of the release.

Derivations and measurements: docs/private.md#the-protocol-and-its-privacy-accounting (sum, not
average; counting queries) and docs/private.md#searches-and-the-default-temperature-range-measured
(why one curve query beats a sequence of sign queries).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from privcal._params import POSITIVE, Constraints, Int, Options, check_int
from privcal.calibrators.base import Calibrator, ReportsPrivacy, register, store_params
from privcal.calibrators.search import (
    bisect_sign,
    convex_argmin,
    golden_section,
    monotone_root,
)
from privcal.metrics.statistics import softmax
from privcal.privacy import NoiseSource, Release
from privcal.privacy.distributed import (
    AggregatorView,
    check_aggregation,
    threat_model,
)
from privcal.privacy.filter import pure_dp_curve
from privcal.privacy.noise import noise_kind
from privcal.privacy.odometer import LedgerClone, as_odometer
from privcal.private.fallback import (
    FALLBACKS,
    NOISE_Z,
    Evidence,
    NoiseDominatedWarning,
    curve_gap_evidence,
    gap_evidence,
    golden_evidence,
    nll_drop_evidence,
    release_check,
)
from privcal.private.parallel import (
    answer_all,
    check_budgets,
    check_share_rows,
    check_sources,
    share_all,
    sources_report,
)
from privcal.private.plan import (
    AUTO_SPLIT,
    SearchPlan,
    TooFewRowsError,
    search_plan,
    size_term,
)
from privcal.private.source import DataSource

__all__ = ["NoiseDominatedWarning", "PrivateTemperatureScaling"]


class _Protocol:
    """The calibrator side of seed 000's protocol: one query to every source, answers summed.

    ``aggregation="local"``: each source answers with its own Laplace release and the
    calibrator sums the answers. ``"distributed"``: each source uploads its exact answer in
    fixed point plus a discrete Laplace share sized for ``threshold`` sources to an in-process
    :class:`~privcal.privacy.distributed.SecureSum`; the calibrator (the aggregator) sees only
    the modular sum (kept in :attr:`views`) and decodes it. ``variances`` holds the public noise
    variance of one coordinate of each summed answer.
    """

    def __init__(
        self,
        sources: list[DataSource],
        labels: list[str],
        plan: SearchPlan,
        aggregation: str = "local",
        threshold: int | None = None,
    ) -> None:
        self.sources = sources
        self.labels = labels
        self.budgets = iter(plan.epsilons)
        self.releases: list[Release] = []
        self.aggregation = aggregation
        self.threshold = threshold
        self.views: list[AggregatorView] = []
        self.variances: list[float] = []

    def ask(self, method: str, **kwargs: Any) -> Any:
        """One query to every source (through :func:`share_all` when distributed: in process or
        one SecAgg+ round); returns the summed, or decoded, answer."""
        eps = next(self.budgets)
        first, before = len(self.releases), [len(src.history) for src in self.sources]
        variance = None
        if self.aggregation == "distributed":
            k, t = len(self.sources), int(self.threshold or len(self.sources))
            view, plan, finish = share_all(self.sources, method, eps, t, **kwargs)
            self.views.append(view)
            variance = plan.law.variance(k) / plan.encoding.scale**2
            total = finish(plan.release(view))
        else:
            total = sum(answer_all(self.sources, method, epsilon=eps, **kwargs), 0.0)
        for src, label, b in zip(self.sources, self.labels, before, strict=True):
            self.releases.extend(r.for_source(label) for r in src.history[b:])
        if variance is None:
            variance = _coordinate_variance(self.releases[first:])
        self.variances.append(variance)
        return total


def source_labels(sources: Sequence[DataSource]) -> list[str]:
    """Distinct report labels: a source's name, or ``source<i>`` (``name#i`` when repeated)."""
    names = [s.name or f"source{i}" for i, s in enumerate(sources)]
    seen = Counter(names)
    return [n if seen[n] == 1 else f"{n}#{i}" for i, n in enumerate(names)]


class _PrivateCalibrator(LedgerClone, ReportsPrivacy, Calibrator):
    """Shared fit plumbing: arrays -> one DataSource, or the list of sources given."""

    _fitted_attributes: ClassVar[tuple[str, ...]] = ()
    #: What the fit's report lists as public besides the sources' own terms.
    _public_terms: ClassVar[tuple[str, ...]]

    epsilon: float
    noise: NoiseSource | None
    aggregation: str
    threshold: int | None
    ledger: Any

    def fit(
        self,
        logits: Any = None,
        labels: Any = None,
        *,
        sources: Sequence[DataSource] | None = None,
        input: str = "logits",
    ) -> Any:
        """Fit on one private dataset (``logits, labels``: one :class:`DataSource` of budget
        ``epsilon`` and the estimator's ``noise``, charged to ``ledger=`` first) or on
        ``sources=[DataSource, ...]`` (each pays ``epsilon`` from its own budget and noise)."""
        owner = type(self).__name__
        self._validate_params()
        public = self._public_terms
        odometer = as_odometer(self.ledger, owner)
        if sources is not None and odometer is not None:
            raise ValueError(
                f"{owner}(ledger=...) charges fits on arrays (one party's data); with "
                "sources=[DataSource, ...] each source charges its own ledger. Pass "
                "DataSource(..., ledger=PATH) instead, or fit on arrays."
            )
        if sources is None:
            if logits is None or labels is None:
                raise ValueError(
                    f"{owner}.fit needs either logits and labels or sources=[DataSource, ...]."
                )
            self._warn_refit()
            srcs = [
                DataSource(logits, labels, self.epsilon, noise=self.noise, name="data", input=input)
            ]
            public += self._check_rows(int(np.shape(logits)[0]), srcs[0].n_classes)
        else:
            if logits is not None or labels is not None:
                raise ValueError(
                    f"{owner}.fit takes either logits and labels or sources, not both."
                )
            srcs = check_sources(sources, owner)
        aggregation, threshold = check_aggregation(
            self.aggregation, self.threshold, len(srcs), owner, allowed=("distributed", "local")
        )
        if aggregation == "distributed":
            check_share_rows(srcs, owner)
        check_budgets(srcs, float(self.epsilon))
        if odometer is not None:
            odometer.spend(
                f"{owner}.fit",
                float(self.epsilon),
                mechanism="laplace",
                rdp=sum(pure_dp_curve(e, odometer.rule.orders) for e in self._query_epsilons()),
                noise=noise_kind(srcs[0].noise),
            )
        with self._recording_fit_warnings():
            proto = self._fit_sources(srcs, source_labels(srcs), aggregation, threshold)
        survivors = min((len(srcs) - len(v.dropped) for v in proto.views), default=None)
        transport = "secagg+" if all(s.transport == "secagg+" for s in srcs) else "in-process"
        alone = "no guarantee is claimed for one discrete Laplace share alone"
        fallback = alone if aggregation == "distributed" else None
        threat = threat_model(
            aggregation, len(srcs), threshold, survivors, transport=transport, fallback=fallback
        )
        self.privacy_report_ = sources_report(proto.releases, srcs, public, threat=threat)
        self.aggregator_views_ = proto.views
        self.n_classes_ = srcs[0].n_classes
        self.n_sources_ = len(srcs)
        return self

    def _fit_sources(
        self, sources: list[DataSource], labels: list[str], aggregation: str, threshold: int | None
    ) -> _Protocol:
        raise NotImplementedError

    def informative_rows(self, n_classes: int) -> float:
        """The fewest rows at which one party's release could inform the fit (``nan``: no
        bound); a public function of the parameters and ``n_classes``."""
        raise NotImplementedError

    def _too_few(self, n: int, needed: int, epsilon_needed: float) -> str:
        """The message of :class:`TooFewRowsError` for ``n`` rows."""
        raise NotImplementedError

    def _check_rows(self, n: int, n_classes: int) -> tuple[str, ...]:
        """With ``fallback="identity"``, refuse fewer than :meth:`informative_rows` rows before
        any release or charge (such a fit can only keep what its noise chose); returns the
        public term the check adds (the bit ``n >= rows``), or nothing."""
        rows = self.informative_rows(n_classes)
        if getattr(self, "fallback", "none") != "identity" or not np.isfinite(rows):
            return ()
        if not n < rows:
            return (size_term(rows),)
        eps = float(self.epsilon)
        needed, eps_needed = int(np.ceil(rows)), eps * rows / n
        raise TooFewRowsError(n, needed, eps_needed, self._too_few(n, needed, eps_needed))

    def _query_epsilons(self) -> tuple[float, ...]:
        """The budget of each query of one source's fit (their ``fsum`` is ``epsilon``)."""
        raise NotImplementedError

    def _jsonable_params(self) -> dict[str, Any]:
        params = dict(self.get_params(deep=False))
        # neither a noise source nor a ledger is data; restored calibrators only predict
        params.pop("noise", None)
        params.pop("ledger", None)
        return params


@register
class PrivateTemperatureScaling(_PrivateCalibrator):
    """Temperature scaling fitted under pure epsilon-DP per data source (seed 000).

    Parameters
    ----------
    objective : {"acc", "nll", "ece"}, default="acc"
        ``"acc"``: Acc-T, match mean confidence to accuracy (sensitivity 1 per query).
        ``"nll"``: NLL-T with each example's NLL clipped to ``[0, nll_bound]`` (sensitivity B
        per scalar query; ``B + min(B, log C)`` for the increments of the curve search).
        ``"ece"``: ECE-T on ``n_bins`` equal-width bins (L1 sensitivity 1 per query).
    epsilon : float, default=1.0
        Budget each source spends on the fit, ``> 0``.
    iterations : int, default=5
        ``K`` of seed 000 (``>= 1``): the iterative searches make ``K + 1`` evaluations (see the
        module docstring for the count). The curve search makes one query and does not use it.
    t_range : (float, float) or "auto", default="auto"
        Search range. ``"auto"``: ``[0.25, 64]`` for the curves, ``[0.5, 30]`` for bisection,
        seed 000's ``[0.5, 3]`` for ``"golden-section"``; ``"golden"`` spends one extra query on
        the gap sign at ``T = 3`` and searches ``[0.5, 3]`` or ``[3, 30]``.
    search : {"auto", "curve", "bisect", "golden", "golden-section"}, default="auto"
        ``"auto"`` is ``"curve"`` for Acc-T and NLL-T and ``"golden"`` for ECE-T (the searches:
        module docstring; the curve's grid steps by a factor sqrt(2) over ``t_range``).
        ``"curve"`` needs ``objective="acc"`` or ``"nll"``; ``"bisect"`` needs ``"acc"``.
    n_bins : int, default=15
        Bins of the ECE objective.
    nll_bound : float, default=10.0
        Clip bound ``B`` of the NLL objective (seed 000 uses 10).
    noise : NoiseSource or None, default=None
        Noise of the source built by ``fit(logits, labels)``; ``None`` means ``SecureNoise()``.
        Ignored with ``sources=`` (each source draws its own noise).
    aggregation : {"local", "distributed"}, default="local"
        Who adds the noise (see :ref:`the threat models <docs/privacy.md>`). ``"local"``: each
        source releases its own Laplace answer (sum of ``K`` releases' noise; no one is
        trusted). ``"distributed"``: each source uploads its exact answer plus a discrete
        Laplace share to a secure sum, so the total carries the noise of one release (``K/t``
        of it); the calibrator sees only the sum (``aggregator_views_``), and the guarantee
        holds while ``t`` sources are honest and survive. The default needs no trust in a
        secure sum; with one source the two are the same release.
    threshold : int or None, default=None
        ``t`` for ``"distributed"`` (``None``: all ``K`` sources); refused otherwise.
    ledger : PrivacyOdometer, str, Path or None, default=None
        A pipeline ledger charged with the whole fit on arrays (one step of ``epsilon``, pure
        DP, the RDP curve of its ``q`` queries) before any release; a path must be an existing
        ledger file (:meth:`PrivacyOdometer.open`). Refused with ``sources=``.
    fallback : {"identity", "none"}, default="identity"
        What the fit releases when its own release cannot tell the fitted temperature from
        ``T = 1`` (:func:`release_check`: evidence below :data:`NOISE_Z` noise SDs).
        ``"identity"``: ``T = 1``, the uncalibrated model, with a
        :class:`NoiseDominatedWarning` (post-processing: no privacy cost). ``"none"``: the
        fitted temperature, with the same warning (seed 000's behaviour, which may calibrate
        worse than doing nothing). With ``"identity"`` a fit on arrays with fewer than
        :meth:`informative_rows` rows raises ``ValueError`` before any release or charge.

    Attributes
    ----------
    temperature_ : float
        The released temperature (``T = 1`` after a fallback).
    release_temperature_ : float
        The temperature the search fitted, before the fallback rule (what the privacy audits
        read: the rule is post-processing of it). In memory, not saved.
    release_check_ : dict
        The fallback rule's decision (:func:`release_check`): ``z``, ``threshold``,
        ``compared``, ``fell_back``, ``noise_dominated``. In memory, not saved.
    t_range_ : (float, float)
        The range searched (after the locating query of ``search="golden"``).
    privacy_report_ : PrivacyReport
        Every release of the fit; ``privacy_report_.epsilon == epsilon``; its ``threat`` lines
        say who is trusted with what.
    aggregator_views_ : list of AggregatorView
        With ``aggregation="distributed"``, what the aggregator saw of each query: the modular
        sum of the uploads (and who dropped). Empty otherwise.
    fit_warnings_ : list of str
        :class:`NoiseDominatedWarning` messages: every search warns when its own release cannot
        tell the fitted temperature from ``T = 1`` (``NOISE_Z`` noise SDs), saying whether it
        fell back.
    n_classes_, n_sources_ : int

    Privacy
    -------
    Neighbouring relation: add/remove one example of one source. Each query is a Laplace
    mechanism with its derived sensitivity (:class:`DataSource`) at ``epsilon / q`` for the
    ``q`` queries of the plan: ``epsilon`` per source (basic composition), and the sources hold
    disjoint data (parallel composition). The search and the fallback rule are post-processing
    of the answers. Public: ``t_range``, the queried temperatures (the curve's grid and anchor,
    or functions of earlier answers), ``n_bins``, ``nll_bound``. A fit on arrays with
    ``fallback="identity"`` first refuses fewer than :meth:`informative_rows` rows (a public
    function of ``epsilon``, the plan and ``C``) before any release: it reads the one bit
    ``n >= informative_rows(C)``, so the guarantee is stated for neighbours that both have that
    many rows (as the conformal fits treat ``n`` as public). Fits on ``sources=`` never read
    ``n``.

    Examples
    --------
    >>> import numpy as np, warnings
    >>> from privcal.privacy import SeededNoise
    >>> rng = np.random.default_rng(0)
    >>> z = 3.0 * rng.normal(size=(2000, 4)); y = np.argmax(z + 3 * rng.normal(size=z.shape), 1)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     cal = PrivateTemperatureScaling("acc", epsilon=1.0, noise=SeededNoise(0)).fit(z, y)
    >>> cal.privacy_report_.epsilon, cal.temperature_ > 1
    (1.0, True)
    """

    _fitted_attributes: ClassVar[tuple[str, ...]] = ("temperature_", "t_range_", "n_sources_")
    _public_terms = (
        "t_range and the search plan (number of queries, the curve's grid and anchor)",
    )
    #: Checked after the search plan's (objective, epsilon, iterations, t_range, search).
    _parameter_constraints = Constraints(
        fallback=Options(*FALLBACKS), n_bins=Int(1), nll_bound=POSITIVE
    )

    def __init__(
        self,
        objective: str = "acc",
        epsilon: float = 1.0,
        iterations: int = 5,
        t_range: tuple[float, float] | str = "auto",
        search: str = "auto",
        n_bins: int = 15,
        nll_bound: float = 10.0,
        noise: NoiseSource | None = None,
        aggregation: str = "local",
        threshold: int | None = None,
        ledger: Any = None,
        fallback: str = "identity",
    ) -> None:
        store_params(self, locals())

    def _validate_params(self) -> dict[str, Any]:
        owner = type(self).__name__
        search_plan(self.objective, self.epsilon, self.iterations, self.t_range, self.search, owner)
        return super()._validate_params()

    def plan(self) -> SearchPlan:
        """The validated :class:`SearchPlan` of this estimator."""
        return search_plan(self.objective, self.epsilon, self.iterations, self.t_range, self.search)

    def informative_rows(self, n_classes: int) -> float:
        """The fewest rows at which one party's release could show any temperature beats
        ``T = 1`` by :data:`NOISE_Z` SDs of its noise (``nan``: the release never compares
        with ``T = 1``, a ``t_range`` without it).

        The fallback rule (:func:`release_check`) keeps a temperature only when the released
        evidence ``z = signal / SD`` reaches :data:`NOISE_Z`. The signal is a difference of
        sums of per-row terms, each in a range of width ``b``, so ``|signal| <= n b`` and
        ``E z <= n b / SD``: below ``NOISE_Z SD / b`` rows a kept temperature can only have been
        kept for its noise (on 20 rows at epsilon 0.1, 5 of 40 fits were kept, 2 of them at
        ``T = 0.25`` and 41 points of ECE worse). ``SD`` is the smallest noise SD any of the
        plan's comparisons can have, from the queries' sensitivities at their budgets
        (Laplace: variance ``2 (sensitivity / epsilon)^2``):

        * Acc-T's curve: the gap at ``T = 1``, ``|i - anchor| + 1`` draws of the curve's noise;
          ``b = 1`` (``1[c] - conf`` lies in ``[-1, 1]`` but ``g`` is compared with 0, so the
          sum is at most ``n``);
        * NLL-T's curve: the drop from ``T = 1`` to a neighbouring grid point, one increment
          (the spline interpolates at the grid points, so :func:`drop_coefficients` there is
          ``|i - j|`` ones); ``b = B`` (a clipped NLL lies in ``[0, B]``);
        * bisection: one evaluation of the gap, ``b = 1``;
        * golden section: a difference of two evaluations (``|g|`` with ``b = 1``, ECE-T's sum
          over ``M`` bins with variance bound ``M v`` and ``b = 1``, the clipped NLL with
          ``b = B``), or the locating gap at ``T = 3`` (``b = 1``), whichever is smaller.

        A function of public quantities only (``epsilon``, the plan, ``C``, ``B``, ``M``).
        """
        from privcal.private.fallback import identity_index
        from privcal.private.queries import query_sensitivity

        plan = self.plan()
        c = check_int(n_classes, "n_classes", "informative_rows", low=2)
        bound = float(self.nll_bound)

        def var(query: str, eps: float, **kw: Any) -> float:
            return 2.0 * (query_sensitivity(query, **kw) / eps) ** 2

        if plan.search == "curve":
            grid = np.asarray(plan.grid)
            i = identity_index(grid)
            if i is None:
                return float("nan")
            if self.objective == "acc":
                v = var("accuracy_gap_curve", plan.epsilons[0])
                return NOISE_Z * float(np.sqrt((abs(i - plan.anchor) + 1) * v))
            v = var("clipped_nll_increments", plan.epsilons[0], bound=bound, n_classes=c)
            # the spline interpolates at the grid: F(T_i) - S(T_j) = F_i - F_j sums |i - j|
            # increments, coefficients of norm sqrt(|i - j|), smallest (1) at a neighbour
            return NOISE_Z * float(np.sqrt(v)) / bound
        eps = plan.epsilons[-1]
        if plan.search == "bisect":
            return NOISE_Z * float(np.sqrt(var("accuracy_gap_sum", eps)))
        if self.objective == "nll":
            rows = NOISE_Z * float(np.sqrt(2.0 * var("clipped_nll_sum", eps, bound=bound))) / bound
        else:
            width = int(self.n_bins) if self.objective == "ece" else 1
            query = "bin_gaps" if self.objective == "ece" else "accuracy_gap_sum"
            rows = NOISE_Z * float(np.sqrt(2.0 * width * var(query, eps)))
        if plan.locate:
            rows = min(rows, NOISE_Z * float(np.sqrt(var("accuracy_gap_sum", plan.epsilons[0]))))
        return rows

    def _too_few(self, n: int, needed: int, epsilon_needed: float) -> str:
        return (
            f"{type(self).__name__}(objective={self.objective!r}, epsilon="
            f"{float(self.epsilon):g}) cannot tell any temperature from T = 1 (no calibration) "
            f"on {n} rows: its release's noise needs at least {needed} rows at this epsilon (or "
            f"epsilon >= {epsilon_needed:.3g} for {n} rows) to show a temperature beats T = 1 "
            f"by {NOISE_Z:g} noise SDs. Nothing was released or charged. Use more rows or a "
            "larger epsilon, or fallback='none' to fit anyway (seed 000, may calibrate worse "
            "than no calibration)."
        )

    def _fit_sources(
        self, sources: list[DataSource], labels: list[str], aggregation: str, threshold: int | None
    ) -> _Protocol:
        plan = self.plan()
        proto = _Protocol(sources, labels, plan, aggregation, threshold)
        if plan.search == "curve":
            assert plan.t_range is not None
            t, evidence = self._curve_search(plan, proto)
            lo, hi = plan.t_range
        else:
            t, (lo, hi), evidence = self._iterative_search(plan, proto)
        check = release_check(t, evidence, str(self.fallback))
        if check["warning"]:
            warnings.warn(check["warning"], NoiseDominatedWarning, stacklevel=3)
        self.release_temperature_ = t
        self.release_check_ = check
        self.temperature_ = float(check["temperature"])
        self.t_range_ = (lo, hi)
        return proto

    def _query_epsilons(self) -> tuple[float, ...]:
        return self.plan().epsilons

    def _curve_search(self, plan: SearchPlan, proto: _Protocol) -> tuple[float, Evidence]:
        """One query per source on the public grid, then post-processing of the sum; returns
        the temperature and the release's evidence that it beats ``T = 1``."""
        grid = np.asarray(plan.grid)
        if self.objective == "acc":
            curve = proto.ask("accuracy_gap_curve", temperatures=plan.grid, anchor=plan.anchor)
            curve = np.asarray(curve, dtype=np.float64)
            t = float(monotone_root(curve, grid))
            # the plan's only query, so every release so far is this curve's
            return t, curve_gap_evidence(curve, grid, plan.anchor, proto.variances[-1], t)
        inc = proto.ask("clipped_nll_increments", temperatures=plan.grid, bound=self.nll_bound)
        inc = np.asarray(inc, dtype=np.float64)
        t = float(convex_argmin(inc, grid))
        return t, nll_drop_evidence(inc, grid, proto.variances[-1], t)

    def _objective(self, proto: _Protocol) -> Callable[[float], float]:
        """The noisy objective of one evaluation (one query to every source)."""
        if self.objective == "acc":
            return lambda t: float(proto.ask("accuracy_gap_sum", temperature=t))
        if self.objective == "nll":
            bound = float(self.nll_bound)
            return lambda t: float(proto.ask("clipped_nll_sum", temperature=t, bound=bound))
        n_bins = int(self.n_bins)
        return lambda t: float(np.abs(proto.ask("bin_gaps", temperature=t, n_bins=n_bins)).sum())

    def _iterative_search(
        self, plan: SearchPlan, proto: _Protocol
    ) -> tuple[float, tuple[float, float], Evidence]:
        """Bisection or golden section (after the locating query when planned); returns the
        temperature, the range searched and the release's evidence that it beats ``T = 1``."""
        objective = self._objective(proto)
        width = int(self.n_bins) if self.objective == "ece" else 1
        seen: list[tuple[float, float, float]] = []  # (T, released value, its variance bound)

        def evaluate(u: float) -> float:
            v = objective(u)
            seen.append((u, v, width * proto.variances[-1]))
            return v

        located: list[tuple[float, float, float]] = []
        if plan.locate:
            g3 = float(proto.ask("accuracy_gap_sum", temperature=AUTO_SPLIT))
            located.append((AUTO_SPLIT, g3, proto.variances[-1]))
            lo, hi = (float(v) for v in plan.ranges(g3))
        else:
            assert plan.t_range is not None
            lo, hi = plan.t_range
        if plan.search == "bisect":
            t, _ = bisect_sign(evaluate, lo, hi, plan.evaluations)
            return t, (lo, hi), gap_evidence(seen, t)
        # seed 000: golden section on |gap| for Acc-T; ECE-T's value sums n_bins |noisy sums|
        value = (lambda u: abs(evaluate(u))) if self.objective == "acc" else evaluate
        t, _ = golden_section(value, lo, hi, plan.evaluations)
        if self.objective == "acc":
            seen = [(u, abs(v), var) for u, v, var in seen]
        evidence = golden_evidence(seen, t)
        if evidence is None and located:  # range [3, 30]: the locating gap at T = 3 says why
            evidence = gap_evidence(located, t)
        return t, (lo, hi), evidence

    def _predict_proba(self, z: np.ndarray) -> np.ndarray:
        return softmax(z, self.temperature_)


def _coordinate_variance(releases: Sequence[Release]) -> float:
    """Noise variance of one coordinate of a curve summed over sources: ``sum 2 (sens/eps)^2``.

    Each source added independent Laplace noise of scale ``sensitivity / epsilon`` (public, in
    its release record) to every coordinate; Laplace(b) has variance ``2 b^2``.
    """
    return float(sum(2.0 * (r.sensitivity / r.epsilon) ** 2 for r in releases))

"""The estimator :class:`PrivateConformal`: one private threshold, then the prediction sets.

It validates the arguments before reading the data, plans the chosen mechanism
(:func:`~privcal.conformal.private.get_mechanism`) from public quantities, localises the
threshold where Theorem L pays, draws the release and writes the privacy report (guarantee and
proofs: the class docstring, "Privacy"; docs/conformal.md#proofs).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
from sklearn.base import clone

from privcal._params import (
    EPSILON,
    Constraints,
    Options,
    check_option,
    renamed,
    renamed_attribute,
)
from privcal.calibrators.base import store_params
from privcal.conformal._base import ConformalBase, FullSetWarning
from privcal.conformal.groups import SMALL_GROUPS, group_rows
from privcal.conformal.localize import (
    LOCALIZE_FRACTION,
    LOCALIZE_MIN_EPS_N1,
    Localization,
    check_localize,
)
from privcal.conformal.private.localized import (
    localization_terms,
    localized_threshold,
    plan_localization,
)
from privcal.conformal.private.mechanism import (
    DEFAULT_LOGIT_BINS,
    Plan,
    check_tuning,
    get_mechanism,
)
from privcal.conformal.private.sample_size import min_calibration_size
from privcal.conformal.private.sources import (
    SOURCE_BINS,
    STAGE1_BINS,
    check_sources_score,
    coverage_slack,
    noise_margin,
    pooled_histogram,
    split_key,
    staged_thresholds,
)
from privcal.conformal.quantile import bin_edges
from privcal.data.validation import check_labels, check_scores
from privcal.exceptions import PrivcalWarning
from privcal.privacy.distributed import check_aggregation, threat_model
from privcal.privacy.filter import pure_dp_curve
from privcal.privacy.guarantee import PrivacyReport
from privcal.privacy.noise import NoiseSource, noise_kind, resolve_noise
from privcal.privacy.odometer import LedgerClone, UnaccountedFitWarning, as_odometer
from privcal.private.parallel import check_budgets, check_share_rows, check_sources, sources_report
from privcal.private.source import DataSource
from privcal.private.temperature import source_labels

__all__ = ["PrivateConformal"]

#: The key of the pooled small groups in a fit with ``small_groups="pool"``.
POOLED = "<pooled small groups>"


class PrivateConformal(LedgerClone, ConformalBase):
    """Epsilon-DP split conformal prediction sets (seed 002, with a sharper default mechanism).

    Parameters
    ----------
    score : {"lac", "aps", "aps-randomized"}, default="lac"
        Conformity score (values in [0, 1]).
    alpha : float, default=0.1
        Miscoverage level in ``(0, 1)``.
    epsilon : float, default=1.0
        Privacy loss in ``(0, inf)`` of the one release (the threshold).
    n_bins : "auto", int or array_like, default="auto"
        The public grid. ``"auto"``: :data:`DEFAULT_LOGIT_BINS` logit-spaced bins for
        ``"rank"`` and ``"bounded-range"``, ``m*`` of :func:`optimal_bins` (equal-width) for
        ``"angelopoulos2022"``; an int ``m >= 2``: ``m`` bins of that method's grid (logit,
        resp. equal-width); or edges ``0 = e_0 < ... < e_m = 1`` (any method). ``bins`` is its
        deprecated name (one release, ``DeprecationWarning``).
    gamma : "auto" or float, default="auto"
        ``"bounded-range"`` and ``"angelopoulos2022"`` only: ``gamma alpha`` is the failure
        probability given to the mechanism. ``"auto"``: the minimiser of ``q~``
        (:func:`optimal_gamma` for the paper).
    noise : NoiseSource or None, default=None
        ``None`` means ``SecureNoise()``. ``SeededNoise(seed)`` (simulation only) warns
        :class:`~privcal.privacy.InsecureNoiseWarning` and the report says
        ``"not private: seeded noise"``.
    calibrator : fitted calibrator or None, default=None
        As in :class:`SplitConformal` (fitted on other data, and privately if that data is
        private: its privacy is not accounted here).
    seed : int or None, default=0
        Seeds the ``u`` draws of randomised APS (``random_state`` is its deprecated name).
    method : {"rank", "bounded-range", "angelopoulos2022"}, default="rank"
        ``"rank"``: exponential mechanism with the rank penalty around the target rank ``k`` of
        :func:`rank_target` (Theorem R, :mod:`~privcal.conformal.private.rank`).
        ``"bounded-range"``: seed 002's utility with bounded-range weights and the level of
        :func:`bounded_range_level` (Theorem BR). ``"angelopoulos2022"``: seed 002's Algorithms
        3-5 exactly (equal-width grid, Eq. 3, Eq. 9-10, Algorithm 5), to reproduce the paper.
    slope : "auto" or float, default="auto"
        ``"rank"`` only: the cost ``r > 0`` of one missing order statistic relative to one extra
        (``"auto"``: :func:`rank_slope`).
    localize : "auto", None or float, default="auto"
        ``"rank"`` only: spend this fraction of the calibration set on localising the threshold
        (Theorem L, :mod:`privcal.conformal.localize`): two releases find a window of the grid
        around the ``(1 - alpha)``-quantile, and Theorem R runs on the other points with only
        the window's edges. ``"auto"``: 0.25 where it pays (:func:`plan_localization`), else one
        stage; ``None``: one stage. Same epsilon, same coverage guarantee.
    ledger : PrivacyOdometer, str, Path or None, default=None
        A pipeline ledger charged ``epsilon`` (pure DP) before a fit on arrays releases
        anything. A fit with ``groups`` refuses it (its relation, substitute within a group,
        is neither ledger relation), and so does a fit over ``sources``: each source charges
        its own ledger.
    aggregation : {"local", "distributed"}, default="local"
        Fits over ``sources=[DataSource, ...]`` only (Theorem S, docs/conformal.md): each source
        noises its own score histogram (``"local"``: Laplace), or the sources' histograms are
        summed with discrete Laplace shares sized for ``threshold`` survivors
        (``"distributed"``: the noise of one release; :meth:`DataSource.share`).
    threshold : int or None, default=None
        ``t`` for ``"distributed"`` (``None``: all sources).
    small_groups : {"refuse", "pool"}, default="refuse"
        A fit with ``groups`` whose group has fewer rows than a private threshold needs
        (:func:`min_calibration_size`): ``"refuse"`` raises before anything is released;
        ``"pool"`` gives such groups one shared threshold (coverage over their union), with a
        warning.

    Attributes
    ----------
    threshold_ : float
        The released edge ``e_J``, or ``inf`` when no valid threshold exists (full sets).
    level_ : float
        ``q~``: ``k / n`` for ``"rank"`` (``k_2 / n_2`` when localised), the adjusted level
        otherwise.
    gamma_ : float
        ``nan`` for ``"rank"``.
    slope_ : float
        ``nan`` unless ``"rank"``.
    rank_ : int
        ``k`` for ``"rank"`` (``k_2`` when localised), 0 otherwise.
    n_bins_ : int
        ``m`` (``m_2``, the window's bins, when localised). ``bins_`` is its deprecated name.
    localize_n_ : int
        ``n_1``, the points spent on localising (0 for one stage).
    window_ : tuple of float
        The two released window ends ``(lo, hi)``, ordered (``(0.0, 1.0)`` for one stage); the
        part-2 grid is the grid's edges between them, with 0 and 1.
    n_ : int
    n_classes_ : int
    privacy_report_ : PrivacyReport
        ``unit="example"``, ``relation="substitute"``, ``public`` listing ``n`` and every
        quantity derived from it. One release (its scale in the ``sensitivity`` column: the
        range ``1 + slope`` for ``"rank"``), three when localised ("Privacy"), none when there
        is no valid threshold.

    Privacy
    -------
    Unit: one calibration example. Neighbouring relation: **substitute** one calibration example;
    ``n`` is public. Add/remove is *not* claimed: the target ``k`` (or ``q~``), ``m*``,
    ``gamma*`` and the full-set branch are functions of ``n`` (see docs/conformal.md#proofs for the
    jumps that would reveal one example under add/remove).

    * The score of example ``i`` is a function of that example alone (the model, the calibrator,
      the score function and randomised APS's ``u``, which are independent of the data, are
      fixed before calibration), so substituting one example substitutes one score.
    * The grid, ``k``, ``slope``, ``q~``, ``m`` and ``gamma`` depend only on the public ``n``,
      ``alpha``, ``epsilon`` and the arguments, so they are the same on both neighbours.
    * ``"rank"``: weights ``exp(-epsilon p_j / (1 + slope))``; under substitute every penalty
      moves within one interval of width ``1 + slope`` (Theorem R), so epsilon-DP by the
      bounded-range argument. ``"bounded-range"``: weights ``exp(-epsilon q~(1-q~) w_j)``,
      epsilon-DP likewise (:mod:`privcal.conformal.quantile`). ``"angelopoulos2022"``: weights
      ``exp(-epsilon w_j / (2 max(1/q~, 1/(1-q~))))``, the sensitivity bound.
    * Localised (``localize``, Theorem L): the two window releases (``epsilon/2`` each) read
      only the localisation part, the threshold (``epsilon``) only the threshold part; the parts
      are disjoint (a random split independent of the data), so the report composes them in
      parallel: ``epsilon`` in total.
    * Pure ``epsilon``-DP for the threshold (and the window), and for every prediction set
      computed from it (post-processing). Budget: the whole ``epsilon``.

    Audited as deployed (defaults, ``SecureNoise``, neighbours moving one score from 0 to 1) by
    ``privcal audit private-conformal`` (one stage, ``n = 96``) and ``privcal audit
    private-conformal-localized`` (``n = 4000``: window and threshold).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = 3 * rng.normal(size=(2000, 5)); y = z.argmax(1)
    >>> pc = PrivateConformal(alpha=0.1, epsilon=1.0).fit(z, y)
    >>> rep = pc.privacy_report_
    >>> rep.epsilon, rep.relation, rep.public[0], rep.status
    (1.0, 'substitute', 'n = 2000 (number of calibration examples)', 'private')
    >>> pc.predict_set(z[:3]).shape
    (3, 5)
    >>> pc.rank_, pc.n_bins_, pc.slope_
    (1808, 3915, 3.0)
    """

    _owner = "PrivateConformal"
    _parameter_constraints = Constraints(
        ConformalBase._parameter_constraints,
        epsilon=EPSILON,
        aggregation=Options("local", "distributed"),
        small_groups=Options(*SMALL_GROUPS),
    )
    bins = renamed_attribute("n_bins")
    bins_ = renamed_attribute("n_bins_")

    @renamed(old="bins", new="n_bins", owner="PrivateConformal")
    @renamed(old="random_state", new="seed", owner="PrivateConformal")
    def __init__(
        self,
        score: str = "lac",
        alpha: float = 0.1,
        epsilon: float = 1.0,
        n_bins: Any = "auto",
        gamma: Any = "auto",
        noise: NoiseSource | None = None,
        calibrator: Any = None,
        seed: int | None = 0,
        method: str = "rank",
        slope: Any = "auto",
        localize: Any = "auto",
        ledger: Any = None,
        aggregation: str = "local",
        threshold: int | None = None,
        small_groups: str = "refuse",
    ) -> None:
        store_params(self, locals())

    def fit(
        self,
        logits: Any = None,
        labels: Any = None,
        input: str = "logits",
        *,
        sources: Sequence[DataSource] | None = None,
        groups: Any = None,
    ) -> PrivateConformal:
        """Release the private threshold from the calibration set, or from private sources.

        Parameters
        ----------
        logits : array_like of shape (n, C)
        labels : array_like of shape (n,)
        input : {"logits", "probs"}, default="logits"
        sources : list of DataSource, optional
            Fit across parties instead (:mod:`~privcal.conformal.private.sources`, Theorem S):
            each source answers one score histogram at ``epsilon`` from its own budget;
            ``aggregation`` and ``threshold`` say how the answers meet.
        groups : array_like of shape (n,), optional
            One group label per calibration row: one private threshold per group, from the
            group's rows only (:mod:`~privcal.conformal.groups`).

        Returns
        -------
        self
        """
        owner = self._owner
        checked = self._validate_params()
        a, eps = checked["alpha"], checked["epsilon"]
        if sources is not None:
            if logits is not None or labels is not None:
                raise ValueError(
                    f"{owner}.fit takes either logits and labels or sources=[DataSource, ...], "
                    "not both."
                )
            return self._fit_sources(list(sources), a, eps, groups)
        if logits is None or labels is None:
            raise ValueError(f"{owner}.fit needs logits and labels, or sources=[DataSource, ...].")
        self._warn_refit()
        if self.aggregation != "local" or self.threshold is not None:
            raise ValueError(
                f"The 'aggregation' and 'threshold' parameters of {owner} apply to fits over "
                "sources=[DataSource, ...]; a fit on arrays is one party's release. Got "
                f"aggregation={self.aggregation!r}, threshold={self.threshold!r}."
            )
        if groups is not None:
            return self._fit_groups(logits, labels, groups, input, a, eps)
        self.thresholds_ = None
        mechanism = get_mechanism(self.method, owner)
        tuning = check_tuning(mechanism, self.n_bins, self.gamma, self.slope, owner)  # before data
        check_localize(self.localize, self.method, owner)
        odometer = as_odometer(self.ledger, owner)
        src = resolve_noise(self.noise, owner)
        s = self._calibration_scores(logits, labels, input)
        n = int(s.size)
        edges = mechanism.edges(n, a, eps, self.n_bins, owner)
        plan = mechanism.plan(n, a, eps, edges, tuning)
        loc = plan_localization(n, a, eps, plan, self.method, self.localize, owner)
        if odometer is not None and (loc is not None or plan.valid):  # one exponential release
            odometer.spend(
                f"{owner}.fit",
                eps,
                mechanism="exponential",
                rdp=pure_dp_curve(eps, odometer.rule.orders),
                relation="substitute",
                noise=noise_kind(src),
            )
        self.localize_n_, self.window_ = 0, (0.0, 1.0)
        if loc is not None:
            return self._fit_localized(s, a, eps, plan, loc, src)
        self.n_, self.n_bins_, self.level_ = n, plan.n_bins, plan.level
        self.gamma_, self.slope_, self.rank_ = plan.gamma, plan.slope, plan.rank
        self.privacy_report_ = self._report(self._public(n, a, eps, plan), src)
        if not plan.valid:
            need = min_calibration_size(a, eps, self.n_bins, self.method, self.slope)
            warnings.warn(
                f"PrivateConformal: {mechanism.shortfall(plan)} for n = {n}, epsilon = {eps:g}, "
                f"alpha = {a:g}, m = {plan.n_bins}: no private threshold is valid, so every "
                f"prediction set is the full label set. Use at least n = {need} calibration "
                "points (or a larger epsilon or alpha).",
                FullSetWarning,
                stacklevel=2,
            )
            self.threshold_ = math.inf
            return self
        self.threshold_, release = mechanism.release(s, plan, eps, src, "calibration")
        self.privacy_report_.add(release)
        return self

    def _fit_localized(
        self, s: np.ndarray, a: float, eps: float, plan: Plan, loc: Localization, src: NoiseSource
    ) -> PrivateConformal:
        """Theorem L (:mod:`privcal.conformal.localize`): window on part 1, threshold on part 2."""
        if not isinstance(self.localize, str) and eps * loc.n1 < LOCALIZE_MIN_EPS_N1:
            warnings.warn(
                f"PrivateConformal: localize={self.localize!r} gives epsilon * n_1 = "
                f"{eps * loc.n1:g} < {LOCALIZE_MIN_EPS_N1:g}: a window found from so few points "
                "is often wide or misses the quantile, and the sets grow (on some fits to the "
                "full label set). Coverage still holds. localize='auto' would use one stage here.",
                PrivcalWarning,
                stacklevel=3,
            )
        value, plan2, window, releases = localized_threshold(s, loc, a, eps, plan, self.slope, src)
        if not plan2.valid:
            warnings.warn(
                f"PrivateConformal: the threshold part (n_2 = {loc.n2} of n = {s.size}) has no "
                f"valid target for the window's m_2 = {plan2.n_bins} bins (k_2 > n_2), so every "
                "prediction set is the full label set. Use a smaller 'localize' fraction, "
                "localize=None, or a larger calibration set.",
                FullSetWarning,
                stacklevel=3,
            )
        self.n_, self.n_bins_, self.level_ = s.size, plan2.n_bins, plan2.level
        self.gamma_, self.slope_, self.rank_ = plan2.gamma, plan2.slope, plan2.rank
        self.localize_n_, self.window_ = loc.n1, window
        self.privacy_report_ = self._report(self._public(s.size, a, eps, plan, loc), src)
        self.privacy_report_.extend(releases)
        self.threshold_ = value
        return self

    def _fit_sources(
        self, sources: list[DataSource], a: float, eps: float, groups: Any = None
    ) -> PrivateConformal:
        """Theorem S (:mod:`~privcal.conformal.private.sources`): a pooled noisy histogram,
        on a window found from a first part of every source's rows (``localize``); with
        ``groups="predicted"``, one per predicted class (Mondrian)."""
        owner = self._owner
        check_sources_score(self.score, self.calibrator, owner)
        check_localize(self.localize, "rank", owner)
        if groups is not None and not (isinstance(groups, str) and groups == "predicted"):
            raise ValueError(
                f"The 'groups' parameter of {owner}.fit with sources must be None or "
                "'predicted' (each source groups its rows by predicted class; a source holds no "
                f"other group column). Got {type(groups).__name__} instead."
            )
        fixed = {"method": "rank", "gamma": "auto", "slope": "auto"}
        changed = [f"{k}={getattr(self, k)!r}" for k, v in fixed.items() if getattr(self, k) != v]
        if changed or self.ledger is not None:
            raise ValueError(
                f"{owner}.fit(sources=...) releases pooled score histograms (Theorem S); "
                f"{', '.join(changed) or 'ledger=...'} applies to fits on arrays. Drop it (each "
                "source charges its own ledger: DataSource(..., ledger=PATH))."
            )
        two_stage = self.localize is not None
        if isinstance(self.n_bins, str):
            check_option(self.n_bins, "n_bins", owner, ("auto",))
        auto = STAGE1_BINS if two_stage else SOURCE_BINS
        edges = bin_edges(auto if isinstance(self.n_bins, str) else self.n_bins, owner, "logit")
        srcs = check_sources(sources, owner)
        aggregation, t = check_aggregation(self.aggregation, self.threshold, len(srcs), owner)
        if aggregation == "distributed":
            check_share_rows(srcs, owner)
        check_budgets(srcs, eps)
        ask = partial(pooled_histogram, srcs, source_labels(srcs), score=self.score,
                      epsilon=eps, aggregation=aggregation, threshold=t, by=groups)  # fmt: skip

        def query(grids: list[np.ndarray], part: Any) -> Any:
            return ask(grids if groups else grids[0], part=part)

        fraction = LOCALIZE_FRACTION if isinstance(self.localize, str) else self.localize
        part = (split_key(self.noise, self.seed), float(fraction)) if two_stage else None
        fine = bin_edges(DEFAULT_LOGIT_BINS, owner, "logit")
        c = srcs[0].n_classes
        grids, stages, thresholds, windows = staged_thresholds(
            query, [edges] * (c if groups else 1), a, fine, part
        )
        pooled, m = stages[-1], grids[0].size - 1
        self.n_classes_, self.n_sources_ = c, len(srcs)
        self.n_bins_, self.rank_, self.window_ = m, 0, windows[0]
        self.gamma_ = self.slope_ = self.level_ = math.nan
        self.localize_n_ = 0
        self.n_noisy_ = float(pooled.counts.sum())
        self.margin_ = noise_margin(m, pooled.variance)
        self.counts_, self.edges_ = pooled.counts, grids[0] if not groups else grids
        self.stage_counts_ = [stage.counts for stage in stages]
        self.coverage_slack_ = coverage_slack(max(self.n_noisy_, 0.0), a, m, pooled.variance)
        self.aggregator_views_ = [v for stage in stages for v in stage.views]
        self.thresholds_ = dict(enumerate(thresholds)) if groups else None
        self.group_by_ = groups
        self.threshold_ = max(thresholds)
        survivors = min((len(srcs) - len(v.dropped) for v in self.aggregator_views_), default=None)
        transport = "secagg+" if all(s.transport == "secagg+" for s in srcs) else "in-process"
        grid = (
            f"stage 1: m = {edges.size - 1} logit-spaced bins on side 0 of a random row split "
            f"({fraction:g} of each source's rows); stage 2: {m} bins around the "
            "stage-1 window on side 1"
            if two_stage
            else f"the grid: m = {edges.size - 1} logit-spaced bins (fixed before the data)"
        )
        public = (
            f"alpha = {a:g}",
            grid + (", one histogram per predicted class" if groups else ""),
            f"the margin t = sqrt(m v) = {self.margin_:.4g} (v = {pooled.variance:.4g}, the noise "
            "variance of one pooled count)",
            f"the score function ({self.score!r}) and the model",
        )
        self.privacy_report_ = sources_report(
            [r for stage in stages for r in stage.releases],
            srcs,
            public,
            threat=threat_model(aggregation, len(srcs), t, survivors, transport=transport),
        )
        full = [g for g, v in enumerate(thresholds) if math.isinf(v)]
        if full:
            where = "" if not groups else f" of predicted classes {full[:8]}"
            warnings.warn(
                f"{owner}: the pooled noisy histogram{where} (N~ = {self.n_noisy_:.0f} scores in "
                f"all) admits no threshold below 1 at alpha = {a:g}, so those prediction sets are "
                "the full label set. More rows, a larger epsilon, fewer bins or "
                "aggregation='distributed' shrink the margin.",
                FullSetWarning,
                stacklevel=3,
            )
        return self

    def _fit_groups(
        self, logits: Any, labels: Any, groups: Any, input: str, a: float, eps: float
    ) -> PrivateConformal:
        """One single-party threshold per group (:mod:`~privcal.conformal.groups`)."""
        owner = self._owner
        if self.ledger is not None:
            raise ValueError(
                f"{owner}.fit(..., groups=g) is epsilon-DP for substituting one example within "
                "its group, the group sizes public; a ledger holds one relation (substitute or "
                "add/remove) under which an example may change group, which moves two group "
                "sizes the fit releases. Fit the groups without ledger=..., or without groups."
            )
        z = check_scores(logits, input=input)  # type: ignore[arg-type]
        y = check_labels(labels, z.shape[0], z.shape[1])
        rows = group_rows(groups, z.shape[0], owner)
        need = min_calibration_size(a, eps, self.n_bins, self.method, self.slope)
        small = [g for g, idx in rows.items() if idx.size < need]
        if small and self.small_groups == "refuse":
            shown = ", ".join(f"{g!r} ({rows[g].size} rows)" for g in small[:8])
            raise ValueError(
                f"{owner}.fit: {len(small)} group(s) have fewer than the {need} rows a private "
                f"threshold needs at alpha = {a:g}, epsilon = {eps:g}: {shown}. Nothing was "
                "released. Merge them into larger groups, or pass small_groups='pool' to "
                "calibrate them together."
            )
        parts: dict[Any, np.ndarray] = {g: idx for g, idx in rows.items() if g not in small}
        if small:
            parts[POOLED] = np.concatenate([rows[g] for g in small])
            warnings.warn(
                f"{owner}: groups {', '.join(map(repr, small[:8]))} have fewer than {need} rows "
                "each and share one pooled threshold: their coverage holds over their union, "
                "not within each.",
                PrivcalWarning,
                stacklevel=3,
            )
        fits: dict[Any, PrivateConformal] = {}
        for g, idx in parts.items():
            with warnings.catch_warnings():  # the groups' rows are disjoint: parallel
                warnings.simplefilter("ignore", UnaccountedFitWarning)
                sub = clone(self)
            fits[g] = sub.fit(z[idx], y[idx], "logits")
        thresholds = {g: fits[POOLED if g in small else g].threshold_ for g in rows}
        self.thresholds_ = thresholds
        self.group_sizes_ = {g: int(idx.size) for g, idx in rows.items()}
        self.threshold_ = max(thresholds.values())  # fitted marker; sets use thresholds_
        self.n_, self.n_classes_ = int(z.shape[0]), int(z.shape[1])
        first = next(iter(fits.values()))
        self.n_bins_, self.rank_, self.localize_n_, self.window_ = first.n_bins_, 0, 0, (0.0, 1.0)
        self.level_ = self.gamma_ = self.slope_ = math.nan  # per group: fits' own, not kept
        self.privacy_report_ = PrivacyReport(
            [
                r.for_source(f"group {g!r}: {r.source}")  # a localised fit's parts: disjoint
                for g, f in fits.items()
                for r in f.privacy_report_.releases
            ],
            unit="example",
            relation="substitute",
            public=(
                "each example's group (the substituted example stays in its group)",
                "the group sizes (" + ", ".join(f"{g!r}: {i.size}" for g, i in rows.items()) + ")",
                f"alpha = {a:g}",
                f"epsilon = {eps:g} (each group's release; the groups' rows are disjoint)",
                f"the score function ({self.score!r}), the model and the calibrator",
            ),
            noise=noise_kind(resolve_noise(self.noise, owner)),
        )
        return self

    @staticmethod
    def _report(public: tuple[str, ...], src: NoiseSource) -> PrivacyReport:
        """An empty report: one calibration example, substitute, ``public`` as given."""
        return PrivacyReport(
            unit="example", relation="substitute", public=public, noise=noise_kind(src)
        )

    def _public(
        self, n: int, a: float, eps: float, plan: Plan, loc: Localization | None = None
    ) -> tuple[str, ...]:
        """What the guarantee treats as public: ``n`` and everything computed from it."""
        mechanism = plan.mechanism
        if loc is None:
            terms = mechanism.public_terms(plan, self.n_bins)
        else:  # the part-2 target is a function of the part-1 releases, not listed
            terms = [mechanism.grid_term(plan, self.n_bins), *localization_terms(loc)]
        return (
            f"n = {n} (number of calibration examples)",
            f"alpha = {a:g}",
            f"epsilon = {eps:g}",
            f"method = {plan.method!r}",
            *terms,
            f"the score function ({self.score!r}), the model and the calibrator (fixed before "
            "calibration)",
        )

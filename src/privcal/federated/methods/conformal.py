"""Federated conformal prediction with user-level DP: ``"conformal-lac"`` and ``"conformal-aps"``.

Each client is one user holding many rows. Client ``k`` scores its rows (LAC ``1 - p_y`` or
non-randomised APS on the softmax of its logits, :func:`~privcal.metrics.conformity.conformity`),
keeps at most ``r`` of them (``row_cap``, public; a client with more draws ``r`` positions
uniformly at random, independently of the data, the same positions every round) and sends their
histogram on a public grid of ``m`` bins ``(e_{j-1}, e_j]``
(:func:`~privcal.metrics.conformity.score_histogram`): by default :func:`tail_edges`, geometric
in ``1 - s`` from 1 down to ``floor`` (few bins, all where a conservative threshold lies: the
margin grows as ``sqrt(m)``). The server receives the (noisy) sum,
accumulates it over the ``T`` rounds and computes the threshold from ``H~ = sum / T`` alone:

* ``U~_j = sum_{i > j} H~_i``, ``N~ = U~_0``; ``t = sqrt(m v)`` with ``v`` the public noise
  variance of one count of ``H~`` (``T`` releases of std ``sigma`` each: ``v = sigma^2 / T``;
  distributed: each release's variance with all ``K`` shares, an upper bound);
* ``J = min{j : U~_j <= alpha (N~ + 1) - 1 - t}`` (``m``, the full set, when none):
  :func:`~privcal.conformal.private.sources.pooled_threshold` with ``guard=0``; the sets are
  ``{y : S(x, y) <= e_J}``. Without DP ``v = 0``: split conformal rounded up to the grid.

**Privacy (user level).** Neighbours: one federation holds one more client (all its rows) than
the other. A client's payload is the histogram of at most ``r`` scores: non-negative integer
counts summing to at most ``r``, so its L1 norm is at most ``r`` and its L2 norm at most ``r``
(all scores in one bin); :meth:`FedConformal.clip` scales a payload to L2 norm ``r`` in any case
(a no-op for a client that honoured the cap). The summed histogram has L2 sensitivity ``r``
(:data:`~privcal.federated.payloads.SCORE_HISTOGRAM`), one Gaussian mechanism per round with
std ``r s``, ``s`` the noise multiplier of :mod:`privcal.federated.dp`; the rounds compose in
zCDP (trusted: exact Gaussian composition) to the run's user-level ``(epsilon, delta)``, and
under ``aggregation="distributed"`` the noise is the clients' discrete Gaussian shares summed
by the secure sum (integer counts at a power-of-two scale encode exactly). The threshold and
every set are post-processing. Public: ``K``, ``T``, ``p``, ``r``, ``m`` and the grid,
``alpha``, the score function and the model; no client's row count is released.

**Coverage (Theorem F).** Let the pooled used rows (``n`` of them, at most ``K r``; ``n`` stays
private) and a test point be exchangeable (every client's rows an i.i.d. sample of one
distribution with the partition independent of the scores; under label skew the test point
must follow the mixture the capped rows are drawn from), and let the noise of ``H~`` be
independent of the data, independent across bins and symmetric with variance at most ``v``
(a sum of continuous or discrete Gaussians, averaged over rounds: it is). Then

``P(S_{n+1} <= e_J) >= 1 - alpha - r_n``, with ``r_n = alpha^2 m v / (4 (n + 1)(alpha (n + 1)
- t))`` when ``alpha (n + 1) > t`` and ``r_n = (1 + alpha / 2) t / (n + 1) - alpha`` otherwise.

*Proof.* Theorem S (:mod:`privcal.conformal.private.sources`) with ``H~`` for its pooled
counts: its argument uses only the exchangeability of the ``n`` scores with the test score and
noise independent of the data, independent across bins and symmetric, whose variance bounds
``E|S_0| <= t``; it gives ``P(S_{n+1} > e_J) <= alpha + E[(t - alpha (n + 1) - alpha S_0)^+] /
(n + 1)``, and ``J'' <= J`` holds with no guard. For ``alpha (n + 1) > t``,
``(z - c)^+ <= z^2 / (4 c)`` gives the first ``r_n`` (Theorem S's); otherwise
``(t - alpha (n + 1) - alpha S_0)^+ <= t - alpha (n + 1) + alpha (-S_0)^+`` and
``E(-S_0)^+ = E|S_0| / 2 <= t / 2`` give the second. The guard of Theorem S
(``N~ >= 3 t / alpha``, for its uniform bound ``alpha^3 / 8``) is dropped: it needs
``n >= 3 t / alpha``, i.e. ``alpha K r > 3 sqrt(m) r s``, which no federation below about
``30 sqrt(m) s / alpha`` clients meets. The rule's signal is ``alpha n ~ alpha K r`` against a
margin ``sqrt(m) r s``: ``r`` cancels, so the sets depend on ``K``, ``epsilon`` and ``m``, and
``r`` only needs to be small enough that most clients hold ``r`` rows.
"""

from __future__ import annotations

import secrets
import warnings
from typing import Any, ClassVar

import numpy as np

from privcal import __version__
from privcal._params import check_int, check_option, check_probability
from privcal.calibrators.base import fitted_field_error
from privcal.conformal._base import ConformalBase, FullSetWarning, NotFittedError
from privcal.conformal.private.sources import noise_margin, pooled_threshold
from privcal.conformal.quantile import bin_edges
from privcal.federated.dp import DPConfig, NoiseGroup, clip_rows_l2
from privcal.federated.methods.base import FedMethod, State
from privcal.federated.payloads import SCORE_HISTOGRAM
from privcal.metrics.conformity import conformity, score_histogram
from privcal.metrics.statistics import softmax
from privcal.privacy.measurement import Measurement

__all__ = [
    "FED_CONFORMAL_BINS",
    "FED_CONFORMAL_FLOOR",
    "FED_CONFORMAL_ROWS",
    "FedConformal",
    "FedConformalAPS",
    "FedConformalLAC",
    "FederatedConformalSets",
    "cap_rows",
    "tail_edges",
]

#: ``m`` by default (:func:`tail_edges`): measured on CIFAR-100 (bench/federated_conformal.py,
#: m in 2..6 and floor in 1e-2..1e-4; the margin ``sqrt(m v)`` leaves few bins worth having).
FED_CONFORMAL_BINS = 4
#: The default grid's smallest ``1 - s`` edge.
FED_CONFORMAL_FLOOR = 1e-4
#: ``r`` by default: most clients of a 100-client federation of 5000 rows hold 5 rows.
FED_CONFORMAL_ROWS = 5


def tail_edges(m: int, floor: float) -> np.ndarray:
    """Edges ``0, 1 - floor^(1/(m-1)), ..., 1 - floor, 1``: ``m`` bins geometric in ``1 - s``
    (for LAC, the smallest probability a set keeps), public from ``m`` and ``floor``."""
    j = np.arange(1, m)
    return np.concatenate([[0.0], 1.0 - floor ** (j / (m - 1)), [1.0]])


def cap_rows(n_rows: int, cap: int, seed: int) -> np.ndarray:
    """The positions of the at most ``cap`` rows a client keeps: ``cap`` of ``range(n_rows)``
    drawn uniformly at random from ``seed`` (independent of the data; the same every round)."""
    if n_rows <= cap:
        return np.arange(n_rows)
    return np.sort(np.random.default_rng(seed).permutation(n_rows)[:cap])


class FederatedConformalSets(ConformalBase):
    """The fitted sets of a federated conformal run: ``{y : S(x, y) <= threshold_}``.

    Attributes
    ----------
    threshold_ : float
        ``e_J`` (1.0, every label, when ``J = m``).
    bin_ : int
        ``J``.
    edges_ : ndarray
        The public grid.
    margin_ : float
        ``t``.
    noise_variance_ : float
        ``v`` (0 without DP).
    counts_ : ndarray
        ``H~``: the released (noisy) histogram averaged over rounds.
    n_classes_ : int
    """

    _owner = "FederatedConformalSets"
    #: The fitted attributes :meth:`to_dict` saves (what a run releases, besides ``counts_``).
    _fitted_attributes = ("threshold_", "bin_", "edges_", "margin_", "noise_variance_")

    def __init__(self, score: str = "lac", alpha: float = 0.1) -> None:
        self.score = score
        self.alpha = alpha
        self.calibrator = None
        self.seed = None

    def _fitted_names(self) -> tuple[str, ...]:
        """The released attributes (what :func:`~privcal.calibrators.summary.release_summary`
        reads)."""
        return self._fitted_attributes

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description (``sets.json`` of a Flower run): class, ``score`` and
        ``alpha``, and the fitted state (``counts_`` included: the released histogram)."""
        if not hasattr(self, "threshold_"):
            raise NotFittedError(f"This {self._owner} is not fitted yet: nothing to save.")
        fitted = {a: getattr(self, a) for a in (*self._fitted_attributes, "n_classes_")}
        fitted["edges_"] = np.asarray(self.edges_, dtype=np.float64).tolist()
        fitted["counts_"] = np.asarray(self.counts_, dtype=np.float64).tolist()
        return {
            "class": self._owner,
            "privcal_version": __version__,
            "params": {"score": self.score, "alpha": float(self.alpha)},
            "fitted": {k: v.item() if isinstance(v, np.generic) else v for k, v in fitted.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FederatedConformalSets:
        """Restore sets saved with :meth:`to_dict`; a damaged description is a ``ValueError``
        naming its field (edges increasing from 0 to 1, ``bin_`` a bin of them, ``threshold_``
        its edge, or 1 for the full set)."""
        if not isinstance(data, dict) or data.get("class") != cls._owner:
            got = data.get("class") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"The description is not a saved {cls._owner} (class {got!r}).")
        params, fitted = data.get("params"), data.get("fitted")
        if not isinstance(params, dict) or not isinstance(fitted, dict):
            raise ValueError(f"A saved {cls._owner} needs 'params' and 'fitted' objects.")
        sets = cls(check_option(params.get("score"), "score", cls._owner, ("lac", "aps")))
        sets.alpha = check_probability(params.get("alpha"), "alpha", cls._owner)
        missing = [k for k in (*cls._fitted_attributes, "n_classes_", "counts_") if k not in fitted]
        if missing:
            raise ValueError(f"The field 'fitted.{missing[0]}' of a saved {cls._owner} is missing.")
        edges = np.asarray(fitted["edges_"], dtype=np.float64)
        m = edges.size - 1
        if m < 1 or edges[0] != 0.0 or edges[-1] != 1.0 or not np.all(np.diff(edges) > 0):
            raise fitted_field_error(sets, "edges_", "edges increasing from 0 to 1", edges)
        j, c = fitted["bin_"], fitted["n_classes_"]
        if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j <= m:
            raise fitted_field_error(sets, "bin_", f"an integer in [0, {m}]", j)
        if isinstance(c, bool) or not isinstance(c, int) or c < 2:
            raise fitted_field_error(sets, "n_classes_", "an integer >= 2", c)
        if fitted["threshold_"] != (float(edges[j]) if j < m else 1.0):
            raise fitted_field_error(sets, "threshold_", "the edge of bin_", fitted["threshold_"])
        counts = np.asarray(fitted["counts_"], dtype=np.float64)
        if counts.shape != (m,) or not np.all(np.isfinite(counts)):
            raise fitted_field_error(sets, "counts_", f"{m} finite counts", fitted["counts_"])
        for name in ("margin_", "noise_variance_"):
            v = fitted[name]
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < np.inf:
                raise fitted_field_error(sets, name, "a finite number >= 0", v)
        sets.threshold_, sets.bin_, sets.edges_ = float(fitted["threshold_"]), j, edges
        sets.margin_ = float(fitted["margin_"])
        sets.noise_variance_ = float(fitted["noise_variance_"])
        sets.n_classes_, sets.counts_ = c, counts
        return sets


class FedConformal(FedMethod):
    """Federated conformal prediction sets from clients' capped score histograms (module
    docstring: the rule, the privacy and coverage derivations).

    Parameters
    ----------
    score : {"lac", "aps"}, default="lac"
    alpha : float, default=0.1
    n_bins : int or array_like, default=4
        ``m``: :func:`tail_edges` with ``floor``; or the edges themselves, ``0 = e_0 < ... <
        e_m = 1`` (:func:`~privcal.conformal.quantile.bin_edges`).
    floor : float, default=1e-4
        The default grid's smallest ``1 - s`` edge, in ``(0, 1)``.
    row_cap : int, default=5
        ``r``: the most rows a client uses (public).
    seed : int or None, default=None
        Seeds the choice of a client's ``r`` rows (``None``: drawn once from the OS).
    """

    name: ClassVar[str] = "conformal"
    kind: ClassVar[str] = "conformal"
    releases: ClassVar[str] = "sets"

    def __init__(
        self,
        score: str = "lac",
        alpha: float = 0.1,
        n_bins: Any = FED_CONFORMAL_BINS,
        row_cap: int = FED_CONFORMAL_ROWS,
        seed: int | None = None,
        floor: float = FED_CONFORMAL_FLOOR,
    ) -> None:
        owner = type(self).__name__
        self.score = check_option(score, "score", owner, ("lac", "aps"))
        self.alpha = check_probability(alpha, "alpha", owner)
        self.row_cap = check_int(row_cap, "row_cap", owner, low=1)
        self.seed = secrets.randbits(63) if seed is None else check_int(seed, "seed", owner, low=0)
        self.floor = check_probability(floor, "floor", owner)
        edges = bin_edges(n_bins, owner)  # validates an int or the edges
        if isinstance(n_bins, int | np.integer):
            edges = tail_edges(int(n_bins), self.floor)
        self.n_bins, self.edges = n_bins, edges
        self.m = int(edges.size - 1)

    def init(self, c: int) -> State:
        return {"hist": np.zeros(self.m), "rounds": np.zeros(1), "variance": np.zeros(1)}

    def payload_shape(self, c: int) -> tuple[int, ...]:
        return (self.m,)

    def client_step(self, state: State, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The histogram of the scores of the client's at most ``r`` kept rows."""
        keep = cap_rows(int(z.shape[0]), self.row_cap, self.seed)
        z, y = np.asarray(z)[keep], np.asarray(y)[keep]
        s = conformity(self.score, softmax(z))[np.arange(y.size), y]
        return score_histogram(s, self.edges)

    def clip(self, payload: np.ndarray, dp: DPConfig) -> np.ndarray:
        """Each histogram (last axis) to L2 norm ``r``: unchanged when the cap was applied."""
        return clip_rows_l2(np.asarray(payload, dtype=np.float64), float(self.row_cap))

    def payload_bound(self, dp: DPConfig) -> float:
        return float(self.row_cap)

    def noise_groups(self, dp: DPConfig, shape: tuple[int, ...]) -> list[NoiseGroup]:
        """One block, the whole histogram: L2 sensitivity ``r``, std ``r s``."""
        r = float(self.row_cap)
        sens = SCORE_HISTOGRAM.sensitivity_at(clip=r)
        return [NoiseGroup(np.arange(int(np.prod(shape))), sens, r * dp.multiplier(1), r)]

    def payload_measurements(self) -> tuple[Measurement, ...]:
        return (SCORE_HISTOGRAM,)

    def report_terms(self, dp: DPConfig, c: int, cohort: float) -> dict[str, Any]:
        sigma = self.row_cap * dp.multiplier(1)
        return {
            "what": f"client score histograms ({self.score}, {self.m} public bins)",
            "measurement": SCORE_HISTOGRAM,
            "clip": float(self.row_cap),
            "mechanism": f"gaussian on the summed histogram (std r s = {sigma:.6g})",
            "clips": f"row cap r={self.row_cap} per client (histogram L1 and L2 norm <= r)",
            "cohort": "histograms are summed, never averaged: no denominator",
        }

    def _track_noise(self, new: State, dp: DPConfig, shape: tuple[int, ...]) -> None:
        """Add the per-count variance of one release: ``sigma^2`` (trusted) or the sum of all
        ``K`` clients' shares (distributed; fewer uploads only lower it)."""
        group = self.noise_groups(dp, shape)[0]
        variance = float(group.sigma) ** 2
        if dp.aggregation == "distributed":
            plan = dp.plan(group)
            variance = float(plan.law.variance(dp.n_clients)) / plan.encoding.scale**2
        new["variance"] = new["variance"] + variance

    def calibrator(self, state: State, c: int) -> FederatedConformalSets:
        rounds = max(float(np.asarray(state["rounds"])[0]), 1.0)
        counts = np.asarray(state["hist"], dtype=np.float64) / rounds
        v = float(np.asarray(state["variance"])[0]) / rounds**2
        margin = noise_margin(self.m, v)
        j = pooled_threshold(counts, self.alpha, margin, guard=0.0)
        sets = FederatedConformalSets(self.score, self.alpha)
        sets.threshold_ = float(self.edges[j]) if j < self.m else 1.0
        sets.bin_, sets.edges_, sets.margin_ = j, self.edges, margin
        sets.noise_variance_, sets.n_classes_, sets.counts_ = v, int(c), counts
        if sets.threshold_ >= 1.0:
            grid = isinstance(self.n_bins, int | np.integer)  # else the edges were given
            below = f"1 - {1.0 - float(self.edges[-2]):.3g}" + (
                f", floor={self.floor:g}" if grid else ""
            )
            finer = "a smaller floor (e.g. 1e-10)" if grid else "edges closer to 1"
            aps = (
                f" An over-confident network puts APS scores within 1e-9 of 1: {finer} or the "
                "LAC score can help."
                if self.score == "aps"
                else ""
            )
            warnings.warn(
                f"Every federated {self.score.upper()} set holds every label: no bin below the "
                f"grid's top edge ({below}) holds 1 - alpha of the "
                "released counts beyond the noise margin. More clients, rows a client (up to "
                f"row_cap) or a larger epsilon or alpha give sets that are not full.{aps}",
                FullSetWarning,
                stacklevel=2,
            )
        return sets

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha:g}, m={self.m}, row_cap={self.row_cap})"


class FedConformalLAC(FedConformal):
    """``"conformal-lac"``: :class:`FedConformal` with the LAC score."""

    name: ClassVar[str] = "conformal-lac"

    def __init__(self, **params: Any) -> None:
        super().__init__(**{**params, "score": "lac"})


class FedConformalAPS(FedConformal):
    """``"conformal-aps"``: :class:`FedConformal` with the non-randomised APS score."""

    name: ClassVar[str] = "conformal-aps"

    def __init__(self, **params: Any) -> None:
        super().__init__(**{**params, "score": "aps"})

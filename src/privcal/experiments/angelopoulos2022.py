"""Seed 002's evaluation (Angelopoulos et al. 2022, Fig. 4-7): private vs split conformal sets.

For every data set, score (LAC, non-randomised APS) and ``alpha``, ``R`` random splits of the
pool into ``n`` calibration and ``N - n`` test points (the same splits for every setting) are
evaluated under

* ``split``: non-private split conformal (:class:`~privcal.conformal.SplitConformal`);
* the **epsilon sweep** (Fig. 6 analogue): :class:`~privcal.conformal.PrivateConformal` with
  ``method="angelopoulos2022"`` (the paper's Algorithms 3-5, not privcal's default), the
  automatic ``m*`` (Algorithm 5; ``m_grid="paper-text"`` or ``"authors-code"``, see
  :func:`~privcal.conformal.optimal_bins`) and ``gamma*`` (Eq. 9-10) for each ``epsilon``;
* the **bins sweep** (Fig. 5 analogue): ``PrivateConformal`` at ``epsilon = bins_epsilon``
  (1, as in Fig. 5) for each fixed ``m`` (``gamma*`` for that ``m``).

Per split it records the test coverage, the mean set size, the fraction of test points whose
set is the full label set, and the threshold; per setting the mean coverage (with its standard
error over splits), Theorem 3's upper bound on the coverage (``p_max`` = the largest bin
frequency of the pool's true-label scores under the setting's ``m`` equal-width bins), the mean
set size and the fraction of full sets. Everything is computed exactly and vectorised over
splits by :class:`~privcal.conformal.simulate.SplitSimulator` (the law of the estimators, not an
approximation).

Outputs (``out_dir``): ``angelopoulos2022.csv`` (tidy, one row per data set / score / alpha /
epsilon / bins / split), ``summary.csv`` (one row per setting), ``summary.md`` (the tables) and
``figures/<dataset>_<score>_a<alpha>.png`` (coverage and set-size histograms over splits, one
row of panels per sweep).

The default data are the shared real classifier outputs (``wideresnet-16-4-cifar-10`` and
``densenet-bc-100-cifar-100`` from netcal, cleanlab's cross-validated ``cifar10``) and
:func:`privcal.data.digits_shift` pooled at severity 5.
"""

from __future__ import annotations

import csv
import math
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privcal._params import EPSILON, check_int, check_option, check_probability
from privcal.conformal import aps_scores, coverage_upper_bound, lac_scores, optimal_bins
from privcal.conformal.private import M_GRIDS
from privcal.conformal.simulate import SimulationResult, SplitSimulator
from privcal.experiments._legacy import resolve
from privcal.experiments._progress import Progress, derived_seed, report
from privcal.metrics.statistics import bin_indices, softmax
from privcal.privacy import SeededNoise
from privcal.report import format_value, markdown_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "DIGITS",
    "QUICK",
    "SHARED_FILES",
    "Angelopoulos2022Config",
    "Angelopoulos2022Result",
    "Setting",
    "load_datasets",
    "run",
]

#: Shared data files (relative to :func:`privcal.data.shared_data_dir`) used by default.
SHARED_FILES: dict[str, str] = {
    "wideresnet-16-4-cifar-10": "netcal-cifar/wideresnet-16-4-cifar-10.npz",
    "densenet-bc-100-cifar-100": "netcal-cifar/densenet-bc-100-cifar-100.npz",
    "cleanlab-cifar10": "cleanlab-heldout/cifar10",
}
#: Name of the digits_shift pool (severity 5) in the outputs.
DIGITS = "digits_shift-sev5"
#: Default numbers of bins of the bins sweep (Fig. 5 analogue).
BINS: tuple[int, ...] = (100, 1000, 10_000, 100_000, 1_000_000)
#: Bins of the sweep under ``quick``.
QUICK_BINS: tuple[int, ...] = (100, 10_000, 1_000_000)
_SCORES = {"lac": lac_scores, "aps": aps_scores}
_CSV_FIELDS = (
    *"dataset score alpha sweep method epsilon bins gamma level split".split(),
    *"coverage size full threshold".split(),
)


@dataclass(frozen=True)
class Setting:
    """Summary of one (data set, score, alpha, method) setting over the splits.

    ``sweep`` is ``"split"`` (non-private), ``"epsilon"`` (automatic ``m*``) or ``"bins"``
    (fixed ``m``); ``epsilon`` and ``bins`` are ``nan`` / 0 for the non-private method. ``bound``
    is Theorem 3's upper bound (private) or ``1 - alpha + 1/(n+1)`` (split; valid without ties),
    ``inf`` when every set is full.
    """

    dataset: str
    score: str
    alpha: float
    sweep: str
    epsilon: float
    bins: int
    gamma: float
    level: float
    n: int
    splits: int
    coverage: float
    se: float
    bound: float
    size: float
    full: float

    @property
    def method(self) -> str:
        return "split" if self.sweep == "split" else "private"


@dataclass(frozen=True)
class Angelopoulos2022Config:
    """Settings of seed 002's protocol.

    Attributes
    ----------
    data : None, path, sequence of paths or mapping
        See :func:`load_datasets`.
    trials : int, default=1000
        Random calibration/test splits per data set (shared by every setting).
    alphas : sequence of float, default=(0.1,)
    epsilons : sequence of float, default=(0.5, 1, 5, 10)
        The epsilon sweep (automatic ``m*``).
    bins : sequence of int, default=(1e2, 1e3, 1e4, 1e5, 1e6)
        The bins sweep, at ``epsilon = bins_epsilon``.
    bins_epsilon : float, default=1.0
    scores : sequence of {"lac", "aps"}
    n_cal : int, default=5000
        Calibration points per split; ``min(n_cal, N // 2)`` for pools of ``N < 2 n_cal``.
    m_grid : {"paper-text", "authors-code"}, default="paper-text"
        How the epsilon sweep's ``m*`` is chosen (:func:`~privcal.conformal.optimal_bins`):
        the paper's text (App. C: 50 values from ``10^2`` to ``10^6``, smallest expected
        threshold) or the authors' code, which made the paper's figures (``10^4`` to ``10^6``,
        smallest threshold of one noisy draw, seeded by ``seed``).
    """

    data: Any = None
    trials: int = 1000
    alphas: Sequence[float] = (0.1,)
    epsilons: Sequence[float] = (0.5, 1.0, 5.0, 10.0)
    bins: Sequence[int] = BINS
    bins_epsilon: float = 1.0
    scores: Sequence[str] = ("lac", "aps")
    n_cal: int = 5000
    m_grid: str = "paper-text"

    def quick(self) -> Angelopoulos2022Config:
        """The smoke run: at most 50 splits and the bins sweep :data:`QUICK_BINS` (if ``bins``
        is the default)."""
        bins = QUICK_BINS if tuple(self.bins) == BINS else self.bins
        return replace(self, trials=min(self.trials, 50), bins=bins)


#: The smoke run of the default settings (``privcal bench angelopoulos2022 --quick``).
QUICK = Angelopoulos2022Config().quick()


@dataclass
class Angelopoulos2022Result:
    """What :func:`run` returns: the per-setting summaries; :meth:`write` writes the files.

    ``records`` holds, per setting in run order, the setting, its per-split simulation and the
    per-split fraction of full sets (the rows of ``angelopoulos2022.csv`` and the figures).
    """

    settings: list[Setting]
    seconds: float
    n_rows: int
    files: dict[str, Path] = field(default_factory=dict)
    config: Angelopoulos2022Config = field(default_factory=Angelopoulos2022Config)
    seed: int = 0
    records: list[tuple[Setting, SimulationResult, np.ndarray]] = field(default_factory=list)

    def find(self, dataset: str, score: str, alpha: float, sweep: str, **kw: Any) -> Setting:
        """The setting with these keys (``epsilon=`` / ``bins=`` select within a sweep)."""
        keys = dict(dataset=dataset, score=score, alpha=alpha, sweep=sweep, **kw)
        for s in self.settings:
            if all(getattr(s, k) == v for k, v in keys.items()):
                return s
        raise KeyError((dataset, score, alpha, sweep, kw))

    def table_markdown(self) -> str:
        """The summary table (one row per setting) and the cost-of-privacy table."""
        return "\n".join(_summary_lines(self.settings))

    def write(self, out_dir: str | Path) -> Path:
        """Write ``angelopoulos2022.csv`` (one row per split), ``summary.csv``, ``summary.md``
        and ``figures/<dataset>_<score>_a<alpha>.png`` under ``out_dir`` (kept in
        :attr:`files`); return the Markdown path."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        split_rows = (row for record in self.records for row in _split_rows(*record))
        files = {"csv": _write_csv(out / "angelopoulos2022.csv", _CSV_FIELDS, split_rows)}
        # the per-split CSV's setting columns, then the summary over the splits
        names = [*_CSV_FIELDS[:9], "n", "splits", "coverage", "se", "bound", "size", "full"]
        summary = ([getattr(s, k) for k in names] for s in self.settings)
        files["summary_csv"] = _write_csv(out / "summary.csv", names, summary)
        curves: dict[tuple[str, str, float], list[tuple[Setting, SimulationResult]]] = {}
        for st, res, _ in self.records:
            curves.setdefault((st.dataset, st.score, st.alpha), []).append((st, res))
        figures = []
        for (name, score, alpha), items in curves.items():
            fig = histogram_figure(items, f"{name}, {score.upper()}, alpha={alpha:g}")
            figures.append(_save(fig, out / "figures" / f"{name}_{score}_a{alpha:g}.png"))
        files["summary_md"] = out / "summary.md"
        c = self.config
        lines = [
            "# Private conformal prediction (seed 002, Fig. 4-7 analogues)",
            "",
            f"- Splits per data set: R = {c.trials}; calibration points n = "
            f"min({c.n_cal}, N // 2); seed {self.seed}; {self.seconds:.1f} s.",
            f"- Bins sweep at epsilon = {c.bins_epsilon:g}; epsilon sweep with m* (Algorithm 5, "
            f"m_grid={c.m_grid!r}).",
            "- bound: Theorem 3's upper bound on the coverage (private; p_max from the pool's "
            "true-label scores) or 1 - alpha + 1/(n+1) (split). full: fraction of test sets that "
            "hold every label.",
            "",
            *_summary_lines(self.settings),
            "",
            "## Figures",
            "",
            *[f"![{p.stem}](figures/{p.name})" for p in figures],
            "",
        ]
        files["summary_md"].write_text("\n".join(lines), encoding="utf-8")
        self.files = files | {f"figure{i}": p for i, p in enumerate(figures)}
        return files["summary_md"]


# --------------------------------------------------------------------------------- data
def load_datasets(data: Any = None, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{name: (logits, labels)}`` for :func:`run`.

    Parameters
    ----------
    data : None, path, sequence of paths or mapping
        ``None``: the :data:`SHARED_FILES` that exist plus ``digits_shift(seed).pool(5)``; paths
        are read with :func:`~privcal.data.read_scores` (named by their stem); a mapping is used
        as is.
    seed : int
        Seed of :func:`~privcal.data.digits_shift`.
    """
    from privcal.data import digits_shift, read_scores, shared_data_dir

    if isinstance(data, Mapping):
        return {str(k): (np.asarray(v[0]), np.asarray(v[1])) for k, v in data.items()}
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if data is None:
        shared = shared_data_dir()
        paths = [] if shared is None else [(k, shared / v) for k, v in SHARED_FILES.items()]
        for name, path in paths:
            if path.exists() or path.with_name(path.name + "_probs.npy").exists():
                sc = read_scores(path)
                assert sc.logits is not None
                out[name] = (sc.logits, sc.labels)
        z, y, _ = digits_shift(seed).pool(5)
        out[DIGITS] = (np.asarray(z), np.asarray(y))
        return out
    items = [data] if isinstance(data, str | Path) else list(data)
    for item in items:
        path = Path(item)
        sc = read_scores(path)
        if sc.logits is None:
            raise ValueError(
                f"{str(path)!r} holds top-label scores only: conformal sets need the full "
                "probability vector."
            )
        name = path.name.removesuffix(path.suffix) if path.suffix else path.name
        out[name] = (sc.logits, sc.labels)
    return out


# --------------------------------------------------------------------------------- core
def _full_fraction(
    res: SimulationResult, row_max: np.ndarray, sorted_max: np.ndarray, cal_max: np.ndarray
) -> np.ndarray:
    """Fraction of each split's test points whose set is full (``max_y S(x, y) <= t``)."""
    t = res.threshold
    pool_le = np.searchsorted(sorted_max, t, side="right")
    cal_le = (cal_max <= t[:, None]).sum(axis=1)
    return (pool_le - cal_le) / (row_max.size - cal_max.shape[1])


def _p_max(s_true: np.ndarray, m: int) -> float:
    edges = np.linspace(0.0, 1.0, m + 1)
    return float(np.bincount(bin_indices(s_true, m, edges), minlength=m).max() / s_true.size)


def run(
    config: Angelopoulos2022Config | Any = None,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    **settings: Any,
) -> Angelopoulos2022Result:
    """Run seed 002's evaluation protocol (see the module docstring).

    Parameters
    ----------
    config : Angelopoulos2022Config, optional
        The settings (defaults: the paper's; :data:`QUICK` for a smoke run). Keywords naming
        its fields override it. The old form ``run(data, R=..., quick=..., out_dir=...)`` still
        works (``R``: deprecated, use ``trials``; ``out_dir``: deprecated, use
        ``run(...).write(out_dir)``).
    seed : int, default=0
        Splits: ``SplitSimulator(seed=seed)``; noise: ``SeededNoise`` seeded by
        ``SeedSequence([seed, dataset, score, alpha, setting])``; digits_shift's seed.
    progress : callable, optional
        ``progress(description, completed, total)`` after each setting.
    """
    owner = "angelopoulos2022.run"
    quick = bool(settings.pop("quick", False))
    config, progress, out = resolve(
        Angelopoulos2022Config,
        config,
        settings,
        owner,
        progress,
        first="data",
        renames={"R": "trials"},
    )
    if quick:
        config = config.quick()
    config = _checked(config, owner)
    seed = check_int(seed, "seed", owner, low=0)
    start = time.perf_counter()
    datasets = load_datasets(config.data, seed)
    if not datasets:
        raise ValueError(f"{owner}: no data sets to evaluate.")
    plan: list[tuple[str, float, int | str]] = [("split", math.nan, 0)]
    plan += [("epsilon", e, "auto") for e in config.epsilons]
    plan += [("bins", config.bins_epsilon, m) for m in config.bins]
    total = len(datasets) * len(config.scores) * len(config.alphas) * len(plan)
    records: list[tuple[Setting, SimulationResult, np.ndarray]] = []

    def tick(description: str) -> None:
        report(progress, description, len(records), total)

    for di, (name, (z, y)) in enumerate(datasets.items()):
        records += _run_dataset(config, seed, di, name, z, y, plan, tick, owner)
    found = [st for st, _, _ in records]
    seconds, n_rows = time.perf_counter() - start, config.trials * len(records)
    result = Angelopoulos2022Result(
        found, seconds, n_rows, config=config, seed=seed, records=records
    )
    if out is not None:
        result.write(out)
    return result


def _checked(config: Angelopoulos2022Config, owner: str) -> Angelopoulos2022Config:
    """``config`` with its values checked (and sequences made tuples)."""
    for s in config.scores:
        if s not in _SCORES:
            raise ValueError(
                f"The 'scores' parameter of {owner} must hold values of {tuple(_SCORES)}. "
                f"Got {s!r} instead."
            )
    return replace(
        config,
        m_grid=check_option(config.m_grid, "m_grid", owner, M_GRIDS),
        trials=check_int(config.trials, "trials", owner, low=2),
        n_cal=check_int(config.n_cal, "n_cal", owner, low=1),
        alphas=tuple(check_probability(a, "alphas", owner) for a in config.alphas),
        epsilons=tuple(EPSILON.check(e, "epsilons", owner) for e in config.epsilons),
        bins_epsilon=EPSILON.check(config.bins_epsilon, "bins_epsilon", owner),
        bins=tuple(check_int(m, "bins", owner, low=2) for m in config.bins),
    )


def _run_dataset(
    config: Angelopoulos2022Config,
    seed: int,
    di: int,
    name: str,
    z: Any,
    y: Any,
    plan: Sequence[tuple[str, float, int | str]],
    tick: Callable[[str], None],
    owner: str,
) -> list[tuple[Setting, SimulationResult, np.ndarray]]:
    """Every (score, alpha, setting of ``plan``) of one data set, in order."""
    probs = softmax(np.asarray(z, dtype=np.float64))
    labels = np.asarray(y, dtype=np.int64)
    N = labels.size
    n = min(config.n_cal, N // 2)
    if n < 1:
        raise ValueError(f"{owner}: data set {name!r} has too few rows ({N}).")
    out: list[tuple[Setting, SimulationResult, np.ndarray]] = []
    for si, score in enumerate(config.scores):
        S = _SCORES[score](probs)
        tick(f"{name} {score}: splits")
        sim = SplitSimulator(S, labels, n=n, splits=config.trials, seed=seed)
        s_true = S[np.arange(N), labels]
        row_max = S.max(axis=1)
        sorted_max = np.sort(row_max)
        cal_max = row_max[sim.permutations[:, :n]]
        for ai, alpha in enumerate(config.alphas):
            for pi, (sweep, eps, m) in enumerate(plan):
                label = "split" if sweep == "split" else f"eps={eps:g} m={m}"
                tick(f"{name} {score} a={alpha:g} {label}")
                if sweep == "split":
                    res = sim.split(alpha)
                    bound = 1 - alpha + 1 / (n + 1) if res.level <= 1 else math.inf
                else:
                    noise = SeededNoise(derived_seed(seed, di, si, ai, pi))
                    if m == "auto" and config.m_grid != "paper-text":
                        m = optimal_bins(n, alpha, eps, seed=seed, m_grid=config.m_grid)
                    res = sim.private(alpha, eps, n_bins=m, noise=noise, method="angelopoulos2022")
                    bound = math.inf
                    if res.level < 1:
                        p_max = _p_max(s_true, res.n_bins)
                        bound = coverage_upper_bound(n, alpha, eps, res.n_bins, res.gamma, p_max)
                full = _full_fraction(res, row_max, sorted_max, cal_max)
                assert res.size is not None
                head = (name, score, alpha, sweep, eps, res.n_bins, res.gamma, res.level, n)
                tail = (config.trials, res.mean_coverage, res.se_coverage, bound, res.mean_size)
                out.append((Setting(*head, *tail, float(full.mean())), res, full))
    return out


# --------------------------------------------------------------------------------- output
def _split_rows(st: Setting, res: SimulationResult, full: np.ndarray) -> Iterator[tuple]:
    """The rows of ``angelopoulos2022.csv`` of one setting: one per split."""
    assert res.size is not None
    eps, gamma = (format_value(v, "exact", missing="") for v in (st.epsilon, st.gamma))
    head = (st.dataset, st.score, repr(st.alpha), st.sweep, st.method, eps, st.bins or "", gamma)
    cols = (res.coverage, res.size, full, res.threshold)
    for r in range(res.coverage.size):
        yield (*head, repr(st.level), r, *(repr(float(c[r])) for c in cols))


def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


_SUMMARY = "data set, score, alpha, sweep, epsilon, m, level, coverage ± SE, bound, set size, full"
_COST = "data set, score, alpha, epsilon, m*, split size, private size, ratio, full"


def _summary_lines(settings: Sequence[Setting]) -> list[str]:
    rows, cost = [], []
    split = {(b.dataset, b.score, b.alpha): b for b in settings if b.sweep == "split"}
    for s in settings:
        key = [s.dataset, s.score, f"{s.alpha:g}"]
        eps, m = ("", "") if s.sweep == "split" else (f"{s.epsilon:g}", str(s.bins))
        level, size, full = (f"{v:.4f}" for v in (s.level, s.size, s.full))
        bound = "inf" if math.isinf(s.bound) else f"{s.bound:.4f}"
        rows.append(
            [*key, s.sweep, eps, m, level, f"{s.coverage:.4f} ± {s.se:.4f}", bound, size, full]
        )
        if s.sweep == "epsilon":
            base = split[(s.dataset, s.score, s.alpha)].size
            ratios = (f"{v:.4f}" for v in (base, s.size, s.size / base))
            cost.append([*key, eps, m, *ratios, full])
    return [
        "## Coverage and set size (mean over splits)",
        "",
        *markdown_table(_SUMMARY.split(", "), rows),
        "",
        "## Cost of privacy (epsilon sweep, m*): private / split mean set size",
        "",
        *markdown_table(_COST.split(", "), cost),
    ]


def histogram_figure(items: Sequence[tuple[Setting, SimulationResult]], title: str) -> Figure:
    """Coverage and set-size histograms over splits: one row per sweep (epsilon, bins).

    Each panel overlays the non-private ``split`` histogram and one histogram per private
    setting; the dashed line marks ``1 - alpha``.
    """
    from matplotlib.figure import Figure

    base = [(s, r) for s, r in items if s.sweep == "split"]
    sweeps = [w for w in ("epsilon", "bins") if any(s.sweep == w for s, _ in items)]
    fig = Figure(figsize=(10, 3.2 * max(len(sweeps), 1)), layout="constrained")
    axes = fig.subplots(max(len(sweeps), 1), 2, squeeze=False)
    cov_edges = _edges(np.concatenate([r.coverage for _, r in items]))
    size_edges = _edges(np.concatenate([r.size for _, r in items if r.size is not None]))
    for row, sweep in enumerate(sweeps):
        group = base + [(s, r) for s, r in items if s.sweep == sweep]
        for s, r in group:
            if s.sweep == "split":
                lab = "split (non-private)"
            elif sweep == "epsilon":
                lab = f"ε={s.epsilon:g} (m*={s.bins})"
            else:
                lab = f"m={s.bins} (ε={s.epsilon:g})"
            kw: dict[str, Any] = {"histtype": "step", "linewidth": 1.4, "label": lab}
            axes[row, 0].hist(r.coverage, bins=cov_edges, **kw)
            if r.size is not None:
                axes[row, 1].hist(r.size, bins=size_edges, **kw)
        alpha = group[0][0].alpha
        axes[row, 0].axvline(1 - alpha, color="k", linestyle="--", linewidth=1)
        axes[row, 0].set_xlabel("coverage")
        axes[row, 1].set_xlabel("mean set size")
        axes[row, 0].set_ylabel(f"splits ({sweep} sweep)")
        axes[row, 1].legend(fontsize=7, loc="best")
    fig.suptitle(title)
    return fig


def _edges(values: np.ndarray, k: int = 40) -> np.ndarray:
    lo, hi = float(values.min()), float(values.max())
    pad = max((hi - lo) * 0.02, 1e-3 * max(abs(hi), 1.0))
    return np.linspace(lo - pad, hi + pad, k + 1)


def _save(fig: Figure, path: Path) -> Path:
    from privcal.plots import save_figure

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return save_figure(fig, path)

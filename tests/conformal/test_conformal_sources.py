"""Private conformal prediction across data sources (Theorem S) and per group (Mondrian)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcal.conformal import FullSetWarning, PrivateConformal, SplitConformal
from privcal.conformal.private.sources import (
    coverage_slack,
    noise_margin,
    pooled_threshold,
    suffix_counts,
)
from privcal.conformal.quantile import bin_edges
from privcal.metrics.conformity import score_histogram
from privcal.metrics.statistics import softmax
from privcal.privacy import BudgetExceededError, SeededNoise
from privcal.private import DataSource
from privcal.private.rows import row_digests, split_rows

# seeded noise throughout (reproducible); the warning itself is tested in tests/private
pytestmark = pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")


def _data(n: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels drawn from the model's own softmax (a calibrated model)."""
    rng = np.random.default_rng(seed)
    z = 2.0 * rng.normal(size=(n, c))
    p = softmax(z)
    y = (p.cumsum(1) > rng.random((n, 1))).argmax(1)
    return z, y


def _sources(z: np.ndarray, y: np.ndarray, k: int, seed: int, budget: float = 1.0) -> list:
    owner = np.random.default_rng(seed).integers(k, size=y.size)
    return [
        DataSource(z[owner == i], y[owner == i], budget=budget, noise=SeededNoise(seed * 100 + i))
        for i in range(k)
    ]


# ---------------------------------------------------------------------------- the statistic
def test_score_histogram_counts_each_score_once_in_its_bin() -> None:
    e = np.array([0.0, 0.25, 0.5, 1.0])
    assert score_histogram([0.0, 0.25, 0.26, 0.5, 0.51, 1.0, 0.1], e).tolist() == [3, 2, 2]


def test_source_answers_the_central_statistic_plus_laplace() -> None:
    z, y = _data(400, 5, 0)
    edges = bin_edges(16, "test", "logit")
    exact = score_histogram(1.0 - softmax(z)[np.arange(y.size), y], edges)
    noisy = [
        DataSource(z, y, budget=1.0, noise=SeededNoise(s)).score_histogram(edges, 1.0)
        for s in range(400)
    ]
    err = np.asarray(noisy) - exact
    # Laplace(1): mean 0 and variance 2 per count; 400 x 16 draws, SE of the mean 0.0177
    assert abs(err.mean()) < 4 * math.sqrt(2 / err.size)
    assert err.var() == pytest.approx(2.0, rel=0.08)


def test_split_sides_are_disjoint_and_charged_in_parallel() -> None:
    z, y = _data(2000, 4, 1)
    src = DataSource(z, y, budget=1.0, noise=SeededNoise(0))
    edges = bin_edges(8, "test", "logit")
    side0 = split_rows(src._digests, 7, 0.25)
    assert 0.22 < side0.mean() < 0.28  # 2000 rows at f = 0.25: SE 0.0097
    src.score_histogram(edges, 1.0, part=(7, 0.25, 0))
    src.score_histogram(edges, 1.0, part=(7, 0.25, 1))
    assert src.spent == pytest.approx(1.0)  # the sides hold disjoint rows
    assert src.privacy_report().epsilon == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError):
        src.score_histogram(edges, 0.5, part=(7, 0.25, 0))  # basic composition within a side
    with pytest.raises(BudgetExceededError):
        src.score_histogram(edges, 0.5)  # the whole data holds both sides


def test_sides_of_different_fractions_are_charged_in_full() -> None:
    """An aggregator that asks side 0 at fraction 0.9 and side 1 at 0.1 of one key reads the
    overlapping rows twice: the source charges both answers (basic composition)."""
    z, y = _data(500, 4, 11)
    src = DataSource(z, y, budget=1.5, noise=SeededNoise(0))
    edges = bin_edges(8, "test", "logit")
    src.score_histogram(edges, 1.0, part=(7, 0.9, 0))
    with pytest.raises(BudgetExceededError):
        src.score_histogram(edges, 1.0, part=(7, 0.1, 1))
    assert src.spent == pytest.approx(1.0)


def test_a_row_side_does_not_depend_on_the_other_rows() -> None:
    z, y = _data(300, 3, 2)
    d = row_digests(z, y)
    whole = split_rows(d, 11, 0.5)
    assert np.array_equal(split_rows(d[1:], 11, 0.5), whole[1:])  # remove one example


def test_bad_part_is_refused_before_any_spend() -> None:
    z, y = _data(100, 3, 3)
    src = DataSource(z, y, budget=1.0, noise=SeededNoise(0))
    with pytest.raises(ValueError, match="'part' parameter"):
        src.score_histogram(bin_edges(4, "t"), 0.5, part=(1, 1.5, 0))
    with pytest.raises(ValueError, match="'edges' parameter"):
        src.score_histogram([0.0, 0.7, 0.5, 1.0], 0.5)
    assert src.spent == 0.0


# ---------------------------------------------------------------------------- Theorem S
@pytest.mark.statistical
def test_theorem_s_coverage_holds_and_a_missing_margin_breaks_it() -> None:
    """Uniform scores: the coverage of the threshold e_J is e_J itself, so no test points.

    20000 seeded runs of n = 300 scores, m = 64 bins, Laplace noise of variance 2 (epsilon 1);
    the SE of the mean coverage is below 0.0006, the tolerance 3 SE.
    """
    rng = np.random.default_rng(0)
    runs, n, alpha = 20000, 300, 0.1
    edges = np.linspace(0.0, 1.0, 65)
    counts = np.stack([score_histogram(rng.random(n), edges) for _ in range(runs)])
    noisy = counts + rng.laplace(scale=1.0, size=counts.shape)
    t = noise_margin(64, 2.0)
    cover = np.array([edges[pooled_threshold(h, alpha, t)] for h in noisy])
    se = cover.std() / math.sqrt(runs)
    slack = coverage_slack(n, alpha, 64, 2.0)
    assert cover.mean() >= 1 - alpha - slack - 3 * se
    # the planted defect: noise of scale 4 (variance 32) with no margin under-covers
    louder = counts + rng.laplace(scale=4.0, size=counts.shape)
    loose = np.array([edges[pooled_threshold(h, alpha, 0.0)] for h in louder])
    assert loose.mean() < 1 - alpha - 3 * loose.std() / math.sqrt(runs)


def test_suffix_counts_and_the_rule_on_a_hand_example() -> None:
    h = np.array([5.0, 3.0, 2.0])
    assert suffix_counts(h).tolist() == [10.0, 5.0, 2.0, 0.0]
    # alpha (N + 1) - 1 - t = 0.5 * 11 - 1 - 0 = 4.5: U_1 = 5 > 4.5, U_2 = 2 <= 4.5
    assert pooled_threshold(h, 0.5, 0.0) == 2
    assert pooled_threshold(h, 0.5, 1.6) == 2  # 2.9, and N~ = 10 >= 3 t / alpha = 9.6
    assert pooled_threshold(h, 0.5, 1.7) == 3  # N~ = 10 < 10.2: too few scores, the full set


# ---------------------------------------------------------------------------- the estimator
@pytest.mark.parametrize("aggregation", ["local", "distributed"])
def test_fit_over_sources_charges_each_source_once(aggregation: str) -> None:
    z, y = _data(6000, 10, 4)
    srcs = _sources(z, y, 5, 4)
    pc = PrivateConformal(alpha=0.1, epsilon=1.0, aggregation=aggregation, noise=SeededNoise(0))
    pc.fit(sources=srcs)
    assert all(s.spent == pytest.approx(1.0) for s in srcs)
    rep = pc.privacy_report_
    assert rep.epsilon == pytest.approx(1.0) and rep.relation == "add/remove"
    assert len(rep.releases) == 2 * len(srcs)  # two stages, disjoint sides
    assert len(pc.aggregator_views_) == (2 if aggregation == "distributed" else 0)
    assert 0.0 < pc.threshold_ < 1.0 and pc.n_sources_ == 5
    sets = pc.predict_set(z[:50])
    assert sets.shape == (50, 10)


def test_sources_sets_are_close_to_the_central_private_sets() -> None:
    z, y = _data(12000, 10, 5)
    cal, test = slice(0, 7000), slice(7000, None)
    srcs = _sources(z[cal], y[cal], 10, 5)
    pc = PrivateConformal(alpha=0.1, epsilon=1.0, aggregation="distributed", noise=SeededNoise(1))
    pc.fit(sources=srcs)
    sc = SplitConformal(alpha=0.1).fit(z[cal], y[cal])
    size = pc.predict_set(z[test]).sum(1).mean()
    cover = pc.predict_set(z[test])[np.arange(5000), y[test]].mean()
    # one split: coverage within 3 SE (0.0042) of 0.9 or above, size within 8% of split conformal
    assert cover >= 0.9 - 3 * math.sqrt(0.09 / 5000)
    assert size <= 1.08 * sc.predict_set(z[test]).sum(1).mean()


def test_sources_refuse_what_they_cannot_do_before_spending() -> None:
    z, y = _data(2000, 5, 6)
    srcs = _sources(z, y, 3, 6)
    for params, match in [
        ({"score": "aps-randomized"}, "'lac' or 'aps'"),
        ({"method": "bounded-range"}, "applies to fits on arrays"),
        ({"threshold": 2}, "'threshold' parameter"),
        ({"epsilon": 0.0}, "'epsilon' parameter"),
        ({"alpha": 1.5}, "'alpha' parameter"),
    ]:
        with pytest.raises(ValueError, match=match):
            PrivateConformal(noise=SeededNoise(0), **params).fit(sources=srcs)
    with pytest.raises(BudgetExceededError):
        PrivateConformal(epsilon=2.0, noise=SeededNoise(0)).fit(sources=srcs)
    with pytest.raises(ValueError, match="not both"):
        PrivateConformal().fit(z, y, sources=srcs)
    with pytest.raises(ValueError, match="apply to fits over"):
        PrivateConformal(aggregation="distributed").fit(z, y)
    assert all(s.spent == 0.0 for s in srcs)


def test_too_little_data_over_sources_gives_full_sets_with_a_warning() -> None:
    z, y = _data(60, 5, 7)
    with pytest.warns(FullSetWarning, match="full label set"):
        pc = PrivateConformal(epsilon=0.1, noise=SeededNoise(0)).fit(sources=_sources(z, y, 3, 7))
    assert pc.threshold_ == math.inf and pc.predict_set(z).all()


# ---------------------------------------------------------------------------- Mondrian
@pytest.mark.statistical
def test_every_group_is_covered() -> None:
    """Groups = the predicted class; 20 seeded splits of 3000 calibration rows per group, 2000
    test rows a group: the SE of a group's mean coverage is about 0.0015, the tolerance 3 SE."""
    covers = []
    for r in range(20):
        z, y = _data(25000, 5, 100 + r)
        g = z.argmax(1)
        cal, test = slice(0, 15000), slice(15000, None)
        pc = PrivateConformal(alpha=0.1, epsilon=1.0, noise=SeededNoise(r))
        pc.fit(z[cal], y[cal], groups=g[cal])
        sets = pc.predict_set(z[test], groups=g[test])
        hit = sets[np.arange(10000), y[test]]
        covers.append([hit[g[test] == k].mean() for k in range(5)])
    mean = np.asarray(covers).mean(0)
    se = np.asarray(covers).std(0) / math.sqrt(20)
    assert np.all(mean >= 0.9 - 3 * se - 1e-9), (mean, se)


def test_groups_report_parallel_composition_and_refuse_bad_input() -> None:
    z, y = _data(4000, 3, 8)
    g = z.argmax(1)
    g[3880:3940], g[3940:] = 7, 8  # two groups of 60 rows (a threshold needs 96), 120 together
    with pytest.raises(ValueError, match=r"7 \(60 rows\), 8 \(60 rows\)"):
        PrivateConformal(noise=SeededNoise(0)).fit(z, y, groups=g)
    with pytest.raises(ValueError, match="one group label per calibration row"):
        PrivateConformal(noise=SeededNoise(0)).fit(z, y, groups=g[:-1])
    with pytest.warns(Warning, match="share one pooled threshold"):
        pc = PrivateConformal(noise=SeededNoise(0), small_groups="pool").fit(z, y, groups=g)
    rep = pc.privacy_report_
    assert rep.epsilon == pytest.approx(1.0) and rep.relation == "substitute"
    assert any("stays in its group" in term for term in rep.public)
    assert len(rep.releases) == 4  # three classes and the pooled small group
    with pytest.raises(ValueError, match="needs groups"):
        pc.predict_set(z[:5])
    with pytest.raises(ValueError, match="never saw"):
        pc.predict_set(z[:2], groups=[0, 99])
    assert pc.predict_set(z[:3], groups=g[:3]).shape == (3, 3)
    with pytest.raises(ValueError, match="fit had none"):
        PrivateConformal(noise=SeededNoise(0)).fit(z, y).predict_set(z[:2], groups=[0, 1])


def _partition(rows: dict, n: int) -> bool:
    """Whether the groups' row indices hold every row exactly once."""
    return bool(np.array_equal(np.sort(np.concatenate(list(rows.values()))), np.arange(n)))


def test_groups_partition_the_rows_and_an_overlap_is_seen() -> None:
    from privcal.conformal.groups import group_rows

    g = np.random.default_rng(0).integers(5, size=300)
    rows = group_rows(g, 300, "test")
    assert _partition(rows, 300)
    assert all(np.all(g[idx] == label) for label, idx in rows.items())
    # the defect the audit cannot resolve: group i indexed with <= (group 0 in every group)
    labels = list(rows)
    cumulative = {
        k: np.concatenate([rows[h] for h in labels[: i + 1]]) for i, k in enumerate(labels)
    }
    assert not _partition(cumulative, 300)


def test_sources_of_another_model_are_refused_before_any_spend() -> None:
    z, y = _data(3000, 5, 9)
    z4, y4 = _data(1000, 4, 10)
    srcs = [*_sources(z, y, 2, 9), DataSource(z4, y4, budget=1.0, noise=SeededNoise(5))]
    with pytest.raises(ValueError, match="classes"):
        PrivateConformal(noise=SeededNoise(0)).fit(sources=srcs)
    assert all(s.spent == 0.0 for s in srcs)


@pytest.mark.statistical
def test_groups_over_sources_cover_every_predicted_class() -> None:
    """Groups = the predicted class over 10 sources (distributed), 10 seeded fits of 20000
    calibration rows (about 4000 a class), 10000 test rows: a class's mean coverage over the
    fits has an SE near 0.002; the tolerance is 3 SE of the fits' spread."""
    covers = []
    for r in range(10):
        z, y = _data(30000, 5, 200 + r)
        srcs = _sources(z[:20000], y[:20000], 10, 200 + r)
        pc = PrivateConformal(alpha=0.1, aggregation="distributed", noise=SeededNoise(r))
        pc.fit(sources=srcs, groups="predicted")
        assert all(s.spent == pytest.approx(1.0) for s in srcs)  # one epsilon: the sides, groups
        assert len(pc.privacy_report_.releases) == 2 * len(srcs)  # parallel (one query a stage)
        sets = pc.predict_set(z[20000:])  # the groups are the predicted classes
        hit = sets[np.arange(10000), y[20000:]]
        g = z[20000:].argmax(1)
        covers.append([hit[g == k].mean() for k in range(5)])
    mean = np.asarray(covers).mean(0)
    se = np.asarray(covers).std(0) / math.sqrt(10)
    assert np.all(mean >= 0.9 - 3 * se - 1e-9), (mean, se)
    with pytest.raises(ValueError, match="'groups' parameter"):
        PrivateConformal(noise=SeededNoise(0)).fit(sources=srcs, groups=np.zeros(5))

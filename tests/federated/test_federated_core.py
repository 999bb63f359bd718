"""Unit tests of privcal.federated: partitions, methods, DP noise, simulator, bad input."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest

from privcal.calibrators import (
    BBQ,
    HistogramBinning,
    MatrixScaling,
    TemperatureScaling,
    VectorScaling,
    calibrator_from_dict,
)
from privcal.calibrators.temperature import fit_temperature_nll
from privcal.federated import (
    DPConfig,
    FedBBQ,
    FedOPVector,
    FedTemp,
    FedVector,
    clip_l2,
    clip_rows_l2,
    dirichlet_partition,
    expected_cohort,
    group_partition,
    iid_partition,
    noise_multiplier,
    simulate,
    split_clients,
    stratified_partition,
)
from privcal.federated.dp import validate_payload
from privcal.federated.methods import noise_dominance, temperature_newton
from privcal.metrics.statistics import class_histograms, softmax
from privcal.privacy import InsecureNoiseWarning, SeededNoise
from privcal.privacy.accounting import zcdp_epsilon, zcdp_rho
from privcal.private import NoiseDominatedWarning

# runs that pass SeededNoise on purpose (reproducible checks); their warning is tested below
pytestmark = pytest.mark.filterwarnings("ignore::privcal.privacy.InsecureNoiseWarning")


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = 3.0 * rng.normal(size=(800, 5))
    y = np.argmax(z + 2.0 * rng.normal(size=z.shape), axis=1)
    return z, y


# ------------------------------------------------------------------ partitions
def test_dirichlet_partition_is_a_partition_and_skewed(data) -> None:  # type: ignore[no-untyped-def]
    _, y = data
    parts = dirichlet_partition(y, n_clients=20, beta=0.1, seed=0)
    assert len(parts) == 20
    allidx = np.concatenate(parts)
    assert np.array_equal(np.sort(allidx), np.arange(y.size))
    # strong skew: the typical client is dominated by one class
    top_share = [np.bincount(y[p], minlength=5).max() / p.size for p in parts]
    assert np.median(top_share) > 0.6
    iid = dirichlet_partition(y, n_clients=20, beta=1000.0, seed=0)
    assert np.median([np.bincount(y[p], minlength=5).max() / p.size for p in iid]) < 0.45


def test_dirichlet_partition_is_reproducible(data) -> None:  # type: ignore[no-untyped-def]
    _, y = data
    a = dirichlet_partition(y, 10, 0.3, seed=4)
    b = dirichlet_partition(y, 10, 0.3, seed=4)
    assert all(np.array_equal(u, v) for u, v in zip(a, b, strict=True))


@pytest.mark.parametrize("k", [2, 5, 7])
def test_stratified_partition_keeps_each_class_share(data, k: int) -> None:  # type: ignore[no-untyped-def]
    _, y = data
    parts = stratified_partition(y, n_clients=k, seed=1)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(y.size))
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == y.size
    counts = np.bincount(y, minlength=5)
    for p in parts:  # every class: floor or ceil of its count / k in every part
        got = np.bincount(y[p], minlength=5)
        assert np.all((got == counts // k) | (got == -(-counts // k))), (got, counts)
    again = stratified_partition(y, n_clients=k, seed=1)
    assert all(np.array_equal(u, v) for u, v in zip(parts, again, strict=True))
    other = stratified_partition(y, n_clients=k, seed=2)
    assert not all(np.array_equal(u, v) for u, v in zip(parts, other, strict=True))


def test_stratified_partition_refuses_more_clients_than_rows() -> None:
    with pytest.raises(ValueError, match="'n_clients' parameter of stratified_partition"):
        stratified_partition(np.array([0, 1, 1]), n_clients=4)


def test_other_partitions() -> None:
    parts = iid_partition(10, 3, seed=0)
    assert [p.size for p in parts] == [4, 3, 3]
    g = group_partition(np.array(["b", "a", "b", "c"]))
    assert [p.tolist() for p in g] == [[1], [0, 2], [3]]
    cal, test = split_clients([np.arange(10), np.arange(10, 13)], 0.5, seed=0)
    assert [c.size for c in cal] == [5, 2] and [t.size for t in test] == [5, 1]
    assert set(cal[0]).isdisjoint(test[0])


@pytest.mark.parametrize("beta", [0.0, -1.0, float("nan")])
def test_bad_beta(beta: float, data) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="'beta' parameter of dirichlet_partition"):
        dirichlet_partition(data[1], 10, beta)


def test_more_clients_than_examples() -> None:
    with pytest.raises(ValueError, match="'n_clients' parameter of dirichlet_partition"):
        dirichlet_partition(np.array([0, 1, 1]), n_clients=4, beta=1.0)


# ------------------------------------------------------------------ DP pieces
def test_clipping() -> None:
    x = np.array([3.0, 4.0])
    np.testing.assert_allclose(clip_l2(x, 1.0), [0.6, 0.8])
    np.testing.assert_allclose(clip_l2(x, 10.0), x)
    rows = clip_rows_l2(np.array([[3.0, 4.0], [0.0, 0.5]]), 1.0)
    np.testing.assert_allclose(rows, [[0.6, 0.8], [0.0, 0.5]])


def test_sigma_is_lemma_b7() -> None:
    rho = zcdp_rho(1.0, 1e-5)
    # Lemma B.7 scaling: C sqrt(T / (2 rho)); binning: C sqrt(2 c T / (2 rho))
    assert noise_multiplier(1.0, 1e-5, 12) == pytest.approx(math.sqrt(12 / (2 * rho)), rel=1e-8)
    assert noise_multiplier(1.0, 1e-5, 12, 2 * 10) == pytest.approx(
        math.sqrt(2 * 10 * 12 / (2 * rho)), rel=1e-8
    )
    # Lemma B.3 (closed form of delta at the optimal alpha) gives delta <= 1e-5 at eps = 1
    alphas = np.linspace(1.001, 200, 200000)
    log_delta = (
        (alphas - 1) * (alphas * rho - 1.0) - np.log(alphas - 1) + alphas * np.log1p(-1 / alphas)
    )
    assert np.exp(log_delta.min()) <= 1e-5 * (1 + 1e-6)
    assert zcdp_epsilon(rho, 1e-5) <= 1.0


def test_sigma_matches_dp_accounting_within_1_percent() -> None:
    """Independent computation: dp_accounting's RDP accountant on T Gaussian events."""
    import dp_accounting
    from dp_accounting import rdp

    def eps(z: float) -> float:
        acc = rdp.RdpAccountant(orders=list(np.linspace(1.01, 64, 4000)))
        acc.compose(dp_accounting.GaussianDpEvent(z), 12)
        return float(acc.get_epsilon(1e-5))

    lo, hi = 1.0, 100.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps(mid) > 1.0 else (lo, mid)
    ours = noise_multiplier(1.0, 1e-5, 12)
    assert ours == pytest.approx(hi, rel=0.01)


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"clip": 0.0}, "clip"),
        ({"clip_pos": -1.0}, "clip_pos"),
        ({"clip_neg": 0.0}, "clip_neg"),
        ({"rounds": 0}, "rounds"),
        ({"delta": 1.0}, "delta"),
        ({"epsilon": 0.0}, "epsilon"),
    ],
)
def test_dpconfig_rejects_bad_values(kw: dict, name: str) -> None:
    args = {"epsilon": 1.0, "delta": 1e-5, "rounds": 3, "noise": SeededNoise(0), **kw}
    with pytest.raises(ValueError, match=f"'{name}' parameter of DPConfig"):
        DPConfig(**args)


def test_validate_payload_logs_and_rejects(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="privcal.federated"):
        assert validate_payload(np.ones(3), (2,), "c1") is None
        assert validate_payload(np.array([1.0, np.nan]), (2,), "c2") is None
        assert validate_payload(np.array([1.0, 2.0]), (2,), "c3") is not None
    assert "client c1: shape (3,)" in caplog.text and "client c2" in caplog.text


# ------------------------------------------------------------------ methods
def test_temperature_newton_matches_central_fit(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    groups = np.repeat([0, 1], [300, 500])
    beta = temperature_newton(z, y, groups, 2, 1.0, 100, (0.05, 20.0))
    for k, sl in enumerate([slice(0, 300), slice(300, 800)]):
        t = fit_temperature_nll(z[sl], y[sl], (0.05, 20.0))
        assert 1 / beta[k] == pytest.approx(t, rel=1e-7)


def test_fedtemp_averaging_one_client_equals_central(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    cal, _ = simulate("fedtemp-averaging", z, y, [np.arange(z.shape[0])], rounds=1)
    assert isinstance(cal, TemperatureScaling)
    assert cal.temperature_ == pytest.approx(TemperatureScaling().fit(z, y).temperature_, rel=1e-7)


def test_fedtemp_newton_under_label_skew_equals_central_fit_on_the_union(data) -> None:  # type: ignore[no-untyped-def]
    """Newton on summed statistics is the central Newton iteration: skew does not matter,
    while averaging the clients' own temperatures lands elsewhere."""
    z, y = data
    parts = dirichlet_partition(y, 20, 0.1, seed=0)
    central = TemperatureScaling().fit(z, y).temperature_
    cal, hist = simulate("fedtemp", z, y, parts, rounds=12)
    assert cal.temperature_ == pytest.approx(central, rel=1e-9)
    assert hist[-1]["n_clients"] == 20
    avg, _ = simulate("fedtemp-averaging", z, y, parts, rounds=12)
    assert abs(avg.temperature_ / central - 1.0) > 0.05


@pytest.mark.parametrize(
    ("method", "cls"), [("fedvector", VectorScaling), ("fedmatrix", MatrixScaling)]
)
def test_newton_vector_and_matrix_converge_to_the_central_fit(method: str, cls: type, data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    parts = dirichlet_partition(y, 10, 0.1, seed=0)
    cal, _ = simulate(method, z, y, parts, rounds=20)
    assert isinstance(cal, cls)
    np.testing.assert_allclose(cal.predict_proba(z), cls().fit(z, y).predict_proba(z), atol=2e-3)


@pytest.mark.parametrize(
    ("method", "cls", "atol"),
    [("fedvector", VectorScaling, 5e-3), ("fedmatrix", MatrixScaling, 5e-2)],
)
def test_newton_fits_the_bounded_nll_of_its_central_twin_on_exact_zeros(
    method: str, cls: type, atol: float
) -> None:
    """Half the entries are probabilities of exactly 0 (logits of -708), some of them the true
    class: the plain NLL drags those classes' scales to 0 (FedVector without the bound: accuracy
    0.94 -> 0.04); the federation, like the central fit, sums only rows within the NLL bound and
    keeps it. FedMatrix's block-diagonal curvature approaches the central fit more slowly (max
    probability gap 0.029 after 20 rounds, 0.009 after 80)."""
    g = np.random.default_rng(3)
    n, c = 1500, 5
    y = g.integers(c, size=n)
    z = g.normal(size=(n, c))
    z[np.arange(n), y] += 3.0
    zero = g.random((n, c)) < 0.5
    zero[np.arange(n), z.argmax(axis=1)] = False
    z[zero] = -708.0
    parts = dirichlet_partition(y, 10, 0.1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the central fit's BoundedNLLWarning
        central = cls().fit(z, y)
        cal, _ = simulate(method, z, y, parts, rounds=20)
    accuracy = np.mean(z.argmax(axis=1) == y)
    assert np.mean(cal.predict(z) == y) >= accuracy - 0.01
    np.testing.assert_allclose(cal.predict_proba(z), central.predict_proba(z), atol=atol)


def test_newton_payload_is_the_summed_gradient_and_curvature(data) -> None:  # type: ignore[no-untyped-def]
    """FedTemp's payload: d/dbeta and d2/dbeta2 of the client's summed NLL (finite differences)."""
    z, y = data
    fm = FedTemp()

    def nll(beta: float) -> float:
        u = beta * z
        u = u - u.max(axis=1, keepdims=True)
        return float((np.log(np.exp(u).sum(axis=1)) - u[np.arange(len(y)), y]).sum())

    g, h = fm.client_step({"params": np.array([0.7])}, z, y)
    e = 1e-4
    assert g == pytest.approx((nll(0.7 + e) - nll(0.7 - e)) / (2 * e), rel=1e-6)
    assert h == pytest.approx((nll(0.7 + e) - 2 * nll(0.7) + nll(0.7 - e)) / e**2, rel=1e-4)


def test_newton_clip_rule_and_sensitivity(data) -> None:  # type: ignore[no-untyped-def]
    """Default bounds follow the public rule; each part of a payload is clipped to its bound."""
    z, y = data
    fm = FedVector(client_rows=100)
    assert fm.clip_bounds() == pytest.approx((3.0 * 10.0, 1.0 * 100.0))
    assert FedTemp(grad_clip=2.0, hess_clip=3.0).clip_bounds() == (2.0, 3.0)
    dp = DPConfig(1.0, 1e-5, rounds=1, noise=SeededNoise(0))
    g, h = fm.split(fm.clip(fm.client_step(fm.init(5), 10 * z, y), dp))
    assert g.size == 10 and h.size == 15
    assert np.linalg.norm(g) == pytest.approx(30.0) and np.linalg.norm(h) <= 100.0 + 1e-9
    assert fm.payload_bound(dp) == 100.0
    with pytest.raises(ValueError, match="'update' parameter of FedOPVector"):
        FedOPVector(update="newton")


def test_newton_dp_round_adds_the_documented_noise_and_spends_the_budget(data) -> None:  # type: ignore[no-untyped-def]
    """One DP round: gradient + N(0, (C_g s_g)^2), curvature + N(0, (C_h s_h)^2); T rounds of
    the two mechanisms compose to exactly the requested (epsilon, delta)."""
    fm = FedTemp(grad_clip=4.0, hess_clip=50.0)
    dp = DPConfig(1.0, 1e-5, rounds=3, noise=SeededNoise(5))
    sg, sh = fm.noise_ratios(dp)
    assert 1 / (2 * sg**2) + 1 / (2 * sh**2) == pytest.approx(1 / (2 * dp.multiplier(1) ** 2))
    state = fm.init(5)
    total = np.array([-1.0, 40.0])
    new = fm.server_step(state, total, 7, dp=dp, denominator=None)
    ref = SeededNoise(5)
    g = -1.0 + ref.gaussian(4.0 * sg)
    h = 40.0 + ref.gaussian(50.0 * sh)
    step = -g / max(h, 2.0 * 50.0 * sh)
    assert new["params"][0] == pytest.approx(1.0 + np.clip(step, -0.5, 0.5))
    for _ in range(2):
        new = fm.server_step(new, total, 7, dp=dp)
    assert len(dp.accountant.history) == 6
    assert dp.spent_epsilon() == pytest.approx(1.0, rel=1e-6)
    # the release is the mean of the second half's iterates (rounds 2 and 3)
    assert new["tail_n"][0] == 2
    # ... unless the released gradients cannot tell it from T = 1 (then T = 1, with a warning)
    beta = new["tail_sum"][0] / 2
    check = noise_dominance(new, beta)
    assert check is not None and check["final"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cal = fm.calibrator(new, 5)
    assert 1 / cal.temperature_ == pytest.approx(1.0 if check["dominated"] else beta)
    assert bool(seen) == check["dominated"] == bool(cal.fit_warnings_)


def test_calibrators_module_does_not_import_the_methods() -> None:
    """The fitted calibrators sit below the client/server steps: no import cycle."""
    import ast
    import inspect

    from privcal.federated import calibrators

    tree = ast.parse(inspect.getsource(calibrators))
    imported = [
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    ]
    assert imported and not any(m.startswith("privcal.federated.methods") for m in imported)


def test_fedbbq_one_round_all_clients_equals_central_bbq(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    parts = dirichlet_partition(y, 8, 0.5, seed=1)
    cal, _ = simulate("fedbbq", z, y, parts, rounds=1)
    central = BBQ(n_levels=7, prior="model").fit(z, y)
    assert isinstance(cal, BBQ)
    np.testing.assert_allclose(cal.table_, central.table_, rtol=1e-12)
    np.testing.assert_allclose(cal.predict_proba(z), central.predict_proba(z), rtol=1e-12)
    cal2, _ = simulate("fedbin", z, y, parts, rounds=1)
    assert isinstance(cal2, HistogramBinning)
    np.testing.assert_allclose(
        cal2.predict_proba(z),
        HistogramBinning("classwise", n_bins=32, prior="model").fit(z, y).predict_proba(z),
    )


def test_binning_client_step_is_class_histograms(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    fm = FedBBQ(n_levels=3)
    pos, neg = class_histograms(softmax(z[:50]), y[:50], 8)
    np.testing.assert_array_equal(fm.client_step(fm.init(5), z[:50], y[:50]), np.stack([pos, neg]))


@pytest.mark.filterwarnings("ignore::privcal.private.temperature.NoiseDominatedWarning")
@pytest.mark.parametrize(
    ("method", "cls"),
    [
        ("fedtemp", TemperatureScaling),
        ("fedvector", VectorScaling),
        ("fedvector-averaging", VectorScaling),
        ("fedopvector", VectorScaling),
        ("fedmatrix", MatrixScaling),
        ("fedbbq-all", BBQ),
        ("fedbbq-changed", BBQ),
        ("fedcal", object),
    ],
)
def test_every_method_gives_a_serialisable_calibrator(method: str, cls: type, data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    parts = dirichlet_partition(y, 6, 0.5, seed=0)
    cal, hist = simulate(
        method,
        z,
        y,
        parts,
        rounds=2,
        epsilon=2.0,
        delta=1e-5,
        noise=SeededNoise(1),
        eval_logits=z,
        eval_labels=y,
        **({} if "bbq" in method else {"local_iters": 2 if method == "fedcal" else 5}),
    )
    assert isinstance(cal, cls)
    back = calibrator_from_dict(cal.to_dict())
    np.testing.assert_allclose(back.predict_proba(z[:20]), cal.predict_proba(z[:20]))
    assert [h["round"] for h in hist] == [0, 1, 2]
    assert hist[-1]["epsilon_spent"] == pytest.approx(2.0, rel=1e-3)
    if method in ("fedtemp", "fedopvector", "fedcal"):  # order-preserving
        assert np.array_equal(np.argmax(cal.predict_proba(z), 1), np.argmax(z, 1))


def test_weighting_keeps_accuracy_when_few_clients_reported(data) -> None:  # type: ignore[no-untyped-def]
    """One sampled client of 20 (T=1): alpha ~ 1/20, the weighted calibrator stays near p."""
    z, y = data
    parts = dirichlet_partition(y, 20, 0.1, seed=0)
    cal, _ = simulate("fedbbq-all", z, y, parts, rounds=1, sample_rate=0.05, seed=3)
    assert np.all(cal.alpha_ < 0.5)


# ------------------------------------------------------------------ simulate bad input
@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"rounds": 0}, "'rounds' parameter of simulate"),
        ({"sample_rate": 0.0}, "'sample_rate' parameter of simulate"),
        ({"sample_rate": 1.5}, "'sample_rate' parameter of simulate"),
        ({"epsilon": 1.0}, "both epsilon and delta"),
        ({"epsilon": 1.0, "delta": 1e-5, "clip": 0.0}, "'clip' parameter of DPConfig"),
        ({"epsilon": 1.0, "delta": 1e-5, "clip_pos": 0.0}, "'clip_pos' parameter of DPConfig"),
        ({"method": "nope"}, "'method' parameter of simulate"),
    ],
)
def test_simulate_bad_input(kw: dict, match: str, data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    args = {"method": "fedtemp", "rounds": 2, **kw}
    with pytest.raises(ValueError, match=match):
        simulate(args.pop("method"), z, y, [np.arange(100), np.arange(100, 200)], **args)


@pytest.mark.filterwarnings("ignore::privcal.private.temperature.NoiseDominatedWarning")
def test_server_rejects_bad_payloads_and_continues(caplog, data) -> None:  # type: ignore[no-untyped-def]
    """A client whose update is of the wrong shape is dropped (and logged), one whose update is
    NaN counts as zeros without a log line (under DP: whether a step is finite depends on the
    client's data; test_simulate_attacks.py); the round continues."""
    z, y = data

    class Broken(FedTemp):
        def client_steps(self, state, zz, yy, clients):  # type: ignore[no-untyped-def]
            out = list(super().client_steps(state, zz, yy, clients))
            for k, idx in enumerate(clients):
                if idx.size == 100:
                    out[k] = np.array([np.nan, 1.0])
                if idx.size == 50:
                    out[k] = np.ones(3)
            return out

    parts = [np.arange(100), np.arange(100, 150), np.arange(150, 800)]
    kw = {"rounds": 1, "epsilon": 5.0, "delta": 1e-5, "aggregation": "trusted"}
    with caplog.at_level(logging.WARNING, logger="privcal.federated"):
        cal, hist = simulate(Broken(), z, y, parts, noise=SeededNoise(2), **kw)
    assert "NaN" not in caplog.text and "shape (3,)" in caplog.text
    assert "n_clients" not in hist[-1]  # under DP the count of accepted clients is not released
    # the dropped clients count as absent: the same release as two empty clients of K = 3
    alone = [np.array([], dtype=np.int64), np.array([], dtype=np.int64), parts[2]]
    ref, _ = simulate("fedtemp", z, y, alone, noise=SeededNoise(2), **kw)
    assert cal.temperature_ == ref.temperature_


# ------------------------------------------------------------------ DP: noise, denominator, report
def test_simulate_defaults_to_secure_noise_and_reports_the_declared_quantities(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    parts = dirichlet_partition(y, 4, 0.5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureNoiseWarning)  # the default noise does not warn
        warnings.simplefilter("ignore", NoiseDominatedWarning)  # 4 clients: T = 1 may be kept
        cal, hist = simulate("fedtemp", z, y, parts, rounds=2, epsilon=1.0, delta=1e-5)
    rep = cal.privacy_report_
    assert (rep.unit, rep.relation, rep.noise, rep.status) == (
        "user",
        "add/remove",
        "secure",
        "private",
    )
    assert rep.epsilon == pytest.approx(1.0, rel=1e-6) and rep.delta == pytest.approx(1e-5)
    text = " | ".join(rep.public)
    for declared in ("K=4", "p=1", "T=2", "C_g=28.2843", "C_h=300", "client_rows m=200", "c=5"):
        assert declared in text
    assert "no denominator" in text
    assert [set(h) for h in hist] == [{"round", "epsilon_spent"}] * 2  # no counts, no timings
    assert hist[-1]["epsilon_spent"] == pytest.approx(1.0, rel=1e-6)


def test_seeded_noise_warns_and_is_not_private(data) -> None:  # type: ignore[no-untyped-def]
    z, y = data
    parts = dirichlet_partition(y, 4, 0.5, seed=0)
    with pytest.warns(InsecureNoiseWarning):
        cal, _ = simulate(
            "fedbbq", z, y, parts, rounds=1, epsilon=1.0, delta=1e-5, noise=SeededNoise(0)
        )
    assert cal.privacy_report_.status == "not private: seeded noise"
    assert any("C+=10, C-=50" in p for p in cal.privacy_report_.public)
    no_dp, hist = simulate("fedbbq", z, y, parts, rounds=1)
    assert not hasattr(no_dp, "privacy_report_")  # no DP: no report that could claim privacy
    assert hist[-1]["n_clients"] == 4


def test_dp_average_divides_by_the_declared_expected_cohort(data) -> None:  # type: ignore[no-untyped-def]
    """Poisson sampling at p = 0.5 of K = 6: the noisy sum is divided by p K = 3 whatever the
    number of sampled clients (McMahan et al. 2018's fixed denominator)."""
    z, y = data
    parts = iid_partition(z.shape[0], 6, seed=0)
    fm = FedTemp(update="parameter-averaging")
    for seed in range(3):
        cal, _ = simulate(
            fm,
            z,
            y,
            parts,
            rounds=1,
            epsilon=1.0,
            delta=1e-5,
            seed=seed,
            sample_rate=0.5,
            noise=SeededNoise(9),
            aggregation="trusted",
        )
        rng = np.random.default_rng(seed)
        sampled = np.flatnonzero(rng.random(6) < 0.5)
        dp = DPConfig(1.0, 1e-5, rounds=1, noise=SeededNoise(9))
        total = sum(
            fm.clip(fm.client_step(fm.init(5), z[parts[k]], y[parts[k]]), dp) for k in sampled
        )
        noisy = total + SeededNoise(9).gaussian(0.5 * dp.multiplier(1), size=(1,))
        beta = np.clip(1.0 + noisy[0] / expected_cohort(0.5, 6), 0.05, 20.0)
        assert 1.0 / cal.temperature_ == pytest.approx(beta, rel=1e-9), sampled


def test_fedtemperature_is_the_deprecated_name_of_fedtemp() -> None:
    import privcal.federated as federated
    import privcal.federated.methods as methods

    for module in (federated, methods):
        with pytest.warns(DeprecationWarning, match="'FedTemperature' name .* use 'FedTemp'"):
            assert module.FedTemperature is federated.FedTemp
        assert "FedTemperature" not in module.__all__
        with pytest.raises(AttributeError, match="no attribute 'FedTemperatur'"):
            module.FedTemperatur  # noqa: B018

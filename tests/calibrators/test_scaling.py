"""Vector, matrix and order-preserving scaling: their forms, saturated inputs and the
trust-region Newton fits."""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone

from privcal.calibrators import (
    METHODS,
    FitWarning,
    HistogramBinning,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
    calibrator_from_dict,
)
from privcal.calibrators.base import CrossFitWarning
from privcal.calibrators.scaling import LOGIT_RANGE, floor_logits, order_preserving_logits
from privcal.calibrators.temperature import BoundedNLLWarning
from privcal.metrics import ece, nll
from privcal.metrics.statistics import softmax


# -- vector / matrix scaling --------------------------------------------------------------------
def test_order_preserving_keeps_full_ranking(overconfident: Any) -> None:
    z, y = overconfident
    cal = VectorScaling(order_preserving=True).fit(z, y)
    assert cal.coef_.shape == (z.shape[1] - 1,)
    np.testing.assert_array_equal(cal.intercept_, 0.0)
    g = np.random.default_rng(3)
    for zz in (z, 4.0 * g.normal(size=(500, z.shape[1]))):
        u = cal.transform_logits(zz)
        np.testing.assert_array_equal(np.argsort(-u, axis=1), np.argsort(-zz, axis=1))
        np.testing.assert_array_equal(cal.predict(zz), np.argmax(zz, axis=1))


def test_order_preserving_keeps_ties_equal() -> None:
    from privcal.calibrators.scaling import order_preserving_logits

    z = np.array([[1.0, 3.0, 1.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    u = order_preserving_logits(z, np.array([0.3, -0.7, 1.1]))
    assert u[0, 0] == u[0, 2] and u[0, 1] == 0.0
    np.testing.assert_array_equal(u[1], 0.0)


def test_order_preserving_changes_more_than_temperature(overconfident: Any) -> None:
    """The per-rank scales are free: the fit is not forced to one common scale."""
    z, y = overconfident
    cal = VectorScaling(order_preserving=True).fit(z, y)
    assert np.ptp(cal.coef_) > 1e-3
    assert (
        nll(cal.predict_proba(z), y)
        <= nll(TemperatureScaling().fit(z, y).predict_proba(z), y) + 1e-3
    )


def test_vector_scaling_form(overconfident: Any) -> None:
    z, y = overconfident
    cal = VectorScaling().fit(z, y)
    np.testing.assert_allclose(
        cal.predict_proba(z), softmax(z * cal.coef_ + cal.intercept_), rtol=1e-12
    )
    # on logits over-confident by a factor 2 the fitted scales are about 1/2
    assert np.all((cal.coef_ > 0.3) & (cal.coef_ < 0.8)), cal.coef_


def test_matrix_scaling_form_and_regularisation(overconfident: Any) -> None:
    z, y = overconfident
    cal = MatrixScaling().fit(z, y)
    np.testing.assert_allclose(
        cal.predict_proba(z), softmax(z @ cal.coef_.T + cal.intercept_), rtol=1e-12
    )
    strong = MatrixScaling(reg_offdiag=1e4, reg_intercept=1e4).fit(z, y)
    off = strong.coef_ - np.diag(np.diag(strong.coef_))
    assert np.abs(off).max() < 1e-3 and np.abs(strong.intercept_).max() < 1e-3
    assert np.abs(cal.coef_ - np.diag(np.diag(cal.coef_))).max() > np.abs(off).max()


@pytest.mark.parametrize("name", ["vector", "matrix", "op-vector", "temperature"])
def test_scaling_improves_training_nll(overconfident: Any, name: str) -> None:
    z, y = overconfident
    cal = METHODS[name]().fit(z, y)
    assert nll(cal.predict_proba(z), y) < nll(z, y, input="logits") - 0.05


# -- vector and matrix scaling on saturated inputs --------------------------------------------


def _zeroed_probs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Log-probabilities like the 20 newsgroups set's: 60% of the non-top entries are exact
    zeros read as log(tiny) = -708, among them the true class of ~6% of the rows."""
    g = np.random.default_rng(seed)
    n, c = 4000, 10
    y = g.integers(c, size=n)
    z = g.normal(size=(n, c))
    z[np.arange(n), y] += 3.0
    z -= np.log(np.exp(z).sum(axis=1, keepdims=True))
    zero = g.random((n, c)) < 0.6
    zero[np.arange(n), z.argmax(axis=1)] = False
    z[zero] = np.log(np.finfo(np.float64).tiny)
    return z, y


@pytest.mark.parametrize(
    ("cls", "param", "value"),
    [
        (PlattScaling, "nll_bound", 0.0),
        (VectorScaling, "nll_bound", 0.0),
        (VectorScaling, "nll_bound", float("nan")),
        (MatrixScaling, "nll_bound", -1.0),
        (MatrixScaling, "logit_range", 0.0),
        (MatrixScaling, "logit_range", float("inf")),
    ],
)
def test_bounded_scaling_rejects_bad_bounds(cls: Any, param: str, value: float) -> None:
    z, y = _zeroed_probs(0)
    with pytest.raises(ValueError, match=f"'{param}'"):
        cls(**{param: value}).fit(z, y)


def test_platt_bound_keeps_the_slope_on_exact_zero_probabilities() -> None:
    """2% of binary logits at +-708 against their label (true class probability exactly 0):
    the plain NLL takes the slope to 0 (every probability 0.5, accuracy 0.5); the bounded fit
    keeps a slope near the data's, says so, and keeps the accuracy."""
    g = np.random.default_rng(1)
    n = 2000
    y = g.integers(2, size=n)
    s = g.normal(size=n) + (2 * y - 1) * 1.5
    bad = g.random(n) < 0.02
    s[bad] = -(2 * y[bad] - 1) * 708.0
    z = np.column_stack([np.zeros(n), s])
    before = float(np.mean((s > 0) == y))
    plain = PlattScaling(nll_bound=None).fit(z, y)
    assert abs(plain.coef_) < 0.05
    with pytest.warns(BoundedNLLWarning):
        cal = PlattScaling().fit(z, y)
    assert cal.coef_ > 2.0
    assert np.mean(cal.predict(z) == y) == pytest.approx(before)
    assert any("Platt scaling" in w for w in cal.fit_warnings_)


@pytest.mark.parametrize(
    ("robust", "plain"),
    [
        (VectorScaling, lambda: VectorScaling(nll_bound=None)),
        (MatrixScaling, lambda: MatrixScaling(nll_bound=None, logit_range=None)),
    ],
)
def test_scaling_keeps_accuracy_on_exact_zero_probabilities(robust: Any, plain: Any) -> None:
    """Logits of -708 once dragged class scales to 0 (plain NLL: accuracy 0.90 -> 0.26-0.28);
    the bounded NLL (and for matrix scaling the floor at max - 36) keeps the accuracy and says
    that examples were counted at the bound."""
    (z, y), (zt, yt) = _zeroed_probs(0), _zeroed_probs(1)
    before = float(np.mean(zt.argmax(axis=1) == yt))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = plain().fit(z, y)
    assert np.mean(old.predict(zt) == yt) < before - 0.3  # the failure this guards against
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = robust().fit(z, y)
    kinds = {w.category for w in caught}
    # matrix scaling reorders classes: its cross-fit check may say so (CrossFitWarning)
    assert BoundedNLLWarning in kinds and kinds <= {BoundedNLLWarning, CrossFitWarning}
    assert np.mean(cal.predict(zt) == yt) > before - 0.01
    assert any("nll_bound=20" in m for m in cal.fit_warnings_)
    back = calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_allclose(back.predict_proba(zt), cal.predict_proba(zt))


@pytest.mark.parametrize("name", ["vector", "op-vector", "matrix"])
def test_scaling_bound_is_the_plain_fit_on_clean_data(overconfident: Any, name: str) -> None:
    """No example reaches the bound and no logit the floor: the fit is the plain NLL fit, with
    no diagnostics."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cal = METHODS[name]().fit(*overconfident)
    assert cal.fit_warnings_ == []
    params = {"nll_bound": None} | ({"logit_range": None} if name == "matrix" else {})
    plain = clone(METHODS[name]()).set_params(**params).fit(*overconfident)
    np.testing.assert_allclose(cal.coef_, plain.coef_, rtol=1e-10, atol=1e-12)


def test_matrix_floor_changes_probabilities_by_rounding_only() -> None:
    z, _ = _zeroed_probs(2)
    floored, rows = floor_logits(z, LOGIT_RANGE)
    assert rows > 0.9 * z.shape[0]
    assert (floored >= z.max(axis=1, keepdims=True) - LOGIT_RANGE).all()
    np.testing.assert_allclose(softmax(floored), softmax(z), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", ["vector", "op-vector", "matrix"])
def test_scaling_on_20news_keeps_accuracy_and_improves_ece(shared_data: Any, name: str) -> None:
    """20 newsgroups: 61 true-class probabilities of exactly 0 and 74% zero entries once took
    vector / matrix scaling from 92% to 59-67% accuracy; now accuracy stays and ECE drops."""
    from privcal.data import read_scores

    path = shared_data / "cleanlab-heldout" / "20news_probs.npy"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # exact zeros clipped to log(tiny) by the reader
        sc = read_scores(path)
    z, y = sc.logits, sc.labels
    assert z is not None
    perm = np.random.default_rng(0).permutation(y.size)
    fit, test = perm[: y.size // 2], perm[y.size // 2 :]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = METHODS[name]().fit(z[fit], y[fit])
    p = cal.predict_proba(z[test])
    acc_before = float(np.mean(z[test].argmax(axis=1) == y[test]))
    acc_after = float(np.mean(p.argmax(axis=1) == y[test]))
    before, after = ece(z[test], y[test], input="logits"), ece(p, y[test])
    msg = f"20news {name}: acc {acc_before:.4f} -> {acc_after:.4f}, ECE {before:.4f} -> {after:.4f}"
    # matrix scaling over-fits its 420 parameters a little (train 93.7%): 2.5 points of slack
    assert acc_after > acc_before - (0.025 if name == "matrix" else 0.005), msg
    assert after < before - 0.1 and after < 0.03, msg  # ECE ~0.20 uncalibrated
    assert any("nll_bound" in w for w in cal.fit_warnings_), msg


# -- trust-region Newton fits of vector, matrix and Platt scaling ----------------------------


def _compiled(obj: Any) -> Any:
    """A small matrix-scaling objective on the path of large ones (block preconditioner,
    compiled kernels), which ``COMPILED_MIN_WORK`` keeps for N * C * C >= 2^24."""
    obj.compiled = True
    return obj


def _objectives(seed: int) -> dict[str, tuple[Any, np.ndarray]]:
    from privcal.calibrators import scaling as sc

    rng = np.random.default_rng(seed)
    n, c = 300, 5
    z = 3.0 * rng.normal(size=(n, c))
    y = rng.integers(0, c, n)
    order, gaps = sc.sorted_gaps(z)
    rank = np.argsort(order, axis=1)[np.arange(n), y]
    objectives = {
        "platt": (sc._Platt(z[:, 1] - z[:, 0], y % 2, 0.7), rng.normal(size=2)),
        "vector": (sc._Vector(z, y, 0.7), rng.normal(size=2 * c)),
        "matrix": (sc._Matrix(z, y, 0.7, 0.1, 0.2), rng.normal(size=c * c + c)),
        "op-vector": (sc._OrderPreserving(gaps, rank, 0.7), 0.3 * rng.normal(size=c - 1)),
    }
    compiled = _compiled(sc._Matrix(z, y, 0.7, 0.1, 0.2))
    objectives["matrix-compiled"] = (compiled, objectives["matrix"][1])
    return objectives


@pytest.mark.parametrize("name", ["platt", "vector", "matrix", "matrix-compiled", "op-vector"])
def test_scaling_objectives_have_exact_gradients_and_hessian_products(name: str) -> None:
    """Gradients and Hessian-vector products of the fitting objectives equal central
    differences of the objective and of the gradient (the Newton fits rely on them)."""
    obj, x = _objectives(4)[name]
    rng = np.random.default_rng(5)
    h = 1e-6
    for _ in range(3):
        v = rng.normal(size=x.size)
        _, grad = obj(x)
        slope = (obj(x + h * v)[0] - obj(x - h * v)[0]) / (2 * h)
        bend = (obj(x + h * v)[1] - obj(x - h * v)[1]) / (2 * h)
        assert grad @ v == pytest.approx(slope, rel=1e-7, abs=1e-9)
        np.testing.assert_allclose(obj.hessp(x, v), bend, rtol=1e-6, atol=1e-7 * np.abs(bend).max())


@pytest.mark.parametrize("name", ["vector", "matrix", "matrix-compiled"])
def test_preconditioners_are_invertible_changes_of_variables(name: str) -> None:
    """x = A t: to_t inverts to_x and pull is its transpose (<A t, g> = <t, A^T g>), so the
    solver's gradient and Hessian products in t are those of the same objective."""
    obj, x = _objectives(7)[name]
    change = obj.preconditioner(x)
    rng = np.random.default_rng(8)
    t, g = rng.normal(size=x.size), rng.normal(size=x.size)
    np.testing.assert_allclose(change.to_t(change.to_x(t)), t, rtol=1e-9, atol=1e-9)
    assert change.to_x(t) @ g == pytest.approx(t @ change.pull(g), rel=1e-10)


def test_matrix_block_preconditioner_factors_the_per_class_curvature() -> None:
    """With every row sampled, block c of the block preconditioner is the curvature of class
    c's variables (row c of W and b_c): sum_i s p_ic (1 - p_ic) (z_i, 1)(z_i, 1)^T plus the
    penalty's diagonal; the factors are its Cholesky factors."""
    from privcal.calibrators import scaling as sc

    rng = np.random.default_rng(10)
    n, c = 200, 4
    z, y = rng.normal(size=(n, c)), rng.integers(0, c, n)
    obj = _compiled(sc._Matrix(z, y, 0.7, 0.1, 0.2))
    x = rng.normal(size=c * c + c)
    change = obj.preconditioner(x)
    p = softmax(z @ x[: c * c].reshape(c, c).T + x[c * c :])
    zt = np.column_stack([z, np.ones(n)])
    for k in range(c):
        block = (zt * (0.7 / n * p[:, k] * (1 - p[:, k]))[:, None]).T @ zt
        block[np.diag_indices(c + 1)] += obj.penalty_diagonal(x)[change.blocks[k]]
        factor = change.factors[k]
        np.testing.assert_allclose(factor @ factor.T, block, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("lam", "mu"), [(0.1, 0.2), (0.0, 0.2), (0.1, 0.0)])
def test_matrix_objective_shifts_to_the_least_penalty_map(lam: float, mu: float) -> None:
    """``canonical`` (P) is a projection that keeps every probability, and P x has the least
    ODIR penalty among the maps that differ from x by a shift common to all classes (a
    vector added to every row of W, a number to every b_j); with lam = 0 (mu = 0) it leaves
    the columns (intercepts) as they are. The objective's penalty is the ODIR penalty at P x,
    and penalty_diagonal is the diagonal of its Hessian."""
    from privcal.calibrators import scaling as sc

    rng = np.random.default_rng(9)
    n, c = 40, 4
    z, y = rng.normal(size=(n, c)), rng.integers(0, c, n)
    obj = sc._Matrix(z, y, 1.0, lam, mu)
    x = rng.normal(size=c * c + c)
    px = obj.canonical(x)
    np.testing.assert_allclose(obj.canonical(px), px, atol=1e-14)

    def probs(v: np.ndarray) -> np.ndarray:
        return softmax(z @ v[: c * c].reshape(c, c).T + v[c * c :])

    def odir(v: np.ndarray) -> float:
        w, b = v[: c * c].reshape(c, c), v[c * c :]
        return lam * float(((w * (1 - np.eye(c))) ** 2).sum()) + mu * float(b @ b)

    np.testing.assert_allclose(probs(px), probs(x), atol=1e-12)
    assert obj.penalty(x)[0] == pytest.approx(odir(px), rel=1e-12)
    for _ in range(20):
        a, a0 = rng.normal(size=c), rng.normal()
        shifted = px + np.concatenate([np.tile(a, c), np.full(c, a0)])
        assert odir(shifted) >= odir(px) - 1e-12
    moved = px - x
    assert np.allclose(moved[: c * c], 0.0) == (lam == 0)
    assert np.allclose(moved[c * c :], 0.0) == (mu == 0)
    hessian = np.column_stack([obj.penalty_hessp(e) for e in np.eye(x.size)])
    np.testing.assert_allclose(obj.penalty_diagonal(x), np.diag(hessian), atol=1e-12)


@pytest.mark.parametrize("data", ["clean", "saturated"])
def test_matrix_cross_fit_twin_is_the_fit_from_the_identity(saturated: Any, data: str) -> None:
    """The cross-fit twin's solver starts at the full fit's parameters (``_fit_twin``), yet it
    is the fit of its half from the identity: the same parameters and probabilities to the
    solver's tolerance, with (saturated: 1% of rows beyond the NLL bound, so several
    majorise-minimise rounds) and without the bound at work."""
    z_clean, z_sat, y = saturated
    z = z_sat if data == "saturated" else z_clean
    half = np.random.default_rng(0).permutation(y.size)[: y.size // 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        full = MatrixScaling().fit(z, y)
        twin = full._fit_twin(z[half], y[half])
        fresh = clone(full)
        fresh._fit(z[half], y[half])
    np.testing.assert_allclose(twin.coef_, fresh.coef_, atol=1e-4)
    np.testing.assert_allclose(twin.intercept_, fresh.intercept_, atol=1e-4)
    np.testing.assert_allclose(twin._predict_proba(z), fresh._predict_proba(z), atol=1e-5)
    assert not np.allclose(full.coef_, fresh.coef_, atol=1e-3)  # the start was elsewhere


def _reference_fit(cal: Any, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The same objective minimised by an independent path: SciPy's BFGS with finite-difference
    gradients on the shared NLL statistic (nll_terms) of the calibrator's own map."""
    from scipy.optimize import minimize

    from privcal.metrics.statistics import nll_terms

    c = z.shape[1]
    if isinstance(cal, MatrixScaling):
        off = 1.0 - np.eye(c)

        def f(x: np.ndarray) -> float:
            w, b = x[: c * c].reshape(c, c), x[c * c :]
            pen = 0.1 * ((w * off) ** 2).sum() + 0.1 * b @ b
            return float(nll_terms(z @ w.T + b, y).mean() + pen)

        x0 = np.concatenate([np.eye(c).ravel(), np.zeros(c)])
    elif cal.order_preserving:

        def f(x: np.ndarray) -> float:
            return float(nll_terms(order_preserving_logits(z, x), y).mean())

        x0 = np.zeros(c - 1)
    else:

        def f(x: np.ndarray) -> float:
            return float(nll_terms(z * x[:c] + x[c:], y).mean())

        x0 = np.concatenate([np.ones(c), np.zeros(c)])
    return np.asarray(minimize(f, x0, method="BFGS", options={"gtol": 1e-9}).x)


@pytest.mark.parametrize(
    ("cal", "compiled"),
    [
        (VectorScaling(), False),
        (VectorScaling(order_preserving=True), False),
        (MatrixScaling(), False),
        (MatrixScaling(), True),
    ],
)
def test_newton_scaling_fit_is_the_minimum_of_its_objective(
    overconfident: Any, cal: Any, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trust-region Newton fit reaches the minimum an independent BFGS fit of the same
    objective (shared NLL statistic, finite-difference gradients) finds: the same parameters
    and calibrated probabilities to optimisation accuracy (matrix scaling on both its paths:
    ``compiled`` is the one of N * C * C >= 2^24)."""
    from privcal.calibrators import scaling as sc

    if compiled:
        monkeypatch.setattr(sc._Matrix, "COMPILED_MIN_WORK", 0)
    z, y = overconfident
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        fitted = clone(cal).fit(z, y)
    ref = _reference_fit(cal, z, y)
    c = z.shape[1]
    got = (
        fitted.coef_
        if getattr(fitted, "order_preserving", False)
        else np.concatenate([np.ravel(fitted.coef_), fitted.intercept_])
    )
    if isinstance(fitted, VectorScaling) and not fitted.order_preserving:
        # softmax ignores a common shift of the intercepts: compare them centred
        got[c:] -= got[c:].mean()
        ref[c:] -= ref[c:].mean()
    np.testing.assert_allclose(got, ref, atol=2e-4)
    if isinstance(fitted, MatrixScaling):
        ref_p = softmax(z @ ref[: c * c].reshape(c, c).T + ref[c * c :])
    elif fitted.order_preserving:
        ref_p = softmax(order_preserving_logits(z, ref))
    else:
        ref_p = softmax(z * ref[:c] + ref[c:])
    np.testing.assert_allclose(fitted.predict_proba(z), ref_p, atol=1e-5)


def test_fit_progress_reports_each_iteration_only_when_asked(overconfident: Any) -> None:
    from privcal.calibrators import fit_progress

    seen: list[Any] = []
    with fit_progress(seen.append):
        MatrixScaling().fit(*overconfident)
    steps = [s for s in seen if s.fit == "matrix scaling"]
    assert steps and steps[0].iteration == 1
    assert all(s.elapsed >= 0 and np.isfinite(s.objective) for s in steps)
    before = len(seen)
    MatrixScaling().fit(*overconfident)  # outside the block: nothing more is reported
    assert len(seen) == before


def test_top_label_binning_fits_from_confidences_alone() -> None:
    """``fit_top_label`` on (confidence, correct) gives the map ``fit`` learns from logits, and
    ``predict_confidence`` is the top entry of ``predict_proba``."""
    from scipy.special import softmax

    gen = np.random.default_rng(5)
    z = 2.0 * gen.normal(size=(400, 5))
    y = (z + gen.normal(size=z.shape)).argmax(axis=1)
    p = softmax(z, axis=1)
    conf, correct = p.max(axis=1), p.argmax(axis=1) == y
    full = HistogramBinning(n_bins=8).fit(z, y)
    top = HistogramBinning(n_bins=8).fit_top_label(conf, correct, n_classes=5)
    np.testing.assert_allclose(top.bin_values_, full.bin_values_, equal_nan=True)
    np.testing.assert_allclose(top.predict_confidence(conf), full.predict_proba(z).max(axis=1))
    assert HistogramBinning.from_dict(top.to_dict()).n_classes_ == 5
    with pytest.raises(ValueError, match="mode='top'"):
        HistogramBinning(mode="classwise").fit_top_label(conf, correct, 5)
    with pytest.raises(ValueError, match="'correct'"):
        HistogramBinning().fit_top_label(conf, correct[:-1], 5)


@pytest.mark.parametrize("cal", [PlattScaling(max_iter=1), MatrixScaling(max_iter=2)])
def test_newton_fit_out_of_iterations_warns(overconfident: Any, cal: Any) -> None:
    """A trust-region fit stopped by max_iter before its gradient test says so (the suite turns
    any privcal warning into an error, so the default fits of the other tests converge)."""
    from privcal.calibrators import IterationLimitWarning

    z, y = overconfident
    if isinstance(cal, PlattScaling):
        z = z[:, :2]
    with pytest.warns(IterationLimitWarning, match="max_iter"):
        fitted = clone(cal).fit(z, y % z.shape[1])
    assert any("Raise max_iter" in w for w in fitted.fit_warnings_)


@pytest.mark.parametrize("case", ["one-class labels", "logits x30"])
def test_matrix_scaling_converges_where_the_softmax_saturates(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saturated softmaxes leave the curvature nearly flat: labels of a single class (every
    row's fit pushes one class towards probability 1) and a 30x overconfident network (the
    identity map's softmax is nearly one-hot). On the path of large fits, matrix scaling still
    reaches its gradient test (the suite turns an IterationLimitWarning into an error) in a
    bounded number of products; float32 products once ran 420 000 of them on the first case,
    and the start at the identity needs 2.5 times the products of the temperature start on the
    second (500 Newton iterations without converging on the shared WRN network)."""
    from privcal.calibrators import scaling as sc

    monkeypatch.setattr(sc._Matrix, "COMPILED_MIN_WORK", 0)
    rng = np.random.default_rng(13)
    n, c = 2000, 20
    y = rng.integers(0, c, n)
    z = rng.normal(size=(n, c))
    z[np.arange(n), y] += 2.0
    if case == "one-class labels":
        y = np.zeros(n, dtype=int)
    else:
        z = 30.0 * np.log(softmax(z))
    products = [0]
    hessp = sc._Matrix.hessp

    def counted(self: Any, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        products[0] += 1
        return hessp(self, x, v)

    monkeypatch.setattr(sc._Matrix, "hessp", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoundedNLLWarning)  # the cases' subject is convergence,
        warnings.simplefilter("ignore", CrossFitWarning)  # not these diagnostics
        cal = MatrixScaling().fit(z, y)
    assert np.isfinite(cal.coef_).all()
    # measured, with the cross-fit's two twins: 174 products for the overconfident case (256
    # from the identity map) and 32 for one-class labels
    assert products[0] < (200 if case == "logits x30" else 100), products[0]

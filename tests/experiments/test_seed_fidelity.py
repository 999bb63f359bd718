"""Seed fidelity: the paper's text and the authors' code, each named where they differ.

* Seed 002, Algorithm 5: ``m_grid="paper-text"`` (App. C, 1e2..1e6, expected threshold) and
  ``"authors-code"`` (1e4..1e6, one noisy draw), in ``optimal_bins`` and the protocol.
* Seed 002, the authors' exponential-mechanism scale ``epsilon min(alpha, 1-alpha) / 2`` is
  epsilon-DP at the paper's settings by the bounded-range argument (0.59 epsilon).
* Seed 001, DP-TS: ``PAPER_SETTINGS`` (App. B.2) and ``AUTHORS_CODE_SETTINGS`` (repository
  defaults), both in ``DP_TS_SETTINGS``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from privcal.conformal import adjusted_level, optimal_bins, optimal_gamma
from privcal.conformal.private.angelopoulos2022 import (
    AUTHORS_CODE_BINS,
    CANDIDATE_BINS,
    M_GRIDS,
    _expected_threshold,
    _sampled_threshold,
)


# ------------------------------------------------------------------ (a) Algorithm 5's grid
def test_grids_are_the_papers_and_the_authors() -> None:
    assert M_GRIDS == ("paper-text", "authors-code")
    assert CANDIDATE_BINS[0] == 100 and CANDIDATE_BINS[-1] == 10**6 and len(CANDIDATE_BINS) == 50
    assert AUTHORS_CODE_BINS == tuple(np.unique(np.logspace(4, 6, 50).astype(int)).tolist())
    assert AUTHORS_CODE_BINS[0] == 10**4 and AUTHORS_CODE_BINS[-1] == 10**6


@pytest.mark.parametrize(("epsilon", "expected"), [(0.5, 100), (1.0, 256), (5.0, 309), (10.0, 373)])
def test_paper_text_m_star(epsilon: float, expected: int) -> None:
    assert optimal_bins(5000, 0.1, epsilon) == expected
    assert optimal_bins(5000, 0.1, epsilon, m_grid="paper-text") == expected


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 5.0, 10.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_authors_code_m_star(epsilon: float, seed: int) -> None:
    m = optimal_bins(5000, 0.1, epsilon, seed=seed, m_grid="authors-code")
    assert m in AUTHORS_CODE_BINS
    assert m == optimal_bins(5000, 0.1, epsilon, seed=seed, m_grid="authors-code")  # seeded


def test_authors_code_candidates_override() -> None:
    assert optimal_bins(5000, 0.1, 1.0, candidates=[10**4], m_grid="authors-code") == 10**4


def test_bad_m_grid_names_the_parameter() -> None:
    with pytest.raises(ValueError, match="'m_grid' parameter of optimal_bins"):
        optimal_bins(5000, 0.1, 1.0, m_grid="paper")


def test_one_draw_follows_the_mechanisms_law() -> None:
    """The draw's mean matches the exact expected threshold (4000 draws, 5 SE)."""
    rng = np.random.default_rng(3)
    u = np.sort(rng.random(300))
    q, eps, m = 0.9, 1.0, 40
    draws = np.array([_sampled_threshold(u, q, eps, m, rng) for _ in range(4000)])
    assert set(np.round(draws * m).astype(int)) <= set(range(1, m + 1))
    se = draws.std() / math.sqrt(draws.size)
    assert abs(draws.mean() - _expected_threshold(u, q, eps, m)) < 5 * se + 1e-12


@pytest.mark.slow
def test_protocol_m_grid_on_lenet_cifar100(shared_data) -> None:
    """LeNet-5 CIFAR-100, LAC, epsilon 1: the text's m* = 256 gives only full sets, the authors'
    code's grid does not (docs/angelopoulos2022.md)."""
    from privcal.experiments import angelopoulos2022

    path = shared_data / "netcal-cifar" / "lenet-5-cifar-100.npz"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    kw: dict[str, Any] = {"trials": 10, "epsilons": (1.0,), "bins": (), "scores": ("lac",)}
    res = {g: angelopoulos2022.run([path], m_grid=g, **kw) for g in M_GRIDS}
    text = res["paper-text"].find("lenet-5-cifar-100", "lac", 0.1, "epsilon", epsilon=1.0)
    code = res["authors-code"].find("lenet-5-cifar-100", "lac", 0.1, "epsilon", epsilon=1.0)
    assert text.bins == 256 and text.full == 1.0
    assert code.bins in AUTHORS_CODE_BINS and code.full == 0.0 and code.coverage > 0.88
    with pytest.raises(ValueError, match="m_grid"):
        angelopoulos2022.run([path], m_grid="code", **kw)


# ------------------------------------------------------- (b) the authors' mechanism scale
def _authors_loss_bound(n: int, alpha: float, epsilon: float, m: int) -> float:
    """Bounded-range bound on the authors' code's loss, in units of epsilon: weights
    exp(-epsilon min(alpha, 1-alpha) w / 2), utility differences in an interval of width
    R = 1/q + 1/(1-q) under substitute."""
    q = adjusted_level(n, alpha, epsilon, m, optimal_gamma(n, alpha, epsilon, m))
    return min(alpha, 1 - alpha) * (1 / q + 1 / (1 - q)) / 2


def test_authors_scale_is_epsilon_dp_at_the_papers_settings() -> None:
    assert round(_authors_loss_bound(5000, 0.1, 1.0, 256), 2) == 0.59
    for eps in (0.5, 1.0, 5.0, 10.0):
        m = optimal_bins(5000, 0.1, eps)
        assert _authors_loss_bound(5000, 0.1, eps, m) <= 1.0


def test_docs_say_epsilon_dp_not_wrong() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "conformal.md").read_text(encoding="utf-8")
    assert "authors' code are wrong" not in doc
    assert "**the authors' code is `epsilon`-DP**" in doc
    src = (root / "src" / "privcal" / "conformal" / "quantile.py").read_text(encoding="utf-8")
    assert "which is too small once" not in src and "0.59 epsilon" in src


# ------------------------------------------------------------------- (c) DP-TS settings
def test_dp_ts_settings_by_source() -> None:
    from privcal.training.recalibration import (
        AUTHORS_CODE_SETTINGS,
        DP_TS_SETTINGS,
        PAPER_SETTINGS,
    )

    assert DP_TS_SETTINGS == {"paper-text": PAPER_SETTINGS, "authors-code": AUTHORS_CODE_SETTINGS}
    assert PAPER_SETTINGS == {
        "epochs": 100,
        "lr": 0.1,
        "max_grad_norm": 10.0,
        "batch_size": 64,
        "schedule": "linear",
        "average": 0.0,
    }
    assert AUTHORS_CODE_SETTINGS == {
        "epochs": 20,
        "lr": 0.1,
        "max_grad_norm": 1.0,
        "batch_size": None,
        "schedule": "linear",
        "average": 0.0,
    }


def test_bu2023_runs_the_paper_text_settings() -> None:
    """bu2023's "DP-TS (paper B.2)" row is fitted with PAPER_SETTINGS, the text's."""
    import inspect

    from privcal.experiments import bu2023
    from privcal.training import recalibration

    assert bu2023.PAPER_SETTINGS is recalibration.PAPER_SETTINGS
    src = inspect.getsource(bu2023)
    assert "**PAPER_SETTINGS" in src and "(paper B.2)" in src


@pytest.mark.parametrize("source", ["paper-text", "authors-code"])
def test_dp_ts_settings_are_used(source: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("opacus")
    from privcal.privacy import SeededNoise
    from privcal.training.recalibration import DP_TS_SETTINGS, DPTemperatureScaling

    settings = DP_TS_SETTINGS[source]
    rng = np.random.default_rng(0)
    z = 4 * rng.normal(size=(400, 3))
    y = z.argmax(1)
    with pytest.warns(Warning):  # seeded noise warns
        ts = DPTemperatureScaling(8.0, 1e-5, noise=SeededNoise(0), seed=0, **settings).fit(z, y)
    assert ts.max_grad_norm_ == settings["max_grad_norm"]
    assert ts.schedule == "linear" and ts.average == 0.0 and ts.epochs == settings["epochs"]
    if settings["batch_size"] is None:  # full batch: one step per epoch
        assert ts.sample_rate_ == 1.0 and ts.steps_ == settings["epochs"]
    else:
        assert ts.batch_size_ == settings["batch_size"] and ts.sample_rate_ < 1.0

"""Bad input to the public helpers behind the defaults raises a ValueError naming the argument."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from privcal.calibrators.binning import shrink_to_model
from privcal.calibrators.search import convex_argmin, monotone_root
from privcal.private.queries import nll_curve_sensitivity

ONES = np.ones(3)
P = np.array([0.5, 0.1, 0.2])
GRID = np.array([1.0, 2.0, 4.0])

CASES: list[tuple[Callable[[], Any], str]] = [
    (lambda: nll_curve_sensitivity(-1.0, 3), "'bound'"),
    (lambda: nll_curve_sensitivity(10.0, 1), "'n_classes'"),
    (lambda: shrink_to_model(ONES, ONES, np.array([0.5, np.nan, 0.2])), "'p'"),
    (lambda: shrink_to_model(ONES, ONES, np.array([0.5, 1.2, 0.2])), "'p'"),
    (lambda: shrink_to_model(ONES, ONES, P, (-1.0, 0.0)), "'noise_std'"),
    (lambda: shrink_to_model(ONES, ONES, P, (np.inf, 0.0)), "'noise_std'"),
    (lambda: shrink_to_model(ONES, ONES, P, (1.0, 0.0), -1.0), "'strength'"),
    (lambda: convex_argmin(np.array([1.0, np.nan]), GRID), "'increments'"),
    (lambda: convex_argmin(np.array([1.0]), GRID), "'increments'"),
    (lambda: convex_argmin(np.array([1.0]), np.array([1.0, 2.0])), "'temperatures'"),
    (lambda: convex_argmin(np.array([1.0, 2.0]), np.array([1.0, 4.0, 2.0])), "'temperatures'"),
    (lambda: monotone_root(np.array([1.0, 2.0]), GRID), "'values'"),
    (lambda: monotone_root(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 2.0])), "'temperatures'"),
]


@pytest.mark.parametrize(("call", "argument"), CASES)
def test_bad_input_names_the_argument(call: Callable[[], Any], argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        call()


def test_auto_clip_refuses_a_non_positive_epsilon() -> None:
    pytest.importorskip("torch")
    from privcal.training.dp_sgd import auto_clip

    with pytest.raises(ValueError, match="'epsilon'"):
        auto_clip(100.0, 0.0, 1e-5)
    with pytest.raises(ValueError, match="'delta'"):
        auto_clip(100.0, 1.0, 0.0)

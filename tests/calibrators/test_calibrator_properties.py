"""Invariances of the calibrators (hypothesis).

Generated logits are float32-representable values in [-30, 30] whose two largest entries differ by
more than ``1e-6`` relative to the largest magnitude. Closer top-2 pairs are excluded on purpose:
below float resolution a strictly monotone map can still produce a *tie* in floating point
(the order-preserving map turns a gap ``g`` into ``exp(a) * g``, and ``exp(-exp(a) * g)`` rounds to
exactly 1 once ``exp(a) * g < 2**-53``; ``z / T`` can round two neighbouring floats to the same
value), and ``argmax`` then returns the lowest tied index. That is a property of float arithmetic,
not of the calibrator.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privcal.calibrators import TemperatureScaling, VectorScaling
from privcal.calibrators.scaling import order_preserving_logits
from privcal.metrics.statistics import softmax

pytestmark = pytest.mark.property

C_FIT = 5
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def clear_top2(z: np.ndarray) -> bool:
    s = np.sort(z, axis=1)
    scale = np.maximum(1.0, np.abs(s[:, -1]))
    return bool(np.all(s[:, -1] - s[:, -2] > 1e-6 * scale))


def logits(n_classes: st.SearchStrategy[int] | int) -> st.SearchStrategy[np.ndarray]:
    c = st.just(n_classes) if isinstance(n_classes, int) else n_classes
    # distinct entries (unique=True) so the relative-gap filter rarely rejects a draw
    values = st.floats(-30.0, 30.0, width=32, allow_nan=False, allow_infinity=False)
    return (
        st.tuples(st.integers(1, 12), c)
        .flatmap(lambda shape: arrays(np.float32, shape, elements=values, unique=True))
        .map(lambda a: a.astype(np.float64))
        .filter(clear_top2)
    )


@pytest.fixture(scope="module")
def op_vector() -> VectorScaling:
    g = np.random.default_rng(5)
    z = 4.0 * g.normal(size=(500, C_FIT))
    y = np.argmax(z + 3.0 * g.normal(size=z.shape), axis=1)
    return VectorScaling(order_preserving=True).fit(z, y)


@pytest.fixture(scope="module")
def temperature() -> TemperatureScaling:
    g = np.random.default_rng(6)
    z = 4.0 * g.normal(size=(500, C_FIT))
    y = np.argmax(z + 3.0 * g.normal(size=z.shape), axis=1)
    return TemperatureScaling().fit(z, y)


@SETTINGS
@given(z=logits(C_FIT))
def test_fitted_order_preserving_keeps_top1(op_vector: VectorScaling, z: np.ndarray) -> None:
    np.testing.assert_array_equal(op_vector.predict(z), np.argmax(z, axis=1))


@SETTINGS
@given(z=logits(st.integers(2, 8)), data=st.data())
def test_order_preserving_map_keeps_top1(z: np.ndarray, data: st.DataObject) -> None:
    a = data.draw(arrays(np.float64, z.shape[1] - 1, elements=st.floats(-3.0, 3.0)))
    u = order_preserving_logits(z, a)
    np.testing.assert_array_equal(np.argmax(softmax(u), axis=1), np.argmax(z, axis=1))
    # weakly monotone in every row: the full (weak) order is preserved
    order = np.argsort(-z, axis=1, kind="stable")
    assert np.all(np.diff(np.take_along_axis(u, order, axis=1), axis=1) <= 0.0)


@SETTINGS
@given(z=logits(st.integers(2, 8)), t=st.floats(0.05, 20.0))
def test_temperature_never_changes_argmax(z: np.ndarray, t: float) -> None:
    np.testing.assert_array_equal(np.argmax(softmax(z, t), axis=1), np.argmax(z, axis=1))


@SETTINGS
@given(z=logits(C_FIT))
def test_fitted_temperature_keeps_argmax(temperature: TemperatureScaling, z: np.ndarray) -> None:
    np.testing.assert_array_equal(temperature.predict(z), np.argmax(z, axis=1))

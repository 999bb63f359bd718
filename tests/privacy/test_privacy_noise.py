"""Noise sources: interface, validation, reproducibility."""

from __future__ import annotations

import copy
import os
import pickle
import warnings

import numpy as np
import pytest

from privcal.privacy import NoiseSource, SecureNoise, SeededNoise

SOURCES = [SecureNoise, lambda: SeededNoise(0)]
IDS = ["secure", "seeded"]


def test_secure_flags() -> None:
    assert SecureNoise.secure is True and SecureNoise().secure
    assert SeededNoise.secure is False
    assert isinstance(SecureNoise(), NoiseSource) and isinstance(SeededNoise(), NoiseSource)


def test_secure_share_stream_is_never_shared() -> None:
    """The integer shares' ChaCha20 generator is re-keyed from ``secrets`` on every call: a
    copy, an unpickled copy and a forked child each draw their own stream, never the parent's
    next draws (a shared stream would give two clients the same noise share)."""
    noise = SecureNoise()
    noise.uniform(1)  # the parent's stream exists before the copies and the fork
    for other in (copy.deepcopy(noise), pickle.loads(pickle.dumps(noise))):
        assert not np.array_equal(other.uniform(8), noise.uniform(8))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next 8 uniforms, then exit without pytest's teardown
        try:
            os.write(write, noise.uniform(8).tobytes())
        finally:
            os._exit(0)  # on an error too: the parent then reads no bytes and fails
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = np.frombuffer(pipe.read(), dtype=np.float64)
    os.waitpid(pid, 0)
    assert child.size == 8 and not np.array_equal(child, noise.uniform(8))


def test_secure_noise_is_warning_free() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = SecureNoise()
        s.laplace(1.0, size=3)
        s.gaussian(1.0)
        s.exponential_index([0.0, 1.0])


@pytest.mark.parametrize("make", SOURCES, ids=IDS)
def test_shapes_and_types(make) -> None:
    s = make()
    assert isinstance(s.laplace(1.0), float)
    assert isinstance(s.gaussian(1.0), float)
    assert s.laplace(1.0, size=4).shape == (4,)
    assert s.gaussian(1.0, size=(2, 3)).shape == (2, 3)
    assert s.laplace(1.0, size=0).shape == (0,)
    assert isinstance(s.exponential_index([0.0, 1.0, 2.0]), int)
    assert s.exponential_index([0.0, 1.0], size=5).shape == (5,)
    assert isinstance(s.add_laplace(1.0, 1.0), float)
    assert s.add_gaussian(np.zeros((2, 2)), 1.0).shape == (2, 2)


@pytest.mark.parametrize("make", SOURCES, ids=IDS)
@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan"), "1", True])
def test_bad_scale(make, bad) -> None:
    s = make()
    name = type(s).__name__
    with pytest.raises(ValueError, match=rf"The 'scale' parameter of {name}.laplace must be"):
        s.laplace(bad)
    with pytest.raises(ValueError, match=rf"The 'sigma' parameter of {name}.gaussian must be"):
        s.gaussian(bad)


@pytest.mark.parametrize("make", SOURCES, ids=IDS)
@pytest.mark.parametrize(
    "bad",
    [[], [[0.0, 1.0]], [0.0, float("nan")], [0.0, float("inf")], [-np.inf, -np.inf], "ab"],
)
def test_bad_log_weights(make, bad) -> None:
    with pytest.raises(ValueError, match=r"The 'log_weights' parameter of .*exponential_index"):
        make().exponential_index(bad)


@pytest.mark.parametrize("make", SOURCES, ids=IDS)
def test_bad_size_and_value(make) -> None:
    s = make()
    with pytest.raises(ValueError, match="'size' parameter"):
        s.laplace(1.0, size=-1)
    with pytest.raises(ValueError, match="'value' parameter"):
        s.add_laplace([1.0, np.nan], 1.0)


@pytest.mark.parametrize("make", SOURCES, ids=IDS)
def test_exponential_index_never_picks_zero_weight(make) -> None:
    s = make()
    idx = s.exponential_index([-np.inf, 0.0, -np.inf], size=50)
    assert np.all(idx == 1)


def test_seeded_is_reproducible_and_accepts_generator() -> None:
    a, b = SeededNoise(5), SeededNoise(5)
    assert np.array_equal(a.laplace(1.0, size=10), b.laplace(1.0, size=10))
    assert a.gaussian(2.0) == b.gaussian(2.0)
    assert a.exponential_index(np.zeros(7)) == b.exponential_index(np.zeros(7))
    rng = np.random.default_rng(3)
    g = SeededNoise(rng)
    assert g.rng is rng
    assert g.laplace(1.0) == SeededNoise(3).laplace(1.0)
    # scale is honoured exactly: Laplace(0, b) = b * Laplace(0, 1) for the same stream
    assert SeededNoise(1).laplace(4.0) == pytest.approx(4.0 * SeededNoise(1).laplace(1.0))
    assert repr(SeededNoise(2)) == "SeededNoise(seed=2)"

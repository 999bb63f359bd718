"""Digits-C: a small, fast distribution-shift benchmark in the spirit of CIFAR-10-C.

:func:`digits_shift` trains a scikit-learn :class:`~sklearn.neural_network.MLPClassifier` on a
clean half of scikit-learn's bundled digits (``load_digits``: 1797 greyscale 8 x 8 images with
values 0..16, 10 classes), then returns its **logits** on the clean other half and on corrupted
copies of it: 15 corruptions (:data:`CORRUPTIONS`) x 5 severities. The network stays confident
while its accuracy drops, so the shifted sets are over-confident; that is their purpose.

Pipeline: a stratified 50 / 50 split (seeded); ``MLPClassifier(hidden_layer_sizes=(128,),
alpha=1e-4, max_iter=300, random_state=seed)`` on pixels / 16; logits :math:`z = W_2\\,
\\mathrm{relu}(W_1 x + b_1) + b_2` from ``coefs_`` / ``intercepts_`` (their softmax is checked
against ``predict_proba`` on every build). Each corruption works on :math:`u = x / 16 \\in [0,
1]`, clips to [0, 1] and multiplies back by 16; blurs, elastic, zoom, glass and fog run on a 32 x
32 bilinear upsampling ("px32") and come back by 4 x 4 block averaging. Randomness comes from
``np.random.default_rng([seed, crc32(corruption), severity])``, so one set does not depend on
which other sets are built.

What each corruption does, its parameter per severity (:data:`_PARAMS`) and the measured
accuracy and ECE at severity 5:
docs/data.md#digits_shift-distribution-shift-on-scikit-learns-digits.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage
from scipy.fft import dctn, idctn
from scipy.special import softmax

from privcal._params import check_int, check_option
from privcal.data.paths import cache_dir

__all__ = ["CORRUPTIONS", "SEVERITIES", "DigitsShift", "digits_shift"]

#: The valid severities.
SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)

_OWNER = "digits_shift"
_UP = 4  # 8 x 8 -> 32 x 32

Rng = np.random.Generator
Corruption = Callable[[np.ndarray, Any, Rng], np.ndarray]


#: Parameter of each corruption per severity 1..5 (the table in docs/data.md).
_PARAMS: dict[str, tuple[Any, ...]] = {
    "gaussian_noise": (0.15, 0.25, 0.35, 0.45, 0.6),
    "shot_noise": (6.0, 3.0, 1.5, 0.8, 0.4),
    "impulse_noise": (0.08, 0.15, 0.25, 0.35, 0.5),
    "speckle_noise": (0.5, 0.9, 1.4, 2.2, 4.0),
    "defocus_blur": (2.5, 4.0, 5.5, 7.0, 8.0),
    "motion_blur": (3, 5, 7, 9, 12),
    "zoom_blur": (1.2, 1.35, 1.5, 1.75, 2.0),
    "glass_blur": ((0.7, 1, 1), (0.9, 2, 1), (1.0, 2, 2), (1.1, 3, 2), (1.5, 4, 3)),
    "contrast": (0.6, 0.45, 0.35, 0.27, 0.2),
    "brightness": (0.1, 0.2, 0.3, 0.4, 0.5),
    "fog": (0.25, 0.4, 0.55, 0.75, 1.0),
    "pixelate": (5, 6, 8, 9, 10),
    "elastic": ((1.0, 4.0), (1.5, 4.0), (2.0, 4.0), (2.75, 4.0), (3.5, 4.0)),
    "jpeg": (10, 6, 4, 3, 2),
    "occlusion": (1, 2, 3, 4, 5),
}


#: The 15 corruption names, in the order :func:`digits_shift` builds and pools them.
CORRUPTIONS: tuple[str, ...] = tuple(_PARAMS)


# --------------------------------------------------------------------------------------------
# Resampling helpers (all on stacks of images, shape (n, H, W))


def _up(u: np.ndarray) -> np.ndarray:
    """Bilinear upsampling by 4 (8 x 8 -> 32 x 32)."""
    return ndimage.zoom(u, (1, _UP, _UP), order=1, mode="nearest", grid_mode=True)


def _down(v: np.ndarray) -> np.ndarray:
    """4 x 4 block averaging (32 x 32 -> 8 x 8)."""
    n, h, w = v.shape
    return v.reshape(n, h // _UP, _UP, w // _UP, _UP).mean(axis=(2, 4))


def _sample(v: np.ndarray, rows: np.ndarray, cols: np.ndarray, order: int = 1) -> np.ndarray:
    """``v[i, rows[i], cols[i]]`` with interpolation; outside the image is 0 (background)."""
    idx = np.broadcast_to(np.arange(v.shape[0], dtype=np.float64)[:, None, None], rows.shape)
    return ndimage.map_coordinates(v, [idx, rows, cols], order=order, mode="constant", cval=0.0)


def _grid(n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    r, c = np.meshgrid(
        np.arange(size, dtype=np.float64), np.arange(size, dtype=np.float64), indexing="ij"
    )
    return np.broadcast_to(r, (n, size, size)), np.broadcast_to(c, (n, size, size))


def _blur(v: np.ndarray, sigma: float) -> np.ndarray:
    return ndimage.gaussian_filter(v, sigma=(0.0, sigma, sigma), mode="constant")


# --------------------------------------------------------------------------------------------
# Corruptions: u in [0, 1], shape (n, 8, 8), and the severity's parameter (:data:`_PARAMS`) ->
# same shape (clipped by the caller)


def _gaussian_noise(u: np.ndarray, sigma: Any, rng: Rng) -> np.ndarray:
    return u + rng.normal(0.0, sigma, u.shape)


def _shot_noise(u: np.ndarray, lam: Any, rng: Rng) -> np.ndarray:
    return rng.poisson(u * lam) / lam


def _impulse_noise(u: np.ndarray, a: Any, rng: Rng) -> np.ndarray:
    draw = rng.random(u.shape)
    out = np.where(draw < a / 2, 0.0, u)
    return np.where((draw >= a / 2) & (draw < a), 1.0, out)


def _speckle_noise(u: np.ndarray, sigma: Any, rng: Rng) -> np.ndarray:
    return u + u * rng.normal(0.0, sigma, u.shape)


def _disk(radius: float) -> np.ndarray:
    r = int(np.ceil(radius))
    y, x = np.mgrid[-r : r + 1, -r : r + 1]
    k = (x**2 + y**2 <= radius**2).astype(np.float64)
    return k / k.sum()


def _defocus_blur(u: np.ndarray, radius: Any, rng: Rng) -> np.ndarray:
    v = ndimage.convolve(_up(u), _disk(radius)[None], mode="constant")
    return _down(v)


def _line_kernel(length: int, angle: float) -> np.ndarray:
    size = 2 * length + 1
    k = np.zeros((size, size))
    t = np.linspace(0.0, length, 4 * length + 1)
    rows = np.rint(length - t * np.sin(angle)).astype(int)
    cols = np.rint(length + t * np.cos(angle)).astype(int)
    np.add.at(k, (rows, cols), 1.0)
    return k / k.sum()


def _motion_blur(u: np.ndarray, length: Any, rng: Rng) -> np.ndarray:
    v = _up(u)
    direction = rng.integers(0, 8, size=u.shape[0])
    out = np.empty_like(v)
    for d in range(8):  # loop over the 8 directions only, never over images
        sel = direction == d
        if sel.any():
            kernel = _line_kernel(length, d * np.pi / 4)[None]
            out[sel] = ndimage.convolve(v[sel], kernel, mode="constant")
    return _down(out)


def _zoom_matrix(z: float, size: int) -> np.ndarray:
    """``size x size`` bilinear matrix of a zoom by ``z`` about the centre (0 outside)."""
    centre = (size - 1) / 2
    src = centre + (np.arange(size) - centre) / z  # where each output pixel samples the input
    weight = 1.0 - np.abs(src[:, None] - np.arange(size)[None, :])
    return np.clip(weight, 0.0, None)


def _zoom_blur(u: np.ndarray, z_max: Any, rng: Rng) -> np.ndarray:
    v = _up(u)
    acc = v.copy()
    factors = 1.0 + np.arange(1, 7) * (z_max - 1.0) / 6
    for z in factors:  # loop over zoom factors only; a centred zoom is separable
        m = _zoom_matrix(z, v.shape[1])
        acc += m @ v @ m.T
    return _down(acc / (1 + len(factors)))


def _glass_blur(u: np.ndarray, param: Any, rng: Rng) -> np.ndarray:
    sigma, d, iterations = param
    v = _blur(_up(u), sigma)
    n, size, _ = v.shape
    rows, cols = _grid(n, size)
    for _ in range(iterations):
        dr = rng.integers(-d, d + 1, size=v.shape)
        dc = rng.integers(-d, d + 1, size=v.shape)
        v = _sample(v, np.clip(rows + dr, 0, size - 1), np.clip(cols + dc, 0, size - 1), order=0)
    return _down(_blur(v, sigma))


def _contrast(u: np.ndarray, c: Any, rng: Rng) -> np.ndarray:
    m = u.mean(axis=(1, 2), keepdims=True)
    return m + c * (u - m)


def _brightness(u: np.ndarray, b: Any, rng: Rng) -> np.ndarray:
    return u + b


def _smooth_field(n: int, sigma: float, rng: Rng) -> np.ndarray:
    """White noise on 32 x 32 blurred with ``sigma`` px32 (periodic edges)."""
    noise = rng.standard_normal((n, 8 * _UP, 8 * _UP))
    return ndimage.gaussian_filter(noise, sigma=(0.0, sigma, sigma), mode="wrap")


def _fog(u: np.ndarray, a: Any, rng: Rng) -> np.ndarray:
    f = _down(_smooth_field(u.shape[0], 6.0, rng))
    lo = f.min(axis=(1, 2), keepdims=True)
    hi = f.max(axis=(1, 2), keepdims=True)
    f = (f - lo) / (hi - lo)
    top = u.max(axis=(1, 2), keepdims=True)
    return (u + a * f) * top / (top + a)


def _box_matrices(width: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Averaging into cells of ``width`` pixels (grid from 0; the last cell may be partial).

    Returns the ``r x size`` cell-average matrix and the ``size x r`` nearest-neighbour map back.
    """
    cell = np.arange(size) // width
    back = np.eye(int(cell[-1]) + 1)[cell]
    return (back / back.sum(axis=0)).T, back


def _pixelate(u: np.ndarray, width: Any, rng: Rng) -> np.ndarray:
    v = np.repeat(np.repeat(u, _UP, axis=1), _UP, axis=2)  # exact (nearest) upsampling
    avg, back = _box_matrices(width, v.shape[1])
    return _down(back @ (avg @ v @ avg.T) @ back.T)


def _elastic(u: np.ndarray, param: Any, rng: Rng) -> np.ndarray:
    alpha, sigma = param
    v = _up(u)
    n, size, _ = v.shape
    rows, cols = _grid(n, size)
    shifts = []
    for _ in range(2):
        f = _smooth_field(n, sigma, rng)
        shifts.append(alpha * f / f.std(axis=(1, 2), keepdims=True))
    return _down(_sample(v, rows + shifts[0], cols + shifts[1]))


#: The standard JPEG luminance quantisation table (ITU-T T.81, Annex K.1).
_JPEG_LUMA = np.array(
    [
        [16, 11, 10, 16, 24, 40, 51, 61],
        [12, 12, 14, 19, 26, 58, 60, 55],
        [14, 13, 16, 24, 40, 57, 69, 56],
        [14, 17, 22, 29, 51, 87, 80, 62],
        [18, 22, 37, 56, 68, 109, 103, 77],
        [24, 35, 55, 64, 81, 104, 113, 92],
        [49, 64, 78, 87, 103, 121, 120, 101],
        [72, 92, 95, 98, 112, 100, 103, 99],
    ],
    dtype=np.float64,
)


def _jpeg_table(quality: int) -> np.ndarray:
    scale = 5000 / quality if quality < 50 else 200 - 2 * quality
    return np.maximum(np.floor((_JPEG_LUMA * scale + 50) / 100), 1.0)


def _jpeg(u: np.ndarray, quality: Any, rng: Rng) -> np.ndarray:
    q = _jpeg_table(quality)
    coeffs = dctn(255.0 * u - 128.0, axes=(1, 2), norm="ortho")
    v = idctn(np.round(coeffs / q) * q, axes=(1, 2), norm="ortho")
    return (v + 128.0) / 255.0


def _occlusion(u: np.ndarray, k: Any, rng: Rng) -> np.ndarray:
    n = u.shape[0]
    r0 = rng.integers(0, 8 - k + 1, size=n)[:, None, None]
    c0 = rng.integers(0, 8 - k + 1, size=n)[:, None, None]
    idx = np.arange(8)
    inside = ((idx[None, :, None] >= r0) & (idx[None, :, None] < r0 + k)) & (
        (idx[None, None, :] >= c0) & (idx[None, None, :] < c0 + k)
    )
    return np.where(inside, 1.0, u)


#: Corruption name -> its function above (``_<name>``).
_FUNCTIONS: dict[str, Corruption] = {name: globals()[f"_{name}"] for name in CORRUPTIONS}


def corrupt(images: np.ndarray, corruption: str, severity: int, seed: int = 0) -> np.ndarray:
    """Apply one corruption to a stack of 8 x 8 digit images with values in [0, 16].

    Parameters
    ----------
    images : ndarray of shape (n, 8, 8) or (n, 64)
        Images with values in [0, 16] (as ``load_digits``).
    corruption : str
        One of :data:`CORRUPTIONS`.
    severity : int
        1 (mild) .. 5 (strong).
    seed : int
        Seeds ``np.random.default_rng([seed, crc32(corruption), severity])``.

    Returns
    -------
    ndarray of the input's shape, float64, values in [0, 16].
    """
    check_option(corruption, "corruption", "corrupt", CORRUPTIONS)
    severity = check_int(severity, "severity", "corrupt", low=1)
    check_option(severity, "severity", "corrupt", SEVERITIES)
    seed = check_int(seed, "seed", "corrupt", low=0)
    x = np.asarray(images, dtype=np.float64)
    shape = x.shape
    if x.ndim < 2 or x.shape[-1] * (x.shape[-2] if x.ndim == 3 else 1) != 64:
        raise ValueError(
            f"The 'images' parameter of corrupt must have shape (n, 8, 8) or (n, 64). Got an "
            f"array of shape {shape} instead."
        )
    rng = np.random.default_rng([seed, zlib.crc32(corruption.encode()), severity])
    u = x.reshape(-1, 8, 8) / 16.0
    param = _PARAMS[corruption][severity - 1]
    out = np.clip(_FUNCTIONS[corruption](u, param, rng), 0.0, 1.0) * 16.0
    return out.reshape(shape)


# --------------------------------------------------------------------------------------------
# The data set


@dataclass(frozen=True)
class DigitsShift:
    """Logits of a digits MLP on a clean test split and on corrupted copies of it.

    Attributes
    ----------
    clean : tuple (logits, labels)
        ``logits`` (n x 10, float64) and ``labels`` (n, int64) on the clean test split.
    shifted : dict mapping (corruption, severity) to (logits, labels)
        The same test images, corrupted; ``labels`` is the clean ``labels``.
    train_accuracy : float
        Accuracy of the network on its (clean) training split.
    seed : int
        The seed of the split, the network and the corruptions.
    corruptions : tuple of str
        The corruptions built, in order.
    severities : tuple of int
        The severities built, in order.

    All arrays are read-only.
    """

    clean: tuple[np.ndarray, np.ndarray]
    shifted: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = field(repr=False)
    train_accuracy: float
    seed: int
    corruptions: tuple[str, ...]
    severities: tuple[int, ...]

    def pool(self, severity: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All corruptions at one severity, stacked.

        Returns
        -------
        logits : ndarray of shape (K n, 10)
        labels : ndarray of shape (K n,)
        groups : ndarray of shape (K n,), int64
            Index into :attr:`corruptions` of the corruption each row comes from.
        """
        severity = check_int(severity, "severity", "DigitsShift.pool", low=1)
        check_option(severity, "severity", "DigitsShift.pool", self.severities)
        logits = [self.shifted[(c, severity)][0] for c in self.corruptions]
        labels = [self.shifted[(c, severity)][1] for c in self.corruptions]
        groups = np.repeat(
            np.arange(len(self.corruptions), dtype=np.int64), [len(y) for y in labels]
        )
        return np.concatenate(logits), np.concatenate(labels), groups


def _code_version() -> str:
    try:
        return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    except OSError:  # pragma: no cover - source not on disk (zipped install)
        from privcal import __version__

        return __version__


def _nonempty(value: Any, single: type, name: str, wanted: str) -> tuple[Any, ...]:
    """``value`` as a tuple (one ``single`` item is a tuple of one); refuses an empty one."""
    values = (value,) if isinstance(value, single) else tuple(value)
    if not values:
        raise ValueError(
            f"The '{name}' parameter of {_OWNER} must be {wanted}. Got {value!r} instead."
        )
    return values


def _check_corruptions(corruptions: Iterable[str] | str | None) -> tuple[str, ...]:
    if corruptions is None:
        return CORRUPTIONS
    names = _nonempty(
        corruptions,
        str,
        "corruptions",
        f"None or a non-empty collection of names from {CORRUPTIONS}",
    )
    for name in names:
        check_option(name, "corruptions", _OWNER, CORRUPTIONS)
    return tuple(dict.fromkeys(names))


def _check_severities(severities: Iterable[int] | int) -> tuple[int, ...]:
    values = _nonempty(severities, int, "severities", "a non-empty collection of ints in 1..5")
    for s in values:
        check_int(s, "severities", _OWNER, low=1)
        check_option(s, "severities", _OWNER, SEVERITIES)
    return tuple(dict.fromkeys(int(s) for s in values))


def _mlp_logits(mlp: object, x: np.ndarray) -> np.ndarray:
    """Pre-softmax outputs of a fitted ``MLPClassifier`` (its forward pass without the softmax)."""
    from sklearn.neural_network._base import ACTIVATIONS

    coefs = mlp.coefs_  # type: ignore[attr-defined]
    intercepts = mlp.intercepts_  # type: ignore[attr-defined]
    hidden = ACTIVATIONS[mlp.activation]  # type: ignore[attr-defined]
    a = x
    for w, b in zip(coefs[:-1], intercepts[:-1], strict=True):
        a = a @ w + b
        hidden(a)  # in place
    return np.asarray(a @ coefs[-1] + intercepts[-1], dtype=np.float64)


def _build(
    seed: int, corruptions: tuple[str, ...], severities: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.5, stratify=y, random_state=seed
    )
    mlp = MLPClassifier(hidden_layer_sizes=(128,), alpha=1e-4, max_iter=300, random_state=seed)
    # Tiny matrices: a multi-threaded BLAS spends ~20x longer synchronising than computing.
    with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.fit(x_train / 16.0, y_train)
    if mlp.out_activation_ != "softmax":  # pragma: no cover - 10 classes always give softmax
        raise RuntimeError(f"expected a softmax output layer, got {mlp.out_activation_!r}")
    clean = _mlp_logits(mlp, x_test / 16.0)
    if not np.allclose(softmax(clean, axis=1), mlp.predict_proba(x_test / 16.0), atol=1e-10):
        raise RuntimeError("MLP logits do not reproduce predict_proba")  # pragma: no cover
    train_acc = float(np.mean(mlp.predict(x_train / 16.0) == y_train))
    shifted = np.empty((len(corruptions) * len(severities), *clean.shape))
    for i, (c, s) in enumerate((c, s) for c in corruptions for s in severities):
        shifted[i] = _mlp_logits(mlp, corrupt(x_test, c, s, seed) / 16.0)
    return clean, y_test.astype(np.int64), shifted, train_acc


def _cache_file(seed: int, corruptions: tuple[str, ...], severities: tuple[int, ...]) -> Path:
    import sklearn

    key = json.dumps(
        {
            "seed": seed,
            "corruptions": list(corruptions),
            "severities": list(severities),
            "code": _code_version(),
            "sklearn": sklearn.__version__,
        },
        sort_keys=True,
    )
    return cache_dir() / f"digits_shift-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"


def _load(path: Path, n_sets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            out = (npz["clean"], npz["labels"], npz["shifted"], float(npz["train_accuracy"]))
    except (OSError, KeyError, ValueError):
        return None  # missing or unreadable: rebuild
    return out if out[2].shape[0] == n_sets else None


def _save(
    path: Path, clean: np.ndarray, labels: np.ndarray, shifted: np.ndarray, acc: float
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, clean=clean, labels=labels, shifted=shifted, train_accuracy=acc)
        os.replace(tmp, path)  # atomic: concurrent builders never see a half-written file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def digits_shift(
    seed: int = 0,
    corruptions: Iterable[str] | str | None = None,
    severities: Iterable[int] | int = SEVERITIES,
    cache: bool = True,
) -> DigitsShift:
    """Build (or load from the cache) the digits distribution-shift benchmark.

    See the module docstring for the split and the network, docs/data.md for the corruptions.

    Parameters
    ----------
    seed : int
        Seeds the train / test split, the MLP and every corruption (``>= 0``). The same seed gives
        bit-identical arrays.
    corruptions : str or iterable of str, optional
        Names from :data:`CORRUPTIONS`; ``None`` (default) builds all 15.
    severities : int or iterable of int
        Severities in 1..5 (default all five).
    cache : bool
        Read and write ``cache_dir()/digits_shift-<hash>.npz``; the hash covers the seed, the
        corruptions, the severities, this module's source and the scikit-learn version.
        ``False`` always rebuilds and writes nothing.

    Raises
    ------
    ValueError
        Naming ``seed``, ``corruptions`` or ``severities`` when one is invalid.

    Examples
    --------
    >>> ds = digits_shift(corruptions=["fog"], severities=[5], cache=False)
    >>> ds.clean[0].shape, ds.shifted[("fog", 5)][0].shape
    ((899, 10), (899, 10))
    """
    seed = check_int(seed, "seed", _OWNER, low=0)
    names = _check_corruptions(corruptions)
    sevs = _check_severities(severities)
    if not isinstance(cache, bool):
        raise ValueError(
            f"The 'cache' parameter of {_OWNER} must be a bool. Got {cache!r} instead."
        )
    n_sets = len(names) * len(sevs)
    path = _cache_file(seed, names, sevs) if cache else None
    built = _load(path, n_sets) if path is not None and path.is_file() else None
    if built is None:
        built = _build(seed, names, sevs)
        if path is not None:
            _save(path, *built)
    clean, labels, shifted, train_acc = built
    labels = _readonly(labels)
    pairs = ((c, s) for c in names for s in sevs)
    return DigitsShift(
        clean=(_readonly(clean), labels),
        shifted={key: (_readonly(shifted[i]), labels) for i, key in enumerate(pairs)},
        train_accuracy=train_acc,
        seed=seed,
        corruptions=names,
        severities=sevs,
    )

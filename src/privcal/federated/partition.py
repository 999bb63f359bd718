"""Partition a labelled dataset over federated clients (seed 003 App. A.2).

* :func:`dirichlet_partition`: label skew of Yurochkin et al. (2019). For each class ``j`` a
  vector of client shares :math:`p_j \\sim \\mathrm{Dirichlet}(\\beta 1_K)` is drawn and the rows of
  class ``j`` are dealt to the clients in proportion to :math:`p_{j,k}`. Small ``beta`` gives
  strong skew; large ``beta`` approaches IID.
* :func:`iid_partition`: a uniformly random split into near-equal parts.
* :func:`stratified_partition`: near-equal parts that each keep the class proportions.
* :func:`group_partition`: one client per value of a group column (a natural partition, as LEAF).
* :func:`split_clients`: each client splits its rows into a calibration part and a test part.

Every function returns a list of sorted ``int64`` index arrays into the original rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privcal._params import FRACTION, POSITIVE, check_int

__all__ = [
    "dirichlet_partition",
    "group_partition",
    "iid_partition",
    "split_clients",
    "stratified_partition",
]


def _check_n_clients(n_clients: Any, n: int, owner: str) -> int:
    k = check_int(n_clients, "n_clients", owner, low=1)
    if k > n:
        raise ValueError(
            f"The 'n_clients' parameter of {owner} must be an int in [1, {n}] (at most the "
            f"number of examples, {n}). Got {n_clients!r} instead."
        )
    return k


def _labels(labels: Any, owner: str) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0 or y.dtype.kind not in "iu":
        raise ValueError(
            f"The 'labels' parameter of {owner} must be a non-empty 1-D array of ints. "
            f"Got an array of shape {y.shape} and dtype {y.dtype} instead."
        )
    return y


def _parts_of(client: np.ndarray, k: int) -> list[np.ndarray]:
    """The sorted rows of each of the ``k`` clients, ``client[i]`` being row ``i``'s."""
    order = np.argsort(client, kind="stable")
    return np.split(order, np.cumsum(np.bincount(client, minlength=k))[:-1])


def dirichlet_partition(
    labels: Any,
    n_clients: int = 100,
    beta: float = 0.1,
    seed: int = 0,
    *,
    min_size: int = 1,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Dirichlet label-skew partition (seed 003 App. A.2, Yurochkin et al. 2019).

    Parameters
    ----------
    labels : array_like of int, shape (N,)
    n_clients : int, default=100
        ``K``, in ``[1, N]``.
    beta : float, default=0.1
        Concentration, ``> 0``; smaller is more skewed.
    seed : int, default=0
    min_size : int, default=1
        Every client gets at least this many rows; draws are repeated (up to ``max_tries``)
        until that holds, as in the reference implementation.
    max_tries : int, default=100

    Returns
    -------
    list of ndarray
        ``K`` sorted index arrays that partition ``range(N)``.

    Notes
    -----
    For class ``j`` with rows ``I_j`` (shuffled), client ``k`` receives the slice between
    ``floor(|I_j| cumsum(p_j)[k-1])`` and ``floor(|I_j| cumsum(p_j)[k])``.

    Examples
    --------
    >>> y = np.repeat(np.arange(3), 20)
    >>> parts = dirichlet_partition(y, n_clients=4, beta=0.5, seed=0)
    >>> sorted(np.concatenate(parts).tolist()) == list(range(60))
    True
    """
    owner = "dirichlet_partition"
    y = _labels(labels, owner)
    k = _check_n_clients(n_clients, y.size, owner)
    b = POSITIVE.check(beta, "beta", owner)
    check_int(seed, "seed", owner, low=0)
    m = check_int(min_size, "min_size", owner, low=0)
    tries = check_int(max_tries, "max_tries", owner, low=1)
    if m * k > y.size:
        raise ValueError(
            f"{owner}: {k} clients with min_size={m} need at least {m * k} examples; "
            f"labels has {y.size}."
        )
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    for _ in range(tries):
        owner_of = np.empty(y.size, dtype=np.int64)
        for j in classes:
            rows = np.flatnonzero(y == j)
            rng.shuffle(rows)
            p = rng.dirichlet(np.full(k, b))
            cuts = np.floor(np.cumsum(p) * rows.size).astype(np.int64)
            cuts[-1] = rows.size
            owner_of[rows] = np.searchsorted(cuts, np.arange(rows.size), side="right")
        if np.bincount(owner_of, minlength=k).min() >= m:
            return _parts_of(owner_of, k)
    raise ValueError(
        f"{owner}: no draw in {tries} tries gave every one of the {k} clients at least "
        f"{m} examples (beta={b!r}). Use fewer clients, a larger beta or min_size=0."
    )


def iid_partition(n: int, n_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Uniformly random partition of ``range(n)`` into ``n_clients`` parts of near-equal size."""
    owner = "iid_partition"
    n = check_int(n, "n", owner, low=1)
    k = _check_n_clients(n_clients, n, owner)
    perm = np.random.default_rng(check_int(seed, "seed", owner, low=0)).permutation(n)
    return [np.sort(a) for a in np.array_split(perm, k)]


def stratified_partition(labels: Any, n_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Partition the rows into ``n_clients`` parts of near-equal size, stratified by label.

    The rows are shuffled within each class, the classes are laid end to end, and row ``i`` of
    that order goes to client ``i mod K``. So a class with ``n_j`` rows gives each client
    :math:`\\lfloor n_j / K \\rfloor` or :math:`\\lceil n_j / K \\rceil` of them (each part keeps
    the class proportions up to one row per class), and the part sizes differ by at most one:
    :math:`\\lfloor N / K \\rfloor` or :math:`\\lceil N / K \\rceil`. A class with fewer than
    ``K`` rows is in some parts only.

    Parameters
    ----------
    labels : array_like of int, shape (N,)
    n_clients : int
        ``K``, in ``[1, N]``.
    seed : int, default=0

    Returns
    -------
    list of ndarray
        ``K`` sorted index arrays that partition ``range(N)``.

    Examples
    --------
    >>> y = np.repeat(np.arange(3), [10, 6, 4])
    >>> parts = stratified_partition(y, n_clients=2, seed=0)
    >>> [np.bincount(y[p]).tolist() for p in parts]
    [[5, 3, 2], [5, 3, 2]]
    """
    owner = "stratified_partition"
    y = _labels(labels, owner)
    k = _check_n_clients(n_clients, y.size, owner)
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
    order = np.concatenate([rng.permutation(np.flatnonzero(y == j)) for j in np.unique(y)])
    client = np.empty(y.size, dtype=np.int64)
    client[order] = np.arange(y.size) % k
    return _parts_of(client, k)


def group_partition(groups: Any) -> list[np.ndarray]:
    """One client per distinct value of ``groups`` (ordered by the sorted group values)."""
    g = np.asarray(groups)
    if g.ndim != 1 or g.size == 0:
        raise ValueError(
            "The 'groups' parameter of group_partition must be a non-empty 1-D array. "
            f"Got shape {g.shape} instead."
        )
    values, inv = np.unique(g, return_inverse=True)
    return _parts_of(inv.ravel(), values.size)


def split_clients(
    parts: list[np.ndarray], calibration_fraction: float = 0.5, seed: int = 0
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split each client's rows into a calibration part and a test part.

    Each client with ``n_k`` rows keeps ``round(calibration_fraction * n_k)`` random rows for
    calibration (at least one when ``n_k >= 1``) and the rest for test. Returns two lists of
    index arrays aligned with ``parts``.
    """
    owner = "split_clients"
    f = FRACTION.check(calibration_fraction, "calibration_fraction", owner)
    rng = np.random.default_rng(check_int(seed, "seed", owner, low=0))
    cal, test = [], []
    for idx in parts:
        idx = np.asarray(idx, dtype=np.int64)
        perm = rng.permutation(idx)
        n_cal = min(idx.size, max(1, round(f * idx.size))) if idx.size else 0
        cal.append(np.sort(perm[:n_cal]))
        test.append(np.sort(perm[n_cal:]))
    return cal, test

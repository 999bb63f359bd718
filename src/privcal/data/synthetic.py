"""Synthetic data sets with known ground truth.

:func:`gaussian_2d` is the two-class Gaussian mixture of seed 001 (App. B.1): "two-dimensional
mixture Gaussian data of size 10k. The distance between the centers of two class data shifts by a
constant, which is set to be 2 * 1.5 [...] the amount of data points from each class as 5k".
"""

from __future__ import annotations

import numpy as np

from privcal._params import POSITIVE, check_int

__all__ = ["gaussian_2d"]


def gaussian_2d(n: int, shift: float = 1.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two balanced 2-D Gaussian classes whose centres are ``2 * shift`` apart (seed 001, B.1).

    Exactly what is drawn:

    * class sizes: ``n0 = n - n // 2`` examples of class 0 and ``n1 = n // 2`` of class 1
      (5k / 5k for the paper's ``n = 10_000``);
    * class 0: :math:`x \\sim \\mathcal N((-s, 0), I_2)`, class 1:
      :math:`x \\sim \\mathcal N((+s, 0), I_2)` with :math:`s =` ``shift``, so the centres are
      :math:`2s` apart (the paper's "2 * 1.5" with the default ``shift=1.5``) and the unit
      covariance is shared;
    * the rows are then shuffled.

    The Bayes classifier is :math:`1[x_1 > 0]`, with accuracy :math:`\\Phi(s)` (0.933 for
    ``s = 1.5``), and the Bayes posterior is the logistic model
    :math:`P(y = 1 \\mid x) = \\sigma(2 s x_1)`, so logistic regression (the paper's classifier)
    is well specified.

    Parameters
    ----------
    n : int
        Number of examples, ``n >= 2`` (at least one per class).
    shift : float
        Half the distance between the class centres, ``shift > 0``.
    seed : int
        Seed of ``numpy.random.default_rng``; the same seed gives the same data.

    Returns
    -------
    X : ndarray of shape (n, 2), float64
    y : ndarray of shape (n,), int64 in {0, 1}

    Examples
    --------
    >>> X, y = gaussian_2d(10, seed=1)
    >>> X.shape, int(y.sum())
    ((10, 2), 5)
    """
    n = check_int(n, "n", "gaussian_2d", low=2)
    shift = POSITIVE.check(shift, "shift", "gaussian_2d")
    seed = check_int(seed, "seed", "gaussian_2d", low=0)
    rng = np.random.default_rng(seed)
    y = np.repeat(np.array([0, 1], dtype=np.int64), [n - n // 2, n // 2])
    centres = np.array([[-shift, 0.0], [shift, 0.0]])
    X = centres[y] + rng.standard_normal((n, 2))
    order = rng.permutation(n)
    return X[order], y[order]

"""Synthetic data sets with known ground truth.

:func:`gaussian_2d` is the two-class Gaussian mixture of seed 001 (App. B.1): "two-dimensional
mixture Gaussian data of size 10k. The distance between the centers of two class data shifts by a
constant, which is set to be 2 * 1.5 [...] the amount of data points from each class as 5k".

:func:`multilabel` is the multilabel set for conformal risk control: scikit-learn's
``make_multilabel_classification`` and a one-vs-rest logistic regression fitted on held-out rows.
"""

from __future__ import annotations

import numpy as np

from privcal._params import POSITIVE, check_int

__all__ = ["gaussian_2d", "multilabel"]


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


def multilabel(
    n: int,
    n_labels: int = 10,
    n_features: int = 20,
    n_train: int = 2000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-label probabilities and true label sets of ``n`` rows (conformal risk control's data).

    Exactly what is drawn: ``make_multilabel_classification(n_train + n, n_features,
    n_classes=n_labels, n_labels=2, allow_unlabeled=False, random_state=seed)`` (each row has at
    least one true label, two on average before truncation); a
    ``OneVsRestClassifier(LogisticRegression(max_iter=1000))`` is fitted on the first
    ``n_train`` rows, and the other ``n`` rows get its per-label probabilities.

    Parameters
    ----------
    n : int
        Rows returned (calibration and test), ``n >= 1``.
    n_labels : int
        ``K``, ``>= 2``.
    n_features : int
        ``>= 1``.
    n_train : int
        Rows the model is fitted on (not returned), ``>= 50``.
    seed : int
        The same seed gives the same data.

    Returns
    -------
    probs : ndarray of shape (n, n_labels), float64 in [0, 1]
    labels : ndarray of shape (n, n_labels), bool

    Examples
    --------
    >>> p, y = multilabel(100, seed=1)
    >>> p.shape, y.dtype, bool(y.any(axis=1).all())
    ((100, 10), dtype('bool'), True)
    """
    from sklearn.datasets import make_multilabel_classification
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    owner = "multilabel"
    n = check_int(n, "n", owner, low=1)
    k = check_int(n_labels, "n_labels", owner, low=2)
    d = check_int(n_features, "n_features", owner, low=1)
    n_train = check_int(n_train, "n_train", owner, low=50)
    seed = check_int(seed, "seed", owner, low=0)
    X, Y = make_multilabel_classification(
        n_samples=n_train + n,
        n_features=d,
        n_classes=k,
        n_labels=2,
        allow_unlabeled=False,
        random_state=seed,
    )
    model = OneVsRestClassifier(LogisticRegression(max_iter=1000))
    model.fit(X[:n_train], Y[:n_train])
    probs = np.asarray(model.predict_proba(X[n_train:]), dtype=np.float64)
    return probs, np.asarray(Y[n_train:], dtype=bool)

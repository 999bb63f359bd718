"""Group-conditional (Mondrian) private prediction sets: one private threshold per group.

With a group label ``g(x)`` known at calibration and at test time (the predicted class, a site, an
age band), Mondrian conformal prediction (Vovk et al. 2003) calibrates each group on its own rows,
so the coverage holds **within every group**: ``P(y in C(x) | g(x) = g) >= 1 - alpha``, because
the calibration and test points of one group are exchangeable among themselves. Here each group's
threshold is released by the single-party mechanism (:class:`~privcal.conformal.PrivateConformal`
on that group's rows, with its own coverage theorem), at the whole ``epsilon``.

**Privacy.** The groups' rows are disjoint, so the releases compose in parallel: ``epsilon``-DP
for the whole fit. The neighbouring relation is **substitute one calibration example within its
group**, and the group sizes ``n_g`` are public (each group's mechanism treats its ``n`` as
public, as the single-party fit does); an example that moved to another group would change two
group sizes, which this relation does not cover. The group labels of the test points are inputs
to ``predict_set``, not data of the fit.

**Too small a group.** A group with fewer rows than
:func:`~privcal.conformal.min_calibration_size` has no valid private threshold at this
``alpha`` and ``epsilon``. ``small_groups="refuse"`` (the default) raises before any release and
names those groups and the size needed; ``"pool"`` calibrates all of them together as one group
(still disjoint from the others, so the guarantee is unchanged) with a warning that names them:
their coverage then holds over their union, not within each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SMALL_GROUPS", "group_rows"]

#: What ``PrivateConformal(small_groups=...)`` does with a group too small for a threshold.
SMALL_GROUPS = ("refuse", "pool")


def group_rows(groups: Any, n: int, owner: str) -> dict[Any, np.ndarray]:
    """Row indices of each group label, in sorted label order (validated: one label a row)."""
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != n:
        raise ValueError(
            f"The 'groups' parameter of {owner}.fit must hold one group label per calibration "
            f"row ({n}). Got shape {g.shape} instead."
        )
    if g.dtype.kind == "f" and not np.all(np.isfinite(g)):
        raise ValueError(f"The 'groups' parameter of {owner}.fit holds NaN or inf labels.")
    labels, inverse = np.unique(g, return_inverse=True)
    return {label.item(): np.flatnonzero(inverse == i) for i, label in enumerate(labels)}


def test_groups(groups: Any, n: int, known: dict[Any, float], owner: str) -> list[Any]:
    """The group label of each test row, refused if unknown to the fit or of the wrong length."""
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != n:
        raise ValueError(
            f"The 'groups' parameter of {owner}.predict_set must hold one group label per row "
            f"({n}). Got shape {g.shape} instead."
        )
    labels = [x.item() if hasattr(x, "item") else x for x in g]
    unknown = sorted({x for x in labels if x not in known}, key=repr)
    if unknown:
        raise ValueError(
            f"The 'groups' parameter of {owner}.predict_set holds groups the fit never saw: "
            f"{', '.join(map(repr, unknown[:5]))}. Known groups: "
            f"{', '.join(map(repr, list(known)[:10]))}."
        )
    return labels

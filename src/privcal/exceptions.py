"""privcal's warning base class.

Every warning privcal emits derives from :class:`PrivcalWarning` (itself a ``UserWarning``), so
one filter selects them all::

    import warnings
    from privcal.exceptions import PrivcalWarning

    warnings.simplefilter("error", PrivcalWarning)  # e.g. in a test suite

The test suite does exactly that (``error::privcal.exceptions.PrivcalWarning`` in
``pyproject.toml``): a test that triggers one of privcal's warnings must assert it with
``pytest.warns``. The CLI shows them as one ``Warning:`` line per kind
(:func:`privcal.cli._common.collect_warnings`).
"""

from __future__ import annotations

__all__ = ["PrivcalWarning"]


class PrivcalWarning(UserWarning):
    """Base class of every warning privcal emits (a ``UserWarning``, so shown by default).

    Subclasses: :class:`~privcal.calibrators.base.FitWarning` (and its subclasses),
    :class:`~privcal.conformal.FullSetWarning`,
    :class:`~privcal.data.validation.ZeroProbabilityWarning`,
    :class:`~privcal.data.validation.ProbabilitiesAsLogitsWarning`,
    :class:`~privcal.data.validation.RoundedProbabilityWarning`,
    :class:`~privcal.privacy.InsecureNoiseWarning`,
    :class:`~privcal.privacy.UnaccountedFitWarning`,
    :class:`~privcal.calibrators.binning.UnnormalisableRowsWarning`.
    """

"""Private recalibration across private data sources (seed 000).

* :class:`DataSource`: one party's private validation data behind a closed vocabulary of
  Laplace-mechanism queries and a :class:`~privcal.privacy.PrivacyOdometer`.
* :class:`PrivateTemperatureScaling` (Acc-T, NLL-T, ECE-T) and :class:`PrivateHistogramBinning`:
  calibrators that query the sources; ``privacy_report_`` lists every release.
* Baselines: :class:`NoRecalibration` and :func:`one_source`.

See ``docs/private.md``.
"""

from privcal.privacy import InsecureNoiseWarning
from privcal.private.baselines import NoRecalibration, one_source
from privcal.private.binning import PrivateHistogramBinning, noisy_bin_values
from privcal.private.fallback import release_check
from privcal.private.parallel import split_budget
from privcal.private.plan import SearchPlan, TooFewRowsError, search_plan
from privcal.private.queries import QUERIES, BinCounts, query_sensitivity
from privcal.private.rows import data_fingerprint, row_digests
from privcal.private.source import DataSource
from privcal.private.temperature import NoiseDominatedWarning, PrivateTemperatureScaling

__all__ = [
    "QUERIES",
    "BinCounts",
    "DataSource",
    "InsecureNoiseWarning",
    "NoRecalibration",
    "NoiseDominatedWarning",
    "PrivateHistogramBinning",
    "PrivateTemperatureScaling",
    "SearchPlan",
    "TooFewRowsError",
    "data_fingerprint",
    "noisy_bin_values",
    "one_source",
    "query_sensitivity",
    "release_check",
    "row_digests",
    "search_plan",
    "split_budget",
]

"""Conformity scores for classification (LAC, APS): the public path of
:mod:`privcal.metrics.conformity`, where they are defined (a private data source computes them
too, and the private layer sits below this one)."""

from privcal.metrics.conformity import SCORES, aps_scores, conformity, lac_scores, score_histogram

__all__ = ["SCORES", "aps_scores", "conformity", "lac_scores", "score_histogram"]

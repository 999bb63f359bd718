"""Experiments: the paper protocols, the scoreboard and the end-to-end demo (their documents
are written by :mod:`privcal.report`)."""

__all__: list[str] = []

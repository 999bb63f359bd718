"""Experiments: paper protocols, the end-to-end demo, and the Markdown report writer."""

__all__: list[str] = []

"""Everything that turns results into documents: summaries, Markdown, HTML.

One job per module, each importing only those above it in this list (and nothing from
:mod:`privcal.cli` or :mod:`privcal.experiments`, which use this package):

* :mod:`~privcal.report.formatting`: the one number formatter (:func:`format_value`, one unit
  rule) and the one JSON encoder (:func:`jsonable`, :func:`write_json`);
* :mod:`~privcal.report.blocks`: the blocks a report is made of (text, takeaway, table,
  figure, privacy) and the :class:`Report` page that holds them;
* :mod:`~privcal.report.figures`: a figure block drawn as a matplotlib Figure (:func:`draw`);
* :mod:`~privcal.report.results`: a run's sections and metadata as ``results.json``;
* :mod:`~privcal.report.markdown`: Markdown tables, blocks as Markdown, ``report.md``;
* :mod:`~privcal.report.summaries`: the ``*.summary.json`` that ``privcal fit``,
  ``evaluate`` and ``conformal`` write;
* :mod:`~privcal.report.scoreboard_page`: ``privcal bench scoreboard``'s Markdown page and
  JSON, from plain data (:func:`~privcal.report.scoreboard_page.scoreboard_data`);
* :mod:`~privcal.report.readers`: each command's output folder read back as blocks
  (:func:`find_outputs`, :func:`build`);
* :mod:`~privcal.report.html_page`: the self-contained HTML page of ``privcal report``
  (:func:`render_html`, :func:`write_html`).
"""

from privcal.report import blocks
from privcal.report.blocks import *  # noqa: F403 -- every block is part of this package's API
from privcal.report.figures import draw
from privcal.report.formatting import UNITS, format_value, jsonable, write_json
from privcal.report.html_page import render_html, write_html
from privcal.report.markdown import markdown_table, to_markdown, write_report
from privcal.report.readers import Output, build, find_outputs
from privcal.report.results import RESULTS_FILE, Section, run_metadata, write_results
from privcal.report.summaries import (
    conformal_summary_data,
    evaluate_summary,
    fit_summary,
    risk_summary_data,
    summary_path,
    write_summary,
)

__all__ = [
    *blocks.__all__,
    "RESULTS_FILE",
    "UNITS",
    "Output",
    "Section",
    "build",
    "conformal_summary_data",
    "draw",
    "evaluate_summary",
    "find_outputs",
    "fit_summary",
    "format_value",
    "jsonable",
    "markdown_table",
    "render_html",
    "risk_summary_data",
    "run_metadata",
    "summary_path",
    "to_markdown",
    "write_html",
    "write_json",
    "write_report",
    "write_results",
    "write_summary",
]

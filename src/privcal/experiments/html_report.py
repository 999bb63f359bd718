"""``privcal report``: one self-contained HTML page from the outputs privcal writes.

:func:`find_outputs` recognises what a folder (or file) holds, by the machine-readable files the
verbs write (never their Markdown or console output):

========================  ===============================================================
``privcal demo``          ``results.json`` (every section's blocks)
``privcal federate``      ``calibrator.json`` + ``history.json`` (+ ``privacy_report.json``,
server                    ``check.json`` with ``--val``, ``config.json``)
``privcal fit``           ``*.summary.json`` with ``"privcal": "fit"`` (beside the calibrator)
``privcal evaluate``      the ``--out`` JSON (``"privcal": "evaluate"``)
``privcal conformal``     ``*.summary.json`` with ``"privcal": "conformal"`` (beside the sets)
``privcal bench           the ``.json`` beside the Markdown (``"privcal": "scoreboard"``)
scoreboard``
========================  ===============================================================

:func:`build` turns them into :mod:`~privcal.experiments.document` blocks (tables keep the raw
values of the file they were read from, named in the table's ``data-source``), and
:func:`render_html` writes the page: inline CSS, figures as inline SVG data URIs drawn by
matplotlib without pyplot (text as paths, so no font is fetched), a Content-Security-Policy
that forbids every network request, and "What this shows" first: findings computed from the
numbers.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privcal import __version__
from privcal.experiments.document import (
    ECE_UNIT_NOTE,
    cell_text,
    column,
    draw,
    header_text,
    plain,
    privacy_block,
    privacy_sentences,
    reliability_figure,
    table,
    takeaway,
    text,
)

__all__ = ["Output", "Report", "build", "find_outputs", "render_html", "write_html"]

_FEDERATE_FILES = ("calibrator.json", "history.json")
_WHAT = (
    "results.json from 'privcal demo', calibrator.json + history.json from 'privcal federate "
    "server', NAME.summary.json from 'privcal fit' or 'privcal conformal', the JSON of "
    "'privcal evaluate --out' or of 'privcal bench scoreboard'"
)


@dataclass
class Output:
    """One output privcal wrote: its kind, its main file and the folder it lives in."""

    kind: str  # demo, federate, federate-interrupted, fit, evaluate, conformal, scoreboard
    path: Path
    data: dict[str, Any]


@dataclass
class Report:
    """The page: a title, run details, findings and sections of blocks."""

    title: str
    meta: list[tuple[str, str]] = field(default_factory=list)
    sections: list[dict[str, Any]] = field(default_factory=list)

    @property
    def takeaways(self) -> list[str]:
        return [b["text"] for s in self.sections for b in s["blocks"] if b["type"] == "takeaway"]


# -- finding outputs ------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _kind_of(path: Path) -> Output | None:
    data = _read_json(path)
    if isinstance(data, dict) and isinstance(data.get("privcal"), str):
        kind = data["privcal"]
        if kind in ("demo", "fit", "evaluate", "conformal", "scoreboard"):
            return Output(kind, path, data)
    return None


def find_outputs(path: str | Path) -> list[Output]:
    """Every privcal output in ``path`` (a folder, or one file privcal wrote).

    Raises
    ------
    ValueError
        If ``path`` does not exist or holds nothing privcal wrote (the message says what is
        looked for).
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(
            f"No file or folder at {str(path)!r}; pass the output folder (or file) of a privcal "
            "command, e.g. 'privcal report privcal-demo'."
        )
    if path.is_file():
        out = _kind_of(path)
        if out is None:
            side = path.with_name(f"{path.stem}.summary.json")
            out = _kind_of(side) if side.is_file() else None
        if out is None and path.name in _FEDERATE_FILES:
            return find_outputs(path.parent)
        if out is None:
            raise ValueError(
                f"{str(path)!r} is not an output privcal report reads ({_WHAT}); pass one of "
                "those, or the folder that holds it."
            )
        return [out]
    found: list[Output] = []
    stopped = _read_json(path / "interrupted.json")
    if isinstance(stopped, dict) and stopped.get("interrupted"):  # a run stopped before release
        history = _read_json(path / "history.json")
        stopped["history"] = history if isinstance(history, list) else []
        found.append(Output("federate-interrupted", path, stopped))
    elif all((path / f).is_file() for f in _FEDERATE_FILES):
        history = _read_json(path / "history.json")
        if isinstance(history, list):
            found.append(Output("federate", path, {"history": history}))
    names = sorted(p for p in path.glob("*.json") if p.name not in _FEDERATE_FILES)
    found += [o for o in (_kind_of(p) for p in names) if o is not None]
    if not found:
        raise ValueError(
            f"{str(path)!r} holds nothing privcal wrote (looked for {_WHAT}); run the command "
            "first, or pass the folder it wrote."
        )
    return found


# -- building the page ----------------------------------------------------------------------------


def build(outputs: Sequence[Output]) -> Report:
    """The page for ``outputs`` (from :func:`find_outputs`)."""
    if len(outputs) == 1 and outputs[0].kind == "demo":
        return _demo(outputs[0])
    builders = {
        "demo": _demo_sections,
        "federate": _federate,
        "federate-interrupted": _interrupted,
        "fit": _fit,
        "evaluate": _evaluate,
        "conformal": _conformal,
        "scoreboard": _scoreboard,
    }
    sections: list[dict[str, Any]] = []
    for o in outputs:
        sections += builders[o.kind](o)
    kinds = sorted({o.kind for o in outputs})
    title = "privcal report: " + ", ".join(kinds)
    return Report(title, [("Outputs", ", ".join(o.path.name for o in outputs))], sections)


def _section(title: str, blocks: list[dict[str, Any]], source: str) -> dict[str, Any]:
    for b in blocks:
        if b["type"] in ("table", "privacy"):
            b.setdefault("source", source)
    return {"title": title, "blocks": blocks, "error": None}


def _demo(o: Output) -> Report:
    d = o.data
    meta = [
        ("Command", str(d.get("command", ""))),
        ("Date", str(d.get("date", ""))),
        ("Seed", str(d.get("seed", ""))),
        ("Versions", f"privcal {d.get('version', '?')}, Python {d.get('python', '?')}"),
        ("Runtime", f"{float(d.get('seconds') or 0):.1f} s"),
    ]
    return Report(str(d.get("title", "privcal demo")), meta, _demo_sections(o))


def _demo_sections(o: Output) -> list[dict[str, Any]]:
    out = []
    for s in o.data.get("sections", []):
        sec = _section(s["title"], list(s.get("blocks", [])), o.path.name)
        sec["error"] = s.get("error")
        sec["seconds"] = s.get("seconds")
        out.append(sec)
    return out


_METRIC_UNITS = {
    "Accuracy": "percent",
    "ECE": "percent",
    "Classwise ECE": "percent",
    "MCE": "percent",
    "Adaptive ECE": "percent",
}


def _metrics_table(
    title: str, metrics: Mapping[str, Mapping[str, float]], source: str, *, note: str = ""
) -> dict[str, Any]:
    """Metric rows (one per metric) with a column per score set and their change.

    Calibration errors and accuracy are in percent like everywhere else; Brier and NLL keep
    their own scale. ``metrics`` maps a column name to ``{metric: value}``."""
    names = list(metrics)
    rows = []
    for m in next(iter(metrics.values())):
        row: dict[str, Any] = {"metric": m, "unit": _METRIC_UNITS.get(m, "number")}
        for i, n in enumerate(names):
            row[f"c{i}"] = metrics[n].get(m)
        rows.append(row)
    blocks_rows = []
    # one table per unit so that every column has one unit
    pct = [r for r in rows if r["unit"] == "percent"]
    other = [r for r in rows if r["unit"] != "percent"]
    for subset, unit in ((pct, "percent"), (other, "number")):
        if not subset:
            continue
        cols = [column("metric", "Metric")]
        cols += [column(f"c{i}", n, unit) for i, n in enumerate(names)]
        blocks_rows.append((subset, cols, unit))
    out = []
    for subset, cols, unit in blocks_rows:
        t = title + (" (%)" if unit == "percent" else " (Brier, NLL: their own scale)")
        out.append(table(t, cols, subset, note=note or None, source=source))
    return out[0] if len(out) == 1 else {"type": "group", "blocks": out}


def _flatten(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for b in blocks:
        out += b["blocks"] if b["type"] == "group" else [b]
    return out


def _change(before: float | None, after: float | None) -> str:
    if before is None or after is None:
        return ""
    return f"{100 * before:.2f}% -> {100 * after:.2f}% ({100 * (after - before):+.2f} pp)"


def _fit(o: Output) -> list[dict[str, Any]]:
    d, src = o.data, o.path.name
    blocks: list[dict[str, Any]] = []
    params = ", ".join(f"{k}={v}" for k, v in (d.get("params") or {}).items())
    n = f" on {d['n_samples']} examples, {d['n_classes']} classes" if "n_samples" in d else ""
    metrics = d.get("metrics")
    if isinstance(d.get("released"), Mapping):  # summaries from before it have no such line
        private = "private " if d.get("private") else ""
        what = f"The {private}{d['method']} fit ({d['class']}) released"
        blocks.append(takeaway(_release_finding(what, d, {})))
    if metrics:
        cols = list(metrics)
        before, after = metrics[cols[0]], metrics[cols[-1]]
        blocks.append(
            takeaway(
                f"{d['method']} ({d['class']}) fitted{n}: ECE "
                f"{_change(before['ECE'], after['ECE'])} and accuracy "
                f"{_change(before['Accuracy'], after['Accuracy'])} on the data it "
                "was fitted on (in-sample; measure held-out data with 'privcal evaluate')."
            )
        )
    elif d.get("private"):
        rep = d.get("privacy_report") or {}
        blocks.append(
            takeaway(
                f"Private {d['method']} ({d['class']}) fitted{n} at ε = "
                f"{_num(rep.get('epsilon'))} per source ({rep.get('status', '?')}); no statistic "
                "of the private data is shown (it would be a release nobody paid for)."
            )
        )
    blocks.append(
        text(
            f"`{d.get('command', 'privcal fit')}` wrote `{d.get('calibrator')}`: method "
            f"{d['method']} ({d['class']}){n}; parameters: {params or 'none'}."
        )
    )
    if metrics:
        blocks.append(
            _metrics_table(
                "Metrics of the input scores before and after the calibrator",
                metrics,
                src,
                note=f"{d.get('n_bins', 15)} equal-width bins; measured on the fitting data.",
            )
        )
    rel = d.get("reliability")
    if rel:
        blocks.append(_reliability_block(rel, "Input scores", "Calibrated", "fitting data"))
    if d.get("privacy_report"):
        blocks.append(
            privacy_block(
                d["privacy_report"],
                trust=d.get("trust", "not recorded."),
                ledgers=d.get("ledgers"),
                source=src,
            )
        )
    if d.get("warnings"):
        blocks.append(text("Warnings while fitting: " + " ".join(d["warnings"])))
    return [_section(f"privcal fit: {o.path.name}", _flatten(blocks), src)]


def _reliability_block(
    rel: Mapping[str, Any], before: str, after: str, where: str
) -> dict[str, Any]:
    panels = [(before, rel["before"])]
    if "after" in rel:
        panels.append((after, rel["after"]))
    return reliability_figure(f"Reliability and confidence histogram ({where})", panels)


def _evaluate(o: Output) -> list[dict[str, Any]]:
    d, src = o.data, o.path.name
    metrics = d["metrics"]
    cols = list(metrics)
    first = metrics[cols[0]]
    if len(cols) > 1:
        last = metrics[cols[-1]]
        change = d.get("ece_change")
        found = (
            f"On {d['input']} ({d['n_samples']} examples) the calibrator takes the ECE "
            f"{_change(first['ECE'], last['ECE'])}"
            + (
                f" (95% bootstrap interval of the change [{100 * change['low']:+.2f}, "
                f"{100 * change['high']:+.2f}] pp: {change['verdict']})"
                if isinstance(change, Mapping)
                else ""
            )
            + f"; accuracy {_change(first['Accuracy'], last['Accuracy'])}."
        )
    else:
        found = (
            f"{d['input']} ({d['n_samples']} examples): ECE {100 * first['ECE']:.2f}% at "
            f"{100 * first['Accuracy']:.2f}% accuracy"
        )
        rel = (d.get("reliability") or {}).get("before")
        if rel:
            conf = _mean_confidence(rel)
            gap = conf - first["Accuracy"]
            found += (
                f"; the mean confidence is {100 * conf:.2f}%, "
                f"{'over' if gap > 0 else 'under'}-confident by {100 * abs(gap):.2f} pp"
            )
        found += "."
    blocks: list[dict[str, Any]] = [
        takeaway(found),
        text(
            f"`{d.get('command', 'privcal evaluate')}`: {d['n_samples']} examples, "
            + (f"{d['n_classes']} classes" if d.get("n_classes") else "top-label scores")
            + (f", calibrator `{d['calibrator']}`" if d.get("calibrator") else "")
            + "."
        ),
        _metrics_table(
            "Metrics",
            metrics,
            src,
            note=f"{d.get('n_bins', 15)} equal-width bins (binned metrics).",
        ),
    ]
    if d.get("reliability"):
        blocks.append(_reliability_block(d["reliability"], cols[0], cols[-1], d["input"]))
    return [_section(f"privcal evaluate: {d['input']}", _flatten(blocks), src)]


def _mean_confidence(rel: Mapping[str, Any]) -> float:
    """The mean top-label confidence, from a reliability diagram's per-bin data."""
    pairs = [(n, c) for n, c in zip(rel["counts"], rel["confidence"], strict=True) if n]
    return sum(n * c for n, c in pairs) / sum(n for n, _ in pairs)


def _conformal(o: Output) -> list[dict[str, Any]]:
    d, src = o.data, o.path.name
    alpha = float(d["alpha"])
    private = "privacy_report" in d
    kind = "Private conformal" if private else "Split conformal"
    cov = d.get("coverage")
    found = f"{kind} ({d['score']}, alpha = {alpha:g}) on {d['n_test']} test points: "
    if cov is not None:
        ok = "meets" if cov >= 1 - alpha else "is below"
        found += f"coverage {100 * cov:.2f}% {ok} the target {100 * (1 - alpha):g}%, "
    found += (
        f"mean set size {d['mean_size']:.2f} of {d['n_classes']} classes, "
        f"{100 * d['full_sets']:.1f}% full sets."
    )
    row = {k: d.get(k) for k in ("n_cal", "n_test", "threshold", "mean_size", "full_sets")}
    row["coverage"] = cov
    row["target"] = 1 - alpha
    blocks: list[dict[str, Any]] = [
        takeaway(found),
        text(
            f"`{d.get('command', 'privcal conformal')}`: calibration `{d['cal']}`, test "
            f"`{d['test']}`, sets written to `{d['sets']}`."
        ),
        table(
            "Summary",
            [
                column("n_cal", "Calibration points", "count"),
                column("n_test", "Test points", "count"),
                column("threshold", "Threshold", "number"),
                column("coverage", "Coverage", "percent"),
                column("target", "Target", "percent"),
                column("mean_size", "Mean set size", "number"),
                column("full_sets", "Full sets", "percent"),
            ],
            [row],
            source=src,
        ),
    ]
    counts = d["size_counts"]
    from privcal.experiments.document import bar_figure

    panels = [
        {
            "title": "Set sizes",
            "xlabel": "set size",
            "ylabel": "test points",
            "series": [{"name": kind, "x": list(range(len(counts))), "y": counts}],
        }
    ]
    by_size = d.get("coverage_by_size")
    if by_size:
        panels.append(
            {
                "title": "Coverage by set size",
                "xlabel": "set size",
                "ylabel": "coverage",
                "series": [
                    {
                        "name": kind,
                        "x": [r["size"] for r in by_size],
                        "y": [r["coverage"] for r in by_size],
                    }
                ],
            }
        )
    blocks.append(bar_figure("Prediction sets on the test points", panels))
    if by_size:
        blocks.append(
            table(
                "Coverage by set size",
                [
                    column("size", "Set size", "count"),
                    column("count", "Test points", "count"),
                    column("coverage", "Coverage", "percent"),
                ],
                by_size,
                source=src,
            )
        )
    if private:
        blocks.append(
            privacy_block(d["privacy_report"], trust=d.get("trust", "not recorded."), source=src)
        )
    return [_section(f"privcal conformal: {d['sets']}", blocks, src)]


def _interrupted(o: Output) -> list[dict[str, Any]]:
    """A federation stopped before its release (``interrupted.json``): what exists, and why."""
    d, folder = o.data, o.path
    rounds = len(d["history"])
    told = "every client was told and stopped" if d.get("clients_told") else (
        "the clients were not told (they stop when they lose the server)"
    )  # fmt: skip
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    blocks = [
        takeaway(
            f"This run was interrupted ({d.get('signal', 'stopped')} at {d.get('time', '?')}) "
            f"before its release: no calibrator was written; {told}."
        ),
        takeaway(
            f"{rounds} round(s) were summed before the stop (history.json). A client's ledger "
            "keeps the charges of the rounds it answered: a reply that left the client is a "
            "release, whether or not the server summed it."
        ),
        text(f"Files in `{folder.name}`: " + ", ".join(f"`{f}`" for f in files) + "."),
    ]
    return [_section("Federated run (interrupted)", blocks, "interrupted.json")]


def _federate(o: Output) -> list[dict[str, Any]]:
    folder = o.path
    cal = _read_json(folder / "calibrator.json") or {}
    history = o.data["history"]
    rep = _read_json(folder / "privacy_report.json")
    check = _read_json(folder / "check.json")
    cfg = _read_json(folder / "config.json") or {}
    method = cfg.get("method", cal.get("class", "?"))
    blocks: list[dict[str, Any]] = [takeaway(_release_finding(f"{method} released", rep, cal))]
    if isinstance(check, dict) and "ece" in check:
        blocks.append(takeaway(_held_out_finding(check)))
    else:
        blocks.append(
            takeaway(
                "The server held no validation split (--val), so this run measured nothing on "
                "held-out data; each client checked the calibrator on its own data (not sent)."
            )
        )
    if rep:
        blocks.append(
            takeaway(
                f"User-level DP over the whole run: ε = {_num(rep.get('epsilon'))}, δ = "
                f"{_num(rep.get('delta'))} ({rep.get('status', '?')}); the accountant's ε after "
                f"{len(history)} rounds is {_num(history[-1].get('epsilon_spent'))}."
                if history
                else f"User-level DP: ε = {_num(rep.get('epsilon'))}."
            )
        )
    params = cal.get("params") or {}
    blocks.append(
        text(
            f"`privcal federate server` ({method}) wrote `calibrator.json` "
            f"({cal.get('class', '?')}"
            + (f"; {', '.join(f'{k}={v}' for k, v in params.items())}" if params else "")
            + f"), `history.json` ({len(history)} rounds)"
            + (", `privacy_report.json`" if rep else " and no privacy report (no DP)")
            + (", `check.json`" if check else "")
            + "."
        )
    )
    if cfg:
        keys = ("method", "rounds", "num-nodes", "min-clients", "epsilon", "delta", "sample-rate")
        blocks.append(
            table(
                "Run configuration",
                [column("key", "Setting"), column("value", "Value")],
                [{"key": k, "value": str(cfg[k])} for k in keys if k in cfg],
                source="config.json",
            )
        )
    if isinstance(check, dict) and "ece" in check:
        rows = [
            {"metric": name, "before": check[k][0], "after": check[k][1]}
            for name, k in (("ECE", "ece"), ("Classwise ECE", "cwece"), ("Accuracy", "accuracy"))
        ]
        blocks.append(
            table(
                f"Held-out check on the server's validation split ({check['rows']} rows)",
                [
                    column("metric", "Metric"),
                    column("before", "Uncalibrated", "percent"),
                    column("after", "Calibrated", "percent"),
                ],
                rows,
                source="check.json",
            )
        )
        if check.get("reliability"):
            blocks.append(
                _reliability_block(
                    check["reliability"], "uncalibrated", "calibrated", "server's validation split"
                )
            )
    if history:
        shown = [k for k in ("round", "n_clients", "sampled", "epsilon_spent") if k in history[0]]
        labels = {
            "round": ("Round", "count"),
            "n_clients": ("Accepted updates", "count"),
            "sampled": ("Sampled clients", "count"),
            "epsilon_spent": ("ε spent (accountant)", "number"),
        }
        blocks.append(
            table(
                "Rounds",
                [column(k, *labels[k]) for k in shown],
                history,
                source="history.json",
                note="A DP run publishes only the round and the accountant's ε (no client "
                "counts or timings).",
            )
        )
    if rep:
        secagg = bool(cfg.get("secagg"))
        distributed = any("aggregation=distributed" in t for t in rep.get("threat", []))
        trust = (
            "each client keeps its data and its ledger and sends only clipped updates; "
            + (
                "each adds a discrete Gaussian noise share to its update and SecAgg+ hides "
                "each upload, so the server sees only the noisy sum and adds no noise (no one "
                "is trusted with an exact statistic; the threshold below says how many clients "
                "must be honest)."
                if distributed
                else "SecAgg+ hides each update, so the server sees only their exact sum, and "
                "adds the Gaussian noise to it (the clients trust the server to add it)."
                if secagg
                else "the server sees each clipped update and adds the Gaussian noise to their "
                "sum (the clients trust the server with their clipped updates and to add the "
                "noise)."
            )
            + " Each client's ledger stays on the client and is not in this folder."
        )
        blocks.append(privacy_block(rep, trust=trust, source="privacy_report.json"))
    return [_section(f"privcal federate server: {folder.name}", blocks, "history.json")]


def _release_finding(what: str, rep: Any, cal: Mapping[str, Any]) -> str:
    """The first line of a run: what it released, and whether it fell back to ``T = 1`` and
    why (``privacy_report.json``'s ``released``; without it, the calibrator file's state)."""
    released = rep.get("released") if isinstance(rep, Mapping) else None
    if not isinstance(released, Mapping):  # a run without DP (or from before the key)
        from privcal.calibrators import calibrator_from_dict
        from privcal.calibrators.summary import release_summary

        try:
            released = release_summary(calibrator_from_dict(dict(cal)))
        except (KeyError, TypeError, ValueError):
            released = {"text": "a calibrator this page cannot read"}
    fb = released.get("fallback") or {}
    if fb.get("fell_back"):
        from privcal.calibrators.summary import evidence_phrase

        return (
            f"FELL BACK to the uncalibrated model: {what} T = 1, because its fitted T = "
            f"{_num(fb.get('release_temperature'))} could not be told from T = 1 "
            f"({evidence_phrase(fb.get('z'))}; keeping it needs {_num(fb.get('threshold'))} in "
            "its favour); this run calibrated nothing. More clients or data, or a larger ε, "
            "helps."
        )
    return f"{what} {released.get('text', '?')}."


def _held_out_finding(check: Mapping[str, Any]) -> str:
    """The held-out effect with its interval: never "improves" within the rows' noise."""
    change = check.get("ece_change")
    head = (
        f"On the server's validation split ({check['rows']} rows): ECE "
        f"{_change(check['ece'][0], check['ece'][1])}, classwise ECE "
        f"{_change(check['cwece'][0], check['cwece'][1])}"
    )
    if not isinstance(change, Mapping):  # a check.json from before the interval
        return head + " (no interval recorded, so no verdict)."
    verdict = str(change["verdict"])
    return (
        f"{head}; the ECE change's {100 * change['level']:.0f}% bootstrap interval is "
        f"[{100 * change['low']:+.2f}, {100 * change['high']:+.2f}] pp: "
        + (verdict.upper() if verdict.startswith(("worse", "no better")) else verdict)
        + "."
    )


def _scoreboard(o: Output) -> list[dict[str, Any]]:
    d, src = o.data, o.path.name
    rows = d.get("rows", [])
    claims = d.get("claims", [])
    worse = [r for r in rows if r.get("worse")]
    for r in rows:
        if r.get("worse"):
            r["_mark"] = f"WORSE ({r['why']})" if r.get("why") else "WORSE"
    reproduced = sum(c.get("verdict") == "reproduced" for c in claims)
    blocks: list[dict[str, Any]] = [
        takeaway(
            f"{len(worse)} of {len(rows)} scoreboard rows are worse than doing nothing"
            + (
                ": "
                + ", ".join(f"{r['dataset']} / {r['method']}" for r in worse[:8])
                + (" ..." if len(worse) > 8 else "")
                if worse
                else ""
            )
            + f"; {reproduced} of {len(claims)} seed papers' headline claims reproduce here."
        ),
        text(f"`{d.get('command', 'privcal bench scoreboard')}`; {d.get('note', '')}"),
    ]
    if claims:
        blocks.append(
            table(
                "Seed papers' headline claims",
                [
                    column("seed", "Seed"),
                    column("claim", "Claim"),
                    column("measured", "Measured here"),
                    column("verdict", "Verdict"),
                ],
                claims,
                source=src,
            )
        )
    cal_cols = [
        column("dataset", "Data set"),
        column("method", "Method"),
        column("epsilon", "ε", "epsilon"),
        column("ece", "ECE", "percent"),
        column("cwece", "Classwise ECE", "percent"),
        column("accuracy", "Accuracy", "percent"),
    ]
    for task, title, key in (
        ("calibration", "Calibration", "ECE"),
        ("federated", "Federated calibration", "classwise ECE"),
        ("top-label", "Top-label files", "ECE"),
    ):
        sel = [r for r in rows if r.get("task") == task]
        if sel:
            blocks.append(
                table(
                    title,
                    [
                        *cal_cols,
                        column("diff", f"vs none, {key}", "pp", se="diff_se"),
                        column("ratio", "Ratio to twin", "ratio"),
                    ],
                    sel,
                    source=src,
                )
            )
    conf = [r for r in rows if r.get("task") == "conformal"]
    if conf:
        blocks.append(
            table(
                "Conformal prediction",
                [
                    column("dataset", "Data set"),
                    column("method", "Method"),
                    column("epsilon", "ε", "epsilon"),
                    column("coverage", "Coverage", "percent", se="coverage_se"),
                    column("size", "Mean size", "number"),
                    column("ratio", "Size ratio to split", "ratio"),
                ],
                conf,
                source=src,
            )
        )
    return [_section(f"privcal bench scoreboard: {o.path.name}", blocks, src)]


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{float(x):.4g}"


# -- HTML -----------------------------------------------------------------------------------------

_CSS = """
:root { --fg:#1d2330; --muted:#5b6474; --line:#d9dde5; --bg:#fff; --soft:#f5f7fa;
  --accent:#1f5fa8; --bad:#b3261e; --badbg:#fdecea; --good:#1e7a3c; }
* { box-sizing: border-box; }
body { margin:0; background:var(--soft); color:var(--fg);
  font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 24px 28px 64px; background: var(--bg); }
h1 { font-size: 1.8rem; margin: 0.2em 0 0.3em; }
h2 { font-size: 1.35rem; margin: 2.2em 0 0.6em; padding-top: 0.6em;
  border-top: 2px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.4em 0 0.5em; }
p { margin: 0.6em 0; max-width: 78ch; }
code { background: var(--soft); padding: 0 0.25em; border-radius: 3px; font-size: 0.92em; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px;
  color: var(--muted); margin: 0 0 1em; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; overflow-wrap: anywhere; }
.findings { background: #eef4fb; border-left: 5px solid var(--accent); padding: 10px 18px;
  margin: 1em 0 1.2em; border-radius: 4px; }
.findings h2 { border: 0; margin: 0.3em 0; padding: 0; }
.findings li { margin: 0.35em 0; }
.units { color: var(--muted); font-size: 0.92em; }
nav ol { columns: 2; margin: 0.4em 0; }
.tablewrap { overflow-x: auto; margin: 0.8em 0 1.2em; }
table { border-collapse: collapse; font-size: 0.9rem; min-width: 40%; }
caption { text-align: left; font-weight: 600; padding: 4px 0 6px; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); }
th { background: var(--soft); text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
tbody th { background: transparent; font-weight: 600; white-space: normal; }
details { margin: 0.6em 0; } summary { cursor: pointer; color: var(--accent); }
td { text-align: right; font-variant-numeric: tabular-nums; }
td.text, th.text { text-align: left; }
tbody tr:nth-child(even) { background: #fafbfc; }
tr.marked { background: var(--badbg) !important; }
tr.marked td:first-child { border-left: 4px solid var(--bad); }
.badge { display: inline-block; white-space: nowrap; margin-left: 6px; padding: 0 6px;
  border-radius: 8px; background: var(--bad); color: #fff; font-size: 0.78em; font-weight: 600; }
.note { color: var(--muted); font-size: 0.88em; margin-top: 4px; }
figure { margin: 1em 0 1.4em; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px;
  background: #fff; }
figcaption { color: var(--muted); font-size: 0.9em; }
.privacy { background: #f7f5fc; border-left: 5px solid #6a4fb3; padding: 8px 18px;
  margin: 1em 0; border-radius: 4px; }
.privacy ul { margin: 0.4em 0 0.6em; padding-left: 1.2em; }
.error { background: var(--badbg); border-left: 5px solid var(--bad); padding: 8px 14px;
  white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 0.85em; }
footer { color: var(--muted); font-size: 0.85em; margin-top: 3em; }
"""

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _inline(s: str) -> str:
    """Escape ``s`` and turn ``**bold**`` / ```code``` into tags."""
    out = html.escape(s)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


def _svg_uri(block: Mapping[str, Any]) -> str:
    """The block's figure as an SVG data URI (text as paths: no font is needed)."""
    from matplotlib import rc_context

    fig = draw(block, suptitle=False)
    buf = io.BytesIO()
    with rc_context({"svg.fonttype": "path", "svg.hashsalt": "privcal"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _alt(block: Mapping[str, Any]) -> str:
    panels = block["panels"]
    if block["type"] == "reliability":
        parts = [f"{p['name']}: ECE {100 * p['ece']:.2f}%" for p in panels]
        return f"{block.get('title', 'Reliability diagram')}. " + "; ".join(parts) + "."
    return f"{block.get('title', 'Figure')}: " + "; ".join(p.get("title", "") for p in panels)


_TEXT = ' class="text"'


def _table_html(b: Mapping[str, Any]) -> str:
    cols = b["columns"]
    src = html.escape(str(b.get("source", "")), quote=True)
    head = "".join(
        f'<th scope="col"{_TEXT if c["unit"] == "text" else ""}>{html.escape(header_text(c))}</th>'
        for c in cols
    )
    body = []
    for r in b["rows"]:
        cells = []
        for i, c in enumerate(cols):
            value = r.get(c["key"])
            attrs = f' data-key="{html.escape(c["key"], quote=True)}"'
            numeric = (
                c["unit"] != "text"
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(float(value))
            )
            if numeric:
                attrs += f' data-value="{float(value)!r}" data-unit="{c["unit"]}"'
                se = r.get(c["se"]) if "se" in c else None
                if isinstance(se, (int, float)) and math.isfinite(float(se)):
                    attrs += f' data-se="{float(se)!r}"'
            else:
                attrs += ' class="text"'
            content = html.escape(cell_text(r, c))
            if i == 0 and r.get("_mark"):
                content += f'<span class="badge">{html.escape(str(r["_mark"]))}</span>'
            tag = "th" if i == 0 else "td"
            scope = ' scope="row"' if i == 0 else ""
            if i == 0:
                attrs = attrs.replace(' class="text"', "")
            cells.append(f"<{tag}{scope}{attrs}>{content}</{tag}>")
        cls = ' class="marked"' if r.get("_mark") else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    caption = f"<caption>{_inline(b['title'])}</caption>" if b.get("title") else ""
    note = f'<p class="note">{_inline(b["note"])}</p>' if b.get("note") else ""
    return (
        f'<div class="tablewrap"><table data-source="{src}">{caption}<thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(body)}</tbody></table>{note}</div>"
    )


def _privacy_html(b: Mapping[str, Any]) -> str:
    items = "".join(f"<li>{_inline(s)}</li>" for s in privacy_sentences(b))
    parts = [f'<section class="privacy"><h3>{_inline(b["title"])}</h3><ul>{items}</ul>']
    src = str(b.get("source", ""))
    rep = b["report"]
    per = rep.get("per_source") or {}
    if b.get("ledgers"):
        ledgers = b["ledgers"]
        parts.append(
            _collapse(
                len(ledgers),
                f"{len(ledgers)} ledgers: budget ε "
                + _span(x.get("budget") for x in ledgers)
                + ", spent "
                + _span(x.get("spent") for x in ledgers)
                + ", remaining "
                + _span(x.get("remaining") for x in ledgers),
                _table_html(
                    table(
                        "Ledgers after the run (budget per source)",
                        [
                            column("source", "Source"),
                            column("budget", "Budget ε", "number"),
                            column("spent", "Spent ε", "number"),
                            column("remaining", "Remaining ε", "number"),
                        ],
                        b["ledgers"],
                        source=src,
                    )
                ),
            )
        )
    elif per:
        rows = [{"source": s or "(one source)", **v} for s, v in per.items()]
        parts.append(
            _collapse(
                len(rows),
                f"{len(rows)} sources: ε spent " + _span(r.get("epsilon") for r in rows),
                _table_html(
                    table(
                        "Budget spent per source",
                        [
                            column("source", "Source"),
                            column("epsilon", "ε spent", "number"),
                            column("delta", "δ spent", "number"),
                        ],
                        rows,
                        source=src,
                    )
                ),
            )
        )
    parts.append("</section>")
    return "".join(parts)


def _span(values: Any) -> str:
    """``"1"`` when every value is 1, else ``"0.5 to 1"``."""
    xs = [float(v) for v in values if isinstance(v, (int, float))]
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return f"{lo:.4g}" if lo == hi else f"{lo:.4g} to {hi:.4g}"


def _collapse(n: int, summary: str, inner: str, limit: int = 8) -> str:
    """``inner``, folded under ``summary`` when it has more than ``limit`` rows."""
    if n <= limit:
        return inner
    return f"<details><summary>{html.escape(summary)}</summary>{inner}</details>"


def _block_html(b: Mapping[str, Any]) -> str:
    kind = b["type"]
    if kind == "text":
        return f"<p>{_inline(b['text'])}</p>"
    if kind == "table":
        return _table_html(b)
    if kind in ("reliability", "bars"):
        cap = f"<figcaption>{_inline(b['title'])}</figcaption>" if b.get("title") else ""
        alt = html.escape(plain(_alt(b)), quote=True)
        return f'<figure><img alt="{alt}" src="{_svg_uri(b)}">{cap}</figure>'
    if kind == "privacy":
        return _privacy_html(b)
    return ""


def _anchor(i: int) -> str:
    return f"s{i + 1}"


def render_html(report: Report) -> str:
    """The page as one HTML string (no external resource of any kind)."""
    title = html.escape(report.title)
    meta = "".join(f"<dt>{html.escape(k)}</dt><dd>{_inline(v)}</dd>" for k, v in report.meta if v)
    findings = "".join(f"<li>{_inline(t)}</li>" for t in report.takeaways)
    toc = "".join(
        f'<li><a href="#{_anchor(i)}">{html.escape(s["title"])}</a>'
        + (" (failed)" if s.get("error") else "")
        + "</li>"
        for i, s in enumerate(report.sections)
    )
    body = []
    for i, s in enumerate(report.sections):
        body.append(f'<section id="{_anchor(i)}"><h2>{html.escape(s["title"])}</h2>')
        body += [_block_html(b) for b in s["blocks"] if b["type"] != "takeaway"]
        if s.get("error"):
            body.append(
                f'<p><strong>This section failed:</strong></p><div class="error">'
                f"{html.escape(s['error'])}</div>"
            )
        body.append("</section>")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="privcal {__version__}">
<title>{title}</title>
<style>{_CSS}</style>
</head>
<body>
<main>
<h1>{title}</h1>
<dl class="meta">{meta}</dl>
<section class="findings" aria-labelledby="findings"><h2 id="findings">What this shows</h2>
<ul>{findings or "<li>No findings recorded.</li>"}</ul></section>
<p class="units">Units: {html.escape(ECE_UNIT_NOTE)}</p>
<nav aria-label="Contents"><h2>Contents</h2><ol>{toc}</ol></nav>
{"".join(body)}
<footer>Written by privcal {__version__} from the machine-readable outputs named in each
table's source; self-contained (no network, no external files).</footer>
</main>
</body>
</html>
"""


def write_html(path: str | Path, out: str | Path) -> Path:
    """Find the outputs in ``path``, build the page and write it to ``out``."""
    report = build(find_outputs(path))
    out = Path(out)
    out.write_text(render_html(report), encoding="utf-8")
    return out

"""Readers of privcal's outputs: what each command wrote, as report blocks.

:func:`find_outputs` recognises what a folder (or file) holds, by the machine-readable files the
verbs write (never their Markdown or console output):

========================  ===============================================================
``privcal demo``          ``results.json`` (every section's blocks)
``privcal federate``      ``calibrator.json`` (conformal methods: ``sets.json``) +
server                    ``history.json`` (+ ``privacy_report.json``, ``check.json`` with
                          ``--val``, ``config.json``)
``privcal fit``           ``*.summary.json`` with ``"privcal": "fit"`` (beside the calibrator)
``privcal evaluate``      the ``--out`` JSON (``"privcal": "evaluate"``)
``privcal conformal``     ``*.summary.json`` with ``"privcal": "conformal"`` (beside the sets)
``privcal bench           the ``.json`` beside the Markdown (``"privcal": "scoreboard"``)
scoreboard``
========================  ===============================================================

:func:`build` turns them into a :class:`~privcal.report.blocks.Report` of
:mod:`~privcal.report.blocks` blocks (tables keep the raw values of the file they were read
from, named in the table's ``source``), findings first: computed from the numbers.
:func:`privcal.report.html_page.render_html` writes the page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privcal.report.blocks import (
    Report,
    bar_figure,
    column,
    privacy_block,
    reliability_figure,
    table,
    takeaway,
    text,
)
from privcal.report.formatting import format_value
from privcal.report.scoreboard_tables import calibration_table, conformal_table, mark_worse
from privcal.report.summaries import KINDS

__all__ = ["Output", "build", "find_outputs"]

_FEDERATE_FILES = ("calibrator.json", "history.json")
#: A federated run's release: a calibrator, or the conformal methods' prediction sets.
_RELEASES = ("calibrator.json", "sets.json")
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
        if kind in KINDS:
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
        out = _kind_of(path) or _kind_of(path.with_name(f"{path.stem}.summary.json"))
        if out is None and path.name in (*_FEDERATE_FILES, *_RELEASES):
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
    elif (path / "history.json").is_file() and any((path / f).is_file() for f in _RELEASES):
        history = _read_json(path / "history.json")
        if isinstance(history, list):
            found.append(Output("federate", path, {"history": history}))
    names = sorted(p for p in path.glob("*.json") if p.name not in (*_FEDERATE_FILES, *_RELEASES))
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
        "risk": _risk,
        "scoreboard": _scoreboard,
    }
    sections: list[dict[str, Any]] = []
    for o in outputs:
        sections += builders[o.kind](o)
    kinds = sorted({o.kind for o in outputs})
    title = "privcal report: " + ", ".join(kinds)
    return Report(title, [("Outputs", ", ".join(o.path.name for o in outputs))], sections)


def _privacy(d: dict[str, Any], src: str) -> dict[str, Any]:
    """The privacy block of a summary holding ``privacy_report`` (and ``ledgers``, if any)."""
    trust = d.get("trust", "not recorded.")
    return privacy_block(d["privacy_report"], trust=trust, ledgers=d.get("ledgers"), source=src)


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
    return [
        _section(s["title"], list(s.get("blocks", [])), o.path.name)
        | {"error": s.get("error"), "seconds": s.get("seconds")}
        for s in o.data.get("sections", [])
    ]


_COVERAGE = ("coverage", "Coverage", "percent")
_BEFORE_AFTER = [("before", "Uncalibrated", "percent"), ("after", "Calibrated", "percent")]
#: The metrics shown in percent (the others keep their own scale).
_PERCENT = ("Accuracy", "ECE", "Classwise ECE", "MCE", "Adaptive ECE")


def _metrics_tables(
    title: str, metrics: Mapping[str, Mapping[str, float]], source: str, *, note: str = ""
) -> list[dict[str, Any]]:
    """Metric rows (one per metric) with a column per score set, one table per unit.

    Calibration errors and accuracy are in percent like everywhere else; Brier and NLL keep
    their own scale. ``metrics`` maps a column name to ``{metric: value}``."""
    names = list(metrics)
    rows = [
        {"metric": m, "unit": "percent" if m in _PERCENT else "number"}
        | {f"c{i}": metrics[n].get(m) for i, n in enumerate(names)}
        for m in next(iter(metrics.values()))
    ]
    out = []  # one table per unit so that every column has one unit
    for unit, suffix in (("percent", " (%)"), ("number", " (Brier, NLL: their own scale)")):
        subset = [r for r in rows if r["unit"] == unit]
        if subset:
            cols = [("metric", "Metric"), *((f"c{i}", n, unit) for i, n in enumerate(names))]
            out.append(table(title + suffix, cols, subset, note=note or None, source=source))
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
        eps = format_value(rep.get("epsilon"), "number")
        blocks.append(
            takeaway(
                f"Private {d['method']} ({d['class']}) fitted{n} at ε = {eps} per source "
                f"({rep.get('status', '?')}); no statistic of the private data is shown (it "
                "would be a release nobody paid for)."
            )
        )
    blocks.append(
        text(
            f"`{d.get('command', 'privcal fit')}` wrote `{d.get('calibrator')}`: method "
            f"{d['method']} ({d['class']}){n}; parameters: {params or 'none'}."
        )
    )
    if metrics:
        blocks += _metrics_tables(
            "Metrics of the input scores before and after the calibrator",
            metrics,
            src,
            note=f"{d.get('n_bins', 15)} equal-width bins; measured on the fitting data.",
        )
    rel = d.get("reliability")
    if rel:
        blocks.append(_reliability_block(rel, "Input scores", "Calibrated", "fitting data"))
    if d.get("privacy_report"):
        blocks.append(_privacy(d, src))
    if d.get("warnings"):
        blocks.append(text("Warnings while fitting: " + " ".join(d["warnings"])))
    return [_section(f"privcal fit: {o.path.name}", blocks, src)]


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
        which = f"`{d['calibrator']}`" if d.get("calibrator") else "the calibrator"
        found = (
            f"On {d['input']} ({d['n_samples']} examples) {which} takes the ECE "
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
        *_metrics_tables(
            "Metrics",
            metrics,
            src,
            note=f"{d.get('n_bins', 15)} equal-width bins (binned metrics).",
        ),
    ]
    if d.get("reliability"):
        blocks.append(_reliability_block(d["reliability"], cols[0], cols[-1], d["input"]))
    return [_section(f"privcal evaluate: {d['input']}", blocks, src)]


def _run_settings(cfg: Mapping[str, Any]) -> dict[str, str]:
    """The settings of a federated run's ``config.json`` that the report shows, with what a
    distributed DP run puts in effect: its threshold ``t`` (0 in the file: the default for
    ``K``), which also raises ``min-clients`` (fewer than ``t`` clients release nothing)."""
    keys = ("method", "rounds", "num-nodes", "min-clients", "epsilon", "delta", "sample-rate")
    shown = {k: str(cfg[k]) for k in keys if k in cfg}
    if cfg.get("aggregation") == "distributed" and float(cfg.get("epsilon", 0.0)) > 0:
        from privcal.federated.policy import run_threshold

        t = run_threshold(cfg)[1]
        shown["aggregation"] = "distributed"
        given = int(cfg.get("threshold", 0) or 0)
        shown["threshold"] = str(t) if given else f"{t} (the default for num-nodes)"
        if t > int(cfg.get("min-clients", 0)):
            shown["min-clients"] = f"{cfg['min-clients']} ({t} in effect: the threshold t)"
    return shown


def _mean_confidence(rel: Mapping[str, Any]) -> float:
    """The mean top-label confidence, from a reliability diagram's per-bin data."""
    pairs = [(n, c) for n, c in zip(rel["counts"], rel["confidence"], strict=True) if n]
    return sum(n * c for n, c in pairs) / sum(n for n, _ in pairs)


def _risk(o: Output) -> list[dict[str, Any]]:
    """``privcal risk --out``: lambda, the test risk against alpha, the test risk curve."""
    d, src = o.data, o.path.name
    alpha, private = float(d["alpha"]), "privacy_report" in d
    kind = "Private risk control" if private else "Risk control"
    found = f"{kind} ({d['loss']}, alpha = {alpha:g}) chose lambda = {d['lambda']:g}"
    if "test_risk" in d:
        ok = "within" if d["test_risk"] <= alpha else "above"
        found += f"; the test {d['loss']} {d['test_risk']:.4f} is {ok} alpha"
    cols = [
        ("n_cal", "Calibration rows", "count"),
        ("n_test", "Test rows", "count"),
        ("lambda", "lambda", "number"),
        ("test_risk", f"Test {d['loss']}", "number"),
        ("risk_bound", "Guaranteed E[loss] <=", "number"),
        ("mean_size", "Mean set size", "number"),
    ]
    blocks: list[dict[str, Any]] = [
        takeaway(found + f"; mean set size {d['mean_size']:.2f}."),
        text(
            f"`{d.get('command', 'privcal risk')}`: calibration `{d['cal']}`, test `{d['test']}`."
        ),
        table("Summary", cols, [{c[0]: d.get(c[0]) for c in cols}], source=src),
    ]
    if "test_curve" in d:
        lam = [float(x) for x in d["lambdas"]]
        step = lam[-1] - lam[-2] if len(lam) > 1 else 1.0
        panel = {
            "title": f"Test {d['loss']} over the public lambda grid (dashed: the released lambda)",
            "xlabel": "lambda",
            "ylabel": f"test {d['loss']}",
            "series": [
                {"name": "test risk", "edges": [*lam, lam[-1] + step], "counts": d["test_curve"]}
            ],
            "vline": d["lambda"],
        }
        blocks.append(bar_figure("Risk curve", [panel]))
    if private:
        blocks.append(_privacy(d, src))
    return [_section(f"privcal risk: {d['sets']}", blocks, src)]


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
    cols = [
        ("n_cal", "Calibration points", "count"),
        ("n_test", "Test points", "count"),
        ("threshold", "Threshold", "number"),
        _COVERAGE,
        ("target", "Target", "percent"),
        ("mean_size", "Mean set size", "number"),
        ("full_sets", "Full sets", "percent"),
    ]
    row = {c[0]: d.get(c[0]) for c in cols} | {"target": 1 - alpha}
    blocks: list[dict[str, Any]] = [
        takeaway(found),
        text(
            f"`{d.get('command', 'privcal conformal')}`: calibration `{d['cal']}`, test "
            f"`{d['test']}`, sets written to `{d['sets']}`."
        ),
        table("Summary", cols, [row], source=src),
    ]
    counts, by_size = d["size_counts"], d.get("coverage_by_size")
    bars = [("Set sizes", "test points", list(range(len(counts))), counts)]
    if by_size:
        sizes, coverage = [r["size"] for r in by_size], [r["coverage"] for r in by_size]
        bars.append(("Coverage by set size", "coverage", sizes, coverage))
    panels = [
        {"title": t, "xlabel": "set size", "ylabel": y, "series": [{"name": kind, "x": x, "y": v}]}
        for t, y, x, v in bars
    ]
    blocks.append(bar_figure("Prediction sets on the test points", panels))
    if by_size:
        blocks.append(
            table(
                "Coverage by set size",
                [("size", "Set size", "count"), ("count", "Test points", "count"), _COVERAGE],
                by_size,
                source=src,
            )
        )
    if d.get("groups"):
        blocks.append(
            table(
                "Coverage per group (one private threshold each)",
                [
                    column("group", "Group", "text"),
                    column("n_cal", "Calibration points", "count"),
                    column("threshold", "Threshold", "number"),
                    column("n_test", "Test points", "count"),
                    column("coverage", "Coverage", "percent"),
                    column("mean_size", "Mean set size", "number"),
                ],
                [{**g, "group": str(g["group"])} for g in d["groups"]],
                source=src,
            )
        )
    if private:
        blocks.append(_privacy(d, src))
    return [_section(f"privcal conformal: {d['sets']}", blocks, src)]


def _interrupted(o: Output) -> list[dict[str, Any]]:
    """A federation stopped before its release (``interrupted.json``): what exists, and why."""
    d, folder = o.data, o.path
    rounds = len(d["history"])
    told = "every client was told and stopped" if d.get("clients_told") else (
        "not every client took the stop message (one that did not stops when it loses the "
        "server, after its --retry-s)"
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
    release = next((f for f in _RELEASES if (folder / f).is_file()), _RELEASES[0])
    cal = _read_json(folder / release) or {}
    history = o.data["history"]
    rep = _read_json(folder / "privacy_report.json")
    check = _read_json(folder / "check.json")
    cfg = _read_json(folder / "config.json") or {}
    method = cfg.get("method", cal.get("class", "?"))
    blocks: list[dict[str, Any]] = [takeaway(_release_finding(f"{method} released", rep, cal))]
    if isinstance(check, dict) and "ece" in check:
        blocks.append(takeaway(_held_out_finding(check)))
    elif isinstance(check, dict) and "coverage" in check:  # prediction sets (check_sets)
        blocks.append(takeaway(f"On the server's validation split: {check.get('summary')}."))
    else:
        what = "the sets' coverage" if release == "sets.json" else "the calibrator"
        blocks.append(
            takeaway(
                "The server held no validation split (--val), so this run measured nothing on "
                f"held-out data; each client checked {what} on its own data (not sent)."
            )
        )
    if rep:
        eps, delta = (format_value(rep.get(k), "number") for k in ("epsilon", "delta"))
        blocks.append(
            takeaway(
                f"User-level DP over the whole run: ε = {eps}, δ = {delta} "
                f"({rep.get('status', '?')}); the accountant's ε after {len(history)} rounds is "
                f"{format_value(history[-1].get('epsilon_spent'), 'number')}."
                if history
                else f"User-level DP: ε = {eps}."
            )
        )
    params = cal.get("params") or {}
    blocks.append(
        text(
            f"`privcal federate server` ({method}) wrote `{release}` "
            f"({cal.get('class', '?')}"
            + (f"; {', '.join(f'{k}={v}' for k, v in params.items())}" if params else "")
            + f"), `history.json` ({len(history)} rounds)"
            + (", `privacy_report.json`" if rep else " and no privacy report (no DP)")
            + (", `check.json`" if check else "")
            + "."
        )
    )
    if cfg:
        blocks.append(
            table(
                "Run configuration",
                [("key", "Setting"), ("value", "Value")],
                [{"key": k, "value": v} for k, v in _run_settings(cfg).items()],
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
                [("metric", "Metric"), *_BEFORE_AFTER],
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
        labels = {
            "round": ("Round", "count"),
            "n_clients": ("Accepted updates", "count"),
            "sampled": ("Sampled clients", "count"),
            "epsilon_spent": ("ε spent (accountant)", "number"),
        }
        blocks.append(
            table(
                "Rounds",
                [column(k, *label) for k, label in labels.items() if k in history[0]],
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
        from privcal.federated.methods.conformal import FederatedConformalSets

        sets = cal.get("class") == "FederatedConformalSets"  # a conformal run's sets.json
        try:
            saved = dict(cal)
            restored: Any = (
                FederatedConformalSets.from_dict(saved) if sets else calibrator_from_dict(saved)
            )
            released = release_summary(restored)
        except (KeyError, TypeError, ValueError):
            released = {"text": "a calibrator this page cannot read"}
    fb = released.get("fallback") or {}
    if fb.get("fell_back"):
        from privcal.calibrators.summary import evidence_phrase

        fitted = format_value(fb.get("release_temperature"), "number")
        needs = format_value(fb.get("threshold"), "number")
        return (
            f"FELL BACK to the uncalibrated model: {what} T = 1, because its fitted T = "
            f"{fitted} could not be told from T = 1 ({evidence_phrase(fb.get('z'))}; keeping it "
            f"needs {needs} in its favour); this run calibrated nothing. More clients or data, "
            "or a larger ε, helps."
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
    worse = [r for r in mark_worse(rows) if r.get("worse")]
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
        cols = [("seed", "Seed"), ("claim", "Claim"), ("measured", "Measured here")]
        cols.append(("verdict", "Verdict"))
        blocks.append(table("Seed papers' headline claims", cols, claims, source=src))
    for task, title, error in (
        ("calibration", "Calibration", "ECE"),
        ("federated", "Federated calibration", "classwise ECE"),
        ("top-label", "Top-label files", "ECE"),
    ):
        sel = [r for r in rows if r.get("task") == task]
        if sel:
            blocks.append(calibration_table(title, sel, error=error, source=src))
    conf = [r for r in rows if r.get("task") == "conformal"]
    if conf:
        blocks.append(conformal_table("Conformal prediction", conf, source=src))
    return [_section(f"privcal bench scoreboard: {o.path.name}", blocks, src)]

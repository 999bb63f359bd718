"""``privcal report``: the HTML page opened in headless Chromium, its numbers against the JSON.

Chromium (Debian's ``chromium`` package; ``.ci/run`` installs it) is driven over the DevTools
protocol on a pipe (``--remote-debugging-pipe``: NUL-separated JSON on file descriptors 3 and
4), so nothing but the standard library is needed. For the demo's folder and for a
``privcal federate server`` folder (the real ServerApp and ClientApps over in-process nodes,
:func:`privcal.federated.flower.local.run_local`) the page must load with no console error, no
request that leaves the file, every figure drawn with a non-zero size, and every number of every
table equal to the JSON value it came from (the file named in the table's ``data-source``),
shown in the table's unit. The CLI's error rule holds for ``report``; ``fit``, ``evaluate
--out`` and ``conformal --out`` write what the report reads.
"""

from __future__ import annotations

import fcntl
import html as html_lib
import json
import math
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from privcal.cli import app

pytestmark = pytest.mark.integration

runner = CliRunner()
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError(
        "Chromium is needed by this test: apt-get install chromium (.ci/run installs it)."
    )


def _high(fd: int) -> int:
    """``fd`` moved to a descriptor number of 10 or more."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


class Browser:
    """A headless Chromium driven over ``--remote-debugging-pipe`` (DevTools protocol)."""

    def __init__(self) -> None:
        # the pipe ends the browser gets are moved above 9 first, so that the redirections to
        # 3 and 4 below cannot overwrite one another (pytest's capture frees low numbers)
        self._to_r, self._to_w = (_high(fd) for fd in os.pipe())
        self._from_r, self._from_w = (_high(fd) for fd in os.pipe())
        self.user_dir = tempfile.mkdtemp(prefix="privcal-chromium-")
        argv = [_chromium(), *FLAGS, f"--user-data-dir={self.user_dir}", "about:blank"]
        # the browser reads commands on fd 3 and writes answers on fd 4 (bash: dash's
        # redirections take one-digit descriptors only)
        self.proc = subprocess.Popen(
            ["bash", "-c", 'exec "$@" 3<&"$P_IN" 4>&"$P_OUT"', "bash", *argv],
            pass_fds=(self._to_r, self._from_w),
            env={**os.environ, "P_IN": str(self._to_r), "P_OUT": str(self._from_w)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(self._to_r)
        os.close(self._from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, until: Any, timeout: float = 60.0) -> dict[str, Any] | None:
        end = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "method" in msg:
                    self.events.append(msg)
                if until(msg):
                    return msg
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_r], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(self._from_r, 1 << 20)
                if not chunk:
                    raise AssertionError("Chromium closed its DevTools pipe")
                self._buf += chunk

    def call(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> Any:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        i = self._id
        reply = self._read(lambda m: m.get("id") == i)
        assert reply is not None, f"no answer to {method}"
        assert "error" not in reply, reply
        return reply["result"]

    def open(self, path: Path) -> tuple[str, dict[str, Any]]:
        """Load ``path``; return the session and the page's figures and tables (measured in
        the rendered page)."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=sid)
        self.call("Page.navigate", {"url": path.resolve().as_uri()}, session=sid)
        loaded = self._read(lambda m: m.get("method") == "Page.loadEventFired")
        assert loaded is not None, "the page did not load"
        self._read(lambda m: False, timeout=0.5)  # late console messages / requests
        found = self.call(
            "Runtime.evaluate",
            {"expression": _MEASURE, "returnByValue": True, "awaitPromise": True},
            session=sid,
        )
        return sid, json.loads(found["result"]["value"])

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            os.close(self._to_w)
            os.close(self._from_r)
            shutil.rmtree(self.user_dir, ignore_errors=True)


_MEASURE = """
(async () => {
  const imgs = [...document.querySelectorAll('img')];
  await Promise.all(imgs.map(i => i.decode().catch(() => null)));
  const figures = [...document.querySelectorAll('img, svg, canvas')].map(e => {
    const r = e.getBoundingClientRect();
    return {tag: e.tagName, width: r.width, height: r.height,
            natural: e.naturalWidth === undefined ? null : e.naturalWidth,
            complete: e.complete === undefined ? true : e.complete,
            alt: e.getAttribute('alt') || ''};
  });
  const tables = [...document.querySelectorAll('table')].map(t => ({
    source: t.dataset.source || '',
    caption: t.caption ? t.caption.textContent : '',
    headers: [...t.querySelectorAll('thead th')].map(h => h.textContent),
    marked: t.querySelectorAll('tr.marked').length,
    section: (t.closest('section[id]') || {id: ''}).id,
    cells: [...t.querySelectorAll('[data-value]')].map(c => ({
      value: c.dataset.value, unit: c.dataset.unit, se: c.dataset.se || null,
      text: c.childNodes[0] ? c.childNodes[0].textContent : ''}))
  }));
  const sections = [...document.querySelectorAll('main > section[id]')].map(s => ({
    id: s.id, title: s.querySelector('h2').textContent, text: s.textContent}));
  const findings = [...document.querySelectorAll('.findings li')].map(l => l.textContent);
  return JSON.stringify({figures, tables, sections, findings,
                         title: document.title, lang: document.documentElement.lang});
})()
"""


def _problems(events: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Console errors and requests to anything but the page itself (or a data: URI)."""
    errors, requests = [], []
    for e in events:
        method, p = e["method"], e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(json.dumps(p.get("args"))[:300])
        elif method == "Runtime.exceptionThrown":
            errors.append(json.dumps(p.get("exceptionDetails"))[:300])
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            errors.append(p["entry"].get("text", "")[:300])
        elif method == "Network.requestWillBeSent":
            url = p["request"]["url"]
            if not url.startswith(("file://", "data:")):
                requests.append(url)
    return errors, requests


def _numbers(obj: Any) -> set[float]:
    """Every number in a JSON document."""
    if isinstance(obj, dict):
        return set().union(*(_numbers(v) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(_numbers(v) for v in obj)) if obj else set()
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return {float(obj)}
    return set()


_SCALE = {"percent": 100.0, "pp": 100.0}


def _check_cell(cell: dict[str, Any], numbers: set[float], where: str) -> None:
    """The cell's raw value is in its JSON source, and its text shows that value in its unit,
    to the digits shown (and the same for its standard error)."""
    value = float(cell["value"])
    assert value in numbers, f"{where}: {value!r} is not in the JSON it came from"
    shown = re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", cell["text"])
    assert shown, f"{where}: no number in {cell['text']!r}"
    scale = _SCALE.get(cell["unit"], 1.0)
    pairs = [(shown[0], value)]
    if cell["se"] is not None:
        se = float(cell["se"])
        assert se in numbers, f"{where}: SE {se!r} is not in the JSON"
        assert len(shown) == 2, f"{where}: {cell['text']!r} shows no SE"
        pairs.append((shown[1], se))
    for text, raw in pairs:
        decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 0
        tol = 0.5 * 10.0**-decimals + 1e-9
        if "e" in text or cell["unit"] == "number":  # %.4g: relative precision
            tol = max(tol, 5e-4 * abs(raw * scale))
        assert abs(float(text) - raw * scale) <= tol, f"{where}: {text!r} shows {raw!r}"


def _check_page(html_path: Path, folder: Path, min_figures: int) -> dict[str, Any]:
    browser = Browser()
    try:
        _, page = browser.open(html_path)
        errors, requests = _problems(browser.events)
    finally:
        browser.close()
    assert not errors, errors
    assert not requests, requests
    assert page["lang"] == "en" and page["title"]
    figures = page["figures"]
    assert len(figures) >= min_figures
    for f in figures:
        assert f["width"] > 0 and f["height"] > 0, f
        assert f["complete"] and (f["natural"] is None or f["natural"] > 0), f
        assert f["tag"] != "IMG" or f["alt"], "a figure without alt text"
    assert page["findings"], "no 'What this shows'"
    checked = 0
    for t in page["tables"]:
        assert t["source"], f"table {t['caption']!r} names no source"
        numbers = _numbers(json.loads((folder / t["source"]).read_text()))
        for cell in t["cells"]:
            _check_cell(cell, numbers, f"{t['source']} / {t['caption']}")
            checked += 1
    assert checked > 0
    return page


# -- the demo's folder ----------------------------------------------------------------------------


# with test_demo.py's demo_run tests: one xdist worker runs the demo once
@pytest.mark.slow  # several seconds (tests/README.md)
@pytest.mark.xdist_group("demo")
def test_demo_report_html_in_chromium(demo_run: tuple[Path, str]) -> None:
    report, _ = demo_run
    folder = report.parent
    html_path = folder / "report.html"
    assert html_path.is_file(), "privcal demo writes report.html next to report.md"
    # privcal report rebuilds the same page from results.json
    res = runner.invoke(app, ["report", str(folder), "--out", str(folder / "again.html")])
    assert res.exit_code == 0, res.output
    results = json.loads((folder / "results.json").read_text())
    blocks = [b for s in results["sections"] for b in s["blocks"]]
    n_figures = sum(b["type"] in ("reliability", "bars") for b in blocks)
    assert n_figures >= 4
    page = _check_page(folder / "again.html", folder, n_figures)
    assert sum(f["tag"] == "IMG" for f in page["figures"]) == n_figures
    assert (folder / "again.html").read_text().count("<img") == n_figures
    # one unit for ECE: every ECE column of every table is in percent (or pp)
    for b in blocks:
        if b["type"] == "table":
            for c in b["columns"]:
                if "ECE" in c["label"]:
                    assert c["unit"] in ("percent", "pp"), (b["title"], c)
    # the takeaways of every section are at the top, computed from the numbers
    takeaways = [b["text"] for b in blocks if b["type"] == "takeaway"]
    assert page["findings"] == [re.sub(r"\*\*|`", "", t) for t in takeaways]
    # a marked row is exactly a row the paired test marks, and the scoreboard's summary
    # counts the marked rows of its tables
    for b in blocks:
        if b["type"] == "table":
            for r in b["rows"]:
                if "worse" in r:
                    assert bool(r.get("_mark")) == r["worse"], r
                if r.get("worse") and "ECE" in r.get("why", ""):  # calibration rows
                    assert r["diff"] > 2 * r["diff_se"], r
    board = next(s for s in page["sections"] if s["title"].startswith("Scoreboard"))
    marked = sum(t["marked"] for t in page["tables"] if t["section"] == board["id"])
    said = re.search(r"(\d+) row\(s\) worse than doing nothing", board["text"])
    assert said is not None and int(said.group(1)) == marked
    # the mean table equals the tidy CSV the section wrote (an independent output)
    import csv

    with (folder / "calibration.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    mean_table = next(b for b in blocks if b["type"] == "table" and b["title"].startswith("Mean"))
    ts = next(r for r in mean_table["rows"] if r["method"] == "temperature")
    assert ts["ece"] == pytest.approx(
        np.mean([float(r["ece"]) for r in rows if r["method"] == "temperature"]), abs=1e-12
    )


# -- a federate folder ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def federate_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``privcal federate server`` output: FedTemp with user-level DP over 3 clients, run by
    the real ServerApp / ClientApps over in-process nodes, with a validation split."""
    pytest.importorskip("flwr")
    from privcal.federated.flower.local import run_local
    from privcal.federated.policy import ClientPolicy
    from privcal.privacy import InsecureNoiseWarning

    wd = tmp_path_factory.mktemp("federate")
    rng = np.random.default_rng(0)
    z = 4.0 * rng.normal(size=(1500, 4))
    y = np.argmax(z / 4.0 + rng.normal(size=z.shape), axis=1)  # over-confident logits
    nodes = []
    for k in range(3):
        np.savez(
            wd / f"c{k}.npz", logits=z[k * 400 : (k + 1) * 400], labels=y[k * 400 : (k + 1) * 400]
        )
        # the clients opt in to the run's seeded noise (and to a run without DP) themselves
        nodes.append({"data": str(wd / f"c{k}.npz"), **ClientPolicy.permissive().to_node()})
    np.savez(wd / "val.npz", logits=z[1200:], labels=y[1200:])
    out = wd / "out"
    cfg = {
        "method": "fedtemp",
        "rounds": 3,
        "n-classes": 4,
        "min-clients": 2,
        "epsilon": 4.0,
        "delta": 1e-5,
        "noise": "seeded",
        "val": str(wd / "val.npz"),
        "out-dir": str(out),
    }
    with warnings.catch_warnings():  # seeded noise on purpose: the page must say so
        warnings.simplefilter("ignore", InsecureNoiseWarning)
        run_local(cfg, nodes)
    return out


def test_federate_report_html_in_chromium(federate_folder: Path) -> None:
    res = runner.invoke(app, ["report", str(federate_folder)])
    assert res.exit_code == 0, res.output
    html_path = federate_folder / "report.html"
    page = _check_page(html_path, federate_folder, 1)
    sources = {t["source"] for t in page["tables"]}
    assert {"check.json", "history.json", "privacy_report.json"} <= sources
    check = json.loads((federate_folder / "check.json").read_text())
    held_out = next(t for t in page["tables"] if t["source"] == "check.json")
    assert [float(c["value"]) for c in held_out["cells"]] == [
        v for k in ("ece", "cwece", "accuracy") for v in check[k]
    ]
    text = " ".join(s["text"] for s in page["sections"])
    for words in ("user-level", "Trusted:", "Public (used without noise)", "adds the Gaussian",
                  "not private: seeded noise"):  # fmt: skip
        assert words in text, words


# -- fit / evaluate / conformal write what the report reads ---------------------------------------


def test_fit_evaluate_conformal_outputs_make_a_report(tmp_path: Path) -> None:
    from privcal.private import DataSource

    rng = np.random.default_rng(1)
    z = 3.0 * rng.normal(size=(900, 5))
    y = np.argmax(z / 3.0 + rng.normal(size=z.shape), axis=1)
    np.savez(tmp_path / "val.npz", logits=z[:400], labels=y[:400])
    np.savez(tmp_path / "test.npz", logits=z[400:], labels=y[400:])
    out = tmp_path / "run"
    DataSource.init_ledger(tmp_path / "val.npz", tmp_path / "a.sqlite", budget=2.0, name="a")
    for argv in (
        ["fit", "-m", "temperature", "-i", "{d}/val.npz", "-o", "{d}/run/ts.json"],
        ["fit", "-m", "acc-t", "--epsilon", "1", "--sources", "{d}/a.sqlite", "-o",
         "{d}/run/private.json"],
        ["evaluate", "-i", "{d}/test.npz", "-c", "{d}/run/ts.json", "--out", "{d}/run/eval.json"],
        ["conformal", "--cal", "{d}/val.npz", "--test", "{d}/test.npz", "--epsilon", "1",
         "--seed", "0", "--out", "{d}/run/sets.csv"],
    ):  # fmt: skip
        res = runner.invoke(app, [a.format(d=tmp_path) for a in argv])
        assert res.exit_code == 0, res.output
    fit = json.loads((out / "ts.summary.json").read_text())
    assert (
        fit["privcal"] == "fit"
        and fit["metrics"]["Calibrated"]["ECE"] < fit["metrics"]["Input scores"]["ECE"]
    )
    private = json.loads((out / "private.summary.json").read_text())
    assert "metrics" not in private and "reliability" not in private  # nothing of private data
    assert private["ledgers"][0]["spent"] == pytest.approx(1.0)
    assert private["ledgers"][0]["remaining"] == pytest.approx(1.0)
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    page = (out / "report.html").read_text()
    for title in ("privcal fit: ts.summary.json", "privcal evaluate: test.npz",
                  "privcal conformal: sets.csv", "privcal fit: private.summary.json"):  # fmt: skip
        assert title in page, title
    # fit and evaluate: reliability diagrams; conformal: set sizes; the private fit: none
    assert page.count("<img") == 3
    assert "<script" not in page and "http://" not in page and "https://" not in page
    # a single file works too, and names its own sidecar
    res = runner.invoke(app, ["report", str(out / "ts.json"), "-o", str(tmp_path / "one.html")])
    assert res.exit_code == 0, res.output
    assert "privcal fit: ts.summary.json" in (tmp_path / "one.html").read_text()


def test_an_evaluation_names_the_calibrator_it_measured(tmp_path: Path) -> None:
    """The report's sections sort by file name, so an evaluation's finding can stand under
    another calibrator's fit: its sentence names the calibrator file it measured."""
    rng = np.random.default_rng(2)
    z = 3.0 * rng.normal(size=(600, 4))
    y = np.argmax(z / 3.0 + rng.normal(size=z.shape), axis=1)
    np.savez(tmp_path / "val.npz", logits=z[:300], labels=y[:300])
    np.savez(tmp_path / "test.npz", logits=z[300:], labels=y[300:])
    for argv in (
        ["fit", "-m", "temperature", "-i", "{d}/val.npz", "-o", "{d}/run/a.json"],
        ["fit", "-m", "histogram", "-i", "{d}/val.npz", "-o", "{d}/run/b.json"],
        ["evaluate", "-i", "{d}/test.npz", "-c", "{d}/run/a.json", "--out", "{d}/run/eval.json"],
    ):  # fmt: skip
        res = runner.invoke(app, [a.format(d=tmp_path) for a in argv])
        assert res.exit_code == 0, res.output
    assert runner.invoke(app, ["report", str(tmp_path / "run")]).exit_code == 0
    page = html_lib.unescape((tmp_path / "run" / "report.html").read_text())
    assert "(300 examples) <code>a.json</code> takes the ECE" in page
    assert "the calibrator takes the ECE" not in page


def test_an_interrupted_federation_says_so(tmp_path: Path) -> None:
    """The folder of a run stopped before its release (what ``privcal federate server`` leaves
    on Ctrl-C: interrupted.json, the rounds' history, run.log, no calibrator): the report shows
    what exists and says the run was interrupted, in its first lines."""
    out = tmp_path / "federated-secagg"
    out.mkdir()
    (out / "interrupted.json").write_text(
        json.dumps({"interrupted": True, "signal": "SIGINT", "clients_told": True, "time": "t0"})
    )
    (out / "history.json").write_text(json.dumps([{"round": 1, "epsilon_spent": 2.2}]))
    (out / "run.log").write_text("privcal: round 1/3 ...\n")
    res = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    assert "federate-interrupted" in res.output
    page = html_lib.unescape((tmp_path / "r.html").read_text())
    first = page.index("This run was interrupted (SIGINT at t0) before its release")
    assert first < page.index("1 round(s) were summed before the stop")
    assert "every client was told and stopped" in page and "run.log" in page


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("missing", "No file or folder at"),
        ("empty", "holds nothing privcal wrote"),
        ("foreign", "holds nothing privcal wrote"),
        ("foreign-file", "is not an output privcal report reads"),
        ("unwritable", "'--out'"),
        ("suffix", ".html"),
    ],
)
def test_report_errors(tmp_path: Path, case: str, fragment: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "x.json").write_text('{"a": 1}')
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text('{"privcal": "demo", "sections": []}')
    argv = {
        "missing": [str(tmp_path / "nope")],
        "empty": [str(tmp_path / "empty")],
        "foreign": [str(tmp_path / "foreign")],
        "foreign-file": [str(tmp_path / "foreign" / "x.json")],
        "unwritable": [str(tmp_path / "run"), "--out", str(tmp_path / "a_file" / "r.html")],
        "suffix": [str(tmp_path / "run"), "--out", str(tmp_path / "r.txt")],
    }[case]
    res = runner.invoke(app, ["report", *argv])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.stderr
    assert fragment in lines[0], lines[0]
    assert not list(tmp_path.rglob("*.html"))


def test_figure_titles_are_not_clipped() -> None:
    """Long panel titles wrap inside the figure (the demo's right panel title was cut)."""
    from privcal.metrics import reliability
    from privcal.report import draw, reliability_figure

    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(10), size=500)
    y = rng.integers(0, 10, 500)
    name = "gaussian_blur (severity 5): temperature scaling fitted on the validation half"
    fig = draw(reliability_figure("A long figure title " * 4, [(name, reliability(p, y))] * 2))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = fig.bbox
    renderer = canvas.get_renderer()
    suptitle = fig._suptitle  # type: ignore[attr-defined]
    titles = [ax.title for ax in fig.axes if ax.get_title()] + [suptitle]
    assert len(titles) >= 3
    for t in titles:
        ext = t.get_window_extent(renderer)
        assert box.x0 - 1 <= ext.x0 and ext.x1 <= box.x1 + 1, (t.get_text(), ext, box)
        assert math.isfinite(ext.width) and ext.width > 0


def test_a_distributed_run_shows_the_threshold_and_min_clients_in_effect() -> None:
    """config.json holds what was given (threshold 0: the default; min-clients 2); the run used
    t = 4 of K = 5, and needed 4 clients: the report says so beside the given values."""
    from privcal.report.readers import _run_settings

    cfg = {"method": "fedtemp", "num-nodes": 5, "min-clients": 2, "epsilon": 5.0}
    assert "threshold" not in _run_settings(cfg)  # trusted aggregation: no threshold
    shown = _run_settings({**cfg, "aggregation": "distributed", "threshold": 0})
    assert shown["threshold"] == "4 (the default for num-nodes)"
    assert shown["min-clients"] == "2 (4 in effect: the threshold t)"
    shown = _run_settings({**cfg, "aggregation": "distributed", "threshold": 3, "min-clients": 5})
    assert shown["threshold"] == "3" and shown["min-clients"] == "5"
    assert "threshold" not in _run_settings({**cfg, "aggregation": "distributed", "epsilon": 0})

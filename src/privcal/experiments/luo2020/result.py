"""The result of seed 000's protocol: tidy rows, the Table 1 analogue, Fig. 1-3 panels and the
files :meth:`Luo2020Result.write` writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privcal.plots import subplots
from privcal.report.formatting import write_csv

__all__ = ["Luo2020Result"]

#: The three panels of each figure: the setting swept (its row key) and the x-axis label.
_PANELS = (
    ("sources", "n_sources", "number of sources"),
    ("samples", "n_samples", "samples per source"),
    ("epsilon", "epsilon", "epsilon"),
)
_HELD = {"n_sources": "d={}", "n_samples": "n={}", "epsilon": "eps={:g}"}
#: Line colours of the methods other than Acc-T (red) in the figures.
_OTHERS = "blue orange green purple brown gray olive cyan pink"


@dataclass
class Luo2020Result:
    """Output of :func:`~privcal.experiments.luo2020.run`.

    Attributes
    ----------
    rows : list of dict
        Tidy rows, one per (dataset, setting, method): ``dataset, panel, n_sources, n_samples,
        epsilon, method, ece_mean, ece_median, ece_std, temperature_median, trials``.
    methods : list of str
    seconds : float
        Wall time of the computation (figures and files excluded).
    files : list of Path
    """

    rows: list[dict[str, Any]]
    methods: list[str]
    seconds: float
    files: list[Path] = field(default_factory=list)

    def table(self) -> dict[str, tuple[float, float]]:
        """Table 1 analogue: method -> (median, mean) over settings of the per-setting mean ECE."""
        out = {}
        for m in self.methods:
            v = np.array([r["ece_mean"] for r in self.rows if r["method"] == m])
            out[m] = (float(np.median(v)), float(np.mean(v)))
        return out

    def table_markdown(self, title: str = "") -> str:
        """The Table 1 analogue as a Markdown table (best DP median in bold)."""
        tab = self.table()
        named = f" ({title})" if title else ""
        lines = [f"| Recalibration method | ECE median / mean{named} |", "|---|---|"]
        best = min(tab.values(), key=lambda x: x[0])[0]
        for m, (med, mean) in tab.items():
            cell = f"{med:.4f} / {mean:.4f}"
            lines.append(f"| {m} | {'**' + cell + '**' if med == best else cell} |")
        return "\n".join(lines)

    def figures(self) -> dict[str, Any]:
        """Three-panel figure (sources, samples, epsilon) per dataset, as in seed 000 Fig. 1-3."""
        figs = {}
        for ds in dict.fromkeys(r["dataset"] for r in self.rows):
            fig, axes = subplots(1, 3, figsize=(13, 3.6))
            for ax, (panel, key, xlabel) in zip(axes, _PANELS, strict=True):
                rows = [r for r in self.rows if r["dataset"] == ds and r["panel"] == panel]
                if not rows:
                    ax.set_visible(False)
                    continue
                others = iter([f"tab:{c}" for c in _OTHERS.split()] * 4)
                for m in self.methods:
                    pts = sorted((r[key], r["ece_mean"]) for r in rows if r["method"] == m)
                    acc_t = m.startswith("Acc-T")
                    style = {"color": "tab:red", "lw": 2.2} if acc_t else {"color": next(others)}
                    ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=m, **style)
                held = ", ".join(t.format(rows[0][k]) for k, t in _HELD.items() if k != key)
                ax.set_title(held, fontsize=9)  # the two settings the panel holds fixed
                ax.set(xlabel=xlabel, ylabel="test ECE (15 bins)", yscale="log")
                ax.grid(alpha=0.3)
            axes[0].legend(fontsize=7)
            fig.suptitle(f"{ds}: mean test ECE over trials")
            fig.tight_layout()
            figs[ds] = fig
        return figs

    def write(self, out_dir: str | Path, figures: bool = True) -> Path:
        """Write ``results.csv``, ``table1.md`` and ``fig_<dataset>.png`` under ``out_dir``
        (kept in :attr:`files`); return the Markdown path."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        files = [out / "results.csv", out / "table1.md"]
        write_csv(files[0], self.rows)
        files[1].write_text(self.table_markdown() + "\n")
        if figures:
            for ds, fig in self.figures().items():
                path = out / f"fig_{ds}.png"
                fig.savefig(path, dpi=110)
                files.append(path)
        self.files = files
        return files[1]

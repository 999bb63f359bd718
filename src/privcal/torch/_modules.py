# mypy: disable-error-code="operator,arg-type,index"
# (registered buffers are typed Tensor | Module by nn.Module.__getattr__)
"""The ``torch.nn.Module`` forms of fitted calibrators (imported only by :func:`to_module`).

Each module computes in float64, as ``predict_proba`` does, and repeats its steps one for one:
the same input conventions (:func:`privcal.data.validation.check_scores`: ``(N,)`` or
``(N, 1)`` binary logits become ``[0, z]``), the same maps, the same right-closed bins
(:func:`privcal.metrics.statistics.bin_indices`, corrected against the same float edges) and the
same top-label rescaling (:func:`privcal.calibrators.binning.rescale_top_label`). Every module is
written in TorchScript's subset of Python, so ``torch.jit.script`` and ``torch.export`` take it.
"""

import torch
from torch import Tensor, nn

__all__ = [
    "BinningModule",
    "CalibrationModule",
    "MatrixScalingModule",
    "OrderPreservingModule",
    "PlattScalingModule",
    "TemperatureScalingModule",
    "TopLabelBinningModule",
    "VectorScalingModule",
]


def _f64(values: object) -> Tensor:
    return torch.as_tensor(values, dtype=torch.float64).clone()


class CalibrationModule(nn.Module):
    """Shared input handling: float64 ``N x C`` logits, checked against the fitted class count."""

    n_classes: int

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.n_classes = int(n_classes)

    def _logits(self, z: Tensor) -> Tensor:
        z = z.to(torch.float64)
        if z.dim() == 1:
            z = z.unsqueeze(1)
        if z.dim() != 2:
            raise ValueError(
                "'logits' must have shape (n_samples, n_classes), (n_samples, 1) or (n_samples,)"
            )
        if z.shape[1] == 1:
            z = torch.cat([torch.zeros_like(z), z], dim=1)
        if z.shape[1] != self.n_classes:
            raise ValueError(
                "'logits' must have one column per class the calibrator was fitted on ("
                + str(self.n_classes)
                + "); got "
                + str(z.shape[1])
            )
        return z


class TemperatureScalingModule(CalibrationModule):
    """``softmax(z / T)`` (``TemperatureScaling``, ``PrivateTemperatureScaling``)."""

    def __init__(self, n_classes: int, temperature: float) -> None:
        super().__init__(n_classes)
        self.register_buffer("temperature", _f64(temperature))

    def forward(self, logits: Tensor) -> Tensor:
        return torch.softmax(self._logits(logits) / self.temperature, dim=1)


class PlattScalingModule(CalibrationModule):
    """``[1 - p, p]`` with ``p = sigmoid(a (z_1 - z_0) + b)`` (``PlattScaling``)."""

    def __init__(self, coef: float, intercept: float) -> None:
        super().__init__(2)
        self.register_buffer("coef", _f64(coef))
        self.register_buffer("intercept", _f64(intercept))

    def forward(self, logits: Tensor) -> Tensor:
        z = self._logits(logits)
        p1 = torch.sigmoid(self.coef * (z[:, 1] - z[:, 0]) + self.intercept)
        return torch.stack([1.0 - p1, p1], dim=1)


class VectorScalingModule(CalibrationModule):
    """``softmax(w * z + b)`` (``VectorScaling``)."""

    def __init__(self, coef: object, intercept: object) -> None:
        w = _f64(coef)
        super().__init__(int(w.shape[0]))
        self.register_buffer("coef", w)
        self.register_buffer("intercept", _f64(intercept))

    def forward(self, logits: Tensor) -> Tensor:
        return torch.softmax(self._logits(logits) * self.coef + self.intercept, dim=1)


class OrderPreservingModule(CalibrationModule):
    """Order-preserving vector scaling (``VectorScaling(order_preserving=True)``).

    Rows sorted in decreasing order (stable), gaps ``d_k = y_k - y_{k+1}`` scaled by
    ``exp(a_k)``, sorted outputs ``u_1 = 0, u_{k+1} = u_k - exp(a_k) d_k``, scattered back to the
    class order (:func:`privcal.calibrators.scaling.order_preserving_logits`), then softmax.
    """

    def __init__(self, log_scales: object) -> None:
        a = _f64(log_scales)
        super().__init__(int(a.shape[0]) + 1)
        self.register_buffer("log_scales", a)

    def forward(self, logits: Tensor) -> Tensor:
        z = self._logits(logits)
        ys, order = torch.sort(z, dim=1, descending=True, stable=True)
        gaps = ys[:, :-1] - ys[:, 1:]
        w = torch.exp(self.log_scales).unsqueeze(0) * gaps
        u_sorted = torch.cat([torch.zeros_like(z[:, :1]), -torch.cumsum(w, dim=1)], dim=1)
        u = torch.zeros_like(z).scatter(1, order, u_sorted)
        return torch.softmax(u, dim=1)


class MatrixScalingModule(CalibrationModule):
    """``softmax(W z~ + b)``, floored logits ``z~ = max(z, max_k z_k - L)`` (``MatrixScaling``)."""

    floor: bool

    def __init__(self, coef: object, intercept: object, logit_range: float | None) -> None:
        w = _f64(coef)
        super().__init__(int(w.shape[0]))
        self.register_buffer("coef", w)
        self.register_buffer("intercept", _f64(intercept))
        self.floor = logit_range is not None
        self.register_buffer("logit_range", _f64(0.0 if logit_range is None else logit_range))

    def forward(self, logits: Tensor) -> Tensor:
        z = self._logits(logits)
        if self.floor:
            row_max = torch.max(z, dim=1, keepdim=True)[0]
            z = torch.maximum(z, row_max - self.logit_range)
        return torch.softmax(z @ self.coef.t() + self.intercept, dim=1)


def _bin_indices(v: Tensor, edges: Tensor, n_bins: int) -> Tensor:
    """:func:`privcal.metrics.statistics.bin_indices` (equal width, right-closed), in torch."""
    idx = torch.clamp(torch.ceil(v * n_bins).to(torch.int64) - 1, 0, n_bins - 1)
    idx = idx - ((idx > 0) & (v <= edges[idx])).to(torch.int64)
    idx = idx + ((idx < n_bins - 1) & (v > edges[torch.clamp(idx + 1, 0, n_bins)])).to(torch.int64)
    return idx


class TopLabelBinningModule(CalibrationModule):
    """Top-label histogram binning: the top confidence's bin value, others rescaled.

    ``HistogramBinning(mode="top")`` and ``PrivateHistogramBinning``: the bin value of the top
    confidence (kept where the bin is empty, NaN), then
    :func:`privcal.calibrators.binning.rescale_top_label`.
    """

    n_bins: int
    tie_margin: float

    def __init__(
        self, n_classes: int, bin_values: object, edges: object, tie_margin: float
    ) -> None:
        super().__init__(n_classes)
        values = _f64(bin_values)
        self.n_bins = int(values.shape[0])
        self.tie_margin = float(tie_margin)
        self.register_buffer("bin_values", values)
        self.register_buffer("edges", _f64(edges))

    def forward(self, logits: Tensor) -> Tensor:
        p = torch.softmax(self._logits(logits), dim=1)
        top = torch.argmax(p, dim=1, keepdim=True)
        conf = torch.gather(p, 1, top).squeeze(1)
        v = self.bin_values[_bin_indices(conf, self.edges, self.n_bins)]
        v = torch.where(torch.isnan(v), conf, v)
        return self._rescale(p, top, v)

    def _rescale(self, p: Tensor, top: Tensor, new_top: Tensor) -> Tensor:
        c = p.shape[1]
        is_top = torch.zeros_like(p, dtype=torch.bool).scatter(1, top, True)
        others = torch.where(is_top, torch.zeros_like(p), p)
        rest = others.sum(dim=1)
        uniform = 1.0 / max(c - 1, 1)
        positive = (rest > 0).unsqueeze(1)
        safe = torch.where(rest > 0, rest, torch.ones_like(rest)).unsqueeze(1)
        share = torch.where(positive, others / safe, torch.full_like(p, uniform))
        share = torch.where(is_top, torch.zeros_like(p), share)
        largest = share.max(dim=1)[0]
        below = new_top < 1.0
        allowed = torch.where(
            below,
            (1.0 - self.tie_margin) * new_top / torch.where(below, 1.0 - new_top, 1.0),
            torch.full_like(new_top, float("inf")),
        )
        lam = torch.where(
            largest > allowed,
            (largest - allowed) / torch.clamp(largest - uniform, min=1e-300),
            torch.zeros_like(largest),
        )
        lam = torch.clamp(lam, 0.0, 1.0).unsqueeze(1)
        mixed = (1.0 - lam) * share + lam * uniform
        mixed = torch.where(is_top, torch.zeros_like(p), mixed)
        out = mixed * (1.0 - new_top).unsqueeze(1)
        return torch.where(is_top, new_top.unsqueeze(1).expand_as(p), out)


class BinningModule(CalibrationModule):
    """One-vs-all lookup, then normalisation (classwise ``HistogramBinning``, ``BBQ``).

    Each class probability is replaced by its class's value in its bin (kept where the value is
    NaN, an empty bin), and the rows are normalised; a row whose values are all 0 keeps its
    input probabilities (:func:`privcal.calibrators.binning.normalise_one_vs_all`, whose
    warning the module does not raise).
    """

    n_bins: int

    def __init__(self, table: object, edges: object) -> None:
        t = _f64(table)
        super().__init__(int(t.shape[0]))
        self.n_bins = int(t.shape[1])
        self.register_buffer("table", t)
        self.register_buffer("edges", _f64(edges))
        self.register_buffer("classes", torch.arange(int(t.shape[0])).unsqueeze(0))

    def forward(self, logits: Tensor) -> Tensor:
        p = torch.softmax(self._logits(logits), dim=1)
        v = self.table[self.classes, _bin_indices(p, self.edges, self.n_bins)]
        g = torch.where(torch.isnan(v), p, v)
        s = g.sum(dim=1, keepdim=True)
        bad = s <= 0
        return torch.where(bad, p, g / torch.where(s > 0, s, torch.ones_like(s)))

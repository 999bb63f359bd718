"""PyTorch way in (the ``torch`` extra): logits from a model, calibrators as modules.

* :func:`collect_logits` runs a model over a ``DataLoader`` (in eval mode, under
  ``torch.inference_mode``, on the model's device) and returns its logits and the labels as NumPy
  arrays, ready for any privcal calibrator, private calibrator or conformal method.
* :func:`to_module` exports a fitted calibrator as a ``torch.nn.Module`` that maps logits to the
  calibrator's ``predict_proba`` (to 1e-6; in practice to float64 rounding), so the calibration
  can ship inside the network: ``nn.Sequential(model, to_module(cal))``. The modules survive
  ``torch.jit.script`` and ``torch.export``.

``import privcal`` and ``import privcal.torch`` never import torch; the two functions do, and
raise :class:`~privcal.training.MissingTorchError` (``pip install privcal[torch]``) without it.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from privcal.calibrators import (
    BBQ,
    HistogramBinning,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from privcal.calibrators.base import Calibrator
from privcal.calibrators.binning import TIE_MARGIN
from privcal.metrics.statistics import width_bin_edges
from privcal.private import PrivateHistogramBinning, PrivateTemperatureScaling
from privcal.training._torch import INSTALL_HINT, MissingTorchError

__all__ = ["EXPORTABLE", "collect_logits", "to_module"]

#: Calibrator classes :func:`to_module` exports (subclasses too, unless they change
#: ``predict_proba``). ``HistogramBinning`` and ``BBQ`` with ``prior=None`` only.
EXPORTABLE = (
    "TemperatureScaling",
    "PrivateTemperatureScaling",
    "PlattScaling",
    "VectorScaling",
    "MatrixScaling",
    "HistogramBinning",
    "PrivateHistogramBinning",
    "BBQ",
)


def _torch(feature: str) -> Any:
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise MissingTorchError(
            f"{feature} needs the torch extra: {INSTALL_HINT}. Import failed with: {exc}"
        ) from exc


def _model_device(torch: Any, model: Any) -> Any:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def collect_logits(model: Any, loader: Any, *, device: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """A model's logits and the labels over a data loader, as NumPy arrays.

    The model is put in eval mode (dropout off, batch norm on its running statistics) for the
    pass and every submodule's mode is restored afterwards, even on error; the pass runs under
    ``torch.inference_mode()`` (no graph, no gradients). Each batch's inputs are moved to
    ``device`` (default: the device of the model's first parameter or buffer, else the CPU);
    the outputs come back to the CPU.

    Parameters
    ----------
    model : torch.nn.Module
        Maps a batch of inputs to ``(B, C)`` logits (or ``(B,)`` / ``(B, 1)`` binary logits).
    loader : iterable of (inputs, labels)
        A ``torch.utils.data.DataLoader`` (or any iterable) yielding pairs (or longer
        sequences whose first two items are inputs and labels); ``inputs`` is a tensor, or a
        tuple / list of tensors passed as separate arguments.
    device : torch.device or str, optional
        Where to run the model; the model itself is not moved.

    Returns
    -------
    logits : ndarray of shape (N, C) or (N,)
        In the model's output dtype (float32 for most networks; privcal accepts it as is).
    labels : ndarray of shape (N,), int64

    Raises
    ------
    ValueError
        A batch that is not an (inputs, labels) pair, labels that are not integers, outputs
        whose rows do not match the labels or whose width changes, or an empty loader.
    MissingTorchError
        Without the torch extra.
    """
    torch = _torch("privcal.torch.collect_logits")
    if not isinstance(model, torch.nn.Module):
        raise ValueError(
            f"The 'model' parameter of collect_logits must be a torch.nn.Module. Got "
            f"{type(model).__name__} instead."
        )
    dev = _model_device(torch, model) if device is None else torch.device(device)
    modes = [(m, m.training) for m in model.modules()]
    outputs: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    try:
        model.eval()
        with torch.inference_mode():
            for i, batch in enumerate(loader):
                if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                    raise ValueError(
                        f"The 'loader' parameter of collect_logits must yield (inputs, labels) "
                        f"pairs. Got a {type(batch).__name__} as batch {i} instead; use a "
                        f"loader over labelled data (e.g. a TensorDataset(inputs, labels))."
                    )
                inputs, y = batch[0], batch[1]
                if isinstance(inputs, (tuple, list)):
                    out = model(*(x.to(dev) for x in inputs))
                else:
                    out = model(inputs.to(dev))
                y = torch.as_tensor(y)
                if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
                    raise ValueError(
                        f"The 'loader' parameter of collect_logits must yield integer class "
                        f"labels. Got labels of dtype {y.dtype} in batch {i} instead."
                    )
                out_np = out.detach().to("cpu").numpy()
                y_np = y.reshape(-1).to("cpu").numpy().astype(np.int64)
                if out_np.shape[0] != y_np.shape[0] or out_np.ndim not in (1, 2):
                    raise ValueError(
                        f"The model's output for batch {i} has shape {tuple(out_np.shape)} but "
                        f"the batch has {y_np.shape[0]} labels; collect_logits needs one row of "
                        f"logits (B x C) per label."
                    )
                if outputs and out_np.shape[1:] != outputs[0].shape[1:]:
                    raise ValueError(
                        f"The model's output for batch {i} has shape {tuple(out_np.shape)}, "
                        f"unlike the earlier batches' {tuple(outputs[0].shape[1:])} columns."
                    )
                outputs.append(out_np)
                labels.append(y_np)
    finally:
        for m, training in modes:
            m.training = training
    if not outputs:
        raise ValueError("The 'loader' parameter of collect_logits yielded no batches.")
    return np.concatenate(outputs), np.concatenate(labels)


def _exporter(calibrator: Any) -> type:
    """The registered class whose ``predict_proba`` ``calibrator`` uses, or a clear refusal."""
    for cls in type(calibrator).__mro__:
        if cls.__name__ in EXPORTABLE and cls.__module__.startswith("privcal."):
            if type(calibrator)._predict_proba is cls._predict_proba:  # type: ignore[attr-defined]
                return cls
            break
    raise ValueError(
        f"The 'calibrator' parameter of to_module must be a fitted {', '.join(EXPORTABLE)}. "
        f"Got a {type(calibrator).__name__} instead, whose predict_proba to_module cannot "
        f"reproduce as a module; apply it with predict_proba on collected logits."
    )


def to_module(calibrator: Any) -> Any:
    """A fitted calibrator as a ``torch.nn.Module``: logits in, ``predict_proba`` out.

    The module (one class per map, :mod:`privcal.torch._modules`, each stating its formula)
    repeats ``calibrator.predict_proba`` step for step in float64 (whatever the input dtype, as
    ``predict_proba`` does); its parameters are buffers (not trained). It takes ``(N, C)``,
    ``(N, 1)`` or ``(N,)`` logits like ``predict_proba`` and returns float64 ``(N, C)``
    probabilities, equal to ``predict_proba`` to float64 rounding (the tests hold it to 1e-6). It
    can be scripted (``torch.jit.script``) or exported (``torch.export.export``).

    Parameters
    ----------
    calibrator : fitted calibrator
        ``TemperatureScaling``, ``PrivateTemperatureScaling``, ``PlattScaling``,
        ``VectorScaling`` (either form), ``MatrixScaling``, ``HistogramBinning`` (either mode,
        ``prior=None``), ``PrivateHistogramBinning`` or ``BBQ`` (``prior=None``).

    Raises
    ------
    ValueError
        Another calibrator (isotonic, ``prior="model"`` binning, DP-SGD and federated maps),
        naming it.
    NotFittedError
        An unfitted calibrator.
    MissingTorchError
        Without the torch extra.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from privcal.calibrators import TemperatureScaling
    >>> rng = np.random.default_rng(0)
    >>> z = 3.0 * rng.normal(size=(500, 4)); y = np.argmax(z + 2 * rng.normal(size=z.shape), 1)
    >>> cal = TemperatureScaling().fit(z, y)
    >>> module = to_module(cal)
    >>> bool(np.allclose(module(torch.from_numpy(z)).numpy(), cal.predict_proba(z), atol=1e-12))
    True
    """
    _torch("privcal.torch.to_module")
    if not isinstance(calibrator, Calibrator):
        raise ValueError(
            f"The 'calibrator' parameter of to_module must be a fitted privcal calibrator "
            f"({', '.join(EXPORTABLE)}). Got {type(calibrator).__name__} instead."
        )
    calibrator._check_fitted()
    cls = _exporter(calibrator)
    from privcal.torch import _modules as mod

    c = int(calibrator.n_classes_)
    if cls in (TemperatureScaling, PrivateTemperatureScaling):
        return mod.TemperatureScalingModule(c, float(calibrator.temperature_))
    if cls is PlattScaling:
        return mod.PlattScalingModule(float(calibrator.coef_), float(calibrator.intercept_))
    if cls is VectorScaling:
        if calibrator.order_preserving:
            return mod.OrderPreservingModule(np.asarray(calibrator.coef_))
        return mod.VectorScalingModule(calibrator.coef_, calibrator.intercept_)
    if cls is MatrixScaling:
        lr = calibrator.logit_range
        return mod.MatrixScalingModule(
            calibrator.coef_, calibrator.intercept_, None if lr is None else float(lr)
        )
    prior = getattr(calibrator, "prior", None)
    if prior is not None:
        raise ValueError(
            f"The 'calibrator' parameter of to_module must be a {cls.__name__} with prior=None "
            f"(a lookup table). Got prior={prior!r} instead, whose values depend on each row's "
            f"own probability; apply it with predict_proba on collected logits."
        )
    if cls is PrivateHistogramBinning or (cls is HistogramBinning and calibrator.mode == "top"):
        values = np.asarray(calibrator.bin_values_, dtype=np.float64)
        edges = width_bin_edges(values.shape[0])
        return mod.TopLabelBinningModule(c, values, edges, TIE_MARGIN)
    assert cls in (HistogramBinning, BBQ)  # classwise binning or BBQ: a per-class table
    table = np.asarray(
        calibrator.bin_values_ if cls is HistogramBinning else calibrator.table_, dtype=np.float64
    )
    return mod.BinningModule(table, width_bin_edges(table.shape[1]))

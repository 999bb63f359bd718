"""privcal.torch: collect_logits over a DataLoader, to_module equal to predict_proba.

Every exportable calibrator is fitted on small seeded synthetic logits (over-confident by a
factor of about two) and its module is compared with ``predict_proba`` on fresh logits, as
loaded (float64), as float32, and as ``(N,)`` binary margins; the module is then exported with
``torch.export`` (and, for one, scripted) and compared again.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from privcal.calibrators import (
    BBQ,
    HistogramBinning,
    IsotonicCalibration,
    MatrixScaling,
    PlattScaling,
    TemperatureScaling,
    VectorScaling,
)
from privcal.metrics.statistics import bin_indices, width_bin_edges
from privcal.privacy import SeededNoise
from privcal.private import PrivateHistogramBinning, PrivateTemperatureScaling
from privcal.sklearn import CalibratedClassifier
from privcal.torch import collect_logits, to_module

TOL = 1e-6

CALIBRATORS: dict[str, Callable[[], Any]] = {
    "temperature": TemperatureScaling,
    "temperature-acc": lambda: TemperatureScaling(objective="acc"),
    "vector": VectorScaling,
    "vector-op": lambda: VectorScaling(order_preserving=True),
    "matrix": MatrixScaling,
    "matrix-raw": lambda: MatrixScaling(logit_range=None),
    "histogram-top": HistogramBinning,
    "histogram-top-50": lambda: HistogramBinning(n_bins=50),
    "histogram-classwise": lambda: HistogramBinning(mode="classwise"),
    "bbq": lambda: BBQ(n_levels=4),
    "private-temperature": lambda: PrivateTemperatureScaling(noise=SeededNoise(0)),
    "private-histogram": lambda: PrivateHistogramBinning(noise=SeededNoise(0)),
}


@pytest.fixture(scope="module")
def logits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    z = 4.0 * rng.normal(size=(1600, 5))
    s = z / 2.0
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (p.cumsum(1) < rng.random((z.shape[0], 1))).sum(1)
    z[:5, 1] = z[:5, 0]  # exact ties between the top classes
    z[5, :] = 0.0  # a row of equal logits
    return z[:800], y[:800], z[800:]


def _fit(name: str, z: np.ndarray, y: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fit diagnostics and seeded-noise warnings
        return CALIBRATORS[name]().fit(z, y)


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_module_equals_predict_proba_and_exports(name: str, logits: Any) -> None:
    z, y, z_test = logits
    cal = _fit(name, z, y)
    module = to_module(cal)
    assert isinstance(module, torch.nn.Module) and not list(module.parameters())
    expected = cal.predict_proba(z_test)
    got = module(torch.from_numpy(z_test))
    assert got.dtype == torch.float64 and got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=TOL)
    z32 = z_test.astype(np.float32)
    np.testing.assert_allclose(
        module(torch.from_numpy(z32)).numpy(), cal.predict_proba(z32), rtol=0, atol=TOL
    )
    exported = torch.export.export(module, (torch.from_numpy(z_test),))
    np.testing.assert_allclose(
        exported.module()(torch.from_numpy(z_test)).numpy(), expected, rtol=0, atol=TOL
    )


@pytest.mark.parametrize("n_bins", [7, 10, 15, 25, 50])
def test_bin_lookup_follows_the_right_closed_rule(n_bins: int) -> None:
    """Values on, just below and just above every edge get bin_indices' bins, exactly."""
    from privcal.torch._modules import _bin_indices

    edges = width_bin_edges(n_bins)
    v = np.concatenate([edges, np.nextafter(edges, -1.0), np.nextafter(edges, 2.0)])
    v = np.clip(v, 0.0, 1.0)
    got = _bin_indices(torch.from_numpy(v), torch.from_numpy(edges), n_bins)
    np.testing.assert_array_equal(got.numpy(), bin_indices(v, n_bins))
    assert got[1].item() == 0 and got[n_bins].item() == n_bins - 1  # 1/M in bin 0, 1 in the last


def test_platt_and_binary_margins() -> None:
    rng = np.random.default_rng(3)
    m = 3.0 * rng.normal(size=600)
    y = (rng.random(600) < 1 / (1 + np.exp(-m / 2))).astype(int)
    for cal in (PlattScaling().fit(m, y), TemperatureScaling().fit(m, y)):
        module = to_module(cal)
        for shaped in (m, m[:, None], np.column_stack([np.zeros_like(m), m])):
            np.testing.assert_allclose(
                module(torch.from_numpy(shaped)).numpy(), cal.predict_proba(shaped), atol=TOL
            )


def test_jit_script(logits: Any) -> None:
    z, y, z_test = logits
    for name in ("histogram-top", "vector-op", "matrix"):
        cal = _fit(name, z, y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # jit.script is deprecated
            scripted = torch.jit.script(to_module(cal))
        np.testing.assert_allclose(
            scripted(torch.from_numpy(z_test)).numpy(), cal.predict_proba(z_test), atol=TOL
        )


def test_module_refuses_what_it_cannot_reproduce(logits: Any) -> None:
    z, y, _ = logits
    with pytest.raises(ValueError, match=r"to_module must be a fitted .*IsotonicCalibration"):
        to_module(_fit_iso(z, y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shrunk = HistogramBinning(prior="model").fit(z, y)
    with pytest.raises(ValueError, match=r"prior=None.*Got prior='model'"):
        to_module(shrunk)
    with pytest.raises(ValueError, match=r"privcal calibrator.*Got str"):
        to_module("temperature")
    with pytest.raises(Exception, match="not fitted"):
        to_module(TemperatureScaling())
    module = to_module(_fit("temperature", z, y))
    with pytest.raises(ValueError, match=r"one column per class.*5.*got 3"):
        module(torch.zeros(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="shape"):
        module(torch.zeros(2, 3, 5))


def _fit_iso(z: np.ndarray, y: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return IsotonicCalibration().fit(z, y)


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.5))
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def test_collect_logits() -> None:
    torch.manual_seed(0)
    net = _Net().double()
    x = torch.randn(70, 6, dtype=torch.float64)
    labels = torch.randint(0, 4, (70,))
    loader = DataLoader(TensorDataset(x, labels), batch_size=16)
    net.train()
    net.body.eval()  # a mixed state must come back as it was
    z, y = collect_logits(net, loader)
    assert net.training and not net.body.training and net.head.training
    with torch.no_grad():
        net.eval()
        expected = net(x).numpy()  # eval mode: dropout off, so deterministic
        net.train()
    np.testing.assert_array_equal(z, expected)
    np.testing.assert_array_equal(y, labels.numpy())
    assert y.dtype == np.int64 and z.shape == (70, 4)
    assert all(p.grad is None for p in net.parameters())
    # ready for a calibrator, whose module then closes the loop
    cal = TemperatureScaling().fit(z, y)
    np.testing.assert_allclose(
        to_module(cal)(net.eval()(x)).detach().numpy(), cal.predict_proba(z), atol=TOL
    )


def test_collect_logits_bad_input() -> None:
    net = _Net()
    x = torch.randn(8, 6)
    with pytest.raises(ValueError, match="'model' parameter of collect_logits"):
        collect_logits(lambda t: t, [(x, torch.zeros(8, dtype=torch.int64))])
    with pytest.raises(ValueError, match=r"must yield \(inputs, labels\) pairs"):
        collect_logits(net, DataLoader(TensorDataset(x), batch_size=4))
    with pytest.raises(ValueError, match=r"integer class labels.*float"):
        collect_logits(net, [(x, torch.zeros(8))])
    with pytest.raises(ValueError, match=r"has shape \(8, 4\) but the batch has 5 labels"):
        collect_logits(net, [(x, torch.zeros(5, dtype=torch.int64))])
    with pytest.raises(ValueError, match="yielded no batches"):
        collect_logits(net, [])
    assert net.training  # restored after the errors too


def test_import_privcal_does_not_load_torch() -> None:
    code = (
        "import sys, privcal, privcal.sklearn, privcal.torch; "
        "assert 'torch' not in sys.modules, 'torch loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_sklearn_wrapper_to_module(logits: Any) -> None:
    """A CalibratedClassifier's fitted calibrator exports like any other."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    X, y = load_digits(return_X_y=True)
    lr = LogisticRegression(max_iter=300).fit(X[:600] / 16, y[:600])
    cc = CalibratedClassifier(lr).fit(X[600:1200] / 16, y[600:1200])
    margins = lr.decision_function(X[1200:] / 16)
    np.testing.assert_allclose(
        to_module(cc.calibrator_)(torch.from_numpy(margins)).numpy(),
        cc.predict_proba(X[1200:] / 16),
        atol=TOL,
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_collect_logits_and_module_on_cuda(logits: Any) -> None:
    """On a GPU: collect_logits runs a CUDA model on CPU batches (moved to the model's device)
    and returns CPU arrays equal to the CPU pass; a calibrator's module moved to the GPU gives
    predict_proba on CUDA logits, and so does its export."""
    torch.manual_seed(0)
    net = _Net().double()
    x = torch.randn(70, 6, dtype=torch.float64)
    labels = torch.randint(0, 4, (70,))
    loader = DataLoader(TensorDataset(x, labels), batch_size=16)
    z_cpu, y_cpu = collect_logits(net, loader)
    z_gpu, y_gpu = collect_logits(net.cuda(), loader)
    assert next(net.parameters()).is_cuda and isinstance(z_gpu, np.ndarray)
    np.testing.assert_allclose(z_gpu, z_cpu, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(y_gpu, y_cpu)
    z, y, z_test = logits
    for name in ("temperature", "vector", "matrix", "histogram-top"):
        cal = _fit(name, z, y)
        module = to_module(cal).cuda()
        zt = torch.from_numpy(z_test).cuda()
        got = module(zt)
        assert got.is_cuda
        expected = cal.predict_proba(z_test)
        np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=0, atol=TOL)
        exported = torch.export.export(module, (zt,))
        np.testing.assert_allclose(exported.module()(zt).cpu().numpy(), expected, rtol=0, atol=TOL)

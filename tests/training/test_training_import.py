"""Without the torch extra, privcal and privcal.training import and point at the extra."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from privcal.training import _torch


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _torch._import

    def fake(name: str):  # type: ignore[no-untyped-def]
        if name.split(".")[0] in ("torch", "opacus"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name)

    monkeypatch.setattr(_torch, "_import", fake)
    for mod in ("privcal.training.trainers", "privcal.training.models", "privcal.training.sgld"):
        monkeypatch.delitem(sys.modules, mod, raising=False)


def test_import_does_not_load_torch() -> None:
    code = "import privcal, privcal.training, sys; print('torch' in sys.modules)"
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_classes_say_pip_install(no_torch: None) -> None:
    from privcal.training import DPPlattScaling, DPTemperatureScaling, MissingTorchError

    z, y = np.eye(3) * 3, np.arange(3)
    for cls in (DPTemperatureScaling, DPPlattScaling):
        with pytest.raises(ImportError, match=r"pip install privcal\[torch\]") as info:
            cls(epsilon=1.0).fit(z, y)
        assert isinstance(info.value, MissingTorchError)
    training = importlib.import_module("privcal.training")
    with pytest.raises(ImportError, match=r"pip install privcal\[torch\]"):
        training.DPSGDTrainer  # noqa: B018

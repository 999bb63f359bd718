"""Framework-free glue between Flower records and privcal's federated methods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from privcal.federated.methods import FedMethod, get_method

__all__ = ["DEFAULTS", "array_of", "load_client_data", "method_from_config"]

#: Run configuration keys and defaults (``[tool.flwr.app.config]`` of the generated app).
DEFAULTS: dict[str, Any] = {
    "method": "fedtemp",
    "n-classes": 0,
    "rounds": 3,
    "epsilon": 0.0,  # 0 = no DP
    "delta": 1e-5,
    "clip": 0.5,
    "clip-pos": 10.0,
    "clip-neg": 50.0,
    "sample-rate": 1.0,
    "seed": 0,
    "n-levels": 7,
    "n-bins": 15,
    "weighting": "all",  # "none" | "all" | "changed" (binning)
    "local-iters": 50,
    "iterations": 5,  # acc-t (seed 000) search evaluations
    "min-clients": 2,
    "num-nodes": 2,
    "wait-nodes-s": 60.0,
    "round-timeout-s": 60.0,
    "noise": "secure",  # "secure" (OpenDP) | "seeded" (tests)
    "secagg": False,
    "secagg-clipping-range": 8.0,
    "secagg-quantization-range": 4194304,
    "secagg-bound": 1000.0,
    "out-dir": "",
}


def array_of(record: Any, key: str) -> np.ndarray:
    """``record[key]`` as a NumPy array (an :class:`flwr.app.Array` entry of an ArrayRecord)."""
    value = record[key]
    if not hasattr(value, "numpy"):
        raise ValueError(f"Record entry {key!r} is not an Array: {type(value).__name__}.")
    return np.asarray(value.numpy())


def method_from_config(cfg: dict[str, Any]) -> FedMethod:
    """The :class:`FedMethod` named by a run configuration."""
    name = str(cfg["method"])
    params: dict[str, Any] = {}
    if name in ("fedtemp", "fedvector", "fedopvector", "fedmatrix", "fedcal"):
        params["local_iters"] = int(cfg["local-iters"])
    elif name == "fedbin":
        params["n_bins"] = int(cfg["n-bins"])
        params["weighting"] = None if cfg["weighting"] == "none" else cfg["weighting"]
    elif name.startswith("fedbbq"):
        params["n_levels"] = int(cfg["n-levels"])
        if name == "fedbbq":
            params["weighting"] = None if cfg["weighting"] == "none" else cfg["weighting"]
            return (
                get_method("fedbbq-all", **params)
                if params["weighting"]
                else get_method("fedbbq", n_levels=params["n_levels"])
            )
    return get_method(name, **params)


def load_client_data(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """A client's calibration logits and labels: ``.npz`` with ``logits`` and ``labels``.

    Other formats go through :func:`privcal.data.read_scores` when it is available.
    """
    p = Path(path)
    if p.suffix == ".npz":
        with np.load(p) as d:
            return np.asarray(d["logits"], dtype=np.float64), np.asarray(d["labels"])
    from privcal.data import read_scores

    s = read_scores(p)
    if s.logits is None:
        raise ValueError(f"{p} holds no logits; federated calibration needs full logits.")
    return np.asarray(s.logits, dtype=np.float64), np.asarray(s.labels)


def dump_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float))
    tmp.replace(path)

"""Framework-free glue between Flower records and privcal's federated methods.

Also the client-side rule shared by the plain and the SecAgg+ ClientApp (:func:`charge_round`):
nothing leaves a client except the clipped payload of a round that its ledger has already
charged, or, in a run without DP (which claims no privacy), its exact payload.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from privcal.federated.dp import DPConfig
from privcal.federated.methods import FedMethod, get_method
from privcal.privacy import (
    BudgetExceededError,
    NoiseSource,
    PrivacyOdometer,
    SecureNoise,
    SeededNoise,
    resolve_noise,
)

__all__ = [
    "DEFAULTS",
    "array_of",
    "charge_round",
    "client_payload",
    "compare_uncalibrated",
    "dp_from_config",
    "load_client_data",
    "method_from_config",
    "server_noise",
]

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
    "n-bins": 32,  # FedBin's default (seed 003: 15)
    "weighting": "all",  # "none" | "all" | "changed" (binning)
    "local-iters": 50,
    "iterations": 5,  # acc-t (seed 000) search evaluations
    "min-clients": 2,
    "num-nodes": 2,
    "wait-nodes-s": 60.0,
    "round-timeout-s": 60.0,
    "noise": "secure",  # "secure" (OpenDP) | "seeded" (tests; the report says not private)
    "secagg": False,
    "secagg-clipping-range": 8.0,
    "secagg-quantization-range": 4194304,
    "secagg-bound": 1000.0,
    "out-dir": "",
    "val": "",  # the server's labelled validation split (checked against uncalibrated)
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


def server_noise(cfg: dict[str, Any], owner: str) -> NoiseSource:
    """The server's noise: :class:`SecureNoise`, or ``SeededNoise(seed + 1)`` when the run config
    says ``noise = "seeded"`` (warns ``InsecureNoiseWarning``; the report is "not private")."""
    if cfg["noise"] not in ("secure", "seeded"):
        raise ValueError(
            f"The 'noise' run config of {owner} must be 'secure' or 'seeded'. "
            f"Got {cfg['noise']!r} instead."
        )
    seeded = SeededNoise(int(cfg["seed"]) + 1) if cfg["noise"] == "seeded" else None
    return resolve_noise(seeded, owner)


def dp_from_config(cfg: dict[str, Any], noise: NoiseSource) -> DPConfig | None:
    """The run's :class:`DPConfig` (``None`` when ``epsilon = 0``: no DP)."""
    if float(cfg["epsilon"]) <= 0:
        return None
    return DPConfig(
        float(cfg["epsilon"]),
        float(cfg["delta"]),
        int(cfg["rounds"]),
        noise=noise,
        clip=float(cfg["clip"]),
        clip_pos=float(cfg["clip-pos"]),
        clip_neg=float(cfg["clip-neg"]),
    )


def client_payload(
    fm: FedMethod, state: dict[str, np.ndarray], z: np.ndarray, y: np.ndarray, cfg: dict[str, Any]
) -> np.ndarray:
    """One client's reply: the method's client step, clipped under DP (the server adds noise)."""
    payload = fm.client_step(state, z, y)
    dp = dp_from_config(cfg, SecureNoise())  # the client only clips; it never draws noise
    if dp is not None:
        payload = fm.clip(payload, dp)
    return np.asarray(payload, dtype=np.float64)


def charge_round(node: dict[str, Any], cfg: dict[str, Any]) -> str | None:
    """Charge this client's ledger for one round *before* it computes its reply.

    Returns ``None`` when the client may reply, or the reason it refuses. A client with a
    ``ledger`` (node config) refuses runs without DP and, in a DP run, records
    ``(epsilon / T, delta / T)`` in its SQLite :class:`~privcal.privacy.PrivacyOdometer` (a
    bookkeeping share of the run's zCDP-composed guarantee: after ``T`` rounds the ledger holds
    the run's ``(epsilon, delta)``); once its budget is spent it refuses. A client without a
    ledger keeps no budget of its own and always replies (the server's report still accounts
    for every round).
    """
    ledger = node.get("ledger")
    if not ledger:
        return None
    eps = float(cfg["epsilon"])
    if eps <= 0:
        return "this client only joins DP runs"
    odo = PrivacyOdometer(
        float(node.get("budget", 1.0)),
        ledger=str(ledger),
        delta_budget=float(node.get("delta-budget", 1e-5)),
        name=str(node.get("name", "client")),
    )
    t = int(cfg["rounds"])
    try:
        odo.spend(
            f"federated round {cfg['round']} ({cfg['method']})",
            eps / t,
            float(cfg["delta"]) / t,
            mechanism="gaussian (server-side, zCDP)",
        )
    except BudgetExceededError as err:
        return str(err)
    return None


def load_client_data(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """A client's calibration logits and labels: ``.npz`` with ``logits`` and ``labels``.

    Other formats go through :func:`privcal.data.read_scores`. The logits and labels are
    validated (finite, labels in ``range(C)``); a damaged or incomplete file is a ``ValueError``
    that names the file and what it must hold.
    """
    from privcal.data.validation import check_labels, check_scores

    p = Path(path)
    if p.suffix != ".npz":
        from privcal.data import read_scores

        s = read_scores(p)
        if s.logits is None:
            raise ValueError(f"{p} holds no logits; federated calibration needs full logits.")
        return np.asarray(s.logits, dtype=np.float64), np.asarray(s.labels)
    try:
        with np.load(p, allow_pickle=False) as d:
            arrays = {k: d[k] for k in ("logits", "labels") if k in d.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
        raise ValueError(f"{str(p)!r} is not a readable .npz file ({err}).") from None
    if len(arrays) < 2:
        raise ValueError(
            f"{str(p)!r} must hold 'logits' and 'labels' arrays "
            "(np.savez(path, logits=..., labels=...)); federated calibration needs labels."
        )
    z = check_scores(arrays["logits"], input="logits", name="logits")
    y = check_labels(arrays["labels"], z.shape[0], z.shape[1])
    return np.asarray(z, dtype=np.float64), np.asarray(y)


def dump_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float))
    tmp.replace(path)


def compare_uncalibrated(
    cal: Any, z: np.ndarray, y: np.ndarray, n_bins: int = 15
) -> dict[str, Any]:
    """ECE, classwise ECE and accuracy of ``cal`` beside those of the uncalibrated ``softmax(z)``,
    and both reliability diagrams' per-bin data (``reliability``, for ``privcal report``).

    ``worse`` is true when the calibrated ECE (equal-width, ``n_bins`` bins) exceeds the
    uncalibrated one on these rows; ``summary`` is a one-line account (with ``WARNING`` first
    when worse). Exact statistics of ``(z, y)``: run it only where those rows may be seen (the
    server's own split, or a client's own console).
    """
    from privcal.metrics import accuracy, classwise_ece, ece, reliability
    from privcal.metrics.statistics import softmax

    before, after = softmax(z), cal.predict_proba(z)
    out: dict[str, Any] = {"rows": len(y)}
    for name, fn in (("ece", ece), ("cwece", classwise_ece)):
        out[name] = [float(fn(before, y, n_bins)), float(fn(after, y, n_bins))]
    out["accuracy"] = [float(accuracy(before, y)), float(accuracy(after, y))]
    out["worse"] = bool(out["ece"][1] > out["ece"][0])
    out["reliability"] = {
        "before": reliability(before, y, n_bins).to_dict(),
        "after": reliability(after, y, n_bins).to_dict(),
    }
    line = (
        f"ECE {out['ece'][0]:.4f} -> {out['ece'][1]:.4f}, classwise ECE {out['cwece'][0]:.4f} -> "
        f"{out['cwece'][1]:.4f}, accuracy {out['accuracy'][0]:.4f} -> {out['accuracy'][1]:.4f} "
        f"(uncalibrated -> calibrated, {out['rows']} rows)"
    )
    out["summary"] = (
        f"WARNING: the calibrator is worse than the uncalibrated model: {line}"
        if out["worse"]
        else line
    )
    return out


def write_status(node: dict[str, Any], text: str) -> None:
    """Append one line to the node's ``status`` file (node config), if it has one.

    ``privcal federate client`` shows these lines: the ClientApp runs in a process of its own
    that Flower starts, so a file is how it reaches the person running the client.
    """
    path = node.get("status")
    if path:
        with open(str(path), "a", encoding="utf-8") as fh:
            fh.write(text.rstrip("\n") + "\n")

"""Fixed-point transport of payloads through Flower's SecAgg+: the scaling into its clipping
range and the exact carriage of ring residues (the arithmetic of
:mod:`privcal.federated.flower.secagg`, which states the protocol).

Pure NumPy, so that the SecAgg+ apps and a client's transcript
(:func:`privcal.federated.flower.transcript.noiseless_forms`) share it without importing each
other.
"""

from __future__ import annotations

import numpy as np

__all__ = ["from_wire", "residues_to_wire", "ring_ranges", "to_wire", "wire_to_residues"]


def to_wire(payload: np.ndarray, bound: float, clipping_range: float) -> np.ndarray:
    """Scale a payload into ``[-R, R]`` for SecAgg+."""
    return np.asarray(payload, dtype=np.float64) * (clipping_range / bound)


def from_wire(mean: np.ndarray, n: int, bound: float, clipping_range: float) -> np.ndarray:
    """Sum of ``n`` payloads from SecAgg+'s unweighted mean of their scaled forms."""
    return np.asarray(mean, dtype=np.float64) * n * (bound / clipping_range)


def ring_ranges(bits: int) -> tuple[float, int, int]:
    """SecAgg+'s ``(clipping_range, quantization_range, modulus_range)`` that carry residues
    modulo ``2^bits`` exactly: ``R = (M - 1) / 2``, ``Q = M - 1``, ``M = 2^bits``."""
    m = 1 << int(bits)
    return (m - 1) / 2.0, m - 1, m


def residues_to_wire(residues: np.ndarray, bits: int) -> np.ndarray:
    """A client's ring residues as the floats SecAgg+ quantises back to them exactly."""
    r, _, _ = ring_ranges(bits)
    return np.asarray(residues, dtype=np.uint64).astype(np.float64) - r


def wire_to_residues(mean: np.ndarray, n: int, bits: int) -> np.ndarray:
    """The modular sum ``S`` of ``n`` survivors' residues from SecAgg+'s aggregate.

    SecAgg+ returns ``(S - n R) Q / (n Q mod M)`` (see the module docstring); this inverts it
    and refuses a value that is not within ``1e-3`` of an integer (a transport that did not
    carry the residues exactly: nothing is released).
    """
    r, q, m = ring_ranges(bits)
    total_ratio = (n * q) % m
    s = np.asarray(mean, dtype=np.float64) * (total_ratio / q) + n * r
    rounded = np.rint(s)
    if s.size and float(np.abs(s - rounded).max()) > 1e-3:
        raise RuntimeError(
            "privcal: SecAgg+ did not carry the distributed shares exactly (the recovered sum is "
            "not an integer); nothing is released."
        )
    return (rounded.astype(np.int64) % m).astype(np.uint64)

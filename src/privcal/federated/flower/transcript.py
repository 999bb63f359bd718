"""A client's transcript: every reply it sends towards the server, as the server receives it.

:func:`transcript_mod` is the outermost mod of privcal's ClientApps (the plain one and the
SecAgg+ one, outside ``secaggplus_mod``), so it sees each reply exactly as it leaves the node:
after SecAgg+ has masked it, before the SuperNode hands it to the SuperLink. When the node
configuration names a ``transcript`` file (``privcal federate client --transcript FILE``), it
appends one JSON line per reply: the message type, and every record's entries, with NumPy arrays
and ndarray-encoded bytes (SecAgg+'s masked vectors) decoded to lists and other bytes as hex.
Nothing else changes: without ``transcript`` the mod only passes the reply through.

What it is for: a data holder (or an auditor) can read what its node disclosed, and the tests
check on it that under ``aggregation = "distributed"`` no reply carries a client's noiseless
payload or its fixed-point encoding (:func:`carries`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from flwr.app import Context, Message

from privcal.federated.flower.ring import residues_to_wire

__all__ = ["carries", "noiseless_forms", "read_transcript", "reply_arrays", "transcript_mod"]


def _value(v: Any) -> Any:
    """A record entry as JSON: arrays and ndarray bytes as lists, other bytes as hex."""
    if hasattr(v, "numpy"):
        return {"array": np.asarray(v.numpy(), dtype=np.float64).ravel().tolist()}
    if isinstance(v, bytes | bytearray):
        from flwr.common import bytes_to_ndarray

        try:
            arr = bytes_to_ndarray(bytes(v))
        except Exception:  # not an ndarray: keys, ciphertexts
            return {"bytes": bytes(v).hex()}
        return {"array": np.asarray(arr, dtype=np.float64).ravel().tolist()}
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _record(content: Any) -> dict[str, Any]:
    return {name: {str(k): _value(v) for k, v in rec.items()} for name, rec in content.items()}


def transcript_mod(
    msg: Message, context: Context, call_next: Callable[[Message, Context], Message]
) -> Message:
    """Flower mod: pass the message on; append the reply to the node's ``transcript`` file."""
    reply = call_next(msg, context)
    path = context.node_config.get("transcript")
    if path:
        line = {
            "message_type": str(reply.metadata.message_type),
            "error": reply.has_error(),
            "content": {} if reply.has_error() else _record(reply.content),
        }
        with open(str(path), "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    return reply


def read_transcript(path: Any) -> list[dict[str, Any]]:
    """The replies of a transcript file, in the order the node sent them."""
    with open(str(path), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def reply_arrays(entry: dict[str, Any]) -> Iterator[np.ndarray]:
    """Every numeric array (and every numeric scalar list) one transcript reply carried."""

    def walk(v: Any) -> Iterator[np.ndarray]:
        if isinstance(v, dict):
            if "array" in v:
                yield np.asarray(v["array"], dtype=np.float64)
            else:
                for x in v.values():
                    yield from walk(x)
        elif isinstance(v, list):
            if v and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v):
                yield np.asarray(v, dtype=np.float64)
            else:
                for x in v:
                    yield from walk(x)
        elif isinstance(v, int | float) and not isinstance(v, bool):
            yield np.asarray([v], dtype=np.float64)

    yield from walk(entry.get("content", {}))


def carries(arr: np.ndarray, secret: np.ndarray, tol: float = 1e-9) -> bool:
    """Whether every entry of ``secret`` appears in ``arr`` (within ``tol``): the test for a
    reply that discloses a vector (or an encoding of it) verbatim, in any order."""
    a = np.sort(np.asarray(arr, dtype=np.float64).ravel())
    s = np.asarray(secret, dtype=np.float64).ravel()
    if a.size == 0 or s.size == 0:
        return False
    i = np.clip(np.searchsorted(a, s), 1, a.size - 1) if a.size > 1 else np.zeros(s.size, int)
    near = np.minimum(np.abs(a[i] - s), np.abs(a[i - 1] - s)) if a.size > 1 else np.abs(a[0] - s)
    return bool(np.all(near <= tol))


def noiseless_forms(payload: np.ndarray, dp: Any, fm: Any) -> list[np.ndarray]:
    """Every form in which a client's noiseless ``payload`` could appear on the wire of a
    distributed run: the payload itself, and per noise group its fixed-point encoding rounded
    either way, as residues modulo the ring and as the floats SecAgg+ carries them
    (:func:`~privcal.federated.flower.ring.residues_to_wire`). What :func:`carries` must
    never find in a transcript of ``aggregation = "distributed"``."""
    x = np.asarray(payload, dtype=np.float64).ravel()
    out = [x]
    for g in fm.noise_groups(dp, x.shape):
        scaled = dp.plan(g).encoding.scale * x[g.index]
        for enc in (np.floor(scaled), np.floor(scaled) + 1):
            residues = np.mod(enc, 2.0**dp.bits)
            out += [residues, residues_to_wire(residues.astype(np.uint64), dp.bits)]
    return out

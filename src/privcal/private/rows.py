"""Row hashing: which rows a source holds, for the disjointness checks and the ledger binding.

Parallel composition across sources holds only when no example lies in two sources. Each
source computes a 64-bit digest of each row (logits and label, :func:`row_digests`) and an
order-free fingerprint of its whole data (:func:`data_fingerprint`), kept in its ledger; a
ledger-backed source also keeps the SHA-256 of its scores file (:func:`file_sha256`). None of
these is ever released: they are compared inside the process that holds the sources
(:func:`privcal.private.parallel.check_disjoint`) and against the ledger's record.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

__all__ = ["data_fingerprint", "file_sha256", "row_digests", "split_rows"]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def _mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that spreads every input bit."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def row_digests(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each row ``(logits[i], labels[i])`` (vectorised FNV-1a + splitmix64).

    Two rows get the same digest when their float64 logits (``-0.0`` read as ``0.0``) and their
    labels are equal; distinct rows collide with probability about ``2^-64`` per pair. Used to
    detect data shared by two sources, never released.
    """
    z = np.ascontiguousarray(np.asarray(logits, dtype=np.float64) + 0.0)
    words = z.view(np.uint64).reshape(z.shape[0], -1)
    h = np.full(z.shape[0], _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            h = (h ^ words[:, j]) * _FNV_PRIME
        h = (h ^ np.asarray(labels, dtype=np.int64).astype(np.uint64)) * _FNV_PRIME
        return _mix64(h)


def split_rows(digests: np.ndarray, key: int, fraction: float) -> np.ndarray:
    """``True`` for the rows on side 0 of the split by ``key``: ``mix(digest ^ key) < f 2^64``.

    A row's side is a function of that row and the key alone, so adding or removing one example
    moves no other row across the split (each side's statistics have the sensitivity of the
    whole data's, and releases on the two sides compose in parallel). With the key drawn
    independently of the data, the sides behave as a random split (distinct rows fall on side 0
    independently with probability ``f``; equal rows fall together).
    """
    h = _mix64(np.asarray(digests, dtype=np.uint64) ^ np.uint64(key & 0xFFFFFFFFFFFFFFFF))
    return np.asarray(h < np.uint64(min(int(fraction * 2.0**64), 2**64 - 1)))


def data_fingerprint(digests: np.ndarray, n_classes: int) -> str:
    """SHA-256 of the sorted row digests and the class count (the same rows in any order)."""
    h = hashlib.sha256(f"privcal-data-v1:{int(n_classes)}:".encode())
    h.update(np.sort(np.asarray(digests, dtype=np.uint64)).tobytes())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of the file ``path`` (read in 1 MiB blocks): the scores file a source ledger
    keeps the budget of (``privcal source init``)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

"""Deployed-path audits of federated conformal prediction: ``simulate("conformal-lac", ...)``
and the Flower ServerApp's round (``privcal federate --method conformal-lac``).

Relation: user-level add/remove of one client, ``K = 2`` declared clients. ``D``: client 1
holds :data:`ROWS` rows, client 2 is enrolled without data; ``D'``: client 2 holds
:data:`HEAVY_ROWS` rows with the same logits ``(2, -2)`` and label 0, so all its scores fall in
one bin ``b`` of the public grid. One round, ``epsilon = 1``, ``delta = 1e-5``, the server's
noise (``aggregation="trusted"``: under ``"distributed"`` the secure sum's value bound ``r``
already refuses an uncapped upload); the audit reads the released count ``counts_[b]`` in tail
events at a pilot's deciles. With the row cap client 2 moves that count by ``r`` (the
sensitivity); a client that skips the cap and the clip moves it by :data:`HEAVY_ROWS` (planted:
``no-row-cap``).

The Flower audit (``flower-server-round-conformal-lac``) is ``flower-server-round``
(:func:`~privcal.audits.federated.flower_round_audit`) for this method, on the same two clients
(the real ClientApp handler capping each one's rows with a seed of its own); D: client 2
connected but not replying.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from privcal.audits._registry import AuditReport, audit_release, draws, register, tail_events
from privcal.audits.plants import Plant, patched
from privcal.federated.methods import conformal as conformal_module
from privcal.federated.payloads import SCORE_HISTOGRAM

__all__: list[str] = []

EPSILON = 1.0
DELTA = 1e-5
ROWS = 20
HEAVY_ROWS = 60
LOGIT = 2.0
NEIGHBOURS = (
    f"K = 2 declared clients; D: client 1 ({ROWS} rows) and client 2 enrolled without data; D': "
    f"client 2 holds {HEAVY_ROWS} rows of label 0 at logits ({LOGIT:g}, {-LOGIT:g}), all in one "
    "bin (its capped histogram: r rows there)"
)


def _data() -> tuple[np.ndarray, np.ndarray, int]:
    """Client 1's rows (alternating labels at logits +-0.5), then client 2's; the bin ``b``."""
    y1 = np.arange(ROWS) % 2
    z1 = np.where(np.eye(2, dtype=bool)[y1], 0.5, -0.5)
    z2 = np.tile([LOGIT, -LOGIT], (HEAVY_ROWS, 1))
    z, y = np.vstack([z1, z2]), np.concatenate([y1, np.zeros(HEAVY_ROWS, dtype=np.int64)])
    score = 1.0 / (1.0 + np.exp(2.0 * LOGIT))  # LAC: 1 - p_0 at (LOGIT, -LOGIT)
    edges = conformal_module.FedConformalLAC().edges
    return z, y, int(np.searchsorted(edges, score, side="left")) - 1


def _audit(runs: int, alpha: float) -> AuditReport:
    from privcal.federated import simulate

    z, y, b = _data()

    def call(side: int) -> Any:
        from privcal.conformal import FullSetWarning

        parts = [np.arange(ROWS), np.arange(ROWS, len(y)) if side else np.array([], np.int64)]
        with warnings.catch_warnings():  # the audit reads the released counts, full sets or not
            warnings.simplefilter("ignore", FullSetWarning)
            return simulate(
                "conformal-lac",
                z,
                y,
                parts,
                rounds=1,
                epsilon=EPSILON,
                delta=DELTA,
                seed=0,
                aggregation="trusted",
            )[0]

    draw = draws(lambda side: call(side).counts_[b])

    return audit_release(
        "simulate-conformal-lac",
        f'simulate("conformal-lac", logits, labels, parts, rounds=1, epsilon={EPSILON:g}, '
        f"delta={DELTA:g}, aggregation='trusted').counts_[b]",
        NEIGHBOURS,
        draw,
        call(0).privacy_report_,
        runs=runs,
        alpha=alpha,
        events=tail_events(draw, runs),
    )


def _no_row_cap() -> Any:
    """A client that keeps all its rows and sends its histogram unclipped."""
    return patched(
        (conformal_module, "cap_rows", lambda n_rows, cap, seed: np.arange(n_rows)),
        (conformal_module.FedConformal, "clip", lambda self, payload, dp: payload),
    )


_NO_ROW_CAP = Plant("a client skips the row cap and the clip", _no_row_cap, 300)

# runs: a capped client moves the count by r = 5 against a noise std of about 20; the uncapped
# one by 60 (three noise stds): 300 runs separate it beyond the claim (600 default runs: about
# 2 s on the 2-core build machine, up to 30 s under load).
register(
    "simulate-conformal-lac",
    summary=(
        "simulate('conformal-lac', aggregation='trusted') with DP, K vs K+1 clients "
        "(user-level add/remove)"
    ),
    runs=600,
    delta=DELTA,
    plants={"no-row-cap": _NO_ROW_CAP},
    measurements=(SCORE_HISTOGRAM,),
)(_audit)


def _flower_replies(cfg: dict[str, Any], state: dict[str, np.ndarray], folder: Path) -> list[Any]:
    """Both clients' replies to round 1 (:func:`_data`'s rows), from the real ClientApp handler."""
    from privcal.audits.federated import _node_replies

    z, y, _ = _data()
    clients = [(z[:ROWS], y[:ROWS]), (z[ROWS:], y[ROWS:])]
    return _node_replies(cfg, state, folder, clients)


def _flower_audit(runs: int, alpha: float) -> AuditReport:
    """One round of the ServerApp's release on 1 vs 2 client replies, the released count
    ``counts_[b]`` read in tail events (:func:`~privcal.audits.federated.flower_round_audit`)."""
    from privcal.audits.federated import flower_round_audit

    b = _data()[2]
    return flower_round_audit(
        "flower-server-round-conformal-lac",
        "conformal-lac",
        _flower_replies,
        lambda sets: float(sets.counts_[b]),
        "counts_[b]",
        NEIGHBOURS.replace("enrolled without data", "connected but not replying"),
        runs,
        alpha,
        tail=True,
    )


# runs: as simulate-conformal-lac's (the same release, noise and neighbours); the no-row-cap
# plant here patches the ClientApp's own client step
register(
    "flower-server-round-conformal-lac",
    summary=(
        "the Flower ServerApp's release of one DP round of conformal-lac, K vs K+1 client replies"
    ),
    runs=600,
    extra="federated",
    delta=DELTA,
    plants={"no-row-cap": _NO_ROW_CAP},
    measurements=(SCORE_HISTOGRAM,),
)(_flower_audit)

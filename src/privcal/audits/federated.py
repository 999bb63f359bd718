"""Deployed-path audits of federated calibration (the ``federated`` extra for the Flower audit).

Relation audited: user-level add/remove of one client, the federation's declared size ``K``
fixed (public). Every audit compares

* ``D``: a federation of ``K = 2`` enrolled clients of which only the first holds data (the
  second is absent: an empty partition in :func:`~privcal.federated.simulate`, a node that does
  not reply to the Flower server), and
* ``D'``: the same federation where the second client holds worst-case data,

so ``D`` has one participating client and ``D'`` two. One round, ``epsilon = 1``,
``delta = 1e-5``, default noise (:class:`~privcal.privacy.SecureNoise`); the claim is read from
the run's own ``privacy_report_``.

FedTemp, federated Newton (the default, ``simulate-fedtemp``): the second client's gradient and
curvature sums exceed the clip bounds (passed explicitly, ``grad_clip = hess_clip = 1``, as a
user may), so its clipped payload moves both released sums by the full sensitivity. What this
catches: a client that does not clip (its gradient sum is about 30 times ``C_g``) or noise
drawn from a seed reused by every run (``tests/audits/test_deployed_audits_federated.py``
plants both).

FedTemp, parameter averaging (``simulate-fedtemp-averaging``): the first client's data makes its
update go as far up as clipping allows (under-confident, mostly right: a small ``T``), the
second's as far down (over-confident, often wrong: a large ``T``), so the two clipped updates
differ by ``2 C``. With the fixed public denominator ``p K`` (``= 2`` here) both neighbours'
releases have noise std ``C s / 2``; dividing by the *observed* number of clients (1 on ``D``,
2 on ``D'``) doubles the noise std on ``D``, which the audit's tail events see far beyond
``epsilon = 1`` (planted in the tests).

FedVector, FedMatrix and the binning methods (``simulate-fedvector`` ...): client 2 holds
rows that put its clipped contribution where one released value reads it: rows of class 1 with
logits ``(10, 0)`` move the summed gradient along ``w_0`` by ``C_g`` (:data:`SCALING_ROWS`), rows
of class 0 at the probe fill one bin of the class-0 positive histogram up to ``C+``
(:data:`BIN_ROWS`). The audit reads that value (``coef_``, ``counts_``) in tail events at a
pilot's deciles, so noise shares drawn and dropped (the exact secure sum) separate the
neighbours completely (:func:`_simulate_audit`).

The Flower audit (``flower-server-round``) runs the ServerApp's default method (FedTemp,
Newton, with the run config's default clip rule ``C_g = 2 sqrt(200)``): its second client has
45 rows with logits ``+-9.5`` (within the bounded NLL's 20 nats) so that its gradient sum
(about 340) is clipped to ``C_g``.
The same audit covers Flower's Simulation Engine (``privcal federate simulate``,
``simulate_flower``): the engine runs these very ServerApp and ClientApp objects, and a
simulated node (a ``partition-id`` reading its rows from the run config's ``partitions``)
sends, array for array, the reply the audited handler sends for a node holding the same rows
(``tests/federated/test_federated_flower_simulation.py``); a full simulation run equals
:func:`~privcal.federated.simulate` with the same noise seed
(``tests/federated/test_flower_simulation.py``).
"""

from __future__ import annotations

import functools
import math
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privcal.audits._registry import AuditReport, audit_release, draws, register, tail_events
from privcal.audits.plants import (
    Plant,
    first_party_skips_share,
    patched,
    reused_seed,
    share_std_over_t,
    shares_sized_for_k,
)
from privcal.data.validation import ProbabilitiesAsLogitsWarning
from privcal.federated import simulation as simulation_module
from privcal.federated.methods import get_method
from privcal.federated.payloads import NEWTON_CURVATURE, NEWTON_GRADIENT

__all__: list[str] = []

EPSILON = 1.0
DELTA = 1e-5
ROUNDS = 1
ROWS = 20
#: The audited runs' ``simulate`` arguments besides the method, the data and the clients.
_RUN: dict[str, Any] = {"rounds": ROUNDS, "epsilon": EPSILON, "delta": DELTA}
#: The fixed input whose predicted probability summarises a calibrator (the audits of FedTemp's
#: averaging, FedOPVector and FedCal), and the row the binning audits' client 2 holds.
PROBE = np.array([[1.0, 0.0]])
#: Events of a probability summary, fixed in advance: 20 buckets of width 0.05.
PROBABILITY_EVENTS = np.linspace(0.0, 1.0, 21)[1:-1]

NEIGHBOURS = (
    "K = 2 declared clients; D: client 1 (under-confident, mostly right: clipped update +C) and "
    "an absent client 2; D': client 2 added (over-confident, often wrong: clipped update -C)"
)
NEWTON_NEIGHBOURS = (
    "K = 2 declared clients; D: client 1 (under-confident, mostly right) and an absent client 2; "
    "D': client 2 added (over-confident, often wrong; federated Newton: its gradient and "
    "curvature sums clipped to L2 norms C_g and C_h)"
)
#: Client 2 of the FedVector and FedMatrix audits: ``SCALING_ROWS`` rows of class 1 with logits
#: ``(SCALING_LOGIT, 0)``. At the identity map each row's residual is ``p - e_1 = (1, -1)`` up to
#: ``e^-10``, so its gradient lies on ``w_0`` (``z_0 = 10``, vector scaling; ``W_00`` and
#: ``-W_10``, matrix scaling) and on the two intercepts (``+-1``): a summed gradient of norm
#: 303 (vector) or 426 (matrix), clipped to the default ``C_g`` (42.4, 283), 99% (70%) of it on
#: ``w_0`` (``W_00``); the curvature (``q = p (1 - p) = 4.5e-5`` a row) stays near 0, and the
#: NLL of 10 nats is within the bounded NLL's 20, so every row counts.
SCALING_LOGIT = 10.0
SCALING_ROWS = 30
SCALING_NEIGHBOURS = (
    "K = 2 declared clients; D: client 1 (under-confident, mostly right) and an absent client 2; "
    f"D': client 2 added ({SCALING_ROWS} rows of class 1 with logits ({SCALING_LOGIT:g}, 0): its "
    "gradient sum, on the weights of z_0 and the intercepts, clipped to L2 norm C_g, its "
    "curvature about 0)"
)
#: Client 2 of the binning audits: ``BIN_ROWS`` rows of class 0 at :data:`PROBE`. Its positive
#: histogram of class 0 holds them all in the probe's bin, a row of L2 norm 20 clipped to the
#: default ``C+ = 10``; its negative histogram of class 1 (20 in one bin) is within ``C- = 50``.
BIN_ROWS = 20
BINNING_NEIGHBOURS = (
    "K = 2 declared clients; D: client 1 (under-confident, mostly right) and an absent client 2; "
    f"D': client 2 added ({BIN_ROWS} rows of class 0 at the probe logits (1, 0): its class-0 "
    "positive histogram all in the probe's bin, clipped to L2 norm C+)"
)
#: Method parameters of the audited calls: Newton FedTemp with clip bounds its data exceeds.
PARAMS: dict[str, dict[str, Any]] = {"fedtemp": {"grad_clip": 1.0, "hess_clip": 1.0}}
#: Client 2 of the Flower audit: ``FLOWER_ROWS`` rows with logits +-``FLOWER_LOGIT``, 60% right.
#: Each wrong row adds about ``2 x 9.5 = 19`` to the gradient sum, about 340 in all > C_g = 28.3,
#: and its NLL (about 19) stays within the bounded NLL's 20 nats, so it counts (with logits
#: +-20 the wrong rows' NLL of 40 would be left out, as the central fit leaves them out).
FLOWER_LOGIT = 9.5
#: The measurements of a federated Newton round (FedTemp's default update).
_NEWTON = (NEWTON_GRADIENT, NEWTON_CURVATURE)
FLOWER_ROWS = 45


def _client(rows: int, logit: float, right: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` two-class rows with logits ``(+-logit, -+logit)``; the first ``right`` are right."""
    y = np.arange(rows) % 2
    top = np.where(np.arange(rows) < right, y, 1 - y)
    return np.where(np.eye(2, dtype=bool)[top], logit, -logit), y


def _data(method: str = "fedtemp") -> tuple[np.ndarray, np.ndarray]:
    """Client 1's rows, then client 2's worst-case rows for ``method`` (two classes).

    Client 1: logits +-0.2, 80% right: its NLL-optimal inverse temperature is about 3.5 (update
    +2.5 from 1, clipped to +C). Client 2, FedTemp and the averaging methods: logits +-2, 60%
    right: about 0.1 (update -0.9, clipped to -C). Both optima are interior, so the local Newton
    fits converge quickly. For Newton at ``beta = 1``: client 1 sends about (-1.6, 0.8), client
    2 about (+30, 5.7) (+-2); the Flower audit's client 2 (:data:`FLOWER_ROWS`) about (+340, 0).
    FedVector and FedMatrix: client 2 of :data:`SCALING_ROWS`; the binning methods: of
    :data:`BIN_ROWS`.
    """
    z1, y1 = _client(ROWS, 0.2, int(0.8 * ROWS))
    if method in ("fedvector", "fedmatrix"):
        z2 = np.tile([SCALING_LOGIT, 0.0], (SCALING_ROWS, 1))
        y2 = np.ones(SCALING_ROWS, dtype=np.int64)
    elif method.startswith(("fedbin", "fedbbq")):
        z2, y2 = np.repeat(PROBE, BIN_ROWS, axis=0), np.zeros(BIN_ROWS, dtype=np.int64)
    else:
        z2, y2 = _client(ROWS, 2.0, int(0.6 * ROWS))
    return np.vstack([z1, z2]), np.concatenate([y1, y2])


def _parts(side: int, n: int = 2 * ROWS) -> list[np.ndarray]:
    """Client 1 holds the first :data:`ROWS` of ``n`` rows; client 2 the rest on ``D'``
    (``side = 1``), nothing on ``D``."""
    client2 = np.arange(ROWS, n) if side else np.array([], dtype=np.int64)
    return [np.arange(ROWS), client2]


def _temperature(cal: Any) -> float:
    """FedTemp's released temperature before its noise-dominance fallback to T = 1
    (``release_temperature_``): the fallback is post-processing, so a claim that holds for the
    value before it holds after, and the value before it keeps what a planted defect changes
    (after the fallback most runs of these small federations read T = 1)."""
    return float(getattr(cal, "release_temperature_", cal.temperature_))


def _probe_probability(cal: Any) -> float:
    """P(class 0 | :data:`PROBE`)."""
    with warnings.catch_warnings():  # PROBE is a logit row that happens to sum to 1
        warnings.simplefilter("ignore", ProbabilitiesAsLogitsWarning)
        return float(cal.predict_proba(PROBE)[0, 0])


def _first_weight(cal: Any) -> float:
    """The released ``w_0``: FedVector's ``coef_[0]``, FedMatrix's ``coef_[0, 0]``."""
    return float(np.ravel(cal.coef_)[0])


def _probe_bin_count(cal: Any) -> float:
    """The released (noisy) positive count of class 0 in :data:`PROBE`'s bin
    (``counts_[0, 0, b]``, FedBin's and FedBBQ's fitted state)."""
    from privcal.metrics.statistics import bin_indices, softmax

    counts = np.asarray(cal.counts_, dtype=np.float64)
    b = int(bin_indices(softmax(PROBE)[:, 0], counts.shape[-1])[0])
    return float(counts[0, 0, b])


#: Per method: the released value an audit reads, as written in its report, and its neighbours.
#: Methods not listed read P(class 0 | probe) in :data:`PROBABILITY_EVENTS`.
READS: dict[str, tuple[Callable[[Any], float], str, str]] = {
    "fedtemp": (_temperature, "release_temperature_", NEWTON_NEIGHBOURS),
    "fedtemp-averaging": (_temperature, "release_temperature_", NEIGHBOURS),
    "fedvector": (_first_weight, "coef_[0]", SCALING_NEIGHBOURS),
    "fedmatrix": (_first_weight, "coef_[0, 0]", SCALING_NEIGHBOURS),
    **{
        m: (_probe_bin_count, "counts_[0, 0, bin of the probe]", BINNING_NEIGHBOURS)
        for m in ("fedbin", "fedbbq", "fedbbq-all", "fedbbq-changed")
    },
}


def _simulate_audit(
    method: str, runs: int, alpha: float, aggregation: str | None = None
) -> AuditReport:
    """``simulate(method, ...)`` on ``D`` and ``D'`` (:func:`_data`), one released value read.

    Read (:data:`READS`, module docstring): FedTemp's temperature, in buckets at a pilot's
    quantiles (:func:`~privcal.audits._registry.audit_release`'s default); the value client 2
    moves by its whole clip bound (FedMatrix: ``0.7 C_g``, the rest on ``-W_10`` and the
    intercepts), in tail events at a pilot's deciles
    (:func:`~privcal.audits._registry.tail_events`): a release whose noise is missing or too
    small moves the read's whole tail. (The probe's
    probability does not see a missing noise here: after one round the step of FedVector and
    FedMatrix is damped by a curvature floor set by the noise, so it moves P(class 0 | probe) by
    0.001, and a binning bin whose count is below the noise keeps the model's probability.)
    The others (FedOPVector, FedCal and the averaging FedTemp, whose one-round updates move it)
    read P(class 0 | :data:`PROBE`) in fixed buckets 0.05 wide, without pilot runs.
    """
    from privcal.federated import simulate

    z, y = _data(method)
    read, what, neighbours = READS.get(
        method, (_probe_probability, "predict_proba(probe)[0, 0]", NEIGHBOURS)
    )
    params = dict(PARAMS.get(method, {}))
    if aggregation is not None:  # None: simulate's own default, as a user calls it
        params["aggregation"] = aggregation

    def call(side: int) -> Any:
        from privcal.conformal import FullSetWarning
        from privcal.private import NoiseDominatedWarning

        with warnings.catch_warnings():  # FedTemp's fallback, full conformal sets: the audit
            warnings.simplefilter("ignore", NoiseDominatedWarning)  # reads the release before
            warnings.simplefilter("ignore", FullSetWarning)
            return simulate(method, z, y, _parts(side, len(y)), **_RUN, **params)[0]

    draw = draws(lambda side: read(call(side)))

    if method.startswith("fedtemp"):
        events: Any = None
    elif method in READS:
        events = tail_events(draw, runs)
    else:
        events = PROBABILITY_EVENTS
    extra = "".join(f", {k}={v!r}" for k, v in params.items())
    return audit_release(
        f"simulate-{method}" + (f"-{aggregation}" if aggregation else ""),
        f'simulate("{method}", logits, labels, parts, rounds={ROUNDS}, epsilon={EPSILON:g}, '
        f"delta={DELTA:g}{extra}).{what}",
        neighbours,
        draw,
        call(0).privacy_report_,
        runs=runs,
        alpha=alpha,
        events=events,
    )


def _register_simulate(
    method: str, runs: int, slow: bool, plants: dict[str, Plant], aggregation: str | None = None
) -> None:
    suffix = f"-{aggregation}" if aggregation else ""
    how = f", aggregation='{aggregation}'" if aggregation else ""
    register(
        f"simulate-{method}{suffix}",
        summary=f"simulate('{method}'{how}) with DP, K vs K+1 clients (user-level add/remove)",
        runs=runs,
        slow=slow,
        delta=DELTA,
        plants=plants,
        measurements=get_method(method).payload_measurements(),
    )(functools.partial(_simulate_audit, method, aggregation=aggregation))


# ------------------------------------------------------------------ planted defects
def _shares_dropped() -> Any:
    """Every client's noise share is drawn and dropped: the uploads carry the encoded payloads
    alone, so the secure sum is the exact sum."""
    from privcal.privacy.distributed import ShareLaw

    def sample(self: Any, noise: Any, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, dtype=np.int64)

    return patched((ShareLaw, "sample", sample))


def _observed_k() -> Any:
    """Issue 12's defect: DP-FedAvg divides the noisy sum by the observed number of clients."""
    from privcal.federated.methods.newton import ScalingMethod

    real = ScalingMethod.server_step

    def server_step(
        self: Any, state: Any, total: Any, n: int, dp: Any = None, denominator: Any = None
    ) -> Any:
        return real(self, state, total, n, dp=dp, denominator=float(n) if dp else denominator)

    return patched((ScalingMethod, "server_step", server_step))


def _unclipped() -> Any:
    """A client that skips clipping: its Newton payload leaves as computed."""
    from privcal.federated.methods.temperature import FedTemp

    return patched((FedTemp, "clip", lambda self, payload, dp: payload))


def _seeded_server_noise() -> Any:
    """The ServerApp draws its noise from SeededNoise(0) in every round of every run."""
    from privcal.federated.flower import task
    from privcal.privacy import SeededNoise

    return patched((task, "server_noise", lambda cfg, owner: SeededNoise(0)))


# runs: a dropped share or a reused seed makes each neighbour's output deterministic, and 100
# runs that separate completely show epsilon >= 1.6. The observed-K denominator doubles the noise
# std on D only: 2000 runs (epsilon_lower 1.4-2.0 measured); an unclipped gradient (30 C_g) moves
# T to its trust-region edge, which 300 runs see.
_DROPPED = Plant(
    "every client's noise share drawn and dropped (the exact sum)", _shares_dropped, 100
)
_SEEDED = Plant(
    "every run draws SeededNoise(0) (a hard-coded seed)", reused_seed(simulation_module), 100
)
_OBSERVED_K = Plant(
    "parameter averaging divides by the observed number of clients, not the declared p K",
    _observed_k,
    2000,
)
_UNCLIPPED = Plant("a client sends its Newton payload unclipped", _unclipped, 300)

# runs: parameter averaging's audit must see an observed-K denominator (2000 runs: about 5-8 s
# on the 2-core build machine; the planted defect gives epsilon >= 1.4). FedTemp's Newton audit
# draws two secure Gaussians per run. The others draw more noise per run with SecureNoise or fit
# more locally, so they run the fewest runs the run-size rule allows (150: the largest bound
# they can report is 2.05, twice the claim; FedVector, FedMatrix and the binning methods draw
# 50 pilot runs a side more for their tail events): L-BFGS fits take 5-30 ms a run, the Newton
# and binning runs 2-4 ms, FedCal's MLP of about 4.4k weights about 0.3-0.4 s (its audit takes
# minutes: slow tier, and `privcal audit`).
for _method, _runs, _slow, _plants in (
    ("fedtemp", 1000, False, {"reused-seed": _SEEDED}),
    ("fedtemp-averaging", 2000, False, {"shares-dropped": _DROPPED}),
    ("fedvector", 150, False, {"shares-dropped": _DROPPED}),
    ("fedopvector", 150, False, {"shares-dropped": _DROPPED}),
    ("fedmatrix", 150, False, {"shares-dropped": _DROPPED}),
    ("fedcal", 150, True, {"shares-dropped": _DROPPED}),
    ("fedbin", 150, False, {"shares-dropped": _DROPPED}),
    ("fedbbq", 150, False, {"shares-dropped": _DROPPED}),
    ("fedbbq-all", 150, False, {"shares-dropped": _DROPPED}),
    ("fedbbq-changed", 150, False, {"shares-dropped": _DROPPED}),
):
    _register_simulate(_method, _runs, _slow, _plants)
# the trusted server (aggregation="trusted", seed 003's protocol) is a path users call too; its
# planted server-side defects (an observed-K denominator, an unclipped client) are caught here
_register_simulate("fedtemp", 1000, False, {"unclipped": _UNCLIPPED}, "trusted")
_register_simulate("fedtemp-averaging", 2000, False, {"observed-k": _OBSERVED_K}, "trusted")


#: Clients of the aggregator-view audit: the audited one and ``VIEW_CLIENTS - 1`` colluders.
#: Shares sized for ``K`` instead of ``t`` shrink the honest share's std ``sqrt(K / t)``-fold
#: (8-fold here), which is what makes that defect visible in a few hundred runs.
VIEW_CLIENTS = 64
#: The threshold the audited run declares: its report claims the guarantee with up to
#: ``VIEW_CLIENTS - VIEW_THRESHOLD`` clients revealing their shares.
VIEW_THRESHOLD = 1
#: Levels ``a`` of the fixed tail events ``u > a`` and ``u <= -a`` of the run's privacy loss
#: ``u`` (both blocks), in units of its claimed std: a noise std ``f`` times smaller than
#: claimed is seen best near ``a = 2.5 / f`` (``f = 8``: about 0.3), so the levels span
#: ``f`` from 2 to beyond 16; ``a = 0`` splits the two neighbours' means.
VIEW_LEVELS = (0.0, 0.125, 0.25, 0.5, 1.0)


def _view_neighbours(t: int) -> str:
    return (
        f"K = {VIEW_CLIENTS} declared clients, t = {t}; D: client 0 enrolled without data (it "
        "uploads a zero payload and its share), client 1 under-confident, mostly right, "
        f"clients 2-{VIEW_CLIENTS - 1} enrolled without data; D': client 0 holds "
        "over-confident, often wrong rows (federated Newton: its gradient and curvature sums "
        f"clipped to L2 norms C_g and C_h); clients 1-{VIEW_CLIENTS - t} collude with the server"
    )


def _view_parts(side: int) -> list[np.ndarray]:
    empty = np.array([], dtype=np.int64)
    audited = np.arange(ROWS, 2 * ROWS) if side else empty
    return [audited, np.arange(ROWS)] + [empty] * (VIEW_CLIENTS - 2)


@dataclass(frozen=True)
class ViewLoss:
    """The Gaussian privacy loss of the honest residuals of one round, at the claimed std.

    Block ``b`` (one secure sum: FedTemp's gradient, then its curvature) has residual mean
    ``m_b`` on ``D`` and ``m'_b`` on ``D'`` (grid units) and claimed std ``sigma_b`` (the std
    its plan gives the sum of ``t`` shares). Its log-likelihood ratio of ``D'`` against ``D`` at
    that std is ``L_b = <x_b - (m_b + m'_b) / 2, (m'_b - m_b) / sigma_b^2>``, distributed
    ``N(-+mu_b^2 / 2, mu_b^2)`` on ``D`` / ``D'`` when the claim holds, with
    ``mu_b^2 = |m'_b - m_b|^2 / sigma_b^2``. The blocks' noises are independent, so the round's
    loss is ``L = sum_b L_b`` with ``mu^2 = sum_b mu_b^2``: for a Gaussian mechanism this is the
    whole zCDP budget the run's report composes (``rho = mu^2 / 2`` up to rounding).

    Every field is fixed before the audited runs (from the public plans and the two neighbour
    datasets), so :meth:`__call__` is a fixed post-processing of the view.
    """

    low: tuple[np.ndarray, ...]
    high: tuple[np.ndarray, ...]
    sigma: tuple[float, ...]

    def __call__(self, residuals: Sequence[np.ndarray]) -> np.ndarray:
        """``(u_1, ..., u_B, u)``: each block's loss ``L_b / mu_b`` and the round's ``L / mu``
        (each ``N(-+mu / 2, 1)`` on ``D`` / ``D'`` under the claim)."""
        losses, scales = [], []
        for x, m0, m1, s in zip(residuals, self.low, self.high, self.sigma, strict=True):
            w = (m1 - m0) / (s * s)
            losses.append(float(w @ (np.asarray(x, dtype=np.float64) - (m0 + m1) / 2.0)))
            scales.append(float(w @ (m1 - m0)))
        pairs = zip(losses, scales, strict=True)
        per_block = [lo / math.sqrt(v) if v > 0 else 0.0 for lo, v in pairs]
        total = math.sqrt(sum(scales))
        return np.array([*per_block, sum(losses) / total if total > 0 else 0.0])


def _view_loss(dp: Any, groups: Sequence[Any], z: np.ndarray, y: np.ndarray) -> ViewLoss:
    """:class:`ViewLoss` of round 1 of the audited run, from its public plans (``dp.plan``).

    The residual is client 0's upload: its clipped payload at round 1's state (the method's
    public initial parameters), encoded without bias, plus its share. On ``D`` that payload is
    zero (an enrolled client without rows), on ``D'`` it is the real client step on its rows,
    clipped as :func:`~privcal.federated.simulate` clips it.
    """
    from privcal.federated import get_method

    fm = get_method("fedtemp", **PARAMS["fedtemp"])
    state = fm.init(2)
    shape = fm.payload_shape(2)

    def payload(side: int) -> np.ndarray:
        rows = _view_parts(side)[0]
        if rows.size == 0:
            return np.zeros(int(np.prod(shape)))
        return np.asarray(fm.clip(fm.client_step(state, z[rows], y[rows]), dp)).reshape(-1)

    low, high, sigma = [], [], []
    for g in groups:
        plan = dp.plan(g)
        s = plan.encoding.scale
        low.append(s * payload(0)[g.index])
        high.append(s * payload(1)[g.index])
        sigma.append(float(plan.law.parameter))
    return ViewLoss(tuple(low), tuple(high), tuple(sigma))


def _tail(column: int, level: float, above: bool) -> Callable[[np.ndarray], np.ndarray]:
    """The event ``read > level`` (``above``) or ``read <= level`` on one column of the reads."""
    if above:
        return lambda s: np.asarray(s)[:, column] > level
    return lambda s: np.asarray(s)[:, column] <= level


def _aggregator_view_audit(runs: int, alpha: float, threshold: int | None) -> AuditReport:
    """FedTemp with DP and distributed aggregation over ``K = 64`` clients with ``threshold=1``
    (or, with ``threshold=None``, simulate's default ``t = K - max(1, K // 5) = 52``), read where
    the server reads it, with the worst case its report allows.

    At the default threshold the colluders are clients ``1 .. K - t`` (client 1, the one with
    rows, among them) and the ``t - 1`` honest others upload a zero payload and their shares, so
    the residual holds exactly ``t`` shares; everything below holds with ``t`` for ``1``.

    Scenario. The run's report claims ``(epsilon, delta) = (1, 1e-5)`` for the whole run against
    a server joined by up to ``S - t = 63`` clients that reveal their shares. The audit plays
    that adversary: clients 1-63 collude, and the server subtracts their uploads from each
    secure sum of the run modulo ``2^64`` (:func:`privcal.audits.private.honest_residual`),
    leaving the audited client 0's upload, which must carry each release's whole noise. The
    colluders' uploads are read where the server's secure sum receives them
    (``DPConfig.secure_total``, wrapped for the run: the colluding clients hand over what they
    sent; honest uploads are not read). The neighbour removes client 0's rows while it stays
    enrolled (it then uploads a zero payload with its share:
    :func:`~privcal.federated.simulation._round_total`). What departs from a default
    call defines that worst case: ``threshold=1`` (one honest share: the most collusion any
    threshold allows), ``K = 64`` (shares sized for ``K`` instead of ``t`` cut the honest
    share's std ``sqrt(K / t) = 8``-fold; with the default ``t = K - max(1, K // 5)`` they cost
    at most ``K / t = 1.25`` in variance) and ``rounds=1``, so that the run's releases are the
    two secure sums of one round (the gradient and the curvature sums, the budget split 0.8 /
    0.2 between them) and the audit reads all of them.

    Read. Each run gives the residuals of both secure sums, read through their Gaussian
    privacy loss at the claimed std (:class:`ViewLoss`, means from the two neighbour datasets
    and the public plans): ``(u_g, u_h, u)``, the gradient's, the curvature's and the round's
    loss in units of its claimed std. ``u`` is the likelihood ratio test of ``D`` against
    ``D'`` for the whole claim: under it ``u`` is ``N(-+mu / 2, 1)`` with ``mu`` about 0.25 at
    ``epsilon = 1``, a noise ``f`` times smaller makes it ``N(-+mu / 2, 1 / f^2)``. Events,
    fixed before the audited runs: ``u > a`` and ``u <= -a`` for ``a`` in :data:`VIEW_LEVELS`,
    and both sides of a pilot's median (``max(50, runs // 5)`` runs per neighbour, then
    discarded, as :func:`~privcal.audits._registry.audit_release` does) of each of the three
    reads. Each read is a fixed function of what the server and the colluders see, so a correct
    mechanism fails with probability at most ``alpha``.

    Caught (``tests/audits/test_deployed_audits_distributed.py``): shares sized for ``K``
    instead of ``t`` (the tails of ``u``), a client uploading its encoded payload without its
    share (the gradient's median: its residual no longer varies), every share drawn from one
    reused seed (the medians: every run's view is the same).
    """
    from privcal.audits.private import honest_residual
    from privcal.federated import dp as dp_module
    from privcal.federated import simulate
    from privcal.private import NoiseDominatedWarning

    z, y = _data()
    t = dp_module.default_threshold(VIEW_CLIENTS) if threshold is None else threshold
    given: dict[str, Any] = {} if threshold is None else {"threshold": threshold}
    seen: list[tuple[Any, list[Any], list[Any]]] = []
    real = dp_module.DPConfig.secure_total

    def secure_total(self: Any, uploads: Any, groups: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((self, list(groups), list(uploads)))
        return real(self, uploads, groups, *args, **kwargs)

    def call(side: int) -> Any:
        seen.clear()
        with warnings.catch_warnings():  # FedTemp's fallback to T = 1 acts after the view
            warnings.simplefilter("ignore", NoiseDominatedWarning)
            return simulate(
                "fedtemp", z, y, _view_parts(side), **_RUN, **given, **PARAMS["fedtemp"]
            )[0]

    def residuals(cal: Any) -> list[np.ndarray]:
        _, groups, uploads = seen[0]
        colluders = [u for u in uploads[1 : 1 + VIEW_CLIENTS - t] if u is not None]
        return [
            honest_residual(cal.aggregator_views_[j], [u[j] for u in colluders])
            for j in range(len(groups))
        ]

    with patched((dp_module.DPConfig, "secure_total", secure_total)):
        first = call(0)
        dp, groups, _ = seen[0]
        loss = _view_loss(dp, groups, z, y)

        draw = draws(lambda side: loss(residuals(call(side))))

        u = len(groups)  # the round's loss: the read after the blocks'
        events = [_tail(u, a, True) for a in VIEW_LEVELS]
        events += [_tail(u, -a, False) for a in VIEW_LEVELS]
        k = max(50, runs // 5)
        median = np.median(np.vstack([draw(0, k), draw(1, k)]), axis=0)
        for r, m in enumerate(median):
            events += [_tail(r, float(m), True), _tail(r, float(m), False)]
        shown = "" if threshold is None else f", threshold={threshold}"
        return audit_release(
            "simulate-fedtemp-aggregator" + ("-default-t" if threshold is None else ""),
            f'simulate("fedtemp", logits, labels, parts, rounds={ROUNDS}, epsilon={EPSILON:g}, '
            f"delta={DELTA:g}{shown}, grad_clip=1.0, hess_clip=1.0)."
            "aggregator_views_ (the secure sums of round 1's gradients and curvatures that the "
            f"server sees) less the uploads of the colluding clients 1-{VIEW_CLIENTS - t}, read "
            "through their Gaussian privacy loss at the claimed std",
            _view_neighbours(t),
            draw,
            first.privacy_report_,
            runs=runs,
            alpha=alpha,
            events=events,
        )


#: Plants of the server-view audits. Shares sized for K (8-fold std) are seen in the tails of
#: the round's loss at 500 runs (epsilon_lower 1.4-1.5 measured); a client without its share or
#: a reused seed leave a deterministic residual: 100 runs. At the default t = 52, a share std of
#: sigma / t instead of sigma / sqrt(t) leaves sqrt(52) = 7.2-fold less noise than claimed: the
#: round's loss u is then N(-+0.125, 0.14^2) where the claim allows N(-+0.125, 1), which the
#: tails at 0.125-0.25 see in 500 runs (epsilon_lower 1.25-1.59 measured in 4 audits, 25-35 s);
#: 600 for a margin. Default runs of the default-t audit: 150, the fewest the run-size rule
#: allows.
_VIEW_SKIP = Plant(
    "the audited client uploads its encoded payload without its share (a loop from client 1)",
    first_party_skips_share,
    100,
)
register(
    "simulate-fedtemp-aggregator",
    summary="The server's view (the secure sum of discrete Gaussian shares) of simulate('fedtemp')"
    f" with DP and aggregation='distributed', K={VIEW_CLIENTS} clients, t={VIEW_THRESHOLD}, "
    f"{VIEW_CLIENTS - VIEW_THRESHOLD} colluding",
    runs=500,
    slow=True,
    events=16,
    delta=DELTA,
    measurements=_NEWTON,
    plants={
        "shares-sized-for-k": Plant(
            "each share's law built with K where the threshold t belongs", shares_sized_for_k, 500
        ),
        "party-skips-share": _VIEW_SKIP,
        "reused-seed": Plant(
            "every run's shares drawn from SeededNoise(0) (a hard-coded seed)",
            reused_seed(simulation_module),
            100,
        ),
    },
)(functools.partial(_aggregator_view_audit, threshold=VIEW_THRESHOLD))
register(
    "simulate-fedtemp-aggregator-default-t",
    summary="The server's view of simulate('fedtemp') with DP and aggregation='distributed', "
    f"K={VIEW_CLIENTS} clients, the default t=K-max(1,K//5), K-t colluding",
    runs=150,
    slow=True,
    events=16,
    delta=DELTA,
    measurements=_NEWTON,
    plants={
        "share-std-over-t": Plant(
            "each share's std is 1/t of one release's instead of 1/sqrt(t) (wrong for t > 1 only)",
            share_std_over_t,
            600,
        ),
    },
)(functools.partial(_aggregator_view_audit, threshold=None))


# ------------------------------------------------------------------------------- Flower
def _instruction(content: Any, node_id: int, message_type: str = "query") -> Any:
    """A message (``query``, or ``train`` as SecAgg+'s stages) from the server to ``node_id``,
    built without a running SuperLink."""
    from flwr.app import Message, Metadata

    meta = Metadata(
        run_id=1,
        message_id=f"audit-{node_id}",
        src_node_id=0,
        dst_node_id=node_id,
        reply_to_message_id="",
        group_id="1",
        created_at=0.0,
        ttl=3600.0,
        message_type=message_type,
    )
    # Flower builds instruction metadata from the running task's identity; with none running,
    # set it directly (Message's metadata= form, which its typed overloads do not list)
    return Message(content, metadata=meta)  # type: ignore[call-overload]


def _node_replies(
    cfg: dict[str, Any],
    state: dict[str, np.ndarray],
    folder: Path,
    clients: Sequence[tuple[np.ndarray, np.ndarray]],
) -> list[Any]:
    """The replies to round 1 of nodes ``1, 2, ...`` holding ``clients``' ``(logits, labels)``,
    from the real ClientApp handler."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict

    from privcal.federated.flower.client_app import query

    replies = []
    for node_id, (z, y) in enumerate(clients, start=1):
        path = folder / f"client{node_id}.npz"
        np.savez(path, logits=z, labels=y)
        arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in state.items()})
        msg = _instruction(
            RecordDict({"state": arrays, "config": ConfigRecord({**cfg, "round": 1})}), node_id
        )
        ctx = Context(
            run_id=1,
            node_id=node_id,
            node_config={"data": str(path)},
            state=RecordDict(),
            run_config=dict(cfg),  # the run configuration the SuperLink hands each node
        )
        replies.append(query(msg, ctx))
    return replies


def _client_replies(cfg: dict[str, Any], state: dict[str, np.ndarray], folder: Path) -> list[Any]:
    """Both clients' replies to round 1, from the real ClientApp handler."""
    clients = [
        _client(ROWS, 0.2, int(0.8 * ROWS)),
        _client(FLOWER_ROWS, FLOWER_LOGIT, int(0.6 * FLOWER_ROWS)),
    ]
    return _node_replies(cfg, state, folder, clients)


@register(
    "flower-server-round",
    summary="the Flower ServerApp's release of one DP round, K vs K+1 client replies",
    runs=2000,
    slow=False,
    extra="federated",
    delta=DELTA,
    measurements=_NEWTON,
    plants={
        # default C_g = 28.3, an unclipped sum of 340 against a noise std of 128 on the sum:
        # the audit's full 2000 runs
        "unclipped": Plant("a client sends its Newton payload unclipped", _unclipped, 2000),
        "seeded-server-noise": Plant(
            "the ServerApp draws SeededNoise(0) in every run", _seeded_server_noise, 100
        ),
    },
)
def flower_server_round(runs: int, alpha: float) -> AuditReport:
    """One round of FedTemp's release by the ServerApp (:func:`flower_round_audit`)."""
    return flower_round_audit(
        "flower-server-round",
        "fedtemp",
        _client_replies,
        _temperature,
        "temperature",
        NEWTON_NEIGHBOURS.replace("an absent client 2", "client 2 connected but not replying"),
        runs,
        alpha,
    )


def flower_round_audit(
    name: str, method: str, replies: Callable[[dict[str, Any], dict[str, np.ndarray], Path], list],
    read: Callable[[Any], float], what: str, neighbours: str, runs: int, alpha: float,
    tail: bool = False,
) -> AuditReport:  # fmt: skip
    """One round of the ServerApp's release (:func:`release_round`) of ``method`` on 1 vs 2
    client replies, ``read`` from the fitted release (``what``, as the report names it).

    ``replies(cfg, state, folder)`` gives both clients' replies to round 1 from the real
    ClientApp handler; the server side is the code path ``server_app.main`` runs for a round:
    the noise it builds from the run config (``server_noise``: SecureNoise by default),
    ``dp_from_config``, the declared cohort ``sample-rate * num-nodes`` and
    :func:`release_round`. The claim is the ServerApp's own report (:func:`run_report`).
    Events: buckets at a pilot's quantiles, or (``tail``) tail events at its deciles.
    """
    from privcal.federated.flower import server_app as srv
    from privcal.federated.flower.task import (
        DEFAULTS,
        dp_from_config,
        method_from_config,
        server_noise,
    )

    cfg = {**DEFAULTS, "method": method, "rounds": ROUNDS, "n-classes": 2, "num-nodes": 2}
    cfg.update(epsilon=EPSILON, delta=DELTA)
    fm = method_from_config(cfg)
    state0, shape = fm.init(2), fm.payload_shape(2)
    with tempfile.TemporaryDirectory(prefix="privcal-audit-") as tmp:
        sides = replies(cfg, state0, Path(tmp))
    sides = [sides[:1], sides]  # D: client 2 does not reply; D': it does

    def release(side: int) -> tuple[float, Any]:
        dp = dp_from_config(cfg, server_noise(cfg, "the privcal ServerApp"))
        state, _ = srv.release_round(
            fm, state0, sides[side], shape, 1, dp, srv.declared_cohort(cfg)
        )
        with warnings.catch_warnings():  # FedTemp's noise-dominance fallback warns
            warnings.simplefilter("ignore")
            return read(fm.calibrator(state, 2)), dp

    draw = draws(lambda side: release(side)[0])

    _, dp = release(0)
    return audit_release(
        name,
        f"privcal ServerApp, one round of {method} (epsilon={EPSILON:g}, delta={DELTA:g}, "
        f"noise='secure'): release_round(...) -> {what}",
        neighbours,
        draw,
        srv.run_report(fm, dp, 2, cfg),
        runs=runs,
        alpha=alpha,
        events=tail_events(draw, runs) if tail else None,
    )

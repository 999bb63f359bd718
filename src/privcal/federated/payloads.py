"""The measurements of the federated methods' payloads (user-level DP, seed 003).

A client's payload is clipped on the client (:meth:`FedMethod.clip
<privcal.federated.methods.FedMethod.clip>`) and the sampled clients' payloads are summed; the
server adds Gaussian noise to the sum (``aggregation="trusted"``) or the clients' discrete
Gaussian shares hold it (``"distributed"``), and the rounds compose in zCDP. Each block of the
sum the noise is calibrated to is one :class:`~privcal.privacy.measurement.Measurement` here:
the methods' noise groups (:meth:`FedMethod.noise_groups
<privcal.federated.methods.FedMethod.noise_groups>`) and the run's privacy report
(:func:`privcal.federated.dp.federated_report`) read their sensitivity from it. The neighbouring
relation is add/remove one **client** (all its rows): the unit is ``"user"``.
"""

from __future__ import annotations

from privcal.privacy.measurement import Measurement, register_measurement

__all__ = [
    "CLASS_HISTOGRAM_ROW",
    "NEWTON_CURVATURE",
    "NEWTON_GRADIENT",
    "SCORE_HISTOGRAM",
    "UPDATE",
    "clipped_sum_sensitivity",
]


def clipped_sum_sensitivity(clip: float) -> float:
    """L2 sensitivity of a sum of client payloads each clipped to L2 norm ``clip``.

    Privacy
    -------
    Add/remove one client (all its rows) adds or removes its own payload and nothing else: the
    sum moves by that payload, whose L2 norm the client clipped to at most ``clip`` before it
    left (:func:`privcal.federated.dp.clip_l2`, :func:`~privcal.federated.dp.clip_rows_l2`),
    whatever its rows: sensitivity C (the clip bound of the block).
    """
    return float(clip)


def _payload(name: str, statistic: str) -> Measurement:
    proof = "privcal.federated.payloads.clipped_sum_sensitivity"
    sens = clipped_sum_sensitivity
    m = Measurement(f"federated.{name}", statistic, "gaussian", "L2", sens, "C", proof, "user")
    return register_measurement(m)


#: Parameter averaging (seed 003 Alg. 2): the sum of the clients' updates, clipped to ``C``.
UPDATE = _payload(
    "update",
    "the sum of the sampled clients' parameter updates, each clipped to L2 norm C (parameter "
    "averaging, per round)",
)
#: Federated Newton: the sum of the clients' NLL gradients, clipped to ``C_g``.
NEWTON_GRADIENT = _payload(
    "newton_gradient",
    "the sum of the sampled clients' NLL gradients, each clipped to L2 norm C_g (federated "
    "Newton, per round)",
)
#: Federated Newton: the sum of the clients' curvature blocks, clipped to ``C_h``.
NEWTON_CURVATURE = _payload(
    "newton_curvature",
    "the sum of the sampled clients' NLL curvature blocks, each clipped to L2 norm C_h "
    "(federated Newton, per round)",
)
#: FedBin / FedBBQ: one class row of the summed positive (negative) histograms, each client's
#: row clipped to ``C+`` (``C-``); ``c`` rows make a block of L2 sensitivity ``sqrt(c) C+``.
CLASS_HISTOGRAM_ROW = _payload(
    "class_histogram_row",
    "one class row of the summed positive (negative) class histograms, each client's row "
    "clipped to L2 norm C+ (C-) (FedBin, FedBBQ, per round)",
)
#: Federated conformal (``"conformal-lac"``, ``"conformal-aps"``): the summed histogram of the
#: clients' conformity scores on the public grid, each client's at most ``r`` rows (L2 norm
#: ``<= r``, clipped to ``r``).
SCORE_HISTOGRAM = _payload(
    "score_histogram",
    "the sum of the clients' conformity-score histograms on a public grid, each of at most r "
    "rows and clipped to L2 norm r (federated conformal, per round)",
)

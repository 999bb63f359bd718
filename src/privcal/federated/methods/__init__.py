"""Federated calibration methods of seed 003 as pure client and server steps on arrays.

Modules: :mod:`~privcal.federated.methods.base` (the protocol, :class:`FedMethod`),
:mod:`~privcal.federated.methods.newton` (the scaling methods' clipping, noise and server
steps), :mod:`~privcal.federated.methods.temperature` (FedTemp),
:mod:`~privcal.federated.methods.affine` (FedVector, FedOPVector, FedMatrix),
:mod:`~privcal.federated.methods.mlp` (FedCal), :mod:`~privcal.federated.methods.binning`
(FedBin, FedBBQ) and :mod:`~privcal.federated.methods.registry` (the methods by name).

Each method is a small object with

* ``init(c) -> state``: the server's initial state (a dict of arrays);
* ``client_step(state, z, y) -> payload``: what one client computes on its own logits ``z`` and
  labels ``y`` (a float array of shape ``payload_shape(c)``), before clipping;
* ``clip(payload, dp)``: the client-side clipping of user-level DP;
* ``server_step(state, total, n, dp=None, denominator=None) -> state``: the server's update from
  the (secure) *sum* ``total`` of ``n`` accepted payloads; with ``dp`` it adds the Gaussian noise
  of :mod:`privcal.federated.dp` first;
* ``calibrator(state, c) -> Calibrator``: a fitted privcal calibrator;
* ``payload_bound(dp)`` and ``report_terms(dp, c, cohort)``: the largest entry of a clipped
  payload (SecAgg+ scaling) and what the run's privacy report says about the release.

The same functions run in :func:`privcal.federated.simulate` and in the Flower apps
(:mod:`privcal.federated.flower`), which is what makes their results identical. The calibrators
they produce live below this module (:mod:`privcal.federated.calibrators`,
:mod:`privcal.calibrators`); nothing there imports the methods.

Scaling, ``update="newton"`` (the default of FedTemp, FedVector and FedMatrix): federated Newton
on summed sufficient statistics. At the global parameters :math:`\\theta_t` client ``k``
returns the gradient :math:`g_k` and a curvature :math:`h_k` of the *summed* NLL of its rows
(:meth:`~privcal.federated.methods.newton.ScalingMethod.stats`); the server sums them and steps
:math:`\\theta_{t+1} = \\Pi(\\theta_t - H(\\sum_k h_k)^{-1} \\sum_k g_k)` with a trust region and
the projection :math:`\\Pi` onto the public parameter range. Without DP and with every client
in every round, :math:`\\sum_k g_k` and :math:`\\sum_k h_k` are the gradient and curvature of
the NLL of the union of the clients' rows, so the iteration is the central (damped) Newton
method and converges to the central fit. No average is taken, so no denominator (observed or
declared) enters. With DP
(:meth:`~privcal.federated.methods.newton.ScalingMethod.server_step`): each part is clipped on
the client (L2 bounds ``grad_clip``, ``hess_clip``), the server adds Gaussian noise to each
summed part (two mechanisms per round, the gradient getting the share ``grad_share`` of the
round's zCDP budget), averages the noisy curvature over the rounds so far (it changes slowly
and only sets the step length), floors it at twice its noise level, and releases the mean of
the iterates of the second half of the run (tail averaging: the iterates' noise is independent
across rounds).
FedVector and FedMatrix also add a ridge toward the identity map of the same size as the floor
(``dp_ridge``): where the noise dominates the data they stay near the uncalibrated model
instead of taking a random walk. Like their central twins they fit the bounded NLL: a client's
sums run over its rows whose NLL at the current parameters is at most ``NLL_BOUND``
(:func:`within_nll_bound`), and FedMatrix works on the floored logits of
:class:`~privcal.calibrators.MatrixScaling`.

Scaling, ``update="parameter-averaging"`` (seed 003 Alg. 2, DP-FedAvg, kept to reproduce the
paper): the payload is the update ``u_k = w_k - w_t`` of ``local_iters`` L-BFGS (or Newton,
for FedTemp) iterations on the local mean NLL started from ``w_t``. Non-DP:
``w_{t+1} = w_t + total / n``. DP: ``w_{t+1} = w_t + (total + N(0, (C s)^2)) / (p K)``, never
divided by the observed ``n`` (:func:`privcal.federated.dp.expected_cohort`). Under label skew
each client's local optimum is far from the global one and their average is not the central
fit (docs/federated.md has the numbers).

Binning (Alg. 1, :mod:`~privcal.federated.methods.binning`): the payload is the stacked class
histograms ``[P; N]`` (``2 x C x B``); the server accumulates the sums over rounds and builds
FedBin (bin frequencies) or FedBBQ (:func:`privcal.calibrators.binning.bbq_table`), optionally
weighted (Sec. 4.1, App. B.5), from the counts of :meth:`BinningMethod.counts
<privcal.federated.methods.binning.BinningMethod.counts>` (by default each bin shrunk toward the
model's own probability, ``prior="midpoint"`` seed 003's calibrators).
"""

from __future__ import annotations

from privcal._params import renamed_aliases
from privcal.federated.methods.affine import FedMatrix, FedOPVector, FedVector
from privcal.federated.methods.base import FedMethod
from privcal.federated.methods.base import State as State
from privcal.federated.methods.binning import BINNING_PRIORS as BINNING_PRIORS
from privcal.federated.methods.binning import PRIOR_NOISE_MULTIPLE as PRIOR_NOISE_MULTIPLE
from privcal.federated.methods.binning import FedBBQ, FedBin
from privcal.federated.methods.mlp import FedCal
from privcal.federated.methods.newton import UPDATES
from privcal.federated.methods.newton import within_nll_bound as within_nll_bound
from privcal.federated.methods.registry import METHODS, get_method
from privcal.federated.methods.temperature import FED_NOISE_Z as FED_NOISE_Z
from privcal.federated.methods.temperature import (
    FedTemp,
    noise_dominance,
    temperature_moments,
    temperature_newton,
)

__all__ = [
    "METHODS",
    "UPDATES",
    "FedBBQ",
    "FedBin",
    "FedCal",
    "FedMatrix",
    "FedMethod",
    "FedOPVector",
    "FedTemp",
    "FedVector",
    "get_method",
    "noise_dominance",
    "temperature_moments",
    "temperature_newton",
]

#: ``FedTemperature``, the old name of :class:`FedTemp`, for one release (DeprecationWarning).
__getattr__ = renamed_aliases("privcal.federated.methods", {"FedTemperature": ("FedTemp", FedTemp)})

"""End-to-end privacy audits of the entry points a user calls.

Each audit calls one public entry point exactly as a user does (default arguments, default
noise, which is :class:`~privcal.privacy.SecureNoise`), on a worst-case pair of neighbouring
inputs of the relation that entry point's privacy report declares, many times per side, and
estimates a lower confidence bound on epsilon with :func:`privcal.privacy.audit.audit_dp`
(exact Clopper-Pearson bounds on pre-specified events). An audit *fails* when that lower bound
exceeds the claimed epsilon: with probability at least ``1 - alpha`` a correct implementation
passes.

Audits are registered by name (:func:`register`) in modules by area, imported on demand so that
an audit needing the torch or federated extra does not load it until asked:

* :mod:`privcal.audits.private`: every ``DataSource`` query, ``PrivateTemperatureScaling`` (each
  objective), ``PrivateHistogramBinning``;
* :mod:`privcal.audits.conformal`: ``PrivateConformal``, ``private_quantile``;
* :mod:`privcal.audits.conformal_parties`: ``PrivateConformal`` over several data sources
  (local and distributed noise) and per group;
* :mod:`privcal.audits.federated`: ``simulate()`` for each Fed method with DP, the Flower
  server's release for one round;
* :mod:`privcal.audits.federated_conformal`: ``simulate("conformal-lac", ...)`` and the Flower
  ServerApp's round of federated conformal prediction;
* :mod:`privcal.audits.training`: ``DPTemperatureScaling``, ``DPPlattScaling``.

Each audit registers the defects it must catch (:class:`Plant`: a realistic bug planted into the
real code path by a patch that is undone afterwards, :mod:`privcal.audits.plants`).
``privcal audit NAME`` runs one from the command line (``--plant DEFECT`` with a defect in); the
test suite runs all of them and every plant of every audit.
"""

from privcal.audits._registry import (
    AREAS,
    AuditReport,
    DeployedAudit,
    Plant,
    audit_release,
    available_audits,
    get_audit,
    register,
    run_audit,
)

__all__ = [
    "AREAS",
    "AuditReport",
    "DeployedAudit",
    "Plant",
    "audit_release",
    "available_audits",
    "get_audit",
    "register",
    "run_audit",
]

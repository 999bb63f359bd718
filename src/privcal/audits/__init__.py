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
* :mod:`privcal.audits.federated`: ``simulate()`` for each Fed method with DP, the Flower
  server's release for one round;
* :mod:`privcal.audits.training`: ``DPTemperatureScaling``, ``DPPlattScaling``.

``privcal audit NAME`` runs one from the command line; the test suite runs all of them and, for
each, a planted defect that the same audit must catch.
"""

from privcal.audits._registry import (
    AREAS,
    AuditReport,
    DeployedAudit,
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
    "audit_release",
    "available_audits",
    "get_audit",
    "register",
    "run_audit",
]

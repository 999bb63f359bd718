"""The federated methods by name: :data:`METHODS` and :func:`get_method`."""

from __future__ import annotations

from typing import Any

from privcal._params import check_option
from privcal.federated.methods.affine import FedMatrix, FedOPVector, FedVector
from privcal.federated.methods.base import FedMethod
from privcal.federated.methods.binning import FedBBQ, FedBin
from privcal.federated.methods.conformal import FedConformalAPS, FedConformalLAC
from privcal.federated.methods.mlp import FedCal
from privcal.federated.methods.temperature import FedTemp

__all__ = ["METHODS", "get_method"]


METHODS: dict[str, Any] = {
    "fedtemp": FedTemp,
    "fedtemp-averaging": lambda **kw: FedTemp(**{"update": "parameter-averaging", **kw}),
    "fedvector": FedVector,
    "fedvector-averaging": lambda **kw: FedVector(**{"update": "parameter-averaging", **kw}),
    "fedopvector": FedOPVector,
    "fedmatrix": FedMatrix,
    "fedmatrix-averaging": lambda **kw: FedMatrix(**{"update": "parameter-averaging", **kw}),
    "fedcal": FedCal,
    "fedbin": FedBin,
    "fedbbq": lambda **kw: FedBBQ(**{"weighting": None, **kw}),
    "fedbbq-all": lambda **kw: FedBBQ(**{"weighting": "all", **kw}),
    "fedbbq-changed": lambda **kw: FedBBQ(**{"weighting": "changed", **kw}),
    "conformal-lac": FedConformalLAC,
    "conformal-aps": FedConformalAPS,
}


def get_method(method: Any, **params: Any) -> FedMethod:
    """A :class:`FedMethod` from a name in :data:`METHODS` (with ``params``) or an instance."""
    if isinstance(method, FedMethod):
        return method
    check_option(method, "method", "simulate", tuple(METHODS))
    return METHODS[method](**params)

"""Flower deployment of privcal's federated calibration (the ``federated`` extra).

``server_app.app`` (a :class:`flwr.serverapp.ServerApp`) and ``client_app.app`` (a
:class:`flwr.clientapp.ClientApp`) run the same client and server steps as
:func:`privcal.federated.simulate`; :mod:`privcal.federated.flower.task` holds the framework-free
glue and :mod:`privcal.federated.flower.deploy` starts SuperLink / SuperNodes and submits runs.
:mod:`privcal.federated.flower.executor` keeps the ClientApp (and privcal's imports) alive
across messages for SuperNodes run with ``--isolation process``, and
:mod:`privcal.federated.flower.local` runs both apps in one process (local experiments, tests,
benchmarks).
"""

import os as _os


def no_telemetry_by_default() -> None:
    """Turn Flower's usage telemetry off unless the user has set ``FLWR_TELEMETRY_ENABLED``.

    Flower sends usage events to telemetry.flower.ai unless ``FLWR_TELEMETRY_ENABLED`` is
    ``"0"``, and reads the variable once, when its telemetry module is first imported (``import
    flwr`` does). privcal's processes serve private data, so they do not call out unless the
    user opts in (``FLWR_TELEMETRY_ENABLED=1``). Called on import of this package (before any
    of its modules imports Flower) and by ``privcal federate`` before it imports Flower;
    :class:`~privcal.federated.flower.deploy.FlowerProcesses` passes the environment on to the
    Flower processes it starts.
    """
    _os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


no_telemetry_by_default()


def _speed_up_simulation_engine() -> None:
    """Inside Flower's Simulation Engine (``flwr-simulation``), which loads privcal's ClientApp
    before it starts dispatching, replace the engine's quadratic dispatch loop
    (:mod:`privcal.federated.flower.engine`); a no-op in every other process."""
    import sys as _sys

    if "flwr.server.superlink.fleet.vce.vce_api" in _sys.modules:
        from privcal.federated.flower.engine import patch_dispatch

        patch_dispatch()


_speed_up_simulation_engine()

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

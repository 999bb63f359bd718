"""The protocol of a federated calibration method: :class:`FedMethod` (see the package docstring).

A method's server state is a :data:`State`, a dict of float arrays, so it travels as it is in
Flower's records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from privcal.calibrators import Calibrator
from privcal.federated.dp import DPConfig, NoiseGroup
from privcal.privacy.measurement import Measurement

__all__ = ["FedMethod", "State"]

State = dict[str, np.ndarray]


class FedMethod:
    """Base class of the federated methods; the package docstring
    (:mod:`privcal.federated.methods`) states the protocol."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "scaling"
    #: What :meth:`calibrator` returns, so what a run saves and hands its clients to check:
    #: ``"calibrator"`` (a :class:`~privcal.calibrators.Calibrator`, ``calibrator.json``) or
    #: ``"sets"`` (prediction sets with ``to_dict`` / ``from_dict``, ``sets.json``).
    releases: ClassVar[str] = "calibrator"

    def init(self, c: int) -> State:
        raise NotImplementedError

    def payload_shape(self, c: int) -> tuple[int, ...]:
        raise NotImplementedError

    def client_step(self, state: State, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def client_steps(
        self, state: State, z: np.ndarray, y: np.ndarray, clients: Sequence[np.ndarray]
    ) -> Sequence[np.ndarray] | np.ndarray:
        """The payloads of several clients, one per entry of ``clients`` (row indices of ``z``).

        Entry ``k`` is :meth:`client_step` on the rows ``clients[k]``; the simulator calls this
        for a round's sampled clients. A method whose client step vectorises over clients
        (:class:`~privcal.federated.methods.temperature.FedTemp`) overrides it with one pass
        over all rows, returning a ``(len(clients), *payload_shape)`` array, and defines
        :meth:`client_step` as a batch of one: one path for one client and for many.
        """
        return [self.client_step(state, z[idx], y[idx]) for idx in clients]

    def clip(self, payload: np.ndarray, dp: DPConfig) -> np.ndarray:
        """The client-side clipping of user-level DP, of one payload or of a stack of payloads
        (a leading axis of clients, each clipped on its own)."""
        raise NotImplementedError

    def server_step(
        self,
        state: State,
        total: np.ndarray,
        n: int,
        dp: DPConfig | None = None,
        denominator: float | None = None,
    ) -> State:
        """Release the round's sum (``total`` plus the run's noise under ``dp``, in the blocks
        of :meth:`noise_groups`) and return :meth:`_update` of it: the one release of every
        method; everything after it is post-processing."""
        released = np.asarray(total, dtype=np.float64)
        if dp is not None:
            released = dp.release(released, self.noise_groups(dp, released.shape))
        return self._update(state, released, n, dp, denominator)

    def _update(
        self, state: State, released: np.ndarray, n: int, dp: DPConfig | None, denom: float | None
    ) -> State:
        """The new state from the released sum of ``n`` payloads; here the histogram methods'
        (the scaling methods override it): a copy of ``state`` with ``released`` added to
        ``hist``, one more round counted and, under ``dp``, :meth:`_track_noise`."""
        new = {k: np.array(v, dtype=np.float64, copy=True) for k, v in state.items()}
        new["hist"] = new["hist"] + released
        new["rounds"] = new["rounds"] + 1
        if dp is not None:
            self._track_noise(new, dp, released.shape)
        return new

    def _track_noise(self, new: State, dp: DPConfig, shape: tuple[int, ...]) -> None:
        """A histogram method's own record, in its ``new`` state, of the noise of a release of
        a payload sum of ``shape``."""
        raise NotImplementedError

    def calibrator(self, state: State, c: int) -> Calibrator:
        raise NotImplementedError

    def mechanisms_per_round(self, c: int) -> int:
        return 1

    def payload_bound(self, dp: DPConfig) -> float:
        """Largest absolute entry of a payload after :meth:`clip` (for SecAgg+ quantisation)."""
        raise NotImplementedError

    def noise_groups(self, dp: DPConfig, shape: tuple[int, ...]) -> list[NoiseGroup]:
        """The round's Gaussian mechanisms: blocks of the payload, their L2 sensitivity and std.

        The one description of a round's noise: the server adds it (``aggregation="trusted"``,
        :meth:`DPConfig.release`) or the clients' shares make it up (``"distributed"``,
        :meth:`DPConfig.client_uploads`), and the accountant records each block's ``rho``.
        """
        raise NotImplementedError

    def payload_measurements(self) -> tuple[Measurement, ...]:
        """The measurements of a round's noisy sums (:mod:`privcal.federated.payloads`)."""
        raise NotImplementedError

    def report_terms(self, dp: DPConfig, c: int, cohort: float) -> dict[str, Any]:
        """What the run's privacy report states about one round's release.

        Keys: ``what`` (the summed payload), ``measurement`` (its
        :mod:`~privcal.federated.payloads` measurement) and ``clip`` (the clip bound the
        recorded sensitivity is read at), ``mechanism``, ``clips`` and ``cohort`` (how the sum
        is used), all read by :func:`privcal.federated.dp.federated_report`.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

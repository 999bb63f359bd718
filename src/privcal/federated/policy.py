"""A client's own privacy policy: what a run may ask of this party, decided on its side.

In a federation the server writes the run configuration (epsilon, delta, how the noise is
added, the threshold ``t`` of distributed shares, the noise source). Nothing in that
configuration is trusted by a client: before it reads its data, a client checks the run against
its :class:`ClientPolicy` and refuses a run that asks for less privacy than the policy allows,
with one line on its own console and a refusal the server sees. Its ledger records nothing for a
refused run (the check comes before :func:`~privcal.federated.flower.task.charge_round`).

What a policy bounds, and why each bound is the client's guarantee:

* ``max_epsilon``, ``max_delta``: the most one run may cost this client (user-level, the run's
  composed guarantee). The run's noise is sized from the configuration's epsilon, so a run whose
  epsilon is above ``max_epsilon`` would release with less noise than the client accepts.
* ``accept``: the aggregations of the runs it joins. ``"distributed"``: the client adds its own
  noise share and the server sees only a secure sum; ``"trusted"``: the server receives the
  client's clipped, noiseless payload and adds the noise (the server is trusted with it);
  ``"none"``: runs without DP (the exact payload leaves the client). A client that keeps a
  ledger never answers ``"none"``.
* ``min_threshold``: the smallest ``t`` it accepts under ``"distributed"``. Over SecAgg+ the
  reconstruction threshold is ``t`` itself
  (:func:`~privcal.federated.flower.secagg.secagg_threshold`), and the server together with
  ``t - 1`` colluding clients can unmask one client's upload, which carries ``1/t`` of the
  noise variance; a smaller ``t`` lowers the coalition that can.
  Over SecAgg+ a client also refuses ``t >= K`` (SecAgg+ cannot enforce a threshold equal to the
  number of shares) and a SecAgg+ setup whose reconstruction threshold is not the run's ``t``.
* ``allow_minority_threshold``: over SecAgg+ a client refuses ``t <= K / 2`` unless it opts in.
  A server that shows different survivors different unmask requests (one client listed active
  to ``t`` of them, dropped to ``t`` others) gets both of that client's secrets and its upload
  alone, ``1/t`` of the noise variance; each survivor sees only its own request, so no client
  can detect it, and it needs ``2t`` survivors: with ``t > K / 2`` there are never enough.
* ``collusion_margin``: how many colluding clients its guarantee must withstand. Under
  ``"distributed"`` each of the ``S`` clients of a sum adds a share of ``1/t`` of the noise
  variance; a server that ``c`` clients hand their uploads to subtracts them and is left with
  ``(S - c) / t`` of it, the run's epsilon as long as ``S - c >= t``. So a sum of ``S`` clients
  withstands ``S - t`` colluders (over SecAgg+ also at most ``t - 2``), which clients that
  leave mid-run lower (down to none at ``S = t``). A client with margin ``m`` refuses a run
  that withstands fewer than ``m`` with all ``K`` clients and, over SecAgg+, a round whose
  clients withstand fewer: at the setup (the sample), before its upload (the
  clients that shared their keys with it) and at the unmask (the survivors). The last refusal
  withholds this client's shares; the unmask halts once more than ``S - t`` of the ``S``
  survivors refuse (one at ``S = t``; always when every survivor holds the margin).
* ``allow_seeded_noise``: seeded noise (:class:`~privcal.privacy.SeededNoise`) is keyed on
  values the server knows, so the server could subtract the client's noise. A client refuses it
  unless it opts in itself (tests and simulations; its report then says "not private").

Under Flower's Simulation Engine the operator runs every client, so the simulated clients take
the operator's run configuration as their policy (:meth:`ClientPolicy.permissive`).

A policy file is TOML (``tomllib``), next to the client's ledger by default
(``LEDGER.policy.toml``)::

    max-epsilon = 1.0
    max-delta = 1e-5
    min-threshold = 3
    collusion-margin = 1
    accept = ["distributed"]
    allow-minority-threshold = false
    allow-seeded-noise = false
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from privcal._params import check_int

__all__ = ["ACCEPTABLE", "ClientPolicy", "default_policy_path", "run_threshold"]

#: The run kinds a client may accept (``accept``).
ACCEPTABLE: tuple[str, ...] = ("distributed", "trusted", "none")

#: Policy keys as they are written in a policy file and in a node configuration.
_KEYS = (
    "max-epsilon",
    "max-delta",
    "min-threshold",
    "accept",
    "allow-seeded-noise",
    "collusion-margin",
    "allow-minority-threshold",
)


def default_policy_path(ledger: str | Path) -> Path:
    """Where a client's policy file lives by default: ``LEDGER`` with suffix ``.policy.toml``."""
    return Path(ledger).with_suffix(".policy.toml")


@dataclass(frozen=True)
class ClientPolicy:
    """What a run may ask of one client (see the module docstring).

    Parameters
    ----------
    max_epsilon : float, default=1.0
        The most epsilon one run may cost this client (> 0; ``inf``: no bound of its own).
    max_delta : float, default=1e-5
        The most delta one run may cost this client (in ``[0, 1)``).
    min_threshold : int, default=2
        The smallest threshold ``t`` of distributed noise shares it accepts (>= 1; over SecAgg+
        at least 2, SecAgg+'s own minimum).
    accept : tuple of {"distributed", "trusted", "none"}, default=("distributed", "trusted")
        The runs it joins: DP runs with distributed or trusted noise, and (``"none"``) runs
        without DP.
    allow_seeded_noise : bool, default=False
        Whether it answers runs whose configuration asks for seeded (not private) noise.
    collusion_margin : int, default=0
        How many clients may collude with the server while this client's noise still comes
        from ``t`` shares (>= 0): distributed runs and SecAgg+ rounds of ``S`` clients with
        ``S - t`` below it are refused (:meth:`cohort_refusal`).
    allow_minority_threshold : bool, default=False
        Whether it joins SecAgg+ runs with distributed noise whose ``t <= K / 2`` (open to
        split unmask requests; module docstring).
    """

    max_epsilon: float = 1.0
    max_delta: float = 1e-5
    min_threshold: int = 2
    accept: tuple[str, ...] = ("distributed", "trusted")
    allow_seeded_noise: bool = False
    collusion_margin: int = 0
    allow_minority_threshold: bool = False

    def __post_init__(self) -> None:
        owner = "ClientPolicy"
        eps = _real(self.max_epsilon, "max_epsilon", owner)
        if not eps > 0:
            raise ValueError(
                f"The 'max_epsilon' parameter of {owner} must be > 0 (the most epsilon one run "
                f"may cost this client). Got {self.max_epsilon!r} instead."
            )
        dlt = _real(self.max_delta, "max_delta", owner)
        if not 0 <= dlt < 1:
            raise ValueError(
                f"The 'max_delta' parameter of {owner} must be in [0, 1). Got "
                f"{self.max_delta!r} instead."
            )
        check_int(self.min_threshold, "min_threshold", owner, low=1)
        check_int(self.collusion_margin, "collusion_margin", owner, low=0)
        accept = (self.accept,) if isinstance(self.accept, str) else tuple(self.accept)
        bad = [a for a in accept if a not in ACCEPTABLE]
        if bad or not accept:
            raise ValueError(
                f"The 'accept' parameter of {owner} must name one or more of "
                f"{', '.join(ACCEPTABLE)}. Got {list(accept)!r} instead."
            )
        for flag in ("allow_seeded_noise", "allow_minority_threshold"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(
                    f"The {flag!r} parameter of {owner} must be true or false. Got "
                    f"{getattr(self, flag)!r} instead."
                )
        object.__setattr__(self, "max_epsilon", eps)
        object.__setattr__(self, "max_delta", dlt)
        object.__setattr__(self, "accept", tuple(dict.fromkeys(accept)))

    # ------------------------------------------------------------------ construction
    @classmethod
    def permissive(cls) -> ClientPolicy:
        """The policy of a client whose operator is also the server (Flower's Simulation
        Engine, in-process tests): every run the configuration asks for."""
        return cls(math.inf, 0.999999, 1, ACCEPTABLE, True, allow_minority_threshold=True)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str) -> ClientPolicy:
        """A policy from the keys of a policy file (module docstring: ``max-epsilon``,
        ``max-delta``, ``min-threshold``, ``accept``, ...); any other key is refused, naming
        ``where``."""
        unknown = sorted(set(values) - set(_KEYS))
        if unknown:
            raise ValueError(
                f"{where} has unknown key(s) {', '.join(unknown)}; a client policy takes "
                f"{', '.join(_KEYS)}."
            )
        kwargs = {key.replace("-", "_"): values[key] for key in _KEYS if key in values}
        if isinstance(kwargs.get("accept"), str):
            kwargs["accept"] = tuple(a.strip() for a in kwargs["accept"].split(",") if a.strip())
        try:
            return cls(**kwargs)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> ClientPolicy:
        """Read a TOML policy file; a file that does not parse is one ``ValueError``."""
        p = Path(path)
        try:
            values = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as err:
            raise ValueError(f"The policy file {str(p)!r} cannot be read ({err}).") from None
        except tomllib.TOMLDecodeError as err:
            raise ValueError(
                f"The policy file {str(p)!r} is not valid TOML ({err}); write keys such as "
                "'max-epsilon = 1.0' and 'accept = [\"distributed\"]'."
            ) from None
        return cls.from_mapping(values, f"The policy file {str(p)!r}")

    @classmethod
    def from_node(
        cls, node: Mapping[str, Any], where: str = "The node's privacy policy"
    ) -> ClientPolicy:
        """The policy a node configuration carries (:meth:`to_node`). A node without policy
        keys has the default policy, with ``max_epsilon`` and ``max_delta`` its ``budget`` and
        ``delta-budget`` when it declares them; a node with a ledger never accepts ``"none"``."""
        values = {k: node[k] for k in _KEYS if k in node}
        values.setdefault("max-epsilon", float(node.get("budget", 1.0)))
        values.setdefault("max-delta", float(node.get("delta-budget", 1e-5)))
        policy = cls.from_mapping(values, where)
        if node.get("ledger") and "none" in policy.accept:
            rest = tuple(a for a in policy.accept if a != "none")
            policy = replace(policy, accept=rest or ("distributed",))
        return policy

    def to_node(self) -> dict[str, Any]:
        """The policy as flat node-configuration entries (Flower node configs hold scalars)."""
        return {
            "max-epsilon": float(self.max_epsilon),
            "max-delta": float(self.max_delta),
            "min-threshold": int(self.min_threshold),
            "accept": ",".join(self.accept),
            "allow-seeded-noise": bool(self.allow_seeded_noise),
            "collusion-margin": int(self.collusion_margin),
            "allow-minority-threshold": bool(self.allow_minority_threshold),
        }

    # ------------------------------------------------------------------ checks
    def refusal(self, cfg: Mapping[str, Any]) -> str | None:
        """Why this client refuses the run ``cfg`` (a run configuration), or ``None``.

        Reads only the configuration, never the client's data. ``cfg`` holds ``epsilon``
        (0: no DP), ``delta``, ``aggregation``, ``noise``, ``threshold`` (0: the default for
        ``num-nodes``), ``num-nodes`` and ``secagg``.
        """
        noise = str(cfg.get("noise", "secure"))
        if noise not in ("secure", "seeded"):
            return f"the run asks for noise {noise!r}; this client draws 'secure' noise only"
        eps = float(cfg.get("epsilon", 0.0))
        if not eps > 0:
            if "none" not in self.accept:
                return (
                    "the run has no DP (epsilon 0): its payloads would leave this client exact; "
                    f"this client's policy accepts {', '.join(self.accept)} runs only"
                )
            return None
        if noise == "seeded" and not self.allow_seeded_noise:
            return (
                "the run asks for seeded noise, keyed on values the server knows (not private); "
                "this client's policy allows secure noise only (opt in with "
                "--allow-seeded-noise, for tests)"
            )
        if eps > self.max_epsilon * (1.0 + 1e-12):
            return (
                f"the run asks for epsilon {eps:g}, above this client's policy of at most "
                f"{self.max_epsilon:g} per run"
            )
        dlt = float(cfg.get("delta", 0.0))
        if dlt > self.max_delta * (1.0 + 1e-12):
            return (
                f"the run asks for delta {dlt:g}, above this client's policy of at most "
                f"{self.max_delta:g} per run"
            )
        aggregation = str(cfg.get("aggregation", "trusted"))
        if aggregation not in self.accept:
            return (
                f"the run uses aggregation {aggregation!r}; this client's policy accepts "
                f"{', '.join(a for a in self.accept if a != 'none')} only"
            )
        if aggregation != "distributed":
            return None
        k, t = run_threshold(cfg)
        if t < self.min_threshold:
            return (
                f"the run's threshold t={t} is below this client's policy of t >= "
                f"{self.min_threshold}"
            )
        secagg = bool(cfg.get("secagg", False))
        if secagg and not 2 <= t <= k - 1:
            return (
                f"the run's threshold t={t} of K={k} is not one SecAgg+ can enforce "
                f"(2 <= t <= K - 1 = {k - 1})"
            )
        if secagg and 2 * t <= k and not self.allow_minority_threshold:
            return (
                f"the run's threshold t={t} of K={k} is at most K/2: over SecAgg+ a server that "
                "showed different clients different unmask requests could unmask one client's "
                "upload; this client takes t > K/2 (opt in with --allow-minority-threshold)"
            )
        return self.cohort_refusal(cfg, k, "the run's K")

    def cohort_refusal(self, cfg: Mapping[str, Any], clients: int, what: str) -> str | None:
        """Why this client refuses a distributed sum over ``clients`` clients (``what`` names
        them: the run's K, SecAgg+'s sample, ...), given the run ``cfg``; or ``None``.

        A sum of ``S`` noise shares, each of ``1/t`` of the noise variance, keeps the run's
        epsilon against a server with at most ``S - t`` colluding clients, and over SecAgg+ at
        most ``t - 2`` (``t - 1`` colluders and the server unmask one upload):
        :func:`~privcal.privacy.distributed.collusion_tolerated`, the count every distributed
        report states. The sum is refused when that count is below :attr:`collusion_margin`.
        Runs without DP and trusted runs add no shares: nothing to refuse here.
        """
        from privcal.privacy.distributed import collusion_tolerated

        if not float(cfg.get("epsilon", 0.0)) > 0 or cfg.get("aggregation") != "distributed":
            return None
        t = run_threshold(cfg)[1]
        transport = "secagg+" if bool(cfg.get("secagg", False)) else "in-process"
        tolerated = collusion_tolerated(t, clients, transport)
        if tolerated >= self.collusion_margin:
            return None
        return (
            f"{what} is {clients} clients, so the noise threshold t={t} holds against "
            f"{tolerated} colluding clients"
            + (" (at most t - 2 over SecAgg+)" if tolerated == t - 2 < clients - t else "")
            + f", fewer than this client's collusion margin of {self.collusion_margin} (a sum "
            "needs S - t and, over SecAgg+, t - 2 at least the margin: more clients and a larger "
            "threshold, or a smaller margin)"
        )

    def secagg_refusal(
        self, cfg: Mapping[str, Any], reconstruction: int, shares: int, sampled: int
    ) -> str | None:
        """Why this client refuses a SecAgg+ setup (``reconstruction`` threshold, ``shares``
        per secret, ``sampled`` clients), given the run ``cfg``; or ``None``.

        The secure sum must enforce what the noise was sized for: under ``"distributed"`` the
        reconstruction threshold is exactly the run's ``t`` (SecAgg+ then never unmasks a sum
        of fewer than ``t`` uploads), and it is at least ``min_threshold`` in every run. The
        sample may be smaller than the declared ``K`` (clients that left: any ``t`` shares make
        up the noise, and a sum of fewer than ``t`` is never unmasked) but not larger (the ring
        and the value bounds hold the sum of at most ``K`` uploads), nor smaller than ``t`` (the
        round could release nothing: the client keeps its keys and its data).
        """
        if reconstruction < max(2, self.min_threshold):
            return (
                f"SecAgg+'s reconstruction threshold {reconstruction} is below this client's "
                f"policy of at least {max(2, self.min_threshold)}"
            )
        if reconstruction >= shares:
            return (
                f"SecAgg+'s reconstruction threshold {reconstruction} is not below its number "
                f"of shares {shares}"
            )
        if float(cfg.get("epsilon", 0.0)) > 0 and cfg.get("aggregation") == "distributed":
            k, t = run_threshold(cfg)
            if reconstruction != t:
                return (
                    f"SecAgg+'s reconstruction threshold {reconstruction} is not the run's "
                    f"noise threshold t={t}: it could unmask a sum of fewer than t shares"
                )
            if max(sampled, shares) > k:
                return (
                    f"SecAgg+ sampled {sampled} clients with {shares} shares per secret, more "
                    f"than the run's declared K={k} the noise shares and the ring were sized for"
                )
            if sampled < t:
                return (
                    f"SecAgg+ sampled {sampled} clients, fewer than the run's noise threshold "
                    f"t={t}: the round could release nothing"
                )
        return self.cohort_refusal(cfg, sampled, "SecAgg+'s sample")

    def describe(self) -> str:
        """One line for the client's console."""
        eps = "no bound" if math.isinf(self.max_epsilon) else f"<= {self.max_epsilon:g}"
        noise = "seeded noise allowed (not private)" if self.allow_seeded_noise else "secure noise"
        return (
            f"privacy policy: epsilon {eps} and delta <= {self.max_delta:g} per run; accepts "
            f"{', '.join(self.accept)} runs; threshold t >= {self.min_threshold}"
            + (
                " (over SecAgg+ t > K/2); "
                if "distributed" in self.accept and not self.allow_minority_threshold
                else "; "
            )
            + (noise if self.allow_seeded_noise else f"{noise} only")
            + (
                f"; sums that withstand {self.collusion_margin} colluding clients"
                if self.collusion_margin
                else ""
            )
        )


def run_threshold(cfg: Mapping[str, Any]) -> tuple[int, int]:
    """``(K, t)`` of a run configuration (``threshold`` 0: the default for ``num-nodes``)."""
    from privcal.federated.dp import default_threshold

    k = int(cfg.get("num-nodes", 1))
    return k, int(cfg.get("threshold", 0) or 0) or default_threshold(k)


def _real(value: Any, name: str, owner: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"The {name!r} parameter of {owner} must be a number. Got {value!r} instead."
        )
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"The {name!r} parameter of {owner} must be a number. Got nan instead.")
    return v

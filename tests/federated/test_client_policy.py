"""A client's own privacy policy: the server's run configuration cannot lower it.

A server (here the deployed ServerApps, over in-process nodes) whose run configuration asks for
seeded noise, a threshold of ``K`` or an epsilon above the clients' policy gets a refusal from
every client; no client reads its data or charges its ledger for that run.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from privcal.federated.flower import client_app, secagg, task
from privcal.federated.flower.local import run_local
from privcal.federated.policy import ClientPolicy, default_policy_path
from privcal.privacy import PrivacyOdometer

K = 4
C = 3


# ---------------------------------------------------------------------- the policy itself
def test_defaults_and_node_round_trip() -> None:
    p = ClientPolicy()
    assert (p.max_epsilon, p.max_delta, p.min_threshold) == (1.0, 1e-5, 2)
    assert p.accept == ("distributed", "trusted") and not p.allow_seeded_noise
    q = ClientPolicy(2.5, 1e-6, 3, ("distributed",), True, 2, allow_minority_threshold=True)
    assert ClientPolicy.from_node(q.to_node()) == q
    # a node's budget is its default epsilon bound; a ledger never accepts runs without DP
    node = {"budget": 4.0, "delta-budget": 1e-6, "ledger": "x.sqlite", "accept": "none,trusted"}
    got = ClientPolicy.from_node(node)
    assert (got.max_epsilon, got.max_delta, got.accept) == (4.0, 1e-6, ("trusted",))


def test_policy_file(tmp_path: Path) -> None:
    f = default_policy_path(tmp_path / "site.sqlite")
    assert f == tmp_path / "site.policy.toml"
    f.write_text('max-epsilon = 2.0\nmin-threshold = 3\naccept = ["distributed"]\n')
    assert ClientPolicy.from_file(f) == ClientPolicy(2.0, 1e-5, 3, ("distributed",), False)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("max-epsilon = ", "not valid TOML"),
        ("max-epsilon = -1.0", "max_epsilon"),
        ("min-threshold = 1.5", "min_threshold"),
        ('accept = ["everything"]', "accept"),
        ("allow-seeded-noise = 1", "allow_seeded_noise"),
        ("collusion-margin = -1", "collusion_margin"),
        ("collusion-margin = 1.0", "collusion_margin"),
        ("allow-minority-threshold = 1", "allow_minority_threshold"),
        ("budget = 3.0", "unknown key"),
    ],
)
def test_a_policy_file_that_does_not_parse_is_one_clear_error(
    tmp_path: Path, text: str, match: str
) -> None:
    f = tmp_path / "p.policy.toml"
    f.write_text(text + "\n")
    with pytest.raises(ValueError, match=match) as err:
        ClientPolicy.from_file(f)
    assert str(f) in str(err.value)


RUN = {
    "epsilon": 1.0,
    "delta": 1e-5,
    "noise": "secure",
    "aggregation": "distributed",
    "threshold": 0,
    "num-nodes": 10,
    "secagg": True,
}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"noise": "seeded"}, "seeded noise"),
        ({"epsilon": 1.5}, "epsilon 1.5, above"),
        ({"delta": 1e-4}, "delta 0.0001, above"),
        ({"aggregation": "trusted"}, "aggregation 'trusted'"),
        ({"threshold": 2}, "threshold t=2 is below"),
        ({"threshold": 10}, "not one SecAgg+ can enforce"),
        ({"epsilon": 0.0}, "no DP"),
        ({"noise": "numpy"}, "'secure' noise only"),
    ],
)
def test_refusal_names_what_the_run_asks_for(change: dict, reason: str) -> None:
    policy = ClientPolicy(1.0, 1e-5, 3, ("distributed",))
    assert policy.refusal(RUN) is None  # the default threshold for K = 10 is 8
    assert reason in str(policy.refusal({**RUN, **change}))


def test_secagg_setup_must_enforce_the_noise_threshold() -> None:
    policy = ClientPolicy(1.0, 1e-5, 3)
    cfg = {**RUN, "threshold": 6}
    assert policy.secagg_refusal(cfg, 6, 10, 10) is None
    assert "not the run's noise threshold t=6" in str(policy.secagg_refusal(cfg, 5, 10, 10))
    assert "below this client's policy" in str(policy.secagg_refusal(cfg, 2, 10, 10))
    assert "not below its number of shares" in str(policy.secagg_refusal(cfg, 10, 10, 10))
    # a sample between t and K is clients that left (any t shares make up the noise); more
    # than K overflows what the ring was sized for; fewer than t could release nothing
    assert policy.secagg_refusal(cfg, 6, 10, 9) is None
    assert policy.secagg_refusal(cfg, 6, 10, 6) is None
    assert "sampled 11 clients with 10 shares per secret, more than the run's declared K=10" in str(
        policy.secagg_refusal(cfg, 6, 10, 11)
    )
    assert "sampled 5 clients, fewer than the run's noise threshold t=6" in str(
        policy.secagg_refusal(cfg, 6, 10, 5)
    )


def test_a_collusion_margin_counts_the_clients_of_each_sum() -> None:
    """A sum of S shares withstands S - t colluders: with K = 10 and the default t = 8 a margin
    of 2 takes the whole run and refuses a SecAgg+ sample of 9; a margin of 3 refuses the run.
    Trusted runs and runs without DP add no shares, so the margin does not apply to them."""
    two, three = ClientPolicy(collusion_margin=2), ClientPolicy(collusion_margin=3)
    assert two.refusal(RUN) is None and two.secagg_refusal(RUN, 8, 10, 10) is None
    assert "the run's K is 10 clients, so the noise threshold t=8 holds against 2 colluding" in str(
        three.refusal(RUN)
    )
    assert "SecAgg+'s sample is 9 clients" in str(two.secagg_refusal(RUN, 8, 10, 9))
    assert "collusion margin of 2" in str(two.cohort_refusal(RUN, 9, "the sum"))
    assert two.cohort_refusal({**RUN, "aggregation": "trusted"}, 1, "the sum") is None
    assert two.cohort_refusal({**RUN, "epsilon": 0.0}, 1, "the sum") is None
    assert "sums that withstand 2 colluding clients" in two.describe()
    # over SecAgg+ t - 1 colluders and the server unmask one upload: at most t - 2 = 1 at t = 3
    five = {**RUN, "num-nodes": 5, "threshold": 3}
    assert "holds against 1 colluding clients (at most t - 2 over SecAgg+)" in str(
        two.refusal(five)
    )
    assert two.refusal({**five, "secagg": False}) is None


def test_over_secagg_a_client_takes_only_a_majority_threshold() -> None:
    """Split unmask requests need 2t survivors: a client refuses t <= K/2 over SecAgg+ unless
    it opts in (the simulation engine's permissive policy does); in process no masks exist."""
    assert ClientPolicy().refusal({**RUN, "threshold": 6}) is None  # 6 > 10/2
    assert "t=5 of K=10 is at most K/2" in str(ClientPolicy().refusal({**RUN, "threshold": 5}))
    assert ClientPolicy(allow_minority_threshold=True).refusal({**RUN, "threshold": 5}) is None
    assert ClientPolicy().refusal({**RUN, "threshold": 5, "secagg": False}) is None
    assert ClientPolicy.permissive().refusal({**RUN, "threshold": 2}) is None
    assert "(over SecAgg+ t > K/2)" in ClientPolicy().describe()


def test_permissive_policy_is_the_simulation_engines() -> None:
    node = task.client_node({"partition-id": 0, "num-partitions": 3}, {})
    policy = ClientPolicy.from_node(node)
    assert math.isinf(policy.max_epsilon) and policy.allow_seeded_noise
    assert policy.refusal({**RUN, "noise": "seeded", "epsilon": 50.0}) is None


# ---------------------------------------------------------------------- deployed apps
@pytest.fixture()
def sites(tmp_path: Path) -> list[dict]:
    rng = np.random.default_rng(0)
    nodes = []
    for k in range(K):
        z = 3.0 * rng.normal(size=(40, C))
        y = rng.integers(0, C, 40)
        np.savez(tmp_path / f"s{k}.npz", logits=z, labels=y)
        policy = ClientPolicy(1.0, 1e-5, 2, ("distributed", "trusted"))
        nodes.append(
            {
                "data": str(tmp_path / f"s{k}.npz"),
                "ledger": str(tmp_path / f"l{k}.sqlite"),
                "budget": 3.0,  # the ledger could pay more than the policy gives one run
                "status": str(tmp_path / f"status{k}.log"),
                **policy.to_node(),
            }
        )
    return nodes


def _spent(node: dict) -> float:
    return PrivacyOdometer(3.0, ledger=node["ledger"], delta_budget=1e-5).spent


def _never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a client read its data for a run its policy refuses")

    monkeypatch.setattr(client_app, "client_data", refuse)
    monkeypatch.setattr(secagg, "client_data", refuse)


ASKS = {
    "seeded noise": ({"noise": "seeded"}, "seeded noise"),
    "epsilon above the policy": ({"epsilon": 2.0}, "epsilon 2, above"),
}


def _skip_join(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that skips privcal's round 0 (not the ServerApp as shipped): every node is
    asked straight into round 1, and each client must still refuse there."""
    from privcal.federated.flower import server_app

    def every_node(grid: object, cfg: dict) -> tuple[list[int], list[int]]:
        nodes = sorted(grid.get_node_ids())  # type: ignore[attr-defined]
        return nodes, nodes  # (asked, joined): every node, none asked

    monkeypatch.setattr(server_app, "join_run", every_node)
    monkeypatch.setattr(secagg, "join_run", every_node)


@pytest.mark.parametrize("skip_join", [False, True], ids=["as shipped", "server skips round 0"])
@pytest.mark.parametrize("ask", list(ASKS))
def test_plain_clients_refuse_and_charge_nothing(
    sites: list[dict], tmp_path: Path, ask: str, skip_join: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trusted DP run over the plain ClientApp: every client refuses the run in round 0 (the
    server stops before its first round with their reason), or, when the server skips round 0,
    every round."""
    change, reason = ASKS[ask]
    _never_read(monkeypatch)
    if skip_join:
        _skip_join(monkeypatch)
    cfg = {"method": "fedtemp", "rounds": 2, "n-classes": C, "min-clients": 2, "epsilon": 1.0}
    cfg.update(change, **{"out-dir": str(tmp_path / "out")})
    with pytest.warns(UserWarning) if "noise" in change and skip_join else nullcontext():
        with pytest.raises(RuntimeError, match="refused") as err:
            run_local(cfg, sites)
    assert reason in str(err.value)
    for node in sites:
        assert _spent(node) == 0.0
        lines = Path(node["status"]).read_text().splitlines()
        assert lines and all("refused" in ln and reason in ln for ln in lines), lines
        assert skip_join or lines[0].startswith("end: refused the run (")


@pytest.mark.parametrize("skip_join", [False, True], ids=["as shipped", "server skips round 0"])
@pytest.mark.parametrize("ask", [*ASKS, "threshold of K"])
def test_secagg_clients_refuse_before_any_key_and_charge_nothing(
    sites: list[dict], tmp_path: Path, ask: str, skip_join: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Distributed DP run over SecAgg+: every client refuses in round 0, or, when the server
    skips round 0, at SecAgg+'s setup; the server stops with their reasons and releases
    nothing. For ``t = K`` the server is made to skip privcal's own refusal (a server that does
    not run privcal's ServerApp as shipped)."""
    change, reason = ASKS.get(ask, ({"threshold": K}, "not one SecAgg+ can enforce"))
    _never_read(monkeypatch)
    if skip_join:
        _skip_join(monkeypatch)
    if ask == "threshold of K":  # the old clamp: SecAgg+ would reconstruct from K - 1 shares
        monkeypatch.setattr(secagg, "secagg_threshold", lambda t, n: max(2, min(t, n - 1)))
    cfg = {"method": "fedtemp", "rounds": 2, "n-classes": C, "min-clients": 2, "epsilon": 1.0}
    cfg.update(secagg=True, aggregation="distributed", threshold=K - 1)
    cfg.update(change, **{"out-dir": str(tmp_path / "out")})
    shown = "privcal client refused" if skip_join else "refused"
    with pytest.warns(UserWarning) if "noise" in change and skip_join else nullcontext():
        with pytest.raises(RuntimeError, match=shown) as err:
            run_local(cfg, sites)
    assert reason in str(err.value)
    assert not (tmp_path / "out" / "calibrator.json").exists()
    for node in sites:
        assert _spent(node) == 0.0
        lines = Path(node["status"]).read_text().splitlines()
        head = "round setup: refused (" if skip_join else "end: refused the run ("
        assert lines[0].startswith(head) and reason in lines[0]
        # and the server's stop (the client then exits instead of waiting): as shipped from
        # round 0, else from the failed run
        assert len(lines) == 2
        stop = "the run failed: " if skip_join else "0 of 4"
        assert lines[1].startswith(f"end: the server stopped the run ({stop}"), lines


def test_secagg_threshold_is_t_exactly() -> None:
    assert secagg.secagg_threshold(4, 5) == 4
    for t, k in ((5, 5), (1, 5), (6, 5)):
        with pytest.raises(ValueError, match=r"cannot be enforced by SecAgg\+"):
            secagg.secagg_threshold(t, k)


@pytest.mark.parametrize("secagg_run", [False, True], ids=["plain", "secagg+"])
def test_round_0_ends_a_run_no_client_can_pay_for(
    sites: list[dict], tmp_path: Path, secagg_run: bool
) -> None:
    """Spent ledgers: every client refuses the run in round 0 with its ledger's figures, the
    server stops with one line naming why, nothing more is charged and no calibrator is
    written."""
    earlier = f"{task.RUN_LABEL}99, round 1 of 1 (fedtemp)"  # an earlier run's charge
    for node in sites:
        PrivacyOdometer(3.0, ledger=node["ledger"], delta_budget=1e-5).spend(earlier, 2.5)
    cfg = {"method": "fedtemp", "rounds": 2, "n-classes": C, "min-clients": 2, "epsilon": 1.0}
    if secagg_run:
        cfg.update(secagg=True, aggregation="distributed", threshold=K - 1)
    cfg["out-dir"] = str(tmp_path / "out")
    with pytest.raises(RuntimeError, match=r"privcal: refused: 0 of 4 clients joined") as err:
        run_local(cfg, sites)
    assert "ledger has epsilon 0.5 of 3 left" in str(err.value)
    assert not (tmp_path / "out" / "calibrator.json").exists()
    for node in sites:
        assert _spent(node) == 2.5
        first = Path(node["status"]).read_text().splitlines()[0]
        assert first.startswith("end: refused the run (the run costs epsilon 1, delta 1e-05")


def test_a_client_ledger_counts_one_unit(sites: list[dict], tmp_path: Path) -> None:
    """A ledger holding example-level spends (a local fit, a data-source answer) refuses a
    federated run in round 0, and a ledger holding a federated run refuses a data-source query:
    user-level and example-level epsilons do not compose in one ledger; nothing is charged."""
    from privcal.federated.flower.sources import source_refusal

    for node in sites:
        PrivacyOdometer(3.0, ledger=node["ledger"], delta_budget=1e-5).spend("a local fit", 0.5)
    cfg = {"method": "fedtemp", "rounds": 2, "n-classes": C, "min-clients": 2, "epsilon": 1.0}
    cfg["out-dir"] = str(tmp_path / "out")
    with pytest.raises(RuntimeError, match=r"privcal: refused: 0 of 4 clients joined") as err:
        run_local(cfg, sites)
    assert "ledger holds example-level spends" in str(err.value)
    assert all(_spent(node) == 0.5 for node in sites)
    node = {"ledger": str(tmp_path / "run.sqlite"), "budget": 3.0, "delta-budget": 1e-5}
    odo = PrivacyOdometer(3.0, ledger=node["ledger"], delta_budget=1e-5)
    odo.spend(f"{task.RUN_LABEL}5, round 1 of 2 (fedtemp)", 0.4, 1e-5)
    query = {"query": "count", "kwargs": '{"epsilon": 0.25}'}
    reason = source_refusal(node, query, run_id=6)
    assert reason is not None and "ledger holds federated runs (user-level)" in reason


def test_round_0_refuses_a_run_for_another_model(sites: list[dict], tmp_path: Path) -> None:
    """``n-classes`` that is not the width of the clients' logits: refused in round 0, before
    any ledger is charged (it would release a calibrator the sites cannot apply)."""
    cfg = {"method": "fedtemp", "rounds": 2, "n-classes": C + 7, "min-clients": 2}
    cfg.update(epsilon=1.0, **{"out-dir": str(tmp_path / "out")})
    with pytest.raises(RuntimeError, match="privcal: refused") as err:
        run_local(cfg, sites)
    assert f"logits have {C} classes and the run asks for n-classes = {C + 7}" in str(err.value)
    assert all(_spent(node) == 0.0 for node in sites)


def test_round_0_shows_each_client_its_cost(sites: list[dict], tmp_path: Path) -> None:
    cfg = {"method": "fedtemp", "rounds": 2, "n-classes": C, "min-clients": 2, "epsilon": 1.0}
    cfg.update({"out-dir": str(tmp_path / "out"), "plan": "expected to calibrate"})
    run_local(cfg, sites)
    for node in sites:
        lines = Path(node["status"]).read_text().splitlines()
        assert lines[0].startswith("joined run ") and "fedtemp, 2 rounds, epsilon 1" in lines[0]
        assert "charge this client's ledger epsilon 1 over its 2 rounds (2 of 3 left" in lines[0]
        assert lines[1] == "plan: expected to calibrate"
        assert _spent(node) == pytest.approx(1.0)

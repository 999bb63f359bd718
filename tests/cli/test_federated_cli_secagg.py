"""CLI registration of ``privcal federate`` / ``bench maddock2025`` and the SecAgg+ round trip."""

from __future__ import annotations

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from privcal.cli.federate import register


@pytest.fixture()
def apps() -> typer.Typer:
    app, bench = typer.Typer(), typer.Typer()
    app.add_typer(bench, name="bench")
    register(app, bench)
    return app


def test_commands_are_registered(apps: typer.Typer) -> None:
    r = CliRunner().invoke(apps, ["federate", "--help"])
    assert r.exit_code == 0 and "server" in r.output and "client" in r.output
    r = CliRunner().invoke(apps, ["bench", "maddock2025", "--help"])
    assert r.exit_code == 0 and "--quick" in r.output


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--rounds", "0"], "--rounds must be >= 1"),
        (["--sample-rate", "0"], "--sample-rate must be in (0, 1]"),
        (["--clip", "0"], "--clip must be > 0"),
        (["--method", "nope"], "Unknown --method"),
        (["--secagg", "--num-nodes", "4", "--sample-rate", "0.5"], "--sample-rate must be 1"),
        (["--secagg", "--epsilon", "1", "--num-nodes", "2"], "needs --num-nodes >= 3"),
        (["--aggregation", "distributed", "--epsilon", "1", "--num-nodes", "4"], "needs --secagg"),
        (["--aggregation", "distributed", "--secagg", "--num-nodes", "4"], "needs a DP run"),
        (["--aggregation", "local", "--num-nodes", "4"], "'distributed' or 'trusted'"),
        (["--round-timeout", "0"], "--round-timeout"),
        (["--threshold", "3", "--epsilon", "1", "--num-nodes", "4"], "--threshold sizes"),
        (["--secagg", "--epsilon", "1", "--num-nodes", "4", "--threshold", "5"], "in [2,"),
        # t = K: SecAgg+ cannot enforce it (it would unmask K - 1 shares): refused at once
        (["--secagg", "--epsilon", "1", "--num-nodes", "4", "--threshold", "4"], "- 1 = 3]"),
        (["--secagg", "--epsilon", "1", "--num-nodes", "4", "--threshold", "1"], "in [2,"),
        (  # the clients' bound plus the noise tail overflow SecAgg+'s ring (2^31)
            [
                "--secagg",
                "--epsilon",
                "1",
                "--num-nodes",
                "4000",
                "--method",
                "fedbbq",
                "--clip-neg",
                "1e6",
            ],
            "modulus of 2^31 is too small",
        ),
    ],
)
def test_server_bad_input(apps: typer.Typer, args: list[str], msg: str) -> None:
    pytest.importorskip("flwr")
    r = CliRunner().invoke(apps, ["federate", "server", "--n-classes", "3", "--insecure", *args])
    assert r.exit_code == 2
    assert msg in r.output


def test_client_bad_budget(apps: typer.Typer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("flwr")
    f = tmp_path / "d.npz"
    np.savez(f, logits=np.zeros((2, 3)), labels=np.array([0, 1]))
    r = CliRunner().invoke(
        apps, ["federate", "client", "--data", str(f), "--budget", "0", "--insecure"]
    )
    assert r.exit_code == 2 and "--budget must be > 0" in r.output


def test_secaggplus_scaling_round_trip() -> None:
    """Reproduce Flower's SecAgg+ arithmetic (quantise, sum, dequantise) on scaled payloads."""
    pytest.importorskip("flwr")
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    from privcal.federated.flower.secagg import from_wire, to_wire

    rng = np.random.default_rng(0)
    bound, r_clip, q = 50.0, 8.0, 2**22
    payloads = [rng.uniform(-bound, bound, size=(2, 3, 8)) for _ in range(7)]
    # client: weight ratio 1 (num_examples = 1 = max_weight), quantise the scaled payload
    qs = [quantize([to_wire(p, bound, r_clip)], r_clip, q)[0].astype(np.int64) for p in payloads]
    total_q = np.sum(qs, axis=0)
    # server: dequantise the sum, remove the (n - 1) extra offsets, divide by sum of ratios (n)
    n = len(payloads)
    mean = (dequantize([total_q], r_clip, q)[0] - (n - 1) * r_clip) / n
    got = from_wire(mean, n, bound, r_clip)
    plain = np.sum(payloads, axis=0)
    assert np.abs(got - plain).max() <= 2 * n * bound / q + 1e-9
    assert np.abs(got - plain).max() > 0  # it is quantised, not exact


def _client(apps: typer.Typer, tmp_path, *args: str, monkeypatch=None):  # type: ignore[no-untyped-def]
    f = tmp_path / "d.npz"
    np.savez(f, logits=np.zeros((2, 3)), labels=np.array([0, 1]))
    return CliRunner().invoke(apps, ["federate", "client", "--data", str(f), "--insecure", *args])


@pytest.mark.parametrize(
    ("text", "args", "msg"),
    [
        ("max-epsilon = [", [], "not valid TOML"),
        ("max-epsilon = 0.0", [], "max_epsilon"),
        ("", ["--accept", "distributed,everyone"], "'accept'"),
        ("", ["--min-threshold", "0"], "min_threshold"),
        ("", ["--collusion-margin", "-1"], "collusion_margin"),
    ],
)
def test_client_bad_policy_is_one_line_before_anything_runs(
    apps: typer.Typer,
    tmp_path,
    monkeypatch,
    text: str,
    args: list[str],
    msg: str,  # type: ignore[no-untyped-def]
) -> None:
    pytest.importorskip("flwr")
    import privcal.cli.federate_client as fed

    monkeypatch.setattr(fed, "_run_client", lambda *a: pytest.fail("the client started"))
    policy = tmp_path / "p.policy.toml"
    policy.write_text(text + "\n")
    r = _client(apps, tmp_path, "--policy", str(policy), *args)
    assert r.exit_code == 2 and msg in r.output, r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) <= 3


def test_client_policy_from_the_ledgers_file_and_options(  # type: ignore[no-untyped-def]
    apps: typer.Typer, tmp_path, monkeypatch
) -> None:
    """The policy next to the ledger is read; options override its keys; the node carries it."""
    pytest.importorskip("flwr")
    import privcal.cli.federate_client as fed
    from privcal.federated.policy import ClientPolicy

    seen = {}
    monkeypatch.setattr(fed, "_run_client", lambda node, *a: seen.update(node))
    (tmp_path / "l.policy.toml").write_text('max-epsilon = 0.5\naccept = ["distributed"]\n')
    args = ["--min-threshold", "3", "--collusion-margin", "1"]
    r = _client(apps, tmp_path, "--ledger", str(tmp_path / "l.sqlite"), *args)
    assert r.exit_code == 0, r.output
    assert "policy: epsilon <= 0.5" in r.output and "t >= 3" in r.output
    assert "withstand 1 colluding clients" in r.output
    want = ClientPolicy(0.5, 1e-5, 3, ("distributed",), collusion_margin=1)
    assert ClientPolicy.from_node(seen) == want
    r = _client(apps, tmp_path, "--budget", "2")  # no ledger, no file: --budget bounds a run
    assert ClientPolicy.from_node(seen).max_epsilon == 2.0


@pytest.mark.parametrize(
    ("log", "code", "msg"),
    [
        ("privcal: budget: every client refused round 1 (x)\n", 3, "every client refused"),
        ("BudgetExceededError: Privacy budget of odometer 'h0' exceeded\n", 3, "budget"),
        ("privcal: round 1 has 0 accepted updates\n", 1, "round 1 has 0 accepted"),
        # round 0: every client refused (docs/cli.md: "3 when a privacy budget refuses (a
        # client whose ledger is spent, or a run every client refused)"); it exited 2
        ("RuntimeError: privcal: refused: 0 of 3 clients joined; (x)\n", 3, "0 of 3 clients"),
    ],
)
def test_server_exit_status_follows_the_run_log(
    tmp_path, capsys, log: str, code: int, msg: str
) -> None:  # type: ignore[no-untyped-def]
    """A budget refusal in the run (or in round 0) exits 3, any other failure 1 (docs/cli.md:
    2 is bad input), each with one Error line."""
    import subprocess

    from privcal.cli.federate import _server_end

    res = subprocess.CompletedProcess([], 1, log, "")
    with pytest.raises(typer.Exit) as exit_info:
        _server_end(res, tmp_path)
    assert exit_info.value.exit_code == code
    err = capsys.readouterr().err
    assert err.count("Error:") == 1 and msg in err


def test_a_traceback_line_that_quotes_a_privcal_line_is_not_one(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The ServerApp's traceback quotes its source (``raise RuntimeError(f"privcal: ...")``):
    the console shows only the error's message, and the refusal names the reason once."""
    import io
    import subprocess

    from privcal.cli.federate import _server_end, _server_line

    log = (
        "privcal: client 7 refused the run: its ledger is spent\n"
        '    raise RuntimeError(f"privcal: refused: {reason}.")\n'
        "RuntimeError: privcal: refused: 0 of 3 clients joined (3 refused, e.g. spent (x)).\n"
    )
    show = _server_line(io.StringIO())
    for line in log.splitlines():
        show(line)
    shown = capsys.readouterr().err
    assert "{reason}" not in shown and shown.count("0 of 3 clients joined") == 1
    with pytest.raises(typer.Exit) as exit_info:
        _server_end(subprocess.CompletedProcess([], 1, log, ""), tmp_path)
    assert exit_info.value.exit_code == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "refused: 0 of 3 clients joined (3 refused, e.g. spent (x)). Its log is" in err, err


def test_secaggplus_ring_round_trip_is_exact() -> None:
    """Ring residues cross Flower's own SecAgg+ arithmetic (quantise with the ring ranges, sum
    modulo M, dequantise, the workflow's offset and ratio) and come back exactly."""
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    from privcal.federated.flower.secagg import residues_to_wire, ring_ranges, wire_to_residues

    bits = 31
    r, q, m = ring_ranges(bits)
    rng = np.random.default_rng(0)
    n = 7
    residues = rng.integers(0, m, size=(n, 5), dtype=np.int64).astype(np.uint64)
    residues[0, :2] = [0, m - 1]  # the ring's edges
    quantised = [quantize([residues_to_wire(v, bits)], r, q)[0] for v in residues]
    assert all(
        np.array_equal(a, v.astype(np.int64)) for a, v in zip(quantised, residues, strict=True)
    )
    modular = np.sum(quantised, axis=0, dtype=np.int64) % m
    ratio = (n * q) % m  # the weight factors' modular sum (num_examples = max_weight = 1)
    mean = (dequantize([modular], r, q)[0] - (n - 1) * r) * (q / ratio)
    expected = residues.astype(np.int64).sum(axis=0) % m
    assert wire_to_residues(mean, n, bits).tolist() == expected.tolist()


@pytest.mark.slow  # several seconds (tests/README.md)
def test_a_client_that_never_reached_the_server_says_where_it_tried(
    apps: typer.Typer, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("flwr")
    from privcal.federated.flower.deploy import free_port

    f = tmp_path / "d.npz"
    np.savez(f, logits=np.zeros((2, 3)), labels=np.array([0, 1]))
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    r = CliRunner().invoke(
        apps,
        ["federate", "client", "--data", str(f), "--superlink", address, "--retry-s", "2",
         "--accept", "none", "--insecure"],
    )  # fmt: skip
    assert r.exit_code == 1, r.output
    assert f"Could not reach the server at {address} within 2 s (--retry-s)" in r.output
    assert "Traceback" not in r.output


def test_a_supernode_that_stopped_on_its_own_is_named_not_the_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A SuperNode that fails at start-up (its port taken) used to make the client say it
    could not reach the server; the client now shows the SuperNode's own last error. One that
    gave up on the server after --retry-s still says the server was not reached."""
    from privcal.cli.federate_client import _crash_line

    log = tmp_path / "supernode.log"
    log.write_text(
        "\x1b[92mINFO \x1b[0m:      Starting Flower SuperNode\n"
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 5): "
        "address already in use\n"
        "RuntimeError: SuperNode Runtime HTTP API failed to start.\n"
    )
    assert _crash_line(log) == "RuntimeError: SuperNode Runtime HTTP API failed to start."
    log.write_text(
        "WARNING:   Giving up reconnection after 3.00 seconds and 8 tries.\n"
        "\x1b[91mERROR \x1b[0m:     Exit Code: 305\n"
    )
    assert _crash_line(log) is None
    assert _crash_line(tmp_path / "missing.log") is None

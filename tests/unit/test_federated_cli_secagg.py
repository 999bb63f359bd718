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
        (["--secagg", "--sample-rate", "0.5"], "--sample-rate must be 1"),
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

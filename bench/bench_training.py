"""Training throughput: privcal's DP-SGD wrapper vs plain Opacus, and DP-SGLD vs DP-SGD.

Same process, same model (digits MLP 64-64-10 or the digits CNN), same Poisson batch (expected
256) and data pipeline, on one device; steps/s of the training loop (setup excluded), best of
``k`` repetitions.

    .venv/bin/python bench/bench_training.py [--steps 200] [--k 5] [--model mlp|cnn]
                                             [--device cpu|cuda]

``--defaults`` instead prints the issue-13 table: ``DPSGLDTrainer(model, epsilon=e)`` against
``DPSGDTrainer(model, epsilon=e)`` on the digits 70/30 split, epsilon 1 and 8, seeds 0-2
(:func:`privcal.experiments.knolle2021.compare_defaults`, the function the test uses).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
torch.set_num_threads(1)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return torch.tensor(X / 16, dtype=torch.float32), torch.tensor(y)


def plain_opacus(
    steps: int, X: torch.Tensor, y: torch.Tensor, batch: int, model_name: str, device: str
) -> float:
    """The Opacus tutorial loop: make_private_with_epsilon, Poisson loader, CE loss, SGD."""
    import opacus

    from privcal.training.models import make_model
    from privcal.training.trainers import poisson_loader

    model = make_model(model_name, 64, 10, seed=0).to(device)
    X, y = X.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = poisson_loader(X, y, batch, generator=torch.Generator().manual_seed(0))
    engine = opacus.PrivacyEngine(accountant="rdp")
    model, opt, loader = engine.make_private_with_epsilon(
        module=model,
        optimizer=opt,
        data_loader=loader,
        target_epsilon=8.0,
        target_delta=1e-5,
        epochs=max(1, steps // len(loader)),
        max_grad_norm=1.0,
        noise_generator=torch.Generator(device=device).manual_seed(1),
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    t, start = 0, time.perf_counter()
    while t < steps:
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
            t += 1
            if t == steps:
                break
    _sync(device)
    return steps / (time.perf_counter() - start)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed_fit(trainer: object, X: torch.Tensor, y: torch.Tensor) -> float:
    """steps/s of the trainer's loop only (setup and accounting timed out)."""
    from privcal.training import trainers

    real = trainers._train_loop
    box: dict[str, float] = {}

    def timed(*a: object, **kw: object) -> int:
        s = time.perf_counter()
        n = real(*a, **kw)  # type: ignore[arg-type]
        _sync(str(trainer.device))  # type: ignore[attr-defined]
        box["rate"] = n / (time.perf_counter() - s)
        return n

    trainers._train_loop = timed
    import privcal.training.sgld as sgld

    sgld._train_loop = timed
    try:
        trainer.fit(X.numpy(), y.numpy())  # type: ignore[attr-defined]
    finally:
        trainers._train_loop = real
        sgld._train_loop = real
    return box["rate"]


def defaults_table(model: str) -> None:
    """Means over seeds 0-2 of accuracy, ECE, epsilon spent and fit CPU seconds, as Markdown."""
    from privcal.experiments.knolle2021 import compare_defaults

    rows = compare_defaults(epsilons=(1.0, 8.0), seeds=(0, 1, 2), model=model)
    print(f"model {model}; digits 70/30 split; means over seeds 0, 1, 2 (seeded: not private)")
    print("| epsilon | trainer (defaults) | accuracy | ECE | epsilon spent | CPU s per fit |")
    print("|---|---|---|---|---|---|")
    for eps in (1.0, 8.0):
        for trainer in ("DPSGDTrainer", "DPSGLDTrainer"):
            sel = [r for r in rows if r["trainer"] == trainer and r["epsilon"] == eps]
            m = {k: np.mean([r[k] for r in sel]) for k in sel[0] if k not in ("trainer",)}
            print(
                f"| {eps:g} | {trainer} | {m['accuracy']:.4f} | {m['ece']:.4f} | "
                f"{m['epsilon_spent']:.3f} | {m['cpu_seconds']:.2f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--defaults", action="store_true", help="the defaults table (issue 13)")
    args = ap.parse_args()
    if args.defaults:
        defaults_table(args.model)
        return
    m, dev = args.model, args.device
    print(
        f"model {m}, device {dev}" + (f" ({torch.cuda.get_device_name()})" if "cuda" in dev else "")
    )
    from privcal.training import DPSGDTrainer, DPSGLDTrainer

    X, y = _data()
    batch = 256
    per_epoch = int(np.ceil(len(y) / batch))
    epochs = max(1, args.steps // per_epoch)
    rates: dict[str, list[float]] = {
        "opacus": [],
        "privcal DP-SGD": [],
        "privcal DP-SGLD": [],
        "DP-SGLD no prenoise": [],
    }
    for _ in range(args.k):  # interleaved, so load changes hit all three alike
        rates["opacus"].append(plain_opacus(epochs * per_epoch, X, y, batch, m, dev))
        rates["privcal DP-SGD"].append(
            _timed_fit(DPSGDTrainer(m, epochs=epochs, lr=0.5, batch_size=batch, device=dev), X, y)
        )
        for label, rho in (("privcal DP-SGLD", 0.046), ("DP-SGLD no prenoise", 0.0)):
            sgld = DPSGLDTrainer(
                m,
                epochs=epochs,
                lr=0.5,
                batch_size=batch,
                temperature="auto",
                prenoise=rho,
                device=dev,
            )
            rates[label].append(_timed_fit(sgld, X, y))
    best = {k: max(v) for k, v in rates.items()}
    for k, v in best.items():
        print(f"{k:18s} best {v:8.1f} steps/s   all: {', '.join(f'{r:.0f}' for r in rates[k])}")

    def ratio(num: str, den: str) -> str:
        """Ratio of best rates, and the median of the per-repetition (paired) ratios."""
        paired = np.median(np.array(rates[num]) / np.array(rates[den]))
        return f"{best[num] / best[den]:.3f} (median of paired ratios {paired:.3f})"

    print(f"privcal DP-SGD / opacus  = {ratio('privcal DP-SGD', 'opacus')}, goal >= 0.95")
    print(f"DP-SGLD / DP-SGD         = {ratio('privcal DP-SGLD', 'privcal DP-SGD')}, goal >= 0.90")
    print(f"DP-SGLD (rho=0) / DP-SGD = {ratio('DP-SGLD no prenoise', 'privcal DP-SGD')}")


if __name__ == "__main__":
    main()

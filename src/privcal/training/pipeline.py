"""The DP recalibration pipeline (seed 001 Algorithm 1): train on one part, recalibrate on the
other.

:class:`DPRecalibration` splits the training data by a keyed hash of each example
(:func:`recalibration_side`, ``validation_ratio``, default 0.1), trains the model with DP-SGD on
one part and the recalibrator (e.g. :class:`~privcal.training.DPTemperatureScaling`) with DP-SGD
on the other; by parallel composition over the disjoint parts (seed 001 Prop. A.1) the pair is
``(max eps, max delta)``-DP, which its ``privacy_report_`` shows (derivation in the class
docstring).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import numpy as np

from privcal._params import check_int, check_probability
from privcal.calibrators.base import Calibrator
from privcal.privacy import PrivacyReport
from privcal.privacy.odometer import as_odometer

__all__ = ["DPRecalibration", "recalibration_side", "split_key"]


def split_key(seed: int | bytes | None) -> bytes:
    """The split's hash key: 32 bytes from the OS CSPRNG for ``None``, else from ``seed``."""
    if seed is None:
        return secrets.token_bytes(32)
    if isinstance(seed, bytes):
        return seed
    return int(seed).to_bytes(8, "little")


def recalibration_side(X: np.ndarray, y: np.ndarray, key: bytes, ratio: float) -> np.ndarray:
    """``True`` where example ``i`` goes to the recalibration part: a keyed hash of its own row.

    ``h_i = BLAKE2b_key(bytes(X_i) || bytes(y_i))`` read as an integer in ``[0, 2^64)``; the
    example goes to recalibration iff ``h_i < ratio 2^64``. Each example's side depends on the
    key and on that example only: not on ``n``, its position or the other rows.
    """
    Xc = np.ascontiguousarray(X)
    yc = np.ascontiguousarray(y)
    k = key[:64]
    threshold = int(ratio * 2**64)
    side = np.empty(Xc.shape[0], dtype=bool)
    for i in range(Xc.shape[0]):
        h = hashlib.blake2b(Xc[i].tobytes() + yc[i].tobytes(), digest_size=8, key=k)
        side[i] = int.from_bytes(h.digest(), "little") < threshold
    return side


class DPRecalibration:
    """Seed 001 Algorithm 1: DP-SGD on one part, DP recalibration on the other.

    Parameters
    ----------
    trainer : privcal.training.DPSGDTrainer (or DPSGLDTrainer / SGDTrainer)
        Trains the classifier on the training part (it is cloned, not modified).
    calibrator : Calibrator
        Fitted on the classifier's logits on the recalibration part, e.g.
        :class:`DPTemperatureScaling` or :class:`DPPlattScaling`. A non-private calibrator is
        accepted for baselines; the result then has no guarantee (``privacy_report_`` is None).
    validation_ratio : float, default=0.1
        Probability that an example goes to the recalibration part, in ``(0, 1)`` (the part's
        size is ``Binomial(n, validation_ratio)``, not a fixed share).
    seed : int, bytes or None, default=None
        Key of the per-example hash that splits the data (:func:`recalibration_side`); ``None``
        draws 32 bytes from the OS CSPRNG. An int or bytes key makes the split reproducible;
        it may be public (the guarantee below does not need it secret).

    Attributes
    ----------
    trainer_, calibrator_ : the fitted trainer and calibrator
    train_index_, recal_index_ : ndarray
        The disjoint parts.
    privacy_report_ : PrivacyReport or None
        Releases of both stages, sources ``"train"`` and ``"recalibration"``; its epsilon is
        their parallel composition ``max(eps_train, eps_recal)``.

    Privacy
    -------
    Add/remove one example of the training data. Example ``x`` goes to recalibration iff
    ``hash_key(x) < ratio 2^64``, a function of the key and of ``x`` alone, with the key drawn
    independently of the data. So for ``D' = D + {x}`` every other example keeps its side, and
    the two parts of ``D'`` are those of ``D`` with ``x`` added to exactly one of them: the
    training parts are add/remove neighbours and the recalibration parts equal, or the other way
    round. The classifier is ``(eps_1, delta_1)``-DP in the training part and the recalibrator,
    given the released classifier, ``(eps_2, delta_2)``-DP in the recalibration part, so the pair
    is ``(max eps, max delta)``-DP (seed 001 Prop. A.1; McSherry 2009, Thm. 4), not the sum. A
    split by a seeded permutation of ``range(n)`` has no such property: adding one example
    reshuffles every other example's side. Both stages must claim add/remove; a stage claiming
    another relation raises ``ValueError``.

    Ledger: when the trainer or the calibrator has a ``ledger=``, both stages charge that one
    ledger (a stage without one is given it; two ledgers, or a non-private stage, raise
    ``ValueError``), and the pipeline's ``(eps_1 + eps_2, delta_1 + delta_2)`` is checked against
    it before the first stage is charged, so a refused calibrator burns nothing. The ledger is
    charged both stages (basic composition), above the parallel composition stated here.
    """

    def __init__(
        self,
        trainer: Any,
        calibrator: Calibrator,
        *,
        validation_ratio: float = 0.1,
        seed: int | bytes | None = None,
    ) -> None:
        self.trainer = trainer
        self.calibrator = calibrator
        self.validation_ratio = validation_ratio
        self.seed = seed

    def _split(self, Xa: np.ndarray, ya: np.ndarray, ratio: float) -> None:
        if self.seed is not None and not isinstance(self.seed, bytes):
            check_int(self.seed, "seed", "DPRecalibration", low=0)
        side = recalibration_side(Xa, ya, split_key(self.seed), ratio)
        self.recal_index_ = np.flatnonzero(side)
        self.train_index_ = np.flatnonzero(~side)
        if self.recal_index_.size == 0 or self.train_index_.size == 0:
            raise ValueError(
                f"DPRecalibration: the split with validation_ratio={ratio!r} left "
                f"{self.recal_index_.size} of {side.size} examples for recalibration; both parts "
                "must be non-empty (use more data or a ratio nearer 0.5)."
            )

    def fit(self, X: Any, y: Any) -> DPRecalibration:
        """Split, train, recalibrate; returns ``self``."""
        import copy

        ratio = check_probability(self.validation_ratio, "validation_ratio", "DPRecalibration")
        if not isinstance(self.calibrator, Calibrator):
            raise ValueError(
                "The 'calibrator' parameter of DPRecalibration must be a privcal Calibrator. "
                f"Got {self.calibrator!r} instead."
            )
        Xa = np.asarray(X)
        ya = np.asarray(y)
        self._split(Xa, ya, ratio)
        trainer = copy.deepcopy(self.trainer)
        calibrator = copy.deepcopy(self.calibrator)
        _one_ledger(trainer, calibrator)
        n_classes = int(ya.max()) + 1
        inferred = getattr(trainer, "n_classes", 0) is None
        if inferred:  # all the labels' classes, which the training split may lack
            trainer.n_classes = n_classes
        trainer.fit(Xa[self.train_index_], ya[self.train_index_])
        logits = trainer.predict_logits(Xa[self.recal_index_])
        calibrator.fit(logits, ya[self.recal_index_])
        self.trainer_ = trainer
        self.calibrator_ = calibrator
        found = (getattr(stage, "privacy_report_", None) for stage in (trainer, calibrator))
        reports = [r for r in found if isinstance(r, PrivacyReport)]
        self.privacy_report_: PrivacyReport | None = None
        if len(reports) == 2:
            self.privacy_report_ = _parallel_report(reports, n_classes if inferred else 0)
        return self

    def predict_logits(self, X: Any) -> np.ndarray:
        """The classifier's (uncalibrated) logits."""
        return np.asarray(self.trainer_.predict_logits(X))

    def predict_proba(self, X: Any) -> np.ndarray:
        """Recalibrated probabilities ``g_phi(h_theta(X))``."""
        return np.asarray(self.calibrator_.predict_proba(self.predict_logits(X)))


def _one_ledger(trainer: Any, calibrator: Any) -> None:
    """Make both stages (copies) charge one ledger when either has one, and check the whole
    pipeline against it before the first stage is charged.

    Both stages read the same data, so both charges belong on its ledger: a stage charged
    elsewhere, or not private (no ``ledger=``), would use the data off the record, and a
    calibrator refused after the trainer was charged would burn the trainer's budget for a
    model never returned. The check is basic composition of the two stages' ``(epsilon,
    delta)`` (each stage then charges its own releases); the ledger is charged their sum,
    above the parallel composition the report states.
    """
    stages = (trainer, calibrator)
    given = [getattr(s, "ledger", None) for s in stages]
    if all(g is None for g in given):
        return
    odometers = [o for o in (as_odometer(g, "DPRecalibration") for g in given) if o is not None]
    where = {id(o) if o.ledger is None else o.ledger.resolve() for o in odometers}
    if len(where) > 1 or not all(hasattr(s, "ledger") for s in stages):
        pairs = zip(stages, given, strict=True)
        names = ", ".join(f"{type(s).__name__}(ledger={g!r})" for s, g in pairs)
        raise ValueError(
            f"DPRecalibration: both stages read the same data, so both must charge one ledger "
            f"(or neither); got {names}. Give the trainer and the calibrator the same ledger, "
            "and a private calibrator and trainer (they take ledger=)."
        )
    odometer = odometers[0]
    for stage in stages:
        stage.ledger = odometer
    epsilon = sum(float(s.epsilon) for s in stages)
    delta = sum(float(getattr(s, "delta", 0.0)) for s in stages)
    odometer.check("DPRecalibration.fit (trainer and calibrator)", epsilon, delta)


def _parallel_report(reports: list[PrivacyReport], inferred_classes: int = 0) -> PrivacyReport:
    """One report over both stages: parallel composition by source, add/remove only
    (``inferred_classes``: the trainer's number of classes, read from the labels)."""
    for r in reports:
        if r.relation != "add/remove":
            raise ValueError(
                f"DPRecalibration composes stages over its hash split under add/remove; a stage "
                f"claims {r.relation!r}. Use a trainer and calibrator whose privacy reports "
                "claim add/remove (e.g. DPSGDTrainer and DPTemperatureScaling)."
            )
    from privcal.training.trainers import classes_public

    declared = classes_public(inferred_classes, declared=True) if inferred_classes else None
    said = classes_public(inferred_classes, declared=False)
    public = dict.fromkeys(said if p == declared else p for r in reports for p in r.public)
    public["split rule: keyed hash of each example (key independent of the data)"] = None
    return PrivacyReport(
        [rel for r in reports for rel in r.releases],
        unit="example",
        relation="add/remove",
        public=tuple(public),
        noise="secure" if all(r.private for r in reports) else "seeded",
    )

"""Flower 1.41's SecAgg+ protocol as privcal runs it: the server's workflow and the client's
checks of the upload and unmask requests, with the corrections each needs.

* :class:`HaltingSecAggPlus`: a halted stage ends the run with the clients' reasons
  (:func:`failure_reason`) instead of skipping the round silently; after the share-keys stage
  the round's clients are the key holders (:func:`only_key_holders`), so a client gone before
  sharing its keys is not a dropout whose key share the survivors must send.
* :func:`share_keys_refusal`: a client refuses a round with more key holders than the run's
  declared ``K``.
* :func:`upload_refusal`: a client refuses an upload request whose forwarded key shares are
  not from distinct clients it shares keys with (what its collusion margin counts), or do not
  decrypt as their sources' (before its data is read and charged).
* :func:`unmask_refusal`: a client refuses an unmask request that would hand the server both
  secrets of one client (Flower's client checks neither).

Used by :mod:`privcal.federated.flower.secagg` (the ClientApp's ``policy_mod``, the ServerApp).
"""

from __future__ import annotations

import re
from typing import Any

from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
from flwr.common.secure_aggregation.crypto.symmetric_encryption import decrypt
from flwr.common.secure_aggregation.secaggplus_constants import Key
from flwr.common.secure_aggregation.secaggplus_utils import share_keys_plaintext_separate
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

__all__ = [
    "HaltingSecAggPlus",
    "failure_reason",
    "only_key_holders",
    "share_keys_refusal",
    "unmask_refusal",
    "upload_refusal",
]


def unmask_refusal(configs: Any, state: SecAggPlusState) -> str | None:
    """Why this client refuses SecAgg+'s unmask request (``configs``), given its own SecAgg+
    ``state``; or ``None``.

    The server asks each survivor for two kinds of share: the mask seed of every client it
    lists active, the private key of every client it lists dropped. A client listed as both,
    or this client listed as dropped, would give the server both secrets of one client, which
    strip every mask from that client's upload: the upload alone, ``1 / t`` of the noise
    variance (the report's fallback epsilon), with no colluding client. Flower 1.41's client
    checks neither. So a client answers only for clients it holds shares of, each listed once,
    and never as dropped itself.

    A server that shows different clients different lists needs ``t`` survivors to list a
    client active and ``t`` others to list it dropped: at least ``2t`` survivors. The default
    ``t = K - max(1, K // 5)`` is above ``K / 2``, so it cannot, and a client's policy refuses
    a smaller ``--threshold`` unless it opts in (``allow_minority_threshold``; docs/privacy.md).
    """
    active = [int(str(n)) for n in configs.get(Key.ACTIVE_NODE_ID_LIST, [])]
    dropped = [int(str(n)) for n in configs.get(Key.DEAD_NODE_ID_LIST, [])]
    both = sorted(set(active) & set(dropped))
    if both:
        return f"the unmask request lists clients {both} as both active and dropped"
    if getattr(state, "nid", None) in dropped:
        return "the unmask request lists this client, which is answering, as dropped"
    if len(set(active)) != len(active) or len(set(dropped)) != len(dropped):
        return "the unmask request lists a client twice"
    unknown = sorted(set(active + dropped) - set(getattr(state, "rd_seed_share_dict", {})))
    if unknown:
        return f"the unmask request lists clients {unknown} this client holds no shares of"
    return None


def share_keys_refusal(configs: Any, state: SecAggPlusState, k: int) -> str | None:
    """Why this client refuses SecAgg+'s share-keys request (``configs``: the public keys of
    the clients that answered the setup, by node id), given its own SecAgg+ ``state`` and the
    run's declared ``k``; or ``None``.

    The clients of this request are the round's key holders: every later count (the upload's
    sources, the unmask's lists) is a subset of them. More than ``K`` (or than the sample the
    setup declared) would let a server that connected more clients than the run declares split
    the unmask requests among ``2t`` of them (:func:`unmask_refusal`), which a threshold above
    ``K / 2`` is meant to rule out. The setup's own check (at most ``K`` shares per secret,
    :meth:`~privcal.federated.policy.ClientPolicy.secagg_refusal`) already makes Flower 1.41's
    client fail on more key holders than shares (an ``IndexError``); this check says why, and
    holds whatever Flower does.
    """
    holders = [key for key in configs if key != Key.STAGE]
    most = min(int(k), int(getattr(state, "sample_num", k) or k))
    if len(holders) > most:
        return (
            f"the share-keys request lists {len(holders)} clients, more than the round's "
            f"{most} (the run's declared K={k} and the setup's sample)"
        )
    return None


def upload_refusal(configs: Any, state: SecAggPlusState) -> str | None:
    """Why this client refuses SecAgg+'s request for its masked upload (``configs``), given its
    own SecAgg+ ``state``; or ``None``.

    The request forwards the key shares of the clients that shared their keys with this one, one
    ciphertext per source. Its sources are what a collusion margin counts (:func:`~privcal.
    federated.flower.secagg.policy_mod`), so they must be distinct clients this one shares a key
    with: a source listed twice is decrypted twice by Flower 1.41's client, and a server that
    repeats one pair's shares in both clients' lists gets a sum whose doubled masks still cancel
    while each of the two counts one client that is not in it.
    """
    sources = [int(str(n)) for n in configs.get(Key.SOURCE_LIST, [])]
    if len(sources) != len(configs.get(Key.CIPHERTEXT_LIST, [])):
        return "the upload request's sources and key shares differ in number"
    if len(set(sources)) != len(sources):
        return "the upload request lists a client's key shares twice"
    keys = getattr(state, "ss2_dict", {})
    unknown = sorted(set(sources) - set(keys))
    if unknown:
        return (
            f"the upload request forwards key shares from clients {unknown} this client shares "
            "no key with"
        )
    for src, ciphertext in zip(sources, configs.get(Key.CIPHERTEXT_LIST, []), strict=True):
        try:  # Flower decrypts them only after the round's fit (charged): check them first
            origin, dst, _, _ = share_keys_plaintext_separate(decrypt(keys[src], ciphertext))
        except Exception:
            origin, dst = None, None
        if (origin, dst) != (src, getattr(state, "nid", None)):
            return f"the upload request's key share from client {src} does not decrypt as one"
    return None


class HaltingSecAggPlus(SecAggPlusWorkflow):
    """Flower's SecAgg+ workflow, except that a halted stage ends the run with the clients'
    reasons (a refusal by a client's policy, too few survivors for the threshold) instead of
    skipping the round silently and releasing the initial calibrator at the end."""

    @classmethod
    def of(
        cls, k: int, reconstruction: int, ranges: tuple[float, int, int], timeout: float
    ) -> HaltingSecAggPlus:
        """The workflow for ``k`` shares, ``ranges = (clipping, quantization, modulus)`` and
        ``max_weight = 1`` (``num_examples = 1``: full quantisation precision, module
        docstring)."""
        clipping, quantization, modulus = ranges
        return cls(
            num_shares=k,
            reconstruction_threshold=reconstruction,
            max_weight=1.0,
            clipping_range=clipping,
            quantization_range=quantization,
            modulus_range=modulus,
            timeout=timeout,
        )

    def __call__(self, grid: Any, context: Any) -> None:
        state = WorkflowState()
        for step in (
            self.setup_stage,
            self.share_keys_stage,
            self.collect_masked_vectors_stage,
            self.unmask_stage,
        ):
            ok = step(grid, context, state)
            if ok and step == self.share_keys_stage:
                only_key_holders(state)
            if not ok:
                reasons = sorted({failure_reason(f) for f in state.failures})
                detail = "; ".join(reasons) if reasons else "too few clients answered"
                raise RuntimeError(
                    f"privcal: SecAgg+ halted at its {step.__name__.removesuffix('_stage')} "
                    f"stage (reconstruction threshold {state.threshold}, "
                    f"{len(state.active_node_ids)} active clients): {detail}. Nothing of this "
                    "round was released."
                )


def only_key_holders(state: WorkflowState) -> None:
    """After the share-keys stage: the round's clients, and each one's neighbours, are those
    that shared their keys.

    A client masks its upload only against the clients whose key shares it received. Flower
    1.41's unmask stage counts as dropped every client sent the setup that did not upload a
    masked vector (``sampled - active``), asks the survivors for its key share, and removes a
    dropped client's masks against every neighbour. A client that left before sharing its keys
    (a node killed during the previous round, still listed until its heartbeat lapses; one that
    refused the run and exited) therefore made every survivor fail the stage with ``KeyError``;
    beside a client dropped at the masked-vectors stage it made the server look up a public key
    it never had (setup) or remove a mask no upload carried (share-keys: a wrong sum).
    """
    holders = set(state.active_node_ids)
    state.sampled_node_ids = holders
    state.nid_to_neighbours = {
        nid: neighbours & holders
        for nid, neighbours in state.nid_to_neighbours.items()
        if nid in holders
    }


def failure_reason(failure: BaseException) -> str:
    """The reason a client gave for an error reply (Flower wraps its ``Error`` in an
    ``Exception``), or the exception's text. A ClientApp's exception, which Flower sends as
    ``<class 'pkg.Error'>:<'text'>``, reads ``a client's ClientApp raised Error: text``."""
    inner = failure.args[0] if failure.args else failure
    reason = str(getattr(inner, "reason", inner))
    raised = re.fullmatch(r"<class '(?:[\w.]+\.)?(\w+)'>:<'(.*)'>", reason, flags=re.S)
    if raised is None:
        return reason
    return f"a client's ClientApp raised {raised[1]}: {raised[2]}"

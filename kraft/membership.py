"""Does this node belong to the cluster its voters run? (startup cross-check of configs)

Theory of operation
-------------------
A node's config names the cluster (``cluster_id``), the controller quorum (``[[voters]]``:
id, Raft address, RPC address) and the cluster secret. pysyncobj cannot tell a node with a
wrong secret that it is wrong — the peers just cannot decrypt its messages and it stays
silently outside the quorum, forever electing itself. So every node (controller or broker)
asks each voter, on that voter's RPC address, ``DESCRIBE_QUORUM {local_only, nonce}``; the
voter answers (``rafka.kraft.service``) with its ``node_id``, ``cluster_id``, the ids of *its*
voters, and a proof that it holds the cluster secret. The node compares with its own config:

* ``ClusterIdMismatchError`` — the voter belongs to another cluster;
* ``VotersMismatchError`` — the voter's set of voter ids differs from ours, or the address we
  list for voter X answers as node Y (addresses may legitimately differ across nodes, e.g.
  behind per-link proxies, so only ids are compared);
* ``ClusterSecretMismatchError`` — the proofs differ (the secret itself never travels).

The secret proof is a challenge both ways (issue 24): anyone can reach the RPC port, and an
HMAC of the secret over a nonce the caller picked is material for guessing the secret
offline. So the first ``DESCRIBE_QUORUM {local_only, nonce}`` gets only a ``challenge`` (the
voter's own nonce, bound to the caller's nonce and a time by an HMAC under a random
per-process key — nothing derived from the secret); the caller answers with
``caller_proof = HMAC(secret, "rafka-caller-proof:" + challenge + ":" + nonce)`` and only a
caller proof that verifies (``hmac.compare_digest``, challenge at most ``CHALLENGE_TTL_S``
old) earns ``secret_proof = HMAC(secret, "rafka-secret-proof:" + nonce + ":" + challenge)``;
a wrong one earns ``secret_proof = ""`` (one online guess per request, no offline oracle).
The two prefixes differ, so a voter cannot be used to compute a caller proof. A voter
without a secret answers ``secret_proof = None`` at once; an older voter that answers the
first request with a proof over the bare nonce is still checked (rolling upgrades).

Who is wrong when two nodes disagree? The majority: a node stops with the error (clear line,
exit code 2: ``rafka/node.py``) once the voters that disagree with it are so many that the
ones left cannot form a majority of the quorum — i.e. it could never take part in a majority
that agrees with its config. A disagreeing voter that is in the minority is reported in the
log (ERROR, once) and the node keeps running. Unreachable voters are retried until each voter
has answered once; the check then ends. The retries back off from 0.1 s to at most 0.25 s
(``UNTIL_AGREED_MAX_S``) while no majority has agreed yet — the node's Raft voter and broker
wait for that, and a voter that is still starting (connection refused) costs nothing to ask
again — and up to 2 s after it (only a minority voter's report is then left).

A voter whose own id is not in its voter list is a ``ConfigError`` before any of this
(``broker/config.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio
from rafka.kraft.quorum import QuorumConfigError
from rafka.wire.protocol import ApiKey

__all__ = [
    "ClusterIdMismatchError",
    "ClusterSecretMismatchError",
    "VotersMismatchError",
    "secret_proof",
    "caller_proof",
    "proof_fields",
    "verify_cluster_membership",
]

log = logging.getLogger("rafka.membership")

_PROOF_PREFIX = b"rafka-secret-proof:"


class ClusterIdMismatchError(QuorumConfigError):
    """The voters run a cluster with another ``cluster_id``."""


class VotersMismatchError(QuorumConfigError):
    """The voters are configured with another quorum (voter ids, or who is at an address)."""


class ClusterSecretMismatchError(QuorumConfigError):
    """This node's cluster secret is not the one the voters use."""


_CALLER_PREFIX = b"rafka-caller-proof:"
# the longest retry interval while this node still waits for a majority (module docstring)
UNTIL_AGREED_MAX_S = 0.25
CHALLENGE_TTL_S = 60.0
_CHALLENGE_KEY = secrets.token_bytes(32)  # per process; never derived from the cluster secret


def secret_proof(secret: str | None, nonce: str) -> str | None:
    """What a node that holds ``secret`` answers to ``nonce`` (None without a secret)."""
    if not secret:
        return None
    return hmac.new(secret.encode(), _PROOF_PREFIX + nonce.encode(), hashlib.sha256).hexdigest()


def caller_proof(secret: str, challenge: str, nonce: str) -> str:
    """What a caller that holds ``secret`` answers to a voter's ``challenge``."""
    msg = _CALLER_PREFIX + challenge.encode() + b":" + nonce.encode()
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def _challenge_mac(stamp: str, nonce: str) -> str:
    return hmac.new(_CHALLENGE_KEY, f"{stamp}:{nonce}".encode(), hashlib.sha256).hexdigest()[:32]


def _challenge_valid(challenge: str, nonce: str, now_s: float) -> bool:
    stamp, _, mac = challenge.partition(".")
    if not stamp.isdigit() or not hmac.compare_digest(mac, _challenge_mac(stamp, nonce)):
        return False
    return 0 <= now_s - int(stamp) <= CHALLENGE_TTL_S


def proof_fields(secret: str | None, nonce: str, challenge: Any, proof: Any,
                 now_s: float | None = None) -> dict[str, Any]:
    """The secret-proof part of a voter's ``DESCRIBE_QUORUM {local_only, nonce}`` answer
    (module docstring): None without a secret, else a challenge, else the proof or ``""``."""
    if not secret:
        return {"secret_proof": None}
    now_s = time.time() if now_s is None else now_s
    if not isinstance(challenge, str) or not isinstance(proof, str):
        stamp = str(int(now_s))
        return {"challenge": f"{stamp}.{_challenge_mac(stamp, nonce)}"}
    if not (_challenge_valid(challenge, nonce, now_s)
            and hmac.compare_digest(proof, caller_proof(secret, challenge, nonce))):
        return {"secret_proof": ""}
    return {"secret_proof": secret_proof(secret, f"{nonce}:{challenge}")}


Request = Callable[[tuple[str, int], dict[str, Any]], Awaitable[dict[str, Any] | None]]


async def _describe_local(addr: tuple[str, int], body: dict[str, Any]) -> dict[str, Any] | None:
    from rafka.wire.connection import connect

    try:
        with trio.move_on_after(2):
            async with connect(*addr) as conn:
                return dict((await conn.request(ApiKey.DESCRIBE_QUORUM, body)).body)
    except Exception as exc:  # noqa: BLE001 - unreachable, not up yet: try again later
        log.debug("membership check: %s:%s unreachable: %s", addr[0], addr[1], exc)
    return None


def _compare(voter_id: int, addr: tuple[str, int], answer: dict[str, Any], *, cluster_id: str,
             voter_ids: list[int], proof: str | None) -> QuorumConfigError | None:
    where = f"voter {voter_id} at {addr[0]}:{addr[1]}"
    if answer.get("error"):
        return VotersMismatchError(
            f"{where} is not a controller (it answers {answer.get('message') or answer.get('error')}); "
            f"check the [[voters]] rpc addresses")
    if answer.get("node_id") is not None and answer["node_id"] != voter_id:
        return VotersMismatchError(
            f"{where} answers as node {answer['node_id']}; the [[voters]] list does not match the "
            "cluster's")
    if answer.get("cluster_id") is not None and answer["cluster_id"] != cluster_id:
        return ClusterIdMismatchError(
            f"{where} belongs to cluster {answer['cluster_id']!r}, this node's cluster_id is "
            f"{cluster_id!r}")
    theirs = answer.get("voter_ids")
    if theirs is not None and sorted(theirs) != voter_ids:
        return VotersMismatchError(
            f"{where} has voters {sorted(theirs)}, this node's config lists {voter_ids}; every node "
            "must list the same controller quorum")
    if "secret_proof" in answer and not _same_proof(answer["secret_proof"], proof):
        return ClusterSecretMismatchError(
            f"{where} does not share this node's cluster secret "
            f"({'it has none' if answer['secret_proof'] is None else 'the secrets differ'}); "
            "use the same cluster_secret / cluster_secret_file on every node")
    return None


def _same_proof(theirs: Any, ours: str | None) -> bool:
    if theirs is None or ours is None:
        return theirs is ours
    return isinstance(theirs, str) and hmac.compare_digest(theirs, ours)


async def _ask(request: Request, addr: tuple[str, int], secret: str | None
               ) -> tuple[dict[str, Any] | None, str | None]:
    """A voter's local answer and the secret proof this node expects in it (two requests
    when the voter challenges: module docstring)."""
    nonce = secrets.token_hex(16)
    answer = await request(addr, {"local_only": True, "nonce": nonce})
    challenge = None if answer is None else answer.get("challenge")
    if answer is None or not isinstance(challenge, str):
        return answer, secret_proof(secret, nonce)  # a voter without a secret, or an older one
    if not secret:  # it has a secret, we have none
        return {**answer, "secret_proof": ""}, None
    answer = await request(addr, {"local_only": True, "nonce": nonce, "challenge": challenge,
                                  "caller_proof": caller_proof(secret, challenge, nonce)})
    return answer, secret_proof(secret, f"{nonce}:{challenge}")


async def verify_cluster_membership(
    node_id: int,
    voters: Sequence[tuple[int, tuple[str, int]]],
    cluster_id: str,
    secret: str | None,
    *,
    request: Request | None = None,
    max_interval_s: float = 2.0,
    agreed: trio.Event | None = None,
) -> None:
    """Returns once every other voter has answered (logging minority disagreements); raises a
    ``QuorumConfigError`` subclass as soon as this node is in the minority (module docstring).
    Sets ``agreed`` once a majority of the voters (this node included, if it is one) is known
    to share its config: the node starts its Raft voter and registers its broker only then."""
    request = request or _describe_local
    ids = sorted(v for v, _ in voters)
    majority = len(ids) // 2 + 1
    pending = {v: addr for v, addr in voters if v != node_id}
    disagree: dict[int, QuorumConfigError] = {}
    agreeing = 1 if node_id in ids else 0
    interval = 0.1

    def check_agreed() -> None:
        if agreed is not None and agreeing >= majority and not agreed.is_set():
            log.info("membership check: %d of %d voters share this node's config", agreeing, len(ids))
            agreed.set()

    check_agreed()
    while pending:
        for vid, addr in sorted(pending.items()):
            answer, proof = await _ask(request, addr, secret)
            if answer is None:
                continue
            del pending[vid]
            err = _compare(vid, addr, answer, cluster_id=cluster_id, voter_ids=ids, proof=proof)
            if err is None:
                agreeing += 1
                check_agreed()
                continue
            disagree[vid] = err
            if len(ids) - len(disagree) < majority:
                others = "; ".join(str(e) for v, e in sorted(disagree.items()) if e is not err)
                raise type(err)(f"node {node_id}: {err}" + (f" (also: {others})" if others else ""))
            log.error("membership check: %s (this node stays up: the voters that agree with it can "
                      "still form a majority)", err)
        if pending:
            await trio.sleep(interval)
            # until a majority agrees this node waits on the check to start its Raft voter and
            # register: after a kill-all the voters come up one by one, and the first one up
            # retrying at 0.8, 1.6 s... found the second up to 0.75 s late (issue 27, "Run E")
            cap = max_interval_s if agreeing >= majority else min(max_interval_s, UNTIL_AGREED_MAX_S)
            interval = min(interval * 2, cap)

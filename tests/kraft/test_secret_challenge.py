"""The DESCRIBE_QUORUM secret proof is a challenge both ways (kraft/membership.py, issue 24)."""

from __future__ import annotations

import time

import pytest
import trio
from rafka.kraft.membership import (
    CHALLENGE_TTL_S,
    ClusterSecretMismatchError,
    caller_proof,
    proof_fields,
    secret_proof,
    verify_cluster_membership,
)


def test_no_proof_without_the_callers_proof() -> None:
    first = proof_fields("s", "n", None, None)
    assert set(first) == {"challenge"}
    assert proof_fields("s", "n", first["challenge"], "f" * 64) == {"secret_proof": ""}
    ok = proof_fields("s", "n", first["challenge"], caller_proof("s", first["challenge"], "n"))
    assert ok == {"secret_proof": secret_proof("s", f"n:{first['challenge']}")}


def test_a_challenge_is_bound_to_its_nonce_and_expires() -> None:
    now = time.time()
    c = proof_fields("s", "n", None, None, now)["challenge"]
    assert proof_fields("s", "other", c, caller_proof("s", c, "other"), now) == {"secret_proof": ""}
    late = now + CHALLENGE_TTL_S + 1
    assert proof_fields("s", "n", c, caller_proof("s", c, "n"), late) == {"secret_proof": ""}
    assert proof_fields(None, "n", None, None) == {"secret_proof": None}


@pytest.mark.parametrize("ours, theirs, ok", [("s", "s", True), ("s", "t", False), (None, "s", False),
                                              ("s", None, False), (None, None, True)])
async def test_membership_check_round_trip(ours, theirs, ok) -> None:
    voters = [(1, ("h", 1)), (2, ("h", 2)), (3, ("h", 3))]

    async def request(addr, body):  # voters 2 and 3, with secret ``theirs``
        out = {"node_id": addr[1], "cluster_id": "c", "voter_ids": [1, 2, 3]}
        out.update(proof_fields(theirs, body["nonce"], body.get("challenge"), body.get("caller_proof")))
        return out

    with trio.fail_after(5):
        if ok:
            await verify_cluster_membership(1, voters, "c", ours, request=request, max_interval_s=0.01)
        else:
            with pytest.raises(ClusterSecretMismatchError):
                await verify_cluster_membership(1, voters, "c", ours, request=request, max_interval_s=0.01)

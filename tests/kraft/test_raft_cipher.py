"""The Raft frame cipher (kraft/raft_cipher.py): what opens, what does not, and that voters
sealing with either cipher form one quorum (a rolling upgrade from Fernet-only voters); the
stored-block compression of small frames (kraft/raft_zlib.py)."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from pysyncobj.encryptor import getEncryptor
from rafka.kraft.quorum import Command
from rafka.kraft.raft_cipher import FRAME_CIPHERS, RaftFrameCipher, RaftFrameError
from rafka.kraft.raft_zlib import STORE_BELOW_BYTES, FrameZlib, stored
from rafka.kraft.syncobj_engine import SyncObjQuorum
from rafka.metadata import LeaderChange, Topic

from tests.kraft.handticked import free_ports

SECRET = "raft-cipher-test-secret"


def _pair(send: str = "aes-gcm") -> tuple[RaftFrameCipher, RaftFrameCipher]:
    return (RaftFrameCipher(SECRET, getEncryptor(SECRET), send=send),
            RaftFrameCipher(SECRET, getEncryptor(SECRET), send=send))


@settings(max_examples=50, deadline=None)
@given(payload=st.binary(max_size=4096))
def test_a_sealed_frame_opens_at_another_voter_with_its_counter(payload: bytes) -> None:
    a, b = _pair()
    first = a.encrypt_at_time(payload, 123)
    second = a.encrypt_at_time(payload, 123)
    assert first[:1] == b"\x01"
    if len(payload) >= 16:
        assert payload not in first  # sealed, not only signed
    assert b.decrypt(first) == payload and b.decrypt(second) == payload
    assert b.extract_timestamp(first) < b.extract_timestamp(second)  # pysyncobj refuses going back
    assert first != second  # a fresh nonce per frame


def test_every_flipped_bit_and_every_truncation_is_refused() -> None:
    a, b = _pair()
    frame = a.encrypt_at_time(b"x" * 40, 0)
    for i in range(len(frame)):
        for bit in (0x01, 0x80):
            bad = bytearray(frame)
            bad[i] ^= bit
            with pytest.raises((RaftFrameError, ValueError)):
                b.decrypt(bytes(bad))
    for n in range(len(frame)):
        with pytest.raises((RaftFrameError, ValueError)):
            b.decrypt(frame[:n])


def test_another_secret_cannot_open_or_forge() -> None:
    a = RaftFrameCipher(SECRET, getEncryptor(SECRET))
    stranger = RaftFrameCipher("another-secret", getEncryptor("another-secret"))
    with pytest.raises(RaftFrameError):
        a.decrypt(stranger.encrypt_at_time(b"hello", 0))
    with pytest.raises(RaftFrameError):
        a.decrypt(b"\x01" + os.urandom(60))


def test_fernet_frames_open_both_ways_for_a_rolling_upgrade() -> None:
    new = RaftFrameCipher(SECRET, getEncryptor(SECRET))
    upgrading = RaftFrameCipher(SECRET, getEncryptor(SECRET), send="fernet")
    old = getEncryptor(SECRET)  # a voter that speaks only Fernet
    token = old.encrypt_at_time(b"from an old voter", 77)
    assert new.extract_timestamp(token) == 77 and new.decrypt(token) == b"from an old voter"
    sealed = upgrading.encrypt_at_time(b"to an old voter", 78)
    assert old.decrypt(sealed) == b"to an old voter"
    with pytest.raises(ValueError, match="raft.frame.cipher"):
        RaftFrameCipher(SECRET, getEncryptor(SECRET), send="rot13")


def test_a_restarted_sender_seals_under_a_new_key() -> None:
    before, after = _pair()  # two instances: a voter before and after its restart
    f1, f2 = before.encrypt_at_time(b"same", 0), after.encrypt_at_time(b"same", 0)
    assert f1[1:17] != f2[1:17]  # new salt, so counter 1 again is a new (key, nonce) pair
    assert f1[17:25] == f2[17:25]
    assert f1[25:] != f2[25:]


async def _mixed_quorum_commits(tmp_path: Path, ciphers: list[str]) -> None:
    voters = [(i + 1, ("127.0.0.1", p)) for i, p in enumerate(free_ports(3))]
    async with trio.open_nursery() as nursery:
        quorums = [SyncObjQuorum(vid, voters, tmp_path / f"v{vid}", SECRET, {"raft.frame.cipher": c})
                   for (vid, _), c in zip(voters, ciphers, strict=True)]
        for q in quorums:
            await nursery.start(q.run)
        with trio.fail_after(30):
            while not any(q.is_ready() and q.leader_id() == q.node_id for q in quorums):
                await trio.sleep(0.05)
        leader = next(q for q in quorums if q.leader_id() == q.node_id)
        await leader.propose(Command("activate", leader.epoch(), 0, (LeaderChange(leader.node_id, leader.epoch()),)))
        await leader.propose(Command("t", leader.epoch(), 0, (Topic("mixed", "id-mixed"),)))
        with trio.fail_after(30):  # every voter, whatever it seals with, applies the topic
            while not all("mixed" in q.image().topics.by_name for q in quorums):
                await trio.sleep(0.05)
        for i, q in enumerate(quorums):  # each opened what every peer sealed (the handshake at least)
            others = {c for j, c in enumerate(ciphers) if j != i}
            opened = {c: q.statistics()[f"raft_frames_opened_{c.replace('-', '_')}"] for c in FRAME_CIPHERS}
            assert all(opened[c] > 0 for c in others), (q.node_id, ciphers, opened)
            assert all(opened[c] == 0 for c in FRAME_CIPHERS if c not in ciphers), (q.node_id, opened)
        nursery.cancel_scope.cancel()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("ciphers", [["fernet", "aes-gcm", "aes-gcm"], ["aes-gcm", "fernet", "fernet"],
                                     ["aes-gcm", "aes-gcm", "aes-gcm"]])
def test_voters_sealing_with_either_cipher_form_one_quorum(tmp_path: Path, ciphers: list[str]) -> None:
    trio.run(_mixed_quorum_commits, tmp_path, ciphers)


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=3 * STORE_BELOW_BYTES))
def test_frame_zlib_round_trips_through_plain_zlib(payload: bytes) -> None:
    """What any voter's ``zlib.decompress`` reads back (an older rafka's, or pysyncobj's own)."""
    out = FrameZlib.compress(payload, 3)
    assert zlib.decompress(out) == payload
    if len(payload) < STORE_BELOW_BYTES:
        assert out == stored(payload) and len(out) == len(payload) + 11
    else:
        assert out == zlib.compress(payload, 3)


async def test_the_transport_uses_frame_zlib_and_its_threshold(tmp_path: Path) -> None:
    import pysyncobj.tcp_connection

    voters = [(1, ("127.0.0.1", free_ports(1)[0]))]
    try:
        for setting, store_below in (({"raft.compress.min.bytes": "0"}, 0), ({}, STORE_BELOW_BYTES)):
            q = SyncObjQuorum(1, voters, tmp_path / str(store_below), None, setting)
            q._node.destroy()
            assert pysyncobj.tcp_connection.zlib is FrameZlib
            assert FrameZlib.store_below == store_below
    finally:
        FrameZlib.store_below = STORE_BELOW_BYTES

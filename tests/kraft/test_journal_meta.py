"""The Raft journal (records and meta file) is msgpack with a version byte and a CRC; old
pickles are converted by an unpickler that runs no code (kraft/durable_journal.py, issue 24
item 6)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from pysyncobj.journal import FileJournal
from pysyncobj.node import TCPNode
from pysyncobj.pickle import dumps
from rafka.kraft.durable_journal import (
    DurableFileJournal,
    JournalFormatError,
    decode_command,
    decode_meta,
    encode_command,
    encode_meta,
)

from tests.security.test_secured_broker import create_topic, produce, running_node


class _Boom:
    def __reduce__(self):  # what an attacker with write access to the data dir would plant
        return (os.system, (f"touch {os.environ.get('RAFKA_BOOM_MARKER', '/nonexistent/x')}",))


def test_meta_round_trip_and_named_errors() -> None:
    meta = {"currentTerm": 7, "votedForNodeId": "127.0.0.1:1", "raftCommitIndex": 3}
    data = encode_meta(meta)
    assert data[0] == 1 and decode_meta(data) == meta
    with pytest.raises(JournalFormatError, match="CRC"):
        decode_meta(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(JournalFormatError, match="version"):
        decode_meta(b"\x09" + data[1:])


COMMANDS = [
    b"\x01",  # no-op
    b"\x00" + dumps((3, (b"\x00\xffrecord",))),  # a @replicated call with one bytes argument
    b"\x00" + dumps((4, (b"x", 7), {"k": "v"})),
    b"\x00" + dumps(5),
    b"\x02" + dumps(["add", "127.0.0.1:9", TCPNode("127.0.0.1:9")]),
    b"\x03" + dumps(2),
]


def test_every_command_kind_round_trips_without_pickle_on_disk() -> None:
    for cmd in COMMANDS:
        rec = encode_command(cmd)
        assert rec[0] == 0xA5 and rec[1] == 1 and b"\x80\x02" not in rec[6:8]  # no pickle header
        back = decode_command(rec)
        assert back[0] == cmd[0] and pickle.loads(back[1:]) == pickle.loads(cmd[1:]) if len(cmd) > 1 \
            else back == cmd
    with pytest.raises(JournalFormatError, match="CRC"):
        rec = encode_command(COMMANDS[1])
        decode_command(rec[:-1] + bytes([rec[-1] ^ 1]))
    with pytest.raises(JournalFormatError, match="refusing"):
        encode_command(b"\x00" + pickle.dumps(_Boom()))


def test_an_old_pickled_journal_is_converted(tmp_path: Path) -> None:
    j = str(tmp_path / "raft.journal")
    old = FileJournal(j)  # what pysyncobj (and rafka before issue 24) wrote
    for i, cmd in enumerate(COMMANDS, 1):
        old.add(cmd, i, 1)
    old.flush()
    old._destroy()
    journal = DurableFileJournal(j)
    assert len(journal) == len(COMMANDS)
    assert [pickle.loads(journal[i][0][1:]) if len(COMMANDS[i]) > 1 else journal[i][0]
            for i in range(len(COMMANDS))] == \
        [pickle.loads(c[1:]) if len(c) > 1 else c for c in COMMANDS]
    journal._destroy()
    raw = Path(j).read_bytes()
    assert b"record" in raw and dumps((3, (b"\x00\xffrecord",))) not in raw  # msgpack now
    again = DurableFileJournal(j)
    assert [e[1] for e in again[0:len(again)]] == list(range(1, len(COMMANDS) + 1))
    again._destroy()


def test_a_planted_pickled_record_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    os.environ["RAFKA_BOOM_MARKER"] = str(marker)
    j = str(tmp_path / "raft.journal")
    old = FileJournal(j)
    old.add(b"\x00" + pickle.dumps(_Boom()), 1, 1)
    old._destroy()
    with pytest.raises(JournalFormatError, match="refusing"):
        DurableFileJournal(j)
    assert not marker.exists()


def test_an_old_pickled_meta_is_converted_once(tmp_path: Path) -> None:
    j = str(tmp_path / "raft.journal")
    Path(j + ".meta").write_bytes(pickle.dumps({"currentTerm": 4, "votedForNodeId": None,
                                                "raftCommitIndex": 2}))
    journal = DurableFileJournal(j)
    assert journal.getCurrentTerm() == 4 and journal.getRaftCommitIndex() == 2
    assert not Path(j + ".meta").exists() and Path(j + ".rmeta").exists()
    journal.setCurrentTerm(5, "127.0.0.1:9")
    journal._destroy()
    again = DurableFileJournal(j)
    assert again.getCurrentTerm() == 5 and again.getVotedForNodeId() == "127.0.0.1:9"
    again._destroy()


def test_an_old_meta_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    os.environ["RAFKA_BOOM_MARKER"] = str(marker)
    j = str(tmp_path / "raft.journal")
    Path(j + ".meta").write_bytes(pickle.dumps({"currentTerm": _Boom()}))
    with pytest.raises(JournalFormatError, match="refusing"):
        DurableFileJournal(j)
    assert not marker.exists()


async def test_a_real_node_never_unpickles_its_data_dir(tmp_path: Path) -> None:
    """A node started on a data dir holding a planted pickle stops with the named error and
    runs nothing; the previous code ran the planted command."""
    marker = tmp_path / "pwned"
    with running_node(tmp_path) as (plain, *_rest), trio.fail_after(60):
        from rafka.client.aio import AsyncAdmin

        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "j")
        await produce(plain, "j", b"x")
    journals = list((tmp_path / "data").rglob("raft.journal"))
    assert journals, "the node wrote no Raft journal"
    for j in journals:  # an attacker plants an old-style pickled meta file next to it
        Path(f"{j}.rmeta").unlink(missing_ok=True)
        Path(f"{j}.meta").write_bytes(pickle.dumps({"currentTerm": _Boom()}))
    env = {**os.environ, "RAFKA_BOOM_MARKER": str(marker),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "rafka.node", "--config", str(tmp_path / "node.toml")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it started on the planted file
        proc.kill()
        out, _ = proc.communicate()
    assert not marker.exists(), "the planted pickle ran"
    assert proc.returncode not in (0, None) and b"refusing" in out, out[-2000:]


def test_an_unchanged_commit_index_is_not_stored_again(tmp_path: Path) -> None:
    """Issue 26: a follower is told the commit index with every AppendEntries; only a change
    may make the one-second timer rewrite (and fsync) the meta file. Before: every second."""
    j = str(tmp_path / "raft.journal")
    journal = DurableFileJournal(j)
    stores: list[dict] = []
    storer = journal._FileJournal__metaStorer
    real = storer.storeMeta
    storer.storeMeta = lambda meta: (stores.append(dict(meta)), real(meta))
    journal.setRaftCommitIndex(7)
    journal.onOneSecondTimer()
    assert [m["raftCommitIndex"] for m in stores] == [7]
    for _ in range(3):  # idle heartbeats: the same index, three one-second timers
        journal.setRaftCommitIndex(7)
        journal.onOneSecondTimer()
    assert len(stores) == 1
    journal.setRaftCommitIndex(8)
    journal.onOneSecondTimer()
    assert [m["raftCommitIndex"] for m in stores] == [7, 8]
    journal._destroy()
    assert DurableFileJournal(j).getRaftCommitIndex() == 8

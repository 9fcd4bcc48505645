"""The Raft meta file is msgpack with a version byte and a CRC; old pickles are converted by
an unpickler that runs no code (kraft/durable_journal.py, issue 24 item 6)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from rafka.kraft.durable_journal import (
    DurableFileJournal,
    JournalFormatError,
    decode_meta,
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
    proc = subprocess.Popen([sys.executable, "-m", "rafka.broker.node", "--config", str(tmp_path / "node.toml")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it started on the planted file
        proc.kill()
        out, _ = proc.communicate()
    assert not marker.exists(), "the planted pickle ran"
    assert proc.returncode not in (0, None) and b"refusing" in out, out[-2000:]

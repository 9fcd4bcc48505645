"""Campaign tests: node configs, the two mount-based faults, and real short campaigns.

The campaigns start real ``rafka server`` nodes: netns backend when root and ``ip netns``
work, else the local backend.  ``test_short_campaign_is_valid`` (kill + partition on the
default configuration) must report zero anomalies; ``test_unsafe_acks_are_caught`` is the
proof that the checker can fail: with acknowledgements before replication, the leader of a
workload partition isolated and nodes killed, the report must show acknowledged writes lost,
unseen, overwritten (inconsistent offsets) or truncated on a node (acked-not-truncated).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import trio
from rafka.broker.config import parse_config
from rafka.chaos_tests.backends.base import ClusterSpec, rafka_node_spec
from rafka.chaos_tests.backends.local import LocalBackend
from rafka.chaos_tests.backends.netns import NetnsBackend, netns_supported
from rafka.chaos_tests.campaign import (
    CampaignOptions,
    _mounted,
    expand_nemesis,
    make_cluster,
    node_config,
    run,
    toml_dumps,
)
from rafka.chaos_tests.faults import unmount_leftovers
from rafka.chaos_tests.faults.disk import fill, unfill
from rafka.chaos_tests.faults.unfsynced import control, fuse_available
from rafka.chaos_tests.workloads.queue import QueueSpec

ROOT = os.geteuid() == 0


def _backend_name() -> str:
    return "netns" if netns_supported() is None else "local"


def test_expand_nemesis():
    assert expand_nemesis(["kill", "clock"]) == ["kill", "clock-skew"]
    assert "partition-isolate-leader" in expand_nemesis(["partition"])
    assert expand_nemesis(["pause", "pause"]) == ["pause"]
    with pytest.raises(ValueError):
        expand_nemesis(["meteor"])


@pytest.mark.parametrize("cls", [NetnsBackend, LocalBackend])
def test_node_configs_parse_and_point_at_peers(tmp_path, cls):
    specs = tuple(rafka_node_spec(n, tmp_path / f"node-{n}.toml") for n in (1, 2, 3))
    backend = cls(ClusterSpec(specs, tmp_path))
    secret = tmp_path / "s"
    secret.write_text("k" * 64)
    cfg = node_config(backend, 2, data_dir=tmp_path / "d2", secret_file=secret,
                      broker={"min.insync.replicas": 2})
    parsed = parse_config(tomllib.loads(toml_dumps(cfg)), "node-2.toml", base_dir=tmp_path)
    assert parsed.node_id == 2 and parsed.is_broker and parsed.is_controller
    assert parsed.listener == (backend.node_host(2), 9092)
    assert parsed.raft_listener == (backend.node_host(2), 19092)
    assert parsed.broker["min.insync.replicas"] == 2
    assert parsed.broker["unclean.leader.election.enable"] is False
    voters = {v.id: v for v in parsed.voters}
    assert voters[1].raft == backend.peer_address(2, 1, 19092)
    assert voters[3].rpc == backend.peer_address(2, 3, 9092)
    assert voters[2].raft == (backend.node_host(2), 19092)


def test_make_cluster_writes_everything(tmp_path):
    backend = make_cluster("local", tmp_path / "w", 3)
    for n in (1, 2, 3):
        assert (tmp_path / "w" / f"node-{n}.toml").exists()
        assert (tmp_path / "w" / f"node-{n}" / "data").is_dir()
    assert oct((tmp_path / "w" / "cluster.secret").stat().st_mode & 0o777) == "0o600"
    assert backend.use_faketime is False


@pytest.mark.root
@pytest.mark.skipif(not ROOT, reason="needs root (tmpfs mount)")
def test_leftover_mounts_are_unmounted_so_the_work_dir_can_go(tmp_path):
    """A campaign killed mid-run leaves its fault mounts; the next one must still start."""
    work = tmp_path / "chaos-work"
    inner = work / "node-1" / "data"
    inner.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "rafka-chaos-test", str(inner)],
                   check=True)
    try:
        assert os.path.ismount(inner)
        assert unmount_leftovers(work) == [str(inner)]
        assert not os.path.ismount(inner)
    finally:
        subprocess.run(["umount", "-l", str(inner)], check=False, capture_output=True)


async def test_a_half_done_fault_setup_is_undone():
    """Seed 2 of the 14:33 campaign: the second of three FUSE mounts failed and the first stayed
    mounted; every handler whose setup started must be torn down."""
    calls: list[str] = []

    class Handler:
        def __init__(self, name: str, fail: bool) -> None:
            self.name, self.fail = name, fail

        async def setup(self) -> None:
            calls.append(f"setup {self.name}")
            if self.fail:
                raise RuntimeError("mount failed")

        async def teardown(self) -> None:
            calls.append(f"teardown {self.name}")

    with pytest.raises(RuntimeError, match="mount failed"):
        async with _mounted({"a": Handler("a", False), "b": Handler("b", True),
                             "c": Handler("c", False)}):
            pytest.fail("the body must not run")
    assert calls == ["setup a", "setup b", "teardown b", "teardown a"]


@pytest.mark.root
@pytest.mark.skipif(not ROOT, reason="needs root (tmpfs mount)")
def test_disk_full_fills_and_frees(tmp_path):
    d = tmp_path / "vol"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "rafka-chaos-test", str(d)],
                   check=True)
    try:
        (d / "seg").write_bytes(b"x" * 1000)
        assert fill(d) > 0
        with pytest.raises(OSError) as exc:
            (d / "new").write_bytes(b"y" * 8192)
        assert exc.value.errno == errno.ENOSPC
        assert (d / "seg").read_bytes() == b"x" * 1000  # reads keep working
        unfill(d)
        (d / "new").write_bytes(b"y" * 8192)
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


@pytest.mark.root
@pytest.mark.skipif(fuse_available() is not None or not ROOT,
                    reason=f"FUSE fault unavailable: {fuse_available()}")
def test_lose_unfsynced_writes_keeps_exactly_the_fsynced_state(tmp_path):
    backing, mnt, sock = tmp_path / "b", tmp_path / "m", tmp_path / "c.sock"
    backing.mkdir()
    mnt.mkdir()
    (backing / "old").write_bytes(b"o" * 10)  # present at mount time: durable
    proc = subprocess.Popen([sys.executable, "-m", "rafka.chaos_tests.faults.unfsynced", str(backing),
                             str(mnt), "--control", str(sock)], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (os.path.ismount(mnt) and sock.exists()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        fd = os.open(mnt / "seg", os.O_CREAT | os.O_WRONLY)
        os.write(fd, b"a" * 100)
        os.fdatasync(fd)
        os.write(fd, b"b" * 50)  # never fsynced
        os.close(fd)
        (mnt / "never").write_bytes(b"n" * 10)
        fd = os.open(mnt / "over", os.O_CREAT | os.O_RDWR)
        os.write(fd, b"A" * 20)
        os.fsync(fd)
        os.pwrite(fd, b"B" * 5, 0)
        os.ftruncate(fd, 8)
        os.close(fd)
        with open(mnt / "old", "ab") as f:
            f.write(b"+")
        (mnt / "events.jsonl").write_text("{}\n")  # evidence: exempt
        (mnt / "node.log").write_text("line\n")  # evidence: exempt
        # a segment file ends in .log like the node's log, and is cut like any file
        fd = os.open(mnt / "00000000000000000000.log", os.O_CREAT | os.O_WRONLY)
        os.write(fd, b"r" * 30)
        os.fsync(fd)
        os.write(fd, b"s" * 30)
        os.close(fd)
        report = control(sock, "crash")
        assert {f["file"] for f in report["files"]} >= {"seg", "never", "over", "old",
                                                        "00000000000000000000.log"}
        assert (mnt / "seg").read_bytes() == b"a" * 100
        assert (mnt / "never").read_bytes() == b""
        assert (mnt / "over").read_bytes() == b"A" * 20
        assert (mnt / "old").read_bytes() == b"o" * 10
        assert (mnt / "events.jsonl").read_text() == "{}\n"
        assert (mnt / "node.log").read_text() == "line\n"
        assert (mnt / "00000000000000000000.log").read_bytes() == b"r" * 30
    finally:
        try:
            control(sock, "exit", 5)
        except OSError:
            pass
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False, capture_output=True)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _opts(tmp_path: Path, **kw) -> CampaignOptions:
    base = dict(backend=_backend_name(), time_limit_s=25.0, seed=7,
                work_dir=tmp_path / "work", results_dir=tmp_path / "results",
                queue=QueueSpec(partitions=3, producers=3, group_consumers=1),
                mean_interval_s=6.0, max_fault_s=6.0, quiet_s=4.0, png=True)
    base.update(kw)
    return CampaignOptions(**base)


@pytest.mark.chaos
async def test_short_campaign_is_valid(tmp_path):
    """~25 s of kill + partition (+ clock skew where it works) against 3 real nodes: zero
    anomalies, and every scheduled fault applied."""
    from rafka.chaos_tests.backends.preload import clock_skew_unsupported

    clock = ("clock",) if clock_skew_unsupported() is None else ()
    opts = _opts(tmp_path, nemesis=("kill", "partition", *clock))
    with trio.fail_after(280):
        result = await run(opts)
    summary = (tmp_path / "results" / "summary.txt").read_text()
    assert result.error is None, result.error
    assert result.valid, summary
    for name in ("summary.txt", "results.json", "timeline.png", "history.jsonl"):
        assert (tmp_path / "results" / name).exists()
    assert result.exit_code == 0
    ops = result.notes["ops"]
    assert ops.get("send-ok", 0) > 100 and ops.get("poll-ok", 0) > 10
    assert all(fr["complete"] for fr in result.notes["final_reads"])
    assert result.notes["nemesis_errors"] == []


@pytest.mark.chaos
@pytest.mark.skipif(netns_supported() is not None,
                    reason="needs the netns backend (local proxies cannot cut replication)")
async def test_unsafe_acks_are_caught(tmp_path):
    """Acks before replication + the partition leader isolated or SIGKILLed: acknowledged
    writes are lost (gone, overwritten, or truncated on a node). Whether a 25 s run loses one
    depends on timing (the broker refuses acks=all up front once the followers stop fetching,
    and a killed leader loses only what it acknowledged and had not replicated yet). Since the
    unsafe setting also skips that up-front check (0e6d447) the first seed caught it in each of
    3 dedicated runs on 2026-11-21 (~32 s each), so the test is back in `make test`; up to three seeds
    run, the next only when the previous one caught nothing."""
    reports = []
    for seed in (1, 3, 5):
        work = tmp_path / f"seed{seed}"
        opts = _opts(work, nemesis=("partition-isolate-leader", "kill-leader"), seed=seed,
                     unsafe_ack_before_replication=True, metadata=False, groups=False,
                     queue=QueueSpec(partitions=1, producers=3, assign_consumers=1,
                                     group_consumers=0),
                     mean_interval_s=4.0, min_fault_s=2.0, max_fault_s=4.0)  # 3-4 faults
        with trio.fail_after(280):
            result = await run(opts)
        assert result.error is None, result.error
        assert result.summary is not None
        checkers = result.summary.checkers
        lost = sum(checkers[k].stats["anomalies"] for k in
                   ("lost-write", "unseen", "inconsistent-offsets", "acked-not-truncated"))
        reports.append((work / "results" / "summary.txt").read_text())
        if lost > 0:
            assert result.exit_code == 1
            return
    raise AssertionError("unsafe acks were not caught:\n" + "\n".join(reports))


@pytest.mark.chaos
@pytest.mark.slow
async def test_crashes_lose_unfsynced_acks_unless_a_flush_rule_keeps_them(tmp_path):
    """Crash (lose-unfsynced-writes) and kill on nodes at ``log.flush.policy=none``, with the
    CLI's options for ``--seed 3``, whose schedule crashes the whole cluster three times: with
    the workload topic at ``flush.messages=1`` (broker/flush_rule.py) the run is valid; with no
    fsync at all (Kafka's default, the control) the checker finds acknowledged records lost.
    The control failed to fail until the nemesis stopped exempting segment files (session 34)."""
    if not ROOT or fuse_available() is not None:
        pytest.skip(f"needs root and FUSE: {fuse_available()}")
    for flush, topic_config in (("topic", {"flush.messages": "1"}), ("off", {})):
        opts = CampaignOptions(
            backend=_backend_name(), nemesis=("crash", "kill"), time_limit_s=120.0, seed=3,
            work_dir=tmp_path / flush / "work", results_dir=tmp_path / flush / "results",
            queue=QueueSpec(partitions=4, producers=3, group_consumers=0,
                            topic_config=topic_config),
            broker_config={"log.flush.policy": "none"}, png=False)
        with trio.fail_after(600):
            result = await run(opts)
        summary = (tmp_path / flush / "results" / "summary.txt").read_text()
        assert result.error is None, result.error
        if flush == "topic":
            assert result.valid, summary
        else:  # the fault cut what was never fsynced, and the checkers saw records go
            assert result.notes["faults"]["lose-unfsynced-writes"]["cut_files"] > 0, summary
            assert result.summary is not None
            checkers = result.summary.checkers
            assert sum(checkers[k].stats["anomalies"] for k in (
                "lost-write", "unseen", "inconsistent-offsets", "acked-not-truncated")) > 0, summary


@pytest.mark.chaos
@pytest.mark.slow
async def test_local_backend_campaign_with_partitions(tmp_path):
    """The local backend (no netns): partitions reach replication through the connect()
    redirect shim, and the campaign is valid."""
    from rafka.chaos_tests.backends.preload import connect_redirect_unsupported

    if connect_redirect_unsupported() is not None:
        pytest.skip(connect_redirect_unsupported())
    opts = _opts(tmp_path, backend="local", nemesis=("partition", "kill"), time_limit_s=60.0,
                 seed=5)
    with trio.fail_after(600):
        result = await run(opts)
    assert result.error is None, result.error
    assert result.valid, (tmp_path / "results" / "summary.txt").read_text()
    assert result.notes["nemesis_errors"] == []


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.parametrize("nemesis", [("kill", "pause", "partition", "clock"), ("crash",),
                                     ("disk",)])
async def test_longer_campaign_is_valid(tmp_path, nemesis):
    if nemesis[0] != "kill" and not ROOT:
        pytest.skip("needs root")
    if nemesis == ("crash",) and fuse_available() is not None:
        pytest.skip(f"FUSE unavailable: {fuse_available()}")
    opts = _opts(tmp_path, nemesis=nemesis, time_limit_s=90.0, seed=11)
    with trio.fail_after(600):
        result = await run(opts)
    assert result.error is None, result.error
    assert result.valid, (tmp_path / "results" / "summary.txt").read_text()


async def test_a_results_folder_holding_a_run_is_refused(tmp_path):
    """HistoryWriter appends: a second run into one folder would mix two histories."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "history.jsonl").write_text('{"index": 0}\n')
    result = await run(_opts(tmp_path))
    assert result.exit_code == 2 and "not empty" in (result.error or "")
    assert (tmp_path / "results" / "history.jsonl").read_text() == '{"index": 0}\n'


def _transactions_unavailable() -> str | None:
    from rafka.client.aio import AsyncProducer

    if not hasattr(AsyncProducer, "init_transactions"):
        return "the transactional producer is not in this build yet"
    return None


@pytest.mark.chaos
@pytest.mark.skipif(_transactions_unavailable() is not None,
                    reason=str(_transactions_unavailable()))
async def test_short_txn_campaign_is_valid(tmp_path):
    """~30 s of the txn workload under kill + partition: no anomaly, transactions committed
    and aborted, the aborted values seen by read_uncommitted readers (aborts are real) and the
    transform checked on its committed input."""
    from rafka.chaos_tests.workloads.txn import TxnSpec

    opts = _opts(tmp_path, nemesis=("kill", "partition"), workload="txn", time_limit_s=30.0,
                 metadata=False, txn=TxnSpec(partitions=2, writers=3))
    with trio.fail_after(400):
        result = await run(opts)
    summary = (tmp_path / "results" / "summary.txt").read_text()
    assert result.error is None, result.error
    assert result.valid, summary
    ops = result.notes["ops"]
    assert ops.get("txn-ok", 0) > 20 and ops.get("txn-aborted", 0) > 2, ops
    assert ops.get("transform-ok", 0) > 3, ops
    checkers = result.summary.checkers
    assert checkers["txn-aborted-read"].stats["aborted_values_seen_read_uncommitted"] > 0
    assert checkers["transform-exactly-once"].stats["inputs_checked"] > 0


@pytest.mark.chaos
@pytest.mark.skipif(_transactions_unavailable() is not None,
                    reason=str(_transactions_unavailable()))
async def test_unsafe_txn_offsets_are_caught(tmp_path):
    """The transform commits its offsets outside the transaction and "crashes" between the two
    commits 30 % of the time: committed input is replayed and its output written twice."""
    from rafka.chaos_tests.workloads.txn import TxnSpec, unsafe

    opts = _opts(tmp_path, nemesis=("kill",), workload="txn", time_limit_s=25.0,
                 metadata=False, txn=unsafe(TxnSpec(partitions=2, writers=1)))
    with trio.fail_after(400):
        result = await run(opts)
    assert result.error is None, result.error
    assert result.summary is not None
    checkers = result.summary.checkers
    assert not checkers["transform-exactly-once"].valid, \
        (tmp_path / "results" / "summary.txt").read_text()
    assert result.exit_code == 1


def _denials(results: Path) -> list[str]:
    """The authorizer's audit lines (``rafka.audit: DENIED ...``) in the copied node logs."""
    return [line for p in sorted((results / "nodes").glob("node-*-node.log"))
            for line in p.read_text(errors="replace").splitlines() if "DENIED" in line]


@pytest.mark.chaos
async def test_short_secure_campaign_is_valid(tmp_path):
    """``--secure`` on the local backend (~25 s of kill + partition): TLS + SCRAM listeners
    with the authorizer, the queue workload (idempotent producers, assign and group
    consumers, topic create/delete) as the ACL'd user ``chaos``: no anomaly, the group commits
    its offsets (it could not before the workload ACLs covered the coordinator lookup), and
    the authorizer denied the workload nothing."""
    from rafka.chaos_tests.backends.preload import connect_redirect_unsupported

    if connect_redirect_unsupported() is not None:
        pytest.skip(connect_redirect_unsupported())
    opts = _opts(tmp_path, backend="local", nemesis=("kill", "partition"), secure=True)
    with trio.fail_after(300):
        result = await run(opts)
    results = tmp_path / "results"
    assert result.error is None, result.error
    assert result.valid, (results / "summary.txt").read_text()
    sec = result.notes["security"]
    assert sec["protocol"] == "SASL_SSL" and sec["workload_user"] == "User:chaos"
    assert all(a.endswith(":9093") for a in sec["bootstrap"].split(","))
    ops = result.notes["ops"]
    assert ops.get("send-ok", 0) > 100 and ops.get("poll-ok", 0) > 10, ops
    assert ops.get("commit-ok", 0) > 0 and ops.get("create-topic-ok", 0) > 0, ops
    assert all(fr["complete"] for fr in result.notes["final_reads"])
    assert _denials(results) == []
    toml = tomllib.loads((results / "nodes" / "node-1-node-1.toml").read_text())
    assert toml["security"]["protocol"] == "SASL_SSL" and toml["security"]["authorizer"] is True
    passwords = json.loads((tmp_path / "work" / "tls" / "users.json").read_text())
    kept = "".join(p.read_text(errors="replace") for p in results.rglob("*") if p.is_file())
    assert not any(pw in kept for pw in passwords.values())


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.skipif(_transactions_unavailable() is not None,
                    reason=str(_transactions_unavailable()))
async def test_secure_txn_campaign_is_valid(tmp_path):
    """The txn workload (transactional ids, read_committed readers, offsets in the
    transaction) through the secured listeners as User:chaos."""
    from rafka.chaos_tests.workloads.txn import TxnSpec

    opts = _opts(tmp_path, backend="local", nemesis=("kill", "partition"), workload="txn",
                 time_limit_s=30.0, metadata=False, txn=TxnSpec(partitions=2, writers=3),
                 secure=True)
    with trio.fail_after(400):
        result = await run(opts)
    assert result.error is None, result.error
    assert result.valid, (tmp_path / "results" / "summary.txt").read_text()
    assert result.notes["ops"].get("txn-ok", 0) > 20, result.notes["ops"]
    assert _denials(tmp_path / "results") == []

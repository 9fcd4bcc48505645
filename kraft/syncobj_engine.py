"""The pysyncobj-backed :class:`~kraft.quorum.MetadataQuorum`.

Theory of operation
-------------------
pysyncobj orders opaque commands; rafka's :class:`~kraft.metadata_log.MetadataLog` is the
state machine's output. One ``@replicated`` method, ``apply_command(bytes)``, runs on
pysyncobj's tick thread for every committed command on every voter: it decodes the msgpack
:class:`~kraft.quorum.Command`, skips it if the metadata log already holds its Raft index
(replay after a restart), otherwise lets the state machine dedup it by request id, check the
proposer's epoch and the guards against the current image, and write the records (no fsync
on the tick thread). A flusher task fsyncs in groups (``trio.to_thread``) and only then are
waiters woken and results reported: ``propose`` returns after the command is applied *and*
fsynced locally; brokers read only fsynced records.

Bridging (measured traps, docs/../notes): the ``SyncObj`` is built on the trio main thread;
``propose`` passes a callback that hands the result to trio via ``TrioToken.run_sync_soon``;
state changes (``onStateChanged``) are handed over the same way. Leader changes that are not
a state change of this node (a follower learning of a new leader or term) are noticed on the
tick thread by :meth:`_leadership_on_tick`, a pysyncobj tick callback that compares three
attributes with what it saw last and wakes trio only when they differ: an idle voter's trio
thread never wakes for leadership (issue 26; it was a 50 ms poll, 20 task steps a second).
``LeadershipEvent(leader_id, epoch=Raft term, is_self)``.
An apply that raises (a bug, a failed disk write) stops the process: a voter that cannot
record a committed command must not go on voting (fail-stop, as Kafka does for its metadata
log directory).

Snapshots: pysyncobj compacts its log every ``raft.compaction.min.entries`` entries (or
``logCompactionMinTime``) by calling our serializer, which writes the metadata log's current
state (image records + dedup + Raft index) next to pysyncobj's bookkeeping. A far-behind
voter receives that file and our deserializer resets its metadata log to that image
(:meth:`MetadataLog.install`; ignored when the local log is already ahead).

Security: pysyncobj pickles its messages. A multi-voter quorum refuses to start without a
cluster secret (pysyncobj's ``password``: encrypted and authenticated transport; each frame sealed
with AES-256-GCM, kraft/raft_cipher.py).

Liveness: pysyncobj starts an election only while it counts some peer connected, and a
follower with no connected peer keeps naming its last leader. pysyncobj 0.3.17 never times
out a Raft connect that gets no answer: its ``connectionTimeout`` is checked only when the
connection has a poll event or sends, a connect whose SYN was dropped (a partition that
drops packets) has neither, and the transport does not re-dial a link while it is
CONNECTING. Such a link stays down until a retransmitted SYN gets through or the kernel
gives up (measured here, Linux 6.18 defaults: retransmits 1, 2, 3, 4, 5, 7, 11, 19, 35, 67 s
after the connect, ETIMEDOUT at ~133 s), long after the partition heals (measured: a 40 s
partition of all three voters, no leader for 30 s after the heal). :meth:`_abandon_unanswered_connects`, a pysyncobj tick callback, closes every outgoing
connection that has been connecting longer than ``connectionTimeout`` (what pysyncobj itself
does to a connect that completes that late), and pysyncobj's disconnect handler re-dials at
once: a fresh SYN every ~``connectionTimeout``, so a healed link is re-made within about that.
``_stall_watch_loop`` feeds :mod:`rafka.kraft.raft_watchdog` (no commit progress, an unbound
Raft listener: logged with :meth:`raft_links`, exported as metrics): the 271 s election stall
of chaos seed 9 (docs/chaos-results.md) is still unexplained (its partitions were too short
for this trap). Elections go through pre-vote and a leader lease (:mod:`rafka.kraft.prevote`).

Durability (see docs/internals.md §5.1): the Raft journal is a :mod:`rafka.kraft.durable_journal`
(msync before acknowledging, fsynced term/vote), and the metadata log is fsynced before a
decision is reported done.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack
import trio
from pysyncobj import FAIL_REASON, SyncObjConf, replicated
from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.node import TCPNode
from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.tcp_server import SERVER_STATE
from rafka.kraft import raft_zlib
from rafka.kraft.chunked_append import ChunkedAppendSyncObj
from rafka.kraft.durable_journal import patched_create_journal
from rafka.kraft.metadata_log import MetadataLog, decode_frames, encode_frame
from rafka.kraft.prevote import PreVoteSyncObj
from rafka.kraft.quorum import (
    Command,
    LeadershipEvent,
    LogEntry,
    ProposeResult,
    QuorumConfigError,
    Snapshot,
    not_controller,
)
from rafka.kraft.raft_cipher import RaftFrameCipher
from rafka.kraft.raft_guard import GuardedTransport
from rafka.kraft.raft_watchdog import RaftSample, RaftWatchdog, bind_error
from rafka.kraft.tick_wait import DeadlinePoller
from rafka.kraft.voters import StaleIncarnationError, VoterRegistry
from rafka.metadata import MetadataImage
from rafka.wire.errors import ErrorCode, RafkaError, error_for
from rafka.wire.wakeups import sleep_on_grid

__all__ = ["QuorumConfigError", "SyncObjQuorum", "check_cluster_secret", "raft_conf_from_settings"]

log = logging.getLogger("rafka.kraft.engine")

_EVENTS_BUFFER = 64
_PROPOSE_ATTEMPTS = 3
_CONN_STATES = {0: "disconnected", 1: "connecting", 2: "connected"}


def _ms(settings: Mapping[str, Any], name: str, default: int) -> float:
    return int(settings.get(name, default)) / 1000.0


def raft_conf_from_settings(settings: Mapping[str, Any], single_voter: bool = False) -> dict[str, Any]:
    """pysyncobj's timing. Defaults (issue 26): elections after 700–2000 ms without a leader,
    the leader's AppendEntries heartbeat every 200 ms (at most a 3.5th of the minimum).

    History: 150–600 / 30 ms at first (the 50 ms tick made the 30 ms ~55 ms in practice: ~18
    heartbeat rounds a second), then 350–1000 / 100 ms (58 -> 39 ms/s of CPU for an idle
    3-voter cluster), now 700–2000 / 200 ms: each Raft message costs a voter's tick thread
    ~400 µs of cold CPU, and heartbeats were most of what an idle cluster spends (~26 -> ~17
    ms/s with the host-wide wake-up grid; docs/performance.md, "Kafka-like Raft timing"). The
    price is failover after kill -9 of the active controller: median ~0.5 s -> ~1-1.4 s. Kafka's
    KRaft detects a lost leader only after ``controller.quorum.fetch.timeout.ms`` (2 s) and
    then waits a 1-2 s election timeout, so rafka still fails over faster than Kafka. The
    raft.* settings give any other timing (150 / 600 / 30 for a test that wants it fast)."""
    min_s = _ms(settings, "raft.min.timeout.ms", 700)
    max_s = max(_ms(settings, "raft.max.timeout.ms", 2000), min_s + 0.05)
    period_s = min(_ms(settings, "raft.append.entries.period.ms", 200), min_s / 3.5)
    return {
        "raftMinTimeout": min_s,
        "raftMaxTimeout": max_s,
        "appendEntriesPeriod": period_s,
        "connectionTimeout": max(_ms(settings, "raft.connection.timeout.ms", 2000), max_s),
        "connectionRetryTime": _ms(settings, "raft.connection.retry.ms", 300),
        "leaderFallbackTimeout": max(_ms(settings, "raft.leader.fallback.timeout.ms", 600), period_s * 5),
        "appendEntriesUseBatch": str(settings.get("raft.append.entries.batch", "false")).lower() == "true",
        "logCompactionMinEntries": max(2, int(settings.get("raft.compaction.min.entries", 5000))),
        "logCompactionMinTime": max(1, int(settings.get("raft.compaction.min.time.s", 300))),
        "commandsWaitLeader": False,
        "dynamicMembershipChange": True,  # rafka quorum add-voter / remove-voter (kraft/voters.py)
        "useFork": False,
        # a lone voter has no peer messages to wake its tick loop: tick faster
        "autoTickPeriod": _ms(settings, "raft.tick.ms", 50) if not single_voter else 0.002,
    }


def check_cluster_secret(voter_count: int, cluster_secret: str | None) -> None:
    if voter_count > 1 and not cluster_secret:
        raise QuorumConfigError(
            f"refusing to start a {voter_count}-voter controller quorum without a cluster secret: "
            "the Raft transport (pysyncobj) pickles its messages, so anyone who can reach a Raft "
            "port could run code on this node. Set cluster_secret (or cluster_secret_file) to the "
            "same value on every node."
        )


class _RaftNode(ChunkedAppendSyncObj, PreVoteSyncObj):
    """pysyncobj with large entries received whole (kraft/chunked_append.py) and pre-vote +
    leader lease (kraft/prevote.py), both issue 27."""

    def __init__(self, engine: SyncObjQuorum, self_addr: str, others: list[str], conf: SyncObjConf,
                 tick_until_deadline: bool = True, frame_cipher: str = "aes-gcm",
                 compress_min_bytes: int = raft_zlib.STORE_BELOW_BYTES) -> None:
        self._engine = engine
        super().__init__(self_addr, others, conf, transportClass=GuardedTransport)  # kraft/raft_guard.py
        raft_zlib.install(compress_min_bytes)  # small messages stored, not deflated (kraft/raft_zlib.py)
        # Every frame sealed with AES-GCM (kraft/raft_cipher.py): an incoming connection takes
        # the encryptor when it is accepted (on the tick thread, later), but the transport made
        # its outgoing connections already (addNode), so those are given the new one too.
        fernet = getattr(self, "_SyncObj__encryptor", None)
        if fernet is not None:
            cipher = RaftFrameCipher(conf.password, fernet, send=frame_cipher)
            self._SyncObj__encryptor = cipher
            for conn in getattr(self._SyncObj__transport, "_connections", {}).values():
                if conn.encryptor is fernet:
                    conn.encryptor = cipher
        # the tick thread sleeps 0.1 s before its first tick: swapping the poller here is safe.
        # Without the command pipe (appendEntriesUseBatch) a command would wait for a tick.
        self._pipe = getattr(self, "_SyncObj__pipeNotifier", None)
        if self._pipe is not None:
            self._poller = DeadlinePoller(self._poller, self, tick_until_deadline)  # kraft/tick_wait.py

    def destroy(self) -> None:
        super().destroy()
        if self._pipe is not None:
            self._pipe.notify()  # a tick thread sleeping until a deadline stops now

    @replicated
    def apply_command(self, data: bytes) -> tuple[Any, ...]:
        return self._engine._apply_on_tick(data)

    @replicated
    def apply_voters(self, data: bytes) -> tuple[Any, ...]:  # the voter registry (kraft/voters.py)
        return self._engine._apply_voters_on_tick(data)


class SyncObjQuorum:
    def __init__(
        self,
        node_id: int,
        voters: Sequence[tuple[int, tuple[str, int]]],
        data_dir: str | Path,
        cluster_secret: str | None,
        settings: Mapping[str, Any] | None = None,
        bind_address: tuple[str, int] | None = None,
        *,
        directory_id: str = "",
        join_members: Sequence[tuple[int, str]] | None = None,
    ) -> None:
        """``voters``: the configured voters (id, Raft address). ``join_members``: start as a
        joining node whose Raft peers are these current members (kraft/voters.py)."""
        settings = dict(settings or {})
        self.node_id = node_id
        self.directory_id = directory_id
        self.registry = VoterRegistry()  # mutated on the tick thread only
        self._change_in_flight = False
        self._addr_to_id = {f"{h}:{p}": vid for vid, (h, p) in voters}
        self._id_to_addr = {vid: a for a, vid in self._addr_to_id.items()}
        if node_id not in self._id_to_addr:
            raise QuorumConfigError(f"node {node_id} is not among the controller voters {sorted(self._id_to_addr)}")
        check_cluster_secret(len(voters), cluster_secret)
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.metadata_log = MetadataLog(
            self.data_dir / "metadata",
            snapshot_every_records=int(
                settings.get("metadata.snapshot.records", settings.get("metadata.snapshot.min.records", 10_000))
            ),
            snapshot_interval_ms=int(settings.get("metadata.snapshot.interval.ms", 3_600_000)),
        )
        self._token = trio.lowlevel.current_trio_token()
        self._events_send, self._events_recv = trio.open_memory_channel[LeadershipEvent](_EVENTS_BUFFER)
        self._last_event: tuple[int | None, int, bool] | None = None
        self._leader_changed = trio.Event()  # set and replaced at each change of _last_event
        self.leader_changes = 0
        self._durable = trio.Event()
        self._applied = trio.Event()
        self._closed = False
        raft = raft_conf_from_settings(settings, single_voter=len(voters) == 1)
        self.raft_settings = raft
        conf = SyncObjConf(
            password=cluster_secret or None,
            journalFile=str(self.data_dir / "raft.journal"),
            fullDumpFile=str(self.data_dir / "raft.dump"),
            serializer=self._serialize,
            deserializer=self._deserialize,
            onStateChanged=self._on_state_changed,
            bindAddress=f"{bind_address[0]}:{bind_address[1]}" if bind_address else None,
            **raft,
        )
        self_addr = self._id_to_addr[node_id]
        others = [a for a in self._addr_to_id if a != self_addr]
        if join_members is not None:
            others = [a for _vid, a in join_members if a != self_addr]
            self._addr_to_id.update({a: vid for vid, a in join_members})
        with patched_create_journal():  # main (trio) thread: the tick thread watches it
            self._node = _RaftNode(self, self_addr, others, conf, tick_until_deadline=str(
                settings.get("raft.tick.until.deadline", True)).lower() not in ("false", "0", "no", "off"),
                frame_cipher=str(settings.get("raft.frame.cipher", "aes-gcm")),
                compress_min_bytes=int(settings.get("raft.compress.min.bytes", raft_zlib.STORE_BELOW_BYTES)))
        self._connect_timeout_s = float(raft["connectionTimeout"])
        self.connects_abandoned = 0
        self._node.addOnTickCallback(self._abandon_unanswered_connects)
        self._tick_seen: tuple[int | None, int, bool] | None = None  # tick thread only
        self._node.addOnTickCallback(self._leadership_on_tick)
        self.watchdog = RaftWatchdog()  # fed by _stall_watch_loop; read by statistics()

    # -- tick thread side ---------------------------------------------------------------

    def _apply_on_tick(self, data: bytes) -> tuple[Any, ...]:
        raft_index = self._node.raftLastApplied + 1
        if self.metadata_log.holds_raft_index(raft_index):
            # Replay after a restart: pysyncobj re-applies every entry after its last dump,
            # up to raft.compaction.min.entries of them, once a leader has committed in its
            # term, i.e. between the election and this controller's activation. Decoding
            # each only to skip it cost ~0.2 ms an entry (issue 27, kill-all: up to a second
            # per voter with 3 voters on 2 cores); nothing is written, so trio is not woken.
            return ("skip",)
        try:
            applied = self.metadata_log.apply(Command.from_bytes(data), raft_index)
        except BaseException:  # fail-stop: never go on voting without recording a command
            log.critical("applying a committed command failed; stopping this voter", exc_info=True)
            os._exit(70)
        self._wake_trio(self._on_applied)
        if applied.error is not None:
            return ("err", int(applied.error.code), applied.error.message)
        if applied.result is None:
            return ("skip",)
        r = applied.result
        return ("ok", r.base_offset, r.last_offset, r.epoch, r.duplicate)

    def _abandon_unanswered_connects(self) -> None:
        """Tick callback (see Liveness above): close each outgoing Raft connection that has been
        CONNECTING longer than ``connectionTimeout``. pysyncobj's disconnect handler then dials
        the peer again at once (its ``_onDisconnected`` -> ``_connectIfNecessarySingle``; the
        last attempt is older than ``connectionRetryTime``), with a new socket and a new SYN.
        Reads pysyncobj's private fields (0.3.17: no public view of its links); runs on the
        tick thread, the only thread that touches the connections."""
        transport = self._node._SyncObj__transport
        now = raft_clock()
        for node, conn in list(getattr(transport, "_connections", {}).items()):
            if conn.state != CONNECTION_STATE.CONNECTING:
                continue
            started = getattr(conn, "_TcpConnection__lastReadTime", None)  # set by connect()
            if started is not None and now - started > self._connect_timeout_s:
                self.connects_abandoned += 1
                log.info("Raft connect to %s unanswered for %.1f s: closing it to dial again",
                         node.address, now - started)
                conn.disconnect()

    def _apply_voters_on_tick(self, data: bytes) -> tuple[Any, ...]:
        refused = self.registry.apply(msgpack.unpackb(data, raw=False))
        return ("ok",) if refused is None else ("err", refused)

    def _wake_trio(self, fn: Any, *args: Any) -> None:
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass

    def _on_state_changed(self, old: int, new: int) -> None:
        self._wake_trio(self._poll_leadership)

    def _leadership_on_tick(self) -> None:
        """Tick callback: hand trio a leadership check only when (leader, term, is-leader)
        differs from the last tick's. A few attribute reads per tick, no wake-up otherwise."""
        seen = (self.leader_id(), self.epoch(), bool(self._node._isLeader()))
        if seen != self._tick_seen:
            self._tick_seen = seen
            self._wake_trio(self._poll_leadership)

    def _serialize(self, filename: str, raft_data: tuple[Any, ...]) -> None:
        entry1, entry0, cluster = raft_data
        payload = self.metadata_log.snapshot_payload()
        payload["ri"] = max(payload["ri"], int(entry1[1]))
        obj = {
            "raft": [[bytes(entry1[0]), entry1[1], entry1[2]], [bytes(entry0[0]), entry0[1], entry0[2]],
                     sorted(n.address for n in cluster)],
            "state": payload,
            "voters": self.registry.to_wire(),
        }
        with open(filename, "wb") as f:
            f.write(encode_frame(obj))
            f.flush()
            os.fsync(f.fileno())

    def _deserialize(self, filename: str) -> tuple[Any, ...]:
        with open(filename, "rb") as f:
            frames, _ = decode_frames(f.read())
        if not frames:
            raise ValueError(f"corrupt raft dump {filename}")
        obj = frames[0][0]
        if self.metadata_log.install(obj["state"]):
            log.warning("installed a snapshot from the leader at metadata offset %s", obj["state"]["o"])
            self._wake_trio(self._on_applied)
        self.registry = VoterRegistry.from_wire(obj.get("voters"))  # the registry as of the dump
        e1, e0, cluster = obj["raft"]
        return (tuple(e1), tuple(e0), {TCPNode(a) for a in cluster})

    # -- trio side ------------------------------------------------------------------------

    def _on_applied(self) -> None:
        self._applied.set()

    def _poll_leadership(self) -> None:
        ev = (self.leader_id(), self.epoch(), bool(self._node._isLeader()))
        if ev != self._last_event:
            if ev[0] is not None and (self._last_event is None or ev[0] != self._last_event[0]):
                self.leader_changes += 1  # a new known leader (statistics(): broker/metrics.py)
            if self._last_event is None or ev[:2] != self._last_event[:2]:
                # one line per leader or term change, with the pre-vote counters so far: a slow
                # failover can be read from the node logs (an election's rounds and refusals)
                n = self._node
                log.info("Raft: leader %s in term %s (pre-votes started %d, refused %d, stood "
                         "back %d; votes ignored in a lease %d)", ev[0], ev[1], n.prevote_rounds,
                         n.prevotes_refused, n.prevotes_deferred, n.votes_ignored_in_lease)
            self._last_event = ev
            self._leader_changed.set()
            self._leader_changed = trio.Event()
            try:
                self._events_send.send_nowait(LeadershipEvent(*ev))
            except trio.WouldBlock:
                self._events_recv.receive_nowait()
                self._events_send.send_nowait(LeadershipEvent(*ev))

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._flush_loop)
                nursery.start_soon(self._register_loop)
                nursery.start_soon(self._stall_watch_loop)
                self._poll_leadership()  # the state as of now; the tick thread reports changes
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                self._closed = True
                await trio.to_thread.run_sync(self._node.destroy_synchronous)
                await trio.to_thread.run_sync(self.metadata_log.close)

    async def _stall_watch_loop(self) -> None:
        """The liveness watchdog (kraft/raft_watchdog.py): one sample of pysyncobj every 0.5 s;
        it logs a stall (no commit progress), an unbound Raft listener, and feeds the metrics.
        (docs/chaos-results.md, seed 9: a 271 s election stall whose cause the logs could not
        show; issue 27: a voter whose Raft port was taken sat out silently.)"""
        while True:
            await sleep_on_grid(0.5)  # shares the node's other 0.5 s / 1 s wake-ups
            for level, msg in self.watchdog.observe(self._raft_sample(), trio.current_time()):
                log.log(level, "node %s term %s: %s", self.node_id, self.epoch(), msg)

    def _raft_sample(self) -> RaftSample:
        links = self.raft_links()
        bound = links["listener_bound"]
        host, _, port = links["listen_address"].rpartition(":")
        return RaftSample(
            leader_known=self.leader_id() is not None,
            commit_index=int(self._node.raftCommitIndex),
            last_index=int(self._node._SyncObj__getCurrentLogIndex()),
            listener_bound=bound,
            bind_error=bind_error(host, int(port)) if bound is False else "",
            listen_address=links["listen_address"],
            peers={a: ("connected" if p["raft_connected"] else p["conn"]) for a, p in links["peers"].items()},
            raft_connected=sum(1 for p in links["peers"].values() if p["raft_connected"]),
            voters=len(links["peers"]) + 1,
            links=links,
        )

    def raft_links(self) -> dict[str, Any]:
        """pysyncobj's view of its peer links, read without a lock (a log line, not a decision):
        Raft state, whether its listener is bound, and per peer whether Raft counts it connected
        and the state of the transport's connection object (``none`` on the accepting side
        before the peer's first connection)."""
        node = self._node
        transport = node._SyncObj__transport  # pysyncobj has no public view of its links
        server = getattr(transport, "_server", None)
        conns = dict(getattr(transport, "_connections", {}))
        peers = {}
        for peer in list(node.otherNodes):
            conn = conns.get(peer)
            peers[peer.address] = {
                "raft_connected": bool(node.isNodeConnected(peer)),
                "conn": "none" if conn is None else _CONN_STATES.get(conn.state, str(conn.state)),
            }
        return {
            "state": {0: "follower", 1: "candidate", 2: "leader"}.get(node._SyncObj__raftState, "?"),
            "listener_bound": None if server is None else server._TcpServer__state == SERVER_STATE.BINDED,
            "listen_address": self._node.conf.bindAddress or node.selfNode.address,
            "unidentified_incoming": len(getattr(transport, "_unknownConnections", ())),
            "peers": peers,
        }

    async def _flush_loop(self) -> None:
        while True:
            await self._applied.wait()
            self._applied = trio.Event()
            before = self.metadata_log.durable_offset
            await trio.to_thread.run_sync(self.metadata_log.sync)
            if self.metadata_log.durable_offset != before:
                self._durable.set()
                self._durable = trio.Event()
            await trio.to_thread.run_sync(self.metadata_log.maybe_snapshot)

    # -- MetadataQuorum -------------------------------------------------------------------

    def leader_id(self) -> int | None:
        node = self._node._getLeader()
        return None if node is None else self.id_of(node.address)

    def id_of(self, raft: str) -> int | None:
        """The voter id at a Raft address: the registry's (kept by add-voter), else the config's."""
        vid = self.registry.id_of(raft)
        return vid if vid is not None else self._addr_to_id.get(raft)

    # -- membership (kraft/voters.py, kraft/voter_admin.py) -----------------------------------

    def members(self) -> dict[str, int | None]:
        """The current Raft voter set as this node sees it: Raft address -> voter id."""
        addrs = [self._node.selfNode.address] + [n.address for n in self._node.otherNodes]
        return {a: self.id_of(a) for a in sorted(addrs)}

    def is_ready(self) -> bool:
        """Does this voter's registry show everything its Raft log holds? True once it has
        caught up with a leader since it started, or when every entry in its log is applied
        (e.g. a voter of a new cluster that has nothing but pysyncobj's first entry)."""
        if self._node.isReady():
            return True
        last_index = self._node._SyncObj__getCurrentLogIndex()  # pysyncobj has no public name for it
        return bool(self._node.raftLastApplied >= last_index)

    def raft_lag(self) -> dict[str, int]:
        """On the leader: Raft address -> entries the leader has that the voter lacks."""
        st = self._node.getStatus()
        last = int(st.get("commit_idx") or 0)
        return {k[len("match_idx_server_"):]: max(0, last - int(v))
                for k, v in st.items() if k.startswith("match_idx_server_")}

    async def change_membership(self, op: str, raft: str) -> None:
        """One pysyncobj single-server change ("add" / "remove" the voter at ``raft``),
        returned once committed. The caller (the active controller) makes one at a time:
        pysyncobj's own guard against overlapping changes is never armed (its
        ``__changeClusterIDx`` is not set anywhere in 0.3.17)."""
        fn = self._node.addNodeToCluster if op == "add" else self._node.removeNodeFromCluster
        if self._change_in_flight:  # an earlier change whose waiter gave up has not committed
            raise error_for(ErrorCode.REQUEST_TIMED_OUT, "an earlier membership change is still committing")
        self._change_in_flight = True

        def send(cb: Any) -> None:
            def done(res: Any, err: int) -> None:  # tick thread
                self._change_in_flight = False
                cb(res, err)
            try:
                fn(raft, callback=done)
            except BaseException:
                self._change_in_flight = False
                raise

        _res, err = await self._submit(send)
        if err != FAIL_REASON.SUCCESS:
            why = {FAIL_REASON.REQUEST_DENIED: "refused (a change is still committing, or the new "
                   "leader has not committed its first entry yet: try again)"}.get(err, f"failed (reason {err})")
            raise not_controller(self.leader_id(), f"membership change {op} {raft} {why}") \
                if err in (FAIL_REASON.NOT_LEADER, FAIL_REASON.LEADER_CHANGED, FAIL_REASON.MISSING_LEADER) \
                else error_for(ErrorCode.REQUEST_TIMED_OUT, f"membership change {op} {raft} {why}")

    async def update_registry(self, command: list[Any]) -> None:
        """Propose one voter-registry command (any voter may; pysyncobj forwards it to the
        leader) and wait until it has applied here. Raises ``InvalidRequestError`` if refused."""
        data = msgpack.packb(command, use_bin_type=True)
        res, err = await self._submit(lambda cb: self._node.apply_voters(data, callback=cb))
        if err != FAIL_REASON.SUCCESS:
            raise not_controller(self.leader_id(), f"voter registry update failed (reason {err})")
        if res[0] == "err":
            raise error_for(ErrorCode.INVALID_REQUEST, res[1])

    async def _register_loop(self) -> None:
        """Keep this voter's directory id registered (kraft/voters.py): once it has caught up,
        and again after a remove-voter / add-voter while it runs (a node that is not a member
        cannot get its proposal to the leader, whose transport drops it). A refusal means the
        registry knows another incarnation of this voter: stop."""
        if not self.directory_id:
            return
        while True:
            entry = self.registry.entries.get(self.node_id)
            if entry is not None and entry.directory_id == self.directory_id:
                await sleep_on_grid(1.0)
                continue
            if self.is_ready() and self.leader_id() is not None:
                me = self._node.selfNode.address
                try:
                    with trio.move_on_after(5):
                        await self.update_registry(VoterRegistry.register(self.node_id, me, self.directory_id))
                        log.info("registered voter %s with directory %s", self.node_id, self.directory_id)
                except RafkaError as exc:
                    if exc.code == ErrorCode.INVALID_REQUEST:
                        raise StaleIncarnationError(f"node {self.node_id}: {exc.message}") from None
                    log.debug("voter registration: %s (retrying)", exc)
            await trio.sleep(0.2)

    def epoch(self) -> int:
        return int(self._node.raftCurrentTerm)

    def committed_offset(self) -> int:
        return self.metadata_log.durable_offset

    def log_start_offset(self) -> int:
        return self.metadata_log.log_start

    def image(self) -> MetadataImage:
        return self.metadata_log.sm.image

    def applied_request(self, request_id: str) -> ProposeResult | None:
        return self.metadata_log.sm.applied(request_id)  # a dict lookup: atomic under the GIL

    def read(self, from_offset: int, max_records: int) -> list[LogEntry]:
        return self.metadata_log.read(from_offset, max_records)

    def latest_snapshot(self) -> Snapshot | None:
        return self.metadata_log.latest_snapshot()

    def leadership_events(self) -> trio.MemoryReceiveChannel[LeadershipEvent]:
        return self._events_recv

    def leader_changed(self) -> trio.Event:
        """An event set at the next change of (leader, term, is-leader) that trio sees (the
        tick thread reports each one, see :meth:`_leadership_on_tick`): wait on it instead of
        polling :meth:`leader_id` (``ControllerChannel``'s ``view_changed``)."""
        return self._leader_changed

    async def wait_for_offset(self, offset: int) -> None:
        while self.committed_offset() < offset:
            await self._durable.wait()

    async def _submit(self, send: Any) -> tuple[Any, int]:
        """``send(callback)`` hands one command to pysyncobj; returns (result, FAIL_REASON)."""
        done = trio.Event()
        box: list[Any] = []

        def finish(res: Any, err: int) -> None:
            box.append((res, err))
            done.set()

        def callback(res: Any, err: int) -> None:  # tick thread
            self._wake_trio(finish, res, err)

        send(callback)
        await done.wait()
        return box[0]  # type: ignore[no-any-return]

    async def propose(self, command: Command) -> ProposeResult:
        if self._closed:
            raise error_for(ErrorCode.BROKER_NOT_AVAILABLE, "the controller quorum is shutting down")
        data = command.to_bytes()
        for _attempt in range(_PROPOSE_ATTEMPTS):
            if not self._node._isLeader():
                raise not_controller(self.leader_id())
            res, err = await self._submit(lambda cb: self._node.apply_command(data, callback=cb))
            if err == FAIL_REASON.SUCCESS:
                if res[0] == "err":
                    raise error_for(res[1], res[2], leader_id=self.image().quorum.leader_id)
                if res[0] == "skip":
                    raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, "command replayed, outcome unknown")
                _, base, last, epoch, dup = res
                await self.wait_for_offset(last)
                return ProposeResult(base, last, epoch, dup)
            if err in (FAIL_REASON.LEADER_CHANGED, FAIL_REASON.UNKNOWN_OUTCOME, FAIL_REASON.DISCARDED):
                continue  # may or may not have applied: retry, the request id dedups it
            if err == FAIL_REASON.QUEUE_FULL:
                raise error_for(ErrorCode.REQUEST_TIMED_OUT, "raft command queue full")
            raise not_controller(self.leader_id(), f"raft proposal failed (reason {err})")
        raise not_controller(self.leader_id(), "leadership changed while proposing")

    def statistics(self) -> dict[str, Any]:
        st = self._node.getStatus()
        return {
            "raft_term": st.get("raft_term"),
            "raft_commit_index": st.get("commit_idx"),
            "raft_last_applied": st.get("last_applied"),
            "raft_log_len": st.get("log_len"),
            "metadata_durable_offset": self.metadata_log.durable_offset,
            "metadata_fsyncs": self.metadata_log.fsyncs,
            "leader_changes": self.leader_changes,
            "raft_voters": len(self._node.otherNodes) + 1,
            "raft_prevote_rounds": self._node.prevote_rounds,
            "raft_prevotes_refused": self._node.prevotes_refused,
            "raft_votes_ignored_in_lease": self._node.votes_ignored_in_lease,
            "raft_term_notices_sent": self._node.term_notices_sent,
            "raft_term_notices_adopted": self._node.term_notices_adopted,
            "raft_chunk_pieces_deferred": self._node.chunk_pieces_deferred,
            "raft_chunk_pieces_dropped": self._node.chunk_pieces_dropped,
            "raft_tick_polls_until_deadline": getattr(self._node._poller, "steady_polls", 0),
            "raft_tick_polls_period": getattr(self._node._poller, "period_polls", 0),
            **{f"raft_frames_opened_{c.replace('-', '_')}": n
               for c, n in getattr(self._node.encryptor, "opened", {}).items()},
            "quorum_seconds_since_commit": self.watchdog.state.seconds_since_commit,
            "quorum_stalled": self.watchdog.state.stalled,
            "raft_listener_bound": self.watchdog.state.listener_bound,
            "raft_peers": dict(self.watchdog.state.peers),
        }



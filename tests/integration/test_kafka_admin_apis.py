"""The Kafka admin APIs beyond topics and groups, through unmodified clients against real
``rafka cluster up`` nodes (broker/kafka/admin_more.py, docs/kafka-compat.md): DeleteRecords
(native and Kafka, replicated to followers), OffsetForLeaderEpoch, ElectLeaders,
DescribeQuorum, Alter/ListPartitionReassignments, DescribeTopicPartitions, DescribeLogDirs and
AlterReplicaLogDirs."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rafka.broker.kafka import codec
from rafka.client import Admin, Consumer, Producer, TopicPartition
from rafka.client.errors import OffsetOutOfRangeError

from tests.integration.conftest import LocalCluster, wait_until
from tests.integration.test_kafka_clients import create, kafka_bootstrap


@pytest.fixture(scope="module")
def cluster1(module_cluster1: LocalCluster) -> LocalCluster:
    """One node for this module's tests (conftest: ``module_cluster1``); a test that
    restarts its node or changes cluster-wide settings takes ``cluster_factory(1)``."""
    return module_cluster1



def _roundtrip(addr: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
    host, port = addr.split(":")
    req = codec.build(codec.request_schema(api_key, version), body)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(codec.encode_request(req, 7))
        head = _recv(s, 4)
        payload = _recv(s, struct.unpack(">i", head)[0])
    cid, resp = codec.decode_response(payload, api_key, version)
    assert cid == 7
    return resp


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def _produce(c: LocalCluster, topic: str, n: int, partition: int = 0) -> None:
    with Producer(bootstrap_servers=c.bootstrap, acks="all", linger_ms=0) as p:
        for i in range(n):  # one batch each: several segments at segment.bytes 1024
            p.send(topic, value=b"v%03d" % i + b"x" * 100, partition=partition).result(timeout=30)


def _log_starts(c: LocalCluster, topic: str) -> list[int]:
    """Each replica's checkpointed log start offset of ``topic``-0 (0: none written)."""
    out = []
    for d in sorted(Path(c.data_dir).rglob(f"{topic}-0")):
        f = d / "log-start-offset-checkpoint"
        out.append(int(f.read_text()) if f.exists() else 0)
    return out


def test_delete_records_native_then_kafka_reaches_followers(cluster3: LocalCluster) -> None:
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import AdminClient

    with Admin(bootstrap_servers=cluster3.bootstrap) as a:
        a.create_topic("dr", partitions=1, replication_factor=3, config={"segment.bytes": "1024"})
    create(cluster3, "dr", partitions=1, rf=3)
    _produce(cluster3, "dr", 60)
    tp = TopicPartition("dr", 0)
    with Admin(bootstrap_servers=cluster3.bootstrap) as a:
        assert a.delete_records({tp: 25}) == {tp: 25}
        # answered once every in-sync replica moved its log start (Kafka's low watermark)
        assert _log_starts(cluster3, "dr") == [25, 25, 25]
        assert a.list_offsets({tp: -2})[tp][0] == 25
        with pytest.raises(OffsetOutOfRangeError):
            a.delete_records({tp: 61})  # above the high watermark
        assert a.delete_records({tp: 10}) == {tp: 25}  # never moves back
    with Consumer(bootstrap_servers=cluster3.bootstrap) as cons:
        cons.assign([tp])
        cons.seek_to_beginning()
        got: list[Any] = []
        while len(got) < 35:
            for recs in cons.poll(timeout_ms=500).values():
                got += recs
        assert got[0].offset == 25 and got[0].value.startswith(b"v025")

    r = subprocess.run([sys.executable, "-m", "rafka.cli", "partition", "delete-records",
                        "--topic", "dr", "--partition", "0", "--before", "30",
                        "--bootstrap", cluster3.bootstrap, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["low_watermark"] == 30
    assert _log_starts(cluster3, "dr") == [30, 30, 30]

    # Kafka's DeleteRecords through confluent-kafka's AdminClient, then every replica moves
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap(cluster3)})
    fut = admin.delete_records([CTP("dr", 0, 40)])[CTP("dr", 0, 40)]
    assert fut.result(timeout=30).low_watermark == 40
    assert _log_starts(cluster3, "dr") == [40, 40, 40]  # no replica waits for a fetch round
    # on every replica the first segment left is the one holding offset 40
    for d in Path(cluster3.data_dir).rglob("dr-0"):
        bases = sorted(int(f.stem) for f in d.glob("*.log"))
        assert bases and bases[0] <= 40 and (len(bases) == 1 or bases[1] > 40), (d, bases)


def test_kafka_python_delete_records_and_out_of_range_fetch(cluster1: LocalCluster) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError as KOffsetOutOfRange
    from kafka.errors import UnknownTopicOrPartitionError

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "drk", partitions=2)
    _produce(cluster1, "drk", 20, partition=0)
    admin = KafkaAdminClient(bootstrap_servers=kb)
    try:
        res = admin.delete_records({KTP("drk", 0): 12, KTP("drk", 1): -1})
        assert res[KTP("drk", 0)]["low_watermark"] == 12
        assert res[KTP("drk", 1)]["low_watermark"] == 0
        with pytest.raises(KOffsetOutOfRange):
            admin.delete_records({KTP("drk", 0): 1000})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_records({KTP("drk", 99): -1})
    finally:
        admin.close()
    # ListOffsets earliest answers the new start; a fetch below it is OFFSET_OUT_OF_RANGE
    lo = _roundtrip(kb, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "drk", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                        "timestamp": -2}]}]})
    assert lo.topics[0].partitions[0].offset == 12
    fetch = _roundtrip(kb, 1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
            {"topic": "drk", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                             "fetch_offset": 3, "last_fetched_epoch": -1,
                                             "log_start_offset": -1,
                                             "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": (), "rack_id": ""})
    p = fetch.responses[0].partitions[0]
    assert int(p.error_code) == 1 and p.log_start_offset == 12  # OFFSET_OUT_OF_RANGE
    cons = KafkaConsumer(bootstrap_servers=kb, auto_offset_reset="earliest",
                         consumer_timeout_ms=5000, enable_auto_commit=False)
    cons.assign([KTP("drk", 0)])
    cons.seek_to_beginning()
    offsets = [r.offset for r in cons]
    cons.close()
    assert offsets == list(range(12, 20))


def test_offset_for_leader_epoch(cluster1: LocalCluster) -> None:
    kb = kafka_bootstrap(cluster1)
    create(cluster1, "ole")
    _produce(cluster1, "ole", 5)
    md = _roundtrip(kb, 3, 12, {"topics": [{"name": "ole", "topic_id": None}],
                                "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    epoch = md.topics[0].partitions[0].leader_epoch
    for version in (2, 3, 4):
        body: dict[str, Any] = {"replica_id": -1, "topics": [{"topic": "ole", "partitions": [
            {"partition": 0, "current_leader_epoch": epoch, "leader_epoch": epoch},
            {"partition": 7, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
        resp = _roundtrip(kb, 23, version, body)
        ours, missing = resp.topics[0].partitions
        assert (int(ours.error_code), ours.leader_epoch, ours.end_offset) == (0, epoch, 5)
        assert int(missing.error_code) == 3  # UNKNOWN_TOPIC_OR_PARTITION
    # a current_leader_epoch newer than the leader's is UNKNOWN_LEADER_EPOCH (75)
    resp = _roundtrip(kb, 23, 4, {"replica_id": -1, "topics": [{"topic": "ole", "partitions": [
        {"partition": 0, "current_leader_epoch": epoch + 5, "leader_epoch": epoch}]}]})
    assert int(resp.topics[0].partitions[0].error_code) == 75


def test_kafka_python_admin_elections_quorum_reassignments_log_dirs(cluster1: LocalCluster) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import ElectionNotNeededError
    from kafka.structs import TopicPartitionReplica

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "adm", partitions=3)
    admin = KafkaAdminClient(bootstrap_servers=kb)
    try:
        res = admin.elect_leaders(0, {"adm": [0, 1, 2]})
        (topic, parts), = res.replica_election_results
        assert topic == "adm" and sorted(p[0] for p in parts) == [0, 1, 2]
        assert {p[1] for p in parts} == {ElectionNotNeededError.errno}

        q = admin.describe_metadata_quorum()
        p = q["topics"][0]["partitions"][0]
        assert q["topics"][0]["topic_name"] == "__cluster_metadata"
        assert p["leader_id"] == 1 and p["leader_epoch"] >= 0 and p["high_watermark"] > 0
        assert [v["replica_id"] for v in p["current_voters"]] == [1]

        assert admin.list_partition_reassignments() == {}
        tp = KTP("adm", 0)
        assert admin.alter_partition_reassignments({tp: [1]}) == {tp: None}

        page = admin.describe_topic_partitions(["adm"], response_partition_limit=2)
        assert [x["partition_index"] for x in page["topics"][0]["partitions"]] == [0, 1]
        assert page["next_cursor"] == {"topic_name": "adm", "partition_index": 2}
        rest = admin.describe_topic_partitions(["adm"], response_partition_limit=10,
                                               cursor=page["next_cursor"])
        assert [x["partition_index"] for x in rest["topics"][0]["partitions"]] == [2]
        assert rest["next_cursor"] is None

        dirs = admin.describe_log_dirs()
        (one,) = dirs
        (d,) = one["log_dirs"]
        assert one["broker"] == 1 and d["error_code"] == 0 and Path(d["log_dir"]).is_dir()
        hosted = {(t["name"], p["partition_index"]) for t in d["topics"] for p in t["partitions"]}
        assert {("adm", 0), ("adm", 1), ("adm", 2)} <= hosted
        moved = admin.alter_replica_log_dirs({TopicPartitionReplica("adm", 0, 1): d["log_dir"]})
        assert list(moved.values())[0].errno == 0
        other = admin.alter_replica_log_dirs({TopicPartitionReplica("adm", 1, 1): "/elsewhere"})
        assert list(other.values())[0].errno == 57  # LOG_DIR_NOT_FOUND
    finally:
        admin.close()


def test_committed_leader_epoch_batched_offset_fetch_and_delete_by_id(cluster1: LocalCluster) -> None:
    kb = kafka_bootstrap(cluster1)
    create(cluster1, "ce", partitions=2)
    def commit() -> bool:  # as a client: find the coordinator (creates __consumer_offsets)
        found = _roundtrip(kb, 10, 4, {"key_type": 0, "coordinator_keys": ["g-ce"]})
        if int(found.coordinators[0].error_code):
            return False
        resp = _roundtrip(kb, 8, 8, {
            "group_id": "g-ce", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": "ce", "partitions": [
                {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": 3,
                 "committed_metadata": "m"},
                {"partition_index": 1, "committed_offset": 2, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]})
        codes = [int(p.error_code) for p in resp.topics[0].partitions]
        assert set(codes) <= {0, 14, 15}, codes  # retriable: loading, not available
        return codes == [0, 0]

    wait_until(commit, "the commit is accepted", timeout_s=30)
    one = _roundtrip(kb, 9, 7, {"group_id": "g-ce", "require_stable": False, "topics": [
        {"name": "ce", "partition_indexes": [0, 1]}]})
    got = {p.partition_index: (p.committed_offset, p.committed_leader_epoch)
           for p in one.topics[0].partitions}
    assert got == {0: (7, 3), 1: (2, -1)}
    # v8: several groups in one request, each answered on its own
    many = _roundtrip(kb, 9, 8, {"require_stable": False, "groups": [
        {"group_id": "g-ce", "topics": None}, {"group_id": "g-none", "topics": [
            {"name": "ce", "partition_indexes": [0]}]}]})
    g1, g2 = many.groups
    assert g1.group_id == "g-ce" and int(g1.error_code) == 0
    assert {p.partition_index: (p.committed_offset, p.committed_leader_epoch)
            for t in g1.topics for p in t.partitions} == {0: (7, 3), 1: (2, -1)}
    assert g2.group_id == "g-none"
    assert [p.committed_offset for t in g2.topics for p in t.partitions] in ([], [-1])

    # ListOffsets -3 (max timestamp, v7+) and the served v10
    with Producer(bootstrap_servers=cluster1.bootstrap, acks="all") as p:
        for i, ts in enumerate([1000, 5000, 3000]):
            p.send("ce", value=b"%d" % i, partition=0, timestamp_ms=ts).result(timeout=30)
    for version in (7, 10):
        body: dict[str, Any] = {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "ce", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                           "timestamp": -3}]}], "timeout": 1000}
        p0 = _roundtrip(kb, 2, version, body).topics[0].partitions[0]
        assert (int(p0.error_code), p0.offset, p0.timestamp) == (0, 1, 5000)

    # DeleteTopics v6 by topic id, and an unknown id
    md = _roundtrip(kb, 3, 12, {"topics": [{"name": "ce", "topic_id": None}],
                                "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    tid = md.topics[0].topic_id
    import uuid
    stranger = uuid.uuid4()
    resp = _roundtrip(kb, 20, 6, {"topics": [{"name": None, "topic_id": tid},
                                             {"name": None, "topic_id": stranger}],
                                  "timeout": 10_000})
    ok, unknown = resp.responses
    assert (ok.name, int(ok.error_code)) == ("ce", 0)
    assert unknown.topic_id == stranger and int(unknown.error_code) == 100  # UNKNOWN_TOPIC_ID
    with Admin(bootstrap_servers=cluster1.bootstrap) as a:
        wait_until(lambda: "ce" not in a.list_topics(), "topic ce deleted", timeout_s=30)


def test_kafka_python_infers_kafka_4_0(cluster1: LocalCluster) -> None:
    from kafka import KafkaConsumer

    cons = KafkaConsumer(bootstrap_servers=kafka_bootstrap(cluster1), api_version=None)
    try:
        assert cons.config["api_version"] == (4, 0)
    finally:
        cons.close()


def _leader(kb: str, topic: str) -> tuple[int, int]:
    md = _roundtrip(kb, 3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    p = md.topics[0].partitions[0]
    return p.leader_id, p.leader_epoch


def test_offset_for_leader_epoch_across_a_leader_change(cluster3: LocalCluster) -> None:
    """The end offset of an older epoch is where the next epoch started, on the new leader."""
    create(cluster3, "olf", partitions=1, rf=3)
    _produce(cluster3, "olf", 5)
    addrs = dict(zip(range(1, 4), kafka_bootstrap(cluster3).split(","), strict=True))
    old_leader, old_epoch = _leader(addrs[1], "olf")
    cluster3.kill(old_leader)
    alive = next(a for n, a in addrs.items() if n != old_leader)
    new_leader, new_epoch = wait_until(
        lambda: (lambda le: le if le[0] not in (-1, old_leader) else None)(_leader(alive, "olf")),
        "a new leader", timeout_s=60)
    _produce(cluster3, "olf", 3)
    resp = _roundtrip(addrs[new_leader], 23, 4, {"replica_id": -1, "topics": [
        {"topic": "olf", "partitions": [
            {"partition": 0, "current_leader_epoch": new_epoch, "leader_epoch": old_epoch}]}]})
    p = resp.topics[0].partitions[0]
    assert (int(p.error_code), p.leader_epoch, p.end_offset) == (0, old_epoch, 5)
    resp = _roundtrip(addrs[new_leader], 23, 4, {"replica_id": -1, "topics": [
        {"topic": "olf", "partitions": [
            {"partition": 0, "current_leader_epoch": new_epoch, "leader_epoch": new_epoch}]}]})
    p = resp.topics[0].partitions[0]
    assert (int(p.error_code), p.leader_epoch, p.end_offset) == (0, new_epoch, 8)
    # the old epoch asked with a stale current epoch: FENCED_LEADER_EPOCH (74)
    resp = _roundtrip(addrs[new_leader], 23, 4, {"replica_id": -1, "topics": [
        {"topic": "olf", "partitions": [
            {"partition": 0, "current_leader_epoch": old_epoch, "leader_epoch": old_epoch}]}]})
    assert int(resp.topics[0].partitions[0].error_code) == 74


def test_kafka_python_transaction_admin_on_an_open_transaction(cluster1: LocalCluster) -> None:
    """DescribeProducers, ListTransactions and DescribeTransactions while a confluent-kafka
    transaction is open, then after its commit."""
    from confluent_kafka import Producer as CProducer
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "txa")
    prod = CProducer({"bootstrap.servers": kb, "transactional.id": "tx-admin"})
    prod.init_transactions(30)
    prod.begin_transaction()
    prod.produce("txa", value=b"open", partition=0)
    prod.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=kb)
    try:
        listed = admin.list_transactions()
        (mine,) = [t for ts in listed.values() for t in ts if t.transactional_id == "tx-admin"]
        assert str(mine.state.value) == "Ongoing"
        assert admin.list_transactions(producer_id_filters=[mine.producer_id + 1]) == {1: []}
        desc = admin.describe_transactions(["tx-admin"])["tx-admin"]
        assert desc.producer_id == mine.producer_id and desc.topic_partitions == {KTP("txa", 0)}
        prods = admin.describe_producers([KTP("txa", 0)])[KTP("txa", 0)].active_producers
        assert [(p.producer_id, p.current_transaction_start_offset) for p in prods] == [
            (mine.producer_id, 0)]
        prod.commit_transaction(30)
        prods = admin.describe_producers([KTP("txa", 0)])[KTP("txa", 0)].active_producers
        assert [(p.producer_id, p.current_transaction_start_offset) for p in prods] == [
            (mine.producer_id, -1)]
        wait_until(lambda: admin.describe_transactions(["tx-admin"])["tx-admin"].state.value
                   in ("CompleteCommit", "Empty"), "the transaction completed", timeout_s=30)
    finally:
        admin.close()


def test_client_quotas_through_kafka_and_native(cluster_factory: Any) -> None:
    """AlterClientQuotas / DescribeClientQuotas (raw kio: neither client library has them)
    on rafka's quotas, read back natively too."""
    cluster1 = cluster_factory(1)  # its own node: it sets cluster-wide quotas
    import trio
    from rafka.client.aio import AsyncAdmin
    from rafka.client.aio.quota_admin import describe_client_quotas

    kb = kafka_bootstrap(cluster1)

    def entry(entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]) -> dict:
        return {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops]}

    resp = _roundtrip(kb, 49, 1, {"validate_only": False, "entries": [
        entry([("user", "alice")], [("producer_byte_rate", 1024.0, False)]),
        entry([("client-id", None)], [("consumer_byte_rate", 2048.0, False)]),
        entry([("ip", "10.0.0.1")], [("producer_byte_rate", 1.0, False)]),
        entry([("user", "bob")], [("request_percentage", 50.0, False)])]})
    assert [int(e.error_code) for e in resp.entries] == [0, 0, 42, 42]  # INVALID_REQUEST

    def describe(components: list[tuple[str, int, str | None]], strict: bool) -> dict:
        r = _roundtrip(kb, 48, 1, {"strict": strict, "components": [
            {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]})
        assert int(r.error_code) == 0
        return {tuple((x.entity_type, x.entity_name) for x in e.entity):
                {v.key: v.value for v in e.values} for e in r.entries}

    def until(components: list[tuple[str, int, str | None]], want: dict) -> None:
        wait_until(lambda: describe(components, False) == want, f"quotas {want}", timeout_s=30)

    until([("user", 0, "alice")], {(("user", "alice"),): {"producer_byte_rate": 1024.0}})
    until([("client-id", 1, None)], {(("client-id", None),): {"consumer_byte_rate": 2048.0}})
    assert describe([("user", 2, None)], True) == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}
    assert describe([("ip", 2, None)], False) == {}

    async def native() -> list:
        async with AsyncAdmin(cluster1.bootstrap) as a:
            return await describe_client_quotas(a, user="User:alice")
    assert [(e["user"], e["values"]) for e in trio.run(native)] == [
        ("User:alice", {"producer_byte_rate": 1024.0})]

    resp = _roundtrip(kb, 49, 1, {"validate_only": False, "entries": [
        entry([("user", "alice")], [("producer_byte_rate", 0.0, True)])]})
    assert int(resp.entries[0].error_code) == 0
    until([("user", 0, "alice")], {})


def test_kafka_python_delete_group_offsets(cluster1: LocalCluster) -> None:
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition as CTP
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import GroupSubscribedToTopicError, NoError

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "odx", partitions=2)
    create(cluster1, "ody")
    _produce(cluster1, "ody", 3)
    cons = CConsumer({"bootstrap.servers": kb, "group.id": "od", "enable.auto.commit": False})
    cons.commit(offsets=[CTP("odx", 0, 3), CTP("odx", 1, 5), CTP("ody", 0, 1)], asynchronous=False)
    cons.close()
    admin = KafkaAdminClient(bootstrap_servers=kb)
    member = CConsumer({"bootstrap.servers": kb, "group.id": "od-live", "enable.auto.commit": False,
                        "auto.offset.reset": "earliest"})
    try:
        res = admin.delete_group_offsets("od", [KTP("odx", 0), KTP("ody", 0)])
        assert res == {KTP("odx", 0): NoError, KTP("ody", 0): NoError}
        left = admin.list_group_offsets({"od": None})["od"]
        assert {tp: o.offset for tp, o in left.items() if o.offset >= 0} == {KTP("odx", 1): 5}

        member.subscribe(["ody"])
        wait_until(lambda: member.poll(0.2) is not None or member.assignment(),
                   "the member is assigned ody", timeout_s=60)
        member.commit(offsets=[CTP("ody", 0, 2)], asynchronous=False)
        res = admin.delete_group_offsets("od-live", [KTP("ody", 0)])
        assert res == {KTP("ody", 0): GroupSubscribedToTopicError}
    finally:
        member.close()
        admin.close()


def test_a_producer_over_its_quota_is_throttled_and_loses_nothing(cluster_factory: Any) -> None:
    """A byte-rate quota on the Kafka listener (KIP-219): the produce answer carries the
    quota's throttle time — librdkafka reports it to ``throttle_cb`` — and every record still
    arrives, in order."""
    cluster1 = cluster_factory(1)  # its own node: it sets cluster-wide quotas
    from confluent_kafka import Producer as KafkaProducer

    kb = kafka_bootstrap(cluster1)
    create(cluster1, "throttled", 1)
    resp = _roundtrip(kb, 49, 1, {"validate_only": False, "entries": [{
        "entity": [{"entity_type": "client-id", "entity_name": "slow"}],
        "ops": [{"key": "producer_byte_rate", "value": 20_000.0, "remove": False}]}]})
    assert int(resp.entries[0].error_code) == 0
    wait_until(lambda: _roundtrip(kb, 48, 1, {"strict": True, "components": [
        {"entity_type": "client-id", "match_type": 0, "match": "slow"}]}).entries,
        "the quota in the broker's image", timeout_s=30)
    throttles: list[int] = []
    delivered: list[int] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered.append(int(msg.value()[:6]))

    p = KafkaProducer({"bootstrap.servers": kb, "client.id": "slow", "acks": "all",
                       "linger.ms": 5, "batch.size": 16_384,
                       "throttle_cb": lambda ev: throttles.append(int(ev.throttle_time * 1000))})
    for i in range(300):  # 300 kB against 20 kB/s: over the quota after the first requests
        p.produce("throttled", value=b"%06d" % i + b"x" * 994, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(120) == 0
    assert delivered == list(range(300))
    assert throttles and max(throttles) > 0, "no produce answer carried a throttle time"
    with Consumer(bootstrap_servers=cluster1.bootstrap, auto_offset_reset="earliest",
                  enable_auto_commit=False) as c:
        c.assign([TopicPartition("throttled", 0)])
        got: list[int] = []
        wait_until(lambda: got.extend(int(r.value[:6]) for rs in c.poll(500).values() for r in rs)
                   or len(got) >= 300, "the records back", timeout_s=60)
    assert got == list(range(300))

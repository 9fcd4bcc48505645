"""Idempotent admin calls against a real cluster (see conftest.py; docs/chaos-results.md §3).

A lost answer is simulated two ways: the raw CREATE_TOPICS / DELETE_TOPICS request sent twice
with the same ``request_id`` over a real connection, and the admin client's retry loop with
its first attempt delivered (and committed) but its answer replaced by a timeout."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio
from rafka.client import AsyncAdmin
from rafka.client.aio._core import ClientCore
from rafka.wire.connection import connect
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey


def _addr(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return host, int(port)


def _name() -> str:
    return f"idem-{uuid.uuid4().hex[:10]}"


def test_raw_create_and_delete_twice_with_the_same_request_id(bootstrap: str) -> None:
    name = _name()

    async def main() -> None:
        async with connect(*_addr(bootstrap)) as conn:
            body = {"topics": [{"name": name, "num_partitions": 2, "replication_factor": 1}],
                    "timeout_ms": 30_000, "request_id": uuid.uuid4().hex}
            first = (await conn.request(ApiKey.CREATE_TOPICS, body)).body
            assert first.get("error") in (0, None) and first["topics"][0]["error"] == 0, first
            # the answer "was lost": the same request again
            again = (await conn.request(ApiKey.CREATE_TOPICS, body)).body
            assert again.get("error") in (0, None) and again["topics"][0]["error"] == 0, again
            assert again["topics"][0]["topic_id"] == first["topics"][0]["topic_id"]
            assert again["topics"][0]["num_partitions"] == 2
            # another call is another request: the topic exists
            other = (await conn.request(ApiKey.CREATE_TOPICS, {**body, "request_id": uuid.uuid4().hex})).body
            assert other["topics"][0]["error"] == ErrorCode.TOPIC_ALREADY_EXISTS, other
            legacy = {k: v for k, v in body.items() if k != "request_id"}  # old clients: as before
            old = (await conn.request(ApiKey.CREATE_TOPICS, legacy)).body
            assert old["topics"][0]["error"] == ErrorCode.TOPIC_ALREADY_EXISTS, old

            delete = {"topics": [name], "timeout_ms": 30_000, "request_id": uuid.uuid4().hex}
            for _ in range(2):
                r = (await conn.request(ApiKey.DELETE_TOPICS, delete)).body
                assert r["topics"][0]["error"] == 0, r
            r = (await conn.request(ApiKey.DELETE_TOPICS, {**delete, "request_id": uuid.uuid4().hex})).body
            assert r["topics"][0]["error"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, r

    trio.run(main)


class _LoseFirstAnswer:
    """Wraps ``ClientCore.request_any``: records every body sent for ``api``; the first one is
    delivered to the broker (and committed) but the caller gets a timeout instead of the answer."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, api: ApiKey) -> None:
        self.api = api
        self.sent: list[dict[str, Any]] = []
        real = ClientCore.request_any

        async def request_any(core: ClientCore, api_key: ApiKey, body: dict[str, Any]) -> Any:
            resp = await real(core, api_key, body)
            if api_key == self.api:
                self.sent.append(dict(body))
                if len(self.sent) == 1:
                    raise error_for(ErrorCode.REQUEST_TIMED_OUT, "answer lost (test)")
            return resp

        monkeypatch.setattr(ClientCore, "request_any", request_any)


@pytest.mark.parametrize("api", [ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
                                 ApiKey.ALTER_CONFIGS], ids=lambda a: a.name.lower())
def test_admin_retry_after_a_lost_answer_reuses_the_request_id(bootstrap: str, monkeypatch: pytest.MonkeyPatch,
                                                               api: ApiKey) -> None:
    name = _name()

    async def main() -> None:
        async with AsyncAdmin(bootstrap, request_timeout_ms=30_000, retry_backoff_ms=20) as admin:
            if api != ApiKey.CREATE_TOPICS:
                await admin.create_topic(name, 1, 1)
            lose = _LoseFirstAnswer(monkeypatch, api)
            if api == ApiKey.CREATE_TOPICS:
                await admin.create_topic(name, 2, 1)  # raised TopicAlreadyExistsError before the fix
                assert (await admin.describe_topic(name)).partitions[1].partition == 1
            elif api == ApiKey.DELETE_TOPICS:
                await admin.delete_topic(name)  # raised UnknownTopicOrPartitionError before the fix
                assert name not in await admin.list_topics()
            elif api == ApiKey.CREATE_PARTITIONS:
                await admin.create_partitions(name, 3)  # raised InvalidPartitionsError before the fix
            else:
                await admin.alter_configs(name, {"retention.ms": "12345"})
                assert (await admin.describe_configs(name))["retention.ms"] in ("12345", 12345)
            monkeypatch.undo()
            assert len(lose.sent) == 2  # the lost attempt and one retry
            rids = {b.get("request_id") for b in lose.sent}
            assert len(rids) == 1 and None not in rids
            (rid,) = rids
            assert isinstance(rid, str) and len(rid) == 32 and int(rid, 16) >= 0
            assert lose.sent[0] == lose.sent[1]  # the very same request

            # a new logical call gets a new id
            calls: list[dict[str, Any]] = []
            real = ClientCore.request_any

            async def spy(core: ClientCore, api_key: ApiKey, body: dict[str, Any]) -> Any:
                if api_key == ApiKey.CREATE_TOPICS:
                    calls.append(body)
                return await real(core, api_key, body)

            monkeypatch.setattr(ClientCore, "request_any", spy)
            for _ in range(2):
                await admin.create_topics([(_name(), 1, 1)])
            monkeypatch.undo()
            assert len(calls) == 2 and calls[0]["request_id"] != calls[1]["request_id"]

    trio.run(main)

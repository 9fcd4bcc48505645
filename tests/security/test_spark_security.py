"""The Spark source/sink security options (spark_source/options.py, spark_source/wire.py):
parsed and checked as the clients' options, then the source's blocking connections do TLS
and SCRAM against a real node's SASL_SSL listener."""

from __future__ import annotations

import pytest
import trio
from rafka.client.aio import AsyncAdmin
from rafka.spark_source.options import OptionError, parse_sink_options, parse_source_options
from rafka.spark_source.wire import Cluster
from rafka.wire.errors import SaslAuthenticationFailedError

from tests.security.test_secured_broker import create_topic, node, produce, secured  # noqa: F401


def test_security_options_are_parsed_and_checked(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    base = {"bootstrap.servers": "h:1", "subscribe": "t"}
    assert parse_source_options(base).security == ()
    opts = parse_source_options({**base, "rafka.security.protocol": "SASL_PLAINTEXT",
                                 "rafka.sasl.username": "alice", "kafka.sasl.password": "pw"})
    assert dict(opts.security) == {"security_protocol": "SASL_PLAINTEXT",
                                   "sasl_plain_username": "alice", "sasl_plain_password": "pw"}
    sink = parse_sink_options({"bootstrap.servers": "h:1", "rafka.security.protocol": "SASL_PLAINTEXT",
                               "rafka.sasl.username": "bob", "rafka.sasl.password": "x"})
    assert dict(sink.security)["sasl_plain_username"] == "bob"
    with pytest.raises(OptionError, match="needs sasl_plain_username"):
        parse_source_options({**base, "rafka.security.protocol": "SASL_SSL"})
    with pytest.raises(OptionError, match="cannot load the TLS files"):
        parse_source_options({**base, "rafka.security.protocol": "SSL", "rafka.ssl.cafile": str(ca)})
    with pytest.raises(OptionError, match="contradict"):
        parse_source_options({**base, "rafka.sasl.username": "a", "kafka.sasl.username": "b"})
    with pytest.raises(OptionError, match="unknown option"):
        parse_source_options({**base, "rafka.sasl.user": "a"})


def _spark_options(files, **kw):
    return {"bootstrap.servers": "x:1", "subscribe": "events",
            **{f"rafka.{k}": v for k, v in {
                "security.protocol": "SASL_SSL", "sasl.username": "alice",
                "sasl.password": "alice-pw", "ssl.cafile": str(files.cafile), **kw}.items()}}


async def test_source_connections_log_in_on_a_real_node(node):  # noqa: F811
    plain, secure, files, _tmp = node
    with trio.fail_after(120):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "events")
            await admin.upsert_scram_credential("alice", "alice-pw")
        await produce(secure, "events", b"x", **secured(files))

    def read(**kw):
        opts = parse_source_options({**_spark_options(files, **kw), "bootstrap.servers": secure})
        with Cluster(opts.bootstrap_servers, timeout_ms=20_000, security=opts.security) as c:
            parts = c.refresh(["events"])
            return parts, c.list_offsets({("events", 0): -1})

    parts, ends = await trio.to_thread.run_sync(read)
    assert parts == {"events": [0]} and ends == {("events", 0): 1}
    with pytest.raises(SaslAuthenticationFailedError):
        await trio.to_thread.run_sync(lambda: read(**{"sasl.password": "wrong"}))

"""A secured listener over loopback (the real Server and client Connection, a stub dispatch):
TLS, mutual TLS, SASL/SCRAM — and every refusal is a named error, the listener stays up."""

from pathlib import Path

import pytest
import trio
from rafka.broker.server import Server
from rafka.security.certs import CertAuthority, write_node_files
from rafka.security.client import ClientSecurity
from rafka.security.listener import ListenerSecurity, SecurityConfig
from rafka.security.scram import derive_credential
from rafka.wire.connection import connect
from rafka.wire.errors import (
    FrameTooLargeError,
    IllegalSaslStateError,
    NetworkException,
    RafkaError,
    SaslAuthenticationFailedError,
    TlsHandshakeFailedError,
    TlsRequiredError,
    UnsupportedSaslMechanismError,
)
from rafka.wire.protocol import ApiKey

CREDS = {("SCRAM-SHA-256", "alice"): derive_credential("SCRAM-SHA-256", "alice-pw"),
         ("SCRAM-SHA-512", "alice"): derive_credential("SCRAM-SHA-512", "alice-pw")}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertAuthority.create()
    files = write_node_files(d, ca, "node-1", ["localhost", "127.0.0.1"])
    alice = ca.issue("alice", client=True)
    (d / "alice.pem").write_bytes(alice.cert_pem)
    (d / "alice.key").write_bytes(alice.key_pem)
    other = CertAuthority.create("another CA")
    (d / "other-ca.pem").write_bytes(other.cert_pem)
    return d, files


async def dispatch(req):
    return {"error": 0, "principal": req.principal, "api": req.api_key}


async def start(nursery, pki, protocol: str, **kw) -> tuple[Server, int]:
    _d, files = pki
    cfg = SecurityConfig(listener=("127.0.0.1", 0), advertised_listener=None, protocol=protocol,
                         certfile=str(files.certfile), keyfile=str(files.keyfile),
                         cafile=str(files.cafile), **kw)
    server = Server(dispatch, "127.0.0.1", 0,
                    security=ListenerSecurity.build(cfg, lambda m, u: CREDS.get((m, u))))
    port = await nursery.start(server.serve)
    return server, port


def client(pki, protocol: str, **kw) -> ClientSecurity:
    d, files = pki
    kw.setdefault("ssl_cafile", str(files.cafile))
    return ClientSecurity.from_options(security_protocol=protocol, **kw)


def unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


async def ask(port: int, security, api=ApiKey.METADATA, host="127.0.0.1"):
    """One request on a fresh connection (connect's nursery group unwrapped)."""
    try:
        async with connect(host, port, security=security) as conn:
            return (await conn.request(api, {})).body
    except BaseExceptionGroup as eg:
        raise unwrap(eg) from None


async def test_tls_round_trip_and_plaintext_refused(pki):
    async with trio.open_nursery() as nursery:
        server, port = await start(nursery, pki, "SSL")
        assert (await ask(port, client(pki, "SSL")))["principal"] is None
        with pytest.raises(TlsRequiredError, match="speaks TLS"):
            await ask(port, None)
        with pytest.raises(TlsHandshakeFailedError, match="certificate verify failed"):
            await ask(port, client(pki, "SSL", ssl_cafile=str(pki[0] / "other-ca.pem")))
        assert (await ask(port, client(pki, "SSL")))["error"] == 0  # still serving
        assert server.stats.tls_refused == 2
        nursery.cancel_scope.cancel()


async def test_host_name_is_checked(pki, tmp_path):
    d, _files = pki
    ca = CertAuthority.create()
    files = write_node_files(tmp_path, ca, "elsewhere", ["elsewhere.example"])
    async with trio.open_nursery() as nursery:
        _server, port = await start(nursery, (d, files), "SSL")
        sec = ClientSecurity.from_options(security_protocol="SSL", ssl_cafile=str(files.cafile))
        with pytest.raises(TlsHandshakeFailedError, match="127.0.0.1"):
            await ask(port, sec)  # the right CA, but 127.0.0.1 is not in the certificate
        nursery.cancel_scope.cancel()


async def test_mutual_tls_names_the_principal(pki):
    d, _files = pki
    async with trio.open_nursery() as nursery:
        _server, port = await start(nursery, pki, "SSL", client_auth="required")
        sec = client(pki, "SSL", ssl_certfile=str(d / "alice.pem"), ssl_keyfile=str(d / "alice.key"))
        assert (await ask(port, sec))["principal"] == "User:alice"
        with pytest.raises(RafkaError):  # no client certificate: refused
            await ask(port, client(pki, "SSL"))
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_ssl_login(pki, mech):
    async with trio.open_nursery() as nursery:
        server, port = await start(nursery, pki, "SASL_SSL")
        sec = client(pki, "SASL_SSL", sasl_mechanism=mech, sasl_plain_username="alice",
                     sasl_plain_password="alice-pw")
        async with connect("127.0.0.1", port, security=sec) as conn:
            body = (await conn.request(ApiKey.METADATA, {})).body
            assert body["principal"] == "User:alice"
            # a second login on the same connection is refused, the connection stays
            again = (await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": mech})).body
            assert again["error"] == IllegalSaslStateError.code
            big = (await conn.request(ApiKey.METADATA, {"pad": "x" * 100_000})).body
            assert big["error"] == 0  # the small frame limit is lifted after login
        assert server.stats.auth_failures == 0
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "alice-pw")])
async def test_sasl_wrong_password_and_unknown_user(pki, user, password):
    async with trio.open_nursery() as nursery:
        server, port = await start(nursery, pki, "SASL_SSL")
        sec = client(pki, "SASL_SSL", sasl_plain_username=user, sasl_plain_password=password)
        with pytest.raises(SaslAuthenticationFailedError, match="authentication failed"):
            await ask(port, sec)
        assert server.stats.auth_failures == 1
        nursery.cancel_scope.cancel()


async def test_sasl_refuses_everything_before_login_and_closes(pki):
    async with trio.open_nursery() as nursery:
        server, port = await start(nursery, pki, "SASL_PLAINTEXT")
        async with connect("127.0.0.1", port) as conn:
            versions = (await conn.request(ApiKey.API_VERSIONS, {})).body
            assert versions["error"] == 0  # allowed before authentication
            body = (await conn.request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1, "topics": []})).body
            assert body["error"] == IllegalSaslStateError.code
            assert "SASL_HANDSHAKE" in body["message"]
            with pytest.raises(NetworkException):
                try:
                    await conn.request(ApiKey.METADATA, {})
                except BaseExceptionGroup as eg:
                    raise unwrap(eg) from None
        async with connect("127.0.0.1", port) as conn:
            body = (await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": "PLAIN"})).body
            assert body["error"] == UnsupportedSaslMechanismError.code
            assert body["mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        with pytest.raises(FrameTooLargeError, match="limit of 4096"):  # small frames before login
            try:
                async with connect("127.0.0.1", port) as conn:
                    await conn.request(ApiKey.METADATA, {"pad": "x" * 10_000})
            except BaseExceptionGroup as eg:
                raise unwrap(eg) from None
        assert server.stats.auth_failures == 2  # the frame limit closes without the gate
        nursery.cancel_scope.cancel()


async def test_a_slow_unauthenticated_connection_is_closed(pki):
    async with trio.open_nursery() as nursery:
        server, port = await start(nursery, pki, "SASL_PLAINTEXT", authentication_timeout_ms=200)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(30):
            await stream.send_all(b"\x00")  # one byte, then nothing
            assert await stream.receive_some(100) == b""  # the broker hangs up
        assert server.stats.auth_failures == 1
        nursery.cancel_scope.cancel()


def test_client_options_are_checked():
    with pytest.raises(ValueError, match="security_protocol"):
        ClientSecurity.from_options(security_protocol="TLS")
    with pytest.raises(ValueError, match="sasl_plain_username"):
        ClientSecurity.from_options(security_protocol="SASL_SSL")
    with pytest.raises(ValueError, match="sasl_mechanism"):
        ClientSecurity.from_options(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                    sasl_plain_username="u", sasl_plain_password="p")
    with pytest.raises(ValueError, match="ssl_cafile"):
        ClientSecurity.from_options(security_protocol="SSL", ssl_cafile=str(Path("/nonexistent")))
    with pytest.raises(TypeError, match="ssl_cafle"):
        ClientSecurity.from_kwargs({"ssl_cafle": "x"})
    assert ClientSecurity.from_kwargs({}) is None


# -- connection limits (security/connections.py) ----------------------------------------


async def _refused(port: int) -> bytes:
    """What a connection the server refuses gets before it closes it."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    data = b""
    with trio.fail_after(30):
        while chunk := await stream.receive_some(1000):
            data += chunk
    await stream.aclose()
    return data


async def test_connection_limits_per_ip_and_per_node():
    from rafka.broker.server import ServerLimits
    from rafka.security.connections import ConnectionCounter

    async with trio.open_nursery() as nursery:
        one = Server(dispatch, "127.0.0.1", 0, ServerLimits(max_connections_per_ip=2))
        port = await nursery.start(one.serve)
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        with trio.fail_after(30):
            while one.connections.open_total < 2:  # the server has admitted both
                await trio.sleep(0.01)
        # the third from 127.0.0.1 is refused with a named error, the listener stays up
        with pytest.raises(RafkaError) as refused:
            await ask(port, None)
        assert refused.value.code.name == "TOO_MANY_CONNECTIONS" and "per IP" in refused.value.message
        await held.pop().aclose()
        with trio.fail_after(30):
            while one.connections.open_total > 1:  # the server saw the close
                await trio.sleep(0.01)
        assert (await ask(port, None))["error"] == 0
        assert one.stats.connections_refused == 1

        # one ledger shared by two listeners bounds the node: 2 in all
        node = ConnectionCounter(max_connections=2, max_connections_per_ip=100)
        a = Server(dispatch, "127.0.0.1", 0, connections=node)
        b = Server(dispatch, "127.0.0.1", 0, connections=node)
        pa, pb = await nursery.start(a.serve), await nursery.start(b.serve)
        x = await trio.open_tcp_stream("127.0.0.1", pa)
        y = await trio.open_tcp_stream("127.0.0.1", pb)
        with trio.fail_after(30):
            while node.open_total < 2:
                await trio.sleep(0.01)
        assert b"connection limit of 2 reached" in await _refused(pb)
        assert b"connection limit of 2 reached" in await _refused(pa)
        for s in (x, y, *held):
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_a_trickling_unauthenticated_connection_is_closed_by_the_deadline(pki):
    """A client that sends a valid frame one byte at a time never gets to finish it: the
    authentication deadline closes the connection first (no time is asserted: the frame is
    long enough that only the deadline can end it before it is complete)."""
    from rafka.wire.protocol import ClientProtocol

    _cid, frame = ClientProtocol("slowloris").send(ApiKey.SASL_HANDSHAKE,
                                                   {"mechanism": "SCRAM-SHA-256" + " " * 200})
    async with trio.open_nursery() as nursery:
        server, port = await start(nursery, pki, "SASL_PLAINTEXT", authentication_timeout_ms=300)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        sent = 0
        with trio.fail_after(60):
            try:
                for i in range(len(frame)):
                    await stream.send_all(frame[i:i + 1])
                    sent += 1
                    with trio.move_on_after(0.02):  # a byte every ~20 ms; closed yet?
                        if await stream.receive_some(100) == b"":
                            break
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        assert sent < len(frame), "the whole frame got through: no deadline"
        assert server.stats.auth_failures == 1
        nursery.cancel_scope.cancel()

"""A bounded protocol fuzzer against a real rafka node (issue 14).

One node process with its plaintext listener and a SASL_SSL listener
(``tests/security/test_secured_broker.running_node``). From a seeded ``random.Random`` (the
seed is printed on failure; ``RAFKA_FUZZ_SEED`` replays one), a few thousand frames go to
three kinds of connection — the plaintext listener, the secured listener before
authentication (TLS, no login) and after it (TLS + SCRAM login as alice) — of these shapes:

* random bytes under a correct length prefix, and truncated valid requests (framing intact,
  the payload cut short);
* msgpack of the wrong shape: envelopes with a wrong arity or wrong types (api key, version,
  correlation id, client id, body), and bodies of *real* api keys with one field replaced by a
  value of another type or removed (a body that still passes the schema is only sent for
  read-only APIs and PRODUCE of random record bytes, so the fuzzer does not delete topics or
  fence the broker by luck);
* oversized frames (above the 4 KiB pre-authentication limit; 64 KiB-1 MiB of garbage after);
* at the end of a connection, a length prefix larger than the body, a huge length
  (0xFFFFFFFF), or half a length prefix.

Each connection sends a batch, then a valid API_VERSIONS (the sentinel), and reads until the
sentinel's answer or the close. Every answer must be a well-formed response whose error is a
named ``ErrorCode`` — never UNKNOWN_SERVER_ERROR (a handler crash) — or the connection closes.
Afterwards the node still answers METADATA, a produce / fetch round trip works on both
listeners, and its resident memory (``/proc/PID/status`` VmRSS) grew by less than 50 MB.
"""

from __future__ import annotations

import os
import random
import socket
import ssl
import struct
from pathlib import Path
from typing import Any

import msgpack
import trio
from rafka.client.aio import AsyncAdmin, AsyncConsumer
from rafka.security.client import ClientSecurity
from rafka.spark_source.wire import BlockingConnection
from rafka.wire.errors import ErrorCode, RafkaError
from rafka.wire.protocol import (
    NEED_DATA,
    SCHEMAS,
    ApiKey,
    FrameDecoder,
    MapOf,
    Opt,
    decode_response,
    validate_request,
)

from tests.security.test_secured_broker import (
    create_topic,
    end_offset,
    produce,
    running_node,
    secured,
)

_LEN = struct.Struct(">I")
SENTINEL_CID = 0x7EADBEEF
READ_ONLY = {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.DESCRIBE_CONFIGS, ApiKey.LIST_GROUPS,
             ApiKey.DESCRIBE_QUORUM, ApiKey.DESCRIBE_ACLS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
             ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.LIST_TRANSACTIONS, ApiKey.DESCRIBE_GROUPS,
             ApiKey.LIST_OFFSETS, ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.DESCRIBE_PRODUCERS,
             ApiKey.OFFSET_FETCH, ApiKey.PRODUCE}
MAX_RSS_GROWTH_KB = 50 * 1024


def _field_names(spec: Any, out: set[str]) -> set[str]:
    if isinstance(spec, Opt):
        _field_names(spec.spec, out)
    elif isinstance(spec, list):
        _field_names(spec[0], out)
    elif isinstance(spec, dict):
        for k, v in spec.items():
            out.add(k)
            _field_names(v, out)
    return out


FIELDS = sorted(set().union(*(_field_names(s, set()) for s in SCHEMAS.values())))


def rand_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(10 if depth < 3 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31 - 1, 2**31, 2**63 - 1, -(2**63), 2**64 - 1,
                           rng.randint(-10**6, 10**6)])
    if kind == 3:
        return rng.choice([0.5, -1.0, float("nan"), float("inf"), 1e308])
    if kind == 4:
        return "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.randrange(0, 40)))
    if kind == 5:
        return rng.randbytes(rng.randrange(0, 64))
    if kind == 6:
        return rng.choice(FIELDS)
    if kind == 7:
        return [rand_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    keys = [rng.choice(FIELDS) if rng.random() < 0.7 else rand_value(rng, 3)
            for _ in range(rng.randrange(0, 5))]
    return {k: rand_value(rng, depth + 1) for k in keys if isinstance(k, str | int | bytes)}


def sample(spec: Any, rng: random.Random) -> Any:
    """A value that passes ``spec``."""
    if isinstance(spec, Opt):
        return None if rng.random() < 0.3 else sample(spec.spec, rng)
    if spec is int:
        return rng.choice([0, 1, -1, 1000])
    if spec is str:
        return rng.choice(["fz", "", "nope", "__consumer_offsets"])
    if spec is bytes:
        return rng.randbytes(rng.randrange(0, 80))
    if spec is bool:
        return False
    if spec is float:
        return 1000.0
    if isinstance(spec, list):
        return [sample(spec[0], rng) for _ in range(rng.randrange(0, 3))]
    if isinstance(spec, MapOf):
        return {}
    return {k: sample(v, rng) for k, v in spec.items()}


def _mutate(body: Any, rng: random.Random) -> Any:
    """Replace or drop one field somewhere in ``body``."""
    if isinstance(body, dict) and body:
        k = rng.choice(list(body))
        if rng.random() < 0.3:
            return {kk: v for kk, v in body.items() if kk != k}
        if isinstance(body[k], dict | list) and body[k] and rng.random() < 0.5:
            return {**body, k: _mutate(body[k], rng)}
        return {**body, k: rand_value(rng)}
    if isinstance(body, list) and body:
        i = rng.randrange(len(body))
        return body[:i] + [_mutate(body[i], rng)] + body[i + 1:]
    return rand_value(rng)


def frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def wrong_body(rng: random.Random) -> bytes:
    """A request of a real api key whose body is of the wrong shape (or a read-only one)."""
    for _ in range(10):
        key = rng.choice(list(ApiKey))
        body = _mutate(sample(SCHEMAS[key], rng), rng) if rng.random() < 0.8 else rand_value(rng)
        try:
            validate_request(int(key), body)
        except Exception:
            return pack([int(key), 0, rng.randrange(2**31 - 1), "fuzz", body])
        if key in READ_ONLY and key != ApiKey.FETCH:
            if key == ApiKey.PRODUCE:
                body = {**body, "acks": 1, "timeout_ms": 1000}
            return pack([int(key), 0, rng.randrange(2**31 - 1), "fuzz", body])
    return rng.randbytes(32)


def wrong_envelope(rng: random.Random) -> bytes:
    env: list[Any] = [int(ApiKey.METADATA), 0, rng.randrange(2**31 - 1), "fuzz", {}]
    if rng.random() < 0.3:
        del env[rng.randrange(5):]
        env += [rand_value(rng) for _ in range(rng.randrange(0, 4))]
    else:
        env[rng.randrange(5)] = rand_value(rng)
    return pack(env if rng.random() < 0.9 else rand_value(rng))


def garbage(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randrange(0, 300))


def truncated(rng: random.Random) -> bytes:
    whole = pack([int(ApiKey.METADATA), 0, 1, "fuzz", {"topics": ["fz"] * rng.randrange(1, 20)}])
    return whole[: rng.randrange(len(whole))]


PAYLOADS = [wrong_body, wrong_body, wrong_body, wrong_envelope, wrong_envelope, garbage, truncated]


def tail(rng: random.Random) -> bytes:
    """A framing breaker, sent last on a connection."""
    return rng.choice([_LEN.pack(1000) + b"short", _LEN.pack(0xFFFFFFFF) + b"x", b"\x00\x00"])


class Outcome:
    def __init__(self) -> None:
        self.frames = 0
        self.answers = 0
        self.closes = 0
        self.codes: dict[str, int] = {}


def _read_answers(sock: socket.socket, out: Outcome, where: str) -> None:
    """Answers until the sentinel's (or the close); each must be a named error or a valid one."""
    decoder = FrameDecoder()
    while True:
        payload = decoder.next_frame()
        if payload is NEED_DATA:
            try:
                data = sock.recv(1 << 16)
            except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
                data = b""
            if not data:
                out.closes += 1
                return
            decoder.receive_data(data)
            continue
        resp = decode_response(payload)  # type: ignore[arg-type]
        code = resp.body.get("error", 0)
        assert isinstance(code, int), (where, resp.body)
        name = ErrorCode(code).name  # a named error (ValueError otherwise)
        assert code != ErrorCode.UNKNOWN_SERVER_ERROR, (where, resp.body)
        if code:
            assert resp.body.get("message"), (where, resp.body)
        out.answers += 1
        out.codes[name] = out.codes.get(name, 0) + 1
        if resp.correlation_id == SENTINEL_CID and "apis" in resp.body:
            return


def fuzz_connection(sock: socket.socket, rng: random.Random, n: int, out: Outcome, where: str,
                    big: bool) -> None:
    frames = [frame(rng.choice(PAYLOADS)(rng)) for _ in range(n)]
    if big and rng.random() < 0.2:
        frames.insert(rng.randrange(len(frames) + 1), frame(rng.randbytes(rng.randrange(64 << 10, 1 << 20))))
    sentinel = frame(pack([int(ApiKey.API_VERSIONS), 0, SENTINEL_CID, "fuzz", {}]))
    try:
        sock.sendall(b"".join(frames) + sentinel)
    except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
        pass  # closed by the node meanwhile: read what it said
    out.frames += len(frames)
    _read_answers(sock, out, where)
    if rng.random() < 0.5:  # then break the framing and go
        try:
            sock.sendall(tail(rng))
            out.frames += 1
            sock.settimeout(0.2)
            _read_answers(sock, out, where)
        except (OSError, ssl.SSLError):
            pass


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def node_pid(config: Path) -> int:
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if str(config).encode() in (p / "cmdline").read_bytes():
                    return int(p.name)
            except OSError:
                continue
    raise AssertionError(f"no process runs {config}")


def run_fuzzer(seed: int, plain: tuple[str, int], secure: tuple[str, int], files: Any) -> Outcome:
    rng = random.Random(seed)
    out = Outcome()
    tls = ClientSecurity.from_options(security_protocol="SSL", ssl_cafile=str(files.cafile))
    login = ClientSecurity.from_options(**secured(files))
    for _ in range(40):  # plaintext listener: 40 connections of 50 frames
        with socket.create_connection(plain, timeout=30) as s:
            fuzz_connection(s, rng, 50, out, f"plain seed={seed}", big=True)
    for _ in range(150):  # secured, before authentication: one frame each (then it closes)
        with socket.create_connection(secure, timeout=30) as raw:
            assert tls.ssl_context is not None
            with tls.ssl_context.wrap_socket(raw, server_hostname=secure[0]) as s:
                if rng.random() < 0.2:  # over the 4 KiB limit: FRAME_TOO_LARGE and close
                    s.sendall(frame(rng.randbytes(8 << 10)))
                    out.frames += 1
                    _read_answers(s, out, f"unauthenticated oversized seed={seed}")
                else:
                    fuzz_connection(s, rng, 1, out, f"unauthenticated seed={seed}", big=False)
    for _ in range(20):  # secured, after the SCRAM login: 20 connections of 50 frames
        conn = BlockingConnection(*secure, client_id="fuzz", security=login)
        try:
            fuzz_connection(conn._sock, rng, 50, out, f"authenticated seed={seed}", big=True)
        finally:
            conn.close()
    return out


async def test_fuzzed_frames_leave_the_node_up_with_named_errors_and_flat_memory(tmp_path):
    seed = int(os.environ.get("RAFKA_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    with running_node(tmp_path) as (plain, secure, files, tmp), trio.fail_after(300):
        async with AsyncAdmin(plain, request_timeout_ms=60_000) as admin:
            await create_topic(admin, "fz")
            await admin.upsert_scram_credential("alice", "alice-pw")
        await produce(plain, "fz", b"before")
        await produce(secure, "fz", b"before, secured", **secured(files))
        pid = node_pid(tmp / "node.toml")
        before = rss_kb(pid)

        def addr(a: str) -> tuple[str, int]:
            host, port = a.rsplit(":", 1)
            return host, int(port)

        try:
            out = await trio.to_thread.run_sync(run_fuzzer, seed, addr(plain), addr(secure), files)
        except BaseException:
            print(f"protocol fuzzer failed with seed {seed} (replay: RAFKA_FUZZ_SEED={seed})")
            raise
        print(f"fuzz seed {seed}: {out.frames} frames, {out.answers} answers, {out.closes} "
              f"closes, codes {out.codes}")
        assert out.frames >= 2000 and out.answers > 1000

        # still up: METADATA, and a produce / fetch round trip on both listeners
        async with AsyncAdmin(plain, request_timeout_ms=30_000) as admin:
            assert "fz" in await admin.list_topics()
        await produce(plain, "fz", b"after")
        await produce(secure, "fz", b"after, secured", **secured(files))
        assert await end_offset(plain, "fz") >= 4
        async with AsyncConsumer("fz", bootstrap_servers=secure, group_id=None,
                                 auto_offset_reset="earliest", **secured(files)) as c:
            values: list[bytes] = []
            while b"after, secured" not in values:
                got = await c.poll(timeout_ms=10_000)
                assert got, "no records from the fuzzed node"
                values += [r.value for rs in got.values() for r in rs]
        assert {b"before", b"after"} <= set(values)
        grown = rss_kb(pid) - before
        assert grown < MAX_RSS_GROWTH_KB, f"RSS grew {grown} KiB (seed {seed})"


def test_the_generators_cover_every_shape():
    """The fuzzer's own generators (pure): every api key's sampled body passes its schema, and
    wrong bodies for a dangerous api never pass it."""
    rng = random.Random(1)
    for key, spec in SCHEMAS.items():
        for _ in range(20):
            validate_request(int(key), sample(spec, rng))
    for _ in range(2000):
        payload = wrong_body(rng)
        try:
            obj = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except Exception:
            continue
        if isinstance(obj, list) and len(obj) == 5:
            try:
                validate_request(obj[0], obj[4])
            except RafkaError:
                continue
            assert obj[0] in READ_ONLY, obj

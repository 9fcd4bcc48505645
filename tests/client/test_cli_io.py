"""``rafka produce`` / ``rafka consume`` options of issue 15 (``client/cli/io.py``): pure checks
of the kcat-style offset and format parsing and of the progress line, then the commands as a
user runs them (click's CliRunner, in process) against a real one-node cluster
(``conftest.bootstrap``).
"""

from __future__ import annotations

import io
import time
import uuid
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from rafka.client import Admin, Consumer, Producer, TopicPartition
from rafka.client.cli.io import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    ProduceProgress,
    compile_format,
    parse_headers,
    parse_offset,
)
from rafka.client.types import ConsumerRecord

from rafka.cli import main

pytestmark = pytest.mark.timeout(300)

REC = ConsumerRecord("events", 2, 41, 1_700_000_000_123, 0, b"k1", b"hello", (("a", b"1"), ("b", b"x y")))


def test_parse_offset_kcat_forms() -> None:
    assert parse_offset("earliest") == parse_offset("beginning") == EARLIEST
    assert parse_offset("latest") == parse_offset("END") == LATEST
    assert parse_offset("42") == OffsetSpec("offset", 42)
    assert parse_offset("-5") == OffsetSpec("from_end", 5)
    assert parse_offset("@1700000000000") == parse_offset("s@1700000000000") == OffsetSpec("timestamp", 1700000000000)
    for bad in ("soon", "@x", "@-1", "", "1.5"):
        with pytest.raises(click.BadParameter):
            parse_offset(bad)


def test_compile_format_fields_and_escapes() -> None:
    fmt = compile_format(r"%t/%p@%o %T [%k=%v] %h %K:%S %%\t|\x41\n")
    assert fmt(REC) == b"events/2@41 1700000000123 [k1=hello] a=1,b=x y 2:5 %\t|A\n"
    assert compile_format("%s")(REC) == b"hello"  # kcat's name for the value
    empty = REC._replace(key=None, value=None, headers=())
    assert compile_format("<%k><%v><%h>%K %S")(empty) == b"<><><>-1 -1"
    assert compile_format("plain")(REC) == b"plain"
    for bad in ("%q", "%", r"\xZZ"):
        with pytest.raises(click.BadParameter):
            compile_format(bad)


def test_parse_headers() -> None:
    assert parse_headers(["a=1", "a=2", "empty=", "eq=x=y"]) == [("a", b"1"), ("a", b"2"), ("empty", b""), ("eq", b"x=y")]
    for bad in ("novalue", "=v"):
        with pytest.raises(click.BadParameter):
            parse_headers([bad])


def test_progress_only_for_large_inputs_and_only_when_asked() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet = io.StringIO()
    with ProduceProgress(None, stream=quiet, threshold=10) as p:  # not a terminal: nothing
        p.advance(100, 1000)
    assert quiet.getvalue() == ""
    small = Tty()
    with ProduceProgress(None, stream=small, threshold=10) as p:  # a terminal, small input: nothing
        p.advance(9, 90)
    assert small.getvalue() == ""
    big = Tty()
    with ProduceProgress(None, total_bytes=2000, stream=big, threshold=10) as p:
        p.advance(10, 100)
        p.advance(90, 900)
    assert "produce 100 records" in big.getvalue()
    off = Tty()
    with ProduceProgress(False, stream=off, threshold=1) as p:  # --no-progress
        p.advance(100, 1000)
    assert off.getvalue() == ""


# ---------------------------------------------------------------------- real broker


def run(*args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def _records(bootstrap: str, topic: str, n: int, timeout_s: float = 60) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    with Consumer(topic, bootstrap_servers=bootstrap) as c:
        c.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out.extend(recs)
    return sorted(out, key=lambda r: (r.partition, r.offset))


def test_produce_partition_key_headers(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(3)
    r = run("produce", topic, "--partition", "2", "--key", "K", "-H", "src=cli", "-H", "n=1",
            "--bootstrap", bootstrap, input=b"a\nb\nc\n")
    assert r.exit_code == 0, r.output
    assert "produced 3 records" in r.stderr
    recs = _records(bootstrap, topic, 3)
    assert [(x.partition, x.key, x.value, x.headers) for x in recs] == [
        (2, b"K", v, (("src", b"cli"), ("n", b"1"))) for v in (b"a", b"b", b"c")]
    r = run("produce", topic, "--partition", "3", "--bootstrap", bootstrap, input=b"x\n")
    assert r.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr, r.stderr
    r = run("produce", topic, "--key", "K", "--key-separator", ":", "--bootstrap", bootstrap, input=b"x\n")
    assert r.exit_code == 2 and "exclude each other" in r.stderr
    r = run("produce", topic, "-H", "nokey", "--bootstrap", bootstrap, input=b"x\n")
    assert r.exit_code == 2 and "KEY=VALUE" in r.stderr


def test_produce_value_file(bootstrap: str, make_topic, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    blob = b"line one\nline two\n\x00binary\xff\n"
    path = tmp_path / "blob.bin"
    path.write_bytes(blob)
    r = run("produce", topic, "--value-file", str(path), "--key", "f", "--bootstrap", bootstrap)
    assert r.exit_code == 0, r.output
    r = run("produce", topic, "--value-file", "-", "--bootstrap", bootstrap, input=b"from\nstdin\n")
    assert r.exit_code == 0, r.output
    recs = _records(bootstrap, topic, 2)
    assert [(x.key, x.value) for x in recs] == [(b"f", blob), (None, b"from\nstdin\n")]
    r = run("produce", topic, "--value-file", str(tmp_path / "missing"), "--bootstrap", bootstrap)
    assert r.exit_code == 2 and "missing" in r.stderr


def test_produce_progress_on_large_input(bootstrap: str, make_topic) -> None:  # type: ignore[no-untyped-def]
    topic = make_topic(1)
    lines = b"".join(b"v%d\n" % i for i in range(25_000))
    r = run("produce", topic, "--progress", "--bootstrap", bootstrap, input=lines)
    assert r.exit_code == 0, r.output
    assert "records" in r.stderr and "produced 25000 records" in r.stderr
    r = run("produce", topic, "--bootstrap", bootstrap, input=lines)  # not a terminal: no progress line
    assert r.exit_code == 0 and r.stderr.strip() == f"produced 25000 records to {topic}"


@pytest.fixture
def filled(bootstrap: str, make_topic) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    """A 2-partition topic, 10 records in each (v<p>-<i>, key k<i>, timestamps 1000 + i)."""
    topic = make_topic(2)
    with Producer(bootstrap) as p:
        for part in (0, 1):
            for i in range(10):
                p.send(topic, b"v%d-%d" % (part, i), key=b"k%d" % i, partition=part,
                       headers=[("i", b"%d" % i)], timestamp_ms=1000 + i)
        p.flush()
    return topic, 10


def _consume(bootstrap: str, topic: str, *args: str, idle_ms: int | None = None) -> list[str]:
    """``rafka consume`` to the end of the log as it was at the start (``-e``), or until no
    record came for ``idle_ms`` (for an --offset outside the log, which -e refuses)."""
    until = ["--timeout-ms", str(idle_ms)] if idle_ms else ["--exit-at-end"]
    r = run("consume", topic, *args, *until, "--bootstrap", bootstrap)
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


def test_consume_partition_and_offsets(bootstrap: str, filled: tuple[str, int]) -> None:
    topic, _ = filled
    assert _consume(bootstrap, topic, "--partition", "1", "--offset", "7") == ["v1-7", "v1-8", "v1-9"]
    assert _consume(bootstrap, topic, "--partition", "0", "--offset", "-2") == ["v0-8", "v0-9"]
    assert _consume(bootstrap, topic, "--partition", "0", "--offset", "@1008") == ["v0-8", "v0-9"]
    assert _consume(bootstrap, topic, "--partition", "0", "--offset", "@99999") == []  # after the last: the end
    assert _consume(bootstrap, topic, "--partition", "0", "--offset", "500", idle_ms=1500) == []  # clamped to the end
    assert len(_consume(bootstrap, topic, "--partition", "0", "--partition", "1", "--offset", "-3")) == 6
    assert len(_consume(bootstrap, topic, "--offset", "earliest")) == 20
    assert _consume(bootstrap, topic, "--partition", "1") == []  # latest by default
    both = _consume(bootstrap, topic, "--offset", "-1")
    assert sorted(both) == ["v0-9", "v1-9"]
    r = run("consume", topic, "--partition", "5", "--bootstrap", bootstrap)
    assert r.exit_code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr and "not 5" in r.stderr
    for bad in (["--group", "g", "--partition", "0"], ["--group", "g", "--offset", "-3"],
                ["--offset", "soon"], ["--print-key", "--format", "%v"], ["--from-beginning", "--offset", "3"]):
        r = run("consume", topic, *bad, "--bootstrap", bootstrap)
        assert r.exit_code == 2, (bad, r.output)


def test_consume_format(bootstrap: str, filled: tuple[str, int]) -> None:
    topic, _ = filled
    lines = _consume(bootstrap, topic, "--partition", "1", "--offset", "-2",
                     "--format", r"%t|%p|%o|%k|%v|%T|%h\n")
    assert lines == [f"{topic}|1|8|k8|v1-8|1008|i=8", f"{topic}|1|9|k9|v1-9|1009|i=9"]
    r = run("consume", topic, "--offset", "earliest", "--max-messages", "3", "-f", r"%o\t", "--bootstrap", bootstrap)
    assert r.exit_code == 0 and len(r.stdout.split("\t")) == 4 and r.stdout.endswith("\t")


def test_consume_group_help_and_commit(bootstrap: str, filled: tuple[str, int]) -> None:
    topic, _ = filled
    helptext = run("consume", "--help").stdout
    assert "Auto-commit" in helptext and "SIGTERM" in helptext and "commits every record it printed" in helptext
    group = f"g-{uuid.uuid4().hex[:8]}"
    r = run("consume", topic, "--group", group, "--offset", "earliest", "--max-messages", "20",
            "--timeout-ms", "20000", "--bootstrap", bootstrap)
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 20, r.output
    with Admin(bootstrap) as admin:  # what --help promises: every printed record committed on exit
        assert admin.list_consumer_group_offsets(group) == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 10}

"""Run kafka-python's own integration suite against a rafka cluster's Kafka listener
(issue 23's acceptance oracle; ``make test-kafka-compat``).

What it does: takes the sdist of the kafka-python version installed in this venv (``pip
download``, cached under ``.venv/kafka-compat/``; the sdist carries ``test/integration``),
adds the two small shims its fixtures need when pointed at an external broker (``test/
__init__.py``, so ``test`` is its package rather than the standard library's, and a
``test/service.py`` with a do-nothing ``ExternalService`` — the sdist does not ship that
module), starts a one-node ``rafka cluster up``, and runs the suite with ``KAFKA_VERSION=4.0.0
KAFKA_URI=kafka://HOST:PORT`` — all but its SASL and SSL tests.

Those two (``test_sasl_integration.py``, ``test_ssl_integration.py``) ask their fixtures for a
broker of a given transport and mechanism (``kafka_broker_factory(transport="SASL_PLAINTEXT",
sasl_mechanism=...)``, ``KafkaFixture.instance(0, transport="SSL")``), which spawn a Kafka of
their own, and skip themselves under ``KAFKA_URI``. So they run in a second pytest against a
secured rafka node (``secured_cluster.py``: ``cluster up --tls --auth`` with PLAINTEXT, SSL,
SASL_PLAINTEXT and SASL_SSL Kafka listeners), without ``KAFKA_URI``, with a small plugin the
runner writes (``test/rafka_secured.py``, ``SECURED_SHIM``): ``KafkaFixture.instance`` answers
an external fixture on the rafka listener of the asked transport, its ``ssl_dir`` holding the
cluster CA as ``ca-cert``, and ``get_topic_names`` lists topics with the admin client instead
of ``kafka-topics.sh``. The fixtures' user (``alice`` / ``alice-secret``) is created with both
SCRAM mechanisms and may do everything (ACLs on every topic, group and the cluster).

The outcome is compared with ``known_failures.txt`` (one test id and its reason a line, the
same list as docs/kafka-compat.md): exit 0 when every failure is a known one, 1 when a test
outside the list fails (a regression) — and it names known failures that now pass, so the
list only shrinks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PY = sys.executable
RAFKA = str(Path(PY).with_name("rafka"))

SERVICE_SHIM = '''"""Written by rafka's tests/kafka_compat runner: the sdist lacks test/service.py; with
KAFKA_URI set the fixtures only need an ExternalService that does nothing."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def start(self):
        pass

    def stop(self):
        pass

    def wait_for(self, *args, **kwargs):
        return True

    def dump_logs(self):
        pass


class SpawnedService(ExternalService):
    def __init__(self, *args, **kwargs):
        raise RuntimeError("the rafka runner does not spawn Kafka brokers")
'''


SECURED_SHIM = '''"""Written by rafka's tests/kafka_compat runner: the SASL/SSL fixtures, which would
spawn a Kafka broker of the asked transport, answer the secured rafka node's listener of that
transport instead (RAFKA_SECURED: its listeners and the directory holding the CA as ca-cert)."""

import json
import os

from kafka import KafkaAdminClient
from test.integration import fixtures

_SEC = json.loads(os.environ["RAFKA_SECURED"])


def _instance(cls, broker_id, zookeeper=None, zk_chroot=None, host="localhost", port=None,
              external=False, transport="PLAINTEXT", replicas=1, partitions=4,
              sasl_mechanism=None, auto_create_topic=True, tmp_dir=None):
    transport = transport.upper()
    host, port = _SEC["listeners"][transport].rsplit(":", 1)
    fixture = cls(host, int(port), broker_id, replicas=replicas, partitions=partitions,
                  transport=transport, sasl_mechanism=sasl_mechanism,
                  auto_create_topic=auto_create_topic, tmp_dir=tmp_dir, external=True)
    fixture.ssl_dir = _SEC["ssl_dir"]
    return fixture


def _get_topic_names(self):
    with KafkaAdminClient(**self._enrich_client_params({"client_id": "topic_lister"})) as admin:
        return admin.list_topics()


fixtures.KafkaFixture.instance = classmethod(_instance)
fixtures.KafkaFixture.get_topic_names = _get_topic_names
'''
SECURED_TESTS = ["test/integration/test_sasl_integration.py", "test/integration/test_ssl_integration.py"]


def sdist_dir() -> Path:
    ver = version("kafka-python")
    cache = ROOT / ".venv" / "kafka-compat"
    src = cache / f"kafka_python-{ver}"
    if not (src / "test" / "integration").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([PY, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        "-d", str(cache), f"kafka-python=={ver}"], check=True)
        with tarfile.open(cache / f"kafka_python-{ver}.tar.gz") as tar:
            tar.extractall(cache, filter="data")
    (src / "test" / "__init__.py").touch()
    (src / "test" / "service.py").write_text(SERVICE_SHIM)
    (src / "test" / "rafka_secured.py").write_text(SECURED_SHIM)
    (cache / "no-kafka-root").mkdir(exist_ok=True)
    return src


def known_failures() -> dict[str, str]:
    out = {}
    for line in (HERE / "known_failures.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            test, _, why = line.partition(" ")
            out[test] = why.strip()
    return out


def _pytest(src: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "pytest", "-q", "-rA", "--tb=line", "-p", "no:randomly",
         "-p", "no:cacheprovider", "--rootdir", str(src), "-c", os.devnull,
         "-o", "addopts=", "--timeout", "60", *args],
        cwd=src, env=env, capture_output=True, text=True)


def run_plain(src: Path, tmp: Path, selection: list[str]) -> subprocess.CompletedProcess[str]:
    """Everything but the SASL/SSL tests (or the part ``selection`` names: test files, node
    ids, ``-k EXPR``), on a plain one-node cluster's Kafka listener."""
    from rafka.cluster import free_port_block

    data = tmp / "cluster"
    port = free_port_block(1)
    subprocess.run([RAFKA, "cluster", "up", "--nodes", "1", "--data-dir", str(data),
                    "--port", str(port), "--detach"], check=True)
    try:
        kafka = json.loads((data / "cluster.json").read_text())["nodes"][0]["kafka"]
        env = {**os.environ, "PYTHONPATH": str(src), "KAFKA_VERSION": "4.0.0",
               "KAFKA_URI": f"kafka://{kafka}",
               "KAFKA_ROOT": str(src.parent / "no-kafka-root")}
        return _pytest(src, env, *[a for t in SECURED_TESTS for a in ("--deselect", t)],
                       *(selection or ["test/integration"]))
    finally:
        subprocess.run([RAFKA, "cluster", "down", "--data-dir", str(data)], check=False)


def run_secured(src: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """The SASL/SSL tests on a secured node (see the module docstring)."""
    from tests.kafka_compat import secured_cluster

    data = tmp / "secured"
    c = secured_cluster.start(data)
    try:
        user = "alice"  # the sdist's KafkaFixture.broker_user / broker_password
        c.add_user(user, "alice-secret")
        for resource in (["--topic", "*"], ["--group", "*"], ["--cluster"]):
            c.allow(f"User:{user}", resource, ["all"])
        ssl_dir = tmp / "ssl"
        ssl_dir.mkdir()
        shutil.copy(c.ca, ssl_dir / "ca-cert")
        env = {k: v for k, v in os.environ.items() if k != "KAFKA_URI"}
        env |= {"PYTHONPATH": str(src), "KAFKA_VERSION": "4.0.0",
                "KAFKA_ROOT": str(src.parent / "no-kafka-root"),
                "RAFKA_SECURED": json.dumps({"listeners": c.listeners, "ssl_dir": str(ssl_dir)})}
        return _pytest(src, env, "-p", "test.rafka_secured", *SECURED_TESTS)
    finally:
        secured_cluster.stop(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "plain", "secured"), default="all",
                        help="all (default); plain: all but the SASL/SSL tests; secured: only those")
    parser.add_argument("selection", nargs="*",
                        help="with --part plain: run only these (test files or ids under "
                             "test/integration; make test's slice uses this)")
    args = parser.parse_args(argv)
    part = args.part
    sys.path.insert(0, str(ROOT))
    src = sdist_dir()
    runs: list[subprocess.CompletedProcess[str]] = []
    with tempfile.TemporaryDirectory(prefix="rafka-kafka-compat-") as tmp:
        if part in ("all", "plain"):
            runs.append(run_plain(src, Path(tmp), args.selection))
        if part in ("all", "secured"):
            runs.append(run_secured(src, Path(tmp)))
    results = {test: status for r in runs
               for status, test in re.findall(r"^(PASSED|FAILED|ERROR) (\S+)", r.stdout, re.M)}
    known = known_failures()
    if part == "plain":
        known = {t: w for t, w in known.items() if not any(t.startswith(f) for f in SECURED_TESTS)}
    elif part == "secured":
        known = {t: w for t, w in known.items() if any(t.startswith(f) for f in SECURED_TESTS)}
    failed = {t for t, s in results.items() if s != "PASSED"}
    summaries = []
    for r in runs:
        counts = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?)\s*=*$", r.stdout, re.M)
        summaries.append(counts[-1] if counts else "(no summary)")
    print(f"kafka-python {version('kafka-python')} integration suite against rafka: "
          + "; SASL/SSL part: ".join(summaries))
    for t in sorted(failed & set(known)):
        print(f"  known   {t}: {known[t]}")
    for t in sorted(set(known) & {t for t, s in results.items() if s == "PASSED"}):
        if known[t].startswith("flaky"):
            print(f"  passed  {t} (listed as flaky)")
        else:
            print(f"  FIXED   {t} (remove it from known_failures.txt)")
    new = sorted(failed - set(known))
    for t in new:
        print(f"  NEW     {t}")
    if new or not results:
        for r in runs:
            print(r.stdout[-5000:], r.stderr[-2000:], sep="\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

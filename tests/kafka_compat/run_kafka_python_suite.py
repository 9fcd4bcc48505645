"""Run kafka-python's own integration suite against a rafka cluster's Kafka listener
(issue 23's acceptance oracle; ``make test-kafka-compat``).

What it does: takes the sdist of the kafka-python version installed in this venv (``pip
download``, cached under ``.venv/kafka-compat/``; the sdist carries ``test/integration``),
adds the two small shims its fixtures need when pointed at an external broker (``test/
__init__.py``, so ``test`` is its package rather than the standard library's, and a
``test/service.py`` with a do-nothing ``ExternalService`` — the sdist does not ship that
module), starts a one-node ``rafka cluster up``, and runs the suite with ``KAFKA_VERSION=4.0.0
KAFKA_URI=kafka://HOST:PORT`` (SASL/SSL tests deselected: the Kafka listener is plaintext).

The outcome is compared with ``known_failures.txt`` (one test id and its reason a line, the
same list as docs/kafka-compat.md): exit 0 when every failure is a known one, 1 when a test
outside the list fails (a regression) — and it names known failures that now pass, so the
list only shrinks.
"""

from __future__ import annotations

import json
import os
import re
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
    (cache / "no-kafka-root").mkdir(exist_ok=True)
    return src


def known_failures() -> dict[str, str]:
    out = {}
    for line in (HERE / "known_failures.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            test, _, why = line.partition(" ")
            out[test] = why.strip()
    return out


def main(pytest_args: list[str]) -> int:
    """Run the suite; ``pytest_args`` are added to its pytest command line (e.g. ``-k
    "test_group or test_describe_group_exists"`` to run a few tests: a later ``-k`` wins)."""
    sys.path.insert(0, str(ROOT))
    from rafka.cluster import free_port_block

    src = sdist_dir()
    with tempfile.TemporaryDirectory(prefix="rafka-kafka-compat-") as tmp:
        data = Path(tmp) / "cluster"
        port = free_port_block(1)
        subprocess.run([RAFKA, "cluster", "up", "--nodes", "1", "--data-dir", str(data),
                        "--port", str(port), "--detach"], check=True)
        try:
            kafka = json.loads((data / "cluster.json").read_text())["nodes"][0]["kafka"]
            env = {**os.environ, "PYTHONPATH": str(src), "KAFKA_VERSION": "4.0.0",
                   "KAFKA_URI": f"kafka://{kafka}",
                   "KAFKA_ROOT": str(src.parent / "no-kafka-root")}
            r = subprocess.run(
                [PY, "-m", "pytest", "-q", "-rA", "--tb=line", "-p", "no:randomly",
                 "-p", "no:cacheprovider", "--rootdir", str(src), "-c", os.devnull,
                 "-o", "addopts=", "--timeout", "60", "-k", "not sasl and not ssl",
                 "test/integration", *pytest_args],
                cwd=src, env=env, capture_output=True, text=True)
        finally:
            subprocess.run([RAFKA, "cluster", "down", "--data-dir", str(data)], check=False)
    results = {test: status for status, test in re.findall(r"^(PASSED|FAILED|ERROR) (\S+)",
                                                            r.stdout, re.M)}
    known = known_failures()
    failed = {t for t, s in results.items() if s != "PASSED"}
    counts = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?)\s*=*$", r.stdout, re.M)
    summary = counts[-1] if counts else "(no summary)"
    print(f"kafka-python {version('kafka-python')} integration suite against rafka: {summary}")
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
        print(r.stdout[-5000:], r.stderr[-2000:], sep="\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""README.md's "A secured cluster", run as written on a real 3-node cluster.

The ``$`` lines and the outputs shown under them are parsed from the README section itself;
only the data dir (``rafka-data``) and the ports (a free block instead of 9092 / 39092) are
replaced, and ``--port`` / ``--data-dir`` are added to ``cluster up``. Each command must exit 0 and print its
shown first line, except a shown ``error: CODE: …``, which must fail (status 1) with that
code. Then, as the super user: ``a`` holds alice's record, ``b`` holds nothing, and
admin.properties is mode 0600.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from rafka.cluster import free_port_block
from rafka.local_security import SECURE_PORT_OFFSET
from tests.integration.conftest import PROJECT_ROOT, LocalCluster

README = PROJECT_ROOT / "README.md"


def section_commands() -> list[tuple[str, list[str]]]:
    text = README.read_text()
    start = text.index("## A secured cluster")
    end = text.find("\n## ", start + 1)
    block = re.search(r"```console\n(.*?)```", text[start:end], re.S)
    assert block, "no console block under 'A secured cluster'"
    out: list[tuple[str, list[str]]] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            out.append((line[2:].strip(), []))
        elif out:
            out[-1][1].append(line)
    return out


def _free_secured_block(n: int) -> int:
    for _ in range(50):
        base = free_port_block(n)
        try:
            for i in range(n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", base + SECURE_PORT_OFFSET + i))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block with secured ports")


def run(cmd: str) -> subprocess.CompletedProcess[str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFKA_")}
    env |= {"PATH": venv_bin + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True,
                          timeout=180, env=env, cwd=str(PROJECT_ROOT))


def test_the_section_parses() -> None:
    cmds = [c for c, _ in section_commands()]
    assert cmds[0].startswith("rafka cluster up --tls --auth")
    assert any(c.startswith("rafka acl add --allow User:alice --operation write --topic a") for c in cmds)
    assert any("| rafka user create alice" in c for c in cmds)
    assert sum("| rafka produce" in c for c in cmds) == 2


def test_secured_cluster_as_the_readme_says(tmp_path: Path) -> None:
    port = _free_secured_block(3)
    data = tmp_path / "rafka-data"
    cluster = LocalCluster(data, 3, port)  # for its teardown (down, then SIGKILL by pid)

    def subst(s: str) -> str:
        s = s.replace("rafka-data", str(data))
        for i in range(3):
            s = s.replace(f"127.0.0.1:{39092 + i}", f"127.0.0.1:{port + SECURE_PORT_OFFSET + i}")
        return s

    try:
        for cmd, shown in section_commands():
            cmd = subst(cmd)
            if cmd.startswith("rafka cluster up"):
                cmd += f" --port {port} --nodes 3 --data-dir {data}"
            r = run(cmd)
            if (data / "cluster.json").exists():
                cluster._remember()
            said = r.stdout + r.stderr
            first = subst(shown[0]) if shown else None
            if first and first.startswith("error: "):
                code = first.split()[1].rstrip(":")
                assert r.returncode == 1, f"{cmd!r} should fail:\n{said}"
                assert f"error: {code}: " in r.stderr, said
                continue
            assert r.returncode == 0, f"{cmd!r} failed:\n{said}"
            if first:
                assert first in said.splitlines(), f"{cmd!r}: expected {first!r} in:\n{said}"
        props = data / "admin.properties"
        assert stat.S_IMODE(props.stat().st_mode) == 0o600
        assert "sasl.password=" in props.read_text()

        admin = f"--command-config {props}"
        got: dict[str, Any] = {}
        for t in ("a", "b"):
            r = run(f"rafka consume {t} --from-beginning --timeout-ms 3000 {admin}")
            assert r.returncode == 0, r.stderr
            got[t] = r.stdout.splitlines()
        assert got == {"a": ["hello"], "b": []}  # the refused produce wrote nothing
        # the secured listener refuses a client without credentials, with a named error
        r = run(f"rafka topic list --bootstrap 127.0.0.1:{port + SECURE_PORT_OFFSET} "
                f"--tls-ca {data}/tls/ca.pem")
        assert r.returncode == 1 and "error: " in r.stderr
    finally:
        cluster.stop()

"""README.md's "A five-minute tour", run as written against a real 3-node cluster.

The console commands and the outputs shown are parsed from README.md itself (the ``console``
blocks under the tour heading: every ``$`` line that runs ``rafka``, alone or at the end of a
pipe), and the "From Python" snippet is executed with only the bootstrap address replaced — so
the README and this test cannot drift apart.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.conftest import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def tour_section() -> str:
    text = README.read_text()
    start = text.index("## A five-minute tour")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def tour_commands() -> list[tuple[str, list[str]]]:
    """(command, output lines shown under it) for every ``$ ... rafka ...`` line of the tour."""
    out: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", tour_section(), re.S):
        cur: tuple[str, list[str]] | None = None
        for line in block.splitlines():
            if line.startswith("$ "):
                cmd = line[2:].strip()
                cur = (cmd, []) if re.search(r"(^|\|\s*)rafka\s", cmd) else None
                if cur is not None:
                    out.append(cur)
            elif cur is not None:
                cur[1].append(line)
    return out


def python_snippet() -> str:
    section = tour_section()
    start = section.index("### From Python")
    m = re.search(r"```python\n(.*?)```", section[start:], re.S)
    assert m, "no python block under 'From Python'"
    return m.group(1)


def run(cmd: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "RAFKA_BOOTSTRAP": bootstrap, "PATH": venv_bin + os.pathsep + os.environ["PATH"]}
    # what a terminal shows: stdout and stderr together
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, env=env,
                          cwd=str(PROJECT_ROOT))


def test_the_tour_parses() -> None:
    cmds = [c for c, _ in tour_commands()]
    assert any(c.startswith("rafka topic create events") for c in cmds)
    assert any("| rafka produce events" in c for c in cmds)
    assert any(c.startswith("rafka consume events") for c in cmds)
    assert DEFAULT_BOOTSTRAP in python_snippet()


def test_readme_tour_works_as_written(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    bootstrap = cluster.bootstrap
    seen: dict[str, str] = {}
    for cmd, shown in tour_commands():
        r = run(cmd, bootstrap)
        assert r.returncode == 0, f"$ {cmd}\nexit {r.returncode}\n{r.stdout}"
        got = r.stdout.splitlines()
        seen[cmd] = r.stdout
        if "topic describe" in cmd:  # ids, leaders and placement differ from run to run
            assert got[0].startswith(shown[0].split(" id ")[0] + " id "), (cmd, got)
            assert got[1].split() == shown[1].split(), (cmd, got)
            assert len(got) == len(shown)
            hws = [int(line.split()[-1]) for line in got[2:]]
            assert sum(hws) == sum(int(line.split()[-1]) for line in shown[2:])
        elif cmd.startswith(("rafka group describe", "rafka quorum describe")):
            # member ids, metadata offsets, which partition was read first and which voter won
            # the Raft election vary: the shape ("group NAME ..." / "leader N  epoch E ...")
            words = 2 if "group describe" in cmd else 1
            assert len(got) == len(shown) and got[0].split()[:words] == shown[0].split()[:words], (cmd, got)
            if "quorum describe" in cmd:
                assert [w for w in got[0].split() if not w.isdigit()] == \
                    [w for w in shown[0].split() if not w.isdigit()], (cmd, got)
            if "group describe" in cmd:
                assert got[1].split() == shown[1].split(), (cmd, got)
                assert sum(int(line.split()[3]) for line in got[2:]) == 7, (cmd, got)  # HW total
        elif "--group" in cmd and cmd.startswith("rafka consume"):
            # every record so far, in the order the group's partitions are read
            assert sorted(got) == sorted(["1", "2", "3", "4", "5", "clicked", "scrolled"]), got
        elif shown:
            assert got == shown, f"$ {cmd}\nREADME shows {shown}\ngot {got}"
    assert any("group describe readers" in c for c in seen)
    # the same, machine-readable: the topic really has the 5 + 2 records
    r = run("rafka topic describe events --json", bootstrap)
    assert r.returncode == 0, r.stdout
    assert sum(p["high_watermark"] for p in json.loads(r.stdout)["partitions"]) == 7

    # "From Python", with only the bootstrap address replaced
    code = python_snippet().replace(DEFAULT_BOOTSTRAP, bootstrap)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md (From Python)", "exec"), {"__name__": "readme_snippet"})
    lines = buf.getvalue().splitlines()
    # the produce's metadata, the first record, then one line per partition from poll_batch
    assert len(lines) >= 2, lines
    assert all(line.startswith("TopicPartition(") for line in lines[2:]), lines
    topic, partition, offset = lines[0].split()
    assert topic == "clicks" and offset == "0" and partition in {"0", "1", "2"}
    # the group's first record: offset 0 of whichever partition it read first
    first_partition, first_offset, first_value = lines[1].split(" ", 2)
    assert first_offset == "0" and first_value in {"b'home'", "b'a'", "b'b'"}, lines
    if first_partition == partition:
        assert first_value == "b'home'", lines

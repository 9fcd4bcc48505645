"""rafka installs under one namespace (issue #15): ``rafka.client``, ``rafka.log``, ... and no
top-level ``log`` / ``client`` / ``metadata`` package that a user's own module could collide with.

Each check runs a fresh interpreter in a scratch directory (the way a user's script runs: its
own directory first on ``sys.path``), so the repository's top-level folders are not importable
by accident and only what the installation provides is seen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

CARD = ["kraft", "metadata", "log", "broker", "client", "spark_source", "chaos_tests", "security"]


def _user_env() -> dict[str, str]:
    """The environment of a user's script: no PYTHONPATH (other tests' conftests, e.g. the
    Spark one, put the repository on it for their own subprocesses)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(cwd: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=_user_env())


def test_every_card_folder_imports_under_rafka_and_none_at_top_level(tmp_path: Path) -> None:
    r = _run(tmp_path, f"""
        import importlib, importlib.util
        for name in {CARD!r}:
            assert importlib.util.find_spec(name) is None, f"top-level {{name}} is installed"
            importlib.import_module("rafka." + name)
        from rafka.client import Producer, Consumer, Admin, TopicPartition
        print("ok")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_users_own_log_and_client_modules_do_not_shadow_rafka(tmp_path: Path) -> None:
    # A user's project with modules named like the card's folders: before the namespace,
    # `import log` inside rafka found the user's log.py and the client failed to import.
    for name in ("log", "client", "metadata", "broker"):
        (tmp_path / f"{name}.py").write_text(f"WHO = 'user {name}'\n")
    r = _run(tmp_path, """
        import log, client
        from rafka.client import Producer
        from rafka.log.segment import Segment
        import rafka.node
        print(log.WHO, client.WHO)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "user log user client"


def test_the_rafka_command_and_module_entry_points_resolve(tmp_path: Path) -> None:
    rafka = Path(sys.executable).with_name("rafka")
    out = subprocess.run([str(rafka), "--version"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, env=_user_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("rafka ")
    mod = subprocess.run([sys.executable, "-m", "rafka.cli", "--version"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env=_user_env())
    assert mod.returncode == 0 and mod.stdout == out.stdout

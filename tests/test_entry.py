"""``rafka server --config PATH`` starts the node without building the client's command tree.

A node restarted after a crash pays every import before it listens (issue 27, docs/quorum.md
"Run E"): ``rafka.entry`` sends the plain server command line straight to ``rafka.node.main``.
These run the real console-script code in a fresh interpreter and look at ``sys.modules``.
"""

from __future__ import annotations

import subprocess
import sys

from rafka.entry import server_config

_PROBE = """
import sys
sys.argv = ["rafka", *sys.argv[1:]]
from rafka.entry import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("EXIT", code, "client-cli" if "rafka.client.cli" in sys.modules else "no-client-cli",
      "chaos-cli" if "rafka.chaos_tests.cli" in sys.modules else "no-chaos-cli", file=sys.stderr)
"""


def _run(*args: str) -> tuple[str, str]:
    r = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                       timeout=60)
    last = [line for line in r.stderr.splitlines() if line.startswith("EXIT ")][-1]
    return last, r.stdout + r.stderr


def test_server_with_a_config_skips_the_client_commands(tmp_path) -> None:
    missing = str(tmp_path / "missing.toml")
    for args in (("server", "--config", missing), ("server", f"--config={missing}")):
        last, out = _run(*args)
        # the node's own answer to a bad config (rafka/node.py), exit 2, and no client tree
        assert last == "EXIT 2 no-client-cli no-chaos-cli", out
        assert "rafka: config error:" in out


def test_every_other_command_line_goes_through_click() -> None:
    last, out = _run("server", "--help")
    assert last == "EXIT 0 client-cli chaos-cli" and "--config" in out
    last, out = _run("server")  # click's own error for the missing option
    assert last == "EXIT 2 client-cli chaos-cli" and "Missing option '--config'" in out
    last, out = _run("--version")
    assert last == "EXIT 0 client-cli chaos-cli" and "rafka " in out


def test_server_config_only_matches_the_plain_form() -> None:
    assert server_config(["server", "--config", "a.toml"]) == "a.toml"
    assert server_config(["server", "--config=a.toml"]) == "a.toml"
    for args in ([], ["server"], ["server", "--config"], ["server", "--config="],
                 ["server", "--config", ""], ["server", "--config", "a", "--x"],
                 ["server", "--help"], ["topics", "--config", "a"]):
        assert server_config(args) is None, args

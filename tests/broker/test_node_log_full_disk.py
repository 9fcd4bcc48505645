"""node.log on a full data volume: lines are dropped quietly, not printed as tracebacks."""

from __future__ import annotations

import logging

from rafka.chaos_tests.faults.disk import fill

from rafka.node import _QuietFileHandler
from tests.tmpfs import mounted_tmpfs


def test_node_log_on_a_full_disk_drops_lines_quietly(tmp_path, capsys):
    with mounted_tmpfs(tmp_path / "vol", "64k") as vol:
        h = _QuietFileHandler(vol / "node.log")
        try:
            fill(vol)
            log = logging.getLogger("rafka.test.quiet")
            log.propagate = False
            log.addHandler(h)
            for i in range(200):  # more than the page cache can hold back from the full volume
                log.warning("line %d %s", i, "x" * 200)
            h.flush()
        finally:
            log.removeHandler(h)
            h.close()
        assert getattr(h, "dropped", 0) > 0
        assert "Logging error" not in capsys.readouterr().err

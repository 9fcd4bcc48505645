"""docs/kafka-compat.md's API table says what ``SERVED`` serves (one table in the code, the
doc checked against it, so the two cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path

from rafka.broker.kafka.apis import SERVED

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka-compat.md"


def test_the_api_table_matches_served() -> None:
    rows = re.findall(r"^\| (\d+) \| [A-Za-z]+ \| (\d+)–(\d+) \|", DOC.read_text(), re.M)
    documented = {int(k): (int(lo), int(hi)) for k, lo, hi in rows}
    assert documented == {k: (lo, hi) for k, (lo, hi, _) in SERVED.items()}

"""Fixtures shared by the kraft tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.kraft.handticked import node_maker


@pytest.fixture
def make_nodes() -> Iterator[Callable[..., list[Any]]]:
    """Hand-ticked pysyncobj voters (tests/kraft/handticked.py), destroyed after the test."""
    with node_maker() as make:
        yield make

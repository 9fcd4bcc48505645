"""Finding a group's or a transactional id's coordinator: FIND_COORDINATOR, cached per client.

Theory of operation
-------------------
``coordinator_node(core, key_type, key)`` asks any broker FIND_COORDINATOR for one key
(``broker/handlers/coordinator.py``) and returns the coordinator's node id, which the caller
then addresses with ``core.request_node``. The answer is kept per ``ClientCore`` (a weak map,
so it dies with the client) until the caller says it is wrong: on NOT_COORDINATOR, a broken
connection or any other retriable answer the caller calls ``forget_coordinator`` and the next
call asks again. So a consumer's commit loop or a transactional producer pays one lookup per
coordinator move, not one per request.

A key's own error is raised as its named ``RafkaError``: COORDINATOR_NOT_AVAILABLE (retriable:
the internal topic is being created, or its partition has no leader) or, on a secured
cluster, GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED when the principal
may not describe the group / id — not retriable, so a consumer without rights on its group
fails fast instead of retrying. A coordinator the client's metadata does not list yet (a
broker that registered after the last refresh) makes it refresh the broker list once.

Clients never read the internal topics' metadata for this: on a secured cluster only super
users and nodes may describe ``__consumer_offsets`` / ``__transaction_state``.
"""

from __future__ import annotations

import weakref
from typing import Final

from rafka.client.aio._core import ClientCore
from rafka.wire.errors import ErrorCode, error_for
from rafka.wire.protocol import ApiKey

__all__ = ["KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION", "coordinator_node", "known_coordinator",
           "forget_coordinator"]

KEY_TYPE_GROUP: Final = 0  # as broker/handlers/coordinator.py (not imported: client side)
KEY_TYPE_TRANSACTION: Final = 1
_WHAT = {KEY_TYPE_GROUP: "group", KEY_TYPE_TRANSACTION: "transactional id"}

_known: weakref.WeakKeyDictionary[ClientCore, dict[tuple[int, str], int]] = weakref.WeakKeyDictionary()


async def coordinator_node(core: ClientCore, key_type: int, key: str) -> int:
    """The node id of ``key``'s coordinator (cached; see the module docstring)."""
    cache = _known.setdefault(core, {})
    node = cache.get((key_type, key))
    if node is not None:
        return node
    resp = await core.request_any(ApiKey.FIND_COORDINATOR, {"key_type": key_type, "keys": [key]})
    resp.raise_for_error()
    what = f"the coordinator of {_WHAT[key_type]} {key!r}"
    entry = next((c for c in resp.body.get("coordinators") or () if c.get("key") == key), None)
    if entry is None:
        raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{what}: no answer for the key")
    if entry.get("error"):
        raise error_for(entry["error"], entry.get("message") or what)
    node = int(entry["node_id"])
    if node not in core.metadata.brokers:
        core.invalidate()
        await core.refresh_metadata()
        if node not in core.metadata.brokers:
            raise error_for(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{what}: broker {node} is not known yet")
    cache[(key_type, key)] = node
    return node


def known_coordinator(core: ClientCore, key_type: int, key: str) -> int | None:
    """The cached coordinator of ``key`` (the node that last answered for it), without asking
    anyone; None when nothing is cached."""
    return (_known.get(core) or {}).get((key_type, key))


def forget_coordinator(core: ClientCore, key_type: int, key: str) -> None:
    """Drop the cached coordinator of ``key`` (it answered NOT_COORDINATOR, or did not answer)."""
    cache = _known.get(core)
    if cache is not None:
        cache.pop((key_type, key), None)

"""Authorization on a secured listener: which ACL each API needs, checked before dispatch.

Theory of operation
-------------------
``authorizing_dispatch(dispatch, image_of, super_users)`` wraps a listener's dispatch. Every
request (but API_VERSIONS) is checked with a ``security.acl.Authorizer`` built from the
current image's ACLs (rebuilt only when ``image.acls`` changes) against the connection's
principal and host (``Request.principal`` / ``Request.client_host``, set by the server):

* **per topic** — PRODUCE (write), FETCH by a consumer (read), LIST_OFFSETS, DESCRIBE_PRODUCERS
  (describe), METADATA (describe: unlisted topics are left out, named ones answered with
  TOPIC_AUTHORIZATION_FAILED), CREATE_TOPICS (create on the topic or the cluster),
  DELETE_TOPICS (delete), CREATE_PARTITIONS (alter), ALTER_CONFIGS (alter_configs),
  DESCRIBE_CONFIGS (describe_configs). The internal topics ``__consumer_offsets`` and
  ``__transaction_state`` are topics like any other here: their METADATA needs describe on
  them (super users and peer nodes have it). Denied topics are taken out of the request, the
  rest is dispatched, and each denied topic (and its partitions) comes back with
  TOPIC_AUTHORIZATION_FAILED — one forbidden topic does not fail a batch for the others;
* **per key** — FIND_COORDINATOR (the coordinator lookup, ``broker/handlers/coordinator.py``):
  each key needs describe on its group (key type 0) or transactional id (1), as Kafka; a
  denied key comes back with GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  and the others are answered;
* **whole request** — groups (heartbeat, offset commit/fetch, alter offsets: read; describe:
  describe; delete: delete) → GROUP_AUTHORIZATION_FAILED; transactional ids (INIT_PRODUCER_ID
  with an id, ADD_PARTITIONS/ADD_OFFSETS/END_TXN/TXN_OFFSET_COMMIT, a transactional PRODUCE:
  write; DESCRIBE_TRANSACTIONS: describe) → TRANSACTIONAL_ID_AUTHORIZATION_FAILED; an
  idempotent INIT_PRODUCER_ID needs idempotent_write on the cluster or write on some topic;
  cluster APIs (listings and quorum: describe; leader election, users and ACLs: alter; client
  quotas: alter_configs / describe_configs, as Kafka;
  inter-node APIs and follower fetches: cluster_action; voter changes: all) →
  CLUSTER_AUTHORIZATION_FAILED. An API not in these tables is refused (default deny).

The tables are not kept here: they are the ``acl`` column of the one API table
(``wire/api_table.py``), read by scope (``keys_with_acl``); this module holds the code of the
checks that need more than a row says (per topic, per coordinator key, INIT_PRODUCER_ID, a
follower FETCH, a transactional PRODUCE, TXN_OFFSET_COMMIT's group).

Every denial is logged on the ``rafka.audit`` logger (principal, host, operation, resource,
api), the audit trail of docs/security.md.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rafka.security.acl import CLUSTER_NAME, Authorizer
from rafka.wire.api_table import AclScope, keys_with_acl
from rafka.wire.errors import ErrorCode
from rafka.wire.protocol import ApiKey, Request

if TYPE_CHECKING:
    from rafka.metadata import MetadataImage
    from rafka.wire.dispatch import Dispatch

__all__ = ["authorizing_dispatch", "TOPIC_OPERATIONS", "DENIED_CODE", "COORDINATOR_KEY_TYPES"]

audit = logging.getLogger("rafka.audit")

DENIED_CODE = {"topic": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
               "group": ErrorCode.GROUP_AUTHORIZATION_FAILED,
               "cluster": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
               "transactional_id": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

# the ACL column of the one API table (wire/api_table.py), by scope
TOPIC_OPERATIONS: dict[int, str] = dict(keys_with_acl(AclScope.TOPICS))
_GROUP: dict[int, str] = dict(keys_with_acl(AclScope.GROUP))
_TXN: dict[int, str] = dict(keys_with_acl(AclScope.TRANSACTIONAL_ID))
_CLUSTER: dict[int, str] = dict(keys_with_acl(AclScope.CLUSTER))
# answered without a check (API_VERSIONS)
_UNCHECKED = frozenset(keys_with_acl(AclScope.NONE))
# rows whose check is code below: per key (FIND_COORDINATOR), per producer (INIT_PRODUCER_ID)
_RULED = frozenset(TOPIC_OPERATIONS) | frozenset(keys_with_acl(AclScope.COORDINATOR_KEYS)) \
    | frozenset(keys_with_acl(AclScope.PRODUCER_ID))
# FIND_COORDINATOR's key types -> the resource each key names (describe needed on it)
COORDINATOR_KEY_TYPES = {0: "group", 1: "transactional_id"}


class _Check:
    """One request's checks against one authorizer."""

    def __init__(self, auth: Authorizer, req: Request) -> None:
        self.auth = auth
        self.req = req
        self.principal = req.principal
        self.host = req.client_host or "*"

    def allowed(self, operation: str, resource_type: str, name: str) -> bool:
        ok = self.auth.authorize(self.principal, self.host, operation, resource_type, name)
        if not ok:
            audit.info("DENIED %s from %s: %s %s %r (api %s)", self.principal, self.host,
                       operation, resource_type, name, _api_name(self.req.api_key))
        return ok

    def denial(self, operation: str, resource_type: str, name: str) -> dict[str, Any]:
        return {"error": int(DENIED_CODE[resource_type]),
                "message": f"{self.principal} may not {operation} {resource_type} {name!r}"}


def _api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return str(key)


def _topic_name(t: Any) -> str:
    return t if isinstance(t, str) else t.get("name", "")


def _denied_topic(check: _Check, api: int, t: Any, operation: str) -> dict[str, Any]:
    name = _topic_name(t)
    entry: dict[str, Any] = {"name": name, **check.denial(operation, "topic", name)}
    if isinstance(t, dict) and isinstance(t.get("partitions"), list):
        parts = []
        for p in t["partitions"]:
            idx = p if isinstance(p, int) else p.get("partition", -1)
            part = {"partition": idx, "error": entry["error"], "message": entry["message"]}
            if api == ApiKey.FETCH:
                part.update(records_len=0, high_watermark=-1, log_start_offset=-1,
                            log_end_offset=-1, diverging_epoch=None)
            parts.append(part)
        entry["partitions"] = parts
    elif api == ApiKey.METADATA:
        entry["partitions"] = []
    return entry


async def _per_topic(check: _Check, dispatch: Dispatch, req: Request, operation: str) -> Any:
    body, api = req.body, req.api_key
    topics = body.get("topics")
    if api == ApiKey.METADATA and topics is None:  # every topic: show only the describable
        out = await dispatch(req)
        if isinstance(out, dict) and isinstance(out.get("topics"), list):
            out = {**out, "topics": [t for t in out["topics"] if check.auth.authorize(
                check.principal, check.host, "describe", "topic", t.get("name", ""))]}
        return out
    if not isinstance(topics, list):
        return await dispatch(req)

    def ok(t: Any) -> bool:
        name = _topic_name(t)
        if api == ApiKey.CREATE_TOPICS and check.auth.authorize(
                check.principal, check.host, "create", "cluster", CLUSTER_NAME):
            return True
        return check.allowed(operation, "topic", name)

    allowed = [t for t in topics if ok(t)]
    denied = [_denied_topic(check, api, t, operation) for t in topics if not ok(t)]
    if not denied:
        return await dispatch(req)
    if api == ApiKey.PRODUCE and body.get("acks") == 0 and not allowed:
        return None
    if allowed or api in (ApiKey.METADATA,):
        out = await dispatch(Request(api, req.correlation_id, {**body, "topics": allowed},
                                     req.api_version, req.client_id, req.principal, req.client_host))
    else:
        out = {"error": 0}
    if out is None:
        return None
    target = out.body if hasattr(out, "body") and not isinstance(out, dict) else out
    target["topics"] = [*(target.get("topics") or []), *denied]
    return out


async def _per_key(check: _Check, dispatch: Dispatch, req: Request) -> Any:
    """FIND_COORDINATOR: describe on each key's group / transactional id (module docstring)."""
    rtype = COORDINATOR_KEY_TYPES.get(req.body.get("key_type"))  # type: ignore[arg-type]
    if rtype is None:  # the handler names the bad key type
        return await dispatch(req)
    keys = req.body.get("keys") or []
    verdict = {k: check.allowed("describe", rtype, k) for k in dict.fromkeys(keys)}
    denied = [{"key": k, "node_id": -1, "host": None, "port": None,
               **check.denial("describe", rtype, k)} for k in keys if not verdict[k]]
    if not denied:
        return await dispatch(req)
    allowed = [k for k in keys if verdict[k]]
    out: Any = {"error": 0, "coordinators": []}
    if allowed:
        out = await dispatch(dataclasses.replace(req, body={**req.body, "keys": allowed}))
    if isinstance(out, dict) and not out.get("error"):
        out = {**out, "coordinators": [*(out.get("coordinators") or []), *denied]}
    return out


def _whole_request(check: _Check, req: Request) -> dict[str, Any] | None:
    """A denial answer, or None when the request may go on."""
    api, body = req.api_key, req.body
    needs: list[tuple[str, str, str]] = []
    if api in _GROUP:
        groups = body.get("groups") if api in (ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS) \
            else [body.get("group_id", "")]
        needs += [(_GROUP[api], "group", g) for g in groups or []]
    if api in _TXN:
        ids = body.get("transactional_ids") if api == ApiKey.DESCRIBE_TRANSACTIONS \
            else [body.get("transactional_id", "")]
        needs += [(_TXN[api], "transactional_id", i) for i in ids or []]
        if api == ApiKey.TXN_OFFSET_COMMIT:
            needs.append(("read", "group", body.get("group_id", "")))
    if api in _CLUSTER:
        needs.append((_CLUSTER[api], "cluster", CLUSTER_NAME))
    if api == ApiKey.FETCH and body.get("replica_id", -1) >= 0:
        needs.append(("cluster_action", "cluster", CLUSTER_NAME))
    if api == ApiKey.PRODUCE and body.get("transactional_id"):
        needs.append(("write", "transactional_id", body["transactional_id"]))
    if api == ApiKey.INIT_PRODUCER_ID:
        if body.get("transactional_id"):
            needs.append(("write", "transactional_id", body["transactional_id"]))
        elif not (check.auth.authorize(check.principal, check.host, "idempotent_write", "cluster",
                                       CLUSTER_NAME)
                  or check.auth.has_any_allow(check.principal, check.host, "write", "topic")):
            needs.append(("idempotent_write", "cluster", CLUSTER_NAME))
    if not needs and api not in _RULED:
        needs.append(("all", "cluster", CLUSTER_NAME))  # an API without a rule: default deny
    for operation, rtype, name in needs:
        if not check.allowed(operation, rtype, name):
            return check.denial(operation, rtype, name)
    return None


def authorizing_dispatch(dispatch: Dispatch, image_of: Callable[[], MetadataImage],
                         super_users: tuple[str, ...] = ()) -> Dispatch:
    """``dispatch`` behind the ACLs of the current image (see the module docstring)."""
    cache: dict[str, Any] = {"acls": None, "auth": None}

    def authorizer() -> Authorizer:
        acls = image_of().acls
        if cache["acls"] is not acls:
            cache["acls"], cache["auth"] = acls, Authorizer(acls.entries, super_users)
        return cache["auth"]  # type: ignore[no-any-return]

    async def run(req: Request) -> Any:
        if req.api_key in _UNCHECKED:
            return await dispatch(req)
        check = _Check(authorizer(), req)
        denied = _whole_request(check, req)
        if denied is not None:
            return denied
        if req.api_key == ApiKey.FIND_COORDINATOR:
            return await _per_key(check, dispatch, req)
        operation = TOPIC_OPERATIONS.get(req.api_key)
        if operation is None or (req.api_key == ApiKey.FETCH and req.body.get("replica_id", -1) >= 0):
            return await dispatch(req)
        return await _per_topic(check, dispatch, req, operation)

    return run

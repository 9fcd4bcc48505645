"""Kafka's ACL APIs (DescribeAcls, CreateAcls, DeleteAcls) on rafka's ACLs (docs/security.md).

Theory of operation: rafka keeps the same access-control entries Kafka does — principal,
host, operation, allow/deny on a literal or prefixed topic, group, transactional id or the
cluster — with names where Kafka's wire has enum numbers, so each request is one native
request with the numbers translated (``_RESOURCE``, ``_PATTERN``, ``_OPERATION``,
``_PERMISSION``), and the cluster resource's name translated between Kafka's
``kafka-cluster`` and rafka's own. In a filter, Kafka's ANY is rafka's "any value" (None);
MATCH (a pattern filter that matches literal, prefixed and wildcard entries for one name) is
answered as ANY pattern type — broader than Kafka's, never narrower. An enum value rafka has
no name for (delegation tokens, users) is INVALID_REQUEST for a creation and matches nothing
in a filter.
"""

from __future__ import annotations

from typing import Any

from rafka.broker.kafka.codec import KafkaRequest
from rafka.broker.kafka.context import call_native, kafka_error
from rafka.security.acl import CLUSTER_NAME
from rafka.wire.protocol import ApiKey

__all__ = ["describe_acls", "create_acls", "delete_acls"]

INVALID_REQUEST = 42
ANY, MATCH = 1, 2
KAFKA_CLUSTER = "kafka-cluster"
_RESOURCE = {2: "topic", 3: "group", 4: "cluster", 5: "transactional_id"}
_PATTERN = {3: "literal", 4: "prefixed"}
_OPERATION = {2: "all", 3: "read", 4: "write", 5: "create", 6: "delete", 7: "alter",
              8: "describe", 9: "cluster_action", 10: "describe_configs", 11: "alter_configs",
              12: "idempotent_write"}
_PERMISSION = {2: "deny", 3: "allow"}
_BACK = {"resource_type": {v: k for k, v in _RESOURCE.items()},
         "pattern_type": {v: k for k, v in _PATTERN.items()},
         "operation": {v: k for k, v in _OPERATION.items()},
         "permission": {v: k for k, v in _PERMISSION.items()}}


class _Unknown(Exception):
    pass


def _name(table: dict[int, str], value: int, *, filter_: bool) -> str | None:
    if filter_ and value in (ANY, MATCH):
        return None
    if value not in table:
        raise _Unknown(f"enum value {value}")
    return table[value]


def _native_resource_name(resource_type: str | None, name: str | None) -> str | None:
    return CLUSTER_NAME if resource_type == "cluster" and name == KAFKA_CLUSTER else name


def _filter(f: Any) -> dict[str, Any]:
    rtype = _name(_RESOURCE, f.resource_type_filter, filter_=True)
    return {"resource_type": rtype,
            "resource_name": _native_resource_name(rtype, f.resource_name_filter),
            "pattern_type": _name(_PATTERN, f.pattern_type_filter, filter_=True),
            "principal": f.principal_filter, "host": f.host_filter,
            "operation": _name(_OPERATION, f.operation, filter_=True),
            "permission": _name(_PERMISSION, f.permission_type, filter_=True)}


def _kafka_acl(a: dict[str, Any]) -> dict[str, Any]:
    name = a["resource_name"]
    if a["resource_type"] == "cluster" and name == CLUSTER_NAME:
        name = KAFKA_CLUSTER
    return {"resource_type": _BACK["resource_type"][a["resource_type"]], "resource_name": name,
            "pattern_type": _BACK["pattern_type"][a["pattern_type"]],
            "principal": a["principal"], "host": a["host"],
            "operation": _BACK["operation"][a["operation"]],
            "permission_type": _BACK["permission"][a["permission"]]}


async def describe_acls(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    try:
        flt = _filter(req.body)
    except _Unknown:
        return {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": ()}
    native = await call_native(ctx, req, ApiKey.DESCRIBE_ACLS, {"filter": flt})
    err = kafka_error(native.get("error"))
    groups: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for a in native.get("acls") or []:
        k = _kafka_acl(a)
        groups.setdefault((k["resource_type"], k["resource_name"], k["pattern_type"]), []).append(
            {"principal": k["principal"], "host": k["host"], "operation": k["operation"],
             "permission_type": k["permission_type"]})
    return {"throttle_time": 0, "error_code": err,
            "error_message": native.get("message") if err else None,
            "resources": [{"resource_type": rt, "resource_name": rn, "pattern_type": pt,
                           "acls": acls} for (rt, rn, pt), acls in groups.items()]}


async def create_acls(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    results: list[dict[str, Any] | None] = []
    acls = []
    for c in req.body.creations:
        try:
            rtype = _name(_RESOURCE, c.resource_type, filter_=False)
            acls.append({"resource_type": rtype,
                         "resource_name": _native_resource_name(rtype, c.resource_name),
                         "pattern_type": _name(_PATTERN, c.resource_pattern_type, filter_=False),
                         "principal": c.principal, "host": c.host,
                         "operation": _name(_OPERATION, c.operation, filter_=False),
                         "permission": _name(_PERMISSION, c.permission_type, filter_=False)})
            results.append(None)
        except _Unknown as exc:
            results.append({"error_code": INVALID_REQUEST,
                            "error_message": f"not an ACL rafka keeps: {exc}"})
    native: dict[str, Any] = {}
    if acls:
        native = await call_native(ctx, req, ApiKey.CREATE_ACLS, {"acls": acls})
    err = kafka_error(native.get("error"))
    return {"throttle_time": 0, "results": [
        r if r is not None else {"error_code": err,
                                 "error_message": native.get("message") if err else None}
        for r in results]}


async def delete_acls(ctx: Any, req: KafkaRequest) -> dict[str, Any]:
    filters, known = [], []
    for f in req.body.filters:
        try:
            filters.append(_filter(f))
            known.append(True)
        except _Unknown:
            known.append(False)
    native: dict[str, Any] = {}
    if filters:
        native = await call_native(ctx, req, ApiKey.DELETE_ACLS, {"filters": filters})
    results = iter(native.get("results") or [])
    out = []
    for ok in known:
        r = next(results, {"error": native.get("error"), "message": native.get("message"),
                           "deleted": []}) if ok else {"error": 0, "deleted": []}
        err = kafka_error(r.get("error"))
        out.append({"error_code": err, "error_message": r.get("message") if err else None,
                    "matching_acls": [{"error_code": 0, "error_message": None,
                                       **_kafka_acl(a)} for a in r.get("deleted") or []]})
    return {"throttle_time": 0, "filter_results": out}

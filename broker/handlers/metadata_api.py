"""API_VERSIONS, METADATA and DESCRIBE_CONFIGS: pure functions of (request body, image).

Theory of operation: these answers depend only on the broker's current ``MetadataImage`` (and
the broker's topic-config defaults), so they are plain functions that tests call with an image
built from records. METADATA lists every registered broker (with ``fenced``), the active
controller (``controller_id`` from the last ``LeaderChange``; −1 when unknown), and for each
requested topic its partitions with leader, leader epoch, replicas and ISR. A partition with no
leader reports ``LEADER_NOT_AVAILABLE``; an unknown topic ``UNKNOWN_TOPIC_OR_PARTITION``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rafka.broker.config import effective_topic_config
from rafka.log.errors import InvalidConfigError
from rafka.metadata.image import MetadataImage, TopicImage
from rafka.wire.errors import ErrorCode

__all__ = ["api_versions", "metadata", "describe_configs", "topic_entry"]


def api_versions(api_keys: Iterable[int]) -> dict[str, Any]:
    return {"error": 0, "apis": [[int(k), 0, 0] for k in sorted(api_keys)]}


def topic_entry(topic: TopicImage, *, with_configs: bool = False) -> dict[str, Any]:
    parts = []
    for p in sorted(topic.partitions):
        reg = topic.partitions[p]
        parts.append({
            "partition": p,
            "error": int(ErrorCode.LEADER_NOT_AVAILABLE) if reg.leader < 0 else 0,
            "leader": reg.leader,
            "leader_epoch": reg.leader_epoch,
            "partition_epoch": reg.partition_epoch,
            "replicas": list(reg.replicas),
            "isr": list(reg.isr),
        })
    entry: dict[str, Any] = {
        "name": topic.name,
        "error": 0,
        "topic_id": topic.topic_id,
        "is_internal": topic.name.startswith("__"),
        "partitions": parts,
    }
    if with_configs:
        entry["configs"] = dict(topic.configs)
    return entry


def metadata(body: Mapping[str, Any], image: MetadataImage, cluster_id: str) -> dict[str, Any]:
    brokers = [
        {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack,
         "fenced": b.fenced}
        for b in sorted(image.cluster.brokers.values(), key=lambda b: b.broker_id)
    ]
    names = body.get("topics")
    topics: list[dict[str, Any]] = []
    if names is None:
        names = sorted(image.topics.by_name)
    for name in names:
        topic = image.topics.by_name.get(name)
        if topic is None:
            topics.append({"name": name, "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                           "message": f"unknown topic {name!r}", "topic_id": None,
                           "is_internal": False, "partitions": []})
        else:
            topics.append(topic_entry(topic, with_configs=True))
    return {
        "cluster_id": cluster_id,
        "controller_id": image.quorum.leader_id,
        "metadata_offset": image.offset,
        "brokers": brokers,
        "topics": topics,
    }


def describe_configs(body: Mapping[str, Any], image: MetadataImage,
                     defaults: Mapping[str, Any]) -> dict[str, Any]:
    out = []
    for name in body["topics"]:
        topic = image.topics.by_name.get(name)
        if topic is None:
            out.append({"name": name, "error": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                        "message": f"unknown topic {name!r}", "configs": {}})
            continue
        try:
            configs = effective_topic_config(topic, defaults).to_dict()
        except InvalidConfigError as exc:
            out.append({"name": name, "error": int(ErrorCode.INVALID_CONFIG), "message": str(exc),
                        "configs": dict(topic.configs)})
            continue
        out.append({"name": name, "error": 0, "message": None, "configs": configs,
                    "overrides": sorted(topic.configs)})
    return {"topics": out}

"""Which topic a partition directory belongs to, and what to do with one the image does not explain.

Theory of operation
-------------------
A partition's log lives in ``DATA_DIR/<topic>-<partition>``. The name alone cannot tell two
topics of the same name apart, and a broker learns of deletions only from the metadata deltas
it applies. A broker that was down (or killed) while a topic was deleted never applies that
delete: its first image after the restart is compared with the empty image, so the directory
stayed on disk for good, and a topic created again under the same name with a replica here
reopened it, serving the deleted topic's records as the new topic's (docs/chaos-results.md,
"Session 27"; Kafka's KAFKA-14616 and its ``partition.metadata`` file).

So every directory the replica manager creates gets an identity file, ``partition.metadata``:
the topic's id and ``created_at``, the offset of the metadata image that placed it here
(written before the log's first segment, fsynced, renamed into place). A directory written
before this file existed gets one when its log is next opened under an image that places it
here (the best that can be known of it).

``judge`` compares a directory's identity with an image:

* ``OPEN`` — the image places the partition here under the directory's topic id (or the
  directory has no identity yet): open it.
* ``REPLACE`` / ``STRAY`` — the image is at least as new as the directory (``image.offset >=
  created_at``) and does not place this topic id's partition here: the topic was deleted or the
  replica moved away after the directory was made. ``REPLACE`` when the image places a
  *different* topic of the same name here (remove, then create its log anew), ``STRAY`` when
  it places nothing here (remove).
* ``WAIT`` / ``KEEP`` — the image is older than the directory. A broker's first image is the
  committed state that the voter it reached believed in, and a deposed leader that does not
  know it yet answers with an older committed offset; a topic created after that offset is
  absent from it. Nothing is concluded from absence in an older image: the directory is left
  alone (``WAIT``: not opened either, another topic's partition of that name is placed here;
  ``KEEP``: nothing is placed here) and judged again with each later image.

Removal therefore needs positive knowledge: an image that already contains the directory's
creation and no longer places that topic id's partition here. A directory without an
identity (older than this file) is never removed by this rule.

Removing a directory (``remove_dir``, for a delete as for a stray) first renames it to
``<topic>-<partition>.<random>-delete``, then removes that tree, as Kafka does. A process killed
part-way through a plain recursive removal left the partition's name holding some of its files
but no longer its identity file, a directory this rule then had to leave alone for good (seen in
session 28's chaos campaign: a node killed while deleting a topic). Now a crash leaves either
the whole directory, identity included, or a name no partition has; the first image after a
restart removes every such leftover (``is_leftover``).
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from rafka.log.index import fsync_dir, write_file_atomic
from rafka.metadata.image import MetadataImage, TopicPartition

__all__ = ["DELETE_SUFFIX", "IDENTITY_FILE", "DirIdentity", "Verdict", "is_leftover", "judge",
           "parse_dir_name", "read_identity", "remove_dir", "write_identity"]

log = logging.getLogger("rafka.replica_manager")

IDENTITY_FILE = "partition.metadata"
DELETE_SUFFIX = "-delete"
_VERSION = 0


@dataclass(frozen=True, slots=True)
class DirIdentity:
    topic_id: str
    created_at: int  # the offset of the metadata image that placed the partition here


class Verdict(enum.Enum):
    OPEN = "open"
    REPLACE = "replace"
    STRAY = "stray"
    WAIT = "wait"
    KEEP = "keep"


def write_identity(directory: Path, identity: DirIdentity, *, sync_dir: bool = True) -> None:
    """Write ``directory``'s identity file, fsynced (the directory must exist). ``sync_dir=False``
    when the caller fsyncs the directory next anyway (a new log's first segment does): one
    fsync fewer per new replica. A crash before that leaves a directory without an identity,
    which is adopted, as one from before identity files."""
    text = f"version: {_VERSION}\ntopic_id: {identity.topic_id}\ncreated_at: {identity.created_at}\n"
    write_file_atomic(directory / IDENTITY_FILE, text.encode(), fsync=True)
    if sync_dir:
        fsync_dir(directory)


def read_identity(directory: Path) -> DirIdentity | None:
    """The identity written by ``write_identity``; None when there is none. An unreadable or
    malformed file is logged and treated as none: the directory is then never removed by the
    stray rule (its topic cannot be known), and is adopted when the image places it here."""
    try:
        text = (directory / IDENTITY_FILE).read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.error("%s: cannot read %s: %s", directory, IDENTITY_FILE, exc)
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        if int(fields["version"]) != _VERSION:
            raise ValueError(f"unknown version {fields['version']}")
        return DirIdentity(fields["topic_id"], int(fields["created_at"]))
    except (KeyError, ValueError) as exc:
        log.error("%s: malformed %s (%s): %r", directory, IDENTITY_FILE, exc, text[:200])
        return None


def parse_dir_name(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` back to its partition; None for any other name."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit() or number != str(int(number)):
        return None
    return TopicPartition(topic, int(number))


def judge(identity: DirIdentity | None, image: MetadataImage, tp: TopicPartition,
          broker_id: int) -> Verdict:
    """What ``image`` says of the directory of ``tp`` holding ``identity`` (module docstring)."""
    topic = image.topics.by_name.get(tp.topic)
    reg = None if topic is None else topic.partitions.get(tp.partition)
    placed = reg is not None and broker_id in reg.replicas
    if identity is None:
        return Verdict.OPEN if placed else Verdict.KEEP
    if placed and topic is not None and topic.topic_id == identity.topic_id:
        return Verdict.OPEN
    if image.offset < identity.created_at:
        return Verdict.WAIT if placed else Verdict.KEEP
    return Verdict.REPLACE if placed else Verdict.STRAY


def remove_dir(directory: Path) -> bool:
    """Remove a partition directory, renaming it out of the way first (module docstring).
    True once nothing is left under its name; False (logged) when it could not be renamed."""
    doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
    try:
        os.rename(directory, doomed)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.error("%s: cannot rename it for removal: %s", directory, exc)
        return False
    shutil.rmtree(doomed, ignore_errors=True)
    if doomed.exists():
        log.error("%s: could not be removed entirely; the next start removes the rest", doomed)
    return True


def is_leftover(name: str) -> bool:
    """A directory name ``remove_dir`` gave a partition directory it was removing."""
    base, dot, rest = name.rpartition(".")
    return bool(dot) and parse_dir_name(base) is not None and rest.endswith(DELETE_SUFFIX)

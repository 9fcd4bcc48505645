"""The producer's settings, checked once: ``ProducerConfig`` (frozen).

Theory of operation: ``AsyncProducer.__init__`` turns its keyword arguments into one
``ProducerConfig`` (``ProducerConfig.build`` validates them: acks, idempotence, transactions,
compression) and hands it to the collaborators it composes — the enqueue path
(``client/aio/enqueue.py``) and the sender (``client/aio/sender.py``) — so that each reads the
settings it uses from one immutable object instead of from the producer's attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rafka.wire.errors import ErrorCode, error_for

__all__ = ["Acks", "ProducerConfig", "parse_acks"]

Acks = Literal[0, 1, -1, "all"]


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """What the enqueue path and the sender need to know (names as ``AsyncProducer``'s
    arguments; ``acks`` is -1, 0 or 1; ``compression`` is ``"none"`` or ``"lz4"``)."""

    acks: int = -1
    enable_idempotence: bool = True
    compression: str = "none"
    batch_size: int = 256 * 1024
    linger_ms: float = 5
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: float = 60000
    max_request_size: int = 1024 * 1024
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120000
    request_timeout_ms: int = 30000
    max_in_flight: int = 5

    @property
    def max_record_size(self) -> int:
        """The largest record ``send`` accepts (both limits apply to one record)."""
        return min(self.max_request_size, self.buffer_memory)

    @classmethod
    def build(cls, *, acks: Acks | str, enable_idempotence: bool | None, transactional: bool,
              compression_type: str | None, max_in_flight: int, **settings: float) -> ProducerConfig:
        """Validate the producer's arguments (the errors ``AsyncProducer(...)`` raises)."""
        ack = parse_acks(acks)
        if transactional:  # transactions imply idempotence and acks=all
            if enable_idempotence is False or ack != -1:
                raise error_for(ErrorCode.INVALID_CONFIG, "a transactional producer needs acks='all' and "
                                f"idempotence (got acks={acks!r}, enable_idempotence={enable_idempotence!r})")
            enable_idempotence = True
        if enable_idempotence is None:
            enable_idempotence = ack == -1
        elif enable_idempotence and ack != -1:
            raise ValueError("enable_idempotence=True requires acks='all' (or -1)")
        if enable_idempotence and max_in_flight > 5:
            raise ValueError("enable_idempotence allows at most 5 in-flight requests per connection")
        if compression_type not in (None, "none", "lz4"):
            raise ValueError(f"unknown compression_type {compression_type!r} (None | 'lz4')")
        return cls(acks=ack, enable_idempotence=enable_idempotence,
                   compression="lz4" if compression_type == "lz4" else "none",
                   max_in_flight=max_in_flight, **settings)  # type: ignore[arg-type]


def parse_acks(acks: Acks | str) -> int:
    if acks in ("all", -1, "-1"):
        return -1
    if acks in (0, 1, "0", "1"):
        return int(acks)
    raise ValueError(f"acks must be 0, 1, 'all' or -1, not {acks!r}")

"""The Kafka wire-protocol listener (issue 23; docs/kafka-compat.md): codec, record
batches, API adapters and the trio listener."""

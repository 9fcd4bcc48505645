#!/bin/sh
# Install kcat, the Kafka command-line client that the Kafka-listener tests drive
# (tests/integration/test_kafka_clients.py; they skip when no kcat is on PATH). Debian/Ubuntu
# only; needs root. Usage: sudo deploy/install-kafka-test-deps.sh   (make os-deps runs it as root)
set -eu
exec sh "$(dirname "$0")/install-debs.sh" "kafka test deps" kcat

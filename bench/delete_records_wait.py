"""What DeleteRecords costs now that it waits for the in-sync followers' log start offsets
(``broker/handlers/delete_records.py``): the round trip of one ``Admin.delete_records`` on an
RF 3 topic (the leader waits for both followers to report their moved log start) against an
RF 1 topic (nothing to wait for), on one 3-node cluster, alternating RF 1 / RF 3 calls.

``nice -n 10 .venv/bin/python bench/delete_records_wait.py [CALLS]`` (default 20 per topic):
prints the median and the largest round trip per topic in milliseconds, with the load average
and the broker's ``replica.fetch.wait.max.ms`` (the followers' long poll, which bounds how
late a follower learns of the move). docs/kafka-compat.md quotes its output.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from rafka.client import Admin, Producer, TopicPartition

from bench.cluster import cluster


def main(calls: int = 20) -> None:
    with cluster(3) as bootstrap, Admin(bootstrap_servers=bootstrap) as admin:
        for name, rf in (("dr1", 1), ("dr3", 3)):
            admin.create_topic(name, partitions=1, replication_factor=rf)
        with Producer(bootstrap_servers=bootstrap, acks="all") as p:
            for name in ("dr1", "dr3"):
                for i in range(calls * 2):
                    p.send(name, value=b"%d" % i, partition=0)
            p.flush()
        times: dict[str, list[float]] = {"dr1": [], "dr3": []}
        for i in range(1, calls + 1):
            for name in ("dr1", "dr3"):  # alternating
                tp = TopicPartition(name, 0)
                t = time.perf_counter()
                assert admin.delete_records({tp: i})[tp] == i
                times[name].append(time.perf_counter() - t)
        print(f"{calls} DeleteRecords per topic, alternating; load average "
              f"{os.getloadavg()[0]:.2f}; round trip in ms")
        for name, rf in (("dr1", 1), ("dr3", 3)):
            ts = sorted(x * 1e3 for x in times[name])
            print(f"  RF {rf}: median {statistics.median(ts):7.1f}   max {ts[-1]:7.1f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))

"""``rafka console``: the web console's HTTP server (trio), its JSON endpoints and sampler.

Theory of operation
-------------------
``run_console`` opens one ``AsyncAdmin`` and one ``ClientCore`` (for the group helpers of
``rafka.client.groups``) in its nursery, then starts two tasks there: ``broker.http_server.serve_http``
with ``Console.handle`` (the same tiny HTTP server as the nodes' ``/metrics``: one request per
connection, GET/HEAD only, bounded connections), and ``Console.sample_forever``, which scrapes
every node's ``/metrics`` each ``interval_s`` (``client.metrics_view.scrape_all`` in a worker
thread) into a bounded ``Throughput`` history. Nothing outlives the nursery; Ctrl-C cancels it all.

Routes: ``/`` the page (``rafka.client.console.page``: one HTML document with inline CSS and JS, no
build step, no CDN), ``/api/cluster`` (brokers, controller, quorum), ``/api/quorum``,
``/api/topics``, ``/api/groups`` (members, assignment, lag), ``/api/throughput`` (rate history).
The page polls them. Each admin-backed endpoint is computed at most once per ``CACHE_S`` (the
answer is shared by concurrent and repeated requests, so open tabs do not multiply the load)
and within ``ADMIN_TIMEOUT_S``; a cluster that does not answer gives a 503 with a JSON
``{"error": ...}`` the page shows, and the console stays up.

Both clients connect with the security options of the command line (``rafka.client.connect_options``:
``--user``/``--password``, ``--tls-ca``, ``--command-config``…), ambient for the run. The
metrics endpoints are ``--metrics`` URLs, or every broker's client port +
``METRICS_PORT_OFFSET`` (what ``rafka cluster up`` assigns), re-read from the cluster
metadata every ``REDISCOVER_S`` so a broker that joins appears.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio
from rafka.client.aio._core import ClientCore
from rafka.client.aio.admin import AsyncAdmin, ClusterDescription
from rafka.client.console.page import PAGE_HTML
from rafka.client.console.snapshot import (
    Throughput,
    cluster_json,
    group_json,
    nodes_json,
    topics_json,
)
from rafka.client.errors import RafkaError
from rafka.client.groups import describe_group, list_groups
from rafka.client.metrics_view import scrape_all
from rafka.security.client import ClientSecurity
from rafka.wire.http_server import HttpResponse, serve_http
from rafka.wire.ports import METRICS_PORT_OFFSET

__all__ = ["Console", "run_console", "CACHE_S", "ADMIN_TIMEOUT_S", "MAX_GROUPS"]

log = logging.getLogger("rafka.console")

CACHE_S = 1.0
ADMIN_TIMEOUT_S = 10.0
REDISCOVER_S = 30.0
MAX_GROUPS = 100  # groups described per /api/groups (the rest are listed without detail)

Json = dict[str, Any]


def _json(status: int, body: Any) -> HttpResponse:
    return HttpResponse(status, json.dumps(body, default=str).encode(), "application/json")


def metrics_url(host: str, port: int) -> str:
    """The /metrics URL of a broker whose client listener is ``host:port`` (``rafka cluster up``)."""
    return f"http://{host}:{port + METRICS_PORT_OFFSET}/metrics"


class Console:
    """The console's state: admin clients, the throughput history and a small answer cache."""

    def __init__(self, admin: AsyncAdmin, core: ClientCore, *, metrics: Sequence[str] | None = None,
                 interval_s: float = 1.0) -> None:
        self.admin = admin
        self.core = core
        self.interval_s = interval_s
        self.throughput = Throughput()
        self._fixed_urls = list(metrics) if metrics else None
        self._urls: list[str] = list(metrics or ())
        self._broker_urls: dict[int, str] = {}
        self._cache: dict[str, tuple[float, HttpResponse]] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._routes: dict[str, Callable[[], Awaitable[Json]]] = {
            "/api/cluster": self.cluster, "/api/quorum": self.quorum, "/api/topics": self.topics,
            "/api/groups": self.groups}

    # ------------------------------------------------------------------ HTTP

    async def handle(self, method: str, path: str, query: str) -> HttpResponse:
        if path in ("/", "/index.html"):
            return HttpResponse(200, PAGE_HTML.encode(), "text/html; charset=utf-8")
        if path == "/api/throughput":
            return _json(200, {"interval_s": self.interval_s, **self.throughput.to_json()})
        if path == "/healthz":
            return HttpResponse(200, b"ok\n")
        fn = self._routes.get(path)
        if fn is None:
            return _json(404, {"error": f"no such page: {path}"})
        return await self._cached(path, fn)

    async def _cached(self, key: str, fn: Callable[[], Awaitable[Json]]) -> HttpResponse:
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:  # concurrent requests wait for one computation and share it
            hit = self._cache.get(key)
            if hit is not None and trio.current_time() - hit[0] < CACHE_S:
                return hit[1]
            try:
                with trio.fail_after(ADMIN_TIMEOUT_S):
                    resp = _json(200, await fn())
            except trio.TooSlowError:
                resp = _json(503, {"error": f"the cluster did not answer within {ADMIN_TIMEOUT_S:.0f} s"})
            except (RafkaError, OSError) as exc:
                resp = _json(503, {"error": f"{type(exc).__name__}: {exc}"})
            self._cache[key] = (trio.current_time(), resp)
            return resp

    # ------------------------------------------------------------------ endpoints

    async def _describe_cluster(self) -> ClusterDescription:
        cluster = await self.admin.describe_cluster()
        self._broker_urls = {b.node_id: metrics_url(b.host, b.port) for b in cluster.brokers}
        return cluster

    async def cluster(self) -> Json:
        cluster = await self._describe_cluster()
        try:
            quorum: Json | None = await self.admin.describe_quorum()
        except RafkaError as exc:  # e.g. no quorum leader right now: show the brokers anyway
            log.info("DESCRIBE_QUORUM failed: %s", exc)
            quorum = None
        return cluster_json(cluster, quorum, nodes_json(self.throughput.view), self._broker_urls)

    async def quorum(self) -> Json:
        q = await self.admin.describe_quorum()
        q.pop("error", None)
        return q

    async def topics(self) -> Json:
        return topics_json(await self.admin.describe_topics())

    async def groups(self) -> Json:
        listed = await list_groups(self.core)
        out = []
        for i, g in enumerate(listed):
            if i >= MAX_GROUPS:
                out.append(group_json(g, None, f"not described (more than {MAX_GROUPS} groups)"))
                continue
            try:
                out.append(group_json(g, await describe_group(self.core, g["group_id"])))
            except RafkaError as exc:  # its coordinator is moving: list it, say why
                out.append(group_json(g, None, f"{exc.code.name}: {exc.message}"))
        return {"groups": out}

    # ------------------------------------------------------------------ throughput sampler

    async def _endpoints(self) -> list[str]:
        if self._fixed_urls is not None:
            return self._fixed_urls
        with trio.move_on_after(ADMIN_TIMEOUT_S):
            try:
                await self._describe_cluster()
                self._urls = [self._broker_urls[k] for k in sorted(self._broker_urls)]
            except (RafkaError, OSError) as exc:
                log.info("cannot list the brokers for their metrics: %s", exc)
        return self._urls

    async def sample_forever(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Scrape every node each ``interval_s`` into the throughput history, until cancelled."""
        task_status.started()
        urls: list[str] = []
        found_at = -REDISCOVER_S
        while True:
            if not urls or trio.current_time() - found_at >= REDISCOVER_S:
                urls, found_at = await self._endpoints(), trio.current_time()
            if urls:
                scrapes = await trio.to_thread.run_sync(scrape_all, urls)
                self.throughput.add(scrapes, time.time())
            await trio.sleep(self.interval_s)


async def run_console(bootstrap: str, *, host: str = "127.0.0.1", port: int = 8080,
                      metrics: Sequence[str] | None = None, interval_s: float = 1.0,
                      task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the console on ``host:port`` until cancelled; ``started(bound port)``."""
    async with trio.open_nursery() as nursery, AsyncAdmin(bootstrap, client_id="rafka-console") as admin:
        core = ClientCore(bootstrap, client_id="rafka-console",
                          security=ClientSecurity.from_kwargs({}))  # the CLI's security options
        core.open(nursery)
        try:
            console = Console(admin, core, metrics=metrics, interval_s=interval_s)
            await nursery.start(console.sample_forever)
            bound = await nursery.start(serve_http, console.handle, host, port)
            print(f"console: http://{host}:{bound}/  (cluster {bootstrap}; Ctrl-C stops)",
                  file=sys.stderr, flush=True)
            task_status.started(bound)
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await core.aclose()
            nursery.cancel_scope.cancel()

"""Run one controller voter as a real process (multi-process kraft tests).

    python -m tests.kraft.voter_proc --id 1 --voters 1=127.0.0.1:19001/127.0.0.1:9001,...
        --data-dir DIR [--secret S] [--settings JSON]

Serves the controller APIs on the voter's rpc address with the wire protocol of
wire/protocol.py, plus a test-only api key 99 ``{"cmd": bytes}`` that proposes a raw
``Command`` (to test request-id dedup). Prints ``READY`` once serving.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

import trio
from rafka.kraft.quorum import Command
from rafka.kraft.service import ControllerService
from rafka.wire.errors import RafkaError
from rafka.wire.protocol import NEED_DATA, FrameDecoder, Response, decode_request, encode_response

RAW_PROPOSE = 99


async def serve_conn(stream: trio.SocketStream, svc: ControllerService) -> None:
    try:
        await _serve_conn(stream, svc)
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away mid-request (a test's short request timeout): not fatal


async def _serve_conn(stream: trio.SocketStream, svc: ControllerService) -> None:
    decoder = FrameDecoder()
    async with stream, trio.open_nursery() as nursery:
        send_lock = trio.Lock()

        async def handle(payload: bytes) -> None:
            req = decode_request(payload, validate=False)
            try:
                if req.api_key == RAW_PROPOSE:
                    r = await svc.require_quorum().propose(Command.from_bytes(req.body["cmd"]))
                    body: dict[str, Any] = {"error": 0, "base_offset": r.base_offset,
                                            "last_offset": r.last_offset, "duplicate": r.duplicate}
                else:
                    body = await svc.handlers[req.api_key](req.body)
            except RafkaError as exc:
                body = {"error": int(exc.code), "message": exc.message}
            async with send_lock:
                await stream.send_all(encode_response(Response(req.correlation_id, body)))

        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            decoder.receive_data(data)
            while (frame := decoder.next_frame()) is not NEED_DATA:
                nursery.start_soon(handle, frame)


async def main(args: argparse.Namespace) -> None:
    voters = []
    for spec in args.voters.split(","):
        vid, addrs = spec.split("=")
        raft, rpc = addrs.split("/")
        voters.append((int(vid), raft, rpc))
    me = next(v for v in voters if v[0] == args.id)
    svc = ControllerService(args.id, voters, me[1], args.data_dir, args.secret or None,
                            json.loads(args.settings))
    async with trio.open_nursery() as nursery:
        # serve first, as rafka/node.py does: a voter on an empty disk asks the others before
        # its quorum starts (kraft/voters.py), so they must answer while they start too
        host, port = me[2].rsplit(":", 1)
        listeners = await trio.open_tcp_listeners(int(port), host=host)
        nursery.start_soon(trio.serve_listeners, lambda s: serve_conn(s, svc), listeners)
        await nursery.start(svc.run)
        print("READY", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--voters", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--secret", default="")
    p.add_argument("--settings", default="{}")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s voter-" + str(a.id) + " %(name)s %(levelname)s %(message)s")
    try:
        trio.run(main, a)
    except KeyboardInterrupt:
        pass

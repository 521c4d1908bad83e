"""A fixed packet delay where the kernel has no netem: hold each packet of an NFQUEUE, then accept it.

Run inside a network namespace (``Launcher.start(..., netns=...)``) whose iptables rules send the
packets to delay to the queue (``-j NFQUEUE --queue-num N --queue-bypass``). It speaks the
nfnetlink_queue protocol directly over a netlink socket: bind the queue, copy metadata only, and
answer each packet's id with NF_ACCEPT once its delay has passed, in arrival order. It prints
``ready`` once bound, then ``delayed N`` as packets pass.
"""

from __future__ import annotations

import argparse
import heapq
import select
import socket
import struct
import sys
import time
from collections.abc import Iterator, Sequence

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS = 1, 2
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
_HEADER = struct.Struct("=IHHII")


def _attribute(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, queue: int, attributes: Sequence[bytes], flags: int, seq: int) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attributes)
    return _HEADER.pack(_HEADER.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def _messages(data: bytes) -> Iterator[tuple[int, bytes]]:
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _flags, _seq, _pid = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size:
            return
        yield kind, data[offset + _HEADER.size : offset + length]
        offset += (length + 3) & ~3


def _attributes(body: bytes) -> Iterator[tuple[int, bytes]]:
    offset = 4  # after struct nfgenmsg
    while offset + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, offset)
        if length < 4:
            return
        yield kind & 0x3FFF, body[offset + 4 : offset + length]
        offset += (length + 3) & ~3


def _configure(sock: socket.socket, queue: int) -> None:
    bind = _attribute(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, socket.AF_INET))
    params = _attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
    for seq, attribute in enumerate((bind, params), start=1):
        sock.send(_message(NFQNL_MSG_CONFIG, queue, [attribute], NLM_F_REQUEST | NLM_F_ACK, seq))
        for kind, body in _messages(sock.recv(65536)):
            if kind == NLMSG_ERROR and struct.unpack_from("=i", body)[0] != 0:
                raise OSError(-struct.unpack_from("=i", body)[0], f"nfqueue config step {seq} refused")


def run(queue: int, delay: float) -> None:
    """Bind the queue and accept each packet delay seconds after it arrived, until killed."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    _configure(sock, queue)
    print("ready", flush=True)
    held: list[tuple[float, int]] = []
    delayed, reported, reported_at = 0, 0, 0.0
    while True:
        wait = max(0.0, held[0][0] - time.monotonic()) if held else 1.0
        readable, _, _ = select.select([sock], [], [], wait)
        if readable:
            for kind, body in _messages(sock.recv(262144)):
                if kind != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    continue
                for attribute, payload in _attributes(body):
                    if attribute == NFQA_PACKET_HDR:
                        heapq.heappush(held, (time.monotonic() + delay, struct.unpack_from("!I", payload)[0]))
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, packet_id = heapq.heappop(held)
            verdict = _attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id))
            sock.send(_message(NFQNL_MSG_VERDICT, queue, [verdict], NLM_F_REQUEST, 0))
            delayed += 1
        if delayed != reported and (not held or now - reported_at >= 0.5):
            print(f"delayed {delayed}", flush=True)
            reported, reported_at = delayed, now


def main(argv: Sequence[str] | None = None) -> int:
    """``--queue N --delay-ms D``: delay the queue's packets by D ms (exit 2 on bad arguments)."""
    parser = argparse.ArgumentParser(prog="netdelay")
    parser.add_argument("--queue", type=int, default=0)
    parser.add_argument("--delay-ms", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        run(args.queue, args.delay_ms / 1000)
    except OSError as error:
        print(f"netdelay: {error}", file=sys.stderr, flush=True)
        return 1
    return 0

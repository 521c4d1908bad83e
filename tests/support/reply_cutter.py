"""A TCP proxy in front of a gRPC server that loses every reply: requests pass through whole, and the
connection is reset when the server's answer begins (its first HEADERS frame on a stream), after the
server did the work. The caller sees UNAVAILABLE, as when a network drops a reply."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

FRAME_HEADER_BYTES = 9
HEADERS = 0x1


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # Wakes the thread reading it: a close alone waits for that read to return.
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


class ReplyCutter:
    """Listens on a free loopback port and forwards each connection to upstream_port, cutting its replies."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.replies_cut = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="reply-cutter", daemon=True).start()

    @property
    def target(self) -> str:
        """host:port to dial instead of the server."""
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                server = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client), daemon=True).start()

    @staticmethod
    def _requests(client: socket.socket, server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := client.recv(65536):
                server.sendall(chunk)
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_WR)

    def _replies(self, server: socket.socket, client: socket.socket) -> None:
        pending = b""
        try:
            while chunk := server.recv(65536):
                pending += chunk
                while len(pending) >= FRAME_HEADER_BYTES:
                    length = int.from_bytes(pending[:3], "big")
                    kind, stream = pending[3], int.from_bytes(pending[5:9], "big") & 0x7FFFFFFF
                    if kind == HEADERS and stream != 0:
                        with self._lock:
                            self.replies_cut += 1
                        return
                    if len(pending) < FRAME_HEADER_BYTES + length:
                        break
                    client.sendall(pending[: FRAME_HEADER_BYTES + length])
                    pending = pending[FRAME_HEADER_BYTES + length :]
        except OSError:
            pass
        finally:
            _reset(client)
            _reset(server)

    def close(self) -> None:
        """Stop accepting (connections already cut stay cut)."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()

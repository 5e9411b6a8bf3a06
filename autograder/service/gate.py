"""Who may hold a connection. Every connection is anonymous from its accept until a request on it says who sends it
(a learner's token, the upload page's login cookie, the hub's), from its headers (autograder.service.server); it
then counts only towards `max_connections`, and closes with its answer (the server keeps no connection alive).
Anonymous connections are short (the server's header and body timeouts) and few: at most `max_anonymous`, and
`max_anonymous_per_peer` from one address, a bound that gives way to a burst (connections that arrive together are
all anonymous until their headers are read) only while no one else needs the room. A new connection from an address
past its share takes the place of that address's oldest anonymous connection if it has been open longer than `GRACE`
(no client sending its headers takes that long), else it is taken while there is room and refused when there is
none; one from any other address that finds no room takes the place of the oldest anonymous connection of the
address holding the most past its share, else of the oldest open longer than the grace, else it is refused. The
connection whose place is taken is closed unanswered; a refused one is answered 503 with Retry-After before anything
of it is read. So the anonymous sockets of one address never keep another's connection out, and those of a few
addresses only while they are younger than the grace."""
from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import time

from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream, StreamClosedError

GRACE = 2.0                    # seconds an anonymous connection is safe from being closed to make room


def peer_of(address) -> str:
    """The peer a connection counts against: its IPv4 address, the /64 of an IPv6 one (one host holds a whole /64),
    "" for a Unix socket."""
    if not isinstance(address, tuple) or not address:
        return ""
    try:
        ip = ipaddress.ip_address(address[0])
    except ValueError:
        return str(address[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class Gate:
    """The open connections and, of them, the anonymous ones by peer, oldest first. `enter` takes a new connection
    (or says why not) and names the anonymous one to close for it, if any; `identified` and `closed` free places."""

    def __init__(self, connections: int, anonymous: int, per_peer: int, grace: float = GRACE):
        self.connections, self.anonymous, self.per_peer, self.grace = connections, anonymous, per_peer, grace
        self.open: dict[object, str] = {}                           # connection -> its peer
        self.unknown: dict[str, dict[object, float]] = {}           # peer -> its anonymous connections -> since
        self.evicted = 0                                            # anonymous connections closed to make room

    def count(self, peer: str | None = None) -> int:
        """Anonymous connections open, from `peer` or in all."""
        if peer is not None:
            return len(self.unknown.get(peer, ()))
        return sum(len(c) for c in self.unknown.values())

    def enter(self, conn: object, peer: str, now: float | None = None) -> tuple[str | None, object | None]:
        """Take `conn`, a new connection from `peer`: (None, the anonymous connection to close for it, or None), or
        (why it is refused, None)."""
        now = time.monotonic() if now is None else now
        full = len(self.open) >= self.connections or self.count() >= self.anonymous
        victim = None
        if self.count(peer) >= self.per_peer:          # past its share: room is made of its own old ones only
            victim = self._oldest(self.unknown[peer], now)
        elif full:
            most = max(self.unknown, key=lambda p: len(self.unknown[p]), default=None)
            if most is not None and len(self.unknown[most]) > self.per_peer:
                victim = next(iter(self.unknown[most]))
            else:
                victim = self._oldest({c: t for conns in self.unknown.values() for c, t in conns.items()}, now)
        if full and victim is None:
            return ("the check service has as many connections open as it takes" if len(self.open) >= self.connections
                    else "the check service has as many connections open that have not said who they are as it "
                         "takes"), None
        if victim is not None:
            self.closed(victim)
            self.evicted += 1
        self.open[conn] = peer
        self.unknown.setdefault(peer, {})[conn] = now
        return None, victim

    def _oldest(self, conns: dict[object, float], now: float) -> object | None:
        """The oldest of `conns` if it has been anonymous longer than the grace."""
        if not conns:
            return None
        conn, since = min(conns.items(), key=lambda x: x[1])
        return conn if now - since > self.grace else None

    def identified(self, conn: object):
        """A request on `conn` said who sends it: `conn` is anonymous no longer."""
        peer = self.open.get(conn)
        if peer is not None:
            self._forget(peer, conn)

    def closed(self, conn: object):
        peer = self.open.pop(conn, None)
        if peer is not None:
            self._forget(peer, conn)

    def _forget(self, peer: str, conn: object):
        conns = self.unknown.get(peer)
        if conns is not None and conns.pop(conn, None) is not None and not conns:
            del self.unknown[peer]


class GatedServer(HTTPServer):
    """tornado's HTTP server whose connections pass `gate`: one refused is answered 503 with Retry-After before
    anything of it is read (what it sends meanwhile is discarded, a little at most), and closed; an anonymous one
    closed to make room is closed at once, unanswered. A handler marks its connection identified through
    `gate.identified(request.connection.stream)`."""

    gate: Gate

    def handle_stream(self, stream: IOStream, address):
        why, victim = self.gate.enter(stream, peer_of(address))
        if why is not None:
            asyncio.ensure_future(self._refuse(stream, why))
            return
        if isinstance(victim, IOStream):
            victim.close()
        super().handle_stream(stream, address)

    def on_close(self, server_conn):
        self.gate.closed(server_conn.stream)
        super().on_close(server_conn)

    @staticmethod
    async def _refuse(stream: IOStream, why: str):
        body = json.dumps({"error": f"{why}: try again shortly"}).encode()
        try:
            await stream.write(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nConnection: close\r\n"
                               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            stream.socket.shutdown(socket.SHUT_WR)
            deadline, left = time.monotonic() + 2, 1 << 20
            while left > 0 and time.monotonic() < deadline:
                left -= len(await asyncio.wait_for(stream.read_bytes(65536, partial=True),
                                                   deadline - time.monotonic()))
        except (TimeoutError, OSError, StreamClosedError):
            pass
        finally:
            stream.close()

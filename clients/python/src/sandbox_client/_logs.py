"""A process's output through ``sandboxprocesses/log``: events with cursors, resumed by cursor
after a cut connection, read on after a byte limit; lines as ``readiness.logMatch`` sees them
(the Rust crate's ``logs``)."""
from __future__ import annotations

import base64
import json
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import ReadTimeoutError

from ._consts import LOG_SILENCE_LIMIT, STREAMS
from ._cursor import _parse_cursor, _render_cursor
from .errors import ApiError, InvalidArgument, StreamBroken

if TYPE_CHECKING:
    from ._handle import _Handle


@dataclass(frozen=True)
class LogEvent:
    """One event of a process's output. ``type`` is ``data`` (``stream``, ``data`` bytes,
    ``time_nanos``), ``truncated`` (``dropped_bytes``: output dropped by the node's retention cap)
    or ``end`` (``ended``: the process has ended and all its output was read). ``cursor``: resume
    after this event."""

    type: str
    cursor: str
    stream: Optional[str] = None
    data: bytes = b""
    time_nanos: int = 0
    dropped_bytes: int = 0
    ended: bool = False


class _Reader:
    """One process's output across connections: resumed by cursor after a cut follow, read on
    after a byte limit, and cursors inside an event (``<cursor>+<n>``) honoured."""

    def __init__(self, p: "_Handle", follow: bool, after: Optional[str], stream: str,
                 limit_bytes: Optional[int], previous: bool = False) -> None:
        if stream not in STREAMS:
            raise InvalidArgument("stream", f"{stream!r} is not one of {', '.join(STREAMS)}")
        if limit_bytes is not None and limit_bytes < 1:
            raise InvalidArgument("limit_bytes", "must be at least 1")
        if previous and (follow or after is not None):
            raise InvalidArgument("previous", "not with follow or after (the previous run's output has ended)")
        #: The previous run's output: one read, never resumed (the API takes no ``since`` with it).
        self.previous = previous
        self.p = p
        self.follow = follow
        self.stream = stream
        self.agent, self.skip = _parse_cursor(after) if after is not None else (None, 0)
        self.budget = limit_bytes
        self.done = False
        self.resp: Any = None
        self.silence = LOG_SILENCE_LIMIT

    def cancel(self) -> None:
        """Ends the read from another thread (a local deadline): the open response is closed
        and no reconnect follows, so neither a connection nor the agent's follow slot is held."""
        self.done = True
        r = self.resp
        conn = getattr(getattr(r, "response", None), "connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            # A shutdown, not close(): close() waits for the reading thread's lock, i.e. for
            # the next byte. The plain socket's shutdown (SSLSocket's would drop the TLS state
            # under the reader): its blocked read returns at once and it sees `done`.
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def position(self) -> str:
        return _render_cursor(self.agent, self.skip)

    def _query(self) -> List[Tuple[str, str]]:
        """The next read's query, from where this one stands."""
        # Positions count every event of both streams (a "+n" cursor is n bytes into the next
        # event after the cursor, whatever its stream): a filtered read asks for both and
        # filters here, so it steps over the events a position must count.
        q = [("stream", "both")]
        if self.follow:
            q.append(("follow", "true"))
        if self.previous:
            q.append(("previous", "true"))
        if self.agent is not None:
            q.append(("since", self.agent))
        # A previous read's byte limit is applied here: the server's would end the response with
        # a "more" event to read on from, which needs "since".
        if self.budget is not None and not self.previous:
            q.append(("maxBytes", str(max(1, self.budget + self.skip))))
        return q

    def events(self) -> Iterator[Tuple[str, Dict[str, Any], Tuple[Optional[str], int]]]:
        """(type, fields, start) per event; ``start`` is the position before a data event."""
        broken = unavailable = 0
        while not self.done:
            try:
                resp = self.p._sandbox._raw("GET", self.p._path("log"), self._query(), timeout=(30, self.silence))
                self.resp = resp
            except ApiError as e:
                # A follow outlives a moment without an agent or API server (a restart, a rollout).
                if self.follow and e.transient and unavailable < 60:
                    unavailable += 1
                    time.sleep(0.5)
                    continue
                raise
            more = False
            try:
                for line in _lines(resp.response):
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    broken = unavailable = 0  # progress: each outage gets its own retries
                    t = ev.get("type")
                    if t == "data":
                        data = base64.b64decode(ev["data"])
                        if self.skip:
                            if self.skip > len(data):
                                raise InvalidArgument("after", f"{self.position()} points past its event")
                            data = data[self.skip:]
                        start = (self.agent, self.skip)
                        self.agent, self.skip = ev["cursor"], 0
                        if (self.stream != "both" and ev["stream"].lower() != self.stream) or not data:
                            continue
                        cursor = ev["cursor"]
                        if self.budget is not None:
                            if len(data) >= self.budget:
                                cut = self.budget
                                if cut < len(data):
                                    data = data[:cut]
                                    self.agent, self.skip = start[0], start[1] + cut
                                    cursor = self.position()
                                self.budget = 0
                                self.done = True
                                yield "data", {"stream": ev["stream"].lower(), "data": data,
                                               "time_nanos": ev.get("tsNanos", 0), "cursor": cursor}, start
                                yield "end", {"cursor": self.position(), "ended": False}, start
                                return
                            self.budget -= len(data)
                        yield "data", {"stream": ev["stream"].lower(), "data": data,
                                       "time_nanos": ev.get("tsNanos", 0), "cursor": cursor}, start
                    elif t == "truncated":
                        self.agent, self.skip = ev["cursor"], 0
                        yield "truncated", {"dropped_bytes": ev.get("droppedBytes", 0),
                                            "cursor": ev["cursor"]}, (None, 0)
                    elif t == "more":
                        if self.previous:
                            raise StreamBroken(f"reading the previous output of sandboxprocess {self.p.name}: "
                                               "cut (a read with previous cannot resume)")
                        self.agent, self.skip = ev["cursor"], 0
                        more = True
                        break
                    elif t == "end":
                        self.agent, self.skip = ev["cursor"], 0
                        self.done = True
                        yield "end", {"cursor": ev["cursor"], "ended": ev.get("record") is not None}, (None, 0)
                        return
            except (ReadTimeoutError, TimeoutError):
                # Silent for LOG_SILENCE_LIMIT: a dead connection (a peer gone without FIN or
                # RST). A follow reads again from its cursor, not counted as a failure.
                if self.done:
                    return  # cancelled
                if not self.follow:
                    raise StreamBroken(f"reading the output of sandboxprocess {self.p.name}: "
                                       f"nothing heard for {self.silence} s") from None
                continue
            except (OSError, ValueError, Urllib3Error) as e:
                if self.done:
                    return  # cancelled
                if isinstance(e, json.JSONDecodeError) or not self.follow or broken >= 5:
                    raise StreamBroken(f"reading the output of sandboxprocess {self.p.name}: {e}") from None
                broken += 1
                time.sleep(0.5)
                continue
            finally:
                resp.response.release_conn()
            if more:
                continue
            if self.done:
                return  # cancelled
            # Cut without an end event: resume a follow from the last cursor.
            if self.follow and broken < 5:
                broken += 1
                time.sleep(0.5)
                continue
            raise StreamBroken(
                f"reading the output of sandboxprocess {self.p.name}: the connection ended before the end of the output"
            )


def _lines(resp) -> Iterator[bytes]:
    """NDJSON lines as they arrive (chunk by chunk, not at the end of the response)."""
    buf = b""
    for chunk in resp.stream(None, decode_content=True):
        buf += chunk
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            yield buf[:i]
            buf = buf[i + 1:]
    if buf:
        yield buf


class _Lines:
    """Complete lines per stream, as ``readiness.logMatch`` sees them."""

    MAX_LINE = 64 << 10

    def __init__(self) -> None:
        self.partial = {"stdout": b"", "stderr": b""}

    def feed(self, stream: str, data: bytes, match: Callable[[bytes], bool]) -> Optional[Tuple[int, bytes]]:
        start = 0
        while True:
            i = data.find(b"\n", start)
            if i < 0:
                break
            # The last 64 KiB of a long line, and a "\r" kept, as readiness.logMatch does.
            line = (self.partial[stream] + data[start:i])[-self.MAX_LINE:]
            self.partial[stream] = b""
            if match(line):
                return i + 1, line
            start = i + 1
        self.partial[stream] = (self.partial[stream] + data[start:])[-self.MAX_LINE:]
        return None

    def gap(self) -> None:
        """Output was dropped: a partial line is not completed by what follows the gap."""
        self.partial = {"stdout": b"", "stderr": b""}

    def finish(self, match: Callable[[bytes], bool]) -> Optional[Tuple[str, bytes]]:
        for s in ("stdout", "stderr"):
            line, self.partial[s] = self.partial[s], b""
            if line and match(line):
                return s, line
        return None

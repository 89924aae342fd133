"""The streaming attach (the Rust crate's ``process/attach.rs``): one WebSocket through the API
server (``sandboxprocesses/attach``, Kubernetes' ``v5.channel.k8s.io``) carrying stdin, the
output, resizes and the exit code. Framing as in ``sandbox_api::channel`` (cases in
clients/conformance/channel.json)."""
from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import quote, urlencode

from ._cursor import _parse_cursor, _render_cursor
from ._handle import _Handle
from ._start import _size
from .errors import ApiError, InvalidArgument

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
#: Ours (``sandbox_api::channel::CURSOR``): the log cursor the output that follows starts after.
CURSOR = 9
OPCODE_BINARY = 0x2  # websocket.ABNF.OPCODE_BINARY
MAX_FRAME = 1 << 20


def read_status(data: bytes) -> int:
    """The exit code a final status carries (0 on ``Success``); ``ApiError`` when the stream
    ended without the process's end."""
    v = json.loads(data)
    if v.get("status") == "Success":
        return 0
    if v.get("reason") == "NonZeroExitCode":
        for c in (v.get("details") or {}).get("causes") or []:
            if c.get("reason") == "ExitCode" and str(c.get("message", "")).isdigit():
                return int(c["message"])
    raise ApiError(0, v.get("reason") or "Failure",
                   v.get("message") or "the stream ended with a failure")


def frame(channel: int, data: bytes) -> bytes:
    return bytes([channel]) + data


def resize_frame(rows: int, cols: int) -> bytes:
    size = _size("", rows, cols)
    return frame(RESIZE, json.dumps({"Width": size["cols"], "Height": size["rows"]},
                                    separators=(",", ":")).encode())


#: Failure reasons of a final status after which attaching again goes on (the node's agent or
#: the connection failed); the Rust crate's ``channel::Failure::is_transient``.
TRANSIENT = ("ServiceUnavailable", "InternalError", "Timeout")

#: How long the attach tries to connect again before it gives up (a restarting agent is back in
#: seconds); the Rust crate's ``RECONNECT_FOR``.
RECONNECT_FOR = 60.0


def transient(data: bytes) -> bool:
    """Whether a final status says to attach again (it is not the process's end)."""
    try:
        return json.loads(data).get("reason") in TRANSIENT
    except ValueError:
        return True


class Attached:
    """A duplex on one process: ``send``/``close_stdin``/``resize`` write, ``events()`` reads
    ``("stdout", bytes)``, ``("stderr", bytes)`` and, last, ``("exit", code)``.

    It outlives its connections, as the Rust crate's attach does: when one breaks (the node's
    agent restarts, a proxy cuts it) ``events()`` attaches again by itself (for up to
    ``RECONNECT_FOR`` s) from the cursor after the last byte it returned, so no output byte is
    repeated or missed. Stdin goes by offset (``sandboxprocesses/stdin``): ``send`` returns only
    once the process has taken every byte, exactly once, retrying through such failures; an
    error is the client's typed ``ApiError``, never the WebSocket library's."""

    def __init__(self, handle: Any, ws: Any, at: Dict[str, Any]) -> None:
        self._h = handle
        self._ws = ws
        self._at = at  # since, screen, stdin offset, writer: what a reconnect needs
        self._received = 0
        self._done = False
        self._lock = threading.Lock()

    def send(self, data: bytes) -> None:
        """Writes to stdin; returns once the process has taken all of it (paced by its pipe:
        waits while it is full)."""
        base = self._stdin_base()
        self._at["stdin_offset"] = self._h._send(base, bytes(data), False, self._at["writer"])

    def close_stdin(self) -> None:
        """Ends stdin once everything sent is taken (on a terminal: as Ctrl-D does not)."""
        self._h._send(self._stdin_base(), b"", True, self._at["writer"])

    def _stdin_base(self) -> int:
        if self._at["stdin_offset"] is None:
            raise InvalidArgument("stdin", "attach(stdin=True) to write")
        return int(self._at["stdin_offset"])

    def resize(self, rows: int, cols: int) -> None:
        f = resize_frame(rows, cols)
        self._at["size"] = f
        try:
            self._ws.send_binary(f)
        except Exception:  # a broken connection: the next one sends the size first
            pass

    def detach(self) -> None:
        """Leaves the process running (stdin stays open; attach again to go on)."""
        self._done = True
        try:
            self._ws.close()
        except Exception:
            pass

    def events(self) -> Iterator[Tuple[str, Any]]:
        while not self._done:
            try:
                op, data = self._ws.recv_data()
            except Exception as e:  # closed, reset, timed out: attach again
                self._reconnect(f"{type(e).__name__}: {e}")
                continue
            if op != OPCODE_BINARY or not data:
                continue
            ch, body = data[0], bytes(data[1:])
            if ch in (STDOUT, STDERR):
                self._received += len(body)
                yield ("stdout" if ch == STDOUT else "stderr", body)
            elif ch == CURSOR:  # after a terminal's screen: go on from the exact byte
                self._at["since"], self._at["screen"], self._received = body.decode(), False, 0
            elif ch == ERROR and transient(body):
                self._reconnect(json.loads(body).get("message", "the server said to attach again"))
            elif ch == ERROR:
                self._done = True
                yield ("exit", read_status(body))

    def _reconnect(self, why: str) -> None:
        """A new connection from where the output is (a terminal attached from its screen is
        drawn again, as tmux redraws a client); ``ApiError`` once ``RECONNECT_FOR`` has passed
        or on a refusal that attaching again cannot mend."""
        with self._lock:
            try:
                self._ws.close()
            except Exception:
                pass
            deadline = time.monotonic() + RECONNECT_FOR
            last = ApiError(0, "Transport", f"attach: {why}")
            while time.monotonic() < deadline:
                try:
                    self._ws = _connect(self._h, self._at, self.resume_cursor_or_screen())
                    if self._at.get("size"):
                        self._ws.send_binary(self._at["size"])
                    return
                except ApiError as e:
                    if not e.transient:
                        self._done = True
                        raise
                    last = e
                time.sleep(0.5)
            self._done = True
            raise last

    def resume_cursor_or_screen(self) -> Optional[str]:
        if self._at["screen"]:
            return None
        if self._at["since"] is None and self._received == 0:
            return None
        return self.resume_cursor()

    def resume_cursor(self) -> str:
        """Where the output read so far ends: attach again with it as ``since``."""
        since = self._at["since"]
        agent, skip = _parse_cursor(since) if since else (None, 0)
        return _render_cursor(agent, skip + self._received)


class _Attach(_Handle):
    def attach(self, stdin: bool = False, since: Optional[str] = None,
               stdin_offset: Optional[int] = None) -> Attached:
        """Attaches to the process (waiting for its start like the other calls). Needs what a
        stdin write needs. ``since``: output after this cursor (default: from the beginning; on
        a terminal, from what its screen shows now); ``stdin_offset``: the offset of the first
        stdin byte sent (default: stdin's end; on a terminal, which attachers share, this
        attach's own bytes, from 0)."""
        self._ensure_started("attach", self.start_timeout)
        if since is not None:
            _parse_cursor(since)
        tty = bool((self.object().get("spec") or {}).get("tty"))
        writer = secrets.token_hex(12) if (tty and stdin) else None
        if stdin and stdin_offset is None:
            h: Any = self  # a Process: stdin is its sibling mixin's
            stdin_offset = 0 if writer else h.stdin_state()["bytes"]
        at: Dict[str, Any] = {"since": since, "screen": tty and since is None,
                              "stdin_offset": stdin_offset if stdin else None,
                              "writer": writer, "size": None}
        return Attached(self, _connect(self, at, since), at)


def _connect(h: Any, at: Dict[str, Any], since: Optional[str]) -> Any:
    """One WebSocket of an attach: the output after ``since`` (``None``: from the beginning, or
    a terminal's screen), resizes. Stdin goes by offset beside it."""
    from kubernetes.stream.ws_client import create_websocket
    from websocket import WebSocketBadStatusException

    q: List[Tuple[str, str]] = [("stdin", "false"), ("stdout", "true"), ("stderr", "true"),
                                ("cursors", "true")]
    if since is not None:
        q.append(("since", since))
    api = h._sandbox.api_client
    cfg = api.configuration
    url = cfg.host.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    url += quote(h._path("attach")) + "?" + urlencode(q)
    headers = {}
    token = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization")
    if token:
        headers["authorization"] = token
    try:
        return create_websocket(cfg, url, headers)
    except WebSocketBadStatusException as e:
        raise _refusal(e) from None
    except Exception as e:  # refused, reset, DNS, TLS: the library's own errors
        raise ApiError(0, "Transport", f"attach: {e}") from None


def _refusal(e: Any) -> ApiError:
    """The API server's Status of a refused upgrade, as an ApiError."""
    try:
        s = json.loads(e.resp_body or b"{}")
    except ValueError:
        s = {}
    return ApiError(int(getattr(e, "status_code", 0) or 0), s.get("reason") or "Failure",
                    s.get("message") or str(e))

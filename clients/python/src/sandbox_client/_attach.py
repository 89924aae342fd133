"""The streaming attach (the Rust crate's ``process/attach.rs``): one WebSocket through the API
server (``sandboxprocesses/attach``, Kubernetes' ``v5.channel.k8s.io``) carrying stdin, the
output, resizes and the exit code. Framing as in ``sandbox_api::channel`` (cases in
clients/conformance/channel.json)."""
from __future__ import annotations

import json
from typing import Any, Iterator, List, Optional, Tuple
from urllib.parse import quote, urlencode

from ._cursor import _parse_cursor, _render_cursor
from ._handle import _Handle
from ._start import _size
from .errors import ApiError

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
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


class Attached:
    """A duplex on one process: ``send``/``close_stdin``/``resize`` write, ``events()`` reads
    ``("stdout", bytes)``, ``("stderr", bytes)`` and, last, ``("exit", code)``."""

    def __init__(self, ws: Any, since: Optional[str]) -> None:
        self._ws = ws
        self._since = since
        self._received = 0
        self._done = False

    def send(self, data: bytes) -> None:
        """Writes to stdin (paced by the process's pipe: waits while it is full)."""
        for i in range(0, len(data), MAX_FRAME):
            self._ws.send_binary(frame(STDIN, data[i:i + MAX_FRAME]))

    def close_stdin(self) -> None:
        self._ws.send_binary(frame(CLOSE, bytes([STDIN])))

    def resize(self, rows: int, cols: int) -> None:
        self._ws.send_binary(resize_frame(rows, cols))

    def detach(self) -> None:
        """Leaves the process running (stdin stays open; attach again to go on)."""
        self._ws.close()

    def events(self) -> Iterator[Tuple[str, Any]]:
        import websocket  # the kubernetes package's own dependency

        while not self._done:
            try:
                op, data = self._ws.recv_data()
            except websocket.WebSocketConnectionClosedException:
                self._done = True
                raise ApiError(0, "Transport", "attach: the connection ended before the process")
            if op != websocket.ABNF.OPCODE_BINARY or not data:
                continue
            ch, body = data[0], bytes(data[1:])
            if ch in (STDOUT, STDERR):
                self._received += len(body)
                yield ("stdout" if ch == STDOUT else "stderr", body)
            elif ch == ERROR:
                self._done = True
                yield ("exit", read_status(body))

    def resume_cursor(self) -> str:
        """Where the output read so far ends: attach again with it as ``since``."""
        agent, skip = _parse_cursor(self._since) if self._since else (None, 0)
        return _render_cursor(agent, skip + self._received)


class _Attach(_Handle):
    def attach(self, stdin: bool = False, since: Optional[str] = None,
               stdin_offset: Optional[int] = None) -> Attached:
        """Attaches to the process (waiting for its start like the other calls). Needs what a
        stdin write needs. ``since``: output after this cursor (default: from the beginning);
        ``stdin_offset``: the offset of the first stdin byte sent (default: stdin's end)."""
        from kubernetes.stream.ws_client import create_websocket
        from websocket import WebSocketBadStatusException

        self._ensure_started("attach", self.start_timeout)
        q: List[Tuple[str, str]] = [("stdin", str(stdin).lower()), ("stdout", "true"),
                                    ("stderr", "true")]
        if since is not None:
            _parse_cursor(since)
            q.append(("since", since))
        if stdin_offset is not None:
            q.append(("stdinOffset", str(int(stdin_offset))))
        api = self._sandbox.api_client
        cfg = api.configuration
        url = cfg.host.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        url += quote(self._path("attach")) + "?" + urlencode(q)
        headers = {}
        token = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
            "authorization")
        if token:
            headers["authorization"] = token
        try:
            ws = create_websocket(cfg, url, headers)
        except WebSocketBadStatusException as e:
            raise _refusal(e) from None
        except OSError as e:
            raise ApiError(0, "Transport", f"attach: {e}") from None
        return Attached(ws, since)


def _refusal(e: Any) -> ApiError:
    """The API server's Status of a refused upgrade, as an ApiError."""
    try:
        s = json.loads(e.resp_body or b"{}")
    except ValueError:
        s = {}
    return ApiError(int(getattr(e, "status_code", 0) or 0), s.get("reason") or "Failure",
                    s.get("message") or str(e))

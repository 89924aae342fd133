"""Stdin through the handle: its state, exactly-once writes by offset, close, and a pump (the
Rust crate's ``stdin`` and ``process/stdin.rs``)."""
from __future__ import annotations

import json
import time
from typing import Any, Dict, Optional

from ._consts import STDIN_STALL, log
from ._handle import _Handle
from .errors import ApiError


class _Stdin(_Handle):
    def stdin_state(self) -> Dict[str, Any]:
        """``{"bytes": B, "closed": C}``: where the next write starts."""
        self._ensure_started("stdin_state", self.start_timeout)
        return json.loads(self._sandbox._raw("GET", self._path("stdin"), timeout=30).read())

    def _write(self, offset: int, data: bytes, close: bool,
               writer: Optional[str] = None) -> Dict[str, Any]:
        q = [("offset", str(offset)), ("close", "true" if close else "false")]
        if writer is not None:
            q.append(("writer", writer))
        resp = self._sandbox._raw(
            "POST", self._path("stdin"), q,
            body=bytes(data), content_type="application/octet-stream", timeout=30,
        )
        return json.loads(resp.read())

    def _where(self, writer: Optional[str], at: int) -> Dict[str, Any]:
        """Where stdin is; for a shared terminal's ``writer``, its own count (an empty write
        at ``at``, at or behind the count, takes nothing and answers it)."""
        if writer is None:
            return self.stdin_state()
        return self._write(at, b"", False, writer)

    def _send(self, offset: int, data: bytes, close: bool, writer: Optional[str] = None) -> int:
        """Sends ``data`` from ``offset`` until stdin has taken all of it (then EOF when
        ``close``): exactly once by offset, transient failures (an agent or operator restart)
        retried; returns only then, with the end offset. ``writer``: a shared terminal's writer,
        whose offsets are its own."""
        start, end = offset, offset + len(data)
        failures, idle = 0, 0.005
        since, told = time.monotonic(), False
        while True:
            try:
                s = self._write(offset, data[offset - start:], close, writer)
            except ApiError as e:
                if e.status == 409 and "StdinConflict" in str(e):
                    # Bytes over what stdin took there differ (another writer): its own code.
                    raise ApiError(409, "StdinConflict", str(e)) from None
                if e.status == 409 and "StdinOffsetMismatch" in str(e):
                    now = self._where(writer, start)
                    if not start <= now["bytes"] <= end:
                        raise
                    offset = now["bytes"]
                    if offset == end and (not close or now.get("closed")):
                        return end
                    continue
                if e.transient and failures < 20:
                    failures += 1
                    time.sleep(0.25 * min(failures, 8))
                    continue
                raise
            if s["bytes"] > end:
                raise ApiError(409, "Conflict", f"StdinOffsetMismatch: stdin of sandboxprocess {self.name} "
                               f"is at byte {s['bytes']}, beyond this write ({start}..{end}): another writer?")
            if s["bytes"] == end and (not close or s.get("closed")):
                return end
            if s["bytes"] > offset:
                offset, idle = s["bytes"], 0.005
                since, told = time.monotonic(), False
            else:
                waited = time.monotonic() - since
                if not told and waited >= STDIN_STALL:
                    told = True  # once per stall
                    self._stalled(end - offset, waited)
                time.sleep(idle)  # not read yet: wait, as a pipe makes a writer wait
                idle = min(idle * 2, 0.2)

    def _stalled(self, pending: int, waited: float) -> None:
        if self.on_stdin_stall is not None:
            self.on_stdin_stall(pending, waited)
        else:
            log.warning("sandboxprocess %s is not reading its stdin (%d bytes pending for %.0f s); "
                        "still waiting", self.name, pending, waited)

    def send_stdin(self, data: bytes) -> int:
        """Appends ``data`` to its stdin exactly once (retries by offset); the offset after it."""
        return self.send_stdin_at(self.stdin_state()["bytes"], data)

    def send_stdin_at(self, offset: int, data: bytes) -> int:
        """Like :meth:`send_stdin`, starting at the caller's ``offset``: retrying a call that
        failed part-way with the same offset and bytes sends only what stdin has not taken
        (exactly once across calls, not only within one)."""
        self._ensure_started("send_stdin", self.start_timeout)
        out = offset
        for i in range(0, len(data), 256 << 10):
            out = self._send(out, data[i:i + (256 << 10)], False)
        return out

    def pump_stdin(self, source: Any) -> int:
        """Copies a binary file-like ``source`` (``.read(n)``) to its stdin from where it is, in
        order and exactly once, then closes it; the bytes sent."""
        self._ensure_started("pump_stdin", self.start_timeout)
        state = self.stdin_state()
        if state.get("closed"):
            raise ApiError(409, "Conflict", f"StdinUnavailable: stdin of sandboxprocess {self.name} is closed")
        begin = at = state["bytes"]
        while True:
            chunk = source.read(256 << 10)
            if not chunk:
                self._send(at, b"", True)
                return at - begin
            at = self._send(at, chunk, False)

    def close_stdin(self) -> None:
        s = self.stdin_state()
        if not s.get("closed"):
            self._send(s["bytes"], b"", True)

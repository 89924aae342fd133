"""Waiting for a port through the agent's check (the Rust crate's ``port``)."""
from __future__ import annotations

import json
import time
from typing import Any, Dict, Optional, Tuple

from ._handle import _Handle
from ._state import _status, exit_of, is_final
from .errors import ApiError, ExitedBeforeReady, InvalidArgument


class _Port(_Handle):
    def wait_for_port(self, port: int, http_path: Optional[str] = None,
                      status: Tuple[int, int] = (200, 399), interval: float = 0.5,
                      timeout: Optional[float] = None) -> None:
        """Waits until ``port`` takes connections inside the process's pod (a server on the
        pod's 127.0.0.1 counts); with ``http_path``, until a GET answers with a status in
        ``status``. Each check is one ``sandboxprocesses/probe`` call: the node's agent dials from
        the pod's network namespace. Ending first: :class:`ExitedBeforeReady`."""
        if not 1 <= port <= 65535:
            raise InvalidArgument("port", "must be 1-65535")
        if interval < 0.01:
            raise InvalidArgument("interval", "must be at least 0.01 s")
        if http_path is None:
            body: Dict[str, Any] = {"tcpSocket": {"port": port}}
        else:
            lo, hi = status
            if not (100 <= lo <= hi <= 599):
                raise InvalidArgument("status", f"{lo}-{hi} is not a range within 100-599")
            body = {"httpGet": {"port": port, "path": http_path, "status": {"min": lo, "max": hi}}}
        deadline = None if timeout is None else time.monotonic() + timeout
        self._ensure_started("wait_for_port", timeout)
        last = ""
        while True:
            o = self.object()
            if is_final(o):
                s = _status(o)
                if s.get("error"):
                    exit_of(o)  # raises ProcessFailed with its code
                code = (s.get("exit") or {}).get("code")
                note = f" (last check: {last})" if last else ""
                raise ExitedBeforeReady(
                    f"sandboxprocess {self.name} ended before it was ready: it exited with code {code} before port {port} was ready{note}"
                )
            try:
                resp = self._sandbox._raw("POST", self._path("probe"), body=body,
                                          content_type="application/json", timeout=15)
                got = json.loads(resp.read())
                if got.get("ready"):
                    return
                last = got.get("message", "")
            except ApiError as e:
                if e.status not in (0, 409, 429, 500, 502, 503, 504):
                    raise
                last = str(e)
            if deadline is not None and time.monotonic() + interval > deadline:
                raise self._timed_out(f"listen on port {port}", timeout, self._state_now()
                                      + (f" (last check: {last})" if last else ""))
            time.sleep(interval)

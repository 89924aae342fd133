"""The terminal of a ``tty`` process: its window size (the Rust crate's
``process/terminal.rs``)."""
from __future__ import annotations

import json
from typing import Dict

from ._handle import _Handle
from ._start import _size


class _Terminal(_Handle):
    def resize(self, rows: int, cols: int) -> Dict[str, int]:
        """Gives its terminal a new window size (the process is told: SIGWINCH); the size set.
        Needs ``tty=True`` at start; waits for the start like the other calls."""
        body = _size("", rows, cols)
        self._ensure_started("resize", self.start_timeout)
        resp = self._sandbox._raw("POST", self._path("resize"), body=body,
                                  content_type="application/json", timeout=30)
        return json.loads(resp.read())

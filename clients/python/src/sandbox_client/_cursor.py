"""The log cursor ``<agent cursor>+<n>`` (the Rust ``sandbox_api::cursor``; cases in
clients/conformance/cursor.json)."""
from __future__ import annotations

from typing import Optional, Tuple

from .errors import InvalidArgument


def _parse_cursor(c: str) -> Tuple[Optional[str], int]:
    """``<agent cursor>+<n>``: n bytes into the event after the agent's cursor (the Rust
    library's form; an empty agent part is the beginning)."""
    if c == "":
        raise InvalidArgument("after", "empty cursor")
    agent, plus, n = c.rpartition("+")
    if plus and n.isascii() and n.isdigit():
        skip = int(n)
        if skip >= 1 << 64:  # the Rust library's u64
            raise InvalidArgument("after", f"{c!r} is not a cursor")
        return (agent or None, skip)
    return (c, 0)


def _render_cursor(agent: Optional[str], skip: int) -> str:
    if agent is not None and skip == 0:
        return agent
    return f"{agent or ''}+{skip}"

"""Whether a call that needs a started process goes ahead, waits, or fails (the Rust crate's
``started``; cases in clients/conformance/start.json)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from ._state import _status, exit_of, is_final, is_started
from .errors import SandboxError


def _why(s: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """The reason and message the status gives for where it is: its error, else a Ready
    condition that is not True."""
    err = s.get("error")
    if err:
        return str(err.get("code", "")), str(err.get("message", ""))
    for c in s.get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") != "True" and c.get("reason"):
            return str(c["reason"]), str(c.get("message", ""))
    return None


def describe(o: Mapping[str, Any]) -> str:
    """What the process is at, for people: ``phase Pending, PodNotFound: pod w does not exist
    (yet)``."""
    s = _status(o)
    phase = s.get("phase")
    if not phase:
        return "no status yet (the operator has not taken it up)"
    why = _why(s)
    if why is None:
        return f"phase {phase}"
    reason, message = why
    return f"phase {phase}, {reason}: {message}" if message else f"phase {phase}, {reason}"


def start_state(o: Mapping[str, Any]) -> Tuple[str, Optional[str], Optional[SandboxError]]:
    """Whether the process has started: ``("started", None, None)``; still may:
    ``("wait", reason, None)`` (``PodNotFound``, ...; ``None`` without a status); never will:
    ``("failed", code, error)``, the start's error. Every call that needs a started process
    decides by this (cases in clients/conformance/start.json, shared with the Rust library)."""
    if is_started(o):
        return "started", None, None
    if is_final(o):
        try:
            exit_of(o)
        except SandboxError as e:
            return "failed", e.code, e
        return "started", None, None  # an exit of its own was a start
    why = _why(_status(o))
    return "wait", (why[0] if why else None), None

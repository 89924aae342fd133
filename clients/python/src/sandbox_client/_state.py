"""Where a process is, from its object: final, started, ready, how it ended (the Rust crate's
``state``, whose rules live on the status type in ``sandbox_api``; the cases both run are in
clients/conformance/status.json)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from .errors import EndedWithoutExit, ProcessFailed, SandboxError


@dataclass(frozen=True)
class Exit:
    """How a process ended: the root's exit code (128+n when signal n killed it), the signal,
    whether ``timeoutSeconds`` stopped it, and ``status.endReason``."""

    code: int
    signal: Optional[int]
    timed_out: bool
    end_reason: Optional[str]


def _status(o: Mapping[str, Any]) -> Dict[str, Any]:
    return dict(o.get("status") or {})


def is_final(o: Mapping[str, Any]) -> bool:
    """The status will not change any more: ``Exited``, or an ``Error`` that cannot heal
    (``AgentUnavailable``, and ``ProcessLost`` without ``endReason``, recover when the agent
    answers; the same rule as the operator's, cases in clients/conformance/start.json)."""
    s = _status(o)
    phase = s.get("phase")
    if phase == "Exited":
        return True
    if phase != "Error":
        return False
    code = (s.get("error") or {}).get("code")
    if code == "AgentUnavailable":
        return False
    if code == "ProcessLost":
        return s.get("endReason") is not None
    return True


def is_started(o: Mapping[str, Any]) -> bool:
    return _status(o).get("podUID") is not None


def _ready_condition(o: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    for c in _status(o).get("conditions") or []:
        if c.get("type") == "Ready":
            return c
    return None


def is_ready(o: Mapping[str, Any]) -> bool:
    """``Ready=True``; for a process with readiness that has ended, only if it was ever ready."""
    c = _ready_condition(o)
    said = c is not None and c.get("status") == "True"
    spec = o.get("spec") or {}
    ended_never_ready = bool(spec.get("readiness")) and not _status(o).get("readyAt") and is_final(o)
    return said and not ended_never_ready


def _name(o: Mapping[str, Any]) -> str:
    return (o.get("metadata") or {}).get("name", "")


def never_started(o: Mapping[str, Any]) -> Optional[ProcessFailed]:
    s = _status(o)
    if s.get("podUID") is not None or s.get("phase") != "Error" or not s.get("error") or not is_final(o):
        return None
    return ProcessFailed(_name(o), s["error"]["code"], s["error"].get("message", ""))


def exit_of(o: Mapping[str, Any]) -> Exit:
    s = _status(o)
    if s.get("phase") == "Exited" and s.get("exit"):
        e = s["exit"]
        return Exit(e["code"], e.get("signal"), bool(e.get("timedOut")), s.get("endReason"))
    if s.get("error"):
        raise ProcessFailed(_name(o), s["error"]["code"], s["error"].get("message", ""))
    if s.get("endReason"):
        raise EndedWithoutExit(f"sandboxprocess {_name(o)} ended ({s['endReason']}) without an exit code")
    raise SandboxError(f"sandboxprocess {_name(o)} ended without an exit status")


def restart_count(o: Mapping[str, Any]) -> int:
    """``status.restartCount``: runs started after the first (``restart_policy``)."""
    return int(_status(o).get("restartCount") or 0)


def last_exit_of(o: Mapping[str, Any]) -> Optional[Exit]:
    """``status.lastExit``: how the previous run of a restarting process ended (as a container's
    ``lastState.terminated``); ``None`` before its first restart."""
    last = _status(o).get("lastExit")
    if not last:
        return None
    e = last.get("exit") or {}
    return Exit(e.get("code", 0), e.get("signal"), bool(e.get("timedOut")), last.get("endReason"))


def _already_ended(o: Mapping[str, Any]) -> Optional[str]:
    if not is_final(o):
        return None  # also an Error that heals: it may still run
    s = _status(o)
    phase = s.get("phase")
    if phase == "Exited":
        e = s.get("exit")
        if e:
            if e.get("signal") is not None:
                return f"already exited (code {e['code']}, signal {e['signal']})"
            return f"already exited (code {e['code']})"
        if s.get("endReason"):
            return f"already ended ({s['endReason']}) without an exit code"
        return "already ended"
    if phase == "Error":
        err = s.get("error")
        if err:
            return f"already ended: {err['code']}: {err.get('message', '')}"
        return "already ended (phase Error)"
    return None

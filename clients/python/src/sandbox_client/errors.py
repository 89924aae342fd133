"""Typed errors. Every error has ``code``: ``status.error.code`` for a process that could not run
or was lost (``ContainerNotFound``, ``InvalidProcessCwd``, ``StaleProcessHandle``, ...), the API's
``reason`` for a refused request (``Forbidden``, ``Conflict``, ...), else a fixed name per class --
the same codes as the Rust library (``sandbox-client``)."""
from __future__ import annotations

import json
from typing import Optional

from kubernetes.client.exceptions import ApiException


class SandboxError(Exception):
    """Base class; ``code`` is machine-readable, ``str(e)`` is for people."""

    code: str = "Error"

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(SandboxError):
    """A caller's value is unusable; ``field`` names it."""

    code = "InvalidArgument"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ApiError(SandboxError):
    """The Kubernetes API (or the subresource API behind it) refused or failed a request."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{message} ({reason})", code=reason or "Unknown")
        self.status = status
        self.reason = reason

    @property
    def transient(self) -> bool:
        return self.status in (0, 429, 500, 502, 503, 504)


class IdInUse(SandboxError):
    """``start`` with an id that names an object created with a different spec (or by another
    manager): the process it names is not this one."""

    code = "IdInUse"


class ProcessFailed(SandboxError):
    """The process could not run, or was lost: phase ``Error``; ``code`` is ``status.error.code``."""

    def __init__(self, name: str, code: str, message: str) -> None:
        super().__init__(f"sandboxprocess {name} failed: {code}: {message}", code=code)
        self.name = name
        self.message = message


class NotFound(SandboxError):
    code = "NotFound"


class WaitTimeout(SandboxError):
    """A local wait ran out of time; the process was not touched."""

    code = "Timeout"


class NotStarted(WaitTimeout):
    """A call that needs a started process waited its timeout for the start in vain (a missing
    pod, a pod not running yet, no agent). ``code`` is the reason it waits (``PodNotFound``,
    ``PodPending``, ``AgentUnavailable``, ...; ``NotStarted`` when the status gives none);
    ``state`` says it in full (phase, reason, message)."""

    def __init__(self, message: str, reason: Optional[str], state: str) -> None:
        super().__init__(message, code=reason or "NotStarted")
        self.reason = reason
        self.state = state


class ExitedBeforeLog(SandboxError):
    code = "ExitedBeforeLog"


class ExitedBeforeReady(SandboxError):
    code = "ExitedBeforeReady"


class EndedWithoutExit(SandboxError):
    """The process ended without an exit status of its own (stopped before it started)."""

    code = "EndedWithoutExit"


class StreamBroken(SandboxError):
    code = "StreamBroken"


# --- from the API's answers (the Rust crate's `From<kube::Error>`) ---------------------------------


def _status_error(status: int, reason: Optional[str], body: bytes) -> ApiError:
    try:
        s = json.loads(body)
        return ApiError(status, s.get("reason") or reason or "", s.get("message") or "")
    except (ValueError, AttributeError):
        return ApiError(status, reason or "", body.decode("utf-8", "replace")[:300])


def _api_error(e: ApiException) -> ApiError:
    body = e.body if isinstance(e.body, (bytes, str)) else b""
    if isinstance(body, str):
        body = body.encode()
    return _status_error(e.status or 0, e.reason, body or b"")

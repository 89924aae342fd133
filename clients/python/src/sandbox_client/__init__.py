"""Process handles over SandboxProcess objects (``sandbox.dev/v1alpha1``), on the official
Kubernetes Python client: ``start`` -> :class:`Process`; ``wait``, ``wait_for_log``,
``wait_for_port``, ``logs`` with cursors, ``output``, ``kill``, stdin. Every process is a
Kubernetes object: it outlives this program, and any client reattaches by id
(:meth:`Sandbox.get`). The same API and error codes as the Rust crate ``sandbox-client``.

>>> from sandbox_client import Sandbox
>>> sb = Sandbox()                                         # doctest: +SKIP
>>> p = sb.start("web-0", ["sh", "-c", "exit 3"], id="job-1")  # doctest: +SKIP
>>> p.wait().code                                          # doctest: +SKIP
3
"""
from ._attach import Attached
from ._control import Killed
from ._logs import LogEvent
from ._output import LogMatch, Output
from ._process import Process
from ._sandbox import Sandbox
from ._started import describe, start_state
from ._state import (
    Exit,
    exit_of,
    is_final,
    is_ready,
    is_started,
    last_exit_of,
    never_started,
    restart_count,
)
from .errors import (
    ApiError,
    EndedWithoutExit,
    ExitedBeforeLog,
    ExitedBeforeReady,
    IdInUse,
    InvalidArgument,
    NotFound,
    NotStarted,
    ProcessFailed,
    SandboxError,
    StreamBroken,
    WaitTimeout,
)

__all__ = [
    "ApiError", "EndedWithoutExit", "Exit", "ExitedBeforeLog", "ExitedBeforeReady", "IdInUse",
    "InvalidArgument", "Killed", "LogEvent", "LogMatch", "NotFound", "NotStarted", "Output", "Process",
    "ProcessFailed", "Sandbox", "SandboxError", "StreamBroken", "WaitTimeout", "describe",
    "exit_of", "is_final", "is_ready", "is_started", "last_exit_of", "never_started",
    "restart_count", "start_state",
]

"""The handle of one process: its object by name, and the watch every wait is built on (the
Rust crate's ``process`` module and ``process/wait.rs``). The calls of each job are mixed in
by :class:`sandbox_client.Process`."""
from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, cast

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from ._consts import START_TIMEOUT, VERSION
from ._logs import _lines
from ._started import describe, start_state
from ._state import (
    Exit,
    _ready_condition,
    _status,
    exit_of,
    is_final,
    is_ready,
    last_exit_of,
    restart_count,
)
from .errors import (
    ApiError,
    ExitedBeforeReady,
    NotFound,
    NotStarted,
    ProcessFailed,
    SandboxError,
    WaitTimeout,
    _api_error,
)

if TYPE_CHECKING:
    from ._sandbox import Sandbox


class _Handle:
    """The object by name and its waits; holds no connection."""

    def __init__(self, sandbox: Sandbox, name: str) -> None:
        self._sandbox = sandbox
        self.name = name
        self.namespace = sandbox.namespace
        #: How long calls without a timeout of their own (stdin, signal, logs) wait for the
        #: start (seconds; ``None``: for ever). Not started by then: :class:`NotStarted`.
        self.start_timeout: Optional[float] = START_TIMEOUT
        #: Called with (bytes pending, seconds waited) once a stdin write has waited
        #: ``STDIN_STALL`` s without the process taking a byte (the write goes on waiting);
        #: ``None`` logs a warning on the ``sandbox_client`` logger.
        self.on_stdin_stall: Optional[Callable[[int, float], None]] = None
        self._started = False

    def __repr__(self) -> str:
        return f"Process(namespace={self.namespace!r}, name={self.name!r})"

    def _path(self, sub: str) -> str:
        sb = self._sandbox
        return f"{sb.prefix}/namespaces/{self.namespace}/{sb.plural}/{self.name}/{sub}"

    def object(self) -> Dict[str, Any]:
        try:
            return cast(Dict[str, Any], self._sandbox._objects.get_namespaced_custom_object(
                self._sandbox.group, VERSION, self.namespace, self._sandbox.plural, self.name
            ))
        except ApiException as e:
            if e.status == 404:
                raise NotFound(f"{self._sandbox.singular} {self.name} not found") from None
            raise _api_error(e) from None

    def status(self) -> Dict[str, Any]:
        return _status(self.object())

    def restart_count(self) -> int:
        """How often it was restarted (``status.restartCount``, with ``restart_policy``)."""
        return restart_count(self.object())

    def last_exit(self) -> Optional[Exit]:
        """How its previous run ended (``status.lastExit``); ``None`` before a restart.
        ``logs(previous=True)`` reads that run's output."""
        return last_exit_of(self.object())

    def _ensure_started(self, what: str, timeout: Optional[float]) -> None:
        """The one rule of every call that needs a started process: wait for the start within
        ``timeout``; a start that failed raises its error (:class:`ProcessFailed` with its code,
        :class:`EndedWithoutExit`); still waiting then: :class:`NotStarted`, naming why."""
        if self._started:
            return
        try:
            o = self._until(lambda o: start_state(o)[0] != "wait", "start", timeout)
        except NotStarted as e:
            raise NotStarted(f"{self._sandbox.singular} {self.name} has not started after {timeout}s "
                             f"({what} needs a started process): {e.state}", e.reason, e.state) from None
        state, _, err = start_state(o)
        if err is not None:
            raise err
        self._started = state == "started"

    def _state_now(self) -> str:
        try:
            return describe(self.object())
        except NotFound:
            return "the object is gone"
        except SandboxError:
            return ""

    def _timed_out(self, what: str, timeout: Optional[float], state: str) -> WaitTimeout:
        said = f"timed out after {timeout}s waiting for {self._sandbox.singular} {self.name} to {what}"
        return WaitTimeout(f"{said}: {state}" if state else said)

    def _until(self, cond: Callable[[Dict[str, Any]], bool], what: str,
               timeout: Optional[float]) -> Dict[str, Any]:
        """Waits on a watch (relisting when it expires) until ``cond`` holds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        objects = self._sandbox._objects
        selector = f"metadata.name={self.name}"
        failures = 0
        while True:
            try:
                got = cast(Dict[str, Any], objects.list_namespaced_custom_object(
                    self._sandbox.group, VERSION, self.namespace, self._sandbox.plural,
                    field_selector=selector,
                    _request_timeout=30,
                ))
            except (ApiException, Urllib3Error, OSError) as e:
                err = _api_error(e) if isinstance(e, ApiException) else ApiError(0, "Transport", str(e))
                # An API server restart or a cut connection: retried, within the deadline.
                if not err.transient or failures >= 30 or (
                        deadline is not None and time.monotonic() >= deadline):
                    raise err from None
                failures += 1
                time.sleep(min(5.0, 0.2 * failures))
                continue
            failures = 0
            items = got.get("items") or []
            if not items:
                raise NotFound(f"{self._sandbox.singular} {self.name} not found")
            if cond(items[0]):
                return items[0]
            last = items[0]
            rv = got["metadata"]["resourceVersion"]
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if what == "start":
                    state, reason, _ = start_state(last)
                    if state == "wait":
                        raise NotStarted(f"{self._sandbox.singular} {self.name} has not started after {timeout}s: "
                                         f"{describe(last)}", reason, describe(last))
                raise self._timed_out(what, timeout, describe(last))
            # Our own watch request, not kubernetes.watch.Watch: that one starts again by
            # itself when the server ends a watch, so an idle wait would outlive its deadline.
            window = 300 if left is None else max(1, min(300, math.ceil(left)))
            try:
                resp: Any = objects.list_namespaced_custom_object(
                    self._sandbox.group, VERSION, self.namespace, self._sandbox.plural,
                    field_selector=selector,
                    resource_version=rv, watch=True, timeout_seconds=window,
                    _preload_content=False, _request_timeout=(30, window + 30),
                )
                try:
                    for line in _lines(resp):
                        if not line.strip():
                            continue
                        ev = json.loads(line)
                        kind, obj = ev.get("type"), ev.get("object") or {}
                        if kind == "DELETED":
                            raise NotFound(f"{self._sandbox.singular} {self.name} was deleted")
                        if kind == "ERROR":
                            break  # expired (410) and the like: list again
                        if kind in ("ADDED", "MODIFIED"):
                            if cond(obj):
                                return cast(Dict[str, Any], obj)
                            last = obj
                finally:
                    resp.release_conn()
            except ApiException as e:
                if e.status != 410:  # expired: relist
                    raise _api_error(e) from None
            except (OSError, ValueError, Urllib3Error):
                pass  # a cut watch: relist and watch again

    def wait(self, timeout: Optional[float] = None) -> Exit:
        """Waits until the process has ended; how. Phase Error is :class:`ProcessFailed` with
        its code. A timeout (seconds) ends only this wait."""
        return exit_of(self._until(is_final, "exit", timeout))

    def wait_started(self, timeout: Optional[float] = None) -> None:
        """Until the process has started; one that never will raises the start's error, one
        still waiting at the timeout :class:`NotStarted` (its code says why)."""
        self._ensure_started("wait_started", timeout)

    def wait_ready(self, timeout: Optional[float] = None) -> None:
        """Until the declared readiness passed (without one: started)."""
        o = self._until(lambda o: is_ready(o) or is_final(o), "be ready", timeout)
        if is_ready(o):
            return
        s = _status(o)
        if s.get("phase") == "Error" and s.get("error"):
            raise ProcessFailed(self.name, s["error"]["code"], s["error"].get("message", ""))
        c = _ready_condition(o)
        why = f"{c['reason']}: {c.get('message', '')}" if c and c.get("status") != "True" and c.get("reason") else "readiness never passed"
        raise ExitedBeforeReady(f"{self._sandbox.singular} {self.name} ended before it was ready: {why}")

    def delete(self) -> None:
        try:
            self._sandbox._objects.delete_namespaced_custom_object(
                self._sandbox.group, VERSION, self.namespace, self._sandbox.plural, self.name
            )
        except ApiException as e:
            if e.status != 404:
                raise _api_error(e) from None

"""Sandbox (a namespace's SandboxProcesses) and Process (one process's handle)."""
from __future__ import annotations

import base64
import json
import logging
import math
import re
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, cast

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import ReadTimeoutError

from ._apply import apply
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

GROUP = "sandbox.dev"
VERSION = "v1alpha1"
PLURAL = "sandboxprocesses"
SUBRESOURCES = "/apis/subresources.sandbox.dev/v1alpha1"
FIELD_MANAGER = "sandbox-client-python"
STREAMS = ("stdout", "stderr", "both")
# Servers send an empty line after 5 s of silence on a log stream; nothing heard for this long
# means the connection is dead, not the process idle (sandbox_api::wire::LOG_SILENCE_LIMIT).
LOG_SILENCE_LIMIT = 20.0

#: How long a call without a timeout of its own (stdin, signal, logs) waits for the start, by
#: default (``Process.start_timeout``).
START_TIMEOUT = 30.0
#: How long stdin may take nothing before the writer is told (``Process.on_stdin_stall``).
STDIN_STALL = 5.0

log = logging.getLogger("sandbox_client")


# --- values --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exit:
    """How a process ended: the root's exit code (128+n when signal n killed it), the signal,
    whether ``timeoutSeconds`` stopped it, and ``status.endReason``."""

    code: int
    signal: Optional[int]
    timed_out: bool
    end_reason: Optional[str]


@dataclass(frozen=True)
class LogEvent:
    """One event of a process's output. ``type`` is ``data`` (``stream``, ``data`` bytes,
    ``time_nanos``), ``truncated`` (``dropped_bytes``: output dropped by the node's retention cap)
    or ``end`` (``ended``: the process has ended and all its output was read). ``cursor``: resume
    after this event."""

    type: str
    cursor: str
    stream: Optional[str] = None
    data: bytes = b""
    time_nanos: int = 0
    dropped_bytes: int = 0
    ended: bool = False


@dataclass(frozen=True)
class LogMatch:
    stream: str
    line: str
    #: Just after the matched line: ``logs(after=cursor)`` reads on from there.
    cursor: str


@dataclass(frozen=True)
class Output:
    stdout: bytes
    stderr: bytes
    exit: Exit
    #: Some output is missing: dropped by the node's retention cap, or beyond ``max_bytes``.
    truncated: bool


@dataclass(frozen=True)
class Killed:
    """What ``kill`` did: ``stopping`` (``signal``, ``grace_seconds``), ``signalled`` (``signal``)
    or ``already_ended`` (``message`` says how it ended; nothing was sent)."""

    kind: str
    signal: Optional[int] = None
    grace_seconds: Optional[int] = None
    message: str = ""


# --- object helpers (the same rules as the Rust library) -----------------------------------------


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
        raise EndedWithoutExit(f"sandboxprocess {_name(o)} ended ({s['endReason']}) without running")
    raise SandboxError(f"sandboxprocess {_name(o)} ended without an exit status")


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
            return f"already ended ({s['endReason']}) without running"
        return "already ended"
    if phase == "Error":
        err = s.get("error")
        if err:
            return f"already ended: {err['code']}: {err.get('message', '')}"
        return "already ended (phase Error)"
    return None


def _seconds(field: str, value: float, minimum: int) -> int:
    s = math.ceil(value)
    if s < minimum or s > 2**31 - 1:
        raise InvalidArgument(field, f"{value!r} is outside {minimum}s..{2**31 - 1}s")
    return int(s)


# --- cursors -------------------------------------------------------------------------------------


def _parse_cursor(c: str) -> Tuple[Optional[str], int]:
    """``<agent cursor>+<n>``: n bytes into the event after the agent's cursor (the Rust
    library's form; an empty agent part is the beginning)."""
    if c == "":
        raise InvalidArgument("after", "empty cursor")
    agent, plus, n = c.rpartition("+")
    if plus and n.isdigit():
        return (agent or None, int(n))
    return (c, 0)


def _render_cursor(agent: Optional[str], skip: int) -> str:
    if agent is not None and skip == 0:
        return agent
    return f"{agent or ''}+{skip}"


# --- the client ----------------------------------------------------------------------------------


class Sandbox:
    """SandboxProcesses of one namespace. Without ``api_client``: the kubeconfig
    (``$KUBECONFIG``, ``~/.kube/config``; its context's namespace), else in-cluster."""

    def __init__(
        self,
        namespace: Optional[str] = None,
        api_client: Optional[k8s.ApiClient] = None,
        field_manager: str = FIELD_MANAGER,
    ) -> None:
        if api_client is None:
            try:
                k8s_config.load_kube_config()
                if namespace is None:
                    _, ctx = k8s_config.list_kube_config_contexts()
                    namespace = (ctx.get("context") or {}).get("namespace")
            except k8s_config.ConfigException:
                k8s_config.load_incluster_config()
                if namespace is None:
                    try:
                        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
                            namespace = f.read().strip()
                    except OSError:
                        pass
            api_client = k8s.ApiClient()
        self.api_client = api_client
        self.namespace = namespace or "default"
        self.field_manager = field_manager
        self._objects = k8s.CustomObjectsApi(api_client)

    def start(
        self,
        pod: str,
        argv: Sequence[str],
        *,
        id: Optional[str] = None,
        container: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        stdin: bool = False,
        readiness: Optional[Mapping[str, Any]] = None,
        ttl: Optional[float] = None,
        stop_signal: Optional[int] = None,
        grace_period: Optional[float] = None,
        labels: Optional[Mapping[str, str]] = None,
    ) -> "Process":
        """Starts ``argv`` (no shell) in ``pod`` by server-side apply of a SandboxProcess named
        ``id`` (default ``<pod>-<random>``, chosen once per call); returns its handle at once.
        The same ``id`` and arguments again: the same process, never a second one. The same
        ``id`` with other arguments: :class:`IdInUse`. Times are seconds (rounded up)."""
        name = id if id is not None else _generated_name(pod)
        manifest = _manifest(
            self.namespace, name, pod, argv, container, cwd, env, timeout, stdin, readiness,
            ttl, stop_signal, grace_period, labels,
        )
        failures = 0
        while True:
            try:
                # Serialized here: argv and env may hold characters YAML refuses raw.
                apply(self._objects.api_client, GROUP, VERSION, self.namespace, PLURAL, name,
                      manifest, self.field_manager)
                return self.process(name)
            except ApiException as e:
                err = _api_error(e)
                # A retry is safe: the name was fixed before the first attempt.
                if err.transient and failures < 5:
                    failures += 1
                    time.sleep(0.2 * failures)
                    continue
                if err.status == 409 or (err.status == 422 and "immutable" in str(err)):
                    raise IdInUse(
                        f"sandboxprocess {name} already exists with a different spec: {err}"
                    ) from None
                raise err from None

    def process(self, id: str) -> "Process":
        """A handle by name (id), without a request."""
        return Process(self, id)

    def get(self, id: str) -> Optional["Process"]:
        """Reattaches to a process by id; ``None`` if there is no such object."""
        try:
            self._objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, id)
        except ApiException as e:
            if e.status == 404:
                return None
            raise _api_error(e) from None
        return self.process(id)

    def list(self, selector: Optional[str] = None) -> List[Dict[str, Any]]:
        """The namespace's SandboxProcess objects (their status says how each is)."""
        try:
            got = cast(Dict[str, Any], self._objects.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, label_selector=selector
            ))
        except ApiException as e:
            raise _api_error(e) from None
        return list(got.get("items") or [])

    # raw requests to the subresource API

    def _raw(
        self,
        method: str,
        path: str,
        query: Optional[List[Tuple[str, str]]] = None,
        body: Any = None,
        content_type: Optional[str] = None,
        timeout: Union[None, float, Tuple[float, float]] = None,
    ) -> Any:
        headers = {"Accept": "application/json, */*"}
        if content_type:
            headers["Content-Type"] = content_type
        params = self.api_client.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = self.api_client.call_api(*params, _request_timeout=timeout)
        except ApiException as e:
            raise _api_error(e) from None
        except Exception as e:  # urllib3 connection errors
            raise ApiError(0, "Transport", str(e)) from None
        if not 200 <= resp.status < 300:
            raise _status_error(resp.status, resp.reason, resp.read())
        return resp


def _generated_name(pod: str) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    suffix = "".join(secrets.choice(alphabet) for _ in range(5))
    return f"{pod[:240].rstrip('-.')}-{suffix}"


def _manifest(namespace, name, pod, argv, container, cwd, env, timeout, stdin, readiness, ttl,
              stop_signal, grace_period, labels) -> Dict[str, Any]:
    if not pod:
        raise InvalidArgument("pod", "must not be empty")
    argv = list(argv)
    if not argv or not argv[0]:
        raise InvalidArgument("argv", "needs at least the executable (argv[0], not empty)")
    spec: Dict[str, Any] = {"podName": pod, "command": argv}
    if container is not None:
        spec["container"] = container
    if cwd is not None:
        spec["workingDir"] = cwd
    if env:
        spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if timeout is not None:
        spec["timeoutSeconds"] = _seconds("timeout", timeout, 1)
    if stdin:
        spec["stdin"] = True
    if readiness is not None:
        spec["readiness"] = dict(readiness)
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = _seconds("ttl", ttl, 0)
    if stop_signal is not None:
        if not 1 <= stop_signal <= 64:
            raise InvalidArgument("stop_signal", f"{stop_signal} is not 1-64")
        spec["stopSignal"] = stop_signal
    if grace_period is not None:
        spec["terminationGracePeriodSeconds"] = _seconds("grace_period", grace_period, 0)
    meta: Dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SandboxProcess", "metadata": meta,
            "spec": spec}


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


class _Reader:
    """One process's output across connections: resumed by cursor after a cut follow, read on
    after a byte limit, and cursors inside an event (``<cursor>+<n>``) honoured."""

    def __init__(self, p: "Process", follow: bool, after: Optional[str], stream: str,
                 limit_bytes: Optional[int]) -> None:
        if stream not in STREAMS:
            raise InvalidArgument("stream", f"{stream!r} is not one of {', '.join(STREAMS)}")
        if limit_bytes is not None and limit_bytes < 1:
            raise InvalidArgument("limit_bytes", "must be at least 1")
        self.p = p
        self.follow = follow
        self.stream = stream
        self.agent, self.skip = _parse_cursor(after) if after is not None else (None, 0)
        self.budget = limit_bytes
        self.done = False
        self.resp: Any = None
        self.silence = LOG_SILENCE_LIMIT

    def cancel(self) -> None:
        """Ends the read from another thread (a local deadline): the open response is closed
        and no reconnect follows, so neither a connection nor the agent's follow slot is held."""
        self.done = True
        r = self.resp
        conn = getattr(getattr(r, "response", None), "connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            # A shutdown, not close(): close() waits for the reading thread's lock, i.e. for
            # the next byte. The plain socket's shutdown (SSLSocket's would drop the TLS state
            # under the reader): its blocked read returns at once and it sees `done`.
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def position(self) -> str:
        return _render_cursor(self.agent, self.skip)

    def events(self) -> Iterator[Tuple[str, Dict[str, Any], Tuple[Optional[str], int]]]:
        """(type, fields, start) per event; ``start`` is the position before a data event."""
        broken = unavailable = 0
        while not self.done:
            # Positions count every event of both streams (a "+n" cursor is n bytes into the
            # next event after the cursor, whatever its stream): a filtered read asks for both
            # and filters here, so it steps over the events a position must count.
            filter_here = self.stream != "both"
            q = [("stream", "both" if filter_here else self.stream)]
            if self.follow:
                q.append(("follow", "true"))
            if self.agent is not None:
                q.append(("since", self.agent))
            if self.budget is not None:
                q.append(("maxBytes", str(max(1, self.budget + self.skip))))
            try:
                resp = self.p._sandbox._raw("GET", self.p._path("log"), q, timeout=(30, self.silence))
                self.resp = resp
            except ApiError as e:
                # A follow outlives a moment without an agent or API server (a restart, a rollout).
                if self.follow and e.transient and unavailable < 60:
                    unavailable += 1
                    time.sleep(0.5)
                    continue
                raise
            more = False
            try:
                for line in _lines(resp.response):
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    broken = unavailable = 0  # progress: each outage gets its own retries
                    t = ev.get("type")
                    if t == "data":
                        data = base64.b64decode(ev["data"])
                        if self.skip:
                            if self.skip > len(data):
                                raise InvalidArgument("after", f"{self.position()} points past its event")
                            data = data[self.skip:]
                        start = (self.agent, self.skip)
                        self.agent, self.skip = ev["cursor"], 0
                        if (self.stream != "both" and ev["stream"].lower() != self.stream) or not data:
                            continue
                        cursor = ev["cursor"]
                        if self.budget is not None:
                            if len(data) >= self.budget:
                                cut = self.budget
                                if cut < len(data):
                                    data = data[:cut]
                                    self.agent, self.skip = start[0], start[1] + cut
                                    cursor = self.position()
                                self.budget = 0
                                self.done = True
                                yield "data", {"stream": ev["stream"].lower(), "data": data,
                                               "time_nanos": ev.get("tsNanos", 0), "cursor": cursor}, start
                                yield "end", {"cursor": self.position(), "ended": False}, start
                                return
                            self.budget -= len(data)
                        yield "data", {"stream": ev["stream"].lower(), "data": data,
                                       "time_nanos": ev.get("tsNanos", 0), "cursor": cursor}, start
                    elif t == "truncated":
                        self.agent, self.skip = ev["cursor"], 0
                        yield "truncated", {"dropped_bytes": ev.get("droppedBytes", 0),
                                            "cursor": ev["cursor"]}, (None, 0)
                    elif t == "more":
                        self.agent, self.skip = ev["cursor"], 0
                        more = True
                        break
                    elif t == "end":
                        self.agent, self.skip = ev["cursor"], 0
                        self.done = True
                        yield "end", {"cursor": ev["cursor"], "ended": ev.get("record") is not None}, (None, 0)
                        return
            except (ReadTimeoutError, TimeoutError):
                # Silent for LOG_SILENCE_LIMIT: a dead connection (a peer gone without FIN or
                # RST). A follow reads again from its cursor, not counted as a failure.
                if self.done:
                    return  # cancelled
                if not self.follow:
                    raise StreamBroken(f"reading the output of sandboxprocess {self.p.name}: "
                                       f"nothing heard for {self.silence} s") from None
                continue
            except (OSError, ValueError, Urllib3Error) as e:
                if self.done:
                    return  # cancelled
                if isinstance(e, json.JSONDecodeError) or not self.follow or broken >= 5:
                    raise StreamBroken(f"reading the output of sandboxprocess {self.p.name}: {e}") from None
                broken += 1
                time.sleep(0.5)
                continue
            finally:
                resp.response.release_conn()
            if more:
                continue
            if self.done:
                return  # cancelled
            # Cut without an end event: resume a follow from the last cursor.
            if self.follow and broken < 5:
                broken += 1
                time.sleep(0.5)
                continue
            raise StreamBroken(
                f"reading the output of sandboxprocess {self.p.name}: the connection ended before the end of the output"
            )


def _lines(resp) -> Iterator[bytes]:
    """NDJSON lines as they arrive (chunk by chunk, not at the end of the response)."""
    buf = b""
    for chunk in resp.stream(None, decode_content=True):
        buf += chunk
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            yield buf[:i]
            buf = buf[i + 1:]
    if buf:
        yield buf


class _Lines:
    """Complete lines per stream, as ``readiness.logMatch`` sees them."""

    MAX_LINE = 64 << 10

    def __init__(self) -> None:
        self.partial = {"stdout": b"", "stderr": b""}

    def feed(self, stream: str, data: bytes, match: Callable[[bytes], bool]) -> Optional[Tuple[int, bytes]]:
        start = 0
        while True:
            i = data.find(b"\n", start)
            if i < 0:
                break
            # The last 64 KiB of a long line, and a "\r" kept, as readiness.logMatch does.
            line = (self.partial[stream] + data[start:i])[-self.MAX_LINE:]
            self.partial[stream] = b""
            if match(line):
                return i + 1, line
            start = i + 1
        self.partial[stream] = (self.partial[stream] + data[start:])[-self.MAX_LINE:]
        return None

    def gap(self) -> None:
        """Output was dropped: a partial line is not completed by what follows the gap."""
        self.partial = {"stdout": b"", "stderr": b""}

    def finish(self, match: Callable[[bytes], bool]) -> Optional[Tuple[str, bytes]]:
        for s in ("stdout", "stderr"):
            line, self.partial[s] = self.partial[s], b""
            if line and match(line):
                return s, line
        return None


class Process:
    """The handle of one SandboxProcess. Holds no connection: dropping it does nothing to the
    process, and ``Sandbox.get(name)`` reattaches from anywhere."""

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
        return f"{SUBRESOURCES}/namespaces/{self.namespace}/{PLURAL}/{self.name}/{sub}"

    def object(self) -> Dict[str, Any]:
        try:
            return cast(Dict[str, Any], self._sandbox._objects.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.name
            ))
        except ApiException as e:
            if e.status == 404:
                raise NotFound(f"sandboxprocess {self.name} not found") from None
            raise _api_error(e) from None

    def status(self) -> Dict[str, Any]:
        return _status(self.object())

    def _ensure_started(self, what: str, timeout: Optional[float]) -> None:
        """The one rule of every call that needs a started process: wait for the start within
        ``timeout``; a start that failed raises its error (:class:`ProcessFailed` with its code,
        :class:`EndedWithoutExit`); still waiting then: :class:`NotStarted`, naming why."""
        if self._started:
            return
        try:
            o = self._until(lambda o: start_state(o)[0] != "wait", "start", timeout)
        except NotStarted as e:
            raise NotStarted(f"sandboxprocess {self.name} has not started after {timeout}s "
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
        said = f"timed out after {timeout}s waiting for sandboxprocess {self.name} to {what}"
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
                    GROUP, VERSION, self.namespace, PLURAL, field_selector=selector,
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
                raise NotFound(f"sandboxprocess {self.name} not found")
            if cond(items[0]):
                return items[0]
            last = items[0]
            rv = got["metadata"]["resourceVersion"]
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if what == "start":
                    state, reason, _ = start_state(last)
                    if state == "wait":
                        raise NotStarted(f"sandboxprocess {self.name} has not started after {timeout}s: "
                                         f"{describe(last)}", reason, describe(last))
                raise self._timed_out(what, timeout, describe(last))
            # Our own watch request, not kubernetes.watch.Watch: that one starts again by
            # itself when the server ends a watch, so an idle wait would outlive its deadline.
            window = 300 if left is None else max(1, min(300, math.ceil(left)))
            try:
                resp: Any = objects.list_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, field_selector=selector,
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
                            raise NotFound(f"sandboxprocess {self.name} was deleted")
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
        raise ExitedBeforeReady(f"sandboxprocess {self.name} ended before it was ready: {why}")

    def _explain(self, e: SandboxError) -> SandboxError:
        if not isinstance(e, (ApiError, StreamBroken)):
            return e
        try:
            return never_started(self.object()) or e
        except SandboxError:
            return e

    def logs(self, follow: bool = False, after: Optional[str] = None, stream: str = "both",
             limit_bytes: Optional[int] = None) -> Iterator[LogEvent]:
        """Its output as events, from ``after`` (or the beginning); with ``follow``, until the
        process ends. The last event is ``end``."""
        r = _Reader(self, follow, after, stream, limit_bytes)
        self._ensure_started("logs", self.start_timeout)
        try:
            for t, f, _ in r.events():
                yield LogEvent(type=t, **f)
        except SandboxError as e:
            raise self._explain(e) from None

    def wait_for_log(self, pattern: str, stream: str = "both", after: Optional[str] = None,
                     timeout: Optional[float] = None) -> LogMatch:
        """Waits until a complete line of its output (after ``after``) matches ``pattern`` (a
        Python regular expression, searched in the line); the line and a cursor just after it.
        Ending first is :class:`ExitedBeforeLog`; ``timeout`` is :class:`WaitTimeout`."""
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise InvalidArgument("pattern", str(e)) from None
        deadline = None if timeout is None else time.monotonic() + timeout
        matches = lambda line: rx.search(line.decode("utf-8", "replace")) is not None  # noqa: E731
        lines = _Lines()
        r = _Reader(self, True, after, stream, None)
        self._ensure_started("wait_for_log", timeout)
        result: List[LogMatch] = []

        def scan() -> None:
            for t, f, start in r.events():
                if t == "data":
                    hit = lines.feed(f["stream"], f["data"], matches)
                    if hit:
                        end, line = hit
                        cursor = f["cursor"] if end == len(f["data"]) else _render_cursor(start[0], start[1] + end)
                        result.append(LogMatch(f["stream"], line.decode("utf-8", "replace"), cursor))
                        return
                elif t == "truncated":
                    lines.gap()
                elif t == "end":
                    last = lines.finish(matches)
                    if last:
                        result.append(LogMatch(last[0], last[1].decode("utf-8", "replace"), f["cursor"]))
                        return
                    raise ExitedBeforeLog(f"sandboxprocess {self.name} ended before its output matched {pattern!r}")

        _with_deadline(scan, deadline, lambda: self._timed_out(
            "log a matching line", timeout, self._state_now()), r.cancel)
        return result[0]

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

    def output(self, max_bytes: Optional[int] = None, timeout: Optional[float] = None) -> Output:
        """Waits for the end; its whole retained output and how it ended. ``max_bytes`` bounds
        what is kept per stream (beyond it: ``truncated``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._ensure_started("output", timeout)
        bufs = {"stdout": bytearray(), "stderr": bytearray()}
        truncated = [False]
        cap = max_bytes if max_bytes is not None else float("inf")

        reader = _Reader(self, True, None, "both", None)

        def collect() -> None:
            try:
                for t, f, _ in reader.events():
                    if t == "data":
                        b = bufs[f["stream"]]
                        data = f["data"]
                        room = int(max(0, cap - len(b))) if cap != float("inf") else len(data)
                        if len(data) > room:
                            truncated[0] = True
                        b.extend(data[:room])
                    elif t == "truncated":
                        truncated[0] = True
            except SandboxError as e:
                raise self._explain(e) from None

        _with_deadline(collect, deadline, lambda: self._timed_out(
            "end", timeout, self._state_now()), reader.cancel)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        done = self._until(is_final, "end", left)
        return Output(bytes(bufs["stdout"]), bytes(bufs["stderr"]), exit_of(done), truncated[0])

    def kill(self, signal: Optional[int] = None) -> Killed:
        """``None``: stop it (its stop signal, SIGKILL after the grace period). ``n``: send
        signal n once to its process group. An ended process is left alone."""
        said = _already_ended(self.object())
        if said:
            return Killed("already_ended", message=said)
        if signal is None:
            try:
                o = cast(Dict[str, Any], self._sandbox._objects.patch_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, self.name, {"spec": {"stop": True}},
                    _content_type="application/merge-patch+json",
                ))
            except ApiException as e:
                raise _api_error(e) from None
            spec = o.get("spec") or {}
            return Killed("stopping", signal=spec.get("stopSignal"),
                          grace_seconds=spec.get("terminationGracePeriodSeconds"))
        self.signal(signal)
        return Killed("signalled", signal=signal)

    def signal(self, n: int) -> Dict[str, Any]:
        """Sends signal n (1-64) once to its process group; the agent's record after it."""
        if not 1 <= n <= 64:
            raise InvalidArgument("signal", f"{n} is not 1-64")
        self._ensure_started("signal", self.start_timeout)
        resp = self._sandbox._raw("POST", self._path("signal"), body={"signal": n},
                                  content_type="application/json", timeout=30)
        return json.loads(resp.read())

    def stdin_state(self) -> Dict[str, Any]:
        """``{"bytes": B, "closed": C}``: where the next write starts."""
        self._ensure_started("stdin_state", self.start_timeout)
        return json.loads(self._sandbox._raw("GET", self._path("stdin"), timeout=30).read())

    def _write(self, offset: int, data: bytes, close: bool) -> Dict[str, Any]:
        resp = self._sandbox._raw(
            "POST", self._path("stdin"),
            [("offset", str(offset)), ("close", "true" if close else "false")],
            body=bytes(data), content_type="application/octet-stream", timeout=30,
        )
        return json.loads(resp.read())

    def _send(self, offset: int, data: bytes, close: bool) -> int:
        start, end = offset, offset + len(data)
        failures, idle = 0, 0.005
        since, told = time.monotonic(), False
        while True:
            try:
                s = self._write(offset, data[offset - start:], close)
            except ApiError as e:
                if e.status == 409 and "StdinConflict" in str(e):
                    # Bytes over what stdin took there differ (another writer): its own code.
                    raise ApiError(409, "StdinConflict", str(e)) from None
                if e.status == 409 and "StdinOffsetMismatch" in str(e):
                    now = self.stdin_state()
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

    def delete(self) -> None:
        try:
            self._sandbox._objects.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.name
            )
        except ApiException as e:
            if e.status != 404:
                raise _api_error(e) from None


def _with_deadline(fn: Callable[[], None], deadline: Optional[float],
                   timeout_error: Callable[[], SandboxError],
                   cancel: Optional[Callable[[], None]] = None) -> None:
    """Runs ``fn`` in a thread and gives up at ``deadline`` (a blocked read cannot be
    interrupted otherwise); ``cancel`` then closes what the thread reads, so it ends too."""
    if deadline is None:
        fn()
        return
    import threading

    box: List[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # handed to the caller
            box.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    if t.is_alive():
        if cancel is not None:
            cancel()
        raise timeout_error()
    if box:
        raise box[0]

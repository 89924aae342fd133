"""A process's output through its handle: the event stream, a wait for a matching line, and the
whole output at the end (the Rust crate's ``process/output.rs``)."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional

from ._cursor import _render_cursor
from ._handle import _Handle
from ._logs import LogEvent, _Lines, _Reader
from ._state import Exit, exit_of, is_final, never_started
from .errors import ApiError, ExitedBeforeLog, InvalidArgument, SandboxError, StreamBroken


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


class _Output(_Handle):
    def _explain(self, e: SandboxError) -> SandboxError:
        if not isinstance(e, (ApiError, StreamBroken)):
            return e
        try:
            return never_started(self.object()) or e
        except SandboxError:
            return e

    def logs(self, follow: bool = False, after: Optional[str] = None, stream: str = "both",
             limit_bytes: Optional[int] = None, previous: bool = False) -> Iterator[LogEvent]:
        """Its output as events, from ``after`` (or the beginning); with ``follow``, until the
        process ends. The last event is ``end``. ``previous``: only the output of the previous
        run of a restarting process (``restart_policy``), not with ``follow`` or ``after``."""
        r = _Reader(self, follow, after, stream, limit_bytes, previous)
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

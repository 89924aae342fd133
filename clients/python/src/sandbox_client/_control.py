"""Signals: a stop through ``spec.stop``, or one signal through the subresource (the Rust
crate's ``process/control.rs``)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Optional, cast

from kubernetes.client.exceptions import ApiException

from ._consts import PROCESS, VERSION
from ._handle import _Handle
from ._state import _already_ended
from .errors import InvalidArgument, _api_error


@dataclass(frozen=True)
class Killed:
    """What ``kill`` did: ``stopping`` (``signal``, ``grace_seconds``), ``signalled`` (``signal``)
    or ``already_ended`` (``message`` says how it ended; nothing was sent)."""

    kind: str
    signal: Optional[int] = None
    grace_seconds: Optional[int] = None
    message: str = ""


class _Control(_Handle):
    def kill(self, signal: Optional[int] = None) -> Killed:
        """``None``: stop it (its stop signal, SIGKILL after the grace period). ``n``: send
        signal n once to its process group. An ended process is left alone."""
        said = _already_ended(self.object())
        if said:
            return Killed("already_ended", message=said)
        if signal is None and self._sandbox.door == PROCESS:
            # No spec.stop to set: the stop sequence through the signal subresource.
            self._ensure_started("kill", self.start_timeout)
            self._sandbox._raw("POST", self._path("signal"), body={"stop": True},
                               content_type="application/json", timeout=30)
            spec = self.object().get("spec") or {}
            return Killed("stopping", signal=spec.get("stopSignal", 15),
                          grace_seconds=spec.get("terminationGracePeriodSeconds", 5))
        if signal is None:
            try:
                o = cast(Dict[str, Any], self._sandbox._objects.patch_namespaced_custom_object(
                    self._sandbox.group, VERSION, self.namespace, self._sandbox.plural, self.name,
                    {"spec": {"stop": True}},
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

"""The SandboxProcess a start applies (the Rust crate's ``start``)."""
from __future__ import annotations

import math
import secrets
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ._consts import GROUP, VERSION
from .errors import InvalidArgument


def _generated_name(pod: str) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    suffix = "".join(secrets.choice(alphabet) for _ in range(5))
    return f"{pod[:240].rstrip('-.')}-{suffix}"


# A Pod's bounds for ids (int32, clear of (uid_t)-1) and the API's for supplementalGroups.
MAX_ID = 2**31 - 1
MAX_SUPPLEMENTAL_GROUPS = 64
_SECURITY_FIELDS = ("runAsUser", "runAsGroup", "supplementalGroups", "runAsNonRoot")

User = Union[int, Tuple[int, Optional[int]]]


def _manifest(namespace, name, pod, argv, container, cwd, env, timeout, stdin, readiness, ttl,
              stop_signal, grace_period, labels, *, tty: bool = False,
              terminal: Optional[Tuple[int, int]] = None, security_context=None,
              user=None, restart_policy: Optional[str] = None) -> Dict[str, Any]:
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
    if tty:
        spec["tty"] = True
    if terminal is not None:
        spec["terminal"] = _terminal(tty, terminal)
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
    sc = _security_context(security_context, user)
    if sc is not None:
        spec["securityContext"] = sc
    if _restart_policy(restart_policy, stdin or tty) != "Never":
        spec["restartPolicy"] = restart_policy
    # No finalizer: the operator adds it to a process it shows running (docs/concepts/writes.md).
    meta: Dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SandboxProcess", "metadata": meta,
            "spec": spec}


# sandbox_api::wire::RestartPolicy's names, and the message of the API's rule
# (sandbox_api::wire_rules::RESTART_WITH_STDIN; cases in clients/conformance/restart.json).
RESTART_POLICIES = ("Never", "OnFailure", "Always")
RESTART_WITH_STDIN = "restartPolicy must be Never with stdin or tty"


def _restart_policy(policy: Optional[str], takes_input: bool) -> str:
    """``spec.restartPolicy`` (default ``Never``), checked as the API checks it: a process that
    restarts takes no input (stdin or tty)."""
    if policy is None:
        return "Never"
    if policy not in RESTART_POLICIES:
        raise InvalidArgument("restartPolicy", f"{policy!r} is not one of {', '.join(RESTART_POLICIES)}")
    if policy != "Never" and takes_input:
        raise InvalidArgument("restartPolicy", RESTART_WITH_STDIN)
    return policy


# The API's bounds of a window size (sandbox_api::wire::MAX_TERMINAL_ROWS, _COLS).
MAX_ROWS, MAX_COLS = 1000, 10000


def _size(prefix: str, rows: int, cols: int) -> Dict[str, int]:
    """``{"rows", "cols"}`` within the API's bounds; a bad one is named ``<prefix>rows``."""
    for field, v, top in (("rows", rows, MAX_ROWS), ("cols", cols, MAX_COLS)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            raise InvalidArgument(prefix + field, f"{v!r}: must be 1-{top}")
    return {"rows": rows, "cols": cols}


def _terminal(tty: bool, terminal: Tuple[int, int]) -> Dict[str, int]:
    """``spec.terminal``, checked as the API server would: only with ``tty``."""
    if not tty:
        raise InvalidArgument("terminal", "requires tty")
    rows, cols = terminal
    return _size("terminal.", rows, cols)


def _seconds(field: str, value: float, minimum: int) -> int:
    s = math.ceil(value)
    if s < minimum or s > 2**31 - 1:
        raise InvalidArgument(field, f"{value!r} is outside {minimum}s..{2**31 - 1}s")
    return int(s)


def _security_context(sc: Optional[Mapping[str, Any]], user: Optional[User]
                      ) -> Optional[Dict[str, Any]]:
    """``spec.securityContext`` (the Rust crate's ``Start::security_context`` and ``user``),
    checked as the API checks it; an error names its field."""
    if sc is None and user is None:
        return None
    out: Dict[str, Any] = dict(sc or {})
    for k in out:
        if k not in _SECURITY_FIELDS:
            raise InvalidArgument(f"securityContext.{k}",
                                  f"unknown; one of {', '.join(_SECURITY_FIELDS)}")
    if user is not None:
        uid, gid = user if isinstance(user, tuple) else (user, None)
        out["runAsUser"] = uid
        out.pop("runAsGroup", None)
        if gid is not None:
            out["runAsGroup"] = gid
    for k in ("runAsUser", "runAsGroup"):
        if k in out:
            _id(f"securityContext.{k}", out[k])
    groups = list(out.get("supplementalGroups") or [])
    for i, g in enumerate(groups):
        _id(f"securityContext.supplementalGroups[{i}]", g)
    if len(groups) > MAX_SUPPLEMENTAL_GROUPS:
        raise InvalidArgument("securityContext.supplementalGroups",
                              f"more than {MAX_SUPPLEMENTAL_GROUPS} groups")
    if groups:
        out["supplementalGroups"] = groups
    else:
        out.pop("supplementalGroups", None)
    non_root = out.get("runAsNonRoot")
    if non_root is not None and not isinstance(non_root, bool):
        raise InvalidArgument("securityContext.runAsNonRoot", f"{non_root!r} is not a bool")
    if non_root and out.get("runAsUser") == 0:
        raise InvalidArgument("securityContext.runAsUser", "0 (root) contradicts runAsNonRoot")
    return out


def _id(field: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_ID:
        raise InvalidArgument(field, f"{v!r}: must be 0-{MAX_ID}")

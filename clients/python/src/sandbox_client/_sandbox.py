"""Sandbox: the SandboxProcesses of one namespace (the Rust crate's ``Sandbox``, in its lib.rs)."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, cast

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from ._apply import apply
from ._consts import DOORS, FIELD_MANAGER, PROCESS, SANDBOX_PROCESS, VERSION
from ._process import Process
from ._start import User, _generated_name, _manifest
from .errors import ApiError, IdInUse, InvalidArgument, _api_error, _status_error


class Sandbox:
    """SandboxProcesses of one namespace. Without ``api_client``: the kubeconfig
    (``$KUBECONFIG``, ``~/.kube/config``; its context's namespace), else in-cluster.
    ``door="Process"``: start and find Processes served from the nodes instead
    (``processes.sandbox.dev``: no etcd write per command), with the same handle."""

    def __init__(
        self,
        namespace: Optional[str] = None,
        api_client: Optional[k8s.ApiClient] = None,
        field_manager: str = FIELD_MANAGER,
        door: str = SANDBOX_PROCESS,
    ) -> None:
        if door not in DOORS:
            raise InvalidArgument("door", f"{door!r} is not one of {sorted(DOORS)}")
        self.door = door
        self.group, self.plural, self.prefix, self.singular = DOORS[door]
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
        tty: bool = False,
        terminal: Optional[Tuple[int, int]] = None,
        readiness: Optional[Mapping[str, Any]] = None,
        ttl: Optional[float] = None,
        stop_signal: Optional[int] = None,
        grace_period: Optional[float] = None,
        labels: Optional[Mapping[str, str]] = None,
        security_context: Optional[Mapping[str, Any]] = None,
        user: Optional[User] = None,
        restart_policy: Optional[str] = None,
    ) -> "Process":
        """Starts ``argv`` (no shell) in ``pod`` by server-side apply of a SandboxProcess named
        ``id`` (default ``<pod>-<random>``, chosen once per call); returns its handle at once.
        ``tty``: on a terminal (one output stream, stdin always open), of ``terminal`` =
        ``(rows, cols)`` (default 24x80), resized with ``Process.resize``.
        ``restart_policy``: ``Never`` (default), ``OnFailure`` or ``Always`` (``spec.restartPolicy``:
        run again after a back-off, as the kubelet restarts a container; not with ``stdin`` or
        ``tty``); ``Process.restart_count``, ``Process.last_exit`` and ``logs(previous=True)``.
        The same ``id`` and arguments again: the same process, never a second one. The same
        ``id`` with other arguments: :class:`IdInUse`. Times are seconds (rounded up)."""
        name = id if id is not None else _generated_name(pod)
        manifest = _manifest(
            self.namespace, name, pod, argv, container, cwd, env, timeout, stdin, readiness,
            ttl, stop_signal, grace_period, labels, tty=tty, terminal=terminal,
            security_context=security_context, user=user, restart_policy=restart_policy,
        )
        failures = 0
        while True:
            try:
                self._create(name, manifest)
                return self.process(name)
            except ApiException as e:
                err = _api_error(e)
                # A retry is safe: the name was fixed before the first attempt.
                if err.transient and failures < 5:
                    failures += 1
                    time.sleep(0.2 * failures)
                    continue
                # A Process's create also answers 409 for other refusals (no pod matches the
                # selector, the agent's): only AlreadyExists is the name.
                held = err.status == 409 and (self.door != PROCESS or err.reason == "AlreadyExists")
                if held or (err.status == 422 and "immutable" in str(err)):
                    raise IdInUse(
                        f"{self.singular} {name} already exists with a different spec: {err}"
                    ) from None
                raise err from None

    def _create(self, name: str, manifest: Dict[str, Any]) -> None:
        if self.door == PROCESS:
            # A Process is created (the same name and spec again: the one there; another spec:
            # 409); its node's agent holds it.
            body = dict(manifest, apiVersion=f"{self.group}/{VERSION}", kind="Process")
            self._objects.create_namespaced_custom_object(
                self.group, VERSION, self.namespace, self.plural, body)
            return
        # Serialized here: argv and env may hold characters YAML refuses raw.
        apply(self._objects.api_client, self.group, VERSION, self.namespace, self.plural, name,
              manifest, self.field_manager)

    def process(self, id: str) -> "Process":
        """A handle by name (id), without a request."""
        return Process(self, id)

    def get(self, id: str) -> Optional["Process"]:
        """Reattaches to a process by id; ``None`` if there is no such object."""
        try:
            self._objects.get_namespaced_custom_object(
                self.group, VERSION, self.namespace, self.plural, id)
        except ApiException as e:
            if e.status == 404:
                return None
            raise _api_error(e) from None
        return self.process(id)

    def list(self, selector: Optional[str] = None) -> List[Dict[str, Any]]:
        """The namespace's SandboxProcess objects (their status says how each is); its Process
        objects through ``door="Process"``."""
        try:
            got = cast(Dict[str, Any], self._objects.list_namespaced_custom_object(
                self.group, VERSION, self.namespace, self.plural, label_selector=selector
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

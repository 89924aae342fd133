"""Names and defaults shared by the package's modules (the Rust crate keeps them beside their
users; here one leaf module keeps the others free of import cycles)."""
import logging

GROUP = "sandbox.dev"
VERSION = "v1alpha1"
PLURAL = "sandboxprocesses"
SUBRESOURCES = "/apis/subresources.sandbox.dev/v1alpha1"
#: The two doors to a process (the Rust crate's ``Door``): a SandboxProcess object in etcd (the
#: default), or a Process served from the nodes (no etcd write per command, docs/concepts/processes.md).
#: Each: (API group, plural, the path its subresources are under, kind, what messages call one).
SANDBOX_PROCESS = "SandboxProcess"
PROCESS = "Process"
DOORS = {
    SANDBOX_PROCESS: ("sandbox.dev", "sandboxprocesses", SUBRESOURCES, "sandboxprocess"),
    PROCESS: ("processes.sandbox.dev", "processes", "/apis/processes.sandbox.dev/v1alpha1",
              "process"),
}
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

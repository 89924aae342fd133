"""Process: one process's handle, its calls grouped by job as in the Rust crate's ``process``
folder (waits in :mod:`._handle`, output, port, signals, stdin, terminal, attach)."""
from __future__ import annotations

from ._attach import _Attach
from ._control import _Control
from ._output import _Output
from ._port import _Port
from ._stdin import _Stdin
from ._terminal import _Terminal


class Process(_Output, _Port, _Control, _Stdin, _Terminal, _Attach):
    """The handle of one SandboxProcess. Holds no connection: dropping it does nothing to the
    process, and ``Sandbox.get(name)`` reattaches from anywhere."""

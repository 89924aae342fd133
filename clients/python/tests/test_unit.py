"""Pure logic: cursors, line assembly, manifests, status reading (no cluster)."""
import io
import json

import pytest

from sandbox_client import ApiError, EndedWithoutExit, InvalidArgument, ProcessFailed, exit_of, is_ready
from sandbox_client._cursor import _parse_cursor, _render_cursor
from sandbox_client._logs import _Lines
from sandbox_client._start import _manifest


def test_lines_split_at_newlines_only():
    lines = _Lines()
    assert lines.feed("stdout", b"par", lambda _: True) is None, "a partial line is not matched"
    assert lines.feed("stdout", b"tial\r\nnext\nrest", lambda x: x == b"next") == (11, b"next")
    assert _Lines().feed("stdout", b"crlf\r\n", lambda x: x == b"crlf\r") == (6, b"crlf\r"), "\\r kept"
    lines = _Lines()
    lines.feed("stdout", b"ab", lambda _: False)
    assert lines.feed("stderr", b"cd\n", lambda x: x == b"cd") == (3, b"cd")
    assert lines.finish(lambda x: x == b"ab") == ("stdout", b"ab")


def test_manifest_has_only_what_was_set():
    m = _manifest("ns", "p1", "web", ["sh", "-c", "x"], None, None, None, None, False, None,
                  None, None, None, None)
    assert m["spec"] == {"podName": "web", "command": ["sh", "-c", "x"]}
    m = _manifest("ns", "p1", "web", ["x"], "c", "/tmp", {"A": "b=c"}, 1.5, True, None, 0,
                  None, None, {"team": "a"})
    assert m["spec"]["timeoutSeconds"] == 2
    assert m["spec"]["ttlSecondsAfterFinished"] == 0
    assert m["spec"]["env"] == [{"name": "A", "value": "b=c"}]
    assert m["metadata"]["labels"] == {"team": "a"}
    for bad, field in [((["x"], 0), "timeout"), (([], None), "argv")]:
        with pytest.raises(InvalidArgument) as e:
            _manifest("ns", "n", "w", bad[0], None, None, None, bad[1], False, None, None, None,
                      None, None)
        assert e.value.field == field and e.value.code == "InvalidArgument"


def test_a_terminal_at_start_is_tty_and_its_size():
    m = _manifest("ns", "p1", "web", ["sh", "-i"], None, None, None, None, False, None, None,
                  None, None, None, tty=True, terminal=(30, 100))
    assert m["spec"]["tty"] is True and m["spec"]["terminal"] == {"rows": 30, "cols": 100}
    m = _manifest("ns", "p1", "web", ["sh"], None, None, None, None, False, None, None, None,
                  None, None, tty=True)
    assert "terminal" not in m["spec"], "the API's default size"
    for tty, size, field in [(False, (24, 80), "terminal"), (True, (0, 80), "terminal.rows"),
                             (True, (24, 10001), "terminal.cols")]:
        with pytest.raises(InvalidArgument) as e:
            _manifest("ns", "n", "w", ["sh"], None, None, None, None, False, None, None, None,
                      None, None, tty=tty, terminal=size)
        assert e.value.field == field, e.value


def test_resize_posts_rows_and_cols_once_started_and_refuses_a_bad_size():
    from sandbox_client._process import Process

    class FakeSandbox:
        namespace = "ns"
        prefix, plural = "/apis/subresources.sandbox.dev/v1alpha1", "sandboxprocesses"
        sent: list = []

        def _raw(self, method, path, query=None, body=None, content_type=None, timeout=None):
            self.sent.append((method, path, body))
            return io.BytesIO(json.dumps(body).encode())

    sb = FakeSandbox()
    p = Process(sb, "p")  # type: ignore[arg-type]
    for rows, cols, field in [(0, 80, "rows"), (1001, 80, "rows"), (24, 0, "cols"),
                              (24, 10001, "cols"), (24, True, "cols")]:
        with pytest.raises(InvalidArgument) as e:
            p.resize(rows, cols)
        assert e.value.field == field, (rows, cols, e.value)
    assert sb.sent == [], "a bad size never leaves the client"
    waited = []  # the start's rule itself is test_conformance_start's
    p._ensure_started = lambda what, timeout: waited.append(what)  # type: ignore[method-assign]
    assert p.resize(50, 120) == {"rows": 50, "cols": 120}
    assert waited == ["resize"]
    assert sb.sent == [("POST", "/apis/subresources.sandbox.dev/v1alpha1/namespaces/ns/"
                                "sandboxprocesses/p/resize", {"rows": 50, "cols": 120})]
def test_security_context_as_set_and_checked():
    def sc(**kw):
        m = _manifest("ns", "n", "w", ["id"], None, None, None, None, False, None, None, None,
                      None, None, **kw)
        return m["spec"].get("securityContext")

    assert sc() is None
    assert sc(user=(1000, 1000)) == {"runAsUser": 1000, "runAsGroup": 1000}
    # user sets the uid and the gid it was given, keeps the rest (as the Rust crate's user()).
    assert sc(security_context={"supplementalGroups": [2000], "runAsNonRoot": True,
                                "runAsGroup": 5}, user=7) == {
        "runAsUser": 7, "supplementalGroups": [2000], "runAsNonRoot": True}
    for kw, field in [
        ({"user": 2**31}, "securityContext.runAsUser"),
        ({"user": (1, -1)}, "securityContext.runAsGroup"),
        ({"security_context": {"supplementalGroups": [1, -1]}},
         "securityContext.supplementalGroups[1]"),
        ({"security_context": {"supplementalGroups": [1] * 65}},
         "securityContext.supplementalGroups"),
        ({"security_context": {"runAsUser": 0, "runAsNonRoot": True}},
         "securityContext.runAsUser"),
        ({"security_context": {"runAsNonRoot": "yes"}}, "securityContext.runAsNonRoot"),
        ({"security_context": {"runAsUsr": 1}}, "securityContext.runAsUsr"),
    ]:
        with pytest.raises(InvalidArgument) as e:
            sc(**kw)
        assert e.value.field == field, (kw, e.value)


def obj(status, readiness=False):
    spec = {"podName": "w", "command": ["x"]}
    if readiness:
        spec["readiness"] = {"tcpSocket": {"port": 80}}
    return {"metadata": {"name": "p"}, "spec": spec, "status": status}


def test_exits_and_errors_carry_the_status():
    e = exit_of(obj({"phase": "Exited", "exit": {"code": 137, "signal": 9}, "endReason": "Signaled"}))
    assert (e.code, e.signal, e.timed_out, e.end_reason) == (137, 9, False, "Signaled")
    with pytest.raises(ProcessFailed) as err:
        exit_of(obj({"phase": "Error", "error": {"code": "ContainerNotFound", "message": "no x"}}))
    assert err.value.code == "ContainerNotFound"
    with pytest.raises(EndedWithoutExit):
        exit_of(obj({"phase": "Exited", "endReason": "Stopped"}))


def test_ready_only_if_it_was_ever_ready():
    cond = lambda s: [{"type": "Ready", "status": s, "reason": "r", "message": ""}]  # noqa: E731
    assert not is_ready(obj({"phase": "Exited", "exit": {"code": 0}, "conditions": cond("True")}, True))
    assert is_ready(obj({"phase": "Exited", "exit": {"code": 0}, "readyAt": "t", "conditions": cond("True")}, True))
    assert is_ready(obj({"phase": "Running", "conditions": cond("True")}))


# One sample of each class of Unicode scalar values (as in the Rust crate's `apply` tests).
SCALAR_CLASSES = {
    "NUL and C0": "\0\x01\x07\x08\t\n\x0b\x0c\r\x1b\x1f",
    "ASCII syntax": " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "DEL": "x\x7fy",
    "C1": "\x80\x81\x9b\x9f",
    "NEL": "a\x85b",
    "Latin-1": "\xa0\xe9\xff",
    "LS and PS": "a\u2028b\u2029c",
    "below the surrogates": "\ud7ff",
    "private use": "\ue000\uf8ff",
    "BOM": "\ufeffx",
    "replacement": "\ufffd",
    "noncharacters": "\ufffe\uffff",
    "astral": "\U00010000\U0001f600\U0001d11e",
    "last scalars": "\U000f0000\U0010fffd\U0010ffff",
}


def test_apply_body_survives_a_yaml_decoder_for_every_scalar_class():
    import json

    import yaml

    from sandbox_client._apply import apply_body, yaml_keeps

    value = {"spec": {"command": list(SCALAR_CLASSES.values())}, "all": "".join(SCALAR_CLASSES.values())}
    body = apply_body(value)
    assert all(yaml_keeps(c) for c in body.decode("utf-8"))
    assert yaml.safe_load(body.decode("utf-8")) == value
    assert json.loads(body) == value
    for name, s in SCALAR_CLASSES.items():
        assert yaml.safe_load(apply_body({"s": s}).decode("utf-8"))["s"] == s, name
    # What the kubernetes client would send (json.dumps: astral characters as escaped surrogate
    # pairs, which go-yaml refuses and PyYAML decodes to two surrogates): the test can fail.
    for s in ["\U0001f600", "\U00010000", "\U0010ffff"]:
        try:
            ok = yaml.safe_load(json.dumps({"s": s}))["s"] == s
        except yaml.YAMLError:
            ok = False
        assert not ok, repr(s)

def test_a_silent_log_connection_is_read_again_from_the_cursor():
    """A server that answers with one event and then goes silent without closing (a peer gone
    without FIN or RST): the follow reads again from its cursor, each byte once."""
    import base64
    import json
    import socket
    import threading
    import time

    from kubernetes import client as k8s

    from sandbox_client import Sandbox
    from sandbox_client._logs import _Reader
    from sandbox_client._process import Process

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    asked, held = [], []

    def data(d, c):
        return json.dumps({"type": "data", "stream": "Stdout", "data": base64.b64encode(d).decode(),
                           "tsNanos": 1, "cursor": c})

    def serve():
        bodies = [[data(b"a", "c1"), ""], [data(b"b", "c2"), json.dumps({"type": "end", "cursor": "c3"})]]
        for i, lines in enumerate(bodies):
            s, _ = srv.accept()
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += s.recv(1)
            asked.append(head.split(b"\r\n")[0].decode())
            out = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n"
            for line in lines:
                b = line.encode() + b"\n"
                out += b"%x\r\n%s\r\n" % (len(b), b)
            if i == 1:
                out += b"0\r\n\r\n"
            s.sendall(out)
            held.append(s)  # never closed: silent, not cut

    threading.Thread(target=serve, daemon=True).start()
    cfg = k8s.Configuration()
    cfg.host = "http://127.0.0.1:%d" % srv.getsockname()[1]
    sb = Sandbox("ns", api_client=k8s.ApiClient(cfg))
    r = _Reader(Process(sb, "p"), True, None, "both", None)
    r.silence = 0.5
    t0 = time.monotonic()
    got = []
    reader = threading.Thread(target=lambda: got.extend(
        (t, f.get("data"), f["cursor"]) for t, f, _ in r.events()), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), f"the follow hung on a silent connection after {got}"
    assert got == [("data", b"a", "c1"), ("data", b"b", "c2"), ("end", None, "c3")]
    assert time.monotonic() - t0 >= 0.5
    assert "since=" not in asked[0] and "since=c1" in asked[1]

def _conformance(name: str):
    """clients/conformance/NAME: next to the package in the repository, or copied next to
    the package's directory (e2e/suites/clients copies both)."""
    import json
    import pathlib
    here = pathlib.Path(__file__).resolve().parents[1]
    for base in (here.parent / "conformance", here / "conformance"):
        if (base / name).exists():
            return json.loads((base / name).read_text())
    raise AssertionError(f"clients/conformance/{name} not found near {here}")


def test_conformance_start():
    """The cases the Rust library's unit tests run too (clients/CONFORMANCE.md)."""
    from sandbox_client import describe, is_final, start_state
    cases = _conformance("start.json")["cases"]
    assert len(cases) >= 10, "the table lost its cases"
    for case in cases:
        o = {"metadata": {"name": "p"}, "spec": {"podName": "w", "command": ["x"], **case.get("spec", {})}}
        if case.get("status") is not None:
            o["status"] = case["status"]
        want = case["expect"]
        assert is_final(o) == want["final"], case["name"]
        state, code, err = start_state(o)
        assert (state, code) == (want["start"], want["code"]), case["name"]
        assert (err is not None) == (state == "failed"), case["name"]
        said = describe(o)
        for part in want["describe"]:
            assert part in said, (case["name"], said, part)


def test_conformance_status():
    """Process state from the status: the cases the Rust library's unit tests run too
    (clients/conformance/status.json; AgentUnavailable is not final, so wait() goes on)."""
    from sandbox_client import SandboxError, is_final, is_started, never_started
    cases = _conformance("status.json")["cases"]
    assert len(cases) >= 20, "the table lost its cases"
    for case in cases:
        name, want = case["name"], case["expect"]
        o = {"metadata": {"name": "p"}, "spec": {"podName": "w", "command": ["x"], **case.get("spec", {})}}
        if case.get("status") is not None:
            o["status"] = case["status"]
        assert is_final(o) == want["final"], name
        assert is_started(o) == want["started"], name
        assert is_ready(o) == want["ready"], name
        never = never_started(o)
        assert (never.code if never else None) == want["neverStarted"], name
        exit = want["exit"]
        if exit is not None and "error" not in exit:
            e = exit_of(o)
            got = {"code": e.code, "signal": e.signal, "timedOut": e.timed_out, "endReason": e.end_reason}
            assert got == exit, name
            continue
        with pytest.raises(SandboxError) as err:
            exit_of(o)
        if exit is None:  # no outcome yet: neither a process code nor an end
            assert type(err.value) is SandboxError, name
        else:
            assert err.value.code == exit["error"], name


def test_conformance_cursor():
    """The cursor forms the Rust library's unit tests run too (clients/conformance/cursor.json)."""
    doc = _conformance("cursor.json")
    assert len(doc["parse"]) >= 8 and len(doc["plus"]) >= 2, "the table lost its cases"
    for case in doc["parse"]:
        c = case["cursor"]
        if case.get("error"):
            with pytest.raises(InvalidArgument):
                _parse_cursor(c)
            continue
        assert _parse_cursor(c) == (case["agent"], case["skip"]), c
        assert _render_cursor(*_parse_cursor(c)) == case["render"], c
    for case in doc["plus"]:
        agent, skip = _parse_cursor(case["cursor"])
        assert _render_cursor(agent, skip + case["plus"]) == case["render"], case


def test_not_started_is_a_timeout_named_by_its_reason():
    from sandbox_client import NotStarted, WaitTimeout
    e = NotStarted("sandboxprocess p has not started after 2s: phase Pending, PodNotFound: x",
                   "PodNotFound", "phase Pending, PodNotFound: x")
    assert isinstance(e, WaitTimeout) and e.code == "PodNotFound" and e.reason == "PodNotFound"
    assert NotStarted("m", None, "no status yet").code == "NotStarted"


def test_a_stdin_stall_is_told_once_and_the_write_goes_on(monkeypatch):
    from sandbox_client import _stdin
    from sandbox_client._process import Process

    class FakeSandbox:  # only the namespace; _write is replaced below
        namespace = "ns"

    p = Process(FakeSandbox(), "p")  # type: ignore[arg-type]
    clock = [0.0]
    monkeypatch.setattr(_stdin.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(_stdin.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    taken = iter([0] * 40 + [3])  # nothing for a while, then all of it
    monkeypatch.setattr(p, "_write", lambda off, data, close, writer=None: {"bytes": next(taken), "closed": False})
    told = []
    p.on_stdin_stall = lambda pending, waited: told.append((pending, waited >= _stdin.STDIN_STALL))
    assert p._send(0, b"abc", False) == 3
    assert told == [(3, True)], told


def test_conformance_channel():
    """The attach's framing and final statuses (clients/conformance/channel.json), as the Rust
    library's sandbox_api::channel runs them."""
    from sandbox_client import _attach

    doc = _conformance("channel.json")
    assert len(doc["frames"]) >= 4 and len(doc["status"]) >= 4, "the table lost its cases"
    for case in doc["frames"]:
        if case["kind"] == "stdin":
            got = _attach.frame(_attach.STDIN, case["data"].encode())
        elif case["kind"] == "cursor":
            got = _attach.frame(_attach.CURSOR, case["data"].encode())
        elif case["kind"] == "resize":
            got = _attach.resize_frame(case["rows"], case["cols"])
        else:
            got = _attach.frame(_attach.CLOSE, bytes([_attach.STDIN]))
        assert got.hex() == case["wire_hex"], case
    for case in doc["status"]:
        data = json.dumps(case["status"]).encode()
        if "exit" in case:
            assert _attach.read_status(data) == case["exit"], case
        else:
            with pytest.raises(ApiError) as e:
                _attach.read_status(data)
            assert case["error"] in str(e.value), case
            assert _attach.transient(data) == case["transient"], case


def test_conformance_terminal():
    """Terminal sizes at start and on a resize: the cases the Rust library's unit tests run too
    (clients/conformance/terminal.json)."""
    from sandbox_client._process import Process

    doc = _conformance("terminal.json")
    assert len(doc["start"]) >= 8 and len(doc["resize"]) >= 5, "the table lost its cases"
    for case in doc["start"]:
        size = tuple(case["terminal"]) if case["terminal"] is not None else None
        try:
            m = _manifest("ns", "n", "w", ["sh"], None, None, None, None, False, None, None,
                          None, None, None, tty=case["tty"], terminal=size)
        except InvalidArgument as e:
            assert e.field == case.get("error"), (case, e)
            continue
        assert "error" not in case, case
        for key in ("tty", "terminal"):
            assert m["spec"].get(key) == case["spec"].get(key), case

    class FakeSandbox:
        namespace = "ns"
        prefix, plural = "/apis/subresources.sandbox.dev/v1alpha1", "sandboxprocesses"

        def _raw(self, method, path, query=None, body=None, content_type=None, timeout=None):
            return io.BytesIO(json.dumps(body).encode())

    p = Process(FakeSandbox(), "p")  # type: ignore[arg-type]
    p._ensure_started = lambda what, timeout: None  # type: ignore[method-assign]
    for case in doc["resize"]:
        try:
            assert p.resize(case["rows"], case["cols"]) == {"rows": case["rows"],
                                                            "cols": case["cols"]}, case
            assert case["error"] is None, case
        except InvalidArgument as e:
            assert e.field == case["error"], (case, e)


def test_conformance_create():
    """the metadata every start sends: no finalizer (clients/conformance/create.json); the
    operator adds its own to a process it shows running"""
    m = _manifest("ns", "n", "w", ["sh"], None, None, None, None, False, None, None, None, None, None)
    assert m["metadata"].get("finalizers") == _conformance("create.json")["metadata"]["finalizers"]
    assert "finalizers" not in m["metadata"]


def test_conformance_restart():
    """restartPolicy at start, previous in the log request, restarts in the status: the cases
    the Rust library's unit tests run too (clients/conformance/restart.json)."""
    from sandbox_client import is_final, last_exit_of, restart_count, start_state
    from sandbox_client._logs import _Reader

    doc = _conformance("restart.json")
    assert len(doc["start"]) >= 8 and len(doc["logs"]) >= 6 and len(doc["status"]) >= 4, \
        "the table lost its cases"
    for case in doc["start"]:
        try:
            m = _manifest("ns", "n", "w", ["sh"], None, None, None, None, case["stdin"], None,
                          None, None, None, None, tty=case["tty"],
                          restart_policy=case["restartPolicy"])
        except InvalidArgument as e:
            assert e.field == case.get("error"), (case, e)
            if "message" in case:
                assert str(e) == f"{e.field}: {case['message']}", (case, e)
            continue
        assert "error" not in case, case
        for key in ("restartPolicy", "stdin", "tty"):
            assert m["spec"].get(key) == case["spec"].get(key), case
    for case in doc["logs"]:
        try:
            r = _Reader(None, case.get("follow", False), case.get("after"), "both",  # type: ignore[arg-type]
                        case.get("limitBytes"), case["previous"])
        except InvalidArgument as e:
            assert e.field == case.get("error"), (case, e)
            continue
        assert "error" not in case, case
        assert sorted(r._query()) == sorted(tuple(q) for q in case["query"]), case
    for case in doc["status"]:
        o = {"metadata": {"name": "p"}, "spec": {"podName": "w", "command": ["x"], **case.get("spec", {})},
             "status": case["status"]}
        want = case["expect"]
        assert is_final(o) == want["final"], case["name"]
        assert start_state(o)[0] == want["start"], case["name"]
        assert restart_count(o) == want["restartCount"], case["name"]
        e = last_exit_of(o)
        got = None if e is None else {"code": e.code, "signal": e.signal, "timedOut": e.timed_out,
                                      "endReason": e.end_reason}
        assert got == want["lastExit"], case["name"]

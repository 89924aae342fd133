"""Pure logic: cursors, line assembly, manifests, status reading (no cluster)."""
import pytest

from sandbox_client import EndedWithoutExit, InvalidArgument, ProcessFailed, exit_of, is_ready
from sandbox_client._client import _Lines, _manifest, _parse_cursor, _render_cursor


def test_cursors_round_trip():
    for c in ["c1f.10.abcdef012345", "c1f.10.abcdef012345+7", "+3"]:
        assert _render_cursor(*_parse_cursor(c)) == c
    assert _parse_cursor("+3") == (None, 3)
    assert _render_cursor(*_parse_cursor("c1.2.x+0")) == "c1.2.x"
    with pytest.raises(InvalidArgument):
        _parse_cursor("")


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


def _conformance(name: str):
    """clients/conformance/NAME: next to the package in the repository, or copied next to
    the package's directory (e2e/clients copies both)."""
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


def test_not_started_is_a_timeout_named_by_its_reason():
    from sandbox_client import NotStarted, WaitTimeout
    e = NotStarted("sandboxprocess p has not started after 2s: phase Pending, PodNotFound: x",
                   "PodNotFound", "phase Pending, PodNotFound: x")
    assert isinstance(e, WaitTimeout) and e.code == "PodNotFound" and e.reason == "PodNotFound"
    assert NotStarted("m", None, "no status yet").code == "NotStarted"


def test_a_stdin_stall_is_told_once_and_the_write_goes_on(monkeypatch):
    from sandbox_client import _client
    from sandbox_client._client import Process

    class FakeSandbox:  # only the namespace; _write is replaced below
        namespace = "ns"

    p = Process(FakeSandbox(), "p")  # type: ignore[arg-type]
    clock = [0.0]
    monkeypatch.setattr(_client.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(_client.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    taken = iter([0] * 40 + [3])  # nothing for a while, then all of it
    monkeypatch.setattr(p, "_write", lambda off, data, close: {"bytes": next(taken), "closed": False})
    told = []
    p.on_stdin_stall = lambda pending, waited: told.append((pending, waited >= _client.STDIN_STALL))
    assert p._send(0, b"abc", False) == 3
    assert told == [(3, True)], told

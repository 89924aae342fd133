"""The handle API against the real cluster: e2e/suites/clients runs this with SPO_NS (a namespace with a
running pod SPO_POD of the busybox workload image) and the kubeconfig in the environment. The
same scenarios as the Rust library's tests (client/tests/cluster.rs)."""
import os
import time

import pytest

from sandbox_client import (
    ExitedBeforeLog,
    ExitedBeforeReady,
    IdInUse,
    InvalidArgument,
    ProcessFailed,
    Sandbox,
    WaitTimeout,
)

MIN = 60


@pytest.fixture(scope="module")
def sb():
    ns = os.environ.get("SPO_NS")
    assert ns, "SPO_NS is not set (run through e2e/suites/clients)"
    return Sandbox(namespace=ns)


@pytest.fixture(scope="module")
def pod():
    pod = os.environ.get("SPO_POD")
    assert pod, "SPO_POD is not set (run through e2e/suites/clients)"
    return pod


def read_all(p, after=None):
    out = b""
    for ev in p.logs(follow=True, after=after):
        assert ev.type != "truncated", "unexpected gap"
        if ev.type == "data":
            out += ev.data
        elif ev.type == "end":
            assert ev.ended, "a follow ends with the process's end"
    return out.decode()


def test_start_and_wait_gives_the_exit_code(sb, pod):
    p = sb.start(pod, ["sh", "-c", "echo out; echo err >&2; exit 7"], id="py-exit")
    e = p.wait(timeout=MIN)
    assert (e.code, e.signal, e.timed_out, e.end_reason) == (7, None, False, "Exited")
    out = p.output(timeout=MIN)
    assert (out.stdout, out.stderr, out.truncated) == (b"out\n", b"err\n", False)
    p.delete()


def test_wait_for_log_then_logs_after_its_cursor_neither_repeat_nor_skip(sb, pod):
    # The matched line and what follows it arrive in one write: the cursor points inside it.
    # A stderr line first: a cursor made while reading stdout only must still count it.
    script = "echo warn >&2; sleep 0.2; printf 'one\\nready on 8080\\nafter-1\\n'; sleep 1; echo after-2; printf tail"
    p = sb.start(pod, ["sh", "-c", script], id="py-log")
    m = p.wait_for_log(r"^ready on [0-9]+$", stream="stdout", timeout=MIN)
    assert (m.line, m.stream) == ("ready on 8080", "stdout")
    after = read_all(p, m.cursor)
    assert after == "after-1\nafter-2\ntail"
    whole = read_all(p)
    assert whole == "warn\none\nready on 8080\n" + after
    filtered = b"".join(ev.data for ev in p.logs(after=m.cursor, stream="stdout") if ev.type == "data")
    assert filtered.decode() == after, "filtered read after the cursor"
    m2 = p.wait_for_log("^after", stream="stdout", after=m.cursor, timeout=MIN)
    assert m2.line == "after-1"
    assert p.wait_for_log("^tail$", after=m2.cursor, timeout=MIN).line == "tail"
    with pytest.raises(ExitedBeforeLog) as e:
        p.wait_for_log("never", timeout=MIN)
    assert e.value.code == "ExitedBeforeLog"
    # limit_bytes cuts inside an event; reading on from its cursor continues exactly there.
    evs = list(p.logs(limit_bytes=6))
    assert b"".join(ev.data for ev in evs if ev.type == "data") == b"warn\no"
    assert evs[-1].type == "end" and not evs[-1].ended
    assert "warn\no" + read_all(p, evs[-1].cursor) == whole
    p.delete()


def test_wait_for_port_sees_a_server_on_the_pods_loopback(sb, pod):
    script = ("mkdir -p /tmp/py-www && echo hi > /tmp/py-www/index.html && sleep 2 && "
              "exec httpd -f -p 127.0.0.1:18090 -h /tmp/py-www")
    p = sb.start(pod, ["sh", "-c", script], id="py-port")
    t0 = time.monotonic()
    p.wait_for_port(18090, timeout=MIN)
    assert time.monotonic() - t0 >= 1.5, "ready before it listened"
    p.wait_for_port(18090, http_path="/index.html", timeout=MIN)
    with pytest.raises(WaitTimeout) as e:
        p.wait_for_port(18091, timeout=2)
    assert e.value.code == "Timeout"
    assert p.status()["phase"] == "Running"
    p.kill()
    p.wait(timeout=MIN)
    with pytest.raises(ExitedBeforeReady) as e:
        p.wait_for_port(18090)
    assert e.value.code == "ExitedBeforeReady"
    p.delete()


def test_kill_with_a_signal_is_128_plus_n(sb, pod):
    p = sb.start(pod, ["sleep", "300"], id="py-kill")
    p.wait_started(timeout=MIN)
    # Local deadlines end the waits, not the process.
    with pytest.raises(WaitTimeout):
        p.wait_for_log("never", timeout=2)
    with pytest.raises(WaitTimeout):
        p.output(timeout=2)
    assert p.status()["phase"] == "Running"
    assert p.kill(10).kind == "signalled"
    e = p.wait(timeout=MIN)
    assert (e.code, e.signal) == (138, 10)
    assert p.kill(9).kind == "already_ended"
    p.delete()


def test_a_second_client_reattaches_by_id(sb, pod):
    first = Sandbox(namespace=sb.namespace)
    first.start(pod, ["sh", "-c", "sleep 2; echo done; exit 4"], id="py-reattach")
    del first
    second = Sandbox(namespace=sb.namespace)
    p = second.get("py-reattach")
    assert p is not None
    assert p.wait(timeout=MIN).code == 4
    assert p.output(timeout=MIN).stdout == b"done\n"
    assert second.get("py-no-such-id") is None
    p.delete()


def test_starting_twice_with_one_id_is_one_process(sb, pod):
    def start():
        return sb.start(pod, ["sh", "-c", "echo started; sleep 2"], id="py-idem")

    a = start()
    uid = a.object()["metadata"]["uid"]
    b = start()
    assert b.object()["metadata"]["uid"] == uid
    a.wait_started(timeout=MIN)
    start()
    assert b.output(timeout=MIN).stdout == b"started\n", "ran once"
    with pytest.raises(IdInUse) as e:
        sb.start(pod, ["sh", "-c", "echo other"], id="py-idem")
    assert e.value.code == "IdInUse"
    assert [o["metadata"]["name"] for o in sb.list()].count("py-idem") == 1
    a.delete()


def test_output_of_a_process_over_the_retention_is_truncated(sb, pod):
    p = sb.start(pod, ["sh", "-c", "head -c 73400320 /dev/zero | tr '\\000' a; echo END"], id="py-huge")
    out = p.output(max_bytes=1 << 20, timeout=240)
    assert out.truncated
    assert len(out.stdout) == 1 << 20
    assert out.exit.code == 0
    p.delete()


def _wait_and_output_fail_with(p, code):
    """Both ways of waiting raise the start's error with its code."""
    for wait in (p.wait, p.output):
        with pytest.raises(ProcessFailed) as e:
            wait(timeout=MIN)
        assert e.value.code == code, (wait.__name__, e.value)


def test_errors_carry_the_status_code(sb, pod):
    p = sb.start(pod, ["true"], container="nope", id="py-nocontainer")
    _wait_and_output_fail_with(p, "ContainerNotFound")
    p.delete()
    p = sb.start(pod, ["ls"], cwd="/no/such/dir", id="py-badcwd")
    with pytest.raises(ProcessFailed) as e:
        p.wait(timeout=MIN)
    assert e.value.code == "InvalidProcessCwd"
    p.delete()
    # A user the container (root here) cannot hand out: root under runAsNonRoot.
    p = sb.start(pod, ["id", "-u"], security_context={"runAsNonRoot": True}, id="py-nonroot")
    _wait_and_output_fail_with(p, "UserNotPermitted")
    p.delete()
    # One it can: uid 1000.
    p = sb.start(pod, ["id", "-u"], user=(1000, 1000), id="py-as1000")
    assert p.output(timeout=MIN).stdout == b"1000\n"
    p.delete()
    with pytest.raises(InvalidArgument) as e:
        sb.start(pod, ["x"], timeout=0)
    assert e.value.field == "timeout"


def test_stdin_goes_in_once_and_closes(sb, pod):
    p = sb.start(pod, ["sh", "-c", "wc -c; exit 3"], stdin=True, id="py-stdin")
    p.wait_started(timeout=MIN)
    assert p.send_stdin(b"x" * 300_000) == 300_000
    p.close_stdin()
    out = p.output(timeout=MIN)
    assert out.stdout.decode().strip() == "300000"
    assert out.exit.code == 3
    p.delete()


def test_attach_json_rpc_echo_round_trip_and_exit_code(sb, pod):
    """issue 30: the streaming attach carries stdin and output on one WebSocket through the API
    server; the exit code ends it, and a second attach from the first one's cursor goes on."""
    script = 'while read -r l; do echo "{\\"result\\":$l}"; done; exit 4'
    p = sb.start(pod, ["sh", "-c", script], stdin=True, id="py-attach")
    a = p.attach(stdin=True)
    events = a.events()
    got = b""
    for i in range(5):
        a.send(f"{i}\n".encode())
        want = f'{{"result":{i}}}\n'.encode()
        while want not in got:
            kind, data = next(events)
            assert kind == "stdout", (kind, data)
            got += data
    cursor = a.resume_cursor()
    a.detach()
    b = p.attach(stdin=True, since=cursor)
    b.send(b"5\n")
    b.close_stdin()
    rest = b""
    for kind, data in b.events():
        if kind == "exit":
            assert data == 4
            break
        rest += data
    assert got + rest == b"".join(f'{{"result":{i}}}\n'.encode() for i in range(6))
    p.delete()


def test_stdin_right_after_the_start_waits_for_it(sb, pod):
    """issue 35: start(pod, [...], stdin=True) then at once send_stdin works (no 400)."""
    p = sb.start(pod, ["cat"], stdin=True, id="py-stdin-at-once")
    assert p.send_stdin(b"abc\n") == 4
    p.close_stdin()
    out = p.output(timeout=MIN)
    assert (out.stdout, out.exit.code) == (b"abc\n", 0)
    p.delete()


def test_calls_on_a_process_that_cannot_start_raise_the_start_error(sb, pod):
    from sandbox_client import NotStarted
    p = sb.start("no-such-pod", ["cat"], stdin=True, id="py-no-pod")
    p.start_timeout = 3
    calls = {
        "send_stdin": lambda: p.send_stdin(b"abc\n"),
        "signal": lambda: p.signal(15),
        "logs": lambda: next(iter(p.logs())),
        "wait_for_port": lambda: p.wait_for_port(80, timeout=3),
    }
    for call, fn in calls.items():
        with pytest.raises(NotStarted) as e:
            fn()
        assert e.value.code == "PodNotFound", (call, str(e.value))
        assert "phase Pending" in str(e.value) and "no-such-pod" in str(e.value), (call, str(e.value))
    with pytest.raises(WaitTimeout) as t:
        p.wait(timeout=2)
    assert t.value.code == "Timeout" and "PodNotFound" in str(t.value), str(t.value)
    p.delete()

    p = sb.start(pod, ["cat"], stdin=True, container="nope", id="py-no-container")
    for fn in (lambda: p.send_stdin(b"x"), lambda: p.signal(9), p.close_stdin):
        with pytest.raises(ProcessFailed) as f:
            fn()
        assert f.value.code == "ContainerNotFound", str(f.value)
    p.delete()


def test_a_stdin_writer_is_told_when_the_process_does_not_read(sb, pod):
    import threading
    p = sb.start(pod, ["sleep", "60"], stdin=True, id="py-deaf")
    told = []
    p.on_stdin_stall = lambda pending, waited: told.append(pending)
    # More than the pipe holds (1 MiB): the rest waits for a reader that never comes.
    t = threading.Thread(target=lambda: p.send_stdin(b"\0" * (4 << 20)), daemon=True)
    t.start()
    t.join(8)
    assert t.is_alive(), "the write ended although nothing reads"
    assert len(told) == 1 and told[0] > 0, told
    p.kill(9)
    p.delete()


def test_a_process_restarts_and_its_previous_run_is_read(sb, pod):
    from sandbox_client import is_final, restart_count
    # Always: again after exit 0 too, each run's pid in its output.
    p = sb.start(pod, ["sh", "-c", "echo run-$$"], restart_policy="Always", id="py-restart")
    o = p._until(lambda o: restart_count(o) >= 1, "restart", 90)  # 10 s of back-off first
    assert not is_final(o), "a restarting process is not final"
    last = p.last_exit()
    assert last is not None and (last.code, last.end_reason) == (0, "Exited"), last
    assert p.restart_count() >= 1
    previous = b"".join(e.data for e in p.logs(previous=True) if e.type == "data").decode()
    assert previous.startswith("run-") and len(previous.splitlines()) == 1, previous
    everything = b"".join(e.data for e in p.logs() if e.type == "data").decode()
    assert previous.strip() in everything.splitlines(), everything
    with pytest.raises(InvalidArgument) as e:
        list(p.logs(previous=True, follow=True))
    assert e.value.field == "previous"
    p.kill()  # ends it for good, also during a back-off
    p._until(is_final, "end", MIN)
    assert p.restart_count() >= 1, "the count is kept"
    p.delete()
    with pytest.raises(InvalidArgument) as e:
        sb.start(pod, ["cat"], stdin=True, restart_policy="OnFailure", id="py-restart-stdin")
    assert e.value.field == "restartPolicy"


def test_attach_goes_on_across_an_agent_restart_and_no_send_is_lost(sb, pod):
    """issue 47: with the node's agent pod deleted between sends, every ``send`` returns only
    once its bytes are taken (none is lost, none raises the WebSocket library's error), and the
    output is read on by a new connection from its cursor: nothing lost, nothing repeated."""
    import threading

    from kubernetes import client as k8s

    script = 'while read -r l; do echo "got:$l"; done; exit 6'
    p = sb.start(pod, ["sh", "-c", script], stdin=True, id="py-attach-agent")
    a = p.attach(stdin=True)
    got = []

    def read():
        for ev in a.events():
            got.append(ev)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ns = os.environ.get("SPO_NAMESPACE", "sandbox-system")
    core = k8s.CoreV1Api(sb.api_client)
    sel = "app.kubernetes.io/component=agent"
    lines = [f"line-{i}" for i in range(8)]
    for i, line in enumerate(lines):
        a.send(f"{line}\n".encode())
        if i == 2:
            for agent in core.list_namespaced_pod(ns, label_selector=sel).items:
                core.delete_namespaced_pod(agent.metadata.name, ns)
        time.sleep(1)
    assert p.stdin_state()["bytes"] == sum(len(f"{l}\n") for l in lines)
    a.close_stdin()
    reader.join(2 * MIN)
    assert not reader.is_alive(), got
    out = b"".join(d for kind, d in got if kind in ("stdout", "stderr"))
    assert out == b"".join(f"got:{l}\n".encode() for l in lines), out
    assert got[-1] == ("exit", 6), got[-3:]
    p.delete()


def test_the_process_door_has_the_same_handle(sb, pod):
    # Processes served from the nodes (no etcd write per command), through the same handle.
    ps = Sandbox(namespace=sb.namespace, door="Process")
    p = ps.start(pod, ["sh", "-c", "echo out; echo err >&2; exit 7"], id="py-door")
    again = ps.start(pod, ["sh", "-c", "echo out; echo err >&2; exit 7"], id="py-door")
    assert again.object()["metadata"]["uid"] == p.object()["metadata"]["uid"]
    with pytest.raises(IdInUse):
        ps.start(pod, ["true"], id="py-door")
    e = p.wait(timeout=MIN)
    assert (e.code, e.signal) == (7, None)
    out = p.output(timeout=MIN)
    assert (out.stdout, out.stderr) == (b"out\n", b"err\n")
    assert any(o["metadata"]["name"] == "py-door" for o in ps.list())
    assert sb.get("py-door") is None  # not a SandboxProcess
    cat = ps.start(pod, ["cat"], stdin=True, id="py-door-cat")
    cat.send_stdin(b"typed\n")
    cat.close_stdin()
    assert cat.wait(timeout=MIN).code == 0
    assert cat.output(timeout=MIN).stdout == b"typed\n"
    sleeper = ps.start(pod, ["sleep", "300"], id="py-door-stop")
    sleeper.wait_started(timeout=MIN)
    k = ps.get("py-door-stop").kill()
    assert (k.kind, k.signal) == ("stopping", 15)
    assert sleeper.wait(timeout=MIN).signal == 15
    for h in (p, cat, sleeper):
        h.delete()
    assert ps.get("py-door") is None
    with pytest.raises(InvalidArgument):
        Sandbox(namespace=sb.namespace, door="Nope")

"""One node agent over many short processes, in waves (e2e/benches/agentwaves; issue 49).

Each wave starts N `true` processes through the agent's own API (as the operator does: a start
answers with the record once the process runs or has ended), waits until all are final, reads
the agent's RSS and heap with the N records present, forgets them all (as the operator does once
their objects are gone), and reads RSS and heap again. The agent is one process for the whole
run; its CPU (utime + stime) per wave is divided by N. Prints a Markdown table, then each wave's
RSS and CPU per process against the first wave's.
"""
import argparse
import http.client
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HZ = os.sysconf("SC_CLK_TCK")
# The agent trims its heap every 5 s (memory/): read after one has passed.
SETTLE = 6.0


def log(*a):
    print("agentwaves:", *a, file=sys.stderr, flush=True)


def args():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--metrics-port", type=int, required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--pod-uid", required=True)
    p.add_argument("--waves", type=int, required=True)
    p.add_argument("-n", type=int, required=True)
    p.add_argument("--parallel", type=int, required=True)
    return p.parse_args()


class Agent:
    """The agent's HTTP API, one connection per thread."""

    def __init__(self, port, token):
        self.port, self.token = port, token
        self.local = __import__("threading").local()

    def call(self, method, path, body=None):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = None if body is None else json.dumps(body)
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            text = r.read()
        except (OSError, http.client.HTTPException):
            self.local.conn = None
            raise
        return r.status, (json.loads(text) if text else None)


def retried(agent, method, path, body=None):
    """A call retried while the agent asks to wait (429: its cap of live processes)."""
    for _ in range(600):
        status, doc = agent.call(method, path, body)
        if status != 429:
            return status, doc
        time.sleep(0.1)
    raise SystemExit(f"{method} {path}: still 429 after 60 s")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ  # utime, stime


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for pid {pid}")


def heap_mb(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    got = {}
    for line in text.splitlines():
        for state in ("in_use", "free"):
            if line.startswith(f'sandbox_agent_heap_bytes{{state="{state}"}}'):
                got[state] = float(line.rsplit(" ", 1)[1]) / 1e6
    return f"{got.get('in_use', 0):.1f} / {got.get('free', 0):.1f}"


def wave(a, agent, w):
    ids = [f"wave{w}-{i:06d}" for i in range(a.n)]

    def start(i):
        body = {"execId": i, "podUid": a.pod_uid, "container": "main", "command": ["true"]}
        status, doc = retried(agent, "POST", "/v1/processes", body)
        if status != 200:
            raise SystemExit(f"start {i}: HTTP {status}: {doc}")
        return doc.get("phase") in ("Exited", "Error")

    def final(i):
        for _ in range(3000):
            status, doc = agent.call("GET", f"/v1/processes/{i}")
            if status == 200 and doc.get("phase") in ("Exited", "Error"):
                if doc.get("exit", {}).get("code") != 0:
                    raise SystemExit(f"{i}: ended {doc.get('phase')} {doc.get('exit')} {doc.get('error')}")
                return
            time.sleep(0.02)
        raise SystemExit(f"{i}: not final in 60 s")

    def forget(i):
        status, doc = retried(agent, "DELETE", f"/v1/processes/{i}")
        if status not in (200, 204):
            raise SystemExit(f"forget {i}: HTTP {status}: {doc}")

    cpu0, t0 = cpu_seconds(a.pid), time.monotonic()
    with ThreadPoolExecutor(a.parallel) as pool:
        list(pool.map(start, ids))
        t1 = time.monotonic()
        list(pool.map(final, ids))
        time.sleep(SETTLE)
        held = (rss_mib(a.pid), heap_mb(a.metrics_port))
        list(pool.map(forget, ids))
    cpu = cpu_seconds(a.pid) - cpu0
    time.sleep(SETTLE)
    after = (rss_mib(a.pid), heap_mb(a.metrics_port))
    row = {"wave": w + 1, "rate": a.n / (t1 - t0), "held": held, "after": after,
           "cpu_ms": cpu * 1000 / a.n}
    log(f"wave {w + 1}: {row}")
    return row


def main():
    a = args()
    agent = Agent(a.port, open(a.token_file).read().strip())
    log(f"agent pid {a.pid}: RSS {rss_mib(a.pid):.1f} MiB before the first wave")
    rows = [wave(a, agent, w) for w in range(a.waves)]
    print(f"\n{a.waves} waves of {a.n} `true` through one agent process, {a.parallel} clients\n")
    print("| wave | starts/s | RSS with the records (MiB) | heap in use / free (MB) "
          "| RSS once forgotten (MiB) | heap in use / free (MB) | agent CPU per process (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['wave']} | {r['rate']:.0f} | {r['held'][0]:.1f} | {r['held'][1]} "
              f"| {r['after'][0]:.1f} | {r['after'][1]} | {r['cpu_ms']:.2f} |")
    first = rows[0]
    print("\n| wave | RSS with the records vs wave 1 | CPU per process vs wave 1 |")
    print("|---:|---:|---:|")
    for r in rows:
        rss = (r["held"][0] / first["held"][0] - 1) * 100
        cpu = (r["cpu_ms"] / first["cpu_ms"] - 1) * 100
        print(f"| {r['wave']} | {rss:+.1f} % | {cpu:+.1f} % |")


if __name__ == "__main__":
    main()

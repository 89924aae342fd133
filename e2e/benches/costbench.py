"""CPU and API cost per process: SandboxProcess vs kubectl exec vs runc exec (e2e/benches/costbench).

Each phase runs N processes of the same command; every counter is read before and after it. A
component's cost per process is (its delta - its idle rate x the phase's duration) / N.
"""
import argparse
import glob
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HZ = os.sysconf("SC_CLK_TCK")
CPUACCT = "/sys/fs/cgroup/cpuacct"
HOST = ["kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kubelet",
        "containerd", "kube-proxy"]
MUTATING = {"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}
GROUP = "sandbox.dev/v1alpha1"
FINALIZER = "sandbox.dev/process"  # sandbox_api::crd::FINALIZER


def log(*a):
    print("costbench:", *a, file=sys.stderr, flush=True)


def args():
    p = argparse.ArgumentParser()
    p.add_argument("--namespace", required=True)
    p.add_argument("--pods", type=int, required=True)
    p.add_argument("-n", type=int, required=True)
    p.add_argument("--parallel", type=int, required=True)
    p.add_argument("--idle", type=float, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--pids", required=True)
    p.add_argument("--runtime-root", required=True)
    p.add_argument("--cgroup-parent", required=True)
    p.add_argument("--clients", type=int, default=0)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("cmd", nargs="+")
    return p.parse_args()


def kubectl(*a, stdin=None):
    return subprocess.run(["kubectl", *a], input=stdin, capture_output=True, text=True, check=True).stdout


# --- counters --------------------------------------------------------------------------------------
def proc_cpu(pid, children):
    """utime+stime (and the reaped children's, if asked) of a process, in seconds"""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    t = int(fields[11]) + int(fields[12])
    if children:
        t += int(fields[13]) + int(fields[14])
    return t / HZ


def cgroup_cpu(path):
    with open(f"{CPUACCT}{path}/cpuacct.usage") as f:
        return int(f.read()) / 1e9


def pod_cgroup_of(pid):
    """the pod-level cpuacct cgroup (all its containers) of a host pid"""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if "cpuacct" in ctrls.split(","):
                return os.path.dirname(path)
    raise RuntimeError(f"pid {pid} has no cpuacct cgroup")


def procs(field, pred):
    """host pids whose /proc/<pid>/<field> (text) satisfies pred"""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/{field}", "rb") as f:
                    text = f.read().decode(errors="replace")
            except OSError:
                continue
            if pred(text):
                out.append(int(d))
    return out


def find_pid(argv0_suffix):
    pids = procs("cmdline", lambda c: c.split("\0")[0].endswith(argv0_suffix))
    if not pids:
        raise RuntimeError(f"no process {argv0_suffix} on this node")
    return pids[0]


def shims():
    return procs("comm", lambda c: c.startswith("containerd-shim"))


class Counters:
    """Where each component's CPU is read (fixed for the whole run: a restart fails the run)."""

    def __init__(self, a, pod_uids):
        self.host = {}
        for name in HOST:
            with open(f"{a.pids}/{name}.pid") as f:
                self.host[name] = int(f.read().split()[0])
        self.cgroups = {
            "operator": pod_cgroup_of(find_pid("/sandbox-operator")),
            "agent": pod_cgroup_of(find_pid("/sandbox-agent")),
            "supervisors+runc": "/sandbox-supervisors",
        }
        self.workload = [g for uid in pod_uids
                         for g in glob.glob(f"{CPUACCT}{a.cgroup_parent}/kubepods/*/pod{uid}")]
        if len(self.workload) != len(pod_uids):
            raise RuntimeError(f"found {len(self.workload)} bench pod cgroups for {len(pod_uids)} pods")
        self.shims = shims()

    def read(self):
        c = {name: proc_cpu(pid, children=False) for name, pid in self.host.items()}
        c["shims (+their runc)"] = sum(proc_cpu(p, children=True) for p in self.shims)
        for name, path in self.cgroups.items():
            c[name] = cgroup_cpu(path)
        c["the command itself"] = sum(cgroup_cpu(g[len(CPUACCT):]) for g in self.workload)
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        c["clients (kubectl, runc run here)"] = ru.ru_utime + ru.ru_stime
        me = resource.getrusage(resource.RUSAGE_SELF)
        c["client (this script)"] = me.ru_utime + me.ru_stime
        return c


def api_counts():
    """mutating requests by verb/resource/subresource, and etcd writes, from the API server"""
    reqs, etcd = {}, {}
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        name = line.split("{", 1)[0]
        if name not in ("apiserver_request_total", "etcd_requests_total"):
            continue
        labels, value = dict(re.findall(r'(\w+)="([^"]*)"', line)), float(line.rsplit(" ", 1)[1])
        if name == "apiserver_request_total" and labels.get("verb") in MUTATING | {"CONNECT"}:
            sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
            key = f"{labels['verb']} {labels.get('resource', '')}{sub}"
            reqs[key] = reqs.get(key, 0) + value
        elif name == "etcd_requests_total" and labels.get("operation") in ("create", "update", "delete"):
            etcd[labels.get("type", "")] = etcd.get(labels.get("type", ""), 0) + value
    return reqs, etcd


def snapshot(counters):
    reqs, etcd = api_counts()
    return {"t": time.monotonic(), "cpu": counters.read(), "reqs": reqs, "etcd": etcd}


def delta(a, b):
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}


# --- phases ----------------------------------------------------------------------------------------
class Watch:
    """`kubectl get -w` on the bench's SandboxProcesses (or `processes`): the moment each name is
    final, or gone."""

    def __init__(self, ns, resource="sandboxprocesses"):
        self.final, self.gone, self.errors = set(), set(), []
        self.seen = {}  # name -> {phase: when the watch first saw it}
        self.cv = threading.Condition()
        self.stopped = False
        fmt = '{.type} {.object.metadata.name} {.object.status.phase}{"\\n"}'
        self.argv = ["kubectl", "-n", ns, "get", resource, "-w", "--output-watch-events", "-o", f"jsonpath={fmt}"]
        self.p = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        # A watch the server ends (its timeout, a CRD's storage replaced after an upgrade) is
        # started again: its first events list what is there, the times first seen are kept.
        while True:
            for line in self.p.stdout:
                self.line(line)
            if self.stopped:
                return
            log(f"watch of {self.argv[4]} ended (status {self.p.wait()}); watching again")
            self.p = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True)

    def line(self, line):
        parts = line.split()
        now = time.time()
        with self.cv:
            if len(parts) > 2:
                self.seen.setdefault(parts[1], {}).setdefault(parts[2], now)
            if parts and parts[0] == "DELETED":
                self.gone.add(parts[1])
            elif len(parts) > 2 and parts[2] in ("Exited", "Error"):
                self.final.add(parts[1])
                if parts[2] == "Error":
                    self.errors.append(parts[1])
            self.cv.notify_all()

    def wait(self, what, n, timeout):
        with self.cv:
            if not self.cv.wait_for(lambda: len(what) >= n, timeout):
                raise TimeoutError(f"{len(what)} of {n} after {timeout} s")

    def stop(self):
        self.stopped = True
        self.p.terminate()


def sbp_doc(name, pod, argv, finalizer=False):
    meta = {"name": name, "finalizers": [FINALIZER]} if finalizer else {"name": name}
    return {"apiVersion": GROUP, "kind": "SandboxProcess", "metadata": meta,
            "spec": {"podName": pod, "command": argv}}


def proc_doc(name, pod, argv):
    return {"apiVersion": "processes.sandbox.dev/v1alpha1", "kind": "Process", "metadata": {"name": name},
            "spec": {"podName": pod, "command": argv}}


def run_objects(a, pods, resource, doc):
    """create N objects of `resource` (kubectl create, `parallel` batches; `doc(i, pod)` makes
    the i-th), wait all final, delete all, wait all gone"""
    w = Watch(a.namespace, resource)
    time.sleep(1)  # the watch is established before the first create
    docs = [doc(i, pods[i % len(pods)]) for i in range(a.n)]
    batches = [docs[i::a.parallel] for i in range(a.parallel)]

    def create(batch):
        kubectl("-n", a.namespace, "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": batch}))

    with ThreadPoolExecutor(a.parallel) as ex:
        list(ex.map(create, batches))
    w.wait(w.final, a.n, 600)
    kubectl("-n", a.namespace, "delete", resource, "--all", "--wait=false")
    w.wait(w.gone, a.n, 600)
    w.stop()
    if w.errors:
        raise RuntimeError(f"{len(w.errors)} processes ended in Error, e.g. {w.errors[:3]}")


def run_processes(a, pods):
    """the `processes` resource served from the nodes"""
    run_objects(a, pods, "processes", lambda i, pod: proc_doc(f"p-{i}", pod, a.cmd))


def run_sandboxprocesses(a, pods, finalizer):
    """SandboxProcesses as the clients send them (no finalizer: the operator adds it to a process
    it shows running); with `finalizer`, manifests that carry it (a GitOps repository may)"""
    run_objects(a, pods, "sandboxprocesses", lambda i, pod: sbp_doc(f"c-{i}", pod, a.cmd, finalizer))


def run_exec(a, pods):
    def one(i):
        kubectl("-n", a.namespace, "exec", pods[i % len(pods)], "-c", "main", "--", *a.cmd)

    with ThreadPoolExecutor(a.parallel) as ex:
        list(ex.map(one, range(a.n)))


def run_runc(a, cids):
    def one(i):
        subprocess.run(["/usr/sbin/runc", "--root", a.runtime_root, "exec", cids[i % len(cids)], *a.cmd],
                       check=True, capture_output=True)

    with ThreadPoolExecutor(a.parallel) as ex:
        list(ex.map(one, range(a.n)))


def measure(counters, fn):
    before = snapshot(counters)
    fn()
    work = time.monotonic() - before["t"]
    time.sleep(3)  # what the components do right after (events, status) belongs to the phase
    after = snapshot(counters)
    return {"seconds": after["t"] - before["t"], "work_seconds": work, "cpu": delta(before["cpu"], after["cpu"]),
            "reqs": delta(before["reqs"], after["reqs"]), "etcd": delta(before["etcd"], after["etcd"])}


# --- start latency with many clients at once ---------------------------------------------------------
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def start_latency(a, pods):
    """`clients` at once, `rounds` each: `kubectl create` of a SandboxProcess (or a Process) → the
    watch sees it started (Running, or already final), for `true` and for `sleep 2`; and the
    `kubectl exec` round trip of `true`. Each client runs the five in turn every round (the order
    rotating), so that each way is measured under the same load as the others."""
    w = Watch(a.namespace)
    wp = Watch(a.namespace, "processes")
    time.sleep(1)
    out = {"sbp true": [], "sbp sleep": [], "exec true": [], "proc true": [], "proc sleep": []}
    lock = threading.Lock()

    def sbp(kind, argv, c, r, proc=False):
        name = f"l-{kind}-{c}-{r}"
        doc = proc_doc(name, pods[c % len(pods)], argv) if proc else sbp_doc(name, pods[c % len(pods)], argv)
        t0 = time.time()
        kubectl("-n", a.namespace, "create", "-f", "-", stdin=json.dumps(doc))
        w = wp if proc else w_sbp
        with w.cv:
            if not w.cv.wait_for(lambda: set(w.seen.get(name, {})) & {"Running", "Exited", "Error"}, 120):
                raise TimeoutError(f"{name} not started in 120 s")
            t = min(v for k, v in w.seen[name].items() if k in ("Running", "Exited", "Error"))
        with lock:
            out[f"{'proc' if proc else 'sbp'} {kind}"].append(t - t0)

    def exec_(c, r):
        t0 = time.time()
        kubectl("-n", a.namespace, "exec", pods[c % len(pods)], "-c", "main", "--", "true")
        with lock:
            out["exec true"].append(time.time() - t0)

    w_sbp = w
    ways = [exec_, lambda c, r: sbp("true", ["true"], c, r), lambda c, r: sbp("sleep", ["sleep", "2"], c, r),
            lambda c, r: sbp("true", ["true"], c, r, True), lambda c, r: sbp("sleep", ["sleep", "2"], c, r, True)]

    def client(c):
        for r in range(a.rounds):
            k = (c + r) % len(ways)
            for fn in ways[k:] + ways[:k]:
                fn(c, r)

    log(f"start latency: {a.clients} clients x {a.rounds} rounds of the five ways")
    with ThreadPoolExecutor(a.clients) as ex:
        list(ex.map(client, range(a.clients)))
    w.stop()
    wp.stop()
    kubectl("-n", a.namespace, "delete", "sandboxprocesses", "--all", "--wait=false")
    kubectl("-n", a.namespace, "delete", "processes", "--all", "--wait=false")
    return out


def report_latency(a, lat):
    ex = lat["exec true"]
    print(f"\nStart latency, {a.clients} clients at once, {a.rounds} each ({len(ex)} samples per row; ms):\n")
    print("| what | p50 | p90 | p99 | p50 vs exec | p99 vs exec |\n|---|---:|---:|---:|---:|---:|")
    rows = (("kubectl exec `true`: round trip", "exec true"),
            ("SandboxProcess `true`: create → Running or final seen", "sbp true"),
            ("SandboxProcess `sleep 2`: create → Running seen", "sbp sleep"),
            ("Process `true`: create → Running or final seen", "proc true"),
            ("Process `sleep 2`: create → Running seen", "proc sleep"))
    for text, k in rows:
        xs = lat[k]
        print(f"| {text} | {pct(xs, .5) * 1000:.0f} | {pct(xs, .9) * 1000:.0f} | {pct(xs, .99) * 1000:.0f} | "
              f"{pct(xs, .5) / pct(ex, .5):.2f}× | {pct(xs, .99) / pct(ex, .99):.2f}× |")


# --- report ----------------------------------------------------------------------------------------
CLIENT_ROWS = ("clients (kubectl, runc run here)", "client (this script)")


def per_process(phase, idle, n, kind):
    """cost per process of each component, idle subtracted; the command's own CPU counted once"""
    d = phase["seconds"]
    out = {}
    for k, v in phase["cpu"].items():
        base = 0 if k in CLIENT_ROWS else idle["cpu"].get(k, 0) / idle["seconds"] * d
        out[k] = (v - base) / n
    cmd = out["the command itself"]
    if kind == "exec":  # the shim reaps the exec'd command: its rusage holds the command's CPU
        out["shims (+their runc)"] -= cmd
    if kind == "runc":  # runc, run here, reaps the command
        out["runc exec (run here)"] = out.pop("clients (kubectl, runc run here)") - cmd
    return out


def api_per_process(phase, idle, n, key):
    d = phase["seconds"]
    return {k: (v - idle[key].get(k, 0) / idle["seconds"] * d) / n for k, v in phase[key].items()}


def report(a, R):
    names = ["SandboxProcess", "SandboxProcess (finalizer in the manifest)", "Process (from the nodes)", "kubectl exec",
             "runc exec"]
    kinds = ["sbp", "sbp-client", "proc", "exec", "runc"]
    cpu = [per_process(R[k], R["idle"], a.n, k) for k in kinds]
    rows = sorted({r for c in cpu for r in c} - set(CLIENT_ROWS), key=lambda r: -max(c.get(r, 0) for c in cpu))
    tot = [sum(c.get(r, 0) for r in rows) for c in cpu]
    print(f"\n{a.n} processes of `{' '.join(a.cmd)}` each way over {a.pods} pods, {a.parallel} at once, "
          f"{os.cpu_count()} cores; idle baseline {R['idle']['seconds']:.0f} s subtracted\n")
    print("| CPU ms per process | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for r in rows:
        print(f"| {r} | " + " | ".join(f"{c.get(r, 0) * 1000:.2f}" for c in cpu) + " |")
    print("| **total (servers and node)** | " + " | ".join(f"**{t * 1000:.2f}**" for t in tot) + " |")
    for r in CLIENT_ROWS:
        if any(r in c for c in cpu):
            print(f"| _{r}, not in the total_ | " + " | ".join(f"{c.get(r, 0) * 1000:.2f}" if r in c else "-" for c in cpu) + " |")
    print(f"\nSandboxProcess / kubectl exec: **{tot[0] / tot[3]:.2f}×**, **{tot[1] / tot[3]:.2f}×** "
          f"(finalizer in the manifest); Process / kubectl exec: **{tot[2] / tot[3]:.2f}×**; SandboxProcess / runc exec: "
          f"{tot[0] / tot[4]:.1f}×, {tot[1] / tot[4]:.1f}×; Process / runc exec: {tot[2] / tot[4]:.1f}×; "
          f"kubectl exec / runc exec: {tot[3] / tot[4]:.1f}×")
    print("\n| API per process | " + " | ".join(names[:4]) + " |\n|---|---:|---:|---:|---:|")
    reqs = [api_per_process(R[k], R["idle"], a.n, "reqs") for k in kinds[:4]]
    etcd = [api_per_process(R[k], R["idle"], a.n, "etcd") for k in kinds[:4]]
    for k in sorted({k for r in reqs for k in r if abs(r[k]) >= 0.05}):
        print(f"| {k} | " + " | ".join(f"{r.get(k, 0):.2f}" for r in reqs) + " |")
    writes = [sum(v for k, v in r.items() if not k.startswith("CONNECT")) for r in reqs]
    print("| **writes (all but CONNECT)** | " + " | ".join(f"**{w:.2f}**" for w in writes) + " |")
    print("| etcd writes (create, update, delete) | " + " | ".join(f"{sum(e.values()):.2f}" for e in etcd) + " |")
    for i, k in enumerate(kinds):
        w = R[k]["work_seconds"]
        span = "from the first create to the last one gone" if k in ("sbp", "sbp-client", "proc") else "start to return"
        print(f"\n{names[i]}: {w:.1f} s for {a.n}, {a.n / w:.0f}/s ({a.parallel} at once, {span})")
    R["per_process_cpu"] = dict(zip(kinds, cpu))
    R["per_process_requests"] = dict(zip(kinds[:4], reqs))


def main():
    a = args()
    pods = [f"cost-{i}" for i in range(a.pods)]
    info = json.loads(kubectl("-n", a.namespace, "get", "pods", "-o", "json"))["items"]
    uids = [p["metadata"]["uid"] for p in info]
    cids = [p["status"]["containerStatuses"][0]["containerID"].split("://")[1] for p in info]
    counters = Counters(a, uids)
    R = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "n": a.n, "cmd": a.cmd,
         "pods": a.pods, "parallel": a.parallel, "cores": os.cpu_count()}
    log(f"idle baseline ({a.idle:.0f} s)")
    R["idle"] = measure(counters, lambda: time.sleep(a.idle))
    for kind, fn in (("sbp", lambda: run_sandboxprocesses(a, pods, False)),
                     ("sbp-client", lambda: run_sandboxprocesses(a, pods, True)),
                     ("proc", lambda: run_processes(a, pods)),
                     ("exec", lambda: run_exec(a, pods)), ("runc", lambda: run_runc(a, cids))):
        log(f"phase {kind}")
        R[kind] = measure(counters, fn)
        log(f"phase {kind}: {R[kind]['seconds']:.1f} s")
    for name, path in counters.cgroups.items():  # a restarted pod would have a new cgroup
        if not os.path.isdir(f"{CPUACCT}{path}"):
            raise RuntimeError(f"the {name} pod was replaced during the run: its figures are void")
    report(a, R)
    if a.clients:
        R["start_latency"] = start_latency(a, pods)
        report_latency(a, R["start_latency"])
    with open(a.out, "w") as f:
        json.dump(R, f, indent=1)
    log(f"raw figures: {a.out}")


if __name__ == "__main__":
    main()

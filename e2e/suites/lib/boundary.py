#!/usr/bin/env python3
"""What one e2e suite leaves to the next: the cluster and host state between two suites.

.ci/run takes a snapshot before the first suite and after each one, and
  * fails the boundary when a suite leaked what every suite must clean up (an Active namespace or
    a SandboxProcess the run did not start with, a host process, mount or network namespace
    nobody owns, an extra node, a release's aggregated API that does not answer);
  * names the state each suite started from (its *class*: what differs from the run's start,
    Terminating namespaces and the release's shape included), and appends
    "previous-suite  class  suite  passed" to a ledger kept across runs, so that
    `boundary.py coverage SUITES...` shows which ordered pairs of suites, and which suite after
    which leftover class, have run;
  * SPO_CI_ORDER=uncovered orders the suites so that a run covers pairs not yet in the ledger.

Usage: boundary.py snapshot > FILE
       boundary.py check BASE BEFORE AFTER    (prints the diff and the class; exit 1 on a leak)
       boundary.py record LEDGER PREV CLASS SUITE OK
       boundary.py coverage LEDGER SUITE...
       boundary.py order LEDGER SUITE...      (one suite per line, uncovered pairs first)
       boundary.py chain LEDGER MINUTES SUITE...
                                              (suites may repeat: a chain of uncovered pairs that
                                               fits in about MINUTES)
       boundary.py merge LEDGER               (its new passing pairs into e2e/suites/ci-adjacent.tsv)
"""
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys

# What the suites use: the cluster's kubeconfig and the tools e2e/cluster installs.
CACHE = os.environ.get("SPO_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sandbox-process-operator")
os.environ.setdefault("KUBECONFIG", os.path.join(CACHE, "cluster", "admin.kubeconfig"))
os.environ["PATH"] = os.path.join(CACHE, "bin") + os.pathsep + os.environ.get("PATH", "")

SYSTEM_NS = {"default", "kube-system", "kube-public", "kube-node-lease"}
HOST_COMMS = ("sandbox-", "kubectl", "registry", "tmux", "socat", "helm")


def tool(*argv):
    """A tool's output, or None (and a line on stderr) when it fails: a snapshot is best effort."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"boundary: {argv[0]}: {e}", file=sys.stderr)
        return None
    if out.returncode != 0:
        print(f"boundary: {' '.join(argv[:3])}: {out.stderr.strip()[:200]}", file=sys.stderr)
        return None
    return out.stdout


def kubectl_json(*args):
    out = tool("kubectl", *args, "-o", "json")
    return json.loads(out) if out else {"items": []}


WEBHOOKS_AND_CRDS = ("customresourcedefinitions", "mutatingwebhookconfigurations",
                     "validatingwebhookconfigurations", "priorityclasses")


def fetch_all(calls):
    """kubectl_json of each call, all at once: a snapshot is a dozen kubectl runs, taken 14
    times a CI run, and one after the other they cost a minute of it."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as ex:
        futures = {c: ex.submit(kubectl_json, *c) for c in calls}
        return {c: f.result() for c, f in futures.items()}


def cluster_items():
    """Lines "kind name attributes" for every object a suite makes that can outlive it."""
    lines = []
    got = fetch_all([("get", "nodes"), ("get", "namespaces"), ("get", "sandboxprocesses", "-A"),
                     ("get", "processes.processes.sandbox.dev", "-A"),
                     ("get", "apiservices")] + [("get", k) for k in WEBHOOKS_AND_CRDS])
    for n in got[("get", "nodes")]["items"]:
        conds = n["status"].get("conditions", [])
        ready = [c["status"] for c in conds if c["type"] == "Ready"]
        lines.append(f"node {n['metadata']['name']} ready={''.join(ready)}")
        # DiskPressure and the like: a node that evicts the next suite's pods.
        lines += [f"nodepressure {n['metadata']['name']} {c['type']}" for c in conds
                  if c["type"] != "Ready" and c["status"] == "True"]
    for ns in got[("get", "namespaces")]["items"]:
        name = ns["metadata"]["name"]
        if name not in SYSTEM_NS:
            lines.append(f"namespace {name} {ns['status']['phase']}")
    for o in got[("get", "sandboxprocesses", "-A")]["items"]:
        m = o["metadata"]
        gone = " deleting" if m.get("deletionTimestamp") else ""
        lines.append(f"sandboxprocess {m['namespace']}/{m['name']}{gone}")
    # served from the nodes while a release runs (none without one)
    for o in got[("get", "processes.processes.sandbox.dev", "-A")]["items"]:
        m = o["metadata"]
        lines.append(f"process {m['namespace']}/{m['name']}")
    for kind in WEBHOOKS_AND_CRDS:
        for o in got[("get", kind)]["items"]:
            name = o["metadata"]["name"]
            if not name.startswith("system-"):
                lines.append(f"{kind[:-1]} {name}")
    for o in got[("get", "apiservices")]["items"]:
        if o["spec"].get("service"):
            ok = [c["status"] for c in o["status"].get("conditions", []) if c["type"] == "Available"]
            lines.append(f"apiservice {o['metadata']['name']} available={''.join(ok)}")
    lines += release_items()
    return lines


def release_items():
    """The installed releases and the shape of their workloads (where agents run, how many)."""
    lines = []
    for r in json.loads(tool("helm", "list", "-A", "-o", "json") or "[]"):
        lines.append(f"release {r['namespace']}/{r['name']} {r['chart']} {r['status']}")
    sel = "app.kubernetes.io/part-of=sandbox-process-operator"
    got = fetch_all([("get", kind, "-A", "-l", sel) for kind in ("deployments", "daemonsets")])
    for kind in ("deployments", "daemonsets"):
        for o in got[("get", kind, "-A", "-l", sel)]["items"]:
            m, spec = o["metadata"], o["spec"]["template"]["spec"]
            shape = json.dumps([spec.get("nodeSelector"), spec.get("affinity"),
                                o["spec"].get("replicas")], sort_keys=True)
            digest = hashlib.sha256(shape.encode()).hexdigest()[:8]
            lines.append(f"{kind[:-1]} {m['namespace']}/{m['name']} shape={digest}")
    return lines


def host_items():
    """Host processes, mounts and network namespaces an e2e suite may start and forget."""
    lines = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            cgroup = open(f"/proc/{pid}/cgroup").read()
        except OSError:
            continue
        # Pods' processes live below the kubelet's cgroup root; the cluster's own daemons are
        # named in its pid files; neither is a suite's leftover.
        if comm.startswith(HOST_COMMS) and "/spo-e2e" not in cgroup and int(pid) != os.getpid():
            if not is_cluster_daemon(pid):
                lines.append(f"hostprocess {comm} {pid}")
    for line in open("/proc/self/mountinfo"):
        point = line.split()[4]
        if ("spo" in point or "sandbox" in point) and "/spo-e2e" not in point:
            lines.append(f"mount {point}")
    netns = "/run/netns"
    for n in sorted(os.listdir(netns)) if os.path.isdir(netns) else []:
        lines.append(f"netns {n}")
        if n.startswith("spo-n"):
            lines += [f"route {n} {r}" for r in routes(["-n", n])]
    lines += [f"route host {r}" for r in routes([]) if "10.244." in r or "10.245." in r]
    return lines


def routes(netns):
    """The routes of the host or of a node's netns: a lost one cuts a node's pods off."""
    # "linkdown" is the moment's carrier (a bridge with no pod or node on it), not the route.
    return [" ".join(w for w in r.split() if w != "linkdown")
            for r in (tool("ip", *netns, "route", "show") or "").splitlines()]


def is_cluster_daemon(pid):
    pids = "/run/spo-e2e/pids"
    for f in os.listdir(pids) if os.path.isdir(pids) else []:
        try:
            if open(os.path.join(pids, f)).read().strip() == pid:
                return True
        except OSError:
            pass
    return False


def snapshot():
    print("\n".join(sorted(cluster_items() + host_items())))


def read(path):
    return set(open(path).read().splitlines())


def leaks(base, before, after):
    """What a suite left that it must not: items new since it started that no rule allows."""
    bad = []
    nodes_before = sum(1 for x in before if x.startswith("node "))
    for item in sorted(after - before - base):
        kind = item.split()[0]
        if kind == "namespace" and not item.endswith(" Terminating"):
            bad.append(item + " (delete it at the suite's end)")
        elif kind == "sandboxprocess" and not terminating_ns(item, after):
            bad.append(item + " (in a namespace that stays)")
        elif item.startswith("hostprocess sandbox-supervi") and any(
                x.endswith(" Terminating") for x in after if x.startswith("namespace ")):
            pass  # supervises a process whose pod goes with its namespace
        elif kind in ("hostprocess", "mount", "netns") and not item.startswith(("netns spo-n", "mount /run/netns/spo-n")):
            bad.append(item + " (on the host, left running)")
        elif kind == "nodepressure":
            bad.append(item + " (the node evicts pods)")
        elif kind == "apiservice" and not item.endswith("available=True"):
            bad.append(item + " (the release's API does not answer)")
    # A route of a node that is still there, lost: that node's pods are cut off.
    # (A suite that removes nodes, as e2e/suites/nodes does at its end, takes their routes with them.)
    nodes_after = {x.split()[1] for x in after if x.startswith("netns ")} | {"host"}
    same_nodes = {x for x in before if x.startswith("node ")} <= after
    for item in sorted(before - after):
        if (same_nodes and item.startswith("route ") and item.split()[1] in nodes_after
                and " proto kernel " not in item):
            bad.append(f"{item} (lost)")
    if sum(1 for x in after if x.startswith("node ")) > max(nodes_before, 1):
        bad.append("nodes: more than the suite started with")
    return bad


def terminating_ns(item, state):
    ns = item.split()[1].split("/")[0]
    return f"namespace {ns} Terminating" in state or not any(
        x.startswith(f"namespace {ns} ") for x in state)


def state_class(base, state):
    """A short name for how STATE differs from the run's start (what the next suite meets)."""
    diff = sorted([f"+{x}" for x in state - base] + [f"-{x}" for x in base - state])
    # Test namespaces end in a random suffix: the class names their kind, not the run.
    diff = sorted({re.sub(r"-[0-9a-f]{6}\b", "-*", d) for d in diff
                   if not d[1:].startswith(("hostprocess", "sandboxprocess"))})
    if not diff:
        return "start", diff
    return hashlib.sha256("\n".join(diff).encode()).hexdigest()[:8], diff


def check(base_f, before_f, after_f):
    base, before, after = read(base_f), read(before_f), read(after_f)
    name, diff = state_class(base, after)
    print(f"state after the suite: class {name}" + ("" if not diff else ", differs from the start in:"))
    for d in diff[:40]:
        print(f"  {d}")
    bad = leaks(base, before, after)
    for b in bad:
        print(f"LEAK {b}")
    print(f"class={name}")
    return 1 if bad else 0


# The pairs earlier machines saw, kept in the repository (a machine's cache does not outlive it).
SEED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ci-adjacent.tsv")


def file_rows(path):
    if not os.path.exists(path):
        return []
    return [line.split("\t") for line in open(path).read().splitlines() if line.count("\t") == 3]


def ledger_rows(path):
    return file_rows(SEED) + file_rows(path)


def merge(path):
    """Appends to the repository's seed the passing pairs of the cache's ledger it lacks."""
    seen = {tuple(r) for r in file_rows(SEED)}
    pairs = {(r[0], r[2]) for r in seen if r[3] == "ok"}
    new = [r for r in file_rows(path) if r[3] == "ok" and (r[0], r[2]) not in pairs]
    with open(SEED, "a") as f:
        for r in new:
            if (r[0], r[2]) not in pairs:
                pairs.add((r[0], r[2]))
                f.write("\t".join(r) + "\n")
    print(f"{len(pairs)} passing pairs in {os.path.relpath(SEED)}")


def coverage(path, suites):
    rows = ledger_rows(path)
    pairs = {(r[0], r[2]) for r in rows if r[3] == "ok"}
    want = [(a, b) for a in suites for b in suites if a != b]
    have = [p for p in want if p in pairs]
    print(f"ordered pairs of suites run next to each other, and passed: {len(have)} of {len(want)}")
    for b in suites:
        after = sorted(a for a in suites if (a, b) in pairs)
        classes = sorted({r[1] for r in rows if r[2] == b and r[3] == "ok"})
        print(f"  {b}: after {len(after)} of {len(suites) - 1} ({' '.join(after) or '-'}); "
              f"from states {' '.join(classes) or '-'}")


def order(path, suites):
    """Greedy: start after the demo, then always the suite whose pair with the last is new."""
    pairs = {(r[0], r[2]) for r in ledger_rows(path) if r[3] == "ok"}
    left, last, out = list(suites), "demo", []
    while left:
        new = [s for s in left if (last, s) not in pairs]
        # Prefer a suite that still has uncovered successors, so that the chain goes on.
        new.sort(key=lambda s: -sum((s, t) not in pairs for t in left if t != s))
        pick = new[0] if new else left[0]
        out.append(pick)
        left.remove(pick)
        pairs.add((last, pick))
        last = pick
    print("\n".join(out))


# Seconds each suite took in a warm run (the summary of a .ci/run at 87e97f4, plus about 20 s for
# the boundary check): what a chain of pairs costs. A suite not named here counts as 180 s.
SUITE_SECONDS = {"smoke": 35, "agent-cri": 90, "agent-daemonset": 125, "operator": 175,
                 "chart": 80, "certs": 240, "suite": 380, "cli": 270, "clients": 125,
                 "hostile": 130, "release": 55, "nodes": 255}


def chain(path, minutes, suites):
    """Suites in an order where they may repeat, so that one run covers as many uncovered pairs
    as fit in MINUTES: the cheapest uncovered pair from the last suite first; where the last has
    none left, a hop (a pair seen before) to the cheapest suite that still has some."""
    pairs = {(r[0], r[2]) for r in ledger_rows(path) if r[3] == "ok"}
    cost = {s: SUITE_SECONDS.get(s, 180) for s in suites}

    def open_from(a):
        return [b for b in suites if b != a and (a, b) not in pairs]

    last, out, spent = "demo", [], 0
    while any(open_from(a) for a in suites):
        nxt = open_from(last) if last in suites else []
        if nxt:
            # A suite with uncovered pairs of its own keeps the chain going without a hop.
            pick = min(nxt, key=lambda b: (not open_from(b), cost[b]))
        else:
            pick = min((b for b in suites if b != last and open_from(b)), key=cost.get)
        if spent + cost[pick] > minutes * 60:
            break
        out.append(pick)
        spent += cost[pick]
        pairs.add((last, pick))
        last = pick
    print("\n".join(out))


def main(argv):
    if argv[:1] == ["snapshot"]:
        snapshot()
        return 0
    if argv[:1] == ["check"] and len(argv) == 4:
        return check(*argv[1:])
    if argv[:1] == ["record"] and len(argv) == 6:
        with open(argv[1], "a") as f:
            f.write("\t".join(argv[2:]) + "\n")
        return 0
    if argv[:1] == ["coverage"] and len(argv) > 2:
        coverage(argv[1], argv[2:])
        return 0
    if argv[:1] == ["merge"] and len(argv) == 2:
        merge(argv[1])
        return 0
    if argv[:1] == ["chain"] and len(argv) > 3 and argv[2].isdigit():
        chain(argv[1], int(argv[2]), argv[3:])
        return 0
    if argv[:1] == ["order"] and len(argv) > 2:
        order(argv[1], argv[2:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Hostile characters through a process's output, a logMatch line and argv[0] into the status
(issue 35): one sample of every class of Unicode scalar values, and bytes that are not UTF-8.

  hostile_bytes.py manifests POD          SandboxProcess manifests (JSON list) for e2e/suites/operator
  hostile_bytes.py check NAME < OBJ.json  checks one object's final status; prints what is wrong

The objects: hb-out prints every class to stdout and to stderr (and invalid UTF-8, which the tail
shows as U+FFFD: lossy UTF-8, as README says); hb-match has a logMatch readiness whose line holds
every class; hb-argv has every class in argv[0], so the spawn error's message quotes them (as Rust's\nDebug does: controls and noncharacters escaped).
"""
import json
import sys

# One sample of each class (argv cannot hold NUL: C0 without it here, NUL is in the output).
CLASSES = [
    "\x01\x07\x08\t\x0b\x0c\r\x1b\x1f",  # C0 controls (and the printable neighbours below)
    " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",  # ASCII, JSON and YAML syntax
    "\x7f",  # DEL
    "\x80\x81\x9b\x9f",  # C1 controls
    "\x85",  # NEL
    "\xa0\xe9\xff",  # NBSP, Latin-1
    "\u2028\u2029",  # line and paragraph separators
    "\ud7ff",  # just below the surrogates
    "\ue000\uf8ff",  # private use, just above the surrogates
    "\ufeff",  # byte order mark
    "\ufffd",  # replacement character
    "\ufffe\uffff",  # noncharacters
    "\U00010000\U0001f600",  # astral planes
    "\U000f0000\U0010ffff",  # supplementary private use, the last scalar
]
ALL = "".join(CLASSES)
# Output only: NUL, and bytes that are not UTF-8 (a lone continuation byte, a cut sequence).
OUT_EXTRA = b"\x00[\xff\xc3]"
OUT_EXTRA_SHOWN = "\x00[\ufffd\ufffd]"


def octal(b: bytes) -> str:
    """A printf(1) format that writes exactly `b`."""
    return "".join(f"\\{c:03o}" for c in b)


def sbp(name, pod, spec):
    return {
        "apiVersion": "sandbox.dev/v1alpha1",
        "kind": "SandboxProcess",
        "metadata": {"name": name},
        "spec": {"podName": pod, **spec},
    }


def manifests(pod):
    out = ALL.encode() + OUT_EXTRA
    line = "ready " + ALL.replace("\n", "").replace("\r", "")
    return [
        sbp("hb-out", pod, {"command": ["sh", "-c", f"printf '{octal(out)}\\n'; printf '{octal(b'E' + out)}\\n' >&2"]}),
        sbp("hb-match", pod, {
            "command": ["sh", "-c", f"printf '{octal(line.encode())}\\n'; sleep 1"],
            "readiness": {"logMatch": {"pattern": "^ready "}, "periodMillis": 100},
        }),
        sbp("hb-argv", pod, {"command": ["/no/such/" + ALL.replace("/", "")]}),
    ]


def check(name, obj):
    s = obj.get("status", {})
    bad = []
    if name == "hb-out":
        if (s.get("phase"), s.get("exit", {}).get("code")) != ("Exited", 0):
            bad.append(f"phase/exit {s.get('phase')}/{s.get('exit')}")
        tail = s.get("output", {}).get("tail", "")
        shown = ALL + OUT_EXTRA_SHOWN
        for what, want in [("stdout", shown + "\n"), ("stderr", "E" + shown + "\n")]:
            if want not in tail:
                bad.append(f"the tail lacks the {what} line, byte for byte: {tail!r}")
    elif name == "hb-match":
        want = "ready " + ALL.replace("\n", "").replace("\r", "")
        got = s.get("logMatch", {}).get("line")
        if got != want:
            bad.append(f"logMatch.line {got!r}, expected {want!r}")
        if s.get("phase") != "Exited":
            bad.append(f"phase {s.get('phase')}")
    elif name == "hb-argv":
        err = s.get("error") or {}
        if s.get("phase") != "Error" or err.get("code") != "ProcessSpawnFailed":
            bad.append(f"phase/error {s.get('phase')}/{err}")
        # The agent quotes argv[0] as Rust's Debug does (controls and noncharacters escaped),
        # printable ones as they are.
        msg = err.get("message", "")
        if not all(p in msg for p in ["/no/such/", "\xe9", "\U0001f600", "\ufffd"]):
            bad.append(f"the message does not quote argv[0]: {msg!r}")
    return bad


def main():
    if sys.argv[1] == "manifests":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(sys.argv[2])}))
    elif sys.argv[1] == "check":
        bad = check(sys.argv[2], json.load(sys.stdin))
        print("\n".join(bad))
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

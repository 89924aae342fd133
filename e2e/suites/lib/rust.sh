# The Rust end-to-end tests (e2e/tests, crate sandbox-e2e) run from a bash suite, after it has
# built and deployed what they test (sourced after lib/suite.sh):
#   rust_tests TEST [THREADS]   runs e2e/tests/tests/TEST.rs with --ignored against the cluster;
#                               one "ok"/"FAIL" line per test (a failure's output indented,
#                               a pass's "note:" lines too),
#                               counted into lib/suite.sh's passed/failed
# shellcheck shell=bash

rust_tests() {
  local test=$1 threads=${2:-6} log rc=0 root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
  # the temporary namespaces of an earlier, killed run of this test binary
  kubectl delete namespace -l "e2e.sandbox.dev/temporary=$test" --wait=false >/dev/null 2>&1 || true
  log=$(mktemp)
  # --workspace, as CI's `cargo test --workspace` builds it: the same features, so the test
  # binaries that step built are reused, not rebuilt with the e2e crate's features alone.
  (cd "$root" && cargo test -q --workspace --test "$test" --no-run 2>&1) >"$log" ||
    { failed=$((failed + 1)); echo "FAIL building e2e/tests"; sed 's/^/     | /' "$log" | tail -40; rm -f "$log"; return 0; }
  (cd "$root" && SPO_E2E_SUITE=1 SPO_NODE1=$NODE1 RUST_BACKTRACE=0 cargo test --workspace --test "$test" -- --ignored \
    --test-threads "$threads" --show-output 2>&1) >"$log" || rc=$?
  local summary
  summary=$(python3 - "$log" <<'PY'
import re, sys
log = open(sys.argv[1], errors="replace").read()
results = re.findall(r"^test (\S+) \.\.\. (ok|FAILED)$", log, re.M)
outputs = dict(re.findall(r"^---- (\S+) stdout ----\n(.*?)(?=^---- |^failures:$|^successes:$)", log, re.M | re.S))
for name, res in results:
    if res == "ok":
        print(f"ok   {name}")
        # a passing test's figures (--show-output)
        for l in outputs.get(name, "").splitlines():
            if l.startswith("note:"):
                print(f"     {l}")
    else:
        print(f"FAIL {name}")
        for l in outputs.get(name, "").rstrip().splitlines()[:80]:
            print(f"     | {l}")
p = sum(r == "ok" for _, r in results)
print(f"COUNTS {p} {len(results) - p}")
PY
)
  grep -v '^COUNTS ' <<<"$summary"
  local counts p f
  counts=$(grep '^COUNTS ' <<<"$summary")
  p=$(awk '{print $2}' <<<"$counts"); f=$(awk '{print $3}' <<<"$counts")
  passed=$((passed + p)); failed=$((failed + f))
  # a test binary that ended without its results (a crash, a build error) counts as a failure
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    failed=$((failed + 1)); echo "FAIL cargo test --test $test ended with status $rc"; tail -30 "$log" | sed 's/^/     | /'
  fi
  rm -f "$log"
}

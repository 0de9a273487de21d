# shellcheck shell=sh
# tests/checks.sh: the PASS/FAIL lines of the shell checks and their count,
# sourced by tests/java/jar-check.sh, tests/python/wheel-check.sh,
# tests/systemd/check.sh, tests/gpu/hardened-unit.sh and
# packaging/smoke-test.sh.
#
#   check NAME COMMAND...   PASS NAME when COMMAND succeeds, else FAIL NAME
#   pass TEXT, fail TEXT    a PASS or FAIL line
#   finish                  "N passed, N failed"; exits 1 if any failed
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
check() { name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

#!/bin/sh
# CUDA, adopt and restarts under the shipped, hardened gpuipcd.service, on a
# GPU host with systemd as PID 1 (run as root; nothing here runs in CI).
#
#   tests/gpu/hardened-unit.sh [BUILDDIR]     after: make && make gpu-tests
#
# The units are systemd/gpuipcd.{service,socket} with only their names,
# ExecStart=, ListenStream= and the socket directory changed (the diff is
# printed), started as gpuipcd-hardtest.socket/.service from /run/systemd/
# system, so an installed gpuipcd is left alone.  The daemon binary is copied
# to /usr/local/libexec/gpuipcd-hardtest/ (ProtectHome= hides a build tree
# under /home or /root).  It creates the gpuipcd user and gpuipc group with
# systemd-sysusers if they are missing, and removes everything else it made.
#
# Checks, each a PASS/FAIL line, then "N passed, N failed":
#  - the unit starts and the daemon loads libcuda inside the sandbox
#    (gpuipcctl stats: "cuda: driver N");
#  - gpu_test's vmm and adopt cases, producer and consumer in turn: adopt
#    runs cuInit, cuIpcOpenMemHandle and a device copy in the daemon;
#  - systemctl restart keeps both buffers (fd store under the unit), the
#    consumers read every byte again;
#  - the journal has no seccomp or EPERM trace of the daemon;
#  - metrics-listen on 127.0.0.1 fails to start without metrics-tcp.conf and
#    answers with it.
set -u

B=$(cd "${1:-build}" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
here=$ROOT/tests/gpu
U=gpuipcd-hardtest
RUNDIR=/run/$U
SOCK=$RUNDIR/gpuipcd.sock
BIN=/usr/local/libexec/$U/gpuipcd
UNITS=/run/systemd/system
PORT=${GPUIPC_HARDTEST_PORT:-19464}
. "$ROOT/tests/checks.sh"

[ "$(id -u)" = 0 ] || { echo "hardened-unit.sh: run as root" >&2; exit 2; }
[ -d /run/systemd/system ] || { echo "hardened-unit.sh: systemd is not PID 1" >&2; exit 2; }
for f in "$B/gpuipcd" "$B/gpuipcctl" "$B/gpu/gpu_test"; do
        [ -x "$f" ] || { echo "hardened-unit.sh: $f missing (make && make gpu-tests)" >&2; exit 2; }
done

cleanup() {
        systemctl stop $U.socket $U.service >/dev/null 2>&1
        rm -rf "$UNITS/$U.socket" "$UNITS/$U.service" "$UNITS/$U.service.d" "$RUNDIR" \
                "/usr/local/libexec/$U"
        systemctl daemon-reload
}
trap cleanup EXIT
trap 'exit 1' INT TERM

getent passwd gpuipcd >/dev/null && getent group gpuipc >/dev/null ||
        systemd-sysusers "$ROOT/systemd/gpuipcd.sysusers"
install -D -m 0755 "$B/gpuipcd" "$BIN"
install -d -m 0755 -o gpuipcd -g gpuipc "$RUNDIR"

sed -e "s|^ExecStart=/usr/sbin/gpuipcd|ExecStart=$BIN --no-config|" \
    -e "s|gpuipcd\.socket|$U.socket|g" \
    -e "s|^ReadWritePaths=-/run/gpuipcd$|ReadWritePaths=-$RUNDIR|" \
    "$ROOT/systemd/gpuipcd.service" >"$UNITS/$U.service"
sed -e "s|^ListenStream=/run/gpuipcd/gpuipcd.sock|ListenStream=$SOCK|" \
    "$ROOT/systemd/gpuipcd.socket" >"$UNITS/$U.socket"
echo "== the test units differ from the shipped ones only in:"
diff "$ROOT/systemd/gpuipcd.service" "$UNITS/$U.service"
diff "$ROOT/systemd/gpuipcd.socket" "$UNITS/$U.socket"
systemctl daemon-reload
since=$(date '+%Y-%m-%d %H:%M:%S')
check "systemctl start $U.socket" systemctl start $U.socket
echo "== systemd-analyze security $U.service"
systemd-analyze security $U.service | tail -n 1

export GPUIPC_SOCKET=$SOCK GPUIPC_GPU_PTX=$here/kernels.ptx
check "first connection starts the hardened daemon (ping)" sh -c '"$1" ping >/dev/null' - "$B/gpuipcctl"
check "$U.service is active" systemctl is-active --quiet $U.service
"$B/gpuipcctl" stats >"$RUNDIR.stats" 2>&1
grep -i '^cuda:' "$RUNDIR.stats" | sed 's/^/    /'
check "stats: the daemon loaded libcuda inside the sandbox (cuda: driver N)" \
        grep -Eq '^cuda: +driver [1-9]' "$RUNDIR.stats"
rm -f "$RUNDIR.stats"

check "vmm producer registers and exits" "$B/gpu/gpu_test" producer vmm
check "adopt producer registers, adopts (device copy in the daemon) and frees its memory" \
        "$B/gpu/gpu_test" producer adopt
check "vmm consumer reads every byte" "$B/gpu/gpu_test" consumer vmm
check "adopt consumer reads every byte" "$B/gpu/gpu_test" consumer adopt
pid0=$(systemctl show -p MainPID --value $U.service)
check "systemctl restart $U.service" systemctl restart $U.service
pid1=$(systemctl show -p MainPID --value $U.service)
check "a new daemon runs ($pid0 -> $pid1)" [ "$pid1" != "$pid0" -a "$pid1" != 0 ]
check "after the restart: vmm bytes" "$B/gpu/gpu_test" consumer vmm
check "after the restart: adopted bytes" "$B/gpu/gpu_test" consumer adopt
"$B/gpuipcctl" rm gpu/vmm >/dev/null 2>&1
"$B/gpuipcctl" rm gpu/adopt >/dev/null 2>&1

journalctl -q -u $U.service --since "$since" --no-pager >"$RUNDIR.journal" 2>&1
check "journal: no seccomp, SIGSYS or 'Operation not permitted'" \
        sh -c '! grep -Ei "seccomp|SIGSYS|operation not permitted|permission denied" "$1"' - "$RUNDIR.journal"
[ "$failed" -eq 0 ] || sed 's/^/    journal: /' "$RUNDIR.journal"
rm -f "$RUNDIR.journal"

# Metrics over TCP needs the drop-in (RestrictAddressFamilies=AF_UNIX).
systemctl stop $U.service
mkdir -p "$UNITS/$U.service.d"
printf '[Service]\nExecStart=\nExecStart=%s --no-config --metrics-listen 127.0.0.1:%s\n' \
        "$BIN" "$PORT" >"$UNITS/$U.service.d/tcp.conf"
systemctl daemon-reload
timeout 15 "$B/gpuipcctl" ping >/dev/null 2>&1
sleep 1
check "metrics on 127.0.0.1 without metrics-tcp.conf: the service does not stay up" \
        sh -c '! systemctl is-active --quiet "$1"' - $U.service
journalctl -q -u $U.service --since "$since" --no-pager | grep -i "metrics" | tail -n 3 | sed 's/^/    /'
cp "$ROOT/systemd/metrics-tcp.conf" "$UNITS/$U.service.d/"
systemctl daemon-reload
# Failed starts may have tripped the start limit of the service and socket.
systemctl stop $U.service >/dev/null 2>&1
systemctl reset-failed $U.service $U.socket >/dev/null 2>&1
systemctl restart $U.socket
check "with metrics-tcp.conf: ping" sh -c '"$1" ping >/dev/null' - "$B/gpuipcctl"
check "with metrics-tcp.conf: GET /metrics on 127.0.0.1:$PORT" \
        sh -c 'python3 -c "import urllib.request, sys; sys.exit(0 if b\"gpuipcd_\" in urllib.request.urlopen(\"http://127.0.0.1:$1/metrics\", timeout=5).read() else 1)"' - "$PORT"
finish

#!/bin/sh
# Checks systemd/ against systemd's own tools, and gpuipcd's socket
# activation, without systemd as PID 1.
#
#   tests/systemd/check.sh [BUILDDIR]        (make check-systemd)
#
# 1. systemd-analyze verify --root=STAGE on the shipped units, unchanged:
#    STAGE holds a copy of this host's unit directory, the units, BUILDDIR's
#    gpuipcd at /usr/sbin/gpuipcd (ExecStart=) and the man pages the units'
#    Documentation= names.  verify exits 0 even for unparsable settings, so
#    any output at all counts as a failure.
# 2. systemd-analyze security --offline=yes: exposure must stay at or under
#    $EXPOSURE_MAX (1.5), and at or under $EXPOSURE_TCP_MAX (2.0) with the
#    metrics-tcp.conf drop-in, which must allow inet sockets and nothing
#    else; the unit stripped of its syscall filter and address families
#    must score above $EXPOSURE_MAX (the check can fail).
# 3. Static rules for the units (Type=notify, DevicePolicy=closed, no
#    RuntimeDirectory=, WatchdogSec= exactly when daemon/ sends WATCHDOG=1...).
# 4. systemd-sysusers and systemd-tmpfiles --root=STAGE on the sysusers.d and
#    tmpfiles.d files.
# 5. systemd-socket-activate -l SOCKET BUILDDIR/gpuipcd: ping through the
#    passed socket, SIGTERM leaves the socket file, and a second activation
#    on the same path works.
# 6. tests/systemd/reactivate.py: one listening socket handed to two daemons
#    in turn, READY=1/STOPPING=1 over NOTIFY_SOCKET, a client that connected
#    in between is answered, WATCHDOG=1 at half of WATCHDOG_USEC.
#
# Prints PASS/FAIL lines and "N passed, N failed"; exits 1 if any failed.
# Skips (exit 0) only when systemd-analyze or systemd-socket-activate is
# missing.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILDDIR=${1:-$ROOT/build}
case $BUILDDIR in /*) ;; *) BUILDDIR=$ROOT/$BUILDDIR ;; esac
DAEMON=$BUILDDIR/gpuipcd
CTL=$BUILDDIR/gpuipcctl
EXPOSURE_MAX=${EXPOSURE_MAX:-1.5}
EXPOSURE_TCP_MAX=${EXPOSURE_TCP_MAX:-2.0}
PYTHON=${PYTHON:-$(command -v /usr/bin/python3 || command -v python3 || echo python3)}
SD=$ROOT/systemd
. "$ROOT/tests/checks.sh"

for tool in systemd-analyze systemd-socket-activate; do
        if ! command -v $tool >/dev/null 2>&1; then
                echo "skipped: $tool not found (apt-get install systemd)"
                finish
        fi
done
for f in "$DAEMON" "$CTL"; do
        [ -x "$f" ] || { fail "$f is not built (run make)"; finish; }
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuipc-systemd.XXXXXX")
PIDS=
cleanup() {
        for p in $PIDS; do kill "$p" 2>/dev/null; done
        rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- 1. systemd-analyze verify on a staged root ----------------------------
STAGE=$TMP/root
UNITDIR=$STAGE/usr/lib/systemd/system
mkdir -p "$UNITDIR" "$STAGE/usr/sbin" "$STAGE/etc" "$STAGE/usr/share/man/man1" \
        "$STAGE/usr/share/man/man8"
cp -a /usr/lib/systemd/system/. "$UNITDIR/" 2>/dev/null || cp -a /lib/systemd/system/. "$UNITDIR/"
cp "$SD/gpuipcd.service" "$SD/gpuipcd.socket" "$UNITDIR/"
cp "$DAEMON" "$STAGE/usr/sbin/gpuipcd"
man_opt=--man=no
if [ -f "$ROOT/docs/man/gpuipcd.8" ] && [ -f "$ROOT/docs/man/gpuipcctl.1" ] &&
   command -v man >/dev/null 2>&1; then
        cp "$ROOT/docs/man/gpuipcd.8" "$STAGE/usr/share/man/man8/"
        cp "$ROOT/docs/man/gpuipcctl.1" "$STAGE/usr/share/man/man1/"
        man_opt=--man=yes
fi
echo "== MANPATH=$STAGE/usr/share/man systemd-analyze verify $man_opt --root=$STAGE gpuipcd.socket gpuipcd.service"
out=$(MANPATH=$STAGE/usr/share/man systemd-analyze verify $man_opt --root="$STAGE" \
        gpuipcd.socket gpuipcd.service 2>&1)
rc=$?
[ -n "$out" ] && echo "$out" | sed 's/^/    /'
check "systemd-analyze verify: exit 0, no diagnostics ($man_opt)" [ $rc -eq 0 -a -z "$out" ]

# The same check must notice a missing ExecStart binary, or it proves nothing.
mv "$STAGE/usr/sbin/gpuipcd" "$STAGE/usr/sbin/gpuipcd.off"
out=$(systemd-analyze verify --man=no --root="$STAGE" gpuipcd.service 2>&1)
check "systemd-analyze verify notices a missing /usr/sbin/gpuipcd" \
        sh -c 'echo "$1" | grep -q "/usr/sbin/gpuipcd"' - "$out"
mv "$STAGE/usr/sbin/gpuipcd.off" "$STAGE/usr/sbin/gpuipcd"

# --- 2. exposure -------------------------------------------------------------
SEC=$TMP/security
exposure() {    # the overall score of gpuipcd.service as staged; the report in $SEC
        systemd-analyze security --offline=yes --root="$STAGE" --threshold=100 \
                gpuipcd.service >"$SEC" 2>&1
        sed -n 's/.*Overall exposure level for gpuipcd.service: \([0-9.]*\).*/\1/p' "$SEC"
}
at_most() { awk -v s="${1:-99}" -v m="$2" 'BEGIN { exit !(s + 0 <= m + 0) }'; }
score=$(exposure)
echo "== systemd-analyze security --offline=yes: exposure ${score:-?} (at most $EXPOSURE_MAX)"
check "exposure ${score:-?} <= $EXPOSURE_MAX" at_most "$score" "$EXPOSURE_MAX"
check "security: no inet, netlink or packet sockets" sh -c \
        'grep -F "RestrictAddressFamilies=~AF_(INET|INET6) " "$1" | grep -q "✓" &&
         grep -F "RestrictAddressFamilies=~AF_NETLINK " "$1" | grep -q "✓" &&
         grep -F "RestrictAddressFamilies=~AF_PACKET " "$1" | grep -q "✓"' - "$SEC"
# The drop-in for metrics over TCP: inet on top of AF_UNIX, nothing more.
mkdir -p "$STAGE/etc/systemd/system/gpuipcd.service.d"
cp "$SD/metrics-tcp.conf" "$STAGE/etc/systemd/system/gpuipcd.service.d/"
out=$(systemd-analyze verify --man=no --root="$STAGE" gpuipcd.service 2>&1)
[ -n "$out" ] && echo "$out" | sed 's/^/    /'
check "metrics-tcp.conf: verify, no diagnostics" [ -z "$out" ]
score=$(exposure)
echo "== with metrics-tcp.conf: exposure ${score:-?} (at most $EXPOSURE_TCP_MAX)"
check "metrics-tcp.conf: exposure ${score:-?} <= $EXPOSURE_TCP_MAX" at_most "$score" "$EXPOSURE_TCP_MAX"
check "metrics-tcp.conf: inet sockets allowed, netlink and packet still not" sh -c \
        'grep -F "RestrictAddressFamilies=~AF_(INET|INET6) " "$1" | grep -q "✗" &&
         grep -F "RestrictAddressFamilies=~AF_NETLINK " "$1" | grep -q "✓" &&
         grep -F "RestrictAddressFamilies=~AF_PACKET " "$1" | grep -q "✓"' - "$SEC"
rm -r "$STAGE/etc/systemd/system/gpuipcd.service.d"
# The threshold must catch a unit that lost its filters.
cp "$UNITDIR/gpuipcd.service" "$TMP/gpuipcd.service.real"
grep -Ev '^(SystemCallFilter|SystemCallErrorNumber|RestrictAddressFamilies|RemoveIPC|PrivateMounts)=' \
        "$TMP/gpuipcd.service.real" >"$UNITDIR/gpuipcd.service"
score=$(exposure)
check "the unit without its filters scores above $EXPOSURE_MAX (${score:-?})" \
        sh -c '! awk -v s="${1:-0}" -v m="$2" "BEGIN { exit !(s + 0 <= m + 0) }"' - "$score" "$EXPOSURE_MAX"
cp "$TMP/gpuipcd.service.real" "$UNITDIR/gpuipcd.service"

# --- 3. static rules -----------------------------------------------------------
svc=$SD/gpuipcd.service
sock=$SD/gpuipcd.socket
has() { grep -Eq "^$2" "$1"; }
check "service is Type=notify" has "$svc" 'Type=notify$'
check "service ExecStart=/usr/sbin/gpuipcd (where the package installs it)" \
        has "$svc" 'ExecStart=/usr/sbin/gpuipcd( |$)'
check "service runs as User=gpuipcd" has "$svc" 'User=gpuipcd$'
check "service requires and follows gpuipcd.socket" \
        sh -c 'grep -q "^Requires=gpuipcd.socket" "$1" && grep -q "^After=gpuipcd.socket" "$1"' - "$svc"
check "service DevicePolicy=closed" has "$svc" 'DevicePolicy=closed$'
check "service allows /dev/nvidiactl" has "$svc" 'DeviceAllow=/dev/nvidiactl rw'
check "service allows /dev/nvidia-uvm" has "$svc" 'DeviceAllow=/dev/nvidia-uvm rw'
check "service allows the GPU nodes (char-nvidia-frontend)" has "$svc" 'DeviceAllow=char-nvidia-frontend rw'
check "service wants and follows modprobe@nvidia-uvm.service" \
        sh -c 'grep -q "^Wants=modprobe@nvidia-uvm.service" "$1" && grep -q "^After=modprobe@nvidia-uvm.service" "$1"' - "$svc"
check "service has no PrivateDevices= (it would hide the GPU)" sh -c '! grep -q "^PrivateDevices=" "$1"' - "$svc"
check "no RuntimeDirectory= (it deletes the activation socket on stop)" \
        sh -c '! grep -q "^RuntimeDirectory=" "$1" "$2"' - "$svc" "$sock"
check "service sets LimitNOFILE=" has "$svc" 'LimitNOFILE=[0-9]+$'
check "service filters system calls: @system-service, not @privileged, EPERM" sh -c \
        'grep -q "^SystemCallFilter=@system-service$" "$1" && grep -q "^SystemCallFilter=~@privileged$" "$1" &&
         grep -q "^SystemCallErrorNumber=EPERM$" "$1"' - "$svc"
check "service allows AF_UNIX sockets only (metrics-tcp.conf adds inet)" \
        sh -c '[ "$(grep "^RestrictAddressFamilies=" "$1")" = "RestrictAddressFamilies=AF_UNIX" ]' - "$svc"
check "service sets RemoveIPC=yes and PrivateMounts=yes" \
        sh -c 'grep -q "^RemoveIPC=yes$" "$1" && grep -q "^PrivateMounts=yes$" "$1"' - "$svc"
# ProtectProc= would hide the clients' /proc/PID/stat (session_start_time).
if grep -q '"/proc/%" PRIu32 "/stat"' "$ROOT"/daemon/*.c; then
        check "no ProtectProc= (the daemon reads clients' /proc/PID/stat)" \
                sh -c '! grep -q "^ProtectProc=" "$1"' - "$svc"
fi
if grep -q 'WATCHDOG=1' "$ROOT"/daemon/*.c; then
        check "daemon sends WATCHDOG=1, so the service sets WatchdogSec=" has "$svc" 'WatchdogSec='
else
        check "no WatchdogSec= (the daemon sends no WATCHDOG=1)" sh -c '! grep -q "^WatchdogSec=" "$1"' - "$svc"
fi
default=$(sed -n 's/^#define GPUIPC_DEFAULT_SOCKET "\(.*\)"/\1/p' "$ROOT/client/gpuipc.h")
check "socket ListenStream= is GPUIPC_DEFAULT_SOCKET ($default)" has "$sock" "ListenStream=$default\$"
check "socket is owned by gpuipcd:gpuipc, mode 0660" sh -c \
        'grep -q "^SocketUser=gpuipcd$" "$1" && grep -q "^SocketGroup=gpuipc$" "$1" && grep -q "^SocketMode=0660$" "$1"' - "$sock"
check "socket is not removed on stop" sh -c '! grep -q "^RemoveOnStop=yes" "$1"' - "$sock"
check "socket is WantedBy=sockets.target" has "$sock" 'WantedBy=sockets.target$'

# --- 4. sysusers.d and tmpfiles.d --------------------------------------------
out=$(systemd-sysusers --root="$STAGE" "$SD/gpuipcd.sysusers" 2>&1)
rc=$?
[ $rc -eq 0 ] || echo "$out" | sed 's/^/    /'
check "systemd-sysusers accepts gpuipcd.sysusers" [ $rc -eq 0 ]
check "sysusers creates user gpuipcd" grep -q '^gpuipcd:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' "$STAGE/etc/passwd"
check "sysusers creates group gpuipc with member gpuipcd" grep -q '^gpuipc:x:[0-9]*:gpuipcd$' "$STAGE/etc/group"
uid=$(awk -F: '$1 == "gpuipcd" { print $3 }' "$STAGE/etc/passwd")
gid=$(awk -F: '$1 == "gpuipc" { print $3 }' "$STAGE/etc/group")
out=$(systemd-tmpfiles --root="$STAGE" --create "$SD/gpuipcd.tmpfiles" 2>&1)
rc=$?
if [ "$(id -u)" = 0 ]; then
        [ $rc -eq 0 ] || echo "$out" | sed 's/^/    /'
        check "systemd-tmpfiles creates /run/gpuipcd 0755 gpuipcd:gpuipc" \
                [ $rc -eq 0 -a "$(stat -c '%a %u %g' "$STAGE/run/gpuipcd" 2>/dev/null)" = "755 $uid $gid" ]
else
        # Not root: tmpfiles cannot chown, so only the directory is checked.
        check "systemd-tmpfiles creates /run/gpuipcd 0755 (owner not checked: not root)" \
                [ "$(stat -c '%a' "$STAGE/run/gpuipcd" 2>/dev/null)" = 755 ]
fi

# --- 5. systemd-socket-activate -------------------------------------------------
S=$TMP/act.sock
ping_ok() { timeout 10 "$CTL" --socket "$S" ping >/dev/null 2>>"$TMP/act.log"; }
wait_gone() {   # wait_gone PID: up to 10 s
        i=0
        while kill -0 "$1" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
        ! kill -0 "$1" 2>/dev/null
}
activate() {    # starts systemd-socket-activate; it execs gpuipcd on the first connection
        : >> "$TMP/act.log"     # exists before the background job opens it
        n0=$(grep -c '^Listening on' "$TMP/act.log")
        env -u GPUIPC_SOCKET -u NOTIFY_SOCKET systemd-socket-activate -l "$S" "$DAEMON" \
                >>"$TMP/act.log" 2>&1 &
        apid=$!
        PIDS="$PIDS $apid"
        # The old socket file may still be there: wait for the new bind.
        i=0
        while [ "$(grep -c '^Listening on' "$TMP/act.log")" -le "${n0:-0}" ] && [ $i -lt 100 ]; do
                sleep 0.1; i=$((i + 1))
        done
}
echo "== systemd-socket-activate -l $S $DAEMON"
# The log exists before the first start: the wait in activate() reads it
# while the background shell may not have opened it yet.
: >"$TMP/act.log"
activate
check "activation: ping through the passed socket" ping_ok
check "activation: the daemon answering is the activated process (pid $apid)" \
        sh -c 'timeout 10 "$1" --socket "$2" ping | grep -q "(pid $3,"' - "$CTL" "$S" "$apid"
check "activation: the daemon logs the passed socket's path" grep -q "listening on $S," "$TMP/act.log"
kill -TERM "$apid"
check "activation: SIGTERM stops the daemon" wait_gone "$apid"
wait "$apid"; rc=$?
check "activation: exit status 0 after SIGTERM (got $rc)" [ $rc -eq 0 ]
check "activation: the socket file survives SIGTERM (not unlinked)" [ -S "$S" ]
activate
check "second activation on the same path: ping" ping_ok
kill -TERM "$apid"
check "second activation: SIGTERM stops the daemon" wait_gone "$apid"
check "second activation: the socket file survives" [ -S "$S" ]
if [ "$failed" -gt 0 ]; then sed 's/^/    /' "$TMP/act.log"; fi

# --- 6. one socket, two daemons, NOTIFY_SOCKET ------------------------------
echo "== $PYTHON tests/systemd/reactivate.py"
if command -v "$PYTHON" >/dev/null 2>&1; then
        "$PYTHON" "$ROOT/tests/systemd/reactivate.py" "$DAEMON" "$CTL" "$TMP" >"$TMP/react.out" 2>&1
        cat "$TMP/react.out"
        passed=$((passed + $(grep -c '^PASS ' "$TMP/react.out")))
        n=$(grep -c '^FAIL ' "$TMP/react.out")
        failed=$((failed + n))
        grep -q '^PASS ' "$TMP/react.out" || { echo "FAIL reactivate.py ran no checks"; failed=$((failed + 1)); }
        [ "$n" -eq 0 ] || sed 's/^/    /' "$TMP/react.log" 2>/dev/null
else
        fail "reactivate.py: $PYTHON not found"
fi

finish

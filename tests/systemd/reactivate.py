#!/usr/bin/env python3
"""What systemd does with gpuipcd.socket, without systemd.

systemd-socket-activate execs the daemon in its own place, so it cannot show
the part that matters after a stop: systemd keeps the listening socket open,
clients that connect while no daemon runs wait in its backlog, and the next
start gets the same socket.  This helper holds one listening socket, starts
gpuipcd on it twice (LISTEN_FDS=1, LISTEN_PID, NOTIFY_SOCKET as systemd sets
them), and prints one 'PASS name' or 'FAIL name: why' line per check.

usage: reactivate.py GPUIPCD GPUIPCCTL DIR
"""
import os
import socket
import subprocess
import sys
import time

daemon, ctl, tmp = sys.argv[1:4]
path = os.path.join(tmp, "react.sock")
notify_path = os.path.join(tmp, "notify")
failed = False


def check(name, ok, why=""):
    global failed
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)), flush=True)
    failed |= not ok


def recv_notify(ns, want, timeout=10.0):
    """Collects datagrams until one carries the line `want`; returns all."""
    got = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ns.settimeout(max(0.01, end - time.monotonic()))
        try:
            msg = ns.recv(4096).decode()
        except socket.timeout:
            break
        got.append(msg)
        if want in msg.split("\n"):
            break
    return got


def start(lfd, ns_path):
    # LISTEN_PID must be the daemon's own pid: the shell sets it, then execs.
    env = dict(os.environ, LISTEN_FDS="1", NOTIFY_SOCKET=ns_path)
    env.pop("GPUIPC_SOCKET", None)
    return subprocess.Popen(
        ["sh", "-c", 'LISTEN_PID=$$ exec "$0" --socket "$1"', daemon,
         os.path.join(tmp, "not-this.sock")],
        env=env, pass_fds=(3,), stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(tmp, "react.log"), "a"))


def ping(timeout=10):
    return subprocess.run([ctl, "--socket", path, "ping"], capture_output=True,
                          text=True, timeout=timeout)


lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
lsock.bind(path)
lsock.listen(16)
os.dup2(lsock.fileno(), 3)          # SD_LISTEN_FDS_START
os.set_inheritable(3, True)
ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
ns.bind(notify_path)

# First start.
d1 = start(3, notify_path)
msgs = recv_notify(ns, "READY=1")
check("first start sends READY=1 to NOTIFY_SOCKET",
      any("READY=1" in m.split("\n") for m in msgs), repr(msgs))
check("READY=1 carries STATUS=listening on the passed socket",
      any(("STATUS=listening on " + path) in m.split("\n") for m in msgs), repr(msgs))
r = ping()
check("ping through the passed socket (first start)", r.returncode == 0,
      "rc %d: %s" % (r.returncode, r.stderr.strip()))
check("--socket is ignored when a socket is passed",
      not os.path.exists(os.path.join(tmp, "not-this.sock")), "not-this.sock was bound")
d1.terminate()
msgs = recv_notify(ns, "STOPPING=1")
check("SIGTERM sends STOPPING=1", any("STOPPING=1" in m.split("\n") for m in msgs), repr(msgs))
rc = d1.wait(10)
check("first daemon exits 0 on SIGTERM", rc == 0, "exit status %d" % rc)
check("socket file is still there after the daemon stopped", os.path.exists(path),
      "%s is gone" % path)

# A client that connects while no daemon runs waits in the backlog, as it
# would while systemd starts the service on demand.
waiting = subprocess.Popen([ctl, "--socket", path, "ping"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
time.sleep(0.3)
check("a client connecting while no daemon runs waits (is not refused)",
      waiting.poll() is None, "ping ended with %s" % waiting.poll())

# Second start on the same socket.
d2 = start(3, notify_path)
msgs = recv_notify(ns, "READY=1")
check("second start on the same socket sends READY=1",
      any("READY=1" in m.split("\n") for m in msgs), repr(msgs))
try:
    out, err = waiting.communicate(timeout=10)
    check("the waiting client is answered by the second daemon", waiting.returncode == 0,
          "rc %d: %s" % (waiting.returncode, err.strip()))
except subprocess.TimeoutExpired:
    waiting.kill()
    check("the waiting client is answered by the second daemon", False, "timed out")
r = ping()
check("ping through the same socket (second start)", r.returncode == 0,
      "rc %d: %s" % (r.returncode, r.stderr.strip()))
d2.terminate()
rc = d2.wait(10)
check("second daemon exits 0 on SIGTERM", rc == 0, "exit status %d" % rc)
check("socket file is still there after the second stop", os.path.exists(path),
      "%s is gone" % path)

# The watchdog, when this build of the daemon has one: WATCHDOG_USEC set
# as systemd sets it for WatchdogSec=, WATCHDOG=1 expected at half of it.
if b"WATCHDOG=1" in open(daemon, "rb").read():
    env = dict(os.environ, LISTEN_FDS="1", NOTIFY_SOCKET=notify_path, WATCHDOG_USEC="400000")
    env.pop("GPUIPC_SOCKET", None)
    d3 = subprocess.Popen(["sh", "-c", 'LISTEN_PID=$$ WATCHDOG_PID=$$ exec "$0"', daemon],
                          env=env, pass_fds=(3,), stdout=subprocess.DEVNULL,
                          stderr=open(os.path.join(tmp, "react.log"), "a"))
    msgs = recv_notify(ns, "READY=1")
    t0 = time.monotonic()
    pings = []
    while len(pings) < 3 and time.monotonic() - t0 < 3:
        pings += [m for m in recv_notify(ns, "WATCHDOG=1", 1.0) if "WATCHDOG=1" in m.split("\n")]
    took = time.monotonic() - t0
    check("WATCHDOG_USEC=400000: three WATCHDOG=1 within 1 s (took %.2f s)" % took,
          len(pings) >= 3 and took < 1.0, "%d in %.2f s" % (len(pings), took))
    d3.terminate()
    d3.wait(10)
else:
    print("note: this gpuipcd has no watchdog (no WATCHDOG=1 in the binary)")

sys.exit(1 if failed else 0)

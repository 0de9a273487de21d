#!/usr/bin/env python3
"""A stand-in for systemd's socket activation and fd store, for one daemon.

usage: fdstore-host.py DIR -- DAEMON [ARGS...]

Listens on DIR/gpuipcd.sock itself and passes it to the daemon as fd 3
(LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID), followed by the fds the daemon
stored with FDSTORE=1 (FDSTOREREMOVE=1 drops them by name; a push of an fd
already stored is ignored, as systemd does).  Commands on stdin, one per
line, each answered on stdout: `term` and `kill` stop the daemon with
SIGTERM or SIGKILL and start it again with the store; `store` lists the
stored names; EOF stops the daemon with SIGTERM.  The daemon's stderr goes
to DIR/daemon.log.  Used by tests/gpu/restart.sh on machines without
systemd as PID 1.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

d = sys.argv[1]
argv = sys.argv[sys.argv.index("--") + 1:]
sock_path, notify_path = d + "/gpuipcd.sock", d + "/notify.sock"
for p in (sock_path, notify_path):
    if os.path.exists(p):
        os.unlink(p)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sock_path)
listener.listen(128)
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(notify_path)
store = []                      # [name, fd], oldest first
lock = threading.Lock()
ready = threading.Event()


def pump():
    while True:
        msg, fds, _, _ = socket.recv_fds(notify, 8192, 64)
        kv = dict(line.split("=", 1) for line in msg.decode().split("\n") if "=" in line)
        with lock:
            if kv.get("READY") == "1":
                ready.set()
            if kv.get("FDSTORE") == "1":
                for fd in fds:
                    store.append([kv.get("FDNAME", "stored"), fd])
                fds = []
            elif kv.get("FDSTOREREMOVE") == "1" and "FDNAME" in kv:
                for entry in [e for e in store if e[0] == kv["FDNAME"]]:
                    os.close(entry[1])
                    store.remove(entry)
        for fd in fds:
            os.close(fd)


def start():
    with lock:
        ready.clear()
        names = ["gpuipcd.socket"] + [e[0] for e in reversed(store)]
        srcs = [listener.fileno()] + [e[1] for e in reversed(store)]
    high = [os.dup(fd) for fd in srcs]  # away from 3.. so that dup2 cannot clobber

    def child():
        base = 10000
        for i, fd in enumerate(high):
            os.dup2(fd, base + i)
        for i in range(len(high)):
            os.dup2(base + i, 3 + i)        # inheritable
        os.closerange(3 + len(high), base + len(high))

    env = dict(os.environ, LISTEN_FDS=str(len(srcs)), LISTEN_FDNAMES=":".join(names),
               NOTIFY_SOCKET=notify_path)
    log = open(d + "/daemon.log", "a")
    # LISTEN_PID must be the daemon's own pid: exec through sh, whose $$ it keeps.
    p = subprocess.Popen(["/bin/sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh"] + argv, env=env,
                         preexec_fn=child, close_fds=False, stderr=log, stdout=log)
    for fd in high:
        os.close(fd)
    if not ready.wait(30):
        print("daemon did not report READY=1", flush=True)
        sys.exit(1)
    return p


threading.Thread(target=pump, daemon=True).start()
proc = start()
print("ready", proc.pid, flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd in ("term", "kill"):
        proc.send_signal(signal.SIGTERM if cmd == "term" else signal.SIGKILL)
        rc = proc.wait()
        time.sleep(0.2)         # the notify messages it sent before dying
        proc = start()
        with lock:
            print("restarted after exit", rc, "pid", proc.pid, "store",
                  " ".join(sorted(e[0] for e in store)), flush=True)
    elif cmd == "store":
        with lock:
            print("store", " ".join(sorted(e[0] for e in store)), flush=True)
proc.send_signal(signal.SIGTERM)
sys.exit(proc.wait())

#!/usr/bin/env python3
"""record-client.py: seeds for fuzz-client.c, recorded from a real gpuipcd.

  record-client.py DAEMON_SOCKET PROXY_SOCKET OUT_PREFIX

listens on PROXY_SOCKET and forwards each connection to DAEMON_SOCKET,
fds included (SCM_RIGHTS), writing what the daemon sent on connection i
to OUT_PREFIX.i.  Run the replay binary over a two-byte input (call,
flags) with GPUIPC_FUZZ_CLIENT_SOCKET=PROXY_SOCKET, then make the seed:
the same two bytes followed by OUT_PREFIX.0 (and, for a reconnect, the
separator of fuzz-client.c and OUT_PREFIX.1).  Stops after a second idle."""
import os
import select
import socket
import sys

daemon, proxy, out = sys.argv[1:4]
if os.path.exists(proxy):
    os.unlink(proxy)
lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
lst.bind(proxy)
lst.listen(8)
pairs = {}          # socket -> (peer, record file or None)
n = 0
while True:
    ready, _, _ = select.select([lst] + list(pairs), [], [], 1.0)
    if not ready:
        break
    for s in ready:
        if s is lst:
            cl, _ = lst.accept()
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            up.connect(daemon)
            pairs[cl] = (up, None)
            pairs[up] = (cl, open(f"{out}.{n}", "wb"))
            n += 1
            continue
        if s not in pairs:
            continue
        peer, rec = pairs[s]
        data, fds, _, _ = socket.recv_fds(s, 65536, 64)
        if not data:
            for x in (s, peer):
                if pairs[x][1]:
                    pairs[x][1].close()
                del pairs[x]
                x.close()
            continue
        if rec:
            rec.write(data)
        socket.send_fds(peer, [data], fds) if fds else peer.sendall(data)
        for fd in fds:
            os.close(fd)

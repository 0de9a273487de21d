#!/usr/bin/python3
"""Checks packaging/kubernetes/gpuipcd.yaml for syntax and structure.

    tests/kubernetes/check.py [BUILDDIR]        (make check-kubernetes)

No cluster is involved: the manifest is parsed with python3-yaml and its
documents are held to what docs/deploy.md says of them (selector and
labels, mounts and volumes, the socket path, the probes, no GPU request,
the metrics port, its scrape annotations and the flags that serve it).
With BUILDDIR/gpuipcd built, the daemon's args are run through the
daemon's own parser: with the socket moved where it cannot be created, a
daemon that accepts them exits 1 (setting up failed), one that refuses
them exits 2 (usage error).

Prints PASS/FAIL lines and "N passed, N failed", as tests/checks.sh does;
exits 1 if any failed.
"""
import os
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("FAIL python3-yaml is not installed (apt-get install python3-yaml)")
    print("0 passed, 1 failed")
    sys.exit(1)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(ROOT, "packaging", "kubernetes", "gpuipcd.yaml")
SOCKET = "/run/gpuipcd/gpuipcd.sock"
METRICS_PORT = 9464

passed = failed = 0


def check(name, ok, why=""):
    global passed, failed
    if ok:
        passed += 1
        print("PASS " + name)
    else:
        failed += 1
        print("FAIL " + name + (": " + why if why else ""))


def finish():
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


def containers(spec):
    return spec.get("initContainers", []) + spec.get("containers", [])


def mounts_name_volumes(spec):
    volumes = {v["name"] for v in spec.get("volumes", [])}
    return all(m["name"] in volumes
               for c in containers(spec) for m in c.get("volumeMounts", []))


def mounted_at(spec, container, path):
    """The hostPath of the volume container mounts at path, or None."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        if m["mountPath"] == path and "hostPath" in volumes.get(m["name"], {}):
            return volumes[m["name"]]["hostPath"]["path"]
    return None


def flag(args, key):
    """The value of --key=VALUE in args (the manifest's form), or None."""
    for a in args:
        if a.startswith("--" + key + "="):
            return a.split("=", 1)[1]
    return None


def ping_probe(probe):
    cmd = (probe or {}).get("exec", {}).get("command", [])
    return ("httpGet" not in (probe or {}) and len(cmd) >= 2 and
            cmd[0].endswith("/gpuipcctl") and cmd[-1] == "ping" and
            "--socket" in cmd and cmd[cmd.index("--socket") + 1] == SOCKET)


def daemon_accepts(daemon, args):
    """Runs daemon with args, the socket moved two missing levels down:
    1 means the settings passed and binding failed."""
    with tempfile.TemporaryDirectory(prefix="gpuipc-k8s-") as tmp:
        sock = os.path.join(tmp, "missing", "dir", "gpuipcd.sock")
        env = {k: v for k, v in os.environ.items()
               if k not in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID")}
        r = subprocess.run([daemon, "--no-config"] + args + ["--socket=" + sock],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=30, env=env)
        return r.returncode, r.stderr.strip()


def main():
    builddir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    try:
        with open(MANIFEST) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        check("manifest parses", False, str(e))
        finish()
    check("manifest parses", True)
    kinds = [d.get("kind") for d in docs]
    check("documents: Namespace, DaemonSet, Pod", kinds == ["Namespace", "DaemonSet", "Pod"],
          repr(kinds))
    if kinds != ["Namespace", "DaemonSet", "Pod"]:
        finish()
    ns, ds, pod = docs
    name = ns["metadata"]["name"]
    check("DaemonSet and Pod are in the Namespace",
          ds["metadata"].get("namespace") == name and pod["metadata"].get("namespace") == name)

    tmpl = ds["spec"]["template"]
    spec = tmpl["spec"]
    labels = tmpl["metadata"].get("labels", {})
    sel = ds["spec"]["selector"]["matchLabels"]
    check("DaemonSet selector matches the template's labels",
          all(labels.get(k) == v for k, v in sel.items()), "%r vs %r" % (sel, labels))
    check("updateStrategy OnDelete", ds["spec"].get("updateStrategy", {}).get("type") == "OnDelete")
    check("DaemonSet mounts name its volumes", mounts_name_volumes(spec))
    check("client Pod mounts name its volumes", mounts_name_volumes(pod["spec"]))
    check("no hostPID, hostIPC or hostNetwork on the DaemonSet",
          not spec.get("hostPID") and not spec.get("hostIPC") and not spec.get("hostNetwork"))

    daemon = [c for c in spec["containers"] if c["name"] == "gpuipcd"]
    check("DaemonSet has the gpuipcd container", len(daemon) == 1)
    if len(daemon) != 1:
        finish()
    c = daemon[0]
    args = c.get("args", [])
    check("gpuipcd runs /usr/sbin/gpuipcd", c.get("command") == ["/usr/sbin/gpuipcd"])
    check("every arg is --key=value", all(a.startswith("--") and "=" in a for a in args),
          repr(args))
    check("--socket is " + SOCKET, flag(args, "socket") == SOCKET)
    check("the socket's directory is the node's (hostPath)",
          mounted_at(spec, c, os.path.dirname(SOCKET)) == os.path.dirname(SOCKET))
    check("readiness and liveness are gpuipcctl ping through the socket, no httpGet",
          ping_probe(c.get("readinessProbe")) and ping_probe(c.get("livenessProbe")))
    res = c.get("resources", {})
    check("gpuipcd requests no nvidia.com/gpu",
          not any("nvidia.com/gpu" in res.get(k, {}) for k in ("requests", "limits")))

    # Metrics: the public address with its opt-in, the port, the annotations.
    listen = flag(args, "metrics-listen")
    check("--metrics-listen=0.0.0.0:%d" % METRICS_PORT,
          listen == "0.0.0.0:%d" % METRICS_PORT, repr(listen))
    check("--metrics-public=yes", flag(args, "metrics-public") == "yes",
          repr(flag(args, "metrics-public")))
    ports = c.get("ports", [])
    check("ports: containerPort %d, name metrics, protocol TCP" % METRICS_PORT,
          {"containerPort": METRICS_PORT, "name": "metrics", "protocol": "TCP"} in ports,
          repr(ports))
    ann = tmpl["metadata"].get("annotations", {})
    # Annotation values are strings: an unquoted true or 9464 does not apply.
    check('annotation prometheus.io/scrape: "true"', ann.get("prometheus.io/scrape") == "true",
          repr(ann.get("prometheus.io/scrape")))
    check('annotation prometheus.io/port: "%d"' % METRICS_PORT,
          ann.get("prometheus.io/port") == str(METRICS_PORT),
          repr(ann.get("prometheus.io/port")))
    check("annotation prometheus.io/path: /metrics", ann.get("prometheus.io/path") == "/metrics",
          repr(ann.get("prometheus.io/path")))
    check("annotations are on the pod template, not the DaemonSet",
          not any(k.startswith("prometheus.io/")
                  for k in ds["metadata"].get("annotations", {})))

    exe = os.path.join(builddir, "gpuipcd")
    if os.access(exe, os.X_OK):
        rc, err = daemon_accepts(exe, args)
        check("gpuipcd accepts the args (exit 1 at the socket, not 2)", rc == 1,
              "exit %d: %s" % (rc, err))
        rc, err = daemon_accepts(exe, [a for a in args if not a.startswith("--metrics-public")])
        check("without --metrics-public gpuipcd refuses them (exit 2)",
              rc == 2 and "metrics-public=yes" in err, "exit %d: %s" % (rc, err))
    else:
        check("gpuipcd is built at " + exe + " (run make)", False)
    finish()


if __name__ == "__main__":
    main()

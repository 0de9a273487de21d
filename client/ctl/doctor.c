/* doctor.c: gpuipcctl doctor: why handoff may not work from this process.
 *
 * Each check ends in a verdict (ok, warn, fail) and one sentence.  The exit
 * status is 3 when the daemon cannot be reached (as for every subcommand),
 * else 1 when any check failed.  Checks that need the daemon are skipped
 * (with a fail for the socket) when it cannot be reached. */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl doctor [--socket PATH] [--json]\n\n"
        "Checks, from this process: the socket and its permissions, the daemon's\n"
        "version, the CUDA driver here and in the daemon, the visible devices and\n"
        "the handle types they support, the peer-access matrix of the visible GPUs\n"
        "(cuDeviceCanAccessPeer for every pair), and whether this process shares the\n"
        "daemon's PID and IPC namespaces, and what the allocators of this environment\n"
        "(PYTORCH_CUDA_ALLOC_CONF) need.  Prints one verdict per check (ok, warn,\n"
        "fail) and a summary line; exits 3 when the daemon is unreachable, else 1\n"
        "if any check failed.  --json prints the checks and a \"summary\" object.\n";

#define MSG_MAX 512

struct check {
        const char *name;
        const char *verdict;
        char msg[MSG_MAX];
};

static struct check checks[32];
static unsigned n_checks;
static bool failed;
/* The peer-access matrix for --json: peer[i * n_peer + j] is 1 when device
 * i can access device j's memory, 0 when not, -1 unknown. */
#define PEER_MAX 16
static int peer[PEER_MAX * PEER_MAX];
static uint32_t n_peer;

static void add(const char *name, const char *verdict, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void add(const char *name, const char *verdict, const char *fmt, ...)
{
        struct check *k;
        va_list ap;

        if (n_checks == sizeof(checks) / sizeof(checks[0]))
                return;
        k = &checks[n_checks++];
        k->name = name;
        k->verdict = verdict;
        va_start(ap, fmt);
        vsnprintf(k->msg, sizeof(k->msg), fmt, ap);
        va_end(ap);
        if (strcmp(verdict, "fail") == 0)
                failed = true;
}

static void check_socket_file(const char *path)
{
        struct stat st;
        struct passwd *pw;
        struct group *gr;
        char owner[96];

        if (stat(path, &st) < 0) {
                add("socket", "fail", "%s: %s; is gpuipcd running, and is this the socket it "
                    "uses (--socket, $GPUIPC_SOCKET)?", path, strerror(errno));
                return;
        }
        pw = getpwuid(st.st_uid);
        gr = getgrgid(st.st_gid);
        snprintf(owner, sizeof(owner), "%s:%s", pw ? pw->pw_name : "?", gr ? gr->gr_name : "?");
        if (!S_ISSOCK(st.st_mode)) {
                add("socket", "fail", "%s exists but is not a socket", path);
                return;
        }
        if (access(path, R_OK | W_OK) < 0)
                add("socket", "fail", "%s (mode %04o, owner %s) is not writable by uid %u: "
                    "join group %s or ask for socket-mode to allow it", path,
                    (unsigned)(st.st_mode & 07777), owner, (unsigned)geteuid(),
                    gr ? gr->gr_name : "?");
        else
                add("socket", "ok", "%s is a socket (mode %04o, owner %s) this user may open",
                    path, (unsigned)(st.st_mode & 07777), owner);
}

/* The daemon's pid as this PID namespace sees it (SO_PEERCRED translates
 * it; 0 when the daemon's namespace is not visible from ours), or -1. */
static long peer_pid(const char *path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct ucred cred;
        socklen_t len = sizeof(cred);
        long pid = -1;
        int fd;

        if (strlen(path) >= sizeof(sa.sun_path))
                return -1;
        strcpy(sa.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
                pid = cred.pid;
        close(fd);
        return pid;
}

static void check_ns(const char *what, const char *ns, long pid)
{
        char self[64], a[128], b[128], other[64];
        ssize_t na, nb;

        snprintf(self, sizeof(self), "/proc/self/ns/%s", ns);
        snprintf(other, sizeof(other), "/proc/%ld/ns/%s", pid, ns);
        na = readlink(self, a, sizeof(a) - 1);
        nb = readlink(other, b, sizeof(b) - 1);
        if (na < 0 || nb < 0) {
                add(what, "warn", "cannot compare %s namespaces (%s: %s); run as root or as the "
                    "daemon's user to check", ns, na < 0 ? self : other, strerror(errno));
                return;
        }
        a[na] = b[nb] = '\0';
        if (strcmp(a, b) == 0) {
                add(what, "ok", "this process shares the daemon's %s namespace (%s)", ns, a);
                return;
        }
        if (strcmp(ns, "ipc") == 0)
                add(what, "warn", "this process is in another IPC namespace (%s, daemon %s): "
                    "cuda-ipc handles from producers outside it may fail to open; host and "
                    "cuda-vmm buffers (fds) are unaffected", a, b);
        else
                add(what, "warn", "this process is in another PID namespace (%s, daemon %s): "
                    "owner pids are the daemon's view, and cuda-ipc between namespaces may "
                    "fail; host and cuda-vmm buffers (fds) are unaffected", a, b);
}

/* One line for the whole matrix: "0->1 yes, 1->0 no, ...". */
static void check_peer(const gpuipc_cuda_status *s)
{
        char msg[MSG_MAX];
        size_t len = 0;
        bool all = true;
        uint32_t n = s->n_devices;

        if (n == 0)
                return;
        n_peer = n < PEER_MAX ? n : PEER_MAX;
        for (uint32_t i = 0; i < n_peer; i++)
                for (uint32_t j = 0; j < n_peer; j++)
                        peer[i * n_peer + j] = gpuipc_cuda_status_peer(s, i, j);
        if (n < 2) {
                add("peer", "ok", "one visible GPU: no peer access to check");
                return;
        }
        msg[0] = '\0';
        for (uint32_t i = 0; i < n_peer; i++)
                for (uint32_t j = 0; j < n_peer; j++) {
                        int v = gpuipc_cuda_status_peer(s, i, j);
                        if (i == j)
                                continue;
                        if (v != 1)
                                all = false;
                        if (len < sizeof(msg))
                                len += (size_t)snprintf(msg + len, sizeof(msg) - len, "%s%d->%d %s",
                                                        len ? ", " : "",
                                                        gpuipc_cuda_status_device(s, i)->ordinal,
                                                        gpuipc_cuda_status_device(s, j)->ordinal,
                                                        v == 1 ? "yes" : v == 0 ? "NO" : "unknown");
                }
        add("peer", all ? "ok" : "warn", "peer access (device->memory of device, "
            "cuDeviceCanAccessPeer): %s%s", msg, all ? "" :
            "; a consumer on a GPU without peer access to the buffer's GPU needs "
            "GPUIPC_LOOKUP_COPY_TO_DEVICE (a copy)");
}

static void check_cuda_here(void)
{
        gpuipc_cuda_status *s = NULL;
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");

        if (gpuipc_cuda_status_get(&s) < 0) {
                add("cuda", "warn", "cannot query the CUDA driver: out of memory");
                return;
        }
        if (!s->available) {
                add("cuda", "warn", "CUDA: unavailable (%s); host buffers work, GPU buffers do "
                    "not in this process", s->reason[0] ? s->reason : "no reason given");
                gpuipc_cuda_status_free(s);
                return;
        }
        add("cuda", "ok", "CUDA driver %" PRIu32 ".%" PRIu32 " loaded in this process",
            s->driver_version / 1000, s->driver_version % 1000 / 10);
        if (s->n_devices == 0)
                add("devices", "warn", "no CUDA device is visible (CUDA_VISIBLE_DEVICES=%s)",
                    cvd ? cvd : "<unset>");
        for (uint32_t i = 0; i < s->n_devices; i++) {
                const gpuipc_cuda_device *d = gpuipc_cuda_status_device(s, i);
                add("device", "ok", "device %d is %s (CUDA_VISIBLE_DEVICES=%s)", d->ordinal,
                    d->uuid, cvd ? cvd : "<unset>");
                add("handles", d->vmm_posix_fd == 1 ? "ok" : "warn",
                    "%s: POSIX-fd VMM handles (cuda-vmm) %s; legacy IPC (cuda-ipc) %s", d->uuid,
                    d->vmm_posix_fd == 1 ? "supported" :
                    d->vmm_posix_fd == 0 ? "NOT supported" : "unknown",
                    d->legacy_ipc == 1 ? "supported" :
                    d->legacy_ipc == 0 ? "NOT supported" : "unknown");
        }
        check_peer(s);
        gpuipc_cuda_status_free(s);
}

/* What the allocators a process of this environment would use need
 * (PYTORCH_CUDA_ALLOC_CONF as this shell has it). */
static void check_allocators(void)
{
        const char *conf = getenv("PYTORCH_CUDA_ALLOC_CONF");

        if (conf && strstr(conf, "cudaMallocAsync"))
                add("allocator", "warn", "PYTORCH_CUDA_ALLOC_CONF=%s: torch allocates from the "
                    "device's default stream-ordered pool, which CUDA cannot share: register "
                    "with copy=True (GPUIPC_REGISTER_COPY), or allocate from a pool created with "
                    "a POSIX fd handle type (cuda-pool)", conf);
        else if (conf && strstr(conf, "expandable_segments:True"))
                add("allocator", "ok", "PYTORCH_CUDA_ALLOC_CONF=%s: torch tensors are cuda-vmm "
                    "over 2 or 20 MiB VMM chunks (at most 64 chunks a registration), durable, "
                    "and they cross PID namespaces", conf);
        else
                add("allocator", "ok", "torch's default caching allocator and CuPy's default "
                    "pool: cuda-ipc at an offset, producer-bound; consumers must share the "
                    "producer's PID namespace (register cacheable=True to keep reused blocks "
                    "mapped)");
        add("allocator", "ok", "stream-ordered pools: shared as cuda-pool only when created with "
            "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (RMM's cuda_async_memory_resource with "
            "an export handle type, cuda.core's IPC-enabled resource); the default pool "
            "(CuPy's MemoryAsyncPool, torch's cudaMallocAsync) needs copy=True; "
            "gpuipc.explain(array) tells for one array");
}

static unsigned count(const char *verdict)
{
        unsigned n = 0;

        for (unsigned i = 0; i < n_checks; i++)
                n += strcmp(checks[i].verdict, verdict) == 0;
        return n;
}

static void print_text(void)
{
        size_t w = 0;

        for (unsigned i = 0; i < n_checks; i++)
                if (strlen(checks[i].name) > w)
                        w = strlen(checks[i].name);
        for (unsigned i = 0; i < n_checks; i++)
                printf("[%-4s] %-*s %s\n", checks[i].verdict, (int)w, checks[i].name,
                       checks[i].msg);
        printf("%u checks: %u ok, %u warn, %u fail\n", n_checks, count("ok"), count("warn"),
               count("fail"));
}

static void print_json(bool reachable)
{
        printf("{\n  \"ok\": %s,\n  \"summary\": {\"checks\": %u, \"ok\": %u, \"warn\": %u, "
               "\"fail\": %u, \"reachable\": %s},\n  \"checks\": [", failed ? "false" : "true",
               n_checks, count("ok"), count("warn"), count("fail"),
               reachable ? "true" : "false");
        for (unsigned i = 0; i < n_checks; i++) {
                printf("%s\n    {\"name\": \"%s\", \"verdict\": \"%s\", \"message\": ",
                       i ? "," : "", checks[i].name, checks[i].verdict);
                json_str(stdout, checks[i].msg);
                printf("}");
        }
        printf("\n  ]");
        if (n_peer > 0) {
                printf(",\n  \"peer_access\": [");
                for (uint32_t i = 0; i < n_peer; i++) {
                        printf("%s[", i ? ", " : "");
                        for (uint32_t j = 0; j < n_peer; j++)
                                printf("%s%s", j ? ", " : "",
                                       peer[i * n_peer + j] == 1 ? "true" :
                                       peer[i * n_peer + j] == 0 ? "false" : "null");
                        printf("]");
                }
                printf("]");
        }
        printf("\n}\n");
}

int doctor_main(int argc, char **argv)
{
        const char *path;
        gpuipc_client *c = NULL;
        gpuipc_stats *s = NULL;
        bool json = false, reachable;
        long pid;
        int idx, r;

        r = ctl_start(argc, argv, usage, &json, 0, &idx, NULL);
        if (r >= 0)
                return r;
        path = ctl_socket ? ctl_socket : gpuipc_client_default_socket();

        check_socket_file(path);
        r = gpuipc_client_connect(path, &c);
        reachable = r == 0;
        if (r < 0)
                add("connect", "fail", "%s", gpuipc_errmsg(NULL));
        else
                add("connect", "ok", "connected and said hello");
        if (c && (r = gpuipc_stats_fetch(c, &s)) < 0)
                add("daemon", "fail", "the daemon refused stats: %s", gpuipc_errmsg(c));
        if (s) {
                add("daemon", s->protocol == GPUIPC_PROTOCOL_VERSION ? "ok" : "warn",
                    "%s, protocol %" PRIu32 " (this library %s speaks %d), pid %" PRIu32,
                    s->server, s->protocol, gpuipc_version_string(), GPUIPC_PROTOCOL_VERSION, s->pid);
                if (s->cuda_available)
                        add("daemon-cuda", "ok", "the daemon's CUDA driver is %" PRIu32
                            ": adopt works", s->cuda_driver_version);
                else
                        add("daemon-cuda", "warn", "the daemon has no CUDA (%s): host and "
                            "cuda-vmm handoff work, adopt does not",
                            s->cuda_reason && s->cuda_reason[0] ? s->cuda_reason : "no reason");
                pid = peer_pid(path);
                if (pid == 0)
                        add("pid-ns", "warn", "the daemon (pid %" PRIu32 " in its namespace) is "
                            "not visible from this PID namespace: records' owner pids mean "
                            "nothing here, and cuda-ipc between namespaces may fail; host and "
                            "cuda-vmm buffers (fds) are unaffected", s->pid);
                else if (pid > 0) {
                        if ((uint32_t)pid != s->pid)
                                add("pid-ns", "warn", "the daemon is pid %ld here but %" PRIu32
                                    " in its own namespace: another PID namespace", pid, s->pid);
                        else
                                check_ns("pid-ns", "pid", pid);
                        check_ns("ipc-ns", "ipc", pid);
                }
        }
        check_cuda_here();
        check_allocators();
        gpuipc_stats_free(s);
        gpuipc_client_free(c);
        if (json)
                print_json(reachable);
        else
                print_text();
        r = ctl_flush(argv[0]);
        return r != EXIT_OK ? r : !reachable ? EXIT_UNREACHABLE : failed ? EXIT_ERROR : EXIT_OK;
}

/* helper-cuda-resume: one libgpuipc client with the CUDA driver double,
 * driven line by line, for integ_restart.
 *
 *   helper-cuda-resume       (connects to $GPUIPC_SOCKET at start; the
 *                             driver is $GPUIPC_LIBCUDA, device 0)
 *
 * Reads commands on stdin and answers each with one line on stdout:
 *
 *   vmm NAME SIZE SEED          gpuipc_cudabuf_new(0, SIZE) filled with
 *                               h_pattern(i, SEED), registered (cuda-vmm,
 *                               durable); the cudabuf is kept  -> id N
 *   vmm2 NAME SIZE OFF SEED     one cudabuf of OFF + SIZE bytes; NAME/0 is
 *                               SIZE bytes at 0 (h_pattern(i, SEED)), NAME/1
 *                               SIZE bytes at OFF (h_pattern(i, SEED + 1))
 *                                                           -> id N0 N1
 *   ipc NAME SIZE OFF SEED [noevent]
 *                               cuMemAlloc of OFF + SIZE bytes, SIZE bytes at
 *                               OFF filled with h_pattern(i, SEED) and an
 *                               interprocess event recorded after (unless
 *                               noevent); registered (cuda-ipc: ephemeral,
 *                               revocable)                  -> id N
 *   hreg NAME SIZE SEED         host buffer of h_pattern(i, SEED), registered
 *                               durable; the hostbuf is freed at once -> id N
 *   adopt NAME                  gpuipc_name_adopt()              -> leases L
 *   free NAME                   the memory behind NAME (vmm: the cudabuf,
 *                               vmm2: NAME is the base name; ipc: the whole
 *                               allocation overwritten with 0x5a, then
 *                               cuMemFree)                  -> ok
 *   unreg NAME                  gpuipc_name_unregister()         -> ok
 *   lookup NAME                 keeps the view              -> id N
 *   check NAME SEED             every byte of the view      -> ok | bad
 *   release NAME                gpuipc_view_release()       -> ok
 *   stat NAME                   -> id N leases L connected 0|1 pid P eph 0|1
 *   ping                        -> ok
 *   arm stop|drop OP            -> ok; then for the next request frame of op
 *                               OP ("register", "lookup") sent on the
 *                               connection:
 *                               stop: prints "sent" once the frame is out
 *                               (the test has stopped the daemon, so it
 *                               cannot have been read);
 *                               drop: everything the daemon sends back on
 *                               that connection is read and thrown away (fds
 *                               closed) until it closes the connection; the
 *                               first bytes thrown away print "dropped" (the
 *                               daemon did the request; its reply is lost
 *                               with the connection).
 *                               The command's own answer follows.
 *   quit                        frees the client, exits 0   -> bye
 *
 * A failed call answers "err <negative errno> <gpuipc_strerror>: <gpuipc_errmsg>";
 * a malformed command "err usage ...".  EOF on stdin is a quiet quit.
 *
 * arm works by interposing sendmsg() and recvmsg(): libgpuipc is linked in
 * statically, so its calls bind to the definitions here. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gpuipc.h"
#include "harness.h"
#include "cuda/driver.h"

/* ---- the interposed socket calls ---------------------------------------- */

enum arm { ARM_NONE, ARM_STOP, ARM_DROP };

static enum arm armed;
static char armed_pat[40];      /* fixstr "op", then fixstr OP */
static size_t armed_pat_len;
static int drop_fd = -1;

static int say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int say(const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
        fflush(stdout);
        return 0;
}

static bool carries_op(const struct msghdr *msg)
{
        for (size_t i = 0; i < msg->msg_iovlen; i++)
                if (memmem(msg->msg_iov[i].iov_base, msg->msg_iov[i].iov_len, armed_pat,
                           armed_pat_len))
                        return true;
        return false;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
        ssize_t n = syscall(SYS_sendmsg, fd, msg, flags);

        if (n > 0 && armed != ARM_NONE && carries_op(msg)) {
                if (armed == ARM_STOP)
                        say("sent");
                else
                        drop_fd = fd;
                armed = ARM_NONE;
        }
        return n;
}

static void close_passed(struct msghdr *m)
{
        for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
                size_t k;
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int pfd;
                        memcpy(&pfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        close(pfd);
                }
        }
}

/* Throws away what fd receives until the peer closes it. */
static ssize_t drain(int fd)
{
        static uint8_t buf[1 << 16];
        bool said = false;

        for (;;) {
                union {
                        char b[CMSG_SPACE(sizeof(int) * 64)];
                        struct cmsghdr align;
                } ctl;
                struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
                struct msghdr m = {
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.b,
                        .msg_controllen = sizeof(ctl.b),
                };
                struct pollfd p = { .fd = fd, .events = POLLIN };
                ssize_t n;

                (void)poll(&p, 1, -1);
                n = syscall(SYS_recvmsg, fd, &m, MSG_CMSG_CLOEXEC);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                if (n >= 0)
                        close_passed(&m);
                if (n > 0) {
                        if (!said)
                                say("dropped");
                        said = true;
                        continue;
                }
                drop_fd = -1;
                return n;       /* 0 at EOF, or -1 with errno (ECONNRESET) */
        }
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
        ssize_t n;

        if (fd != drop_fd)
                return syscall(SYS_recvmsg, fd, msg, flags);
        n = drain(fd);
        if (n >= 0) {           /* as the kernel leaves an EOF: no control data */
                msg->msg_controllen = 0;
                msg->msg_flags = 0;
        }
        return n;
}

#ifdef GPUIPC_HAVE_CUDA_H

/* ---- the client ---------------------------------------------------------- */

#define MAX_ENTRIES 64

struct entry {
        char name[256];
        gpuipc_cudabuf *cb;     /* vmm, vmm2 (under the base name) */
        CUdeviceptr mem;        /* ipc */
        size_t mem_size;
        CUevent ev;
        gpuipc_view *view;      /* lookup */
};

static gpuipc_client *c;
static struct cuda *cu;
static struct entry entries[MAX_ENTRIES];

static struct entry *find(const char *name, bool create)
{
        struct entry *free_slot = NULL;

        for (int i = 0; i < MAX_ENTRIES; i++) {
                if (entries[i].name[0] && strcmp(entries[i].name, name) == 0)
                        return &entries[i];
                if (!entries[i].name[0] && !free_slot)
                        free_slot = &entries[i];
        }
        if (!create || !free_slot)
                return NULL;
        snprintf(free_slot->name, sizeof(free_slot->name), "%s", name);
        return free_slot;
}

static void forget(struct entry *e)
{
        if (!e->cb && !e->mem && !e->view && !e->ev)
                e->name[0] = '\0';
}

static int reply_err(int r)
{
        return say("err %d %s: %s", r, gpuipc_strerror(r), gpuipc_errmsg(c));
}

static int fill(CUdeviceptr p, size_t n, uint32_t seed)
{
        uint8_t *buf = malloc(n);
        CUresult res;

        if (!buf)
                return -ENOMEM;
        for (size_t j = 0; j < n; j++)
                buf[j] = h_pattern(j, seed);
        res = cu->cuMemcpyHtoD_v2(p, buf, n);
        free(buf);
        return res == CUDA_SUCCESS ? 0 : -EIO;
}

static int set_context(void)
{
        CUcontext ctx;
        CUdevice dev;

        if (cu->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
                return -EIO;
        return 0;
}

static int do_vmm(char **a)
{
        struct entry *e;
        gpuipc_cudabuf *b = NULL;
        uint64_t id = 0;
        size_t size;
        uint32_t seed;
        int r;

        if (!a[0] || !a[1] || !a[2])
                return say("err usage vmm NAME SIZE SEED");
        e = find(a[0], true);
        if (!e || e->cb)
                return say("err usage %s: no slot, or memory already held", a[0]);
        size = strtoull(a[1], NULL, 0);
        seed = (uint32_t)strtoul(a[2], NULL, 0);
        r = gpuipc_cudabuf_new(0, size, &b);
        if (r == 0)
                r = fill(gpuipc_cudabuf_ptr(b), size, seed);
        if (r < 0) {
                gpuipc_cudabuf_free(b);
                forget(e);
                return say("err %d cudabuf: %s", r, gpuipc_strerror(r));
        }
        e->cb = b;
        r = gpuipc_cuda_register(c, a[0], gpuipc_cudabuf_ptr(b), size, NULL, NULL, 0, &id);
        if (r < 0)
                return reply_err(r);
        return say("id %" PRIu64, id);
}

static int do_vmm2(char **a)
{
        char name[300];
        struct entry *e;
        gpuipc_cudabuf *b = NULL;
        uint64_t id[2] = { 0, 0 }, off;
        size_t size;
        uint32_t seed;
        int r;

        if (!a[0] || !a[1] || !a[2] || !a[3])
                return say("err usage vmm2 NAME SIZE OFF SEED");
        e = find(a[0], true);
        if (!e || e->cb)
                return say("err usage %s: no slot, or memory already held", a[0]);
        size = strtoull(a[1], NULL, 0);
        off = strtoull(a[2], NULL, 0);
        seed = (uint32_t)strtoul(a[3], NULL, 0);
        if (off < size)
                return say("err usage vmm2: the regions overlap");
        r = gpuipc_cudabuf_new(0, off + size, &b);
        if (r == 0)
                r = fill(gpuipc_cudabuf_ptr(b), size, seed);
        if (r == 0)
                r = fill(gpuipc_cudabuf_ptr(b) + off, size, seed + 1);
        if (r < 0) {
                gpuipc_cudabuf_free(b);
                forget(e);
                return say("err %d cudabuf: %s", r, gpuipc_strerror(r));
        }
        e->cb = b;
        for (int i = 0; i < 2; i++) {
                snprintf(name, sizeof(name), "%s/%d", a[0], i);
                r = gpuipc_cuda_register(c, name, gpuipc_cudabuf_ptr(b) + (i ? off : 0), size,
                                         NULL, NULL, 0, &id[i]);
                if (r < 0)
                        return reply_err(r);
        }
        return say("id %" PRIu64 " %" PRIu64, id[0], id[1]);
}

static int do_ipc(char **a)
{
        struct entry *e;
        CUdeviceptr p = 0;
        CUevent ev = NULL;
        uint64_t id = 0, off;
        size_t size;
        uint32_t seed;
        int r;

        if (!a[0] || !a[1] || !a[2] || !a[3])
                return say("err usage ipc NAME SIZE OFF SEED [noevent]");
        if (a[4] && strcmp(a[4], "noevent") != 0)
                return say("err usage ipc: unknown option %s", a[4]);
        e = find(a[0], true);
        if (!e || e->mem)
                return say("err usage %s: no slot, or memory already held", a[0]);
        size = strtoull(a[1], NULL, 0);
        off = strtoull(a[2], NULL, 0);
        seed = (uint32_t)strtoul(a[3], NULL, 0);
        if (cu->cuMemAlloc_v2(&p, off + size) != CUDA_SUCCESS) {
                forget(e);
                return say("err -5 cuMemAlloc failed");
        }
        e->mem = p;
        e->mem_size = off + size;
        if (fill(p + off, size, seed) < 0)
                return say("err -5 fill failed");
        if (!a[4] &&
            (cu->cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) !=
                     CUDA_SUCCESS ||
             cu->cuEventRecord(ev, NULL) != CUDA_SUCCESS))
                return say("err -5 event failed");
        e->ev = ev;
        r = gpuipc_cuda_register(c, a[0], p + off, size, NULL, ev, 0, &id);
        if (r < 0)
                return reply_err(r);
        return say("id %" PRIu64, id);
}

static int do_hreg(char **a)
{
        gpuipc_hostbuf *b = NULL;
        uint64_t id = 0;
        size_t size;
        uint32_t seed;
        uint8_t *p;
        int r;

        if (!a[0] || !a[1] || !a[2])
                return say("err usage hreg NAME SIZE SEED");
        size = strtoull(a[1], NULL, 0);
        seed = (uint32_t)strtoul(a[2], NULL, 0);
        r = gpuipc_hostbuf_new(size, &b);
        if (r < 0)
                return reply_err(r);
        p = gpuipc_hostbuf_data(b);
        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
        r = gpuipc_hostbuf_register(c, a[0], b, NULL, 0, &id);
        gpuipc_hostbuf_free(b);
        if (r < 0)
                return reply_err(r);
        return say("id %" PRIu64, id);
}

static int do_adopt(const char *name)
{
        uint32_t leases = 0;
        int r;

        if (!name)
                return say("err usage adopt NAME");
        r = gpuipc_name_adopt(c, name, &leases);
        if (r < 0)
                return reply_err(r);
        return say("leases %" PRIu32, leases);
}

static void free_mem(struct entry *e)
{
        if (e->cb)
                gpuipc_cudabuf_free(e->cb);
        e->cb = NULL;
        if (e->mem) {
                uint8_t *junk = malloc(e->mem_size);
                if (junk) {
                        memset(junk, 0x5a, e->mem_size);
                        (void)cu->cuMemcpyHtoD_v2(e->mem, junk, e->mem_size);
                        free(junk);
                }
                (void)cu->cuMemFree_v2(e->mem);
        }
        e->mem = 0;
        if (e->ev)
                (void)cu->cuEventDestroy_v2(e->ev);
        e->ev = NULL;
}

static int do_free(const char *name)
{
        struct entry *e = name ? find(name, false) : NULL;

        if (!e || (!e->cb && !e->mem))
                return say("err usage free %s: no memory held", name ? name : "NAME");
        free_mem(e);
        forget(e);
        return say("ok");
}

static int do_lookup(const char *name)
{
        gpuipc_view *v = NULL;
        struct entry *e;
        int r;

        if (!name)
                return say("err usage lookup NAME");
        e = find(name, true);
        if (!e || e->view)
                return say("err usage %s: no slot, or a view is already held", name);
        r = gpuipc_view_lookup(c, name, 0, 0, &v);
        if (r < 0) {
                forget(e);
                return reply_err(r);
        }
        e->view = v;
        return say("id %" PRIu64, gpuipc_view_info(v)->id);
}

static int do_check(const char *name, const char *seed_s)
{
        struct entry *e = name ? find(name, false) : NULL;
        uint8_t *buf;
        uint32_t seed;
        size_t size;
        bool ok = true;

        if (!name || !seed_s)
                return say("err usage check NAME SEED");
        if (!e || !e->view)
                return say("err usage %s: no view held", name);
        seed = (uint32_t)strtoul(seed_s, NULL, 0);
        size = gpuipc_view_size(e->view);
        buf = malloc(size);
        if (!buf)
                return say("err -12 out of memory");
        /* Through the driver, as a CUDA consumer would (a host view reads
         * directly). */
        if (gpuipc_view_device(e->view) < 0)
                memcpy(buf, gpuipc_view_data(e->view), size);
        else if (cu->cuMemcpyDtoH_v2(buf, (CUdeviceptr)(uintptr_t)gpuipc_view_data(e->view),
                                     size) != CUDA_SUCCESS)
                ok = false;
        for (size_t i = 0; ok && i < size; i++) {
                if (buf[i] != h_pattern(i, seed)) {
                        fprintf(stderr, "helper-cuda-resume: %s byte %zu is 0x%02x, want 0x%02x\n",
                                name, i, buf[i], h_pattern(i, seed));
                        ok = false;
                }
        }
        free(buf);
        return say(ok ? "ok" : "bad");
}

static int do_release(const char *name)
{
        struct entry *e = name ? find(name, false) : NULL;
        int r;

        if (!e || !e->view)
                return say("err usage release %s: no view held", name ? name : "NAME");
        r = gpuipc_view_release(e->view);       /* frees the view either way */
        e->view = NULL;
        forget(e);
        if (r < 0)
                return reply_err(r);
        return say("ok");
}

static int do_unreg(const char *name)
{
        int r;

        if (!name)
                return say("err usage unreg NAME");
        r = gpuipc_name_unregister(c, name);
        if (r < 0)
                return reply_err(r);
        return say("ok");
}

static int do_stat(const char *name)
{
        gpuipc_list *l = NULL;
        const gpuipc_info *i;
        int r;

        if (!name)
                return say("err usage stat NAME");
        r = gpuipc_name_stat(c, name, &l);
        if (r < 0)
                return reply_err(r);
        if (gpuipc_list_count(l) != 1) {
                say("err usage stat %s: %zu entries", name, gpuipc_list_count(l));
                gpuipc_list_free(l);
                return 0;
        }
        i = gpuipc_list_get(l, 0);
        say("id %" PRIu64 " leases %" PRIu32 " connected %d pid %" PRIu32 " eph %d", i->id,
            i->leases, !(i->flags & GPUIPC_INFO_OWNER_GONE), i->owner_pid,
            !!(i->flags & GPUIPC_INFO_EPHEMERAL));
        gpuipc_list_free(l);
        return 0;
}

static int do_arm(const char *mode, const char *op)
{
        size_t n = op ? strlen(op) : 0;

        if (!mode || n == 0 || n > 31 || (strcmp(mode, "stop") && strcmp(mode, "drop")))
                return say("err usage arm stop|drop OP");
        armed_pat[0] = (char)0xa2;      /* fixstr of 2: "op" */
        armed_pat[1] = 'o';
        armed_pat[2] = 'p';
        armed_pat[3] = (char)(0xa0 | n);
        memcpy(armed_pat + 4, op, n);
        armed_pat_len = 4 + n;
        armed = strcmp(mode, "stop") == 0 ? ARM_STOP : ARM_DROP;
        return say("ok");
}

static void cleanup(void)
{
        for (int i = 0; i < MAX_ENTRIES; i++) {
                gpuipc_view_release(entries[i].view);
                entries[i].view = NULL;
        }
        gpuipc_client_free(c);
        c = NULL;
        for (int i = 0; i < MAX_ENTRIES; i++)
                free_mem(&entries[i]);
}

int main(void)
{
        char line[1024], why[256];
        int r;

        if (cuda_load(&cu, why, sizeof(why)) < 0 || cuda_init(cu) < 0 || set_context() < 0) {
                fprintf(stderr, "helper-cuda-resume: no driver: %s\n", why);
                return 4;
        }
        r = gpuipc_client_connect(NULL, &c);
        if (r < 0) {
                fprintf(stderr, "helper-cuda-resume: connect: %s\n", gpuipc_strerror(r));
                return 3;
        }
        while (fgets(line, sizeof(line), stdin)) {
                char *save = NULL, *cmd = strtok_r(line, " \t\r\n", &save), *a[5];

                if (!cmd)
                        continue;
                for (int i = 0; i < 5; i++)
                        a[i] = strtok_r(NULL, " \t\r\n", &save);
                if (strcmp(cmd, "vmm") == 0)
                        do_vmm(a);
                else if (strcmp(cmd, "vmm2") == 0)
                        do_vmm2(a);
                else if (strcmp(cmd, "ipc") == 0)
                        do_ipc(a);
                else if (strcmp(cmd, "hreg") == 0)
                        do_hreg(a);
                else if (strcmp(cmd, "adopt") == 0)
                        do_adopt(a[0]);
                else if (strcmp(cmd, "free") == 0)
                        do_free(a[0]);
                else if (strcmp(cmd, "unreg") == 0)
                        do_unreg(a[0]);
                else if (strcmp(cmd, "lookup") == 0)
                        do_lookup(a[0]);
                else if (strcmp(cmd, "check") == 0)
                        do_check(a[0], a[1]);
                else if (strcmp(cmd, "release") == 0)
                        do_release(a[0]);
                else if (strcmp(cmd, "stat") == 0)
                        do_stat(a[0]);
                else if (strcmp(cmd, "ping") == 0) {
                        r = gpuipc_client_ping(c);
                        if (r < 0)
                                reply_err(r);
                        else
                                say("ok");
                } else if (strcmp(cmd, "arm") == 0)
                        do_arm(a[0], a[1]);
                else if (strcmp(cmd, "quit") == 0) {
                        cleanup();
                        say("bye");
                        cuda_unload(cu);
                        return 0;
                } else
                        say("err usage unknown command %s", cmd);
        }
        cleanup();
        cuda_unload(cu);
        return 0;
}

#else

int main(void)
{
        fprintf(stderr, "helper-cuda-resume: built without <cuda.h>\n");
        return 77;
}

#endif

/* fuzz-ops.c: libFuzzer entry point for the daemon's request handlers.
 *
 * Each input builds a fresh daemon state as daemon/main.c does (a libuv
 * loop, daemon_init), attaches up to two connections through socketpairs
 * (conn_new, as listen.c does after accept4), and turns the input into a
 * sequence of structurally valid frames: a small generator reads the input
 * bytes to pick an op from the op table, then fields among the keys the
 * handlers read, each with a value of a random type (uint, int, bool, nil,
 * str from a pool of names and kinds or random bytes, bin of the lengths
 * the CUDA fields expect, arrays and meta-like maps), or a register of a
 * batch with parts and an arrow description (gen_batch).  Frames may carry
 * memfds (SCM_RIGHTS), so host registrations succeed and lookups hand fds
 * back.  The loop runs until every byte was consumed and no reply is
 * pending; every reply must decode.  Then the connections end (EOF, daemon
 * shutdown or conn_close, chosen by the input), the loop runs dry, and the
 * state is torn down: uv_loop_close() must succeed and no fd may be left.
 *
 * Input layout: byte 0 flags (bit 0: no automatic hello on connection 0,
 * bit 1: open connection 1 with a hello too, bits 2-3: teardown mode);
 * then frames, each introduced by a header byte (bit 0: connection, bits
 * 1-3: fds to attach, 0xff: raw frame of the next bytes, 0xfe: close and
 * reopen a connection).
 *
 * Build (libFuzzer; D = the daemon sources but main.c, P = the proto sources):
 *   clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=undefined -D_GNU_SOURCE -DGPUIPC_VERSION=\"fuzz\" \
 *         -Iproto -Iclient -Idaemon $D $P tests/fuzz/fuzz-ops.c -luv -lmsgpackc -ldl \
 *         -o build/fuzz/fuzz-ops
 *   build/fuzz/fuzz-ops -max_total_time=120 CORPUS_DIR tests/fuzz/corpus-ops
 * Replay without libFuzzer: link with replay.c instead of -fsanitize=fuzzer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <unistd.h>

#include <uv.h>

#include "conn.h"
#include "daemon.h"
#include "log.h"
#include "ops.h"
#include "proto.h"
#include "ledger.h"
#include "watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NCONN 2
#define MAX_FRAMES 64
#define MAX_STEPS 4000

/* ---- the input as a byte source -------------------------------------- */

struct src {
        const uint8_t *p;
        size_t n, pos;
};

static bool src_more(const struct src *s)
{
        return s->pos < s->n;
}

static uint8_t u8(struct src *s)
{
        return s->pos < s->n ? s->p[s->pos++] : 0;
}

static uint64_t u64(struct src *s)
{
        uint64_t v = 0;

        for (int i = 0; i < 8; i++)
                v = v << 8 | u8(s);
        return v;
}

/* ---- the generator ---------------------------------------------------- */

static const char *const op_names[] = {
        "hello", "ping", "register", "lookup", "release", "unregister", "list", "stat",
        "stats", "adopt", "watch", "revoke", "metrics", "unhold", "unmap",
};

static const char *const keys[] = {
        "seq", "op", "name", "id", "kind", "size", "offset", "ephemeral", "meta", "fds",
        "version", "client", "lease", "event", "prefix", "after", "limit", "device",
        "alloc_size", "handle", "buffer_id", "alloc_key", "wait_ms", "writable", "stop",
        "dtype", "shape", "strides", "user", "shared_write", "access", "group", "group_gid",
        "resume", "public", "uids", "gids", "chunks", "pool_key", "copied", "key",
        "alloc", "allocs", "cacheable", "linger",
};

static const char *const strs[] = {
        "f/a", "f/b", "f/a/b", "f", "g/x", "", "f/", "/f", "f//a", "..", "f/..", "a b",
        "host", "cuda-ipc", "cuda-vmm", "float32", "GPU-00000000-0000-0000-0000-000000000000",
        "hello", "x", "cuda-pool",
};

static const uint64_t nums[] = {
        0, 1, 2, 7, 8, 9, 16, 64, 100, 255, 4095, 4096, 4097, 8192, 1u << 20,
        PROTO_WAIT_MAX_MS, PROTO_WAIT_MAX_MS + 1, UINT32_MAX, (uint64_t)INT64_MAX,
        (uint64_t)INT64_MAX + 1, UINT64_MAX,
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void gen_value(struct src *s, msgpack_packer *pk, unsigned depth);

static void gen_map(struct src *s, msgpack_packer *pk, unsigned depth)
{
        unsigned n = u8(s) % 6;

        msgpack_pack_map(pk, n);
        for (unsigned i = 0; i < n; i++) {
                proto_pack_str(pk, keys[u8(s) % N(keys)]);
                gen_value(s, pk, depth + 1);
        }
}

static void gen_value(struct src *s, msgpack_packer *pk, unsigned depth)
{
        uint8_t t = u8(s);
        uint8_t b[256];
        size_t n;

        switch (t % 14) {
        case 0:
                msgpack_pack_uint64(pk, u8(s));
                break;
        case 1:
                msgpack_pack_uint64(pk, u64(s));
                break;
        case 2:
                msgpack_pack_int64(pk, -(int64_t)(u8(s) + 1));
                break;
        case 3:
                if (t & 0x80)
                        msgpack_pack_true(pk);
                else
                        msgpack_pack_false(pk);
                break;
        case 4:
                msgpack_pack_nil(pk);
                break;
        case 5:
        case 6:
                proto_pack_str(pk, strs[u8(s) % N(strs)]);
                break;
        case 7:
                n = u8(s) % 80;
                for (size_t i = 0; i < n; i++)
                        b[i] = u8(s);
                msgpack_pack_str_with_body(pk, b, n);
                break;
        case 8: {
                static const size_t lens[] = { 0, 1, 15, 16, 17, 63, 64, 65 };
                n = lens[u8(s) % N(lens)];
                for (size_t i = 0; i < n; i++)
                        b[i] = u8(s);
                msgpack_pack_bin_with_body(pk, b, n);
                break;
        }
        case 9:
                if (depth >= 4) {
                        msgpack_pack_nil(pk);
                        break;
                }
                n = u8(s) % 6;
                msgpack_pack_array(pk, n);
                for (size_t i = 0; i < n; i++)
                        gen_value(s, pk, depth + 1);
                break;
        case 10:
                if (depth >= 4) {
                        msgpack_pack_nil(pk);
                        break;
                }
                gen_map(s, pk, depth);
                break;
        case 11:
                msgpack_pack_double(pk, (double)(int8_t)u8(s) / 3.0);
                break;
        default:
                msgpack_pack_uint64(pk, nums[u8(s) % N(nums)]);
                break;
        }
}

/* A register of kind batch (docs/protocol.md, "Batches") from the input,
 * shaped so that zero bytes make a valid one: one host part of 4096 bytes
 * naming fd 0, an arrow description of one int32 column whose one buffer
 * is that part.  Other bytes pick other part kinds, CUDA fields, shared fd
 * indexes and allocation keys (so parts share entries), indexes out of
 * range, children counts and metadata. */
static void gen_arrow(struct src *s, msgpack_packer *pk, unsigned nparts)
{
        static const char *const formats[] = { "i", "l", "u", "+s", "b", "", "tsu:UTC", "\x01" };
        struct proto_map m, nm, md;
        unsigned n = 1 + u8(s) % 4, f;

        proto_map_begin(&m, pk);
        proto_map_ku64(&m, "rows", u8(s));
        f = u8(s);
        if (f & 1) {
                proto_map_key(&m, "metadata");
                proto_map_begin(&md, pk);
                proto_map_kstr(&md, "k", (f & 2) ? "v" : "");
                proto_map_end(&md);
        }
        if (f & 4)
                proto_map_kstr(&m, "extra", "kept as sent");
        proto_map_key(&m, "columns");
        msgpack_pack_array(pk, n);
        for (unsigned i = 0; i < n; i++) {
                unsigned nb = 1 + u8(s) % 3, ch = u8(s) % 4;

                proto_map_begin(&nm, pk);
                proto_map_kstr(&nm, "name", i ? "c" : "");
                proto_map_kstr(&nm, "format", formats[u8(s) % N(formats)]);
                proto_map_ku64(&nm, "length", u8(s));
                proto_map_ki64(&nm, "null_count", (int64_t)(u8(s) % 5) - 1);
                if (ch)
                        proto_map_ku64(&nm, "children", ch - 1);
                proto_map_key(&nm, "buffers");
                msgpack_pack_array(pk, nb);
                for (unsigned b = 0; b < nb; b++) {
                        unsigned v = u8(s) % (nparts + 2);
                        msgpack_pack_int64(pk, v < nparts ? (int64_t)v : v == nparts ? -1
                                                                   : (int64_t)nparts);
                }
                proto_map_end(&nm);
        }
        proto_map_end(&m);
}

static void gen_part(struct src *s, msgpack_packer *pk, unsigned nfds)
{
        static const char *const kinds[] = { "host", "cuda-vmm", "cuda-ipc", "cuda-pool",
                                             "batch", "x" };
        static const uint64_t sizes[] = { 4096, 1, 100, 0, 8192, UINT64_MAX };
        uint8_t key[PROTO_IPC_HANDLE_LEN];
        unsigned kind = u8(s) % N(kinds), nf = 1 + u8(s) % 3;
        uint8_t fl = u8(s);
        struct proto_map m;

        proto_map_begin(&m, pk);
        proto_map_kstr(&m, "kind", kinds[kind]);
        proto_map_ku64(&m, "size", sizes[u8(s) % N(sizes)]);
        if (fl & 0x80)
                proto_map_ku64(&m, "offset", nums[u8(s) % N(nums)]);
        if (nf < 3) {
                proto_map_key(&m, "fds");
                msgpack_pack_array(pk, nf - 1 + (kind != 2));
                for (unsigned i = 0; i < nf - 1 + (kind != 2); i++)
                        msgpack_pack_uint64(pk, u8(s) % (nfds + 1));
        }
        if (fl & 1)
                proto_map_kstr(&m, "device", "GPU-00000000-0000-0000-0000-000000000000");
        if (fl & 2)
                proto_map_ku64(&m, "alloc_size", sizes[u8(s) % N(sizes)] << 9);
        /* Few distinct keys and handles, so that parts share entries. */
        memset(key, 'a' + u8(s) % 3, sizeof(key));
        if (fl & 4)
                proto_map_kbin(&m, kind == 3 ? "pool_key" : "alloc_key", key, PROTO_ALLOC_KEY_LEN);
        if (fl & 8) {
                proto_map_kbin(&m, "handle", key, PROTO_IPC_HANDLE_LEN);
                proto_map_ku64(&m, "buffer_id", u8(s) % 3);
        }
        if (fl & 0x10)
                proto_map_kbool(&m, "shared_write", true);
        if (fl & 0x20)
                proto_map_kbool(&m, "cacheable", true);
        if (fl & 0x40)
                proto_map_kbin(&m, "event", key, PROTO_IPC_HANDLE_LEN);
        proto_map_end(&m);
}

static void gen_batch(struct src *s, msgpack_packer *pk, unsigned nfds, bool decl_fds)
{
        uint8_t key[PROTO_IPC_HANDLE_LEN];
        unsigned n = 1 + u8(s) % 4;
        uint8_t fl = u8(s);
        struct proto_map m;

        proto_map_begin(&m, pk);
        proto_map_ku64(&m, "seq", u8(s));
        proto_map_kstr(&m, "op", "register");
        proto_map_kstr(&m, "name", strs[u8(s) % N(strs)]);
        proto_map_kstr(&m, "kind", "batch");
        if (decl_fds && nfds)
                proto_map_ku64(&m, "fds", nfds);
        if (fl & 1)
                proto_map_kbool(&m, "ephemeral", (fl & 2) != 0);
        if (fl & 4) {
                memset(key, 'e', sizeof(key));
                proto_map_kbin(&m, "event", key, (fl & 8) ? 63 : PROTO_IPC_HANDLE_LEN);
        }
        if (fl & 0x10)
                proto_map_ku64(&m, "ttl_ms", 1 + u8(s));
        if (fl & 0x20)
                n = 0;
        proto_map_key(&m, "parts");
        msgpack_pack_array(pk, n);
        for (unsigned i = 0; i < n; i++)
                gen_part(s, pk, nfds);
        if (!(fl & 0x40)) {
                proto_map_key(&m, "arrow");
                gen_arrow(s, pk, n);
        }
        proto_map_end(&m);
}

struct frame {
        uint8_t *buf;           /* length prefix and body */
        size_t len;
        int fds[PROTO_MAX_FDS];
        unsigned nfds;
        unsigned conn;
        bool reopen;            /* not a frame: close the connection, open anew */
        bool split;             /* send in two writes */
};

static int new_memfd(struct src *s)
{
        static const off_t sizes[] = { 4096, 8192, 1, 0 };
        uint8_t b = u8(s);
        int fd = memfd_create("fuzz-ops", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        if (fd < 0)
                abort();
        if (ftruncate(fd, sizes[b % N(sizes)]) < 0)
                abort();
        /* Most get the seals the daemon asks of host buffers (shrink, and
         * grow, seal, and write unless the request says shared_write); some
         * miss one. */
        if (!(b & 0x10))
                (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK |
                                             ((b & 0x20) ? 0 : F_SEAL_GROW | F_SEAL_SEAL) |
                                             ((b & 0x40) ? 0 : F_SEAL_WRITE));
        return fd;
}

static void frame_from_sbuffer(struct frame *f, msgpack_sbuffer *sb, size_t body_off)
{
        uint32_t n = (uint32_t)(sb->size - body_off);

        sb->data[0] = (char)(n >> 24);
        sb->data[1] = (char)(n >> 16);
        sb->data[2] = (char)(n >> 8);
        sb->data[3] = (char)n;
        f->len = sb->size;
        f->buf = (uint8_t *)msgpack_sbuffer_release(sb);
}

static void gen_hello(struct frame *f, unsigned conn)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        memset(f, 0, sizeof(*f));
        f->conn = conn;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_sbuffer_write(&sb, "\0\0\0\0", 4);
        msgpack_pack_map(&pk, 3);
        proto_pack_ku64(&pk, "seq", 0);
        proto_pack_kstr(&pk, "op", "hello");
        proto_pack_ku64(&pk, "version", 1);
        frame_from_sbuffer(f, &sb, 4);
}

/* One frame (or a reopen) from the input. */
static void gen_frame(struct src *s, struct frame *f)
{
        uint8_t h = u8(s), sel, fl;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        unsigned nf;
        bool decl_fds;

        memset(f, 0, sizeof(*f));
        f->conn = h & 1;
        if (h == 0xfe || h == 0xfd) {
                f->reopen = true;
                return;
        }
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_sbuffer_write(&sb, "\0\0\0\0", 4);
        if (h == 0xff) {
                /* Raw body bytes: what the frame checker lets through. */
                size_t n = 1 + u8(s) % 64;
                for (size_t i = 0; i < n; i++) {
                        char c = (char)u8(s);
                        msgpack_sbuffer_write(&sb, &c, 1);
                }
                frame_from_sbuffer(f, &sb, 4);
                return;
        }
        f->nfds = (h >> 1) & 7;
        if (f->nfds > 3)
                f->nfds = 0;
        f->split = (h & 0x10) != 0;
        decl_fds = !(h & 0x20);
        for (unsigned i = 0; i < f->nfds; i++)
                f->fds[i] = new_memfd(s);

        fl = u8(s);
        sel = u8(s);
        if (sel % 16 == N(op_names)) {
                gen_batch(s, &pk, f->nfds, decl_fds);
                frame_from_sbuffer(f, &sb, 4);
                return;
        }
        nf = u8(s) % 8;
        msgpack_pack_map(&pk, (fl & 1 ? 0 : 1) + (fl & 2 ? 0 : 1) +
                         (decl_fds && f->nfds ? 1 : 0) + nf);
        if (!(fl & 1))
                proto_pack_ku64(&pk, "seq", u8(s));
        if (!(fl & 2)) {
                proto_pack_str(&pk, "op");
                if (sel % 16 < N(op_names))
                        proto_pack_str(&pk, op_names[sel % 16]);
                else
                        gen_value(s, &pk, 1);
        }
        if (decl_fds && f->nfds)
                proto_pack_ku64(&pk, "fds", f->nfds);
        for (unsigned i = 0; i < nf; i++) {
                proto_pack_str(&pk, keys[u8(s) % N(keys)]);
                gen_value(s, &pk, 1);
        }
        frame_from_sbuffer(f, &sb, 4);
}

static void frame_free(struct frame *f)
{
        for (unsigned i = 0; i < f->nfds; i++)
                if (f->fds[i] >= 0)
                        close(f->fds[i]);
        f->nfds = 0;
        free(f->buf);
        f->buf = NULL;
}

/* ---- the peer side ----------------------------------------------------- */

struct peer {
        int fd;                 /* our end, non-blocking; -1 when closed */
        struct proto_reader rd; /* replies */
};

static struct daemon D;

static void peer_open(struct peer *p)
{
        struct conn *c;
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        if (conn_new(&D, sv[1], &c) < 0)
                abort();
        p->fd = sv[0];
        if (proto_reader_init(&p->rd, PROTO_MAX_FRAME_LIMIT) < 0)
                abort();
}

static void peer_close(struct peer *p)
{
        if (p->fd < 0)
                return;
        close(p->fd);
        p->fd = -1;
        proto_reader_free(&p->rd);
}

/* Reads what the daemon sent; every reply must be one well-formed map.
 * Returns the bytes read. */
static size_t peer_drain(struct peer *p)
{
        size_t total = 0;

        while (p->fd >= 0) {
                int fds[PROTO_MAX_PENDING_FDS];
                unsigned nfds = 0;
                const uint8_t *body;
                uint32_t len;
                uint64_t off;
                uint8_t *buf;
                size_t room;
                ssize_t n;
                int r;

                if (proto_reader_space(&p->rd, &buf, &room) < 0)
                        abort();
                n = proto_recv(p->fd, buf, room, fds, PROTO_MAX_PENDING_FDS, &nfds);
                for (unsigned i = 0; i < nfds; i++)
                        close(fds[i]);
                if (n <= 0)
                        break;
                total += (size_t)n;
                proto_reader_commit(&p->rd, (size_t)n);
                while ((r = proto_reader_next(&p->rd, &body, &len, &off)) == 1) {
                        struct proto_msg m;
                        const char *why = NULL;
                        if (proto_decode(body, len, &m, &why) < 0) {
                                fprintf(stderr, "fuzz-ops: the daemon sent a malformed "
                                        "frame (%u bytes): %s\n", len, why ? why : "?");
                                abort();
                        }
                        proto_msg_free(&m);
                }
                if (r < 0) {
                        fprintf(stderr, "fuzz-ops: the daemon sent a bad length prefix\n");
                        abort();
                }
        }
        return total;
}

static int outq(int fd)
{
        int n = 0;

        if (fd < 0 || ioctl(fd, SIOCOUTQ, &n) < 0)
                return 0;
        return n;
}

/* Runs the loop and reads replies until the daemon has consumed every byte
 * sent and nothing more comes back. */
static void settle(struct peer *peers)
{
        int idle = 0;

        for (int i = 0; i < MAX_STEPS && idle < 2; i++) {
                size_t got = 0;
                int pending = 0;

                uv_run(D.loop, UV_RUN_NOWAIT);
                for (unsigned k = 0; k < NCONN; k++) {
                        got += peer_drain(&peers[k]);
                        pending += outq(peers[k].fd);
                }
                idle = got == 0 && pending == 0 ? idle + 1 : 0;
        }
}

static void send_frame(struct peer *peers, struct frame *f)
{
        struct peer *p = &peers[f->conn];
        size_t off = 0;
        bool first = true;

        if (p->fd < 0)
                return;
        while (off < f->len) {
                size_t n = f->len - off;
                struct iovec iov;
                ssize_t w;

                if (f->split && first && n > 1)
                        n = n / 2;
                iov.iov_base = f->buf + off;
                iov.iov_len = n;
                w = proto_send(p->fd, &iov, 1, first ? f->fds : NULL, first ? f->nfds : 0);
                if (w == -EAGAIN) {
                        uv_run(D.loop, UV_RUN_NOWAIT);
                        for (unsigned k = 0; k < NCONN; k++)
                                peer_drain(&peers[k]);
                        continue;
                }
                if (w < 0)
                        return;         /* the daemon closed it */
                off += (size_t)w;
                first = false;
        }
}

/* ---- one input ------------------------------------------------------------ */

static int fd_count(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int n = 0;

        if (!d)
                abort();
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n - 1;
}

static void setup_once(void)
{
        static bool done;

        if (done)
                return;
        done = true;
        /* No real driver: an absent one makes cuda_load() fail fast, and
         * the driver double can be chosen by setting the variable. */
        setenv("GPUIPC_LIBCUDA", "/nonexistent/libcuda.so.1", 0);
        log_set_level(getenv("FUZZ_OPS_DEBUG") ? LOG_LVL_DEBUG : 0);
        /* libuv opens its process-wide signal pipe with the first loop:
         * open it now, so that the fd count per input is exact. */
        uv_loop_t l;
        if (uv_loop_init(&l) < 0 || uv_loop_close(&l) < 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct src s = { data, size, 0 };
        struct peer peers[NCONN] = { { .fd = -1 }, { .fd = -1 } };
        struct frame f;
        uv_loop_t loop;
        uint8_t flags;
        int fds0, r;

        setup_once();
        fds0 = fd_count();
        memset(&D, 0, sizeof(D));
        if (uv_loop_init(&loop) < 0)
                abort();
        D.loop = &loop;
        config_defaults(&D.cfg);
        D.cfg.log_level = log_get_level();
        /* Small limits, so that the fuzzer reaches them. */
        D.cfg.max_registrations = 4;
        D.cfg.max_leases = 4;
        D.cfg.max_waits = 2;
        if (daemon_init(&D) < 0)
                abort();

        flags = u8(&s);
        peer_open(&peers[0]);
        if (!(flags & 1)) {
                gen_hello(&f, 0);
                send_frame(peers, &f);
                frame_free(&f);
        }
        if (flags & 2) {
                peer_open(&peers[1]);
                gen_hello(&f, 1);
                send_frame(peers, &f);
                frame_free(&f);
        }
        settle(peers);
        for (int i = 0; i < MAX_FRAMES && src_more(&s); i++) {
                gen_frame(&s, &f);
                if (f.reopen) {
                        settle(peers);
                        peer_close(&peers[f.conn]);
                        settle(peers);
                        peer_open(&peers[f.conn]);
                        gen_hello(&f, f.conn);
                }
                if (peers[f.conn].fd < 0)
                        peer_open(&peers[f.conn]);
                send_frame(peers, &f);
                frame_free(&f);
                /* One frame at a time: the connections' requests are
                 * handled in the order they were sent. */
                settle(peers);
        }
        settle(peers);

        switch ((flags >> 2) & 3) {
        case 0:         /* the peers hang up */
                for (unsigned k = 0; k < NCONN; k++)
                        peer_close(&peers[k]);
                settle(peers);
                break;
        case 1:         /* the daemon shuts down, as on SIGTERM */
                D.stopping = true;
                daemon_close_connections(&D);
                settle(peers);
                break;
        case 2:         /* half-close: replies are flushed first */
                for (unsigned k = 0; k < NCONN; k++)
                        if (peers[k].fd >= 0)
                                shutdown(peers[k].fd, SHUT_WR);
                settle(peers);
                break;
        default:
                break;
        }
        while (D.conns)
                conn_close(D.conns);
        for (unsigned k = 0; k < NCONN; k++)
                peer_close(&peers[k]);
        ttl_stop(&D);          /* as shutdown does: a TTL's timer ends too */
        uv_run(&loop, UV_RUN_DEFAULT);
        daemon_done(&D);
        watch_done();
        ledger_done();
        r = uv_loop_close(&loop);
        if (r != 0) {
                fprintf(stderr, "fuzz-ops: handles left in the loop: %s\n", uv_strerror(r));
                uv_print_all_handles(&loop, stderr);
                abort();
        }
        if (fd_count() != fds0) {
                fprintf(stderr, "fuzz-ops: %d fds open after the input, %d before\n",
                        fd_count(), fds0);
                abort();
        }
        return 0;
}

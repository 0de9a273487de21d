/* internal.h: private interfaces of libgpuipc.
 *
 * Nothing declared here is exported: the build uses -fvisibility=hidden and
 * client/libgpuipc.sym, and internal names carry the gpuipc__ prefix so that
 * they never collide with the public gpuipc_ ones in a static link.
 */
#ifndef GPUIPC_INTERNAL_H
#define GPUIPC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpuipc.h"
#include "proto.h"

#define GPUIPC__ERRMSG_MAX   512u
#define GPUIPC__RELEASED_MAX 1024u     /* remembered `released` events */
#define GPUIPC__LIST_MAX     (16u << 20) /* records one gpuipc_list may hold */
#define GPUIPC__REVOKED_MAX  256u      /* remembered `revoked` registration ids */
#define GPUIPC__EVENT_LEN    PROTO_IPC_HANDLE_LEN /* a CUipcEventHandle on the wire */
#define GPUIPC__RECONNECT_MS 10000     /* default of $GPUIPC_RECONNECT_MS */
#define GPUIPC__UNMAPPED_MAX 256u      /* remembered `unmapped` events and cacheable regs */

/* The public header repeats these wire constants (proto/wire.h). */
_Static_assert(GPUIPC_PROTOCOL_VERSION == PROTO_VERSION, "protocol version");
_Static_assert(GPUIPC_ACCESS_IDS_MAX == PROTO_ACCESS_IDS_MAX, "access ids");
_Static_assert(sizeof(GPUIPC_DEFAULT_SOCKET) == sizeof(PROTO_DEFAULT_SOCKET), "socket path");

struct gpuipc__rec;

#define GPUIPC__LOST_MAX 256u          /* remembered lost registrations */

struct gpuipc__lost {
        struct gpuipc__lost *next;
        uint64_t id;                    /* the caller's */
        int err;
        char name[PROTO_NAME_MAX + 1];
};

/* A lease this client holds: ids are only unique within one daemon's state,
 * so each carries the epoch it was taken in. */
struct gpuipc__lease {
        uint64_t id;
        uint32_t epoch;
};

/* The IPC events that came with one `released` event (cuda kinds). */
struct gpuipc__relev {
        struct gpuipc__relev *next;
        uint64_t id;
        unsigned n;
        uint8_t handles[];              /* n * GPUIPC__EVENT_LEN bytes */
};

/* The access rule of later registrations, copied from gpuipc_client_set_access. */
struct gpuipc__access {
        bool set;
        struct proto_access rule;       /* its group resolved here (getgrnam_r) */
};

struct gpuipc_client {
        unsigned refs;                  /* the caller's, plus one per view */
        int fd;                         /* -1 once closed */
        int dead;                       /* 0, or why the connection is unusable */
        bool freed;                     /* gpuipc_client_free() was called */
        uint64_t seq;                   /* last seq sent */
        uint32_t max_frame;             /* from the hello reply */
        struct proto_reader rd;
        struct proto_fdq fdq;
        /* Ids from `released` events not yet claimed by wait_released, oldest
         * first; the oldest is forgotten when the ring is full. */
        uint64_t released[GPUIPC__RELEASED_MAX];
        unsigned released_start, released_n;
        /* Events of `released` events, newest first, at most
         * GPUIPC__RELEASED_MAX of them. */
        struct gpuipc__relev *relev;
        unsigned relev_n;
        /* Ids of registrations whose `revoked` event arrived (a ring). */
        uint64_t revoked[GPUIPC__REVOKED_MAX];
        unsigned revoked_n;
        int last_err;
        char errmsg[GPUIPC__ERRMSG_MAX];
        /* Watch events not yet read, oldest first (admin.c). */
        struct gpuipc__wev *wev_head, *wev_tail;
        unsigned wev_n;
        uint64_t wev_dropped;
        struct gpuipc__access access;   /* for register (access.c) */
        uint64_t ttl_ms;                /* for register, with access; 0: none */
        /* Reconnecting (resume_*.c). */
        char path[108];                 /* the socket connected to */
        int reconnect_ms;               /* how long to keep trying; 0: never */
        uint32_t busy_poll_us;          /* spin this long before sleeping for a frame */
        bool has_session, recovering, remapped;
        bool state_kept;                /* the daemon keeps state over restarts */
        bool leases_incomplete;         /* a lease id could not be recorded */
        uint64_t local_ids;             /* client-local registration ids handed out */
        uint32_t epoch;                 /* lease id space: +1 per restart without state */
        uint8_t session[PROTO_SESSION_LEN];
        struct gpuipc__rec *recs;       /* what a reconnect re-establishes */
        struct gpuipc__lease *leases;   /* leases held, unordered */
        size_t n_leases, cap_leases;
        uint64_t reconnects;
        /* Registrations a reconnect could not make again, oldest first. */
        struct gpuipc__lost *lost, *lost_tail;
        unsigned lost_n;
        int64_t lookup_owner;           /* owner_uid of lookups, or -1 */
        /* The mapping cache (cudamap.c): allocations this connection no
         * longer holds, to tell the daemon at the next call (`unhold`). */
        uint64_t *unholds;
        unsigned n_unholds, cap_unholds;
        /* `unmapped` events not yet claimed by gpuipc_reg_wait_unmapped(), and
         * the allocations of each cacheable registration made here (one
         * entry each; n: how many the registration has, several for a
         * batch), the newest kept. */
        uint64_t unmapped[GPUIPC__UNMAPPED_MAX];
        unsigned unmapped_n;
        struct { uint64_t id, alloc; unsigned n; } cached_regs[GPUIPC__UNMAPPED_MAX];
        unsigned cached_regs_n;
        /* Leases of batch views let go of by an Arrow release callback,
         * perhaps on another thread, to release at the next call
         * (batchview.c).  deferred_lock guards them and `freed`;
         * n_deferred is also read without it, atomically. */
        pthread_mutex_t deferred_lock;
        struct gpuipc__lease *deferred;
        unsigned n_deferred, cap_deferred;
};

/* A reply to one request.  The body is a private copy, so the decoded
 * objects stay valid while the client reads further frames. */
struct gpuipc__reply {
        uint8_t *body;
        struct proto_msg msg;
        int fds[PROTO_MAX_FDS];
        unsigned nfds;
};

/* ---- client.c ---------------------------------------------------------- */

/* Starts a public call on c: clears the error text, and fails with
 * -ENOTCONN when the connection is already unusable (-EINVAL when c is
 * NULL, the caller's argument). */
int gpuipc__begin(gpuipc_client *c);
/* gpuipc__begin(), then checks name (-EINVAL with the reason). */
int gpuipc__begin_named(gpuipc_client *c, const char *name);
/* Records err as the outcome of the current call (for gpuipc_errmsg()) and
 * returns it, so that calls can end with `return gpuipc__end(c, r);`. */
int gpuipc__end(gpuipc_client *c, int err);
/* Checks who listens on the connected socket fd (SO_PEERCRED): root, the
 * uid of $GPUIPC_DAEMON_UID when set, else this process's uid or the owner
 * of path's directory.  0, or -EPERM (-EINVAL for a bad variable) with the
 * error text set. */
int gpuipc__check_server(gpuipc_client *c, int fd, const char *path);
/* Sets the error text of the current call and returns err. */
int gpuipc__fail(gpuipc_client *c, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* hello on c's connection, with `resume` when c has a session; *ret_reply
 * (may be NULL) gets the reply. */
int gpuipc__hello(gpuipc_client *c, struct gpuipc__reply *ret_reply);

gpuipc_client *gpuipc__client_ref(gpuipc_client *c);
void gpuipc__client_unref(gpuipc_client *c);
/* Closes the socket and makes the client unusable: later calls fail with
 * -ENOTCONN.  Returns err. */
int gpuipc__client_kill(gpuipc_client *c, int err);
/* True while requests can still be sent. */
bool gpuipc__client_usable(const gpuipc_client *c);

/* ---- io.c: frames out and in ------------------------------------------- */

/* Sends one finished frame, nfds fds riding on its first byte; a failure
 * kills the connection. */
int gpuipc__send(gpuipc_client *c, const uint8_t *buf, size_t len, const int *fds,
                 unsigned nfds);
/* Sends a finished frame and waits for the reply with seq, without
 * reconnecting and without looking at `error`. */
int gpuipc__send_wait(gpuipc_client *c, const uint8_t *buf, size_t len, uint64_t seq,
                      const int *fds, unsigned nfds, struct gpuipc__reply *ret_reply);
/* Reads and handles frames for up to timeout_ms (< 0: without limit); returns
 * 0 when the time passed or something arrived, negative errno on failure. */
int gpuipc__pump(gpuipc_client *c, int timeout_ms);
/* When rp carries `error`: frees rp, keeps the message and returns the
 * errno; else 0. */
int gpuipc__reply_error(gpuipc_client *c, struct gpuipc__reply *rp);
/* Moves a reply: the decoded root points into the struct itself. */
void gpuipc__reply_move(struct gpuipc__reply *to, struct gpuipc__reply *from);
/* Takes the reply's only fd (closing any others); -EBADMSG when it has none. */
int gpuipc__reply_take_fd(struct gpuipc__reply *r, int *ret_fd);
void gpuipc__reply_free(struct gpuipc__reply *r);

/* ---- call.c: requests and their calls ---------------------------------- */

/* How a reconnect treats a call during which the connection dropped. */
enum gpuipc__redo {
        GPUIPC__REDO_NEVER,             /* whether it took effect is unknown: it fails */
        GPUIPC__REDO_SEND,              /* twice does no harm: sent again */
        GPUIPC__REDO_UNLESS_GONE,       /* sent again; `not_found` means the first one did it */
        GPUIPC__REDO_REGISTER,          /* sent again; `exists`, for a registration of this
                                         * process, means the first one did it */
};

/* What a call that succeeded leaves for the reconnects to come. */
enum gpuipc__keep {
        GPUIPC__KEEP_NOTHING,
        GPUIPC__KEEP_LEASE,             /* lookup: the reply's lease is held */
        GPUIPC__KEEP_RELEASE,           /* release: the request's lease is not */
        GPUIPC__KEEP_REGISTER,          /* register: its frame and fds, to register again */
        GPUIPC__KEEP_FORGET,            /* unregister, adopt: the reply's id (or, by prefix,
                                         * the registrations in the prefix) is not ours */
        GPUIPC__KEEP_WATCH,             /* watch: its frame, to watch again */
};

/* One kind of request, and what the resume machinery does with it: each
 * operation defines its own. */
struct gpuipc__op {
        const char *name;
        enum gpuipc__redo redo;
        enum gpuipc__keep keep;
};

/* A request being built.  The operation packs its fields into o.pk, and
 * sets what its kind of keep needs of this one request. */
struct gpuipc__req {
        struct proto_out o;
        uint64_t seq;
        const struct gpuipc__op *op;
        const char *name;               /* register: the name (the caller's string) */
        const char *prefix;             /* unregister by prefix: the prefix */
        uint64_t lease;                 /* release: the lease */
};

/* Starts a request of kind op: a map of 2 + nfields entries whose op and
 * seq are already packed.  rq must not move until gpuipc__call(). */
void gpuipc__request(gpuipc_client *c, struct gpuipc__req *rq, const struct gpuipc__op *op,
                     uint32_t nfields);
/* Sends the request (with nfds fds attached; they stay the caller's) and
 * waits for its reply.  A reply carrying `error` fails with its errno and
 * keeps the daemon's message.  On success the caller owns *ret_reply and
 * frees it with gpuipc__reply_free().  rq->o is freed either way. */
int gpuipc__call(gpuipc_client *c, struct gpuipc__req *rq, const int *fds, unsigned nfds,
                 struct gpuipc__reply *ret_reply);
/* Begins a call and sends a request of kind op with no fields; on success
 * *ret_reply is the reply (gpuipc__reply_free() it); unlike the name ops,
 * the caller decodes the reply. */
int gpuipc__call_op(gpuipc_client *c, const struct gpuipc__op *op,
                    struct gpuipc__reply *ret_reply);
/* One request {op, name} (the name checked first) whose reply may carry a
 * uint `leases` (*ret_leases, may be NULL, is 0 when absent): unregister,
 * revoke, adopt. */
int gpuipc__name_op(gpuipc_client *c, const struct gpuipc__op *op, const char *name,
                    uint64_t *ret_leases);
/* Sends the queued unholds without waiting for their replies. */
void gpuipc__send_unholds(gpuipc_client *c);
/* Sends the request in rq without waiting for its reply, which is dropped
 * when it comes; rq's frame is freed.  The daemon answers in order, so
 * later calls see its effect. */
int gpuipc__send_nowait(gpuipc_client *c, struct gpuipc__req *rq);
/* The checks every lookup begins with: -EINVAL without c or ret_view,
 * the name, then flags outside allowed (bad_flags says so). */
int gpuipc__lookup_begin(gpuipc_client *c, const char *name, unsigned flags, unsigned allowed,
                         const char *bad_flags, const void *ret_view);
/* Starts a lookup of name with what every lookup carries (owner_uid,
 * wait_ms from timeout_ms, cache); the caller packs nextra more fields. */
void gpuipc__lookup_start(gpuipc_client *c, struct gpuipc__req *rq, const char *name,
                          int timeout_ms, uint32_t nextra);
/* The kinds of request that batches share with single registrations. */
extern const struct gpuipc__op gpuipc__op_register, gpuipc__op_lookup, gpuipc__op_release;

/* ---- register.c: register of every kind, unregister, adopt ------------ */

/* What a register request of any kind carries besides the kind's fields. */
struct gpuipc__regargs {
        const char *name;
        const gpuipc_meta *meta;
        bool ephemeral;
        bool shared_write;              /* host: the memfd is not sealed against writes */
        bool cacheable;                 /* keep (id, alloc) for gpuipc_reg_wait_unmapped() */
};

/* The head of every register call: begins a call on c, checks name, the
 * kind's own arguments (args_ok, else -EINVAL saying bad_args) and meta. */
int gpuipc__register_begin(gpuipc_client *c, const char *name, const gpuipc_meta *meta,
                           bool args_ok, const char *bad_args);
/* Starts the register request of a in rq, up to its name; the kind packs
 * its nkind fields next. */
void gpuipc__register_start(gpuipc_client *c, struct gpuipc__req *rq,
                            const struct gpuipc__regargs *a, uint32_t nkind);
/* Remembers allocation alloc of cacheable registration id, one of its n,
 * for gpuipc_reg_wait_unmapped(). */
void gpuipc__cached_add(gpuipc_client *c, uint64_t id, uint64_t alloc, unsigned n);
/* Packs what follows the kind's fields, sends rq with its nfds fds (they
 * stay the caller's) and sets *ret_id (may be NULL) to the new id. */
int gpuipc__register_finish(gpuipc_client *c, struct gpuipc__req *rq,
                            const struct gpuipc__regargs *a, const int *fds, unsigned nfds,
                            uint64_t *ret_id);

/* ---- events.c ---------------------------------------------------------- */

/* Takes in an event other than `error` (root is its map, ev its `event`
 * value): released, revoked, watch, uncache, unmapped; ignores others. */
void gpuipc__event_take(gpuipc_client *c, const msgpack_object *root, const msgpack_object *ev);
/* Returns true and forgets id if a `released` event for it has arrived. */
bool gpuipc__released_take(gpuipc_client *c, uint64_t id);
/* Takes the IPC event handles that the `released` event of id carried:
 * *ret (free() it; NULL when none) holds *ret_n handles. */
void gpuipc__released_events_take(gpuipc_client *c, uint64_t id, uint8_t **ret,
                                  unsigned *ret_n);
void gpuipc__relev_clear(gpuipc_client *c);
/* True when a `revoked` event arrived for registration id. */
bool gpuipc__revoked(const gpuipc_client *c, uint64_t id);
/* True when an `unmapped` event arrived for allocation alloc. */
bool gpuipc__unmapped_seen(const gpuipc_client *c, uint64_t alloc);

/* ---- resume_track.c: what a reconnect re-establishes ------------------- */

/* Bookkeeping after the call of rq (its frame buf, len bytes, sent with
 * fds) succeeded with reply rp, as rq's kind says.  May change the
 * reply's `id` (a registration whose daemon id equals an id the caller
 * already holds gets a client-local one). */
void gpuipc__track(gpuipc_client *c, const struct gpuipc__req *rq, const uint8_t *buf,
                   size_t len, const int *fds, unsigned nfds, struct gpuipc__reply *rp);
/* Forgets lease id (released without waiting for the reply); false when
 * c did not know it. */
bool gpuipc__lease_drop(gpuipc_client *c, uint64_t id);
/* Whether c's connection holds lease id, as far as c knows (true when it
 * cannot tell). */
bool gpuipc__lease_held(const gpuipc_client *c, uint64_t id, uint32_t epoch);
/* The id the caller knows for a daemon registration id. */
uint64_t gpuipc__user_id(const gpuipc_client *c, uint64_t id);
void gpuipc__resume_clear(gpuipc_client *c);
/* Forgets the lost registrations (gpuipc_client_next_lost). */
void gpuipc__lost_clear(gpuipc_client *c);

/* ---- resume_reconnect.c: reconnecting, and the call in flight ---------- */

/* Whether err means the daemon went away (EOF, reset, shutting_down) and
 * c may reconnect. */
bool gpuipc__may_reconnect(const gpuipc_client *c, int err);
/* Reconnects, resumes or re-establishes what c had; 0 or -errno. */
int gpuipc__reconnect(gpuipc_client *c);
/* After the connection dropped during the call of rq (its frame buf, len
 * bytes, sent with fds): reconnects and completes the call as rq's kind
 * says.  Returns 0 with *ret_reply, or -errno. */
int gpuipc__recover(gpuipc_client *c, const struct gpuipc__req *rq, const uint8_t *buf,
                    size_t len, const int *fds, unsigned nfds, struct gpuipc__reply *ret_reply);

/* ---- admin.c ----------------------------------------------------------- */

#define GPUIPC__WATCH_QUEUE_MAX 4096u

/* Queues a `watch` event (root is its map). */
void gpuipc__watch_push(gpuipc_client *c, const msgpack_object *root);
void gpuipc__watch_clear(gpuipc_client *c);

/* ---- info.c ------------------------------------------------------------ */
/* Copies str object o (or "" when it is NULL or not a str) to *pos, NUL
 * terminated, and moves *pos past it. */
const char *gpuipc__put_str(char **pos, const msgpack_object *o);

/* Checks meta against the protocol's limits; -EINVAL with a reason. */
/* Versions of the caller-filled structs: the bytes of their first release. */
#define GPUIPC__META_V1 (offsetof(gpuipc_meta, user_values) + sizeof(const char *const *))
#define GPUIPC__ACCESS_V1 (offsetof(gpuipc_access, public_) + sizeof(int))
/* A caller-filled struct of `size` bytes (its size field): -EINVAL below v1,
 * -E2BIG when bytes past `known` (what this library knows) are not zero. */
int gpuipc__sized_check(const void *p, size_t size, size_t v1, size_t known,
                        const char **ret_why);
int gpuipc__meta_check(const gpuipc_meta *m, const char **ret_why);
/* Number of keys gpuipc__meta_pack() writes: 0 means omit `meta`. */
uint32_t gpuipc__meta_keys(const gpuipc_meta *m);
/* Packs the value of the `meta` key (a map).  m must have passed the check
 * and have at least one key. */
void gpuipc__meta_pack(msgpack_packer *pk, const gpuipc_meta *m);
/* The longest TTL gpuipc_client_set_ttl() takes: ten years (the daemon's limit). */
#define GPUIPC__TTL_MAX_MS (10ull * 366 * 24 * 3600 * 1000)
/* How many keys register carries for c's access map and TTL
 * (gpuipc__access_pack packs them). */
uint32_t gpuipc__access_keys(const gpuipc_client *c);
void gpuipc__access_pack(msgpack_packer *pk, const gpuipc_client *c);
/* The CUDA fields of record (or batch part) reg into info, whose kind is
 * set: alloc {id, size, regs}, chunks, buffer_id, event; *ret_copied is
 * the `copied` str or NULL.  A cuda-vmm record over several chunks:
 * alloc_size is all of them.  -EBADMSG when malformed. */
int gpuipc__info_cuda(const msgpack_object *reg, gpuipc_info *info,
                      const msgpack_object **ret_copied);
/* Decodes a `reg` record into one heap block holding the gpuipc_info and
 * everything it points to; free() it.  -EBADMSG on a malformed record. */
int gpuipc__info_decode(const msgpack_object *reg, gpuipc_info **ret_info);

/* ---- map.c ------------------------------------------------------------- */

struct gpuipc__map;

/* Maps the whole of fd (the caller keeps and closes fd), or shares an
 * existing mapping of the same file with the same protection that covers at
 * least `need` bytes.  *ret_base is the start of the mapping. */
int gpuipc__map_get(int fd, bool writable, uint64_t need, struct gpuipc__map **ret_map,
                    uint8_t **ret_base);
/* Drops a reference; the last one unmaps.  NULL is allowed. */
void gpuipc__map_put(struct gpuipc__map *m);
/* The start of m when it covers need bytes, else NULL. */
uint8_t *gpuipc__map_base(const struct gpuipc__map *m, uint64_t need);
/* The bytes m maps: the whole file, as it was when mapped. */
uint64_t gpuipc__map_length(const struct gpuipc__map *m);

/* Hints (see map.c): the newest host view of c open on name with that
 * protection.  When there is one, returns true with its lease, registration
 * id and mapping, on which it takes a reference for the caller. */
bool gpuipc__hint_get(const gpuipc_client *c, const char *name, bool writable,
                      uint64_t *ret_lease, uint64_t *ret_id, struct gpuipc__map **ret_map);
/* Makes host view v (with v->c, v->lease, v->info and v->map set) the
 * newest of its name and protection; best effort. */
void gpuipc__hint_add(gpuipc_view *v, const char *name, bool writable);
/* Forgets v (before it is freed); a view never added is fine. */
void gpuipc__hint_del(gpuipc_view *v);

/* ---- view.c ------------------------------------------------------------ */

struct gpuipc__cumap;
struct gpuipc__hint;

struct gpuipc_view {
        gpuipc_client *c;               /* a reference: views may outlive the client */
        uint64_t lease;
        gpuipc_info *info;
        struct gpuipc__map *map;        /* host views */
        uint8_t *data;
        struct gpuipc__cumap *cumap;    /* device views: the opened allocation */
        int device;                     /* device ordinal here, -1 for host */
        void *event;                    /* the producer's CUevent, opened, or NULL */
        uint64_t copy;                  /* COPY_TO_DEVICE: our CUdeviceptr, or 0 */
        uint32_t epoch;                 /* c->epoch when the lease was taken */
        struct gpuipc__hint *hint;      /* host views: the hints it is on (map.c) */
        gpuipc_view *hprev, *hnext;
};

/* ---- dlpack.c: a view's layout as DLPack describes it ------------------ */

/* DLPack's type code and bits of a dtype name or typestr ("" or NULL:
 * uint8); -EINVAL when it has none. */
int gpuipc__dl_dtype(const char *dtype, uint8_t *ret_code, uint8_t *ret_bits);
/* The shape and element strides of info's metadata for its buffer
 * (info->size bytes) and items of isize bytes (PROTO_NDIM_MAX entries
 * each; no shape: info->size / isize items in one dimension);
 * *ret_strided false when the metadata has no strides (compact).
 * -EINVAL / -EOVERFLOW when it does not fit. */
int gpuipc__dl_layout(const gpuipc_info *info, uint32_t isize, int64_t *shape, int64_t *strides,
                      uint32_t *ret_ndim, bool *ret_strided);

/* Releases the lease (with an IPC event handle of GPUIPC__EVENT_LEN bytes,
 * or NULL) and frees v. */
int gpuipc__view_release(gpuipc_view *v, const uint8_t *event);

/* ---- cuda*.c (cudastub.c when built without <cuda.h>) ------------------ */

/* Opens a device view of record reg (a lookup's, or a batch's part),
 * already decoded into v->info, with the fds that came for it (borrowed:
 * the caller closes them) and the reply's `held`: maps the device, opens
 * the allocation once per process and consumer device (device: the
 * consumer's ordinal, -1 for the buffer's own), and waits for the
 * producer's event unless GPUIPC_LOOKUP_NO_SYNC. */
int gpuipc__cuview_open(gpuipc_client *c, const msgpack_object *reg, const int *fds,
                        unsigned nfds, bool held, unsigned flags, int device, gpuipc_view *v);
/* Undoes gpuipc__cuview_open(); NULL-safe parts. */
void gpuipc__cuview_close(gpuipc_view *v);
/* Whether device view v maps this process's own memory (the producer's
 * pointer, nothing opened). */
bool gpuipc__cuview_own(const gpuipc_view *v);
/* The opened allocation v lies in: its start and size into *base and
 * *size; they stay as they are for a view without one (a device copy). */
void gpuipc__cuview_extent(const gpuipc_view *v, uint8_t **base, uint64_t *size);
/* Opens n IPC event handles and synchronises each. */
int gpuipc__cuda_wait_events(gpuipc_client *c, const uint8_t *handles, unsigned n);
/* The mapping cache (cudamap.c): whether lookups ask the daemon to hold
 * allocations; `uncache` of alloc for c; c's connection is gone (its holds
 * with it); the unholds queued for c (*ret to free(), n of them). */
bool gpuipc__cucache_enabled(void);
void gpuipc__cucache_uncache(gpuipc_client *c, uint64_t alloc);
void gpuipc__cucache_conn_lost(gpuipc_client *c);
unsigned gpuipc__cucache_take_unholds(gpuipc_client *c, uint64_t **ret);

#endif

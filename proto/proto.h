/* proto.h: the gpuipcd wire format, shared by the daemon and libgpuipc.
 *
 * A frame is a 4-byte big-endian length N followed by N bytes holding exactly
 * one msgpack map.  docs/protocol.md is the normative description; this
 * module is its only implementation of framing, structure checks, error codes
 * and names.  Nothing here logs or allocates without bound: every size that a
 * peer controls is checked against a cap before memory is committed.
 *
 * All functions return 0 (or a count) on success and a negative errno on
 * failure.  Symbols are internal to the daemon and the library (never
 * exported from libgpuipc.so).
 */
#ifndef GPUIPC_PROTO_H
#define GPUIPC_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <msgpack.h>

#include "wire.h"

/* Buffer kinds (docs/protocol.md, "Buffer kinds"). */
enum proto_kind {
        PROTO_KIND_HOST = 0,
        PROTO_KIND_CUDA_IPC,
        PROTO_KIND_CUDA_VMM,
        PROTO_KIND_CUDA_POOL,           /* a pointer of a stream-ordered pool */
        PROTO_KIND_BATCH,               /* a list of parts of the kinds above */
        _PROTO_KIND_MAX,
};
/* The kinds a single buffer (a registration or a batch's part) may be. */
#define PROTO_BUFFER_KINDS PROTO_KIND_BATCH
const char *proto_kind_name(enum proto_kind k);
/* Whether the daemon holds the memory of kind k (an fd that keeps it
 * alive), rather than the producer (cuda-ipc, cuda-pool). */
static inline bool proto_kind_held(unsigned k)
{
        return k == PROTO_KIND_HOST || k == PROTO_KIND_CUDA_VMM;
}
int proto_kind_from_name(const char *s, size_t len); /* kind or -EINVAL */

/* ---- error codes: the string on the wire <-> a negative errno ---------- */

/* Wire code for a negative errno (unknown errnos map to "internal"). */
const char *proto_code_from_errno(int err);
/* Negative errno for a wire code (unknown codes map to -EIO). */
int proto_errno_from_code(const char *code, size_t len);
/* Formats a reason into why (why_len bytes) and returns -EINVAL. */
int proto_invalid(char *why, size_t why_len, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* ---- decoding ----------------------------------------------------------- */

struct proto_msg {
        msgpack_unpacked up;
        const msgpack_object *root;   /* the top-level map */
};

/* Decodes buf into objects from zone z as msgpack_unpack() would, in one
 * pass that also checks it (unpack.c): buf must hold exactly one map,
 * nested at most PROTO_MAX_DEPTH deep, with no ext types and no reserved
 * byte, where every declared length fits in the bytes that remain and no
 * array (map) declares more elements (pairs x2) than there are bytes left,
 * which bounds what a frame allocates to a small multiple of its length.
 * ret is the top-level map; strings and bins point into buf.  -EBADMSG with
 * a static reason in *ret_why (when not NULL), or -ENOMEM. */
int proto_unpack(const uint8_t *buf, size_t len, msgpack_zone *z, msgpack_object *ret,
                 const char **ret_why);

/* proto_unpack() into m, from a zone of its own.  m->up owns the objects;
 * strings point into buf, so buf must outlive m.  Free with proto_msg_free();
 * a failure leaves m empty (freeing it again is harmless). */
int proto_decode(const uint8_t *buf, size_t len, struct proto_msg *m, const char **ret_why);
void proto_msg_free(struct proto_msg *m);

/* Value of key in map, or NULL when absent (or map is not a map). */
const msgpack_object *proto_get(const msgpack_object *map, const char *key);
/* proto_get(), with a nil value as absent (NULL). */
const msgpack_object *proto_get_present(const msgpack_object *map, const char *key);
/* Typed getters: -ENOENT when the key is absent, -EINVAL when the value has
 * the wrong type or range.  A nil value counts as absent. */
int proto_get_u64(const msgpack_object *map, const char *key, uint64_t *ret);
int proto_get_i64(const msgpack_object *map, const char *key, int64_t *ret);
int proto_get_bool(const msgpack_object *map, const char *key, bool *ret);
int proto_get_str(const msgpack_object *map, const char *key, const char **ret, size_t *ret_len);
int proto_get_bin(const msgpack_object *map, const char *key, const uint8_t **ret, size_t *ret_len);
int proto_get_map(const msgpack_object *map, const char *key, const msgpack_object **ret);
int proto_get_array(const msgpack_object *map, const char *key, const msgpack_object **ret);
/* The values of n keys (at most PROTO_GET_N_MAX, none empty) of map in
 * one pass over it: ret[i] is what proto_get(map, keys[i].name) gives, or
 * NULL when that is nil; for records read field by field, which a search
 * per key makes quadratic.  The proto_obj_* helpers then take the values.
 * Tables of keys are written with PROTO_KEY("name"). */
#define PROTO_GET_N_MAX 32u
struct proto_key {
        const char *name;
        size_t len;
};
#define PROTO_KEY(s) { s, sizeof(s) - 1 }
void proto_get_n(const msgpack_object *map, const struct proto_key *keys, unsigned n,
                 const msgpack_object **ret);
int proto_obj_u64(const msgpack_object *o, uint64_t *ret);
int proto_obj_i64(const msgpack_object *o, int64_t *ret);
bool proto_obj_str_eq(const msgpack_object *o, const char *s);
/* Copies a str object into a new NUL-terminated string; -EINVAL if it holds
 * a NUL byte or is not a str, -ENOMEM. */
int proto_obj_strdup(const msgpack_object *o, char **ret);

/* ---- encoding ----------------------------------------------------------- */

struct proto_out {
        msgpack_sbuffer sb;
        msgpack_packer pk;
};

/* Starts a frame: reserves the length prefix. */
void proto_out_init(struct proto_out *o);
/* Patches the length prefix; -EMSGSIZE when the body exceeds max_frame. */
int proto_out_finish(struct proto_out *o, uint32_t max_frame);
/* Hands the frame bytes to the caller (free() them); o is then empty. */
uint8_t *proto_out_release(struct proto_out *o, size_t *ret_len);
void proto_out_free(struct proto_out *o);

void proto_pack_str(msgpack_packer *pk, const char *s);
void proto_pack_strn(msgpack_packer *pk, const char *s, size_t n);
void proto_pack_kstr(msgpack_packer *pk, const char *key, const char *val);
void proto_pack_ku64(msgpack_packer *pk, const char *key, uint64_t val);
void proto_pack_ki64(msgpack_packer *pk, const char *key, int64_t val);
void proto_pack_kbool(msgpack_packer *pk, const char *key, bool val);
/* An error reply body: "error": {"code": ..., "message": ...}. */
void proto_pack_error(msgpack_packer *pk, int err, const char *message);

/* A map whose entry count is written by proto_map_end(), for a packer onto
 * a msgpack_sbuffer (a proto_out's, or the journal's): the proto_map_k*
 * helpers pack a key and its value and count the entry; after
 * proto_map_key() the caller packs the value itself.  Maps nest; each
 * ends before the one it is in.  The bytes are msgpack_pack_map()'s. */
struct proto_map {
        msgpack_packer *pk;
        msgpack_sbuffer *sb;
        size_t at;                      /* of the header in sb */
        uint32_t n;                     /* entries so far */
};

void proto_map_begin(struct proto_map *m, msgpack_packer *pk);
void proto_map_end(struct proto_map *m);
void proto_map_key(struct proto_map *m, const char *key);
/* Counts one entry whose key and value the caller packs. */
void proto_map_add(struct proto_map *m);
void proto_map_kstr(struct proto_map *m, const char *key, const char *val);
void proto_map_kstrn(struct proto_map *m, const char *key, const char *val, size_t len);
void proto_map_ku64(struct proto_map *m, const char *key, uint64_t val);
void proto_map_ki64(struct proto_map *m, const char *key, int64_t val);
void proto_map_kbool(struct proto_map *m, const char *key, bool val);
void proto_map_kbin(struct proto_map *m, const char *key, const void *p, size_t len);

/* ---- buffer metadata ---------------------------------------------------- */

/* The parts of a meta map, pointing into it; NULL when absent. */
struct proto_meta {
        const msgpack_object *dtype, *shape, *strides, *user;
};

/* Checks meta map m: dtype a str of at most PROTO_DTYPE_MAX bytes of UTF-8,
 * shape at most PROTO_NDIM_MAX ints >= 0, strides as many ints, user at
 * most PROTO_USER_MAX_ENTRIES pairs of UTF-8 strs (keys PROTO_USER_KEY_MAX
 * bytes, values PROTO_USER_VALUE_MAX); other keys are ignored.  -EINVAL
 * with a reason in why (why_len bytes). */
int proto_meta_check(const msgpack_object *m, struct proto_meta *ret, char *why,
                     size_t why_len);
static inline bool proto_meta_empty(const struct proto_meta *m)
{
        return !m->dtype && !m->shape && !m->strides && !m->user;
}
/* Packs a checked meta as the daemon keeps it: the known keys in the
 * order above, numbers as msgpack ints. */
void proto_meta_pack(msgpack_packer *pk, const struct proto_meta *m);

/* ---- the CUDA fields of a registration record ---------------------------- */

/* An allocation entry as a record shows it: alloc, and each of chunks. */
struct proto_cuda_alloc {
        uint64_t id, size;
        uint32_t regs;                  /* registrations of it */
        bool cacheable;
        const uint8_t *key;             /* PROTO_ALLOC_KEY_LEN bytes, or NULL: none */
};

/* What the daemon packs: device, alloc, chunks (a cuda-vmm registration
 * over several), copied, buffer_id and handle (cuda-ipc, cuda-pool),
 * event.  NULL or false leaves a field out. */
struct proto_cuda_rec {
        const char *device;             /* "GPU-..." */
        struct proto_cuda_alloc alloc;
        const struct proto_cuda_alloc *chunks;  /* n_chunks, when above 1 */
        uint32_t n_chunks;
        const char *copied;
        bool has_buffer_id;
        uint64_t buffer_id;
        const uint8_t *handle;          /* with buffer_id; PROTO_IPC_HANDLE_LEN bytes */
        const uint8_t *event;           /* PROTO_IPC_HANDLE_LEN bytes */
};
/* Packs c's fields into record map m. */
void proto_cuda_pack(struct proto_map *m, const struct proto_cuda_rec *c);

/* What a reader takes of them, checked: absent fields read 0, NULL or
 * false.  vmm: the record is cuda-vmm, so chunks count (n_chunks is 1
 * without them; with them, 2 to PROTO_CHUNKS_MAX maps whose sizes add up
 * to chunks_size). */
struct proto_cuda_view {
        uint64_t alloc_id, alloc_size;
        uint32_t alloc_regs;
        const msgpack_object *chunks;   /* the array, or NULL */
        uint32_t n_chunks;
        uint64_t chunks_size;
        const msgpack_object *copied;   /* a str, or NULL */
        uint64_t buffer_id;
        bool has_event;
};
/* -EBADMSG when a field has the wrong type or range. */
int proto_cuda_decode(const msgpack_object *reg, bool vmm, struct proto_cuda_view *v);

/* ---- batches ------------------------------------------------------------ */

/* Checks a map of str to str as meta.user and the arrow metadata maps are:
 * at most PROTO_USER_MAX_ENTRIES pairs of UTF-8 strs, keys at most
 * PROTO_USER_KEY_MAX bytes, values PROTO_USER_VALUE_MAX.  what names the map
 * in the reason.  -EINVAL with a reason in why (why_len bytes). */
int proto_strmap_check(const msgpack_object *m, const char *what, char *why, size_t why_len);

/* A column node's fields as proto_arrow_check() found them (NULL: absent
 * or nil). */
enum {
        PROTO_NODE_NAME, PROTO_NODE_FORMAT, PROTO_NODE_FLAGS, PROTO_NODE_LENGTH,
        PROTO_NODE_NULLS, PROTO_NODE_OFFSET, PROTO_NODE_CHILDREN, PROTO_NODE_BUFFERS,
        PROTO_NODE_METADATA, PROTO_NODE_KEYS
};
struct proto_arrow_node {
        const msgpack_object *k[PROTO_NODE_KEYS];
};

/* Checks a batch's arrow description (docs/protocol.md, "Batches") against
 * a batch of n_parts parts: rows, metadata, the pre-order column tree
 * with its children counts, each node's fields and buffers (part indexes
 * below n_parts, or -1), every part named by some node, and nesting at most
 * PROTO_BATCH_ARROW_DEPTH.  Keys it does not know are allowed.  ret_nodes,
 * when not NULL, has room for as many nodes as arrow.columns holds (a
 * description of more than PROTO_BATCH_NODES_MAX is refused before any is
 * written) and receives each checked node's fields, so that a reader need
 * not search them again.
 * -EINVAL with a reason in why (why_len bytes) naming the node. */
int proto_arrow_check(const msgpack_object *arrow, uint32_t n_parts,
                      struct proto_arrow_node *ret_nodes, char *why, size_t why_len);

/* ---- access rules ------------------------------------------------------- */

/* Who besides the owner and root may look a registration up. */
struct proto_access {
        bool public_;                   /* everyone */
        bool has_group;                 /* group and group_gid hold a group */
        uint32_t group_gid;
        uint32_t n_uids, n_gids;
        uint32_t uids[PROTO_ACCESS_IDS_MAX];
        uint32_t gids[PROTO_ACCESS_IDS_MAX];
        char group[PROTO_ACCESS_GROUP_MAX + 1];         /* "" for none */
};

/* The access map {public, uids, gids[, group, group_gid]}; NULL packs the
 * owner-only rule.  The caller packs the key. */
void proto_access_pack(msgpack_packer *pk, const struct proto_access *a);
/* Every key must be there, group_gid too where group is (the journal). */
#define PROTO_ACCESS_FULL 1u
/* Decodes and checks access map m into a.  Without PROTO_ACCESS_FULL every
 * key is optional, and a group without group_gid leaves group set and
 * has_group false, for the daemon to resolve.  -EINVAL with a reason in
 * why (why_len bytes). */
int proto_access_decode(const msgpack_object *m, unsigned flags, struct proto_access *a,
                        char *why, size_t why_len);

/* ---- incoming byte stream -> frames ------------------------------------- */

struct proto_reader {
        uint8_t *buf;
        size_t cap, start, end;     /* unread bytes are buf[start..end) */
        uint32_t max_frame;
        uint64_t pos;               /* stream offset of buf[start] */
};

int proto_reader_init(struct proto_reader *r, uint32_t max_frame);
void proto_reader_free(struct proto_reader *r);
/* Room to receive into (at least 1 byte, growing the buffer up to one full
 * frame); -ENOMEM. */
int proto_reader_space(struct proto_reader *r, uint8_t **ret_ptr, size_t *ret_len);
void proto_reader_commit(struct proto_reader *r, size_t n);
/* Stream offset one past the last byte received. */
uint64_t proto_reader_received(const struct proto_reader *r);
/* Next complete frame: returns 1 and the body (valid until the next call of
 * any proto_reader function), its length and the stream offset of its length
 * prefix; 0 when no complete frame is buffered; -EMSGSIZE when the declared
 * length is 0 or above max_frame (the stream cannot be resynchronised). */
int proto_reader_next(struct proto_reader *r, const uint8_t **ret_body, uint32_t *ret_len,
                      uint64_t *ret_off);

/* ---- fds received with SCM_RIGHTS, waiting for their frame -------------- */

/* Each fd is stamped with the stream offset one past the last byte of the
 * recvmsg() that brought it.  Senders attach a frame's fds to a sendmsg()
 * that starts with the frame's first byte and carries no byte of another
 * frame.  On an AF_UNIX stream socket the kernel hands the fds to the
 * recvmsg() that reads the first byte of that sendmsg and ends that
 * recvmsg() within its bytes (it may glue earlier fd-less bytes before
 * them, never later ones after them), so the last byte read, stamp - 1,
 * lies in the frame: the frame [S, E) owns exactly the fds stamped in
 * (S, E].  A frame that declares fds it did not get therefore never takes
 * those of the next frame, and fds that came with a frame are closed when
 * it is done (proto_fdq_drop_stale(q, E)). */
struct proto_fdq {
        int fd[PROTO_MAX_PENDING_FDS];
        uint64_t stamp[PROTO_MAX_PENDING_FDS];
        unsigned n;
};

void proto_fdq_init(struct proto_fdq *q);
/* Queues fd; when the queue is full closes it and returns -EMFILE. */
int proto_fdq_push(struct proto_fdq *q, int fd, uint64_t stamp);
/* Closes the fds stamped at or before off (those of frames that start
 * before it, or of the frame that ends at off); returns how many. */
unsigned proto_fdq_drop_stale(struct proto_fdq *q, uint64_t off);
/* Moves the first n fds of the frame [frame_off, frame_end) into fds[] and
 * closes any more that came with it; when fewer than n came with it,
 * closes those that did and returns -EBADF.  fds of later frames stay. */
int proto_fdq_take(struct proto_fdq *q, uint64_t frame_off, uint64_t frame_end, unsigned n,
                   int *fds);
/* For a frame [frame_off, frame_end) refused without knowing its fds:
 * closes the stale ones and every fd that arrived with the frame's bytes. */
void proto_fdq_drop_frame(struct proto_fdq *q, uint64_t frame_off, uint64_t frame_end);
/* Closes every queued fd. */
void proto_fdq_clear(struct proto_fdq *q);

/* ---- AF_UNIX transport -------------------------------------------------- */

/* How the fds that proto drops (what a peer sent and no frame took) are
 * closed: close() by default; the daemon sets a closer that works off its
 * event loop (daemon/closer.h).  NULL restores close(). */
void proto_set_fd_closer(void (*close_fd)(int fd));
void proto_close_fd(int fd);

/* recvmsg() with MSG_CMSG_CLOEXEC.  Returns the bytes read (0 at EOF) and the
 * fds received in fds[0..*ret_nfds).  If the control data was truncated
 * (more fds than max_fds were sent), closes what arrived and returns
 * -EMSGSIZE.  -EAGAIN when nothing is ready on a non-blocking socket. */
ssize_t proto_recv(int sock, void *buf, size_t len, int *fds, unsigned max_fds, unsigned *ret_nfds);
/* sendmsg() with MSG_NOSIGNAL, attaching nfds fds (0..PROTO_MAX_FDS) to the
 * first byte.  Returns the bytes written or a negative errno. */
ssize_t proto_send(int sock, const struct iovec *iov, int iovcnt, const int *fds, unsigned nfds);
/* The directory of socket path into buf (len bytes): "." for a bare name,
 * "/" for one in the root.  Returns buf. */
char *proto_sock_dir(const char *path, char *buf, size_t len);

/* ---- names -------------------------------------------------------------- */

/* A name is 1..PROTO_NAME_MAX bytes of [A-Za-z0-9._:@+=-] segments joined by
 * '/', at most PROTO_NAME_MAX_SEGMENTS, none empty, "." or "..".  Returns 0
 * or -EINVAL with a static reason. */
int proto_name_check(const char *s, size_t len, const char **ret_why);
/* True when name lies in namespace prefix: equal to it or below it.  An
 * empty prefix matches everything; a trailing '/' on prefix is ignored. */
bool proto_name_in(const char *name, size_t name_len, const char *prefix, size_t prefix_len);
/* The length of the longest prefix of s that is well-formed UTF-8 (no
 * overlong forms, surrogates or code points above U+10FFFF): len when all
 * of it is. */
size_t proto_utf8_valid(const char *s, size_t len);
/* True when s[0..len) is well-formed UTF-8 with no control character (C0,
 * DEL, C1) and no bidirectional embedding, override or isolate (U+202A to
 * U+202E, U+2066 to U+2069): text a person reads as it came. */
bool proto_text_valid(const char *s, size_t len);

#endif

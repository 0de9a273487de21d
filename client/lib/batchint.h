/* batchint.h: private interfaces of libgpuipc's batches: arrowfmt.c (what
 * an Arrow format means for its buffers), batch.c (the builder),
 * batchreg.c (register), batchdesc.c (a batch's record), batchview.c
 * (lookup), batchexport.c (Arrow structs out) and cudabatch.c (device
 * parts). */
#ifndef GPUIPC_BATCHINT_H
#define GPUIPC_BATCHINT_H

#include "internal.h"

_Static_assert(GPUIPC_KIND_BATCH == (int)PROTO_KIND_BATCH, "batch kind");
_Static_assert(GPUIPC_BATCH_PARTS_MAX == PROTO_BATCH_PARTS_MAX, "batch parts");
_Static_assert(GPUIPC_BATCH_NODES_MAX == PROTO_BATCH_NODES_MAX, "batch nodes");

#define GPUIPC__BATCH_FDS_MAX PROTO_MAX_FDS
#define GPUIPC__BATCH_DEPTH_MAX 64u     /* nesting of Arrow children */
#define GPUIPC__BATCH_ALIGN 64u         /* of each buffer in the copy memfd */

/* ---- arrowfmt.c --------------------------------------------------------- */

/* What one buffer of an Arrow array holds, and so how its size follows
 * from the array's offset and length. */
enum gpuipc__arrow_buf {
        GPUIPC__AB_NONE = 0,
        GPUIPC__AB_VALIDITY,            /* one bit per element, may be absent */
        GPUIPC__AB_BITS,                /* boolean values, one bit each */
        GPUIPC__AB_FIXED,               /* width bytes per element */
        GPUIPC__AB_OFFSETS32,           /* length + 1 int32 offsets */
        GPUIPC__AB_OFFSETS64,
        GPUIPC__AB_DATA32,              /* bytes up to the last int32 offset */
        GPUIPC__AB_DATA64,
};

struct gpuipc__arrow_layout {
        unsigned n_buffers;
        uint8_t buf[3];                 /* enum gpuipc__arrow_buf */
        uint32_t width;                 /* GPUIPC__AB_FIXED */
        int children;                   /* 0, exactly 1, or -1: any number (struct) */
        uint32_t list_size;             /* "+w:N": N */
};

/* The layout of format f; -ENOTSUP (a type batches cannot carry) or
 * -EINVAL (not a format), with a static reason. */
int gpuipc__arrow_layout(const char *f, struct gpuipc__arrow_layout *l, const char **ret_why);
/* Bytes buffer i of an array of layout l needs from the buffer's start,
 * at offset and length (both >= 0); last is the last offset (offsets[offset
 * + length]) for the data buffers.  -EOVERFLOW past INT64_MAX. */
int gpuipc__arrow_buf_size(const struct gpuipc__arrow_layout *l, unsigned i, int64_t offset,
                           int64_t length, int64_t last, uint64_t *ret);

/* Metadata pairs, as a batch keeps them (each string malloc()ed). */
struct gpuipc__meta {
        uint32_t n;
        char **keys, **values;
};

/* Replaces m by a copy of n pairs (klen, vlen: their lengths, or NULL for
 * C strings), checked against the protocol's limits: -EINVAL or -E2BIG
 * with a reason in why. */
int gpuipc__meta_set(struct gpuipc__meta *m, uint32_t n, const char *const *keys,
                     const char *const *values, const size_t *klen, const size_t *vlen,
                     char *why, size_t why_len);
/* Replaces m by the pairs of an ArrowSchema's binary metadata (NULL: none). */
int gpuipc__meta_parse(const char *bin, struct gpuipc__meta *m, char *why, size_t why_len);
void gpuipc__meta_free(struct gpuipc__meta *m);
/* The binary form of n pairs: its length, and writing it to out. */
size_t gpuipc__meta_encoded_len(uint32_t n, const char *const *keys, const char *const *values);
void gpuipc__meta_encode(char *out, uint32_t n, const char *const *keys,
                         const char *const *values);

/* ---- batch.c: the builder ----------------------------------------------- */

/* One distinct buffer: a part. */
struct gpuipc__bbuf {
        uint64_t ptr;                   /* host address or CUdeviceptr */
        uint64_t size;
        int device;                     /* -1: host */
};

/* One array, in pre-order. */
struct gpuipc__bnode {
        char *name, *format;
        int64_t flags, length, null_count, offset;
        uint32_t n_children;
        uint32_t n_buffers;
        int32_t buf[3];                 /* indexes into bufs; -1: absent */
        struct gpuipc__meta meta;
};

struct gpuipc_batch {
        struct gpuipc__bnode *nodes;
        uint32_t n_nodes, cap_nodes;
        struct gpuipc__bbuf *bufs;
        uint32_t n_bufs, cap_bufs;
        uint32_t n_columns;
        int64_t rows;                   /* -1 before the first column */
        struct gpuipc__meta meta;
        bool meta_set;                  /* by set_metadata or a record batch */
        void *event;                    /* a CUevent for the registration, or NULL */
        int event_device;
        char errmsg[GPUIPC__ERRMSG_MAX];
};

/* Grows array *p of *cap elements of size bytes (doubling) to hold need;
 * -ENOMEM leaves it as it was. */
int gpuipc__grow(void **p, unsigned *cap, unsigned need, size_t size);

/* ---- hostbuf.c ----------------------------------------------------------- */

/* When [ptr, ptr + size) lies inside a live gpuipc_hostbuf of this
 * process: true, its memfd (still the buffer's) and the offset of ptr in
 * it. */
bool gpuipc__hostbuf_find(uint64_t ptr, uint64_t size, int *ret_fd, uint64_t *ret_offset);
/* Seals a memfd for register (see hostbuf.c); -errno with c's error set. */
int gpuipc__seal_for_register(gpuipc_client *c, int fd, uint64_t offset, uint64_t size,
                              bool *shared_write);

/* ---- batchdesc.c: a batch in a record ------------------------------------ */

struct gpuipc_batch_desc {
        uint64_t rows;
        uint32_t n_parts;
        gpuipc_batch_part *parts;       /* NULL when the record has only the count */
        uint32_t n_nodes, n_columns;
        gpuipc_batch_node *nodes;
        uint32_t *columns;              /* node index of each top-level column */
};

/* A part's fields as gpuipc__batchrec_parse() read them. */
enum { GPUIPC__PART_KIND, GPUIPC__PART_SIZE, GPUIPC__PART_DEVICE, GPUIPC__PART_COPIED,
       GPUIPC__PART_KEYS };
struct gpuipc__partkeys {
        const msgpack_object *k[GPUIPC__PART_KEYS];
};

/* A batch record's checked pieces (pointing into the record), and the
 * bytes that gpuipc__batchdesc_put() needs: structs (a multiple of 8) and
 * strings.  Each node's and part's fields are read once, into nodek and
 * partk (one heap block, freed by gpuipc__batchrec_free()). */
struct gpuipc__batchrec {
        const msgpack_object *parts;    /* array, or NULL */
        const msgpack_object *nodes;    /* arrow.columns, or NULL */
        struct proto_arrow_node *nodek; /* one per node, or NULL */
        struct gpuipc__partkeys *partk; /* one per part of parts, or NULL */
        void *keys_block;
        const msgpack_object *metadata; /* arrow.metadata, or NULL */
        const msgpack_object *copied;   /* the first part's `copied` str, or NULL */
        uint64_t rows;
        uint32_t n_parts, n_meta_ptrs;
        size_t struct_bytes, string_bytes;
};

/* -EBADMSG when reg's batch fields are malformed, -ENOMEM.  Free br with
 * gpuipc__batchrec_free() either way. */
int gpuipc__batchrec_parse(const msgpack_object *reg, struct gpuipc__batchrec *br);
void gpuipc__batchrec_free(struct gpuipc__batchrec *br);
/* Lays the description out at mem (struct_bytes, 8-aligned), its strings
 * at *pos (advanced). */
const gpuipc_batch_desc *gpuipc__batchdesc_put(const struct gpuipc__batchrec *br, void *mem,
                                               char **pos);

/* ---- batchview.c, batchexport.c: the consumer ----------------------------- */

/* One part as mapped here. */
struct gpuipc__bpart {
        uint8_t *data;                  /* host address or CUdeviceptr */
        uint64_t size;
        int device;                     /* ordinal here, -1: host */
        uint32_t fd;                    /* host: index of its fd in the reply */
        uint64_t offset;                /* host: in that memfd */
        gpuipc_view *dv;                /* device parts: the mapping */
};

struct gpuipc_batch_view {
        gpuipc_client *c;               /* a reference */
        uint64_t lease;
        uint32_t epoch;
        unsigned refs;                  /* atomic: the caller's, one per exported array */
        gpuipc_info *info;
        const gpuipc_batch_desc *desc;  /* info->batch */
        struct gpuipc__bpart *parts;
        struct gpuipc__map *maps[GPUIPC__BATCH_FDS_MAX];        /* by reply fd */
        void *event;                    /* the batch's CUevent, opened, or NULL */
        int event_device;
        int device;                     /* of every part: -1 all host, -2 mixed */
};

/* Drops a reference to v; the last one unmaps it and gives its lease
 * back: now when now is true (the client's own thread), else queued on
 * the client (gpuipc__deferred_send). */
void gpuipc__batch_view_unref(gpuipc_batch_view *v, bool now);
/* Sends the releases queued by release callbacks (at the start of a call,
 * and in gpuipc_client_free); they fail quietly. */
void gpuipc__deferred_send(gpuipc_client *c);

/* ---- cudabatch.c: device parts (cudastub.c without <cuda.h>) -------------- */

struct gpuipc__cuparts;

/* Shares the n device buffers (bufs[i]) as gpuipc_cuda_register() would,
 * each in its own part, and the batch's event (event on device
 * event_device, or NULL).  flags: the register's. */
int gpuipc__cuparts_new(gpuipc_client *c, const struct gpuipc__bbuf *const *bufs, unsigned n,
                        void *event, int event_device, unsigned flags,
                        struct gpuipc__cuparts **ret);
/* The fds part i sends (owned by p or the export tables). */
unsigned gpuipc__cuparts_fds(const struct gpuipc__cuparts *p, unsigned i, const int **ret_fds);
/* Packs part i as a map: its size, and fds as the indexes fdidx. */
void gpuipc__cuparts_pack(msgpack_packer *pk, const struct gpuipc__cuparts *p, unsigned i,
                          uint64_t size, const uint32_t *fdidx);
/* Whether a part stays the producer's (cuda-ipc, cuda-pool): ephemeral. */
bool gpuipc__cuparts_bound(const struct gpuipc__cuparts *p);
/* The event handle to send (PROTO_IPC_HANDLE_LEN bytes), or NULL. */
const uint8_t *gpuipc__cuparts_event(const struct gpuipc__cuparts *p);
void gpuipc__cuparts_free(struct gpuipc__cuparts *p);
/* Copies n bytes of device memory at dptr (device ordinal) to dst. */
int gpuipc__cuda_read(uint64_t dptr, int device, void *dst, size_t n, char *why, size_t why_len);
/* Opens an IPC event handle in device's context (waiting for it unless
 * GPUIPC_LOOKUP_NO_SYNC; own: the batch has this process's own memory,
 * and an event that cannot be opened is then no error, *ret_event NULL);
 * closing it (NULL-safe).  cudamap.c. */
int gpuipc__cuda_event_open(gpuipc_client *c, const uint8_t *handle, int device, bool own,
                            unsigned flags, void **ret_event);
void gpuipc__cuda_event_close(void *event, int device);

#endif

/*
 * Internal header of the CUDA driver test double (libcuda.so.1 for CI).
 *
 * The entry points are defined under the names the real libcuda exports
 * (cuMemAlloc_v2, cuIpcOpenMemHandle_v2, ...), with the prototypes of the
 * real <cuda.h>, so the compiler checks every signature.  See README.md.
 */
#ifndef GPUIPC_CUDA_DOUBLE_H
#define GPUIPC_CUDA_DOUBLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cuda.h>

/*
 * Older entry points the real library still exports; cuda.h only declares
 * them for its own build, so declare them here (after dropping the macros
 * that rename them to their newest versions).
 */
#undef cuDeviceGetUuid
#undef cuCtxCreate
#undef cuGetProcAddress
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags);

/* Not CUDA: how often an entry point ran in this process (-1: unknown name). */
long gpuipc_cuda_double_count(const char *name);

#define DBL_MAX_DEVICES 8
#define DBL_GRANULARITY (2UL << 20)
#define DBL_TOTAL_MEM (143771UL << 20)  /* like the measured H200 */
#define DBL_DRIVER_VERSION 13000
#define DBL_CTX_STACK 32

/* ---- global state (core.c) ---- */

struct dbl_ctx {
        struct dbl_ctx *next;
        int ordinal;            /* device ordinal in this process */
        int phys;               /* physical device index */
        bool primary;
        bool alive;
        unsigned int refs;      /* primary context: retain count */
        unsigned int flags;
        uint32_t peer_mask;     /* physical devices with peer access enabled */
};

struct dbl_state {
        bool initialized;
        bool poisoned;                  /* forked after cuInit */
        int owner_pid;                  /* pid that ran cuInit */
        uint64_t nonce;                 /* per-process, against pid reuse */
        uint64_t pidns;                 /* st_ino of /proc/self/ns/pid (0: unknown) */
        int ndev_phys;                  /* GPUIPC_CUDA_DOUBLE_DEVICES */
        int ndev;                       /* visible devices */
        int visible[DBL_MAX_DEVICES];   /* ordinal -> physical index */
        uint8_t no_peer[DBL_MAX_DEVICES][DBL_MAX_DEVICES];
        bool already_mapped_error;      /* GPUIPC_CUDA_DOUBLE_ALREADY_MAPPED */
        unsigned int event_delay_ms;    /* GPUIPC_CUDA_DOUBLE_EVENT_DELAY_MS */
        char shm_dir[256];              /* GPUIPC_CUDA_DOUBLE_SHM_DIR */
        unsigned long long next_bufid;
        unsigned long long next_vmm_id;
        size_t used[DBL_MAX_DEVICES];   /* bytes allocated per physical device */
        struct dbl_ctx *primary[DBL_MAX_DEVICES];
        struct dbl_ctx *contexts;       /* every context ever made (never freed) */
};

extern struct dbl_state dbl;
extern pthread_mutex_t dbl_mutex;

void dbl_lock(void);
void dbl_unlock(void);
/* Lock and check cuInit ran; on error the lock is not held. */
CUresult dbl_enter(void);
/* As dbl_enter, and also require a live current context. */
CUresult dbl_enter_ctx(void);
struct dbl_ctx *dbl_current(void);
uint64_t dbl_now_ns(void);
void dbl_sleep_ns(uint64_t ns);
/* <shm dir>/gpuipc-double-<pid>-n<pidns>-<nonce>-<kind><id> */
void dbl_shm_path(char *buf, size_t len, int pid, uint64_t pidns, uint64_t nonce, char kind,
                  unsigned long long id);
const char *dbl_getenv(const char *name);

/* ---- call counters and cuGetProcAddress table (procaddr.c) ---- */

void dbl_count(atomic_int *idx, const char *func);
void dbl_counts_reset(void);
void dbl_stats_write(void);

/* Every entry point starts with DBL_ENTER(): counts the call by its name. */
#define DBL_ENTER()                                          \
        static atomic_int dbl_idx_ = -1;                     \
        dbl_count(&dbl_idx_, __func__)

/* ---- devices and contexts (device.c) ---- */

void dbl_devices_setup(void);
bool dbl_ordinal_ok(CUdevice dev);
int dbl_phys_to_ordinal(int phys);
bool dbl_peer_ok(int phys_a, int phys_b);
void dbl_uuid_bytes(int phys, unsigned char out[16]);
bool dbl_ctx_valid(struct dbl_ctx *c);
void dbl_ctx_forget_current(void);

/* ---- memory regions (memory.c) ---- */

enum dbl_region_kind {
        DBL_R_ALLOC,            /* cuMemAlloc: named shared file */
        DBL_R_IPC,              /* cuIpcOpenMemHandle mapping */
        DBL_R_VMM,              /* cuMemMap of a cuMemCreate/imported handle */
        DBL_R_POOL,             /* stream-ordered pool allocation, or an import of one */
};

struct dbl_vmm_alloc;
struct dbl_resv;
struct dbl_pool;

struct dbl_region {
        struct dbl_region *next;
        enum dbl_region_kind kind;
        uintptr_t base;
        size_t size;            /* as asked for */
        size_t map_len;         /* page-rounded length of the mapping */
        unsigned long long bufid;
        int phys;
        struct dbl_ctx *ctx;    /* NULL for VMM */
        int prot;               /* PROT_* the device/host has on it */
        uint32_t access_phys;   /* VMM: physical devices cuMemSetAccess granted */
        /* DBL_R_ALLOC */
        char path[320];
        /* DBL_R_IPC */
        int src_pid;
        uint64_t src_nonce;
        unsigned long long src_bufid;
        unsigned int refs;
        /* DBL_R_VMM */
        struct dbl_vmm_alloc *alloc;
        size_t offset;
        struct dbl_resv *resv;
        /* DBL_R_POOL (an import also uses src_pid, src_nonce, src_bufid, refs) */
        struct dbl_pool *pool;
        bool pool_imported;
        off_t pool_off;         /* where it lives in the pool's file (exportable pools) */
        unsigned long long src_pool;
};

extern struct dbl_region *dbl_regions;

struct dbl_region *dbl_region_find(uintptr_t addr);
struct dbl_region *dbl_region_new(enum dbl_region_kind kind);
void dbl_region_unlink(struct dbl_region *r);
/* Is [p, p+n) covered by device memory with at least `prot` access? */
bool dbl_range_ok(uintptr_t p, size_t n, int prot);
void dbl_free_ctx_resources(struct dbl_ctx *c);
void dbl_region_release(struct dbl_region *r);  /* munmap + unlink + free */
/* vmm.c: reservation range, handle types and allocation id of a VMM mapping. */
void dbl_vmm_region_info(struct dbl_region *r, uintptr_t *resv_base, size_t *resv_size,
                         unsigned long long *handle_types, unsigned long long *block_id);
void dbl_unlink_all_names(void);

/* ---- stream-ordered memory pools (pool.c, poolipc.c) ---- */

#define DBL_POOL_MEMFD "gpuipc-double-pool"
#define DBL_POOL_MAGIC 0x4c4f4f5055504764ULL   /* "dGPUPOOL" */
#define DBL_ALLOC_MAGIC 0x434f4c4c41504764ULL  /* "dGPALLOC" */
#define DBL_NREUSE 3                            /* the three REUSE_* attributes */

struct dbl_pool_hdr {           /* page 0 of an exportable pool's file */
        uint64_t magic;
        uint64_t pool_id;
        uint64_t nonce;
        int32_t pid;
        int32_t phys;
        uint64_t handle_types;
};

struct dbl_alloc_hdr {          /* the page before each allocation in that file */
        uint64_t magic;
        uint64_t alloc_id;
        uint64_t size;
        uint64_t freed;         /* set by the exporter's free */
};

struct dbl_pool {
        struct dbl_pool *next;
        unsigned long long id;
        int phys;
        bool is_default;
        bool imported;
        bool destroyed;                 /* by cuMemPoolDestroy; freed when live == 0 */
        unsigned long long handle_types;
        size_t max_size;                /* 0: no limit */
        int fd;                         /* the memfd, or the imported fd; -1 if private */
        off_t end;                      /* exportable: the file's size so far */
        unsigned int live;              /* allocations (or imports) not yet freed */
        uint8_t access[DBL_MAX_DEVICES];        /* CUmemAccess_flags per physical device */
        uint64_t release_threshold;
        int reuse[DBL_NREUSE];
        uint64_t used, used_high;
        /* imported: the exporter's pool */
        int src_pid;
        uint64_t src_nonce;
        unsigned long long src_pool_id;
};

size_t dbl_page_size(void);
size_t dbl_page_round(size_t n);
/* A live (not destroyed) pool of this process, or NULL. */
struct dbl_pool *dbl_pool_lookup(CUmemoryPool h);
struct dbl_pool *dbl_pool_new(int phys, unsigned long long handle_types);
/* Frees a destroyed pool once nothing of it is left. */
void dbl_pool_maybe_free(struct dbl_pool *p);

/* cuMemFree/cuMemFreeAsync of pool memory at p: CUDA_ERROR_INVALID_VALUE
 * unless p starts a pool allocation or import.  Lock held; drains streams. */
CUresult dbl_pool_free_at(uintptr_t p);
void dbl_pool_region_info(struct dbl_region *r, unsigned long long *handle_types,
                          CUmemoryPool *pool);

/* ---- IPC naming (ipc.c) ---- */

void dbl_sweep_stale(void);
/* The exporter is gone.  Only a process of the exporter's pid namespace can
 * tell: for another namespace this is always false. */
bool dbl_pid_dead(int pid, uint64_t pidns);
/* st_ino of /proc/self/ns/pid, or 0 if it cannot be read. */
uint64_t dbl_read_pidns(void);

/* ---- streams and events (stream.c, event.c) ---- */

struct dbl_evshm {
        uint64_t magic;
        _Atomic uint64_t enq_gen;       /* records issued */
        _Atomic uint64_t done_gen;      /* records executed */
        _Atomic uint64_t done_at_ns;    /* CLOCK_MONOTONIC time the last one completes */
};

struct dbl_event {
        struct dbl_event *next;
        struct dbl_ctx *ctx;
        unsigned int flags;
        unsigned int refs;              /* the handle + queued stream ops */
        bool destroyed;
        bool opened;                    /* from cuIpcOpenEventHandle */
        unsigned long long id;
        struct dbl_evshm *shm;
        size_t shm_len;
        char path[320];                 /* exporter's named file, or "" */
};

struct dbl_stream;

bool dbl_event_valid(struct dbl_event *e);
void dbl_event_unref(struct dbl_event *e);
bool dbl_event_done(struct dbl_evshm *s, uint64_t target);
void dbl_event_wait(struct dbl_evshm *s, uint64_t target);  /* lock not held */
void dbl_event_mark_recorded(struct dbl_evshm *s, uint64_t gen, uint64_t at_ns);
void dbl_events_free_ctx(struct dbl_ctx *c);
void dbl_events_unlink_all(void);

enum dbl_op_kind { DBL_OP_COPY, DBL_OP_SET8, DBL_OP_SET32, DBL_OP_RECORD, DBL_OP_WAIT,
                   DBL_OP_FILL, DBL_OP_COUNT };

struct dbl_op {
        struct dbl_op *next;
        enum dbl_op_kind kind;
        void *dst;
        const void *src;
        void *staging;          /* owned copy of a pageable host source */
        bool host_src;          /* src is host memory: stage it when queued */
        size_t n;
        uint32_t value;
        struct dbl_event *ev;
        uint64_t gen;
        uint64_t base;          /* DBL_OP_COUNT: the pattern's offset */
        unsigned long long *bad;/* DBL_OP_COUNT: the count to add to */
};

/* Resolve a CUstream argument; false if it is not a valid stream. */
bool dbl_stream_lookup(CUstream h, struct dbl_stream **out);
struct dbl_ctx *dbl_stream_ctx(struct dbl_stream *s);
/* Run (or queue, with a delay configured) one op in stream order. Lock held;
 * may drop and retake it. Takes ownership of op. */
void dbl_stream_submit(struct dbl_stream *s, struct dbl_op *op);
void dbl_streams_drain_all(void);       /* lock held; drops and retakes it */
void dbl_streams_free_ctx(struct dbl_ctx *c);
void dbl_op_run(struct dbl_op *op);     /* lock not held */
/* The two kernels of tests/gpu/kernels.cu (module.c). */
void dbl_kernel_run(const struct dbl_op *op);

#endif

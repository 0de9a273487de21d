/*
 * CUDA driver test double: events and IPC event handles.
 *
 * An event is a small shared block (struct dbl_evshm): records issued,
 * records executed and the time the last one completes.  An interprocess
 * event lives in a named file gpuipc-double-<pid>-<nonce>-e<id> in the shm
 * directory, so another process that opens its handle sees every record.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "double.h"

#define EV_MAGIC 0x5645434950495047ULL         /* "GPIPICEV" */
static const char handle_magic[8] = { 'G', 'P', 'U', 'I', 'P', 'C', 'E', 'V' };

struct ev_handle {
        char magic[8];
        uint32_t pid;
        uint32_t reserved;
        uint64_t nonce;
        uint64_t id;
        uint64_t pidns;         /* the exporter's pid namespace */
};
_Static_assert(sizeof(struct ev_handle) <= CU_IPC_HANDLE_SIZE, "IPC event handle too big");

static struct dbl_event *events;
static unsigned long long next_event_id = 1;

bool dbl_event_valid(struct dbl_event *e)
{
        for (struct dbl_event *p = events; p != NULL; p = p->next)
                if (p == e)
                        return !p->destroyed;
        return false;
}

void dbl_event_unref(struct dbl_event *e)
{
        if (--e->refs > 0)
                return;
        munmap(e->shm, e->shm_len);
        free(e);
}

static void event_destroy(struct dbl_event *e)
{
        for (struct dbl_event **pp = &events; *pp != NULL; pp = &(*pp)->next) {
                if (*pp == e) {
                        *pp = e->next;
                        break;
                }
        }
        e->destroyed = true;
        if (e->path[0] != '\0')
                unlink(e->path);
        dbl_event_unref(e);
}

void dbl_events_free_ctx(struct dbl_ctx *c)
{
        struct dbl_event *e = events;
        while (e != NULL) {
                struct dbl_event *next = e->next;
                if (e->ctx == c)
                        event_destroy(e);
                e = next;
        }
}

void dbl_events_unlink_all(void)
{
        for (struct dbl_event *e = events; e != NULL; e = e->next)
                if (e->path[0] != '\0')
                        unlink(e->path);
}

bool dbl_event_done(struct dbl_evshm *s, uint64_t target)
{
        if (atomic_load(&s->done_gen) < target)
                return false;
        return dbl_now_ns() >= atomic_load(&s->done_at_ns);
}

void dbl_event_wait(struct dbl_evshm *s, uint64_t target)
{
        while (!dbl_event_done(s, target))
                dbl_sleep_ns(200000);
}

void dbl_event_mark_recorded(struct dbl_evshm *s, uint64_t gen, uint64_t at_ns)
{
        atomic_store(&s->done_at_ns, at_ns);
        uint64_t cur = atomic_load(&s->done_gen);
        while (cur < gen && !atomic_compare_exchange_weak(&s->done_gen, &cur, gen))
                ;
}

static struct dbl_event *event_new(struct dbl_evshm *shm, size_t len, unsigned int flags)
{
        struct dbl_event *e = calloc(1, sizeof(*e));
        if (e == NULL)
                return NULL;
        e->shm = shm;
        e->shm_len = len;
        e->flags = flags;
        e->refs = 1;
        e->ctx = dbl_current();
        e->id = next_event_id++;
        e->next = events;
        events = e;
        return e;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        const unsigned int known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                   CU_EVENT_INTERPROCESS;
        bool ipc = Flags & CU_EVENT_INTERPROCESS;
        if (phEvent == NULL || (Flags & ~known) != 0 ||
            (ipc && !(Flags & CU_EVENT_DISABLE_TIMING))) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        size_t len = (size_t)sysconf(_SC_PAGESIZE);
        char path[320] = "";
        void *p = MAP_FAILED;
        if (ipc) {
                dbl_shm_path(path, sizeof(path), getpid(), dbl.pidns, dbl.nonce, 'e',
                             next_event_id);
                int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                if (fd >= 0 && ftruncate(fd, (off_t)len) == 0)
                        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (fd >= 0)
                        close(fd);
                if (p == MAP_FAILED && fd >= 0)
                        unlink(path);
        } else {
                p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        }
        struct dbl_event *e = NULL;
        if (p != MAP_FAILED && (e = event_new(p, len, Flags)) == NULL) {
                munmap(p, len);
                if (ipc)
                        unlink(path);
        }
        if (e == NULL) {
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        e->shm->magic = EV_MAGIC;
        snprintf(e->path, sizeof(e->path), "%s", path);
        *phEvent = (CUevent)e;
        dbl_unlock();
        return CUDA_SUCCESS;
}

static CUresult event_record(CUevent hEvent, CUstream hStream)
{
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_stream *s;
        struct dbl_event *e = (struct dbl_event *)hEvent;
        if (!dbl_stream_lookup(hStream, &s) || !dbl_event_valid(e)) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_HANDLE;
        }
        uint64_t gen = atomic_fetch_add(&e->shm->enq_gen, 1) + 1;
        if (s == NULL) {
                /* Legacy stream: everything before it is done; it completes after the delay. */
                dbl_streams_drain_all();
                uint64_t delay = (uint64_t)dbl.event_delay_ms * 1000000ULL;
                dbl_event_mark_recorded(e->shm, gen, dbl_now_ns() + delay);
                dbl_unlock();
                return CUDA_SUCCESS;
        }
        struct dbl_op *op = calloc(1, sizeof(*op));
        if (op == NULL) {
                dbl_event_mark_recorded(e->shm, gen, dbl_now_ns());
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        op->kind = DBL_OP_RECORD;
        op->ev = e;
        op->gen = gen;
        e->refs++;
        dbl_stream_submit(s, op);
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
        DBL_ENTER();
        return event_record(hEvent, hStream);
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
        DBL_ENTER();
        (void)flags;
        return event_record(hEvent, hStream);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_event *e = (struct dbl_event *)hEvent;
        if (!dbl_event_valid(e))
                rc = CUDA_ERROR_INVALID_HANDLE;
        else if (!dbl_event_done(e->shm, atomic_load(&e->shm->enq_gen)))
                rc = CUDA_ERROR_NOT_READY;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_event *e = (struct dbl_event *)hEvent;
        if (!dbl_event_valid(e)) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_HANDLE;
        }
        e->refs++;
        uint64_t target = atomic_load(&e->shm->enq_gen);
        dbl_unlock();
        dbl_event_wait(e->shm, target);
        dbl_lock();
        dbl_event_unref(e);
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_event *e = (struct dbl_event *)hEvent;
        if (!dbl_event_valid(e))
                rc = CUDA_ERROR_INVALID_HANDLE;
        else
                event_destroy(e);
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_event *e = (struct dbl_event *)event;
        if (pHandle == NULL) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else if (!dbl_event_valid(e)) {
                rc = CUDA_ERROR_INVALID_HANDLE;
        } else if (!(e->flags & CU_EVENT_INTERPROCESS) || e->opened) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                struct ev_handle h;
                memset(&h, 0, sizeof(h));
                memcpy(h.magic, handle_magic, sizeof(h.magic));
                h.pid = (uint32_t)getpid();
                h.nonce = dbl.nonce;
                h.id = e->id;
                h.pidns = dbl.pidns;
                memset(pHandle, 0, sizeof(*pHandle));
                memcpy(pHandle->reserved, &h, sizeof(h));
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct ev_handle h;
        memcpy(&h, handle.reserved, sizeof(h));
        if (phEvent == NULL || memcmp(h.magic, handle_magic, sizeof(h.magic)) != 0) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        /* As for memory handles: not in the exporting process, nor (not
         * measured for events) from another pid namespace. */
        if ((h.pid == (uint32_t)getpid() && h.nonce == dbl.nonce) || h.pidns != dbl.pidns) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_CONTEXT;
        }
        char path[320];
        dbl_shm_path(path, sizeof(path), (int)h.pid, h.pidns, h.nonce, 'e', h.id);
        size_t len = (size_t)sysconf(_SC_PAGESIZE);
        void *p = MAP_FAILED;
        struct stat st;
        int fd = dbl_pid_dead((int)h.pid, h.pidns) ? -1 : open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= len)
                p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fd >= 0)
                close(fd);
        if (p == MAP_FAILED || ((struct dbl_evshm *)p)->magic != EV_MAGIC) {
                if (p != MAP_FAILED)
                        munmap(p, len);
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;        /* gone: exporter destroyed it */
        }
        struct dbl_event *e = event_new(p, len, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
        if (e == NULL) {
                munmap(p, len);
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        e->opened = true;
        *phEvent = (CUevent)e;
        dbl_unlock();
        return CUDA_SUCCESS;
}

/*
 * CUDA driver test double: streams.
 *
 * Without GPUIPC_CUDA_DOUBLE_EVENT_DELAY_MS every stream operation runs at
 * once, in the calling thread.  With it, operations on created streams are
 * queued and run in order by one worker thread per stream, each after
 * sleeping the delay, so a consumer that does not wait for the producer's
 * event reads stale data.  The NULL/legacy stream always runs at once,
 * after draining every stream of the process (legacy stream semantics).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "double.h"

struct dbl_stream {
        struct dbl_stream *next;
        struct dbl_ctx *ctx;
        unsigned int flags;
        struct dbl_op *head, *tail;
        bool busy;
        bool stopping;
        bool has_thread;
        pthread_t thread;
        pthread_cond_t cond;    /* with dbl_mutex: work queued, or went idle */
};

static struct dbl_stream *streams;

bool dbl_stream_lookup(CUstream h, struct dbl_stream **out)
{
        *out = NULL;
        if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
                return true;
        for (struct dbl_stream *s = streams; s != NULL; s = s->next) {
                if ((CUstream)s == h) {
                        *out = s;
                        return true;
                }
        }
        return false;
}

static bool stream_idle(struct dbl_stream *s)
{
        return s->head == NULL && !s->busy;
}

static void stream_drain(struct dbl_stream *s)
{
        while (!stream_idle(s))
                pthread_cond_wait(&s->cond, &dbl_mutex);
}

void dbl_streams_drain_all(void)
{
        bool again;
        do {
                again = false;
                for (struct dbl_stream *s = streams; s != NULL; s = s->next) {
                        if (!stream_idle(s)) {
                                pthread_cond_wait(&s->cond, &dbl_mutex);
                                again = true;
                                break;
                        }
                }
        } while (again);
}

void dbl_op_run(struct dbl_op *op)
{
        switch (op->kind) {
        case DBL_OP_COPY:
                memmove(op->dst, op->staging != NULL ? op->staging : op->src, op->n);
                break;
        case DBL_OP_SET8:
                memset(op->dst, (int)(op->value & 0xff), op->n);
                break;
        case DBL_OP_SET32:
                for (size_t i = 0; i < op->n; i++)
                        memcpy((char *)op->dst + 4 * i, &op->value, 4);
                break;
        case DBL_OP_RECORD:
                dbl_event_mark_recorded(op->ev->shm, op->gen, dbl_now_ns());
                break;
        case DBL_OP_WAIT:
                dbl_event_wait(op->ev->shm, op->gen);
                break;
        case DBL_OP_FILL:
        case DBL_OP_COUNT:
                dbl_kernel_run(op);
                break;
        }
}

static void op_finish(struct dbl_op *op)
{
        if (op->ev != NULL)
                dbl_event_unref(op->ev);
        free(op->staging);
        free(op);
}

static void *worker(void *arg)
{
        struct dbl_stream *s = arg;
        dbl_lock();
        for (;;) {
                while (s->head == NULL && !s->stopping)
                        pthread_cond_wait(&s->cond, &dbl_mutex);
                if (s->head == NULL)
                        break;
                struct dbl_op *op = s->head;
                s->head = op->next;
                if (s->head == NULL)
                        s->tail = NULL;
                s->busy = true;
                uint64_t delay = (uint64_t)dbl.event_delay_ms * 1000000ULL;
                dbl_unlock();
                dbl_sleep_ns(delay);
                dbl_op_run(op);
                dbl_lock();
                op_finish(op);
                s->busy = false;
                pthread_cond_broadcast(&s->cond);
        }
        dbl_unlock();
        return NULL;
}

static void run_inline(struct dbl_op *op)
{
        dbl_unlock();
        dbl_op_run(op);
        dbl_lock();
        op_finish(op);
}

void dbl_stream_submit(struct dbl_stream *s, struct dbl_op *op)
{
        if (s == NULL) {
                dbl_streams_drain_all();
                run_inline(op);
                return;
        }
        if (dbl.event_delay_ms == 0 && stream_idle(s)) {
                run_inline(op);
                return;
        }
        if (op->host_src) {
                op->staging = malloc(op->n);
                if (op->staging == NULL) {
                        stream_drain(s);
                        run_inline(op);
                        return;
                }
                memcpy(op->staging, op->src, op->n);
        }
        if (!s->has_thread) {
                if (pthread_create(&s->thread, NULL, worker, s) != 0) {
                        stream_drain(s);
                        run_inline(op);
                        return;
                }
                s->has_thread = true;
        }
        op->next = NULL;
        if (s->tail != NULL)
                s->tail->next = op;
        else
                s->head = op;
        s->tail = op;
        pthread_cond_broadcast(&s->cond);
}

/* Lock held; drains the stream (dropping the lock meanwhile) and frees it. */
static void stream_destroy(struct dbl_stream *s)
{
        for (struct dbl_stream **pp = &streams; *pp != NULL; pp = &(*pp)->next) {
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        }
        stream_drain(s);
        s->stopping = true;
        pthread_cond_broadcast(&s->cond);
        if (s->has_thread) {
                dbl_unlock();
                pthread_join(s->thread, NULL);
                dbl_lock();
        }
        pthread_cond_destroy(&s->cond);
        free(s);
}

void dbl_streams_free_ctx(struct dbl_ctx *c)
{
        bool again;
        do {
                again = false;
                for (struct dbl_stream *s = streams; s != NULL; s = s->next) {
                        if (s->ctx == c) {
                                stream_destroy(s);
                                again = true;
                                break;
                        }
                }
        } while (again);
}

static CUresult stream_create(CUstream *phStream, unsigned int Flags)
{
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_stream *s = NULL;
        if (phStream == NULL || (Flags & ~(unsigned int)CU_STREAM_NON_BLOCKING) != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if ((s = calloc(1, sizeof(*s))) == NULL)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc == CUDA_SUCCESS) {
                s->ctx = dbl_current();
                s->flags = Flags;
                pthread_cond_init(&s->cond, NULL);
                s->next = streams;
                streams = s;
                *phStream = (CUstream)s;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
        DBL_ENTER();
        return stream_create(phStream, Flags);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
        DBL_ENTER();
        (void)priority;
        return stream_create(phStream, flags);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_stream *s;
        if (!dbl_stream_lookup(hStream, &s) || s == NULL)
                rc = CUDA_ERROR_INVALID_HANDLE;
        else
                stream_destroy(s);
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_stream *s;
        if (!dbl_stream_lookup(hStream, &s))
                rc = CUDA_ERROR_INVALID_HANDLE;
        else if (s == NULL)
                dbl_streams_drain_all();
        else
                stream_drain(s);
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_stream *s;
        if (!dbl_stream_lookup(hStream, &s)) {
                rc = CUDA_ERROR_INVALID_HANDLE;
        } else if (s != NULL) {
                rc = stream_idle(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
        } else {
                for (s = streams; s != NULL; s = s->next)
                        if (!stream_idle(s))
                                rc = CUDA_ERROR_NOT_READY;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_stream *s;
        struct dbl_event *e = (struct dbl_event *)hEvent;
        if (!dbl_stream_lookup(hStream, &s) || !dbl_event_valid(e)) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_HANDLE;
        }
        if ((Flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL) != 0) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        struct dbl_op *op = calloc(1, sizeof(*op));
        if (op == NULL) {
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        /* Waits for the record issued last before this call, not later ones. */
        op->kind = DBL_OP_WAIT;
        op->ev = e;
        e->refs++;
        op->gen = atomic_load(&e->shm->enq_gen);
        if (s == NULL) {
                run_inline(op);         /* the legacy stream blocks the host */
        } else {
                dbl_stream_submit(s, op);
        }
        dbl_unlock();
        return CUDA_SUCCESS;
}

struct dbl_ctx *dbl_stream_ctx(struct dbl_stream *s)
{
        return s->ctx;
}

/*
 * CUDA driver test double: global state, cuInit, locking, process hooks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "double.h"

struct dbl_state dbl;
pthread_mutex_t dbl_mutex = PTHREAD_MUTEX_INITIALIZER;

void dbl_lock(void)
{
        pthread_mutex_lock(&dbl_mutex);
}

void dbl_unlock(void)
{
        pthread_mutex_unlock(&dbl_mutex);
}

CUresult dbl_enter(void)
{
        dbl_lock();
        if (!dbl.initialized) {
                dbl_unlock();
                return CUDA_ERROR_NOT_INITIALIZED;
        }
        return CUDA_SUCCESS;
}

CUresult dbl_enter_ctx(void)
{
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = dbl_current();
        if (c == NULL || !c->alive) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_CONTEXT;
        }
        return CUDA_SUCCESS;
}

uint64_t dbl_now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void dbl_sleep_ns(uint64_t ns)
{
        struct timespec ts = {
                .tv_sec = (time_t)(ns / 1000000000ULL),
                .tv_nsec = (long)(ns % 1000000000ULL),
        };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
}

const char *dbl_getenv(const char *name)
{
        const char *v = getenv(name);
        return (v != NULL && v[0] != '\0') ? v : NULL;
}

void dbl_shm_path(char *buf, size_t len, int pid, uint64_t pidns, uint64_t nonce, char kind,
                  unsigned long long id)
{
        snprintf(buf, len, "%s/gpuipc-double-%d-n%llu-%016llx-%c%llu", dbl.shm_dir, pid,
                 (unsigned long long)pidns, (unsigned long long)nonce, kind, id);
}

static void read_env(void)
{
        const char *v;

        dbl.ndev_phys = 1;
        v = dbl_getenv("GPUIPC_CUDA_DOUBLE_DEVICES");
        if (v != NULL) {
                long n = strtol(v, NULL, 10);
                dbl.ndev_phys = n < 0 ? 0 : n > DBL_MAX_DEVICES ? DBL_MAX_DEVICES : (int)n;
        }

        v = dbl_getenv("GPUIPC_CUDA_DOUBLE_ALREADY_MAPPED");
        dbl.already_mapped_error = v != NULL && strcmp(v, "0") != 0;

        v = dbl_getenv("GPUIPC_CUDA_DOUBLE_EVENT_DELAY_MS");
        dbl.event_delay_ms = v != NULL ? (unsigned int)strtoul(v, NULL, 10) : 0;

        v = dbl_getenv("GPUIPC_CUDA_DOUBLE_SHM_DIR");
        snprintf(dbl.shm_dir, sizeof(dbl.shm_dir), "%s", v != NULL ? v : "/dev/shm");
}

static uint64_t make_nonce(void)
{
        uint64_t n = 0;
        if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != (ssize_t)sizeof(n))
                n = dbl_now_ns() ^ ((uint64_t)getpid() << 32);
        return n;
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
        DBL_ENTER();
        dbl_lock();
        CUresult rc = CUDA_SUCCESS;
        if (dbl.poisoned)
                rc = CUDA_ERROR_NOT_INITIALIZED;
        else if (Flags != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!dbl.initialized) {
                read_env();
                dbl_devices_setup();
                if (dbl.ndev == 0) {
                        rc = CUDA_ERROR_NO_DEVICE;
                } else {
                        dbl.owner_pid = getpid();
                        dbl.nonce = make_nonce();
                        dbl.pidns = dbl_read_pidns();
                        if (dbl.next_bufid == 0)
                                dbl.next_bufid = 1;
                        if (dbl.next_vmm_id == 0)
                                dbl.next_vmm_id = 1;
                        dbl_sweep_stale();
                        dbl.initialized = true;
                }
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
        DBL_ENTER();
        if (driverVersion == NULL)
                return CUDA_ERROR_INVALID_VALUE;
        *driverVersion = DBL_DRIVER_VERSION;
        return CUDA_SUCCESS;
}

/*
 * fork() after cuInit leaves the child without a usable driver on real
 * hardware; the double makes that explicit: every call in such a child
 * answers CUDA_ERROR_NOT_INITIALIZED, cuInit included.
 */
static void atfork_child(void)
{
        pthread_mutex_init(&dbl_mutex, NULL);
        if (dbl.initialized) {
                dbl.initialized = false;
                dbl.poisoned = true;
        }
        dbl_ctx_forget_current();
        dbl_counts_reset();
}

static void at_exit(void)
{
        dbl_stats_write();
        dbl_lock();
        if (dbl.initialized && dbl.owner_pid == getpid()) {
                dbl_unlink_all_names();
                dbl_events_unlink_all();
        }
        dbl_unlock();
}

__attribute__((constructor)) static void dbl_constructor(void)
{
        pthread_atfork(NULL, NULL, atfork_child);
        atexit(at_exit);
}

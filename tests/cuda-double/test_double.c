/*
 * Standalone test of the CUDA driver double: test_double /path/to/libcuda.so.1
 *
 * The parent process never touches CUDA (fork after cuInit is undefined on
 * real hardware, and the double refuses it); every scenario runs in forked
 * children that call cuInit themselves and talk over socketpairs.  Results
 * are summed in a shared page; exit status 0 when nothing failed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#define MiB (1UL << 20)
#define STR_(x) #x
#define STR(x) STR_(x)

/* Resolved like our loader does: the macro of cuda.h names the versioned symbol. */
#define CU_FUNCS(X)                                                                   \
        X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)         \
        X(cuGetProcAddress) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)     \
        X(cuDeviceGetUuid) X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId)             \
        X(cuDeviceTotalMem) X(cuDeviceCanAccessPeer) X(cuDevicePrimaryCtxRetain)      \
        X(cuDevicePrimaryCtxRelease) X(cuCtxCreate) X(cuCtxDestroy) X(cuCtxSetCurrent) \
        X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxPushCurrent) X(cuCtxPopCurrent)   \
        X(cuCtxSynchronize) X(cuCtxEnablePeerAccess) X(cuCtxDisablePeerAccess)        \
        X(cuMemAlloc) X(cuMemFree) X(cuMemGetAddressRange) X(cuPointerGetAttribute)   \
        X(cuPointerGetAttributes) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD)     \
        X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemsetD8) X(cuMemsetD8Async)     \
        X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)             \
        X(cuIpcGetEventHandle) X(cuIpcOpenEventHandle) X(cuEventCreate)               \
        X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventDestroy)      \
        X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)                   \
        X(cuStreamWaitEvent) X(cuMemGetAllocationGranularity) X(cuMemCreate)          \
        X(cuMemRelease) X(cuMemExportToShareableHandle)                               \
        X(cuMemImportFromShareableHandle) X(cuMemGetAllocationPropertiesFromHandle)   \
        X(cuMemRetainAllocationHandle) X(cuMemAddressReserve) X(cuMemAddressFree)     \
        X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuDeviceGetDefaultMemPool)       \
        X(cuDeviceGetMemPool) X(cuDeviceSetMemPool) X(cuMemPoolCreate)                \
        X(cuMemPoolDestroy) X(cuMemPoolTrimTo) X(cuMemPoolSetAttribute)               \
        X(cuMemPoolGetAttribute) X(cuMemPoolSetAccess) X(cuMemPoolGetAccess)          \
        X(cuMemAllocAsync) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync)               \
        X(cuMemPoolExportToShareableHandle) X(cuMemPoolImportFromShareableHandle)     \
        X(cuMemPoolExportPointer) X(cuMemPoolImportPointer) X(cuModuleLoadData)       \
        X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuMemAllocHost)    \
        X(cuMemFreeHost)

#define DECL(name) static __typeof__(name) *p_##name;
CU_FUNCS(DECL)
static long (*p_count)(const char *name);
static void *lib;

static struct shared {
        atomic_int pass;
        atomic_int fail;
} *sh;
static const char *role = "parent";
static char shm_dir[256];

static void check_(bool ok, const char *what, int line)
{
        if (ok) {
                atomic_fetch_add(&sh->pass, 1);
        } else {
                atomic_fetch_add(&sh->fail, 1);
                fprintf(stderr, "FAIL [%s pid %d] line %d: %s\n", role, (int)getpid(), line, what);
        }
}

#define CHECK(c) check_((c), #c, __LINE__)

static const char *errname(CUresult rc)
{
        const char *s = NULL;
        if (p_cuGetErrorName(rc, &s) != CUDA_SUCCESS || s == NULL)
                return "(unnamed)";
        return s;
}

#define CHECK_RC(call, want)                                                          \
        do {                                                                          \
                CUresult r_ = (call);                                                 \
                check_(r_ == (want), #call, __LINE__);                                \
                if (r_ != (want))                                                     \
                        fprintf(stderr, "  got %s, want %s\n", errname(r_), #want);   \
        } while (0)

#define OK(call) CHECK_RC(call, CUDA_SUCCESS)

static void load(const char *path)
{
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
                fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
                exit(1);
        }
#define LOAD(name)                                                                    \
        p_##name = (__typeof__(p_##name))dlsym(lib, STR(name));                       \
        if (p_##name == NULL) {                                                       \
                fprintf(stderr, "missing symbol %s\n", STR(name));                    \
                exit(1);                                                              \
        }
        CU_FUNCS(LOAD)
        p_count = (long (*)(const char *))dlsym(lib, "gpuipc_cuda_double_count");
        if (p_count == NULL) {
                fprintf(stderr, "missing gpuipc_cuda_double_count\n");
                exit(1);
        }
}

/* ---- process and socket helpers ---- */

typedef void (*role_fn)(int sock);

static pid_t spawn(const char *name, role_fn fn, int sock, const char *const *env)
{
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
                perror("fork");
                exit(1);
        }
        if (pid == 0) {
                role = name;
                for (; env != NULL && *env != NULL; env++)
                        putenv((char *)*env);
                fn(sock);
                exit(0);        /* atexit: stats file and name cleanup */
        }
        return pid;
}

static void reap(pid_t pid, const char *what)
{
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok)
                fprintf(stderr, "  child %s: status 0x%x\n", what, st);
        check_(ok, what, __LINE__);
}

static void pair(int sv[2])
{
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
                perror("socketpair");
                exit(1);
        }
}

static void send_all(int s, const void *buf, size_t n)
{
        const char *p = buf;
        while (n > 0) {
                ssize_t k = send(s, p, n, MSG_NOSIGNAL);
                if (k <= 0) {
                        CHECK(!"send");
                        return;
                }
                p += k;
                n -= (size_t)k;
        }
}

static bool recv_all(int s, void *buf, size_t n)
{
        char *p = buf;
        while (n > 0) {
                ssize_t k = recv(s, p, n, 0);
                if (k <= 0) {
                        CHECK(!"recv");
                        return false;
                }
                p += k;
                n -= (size_t)k;
        }
        return true;
}

static void send_word(int s, uint64_t w)
{
        send_all(s, &w, sizeof(w));
}

static uint64_t recv_word(int s)
{
        uint64_t w = 0;
        recv_all(s, &w, sizeof(w));
        return w;
}

static void send_fd(int s, int fd)
{
        char byte = 'F';
        struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        memset(&u, 0, sizeof(u));
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
                              .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
        CHECK(sendmsg(s, &msg, MSG_NOSIGNAL) == 1);
}

static int recv_fd(int s)
{
        char byte;
        struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
                              .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
        if (recvmsg(s, &msg, MSG_CMSG_CLOEXEC) != 1)
                return -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        if (c == NULL || c->cmsg_type != SCM_RIGHTS)
                return -1;
        int fd;
        memcpy(&fd, CMSG_DATA(c), sizeof(int));
        return fd;
}

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Names in the shm directory that belong to pid. */
static int names_of(pid_t pid)
{
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "gpuipc-double-%d-", (int)pid);
        DIR *d = opendir(shm_dir);
        int n = 0;
        struct dirent *de;
        while (d != NULL && (de = readdir(d)) != NULL)
                n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
        if (d != NULL)
                closedir(d);
        return n;
}

static int names_total(void)
{
        DIR *d = opendir(shm_dir);
        int n = 0;
        struct dirent *de;
        while (d != NULL && (de = readdir(d)) != NULL)
                n += de->d_name[0] != '.';
        if (d != NULL)
                closedir(d);
        return n;
}

/* Permissions ("rw-s", "---s", ...) of the mapping holding addr, from /proc/self/maps. */
static void perms_of(uintptr_t addr, char out[5])
{
        strcpy(out, "?");
        FILE *f = fopen("/proc/self/maps", "r");
        char line[512];
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
                unsigned long lo, hi;
                char perms[5];
                if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && addr >= lo &&
                    addr < hi) {
                        memcpy(out, perms, 5);
                        break;
                }
        }
        if (f != NULL)
                fclose(f);
}

/* cuInit, primary context of ordinal dev, made current. */
static CUcontext setup(int dev)
{
        CUcontext ctx = NULL;
        OK(p_cuInit(0));
        OK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
        OK(p_cuCtxSetCurrent(ctx));
        return ctx;
}

static void teardown(int dev)
{
        OK(p_cuDevicePrimaryCtxRelease(dev));
}

static unsigned char pattern(size_t i)
{
        return (unsigned char)((i * 131u) ^ (i >> 9) ^ 0x5c);
}

/* ---- 1. one process: devices, contexts, memory, handles, proc address ---- */

static void *thread_no_ctx(void *arg)
{
        CUcontext ctx = arg, cur = (CUcontext)1;
        CUdeviceptr p;
        OK(p_cuCtxGetCurrent(&cur));
        CHECK(cur == NULL);
        CHECK_RC(p_cuMemAlloc(&p, MiB), CUDA_ERROR_INVALID_CONTEXT);
        OK(p_cuCtxPushCurrent(ctx));
        OK(p_cuMemAlloc(&p, MiB));
        OK(p_cuMemFree(p));
        OK(p_cuCtxPopCurrent(&cur));
        CHECK(cur == ctx);
        CHECK_RC(p_cuCtxPopCurrent(&cur), CUDA_ERROR_INVALID_CONTEXT);
        return NULL;
}

static void role_basics(int sock)
{
        (void)sock;
        int n = -1, v = 0;
        CHECK_RC(p_cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
        OK(p_cuDriverGetVersion(&v));
        CHECK(v == 13000);
        CHECK_RC(p_cuInit(1), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuInit(0));
        OK(p_cuDeviceGetCount(&n));
        CHECK(n == 1);
        CUdevice dev = -1;
        OK(p_cuDeviceGet(&dev, 0));
        CHECK(dev == 0);
        CHECK_RC(p_cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);

        char name[64];
        OK(p_cuDeviceGetName(name, sizeof(name), 0));
        CHECK(strcmp(name, "gpuipc CUDA double") == 0);
        CUuuid u;
        OK(p_cuDeviceGetUuid(&u, 0));
        CHECK(memcmp(u.bytes, "gpuipc-double-0", 16) == 0);
        int a = -1;
        OK(p_cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
        CHECK(a == 9);
        OK(p_cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
        CHECK(a == 0);
        OK(p_cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
        CHECK(a == 1);
        OK(p_cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                  0));
        CHECK(a == 1);
        OK(p_cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
        CHECK(a == 1);
        char bus[32];
        OK(p_cuDeviceGetPCIBusId(bus, sizeof(bus), 0));
        CHECK(strncmp(bus, "0000:", 5) == 0);
        size_t total = 0;
        OK(p_cuDeviceTotalMem(&total, 0));
        CHECK(total > 64 * MiB);

        CUdeviceptr base = 0, p2 = 0;
        CHECK_RC(p_cuMemAlloc(&base, MiB), CUDA_ERROR_INVALID_CONTEXT);
        CUcontext ctx = setup(0), cur = NULL;
        OK(p_cuCtxGetCurrent(&cur));
        CHECK(cur == ctx);
        OK(p_cuCtxGetDevice(&dev));
        CHECK(dev == 0);

        /* Handles name the allocation: base and base + 4 MiB give the same bytes. */
        OK(p_cuMemAlloc(&base, 64 * MiB));
        CUipcMemHandle h1, h2;
        OK(p_cuIpcGetMemHandle(&h1, base));
        OK(p_cuIpcGetMemHandle(&h2, base + 4 * MiB));
        CHECK(memcmp(&h1, &h2, sizeof(h1)) == 0);
        CUdeviceptr rb = 0;
        size_t rs = 0;
        OK(p_cuMemGetAddressRange(&rb, &rs, base + 4 * MiB));
        CHECK(rb == base && rs == 64 * MiB);
        int local = 0;
        CHECK_RC(p_cuMemGetAddressRange(&rb, &rs, (CUdeviceptr)(uintptr_t)&local),
                 CUDA_ERROR_NOT_FOUND);
        CHECK_RC(p_cuIpcGetMemHandle(&h2, (CUdeviceptr)(uintptr_t)&local),
                 CUDA_ERROR_INVALID_VALUE);

        unsigned long long id1 = 0, id2 = 0;
        unsigned int mt = 0;
        int ord = -1, legacy = -1;
        CUcontext pc = NULL;
        CUdeviceptr start = 0;
        size_t rsize = 0;
        OK(p_cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, base + 5));
        OK(p_cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base));
        CHECK(mt == CU_MEMORYTYPE_DEVICE);
        OK(p_cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base));
        CHECK(ord == 0);
        OK(p_cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, base));
        CHECK(pc == ctx);
        OK(p_cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, base));
        CHECK(legacy == 1);
        CUpointer_attribute attrs[] = { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                        CU_POINTER_ATTRIBUTE_RANGE_SIZE };
        void *data[] = { &start, &rsize };
        OK(p_cuPointerGetAttributes(2, attrs, data, base + 7 * MiB));
        CHECK(start == base && rsize == 64 * MiB);
        CUpointer_attribute mta = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
        void *mtd[] = { &mt };
        OK(p_cuPointerGetAttributes(1, &mta, mtd, (CUdeviceptr)(uintptr_t)&local));
        CHECK(mt == 0);
        CHECK_RC(p_cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                         (CUdeviceptr)(uintptr_t)&local),
                 CUDA_ERROR_INVALID_VALUE);

        /* Measured: the exporter cannot open its own handle. */
        CHECK_RC(p_cuIpcOpenMemHandle(&p2, h1, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                 CUDA_ERROR_INVALID_CONTEXT);

        /* Copies; device pointers are host addresses in the double. */
        unsigned char host[4096], back[4096];
        for (size_t i = 0; i < sizeof(host); i++)
                host[i] = pattern(i);
        OK(p_cuMemcpyHtoD(base + MiB, host, sizeof(host)));
        CHECK(memcmp((void *)(uintptr_t)(base + MiB), host, sizeof(host)) == 0);
        OK(p_cuMemcpyDtoD(base + 2 * MiB, base + MiB, sizeof(host)));
        OK(p_cuMemcpyDtoH(back, base + 2 * MiB, sizeof(back)));
        CHECK(memcmp(back, host, sizeof(host)) == 0);
        OK(p_cuMemsetD8(base, 0x77, 16));
        CHECK(((unsigned char *)(uintptr_t)base)[15] == 0x77);
        CHECK_RC(p_cuMemcpyHtoD(base + 64 * MiB - 8, host, 16), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemcpyDtoH(back, (CUdeviceptr)(uintptr_t)host, 16), CUDA_ERROR_INVALID_VALUE);

        /* Buffer ids are never reused; freed memory is gone. */
        OK(p_cuMemFree(base));
        CHECK_RC(p_cuMemGetAddressRange(&rb, &rs, base), CUDA_ERROR_NOT_FOUND);
        CHECK_RC(p_cuMemcpyHtoD(base, host, 16), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemFree(base), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemAlloc(&p2, 64 * MiB));
        OK(p_cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, p2));
        CHECK(id2 > id1);
        OK(p_cuMemFree(p2));

        /* Contexts are per thread. */
        pthread_t t;
        pthread_create(&t, NULL, thread_no_ctx, ctx);
        pthread_join(t, NULL);
        CUcontext mine = NULL;
        OK(p_cuCtxCreate(&mine, NULL, 0, 0));
        OK(p_cuCtxGetCurrent(&cur));
        CHECK(cur == mine);
        OK(p_cuCtxDestroy(mine));
        CHECK_RC(p_cuCtxDestroy(mine), CUDA_ERROR_INVALID_CONTEXT);
        OK(p_cuCtxGetCurrent(&cur));
        CHECK(cur == ctx);

        /* A plain event without a delay completes at once. */
        CUevent ev;
        OK(p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
        OK(p_cuEventRecord(ev, NULL));
        OK(p_cuEventQuery(ev));
        CUipcEventHandle eh;
        CHECK_RC(p_cuIpcGetEventHandle(&eh, ev), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuEventDestroy(ev));
        OK(p_cuCtxSynchronize());

        /* cuGetProcAddress picks the versioned symbol. */
        void *fn = NULL;
        CUdriverProcAddressQueryResult qr;
        OK(p_cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &qr));
        CHECK(fn == dlsym(lib, "cuMemAlloc_v2") && qr == CU_GET_PROC_ADDRESS_SUCCESS);
        OK(p_cuGetProcAddress("cuIpcOpenMemHandle", &fn, 12000, 0, &qr));
        CHECK(fn == (void *)p_cuIpcOpenMemHandle);
        OK(p_cuGetProcAddress("cuCtxCreate", &fn, 12000, 0, &qr));
        CHECK(fn == dlsym(lib, "cuCtxCreate_v2"));
        CHECK_RC(p_cuGetProcAddress("cuIpcOpenMemHandle", &fn, 10000, 0, &qr),
                 CUDA_ERROR_NOT_FOUND);
        CHECK(qr == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT && fn == NULL);
        CHECK_RC(p_cuGetProcAddress("cuNoSuchThing", &fn, 13000, 0, &qr), CUDA_ERROR_NOT_FOUND);
        CHECK(qr == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

        const char *s = NULL;
        OK(p_cuGetErrorName(CUDA_ERROR_ALREADY_MAPPED, &s));
        CHECK(s != NULL && strcmp(s, "CUDA_ERROR_ALREADY_MAPPED") == 0);
        OK(p_cuGetErrorString(CUDA_ERROR_INVALID_CONTEXT, &s));
        CHECK(s != NULL && strcmp(s, "invalid device context") == 0);
        CHECK_RC(p_cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);

        CHECK(p_count("cuMemAlloc_v2") == 5);
        CHECK(p_count("cuIpcOpenMemHandle_v2") == 1);
        CHECK(p_count("cuInit") == 3);
        CHECK(p_count("cuNoSuchThing") == -1);
        long all = p_count("*");
        CHECK(all >= 5 + 1 + 3);
        OK(p_cuGetErrorName(CUDA_ERROR_ALREADY_MAPPED, &s));
        CHECK(p_count("*") == all + 1);          /* "*": every entry point's calls */
        teardown(0);
        CHECK_RC(p_cuMemAlloc(&p2, MiB), CUDA_ERROR_INVALID_CONTEXT);
}

/* ---- 2. legacy IPC across processes ---- */

static void role_ipc_producer(int sock)
{
        setup(0);
        CUdeviceptr base;
        OK(p_cuMemAlloc(&base, 64 * MiB));
        OK(p_cuMemsetD8(base, 0x11, 64 * MiB));
        static unsigned char host[MiB];
        for (size_t i = 0; i < sizeof(host); i++)
                host[i] = pattern(i);
        OK(p_cuMemcpyHtoD(base + 4 * MiB, host, sizeof(host)));
        CUipcMemHandle h;
        OK(p_cuIpcGetMemHandle(&h, base + 4 * MiB));    /* a pool sub-allocation */
        send_all(sock, &h, sizeof(h));
        send_word(sock, 4 * MiB);

        CHECK(recv_word(sock) == 1);                    /* consumer wrote */
        CHECK(((unsigned char *)(uintptr_t)base)[8 * MiB] == 0x5a);
        CHECK(recv_word(sock) == 2);                    /* consumer closed */
        CHECK(names_of(getpid()) == 1);
        OK(p_cuMemFree(base));
        CHECK(names_of(getpid()) == 0);
        send_word(sock, 3);
        CHECK(recv_word(sock) == 4);
        teardown(0);
}

/* count_bad with args (its counter at args[4]) from a zeroed count. */
static unsigned long long bad_bytes(CUfunction count, void **args)
{
        CUdeviceptr bad = *(CUdeviceptr *)args[4];
        unsigned long long got = ~0ull;
        OK(p_cuMemsetD8(bad, 0, sizeof(got)));
        OK(p_cuLaunchKernel(count, 264, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        OK(p_cuMemcpyDtoH(&got, bad, sizeof(got)));
        return got;
}

/* The two kernels of tests/gpu/kernels.cu, run on the host. */
static void role_kernels(int sock)
{
        (void)sock;
        setup(0);
        CUmodule mod = NULL;
        CUfunction fill = NULL, count = NULL, other = NULL;
        CHECK_RC(p_cuModuleLoadData(&mod, ".entry slow_fill"), CUDA_ERROR_INVALID_IMAGE);
        OK(p_cuModuleLoadData(&mod, ".visible .entry slow_fill(\n.visible .entry count_bad("));
        OK(p_cuModuleGetFunction(&fill, mod, "slow_fill"));
        OK(p_cuModuleGetFunction(&count, mod, "count_bad"));
        CHECK_RC(p_cuModuleGetFunction(&other, mod, "other"), CUDA_ERROR_NOT_FOUND);

        CUdeviceptr p = 0, bad = 0;
        OK(p_cuMemAlloc(&p, MiB + 3));
        OK(p_cuMemAlloc(&bad, 8));
        unsigned long long n = MiB + 3, spin = 0, base = 0;
        unsigned int seed = 91;
        void *fa[] = { &p, &n, &seed, &spin };
        void *ca[] = { &p, &n, &seed, &base, &bad };
        OK(p_cuLaunchKernel(fill, 264, 1, 1, 256, 1, 1, 0, NULL, fa, NULL));
        CHECK(bad_bytes(count, ca) == 0);
        OK(p_cuMemsetD8(p + 5, 0, 1));                  /* pattern(91, 5) is 126 */
        CHECK(bad_bytes(count, ca) == 1);
        base = 256;                                     /* the pattern repeats every 256 */
        CHECK(bad_bytes(count, ca) == 1);
        base = 1;
        CHECK(bad_bytes(count, ca) == n);

        /* Pinned memory is host memory: copies reach it, kernels do not. */
        unsigned char *pin = NULL;
        OK(p_cuMemAllocHost((void **)&pin, 4096));
        OK(p_cuMemcpyDtoH(pin, p + 256, 4096));
        CHECK(pin[0] == 91 && pin[1] == 98);
        CHECK_RC(p_cuMemFreeHost(pin + 1), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemFreeHost(pin));
        CHECK_RC(p_cuMemFreeHost(pin), CUDA_ERROR_INVALID_VALUE);

        static unsigned char host[64];
        CUdeviceptr hp = (CUdeviceptr)(uintptr_t)host;
        unsigned long long small = sizeof(host);
        void *ha[] = { &hp, &small, &seed, &spin };
        CHECK_RC(p_cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, ha, NULL),
                 CUDA_ERROR_ILLEGAL_ADDRESS);
        n = MiB + 4;                                    /* one past the allocation */
        CHECK_RC(p_cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, fa, NULL),
                 CUDA_ERROR_ILLEGAL_ADDRESS);
        CHECK_RC(p_cuLaunchKernel((CUfunction)mod, 1, 1, 1, 1, 1, 1, 0, NULL, fa, NULL),
                 CUDA_ERROR_INVALID_HANDLE);
        OK(p_cuMemFree(p));
        OK(p_cuMemFree(bad));
        OK(p_cuModuleUnload(mod));
        CHECK_RC(p_cuModuleGetFunction(&other, mod, "slow_fill"), CUDA_ERROR_INVALID_HANDLE);
        CHECK_RC(p_cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
        teardown(0);
}

/* With the delay, a launch on a created stream is queued like a copy. */
static void role_kernels_queued(int sock)
{
        (void)sock;
        setup(0);
        CUmodule mod = NULL;
        CUfunction fill = NULL;
        CUstream st = NULL;
        CUdeviceptr p = 0;
        OK(p_cuModuleLoadData(&mod, "slow_fill count_bad"));
        OK(p_cuModuleGetFunction(&fill, mod, "slow_fill"));
        OK(p_cuStreamCreate(&st, 0));
        OK(p_cuMemAlloc(&p, 4096));
        unsigned long long n = 4096, spin = 0;
        unsigned int seed = 3;
        void *fa[] = { &p, &n, &seed, &spin };
        const unsigned char *host = (const unsigned char *)(uintptr_t)p;
        OK(p_cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, st, fa, NULL));
        CHECK(host[1] == 0);                            /* not run yet: stale */
        OK(p_cuStreamSynchronize(st));
        CHECK(host[1] == 10 && host[4095] == (unsigned char)(3 + 7 * 4095));
        OK(p_cuStreamDestroy(st));
        OK(p_cuMemFree(p));
        OK(p_cuModuleUnload(mod));
        teardown(0);
}

static void role_ipc_consumer(int sock)
{
        setup(0);
        CUipcMemHandle h;
        recv_all(sock, &h, sizeof(h));
        size_t off = recv_word(sock);
        CUdeviceptr p = 0, q = 0;
        OK(p_cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        CUdeviceptr rb = 0;
        size_t rs = 0;
        OK(p_cuMemGetAddressRange(&rb, &rs, p + off));
        CHECK(rb == p && rs == 64 * MiB);
        static unsigned char back[MiB];
        OK(p_cuMemcpyDtoH(back, p + off, sizeof(back)));
        bool same = true;
        for (size_t i = 0; i < sizeof(back); i++)
                same &= back[i] == pattern(i);
        CHECK(same);
        CHECK(((unsigned char *)(uintptr_t)p)[0] == 0x11);
        int legacy = -1;
        OK(p_cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
        CHECK(legacy == 0);
        OK(p_cuMemsetD8(p + 8 * MiB, 0x5a, 4096));
        send_word(sock, 1);

        /* Driver 580: a second open gives the same pointer, refcounted. */
        OK(p_cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        CHECK(q == p);
        OK(p_cuIpcCloseMemHandle(p));
        OK(p_cuMemcpyDtoH(back, p + off, 64));
        CHECK(back[1] == pattern(1));
        OK(p_cuIpcCloseMemHandle(p));
        CHECK_RC(p_cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemcpyDtoH(back, p, 64), CUDA_ERROR_INVALID_VALUE);

        long before = p_count("cuIpcOpenMemHandle_v2");
        bool all_same = true;
        for (int i = 0; i < 200; i++) {
                OK(p_cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
                all_same &= i == 0 || q == p;
                p = q;
        }
        CHECK(all_same);
        CHECK(p_count("cuIpcOpenMemHandle_v2") == before + 200);
        for (int i = 0; i < 200; i++)
                OK(p_cuIpcCloseMemHandle(q));
        CHECK_RC(p_cuIpcCloseMemHandle(q), CUDA_ERROR_INVALID_VALUE);
        send_word(sock, 2);

        CHECK(recv_word(sock) == 3);                    /* producer freed */
        CHECK_RC(p_cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                 CUDA_ERROR_INVALID_VALUE);
        send_word(sock, 4);
        teardown(0);
}

/* ---- 3. older drivers: CUDA_ERROR_ALREADY_MAPPED on a second open ---- */

static void role_simple_producer(int sock)
{
        setup(0);
        CUdeviceptr base;
        OK(p_cuMemAlloc(&base, 4 * MiB));
        OK(p_cuMemsetD8(base, 0x42, 4 * MiB));
        CUipcMemHandle h;
        OK(p_cuIpcGetMemHandle(&h, base));
        send_all(sock, &h, sizeof(h));
        CHECK(recv_word(sock) == 1);
        OK(p_cuMemFree(base));
        teardown(0);
}

static void role_already_mapped_consumer(int sock)
{
        setup(0);
        CUipcMemHandle h;
        recv_all(sock, &h, sizeof(h));
        CUdeviceptr p = 0, q = 0;
        OK(p_cuIpcOpenMemHandle(&p, h, 0));
        CHECK(((unsigned char *)(uintptr_t)p)[100] == 0x42);
        CHECK_RC(p_cuIpcOpenMemHandle(&q, h, 0), CUDA_ERROR_ALREADY_MAPPED);
        OK(p_cuIpcCloseMemHandle(p));
        OK(p_cuIpcOpenMemHandle(&q, h, 0));
        OK(p_cuIpcCloseMemHandle(q));
        send_word(sock, 1);
        teardown(0);
}

/* ---- 4. VMM: fd over SCM_RIGHTS, alive after the exporter exited ---- */

static CUmemAllocationProp vmm_prop(int dev)
{
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        return prop;
}

static CUmemAccessDesc rw_access(int dev)
{
        CUmemAccessDesc d;
        memset(&d, 0, sizeof(d));
        d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d.location.id = dev;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        return d;
}

static void role_vmm_exporter(int sock)
{
        setup(0);
        CUmemAllocationProp prop = vmm_prop(0);
        size_t gran = 0;
        OK(p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CHECK(gran == 2 * MiB);
        CUmemGenericAllocationHandle h;
        CHECK_RC(p_cuMemCreate(&h, 3 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemCreate(&h, 4 * MiB, &prop, 0));
        CUdeviceptr va = 0;
        OK(p_cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
        CHECK(va % (2 * MiB) == 0);
        OK(p_cuMemMap(va, 4 * MiB, 0, h, 0));
        char perms[5];
        perms_of(va, perms);
        CHECK(strncmp(perms, "---", 3) == 0);           /* faults before cuMemSetAccess */
        unsigned char host[4096];
        for (size_t i = 0; i < sizeof(host); i++)
                host[i] = pattern(i + 7);
        CHECK_RC(p_cuMemcpyHtoD(va, host, sizeof(host)), CUDA_ERROR_INVALID_VALUE);
        CUmemAccessDesc acc = rw_access(0);
        OK(p_cuMemSetAccess(va, 4 * MiB, &acc, 1));
        perms_of(va, perms);
        CHECK(strncmp(perms, "rw", 2) == 0);
        OK(p_cuMemcpyHtoD(va + 2 * MiB, host, sizeof(host)));
        ((unsigned char *)(uintptr_t)va)[0] = 0xee;

        int fd = -1, other = 0;
        CHECK_RC(p_cuMemExportToShareableHandle(&other, h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
                 CUDA_ERROR_NOT_SUPPORTED);
        OK(p_cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CHECK(fd >= 0);
        send_fd(sock, fd);
        close(fd);
        /* Release everything, then exit: the holder's fd keeps the memory. */
        OK(p_cuMemUnmap(va, 4 * MiB));
        OK(p_cuMemAddressFree(va, 4 * MiB));
        OK(p_cuMemRelease(h));
        CHECK_RC(p_cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
        teardown(0);
}

static void role_vmm_importer(int sock)
{
        setup(0);
        int fd = recv_fd(sock);
        CHECK(fd >= 0);
        CUmemGenericAllocationHandle h1 = 0, h2 = 0, h3 = 0;
        OK(p_cuMemImportFromShareableHandle(&h1, (void *)(intptr_t)fd,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        OK(p_cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        int devnull = open("/dev/null", O_RDONLY);
        CHECK_RC(p_cuMemImportFromShareableHandle(&h3, (void *)(intptr_t)devnull,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                 CUDA_ERROR_INVALID_VALUE);
        close(devnull);
        close(fd);              /* the imported handles keep the memory */
        CUmemAllocationProp prop;
        OK(p_cuMemGetAllocationPropertiesFromHandle(&prop, h1));
        CHECK(prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop.location.id == 0);
        CHECK(prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

        CUdeviceptr va = 0;
        OK(p_cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
        OK(p_cuMemMap(va, 4 * MiB, 0, h1, 0));
        CHECK_RC(p_cuMemMap(va + 2 * MiB, 2 * MiB, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemMap(va + 4 * MiB, 2 * MiB, 2 * MiB, h2, 0));
        CUmemAccessDesc acc = rw_access(0);
        OK(p_cuMemSetAccess(va, 6 * MiB, &acc, 1));
        unsigned char back[4096];
        OK(p_cuMemcpyDtoH(back, va + 2 * MiB, sizeof(back)));
        bool same = true;
        for (size_t i = 0; i < sizeof(back); i++)
                same &= back[i] == pattern(i + 7);
        CHECK(same);
        CHECK(((unsigned char *)(uintptr_t)va)[0] == 0xee);
        /* Two mappings of one allocation alias the same memory. */
        CHECK(((unsigned char *)(uintptr_t)va)[4 * MiB + 1] == pattern(1 + 7));
        /* A copy may span adjacent mappings. */
        OK(p_cuMemcpyDtoH(back, va + 4 * MiB - 2048, sizeof(back)));

        int legacy = -1;
        size_t rsize = 0;
        OK(p_cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va));
        CHECK(legacy == 0);
        OK(p_cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va));
        CHECK(rsize == 8 * MiB);
        CUipcMemHandle ih;
        CHECK_RC(p_cuIpcGetMemHandle(&ih, va), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemRetainAllocationHandle(&h3, (void *)(uintptr_t)(va + 4096)));
        CHECK(h3 == h1);
        OK(p_cuMemRelease(h3));

        CHECK_RC(p_cuMemUnmap(va, 2 * MiB), CUDA_ERROR_INVALID_VALUE);  /* half a mapping */
        CHECK_RC(p_cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemUnmap(va, 6 * MiB));
        OK(p_cuMemAddressFree(va, 8 * MiB));
        OK(p_cuMemRelease(h1));
        OK(p_cuMemRelease(h2));
        teardown(0);
}

/* ---- 4b. VMM: every exported fd is one file, as /dev/nvidiactl is on the
 * real driver; only the open file description names the allocation ---- */

static void role_vmm_two_exporter(int sock)
{
        setup(0);
        CUmemAllocationProp prop = vmm_prop(0);
        CUmemAccessDesc acc = rw_access(0);
        CUmemGenericAllocationHandle ha, hb;
        CUdeviceptr va = 0;
        OK(p_cuMemCreate(&ha, 2 * MiB, &prop, 0));
        OK(p_cuMemCreate(&hb, 4 * MiB, &prop, 0));
        OK(p_cuMemAddressReserve(&va, 6 * MiB, 0, 0, 0));
        OK(p_cuMemMap(va, 2 * MiB, 0, ha, 0));
        OK(p_cuMemMap(va + 2 * MiB, 4 * MiB, 0, hb, 0));
        OK(p_cuMemSetAccess(va, 6 * MiB, &acc, 1));
        OK(p_cuMemsetD8(va, 0x11, 2 * MiB));
        OK(p_cuMemsetD8(va + 2 * MiB, 0x22, 4 * MiB));
        ((unsigned char *)(uintptr_t)va)[2 * MiB - 1] = 0x1f;
        ((unsigned char *)(uintptr_t)va)[6 * MiB - 1] = 0x2f;

        int fa0 = -1, fa1 = -1, fb = -1;
        OK(p_cuMemExportToShareableHandle(&fa0, ha, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        OK(p_cuMemExportToShareableHandle(&fa1, ha, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        OK(p_cuMemExportToShareableHandle(&fb, hb, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CHECK(fa0 >= 0 && fa1 >= 0 && fb >= 0 && fa0 != fa1);
        send_fd(sock, fb);
        send_fd(sock, fa0);
        send_fd(sock, fa1);
        close(fa0);
        close(fa1);
        close(fb);
        /* Everything goes before the importer starts: the fds keep it. */
        OK(p_cuMemUnmap(va, 6 * MiB));
        OK(p_cuMemAddressFree(va, 6 * MiB));
        OK(p_cuMemRelease(ha));
        OK(p_cuMemRelease(hb));
        send_word(sock, 1);
        CHECK(recv_word(sock) == 2);
        teardown(0);
}

static void role_vmm_two_importer(int sock)
{
        setup(0);
        int fb = recv_fd(sock), fa0 = recv_fd(sock), fa1 = recv_fd(sock);
        CHECK(fb >= 0 && fa0 >= 0 && fa1 >= 0);
        CHECK(recv_word(sock) == 1);
        struct stat sa0, sa1, sb;
        CHECK(fstat(fa0, &sa0) == 0 && fstat(fa1, &sa1) == 0 && fstat(fb, &sb) == 0);
        CHECK(sa0.st_dev == sb.st_dev && sa0.st_ino == sb.st_ino);
        CHECK(sa1.st_dev == sb.st_dev && sa1.st_ino == sb.st_ino);
        off_t pa0 = lseek(fa0, 0, SEEK_CUR), pa1 = lseek(fa1, 0, SEEK_CUR);
        off_t pb = lseek(fb, 0, SEEK_CUR);

        CUmemGenericAllocationHandle ha = 0, hb = 0, hx = 0;
        OK(p_cuMemImportFromShareableHandle(&hb, (void *)(intptr_t)fb,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        OK(p_cuMemImportFromShareableHandle(&ha, (void *)(intptr_t)fa1,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        CHECK(lseek(fa0, 0, SEEK_CUR) == pa0 && lseek(fa1, 0, SEEK_CUR) == pa1 &&
              lseek(fb, 0, SEEK_CUR) == pb);            /* import leaves it alone */
        /* A new open of the same file names no allocation. */
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fb);
        int fresh = open(path, O_RDWR | O_CLOEXEC);
        CHECK(fresh >= 0);
        CHECK_RC(p_cuMemImportFromShareableHandle(&hx, (void *)(intptr_t)fresh,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                 CUDA_ERROR_INVALID_VALUE);
        close(fresh);
        close(fa0);
        close(fa1);
        close(fb);

        CUmemAccessDesc acc = rw_access(0);
        CUdeviceptr va = 0;
        OK(p_cuMemAddressReserve(&va, 6 * MiB, 0, 0, 0));
        CHECK_RC(p_cuMemMap(va, 4 * MiB, 0, ha, 0), CUDA_ERROR_INVALID_VALUE); /* 2 MiB */
        OK(p_cuMemMap(va, 2 * MiB, 0, ha, 0));
        OK(p_cuMemMap(va + 2 * MiB, 4 * MiB, 0, hb, 0));
        OK(p_cuMemSetAccess(va, 6 * MiB, &acc, 1));
        const unsigned char *m = (const unsigned char *)(uintptr_t)va;
        CHECK(m[0] == 0x11 && m[MiB] == 0x11 && m[2 * MiB - 1] == 0x1f);
        CHECK(m[2 * MiB] == 0x22 && m[5 * MiB] == 0x22 && m[6 * MiB - 1] == 0x2f);
        OK(p_cuMemUnmap(va, 6 * MiB));
        OK(p_cuMemAddressFree(va, 6 * MiB));
        OK(p_cuMemRelease(ha));
        OK(p_cuMemRelease(hb));
        send_word(sock, 2);
        teardown(0);
}

/* ---- 4c. VMM: one reservation, many chunks (PyTorch expandable segments) ---- */

#define CHUNKS 3
static const size_t chunk_size[CHUNKS] = { 2 * MiB, 20 * MiB, 2 * MiB };

static unsigned char chunk_byte(int i, size_t off)
{
        return (unsigned char)(0x30 + 16 * i + (off >> 20));
}

static void role_chunks_exporter(int sock)
{
        setup(0);
        CUmemAllocationProp prop = vmm_prop(0);
        CUmemAccessDesc acc = rw_access(0);
        CUmemGenericAllocationHandle h[CHUNKS], hr = 0;
        CUdeviceptr va = 0, at[CHUNKS];
        OK(p_cuMemAddressReserve(&va, 64 * MiB, 0, 0, 0));
        size_t off = 0;
        for (int i = 0; i < CHUNKS; i++) {
                OK(p_cuMemCreate(&h[i], chunk_size[i], &prop, 0));
                at[i] = va + off;
                OK(p_cuMemMap(at[i], chunk_size[i], 0, h[i], 0));
                off += chunk_size[i];
        }
        /* One chunk alone, then the other two in one call; not half of one,
         * and not past the last mapping. */
        OK(p_cuMemSetAccess(at[0], chunk_size[0], &acc, 1));
        CHECK_RC(p_cuMemSetAccess(at[1], 2 * MiB, &acc, 1), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemSetAccess(at[1], off, &acc, 1), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemSetAccess(at[1], chunk_size[1] + chunk_size[2], &acc, 1));
        for (int i = 0; i < CHUNKS; i++)
                for (size_t o = 0; o < chunk_size[i]; o += MiB)
                        ((unsigned char *)(uintptr_t)at[i])[o] = chunk_byte(i, o);

        /* cuMemGetAddressRange: the chunk; RANGE_*: the reservation; MAPPING_*: the chunk. */
        CUdeviceptr rb = 0, start = 0;
        size_t rs = 0, rsize = 0, msize = 0;
        void *mbase = NULL;
        unsigned long long types = 0, id[CHUNKS];
        CUmemoryPool mp = (CUmemoryPool)1;
        OK(p_cuMemGetAddressRange(&rb, &rs, at[1] + 5 * MiB + 17));
        CHECK(rb == at[1] && rs == chunk_size[1]);
        OK(p_cuMemGetAddressRange(&rb, &rs, at[2]));
        CHECK(rb == at[2] && rs == chunk_size[2]);
        CHECK_RC(p_cuMemGetAddressRange(&rb, &rs, va + off), CUDA_ERROR_NOT_FOUND);
        OK(p_cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, at[1] + 99));
        OK(p_cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, at[1] + 99));
        CHECK(start == va && rsize == 64 * MiB);
        OK(p_cuPointerGetAttribute(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, at[1] + 99));
        OK(p_cuPointerGetAttribute(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, at[1] + 99));
        CHECK(mbase == (void *)(uintptr_t)at[1] && msize == chunk_size[1]);
        OK(p_cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, at[2]));
        CHECK(types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        OK(p_cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, at[0]));
        CHECK(mp == NULL);
        for (int i = 0; i < CHUNKS; i++)
                OK(p_cuPointerGetAttribute(&id[i], CU_POINTER_ATTRIBUTE_BUFFER_ID, at[i] + 4096));
        CHECK(id[0] != id[1] && id[1] != id[2] && id[0] != id[2]);
        CUipcMemHandle ih;
        CHECK_RC(p_cuIpcGetMemHandle(&ih, at[1]), CUDA_ERROR_INVALID_VALUE);

        /* Any address of a chunk retains that chunk's handle, which exports. */
        for (int i = 0; i < CHUNKS; i++) {
                OK(p_cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)(at[i] + chunk_size[i] - 1)));
                CHECK(hr == h[i]);
                int fd = -1;
                OK(p_cuMemExportToShareableHandle(&fd, hr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                  0));
                CHECK(fd >= 0);
                send_fd(sock, fd);
                close(fd);
                OK(p_cuMemRelease(hr));
        }
        CHECK(recv_word(sock) == 1);                    /* importer has mapped them */
        CHECK(((unsigned char *)(uintptr_t)at[1])[3 * MiB + 5] == 0xc1);

        /* Unmap one by one, the middle first; the reservation goes last. */
        CHECK_RC(p_cuMemUnmap(at[1], MiB), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemUnmap(at[1], chunk_size[1]));
        CHECK_RC(p_cuMemGetAddressRange(&rb, &rs, at[1]), CUDA_ERROR_NOT_FOUND);
        CHECK(((unsigned char *)(uintptr_t)at[2])[0] == chunk_byte(2, 0));
        CHECK_RC(p_cuMemAddressFree(va, 64 * MiB), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemUnmap(at[0], chunk_size[0]));
        OK(p_cuMemUnmap(at[2], chunk_size[2]));
        OK(p_cuMemAddressFree(va, 64 * MiB));
        for (int i = 0; i < CHUNKS; i++)
                OK(p_cuMemRelease(h[i]));
        send_word(sock, 2);
        teardown(0);
}

static void role_chunks_importer(int sock)
{
        setup(0);
        CUmemGenericAllocationHandle h[CHUNKS];
        size_t total = 0;
        for (int i = 0; i < CHUNKS; i++) {
                int fd = recv_fd(sock);
                CHECK(fd >= 0);
                OK(p_cuMemImportFromShareableHandle(&h[i], (void *)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
                close(fd);
                total += chunk_size[i];
        }
        /* Back to back in one reservation, opened by one call. */
        CUdeviceptr va = 0, at[CHUNKS];
        CUmemAccessDesc acc = rw_access(0);
        OK(p_cuMemAddressReserve(&va, total, 0, 0, 0));
        size_t off = 0;
        for (int i = 0; i < CHUNKS; i++) {
                at[i] = va + off;
                OK(p_cuMemMap(at[i], chunk_size[i], 0, h[i], 0));
                off += chunk_size[i];
        }
        OK(p_cuMemSetAccess(va, total, &acc, 1));
        bool same = true;
        for (int i = 0; i < CHUNKS; i++)
                for (size_t o = 0; o < chunk_size[i]; o += MiB)
                        same &= ((unsigned char *)(uintptr_t)at[i])[o] == chunk_byte(i, o);
        CHECK(same);
        /* A copy across the chunk boundaries. */
        static unsigned char back[24 * MiB];
        OK(p_cuMemcpyDtoH(back, va, total));
        CHECK(back[2 * MiB] == chunk_byte(1, 0) && back[22 * MiB] == chunk_byte(2, 0));
        CUdeviceptr rb = 0;
        size_t rs = 0;
        OK(p_cuMemGetAddressRange(&rb, &rs, va + 23 * MiB));
        CHECK(rb == at[2] && rs == 2 * MiB);
        ((unsigned char *)(uintptr_t)at[1])[3 * MiB + 5] = 0xc1;
        send_word(sock, 1);
        CHECK(recv_word(sock) == 2);                    /* the exporter let go of it all */
        CHECK(((unsigned char *)(uintptr_t)at[1])[0] == chunk_byte(1, 0));
        for (int i = CHUNKS - 1; i >= 0; i--)
                OK(p_cuMemUnmap(at[i], chunk_size[i]));
        OK(p_cuMemAddressFree(va, total));
        for (int i = 0; i < CHUNKS; i++)
                OK(p_cuMemRelease(h[i]));
        teardown(0);
}

/* ---- 5. IPC events: the consumer must wait for the producer's record ---- */

static void role_event_producer(int sock)
{
        setup(0);
        CUdeviceptr buf;
        OK(p_cuMemAlloc(&buf, MiB));
        OK(p_cuMemsetD8(buf, 0, MiB));
        CUstream s;
        OK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CUevent ev;
        CHECK_RC(p_cuEventCreate(&ev, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        static unsigned char host[MiB];
        memset(host, 0xab, sizeof(host));
        OK(p_cuMemcpyHtoDAsync(buf, host, sizeof(host), s));
        memset(host, 0, sizeof(host));          /* the pageable source was staged */
        OK(p_cuEventRecord(ev, s));
        CHECK_RC(p_cuEventQuery(ev), CUDA_ERROR_NOT_READY);
        CUipcMemHandle mh;
        CUipcEventHandle eh;
        OK(p_cuIpcGetMemHandle(&mh, buf));
        OK(p_cuIpcGetEventHandle(&eh, ev));
        CUevent self;
        CHECK_RC(p_cuIpcOpenEventHandle(&self, eh), CUDA_ERROR_INVALID_CONTEXT);
        send_all(sock, &mh, sizeof(mh));
        send_all(sock, &eh, sizeof(eh));

        CHECK(recv_word(sock) == 1);
        OK(p_cuMemsetD8Async(buf, 0xcd, MiB, s)); /* second round */
        OK(p_cuEventRecord(ev, s));
        send_word(sock, 2);
        CHECK(recv_word(sock) == 3);
        OK(p_cuStreamSynchronize(s));
        OK(p_cuStreamDestroy(s));
        OK(p_cuEventDestroy(ev));
        OK(p_cuMemFree(buf));
        teardown(0);
}

static void role_event_consumer(int sock)
{
        setup(0);
        CUipcMemHandle mh;
        CUipcEventHandle eh;
        recv_all(sock, &mh, sizeof(mh));
        recv_all(sock, &eh, sizeof(eh));
        CUdeviceptr p;
        CUevent ev;
        OK(p_cuIpcOpenMemHandle(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        OK(p_cuIpcOpenEventHandle(&ev, eh));
        double t0 = now_ms();
        /* Not waiting is observable: the producer's copy has not landed yet. */
        CHECK(((volatile unsigned char *)(uintptr_t)p)[0] == 0);
        CHECK_RC(p_cuEventQuery(ev), CUDA_ERROR_NOT_READY);
        CUstream s;
        OK(p_cuStreamCreate(&s, 0));
        OK(p_cuStreamWaitEvent(s, ev, 0));
        static unsigned char back[MiB];
        OK(p_cuMemcpyDtoHAsync(back, p, sizeof(back), s));
        OK(p_cuStreamSynchronize(s));
        double waited = now_ms() - t0;
        bool all = true;
        for (size_t i = 0; i < sizeof(back); i++)
                all &= back[i] == 0xab;
        CHECK(all);
        CHECK(waited >= 150.0);
        OK(p_cuEventQuery(ev));
        send_word(sock, 1);

        CHECK(recv_word(sock) == 2);                    /* recorded again */
        CHECK_RC(p_cuEventQuery(ev), CUDA_ERROR_NOT_READY);
        OK(p_cuEventSynchronize(ev));
        CHECK(((volatile unsigned char *)(uintptr_t)p)[MiB - 1] == 0xcd);
        OK(p_cuEventDestroy(ev));
        OK(p_cuStreamDestroy(s));
        OK(p_cuIpcCloseMemHandle(p));
        send_word(sock, 3);
        teardown(0);
}

/* ---- 6. CUDA_VISIBLE_DEVICES and peer access ---- */

static void uuid_of(int phys, unsigned char out[16])
{
        char s[17];
        memset(s, 0, sizeof(s));
        snprintf(s, sizeof(s), "gpuipc-double-%d", phys);
        memcpy(out, s, 16);
}

static bool ordinal_is(int ordinal, int phys)
{
        CUuuid u;
        unsigned char want[16];
        uuid_of(phys, want);
        return p_cuDeviceGetUuid(&u, ordinal) == CUDA_SUCCESS &&
               memcmp(u.bytes, want, 16) == 0;
}

static int count_devices(void)
{
        int n = -1;
        if (p_cuInit(0) != CUDA_SUCCESS || p_cuDeviceGetCount(&n) != CUDA_SUCCESS)
                return -1;
        return n;
}

static void role_visible_all(int sock)
{
        (void)sock;
        CHECK(count_devices() == 3);
        CHECK(ordinal_is(0, 0) && ordinal_is(1, 1) && ordinal_is(2, 2));
}

static void role_visible_reordered(int sock)
{
        (void)sock;
        CHECK(count_devices() == 2);
        CHECK(ordinal_is(0, 2) && ordinal_is(1, 0));
        char a[32], b[32];
        OK(p_cuDeviceGetPCIBusId(a, sizeof(a), 0));
        OK(p_cuDeviceGetPCIBusId(b, sizeof(b), 1));
        CHECK(strcmp(a, b) != 0);
}

static void role_visible_uuid(int sock)
{
        (void)sock;
        CHECK(count_devices() == 1);
        CHECK(ordinal_is(0, 1));
}

static void role_visible_invalid(int sock)
{
        (void)sock;
        CHECK(count_devices() == 1);    /* parsing stops at the bad entry */
        CHECK(ordinal_is(0, 1));
}

static void role_visible_none(int sock)
{
        (void)sock;
        CHECK_RC(p_cuInit(0), CUDA_ERROR_NO_DEVICE);
}

/* CUDA_VISIBLE_DEVICES=2,0: allocates on ordinal 0, which is physical device 2. */
static void role_dev2_producer(int sock)
{
        setup(0);
        CUdeviceptr base;
        OK(p_cuMemAlloc(&base, 2 * MiB));
        CUipcMemHandle h;
        OK(p_cuIpcGetMemHandle(&h, base));
        for (int i = 0; i < 3; i++)
                send_all(sock, &h, sizeof(h));
        for (int i = 0; i < 3; i++)
                CHECK(recv_word(sock) == 1);
        OK(p_cuMemFree(base));
        teardown(0);
}

/* CUDA_VISIBLE_DEVICES=1,2 and no peer access between 1 and 2. */
static void role_dev2_consumer(int sock)
{
        CHECK(count_devices() == 2);
        CUipcMemHandle h;
        CUdeviceptr p;
        int ord = -1;

        setup(1);       /* physical 2 is ordinal 1 here */
        recv_all(sock, &h, sizeof(h));
        OK(p_cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        OK(p_cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
        CHECK(ord == 1);
        OK(p_cuIpcCloseMemHandle(p));
        send_word(sock, 1);

        setup(0);       /* physical 1: no peer access to physical 2 */
        recv_all(sock, &h, sizeof(h));
        CHECK_RC(p_cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                 CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
        /* Without the lazy flag too: the memory is out of this device's reach. */
        CHECK_RC(p_cuIpcOpenMemHandle(&p, h, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
        send_word(sock, 1);
        /* VMM memory on physical 2 (ordinal 1): access for ordinal 0 (physical
         * 1, no peer access) is refused; for its own device it is granted. */
        CUmemAllocationProp prop = vmm_prop(1);
        CUmemGenericAllocationHandle vh;
        CUdeviceptr va = 0;
        CUmemAccessDesc acc0 = rw_access(0), acc1 = rw_access(1);
        OK(p_cuMemCreate(&vh, 2 * MiB, &prop, 0));
        OK(p_cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
        OK(p_cuMemMap(va, 2 * MiB, 0, vh, 0));
        CHECK_RC(p_cuMemSetAccess(va, 2 * MiB, &acc0, 1), CUDA_ERROR_INVALID_DEVICE);
        OK(p_cuMemSetAccess(va, 2 * MiB, &acc1, 1));
        OK(p_cuMemUnmap(va, 2 * MiB));
        OK(p_cuMemAddressFree(va, 2 * MiB));
        OK(p_cuMemRelease(vh));
        int can = -1;
        OK(p_cuDeviceCanAccessPeer(&can, 0, 1));
        CHECK(can == 0);
        CUcontext other = NULL;
        OK(p_cuDevicePrimaryCtxRetain(&other, 1));
        CHECK_RC(p_cuCtxEnablePeerAccess(other, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
        teardown(0);
        teardown(1);
        teardown(1);
        recv_all(sock, &h, sizeof(h));
        send_word(sock, 1);
}

/* CUDA_VISIBLE_DEVICES=0,1: the producer's device is hidden. */
static void role_hidden_consumer(int sock)
{
        setup(0);
        CUipcMemHandle h;
        CUdeviceptr p;
        for (int i = 0; i < 3; i++) {
                recv_all(sock, &h, sizeof(h));
                if (i == 0)
                        CHECK_RC(p_cuIpcOpenMemHandle(&p, h, 0), CUDA_ERROR_INVALID_DEVICE);
                send_word(sock, 1);
        }
        int can = -1;
        OK(p_cuDeviceCanAccessPeer(&can, 0, 1));
        CHECK(can == 1);
        CUcontext c0 = NULL, c1 = NULL;
        OK(p_cuCtxGetCurrent(&c0));
        OK(p_cuDevicePrimaryCtxRetain(&c1, 1));
        OK(p_cuCtxEnablePeerAccess(c1, 0));
        CHECK_RC(p_cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        CHECK_RC(p_cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_DEVICE);
        OK(p_cuCtxDisablePeerAccess(c1));
        CHECK_RC(p_cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
        teardown(1);
        teardown(0);
}

/* ---- 7. stats file ---- */

static void role_stats(int sock)
{
        (void)sock;
        setup(0);
        for (int i = 0; i < 3; i++) {
                CUdeviceptr p;
                OK(p_cuMemAlloc(&p, MiB));
                OK(p_cuMemFree(p));
        }
        teardown(0);
}

/* ---- 8. fork after cuInit; cleanup at exit; sweep after SIGKILL ---- */

static void role_fork_after_init(int sock)
{
        (void)sock;
        setup(0);
        CUdeviceptr p;
        OK(p_cuMemAlloc(&p, MiB));
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
                role = "forked-after-cuInit";
                int n;
                CHECK_RC(p_cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
                CHECK_RC(p_cuInit(0), CUDA_ERROR_NOT_INITIALIZED);
                exit(0);        /* must not remove the parent's names */
        }
        reap(pid, "forked child");
        CHECK(names_of(getpid()) == 1);
        OK(p_cuMemFree(p));
        teardown(0);
}

static void role_exit_without_free(int sock)
{
        (void)sock;
        setup(0);
        CUdeviceptr p;
        CUevent ev;
        OK(p_cuMemAlloc(&p, MiB));
        OK(p_cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        CHECK(names_of(getpid()) == 2);
}

static CUipcMemHandle *killed_handle;   /* shared page: the killed exporter's handle */

static void role_killed(int sock)
{
        setup(0);
        CUdeviceptr p;
        CUevent ev;
        OK(p_cuMemAlloc(&p, MiB));
        OK(p_cuIpcGetMemHandle(killed_handle, p));
        OK(p_cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        send_word(sock, 1);
        for (;;)
                pause();
}

/* The exporter died by SIGKILL: its name is still there, but opening fails. */
static void role_open_dead(int sock)
{
        (void)sock;
        setup(0);
        CUdeviceptr p;
        CHECK_RC(p_cuIpcOpenMemHandle(&p, *killed_handle, 0), CUDA_ERROR_INVALID_VALUE);
        teardown(0);
}

static void role_sweeper(int sock)
{
        (void)sock;
        OK(p_cuInit(0));
}

/* ---- 9. stream-ordered memory pools ---- */

static CUmemPoolProps pool_props(int dev, CUmemAllocationHandleType types)
{
        CUmemPoolProps props;
        memset(&props, 0, sizeof(props));
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = types;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        return props;
}

static void role_pool_basics(int sock)
{
        (void)sock;
        CUmemoryPool def = NULL, cur = NULL, mp = NULL, pool = NULL;
        CUdeviceptr p = 0, q = 0, a = 0;
        CHECK_RC(p_cuDeviceGetDefaultMemPool(&def, 0), CUDA_ERROR_NOT_INITIALIZED);
        setup(0);
        OK(p_cuDeviceGetDefaultMemPool(&def, 0));
        CHECK(def != NULL);
        CHECK_RC(p_cuDeviceGetDefaultMemPool(&cur, 1), CUDA_ERROR_INVALID_DEVICE);
        OK(p_cuDeviceGetMemPool(&cur, 0));
        CHECK(cur == def);

        /* The default pool: exactly the allocation, unique ids, not shareable. */
        OK(p_cuMemAllocAsync(&p, 3 * MiB + 5, NULL));
        OK(p_cuMemAllocAsync(&q, 4096, NULL));
        CHECK_RC(p_cuMemAllocAsync(&a, 0, NULL), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemAllocAsync(&a, 64, (CUstream)&a), CUDA_ERROR_INVALID_HANDLE);
        CUdeviceptr rb = 0;
        size_t rs = 0;
        OK(p_cuMemGetAddressRange(&rb, &rs, p + 3 * MiB));
        CHECK(rb == p && rs == 3 * MiB + 5);
        unsigned long long id1 = 0, id2 = 0, types = 99;
        int legacy = -1;
        OK(p_cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p + 1));
        CHECK(mp == def);
        OK(p_cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p));
        CHECK(types == 0);
        OK(p_cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
        OK(p_cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, q));
        CHECK(id1 != id2);
        OK(p_cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
        CHECK(legacy == 0);
        CUipcMemHandle ih;
        CUmemGenericAllocationHandle gh;
        CUmemPoolPtrExportData pd;
        int fd = -1;
        CHECK_RC(p_cuIpcGetMemHandle(&ih, p), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemRetainAllocationHandle(&gh, (void *)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemPoolExportToShareableHandle(&fd, def, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                    0), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemPoolExportPointer(&pd, p), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);

        /* Host code reads and writes it; copies check it as device memory. */
        unsigned char host[4096], back[4096];
        for (size_t i = 0; i < sizeof(host); i++)
                host[i] = pattern(i);
        OK(p_cuMemcpyHtoD(p + 3 * MiB - 4096, host, sizeof(host)));
        CHECK(memcmp((void *)(uintptr_t)(p + 3 * MiB - 4096), host, sizeof(host)) == 0);
        ((unsigned char *)(uintptr_t)q)[7] = 0x3c;
        OK(p_cuMemcpyDtoH(back, q, 16));
        CHECK(back[7] == 0x3c);
        CHECK_RC(p_cuMemcpyDtoH(back, q + 4090, 16), CUDA_ERROR_INVALID_VALUE);

        /* Memory not from a pool: no pool, no error; cuMemFreeAsync refuses it. */
        OK(p_cuMemAlloc(&a, MiB));
        mp = (CUmemoryPool)1;
        OK(p_cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a));
        CHECK(mp == NULL);
        CHECK_RC(p_cuMemFreeAsync(a, NULL), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemFree(a));

        /* cuMemFree and cuMemFreeAsync (on a stream) both free pool memory. */
        CUstream s;
        OK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK_RC(p_cuMemFreeAsync(p + 1, s), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemFree(p));
        CHECK_RC(p_cuMemGetAddressRange(&rb, &rs, p), CUDA_ERROR_NOT_FOUND);
        OK(p_cuMemFreeAsync(q, s));
        CHECK_RC(p_cuMemFreeAsync(q, s), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemFree(q), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemAllocAsync(&p, MiB, s));
        OK(p_cuMemsetD8Async(p, 0x6b, MiB, s));
        OK(p_cuMemFreeAsync(p, s));
        OK(p_cuMemAllocFromPoolAsync(&p, MiB, def, s));
        OK(p_cuMemFreeAsync(p, s));

        /* A pool of our own, exportable; attributes; the device's current pool. */
        CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_FABRIC);
        CHECK_RC(p_cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
        props = pool_props(1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        CHECK_RC(p_cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_DEVICE);
        props = pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        props.location.type = CU_MEM_LOCATION_TYPE_HOST;
        CHECK_RC(p_cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
        props = pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        OK(p_cuMemPoolCreate(&pool, &props));
        CHECK(pool != NULL && pool != def);
        cuuint64_t thr = UINT64_MAX, v = 1;
        OK(p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
        OK(p_cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
        CHECK(v == UINT64_MAX);
        OK(p_cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
        int reuse = -1, off = 0;
        OK(p_cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
        CHECK(reuse == 1);
        OK(p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &off));
        OK(p_cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
        CHECK(reuse == 0);
        CHECK_RC(p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v),
                 CUDA_ERROR_INVALID_VALUE);
        OK(p_cuDeviceSetMemPool(0, pool));
        OK(p_cuDeviceGetMemPool(&cur, 0));
        CHECK(cur == pool);
        OK(p_cuMemAllocAsync(&p, 5 * MiB, s));
        OK(p_cuMemAllocFromPoolAsync(&q, 1000, pool, NULL));
        OK(p_cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
        CHECK(mp == pool);
        OK(p_cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, q));
        CHECK(types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        OK(p_cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
        CHECK(v == 5 * MiB + 1000);
        OK(p_cuMemGetAddressRange(&rb, &rs, q + 999));
        CHECK(rb == q && rs == 1000);
        OK(p_cuMemFreeAsync(q, NULL));
        OK(p_cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
        CHECK(v == 5 * MiB + 1000);
        cuuint64_t zero = 0;
        OK(p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
        OK(p_cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
        CHECK(v == 5 * MiB);
        OK(p_cuMemAllocFromPoolAsync(&q, 1000, pool, NULL));
        CHECK_RC(p_cuIpcGetMemHandle(&ih, p), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemRetainAllocationHandle(&gh, (void *)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);

        /* Export: the pool as an fd, a pointer only at its allocation's start. */
        CHECK_RC(p_cuMemPoolExportPointer(&pd, p + 64), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemPoolExportPointer(&pd, p));
        CHECK_RC(p_cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_FABRIC, 0),
                 CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CHECK(fd >= 0);
        CUmemoryPool self = NULL;
        CHECK_RC(p_cuMemPoolImportFromShareableHandle(&self, (void *)(intptr_t)fd,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                 CUDA_ERROR_INVALID_VALUE);
        close(fd);

        /* Access: the owner keeps read-write; a second device does not exist here. */
        CUmemAccessDesc acc = rw_access(0), bad = rw_access(1), ro = rw_access(0);
        ro.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
        OK(p_cuMemPoolSetAccess(pool, &acc, 1));
        CHECK_RC(p_cuMemPoolSetAccess(pool, &ro, 1), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemPoolSetAccess(pool, &bad, 1), CUDA_ERROR_INVALID_DEVICE);
        CUmemAccess_flags fl = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 };
        OK(p_cuMemPoolGetAccess(&fl, pool, &loc));
        CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        OK(p_cuMemPoolTrimTo(pool, 0));

        /* Destroying the current pool: the default is current again, and
         * memory still allocated from it stays until freed. */
        OK(p_cuMemPoolDestroy(pool));
        CHECK_RC(p_cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuDeviceGetMemPool(&cur, 0));
        CHECK(cur == def);
        CHECK_RC(p_cuMemAllocFromPoolAsync(&a, 64, pool, NULL), CUDA_ERROR_INVALID_VALUE);
        ((unsigned char *)(uintptr_t)p)[5 * MiB - 1] = 0x99;
        OK(p_cuMemFree(p));
        OK(p_cuMemFreeAsync(q, s));
        OK(p_cuStreamDestroy(s));

        void *fn = NULL;
        CUdriverProcAddressQueryResult qr;
        OK(p_cuGetProcAddress("cuMemAllocAsync", &fn, 13000, 0, &qr));
        CHECK(fn == dlsym(lib, "cuMemAllocAsync") && fn == (void *)p_cuMemAllocAsync);
        OK(p_cuGetProcAddress("cuMemPoolImportPointer", &fn, 12000, 0, &qr));
        CHECK(fn == (void *)p_cuMemPoolImportPointer);
        CHECK_RC(p_cuGetProcAddress("cuMemFreeAsync", &fn, 11010, 0, &qr), CUDA_ERROR_NOT_FOUND);
        CHECK(p_count("cuMemAllocAsync") == 6);
        CHECK(p_count("cuMemFreeAsync") == 8);
        CHECK(p_count("cuMemPoolCreate") == 4);
        teardown(0);
}

/* Two devices without peer access: a pool grants access to the other
 * device only where the pair has it. */
static void role_pool_peer(int sock)
{
        (void)sock;
        setup(0);
        CUmemoryPool pool = NULL;
        CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_NONE);
        OK(p_cuMemPoolCreate(&pool, &props));
        CUmemAccessDesc d1 = rw_access(1), d2 = rw_access(2), none = rw_access(1);
        none.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        CHECK_RC(p_cuMemPoolSetAccess(pool, &d1, 1), CUDA_ERROR_INVALID_DEVICE);
        OK(p_cuMemPoolSetAccess(pool, &none, 1));
        OK(p_cuMemPoolSetAccess(pool, &d2, 1));
        CUmemAccess_flags fl = CU_MEM_ACCESS_FLAGS_PROT_READ;
        CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 };
        OK(p_cuMemPoolGetAccess(&fl, pool, &loc));
        CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_NONE);
        loc.id = 2;
        OK(p_cuMemPoolGetAccess(&fl, pool, &loc));
        CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        /* cuDeviceSetMemPool takes only a pool of that device. */
        CHECK_RC(p_cuDeviceSetMemPool(1, pool), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemPoolDestroy(pool));
        teardown(0);
}

static void role_pool_exporter(int sock)
{
        setup(0);
        CUmemoryPool pool = NULL;
        CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        OK(p_cuMemPoolCreate(&pool, &props));
        CUdeviceptr a = 0, b = 0, c = 0;
        OK(p_cuMemAllocFromPoolAsync(&a, MiB + 3, pool, NULL));
        OK(p_cuMemAllocFromPoolAsync(&b, 4 * MiB, pool, NULL));
        OK(p_cuMemAllocFromPoolAsync(&c, 8192, pool, NULL));
        for (size_t i = 0; i < MiB + 3; i++)
                ((unsigned char *)(uintptr_t)a)[i] = pattern(i);
        OK(p_cuMemsetD8(b, 0xb0, 4 * MiB));
        OK(p_cuMemsetD8(c, 0xc0, 8192));
        CUmemPoolPtrExportData da, db, dc;
        OK(p_cuMemPoolExportPointer(&da, a));
        OK(p_cuMemPoolExportPointer(&db, b));
        OK(p_cuMemPoolExportPointer(&dc, c));
        int fd = -1;
        OK(p_cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        send_fd(sock, fd);
        close(fd);
        send_all(sock, &da, sizeof(da));
        send_all(sock, &db, sizeof(db));
        send_all(sock, &dc, sizeof(dc));

        CHECK(recv_word(sock) == 1);            /* imported and written */
        CHECK(((unsigned char *)(uintptr_t)a)[MiB + 2] == 0x5e);
        CHECK(recv_word(sock) == 2);            /* freed a; b still imported */
        OK(p_cuMemFree(a));
        OK(p_cuMemFreeAsync(b, NULL));          /* before the importer: existing import stays */
        send_word(sock, 3);
        CHECK(recv_word(sock) == 4);
        /* c is never freed: exiting takes the pool with it. */
        teardown(0);
}

static void role_pool_importer(int sock)
{
        setup(0);
        int fd = recv_fd(sock);
        CHECK(fd >= 0);
        CUmemPoolPtrExportData da, db, dc, bad;
        recv_all(sock, &da, sizeof(da));
        recv_all(sock, &db, sizeof(db));
        recv_all(sock, &dc, sizeof(dc));
        CUmemoryPool pool = NULL, def = NULL, other = NULL;
        int devnull = open("/dev/null", O_RDONLY);
        CHECK_RC(p_cuMemPoolImportFromShareableHandle(&other, (void *)(intptr_t)devnull,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                 CUDA_ERROR_INVALID_VALUE);
        close(devnull);
        OK(p_cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        close(fd);                              /* the imported pool keeps it */

        CUdeviceptr pa = 0, pa2 = 0, pb = 0, x = 0;
        OK(p_cuDeviceGetDefaultMemPool(&def, 0));
        CHECK_RC(p_cuMemPoolImportPointer(&x, def, &da), CUDA_ERROR_INVALID_VALUE);
        bad = da;
        bad.reserved[0] ^= 1;
        CHECK_RC(p_cuMemPoolImportPointer(&x, pool, &bad), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemAllocFromPoolAsync(&x, 64, pool, NULL), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuDeviceSetMemPool(0, pool), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemPoolImportPointer(&pa, pool, &da));
        OK(p_cuMemPoolImportPointer(&pa2, pool, &da));
        CHECK(pa2 == pa);                       /* measured: the same address */
        OK(p_cuMemPoolImportPointer(&pb, pool, &db));
        CUdeviceptr rb = 0;
        size_t rs = 0;
        OK(p_cuMemGetAddressRange(&rb, &rs, pa + MiB));
        CHECK(rb == pa && rs == MiB + 3);
        OK(p_cuMemGetAddressRange(&rb, &rs, pb + 5));
        CHECK(rb == pb && rs == 4 * MiB);
        CUmemoryPool mp = NULL;
        OK(p_cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, pa));
        CHECK(mp == pool);
        bool same = true;
        for (size_t i = 0; i < MiB + 3; i++)
                same &= ((unsigned char *)(uintptr_t)pa)[i] == pattern(i);
        CHECK(same);
        CHECK(((unsigned char *)(uintptr_t)pb)[4 * MiB - 1] == 0xb0);
        CUmemPoolPtrExportData again;
        CHECK_RC(p_cuMemPoolExportPointer(&again, pa), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemsetD8(pa + MiB + 2, 0x5e, 1));
        send_word(sock, 1);

        /* The importer frees first, as CUDA asks; two imports, two frees. */
        OK(p_cuMemFree(pa));
        CHECK(((unsigned char *)(uintptr_t)pa)[0] == pattern(0));
        OK(p_cuMemFreeAsync(pa, NULL));
        CHECK_RC(p_cuMemFree(pa), CUDA_ERROR_INVALID_VALUE);
        send_word(sock, 2);

        /* After the exporter's free: the import still reads, new ones fail. */
        CHECK(recv_word(sock) == 3);
        CHECK(((unsigned char *)(uintptr_t)pb)[MiB] == 0xb0);
        CHECK_RC(p_cuMemPoolImportPointer(&x, pool, &db), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(p_cuMemPoolImportPointer(&x, pool, &da), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemFree(pb));
        send_word(sock, 4);

        /* The exporter exited without freeing c: it cannot be imported now. */
        for (int i = 0; i < 200; i++) {         /* until its exit is complete */
                if (p_cuMemPoolImportPointer(&x, pool, &dc) != CUDA_SUCCESS)
                        break;
                p_cuMemFree(x);
                usleep(10000);
        }
        CHECK_RC(p_cuMemPoolImportPointer(&x, pool, &dc), CUDA_ERROR_INVALID_VALUE);
        OK(p_cuMemPoolDestroy(pool));
        CHECK_RC(p_cuMemPoolImportPointer(&x, pool, &dc), CUDA_ERROR_INVALID_VALUE);
        teardown(0);
}

/* ---- 10. pid namespaces ---- */

static void run_one(const char *what, role_fn a, const char *const *env);

static void role_ns_producer(int sock)
{
        setup(0);
        CUdeviceptr m = 0;
        OK(p_cuMemAlloc(&m, 2 * MiB));
        OK(p_cuMemsetD8(m, 0x4e, 2 * MiB));
        CUipcMemHandle mh;
        OK(p_cuIpcGetMemHandle(&mh, m));
        CUevent ev;
        CUipcEventHandle eh;
        OK(p_cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        OK(p_cuIpcGetEventHandle(&eh, ev));
        send_all(sock, &mh, sizeof(mh));
        send_all(sock, &eh, sizeof(eh));

        CUmemAllocationProp prop = vmm_prop(0);
        CUmemAccessDesc acc = rw_access(0);
        CUmemGenericAllocationHandle vh;
        CUdeviceptr va = 0;
        OK(p_cuMemCreate(&vh, 2 * MiB, &prop, 0));
        OK(p_cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
        OK(p_cuMemMap(va, 2 * MiB, 0, vh, 0));
        OK(p_cuMemSetAccess(va, 2 * MiB, &acc, 1));
        OK(p_cuMemsetD8(va, 0x4f, 2 * MiB));
        int fd = -1;
        OK(p_cuMemExportToShareableHandle(&fd, vh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        send_fd(sock, fd);
        close(fd);

        CUmemoryPool pool = NULL;
        CUmemPoolProps props = pool_props(0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        OK(p_cuMemPoolCreate(&pool, &props));
        CUdeviceptr pp = 0;
        OK(p_cuMemAllocFromPoolAsync(&pp, MiB, pool, NULL));
        OK(p_cuMemsetD8(pp, 0x50, MiB));
        CUmemPoolPtrExportData pd;
        OK(p_cuMemPoolExportPointer(&pd, pp));
        OK(p_cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        send_fd(sock, fd);
        close(fd);
        send_all(sock, &pd, sizeof(pd));

        /* The consumer's cuInit swept, and its open failed: our names stay. */
        CHECK(recv_word(sock) == 1);
        CHECK(names_of(getpid()) == 2);
        CHECK(((unsigned char *)(uintptr_t)pp)[5] == 0x51);
        send_word(sock, 2);
        CHECK(recv_word(sock) == 3);
        OK(p_cuMemFree(pp));
        OK(p_cuMemPoolDestroy(pool));
        OK(p_cuMemUnmap(va, 2 * MiB));
        OK(p_cuMemAddressFree(va, 2 * MiB));
        OK(p_cuMemRelease(vh));
        OK(p_cuEventDestroy(ev));
        OK(p_cuMemFree(m));
        teardown(0);
}

/* Runs as pid 1 of a pid namespace of its own. */
static void role_ns_consumer(int sock)
{
        CHECK(getpid() == 1);
        setup(0);
        CUipcMemHandle mh;
        CUipcEventHandle eh;
        recv_all(sock, &mh, sizeof(mh));
        recv_all(sock, &eh, sizeof(eh));
        CUdeviceptr p = 0;
        CUevent ev;
        /* Measured: legacy IPC does not cross pid namespaces. */
        CHECK_RC(p_cuIpcOpenMemHandle(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                 CUDA_ERROR_INVALID_CONTEXT);
        CHECK_RC(p_cuIpcOpenEventHandle(&ev, eh), CUDA_ERROR_INVALID_CONTEXT);

        /* VMM fds do. */
        int fd = recv_fd(sock);
        CUmemGenericAllocationHandle vh = 0;
        OK(p_cuMemImportFromShareableHandle(&vh, (void *)(intptr_t)fd,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        close(fd);
        CUdeviceptr va = 0;
        CUmemAccessDesc acc = rw_access(0);
        OK(p_cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
        OK(p_cuMemMap(va, 2 * MiB, 0, vh, 0));
        OK(p_cuMemSetAccess(va, 2 * MiB, &acc, 1));
        CHECK(((unsigned char *)(uintptr_t)va)[MiB] == 0x4f);

        /* Pools travel as fds too (not measured across namespaces). */
        fd = recv_fd(sock);
        CUmemPoolPtrExportData pd;
        recv_all(sock, &pd, sizeof(pd));
        CUmemoryPool pool = NULL;
        OK(p_cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        close(fd);
        OK(p_cuMemPoolImportPointer(&p, pool, &pd));
        CHECK(((unsigned char *)(uintptr_t)p)[MiB - 1] == 0x50);
        ((unsigned char *)(uintptr_t)p)[5] = 0x51;
        send_word(sock, 1);
        CHECK(recv_word(sock) == 2);
        OK(p_cuMemFree(p));
        OK(p_cuMemPoolDestroy(pool));
        OK(p_cuMemUnmap(va, 2 * MiB));
        OK(p_cuMemAddressFree(va, 2 * MiB));
        OK(p_cuMemRelease(vh));
        send_word(sock, 3);
        teardown(0);
}

/* fn runs as pid 1 of a new pid namespace: unshare in a child, fork again. */
static pid_t spawn_in_pidns(const char *name, role_fn fn, int sock)
{
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
                perror("fork");
                exit(1);
        }
        if (pid != 0)
                return pid;
        if (unshare(CLONE_NEWPID) != 0)
                _exit(77);
        pid_t inner = spawn(name, fn, sock, NULL);
        int st = 0;
        while (waitpid(inner, &st, 0) < 0 && errno == EINTR)
                ;
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}

static void role_noop(int sock)
{
        (void)sock;
}

static void test_pidns(void)
{
        if (geteuid() != 0) {
                printf("note: pid namespace test skipped (needs root for unshare(CLONE_NEWPID))\n");
                return;
        }
        pid_t probe = spawn_in_pidns("pidns probe", role_noop, -1);
        int st = 0;
        waitpid(probe, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                printf("note: pid namespace test skipped (unshare(CLONE_NEWPID) failed)\n");
                return;
        }
        int sv[2];
        pair(sv);
        pid_t pa = spawn("pidns producer", role_ns_producer, sv[0], NULL);
        pid_t pb = spawn_in_pidns("pidns consumer", role_ns_consumer, sv[1]);
        close(sv[0]);
        close(sv[1]);
        reap(pa, "pidns producer");
        reap(pb, "pidns consumer");
}

/* The sweep leaves names of another pid namespace alone, even with a pid
 * that is dead here; it removes those of this namespace. */
static void role_sweep_ns(int sock)
{
        (void)sock;
        OK(p_cuInit(0));
}

static void test_sweep_other_ns(void)
{
        pid_t dead = fork();
        if (dead == 0)
                _exit(0);
        waitpid(dead, NULL, 0);
        struct stat st;
        unsigned long long ns = stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
        char other[512], mine[512], old[512];
        snprintf(other, sizeof(other), "%s/gpuipc-double-%d-n%llu-0123456789abcdef-m1", shm_dir,
                 (int)dead, ns + 1);
        snprintf(mine, sizeof(mine), "%s/gpuipc-double-%d-n%llu-0123456789abcdef-m1", shm_dir,
                 (int)dead, ns);
        snprintf(old, sizeof(old), "%s/gpuipc-double-%d-0123456789abcdef-m1", shm_dir, (int)dead);
        const char *paths[] = { other, mine, old };
        for (int i = 0; i < 3; i++) {
                int fd = open(paths[i], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                CHECK(fd >= 0);
                if (fd >= 0)
                        close(fd);
        }
        run_one("sweep other namespace", role_sweep_ns, NULL);
        CHECK(access(other, F_OK) == 0);
        CHECK(access(old, F_OK) == 0);          /* no namespace in the name: kept */
        CHECK(access(mine, F_OK) != 0);
        unlink(other);
        unlink(old);
}

/* ---- driver ---- */

static void run_pair(const char *what, role_fn a, const char *const *env_a, role_fn b,
                     const char *const *env_b)
{
        int sv[2];
        pair(sv);
        pid_t pa = spawn(what, a, sv[0], env_a);
        pid_t pb = spawn(what, b, sv[1], env_b);
        close(sv[0]);
        close(sv[1]);
        reap(pa, what);
        reap(pb, what);
}

static void run_one(const char *what, role_fn a, const char *const *env)
{
        pid_t p = spawn(what, a, -1, env);
        reap(p, what);
}

static void test_vmm(void)
{
        int sv[2];
        pair(sv);
        pid_t pe = spawn("vmm exporter", role_vmm_exporter, sv[1], NULL);
        close(sv[1]);
        int fd = recv_fd(sv[0]);        /* the parent holds the fd, with no CUDA at all */
        close(sv[0]);
        CHECK(fd >= 0);
        reap(pe, "vmm exporter");       /* gone, having released everything */
        pair(sv);
        pid_t pi = spawn("vmm importer", role_vmm_importer, sv[1], NULL);
        close(sv[1]);
        send_fd(sv[0], fd);
        close(fd);
        reap(pi, "vmm importer");
        close(sv[0]);
}

static void test_stats(void)
{
        char tmpl[300];
        snprintf(tmpl, sizeof(tmpl), "GPUIPC_CUDA_DOUBLE_STATS=%s/stats-%%p.txt", shm_dir);
        const char *env[] = { tmpl, NULL };
        pid_t pid = spawn("stats", role_stats, -1, env);
        reap(pid, "stats");
        char path[300], line[128];
        snprintf(path, sizeof(path), "%s/stats-%d.txt", shm_dir, (int)pid);
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        int found = 0;
        while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
                found += strcmp(line, "cuMemAlloc_v2 3\n") == 0;
                found += strcmp(line, "cuMemFree_v2 3\n") == 0;
                found += strcmp(line, "cuInit 1\n") == 0;
                found += strcmp(line, "cuIpcOpenMemHandle_v2 0\n") == 0;
        }
        if (f != NULL)
                fclose(f);
        CHECK(found == 4);
        unlink(path);
}

static void test_cleanup(void)
{
        pid_t pid = spawn("exit without free", role_exit_without_free, -1, NULL);
        reap(pid, "exit without free");
        CHECK(names_of(pid) == 0);              /* atexit removed them */

        run_one("fork after cuInit", role_fork_after_init, NULL);

        int sv[2];
        pair(sv);
        pid = spawn("killed", role_killed, sv[1], NULL);
        close(sv[1]);
        CHECK(recv_word(sv[0]) == 1);
        close(sv[0]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        CHECK(names_of(pid) == 2);              /* SIGKILL leaves names behind */
        run_one("open after SIGKILL", role_open_dead, NULL);
        run_one("sweeper", role_sweeper, NULL);
        CHECK(names_of(pid) == 0);              /* cuInit swept them */
}

int main(int argc, char **argv)
{
        if (argc != 2) {
                fprintf(stderr, "usage: %s /path/to/libcuda.so.1\n", argv[0]);
                return 2;
        }
        sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sh == MAP_FAILED)
                return 1;
        killed_handle = (CUipcMemHandle *)((char *)sh + 1024);
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(shm_dir, sizeof(shm_dir), "%s/gpuipc-dtest-XXXXXX", base);
        if (mkdtemp(shm_dir) == NULL) {
                perror("mkdtemp");
                return 1;
        }
        setenv("GPUIPC_CUDA_DOUBLE_SHM_DIR", shm_dir, 1);
        unsetenv("CUDA_VISIBLE_DEVICES");
        unsetenv("GPUIPC_CUDA_DOUBLE_DEVICES");
        unsetenv("GPUIPC_CUDA_DOUBLE_EVENT_DELAY_MS");
        unsetenv("GPUIPC_CUDA_DOUBLE_ALREADY_MAPPED");
        unsetenv("GPUIPC_CUDA_DOUBLE_NO_PEER");
        unsetenv("GPUIPC_CUDA_DOUBLE_STATS");
        load(argv[1]);

        run_one("basics", role_basics, NULL);
        run_one("kernels", role_kernels, NULL);
        run_pair("legacy ipc", role_ipc_producer, NULL, role_ipc_consumer, NULL);
        static const char *const already[] = { "GPUIPC_CUDA_DOUBLE_ALREADY_MAPPED=1", NULL };
        run_pair("already mapped", role_simple_producer, NULL, role_already_mapped_consumer,
                 already);
        test_vmm();
        run_pair("vmm one file", role_vmm_two_exporter, NULL, role_vmm_two_importer, NULL);
        run_pair("vmm chunks", role_chunks_exporter, NULL, role_chunks_importer, NULL);
        static const char *const delay[] = { "GPUIPC_CUDA_DOUBLE_EVENT_DELAY_MS=300", NULL };
        run_pair("ipc event", role_event_producer, delay, role_event_consumer, NULL);
        run_one("kernels queued", role_kernels_queued, delay);

        static const char *const d3[] = { "GPUIPC_CUDA_DOUBLE_DEVICES=3", NULL };
        static const char *const d3r[] = { "GPUIPC_CUDA_DOUBLE_DEVICES=3",
                                           "CUDA_VISIBLE_DEVICES=2,0", NULL };
        static const char *const d3u[] = {
                "GPUIPC_CUDA_DOUBLE_DEVICES=3",
                "CUDA_VISIBLE_DEVICES=GPU-67707569-7063-2d64-6f75-626c652d3100", NULL };
        static const char *const d3bad[] = { "GPUIPC_CUDA_DOUBLE_DEVICES=3",
                                             "CUDA_VISIBLE_DEVICES=1,x,0", NULL };
        static const char *const none[] = { "CUDA_VISIBLE_DEVICES=", NULL };
        static const char *const d3c[] = { "GPUIPC_CUDA_DOUBLE_DEVICES=3",
                                           "CUDA_VISIBLE_DEVICES=1,2",
                                           "GPUIPC_CUDA_DOUBLE_NO_PEER=1-2", NULL };
        static const char *const d3h[] = { "GPUIPC_CUDA_DOUBLE_DEVICES=3",
                                           "CUDA_VISIBLE_DEVICES=0,1", NULL };
        run_one("visible all", role_visible_all, d3);
        run_one("visible reordered", role_visible_reordered, d3r);
        run_one("visible by uuid", role_visible_uuid, d3u);
        run_one("visible invalid entry", role_visible_invalid, d3bad);
        run_one("visible none", role_visible_none, none);
        run_pair("ordinals differ", role_dev2_producer, d3r, role_dev2_consumer, d3c);
        run_pair("device hidden", role_dev2_producer, d3r, role_hidden_consumer, d3h);

        static const char *const d3np[] = { "GPUIPC_CUDA_DOUBLE_DEVICES=3",
                                            "GPUIPC_CUDA_DOUBLE_NO_PEER=0-1", NULL };
        run_one("pool basics", role_pool_basics, NULL);
        run_one("pool peer access", role_pool_peer, d3np);
        run_pair("pool sharing", role_pool_exporter, NULL, role_pool_importer, NULL);

        test_sweep_other_ns();
        test_pidns();

        test_stats();
        test_cleanup();
        CHECK(names_total() == 0);              /* nothing left behind */

        rmdir(shm_dir);
        int pass = atomic_load(&sh->pass), fail = atomic_load(&sh->fail);
        printf("%d passed, %d failed\n", pass, fail);
        dlclose(lib);
        return fail == 0 ? 0 : 1;
}

/* cuda_test_jni.c: test-only JNI helpers (org.gpuipc.CudaTestDriver) that
 * allocate and copy "device" memory through the CUDA driver API, loaded with
 * dlopen: $GPUIPC_LIBCUDA when set (the CUDA driver double in CI), else the
 * real libcuda.so.1 (tests/gpu/java).  Everything runs in device 0's primary
 * context, the one libgpuipc, the CUDA runtime, CuPy and PyTorch use.  Not
 * part of the binding: it lives in the test tree and its own library. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <jni.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static struct {
        void *lib;
        CUcontext ctx;
        CUresult (*cuInit)(unsigned);
        CUresult (*cuDeviceGet)(CUdevice *, int);
        CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
        CUresult (*cuCtxSetCurrent)(CUcontext);
        CUresult (*cuCtxSynchronize)(void);
        CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
        CUresult (*cuMemFree_v2)(CUdeviceptr);
        CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
        CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
} cu;

static void fail(JNIEnv *env, const char *what, int r)
{
        char msg[256];
        jclass c = (*env)->FindClass(env, "java/lang/IllegalStateException");

        snprintf(msg, sizeof(msg), "%s failed (CUresult %d)", what, r);
        if (c)
                (*env)->ThrowNew(env, c, msg);
}

#define SYM(name)                                                       \
        do {                                                            \
                *(void **)&cu.name = dlsym(cu.lib, #name);              \
                if (!cu.name) {                                         \
                        fail(env, "dlsym " #name, -1);                  \
                        return -1;                                      \
                }                                                       \
        } while (0)

#define CHECK(call, what)                                               \
        do {                                                            \
                CUresult r_ = (call);                                   \
                if (r_ != 0) {                                          \
                        fail(env, what, r_);                            \
                        return -1;                                      \
                }                                                       \
        } while (0)

/* Loads the driver once and makes device 0's primary context current on
 * this thread.  0, or -1 with an exception pending. */
static int ready(JNIEnv *env)
{
        if (!cu.lib) {
                const char *path = getenv("GPUIPC_LIBCUDA");
                CUdevice dev;

                cu.lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
                if (!cu.lib) {
                        fail(env, dlerror(), -1);
                        return -1;
                }
                SYM(cuInit);
                SYM(cuDeviceGet);
                SYM(cuDevicePrimaryCtxRetain);
                SYM(cuCtxSetCurrent);
                SYM(cuCtxSynchronize);
                SYM(cuMemAlloc_v2);
                SYM(cuMemFree_v2);
                SYM(cuMemcpyHtoD_v2);
                SYM(cuMemcpyDtoH_v2);
                CHECK(cu.cuInit(0), "cuInit");
                CHECK(cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
                CHECK(cu.cuDevicePrimaryCtxRetain(&cu.ctx, dev), "cuDevicePrimaryCtxRetain");
        }
        CHECK(cu.cuCtxSetCurrent(cu.ctx), "cuCtxSetCurrent");
        return 0;
}

JNIEXPORT jlong JNICALL Java_org_gpuipc_CudaTestDriver_alloc(JNIEnv *env, jclass cls, jlong size)
{
        CUdeviceptr p = 0;

        if (ready(env) < 0)
                return 0;
        if (cu.cuMemAlloc_v2(&p, (size_t)size) != 0) {
                fail(env, "cuMemAlloc_v2", -1);
                return 0;
        }
        return (jlong)p;
}

JNIEXPORT void JNICALL Java_org_gpuipc_CudaTestDriver_free(JNIEnv *env, jclass cls, jlong p)
{
        CUresult r;

        if (ready(env) < 0)
                return;
        r = cu.cuMemFree_v2((CUdeviceptr)p);
        if (r != 0)
                fail(env, "cuMemFree_v2", r);
}

JNIEXPORT void JNICALL Java_org_gpuipc_CudaTestDriver_copyToDevice(JNIEnv *env, jclass cls,
                                                                   jlong dptr, jbyteArray data)
{
        jsize n = (*env)->GetArrayLength(env, data);
        jbyte *tmp;
        CUresult r;

        if (ready(env) < 0)
                return;
        tmp = malloc((size_t)n + 1);
        if (!tmp) {
                fail(env, "malloc", -1);
                return;
        }
        (*env)->GetByteArrayRegion(env, data, 0, n, tmp);
        r = cu.cuMemcpyHtoD_v2((CUdeviceptr)dptr, tmp, (size_t)n);
        if (r == 0)
                r = cu.cuCtxSynchronize();
        free(tmp);
        if (r != 0)
                fail(env, "cuMemcpyHtoD_v2", r);
}

JNIEXPORT jbyteArray JNICALL Java_org_gpuipc_CudaTestDriver_copyFromDevice(JNIEnv *env, jclass cls,
                                                                           jlong dptr, jint n)
{
        jbyteArray a;
        jbyte *tmp;
        CUresult r;

        if (ready(env) < 0)
                return NULL;
        tmp = malloc((size_t)n + 1);
        if (!tmp) {
                fail(env, "malloc", -1);
                return NULL;
        }
        r = cu.cuMemcpyDtoH_v2(tmp, (CUdeviceptr)dptr, (size_t)n);
        if (r != 0) {
                free(tmp);
                fail(env, "cuMemcpyDtoH_v2", r);
                return NULL;
        }
        a = (*env)->NewByteArray(env, n);
        if (a)
                (*env)->SetByteArrayRegion(env, a, 0, n, tmp);
        free(tmp);
        return a;
}

/* gpuipc_jni.c: the JNI side of the Java binding (org.gpuipc.Native).
 *
 * A thin layer over libgpuipc (linked in statically): handles travel to Java
 * as jlong, strings as UTF-8 byte arrays (Java's modified UTF-8 is not what
 * the daemon speaks, and the daemon does not validate UTF-8), failures as
 * org.gpuipc.GpuIpcException.  Serialisation per client is done in Java
 * (synchronized), so nothing here locks.  Batches are in batch_jni.c; the
 * helpers both files use are declared in gpuipc_jni.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jni.h>

#include "gpuipc.h"
#include "gpuipc_jni.h"

static jclass exc_class;        /* org.gpuipc.GpuIpcException */
static jmethodID exc_from_native;
static jclass info_class;       /* org.gpuipc.BufferInfo */
static jmethodID info_from_native;
static jclass bytes_class;      /* byte[] */

#define HOSTBUF(h) ((gpuipc_hostbuf *)(uintptr_t)(h))
#define VIEW(h)    ((gpuipc_view *)(uintptr_t)(h))

static jclass global_class(JNIEnv *env, const char *name)
{
        jclass local = (*env)->FindClass(env, name);
        jclass global;

        if (!local)
                return NULL;
        global = (*env)->NewGlobalRef(env, local);
        (*env)->DeleteLocalRef(env, local);
        return global;
}

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved)
{
        JNIEnv *env;

        if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK)
                return JNI_ERR;
        exc_class = global_class(env, "org/gpuipc/GpuIpcException");
        info_class = global_class(env, "org/gpuipc/BufferInfo");
        bytes_class = global_class(env, "[B");
        if (!exc_class || !info_class || !bytes_class)
                return JNI_ERR;
        exc_from_native = (*env)->GetStaticMethodID(env, exc_class, "fromNative",
                                                    "(I[B[B)Lorg/gpuipc/GpuIpcException;");
        info_from_native = (*env)->GetStaticMethodID(env, info_class, "fromNative",
                                                     "(J[BIJJ[B[B[J[J[[B[[BIIIIIJ)Lorg/gpuipc/BufferInfo;");
        if (!exc_from_native || !info_from_native)
                return JNI_ERR;
        return JNI_VERSION_1_8;
}

JNIEXPORT void JNICALL JNI_OnUnload(JavaVM *vm, void *reserved)
{
        JNIEnv *env;

        if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK)
                return;
        (*env)->DeleteGlobalRef(env, exc_class);
        (*env)->DeleteGlobalRef(env, info_class);
        (*env)->DeleteGlobalRef(env, bytes_class);
}

/* ---- conversions -------------------------------------------------------- */

/* A new byte[] holding s (without its NUL); NULL with an exception pending. */
jbyteArray gpuipc_jni_bytes(JNIEnv *env, const char *s)
{
        size_t n = s ? strlen(s) : 0;
        jbyteArray a = (*env)->NewByteArray(env, (jsize)n);

        if (a && n)
                (*env)->SetByteArrayRegion(env, a, 0, (jsize)n, (const jbyte *)s);
        return a;
}

void gpuipc_jni_throw_oom(JNIEnv *env)
{
        jclass c = (*env)->FindClass(env, "java/lang/OutOfMemoryError");

        if (c)
                (*env)->ThrowNew(env, c, "gpuipc_jni: out of native memory");
}

/* A malloc'd NUL-terminated copy of a byte[] (which Java checked for NULs);
 * NULL for a null array, or with an exception pending. */
char *gpuipc_jni_cstr(JNIEnv *env, jbyteArray a)
{
        jsize n;
        char *s;

        if (!a)
                return NULL;
        n = (*env)->GetArrayLength(env, a);
        s = malloc((size_t)n + 1);
        if (!s) {
                gpuipc_jni_throw_oom(env);
                return NULL;
        }
        (*env)->GetByteArrayRegion(env, a, 0, n, (jbyte *)s);
        if ((*env)->ExceptionCheck(env)) {
                free(s);
                return NULL;
        }
        s[n] = '\0';
        return s;
}

static void throw_va(JNIEnv *env, int err, const char *msg, const char *fmt, va_list ap)
{
        char op[512];
        jbyteArray jop, jmsg;
        jobject e;

        if ((*env)->ExceptionCheck(env))
                return;
        vsnprintf(op, sizeof(op), fmt, ap);
        jop = gpuipc_jni_bytes(env, op);
        if (!msg || !*msg)
                msg = gpuipc_strerror(err);
        jmsg = gpuipc_jni_bytes(env, msg);
        if (!jop || !jmsg)
                return;
        e = (*env)->CallStaticObjectMethod(env, exc_class, exc_from_native, (jint)err, jop, jmsg);
        if (!(*env)->ExceptionCheck(env) && e)
                (*env)->Throw(env, (jthrowable)e);
}

void gpuipc_jni_throw_msg(JNIEnv *env, int err, const char *msg, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        throw_va(env, err, msg, fmt, ap);
        va_end(ap);
}

void gpuipc_jni_throw(JNIEnv *env, const gpuipc_client *c, int err, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        /* A failed connect has no client: the library keeps its reason. */
        throw_va(env, err, c ? gpuipc_errmsg(c)
                             : strncmp(fmt, "connect ", 8) == 0 ? gpuipc_errmsg(NULL)
                                                                : gpuipc_strerror(err),
                 fmt, ap);
        va_end(ap);
}

void gpuipc_jni_throw_arg(JNIEnv *env, const char *msg)
{
        jclass c = (*env)->FindClass(env, "java/lang/IllegalArgumentException");

        if (c)
                (*env)->ThrowNew(env, c, msg);
}

static jlongArray to_longs(JNIEnv *env, const int64_t *v, uint32_t n)
{
        jlongArray a;

        if (!v)
                return NULL;
        a = (*env)->NewLongArray(env, (jsize)n);
        if (a && n) {
                jlong tmp[32];
                for (uint32_t i = 0; i < n; i += 32) {
                        uint32_t k = n - i < 32 ? n - i : 32;
                        for (uint32_t j = 0; j < k; j++)
                                tmp[j] = (jlong)v[i + j];
                        (*env)->SetLongArrayRegion(env, a, (jsize)i, (jsize)k, tmp);
                        if ((*env)->ExceptionCheck(env)) {
                                (*env)->DeleteLocalRef(env, a);
                                return NULL;
                        }
                }
        }
        return a;
}

int gpuipc_jni_set_elem(JNIEnv *env, jobjectArray a, uint32_t i, jobject o)
{
        if (!o)
                return -1;
        (*env)->SetObjectArrayElement(env, a, (jsize)i, o);
        (*env)->DeleteLocalRef(env, o);
        return (*env)->ExceptionCheck(env) ? -1 : 0;
}

jobjectArray gpuipc_jni_bytes_array(JNIEnv *env, const char *const *s, uint32_t n)
{
        jobjectArray a = (*env)->NewObjectArray(env, (jsize)n, bytes_class, NULL);

        for (uint32_t i = 0; a && i < n; i++) {
                if (gpuipc_jni_set_elem(env, a, i, gpuipc_jni_bytes(env, s[i])) < 0) {
                        (*env)->DeleteLocalRef(env, a);         /* the partly filled array */
                        return NULL;
                }
        }
        return a;
}

/* An org.gpuipc.BufferInfo for *in; NULL with an exception pending. */
jobject gpuipc_jni_info(JNIEnv *env, const gpuipc_info *in)
{
        jobject name, device, dtype, shape, strides, keys, values, r;

        if ((*env)->PushLocalFrame(env, 16) < 0)
                return NULL;
        name = gpuipc_jni_bytes(env, in->name);
        device = gpuipc_jni_bytes(env, in->device);
        dtype = gpuipc_jni_bytes(env, in->dtype);
        shape = to_longs(env, in->shape, in->ndim);
        strides = to_longs(env, in->strides, in->ndim);
        keys = gpuipc_jni_bytes_array(env, in->user_keys, in->n_user);
        values = gpuipc_jni_bytes_array(env, in->user_values, in->n_user);
        if ((*env)->ExceptionCheck(env))
                return (*env)->PopLocalFrame(env, NULL);
        r = (*env)->CallStaticObjectMethod(env, info_class, info_from_native,
                                           (jlong)in->id, name, (jint)in->kind,
                                           (jlong)in->size, (jlong)in->offset, device, dtype,
                                           shape, strides, keys, values,
                                           (jint)in->owner_pid, (jint)in->owner_uid,
                                           (jint)in->owner_gid, (jint)in->leases,
                                           (jint)in->flags, (jlong)in->created_ms);
        if ((*env)->ExceptionCheck(env))
                r = NULL;
        return (*env)->PopLocalFrame(env, r);
}

void gpuipc_jni_meta_free(struct jmeta *m)
{
        for (uint32_t i = 0; i < m->n; i++) {
                free(m->keys[i]);
                free(m->values[i]);
        }
        free(m->keys);
        free(m->values);
}

/* 0, or -1 with an exception pending. */
int gpuipc_jni_meta_get(JNIEnv *env, jobjectArray jkeys, jobjectArray jvalues, struct jmeta *m)
{
        jsize n = jkeys ? (*env)->GetArrayLength(env, jkeys) : 0;

        memset(m, 0, sizeof(*m));
        m->meta.size = sizeof(m->meta);
        if (n == 0)
                return 0;
        if (!jvalues || (*env)->GetArrayLength(env, jvalues) != n) {
                jclass c = (*env)->FindClass(env, "java/lang/IllegalArgumentException");
                if (c)
                        (*env)->ThrowNew(env, c, "metadata keys and values differ in number");
                return -1;
        }
        m->keys = calloc((size_t)n, sizeof(char *));
        m->values = calloc((size_t)n, sizeof(char *));
        if (!m->keys || !m->values) {
                gpuipc_jni_meta_free(m);
                gpuipc_jni_throw_oom(env);
                return -1;
        }
        for (jsize i = 0; i < n; i++) {
                jbyteArray k = (*env)->GetObjectArrayElement(env, jkeys, i);
                jbyteArray v = (*env)->ExceptionCheck(env) ? NULL :
                               (*env)->GetObjectArrayElement(env, jvalues, i);
                m->n = (uint32_t)i + 1;
                if (!(*env)->ExceptionCheck(env)) {
                        m->keys[i] = gpuipc_jni_cstr(env, k);
                        if (m->keys[i])
                                m->values[i] = gpuipc_jni_cstr(env, v);
                }
                (*env)->DeleteLocalRef(env, k);
                (*env)->DeleteLocalRef(env, v);
                if (!m->keys[i] || !m->values[i]) {
                        if (!(*env)->ExceptionCheck(env)) {
                                jclass c = (*env)->FindClass(env, "java/lang/NullPointerException");
                                if (c)
                                        (*env)->ThrowNew(env, c, "null metadata entry");
                        }
                        gpuipc_jni_meta_free(m);
                        return -1;
                }
        }
        m->meta.n_user = m->n;
        m->meta.user_keys = (const char *const *)m->keys;
        m->meta.user_values = (const char *const *)m->values;
        return 0;
}

/* ---- org.gpuipc.Native -------------------------------------------------- */

JNIEXPORT jstring FN(version)(JNIEnv *env, jclass cls)
{
        return (*env)->NewStringUTF(env, gpuipc_version_string());
}

JNIEXPORT jstring FN(defaultSocket)(JNIEnv *env, jclass cls)
{
        jbyteArray b = gpuipc_jni_bytes(env, gpuipc_client_default_socket());
        jclass sc;
        jmethodID ctor;
        jstring cs;

        /* new String(bytes, "UTF-8"): the path need not be modified UTF-8. */
        if (!b || !(sc = (*env)->FindClass(env, "java/lang/String")))
                return NULL;
        ctor = (*env)->GetMethodID(env, sc, "<init>", "([BLjava/lang/String;)V");
        cs = (*env)->NewStringUTF(env, "UTF-8");
        if (!ctor || !cs)
                return NULL;
        return (*env)->NewObject(env, sc, ctor, b, cs);
}

JNIEXPORT jlong FN(connect)(JNIEnv *env, jclass cls, jbyteArray jpath)
{
        char *path = gpuipc_jni_cstr(env, jpath);
        gpuipc_client *c = NULL;
        int r;

        if ((*env)->ExceptionCheck(env))
                return 0;
        r = gpuipc_client_connect(path, &c);
        if (r < 0)
                gpuipc_jni_throw(env, NULL, r, "connect %s", path ? path : gpuipc_client_default_socket());
        free(path);
        return r < 0 ? 0 : HANDLE(c);
}

JNIEXPORT void FN(clientFree)(JNIEnv *env, jclass cls, jlong c)
{
        gpuipc_client_free(CLIENT(c));
}

JNIEXPORT void FN(ping)(JNIEnv *env, jclass cls, jlong c)
{
        int r = gpuipc_client_ping(CLIENT(c));

        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "ping");
}

JNIEXPORT jlong FN(hostbufNew)(JNIEnv *env, jclass cls, jlong size)
{
        gpuipc_hostbuf *b = NULL;
        int r;

        if (size <= 0 || (uint64_t)size > SIZE_MAX) {
                gpuipc_jni_throw(env, NULL, -EINVAL, "allocate host buffer of %lld bytes",
                             (long long)size);
                return 0;
        }
        r = gpuipc_hostbuf_new((size_t)size, &b);
        if (r < 0) {
                gpuipc_jni_throw(env, NULL, r, "allocate host buffer of %lld bytes", (long long)size);
                return 0;
        }
        return HANDLE(b);
}

JNIEXPORT jlong FN(hostbufAddress)(JNIEnv *env, jclass cls, jlong b)
{
        return (jlong)(uintptr_t)gpuipc_hostbuf_data(HOSTBUF(b));
}

JNIEXPORT jlong FN(hostbufSize)(JNIEnv *env, jclass cls, jlong b)
{
        return (jlong)gpuipc_hostbuf_size(HOSTBUF(b));
}

JNIEXPORT void FN(hostbufFree)(JNIEnv *env, jclass cls, jlong b)
{
        gpuipc_hostbuf_free(HOSTBUF(b));
}

JNIEXPORT jobject FN(directBuffer)(JNIEnv *env, jclass cls, jlong address, jlong length)
{
        jobject bb = (*env)->NewDirectByteBuffer(env, (void *)(uintptr_t)address, length);

        if ((*env)->ExceptionCheck(env))
                return NULL;
        if (!bb) {
                jclass c = (*env)->FindClass(env, "java/lang/UnsupportedOperationException");
                if (c)
                        (*env)->ThrowNew(env, c, "this JVM does not support JNI direct buffers");
        }
        return bb;
}

/* A register call's name and metadata: the name (free() it, and
 * gpuipc_jni_meta_free(m)), or NULL with an exception pending and nothing
 * to free. */
static char *register_args(JNIEnv *env, jbyteArray jname, jobjectArray jkeys,
                           jobjectArray jvalues, struct jmeta *m)
{
        char *name = gpuipc_jni_cstr(env, jname);

        if (name && gpuipc_jni_meta_get(env, jkeys, jvalues, m) < 0) {
                free(name);
                return NULL;
        }
        return name;
}

JNIEXPORT jlong FN(registerHost)(JNIEnv *env, jclass cls, jlong c, jbyteArray jname, jlong b,
                                 jobjectArray jkeys, jobjectArray jvalues, jint flags)
{
        struct jmeta m;
        uint64_t id = 0;
        char *name;
        int r;

        name = register_args(env, jname, jkeys, jvalues, &m);
        if (!name)
                return 0;
        r = gpuipc_hostbuf_register(CLIENT(c), name, HOSTBUF(b), m.n ? &m.meta : NULL,
                                 (unsigned)flags, &id);
        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "register %s", name);
        gpuipc_jni_meta_free(&m);
        free(name);
        return (jlong)id;
}

JNIEXPORT jlong FN(registerCuda)(JNIEnv *env, jclass cls, jlong c, jbyteArray jname,
                                 jlong dptr, jlong size, jobjectArray jkeys,
                                 jobjectArray jvalues, jint flags)
{
        struct jmeta m;
        uint64_t id = 0;
        char *name;
        int r;

        name = register_args(env, jname, jkeys, jvalues, &m);
        if (!name)
                return 0;
        r = gpuipc_cuda_register(CLIENT(c), name, (uint64_t)dptr, (uint64_t)size,
                                 m.n ? &m.meta : NULL, NULL, (unsigned)flags, &id);
        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "register %s (device 0x%llx, %lld bytes)", name,
                             (unsigned long long)dptr, (long long)size);
        gpuipc_jni_meta_free(&m);
        free(name);
        return (jlong)id;
}

JNIEXPORT void FN(unregister)(JNIEnv *env, jclass cls, jlong c, jbyteArray jname)
{
        char *name = gpuipc_jni_cstr(env, jname);
        int r;

        if (!name)
                return;
        r = gpuipc_name_unregister(CLIENT(c), name);
        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "unregister %s", name);
        free(name);
}

JNIEXPORT void FN(setTtl)(JNIEnv *env, jclass cls, jlong c, jlong ttl_ms)
{
        int r = ttl_ms < 0 ? -EINVAL : gpuipc_client_set_ttl(CLIENT(c), (uint64_t)ttl_ms);

        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "set a TTL of %lld ms", (long long)ttl_ms);
}

JNIEXPORT void FN(waitReleased)(JNIEnv *env, jclass cls, jlong c, jlong id, jint timeout_ms)
{
        int r = gpuipc_reg_wait_released(CLIENT(c), (uint64_t)id, timeout_ms);

        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "await release of registration %lld",
                             (long long)id);
}

JNIEXPORT void FN(waitUnmapped)(JNIEnv *env, jclass cls, jlong c, jlong id, jint timeout_ms)
{
        int r = gpuipc_reg_wait_unmapped(CLIENT(c), (uint64_t)id, timeout_ms);

        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "await unmapping of registration %lld",
                             (long long)id);
}

JNIEXPORT jlong FN(lookup)(JNIEnv *env, jclass cls, jlong c, jbyteArray jname,
                           jint timeout_ms, jint flags)
{
        gpuipc_view *v = NULL;
        char *name = gpuipc_jni_cstr(env, jname);
        int r;

        if (!name)
                return 0;
        r = gpuipc_view_lookup(CLIENT(c), name, timeout_ms, (unsigned)flags, &v);
        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "lookup %s", name);
        free(name);
        return r < 0 ? 0 : HANDLE(v);
}

JNIEXPORT jlong FN(viewAddress)(JNIEnv *env, jclass cls, jlong v)
{
        return (jlong)(uintptr_t)gpuipc_view_data(VIEW(v));
}

JNIEXPORT jlong FN(viewSize)(JNIEnv *env, jclass cls, jlong v)
{
        return (jlong)gpuipc_view_size(VIEW(v));
}

JNIEXPORT jint FN(viewDevice)(JNIEnv *env, jclass cls, jlong v)
{
        return gpuipc_view_device(VIEW(v));
}

JNIEXPORT jobject FN(viewInfo)(JNIEnv *env, jclass cls, jlong v)
{
        return gpuipc_jni_info(env, gpuipc_view_info(VIEW(v)));
}

JNIEXPORT jint FN(viewRelease)(JNIEnv *env, jclass cls, jlong v)
{
        return gpuipc_view_release(VIEW(v));
}

JNIEXPORT jobjectArray FN(list)(JNIEnv *env, jclass cls, jlong c, jbyteArray jprefix)
{
        gpuipc_list *l = NULL;
        jobjectArray a;
        char *prefix = gpuipc_jni_cstr(env, jprefix);
        size_t n;
        int r;

        if ((*env)->ExceptionCheck(env))
                return NULL;
        r = gpuipc_list_fetch(CLIENT(c), prefix, 0, &l);
        if (r < 0) {
                gpuipc_jni_throw(env, CLIENT(c), r, "list %s", prefix ? prefix : "(all)");
                free(prefix);
                return NULL;
        }
        free(prefix);
        n = gpuipc_list_count(l);
        a = (*env)->NewObjectArray(env, (jsize)n, info_class, NULL);
        for (size_t i = 0; a && i < n; i++) {
                if (gpuipc_jni_set_elem(env, a, (uint32_t)i,
                                        gpuipc_jni_info(env, gpuipc_list_get(l, i))) < 0) {
                        a = NULL;
                        break;
                }
        }
        gpuipc_list_free(l);
        return a;
}

/* gpuipc_jni.h: what the JNI files of the Java binding share (gpuipc_jni.c
 * defines it; batch_jni.c, the batches, uses it).  Internal to
 * libgpuipc_jni.so: the version map exports only the JNI entry points. */
#ifndef GPUIPC_JNI_H
#define GPUIPC_JNI_H

#include <stdint.h>

#include <jni.h>

#include "gpuipc.h"

#define CLIENT(h)  ((gpuipc_client *)(uintptr_t)(h))
#define HANDLE(p)  ((jlong)(uintptr_t)(p))
#define FN(name) JNICALL Java_org_gpuipc_Native_##name

/* A new byte[] holding s (without its NUL); NULL with an exception pending. */
jbyteArray gpuipc_jni_bytes(JNIEnv *env, const char *s);
/* A malloc'd NUL-terminated copy of a byte[] (which Java checked for NULs);
 * NULL for a null array, or with an exception pending. */
char *gpuipc_jni_cstr(JNIEnv *env, jbyteArray a);
/* Sets a[i] to o (NULL: its maker failed) and drops the local reference;
 * -1 with an exception pending. */
int gpuipc_jni_set_elem(JNIEnv *env, jobjectArray a, uint32_t i, jobject o);
/* A new byte[][] of the n strings s; NULL with an exception pending. */
jobjectArray gpuipc_jni_bytes_array(JNIEnv *env, const char *const *s, uint32_t n);
/* An org.gpuipc.BufferInfo for *in; NULL with an exception pending. */
jobject gpuipc_jni_info(JNIEnv *env, const gpuipc_info *in);
void gpuipc_jni_throw_oom(JNIEnv *env);
/* Throws java.lang.IllegalArgumentException(msg). */
void gpuipc_jni_throw_arg(JNIEnv *env, const char *msg);
/* Throws GpuIpcException(err, "op ...", message): the message is the
 * client's gpuipc_errmsg() when there is a client, else gpuipc_strerror(). */
void gpuipc_jni_throw(JNIEnv *env, const gpuipc_client *c, int err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* The same with the message given (gpuipc_strerror(err) when it is NULL or
 * empty). */
void gpuipc_jni_throw_msg(JNIEnv *env, int err, const char *msg, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* User metadata from two byte[][] of equal length. */
struct jmeta {
        gpuipc_meta meta;
        char **keys, **values;
        uint32_t n;
};

/* 0, or -1 with an exception pending (m then needs no jmeta_free). */
int gpuipc_jni_meta_get(JNIEnv *env, jobjectArray jkeys, jobjectArray jvalues, struct jmeta *m);
void gpuipc_jni_meta_free(struct jmeta *m);

#endif

/* batch_jni.c: the JNI side of batches (org.gpuipc.Batch, BatchView).
 *
 * A producer's column arrives as flat arrays, its arrays (nodes) in
 * pre-order: names, formats, field metadata (Arrow's binary form, built in
 * Java), five longs per node (flags, length, null_count, n_children,
 * n_buffers) and three buffer addresses per node (0: absent).  This file
 * turns them into the ArrowSchema / ArrowArray trees that
 * gpuipc_batch_add_column() reads, for the duration of that call.  Java has
 * checked each buffer's size against its format already (Batch.java);
 * what is checked here is only what keeps this file's own walk in bounds.
 *
 * A consumer's view goes back the same way: Java allocates the arrays,
 * batchViewNodes() fills them from gpuipc_info_batch_node() and
 * gpuipc_batch_view_node_buffer(). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jni.h>

#include "gpuipc.h"
#include "gpuipc_jni.h"

#define BATCH(h)  ((gpuipc_batch *)(uintptr_t)(h))
#define BVIEW(h)  ((gpuipc_batch_view *)(uintptr_t)(h))

#define NODE_LONGS 5            /* producer: flags, length, null_count, n_children, n_buffers */
#define VIEW_LONGS 7            /* consumer: parent, flags, length, null_count, offset,
                                 * n_children, n_buffers */
#define VIEW_BUF_LONGS 9        /* consumer: address, size, device of each of 3 buffers */

/* One column being handed to gpuipc_batch_add_column(). */
struct column {
        uint32_t n;                     /* nodes */
        struct ArrowSchema *s;
        struct ArrowArray *a;
        struct ArrowSchema **s_kids;    /* children pointers, n in all */
        struct ArrowArray **a_kids;
        uint32_t kids_used;
        const void **bufs;              /* 3 per node */
        char **names, **formats, **metas;
};

/* The structs are the caller's (this file's), never released by the
 * library; the Arrow spec wants a release callback all the same. */
static void schema_release(struct ArrowSchema *s)
{
        s->release = NULL;
}

static void array_release(struct ArrowArray *a)
{
        a->release = NULL;
}

static void column_free(struct column *t)
{
        for (uint32_t i = 0; i < t->n; i++) {
                if (t->names)
                        free(t->names[i]);
                if (t->formats)
                        free(t->formats[i]);
                if (t->metas)
                        free(t->metas[i]);
        }
        free(t->names);
        free(t->formats);
        free(t->metas);
        free(t->s);
        free(t->a);
        free(t->s_kids);
        free(t->a_kids);
        free(t->bufs);
}

static int column_alloc(struct column *t, uint32_t n)
{
        memset(t, 0, sizeof(*t));
        t->s = calloc(n, sizeof(*t->s));
        t->a = calloc(n, sizeof(*t->a));
        t->s_kids = calloc(n, sizeof(*t->s_kids));
        t->a_kids = calloc(n, sizeof(*t->a_kids));
        t->bufs = calloc((size_t)n * 3, sizeof(*t->bufs));
        t->names = calloc(n, sizeof(char *));
        t->formats = calloc(n, sizeof(char *));
        t->metas = calloc(n, sizeof(char *));
        t->n = n;
        if (!t->s || !t->a || !t->s_kids || !t->a_kids || !t->bufs || !t->names ||
            !t->formats || !t->metas)
                return -ENOMEM;
        return 0;
}

/* Whether blob (len bytes) is Arrow's binary metadata with every length
 * inside it within the blob (the library trusts an ArrowSchema's lengths;
 * it checks the protocol's limits itself, -E2BIG). */
static int meta_blob_ok(const unsigned char *p, size_t len)
{
        size_t at = 4;
        int32_t n, l;

        if (len < 4)
                return 0;
        memcpy(&n, p, 4);
        /* each entry takes 8 bytes of lengths at least: n is bounded */
        if (n < 0 || (size_t)n > (len - 4) / 8)
                return 0;
        for (int32_t i = 0; i < 2 * n; i++) {
                if (len - at < 4)
                        return 0;
                memcpy(&l, p + at, 4);
                at += 4;
                if (l < 0 || (size_t)l > len - at)
                        return 0;
                at += (size_t)l;
        }
        return at == len;
}

/* A malloc'd copy of a metadata blob; NULL for a null one.  -1 with an
 * exception pending. */
static int get_meta(JNIEnv *env, jbyteArray jb, char **ret)
{
        jsize len;

        *ret = NULL;
        if (!jb)
                return 0;
        len = (*env)->GetArrayLength(env, jb);
        *ret = malloc(len > 0 ? (size_t)len : 1);
        if (!*ret) {
                gpuipc_jni_throw_oom(env);
                return -1;
        }
        (*env)->GetByteArrayRegion(env, jb, 0, len, (jbyte *)*ret);
        if ((*env)->ExceptionCheck(env))
                return -1;
        if (!meta_blob_ok((const unsigned char *)*ret, (size_t)len)) {
                gpuipc_jni_throw_arg(env, "malformed field metadata");
                return -1;
        }
        return 0;
}

/* Node i's strings from the Java arrays; -1 with an exception pending. */
static int get_strings(JNIEnv *env, struct column *t, uint32_t i, jobjectArray jnames,
                       jobjectArray jformats, jobjectArray jmetas)
{
        jbyteArray jn, jf, jm;
        int r = -1;

        jn = (*env)->GetObjectArrayElement(env, jnames, (jsize)i);
        jf = (*env)->GetObjectArrayElement(env, jformats, (jsize)i);
        jm = (*env)->GetObjectArrayElement(env, jmetas, (jsize)i);
        if ((*env)->ExceptionCheck(env))
                goto out;
        if (!jn || !jf) {
                gpuipc_jni_throw_arg(env, "a column without a name or format");
                goto out;
        }
        t->names[i] = gpuipc_jni_cstr(env, jn);
        if (t->names[i])
                t->formats[i] = gpuipc_jni_cstr(env, jf);
        if (!t->formats[i])
                goto out;
        r = get_meta(env, jm, &t->metas[i]);
out:
        (*env)->DeleteLocalRef(env, jn);
        (*env)->DeleteLocalRef(env, jf);
        (*env)->DeleteLocalRef(env, jm);
        return r;
}

/* Links node i to its children, which follow it in pre-order; *next: the
 * node after its subtree.  -1 when the counts run past the end. */
static int link_node(struct column *t, uint32_t i, unsigned depth, uint32_t *next)
{
        int64_t k = t->a[i].n_children;
        uint32_t at = i + 1;

        if (depth > 64 || k < 0 || k > (int64_t)(t->n - at) ||
            k > (int64_t)(t->n - t->kids_used))
                return -1;
        t->s[i].children = k ? &t->s_kids[t->kids_used] : NULL;
        t->a[i].children = k ? &t->a_kids[t->kids_used] : NULL;
        t->kids_used += (uint32_t)k;
        for (int64_t j = 0; j < k; j++) {
                if (at >= t->n)
                        return -1;
                t->s[i].children[j] = &t->s[at];
                t->a[i].children[j] = &t->a[at];
                if (link_node(t, at, depth + 1, &at) < 0)
                        return -1;
        }
        *next = at;
        return 0;
}

JNIEXPORT jlong FN(batchNew)(JNIEnv *env, jclass cls)
{
        gpuipc_batch *b = NULL;
        int r = gpuipc_batch_new(&b);

        if (r < 0) {
                gpuipc_jni_throw(env, NULL, r, "create a batch");
                return 0;
        }
        return HANDLE(b);
}

JNIEXPORT void FN(batchFree)(JNIEnv *env, jclass cls, jlong b)
{
        gpuipc_batch_free(BATCH(b));
}

JNIEXPORT void FN(batchAddColumn)(JNIEnv *env, jclass cls, jlong jb, jint device,
                                  jobjectArray jnames, jobjectArray jformats,
                                  jobjectArray jmetas, jlongArray jnodes, jlongArray jbufs)
{
        jsize n = jnames ? (*env)->GetArrayLength(env, jnames) : 0;
        struct column t;
        jlong v[NODE_LONGS], addr[3];
        uint32_t end = 0;
        int r;

        if (n < 1 || n > GPUIPC_BATCH_NODES_MAX || !jformats || !jmetas || !jnodes || !jbufs ||
            (*env)->GetArrayLength(env, jformats) != n ||
            (*env)->GetArrayLength(env, jmetas) != n ||
            (*env)->GetArrayLength(env, jnodes) != n * NODE_LONGS ||
            (*env)->GetArrayLength(env, jbufs) != n * 3) {
                gpuipc_jni_throw_arg(env, "a column is 1 to 1024 arrays, described by arrays "
                                          "of matching lengths");
                return;
        }
        if (column_alloc(&t, (uint32_t)n) < 0) {
                gpuipc_jni_throw_oom(env);
                goto out;
        }
        for (uint32_t i = 0; i < t.n; i++) {
                struct ArrowSchema *s = &t.s[i];
                struct ArrowArray *a = &t.a[i];
                if (get_strings(env, &t, i, jnames, jformats, jmetas) < 0)
                        goto out;
                (*env)->GetLongArrayRegion(env, jnodes, (jsize)i * NODE_LONGS, NODE_LONGS, v);
                (*env)->GetLongArrayRegion(env, jbufs, (jsize)i * 3, 3, addr);
                if ((*env)->ExceptionCheck(env))
                        goto out;
                if (v[4] < 0 || v[4] > 3) {
                        gpuipc_jni_throw_arg(env, "an array has at most 3 buffers");
                        goto out;
                }
                for (int j = 0; j < 3; j++)
                        t.bufs[3 * i + j] = (const void *)(uintptr_t)addr[j];
                *s = (struct ArrowSchema){ .format = t.formats[i], .name = t.names[i],
                                           .metadata = t.metas[i], .flags = v[0],
                                           .n_children = v[3], .release = schema_release };
                *a = (struct ArrowArray){ .length = v[1], .null_count = v[2],
                                          .n_buffers = v[4], .n_children = v[3],
                                          .buffers = &t.bufs[3 * i],
                                          .release = array_release };
        }
        if (link_node(&t, 0, 0, &end) < 0 || end != t.n) {
                gpuipc_jni_throw_arg(env, "the arrays' child counts do not make one tree in "
                                          "pre-order");
                goto out;
        }
        r = gpuipc_batch_add_column(BATCH(jb), &t.s[0], &t.a[0], device);
        if (r < 0)
                gpuipc_jni_throw_msg(env, r, gpuipc_batch_errmsg(BATCH(jb)), "add column %s",
                                     t.names[0]);
out:
        column_free(&t);
}

JNIEXPORT void FN(batchSetMetadata)(JNIEnv *env, jclass cls, jlong jb, jobjectArray jkeys,
                                    jobjectArray jvalues)
{
        struct jmeta m;
        int r;

        if (gpuipc_jni_meta_get(env, jkeys, jvalues, &m) < 0)
                return;
        r = gpuipc_batch_set_metadata(BATCH(jb), m.n, (const char *const *)m.keys,
                                      (const char *const *)m.values);
        if (r < 0)
                gpuipc_jni_throw_msg(env, r, gpuipc_batch_errmsg(BATCH(jb)),
                                     "set the batch's metadata");
        gpuipc_jni_meta_free(&m);
}

JNIEXPORT void FN(batchSetEvent)(JNIEnv *env, jclass cls, jlong jb, jlong event, jint device)
{
        int r = gpuipc_batch_set_event(BATCH(jb), (void *)(uintptr_t)event, device);

        if (r < 0)
                gpuipc_jni_throw_msg(env, r, gpuipc_batch_errmsg(BATCH(jb)),
                                     "set the batch's event");
}

JNIEXPORT jlong FN(batchRegister)(JNIEnv *env, jclass cls, jlong c, jbyteArray jname, jlong jb,
                                  jint flags)
{
        char *name = gpuipc_jni_cstr(env, jname);
        uint64_t id = 0;
        int r;

        if (!name)
                return 0;
        r = gpuipc_batch_register(CLIENT(c), name, BATCH(jb), (unsigned)flags, &id);
        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "register batch %s", name);
        free(name);
        return (jlong)id;
}

JNIEXPORT jlong FN(batchLookup)(JNIEnv *env, jclass cls, jlong c, jbyteArray jname,
                                jint timeout_ms, jint flags)
{
        gpuipc_batch_view *v = NULL;
        char *name = gpuipc_jni_cstr(env, jname);
        int r;

        if (!name)
                return 0;
        r = gpuipc_batch_view_lookup(CLIENT(c), name, timeout_ms, (unsigned)flags, &v);
        if (r < 0)
                gpuipc_jni_throw(env, CLIENT(c), r, "lookup batch %s", name);
        free(name);
        return r < 0 ? 0 : HANDLE(v);
}

JNIEXPORT jlong FN(batchViewRows)(JNIEnv *env, jclass cls, jlong v)
{
        return (jlong)gpuipc_batch_view_rows(BVIEW(v));
}

JNIEXPORT jint FN(batchViewNodeCount)(JNIEnv *env, jclass cls, jlong v)
{
        return (jint)gpuipc_info_batch_nodes(gpuipc_batch_view_info(BVIEW(v)));
}

JNIEXPORT void FN(batchViewNodes)(JNIEnv *env, jclass cls, jlong jv, jlongArray jnodes,
                                  jlongArray jbufs, jobjectArray jnames, jobjectArray jformats,
                                  jobjectArray jkeys, jobjectArray jvalues)
{
        const gpuipc_batch_view *v = BVIEW(jv);
        const gpuipc_info *info = gpuipc_batch_view_info(v);
        size_t n = gpuipc_info_batch_nodes(info);
        jlong nd[VIEW_LONGS], bf[VIEW_BUF_LONGS];

        if (n > GPUIPC_BATCH_NODES_MAX ||
            (*env)->GetArrayLength(env, jnodes) != (jsize)n * VIEW_LONGS ||
            (*env)->GetArrayLength(env, jbufs) != (jsize)n * VIEW_BUF_LONGS ||
            (*env)->GetArrayLength(env, jnames) != (jsize)n ||
            (*env)->GetArrayLength(env, jformats) != (jsize)n ||
            (*env)->GetArrayLength(env, jkeys) != (jsize)n ||
            (*env)->GetArrayLength(env, jvalues) != (jsize)n) {
                gpuipc_jni_throw_arg(env, "arrays of the wrong length for the batch's nodes");
                return;
        }
        for (uint32_t i = 0; i < n; i++) {
                const gpuipc_batch_node *x = gpuipc_info_batch_node(info, i);
                nd[0] = x->parent == UINT32_MAX ? -1 : (jlong)x->parent;
                nd[1] = x->flags;
                nd[2] = x->length;
                nd[3] = x->null_count;
                nd[4] = x->offset;
                nd[5] = x->n_children;
                nd[6] = x->n_buffers;
                for (unsigned j = 0; j < 3; j++) {
                        void *data = NULL;
                        uint64_t size = 0;
                        int dev = -1;
                        if (j >= x->n_buffers ||
                            gpuipc_batch_view_node_buffer(v, i, j, &data, &size, &dev) < 0) {
                                data = NULL;
                                size = 0;
                                dev = -1;
                        }
                        bf[3 * j] = (jlong)(uintptr_t)data;
                        bf[3 * j + 1] = (jlong)size;
                        bf[3 * j + 2] = dev;
                }
                (*env)->SetLongArrayRegion(env, jnodes, (jsize)i * VIEW_LONGS, VIEW_LONGS, nd);
                (*env)->SetLongArrayRegion(env, jbufs, (jsize)i * VIEW_BUF_LONGS,
                                           VIEW_BUF_LONGS, bf);
                if ((*env)->ExceptionCheck(env) ||
                    gpuipc_jni_set_elem(env, jnames, i, gpuipc_jni_bytes(env, x->name)) < 0 ||
                    gpuipc_jni_set_elem(env, jformats, i, gpuipc_jni_bytes(env, x->format)) < 0 ||
                    gpuipc_jni_set_elem(env, jkeys, i,
                                        gpuipc_jni_bytes_array(env, x->meta_keys, x->n_meta)) < 0 ||
                    gpuipc_jni_set_elem(env, jvalues, i,
                                        gpuipc_jni_bytes_array(env, x->meta_values, x->n_meta)) < 0)
                        return;
        }
}

JNIEXPORT jobject FN(batchViewInfo)(JNIEnv *env, jclass cls, jlong v)
{
        return gpuipc_jni_info(env, gpuipc_batch_view_info(BVIEW(v)));
}

JNIEXPORT jint FN(batchViewRelease)(JNIEnv *env, jclass cls, jlong v)
{
        return gpuipc_batch_view_release(BVIEW(v));
}

JNIEXPORT jlong FN(directAddress)(JNIEnv *env, jclass cls, jobject bb)
{
        void *p = (*env)->GetDirectBufferAddress(env, bb);

        if (!p && !(*env)->ExceptionCheck(env))
                gpuipc_jni_throw_arg(env, "not a direct ByteBuffer (or this JVM gives no "
                                          "JNI access to direct buffers)");
        return (jlong)(uintptr_t)p;
}

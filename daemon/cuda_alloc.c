/* cuda_alloc.c: the table of distinct CUDA allocations. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "closer.h"
#include "cuda_alloc.h"
#include "proto.h"

/* The hashed key: kind, device, then the kind's identity. */
struct key {
        uint8_t kind;
        uint8_t device[PROTO_UUID_LEN];
        uint8_t handle[PROTO_IPC_HANDLE_LEN];
        uint64_t buffer_id;
        uint8_t alloc_key[PROTO_ALLOC_KEY_LEN];
};

void alloc_table_init(struct alloc_table *T)
{
        hmap_init(&T->map);
        T->next_id = 1;
        T->n = 0;
}

/* Entries keyed like cuda-ipc: a handle and a buffer id. */
static bool by_handle(uint8_t kind)
{
        return kind == PROTO_KIND_CUDA_IPC || kind == PROTO_KIND_CUDA_POOL;
}

static void alloc_destroy(struct alloc_table *T, struct alloc *a)
{
        struct alloc *pool = a->pool;

        hmap_remove(&T->map, &a->node);
        closer_close(a->fd);
        T->n--;
        free(a->holders);
        free(a);
        alloc_put(T, pool);
}

void alloc_table_done(struct alloc_table *T)
{
        struct hmap_node *n, *next;

        hmap_for_each_safe(n, next, &T->map) {
                struct alloc *a = container_of(n, struct alloc, node);
                if (a->fd >= 0)
                        close(a->fd);
                free(a->holders);
                free(a);
        }
        hmap_free(&T->map);
        T->n = 0;
}

/* Hashes the packed key with the table's keyed SipHash, so clients cannot
 * choose handles that collide. */
static uint64_t key_hash(const struct key *k)
{
        uint8_t buf[1 + PROTO_UUID_LEN + PROTO_IPC_HANDLE_LEN + 8];
        size_t n = 0;

        buf[n++] = k->kind;
        memcpy(buf + n, k->device, PROTO_UUID_LEN);
        n += PROTO_UUID_LEN;
        if (by_handle(k->kind)) {
                memcpy(buf + n, k->handle, PROTO_IPC_HANDLE_LEN);
                n += PROTO_IPC_HANDLE_LEN;
                memcpy(buf + n, &k->buffer_id, 8);
                n += 8;
        } else {
                memcpy(buf + n, k->alloc_key, PROTO_ALLOC_KEY_LEN);
                n += PROTO_ALLOC_KEY_LEN;
        }
        return hmap_hash_str(buf, n);
}

static bool key_eq(const struct alloc *a, const struct key *k)
{
        if (a->kind != k->kind || memcmp(a->device, k->device, PROTO_UUID_LEN) != 0)
                return false;
        if (by_handle(k->kind))
                return a->buffer_id == k->buffer_id &&
                       memcmp(a->handle, k->handle, PROTO_IPC_HANDLE_LEN) == 0;
        return memcmp(a->key, k->alloc_key, PROTO_ALLOC_KEY_LEN) == 0;
}

static struct alloc *find(const struct alloc_table *T, const struct key *k, uint64_t h)
{
        for (struct hmap_node *n = hmap_bucket(&T->map, h); n; n = n->next) {
                struct alloc *a = container_of(n, struct alloc, node);
                if (n->hash == h && key_eq(a, k))
                        return a;
        }
        return NULL;
}

/* Finds or creates the entry of k.  *ret_new says whether it was created.
 * With check_uid, an existing entry is joined only by its creator's uid. */
static int get(struct alloc_table *T, const struct key *k, uint64_t size, bool check_uid,
               uint32_t uid, struct alloc **ret, bool *ret_new)
{
        uint64_t h = key_hash(k);
        struct alloc *a = find(T, k, h);
        int r;

        if (a) {
                if (check_uid && a->uid != uid)
                        return -EPERM;
                if (a->size != size)
                        return -EINVAL;
                /* owner_conn stays: a registration refused after this
                 * (alloc_put) leaves it owed to the same producer, and
                 * one that lands sets it anew when it ends. */
                a->regs++;
                *ret_new = false;
                *ret = a;
                return 0;
        }
        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->kind = k->kind;
        memcpy(a->device, k->device, PROTO_UUID_LEN);
        memcpy(a->handle, k->handle, PROTO_IPC_HANDLE_LEN);
        a->buffer_id = k->buffer_id;
        memcpy(a->key, k->alloc_key, PROTO_ALLOC_KEY_LEN);
        a->size = size;
        a->uid = uid;
        a->fd = -1;
        a->regs = 1;
        r = hmap_insert(&T->map, &a->node, h);
        if (r < 0) {
                free(a);
                return r;
        }
        a->id = T->next_id++;
        T->n++;
        *ret_new = true;
        *ret = a;
        return 0;
}

int alloc_get_ipc(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                  const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t buffer_id,
                  uint64_t size, struct alloc **ret)
{
        struct key k = { .kind = PROTO_KIND_CUDA_IPC, .buffer_id = buffer_id };
        bool created;

        memcpy(k.device, device, PROTO_UUID_LEN);
        memcpy(k.handle, handle, PROTO_IPC_HANDLE_LEN);
        return get(T, &k, size, false, ALLOC_UID_NOBODY, ret, &created);
}

int alloc_get_vmm(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                  const uint8_t key[PROTO_ALLOC_KEY_LEN], int *fd, uint64_t size,
                  struct alloc **ret)
{
        return alloc_get_vmm_as(T, device, key, fd, size, ALLOC_UID_NOBODY, ret);
}

/* An entry that keeps an fd, keyed by a key the producer drew. */
static int get_keyed(struct alloc_table *T, uint8_t kind, const uint8_t device[PROTO_UUID_LEN],
                     const uint8_t key[PROTO_ALLOC_KEY_LEN], int *fd, uint64_t size, uint32_t uid,
                     struct alloc **ret)
{
        struct key k = { .kind = kind };
        struct alloc *a;
        bool created;
        int r;

        memcpy(k.device, device, PROTO_UUID_LEN);
        memcpy(k.alloc_key, key, PROTO_ALLOC_KEY_LEN);
        r = get(T, &k, size, true, uid, &a, &created);
        if (r < 0)
                return r;
        if (created)
                a->fd = *fd;
        else
                closer_close(*fd);      /* the entry's fd stands for this one */
        *fd = -1;
        *ret = a;
        return 0;
}

int alloc_get_vmm_as(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                     const uint8_t key[PROTO_ALLOC_KEY_LEN], int *fd, uint64_t size, uint32_t uid,
                     struct alloc **ret)
{
        return get_keyed(T, PROTO_KIND_CUDA_VMM, device, key, fd, size, uid, ret);
}

int alloc_get_pool_entry(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                         const uint8_t pool_key[PROTO_ALLOC_KEY_LEN], int *fd, uint32_t uid,
                         struct alloc **ret)
{
        return get_keyed(T, ALLOC_KIND_POOL, device, pool_key, fd, 0, uid, ret);
}

int alloc_get_pool_ptr(struct alloc_table *T, struct alloc *pool,
                       const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t buffer_id,
                       uint64_t size, struct alloc **ret)
{
        struct key k = { .kind = PROTO_KIND_CUDA_POOL, .buffer_id = buffer_id };
        struct alloc *a;
        bool created;
        int r;

        memcpy(k.device, pool->device, PROTO_UUID_LEN);
        memcpy(k.handle, handle, PROTO_IPC_HANDLE_LEN);
        r = get(T, &k, size, false, ALLOC_UID_NOBODY, &a, &created);
        if (r < 0)
                return r;
        if (created) {
                a->pool = pool;
                pool->regs++;           /* the pointer's own reference */
        } else if (a->pool != pool) {
                alloc_put(T, a);
                return -EINVAL;
        }
        *ret = a;
        return 0;
}

int alloc_get_pool(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                   const uint8_t pool_key[PROTO_ALLOC_KEY_LEN], int *fd,
                   const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t buffer_id, uint64_t size,
                   uint32_t uid, struct alloc **ret)
{
        struct alloc *pool;
        int r, pfd = *fd;

        r = alloc_get_pool_entry(T, device, pool_key, &pfd, uid, &pool);
        if (r < 0)
                return r;
        /* The fd went to the pool's entry, or was closed as its duplicate. */
        *fd = -1;
        r = alloc_get_pool_ptr(T, pool, handle, buffer_id, size, ret);
        alloc_put(T, pool);             /* the pointer holds its own */
        return r;
}

int alloc_hold_add(struct alloc *a, void *h)
{
        void **p;

        for (uint32_t i = 0; i < a->n_holders; i++)
                if (a->holders[i] == h)
                        return 0;       /* holds it already */
        if (a->n_holders == a->cap_holders) {
                uint32_t cap = a->cap_holders ? a->cap_holders * 2 : 4;
                p = realloc(a->holders, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                a->holders = p;
                a->cap_holders = cap;
        }
        a->holders[a->n_holders++] = h;
        return 1;
}

bool alloc_hold_drop(struct alloc *a, void *h)
{
        for (uint32_t i = 0; i < a->n_holders; i++)
                if (a->holders[i] == h) {
                        a->holders[i] = a->holders[--a->n_holders];
                        return a->n_holders == 0 && a->regs == 0;
                }
        return false;
}

void alloc_put_ended(struct alloc_table *T, struct alloc *a)
{
        assert(a->regs == 0 && a->n_holders == 0);
        alloc_destroy(T, a);
}

void alloc_put(struct alloc_table *T, struct alloc *a)
{
        if (!a)
                return;
        assert(a->regs > 0);
        if (--a->regs == 0 && a->n_holders == 0)
                alloc_destroy(T, a);
}

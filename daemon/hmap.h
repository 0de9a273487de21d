/* hmap.h: a small intrusive hash table.
 *
 * Nodes are embedded in the caller's structs and carry their full 64-bit
 * hash, so growing never calls back into the caller.  Buckets are a power of
 * two and double when the table holds more entries than buckets.  Lookups
 * walk one bucket: the caller compares keys itself, for example
 *
 *         for (n = hmap_bucket(h, hash); n; n = n->next)
 *                 if (n->hash == hash && equal(container_of(n, ...), key))
 *
 * String keys are hashed with SipHash-1-3 under a random per-process key, so
 * a client cannot choose names that all fall into one bucket. */
#ifndef GPUIPCD_HMAP_H
#define GPUIPCD_HMAP_H

#include <stddef.h>
#include <stdint.h>

#ifndef container_of
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#endif

struct hmap_node {
        struct hmap_node *next;
        uint64_t hash;
};

struct hmap {
        struct hmap_node **buckets;
        size_t mask;            /* buckets - 1; 0 before the first insert */
        size_t n;
};

void hmap_init(struct hmap *h);
/* Frees the bucket array; the nodes belong to the caller. */
void hmap_free(struct hmap *h);
/* Links node under hash.  -ENOMEM only when no bucket array exists at all;
 * a failed growth just leaves longer chains. */
int hmap_insert(struct hmap *h, struct hmap_node *node, uint64_t hash);
void hmap_remove(struct hmap *h, struct hmap_node *node);
/* Visits every node of h, bucket by bucket.  The body may remove (and
 * free) n, since next is read first; it must not insert into h, and a
 * `break` leaves only the current bucket. */
#define hmap_for_each_safe(n, next, h)                                                  \
        for (size_t hmap_b_ = 0; (h)->buckets && hmap_b_ <= (h)->mask; hmap_b_++)       \
                for ((n) = (h)->buckets[hmap_b_]; (n) && ((next) = (n)->next, 1);       \
                     (n) = (next))

/* First node of the bucket that hash falls into, or NULL. */
struct hmap_node *hmap_bucket(const struct hmap *h, uint64_t hash);
/* For a table of uint keys inserted under hmap_hash_u64(key): the node of
 * key, or NULL.  That hash is a bijection, so a node's hash is its key. */
struct hmap_node *hmap_find_u64(const struct hmap *h, uint64_t key);

uint64_t hmap_hash_str(const void *s, size_t len);
uint64_t hmap_hash_u64(uint64_t v);

#endif

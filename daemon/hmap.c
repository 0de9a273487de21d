/* hmap.c: intrusive chained hash table and its hash functions. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "hmap.h"

#define HMAP_MIN_BUCKETS 16u

void hmap_init(struct hmap *h)
{
        h->buckets = NULL;
        h->mask = 0;
        h->n = 0;
}

void hmap_free(struct hmap *h)
{
        if (!h)
                return;
        free(h->buckets);
        hmap_init(h);
}

static int hmap_resize(struct hmap *h, size_t nb)
{
        struct hmap_node **b = calloc(nb, sizeof(*b));

        if (!b)
                return -ENOMEM;
        if (h->buckets) {
                for (size_t i = 0; i <= h->mask; i++) {
                        struct hmap_node *n = h->buckets[i], *next;
                        for (; n; n = next) {
                                next = n->next;
                                n->next = b[n->hash & (nb - 1)];
                                b[n->hash & (nb - 1)] = n;
                        }
                }
                free(h->buckets);
        }
        h->buckets = b;
        h->mask = nb - 1;
        return 0;
}

int hmap_insert(struct hmap *h, struct hmap_node *node, uint64_t hash)
{
        struct hmap_node **head;

        if (!h->buckets) {
                int r = hmap_resize(h, HMAP_MIN_BUCKETS);
                if (r < 0)
                        return r;
        } else if (h->n >= h->mask + 1 && h->mask < (SIZE_MAX >> 2)) {
                (void)hmap_resize(h, (h->mask + 1) * 2);
        }
        node->hash = hash;
        head = &h->buckets[hash & h->mask];
        node->next = *head;
        *head = node;
        h->n++;
        return 0;
}

void hmap_remove(struct hmap *h, struct hmap_node *node)
{
        struct hmap_node **pp;

        if (!h->buckets)
                return;
        for (pp = &h->buckets[node->hash & h->mask]; *pp; pp = &(*pp)->next)
                if (*pp == node) {
                        *pp = node->next;
                        node->next = NULL;
                        h->n--;
                        return;
                }
}

struct hmap_node *hmap_bucket(const struct hmap *h, uint64_t hash)
{
        return h->buckets ? h->buckets[hash & h->mask] : NULL;
}

struct hmap_node *hmap_find_u64(const struct hmap *h, uint64_t key)
{
        uint64_t hash = hmap_hash_u64(key);

        for (struct hmap_node *n = hmap_bucket(h, hash); n; n = n->next)
                if (n->hash == hash)
                        return n;
        return NULL;
}

/* ---- SipHash-1-3 ---------------------------------------------------------- */

static uint64_t sip_key[2];
static bool sip_keyed;

static void sip_init_key(void)
{
        if (getrandom(sip_key, sizeof(sip_key), GRND_NONBLOCK) != (ssize_t)sizeof(sip_key)) {
                /* Early boot without entropy: still better than a fixed key. */
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                sip_key[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
                sip_key[1] = (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&sip_key;
        }
        sip_keyed = true;
}

static inline uint64_t rotl(uint64_t x, int b)
{
        return (x << b) | (x >> (64 - b));
}

#define SIPROUND(v0, v1, v2, v3) do {                                    \
                v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32); \
                v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;                    \
                v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;                    \
                v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32); \
        } while (0)

uint64_t hmap_hash_str(const void *s, size_t len)
{
        const uint8_t *p = s;
        uint64_t v0, v1, v2, v3, m, b = (uint64_t)len << 56;
        size_t i, full = len & ~(size_t)7;

        if (!sip_keyed)
                sip_init_key();
        v0 = sip_key[0] ^ 0x736f6d6570736575ull;
        v1 = sip_key[1] ^ 0x646f72616e646f6dull;
        v2 = sip_key[0] ^ 0x6c7967656e657261ull;
        v3 = sip_key[1] ^ 0x7465646279746573ull;
        for (i = 0; i < full; i += 8) {
                memcpy(&m, p + i, 8);   /* little-endian hosts only matter for speed */
                v3 ^= m;
                SIPROUND(v0, v1, v2, v3);
                v0 ^= m;
        }
        for (size_t k = 0; i + k < len; k++)
                b |= (uint64_t)p[i + k] << (8 * k);
        v3 ^= b;
        SIPROUND(v0, v1, v2, v3);
        v0 ^= b;
        v2 ^= 0xff;
        SIPROUND(v0, v1, v2, v3);
        SIPROUND(v0, v1, v2, v3);
        SIPROUND(v0, v1, v2, v3);
        return v0 ^ v1 ^ v2 ^ v3;
}

/* The splitmix64 finaliser: sequential ids spread over all buckets. */
uint64_t hmap_hash_u64(uint64_t v)
{
        v ^= v >> 30;
        v *= 0xbf58476d1ce4e5b9ull;
        v ^= v >> 27;
        v *= 0x94d049bb133111ebull;
        v ^= v >> 31;
        return v;
}

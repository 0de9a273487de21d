/* test_registry.c: the daemon's registry and hash table, without sockets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "hmap.h"
#include "registry.h"

/* ---- hmap ---------------------------------------------------------------- */

struct item {
        struct hmap_node node;
        uint64_t key;
};

Test(hmap, grows_and_finds_100k)
{
        enum { N = 100000 };
        struct item *items = calloc(N, sizeof(*items));
        struct hmap h;

        cr_assert_not_null(items);
        hmap_init(&h);
        for (uint64_t i = 0; i < N; i++) {
                items[i].key = i * 7919;
                cr_assert_eq(hmap_insert(&h, &items[i].node, hmap_hash_u64(items[i].key)), 0);
        }
        cr_assert_eq(h.n, N);
        /* Load factor stays at or below one after growth. */
        cr_assert_geq(h.mask + 1, (size_t)N);
        for (uint64_t i = 0; i < N; i++) {
                uint64_t key = i * 7919, hash = hmap_hash_u64(key);
                struct item *found = NULL;
                for (struct hmap_node *n = hmap_bucket(&h, hash); n; n = n->next)
                        if (n->hash == hash && container_of(n, struct item, node)->key == key)
                                found = container_of(n, struct item, node);
                cr_assert_eq(found, &items[i], "key %llu", (unsigned long long)key);
        }
        for (uint64_t i = 0; i < N; i += 2)
                hmap_remove(&h, &items[i].node);
        cr_assert_eq(h.n, N / 2);
        for (struct hmap_node *n = hmap_bucket(&h, hmap_hash_u64(0)); n; n = n->next)
                cr_assert_neq(container_of(n, struct item, node), &items[0]);
        hmap_free(&h);
        free(items);
}

Test(hmap, find_u64_by_key_alone)
{
        struct item items[64];
        struct hmap h;

        hmap_init(&h);
        cr_expect_null(hmap_find_u64(&h, 1), "an empty table");
        for (uint64_t i = 0; i < 64; i++) {
                items[i].key = i << 32 | i;
                cr_assert_eq(hmap_insert(&h, &items[i].node, hmap_hash_u64(items[i].key)), 0);
        }
        for (uint64_t i = 0; i < 64; i++)
                cr_expect_eq(hmap_find_u64(&h, i << 32 | i), &items[i].node);
        cr_expect_null(hmap_find_u64(&h, 64ull << 32 | 64));
        cr_expect_null(hmap_find_u64(&h, 1), "keys that differ by one bit");
        hmap_remove(&h, &items[5].node);
        cr_expect_null(hmap_find_u64(&h, 5ull << 32 | 5));
        hmap_free(&h);
}

Test(hmap, string_hash_depends_on_every_byte)
{
        cr_assert_eq(hmap_hash_str("spark/a", 7), hmap_hash_str("spark/a", 7));
        cr_assert_neq(hmap_hash_str("spark/a", 7), hmap_hash_str("spark/b", 7));
        cr_assert_neq(hmap_hash_str("abcdefgh1", 9), hmap_hash_str("abcdefgh2", 9));
        cr_assert_neq(hmap_hash_str("", 0), hmap_hash_str("\0", 1));
}

/* ---- registry fixture ---------------------------------------------------- */

#define MAX_EVENTS 64

static struct registry *R;
static struct reg_party alice, bob;
static uint64_t released_ids[MAX_EVENTS], freed_ids[MAX_EVENTS];
static unsigned n_released, n_freed;

static void on_released(struct reg *r, void *userdata)
{
        cr_assert_lt(n_released, MAX_EVENTS);
        cr_assert_eq(r->leases, 0);
        released_ids[n_released++] = r->id;
}

static void on_freed(struct reg *r, void *userdata)
{
        if (n_freed < MAX_EVENTS)
                freed_ids[n_freed] = r->id;
        n_freed++;
}

static void setup(void)
{
        static const struct registry_callbacks cb = { .released = on_released, .freed = on_freed };

        n_released = n_freed = 0;
        cr_assert_eq(registry_new(&cb, NULL, &R), 0);
        reg_party_init(&alice, 100, 1000, 1000);
        reg_party_init(&bob, 200, 2000, 2000);
}

static void teardown(void)
{
        R = registry_free(R);
}

TestSuite(registry, .init = setup, .fini = teardown);

static struct reg *add(struct reg_party *owner, const char *name, uint64_t size, bool ephemeral)
{
        struct reg_params p = {
                .name = name, .name_len = strlen(name), .kind = 0, .size = size,
                .ephemeral = ephemeral, .fd = -1, .created_ms = 1,
        };
        struct reg *r = NULL;

        cr_assert_eq(registry_add(R, owner, &p, &r), 0, "adding %s", name);
        cr_assert_not_null(r);
        return r;
}

static unsigned count_freed(uint64_t id)
{
        unsigned n = 0;
        for (unsigned i = 0; i < n_freed && i < MAX_EVENTS; i++)
                n += freed_ids[i] == id;
        return n;
}

static unsigned count_released(uint64_t id)
{
        unsigned n = 0;
        for (unsigned i = 0; i < n_released; i++)
                n += released_ids[i] == id;
        return n;
}

Test(registry, add_and_find)
{
        static const uint8_t meta[] = { 0x81, 0xa1, 'k', 0x01 };
        struct reg_params p = {
                .name = "ns/a", .name_len = 4, .size = 10, .offset = 4, .fd = 7,
                .meta = meta, .meta_len = sizeof(meta),
        };
        struct reg *a, *b;

        cr_assert_eq(registry_add(R, &alice, &p, &a), 0);
        b = add(&bob, "ns/b", 20, false);
        cr_assert_eq(a->id, 1);
        cr_assert_eq(b->id, 2);
        cr_assert_str_eq(a->name, "ns/a");
        cr_assert_eq(a->fd, 7);
        cr_assert_eq(a->offset, 4);
        cr_assert_eq(a->meta_len, sizeof(meta));
        cr_assert_eq(memcmp(a->meta, meta, sizeof(meta)), 0);
        cr_assert_eq(a->pid, 100);
        cr_assert_eq(b->uid, 2000);
        cr_assert(a->live);
        cr_assert_eq(registry_find_name(R, "ns/a", 4), a);
        cr_assert_eq(registry_find_name(R, "ns/b", 4), b);
        cr_assert_null(registry_find_name(R, "ns/c", 4));
        cr_assert_null(registry_find_name(R, "ns/", 3));
        cr_assert_eq(registry_find_id(R, 1), a);
        cr_assert_eq(registry_find_id(R, 2), b);
        cr_assert_null(registry_find_id(R, 3));
        cr_assert_eq(alice.n_live, 1);
}

Test(registry, duplicate_name_is_eexist)
{
        struct reg_params p = { .name = "x", .name_len = 1, .size = 1, .fd = -1 };
        struct reg *r = add(&alice, "x", 1, false), *r2 = NULL;

        cr_assert_eq(registry_add(R, &bob, &p, &r2), -EEXIST);
        cr_assert_null(r2);
        cr_assert_eq(registry_counters(R)->registrations, 1);
        /* The failed attempt must not consume an id. */
        r2 = add(&bob, "y", 1, false);
        cr_assert_eq(r2->id, r->id + 1);
}

Test(registry, unregister_waits_for_last_lease)
{
        struct reg *r = add(&alice, "buf", 4096, false);
        struct lease *l1, *l2;
        uint64_t id = r->id;

        cr_assert_eq(registry_lease(R, r, &bob, &l1), 0);
        cr_assert_eq(registry_lease(R, r, &bob, &l2), 0);
        cr_assert_eq(r->leases, 2);
        cr_assert_eq(registry_unregister(R, r), 0);
        cr_assert_null(registry_find_name(R, "buf", 3));
        cr_assert_eq(registry_find_id(R, id), r, "unregistered but leased stays visible by id");
        cr_assert_not(r->live);
        cr_assert_eq(registry_unregister(R, r), -ENOENT);
        cr_assert_eq(n_freed, 0);

        cr_assert_eq(registry_release(R, &bob, l1->id), 0);
        cr_assert_eq(n_released, 0);
        cr_assert_eq(n_freed, 0);
        cr_assert_eq(registry_release(R, &bob, l2->id), 0);
        cr_assert_eq(count_released(id), 1);
        cr_assert_eq(count_freed(id), 1);
        cr_assert_null(registry_find_id(R, id));
        cr_assert_eq(registry_counters(R)->registrations, 0);
        cr_assert_eq(registry_counters(R)->leases, 0);
        cr_assert_eq(registry_counters(R)->bytes[0], 0);
}

Test(registry, released_once_per_transition)
{
        struct reg *r = add(&alice, "buf", 1, false);
        struct lease *l;

        for (int i = 0; i < 3; i++) {
                cr_assert_eq(registry_lease(R, r, &bob, &l), 0);
                cr_assert_eq(registry_release(R, &bob, l->id), 0);
                cr_assert_eq(n_released, (unsigned)i + 1);
        }
        cr_assert_eq(n_freed, 0, "a live registration is not freed at 0 leases");
        cr_assert_eq(registry_unregister(R, r), 0);
        cr_assert_eq(n_freed, 1);
        cr_assert_eq(n_released, 3);
}

Test(registry, name_reuse_while_old_one_is_leased)
{
        struct reg *old = add(&alice, "n", 1, false), *neu;
        struct lease *l;
        uint64_t old_id = old->id;

        cr_assert_eq(registry_lease(R, old, &bob, &l), 0);
        cr_assert_eq(registry_unregister(R, old), 0);
        neu = add(&alice, "n", 2, false);
        cr_assert_neq(neu->id, old_id);
        cr_assert_eq(registry_find_name(R, "n", 1), neu);
        cr_assert_eq(registry_find_id(R, old_id), old);
        cr_assert_eq(registry_counters(R)->registrations, 2);
        cr_assert_eq(registry_counters(R)->live, 1);
        cr_assert_eq(registry_release(R, &bob, l->id), 0);
        cr_assert_eq(count_freed(old_id), 1);
        cr_assert_eq(registry_find_name(R, "n", 1), neu);
        cr_assert_eq(count_freed(neu->id), 0);
}

Test(registry, owner_gone_removes_ephemeral_orphans_durable)
{
        struct reg *eph = add(&alice, "e", 1, true), *dur = add(&alice, "d", 1, false);
        struct reg *leased_eph = add(&alice, "le", 1, true);
        struct lease *l, *own;
        uint64_t eph_id = eph->id;

        cr_assert_eq(registry_lease(R, leased_eph, &bob, &l), 0);
        cr_assert_eq(registry_lease(R, dur, &alice, &own), 0);
        registry_party_gone(R, &alice);

        cr_assert_eq(count_freed(eph_id), 1);
        cr_assert_null(registry_find_name(R, "e", 1));
        cr_assert_eq(registry_find_name(R, "d", 1), dur);
        cr_assert_null(dur->owner);
        cr_assert(dur->live);
        cr_assert_eq(dur->leases, 0, "alice's own lease was dropped");
        cr_assert_eq(n_released, 0, "no released event to a gone owner");
        cr_assert_null(registry_find_name(R, "le", 2));
        cr_assert_eq(registry_find_id(R, leased_eph->id), leased_eph);
        cr_assert_not(leased_eph->live);
        cr_assert_eq(alice.n_leases, 0);
        cr_assert_null(alice.leases);
        cr_assert_null(alice.owned);
        cr_assert_eq(registry_release(R, &bob, l->id), 0);
        cr_assert_eq(n_released, 0);
        cr_assert_eq(n_freed, 2);
}

Test(registry, lease_ids_unique_and_owned_by_holder)
{
        struct reg *r = add(&alice, "buf", 1, false);
        struct lease *l[50];

        for (int i = 0; i < 50; i++) {
                cr_assert_eq(registry_lease(R, r, i % 2 ? &alice : &bob, &l[i]), 0);
                for (int j = 0; j < i; j++)
                        cr_assert_neq(l[i]->id, l[j]->id);
        }
        cr_assert_eq(alice.n_leases, 25);
        cr_assert_eq(bob.n_leases, 25);
        cr_assert_eq(registry_release(R, &alice, l[0]->id), -ENOENT, "bob's lease");
        cr_assert_eq(registry_release(R, &bob, 999999), -ENOENT);
        cr_assert_eq(r->leases, 50);
        uint64_t first = l[0]->id;
        cr_assert_eq(registry_release(R, &bob, first), 0);
        cr_assert_eq(registry_release(R, &bob, first), -ENOENT, "released twice");
        registry_party_gone(R, &bob);
        cr_assert_eq(r->leases, 25);
        cr_assert_eq(registry_counters(R)->leases, 25);
}

Test(registry, pin_keeps_registration_past_last_lease)
{
        struct reg *r = add(&alice, "p", 1, false);
        struct lease *l;
        uint64_t id = r->id;

        cr_assert_eq(registry_lease(R, r, &bob, &l), 0);
        registry_pin(r);
        cr_assert_eq(registry_release(R, &bob, l->id), 0);
        cr_assert_eq(registry_unregister(R, r), 0);
        cr_assert_eq(n_freed, 0, "pinned");
        cr_assert_null(registry_find_id(R, id), "pinned only: not visible");
        registry_unpin(R, r);
        cr_assert_eq(count_freed(id), 1);
}

Test(registry, lease_undo_is_quiet)
{
        struct reg *r = add(&alice, "q", 1, false);
        struct lease *l;

        cr_assert_eq(registry_lease(R, r, &bob, &l), 0);
        registry_lease_undo(R, l);
        cr_assert_eq(r->leases, 0);
        cr_assert_eq(n_released, 0);
}

static unsigned collect(const char *prefix, uint64_t after, uint64_t *ids, unsigned max)
{
        unsigned n = 0;
        for (const struct reg *r = registry_iter(R, NULL, after, prefix, strlen(prefix));
             r && n < max; r = registry_iter(R, r, 0, prefix, strlen(prefix)))
                ids[n++] = r->id;
        return n;
}

Test(registry, list_order_prefix_and_cursor)
{
        uint64_t ids[16];
        struct reg *gone;

        add(&alice, "spark/app-4/x", 1, false);         /* 1 */
        add(&alice, "spark/app-42/x", 1, false);        /* 2 */
        gone = add(&alice, "spark/app-4", 1, false);    /* 3 */
        add(&bob, "other/y", 1, false);                 /* 4 */
        add(&bob, "spark/app-4/z", 1, false);           /* 5 */

        cr_assert_eq(collect("", 0, ids, 16), 5);
        for (unsigned i = 0; i < 5; i++)
                cr_assert_eq(ids[i], i + 1);
        cr_assert_eq(collect("spark/app-4", 0, ids, 16), 3);
        cr_assert_eq(ids[0], 1);
        cr_assert_eq(ids[1], 3);
        cr_assert_eq(ids[2], 5);
        cr_assert_eq(collect("spark/app-4/", 0, ids, 16), 3);
        cr_assert_eq(collect("spark", 2, ids, 16), 2);
        cr_assert_eq(ids[0], 3);
        cr_assert_eq(ids[1], 5);

        /* A cursor whose registration is gone still pages correctly, and
         * unregistered ones are not listed. */
        cr_assert_eq(registry_unregister(R, gone), 0);
        cr_assert_eq(collect("", 3, ids, 16), 2);
        cr_assert_eq(ids[0], 4);
        cr_assert_eq(collect("", 2, ids, 16), 2);
        cr_assert_eq(ids[0], 4);
        cr_assert_eq(collect("", 5, ids, 16), 0);
        cr_assert_eq(collect("", 100, ids, 16), 0);
        cr_assert_eq(collect("nope", 0, ids, 16), 0);
}

Test(registry, counters)
{
        struct reg *a = add(&alice, "a", 100, false);
        struct lease *l;

        add(&bob, "b", 23, true);
        cr_assert_eq(registry_counters(R)->registrations, 2);
        cr_assert_eq(registry_counters(R)->live, 2);
        cr_assert_eq(registry_counters(R)->bytes[0], 123);
        cr_assert_eq(registry_lease(R, a, &bob, &l), 0);
        cr_assert_eq(registry_counters(R)->leases, 1);
        registry_party_gone(R, &bob);
        cr_assert_eq(registry_counters(R)->leases, 0);
        cr_assert_eq(registry_counters(R)->registrations, 1);
        cr_assert_eq(registry_counters(R)->bytes[0], 100);
        cr_assert_eq(registry_unregister(R, a), 0);
        cr_assert_eq(registry_counters(R)->registrations, 0);
        cr_assert_eq(registry_counters(R)->bytes[0], 0);
}

Test(registry, many_names)
{
        char name[32];

        for (int i = 0; i < 20000; i++) {
                snprintf(name, sizeof(name), "ns/%d", i);
                add(i % 2 ? &alice : &bob, name, 1, i % 3 == 0);
        }
        for (int i = 0; i < 20000; i += 997) {
                snprintf(name, sizeof(name), "ns/%d", i);
                struct reg *r = registry_find_name(R, name, strlen(name));
                cr_assert_not_null(r);
                cr_assert_eq(r->id, (uint64_t)i + 1);
        }
        registry_party_gone(R, &alice);
        registry_party_gone(R, &bob);
        cr_assert_eq(registry_counters(R)->live, 20000 - 6667);
        cr_assert_eq(n_freed, 6667);
}

Test(registry, free_runs_freed_for_everything)
{
        struct reg *r = add(&alice, "a", 1, false);
        struct lease *l;

        add(&alice, "b", 1, false);
        cr_assert_eq(registry_lease(R, r, &bob, &l), 0);
        cr_assert_eq(registry_unregister(R, r), 0);
        R = registry_free(R);
        cr_assert_eq(n_freed, 2);
}

/* ---- restore: given ids, ownerless adds, moving a party ------------------ */

static struct reg *add_id(struct reg_party *owner, const char *name, uint64_t id)
{
        struct reg_params p = {
                .name = name, .name_len = strlen(name), .size = 1, .fd = -1, .id = id,
        };
        struct reg *r = NULL;

        cr_assert_eq(registry_add(R, owner, &p, &r), 0, "adding %s as %llu", name,
                     (unsigned long long)id);
        return r;
}

Test(registry, add_with_id_keeps_it_and_raises_next)
{
        uint64_t next_id, next_lease;
        struct reg *r;

        r = add_id(&alice, "a", 10);
        cr_assert_eq(r->id, 10);
        cr_assert_eq(registry_find_id(R, 10), r);
        registry_next_ids(R, &next_id, &next_lease);
        cr_assert_eq(next_id, 11);
        cr_assert_eq(next_lease, 1);
        cr_assert_eq(add(&alice, "b", 1, false)->id, 11);
        /* A lower given id is kept and does not lower the counter. */
        r = add_id(&bob, "c", 5);
        cr_assert_eq(r->id, 5);
        cr_assert_eq(add(&bob, "d", 1, false)->id, 12);
        /* The list stays in order of addition, not of id. */
        cr_assert_eq(registry_first(R)->id, 10);
}

Test(registry, add_with_taken_id_is_eexist)
{
        struct reg_params p = { .name = "b", .name_len = 1, .size = 1, .fd = -1, .id = 7 };
        struct reg *r = add_id(&alice, "a", 7), *r2 = NULL;
        struct lease *l;
        uint64_t next_id, next_lease;

        cr_assert_eq(registry_add(R, &bob, &p, &r2), -EEXIST);
        cr_assert_null(r2);
        cr_assert_null(registry_find_name(R, "b", 1), "the name was not taken");
        cr_assert_eq(registry_find_id(R, 7), r);
        cr_assert_eq(registry_counters(R)->registrations, 1);
        cr_assert_eq(bob.n_live, 0);
        registry_next_ids(R, &next_id, &next_lease);
        cr_assert_eq(next_id, 8);

        /* Unregistered but still leased: the id is still taken. */
        cr_assert_eq(registry_lease(R, r, &bob, &l), 0);
        cr_assert_eq(registry_unregister(R, r), 0);
        cr_assert_eq(registry_add(R, &bob, &p, &r2), -EEXIST);
        cr_assert_eq(registry_release(R, &bob, l->id), 0);
        cr_assert_eq(count_freed(7), 1);
        /* Freed: the id may be given again (restore decides, not the registry). */
        cr_assert_eq(add_id(&bob, "b", 7)->id, 7);
}

Test(registry, ownerless_add_takes_params_credentials)
{
        struct reg_params p = {
                .name = "o", .name_len = 1, .size = 3, .fd = -1, .id = 4,
                .pid = 4242, .uid = 1234, .gid = 5678,
        };
        struct reg *r;

        cr_assert_eq(registry_add(R, NULL, &p, &r), 0);
        cr_assert_null(r->owner);
        cr_assert_eq(r->pid, 4242);
        cr_assert_eq(r->uid, 1234);
        cr_assert_eq(r->gid, 5678);
        cr_assert(r->live);
        /* With an owner, the owner's credentials win over the params'. */
        p.name = "w";
        p.id = 0;
        cr_assert_eq(registry_add(R, &alice, &p, &r), 0);
        cr_assert_eq(r->pid, 100);
        cr_assert_eq(r->uid, 1000);
        cr_assert_eq(r->gid, 1000);
        cr_assert_eq(r->id, 5);
        cr_assert_eq(alice.n_live, 1);
}

Test(registry, lease_with_id)
{
        struct reg *r = add(&alice, "l", 1, false);
        struct lease *l, *l2 = NULL;
        uint64_t next_id, next_lease;

        cr_assert_eq(registry_lease_id(R, r, &bob, 40, &l), 0);
        cr_assert_eq(l->id, 40);
        cr_assert_eq(l->holder, &bob);
        cr_assert_eq(l->reg, r);
        cr_assert_eq(registry_find_lease(R, 40), l);
        cr_assert_eq(bob.n_leases, 1);
        cr_assert_eq(r->leases, 1);
        registry_next_ids(R, &next_id, &next_lease);
        cr_assert_eq(next_lease, 41);

        cr_assert_eq(registry_lease_id(R, r, &alice, 40, &l2), -EEXIST);
        cr_assert_null(l2);
        cr_assert_eq(r->leases, 1);
        cr_assert_eq(alice.n_leases, 0);
        cr_assert_eq(registry_counters(R)->leases, 1);

        cr_assert_eq(registry_lease(R, r, &alice, &l2), 0);
        cr_assert_eq(l2->id, 41);
        /* A lower given id is kept; the counter does not go back. */
        cr_assert_eq(registry_lease_id(R, r, &alice, 3, &l2), 0);
        cr_assert_eq(l2->id, 3);
        cr_assert_eq(registry_lease(R, r, &alice, &l2), 0);
        cr_assert_eq(l2->id, 42);
        cr_assert_eq(registry_release(R, &bob, 40), 0);
        cr_assert_null(registry_find_lease(R, 40));
        cr_assert_eq(r->leases, 3);
}

static bool owns(const struct reg_party *p, const struct reg *r)
{
        for (const struct reg *o = p->owned; o; o = o->own_next)
                if (o == r)
                        return true;
        return false;
}

static unsigned n_owned(const struct reg_party *p)
{
        unsigned n = 0;

        for (const struct reg *o = p->owned; o; o = o->own_next) {
                cr_assert_eq(o->owner, p);
                cr_assert(o->own_next == NULL || o->own_next->own_prev == o);
                n++;
        }
        return n;
}

static unsigned n_held(const struct reg_party *p)
{
        unsigned n = 0;

        for (const struct lease *l = p->leases; l; l = l->next) {
                cr_assert_eq(l->holder, p);
                cr_assert(l->next == NULL || l->next->prev == l);
                n++;
        }
        return n;
}

Test(registry, party_move_hands_over_everything)
{
        struct reg_party carol;
        struct reg *dur, *eph, *gone, *bobs, *carols;
        struct lease *l1, *l2, *lc, *lb;
        uint64_t eph_id, gone_id;

        /* carol already has something of her own: the lists are merged. */
        reg_party_init(&carol, 100, 1000, 1000);
        carols = add(&carol, "carol/x", 1, false);
        cr_assert_eq(registry_lease(R, carols, &carol, &lc), 0);

        dur = add(&alice, "a/dur", 1, false);
        eph = add(&alice, "a/eph", 1, true);
        gone = add(&alice, "a/gone", 1, false);         /* unregistered, leased by bob */
        bobs = add(&bob, "b/x", 1, false);
        eph_id = eph->id;
        gone_id = gone->id;
        cr_assert_eq(registry_lease(R, bobs, &alice, &l1), 0);
        cr_assert_eq(registry_lease(R, dur, &alice, &l2), 0);
        cr_assert_eq(registry_lease(R, gone, &bob, &lb), 0);
        cr_assert_eq(registry_unregister(R, gone), 0);
        cr_assert_eq(alice.n_live, 2);
        cr_assert_eq(alice.n_leases, 2);

        registry_party_move(R, &alice, &carol);

        cr_assert_null(alice.owned);
        cr_assert_null(alice.leases);
        cr_assert_eq(alice.n_live, 0);
        cr_assert_eq(alice.n_leases, 0);
        cr_assert_eq(carol.n_live, 3);
        cr_assert_eq(carol.n_leases, 3);
        cr_assert_eq(n_owned(&carol), 4, "carol/x, a/dur, a/eph and a/gone");
        cr_assert_eq(n_held(&carol), 3);
        cr_assert(owns(&carol, carols));
        cr_assert(owns(&carol, gone));
        cr_assert_eq(dur->owner, &carol);
        cr_assert_eq(eph->owner, &carol);
        cr_assert_eq(gone->owner, &carol);
        cr_assert_eq(l1->holder, &carol);
        cr_assert_eq(l2->holder, &carol);
        cr_assert_eq(lb->holder, &bob, "other parties' leases stay");
        cr_assert_eq(bobs->owner, &bob);
        cr_assert_eq(registry_counters(R)->leases, 4);
        cr_assert_eq(registry_counters(R)->live, 4);
        cr_assert_eq(n_freed, 0);

        /* The moved leases are released through their new holder. */
        cr_assert_eq(registry_release(R, &alice, l2->id), -ENOENT);
        cr_assert_eq(registry_release(R, &carol, l2->id), 0);
        cr_assert_eq(count_released(dur->id), 1, "released goes to the owner, carol now");
        cr_assert_eq(carol.n_leases, 2);

        /* The old party is empty: its end changes nothing. */
        registry_party_gone(R, &alice);
        cr_assert_eq(n_freed, 0);
        cr_assert_eq(registry_counters(R)->live, 4);
        cr_assert_eq(registry_counters(R)->leases, 3);

        /* The new one ends as usual: its ephemeral registration goes, its
         * durable ones are orphaned, its leases dropped. */
        registry_party_gone(R, &carol);
        cr_assert_eq(count_freed(eph_id), 1);
        cr_assert_null(registry_find_name(R, "a/eph", 5));
        cr_assert_eq(registry_find_name(R, "a/dur", 5), dur);
        cr_assert_null(dur->owner);
        cr_assert_null(carols->owner);
        cr_assert_null(gone->owner);
        cr_assert_eq(count_freed(gone_id), 0, "bob still leases it");
        cr_assert_null(carol.owned);
        cr_assert_null(carol.leases);
        cr_assert_eq(carol.n_live, 0);
        cr_assert_eq(carol.n_leases, 0);
        cr_assert_eq(bobs->leases, 0);
        cr_assert_eq(registry_counters(R)->leases, 1);
        cr_assert_eq(registry_counters(R)->live, 3);
        cr_assert_eq(registry_release(R, &bob, lb->id), 0);
        cr_assert_eq(count_freed(gone_id), 1);
        cr_assert_eq(count_released(gone_id), 0, "no owner to tell");
}

Test(registry, party_move_of_empty_party)
{
        struct reg_party carol;
        struct reg *r = add(&bob, "x", 1, false);

        reg_party_init(&carol, 1, 2, 3);
        registry_party_move(R, &alice, &carol);
        cr_assert_null(carol.owned);
        cr_assert_null(carol.leases);
        cr_assert_eq(carol.n_live, 0);
        cr_assert_eq(carol.n_leases, 0);
        cr_assert_eq(r->owner, &bob);
}

Test(registry, raise_ids_never_lowers)
{
        uint64_t next_id, next_lease;

        registry_raise_ids(R, 100, 50);
        registry_next_ids(R, &next_id, &next_lease);
        cr_assert_eq(next_id, 100);
        cr_assert_eq(next_lease, 50);
        registry_raise_ids(R, 10, 0);
        registry_raise_ids(R, 0, 49);
        registry_next_ids(R, &next_id, &next_lease);
        cr_assert_eq(next_id, 100);
        cr_assert_eq(next_lease, 50);
        registry_raise_ids(R, 0, 60);
        registry_next_ids(R, &next_id, &next_lease);
        cr_assert_eq(next_id, 100);
        cr_assert_eq(next_lease, 60);

        struct reg *r = add(&alice, "r", 1, false);
        struct lease *l;
        cr_assert_eq(r->id, 100);
        cr_assert_eq(registry_lease(R, r, &bob, &l), 0);
        cr_assert_eq(l->id, 60);
        /* Ids already handed out are above a smaller raise. */
        registry_raise_ids(R, 50, 30);
        cr_assert_eq(add(&alice, "s", 1, false)->id, 101);
}

Test(registry, first_walks_all_including_unregistered_leased)
{
        struct reg *a = add(&alice, "a", 1, false), *b = add(&alice, "b", 1, false);
        struct reg *c = add(&bob, "c", 1, true), *d = add(&bob, "d", 1, false);
        struct lease *l;
        uint64_t seen[8];
        unsigned n = 0;

        cr_assert_eq(registry_lease(R, b, &bob, &l), 0);
        cr_assert_eq(registry_unregister(R, b), 0);     /* leased: stays */
        cr_assert_eq(registry_unregister(R, d), 0);     /* freed */
        (void)c;
        for (const struct reg *r = registry_first(R); r; r = r->next) {
                cr_assert_lt(n, 8);
                seen[n++] = r->id;
        }
        cr_assert_eq(n, 3);
        cr_assert_eq(seen[0], a->id);
        cr_assert_eq(seen[1], b->id);
        cr_assert_eq(seen[2], c->id);
        cr_assert_not(registry_first(R)->next->live);

        cr_assert_eq(registry_release(R, &bob, l->id), 0);
        cr_assert_eq(registry_first(R), a);
        cr_assert_eq(registry_first(R)->next->id, c->id);
        registry_party_gone(R, &bob);   /* c is ephemeral */
        cr_assert_eq(registry_first(R), a);
        cr_assert_null(registry_first(R)->next);
        cr_assert_eq(registry_unregister(R, a), 0);
        cr_assert_null(registry_first(R));
}

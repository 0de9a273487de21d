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

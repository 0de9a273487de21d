/* test_lib_map.c: the library's per-process cache of buffer mappings and
 * its lookup hints (client/lib/map.c), linked from the library's objects. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "internal.h"

static int memfd_of(size_t size, char fill)
{
        int fd = memfd_create("map", MFD_CLOEXEC);
        char *p;

        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, (off_t)size), 0);
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        cr_assert_neq(p, MAP_FAILED);
        memset(p, fill, size);
        munmap(p, size);
        return fd;
}

/* Whether [p, p + len) is mapped in this process. */
static bool mapped(const void *p, size_t len)
{
        unsigned char vec[16];

        cr_assert_leq(len, 16 * 4096);
        return mincore((void *)p, len, vec) == 0;
}

Test(map, one_mapping_per_file_and_protection)
{
        int fd = memfd_of(8192, 'a'), fd2;
        struct gpuipc__map *m1, *m2, *m3, *w;
        uint8_t *b1, *b2, *b3, *bw;
        char path[64];

        cr_assert_eq(gpuipc__map_get(fd, false, 4096, &m1, &b1), 0);
        cr_expect_eq(b1[0], 'a');
        /* Another fd of the same file (a second lookup's): the same mapping. */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        fd2 = open(path, O_RDONLY | O_CLOEXEC);
        cr_assert_geq(fd2, 0);
        cr_assert_eq(gpuipc__map_get(fd2, false, 8192, &m2, &b2), 0);
        cr_expect_eq(m2, m1);
        cr_expect_eq(b2, b1);
        /* Writable is another mapping, of the same bytes. */
        cr_assert_eq(gpuipc__map_get(fd, true, 4096, &w, &bw), 0);
        cr_expect_neq(w, m1);
        bw[1] = 'w';
        cr_expect_eq(b1[1], 'w', "a write through one is seen through the other");
        /* The caller's fds are its own: closing them keeps the mapping. */
        close(fd);
        close(fd2);
        cr_expect_eq(b1[0], 'a');
        /* The last reference unmaps. */
        gpuipc__map_put(m1);
        cr_expect(mapped(b1, 8192), "one reference is left");
        gpuipc__map_put(m2);
        cr_expect(!mapped(b1, 8192), "the last reference is gone, and the mapping");
        gpuipc__map_put(w);
        cr_expect(!mapped(bw, 8192));
        gpuipc__map_put(NULL);
        /* A different file is a different mapping. */
        fd = memfd_of(4096, 'b');
        fd2 = memfd_of(4096, 'c');
        cr_assert_eq(gpuipc__map_get(fd, false, 4096, &m1, &b1), 0);
        cr_assert_eq(gpuipc__map_get(fd2, false, 4096, &m3, &b3), 0);
        cr_expect_neq(m3, m1);
        cr_expect(b1[0] == 'b' && b3[0] == 'c');
        gpuipc__map_put(m1);
        gpuipc__map_put(m3);
        close(fd);
        close(fd2);
}

Test(map, a_grown_file_gets_a_mapping_that_covers_it)
{
        int fd = memfd_of(4096, 'x');
        struct gpuipc__map *small, *big;
        uint8_t *bs, *bb;

        cr_assert_eq(gpuipc__map_get(fd, false, 4096, &small, &bs), 0);
        cr_expect_eq(gpuipc__map_base(small, 4096), bs);
        cr_expect_null(gpuipc__map_base(small, 4097), "it does not cover 4097 bytes");
        cr_assert_eq(ftruncate(fd, 3 * 4096), 0);
        cr_assert_eq(gpuipc__map_get(fd, false, 3 * 4096, &big, &bb), 0);
        cr_expect_neq(big, small);
        cr_expect_eq(gpuipc__map_base(big, 3 * 4096), bb);
        cr_expect_eq(bb[2 * 4096], 0, "the grown part is mapped");
        cr_expect_eq(bs[0], 'x', "the old mapping stays for its views");
        gpuipc__map_put(big);
        cr_expect(mapped(bs, 4096));
        gpuipc__map_put(small);
        close(fd);
}

Test(map, what_cannot_be_mapped)
{
        struct gpuipc__map *m = NULL;
        uint8_t *b = NULL;
        int p[2], empty = memfd_create("empty", MFD_CLOEXEC), fd = memfd_of(4096, 0);

        cr_assert_eq(pipe(p), 0);
        cr_expect_eq(gpuipc__map_get(p[0], false, 1, &m, &b), -EBADF, "a pipe");
        cr_expect_eq(gpuipc__map_get(empty, false, 0, &m, &b), -EBADF, "an empty file");
        cr_expect_eq(gpuipc__map_get(-1, false, 1, &m, &b), -EBADF);
        /* A record that claims more than the file holds: no pointer past it. */
        cr_expect_eq(gpuipc__map_get(fd, false, 4097, &m, &b), -EBADMSG);
        cr_expect_null(m);
        cr_expect_null(b);
        close(p[0]), close(p[1]), close(empty), close(fd);
}

/* ---- hints ----------------------------------------------------------------- */

struct fake_view {
        gpuipc_view v;
        gpuipc_info info;
};

static gpuipc_view *view_of(gpuipc_client *c, uint64_t lease, uint64_t id, struct gpuipc__map *m)
{
        struct fake_view *f = calloc(1, sizeof(*f));

        cr_assert_not_null(f);
        f->info.id = id;
        f->v.c = c;
        f->v.lease = lease;
        f->v.info = &f->info;
        f->v.map = m;
        f->v.epoch = c->epoch;
        return &f->v;
}

Test(map, hints_name_the_newest_view)
{
        gpuipc_client *c = calloc(1, sizeof(*c)), *other = calloc(1, sizeof(*other));
        int fd = memfd_of(4096, 'h');
        struct gpuipc__map *m, *got;
        uint8_t *b;
        uint64_t lease = 0, id = 0;
        gpuipc_view *v1, *v2;

        cr_assert(c && other);
        cr_assert_eq(gpuipc__map_get(fd, false, 4096, &m, &b), 0);
        cr_expect(!gpuipc__hint_get(c, "h/a", false, &lease, &id, &got), "no view yet");
        v1 = view_of(c, 5, 9, m);
        gpuipc__hint_add(v1, "h/a", false);
        cr_assert(gpuipc__hint_get(c, "h/a", false, &lease, &id, &got));
        cr_expect(lease == 5 && id == 9 && got == m);
        gpuipc__map_put(got);   /* the reference hint_get took */
        v2 = view_of(c, 6, 9, m);
        gpuipc__hint_add(v2, "h/a", false);
        cr_assert(gpuipc__hint_get(c, "h/a", false, &lease, &id, &got));
        cr_expect_eq(lease, 6, "the newest view");
        gpuipc__map_put(got);
        /* Only for that client, name and protection. */
        cr_expect(!gpuipc__hint_get(other, "h/a", false, &lease, &id, &got));
        cr_expect(!gpuipc__hint_get(c, "h/b", false, &lease, &id, &got));
        cr_expect(!gpuipc__hint_get(c, "h/a", true, &lease, &id, &got));
        cr_expect(!gpuipc__hint_get(c, "h/", false, &lease, &id, &got));
        gpuipc__hint_del(v2);
        cr_assert(gpuipc__hint_get(c, "h/a", false, &lease, &id, &got));
        cr_expect_eq(lease, 5, "v1 again once v2 is gone");
        gpuipc__map_put(got);
        /* A lease of an earlier epoch may name another lease now. */
        c->epoch++;
        cr_expect(!gpuipc__hint_get(c, "h/a", false, &lease, &id, &got));
        gpuipc__hint_del(v1);
        gpuipc__hint_del(v1);   /* no longer on a hint: nothing happens */
        c->epoch--;
        cr_expect(!gpuipc__hint_get(c, "h/a", false, &lease, &id, &got), "no view left");
        cr_expect(mapped(b, 4096), "hints hold no mapping of their own");
        gpuipc__map_put(m);
        cr_expect(!mapped(b, 4096), "hint_get's references were given back");
        free(v1), free(v2), free(c), free(other);
        close(fd);
}

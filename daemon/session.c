/* session.c: session tokens, the detached sessions of a restored daemon
 * and what they missed, and resuming them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "conn.h"
#include "daemon.h"
#include "log.h"
#include "session.h"

static uint64_t token_hash(const uint8_t token[PROTO_SESSION_LEN])
{
        return hmap_hash_str(token, PROTO_SESSION_LEN);
}

uint64_t session_start_time(uint32_t pid)
{
        char path[64], buf[1024], *p;
        unsigned long long v = 0;
        ssize_t n;
        FILE *f;

        if (pid == 0)
                return 0;
        snprintf(path, sizeof(path), "/proc/%" PRIu32 "/stat", pid);
        f = fopen(path, "re");
        if (!f)
                return 0;
        n = (ssize_t)fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        if (n <= 0)
                return 0;
        buf[n] = '\0';
        /* comm may hold spaces and parentheses: fields follow the last ')'.
         * p then stands on the space before field 3 (state); starttime is
         * field 22, 19 spaces further. */
        p = strrchr(buf, ')');
        if (!p)
                return 0;
        p++;
        for (int field = 3; field < 22 && p; field++)
                p = strchr(p + 1, ' ');
        if (!p || sscanf(p, " %llu", &v) != 1)
                return 0;
        return v;
}

int session_new_token(struct reg_party *p)
{
        if (getrandom(p->session, PROTO_SESSION_LEN, GRND_NONBLOCK) != (ssize_t)PROTO_SESSION_LEN)
                return -EIO;
        return 0;
}

static struct dsession *find(struct daemon *d, const uint8_t token[PROTO_SESSION_LEN])
{
        uint64_t h = token_hash(token);

        for (struct hmap_node *n = hmap_bucket(&d->detached, h); n; n = n->next) {
                struct dsession *s = container_of(n, struct dsession, node);
                if (n->hash == h && memcmp(s->party.session, token, PROTO_SESSION_LEN) == 0)
                        return s;
        }
        return NULL;
}

struct reg_party *session_detached_add(struct daemon *d, const uint8_t token[PROTO_SESSION_LEN],
                                       uint32_t pid, uint32_t uid, uint32_t gid,
                                       uint64_t start_time, int *ret_err)
{
        struct dsession *s;

        if (find(d, token)) {
                *ret_err = -EEXIST;
                return NULL;
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                *ret_err = -ENOMEM;
                return NULL;
        }
        reg_party_init(&s->party, pid, uid, gid);
        s->party.detached = true;
        memcpy(s->party.session, token, PROTO_SESSION_LEN);
        s->d = d;
        s->start_time = start_time;
        s->pidfd = -1;
        if (hmap_insert(&d->detached, &s->node, token_hash(token)) < 0) {
                free(s);
                *ret_err = -ENOMEM;
                return NULL;
        }
        d->n_detached++;
        return &s->party;
}

struct reg_party *session_detached_find(struct daemon *d, const uint8_t token[PROTO_SESSION_LEN])
{
        struct dsession *s = find(d, token);

        return s ? &s->party : NULL;
}

static void missed_free(struct session_missed *m)
{
        while (m) {
                struct session_missed *next = m->next;
                free(m);
                m = next;
        }
}

bool session_note_released(struct daemon *d, struct reg_party *p, uint64_t id,
                           const char *name, size_t len)
{
        struct dsession *s = container_of(p, struct dsession, party);
        struct session_missed *m = malloc(sizeof(*m) + len + 1);

        if (!m) {
                log_warn("out of memory: the released event of %.*s is lost for pid %u",
                         (int)len, name, p->pid);
                return false;
        }
        m->next = NULL;
        m->id = id;
        m->name_len = (uint16_t)len;
        memcpy(m->name, name, len);
        m->name[len] = '\0';
        if (s->missed_tail)
                s->missed_tail->next = m;
        else
                s->missed = m;
        s->missed_tail = m;
        if (++s->n_missed > SESSION_MISSED_MAX) {
                struct session_missed *old = s->missed;
                s->missed = old->next;
                free(old);
                s->n_missed--;
        }
        return true;
}

const struct session_missed *session_missed_of(const struct reg_party *p)
{
        return container_of(p, const struct dsession, party)->missed;
}

void session_send_missed(struct conn *c, struct session_missed *m)
{
        while (m) {
                struct session_missed *next = m->next;
                struct proto_out o;
                struct proto_map map;

                conn_pack_reg_event(&o, &map, "released", m->id, m->name, m->name_len);
                proto_map_end(&map);
                (void)conn_send(c, &o, NULL);
                proto_out_free(&o);
                free(m);
                m = next;
        }
}

static void on_poll_closed(uv_handle_t *h)
{
        struct dsession *s = container_of((uv_poll_t *)h, struct dsession, poll);

        close(s->pidfd);
        missed_free(s->missed);
        free(s);
}

/* Unlinks s; frees it now or once its poll handle is closed. */
void session_free_detached(struct daemon *d, struct dsession *s)
{
        hmap_remove(&d->detached, &s->node);
        d->n_detached--;
        if (s->pidfd >= 0) {
                uv_close((uv_handle_t *)&s->poll, on_poll_closed);
                return;
        }
        missed_free(s->missed);
        free(s);
}

bool session_resume(struct daemon *d, struct conn *c, const uint8_t token[PROTO_SESSION_LEN],
                    struct session_missed **ret_missed)
{
        struct dsession *s = find(d, token);

        *ret_missed = NULL;
        if (!s || s->party.pid != c->party.pid || s->party.uid != c->party.uid)
                return false;
        *ret_missed = s->missed;
        s->missed = s->missed_tail = NULL;
        s->n_missed = 0;
        registry_party_move(d->reg, &s->party, &c->party);
        memcpy(c->party.session, token, PROTO_SESSION_LEN);
        c->party.start_time = s->start_time;
        log_info("connection %" PRIu64 " (pid %u) resumed its session: %u registrations, "
                 "%u leases", c->id, c->party.pid, c->party.n_live, c->party.n_leases);
        session_free_detached(d, s);
        return true;
}

void session_detached_each(struct daemon *d, void (*fn)(const struct reg_party *p, void *data),
                           void *data)
{
        struct hmap_node *n, *next;

        hmap_for_each_safe(n, next, &d->detached)
                fn(&container_of(n, struct dsession, node)->party, data);
}

uint32_t session_detached_count(const struct daemon *d)
{
        return d->n_detached;
}

void session_done(struct daemon *d)
{
        struct hmap_node *n, *next;

        hmap_for_each_safe(n, next, &d->detached) {
                struct dsession *s = container_of(n, struct dsession, node);
                missed_free(s->missed);
                free(s);
        }
        hmap_free(&d->detached);
        d->n_detached = 0;
}

/* metrics_http.c: GET and HEAD /metrics over HTTP/1.0, and nothing else. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "config.h"
#include "daemon.h"
#include "list.h"
#include "listen.h"
#include "log.h"
#include "metrics.h"
#include "metrics_http.h"

struct hconn {
        struct hconn *prev, *next;
        union {
                uv_stream_t stream;
                uv_tcp_t tcp;
                uv_pipe_t pipe;
        } h;
        uv_timer_t timer;
        uv_write_t wr;
        char *out;                      /* the response, until written */
        size_t n;
        int closing;                    /* handles still to close */
        char buf[MHTTP_REQ_MAX];
};

static struct daemon *dm;
static union {
        uv_stream_t stream;
        uv_tcp_t tcp;
        uv_pipe_t pipe;
} server;
static bool listening, is_unix;
static char unix_path[CONFIG_PATH_MAX];
static struct hconn *conns;
static unsigned n_conns;

static void on_hclosed(uv_handle_t *h)
{
        struct hconn *k = h->data;

        if (--k->closing > 0)
                return;
        free(k->out);
        free(k);
}

static void hclose(struct hconn *k)
{
        if (k->closing)
                return;
        LIST_REMOVE(conns, k, prev, next);
        n_conns--;
        k->closing = 2;
        uv_close((uv_handle_t *)&k->h, on_hclosed);
        uv_close((uv_handle_t *)&k->timer, on_hclosed);
}

static void on_written(uv_write_t *w, int status)
{
        hclose(w->data);
}

/* The answer to a HEAD request is the same without the body (RFC 9110
 * 9.3.2): Content-Length still says what GET would send. */
static void respond(struct hconn *k, const char *status, const char *type, const char *body,
                    size_t clen)
{
        char headers[256];
        size_t blen = strncmp(k->buf, "HEAD ", 5) == 0 ? 0 : clen;
        int hl;
        uv_buf_t b;

        hl = snprintf(headers, sizeof(headers), "HTTP/1.0 %s\r\nContent-Type: %s\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, type, clen);
        k->out = malloc((size_t)hl + blen);
        if (!k->out) {
                hclose(k);
                return;
        }
        memcpy(k->out, headers, (size_t)hl);
        memcpy(k->out + hl, body, blen);
        uv_read_stop(&k->h.stream);
        b = uv_buf_init(k->out, (unsigned)((size_t)hl + blen));
        k->wr.data = k;
        if (uv_write(&k->wr, &k->h.stream, &b, 1, on_written) < 0)
                hclose(k);
}

static void handle(struct hconn *k)
{
        static const char nf[] = "not found: try GET /metrics\n";
        size_t m = strncmp(k->buf, "GET ", 4) == 0 ? 4 : strncmp(k->buf, "HEAD ", 5) == 0 ? 5 : 0;
        char *text;
        size_t len;

        /* Request line only: "GET /metrics HTTP/1.x" or HEAD, a query string
         * allowed. */
        if (m > 0 && strncmp(k->buf + m, "/metrics", 8) == 0 &&
            (k->buf[m + 8] == ' ' || k->buf[m + 8] == '?')) {
                if (metrics_render(dm, &text, &len) < 0) {
                        respond(k, "500 Internal Server Error", "text/plain", "", 0);
                        return;
                }
                respond(k, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, len);
                free(text);
                return;
        }
        respond(k, "404 Not Found", "text/plain", nf, sizeof(nf) - 1);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
        struct hconn *k = h->data;

        *b = uv_buf_init(k->buf + k->n, (unsigned)(sizeof(k->buf) - 1 - k->n));
}

/* Where the request head in buf[0..n) ends (past its blank line), or 0. */
static size_t head_end(const char *buf, size_t n)
{
        const char *crlf = memmem(buf, n, "\r\n\r\n", 4), *lf = memmem(buf, n, "\n\n", 2);
        size_t a = crlf ? (size_t)(crlf - buf) + 4 : 0, b = lf ? (size_t)(lf - buf) + 2 : 0;

        return a && (!b || a < b) ? a : b;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
        static const char bad[] = "bad request: a control byte in the head\n";
        struct hconn *k = s->data;
        size_t from = k->n, end;

        if (nread < 0) {
                hclose(k);
                return;
        }
        k->n += (size_t)nread;
        k->buf[k->n] = '\0';
        end = head_end(k->buf, k->n);
        /* The head is text: a NUL or another control byte in it gets a 400
         * at once (what follows the blank line is not looked at). */
        for (size_t i = from; i < (end ? end : k->n); i++) {
                unsigned char ch = (unsigned char)k->buf[i];
                if ((ch < 0x20 && ch != '\r' && ch != '\n' && ch != '\t') || ch == 0x7f) {
                        respond(k, "400 Bad Request", "text/plain", bad, sizeof(bad) - 1);
                        return;
                }
        }
        if (end) {
                handle(k);
                return;
        }
        if (k->n >= sizeof(k->buf) - 1)
                respond(k, "431 Request Header Fields Too Large", "text/plain", "", 0);
}

static void on_idle(uv_timer_t *t)
{
        hclose(t->data);
}

static void on_connection(uv_stream_t *srv, int status)
{
        struct hconn *k;
        int r;

        if (status < 0)
                return;
        k = calloc(1, sizeof(*k));
        if (!k)
                return;
        if (is_unix)
                r = uv_pipe_init(srv->loop, &k->h.pipe, 0);
        else
                r = uv_tcp_init(srv->loop, &k->h.tcp);
        if (r < 0) {
                free(k);
                return;
        }
        k->h.stream.data = k;
        uv_timer_init(srv->loop, &k->timer);
        k->timer.data = k;
        LIST_PREPEND(conns, k, prev, next);
        n_conns++;
        if (uv_accept(srv, &k->h.stream) < 0 || n_conns > MHTTP_CONNS) {
                hclose(k);      /* over the cap: accepted only to be closed */
                return;
        }
        uv_timer_start(&k->timer, on_idle, MHTTP_IDLE_MS, 0);
        if (uv_read_start(&k->h.stream, on_alloc, on_read) < 0)
                hclose(k);
}

int mhttp_start(struct daemon *d, const char *addr, char *err, size_t len)
{
        char host[CONFIG_PATH_MAX];
        struct sockaddr_storage sa;
        struct stat st;
        int port, r;

        if (config_parse_listen(addr, &is_unix, host, sizeof(host), &port, err, len) < 0)
                return -EINVAL;
        dm = d;
        if (is_unix) {
                char why[256];
                mode_t old;

                /* The directory must be as safe as the main socket's. */
                if (listen_check_dir(host, why, sizeof(why)) < 0) {
                        snprintf(err, len, "metrics-listen %s: %s", addr, why);
                        return -EPERM;
                }
                /* A stale socket of an earlier run; never another file. */
                if (lstat(host, &st) == 0 && S_ISSOCK(st.st_mode))
                        unlink(host);
                r = uv_pipe_init(d->loop, &server.pipe, 0);
                /* The file gets its mode from the umask at bind() (the
                 * socket inode's mode is 0777): no chmod by path, which
                 * would follow a symlink swapped in after bind(). */
                old = umask(~d->cfg.socket_mode & 0777);
                if (r == 0)
                        r = uv_pipe_bind(&server.pipe, host);
                umask(old);
                if (r == 0)
                        snprintf(unix_path, sizeof(unix_path), "%s", host);
        } else {
                /* host is numeric (config_parse_listen): IPv4, else IPv6.
                 * libuv clears IPV6_V6ONLY, so [::] takes IPv4 too,
                 * whatever net.ipv6.bindv6only says. */
                r = uv_ip4_addr(host, port, (struct sockaddr_in *)&sa);
                if (r < 0)
                        r = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa);
                if (r == 0)
                        r = uv_tcp_init(d->loop, &server.tcp);
                if (r == 0)
                        r = uv_tcp_bind(&server.tcp, (struct sockaddr *)&sa, 0);
        }
        if (r == 0)
                r = uv_listen(&server.stream, 16, on_connection);
        if (r < 0) {
                snprintf(err, len, "metrics-listen %s: %s", addr, uv_strerror(r));
                if (uv_is_active((uv_handle_t *)&server) || server.stream.loop)
                        uv_close((uv_handle_t *)&server, NULL);
                return r;
        }
        listening = true;
        return 0;
}

void mhttp_stop(void)
{
        if (!listening)
                return;
        listening = false;
        uv_close((uv_handle_t *)&server, NULL);
        if (unix_path[0])
                unlink(unix_path);
        while (conns)
                hclose(conns);
}

/* lingering.h: a TCP socket whose last close() blocks, for the tests that
 * check the daemon does not wait for one (daemon/closer.h).  Included by
 * one test file each, with Criterion. */
#ifndef GPUIPC_TESTS_LINGERING_H
#define GPUIPC_TESTS_LINGERING_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

/* Data it sent sits unread in its peer (returned in *ret_peer: close that
 * to end the wait), and SO_LINGER makes close wait up to secs for it. */
static inline int lingering_socket(int secs, int *ret_peer)
{
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        struct linger lg = { .l_onoff = 1, .l_linger = secs };
        socklen_t al = sizeof(a);
        int small = 4096, l, s, p;
        char buf[4096] = { 0 };

        l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(l >= 0 && s >= 0, "socket: %s", strerror(errno));
        cr_assert_eq(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
        cr_assert_eq(setsockopt(s, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
        cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0, "bind: %s", strerror(errno));
        cr_assert_eq(listen(l, 1), 0);
        cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
        cr_assert_eq(connect(s, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s",
                     strerror(errno));
        p = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        cr_assert(p >= 0, "accept: %s", strerror(errno));
        while (send(s, buf, sizeof(buf), MSG_DONTWAIT) > 0)
                ;
        cr_assert_eq(setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
        close(l);
        *ret_peer = p;
        return s;
}

#endif

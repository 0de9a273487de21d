/* error.c: wire error codes, buffer kind names, and reasons. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

static const struct {
        const char *code;
        int err;        /* positive errno */
} codes[] = {
        { "bad_frame",      EBADMSG },
        { "too_large",      EMSGSIZE },
        { "bad_request",    EINVAL },
        { "unknown_op",     ENOSYS },
        { "hello_required", EPROTO },
        { "version",        EPROTONOSUPPORT },
        { "not_found",      ENOENT },
        { "exists",         EEXIST },
        { "timeout",        ETIMEDOUT },
        { "permission",     EPERM },
        { "limit",          ENOBUFS },
        { "bad_fd",         EBADF },
        { "unsupported",    ENOTSUP },
        { "no_memory",      ENOMEM },
        { "shutting_down",  ESHUTDOWN },
        { "internal",       EIO },
};

const char *proto_code_from_errno(int err)
{
        if (err < 0)
                err = -err;
        if (err == EACCES)
                err = EPERM;
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
                if (codes[i].err == err)
                        return codes[i].code;
        return "internal";
}

int proto_errno_from_code(const char *code, size_t len)
{
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
                if (strlen(codes[i].code) == len && memcmp(codes[i].code, code, len) == 0)
                        return -codes[i].err;
        return -EIO;
}

static const char *const kinds[_PROTO_KIND_MAX] = {
        [PROTO_KIND_HOST] = "host",
        [PROTO_KIND_CUDA_IPC] = "cuda-ipc",
        [PROTO_KIND_CUDA_VMM] = "cuda-vmm",
        [PROTO_KIND_CUDA_POOL] = "cuda-pool",
        [PROTO_KIND_BATCH] = "batch",
};

const char *proto_kind_name(enum proto_kind k)
{
        return (unsigned)k < _PROTO_KIND_MAX ? kinds[k] : "unknown";
}

int proto_kind_from_name(const char *s, size_t len)
{
        for (int k = 0; k < _PROTO_KIND_MAX; k++)
                if (strlen(kinds[k]) == len && memcmp(kinds[k], s, len) == 0)
                        return k;
        return -EINVAL;
}

int proto_invalid(char *why, size_t why_len, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
        return -EINVAL;
}

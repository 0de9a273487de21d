/* error.c: error texts, the library version and the default socket. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Texts for the errnos that stand for protocol codes or for situations a
 * client commonly meets; the wording is about gpuipcd, not the syscall. */
static const struct {
        int err;
        const char *text;
} texts[] = {
        { EBADMSG,         "malformed frame" },
        { EMSGSIZE,        "frame too large" },
        { EINVAL,          "invalid argument or request" },
        { ENOSYS,          "operation not supported by the daemon" },
        { EPROTO,          "protocol error: hello required" },
        { EPROTONOSUPPORT, "no protocol version in common with the daemon" },
        { ENOENT,          "no such registration or lease" },
        { EEXIST,          "name already registered" },
        { ETIMEDOUT,       "timed out" },
        { EPERM,           "permission denied" },
        { ENOBUFS,         "a daemon resource limit was reached" },
        { EBADF,           "unusable file descriptor for the buffer" },
        { ENOTSUP,         "buffer kind not supported by this daemon" },
        { ENOMEM,          "out of memory" },
        { ESHUTDOWN,       "the daemon is shutting down" },
        { EIO,             "internal error in the daemon" },
        { ECONNREFUSED,    "no daemon is listening on the socket" },
        { ECONNRESET,      "connection to the daemon was lost" },
        { ENOTCONN,        "not connected to the daemon" },
        { ENAMETOOLONG,    "socket path too long" },
        { EXDEV,           "the consumer's GPU cannot access the buffer's GPU (no peer access)" },
        { EMEDIUMTYPE,     "the registration is of another kind (a batch, or not one)" },
};

const char *gpuipc_strerror(int err)
{
        if (err == 0)
                return "success";
        if (err < 0)
                err = -err;
        for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
                if (texts[i].err == err)
                        return texts[i].text;
        return strerror(err);   /* glibc: "Unknown error N", never NULL */
}

unsigned int gpuipc_version(void)
{
        return GPUIPC_VERSION_HEX;
}

const char *gpuipc_version_string(void)
{
        return GPUIPC_VERSION;
}

void gpuipc_free(void *p)
{
        free(p);
}

const char *gpuipc_client_default_socket(void)
{
        const char *s = getenv("GPUIPC_SOCKET");

        return s && *s ? s : PROTO_DEFAULT_SOCKET;
}

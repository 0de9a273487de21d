/* name.c: registration names, "ns/sub/name". */
#include <errno.h>
#include <string.h>

#include "proto.h"

static bool name_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               strchr("._:@+=-", c) != NULL;
}

int proto_name_check(const char *s, size_t len, const char **ret_why)
{
        const char *why = NULL;
        size_t seg_start = 0, segments = 0;

        if (!s || len == 0)
                why = "name is empty";
        else if (len > PROTO_NAME_MAX)
                why = "name is longer than 255 bytes";
        for (size_t i = 0; !why && i <= len; i++) {
                if (i == len || s[i] == '/') {
                        size_t n = i - seg_start;
                        if (n == 0)
                                why = "name has an empty segment (leading, trailing or double '/')";
                        else if ((n == 1 && s[seg_start] == '.') ||
                                 (n == 2 && s[seg_start] == '.' && s[seg_start + 1] == '.'))
                                why = "name has a '.' or '..' segment";
                        else if (++segments > PROTO_NAME_MAX_SEGMENTS)
                                why = "name has more than 16 segments";
                        seg_start = i + 1;
                } else if (s[i] == '\0' || !name_char(s[i])) {
                        why = "name may hold only letters, digits, '/' and ._:@+=-";
                }
        }
        if (why) {
                if (ret_why)
                        *ret_why = why;
                return -EINVAL;
        }
        return 0;
}

bool proto_name_in(const char *name, size_t name_len, const char *prefix, size_t prefix_len)
{
        while (prefix_len > 0 && prefix[prefix_len - 1] == '/')
                prefix_len--;
        if (prefix_len == 0)
                return true;
        if (name_len < prefix_len || memcmp(name, prefix, prefix_len) != 0)
                return false;
        return name_len == prefix_len || name[prefix_len] == '/';
}

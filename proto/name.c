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

size_t proto_utf8_valid(const char *s, size_t len)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0;

        while (i < len) {
                unsigned char c = p[i];
                uint32_t cp;
                size_t n;

                if (c < 0x80) {
                        i++;
                        continue;
                }
                if (c >= 0xc2 && c <= 0xdf)
                        n = 1, cp = c & 0x1f;
                else if (c >= 0xe0 && c <= 0xef)
                        n = 2, cp = c & 0x0f;
                else if (c >= 0xf0 && c <= 0xf4)
                        n = 3, cp = c & 0x07;
                else
                        return i;       /* continuation byte, 0xc0/0xc1, or > 0xf4 */
                if (len - i <= n)
                        return i;
                for (size_t k = 1; k <= n; k++) {
                        if ((p[i + k] & 0xc0) != 0x80)
                                return i;
                        cp = cp << 6 | (p[i + k] & 0x3f);
                }
                /* overlong forms, surrogates, beyond U+10FFFF */
                if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
                    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                        return i;
                i += n + 1;
        }
        return len;
}

bool proto_text_valid(const char *s, size_t len)
{
        const unsigned char *p = (const unsigned char *)s;

        if (proto_utf8_valid(s, len) != len)
                return false;
        /* Well-formed: a lead byte's continuation bytes are there. */
        for (size_t i = 0; i < len; i++) {
                if (p[i] < 0x20 || p[i] == 0x7f)
                        return false;                   /* C0, DEL */
                if (p[i] == 0xc2 && p[i + 1] < 0xa0)
                        return false;                   /* C1: U+0080 to U+009F */
                if (p[i] == 0xe2 && ((p[i + 1] == 0x80 && p[i + 2] >= 0xaa && p[i + 2] <= 0xae) ||
                                     (p[i + 1] == 0x81 && p[i + 2] >= 0xa6 && p[i + 2] <= 0xa9)))
                        return false;   /* U+202A to U+202E, U+2066 to U+2069: bidi */
        }
        return true;
}

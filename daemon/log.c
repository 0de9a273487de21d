/* log.c: priority-prefixed lines on stderr. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"

static int max_level = LOG_LVL_INFO;

void log_set_level(int level)
{
        max_level = level;
}

int log_get_level(void)
{
        return max_level;
}

void log_msg(int level, const char *fmt, ...)
{
        char line[1024];
        int saved = errno, n, k;
        va_list ap;

        if (level > max_level)
                return;
        n = snprintf(line, sizeof(line), "<%d>", level);
        va_start(ap, fmt);
        k = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (k < 0)
                k = 0;
        n += k;
        if (n > (int)sizeof(line) - 2)
                n = (int)sizeof(line) - 2;      /* truncated: still one line */
        for (int i = 0; i < n; i++)
                if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
                        line[i] = ' ';  /* one line, no terminal escapes */
        line[n++] = '\n';
        /* One write() per line keeps lines whole when several processes
         * share the journal stream. */
        (void)!write(STDERR_FILENO, line, (size_t)n);
        errno = saved;
}

/* log.h: one line per message on stderr with a syslog priority prefix, as
 * the journal reads it. */
#ifndef GPUIPCD_LOG_H
#define GPUIPCD_LOG_H

#define LOG_LVL_ERR     3
#define LOG_LVL_WARNING 4
#define LOG_LVL_INFO    6
#define LOG_LVL_DEBUG   7

void log_set_level(int level);
int log_get_level(void);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LVL_ERR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LVL_WARNING, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif

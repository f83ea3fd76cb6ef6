/*
 * log.h — one line per event on stderr.
 *
 * Lines look like "ckptsync: error: reading \"a/b\": No such file" on a
 * terminal and carry a syslog priority prefix ("<3>") when stderr is the
 * journal (JOURNAL_STREAM set), so journald keeps the level.  Never pass a
 * credential to these functions.
 *
 * Thread-safe: each line is written with a single write(2).
 */
#ifndef CKS_LOG_H
#define CKS_LOG_H

enum log_level { LOG_LVL_ERROR = 3, LOG_LVL_WARN = 4, LOG_LVL_INFO = 6, LOG_LVL_DEBUG = 7 };

void log_init(const char *progname, enum log_level max_level);
void log_set_level(enum log_level max_level);
void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif

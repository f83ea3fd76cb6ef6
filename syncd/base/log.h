/*
 * log.h — one line per event on stderr.
 *
 * Lines look like "ckptsync: error: reading \"a/b\": No such file" on a
 * terminal and carry a syslog priority prefix ("<3>") when stderr is the
 * journal (JOURNAL_STREAM set), so journald keeps the level.  Never pass a
 * credential to these functions.
 *
 * Events a log shipper should parse (a snapshot taken, durable, replicated,
 * a region failing or back, a retake, degraded, resumed) are written with
 * log_event(): logfmt fields first, the human text last as msg:
 *   ckptsyncd: info: event=replicated run=r1 snapshot=20260101T... regions=3
 *       msg="snapshot 20260101T... of run 'r1' is replicated"
 * (one line).  Values that need it are quoted with log_quote(); run names,
 * snapshot ids, region names and numbers never do.
 *
 * Thread-safe: each line is written with a single write(2).
 */
#ifndef CKS_LOG_H
#define CKS_LOG_H

#include <stddef.h>

enum log_level { LOG_LVL_ERROR = 3, LOG_LVL_WARN = 4, LOG_LVL_INFO = 6, LOG_LVL_DEBUG = 7 };

void log_init(const char *progname, enum log_level max_level);
void log_set_level(enum log_level max_level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One event line: fields is "event=NAME key=value ..." (values already safe
 * or quoted with log_quote()), fmt the human text, written as msg="...". */
void log_event(enum log_level level, const char *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* s as a logfmt value: as is when it is non-empty and has no space, '"',
 * '=', '\\' or control character, else in double quotes with '"' and '\\'
 * escaped and control characters as \n, \t or \xHH.  Cut to fit size;
 * returns out. */
const char *log_quote(char *out, size_t size, const char *s);

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif

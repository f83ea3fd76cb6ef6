/*
 * dirtidy.c — a dir region's litter removed (dirtidy.h).
 *
 * Design: one walk of the region's tree through directory fds (openat,
 * O_NOFOLLOW: a symlink planted in the region is never followed out of
 * it).  Only names that start with '.' are looked at closely (one fstatat
 * each): objects never do, so walking chunks/ costs readdir alone.  The
 * names must match the writers' patterns in full, so a file someone put
 * there by hand ("..." or ".keep") is left alone.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "store/dirtidy.h"
#include "store/layout.h"

#define TIDY_DEPTH_MAX 8 /* keys are a few components deep (store/layout.h) */

struct tidy {
    struct region *r;
    time_t cutoff; /* a temporary last changed before it is litter */
    struct region_tidy *res;
    char gc[LAYOUT_DIR_MAX + 1]; /* the name of gc's folder under the root */
};

/* s is n hex digits and nothing more. */
static bool tidy_hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* s starts with decimal digits followed by c (or the end when c is 0);
 * returns what follows them, or NULL. */
static const char *tidy_digits(const char *s, char c)
{
    const char *p = s;
    while (*p >= '0' && *p <= '9')
        p++;
    if (p == s || *p != c)
        return NULL;
    return c ? p + 1 : p;
}

/* ".<name>.tmp.<pid>.<16 hex>" (base/fileio.c), ".ckptsync-probe.<pid>",
 * ".ckptsync-clock.<pid>.<8 hex>" (region_dir.c). */
static bool tidy_litter_name(const char *n)
{
    const char *p;
    size_t pl = strlen(DIRTIDY_PROBE_NAME), cl = strlen(DIRTIDY_CLOCK_NAME);
    if (!strncmp(n, DIRTIDY_PROBE_NAME ".", pl + 1))
        return tidy_digits(n + pl + 1, 0) != NULL;
    if (!strncmp(n, DIRTIDY_CLOCK_NAME ".", cl + 1))
        return (p = tidy_digits(n + cl + 1, '.')) && tidy_hex(p, 8);
    for (p = strstr(n + 1, ".tmp."); p; p = strstr(p + 1, ".tmp.")) {
        const char *q = tidy_digits(p + 5, '.');
        if (p > n + 1 && q && tidy_hex(q, 16))
            return true;
    }
    return false;
}

static void tidy_temp(struct tidy *t, int dfd, const char *name)
{
    struct stat st;
    if (!tidy_litter_name(name) || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISREG(st.st_mode) || st.st_mtime >= t->cutoff)
        return;
    if (unlinkat(dfd, name, 0) == 0)
        t->res->temps++;
    else if (errno != ENOENT)
        log_debug("region '%s': removing the stale temporary \"%s\": %s", t->r->conf.name, name,
                  strerror(errno));
}

static int tidy_dir(struct tidy *t, int fd, int depth, bool in_gc);

/* A folder in dfd: walked, then removed when it is a mark's, empty and
 * unchanged for min_age (a writer's put makes it anew: never a fresh one). */
static int tidy_sub(struct tidy *t, int dfd, const char *name, int depth, bool in_gc)
{
    struct stat st;
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 : -errno;
    bool old = fstat(sub, &st) == 0 && st.st_mtime < t->cutoff;
    int e = tidy_dir(t, sub, depth + 1, depth == 0 && !strcmp(name, t->gc));
    if (e == 0 && in_gc && old) {
        if (unlinkat(dfd, name, AT_REMOVEDIR) == 0)
            t->res->folders++;
        else if (errno != ENOTEMPTY && errno != EEXIST && errno != ENOENT)
            log_debug("region '%s': removing the empty mark folder \"%s\": %s", t->r->conf.name,
                      name, strerror(errno));
    }
    return e;
}

/* Walks the folder fd (consumed); in_gc: it is the gc folder. */
static int tidy_dir(struct tidy *t, int fd, int depth, bool in_gc)
{
    int e = 0;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    for (struct dirent *de; e == 0 && (errno = 0, de = readdir(d));) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        if (n[0] == '.')
            tidy_temp(t, dirfd(d), n);
        else if ((de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) && depth < TIDY_DEPTH_MAX)
            e = tidy_sub(t, dirfd(d), n, depth, in_gc);
    }
    if (e == 0 && errno)
        e = -errno;
    closedir(d);
    return e;
}

int dirtidy_run(struct region *r, uint64_t min_age, struct region_tidy *ret)
{
    char gc[REGION_KEY_MAX];
    struct tidy t = {.r = r, .cutoff = time(NULL) - (time_t)min_age, .res = ret};
    if (layout_prefix(LAYOUT_GC, NULL, gc) < 0 || !gc[0])
        return -EINVAL;
    gc[strlen(gc) - 1] = 0; /* "gc/" */
    snprintf(t.gc, sizeof(t.gc), "%s", gc);
    int fd = open(r->conf.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = fd < 0 ? -errno : tidy_dir(&t, fd, 0, false);
    if (e < 0)
        region_set_error(r, "region '%s': tidying \"%s\": %s", r->conf.name, r->conf.path,
                         err_str(e));
    return e;
}

void dirtidy_after_del(const char *key, char *folder)
{
    struct layout_key k;
    char *slash = strrchr(folder, '/');
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_GC || !slash || slash == folder)
        return;
    if (rmdir(folder) == 0)
        *slash = 0; /* gone: its parent is the folder that changed */
}

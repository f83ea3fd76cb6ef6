/*
 * watcher.c — recursive inotify.
 *
 * Design.  inotify watches one directory per descriptor (wd) and names an
 * event by (wd, name).  We keep, per wd, only the directory's parent wd and
 * its own name, in an open-addressing hash table keyed by wd; a path is
 * rebuilt by walking up the parents.  So a renamed directory costs one
 * entry update however large its subtree, and memory per watch is bounded
 * by NAME_MAX.
 *
 * Renames.  IN_MOVED_FROM of a directory is parked (cookie, wd) until the
 * end of the batch.  IN_MOVED_TO re-adds the watch on the new path: for a
 * directory we already watch, inotify_add_watch() returns the same wd, and
 * the upsert points it at its new parent and name; its contents are then
 * scanned and reported as moved in (a checkpoint renamed into place carries
 * its completion marker).  A parked directory with no IN_MOVED_TO left the
 * tree: its subtree's watches are removed.  Without the pairing a rename
 * would drop every watch below and add it again, losing events between.
 *
 * New directories.  The watch is added first, then the directory is read,
 * so an entry created in between is reported twice rather than never.
 *
 * Rescan.  Each scan stamps the entries it reaches with a generation
 * number; entries left with an older one are directories that went away
 * while events were lost, and are removed.
 *
 * Internal failures that lose information (out of memory) are reported as
 * WATCH_OVERFLOW: the caller already rescans on that.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "daemon/watcher.h"

#define WATCH_MASK                                                                                 \
    (IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |            \
     IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
#define WATCH_MAX_DEPTH 128
#define WATCH_PATH_MAX 4096
#define WATCH_PARKED_MAX 32
#define WATCH_EVBUF (64 * 1024)
#define WATCH_READS_MAX 64 /* buffers per watcher_read: a busy tree cannot starve the loop */

struct wentry {
    int wd;       /* 0: free slot (the kernel numbers watches from 1) */
    int parent;   /* wd of the parent directory; -1 for the root */
    uint32_t gen; /* scan generation that last reached it */
    char *name;   /* "" for the root */
};

struct parked {
    uint32_t cookie;
    int wd;
};

struct watcher {
    int fd;
    int root_wd;
    char *root;
    size_t root_len;
    struct wentry *tab;
    size_t cap, n; /* cap is 0 or a power of two; load kept <= 1/2 */
    uint32_t gen;
    bool busy;
    bool limit_logged;
    bool lost; /* information lost in this batch: report WATCH_OVERFLOW */
    struct parked parked[WATCH_PARKED_MAX];
    size_t nparked;
    char abs[WATCH_PATH_MAX]; /* scans: absolute path of the current entry */
    char rel[WATCH_PATH_MAX]; /* scans: the same, relative to the root */
    char evpath[WATCH_PATH_MAX];
    union {
        struct inotify_event ev;
        char bytes[WATCH_EVBUF];
    } evbuf;
};

struct scan {
    watcher_cb cb; /* NULL: watch only, report nothing */
    void *ud;
    enum watcher_event_kind kind;
    int count;
};

static bool watcher_private(const char *name)
{
    return !strncmp(name, WATCHER_PRIVATE_PREFIX, sizeof(WATCHER_PRIVATE_PREFIX) - 1);
}

/* ---- wd table ---------------------------------------------------------- */

static size_t wtab_home(int wd, size_t cap)
{
    return ((uint32_t)wd * 2654435761u) & (cap - 1);
}

static struct wentry *wtab_find(const struct watcher *w, int wd)
{
    if (!w->cap || wd <= 0)
        return NULL;
    for (size_t i = wtab_home(wd, w->cap);; i = (i + 1) & (w->cap - 1)) {
        if (w->tab[i].wd == wd)
            return &w->tab[i];
        if (!w->tab[i].wd)
            return NULL;
    }
}

static void wtab_place(struct wentry *tab, size_t cap, const struct wentry *e)
{
    size_t i = wtab_home(e->wd, cap);
    while (tab[i].wd)
        i = (i + 1) & (cap - 1);
    tab[i] = *e;
}

static int wtab_grow(struct watcher *w)
{
    size_t cap = w->cap ? w->cap * 2 : 64;
    struct wentry *tab = calloc(cap, sizeof(*tab));
    if (!tab)
        return -ENOMEM;
    for (size_t i = 0; i < w->cap; i++)
        if (w->tab[i].wd)
            wtab_place(tab, cap, &w->tab[i]);
    free(w->tab);
    w->tab = tab;
    w->cap = cap;
    return 0;
}

/* Inserts wd or updates its parent and name; stamps it with the generation. */
static int wtab_put(struct watcher *w, int wd, int parent, const char *name)
{
    struct wentry *e = wtab_find(w, wd);
    if (e && !strcmp(e->name, name)) {
        e->parent = parent;
        e->gen = w->gen;
        return 0;
    }
    char *copy = strdup(name);
    if (!copy)
        return -ENOMEM;
    if (e) {
        free(e->name);
        *e = (struct wentry){wd, parent, w->gen, copy};
        return 0;
    }
    if ((w->n + 1) * 2 > w->cap && wtab_grow(w) < 0) {
        free(copy);
        return -ENOMEM;
    }
    wtab_place(w->tab, w->cap, &(struct wentry){wd, parent, w->gen, copy});
    w->n++;
    return 0;
}

/* Removes e, shifting later entries of its probe run back (no tombstones). */
static void wtab_del(struct watcher *w, struct wentry *e)
{
    size_t mask = w->cap - 1, hole = (size_t)(e - w->tab), j = hole;

    free(e->name);
    for (;;) {
        j = (j + 1) & mask;
        if (!w->tab[j].wd)
            break;
        size_t home = wtab_home(w->tab[j].wd, w->cap);
        bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            w->tab[hole] = w->tab[j];
            hole = j;
        }
    }
    w->tab[hole] = (struct wentry){0, 0, 0, NULL};
    w->n--;
}

/* ---- paths ------------------------------------------------------------- */

/* Path of NAME inside the directory watched as wd, relative to the root. */
static int watcher_relpath(const struct watcher *w, int wd, const char *name, char *out,
                           size_t size)
{
    const char *comp[WATCH_MAX_DEPTH + 1];
    size_t n = 0, len = 0;

    comp[n++] = name;
    while (wd != w->root_wd) {
        const struct wentry *e = wtab_find(w, wd);
        if (!e)
            return -ENOENT; /* a directory whose watch is gone: stale event */
        if (n == WATCH_MAX_DEPTH + 1)
            return -ELOOP;
        comp[n++] = e->name;
        wd = e->parent;
    }
    while (n--) {
        size_t l = strlen(comp[n]);
        if (len + l + 1 >= size)
            return -ENAMETOOLONG;
        memcpy(out + len, comp[n], l);
        len += l;
        out[len++] = n ? '/' : '\0';
    }
    return 0;
}

/* Appends "/name" to a path buffer of length len; returns the new length or 0. */
static size_t path_push(char *path, size_t len, const char *name)
{
    size_t l = strlen(name);
    size_t sep = len > 0;
    if (len + sep + l >= WATCH_PATH_MAX)
        return 0;
    if (sep)
        path[len] = '/';
    memcpy(path + len + sep, name, l + 1);
    return len + sep + l;
}

/* Sets w->abs and w->rel to the entry at relpath (relative to the root). */
static int watcher_set_path(struct watcher *w, const char *relpath, size_t *ret_alen,
                            size_t *ret_rlen)
{
    memcpy(w->abs, w->root, w->root_len + 1);
    size_t alen = path_push(w->abs, w->root_len, relpath);
    size_t rlen = strlen(relpath);
    if (!alen || rlen >= WATCH_PATH_MAX)
        return -ENAMETOOLONG;
    memcpy(w->rel, relpath, rlen + 1);
    *ret_alen = alen;
    *ret_rlen = rlen;
    return 0;
}

/* ---- watches ----------------------------------------------------------- */

static void watcher_log_limit(struct watcher *w, const char *path)
{
    if (w->limit_logged)
        return;
    w->limit_logged = true;
    log_error("watching \"%s\": the inotify watch limit (fs.inotify.max_user_watches) is "
              "reached; directories beyond it are not watched and their changes are missed "
              "until a rescan. Raise it: sysctl -w fs.inotify.max_user_watches=1048576 "
              "(and persist it in /etc/sysctl.d/)",
              path);
}

/*
 * Watches the directory at w->abs as child NAME of parent.  Returns its wd,
 * 0 when it cannot be watched (gone already, watch limit) or -ENOMEM.
 */
static int watcher_add(struct watcher *w, int parent, const char *name)
{
    int wd = inotify_add_watch(w->fd, w->abs, WATCH_MASK);
    if (wd < 0) {
        if (errno == ENOSPC)
            watcher_log_limit(w, w->abs);
        else if (errno != ENOENT && errno != ENOTDIR)
            log_warn("watching \"%s\": %s", w->abs, strerror(errno));
        return 0;
    }
    bool known = wtab_find(w, wd) != NULL;
    int r = wtab_put(w, wd, parent, name);
    if (r < 0) {
        if (!known)
            inotify_rm_watch(w->fd, wd);
        return r;
    }
    return wd;
}

/* True when wd is top or lies below it. */
static bool watcher_under(const struct watcher *w, int wd, int top)
{
    for (int depth = 0; depth <= WATCH_MAX_DEPTH; depth++) {
        if (wd == top)
            return true;
        const struct wentry *e = wtab_find(w, wd);
        if (!e || wd == w->root_wd)
            return false;
        wd = e->parent;
    }
    return false;
}

/* Removes the watch of every entry for which drop(w, wd, arg) is true. */
static void watcher_prune(struct watcher *w, bool (*drop)(const struct watcher *, int, int),
                          int arg)
{
    size_t n = 0;
    int *v = malloc((w->n ? w->n : 1) * sizeof(*v));
    if (!v) {
        w->lost = true;
        return;
    }
    for (size_t i = 0; i < w->cap; i++)
        if (w->tab[i].wd && drop(w, w->tab[i].wd, arg))
            v[n++] = w->tab[i].wd;
    for (size_t i = 0; i < n; i++) {
        inotify_rm_watch(w->fd, v[i]);
        struct wentry *e = wtab_find(w, v[i]);
        if (e)
            wtab_del(w, e);
    }
    free(v);
}

static bool drop_subtree(const struct watcher *w, int wd, int top)
{
    return watcher_under(w, wd, top);
}

static bool drop_stale(const struct watcher *w, int wd, int unused)
{
    const struct wentry *e = wtab_find(w, wd);
    return e && e->gen != w->gen;
}

/* ---- scans ------------------------------------------------------------- */

static bool scan_is_dir(DIR *d, const struct dirent *de)
{
    struct stat st;
    if (de->d_type != DT_UNKNOWN)
        return de->d_type == DT_DIR;
    return !fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) && S_ISDIR(st.st_mode);
}

static int scan_dir(struct watcher *w, int wd, size_t alen, size_t rlen, struct scan *s, int depth);

/* Reports one entry of a scanned directory; descends into directories. */
static int scan_entry(struct watcher *w, int parent, DIR *d, const struct dirent *de,
                      struct scan *s, int depth)
{
    size_t alen = path_push(w->abs, strlen(w->abs), de->d_name);
    size_t rlen = path_push(w->rel, strlen(w->rel), de->d_name);
    if (!alen || !rlen) {
        log_warn("not watching \"%s/%s\": path too long", w->abs, de->d_name);
        return 0;
    }
    bool is_dir = scan_is_dir(d, de);
    if (s->cb)
        s->cb(s->ud, s->kind, w->rel, is_dir);
    s->count++;
    if (!is_dir)
        return 0;
    if (depth >= WATCH_MAX_DEPTH) {
        log_warn("not watching \"%s\": deeper than %d levels", w->abs, WATCH_MAX_DEPTH);
        return 0;
    }
    int wd = parent > 0 ? watcher_add(w, parent, de->d_name) : 0;
    if (wd < 0)
        return wd;
    return scan_dir(w, wd, alen, rlen, s, depth + 1);
}

/*
 * Reports (and watches) everything below the directory at w->abs / w->rel,
 * itself watched as wd (0: not watched, report only).  Restores both paths
 * to alen / rlen after each entry.
 */
static int scan_dir(struct watcher *w, int wd, size_t alen, size_t rlen, struct scan *s, int depth)
{
    int fd = open(w->abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (depth ? O_NOFOLLOW : 0));
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    int r = 0;

    if (!d) {
        if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP)
            log_warn("reading directory \"%s\": %s", w->abs, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 0;
    }
    while (r >= 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || watcher_private(de->d_name))
            continue;
        r = scan_entry(w, wd, d, de, s, depth);
        w->abs[alen] = '\0';
        w->rel[rlen] = '\0';
    }
    closedir(d);
    return r;
}

/* ---- events ------------------------------------------------------------ */

static void watcher_park(struct watcher *w, int parent, const char *name, uint32_t cookie)
{
    int wd = 0;
    for (size_t i = 0; i < w->cap && !wd; i++)
        if (w->tab[i].wd && w->tab[i].parent == parent && !strcmp(w->tab[i].name, name))
            wd = w->tab[i].wd;
    if (!wd)
        return;
    if (w->nparked == WATCH_PARKED_MAX) {
        watcher_prune(w, drop_subtree, w->parked[0].wd);
        memmove(w->parked, w->parked + 1, (WATCH_PARKED_MAX - 1) * sizeof(w->parked[0]));
        w->nparked--;
    }
    w->parked[w->nparked++] = (struct parked){cookie, wd};
}

static void watcher_unpark(struct watcher *w, uint32_t cookie)
{
    for (size_t i = 0; i < w->nparked; i++) {
        if (w->parked[i].cookie == cookie) {
            w->parked[i] = w->parked[--w->nparked];
            return;
        }
    }
}

/* Directories moved away and not back into the tree: forget their watches. */
static void watcher_flush_parked(struct watcher *w)
{
    for (size_t i = 0; i < w->nparked; i++)
        if (wtab_find(w, w->parked[i].wd))
            watcher_prune(w, drop_subtree, w->parked[i].wd);
    w->nparked = 0;
}

/* A directory appeared at w->evpath (created or moved in): watch and scan it. */
static int watcher_enter(struct watcher *w, const struct inotify_event *ev,
                         enum watcher_event_kind kind, watcher_cb cb, void *ud)
{
    struct scan s = {cb, ud, kind, 0};
    size_t alen, rlen;

    if (ev->mask & IN_MOVED_TO)
        watcher_unpark(w, ev->cookie);
    if (watcher_set_path(w, w->evpath, &alen, &rlen) < 0)
        return 0;
    int wd = watcher_add(w, ev->wd, ev->name);
    if (wd < 0)
        return wd;
    int r = scan_dir(w, wd, alen, rlen, &s, 1);
    return r < 0 ? r : s.count;
}

static void watcher_self(struct watcher *w, const struct inotify_event *ev)
{
    if (ev->wd != w->root_wd)
        return; /* the parent's event already told */
    if (ev->mask & IN_IGNORED)
        log_error("watch root \"%s\" is no longer watched (removed or unmounted)", w->root);
    else if (ev->mask & IN_MOVE_SELF)
        log_error("watch root \"%s\" was moved away", w->root);
}

static enum watcher_event_kind watcher_kind(uint32_t mask)
{
    if (mask & (IN_DELETE | IN_MOVED_FROM))
        return WATCH_DELETE;
    if (mask & IN_CLOSE_WRITE)
        return WATCH_CLOSE_WRITE;
    if (mask & IN_CREATE)
        return WATCH_CREATE;
    if (mask & IN_MOVED_TO)
        return WATCH_MOVED_IN;
    return WATCH_WRITE;
}

/* Handles one event; returns the number of callbacks made or -ENOMEM. */
static int watcher_event(struct watcher *w, const struct inotify_event *ev, watcher_cb cb, void *ud)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        w->lost = true;
        return 0;
    }
    if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) {
        struct wentry *e = wtab_find(w, ev->wd);
        watcher_self(w, ev);
        if ((ev->mask & IN_IGNORED) && e)
            wtab_del(w, e);
        return 0;
    }
    if (!ev->len || !ev->name[0] || watcher_private(ev->name))
        return 0;
    if (watcher_relpath(w, ev->wd, ev->name, w->evpath, sizeof(w->evpath)) < 0)
        return 0;
    bool is_dir = (ev->mask & IN_ISDIR) != 0;
    enum watcher_event_kind kind = watcher_kind(ev->mask);
    if (is_dir && (ev->mask & IN_MOVED_FROM))
        watcher_park(w, ev->wd, ev->name, ev->cookie);
    cb(ud, kind, w->evpath, is_dir);
    if (!is_dir || (kind != WATCH_CREATE && kind != WATCH_MOVED_IN))
        return 1;
    int r = watcher_enter(w, ev, kind, cb, ud);
    return r < 0 ? r : 1 + r;
}

/* Delivers every event of one read(2) buffer. */
static int watcher_batch(struct watcher *w, size_t len, watcher_cb cb, void *ud)
{
    int count = 0;
    for (size_t off = 0; off + sizeof(struct inotify_event) <= len;) {
        const struct inotify_event *ev = (const void *)(w->evbuf.bytes + off);
        int r = watcher_event(w, ev, cb, ud);
        if (r < 0)
            w->lost = true;
        else
            count += r;
        off += sizeof(struct inotify_event) + ev->len;
    }
    return count;
}

int watcher_read(struct watcher *w, watcher_cb cb, void *ud)
{
    int count = 0, r = 0;

    if (w->busy)
        return -EBUSY;
    w->busy = true;
    w->lost = false;
    for (int reads = 0; reads < WATCH_READS_MAX;) {
        ssize_t n = read(w->fd, w->evbuf.bytes, sizeof(w->evbuf.bytes));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            if (errno != EAGAIN)
                r = -errno;
            break;
        }
        if (n == 0)
            break;
        reads++;
        count += watcher_batch(w, (size_t)n, cb, ud);
    }
    watcher_flush_parked(w);
    if (w->lost) {
        cb(ud, WATCH_OVERFLOW, "", false);
        r = r < 0 ? r : -EOVERFLOW;
    }
    w->busy = false;
    return r < 0 ? r : count;
}

/* ---- whole tree -------------------------------------------------------- */

/* Watches the root and everything below it, reporting through s. */
static int watcher_walk(struct watcher *w, struct scan *s, struct buf *err)
{
    int wd = inotify_add_watch(w->fd, w->root, WATCH_MASK & ~(uint32_t)IN_DONT_FOLLOW);
    if (wd < 0) {
        int e = -errno;
        if (e == -ENOSPC)
            watcher_log_limit(w, w->root);
        if (err)
            buf_printf(err, "watching \"%s\": %s", w->root, strerror(-e));
        return e;
    }
    w->gen++;
    int r = wtab_put(w, wd, -1, "");
    if (r < 0)
        return r;
    w->root_wd = wd;
    memcpy(w->abs, w->root, w->root_len + 1);
    w->rel[0] = '\0';
    r = scan_dir(w, wd, w->root_len, 0, s, 0);
    watcher_prune(w, drop_stale, 0);
    w->nparked = 0;
    return r < 0 ? r : s->count;
}

int watcher_rescan(struct watcher *w, watcher_cb cb, void *ud)
{
    struct scan s = {cb, ud, WATCH_CREATE, 0};

    if (w->busy)
        return -EBUSY;
    w->busy = true;
    int r = watcher_walk(w, &s, NULL);
    w->busy = false;
    return r;
}

static int watcher_check_root(const char *root, struct buf *err)
{
    struct stat st;
    if (!root || !*root) {
        if (err)
            buf_printf(err, "watch root: empty path");
        return -EINVAL;
    }
    if (stat(root, &st) < 0) {
        int e = -errno;
        if (err)
            buf_printf(err, "watch root \"%s\": %s", root, strerror(-e));
        return e;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (err)
            buf_printf(err, "watch root \"%s\" is not a directory", root);
        return -ENOTDIR;
    }
    if (strlen(root) >= WATCH_PATH_MAX / 2) {
        if (err)
            buf_printf(err, "watch root \"%s\": path too long", root);
        return -ENAMETOOLONG;
    }
    return 0;
}

static int watcher_open(struct watcher *w, struct buf *err)
{
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd >= 0)
        return 0;
    int e = -errno;
    if (err && e == -EMFILE)
        buf_printf(err, "creating an inotify instance: the limit is reached (raise "
                        "fs.inotify.max_user_instances with sysctl)");
    else if (err)
        buf_printf(err, "creating an inotify instance: %s", strerror(-e));
    return e;
}

int watcher_new(const char *root, struct watcher **ret, struct buf *err)
{
    struct scan s = {NULL, NULL, WATCH_CREATE, 0};
    int r = watcher_check_root(root, err);
    if (r < 0)
        return r;
    struct watcher *w = calloc(1, sizeof(*w));
    if (!w || !(w->root = strdup(root))) {
        free(w);
        return -ENOMEM;
    }
    w->fd = -1;
    w->root_len = strlen(w->root);
    while (w->root_len > 1 && w->root[w->root_len - 1] == '/')
        w->root[--w->root_len] = '\0';
    r = watcher_open(w, err);
    if (r >= 0)
        r = watcher_walk(w, &s, err);
    if (r < 0) {
        watcher_free(w);
        return r;
    }
    *ret = w;
    return 0;
}

void watcher_free(struct watcher *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->cap; i++)
        free(w->tab[i].name);
    free(w->tab);
    if (w->fd >= 0)
        close(w->fd);
    free(w->root);
    free(w);
}

int watcher_fd(const struct watcher *w)
{
    return w->fd;
}

size_t watcher_count(const struct watcher *w)
{
    return w->n;
}

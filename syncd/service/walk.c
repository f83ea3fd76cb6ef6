/*
 * walk.c — the snapshot's file list.  A directory tree is read with
 * openat()/fdopendir() relative to its parent's descriptor, never by
 * re-resolving full paths, so a rename elsewhere in the tree cannot make us
 * step outside it.  Entries are sorted per directory so that a manifest of
 * the same tree is always written in the same order.  Names of one inode
 * (hard links, found by st_dev and st_ino once the list is complete) are
 * listed once as a regular file, the first in that order, and then as
 * hard link entries naming it, so a snapshot stores the data once and
 * restore links them again.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "service/walk.h"

#define WALK_MAX_DEPTH 256

static int walk_push(struct walk *w, const char *path, enum mfile_type type, const struct stat *st,
                     const char *link)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        struct walk_entry *v = realloc(w->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        w->v = v;
        w->cap = cap;
    }
    struct walk_entry *e = &w->v[w->n];
    e->path = strdup(path);
    e->link = link ? strdup(link) : NULL;
    if (!e->path || (link && !e->link)) {
        free(e->path);
        free(e->link);
        return -ENOMEM;
    }
    e->type = type;
    e->st = *st;
    w->n++;
    if (type == MFILE_REG)
        w->bytes += (uint64_t)st->st_size;
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads and sorts the names of the directory open at fd (fd is consumed). */
static int walk_names(int fd, char ***ret_names, size_t *ret_n)
{
    DIR *d = fdopendir(fd);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int e = 0;

    if (!d) {
        close(fd);
        return -errno;
    }
    while ((errno = 0, de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char **nn = realloc(names, cap * sizeof(*nn));
            if (!nn) {
                e = -ENOMEM;
                break;
            }
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name))) {
            e = -ENOMEM;
            break;
        }
        n++;
    }
    if (!e && errno)
        e = -errno;
    closedir(d);
    if (e) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return e;
    }
    if (n > 1)
        qsort(names, n, sizeof(*names), name_cmp);
    *ret_names = names;
    *ret_n = n;
    return 0;
}

static int walk_entry_at(struct walk *w, int dirfd, const char *name, const char *rel, int depth,
                         struct buf *err);

static int walk_dir(struct walk *w, int dirfd, const char *name, const char *rel, int depth,
                    struct buf *err)
{
    char **names = NULL;
    size_t n = 0;
    int e, fd;

    if (depth > WALK_MAX_DEPTH) {
        buf_printf(err, "\"%s\": directory tree deeper than %d levels", rel, WALK_MAX_DEPTH);
        return -ELOOP;
    }
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        e = -errno;
        buf_printf(err, "opening directory \"%s/%s\": %s", w->base, rel, strerror(-e));
        return e;
    }
    int sub = dup(fd);
    if (sub < 0) {
        e = -errno;
        close(fd);
        return e;
    }
    e = walk_names(sub, &names, &n);
    if (e < 0)
        buf_printf(err, "reading directory \"%s/%s\": %s", w->base, rel, strerror(-e));
    for (size_t i = 0; e == 0 && i < n; i++) {
        struct buf child = BUF_INIT;
        e = buf_printf(&child, "%s/%s", rel, names[i]);
        if (e == 0)
            e = walk_entry_at(w, fd, names[i], buf_str(&child), depth + 1, err);
        buf_free(&child);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    close(fd);
    return e;
}

static int walk_link(struct walk *w, int dirfd, const char *name, const char *rel,
                     const struct stat *st, struct buf *err)
{
    char target[MANIFEST_MAX_PATH + 1];
    ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);
    if (n < 0) {
        int e = -errno;
        buf_printf(err, "reading symlink \"%s/%s\": %s", w->base, rel, strerror(-e));
        return e;
    }
    target[n] = 0;
    /* rel starts with the root's own name; the target must stay inside the
     * root, not merely inside its parent (a restore target may hold other
     * things), so it is checked from below the root. */
    const char *in_root = strchr(rel, '/');
    if (manifest_link_check(in_root ? in_root + 1 : rel, target) < 0) {
        log_warn("skipping symlink \"%s/%s\" -> \"%s\": it points outside the snapshot", w->base,
                 rel, target);
        w->skipped++;
        return 0;
    }
    return walk_push(w, rel, MFILE_LINK, st, target);
}

static int walk_entry_at(struct walk *w, int dirfd, const char *name, const char *rel, int depth,
                         struct buf *err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        int e = -errno;
        if (e == -ENOENT && depth > 0)
            return 0; /* removed while we listed: not part of this snapshot */
        buf_printf(err, "\"%s/%s\": %s", w->base, rel, strerror(-e));
        return e;
    }
    if (manifest_path_check(rel) < 0) {
        buf_printf(err, "\"%s/%s\": path cannot be stored (too long or unsafe)", w->base, rel);
        return CKS_E_UNSAFE_PATH;
    }
    if (S_ISREG(st.st_mode))
        return walk_push(w, rel, MFILE_REG, &st, NULL);
    if (S_ISLNK(st.st_mode))
        return walk_link(w, dirfd, name, rel, &st, err);
    if (S_ISDIR(st.st_mode)) {
        int e = walk_push(w, rel, MFILE_DIR, &st, NULL);
        return e < 0 ? e : walk_dir(w, dirfd, name, rel, depth, err);
    }
    log_warn("skipping \"%s/%s\": not a regular file, directory or symlink", w->base, rel);
    w->skipped++;
    return 0;
}

struct ino_ref {
    dev_t dev;
    ino_t ino;
    size_t k; /* index in walk.v */
};

static int ino_cmp(const void *a, const void *b)
{
    const struct ino_ref *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* Regular files with st_nlink > 1 that are one inode: the later ones in
 * list order become MFILE_HARDLINK entries whose link is the first one's
 * path.  Only names inside the snapshot count; a link elsewhere leaves
 * the file a plain regular file. */
static int walk_hardlinks(struct walk *w)
{
    size_t n = 0;
    for (size_t k = 0; k < w->n; k++)
        n += w->v[k].type == MFILE_REG && w->v[k].st.st_nlink > 1;
    if (n < 2)
        return 0;
    struct ino_ref *v = malloc(n * sizeof(*v));
    if (!v)
        return -ENOMEM;
    n = 0;
    for (size_t k = 0; k < w->n; k++)
        if (w->v[k].type == MFILE_REG && w->v[k].st.st_nlink > 1)
            v[n++] = (struct ino_ref){w->v[k].st.st_dev, w->v[k].st.st_ino, k};
    qsort(v, n, sizeof(*v), ino_cmp);
    int e = 0;
    for (size_t i = 1, first = 0; i < n && e == 0; i++) {
        if (v[i].dev != v[first].dev || v[i].ino != v[first].ino) {
            first = i;
            continue;
        }
        struct walk_entry *we = &w->v[v[i].k];
        if (!(we->link = strdup(w->v[v[first].k].path)))
            e = -ENOMEM;
        else {
            we->type = MFILE_HARDLINK;
            w->bytes -= (uint64_t)we->st.st_size;
        }
    }
    free(v);
    return e;
}

int walk_list(const char *path, struct walk *ret, struct buf *err)
{
    struct walk w = {0};
    char *p1 = strdup(path), *p2 = strdup(path);
    int e = -ENOMEM, dirfd = -1;

    if (!p1 || !p2)
        goto out;
    /* dirname/basename may modify their argument: one copy each. */
    const char *name = basename(p1);
    w.base = strdup(dirname(p2));
    if (!w.base)
        goto out;
    if (!strcmp(name, "/") || !strcmp(name, ".") || !strcmp(name, "..")) {
        buf_printf(err, "\"%s\": name a file or directory by its own name", path);
        e = -EINVAL;
        goto out;
    }
    dirfd = open(w.base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        e = -errno;
        buf_printf(err, "\"%s\": %s", w.base, strerror(-e));
        goto out;
    }
    e = walk_entry_at(&w, dirfd, name, name, 0, err);
    if (e == 0)
        e = walk_hardlinks(&w);
    if (e == 0 && w.n == 0) { /* the root itself was skipped: a device, FIFO or socket */
        buf_printf(err, "\"%s\": not a regular file, directory or symlink: nothing to snapshot",
                   path);
        e = -EINVAL;
    }
out:
    if (dirfd >= 0)
        close(dirfd);
    free(p1);
    free(p2);
    if (e < 0)
        walk_free(&w);
    else
        *ret = w;
    return e;
}

void walk_free(struct walk *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->v[i].path);
        free(w->v[i].link);
    }
    free(w->v);
    free(w->base);
    memset(w, 0, sizeof(*w));
}

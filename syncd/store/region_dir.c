/*
 * region_dir.c — a region that is a directory (a NAS/NFS/CPFS mount, or a
 * local folder for trying ckptsync out).  A key is a path under the root.
 *
 * Design notes:
 * - The root is never created here.  A missing root usually means a share
 *   that is not mounted; creating it would put "replicated" data on the
 *   instance's own disk.  Only directories below the root are created, one
 *   component at a time through directory fds, and the parent is fsynced
 *   whenever a new directory appears in it, so the object's path survives
 *   a crash along with its content.
 * - put is fileio_write_atomic_at(): O_EXCL temp ".<name>.tmp.*" in the
 *   target directory, fsync, rename, fsync the directory.  Names starting
 *   with '.' are therefore temp files (or check() probes) and list() skips
 *   them; a crash can leave such files, never a torn object.  Prune
 *   removes the stale ones (tidy, store/dirtidy.h); deleting the last
 *   record of a prune mark removes the mark's folder; a put whose folder
 *   was removed after it made or opened it (ENOENT) makes it again.
 * - put_new is fileio_write_new_at(): the same temp file, link(2)ed to the
 *   name instead of renamed, so an existing object is never replaced
 *   (EEXIST), by another thread, process or host (NFS) alike.  The kind
 *   enforces it from region_new on; its probe just does it twice.
 * - Objects are 0644 and directories 0755 (umask permitting): who may read
 *   the region is decided by the root's own mode, as a bucket policy would.
 * - list() of a prefix with no directory is empty; under a root that does
 *   not exist it fails (-ENODEV, naming the region and the path), never
 *   "empty": an unmounted share is a region that does not answer.
 * - Every failure fills errmsg with the region, the path in quotes and the
 *   system's reason; nothing is logged here.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/fileio.h"
#include "store/dirtidy.h"
#include "store/region.h"

#define DIR_PATH_MAX (CONFIG_PATH_MAX + REGION_KEY_MAX + 2)
#define DIR_OBJECT_MODE 0644
#define DIR_SUBDIR_MODE 0755
#define DIR_PROBE_NAME DIRTIDY_PROBE_NAME
#define DIR_CLOCK_NAME DIRTIDY_CLOCK_NAME
#define DIR_WRITE_TRIES 3 /* a folder removed under a put (dirtidy.h) */

/* root + "/" + the first keylen bytes of key, without doubled slashes. */
static int dir_path_n(const struct region *r, const char *key, size_t keylen, char *out)
{
    const char *root = r->conf.path;
    size_t rl = strlen(root);
    while (rl > 0 && root[rl - 1] == '/')
        rl--;
    int n = snprintf(out, DIR_PATH_MAX, "%.*s/%.*s", (int)rl, root, (int)keylen, key);
    return n < 0 || n >= DIR_PATH_MAX ? -ENAMETOOLONG : 0;
}

static int dir_path(const struct region *r, const char *key, char *out)
{
    return dir_path_n(r, key, strlen(key), out);
}

static int dir_fail(struct region *r, const char *what, const char *path, int rc)
{
    region_set_error(r, "region '%s': %s \"%s\": %s", r->conf.name, what, path, err_str(rc));
    return rc;
}

/* Same, naming root + the first keylen bytes of key. */
static int dir_fail_key(struct region *r, const char *what, const char *key, size_t keylen, int rc)
{
    char path[DIR_PATH_MAX];
    if (dir_path_n(r, key, keylen, path) < 0)
        return dir_fail(r, what, key, rc);
    return dir_fail(r, what, path, rc);
}

/* ---- put -------------------------------------------------------------- */

/* Opens (creating if needed) the directory named by key[0..end) under fd. */
static int dir_step(struct region *r, int fd, const char *key, size_t start, size_t end)
{
    char comp[NAME_MAX + 1];
    if (end - start > NAME_MAX)
        return dir_fail_key(r, "creating directory", key, end, -ENAMETOOLONG);
    memcpy(comp, key + start, end - start);
    comp[end - start] = 0;
    /* mkdir may say EROFS or EACCES for a directory that exists: open it
     * anyway, and report the mkdir error only if that fails too. */
    int made = mkdirat(fd, comp, DIR_SUBDIR_MODE) == 0 ? 0 : -errno;
    int sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sub < 0) {
        if (made < 0 && made != -EEXIST)
            return dir_fail_key(r, "creating directory", key, end, made);
        return dir_fail_key(r, "opening directory", key, end, -errno);
    }
    if (made == 0 && fsync(fd) < 0) {
        int e = -errno;
        close(sub);
        return dir_fail_key(r, "syncing directory", key, start ? start - 1 : 0, e);
    }
    return sub;
}

/* Opens the directory that will hold key, creating the missing ones below
 * the root; returns its fd and the key's last component. */
static int dir_open_parent(struct region *r, const char *key, const char **ret_name)
{
    int fd = open(r->conf.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return dir_fail(r, "opening directory", r->conf.path, -errno);
    size_t start = 0;
    for (const char *slash; (slash = strchr(key + start, '/'));) {
        size_t end = (size_t)(slash - key);
        int sub = dir_step(r, fd, key, start, end);
        close(fd);
        if (sub < 0)
            return sub;
        fd = sub;
        start = end + 1;
    }
    *ret_name = key + start;
    return fd;
}

typedef int (*dir_write_fn)(int dirfd, const char *name, const void *data, size_t len, mode_t mode);

static int dir_write(struct region *r, const char *what, dir_write_fn fn, const char *key,
                     const void *data, size_t len)
{
    const char *name = NULL;
    int rc = -ENOENT, fd = -1;
    /* -ENOENT: prune removed an (empty) folder after it was made */
    for (int k = 0; k < DIR_WRITE_TRIES && rc == -ENOENT; k++) {
        if ((fd = rc = dir_open_parent(r, key, &name)) < 0)
            continue;
        rc = fn(fd, name, data, len, DIR_OBJECT_MODE);
        close(fd);
    }
    if (fd < 0)
        return rc; /* dir_open_parent named the folder */
    if (rc < 0)
        return dir_fail_key(r, what, key, strlen(key), rc);
    return 0;
}

static int dir_put(struct region *r, const char *key, const void *data, size_t len)
{
    return dir_write(r, "writing", fileio_write_atomic_at, key, data, len);
}

static int dir_put_new(struct region *r, const char *key, const void *data, size_t len)
{
    return dir_write(r, "creating", fileio_write_new_at, key, data, len);
}

/* ---- get / has / del ---------------------------------------------------- */

static int dir_read_fd(struct region *r, int fd, const char *path, size_t max, struct buf *out)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return dir_fail(r, "reading", path, -errno);
    if (!S_ISREG(st.st_mode)) { /* has() says 0 for these: keep get() consistent */
        region_set_error(r, "region '%s': reading \"%s\": not a regular file", r->conf.name, path);
        return -ENOENT;
    }
    if ((uint64_t)st.st_size > max) {
        region_set_error(r, "region '%s': reading \"%s\": object is %llu bytes, limit %zu",
                         r->conf.name, path, (unsigned long long)st.st_size, max);
        return CKS_E_LIMIT;
    }
    size_t size = (size_t)st.st_size;
    buf_reset(out);
    int rc = buf_reserve(out, size);
    if (rc < 0)
        return dir_fail(r, "reading", path, rc);
    ssize_t n = fileio_read_full(fd, out->data, size);
    if (n < 0)
        return dir_fail(r, "reading", path, (int)n);
    if ((size_t)n != size) /* objects are immutable: a short file is damage */
        return dir_fail(r, "reading", path, -EIO);
    out->len = size;
    out->data[size] = 0;
    return 0;
}

static int dir_get(struct region *r, const char *key, size_t max, struct buf *out)
{
    char path[DIR_PATH_MAX];
    int rc = dir_path(r, key, path);
    if (rc < 0)
        return dir_fail(r, "reading", key, rc);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) /* ENOTDIR: a parent is a file, so the key is absent */
        return dir_fail(r, "reading", path, errno == ENOTDIR ? -ENOENT : -errno);
    rc = dir_read_fd(r, fd, path, max, out);
    close(fd);
    return rc;
}

static int dir_get_range(struct region *r, const char *key, uint64_t off, size_t len,
                         struct buf *out)
{
    char path[DIR_PATH_MAX];
    int rc = dir_path(r, key, path);
    if (rc < 0)
        return dir_fail(r, "reading", key, rc);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dir_fail(r, "reading", path, errno == ENOTDIR ? -ENOENT : -errno);
    buf_reset(out);
    rc = buf_reserve(out, len);
    ssize_t n = rc < 0 ? rc : pread(fd, out->data, len, (off_t)off);
    if (n < 0) {
        rc = dir_fail(r, "reading", path, rc < 0 ? rc : -errno);
    } else {
        out->len = (size_t)n;
        out->data[n] = 0;
        rc = 0;
    }
    close(fd);
    return rc;
}

static int dir_has(struct region *r, const char *key, uint64_t size)
{
    char path[DIR_PATH_MAX];
    struct stat st;
    int rc = dir_path(r, key, path);
    if (rc < 0)
        return dir_fail(r, "looking up", key, rc);
    if (stat(path, &st) == 0) {
        if (S_ISREG(st.st_mode) && size && (uint64_t)st.st_size != size) {
            log_warn("region '%s': \"%s\" has %lld bytes, expected %llu: writing it again",
                     r->conf.name, key, (long long)st.st_size, (unsigned long long)size);
            return 0;
        }
        return S_ISREG(st.st_mode) ? 1 : 0;
    }
    if (errno == ENOENT || errno == ENOTDIR)
        return 0;
    return dir_fail(r, "looking up", path, -errno);
}

static int dir_del(struct region *r, const char *key)
{
    char path[DIR_PATH_MAX];
    int rc = dir_path(r, key, path);
    if (rc < 0)
        return dir_fail(r, "deleting", key, rc);
    if (unlink(path) < 0)
        return dir_fail(r, "deleting", path, errno == ENOTDIR ? -ENOENT : -errno);
    char *slash = strrchr(path, '/');
    *slash = 0; /* dir_path always puts one after the root */
    dirtidy_after_del(key, path);
    rc = fileio_fsync_dir(path[0] ? path : "/");
    if (rc < 0 && rc != -ENOENT) /* -ENOENT: the folder went, with the entry */
        return dir_fail(r, "syncing directory", path[0] ? path : "/", rc);
    return 0;
}

/* ---- list --------------------------------------------------------------- */

struct dir_walk {
    struct region *r;
    int (*cb)(void *ud, const char *key, uint64_t size);
    void *ud;
    char key[REGION_KEY_MAX]; /* the current directory's key prefix, then a name */
};

static int dir_walk(struct dir_walk *w, int fd, size_t klen, const char *match);

/* One directory entry whose name matched; w->key holds its key. */
static int dir_walk_entry(struct dir_walk *w, int dfd, const char *name, size_t klen)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : dir_fail_key(w->r, "listing", w->key, klen, -errno);
    if (S_ISREG(st.st_mode))
        return w->cb(w->ud, w->key, (uint64_t)st.st_size);
    if (!S_ISDIR(st.st_mode) || klen + 1 >= REGION_KEY_MAX)
        return 0;
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
        return errno == ENOENT ? 0 : dir_fail_key(w->r, "listing", w->key, klen, -errno);
    w->key[klen] = '/';
    w->key[klen + 1] = 0;
    return dir_walk(w, sub, klen + 1, "");
}

/* Walks the directory fd (consumed), whose key prefix is w->key[0..klen),
 * reporting entries whose name starts with match, and everything below. */
static int dir_walk(struct dir_walk *w, int fd, size_t klen, const char *match)
{
    size_t mlen = strlen(match);
    int rc = 0;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return dir_fail_key(w->r, "listing", w->key, klen, -errno);
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                rc = dir_fail_key(w->r, "listing", w->key, klen, -errno);
            break;
        }
        size_t nlen = strlen(de->d_name);
        if (de->d_name[0] == '.' || strncmp(de->d_name, match, mlen) != 0 ||
            klen + nlen >= REGION_KEY_MAX)
            continue; /* temp files and ".", ".."; or too long to be a key */
        memcpy(w->key + klen, de->d_name, nlen + 1);
        rc = dir_walk_entry(w, dirfd(d), de->d_name, klen + nlen);
        if (rc)
            break;
    }
    closedir(d);
    return rc;
}

/* A prefix whose directory is absent lists nothing, but only below a root
 * that is there: an absent root is a share that is not mounted (or a
 * path that is wrong), and reading it as an empty region would let a
 * caller decide something from nothing (a run's generation). */
static int dir_root_there(struct region *r)
{
    struct stat st;
    if (stat(r->conf.path, &st) < 0) {
        int e = -errno;
        if (e != -ENOENT && e != -ENOTDIR)
            return dir_fail(r, "listing", r->conf.path, e);
        region_set_error(r,
                         "region '%s': listing \"%s\": the region's directory does not exist "
                         "(not mounted?)",
                         r->conf.name, r->conf.path);
        return -ENODEV;
    }
    if (!S_ISDIR(st.st_mode)) {
        region_set_error(r, "region '%s': listing \"%s\": the region's root is not a directory",
                         r->conf.name, r->conf.path);
        return -ENOTDIR;
    }
    return 0;
}

static int dir_list(struct region *r, const char *prefix,
                    int (*cb)(void *ud, const char *key, uint64_t size), void *ud)
{
    char path[DIR_PATH_MAX];
    const char *slash = strrchr(prefix, '/');
    size_t dlen = slash ? (size_t)(slash - prefix) + 1 : 0;
    struct dir_walk *w = malloc(sizeof(*w));
    if (!w)
        return dir_fail(r, "listing", prefix, -ENOMEM);
    *w = (struct dir_walk){.r = r, .cb = cb, .ud = ud};
    r->requests++; /* a directory listing: one request, like a page */
    memcpy(w->key, prefix, dlen);
    w->key[dlen] = 0;
    int rc = dir_path(r, w->key, path);
    int fd = rc < 0 ? -1 : open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rc < 0)
        rc = dir_fail(r, "listing", prefix, rc);
    else if (fd < 0 && errno != ENOENT && errno != ENOTDIR)
        rc = dir_fail(r, "listing", path, -errno);
    else if (fd < 0)
        rc = dir_root_there(r);
    else
        rc = dir_walk(w, fd, dlen, prefix + dlen);
    free(w);
    return rc;
}

/* ---- check ------------------------------------------------------------ */

/* A real write: permission bits say nothing when running as root, and a
 * read-only mount shows only when something is written. */
static int dir_probe(struct region *r)
{
    char path[DIR_PATH_MAX];
    char name[64];
    snprintf(name, sizeof(name), DIR_PROBE_NAME ".%ld", (long)getpid());
    int rc = dir_path(r, name, path);
    if (rc < 0)
        return dir_fail(r, "checking directory", r->conf.path, rc);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        rc = -errno;
    else {
        rc = fileio_write_full(fd, "ckptsync\n", 9);
        if (close(fd) < 0 && rc == 0)
            rc = -errno;
        if (unlink(path) < 0 && rc == 0)
            rc = -errno;
    }
    if (rc < 0)
        region_set_error(r, "region '%s': directory \"%s\" is not writable: %s", r->conf.name,
                         r->conf.path, err_str(rc));
    return rc;
}

static int dir_check(struct region *r)
{
    struct stat st;
    if (stat(r->conf.path, &st) < 0) {
        int e = -errno;
        if (e == -ENOENT)
            region_set_error(r, "region '%s': directory \"%s\" does not exist", r->conf.name,
                             r->conf.path);
        else
            dir_fail(r, "directory", r->conf.path, e);
        return e;
    }
    if (!S_ISDIR(st.st_mode)) {
        region_set_error(r, "region '%s': \"%s\" is not a directory", r->conf.name, r->conf.path);
        return -ENOTDIR;
    }
    return dir_probe(r);
}

/* ---- clock ------------------------------------------------------------ */

static double dir_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* region_clock: the mtime whoever stores the root gives a new file.  Not
 * O_EXCL: an NFS exclusive create parks its verifier in the times and has
 * the client set them afterwards; a plain create is stamped by the server.
 * A file system that keeps whole seconds shows as tv_nsec 0. */
static int dir_clock(struct region *r, struct region_clock *ret)
{
    char path[DIR_PATH_MAX], name[64];
    struct stat st;
    uint32_t salt = 0; /* two hosts' pruners with one pid on one NFS share */
    if (getrandom(&salt, sizeof(salt), GRND_NONBLOCK) != (ssize_t)sizeof(salt))
        salt = (uint32_t)(dir_now() * 1e6);
    snprintf(name, sizeof(name), DIR_CLOCK_NAME ".%ld.%08x", (long)getpid(), (unsigned)salt);
    int rc = dir_path(r, name, path);
    if (rc < 0)
        return dir_fail(r, "reading the clock with", r->conf.path, rc);
    double t0 = dir_now();
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        return dir_fail(r, "reading the clock with", path, -errno);
    rc = fstat(fd, &st) < 0 ? -errno : 0;
    double t1 = dir_now();
    close(fd);
    if (unlink(path) < 0 && rc == 0)
        rc = -errno;
    if (rc < 0)
        return dir_fail(r, "reading the clock with", path, rc);
    double coarse = st.st_mtim.tv_nsec ? 0.01 : 0.5; /* a jiffy, or whole seconds */
    ret->local = (t0 + t1) / 2;
    ret->store = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9 +
                 (st.st_mtim.tv_nsec ? 0 : 0.5);
    ret->error = (t1 - t0) / 2 + coarse;
    return 0;
}

static void dir_free(struct region *r)
{
    free(r);
}

static const struct region_ops dir_ops = {
    .kind = "dir",
    .put = dir_put,
    .put_new = dir_put_new,
    .get = dir_get,
    .get_range = dir_get_range,
    .has = dir_has,
    .list = dir_list,
    .del = dir_del,
    .check = dir_check,
    .clock = dir_clock,
    .tidy = dirtidy_run,
    .free = dir_free,
};

int region_dir_new(const struct region_conf *conf, struct region **ret, struct buf *err)
{
    if (conf->path[0] == 0) {
        if (err)
            buf_printf(err, "region '%s': kind dir needs a path", conf->name);
        return CKS_E_CONFIG;
    }
    struct region *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->ops = &dir_ops;
    r->conf = *conf;
    r->preconditions = conf->no_preconditions ? 0 : 1;
    *ret = r;
    return 0;
}

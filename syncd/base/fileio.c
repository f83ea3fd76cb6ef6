/*
 * fileio.c — durable atomic writes, bounded reads, mkdir -p.
 *
 * Design note.  A durable replacement is the classic sequence (git's
 * lockfile, redis's rdbSave): create ".<name>.tmp.<pid>.<random>" next to
 * the target with O_EXCL (so two writers never share a temp file and a
 * stale one is never reused), write everything, fsync the file, rename it
 * over the target, fsync the directory so the rename itself survives a
 * crash.  Every failure before the rename unlinks the temp file; a failure
 * of the final directory fsync is reported but cannot be undone (the new
 * content is already visible), so callers must treat it as a durability
 * failure, never as "nothing happened".  fileio_write_new_at() is the
 * same sequence with link(2) in place of rename(2), for objects that must
 * be created once and never replaced.
 *
 * The temp file is created with the caller's mode and then fchmod()ed to
 * exactly that mode, so the result does not depend on the process umask.
 *
 * Reads are bounded: fstat() rejects a file that is already too large
 * before anything is allocated, and the read loop still enforces the bound
 * for files that grow while they are read (or report size 0, like /proc).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"

/* Temp names keep at most this much of the target name, so that
 * ".<name>.tmp.<pid>.<random>" stays within NAME_MAX (255). */
#define TMP_NAME_KEEP 200
#define TMP_ATTEMPTS 16

/* Writes of at least this much go through a pipe (fileio_splice). */
#define SPLICE_MIN (64 * 1024)
#define SPLICE_PIPE (1024 * 1024)

/* Writes data into fd (at *off, or at its file offset when off is NULL)
 * without copying it from user memory in write(2): vmsplice(2) lends the
 * caller's pages to a pipe, and splice(2) copies them into the file
 * inside the kernel, as copy_file_range(2) does for cp.  On some kernels
 * a buffered write(2) into a filesystem's page cache costs many times an
 * in-kernel copy: on this project's 2-core test VM (Linux 6.18, ext4),
 * 512 files of 2 MiB each written three times took 14-29 s by write(2)
 * and 1.2-1.7 s by vmsplice + splice.  The pipe is drained before
 * return, so the caller's buffer is free again at once.  Returns the
 * bytes written (all of len, or fewer when the file or kernel cannot
 * splice: the caller writes the rest), or -errno for a failure of the
 * file itself. */
static ssize_t fileio_splice(int fd, const uint8_t *p, size_t len, loff_t *off)
{
    int pp[2];
    size_t done = 0;
    ssize_t ret = 0;

    if (pipe2(pp, O_CLOEXEC) < 0)
        return 0;
    (void)fcntl(pp[1], F_SETPIPE_SZ, SPLICE_PIPE); /* a smaller pipe only means more calls */
    while (done < len) {
        struct iovec iov = {.iov_base = (void *)(p + done), .iov_len = len - done};
        ssize_t n = vmsplice(pp[1], &iov, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t moved = 0; moved < n;) {
            ssize_t k = splice(pp[0], NULL, fd, off, (size_t)(n - moved), 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
                ret = (ssize_t)(done + (size_t)moved); /* this file cannot splice */
                goto out;
            }
            if (k <= 0) {
                ret = k < 0 ? -errno : -EIO;
                goto out;
            }
            moved += k;
        }
        done += (size_t)n;
    }
    ret = (ssize_t)done;
out:
    close(pp[0]);
    close(pp[1]);
    return ret;
}

int fileio_write_full(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;

    if (len >= SPLICE_MIN) {
        ssize_t n = fileio_splice(fd, p, len, NULL);
        if (n < 0)
            return (int)n;
        p += n;
        len -= (size_t)n;
    }
    while (len > 0) {
        ssize_t n = write(fd, p, len > SSIZE_MAX ? SSIZE_MAX : len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int fileio_pwrite_full(int fd, const void *data, size_t len, off_t off)
{
    const uint8_t *p = data;

    if (off < 0)
        return -EINVAL;
    if (len >= SPLICE_MIN) {
        loff_t o = off;
        ssize_t n = fileio_splice(fd, p, len, &o);
        if (n < 0)
            return (int)n;
        p += n;
        off += n;
        len -= (size_t)n;
    }
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len > SSIZE_MAX ? SSIZE_MAX : len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        p += n;
        off += n;
        len -= (size_t)n;
    }
    return 0;
}

ssize_t fileio_read_full(int fd, void *data, size_t len)
{
    uint8_t *p = data;
    size_t done = 0;

    if (len > SSIZE_MAX)
        return -EINVAL;
    while (done < len) {
        ssize_t n = read(fd, p + done, len - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

/* close(2) whose error matters: on Linux the descriptor is gone even when
 * close fails (EINTR included), so it is never retried. */
static int close_checked(int fd)
{
    return close(fd) < 0 ? -errno : 0;
}

static int fsync_fd(int fd)
{
    for (;;) {
        if (fsync(fd) == 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

int fileio_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fsync_fd(fd);
    int rc = close_checked(fd);
    return r < 0 ? r : rc;
}

static bool name_is_component(const char *name)
{
    return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

static uint64_t tmp_random(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
        return v;
    /* No entropy yet (early boot): uniqueness, not secrecy, is what matters,
     * and O_EXCL catches any collision. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    static unsigned counter;
    return ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)++counter;
}

/* Creates the temp file; on success fills tmp (size NAME_MAX + 1). */
static int tmp_create(int dirfd, const char *name, mode_t mode, char *tmp, size_t tmpsize)
{
    for (int i = 0; i < TMP_ATTEMPTS; i++) {
        int n = snprintf(tmp, tmpsize, ".%.*s.tmp.%ld.%016llx", TMP_NAME_KEEP, name, (long)getpid(),
                         (unsigned long long)tmp_random());
        if (n < 0 || (size_t)n >= tmpsize)
            return -ENAMETOOLONG;
        int fd = openat(dirfd, tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

/* Objects of at least DIRECT_MIN bytes whose buffer is DIRECT_ALIGN
 * aligned are written around the page cache (O_DIRECT), their last
 * partial block buffered.  A temp file is written once, fsynced and never
 * read back by its writer, so the page cache holds nothing of use: on a
 * training node it would only push out what the trainer reads, and on
 * this project's test VM filling fresh page-cache pages was the daemon's
 * largest cost (800 objects of 2 MiB, three copies each, fsynced: 21.7-36
 * s through the page cache by splice, 5.9-7.7 s by O_DIRECT).  A file
 * system that refuses O_DIRECT (EINVAL: tmpfs before 6.6, FUSE, other
 * block sizes) gets a buffered write, whatever part remains. */
#define DIRECT_MIN (1024 * 1024)
#define DIRECT_ALIGN 4096

static int tmp_write(int fd, const uint8_t *p, size_t len)
{
    size_t head = len & ~(size_t)(DIRECT_ALIGN - 1), done = 0;
    int fl;
    if (len < DIRECT_MIN || ((uintptr_t)p & (DIRECT_ALIGN - 1)) || (fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl | O_DIRECT) < 0)
        return fileio_write_full(fd, p, len);
    while (done < head) {
        ssize_t n = write(fd, p + done, head - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EINVAL)
            break; /* not here: the rest buffered */
        if (n <= 0) {
            int e = n < 0 ? -errno : -EIO;
            (void)fcntl(fd, F_SETFL, fl);
            return e;
        }
        done += (size_t)n;
    }
    if (fcntl(fd, F_SETFL, fl) < 0)
        return -errno;
    return fileio_write_full(fd, p + done, len - done);
}

/* Everything between creating the temp file and the rename. */
static int tmp_fill(int fd, const void *data, size_t len, mode_t mode)
{
    int r = fchmod(fd, mode) < 0 ? -errno : 0;
    if (r == 0)
        r = tmp_write(fd, data, len);
    if (r == 0)
        r = fsync_fd(fd);
    int rc = close_checked(fd);
    return r < 0 ? r : rc;
}

int fileio_write_atomic_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode)
{
    char tmp[NAME_MAX + 1];

    if (!name_is_component(name))
        return -EINVAL;
    int fd = tmp_create(dirfd, name, mode, tmp, sizeof(tmp));
    if (fd < 0)
        return fd;
    int r = tmp_fill(fd, data, len, mode);
    if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
        r = -errno;
    if (r < 0) {
        unlinkat(dirfd, tmp, 0);
        return r;
    }
    return fsync_fd(dirfd);
}

/* link(2) rather than rename(2): it refuses an existing target.  Over NFS a
 * retransmitted LINK whose first reply was lost answers EEXIST although it
 * was ours; the temp file's link count (2: it and the target) tells.  The
 * directory is fsynced on EEXIST too, so that what the caller is told
 * exists survives a crash even when its writer has not synced it yet. */
int fileio_write_new_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode)
{
    char tmp[NAME_MAX + 1];
    struct stat st;

    if (!name_is_component(name))
        return -EINVAL;
    int fd = tmp_create(dirfd, name, mode, tmp, sizeof(tmp));
    if (fd < 0)
        return fd;
    int r = tmp_fill(fd, data, len, mode);
    if (r == 0 && linkat(dirfd, tmp, dirfd, name, 0) < 0) {
        r = -errno;
        if (fstatat(dirfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_nlink == 2)
            r = 0;
    }
    unlinkat(dirfd, tmp, 0);
    if (r < 0 && r != -EEXIST)
        return r;
    int rs = fsync_fd(dirfd);
    return r < 0 ? r : rs;
}

int fileio_write_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    char *dir;

    if (!name_is_component(name))
        return -EINVAL;
    if (!slash)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (!dir)
        return -ENOMEM;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = dirfd < 0 ? -errno : 0;
    free(dir);
    if (r < 0)
        return r;
    r = fileio_write_atomic_at(dirfd, name, data, len, mode);
    int rc = close_checked(dirfd);
    return r < 0 ? r : rc;
}

/* Reads fd to EOF into a buffer of at most max bytes (plus a NUL). */
static int read_bounded(int fd, size_t hint, size_t max, uint8_t **ret_data, size_t *ret_len)
{
    size_t cap = (hint < max ? hint : max) + 1; /* +1 detects growth past EOF/max */
    size_t len = 0;
    uint8_t *data = NULL;

    for (;;) {
        uint8_t *p = realloc(data, cap + 1);
        if (!p) {
            free(data);
            return -ENOMEM;
        }
        data = p;
        ssize_t n = fileio_read_full(fd, data + len, cap - len);
        if (n < 0) {
            free(data);
            return (int)n;
        }
        len += (size_t)n;
        if (len > max) {
            free(data);
            return CKS_E_LIMIT;
        }
        if (len < cap)
            break;
        /* The file grew (or fstat said 0): grow, but never beyond max + 1. */
        cap = cap > max / 2 ? max + 1 : cap * 2;
    }
    data[len] = 0;
    *ret_data = data;
    *ret_len = len;
    return 0;
}

int fileio_read_all(const char *path, size_t max, uint8_t **ret_data, size_t *ret_len)
{
    struct stat st;

    if (max >= SIZE_MAX - 2 || max > SSIZE_MAX - 1)
        max = SSIZE_MAX - 2; /* keeps max + 2 (bound byte, NUL) representable */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fstat(fd, &st) < 0 ? -errno : 0;
    if (r == 0 && S_ISDIR(st.st_mode))
        r = -EISDIR;
    if (r == 0 && st.st_size > 0 && (uint64_t)st.st_size > max)
        r = CKS_E_LIMIT;
    if (r == 0)
        r = read_bounded(fd, st.st_size > 0 ? (size_t)st.st_size : 4096, max, ret_data, ret_len);
    close(fd);
    return r;
}

/* mkdir for one component; reports whether it was created. */
static int mkdir_one(const char *path, mode_t mode, bool *ret_created)
{
    struct stat st;

    *ret_created = false;
    if (mkdir(path, mode) == 0) {
        *ret_created = true;
        return 0;
    }
    int r = -errno;
    /* EEXIST, but also EACCES/EROFS on a component that already exists. */
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
    return r;
}

/* fsync the parent of the component that ends at path[end]. */
static int fsync_parent(char *path, size_t end)
{
    size_t p = end;
    while (p > 0 && path[p - 1] != '/')
        p--;
    if (p == 0)
        return fileio_fsync_dir(".");
    if (p == 1)
        return fileio_fsync_dir("/");
    char save = path[p - 1];
    path[p - 1] = '\0';
    int r = fileio_fsync_dir(path);
    path[p - 1] = save;
    return r;
}

int fileio_mkdir_p(const char *path, mode_t mode)
{
    if (path[0] == '\0')
        return -ENOENT;
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    size_t len = strlen(p);
    int r = 0;
    for (size_t i = 1; i <= len && r == 0; i++) {
        if (i < len && p[i] != '/')
            continue;
        if (p[i - 1] == '/')
            continue; /* "//" or a trailing slash: no new component */
        char save = p[i];
        p[i] = '\0';
        bool created;
        r = mkdir_one(p, mode, &created);
        if (r == 0 && created)
            r = fsync_parent(p, i);
        p[i] = save;
    }
    free(p);
    return r;
}

int fileio_abspath(const char *path, char *dst, size_t cap)
{
    char cwd[PATH_MAX];
    int n;
    if (path[0] == '/')
        n = snprintf(dst, cap, "%s", path);
    else if (!getcwd(cwd, sizeof(cwd)))
        return errno == ERANGE ? -ENAMETOOLONG : -errno;
    else
        n = snprintf(dst, cap, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, path);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/*
 * pin.c — pin folders.  Removal walks the folder itself (it is flat, and
 * holds nothing but our links), so a crash that left a half-made pin is
 * cleaned the same way as a finished one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/log.h"
#include "daemon/pin.h"

int pin_create(const char *root, const char *id, struct buf *ret_path)
{
    struct buf top = BUF_INIT;
    int e = buf_printf(&top, "%s/%s", root, PIN_DIRNAME);
    if (e == 0 && mkdir(buf_str(&top), 0700) < 0 && errno != EEXIST)
        e = -errno;
    buf_reset(ret_path);
    if (e == 0)
        e = buf_printf(ret_path, "%s/%s", buf_str(&top), id);
    if (e == 0 && mkdir(buf_str(ret_path), 0700) < 0 && errno != EEXIST)
        e = -errno;
    if (e < 0)
        log_error("creating pin folder in \"%s/%s\": %s", root, PIN_DIRNAME, strerror(-e));
    buf_free(&top);
    return e;
}

int pin_link(const char *pin, size_t index, const char *src)
{
    char name[32];
    snprintf(name, sizeof(name), "%zu", index);
    int dfd = open(pin, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int e = linkat(AT_FDCWD, src, dfd, name, 0) < 0 ? -errno : 0;
    if (e == -EEXIST) {
        unlinkat(dfd, name, 0);
        e = linkat(AT_FDCWD, src, dfd, name, 0) < 0 ? -errno : 0;
    }
    close(dfd);
    return e;
}

int pin_remove(const char *pin)
{
    int dfd = open(pin, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -errno;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -errno;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
    if (rmdir(pin) < 0 && errno != ENOENT) {
        log_warn("removing pin folder \"%s\": %s", pin, strerror(errno));
        return -errno;
    }
    return 0;
}

int pin_cleanup(const char *root, int (*keep)(void *ud, const char *path), void *ud)
{
    struct buf top = BUF_INIT, p = BUF_INIT;
    buf_printf(&top, "%s/%s", root, PIN_DIRNAME);
    DIR *d = opendir(buf_str(&top));
    int n = 0;
    if (!d) {
        buf_free(&top);
        return errno == ENOENT ? 0 : -errno;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        buf_reset(&p);
        buf_printf(&p, "%s/%s", buf_str(&top), de->d_name);
        if (!keep(ud, buf_str(&p)) && pin_remove(buf_str(&p)) == 0)
            n++;
    }
    closedir(d);
    if (n)
        log_info("removed %d stale pin folder%s from \"%s\"", n, n == 1 ? "" : "s", buf_str(&top));
    buf_free(&top);
    buf_free(&p);
    return n;
}

/*
 * latepin.c — pinning, before a publish, a file ingest did not pin
 * (daemon/latepin.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "daemon/latepin.h"
#include "daemon/pin.h"

/* The file's path now: <root>/<unit's parent>/<path> (manifest paths start
 * with the unit's base name, engine/walk.h), root from the pin folder
 * <root>/.ckptsync-pins/<id>. */
static int latepin_source(const char *pin, const char *unit, const char *path, struct buf *ret)
{
    const char *id = strrchr(pin, '/');
    const char *up = strrchr(unit, '/');
    size_t top = sizeof(PIN_DIRNAME); /* "/" PIN_DIRNAME */
    if (!id || (size_t)(id - pin) < top || memcmp(id - top + 1, PIN_DIRNAME, top - 1) != 0 ||
        id[-(ptrdiff_t)top] != '/')
        return -EINVAL;
    int e = buf_printf(ret, "%.*s/", (int)(id - pin - (ptrdiff_t)top), pin);
    if (e == 0 && up)
        e = buf_printf(ret, "%.*s/", (int)(up - unit), unit);
    return e < 0 ? e : buf_printf(ret, "%s", path);
}

/* 1 when the index maps the identity st (of kind f->dkind) to f's digest,
 * with its chunk list into chunks and n (the caller frees). */
static int latepin_known(struct index_txn *t, const struct stat *st, const struct mfile *f,
                         struct mchunk **chunks, size_t *n)
{
    struct index_file_key key;
    uint8_t digest[HASH_LEN];
    index_file_key_of(st, &key);
    key.kind = (uint8_t)f->dkind; /* the record ingest made */
    int e = index_file_get(t, &key, digest, chunks, n);
    if (e == -ENOENT)
        return 0;
    return e < 0 ? e : memcmp(digest, f->digest, HASH_LEN) == 0;
}

/* The link just made is the inode checked (a rename over the name
 * between the check and the link is a change): its record again under
 * the identity it has now.  0: not the same inode (the link removed). */
static int latepin_rekey(struct index_txn *t, const char *link, const struct stat *was,
                         const struct mfile *f, const struct mchunk *chunks, size_t n)
{
    struct stat now;
    struct index_file_key key;
    if (lstat(link, &now) < 0)
        return -errno;
    if (now.st_dev != was->st_dev || now.st_ino != was->st_ino || now.st_size != was->st_size ||
        now.st_mtim.tv_sec != was->st_mtim.tv_sec || now.st_mtim.tv_nsec != was->st_mtim.tv_nsec) {
        unlink(link);
        return 0;
    }
    index_file_key_of(&now, &key);
    key.kind = (uint8_t)f->dkind;
    int e = index_file_put(t, &key, f->digest, chunks, n);
    return e < 0 ? e : 1;
}

#ifdef CKS_TEST_HOOKS
/* CKPTSYNC_TEST_LATEPIN_GATE=<path>: the first late pin of the process
 * creates <path>.reached and waits (60 s at most) until <path> exists,
 * before its identity test, so a test changes the file at that point. */
static void latepin_test_gate(void)
{
    static atomic_bool spent;
    const char *gate = getenv("CKPTSYNC_TEST_LATEPIN_GATE");
    char reached[4096];
    if (!gate || atomic_exchange(&spent, true))
        return;
    snprintf(reached, sizeof(reached), "%s.reached", gate);
    int fd = open(reached, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    log_info("test gate: late pin waits for \"%s\"", gate);
    for (int i = 0; i < 6000 && access(gate, F_OK) < 0; i++)
        usleep(10000);
}
#else
static void latepin_test_gate(void)
{
}
#endif

/* Links src as <pin>/k (link) when the index still maps its identity to
 * f's digest: 1 linked, 0 changed, gone or not linkable, < 0 an error. */
static int latepin_link(struct index_txn *t, const char *pin, size_t k, const char *src,
                        const char *link, const struct mfile *f)
{
    struct mchunk *chunks = NULL;
    size_t n = 0;
    struct stat st;
    latepin_test_gate();
    if (lstat(src, &st) < 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    int e = S_ISREG(st.st_mode) ? latepin_known(t, &st, f, &chunks, &n) : 0;
    if (e == 1 && (e = pin_link(pin, k, src)) == 0)
        e = latepin_rekey(t, link, &st, f, chunks, n);
    free(chunks);
    /* rotated away between the check and the link, or a file that cannot
     * be linked (ingest then reads the retaken unit in place) */
    return e == -ENOENT || e == -EXDEV || e == -EPERM || e == -EMLINK ? 0 : e;
}

int latepin_file(struct index_txn *t, const char *pin, const char *unit, const struct mfile *f,
                 size_t k)
{
    struct buf src = BUF_INIT, link = BUF_INIT;
    struct stat st;
    int e = buf_printf(&link, "%s/%zu", pin, k);
    if (e == 0 && lstat(buf_str(&link), &st) == 0) {
        buf_free(&link);
        return 1; /* pinned at ingest, or by an earlier confirmation */
    }
    if (e == 0 && errno != ENOENT)
        e = -errno;
    if (e == 0)
        e = latepin_source(pin, unit, f->path, &src);
    if (e == 0)
        e = latepin_link(t, pin, k, buf_str(&src), buf_str(&link), f);
    if (e == 0)
        log_warn("\"%s\": not pinned at ingest, and changed, gone or not linkable since; "
                 "snapshot chunks that a region lost cannot be uploaded again from it",
                 buf_str(&src));
    else if (e == 1)
        log_info("\"%s\": pinned now (a region lost chunks of it that the index recorded "
                 "there)",
                 buf_str(&src));
    buf_free(&src);
    buf_free(&link);
    return e;
}

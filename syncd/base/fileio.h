/*
 * fileio.h — durable file writes and bounded reads.
 *
 * The one routine for every file that must survive a crash:
 *   write a temp file next to the target (O_EXCL), fsync it, rename it over
 *   the target, fsync the directory.
 * Order kept everywhere in ckptsync (see include/ckptsync/format.h):
 *   chunk data durable -> index committed -> manifest published -> caller told.
 *
 * All functions return 0 or a negative errno; on failure nothing is left
 * behind (the temp file is unlinked).  Thread-safe (no shared state).
 */
#ifndef CKS_FILEIO_H
#define CKS_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Write data to path atomically and durably with the given mode. */
int fileio_write_atomic(const char *path, const void *data, size_t len, mode_t mode);
/* Same, relative to an open directory fd; name must be a single component. */
int fileio_write_atomic_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode);
/* Same, but creates name only when nothing has that name: the temp file is
 * link(2)ed into place instead of renamed.  -EEXIST (nothing changed) when
 * name exists; durable like fileio_write_atomic_at when it returns 0. */
int fileio_write_new_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode);
/* Read a whole file; fails with CKS_E_LIMIT if it is larger than max. */
int fileio_read_all(const char *path, size_t max, uint8_t **ret_data, size_t *ret_len);
/* fsync a directory by path. */
int fileio_fsync_dir(const char *path);
/* mkdir -p with mode for created components; fsyncs each parent it changes. */
int fileio_mkdir_p(const char *path, mode_t mode);
/* path made absolute (a relative one is taken from the current directory)
 * into dst: 0, -ENAMETOOLONG when it does not fit in cap, or getcwd's
 * -errno. */
int fileio_abspath(const char *path, char *dst, size_t cap);
/* write(2)/pwrite(2)/read(2) loops that handle short counts and EINTR. */
int fileio_write_full(int fd, const void *data, size_t len);
int fileio_pwrite_full(int fd, const void *data, size_t len, off_t off);
/* Reads up to len bytes; returns the count read (short only at EOF) or -errno. */
ssize_t fileio_read_full(int fd, void *data, size_t len);

#endif

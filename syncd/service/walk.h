/*
 * walk.h — list what a snapshot will hold: PATH itself (a file or a
 * directory) and, for a directory, everything below it, in a stable order
 * (names sorted bytewise, parents before children).
 *
 * Paths are relative to PATH's parent and start with PATH's base name, so
 * that a snapshot of "run/checkpoint-10" restores as "checkpoint-10/...".
 * Symlinks whose target would leave the snapshot, and special files
 * (fifos, sockets, devices), are skipped with a warning: restore could not
 * recreate them safely.  A regular file with other names in the snapshot
 * (hard links: same st_dev and st_ino) is listed as MFILE_REG under the
 * first name in this order and as MFILE_HARDLINK, link = that first path,
 * under the others.  The list owns its strings; walk_free() them.
 */
#ifndef CKS_WALK_H
#define CKS_WALK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "engine/manifest.h"

struct walk_entry {
    char *path; /* relative, starts with the root's base name */
    char *link; /* symlink target; hard link: the first name's path; else NULL */
    enum mfile_type type;
    struct stat st; /* lstat at listing time */
};

struct walk {
    char *base; /* absolute or as given: PATH's parent directory */
    struct walk_entry *v;
    size_t n, cap;
    uint64_t bytes; /* sum of regular file sizes (each inode once) */
    size_t skipped;
};

/* Returns 0 or -errno; err gets a message naming the path that failed. */
int walk_list(const char *path, struct walk *ret, struct buf *err);
void walk_free(struct walk *w);

#endif

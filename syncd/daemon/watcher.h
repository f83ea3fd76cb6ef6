/*
 * watcher.h — recursive inotify watch of the ckptsync root.
 *
 * Reports what happens under ROOT as (kind, path relative to ROOT, is_dir)
 * so that detect.c can tell when a checkpoint is complete.  Every directory
 * of the tree is watched; directories created or moved in later are
 * watched as they appear, and their contents are reported at once (files
 * can land in a new directory before its watch does).  Names starting with
 * ".ckptsync" (the daemon's pins, restore staging) are neither watched nor
 * reported, at any depth.  Symlinks are reported, never followed.
 *
 * Calling sequence (one thread, typically an epoll loop):
 *
 *   watcher_new(root, &w, &err);         watches the whole tree
 *   watcher_rescan(w, cb, ud);           reports what already exists
 *   loop: epoll on watcher_fd(w) (EPOLLIN), then watcher_read(w, cb, ud);
 *         when it returns -EOVERFLOW (cb got WATCH_OVERFLOW: events were
 *         lost), call watcher_rescan(w, cb, ud)
 *   watcher_free(w);
 *
 * Callbacks receive a relpath that is valid only during the call, never
 * empty and never starting with '/' — except for WATCH_OVERFLOW, which
 * concerns no path and passes "".  A callback must not call back into the
 * watcher (watcher_read/watcher_rescan return -EBUSY if it does).
 *
 * Kinds: WATCH_WRITE (IN_MODIFY), WATCH_CLOSE_WRITE, WATCH_CREATE (created,
 * or found by a scan), WATCH_MOVED_IN (renamed into place; also every entry
 * found inside a directory that was moved in), WATCH_DELETE (deleted, or
 * moved away from its name), WATCH_OVERFLOW (the kernel queue overflowed).
 * inotify cannot report a file opened for writing, so there is no such kind.
 *
 * Limits: when fs.inotify.max_user_watches is reached, the error is logged
 * once with the fix and the watcher goes on without watching the remaining
 * directories (their files are still reported by scans).  Memory is one
 * table slot plus the directory's name per watched directory.
 *
 * Ownership: the watcher owns its inotify descriptor and memory;
 * watcher_free(NULL) does nothing.  Not thread-safe: use one watcher from
 * one thread.
 */
#ifndef CKS_WATCHER_H
#define CKS_WATCHER_H

#include <stdbool.h>

#include "base/buf.h"

struct watcher;

enum watcher_event_kind {
    WATCH_WRITE,
    WATCH_CLOSE_WRITE,
    WATCH_CREATE,
    WATCH_MOVED_IN,
    WATCH_DELETE,
    WATCH_OVERFLOW,
};

typedef void (*watcher_cb)(void *ud, enum watcher_event_kind kind, const char *relpath,
                           bool is_dir);

/* Prefix of the names the watcher ignores (and the daemon uses for itself). */
#define WATCHER_PRIVATE_PREFIX ".ckptsync"

/*
 * Watches ROOT (an existing directory) and every directory below it.
 * Returns 0, or a negative errno with a message naming what failed in err
 * (err may be NULL).  Nothing is reported; call watcher_rescan() for that.
 */
int watcher_new(const char *root, struct watcher **ret, struct buf *err);
void watcher_free(struct watcher *w);

/* The non-blocking inotify descriptor, for epoll (EPOLLIN). */
int watcher_fd(const struct watcher *w);

/*
 * Reads the events available now (at most 4 MiB of them per call, so a busy
 * tree cannot starve the loop; the descriptor stays readable if more wait)
 * and reports each through cb (not NULL).  Returns the number of callbacks
 * made (>= 0), -EOVERFLOW when events were lost (the queue overflowed, or
 * memory ran out; WATCH_OVERFLOW was reported last): call watcher_rescan(),
 * or another negative errno.
 */
int watcher_read(struct watcher *w, watcher_cb cb, void *ud);

/*
 * Walks the whole tree again: watches directories not watched yet, forgets
 * watches of directories that are gone, and reports every entry found
 * (files and directories) as WATCH_CREATE.  Returns the number of entries
 * reported or a negative errno (the root is gone, out of memory).
 */
int watcher_rescan(struct watcher *w, watcher_cb cb, void *ud);

/* Number of directories currently watched (for status and tests). */
size_t watcher_count(const struct watcher *w);

#endif

/*
 * detect.h — decide when a unit under the watch root is complete, so the
 * daemon snapshots it once, whole, and not while it is being written.
 *
 * A unit is what one snapshot covers: a direct child (directory or file) of
 * a run directory, a run being a directory directly under the root.  Files
 * directly under the root are units of the run "_root" (DETECT_ROOT_RUN).
 * All paths are relative to the root ("run1/checkpoint-100/model.bin").
 * Names starting with ".ckptsync" (at any depth) are ignored, and so are
 * hidden runs (".name") and units whose name is transient
 * (ckptname_transient): a framework's staging folder is never a unit,
 * and the name it is renamed to is one as usual.
 *
 * A unit is ready at the first of (DESIGN.md, "Completion of a checkpoint"):
 *   DETECT_EXPLICIT  detector_commit() named it (or a path inside it);
 *   DETECT_MARKER    a framework marker was closed after writing or moved in:
 *                    DCP ".metadata" anywhere inside the unit directory; HF
 *                    "trainer_state.json" directly in it; DeepSpeed
 *                    "<run>/latest" naming a tag directory; Megatron
 *                    "<run>/latest_checkpointed_iteration.txt" naming
 *                    iter_%07d (or "release"); a file unit ending in .pt,
 *                    .pth, .ckpt, .safetensors or .bin;
 *   DETECT_QUIET     no event for settle seconds and no file open for
 *                    writing (a file with WATCH_WRITE and no close since);
 *                    after 10 x settle without events it is taken as
 *                    complete anyway, with a warning naming the open file.
 * The two marker files of a run are also units of their own (quiescence).
 * Any event on a ready unit makes it dirty again, whether it was already
 * returned or not.  A deleted unit (or run) is forgotten.
 *
 * Calling sequence (the daemon's loop):
 *
 *   detector_new(root, settle, &d);
 *   on each watcher event: detector_event(d, kind, relpath, is_dir, now);
 *   on a commit request:   detector_commit(d, path, step, now);
 *   on a flush request:    detector_flush(d, now);
 *   after events, and when detector_deadline(d) has passed:
 *       while (detector_next(d, now, &r) == 1) snapshot r.unit ...
 *   detector_free(d);
 *
 * Several units ready at once come out newest first: highest step, then
 * most recent event, then path.  Times are caller-supplied milliseconds
 * from any monotonic clock.
 *
 * The detector reads the DeepSpeed and Megatron marker files under root;
 * it never writes anything.  Memory: units are kept only while dirty or
 * ready-not-yet-returned; each tracks at most DETECT_OPEN_MAX open files.
 *
 * Ownership: the detector copies what it is given; detect_ready is filled
 * by value.  detector_free(NULL) does nothing.  Not thread-safe: one
 * thread.
 */
#ifndef CKS_DETECT_H
#define CKS_DETECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/watcher.h"
#include "engine/ckptname.h"

#define DETECT_ROOT_RUN "_root"
#define DETECT_UNIT_MAX 4096 /* longest unit path, with its NUL */
#define DETECT_OPEN_MAX 1024 /* open-for-writing files tracked per unit */
#define DETECT_STALL_FACTOR 10

enum detect_reason {
    DETECT_EXPLICIT,
    DETECT_MARKER,
    DETECT_QUIET,
};

struct detect_ready {
    char run[256];
    char unit[DETECT_UNIT_MAX]; /* relative to the root, e.g. "run1/checkpoint-100" */
    int64_t step;               /* -1: unknown */
    enum detect_reason reason;
};

struct detector;

/* settle_seconds of 0 makes units ready on the next detector_next(). */
int detector_new(const char *root, unsigned settle_seconds, struct detector **ret);
void detector_free(struct detector *d);

/* Feeds one watcher event (WATCH_OVERFLOW is ignored: the rescan follows). */
void detector_event(struct detector *d, enum watcher_event_kind kind, const char *relpath,
                    bool is_dir, int64_t now_ms);

/*
 * Makes the unit holding unit_relpath (the unit itself or a path inside
 * it) ready now, with step (-1: taken from the unit's name).  Returns 0,
 * -EINVAL (empty, absolute, "..", a ".ckptsync" name, or a run directory
 * rather than a unit), -ENAMETOOLONG, -errno when the unit does not exist,
 * or -ENOMEM.
 */
int detector_commit(struct detector *d, const char *unit_relpath, int64_t step, int64_t now_ms);

/* Returns 1 and fills ret with the newest ready unit (returned once), or 0. */
int detector_next(struct detector *d, int64_t now_ms, struct detect_ready *ret);

/*
 * Earliest time (ms) at which a dirty unit may become ready by quiescence,
 * or -1 when none is dirty.  It may be early (then detector_next() returns
 * 0 and the deadline moves), never late.  Units made ready by a marker or
 * a commit are not reflected: call detector_next() after feeding events.
 */
int64_t detector_deadline(const struct detector *d);

/*
 * Makes every dirty unit ready now (DETECT_QUIET), without waiting for
 * settle or for files open for writing: "snapshot what is there" (flush).
 */
void detector_flush(struct detector *d, int64_t now_ms);

/* Drops the unit holding unit_relpath, ready or not (e.g. it was deleted). */
void detector_forget(struct detector *d, const char *unit_relpath);

/* Dirty units not ready yet. */
size_t detector_pending(const struct detector *d);

#endif

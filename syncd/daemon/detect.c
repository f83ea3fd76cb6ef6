/*
 * detect.c — completion of units.
 *
 * Design.  A unit exists here only while something is pending on it: it is
 * created by its first event, becomes ready (marker, commit, quiescence),
 * and is freed when detector_next() hands it out.  A later event simply
 * creates it again, which is what "dirty again" means; so memory follows
 * the activity, not the size of the tree.  Units live in an open-addressing
 * hash table of pointers keyed by path (FNV-1a, backward-shift deletion).
 *
 * Quiescence is checked lazily: d->due is a lower bound of the earliest
 * quiet deadline.  Events only lower it; detector_next() rescans the table
 * once the bound has passed and sets it exactly.  So the common case, a
 * stream of writes, costs O(1) per event, and the O(units) scan runs about
 * once per settle period.
 *
 * Ready units wait in an array sorted oldest first and are popped from the
 * end, newest first; the array is sorted again only when it changed.
 *
 * "Open for writing" is what inotify lets us infer: a file with IN_MODIFY
 * and no IN_CLOSE_WRITE since.  A writer that opened a file and has not
 * written yet is invisible; one that never closes is waited for only
 * DETECT_STALL_FACTOR x settle.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/fileio.h"
#include "base/log.h"
#include "engine/ckptname.h"
#include "daemon/detect.h"

#define DETECT_MARKER_MAX 4096 /* bytes read of a DeepSpeed/Megatron marker file */

struct unit {
    char *path;
    uint64_t hash;
    int64_t step;
    int64_t last_ms; /* last event, commit or marker */
    enum detect_reason reason;
    bool ready;
    char **open; /* paths inside the unit ("" for a file unit) open for writing */
    size_t nopen, capopen;
};

struct detector {
    char *root;
    int64_t settle_ms;
    struct unit **tab;
    size_t cap, n; /* cap is 0 or a power of two; load kept <= 1/2 */
    struct unit **ready;
    size_t nready, capready;
    bool ready_sorted;
    int64_t due;         /* lower bound of the earliest quiet deadline, -1: none dirty */
    bool said_root_unit; /* the notice about checkpoints directly under the root */
    bool said_root_temp; /* ... and about in-progress names there */
};

/* Where an event path lies. */
struct loc {
    char run[256];
    size_t unit_len;  /* the unit is path[0, unit_len) */
    unsigned depth;   /* components in path */
    unsigned rdepth;  /* components as if under a run folder: depth, or depth + 1
                       * under a checkpoint folder directly under the root */
    bool root_unit;   /* the unit is a checkpoint folder directly under the root */
    const char *base; /* last component */
};

enum { LOC_NONE = -1, LOC_UNIT = 0, LOC_RUN = 1 };

/* ---- names ------------------------------------------------------------- */

static bool detect_private(const char *component)
{
    return !strncmp(component, WATCHER_PRIVATE_PREFIX, sizeof(WATCHER_PRIVATE_PREFIX) - 1);
}

static bool single_file_checkpoint(const char *base)
{
    static const char *const ext[] = {".pt", ".pth", ".ckpt", ".safetensors", ".bin"};
    size_t len = strlen(base);
    for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
        size_t l = strlen(ext[i]);
        if (len > l && !strcmp(base + len - l, ext[i]))
            return true;
    }
    return false;
}

/* A tag naming a directory in the run: one plain path component. */
static bool valid_tag(const char *tag)
{
    size_t len = strlen(tag);
    if (!len || len > 255 || strchr(tag, '/') || !strcmp(tag, ".") || !strcmp(tag, ".."))
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)tag[i] < 0x20 || tag[i] == 0x7f)
            return false;
    return !detect_private(tag);
}

/* ---- paths ------------------------------------------------------------- */

/*
 * Is the folder `name`, directly under the root, a checkpoint rather than
 * a run?  By its name, as a checkpoint's step is found (checkpoint-500,
 * global_step1000, iter_0001000, step_1000): Hugging Face with
 * output_dir=<root> writes <root>/checkpoint-500/.  Decided from the name
 * alone, so the first event under it already knows.
 */
static bool root_checkpoint_dir(const char *name, size_t len)
{
    char first[256];
    if (len >= sizeof(first))
        return false;
    memcpy(first, name, len);
    first[len] = '\0';
    return ckptname_step(first) >= 0;
}

/* Finds the run and unit of relpath (components already checked). */
static int loc_split(const char *relpath, size_t len, bool is_dir, const size_t cut[2],
                     struct loc *ret)
{
    ret->root_unit = (ret->depth >= 2 || is_dir) && root_checkpoint_dir(relpath, cut[0]);
    ret->rdepth = ret->depth + ret->root_unit;
    if (ret->root_unit) {
        memcpy(ret->run, DETECT_ROOT_RUN, sizeof(DETECT_ROOT_RUN));
        ret->unit_len = cut[0];
        return LOC_UNIT;
    }
    if (ret->depth == 1 && is_dir) {
        if (len >= sizeof(ret->run))
            return LOC_NONE;
        memcpy(ret->run, relpath, len + 1);
        return LOC_RUN;
    }
    if (ret->depth == 1) {
        memcpy(ret->run, DETECT_ROOT_RUN, sizeof(DETECT_ROOT_RUN));
        ret->unit_len = len;
        return LOC_UNIT;
    }
    if (cut[0] >= sizeof(ret->run))
        return LOC_NONE;
    memcpy(ret->run, relpath, cut[0]);
    ret->run[cut[0]] = '\0';
    ret->unit_len = cut[1];
    return LOC_UNIT;
}

/* Classifies relpath: LOC_UNIT (inside or being a unit), LOC_RUN, LOC_NONE.
 * A hidden run and a transient unit name (ckptname_transient) are
 * LOC_NONE: no event under them makes a unit. */
static int detect_locate(const char *relpath, bool is_dir, struct loc *ret)
{
    size_t len = strlen(relpath), cut[2] = {len, len};
    const char *p = relpath;

    if (!len || len >= DETECT_UNIT_MAX)
        return LOC_NONE;
    ret->depth = 0;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t l = slash ? (size_t)(slash - p) : strlen(p);
        if (!l || detect_private(p) || (l == 2 && !strncmp(p, "..", 2)))
            return LOC_NONE;
        if (ret->depth < 2)
            cut[ret->depth] = (size_t)(p - relpath) + l;
        ret->depth++;
        ret->base = p;
        if (!slash)
            break;
        p = slash + 1;
    }
    if (relpath[0] == '.') /* a hidden run, or a hidden file under the root */
        return LOC_NONE;
    /* Directly under the root an in-progress name is nothing, file or folder
     * (tmp-checkpoint-500 is Hugging Face's staging of checkpoint-500, not a
     * run); below a run, the unit's name (the second component). */
    if (ckptname_transient(relpath, cut[0]))
        return LOC_NONE;
    if (ret->depth >= 2 && !root_checkpoint_dir(relpath, cut[0]) &&
        ckptname_transient(relpath + cut[0] + 1, cut[1] - cut[0] - 1))
        return LOC_NONE;
    return loc_split(relpath, len, is_dir, cut, ret);
}

/*
 * Normalizes a commit path: relative to the root (or absolute under it),
 * without empty or "." components; ".." is refused.
 */
static int detect_normalize(const struct detector *d, const char *in, char *out, size_t size)
{
    size_t rl = strlen(d->root), len = 0;

    if (in[0] == '/') {
        if (strncmp(in, d->root, rl) || (in[rl] != '/' && in[rl] != '\0'))
            return -EINVAL;
        in += rl;
    }
    while (*in) {
        size_t l = strcspn(in, "/");
        if (l == 2 && !strncmp(in, "..", 2))
            return -EINVAL;
        if (l && !(l == 1 && in[0] == '.')) {
            if (len + l + 2 > size)
                return -ENAMETOOLONG;
            if (len)
                out[len++] = '/';
            memcpy(out + len, in, l);
            len += l;
        }
        in += l + (in[l] == '/');
    }
    out[len] = '\0';
    return len ? 0 : -EINVAL;
}

static int detector_lstat(const struct detector *d, const char *relpath, struct stat *st)
{
    struct buf path = BUF_INIT;
    int r = buf_printf(&path, "%s/%s", d->root, relpath);
    if (r >= 0 && lstat(buf_str(&path), st) < 0)
        r = -errno;
    buf_free(&path);
    return r;
}

/* ---- unit table -------------------------------------------------------- */

static uint64_t path_hash(const char *s, size_t len)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static struct unit *unit_find(const struct detector *d, const char *path, size_t len)
{
    if (!d->cap)
        return NULL;
    uint64_t h = path_hash(path, len);
    for (size_t i = h & (d->cap - 1);; i = (i + 1) & (d->cap - 1)) {
        struct unit *u = d->tab[i];
        if (!u)
            return NULL;
        if (u->hash == h && !strncmp(u->path, path, len) && !u->path[len])
            return u;
    }
}

static void tab_place(struct unit **tab, size_t cap, struct unit *u)
{
    size_t i = u->hash & (cap - 1);
    while (tab[i])
        i = (i + 1) & (cap - 1);
    tab[i] = u;
}

static int tab_grow(struct detector *d)
{
    size_t cap = d->cap ? d->cap * 2 : 64;
    struct unit **tab = calloc(cap, sizeof(*tab));
    if (!tab)
        return -ENOMEM;
    for (size_t i = 0; i < d->cap; i++)
        if (d->tab[i])
            tab_place(tab, cap, d->tab[i]);
    free(d->tab);
    d->tab = tab;
    d->cap = cap;
    return 0;
}

static void tab_del(struct detector *d, const struct unit *u)
{
    size_t mask = d->cap - 1, hole = u->hash & mask, j;

    while (d->tab[hole] != u)
        hole = (hole + 1) & mask;
    for (j = hole;;) {
        j = (j + 1) & mask;
        if (!d->tab[j])
            break;
        size_t home = d->tab[j]->hash & mask;
        bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            d->tab[hole] = d->tab[j];
            hole = j;
        }
    }
    d->tab[hole] = NULL;
    d->n--;
}

static void unit_free(struct unit *u)
{
    if (!u)
        return;
    for (size_t i = 0; i < u->nopen; i++)
        free(u->open[i]);
    free(u->open);
    free(u->path);
    free(u);
}

/* Finds or creates the unit path[0, len). */
static struct unit *unit_get(struct detector *d, const char *path, size_t len)
{
    struct unit *u = unit_find(d, path, len);
    if (u)
        return u;
    if ((d->n + 1) * 2 > d->cap && tab_grow(d) < 0)
        return NULL;
    if (!(u = calloc(1, sizeof(*u))) || !(u->path = strndup(path, len))) {
        free(u);
        return NULL;
    }
    u->hash = path_hash(path, len);
    u->step = ckptname_step(u->path);
    u->reason = DETECT_QUIET;
    tab_place(d->tab, d->cap, u);
    d->n++;
    return u;
}

/* ---- ready list -------------------------------------------------------- */

static void ready_drop(struct detector *d, struct unit *u)
{
    for (size_t i = 0; i < d->nready; i++) {
        if (d->ready[i] == u) {
            memmove(d->ready + i, d->ready + i + 1, (d->nready - i - 1) * sizeof(*d->ready));
            d->nready--;
            break;
        }
    }
    u->ready = false;
}

/* Oldest first: lower step, then older event, then later path. */
static int ready_cmp(const void *pa, const void *pb)
{
    const struct unit *a = *(struct unit *const *)pa, *b = *(struct unit *const *)pb;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    if (a->last_ms != b->last_ms)
        return a->last_ms < b->last_ms ? -1 : 1;
    return strcmp(b->path, a->path);
}

/* Marks u ready for the given reason; step < 0 keeps the one it has. */
static void unit_ready(struct detector *d, struct unit *u, enum detect_reason reason, int64_t step)
{
    u->reason = reason;
    if (step >= 0)
        u->step = step;
    d->ready_sorted = false;
    if (u->ready)
        return;
    if (d->nready == d->capready) {
        size_t cap = d->capready ? d->capready * 2 : 16;
        struct unit **v = realloc(d->ready, cap * sizeof(*v));
        if (!v) {
            log_error("\"%s\": out of memory marking the unit ready", u->path);
            return;
        }
        d->ready = v;
        d->capready = cap;
    }
    d->ready[d->nready++] = u;
    u->ready = true;
}

static void unit_remove(struct detector *d, struct unit *u)
{
    if (u->ready)
        ready_drop(d, u);
    tab_del(d, u);
    unit_free(u);
}

/* ---- open files -------------------------------------------------------- */

static void open_add(struct unit *u, const char *rest)
{
    for (size_t i = 0; i < u->nopen; i++)
        if (!strcmp(u->open[i], rest))
            return;
    if (u->nopen == DETECT_OPEN_MAX)
        return; /* beyond the bound, a writer goes unnoticed; quiescence still applies */
    if (u->nopen == u->capopen) {
        size_t cap = u->capopen ? u->capopen * 2 : 4;
        char **v = realloc(u->open, cap * sizeof(*v));
        if (!v)
            return;
        u->open = v;
        u->capopen = cap;
    }
    if ((u->open[u->nopen] = strdup(rest)))
        u->nopen++;
}

/* Forgets rest (and, for a directory, everything below it) as open. */
static void open_del(struct unit *u, const char *rest, bool is_dir)
{
    size_t l = strlen(rest);
    for (size_t i = 0; i < u->nopen;) {
        const char *o = u->open[i];
        bool hit = !strcmp(o, rest) || (is_dir && (!l || (!strncmp(o, rest, l) && o[l] == '/')));
        if (!hit) {
            i++;
            continue;
        }
        free(u->open[i]);
        u->open[i] = u->open[--u->nopen];
    }
}

static void unit_track(struct unit *u, enum watcher_event_kind kind, const char *rest, bool is_dir)
{
    if (kind == WATCH_WRITE && !is_dir)
        open_add(u, rest);
    else if (kind == WATCH_CLOSE_WRITE || kind == WATCH_MOVED_IN || kind == WATCH_DELETE)
        open_del(u, rest, is_dir);
}

/* ---- quiescence -------------------------------------------------------- */

static int64_t unit_due(const struct detector *d, const struct unit *u)
{
    return u->last_ms + d->settle_ms * (u->nopen ? DETECT_STALL_FACTOR : 1);
}

static void detector_lower_due(struct detector *d, const struct unit *u)
{
    if (u->ready)
        return;
    int64_t t = unit_due(d, u);
    if (d->due < 0 || t < d->due)
        d->due = t;
}

static void detector_stalled(const struct detector *d, const struct unit *u)
{
    log_warn("\"%s\": nothing written for %" PRId64 " s but \"%s%s%s\" is still open for "
             "writing; taking the unit as complete",
             u->path, d->settle_ms * DETECT_STALL_FACTOR / 1000, u->path, u->open[0][0] ? "/" : "",
             u->open[0]);
}

/* Makes every unit whose quiet deadline passed ready; sets d->due exactly. */
static void detector_promote(struct detector *d, int64_t now)
{
    int64_t due = -1;
    for (size_t i = 0; i < d->cap; i++) {
        struct unit *u = d->tab[i];
        if (!u || u->ready)
            continue;
        int64_t t = unit_due(d, u);
        if (now >= t) {
            if (u->nopen)
                detector_stalled(d, u);
            unit_ready(d, u, DETECT_QUIET, -1);
            if (u->ready)
                continue;
            t = now + 1000; /* out of memory: try again later */
        }
        if (due < 0 || t < due)
            due = t;
    }
    d->due = due;
}

/* ---- markers ----------------------------------------------------------- */

/* First line of root/relpath (a regular file), trimmed, into out. */
static int marker_line(const struct detector *d, const char *relpath, char *out, size_t size)
{
    char text[DETECT_MARKER_MAX];
    struct buf path = BUF_INIT;
    struct stat st;
    int r = buf_printf(&path, "%s/%s", d->root, relpath);
    int fd = r < 0 ? -1 : open(buf_str(&path), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    ssize_t n = -EINVAL;

    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        n = fileio_read_full(fd, text, sizeof(text) - 1);
    else if (fd < 0)
        n = r < 0 ? r : -errno;
    if (fd >= 0)
        close(fd);
    buf_free(&path);
    if (n < 0)
        return (int)n;
    text[n] = '\0';
    char *s = text + strspn(text, " \t\r\n");
    size_t l = strcspn(s, "\r\n");
    while (l && (s[l - 1] == ' ' || s[l - 1] == '\t'))
        l--;
    if (l >= size)
        return -ENAMETOOLONG;
    memcpy(out, s, l);
    out[l] = '\0';
    return 0;
}

/* Makes run/tag ready if it is a directory. */
static void marker_target(struct detector *d, const char *run, const char *tag, int64_t step,
                          int64_t now)
{
    char unit[DETECT_UNIT_MAX];
    struct stat st;
    int n = strcmp(run, DETECT_ROOT_RUN) ? snprintf(unit, sizeof(unit), "%s/%s", run, tag)
                                         : snprintf(unit, sizeof(unit), "%s", tag);

    if (n < 0 || (size_t)n >= sizeof(unit))
        return;
    if (detector_lstat(d, unit, &st) < 0 || !S_ISDIR(st.st_mode)) {
        log_debug("\"%s\": named by a marker but not a directory", unit);
        return;
    }
    struct unit *u = unit_get(d, unit, (size_t)n);
    if (!u)
        return;
    u->last_ms = now;
    unit_ready(d, u, DETECT_MARKER, step);
    detector_lower_due(d, u);
}

/* DeepSpeed: <run>/latest holds the tag of the newest checkpoint. */
static void marker_deepspeed(struct detector *d, const struct loc *l, const char *relpath,
                             int64_t now)
{
    char tag[256];
    if (marker_line(d, relpath, tag, sizeof(tag)) < 0 || !valid_tag(tag)) {
        log_debug("\"%s\": not a DeepSpeed tag file", relpath);
        return;
    }
    marker_target(d, l->run, tag, ckptname_step(tag), now);
}

/* Megatron: <run>/latest_checkpointed_iteration.txt holds N or "release". */
static void marker_megatron(struct detector *d, const struct loc *l, const char *relpath,
                            int64_t now)
{
    char line[64], tag[64];
    int64_t step;

    if (marker_line(d, relpath, line, sizeof(line)) < 0)
        return;
    if (!strcmp(line, "release")) {
        marker_target(d, l->run, "release", -1, now);
        return;
    }
    if ((step = ckptname_number(line)) < 0 || line[strspn(line, "0123456789")]) {
        log_debug("\"%s\": not a Megatron iteration", relpath);
        return;
    }
    snprintf(tag, sizeof(tag), "iter_%07" PRId64, step);
    marker_target(d, l->run, tag, step, now);
}

/* A file was closed after writing or moved in at relpath, inside unit u. */
static void detector_markers(struct detector *d, struct unit *u, const struct loc *l,
                             const char *relpath, int64_t now)
{
    bool file_unit = relpath[l->unit_len] == '\0';

    if ((file_unit && single_file_checkpoint(l->base)) ||
        (l->rdepth >= 3 && !strcmp(l->base, ".metadata")) ||
        (l->rdepth == 3 && !strcmp(l->base, "trainer_state.json")))
        unit_ready(d, u, DETECT_MARKER, -1);
    /* a run's marker files: <run>/latest, or <root>/latest for the run _root */
    bool run_level = l->rdepth == 2 || (l->depth == 1 && !l->root_unit);
    if (run_level && !strcmp(l->base, "latest"))
        marker_deepspeed(d, l, relpath, now);
    else if (run_level && !strcmp(l->base, "latest_checkpointed_iteration.txt"))
        marker_megatron(d, l, relpath, now);
}

/* ---- public ------------------------------------------------------------ */

int detector_new(const char *root, unsigned settle_seconds, struct detector **ret)
{
    struct detector *d = calloc(1, sizeof(*d));
    if (!d || !(d->root = strdup(root))) {
        free(d);
        return -ENOMEM;
    }
    size_t l = strlen(d->root);
    while (l > 1 && d->root[l - 1] == '/')
        d->root[--l] = '\0';
    d->settle_ms = (int64_t)settle_seconds * 1000;
    d->due = -1;
    *ret = d;
    return 0;
}

void detector_free(struct detector *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->cap; i++)
        unit_free(d->tab[i]);
    free(d->tab);
    free(d->ready);
    free(d->root);
    free(d);
}

/* Drops every unit of run (and a "_root" file unit of that name). */
static void detector_forget_run(struct detector *d, const char *run)
{
    size_t l = strlen(run);
    bool removed;

    do { /* deletion shifts entries back, possibly past i: sweep until clean */
        removed = false;
        for (size_t i = 0; i < d->cap; i++) {
            struct unit *u = d->tab[i];
            if (u && !strncmp(u->path, run, l) && (u->path[l] == '/' || !u->path[l])) {
                unit_remove(d, u);
                removed = true;
            }
        }
    } while (removed);
}

/* The event made the unit path[0, len) dirty: it is no longer ready. */
static struct unit *detector_touch(struct detector *d, const char *path, size_t len, int64_t now)
{
    struct unit *u = unit_get(d, path, len);
    if (!u) {
        log_error("\"%.*s\": out of memory tracking the unit", (int)len, path);
        return NULL;
    }
    if (u->ready)
        ready_drop(d, u);
    u->reason = DETECT_QUIET;
    u->last_ms = now;
    return u;
}

/* Says once per daemon what it does with checkpoints written directly
 * under the root (README, "When is a checkpoint complete?"). */
static void detector_say_root(struct detector *d, const char *relpath, int where,
                              const struct loc *l)
{
    size_t first = strcspn(relpath, "/");
    if (where == LOC_UNIT && l->root_unit && !d->said_root_unit) {
        d->said_root_unit = true;
        log_info("\"%.*s\" is a checkpoint directly under the watch root: it is a unit of the run "
                 "\"%s\" (restore --run %s), as is every folder there whose name carries a step",
                 (int)first, relpath, DETECT_ROOT_RUN, DETECT_ROOT_RUN);
    }
    if (where == LOC_NONE && relpath[0] != '.' && !d->said_root_temp &&
        ckptname_transient(relpath, first)) {
        d->said_root_temp = true;
        log_info("\"%.*s\" directly under the watch root has an in-progress name: ignored until "
                 "it is renamed (and so is every such name there)",
                 (int)first, relpath);
    }
}

void detector_event(struct detector *d, enum watcher_event_kind kind, const char *relpath,
                    bool is_dir, int64_t now_ms)
{
    struct loc l;

    if (kind == WATCH_OVERFLOW || !relpath)
        return;
    int where = detect_locate(relpath, is_dir, &l);
    if (where == LOC_RUN && kind == WATCH_DELETE)
        detector_forget_run(d, l.run);
    detector_say_root(d, relpath, where, &l);
    if (where != LOC_UNIT)
        return;
    if (kind == WATCH_DELETE && !relpath[l.unit_len]) {
        struct unit *gone = unit_find(d, relpath, l.unit_len);
        if (gone)
            unit_remove(d, gone);
        return;
    }
    struct unit *u = detector_touch(d, relpath, l.unit_len, now_ms);
    if (!u)
        return;
    const char *rest = relpath + l.unit_len;
    unit_track(u, kind, *rest ? rest + 1 : rest, is_dir);
    if (!is_dir && (kind == WATCH_CLOSE_WRITE || kind == WATCH_MOVED_IN))
        detector_markers(d, u, &l, relpath, now_ms);
    detector_lower_due(d, u);
}

int detector_commit(struct detector *d, const char *unit_relpath, int64_t step, int64_t now_ms)
{
    char path[DETECT_UNIT_MAX];
    struct loc l;
    struct stat st;
    int r = detect_normalize(d, unit_relpath, path, sizeof(path));

    if (r < 0)
        return r;
    if (detect_locate(path, false, &l) != LOC_UNIT)
        return -EINVAL;
    path[l.unit_len] = '\0';
    if ((r = detector_lstat(d, path, &st)) < 0)
        return r;
    if (l.depth == 1 && S_ISDIR(st.st_mode) && !root_checkpoint_dir(path, l.unit_len))
        return -EINVAL; /* a run, not a unit */
    struct unit *u = unit_get(d, path, l.unit_len);
    if (!u)
        return -ENOMEM;
    u->last_ms = now_ms;
    unit_ready(d, u, DETECT_EXPLICIT, step);
    return u->ready ? 0 : -ENOMEM;
}

static void ready_fill(const struct unit *u, struct detect_ready *ret)
{
    size_t run = strcspn(u->path, "/");

    if (!u->path[run])
        memcpy(ret->run, DETECT_ROOT_RUN, sizeof(DETECT_ROOT_RUN));
    else
        snprintf(ret->run, sizeof(ret->run), "%.*s", (int)run, u->path);
    snprintf(ret->unit, sizeof(ret->unit), "%s", u->path);
    ret->step = u->step;
    ret->reason = u->reason;
}

int detector_next(struct detector *d, int64_t now_ms, struct detect_ready *ret)
{
    if (d->due >= 0 && now_ms >= d->due)
        detector_promote(d, now_ms);
    if (!d->nready)
        return 0;
    if (!d->ready_sorted) {
        qsort(d->ready, d->nready, sizeof(*d->ready), ready_cmp);
        d->ready_sorted = true;
    }
    struct unit *u = d->ready[--d->nready];
    u->ready = false;
    ready_fill(u, ret);
    unit_remove(d, u);
    return 1;
}

void detector_flush(struct detector *d, int64_t now_ms)
{
    for (size_t i = 0; i < d->cap; i++)
        if (d->tab[i] && !d->tab[i]->ready)
            unit_ready(d, d->tab[i], DETECT_QUIET, -1);
    d->due = -1;
    for (size_t i = 0; i < d->cap; i++) /* only those left dirty by a lack of memory */
        if (d->tab[i])
            detector_lower_due(d, d->tab[i]);
}

int64_t detector_deadline(const struct detector *d)
{
    return d->due;
}

void detector_forget(struct detector *d, const char *unit_relpath)
{
    char path[DETECT_UNIT_MAX];
    struct loc l;

    if (detect_normalize(d, unit_relpath, path, sizeof(path)) < 0 ||
        detect_locate(path, false, &l) != LOC_UNIT)
        return;
    struct unit *u = unit_find(d, path, l.unit_len);
    if (u)
        unit_remove(d, u);
    if (l.depth == 1 && !l.root_unit)
        detector_forget_run(d, path);
}

size_t detector_pending(const struct detector *d)
{
    return d->n - d->nready;
}

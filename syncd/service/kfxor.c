/*
 * kfxor.c — deltas against the keyframe proposed to the writer
 * (kfxor.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/tensorview.h"
#include "service/kfxor.h"
#include "service/scan.h"

/* File path of a snapshot (its root's name first) as the keyframe's root
 * names it, into *ret (NULL: not under the root).  0 or -ENOMEM. */
static int kf_path(const char *root, const char *kf_root, const char *path, char **ret)
{
    size_t n = strlen(root);
    *ret = NULL;
    if (strncmp(path, root, n) || (path[n] && path[n] != '/'))
        return 0;
    return asprintf(ret, "%s%s", kf_root, path + n) < 0 ? (*ret = NULL, -ENOMEM) : 0;
}

bool kfxor_any_view(size_t n, dwrite_open_fn open, void *ud, const uint64_t *sizes,
                    const bool *unchanged)
{
    bool any = false;
    for (size_t k = 0; k < n && !any; k++) {
        if (sizes[k] < 8 || (unchanged && unchanged[k]))
            continue;
        int fd = open(ud, k);
        if (fd < 0)
            continue;
        struct tensorview v = TENSORVIEW_INIT;
        any = scan_view(fd, sizes[k], &v) == 0 && v.n > 0;
        tensorview_free(&v);
        close(fd);
    }
    return any;
}

int kfxor_propose(struct repo *r, const char *run, int64_t step, const struct walk *w,
                  struct dwrite *d, dwrite_open_fn open, void *ud, const uint64_t *sizes,
                  const bool *unchanged, struct kfbase **ret_kb, struct buf *err)
{
    struct manifest kf;
    bool found;
    unsigned every = repo_conf(r)->keyframe_every;
    *ret_kb = NULL;
    if (every <= 1 || step < 0 || !kfxor_any_view(w->n, open, ud, sizes, unchanged))
        return 0; /* nothing to pair: the run's snapshots are not listed */
    int e = keyframe_find(r, run, step, every, &kf, &found, err);
    if (e == 0 && !found)
        log_info("no keyframe for step %lld of run %s (no earlier checkpoint published, or "
                 "keyframe_every = %u reached): this one is a keyframe",
                 (long long)step, run, every);
    if (e < 0 || !found)
        return e;
    if (!kf.root || w->n == 0) {
        manifest_free(&kf);
        return 0;
    }
    log_info("keyframe: snapshot %s (step %lld) is the base of this one's deltas", kf.id,
             (long long)kf.step);
    if ((e = kfbase_open(r, &kf, w->base, ret_kb, err)) < 0)
        return e;
    const char *kroot = kfbase_manifest(*ret_kb)->root;
    char **paths = calloc(w->n, sizeof(*paths));
    if (!paths)
        return -ENOMEM;
    for (size_t k = 0; k < w->n && e == 0; k++)
        if (sizes[k])
            e = kf_path(w->v[0].path, kroot, w->v[k].path, &paths[k]);
    if (e == 0)
        e = dwrite_xor(d, *ret_kb, (const char *const *)paths, open, ud, sizes, unchanged);
    for (size_t k = 0; k < w->n; k++)
        free(paths[k]);
    free(paths);
    return e;
}

int kfxor_prepass(struct repo *r, const char *run, int64_t step, const struct walk *w, bool derive,
                  dwrite_open_fn open, void *ud, const uint64_t *sizes, const bool *unchanged,
                  struct dwrite **ret_dw, struct kfbase **ret_kb, struct buf *err)
{
    struct dwrite *d = NULL;
    int e = dwrite_new(w->n, &d);
    if (e == 0 && derive)
        e = dwrite_match(d, open, ud, sizes, unchanged);
    if (e == 0 && r)
        e = kfxor_propose(r, run, step, w, d, open, ud, sizes, unchanged, ret_kb, err);
    if (e < 0 || !dwrite_any(d)) {
        dwrite_free(d);
        d = NULL;
    }
    *ret_dw = d;
    return e;
}

void kfxor_report(struct kfbase *kb, const struct dwrite_stats *st, const char *unit)
{
    uint64_t local, fetched;
    if (!kb)
        return;
    kfbase_counts(kb, &local, &fetched);
    log_info("%s%s%skeyframe %s: %llu tensor(s) stored against it; %llu of its chunks named as "
             "bases (k lines); %llu base chunk(s) read from local files, %llu from the regions",
             unit ? "\"" : "", unit ? unit : "", unit ? "\": " : "", kfbase_manifest(kb)->id,
             (unsigned long long)st->xpairs, (unsigned long long)st->kbases,
             (unsigned long long)local, (unsigned long long)fetched);
}

/*
 * fanout.c — upload once, then copy: the choice per chunk (fanout.h).
 *
 * Design notes.
 * - The map is built once (copymap_build), on the caller's thread or on
 *   a thread of its own (FANOUT_ASYNC).  Until it is built it reads as
 *   empty: every region uploads for itself, as without copies.  The built
 *   map is written before `ready` is set (release) and never again, so a
 *   reader that saw `ready` (acquire) reads it without a lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/log.h"
#include "service/fanout.h"
#include "service/repo.h"

struct fanout {
    struct repo *r;
    struct copymap map;      /* valid once ready */
    atomic_bool ready, stop; /* map built; stop the build */
    bool thread;             /* th runs fanout_build */
    pthread_t th;
    _Atomic uint32_t stopped[CONFIG_MAX_REGIONS]; /* [dst]: bit src, refused for good */
};

static const struct copymap fanout_empty;

static void *fanout_build(void *arg)
{
    struct fanout *f = arg;
    struct copymap m;
    struct buf d = BUF_INIT;
    unsigned n = copymap_build(f->r, &f->stop, &m);
    if (atomic_load(&f->stop))
        return NULL;
    f->map = m;
    atomic_store_explicit(&f->ready, true, memory_order_release);
    copymap_describe(f->r, &m, &d);
    log_info("server-side copies: %s (%u pair%s)", buf_str(&d), n, n == 1 ? "" : "s");
    buf_free(&d);
    return NULL;
}

int fanout_new(struct repo *r, unsigned flags, struct fanout **ret)
{
    struct fanout *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->r = r;
    if (flags & FANOUT_ASYNC) {
        int e = pthread_create(&f->th, NULL, fanout_build, f);
        if (e) {
            free(f);
            return -e;
        }
        f->thread = true;
    } else {
        fanout_build(f);
    }
    *ret = f;
    return 0;
}

void fanout_free(struct fanout *f)
{
    if (!f)
        return;
    atomic_store(&f->stop, true);
    if (f->thread)
        pthread_join(f->th, NULL);
    free(f);
}

const struct copymap *fanout_map(const struct fanout *f)
{
    return f && atomic_load_explicit(&f->ready, memory_order_acquire) ? &f->map : &fanout_empty;
}

bool fanout_ready(const struct fanout *f)
{
    return f && atomic_load_explicit(&f->ready, memory_order_acquire);
}

uint32_t fanout_sources(struct fanout *f, size_t i)
{
    return f && i < CONFIG_MAX_REGIONS ? fanout_map(f)->from[i] & ~atomic_load(&f->stopped[i]) : 0;
}

bool fanout_is_source(const struct fanout *f, size_t i)
{
    const struct copymap *m = fanout_map(f);
    for (size_t d = 0; d < CONFIG_MAX_REGIONS; d++)
        if (copymap_can(m, d, i))
            return true;
    return false;
}

enum fanout_way fanout_choose(struct fanout *f, size_t i, uint32_t present, uint32_t working,
                              size_t *ret_src)
{
    if (!f || i >= CONFIG_MAX_REGIONS)
        return FANOUT_PUT;
    return (enum fanout_way)copymap_choose(fanout_map(f), atomic_load(&f->stopped[i]), i, present,
                                           working, ret_src);
}

void fanout_copy_failed(struct fanout *f, size_t i, size_t src, int e, const char *msg)
{
    const struct config *c = repo_conf(f->r);
    bool stop = region_err_permanent(e) || e == -ENOTSUP;
    if (stop && !(atomic_fetch_or(&f->stopped[i], 1u << src) & (1u << src)))
        log_error("region '%s' cannot copy from region '%s' (%s); its chunks go up from this "
                  "instance from now on (until the daemon restarts, or this snapshot ends)",
                  c->regions[i].name, c->regions[src].name, msg && msg[0] ? msg : err_str(e));
    else if (e == -ENOENT)
        log_warn(
            "copying into region '%s' from region '%s' failed (%s): the source object is not "
            "where region '%s''s store looks (deleted by a prune, or region '%s' is in a store "
            "that region '%s' cannot read); uploading the chunk from this instance",
            c->regions[i].name, c->regions[src].name, msg && msg[0] ? msg : err_str(e),
            c->regions[i].name, c->regions[src].name, c->regions[i].name);
    else if (!stop)
        log_warn("copying into region '%s' from region '%s' failed (%s); uploading the chunk "
                 "from this instance",
                 c->regions[i].name, c->regions[src].name, msg && msg[0] ? msg : err_str(e));
}

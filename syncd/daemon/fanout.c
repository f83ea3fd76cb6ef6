/*
 * fanout.c — upload once, then copy: the choice per chunk (fanout.h).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/log.h"
#include "daemon/fanout.h"
#include "service/repo.h"

struct fanout {
    const struct repo *r;
    struct copymap map;
    _Atomic uint32_t stopped[CONFIG_MAX_REGIONS]; /* [dst]: bit src, refused for good */
};

int fanout_new(struct repo *r, struct fanout **ret)
{
    struct fanout *f = calloc(1, sizeof(*f));
    struct buf d = BUF_INIT;
    if (!f)
        return -ENOMEM;
    f->r = r;
    unsigned n = copymap_build(r, &f->map);
    copymap_describe(r, &f->map, &d);
    log_info("server-side copies: %s (%u pair%s)", buf_str(&d), n, n == 1 ? "" : "s");
    buf_free(&d);
    *ret = f;
    return 0;
}

void fanout_free(struct fanout *f)
{
    free(f);
}

uint32_t fanout_sources(struct fanout *f, size_t i)
{
    return f && i < CONFIG_MAX_REGIONS ? f->map.from[i] & ~atomic_load(&f->stopped[i]) : 0;
}

const struct copymap *fanout_map(const struct fanout *f)
{
    return &f->map;
}

bool fanout_is_source(const struct fanout *f, size_t i)
{
    for (size_t d = 0; f && d < CONFIG_MAX_REGIONS; d++)
        if (copymap_can(&f->map, d, i))
            return true;
    return false;
}

enum fanout_way fanout_choose(struct fanout *f, size_t i, uint32_t present, uint32_t working,
                              size_t *ret_src)
{
    if (!f || i >= CONFIG_MAX_REGIONS)
        return FANOUT_PUT;
    return (enum fanout_way)copymap_choose(&f->map, atomic_load(&f->stopped[i]), i, present,
                                           working, ret_src);
}

void fanout_copy_failed(struct fanout *f, size_t i, size_t src, int e, const char *msg)
{
    const struct config *c = repo_conf(f->r);
    bool stop = region_err_permanent(e) || e == -ENOTSUP;
    if (stop && !(atomic_fetch_or(&f->stopped[i], 1u << src) & (1u << src)))
        log_error("region '%s' cannot copy from region '%s' (%s); its chunks go up from this "
                  "instance from now on, until the daemon restarts",
                  c->regions[i].name, c->regions[src].name, msg && msg[0] ? msg : err_str(e));
    else if (!stop)
        log_warn("copying into region '%s' from region '%s' failed (%s); uploading the chunk "
                 "from this instance",
                 c->regions[i].name, c->regions[src].name, msg && msg[0] ? msg : err_str(e));
}

/*
 * layoutcov.c — a step's coverage, from what its layout says.
 *
 * Design notes.
 * - The tree is indexed once (entries sorted by path), so each named file
 *   is one binary search; a hard link stands for its target's bytes.
 * - A layout file that cannot be read is an error, never "names nothing":
 *   a damaged or hostile `.metadata` must not make a step look covered.
 * - Deterministic: the verdict depends on the tree and on the layout
 *   files' bytes (content-addressed chunks), so every node that merges the
 *   same parts reaches the same verdict.
 */
#include "service/layoutcov.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/chunkobj.h"
#include "engine/dcpmeta.h"
#include "engine/hfindex.h"
#include "engine/ranknames.h"
#include "service/rgchunk.h"
#include "store/region.h"

struct cov {
    const struct manifest *m;
    const struct mfile **byname; /* m's entries sorted by path */
    struct buf *missing;
    size_t nmissing;
};

static int entry_cmp(const void *a, const void *b)
{
    return strcmp((*(const struct mfile *const *)a)->path, (*(const struct mfile *const *)b)->path);
}

static const struct mfile *cov_find(const struct cov *c, const char *path)
{
    struct mfile key = {.path = (char *)path};
    const struct mfile *k = &key,
                       **hit = bsearch(&k, c->byname, c->m->nfiles, sizeof(*c->byname), entry_cmp);
    return hit ? *hit : NULL;
}

/* The regular file f is, or a hard link stands for; NULL for anything else. */
static const struct mfile *cov_regular(const struct cov *c, const struct mfile *f)
{
    if (f && f->type == MFILE_HARDLINK)
        f = cov_find(c, f->link);
    return f && f->type == MFILE_REG ? f : NULL;
}

static int cov_report(struct cov *c, const char *path, const char *detail, const char *layout)
{
    if (++c->nmissing > LAYOUTCOV_LIST_MAX)
        return 0;
    return buf_printf(c->missing, "%s\"%s\"%s (named by %s)", c->nmissing > 1 ? ", " : "", path,
                      detail, layout);
}

/* Each of n's files (relative to directory dir of the layout file) must
 * be a regular file of at least its size. */
static int cov_needs(struct cov *c, const char *dir, const struct layout_needs *n,
                     const char *layout)
{
    struct buf full = BUF_INIT, detail = BUF_INIT;
    int e = 0;
    for (size_t i = 0; e == 0 && i < n->n; i++) {
        buf_reset(&full);
        buf_reset(&detail);
        e = dir[0] ? buf_printf(&full, "%s/%s", dir, n->v[i].path) : buf_puts(&full, n->v[i].path);
        const struct mfile *f = e == 0 ? cov_regular(c, cov_find(c, buf_str(&full))) : NULL;
        if (e == 0 && f && f->size >= n->v[i].size)
            continue;
        if (e == 0 && f)
            e = buf_printf(&detail, " is %llu bytes, but the layout names bytes up to %llu",
                           (unsigned long long)f->size, (unsigned long long)n->v[i].size);
        if (e == 0)
            e = cov_report(c, buf_str(&full), buf_str(&detail), layout);
    }
    buf_free(&full);
    buf_free(&detail);
    return e;
}

/* Reads layout file f (kind dcp or not: an HF index) and checks what it names. */
static int cov_layout(struct cov *c, const struct mfile *f, bool dcp, layoutcov_read_fn read,
                      void *ud, struct buf *bad, struct buf *err)
{
    struct buf data = BUF_INIT, why = BUF_INIT, layout = BUF_INIT;
    struct layout_needs n = LAYOUT_NEEDS_INIT;
    const char *slash = strrchr(f->path, '/');
    char *dir = strndup(f->path, slash ? (size_t)(slash - f->path) : 0);
    int e = dir ? read(ud, c->m, cov_regular(c, f), &data, &why) : -ENOMEM;
    if (e == 0)
        e = dcp ? dcpmeta_parse(data.data, data.len, &n, &why)
                : hfindex_parse((const char *)data.data, data.len, &n, &why);
    if (e < 0 && e != -ENOMEM) {
        buf_puts(bad, f->path);
        buf_printf(err, "%s \"%s\": %s", dcp ? "DCP metadata" : "Hugging Face index", f->path,
                   buf_str(&why));
    }
    if (e == 0)
        e = buf_printf(&layout, "%s \"%s\"", dcp ? "the DCP metadata" : "the Hugging Face index",
                       f->path);
    if (e == 0)
        e = cov_needs(c, dir, &n, buf_str(&layout));
    layout_needs_free(&n);
    buf_free(&data);
    buf_free(&why);
    buf_free(&layout);
    free(dir);
    return e;
}

static int cov_ranks(struct cov *c)
{
    const char **paths = calloc(c->m->nfiles ? c->m->nfiles : 1, sizeof(*paths));
    struct layout_needs gaps = LAYOUT_NEEDS_INIT;
    struct buf layout = BUF_INIT;
    int e = paths ? 0 : -ENOMEM;
    for (size_t i = 0; e == 0 && i < c->m->nfiles; i++)
        paths[i] = c->m->files[i].path;
    if (e == 0)
        e = ranknames_gaps(paths, c->m->nfiles, &gaps);
    for (size_t i = 0; e == 0 && i < gaps.n; i++) {
        const char *slash = strrchr(gaps.v[i].path, '/');
        buf_reset(&layout);
        e = buf_printf(&layout, "the rank sequence of the names in \"%.*s\"",
                       slash ? (int)(slash - gaps.v[i].path) : 1, slash ? gaps.v[i].path : ".");
        if (e == 0)
            e = cov_report(c, gaps.v[i].path, "", buf_str(&layout));
    }
    layout_needs_free(&gaps);
    buf_free(&layout);
    free(paths);
    return e;
}

int layoutcov_check(const struct manifest *m, layoutcov_read_fn read, void *ud,
                    struct buf *ret_missing, struct buf *ret_bad, struct buf *err)
{
    struct cov c = {.m = m, .missing = ret_missing};
    int e = 0;
    c.byname = calloc(m->nfiles ? m->nfiles : 1, sizeof(*c.byname));
    if (!c.byname)
        return -ENOMEM;
    for (size_t i = 0; i < m->nfiles; i++)
        c.byname[i] = &m->files[i];
    qsort(c.byname, m->nfiles, sizeof(*c.byname), entry_cmp);
    for (size_t i = 0; e == 0 && i < m->nfiles; i++) {
        const struct mfile *f = &m->files[i];
        const char *slash = strrchr(f->path, '/'), *name = slash ? slash + 1 : f->path;
        bool dcp = !strcmp(name, DCPMETA_NAME);
        if ((dcp || hfindex_name(name)) && cov_regular(&c, f))
            e = cov_layout(&c, f, dcp, read, ud, ret_bad, err);
    }
    if (e == 0)
        e = cov_ranks(&c);
    if (e == 0 && c.nmissing > LAYOUTCOV_LIST_MAX)
        e = buf_printf(ret_missing, " and %zu more", c.nmissing - LAYOUTCOV_LIST_MAX);
    free(c.byname);
    return e < 0 ? e : c.nmissing > 0;
}

/* ---- reading a layout file from a region ----------------------------------- */

int layoutcov_region_read(void *ud, const struct manifest *m, const struct mfile *f,
                          struct buf *out, struct buf *err)
{
    struct region *rg = ud;
    struct chunkobj_ctx z = CHUNKOBJ_CTX_INIT;
    struct buf raw = BUF_INIT;
    int e = 0;
    buf_reset(out);
    if (f->size > LAYOUTCOV_MAX_FILE) {
        buf_printf(err, "it is %llu bytes, more than the %llu MiB a layout file may have",
                   (unsigned long long)f->size, (unsigned long long)(LAYOUTCOV_MAX_FILE >> 20));
        return CKS_E_LIMIT;
    }
    z.keys = rg->seal;
    /* a chunk stored as a recipe (version 6) is read as one: rgchunk.h */
    for (uint64_t k = 0; e == 0 && k < f->nchunks; k++) {
        const struct mchunk *ch = &m->chunks[f->first_chunk + k];
        if ((e = rgchunk_get(rg, &z, m, ch->id, ch->len, &raw, err)) == 0)
            e = buf_append(out, raw.data, raw.len);
    }
    chunkobj_ctx_free(&z);
    buf_free(&raw);
    return e;
}

/*
 * rgchunk.c — a chunk from one region, plain or recipe (rgchunk.h).
 */
#include "service/rgchunk.h"

#include <errno.h>
#include <string.h>

#include "base/err.h"
#include "engine/tdelta.h"
#include "store/layout.h"

static int rgc_get(struct region *rg, struct chunkobj_ctx *z, const struct manifest *m,
                   const uint8_t id[HASH_LEN], uint32_t len, unsigned depth, struct buf *out,
                   struct buf *err);

/* The plaintext length of a base: its extra's, or a file chunk's. */
static uint32_t rgc_base_len(const struct manifest *m, const uint8_t id[HASH_LEN])
{
    const struct mextra *x = manifest_extra(m, id);
    size_t file;
    uint64_t off;
    uint32_t len = 0;
    if (x)
        return x->len;
    return manifest_chunk_at(m, id, &file, &off, &len) == 0 ? len : 0;
}

/* Decodes recipe object obj (extra x) with its bases, read from rg. */
static int rgc_recipe(struct region *rg, struct chunkobj_ctx *z, const struct manifest *m,
                      const struct mextra *x, unsigned depth, const struct buf *obj,
                      struct buf *out, struct buf *err)
{
    struct buf bb[TDELTA_MAX_BASES];
    struct tdelta_base tb[TDELTA_MAX_BASES];
    int e = x->nbases > TDELTA_MAX_BASES ? CKS_E_FORMAT : 0;
    for (size_t k = 0; k < TDELTA_MAX_BASES; k++)
        bb[k] = (struct buf)BUF_INIT;
    for (uint32_t k = 0; e == 0 && k < x->nbases; k++) {
        const uint8_t *id = m->bases[x->first_base + k].id;
        e = rgc_get(rg, z, m, id, rgc_base_len(m, id), depth + 1, &bb[k], err);
        memcpy(tb[k].id, id, HASH_LEN);
        tb[k].data = bb[k].data;
        tb[k].len = bb[k].len;
    }
    if (e == 0)
        e = tdelta_decode(z, obj->data, obj->len, x->id, x->len, tb, x->nbases, out);
    for (size_t k = 0; k < TDELTA_MAX_BASES; k++)
        buf_free(&bb[k]);
    return e;
}

static int rgc_get(struct region *rg, struct chunkobj_ctx *z, const struct manifest *m,
                   const uint8_t id[HASH_LEN], uint32_t len, unsigned depth, struct buf *out,
                   struct buf *err)
{
    const struct mextra *x = manifest_extra(m, id);
    bool recipe = x && x->recipe;
    char key[LAYOUT_KEY_MAX];
    struct buf obj = BUF_INIT;
    size_t max = CHUNKOBJ_HEADER_LEN + (size_t)len + len / 8 + 1024;
    if (recipe)
        layout_recipe(id, x->sig, key);
    else
        layout_chunk(id, key);
    if (recipe)
        max += TDELTA_HEAD + TDELTA_BASE_REC * TDELTA_MAX_BASES +
               (size_t)TDELTA_SEG_REC * TDELTA_MAX_SEGS;
    buf_reset(out);
    if (depth > MANIFEST_MAX_DEPTH)
        return CKS_E_FORMAT; /* the manifest's checks refuse deeper chains */
    int e = region_get(rg, key, max, &obj);
    if (e < 0) {
        buf_printf(err, "region '%s': \"%s\": %s", rg->conf.name, key, region_last_error(rg));
    } else {
        size_t before = err->len;
        e = recipe ? rgc_recipe(rg, z, m, x, depth, &obj, out, err)
                   : chunkobj_decode(z, obj.data, obj.len, id, len, out);
        if (e == 0 && out->len != len)
            e = CKS_E_FORMAT;
        if (e < 0 && err->len == before)
            buf_printf(err, "region '%s': \"%s\": %s", rg->conf.name, key, err_str(e));
    }
    buf_free(&obj);
    return e;
}

int rgchunk_get(struct region *rg, struct chunkobj_ctx *z, const struct manifest *m,
                const uint8_t id[HASH_LEN], uint32_t len, struct buf *out, struct buf *err)
{
    return rgc_get(rg, z, m, id, len, 0, out, err);
}

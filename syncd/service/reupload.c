/*
 * reupload.c — a chunk a region lacks, put there again (reupload.h).
 */
#include "service/reupload.h"

#include <errno.h>

#include "service/rgchunk.h"
#include "store/layout.h"

int reupload_chunk(struct region *rg, struct chunkobj_ctx *z, const struct chunkobj_opts *o,
                   const uint8_t id[HASH_LEN], reupload_get_fn get, void *ud, struct buf *obj,
                   enum reupload_step *ret_step)
{
    struct buf data = BUF_INIT;
    enum chunkobj_codec codec;
    char key[LAYOUT_KEY_MAX];
    *ret_step = REUPLOAD_GET;
    int e = get(ud, id, &data);
    if (e == 0) {
        *ret_step = REUPLOAD_ENCODE;
        e = chunkobj_encode(z, data.data, data.len, o, obj, &codec);
    }
    buf_free(&data);
    if (e < 0)
        return e;
    *ret_step = REUPLOAD_PUT;
    layout_chunk(id, key);
    return region_put(rg, key, obj->data, obj->len);
}

int reupload_from_regions(struct repo *r, size_t skip, struct chunkobj_ctx *z,
                          const struct manifest *m, const uint8_t id[HASH_LEN], uint32_t len,
                          struct buf *out, struct buf *why)
{
    int e = -ENOENT;
    for (size_t j = 0; j < repo_nregions(r) && e < 0 && e != -ENOMEM; j++) {
        struct region *rg = NULL;
        if (j == skip || !repo_region_ok(r, j))
            continue;
        if ((e = repo_region_clone(r, j, &rg, why)) == 0)
            e = rgchunk_get(rg, z, m, id, len, out, why);
        region_free(rg);
    }
    return e;
}

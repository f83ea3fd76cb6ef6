/*
 * hfindex.c — the shards a Hugging Face index names (base/jsonread.h).
 */
#include "engine/hfindex.h"

#include <errno.h>
#include <string.h>

#include "base/err.h"
#include "base/jsonread.h"

bool hfindex_name(const char *name)
{
    size_t n = strlen(name), s = strlen(HFINDEX_SUFFIX);
    return n > s && !strcmp(name + n - s, HFINDEX_SUFFIX);
}

static int hf_walk(const struct jnode *root, struct layout_needs *ret, struct buf *err)
{
    const struct jnode *wm = jnode_get(root, "weight_map");
    if (!wm || wm->type != J_OBJ) {
        buf_puts(err, "no \"weight_map\" object");
        return CKS_E_FORMAT;
    }
    int e = 0;
    for (size_t i = 0; e == 0 && i < wm->nkids; i++) {
        const struct jnode *v = wm->kids[i];
        if (v->type != J_STR || strlen(v->str) == 0) {
            buf_printf(err, "weight_map[\"%.200s\"] is not a file name", v->key);
            return CKS_E_FORMAT;
        }
        if ((e = layout_needs_add(ret, v->str, 0)) == CKS_E_UNSAFE_PATH || e == CKS_E_LIMIT)
            buf_printf(err, "weight_map[\"%.200s\"]: \"%.200s\" %s", v->key, v->str,
                       e == CKS_E_LIMIT ? "is one shard too many" : "leaves the directory");
    }
    return e;
}

int hfindex_parse(const char *text, size_t len, struct layout_needs *ret, struct buf *err)
{
    struct jnode *root = NULL;
    struct buf jerr = BUF_INIT;
    layout_needs_free(ret);
    int e = jsonread_parse(text, len, &root, &jerr);
    if (e < 0)
        buf_printf(err, "not JSON: %s", buf_str(&jerr));
    buf_free(&jerr);
    if (e == 0)
        e = hf_walk(root, ret, err);
    jsonread_free(root);
    if (e < 0)
        layout_needs_free(ret);
    else
        layout_needs_fold(ret);
    return e;
}

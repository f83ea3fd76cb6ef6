/*
 * dcpmeta.c — the files a DCP `.metadata` names.
 *
 * Only the shape FileSystemWriter.finish() writes is accepted: a Metadata
 * object whose state has storage_data, a dict whose values are
 * _StorageInfo objects with relative_path, offset and length in their
 * state.  Anything else is an error rather than "names nothing", so a
 * damaged or hostile file can never make a step look covered.
 */
#include "engine/dcpmeta.h"

#include <errno.h>
#include <string.h>

#include "base/err.h"
#include "engine/pickle.h"

static int int_field(const struct pickle_node *si, const char *name, uint64_t *ret)
{
    const struct pickle_node *v = pickle_attr(si, name);
    if (!v || v->kind != PICKLE_INT || v->i < 0)
        return CKS_E_FORMAT;
    *ret = (uint64_t)v->i;
    return 0;
}

/* The fqn of a storage_data key (a MetadataIndex), for errors. */
static const char *entry_name(const struct pickle_node *key)
{
    const struct pickle_node *fqn = pickle_attr(key, "fqn");
    return pickle_is_cstr(fqn) ? fqn->s : "?";
}

/* One storage_data entry (key k, value si) into ret. */
static int dcp_entry(const struct pickle_node *k, const struct pickle_node *si,
                     struct layout_needs *ret, struct buf *err)
{
    const struct pickle_node *cls = pickle_class(si), *rp = pickle_attr(si, "relative_path");
    uint64_t off = 0, len = 0;
    if (!cls || strcmp(cls->name, "_StorageInfo") != 0 ||
        strncmp(cls->s, "torch.distributed.checkpoint", 28) != 0) {
        buf_printf(err, "storage_data[\"%s\"] is a %s, not a _StorageInfo", entry_name(k),
                   cls ? cls->name : pickle_kind_name(si));
        return CKS_E_FORMAT;
    }
    if (!pickle_is_cstr(rp) || int_field(si, "offset", &off) < 0 ||
        int_field(si, "length", &len) < 0 || off > INT64_MAX - len) {
        buf_printf(err,
                   "storage_data[\"%s\"]: relative_path is not a str, or offset or length "
                   "not an int from 0 to 2^63",
                   entry_name(k));
        return CKS_E_FORMAT;
    }
    int e = layout_needs_add(ret, rp->s, off + len);
    if (e == CKS_E_UNSAFE_PATH || e == CKS_E_LIMIT)
        buf_printf(err, "storage_data[\"%s\"]: relative_path \"%.200s\" %s", entry_name(k), rp->s,
                   e == CKS_E_LIMIT ? "is one file too many" : "leaves the directory");
    return e;
}

static int dcp_walk(const struct pickle_node *root, struct layout_needs *ret, struct buf *err)
{
    const struct pickle_node *cls = pickle_class(root), *sd;
    if (!pickle_is_class(root, DCPMETA_MODULE, "Metadata")) {
        if (cls)
            buf_printf(err, "not a DCP Metadata: the pickle's value is an object of class %s.%s",
                       cls->s, cls->name);
        else
            buf_printf(err, "not a DCP Metadata: the pickle's value is a %s",
                       pickle_kind_name(root));
        return CKS_E_FORMAT;
    }
    sd = pickle_attr(root, "storage_data");
    if (!sd || sd->kind != PICKLE_DICT) {
        buf_printf(err, "Metadata.storage_data is %s, not a dict", pickle_kind_name(sd));
        return CKS_E_FORMAT;
    }
    int e = 0;
    for (size_t i = 0; e == 0 && i + 1 < sd->n; i += 2)
        e = dcp_entry(sd->kids[i], sd->kids[i + 1], ret, err);
    return e;
}

int dcpmeta_parse(const uint8_t *data, size_t len, struct layout_needs *ret, struct buf *err)
{
    struct pickle *p;
    struct buf perr = BUF_INIT;
    layout_needs_free(ret);
    int e = pickle_parse(data, len, NULL, &p, &perr);
    if (e < 0) {
        buf_printf(err, "not a readable pickle: %s", buf_str(&perr));
        buf_free(&perr);
        return e;
    }
    buf_free(&perr);
    e = dcp_walk(pickle_root(p), ret, err);
    pickle_free(p);
    if (e < 0)
        layout_needs_free(ret);
    else
        layout_needs_fold(ret);
    return e;
}

/*
 * fuzz-tensorview.c — the tensor view on arbitrary bytes: the input is a
 * whole file, read as a torch.save zip (through a read function that fails
 * past the end) and as safetensors.  Whatever view comes back must hold
 * tensors that lie in the file and inside their storage, sorted by unique
 * name, of a known dtype exactly the elements their shape and strides
 * reach; its widths (tensorhint_from_view) sorted and disjoint.  Any
 * violation aborts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tensorhint.h"
#include "engine/tensorview.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct img {
    const uint8_t *data;
    size_t len;
};

static int img_read(void *ud, uint64_t off, void *buf, size_t len)
{
    const struct img *m = ud;
    if (off > m->len || len > m->len - off)
        return -EIO;
    memcpy(buf, m->data + off, len);
    return 0;
}

static void check_tensor(const struct tensorview *v, const struct tensorview_tensor *t,
                         uint64_t file_size)
{
    if (t->storage >= v->ns || !t->name || strlen(t->name) > TENSORVIEW_MAX_NAME ||
        t->ndim > TENSORVIEW_MAX_DIMS || t->dtype >= TENSORVIEW_NDTYPES)
        abort();
    const struct tensorview_storage *s = &v->s[t->storage];
    if (s->begin > s->end || s->end > file_size || t->begin < s->begin || t->end > s->end ||
        t->begin > t->end)
        abort();
    uint64_t numel = 1, es = tensorview_dtype_size(t->dtype), last = t->offset;
    for (unsigned k = 0; k < t->ndim; k++) {
        numel *= t->shape[k];
        last += numel ? (t->shape[k] - 1) * t->stride[k] : 0;
    }
    if (numel != t->numel || (es && s->dtype != t->dtype))
        abort();
    if (es && numel &&
        (t->begin != s->begin + t->offset * es || t->end != s->begin + (last + 1) * es))
        abort();
    if (t->contiguous && t->end - t->begin != numel * es)
        abort();
}

static void check(const struct tensorview *v, int r, uint64_t file_size)
{
    if (r < 0 && (v->n || v->ns || v->t || v->s))
        abort();
    for (size_t i = 0; i < v->n; i++) {
        check_tensor(v, &v->t[i], file_size);
        if (i && strcmp(v->t[i - 1].name, v->t[i].name) >= 0)
            abort();
        if (tensorview_find(v, v->t[i].name) != &v->t[i])
            abort();
    }
    struct tensorhint h = TENSORHINT_INIT;
    if (tensorhint_from_view(v, &h) == 0)
        for (size_t i = 0; i < h.n; i++)
            if (h.v[i].begin >= h.v[i].end || h.v[i].end > file_size ||
                (i && h.v[i].begin < h.v[i - 1].end))
                abort();
    tensorhint_free(&h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct img m = {data, size};
    struct tensorview v = TENSORVIEW_INIT;
    struct buf err = BUF_INIT;
    int r = tensorview_torch(size, img_read, &m, &v, &err);
    check(&v, r, size);
    tensorview_free(&v);
    r = tensorview_safetensors(data, size, size, &v, &err);
    check(&v, r, size);
    tensorview_free(&v);
    buf_free(&err);
    return 0;
}

/*
 * tensorview.c — tensors from safetensors headers and torch.save zips
 * (formats, what is trusted and the bounds in tensorview.h).
 *
 * Design notes.
 * - One builder for both formats: storages first (every safetensors entry,
 *   every usable `data/<key>` record), then tensors, each checked on its
 *   own (tv_place: shape, strides, bytes inside its storage); a last pass
 *   (tv_settle) drops what only the whole view shows unsound — a storage
 *   read as two dtypes, overlapping safetensors entries, a name twice —
 *   and sorts by name.
 * - The pickle walk recurses on the value tree; engine/pickle already
 *   refused cycles, the walk stops at TENSORVIEW_MAX_DEPTH and counts the
 *   values it visits (a DAG shared through the memo could otherwise be
 *   walked exponentially often).
 */
#include "engine/tensorview.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jsonread.h"
#include "engine/pickle.h"

/* ---- dtypes ------------------------------------------------------------------ */

static const struct {
    const char *st, *torch; /* safetensors spelling, torch storage class */
    size_t size;
} dtypes[TENSORVIEW_NDTYPES] = {
    [TENSORVIEW_UNKNOWN] = {"?", "", 0},
    [TENSORVIEW_F64] = {"F64", "DoubleStorage", 8},
    [TENSORVIEW_F32] = {"F32", "FloatStorage", 4},
    [TENSORVIEW_F16] = {"F16", "HalfStorage", 2},
    [TENSORVIEW_BF16] = {"BF16", "BFloat16Storage", 2},
    [TENSORVIEW_I64] = {"I64", "LongStorage", 8},
    [TENSORVIEW_I32] = {"I32", "IntStorage", 4},
    [TENSORVIEW_I16] = {"I16", "ShortStorage", 2},
    [TENSORVIEW_I8] = {"I8", "CharStorage", 1},
    [TENSORVIEW_U8] = {"U8", "ByteStorage", 1},
    [TENSORVIEW_BOOL] = {"BOOL", "BoolStorage", 1},
    [TENSORVIEW_C64] = {"C64", "ComplexFloatStorage", 8},
    [TENSORVIEW_C128] = {"C128", "ComplexDoubleStorage", 16},
};

size_t tensorview_dtype_size(enum tensorview_dtype d)
{
    return d < TENSORVIEW_NDTYPES ? dtypes[d].size : 0;
}

const char *tensorview_dtype_name(enum tensorview_dtype d)
{
    return d < TENSORVIEW_NDTYPES ? dtypes[d].st : "?";
}

static enum tensorview_dtype dtype_st(const char *name)
{
    for (int d = 1; d < TENSORVIEW_NDTYPES; d++)
        if (!strcmp(name, dtypes[d].st))
            return (enum tensorview_dtype)d;
    return TENSORVIEW_UNKNOWN;
}

static enum tensorview_dtype dtype_torch(const char *cls)
{
    for (int d = 1; d < TENSORVIEW_NDTYPES; d++)
        if (!strcmp(cls, dtypes[d].torch))
            return (enum tensorview_dtype)d;
    return !strcmp(cls, "UntypedStorage") ? TENSORVIEW_U8 : TENSORVIEW_UNKNOWN;
}

enum tensorview_dtype tensorview_dtype_parse(const char *name)
{
    enum tensorview_dtype d = dtype_st(name);
    return d != TENSORVIEW_UNKNOWN ? d : dtype_torch(name);
}

/* ---- the builder ---------------------------------------------------------- */

static int say(struct buf *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int say(struct buf *err, int code, const char *fmt, ...)
{
    if (err) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        buf_printf(err, "%s", msg);
    }
    return code;
}

void tensorview_free(struct tensorview *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free(v->t[i].name);
        free(v->t[i].shape);
    }
    for (size_t i = 0; i < v->ns; i++)
        free(v->s[i].key);
    free(v->t);
    free(v->s);
    *v = (struct tensorview)TENSORVIEW_INIT;
}

/* Room for one more element of size sz in *arr holding n of *cap. */
static int room(void **arr, size_t n, size_t *cap, size_t sz)
{
    if (n >= TENSORVIEW_MAX_TENSORS)
        return CKS_E_LIMIT;
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, c * sz);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

struct builder {
    struct tensorview *v;
    size_t tcap, scap;
};

static int add_storage(struct builder *b, const char *key, enum tensorview_dtype d, uint64_t begin,
                       uint64_t end)
{
    int e = room((void **)&b->v->s, b->v->ns, &b->scap, sizeof(*b->v->s));
    char *k = e == 0 ? strdup(key) : NULL;
    if (e < 0 || !k)
        return e < 0 ? e : -ENOMEM;
    b->v->s[b->v->ns++] = (struct tensorview_storage){k, d, begin, end};
    return 0;
}

/* A tensor being placed: its shape and strides as read. */
struct cand {
    const char *name;
    enum tensorview_dtype dtype;
    unsigned ndim;
    uint64_t shape[TENSORVIEW_MAX_DIMS], stride[TENSORVIEW_MAX_DIMS];
    size_t storage;
    uint64_t offset;
    bool has_stride; /* false: row-major (safetensors) */
};

static bool mul_ok(uint64_t a, uint64_t b, uint64_t *r)
{
    if (a && b > UINT64_MAX / a)
        return false;
    *r = a * b;
    return true;
}

/* Row-major strides for c's shape; false when they overflow. */
static bool row_major(struct cand *c)
{
    uint64_t acc = 1;
    for (unsigned k = c->ndim; k-- > 0;) {
        c->stride[k] = acc;
        if (!mul_ok(acc, c->shape[k] ? c->shape[k] : 1, &acc))
            return false;
    }
    return true;
}

static bool is_contiguous(const struct cand *c)
{
    uint64_t acc = 1;
    for (unsigned k = c->ndim; k-- > 0;) {
        if (c->shape[k] == 1)
            continue;
        if (c->stride[k] != acc)
            return false;
        acc *= c->shape[k]; /* <= numel: no overflow */
    }
    return true;
}

/* Where c's elements lie: t's numel, begin, end; false when they leave the
 * storage or a size overflows. */
static bool tv_place(const struct cand *c, const struct tensorview_storage *s,
                     struct tensorview_tensor *t)
{
    uint64_t numel = 1, last = c->offset, es = tensorview_dtype_size(c->dtype), span;
    for (unsigned k = 0; k < c->ndim; k++)
        if (!mul_ok(numel, c->shape[k], &numel))
            return false;
    t->numel = numel;
    t->begin = s->begin;
    t->end = s->end;
    t->contiguous = false;
    if (!es)
        return true; /* unknown dtype: its whole storage */
    for (unsigned k = 0; numel && k < c->ndim; k++) {
        if (!mul_ok(c->shape[k] - 1, c->stride[k], &span) || last > UINT64_MAX - span)
            return false;
        last += span;
    }
    uint64_t first_b, end_b, size = s->end - s->begin;
    if (!mul_ok(c->offset, es, &first_b) || last == UINT64_MAX ||
        !mul_ok(numel ? last + 1 : c->offset, es, &end_b) || end_b > size || first_b > end_b)
        return false;
    t->begin = s->begin + first_b;
    t->end = s->begin + end_b;
    t->contiguous = is_contiguous(c) && end_b - first_b == numel * es;
    return true;
}

/* Adds c as a tensor when it is sound on its own (1: dropped). */
static int add_tensor(struct builder *b, struct cand *c)
{
    struct tensorview_tensor t = {0};
    if (strlen(c->name) > TENSORVIEW_MAX_NAME || c->storage >= b->v->ns ||
        (!c->has_stride && !row_major(c)) || !tv_place(c, &b->v->s[c->storage], &t))
        return 1;
    int e = room((void **)&b->v->t, b->v->n, &b->tcap, sizeof(*b->v->t));
    if (e < 0)
        return e;
    t.name = strdup(c->name);
    t.shape = c->ndim ? malloc(2 * c->ndim * sizeof(*t.shape)) : NULL;
    if (!t.name || (c->ndim && !t.shape)) {
        free(t.name);
        free(t.shape);
        return -ENOMEM;
    }
    t.stride = t.shape ? t.shape + c->ndim : NULL;
    if (c->ndim) {
        memcpy(t.shape, c->shape, c->ndim * sizeof(*t.shape));
        memcpy(t.stride, c->stride, c->ndim * sizeof(*t.stride));
    }
    t.dtype = c->dtype;
    t.ndim = c->ndim;
    t.storage = c->storage;
    t.offset = c->offset;
    b->v->t[b->v->n++] = t;
    return 0;
}

/* ---- settling: what only the whole view shows ------------------------------ */

static int by_name(const void *a, const void *b)
{
    const struct tensorview_tensor *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->begin > y->begin) - (x->begin < y->begin);
}

static int by_begin(const void *a, const void *b)
{
    const struct tensorview_tensor *x = *(const struct tensorview_tensor *const *)a,
                                   *y = *(const struct tensorview_tensor *const *)b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* Storage dtypes from their tensors; tensors of a storage read two ways
 * are marked (numel UINT64_MAX). */
static void settle_dtypes(struct tensorview *v, unsigned char *seen)
{
    for (size_t i = 0; i < v->n; i++) {
        struct tensorview_storage *s = &v->s[v->t[i].storage];
        unsigned char *st = &seen[v->t[i].storage];
        if (*st == 0)
            s->dtype = v->t[i].dtype;
        *st = s->dtype == v->t[i].dtype && *st != 2 ? 1 : 2;
    }
    for (size_t i = 0; i < v->n; i++)
        if (seen[v->t[i].storage] == 2) {
            v->s[v->t[i].storage].dtype = TENSORVIEW_UNKNOWN;
            v->t[i].numel = UINT64_MAX;
        }
}

/* safetensors: tensors whose bytes overlap another's are marked. */
static int settle_overlap(struct tensorview *v)
{
    struct tensorview_tensor **o = malloc((v->n ? v->n : 1) * sizeof(*o));
    if (!o)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < v->n; i++)
        if (v->t[i].end > v->t[i].begin)
            o[k++] = &v->t[i];
    qsort(o, k, sizeof(*o), by_begin);
    struct tensorview_tensor *reach = NULL;
    for (size_t i = 0; i < k; i++) {
        if (reach && o[i]->begin < reach->end)
            o[i]->numel = reach->numel = UINT64_MAX;
        if (!reach || o[i]->end > reach->end)
            reach = o[i];
    }
    free(o);
    return 0;
}

static void drop(struct tensorview_tensor *t)
{
    free(t->name);
    free(t->shape);
}

/* Drops marked tensors and names met twice; sorts by name. */
static int tv_settle(struct tensorview *v)
{
    unsigned char *seen = calloc(v->ns ? v->ns : 1, 1);
    int e = seen ? 0 : -ENOMEM;
    if (e == 0)
        settle_dtypes(v, seen);
    free(seen);
    if (e == 0 && v->format == TENSORVIEW_SAFETENSORS)
        e = settle_overlap(v);
    if (e < 0)
        return e;
    if (v->n > 1)
        qsort(v->t, v->n, sizeof(*v->t), by_name);
    size_t k = 0;
    for (size_t i = 0; i < v->n;) {
        size_t j = i + 1;
        while (j < v->n && !strcmp(v->t[j].name, v->t[i].name))
            j++;
        if (j == i + 1 && v->t[i].numel != UINT64_MAX)
            v->t[k++] = v->t[i];
        else
            for (size_t x = i; x < j; x++)
                drop(&v->t[x]);
        i = j;
    }
    v->n = k;
    return 0;
}

const struct tensorview_tensor *tensorview_find(const struct tensorview *v, const char *name)
{
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(v->t[mid].name, name);
        if (c == 0)
            return &v->t[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- safetensors -------------------------------------------------------------- */

/* A whole number within [0, max]. */
static bool json_u64(const struct jnode *n, uint64_t max, uint64_t *ret)
{
    if (!n || n->type != J_NUM || !(n->num >= 0) || n->num > (double)max ||
        n->num != (double)(uint64_t)n->num)
        return false;
    *ret = (uint64_t)n->num;
    return true;
}

/* The entry t's shape into c; false when it is not a list of whole
 * numbers (at most TENSORVIEW_MAX_DIMS). */
static bool st_shape(const struct jnode *t, struct cand *c)
{
    const struct jnode *sh = jnode_get(t, "shape");
    if (!sh || sh->type != J_ARR || jnode_len(sh) > TENSORVIEW_MAX_DIMS)
        return false;
    c->ndim = (unsigned)jnode_len(sh);
    for (unsigned k = 0; k < c->ndim; k++)
        if (!json_u64(jnode_at(sh, k), (uint64_t)1 << 53, &c->shape[k]))
            return false;
    return true;
}

/* One header entry: a storage always, a tensor when its shape is sound
 * and fills its bytes exactly. */
static int st_entry(struct builder *b, const struct jnode *t, uint64_t base, uint64_t data,
                    struct buf *err)
{
    const struct jnode *offs = jnode_get(t, "data_offsets");
    const char *dtype = jnode_str(jnode_get(t, "dtype"), NULL);
    uint64_t lo, hi;
    if (t->type != J_OBJ || !dtype || !offs || offs->type != J_ARR || jnode_len(offs) != 2 ||
        !json_u64(jnode_at(offs, 0), data, &lo) || !json_u64(jnode_at(offs, 1), data, &hi) ||
        hi < lo)
        return say(err, CKS_E_FORMAT,
                   "safetensors: tensor \"%.200s\" has no dtype string or no data_offsets "
                   "[begin, end] inside the data",
                   t->key);
    struct cand c = {.name = t->key, .dtype = dtype_st(dtype), .storage = b->v->ns};
    int e = add_storage(b, t->key, c.dtype, base + lo, base + hi);
    if (e < 0 || !st_shape(t, &c))
        return e;
    uint64_t numel = 1, bytes;
    for (unsigned k = 0; k < c.ndim; k++)
        if (!mul_ok(numel, c.shape[k], &numel))
            return 0;
    if (c.dtype != TENSORVIEW_UNKNOWN &&
        (!mul_ok(numel, tensorview_dtype_size(c.dtype), &bytes) || bytes != hi - lo))
        return 0;
    e = add_tensor(b, &c);
    return e > 0 ? 0 : e;
}

static int st_walk(struct builder *b, const struct jnode *root, uint64_t base, uint64_t data,
                   struct buf *err)
{
    int e = 0;
    if (root->type != J_OBJ)
        return say(err, CKS_E_FORMAT, "safetensors: the header is not a JSON object");
    for (size_t i = 0; e == 0 && i < root->nkids; i++)
        if (strcmp(root->kids[i]->key, "__metadata__") != 0)
            e = st_entry(b, root->kids[i], base, data, err);
    if (e == CKS_E_LIMIT)
        say(err, e, "safetensors: more than %u tensors", TENSORVIEW_MAX_TENSORS);
    return e;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int tensorview_safetensors(const uint8_t *head, size_t len, uint64_t file_size,
                           struct tensorview *v, struct buf *err)
{
    tensorview_free(v);
    uint64_t n = len >= 8 ? le64(head) : 0;
    if (len < 8 || file_size < 10 || n < 2 || n > TENSORVIEW_MAX_HEADER || n > file_size - 8 ||
        len - 8 < n || head[8] != '{')
        return say(err, CKS_E_FORMAT, "not safetensors: no JSON header of its stated length");
    struct jnode *root = NULL;
    struct buf jerr = BUF_INIT;
    int e = jsonread_parse((const char *)head + 8, (size_t)n, &root, &jerr);
    if (e < 0)
        say(err, e == -ENOMEM ? e : CKS_E_FORMAT, "safetensors: header: %s", buf_str(&jerr));
    buf_free(&jerr);
    if (e < 0)
        return e == -ENOMEM ? e : CKS_E_FORMAT;
    struct builder b = {.v = v};
    v->format = TENSORVIEW_SAFETENSORS;
    e = st_walk(&b, root, 8 + n, file_size - 8 - n, err);
    jsonread_free(root);
    if (e == 0)
        e = tv_settle(v);
    if (e < 0)
        tensorview_free(v);
    return e;
}

/* ---- torch.save: the pickle walk ------------------------------------------- */

struct walk {
    struct builder *b;
    const char *prefix; /* "<archive>/data/" */
    char name[TENSORVIEW_MAX_NAME + 2];
    size_t len;
    size_t visits;
};

static bool pk_u64(const struct pickle_node *n, uint64_t *ret)
{
    if (!n || n->kind != PICKLE_INT || n->i < 0)
        return false;
    *ret = (uint64_t)n->i;
    return true;
}

/* A tuple of at most TENSORVIEW_MAX_DIMS non-negative ints into dims. */
static bool pk_dims(const struct pickle_node *n, uint64_t *dims, unsigned *ret_n)
{
    if (!n || n->kind != PICKLE_TUPLE || n->n > TENSORVIEW_MAX_DIMS)
        return false;
    for (unsigned k = 0; k < n->n; k++)
        if (!pk_u64(n->kids[k], &dims[k]))
            return false;
    *ret_n = n->n;
    return true;
}

static int key_cmp(const void *key, const void *s)
{
    return strcmp(key, ((const struct tensorview_storage *)s)->key);
}

/* The persistent id ('storage', torch.<X>Storage, key, location, numel):
 * c's dtype and storage; false when it is not one or names no usable
 * record of numel elements. */
static bool tz_storage(const struct walk *w, const struct pickle_node *pid, struct cand *c)
{
    const struct pickle_node *id = pid && pid->kind == PICKLE_PERSID ? pid->kids[0] : NULL;
    uint64_t numel, bytes;
    if (!id || id->kind != PICKLE_TUPLE || id->n != 5 || !pickle_is_cstr(id->kids[0]) ||
        strcmp(id->kids[0]->s, "storage") != 0 || id->kids[1]->kind != PICKLE_GLOBAL ||
        !pickle_is_cstr(id->kids[2]) || !pk_u64(id->kids[4], &numel))
        return false;
    const struct pickle_node *cls = id->kids[1];
    bool torch_mod = !strcmp(cls->s, "torch") || !strcmp(cls->s, "torch.storage");
    c->dtype = torch_mod ? dtype_torch(cls->name) : TENSORVIEW_UNKNOWN;
    const struct tensorview_storage *s =
        w->b->v->ns ? bsearch(id->kids[2]->s, w->b->v->s, w->b->v->ns, sizeof(*s), key_cmp) : NULL;
    if (!s)
        return false;
    c->storage = (size_t)(s - w->b->v->s);
    return c->dtype == TENSORVIEW_UNKNOWN ||
           (mul_ok(numel, tensorview_dtype_size(c->dtype), &bytes) && bytes == s->end - s->begin);
}

/* _rebuild_tensor_v2(pid, storage_offset, size, stride, ...) at w->name,
 * from its arguments a. */
static int tz_tensor(struct walk *w, const struct pickle_node *a)
{
    struct cand c = {.name = w->name, .has_stride = true};
    unsigned nstride = 0;
    if (!a || a->kind != PICKLE_TUPLE || a->n < 4 || !tz_storage(w, a->kids[0], &c) ||
        !pk_u64(a->kids[1], &c.offset) || !pk_dims(a->kids[2], c.shape, &c.ndim) ||
        !pk_dims(a->kids[3], c.stride, &nstride) || nstride != c.ndim)
        return 0;
    int e = add_tensor(w->b, &c);
    return e > 0 ? 0 : e;
}

static int tz_value(struct walk *w, const struct pickle_node *n, unsigned depth);

/* The value under one more name component (a str, or an int as decimal);
 * other keys, and names past the bound, are not walked. */
static int tz_under(struct walk *w, const struct pickle_node *key, const struct pickle_node *val,
                    unsigned depth)
{
    char num[24];
    const char *part;
    if (pickle_is_cstr(key))
        part = key->s;
    else if (key->kind == PICKLE_INT)
        snprintf(num, sizeof(num), "%" PRId64, key->i), part = num;
    else
        return 0;
    size_t at = w->len, pl = strlen(part), dot = at ? 1 : 0;
    if (pl + dot > TENSORVIEW_MAX_NAME - at)
        return 0;
    if (dot)
        w->name[at] = '.';
    memcpy(w->name + at + dot, part, pl + 1);
    w->len = at + dot + pl;
    int e = tz_value(w, val, depth + 1);
    w->len = at;
    w->name[at] = 0;
    return e;
}

static int tz_dict(struct walk *w, const struct pickle_node *d, unsigned depth)
{
    int e = 0;
    for (size_t i = 0; e == 0 && i + 1 < d->n; i += 2)
        e = tz_under(w, d->kids[i], d->kids[i + 1], depth);
    return e;
}

static int tz_list(struct walk *w, const struct pickle_node *l, unsigned depth)
{
    struct pickle_node idx = {.kind = PICKLE_INT};
    int e = 0;
    for (size_t i = 0; e == 0 && i < l->n; i++) {
        idx.i = (int64_t)i;
        e = tz_under(w, &idx, l->kids[i], depth);
    }
    return e;
}

/* _rebuild_from_type_v2(_rebuild_tensor_v2, type, args, state): a tensor
 * of a Tensor subclass. */
static int tz_subclass(struct walk *w, const struct pickle_node *a)
{
    const struct pickle_node *f = a && a->kind == PICKLE_TUPLE && a->n >= 3 ? a->kids[0] : NULL;
    if (!f || f->kind != PICKLE_GLOBAL || strcmp(f->s, "torch._utils") != 0 ||
        strcmp(f->name, "_rebuild_tensor_v2") != 0)
        return 0;
    return tz_tensor(w, a->kids[2]);
}

static int tz_object(struct walk *w, const struct pickle_node *o, unsigned depth)
{
    const struct pickle_node *a = o->kids[PICKLE_OBJ_ARGS], *kids;
    if (pickle_is_class(o, "torch._utils", "_rebuild_tensor_v2"))
        return tz_tensor(w, a);
    if (pickle_is_class(o, "torch._tensor", "_rebuild_from_type_v2")) /* a Tensor subclass */
        return tz_subclass(w, a);
    if (pickle_is_class(o, "torch._utils", "_rebuild_parameter") ||
        pickle_is_class(o, "torch._utils", "_rebuild_parameter_with_state"))
        return a && a->n ? tz_value(w, a->kids[0], depth + 1) : 0;
    if ((kids = o->kids[PICKLE_OBJ_DICTITEMS]))
        return tz_dict(w, kids, depth);
    if ((kids = o->kids[PICKLE_OBJ_ITEMS]))
        return tz_list(w, kids, depth);
    kids = o->kids[PICKLE_OBJ_STATE];
    return kids && kids->kind == PICKLE_DICT ? tz_dict(w, kids, depth) : 0;
}

static int tz_value(struct walk *w, const struct pickle_node *n, unsigned depth)
{
    if (++w->visits > TENSORVIEW_MAX_VISITS)
        return CKS_E_LIMIT;
    if (!n || depth > TENSORVIEW_MAX_DEPTH)
        return 0;
    switch (n->kind) {
    case PICKLE_DICT:
        return tz_dict(w, n, depth);
    case PICKLE_LIST:
    case PICKLE_TUPLE:
        return tz_list(w, n, depth);
    case PICKLE_OBJECT:
        return tz_object(w, n, depth);
    default:
        return 0;
    }
}

/* ---- torch.save: the archive -------------------------------------------------- */

/* The single record "<archive>/data.pkl": its archive prefix ("<archive>/")
 * into prefix. */
static const struct torchzip_record *tz_pickle_record(const struct torchzip *z, char *prefix,
                                                      size_t cap)
{
    const struct torchzip_record *found = NULL;
    for (size_t i = 0; i < z->n; i++) {
        const char *nm = z->v[i].name, *slash = strchr(nm, '/');
        if (!slash || slash == nm || strcmp(slash, "/data.pkl") != 0)
            continue;
        if (found)
            return NULL;
        found = &z->v[i];
    }
    size_t pl = found ? strlen(found->name) - strlen("data.pkl") : 0;
    if (!found || pl >= cap)
        return NULL;
    memcpy(prefix, found->name, pl);
    prefix[pl] = 0;
    return found;
}

/* Every usable record "<prefix>data/<key>" as a storage (sorted by key, as
 * the records are by name). */
static int tz_storages(struct builder *b, const struct torchzip *z, const char *prefix)
{
    char dir[TORCHZIP_MAX_NAME + 8];
    snprintf(dir, sizeof(dir), "%sdata/", prefix);
    size_t dl = strlen(dir);
    int e = 0;
    for (size_t i = 0; e == 0 && i < z->n; i++) {
        const struct torchzip_record *r = &z->v[i];
        if (r->usable && !strncmp(r->name, dir, dl) && r->name[dl] && !strchr(r->name + dl, '/'))
            e = add_storage(b, r->name + dl, TENSORVIEW_UNKNOWN, r->begin, r->end);
    }
    return e;
}

static int tz_read_pickle(const struct torchzip_record *r, torchzip_read_fn rd, void *ud,
                          struct pickle **ret, struct buf *err)
{
    struct pickle_limits lim = PICKLE_LIMITS_DEFAULT;
    uint64_t size = r->end - r->begin;
    if (!r->usable || size > TENSORVIEW_MAX_PICKLE)
        return say(err, r->usable ? CKS_E_LIMIT : CKS_E_FORMAT,
                   "torch zip: %s is compressed, or larger than %u bytes", r->name,
                   TENSORVIEW_MAX_PICKLE);
    uint8_t *data = malloc(size ? (size_t)size : 1);
    if (!data)
        return -ENOMEM;
    int e = rd(ud, r->begin, data, (size_t)size);
    struct buf perr = BUF_INIT;
    lim.max_bytes = TENSORVIEW_MAX_PICKLE;
    lim.max_nodes = TENSORVIEW_MAX_PICKLE_NODES;
    lim.persid = true;
    if (e == 0 && (e = pickle_parse(data, (size_t)size, &lim, ret, &perr)) < 0 && e != -ENOMEM)
        say(err, e, "torch zip: %s: %s", r->name, buf_str(&perr));
    buf_free(&perr);
    free(data);
    return e;
}

static int tz_view(struct builder *b, const struct torchzip *z, torchzip_read_fn rd, void *ud,
                   struct buf *err)
{
    char prefix[TORCHZIP_MAX_NAME + 1];
    const struct torchzip_record *pk = tz_pickle_record(z, prefix, sizeof(prefix));
    if (!pk)
        return say(err, CKS_E_FORMAT, "torch zip: not one <archive>/data.pkl record");
    int e = tz_storages(b, z, prefix);
    struct pickle *p = NULL;
    if (e == 0)
        e = tz_read_pickle(pk, rd, ud, &p, err);
    if (e < 0)
        return e;
    struct walk w = {.b = b, .prefix = prefix};
    e = tz_value(&w, pickle_root(p), 0);
    pickle_free(p);
    if (e == CKS_E_LIMIT)
        say(err, e, "torch zip: more than %u tensors or %zu values to walk in %s",
            TENSORVIEW_MAX_TENSORS, TENSORVIEW_MAX_VISITS, pk->name);
    return e;
}

int tensorview_torch(uint64_t file_size, torchzip_read_fn rd, void *ud, struct tensorview *v,
                     struct buf *err)
{
    struct torchzip z = TORCHZIP_INIT;
    struct builder b = {.v = v};
    tensorview_free(v);
    v->format = TENSORVIEW_TORCH_ZIP;
    int e = torchzip_open(file_size, rd, ud, &z, err);
    if (e == 0)
        e = tz_view(&b, &z, rd, ud, err);
    torchzip_free(&z);
    if (e == 0)
        e = tv_settle(v);
    if (e < 0)
        tensorview_free(v);
    return e;
}

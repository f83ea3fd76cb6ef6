/*
 * jsonread.c — recursive-descent JSON reader with explicit bounds.
 *
 * Every recursion is bounded by JR_MAX_DEPTH and every allocation by the
 * node budget, so a hostile or broken document costs at most linear work
 * and bounded memory.  Errors carry the byte offset.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/jsonread.h"

#define JR_MAX_DEPTH 64
#define JR_MAX_NODES 1000000

struct jr {
    const char *p, *end, *start;
    size_t nodes;
    struct buf *err;
    int code;
};

static void jr_fail(struct jr *r, const char *what, int code)
{
    if (r->code)
        return;
    r->code = code;
    if (r->err)
        buf_printf(r->err, "offset %zu: %s", (size_t)(r->p - r->start), what);
}

static void jr_ws(struct jr *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static struct jnode *jr_node(struct jr *r, enum jtype t)
{
    if (++r->nodes > JR_MAX_NODES) {
        jr_fail(r, "too many values", CKS_E_LIMIT);
        return NULL;
    }
    struct jnode *n = calloc(1, sizeof(*n));
    if (!n)
        jr_fail(r, "out of memory", -ENOMEM);
    else
        n->type = t;
    return n;
}

static int hex4(const char *p, unsigned *ret)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *ret = v;
    return 0;
}

static void utf8_put(struct buf *b, unsigned cp)
{
    uint8_t o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (uint8_t)(0xc0 | cp >> 6);
        o[1] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (uint8_t)(0xe0 | cp >> 12);
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        o[0] = (uint8_t)(0xf0 | cp >> 18);
        o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        o[3] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 4;
    }
    buf_append(b, o, n);
}

/* \uXXXX (and a following low surrogate) at r->p (just past "\u"). */
static int jr_uescape(struct jr *r, struct buf *b)
{
    unsigned cp, lo;
    if (r->end - r->p < 4 || hex4(r->p, &cp) < 0)
        return -1;
    r->p += 4;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return -1;
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' || hex4(r->p + 2, &lo) < 0 ||
            lo < 0xdc00 || lo > 0xdfff)
            return -1;
        r->p += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp == 0)
        return -1; /* keep strings C-safe */
    utf8_put(b, cp);
    return 0;
}

static char *jr_string(struct jr *r)
{
    struct buf b = BUF_INIT;
    r->p++; /* opening quote */
    while (r->p < r->end && *r->p != '"') {
        unsigned char c = (unsigned char)*r->p++;
        if (c < 0x20)
            goto bad;
        if (c != '\\') {
            buf_append(&b, &c, 1);
            continue;
        }
        if (r->p >= r->end)
            goto bad;
        char e = *r->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            buf_append(&b, &out[simple - "\"\\/bfnrt"], 1);
        } else if (e != 'u' || jr_uescape(r, &b) < 0) {
            goto bad;
        }
    }
    if (r->p >= r->end)
        goto bad;
    r->p++;
    if (buf_append(&b, "", 0) < 0) /* guarantees an allocated, terminated string */
        goto bad;
    return (char *)buf_detach(&b, NULL);
bad:
    buf_free(&b);
    jr_fail(r, "bad string", CKS_E_FORMAT);
    return NULL;
}

static struct jnode *jr_value(struct jr *r, int depth);

static int jr_push(struct jr *r, struct jnode *parent, struct jnode *kid)
{
    if ((parent->nkids & (parent->nkids - 1)) == 0) { /* grow at powers of two */
        size_t cap = parent->nkids ? parent->nkids * 2 : 4;
        struct jnode **v = realloc(parent->kids, cap * sizeof(*v));
        if (!v) {
            jr_fail(r, "out of memory", -ENOMEM);
            return -1;
        }
        parent->kids = v;
    }
    parent->kids[parent->nkids++] = kid;
    return 0;
}

static struct jnode *jr_container(struct jr *r, int depth, bool obj)
{
    struct jnode *n = jr_node(r, obj ? J_OBJ : J_ARR);
    char close = obj ? '}' : ']';
    if (!n)
        return NULL;
    r->p++;
    jr_ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return n;
    }
    for (;;) {
        char *key = NULL;
        jr_ws(r);
        if (obj) {
            if (r->p >= r->end || *r->p != '"' || !(key = jr_string(r)))
                goto bad;
            jr_ws(r);
            if (r->p >= r->end || *r->p++ != ':') {
                free(key);
                goto bad;
            }
        }
        struct jnode *kid = jr_value(r, depth + 1);
        if (!kid || jr_push(r, n, kid) < 0) {
            free(key);
            jsonread_free(kid);
            goto bad;
        }
        kid->key = key;
        jr_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == close) {
            r->p++;
            return n;
        }
        goto bad;
    }
bad:
    jr_fail(r, obj ? "bad object" : "bad array", CKS_E_FORMAT);
    jsonread_free(n);
    return NULL;
}

/* Python's json.dumps writes a non-finite float as NaN, Infinity or
 * -Infinity (and Hugging Face's trainer_state.json has them: a NaN
 * grad_norm); exactly these tokens are read as numbers, nothing looser. */
static struct jnode *jr_nonfinite(struct jr *r)
{
    static const struct {
        const char *word;
        double v;
    } words[] = {{"NaN", NAN}, {"Infinity", INFINITY}, {"-Infinity", -INFINITY}};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i].word);
        if ((size_t)(r->end - r->p) < n || memcmp(r->p, words[i].word, n) != 0)
            continue;
        r->p += n;
        struct jnode *node = jr_node(r, J_NUM);
        if (node)
            node->num = words[i].v;
        return node;
    }
    jr_fail(r, "unexpected character", CKS_E_FORMAT);
    return NULL;
}

static struct jnode *jr_number(struct jr *r)
{
    const char *s = r->p;
    if (r->end - r->p >= 2 && r->p[0] == '-' && r->p[1] == 'I')
        return jr_nonfinite(r);
    if (r->p < r->end && *r->p == '-')
        r->p++;
    if (r->p >= r->end || *r->p < '0' || *r->p > '9')
        goto bad;
    if (*r->p == '0')
        r->p++;
    else
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
    if (r->p < r->end && *r->p == '.') {
        if (++r->p >= r->end || *r->p < '0' || *r->p > '9')
            goto bad;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
            r->p++;
        if (r->p >= r->end || *r->p < '0' || *r->p > '9')
            goto bad;
        while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
            r->p++;
    }
    char tmp[64];
    size_t n = (size_t)(r->p - s);
    if (n >= sizeof(tmp))
        goto bad;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    struct jnode *node = jr_node(r, J_NUM);
    if (node)
        node->num = strtod(tmp, NULL);
    return node;
bad:
    jr_fail(r, "bad number", CKS_E_FORMAT);
    return NULL;
}

static struct jnode *jr_word(struct jr *r, const char *w, enum jtype t, bool b)
{
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n) != 0) {
        jr_fail(r, "unexpected character", CKS_E_FORMAT);
        return NULL;
    }
    r->p += n;
    struct jnode *node = jr_node(r, t);
    if (node)
        node->b = b;
    return node;
}

static struct jnode *jr_value(struct jr *r, int depth)
{
    if (depth > JR_MAX_DEPTH) {
        jr_fail(r, "nested too deeply", CKS_E_LIMIT);
        return NULL;
    }
    jr_ws(r);
    if (r->p >= r->end) {
        jr_fail(r, "unexpected end", CKS_E_FORMAT);
        return NULL;
    }
    switch (*r->p) {
    case '{':
        return jr_container(r, depth, true);
    case '[':
        return jr_container(r, depth, false);
    case 't':
        return jr_word(r, "true", J_BOOL, true);
    case 'f':
        return jr_word(r, "false", J_BOOL, false);
    case 'n':
        return jr_word(r, "null", J_NULL, false);
    case 'N':
    case 'I':
        return jr_nonfinite(r);
    case '"': {
        char *s = jr_string(r);
        struct jnode *n = s ? jr_node(r, J_STR) : NULL;
        if (n)
            n->str = s;
        else
            free(s);
        return n;
    }
    default:
        return jr_number(r);
    }
}

int jsonread_parse(const char *text, size_t len, struct jnode **ret, struct buf *err)
{
    struct jr r = {text, text + len, text, 0, err, 0};
    struct jnode *n = jr_value(&r, 0);
    if (n) {
        jr_ws(&r);
        if (r.p != r.end) {
            jr_fail(&r, "data after the value", CKS_E_FORMAT);
            jsonread_free(n);
            n = NULL;
        }
    }
    if (!n)
        return r.code ? r.code : CKS_E_FORMAT;
    *ret = n;
    return 0;
}

void jsonread_free(struct jnode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->nkids; i++)
        jsonread_free(n->kids[i]);
    free(n->kids);
    free(n->key);
    free(n->str);
    free(n);
}

const struct jnode *jnode_get(const struct jnode *obj, const char *key)
{
    if (!obj || obj->type != J_OBJ)
        return NULL;
    for (size_t i = 0; i < obj->nkids; i++)
        if (obj->kids[i]->key && !strcmp(obj->kids[i]->key, key))
            return obj->kids[i];
    return NULL;
}

const struct jnode *jnode_at(const struct jnode *arr, size_t i)
{
    return arr && arr->type == J_ARR && i < arr->nkids ? arr->kids[i] : NULL;
}

size_t jnode_len(const struct jnode *arr)
{
    return arr && arr->type == J_ARR ? arr->nkids : 0;
}

const char *jnode_str(const struct jnode *n, const char *dflt)
{
    return n && n->type == J_STR ? n->str : dflt;
}

double jnode_num(const struct jnode *n, double dflt)
{
    return n && n->type == J_NUM ? n->num : dflt;
}

bool jnode_bool(const struct jnode *n, bool dflt)
{
    return n && n->type == J_BOOL ? n->b : dflt;
}

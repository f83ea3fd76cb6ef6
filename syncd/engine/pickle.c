/*
 * pickle.c — the restricted pickle machine.
 *
 * Design notes.
 * - One pass over the opcodes with a value stack, a mark stack and a
 *   memo, as Python's own unpickler, except that nothing is looked up or
 *   called: a GLOBAL is two strings, a REDUCE an object node.  Every
 *   opcode's argument is bounds-checked before it is read.
 * - Nodes live in blocks owned by the pickle and are freed together, so
 *   the memo can share them freely; after STOP one iterative depth-first
 *   walk refuses cycles and computes the depth, so callers can recurse.
 * - Strict where Python is lenient: STOP must leave exactly one value and
 *   no open MARK, and end the input.
 */
#include "engine/pickle.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define BLOCK_NODES 4096u
#define STR_BLOCK 65536u
#define SMALL_INT_MAX 1024 /* ints -1 .. this are one shared node each */

/* Strings are packed in blocks (one of its own for a long one). */
struct sblock {
    struct sblock *next;
    size_t used, cap;
    char data[];
};

struct nblock {
    struct nblock *next;
    size_t used;
    struct pickle_node v[BLOCK_NODES];
};

struct pickle {
    const uint8_t *data;
    size_t len, pos;
    size_t op_at; /* the current opcode's offset, for errors */
    uint8_t op;
    struct pickle_limits lim;
    struct nblock *blocks;
    struct sblock *strs;
    struct pickle_node *small[SMALL_INT_MAX + 2]; /* immutable values, shared */
    struct pickle_node *none, *truth[2];
    size_t nnodes;
    struct pickle_node **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks, mcap;
    struct pickle_node **memo;
    size_t mlen, memo_count; /* slots allocated; distinct indices set */
    struct pickle_node *root;
    struct buf *err;
};

/* ---- errors and opcode names ----------------------------------------------- */

static const char *op_name(uint8_t op)
{
    static const struct {
        uint8_t op;
        const char *name;
    } t[] = {
        {0x80, "PROTO"},
        {0x95, "FRAME"},
        {'.', "STOP"},
        {'N', "NONE"},
        {0x88, "NEWTRUE"},
        {0x89, "NEWFALSE"},
        {'J', "BININT"},
        {'K', "BININT1"},
        {'M', "BININT2"},
        {0x8a, "LONG1"},
        {0x8b, "LONG4"},
        {'G', "BINFLOAT"},
        {'X', "BINUNICODE"},
        {0x8c, "SHORT_BINUNICODE"},
        {0x8d, "BINUNICODE8"},
        {'B', "BINBYTES"},
        {'C', "SHORT_BINBYTES"},
        {0x8e, "BINBYTES8"},
        {0x96, "BYTEARRAY8"},
        {'T', "BINSTRING"},
        {'U', "SHORT_BINSTRING"},
        {')', "EMPTY_TUPLE"},
        {0x85, "TUPLE1"},
        {0x86, "TUPLE2"},
        {0x87, "TUPLE3"},
        {'t', "TUPLE"},
        {']', "EMPTY_LIST"},
        {'a', "APPEND"},
        {'e', "APPENDS"},
        {'}', "EMPTY_DICT"},
        {'s', "SETITEM"},
        {'u', "SETITEMS"},
        {0x8f, "EMPTY_SET"},
        {0x90, "ADDITEMS"},
        {0x91, "FROZENSET"},
        {'(', "MARK"},
        {'0', "POP"},
        {'1', "POP_MARK"},
        {'2', "DUP"},
        {'c', "GLOBAL"},
        {0x93, "STACK_GLOBAL"},
        {'R', "REDUCE"},
        {0x81, "NEWOBJ"},
        {0x92, "NEWOBJ_EX"},
        {'b', "BUILD"},
        {'p', "PUT"},
        {'q', "BINPUT"},
        {'r', "LONG_BINPUT"},
        {0x94, "MEMOIZE"},
        {'g', "GET"},
        {'h', "BINGET"},
        {'j', "LONG_BINGET"},
        {'I', "INT"},
        {'L', "LONG"},
        {'F', "FLOAT"},
        {'S', "STRING"},
        {'V', "UNICODE"},
        {'l', "LIST"},
        {'d', "DICT"},
        {'i', "INST"},
        {'o', "OBJ"},
        {'P', "PERSID"},
        {'Q', "BINPERSID"},
        {0x82, "EXT1"},
        {0x83, "EXT2"},
        {0x84, "EXT4"},
        {0x97, "NEXT_BUFFER"},
        {0x98, "READONLY_BUFFER"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (t[i].op == op)
            return t[i].name;
    return "unknown opcode";
}

static int fail(struct pickle *p, int code, const char *what)
{
    if (p->err)
        buf_printf(p->err, "offset %zu: %s (0x%02x): %s", p->op_at, op_name(p->op), p->op, what);
    return code;
}

/* ---- nodes, stack, memo ------------------------------------------------------ */

static struct pickle_node *node_new(struct pickle *p, enum pickle_kind kind)
{
    if (p->nnodes >= p->lim.max_nodes)
        return NULL;
    if (!p->blocks || p->blocks->used == BLOCK_NODES) {
        struct nblock *b = malloc(sizeof(*b));
        if (!b)
            return NULL;
        b->next = p->blocks;
        b->used = 0;
        p->blocks = b;
    }
    struct pickle_node *n = &p->blocks->v[p->blocks->used++];
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    p->nnodes++;
    return n;
}

/* A new node, or the error (limit or memory) returned through *e. */
static struct pickle_node *mk(struct pickle *p, enum pickle_kind kind, int *e)
{
    struct pickle_node *n = node_new(p, kind);
    if (!n)
        *e = p->nnodes >= p->lim.max_nodes ? fail(p, CKS_E_LIMIT, "too many values") : -ENOMEM;
    return n;
}

static int grow(void **v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *n = realloc(*v, c * size);
    if (!n)
        return -ENOMEM;
    *v = n;
    *cap = c;
    return 0;
}

static int push(struct pickle *p, struct pickle_node *n)
{
    if (p->sp >= p->lim.max_nodes)
        return fail(p, CKS_E_LIMIT, "stack too deep");
    int e = grow((void **)&p->stack, &p->scap, p->sp + 1, sizeof(*p->stack));
    if (e == 0)
        p->stack[p->sp++] = n;
    return e;
}

/* The stack's floor: values below the innermost MARK are not poppable. */
static size_t floor_of(const struct pickle *p)
{
    return p->nmarks ? p->marks[p->nmarks - 1] : 0;
}

static int pop(struct pickle *p, struct pickle_node **ret)
{
    if (p->sp <= floor_of(p))
        return fail(p, CKS_E_FORMAT, "stack underflow");
    *ret = p->stack[--p->sp];
    return 0;
}

static int top(struct pickle *p, struct pickle_node **ret)
{
    if (p->sp <= floor_of(p))
        return fail(p, CKS_E_FORMAT, "stack underflow");
    *ret = p->stack[p->sp - 1];
    return 0;
}

/* The values above the innermost MARK: stack[*ret_start .. sp); the mark
 * is removed (the values stay until the caller drops them). */
static int pop_mark(struct pickle *p, size_t *ret_start)
{
    if (!p->nmarks)
        return fail(p, CKS_E_FORMAT, "no MARK");
    *ret_start = p->marks[--p->nmarks];
    return 0;
}

/* Appends kids[0 .. k) to container c: the first batch exactly, later
 * ones doubling (a dict filled by SETITEMS batches of 1000). */
static int add_kids(struct pickle *p, struct pickle_node *c, struct pickle_node *const *kids,
                    size_t k)
{
    if (k > p->lim.max_nodes - c->n)
        return fail(p, CKS_E_LIMIT, "too many values");
    if (c->n + k > c->cap) {
        size_t cap = c->cap ? 2 * (size_t)c->cap : k;
        cap = cap < c->n + k ? c->n + k : cap;
        struct pickle_node **v = realloc(c->kids, (cap ? cap : 1) * sizeof(*v));
        if (!v)
            return -ENOMEM;
        c->kids = v;
        c->cap = (uint32_t)cap;
    }
    if (k)
        memcpy(c->kids + c->n, kids, k * sizeof(*kids));
    c->n += (uint32_t)k;
    return 0;
}

static int memo_put(struct pickle *p, uint64_t idx)
{
    struct pickle_node *n;
    int e = top(p, &n);
    if (e < 0)
        return e;
    if (idx >= p->lim.max_nodes || idx >= p->len) /* a real memo has fewer slots than bytes */
        return fail(p, CKS_E_LIMIT, "memo index too large");
    if (idx >= p->mlen) {
        size_t old = p->mlen;
        if ((e = grow((void **)&p->memo, &p->mlen, (size_t)idx + 1, sizeof(*p->memo))) < 0)
            return e;
        memset(p->memo + old, 0, (p->mlen - old) * sizeof(*p->memo));
    }
    if (!p->memo[idx])
        p->memo_count++;
    p->memo[idx] = n;
    return 0;
}

static int memo_get(struct pickle *p, uint64_t idx)
{
    if (idx >= p->mlen || !p->memo[idx])
        return fail(p, CKS_E_FORMAT, "memo index never set");
    return push(p, p->memo[idx]);
}

/* ---- reading arguments -------------------------------------------------- */

static int need(struct pickle *p, uint64_t n)
{
    if (n > p->len - p->pos)
        return fail(p, CKS_E_FORMAT, "argument runs past the end");
    return 0;
}

/* An unsigned little-endian integer of n bytes. */
static int arg_uint(struct pickle *p, unsigned n, uint64_t *ret)
{
    int e = need(p, n);
    uint64_t v = 0;
    for (unsigned i = 0; e == 0 && i < n; i++)
        v |= (uint64_t)p->data[p->pos + i] << (8 * i);
    p->pos += e == 0 ? n : 0;
    *ret = v;
    return e;
}

/* A line ending in '\n' (GLOBAL's names, PUT and GET): into *ret_s, its
 * length without the newline into *ret_n. */
static int arg_line(struct pickle *p, const char **ret_s, size_t *ret_n)
{
    size_t lim = p->len - p->pos;
    if (lim > 1024)
        lim = 1024;
    const uint8_t *s = p->data + p->pos, *nl = memchr(s, '\n', lim);
    if (!nl)
        return fail(p, CKS_E_FORMAT, "no newline within 1024 bytes");
    *ret_s = (const char *)s;
    *ret_n = (size_t)(nl - s);
    p->pos += *ret_n + 1;
    return memchr(s, 0, *ret_n) ? fail(p, CKS_E_FORMAT, "NUL in a line") : 0;
}

static int arg_decimal(struct pickle *p, uint64_t *ret)
{
    const char *s;
    size_t n;
    int e = arg_line(p, &s, &n);
    uint64_t v = 0;
    if (e == 0 && (n == 0 || n > 12))
        return fail(p, CKS_E_FORMAT, "not a memo index");
    for (size_t i = 0; e == 0 && i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return fail(p, CKS_E_FORMAT, "not a memo index");
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *ret = v;
    return e;
}

/* A NUL-terminated copy of s[0 .. n) in p's string blocks. */
static char *dup_bytes(struct pickle *p, const void *s, size_t n)
{
    struct sblock *b = p->strs;
    if (!b || b->cap - b->used < n + 1) {
        size_t cap = n + 1 > STR_BLOCK ? n + 1 : STR_BLOCK;
        if (!(b = malloc(sizeof(*b) + cap)))
            return NULL;
        b->used = 0;
        b->cap = cap;
        if (cap > STR_BLOCK && p->strs) { /* a long one: the current block stays current */
            b->next = p->strs->next;
            p->strs->next = b;
        } else {
            b->next = p->strs;
            p->strs = b;
        }
    }
    char *d = b->data + b->used;
    b->used += n + 1;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* A str or bytes value of n bytes at the read position. */
static int push_string(struct pickle *p, enum pickle_kind kind, uint64_t n)
{
    int e = need(p, n);
    if (e < 0)
        return e;
    if (n > p->lim.max_string)
        return fail(p, CKS_E_LIMIT, "string longer than the limit");
    struct pickle_node *v = mk(p, kind, &e);
    if (!v)
        return e;
    if (!(v->s = dup_bytes(p, p->data + p->pos, (size_t)n)))
        return -ENOMEM;
    v->len = (size_t)n;
    p->pos += (size_t)n;
    return push(p, v);
}

/* Strings with a length of lenbytes bytes before them. */
static int op_string(struct pickle *p, enum pickle_kind kind, unsigned lenbytes)
{
    uint64_t n;
    int e = arg_uint(p, lenbytes, &n);
    return e < 0 ? e : push_string(p, kind, n);
}

/* Pushes the shared node *slot, made (kind, value v) on first use. */
static int push_shared(struct pickle *p, struct pickle_node **slot, enum pickle_kind kind,
                       int64_t v)
{
    int e = 0;
    if (!*slot && (*slot = mk(p, kind, &e))) {
        (*slot)->i = v;
        (*slot)->b = v != 0;
    }
    return *slot ? push(p, *slot) : e;
}

static int push_int(struct pickle *p, int64_t v)
{
    int e = 0;
    if (v >= -1 && v <= SMALL_INT_MAX)
        return push_shared(p, &p->small[v + 1], PICKLE_INT, v);
    struct pickle_node *n = mk(p, PICKLE_INT, &e);
    if (!n)
        return e;
    n->i = v;
    return push(p, n);
}

/* LONG1 / LONG4: two's complement, little endian, of n bytes. */
static int op_long(struct pickle *p, unsigned lenbytes)
{
    uint64_t n, v = 0;
    int e = arg_uint(p, lenbytes, &n);
    if (e == 0)
        e = need(p, n);
    if (e == 0 && n > p->lim.max_string)
        e = fail(p, CKS_E_LIMIT, "integer longer than the limit");
    if (e < 0)
        return e;
    const uint8_t *b = p->data + p->pos;
    p->pos += (size_t)n;
    if (n > 8) {
        struct pickle_node *big = mk(p, PICKLE_BIGINT, &e);
        return big ? push(p, big) : e;
    }
    for (uint64_t i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    if (n > 0 && n < 8 && (b[n - 1] & 0x80))
        v |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    return push_int(p, (int64_t)v);
}

static int op_float(struct pickle *p)
{
    int e = need(p, 8);
    uint64_t bits = 0;
    double d;
    if (e < 0)
        return e;
    for (int i = 0; i < 8; i++) /* big endian */
        bits = bits << 8 | p->data[p->pos + (size_t)i];
    p->pos += 8;
    memcpy(&d, &bits, sizeof(d));
    struct pickle_node *n = mk(p, PICKLE_FLOAT, &e);
    if (!n)
        return e;
    n->f = d;
    return push(p, n);
}

/* ---- containers --------------------------------------------------------- */

/* A container of kind from the top k values (k < 0: those above the MARK). */
static int op_collect(struct pickle *p, enum pickle_kind kind, int k)
{
    size_t start = 0;
    int e = 0;
    if (k < 0)
        e = pop_mark(p, &start);
    else if (p->sp < floor_of(p) + (size_t)k)
        return fail(p, CKS_E_FORMAT, "stack underflow");
    else
        start = p->sp - (size_t)k;
    struct pickle_node *c = e == 0 ? mk(p, kind, &e) : NULL;
    if (c)
        e = add_kids(p, c, p->stack + start, p->sp - start);
    if (e < 0)
        return e;
    p->sp = start;
    return push(p, c);
}

static int empty(struct pickle *p, enum pickle_kind kind)
{
    int e = 0;
    struct pickle_node *c = mk(p, kind, &e);
    return c ? push(p, c) : e;
}

/* The object's items or dictitems slot, made on first use. */
static struct pickle_node *obj_slot(struct pickle *p, struct pickle_node *o, int slot,
                                    enum pickle_kind kind, int *e)
{
    if (!o->kids[slot])
        o->kids[slot] = mk(p, kind, e);
    return o->kids[slot];
}

/* The container APPEND(S) (pairs false) or SETITEM(S) (pairs true) adds
 * to: target itself, or an object's items. */
static struct pickle_node *add_target(struct pickle *p, struct pickle_node *t, bool pairs, int *e)
{
    if (!pairs && t->kind == PICKLE_LIST)
        return t;
    if (pairs && t->kind == PICKLE_DICT)
        return t;
    if (t->kind == PICKLE_OBJECT)
        return obj_slot(p, t, pairs ? PICKLE_OBJ_DICTITEMS : PICKLE_OBJ_ITEMS,
                        pairs ? PICKLE_DICT : PICKLE_LIST, e);
    *e = fail(p, CKS_E_FORMAT, pairs ? "target is not a dict" : "target is not a list");
    return NULL;
}

/* APPEND(S), SETITEM(S), ADDITEMS: the values above the MARK (mark true)
 * or the top 1 or 2 go into the value below them. */
static int op_add(struct pickle *p, bool mark, bool pairs, bool set)
{
    size_t start = 0, width = pairs ? 2 : 1;
    int e = 0;
    if (mark)
        e = pop_mark(p, &start);
    else if (p->sp < floor_of(p) + width + 1)
        return fail(p, CKS_E_FORMAT, "stack underflow");
    else
        start = p->sp - width;
    if (e == 0 && (start <= floor_of(p) || (p->sp - start) % width))
        return fail(p, CKS_E_FORMAT, start <= floor_of(p) ? "nothing to add to" : "odd items");
    struct pickle_node *t = e == 0 ? p->stack[start - 1] : NULL, *c = NULL;
    if (t && set)
        c = t->kind == PICKLE_SET ? t : NULL;
    else if (t)
        c = add_target(p, t, pairs, &e);
    if (t && set && !c)
        e = fail(p, CKS_E_FORMAT, "target is not a set");
    if (c && e == 0)
        e = add_kids(p, c, p->stack + start, p->sp - start);
    if (e == 0)
        p->sp = start;
    return e;
}

/* ---- classes and objects -------------------------------------------------- */

static int push_global(struct pickle *p, const char *mod, size_t mn, const char *name, size_t nn)
{
    int e = 0;
    if (mn == 0 || nn == 0 || memchr(mod, 0, mn) || memchr(name, 0, nn))
        return fail(p, CKS_E_FORMAT, "empty module or name, or a NUL in it");
    struct pickle_node *g = mk(p, PICKLE_GLOBAL, &e);
    if (!g)
        return e;
    g->s = dup_bytes(p, mod, mn);
    g->name = dup_bytes(p, name, nn);
    return g->s && g->name ? push(p, g) : -ENOMEM;
}

static int op_global(struct pickle *p)
{
    const char *mod = NULL, *name = NULL;
    size_t mn = 0, nn = 0;
    int e = arg_line(p, &mod, &mn);
    if (e == 0)
        e = arg_line(p, &name, &nn);
    return e < 0 ? e : push_global(p, mod, mn, name, nn);
}

static int op_stack_global(struct pickle *p)
{
    struct pickle_node *mod, *name;
    int e = pop(p, &name);
    if (e == 0)
        e = pop(p, &mod);
    if (e == 0 && (mod->kind != PICKLE_STR || name->kind != PICKLE_STR))
        return fail(p, CKS_E_FORMAT, "module and name are not both str");
    return e < 0 ? e : push_global(p, mod->s, mod->len, name->s, name->len);
}

/* REDUCE (nkw 0, cls is the callable), NEWOBJ (0), NEWOBJ_EX (1). */
static int op_object(struct pickle *p, bool kwargs)
{
    struct pickle_node *cls, *args, *kw = NULL, *o;
    int e = kwargs ? pop(p, &kw) : 0;
    if (e == 0)
        e = pop(p, &args);
    if (e == 0)
        e = pop(p, &cls);
    if (e == 0 && (args->kind != PICKLE_TUPLE || (kw && kw->kind != PICKLE_DICT)))
        return fail(p, CKS_E_FORMAT, "arguments are not a tuple (and a dict)");
    if (e < 0 || !(o = mk(p, PICKLE_OBJECT, &e)))
        return e;
    if (!(o->kids = calloc(PICKLE_OBJ_NKIDS, sizeof(*o->kids))))
        return -ENOMEM;
    o->n = o->cap = PICKLE_OBJ_NKIDS;
    o->kids[PICKLE_OBJ_CLASS] = cls;
    o->kids[PICKLE_OBJ_ARGS] = args;
    o->kids[PICKLE_OBJ_KWARGS] = kw;
    return push(p, o);
}

static int op_build(struct pickle *p)
{
    struct pickle_node *state = NULL, *o = NULL;
    int e = pop(p, &state);
    if (e == 0)
        e = top(p, &o);
    if (e == 0 && o->kind != PICKLE_OBJECT)
        return fail(p, CKS_E_FORMAT, "BUILD on a value that is not an object");
    if (e == 0 && o->kids[PICKLE_OBJ_STATE])
        return fail(p, CKS_E_FORMAT, "a second BUILD on one object");
    if (e == 0)
        o->kids[PICKLE_OBJ_STATE] = state;
    return e;
}

/* BINPERSID, where allowed: the id on the stack becomes a PICKLE_PERSID. */
static int op_persid(struct pickle *p)
{
    struct pickle_node *id, *n;
    int e;
    if (!p->lim.persid)
        return fail(p, CKS_E_FORMAT, "unknown or unsupported opcode");
    if ((e = pop(p, &id)) < 0 || !(n = mk(p, PICKLE_PERSID, &e)))
        return e;
    if ((e = add_kids(p, n, &id, 1)) < 0)
        return e;
    return push(p, n);
}

/* ---- the machine ---------------------------------------------------------- */

static int op_stack(struct pickle *p)
{
    struct pickle_node *n;
    size_t start = 0;
    int e;
    switch (p->op) {
    case '(':
        if (p->nmarks >= p->lim.max_depth)
            return fail(p, CKS_E_LIMIT, "too many open MARKs");
        if ((e = grow((void **)&p->marks, &p->mcap, p->nmarks + 1, sizeof(*p->marks))) == 0)
            p->marks[p->nmarks++] = p->sp;
        return e;
    case '0':
        return p->sp > floor_of(p) ? pop(p, &n) : pop_mark(p, &start);
    case '1':
        if ((e = pop_mark(p, &start)) == 0)
            p->sp = start;
        return e;
    default: /* '2' */
        return (e = top(p, &n)) < 0 ? e : push(p, n);
    }
}

static int op_memo(struct pickle *p)
{
    uint64_t idx = 0;
    int e = 0;
    switch (p->op) {
    case 'p':
    case 'g':
        e = arg_decimal(p, &idx);
        break;
    case 'q':
    case 'h':
        e = arg_uint(p, 1, &idx);
        break;
    case 'r':
    case 'j':
        e = arg_uint(p, 4, &idx);
        break;
    default: /* MEMOIZE */
        idx = p->memo_count;
    }
    if (e < 0)
        return e;
    return p->op == 'g' || p->op == 'h' || p->op == 'j' ? memo_get(p, idx) : memo_put(p, idx);
}

static int op_scalar(struct pickle *p)
{
    uint64_t v;
    int e = 0;
    switch (p->op) {
    case 'N':
        return push_shared(p, &p->none, PICKLE_NONE, 0);
    case 0x88:
    case 0x89:
        return push_shared(p, &p->truth[p->op == 0x88], PICKLE_BOOL, p->op == 0x88);
    case 'J':
        return (e = arg_uint(p, 4, &v)) < 0 ? e : push_int(p, (int32_t)(uint32_t)v);
    case 'K':
        return (e = arg_uint(p, 1, &v)) < 0 ? e : push_int(p, (int64_t)v);
    case 'M':
        return (e = arg_uint(p, 2, &v)) < 0 ? e : push_int(p, (int64_t)v);
    case 0x8a:
        return op_long(p, 1);
    case 0x8b:
        return op_long(p, 4);
    default: /* 'G' */
        return op_float(p);
    }
}

static int op_strings(struct pickle *p)
{
    switch (p->op) {
    case 'X':
        return op_string(p, PICKLE_STR, 4);
    case 0x8c:
        return op_string(p, PICKLE_STR, 1);
    case 0x8d:
        return op_string(p, PICKLE_STR, 8);
    case 'B':
    case 'T':
        return op_string(p, PICKLE_BYTES, 4);
    case 'C':
    case 'U':
        return op_string(p, PICKLE_BYTES, 1);
    default: /* BINBYTES8, BYTEARRAY8 */
        return op_string(p, PICKLE_BYTES, 8);
    }
}

static int op_containers(struct pickle *p)
{
    switch (p->op) {
    case ')':
        return empty(p, PICKLE_TUPLE);
    case 0x85:
    case 0x86:
    case 0x87:
        return op_collect(p, PICKLE_TUPLE, p->op - 0x84);
    case 't':
        return op_collect(p, PICKLE_TUPLE, -1);
    case ']':
        return empty(p, PICKLE_LIST);
    case '}':
        return empty(p, PICKLE_DICT);
    case 0x8f:
        return empty(p, PICKLE_SET);
    case 0x91:
        return op_collect(p, PICKLE_FROZENSET, -1);
    case 'a':
        return op_add(p, false, false, false);
    case 'e':
        return op_add(p, true, false, false);
    case 's':
        return op_add(p, false, true, false);
    case 'u':
        return op_add(p, true, true, false);
    default: /* ADDITEMS */
        return op_add(p, true, false, true);
    }
}

static int op_frame(struct pickle *p)
{
    uint64_t n;
    int e = arg_uint(p, 8, &n);
    return e < 0 ? e : need(p, n); /* the frame's bytes are the opcodes that follow */
}

static bool op_in(const char *set, uint8_t op)
{
    return op && strchr(set, op);
}

/* One opcode at p->pos.  1 after STOP. */
static int step(struct pickle *p)
{
    uint8_t op = p->data[p->pos];
    p->op_at = p->pos++;
    p->op = op;
    if (op_in("NJKMG", op) || (op >= 0x88 && op <= 0x8b))
        return op_scalar(p);
    if (op_in("XBCTU", op) || (op >= 0x8c && op <= 0x8e) || op == 0x96)
        return op_strings(p);
    if (op_in(")t]}aesu", op) || (op >= 0x85 && op <= 0x87) || (op >= 0x8f && op <= 0x91))
        return op_containers(p);
    if (op_in("(012", op))
        return op_stack(p);
    if (op_in("pqrghj", op) || op == 0x94)
        return op_memo(p);
    switch (p->op) {
    case 'c':
        return op_global(p);
    case 0x93:
        return op_stack_global(p);
    case 'R':
    case 0x81:
        return op_object(p, false);
    case 0x92:
        return op_object(p, true);
    case 'b':
        return op_build(p);
    case 'Q':
        return op_persid(p);
    case 0x95:
        return op_frame(p);
    case '.':
        return 1;
    default:
        return fail(p, CKS_E_FORMAT, "unknown or unsupported opcode");
    }
}

/* ---- after STOP: acyclic, bounded depth ------------------------------------- */

struct dfs_frame {
    struct pickle_node *n;
    size_t next;
};

/* Visits n's next kid; pops the frame when done.  CKS_E_FORMAT on a cycle. */
static int dfs_step(struct dfs_frame *f, size_t *sp, size_t cap)
{
    struct dfs_frame *t = &f[*sp - 1];
    while (t->next < t->n->n && (!t->n->kids[t->next] || t->n->kids[t->next]->color == 2)) {
        struct pickle_node *k = t->n->kids[t->next++];
        if (k && k->depth + 1 > t->n->depth)
            t->n->depth = k->depth + 1;
    }
    if (t->next == t->n->n) {
        t->n->color = 2;
        (*sp)--;
        return 0;
    }
    struct pickle_node *k = t->n->kids[t->next];
    if (k->color == 1)
        return CKS_E_FORMAT; /* a path back to a node being walked */
    if (*sp == cap)
        return CKS_E_LIMIT;
    k->color = 1;
    f[(*sp)++] = (struct dfs_frame){k, 0};
    return 0;
}

static int check_shape(struct pickle *p)
{
    size_t cap = p->lim.max_depth + 1, sp = 1;
    struct dfs_frame *f = malloc(cap * sizeof(*f));
    int e = f ? 0 : -ENOMEM;
    if (e == 0) {
        p->root->color = 1;
        f[0] = (struct dfs_frame){p->root, 0};
    }
    while (e == 0 && sp > 0)
        e = dfs_step(f, &sp, cap);
    free(f);
    if (e == CKS_E_FORMAT)
        return fail(p, e, "the value contains itself (a cycle)");
    if (e == CKS_E_LIMIT || (e == 0 && p->root->depth >= p->lim.max_depth))
        return fail(p, CKS_E_LIMIT, "the value is nested deeper than the limit");
    return e;
}

static int run(struct pickle *p)
{
    int e = 0;
    p->op_at = 0;
    p->op = p->len ? p->data[0] : 0;
    if (p->len > p->lim.max_bytes)
        return fail(p, CKS_E_LIMIT, "input larger than the limit");
    if (p->len < 2 || p->data[0] != 0x80 || p->data[1] < 2 || p->data[1] > 5)
        return fail(p, CKS_E_FORMAT, "not a pickle of protocol 2 to 5");
    p->pos = 2;
    while (e == 0 && p->pos < p->len)
        e = step(p);
    if (e == 0)
        return fail(p, CKS_E_FORMAT, "input ends before STOP");
    if (e < 0)
        return e;
    if (p->nmarks || p->sp != 1)
        return fail(p, CKS_E_FORMAT, p->nmarks ? "a MARK is still open" : "not one value left");
    if (p->pos != p->len)
        return fail(p, CKS_E_FORMAT, "bytes follow STOP");
    p->root = p->stack[0];
    return check_shape(p);
}

int pickle_parse(const uint8_t *data, size_t len, const struct pickle_limits *lim,
                 struct pickle **ret, struct buf *err)
{
    static const struct pickle_limits dflt = PICKLE_LIMITS_DEFAULT;
    struct pickle *p = calloc(1, sizeof(*p));
    *ret = NULL;
    if (!p)
        return -ENOMEM;
    p->data = data;
    p->len = len;
    p->lim = lim ? *lim : dflt;
    p->err = err;
    int e = run(p);
    free(p->stack);
    free(p->marks);
    free(p->memo);
    p->stack = NULL;
    p->marks = NULL;
    p->memo = NULL;
    p->data = NULL;
    p->err = NULL;
    if (e < 0) {
        pickle_free(p);
        return e;
    }
    *ret = p;
    return 0;
}

void pickle_free(struct pickle *p)
{
    if (!p)
        return;
    while (p->blocks) {
        struct nblock *b = p->blocks;
        p->blocks = b->next;
        for (size_t i = 0; i < b->used; i++) {
            free(b->v[i].kids);
        }
        free(b);
    }
    while (p->strs) {
        struct sblock *b = p->strs;
        p->strs = b->next;
        free(b);
    }
    free(p);
}

const struct pickle_node *pickle_root(const struct pickle *p)
{
    return p->root;
}

size_t pickle_nnodes(const struct pickle *p)
{
    return p->nnodes;
}

/* ---- lookups ------------------------------------------------------------- */

const struct pickle_node *pickle_class(const struct pickle_node *n)
{
    const struct pickle_node *c = n && n->kind == PICKLE_OBJECT ? n->kids[PICKLE_OBJ_CLASS] : NULL;
    return c && c->kind == PICKLE_GLOBAL ? c : NULL;
}

bool pickle_is_class(const struct pickle_node *n, const char *module, const char *name)
{
    const struct pickle_node *c = pickle_class(n);
    return c && !strcmp(c->s, module) && !strcmp(c->name, name);
}

bool pickle_is_cstr(const struct pickle_node *n)
{
    return n && n->kind == PICKLE_STR && strlen(n->s) == n->len;
}

const struct pickle_node *pickle_dict_get(const struct pickle_node *d, const char *key)
{
    if (!d || d->kind != PICKLE_DICT)
        return NULL;
    for (size_t i = 0; i + 1 < d->n; i += 2)
        if (pickle_is_cstr(d->kids[i]) && !strcmp(d->kids[i]->s, key))
            return d->kids[i + 1];
    return NULL;
}

const struct pickle_node *pickle_attr(const struct pickle_node *obj, const char *name)
{
    const struct pickle_node *st =
        obj && obj->kind == PICKLE_OBJECT ? obj->kids[PICKLE_OBJ_STATE] : NULL;
    if (st && st->kind == PICKLE_TUPLE && st->n == 2) { /* (dict or None, slots) */
        const struct pickle_node *v = pickle_dict_get(st->kids[0], name);
        return v ? v : pickle_dict_get(st->kids[1], name);
    }
    return pickle_dict_get(st, name);
}

const char *pickle_kind_name(const struct pickle_node *n)
{
    static const char *const names[] = {"None", "bool",      "int",   "int",    "float",
                                        "str",  "bytes",     "tuple", "list",   "dict",
                                        "set",  "frozenset", "class", "object", "persistent id"};
    return n ? names[n->kind] : "nothing";
}

/*
 * queue.c — encodings of the pending and queue records.
 *
 * Queue keys: slot u8 | ~seq u64 big-endian | kind u8 | id[32].  Inverting
 * seq makes a plain cursor walk visit the newest snapshot first; kind 0
 * (chunk) sorts before kind 1 (publish) within one snapshot.  Values and
 * pending records start with a version byte and are little-endian.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "store/queue.h"

#define QKEY_LEN (1 + 8 + 1 + HASH_LEN)
#define QVAL_LEN (1 + 4 + 8 + 4)
#define REC_VERSION 1
#define REC_RECIPE 2 /* a QUEUE_RECIPE entry: keyed as a chunk entry (before the publish) */
#define PENDING_HEAD (1 + 8 + 8 + 1 + 8)

static void be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void qkey(const struct qentry *q, uint8_t k[QKEY_LEN])
{
    k[0] = (uint8_t)q->slot;
    be64(k + 1, ~q->seq);
    k[9] = (uint8_t)(q->kind == QUEUE_RECIPE ? QUEUE_CHUNK : q->kind);
    memcpy(k + 10, q->id, HASH_LEN);
}

int queue_put(struct index_txn *t, const struct qentry *q)
{
    uint8_t k[QKEY_LEN], v[QVAL_LEN];
    qkey(q, k);
    v[0] = q->kind == QUEUE_RECIPE ? REC_RECIPE : REC_VERSION;
    le(v + 1, q->file, 4);
    le(v + 5, q->off, 8);
    le(v + 13, q->len, 4);
    return index_raw_put(t, INDEX_QUEUE, k, sizeof(k), v, sizeof(v));
}

int queue_del(struct index_txn *t, const struct qentry *q)
{
    uint8_t k[QKEY_LEN];
    qkey(q, k);
    return index_raw_del(t, INDEX_QUEUE, k, sizeof(k));
}

static int qdecode(const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, struct qentry *ret)
{
    if (klen != QKEY_LEN || vlen != QVAL_LEN || k[9] > QUEUE_PUBLISH ||
        (v[0] != REC_VERSION && (v[0] != REC_RECIPE || k[9] != QUEUE_CHUNK)))
        return CKS_E_FORMAT;
    ret->slot = k[0];
    ret->seq = ~get_be64(k + 1);
    ret->kind = v[0] == REC_RECIPE ? QUEUE_RECIPE : (enum qkind)k[9];
    memcpy(ret->id, k + 10, HASH_LEN);
    ret->file = (uint32_t)get_le(v + 1, 4);
    ret->off = get_le(v + 5, 8);
    ret->len = (uint32_t)get_le(v + 13, 4);
    return 0;
}

static int qfirst_cb(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
    int e = qdecode(key, klen, val, vlen, ud);
    return e < 0 ? e : 1;
}

int queue_first(struct index_txn *t, unsigned slot, struct qentry *ret)
{
    uint8_t prefix = (uint8_t)slot;
    int e = index_raw_foreach(t, INDEX_QUEUE, &prefix, 1, qfirst_cb, ret);
    return e == 1 ? 0 : e < 0 ? e : -ENOENT;
}

struct qwalk {
    int (*cb)(void *ud, const struct qentry *q);
    void *ud;
};

static int qwalk_cb(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
    struct qwalk *w = ud;
    struct qentry q;
    int e = qdecode(key, klen, val, vlen, &q);
    return e < 0 ? e : w->cb(w->ud, &q);
}

int queue_walk(struct index_txn *t, unsigned slot, int (*cb)(void *ud, const struct qentry *q),
               void *ud)
{
    struct qwalk w = {cb, ud};
    uint8_t prefix = (uint8_t)slot;
    int e = index_raw_foreach(t, INDEX_QUEUE, &prefix, 1, qwalk_cb, &w);
    return e;
}

int queue_has_seq(struct index_txn *t, uint64_t seq, unsigned nslots)
{
    for (unsigned s = 0; s < nslots; s++) {
        uint8_t prefix[9];
        struct qentry q;
        prefix[0] = (uint8_t)s;
        be64(prefix + 1, ~seq);
        int e = index_raw_foreach(t, INDEX_QUEUE, prefix, sizeof(prefix), qfirst_cb, &q);
        if (e != 0)
            return e < 0 ? e : 1;
    }
    return 0;
}

struct qstats {
    uint64_t chunks, bytes, oldest;
};

static int qstats_cb(void *ud, const void *key, size_t klen, const void *val, size_t vlen);

int queue_seq_bytes(struct index_txn *t, uint64_t seq, unsigned nslots, uint64_t *ret)
{
    struct qstats st = {0, 0, 0};
    int e = 0;
    for (unsigned s = 0; s < nslots && e == 0; s++) {
        uint8_t prefix[9];
        prefix[0] = (uint8_t)s;
        be64(prefix + 1, ~seq);
        e = index_raw_foreach(t, INDEX_QUEUE, prefix, sizeof(prefix), qstats_cb, &st);
    }
    *ret = st.bytes;
    return e;
}

struct qcollect {
    uint8_t (*keys)[QKEY_LEN];
    size_t n, cap;
};

static int qcollect_cb(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
    struct qcollect *c = ud;
    (void)val;
    (void)vlen;
    if (klen != QKEY_LEN)
        return CKS_E_FORMAT;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        void *p = realloc(c->keys, cap * QKEY_LEN);
        if (!p)
            return -ENOMEM;
        c->keys = p;
        c->cap = cap;
    }
    memcpy(c->keys[c->n++], key, QKEY_LEN);
    return 0;
}

int queue_drop_seq(struct index_txn *t, uint64_t seq, unsigned nslots)
{
    int e = 0;
    for (unsigned s = 0; s < nslots && e == 0; s++) {
        struct qcollect c = {0};
        uint8_t prefix[9];
        prefix[0] = (uint8_t)s;
        be64(prefix + 1, ~seq);
        /* Collect first: deleting under a live scan would skip records. */
        e = index_raw_foreach(t, INDEX_QUEUE, prefix, sizeof(prefix), qcollect_cb, &c);
        for (size_t i = 0; e == 0 && i < c.n; i++)
            e = index_raw_del(t, INDEX_QUEUE, c.keys[i], QKEY_LEN);
        free(c.keys);
    }
    return e;
}

static int qstats_cb(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
    struct qstats *st = ud;
    struct qentry q;
    int e = qdecode(key, klen, val, vlen, &q);
    if (e < 0)
        return e;
    if (q.kind != QUEUE_PUBLISH) { /* a chunk or recipe object to upload */
        st->chunks++;
        st->bytes += q.len;
    }
    if (st->oldest == 0 || q.seq < st->oldest)
        st->oldest = q.seq;
    return 0;
}

int queue_stats(struct index_txn *t, unsigned slot, uint64_t *ret_chunks, uint64_t *ret_bytes,
                uint64_t *ret_oldest_seq)
{
    struct qstats st = {0, 0, 0};
    uint8_t prefix = (uint8_t)slot;
    int e = index_raw_foreach(t, INDEX_QUEUE, &prefix, 1, qstats_cb, &st);
    *ret_chunks = st.chunks;
    *ret_bytes = st.bytes;
    *ret_oldest_seq = st.oldest;
    return e;
}

int queue_next_seq(struct index_txn *t, uint64_t *ret)
{
    char val[32];
    uint64_t seq = 1;
    int e = index_meta_get(t, "queue_seq", val, sizeof(val));
    if (e == 0) {
        char *end;
        errno = 0;
        seq = strtoull(val, &end, 10);
        if (errno || *end || seq == 0)
            return CKS_E_FORMAT;
    } else if (e != -ENOENT) {
        return e;
    }
    snprintf(val, sizeof(val), "%llu", (unsigned long long)(seq + 1));
    if ((e = index_meta_put(t, "queue_seq", val)) < 0)
        return e;
    *ret = seq;
    return 0;
}

/* ---- pending ----------------------------------------------------------- */

static int put_str(struct buf *b, const char *s)
{
    size_t n = strlen(s);
    uint8_t len[2];
    le(len, n, 2);
    int e = buf_append(b, len, 2);
    return e < 0 ? e : buf_append(b, s, n);
}

static int get_str(const uint8_t **p, const uint8_t *end, char *out, size_t cap)
{
    if (end - *p < 2)
        return CKS_E_FORMAT;
    size_t n = (size_t)get_le(*p, 2);
    *p += 2;
    if ((size_t)(end - *p) < n || n >= cap || memchr(*p, 0, n))
        return CKS_E_FORMAT;
    memcpy(out, *p, n);
    out[n] = 0;
    *p += n;
    return 0;
}

int queue_pending_put(struct index_txn *t, const struct pending *p)
{
    struct buf b = BUF_INIT;
    uint8_t head[PENDING_HEAD], key[8];
    int e;
    head[0] = REC_VERSION;
    le(head + 1, (uint64_t)p->step, 8);
    le(head + 9, (uint64_t)p->created_ms, 8);
    head[17] = p->pinned;
    le(head + 18, p->queued_bytes, 8);
    if ((e = buf_append(&b, head, sizeof(head))) == 0 && (e = put_str(&b, p->id)) == 0 &&
        (e = put_str(&b, p->run)) == 0 && (e = put_str(&b, p->unit)) == 0 &&
        (e = put_str(&b, p->pin)) == 0)
        e = buf_append(&b, p->manifest, p->manifest_len);
    be64(key, p->seq);
    if (e == 0)
        e = index_raw_put(t, INDEX_PENDING, key, sizeof(key), b.data, b.len);
    buf_free(&b);
    return e;
}

static int pending_decode(uint64_t seq, const uint8_t *v, size_t vlen, struct pending *ret)
{
    const uint8_t *p = v + PENDING_HEAD, *end = v + vlen;
    if (vlen < PENDING_HEAD || v[0] != REC_VERSION)
        return CKS_E_FORMAT;
    ret->seq = seq;
    ret->step = (int64_t)get_le(v + 1, 8);
    ret->created_ms = (int64_t)get_le(v + 9, 8);
    ret->pinned = v[17] != 0;
    ret->queued_bytes = get_le(v + 18, 8);
    if (get_str(&p, end, ret->id, sizeof(ret->id)) < 0 ||
        get_str(&p, end, ret->run, sizeof(ret->run)) < 0 ||
        get_str(&p, end, ret->unit, sizeof(ret->unit)) < 0 ||
        get_str(&p, end, ret->pin, sizeof(ret->pin)) < 0)
        return CKS_E_FORMAT;
    ret->manifest = p;
    ret->manifest_len = (size_t)(end - p);
    return 0;
}

int queue_pending_get(struct index_txn *t, uint64_t seq, struct pending *ret)
{
    uint8_t key[8];
    const void *v;
    size_t vlen;
    be64(key, seq);
    int e = index_raw_get(t, INDEX_PENDING, key, sizeof(key), &v, &vlen);
    return e < 0 ? e : pending_decode(seq, v, vlen, ret);
}

int queue_pending_del(struct index_txn *t, uint64_t seq)
{
    uint8_t key[8];
    be64(key, seq);
    return index_raw_del(t, INDEX_PENDING, key, sizeof(key));
}

struct pforeach {
    int (*cb)(void *ud, const struct pending *p);
    void *ud;
    struct pending p;
};

static int pforeach_cb(void *ud, const void *key, size_t klen, const void *val, size_t vlen)
{
    struct pforeach *pf = ud;
    if (klen != 8)
        return CKS_E_FORMAT;
    int e = pending_decode(get_be64(key), val, vlen, &pf->p);
    return e < 0 ? e : pf->cb(pf->ud, &pf->p);
}

int queue_pending_foreach(struct index_txn *t, int (*cb)(void *ud, const struct pending *p),
                          void *ud)
{
    static struct pforeach zero;
    struct pforeach *pf = malloc(sizeof(*pf)); /* struct pending is large */
    if (!pf)
        return -ENOMEM;
    *pf = zero;
    pf->cb = cb;
    pf->ud = ud;
    int e = index_raw_foreach(t, INDEX_PENDING, NULL, 0, pforeach_cb, pf);
    free(pf);
    return e;
}

/*
 * index.c — the local index on LMDB.
 *
 * Design notes:
 * - One environment, seven named databases opened once in index_open() and
 *   reused by every transaction (LMDB DBI handles outlive the txn that
 *   opened them once it commits).  maxdbs leaves room for the per-region
 *   queues added later.
 * - MDB_NOTLS: a read transaction is an object, not a thread-local slot, so
 *   a thread may hold several and a pool thread may end one it did not
 *   begin (the header still asks callers to keep a txn on one thread).
 * - The map is 64 GiB on 64-bit hosts; it is sparse, so it costs address
 *   space, not disk.
 * - Records are encoded by hand, little-endian, with a leading version byte
 *   and an exact length check on decode: the file must read the same on any
 *   host and a damaged record must be refused (CKS_E_FORMAT), never
 *   half-trusted.  meta values are plain text without NUL.
 * - MDB_* codes are translated in ix_errno() and nowhere else; corruption
 *   is logged there because only this module knows the directory.
 * - A failed write commit is remembered here, once, for the whole handle
 *   (ix_fatal_set): every module that writes (ingest, region workers,
 *   restore's bookkeeping, snapshot, reindex, prune) sees the same refusal
 *   at its next index_txn_begin, so none of them needs its own "degraded"
 *   state, and none can go on writing past a broken fsync.  The flag is
 *   atomic so the hot paths can ask without a lock; the reason is set once
 *   under fatal_mu.  A writer that began in the instant between the failed
 *   commit and the flag (LMDB released its writer lock first) is let
 *   through: the environment on disk is consistent either way.
 */
#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "store/index.h"

#define INDEX_FORMAT_KEY "format"
#define INDEX_FORMAT "1"
#define INDEX_REC_VERSION 1
#define INDEX_MAX_DBS 16
#if SIZE_MAX > 0xffffffffu
#define INDEX_MAP_SIZE ((size_t)64 << 30)
#else
#define INDEX_MAP_SIZE ((size_t)1 << 30)
#endif
#define INDEX_KEY_BUF 512 /* >= LMDB's compiled key limit (511) + 1 */

#define CHUNK_REC_LEN (1 + 4 + 4 + 1 + 4 + 8)
#define SNAP_REC_LEN (1 + 8 + 8 + 8 + 8 + 4 + HASH_LEN)
#define FILE_KEY_LEN (5 * 8)
#define FILE_REC_HEAD (1 + HASH_LEN)
#define FILE_REC_CHUNK (HASH_LEN + 4)
#define REGION_KEY_PREFIX "region:"
#define FAULT_ENV "CKPTSYNC_FAULT_INDEX_COMMIT"

struct index {
    MDB_env *env;
    MDB_dbi meta, chunks, files, snaps;
    MDB_dbi tables[INDEX_TABLE_COUNT];
    size_t maxkey;
    char *dir;
    /* durability failure (index_fatal): sticky once set */
    atomic_bool fatal;
    pthread_mutex_t fatal_mu; /* guards fatal_why, fatal_ms while setting */
    char fatal_why[INDEX_FATAL_WHY];
    int64_t fatal_ms;
    /* test hook: the write commit number fault_at fails (0 = never) */
    unsigned long fault_at;
    atomic_ulong write_commits;
};

struct index_txn {
    struct index *ix;
    MDB_txn *txn;
    bool write;
};

/* ---- error translation ---------------------------------------------- */

static int ix_errno(const struct index *ix, int rc)
{
    switch (rc) {
    case 0:
        return 0;
    case MDB_NOTFOUND:
        return -ENOENT;
    case MDB_KEYEXIST:
        return -EEXIST;
    case MDB_MAP_FULL:
    case MDB_DBS_FULL:
        return -ENOSPC;
    case MDB_TXN_FULL:
        return -E2BIG;
    case MDB_READERS_FULL:
    case MDB_TLS_FULL:
    case MDB_MAP_RESIZED:
        return -EAGAIN;
    case MDB_BAD_RSLOT:
    case MDB_BAD_TXN:
    case MDB_BAD_VALSIZE:
    case MDB_BAD_DBI:
        return -EINVAL;
    case MDB_PAGE_NOTFOUND:
    case MDB_CORRUPTED:
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
        log_error("index \"%s\": %s", ix->dir, mdb_strerror(rc));
        return CKS_E_FORMAT;
    case MDB_PANIC:
        log_error("index \"%s\": %s", ix->dir, mdb_strerror(rc));
        return -EIO;
    }
    return rc > 0 ? -rc : -EIO;
}

/* The first failed write commit makes the handle fatal (index.h). */
static int ix_fatal_set(struct index *ix, int rc)
{
    int e = ix_errno(ix, rc);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&ix->fatal_mu);
    if (!atomic_load(&ix->fatal)) {
        snprintf(ix->fatal_why, sizeof(ix->fatal_why), "commit of index \"%s\" failed: %s", ix->dir,
                 err_str(e));
        ix->fatal_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        atomic_store(&ix->fatal, true);
    }
    pthread_mutex_unlock(&ix->fatal_mu);
    return CKS_E_FATAL;
}

bool index_fatal(struct index *ix, char *ret_why, size_t size, int64_t *ret_ms)
{
    if (!atomic_load(&ix->fatal))
        return false;
    if (ret_why || ret_ms) {
        pthread_mutex_lock(&ix->fatal_mu);
        if (ret_why && size)
            snprintf(ret_why, size, "%s", ix->fatal_why);
        if (ret_ms)
            *ret_ms = ix->fatal_ms;
        pthread_mutex_unlock(&ix->fatal_mu);
    }
    return true;
}

/* The test hook: which write commit fails (index.h); 0 for none. */
static unsigned long ix_fault_from_env(void)
{
    const char *s = getenv(FAULT_ENV);
    char *end;
    if (!s || !s[0])
        return 0;
    errno = 0;
    unsigned long n = strtoul(s, &end, 10);
    if (errno || *end || n == 0) {
        log_warn("%s=\"%s\" is not a positive number; ignored", FAULT_ENV, s);
        return 0;
    }
    log_warn("%s=%lu: write commit %lu of the index fails (a test hook)", FAULT_ENV, n, n);
    return n;
}

static int ix_corrupt(const struct index *ix, const char *db)
{
    log_error("index \"%s\": malformed record in database \"%s\"", ix->dir, db);
    return CKS_E_FORMAT;
}

/* ---- little-endian codec -------------------------------------------- */

static uint8_t *put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint32_t get_le32(const uint8_t **pp)
{
    const uint8_t *p = *pp;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    *pp = p + 4;
    return v;
}

static uint64_t get_le64(const uint8_t **pp)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    *pp = p + 8;
    return v;
}

static void chunk_encode(const struct index_chunk *c, uint8_t out[CHUNK_REC_LEN])
{
    uint8_t *p = out;
    *p++ = INDEX_REC_VERSION;
    p = put_le32(p, c->raw_len);
    p = put_le32(p, c->stored_len);
    *p++ = c->codec;
    p = put_le32(p, c->presence);
    put_le64(p, c->refcount);
}

static int chunk_decode(const MDB_val *v, struct index_chunk *ret)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size != CHUNK_REC_LEN || p[0] != INDEX_REC_VERSION)
        return CKS_E_FORMAT;
    p++;
    ret->raw_len = get_le32(&p);
    ret->stored_len = get_le32(&p);
    ret->codec = *p++;
    ret->presence = get_le32(&p);
    ret->refcount = get_le64(&p);
    return 0;
}

static void snap_encode(const struct index_snap *s, uint8_t out[SNAP_REC_LEN])
{
    uint8_t *p = out;
    *p++ = INDEX_REC_VERSION;
    p = put_le64(p, (uint64_t)s->step);
    p = put_le64(p, (uint64_t)s->time);
    p = put_le64(p, s->bytes);
    p = put_le64(p, s->nfiles);
    p = put_le32(p, s->committed);
    memcpy(p, s->manifest_digest, HASH_LEN);
}

static int snap_decode(const MDB_val *v, struct index_snap *ret)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size != SNAP_REC_LEN || p[0] != INDEX_REC_VERSION)
        return CKS_E_FORMAT;
    p++;
    ret->step = (int64_t)get_le64(&p);
    ret->time = (int64_t)get_le64(&p);
    ret->bytes = get_le64(&p);
    ret->nfiles = get_le64(&p);
    ret->committed = get_le32(&p);
    memcpy(ret->manifest_digest, p, HASH_LEN);
    return 0;
}

/* The five fields, and a kind other than 0 (a SHA-256 record) as one
 * more byte; returns the key's length. */
static size_t file_key_encode(const struct index_file_key *k, uint8_t out[FILE_KEY_LEN + 1])
{
    uint8_t *p = out;
    p = put_le64(p, k->dev);
    p = put_le64(p, k->ino);
    p = put_le64(p, k->size);
    p = put_le64(p, (uint64_t)k->mtime_ns);
    p = put_le64(p, (uint64_t)k->ctime_ns);
    if (k->kind)
        *p++ = k->kind;
    return (size_t)(p - out);
}

/* ---- environment ------------------------------------------------------ */

static int ix_env_open(struct index *ix)
{
    int dead, rc = mdb_env_create(&ix->env);
    if (rc == 0)
        rc = mdb_env_set_mapsize(ix->env, INDEX_MAP_SIZE);
    if (rc == 0)
        rc = mdb_env_set_maxdbs(ix->env, INDEX_MAX_DBS);
    if (rc == 0)
        rc = mdb_env_open(ix->env, ix->dir, MDB_NOTLS, 0600);
    if (rc == 0)
        rc = mdb_reader_check(ix->env, &dead); /* slots left by a crashed process */
    if (rc == 0) {
        int maxkey = mdb_env_get_maxkeysize(ix->env);
        ix->maxkey = maxkey < INDEX_KEY_BUF ? (size_t)maxkey : INDEX_KEY_BUF - 1;
    }
    return ix_errno(ix, rc);
}

/* First open writes the format; a later one refuses any other format. */
static int ix_check_format(struct index *ix, MDB_txn *txn)
{
    MDB_val k = {sizeof(INDEX_FORMAT_KEY) - 1, (void *)INDEX_FORMAT_KEY}, v;
    int rc = mdb_get(txn, ix->meta, &k, &v);
    if (rc == MDB_NOTFOUND) {
        v.mv_size = sizeof(INDEX_FORMAT) - 1;
        v.mv_data = (void *)INDEX_FORMAT;
        return ix_errno(ix, mdb_put(txn, ix->meta, &k, &v, 0));
    }
    if (rc)
        return ix_errno(ix, rc);
    if (v.mv_size != sizeof(INDEX_FORMAT) - 1 || memcmp(v.mv_data, INDEX_FORMAT, v.mv_size) != 0)
        return CKS_E_VERSION;
    return 0;
}

static int ix_init_dbs(struct index *ix)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(ix->env, NULL, 0, &txn);
    if (rc)
        return ix_errno(ix, rc);
    rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &ix->meta);
    if (rc == 0)
        rc = mdb_dbi_open(txn, "chunks", MDB_CREATE, &ix->chunks);
    if (rc == 0)
        rc = mdb_dbi_open(txn, "files", MDB_CREATE, &ix->files);
    if (rc == 0)
        rc = mdb_dbi_open(txn, "snapshots", MDB_CREATE, &ix->snaps);
    if (rc == 0)
        rc = mdb_dbi_open(txn, "queue", MDB_CREATE, &ix->tables[INDEX_QUEUE]);
    if (rc == 0)
        rc = mdb_dbi_open(txn, "pending", MDB_CREATE, &ix->tables[INDEX_PENDING]);
    if (rc == 0)
        rc = mdb_dbi_open(txn, "recipes", MDB_CREATE, &ix->tables[INDEX_RECIPES]);
    int r = ix_errno(ix, rc);
    if (r == 0)
        r = ix_check_format(ix, txn);
    if (r < 0) {
        mdb_txn_abort(txn);
        return r;
    }
    return ix_errno(ix, mdb_txn_commit(txn));
}

int index_open(const char *dir, struct index **ret)
{
    int r;
    struct index *ix = calloc(1, sizeof(*ix));
    if (!ix)
        return -ENOMEM;
    pthread_mutex_init(&ix->fatal_mu, NULL);
    ix->fault_at = ix_fault_from_env();
    ix->dir = strdup(dir);
    if (!ix->dir) {
        r = -ENOMEM;
        goto fail;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        r = -errno;
        goto fail;
    }
    r = ix_env_open(ix);
    if (r == 0)
        r = ix_init_dbs(ix);
    if (r < 0)
        goto fail;
    *ret = ix;
    return 0;
fail:
    index_free(ix);
    return r;
}

void index_free(struct index *ix)
{
    if (!ix)
        return;
    if (ix->env)
        mdb_env_close(ix->env);
    pthread_mutex_destroy(&ix->fatal_mu);
    free(ix->dir);
    free(ix);
}

/* ---- transactions ----------------------------------------------------- */

int index_txn_begin(struct index *ix, bool write, struct index_txn **ret)
{
    if (write && atomic_load(&ix->fatal))
        return CKS_E_FATAL;
    struct index_txn *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    int rc = mdb_txn_begin(ix->env, NULL, write ? 0 : MDB_RDONLY, &t->txn);
    if (rc) {
        free(t);
        return ix_errno(ix, rc);
    }
    t->ix = ix;
    t->write = write;
    *ret = t;
    return 0;
}

int index_txn_commit(struct index_txn *t)
{
    struct index *ix = t->ix;
    bool write = t->write;
    int rc;
    if (write && ix->fault_at && atomic_fetch_add(&ix->write_commits, 1) + 1 == ix->fault_at) {
        mdb_txn_abort(t->txn); /* what a commit whose fsync failed leaves */
        rc = EIO;
    } else {
        rc = mdb_txn_commit(t->txn);
    }
    free(t);
    if (rc && write)
        return ix_fatal_set(ix, rc);
    return ix_errno(ix, rc);
}

void index_txn_abort(struct index_txn *t)
{
    if (!t)
        return;
    mdb_txn_abort(t->txn);
    free(t);
}

/* Calls fn for every record whose key starts with prefix (all when plen is
 * 0), in key order; a non-zero return from fn stops and is returned. */
static int ix_scan(struct index_txn *t, MDB_dbi dbi, const void *prefix, size_t plen,
                   int (*fn)(void *ctx, const MDB_val *k, const MDB_val *v), void *ctx)
{
    MDB_cursor *c;
    int r = 0, rc = mdb_cursor_open(t->txn, dbi, &c);
    if (rc)
        return ix_errno(t->ix, rc);
    MDB_val k = {plen, (void *)prefix}, v;
    MDB_cursor_op op = plen ? MDB_SET_RANGE : MDB_FIRST;
    for (;;) {
        rc = mdb_cursor_get(c, &k, &v, op);
        if (rc) {
            r = rc == MDB_NOTFOUND ? 0 : ix_errno(t->ix, rc);
            break;
        }
        if (plen && (k.mv_size < plen || memcmp(k.mv_data, prefix, plen) != 0))
            break;
        r = fn(ctx, &k, &v);
        if (r)
            break;
        op = MDB_NEXT;
    }
    mdb_cursor_close(c);
    return r;
}

static int ix_get(struct index_txn *t, MDB_dbi dbi, const void *key, size_t klen, MDB_val *ret)
{
    MDB_val k = {klen, (void *)key};
    return ix_errno(t->ix, mdb_get(t->txn, dbi, &k, ret));
}

static int ix_put(struct index_txn *t, MDB_dbi dbi, const void *key, size_t klen, const void *val,
                  size_t vlen)
{
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    return ix_errno(t->ix, mdb_put(t->txn, dbi, &k, &v, 0));
}

/* ---- meta ------------------------------------------------------------- */

static int meta_key_ok(const struct index_txn *t, const char *key, size_t *ret_len)
{
    size_t n = strlen(key);
    if (n == 0 || n > t->ix->maxkey)
        return -EINVAL;
    *ret_len = n;
    return 0;
}

int index_meta_get(struct index_txn *t, const char *key, char *ret_val, size_t cap)
{
    size_t klen;
    MDB_val v;
    int r = meta_key_ok(t, key, &klen);
    if (r == 0)
        r = ix_get(t, t->ix->meta, key, klen, &v);
    if (r < 0)
        return r;
    if (memchr(v.mv_data, 0, v.mv_size))
        return ix_corrupt(t->ix, "meta");
    if (v.mv_size >= cap)
        return -ERANGE;
    memcpy(ret_val, v.mv_data, v.mv_size);
    ret_val[v.mv_size] = 0;
    return 0;
}

int index_meta_put(struct index_txn *t, const char *key, const char *val)
{
    size_t klen;
    int r = meta_key_ok(t, key, &klen);
    if (r < 0)
        return r;
    return ix_put(t, t->ix->meta, key, klen, val, strlen(val));
}

/* ---- region slots ----------------------------------------------------- */

/* A slot is 1-2 decimal digits below INDEX_MAX_REGIONS, nothing else. */
static int slot_decode(const MDB_val *v, unsigned *ret)
{
    const char *s = v->mv_data;
    unsigned n = 0;
    if (v->mv_size == 0 || v->mv_size > 2)
        return CKS_E_FORMAT;
    for (size_t i = 0; i < v->mv_size; i++) {
        if (s[i] < '0' || s[i] > '9')
            return CKS_E_FORMAT;
        n = n * 10 + (unsigned)(s[i] - '0');
    }
    if (n >= INDEX_MAX_REGIONS)
        return CKS_E_FORMAT;
    *ret = n;
    return 0;
}

struct slot_scan {
    struct index *ix;
    uint64_t used;
};

static int slot_mark(void *ctx, const MDB_val *k, const MDB_val *v)
{
    struct slot_scan *s = ctx;
    unsigned slot;
    if (slot_decode(v, &slot) < 0)
        return ix_corrupt(s->ix, "meta");
    s->used |= (uint64_t)1 << slot;
    return 0;
}

/* The lowest slot no region holds yet. */
static int slot_alloc(struct index_txn *t, const char *key, size_t klen, unsigned *ret_slot)
{
    struct slot_scan scan = {t->ix, 0};
    char val[4];
    int r = ix_scan(t, t->ix->meta, REGION_KEY_PREFIX, strlen(REGION_KEY_PREFIX), slot_mark, &scan);
    if (r < 0)
        return r;
    for (unsigned s = 0; s < INDEX_MAX_REGIONS; s++) {
        if (scan.used & ((uint64_t)1 << s))
            continue;
        int n = snprintf(val, sizeof(val), "%u", s);
        r = ix_put(t, t->ix->meta, key, klen, val, (size_t)n);
        if (r == 0)
            *ret_slot = s;
        return r;
    }
    return CKS_E_LIMIT;
}

int index_region_slot(struct index_txn *t, const char *name, unsigned *ret_slot)
{
    char key[INDEX_KEY_BUF];
    MDB_val v;
    int n = snprintf(key, sizeof(key), REGION_KEY_PREFIX "%s", name);
    if (name[0] == 0 || n < 0 || (size_t)n > t->ix->maxkey)
        return -EINVAL;
    int r = ix_get(t, t->ix->meta, key, (size_t)n, &v);
    if (r == 0) {
        if (slot_decode(&v, ret_slot) < 0)
            return ix_corrupt(t->ix, "meta");
        return 0;
    }
    if (r != -ENOENT || !t->write)
        return r;
    return slot_alloc(t, key, (size_t)n, ret_slot);
}

/* ---- chunks ----------------------------------------------------------- */

int index_chunk_get(struct index_txn *t, const uint8_t id[HASH_LEN], struct index_chunk *ret)
{
    MDB_val v;
    int r = ix_get(t, t->ix->chunks, id, HASH_LEN, &v);
    if (r < 0)
        return r;
    if (chunk_decode(&v, ret) < 0)
        return ix_corrupt(t->ix, "chunks");
    return 0;
}

int index_chunk_put(struct index_txn *t, const uint8_t id[HASH_LEN], const struct index_chunk *c)
{
    uint8_t rec[CHUNK_REC_LEN];
    chunk_encode(c, rec);
    return ix_put(t, t->ix->chunks, id, HASH_LEN, rec, sizeof(rec));
}

int index_chunk_count(struct index_txn *t, uint64_t *ret)
{
    MDB_stat st;
    int rc = mdb_stat(t->txn, t->ix->chunks, &st);
    if (rc)
        return ix_errno(t->ix, rc);
    *ret = (uint64_t)st.ms_entries;
    return 0;
}

struct chunk_scan {
    struct index *ix;
    int (*cb)(void *ud, const uint8_t id[HASH_LEN], const struct index_chunk *c);
    void *ud;
};

static int chunk_scan_one(void *ctx, const MDB_val *k, const MDB_val *v)
{
    struct chunk_scan *s = ctx;
    struct index_chunk c;
    uint8_t id[HASH_LEN];
    if (k->mv_size != HASH_LEN || chunk_decode(v, &c) < 0)
        return ix_corrupt(s->ix, "chunks");
    memcpy(id, k->mv_data, HASH_LEN);
    return s->cb(s->ud, id, &c);
}

int index_chunk_foreach(struct index_txn *t,
                        int (*cb)(void *ud, const uint8_t id[HASH_LEN],
                                  const struct index_chunk *c),
                        void *ud)
{
    struct chunk_scan s = {t->ix, cb, ud};
    return ix_scan(t, t->ix->chunks, NULL, 0, chunk_scan_one, &s);
}

/* ---- files ------------------------------------------------------------ */

static int file_decode(const MDB_val *v, uint8_t ret_digest[HASH_LEN], struct mchunk **ret_chunks,
                       size_t *ret_n)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size < FILE_REC_HEAD || p[0] != INDEX_REC_VERSION ||
        (v->mv_size - FILE_REC_HEAD) % FILE_REC_CHUNK != 0)
        return CKS_E_FORMAT;
    size_t n = (v->mv_size - FILE_REC_HEAD) / FILE_REC_CHUNK;
    struct mchunk *chunks = calloc(n ? n : 1, sizeof(*chunks));
    if (!chunks)
        return -ENOMEM;
    memcpy(ret_digest, p + 1, HASH_LEN);
    p += FILE_REC_HEAD;
    for (size_t i = 0; i < n; i++) {
        memcpy(chunks[i].id, p, HASH_LEN);
        p += HASH_LEN;
        chunks[i].len = get_le32(&p);
    }
    *ret_chunks = chunks;
    *ret_n = n;
    return 0;
}

void index_file_key_of(const struct stat *st, struct index_file_key *k)
{
    memset(k, 0, sizeof(*k));
    k->dev = (uint64_t)st->st_dev;
    k->ino = (uint64_t)st->st_ino;
    k->size = (uint64_t)st->st_size;
    k->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    k->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

bool index_file_same(const struct stat *a, const struct stat *b)
{
    struct index_file_key ka, kb;
    index_file_key_of(a, &ka);
    index_file_key_of(b, &kb);
    return memcmp(&ka, &kb, sizeof(ka)) == 0;
}

int index_file_get(struct index_txn *t, const struct index_file_key *k,
                   uint8_t ret_digest[HASH_LEN], struct mchunk **ret_chunks, size_t *ret_n)
{
    uint8_t key[FILE_KEY_LEN + 1];
    MDB_val v;
    size_t klen = file_key_encode(k, key);
    int r = ix_get(t, t->ix->files, key, klen, &v);
    if (r < 0)
        return r;
    r = file_decode(&v, ret_digest, ret_chunks, ret_n);
    return r == CKS_E_FORMAT ? ix_corrupt(t->ix, "files") : r;
}

int index_file_put(struct index_txn *t, const struct index_file_key *k,
                   const uint8_t digest[HASH_LEN], const struct mchunk *chunks, size_t n)
{
    uint8_t key[FILE_KEY_LEN + 1];
    if (n > MANIFEST_MAX_CHUNKS)
        return CKS_E_LIMIT;
    MDB_val kv = {file_key_encode(k, key), key};
    MDB_val v = {FILE_REC_HEAD + n * FILE_REC_CHUNK, NULL};
    /* MDB_RESERVE: encode straight into the map, no staging buffer. */
    int rc = mdb_put(t->txn, t->ix->files, &kv, &v, MDB_RESERVE);
    if (rc)
        return ix_errno(t->ix, rc);
    uint8_t *p = v.mv_data;
    *p++ = INDEX_REC_VERSION;
    memcpy(p, digest, HASH_LEN);
    p += HASH_LEN;
    for (size_t i = 0; i < n; i++) {
        memcpy(p, chunks[i].id, HASH_LEN);
        p = put_le32(p + HASH_LEN, chunks[i].len);
    }
    return 0;
}

/* ---- snapshots -------------------------------------------------------- */

/* "<run>\0<id>"; the NUL keeps run "r1" apart from run "r10". */
static int snap_key(const struct index_txn *t, const char *run, const char *id,
                    char ret_key[INDEX_KEY_BUF], size_t *ret_len)
{
    size_t rl = strlen(run), il = strlen(id);
    if (rl == 0 || il == 0 || rl + 1 + il > t->ix->maxkey)
        return -EINVAL;
    memcpy(ret_key, run, rl + 1);
    memcpy(ret_key + rl + 1, id, il);
    *ret_len = rl + 1 + il;
    return 0;
}

int index_snap_get(struct index_txn *t, const char *run, const char *id, struct index_snap *ret)
{
    char key[INDEX_KEY_BUF];
    size_t klen;
    MDB_val v;
    int r = snap_key(t, run, id, key, &klen);
    if (r == 0)
        r = ix_get(t, t->ix->snaps, key, klen, &v);
    if (r < 0)
        return r;
    if (snap_decode(&v, ret) < 0)
        return ix_corrupt(t->ix, "snapshots");
    return 0;
}

int index_snap_put(struct index_txn *t, const char *run, const char *id, const struct index_snap *s)
{
    char key[INDEX_KEY_BUF];
    uint8_t rec[SNAP_REC_LEN];
    size_t klen;
    int r = snap_key(t, run, id, key, &klen);
    if (r < 0)
        return r;
    snap_encode(s, rec);
    return ix_put(t, t->ix->snaps, key, klen, rec, sizeof(rec));
}

int index_snap_del(struct index_txn *t, const char *run, const char *id)
{
    char key[INDEX_KEY_BUF];
    size_t klen;
    int r = snap_key(t, run, id, key, &klen);
    if (r < 0)
        return r;
    MDB_val k = {klen, key};
    return ix_errno(t->ix, mdb_del(t->txn, t->ix->snaps, &k, NULL));
}

struct snap_scan {
    struct index *ix;
    int (*cb)(void *ud, const char *run, const char *id, const struct index_snap *s);
    void *ud;
};

static int snap_scan_one(void *ctx, const MDB_val *k, const MDB_val *v)
{
    struct snap_scan *s = ctx;
    struct index_snap snap;
    char key[INDEX_KEY_BUF];
    if (k->mv_size >= sizeof(key) || snap_decode(v, &snap) < 0)
        return ix_corrupt(s->ix, "snapshots");
    memcpy(key, k->mv_data, k->mv_size);
    key[k->mv_size] = 0;
    size_t rl = strlen(key);
    /* Exactly one NUL, with a non-empty run before it and id after it. */
    if (rl == 0 || rl + 1 >= k->mv_size || strlen(key + rl + 1) != k->mv_size - rl - 1)
        return ix_corrupt(s->ix, "snapshots");
    return s->cb(s->ud, key, key + rl + 1, &snap);
}

int index_snap_foreach(struct index_txn *t, const char *run,
                       int (*cb)(void *ud, const char *run, const char *id,
                                 const struct index_snap *s),
                       void *ud)
{
    struct snap_scan s = {t->ix, cb, ud};
    size_t plen = 0;
    if (run) {
        plen = strlen(run) + 1; /* include the NUL: a whole-run match */
        if (plen == 1 || plen > t->ix->maxkey)
            return -EINVAL;
    }
    return ix_scan(t, t->ix->snaps, run, plen, snap_scan_one, &s);
}

/* ---- raw tables (records encoded by their owners) ---------------------- */

static MDB_dbi raw_dbi(const struct index_txn *t, enum index_table tb)
{
    return t->ix->tables[tb];
}

int index_raw_get(struct index_txn *t, enum index_table tb, const void *key, size_t klen,
                  const void **ret_val, size_t *ret_vlen)
{
    MDB_val v;
    if (klen == 0 || klen > t->ix->maxkey)
        return -EINVAL;
    int r = ix_get(t, raw_dbi(t, tb), key, klen, &v);
    if (r < 0)
        return r;
    *ret_val = v.mv_data;
    *ret_vlen = v.mv_size;
    return 0;
}

int index_raw_put(struct index_txn *t, enum index_table tb, const void *key, size_t klen,
                  const void *val, size_t vlen)
{
    if (klen == 0 || klen > t->ix->maxkey)
        return -EINVAL;
    return ix_put(t, raw_dbi(t, tb), key, klen, val, vlen);
}

int index_raw_del(struct index_txn *t, enum index_table tb, const void *key, size_t klen)
{
    MDB_val k = {klen, (void *)key};
    if (klen == 0 || klen > t->ix->maxkey)
        return -EINVAL;
    return ix_errno(t->ix, mdb_del(t->txn, raw_dbi(t, tb), &k, NULL));
}

struct raw_scan {
    int (*cb)(void *ud, const void *key, size_t klen, const void *val, size_t vlen);
    void *ud;
};

static int raw_scan_one(void *ctx, const MDB_val *k, const MDB_val *v)
{
    struct raw_scan *rs = ctx;
    return rs->cb(rs->ud, k->mv_data, k->mv_size, v->mv_data, v->mv_size);
}

int index_raw_foreach(struct index_txn *t, enum index_table tb, const void *prefix, size_t plen,
                      int (*cb)(void *ud, const void *key, size_t klen, const void *val,
                                size_t vlen),
                      void *ud)
{
    struct raw_scan rs = {cb, ud};
    return ix_scan(t, raw_dbi(t, tb), prefix, plen, raw_scan_one, &rs);
}

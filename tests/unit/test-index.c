/*
 * test-index.c — the LMDB index: persistence across reopen, stable region
 * slots, chunk/file/snapshot records, run filtering, abort, refusal of
 * corrupt records (written with raw LMDB behind the index's back), and the
 * fatal state after a failed commit (the test hook).
 */
#include <errno.h>
#include <ftw.h>
#include <lmdb.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/err.h"
#include "store/index.h"
#include "store/recidx.h"

struct fixture {
    char tmp[64];
    char dir[128];
    struct index *ix;
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    snprintf(f->tmp, sizeof(f->tmp), "/tmp/cks-test-index-XXXXXX");
    assert_non_null(mkdtemp(f->tmp));
    snprintf(f->dir, sizeof(f->dir), "%s/index", f->tmp);
    assert_int_equal(index_open(f->dir, &f->ix), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    index_free(f->ix);
    nftw(f->tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static void reopen(struct fixture *f)
{
    index_free(f->ix);
    f->ix = NULL;
    assert_int_equal(index_open(f->dir, &f->ix), 0);
}

static struct index_txn *wtxn(struct fixture *f)
{
    struct index_txn *t = NULL;
    assert_int_equal(index_txn_begin(f->ix, true, &t), 0);
    return t;
}

static struct index_txn *rtxn(struct fixture *f)
{
    struct index_txn *t = NULL;
    assert_int_equal(index_txn_begin(f->ix, false, &t), 0);
    return t;
}

static void make_id(uint8_t id[HASH_LEN], unsigned seed)
{
    for (unsigned i = 0; i < HASH_LEN; i++)
        id[i] = (uint8_t)(seed * 31 + i);
}

/* ---- open / meta --------------------------------------------------------- */

static void test_open_reopen(void **state)
{
    struct fixture *f = *state;
    char val[64];
    struct index_txn *t = wtxn(f);
    assert_int_equal(index_meta_put(t, "repo_id", "abc123"), 0);
    assert_int_equal(index_txn_commit(t), 0);

    reopen(f);
    t = rtxn(f);
    assert_int_equal(index_meta_get(t, "repo_id", val, sizeof(val)), 0);
    assert_string_equal(val, "abc123");
    assert_int_equal(index_meta_get(t, "format", val, sizeof(val)), 0);
    assert_string_equal(val, "1");
    assert_int_equal(index_meta_get(t, "repo_id", val, 6), -ERANGE);
    assert_int_equal(index_meta_get(t, "", val, sizeof(val)), -EINVAL);
    index_txn_abort(t);
}

static void test_other_format_refused(void **state)
{
    struct fixture *f = *state;
    struct index_txn *t = wtxn(f);
    assert_int_equal(index_meta_put(t, "format", "2"), 0);
    assert_int_equal(index_txn_commit(t), 0);
    index_free(f->ix);
    f->ix = NULL;
    assert_int_equal(index_open(f->dir, &f->ix), CKS_E_VERSION);
    assert_null(f->ix);
}

static void test_open_creates_dir_0700(void **state)
{
    struct fixture *f = *state;
    struct stat st;
    assert_int_equal(stat(f->dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
}

/* ---- region slots ------------------------------------------------------ */

static unsigned slot_of(struct index_txn *t, const char *name)
{
    unsigned slot = 999;
    assert_int_equal(index_region_slot(t, name, &slot), 0);
    return slot;
}

static void test_region_slots_stable(void **state)
{
    struct fixture *f = *state;
    unsigned slot;
    struct index_txn *t = wtxn(f);
    assert_int_equal(slot_of(t, "a"), 0);
    assert_int_equal(slot_of(t, "b"), 1);
    assert_int_equal(slot_of(t, "c"), 2);
    assert_int_equal(slot_of(t, "a"), 0);
    assert_int_equal(index_txn_commit(t), 0);

    reopen(f);
    t = rtxn(f);
    assert_int_equal(slot_of(t, "c"), 2);
    assert_int_equal(slot_of(t, "a"), 0);
    assert_int_equal(slot_of(t, "b"), 1);
    assert_int_equal(index_region_slot(t, "d", &slot), -ENOENT);
    index_txn_abort(t);

    t = wtxn(f);
    assert_int_equal(slot_of(t, "d"), 3);
    assert_int_equal(index_txn_commit(t), 0);
}

static void test_region_slot_limit(void **state)
{
    struct fixture *f = *state;
    char name[32];
    unsigned slot;
    struct index_txn *t = wtxn(f);
    for (unsigned i = 0; i < INDEX_MAX_REGIONS; i++) {
        snprintf(name, sizeof(name), "region-%u", i);
        assert_int_equal(slot_of(t, name), i);
    }
    assert_int_equal(index_region_slot(t, "one-too-many", &slot), CKS_E_LIMIT);
    assert_int_equal(index_region_slot(t, "", &slot), -EINVAL);
    index_txn_abort(t);
}

/* ---- chunks ------------------------------------------------------------ */

struct chunk_seen {
    unsigned n;
    uint64_t refsum;
    int stop_at;
};

static int count_chunk(void *ud, const uint8_t id[HASH_LEN], const struct index_chunk *c)
{
    struct chunk_seen *s = ud;
    s->n++;
    s->refsum += c->refcount;
    return s->stop_at && (int)s->n == s->stop_at ? 42 : 0;
}

static void test_chunks(void **state)
{
    struct fixture *f = *state;
    uint8_t id[HASH_LEN];
    struct index_chunk c, got;
    struct index_txn *t = wtxn(f);
    for (unsigned i = 1; i <= 3; i++) {
        make_id(id, i);
        c = (struct index_chunk){.raw_len = 1000 * i,
                                 .stored_len = 500 * i + 0x80000000u,
                                 .codec = (uint8_t)i,
                                 .presence = 0xa5000000u | i,
                                 .refcount = ((uint64_t)1 << 40) + i};
        assert_int_equal(index_chunk_put(t, id, &c), 0);
    }
    assert_int_equal(index_txn_commit(t), 0);

    reopen(f);
    t = rtxn(f);
    make_id(id, 2);
    assert_int_equal(index_chunk_get(t, id, &got), 0);
    assert_int_equal(got.raw_len, 2000);
    assert_int_equal(got.stored_len, 1000 + 0x80000000u);
    assert_int_equal(got.codec, 2);
    assert_int_equal(got.presence, 0xa5000002u);
    assert_true(got.refcount == ((uint64_t)1 << 40) + 2);
    make_id(id, 9);
    assert_int_equal(index_chunk_get(t, id, &got), -ENOENT);

    struct chunk_seen seen = {0};
    assert_int_equal(index_chunk_foreach(t, count_chunk, &seen), 0);
    assert_int_equal(seen.n, 3);
    assert_true(seen.refsum == 3 * ((uint64_t)1 << 40) + 6);
    seen = (struct chunk_seen){.stop_at = 2};
    assert_int_equal(index_chunk_foreach(t, count_chunk, &seen), 42);
    assert_int_equal(seen.n, 2);
    index_txn_abort(t);
}

static void test_abort_discards(void **state)
{
    struct fixture *f = *state;
    uint8_t id[HASH_LEN];
    struct index_chunk c = {.raw_len = 1}, got;
    make_id(id, 7);
    struct index_txn *t = wtxn(f);
    assert_int_equal(index_chunk_put(t, id, &c), 0);
    assert_int_equal(index_chunk_get(t, id, &got), 0); /* visible inside the txn */
    index_txn_abort(t);
    index_txn_abort(NULL);

    t = rtxn(f);
    assert_int_equal(index_chunk_get(t, id, &got), -ENOENT);
    index_txn_abort(t);
}

/* ---- files ------------------------------------------------------------- */

static void test_files(void **state)
{
    struct fixture *f = *state;
    struct index_file_key k = {.dev = 0x801,
                               .ino = 123456789,
                               .size = 3u << 20,
                               .mtime_ns = 1700000000123456789,
                               .ctime_ns = -5};
    struct index_file_key k0 = k;
    uint8_t digest[HASH_LEN], got_digest[HASH_LEN];
    struct mchunk chunks[3], *got = NULL;
    size_t n = 99;

    make_id(digest, 100);
    for (unsigned i = 0; i < 3; i++) {
        make_id(chunks[i].id, i + 10);
        chunks[i].len = (1u << 20) + i;
    }
    k0.ino++;
    struct index_txn *t = wtxn(f);
    assert_int_equal(index_file_put(t, &k, digest, chunks, 3), 0);
    assert_int_equal(index_file_put(t, &k0, digest, NULL, 0), 0);
    assert_int_equal(index_txn_commit(t), 0);

    reopen(f);
    t = rtxn(f);
    assert_int_equal(index_file_get(t, &k, got_digest, &got, &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(got_digest, digest, HASH_LEN);
    assert_memory_equal(got, chunks, sizeof(chunks));
    free(got);
    got = NULL;
    assert_int_equal(index_file_get(t, &k0, got_digest, &got, &n), 0);
    assert_int_equal(n, 0);
    free(got);
    k0.mtime_ns++;
    assert_int_equal(index_file_get(t, &k0, got_digest, &got, &n), -ENOENT);
    index_txn_abort(t);
}

/* ---- snapshots --------------------------------------------------------- */

struct snap_seen {
    unsigned n;
    char list[256];
};

static int collect_snap(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct snap_seen *seen = ud;
    size_t len = strlen(seen->list);
    snprintf(seen->list + len, sizeof(seen->list) - len, "%s/%s:%lld ", run, id,
             (long long)s->step);
    seen->n++;
    return 0;
}

static void put_snap(struct index_txn *t, const char *run, const char *id, int64_t step)
{
    struct index_snap s = {.step = step,
                           .time = 1796083621,
                           .bytes = (uint64_t)step << 33,
                           .nfiles = 4,
                           .committed = 5};
    make_id(s.manifest_digest, (unsigned)step);
    assert_int_equal(index_snap_put(t, run, id, &s), 0);
}

static void expect_snaps(struct index_txn *t, const char *run, const char *want)
{
    struct snap_seen seen = {0};
    assert_int_equal(index_snap_foreach(t, run, collect_snap, &seen), 0);
    assert_string_equal(seen.list, want);
}

static void test_snapshots(void **state)
{
    struct fixture *f = *state;
    struct index_snap got;
    struct index_txn *t = wtxn(f);
    put_snap(t, "r1", "s2", 2);
    put_snap(t, "r10", "s1", 10);
    put_snap(t, "r1", "s1", 1);
    put_snap(t, "r2", "x", -1);
    assert_int_equal(index_txn_commit(t), 0);

    reopen(f);
    t = rtxn(f);
    assert_int_equal(index_snap_get(t, "r10", "s1", &got), 0);
    assert_int_equal(got.step, 10);
    assert_true(got.bytes == (uint64_t)10 << 33);
    assert_int_equal(got.nfiles, 4);
    assert_int_equal(got.committed, 5);
    assert_int_equal(got.time, 1796083621);
    assert_int_equal(index_snap_get(t, "r1", "s10", &got), -ENOENT);
    assert_int_equal(index_snap_get(t, "r", "1s1", &got), -ENOENT);
    expect_snaps(t, "r1", "r1/s1:1 r1/s2:2 ");
    expect_snaps(t, "r10", "r10/s1:10 ");
    expect_snaps(t, "r", "");
    expect_snaps(t, NULL, "r1/s1:1 r1/s2:2 r10/s1:10 r2/x:-1 ");
    index_txn_abort(t);

    t = wtxn(f);
    assert_int_equal(index_snap_del(t, "r1", "s1"), 0);
    assert_int_equal(index_snap_del(t, "r1", "s1"), -ENOENT);
    assert_int_equal(index_snap_put(t, "", "x", &got), -EINVAL);
    assert_int_equal(index_snap_put(t, "r1", "", &got), -EINVAL);
    assert_int_equal(index_txn_commit(t), 0);
    t = rtxn(f);
    expect_snaps(t, "r1", "r1/s2:2 ");
    index_txn_abort(t);
}

/* ---- read transactions ------------------------------------------------ */

static void test_read_txn_missing(void **state)
{
    struct fixture *f = *state;
    uint8_t id[HASH_LEN];
    char val[16];
    struct index_chunk c = {0};
    struct index_snap s;
    unsigned slot;
    make_id(id, 1);
    struct index_txn *t = rtxn(f);
    assert_int_equal(index_chunk_get(t, id, &c), -ENOENT);
    assert_int_equal(index_meta_get(t, "nothing", val, sizeof(val)), -ENOENT);
    assert_int_equal(index_snap_get(t, "r", "i", &s), -ENOENT);
    assert_int_equal(index_snap_del(t, "r", "i") < 0, 1);
    assert_int_equal(index_region_slot(t, "a", &slot), -ENOENT);
    assert_true(index_chunk_put(t, id, &c) < 0); /* no writes in a read txn */
    assert_int_equal(index_txn_commit(t), 0);
}

/* ---- corruption -------------------------------------------------------- */

/* Writes value bytes under key in database db, with the index closed: one
 * process must not open an LMDB environment twice. */
static void raw_put(const char *dir, const char *db, const void *key, size_t klen, const void *val,
                    size_t vlen)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 16), 0);
    assert_int_equal(mdb_env_open(env, dir, MDB_NOTLS, 0600), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, db, 0, &dbi), 0);
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

static int never(void *ud, const uint8_t id[HASH_LEN], const struct index_chunk *c)
{
    return 0;
}

static int never_snap(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    return 0;
}

static void test_corrupt_records(void **state)
{
    struct fixture *f = *state;
    static const uint8_t garbage[] = {0xde, 0xad, 0xbe, 0xef, 0x01};
    struct index_file_key fk = {.dev = 1, .ino = 2};
    uint8_t fkey[40] = {1, 0, 0, 0, 0, 0, 0, 0, 2}, id[HASH_LEN], digest[HASH_LEN];
    uint8_t badver[1 + 4 + 4 + 1 + 4 + 8] = {9}; /* right length, unknown version */
    struct index_chunk c;
    struct index_snap s;
    struct mchunk *chunks = NULL;
    size_t n;
    unsigned slot;

    make_id(id, 3);
    index_free(f->ix);
    f->ix = NULL;
    raw_put(f->dir, "chunks", id, HASH_LEN, garbage, sizeof(garbage));
    raw_put(f->dir, "snapshots", "r1\0s1", 5, garbage, sizeof(garbage));
    raw_put(f->dir, "files", fkey, sizeof(fkey), garbage, 3);
    raw_put(f->dir, "meta", "region:x", 8, "zz", 2);
    reopen(f);

    struct index_txn *t = rtxn(f);
    assert_int_equal(index_chunk_get(t, id, &c), CKS_E_FORMAT);
    assert_int_equal(index_chunk_foreach(t, never, NULL), CKS_E_FORMAT);
    assert_int_equal(index_snap_get(t, "r1", "s1", &s), CKS_E_FORMAT);
    assert_int_equal(index_snap_foreach(t, NULL, never_snap, NULL), CKS_E_FORMAT);
    assert_int_equal(index_file_get(t, &fk, digest, &chunks, &n), CKS_E_FORMAT);
    assert_null(chunks);
    assert_int_equal(index_region_slot(t, "x", &slot), CKS_E_FORMAT);
    index_txn_abort(t);

    t = wtxn(f); /* allocation scans every slot, and must refuse the bad one */
    assert_int_equal(index_region_slot(t, "y", &slot), CKS_E_FORMAT);
    index_txn_abort(t);

    index_free(f->ix);
    f->ix = NULL;
    raw_put(f->dir, "chunks", id, HASH_LEN, badver, sizeof(badver));
    reopen(f);
    t = rtxn(f);
    assert_int_equal(index_chunk_get(t, id, &c), CKS_E_FORMAT);
    index_txn_abort(t);
}

/* The test hook fails the 2nd write commit: the handle turns fatal for
 * writes, keeps reading, says why naming the directory; a new handle (a
 * restart) writes again. */
static void test_failed_commit_is_fatal(void **state)
{
    struct fixture *f = *state;
    struct index_txn *t;
    char why[256], val[16];
    int64_t ms = 0;
    setenv("CKPTSYNC_FAULT_INDEX_COMMIT", "2", 1);
    reopen(f);
    unsetenv("CKPTSYNC_FAULT_INDEX_COMMIT");
    assert_false(index_fatal(f->ix, why, sizeof(why), &ms));
    t = wtxn(f);
    assert_int_equal(index_meta_put(t, "a", "1"), 0);
    assert_int_equal(index_txn_commit(t), 0);
    t = wtxn(f);
    assert_int_equal(index_meta_put(t, "b", "2"), 0);
    assert_int_equal(index_txn_commit(t), CKS_E_FATAL);
    assert_true(index_fatal(f->ix, NULL, 0, NULL));
    assert_true(index_fatal(f->ix, why, sizeof(why), &ms));
    assert_non_null(strstr(why, f->dir));
    assert_non_null(strstr(why, strerror(EIO)));
    assert_true(ms > 0);
    t = NULL;
    assert_int_equal(index_txn_begin(f->ix, true, &t), CKS_E_FATAL);
    assert_null(t);
    t = rtxn(f); /* reads go on: what was committed before, not the failed one */
    assert_int_equal(index_meta_get(t, "a", val, sizeof(val)), 0);
    assert_string_equal(val, "1");
    assert_int_equal(index_meta_get(t, "b", val, sizeof(val)), -ENOENT);
    index_txn_abort(t);
    reopen(f);
    assert_false(index_fatal(f->ix, NULL, 0, NULL));
    t = wtxn(f);
    assert_int_equal(index_meta_put(t, "b", "2"), 0);
    assert_int_equal(index_txn_commit(t), 0);
}

static int count_recipes(void *ud, const struct recidx *r)
{
    (void)r;
    ++*(int *)ud;
    return 0;
}

/* Recipe object records (store/recidx.h): each (id, sig) apart, listed
 * per chunk id, kept across a reopen; a damaged record is refused. */
static void test_recidx(void **state)
{
    struct fixture *f = *state;
    struct index_txn *t;
    uint8_t id[HASH_LEN], other[HASH_LEN];
    memset(id, 0x11, sizeof(id));
    memset(other, 0x12, sizeof(other));
    struct recidx r = {.sig = {1, 2, 3, 4, 5, 6, 7, 8},
                       .depth = 1,
                       .raw_len = 65536,
                       .stored_len = 400,
                       .presence = 5,
                       .nbases = 2};
    memset(r.base[0].id, 0xa0, HASH_LEN);
    r.base[0].len = 70000;
    memset(r.base[1].id, 0xb0, HASH_LEN);
    r.base[1].len = 80000;
    struct recidx r2 = r;
    r2.sig[7] = 9;
    r2.nbases = 1;
    assert_int_equal(index_txn_begin(f->ix, true, &t), 0);
    assert_int_equal(recidx_put(t, id, &r), 0);
    assert_int_equal(recidx_put(t, id, &r2), 0);
    assert_int_equal(recidx_put(t, other, &r), 0);
    struct recidx bad = r;
    bad.nbases = 0;
    assert_int_equal(recidx_put(t, id, &bad), -EINVAL);
    assert_int_equal(index_txn_commit(t), 0);
    reopen(f);
    struct recidx got;
    int n = 0;
    assert_int_equal(index_txn_begin(f->ix, false, &t), 0);
    assert_int_equal(recidx_get(t, id, r.sig, &got), 0);
    assert_memory_equal(got.sig, r.sig, sizeof(r.sig));
    assert_int_equal(got.depth, 1);
    assert_int_equal(got.raw_len, 65536);
    assert_int_equal(got.stored_len, 400);
    assert_int_equal(got.presence, 5);
    assert_int_equal(got.nbases, 2);
    assert_memory_equal(got.base[1].id, r.base[1].id, HASH_LEN);
    assert_int_equal(got.base[1].len, 80000);
    assert_int_equal(recidx_each(t, id, count_recipes, &n), 0);
    assert_int_equal(n, 2);
    uint8_t sig0[MANIFEST_RECIPE_SIG] = {0};
    assert_int_equal(recidx_get(t, id, sig0, &got), -ENOENT);
    index_txn_abort(t);
    /* a record of the wrong length */
    uint8_t key[HASH_LEN + MANIFEST_RECIPE_SIG], val[17] = {1, 1, 1};
    memcpy(key, id, HASH_LEN);
    memcpy(key + HASH_LEN, r.sig, MANIFEST_RECIPE_SIG);
    assert_int_equal(index_txn_begin(f->ix, true, &t), 0);
    assert_int_equal(index_raw_put(t, INDEX_RECIPES, key, sizeof(key), val, sizeof(val)), 0);
    assert_int_equal(recidx_get(t, id, r.sig, &got), CKS_E_FORMAT);
    n = 0;
    assert_int_equal(recidx_each(t, id, count_recipes, &n), CKS_E_FORMAT);
    index_txn_abort(t);
}

struct all_count {
    int good, damaged;
};

static int count_all(void *ud, const uint8_t *id, const struct recidx *r, int e)
{
    struct all_count *c = ud;
    (void)r;
    assert_non_null(id);
    if (e == 0)
        c->good++;
    else
        c->damaged++;
    return 0;
}

/* recidx_presence sets and clears slot bits of an existing record only;
 * recidx_all lists every record, a damaged one with CKS_E_FORMAT. */
static void test_recidx_presence(void **state)
{
    struct fixture *f = *state;
    struct index_txn *t;
    uint8_t id[HASH_LEN], other[HASH_LEN];
    memset(id, 0x21, sizeof(id));
    memset(other, 0x22, sizeof(other));
    struct recidx r = {.sig = {8, 7, 6, 5, 4, 3, 2, 1}, .depth = 1, .raw_len = 100, .nbases = 1};
    memset(r.base[0].id, 0xc0, HASH_LEN);
    r.base[0].len = 200;
    struct recidx got;
    assert_int_equal(index_txn_begin(f->ix, true, &t), 0);
    assert_int_equal(recidx_put(t, id, &r), 0);
    assert_int_equal(recidx_presence(t, id, r.sig, 1u | 4u, 0), 0);
    assert_int_equal(recidx_presence(t, id, r.sig, 8u, 1u), 0);
    assert_int_equal(recidx_get(t, id, r.sig, &got), 0);
    assert_int_equal(got.presence, 4u | 8u);
    assert_int_equal(got.nbases, 1);
    assert_int_equal(got.base[0].len, 200);
    assert_int_equal(recidx_presence(t, other, r.sig, 1u, 0), 0); /* no record: nothing */
    assert_int_equal(recidx_get(t, other, r.sig, &got), -ENOENT);
    uint8_t key[HASH_LEN + MANIFEST_RECIPE_SIG], val[5] = {1};
    memcpy(key, other, HASH_LEN);
    memcpy(key + HASH_LEN, r.sig, MANIFEST_RECIPE_SIG);
    assert_int_equal(index_raw_put(t, INDEX_RECIPES, key, sizeof(key), val, sizeof(val)), 0);
    assert_int_equal(recidx_presence(t, other, r.sig, 1u, 0), CKS_E_FORMAT);
    struct all_count c = {0};
    assert_int_equal(recidx_all(t, count_all, &c), 0);
    assert_int_equal(c.good, 1);
    assert_int_equal(c.damaged, 1);
    assert_int_equal(index_txn_commit(t), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_format_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_creates_dir_0700, setup, teardown),
        cmocka_unit_test_setup_teardown(test_region_slots_stable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_region_slot_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recidx, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recidx_presence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abort_discards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_txn_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_commit_is_fatal, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

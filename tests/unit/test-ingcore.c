/*
 * test-ingcore.c — the reading core (service/ingcore.c) with a fake front
 * end (its ops table records what the core asks of it), over a real
 * repository (index and dir regions in a scratch directory) and real
 * files, with a pool of one thread (inline) and of three (the digest
 * thread):
 * - the walk order and the entries: manifest file k is walk entry k, with
 *   its type, size, digest and chunks (each the SHA-256 of its bytes,
 *   together the file), and the header (run, step, chunker, root);
 * - the ops: prepare and run once per chunk, apply in manifest order with
 *   the chunk's place, file_read once per file read; a failed run fails
 *   the snapshot with its message, after apply saw it;
 * - the known/reuse lookup: a file whose identity the index holds is not
 *   read (its chunks taken from the index) when reuse_need's slots hold
 *   every chunk, and is read when they do not or when the file changed;
 *   a file found unchanged before the read (kept) is taken as is, and one
 *   whose record is gone is CKS_E_CHANGED;
 * - the torn-file policy: a file that changes during its read is read
 *   again up to opts.retries times, never stored torn (CKS_E_CHANGED,
 *   with the message for one attempt or several);
 * - the record: one reference per occurrence of each chunk, the snapshot
 *   record, and the next snapshot of the run names this one its parent;
 * - the file digest's kind ([snapshot] file_digest): tree (the default),
 *   the chunk tree of the file's chunks, or sha256, the SHA-256 of its
 *   bytes, with the digest thread and inline; a file the index knows gets
 *   the digest of the configured kind, and under sha256 a record holding
 *   a tree digest is not taken (the file is read).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#include "engine/filedigest.h"
#include "engine/hash.h"
#include "service/ingcore.h"
#include "service/pool.h"
#include "testrepo.h"

#define MAXREC 4096
#define CHUNKER "[chunker]\nmin = 1K\navg = 4K\nmax = 16K\n"

/* The fake front end: what the core asked of it. */
struct fe {
    pthread_mutex_t mu;
    size_t prepares, runs, file_reads;
    bool bad_id;       /* a run saw an id that is not the SHA-256 of its bytes */
    bool unprepared;   /* a run of a job prepare did not see */
    bool fail_later;   /* every run but a file's first chunk's fails */
    bool fail_marked;  /* a run of a chunk past a file's first that begins "FAIL" fails */
    char tamper[512];  /* written at the first run of each read, while */
    int tamper_left;   /* this is above 0: a byte appended, or */
    bool in_place;     /* one byte overwritten (the size stays) */
    uint32_t need;     /* reuse_need's answer */
    bool record_files; /* file_read records the identity, as the CLI does */
    size_t napplied;
    size_t file[MAXREC], place[MAXREC]; /* what apply was told */
    uint8_t ids[MAXREC][HASH_LEN];
    int errs[MAXREC];
};

struct fjob {
    struct ingcore_job h;
    bool prepared;
};

static struct fe *fe_of(const struct ingcore_job *j)
{
    return j->c->o.ud;
}

static void fe_prepare(struct ingcore_job *j)
{
    ((struct fjob *)j)->prepared = true;
    fe_of(j)->prepares++; /* the calling thread */
}

static int fe_run(struct ingcore_job *j, size_t thread)
{
    struct fe *f = fe_of(j);
    uint8_t want[HASH_LEN];
    (void)thread;
    hash_sha256(j->raw.data, j->raw.len, want);
    pthread_mutex_lock(&f->mu);
    f->runs++;
    f->bad_id |= memcmp(want, j->id, HASH_LEN) != 0;
    f->unprepared |= !((struct fjob *)j)->prepared;
    ((struct fjob *)j)->prepared = false;
    if (f->tamper_left > 0 && j->off == 0) { /* a writer, mid-read */
        int fd = open(f->tamper, O_WRONLY | (f->in_place ? 0 : O_APPEND));
        if (fd >= 0 && (f->in_place ? pwrite(fd, "!", 1, 100) : write(fd, "!", 1)) == 1)
            f->tamper_left--;
        if (fd >= 0)
            close(fd);
    }
    pthread_mutex_unlock(&f->mu);
    if (f->fail_marked && j->off > 0 && j->raw.len >= 4 && !memcmp(j->raw.data, "FAIL", 4)) {
        snprintf(j->msg, sizeof(j->msg), "fake upload of a marked chunk failed");
        return -EIO;
    }
    if (f->fail_later && j->off > 0) {
        snprintf(j->msg, sizeof(j->msg), "fake upload at offset %llu failed",
                 (unsigned long long)j->off);
        return -EIO;
    }
    return 0;
}

static int fe_apply(struct ingcore_job *j, size_t file, size_t place)
{
    struct fe *f = fe_of(j);
    assert_true(f->napplied < MAXREC);
    f->file[f->napplied] = file;
    f->place[f->napplied] = place;
    memcpy(f->ids[f->napplied], j->id, HASH_LEN);
    f->errs[f->napplied++] = j->err;
    return 0;
}

static int fe_file_read(struct ingcore *c, const struct index_file_key *k,
                        const uint8_t digest[HASH_LEN], const struct mchunk *v, size_t n)
{
    struct fe *f = c->o.ud;
    struct index_txn *t;
    f->file_reads++;
    if (!f->record_files)
        return 0;
    assert_int_equal(index_txn_begin(repo_index(c->r), true, &t), 0);
    assert_int_equal(index_file_put(t, k, digest, v, n), 0);
    return index_txn_commit(t);
}

static uint32_t fe_need(void *ud)
{
    return ((struct fe *)ud)->need;
}

static const struct ingcore_ops fe_ops = {
    .job_size = sizeof(struct fjob),
    .prepare = fe_prepare,
    .run = fe_run,
    .apply = fe_apply,
    .file_read = fe_file_read,
};

/* ---- fixture ------------------------------------------------------------- */

struct fx {
    struct test_repo tr;
    char tree[128]; /* the checkpoint directory, "ck" */
    struct fe fe;
    struct pool *pool;
    struct ingcore c;
    struct buf err;
    size_t readers;         /* opts.readers */
    size_t njobs;           /* 0: 4 */
    char gone[2][512];      /* removed between the walk and the read ("": none) */
    enum mdigest_kind kind; /* the files' digest kind the configuration asks for */
};

/* A repository whose configuration is CHUNKER and then extra. */
static struct fx *fx_new_conf(size_t threads, const char *extra)
{
    char conf[256];
    struct fx *x = calloc(1, sizeof(*x));
    assert_non_null(x);
    snprintf(conf, sizeof(conf), "%s%s", CHUNKER, extra);
    test_repo_open(&x->tr, "ingcore", 2, 1, conf);
    x->kind = strstr(extra, "sha256") ? MDIGEST_SHA256 : MDIGEST_TREE;
    snprintf(x->tree, sizeof(x->tree), "%s/watch/ck", x->tr.tmp);
    assert_int_equal(mkdir(x->tree, 0755), 0);
    pthread_mutex_init(&x->fe.mu, NULL);
    assert_int_equal(pool_new(threads, &x->pool), 0);
    return x;
}

static struct fx *fx_new(size_t threads)
{
    return fx_new_conf(threads, "");
}

static void fx_free(struct fx *x)
{
    ingcore_free(&x->c);
    buf_free(&x->err);
    pool_free(x->pool);
    pthread_mutex_destroy(&x->fe.mu);
    test_repo_close(&x->tr);
    free(x);
}

/* The counts of the last pass back to zero (configuration kept). */
static void fe_reset(struct fe *f)
{
    f->prepares = f->runs = f->file_reads = f->napplied = 0;
    f->bad_id = f->unprepared = false;
}

/* One pass of the core over the tree: begin, then entries (returned). */
static int fx_pass(struct fx *x, const char *run, int64_t step, int retries,
                   const struct stat *kept)
{
    ingcore_free(&x->c);
    buf_reset(&x->err);
    fe_reset(&x->fe);
    struct ingcore_opts o = {.run = run,
                             .step = step,
                             .regions = repo_regions(x->tr.r),
                             .retries = retries,
                             .readers = x->readers,
                             .reuse_need = fe_need,
                             .ud = &x->fe};
    size_t njobs = x->njobs ? x->njobs : 4;
    assert_int_equal(ingcore_init(&x->c, x->tr.r, &fe_ops, x->pool, njobs, &o, &x->err), 0);
    int e = ingcore_begin(&x->c, x->tree);
    if (e < 0)
        fail_msg("ingcore_begin: %s", buf_str(&x->err));
    x->c.kept = kept;
    for (int i = 0; i < 2; i++)
        if (x->gone[i][0])
            assert_int_equal(unlink(x->gone[i]), 0);
    return ingcore_entries(&x->c);
}

static void fx_tree(struct fx *x)
{
    char sub[256], path[512], target[512];
    test_write_file(x->tree, "a.bin", 40000, 1);
    test_write_file(x->tree, "empty", 0, 2);
    snprintf(sub, sizeof(sub), "%s/sub", x->tree);
    assert_int_equal(mkdir(sub, 0750), 0);
    test_write_file(sub, "b.bin", 23456, 3);
    test_write_file(sub, "same-as-a", 40000, 1); /* a's bytes: the same chunks */
    snprintf(path, sizeof(path), "%s/link", x->tree);
    assert_int_equal(symlink("a.bin", path), 0);
    snprintf(path, sizeof(path), "%s/sub/hard", x->tree);
    snprintf(target, sizeof(target), "%s/sub/b.bin", x->tree);
    assert_int_equal(link(target, path), 0);
}

static size_t read_all(const char *path, uint8_t **ret)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *v = malloc(1 << 20);
    assert_non_null(v);
    size_t n = fread(v, 1, 1 << 20, f);
    fclose(f);
    *ret = v;
    return n;
}

/* Each regular file of the manifest is the file on disk: size, digest
 * (of the configured kind: the SHA-256 of its bytes, or the chunk tree
 * of its chunks), and chunks that are its bytes in order, each named by
 * its SHA-256. */
static void check_files(struct fx *x)
{
    const struct manifest *m = &x->c.m;
    for (size_t k = 0; k < m->nfiles; k++) {
        const struct mfile *mf = &m->files[k];
        char path[512];
        uint8_t *data, d[HASH_LEN];
        if (mf->type != MFILE_REG)
            continue;
        snprintf(path, sizeof(path), "%s/%s", x->c.w.base, mf->path);
        size_t n = read_all(path, &data);
        assert_int_equal(mf->size, n);
        assert_int_equal(mf->dkind, x->kind);
        if (x->kind == MDIGEST_TREE)
            assert_int_equal(filedigest_tree(&m->chunks[mf->first_chunk], mf->nchunks, d), 0);
        else
            hash_sha256(data, n, d);
        assert_memory_equal(mf->digest, d, HASH_LEN);
        uint64_t off = 0;
        for (size_t i = mf->first_chunk; i < mf->first_chunk + mf->nchunks; i++) {
            hash_sha256(data + off, m->chunks[i].len, d);
            assert_memory_equal(m->chunks[i].id, d, HASH_LEN);
            off += m->chunks[i].len;
        }
        assert_int_equal(off, n);
        free(data);
    }
}

/* apply was told each chunk of the manifest once, by its file and place,
 * each file's in its order (files may interleave with several readers). */
static void check_applied(struct fx *x)
{
    const struct manifest *m = &x->c.m;
    struct fe *f = &x->fe;
    size_t *next = calloc(m->nfiles, sizeof(*next));
    assert_non_null(next);
    assert_int_equal(f->napplied, m->nchunks);
    for (size_t a = 0; a < f->napplied; a++) {
        size_t k = f->file[a], i = f->place[a];
        assert_true(k < m->nfiles);
        assert_int_equal(m->files[k].type, MFILE_REG);
        assert_int_equal(i, next[k]++);
        assert_true(i < m->files[k].nchunks);
        assert_memory_equal(f->ids[a], m->chunks[m->files[k].first_chunk + i].id, HASH_LEN);
        assert_int_equal(f->errs[a], 0);
    }
    for (size_t k = 0; k < m->nfiles; k++)
        assert_int_equal(next[k], m->files[k].type == MFILE_REG ? m->files[k].nchunks : 0);
    free(next);
}

/* ---- tests --------------------------------------------------------------- */

static void walk_and_entries(size_t threads)
{
    struct fx *x = fx_new(threads);
    fx_tree(x);
    assert_int_equal(fx_pass(x, "r1", 10, 1, NULL), 0);
    const struct manifest *m = &x->c.m;
    const struct repo *r = x->tr.r;
    /* the header */
    assert_string_equal(m->run, "r1");
    assert_int_equal(m->step, 10);
    assert_string_equal(m->root, "ck");
    assert_null(m->parent);
    assert_int_equal(m->gen, 0);
    assert_true(m->id[0] != 0);
    assert_int_equal(m->chunk_min, repo_params(r)->chunk_min);
    assert_int_equal(m->chunk_avg, repo_params(r)->chunk_avg);
    assert_int_equal(m->chunk_max, repo_params(r)->chunk_max);
    /* manifest file k is walk entry k */
    static const char *order[] = {"ck",     "ck/a.bin",     "ck/empty",    "ck/link",
                                  "ck/sub", "ck/sub/b.bin", "ck/sub/hard", "ck/sub/same-as-a"};
    assert_int_equal(x->c.w.n, 8);
    assert_int_equal(m->nfiles, 8);
    for (size_t k = 0; k < m->nfiles; k++) {
        assert_string_equal(m->files[k].path, order[k]);
        assert_string_equal(x->c.w.v[k].path, order[k]);
        assert_int_equal(m->files[k].type, x->c.w.v[k].type);
    }
    assert_int_equal(m->files[3].type, MFILE_LINK);
    assert_string_equal(m->files[3].link, "a.bin");
    assert_int_equal(m->files[6].type, MFILE_HARDLINK);
    assert_int_equal(m->files[4].mode, 0750);
    check_files(x);
    /* a's chunks twice: same-as-a has its bytes */
    assert_int_equal(m->files[7].nchunks, m->files[1].nchunks);
    assert_memory_equal(&m->chunks[m->files[7].first_chunk], &m->chunks[m->files[1].first_chunk],
                        m->files[1].nchunks * sizeof(struct mchunk));
    /* the ops: once per chunk, applied in manifest order */
    struct fe *f = &x->fe;
    assert_true(m->nchunks > 8);
    assert_int_equal(f->prepares, m->nchunks);
    assert_int_equal(f->runs, m->nchunks);
    assert_int_equal(f->napplied, m->nchunks);
    assert_false(f->bad_id);
    assert_false(f->unprepared);
    check_applied(x);
    assert_int_equal(f->file_reads, 4); /* a.bin, empty, b.bin, same-as-a */
    /* the counts */
    assert_int_equal(x->c.files, 4);
    assert_int_equal(x->c.dirs, 2);
    assert_int_equal(x->c.links, 1);
    assert_int_equal(x->c.bytes, 40000 + 0 + 23456 + 40000);
    assert_int_equal(x->c.chunks, m->nchunks);
    assert_int_equal(x->c.files_unchanged, 0);
    fx_free(x);
}

static void test_walk_and_entries_inline(void **state)
{
    walk_and_entries(1);
}

static void test_walk_and_entries_threads(void **state)
{
    walk_and_entries(3);
}

/* Sets presence bit slot on every chunk of the manifest. */
static void mark_present(struct fx *x, unsigned slot)
{
    struct index_txn *t;
    assert_int_equal(index_txn_begin(repo_index(x->tr.r), true, &t), 0);
    for (size_t i = 0; i < x->c.m.nchunks; i++) {
        struct index_chunk ch = {0};
        int e = index_chunk_get(t, x->c.m.chunks[i].id, &ch);
        assert_true(e == 0 || e == -ENOENT);
        ch.raw_len = x->c.m.chunks[i].len;
        ch.presence |= 1u << slot;
        assert_int_equal(index_chunk_put(t, x->c.m.chunks[i].id, &ch), 0);
    }
    assert_int_equal(index_txn_commit(t), 0);
}

/* file_digest = sha256: each file's SHA-256, inline and on the digest
 * thread, and a second pass taking every file from the index keeps it. */
static void sha256_pass(size_t threads)
{
    struct fx *x = fx_new_conf(threads, "[snapshot]\nfile_digest = sha256\n");
    fx_tree(x);
    x->fe.record_files = true;
    assert_int_equal(fx_pass(x, "r1", 1, 1, NULL), 0);
    check_files(x);
    assert_int_equal(fx_pass(x, "r1", 2, 1, NULL), 0);
    assert_int_equal(x->c.files_unchanged, 4);
    check_files(x);
    fx_free(x);
}

static void test_sha256_inline(void **state)
{
    (void)state;
    sha256_pass(1);
}

static void test_sha256_threads(void **state)
{
    (void)state;
    sha256_pass(3);
}

/* Records file key k as holding chunks v[0..n-1] with this digest. */
static void put_record(struct fx *x, const struct index_file_key *k, const uint8_t *digest,
                       const struct mchunk *v, size_t n)
{
    struct index_txn *t;
    assert_int_equal(index_txn_begin(repo_index(x->tr.r), true, &t), 0);
    assert_int_equal(index_file_put(t, k, digest, v, n), 0);
    assert_int_equal(index_txn_commit(t), 0);
}

/* Records of either kind, kept apart by the key's kind byte (index.h):
 * ingcore_known answers the configured kind (tree: the tree of a tree
 * record's chunks, or failing one of a SHA-256 record's; sha256: only a
 * SHA-256 record, whose digest it gives), so a tree digest is never
 * taken for a file's SHA-256, by this build or by one before version 5
 * (which looks up the 40-byte keys alone). */
static void known_kind(const char *extra)
{
    struct fx *x = fx_new_conf(1, extra);
    struct index_file_key k = {.dev = 1, .ino = 42, .size = 12}, k2 = k, k2t;
    struct mchunk v[2] = {{.len = 5}, {.len = 7}}, *got_v = NULL;
    uint8_t sha[HASH_LEN], tree[HASH_LEN], got[HASH_LEN];
    size_t got_n = 0;
    memset(v[0].id, 0xa5, HASH_LEN);
    memset(v[1].id, 0x5a, HASH_LEN);
    hash_sha256("some 12 byte", 12, sha);
    assert_int_equal(filedigest_tree(v, 2, tree), 0);
    put_record(x, &k, sha, v, 2); /* a SHA-256 record (kind 0) */
    assert_int_equal(ingcore_known(x->tr.r, &k, 0, got, NULL, NULL), 1);
    assert_memory_equal(got, x->kind == MDIGEST_TREE ? tree : sha, HASH_LEN);
    k2.ino = 43; /* only a tree record */
    k2t = k2;
    k2t.kind = MDIGEST_TREE;
    put_record(x, &k2t, tree, v, 2);
    struct index_txn *t;
    assert_int_equal(index_txn_begin(repo_index(x->tr.r), false, &t), 0);
    assert_int_equal(index_file_get(t, &k2, got, &got_v, &got_n), -ENOENT);
    index_txn_abort(t);
    int want = x->kind == MDIGEST_TREE ? 1 : 0;
    assert_int_equal(ingcore_known(x->tr.r, &k2, 0, got, NULL, NULL), want);
    if (want)
        assert_memory_equal(got, tree, HASH_LEN);
    fx_free(x);
}

static void test_known_kinds(void **state)
{
    (void)state;
    known_kind("");
    known_kind("[snapshot]\nfile_digest = sha256\n");
}

static void test_known_and_reuse(void **state)
{
    struct fx *x = fx_new(3);
    fx_tree(x);
    x->fe.record_files = true;
    assert_int_equal(fx_pass(x, "r1", 1, 1, NULL), 0);
    size_t nchunks = x->c.m.nchunks;
    struct mchunk *first = malloc(nchunks * sizeof(*first));
    assert_non_null(first);
    memcpy(first, x->c.m.chunks, nchunks * sizeof(*first));

    /* ingcore_known: by identity, with and without a condition */
    const struct mfile *a = &x->c.m.files[1];
    uint8_t digest[HASH_LEN];
    struct mchunk *v = NULL;
    size_t n = 0;
    assert_int_equal(ingcore_known(x->tr.r, &x->c.keys[1], 0, digest, &v, &n), 1);
    assert_memory_equal(digest, a->digest, HASH_LEN);
    assert_int_equal(n, a->nchunks);
    assert_memory_equal(v, &x->c.m.chunks[a->first_chunk], n * sizeof(*v));
    free(v);
    assert_int_equal(ingcore_known(x->tr.r, &x->c.keys[1], 1u << 0, digest, NULL, NULL), 0);
    struct index_file_key other = x->c.keys[1];
    other.ino++;
    assert_int_equal(ingcore_known(x->tr.r, &other, 0, digest, NULL, NULL), 0);

    /* no condition: nothing is read again, the manifest is the same */
    x->fe.need = 0;
    assert_int_equal(fx_pass(x, "r1", 2, 1, NULL), 0);
    assert_int_equal(x->c.files_unchanged, 4);
    assert_int_equal(x->fe.runs, 0);
    assert_int_equal(x->fe.file_reads, 0);
    assert_int_equal(x->c.m.nchunks, nchunks);
    assert_memory_equal(x->c.m.chunks, first, nchunks * sizeof(*first));
    check_files(x);

    /* the slots reuse needs lack the chunks: read again; once they hold
     * them, taken from the index */
    x->fe.need = 1u << 1;
    assert_int_equal(fx_pass(x, "r1", 3, 1, NULL), 0);
    assert_int_equal(x->c.files_unchanged, 1); /* the empty file: no chunk to lack */
    assert_int_equal(x->fe.runs, nchunks);
    mark_present(x, 1);
    assert_int_equal(fx_pass(x, "r1", 4, 1, NULL), 0);
    assert_int_equal(x->c.files_unchanged, 4);
    assert_int_equal(x->fe.runs, 0);

    /* a file rewritten (same size, other bytes) is read; the rest is not */
    char sub[256];
    snprintf(sub, sizeof(sub), "%s/sub", x->tree);
    test_write_file(sub, "b.bin", 23456, 99);
    x->fe.need = 0;
    assert_int_equal(fx_pass(x, "r1", 5, 1, NULL), 0);
    assert_int_equal(x->c.files_unchanged, 3);
    assert_int_equal(x->fe.file_reads, 1);
    assert_true(x->fe.runs > 0);
    check_files(x);
    free(first);
    fx_free(x);
}

/* Files found unchanged before the read (the daemon's ingest): taken from
 * the index as they are; CKS_E_CHANGED when the record went meanwhile. */
static void test_kept(void **state)
{
    struct fx *x = fx_new(1);
    fx_tree(x);
    x->fe.record_files = true;
    assert_int_equal(fx_pass(x, "r1", 1, 1, NULL), 0);
    struct stat kept[8];
    memset(kept, 0, sizeof(kept));
    char path[512];
    snprintf(path, sizeof(path), "%s/a.bin", x->tree);
    assert_int_equal(lstat(path, &kept[1]), 0);
    x->fe.need = 1u << 0; /* not met: only kept files may be reused */
    assert_int_equal(fx_pass(x, "r1", 2, 1, kept), 0);
    assert_int_equal(x->c.files_unchanged, 2); /* a.bin, and the empty file (no chunk) */
    assert_int_equal(x->fe.file_reads, 2);
    check_files(x);

    kept[1].st_ino += 1000000; /* an identity the index does not know */
    assert_int_equal(fx_pass(x, "r1", 3, 1, kept), CKS_E_CHANGED);
    fx_free(x);
}

static void test_torn_file(void **state)
{
    struct fx *x = fx_new(2);
    test_write_file(x->tree, "w.bin", 50000, 7);
    snprintf(x->fe.tamper, sizeof(x->fe.tamper), "%s/w.bin", x->tree);

    /* retries 1 (the daemon: it takes the whole unit again) */
    x->fe.tamper_left = 1;
    assert_int_equal(fx_pass(x, "r1", 1, 1, NULL), CKS_E_CHANGED);
    assert_non_null(strstr(buf_str(&x->err), "w.bin\" changed while it was read"));

    /* retries 3 (the CLI): read again, the manifest holds the new bytes */
    x->fe.tamper_left = 1;
    assert_int_equal(fx_pass(x, "r1", 2, 3, NULL), 0);
    assert_int_equal(x->fe.tamper_left, 0);
    assert_int_equal(x->c.m.files[1].size, 50002); /* two writes so far */
    check_files(x);

    /* changing on every read: given up after the retries */
    x->fe.tamper_left = 100;
    assert_int_equal(fx_pass(x, "r1", 3, 2, NULL), CKS_E_CHANGED);
    assert_int_equal(x->fe.tamper_left, 98);
    assert_non_null(strstr(buf_str(&x->err), "kept changing while it was read (2 attempts)"));

    /* rewritten in place, size unchanged: the identity (mtime, ctime) tells */
    x->fe.in_place = true;
    x->fe.tamper_left = 1;
    assert_int_equal(fx_pass(x, "r1", 4, 1, NULL), CKS_E_CHANGED);
    x->fe.tamper_left = 1;
    assert_int_equal(fx_pass(x, "r1", 5, 2, NULL), 0);
    assert_int_equal(x->c.m.files[1].size, 50002 + 2);
    check_files(x);
    fx_free(x);
}

static void test_run_failure(void **state)
{
    struct fx *x = fx_new(2);
    test_write_file(x->tree, "f.bin", 60000, 5);
    x->fe.fail_later = true;
    assert_int_equal(fx_pass(x, "r1", 1, 1, NULL), -EIO);
    assert_non_null(strstr(buf_str(&x->err), "fake upload at offset "));
    /* apply saw the failed job, in order */
    assert_true(x->fe.napplied >= 2);
    assert_int_equal(x->fe.errs[0], 0);
    assert_int_equal(x->fe.errs[1], -EIO);
    assert_int_equal(x->fe.file_reads, 0);
    fx_free(x);
}

/* Many files: read with several readers, the manifest's files and chunks
 * are the serial ones, whatever the timing (several passes). */
static void test_readers_same_manifest(void **state)
{
    struct fx *x = fx_new(4);
    char sub[256], name[64];
    snprintf(sub, sizeof(sub), "%s/shards", x->tree);
    assert_int_equal(mkdir(sub, 0755), 0);
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof(name), "shard-%02d.bin", i);
        test_write_file(i % 2 ? sub : x->tree, name, 20000 + 7919 * (size_t)i, 40 + i);
    }
    x->njobs = 16;
    x->readers = 1;
    assert_int_equal(fx_pass(x, "r1", 1, 1, NULL), 0);
    assert_int_equal(x->c.readers_used, 1);
    struct manifest serial = x->c.m;
    memset(&x->c.m, 0, sizeof(x->c.m)); /* kept: ours now */
    for (int pass = 0; pass < 8; pass++) {
        x->readers = 2 + (size_t)pass % 4;
        assert_int_equal(fx_pass(x, "r1", 2 + pass, 1, NULL), 0);
        assert_true(x->c.readers_used > 1);
        const struct manifest *m = &x->c.m;
        assert_int_equal(m->nfiles, serial.nfiles);
        assert_int_equal(m->nchunks, serial.nchunks);
        for (size_t k = 0; k < m->nfiles; k++) {
            assert_string_equal(m->files[k].path, serial.files[k].path);
            assert_int_equal(m->files[k].first_chunk, serial.files[k].first_chunk);
            assert_int_equal(m->files[k].nchunks, serial.files[k].nchunks);
            assert_int_equal(m->files[k].size, serial.files[k].size);
            assert_int_equal(m->files[k].mtime_ns, serial.files[k].mtime_ns);
            assert_memory_equal(m->files[k].digest, serial.files[k].digest, HASH_LEN);
        }
        assert_memory_equal(m->chunks, serial.chunks, m->nchunks * sizeof(*m->chunks));
        check_files(x);
        check_applied(x);
        assert_int_equal(x->c.files, 12);
        assert_int_equal(x->c.done, x->c.bytes);
    }
    manifest_free(&serial);
    fx_free(x);
}

/* With several readers, a file that cannot be read fails the pass with
 * its own message: the first such file in walk order. */
static void test_readers_failure_order(void **state)
{
    struct fx *x = fx_new(4);
    char name[64];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof(name), "f%d.bin", i);
        test_write_file(x->tree, name, 30000, 60 + i);
    }
    x->njobs = 16;
    x->readers = 4;
    for (int bad = 0; bad < 8; bad += 3) {
        int later = bad + 2 < 8 ? bad + 2 : 7;
        snprintf(x->gone[0], sizeof(x->gone[0]), "%s/f%d.bin", x->tree, later);
        snprintf(x->gone[1], sizeof(x->gone[1]), "%s/f%d.bin", x->tree, bad);
        int e = fx_pass(x, "r1", 1, 1, NULL);
        assert_int_equal(e, -ENOENT);
        assert_true(x->c.readers_used > 1);
        snprintf(name, sizeof(name), "/f%d.bin\": ", bad);
        assert_non_null(strstr(buf_str(&x->err), name));
        for (int i = 0; i < 2; i++) {
            const char *slash = strrchr(x->gone[i], '/');
            test_write_file(x->tree, slash + 1, 30000, 60 + (slash[2] - '0'));
            x->gone[i][0] = 0;
        }
    }
    assert_int_equal(fx_pass(x, "r1", 2, 1, NULL), 0);
    check_files(x);

    /* the first failure in walk order is the one said, even when a later
     * file fails first: f1 fails after some of it was read, f5 at once */
    char path[512];
    snprintf(path, sizeof(path), "%s/f1.bin", x->tree);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(fwrite("FAIL", 1, 4, fp), 4);
    assert_int_equal(fclose(fp), 0);
    x->fe.fail_marked = true;
    snprintf(x->gone[0], sizeof(x->gone[0]), "%s/f5.bin", x->tree);
    assert_int_equal(fx_pass(x, "r1", 3, 1, NULL), -EIO);
    assert_non_null(strstr(buf_str(&x->err), "fake upload of a marked chunk failed"));
    assert_null(strstr(buf_str(&x->err), "f5.bin"));
    fx_free(x);
}

static void test_record_and_parent(void **state)
{
    struct fx *x = fx_new(1);
    fx_tree(x);
    assert_int_equal(fx_pass(x, "r1", 7, 1, NULL), 0);
    char id1[MANIFEST_ID_MAX + 1];
    snprintf(id1, sizeof(id1), "%s", x->c.m.id);
    struct index_txn *t;
    assert_int_equal(index_txn_begin(repo_index(x->tr.r), true, &t), 0);
    assert_int_equal(ingcore_record(&x->c, t), 0);
    assert_int_equal(index_txn_commit(t), 0);

    const struct manifest *m = &x->c.m;
    const struct mfile *a = &m->files[1], *b = &m->files[5];
    uint8_t a0[HASH_LEN];
    memcpy(a0, m->chunks[a->first_chunk].id, HASH_LEN);
    struct index_snap s;
    struct index_chunk ch;
    assert_int_equal(index_txn_begin(repo_index(x->tr.r), false, &t), 0);
    assert_int_equal(index_snap_get(t, "r1", id1, &s), 0);
    assert_int_equal(s.step, 7);
    assert_int_equal(s.bytes, x->c.bytes);
    assert_int_equal(s.nfiles, manifest_regular_files(m)); /* regular files only */
    assert_int_equal(s.committed, 0);
    /* a's chunks occur twice (same-as-a), b's once (hard is a link) */
    assert_int_equal(index_chunk_get(t, m->chunks[a->first_chunk].id, &ch), 0);
    assert_int_equal(ch.refcount, 2);
    assert_int_equal(ch.raw_len, m->chunks[a->first_chunk].len);
    assert_int_equal(ch.presence, 0);
    assert_int_equal(index_chunk_get(t, m->chunks[b->first_chunk].id, &ch), 0);
    assert_int_equal(ch.refcount, 1);
    index_txn_abort(t);

    /* the next snapshot of the run names this one its parent */
    assert_int_equal(fx_pass(x, "r1", 8, 1, NULL), 0);
    assert_non_null(x->c.m.parent);
    assert_string_equal(x->c.m.parent, id1);
    assert_string_not_equal(x->c.m.id, id1);
    assert_int_equal(index_txn_begin(repo_index(x->tr.r), true, &t), 0);
    assert_int_equal(ingcore_record(&x->c, t), 0);
    assert_int_equal(index_chunk_get(t, a0, &ch), 0);
    assert_int_equal(ch.refcount, 4);
    index_txn_abort(t);
    /* another run has no parent */
    assert_int_equal(fx_pass(x, "r2", 8, 1, NULL), 0);
    assert_null(x->c.m.parent);
    fx_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_and_entries_inline),
        cmocka_unit_test(test_walk_and_entries_threads),
        cmocka_unit_test(test_known_and_reuse),
        cmocka_unit_test(test_sha256_inline),
        cmocka_unit_test(test_sha256_threads),
        cmocka_unit_test(test_known_kinds),
        cmocka_unit_test(test_kept),
        cmocka_unit_test(test_torn_file),
        cmocka_unit_test(test_run_failure),
        cmocka_unit_test(test_readers_same_manifest),
        cmocka_unit_test(test_readers_failure_order),
        cmocka_unit_test(test_record_and_parent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

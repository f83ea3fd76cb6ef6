/*
 * test-region-dir.c — the dir region backend through the generic region_*
 * calls: round trips, listing by prefix, size limits, overwrite, no temp
 * files left, key validation, and check() naming the path it complains
 * about (missing, not a directory, read-only mount when we may mount),
 * a listing under a missing root failing rather than coming back empty;
 * create-only puts (region_put_new) alone and raced by threads and by
 * processes, the precondition probe, and `preconditions = none`; the
 * region's clock (region_clock); a writer racing prune's tidy (region_tidy)
 * that removes its empty folder.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "store/region.h"

struct fixture {
    char root[64];
    struct region_conf conf;
    struct region *r;
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct buf err = BUF_INIT;
    assert_non_null(f);
    snprintf(f->root, sizeof(f->root), "/tmp/cks-test-region-XXXXXX");
    assert_non_null(mkdtemp(f->root));
    snprintf(f->conf.name, sizeof(f->conf.name), "a");
    f->conf.kind = REGION_KIND_DIR;
    snprintf(f->conf.path, sizeof(f->conf.path), "%s", f->root);
    assert_int_equal(region_new(&f->conf, &f->r, &err), 0);
    assert_int_equal(err.len, 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    region_free(f->r);
    chmod(f->root, 0700);
    nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static void put_str(struct region *r, const char *key, const char *s)
{
    int rc = region_put(r, key, s, strlen(s));
    if (rc != 0)
        print_error("%s\n", region_last_error(r));
    assert_int_equal(rc, 0);
}

static void expect_content(struct region *r, const char *key, const char *want)
{
    struct buf b = BUF_INIT;
    assert_int_equal(region_get(r, key, 1 << 20, &b), 0);
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.data, want, b.len);
    buf_free(&b);
}

static void expect_error_has(struct region *r, const char *needle)
{
    const char *msg = region_last_error(r);
    if (!strstr(msg, needle))
        print_error("message \"%s\" lacks \"%s\"\n", msg, needle);
    assert_non_null(strstr(msg, needle));
}

/* ---- round trips ------------------------------------------------------- */

static void test_round_trip(void **state)
{
    struct fixture *f = *state;
    struct buf b = BUF_INIT;
    const char *key = "chunks/ab/abcdef";

    assert_int_equal(region_has(f->r, key), 0);
    assert_int_equal(region_get(f->r, key, 100, &b), -ENOENT);
    expect_error_has(f->r, "region 'a'");
    expect_error_has(f->r, key);
    put_str(f->r, "repo", "hello");
    put_str(f->r, key, "chunk bytes");
    assert_int_equal(region_has(f->r, "repo"), 1);
    assert_int_equal(region_has(f->r, key), 1);
    assert_int_equal(region_has(f->r, "chunks"), 0); /* a directory is not an object */
    assert_int_equal(region_get(f->r, "chunks", 100, &b), -ENOENT);
    assert_int_equal(region_has(f->r, "repo/x"), 0); /* parent is a file */
    assert_int_equal(region_get(f->r, "repo/x", 100, &b), -ENOENT);
    expect_content(f->r, "repo", "hello");
    expect_content(f->r, key, "chunk bytes");

    assert_int_equal(region_put(f->r, "empty", "", 0), 0);
    expect_content(f->r, "empty", "");

    assert_int_equal(region_del(f->r, key), 0);
    assert_int_equal(region_has(f->r, key), 0);
    assert_int_equal(region_del(f->r, key), -ENOENT);
    expect_error_has(f->r, key);
    expect_error_has(f->r, "No such file");
    buf_free(&b);
}

static void test_get_replaces_buffer(void **state)
{
    struct fixture *f = *state;
    struct buf b = BUF_INIT;
    put_str(f->r, "k", "new");
    assert_int_equal(buf_puts(&b, "old contents"), 0);
    assert_int_equal(region_get(f->r, "k", 100, &b), 0);
    assert_string_equal(buf_str(&b), "new");
    buf_free(&b);
}

static void test_get_limit(void **state)
{
    struct fixture *f = *state;
    struct buf b = BUF_INIT;
    char data[100];
    memset(data, 'x', sizeof(data));
    assert_int_equal(region_put(f->r, "big", data, sizeof(data)), 0);
    assert_int_equal(region_get(f->r, "big", 99, &b), CKS_E_LIMIT);
    expect_error_has(f->r, "big");
    assert_int_equal(region_get(f->r, "big", 100, &b), 0);
    assert_int_equal(b.len, 100);
    buf_free(&b);
}

static void test_overwrite(void **state)
{
    struct fixture *f = *state;
    put_str(f->r, "refs/r1/latest", "a much longer first value");
    put_str(f->r, "refs/r1/latest", "second");
    expect_content(f->r, "refs/r1/latest", "second");
}

/* ---- list -------------------------------------------------------------- */

struct seen {
    unsigned n;
    uint64_t bytes;
    unsigned stop_at;
};

static int count_key(void *ud, const char *key, uint64_t size)
{
    struct seen *s = ud;
    s->n++;
    s->bytes += size;
    assert_true(key[0] != '/' && strstr(key, "//") == NULL);
    return s->stop_at && s->n == s->stop_at ? 7 : 0;
}

static unsigned list_count(struct region *r, const char *prefix, uint64_t *ret_bytes)
{
    struct seen s = {0};
    int rc = region_list(r, prefix, count_key, &s);
    if (rc != 0)
        print_error("%s\n", region_last_error(r));
    assert_int_equal(rc, 0);
    if (ret_bytes)
        *ret_bytes = s.bytes;
    return s.n;
}

struct want_key {
    const char *key;
    int found;
};

static int mark_key(void *ud, const char *key, uint64_t size)
{
    for (struct want_key *w = ud; w->key; w++)
        if (strcmp(w->key, key) == 0) {
            assert_int_equal(size, strlen(key));
            w->found++;
            return 0;
        }
    fail_msg("unexpected key \"%s\"", key);
    return -1;
}

static void test_list_prefixes(void **state)
{
    struct fixture *f = *state;
    static const char *keys[] = {
        "repo",
        "chunks/ab/ab01",
        "chunks/ab/ab02",
        "chunks/cd/cd01",
        "snapshots/r1/s1",
        "snapshots/r1/s2",
        "snapshots/r10/s1",
        "refs/r1/latest",
    };
    static const struct {
        const char *prefix;
        unsigned n;
    } cases[] = {
        {"", 8},
        {"chunks/", 3},
        {"chunks/ab/", 2},
        {"chunks/ab/ab0", 2},
        {"chunks/c", 1},
        {"snapshots/r1/", 2},
        {"snapshots/r1", 3},
        {"snapshots/r10/", 1},
        {"nope/", 0},
        {"re", 2},
        {"repo/", 0},
        {"chunks/zz/", 0},
    };
    uint64_t bytes;

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        put_str(f->r, keys[i], keys[i]); /* size == strlen(key) */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned n = list_count(f->r, cases[i].prefix, NULL);
        if (n != cases[i].n)
            print_error("prefix \"%s\": %u keys, want %u\n", cases[i].prefix, n, cases[i].n);
        assert_int_equal(n, cases[i].n);
    }
    assert_int_equal(list_count(f->r, "snapshots/", &bytes), 3);
    assert_int_equal(bytes, strlen("snapshots/r1/s1") * 2 + strlen("snapshots/r10/s1"));

    struct want_key want[] = {{"snapshots/r1/s1", 0}, {"snapshots/r1/s2", 0}, {NULL, 0}};
    assert_int_equal(region_list(f->r, "snapshots/r1/", mark_key, want), 0);
    assert_int_equal(want[0].found, 1);
    assert_int_equal(want[1].found, 1);

    struct seen s = {.stop_at = 2};
    assert_int_equal(region_list(f->r, "", count_key, &s), 7);
    assert_int_equal(s.n, 2);
}

static int find_dot(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return ftw->level > 0 && path[ftw->base] == '.' ? 1 : 0;
}

static void test_no_temp_files_left(void **state)
{
    struct fixture *f = *state;
    char key[64];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "chunks/%02x/%d", i % 4, i);
        put_str(f->r, key, "payload");
        put_str(f->r, key, "payload again");
    }
    assert_int_equal(region_check(f->r), 0);
    assert_int_equal(nftw(f->root, find_dot, 16, FTW_PHYS), 0);
    /* A leftover temp file (a crash mid-put) is never listed. */
    char path[128];
    snprintf(path, sizeof(path), "%s/chunks/00/.0.tmp.1.2", f->root);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(list_count(f->r, "chunks/00/", NULL), 5);
}

/* ---- keys -------------------------------------------------------------- */

static void test_invalid_keys(void **state)
{
    struct fixture *f = *state;
    static const char *bad[] = {
        "", "/abs", "a/../b", "..", "a//b", "a/", "./a", "a/.", "../x", "chunks/..",
    };
    struct buf b = BUF_INIT;
    char longkey[REGION_KEY_MAX + 1];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(region_put(f->r, bad[i], "x", 1), -EINVAL);
        expect_error_has(f->r, "invalid key");
        assert_int_equal(region_get(f->r, bad[i], 10, &b), -EINVAL);
        assert_int_equal(region_has(f->r, bad[i]), -EINVAL);
        assert_int_equal(region_del(f->r, bad[i]), -EINVAL);
        assert_int_equal(region_put_new(f->r, bad[i], "x", 1), -EINVAL);
    }
    memset(longkey, 'k', REGION_KEY_MAX);
    longkey[REGION_KEY_MAX] = 0;
    assert_int_equal(region_put(f->r, longkey, "x", 1), -EINVAL);
    longkey[REGION_KEY_MAX - 1] = 0; /* 1023 bytes, but one component is too long for a file */
    assert_true(region_put(f->r, longkey, "x", 1) < 0);
    assert_int_equal(region_list(f->r, "../", count_key, NULL), -EINVAL);
    assert_int_equal(region_list(f->r, "/", count_key, NULL), -EINVAL);
    assert_int_equal(region_list(f->r, "a//", count_key, NULL), -EINVAL);
    /* Fine keys: dots inside names are not "..". */
    put_str(f->r, "a..b/c.d", "ok");
    expect_content(f->r, "a..b/c.d", "ok");
    buf_free(&b);
}

/* ---- check ------------------------------------------------------------- */

static struct region *region_at(const char *path)
{
    struct region_conf conf = {.kind = REGION_KIND_DIR};
    struct region *r = NULL;
    snprintf(conf.name, sizeof(conf.name), "b");
    snprintf(conf.path, sizeof(conf.path), "%s", path);
    assert_int_equal(region_new(&conf, &r, NULL), 0);
    return r;
}

static void test_check_missing_dir(void **state)
{
    struct fixture *f = *state;
    char path[128];
    struct stat st;
    snprintf(path, sizeof(path), "%s/not-mounted", f->root);
    struct region *r = region_at(path);
    assert_int_equal(region_check(r), -ENOENT);
    expect_error_has(r, "region 'b'");
    expect_error_has(r, path);
    expect_error_has(r, "does not exist");
    /* put must not create the root: that would hide an unmounted share. */
    assert_true(region_put(r, "chunks/ab/x", "x", 1) < 0);
    expect_error_has(r, path);
    assert_int_equal(stat(path, &st), -1);
    region_free(r);
}

/* An absent prefix lists nothing; an absent root (or one that is a file)
 * fails, naming the region and the path: it is not an empty region. */
static void test_list_missing_root(void **state)
{
    struct fixture *f = *state;
    char path[128];
    struct seen s = {0};
    assert_int_equal(list_count(f->r, "lineage/r1/", NULL), 0);
    assert_int_equal(list_count(f->r, "", NULL), 0);
    snprintf(path, sizeof(path), "%s/not-mounted", f->root);
    struct region *r = region_at(path);
    static const char *prefixes[] = {"lineage/r1/", "snapshots/", "commits/r1/g", ""};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        assert_true(region_list(r, prefixes[i], count_key, &s) < 0);
        assert_true(region_list(r, prefixes[i], count_key, &s) != -ENOENT);
        expect_error_has(r, "region 'b'");
        expect_error_has(r, path);
        expect_error_has(r, "does not exist");
    }
    region_free(r);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    r = region_at(path);
    assert_int_equal(region_list(r, "lineage/r1/", count_key, &s), -ENOTDIR);
    expect_error_has(r, path);
    expect_error_has(r, "not a directory");
    assert_int_equal(s.n, 0);
    region_free(r);
}

static void test_check_not_a_dir(void **state)
{
    struct fixture *f = *state;
    char path[128];
    snprintf(path, sizeof(path), "%s/file", f->root);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
    struct region *r = region_at(path);
    assert_int_equal(region_check(r), -ENOTDIR);
    expect_error_has(r, path);
    expect_error_has(r, "not a directory");
    region_free(r);
}

static void test_check_ok(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(region_check(f->r), 0);
    assert_int_equal(list_count(f->r, "", NULL), 0); /* the probe is gone */
}

static void test_check_read_only(void **state)
{
    struct fixture *f = *state;
    char mnt[128];
    snprintf(mnt, sizeof(mnt), "%s/ro", f->root);
    assert_int_equal(mkdir(mnt, 0755), 0);
    if (mount("cks-test", mnt, "tmpfs", MS_RDONLY, "size=1m") < 0) {
        print_message("skipped: cannot mount a read-only tmpfs (%s); needs root with "
                      "CAP_SYS_ADMIN\n",
                      strerror(errno));
        skip();
    }
    struct region *r = region_at(mnt);
    int check = region_check(r);
    char msg[sizeof(r->errmsg)];
    snprintf(msg, sizeof(msg), "%s", region_last_error(r));
    int put = region_put(r, "chunks/ab/x", "x", 1);
    region_free(r);
    umount2(mnt, MNT_DETACH);
    assert_int_equal(check, -EROFS);
    assert_non_null(strstr(msg, mnt));
    assert_non_null(strstr(msg, "is not writable: Read-only file system"));
    assert_int_equal(put, -EROFS);
}

static void test_check_no_permission(void **state)
{
    struct fixture *f = *state;
    char path[128];
    if (geteuid() == 0) {
        print_message("skipped: permission bits do not bind root\n");
        skip();
    }
    snprintf(path, sizeof(path), "%s/locked", f->root);
    assert_int_equal(mkdir(path, 0555), 0);
    struct region *r = region_at(path);
    assert_int_equal(region_check(r), -EACCES);
    expect_error_has(r, "is not writable");
    region_free(r);
    chmod(path, 0755);
}

/* ---- create-only puts --------------------------------------------------- */

static void test_put_new(void **state)
{
    struct fixture *f = *state;
    const char *key = "snapshots/r1/0001";

    assert_int_equal(region_preconditions(f->r), 1); /* dir: enforced from the start */
    assert_int_equal(region_put_new(f->r, key, "first", 5), 0);
    expect_content(f->r, key, "first");
    assert_int_equal(region_put_new(f->r, key, "second, longer", 14), -EEXIST);
    expect_error_has(f->r, "region 'a'");
    expect_error_has(f->r, key);
    expect_content(f->r, key, "first");
    assert_int_equal(region_put_new(f->r, "empty", "", 0), 0);
    expect_content(f->r, "empty", "");
    /* A directory of that name exists too: nothing is created over it. */
    assert_int_equal(region_put_new(f->r, "snapshots/r1", "x", 1), -EEXIST);
    /* region_put still replaces; put_new is only for names never reused. */
    put_str(f->r, key, "replaced");
    expect_content(f->r, key, "replaced");
    assert_int_equal(nftw(f->root, find_dot, 16, FTW_PHYS), 0);
}

static void test_put_new_switched_off(void **state)
{
    struct fixture *f = *state;
    region_set_preconditions(f->r, 0);
    assert_int_equal(region_preconditions(f->r), 0);
    assert_int_equal(region_put_new(f->r, "k", "x", 1), -ENOTSUP);
    expect_error_has(f->r, "create-only puts are not enforced");
    assert_int_equal(region_has(f->r, "k"), 0);
    region_set_preconditions(f->r, 1);
    assert_int_equal(region_put_new(f->r, "k", "x", 1), 0);
}

#define RACERS 8
#define RACE_KEY "refs/r1/lineage/0001"

struct racer {
    const struct region_conf *conf;
    pthread_barrier_t *start;
    char body[32];
    int rc;
};

/* One contender: its own region (a struct region is used by one thread at
 * a time), as another instance would have. */
static int race_once(const struct region_conf *conf, const char *body)
{
    struct region *r = NULL;
    if (region_new(conf, &r, NULL) < 0)
        return -ENOMEM;
    int rc = region_put_new(r, RACE_KEY, body, strlen(body));
    if (rc < 0 && rc != -EEXIST)
        fprintf(stderr, "%s\n", region_last_error(r));
    region_free(r);
    return rc;
}

static void *race_thread(void *arg)
{
    struct racer *c = arg;
    pthread_barrier_wait(c->start);
    c->rc = race_once(c->conf, c->body);
    return NULL;
}

/* Exactly one 0, the rest -EEXIST, the object is the winner's, and no
 * temp file is left behind. */
static void expect_one_winner(struct fixture *f, const int rc[RACERS])
{
    int won = -1;
    char body[32];
    for (int i = 0; i < RACERS; i++) {
        if (rc[i] == 0) {
            assert_int_equal(won, -1);
            won = i;
        } else {
            assert_int_equal(rc[i], -EEXIST);
        }
    }
    assert_int_not_equal(won, -1);
    snprintf(body, sizeof(body), "racer %d", won);
    expect_content(f->r, RACE_KEY, body);
    assert_int_equal(nftw(f->root, find_dot, 16, FTW_PHYS), 0);
}

static void test_put_new_race_threads(void **state)
{
    struct fixture *f = *state;
    struct racer c[RACERS];
    pthread_t th[RACERS];
    pthread_barrier_t start;
    int rc[RACERS];

    assert_int_equal(pthread_barrier_init(&start, NULL, RACERS), 0);
    for (int i = 0; i < RACERS; i++) {
        c[i] = (struct racer){.conf = &f->conf, .start = &start};
        snprintf(c[i].body, sizeof(c[i].body), "racer %d", i);
        assert_int_equal(pthread_create(&th[i], NULL, race_thread, &c[i]), 0);
    }
    for (int i = 0; i < RACERS; i++) {
        pthread_join(th[i], NULL);
        rc[i] = c[i].rc;
    }
    pthread_barrier_destroy(&start);
    expect_one_winner(f, rc);
}

/* Children wait on a pipe that the parent closes once all are forked, then
 * exit 0 (created), 1 (-EEXIST) or 2. */
static void test_put_new_race_processes(void **state)
{
    struct fixture *f = *state;
    int go[2], rc[RACERS];
    pid_t pid[RACERS];

    assert_int_equal(pipe(go), 0);
    for (int i = 0; i < RACERS; i++) {
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            char body[32], c;
            close(go[1]);
            while (read(go[0], &c, 1) < 0 && errno == EINTR)
                ;
            snprintf(body, sizeof(body), "racer %d", i);
            int e = race_once(&f->conf, body);
            _exit(e == 0 ? 0 : e == -EEXIST ? 1 : 2);
        }
    }
    close(go[0]);
    close(go[1]);
    for (int i = 0; i < RACERS; i++) {
        int st = 0;
        assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
        assert_true(WIFEXITED(st));
        rc[i] = WEXITSTATUS(st) == 0 ? 0 : WEXITSTATUS(st) == 1 ? -EEXIST : -EIO;
    }
    expect_one_winner(f, rc);
}

static void test_probe(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(region_probe_preconditions(f->r), 1);
    assert_int_equal(list_count(f->r, "", NULL), 0); /* the probe object is gone */
    assert_int_equal(nftw(f->root, find_dot, 16, FTW_PHYS), 0);
    assert_int_equal(region_preconditions(f->r), 1); /* the probe only reports */
}

static void test_probe_unreachable(void **state)
{
    struct fixture *f = *state;
    char path[128];
    snprintf(path, sizeof(path), "%s/not-mounted", f->root);
    struct region *r = region_at(path);
    assert_int_equal(region_probe_preconditions(r), -ENOENT);
    expect_error_has(r, path);
    region_free(r);
}

/* A one-region configuration with `preconditions = value` on line 6. */
static int parse_preconditions(const struct fixture *f, const char *value, struct config *c,
                               struct buf *err)
{
    struct buf text = BUF_INIT;
    buf_printf(&text,
               "[daemon]\nquorum = 1\n[region.a]\nkind = dir\npath = %s\n"
               "preconditions = %s\n",
               f->root, value);
    buf_reset(err);
    int rc = config_parse("t.conf", (const char *)text.data, text.len, c, err);
    buf_free(&text);
    return rc;
}

/* `preconditions = none` from a configuration file down to the region:
 * put_new says -ENOTSUP, the probe answers 0 and writes nothing, and the
 * caller cannot switch it back on. */
static void test_preconditions_none(void **state)
{
    struct fixture *f = *state;
    static struct config c;
    struct buf err = BUF_INIT;
    struct region *r = NULL;
    struct stat st;
    char probe_dir[128];

    assert_int_equal(parse_preconditions(f, "none", &c, &err), 0);
    assert_true(c.regions[0].no_preconditions);
    assert_int_equal(region_new(&c.regions[0], &r, &err), 0);
    assert_int_equal(region_preconditions(r), 0);
    assert_int_equal(region_put_new(r, "k", "x", 1), -ENOTSUP);
    assert_int_equal(region_probe_preconditions(r), 0);
    region_set_preconditions(r, 1);
    assert_int_equal(region_preconditions(r), 0);
    assert_int_equal(region_put_new(r, "k", "x", 1), -ENOTSUP);
    assert_int_equal(list_count(r, "", NULL), 0);
    snprintf(probe_dir, sizeof(probe_dir), "%s/probe", f->root);
    assert_int_equal(stat(probe_dir, &st), -1); /* the store was not touched */
    region_free(r);

    /* auto is the default, and anything else is refused with file:line:key. */
    assert_int_equal(parse_preconditions(f, "auto", &c, &err), 0);
    assert_false(c.regions[0].no_preconditions);
    assert_int_equal(parse_preconditions(f, "off", &c, &err), CKS_E_CONFIG);
    assert_string_equal(buf_str(&err), "t.conf:6: [region.a] preconditions: 'off' is not a "
                                       "preconditions mode (auto or none)");
    buf_free(&err);
}

/* ---- generic ----------------------------------------------------------- */

static void test_new_kinds(void **state)
{
    struct region_conf conf = {.kind = REGION_KIND_S3};
    struct region *r = NULL;
    struct buf err = BUF_INIT;
    snprintf(conf.name, sizeof(conf.name), "s");
    assert_int_equal(region_new(&conf, &r, &err), CKS_E_CONFIG);
    assert_null(r);
    assert_string_equal(buf_str(&err),
                        "region 's': endpoint \"\" must start with http:// or https://");
    buf_reset(&err);
    conf.kind = REGION_KIND_DIR;
    assert_int_equal(region_new(&conf, &r, &err), CKS_E_CONFIG); /* no path */
    assert_non_null(strstr(buf_str(&err), "region 's'"));
    buf_free(&err);
    region_free(NULL);
}

static void test_chunk_key(void **state)
{
    uint8_t id[HASH_LEN];
    char key[REGION_KEY_MAX];
    for (unsigned i = 0; i < HASH_LEN; i++)
        id[i] = (uint8_t)(0xab + i);
    layout_chunk(id, key);
    assert_int_equal(strlen(key), strlen("chunks/ab/") + HASH_HEX_LEN);
    assert_memory_equal(key, "chunks/ab/abacadaeafb0", 22);
}

/* ---- clock ------------------------------------------------------------- */

/* A local directory's clock is this host's own (the kernel stamps the
 * probe): they agree to within the measurement's own error, the probe is
 * gone afterwards, and it costs one request. */
/* ---- mark folders removed under writers ------------------------------- */

#define TIDY_ROUNDS 500

struct tidier {
    struct fixture *f;
    _Atomic int stop;
    int failed;
    uint64_t removed; /* times the folder was gone after its delete */
};

/* Prune's side: makes gc/m1/ hold a record, deletes it (its folder goes
 * with it when nothing else is there) and tidies, until stopped. */
static void *tidy_thread(void *arg)
{
    struct tidier *t = arg;
    struct region *r;
    struct buf err = BUF_INIT;
    char folder[128];
    struct stat st;
    snprintf(folder, sizeof(folder), "%s/gc/m1", t->f->root);
    assert_int_equal(region_new(&t->f->conf, &r, &err), 0);
    while (!t->stop && !t->failed) {
        struct region_tidy ts = {0};
        if (region_put(r, "gc/m1/done", "d", 1) < 0 || region_del(r, "gc/m1/done") < 0 ||
            region_tidy(r, 3600, &ts) < 0) {
            print_message("prune: %s\n", region_last_error(r));
            t->failed = 1;
        }
        t->removed += stat(folder, &st) < 0;
        assert_int_equal(ts.folders, 0); /* never a fresh folder */
    }
    region_free(r);
    buf_free(&err);
    return NULL;
}

/* A writer puts keep records into a mark folder that prune empties and
 * removes meanwhile: every put succeeds (region_dir.c makes a folder
 * removed under a put again), and tidy never removes a fresh folder. */
static void test_tidy_race(void **state)
{
    struct fixture *f = *state;
    struct tidier t = {.f = f};
    pthread_t th;
    int failed = 0;
    assert_int_equal(pthread_create(&th, NULL, tidy_thread, &t), 0);
    for (int k = 0; k < TIDY_ROUNDS && !failed && !t.failed; k++) {
        if (region_put(f->r, "gc/m1/keep.0", "k", 1) < 0 || region_del(f->r, "gc/m1/keep.0") < 0) {
            print_message("round %d: %s\n", k, region_last_error(f->r));
            failed = 1;
        }
    }
    t.stop = 1;
    pthread_join(th, NULL);
    assert_int_equal(failed, 0);
    assert_int_equal(t.failed, 0);
    print_message("the mark folder was removed %llu times\n", (unsigned long long)t.removed);
}

/* dirtidy.h's rules one by one: old temporaries and old empty mark
 * folders go; fresh ones, look-alikes and folders elsewhere stay. */
static void test_tidy_rules(void **state)
{
    struct fixture *f = *state;
    static const char *const gone[] = {"chunks/ab/.abcd.tmp.12.0123456789abcdef",
                                       ".ckptsync-probe.77", ".ckptsync-clock.77.0badf00d",
                                       "gc/old/"};
    static const char *const kept[] = {"chunks/ab/.x.tmp.12",
                                       ".tmp.1.0123456789abcdef",
                                       ".y.tmp.1.0123456789abcdef0",
                                       ".keep",
                                       "gc/new/",
                                       "snapshots/old/"};
    char path[512];
    struct timespec old[2] = {{.tv_sec = time(NULL) - 7200}, {.tv_sec = time(NULL) - 7200}};
    struct region_tidy st = {0};
    assert_int_equal(region_put(f->r, "chunks/ab/x", "x", 1), 0);
    for (size_t k = 0; k < 2; k++) {
        const char *const *v = k ? kept : gone;
        for (size_t i = 0; i < (k ? 6 : 4); i++) {
            snprintf(path, sizeof(path), "%s/%s", f->root, v[i]);
            if (path[strlen(path) - 1] == '/') {
                assert_int_equal(fileio_mkdir_p(path, 0755), 0);
            } else {
                FILE *fp = fopen(path, "w");
                assert_non_null(fp);
                fclose(fp);
            }
            if (strcmp(v[i], "gc/new/"))
                assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
        }
    }
    assert_int_equal(region_tidy(f->r, 3600, &st), 0);
    assert_int_equal(st.temps, 3);
    assert_int_equal(st.folders, 1);
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", f->root, gone[i]);
        assert_int_equal(access(path, F_OK), -1);
    }
    for (size_t i = 0; i < 6; i++) {
        snprintf(path, sizeof(path), "%s/%s", f->root, kept[i]);
        assert_int_equal(access(path, F_OK), 0);
    }
    expect_content(f->r, "chunks/ab/x", "x");
}

static void test_clock(void **state)
{
    struct fixture *f = *state;
    struct region_clock c;
    uint64_t req0 = f->r->requests;
    int rc = region_clock(f->r, &c);
    if (rc != 0)
        print_error("%s\n", region_last_error(f->r));
    assert_int_equal(rc, 0);
    assert_int_equal(f->r->requests, req0 + 1);
    assert_true(c.error > 0 && c.error < 1.0);
    double off = c.store - c.local;
    if (off > c.error + 0.02 || -off > c.error + 0.02)
        print_error("store %.3f local %.3f error %.3f\n", c.store, c.local, c.error);
    assert_true(off <= c.error + 0.02 && -off <= c.error + 0.02);
    assert_true(c.local > (double)time(NULL) - 5 && c.local < (double)time(NULL) + 5);
    assert_int_equal(nftw(f->root, find_dot, 16, FTW_PHYS), 0);
}

static void test_clock_missing_dir(void **state)
{
    struct fixture *f = *state;
    char path[128];
    struct region_clock c;
    snprintf(path, sizeof(path), "%s/not-mounted", f->root);
    struct region *r = region_at(path);
    assert_int_equal(region_clock(r, &c), -ENOENT);
    expect_error_has(r, "region 'b'");
    expect_error_has(r, "reading the clock");
    expect_error_has(r, path);
    region_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_replaces_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_prefixes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_temp_files_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_missing_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_missing_root, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_not_a_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_read_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_no_permission, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_new, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_new_switched_off, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_new_race_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_new_race_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_probe_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preconditions_none, setup, teardown),
        cmocka_unit_test(test_new_kinds),
        cmocka_unit_test(test_chunk_key),
        cmocka_unit_test_setup_teardown(test_tidy_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tidy_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clock_missing_dir, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test-walk.c — the snapshot file list on a real temporary tree: regular
 * files, nested and empty directories, an in-tree relative symlink (kept),
 * symlinks that leave the tree (skipped with a warning naming them), a
 * fifo (skipped), bytewise order with parents first, paths that start with
 * the root's base name, a single-file root, a relative path, a trailing
 * slash, and paths that do not exist (an error naming them); names of one
 * inode listed once as a file and then as hard links to its first name.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

#include "base/buf.h"
#include "base/log.h"
#include "service/walk.h"

struct tree {
    char top[64];   /* mkdtemp directory */
    char run[128];  /* top/run: the parent of the snapshot root */
    char root[160]; /* top/run/ckpt */
};

static void path_of(const struct tree *t, const char *rel, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", t->run, rel);
    assert_true(n > 0 && (size_t)n < cap);
}

static void make_file(const struct tree *t, const char *rel, size_t size)
{
    char p[512];
    path_of(t, rel, p, sizeof(p));
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    char block[1024];
    memset(block, 'w', sizeof(block));
    for (size_t done = 0; done < size;) {
        size_t n = size - done < sizeof(block) ? size - done : sizeof(block);
        assert_int_equal(write(fd, block, n), (ssize_t)n);
        done += n;
    }
    assert_int_equal(close(fd), 0);
}

static void make_dir(const struct tree *t, const char *rel)
{
    char p[512];
    path_of(t, rel, p, sizeof(p));
    assert_int_equal(mkdir(p, 0755), 0);
}

static void make_link(const struct tree *t, const char *rel, const char *target)
{
    char p[512];
    path_of(t, rel, p, sizeof(p));
    assert_int_equal(symlink(target, p), 0);
}

/* Created deliberately out of order: the listing must sort, not rely on
 * creation or readdir order. */
static int tree_setup(void **state)
{
    struct tree *t = calloc(1, sizeof(*t));
    if (!t)
        return -1;
    snprintf(t->top, sizeof(t->top), "%s/cks-walk.XXXXXX", "/tmp");
    if (!mkdtemp(t->top))
        return -1;
    snprintf(t->run, sizeof(t->run), "%s/run", t->top);
    snprintf(t->root, sizeof(t->root), "%s/ckpt", t->run);
    if (mkdir(t->run, 0755) < 0)
        return -1;
    make_dir(t, "ckpt");
    make_dir(t, "ckpt/sub");
    make_file(t, "ckpt/sub/z.txt", 3);
    make_file(t, "ckpt/sub.txt", 5);
    make_dir(t, "ckpt/sub/inner");
    make_file(t, "ckpt/sub/inner/deep.bin", 4096);
    make_file(t, "ckpt/b.bin", 10000);
    make_file(t, "ckpt/a.json", 17);
    make_file(t, "ckpt/Z.txt", 1);
    make_file(t, "ckpt/sub-a", 0);
    make_file(t, "ckpt/.hidden", 2);
    make_file(t, "ckpt/with space", 7);
    make_dir(t, "ckpt/empty");
    make_link(t, "ckpt/model.safetensors", "b.bin");
    make_link(t, "ckpt/sub/up", "../a.json");
    make_link(t, "ckpt/sub/dangling", "inner/not-there");
    make_link(t, "ckpt/escape", "../../outside");
    make_link(t, "ckpt/sibling", "../outside"); /* beside the root: still outside it */
    make_link(t, "ckpt/sub/escape2", "../../x");
    make_link(t, "ckpt/abs", "/etc/passwd");
    make_link(t, "ckpt/sub/sideways", "inner/../../..");
    char p[512];
    path_of(t, "ckpt/fifo", p, sizeof(p));
    if (mkfifo(p, 0644) < 0)
        return -1;
    make_file(t, "outside", 1); /* beside the root: not part of it */
    *state = t;
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int tree_teardown(void **state)
{
    struct tree *t = *state;
    int r = nftw(t->top, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(t);
    return r;
}

struct want {
    const char *path;
    enum mfile_type type;
    const char *link;
    long size; /* regular files */
};

/* Bytewise per directory ('.' < 'Z' < 'a'; "sub" < "sub-a" < "sub.txt"),
 * each directory directly followed by what it holds. */
static const struct want want_tree[] = {
    {"ckpt", MFILE_DIR, NULL, 0},
    {"ckpt/.hidden", MFILE_REG, NULL, 2},
    {"ckpt/Z.txt", MFILE_REG, NULL, 1},
    {"ckpt/a.json", MFILE_REG, NULL, 17},
    {"ckpt/b.bin", MFILE_REG, NULL, 10000},
    {"ckpt/empty", MFILE_DIR, NULL, 0},
    {"ckpt/model.safetensors", MFILE_LINK, "b.bin", 0},
    {"ckpt/sub", MFILE_DIR, NULL, 0},
    {"ckpt/sub/dangling", MFILE_LINK, "inner/not-there", 0},
    {"ckpt/sub/inner", MFILE_DIR, NULL, 0},
    {"ckpt/sub/inner/deep.bin", MFILE_REG, NULL, 4096},
    {"ckpt/sub/up", MFILE_LINK, "../a.json", 0},
    {"ckpt/sub/z.txt", MFILE_REG, NULL, 3},
    {"ckpt/sub-a", MFILE_REG, NULL, 0},
    {"ckpt/sub.txt", MFILE_REG, NULL, 5},
    {"ckpt/with space", MFILE_REG, NULL, 7},
};
#define WANT_BYTES (2 + 1 + 17 + 10000 + 4096 + 3 + 0 + 5 + 7)
#define WANT_SKIPPED 6 /* escape, sibling, escape2, abs, sideways, fifo */

static void check_list(const struct walk *w, const struct want *want, size_t n)
{
    for (size_t i = 0; i < w->n && i < n; i++) {
        const struct walk_entry *e = &w->v[i];
        if (strcmp(e->path, want[i].path) != 0)
            fail_msg("entry %zu is \"%s\", expected \"%s\"", i, e->path, want[i].path);
        assert_int_equal(e->type, want[i].type);
        if (want[i].link) {
            assert_non_null(e->link);
            assert_string_equal(e->link, want[i].link);
            assert_true(S_ISLNK(e->st.st_mode));
        } else {
            assert_null(e->link);
        }
        if (want[i].type == MFILE_REG) {
            assert_true(S_ISREG(e->st.st_mode));
            assert_int_equal(e->st.st_size, want[i].size);
        }
        if (want[i].type == MFILE_DIR)
            assert_true(S_ISDIR(e->st.st_mode));
    }
    if (w->n != n) {
        for (size_t i = 0; i < w->n; i++)
            print_message("  got %s\n", w->v[i].path);
        fail_msg("%zu entries, expected %zu", w->n, n);
    }
}

/* Runs walk_list() with stderr sent to a temp file; returns its result
 * and what was logged (caller frees). */
static int walk_logged(const char *path, struct walk *w, struct buf *err, char **ret_log)
{
    char name[] = "/tmp/cks-walk-log.XXXXXX";
    int fd = mkstemp(name);
    assert_true(fd >= 0);
    unlink(name);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, 2), 2);
    int r = walk_list(path, w, err);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    off_t len = lseek(fd, 0, SEEK_END);
    assert_true(len >= 0);
    char *log = calloc(1, (size_t)len + 1);
    assert_non_null(log);
    assert_int_equal(pread(fd, log, (size_t)len, 0), (ssize_t)len);
    close(fd);
    *ret_log = log;
    return r;
}

static void test_tree(void **state)
{
    struct tree *t = *state;
    struct walk w;
    struct buf err = BUF_INIT;
    char *log = NULL;

    assert_int_equal(walk_logged(t->root, &w, &err, &log), 0);
    assert_string_equal(w.base, t->run);
    check_list(&w, want_tree, sizeof(want_tree) / sizeof(want_tree[0]));
    assert_int_equal(w.bytes, WANT_BYTES);
    assert_int_equal(w.skipped, WANT_SKIPPED);
    /* Each skipped entry is named in a warning; nothing else is. */
    static const char *const skipped[] = {"ckpt/escape\"",       "ckpt/sibling\"",
                                          "ckpt/sub/escape2\"",  "ckpt/abs\"",
                                          "ckpt/sub/sideways\"", "ckpt/fifo\""};
    for (size_t i = 0; i < sizeof(skipped) / sizeof(skipped[0]); i++)
        if (!strstr(log, skipped[i]))
            fail_msg("no warning naming %s in:\n%s", skipped[i], log);
    assert_null(strstr(log, "model.safetensors\""));
    assert_null(strstr(log, "ckpt/sub/up\""));
    size_t lines = 0;
    for (const char *p = log; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, WANT_SKIPPED);
    free(log);
    walk_free(&w);
    assert_null(w.v);
    assert_int_equal(w.n, 0);
    walk_free(&w); /* twice is fine */
    walk_free(NULL);
    buf_free(&err);
}

/* The same tree named three other ways lists the same paths. */
static void test_other_spellings(void **state)
{
    struct tree *t = *state;
    const size_t n = sizeof(want_tree) / sizeof(want_tree[0]);
    struct buf err = BUF_INIT;
    struct walk w;
    char *log = NULL;
    char p[512];

    snprintf(p, sizeof(p), "%s/", t->root); /* trailing slash */
    assert_int_equal(walk_logged(p, &w, &err, &log), 0);
    assert_string_equal(w.base, t->run);
    check_list(&w, want_tree, n);
    walk_free(&w);
    free(log);

    snprintf(p, sizeof(p), "%s/./ckpt", t->run); /* a "." on the way */
    assert_int_equal(walk_logged(p, &w, &err, &log), 0);
    check_list(&w, want_tree, n);
    walk_free(&w);
    free(log);

    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(t->run), 0); /* relative: base "." */
    int r = walk_logged("ckpt", &w, &err, &log);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(r, 0);
    assert_string_equal(w.base, ".");
    check_list(&w, want_tree, n);
    assert_int_equal(w.skipped, WANT_SKIPPED);
    walk_free(&w);
    free(log);
    buf_free(&err);
}

static void test_single_file(void **state)
{
    struct tree *t = *state;
    struct buf err = BUF_INIT;
    struct walk w;
    char p[512];

    path_of(t, "ckpt/sub/inner/deep.bin", p, sizeof(p));
    assert_int_equal(walk_list(p, &w, &err), 0);
    static const struct want want[] = {{"deep.bin", MFILE_REG, NULL, 4096}};
    check_list(&w, want, 1);
    char base[512];
    path_of(t, "ckpt/sub/inner", base, sizeof(base));
    assert_string_equal(w.base, base);
    assert_int_equal(w.bytes, 4096);
    assert_int_equal(w.skipped, 0);
    walk_free(&w);

    /* An empty directory is a snapshot of one entry. */
    path_of(t, "ckpt/empty", p, sizeof(p));
    assert_int_equal(walk_list(p, &w, &err), 0);
    static const struct want want_empty[] = {{"empty", MFILE_DIR, NULL, 0}};
    check_list(&w, want_empty, 1);
    assert_int_equal(w.bytes, 0);
    walk_free(&w);
    buf_free(&err);
}

struct missing {
    const char *rel;   /* under the tree's run directory */
    const char *named; /* the message must contain this */
    int expect;
};

static void test_errors(void **state)
{
    struct tree *t = *state;
    static const struct missing rows[] = {
        {"nope", "run/nope\"", -ENOENT},
        {"ckpt/nope.pt", "ckpt/nope.pt\"", -ENOENT},
        {"no-dir/ckpt", "run/no-dir\"", -ENOENT},
        {"ckpt/b.bin/x", "ckpt/b.bin\"", -ENOTDIR},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct buf err = BUF_INIT;
        struct walk w;
        char p[512];
        memset(&w, 0x5a, sizeof(w));
        path_of(t, rows[i].rel, p, sizeof(p));
        int r = walk_list(p, &w, &err);
        if (r != rows[i].expect)
            fail_msg("%s: got %d, expected %d (%s)", rows[i].rel, r, rows[i].expect, buf_str(&err));
        if (!strstr(buf_str(&err), rows[i].named))
            fail_msg("%s: message \"%s\" does not name %s", rows[i].rel, buf_str(&err),
                     rows[i].named);
        buf_free(&err);
    }

    /* A root without a name of its own is refused. */
    static const char *const unnamed[] = {"/", ".", ".."};
    for (size_t i = 0; i < sizeof(unnamed) / sizeof(unnamed[0]); i++) {
        struct buf err = BUF_INIT;
        struct walk w;
        assert_int_equal(walk_list(unnamed[i], &w, &err), -EINVAL);
        assert_true(err.len > 0);
        buf_free(&err);
    }
}

/* Two inodes with three and two names in the root, one with a name
 * outside it: the first name in list order is the file, the later ones
 * hard links naming it, and each inode's bytes count once. */
static void test_hardlinks(void **state)
{
    struct tree t;
    char p[512], q[512];
    snprintf(t.top, sizeof(t.top), "/tmp/cks-walk-h.XXXXXX");
    assert_non_null(mkdtemp(t.top));
    snprintf(t.run, sizeof(t.run), "%s/run", t.top);
    assert_int_equal(mkdir(t.run, 0755), 0);
    make_dir(&t, "ckpt");
    make_dir(&t, "ckpt/sub");
    make_file(&t, "ckpt/z.bin", 5);
    make_file(&t, "ckpt/c", 3);
    make_file(&t, "ckpt/solo", 2);
    static const char *const links[][2] = {
        {"ckpt/z.bin", "ckpt/sub/b.bin"},
        {"ckpt/z.bin", "ckpt/a.bin"},
        {"ckpt/c", "ckpt/d"},
        {"ckpt/solo", "outside"},
    };
    for (size_t i = 0; i < 4; i++) {
        path_of(&t, links[i][0], p, sizeof(p));
        path_of(&t, links[i][1], q, sizeof(q));
        assert_int_equal(link(p, q), 0);
    }
    static const struct want want[] = {
        {"ckpt", MFILE_DIR, NULL, 0},
        {"ckpt/a.bin", MFILE_REG, NULL, 5},
        {"ckpt/c", MFILE_REG, NULL, 3},
        {"ckpt/d", MFILE_HARDLINK, "ckpt/c", 3},
        {"ckpt/solo", MFILE_REG, NULL, 2},
        {"ckpt/sub", MFILE_DIR, NULL, 0},
        {"ckpt/sub/b.bin", MFILE_HARDLINK, "ckpt/a.bin", 5},
        {"ckpt/z.bin", MFILE_HARDLINK, "ckpt/a.bin", 5},
    };
    struct walk w;
    struct buf err = BUF_INIT;
    path_of(&t, "ckpt", p, sizeof(p));
    assert_int_equal(walk_list(p, &w, &err), 0);
    assert_int_equal(w.n, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < w.n; i++) {
        assert_string_equal(w.v[i].path, want[i].path);
        assert_int_equal(w.v[i].type, want[i].type);
        if (want[i].link)
            assert_string_equal(w.v[i].link, want[i].link);
        else
            assert_null(w.v[i].link);
        if (want[i].type != MFILE_DIR)
            assert_int_equal(w.v[i].st.st_size, want[i].size);
    }
    assert_int_equal(w.bytes, 5 + 3 + 2);
    walk_free(&w);
    buf_free(&err);
    assert_int_equal(nftw(t.top, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

int main(void)
{
    log_init("test-walk", LOG_LVL_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree),        cmocka_unit_test(test_other_spellings),
        cmocka_unit_test(test_single_file), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_hardlinks),
    };
    return cmocka_run_group_tests(tests, tree_setup, tree_teardown);
}

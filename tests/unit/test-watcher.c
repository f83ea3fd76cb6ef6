/*
 * test-watcher.c — the recursive inotify watcher on a real scratch tree:
 * directories created after the watch (mkdir -p then a file at once),
 * renamed directories (paths follow the new name, subtrees included),
 * directories moved in and out, deletes, private ".ckptsync" names, a real
 * queue overflow followed by a rescan, and a missing root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/buf.h"
#include "daemon/watcher.h"
#include "testutil.h"

struct event {
    enum watcher_event_kind kind;
    char path[256];
    bool is_dir;
};

struct scratch {
    char dir[64];
    char outside[64]; /* a sibling directory that is not watched */
    struct watcher *w;
    struct event *ev;
    size_t n, cap;
};

static int scratch_setup(void **state)
{
    struct scratch *s = calloc(1, sizeof(*s));
    if (!s)
        return -1;
    snprintf(s->dir, sizeof(s->dir), "/tmp/test-watcher-XXXXXX");
    snprintf(s->outside, sizeof(s->outside), "/tmp/test-watcher-out-XXXXXX");
    if (!mkdtemp(s->dir) || !mkdtemp(s->outside)) {
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int scratch_teardown(void **state)
{
    struct scratch *s = *state;
    watcher_free(s->w);
    test_rm_rf(s->dir);
    test_rm_rf(s->outside);
    free(s->ev);
    free(s);
    return 0;
}

/* ---- helpers ----------------------------------------------------------- */

static void on_event(void *ud, enum watcher_event_kind kind, const char *relpath, bool is_dir)
{
    struct scratch *s = ud;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->ev = realloc(s->ev, s->cap * sizeof(*s->ev));
        assert_non_null(s->ev);
    }
    struct event *e = &s->ev[s->n++];
    e->kind = kind;
    e->is_dir = is_dir;
    assert_true(kind == WATCH_OVERFLOW || relpath[0] != '\0');
    assert_true(relpath[0] != '/');
    snprintf(e->path, sizeof(e->path), "%s", relpath);
}

static void path_in(const char *dir, const char *name, char *out, size_t size)
{
    int n = snprintf(out, size, "%s/%s", dir, name);
    assert_true(n > 0 && (size_t)n < size);
}

static void mkdir_in(const struct scratch *s, const char *name)
{
    char path[512];
    path_in(s->dir, name, path, sizeof(path));
    assert_int_equal(mkdir(path, 0755), 0);
}

static void write_in(const char *dir, const char *name, const char *text)
{
    char path[512];
    path_in(dir, name, path, sizeof(path));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void rename_in(const char *from_dir, const char *from, const char *to_dir, const char *to)
{
    char a[512], b[512];
    path_in(from_dir, from, a, sizeof(a));
    path_in(to_dir, to, b, sizeof(b));
    assert_int_equal(rename(a, b), 0);
}

/* Forgets what was recorded, then collects what the kernel queued. */
static int drain(struct scratch *s)
{
    s->n = 0;
    return watcher_read(s->w, on_event, s);
}

static bool seen(const struct scratch *s, enum watcher_event_kind kind, const char *path,
                 bool is_dir)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->ev[i].kind == kind && !strcmp(s->ev[i].path, path) && s->ev[i].is_dir == is_dir)
            return true;
    return false;
}

static bool seen_path(const struct scratch *s, const char *prefix)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strncmp(s->ev[i].path, prefix, strlen(prefix)))
            return true;
    return false;
}

static void start(struct scratch *s)
{
    struct buf err = BUF_INIT;
    assert_int_equal(watcher_new(s->dir, &s->w, &err), 0);
    assert_true(watcher_fd(s->w) >= 0);
    buf_free(&err);
}

/* ---- tests ------------------------------------------------------------- */

static void test_root_missing(void **state)
{
    struct scratch *s = *state;
    struct watcher *w = NULL;
    struct buf err = BUF_INIT;
    char path[512];

    path_in(s->dir, "nope", path, sizeof(path));
    assert_int_equal(watcher_new(path, &w, &err), -ENOENT);
    assert_null(w);
    assert_non_null(strstr(buf_str(&err), path));
    assert_non_null(strstr(buf_str(&err), "No such file"));

    buf_reset(&err);
    write_in(s->dir, "file", "x");
    path_in(s->dir, "file", path, sizeof(path));
    assert_int_equal(watcher_new(path, &w, &err), -ENOTDIR);
    assert_non_null(strstr(buf_str(&err), path));
    assert_non_null(strstr(buf_str(&err), "not a directory"));
    buf_free(&err);
    watcher_free(NULL);
}

static void test_existing_tree_watched(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, "run1");
    mkdir_in(s, "run1/checkpoint-10");
    start(s);
    assert_int_equal(watcher_count(s->w), 3);

    write_in(s->dir, "run1/checkpoint-10/model.bin", "weights");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_CREATE, "run1/checkpoint-10/model.bin", false));
    assert_true(seen(s, WATCH_WRITE, "run1/checkpoint-10/model.bin", false));
    assert_true(seen(s, WATCH_CLOSE_WRITE, "run1/checkpoint-10/model.bin", false));
    assert_int_equal(drain(s), 0);
}

static void test_mkdir_p_then_file_at_once(void **state)
{
    struct scratch *s = *state;
    start(s);

    /* Nothing is read until all of it exists: only the scans can see it. */
    mkdir_in(s, "a");
    mkdir_in(s, "a/b");
    mkdir_in(s, "a/b/c");
    write_in(s->dir, "a/b/c/f", "data");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_CREATE, "a", true));
    assert_true(seen(s, WATCH_CREATE, "a/b", true));
    assert_true(seen(s, WATCH_CREATE, "a/b/c", true));
    assert_true(seen(s, WATCH_CREATE, "a/b/c/f", false));
    assert_int_equal(watcher_count(s->w), 4);

    /* The new directories are watched from now on. */
    write_in(s->dir, "a/b/c/g", "more");
    mkdir_in(s, "a/b/c/d");
    write_in(s->dir, "a/b/c/d/h", "deeper");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_CLOSE_WRITE, "a/b/c/g", false));
    assert_true(seen(s, WATCH_CREATE, "a/b/c/d", true));
    assert_true(seen(s, WATCH_CREATE, "a/b/c/d/h", false));
    assert_int_equal(drain(s), 0);
    write_in(s->dir, "a/b/c/d/h", "again");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_CLOSE_WRITE, "a/b/c/d/h", false));
}

static void test_rename_dir(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, "run");
    mkdir_in(s, "run/tmp-10");
    mkdir_in(s, "run/tmp-10/sub");
    start(s);
    size_t watches = watcher_count(s->w);

    rename_in(s->dir, "run/tmp-10", s->dir, "run/checkpoint-10");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_DELETE, "run/tmp-10", true));
    assert_true(seen(s, WATCH_MOVED_IN, "run/checkpoint-10", true));
    assert_true(seen(s, WATCH_MOVED_IN, "run/checkpoint-10/sub", true));
    assert_int_equal(watcher_count(s->w), watches);

    write_in(s->dir, "run/checkpoint-10/model.bin", "w");
    write_in(s->dir, "run/checkpoint-10/sub/shard", "s");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_CLOSE_WRITE, "run/checkpoint-10/model.bin", false));
    assert_true(seen(s, WATCH_CLOSE_WRITE, "run/checkpoint-10/sub/shard", false));
    assert_false(seen_path(s, "run/tmp-10"));

    /* Renamed and written before the watcher reads: the new name still wins. */
    rename_in(s->dir, "run/checkpoint-10", s->dir, "run/checkpoint-20");
    write_in(s->dir, "run/checkpoint-20/sub/later", "l");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_MOVED_IN, "run/checkpoint-20/sub/later", false) ||
                seen(s, WATCH_CLOSE_WRITE, "run/checkpoint-20/sub/later", false));
    assert_false(seen_path(s, "run/checkpoint-10/"));
    assert_int_equal(watcher_count(s->w), watches);
}

static void test_move_in_and_out(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, "run");
    start(s);
    size_t watches = watcher_count(s->w);

    /* A checkpoint prepared elsewhere and renamed into place. */
    char ckpt[512];
    path_in(s->outside, "ckpt", ckpt, sizeof(ckpt));
    assert_int_equal(mkdir(ckpt, 0755), 0);
    write_in(ckpt, "trainer_state.json", "{}");
    rename_in(s->outside, "ckpt", s->dir, "run/checkpoint-5");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_MOVED_IN, "run/checkpoint-5", true));
    assert_true(seen(s, WATCH_MOVED_IN, "run/checkpoint-5/trainer_state.json", false));
    assert_int_equal(watcher_count(s->w), watches + 1);

    /* Moved out: reported as gone, no longer watched. */
    rename_in(s->dir, "run/checkpoint-5", s->outside, "gone");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_DELETE, "run/checkpoint-5", true));
    assert_int_equal(watcher_count(s->w), watches);
    write_in(s->outside, "gone/x", "x");
    assert_int_equal(drain(s), 0);

    /* Files moved in and out. */
    write_in(s->outside, "step_1.pt", "x");
    rename_in(s->outside, "step_1.pt", s->dir, "run/step_1.pt");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_MOVED_IN, "run/step_1.pt", false));
    rename_in(s->dir, "run/step_1.pt", s->outside, "step_1.pt");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_DELETE, "run/step_1.pt", false));
}

static void test_delete(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, "run");
    mkdir_in(s, "run/old");
    write_in(s->dir, "run/old/f", "x");
    start(s);
    assert_int_equal(watcher_count(s->w), 3);

    char path[512];
    path_in(s->dir, "run/old/f", path, sizeof(path));
    assert_int_equal(unlink(path), 0);
    path_in(s->dir, "run/old", path, sizeof(path));
    assert_int_equal(rmdir(path), 0);
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_DELETE, "run/old/f", false));
    assert_true(seen(s, WATCH_DELETE, "run/old", true));
    assert_int_equal(watcher_count(s->w), 2);
}

static void test_private_names_ignored(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, ".ckptsync-pins");
    start(s);
    assert_int_equal(watcher_count(s->w), 1);

    mkdir_in(s, ".ckptsync-pins/p1");
    write_in(s->dir, ".ckptsync-pins/p1/f", "x");
    mkdir_in(s, "run");
    write_in(s->dir, "run/.ckptsync-restore.1", "x");
    assert_true(drain(s) > 0);
    assert_false(seen_path(s, ".ckptsync"));
    assert_false(seen_path(s, "run/.ckptsync"));
    assert_true(seen(s, WATCH_CREATE, "run", true));

    s->n = 0;
    assert_int_equal(watcher_rescan(s->w, on_event, s), 1);
    assert_true(seen(s, WATCH_CREATE, "run", true));
}

static void test_rescan_reports_everything(void **state)
{
    struct scratch *s = *state;
    start(s);
    mkdir_in(s, "r1");
    mkdir_in(s, "r1/c1");
    write_in(s->dir, "r1/c1/a", "a");
    write_in(s->dir, "r1/c1/b", "b");
    write_in(s->dir, "top.txt", "t");
    assert_true(drain(s) > 0);

    s->n = 0;
    assert_int_equal(watcher_rescan(s->w, on_event, s), 5);
    assert_int_equal(s->n, 5);
    assert_true(seen(s, WATCH_CREATE, "r1", true));
    assert_true(seen(s, WATCH_CREATE, "r1/c1", true));
    assert_true(seen(s, WATCH_CREATE, "r1/c1/a", false));
    assert_true(seen(s, WATCH_CREATE, "r1/c1/b", false));
    assert_true(seen(s, WATCH_CREATE, "top.txt", false));
    assert_int_equal(watcher_count(s->w), 3);
}

static void rescan_from_callback(void *ud, enum watcher_event_kind kind, const char *relpath,
                                 bool is_dir)
{
    struct scratch *s = ud;
    assert_int_equal(watcher_rescan(s->w, on_event, s), -EBUSY);
    assert_int_equal(watcher_read(s->w, on_event, s), -EBUSY);
}

static void test_no_reentry(void **state)
{
    struct scratch *s = *state;
    start(s);
    write_in(s->dir, "f", "x");
    assert_true(watcher_read(s->w, rescan_from_callback, s) > 0);
}

/* A real overflow: more events than the kernel queues, then a rescan. */
static void test_overflow_then_rescan(void **state)
{
    struct scratch *s = *state;
    long max = 0;
    FILE *f = fopen("/proc/sys/fs/inotify/max_queued_events", "r");
    if (!f || fscanf(f, "%ld", &max) != 1 || max <= 0 || max > 200000) {
        if (f)
            fclose(f);
        print_message("skipped: cannot read a usable fs.inotify.max_queued_events\n");
        skip();
    }
    fclose(f);
    mkdir_in(s, "run");
    mkdir_in(s, "run/c");
    start(s);

    long files = max / 2 + 64; /* each file: IN_CREATE + IN_CLOSE_WRITE */
    for (long i = 0; i < files; i++) {
        char name[64];
        snprintf(name, sizeof(name), "run/c/f%ld", i);
        write_in(s->dir, name, "");
    }
    s->n = 0;
    int r;
    while ((r = watcher_read(s->w, on_event, s)) > 0)
        ;
    assert_int_equal(r, -EOVERFLOW);
    assert_true(s->n > 0);
    assert_int_equal(s->ev[s->n - 1].kind, WATCH_OVERFLOW);
    assert_string_equal(s->ev[s->n - 1].path, "");

    s->n = 0;
    assert_int_equal(watcher_rescan(s->w, on_event, s), (int)files + 2);
    assert_true(seen(s, WATCH_CREATE, "run/c/f0", false));
    char last[64];
    snprintf(last, sizeof(last), "run/c/f%ld", files - 1);
    assert_true(seen(s, WATCH_CREATE, last, false));

    /* Still watching after the rescan. */
    assert_true(drain(s) >= 0);
    write_in(s->dir, "run/c/new", "n");
    assert_true(drain(s) > 0);
    assert_true(seen(s, WATCH_CLOSE_WRITE, "run/c/new", false));
}

/* After events were lost, a rescan forgets directories that went away. */
static void test_rescan_forgets_stale(void **state)
{
    struct scratch *s = *state;
    mkdir_in(s, "run");
    mkdir_in(s, "run/a");
    start(s);
    assert_int_equal(watcher_count(s->w), 3);

    rename_in(s->dir, "run/a", s->outside, "a");
    mkdir_in(s, "run/b");
    s->n = 0;
    assert_true(watcher_rescan(s->w, on_event, s) >= 0);
    assert_true(seen(s, WATCH_CREATE, "run/b", true));
    assert_false(seen_path(s, "run/a"));
    assert_int_equal(watcher_count(s->w), 3);
    write_in(s->outside, "a/x", "x");
    assert_true(drain(s) >= 0);
    assert_false(seen_path(s, "run/a/"));
}

/* Directories below the root (relative paths), parents first. */
static size_t list_dirs(const char *root, const char *rel, char (*out)[256], size_t n, size_t max)
{
    char path[512];
    if (rel[0])
        path_in(root, rel, path, sizeof(path));
    else
        snprintf(path, sizeof(path), "%s", root);
    DIR *d = opendir(path);
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d)) && n < max) {
        if (e->d_type != DT_DIR || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int l = snprintf(out[n], sizeof(out[n]), "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        assert_true(l > 0 && (size_t)l < sizeof(out[n]));
        n = list_dirs(root, out[n], out, n + 1, max);
    }
    closedir(d);
    return n;
}

/* Random mkdirs and renames of whole subtrees, read at random points. */
static void test_rename_storm(void **state)
{
    struct scratch *s = *state;
    char(*dirs)[256] = calloc(512, sizeof(*dirs));
    uint32_t seed = 12345;
    assert_non_null(dirs);
    start(s);

    for (int step = 0; step < 300; step++) {
        size_t n = list_dirs(s->dir, "", dirs, 0, 512);
        seed = seed * 1103515245u + 12345u;
        size_t pick = (seed >> 8) % (n + 1);
        const char *parent = pick < n ? dirs[pick] : "";
        char name[256], to[256];
        snprintf(name, sizeof(name), "%s%sd%d", parent, parent[0] ? "/" : "", step);
        if (n < 3 || (seed >> 20) % 3 == 0 || strlen(name) > 150) {
            if (strlen(name) <= 150)
                mkdir_in(s, name);
        } else {
            const char *from = dirs[(seed >> 4) % n];
            const char *under = dirs[(seed >> 12) % n];
            size_t fl = strlen(from);
            bool inside = !strncmp(under, from, fl) && (under[fl] == '/' || !under[fl]);
            if ((seed >> 24) % 4 == 0 || inside)
                under = ""; /* to the top level */
            snprintf(to, sizeof(to), "%s%sm%d", under, under[0] ? "/" : "", step);
            if (strlen(to) <= 150)
                rename_in(s->dir, from, s->dir, to);
        }
        if (seed % 2)
            assert_true(drain(s) >= 0);
    }
    assert_true(drain(s) >= 0);

    size_t n = list_dirs(s->dir, "", dirs, 0, 512);
    assert_int_equal(watcher_count(s->w), n + 1);
    for (size_t i = 0; i < n; i++) {
        char probe[300];
        snprintf(probe, sizeof(probe), "%s/probe", dirs[i]);
        write_in(s->dir, probe, "p");
    }
    assert_true(drain(s) > 0);
    for (size_t i = 0; i < n; i++) {
        char probe[300];
        snprintf(probe, sizeof(probe), "%s/probe", dirs[i]);
        if (!seen(s, WATCH_CLOSE_WRITE, probe, false))
            fail_msg("no event for \"%s\"", probe);
    }
    assert_int_equal(s->n, 3 * n); /* create, write, close for each; nothing stale */
    free(dirs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_root_missing, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_existing_tree_watched, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_mkdir_p_then_file_at_once, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_rename_dir, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_move_in_and_out, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_delete, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_private_names_ignored, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_rescan_reports_everything, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_no_reentry, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_overflow_then_rescan, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_rescan_forgets_stale, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_rename_storm, scratch_setup, scratch_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

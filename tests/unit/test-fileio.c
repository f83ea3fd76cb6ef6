/*
 * test-fileio.c — atomic writes (content, mode, replacement, no temp file
 * left on success or failure), create-once writes (a second writer gets
 * -EEXIST and changes nothing, racing writers have one winner), bounded
 * reads, mkdir -p, the I/O loops.
 * Everything happens in a fresh directory under /tmp.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "testutil.h"

struct scratch {
    char dir[64];
};

static int scratch_setup(void **state)
{
    struct scratch *s = calloc(1, sizeof(*s));
    if (!s)
        return -1;
    snprintf(s->dir, sizeof(s->dir), "/tmp/test-fileio-XXXXXX");
    if (!mkdtemp(s->dir)) {
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int scratch_teardown(void **state)
{
    struct scratch *s = *state;
    test_rm_rf(s->dir);
    free(s);
    return 0;
}

static void path_in(const struct scratch *s, const char *name, char *out, size_t size)
{
    int n = snprintf(out, size, "%s/%s", s->dir, name);
    assert_true(n > 0 && (size_t)n < size);
}

/* Number of entries in dir other than . and .. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void assert_file(const char *path, const char *content, mode_t mode)
{
    uint8_t *data = NULL;
    size_t len = 0;
    struct stat st;
    assert_int_equal(fileio_read_all(path, 1 << 20, &data, &len), 0);
    assert_int_equal(len, strlen(content));
    assert_memory_equal(data, content, len);
    assert_int_equal(data[len], 0); /* NUL-terminated for text use */
    free(data);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, mode);
}

static void test_write_atomic(void **state)
{
    struct scratch *s = *state;
    char path[512];
    path_in(s, "manifest", path, sizeof(path));

    mode_t old = umask(077); /* the mode given is the mode we get */
    assert_int_equal(fileio_write_atomic(path, "hello", 5, 0644), 0);
    umask(old);
    assert_file(path, "hello", 0644);
    assert_int_equal(count_entries(s->dir), 1);

    assert_int_equal(fileio_write_atomic(path, "replaced!", 9, 0600), 0);
    assert_file(path, "replaced!", 0600);
    assert_int_equal(count_entries(s->dir), 1);

    assert_int_equal(fileio_write_atomic(path, "", 0, 0600), 0);
    assert_file(path, "", 0600);

    /* A name long enough that the temp name must be shortened. */
    char longname[256];
    memset(longname, 'x', 250);
    longname[250] = 0;
    path_in(s, longname, path, sizeof(path));
    assert_int_equal(fileio_write_atomic(path, "x", 1, 0644), 0);
    assert_file(path, "x", 0644);
    assert_int_equal(count_entries(s->dir), 2);
}

static void test_write_atomic_at(void **state)
{
    struct scratch *s = *state;
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    assert_int_equal(fileio_write_atomic_at(dfd, "ref", "abc", 3, 0640), 0);
    assert_int_equal(fileio_write_atomic_at(dfd, "a/b", "x", 1, 0640), -EINVAL);
    assert_int_equal(fileio_write_atomic_at(dfd, "", "x", 1, 0640), -EINVAL);
    assert_int_equal(fileio_write_atomic_at(dfd, "..", "x", 1, 0640), -EINVAL);
    close(dfd);
    char path[512];
    path_in(s, "ref", path, sizeof(path));
    assert_file(path, "abc", 0640);
    assert_int_equal(count_entries(s->dir), 1);
}

/* Create-once: the name is made, or -EEXIST and nothing changes. */
static void test_write_new_at(void **state)
{
    struct scratch *s = *state;
    char path[512];
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);

    mode_t old = umask(077); /* the mode given is the mode we get */
    assert_int_equal(fileio_write_new_at(dfd, "commit", "first", 5, 0644), 0);
    umask(old);
    path_in(s, "commit", path, sizeof(path));
    assert_file(path, "first", 0644);
    assert_int_equal(count_entries(s->dir), 1);

    /* a second writer of the same name loses, whatever it brings */
    assert_int_equal(fileio_write_new_at(dfd, "commit", "second", 6, 0600), -EEXIST);
    assert_int_equal(fileio_write_new_at(dfd, "commit", "", 0, 0644), -EEXIST);
    assert_int_equal(fileio_write_new_at(dfd, "commit", "first", 5, 0644), -EEXIST);
    assert_file(path, "first", 0644);
    assert_int_equal(count_entries(s->dir), 1); /* no temp file left */

    /* anything by that name counts: a directory, a dangling symlink */
    path_in(s, "dir", path, sizeof(path));
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(fileio_write_new_at(dfd, "dir", "x", 1, 0644), -EEXIST);
    path_in(s, "link", path, sizeof(path));
    assert_int_equal(symlink("target", path), 0);
    assert_int_equal(fileio_write_new_at(dfd, "link", "x", 1, 0644), -EEXIST);
    path_in(s, "target", path, sizeof(path));
    assert_int_equal(access(path, F_OK), -1); /* not followed */
    assert_int_equal(count_entries(s->dir), 3);

    /* an empty file, a long name (the temp name is shortened) */
    assert_int_equal(fileio_write_new_at(dfd, "empty", "", 0, 0640), 0);
    path_in(s, "empty", path, sizeof(path));
    assert_file(path, "", 0640);
    char longname[256];
    memset(longname, 'n', 250);
    longname[250] = 0;
    assert_int_equal(fileio_write_new_at(dfd, longname, "x", 1, 0644), 0);
    assert_int_equal(fileio_write_new_at(dfd, longname, "y", 1, 0644), -EEXIST);
    path_in(s, longname, path, sizeof(path));
    assert_file(path, "x", 0644);
    assert_int_equal(count_entries(s->dir), 5);

    /* names that are not one component */
    static const char *const bad[] = {"a/b", "", ".", "..", "/abs"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (fileio_write_new_at(dfd, bad[i], "x", 1, 0644) != -EINVAL)
            fail_msg("name \"%s\" accepted", bad[i]);
    assert_int_equal(count_entries(s->dir), 5);
    close(dfd);

    /* a directory fd that is not one; a directory removed under us */
    assert_int_equal(fileio_write_new_at(-1, "x", "x", 1, 0644), -EBADF);
    path_in(s, "gone", path, sizeof(path));
    assert_int_equal(mkdir(path, 0755), 0);
    int gfd = open(path, O_RDONLY | O_DIRECTORY);
    assert_true(gfd >= 0);
    assert_int_equal(rmdir(path), 0);
    assert_int_equal(fileio_write_new_at(gfd, "x", "x", 1, 0644), -ENOENT);
    close(gfd);
    assert_int_equal(count_entries(s->dir), 5);
}

/* Many writers race for one name: exactly one wins, the file is its
 * bytes, and no temp file is left. */
static void test_write_new_at_race(void **state)
{
    struct scratch *s = *state;
    enum { WRITERS = 8, ROUNDS = 20 };
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    for (int round = 0; round < ROUNDS; round++) {
        char name[32];
        pid_t pids[WRITERS];
        snprintf(name, sizeof(name), "rec%d", round);
        for (int w = 0; w < WRITERS; w++) {
            pids[w] = fork();
            assert_true(pids[w] >= 0);
            if (pids[w] == 0) {
                char body[32];
                snprintf(body, sizeof(body), "writer %d", w);
                int r = fileio_write_new_at(dfd, name, body, strlen(body), 0644);
                _exit(r == 0 ? 0 : r == -EEXIST ? 1 : 2);
            }
        }
        int winners = 0, winner = -1;
        for (int w = 0; w < WRITERS; w++) {
            int st;
            assert_int_equal(waitpid(pids[w], &st, 0), pids[w]);
            assert_true(WIFEXITED(st));
            assert_true(WEXITSTATUS(st) <= 1);
            if (WEXITSTATUS(st) == 0) {
                winners++;
                winner = w;
            }
        }
        assert_int_equal(winners, 1);
        char path[512], want[32];
        path_in(s, name, path, sizeof(path));
        snprintf(want, sizeof(want), "writer %d", winner);
        assert_file(path, want, 0644);
    }
    close(dfd);
    assert_int_equal(count_entries(s->dir), ROUNDS);
}

static void test_write_atomic_failures(void **state)
{
    struct scratch *s = *state;
    char path[512];

    path_in(s, "missing/file", path, sizeof(path));
    assert_int_equal(fileio_write_atomic(path, "x", 1, 0644), -ENOENT);
    assert_int_equal(count_entries(s->dir), 0);

    path_in(s, "dir/", path, sizeof(path));
    assert_int_equal(fileio_write_atomic(path, "x", 1, 0644), -EINVAL);

    /* The target is a directory: rename fails, the temp file is removed. */
    path_in(s, "sub", path, sizeof(path));
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(fileio_write_atomic(path, "x", 1, 0644), -EISDIR);
    assert_int_equal(count_entries(s->dir), 1);
}

static void test_write_readonly_dir(void **state)
{
    struct scratch *s = *state;
    char dir[512], path[600];

    if (geteuid() == 0) {
        print_message("skipped: running as root, which ignores directory permissions\n");
        skip();
    }
    path_in(s, "ro", dir, sizeof(dir));
    assert_int_equal(mkdir(dir, 0555), 0);
    int n = snprintf(path, sizeof(path), "%s/file", dir);
    assert_true(n > 0 && (size_t)n < sizeof(path));
    assert_int_equal(fileio_write_atomic(path, "x", 1, 0644), -EACCES);
    assert_int_equal(count_entries(dir), 0);
}

static void test_read_all(void **state)
{
    struct scratch *s = *state;
    char path[512];
    uint8_t *data = NULL;
    size_t len = 0;

    path_in(s, "f", path, sizeof(path));
    assert_int_equal(fileio_write_atomic(path, "0123456789", 10, 0644), 0);
    assert_int_equal(fileio_read_all(path, 10, &data, &len), 0);
    assert_int_equal(len, 10);
    free(data);
    data = NULL;
    assert_int_equal(fileio_read_all(path, 9, &data, &len), CKS_E_LIMIT);
    assert_null(data);
    assert_int_equal(fileio_read_all(path, 0, &data, &len), CKS_E_LIMIT);

    path_in(s, "nope", path, sizeof(path));
    assert_int_equal(fileio_read_all(path, 10, &data, &len), -ENOENT);
    assert_int_equal(fileio_read_all(s->dir, 10, &data, &len), -EISDIR);

    /* A file whose size stat() cannot tell: the bound still holds. */
    assert_int_equal(fileio_read_all("/proc/self/status", 16, &data, &len), CKS_E_LIMIT);
    assert_int_equal(fileio_read_all("/proc/self/status", 1 << 20, &data, &len), 0);
    assert_true(len > 16);
    assert_non_null(memmem(data, len, "Name:", 5));
    free(data);

    /* Empty file. */
    path_in(s, "empty", path, sizeof(path));
    assert_int_equal(fileio_write_atomic(path, "", 0, 0644), 0);
    assert_int_equal(fileio_read_all(path, 0, &data, &len), 0);
    assert_int_equal(len, 0);
    free(data);
}

static void test_mkdir_p(void **state)
{
    struct scratch *s = *state;
    char path[512];
    struct stat st;

    path_in(s, "a/b//c/d/", path, sizeof(path));
    assert_int_equal(fileio_mkdir_p(path, 0750), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(fileio_mkdir_p(path, 0750), 0); /* exists: fine */
    path_in(s, "a/b", path, sizeof(path));
    assert_int_equal(fileio_mkdir_p(path, 0750), 0);

    path_in(s, "a/file", path, sizeof(path));
    assert_int_equal(fileio_write_atomic(path, "x", 1, 0644), 0);
    assert_int_equal(fileio_mkdir_p(path, 0750), -ENOTDIR);
    path_in(s, "a/file/sub", path, sizeof(path));
    assert_int_equal(fileio_mkdir_p(path, 0750), -ENOTDIR);
    assert_int_equal(fileio_mkdir_p("", 0750), -ENOENT);
    assert_int_equal(fileio_mkdir_p("/", 0750), 0);

    assert_int_equal(fileio_fsync_dir(s->dir), 0);
    assert_int_equal(fileio_fsync_dir(path), -ENOTDIR);
}

static void test_io_loops(void **state)
{
    struct scratch *s = *state;
    char path[512];
    char buf[64];

    path_in(s, "io", path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fileio_write_full(fd, "hello world", 11), 0);
    assert_int_equal(fileio_pwrite_full(fd, "W", 1, 6), 0);
    assert_int_equal(fileio_pwrite_full(fd, "!", 1, 20), 0); /* leaves a hole */
    assert_int_equal(fileio_pwrite_full(fd, "x", 1, -1), -EINVAL);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    assert_int_equal(fileio_read_full(fd, buf, sizeof(buf)), 21); /* short only at EOF */
    assert_memory_equal(buf, "hello World", 11);
    assert_int_equal(buf[15], 0);
    assert_int_equal(buf[20], '!');
    assert_int_equal(fileio_read_full(fd, buf, sizeof(buf)), 0);
    close(fd);
    assert_int_equal(fileio_write_full(fd, "x", 1), -EBADF);
    assert_int_equal(fileio_read_full(fd, buf, 1), -EBADF);

    /* A pipe delivers in pieces; read_full gathers them. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(fileio_write_full(p[1], "ab", 2), 0);
    assert_int_equal(fileio_write_full(p[1], "cd", 2), 0);
    close(p[1]);
    assert_int_equal(fileio_read_full(p[0], buf, 10), 4);
    assert_memory_equal(buf, "abcd", 4);
    close(p[0]);
}

/* Large writes go through a pipe (vmsplice + splice): the bytes land
 * whole, at the offset asked, the caller's buffer is free at return, a
 * file that cannot splice (O_APPEND, a pipe) still gets everything, and a
 * failure of the file (RLIMIT_FSIZE here, as ENOSPC would) is an error,
 * never a short success. */
static void test_large_writes(void **state)
{
    struct scratch *s = *state;
    char path[512];
    const size_t n = (3u << 20) + 17; /* several pipe loads, not page-aligned */
    uint8_t *data = malloc(n), *back = malloc(n + 16);
    assert_non_null(data);
    assert_non_null(back);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);

    path_in(s, "big", path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fileio_write_full(fd, "head", 4), 0);
    assert_int_equal(fileio_write_full(fd, data + 1, n - 1), 0); /* unaligned source */
    assert_int_equal(lseek(fd, 0, SEEK_CUR), (off_t)(n + 3));    /* the file offset moved */
    assert_int_equal(fileio_pwrite_full(fd, data, n, 8u << 20), 0);
    memset(data, 0xee, 1 << 16); /* reused at once: what was written stays */
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, (off_t)((8u << 20) + n));
    assert_int_equal(pread(fd, back, 4, 0), 4);
    assert_memory_equal(back, "head", 4);
    for (size_t i = 0; i < 1 << 16; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    assert_int_equal(pread(fd, back, n - 1, 4), (ssize_t)(n - 1));
    assert_memory_equal(back, data + 1, n - 1);
    assert_int_equal(pread(fd, back, n, 8u << 20), (ssize_t)n);
    assert_memory_equal(back, data, n);
    close(fd);

    /* O_APPEND: splice may refuse; the rest goes by write */
    path_in(s, "append", path, sizeof(path));
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_APPEND, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fileio_write_full(fd, "x", 1), 0);
    assert_int_equal(fileio_write_full(fd, data, n), 0);
    assert_int_equal(pread(fd, back, n + 16, 0), (ssize_t)(n + 1));
    assert_int_equal(back[0], 'x');
    assert_memory_equal(back + 1, data, n);
    close(fd);

    /* a pipe, read by a child while we write */
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[1]);
        ssize_t got = fileio_read_full(p[0], back, n + 16);
        _exit(got == (ssize_t)n && memcmp(back, data, n) == 0 ? 0 : 1);
    }
    close(p[0]);
    assert_int_equal(fileio_write_full(p[1], data, n), 0);
    close(p[1]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* the file refuses more: an error, from the splice path too */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {256 << 10, 256 << 10};
        signal(SIGXFSZ, SIG_IGN);
        char lpath[512];
        path_in(s, "limited", lpath, sizeof(lpath));
        int lfd = open(lpath, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (lfd < 0 || setrlimit(RLIMIT_FSIZE, &rl) < 0)
            _exit(2);
        int e1 = fileio_write_full(lfd, data, 1 << 20);
        int e2 = fileio_pwrite_full(lfd, data, 1 << 20, 0);
        _exit(e1 == -EFBIG && e2 == -EFBIG ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    free(data);
    free(back);
}

/* Large page-aligned objects go around the page cache (O_DIRECT) with
 * their last partial block buffered: whole and exact, by both the atomic
 * and the create-once writer, whatever the length's remainder; nothing but
 * the object is left in the folder; a file the kernel refuses to grow is
 * an error and leaves no temp file. */
static void test_direct_writes(void **state)
{
    struct scratch *s = *state;
    char path[512];
    const size_t sizes[] = {1u << 20, (3u << 20) + 123, (2u << 20) + 4095};
    const size_t cap = 4u << 20;
    uint8_t *data = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *back = malloc(cap);
    assert_true(data != MAP_FAILED);
    assert_non_null(back);
    for (size_t i = 0; i < cap; i++)
        data[i] = (uint8_t)(i * 40503u >> 7);
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        char name[32];
        snprintf(name, sizeof(name), "obj%zu", k);
        if (k % 2)
            assert_int_equal(fileio_write_new_at(dfd, name, data, sizes[k], 0644), 0);
        else
            assert_int_equal(fileio_write_atomic_at(dfd, name, data, sizes[k], 0644), 0);
        path_in(s, name, path, sizeof(path));
        int fd = open(path, O_RDONLY);
        assert_true(fd >= 0);
        assert_int_equal(fileio_read_full(fd, back, cap), (ssize_t)sizes[k]);
        assert_memory_equal(back, data, sizes[k]);
        close(fd);
    }
    assert_int_equal(count_entries(s->dir), 3);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {512 << 10, 512 << 10};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
            _exit(2);
        int e = fileio_write_atomic_at(dfd, "toobig", data, 3u << 20, 0644);
        _exit(e == -EFBIG ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(count_entries(s->dir), 3); /* no temp file left */
    close(dfd);
    munmap(data, cap);
    free(back);
}

static void test_abspath(void **state)
{
    char out[PATH_MAX], cwd[PATH_MAX], want[PATH_MAX + 8];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(fileio_abspath("/a/b", out, sizeof(out)), 0);
    assert_string_equal(out, "/a/b");
    assert_int_equal(fileio_abspath("st", out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "%s/st", strcmp(cwd, "/") ? cwd : "");
    assert_string_equal(out, want);
    assert_int_equal(fileio_abspath("/a/b", out, 4), -ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_atomic, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_write_atomic_at, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_write_new_at, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_write_new_at_race, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_write_atomic_failures, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_write_readonly_dir, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_read_all, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_mkdir_p, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_io_loops, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_large_writes, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_direct_writes, scratch_setup, scratch_teardown),
        cmocka_unit_test(test_abspath),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

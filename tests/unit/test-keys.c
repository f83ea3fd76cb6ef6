/*
 * test-keys.c — key files and passphrases from real files in a scratch
 * directory: both key-file spellings, the permission, owner and type
 * checks with their messages, passphrase files and CKPTSYNC_PASSPHRASE,
 * and fresh master keys.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "engine/hash.h"
#include "engine/keyslot.h"
#include "service/keys.h"
#include "testutil.h"

struct scratch {
    char dir[64];
    char path[128];
};

static int scratch_setup(void **state)
{
    struct scratch *s = calloc(1, sizeof(*s));
    if (!s)
        return -1;
    snprintf(s->dir, sizeof(s->dir), "/tmp/test-keys-XXXXXX");
    if (!mkdtemp(s->dir)) {
        free(s);
        return -1;
    }
    unsetenv(KEYS_PASSPHRASE_ENV);
    *state = s;
    return 0;
}

static int scratch_teardown(void **state)
{
    struct scratch *s = *state;
    test_rm_rf(s->dir);
    free(s);
    unsetenv(KEYS_PASSPHRASE_ENV);
    return 0;
}

/* Writes name in the scratch directory with mode; returns its path. */
static const char *put(struct scratch *s, const char *name, const void *data, size_t len,
                       mode_t mode)
{
    int n = snprintf(s->path, sizeof(s->path), "%s/%s", s->dir, name);
    assert_true(n > 0 && (size_t)n < sizeof(s->path));
    unlink(s->path);
    int fd = open(s->path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    assert_int_equal(chmod(s->path, mode), 0);
    return s->path;
}

static void test_keyfile_forms(void **state)
{
    struct scratch *s = *state;
    uint8_t raw[CRYPT_KEY_LEN], key[CRYPT_KEY_LEN];
    char hex[2 * CRYPT_KEY_LEN + 2];
    struct buf err = BUF_INIT;

    for (size_t i = 0; i < sizeof(raw); i++)
        raw[i] = (uint8_t)(i * 7 + 1);
    raw[3] = '\n'; /* raw bytes are taken as they are */
    assert_int_equal(keys_read_keyfile(put(s, "raw", raw, 32, 0600), key, &err), 0);
    assert_memory_equal(key, raw, 32);
    hex_encode(raw, 32, hex);
    assert_int_equal(keys_read_keyfile(put(s, "hex", hex, 64, 0400), key, &err), 0);
    assert_memory_equal(key, raw, 32);
    hex[64] = '\n';
    hex[65] = 0;
    memset(key, 0, sizeof(key));
    assert_int_equal(keys_read_keyfile(put(s, "hexnl", hex, 65, 0600), key, &err), 0);
    assert_memory_equal(key, raw, 32);
    for (size_t i = 0; i < 64; i++)
        if (hex[i] >= 'a')
            hex[i] = (char)(hex[i] - 'a' + 'A');
    assert_int_equal(keys_read_keyfile(put(s, "HEX", hex, 65, 0600), key, &err), 0);
    assert_memory_equal(key, raw, 32);
    assert_int_equal(err.len, 0);

    /* wrong sizes and spellings */
    static const struct {
        const char *data;
        size_t len;
    } bad[] = {
        {"", 0},
        {"0123456789abcdef0123456789abcdef0", 33},
        {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg", 64},
        {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n", 66},
        {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n\n", 66},
        {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef ", 65},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        buf_reset(&err);
        assert_int_equal(keys_read_keyfile(put(s, "bad", bad[i].data, bad[i].len, 0600), key, &err),
                         CKS_E_FORMAT);
        assert_non_null(strstr(buf_str(&err), "want 32 raw bytes or 64 hex digits"));
        assert_non_null(strstr(buf_str(&err), s->path));
    }
    char big[4096];
    memset(big, 'a', sizeof(big));
    buf_reset(&err);
    assert_int_equal(keys_read_keyfile(put(s, "big", big, sizeof(big), 0600), key, &err),
                     CKS_E_LIMIT);
    buf_free(&err);
}

static void test_permissions(void **state)
{
    static const mode_t refused[] = {0640, 0604, 0644, 0660, 0700 | 0001, 0610, 0602};
    struct scratch *s = *state;
    uint8_t key[CRYPT_KEY_LEN], raw[CRYPT_KEY_LEN] = {1};
    struct buf err = BUF_INIT, pass = BUF_INIT;
    char want[64];

    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        const char *path = put(s, "k", raw, sizeof(raw), refused[i]);
        buf_reset(&err);
        assert_int_equal(keys_read_keyfile(path, key, &err), -EACCES);
        snprintf(want, sizeof(want), "mode %04o", (unsigned)refused[i]);
        assert_non_null(strstr(buf_str(&err), want));
        assert_non_null(strstr(buf_str(&err), path));
        assert_non_null(strstr(buf_str(&err), "key file"));
        buf_reset(&err);
        assert_int_equal(keys_read_passphrase_file(path, &pass, &err), -EACCES);
        assert_non_null(strstr(buf_str(&err), want));
        assert_non_null(strstr(buf_str(&err), "passphrase file"));
    }
    /* owner-only modes pass, even without the read bit for the owner
     * where the caller can read anyway (root) */
    assert_int_equal(keys_read_keyfile(put(s, "k", raw, sizeof(raw), 0600), key, NULL), 0);
    assert_int_equal(keys_read_keyfile(put(s, "k", raw, sizeof(raw), 0700), key, NULL), 0);

    /* missing, a directory, a FIFO (must not block), a symlink to a good file */
    buf_reset(&err);
    snprintf(s->path, sizeof(s->path), "%s/none", s->dir);
    assert_int_equal(keys_read_keyfile(s->path, key, &err), -ENOENT);
    assert_non_null(strstr(buf_str(&err), "cannot open"));
    buf_reset(&err);
    assert_int_equal(keys_read_keyfile(s->dir, key, &err), -EACCES);
    assert_non_null(strstr(buf_str(&err), "not a regular file"));
    snprintf(s->path, sizeof(s->path), "%s/fifo", s->dir);
    assert_int_equal(mkfifo(s->path, 0600), 0);
    buf_reset(&err);
    assert_int_equal(keys_read_keyfile(s->path, key, &err), -EACCES);
    assert_non_null(strstr(buf_str(&err), "not a regular file"));
    char target[128], link[128];
    snprintf(target, sizeof(target), "%s", put(s, "target", raw, sizeof(raw), 0600));
    snprintf(link, sizeof(link), "%s/link", s->dir);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(keys_read_keyfile(link, key, NULL), 0);
    assert_int_equal(chmod(target, 0644), 0);
    assert_int_equal(keys_read_keyfile(link, key, NULL), -EACCES); /* the target's mode */
    buf_free(&err);
    keys_secret_free(&pass);
}

/* Owned by another user: only testable as root (chown). */
static void test_owner(void **state)
{
    struct scratch *s = *state;
    uint8_t key[CRYPT_KEY_LEN], raw[CRYPT_KEY_LEN] = {2};
    struct buf err = BUF_INIT;

    if (geteuid() != 0) {
        skip();
        return;
    }
    const char *path = put(s, "other", raw, sizeof(raw), 0600);
    assert_int_equal(chown(path, 12345, 12345), 0);
    assert_int_equal(keys_read_keyfile(path, key, &err), -EACCES);
    assert_non_null(strstr(buf_str(&err), "owned by uid 12345"));
    buf_free(&err);
}

static void test_passphrase_file(void **state)
{
    struct scratch *s = *state;
    struct buf pass = BUF_INIT, err = BUF_INIT;

    assert_int_equal(keys_read_passphrase_file(put(s, "p", "hunter2\n", 8, 0600), &pass, &err), 0);
    assert_string_equal(buf_str(&pass), "hunter2");
    assert_int_equal(keys_read_passphrase_file(put(s, "p", "hunter2\r\n", 9, 0600), &pass, &err),
                     0);
    assert_string_equal(buf_str(&pass), "hunter2");
    assert_int_equal(keys_read_passphrase_file(put(s, "p", "a b\n\n", 5, 0600), &pass, &err), 0);
    assert_int_equal(pass.len, 4); /* one newline only */
    assert_int_equal(keys_read_passphrase_file(put(s, "p", "no newline", 10, 0600), &pass, &err),
                     0);
    assert_string_equal(buf_str(&pass), "no newline");
    assert_int_equal(err.len, 0);
    assert_int_equal(keys_read_passphrase_file(put(s, "p", "\n", 1, 0600), &pass, &err),
                     CKS_E_FORMAT);
    assert_non_null(strstr(buf_str(&err), "empty"));
    assert_int_equal(pass.len, 0);
    assert_int_equal(keys_read_passphrase_file(put(s, "p", "", 0, 0600), &pass, &err),
                     CKS_E_FORMAT);
    static char big[KEYSLOT_PASS_MAX + 1];
    memset(big, 'x', sizeof(big));
    assert_int_equal(keys_read_passphrase_file(put(s, "p", big, sizeof(big), 0600), &pass, &err),
                     CKS_E_LIMIT);
    assert_int_equal(
        keys_read_passphrase_file(put(s, "p", big, KEYSLOT_PASS_MAX, 0600), &pass, &err), 0);
    assert_int_equal(pass.len, KEYSLOT_PASS_MAX);
    keys_secret_free(&pass);
    assert_null(pass.data);
    keys_secret_free(&pass);
    buf_free(&err);
}

static void test_passphrase_sources(void **state)
{
    struct scratch *s = *state;
    struct buf pass = BUF_INIT, err = BUF_INIT;

    assert_int_equal(keys_passphrase(NULL, &pass, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), KEYS_PASSPHRASE_ENV));
    setenv(KEYS_PASSPHRASE_ENV, "from env\n", 1);
    assert_int_equal(keys_passphrase(NULL, &pass, &err), 0);
    assert_string_equal(buf_str(&pass), "from env\n"); /* the environment's bytes, as they are */
    const char *path = put(s, "p", "from file\n", 10, 0600);
    buf_reset(&err);
    assert_int_equal(keys_passphrase(path, &pass, &err), CKS_E_CONFIG);
    assert_non_null(strstr(buf_str(&err), "both"));
    assert_int_equal(pass.len, 0);
    unsetenv(KEYS_PASSPHRASE_ENV);
    assert_int_equal(keys_passphrase(path, &pass, &err), 0);
    assert_string_equal(buf_str(&pass), "from file");
    setenv(KEYS_PASSPHRASE_ENV, "", 1);
    buf_reset(&err);
    assert_int_equal(keys_passphrase(NULL, &pass, &err), CKS_E_FORMAT);
    assert_non_null(strstr(buf_str(&err), "empty"));
    keys_secret_free(&pass);
    buf_free(&err);
}

static void test_new_master(void **state)
{
    uint8_t a[CRYPT_KEY_LEN], b[CRYPT_KEY_LEN];
    (void)state;
    assert_int_equal(keys_new_master(a), 0);
    assert_int_equal(keys_new_master(b), 0);
    assert_memory_not_equal(a, b, CRYPT_KEY_LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_keyfile_forms, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_permissions, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_owner, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_passphrase_file, scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_passphrase_sources, scratch_setup, scratch_teardown),
        cmocka_unit_test(test_new_master),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

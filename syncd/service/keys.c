/*
 * keys.c — read key files and passphrases; make master keys.
 *
 * Design: a secret file is opened once (O_NONBLOCK, so a FIFO planted at
 * the path cannot block us) and every check is made on that descriptor.
 * Contents go into a fixed stack buffer one byte longer than the largest
 * accepted file, so "too large" is seen without reading the whole file
 * and no reallocation leaves copies of a secret behind; the buffer is
 * wiped on every path.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "base/err.h"
#include "base/fileio.h"
#include "engine/hash.h"
#include "engine/keyslot.h"
#include "service/keys.h"

#define KEYS_FILE_MAX KEYSLOT_PASS_MAX

static void say(struct buf *err, const char *what, const char *path, const char *msg)
{
    if (err)
        buf_printf(err, "%s \"%s\": %s", what, path, msg);
}

/* Reads a private file of at most cap bytes into data (cap + 1 bytes). */
static int read_private(const char *what, const char *path, uint8_t *data, size_t cap,
                        size_t *ret_len, struct buf *err)
{
    struct stat st;
    char msg[160];

    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int e = -errno;
        snprintf(msg, sizeof(msg), "cannot open: %s", strerror(-e));
        say(err, what, path, msg);
        return e;
    }
    int r = fstat(fd, &st) < 0 ? -errno : 0;
    if (r < 0) {
        snprintf(msg, sizeof(msg), "cannot stat: %s", strerror(-r));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(msg, sizeof(msg), "not a regular file");
        r = -EACCES;
    } else if (st.st_uid != geteuid()) {
        snprintf(msg, sizeof(msg), "owned by uid %u, not by this user (uid %u)",
                 (unsigned)st.st_uid, (unsigned)geteuid());
        r = -EACCES;
    } else if (st.st_mode & 077) {
        snprintf(msg, sizeof(msg), "mode %04o lets group or others in; chmod 600 it",
                 (unsigned)(st.st_mode & 07777));
        r = -EACCES;
    }
    if (r == 0) {
        ssize_t n = fileio_read_full(fd, data, cap + 1);
        if (n < 0) {
            r = (int)n;
            snprintf(msg, sizeof(msg), "cannot read: %s", strerror(-r));
        } else if ((size_t)n > cap) {
            snprintf(msg, sizeof(msg), "larger than %zu bytes", cap);
            r = CKS_E_LIMIT;
        } else {
            *ret_len = (size_t)n;
        }
    }
    close(fd);
    if (r < 0) {
        OPENSSL_cleanse(data, cap + 1);
        say(err, what, path, msg);
    }
    return r;
}

int keys_read_keyfile(const char *path, uint8_t key[CRYPT_KEY_LEN], struct buf *err)
{
    uint8_t data[257]; /* a few wrong sizes are named as such; larger: "larger than" */
    size_t n = 0;
    int r = read_private("key file", path, data, sizeof(data) - 1, &n, err);
    if (r < 0)
        return r;
    if (n == CRYPT_KEY_LEN) {
        memcpy(key, data, CRYPT_KEY_LEN);
    } else if ((n == 2 * CRYPT_KEY_LEN ||
                (n == 2 * CRYPT_KEY_LEN + 1 && data[2 * CRYPT_KEY_LEN] == '\n')) &&
               hex_decode((const char *)data, CRYPT_KEY_LEN, key) == 0) {
        /* hex */
    } else {
        char msg[96];
        snprintf(msg, sizeof(msg), "%zu bytes; want 32 raw bytes or 64 hex digits", n);
        say(err, "key file", path, msg);
        OPENSSL_cleanse(key, CRYPT_KEY_LEN);
        r = CKS_E_FORMAT;
    }
    OPENSSL_cleanse(data, sizeof(data));
    return r;
}

/* One trailing "\n" or "\r\n" off; empty refused. */
static int passphrase_take(const uint8_t *p, size_t n, struct buf *pass)
{
    if (n && p[n - 1] == '\n') {
        n--;
        if (n && p[n - 1] == '\r')
            n--;
    }
    if (n == 0)
        return CKS_E_FORMAT;
    int r = buf_reserve(pass, n);
    return r < 0 ? r : buf_append(pass, p, n);
}

int keys_read_passphrase_file(const char *path, struct buf *pass, struct buf *err)
{
    uint8_t data[KEYS_FILE_MAX + 1];
    size_t n = 0;

    keys_secret_free(pass);
    int r = read_private("passphrase file", path, data, KEYS_FILE_MAX, &n, err);
    if (r < 0)
        return r;
    r = passphrase_take(data, n, pass);
    OPENSSL_cleanse(data, sizeof(data));
    if (r == CKS_E_FORMAT)
        say(err, "passphrase file", path, "empty");
    return r;
}

int keys_passphrase(const char *passphrase_file, struct buf *pass, struct buf *err)
{
    const char *env = getenv(KEYS_PASSPHRASE_ENV);

    keys_secret_free(pass);
    if (passphrase_file && env) {
        if (err)
            buf_printf(err, "both passphrase_file \"%s\" and %s are set; unset one",
                       passphrase_file, KEYS_PASSPHRASE_ENV);
        return CKS_E_CONFIG;
    }
    if (passphrase_file)
        return keys_read_passphrase_file(passphrase_file, pass, err);
    if (!env) {
        if (err)
            buf_printf(err, "no passphrase: set %s or passphrase_file", KEYS_PASSPHRASE_ENV);
        return CKS_E_CONFIG;
    }
    return keys_passphrase_value(KEYS_PASSPHRASE_ENV, env, pass, err);
}

int keys_passphrase_value(const char *name, const char *value, struct buf *pass, struct buf *err)
{
    size_t n = strlen(value);
    keys_secret_free(pass);
    if (n == 0 || n > KEYS_FILE_MAX) {
        if (err && n)
            buf_printf(err, "%s is longer than %d bytes", name, KEYS_FILE_MAX);
        else if (err)
            buf_printf(err, "%s is empty", name);
        return n ? CKS_E_LIMIT : CKS_E_FORMAT;
    }
    int r = buf_reserve(pass, n);
    return r < 0 ? r : buf_append(pass, value, n);
}

void keys_secret_free(struct buf *secret)
{
    if (!secret)
        return;
    if (secret->data)
        OPENSSL_cleanse(secret->data, secret->cap);
    buf_free(secret);
}

int keys_new_master(uint8_t master[CRYPT_KEY_LEN])
{
    return crypt_random(master, CRYPT_KEY_LEN);
}

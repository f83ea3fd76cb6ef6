/*
 * cli_key.c — `ckptsync key list | add | remove | generate`: the key slots
 * of an encrypted repository (service/repokeys.h).  Every command but
 * generate unlocks the repository with the configured secret first, so
 * only someone who can already read the repository manages its keys.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "cli.h"
#include "engine/crypt.h"
#include "engine/hash.h"
#include "service/keys.h"
#include "service/repokeys.h"

static const char key_usage[] =
    "usage: ckptsync key list [--json]\n"
    "       ckptsync key add (--key-file FILE | --passphrase-file FILE | --passphrase-env VAR)\n"
    "       ckptsync key remove ID [--force]\n"
    "       ckptsync key generate FILE\n"
    "An encrypted repository's master key is unlocked by any one of its key slots;\n"
    "each slot wraps it under one secret (a key file, or a passphrase through scrypt).\n"
    "add writes a slot for another secret, remove deletes one (never the last one;\n"
    "the slot that opened this instance's repository only with --force), so a secret\n"
    "is added or revoked without re-encrypting anything.  The commands unlock the\n"
    "repository with the configured secret ([repository] key_file, passphrase_file\n"
    "or $CKPTSYNC_PASSPHRASE).  generate writes a new random key file (mode 0600).\n"
    "Removing a slot does not cut off whoever already holds the master key.\n";

static const char *kind_name(enum keyslot_kind k)
{
    return k == KEYSLOT_KEYFILE ? "keyfile" : "passphrase";
}

static int key_list(struct cli *c, struct repo *r)
{
    struct repokeys_view kv;
    struct repokey_info *v = NULL;
    size_t n = 0;
    struct buf err = BUF_INIT, out = BUF_INIT;
    int e = repokeys_list(repo_keys_view(r, &kv), &v, &n, &err);
    if (e < 0) {
        log_error("key list: %s", buf_str(&err)[0] ? buf_str(&err) : err_str(e));
        buf_free(&err);
        return 1;
    }
    struct json j;
    json_init(&j, &out);
    json_arr_begin(&j);
    for (size_t k = 0; k < n; k++) {
        char regions[CONFIG_MAX_REGIONS * (CONFIG_NAME_MAX + 1) + 1] = "";
        size_t at = 0;
        for (size_t i = 0; i < repo_nregions(r); i++)
            if (v[k].regions & (1u << i))
                at += (size_t)snprintf(regions + at, sizeof(regions) - at, "%s%s", at ? "," : "",
                                       repo_region(r, i)->conf.name);
        bool mine = !strcmp(v[k].id, repo_unlocked_by(r));
        json_obj_begin(&j);
        json_key(&j, "id");
        json_str(&j, v[k].id);
        json_key(&j, "kind");
        v[k].valid ? json_str(&j, kind_name(v[k].slot.kind)) : json_null(&j);
        json_key(&j, "valid");
        json_bool(&j, v[k].valid);
        json_key(&j, "scrypt");
        if (v[k].valid && v[k].slot.kind == KEYSLOT_PASSPHRASE) {
            json_arr_begin(&j);
            json_u64(&j, v[k].slot.n);
            json_u64(&j, v[k].slot.r);
            json_u64(&j, v[k].slot.p);
            json_arr_end(&j);
        } else {
            json_null(&j);
        }
        json_key(&j, "regions");
        json_str(&j, regions);
        json_key(&j, "unlocked_this");
        json_bool(&j, mine);
        json_obj_end(&j);
        if (!c->json)
            printf("%s  %-10s  regions %-12s%s\n", v[k].id,
                   v[k].valid ? kind_name(v[k].slot.kind) : "damaged", regions,
                   mine ? "  (opened with the configured secret)" : "");
    }
    json_arr_end(&j);
    if (c->json)
        cli_print_json(&out);
    buf_free(&out);
    free(v);
    return 0;
}

/* The new secret named by key add's option. */
static int new_secret(const char *opt, const char *arg, struct repo_secret *s, struct buf *err)
{
    if (!strcmp(opt, "key-file"))
        return repokeys_secret_file(KEYSLOT_KEYFILE, arg, s, err);
    if (!strcmp(opt, "passphrase-file"))
        return repokeys_secret_file(KEYSLOT_PASSPHRASE, arg, s, err);
    memset(s, 0, sizeof(*s));
    s->kind = KEYSLOT_PASSPHRASE;
    snprintf(s->where, sizeof(s->where), "$%s", arg);
    const char *p = getenv(arg);
    if (!p || !*p) {
        buf_printf(err, "$%s is not set or empty", arg);
        return CKS_E_CONFIG;
    }
    return keys_passphrase_value(s->where, p, &s->bytes, err);
}

static int key_add(struct cli *c, struct repo *r, const char *opt, const char *arg)
{
    struct repokeys_view kv;
    struct repo_secret s;
    struct buf err = BUF_INIT;
    char id[REPOKEYS_ID_HEX + 1];
    int e = new_secret(opt, arg, &s, &err);
    if (e == 0) {
        e = repokeys_put_slot(repo_keys_view(r, &kv), &s, id, &err);
        repokeys_secret_free(&s);
    }
    if (e < 0) {
        log_error("key add: %s", buf_str(&err)[0] ? buf_str(&err) : err_str(e));
        buf_free(&err);
        return 1;
    }
    if (c->json)
        printf("{\"id\": \"%s\"}\n", id);
    else if (!c->quiet)
        printf("added key slot %s (%s)\n", id, s.where);
    return 0;
}

static int key_remove(struct cli *c, struct repo *r, const char *id, bool force)
{
    struct repokeys_view kv;
    struct repokey_info *v = NULL;
    size_t n = 0, valid = 0;
    struct buf err = BUF_INIT;
    int e = repokeys_list(repo_keys_view(r, &kv), &v, &n, &err), rc = 1;
    if (e < 0) {
        log_error("key remove: %s", buf_str(&err)[0] ? buf_str(&err) : err_str(e));
        buf_free(&err);
        return 1;
    }
    const struct repokey_info *hit = NULL;
    for (size_t k = 0; k < n; k++) {
        valid += v[k].valid;
        if (!strcmp(v[k].id, id))
            hit = &v[k];
    }
    if (!hit)
        log_error("key remove: no key slot '%s' in any healthy region (`ckptsync key list`)", id);
    else if (hit->valid && valid <= 1)
        log_error("key remove: '%s' is the last key slot; removing it would lock everyone out "
                  "(add another first: `ckptsync key add`)",
                  id);
    else if (!strcmp(id, repo_unlocked_by(r)) && !force)
        log_error("key remove: '%s' is the slot the configured secret opens; this instance "
                  "could not unlock the repository afterwards (--force to remove it anyway)",
                  id);
    else
        rc = 0;
    if (rc == 0) {
        repokeys_del_slot(repo_keys_view(r, &kv), id);
        for (size_t i = 0; i < repo_nregions(r); i++)
            if (repo_region_error(r, i))
                log_warn("region '%s' is unreachable: if it holds slot '%s', remove it again "
                         "when it is back",
                         repo_region(r, i)->conf.name, id);
        if (!c->quiet && !c->json)
            printf("removed key slot %s\n", id);
        if (c->json)
            printf("{\"removed\": \"%s\"}\n", id);
    }
    free(v);
    return rc;
}

static int key_generate(struct cli *c, const char *path)
{
    uint8_t key[CRYPT_KEY_LEN];
    char hex[2 * CRYPT_KEY_LEN + 2];
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        log_error("key generate: \"%s\": %s", path, strerror(errno));
        return 1;
    }
    int e = keys_new_master(key);
    if (e == 0) {
        hex_encode(key, sizeof(key), hex);
        hex[2 * CRYPT_KEY_LEN] = '\n';
        hex[2 * CRYPT_KEY_LEN + 1] = 0;
        size_t len = 2 * CRYPT_KEY_LEN + 1;
        e = write(fd, hex, len) == (ssize_t)len && fsync(fd) == 0 ? 0 : -errno;
    }
    OPENSSL_cleanse(key, sizeof(key));
    OPENSSL_cleanse(hex, sizeof(hex));
    if (close(fd) < 0 && e == 0)
        e = -errno;
    if (e < 0) {
        unlink(path);
        log_error("key generate: \"%s\": %s", path, err_str(e));
        return 1;
    }
    if (!c->quiet)
        fprintf(stderr,
                "wrote a new key file \"%s\" (mode 0600); keep a copy: without a key "
                "that opens a slot, nothing in the repository can be read\n",
                path);
    return 0;
}

int cmd_key(struct cli *c, int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return fputs(key_usage, stdout), 0;
    if (argc < 2)
        return fputs(key_usage, stderr), EXIT_USAGE;
    const char *sub = argv[1];
    if (!strcmp(sub, "generate"))
        return argc == 3 ? key_generate(c, argv[2]) : (fputs(key_usage, stderr), EXIT_USAGE);
    const char *opt = NULL, *arg = NULL, *id = NULL;
    bool force = false;
    if (!strcmp(sub, "list") && argc == 2) {
    } else if (!strcmp(sub, "add") && argc == 4 && !strncmp(argv[2], "--", 2) &&
               (!strcmp(argv[2] + 2, "key-file") || !strcmp(argv[2] + 2, "passphrase-file") ||
                !strcmp(argv[2] + 2, "passphrase-env"))) {
        opt = argv[2] + 2;
        arg = argv[3];
    } else if (!strcmp(sub, "remove") &&
               (argc == 3 || (argc == 4 && !strcmp(argv[3], "--force")))) {
        id = argv[2];
        force = argc == 4;
    } else {
        return fputs(key_usage, stderr), EXIT_USAGE;
    }
    struct repo *r;
    if (cli_open_repo(c, 0, &r) < 0)
        return 1;
    int rc;
    if (!repo_encrypted(r)) {
        log_error("key %s: repository %s is not encrypted (it has no keys)", sub,
                  repo_params(r)->id);
        rc = 1;
    } else if (opt) {
        rc = key_add(c, r, opt, arg);
    } else if (id) {
        rc = key_remove(c, r, id, force);
    } else {
        rc = key_list(c, r);
    }
    return cli_close_repo(r, rc);
}

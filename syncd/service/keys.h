/*
 * keys.h — the secrets of an encrypted repository, read from outside: key
 * files, passphrases (a file or the CKPTSYNC_PASSPHRASE environment
 * variable), and a fresh master key.
 *
 * A key file or passphrase file is read only when it is a regular file
 * owned by the calling user (effective uid) with no permission bits for
 * group or others (mode & 077 == 0); otherwise it is refused and the
 * message names the path and the mode.  Symlinks are followed, and the
 * checks apply to the file actually opened (fstat of the descriptor, so
 * nothing can be swapped in between check and read).
 *   key file:        exactly 32 raw bytes, or 64 hex digits (either case)
 *                    and an optional "\n"
 *   passphrase file: its bytes, one trailing "\n" (or "\r\n") removed;
 *                    empty refused; at most KEYSLOT_PASS_MAX bytes
 *   CKPTSYNC_PASSPHRASE: its bytes as they are (nothing stripped); empty
 *                    refused; at most KEYSLOT_PASS_MAX bytes
 *
 * Errors: negative errno from open/read (message "cannot open"), -EACCES
 * (not a regular file, another owner, group/other bits), CKS_E_FORMAT
 * (content), CKS_E_LIMIT (too large), CKS_E_CONFIG (no passphrase given,
 * or two).  err (may be NULL) gets one line appended, with the path in
 * quotes.  Buffers holding secrets are wiped before they are released;
 * pass passphrase buffers to keys_secret_free.  Thread-safe (getenv aside:
 * do not setenv concurrently).
 */
#ifndef CKS_KEYS_H
#define CKS_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/crypt.h"

#define KEYS_PASSPHRASE_ENV "CKPTSYNC_PASSPHRASE"

int keys_read_keyfile(const char *path, uint8_t key[CRYPT_KEY_LEN], struct buf *err);
/* The passphrase in path into pass (reset first). */
int keys_read_passphrase_file(const char *path, struct buf *pass, struct buf *err);
/* The repository's passphrase: from passphrase_file when it is not NULL,
 * else from CKPTSYNC_PASSPHRASE (empty refused); CKS_E_CONFIG when neither
 * or both are set (a silent choice between two secrets hides a mistake). */
int keys_passphrase(const char *passphrase_file, struct buf *pass, struct buf *err);
/* A passphrase given as a string (an environment variable's value) into
 * pass (reset first), checked as the environment's is: empty refused
 * (CKS_E_FORMAT), at most KEYSLOT_PASS_MAX bytes (CKS_E_LIMIT); name is
 * what err calls it. */
int keys_passphrase_value(const char *name, const char *value, struct buf *pass, struct buf *err);
/* Wipes and frees a buffer that held a secret. */
void keys_secret_free(struct buf *secret);
/* A new random master key: 0 or -EIO (no randomness). */
int keys_new_master(uint8_t master[CRYPT_KEY_LEN]);

#endif

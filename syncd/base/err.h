/*
 * err.h — error codes shared by every module.
 *
 * Functions return int: 0 (or a positive count) on success, a negative errno
 * or a negative project code (CKS_E_*, in the reserved range -1000..-1099)
 * on failure.  err_str() turns either kind into a short English phrase.
 * Foreign schemes (MDB_*, CURLcode, ZSTD error codes) are translated to
 * these at the module that wraps the library and never leak above it.
 *
 * Thread-safe: err_str() returns static strings.
 */
#ifndef CKS_ERR_H
#define CKS_ERR_H

enum {
    CKS_E_BASE = -1000,
    CKS_E_FORMAT = -1001,      /* malformed object, manifest or message */
    CKS_E_VERSION = -1002,     /* format version we do not understand */
    CKS_E_DIGEST = -1003,      /* content does not match its digest */
    CKS_E_CONFIG = -1004,      /* invalid configuration */
    CKS_E_UNSAFE_PATH = -1005, /* path escapes its root (absolute, ..) */
    CKS_E_CHANGED = -1006,     /* file changed while it was read */
    CKS_E_LIMIT = -1007,       /* a size or count bound was exceeded */
    CKS_E_QUORUM = -1008,      /* fewer regions succeeded than required */
    CKS_E_CODEC = -1009,       /* compression / decompression failed */
    CKS_E_MISMATCH = -1010,    /* repository parameters differ between regions */
    CKS_E_FATAL = -1011,       /* the index failed a durable write earlier (index.h);
                                * no more writes: the daemon is degraded */
    CKS_E_REMOTE = -1012,      /* region failed: retry later (5xx, timeout, reset) */
    CKS_E_REJECTED = -1013,    /* region refused the request (4xx): fix, then retry */
    CKS_E_BUSY = -1014,        /* another instance holds the lease (prune) */
    CKS_E_AUTH = -1015,        /* AEAD tag mismatch: wrong key or altered object */
    CKS_E_CLOCK = -1016,       /* this host's clock and a region's disagree (prune) */
    CKS_E_DENIED = -1017,      /* region refused the credentials (S3 403): fix, then retry */
    CKS_E_RESHARD = -1018,     /* restore on another node count would drop rank-bound files */
    CKS_E_LAST = -1099,
};

const char *err_str(int err);

#endif

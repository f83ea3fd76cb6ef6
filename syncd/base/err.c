/*
 * err.c — the one strerror-like function for project error codes.
 */
#include <string.h>

#include "base/err.h"

const char *err_str(int err)
{
    switch (err) {
    case 0:
        return "success";
    case CKS_E_FORMAT:
        return "malformed data";
    case CKS_E_VERSION:
        return "unsupported format version";
    case CKS_E_DIGEST:
        return "digest mismatch";
    case CKS_E_CONFIG:
        return "invalid configuration";
    case CKS_E_UNSAFE_PATH:
        return "unsafe path";
    case CKS_E_CHANGED:
        return "file changed while being read";
    case CKS_E_LIMIT:
        return "size or count limit exceeded";
    case CKS_E_QUORUM:
        return "not enough regions succeeded";
    case CKS_E_CODEC:
        return "compression codec error";
    case CKS_E_MISMATCH:
        return "repository parameters differ";
    case CKS_E_FATAL:
        return "the local index failed a durable write; no more writes until a restart";
    case CKS_E_REMOTE:
        return "region failed (will retry)";
    case CKS_E_REJECTED:
        return "region refused the request";
    case CKS_E_BUSY:
        return "another instance holds the lease";
    case CKS_E_AUTH:
        return "authentication failed: wrong key or altered object";
    case CKS_E_CLOCK:
        return "this host's clock and a region's disagree";
    case CKS_E_DENIED:
        return "access denied: the region refused the credentials";
    case CKS_E_RESHARD:
        return "files bound to a rank the new node count cannot consume";
    }
    if (err < 0 && err > CKS_E_BASE)
        return strerror(-err);
    return "unknown error";
}

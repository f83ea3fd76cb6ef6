/*
 * sigv4.h — AWS Signature Version 4 for S3 requests (header signing).
 *
 * Purpose: compute the Authorization header of one S3 request, so the S3
 * region backend can talk to AWS S3 and S3-compatible servers.  Pure: no
 * I/O, no clock (the caller passes the time), no global state.
 *
 * Calling sequence, for one request:
 *
 *   char date[SIGV4_DATE_LEN + 1];
 *   sigv4_amz_date(time(NULL), date);
 *   struct sigv4_request r = { .method = "PUT", .host = "bucket.s3...",
 *       .path = "/prefix/chunks/ab/ab12...", .query = "",
 *       .payload_hash = hex_sha256_of_body, .amz_date = date,
 *       .region = "us-east-1", .service = "s3",
 *       .access_key = ak, .secret_key = sk };
 *   struct buf auth = BUF_INIT;
 *   sigv4_sign(&r, &auth, NULL);
 *
 * and then send, with exactly these spellings:
 *   URL path   : sigv4_uri_encode(path, false, ...)   (the canonical URI)
 *   URL query  : sigv4_canonical_query(query, ...)    (after the '?')
 *   Host       : r.host
 *   x-amz-date : r.amz_date
 *   x-amz-content-sha256 : r.payload_hash
 *   x-amz-security-token : r.session_token            (when not NULL)
 *   every header of r.headers, with the same value
 *   Authorization : the string sigv4_sign produced
 * Any difference between what is signed and what is sent makes the server
 * answer 403 SignatureDoesNotMatch.
 *
 * Inputs: path and query are raw (not percent-encoded): the signer encodes
 * them once, S3 style (every byte outside A-Z a-z 0-9 - . _ ~ becomes %XX,
 * '/' kept in the path; no normalisation of "." or "//").  The query is
 * "name=value&name2=value2" or "flag" with '&' separating parameters and
 * the first '=' separating a name from its value, so raw names and values
 * cannot themselves contain '&' (nor a name '='); parameters are sorted
 * for signing.  Any byte but NUL may appear in path and query (it is
 * encoded).  Header names are case-insensitive HTTP tokens; header values,
 * host and token must not contain control characters but HTAB (so no
 * CR/LF header injection).  The caller must not pass host, x-amz-date,
 * x-amz-content-sha256, x-amz-security-token nor authorization in
 * r.headers: the signer adds those itself; nor the same header twice
 * (-EINVAL otherwise).
 *
 * Ownership: nothing is retained.  Output is appended to the caller's
 * buffers; on failure they are left as they were.  The secret key and the
 * derived signing key are wiped from the stack before return; the
 * canonical request never contains the secret (it may be logged).
 *
 * Errors: -EINVAL for a malformed request (missing field, bad amz_date,
 * bad header name, CR/LF in a value), -ENOMEM, -ENOTSUP when OpenSSL
 * offers no HMAC-SHA256.
 *
 * Thread-safe: all functions are reentrant.
 */
#ifndef CKS_SIGV4_H
#define CKS_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "base/buf.h"

/* "YYYYMMDDTHHMMSSZ" */
#define SIGV4_DATE_LEN 16
/* Header value meaning "the body is not part of the signature". */
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
/* Bounds on the request (-EINVAL beyond): extra headers, and any one
 * name or value (path, query, header, token). */
#define SIGV4_MAX_HEADERS 64
#define SIGV4_MAX_FIELD 8192
/* Query parameters, and bytes of the secret key. */
#define SIGV4_MAX_PARAMS 64
#define SIGV4_MAX_SECRET 256

struct sigv4_header {
    const char *name;  /* any case; lower-cased for signing */
    const char *value; /* trimmed, inner runs of blanks collapsed */
};

struct sigv4_request {
    const char *method;                 /* "GET", "PUT", "HEAD", "DELETE", "POST" */
    const char *host;                   /* as sent in Host: (":port" when not default) */
    const char *path;                   /* raw path, starting with '/' ("" means "/") */
    const char *query;                  /* raw query without '?', "" or NULL if none */
    const struct sigv4_header *headers; /* extra headers to sign */
    size_t nheaders;
    const char *payload_hash; /* hex SHA-256 of the body, or UNSIGNED-PAYLOAD */
    const char *amz_date;     /* "20130524T000000Z" (UTC) */
    const char *region;       /* "us-east-1" */
    const char *service;      /* "s3" */
    const char *access_key;
    const char *secret_key;
    const char *session_token; /* temporary credentials, or NULL */
};

/* Appends "AWS4-HMAC-SHA256 Credential=<ak>/<date>/<region>/<service>/
 * aws4_request,SignedHeaders=<list>,Signature=<64 hex>" to
 * ret_authorization and, when ret_canonical is not NULL, the canonical
 * request that was hashed (for debugging and tests). */
int sigv4_sign(const struct sigv4_request *r, struct buf *ret_authorization,
               struct buf *ret_canonical);

/* Appends s percent-encoded the SigV4 way: unreserved bytes (A-Z a-z 0-9
 * - . _ ~) kept, '/' kept unless encode_slash, every other byte (space
 * too) as %XX with upper-case hex.  0 or -ENOMEM. */
int sigv4_uri_encode(const char *s, bool encode_slash, struct buf *ret);

/* Appends the canonical query string of a raw query (see above): each
 * name and value encoded, "name=" for a flag, sorted by name then value,
 * joined by '&'.  Valid as the query of the URL actually sent.
 * 0, -EINVAL (too many parameters) or -ENOMEM. */
int sigv4_canonical_query(const char *query, struct buf *ret);

/* Formats t (UTC) as "YYYYMMDDTHHMMSSZ" into out (SIGV4_DATE_LEN + 1
 * bytes).  0, or -EOVERFLOW when t is outside years 0000..9999 (out is
 * then the empty string). */
int sigv4_amz_date(time_t t, char out[SIGV4_DATE_LEN + 1]);

#endif

/*
 * region_s3.c — the `s3` region backend: any S3-compatible store (AWS S3,
 * Aliyun OSS, Tencent COS, Huawei OBS, MinIO, Ceph RGW) over libcurl.
 *
 * Design notes.
 * - One curl multi handle per region carries every transfer: many in
 *   flight on one thread, keep-alive connections reused from the multi's
 *   connection cache.  The daemon's region worker drives it through
 *   region_submit()/region_poll(); the synchronous ops (used by the CLI and
 *   for the rare manifest publish) submit one transfer and poll until it
 *   is done, parking other completions for the next poll.
 * - Requests are signed with our own SigV4 (store/sigv4.c, checked against
 *   the published vectors) rather than CURLOPT_AWS_SIGV4: it lets us choose
 *   signed or UNSIGNED-PAYLOAD per region and sign exactly the headers we
 *   send, which S3-compatible stores differ on.  No aws-chunked encoding.
 * - Errors are classified once, here: connection failures, timeouts, 5xx,
 *   429 and SlowDown are CKS_E_REMOTE (the scheduler backs off and
 *   retries); a 403 is CKS_E_DENIED (credentials or bucket policy: "access
 *   denied", but a skewed clock's 403 stays CKS_E_REJECTED); any other 4xx
 *   is CKS_E_REJECTED (bucket, request: retrying cannot help until the
 *   configuration changes).  The message names region, method, bucket and
 *   key, HTTP status, the S3 error code and the store's whole message.  Credentials never appear in
 * a message or a URL.
 * - The multi handle's own return codes are checked: when
 *   curl_multi_perform or curl_multi_poll fails, every transfer in flight
 *   ends with that error (CKS_E_REMOTE, naming the region) and the region
 *   gets a fresh handle; nothing waits on a dead handle.
 * - Objects above S3_MULTIPART_MIN go up as a multipart upload, aborted on
 *   any failure so no parts are left dangling.
 * - put_new is a single PUT with "If-None-Match: *", in SignedHeaders like
 *   Range and Content-MD5, so that nothing on the way can drop it unseen
 *   (AWS accepts any sent header signed; a store that ignores the header
 *   still checks the signature over it: s3rver does).  412
 *   PreconditionFailed is -EEXIST; 501 or NotImplemented is -ENOTSUP (the
 *   store cannot); 409 ConditionalRequestConflict (AWS: a conditional write
 *   of the same key raced ours) is CKS_E_REMOTE like any transient failure:
 *   retrying belongs to the scheduler, and its retry gets 200 or 412.
 *   Whether the store enforces the header at all is not assumed: the region
 *   starts "unknown" and the caller probes (region_probe_preconditions).
 */
#include <curl/curl.h>
#include <errno.h>
#include <ini.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/hash.h"
#include "store/layout.h"
#include "store/region.h"
#include "store/s3xml.h"
#include "store/sigv4.h"

#define S3_MULTIPART_MIN (64u << 20) /* objects from this size go up in parts */
#define S3_PART_MIN (5u << 20)       /* S3's smallest part but the last */
#define S3_COPY_MAX (5ull << 30)     /* CopyObject's largest object; UploadPartCopy above */
#define S3_MAX_RESPONSE (16u << 20)
#define S3_LIST_PAGE 1000

struct s3x;

struct s3region {
    struct region base;
    CURLM *multi;
    char scheme[8];
    char host[256];      /* host[:port] as sent in Host */
    char base_path[512]; /* endpoint path, "" or "/x" */
    char access_key[256], secret_key[256], session_token[4096];
    struct s3x *active;
    struct region_req *parked; /* async completions seen by a sync op */
    int64_t max_speed;         /* bytes/s per transfer, 0 = unlimited */
    size_t multipart_min, part_size;
    uint64_t copy_max;  /* larger objects are copied with UploadPartCopy, in parts this size */
    uint64_t head_size; /* expected size for the next sync HEAD */
};

/* One HTTP transfer. */
struct s3x {
    struct s3region *s;
    CURL *easy;
    struct curl_slist *headers;
    const char *method;
    char what[REGION_KEY_MAX + 600]; /* "PUT s3://bucket/prefix/key", for messages */
    const uint8_t *body;
    size_t body_len, body_off;
    struct buf resp;
    size_t max;
    bool too_big;
    long status;
    CURLcode cc;
    CURLMcode mc; /* CURLM_OK, or the multi handle's failure that ended it */
    char curl_err[CURL_ERROR_SIZE];
    bool done;
    int ret;
    char errmsg[1024];
    struct region_req *req; /* async: the request it serves */
    uint64_t expect_size;   /* HEAD: the object must have this size */
    char *object;           /* object name, NULL for bucket-level requests */
    char range[64];         /* "bytes=a-b" for a ranged GET, else "" */
    bool create_only;       /* PUT with If-None-Match: * */
    char *copy_source;      /* CopyObject: x-amz-copy-source ("/bucket/object", encoded) */
    char copy_range[64];    /* UploadPartCopy: x-amz-copy-source-range "bytes=a-b", else "" */
    struct s3x *later;      /* completed, waiting to be handed over */
    struct s3x *next;
};

static pthread_once_t s3_once = PTHREAD_ONCE_INIT;
static int s3_curl_ok;

static void s3_global_init(void)
{
    s3_curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

/* ---- credentials ------------------------------------------------------- */

struct cred_ctx {
    struct s3region *s;
};

static int cred_line(void *ud, const char *section, const char *name, const char *value)
{
    struct s3region *s = ud;
    if (strcmp(section, "default") && strcmp(section, s->base.conf.name))
        return 1;
    if (!strcmp(name, "aws_access_key_id"))
        snprintf(s->access_key, sizeof(s->access_key), "%s", value);
    else if (!strcmp(name, "aws_secret_access_key"))
        snprintf(s->secret_key, sizeof(s->secret_key), "%s", value);
    else if (!strcmp(name, "aws_session_token"))
        snprintf(s->session_token, sizeof(s->session_token), "%s", value);
    return 1;
}

static int s3_credentials(struct s3region *s, struct buf *err)
{
    const char *path = s->base.conf.credentials;
    struct stat st;
    if (path[0]) {
        if (stat(path, &st) < 0) {
            buf_printf(err, "region '%s': credentials file \"%s\": %s", s->base.conf.name, path,
                       strerror(errno));
            return -errno;
        }
        if (st.st_mode & 077) {
            buf_printf(err,
                       "region '%s': credentials file \"%s\" is readable by group or others "
                       "(mode %04o); refusing it: chmod 600 \"%s\"",
                       s->base.conf.name, path, (unsigned)(st.st_mode & 07777), path);
            return -EACCES;
        }
        if (access(path, R_OK) < 0) {
            buf_printf(err, "region '%s': credentials file \"%s\": cannot read it: %s",
                       s->base.conf.name, path, strerror(errno));
            return -errno;
        }
        int line = ini_parse(path, cred_line, s);
        if (line != 0) {
            buf_printf(err, "region '%s': credentials file \"%s\": %s%d", s->base.conf.name, path,
                       line < 0 ? "cannot read it: error " : "syntax error on line ", line);
            return CKS_E_CONFIG;
        }
    } else {
        const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
        const char *tok = getenv("AWS_SESSION_TOKEN");
        snprintf(s->access_key, sizeof(s->access_key), "%s", ak ? ak : "");
        snprintf(s->secret_key, sizeof(s->secret_key), "%s", sk ? sk : "");
        snprintf(s->session_token, sizeof(s->session_token), "%s", tok ? tok : "");
    }
    if (!s->access_key[0] || !s->secret_key[0]) {
        buf_printf(err,
                   "region '%s': no credentials (set `credentials = FILE` with "
                   "aws_access_key_id/aws_secret_access_key, or AWS_ACCESS_KEY_ID and "
                   "AWS_SECRET_ACCESS_KEY)",
                   s->base.conf.name);
        return CKS_E_CONFIG;
    }
    return 0;
}

/* ---- endpoint and keys ------------------------------------------------- */

static int s3_endpoint(struct s3region *s, struct buf *err)
{
    const char *e = s->base.conf.endpoint, *rest;
    if (!strncmp(e, "https://", 8)) {
        snprintf(s->scheme, sizeof(s->scheme), "https");
        rest = e + 8;
    } else if (!strncmp(e, "http://", 7)) {
        snprintf(s->scheme, sizeof(s->scheme), "http");
        rest = e + 7;
    } else {
        buf_printf(err, "region '%s': endpoint \"%s\" must start with http:// or https://",
                   s->base.conf.name, e);
        return CKS_E_CONFIG;
    }
    const char *slash = strchr(rest, '/');
    size_t hl = slash ? (size_t)(slash - rest) : strlen(rest);
    if (hl == 0 || hl >= sizeof(s->host) || memchr(rest, '@', hl)) {
        buf_printf(err, "region '%s': endpoint \"%s\" has no usable host", s->base.conf.name, e);
        return CKS_E_CONFIG;
    }
    memcpy(s->host, rest, hl);
    s->host[hl] = 0;
    snprintf(s->base_path, sizeof(s->base_path), "%s", slash ? slash : "");
    size_t bl = strlen(s->base_path);
    while (bl > 0 && s->base_path[bl - 1] == '/')
        s->base_path[--bl] = 0;
    return 0;
}

/* The object name in the bucket: <prefix>/<key>. */
static void s3_object(const struct s3region *s, const char *key, struct buf *out)
{
    const char *p = s->base.conf.prefix;
    while (*p == '/')
        p++;
    size_t pl = strlen(p);
    while (pl > 0 && p[pl - 1] == '/')
        pl--;
    if (pl)
        buf_printf(out, "%.*s/%s", (int)pl, p, key);
    else
        buf_puts(out, key);
}

/* ---- building a transfer ----------------------------------------------- */

static size_t s3_write_cb(char *ptr, size_t size, size_t n, void *ud)
{
    struct s3x *x = ud;
    size_t len = size * n;
    if (x->resp.len + len > x->max) {
        x->too_big = true;
        return 0;
    }
    return buf_append(&x->resp, ptr, len) < 0 ? 0 : len;
}

static size_t s3_read_cb(char *ptr, size_t size, size_t n, void *ud)
{
    struct s3x *x = ud;
    size_t len = size * n, left = x->body_len - x->body_off;
    if (len > left)
        len = left;
    memcpy(ptr, x->body + x->body_off, len);
    x->body_off += len;
    return len;
}

/* Adds "name: value", or "name:" (curl then sends no such header) when
 * value is NULL. */
static int s3_header(struct s3x *x, const char *name, const char *val)
{
    char line[8192];
    if (val)
        snprintf(line, sizeof(line), "%s: %s", name, val);
    else
        snprintf(line, sizeof(line), "%s:", name);
    struct curl_slist *l = curl_slist_append(x->headers, line);
    if (!l)
        return -ENOMEM;
    x->headers = l;
    return 0;
}

/* The request's host and its path (not yet URI-encoded): the bucket in
 * the host name (virtual-hosted) or as the path's first segment.  object
 * may be NULL (bucket-level). */
static void s3_target(const struct s3x *x, const char *object, struct buf *host, struct buf *path)
{
    const struct s3region *s = x->s;
    const struct region_conf *c = &s->base.conf;
    if (c->virtual_hosted)
        buf_printf(host, "%s.%s", c->bucket, s->host);
    else
        buf_puts(host, s->host);
    buf_printf(path, "%s/%s%s%s", s->base_path, c->virtual_hosted ? "" : c->bucket,
               c->virtual_hosted || !object ? "" : "/", object ? object : "");
    if (c->virtual_hosted && !object)
        buf_reset(path), buf_printf(path, "%s/", s->base_path);
}

/* x-amz-content-sha256: the body's SHA-256 in hex, or UNSIGNED-PAYLOAD
 * when the region is configured so. */
static void s3_payload_hash(const struct s3x *x, char payload[HASH_HEX_LEN + 1])
{
    if (x->s->base.conf.unsigned_payload) {
        snprintf(payload, HASH_HEX_LEN + 1, "%s", SIGV4_UNSIGNED_PAYLOAD);
    } else {
        uint8_t d[HASH_LEN];
        hash_sha256(x->body ? (const void *)x->body : "", x->body_len, d);
        hex_encode(d, HASH_LEN, payload);
    }
}

/* The headers the signature covers besides host and x-amz-*: Range,
 * If-None-Match (create-only puts), Content-MD5 (every body: a store
 * that checks it, as S3 does, refuses a body damaged or cut short on the
 * way instead of storing it) and a copy's x-amz-copy-source.  Fills hdr
 * (room for 4; values point into x or md5b64) and adds the last three to
 * x's header list. */
static int s3_signed_headers(struct s3x *x, struct sigv4_header hdr[4], size_t *ret_n,
                             char md5b64[32])
{
    size_t n = 0;
    if (x->copy_source) {
        hdr[n++] = (struct sigv4_header){"x-amz-copy-source", x->copy_source};
        if (s3_header(x, "x-amz-copy-source", x->copy_source) < 0)
            return -ENOMEM;
    }
    if (x->copy_range[0]) {
        hdr[n++] = (struct sigv4_header){"x-amz-copy-source-range", x->copy_range};
        if (s3_header(x, "x-amz-copy-source-range", x->copy_range) < 0)
            return -ENOMEM;
    }
    if (x->range[0])
        hdr[n++] = (struct sigv4_header){"Range", x->range};
    if (x->create_only) {
        hdr[n++] = (struct sigv4_header){"If-None-Match", "*"};
        if (s3_header(x, "If-None-Match", "*") < 0)
            return -ENOMEM;
    }
    if (x->body && x->body_len) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        if (!EVP_Digest(x->body, x->body_len, md, &mdlen, EVP_md5(), NULL))
            return -ENOTSUP;
        EVP_EncodeBlock((unsigned char *)md5b64, md, (int)mdlen);
        hdr[n++] = (struct sigv4_header){"Content-MD5", md5b64};
        if (s3_header(x, "Content-MD5", md5b64) < 0)
            return -ENOMEM;
    }
    *ret_n = n;
    return 0;
}

/* The rest of x's header list once signed: the signature and the values
 * it covers, Range, no "Expect: 100-continue", and a body's type. */
static int s3_request_headers(struct s3x *x, const char *auth, const char *date,
                              const char *payload, const char *query)
{
    const struct s3region *s = x->s;
    bool body = !strcmp(x->method, "PUT") || !strcmp(x->method, "POST");
    const char *type = strstr(query, "uploadId=") && !strcmp(x->method, "POST")
                           ? "application/xml"
                           : "application/octet-stream";
    if (s3_header(x, "Authorization", auth) < 0 || s3_header(x, "x-amz-date", date) < 0 ||
        s3_header(x, "x-amz-content-sha256", payload) < 0 ||
        (s->session_token[0] && s3_header(x, "x-amz-security-token", s->session_token) < 0) ||
        (x->range[0] && s3_header(x, "Range", x->range) < 0) || s3_header(x, "Expect", NULL) < 0 ||
        (body && s3_header(x, "Content-Type", type) < 0))
        return -ENOMEM;
    return 0;
}

/* Signs and sets URL and headers.  object may be NULL (bucket-level);
 * query is raw ("name=value&flag", values not encoded; "" for none). */
static int s3_sign(struct s3x *x, const char *object, const char *query)
{
    struct s3region *s = x->s;
    struct buf path = BUF_INIT, enc = BUF_INIT, host = BUF_INIT, auth = BUF_INIT, url = BUF_INIT;
    struct buf cq = BUF_INIT;
    char date[SIGV4_DATE_LEN + 1], payload[HASH_HEX_LEN + 1], md5b64[32] = "";
    struct sigv4_header hdr[4];
    size_t nhdr = 0;
    int e;

    s3_target(x, object, &host, &path);
    if ((e = sigv4_uri_encode(buf_str(&path), false, &enc)) < 0 ||
        (query[0] && (e = sigv4_canonical_query(query, &cq)) < 0))
        goto out;
    s3_payload_hash(x, payload);
    sigv4_amz_date(time(NULL), date);
    if ((e = s3_signed_headers(x, hdr, &nhdr, md5b64)) < 0)
        goto out;
    struct sigv4_request sr = {.headers = hdr,
                               .nheaders = nhdr,
                               .method = x->method,
                               .host = buf_str(&host),
                               .path = buf_str(&path),
                               .query = query,
                               .payload_hash = payload,
                               .amz_date = date,
                               .region = s->base.conf.signing_region,
                               .service = "s3",
                               .access_key = s->access_key,
                               .secret_key = s->secret_key,
                               .session_token = s->session_token[0] ? s->session_token : NULL};
    if ((e = sigv4_sign(&sr, &auth, NULL)) < 0)
        goto out;
    buf_printf(&url, "%s://%s%s%s%s", s->scheme, buf_str(&host), buf_str(&enc), query[0] ? "?" : "",
               buf_str(&cq));
    if ((e = s3_request_headers(x, buf_str(&auth), date, payload, query)) < 0)
        goto out;
    curl_easy_setopt(x->easy, CURLOPT_URL, buf_str(&url));
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->headers);
out:
    buf_free(&path);
    buf_free(&enc);
    buf_free(&host);
    buf_free(&auth);
    buf_free(&url);
    buf_free(&cq);
    return e;
}

static void s3x_free(struct s3x *x)
{
    if (!x)
        return;
    if (x->easy)
        curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    buf_free(&x->resp);
    free(x->object);
    free(x->copy_source);
    free(x);
}

/* A transfer, not yet signed (s3_sign). */
static struct s3x *s3x_init(struct s3region *s, const char *method, const char *object,
                            const char *query, const void *body, size_t len, size_t max,
                            const char *range, bool create_only)
{
    struct s3x *x = calloc(1, sizeof(*x));
    if (!x || !(x->easy = curl_easy_init())) {
        free(x);
        return NULL;
    }
    x->s = s;
    x->method = method;
    x->create_only = create_only;
    snprintf(x->range, sizeof(x->range), "%s", range ? range : "");
    if (object && !(x->object = strdup(object))) {
        s3x_free(x);
        return NULL;
    }
    x->body = body;
    x->body_len = len;
    x->max = max;
    snprintf(x->what, sizeof(x->what), "%s s3://%s/%s%s%s", method, s->base.conf.bucket,
             object ? object : "", query[0] ? "?" : "", query);
    CURL *h = x->easy;
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s3_write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->curl_err);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, s->base.conf.tls_verify ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, s->base.conf.tls_verify ? 2L : 0L);
    if (s->base.conf.ca_file[0])
        curl_easy_setopt(h, CURLOPT_CAINFO, s->base.conf.ca_file);
    if (s->max_speed)
        curl_easy_setopt(h, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)s->max_speed);
    if (!strcmp(method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(method, "PUT")) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, s3_read_cb);
        curl_easy_setopt(h, CURLOPT_READDATA, x);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
    } else if (!strcmp(method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? (const char *)body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    } else if (strcmp(method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }
    return x;
}

/* A transfer, signed and ready to start; create_only adds If-None-Match. */
static struct s3x *s3x_make(struct s3region *s, const char *method, const char *object,
                            const char *query, const void *body, size_t len, size_t max,
                            const char *range, bool create_only)
{
    struct s3x *x = s3x_init(s, method, object, query, body, len, max, range, create_only);
    if (x && s3_sign(x, object, query) < 0) {
        s3x_free(x);
        return NULL;
    }
    return x;
}

static struct s3x *s3x_new(struct s3region *s, const char *method, const char *object,
                           const char *query, const void *body, size_t len, size_t max,
                           const char *range)
{
    return s3x_make(s, method, object, query, body, len, max, range, false);
}

/* ---- results ----------------------------------------------------------- */

static bool s3_transient_status(long st, const char *code)
{
    return st >= 500 || st == 429 || st == 408 || !strcmp(code, "SlowDown") ||
           !strcmp(code, "RequestTimeout") || !strcmp(code, "InternalError") ||
           !strcmp(code, "ConditionalRequestConflict");
}

/* A refusal's class: 403 is the credentials or the bucket's policy
 * (access denied), except a skewed clock, which the clock fixes. */
static int s3_refusal(long status, const char *code)
{
    if (s3_transient_status(status, code))
        return CKS_E_REMOTE;
    if (status == 403 && strcmp(code, "RequestTimeTooSkewed"))
        return CKS_E_DENIED;
    return CKS_E_REJECTED;
}

/* The refusal in x->errmsg, with the store's whole message (s3xml.h
 * bounds it): "access denied (HTTP 403 Code): Message" for CKS_E_DENIED. */
static void s3x_refusal_text(struct s3x *x, const struct s3_error *se)
{
    bool denied = x->ret == CKS_E_DENIED;
    snprintf(x->errmsg, sizeof(x->errmsg), "region '%s': %.220s: %sHTTP %ld%s%.60s%s%s%s",
             x->s->base.conf.name, x->what, denied ? "access denied (" : "", x->status,
             se->code[0] ? " " : "", se->code, denied ? ")" : "", se->message[0] ? ": " : "",
             se->message);
}

/* Classifies a finished transfer: x->ret and x->errmsg. */
static void s3x_finish(struct s3x *x)
{
    const char *name = x->s->base.conf.name;
    struct s3_error se = {{0}, {0}, {0}, {0}};
    if (x->mc != CURLM_OK) {
        x->ret = CKS_E_REMOTE; /* the region's backoff retries it, on a new multi handle */
        snprintf(x->errmsg, sizeof(x->errmsg),
                 "region '%s': %.260s: curl multi handle failed: %.120s", name, x->what,
                 curl_multi_strerror(x->mc));
        return;
    }
    if (x->cc != CURLE_OK) {
        x->ret = x->too_big ? CKS_E_LIMIT : CKS_E_REMOTE;
        snprintf(x->errmsg, sizeof(x->errmsg), "region '%s': %.260s: %.120s", name, x->what,
                 x->too_big       ? "object larger than allowed"
                 : x->curl_err[0] ? x->curl_err
                                  : curl_easy_strerror(x->cc));
        return;
    }
    if (x->status >= 200 && x->status < 300 && x->copy_source && x->resp.len &&
        s3xml_error((const char *)x->resp.data, x->resp.len, &se) == 0) {
        /* CopyObject may fail after its 200 OK: the body says so */
        x->ret = s3_transient_status(0, se.code) ? CKS_E_REMOTE : CKS_E_REJECTED;
        snprintf(x->errmsg, sizeof(x->errmsg),
                 "region '%s': %.220s: HTTP %ld with error %.60s%s%.100s", name, x->what, x->status,
                 se.code, se.message[0] ? ": " : "", se.message);
        return;
    }
    if (x->status >= 200 && x->status < 300) {
        curl_off_t got = -1;
        x->ret = 0;
        if (x->expect_size &&
            curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &got) == CURLE_OK &&
            got >= 0 && (uint64_t)got != x->expect_size) {
            /* A torn upload left by a store that is not atomic: replace it. */
            log_warn("region '%s': %s: %lld bytes, expected %llu: writing it again", name, x->what,
                     (long long)got, (unsigned long long)x->expect_size);
            x->ret = -ENOENT;
        }
        return;
    }
    if (x->resp.len)
        s3xml_error((const char *)x->resp.data, x->resp.len, &se);
    if (x->status == 404 && strcmp(se.code, "NoSuchBucket")) {
        x->ret = -ENOENT;
        snprintf(x->errmsg, sizeof(x->errmsg), "region '%s': %.260s: not found", name, x->what);
        return;
    }
    x->ret = s3_refusal(x->status, se.code);
    if (x->create_only && x->status == 412)
        x->ret = -EEXIST;
    else if ((x->create_only || x->copy_source) &&
             (x->status == 501 || !strcmp(se.code, "NotImplemented")))
        x->ret = -ENOTSUP; /* the store cannot: not worth a retry */
    s3x_refusal_text(x, &se);
}

/* ---- the multi loop ---------------------------------------------------- */

static int s3_start(struct s3region *s, struct s3x *x)
{
    if (curl_multi_add_handle(s->multi, x->easy) != CURLM_OK)
        return -ENOMEM;
    x->next = s->active;
    s->active = x;
    return 0;
}

static void s3_unlink(struct s3region *s, struct s3x *x)
{
    for (struct s3x **pp = &s->active; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    curl_multi_remove_handle(s->multi, x->easy);
}

static void s3_req_complete(struct s3region *s, struct s3x *x);
static void s3_pump(struct s3region *s, int timeout_ms);

/* A refused HEAD carries no body, so no S3 error code: ask again with a
 * GET (only on this failure path) so the message can name the code. */
static void s3_explain(struct s3region *s, struct s3x *head)
{
    struct s3_error se = {{0}, {0}, {0}, {0}};
    struct s3x *x = s3x_new(s, "GET", head->object, "", NULL, 0, 64 << 10, NULL);
    if (!x)
        return;
    if (s3_start(s, x) == 0) {
        while (!x->done)
            s3_pump(s, 1000);
    }
    if (x->status >= 400 && x->resp.len &&
        s3xml_error((const char *)x->resp.data, x->resp.len, &se) == 0 && se.code[0]) {
        head->ret = s3_refusal(head->status, se.code);
        s3x_refusal_text(head, &se);
    }
    s3x_free(x);
}

static CURLM *s3_multi_new(const struct region_conf *conf)
{
    CURLM *m = curl_multi_init();
    unsigned conns = conf->connections ? conf->connections : 16;
    if (m) {
        curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)conns);
        curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)conns);
    }
    return m;
}

/* The multi handle failed (out of memory, a broken poll): nothing in it
 * can finish, so every transfer ends now with that error, and the next
 * ones get a fresh handle (kept if none can be made: they fail at
 * curl_multi_add_handle, or here again).  Without this, callers waiting
 * for x->done would pump a dead handle forever. */
static void s3_multi_failed(struct s3region *s, CURLMcode mc, struct s3x **done)
{
    while (s->active) {
        struct s3x *x = s->active;
        s3_unlink(s, x);
        x->mc = mc;
        x->later = *done;
        *done = x;
    }
    CURLM *fresh = s3_multi_new(&s->base.conf);
    if (fresh) {
        curl_multi_cleanup(s->multi);
        s->multi = fresh;
    }
}

/* curl_multi_perform and, with transfers running, curl_multi_poll; the
 * first failure of the handle, or CURLM_OK. */
static CURLMcode s3_multi_run(struct s3region *s, int timeout_ms)
{
    int running = 0;
    CURLMcode mc = curl_multi_perform(s->multi, &running);
    if (mc == CURLM_OK && running && timeout_ms > 0) {
        mc = curl_multi_poll(s->multi, NULL, 0, timeout_ms, NULL);
        if (mc == CURLM_OK)
            mc = curl_multi_perform(s->multi, &running);
    }
    return mc;
}

/* Runs the multi for up to timeout_ms and finishes completed transfers.
 * Completions are collected first and handed over after the multi's
 * message loop, because explaining a refusal runs another transfer. */
static void s3_pump(struct s3region *s, int timeout_ms)
{
    int left = 0;
    CURLMsg *m;
    struct s3x *done = NULL;
    CURLMcode mc = s3_multi_run(s, timeout_ms);
    while (mc == CURLM_OK && (m = curl_multi_info_read(s->multi, &left))) {
        struct s3x *x = NULL;
        if (m->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        x->cc = m->data.result;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
        s3_unlink(s, x);
        x->later = done;
        done = x;
    }
    if (mc != CURLM_OK)
        s3_multi_failed(s, mc, &done);
    while (done) {
        struct s3x *x = done;
        done = x->later;
        s3x_finish(x);
        if ((x->ret == CKS_E_REJECTED || x->ret == CKS_E_DENIED) && !strcmp(x->method, "HEAD") &&
            x->object)
            s3_explain(s, x);
        x->done = true;
        if (x->req)
            s3_req_complete(s, x);
    }
}

/* Synchronous: one transfer, start to end (other transfers progress too). */
static int s3_run(struct s3region *s, struct s3x *x)
{
    if (s3_start(s, x) < 0)
        return -ENOMEM;
    while (!x->done)
        s3_pump(s, 1000);
    if (x->ret < 0)
        region_set_error(&s->base, "%s", x->errmsg);
    return x->ret;
}

/* ---- operations -------------------------------------------------------- */

static int s3_simple(struct region *r, const char *method, const char *key, const void *body,
                     size_t len, size_t max, struct buf *out, const char *range)
{
    struct s3region *s = (struct s3region *)r;
    struct buf obj = BUF_INIT;
    s3_object(s, key, &obj);
    struct s3x *x = s3x_new(s, method, buf_str(&obj), "", body, len, max, range);
    buf_free(&obj);
    if (!x)
        return -ENOMEM;
    if (!strcmp(method, "HEAD"))
        x->expect_size = s->head_size;
    int e = s3_run(s, x);
    if (e == 0 && out) {
        buf_reset(out);
        e = buf_append(out, x->resp.data, x->resp.len);
    }
    s3x_free(x);
    return e;
}

static int s3_multipart(struct region *r, const char *key, const uint8_t *data, size_t len);

static int s3_put(struct region *r, const char *key, const void *data, size_t len)
{
    if (len >= ((struct s3region *)r)->multipart_min)
        return s3_multipart(r, key, data, len);
    return s3_simple(r, "PUT", key, data, len, 64 << 10, NULL, NULL);
}

static int s3_put_new(struct region *r, const char *key, const void *data, size_t len)
{
    struct s3region *s = (struct s3region *)r;
    struct buf obj = BUF_INIT;
    if (len >= s->multipart_min) {
        region_set_error(r,
                         "region '%s': creating \"%s\": %zu bytes; create-only puts are "
                         "single PUTs, below the multipart threshold (%zu bytes)",
                         r->conf.name, key, len, s->multipart_min);
        return -E2BIG;
    }
    s3_object(s, key, &obj);
    struct s3x *x = s3x_make(s, "PUT", buf_str(&obj), "", data, len, 64 << 10, NULL, true);
    buf_free(&obj);
    if (!x)
        return -ENOMEM;
    int e = s3_run(s, x);
    s3x_free(x);
    return e;
}

/* A CopyObject of key from src's bucket and prefix into r's: a PUT with
 * no body and a signed x-amz-copy-source.  query (UploadPartCopy:
 * "partNumber=N&uploadId=ID", with x->copy_range set by the caller before
 * s3_sign: see s3x_copy_part_new) or "". */
static struct s3x *s3x_copy_init(struct region *r, const struct region *src, const char *key,
                                 const char *query, const char *range)
{
    struct s3region *s = (struct s3region *)r;
    struct buf obj = BUF_INIT, from = BUF_INIT, enc = BUF_INIT;
    struct s3x *x = NULL;
    s3_object(s, key, &obj);
    buf_printf(&from, "/%s/", src->conf.bucket);
    s3_object((const struct s3region *)src, key, &from);
    if (sigv4_uri_encode(buf_str(&from), false, &enc) == 0)
        x = s3x_init(s, "PUT", buf_str(&obj), query, NULL, 0, 64 << 10, NULL, false);
    if (x && range)
        snprintf(x->copy_range, sizeof(x->copy_range), "%s", range);
    if (x && !(x->copy_source = strdup(buf_str(&enc)))) {
        s3x_free(x);
        x = NULL;
    }
    if (x) {
        snprintf(x->what, sizeof(x->what), "copy s3://%s/%s from region '%s' (s3://%s)",
                 r->conf.bucket, buf_str(&obj), src->conf.name, buf_str(&from) + 1);
        if (s3_sign(x, buf_str(&obj), query) < 0) {
            s3x_free(x);
            x = NULL;
        }
    }
    buf_free(&obj);
    buf_free(&from);
    buf_free(&enc);
    return x;
}

static struct s3x *s3x_copy_new(struct region *r, const struct region *src, const char *key)
{
    return s3x_copy_init(r, src, key, "", NULL);
}

static int s3_copy_parts(struct region *r, const struct region *src, const char *key,
                         uint64_t size);

static int s3_copy(struct region *r, const struct region *src, const char *key, uint64_t size)
{
    if (size > ((struct s3region *)r)->copy_max)
        return s3_copy_parts(r, src, key, size);
    struct s3x *x = s3x_copy_new(r, src, key);
    if (!x)
        return -ENOMEM;
    int e = s3_run((struct s3region *)r, x);
    s3x_free(x);
    return e;
}

static int s3_get(struct region *r, const char *key, size_t max, struct buf *out)
{
    int e = s3_simple(r, "GET", key, NULL, 0, max, out, NULL);
    if (e == CKS_E_LIMIT)
        region_set_error(r, "region '%s': object \"%s\" is larger than %zu bytes", r->conf.name,
                         key, max);
    return e;
}

static int s3_has(struct region *r, const char *key, uint64_t size)
{
    ((struct s3region *)r)->head_size = size;
    int e = s3_simple(r, "HEAD", key, NULL, 0, 0, NULL, NULL);
    return e == 0 ? 1 : e == -ENOENT ? 0 : e;
}

static int s3_get_range(struct region *r, const char *key, uint64_t off, size_t len,
                        struct buf *out)
{
    char range[64];
    if (len == 0) {
        buf_reset(out);
        return 0;
    }
    snprintf(range, sizeof(range), "bytes=%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + len - 1));
    return s3_simple(r, "GET", key, NULL, 0, len, out, range);
}

static int s3_del(struct region *r, const char *key)
{
    return s3_simple(r, "DELETE", key, NULL, 0, 64 << 10, NULL, NULL);
}

/* ---- list -------------------------------------------------------------- */

/* Raw query (sigv4 encodes it): S3 tokens and prefixes hold no '&'. */
static int s3_list_query(const char *prefix, const char *token, struct buf *q)
{
    if (strchr(prefix, '&') || (token && strchr(token, '&')))
        return -EINVAL;
    const char *page = getenv("CKPTSYNC_S3_LIST_PAGE"); /* small pages: tests of continuation */
    long n = page ? strtol(page, NULL, 10) : 0;
    buf_printf(q, "list-type=2&max-keys=%ld&prefix=%s",
               n > 0 && n <= S3_LIST_PAGE ? n : S3_LIST_PAGE, prefix);
    if (token)
        buf_printf(q, "&continuation-token=%s", token);
    return 0;
}

static int s3_list(struct region *r, const char *prefix,
                   int (*cb)(void *ud, const char *key, uint64_t size), void *ud)
{
    struct s3region *s = (struct s3region *)r;
    struct buf full = BUF_INIT, q = BUF_INIT;
    char *token = NULL;
    int e;
    s3_object(s, prefix, &full);
    size_t strip = full.len - strlen(prefix);
    do {
        struct s3_list l = {0};
        buf_reset(&q);
        if ((e = s3_list_query(buf_str(&full), token, &q)) < 0)
            break;
        struct s3x *x = s3x_new(s, "GET", NULL, buf_str(&q), NULL, 0, S3_MAX_RESPONSE, NULL);
        if (!x) {
            e = -ENOMEM;
            break;
        }
        r->requests++;
        e = s3_run(s, x);
        if (e == 0 && (e = s3xml_list((const char *)x->resp.data, x->resp.len, &l)) < 0)
            region_set_error(r, "region '%s': listing \"%s\": malformed answer", r->conf.name,
                             prefix);
        s3x_free(x);
        for (size_t i = 0; e == 0 && i < l.n; i++)
            if (strlen(l.items[i].key) >= strip)
                e = cb(ud, l.items[i].key + strip, l.items[i].size);
        free(token);
        token = e == 0 && l.truncated && l.next_token ? strdup(l.next_token) : NULL;
        s3_list_free(&l);
    } while (e == 0 && token);
    free(token);
    buf_free(&full);
    buf_free(&q);
    return e;
}

/* ---- multipart --------------------------------------------------------- */

static int s3_mp_call(struct s3region *s, const char *method, const char *object, const char *query,
                      const void *body, size_t len, struct buf *out)
{
    struct s3x *x = s3x_new(s, method, object, query, body, len, S3_MAX_RESPONSE, NULL);
    if (!x)
        return -ENOMEM;
    int e = s3_run(s, x);
    if (e == 0 && out)
        e = buf_append(out, x->resp.data, x->resp.len);
    s3x_free(x);
    return e;
}

static int s3_multipart(struct region *r, const char *key, const uint8_t *data, size_t len)
{
    struct s3region *s = (struct s3region *)r;
    struct buf obj = BUF_INIT, resp = BUF_INIT, q = BUF_INIT, done = BUF_INIT;
    char upload_id[1024];
    int e;
    s3_object(s, key, &obj);
    if ((e = s3_mp_call(s, "POST", buf_str(&obj), "uploads", NULL, 0, &resp)) < 0)
        goto out;
    if ((e = s3xml_upload_id((const char *)resp.data, resp.len, upload_id, sizeof(upload_id))) <
            0 ||
        strchr(upload_id, '&')) {
        region_set_error(r, "region '%s': starting a multipart upload of \"%s\": malformed answer",
                         r->conf.name, key);
        e = e < 0 ? e : CKS_E_FORMAT;
        goto out;
    }
    buf_puts(&done, "<CompleteMultipartUpload>");
    for (size_t off = 0, part = 1; off < len; off += s->part_size, part++) {
        size_t n = len - off < s->part_size ? len - off : s->part_size;
        struct s3x *x;
        buf_reset(&q);
        buf_printf(&q, "partNumber=%zu&uploadId=%s", part, upload_id);
        if (!(x = s3x_new(s, "PUT", buf_str(&obj), buf_str(&q), data + off, n, 64 << 10, NULL))) {
            e = -ENOMEM;
            break;
        }
        e = s3_run(s, x);
        char *etag = NULL;
        struct curl_header *h;
        if (e == 0 && curl_easy_header(x->easy, "ETag", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
            etag = h->value;
        if (e == 0 && !etag) {
            region_set_error(r, "region '%s': multipart part %zu of \"%s\": no ETag", r->conf.name,
                             part, key);
            e = CKS_E_REMOTE;
        }
        if (e == 0)
            buf_printf(&done, "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>", part,
                       etag);
        s3x_free(x);
        if (e < 0)
            break;
    }
    buf_puts(&done, "</CompleteMultipartUpload>");
    buf_reset(&q);
    buf_printf(&q, "uploadId=%s", upload_id);
    buf_reset(&resp);
    if (e == 0 &&
        (e = s3_mp_call(s, "POST", buf_str(&obj), buf_str(&q), done.data, done.len, &resp)) == 0 &&
        (e = s3xml_complete_ok((const char *)resp.data, resp.len)) < 0)
        region_set_error(r, "region '%s': completing the multipart upload of \"%s\" failed",
                         r->conf.name, key);
    if (e == 0)
        log_info("region '%s': \"%s\" (%zu bytes) uploaded in %zu parts", r->conf.name, key, len,
                 (len + s->part_size - 1) / s->part_size);
    if (e < 0) {
        char keep[sizeof(r->errmsg)];
        memcpy(keep, r->errmsg, sizeof(keep));
        s3_mp_call(s, "DELETE", buf_str(&obj), buf_str(&q), NULL, 0,
                   NULL); /* abort: no dangling parts */
        memcpy(r->errmsg, keep, sizeof(keep));
    }
out:
    buf_free(&obj);
    buf_free(&resp);
    buf_free(&q);
    buf_free(&done);
    return e;
}

/* ---- UploadPartCopy ------------------------------------------------------ */

/* Part `part` of the upload: bytes [off, off + n) of src's object, its
 * ETag (from the CopyPartResult body) appended to done. */
static int s3_copy_part(struct region *r, const struct region *src, const char *key,
                        const char *upload_id, size_t part, uint64_t off, uint64_t n,
                        struct buf *done)
{
    char q[1200], range[64], etag[256];
    snprintf(q, sizeof(q), "partNumber=%zu&uploadId=%s", part, upload_id);
    snprintf(range, sizeof(range), "bytes=%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + n - 1));
    struct s3x *x = s3x_copy_init(r, src, key, q, range);
    if (!x)
        return -ENOMEM;
    int e = s3_run((struct s3region *)r, x);
    if (e == 0 &&
        s3xml_copy_part_etag((const char *)x->resp.data, x->resp.len, etag, sizeof(etag)) < 0) {
        region_set_error(r, "region '%s': copying part %zu of \"%s\" from region '%s': no ETag",
                         r->conf.name, part, key, src->conf.name);
        e = CKS_E_REMOTE;
    }
    if (e == 0)
        buf_printf(done, "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>", part, etag);
    s3x_free(x);
    return e;
}

/* An object above copy_max (S3: 5 GiB, CopyObject's limit) copied as a
 * multipart upload whose parts are UploadPartCopy requests of copy_max
 * bytes each; aborted on failure, as s3_multipart. */
static int s3_copy_parts(struct region *r, const struct region *src, const char *key, uint64_t size)
{
    struct s3region *s = (struct s3region *)r;
    struct buf obj = BUF_INIT, resp = BUF_INIT, done = BUF_INIT;
    char upload_id[1024], q[1100];
    size_t part = 1;
    s3_object(s, key, &obj);
    int e = s3_mp_call(s, "POST", buf_str(&obj), "uploads", NULL, 0, &resp);
    if (e == 0 && ((e = s3xml_upload_id((const char *)resp.data, resp.len, upload_id,
                                        sizeof(upload_id))) < 0 ||
                   strchr(upload_id, '&'))) {
        region_set_error(r, "region '%s': starting the copy of \"%s\" in parts: malformed answer",
                         r->conf.name, key);
        e = e < 0 ? e : CKS_E_FORMAT;
    }
    if (e < 0)
        goto out;
    buf_puts(&done, "<CompleteMultipartUpload>");
    for (uint64_t off = 0; e == 0 && off < size; off += s->copy_max, part++)
        e = s3_copy_part(r, src, key, upload_id, part, off,
                         size - off < s->copy_max ? size - off : s->copy_max, &done);
    buf_puts(&done, "</CompleteMultipartUpload>");
    snprintf(q, sizeof(q), "uploadId=%s", upload_id);
    buf_reset(&resp);
    if (e == 0 && (e = s3_mp_call(s, "POST", buf_str(&obj), q, done.data, done.len, &resp)) == 0 &&
        (e = s3xml_complete_ok((const char *)resp.data, resp.len)) < 0)
        region_set_error(r,
                         "region '%s': completing the copy of \"%s\" from region '%s' in parts "
                         "failed",
                         r->conf.name, key, src->conf.name);
    if (e == 0)
        log_info("region '%s': \"%s\" (%llu bytes) copied from region '%s' in %zu parts",
                 r->conf.name, key, (unsigned long long)size, src->conf.name, part - 1);
    if (e < 0) {
        char keep[sizeof(r->errmsg)];
        memcpy(keep, r->errmsg, sizeof(keep));
        s3_mp_call(s, "DELETE", buf_str(&obj), q, NULL, 0, NULL); /* abort: no dangling parts */
        memcpy(r->errmsg, keep, sizeof(keep));
    }
out:
    buf_free(&obj);
    buf_free(&resp);
    buf_free(&done);
    return e;
}

/* ---- check ------------------------------------------------------------- */

static int s3_check(struct region *r)
{
    struct s3region *s = (struct s3region *)r;
    struct buf full = BUF_INIT, q = BUF_INIT;
    s3_object(s, "", &full);
    int e = s3_list_query(buf_str(&full), NULL, &q);
    struct s3x *x =
        e == 0 ? s3x_new(s, "GET", NULL, buf_str(&q), NULL, 0, S3_MAX_RESPONSE, NULL) : NULL;
    e = x ? s3_run(s, x) : -ENOMEM;
    s3x_free(x);
    buf_free(&full);
    buf_free(&q);
    return e;
}

/* ---- clock ------------------------------------------------------------- */

static double s3_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* region_clock: the Date of any HTTP answer to a HEAD of an object nobody
 * writes; a refusal counts (403 RequestTimeTooSkewed is exactly the case
 * worth measuring).  Only a request that got no answer, or an answer
 * without a Date, fails. */
static int s3_clock(struct region *r, struct region_clock *ret)
{
    struct s3region *s = (struct s3region *)r;
    struct buf obj = BUF_INIT;
    struct curl_header *h;
    time_t date = -1;
    char key[LAYOUT_KEY_MAX];
    layout_key(LAYOUT_PROBE, NULL, "clock", key);
    s3_object(s, key, &obj);
    struct s3x *x = s3x_new(s, "HEAD", buf_str(&obj), "", NULL, 0, 0, NULL);
    buf_free(&obj);
    if (!x)
        return -ENOMEM;
    double t0 = s3_now();
    int e = s3_run(s, x);
    double t1 = s3_now();
    if (x->mc == CURLM_OK && x->cc == CURLE_OK && x->status > 0 &&
        curl_easy_header(x->easy, "Date", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
        date = curl_getdate(h->value, NULL);
    if (date >= 0) {
        r->errmsg[0] = 0;
        ret->local = (t0 + t1) / 2;
        ret->store = (double)date + 0.5; /* Date is whole seconds */
        ret->error = (t1 - t0) / 2 + 0.5;
        e = 0;
    } else if (x->mc == CURLM_OK && x->cc == CURLE_OK && x->status > 0) {
        region_set_error(r, "region '%s': %.260s: HTTP %ld without a usable Date header",
                         r->conf.name, x->what, x->status);
        e = CKS_E_REMOTE;
    }
    s3x_free(x);
    return e < 0 ? e : 0;
}

/* ---- asynchronous ------------------------------------------------------ */

static void s3_req_complete(struct s3region *s, struct s3x *x)
{
    struct region_req *req = x->req;
    req->ret = x->ret;
    if (req->kind == RREQ_HAS)
        req->ret = x->ret == 0 ? 1 : x->ret == -ENOENT ? 0 : x->ret;
    if (req->kind == RREQ_GET && x->ret == 0) {
        buf_reset(&req->out);
        if (buf_append(&req->out, x->resp.data, x->resp.len) < 0)
            req->ret = -ENOMEM;
    }
    snprintf(req->errmsg, sizeof(req->errmsg), "%.*s", (int)sizeof(req->errmsg) - 1,
             req->ret < 0 ? x->errmsg : "");
    req->priv = NULL;
    req->next = s->parked;
    s->parked = req;
    s3x_free(x);
}

static int s3_submit(struct region *r, struct region_req *req)
{
    struct s3region *s = (struct s3region *)r;
    static const char *const methods[] = {
        [RREQ_HAS] = "HEAD", [RREQ_PUT] = "PUT", [RREQ_GET] = "GET", [RREQ_COPY] = "PUT"};
    bool parts = req->kind == RREQ_COPY && req->size > s->copy_max;
    if ((req->kind == RREQ_PUT && req->len >= s->multipart_min) || parts) {
        /* Rare (a chunk above 64 MiB, a copy above copy_max): done in
         * place, step by step. */
        req->ret = parts ? s3_copy_parts(r, req->src, req->key, req->size)
                         : s3_multipart(r, req->key, req->data, req->len);
        snprintf(req->errmsg, sizeof(req->errmsg), "%.*s", (int)sizeof(req->errmsg) - 1,
                 req->ret < 0 ? r->errmsg : "");
        req->next = s->parked;
        s->parked = req;
        return 0;
    }
    struct buf obj = BUF_INIT;
    s3_object(s, req->key, &obj);
    struct s3x *x = req->kind == RREQ_COPY
                        ? s3x_copy_new(r, req->src, req->key)
                        : s3x_new(s, methods[req->kind], buf_str(&obj), "",
                                  req->kind == RREQ_PUT ? req->data : NULL,
                                  req->kind == RREQ_PUT ? req->len : 0,
                                  req->kind == RREQ_GET ? req->max : 64 << 10, NULL);
    buf_free(&obj);
    if (!x)
        return -ENOMEM;
    x->req = req;
    x->expect_size = req->kind == RREQ_HAS ? req->size : 0;
    req->priv = x;
    if (s3_start(s, x) < 0) {
        s3x_free(x);
        return -ENOMEM;
    }
    return 0;
}

static struct region_req *s3_poll(struct region *r, int timeout_ms)
{
    struct s3region *s = (struct s3region *)r;
    if (!s->parked && s->active)
        s3_pump(s, timeout_ms);
    struct region_req *list = s->parked;
    s->parked = NULL;
    return list;
}

/* ---- lifetime ---------------------------------------------------------- */

static void s3_free(struct region *r)
{
    struct s3region *s = (struct s3region *)r;
    while (s->active) {
        struct s3x *x = s->active;
        s3_unlink(s, x);
        s3x_free(x);
    }
    if (s->multi)
        curl_multi_cleanup(s->multi);
    memset(s->secret_key, 0, sizeof(s->secret_key));
    memset(s->session_token, 0, sizeof(s->session_token));
    free(s);
}

static const struct region_ops s3_ops = {
    .kind = "s3",
    .put = s3_put,
    .put_new = s3_put_new,
    .get = s3_get,
    .get_range = s3_get_range,
    .has = s3_has,
    .list = s3_list,
    .del = s3_del,
    .check = s3_check,
    .copy = s3_copy,
    .clock = s3_clock,
    .free = s3_free,
    .submit = s3_submit,
    .poll = s3_poll,
};

int region_s3_new(const struct region_conf *conf, struct region **ret, struct buf *err)
{
    struct s3region *s;
    int e;
    pthread_once(&s3_once, s3_global_init);
    if (!s3_curl_ok) {
        buf_printf(err, "region '%s': libcurl failed to initialise", conf->name);
        return -EIO;
    }
    if (!(s = calloc(1, sizeof(*s))))
        return -ENOMEM;
    s->base.ops = &s3_ops;
    s->base.conf = *conf;
    s->base.preconditions = conf->no_preconditions ? 0 : -1; /* the caller probes */
    if ((e = s3_endpoint(s, err)) < 0 || (e = s3_credentials(s, err)) < 0) {
        s3_free(&s->base);
        return e;
    }
    if (!(s->multi = s3_multi_new(conf))) {
        s3_free(&s->base);
        return -ENOMEM;
    }
    unsigned conns = conf->connections ? conf->connections : 16;
    s->max_speed = conf->bandwidth ? (int64_t)(conf->bandwidth / conns) : 0;
    /* CKPTSYNC_S3_MULTIPART_MIN (bytes) lowers the threshold, for stores
     * with small request limits and for the tests. */
    const char *mp = getenv("CKPTSYNC_S3_MULTIPART_MIN");
    s->multipart_min = S3_MULTIPART_MIN;
    if (mp && strtoull(mp, NULL, 10) >= S3_PART_MIN)
        s->multipart_min = (size_t)strtoull(mp, NULL, 10);
    s->part_size = s->multipart_min / 2 > S3_PART_MIN ? s->multipart_min / 2 : S3_PART_MIN;
    /* CKPTSYNC_S3_COPY_MAX (bytes, at least 1 MiB) lowers the 5 GiB above
     * which a copy goes in parts (UploadPartCopy), for tests. */
    const char *cm = getenv("CKPTSYNC_S3_COPY_MAX");
    s->copy_max = S3_COPY_MAX;
    if (cm && strtoull(cm, NULL, 10) >= (1u << 20))
        s->copy_max = strtoull(cm, NULL, 10);
    *ret = &s->base;
    return 0;
}

/*
 * ctlproto.h — the control protocol codec (version 1): request and
 * response lines spoken on the daemon's unix socket.  The wire format is
 * documented for users in include/ckptsync/protocol.h; in short:
 *
 *   CKPTSYNC/1 commit path=/data/cloud_storage/r1/checkpoint-10 step=10\n
 *   OK {"snapshot":"..."}\n            or
 *   ERR notfound no%20such%20file\n
 *
 * Pure transform, no I/O: the daemon reads a line (at most
 * CTL_MAX_REQUEST bytes) and hands it to ctl_request_parse(), which takes
 * hostile input and rejects anything outside the grammar; it answers with
 * ctl_response_ok() or ctl_response_err().  The client does the reverse
 * with ctl_request_encode() and ctl_response_parse().
 *
 *   struct ctl_request r;
 *   ctl_request_init(&r, CTL_COMMIT);           fields at their "absent" values
 *   r.step = 10; ...; ctl_request_encode(&r, &line);
 *
 * Ownership: requests are plain values (fixed arrays, no pointers).  Every
 * function appending to a struct buf appends (it never resets it), except
 * the err and ret_msg buffers, which are reset first.  A parsed response
 * body points into the caller's line.
 *
 * Thread-safe: no global state.
 */
#ifndef CKS_CTLPROTO_H
#define CKS_CTLPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "ckptsync/protocol.h"

#define CTL_MAGIC CKS_PROTO_MAGIC
#define CTL_MAX_REQUEST CKS_PROTO_MAX_REQUEST   /* bytes of one request, with '\n' */
#define CTL_MAX_RESPONSE CKS_PROTO_MAX_RESPONSE /* bytes of one response, with '\n' */
#define CTL_MAX_TIMEOUT CKS_PROTO_MAX_TIMEOUT   /* seconds (one week) */
#define CTL_PATH_MAX 4096u                      /* path buffer, with its NUL */
#define CTL_REGION_MAX 64u                      /* region buffer, with its NUL */
#define CTL_CODE_MAX 32u                        /* error code buffer, with its NUL */
#define CTL_CLIENT_SLACK CKS_PROTO_CLIENT_SLACK /* seconds a client waits past a timeout */
#define CTL_REPORT_TIMEOUT_MS CKS_PROTO_REPORT_TIMEOUT_MS /* the whole of a restored exchange */
#define CTL_MAX_NODES CKS_PROTO_MAX_NODES                 /* commit nodes= */

enum ctl_verb { CTL_PING, CTL_COMMIT, CTL_STATUS, CTL_FLUSH, CTL_RETRY, CTL_RESTORED };
/* An absent wait= is CTL_WAIT_NONE: answer at once. */
enum ctl_wait { CTL_WAIT_NONE, CTL_WAIT_DURABLE, CTL_WAIT_REPLICATED };
/* restored result=; CTL_RESULT_NONE is "absent" (never valid on the wire). */
enum ctl_result { CTL_RESULT_NONE, CTL_RESULT_OK, CTL_RESULT_FAILED };

/* One request.  Fields a verb does not take keep their ctl_request_init()
 * values ("" or -1), so two requests compare equal field by field. */
struct ctl_request {
    enum ctl_verb verb;
    char path[CTL_PATH_MAX];     /* commit: absolute path, never empty */
    int64_t step;                /* commit: >= 0, or -1 when absent */
    enum ctl_wait wait;          /* commit, flush */
    int64_t timeout;             /* commit timeout= / flush deadline=:
                                  * 0..CTL_MAX_TIMEOUT seconds, -1 absent */
    char region[CTL_REGION_MAX]; /* retry: [A-Za-z0-9_-]{1,63} */
    int64_t bytes;               /* restored: bytes, files restored and the */
    int64_t files;               /*   microseconds it took, each 0..2^63-1, */
    int64_t usec;                /*   -1 when absent */
    enum ctl_result result;      /* restored */
    int64_t nodes;               /* commit: the caller's node count and its */
    int64_t node_rank;           /*   rank, 1..CTL_MAX_NODES and 0..nodes-1,
                                  *   given together or both -1 (absent) */
};

/* A split response line: ok with a body, or an error code (message apart). */
struct ctl_response {
    bool ok;
    const char *body;        /* OK: the JSON object, inside the line, */
    size_t body_len;         /*     not NUL-terminated */
    char code[CTL_CODE_MAX]; /* ERR: [a-z][a-z0-9_]{0,30} */
};

/* Error codes a daemon answers with (others may appear; see ctl_err_errno). */
#define CTL_ERR_BADREQUEST "badrequest" /* malformed or invalid request */
#define CTL_ERR_NOTFOUND "notfound"     /* path or region does not exist */
#define CTL_ERR_NOTWATCHED "notwatched" /* path is not under the watch root */
#define CTL_ERR_TIMEOUT "timeout"       /* the wait did not finish in time */
#define CTL_ERR_DEGRADED "degraded"     /* durability failure; refusing work */
#define CTL_ERR_BUSY "busy"             /* no connection slot free; try again */
#define CTL_ERR_INTERNAL "internal"     /* anything else */
#define CTL_ERR_WRONGNODE "wrongnode"   /* commit's nodes/node_rank differ from the daemon's */

void ctl_request_init(struct ctl_request *r, enum ctl_verb verb);
bool ctl_request_equal(const struct ctl_request *a, const struct ctl_request *b);
const char *ctl_verb_name(enum ctl_verb verb);
const char *ctl_wait_name(enum ctl_wait wait);
const char *ctl_result_name(enum ctl_result result); /* NULL for CTL_RESULT_NONE */

/* Parses one request line; len counts the final '\n'.  0, or CKS_E_LIMIT
 * (longer than CTL_MAX_REQUEST), CKS_E_VERSION (another CKPTSYNC/<n>), or
 * CKS_E_FORMAT (anything else), with a one-line reason in err (may be
 * NULL).  *ret is fully written on success, unspecified on failure. */
int ctl_request_parse(const char *line, size_t len, struct ctl_request *ret, struct buf *err);
/* Appends the canonical line for r, '\n' included.  0, -EINVAL when r is
 * not a valid request (the same rules as the parser), -ENOMEM. */
int ctl_request_encode(const struct ctl_request *r, struct buf *out);

/* Appends "OK <json_object>\n".  json_object must be one line starting with
 * '{' and ending with '}' (-EINVAL otherwise); CKS_E_LIMIT when the line
 * would exceed CTL_MAX_RESPONSE. */
int ctl_response_ok(struct buf *out, const char *json_object);
/* Appends "ERR <code> <msg>\n", msg percent-encoded (NULL or "" = no
 * message) and cut so the line fits CTL_MAX_RESPONSE.  -EINVAL for a code
 * outside [a-z][a-z0-9_]{0,30}. */
int ctl_response_err(struct buf *out, const char *code, const char *msg);
/* Splits one response line (len counts the '\n').  For ERR, the decoded
 * message goes to ret_msg (may be NULL).  0, CKS_E_LIMIT, CKS_E_FORMAT. */
int ctl_response_parse(const char *line, size_t len, struct ctl_response *ret, struct buf *ret_msg);

/* The error code a daemon answers for a failure err (negative errno or
 * CKS_E_*), and the negative errno a client maps a code to. */
const char *ctl_err_code(int err);
int ctl_err_errno(const char *code);

#endif

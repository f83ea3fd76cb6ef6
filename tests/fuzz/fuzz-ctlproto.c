/*
 * fuzz-ctlproto.c — the control protocol codec on arbitrary bytes.
 *
 * Each input is tried as a request line and as a response line.
 * Requests: whatever parses must encode, parse again to an equal struct,
 * and encode again to the same bytes (the encoder is canonical); a
 * rejection must come with a reason; a commit's nodes/node_rank parse
 * together, the rank below the count.  Responses: an OK line re-encodes to
 * the same bytes; an ERR line re-encodes (code + decoded message) to a
 * line that splits to the same code and message.  Any difference aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/ctlproto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void request_round_trip(const char *line, size_t len)
{
    struct ctl_request r, back;
    struct buf err = BUF_INIT, out = BUF_INIT, again = BUF_INIT;

    if (ctl_request_parse(line, len, &r, &err) < 0) {
        if (err.len == 0)
            abort();
        buf_free(&err);
        return;
    }
    if ((r.nodes < 0) != (r.node_rank < 0) || r.nodes > CTL_MAX_NODES ||
        (r.nodes >= 0 && (r.nodes == 0 || r.node_rank >= r.nodes || r.verb != CTL_COMMIT)))
        abort();
    if (ctl_request_encode(&r, &out) < 0 || out.len > CTL_MAX_REQUEST)
        abort();
    if (ctl_request_parse((const char *)out.data, out.len, &back, &err) < 0)
        abort();
    if (!ctl_request_equal(&r, &back))
        abort();
    if (ctl_request_encode(&back, &again) < 0 || again.len != out.len ||
        memcmp(again.data, out.data, out.len) != 0)
        abort();
    buf_free(&err);
    buf_free(&out);
    buf_free(&again);
}

static void ok_round_trip(const struct ctl_response *r, const char *line, size_t len)
{
    struct buf body = BUF_INIT, out = BUF_INIT;

    if (buf_append(&body, r->body, r->body_len) < 0)
        abort();
    if (ctl_response_ok(&out, buf_str(&body)) < 0 || out.len != len ||
        memcmp(out.data, line, len) != 0)
        abort();
    buf_free(&body);
    buf_free(&out);
}

static void err_round_trip(const struct ctl_response *r, const struct buf *msg, size_t len)
{
    struct buf out = BUF_INIT, msg2 = BUF_INIT;
    struct ctl_response back;

    if (ctl_response_err(&out, r->code, buf_str(msg)) < 0)
        abort();
    if (ctl_response_parse((const char *)out.data, out.len, &back, &msg2) < 0 || back.ok)
        abort();
    /* Re-encoding may triple the message; compare when it cannot be cut. */
    if (strcmp(back.code, r->code) != 0 ||
        (len * 3 + 64 < CTL_MAX_RESPONSE &&
         (msg2.len != msg->len || memcmp(buf_str(&msg2), buf_str(msg), msg->len) != 0)))
        abort();
    buf_free(&out);
    buf_free(&msg2);
}

static void response_round_trip(const char *line, size_t len)
{
    struct ctl_response r;
    struct buf msg = BUF_INIT;

    if (ctl_response_parse(line, len, &r, &msg) == 0) {
        if (r.ok)
            ok_round_trip(&r, line, len);
        else
            err_round_trip(&r, &msg, len);
    }
    buf_free(&msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    request_round_trip((const char *)data, size);
    response_round_trip((const char *)data, size);
    return 0;
}

/*
 * json.h — a tiny JSON writer for --json output and the control protocol.
 *
 * struct json j; json_init(&j, &buf); json_obj_begin(&j); json_key(&j, "a");
 * json_u64(&j, 1); json_obj_end(&j);
 * Commas are inserted automatically.  Strings are escaped per RFC 8259;
 * bytes that are not valid UTF-8 are written as \u00XX of the byte value
 * so output is always valid JSON.  Errors (ENOMEM) are sticky in j->err.
 */
#ifndef CKS_JSON_H
#define CKS_JSON_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"

#define JSON_MAX_DEPTH 32

struct json {
    struct buf *out;
    int depth;
    bool need_comma[JSON_MAX_DEPTH];
    bool after_key;
    int err;
};

void json_init(struct json *j, struct buf *out);
void json_obj_begin(struct json *j);
void json_obj_end(struct json *j);
void json_arr_begin(struct json *j);
void json_arr_end(struct json *j);
void json_key(struct json *j, const char *key);
void json_str(struct json *j, const char *s);
void json_strn(struct json *j, const char *s, size_t n);
void json_u64(struct json *j, uint64_t v);
void json_i64(struct json *j, int64_t v);
/* The shortest decimal that reads back (base/numfmt.h); null when not finite. */
void json_double(struct json *j, double v);
void json_bool(struct json *j, bool v);
void json_null(struct json *j);

#endif

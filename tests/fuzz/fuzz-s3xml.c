/*
 * fuzz-s3xml.c — the four S3 XML parsers on arbitrary bytes.
 *
 * Every parser sees every input.  Besides not crashing or leaking, the
 * results must keep the promises of s3xml.h, or the run aborts: a list
 * holds at most S3XML_MAX_ITEMS keys of 1..S3_KEY_MAX bytes, a truncated
 * list carries a token, a failed call leaves its output empty, error
 * fields are NUL-terminated and free of control characters, an upload id
 * fits its buffer, and only the documented error codes come back.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "store/s3xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_code(int r)
{
    if (r != 0 && r != CKS_E_FORMAT && r != CKS_E_LIMIT && r != -ENOMEM)
        abort();
}

static void check_text(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n == cap)
        abort();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            abort();
}

static void fuzz_list(const char *xml, size_t size)
{
    struct s3_list l;
    int r = s3xml_list(xml, size, &l);
    check_code(r);
    if (r < 0 && (l.items || l.n || l.cap || l.truncated || l.next_token))
        abort();
    if (l.n > S3XML_MAX_ITEMS || l.n > l.cap || (l.truncated && !l.next_token))
        abort();
    for (size_t i = 0; i < l.n; i++) {
        size_t n = strlen(l.items[i].key);
        if (n == 0 || n > S3_KEY_MAX)
            abort();
    }
    s3_list_free(&l);
}

static int fuzz_error(const char *xml, size_t size)
{
    struct s3_error e;
    int r = s3xml_error(xml, size, &e);
    check_code(r);
    check_text(e.code, sizeof(e.code));
    check_text(e.message, sizeof(e.message));
    check_text(e.key, sizeof(e.key));
    check_text(e.request_id, sizeof(e.request_id));
    if ((r == 0) != (e.code[0] != 0))
        abort();
    return r;
}

static void fuzz_upload_id(const char *xml, size_t size, size_t cap)
{
    char id[1024];
    memset(id, 'x', sizeof(id));
    int r = s3xml_upload_id(xml, size, id, cap);
    check_code(r);
    size_t n = strnlen(id, cap);
    if (n == cap || (r == 0) != (n > 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *xml = (const char *)data;
    fuzz_list(xml, size);
    int er = fuzz_error(xml, size);
    fuzz_upload_id(xml, size, 1024);
    fuzz_upload_id(xml, size, 16);
    int r = s3xml_complete_ok(xml, size);
    if (r != CKS_E_REMOTE)
        check_code(r);
    /* An <Error> in a 200 is an error document, whatever it holds. */
    if (er == 0 && r != CKS_E_REMOTE)
        abort();
    return 0;
}

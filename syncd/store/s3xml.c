/*
 * s3xml.c — S3 XML answers through expat, bounded.
 *
 * Design: one small SAX walker serves all four documents.  It keeps the
 * path of open elements as a stack of known local names (anything else is
 * EL_OTHER), so "is this the object key?" is a test on the path
 * (ListBucketResult/Contents/Key), never on the name alone.  Text is kept
 * only while inside a leaf we read, into a fixed S3XML_MAX_TEXT array;
 * beyond that it is counted as overflow, not stored, so memory per parse
 * is the array plus the list being built, whatever the document.  A leaf
 * we read must not contain elements (mixed content is refused).  Handlers
 * record the first error and stop the parser; expat may still deliver a
 * callback or two after XML_StopParser, so every handler returns at once
 * once an error is recorded.  DOCTYPE is refused outright: S3 never sends
 * one, and without it no entity can be declared, which disposes of entity
 * expansion and external entities in one rule.  S3 may send blanks ahead
 * of the XML declaration while it works on a CompleteMultipartUpload (to
 * keep the connection alive), so leading blanks are skipped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <expat.h>

#include "base/err.h"
#include "store/s3xml.h"

enum el {
    EL_OTHER,
    EL_ERROR,
    EL_CODE,
    EL_MESSAGE,
    EL_KEY,
    EL_REQUEST_ID,
    EL_LIST,
    EL_CONTENTS,
    EL_SIZE,
    EL_TRUNCATED,
    EL_TOKEN,
    EL_INIT,
    EL_UPLOAD_ID,
    EL_COMPLETE,
    EL_COPY_PART,
    EL_ETAG,
    EL_COUNT
};

static const char *const el_names[EL_COUNT] = {
    [EL_ERROR] = "Error",
    [EL_CODE] = "Code",
    [EL_MESSAGE] = "Message",
    [EL_KEY] = "Key",
    [EL_REQUEST_ID] = "RequestId",
    [EL_LIST] = "ListBucketResult",
    [EL_CONTENTS] = "Contents",
    [EL_SIZE] = "Size",
    [EL_TRUNCATED] = "IsTruncated",
    [EL_TOKEN] = "NextContinuationToken",
    [EL_INIT] = "InitiateMultipartUploadResult",
    [EL_UPLOAD_ID] = "UploadId",
    [EL_COMPLETE] = "CompleteMultipartUploadResult",
    [EL_COPY_PART] = "CopyPartResult",
    [EL_ETAG] = "ETag",
};

/* Which roots a call accepts. */
enum mode { MODE_ERROR, MODE_LIST, MODE_UPLOAD, MODE_COMPLETE, MODE_COPY_PART };

struct walker {
    XML_Parser p;
    enum mode mode;
    int err;
    unsigned depth;
    unsigned char path[S3XML_MAX_DEPTH];
    enum el field; /* leaf whose text is being kept, or EL_OTHER */
    char text[S3XML_MAX_TEXT + 1];
    size_t tlen;
    bool overflow;
    /* results, by mode */
    struct s3_error *error;
    struct s3_list *list;
    char *item_key;
    uint64_t item_size;
    bool have_key, have_size, have_truncated, have_token;
    char *upload;
    size_t upload_cap;
    bool have_upload;
};

static void fail(struct walker *w, int err)
{
    if (!w->err) {
        w->err = err;
        XML_StopParser(w->p, XML_FALSE);
    }
}

static enum el el_lookup(const char *name)
{
    const char *colon = strrchr(name, ':');
    const char *local = colon ? colon + 1 : name;
    for (int i = 1; i < EL_COUNT; i++)
        if (!strcmp(local, el_names[i]))
            return (enum el)i;
    return EL_OTHER;
}

static bool root_ok(enum mode mode, enum el root)
{
    switch (mode) {
    case MODE_ERROR:
        return root == EL_ERROR;
    case MODE_LIST:
        return root == EL_LIST;
    case MODE_UPLOAD:
        return root == EL_INIT;
    case MODE_COMPLETE:
        return root == EL_COMPLETE || root == EL_ERROR;
    case MODE_COPY_PART:
        return root == EL_COPY_PART;
    }
    return false;
}

/* The leaf at the top of the path, if it is one we read. */
static enum el field_of(const struct walker *w)
{
    enum el root = w->path[0], top = w->path[w->depth - 1];
    if (w->depth == 2 && root == EL_ERROR &&
        (top == EL_CODE || top == EL_MESSAGE || top == EL_KEY || top == EL_REQUEST_ID))
        return top;
    if (w->depth == 2 && root == EL_LIST && (top == EL_TRUNCATED || top == EL_TOKEN))
        return top;
    if (w->depth == 3 && root == EL_LIST && w->path[1] == EL_CONTENTS &&
        (top == EL_KEY || top == EL_SIZE))
        return top;
    if (w->depth == 2 && root == EL_INIT && top == EL_UPLOAD_ID)
        return top;
    if (w->depth == 2 && root == EL_COPY_PART && top == EL_ETAG)
        return top;
    return EL_OTHER;
}

static bool at_contents(const struct walker *w)
{
    return w->depth == 2 && w->path[0] == EL_LIST && w->path[1] == EL_CONTENTS;
}

/* ---- text helpers ------------------------------------------------------- */

/* Copies at most cap-1 bytes, cut at a UTF-8 boundary, control bytes
 * turned into spaces (the text ends up in log lines). */
static void copy_clean(char *dst, size_t cap, const char *src, size_t n)
{
    if (n > cap - 1) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    dst[n] = 0;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The kept text without surrounding blanks, NUL-terminated in place. */
static const char *text_trimmed(struct walker *w)
{
    size_t a = 0, b = w->tlen;
    while (a < b && is_blank(w->text[a]))
        a++;
    while (b > a && is_blank(w->text[b - 1]))
        b--;
    w->text[b] = 0;
    return w->text + a;
}

static int parse_u64(const char *s, uint64_t *ret)
{
    uint64_t v = 0;
    if (!*s)
        return CKS_E_FORMAT;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return CKS_E_FORMAT;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *ret = v;
    return 0;
}

/* ---- leaves ------------------------------------------------------------- */

static int error_field(struct walker *w, enum el f)
{
    struct s3_error *e = w->error;
    if (f == EL_CODE)
        copy_clean(e->code, sizeof(e->code), w->text, w->tlen);
    else if (f == EL_MESSAGE)
        copy_clean(e->message, sizeof(e->message), w->text, w->tlen);
    else if (f == EL_KEY)
        copy_clean(e->key, sizeof(e->key), w->text, w->tlen);
    else
        copy_clean(e->request_id, sizeof(e->request_id), w->text, w->tlen);
    return 0;
}

static int list_truncated(struct walker *w)
{
    const char *t = text_trimmed(w);
    if (w->have_truncated || (strcmp(t, "true") && strcmp(t, "false")))
        return CKS_E_FORMAT;
    w->have_truncated = true;
    w->list->truncated = !strcmp(t, "true");
    return 0;
}

static int list_token(struct walker *w)
{
    if (w->overflow)
        return CKS_E_LIMIT;
    if (w->have_token || memchr(w->text, 0, w->tlen))
        return CKS_E_FORMAT;
    w->have_token = true;
    if (w->tlen == 0)
        return 0;
    w->list->next_token = strndup(w->text, w->tlen);
    return w->list->next_token ? 0 : -ENOMEM;
}

static int item_key(struct walker *w)
{
    if (w->overflow || w->tlen > S3_KEY_MAX)
        return CKS_E_LIMIT;
    if (w->have_key || w->tlen == 0 || memchr(w->text, 0, w->tlen))
        return CKS_E_FORMAT;
    w->have_key = true;
    w->item_key = strndup(w->text, w->tlen);
    return w->item_key ? 0 : -ENOMEM;
}

static int item_size(struct walker *w)
{
    if (w->have_size)
        return CKS_E_FORMAT;
    w->have_size = true;
    return parse_u64(text_trimmed(w), &w->item_size);
}

static int upload_id(struct walker *w)
{
    if (w->have_upload || w->tlen == 0 || memchr(w->text, 0, w->tlen))
        return CKS_E_FORMAT;
    if (w->overflow || w->tlen >= w->upload_cap)
        return CKS_E_LIMIT;
    w->have_upload = true;
    memcpy(w->upload, w->text, w->tlen);
    w->upload[w->tlen] = 0;
    return 0;
}

static int leaf_done(struct walker *w)
{
    if (w->path[0] == EL_ERROR)
        return error_field(w, w->field);
    switch (w->field) {
    case EL_TRUNCATED:
        return list_truncated(w);
    case EL_TOKEN:
        return list_token(w);
    case EL_KEY:
        return item_key(w);
    case EL_SIZE:
        return item_size(w);
    case EL_UPLOAD_ID:
    case EL_ETAG: /* CopyPartResult: kept where the upload id would be */
        return upload_id(w);
    default:
        return 0;
    }
}

/* ---- list items --------------------------------------------------------- */

static int item_begin(struct walker *w)
{
    if (w->list->n >= S3XML_MAX_ITEMS)
        return CKS_E_LIMIT;
    w->have_key = w->have_size = false;
    w->item_size = 0;
    return 0;
}

static int item_end(struct walker *w)
{
    struct s3_list *l = w->list;
    if (!w->have_key || !w->have_size)
        return CKS_E_FORMAT;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        if (cap > S3XML_MAX_ITEMS)
            cap = S3XML_MAX_ITEMS;
        struct s3_list_item *p = realloc(l->items, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->items = p;
        l->cap = cap;
    }
    l->items[l->n].key = w->item_key;
    l->items[l->n].size = w->item_size;
    l->n++;
    w->item_key = NULL;
    return 0;
}

/* ---- expat handlers ----------------------------------------------------- */

/* The check run when an element opens; 0 or the error to stop with. */
static int element_open(struct walker *w, const XML_Char *name)
{
    if (w->field != EL_OTHER)
        return CKS_E_FORMAT;
    if (w->depth == S3XML_MAX_DEPTH)
        return CKS_E_LIMIT;
    w->path[w->depth++] = (unsigned char)el_lookup(name);
    if (w->depth == 1 && !root_ok(w->mode, w->path[0]))
        return CKS_E_FORMAT;
    if (at_contents(w)) {
        int r = item_begin(w);
        if (r < 0)
            return r;
    }
    w->field = field_of(w);
    w->tlen = 0;
    w->overflow = false;
    return 0;
}

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **atts)
{
    struct walker *w = ud;
    int r = w->err ? 0 : element_open(w, name);
    if (r < 0)
        fail(w, r);
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
    struct walker *w = ud;
    int r = 0;
    if (w->err)
        return;
    if (w->field != EL_OTHER)
        r = leaf_done(w);
    else if (at_contents(w))
        r = item_end(w);
    w->field = EL_OTHER;
    w->depth--;
    if (r < 0)
        fail(w, r);
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
    struct walker *w = ud;
    if (w->err || w->field == EL_OTHER || len <= 0)
        return;
    size_t n = (size_t)len, room = S3XML_MAX_TEXT - w->tlen;
    if (n > room) {
        n = room;
        w->overflow = true;
    }
    memcpy(w->text + w->tlen, s, n);
    w->tlen += n;
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
                               const XML_Char *pubid, int has_internal_subset)
{
    fail(ud, CKS_E_FORMAT);
}

static void XMLCALL on_entity(void *ud, const XML_Char *name, int is_param, const XML_Char *value,
                              int value_len, const XML_Char *base, const XML_Char *sysid,
                              const XML_Char *pubid, const XML_Char *notation)
{
    fail(ud, CKS_E_FORMAT);
}

/* ---- driver ------------------------------------------------------------- */

static int walk(struct walker *w, const char *xml, size_t len)
{
    if (len > S3XML_MAX_DOC)
        return CKS_E_LIMIT;
    if (!xml)
        return CKS_E_FORMAT;
    while (len > 0 && is_blank(*xml))
        xml++, len--;
    if (len == 0)
        return CKS_E_FORMAT;
    w->p = XML_ParserCreate(NULL);
    if (!w->p)
        return -ENOMEM;
    XML_SetUserData(w->p, w);
    XML_SetElementHandler(w->p, on_start, on_end);
    XML_SetCharacterDataHandler(w->p, on_text);
    XML_SetStartDoctypeDeclHandler(w->p, on_doctype);
    XML_SetEntityDeclHandler(w->p, on_entity);
    XML_SetParamEntityParsing(w->p, XML_PARAM_ENTITY_PARSING_NEVER);
    enum XML_Status st = XML_Parse(w->p, xml, (int)len, XML_TRUE);
    int r = w->err;
    if (r == 0 && st != XML_STATUS_OK)
        r = XML_GetErrorCode(w->p) == XML_ERROR_NO_MEMORY ? -ENOMEM : CKS_E_FORMAT;
    XML_ParserFree(w->p);
    w->p = NULL;
    return r;
}

int s3xml_error(const char *xml, size_t len, struct s3_error *ret)
{
    struct walker w = {.mode = MODE_ERROR, .error = ret};
    memset(ret, 0, sizeof(*ret));
    int r = walk(&w, xml, len);
    if (r == 0 && !ret->code[0])
        r = CKS_E_FORMAT;
    if (r < 0)
        memset(ret, 0, sizeof(*ret));
    return r;
}

int s3xml_list(const char *xml, size_t len, struct s3_list *ret)
{
    struct walker w = {.mode = MODE_LIST, .list = ret};
    memset(ret, 0, sizeof(*ret));
    int r = walk(&w, xml, len);
    free(w.item_key);
    if (r == 0 && ret->truncated && !ret->next_token)
        r = CKS_E_FORMAT;
    if (r < 0)
        s3_list_free(ret);
    return r;
}

void s3_list_free(struct s3_list *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i].key);
    free(l->items);
    free(l->next_token);
    memset(l, 0, sizeof(*l));
}

/* The one text element of mode (an UploadId, a CopyPartResult's ETag)
 * into ret[0 .. cap). */
static int walk_one(enum mode mode, const char *xml, size_t len, char *ret, size_t cap)
{
    struct walker w = {.mode = mode, .upload = ret, .upload_cap = cap};
    if (cap == 0)
        return CKS_E_LIMIT;
    ret[0] = 0;
    int r = walk(&w, xml, len);
    if (r == 0 && !w.have_upload)
        r = CKS_E_FORMAT;
    if (r < 0)
        ret[0] = 0;
    return r;
}

int s3xml_upload_id(const char *xml, size_t len, char *ret, size_t cap)
{
    return walk_one(MODE_UPLOAD, xml, len, ret, cap);
}

int s3xml_copy_part_etag(const char *xml, size_t len, char *ret, size_t cap)
{
    return walk_one(MODE_COPY_PART, xml, len, ret, cap);
}

int s3xml_complete_ok(const char *xml, size_t len)
{
    struct s3_error e;
    struct walker w = {.mode = MODE_COMPLETE, .error = &e};
    memset(&e, 0, sizeof(e));
    int r = walk(&w, xml, len);
    if (r < 0)
        return r;
    return w.path[0] == EL_ERROR ? CKS_E_REMOTE : 0;
}

/*
 * s3xml.h — the few S3 XML answers the S3 region backend reads, parsed
 * with libexpat and bounded against a hostile or broken server.
 *
 * Purpose: turn a response body into plain C values: an error document
 * (<Error>), a ListObjectsV2 page (<ListBucketResult>), the upload id of
 * InitiateMultipartUpload, and the verdict of CompleteMultipartUpload
 * (which S3 may answer with "200 OK" and an <Error> body).
 *
 * Calling sequence: one call per response body, e.g.
 *   struct s3_list l;
 *   if (s3xml_list(body, len, &l) == 0) { ... l.items[i].key ... }
 *   s3_list_free(&l);          (also safe after a failed s3xml_list)
 *
 * Matching: elements are matched by local name, so the S3 default
 * namespace (xmlns="http://s3.amazonaws.com/doc/2006-03-01/") or any
 * prefix ("s3:Key") is accepted; unknown elements and attributes are
 * ignored; elements are recognised only at their place in the document
 * (a <Key> under <Owner> is not an object key).  Key and token text is
 * returned exactly as sent (no trimming; with EncodingType=url the caller
 * decodes); Size and IsTruncated tolerate surrounding blanks.
 *
 * Bounds (CKS_E_LIMIT beyond): S3XML_MAX_DOC bytes of document,
 * S3XML_MAX_DEPTH nested elements, S3XML_MAX_ITEMS objects per page,
 * S3_KEY_MAX bytes per key, S3XML_MAX_TEXT bytes of text kept per element
 * (text of elements we do not read is not kept at all).  Any DOCTYPE is
 * refused (CKS_E_FORMAT): S3 never sends one, and refusing it rules out
 * entity expansion ("billion laughs") and external entities altogether.
 * Malformed XML, a wrong root element, a missing or repeated field:
 * CKS_E_FORMAT.  -ENOMEM when memory runs out.
 *
 * Ownership: s3xml_list allocates the items, their keys and next_token;
 * the caller frees them with s3_list_free().  Everything else is written
 * into caller-provided storage.  On failure every out-parameter is left
 * empty (zeroed list, empty strings).
 *
 * Thread-safe: no global state; each call uses its own expat parser.
 */
#ifndef CKS_S3XML_H
#define CKS_S3XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define S3XML_MAX_DOC (16u << 20)
#define S3XML_MAX_DEPTH 16
#define S3XML_MAX_ITEMS 10000
#define S3XML_MAX_TEXT 4096
#define S3_KEY_MAX 1024

/* An S3 error document.  Fields longer than their array are cut at a
 * UTF-8 character boundary; control characters are replaced by spaces so
 * the text can go into a log line as is.  code is "" when absent. */
struct s3_error {
    char code[64];
    char message[512];
    char key[S3_KEY_MAX + 1];
    char request_id[128];
};

/* <Error><Code>..</Code><Message>..</Message><Key>..</Key>
 * <RequestId>..</RequestId></Error>: 0 when the root is <Error> and it
 * holds a non-empty <Code>; CKS_E_FORMAT otherwise. */
int s3xml_error(const char *xml, size_t len, struct s3_error *ret);

struct s3_list_item {
    char *key; /* 1..S3_KEY_MAX bytes, NUL-terminated */
    uint64_t size;
};

struct s3_list {
    struct s3_list_item *items;
    size_t n, cap;
    bool truncated;   /* IsTruncated was "true" */
    char *next_token; /* NextContinuationToken, or NULL */
};

/* One ListObjectsV2 page: every Contents/Key with its Contents/Size (both
 * required, once each), IsTruncated, NextContinuationToken.  A truncated
 * page without a token is CKS_E_FORMAT (it could not be continued).
 * CommonPrefixes and everything else is ignored. */
int s3xml_list(const char *xml, size_t len, struct s3_list *ret);
/* Frees what s3xml_list allocated and zeroes *l; NULL does nothing. */
void s3_list_free(struct s3_list *l);

/* InitiateMultipartUploadResult/UploadId into ret (cap bytes with the
 * NUL): 0, CKS_E_FORMAT when absent or empty, CKS_E_LIMIT when it does
 * not fit. */
int s3xml_upload_id(const char *xml, size_t len, char *ret, size_t cap);

/* CopyPartResult/ETag (an UploadPartCopy's answer) into ret, as
 * s3xml_upload_id. */
int s3xml_copy_part_etag(const char *xml, size_t len, char *ret, size_t cap);

/* A CompleteMultipartUpload answer received with a 2xx status: 0 for a
 * <CompleteMultipartUploadResult>, CKS_E_REMOTE for an <Error> (call
 * s3xml_error on the same body for its code and message), CKS_E_FORMAT
 * for anything else. */
int s3xml_complete_ok(const char *xml, size_t len);

#endif

/*
 * test-s3xml.c — S3 XML answers: documents shaped like what AWS S3 and
 * S3-compatible servers send (namespaced, prefixed, pretty-printed, with
 * the fields we ignore around the ones we read), then hostile and broken
 * ones the parsers must refuse with CKS_E_FORMAT or CKS_E_LIMIT, leaving
 * their outputs empty.  Every document is parsed from a heap copy of
 * exactly its bytes, without a terminating NUL, so ASan sees any overrun.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"
#include "base/err.h"
#include "store/s3xml.h"

#define DECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""
#define OWNER                                                                                      \
    "<Owner><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID>"             \
    "<DisplayName>mtd@amazon.com</DisplayName></Owner>"

/* A parse over an exact-size heap copy of the text. */
static char *dup_exact(const char *text, size_t len)
{
    char *p = malloc(len ? len : 1);
    assert_non_null(p);
    memcpy(p, text, len);
    return p;
}

static int list(const char *text, struct s3_list *ret)
{
    char *p = dup_exact(text, strlen(text));
    int r = s3xml_list(p, strlen(text), ret);
    free(p);
    return r;
}

static int error_doc(const char *text, struct s3_error *ret)
{
    char *p = dup_exact(text, strlen(text));
    int r = s3xml_error(p, strlen(text), ret);
    free(p);
    return r;
}

static int upload_id(const char *text, char *ret, size_t cap)
{
    char *p = dup_exact(text, strlen(text));
    int r = s3xml_upload_id(p, strlen(text), ret, cap);
    free(p);
    return r;
}

static int complete(const char *text)
{
    char *p = dup_exact(text, strlen(text));
    int r = s3xml_complete_ok(p, strlen(text));
    free(p);
    return r;
}

static bool list_is_empty(const struct s3_list *l)
{
    return !l->items && !l->n && !l->cap && !l->truncated && !l->next_token;
}

/* ---- ListObjectsV2 ------------------------------------------------------ */

static void test_list_truncated(void **state)
{
    static const char doc[] = DECL
        "<ListBucketResult " NS "><Name>ckpt-bucket</Name><Prefix>repo/chunks/</Prefix>"
        "<KeyCount>3</KeyCount><MaxKeys>3</MaxKeys><Delimiter></Delimiter>"
        "<IsTruncated>true</IsTruncated>"
        "<Contents><Key>repo/chunks/00/00ab</Key><LastModified>2026-10-12T17:50:30.000Z"
        "</LastModified><ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag>"
        "<Size>2097152</Size><StorageClass>STANDARD</StorageClass>" OWNER "</Contents>"
        "<Contents><Key>repo/chunks/0f/&lt;odd&gt; &amp; \xc3\xbc</Key>"
        "<LastModified>2026-10-12T17:50:31.000Z</LastModified><ETag>\"x\"</ETag>"
        "<Size>0</Size><StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Size>18446744073709551615</Size><Key><![CDATA[repo/chunks/ff/<cdata>]]></Key>"
        "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm></Contents>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</"
        "NextContinuationToken>"
        "<StartAfter></StartAfter></ListBucketResult>";
    struct s3_list l;
    assert_int_equal(list(doc, &l), 0);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.items[0].key, "repo/chunks/00/00ab");
    assert_int_equal(l.items[0].size, 2097152);
    assert_string_equal(l.items[1].key, "repo/chunks/0f/<odd> & \xc3\xbc");
    assert_int_equal(l.items[1].size, 0);
    assert_string_equal(l.items[2].key, "repo/chunks/ff/<cdata>");
    assert_true(l.items[2].size == UINT64_MAX);
    assert_true(l.truncated);
    assert_string_equal(l.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    s3_list_free(&l);
    assert_true(list_is_empty(&l));
    s3_list_free(&l);
    s3_list_free(NULL);
}

static void test_list_empty(void **state)
{
    static const char *const docs[] = {
        (DECL "<ListBucketResult " NS "><Name>b</Name><Prefix>repo/snapshots/</Prefix>"
              "<KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
              "</ListBucketResult>"),
        "<ListBucketResult/>",
        /* CommonPrefixes (delimiter listing) are not objects. */
        ("<ListBucketResult " NS "><IsTruncated>false</IsTruncated><CommonPrefixes>"
         "<Prefix>repo/snapshots/run1/</Prefix></CommonPrefixes></ListBucketResult>"),
        /* A Key outside Contents, or deeper inside it, is not an object key. */
        ("<ListBucketResult><Key>not-an-object</Key><Other><Contents><Key>x</Key>"
         "<Size>1</Size></Contents></Other></ListBucketResult>"),
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        struct s3_list l;
        assert_int_equal(list(docs[i], &l), 0);
        assert_true(list_is_empty(&l));
        s3_list_free(&l);
    }
}

/* A namespace prefix, MinIO-style pretty printing, blanks around numbers
 * and booleans, leading blanks before the declaration, owner keys. */
static void test_list_tolerant(void **state)
{
    static const char doc[] =
        "\r\n  " DECL "<s3:ListBucketResult xmlns:s3=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
        "  <s3:Name>b</s3:Name>\n"
        "  <s3:IsTruncated>\n    false\n  </s3:IsTruncated>\n"
        "  <s3:Contents>\n"
        "    <s3:Key>a b </s3:Key>\n"
        "    <s3:Size> 42\n</s3:Size>\n"
        "    <s3:Owner><s3:Key>owner-key</s3:Key></s3:Owner>\n"
        "  </s3:Contents>\n"
        "  <Contents><Key>plain</Key><Size>7</Size></Contents>\n"
        "  <!-- a comment --><?pi data?>\n"
        "</s3:ListBucketResult>\n\n";
    struct s3_list l;
    assert_int_equal(list(doc, &l), 0);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.items[0].key, "a b ");
    assert_int_equal(l.items[0].size, 42);
    assert_string_equal(l.items[1].key, "plain");
    assert_int_equal(l.items[1].size, 7);
    assert_false(l.truncated);
    assert_null(l.next_token);
    s3_list_free(&l);
}

static void test_list_rejects(void **state)
{
    static const struct {
        const char *doc;
        int err;
    } rows[] = {
        {"", CKS_E_FORMAT},
        {"   \n", CKS_E_FORMAT},
        {"not xml", CKS_E_FORMAT},
        {"<ListBucketResult>", CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a</Key><Size>1</Size></Contents>", CKS_E_FORMAT},
        {"<ListBucketResult></ListBucketResult><ListBucketResult/>", CKS_E_FORMAT},
        {"<ListBucketResult><Contents></ListBucketResult></Contents>", CKS_E_FORMAT},
        {"<Error><Code>AccessDenied</Code></Error>", CKS_E_FORMAT},
        {"<ListAllMyBucketsResult/>", CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>", CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a</Key><Key>b</Key><Size>1</Size></Contents>"
         "</ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a</Key><Size>1</Size><Size>1</Size></Contents>"
         "</ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a</Key><Size>12a</Size></Contents></ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a</Key><Size></Size></Contents></ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a</Key><Size>18446744073709551616</Size></Contents>"
         "</ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>a<b/></Key><Size>1</Size></Contents>"
         "</ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>", CKS_E_FORMAT},
        {"<ListBucketResult><IsTruncated>false</IsTruncated><IsTruncated>false</IsTruncated>"
         "</ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", CKS_E_FORMAT},
        {"<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>"
         "</NextContinuationToken></ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><NextContinuationToken>a</NextContinuationToken>"
         "<NextContinuationToken>b</NextContinuationToken></ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>&undefined;</Key><Size>1</Size></Contents>"
         "</ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>&#0;</Key><Size>1</Size></Contents>"
         "</ListBucketResult>",
         CKS_E_FORMAT},
        {"<ListBucketResult><Contents><Key>\xff\xfe</Key><Size>1</Size></Contents>"
         "</ListBucketResult>",
         CKS_E_FORMAT},
        {"<?xml version=\"1.0\" encoding=\"x-unknown\"?><ListBucketResult/>", CKS_E_FORMAT},
        /* Two items parse, then the third is broken: nothing is returned. */
        {"<ListBucketResult><Contents><Key>a</Key><Size>1</Size></Contents>"
         "<Contents><Key>b</Key><Size>2</Size></Contents>"
         "<Contents><Key>c</Key><Size>x</Size></Contents></ListBucketResult>",
         CKS_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct s3_list l;
        print_message("list reject row %zu\n", i);
        assert_int_equal(list(rows[i].doc, &l), rows[i].err);
        assert_true(list_is_empty(&l));
        s3_list_free(&l);
    }
}

static void make_list(struct buf *b, size_t items, size_t key_len)
{
    assert_int_equal(buf_puts(b, DECL "<ListBucketResult " NS "><IsTruncated>false</IsTruncated>"),
                     0);
    for (size_t i = 0; i < items; i++) {
        assert_int_equal(buf_printf(b, "<Contents><Key>%zu-", i), 0);
        for (size_t k = (size_t)snprintf(NULL, 0, "%zu-", i); k < key_len; k++)
            assert_int_equal(buf_append(b, "k", 1), 0);
        assert_int_equal(buf_printf(b, "</Key><Size>%zu</Size></Contents>\n", i), 0);
    }
    assert_int_equal(buf_puts(b, "</ListBucketResult>"), 0);
}

static int list_buf(const struct buf *b, struct s3_list *ret)
{
    char *p = dup_exact((const char *)b->data, b->len);
    int r = s3xml_list(p, b->len, ret);
    free(p);
    return r;
}

static void test_list_limits(void **state)
{
    static const struct {
        size_t items, key_len;
        int err;
    } rows[] = {
        {S3XML_MAX_ITEMS, 12, 0},
        {S3XML_MAX_ITEMS + 1, 12, CKS_E_LIMIT},
        {2, S3_KEY_MAX, 0},
        {2, S3_KEY_MAX + 1, CKS_E_LIMIT},
        {1, S3XML_MAX_TEXT + 100, CKS_E_LIMIT},
        {1, 100000, CKS_E_LIMIT},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct buf b = BUF_INIT;
        struct s3_list l;
        make_list(&b, rows[i].items, rows[i].key_len);
        print_message("list limit row %zu\n", i);
        assert_int_equal(list_buf(&b, &l), rows[i].err);
        if (rows[i].err == 0) {
            assert_int_equal(l.n, rows[i].items);
            assert_int_equal(strlen(l.items[l.n - 1].key), rows[i].key_len);
            assert_int_equal(l.items[l.n - 1].size, rows[i].items - 1);
        } else {
            assert_true(list_is_empty(&l));
        }
        s3_list_free(&l);
        buf_free(&b);
    }
}

/* ---- hostile documents, for every parser -------------------------------- */

static void nested(struct buf *b, const char *root, int depth)
{
    assert_int_equal(buf_printf(b, "<%s><Code>X</Code>", root), 0);
    for (int i = 1; i < depth; i++)
        assert_int_equal(buf_puts(b, "<a>"), 0);
    for (int i = 1; i < depth; i++)
        assert_int_equal(buf_puts(b, "</a>"), 0);
    assert_int_equal(buf_printf(b, "</%s>", root), 0);
}

static void test_depth(void **state)
{
    for (int depth = S3XML_MAX_DEPTH - 1; depth <= S3XML_MAX_DEPTH + 2; depth++) {
        struct buf b = BUF_INIT;
        struct s3_error e;
        struct s3_list l;
        int want = depth <= S3XML_MAX_DEPTH ? 0 : CKS_E_LIMIT;
        nested(&b, "Error", depth);
        assert_int_equal(s3xml_error((const char *)b.data, b.len, &e), want);
        assert_int_equal(s3xml_complete_ok((const char *)b.data, b.len),
                         want ? want : CKS_E_REMOTE);
        buf_reset(&b);
        nested(&b, "ListBucketResult", depth);
        assert_int_equal(s3xml_list((const char *)b.data, b.len, &l), want);
        s3_list_free(&l);
        buf_free(&b);
    }
}

/* Entity declarations in any form, external entities, and any DOCTYPE at
 * all are refused before they can expand. */
static void test_doctype_refused(void **state)
{
    static const char *const preludes[] = {
        ("<!DOCTYPE lolz [<!ENTITY lol \"lol\">"
         "<!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">"
         "<!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">"
         "<!ENTITY lol4 \"&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;\">"
         "<!ENTITY lol5 \"&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;\">"
         "<!ENTITY lol6 \"&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;\">"
         "<!ENTITY lol7 \"&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;\">"
         "<!ENTITY lol8 \"&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;\">"
         "<!ENTITY lol9 \"&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;\">]>"),
        "<!DOCTYPE r [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>",
        "<!DOCTYPE r [<!ENTITY % p SYSTEM \"http://127.0.0.1/evil.dtd\"> %p;]>",
        "<!DOCTYPE r SYSTEM \"http://127.0.0.1/evil.dtd\">",
        "<!DOCTYPE r>",
    };
    static const char *const bodies[] = {
        "<Error><Code>&lol9;</Code></Error>",
        "<ListBucketResult><Contents><Key>&lol9;</Key><Size>1</Size></Contents></ListBucketResult>",
        ("<InitiateMultipartUploadResult><UploadId>&lol9;</UploadId>"
         "</InitiateMultipartUploadResult>"),
        "<CompleteMultipartUploadResult><Key>&lol9;</Key></CompleteMultipartUploadResult>",
    };
    for (size_t i = 0; i < sizeof(preludes) / sizeof(preludes[0]); i++) {
        for (size_t j = 0; j < sizeof(bodies) / sizeof(bodies[0]); j++) {
            struct buf b = BUF_INIT;
            struct s3_error e;
            struct s3_list l;
            char id[64];
            assert_int_equal(buf_printf(&b, DECL "%s%s", preludes[i], bodies[j]), 0);
            const char *d = (const char *)b.data;
            assert_int_equal(s3xml_error(d, b.len, &e), CKS_E_FORMAT);
            assert_string_equal(e.code, "");
            assert_int_equal(s3xml_list(d, b.len, &l), CKS_E_FORMAT);
            assert_true(list_is_empty(&l));
            assert_int_equal(s3xml_upload_id(d, b.len, id, sizeof(id)), CKS_E_FORMAT);
            assert_string_equal(id, "");
            assert_int_equal(s3xml_complete_ok(d, b.len), CKS_E_FORMAT);
            buf_free(&b);
        }
    }
}

static void test_oversized(void **state)
{
    size_t len = S3XML_MAX_DOC + 1;
    char *big = malloc(len);
    struct s3_error e;
    struct s3_list l;
    char id[64];
    assert_non_null(big);
    memset(big, ' ', len);
    memcpy(big, "<Error><Code>X</Code></Error>", 29);
    assert_int_equal(s3xml_error(big, len, &e), CKS_E_LIMIT);
    assert_int_equal(s3xml_list(big, len, &l), CKS_E_LIMIT);
    assert_int_equal(s3xml_upload_id(big, len, id, sizeof(id)), CKS_E_LIMIT);
    assert_int_equal(s3xml_complete_ok(big, len), CKS_E_LIMIT);
    /* Exactly at the limit is parsed (trailing blanks are allowed). */
    assert_int_equal(s3xml_error(big, len - 1, &e), 0);
    assert_string_equal(e.code, "X");
    free(big);
    /* No body at all. */
    assert_int_equal(s3xml_error(NULL, 0, &e), CKS_E_FORMAT);
    assert_int_equal(s3xml_list(NULL, 0, &l), CKS_E_FORMAT);
    assert_int_equal(s3xml_upload_id(NULL, 0, id, sizeof(id)), CKS_E_FORMAT);
    assert_int_equal(s3xml_complete_ok(NULL, 0), CKS_E_FORMAT);
}

/* ---- errors ------------------------------------------------------------- */

static void test_errors(void **state)
{
    static const struct {
        const char *doc;
        const char *code, *message, *key, *request_id;
    } rows[] = {
        {DECL
         "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we "
         "calculated does not match the signature you provided. Check your key and signing "
         "method.</Message><AWSAccessKeyId>AKIAIOSFODNN7EXAMPLE</AWSAccessKeyId>"
         "<StringToSign>AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/"
         "aws4_request\n7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
         "</StringToSign><SignatureProvided>f0e8bdb8</SignatureProvided>"
         "<StringToSignBytes>41 57 53 34</StringToSignBytes><CanonicalRequest>GET\n"
         "/test.txt\n</CanonicalRequest><CanonicalRequestBytes>47 45 54</CanonicalRequestBytes>"
         "<RequestId>4442587FB7D0A2F9</RequestId><HostId>nZ3x9Ia5SUuMTuD2VOFl8a2uDiOI=</HostId>"
         "</Error>",
         "SignatureDoesNotMatch",
         "The request signature we calculated does not match the signature you provided. "
         "Check your key and signing method.",
         "", "4442587FB7D0A2F9"},
        {DECL "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist"
              "</Message><BucketName>ckpt-nope</BucketName><RequestId>1D5H9EXAMPLE</RequestId>"
              "<HostId>abc</HostId></Error>",
         "NoSuchBucket", "The specified bucket does not exist", "", "1D5H9EXAMPLE"},
        {DECL
         "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>"
         "<Key>repo/refs/run1/latest</Key><RequestId>4A2B</RequestId><HostId>h</HostId></Error>",
         "NoSuchKey", "The specified key does not exist.", "repo/refs/run1/latest", "4A2B"},
        {DECL "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
              "<RequestId>7C1F</RequestId><HostId>h</HostId></Error>",
         "SlowDown", "Please reduce your request rate.", "", "7C1F"},
        /* MinIO: a namespace, Resource and BucketName around the fields. */
        {"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error " NS "><Code>AccessDenied</Code>"
         "<Message>Access Denied.</Message><Key>k</Key><BucketName>b</BucketName>"
         "<Resource>/b/k</Resource><RequestId>17A9</RequestId><HostId>dd9025</HostId></Error>",
         "AccessDenied", "Access Denied.", "k", "17A9"},
        /* Control characters would break a log line: they become spaces. */
        {"<Error><Code>Bad\tCode</Code><Message>line1\nline2\r\n&#x7f;&#x9;end</Message></Error>",
         "Bad Code", "line1 line2   end", "", ""},
        /* A Code nested deeper is not the error code. */
        {"<Error><Detail><Code>Inner</Code></Detail><Code>Outer</Code></Error>", "Outer", "", "",
         ""},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct s3_error e;
        memset(&e, 0x5a, sizeof(e));
        print_message("error row %zu\n", i);
        assert_int_equal(error_doc(rows[i].doc, &e), 0);
        assert_string_equal(e.code, rows[i].code);
        assert_string_equal(e.message, rows[i].message);
        assert_string_equal(e.key, rows[i].key);
        assert_string_equal(e.request_id, rows[i].request_id);
    }
}

/* Long fields are cut to fit, never in the middle of a UTF-8 character. */
static void test_error_truncation(void **state)
{
    struct buf b = BUF_INIT;
    struct s3_error e;
    assert_int_equal(buf_puts(&b, "<Error><Code>"), 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(buf_puts(&b, "C"), 0);
    assert_int_equal(buf_puts(&b, "</Code><Message>a"), 0);
    for (int i = 0; i < 3000; i++) /* two-byte characters, misaligned by the 'a' */
        assert_int_equal(buf_puts(&b, "\xc3\xbc"), 0);
    assert_int_equal(buf_puts(&b, "</Message><RequestId>"), 0);
    for (int i = 0; i < 200; i++)
        assert_int_equal(buf_puts(&b, "\xe2\x82\xac"), 0);
    assert_int_equal(buf_puts(&b, "</RequestId></Error>"), 0);
    assert_int_equal(s3xml_error((const char *)b.data, b.len, &e), 0);
    assert_int_equal(strlen(e.code), sizeof(e.code) - 1);
    assert_int_equal(strlen(e.message), sizeof(e.message) - 1);
    assert_int_equal(e.message[0], 'a');
    assert_int_equal((unsigned char)e.message[sizeof(e.message) - 2], 0xbc);
    assert_int_equal(strlen(e.request_id), 126); /* 42 whole euro signs */
    assert_int_equal((unsigned char)e.request_id[125], 0xac);
    buf_free(&b);
}

static void test_error_rejects(void **state)
{
    static const char *const docs[] = {
        "",
        "<Error></Error>",
        "<Error><Code></Code><Message>m</Message></Error>",
        "<Error><Message>no code</Message></Error>",
        "<Error><Code>X</Code>",
        "<ListBucketResult/>",
        "<Errors><Error><Code>X</Code></Error></Errors>",
        "<Error><Code>X<i>y</i></Code></Error>",
        "<html><body>502 Bad Gateway</body></html>",
        "<Error><Code>X</Code></Error>trailing",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        struct s3_error e, zero;
        memset(&e, 0x5a, sizeof(e));
        memset(&zero, 0, sizeof(zero));
        print_message("error reject row %zu\n", i);
        assert_int_equal(error_doc(docs[i], &e), CKS_E_FORMAT);
        assert_memory_equal(&e, &zero, sizeof(e));
    }
}

/* ---- multipart ---------------------------------------------------------- */

static void test_upload_id(void **state)
{
    static const char doc[] =
        DECL "<InitiateMultipartUploadResult " NS "><Bucket>example-bucket</Bucket>"
             "<Key>example-object</Key><UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRz"
             "IHVwbG9hZA</UploadId></InitiateMultipartUploadResult>";
    static const char want[] = "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA";
    char id[1024];
    assert_int_equal(upload_id(doc, id, sizeof(id)), 0);
    assert_string_equal(id, want);
    /* Exactly fitting, one byte short. */
    assert_int_equal(upload_id(doc, id, sizeof(want)), 0);
    assert_string_equal(id, want);
    assert_int_equal(upload_id(doc, id, sizeof(want) - 1), CKS_E_LIMIT);
    assert_string_equal(id, "");
    assert_int_equal(upload_id(doc, id, 0), CKS_E_LIMIT);
}

/* UploadPartCopy's answer: CopyPartResult/ETag, quotes kept (they go back
 * in CompleteMultipartUpload as they came); anything else is refused. */
static void test_copy_part_etag(void **state)
{
    (void)state;
    static const char doc[] = DECL "<CopyPartResult " NS "><LastModified>2026-01-01T00:00:00.000Z"
                                   "</LastModified><ETag>&quot;9b2cf535f27731c974343645a3985328"
                                   "&quot;</ETag></CopyPartResult>";
    static const char *const bad[] = {
        "<CopyPartResult><LastModified>x</LastModified></CopyPartResult>",
        "<CopyPartResult><ETag></ETag></CopyPartResult>",
        "<Error><Code>NoSuchUpload</Code><ETag>\"x\"</ETag></Error>",
        "<CopyObjectResult><ETag>\"x\"</ETag></CopyObjectResult>",
    };
    char etag[256];
    char *p = dup_exact(doc, strlen(doc));
    assert_int_equal(s3xml_copy_part_etag(p, strlen(doc), etag, sizeof(etag)), 0);
    assert_string_equal(etag, "\"9b2cf535f27731c974343645a3985328\"");
    assert_int_equal(s3xml_copy_part_etag(p, strlen(doc), etag, 8), CKS_E_LIMIT);
    free(p);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = dup_exact(bad[i], strlen(bad[i]));
        assert_true(s3xml_copy_part_etag(p, strlen(bad[i]), etag, sizeof(etag)) < 0);
        assert_string_equal(etag, "");
        free(p);
    }
}

static void test_upload_id_rejects(void **state)
{
    static const char *const docs[] = {
        "<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>",
        "<InitiateMultipartUploadResult><UploadId></UploadId></InitiateMultipartUploadResult>",
        ("<InitiateMultipartUploadResult><UploadId>a</UploadId><UploadId>b</UploadId>"
         "</InitiateMultipartUploadResult>"),
        ("<InitiateMultipartUploadResult><X><UploadId>a</UploadId></X>"
         "</InitiateMultipartUploadResult>"),
        "<Error><Code>AccessDenied</Code></Error>",
        "<InitiateMultipartUploadResult><UploadId>a",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        char id[64];
        memset(id, 'x', sizeof(id));
        print_message("upload id reject row %zu\n", i);
        assert_int_equal(upload_id(docs[i], id, sizeof(id)), CKS_E_FORMAT);
        assert_string_equal(id, "");
    }
}

static void test_complete(void **state)
{
    static const struct {
        const char *doc;
        int ret;
    } rows[] = {
        {DECL "<CompleteMultipartUploadResult " NS "><Location>https://b.s3.us-east-1.amazonaws"
              ".com/repo/chunks/00/00ab</Location><Bucket>b</Bucket><Key>repo/chunks/00/00ab</Key>"
              "<ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag></CompleteMultipartUploadResult>",
         0},
        /* S3 keeps the connection alive with blanks, then fails inside a 200. */
        {"\n \n \n" DECL "<Error><Code>InternalError</Code><Message>We encountered an internal "
         "error. Please try again.</Message><RequestId>656c76696e6727732072657175657374"
         "</RequestId><HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId>"
         "</Error>",
         CKS_E_REMOTE},
        {"<Error/>", CKS_E_REMOTE},
        {"", CKS_E_FORMAT},
        {"<CompleteMultipartUploadResult>", CKS_E_FORMAT},
        {"<InitiateMultipartUploadResult/>", CKS_E_FORMAT},
        {"<html>200 OK</html>", CKS_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        print_message("complete row %zu\n", i);
        assert_int_equal(complete(rows[i].doc), rows[i].ret);
    }
    /* The error inside the 200 is read with s3xml_error. */
    struct s3_error e;
    assert_int_equal(error_doc(rows[1].doc, &e), 0);
    assert_string_equal(e.code, "InternalError");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_truncated),
        cmocka_unit_test(test_list_empty),
        cmocka_unit_test(test_list_tolerant),
        cmocka_unit_test(test_list_rejects),
        cmocka_unit_test(test_list_limits),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_doctype_refused),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_error_truncation),
        cmocka_unit_test(test_error_rejects),
        cmocka_unit_test(test_upload_id),
        cmocka_unit_test(test_upload_id_rejects),
        cmocka_unit_test(test_copy_part_etag),
        cmocka_unit_test(test_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test-manifest.c — the manifest codec: a round trip through every entry
 * kind (hard links, times) and awkward names, canonical output, a table
 * of hostile inputs that must be refused with the right code and line,
 * every truncation and
 * every altered byte of a valid manifest, the path/link/id checks, and the
 * encoder refusing structs the parser would refuse.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include <ckptsync/format.h>

#include "base/err.h"
#include "engine/chunkobj.h"
#include "engine/fastcdc.h"
#include "engine/filedigest.h"
#include "engine/manifest.h"

/* The public format header must agree with the internal ones. */
_Static_assert(CKS_MANIFEST_VERSION == MANIFEST_VERSION, "manifest version");
_Static_assert(CKS_MANIFEST_MAX_BYTES == MANIFEST_MAX_BYTES, "manifest bytes");
_Static_assert(CKS_MANIFEST_MAX_FILES == MANIFEST_MAX_FILES, "manifest files");
_Static_assert(CKS_MANIFEST_MAX_CHUNKS == MANIFEST_MAX_CHUNKS, "manifest chunks");
_Static_assert(CKS_MANIFEST_MAX_PATH == MANIFEST_MAX_PATH, "manifest path");
_Static_assert(CKS_MANIFEST_MAX_COMPONENT == MANIFEST_MAX_COMPONENT, "manifest component");
_Static_assert(CKS_MANIFEST_MAX_FIELD == MANIFEST_MAX_FIELD, "manifest field");
_Static_assert(CKS_MANIFEST_ID_MAX == MANIFEST_ID_MAX, "manifest id");
_Static_assert(CKS_CHUNK_VERSION == CHUNKOBJ_VERSION, "chunk version");
_Static_assert(CKS_CHUNK_HEADER_LEN == CHUNKOBJ_HEADER_LEN, "chunk header");
_Static_assert(CKS_CHUNK_MAX_RAW == CHUNKOBJ_MAX_RAW, "chunk max raw");
_Static_assert(CKS_CHUNK_CODEC_RAW == CHUNKOBJ_RAW && CKS_CHUNK_CODEC_ZSTD == CHUNKOBJ_ZSTD,
               "chunk codecs");
_Static_assert(CKS_CHUNK_ID_LEN == HASH_LEN && CKS_CHUNK_ID_HEX_LEN == HASH_HEX_LEN, "ids");
_Static_assert(CKS_CHUNKER_MIN_SIZE == FASTCDC_MIN_SIZE, "chunker min");
_Static_assert(CKS_CHUNKER_MAX_SIZE == FASTCDC_MAX_SIZE, "chunker max");

static void test_format_magic(void **state)
{
    assert_int_equal(strlen(CKS_CHUNK_MAGIC), CKS_CHUNK_MAGIC_LEN);
    assert_string_equal(CKS_CHUNK_MAGIC, CHUNKOBJ_MAGIC);
}

/* ---- helpers ------------------------------------------------------------ */

static void digest_of(const char *s, uint8_t out[HASH_LEN])
{
    hash_sha256(s, strlen(s), out);
}

static void add_file(struct manifest *m, const char *path, uint32_t mode, const uint32_t *lens,
                     size_t n)
{
    uint8_t id[HASH_LEN];
    assert_int_equal(manifest_add_file(m, MFILE_REG, path, mode, NULL), 0);
    for (size_t i = 0; i < n; i++) {
        char seed[64];
        snprintf(seed, sizeof(seed), "%s#%zu", path, i);
        digest_of(seed, id);
        assert_int_equal(manifest_add_chunk(m, id, lens[i]), 0);
    }
    digest_of(path, id);
    manifest_set_digest(m, id);
}

static void build_sample(struct manifest *m)
{
    static const uint32_t one[] = {100};
    static const uint32_t three[] = {16384, 1, 4000};
    static const uint32_t two[] = {7, 9};
    manifest_init(m);
    memcpy(m->id, "20261201T000701Z-3f2a9c1b7d0e", 30);
    assert_int_equal(manifest_set_str(&m->run, "r1"), 0);
    m->step = 1000;
    m->time = 1796083621;
    assert_int_equal(manifest_set_str(&m->host, "gpu 17\n%"), 0);
    assert_int_equal(manifest_set_str(&m->instance, "-"), 0); /* a real "-" */
    assert_int_equal(manifest_set_str(&m->root, "checkpoint-1000"), 0);
    m->chunk_min = 1024;
    m->chunk_avg = 4096;
    m->chunk_max = 16384;
    m->normalization = 1;
    assert_int_equal(manifest_add_file(m, MFILE_DIR, "shards", 0755, NULL), 0);
    assert_int_equal(manifest_add_file(m, MFILE_DIR, "odd dir/with space", 0700, NULL), 0);
    manifest_set_mtime(m, 1796083600, 0);
    add_file(m, "empty", 0644, NULL, 0);
    manifest_set_mtime(m, 0, 0); /* the epoch itself is a time */
    add_file(m, "one", 0644, one, 1);
    manifest_set_mtime(m, 1796083555, 123456789);
    add_file(m, "shards/model.pt", 0600, three, 3);
    add_file(m, "odd dir/with space/new\nline%25.txt", 04755, two, 2);
    add_file(m,
             "donn\xc3\xa9"
             "es/\xce\xbb.bin",
             0644, one, 1);
    add_file(m, "-", 0644, NULL, 0);
    add_file(m, "tab\there\x7f\x01\xff", 0644, NULL, 0);
    assert_int_equal(manifest_add_file(m, MFILE_DIR, "%2D", 0755, NULL), 0);
    assert_int_equal(manifest_add_file(m, MFILE_LINK, "shards/latest", 0777, "model.pt"), 0);
    manifest_set_mtime(m, 1, 999999999);
    assert_int_equal(manifest_add_file(m, MFILE_LINK, "odd dir/up", 0777, "../one"), 0);
    assert_int_equal(manifest_add_file(m, MFILE_LINK, "a/b/top", 0777, "../../-"), 0);
    assert_int_equal(manifest_add_file(m, MFILE_HARDLINK, "odd dir/again", 0600, "shards/model.pt"),
                     0);
    manifest_set_mtime(m, 5, 0); /* a hard link has its target's time: ignored */
}

/* text + "end <sha256 of text>\n" */
static void append_end(struct buf *b, const char *text, size_t len)
{
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    assert_int_equal(buf_append(b, text, len), 0);
    hash_sha256(text, len, d);
    hex_encode(d, HASH_LEN, hex);
    assert_int_equal(buf_printf(b, "end %s\n", hex), 0);
}

static int parse_text(const char *text, struct buf *err)
{
    struct buf b = BUF_INIT;
    struct manifest m;
    append_end(&b, text, strlen(text));
    int r = manifest_parse(b.data, b.len, &m, err);
    manifest_free(&m);
    buf_free(&b);
    return r;
}

/* ---- round trip ------------------------------------------------------- */

static void test_round_trip(void **state)
{
    struct manifest m, back;
    struct buf out = BUF_INIT, again = BUF_INIT, err = BUF_INIT;
    build_sample(&m);
    assert_int_equal(manifest_encode(&m, &out), 0);
    int r = manifest_parse(out.data, out.len, &back, &err);
    if (r < 0)
        fail_msg("parse: %s (%s)", buf_str(&err), err_str(r));
    assert_true(manifest_equal(&m, &back));
    assert_null(back.parent);
    assert_string_equal(back.instance, "-");
    assert_string_equal(back.files[7].path, "-");
    assert_string_equal(back.files[9].path, "%2D");
    assert_string_equal(back.files[11].link, "../one");
    assert_int_equal(back.files[4].size, 16384 + 1 + 4000);
    assert_int_equal(back.files[4].first_chunk, 1);
    assert_int_equal(back.files[4].nchunks, 3);
    assert_int_equal(back.files[5].mode, 04755);

    /* Canonical: the re-encoding is byte-identical. */
    assert_int_equal(manifest_encode(&back, &again), 0);
    assert_int_equal(again.len, out.len);
    assert_memory_equal(again.data, out.data, out.len);

    /* How awkward values are spelled. */
    const char *text = buf_str(&out);
    assert_non_null(strstr(text, "\nhost gpu%2017%0A%25\n"));
    assert_non_null(strstr(text, "\ninstance %2D\n"));
    assert_non_null(strstr(text, "\nparent -\n"));
    assert_non_null(strstr(text, " 0 %2D\n")); /* the file named "-" */
    assert_non_null(strstr(text, "d 0755 - - %252D\n"));
    assert_non_null(strstr(text, "\nd 0700 1796083600000000000 - odd%20dir/with%20space\n"));
    assert_non_null(strstr(text, "\nf 0644 0 0 "));
    assert_non_null(strstr(text, "\nf 0644 1796083555123456789 100 "));
    assert_non_null(strstr(text, "\nl 0777 1999999999 model.pt shards/latest\n"));
    assert_int_equal(back.files[1].mtime_ns, 1796083600000000000LL);
    assert_int_equal(back.files[0].mtime_ns, -1);
    assert_non_null(strstr(text, "new%0Aline%2525.txt\n"));
    assert_non_null(strstr(text, "tab%09here%7F%01%FF\n"));
    assert_non_null(strstr(text, "donn%C3%A9es/%CE%BB.bin\n"));
    assert_non_null(strstr(text, "\nfiles 14\nchunks 7\n"));
    assert_non_null(strstr(text, "\nh 0600 - shards/model.pt odd%20dir/again\n"));
    assert_int_equal(back.files[13].type, MFILE_HARDLINK);
    assert_string_equal(back.files[13].link, "shards/model.pt");

    manifest_free(&m);
    manifest_free(&back);
    buf_free(&out);
    buf_free(&again);
    buf_free(&err);
}

static void test_empty_manifest(void **state)
{
    struct manifest m, back;
    struct buf out = BUF_INIT;
    manifest_init(&m);
    memcpy(m.id, "s", 2);
    assert_int_equal(manifest_set_str(&m.run, "r"), 0);
    assert_int_equal(manifest_set_str(&m.host, "h"), 0);
    m.step = -1;
    m.chunk_min = 64;
    m.chunk_avg = 256;
    m.chunk_max = 1024;
    assert_int_equal(manifest_encode(&m, &out), 0);
    assert_int_equal(manifest_parse(out.data, out.len, &back, NULL), 0);
    assert_true(manifest_equal(&m, &back));
    assert_int_equal(back.step, -1);
    assert_int_equal(back.nfiles, 0);
    manifest_free(&m);
    manifest_free(&back);
    buf_free(&out);
    manifest_free(NULL);
}

/* ---- rejection table --------------------------------------------------- */

#define HX "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HEAD8                                                                                      \
    "ckptsync-manifest 1\nid s1\nrun r1\nstep 5\ntime 100\nhost h\n"                               \
    "instance -\nparent -\n"
#define HEAD HEAD8 "root -\n"
#define CHUNKER "chunker fastcdc2020 64 256 1024 1\n"
#define HDR(f, c) HEAD CHUNKER "files " f "\nchunks " c "\n"
/* Version 2: a "gen" line after "parent", so entries start on line 14. */
#define HEAD8V2                                                                                    \
    "ckptsync-manifest 2\nid s1\nrun r1\nstep 5\ntime 100\nhost h\n"                               \
    "instance -\nparent -\n"
#define HEADV2(g) HEAD8V2 "gen " g "\nroot -\n"
#define HDRV2(f, c) HEADV2("7") CHUNKER "files " f "\nchunks " c "\n"
/* Version 3: the same header; hard link entries. */
#define HEAD8V3                                                                                    \
    "ckptsync-manifest 3\nid s1\nrun r1\nstep 5\ntime 100\nhost h\n"                               \
    "instance -\nparent -\n"
#define HDRV3(f, c) HEAD8V3 "gen 7\nroot -\n" CHUNKER "files " f "\nchunks " c "\n"
#define F0(p) "f 0644 - 0 " HX " 0 " p "\n" /* version 3 */
/* Version 4: a merged multi-node step, "nodes" after the chunker line
 * (entries start on line 15) and a node field after each entry's mtime. */
#define HEAD8V4                                                                                    \
    "ckptsync-manifest 4\nid s1\nrun r1\nstep 5\ntime 100\nhost h\n"                               \
    "instance -\nparent -\n"
#define HDRV4(n, f, c) HEAD8V4 "gen 7\nroot -\n" CHUNKER "nodes " n "\nfiles " f "\nchunks " c "\n"
/* Version 5: chunk-tree digests ("tree:" HX); the "nodes" line always
 * there (0: not a merged step), so entries start on line 15. */
#define HEAD8V5                                                                                    \
    "ckptsync-manifest 5\nid s1\nrun r1\nstep 5\ntime 100\nhost h\n"                               \
    "instance -\nparent -\n"
#define HDRV5(n, f, c) HEAD8V5 "gen 7\nroot -\n" CHUNKER "nodes " n "\nfiles " f "\nchunks " c "\n"

enum tail { AUTO_END, RAW, TRAILING, NO_NEWLINE, BAD_DIGEST };

struct reject {
    const char *name;
    const char *text;
    int code;
    int line; /* expected "line N:" prefix, 0 = not checked */
    enum tail tail;
};

static const struct reject rejects[] = {
    /* paths */
    {"absolute path", HDR("1", "0") "d 0755 - /etc\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"encoded absolute path", HDR("1", "0") "d 0755 - %2Fetc\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"../x", HDR("1", "0") "d 0755 - ../x\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"encoded ..", HDR("1", "0") "d 0755 - %2e%2E/x\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"a/../../x", HDR("1", "0") "d 0755 - a/../../x\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"a//b", HDR("1", "0") "d 0755 - a//b\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"./a", HDR("1", "0") "d 0755 - ./a\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"a/.", HDR("1", "0") "d 0755 - a/.\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"trailing slash", HDR("1", "0") "d 0755 - a/\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"empty path", HDR("1", "0") "d 0755 - \n", CKS_E_FORMAT, 13, AUTO_END},
    {"path is -", HDR("1", "0") "d 0755 - -\n", CKS_E_FORMAT, 13, AUTO_END},
    {"NUL via %00", HDR("1", "0") "d 0755 - a%00b\n", CKS_E_FORMAT, 13, AUTO_END},
    {"bad escape %G1", HDR("1", "0") "d 0755 - %G1\n", CKS_E_FORMAT, 13, AUTO_END},
    {"bad escape %1G", HDR("1", "0") "d 0755 - a%1G\n", CKS_E_FORMAT, 13, AUTO_END},
    {"cut escape", HDR("1", "0") "d 0755 - ab%4\n", CKS_E_FORMAT, 13, AUTO_END},
    {"lone %", HDR("1", "0") "d 0755 - %\n", CKS_E_FORMAT, 13, AUTO_END},
    {"raw control byte",
     HDR("1", "0") "d 0755 - a\x01"
                   "b\n",
     CKS_E_FORMAT, 13, AUTO_END},
    {"raw high byte", HDR("1", "0") "d 0755 - \xc3\xa9\n", CKS_E_FORMAT, 13, AUTO_END},
    {"raw tab", HDR("1", "0") "d 0755 - a\tb\n", CKS_E_FORMAT, 13, AUTO_END},
    /* the tree */
    {"duplicate path", HDR("2", "0") "d 0755 - a\nd 0755 - a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"duplicate file and dir", HDR("3", "0") "f 0644 0 " HX " 0 a\nd 0755 - b\nd 0755 - a\n",
     CKS_E_FORMAT, 15, AUTO_END},
    {"entry below a file", HDR("2", "0") "f 0644 0 " HX " 0 a\nd 0755 - a/b\n", CKS_E_UNSAFE_PATH,
     14, AUTO_END},
    {"entry below a file, listed first",
     HDR("3", "0") "d 0755 - a/b/c\nd 0755 - a\nf 0644 0 " HX " 0 a/b\n", CKS_E_UNSAFE_PATH, 15,
     AUTO_END},
    {"entry below a symlink", HDR("2", "0") "l 0777 x a\nf 0644 0 " HX " 0 a/b\n",
     CKS_E_UNSAFE_PATH, 14, AUTO_END},
    /* symlinks */
    {"link escapes", HDR("1", "0") "l 0777 ../../x a/l\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"link escapes late", HDR("1", "0") "l 0777 b/../../../x a/l\n", CKS_E_UNSAFE_PATH, 13,
     AUTO_END},
    /* lexically inside, but "s" may itself be a link to "..": climbing
     * after a named component is refused */
    {"link climbs after a name", HDR("1", "0") "l 0777 s/../.. a/t\n", CKS_E_UNSAFE_PATH, 13,
     AUTO_END},
    {"link absolute", HDR("1", "0") "l 0777 /etc/passwd l\n", CKS_E_UNSAFE_PATH, 13, AUTO_END},
    {"link target missing", HDR("1", "0") "l 0777 - l\n", CKS_E_FORMAT, 13, AUTO_END},
    {"link field missing", HDR("1", "0") "l 0777 l\n", CKS_E_FORMAT, 13, AUTO_END},
    /* sizes and counts */
    {"size != sum of chunks", HDR("1", "2") "f 0644 10 " HX " 2 a\nc " HX " 4\nc " HX " 5\n",
     CKS_E_FORMAT, 15, AUTO_END},
    {"size without chunks", HDR("1", "0") "f 0644 10 " HX " 0 a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"fewer chunk lines than header", HDR("1", "3") "f 0644 9 " HX " 2 a\nc " HX " 4\nc " HX " 5\n",
     CKS_E_FORMAT, 16, AUTO_END},
    {"file claims more chunks than header",
     HDR("1", "1") "f 0644 9 " HX " 2 a\nc " HX " 4\nc " HX " 5\n", CKS_E_FORMAT, 13, AUTO_END},
    {"file's chunk line missing", HDR("2", "2") "f 0644 8 " HX " 2 a\nc " HX " 8\nd 0755 - b\n",
     CKS_E_FORMAT, 15, AUTO_END},
    {"chunk line without file", HDR("1", "1") "d 0755 - a\nc " HX " 4\n", CKS_E_FORMAT, 14,
     AUTO_END},
    {"fewer entries than header", HDR("2", "0") "d 0755 - a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"more entries than header", HDR("1", "0") "d 0755 - a\nd 0755 - b\n", CKS_E_FORMAT, 14,
     AUTO_END},
    {"too many files declared", HDR("10000001", "0"), CKS_E_LIMIT, 11, AUTO_END},
    {"too many chunks declared", HDR("0", "100000001"), CKS_E_LIMIT, 12, AUTO_END},
    {"chunk len 0", HDR("1", "1") "f 0644 0 " HX " 1 a\nc " HX " 0\n", CKS_E_FORMAT, 14, AUTO_END},
    {"chunk len > chunk_max", HDR("1", "1") "f 0644 1025 " HX " 1 a\nc " HX " 1025\n", CKS_E_LIMIT,
     14, AUTO_END},
    {"chunk len > 32 bits", HDR("1", "1") "f 0644 4294967296 " HX " 1 a\nc " HX " 4294967296\n",
     CKS_E_FORMAT, 14, AUTO_END},
    {"upper-case chunk id",
     HDR("1", "1") "f 0644 4 " HX " 1 a\nc "
                   "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef 4\n",
     CKS_E_FORMAT, 14, AUTO_END},
    {"short digest", HDR("1", "0") "f 0644 0 abc 0 a\n", CKS_E_FORMAT, 13, AUTO_END},
    /* chunker */
    {"chunk_max > 256 MiB", HEAD "chunker fastcdc2020 64 256 268435457 1\nfiles 0\nchunks 0\n",
     CKS_E_LIMIT, 10, AUTO_END},
    {"min > avg", HEAD "chunker fastcdc2020 512 256 1024 1\nfiles 0\nchunks 0\n", CKS_E_FORMAT, 10,
     AUTO_END},
    {"min below 64", HEAD "chunker fastcdc2020 0 256 1024 1\nfiles 0\nchunks 0\n", CKS_E_FORMAT, 10,
     AUTO_END},
    {"nc out of range", HEAD "chunker fastcdc2020 64 256 1024 99\nfiles 0\nchunks 0\n",
     CKS_E_FORMAT, 10, AUTO_END},
    {"unknown chunker", HEAD "chunker rabin 64 256 1024 1\nfiles 0\nchunks 0\n", CKS_E_FORMAT, 10,
     AUTO_END},
    /* version and header */
    {"version 6", "ckptsync-manifest 6\nwhatever\n", CKS_E_VERSION, 1, RAW},
    /* version 4: the node count and each entry's node */
    {"v4 without nodes line", HEAD8V4 "gen 7\nroot -\n" CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT,
     12, AUTO_END},
    {"v4 nodes 0", HDRV4("0", "0", "0"), CKS_E_FORMAT, 12, AUTO_END},
    {"v4 nodes leading zero", HDRV4("04", "0", "0"), CKS_E_FORMAT, 12, AUTO_END},
    {"v4 nodes above 4096", HDRV4("4097", "0", "0"), CKS_E_LIMIT, 12, AUTO_END},
    {"v4 nodes twice", HDRV4("2", "0", "0") "nodes 2\n", CKS_E_FORMAT, 15, AUTO_END},
    {"v4 entry without node", HDRV4("2", "1", "0") "d 0755 - - a\n", CKS_E_FORMAT, 15, AUTO_END},
    {"v4 node not below nodes", HDRV4("2", "1", "0") "d 0755 - 2 - a\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"v4 node leading zero", HDRV4("2", "1", "0") "d 0755 - 01 - a\n", CKS_E_FORMAT, 15, AUTO_END},
    {"v4 node negative", HDRV4("2", "1", "0") "d 0755 - -1 - a\n", CKS_E_FORMAT, 15, AUTO_END},
    {"v4 node star twice", HDRV4("2", "1", "0") "d 0755 - ** - a\n", CKS_E_FORMAT, 15, AUTO_END},
    {"v3 entry with node", HDRV3("1", "0") "d 0755 - 0 - a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"v5 without nodes line", HEAD8V5 "gen 7\nroot -\n" CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT,
     12, AUTO_END},
    {"tree digest in version 3", HDRV3("1", "0") "f 0644 - 0 tree:" HX " 0 a\n", CKS_E_FORMAT, 14,
     AUTO_END},
    {"tree digest in version 4", HDRV4("2", "1", "0") "f 0644 - 1 0 tree:" HX " 0 a\n",
     CKS_E_FORMAT, 15, AUTO_END},
    {"v5 short tree digest", HDRV5("0", "1", "0") "f 0644 - 0 tree:0123 0 a\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"v5 tree prefix alone", HDRV5("0", "1", "0") "f 0644 - 0 tree: 0 a\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"v5 other prefix", HDRV5("0", "1", "0") "f 0644 - 0 md5:" HX " 0 a\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"v5 upper-case tree prefix", HDRV5("0", "1", "0") "f 0644 - 0 TREE:" HX " 0 a\n", CKS_E_FORMAT,
     15, AUTO_END},
    {"v5 nodes 0 with a node field", HDRV5("0", "1", "0") "d 0755 - 0 - a\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"v5 nodes 2 without a node field", HDRV5("2", "1", "0") "d 0755 - - a\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"v5 nodes above 4096", HDRV5("4097", "0", "0"), CKS_E_LIMIT, 12, AUTO_END},
    {"v3 with nodes line", HEAD8V3 "gen 7\nroot -\n" CHUNKER "nodes 2\nfiles 0\nchunks 0\n",
     CKS_E_FORMAT, 12, AUTO_END},
    {"v4 hard link with node, no target",
     HDRV4("2", "2", "0") "f 0644 - 1 0 " HX " 0 a\n"
                          "h 0644 - 1 a\n",
     CKS_E_FORMAT, 16, AUTO_END},
    {"version 0", "ckptsync-manifest 0\n", CKS_E_VERSION, 1, RAW},
    {"version not a number", "ckptsync-manifest one\n", CKS_E_FORMAT, 1, RAW},
    {"not a manifest", "ckptsync-repo 1\n", CKS_E_FORMAT, 1, RAW},
    {"empty input", "", CKS_E_FORMAT, 1, RAW},
    {"only a newline", "\n", CKS_E_FORMAT, 1, RAW},
    {"missing header line", HEAD8 CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9, AUTO_END},
    {"duplicate header line", "ckptsync-manifest 1\nid s1\nrun r1\nrun r2\n", CKS_E_FORMAT, 4,
     AUTO_END},
    {"header out of order", "ckptsync-manifest 1\nrun r1\nid s1\n", CKS_E_FORMAT, 2, AUTO_END},
    {"header value missing", "ckptsync-manifest 1\nid\n", CKS_E_FORMAT, 2, AUTO_END},
    {"header extra value", "ckptsync-manifest 1\nid a b\n", CKS_E_FORMAT, 2, AUTO_END},
    {"missing host", "ckptsync-manifest 1\nid s1\nrun r1\nstep 5\ntime 100\nhost -\n", CKS_E_FORMAT,
     6, AUTO_END},
    {"missing id", "ckptsync-manifest 1\nid -\n", CKS_E_FORMAT, 2, AUTO_END},
    {"bad id", "ckptsync-manifest 1\nid .hidden\n", CKS_E_FORMAT, 2, AUTO_END},
    {"id with a slash", "ckptsync-manifest 1\nid a%2Fb\n", CKS_E_FORMAT, 2, AUTO_END},
    {"id too long",
     "ckptsync-manifest 1\nid "
     "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefX\n",
     CKS_E_LIMIT, 2, AUTO_END},
    {"run ..", "ckptsync-manifest 1\nid s1\nrun ..\n", CKS_E_FORMAT, 3, AUTO_END},
    {"bad parent",
     "ckptsync-manifest 1\nid s1\nrun r1\nstep 5\ntime 100\nhost h\n"
     "instance -\nparent a%20b\n",
     CKS_E_FORMAT, 8, AUTO_END},
    {"unsafe root", HEAD8 "root ../up\n", CKS_E_UNSAFE_PATH, 9, AUTO_END},
    {"root is /", HEAD8 "root %2F\n", CKS_E_UNSAFE_PATH, 9, AUTO_END},
    /* numbers */
    {"step overflow", "ckptsync-manifest 1\nid s1\nrun r1\nstep 9223372036854775808\n",
     CKS_E_FORMAT, 4, AUTO_END},
    {"step 20 digits", "ckptsync-manifest 1\nid s1\nrun r1\nstep 99999999999999999999\n",
     CKS_E_FORMAT, 4, AUTO_END},
    {"step -2", "ckptsync-manifest 1\nid s1\nrun r1\nstep -2\n", CKS_E_FORMAT, 4, AUTO_END},
    {"step +5", "ckptsync-manifest 1\nid s1\nrun r1\nstep +5\n", CKS_E_FORMAT, 4, AUTO_END},
    {"time leading zero", "ckptsync-manifest 1\nid s1\nrun r1\nstep 5\ntime 0100\n", CKS_E_FORMAT,
     5, AUTO_END},
    {"time negative", "ckptsync-manifest 1\nid s1\nrun r1\nstep 5\ntime -1\n", CKS_E_FORMAT, 5,
     AUTO_END},
    {"files overflow", HEAD CHUNKER "files 18446744073709551616\n", CKS_E_FORMAT, 11, AUTO_END},
    {"size overflow", HDR("1", "0") "f 0644 18446744073709551616 " HX " 0 a\n", CKS_E_FORMAT, 13,
     AUTO_END},
    {"nchunks overflow", HDR("1", "0") "f 0644 0 " HX " 99999999999999999999 a\n", CKS_E_FORMAT, 13,
     AUTO_END},
    {"chunker overflow", HEAD "chunker fastcdc2020 64 256 18446744073709551617 1\n", CKS_E_FORMAT,
     10, AUTO_END},
    {"mode 5 digits", HDR("1", "0") "d 07555 - a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"mode 3 digits", HDR("1", "0") "d 755 - a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"mode not octal", HDR("1", "0") "d 0800 - a\n", CKS_E_FORMAT, 13, AUTO_END},
    /* line syntax */
    {"missing field in file line", HDR("1", "0") "f 0644 0 " HX " a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"extra field", HDR("1", "0") "d 0755 - a b\n", CKS_E_FORMAT, 13, AUTO_END},
    {"dir placeholder not -", HDR("1", "0") "d 0755 x a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"too many fields", HDR("1", "0") "f 0644 0 " HX " 0 a b c\n", CKS_E_FORMAT, 13, AUTO_END},
    {"CRLF", HDR("1", "0") "d 0755 - a\r\n", CKS_E_FORMAT, 13, AUTO_END},
    {"double space", HDR("1", "0") "d 0755  - a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"leading space", HDR("1", "0") " d 0755 - a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"empty line", HDR("1", "0") "\nd 0755 - a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"unknown line kind", HDR("1", "0") "x 0755 - a\n", CKS_E_FORMAT, 13, AUTO_END},
    {"end before entries", HDR("1", "0"), CKS_E_FORMAT, 13, AUTO_END},
    /* version 2: the generation */
    {"v2 without gen line", HEAD8V2 "root -\n" CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9,
     AUTO_END},
    {"v1 with a gen line", HEAD8 "gen 0\nroot -\n" CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9,
     AUTO_END},
    {"gen after root", HEAD8V2 "root -\ngen 1\n" CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9,
     AUTO_END},
    {"gen twice", HEAD8V2 "gen 1\ngen 1\nroot -\n", CKS_E_FORMAT, 10, AUTO_END},
    {"gen leading zero", HEADV2("01") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9, AUTO_END},
    {"gen 00", HEADV2("00") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9, AUTO_END},
    {"gen above max", HEADV2("1000000000000") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9,
     AUTO_END},
    {"gen overflow", HEADV2("18446744073709551616") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9,
     AUTO_END},
    {"gen -1", HEADV2("-1") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9, AUTO_END},
    {"gen -", HEADV2("-") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9, AUTO_END},
    {"gen +1", HEADV2("+1") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9, AUTO_END},
    {"gen hex", HEADV2("0x1") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9, AUTO_END},
    {"gen two values", HEADV2("1 2") CHUNKER "files 0\nchunks 0\n", CKS_E_FORMAT, 9, AUTO_END},
    {"gen without value", HEAD8V2 "gen\nroot -\n", CKS_E_FORMAT, 9, AUTO_END},
    {"v2 entry error line", HDRV2("1", "0") "d 0755 - /etc\n", CKS_E_UNSAFE_PATH, 14, AUTO_END},
    {"v2 chunk line error line", HDRV2("1", "1") "f 0644 0 " HX " 1 a\nc " HX " 0\n", CKS_E_FORMAT,
     15, AUTO_END},
    {"v2 tree error line", HDRV2("3", "0") "d 0755 - a/b/c\nd 0755 - a\nf 0644 0 " HX " 0 a/b\n",
     CKS_E_UNSAFE_PATH, 16, AUTO_END},
    {"v2 duplicate path line", HDRV2("2", "0") "d 0755 - a\nd 0755 - a\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"v2 wrong end digest", HDRV2("0", "0"), CKS_E_DIGEST, 14, BAD_DIGEST},
    {"v2 data after end", HDRV2("0", "0"), CKS_E_FORMAT, 14, TRAILING},
    /* version 3: hard links name an earlier regular file */
    {"hard link in v2", HDRV2("2", "0") "f 0644 0 " HX " 0 a\nh 0644 a b\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"hard link to nothing", HDRV3("2", "0") F0("a") "h 0644 - x b\n", CKS_E_FORMAT, 15, AUTO_END},
    {"hard link to a later file", HDRV3("2", "0") "h 0644 - a b\n" F0("a"), CKS_E_FORMAT, 14,
     AUTO_END},
    {"hard link to a dir", HDRV3("2", "0") "d 0755 - - a\nh 0644 - a b\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"hard link to a symlink", HDRV3("2", "0") "l 0777 - x a\nh 0644 - a b\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"hard link to a hard link", HDRV3("3", "0") F0("a") "h 0644 - a b\nh 0644 - b c\n",
     CKS_E_FORMAT, 16, AUTO_END},
    {"hard link to itself", HDRV3("1", "0") "h 0644 - a a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"lone hard link", HDRV3("1", "0") "h 0644 - a b\n", CKS_E_FORMAT, 14, AUTO_END},
    {"hard link target ..", HDRV3("2", "0") F0("a") "h 0644 - ../a b\n", CKS_E_UNSAFE_PATH, 15,
     AUTO_END},
    {"hard link target absolute", HDRV3("2", "0") F0("a") "h 0644 - %2Fa b\n", CKS_E_UNSAFE_PATH,
     15, AUTO_END},
    {"hard link without target", HDRV3("2", "0") F0("a") "h 0644 - - b\n", CKS_E_FORMAT, 15,
     AUTO_END},
    {"hard link field missing", HDRV3("2", "0") F0("a") "h 0644 - b\n", CKS_E_FORMAT, 15, AUTO_END},
    {"entry below a hard link", HDRV3("3", "0") F0("a") "h 0644 - a b\nd 0755 - - b/c\n",
     CKS_E_UNSAFE_PATH, 16, AUTO_END},
    /* version 3: every entry has an mtime field ("-": unknown), not before */
    {"v3 entry without mtime", HDRV3("1", "0") "d 0755 - a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"v3 file without mtime", HDRV3("1", "0") "f 0644 0 " HX " 0 a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"v2 entry with mtime", HDRV2("1", "0") "d 0755 5 - a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"mtime negative", HDRV3("1", "0") "d 0755 -5 - a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"mtime leading zero", HDRV3("1", "0") "d 0755 05 - a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"mtime overflow", HDRV3("1", "0") "d 0755 9223372036854775808 - a\n", CKS_E_FORMAT, 14,
     AUTO_END},
    {"mtime not a number", HDRV3("1", "0") "l 0777 x1 t a\n", CKS_E_FORMAT, 14, AUTO_END},
    {"hard link with a time", HDRV3("2", "0") F0("a") "h 0644 5 a b\n", CKS_E_FORMAT, 15, AUTO_END},
    /* the end line */
    {"wrong end digest", HDR("0", "0"), CKS_E_DIGEST, 13, BAD_DIGEST},
    {"data after end", HDR("0", "0"), CKS_E_FORMAT, 13, TRAILING},
    {"end without newline", HDR("0", "0"), CKS_E_FORMAT, 13, NO_NEWLINE},
    {"no end line", HDR("0", "0"), CKS_E_FORMAT, 13, RAW},
    {"end digest upper-case",
     HDR("0", "0") "end "
                   "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF\n",
     CKS_E_FORMAT, 13, RAW},
};

static void build_case(const struct reject *c, struct buf *b)
{
    size_t n = strlen(c->text);
    switch (c->tail) {
    case RAW:
        assert_int_equal(buf_append(b, c->text, n), 0);
        break;
    case AUTO_END:
        append_end(b, c->text, n);
        break;
    case TRAILING:
        append_end(b, c->text, n);
        assert_int_equal(buf_puts(b, "d 0755 - a\n"), 0);
        break;
    case NO_NEWLINE:
        append_end(b, c->text, n);
        b->len--;
        break;
    case BAD_DIGEST:
        append_end(b, c->text, n);
        b->data[b->len - 2] = b->data[b->len - 2] == '0' ? '1' : '0';
        break;
    }
}

static void check_reject(const struct reject *c)
{
    struct buf b = BUF_INIT, err = BUF_INIT;
    struct manifest m;
    build_case(c, &b);
    int r = manifest_parse(b.data, b.len, &m, &err);
    if (r != c->code)
        fail_msg("%s: got %d (%s: %s), want %d", c->name, r, err_str(r), buf_str(&err), c->code);
    char want[32];
    snprintf(want, sizeof(want), "line %d: ", c->line);
    if (c->line && strncmp(buf_str(&err), want, strlen(want)) != 0)
        fail_msg("%s: error \"%s\", want it to start with \"%s\"", c->name, buf_str(&err), want);
    assert_null(m.files); /* freed on error */
    assert_null(m.run);
    buf_free(&b);
    buf_free(&err);
}

static void test_rejects(void **state)
{
    for (size_t i = 0; i < sizeof(rejects) / sizeof(rejects[0]); i++)
        check_reject(&rejects[i]);
}

/* ---- inputs that must be accepted ------------------------------------- */

static const char *const accepts[] = {
    /* siblings that share a prefix with a file are not below it */
    HDR("5", "0") "f 0644 0 " HX " 0 a\nf 0644 0 " HX " 0 a%20b\nf 0644 0 " HX " 0 a.x\n"
                  "d 0755 - a0\nf 0644 0 " HX " 0 a0/x\n",
    /* a link to the root itself, "./x" and "a//b" targets */
    HDR("3", "0") "l 0777 .. d/up\nl 0777 ./x d/dot\nl 0777 a//b c\n",
    /* unlisted parents, deep paths, escapes in either case, non-canonical escapes */
    HDR("2", "0") "d 0755 - x/y/z\nf 0644 0 " HX " 0 %41%2d%2D\n",
    /* a dir may hold entries; a file with exactly chunk_max */
    HDR("2", "1") "d 0755 - a\nf 0644 1024 " HX " 1 a/b\nc " HX " 1024\n",
    /* step -1, a real parent and instance */
    "ckptsync-manifest 1\nid s1\nrun r1\nstep -1\ntime 0\nhost h\ninstance i\n"
    "parent p.1\nroot a/b\n" CHUNKER "files 0\nchunks 0\n",
    /* version 2: generations 0 and the largest */
    HEADV2("0") CHUNKER "files 0\nchunks 0\n",
    HEADV2("999999999999") CHUNKER "files 1\nchunks 0\nd 0755 - a\n",
    /* version 3: two more names of one file, one in a directory listed later */
    HDRV3("4", "0") F0("a") "d 0755 - - x\nh 0644 - a x/b\nh 0600 - a c\n",
    /* version 3: times, from the epoch to the largest */
    HDRV3("3", "0") "d 0755 0 - a\nf 0644 9223372036854775807 0 " HX " 0 a/f\nl 0777 17 f a/l\n",
    /* version 4: every kind of entry, a rank or "*" */
    HDRV4("4", "4", "0") "d 0755 - * - a\nf 0644 5 3 0 " HX " 0 a/f\nl 0777 17 0 f a/l\n"
                         "h 0644 - 3 a/f a/g\n",
    HDRV4("4096", "1", "0") "f 0644 5 4095 0 " HX " 0 f\n",
    HDRV4("1", "0", "0"),
};

static void test_accepts(void **state)
{
    for (size_t i = 0; i < sizeof(accepts) / sizeof(accepts[0]); i++) {
        struct buf err = BUF_INIT;
        int r = parse_text(accepts[i], &err);
        if (r != 0)
            fail_msg("accept case %zu: %s (%s)", i, buf_str(&err), err_str(r));
        buf_free(&err);
    }
}

/* ---- version 2: the generation ------------------------------------------ */

static void test_gen_round_trip(void **state)
{
    static const struct {
        int64_t gen;
        const char *line;
    } gens[] = {
        {0, "\nparent -\ngen 0\nroot checkpoint-1000\n"},
        {123456, "\nparent -\ngen 123456\nroot checkpoint-1000\n"},
        {MANIFEST_GEN_MAX, "\nparent -\ngen 999999999999\nroot checkpoint-1000\n"},
    };
    for (size_t i = 0; i < sizeof(gens) / sizeof(gens[0]); i++) {
        struct manifest m, back;
        struct buf out = BUF_INIT, again = BUF_INIT, err = BUF_INIT;
        build_sample(&m);
        m.gen = gens[i].gen;
        assert_int_equal(manifest_encode(&m, &out), 0);
        assert_true(strncmp(buf_str(&out), "ckptsync-manifest 3\n", 20) == 0);
        if (!strstr(buf_str(&out), gens[i].line))
            fail_msg("gen %lld: no \"%s\" in the encoding", (long long)gens[i].gen, gens[i].line);
        int r = manifest_parse(out.data, out.len, &back, &err);
        if (r < 0)
            fail_msg("gen %lld: %s (%s)", (long long)gens[i].gen, buf_str(&err), err_str(r));
        assert_int_equal(back.gen, gens[i].gen);
        assert_true(manifest_equal(&m, &back));
        assert_int_equal(manifest_encode(&back, &again), 0);
        assert_int_equal(again.len, out.len);
        assert_memory_equal(again.data, out.data, out.len);
        /* another generation is another manifest */
        back.gen = gens[i].gen ^ 1;
        assert_false(manifest_equal(&m, &back));
        manifest_free(&m);
        manifest_free(&back);
        buf_free(&out);
        buf_free(&again);
        buf_free(&err);
    }
}

/* A version-1 manifest (no gen line) is generation 0; written again it
 * becomes version 3 with "gen 0" and unknown times ("-"), every other
 * field the same. */
static void test_version1(void **state)
{
    static const char v1[] = HDR("2", "1") "d 0755 - a\nf 0644 7 " HX " 1 a/b\nc " HX " 7\n";
    static const char v2[] = HDRV2("2", "1") "d 0755 - a\nf 0644 7 " HX " 1 a/b\nc " HX " 7\n";
    static const char v3[] = HDRV3("2", "1") "d 0755 - - a\nf 0644 - 7 " HX " 1 a/b\nc " HX " 7\n";
    struct buf in = BUF_INIT, out = BUF_INIT, want = BUF_INIT, err = BUF_INIT;
    struct manifest m;
    append_end(&in, v1, strlen(v1));
    int r = manifest_parse(in.data, in.len, &m, &err);
    if (r < 0)
        fail_msg("version 1: %s (%s)", buf_str(&err), err_str(r));
    assert_int_equal(m.gen, 0);
    assert_string_equal(m.id, "s1");
    assert_int_equal(m.nfiles, 2);
    assert_int_equal(m.files[1].size, 7);
    assert_int_equal(manifest_encode(&m, &out), 0);
    /* v3 (unknown times) with "gen 7": make it "gen 0" */
    char *v2gen0 = strdup(v3);
    assert_non_null(v2gen0);
    char *g = strstr(v2gen0, "\ngen 7\n");
    assert_non_null(g);
    g[5] = '0';
    append_end(&want, v2gen0, strlen(v2gen0));
    assert_string_equal(buf_str(&out), buf_str(&want));
    free(v2gen0);
    manifest_free(&m);
    buf_free(&in);
    buf_free(&out);
    buf_free(&want);
    buf_free(&err);

    /* the version-2 text with its gen line parses with that generation */
    append_end(&in, v2, strlen(v2));
    assert_int_equal(manifest_parse(in.data, in.len, &m, NULL), 0);
    assert_int_equal(m.gen, 7);
    manifest_free(&m);
    buf_free(&in);
}

/* manifest_validate's "line N" is the line the encoder writes the field on. */
static void mut_gen_neg(struct manifest *m)
{
    m->gen = -1;
}
static void mut_gen_big(struct manifest *m)
{
    m->gen = MANIFEST_GEN_MAX + 1;
}
static void mut_parent_bad(struct manifest *m)
{
    manifest_set_str(&m->parent, ".p");
}
static void mut_root_bad(struct manifest *m)
{
    manifest_set_str(&m->root, "/abs");
}
static void mut_chunker_bad(struct manifest *m)
{
    m->chunk_min = m->chunk_max + 1;
}
static void mut_files_none(struct manifest *m)
{
    m->files[0].path[0] = '/';
}

static void test_validate_lines(void **state)
{
    static const struct {
        const char *field; /* the line's key in the encoding */
        void (*fn)(struct manifest *m);
        int code;
    } cases[] = {
        {"parent", mut_parent_bad, CKS_E_FORMAT},   {"gen", mut_gen_neg, CKS_E_FORMAT},
        {"gen", mut_gen_big, CKS_E_FORMAT},         {"root", mut_root_bad, CKS_E_UNSAFE_PATH},
        {"chunker", mut_chunker_bad, CKS_E_FORMAT}, {"d", mut_files_none, CKS_E_UNSAFE_PATH},
    };
    struct buf bad = BUF_INIT;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct manifest m;
        struct buf out = BUF_INIT, err = BUF_INIT;
        char want[64];
        build_sample(&m);
        assert_int_equal(manifest_encode(&m, &out), 0);
        /* the line the field is on */
        size_t line = 1;
        const char *p = buf_str(&out);
        size_t klen = strlen(cases[i].field);
        while (!(strncmp(p, cases[i].field, klen) == 0 && p[klen] == ' ')) {
            p = strchr(p, '\n');
            assert_non_null(p);
            p++;
            line++;
        }
        cases[i].fn(&m);
        buf_reset(&out);
        assert_int_equal(manifest_encode(&m, &out), cases[i].code);
        assert_int_equal(manifest_validate(&m, &err), cases[i].code);
        snprintf(want, sizeof(want), "line %zu: ", line);
        if (strncmp(buf_str(&err), want, strlen(want)))
            buf_printf(&bad, "\n  %s: \"%s\", want \"%s...\"", cases[i].field, buf_str(&err), want);
        manifest_free(&m);
        buf_free(&out);
        buf_free(&err);
    }
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", buf_str(&bad));
    size_t nbad = bad.len;
    buf_free(&bad); /* before fail_msg, which does not return */
    if (nbad)
        fail_msg("validate names another line than the encoder writes:%s", msg);
}

/* ---- version 4: a merged multi-node step ---------------------------------- */

/* The sample as a merged step of 3 nodes: node fields round-trip, the
 * encoding is version 4 with a "nodes" line, a node field out of range
 * fails validate at the entry's line, and without nodes the same struct
 * is version 3 again. */
static void test_nodes_round_trip(void **state)
{
    struct manifest m, back;
    struct buf out = BUF_INIT, again = BUF_INIT, err = BUF_INIT;
    build_sample(&m);
    m.nodes = 3;
    for (size_t i = 0; i < m.nfiles; i++)
        m.files[i].node = i % 4 == 3 ? MANIFEST_NODE_SEVERAL : (int32_t)(i % 3);
    assert_int_equal(manifest_encode(&m, &out), 0);
    assert_true(strncmp(buf_str(&out), "ckptsync-manifest 4\n", 20) == 0);
    assert_non_null(
        strstr(buf_str(&out), "\nchunker fastcdc2020 1024 4096 16384 1\nnodes 3\nfiles "));
    assert_non_null(strstr(buf_str(&out), "\nd 0755 - 0 - shards\n"));
    assert_non_null(strstr(buf_str(&out), " * 100 ")); /* "one": entry 3, several */
    int r = manifest_parse(out.data, out.len, &back, &err);
    if (r < 0)
        fail_msg("v4: %s (%s)", buf_str(&err), err_str(r));
    assert_true(manifest_equal(&m, &back));
    assert_int_equal(back.nodes, 3);
    assert_int_equal(back.files[3].node, MANIFEST_NODE_SEVERAL);
    assert_int_equal(back.files[2].node, 2);
    assert_int_equal(manifest_encode(&back, &again), 0);
    assert_int_equal(again.len, out.len);
    assert_memory_equal(again.data, out.data, out.len);
    back.files[1].node = 1 - back.files[1].node; /* another node is another manifest */
    assert_false(manifest_equal(&m, &back));
    back.files[1].node = 3; /* not below nodes: refused at its line (15 + 1) */
    assert_int_equal(manifest_validate(&back, &err), CKS_E_FORMAT);
    assert_true(strncmp(buf_str(&err), "line 16: ", 9) == 0);
    back.nodes = MANIFEST_MAX_NODES + 1;
    assert_int_equal(manifest_validate(&back, &err), CKS_E_LIMIT);
    assert_true(strncmp(buf_str(&err), "line 12: ", 9) == 0);
    for (size_t i = 0; i < m.nfiles; i++) /* a node field outside version 4 */
        m.files[i].node = 0;
    m.nodes = 0;
    buf_reset(&out);
    assert_int_equal(manifest_encode(&m, &out), 0);
    assert_true(strncmp(buf_str(&out), "ckptsync-manifest 3\n", 20) == 0);
    m.files[0].node = 1;
    assert_int_equal(manifest_validate(&m, &err), CKS_E_FORMAT);
    manifest_free(&m);
    manifest_free(&back);
    buf_free(&out);
    buf_free(&again);
    buf_free(&err);
}

/* ---- version 5: chunk-tree file digests ----------------------------------- */

/* Gives the regular files of m with an odd index a tree digest (of their
 * chunks, as a writer would). */
static void make_trees(struct manifest *m)
{
    for (size_t i = 1; i < m->nfiles; i += 2) {
        struct mfile *f = &m->files[i];
        if (f->type != MFILE_REG)
            continue;
        f->dkind = MDIGEST_TREE;
        assert_int_equal(filedigest_tree(&m->chunks[f->first_chunk], f->nchunks, f->digest), 0);
    }
}

static void check_v5(const struct manifest *m, const char *head)
{
    struct manifest back;
    struct buf out = BUF_INIT, again = BUF_INIT, err = BUF_INIT;
    assert_int_equal(manifest_encode(m, &out), 0);
    assert_true(strncmp(buf_str(&out), head, strlen(head)) == 0);
    int r = manifest_parse(out.data, out.len, &back, &err);
    if (r < 0)
        fail_msg("v5: %s (%s)", buf_str(&err), err_str(r));
    assert_true(manifest_equal(m, &back));
    for (size_t i = 0; i < m->nfiles; i++) {
        assert_int_equal(back.files[i].dkind, m->files[i].dkind);
        assert_true(filedigest_tree_matches(&back, &back.files[i]));
    }
    assert_int_equal(manifest_encode(&back, &again), 0);
    assert_int_equal(again.len, out.len);
    assert_memory_equal(again.data, out.data, out.len);
    back.files[3].digest[0] ^= 1; /* the tree no longer matches the chunk lines */
    assert_false(filedigest_tree_matches(&back, &back.files[3]));
    manifest_free(&back);
    buf_free(&out);
    buf_free(&again);
    buf_free(&err);
}

/* The sample with some tree digests: version 5 with "nodes 0" and
 * "tree:" tokens, a round trip and a canonical re-encoding; as a merged
 * step of 3 nodes, version 5 with node fields; with every digest sha256
 * again, the very bytes of version 3. */
static void test_v5_round_trip(void **state)
{
    struct manifest m;
    struct buf v3 = BUF_INIT, out = BUF_INIT, err = BUF_INIT;
    build_sample(&m);
    assert_int_equal(manifest_encode(&m, &v3), 0);
    make_trees(&m);
    assert_true(manifest_has_tree(&m));
    check_v5(&m, "ckptsync-manifest 5\n");
    assert_int_equal(manifest_encode(&m, &out), 0);
    assert_non_null(
        strstr(buf_str(&out), "\nchunker fastcdc2020 1024 4096 16384 1\nnodes 0\nfiles "));
    char want[128], hex[HASH_HEX_LEN + 1];
    hex_encode(m.files[3].digest, HASH_LEN, hex);
    snprintf(want, sizeof(want), "\nf 0644 1796083555123456789 100 tree:%s 1 one\n", hex);
    if (!strstr(buf_str(&out), want))
        fail_msg("want %s in %s", want, buf_str(&out));
    hex_encode(m.files[4].digest, HASH_LEN, hex); /* an even one keeps its SHA-256 */
    snprintf(want, sizeof(want), " 20385 %s 3 shards/model.pt\n", hex);
    assert_non_null(strstr(buf_str(&out), want));
    /* a tree digest on a directory is refused, at its line (15 + 0) */
    m.files[0].dkind = MDIGEST_TREE;
    assert_int_equal(manifest_validate(&m, &err), CKS_E_FORMAT);
    assert_true(strncmp(buf_str(&err), "line 15: ", 9) == 0);
    m.files[0].dkind = MDIGEST_SHA256;
    m.nodes = 3;
    for (size_t i = 0; i < m.nfiles; i++)
        m.files[i].node = (int32_t)(i % 3);
    check_v5(&m, "ckptsync-manifest 5\n");
    m.nodes = 0;
    for (size_t i = 0; i < m.nfiles; i++) {
        m.files[i].node = 0;
        m.files[i].dkind = MDIGEST_SHA256;
    }
    assert_false(manifest_has_tree(&m));
    buf_reset(&out);
    assert_int_equal(manifest_encode(&m, &out), 0);
    assert_int_equal(out.len, v3.len); /* the old bytes (the digests' values aside) */
    assert_true(strncmp(buf_str(&out), "ckptsync-manifest 3\n", 20) == 0);
    manifest_free(&m);
    buf_free(&v3);
    buf_free(&out);
    buf_free(&err);
}

/* Hand-written text: a version 5 manifest with one file of each kind, and
 * versions 3 and 4 whose digests are SHA-256 whatever they hold. */
static void test_v5_text(void **state)
{
    struct buf b = BUF_INIT, err = BUF_INIT;
    struct manifest m;
    const char *v5 = HDRV5("0", "2", "2") "f 0644 - 4 tree:" HX " 1 a\nc " HX " 4\n"
                                          "f 0644 - 5 " HX " 1 b\nc " HX " 5\n";
    append_end(&b, v5, strlen(v5));
    int r = manifest_parse(b.data, b.len, &m, &err);
    if (r < 0)
        fail_msg("v5 text: %s (%s)", buf_str(&err), err_str(r));
    assert_int_equal(m.nodes, 0);
    assert_int_equal(m.files[0].dkind, MDIGEST_TREE);
    assert_int_equal(m.files[1].dkind, MDIGEST_SHA256);
    assert_false(filedigest_tree_matches(&m, &m.files[0])); /* HX is no tree of "c HX 4" */
    manifest_free(&m);
    const char *v3 = HDRV3("1", "1") "f 0644 - 4 " HX " 1 a\nc " HX " 4\n";
    const char *v4 = HDRV4("2", "1", "1") "f 0644 - 1 4 " HX " 1 a\nc " HX " 4\n";
    const char *old[] = {v3, v4};
    for (int i = 0; i < 2; i++) {
        buf_reset(&b);
        append_end(&b, old[i], strlen(old[i]));
        assert_int_equal(manifest_parse(b.data, b.len, &m, &err), 0);
        assert_int_equal(m.files[0].dkind, MDIGEST_SHA256);
        assert_true(filedigest_tree_matches(&m, &m.files[0])); /* only its bytes can tell */
        manifest_free(&m);
    }
    buf_free(&b);
    buf_free(&err);
}

/* ---- every truncation and every altered byte is refused ------------------ */

static void test_truncations_and_flips(void **state)
{
    struct manifest m, back;
    struct buf out = BUF_INIT;
    build_sample(&m);
    assert_int_equal(manifest_encode(&m, &out), 0);
    for (size_t n = 0; n < out.len; n++) {
        int r = manifest_parse(out.data, n, &back, NULL);
        if (r != CKS_E_FORMAT)
            fail_msg("prefix of %zu/%zu bytes: got %d", n, out.len, r);
    }
    for (size_t i = 0; i < out.len; i++) {
        uint8_t saved = out.data[i];
        out.data[i] = saved == 'x' ? 'y' : 'x';
        int r = manifest_parse(out.data, out.len, &back, NULL);
        if (r >= 0)
            fail_msg("byte %zu altered: accepted", i);
        out.data[i] = saved;
    }
    manifest_free(&m);
    buf_free(&out);
}

static void test_too_large(void **state)
{
    size_t len = (size_t)MANIFEST_MAX_BYTES + 1;
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        skip();
    struct manifest m;
    struct buf err = BUF_INIT;
    assert_int_equal(manifest_parse(p, len, &m, &err), CKS_E_LIMIT);
    munmap(p, len);
    buf_free(&err);
}

/* ---- path, link, id and run checks ------------------------------------- */

struct check {
    const char *a, *b;
    int code;
};

static void test_path_check(void **state)
{
    static const struct check cases[] = {
        {"a", NULL, 0},
        {"a/b/c", NULL, 0},
        {"...", NULL, 0},
        {".a", NULL, 0},
        {"a..", NULL, 0},
        {"-", NULL, 0},
        {"", NULL, CKS_E_UNSAFE_PATH},
        {"/a", NULL, CKS_E_UNSAFE_PATH},
        {"..", NULL, CKS_E_UNSAFE_PATH},
        {".", NULL, CKS_E_UNSAFE_PATH},
        {"a/..", NULL, CKS_E_UNSAFE_PATH},
        {"a/./b", NULL, CKS_E_UNSAFE_PATH},
        {"a//b", NULL, CKS_E_UNSAFE_PATH},
        {"a/", NULL, CKS_E_UNSAFE_PATH},
        {"/", NULL, CKS_E_UNSAFE_PATH},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (manifest_path_check(cases[i].a) != cases[i].code)
            fail_msg("path \"%s\": want %d", cases[i].a, cases[i].code);
    assert_int_equal(manifest_path_check(NULL), CKS_E_UNSAFE_PATH);

    char big[MANIFEST_MAX_PATH + 2];
    memset(big, 'a', sizeof(big));
    big[MANIFEST_MAX_COMPONENT] = 0;
    assert_int_equal(manifest_path_check(big), 0);
    big[MANIFEST_MAX_COMPONENT] = 'a';
    big[MANIFEST_MAX_COMPONENT + 1] = 0;
    assert_int_equal(manifest_path_check(big), CKS_E_UNSAFE_PATH);
    memset(big, 'a', sizeof(big));
    for (size_t i = 1; i < sizeof(big); i += 2)
        big[i] = '/';
    big[MANIFEST_MAX_PATH - 1] = 'a';
    big[MANIFEST_MAX_PATH] = 0;
    assert_int_equal(manifest_path_check(big), 0);
    big[MANIFEST_MAX_PATH] = '/';
    big[MANIFEST_MAX_PATH + 1] = 0;
    assert_int_equal(manifest_path_check(big), CKS_E_UNSAFE_PATH);
}

static void test_link_check(void **state)
{
    static const struct check cases[] = {
        {"l", "x", 0},
        {"a/l", "../x", 0},
        {"a/l", "..", 0},
        {"a/b/l", "../../x", 0},
        {"a/l", "./x", 0},
        {"a/l", "x//y", 0},
        {"a/l", "./../x", 0},
        /* ".." after a name could climb through a sibling symlink */
        {"a/l", "b/../../x", CKS_E_UNSAFE_PATH},
        {"a/l", "../a/../x", CKS_E_UNSAFE_PATH},
        {"a/l", "b/..", CKS_E_UNSAFE_PATH},
        {"l", "../x", CKS_E_UNSAFE_PATH},
        {"l", "..", CKS_E_UNSAFE_PATH},
        {"a/l", "../../x", CKS_E_UNSAFE_PATH},
        {"a/l", "/etc/passwd", CKS_E_UNSAFE_PATH},
        {"a/l", "b/../../../x", CKS_E_UNSAFE_PATH},
        {"a/l", "", CKS_E_UNSAFE_PATH},
        {"../l", "x", CKS_E_UNSAFE_PATH},
        {"a/l", "./../..", CKS_E_UNSAFE_PATH},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (manifest_link_check(cases[i].a, cases[i].b) != cases[i].code)
            fail_msg("link \"%s\" -> \"%s\": want %d", cases[i].a, cases[i].b, cases[i].code);
    assert_int_equal(manifest_link_check("l", NULL), CKS_E_UNSAFE_PATH);
}

static void test_id_run_check(void **state)
{
    static const struct check ids[] = {
        {"20261201T000701Z-3f2a9c1b7d0e", NULL, 0},
        {"a", NULL, 0},
        {"-", NULL, 0},
        {"a.b_c-D", NULL, 0},
        {"", NULL, CKS_E_FORMAT},
        {".a", NULL, CKS_E_FORMAT},
        {"a/b", NULL, CKS_E_FORMAT},
        {"a b", NULL, CKS_E_FORMAT},
        {"\xc3\xa9", NULL, CKS_E_FORMAT},
        {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", NULL, 0},
        {"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefx", NULL, CKS_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        if (manifest_id_check(ids[i].a) != ids[i].code)
            fail_msg("id \"%s\": want %d", ids[i].a, ids[i].code);
    assert_int_equal(manifest_id_check(NULL), CKS_E_FORMAT);
    assert_int_equal(manifest_run_check("run-1"), 0);
    assert_int_equal(manifest_run_check(".cache"), 0);
    assert_int_equal(manifest_run_check("."), CKS_E_FORMAT);
    assert_int_equal(manifest_run_check(".."), CKS_E_FORMAT);
    assert_int_equal(manifest_run_check("a/b"), CKS_E_FORMAT);
    assert_int_equal(manifest_run_check(""), CKS_E_FORMAT);
    assert_int_equal(manifest_run_check(NULL), CKS_E_FORMAT);
}

/* ---- the encoder refuses what the parser would refuse ------------------ */

typedef void (*mutate_fn)(struct manifest *m);

static void mut_abs_path(struct manifest *m)
{
    m->files[0].path[0] = '/';
}
static void mut_dup_path(struct manifest *m)
{
    memcpy(m->files[1].path, "shards", 7);
}
static void mut_size(struct manifest *m)
{
    m->files[4].size++;
}
static void mut_chunk_len(struct manifest *m)
{
    m->chunks[1].len = 16385;
}
static void mut_chunk_zero(struct manifest *m)
{
    m->chunks[1].len = 0;
}
static void mut_mode(struct manifest *m)
{
    m->files[0].mode = 010000;
}
static void mut_host(struct manifest *m)
{
    free(m->host);
    m->host = NULL;
}
static void mut_host_empty(struct manifest *m)
{
    m->host[0] = 0;
}
static void mut_run(struct manifest *m)
{
    m->run[0] = '/';
}
static void mut_id(struct manifest *m)
{
    m->id[0] = '.';
}
static void mut_chunker(struct manifest *m)
{
    m->chunk_min = m->chunk_max + 1;
}
static void mut_chunker_max(struct manifest *m)
{
    m->chunk_max = (256u << 20) + 1;
}
static void mut_step(struct manifest *m)
{
    m->step = -2;
}
static void mut_link(struct manifest *m)
{
    m->files[11].link[0] = '/';
}
static void mut_link_escape(struct manifest *m)
{
    m->files[12].path[0] = 'z';
    m->files[12].path[1] = 0;
}
static void mut_below_file(struct manifest *m)
{
    memcpy(m->files[1].path, "one/", 4);
}
static void mut_first_chunk(struct manifest *m)
{
    m->files[4].first_chunk++;
}
static void mut_parent(struct manifest *m)
{
    manifest_set_str(&m->parent, "a b");
}
static void mut_root(struct manifest *m)
{
    manifest_set_str(&m->root, "../x");
}
static void mut_instance(struct manifest *m)
{
    manifest_set_str(&m->instance, "");
}
static void mut_hardlink_dir(struct manifest *m)
{
    manifest_set_str(&m->files[13].link, "shards");
}
static void mut_hardlink_none(struct manifest *m)
{
    manifest_set_str(&m->files[13].link, "nope");
}
static void mut_hardlink_up(struct manifest *m)
{
    manifest_set_str(&m->files[13].link, "../one");
}
static void mut_hardlink_time(struct manifest *m)
{
    m->files[13].mtime_ns = 5;
}
static void mut_mtime_neg(struct manifest *m)
{
    m->files[2].mtime_ns = -2;
}

static const struct {
    const char *name;
    mutate_fn fn;
    int code;
} mutations[] = {
    {"absolute path", mut_abs_path, CKS_E_UNSAFE_PATH},
    {"duplicate path", mut_dup_path, CKS_E_FORMAT},
    {"size != chunks", mut_size, CKS_E_FORMAT},
    {"chunk > chunk_max", mut_chunk_len, CKS_E_LIMIT},
    {"chunk len 0", mut_chunk_zero, CKS_E_FORMAT},
    {"mode", mut_mode, CKS_E_FORMAT},
    {"no host", mut_host, CKS_E_FORMAT},
    {"empty host", mut_host_empty, CKS_E_FORMAT},
    {"bad run", mut_run, CKS_E_FORMAT},
    {"bad id", mut_id, CKS_E_FORMAT},
    {"chunker", mut_chunker, CKS_E_FORMAT},
    {"chunker max", mut_chunker_max, CKS_E_LIMIT},
    {"step", mut_step, CKS_E_FORMAT},
    {"absolute link", mut_link, CKS_E_UNSAFE_PATH},
    {"escaping link", mut_link_escape, CKS_E_UNSAFE_PATH},
    {"below a file", mut_below_file, CKS_E_UNSAFE_PATH},
    {"chunk range", mut_first_chunk, CKS_E_FORMAT},
    {"parent", mut_parent, CKS_E_FORMAT},
    {"root", mut_root, CKS_E_UNSAFE_PATH},
    {"empty instance", mut_instance, CKS_E_FORMAT},
    {"negative gen", mut_gen_neg, CKS_E_FORMAT},
    {"gen above max", mut_gen_big, CKS_E_FORMAT},
    {"hard link to a directory", mut_hardlink_dir, CKS_E_FORMAT},
    {"hard link to nothing", mut_hardlink_none, CKS_E_FORMAT},
    {"hard link climbing", mut_hardlink_up, CKS_E_UNSAFE_PATH},
    {"hard link with a time", mut_hardlink_time, CKS_E_FORMAT},
    {"mtime below -1", mut_mtime_neg, CKS_E_FORMAT},
};

static void test_encode_rejects(void **state)
{
    for (size_t i = 0; i < sizeof(mutations) / sizeof(mutations[0]); i++) {
        struct manifest m;
        struct buf out = BUF_INIT, err = BUF_INIT;
        build_sample(&m);
        assert_int_equal(buf_puts(&out, "keep"), 0);
        mutations[i].fn(&m);
        int r = manifest_encode(&m, &out);
        if (r != mutations[i].code)
            fail_msg("%s: got %d, want %d", mutations[i].name, r, mutations[i].code);
        assert_string_equal(buf_str(&out), "keep");
        assert_int_equal(manifest_validate(&m, &err), mutations[i].code);
        assert_true(strncmp(buf_str(&err), "line ", 5) == 0);
        manifest_free(&m);
        buf_free(&out);
        buf_free(&err);
    }
}

static void test_field_limits(void **state)
{
    struct manifest m, back;
    struct buf out = BUF_INIT;
    char host[MANIFEST_MAX_FIELD + 2];
    build_sample(&m);
    memset(host, '%', sizeof(host)); /* each byte encodes to 3 */
    host[MANIFEST_MAX_FIELD] = 0;
    assert_int_equal(manifest_set_str(&m.host, host), 0);
    assert_int_equal(manifest_encode(&m, &out), 0);
    assert_int_equal(manifest_parse(out.data, out.len, &back, NULL), 0);
    assert_string_equal(back.host, host);
    manifest_free(&back);
    host[MANIFEST_MAX_FIELD] = '%';
    host[MANIFEST_MAX_FIELD + 1] = 0;
    assert_int_equal(manifest_set_str(&m.host, host), 0);
    assert_int_equal(manifest_encode(&m, &out), CKS_E_LIMIT);
    manifest_free(&m);
    buf_free(&out);
}

static void test_builder_misuse(void **state)
{
    struct manifest m;
    uint8_t id[HASH_LEN] = {0};
    manifest_init(&m);
    assert_int_equal(manifest_add_chunk(&m, id, 1), -EINVAL);
    assert_int_equal(manifest_add_file(&m, MFILE_DIR, "d", 0755, NULL), 0);
    assert_int_equal(manifest_add_chunk(&m, id, 1), -EINVAL);
    assert_int_equal(manifest_add_file(&m, MFILE_LINK, "l", 0777, NULL), -EINVAL);
    assert_int_equal(manifest_add_file(&m, MFILE_REG, "f", 0644, "x"), -EINVAL);
    assert_int_equal(manifest_add_file(&m, MFILE_HARDLINK, "h", 0644, NULL), -EINVAL);
    assert_int_equal(manifest_add_file(&m, MFILE_REG, NULL, 0644, NULL), -EINVAL);
    assert_int_equal(manifest_add_file(&m, (enum mfile_type)'x', "f", 0644, NULL), -EINVAL);
    manifest_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_magic),     cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty_manifest),   cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_accepts),          cmocka_unit_test(test_gen_round_trip),
        cmocka_unit_test(test_version1),         cmocka_unit_test(test_validate_lines),
        cmocka_unit_test(test_nodes_round_trip), cmocka_unit_test(test_v5_round_trip),
        cmocka_unit_test(test_v5_text),          cmocka_unit_test(test_truncations_and_flips),
        cmocka_unit_test(test_too_large),        cmocka_unit_test(test_path_check),
        cmocka_unit_test(test_link_check),       cmocka_unit_test(test_id_run_check),
        cmocka_unit_test(test_encode_rejects),   cmocka_unit_test(test_field_limits),
        cmocka_unit_test(test_builder_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * codec-bench.c — stored/raw and single-core speed of the chunk codecs on
 * one file, cut into chunks as the daemon cuts them (FastCDC, min 512 KiB,
 * avg 2 MiB, max 8 MiB, normalization 1).  Not a test: it prints figures.
 *
 *   codec-bench [-w WIDTH] [-r REPEAT] [-l LABEL] [-H] [-v] FILE...
 *
 * Per chunk and codec, in the same run: zstd -1, zstd -3, byte-grouped
 * zstd -3 (planes of WIDTH bytes, default 4, each a zstd -3 frame: the
 * baseline of issue 11), tcodec (tcodec_pick on the chunk, tcodec where
 * it says a width, zstd -3 where it says 0, as the daemon does without a
 * hint) and tcodec at WIDTH (every chunk, as with a width from the file's
 * metadata).
 * Every codec compresses all chunks, then decompresses them; the time is
 * the calling thread's CPU time, best of REPEAT (default 3) passes, so
 * other load on the machine counts less.  Each decoded chunk is compared
 * with the original (outside the timing); a mismatch exits 1.
 *
 * Every file is cut on its own; the row covers all of them.
 * Prints one markdown table row (-H: the header first): data, raw MB,
 * then stored/raw, compress MB/s and decompress MB/s (of raw bytes) per
 * codec, then what tcodec_pick said (share of bytes per width) and the
 * time pick took relative to the tcodec encode.  -v adds a line per
 * chunk.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/fileio.h"
#include "engine/fastcdc.h"
#include "engine/tcodec.h"

#define MAX_FILE (1024ull << 20)

enum { C_ZSTD1, C_ZSTD3, C_BG3, C_TC, C_TCW, C_COUNT };

struct chunk {
    const uint8_t *raw;
    size_t len;
    unsigned pick;           /* tcodec_pick's width */
    struct buf enc[C_COUNT]; /* each codec's output */
};

struct bench {
    struct chunk *c;
    size_t n;
    unsigned width, repeat;
    bool verbose;
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    uint8_t *out;     /* a decoded chunk */
    uint8_t *scratch; /* planes */
    double ctime[C_COUNT], dtime[C_COUNT], pick_time, pick_best;
};

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "codec-bench: %s\n", what);
    exit(1);
}

/* One zstd frame appended to out. */
static void zstd_put(struct bench *b, const uint8_t *p, size_t n, int level, struct buf *out)
{
    size_t cap = ZSTD_compressBound(n);
    if (buf_reserve(out, cap) < 0)
        die("out of memory");
    size_t r = ZSTD_compressCCtx(b->cctx, out->data + out->len, cap, p, n, level);
    if (ZSTD_isError(r))
        die(ZSTD_getErrorName(r));
    out->len += r;
}

static void zstd_get(struct bench *b, const uint8_t *p, size_t n, uint8_t *dst, size_t len)
{
    size_t r = ZSTD_decompressDCtx(b->dctx, dst, len, p, n);
    if (ZSTD_isError(r) || r != len)
        die("zstd decode failed");
}

/* The baseline's transposes, with the width a constant so that the
 * compiler vectorizes them as it does tcodec's. */
static inline __attribute__((always_inline)) void split_w(const uint8_t *raw, size_t n, unsigned w,
                                                          unsigned k, uint8_t *dst)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = raw[i * w + k];
}

static inline __attribute__((always_inline)) void join_w(const uint8_t *s, size_t n, unsigned w,
                                                         uint8_t *dst)
{
    for (size_t i = 0; i < n; i++)
        for (unsigned k = 0; k < w; k++)
            dst[i * w + k] = s[k * n + i];
}

/* Byte-grouped: 4-byte frame sizes, the w frames, the tail raw. */
static void bg_encode(struct bench *b, const uint8_t *raw, size_t len, struct buf *out)
{
    unsigned w = b->width;
    size_t n = len / w;
    buf_reset(out);
    if (buf_reserve(out, 4 * w) < 0)
        die("out of memory");
    out->len = 4 * w;
    for (unsigned k = 0; k < w; k++) {
        if (w == 2)
            split_w(raw, n, 2, k, b->scratch);
        else
            split_w(raw, n, 4, k, b->scratch);
        size_t before = out->len;
        zstd_put(b, b->scratch, n, 3, out);
        uint32_t fl = (uint32_t)(out->len - before);
        memcpy(out->data + 4 * k, &fl, 4);
    }
    if (buf_append(out, raw + n * w, len - n * w) < 0)
        die("out of memory");
}

static void bg_decode(struct bench *b, const uint8_t *p, size_t plen, uint8_t *dst, size_t len)
{
    unsigned w = b->width;
    size_t n = len / w, pos = 4 * w;
    for (unsigned k = 0; k < w; k++) {
        uint32_t fl;
        memcpy(&fl, p + 4 * k, 4);
        zstd_get(b, p + pos, fl, b->scratch + k * n, n);
        pos += fl;
    }
    if (w == 2)
        join_w(b->scratch, n, 2, dst);
    else
        join_w(b->scratch, n, 4, dst);
    memcpy(dst + n * w, p + pos, plen - pos);
}

static void encode_one(struct bench *b, unsigned codec, struct chunk *c)
{
    struct buf *out = &c->enc[codec];
    buf_reset(out);
    switch (codec) {
    case C_ZSTD1:
        zstd_put(b, c->raw, c->len, 1, out);
        break;
    case C_ZSTD3:
        zstd_put(b, c->raw, c->len, 3, out);
        break;
    case C_BG3:
        bg_encode(b, c->raw, c->len, out);
        break;
    case C_TCW:
        if (tcodec_encode(c->raw, c->len, b->width, out) < 0)
            die("tcodec_encode failed");
        break;
    default: {
        double t0 = cpu_now();
        c->pick = tcodec_pick(c->raw, c->len, NULL);
        b->pick_time += cpu_now() - t0;
        if (c->pick) {
            if (tcodec_encode(c->raw, c->len, c->pick, out) < 0)
                die("tcodec_encode failed");
        } else {
            zstd_put(b, c->raw, c->len, 3, out);
        }
    }
    }
}

static void decode_one(struct bench *b, unsigned codec, const struct chunk *c)
{
    const struct buf *in = &c->enc[codec];
    if (codec == C_BG3) {
        bg_decode(b, in->data, in->len, b->out, c->len);
    } else if ((codec == C_TC && c->pick) || codec == C_TCW) {
        int r = tcodec_decode(in->data, in->len, b->out, c->len);
        if (r < 0)
            die(err_str(r));
    } else {
        zstd_get(b, in->data, in->len, b->out, c->len);
    }
}

static void run_codec(struct bench *b, unsigned codec)
{
    double best_c = 1e30, best_d = 1e30, best_pick = 1e30;
    for (unsigned rep = 0; rep < b->repeat; rep++) {
        b->pick_time = 0;
        double t0 = cpu_now();
        for (size_t i = 0; i < b->n; i++)
            encode_one(b, codec, &b->c[i]);
        double t1 = cpu_now();
        for (size_t i = 0; i < b->n; i++)
            decode_one(b, codec, &b->c[i]);
        double t2 = cpu_now();
        if (t1 - t0 < best_c) {
            best_c = t1 - t0;
            best_pick = b->pick_time;
        }
        if (t2 - t1 < best_d)
            best_d = t2 - t1;
    }
    for (size_t i = 0; i < b->n; i++) {
        decode_one(b, codec, &b->c[i]);
        if (memcmp(b->out, b->c[i].raw, b->c[i].len) != 0)
            die("round trip mismatch");
    }
    b->ctime[codec] = best_c;
    b->dtime[codec] = best_d;
    if (codec == C_TC)
        b->pick_best = best_pick;
}

static size_t cap_chunks;
static size_t max_chunk;

static void cut(struct bench *b, const uint8_t *data, size_t len)
{
    struct fastcdc cdc;
    if (fastcdc_init(&cdc, 512u << 10, 2u << 20, 8u << 20, 1) < 0)
        die("fastcdc_init");
    for (size_t off = 0; off < len;) {
        size_t n = fastcdc_cut(&cdc, data + off, len - off, true);
        if (b->n == cap_chunks) {
            cap_chunks = cap_chunks ? 2 * cap_chunks : 64;
            struct chunk *c = realloc(b->c, cap_chunks * sizeof(*c));
            if (!c)
                die("out of memory");
            memset(c + b->n, 0, (cap_chunks - b->n) * sizeof(*c));
            b->c = c;
        }
        b->c[b->n].raw = data + off;
        b->c[b->n].len = n;
        b->n++;
        off += n;
        max_chunk = n > max_chunk ? n : max_chunk;
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: codec-bench [-w WIDTH] [-r REPEAT] [-l LABEL] [-H] [-v] FILE...\n");
    exit(2);
}

static void print_header(void)
{
    printf("| data | raw MB |");
    static const char *names[] = {"zstd -1", "zstd -3", "byte-grouped zstd -3", "tcodec",
                                  "tcodec at the width"};
    for (unsigned k = 0; k < C_COUNT; k++)
        printf(" %s stored/raw | %s c MB/s | %s d MB/s |", names[k], names[k], names[k]);
    printf(" tcodec_pick (bytes by width) | pick time / tcodec encode |\n|---|---|");
    for (unsigned k = 0; k < C_COUNT; k++)
        printf("---|---|---|");
    printf("---|---|\n");
}

int main(int argc, char **argv)
{
    struct bench b = {.width = 4, .repeat = 3};
    const char *label = NULL;
    bool header = false;
    int opt;
    while ((opt = getopt(argc, argv, "w:r:l:Hv")) != -1) {
        switch (opt) {
        case 'w':
            b.width = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'r':
            b.repeat = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'l':
            label = optarg;
            break;
        case 'H':
            header = true;
            break;
        case 'v':
            b.verbose = true;
            break;
        default:
            usage();
        }
    }
    if (optind >= argc || (b.width != 2 && b.width != 4) || b.repeat < 1)
        usage();
    int nfiles = argc - optind;
    uint8_t **data = calloc((size_t)nfiles, sizeof(*data));
    if (!data)
        die("out of memory");
    size_t len = 0;
    for (int i = 0; i < nfiles; i++) {
        size_t flen = 0;
        if (fileio_read_all(argv[optind + i], MAX_FILE, &data[i], &flen) < 0) {
            fprintf(stderr, "codec-bench: cannot read \"%s\"\n", argv[optind + i]);
            return 1;
        }
        cut(&b, data[i], flen);
        len += flen;
    }
    b.out = malloc(max_chunk + 1);
    b.scratch = malloc(max_chunk + 1);
    b.cctx = ZSTD_createCCtx();
    b.dctx = ZSTD_createDCtx();
    if (!b.out || !b.scratch || !b.cctx || !b.dctx)
        die("out of memory");

    size_t stored[C_COUNT] = {0}, by_width[5] = {0};
    for (unsigned k = 0; k < C_COUNT; k++) {
        run_codec(&b, k);
        for (size_t i = 0; i < b.n; i++)
            stored[k] += b.c[i].enc[k].len;
    }
    for (size_t i = 0; i < b.n; i++)
        by_width[b.c[i].pick] += b.c[i].len;
    if (b.verbose)
        for (size_t i = 0; i < b.n; i++) {
            unsigned pm = 0;
            tcodec_pick(b.c[i].raw, b.c[i].len, &pm);
            fprintf(stderr, "chunk %zu: %zu bytes, pick %u (est %u permille), tcodec %.4f\n", i,
                    b.c[i].len, b.c[i].pick, pm, (double)b.c[i].enc[C_TC].len / b.c[i].len);
        }

    if (header)
        print_header();
    double mb = (double)len / 1e6;
    printf("| %s | %.1f |", label ? label : argv[optind], mb);
    for (unsigned k = 0; k < C_COUNT; k++)
        printf(" %.3f | %.0f | %.0f |", len ? (double)stored[k] / (double)len : 0.0,
               mb / b.ctime[k], mb / b.dtime[k]);
    printf(" ");
    const char *sep = "";
    for (unsigned w = 0; w <= 4; w++)
        if (by_width[w]) {
            printf("%s%u: %.0f %%", sep, w, 100.0 * (double)by_width[w] / (double)len);
            sep = ", ";
        }
    printf(" | %.1f %% |\n", 100.0 * b.pick_best / b.ctime[C_TC]);

    for (size_t i = 0; i < b.n; i++)
        for (unsigned k = 0; k < C_COUNT; k++)
            buf_free(&b.c[i].enc[k]);
    free(b.c);
    free(b.out);
    free(b.scratch);
    for (int i = 0; i < nfiles; i++)
        free(data[i]);
    free(data);
    ZSTD_freeCCtx(b.cctx);
    ZSTD_freeDCtx(b.dctx);
    return 0;
}

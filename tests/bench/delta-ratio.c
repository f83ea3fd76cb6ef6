/*
 * delta-ratio.c — bytes stored for a successor checkpoint, per part and
 * method, and the single-core speed of engine/tdelta (issue 27).  Not a
 * test: it prints figures (tests/bench/delta-ratio.sh runs it).
 *
 *   bench-delta-ratio [-x] [-H] INDEX CHILD PARENT LABEL
 *
 * INDEX, CHILD, PARENT: tests/bench/delta_train.py's index.txt and two of
 * its ckpt-<step>.bin (the same layout).  Each part (bf16 weights, fp32
 * master, Adam moments) is cut by the daemon's FastCDC (min 512 KiB, avg
 * 2 MiB, max 8 MiB) as if it were a file of its own, in the child and in
 * the parent; then every chunk of the child is stored by four methods:
 *   today    chunkobj_encode (zstd -3, planes at the part's width)
 *   derived  bf16 chunks as BF16 segments on the child's own master chunks
 *            (tensor i of the bf16 part is the cast of tensor i of master)
 *   xor      XOR segments against the parent's chunks, same offsets
 *   delta    the same segments, each XOR or SUB (the difference of the
 *            bit patterns), whichever codes smaller
 *   combined derived for bf16, delta for master and Adam
 * A recipe's segments follow the tensors and are cut where a base chunk
 * ends; an element that straddles a base chunk's end, or a partial element
 * at a chunk's start, is a small literal.  tdelta_encode keeps per segment
 * the smaller of XOR and literal (by estimate; -x: by coding both) and
 * answers a plain object where no base pays; the stored size of a chunk is
 * the smaller of that and today's object (per chunk min).  Every recipe
 * is decoded with its bases and compared with the chunk (a mismatch exits
 * 1).  Times are the thread's CPU time, one pass.
 *
 * Prints markdown rows: LABEL, part, raw MB, stored/raw per method; the
 * total; and encode/decode MB/s of today's codec and of the combined one
 * (decode includes the SHA-256 of the result, as a restore does).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "engine/chunkobj.h"
#include "engine/fastcdc.h"
#include "engine/hash.h"
#include "engine/tdelta.h"

enum { P_BF16, P_MASTER, P_ADAM, P_COUNT };
enum { M_TODAY, M_DERIVED, M_XOR, M_DELTA, M_COMB, M_COUNT };
static const char *const part_name[P_COUNT] = {"bf16 weights", "fp32 master", "AdamW m + v"};
static const unsigned part_width[P_COUNT] = {2, 4, 4};

struct tensor {
    int part;
    size_t off, len;
};

struct cut {
    size_t off, len;
    uint8_t id[HASH_LEN];
};

struct cuts {
    struct cut *c;
    size_t n;
};

struct file {
    uint8_t *data;
    size_t len;
    struct cuts part[P_COUNT];
};

struct bench {
    struct tensor *t;
    size_t nt;
    size_t pstart[P_COUNT], pend[P_COUNT];
    size_t first_master; /* index of the first master tensor */
    struct file child, parent;
    bool exact;
    struct chunkobj_ctx ctx;
    struct buf obj, out;
    struct tdelta_scratch scratch;
    double stored[P_COUNT][M_COUNT], raw[P_COUNT];
    double enc_time[M_COUNT], dec_time[M_COUNT], enc_bytes[M_COUNT];
};

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench-delta-ratio: %s\n", what);
    exit(1);
}

static void read_file(const char *path, struct file *f)
{
    FILE *fp = fopen(path, "rb");
    if (!fp || fseek(fp, 0, SEEK_END) != 0)
        die(path);
    long n = ftell(fp);
    rewind(fp);
    f->data = malloc((size_t)n + 1);
    if (!f->data || fread(f->data, 1, (size_t)n, fp) != (size_t)n)
        die(path);
    f->len = (size_t)n;
    fclose(fp);
}

static void read_index(struct bench *b, const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        die(path);
    char part[32], name[512];
    size_t off, len, cap = 0;
    for (int i = 0; i < P_COUNT; i++)
        b->pstart[i] = SIZE_MAX, b->pend[i] = 0;
    while (fscanf(fp, "%31s %511s %zu %zu", part, name, &off, &len) == 4) {
        int p = !strcmp(part, "bf16") ? P_BF16 : !strcmp(part, "master") ? P_MASTER : P_ADAM;
        if (b->nt == cap && !(b->t = realloc(b->t, (cap = 2 * cap + 64) * sizeof(*b->t))))
            die("memory");
        if (p == P_MASTER && b->pstart[P_MASTER] == SIZE_MAX)
            b->first_master = b->nt;
        b->t[b->nt++] = (struct tensor){p, off, len};
        if (off < b->pstart[p])
            b->pstart[p] = off;
        if (off + len > b->pend[p])
            b->pend[p] = off + len;
    }
    fclose(fp);
}

static void cut_parts(const struct bench *b, struct file *f)
{
    struct fastcdc cdc;
    if (fastcdc_init(&cdc, 512u << 10, 2u << 20, 8u << 20, 1) < 0)
        die("fastcdc_init");
    for (int p = 0; p < P_COUNT; p++) {
        struct cuts *cs = &f->part[p];
        size_t off = b->pstart[p], cap = 0;
        while (off < b->pend[p]) {
            size_t n = fastcdc_cut(&cdc, f->data + off, b->pend[p] - off, true);
            if (cs->n == cap && !(cs->c = realloc(cs->c, (cap = 2 * cap + 16) * sizeof(*cs->c))))
                die("memory");
            struct cut *c = &cs->c[cs->n++];
            c->off = off;
            c->len = n;
            hash_sha256(f->data + off, n, c->id);
            off += n;
        }
    }
}

/* ---- plans ---- */

struct plan {
    struct tdelta_seg seg[TDELTA_MAX_SEGS];
    size_t n;
    struct tdelta_base base[TDELTA_MAX_BASES];
    const struct cut *used[TDELTA_MAX_BASES];
    size_t nb;
};

static void add_lit(struct plan *pl, size_t len, unsigned w)
{
    if (pl->n && pl->seg[pl->n - 1].kind == TDELTA_LITERAL) {
        pl->seg[pl->n - 1].len += (uint32_t)len;
        return;
    }
    if (pl->n == TDELTA_MAX_SEGS)
        die("too many segments");
    pl->seg[pl->n++] = (struct tdelta_seg){TDELTA_LITERAL, (uint32_t)len, 0, 0, w};
}

/* The slot of base chunk c in the plan, -1 when 16 are taken. */
static int base_slot(struct plan *pl, const struct cut *c, const uint8_t *data)
{
    for (size_t i = 0; i < pl->nb; i++)
        if (pl->used[i] == c)
            return (int)i;
    if (pl->nb == TDELTA_MAX_BASES)
        return -1;
    pl->used[pl->nb] = c;
    memcpy(pl->base[pl->nb].id, c->id, HASH_LEN);
    pl->base[pl->nb].data = data + c->off;
    pl->base[pl->nb].len = c->len;
    return (int)pl->nb++;
}

static const struct cut *cut_at(const struct cuts *cs, size_t off)
{
    size_t lo = 0, hi = cs->n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (cs->c[mid].off <= off)
            lo = mid;
        else
            hi = mid;
    }
    return &cs->c[lo];
}

/* len child bytes (a multiple of w) whose base starts at file offset at,
 * with ratio base bytes per child byte, cut where a base chunk ends. */
static void add_ref(struct plan *pl, enum tdelta_kind kind, size_t len, size_t at, unsigned ratio,
                    unsigned w, const struct cuts *cs, const uint8_t *data)
{
    while (len) {
        const struct cut *c = cut_at(cs, at);
        size_t fit = (c->off + c->len - at) / ratio / w * w;
        size_t n = fit < len ? fit : len;
        int slot = n ? base_slot(pl, c, data) : -1;
        if (slot < 0) {
            n = n ? n : w;
            add_lit(pl, n, w);
        } else {
            if (pl->n == TDELTA_MAX_SEGS)
                die("too many segments");
            pl->seg[pl->n++] =
                (struct tdelta_seg){kind, (uint32_t)n, (uint32_t)slot, (uint32_t)(at - c->off), w};
        }
        len -= n;
        at += n * ratio;
    }
}

/* The plan for child bytes [c0, c1) of part p by method m. */
static void plan_chunk(struct bench *b, struct plan *pl, int p, int m, size_t c0, size_t c1)
{
    unsigned w = part_width[p];
    bool derive = p == P_BF16 && (m == M_DERIVED || m == M_COMB);
    bool xor = m == M_XOR || m == M_DELTA || (m == M_COMB && p != P_BF16);
    pl->n = pl->nb = 0;
    for (size_t i = 0; i < b->nt; i++) {
        const struct tensor *t = &b->t[i];
        if (t->part != p || t->off + t->len <= c0 || t->off >= c1)
            continue;
        size_t s0 = t->off > c0 ? t->off : c0, s1 = t->off + t->len < c1 ? t->off + t->len : c1;
        size_t head = (s0 - t->off) % w ? w - (s0 - t->off) % w : 0;
        if (head > s1 - s0)
            head = s1 - s0;
        if (head)
            add_lit(pl, head, w);
        s0 += head;
        size_t body = (s1 - s0) / w * w;
        if (body && derive) {
            size_t mo = b->t[b->first_master + i].off + 2 * (s0 - t->off);
            add_ref(pl, TDELTA_BF16, body, mo, 2, w, &b->child.part[P_MASTER], b->child.data);
        } else if (body && xor) {
            add_ref(pl, TDELTA_XOR, body, s0, 1, w, &b->parent.part[p], b->parent.data);
        } else if (body) {
            add_lit(pl, body, w);
        }
        if (s1 - s0 > body)
            add_lit(pl, s1 - s0 - body, w);
    }
}

/* ---- measure ---- */

static void check_decode(struct bench *b, const struct plan *pl, const struct cut *c, int m)
{
    double t0 = cpu_now();
    int r =
        tdelta_decode(&b->ctx, b->obj.data, b->obj.len, c->id, c->len, pl->base, pl->nb, &b->out);
    b->dec_time[m] += cpu_now() - t0;
    if (r < 0 || b->out.len != c->len || memcmp(b->out.data, b->child.data + c->off, c->len))
        die("a decoded chunk differs");
}

static void measure_chunk(struct bench *b, struct plan *pl, int p, const struct cut *c)
{
    struct chunkobj_opts co = {.level = 3, .tensor = true, .width = part_width[p]};
    double t0 = cpu_now();
    if (chunkobj_encode(&b->ctx, b->child.data + c->off, c->len, &co, &b->obj, NULL) < 0)
        die("chunkobj_encode");
    b->enc_time[M_TODAY] += cpu_now() - t0;
    b->enc_bytes[M_TODAY] += (double)c->len;
    size_t today = b->obj.len;
    b->stored[p][M_TODAY] += (double)today;
    check_decode(b, pl, c, M_TODAY);
    for (int m = M_DERIVED; m < M_COUNT; m++) {
        plan_chunk(b, pl, p, m, c->off, c->off + c->len);
        struct tdelta_opts o = {
            .level = 3, .exact = b->exact, .xor_only = m == M_XOR, .scratch = &b->scratch};
        t0 = cpu_now();
        if (tdelta_encode(&b->ctx, b->child.data + c->off, c->len, pl->seg, pl->n, pl->base, pl->nb,
                          &o, &b->obj, NULL) < 0)
            die("tdelta_encode");
        b->enc_time[m] += cpu_now() - t0;
        b->enc_bytes[m] += (double)c->len;
        b->stored[p][m] += (double)(b->obj.len < today ? b->obj.len : today);
        check_decode(b, pl, c, m);
    }
    b->raw[p] += (double)c->len;
}

static void print_rows(const struct bench *b, const char *label, bool header)
{
    static const char *const mname[M_COUNT] = {"today", "derived bf16", "XOR vs parent",
                                               "XOR or SUB vs parent", "combined"};
    if (header) {
        printf("| parent | part | raw MB |");
        for (int m = 0; m < M_COUNT; m++)
            printf(" %s |", mname[m]);
        printf("\n|---|---|---|---|---|---|---|---|\n");
    }
    double tot_raw = 0, tot[M_COUNT] = {0};
    for (int p = 0; p < P_COUNT; p++) {
        printf("| %s | %s | %.1f |", label, part_name[p], b->raw[p] / 1e6);
        for (int m = 0; m < M_COUNT; m++) {
            printf(" %.3f |", b->stored[p][m] / b->raw[p]);
            tot[m] += b->stored[p][m];
        }
        tot_raw += b->raw[p];
        printf("\n");
    }
    printf("| %s | **total** | %.1f |", label, tot_raw / 1e6);
    for (int m = 0; m < M_COUNT; m++)
        printf(" **%.3f** |", tot[m] / tot_raw);
    printf("\n");
}

/* GB/s of fp32 input of the bf16 check and derivation, and of the XOR,
 * on the child's master part, best of 5 passes. */
static void measure_transforms(const struct bench *b, const char *label)
{
    const uint8_t *f = b->child.data + b->pstart[P_MASTER];
    size_t flen = b->pend[P_MASTER] - b->pstart[P_MASTER], n = flen / 4;
    uint8_t *b16 = malloc(2 * n + 1), *x = malloc(flen + 1);
    if (!b16 || !x)
        die("memory");
    double best[3] = {1e9, 1e9, 1e9};
    tdelta_bf16_derive(f, n, 0xFFFF, b16);
    for (int pass = 0; pass < 5; pass++) {
        double t0 = cpu_now();
        if (!tdelta_bf16_derivable(f, b16, n, NULL))
            die("derivation not derivable");
        double t1 = cpu_now();
        tdelta_bf16_derive(f, n, 0xFFFF, b16);
        double t2 = cpu_now();
        tdelta_xor(f, b->parent.data + b->pstart[P_MASTER], flen, x);
        double t3 = cpu_now();
        best[0] = t1 - t0 < best[0] ? t1 - t0 : best[0];
        best[1] = t2 - t1 < best[1] ? t2 - t1 : best[1];
        best[2] = t3 - t2 < best[2] ? t3 - t2 : best[2];
    }
    fprintf(stderr,
            "transforms %s: bf16 check %.2f GB/s, bf16 derive %.2f GB/s (of fp32 input), "
            "xor %.2f GB/s\n",
            label, (double)flen / best[0] / 1e9, (double)flen / best[1] / 1e9,
            (double)flen / best[2] / 1e9);
    free(b16);
    free(x);
}

int main(int argc, char **argv)
{
    static struct bench b;
    static struct plan pl;
    bool header = false;
    int opt;
    while ((opt = getopt(argc, argv, "xH")) != -1) {
        if (opt == 'x')
            b.exact = true;
        else if (opt == 'H')
            header = true;
        else
            die("usage: bench-delta-ratio [-x] [-H] INDEX CHILD PARENT LABEL");
    }
    if (argc - optind != 4)
        die("usage: bench-delta-ratio [-x] [-H] INDEX CHILD PARENT LABEL");
    read_index(&b, argv[optind]);
    read_file(argv[optind + 1], &b.child);
    read_file(argv[optind + 2], &b.parent);
    cut_parts(&b, &b.child);
    cut_parts(&b, &b.parent);
    for (int p = 0; p < P_COUNT; p++)
        for (size_t i = 0; i < b.child.part[p].n; i++)
            measure_chunk(&b, &pl, p, &b.child.part[p].c[i]);
    print_rows(&b, argv[optind + 3], header);
    measure_transforms(&b, argv[optind + 3]);
    fprintf(stderr,
            "speed %s: encode MB/s today %.0f combined %.0f; decode MB/s today %.0f "
            "combined %.0f\n",
            argv[optind + 3], b.enc_bytes[M_TODAY] / b.enc_time[M_TODAY] / 1e6,
            b.enc_bytes[M_COMB] / b.enc_time[M_COMB] / 1e6,
            b.enc_bytes[M_TODAY] / b.dec_time[M_TODAY] / 1e6,
            b.enc_bytes[M_COMB] / b.dec_time[M_COMB] / 1e6);
    return 0;
}

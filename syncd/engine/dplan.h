/*
 * dplan.h — the plan of a derived-bf16 recipe (issue 27, docs/deltas.md):
 * which bytes of a chunk are the round-to-nearest-even of which fp32
 * bytes of which base chunk.  Pure: the caller gives the chunk's place in
 * its file, the matched tensor pairs of that file and each pair's base
 * file cut into chunks (the manifest's); dplan_chunk() gives the
 * tdelta_encode() plan (engine/tdelta.h) and the base chunks it names.
 *
 *   struct dplan p = DPLAN_INIT;
 *   e = dplan_chunk(&p, off, len, pairs, npairs, usable, ud);
 *   ... p.seg[0 .. p.nseg), p.base[0 .. p.nbase): read each base chunk
 *       (p.base[k].cut->off, ->len in file p.base[k].file), then
 *       tdelta_encode(ctx, raw, len, p.seg, p.nseg, bases, p.nbase, ...) ...
 *   dplan_free(&p);
 *
 * A pair says: n bf16 elements at byte b16 of the chunk's file are
 * proposed to be the rounding of n fp32 elements at byte f32 of file
 * `file`, which the manifest cut as cuts[0 .. ncuts) (ascending, each
 * chunk following the last).  The proposal is not trusted: tdelta_encode
 * writes a segment that does not derive as a literal, and the writer
 * decodes what it encoded.
 *
 * The plan covers the chunk in order: bytes outside every pair, and the
 * odd byte of a bf16 element the chunk's cut splits, are LITERAL; the
 * elements inside are BF16 segments, split where the fp32 range crosses
 * from one base chunk to the next; an fp32 element split by a base cut,
 * a base chunk `usable` refuses (one that is not stored plain), and any
 * base past TDELTA_MAX_BASES distinct ids make their elements LITERAL.
 * Adjacent literals are one segment.  Bases are distinct by id.
 */
#ifndef CKS_DPLAN_H
#define CKS_DPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/hash.h"
#include "engine/tdelta.h"

/* One chunk of a base file, as the manifest cut it. */
struct dplan_cut {
    uint64_t off;
    uint32_t len;
    uint8_t id[HASH_LEN];
};

/* A proposed derivation: n bf16 elements at byte b16 of the chunk's file
 * from n fp32 elements at byte f32 of file `file` (cut as cuts).  With
 * xw (2 or 4) it is a proposed delta instead: n elements of xw bytes at
 * b16 against the same tensor at f32 of `file` (a keyframe's file): XOR
 * plan segments, cut at element and base-chunk boundaries. */
struct dplan_pair {
    uint64_t b16, f32, n;
    size_t file;
    const struct dplan_cut *cuts;
    size_t ncuts;
    unsigned xw; /* 0: BF16 derivation; 2, 4: XOR delta of that width */
};

/* The bytes of the chunk's file a pair covers from b16. */
static inline uint64_t dplan_span(const struct dplan_pair *p)
{
    return p->xw ? p->n * p->xw : 2 * p->n;
}

/* A base the plan names: a chunk of file `file`. */
struct dplan_base {
    size_t file;
    const struct dplan_cut *cut;
};

struct dplan {
    struct tdelta_seg *seg;
    size_t nseg, cap;
    struct dplan_base base[TDELTA_MAX_BASES];
    size_t nbase;
    size_t derived; /* bytes of the chunk in BF16 or XOR segments */
};

#define DPLAN_INIT                                                                                 \
    {                                                                                              \
        NULL, 0, 0, {{0, NULL}}, 0, 0                                                              \
    }

/* Whether a base chunk may be used (e.g. not itself stored as a recipe). */
typedef bool (*dplan_usable_fn)(void *ud, const struct dplan_cut *cut);

/* The plan for the chunk at bytes [off, off + len) of its file (len >= 1),
 * from pairs[0 .. npairs) sorted by b16 and not overlapping.  usable may
 * be NULL (every base is).  Returns 0, -EINVAL (len 0, pairs out of
 * order), CKS_E_LIMIT (more than TDELTA_MAX_SEGS segments) or -ENOMEM;
 * p->derived 0 means nothing derives: no recipe to make. */
int dplan_chunk(struct dplan *p, uint64_t off, uint32_t len, const struct dplan_pair *pairs,
                size_t npairs, dplan_usable_fn usable, void *ud);
void dplan_free(struct dplan *p);

/* Whether bytes [off, off + len) of a file overlap a pair's range
 * (pairs sorted by b16, not overlapping). */
bool dplan_overlaps_b16(const struct dplan_pair *pairs, size_t npairs, uint64_t off, uint64_t len);

#endif

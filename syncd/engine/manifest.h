/*
 * manifest.h — the snapshot manifest: what one snapshot holds.  The text
 * format is documented in include/ckptsync/format.h; in short:
 *
 *   ckptsync-manifest 3             (4, 5: see below)
 *   id 20261201T000701Z-3f2a9c1b7d0e
 *   run r1
 *   step 1000                       (or -1 when unknown)
 *   time 1796083621                 (unix seconds, UTC)
 *   host gpu-17
 *   instance p5.48xlarge            (or -)
 *   parent <id>                     (or -)
 *   root checkpoint-1000            (snapshot's root path inside the run, or -)
 *   chunker fastcdc2020 1048576 4194304 16777216 1
 *   nodes 4                         (version 4 only: a merged multi-node step)
 *   files 2
 *   chunks 5
 *   d 0755 <mtime> - <path>         directory
 *   l 0777 <mtime> <target> <path>  symlink (target relative, inside the snapshot)
 *   h 0644 - <target> <path>        hard link to the earlier regular file <target>
 *                                   (an entry's path)
 *   f 0644 <mtime> <size> <sha256> <nchunks> <path>
 *   c <sha256> <len>                one per chunk, following its file
 *   end <sha256 of every byte before this line>
 *
 * Text fields (run, host, instance, paths, link targets) are percent-encoded:
 * bytes <= 0x20, >= 0x7f and '%' become %XX, so every field is one token.
 * The token "-" means "no value"; a value that is literally "-" is %2D.
 * Paths are relative, '/'-separated, without empty, "." or ".." components.
 * <mtime> is nanoseconds since the epoch, or "-" when unknown.  Versions 1
 * and 2 (still read) have no mtime field and no hard links.
 *
 * Version 4 is a merged multi-node step (service/multinode.h): the header
 * gains "nodes N" after the chunker line, and every entry line a node
 * field after its mtime: the rank (0..N-1) of the node whose part held
 * the entry, or "*" when several nodes' parts held it identically:
 *
 *   f 0644 <mtime> 2 <size> <sha256> <nchunks> <path>
 *
 * Version 5 carries chunk-tree file digests (engine/filedigest.h): a
 * file line's digest field is either 64 hex digits (SHA-256 of the
 * file's bytes, as before) or "tree:" and 64 hex digits (the chunk tree).
 * Its header always has the "nodes" line, "nodes 0" for a snapshot that
 * is not a merged step (its entries then have no node field, as in
 * version 3; with nodes N > 0 they have one, as in version 4):
 *
 *   f 0644 <mtime> <size> tree:<64 hex> <nchunks> <path>
 *
 * The encoder writes version 5 exactly when a file has a tree digest,
 * else version 4 when m->nodes > 0, else version 3, so a snapshot that
 * uses no tree digest has the bytes it had before version 5.
 *
 * Version 6 is version 5 plus recipes (docs/deltas.md, engine/tdelta.h):
 * the header gains "extras N" after "chunks"; a file chunk stored as a
 * recipe object (recipes/<2 hex>/<64 hex>.<16 hex>) has " r" after its
 * length; after the last entry, N lines sorted by chunk id list, once
 * each, every object the snapshot needs besides its files' plain chunks:
 *
 *   r <chunk id> <len> <16 hex sig> <nbases> <base id>...  a recipe
 *   k <chunk id> <len>                                      a plain chunk
 *                                                           needed only as
 *                                                           a base
 *
 * (base ids ascending and distinct; sig = the first 8 bytes of SHA-256
 * over them, concatenated).  The list is closed (every base is a file
 * chunk or has its own r or k line), minimal (an r or k line that is not
 * a file chunk is some recipe's base; a k line is not a file chunk) and
 * acyclic with depth at most MANIFEST_MAX_DEPTH.  The encoder writes
 * version 6 exactly when m->nextras > 0, so v5 bytes stay as they were.
 *
 * The parser is bounded: every limit below is checked before allocating,
 * counts are checked against the declared totals, each file's size equals
 * the sum of its chunk lengths, and the trailing digest covers all bytes.
 *
 * A struct manifest owns its arrays and strings; manifest_free() releases
 * them (manifest_free(NULL) is fine).  Not thread-safe per object.
 */
#ifndef CKS_MANIFEST_H
#define CKS_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/hash.h"

#define MANIFEST_VERSION 6
#define MANIFEST_GEN_MAX 999999999999LL
#define MANIFEST_MAX_BYTES (1024u * 1024 * 1024)
#define MANIFEST_MAX_FILES 10000000u
#define MANIFEST_MAX_CHUNKS 100000000u
#define MANIFEST_MAX_PATH 4096u
#define MANIFEST_MAX_COMPONENT 255u
#define MANIFEST_MAX_FIELD 256u /* run, host, instance, id */
#define MANIFEST_ID_MAX 64u
#define MANIFEST_MAX_NODES 4096u   /* a merged step's node count (version 4) */
#define MANIFEST_NODE_SEVERAL (-1) /* mfile.node: several nodes held it identically */
#define MANIFEST_RECIPE_SIG 8      /* bytes of a recipe key's base signature */
#define MANIFEST_MAX_BASES 16      /* bases of one recipe (TDELTA_MAX_BASES) */
/* A recipe chain's depth: a plain chunk 0, a recipe one more than its
 * deepest base. */
#define MANIFEST_MAX_DEPTH 64

/* A hard link shares its target's inode: the target is the path of an
 * earlier MFILE_REG entry of the same manifest (walk records the second
 * and later names of one inode so); its mode is the target's. */
enum mfile_type { MFILE_REG = 'f', MFILE_DIR = 'd', MFILE_LINK = 'l', MFILE_HARDLINK = 'h' };

/* What a regular file's digest is (engine/filedigest.h): SHA-256 of its
 * bytes, or the chunk tree over its chunk list (version 5 only). */
enum mdigest_kind { MDIGEST_SHA256 = 0, MDIGEST_TREE = 1 };

struct mchunk {
    uint8_t id[HASH_LEN];
    uint32_t len;
};

/* Version 6: an object a snapshot needs besides its files' plain chunks. */
struct mextra {
    uint8_t id[HASH_LEN];             /* the chunk id (of the plaintext) */
    uint32_t len;                     /* its plaintext length */
    bool recipe;                      /* r: recipes/<id>.<sig>; else k: chunks/<id> */
    uint8_t sig[MANIFEST_RECIPE_SIG]; /* r: manifest_recipe_sig() of its bases */
    uint32_t nbases;                  /* r: 1..MANIFEST_MAX_BASES; k: 0 */
    uint64_t first_base;              /* r: its bases are manifest.bases[first_base..] */
};

struct mbase {
    uint8_t id[HASH_LEN];
};

struct mfile {
    char *path; /* relative to the snapshot root */
    char *link; /* symlink target, hard link target (a path), else NULL */
    enum mfile_type type;
    uint32_t mode;    /* permission bits only (07777) */
    int64_t mtime_ns; /* modification time, ns since the epoch; -1: unknown (and
                       * always for a hard link: it has its target's) */
    uint64_t size;
    uint8_t digest[HASH_LEN];
    enum mdigest_kind dkind; /* what digest is (MDIGEST_SHA256 for every non-file) */
    uint64_t first_chunk;    /* index into manifest.chunks */
    uint64_t nchunks;
    int32_t node; /* manifest.nodes > 0: the rank of the node whose part held it,
                   * or MANIFEST_NODE_SEVERAL; else 0 */
};

struct manifest {
    char id[MANIFEST_ID_MAX + 1];
    char *run;
    int64_t step; /* -1 when unknown */
    int64_t time;
    char *host;
    char *instance; /* NULL when unknown */
    char *parent;   /* NULL when none */
    int64_t gen;    /* lineage generation (engine/lineage.h); 0 in version 1 */
    char *root;     /* NULL when the snapshot is the whole run */
    uint64_t chunk_min, chunk_avg, chunk_max;
    unsigned normalization;
    unsigned nodes; /* a merged step of a job on this many nodes (version 4); 0: not one */
    struct mfile *files;
    size_t nfiles, files_cap;
    struct mchunk *chunks;
    size_t nchunks, chunks_cap;
    bool *marks; /* version 6: marks[i], chunk i is stored as a recipe (its r
                  * line in extras); NULL or shorter: not (manifest_chunk_recipe) */
    size_t nmarks;
    struct mextra *extras; /* version 6: sorted by id, each id once */
    size_t nextras, extras_cap;
    struct mbase *bases; /* the extras' bases, ascending per recipe */
    size_t nbases, bases_cap;
};

/* Builder: zero the struct, set the scalar fields with manifest_set_str()
 * for strings, then add files; a regular file's chunks follow it. */
void manifest_init(struct manifest *m);
int manifest_set_str(char **field, const char *value);
int manifest_add_file(struct manifest *m, enum mfile_type type, const char *path, uint32_t mode,
                      const char *link);
/* Adds a chunk to the last added file (which must be MFILE_REG) and grows
 * its size by len. */
int manifest_add_chunk(struct manifest *m, const uint8_t id[HASH_LEN], uint32_t len);
/* Sets the digest of the last added file, of kind MDIGEST_SHA256 (a new
 * entry's kind) unless manifest_set_digest_kind() says otherwise. */
void manifest_set_digest(struct manifest *m, const uint8_t digest[HASH_LEN]);
void manifest_set_digest_kind(struct manifest *m, enum mdigest_kind kind);
/* Whether any regular file of m has a tree digest (then it encodes as
 * version 5). */
bool manifest_has_tree(const struct manifest *m);
/* Sets the modification time of the last added entry (from its struct
 * stat's st_mtim; entries start without one); a time before the epoch is
 * recorded as unknown, and a hard link keeps none. */
void manifest_set_mtime(struct manifest *m, int64_t sec, long nsec);

/* Serializes to out (appends). Returns 0, -ENOMEM, or CKS_E_UNSAFE_PATH /
 * CKS_E_LIMIT when a field would not parse back (CKS_E_FORMAT for a malformed
 * field: bad id or run, missing host, mode above 07777, a file whose size is
 * not the sum of its chunks, ...).  It runs manifest_validate() first, so
 * it never writes what manifest_parse() refuses; on failure out is left as
 * it was.  The output is canonical: encode(parse(encode(m))) == encode(m). */
int manifest_encode(const struct manifest *m, struct buf *out);
/* Parses data into m (initialized by the call).  Returns 0, CKS_E_FORMAT,
 * CKS_E_VERSION, CKS_E_DIGEST, CKS_E_LIMIT, CKS_E_UNSAFE_PATH or -ENOMEM;
 * on error m is freed and err (may be NULL) gets "line N: what". */
int manifest_parse(const uint8_t *data, size_t len, struct manifest *m, struct buf *err);
void manifest_free(struct manifest *m);
/* How many regular files m holds (directories and links are not files):
 * the count `ls` and `ls --remote` show. */
uint64_t manifest_regular_files(const struct manifest *m);
/* Every check manifest_parse() applies, on a struct: returns 0 or the code
 * the parser would return for its encoding; err (may be NULL) gets
 * "line N: what", N being the line the encoder would write. */
int manifest_validate(const struct manifest *m, struct buf *err);
/* Field-by-field equality (strings by content, arrays element-wise). */
bool manifest_equal(const struct manifest *a, const struct manifest *b);
/* Where the bytes of chunk id are: the first regular file holding it (its
 * index in files), the offset in that file and the length.  -ENOENT when
 * the manifest does not name it. */
int manifest_chunk_at(const struct manifest *m, const uint8_t id[HASH_LEN], size_t *ret_file,
                      uint64_t *ret_off, uint32_t *ret_len);

/* ---- version 6: recipes (engine/mrecipe.c) ---- */

/* The first MANIFEST_RECIPE_SIG bytes of SHA-256 over ids[0..n)
 * concatenated (the caller sorts them ascending): the key suffix of a
 * recipe over these bases. */
void manifest_recipe_sig(const struct mbase *ids, size_t n, uint8_t out[MANIFEST_RECIPE_SIG]);
/* Adds an extra object: a recipe of chunk id (plaintext length len) over
 * bases[0..nbases) (any order; sorted and the sig computed here), or with
 * nbases 0 a plain chunk needed only as a base.  A writer marks each
 * file chunk stored as a recipe (manifest_mark_recipe) and adds its
 * r line here too, then calls manifest_sort_extras() before encoding.
 * -EINVAL (nbases above MANIFEST_MAX_BASES), CKS_E_LIMIT, -ENOMEM. */
int manifest_add_extra(struct manifest *m, const uint8_t id[HASH_LEN], uint32_t len,
                       const uint8_t (*bases)[HASH_LEN], size_t nbases);
/* Whether chunk i of m is stored as a recipe (its c line is marked). */
bool manifest_chunk_recipe(const struct manifest *m, size_t i);
/* Marks chunk i (< m->nchunks) as stored as a recipe, or unmarks it.
 * 0, -EINVAL or -ENOMEM. */
int manifest_mark_recipe(struct manifest *m, size_t i, bool recipe);
/* Sorts m->extras by id (the order the format requires). */
void manifest_sort_extras(struct manifest *m);
/* The extra with this id, or NULL (m->extras sorted). */
const struct mextra *manifest_extra(const struct manifest *m, const uint8_t id[HASH_LEN]);
/* The closure rules of version 6 above, on a struct whose extras are
 * each well formed (manifest_validate checks both): 0, or CKS_E_FORMAT,
 * CKS_E_LIMIT (too deep) or -ENOMEM, with *ret_what what and *ret_idx
 * where: an index into m->extras, or with *ret_chunk an index into
 * m->chunks (a chunk marked recipe without its r line). */
int manifest_check_extras(const struct manifest *m, size_t *ret_idx, bool *ret_chunk,
                          const char **ret_what);
/* Each object of m's closure once: calls fn for every plain chunk (file
 * chunks not stored as recipes, and k lines; recipe = false) and every
 * recipe object (r lines; recipe = true, sig set), stopping at the first
 * nonzero return, which it returns.  A chunk several files hold is
 * visited once per place; a file chunk stored as a recipe is visited as
 * its r line only. */
typedef int (*manifest_object_fn)(void *arg, const uint8_t id[HASH_LEN], uint32_t len, bool recipe,
                                  const uint8_t sig[MANIFEST_RECIPE_SIG]);
int manifest_each_object(const struct manifest *m, manifest_object_fn fn, void *arg);
/* The one order of the objects a manifest names, which prune's records
 * (engine/gcrec) and the writers' lists (service/presence) share: by
 * chunk id, a plain chunk before the recipes of its id, recipes by sig
 * (sa, sb read only for recipes). */
int manifest_object_cmp(const uint8_t ida[HASH_LEN], bool ra, const uint8_t *sa,
                        const uint8_t idb[HASH_LEN], bool rb, const uint8_t *sb);

/* 0 if path is relative, non-empty, at most MANIFEST_MAX_PATH bytes, has no
 * empty, ".", ".." components, none longer than MANIFEST_MAX_COMPONENT, no
 * NUL; else CKS_E_UNSAFE_PATH. */
int manifest_path_check(const char *path);
/* 0 if a symlink at path with this target stays inside the snapshot root
 * (relative target; ".." only as leading components, and resolving them
 * against the dirname of path never climbs above the root); else
 * CKS_E_UNSAFE_PATH. */
int manifest_link_check(const char *path, const char *target);
/* A snapshot id: [0-9A-Za-z._-]{1,64}, not starting with '.'. */
int manifest_id_check(const char *id);
/* A run name: same charset as ids, 1..MANIFEST_MAX_FIELD, not "." or "..".
 * Both return 0 or CKS_E_FORMAT. */
int manifest_run_check(const char *run);

#endif

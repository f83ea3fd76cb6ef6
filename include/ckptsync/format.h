/*
 * ckptsync/format.h — the formats ckptsync writes to a region, documented
 * for users and for other implementations.
 *
 * This header only documents and names constants; it declares no
 * functions.  Everything below is version 1 of each format, except the
 * manifest (version 3: entries carry their mtime, and hard link entries;
 * version 2 added the "gen" line; versions 1 and 2 are still read).  A reader that
 * meets a version it does not know refuses the object (it never guesses).
 *
 * ==========================================================================
 * 1. Keys in a region
 * ==========================================================================
 *
 * A region is an S3-compatible bucket (under a key prefix) or a directory.
 * Keys are '/'-separated and relative to that prefix, so that a user can
 * look with `aws s3 ls s3://bucket/<prefix>/` or `ls`:
 *
 *   <prefix>/repo                       the repository object (section 4)
 *   <prefix>/chunks/<2 hex>/<64 hex>    one chunk object (section 2); the
 *                                       64 lower-case hex digits are the
 *                                       chunk id, the 2 are its first two
 *   <prefix>/recipes/<2 hex>/<64 hex>.<16 hex>
 *                                       a chunk stored as a recipe (section
 *                                       2, version 3): the chunk id, then
 *                                       the first 8 bytes of SHA-256 over
 *                                       its base ids sorted ascending and
 *                                       concatenated (manifest version 6
 *                                       lists it and its bases)
 *   <prefix>/snapshots/<run>/<id>       the manifest of one snapshot
 *                                       (section 3)
 *   <prefix>/commits/<run>/g<gen>.s<step>.<id>
 *                                       snapshot <id> is committed in this
 *                                       region (section 6)
 *   <prefix>/lineage/<run>/g<gen>.claim.<16 hex>
 *   <prefix>/lineage/<run>/g<gen>.handoff.s<step>.<id>
 *                                       who owns the run; where the next
 *                                       instance resumes (section 6)
 *   <prefix>/repo.d/<32 hex>            a repository candidate, written only
 *                                       while a repository is created on a
 *                                       store that cannot refuse a second
 *                                       create (section 4)
 *   <prefix>/probe/<hex>                short-lived: the create-only probe
 *   <prefix>/keys/<16 hex>              an encrypted repository's key slots
 *   <prefix>/runs/k-<32 hex>            an encrypted repository's run name,
 *                                       sealed (its other keys name the run
 *                                       k-<32 hex>)
 *   <prefix>/forget/<run>/g<gen>.s<step>.<id>
 *                                       snapshot <id> is removed (section 6)
 *   <prefix>/parts/<run>/s<step>.<K>-of-<N>.<id>
 *                                       node K's part of step <step> of a
 *                                       job on N nodes (section 9)
 *   <prefix>/nodeerr/<run>/s<step>.<K>-of-<N>.<YYYYmmddTHHMMSSZ>.<16 hex>
 *                                       node K's failure on step <step>
 *                                       (section 9)
 *   <prefix>/intents/<YYYYmmddTHHMMSSZ>.<ttl>.<16 hex>
 *   <prefix>/gc/<mark>/(mark|intents|keep.<hex>|sweep.<exp>.<hex>|done)
 *   <prefix>/locks/prune/<12 digits>    prune's protocol and lease (section 8)
 *
 * Every key is written once and never rewritten by a reader-modifier: names
 * carry a snapshot id (time + 32 random bits) or 64 random bits, so no two
 * writers pick the same one.  The only object many writers create is
 * `repo`, with a create-only put (If-None-Match: *, or link(2)) or through
 * the candidates of section 4.  Version 1 wrote refs/<run>/latest and
 * handoff/<run> (section 5); they are still read (handoffs as generation 0)
 * and verified, never written.
 *
 * <run> and <id> use only [0-9A-Za-z._-]; an id never starts with '.', and
 * a run is never "." or "..", so neither can climb out of its key space.
 * syncd/store/layout.h is the one module of this implementation that
 * builds or parses these keys.
 *
 * ==========================================================================
 * 2. Chunk object
 * ==========================================================================
 *
 * A chunk is a piece of a file cut by FastCDC (2020); its id is the SHA-256
 * of its raw bytes.  The object stored under chunks/ is:
 *
 *   offset size
 *   0      4    magic "CKC1"
 *   4      1    version (2; version 1 is still read)
 *   5      1    codec (0 = raw, 1 = zstd, 2 = byte planes)
 *   6      2    reserved, zero
 *   8      4    raw length, little endian (<= 256 MiB)
 *   12     ...  payload (raw bytes, one zstd frame, or a byte-plane payload)
 *
 * Codec 2 (version 2 only) is for arrays of 2- or 4-byte floats: the
 * chunk's bytes are split by position modulo the element width (planes),
 * and each plane is stored raw, as one repeated byte, or entropy-coded by
 * the project's own coder; syncd/engine/tcodec.h documents the payload
 * byte by byte.  Version 1 had codecs 0 and 1 only and is otherwise the
 * same, so objects written before version 2 stay readable; writers write
 * version 2.  An encrypted repository wraps the whole object in a sealed
 * envelope (magic "CKE1"); the chunk object inside is unchanged.
 *
 * The writer tries planes when the chunk looks like floats and keeps them
 * when they save at least 1/64; else zstd; raw when zstd does not shrink
 * the chunk either.  A reader checks magic, version, codec, reserved bytes
 * and the raw length (against the header, the zstd frame or the plane
 * payload) before it decodes, and the SHA-256 of the result against the
 * id in the key: a mismatch is reported and the chunk fetched from another
 * region, never used.
 *
 * DRAFT (issue 27; the encoder and decoder exist, engine/tdelta.h; the
 * readers (manifest version 6, verify, prune, copy, restore) are being
 * built, no writer stores these yet): version 3, codec 3, a recipe.  It is
 * stored under recipes/ (section 1), never under chunks/, so a chunks/
 * object stays decodable on its own.  The chunk is rebuilt from other chunks'
 * plaintext (its bases) and coded bytes.  Header as above with version 3
 * and codec 3 (version 3 carries codec 3 only; versions 1 and 2 never
 * do); the payload, little endian:
 *
 *   offset  size    field
 *   0       1       recipe version: 1
 *   1       1       B: base count (<= 16)
 *   2       2       reserved, zero
 *   4       4       S: segment count (1..65536; 0 only for an empty chunk)
 *   8       36*B    base records: base chunk id (32), its raw length (4)
 *   ...     16*S    segment records, in the order of the chunk's bytes:
 *                   kind (1: 0 literal, 1 bf16, 2 xor, 3 sub), codec (1:
 *                   0 raw, 1 zstd, 2 byte planes; bf16: 0), base index (1;
 *                   literal: 0), width (1: sub 2 or 4, else 0), out (4: bytes of the
 *                   chunk, >= 1), off (4: start of the range in the base;
 *                   literal: 0), plen (4: payload bytes)
 *   ...             the segment payloads in segment order; nothing after
 *
 * literal: the payload decoded by its codec (as a codec 0/1/2 object's
 * payload) is the out bytes.  bf16: the base range [off, off + 2*out)
 * holds out/2 fp32; each becomes its bf16 by round to nearest even,
 * (u + 0x7FFF + ((u >> 16) & 1)) >> 16 on its 32 bits, and every NaN
 * becomes the 2-byte payload (torch's CPU cast writes 0xFFFF, its scalar
 * path 0x7FC0, CUDA 0x7FFF).  xor: the payload decoded by its codec, XORed
 * with the base range [off, off + out).  sub: out a multiple of the width
 * w; the payload decoded by its codec is w-byte integers z, and each
 * element is the base's element there plus ((z >> 1) ^ -(z & 1)), mod
 * 2^(8w) (z: the zigzag of the difference of the bit patterns).  A reader
 * rejects any inconsistency (unknown version, kind or codec; reserved
 * bytes; a bad width; a base index past B; a
 * base no segment names; a range past the base's recorded length; an odd
 * bf16 out or a bf16 payload other than 2 bytes; outs that do not sum to
 * the raw length; plens that do not sum to the rest) before it reads a
 * base, and checks the result's id as for every chunk.  A base is itself
 * any chunk object (a recipe too: the reader resolves it first).
 *
 * ==========================================================================
 * 3. Manifest (snapshots/<run>/<id>)
 * ==========================================================================
 *
 * Byte-oriented text: lines end in "\n" (no "\r"), fields are separated
 * by exactly one space, and every field is printable ASCII (0x21..0x7e).
 *
 *   manifest   = version-line header entry* end-line
 *   version-line = "ckptsync-manifest" SP ("1" / "2" / "3" / "4" / "5" / "6") LF
 *   header     = "id" SP text LF              snapshot id (see 1.)
 *                "run" SP text LF             run name (see 1.)
 *                "step" SP ("-1" / dec) LF    -1 when unknown
 *                "time" SP dec LF             unix seconds, UTC
 *                "host" SP text LF            source host, <= 256 bytes
 *                "instance" SP opt LF         instance type, <= 256 bytes
 *                "parent" SP opt LF           parent snapshot id
 *                "gen" SP dec LF              lineage generation (section 6),
 *                                             <= 999999999999; versions 2, 3
 *                "root" SP opt LF             snapshot root inside the run
 *                                             (a path); "-" = the whole run
 *                "chunker" SP "fastcdc2020" SP min SP avg SP max SP nc LF
 *                ["nodes" SP dec LF]          versions 4 and 5 only (and
 *                                             there required): a merged step
 *                                             of a job on 1..4096 nodes
 *                                             (section 9); version 5: 0..4096,
 *                                             0 = not a merged step
 *                "files" SP dec LF            number of entry lines
 *                "chunks" SP dec LF           number of chunk lines
 *                ["extras" SP dec LF]         version 6 only (there >= 1):
 *                                             number of extra lines
 *   entry      = dir / link / file / hardlink
 *   dir        = "d" SP mode SP mtime SP "-" SP path LF
 *   link       = "l" SP mode SP mtime SP target SP path LF
 *   hardlink   = "h" SP mode SP "-" SP text SP path LF
 *                                             text: the path of an earlier
 *                                             "f" entry; mode and time are
 *                                             that file's
 *   file       = "f" SP mode SP mtime SP size SP fdigest SP nchunks SP path LF
 *                nchunks * chunk
 *   fdigest    = sha256 / "tree:" sha256      "tree:": version 5 only, the
 *                                             chunk tree (see "File digests")
 *   mtime      = "-" / dec                    modification time, ns since
 *                                             the epoch (<= 2^63-1); "-":
 *                                             unknown
 *   chunk      = "c" SP sha256 SP len [SP "r"] LF
 *                                             the file's chunks, in order;
 *                                             "r" (version 6): stored as a
 *                                             recipe (its r line follows)
 *   extra      = recipe / keep                version 6, after the entries,
 *                                             sorted by id, each id once
 *   recipe     = "r" SP sha256 SP len SP sig SP nb 1*(SP sha256) LF
 *                                             recipes/<id>.<sig>: nb (1..16)
 *                                             base ids, ascending, distinct;
 *                                             sig: 16 lower-case hex, the
 *                                             first 8 bytes of SHA-256 over
 *                                             the base ids (32 bytes each)
 *   keep       = "k" SP sha256 SP len LF      chunks/<id>, needed only as a
 *                                             base (not a file chunk)
 *   end-line   = "end" SP sha256 LF           SHA-256 of every byte before
 *                                             the "end" line; nothing follows
 *   dec        = "0" / %x31-39 *DIGIT         no sign, no leading zeros
 *
 * Versions 1 and 2 have no mtime field (their entries' times are unknown)
 * and no hard link entries; version 1 also has no "gen" line.
 *
 * Version 4 (a merged multi-node step, section 9) has the "nodes" line,
 * and in every entry line a node field right after the mtime ("-" for a
 * hard link, as in version 3):
 *
 *   node       = dec / "*"                    the rank (< nodes) of the node
 *                                             whose part held the entry; "*":
 *                                             several nodes' parts held it,
 *                                             identically
 *
 *   f 0644 1796083555123456789 2 12 <64 hex> 1 iter_0001000/mp_rank_02/x.pt
 *
 * Version 5 is version 3, or with "nodes" N > 0 version 4, plus
 * chunk-tree file digests: its header always has the "nodes" line ("nodes
 * 0": not a merged step, and the entry lines have no node field), and a
 * file's digest field may be "tree:" followed by 64 hex digits.
 *
 * Version 6 is version 5 plus recipes (issue 27, docs/deltas.md): the
 * "extras" header line, the "r" mark on chunk lines and the extra lines
 * after the last entry (manifest = version-line header entry* extra*
 * end-line).  The extras name, once each, every object the snapshot needs
 * besides its files' plain chunks, so prune, verify, copy and restore
 * learn a snapshot's references from its manifest alone.  A reader
 * refuses a list that is not closed (a recipe's base must be a file chunk
 * or have its own r or k line), not minimal (an extra that is neither a
 * file chunk nor some recipe's base; a k line for a file chunk; an r line
 * for a chunk whose c lines are not marked, or a marked chunk without
 * one), cyclic, or deeper than 64 (a plain chunk has depth 0, a recipe
 * one more than its deepest base).  Recipes are read, not yet written:
 * DRAFT until the writer exists.
 *
 * A writer uses version 6 only when it stores a recipe, version 5 only
 * when a file has a tree digest, else
 * version 4 for a merged step and version 3 for every other snapshot, so
 * the bytes of a snapshot without tree digests do not change.
 *
 * File digests.  What a regular file's digest field proves, by kind
 * (engine/filedigest.h; [snapshot] file_digest chooses, default tree):
 *
 *   sha256   SHA-256 of the file's bytes, as `sha256sum` prints it.  A
 *            restore hashes every byte it wrote (a second pass besides the
 *            chunk ids, serial per file) and compares.
 *   tree     SHA-256 over the string "ckptsync chunk-tree 1" LF
 *            (CKS_FILEDIGEST_TREE_DOMAIN) and then, for each of the file's
 *            chunks in order, its id (32 bytes) and its length (8 bytes,
 *            little-endian): the root of a one-level Merkle tree whose
 *            leaves are the file's content-defined chunks.  Computed from
 *            the chunk list, with no pass over the bytes.  A restore
 *            verifies each chunk's bytes against its id as it decodes them
 *            (SHA-256, or the HMAC of an encrypted repository), records
 *            the id and length of each chunk it verified and wrote, and at
 *            the end of the file computes the tree over those records and
 *            compares it with this field.  It proves that the file's bytes
 *            are the concatenation of chunks each of which matched its id,
 *            in the manifest's order, with the manifest's sizes, and that
 *            the file's chunk lines are the ones its digest was taken over.
 *            It is NOT what `sha256sum` prints (the file's SHA-256 is not
 *            recorded), and unlike sha256 it does not read the written
 *            bytes back: a write that the local disk or page cache damages
 *            after a chunk was verified is not seen.  In an encrypted
 *            repository the ids are HMAC-SHA-256 under the repository's
 *            id key (docs/encryption.md), so the tree is a keyed digest: only a
 *            holder of the key can compute or check it from the bytes.
 *
 * A reader of any version checks a sha256 digest against the bytes, as
 * before version 5.
 * `restore --node K --of M` reads the node fields (docs/multinode.md).
 *   mode       = 4 octal digits               permission bits (<= 7777)
 *   sha256     = 64 lower-case hex digits
 *   text       = 1*tchar, not the token "-"
 *   opt        = "-" / text                   "-" = no value
 *   tchar      = %x21-24 / %x26-7e / "%" 2HEXDIG
 *
 * Header lines appear once each, in exactly this order.
 *
 * Text (run, host, instance, parent, root, id, paths, link targets) is
 * percent-encoded: bytes <= 0x20, >= 0x7f and '%' are written %XX
 * (writers use upper-case hex; readers accept either case).  A decoded
 * NUL (%00) is invalid.  The token "-" always means "no value"; a value
 * that is literally "-" is written "%2D".
 *
 * Paths are relative to the snapshot root, '/'-separated, at most 4096
 * bytes, with no empty, "." or ".." component and no component longer than
 * 255 bytes.  A path occurs once.  Parent directories need not be listed;
 * no entry lies below a regular file, a symlink or a hard link.  A hard
 * link names the path of a regular file ("f") listed before it, never a
 * directory, a symlink, another hard link or a later entry: restore
 * creates it (link(2)) once that file is complete.  A restorer sets each
 * entry's modification and access time to its mtime when known, a
 * directory's after its contents are written.  A link target is
 * relative and, resolved lexically from the link's directory, never climbs
 * above the snapshot root.  A restorer must still create entries without
 * following symlinks (O_NOFOLLOW, RESOLVE_BENEATH): a target that is safe
 * lexically can climb through another link ("s/../.." with s -> "..").
 *
 * Counts: the entries match "files" and the chunk lines match "chunks"
 * exactly; a file's size is the sum of its chunk lengths (an empty file has
 * no chunks); every chunk length is in 1..max of the chunker line; the
 * chunker satisfies 64 <= min <= avg <= max <= 256 MiB.  A manifest is at
 * most 1 GiB, with at most 10^7 entries and 10^8 chunks.
 *
 * Example:
 *
 *   ckptsync-manifest 3
 *   id 20261201T000701Z-3f2a9c1b7d0e
 *   run r1
 *   step 1000
 *   time 1796083621
 *   host gpu-17
 *   instance p5.48xlarge
 *   parent -
 *   gen 0
 *   root checkpoint-1000
 *   chunker fastcdc2020 1048576 4194304 16777216 1
 *   files 2
 *   chunks 1
 *   d 0755 1796083600000000000 - shards
 *   f 0644 1796083555123456789 12 <64 hex> 1 shards/model%20a.pt
 *   c <64 hex> 12
 *   end <64 hex>
 *
 * ==========================================================================
 * 4. Repository object (repo)
 * ==========================================================================
 *
 * The parameters every instance writing to the repository must share, so
 * that they cut and name chunks alike.  Text, same line rules as the
 * manifest, lines in this order:
 *
 *   ckptsync-repo 1
 *   id <32 lower-case hex>                    random, made once per repository
 *   chunker fastcdc2020 <min> <avg> <max> <nc>
 *   hash sha256
 *   compression zstd
 *   encryption none
 *   end <sha256 of every byte before the "end" line>
 *
 * Other values of hash, compression and encryption are reserved for later
 * versions.  Every region holds the same repo object; a daemon that finds
 * two that differ refuses to write (`ckptsync repo adopt REGION` repairs).
 *
 * Creation.  Where every region enforces create-only puts, the first
 * region of the configuration decides: the creator whose create-only put
 * of `repo` succeeds there wins, the others adopt it.  Otherwise each
 * creator that lists no candidate writes its own repo object as
 * repo.d/<its id>, waits create_settle seconds, lists repo.d/ in every
 * region and writes the candidate with the smallest id as `repo`.
 *
 * ==========================================================================
 * 5. Version 1: latest ref (refs/<run>/latest), handoff (handoff/<run>)
 * ==========================================================================
 *
 * Written by version 1 only; read (a handoff counts as generation 0) and
 * verified, never written now.  A latest ref is one line:
 *
 *   <snapshot id> SP <step> LF
 *
 * A shared object rewritten by every writer loses updates when two write
 * at once; the commit records below replaced it.
 *
 * ==========================================================================
 * 6. Commit, claim and handoff records (commits/, lineage/)
 * ==========================================================================
 *
 * Write-once; what a reader decides on is in the key, so one listing per
 * region answers "what is committed and what is newest", no GET needed:
 *
 *   commits/<run>/g<gen>.s<step>.<id>          written after the manifest
 *   lineage/<run>/g<gen>.claim.<16 hex>        an instance adopted the run
 *   lineage/<run>/g<gen>.handoff.s<step>.<id>  the owner of <gen> left at <id>
 *   forget/<run>/g<gen>.s<step>.<id>           snapshot <id> is removed: every
 *                                              reader skips it; prune deletes
 *                                              its manifest and commit records,
 *                                              and this record last
 *
 * gen and step: "0" / %x31-39 *DIGIT ("-1" for an unknown step).  The body
 * is text, lines in this order, fields in [A-Za-z0-9._-]:
 *
 *   ckptsync-commit 1          (or ckptsync-claim 1, ckptsync-handoff 1,
 *                               ckptsync-forget 1)
 *   run <run>
 *   gen <gen>
 *   snapshot <id>              claim: the snapshot it resumed from, or "-"
 *   step <step>
 *   tag <16 hex>               claim only; "-" otherwise
 *   host <name>
 *   instance <type>            or "-"
 *   time <unix seconds>
 *   manifest <sha256 hex>      commit only: of the manifest's bytes; "-"
 *   end <sha256 of every byte before this line>
 *
 * A body that disagrees with its key is damaged.
 *
 * Generations.  Each manifest carries the generation of the instance that
 * wrote it.  migrate-in writes a claim for G+1 (G: the highest generation
 * any region shows for the run) and writes the run at G+1 from then on; an
 * instance that writes a run it never adopted joins the current one.  The
 * resume point of a run: the highest generation G; its newest handoff's
 * snapshot if one exists; else its newest snapshot (a known step beats
 * none, then the higher step, then the later id); else the snapshot G's
 * claim resumed from; else the same for G-1.
 *
 * ==========================================================================
 * 7. Durability order

 * ==========================================================================
 *
 * Kept everywhere, so that a crash at any instant loses nothing that was
 * acknowledged and never exposes a snapshot whose data is missing:
 *
 *   1. chunk data durable      (every chunk the snapshot references is
 *                               stored in the region, and confirmed by
 *                               the region during this snapshot: uploaded,
 *                               or found by a HEAD or a listing; the local
 *                               index's memory is not enough)
 *   2. index committed         (one LMDB transaction records it locally)
 *   3. manifest published      (snapshots/<run>/<id>, in that region)
 *   4. commit record written   (commits/<run>/..., in that same region)
 *   5. caller told             (once `quorum` regions reached step 4)
 *
 * So a manifest that exists names only chunks that existed in its region
 * when it was published, and a commit record names only a manifest that
 * exists in its region.  Between 1 and 3 a writer also follows prune's
 * protocol (section 8), so that no chunk it relies on is deleted under it.
 *
 * ==========================================================================
 * 8. Prune's records (intents/, gc/, locks/prune/)
 * ==========================================================================
 *
 * The protocol and the argument that it loses nothing are in README.md
 * ("Retention and pruning") and syncd/service/gc.h.  Every record is text:
 *
 *   ckptsync-gc 1 / 2                    2 exactly when an r item is present
 *   kind mark|intents|keep|sweep|done|lease|intent
 *   mark <YYYYmmddTHHMMSSZ>-<16 hex>     "-" for a lease or an intent
 *   host <name>                          [A-Za-z0-9._-]
 *   boot <32 hex> / "-"                  the writer's boot id
 *   time <unix seconds>
 *   expires <unix seconds> / "-"         sweep, intent, lease ("-": released)
 *   seq <dec> / "-"                      lease, intent: the writer's pid
 *   snapshot <run>/<id> / "-"            keep: the snapshot
 *   items <dec>
 *   c <64 hex> <size>                    mark (sorted, once each), keep (size 0)
 *   r <64 hex>.<16 hex> <size>           version 2: as c, for recipes/<id>.<sig>
 *                                        (c and r sorted together: by id, c
 *                                        first, then by sig)
 *   s <run>/<id>                         mark: manifests read for it
 *   i <intent name>                      intents, done
 *   end <sha256 of every byte before this line>
 *
 * Keys: intents/<time>.<ttl>.<16 hex> (time UTC, ttl seconds),
 * gc/<mark>/mark, gc/<mark>/intents, gc/<mark>/keep.<16 hex>,
 * gc/<mark>/sweep.<expires>.<16 hex>, gc/<mark>/done, locks/prune/<n>
 * (12 digits; the highest is the lease; created with a create-only put
 * where the store enforces it).
 *
 * ==========================================================================
 * 9. Parts of a multi-node step (parts/)
 * ==========================================================================
 *
 * A job on N nodes ([daemon] nodes) writes one checkpoint as N local
 * directories; node K's daemon uploads its files of a step (its chunks,
 * confirmed in the region as for a snapshot, section 7) and then, instead
 * of a snapshot, the write-once part
 *
 *   parts/<run>/s<step>.<K>-of-<N>.<id>       (step >= 0, 0 <= K < N)
 *
 * whose body is two lines and then node K's manifest (section 3) verbatim,
 * <id> being that manifest's id:
 *
 *   ckptsync-part 1
 *   node <K> <N>
 *   <manifest>
 *
 * After writing its part, a node lists parts/<run>/ in that region; the
 * node that finds a part of every rank 0..N-1 for the step (the newest,
 * largest, id where a rank has several: a node's retake supersedes its
 * earlier part) merges them into one snapshot: one tree,
 * every part's entries in rank order (an entry two parts share must be
 * identical, or the step is refused, naming the path and both ranks).
 * The merged snapshot is a function of the parts alone, so two nodes that
 * merge at once write the same bytes under the same key:
 *
 *   id        <newest part's time stamp>-m<first 12 hex of SHA-256 of the
 *             sorted part ids, each followed by LF>
 *   time      the newest part's; host, instance: rank 0's; parent "-";
 *   gen       the highest part's; root, step, chunker: the parts' (all
 *             equal, or refused)
 *   nodes     N: the merged snapshot is a version 4 manifest (section 3;
 *             version 5 when a file has a tree digest, each file's digest
 *             and its kind carried from its part, and parts that hold a
 *             path with digests of different kinds refused),
 *             each entry carrying the rank of the part it came from, or
 *             "*" for a path several parts held identically (kept at the
 *             lowest rank's place)
 *
 * It is published with a create-only put where the store enforces it
 * (another node's -EEXIST means that node did: the commit record is then
 * written again, same bytes), else a plain put of the same bytes, then its
 * commit record (section 6).  A step whose parts are not all in is
 * incomplete: no reader sees it as a snapshot.
 *
 * A node that cannot finish its part of a step (a merge refused, parts
 * that are bad input) writes, in every region it reaches, the write-once
 *
 *   nodeerr/<run>/s<step>.<K>-of-<N>.<YYYYmmddTHHMMSSZ>.<16 hex>
 *
 *   ckptsync-nodeerr 1
 *   node <K> <N>
 *   step <step>
 *   time <unix seconds>
 *   host <name>
 *   error <one line of text, at most 1024 bytes>
 *
 * (the key's fields and the body's must agree).  Readers show, for each
 * node of an incomplete step, its newest such record.  Prune deletes a
 * step's parts and node errors in a region once that region holds the
 * step's commit record or any region a forget record of it, and the parts
 * of a step no region committed once they are [daemon] part_expire old.
 */
#ifndef CKPTSYNC_FORMAT_H
#define CKPTSYNC_FORMAT_H

/* 1. Keys (relative to the region's prefix). */
#define CKS_KEY_REPO "repo"
#define CKS_KEY_CHUNKS "chunks"          /* chunks/<2 hex>/<64 hex> */
#define CKS_KEY_RECIPES "recipes"        /* recipes/<2 hex>/<64 hex>.<16 hex> (DRAFT) */
#define CKS_KEY_SNAPSHOTS "snapshots"    /* snapshots/<run>/<id> */
#define CKS_KEY_COMMITS "commits"        /* commits/<run>/g<gen>.s<step>.<id> */
#define CKS_KEY_LINEAGE "lineage"        /* lineage/<run>/g<gen>.(claim|handoff)... */
#define CKS_KEY_FORGET "forget"          /* forget/<run>/g<gen>.s<step>.<id> */
#define CKS_KEY_PARTS "parts"            /* parts/<run>/s<step>.<K>-of-<N>.<id> */
#define CKS_KEY_NODEERR "nodeerr"        /* nodeerr/<run>/s<step>.<K>-of-<N>.<time>.<16 hex> */
#define CKS_KEY_REPO_CANDIDATES "repo.d" /* repo.d/<32 hex> */
#define CKS_KEY_PROBE "probe"            /* probe/<16 hex> */
#define CKS_KEY_KEYSLOTS "keys"          /* keys/<16 hex>: encrypted repository's key slots */
#define CKS_KEY_RUNS "runs"              /* runs/k-<32 hex>: a sealed run name */
#define CKS_KEY_INTENTS "intents"        /* intents/<time>.<ttl>.<16 hex> */
#define CKS_KEY_GC "gc"                  /* gc/<mark>/<name> */
#define CKS_KEY_LEASES "locks/prune"     /* locks/prune/<12 digits> */
#define CKS_KEY_REFS "refs"              /* version 1: refs/<run>/latest */
#define CKS_KEY_LATEST "latest"
#define CKS_KEY_HANDOFFS "handoff" /* version 1: handoff/<run> */

/* 2. Chunk object. */
#define CKS_CHUNK_MAGIC "CKC1"
#define CKS_CHUNK_MAGIC_LEN 4
#define CKS_CHUNK_VERSION 2 /* version 1 (codecs 0 and 1 only) is still read */
#define CKS_CHUNK_HEADER_LEN 12
#define CKS_CHUNK_CODEC_RAW 0
#define CKS_CHUNK_CODEC_ZSTD 1
#define CKS_CHUNK_CODEC_PLANES 2 /* byte planes, syncd/engine/tcodec.h (version 2) */
/* DRAFT (issue 27): a recipe, syncd/engine/tdelta.h; version 3, codec 3 */
#define CKS_CHUNK_VERSION_RECIPE 3
#define CKS_CHUNK_CODEC_RECIPE 3
#define CKS_RECIPE_VERSION 1
#define CKS_RECIPE_MAX_BASES 16
#define CKS_RECIPE_MAX_SEGS 65536u
#define CKS_CHUNK_MAX_RAW (256u * 1024 * 1024)
#define CKS_CHUNK_ID_LEN 32 /* SHA-256 */
#define CKS_CHUNK_ID_HEX_LEN 64

/* 3. Manifest. */
#define CKS_MANIFEST_MAGIC "ckptsync-manifest"
#define CKS_MANIFEST_VERSION 6           /* 6: recipes (DRAFT, read only) */
#define CKS_MANIFEST_TREE_PREFIX "tree:" /* version 5: a chunk-tree file digest */
/* The chunk tree's domain string (section 3, "File digests"). */
#define CKS_FILEDIGEST_TREE_DOMAIN "ckptsync chunk-tree 1\n"
#define CKS_MANIFEST_CHUNKER "fastcdc2020"
#define CKS_MANIFEST_MAX_BYTES (1024u * 1024 * 1024)
#define CKS_MANIFEST_MAX_FILES 10000000u
#define CKS_MANIFEST_MAX_CHUNKS 100000000u
#define CKS_MANIFEST_MAX_PATH 4096u
#define CKS_MANIFEST_MAX_COMPONENT 255u
#define CKS_MANIFEST_MAX_FIELD 256u
#define CKS_MANIFEST_ID_MAX 64u
#define CKS_CHUNKER_MIN_SIZE 64u
#define CKS_CHUNKER_MAX_SIZE (256u * 1024 * 1024)

/* 4. Repository object. */
#define CKS_REPO_MAGIC "ckptsync-repo"
#define CKS_REPO_VERSION 1
#define CKS_REPO_ID_HEX_LEN 32

#endif

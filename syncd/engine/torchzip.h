/*
 * torchzip.h — the records of a zip archive that torch.save wrote
 * (PyTorch's PyTorchStreamWriter, miniz underneath): where each record's
 * bytes lie in the file, read from the central directory and the local
 * headers, never by scanning the data.
 *
 * Format facts (APPNOTE 6.3.x; checked on files of torch 1.13):
 *   - every record is STORED (method 0), its data aligned to 64 bytes by
 *     padding in the local header's extra field ("FB" records), so a
 *     record's bytes are the file's bytes: a tensor's storage can be
 *     chunked and coded in place;
 *   - local headers carry flag bit 3 (a data descriptor follows the data)
 *     and zero sizes: sizes come from the central directory only;
 *   - the archive always ends with a zip64 end record and locator, then
 *     the classic end record (no comment); entries past 4 GiB and offsets
 *     past 4 GiB use the zip64 extra field (id 0x0001) of the central
 *     header, as do sizes.
 *
 * What is trusted: nothing.  The end record must be found in the last
 * 64 KiB + 22 bytes; the central directory must lie before it, be at most
 * TORCHZIP_MAX_CDIR bytes and hold at most TORCHZIP_MAX_RECORDS entries;
 * every entry must be whole; a record's local header must carry the same
 * name as its central entry, and its data must end before the central
 * directory.  A record that is compressed, encrypted, has sizes that
 * differ, or whose data overlaps another record's is listed with usable
 * false (its bytes are not the content).  A structural fault anywhere
 * (no end record, an entry running past the directory, a disk number)
 * makes the whole archive CKS_E_FORMAT, and so does a directory that names
 * no `<archive>/data.pkl` (found before any local header is read, so
 * another zip costs the directory's read only).
 *
 *   struct torchzip z = TORCHZIP_INIT;
 *   e = torchzip_open(file_size, read_fn, ud, &z, &err);
 *   const struct torchzip_record *r = torchzip_find(&z, "archive/data.pkl");
 *   torchzip_free(&z);
 *
 * Pure: every byte comes through read_fn (service/scan.c preads the
 * file; the fuzz target reads a buffer).  Not thread-safe per archive.
 */
#ifndef CKS_TORCHZIP_H
#define CKS_TORCHZIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define TORCHZIP_MAX_CDIR (64u << 20) /* central directory bytes */
#define TORCHZIP_MAX_RECORDS 1000000u
#define TORCHZIP_MAX_NAME 1024u /* longer record names are skipped */

/* Reads exactly len bytes at off into buf: 0, or < 0 (short read: error). */
typedef int (*torchzip_read_fn)(void *ud, uint64_t off, void *buf, size_t len);

struct torchzip_record {
    char *name;          /* as in the archive: "archive/data/0" */
    uint64_t begin, end; /* the record's bytes in the file, end exclusive */
    bool usable;         /* stored, not encrypted, disjoint from the others */
};

struct torchzip {
    struct torchzip_record *v; /* sorted by name, names unique */
    size_t n;
};

#define TORCHZIP_INIT                                                                              \
    {                                                                                              \
        NULL, 0                                                                                    \
    }

/* Whether head[0 .. len) can open a zip archive (a local header). */
bool torchzip_is_zip(const uint8_t *head, size_t len);
/* Reads the archive of file_size bytes through rd into z (freed first).
 * 0; CKS_E_FORMAT or CKS_E_LIMIT with err naming what and the offset;
 * the read function's error; -ENOMEM.  z is empty on error. */
int torchzip_open(uint64_t file_size, torchzip_read_fn rd, void *ud, struct torchzip *z,
                  struct buf *err);
/* The record named name, or NULL. */
const struct torchzip_record *torchzip_find(const struct torchzip *z, const char *name);
void torchzip_free(struct torchzip *z);

#endif

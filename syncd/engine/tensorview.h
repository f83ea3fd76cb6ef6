/*
 * tensorview.h — the tensors a checkpoint file holds, from the file's own
 * metadata: name, dtype, shape, and the file bytes of each tensor's data,
 * so that the chunk encoder (engine/tensorhint.h) and the derivation and
 * delta coders can work on tensors rather than guessed bytes.
 *
 *   struct tensorview v = TENSORVIEW_INIT;
 *   e = tensorview_safetensors(head, len, file_size, &v, &err);   or
 *   e = tensorview_torch(file_size, read_fn, ud, &v, &err);
 *   for (size_t i = 0; i < v.n; i++) ... v.t[i].name, v.t[i].dtype,
 *       v.t[i].shape[0 .. ndim), v.t[i].begin .. v.t[i].end ...
 *   t = tensorview_find(&v, "model.layers.0.weight");
 *   s = &v.s[t->storage];
 *   tensorview_free(&v);
 *
 * Storages and tensors.  A storage is a run of the file's bytes of one
 * element type: a safetensors tensor's data_offsets, or a torch zip
 * record `<archive>/data/<key>`.  A tensor lies in one storage: `offset`
 * elements in, elements at offset + sum(i_k * stride[k]) (strides in
 * elements, as torch keeps them).  In safetensors each tensor is its own
 * contiguous storage; in a torch zip several tensors can share one (a
 * view, tied weights, a slice), and [begin, end) is the bounding range of
 * the elements, from the first to one past the last (contiguous says
 * whether those bytes are exactly the tensor, row-major).
 *
 * Format facts.
 *   safetensors: 8 bytes little-endian N, N bytes of JSON (name ->
 *   {"dtype", "shape", "data_offsets": [b, e]} relative to 8 + N, and an
 *   optional "__metadata__"); dtypes as spelled there ("BF16", "F32" ...).
 *   torch.save (zip, since torch 1.6; engine/torchzip.h for the archive):
 *   `<archive>/data.pkl` is a pickle (protocol 2) of the saved object in
 *   which every tensor is
 *     torch._utils._rebuild_tensor_v2(persistent_id(('storage',
 *         torch.<X>Storage, key, location, numel)), storage_offset, size,
 *         stride, requires_grad, backward_hooks[, metadata])
 *   with the storage's bytes in record `<archive>/data/<key>` (numel
 *   elements of X), a tensor of a Tensor subclass is
 *   torch._tensor._rebuild_from_type_v2(_rebuild_tensor_v2, cls, args,
 *   state), an nn.Parameter is torch._utils._rebuild_parameter(
 *   tensor, requires_grad, hooks) (or _rebuild_parameter_with_state), and
 *   state dicts are collections.OrderedDict objects filled by SETITEMS.
 *   X: Double Float Half BFloat16 Long Int Short Char Byte Bool
 *   ComplexFloat ComplexDouble; torch.UntypedStorage is bytes (U8); any
 *   other class (quantized, float8 ...) gives TENSORVIEW_UNKNOWN.
 *   Names: the path of dict keys (str, or int as decimal) and list or
 *   tuple indices from the saved object to the tensor, joined by '.':
 *   {"model": {"w": t}} -> "model.w", optimizer.state[0]["exp_avg"] ->
 *   "optimizer.state.0.exp_avg"; other objects' attribute dicts are
 *   walked too.  Only the pickle is read (engine/pickle.h, persistent ids
 *   allowed): nothing is executed or imported.
 *
 * What is trusted: nothing; a tensor is listed only when it is sound.
 * Every storage lies inside the file and the data section (safetensors) or
 * is a usable record (torch zip).  A tensor of a known dtype needs: a shape
 * of at most TENSORVIEW_MAX_DIMS non-negative ints whose product (numel)
 * times the element size does not overflow; for safetensors exactly its
 * data_offsets' bytes and no overlap with another tensor's bytes; for torch
 * a storage of the same dtype whose record holds exactly numel (the
 * persistent id's) elements, and every element inside it.  A tensor of an
 * unknown dtype is listed with dtype TENSORVIEW_UNKNOWN, its shape, and
 * [begin, end) its whole storage.  Not listed: a name longer than
 * TENSORVIEW_MAX_NAME, a name met twice (both: which one is meant is not
 * known; torch's int key 0 and str key "0" would do it), anything nested
 * deeper than TENSORVIEW_MAX_DEPTH, keys that are neither str nor int,
 * the tensors of a storage read as two dtypes (and that storage's dtype is
 * then UNKNOWN).  A file that is not the format, or whose structure is broken
 * (JSON, zip directory, pickle), gives CKS_E_FORMAT with err naming what;
 * more than TENSORVIEW_MAX_TENSORS tensors or a walk past
 * TENSORVIEW_MAX_VISITS pickle values walked, a data.pkl larger than
 * TENSORVIEW_MAX_PICKLE or of more than TENSORVIEW_MAX_PICKLE_NODES values
 * gives CKS_E_LIMIT.  Every size is
 * checked against its bound before anything is allocated for it.
 *
 * Pure: bytes come from the caller (head) or its read function
 * (service/scan.c preads the file).  Not thread-safe per view.
 */
#ifndef CKS_TENSORVIEW_H
#define CKS_TENSORVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/torchzip.h"

#define TENSORVIEW_MAX_TENSORS 1000000u
#define TENSORVIEW_MAX_NAME 1024u
#define TENSORVIEW_MAX_DIMS 32u
#define TENSORVIEW_MAX_DEPTH 64u
#define TENSORVIEW_MAX_PICKLE (64u << 20) /* data.pkl bytes */
/* Values in data.pkl: about 120 bytes of memory each (engine/pickle.h),
 * a tensor is about 15, so a file of 250,000 tensors is read in 0.5 GB. */
#define TENSORVIEW_MAX_PICKLE_NODES ((size_t)1 << 22)
#define TENSORVIEW_MAX_VISITS ((size_t)1 << 22)    /* pickle values walked */
#define TENSORVIEW_MAX_HEADER (100u * 1024 * 1024) /* safetensors' own limit */

enum tensorview_dtype {
    TENSORVIEW_UNKNOWN,
    TENSORVIEW_F64,
    TENSORVIEW_F32,
    TENSORVIEW_F16,
    TENSORVIEW_BF16,
    TENSORVIEW_I64,
    TENSORVIEW_I32,
    TENSORVIEW_I16,
    TENSORVIEW_I8,
    TENSORVIEW_U8,
    TENSORVIEW_BOOL,
    TENSORVIEW_C64,
    TENSORVIEW_C128,
    TENSORVIEW_NDTYPES
};

enum tensorview_format { TENSORVIEW_NONE, TENSORVIEW_SAFETENSORS, TENSORVIEW_TORCH_ZIP };

struct tensorview_storage {
    char *key;                   /* torch: the record's key ("0"); safetensors: the name */
    enum tensorview_dtype dtype; /* UNKNOWN: no sound tensor says, or they disagree */
    uint64_t begin, end;         /* its bytes in the file */
};

struct tensorview_tensor {
    char *name;
    enum tensorview_dtype dtype;
    unsigned ndim;            /* 0: a scalar (numel 1) */
    uint64_t *shape, *stride; /* ndim each (NULL when 0); strides in elements */
    uint64_t numel;
    size_t storage;      /* index into the view's storages */
    uint64_t offset;     /* elements into the storage */
    uint64_t begin, end; /* file bytes from its first element to past its last */
    bool contiguous;     /* [begin, end) is exactly its elements, row-major */
};

struct tensorview {
    enum tensorview_format format;
    struct tensorview_tensor *t; /* sorted by name (strcmp), names unique */
    size_t n;
    struct tensorview_storage *s;
    size_t ns;
};

#define TENSORVIEW_INIT                                                                            \
    {                                                                                              \
        TENSORVIEW_NONE, NULL, 0, NULL, 0                                                          \
    }

/* Element size in bytes (0 for UNKNOWN), and the safetensors spelling
 * ("F32", "BF16", "?" for UNKNOWN). */
size_t tensorview_dtype_size(enum tensorview_dtype d);
const char *tensorview_dtype_name(enum tensorview_dtype d);
/* The dtype a safetensors "dtype" string, or a torch storage class name
 * ("FloatStorage"), means; UNKNOWN when neither. */
enum tensorview_dtype tensorview_dtype_parse(const char *name);

/* safetensors: head[0 .. len) the file's first bytes, at least the 8 + N
 * of its header, of a file of file_size bytes.  v (freed first) gets every
 * entry as a storage (whatever its shape, so a width can be given for it:
 * tensorhint) and the sound ones as tensors.  0, CKS_E_FORMAT (not
 * safetensors, a malformed header or an entry without a dtype string and
 * two offsets inside the data), CKS_E_LIMIT, -ENOMEM; v empty on error. */
int tensorview_safetensors(const uint8_t *head, size_t len, uint64_t file_size,
                           struct tensorview *v, struct buf *err);
/* A torch.save zip of file_size bytes, read through rd.  0 (v may hold no
 * tensor), CKS_E_FORMAT (not a zip, no single `<archive>/data.pkl`, the
 * pickle unreadable), CKS_E_LIMIT, rd's error, -ENOMEM; v empty on error. */
int tensorview_torch(uint64_t file_size, torchzip_read_fn rd, void *ud, struct tensorview *v,
                     struct buf *err);
/* The tensor named name, or NULL (binary search). */
const struct tensorview_tensor *tensorview_find(const struct tensorview *v, const char *name);
void tensorview_free(struct tensorview *v);

#endif

/*
 * jsonread.h — a small, bounded JSON reader (RFC 8259) for the documents
 * the CLI receives from the daemon, safetensors headers and Hugging Face's
 * trainer_state.json.  It builds a tree in one allocation-light pass and
 * lets the caller look values up by key.
 *
 *   struct jnode *root;
 *   jsonread_parse(text, len, &root, &err);
 *   const struct jnode *runs = jnode_get(root, "runs");
 *   for (size_t i = 0; i < jnode_len(runs); i++) ... jnode_at(runs, i) ...
 *   jsonread_free(root);
 *
 * Limits: depth 64, 1,000,000 nodes, strings as given (\u escapes decoded
 * to UTF-8, surrogate pairs joined; a lone surrogate is an error).
 * Numbers are kept as doubles.  Beyond RFC 8259, the tokens NaN, Infinity
 * and -Infinity are numbers, as Python's json module writes and reads them
 * (exactly these spellings); so is an exponent too large for a double
 * (+-inf).  A caller that needs a finite number checks isfinite().  Lookups on a NULL or mistyped
 * node return NULL / 0 / the default, so chains need no checks.  Not thread-safe per tree; trees
 * are independent.
 */
#ifndef CKS_JSONREAD_H
#define CKS_JSONREAD_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jnode {
    enum jtype type;
    char *key;           /* member name when inside an object */
    char *str;           /* J_STR */
    double num;          /* J_NUM */
    bool b;              /* J_BOOL */
    struct jnode **kids; /* J_ARR, J_OBJ */
    size_t nkids;
};

/* 0, or CKS_E_FORMAT / CKS_E_LIMIT / -ENOMEM with "offset N: what" in err. */
int jsonread_parse(const char *text, size_t len, struct jnode **ret, struct buf *err);
void jsonread_free(struct jnode *n);

const struct jnode *jnode_get(const struct jnode *obj, const char *key);
const struct jnode *jnode_at(const struct jnode *arr, size_t i);
size_t jnode_len(const struct jnode *arr);
const char *jnode_str(const struct jnode *n, const char *dflt);
double jnode_num(const struct jnode *n, double dflt);
bool jnode_bool(const struct jnode *n, bool dflt);

#endif

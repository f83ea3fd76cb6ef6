/*
 * pickle.h — a restricted reader of Python pickles (protocols 2 to 5) that
 * never executes anything: it runs the pickle machine's opcodes over a
 * small value tree instead of Python objects, so a layout file written by
 * pickle (PyTorch DCP's `.metadata`, engine/dcpmeta.h) can be read without
 * a Python interpreter and without trusting it.
 *
 *   struct pickle *p;
 *   e = pickle_parse(data, len, NULL, &p, &err);    NULL: PICKLE_LIMITS_DEFAULT
 *   const struct pickle_node *root = pickle_root(p);
 *   if (pickle_is_class(root, "mod", "Cls")) ... pickle_attr(root, "field") ...
 *   pickle_free(p);
 *
 * What a value becomes:
 *   None, True/False, int (BININT*, LONG1/LONG4 up to 64 bits; wider ones
 *   are PICKLE_BIGINT without a value), float, str, bytes (and bytearray,
 *   Python 2 str) -> scalar nodes; tuple, list, dict (kids: key, value,
 *   key, value ...), set, frozenset -> containers;
 *   GLOBAL / STACK_GLOBAL -> PICKLE_GLOBAL, a class reference: module and
 *   name strings, nothing imported;
 *   REDUCE / NEWOBJ / NEWOBJ_EX -> PICKLE_OBJECT with kids[PICKLE_OBJ_*]:
 *   the callable or class, its args, its kwargs; BUILD sets its state;
 *   APPEND(S) and SETITEM(S) on an object (a list or dict subclass, an
 *   OrderedDict) collect into its items and dictitems.
 * The memo (PUT, BINPUT, LONG_BINPUT, MEMOIZE, GET, BINGET, LONG_BINGET)
 * shares nodes, and so do None, the bools and the ints -1 .. 1024 (one
 * node each): the result is a DAG; a cycle (a list that contains itself)
 * is refused, so a walk of the result always ends.  Memory: about 120
 * bytes per value (a DCP .metadata of 300,000 storage entries, 59 MB, is
 * 8 million values and 0.95 GB), so max_nodes bounds it.
 *
 * Refused, with an error naming the offset and the opcode: a stream not
 * opening with PROTO 2..5, an unknown or unsupported opcode (the text
 * opcodes of protocol 0, INST/OBJ, persistent ids (unless limits.persid:
 * BINPERSID then makes a PICKLE_PERSID node holding the id, which torch.save
 * uses for its storages; the text PERSID stays refused), extension codes,
 * out-of-band buffers), an argument running past the end, a FRAME past
 * the end, a stack underflow or a missing MARK, an operation on the wrong
 * kind of value (APPEND to a dict), a memo index never set, bytes after
 * STOP or no STOP, and any limit: input bytes, nodes, depth of the value,
 * one string's length.
 *
 * Pure (no I/O), iterative (no recursion on input data).  A parsed pickle
 * owns every node; nodes are valid until pickle_free().  Not thread-safe
 * per pickle; pickles are independent.
 */
#ifndef CKS_PICKLE_H
#define CKS_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct pickle_limits {
    size_t max_bytes;  /* the whole input */
    size_t max_nodes;  /* values made (and memo slots, stack entries) */
    size_t max_depth;  /* nesting of the result, and open MARKs */
    size_t max_string; /* one str, bytes or name */
    bool persid;       /* accept BINPERSID: a PICKLE_PERSID node (torch.save) */
};

#define PICKLE_LIMITS_DEFAULT                                                                      \
    {                                                                                              \
        (size_t)256 << 20, (size_t)1 << 24, 256, (size_t)64 << 20, false                           \
    }

enum pickle_kind {
    PICKLE_NONE,
    PICKLE_BOOL,
    PICKLE_INT,
    PICKLE_BIGINT,
    PICKLE_FLOAT,
    PICKLE_STR,
    PICKLE_BYTES,
    PICKLE_TUPLE,
    PICKLE_LIST,
    PICKLE_DICT,
    PICKLE_SET,
    PICKLE_FROZENSET,
    PICKLE_GLOBAL,
    PICKLE_OBJECT,
    PICKLE_PERSID, /* BINPERSID (limits.persid): kids[0] is the persistent id */
};

/* An object's kids, by index (NULL where absent). */
enum {
    PICKLE_OBJ_CLASS,     /* what REDUCE calls or NEWOBJ instantiates */
    PICKLE_OBJ_ARGS,      /* a tuple */
    PICKLE_OBJ_KWARGS,    /* NEWOBJ_EX: a dict */
    PICKLE_OBJ_STATE,     /* BUILD's argument: usually a dict of attributes */
    PICKLE_OBJ_ITEMS,     /* a list: APPEND(S) on the object */
    PICKLE_OBJ_DICTITEMS, /* a dict: SETITEM(S) on the object */
    PICKLE_OBJ_NKIDS
};

struct pickle_node {
    enum pickle_kind kind;
    bool b;          /* PICKLE_BOOL */
    uint8_t color;   /* internal */
    uint32_t depth;  /* internal: the longest path below */
    uint32_t n, cap; /* kids: containers; PICKLE_OBJECT: PICKLE_OBJ_NKIDS slots */
    union {
        int64_t i; /* PICKLE_INT */
        double f;  /* PICKLE_FLOAT */
    };
    char *s;    /* PICKLE_STR, PICKLE_BYTES (NUL-terminated copy); PICKLE_GLOBAL: module */
    char *name; /* PICKLE_GLOBAL: the (qualified) name */
    size_t len; /* PICKLE_STR, PICKLE_BYTES: bytes in s (s may hold NULs) */
    struct pickle_node **kids;
};

struct pickle;

/* Parses data[0 .. len) into *ret (lim NULL: PICKLE_LIMITS_DEFAULT).
 * 0; CKS_E_FORMAT (malformed, unsupported) or CKS_E_LIMIT with err saying
 * "offset N: OPCODE (0xXX): what"; -ENOMEM. */
int pickle_parse(const uint8_t *data, size_t len, const struct pickle_limits *lim,
                 struct pickle **ret, struct buf *err);
void pickle_free(struct pickle *p);
const struct pickle_node *pickle_root(const struct pickle *p);
/* How many nodes p holds. */
size_t pickle_nnodes(const struct pickle *p);

/* Whether n is an object whose class is the global module.name. */
bool pickle_is_class(const struct pickle_node *n, const char *module, const char *name);
/* The class of an object (a PICKLE_GLOBAL), or NULL. */
const struct pickle_node *pickle_class(const struct pickle_node *n);
/* Attribute `name` of an object: from its state when that is a dict of
 * str keys, or a (dict or None, dict) tuple (instance and slot state).
 * NULL when absent. */
const struct pickle_node *pickle_attr(const struct pickle_node *obj, const char *name);
/* The value of str key `key` of a dict; NULL when absent. */
const struct pickle_node *pickle_dict_get(const struct pickle_node *dict, const char *key);
/* Whether n is a str without NUL bytes (usable as a C string). */
bool pickle_is_cstr(const struct pickle_node *n);
/* A short name of n's kind ("str", "dict", "object" ...), for errors. */
const char *pickle_kind_name(const struct pickle_node *n);

#endif

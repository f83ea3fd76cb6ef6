/*
 * ckptname.h — what a checkpoint's name says: the step it carries, and
 * whether it is a framework's in-progress (transient) name.  Pure
 * functions of a string: the daemon's detector, `ckptsync snapshot PATH`
 * and `restore --all` all ask here.  Thread-safe.
 */
#ifndef CKS_CKPTNAME_H
#define CKS_CKPTNAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The step a checkpoint name carries, or -1: "checkpoint-N", "iter_N",
 * "global_stepN", "step_N", "step-N", "stepN", "step=N" (as in Lightning's
 * "epoch=3-step=1000.ckpt"); "_" or "-" may separate checkpoint/iter from
 * N.  The keyword must start the name or follow a non-letter, N must be
 * followed by the end or a non-alphanumeric character; the last match
 * wins.  Only the last path component of name is looked at (trailing '/'
 * ignored).  The daemon's units and `ckptsync snapshot PATH` without
 * --step both take their step from here.
 */
int64_t ckptname_step(const char *name);

/*
 * Is name (one path component, len bytes) never a checkpoint: hidden
 * (".name": rsync's ".x.XXXXXX", ".ipynb_checkpoints", ".cache",
 * ".incomplete", ".Trash-1000"), or what a framework writes while a save is
 * in progress before renaming it: Hugging Face Trainer's "tmp-checkpoint-N",
 * Python tempfile names ("tmpk3j2_9xq", also PyTorch Lightning's and
 * fsspec's staging files), "*.tmp", "*.temp", "*.part", "*.partial",
 * "*.incomplete" (huggingface_hub downloads), NeMo's "*-unfinished" marker,
 * Orbax's "N.orbax-checkpoint-tmp-T", TensorFlow's "*_temp" and
 * "*_temp_<32 hex>".  (DeepSpeed and torch.distributed.checkpoint write in
 * place under the final name; DCP's ".metadata.tmp" is inside the unit.)
 * The suffixes are matched without regard to case.  Used for the daemon's
 * units and by restore --all (service/catalog.c).
 */
bool ckptname_transient(const char *name, size_t len);

/* N at s (1..18 decimal digits, then the end or a non-alphanumeric
 * character), else -1. */
int64_t ckptname_number(const char *s);

#endif

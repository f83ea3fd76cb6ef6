#!/usr/bin/env python3
"""mnlayout.py — one step of a multi-node job, written as the frameworks
write it, on every node's watch root (for test-multinode-random.sh, the
netns test, the soak and the commit benchmark).

    mnlayout.py LAYOUT STEP NODES ROOT SEED MAXKIB [EXPECT]

LAYOUT: dcp | megatron | deepspeed | hf.  Node K's run directory is
ROOT/i-nK/watch/job (multilib.sh's instances n0 .. nN-1).  File sizes are
drawn between 1 KiB and MAXKIB KiB and every byte comes from SEED, so a
seed replays the same trees.  Prints the unit's directory name (relative
to the run).  With EXPECT, also writes there the tree a committed step must
restore to: every node's unit, files at their relative paths (the files
several nodes write identically appear once).

  dcp        checkpoint-S/__K_0.distcp on every node; .metadata on node 0
             only (DCP's coordinator)
  megatron   iter_%07d/mp_rank_0K/model_optim_rng.pt on node K; node 0
             also writes latest_checkpointed_iteration.txt beside the
             unit (the run's root: not part of the step)
  deepspeed  global_stepS/bf16_zero_pp_rank_K_mp_rank_00_optim_states.pt
             on node K, mp_rank_00_model_states.pt on node 0; node 0 writes
             `latest` (the tag) beside the unit
  hf         checkpoint-S/model-0000K-of-0000N.safetensors (K from 1) and
             rng_state_K.pth on node K; model.safetensors.index.json and
             config.json on every node, identical
"""
import json
import os
import random
import shutil
import sys
import pickle

import dcpmeta  # beside this script: DCP's classes, by name


def blob(rng, maxkib):
    n = rng.randint(1024, maxkib * 1024)
    return rng.randbytes(n)


def put(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp-mnlayout"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)   # a framework's files appear whole


def files_dcp(step, nodes, rng, maxkib):
    unit = "checkpoint-%d" % step
    per = [{"__%d_0.distcp" % k: blob(rng, maxkib)} for k in range(nodes)]
    # DCP's .metadata, pickled as DCP writes it (read at commit: coverage)
    meta = dcpmeta.build([("__%d_0.distcp" % k, 0, len(per[k]["__%d_0.distcp" % k]))
                          for k in range(nodes)])
    per[0][".metadata"] = pickle.dumps(meta, protocol=pickle.DEFAULT_PROTOCOL)
    return unit, per, [{} for _ in range(nodes)]


def files_megatron(step, nodes, rng, maxkib):
    unit = "iter_%07d" % step
    per = [{"mp_rank_%02d/model_optim_rng.pt" % k: blob(rng, maxkib)} for k in range(nodes)]
    outside = [{} for _ in range(nodes)]
    outside[0]["latest_checkpointed_iteration.txt"] = b"%d" % step
    return unit, per, outside


def files_deepspeed(step, nodes, rng, maxkib):
    unit = "global_step%d" % step
    per = [{"bf16_zero_pp_rank_%d_mp_rank_00_optim_states.pt" % k: blob(rng, maxkib)}
           for k in range(nodes)]
    per[0]["mp_rank_00_model_states.pt"] = blob(rng, maxkib)
    outside = [{} for _ in range(nodes)]
    outside[0]["latest"] = unit.encode()
    return unit, per, outside


def files_hf(step, nodes, rng, maxkib):
    unit = "checkpoint-%d" % step
    shards = ["model-%05d-of-%05d.safetensors" % (k + 1, nodes) for k in range(nodes)]
    per = [{shards[k]: blob(rng, maxkib), "rng_state_%d.pth" % k: blob(rng, 4)}
           for k in range(nodes)]
    index = {"metadata": {"total_size": sum(len(per[k][shards[k]]) for k in range(nodes))},
             "weight_map": {"model.layers.%d.weight" % k: shards[k] for k in range(nodes)}}
    shared = {"model.safetensors.index.json": json.dumps(index, indent=2).encode(),
              "config.json": json.dumps({"model_type": "llama", "step": step}).encode()}
    for k in range(nodes):
        per[k].update(shared)
    return unit, per, [{} for _ in range(nodes)]


# Written last in a unit: DCP's coordinator writes .metadata once every
# rank's data is in (the daemon takes it as the unit's end, engine/detect);
# Transformers writes the index after the shards.
MARKERS = (".metadata", "model.safetensors.index.json")

LAYOUTS = {"dcp": files_dcp, "megatron": files_megatron, "deepspeed": files_deepspeed,
           "hf": files_hf}


def main():
    layout, step, nodes, root, seed, maxkib = sys.argv[1:7]
    expect = sys.argv[7] if len(sys.argv) > 7 else None
    step, nodes, maxkib = int(step), int(nodes), int(maxkib)
    rng = random.Random("%s/%s/%d" % (seed, layout, step))
    unit, per, outside = LAYOUTS[layout](step, nodes, rng, maxkib)
    for k in range(nodes):   # in the frameworks' order: the unit, its marker last, then the pointer
        run = os.path.join(root, "i-n%d" % k, "watch", "job")
        for rel, data in sorted(per[k].items(), key=lambda kv: (kv[0] in MARKERS, kv[0])):
            put(os.path.join(run, unit, rel), data)
        for rel, data in sorted(outside[k].items()):
            put(os.path.join(run, rel), data)
    if expect:
        shutil.rmtree(expect, ignore_errors=True)
        for k in range(nodes):
            for rel, data in sorted(per[k].items()):
                put(os.path.join(expect, rel), data)
    print(unit)


if __name__ == "__main__":
    main()

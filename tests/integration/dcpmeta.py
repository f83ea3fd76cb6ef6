#!/usr/bin/env python3
"""Writes a PyTorch DCP `.metadata` as torch.distributed.checkpoint's
FileSystemWriter does (pickle.dump of a Metadata), without torch: the
classes below stand in for DCP's and carry its module and class names, so
the pickle names exactly what a real one names.

usage: dcpmeta.py OUT [--protocol N] FILE:OFFSET:LENGTH ...
  each FILE:OFFSET:LENGTH is one storage_data entry (a tensor's bytes
  FILE[OFFSET .. OFFSET+LENGTH)); --protocol defaults to pickle's default,
  as DCP's pickle.dump.
"""
import dataclasses
import pathlib
import pickle
import sys
import types
import uuid
from typing import Any, Dict, List, Optional


def _module(name):
    mod = sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name)
        sys.modules[name] = mod
    return mod


def _place(cls, module, name=None):
    """Gives cls DCP's module and name, and registers it there."""
    name = name or cls.__name__
    cls.__module__ = module
    cls.__qualname__ = name
    cls.__name__ = name
    setattr(_module(module), name, cls)
    return cls


class Size(tuple):
    """torch.Size: a tuple that pickles as torch.Size((...))."""

    def __reduce__(self):
        return (Size, (tuple(self),))


_place(Size, "torch")


class _TorchGlobal:
    """torch.float32, torch.strided ...: pickled by name, as torch does."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name


_place(_TorchGlobal, "torch", "_TorchGlobal")
for _n in ("float32", "bfloat16", "strided", "contiguous_format"):
    setattr(_module("torch"), _n, _TorchGlobal(_n))
    getattr(_module("torch"), _n).__module__ = "torch"
TORCH = _module("torch")


@dataclasses.dataclass
class TensorProperties:
    dtype: Any = None
    layout: Any = None
    requires_grad: bool = False
    memory_format: Any = None
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory)

    def __setstate__(self, state):
        (self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory) = state


_place(TensorProperties, "torch.distributed._shard.sharded_tensor.metadata")
MD = "torch.distributed.checkpoint.metadata"


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: Any
    sizes: Any


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: Any
    size: Any
    chunks: List[Any]


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@dataclasses.dataclass
class StorageMeta:
    checkpoint_id: Any = None
    save_id: Optional[str] = None
    load_id: Optional[str] = None
    modules: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: Dict[str, Any]
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Optional[Any] = None
    version: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: Optional[Any] = None
    index: Optional[int] = dataclasses.field(hash=False, compare=False, default=None)


@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: Optional[Any] = None


for _c in (ChunkStorageMetadata, TensorStorageMetadata, BytesStorageMetadata, StorageMeta,
           Metadata, MetadataIndex):
    _place(_c, MD)
_place(_StorageInfo, "torch.distributed.checkpoint.filesystem")


def build(entries, checkpoint_dir="/data/cloud_storage/job/checkpoint"):
    """A Metadata whose storage_data names entries [(file, offset, length)]."""
    sdm, storage = {}, {}
    for i, (path, off, length) in enumerate(entries):
        fqn = "layers.%d.weight" % i if i % 4 else "extra_state.%d" % i
        if i % 4:
            n = max(length // 4, 1)
            props = TensorProperties(TORCH.float32, TORCH.strided, False,
                                     TORCH.contiguous_format, False)
            sdm[fqn] = TensorStorageMetadata(
                props, Size([n]), [ChunkStorageMetadata(Size([0]), Size([n]))])
            key = MetadataIndex(fqn, Size([0]), 0)
        else:
            sdm[fqn] = BytesStorageMetadata()
            key = MetadataIndex(fqn)
        storage[key] = _StorageInfo(path, off, length)
    meta = StorageMeta(pathlib.PurePosixPath(checkpoint_dir), str(uuid.UUID(int=7)))
    return Metadata(sdm, planner_data={k: (k,) for k in sdm}, storage_data=storage,
                    storage_meta=meta, version="1.0.0")


def main(argv):
    out, proto, entries = argv[1], pickle.DEFAULT_PROTOCOL, []
    rest = argv[2:]
    if rest[:1] == ["--protocol"]:
        proto, rest = int(rest[1]), rest[2:]
    for spec in rest:
        path, off, length = spec.rsplit(":", 2)
        entries.append((path, int(off), int(length)))
    with open(out, "wb") as f:
        pickle.dump(build(entries), f, protocol=proto)


if __name__ == "__main__":
    main(sys.argv)

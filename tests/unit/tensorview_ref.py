#!/usr/bin/env python3
"""tensorview_ref.py OUTDIR — checkpoint files for tests/unit/test-tensorview.c
and, beside each FILE, FILE.expect: the tensors the view must list, one per
line, "name dtype shape stride offset begin end key" (shape and stride as
comma lists, "-" for a scalar), sorted by name.

torch files are written by torch.save (Debian's python3-torch); what to
expect is computed without the C reader: the zip by zipfile (each record's
data offset from its local header), the pickle by Python's own Unpickler
(persistent ids and _rebuild_tensor_v2 caught), names by walking the
result; then every contiguous tensor's bytes at [begin, end) are compared
with what torch.load gives, so the offsets are those torch reads.
"lie-*.pt" are zips written here whose pickles lie; their expectations
are the sound tensors only.
"""
import collections
import io
import json
import os
import pickle
import struct
import sys
import zipfile

import torch

SIZES = {"DoubleStorage": ("F64", 8), "FloatStorage": ("F32", 4), "HalfStorage": ("F16", 2),
         "BFloat16Storage": ("BF16", 2), "LongStorage": ("I64", 8), "IntStorage": ("I32", 4),
         "ShortStorage": ("I16", 2), "CharStorage": ("I8", 1), "ByteStorage": ("U8", 1),
         "BoolStorage": ("BOOL", 1)}


class Ten:
    def __init__(self, pid, offset, size, stride):
        self.cls, self.key, self.numel = pid[1], pid[2], pid[4]
        self.offset, self.size, self.stride = offset, tuple(size), tuple(stride)


class SubTensor(torch.Tensor):
    """A Tensor subclass: torch.save pickles it with _rebuild_from_type_v2."""


class Cls:
    def __init__(self, name):
        self.name = name


class Reader(pickle.Unpickler):
    def persistent_load(self, pid):
        return pid

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda pid, off, size, stride, *rest: Ten(pid, off, size, stride)
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return lambda t, *rest: t
        if (module, name) == ("torch._tensor", "_rebuild_from_type_v2"):
            return lambda func, cls, args, state: func(*args)
        if (module, name) == ("__main__", "SubTensor"):
            return SubTensor
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name.endswith("Storage"):
            return Cls(name)
        raise pickle.UnpicklingError("unexpected %s.%s" % (module, name))


def records(path):
    """name -> (data offset, size) of every record."""
    out = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for i in z.infolist():
            f.seek(i.header_offset)
            h = f.read(30)
            n, m = struct.unpack("<HH", h[26:30])
            out[i.filename] = (i.header_offset + 30 + n + m, i.file_size)
    return out


def walk(obj, name, out, leaf=Ten):
    if isinstance(obj, leaf):
        out.append((name, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, (str, int)) and not isinstance(k, bool):
                walk(v, "%s.%s" % (name, k) if name else str(k), out, leaf)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk(v, "%s.%d" % (name, i) if name else str(i), out, leaf)


def expect_torch(path, check_bytes=True):
    recs = records(path)
    pkl = [n for n in recs if n.endswith("/data.pkl")][0]
    prefix = pkl[: -len("data.pkl")]
    with zipfile.ZipFile(path) as z:
        obj = Reader(io.BytesIO(z.read(pkl))).load()
    found = []
    walk(obj, "", found)
    lines, raw = [], open(path, "rb").read()
    for name, t in found:
        dt, es = SIZES[t.cls.name]
        base, size = recs[prefix + "data/" + t.key]
        assert size == t.numel * es
        numel = 1
        for s in t.size:
            numel *= s
        last = t.offset + sum((s - 1) * st for s, st in zip(t.size, t.stride)) if numel else None
        begin = base + t.offset * es
        end = base + (last + 1) * es if numel else begin
        lines.append("%s %s %s %s %d %d %d %s" % (
            name, dt, ",".join(map(str, t.size)) or "-", ",".join(map(str, t.stride)) or "-",
            t.offset, begin, end, t.key))
        found_bytes = raw[begin:end]
        if check_bytes:
            check(path, name, found_bytes, t, numel, es)
    return sorted(lines)


def check(path, name, data, t, numel, es):
    """The bytes at [begin, end) are the tensor torch.load gives, where they
    are exactly its elements."""
    if not numel or list(t.stride) != contiguous(t.size):
        return
    loaded = []
    walk(torch.load(path), "", loaded, torch.Tensor)
    got = dict(loaded)[name].detach().contiguous()
    want = got.view(torch.int16) if got.dtype == torch.bfloat16 else got
    assert want.numpy().tobytes() == data, (path, name)


def contiguous(size):
    st, acc = [], 1
    for s in reversed(size):
        st.append(acc)
        acc *= s
    return list(reversed(st))


def subtensor():
    t = torch.arange(3, dtype=torch.float32).as_subclass(SubTensor)
    t.note = "pickled as state"  # torch 1.13 cannot load one whose state is None
    return t


def state():
    g = torch.Generator().manual_seed(3)
    master = collections.OrderedDict()
    for i in range(3):
        master["layers.%d.weight" % i] = torch.randn(8, 16, generator=g)
        master["layers.%d.bias" % i] = torch.randn(16, generator=g)
    model = collections.OrderedDict((k, v.to(torch.bfloat16)) for k, v in master.items())
    params = [torch.nn.Parameter(v.clone()) for v in master.values()]
    opt = torch.optim.AdamW(params, lr=1e-3)
    sum(p.sum() for p in params).backward()
    opt.step()
    emb = torch.randn(10, 4, generator=g)
    return {
        "model": model,
        "master": master,
        "optimizer": opt.state_dict(),
        "tied": {"embed.weight": emb, "lm_head.weight": emb},
        "view": emb[2:5, 1:3],
        "row": emb[7],
        "scalar": torch.tensor(2.5),
        "step": torch.tensor(100, dtype=torch.int64),
        "ints": torch.arange(6, dtype=torch.int32).reshape(2, 3),
        "mask": torch.tensor([True, False, True]),
        "half": torch.ones(3, dtype=torch.float16),
        "f64": torch.ones(2, dtype=torch.float64),
        "bytes": torch.arange(4, dtype=torch.uint8),
        "i8": torch.arange(4, dtype=torch.int8),
        "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.ones(2, 2)),
        "sub": subtensor(),
        "list": [torch.zeros(2), {"deep": torch.ones(1)}],
        "args": {"lr": 0.1, "name": "run"},
    }


def write_safetensors(path):
    g = torch.Generator().manual_seed(5)
    tensors = collections.OrderedDict([
        ("w.bf16", torch.randn(4, 8, generator=g).to(torch.bfloat16)),
        ("w.f32", torch.randn(3, 5, generator=g)),
        ("i.i64", torch.arange(3)),
        ("scalar", torch.tensor(1.5)),
    ])
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    names = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int64: "I64"}
    for n, t in tensors.items():
        b = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[n] = {"dtype": names[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    # an entry of a dtype the reader does not know, and one whose shape lies
    header["f8"] = {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [off, off + 4]}
    header["liar"] = {"dtype": "F32", "shape": [3], "data_offsets": [off + 4, off + 8]}
    blobs.append(b"\0" * 8)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    base, lines = 8 + len(h), []
    for n, meta in header.items():
        if n in ("__metadata__", "liar"):
            continue
        b, e = meta["data_offsets"]
        shape = meta["shape"]
        lines.append("%s %s %s %s 0 %d %d %s" % (
            n, meta["dtype"] if n != "f8" else "?", ",".join(map(str, shape)) or "-",
            ",".join(map(str, contiguous(shape))) or "-", base + b, base + e, n))
    return sorted(lines)


def lie_zip(path, pkl, storages):
    """A zip as torch.save lays it out, with a hand-written pickle."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("lie/data.pkl", pkl)
        for key, data in storages.items():
            z.writestr("lie/data/" + key, data)
        z.writestr("lie/version", "3\n")


def rebuild(cls, key, numel, offset, size, stride):
    """The pickle opcodes (protocol 2) of one _rebuild_tensor_v2 call."""
    def tup(v):
        return b"(" + b"".join(b"K" + bytes([x]) if x < 256 else b"J" + struct.pack("<i", x)
                               for x in v) + b"t"
    def num(x):
        return b"J" + struct.pack("<i", x)
    return (b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
            + b"ctorch\n" + cls.encode() + b"\nX" + struct.pack("<I", len(key)) + key.encode()
            + b"X\x03\x00\x00\x00cpu" + num(numel) + b"tQ" + num(offset) + tup(size)
            + tup(stride) + b"\x89ccollections\nOrderedDict\n)RtR")


def write_lies(out):
    """Each lie beside sound tensors: only the sound ones are expected."""
    items = [
        ("good", rebuild("FloatStorage", "0", 4, 0, [2, 2], [2, 1])),
        ("past_storage", rebuild("FloatStorage", "1", 4, 2, [2, 2], [2, 1])),
        ("wrong_numel", rebuild("FloatStorage", "2", 5, 0, [4], [1])),
        ("no_record", rebuild("FloatStorage", "9", 4, 0, [4], [1])),
        ("unknown", rebuild("QInt8Storage", "3", 4, 0, [4], [1])),
        ("two_dtypes_a", rebuild("FloatStorage", "4", 4, 0, [4], [1])),
        ("two_dtypes_b", rebuild("IntStorage", "4", 4, 0, [4], [1])),
        ("overflow", rebuild("FloatStorage", "5", 4, 0, [65536, 65536, 65536, 65536],
                             [0, 0, 0, 0])),
        ("stride_out", rebuild("FloatStorage", "6", 4, 0, [2, 2], [100000, 1])),
    ]
    pkl = b"\x80\x02}(" + b"".join(b"X" + struct.pack("<I", len(n)) + n.encode() + t
                                   for n, t in items)
    pkl += b"K\x07" + rebuild("FloatStorage", "7", 1, 0, [], []) + b"u."  # int key 7
    storages = {k: b"\1" * 16 for k in "0123456"}
    storages["7"] = b"\2" * 4
    lie_zip(os.path.join(out, "lie-mixed.pt"), pkl, storages)
    recs = records(os.path.join(out, "lie-mixed.pt"))
    b0, b3, b7 = (recs["lie/data/" + k][0] for k in "037")
    return sorted([
        "good F32 2,2 2,1 0 %d %d 0" % (b0, b0 + 16),
        "unknown ? 4 1 0 %d %d 3" % (b3, b3 + 16),
        "7 F32 - - 0 %d %d 7" % (b7, b7 + 4),
    ])


def write_zip64(path):
    """A zip whose every size and offset is in zip64 extra fields (as torch
    writes them for records and archives past 4 GiB), end records zip64."""
    pkl = (b"\x80\x02}(X\x01\x00\x00\x00w" + rebuild("HalfStorage", "0", 8, 2, [2, 3], [3, 1])
           + b"u.")
    recs = [("z/data.pkl", pkl), ("z/data/0", bytes(range(16))), ("z/version", b"3\n")]
    out, central = bytearray(), bytearray()
    for name, data in recs:
        off, nm = len(out), name.encode()
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, 0, 0xFFFFFFFF,
                           0xFFFFFFFF, len(nm), 20) + nm
        out += struct.pack("<HHQQ", 1, 16, len(data), len(data)) + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, 0,
                               0xFFFFFFFF, 0xFFFFFFFF, len(nm), 28, 0, 0, 0, 0, 0xFFFFFFFF) + nm
        central += struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
    cd_off = len(out)
    out += central
    end64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(recs), len(recs),
                       len(central), cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, end64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    open(path, "wb").write(out)
    base = records(path)["z/data/0"][0]  # zipfile reads it too
    return ["w F16 2,3 3,1 2 %d %d 0" % (base + 4, base + 16)]


def main():
    out = sys.argv[1]
    torch.save(state(), os.path.join(out, "nested.pt"))
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    torch.save(m.state_dict(), os.path.join(out, "module.pt"))
    expects = {
        "nested.pt": expect_torch(os.path.join(out, "nested.pt")),
        "module.pt": expect_torch(os.path.join(out, "module.pt")),
        "model.safetensors": write_safetensors(os.path.join(out, "model.safetensors")),
        "lie-mixed.pt": write_lies(out),
        "zip64.pt": write_zip64(os.path.join(out, "zip64.pt")),
    }
    with zipfile.ZipFile(os.path.join(out, "other.zip"), "w") as z:  # not torch's
        z.writestr("docs/readme.txt", "hello")
    for name, lines in expects.items():
        with open(os.path.join(out, name + ".expect"), "w") as f:
            f.write("".join(line + "\n" for line in lines))


if __name__ == "__main__":
    main()

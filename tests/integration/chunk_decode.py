#!/usr/bin/python3
"""chunk_decode.py OBJ NAME -- decode a chunk object with the documented
format and standard tools only (include/ckptsync/format.h section 2):
version 1 or 2; codec 0 raw, 1 zstd (the zstd program), 2 byte planes
(tests/unit/tcodec_ref.py, written from syncd/engine/tcodec.h alone).
Exits non-zero unless the result is the header's raw length and its
SHA-256 is NAME (the object's key)."""
import hashlib
import os
import struct
import subprocess
import sys
import tempfile

data = open(sys.argv[1], "rb").read()
magic, version, codec, reserved, raw_len = struct.unpack("<4sBBHI", data[:12])
assert magic == b"CKC1" and version in (1, 2) and reserved == 0, (magic, version, reserved)
assert codec in ((0, 1) if version == 1 else (0, 1, 2)), (version, codec)
payload = data[12:]
if codec == 0:
    raw = payload
elif codec == 1:
    raw = subprocess.run(["zstd", "-dc"], input=payload, capture_output=True, check=True).stdout
else:
    ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit", "tcodec_ref.py")
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "p"), "wb").write(payload)
        subprocess.run([sys.executable, ref, os.path.join(d, "p"), str(raw_len),
                        os.path.join(d, "r")], check=True)
        raw = open(os.path.join(d, "r"), "rb").read()
assert len(raw) == raw_len, (len(raw), raw_len)
assert hashlib.sha256(raw).hexdigest() == sys.argv[2], "digest"
print("chunk decodes: version %d codec %d, %d bytes, sha256 matches its name" % (version, codec, raw_len))

#!/usr/bin/python3
"""tcodec_ref.py -- a reference decoder for tcodec payloads (chunk codec 2),
written from the format in syncd/engine/tcodec.h's head comment alone, and
slow on purpose: one bit at a time.  It shows what a person needs to read
a byte-plane chunk without this project's code, and cross-checks the C
decoder (tested by hand against payloads of bf16 and fp32 chunks).

    tcodec_ref.py PAYLOAD RAW_LEN OUT    (PAYLOAD: the chunk object's bytes
                                          after its 12-byte header)
"""
import struct
import sys


def huf_plane(p, pos, n):
    lens = [(p[pos + s // 2] >> (4 * (s % 2))) & 15 for s in range(256)]
    if sum(1 << (11 - l) for l in lens if l) != 1 << 11 or sum(1 for l in lens if l) < 2:
        raise ValueError("code lengths are not a complete code")
    sizes = struct.unpack_from("<4I", p, pos + 128)
    pos += 144
    # canonical codes, RFC 1951 3.2.2
    count = [0] * 12
    for l in lens:
        count[l] += 1
    count[0] = 0
    code, first = 0, [0] * 12
    for b in range(1, 12):
        code = (code + count[b - 1]) << 1
        first[b] = code
    table = {}
    for s in range(256):
        if lens[s]:
            table[(lens[s], first[lens[s]])] = s
            first[lens[s]] += 1
    out = bytearray()
    for j in range(4):
        bits = "".join(format(b, "08b") for b in p[pos:pos + sizes[j]])
        i = 0
        for _ in range(n * (j + 1) // 4 - n * j // 4):
            l = 1
            while (l, int(bits[i:i + l] or "0", 2)) not in table:
                l += 1
                if l > 11 or i + l > len(bits):
                    raise ValueError("stream %d runs out" % j)
            out.append(table[(l, int(bits[i:i + l], 2))])
            i += l
        if (i + 7) // 8 != sizes[j] or "1" in bits[i:]:
            raise ValueError("stream %d has bytes left over or nonzero padding" % j)
        pos += sizes[j]
    return bytes(out), pos


def decode(p, length):
    w = p[0]
    if w not in (2, 4) or struct.unpack_from("<I", p, 1)[0] != length // w:
        raise ValueError("bad width or element count")
    n, pos, planes = length // w, 5, []
    for _ in range(w):
        mode = p[pos]
        pos += 1
        if mode == 0:
            planes.append(p[pos:pos + n])
            pos += n
        elif mode == 1:
            planes.append(bytes([p[pos]]) * n)
            pos += 1
        elif mode == 2:
            plane, pos = huf_plane(p, pos, n)
            planes.append(plane)
        else:
            raise ValueError("unknown plane mode %d" % mode)
    if len(p) - pos != length - n * w:
        raise ValueError("tail length")
    raw = bytearray(length)
    for k in range(w):
        raw[k:n * w:w] = planes[k]
    raw[n * w:] = p[pos:]
    return bytes(raw)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        payload = f.read()
    with open(sys.argv[3], "wb") as f:
        f.write(decode(payload, int(sys.argv[2])))

#!/usr/bin/env bash
# regions: dir
# A file's digest of either kind (issue 24, include/ckptsync/format.h "File
# digests"): with [snapshot] file_digest = tree (the default) a snapshot is
# a version 5 manifest whose files carry "tree:" digests, each the chunk
# tree of the file's chunk lines (recomputed here with Python's hashlib);
# restore gives the source's bytes (cmp); a manifest whose tree digest was
# edited (its end digest made right again), a chunk object replaced by
# another valid object, and a damaged one are refused, naming the file;
# verify checks tree digests; show labels the kind.  With file_digest =
# sha256 the manifest is version 3 as before, its digests sha256sum's, and
# restore still checks them (an edited one is refused).  The index's
# records of one kind never give the other kind's digest.  Encrypted: the
# tree over HMAC ids restores too.  A bad value is a configuration error
# naming file and line.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M

src="$T/watch/run1/ckpt"
make_file "$src/big.bin" 6
make_file "$src/sub/mid.bin" 1
cp "$src/big.bin" "$src/sub/copy-of-big.bin"
printf 'small\n' > "$src/small.txt"
: > "$src/empty"

D="$T/regions"
manifest_of() { ls "$D/a/snapshots/$1/" | sort | tail -1; }

# check_trees MANIFEST: every "f" line's tree digest is the tree of its
# chunk lines, computed independently of the C code.
check_trees() {
  python3 - "$1" <<'PY'
import hashlib, struct, sys
DOMAIN = b"ckptsync chunk-tree 1\n"
lines = open(sys.argv[1]).read().split("\n")
assert lines[0] == "ckptsync-manifest 5", lines[0]
nodes = int(next(l for l in lines if l.startswith("nodes ")).split()[1])
files, cur = [], None
for l in lines:
    t = l.split(" ")
    if t[0] == "f":
        cur = [t[-1], t[4 + (nodes > 0)], []]
        files.append(cur)
    elif t[0] == "c":
        cur[2].append((bytes.fromhex(t[1]), int(t[2])))
assert files, "no files"
for path, digest, chunks in files:
    assert digest.startswith("tree:"), (path, digest)
    h = hashlib.sha256(DOMAIN)
    for cid, n in chunks:
        h.update(cid + struct.pack("<Q", n))
    assert digest[5:] == h.hexdigest(), (path, digest, h.hexdigest())
print("%d tree digests match" % len(files))
PY
}

# edit_manifest RUN ID OLD-REGEX NEW: rewrites the manifest in every
# region (the original kept as .orig), its end line recomputed.
edit_manifest() {
  python3 - "$D" "$1" "$2" "$3" "$4" <<'PY'
import hashlib, os, re, sys
regions, run, id_, old, new = sys.argv[1:]
for r in "abc":
    p = os.path.join(regions, r, "snapshots", run, id_)
    src = open(p, "rb").read()
    open(p + ".orig", "wb").write(src)
    body = src[: src.rindex(b"end ")]
    body, n = re.subn(old.encode(), new.encode(), body)
    assert n == 1, (old, n)
    open(p, "wb").write(body + b"end " + hashlib.sha256(body).hexdigest().encode() + b"\n")
PY
}
unedit_manifest() { for r in a b c; do mv "$D/$r/snapshots/$1/$2.orig" "$D/$r/snapshots/$1/$2"; done; }

# same_files A B: every regular file of A is byte-equal (cmp) in B.
same_files() {
  (cd "$1" && find . -type f) | while read -r f; do
    cmp "$1/$f" "$2/$f" || die "restored $f differs from its source"
  done
  same_tree "$1" "$2"
}

step "tree (the default): version 5, every file's digest the tree of its chunks"
cks snapshot "$src" --run run1 --step 1 -q
id1=$(manifest_of run1)
check_trees "$D/a/snapshots/run1/$id1"
grep -q '^nodes 0$' "$D/a/snapshots/run1/$id1" || die "version 5 without its nodes 0 line"
cks show --run run1 "$id1" --json > "$T/show.json"
[ "$(json "$T/show.json" '[f["digest_kind"] for f in d["files"] if f["type"] == "f"] == ["tree"] * 5')" = True ] \
  || die "show --json: not every file labelled tree"
[ "$(json "$T/show.json" 'any("sha256" in f for f in d["files"])')" = False ] \
  || die "show --json: a tree digest printed as sha256"
cks show --run run1 "$id1" > "$T/show.txt"
grep -q '^f 0644 .* tree:[0-9a-f]\{11\} ckpt/small.txt$' "$T/show.txt" || { cat "$T/show.txt"; die "show: no tree: label"; }

step "restore: the files are the source's bytes; verify passes"
cks restore --run run1 --latest --to "$T/r1" -q
same_files "$src" "$T/r1/ckpt"
cks verify --run run1 > "$T/verify.txt" || { cat "$T/verify.txt"; die "verify failed"; }

step "an edited tree digest (end line made right) is refused by restore and verify, naming the file"
edit_manifest run1 "$id1" ' tree:[0-9a-f]{64} ([0-9]+) ckpt/big.bin\n' " tree:$(printf '%064d' 7) \\1 ckpt/big.bin\n"
mkdir -p "$T/target"
expect_fail 1 cks restore --run run1 --snapshot "$id1" --to "$T/target/x"
grep -q '"ckpt/big.bin": chunk-tree digest does not match' "$T/err" || { cat "$T/err"; die "edited tree digest: file not named"; }
[ -z "$(ls -A "$T/target/x" 2> /dev/null)" ] || die "a refused restore left something in its target"
expect_fail 1 cks verify --run run1
grep -q '"ckpt/big.bin": chunk-tree digest does not match its chunk list' "$T/err" \
  || { cat "$T/err" "$T/out"; die "verify: edited tree digest not named"; }
unedit_manifest run1 "$id1"

step "a chunk replaced by another valid object, and a damaged chunk, fail the restore naming the file"
mapfile -t mids < <(awk '$1 == "f" { p = $NF } $1 == "c" && p == "ckpt/sub/mid.bin" { print $2 }' "$D/a/snapshots/run1/$id1")
[ "${#mids[@]}" -ge 2 ] || die "sub/mid.bin has ${#mids[@]} chunks, want 2 or more"
obj() { echo "$D/$1/chunks/${2:0:2}/$2"; }
for r in a b c; do cp "$(obj $r "${mids[0]}")" "$T/saved.$r"; cp "$(obj $r "${mids[1]}")" "$(obj $r "${mids[0]}")"; done
expect_fail 1 cks restore --run run1 --latest --to "$T/target/y"
grep -q 'ckpt/sub/mid.bin' "$T/err" || { cat "$T/err"; die "swapped chunk: file not named"; }
for r in a b c; do
  python3 -c 'import sys; p = sys.argv[1]; d = bytearray(open(sys.argv[2], "rb").read()); d[-1] ^= 0x55; open(p, "wb").write(d)' \
    "$(obj $r "${mids[0]}")" "$T/saved.$r"
done
expect_fail 1 cks restore --run run1 --latest --to "$T/target/y"
grep -q 'ckpt/sub/mid.bin' "$T/err" || { cat "$T/err"; die "damaged chunk: file not named"; }
[ -z "$(ls -A "$T/target/y" 2> /dev/null)" ] || die "a failed restore left something in its target"
for r in a b c; do cp "$T/saved.$r" "$(obj $r "${mids[0]}")"; done
cks restore --run run1 --latest --to "$T/r1b" -q
same_files "$src" "$T/r1b/ckpt"

step "file_digest = sha256: version 3, sha256sum's digests (not the index's tree records)"
sed -i "1i [snapshot]\nfile_digest = sha256" "$CONF"
cks snapshot "$src" --run run2 --step 1 -q
id2=$(manifest_of run2)
[ "$(head -1 "$D/a/snapshots/run2/$id2")" = 'ckptsync-manifest 3' ] || die "sha256: not version 3"
if grep -q 'tree:' "$D/a/snapshots/run2/$id2"; then die "sha256: a tree digest written"; fi
for f in big.bin sub/mid.bin small.txt empty; do
  want=$(sha256sum < "$src/$f" | cut -c1-64)
  grep -q "^f 0644 [0-9]* [0-9]* $want [0-9]* ckpt/$f\$" "$D/a/snapshots/run2/$id2" \
    || die "sha256: $f's digest is not sha256sum's $want"
done
cks show --run run2 "$id2" --json > "$T/show2.json"
[ "$(json "$T/show2.json" '[f["sha256"] == f["digest"] and f["digest_kind"] == "sha256" for f in d["files"] if f["type"] == "f"] == [True] * 5')" = True ] \
  || die "show --json: sha256 files not labelled"
cks restore --run run2 --latest --to "$T/r2" -q
same_files "$src" "$T/r2/ckpt"
cks verify --run run2 > /dev/null

step "an edited SHA-256 digest (version 3) is refused by restore, naming the file"
edit_manifest run2 "$id2" " [0-9a-f]{64} ([0-9]+) ckpt/small.txt\n" " $(printf '%064d' 7) \\1 ckpt/small.txt\n"
expect_fail 1 cks restore --run run2 --latest --to "$T/target/z"
grep -q '"ckpt/small.txt": whole-file digest does not match' "$T/err" || { cat "$T/err"; die "edited sha256 digest: file not named"; }
unedit_manifest run2 "$id2"

step "back to tree: the index's SHA-256 records give tree digests"
sed -i 's/^file_digest = sha256$/file_digest = tree/' "$CONF"
cks snapshot "$src" --run run3 --step 1 --json > "$T/s3.json"
[ "$(json "$T/s3.json" 'd["files_unchanged"]')" -ge 4 ] || die "unchanged files not taken from the index"
check_trees "$D/a/snapshots/run3/$(manifest_of run3)"

step "a bad file_digest is a configuration error naming file and line"
sed -i 's/^file_digest = tree$/file_digest = md5/' "$CONF"
expect_fail 1 cks ls
grep -q "$CONF:2: \[snapshot\] file_digest: 'md5' is not a file digest kind (tree or sha256)" "$T/err" \
  || { cat "$T/err"; die "bad file_digest not reported with file and line"; }
sed -i 's/^file_digest = md5$/file_digest = tree/' "$CONF"

step "encrypted repository: the tree over HMAC ids restores and verifies"
head -c 32 /dev/urandom > "$T/enc.key"; chmod 600 "$T/enc.key"
sed -e "s|$T/regions/|$T/enc/|" -e "s|^state = .*|state = $T/enc-state|" "$CONF" > "$T/enc.conf"
sed -i "/^\[daemon\]/i [repository]\nencryption = aes-256-gcm\nkey_file = $T/enc.key" "$T/enc.conf"
mkdir -p "$T/enc/a" "$T/enc/b" "$T/enc/c"
"$CKPTSYNC" --config "$T/enc.conf" snapshot "$src" --run run1 --step 1 -q
"$CKPTSYNC" --config "$T/enc.conf" show --run run1 latest --json > "$T/enc-show.json"
[ "$(json "$T/enc-show.json" 'sorted({f.get("digest_kind") for f in d["files"] if f["type"] == "f"})')" = "['tree']" ] \
  || die "encrypted: not tree digests"
"$CKPTSYNC" --config "$T/enc.conf" restore --run run1 --latest --to "$T/r-enc" -q
same_files "$src" "$T/r-enc/ckpt"
"$CKPTSYNC" --config "$T/enc.conf" verify --run run1 > /dev/null

echo "file-digest: ok"

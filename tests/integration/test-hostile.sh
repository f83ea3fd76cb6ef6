#!/usr/bin/env bash
# Bad input gets a clear error and leaves nothing behind: hostile
# manifests (../, absolute paths, escaping symlinks), corrupt and missing
# chunks (restored from another region and reported), missing, read-only
# and full region directories, a broken configuration.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M

ck="$T/data/checkpoint-1"
make_file "$ck/weights.bin" 6
make_file "$ck/sub/opt.bin" 2
printf 'x' > "$ck/small.txt"
cks snapshot "$ck" --run good --step 1 --json > "$T/s.json"
id=$(json "$T/s.json" 'd["id"]')

# forge OLD NEW RUN NEWID: copy manifest `good/$id`, replace text OLD by NEW
# in its body (OLD "re:PATTERN": a Python regular expression), fix its
# trailing digest, and publish it as RUN/NEWID with RUN's latest ref
# pointing at it, in every region.
forge() {
  python3 - "$T/regions" "$id" "$1" "$2" "$3" "$4" <<'PY'
import hashlib, os, re, sys
regions, id_, old, new, run, newid = sys.argv[1:]
src = open(os.path.join(regions, "a", "snapshots", "good", id_), "rb").read()
body = src[: src.rindex(b"end ")]
if old.startswith("re:"):
    body = re.sub(old[3:].encode(), new.encode(), body)
else:
    body = body.replace(old.encode(), new.encode())
body = body.replace(("id " + id_).encode(), ("id " + newid).encode())
body = body.replace(b"run good\n", ("run " + run + "\n").encode())
data = body + b"end " + hashlib.sha256(body).hexdigest().encode() + b"\n"
for r in "abc":
    d = os.path.join(regions, r, "snapshots", run); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, newid), "wb").write(data)
    d = os.path.join(regions, r, "refs", run); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "latest"), "w").write(newid + " 1\n")
PY
}

# The restore must fail, name the problem, and leave the target as it was.
refused() {
  local run=$1
  mkdir -p "$T/target"
  expect_fail 1 cks restore --run "$run" --latest --to "$T/target"
  grep -qi "$2" "$T/err" || { cat "$T/err"; die "$run: message lacks '$2'"; }
  [ -z "$(ls -A "$T/target")" ] || { ls -laR "$T/target"; die "$run: target not left empty"; }
  [ ! -e "$T/escaped" ] && [ ! -e /tmp/cks-escaped ] || die "$run: wrote outside the target"
}

step "a manifest naming ../x is refused"
forge "sub/opt.bin" "../../escaped" evil1 20990101T000000.000000Z-00000001
refused evil1 "rejected"
step "a manifest naming an absolute path is refused"
forge "checkpoint-1/small.txt" "/tmp/cks-escaped" evil2 20990101T000000.000000Z-00000002
refused evil2 "rejected"
step "a root of .. is refused"
forge "root checkpoint-1" "root .." evil3 20990101T000000.000000Z-00000003
refused evil3 "rejected\|another snapshot"
step "a symlink leaving the snapshot is refused"
forge 're:\nf 0644 (\S+) 1 ' "
l 0777 - ../../../../etc/passwd checkpoint-1/evil-link
f 0644 \\1 1 " evil4 20990101T000000.000000Z-00000004
refused evil4 "symlink target leaves the snapshot"
step "a file digest that does not match its chunks is refused"
# a chunk-tree digest ("tree:", the default) or a SHA-256 one, made wrong
forge 're: (tree:)?[0-9a-f]{64} 1 checkpoint-1/small.txt' " \\g<1>$(printf '%064d' 0) 1 checkpoint-1/small.txt" \
  evil5 20990101T000000.000000Z-00000005
refused evil5 '"checkpoint-1/small.txt": chunk-tree digest does not match'

step "a manifest with a wrong checksum is refused"
python3 - "$T/regions" "$id" <<'PY'
import os, sys
for r in "abc":
    p = os.path.join(sys.argv[1], r, "snapshots", "good", sys.argv[2])
    d = bytearray(open(p, "rb").read()); d[40] ^= 1; open(p + ".bad", "wb").write(d)
PY
for r in a b c; do
  cp "$T/regions/$r/snapshots/good/$id" "$T/$r.saved"
  mv "$T/regions/$r/snapshots/good/$id.bad" "$T/regions/$r/snapshots/good/$id"
done
mkdir -p "$T/target"
expect_fail 1 cks restore --run good --snapshot "$id" --to "$T/target"
grep -qi "checksum\|digest\|rejected" "$T/err" || { cat "$T/err"; die "bad checksum not reported"; }
for r in a b c; do cp "$T/$r.saved" "$T/regions/$r/snapshots/good/$id"; done

step "a corrupt chunk in one region is detected and fetched from another"
# Chunk k of a restore is asked first from region k mod 3: damage chunk 0
# in region a and remove chunk 1 from region b, so both failures are met.
mapfile -t ids < <(grep '^c ' "$T/regions/a/snapshots/good/$id" | awk '{print $2}')
chunk="$T/regions/a/chunks/${ids[0]:0:2}/${ids[0]}"
python3 - "$chunk" <<'PY'
import sys
p = sys.argv[1]; d = bytearray(open(p, "rb").read()); d[-1] ^= 0x55; open(p, "wb").write(d)
PY
missing="$T/regions/b/chunks/${ids[1]:0:2}/${ids[1]}"
rm "$missing"
cks restore --run good --snapshot "$id" --to "$T/ok" --json > "$T/r.json" 2> "$T/r.err"
same_tree "$ck" "$T/ok/checkpoint-1"
[ "$(json "$T/r.json" 'd["failovers"]')" -ge 1 ] || die "failover not counted"
grep -q "region 'a'.*${ids[0]}.*digest" "$T/r.err" || { cat "$T/r.err"; die "corrupt chunk in region a not reported"; }
grep -q "region 'b'.*${ids[1]}.*missing" "$T/r.err" || { cat "$T/r.err"; die "missing chunk in region b not reported"; }
[ "$(json "$T/r.json" 'd["failovers"]')" -eq 2 ] || die "expected 2 failovers"

step "verify names the corrupt and the missing chunk, and fails"
expect_fail 1 cks verify --run good
grep -q "region a .*INCOMPLETE.*1 corrupt" "$T/out" || { cat "$T/out"; die "corruption not in verify"; }
grep -q "region b .*INCOMPLETE.*1 missing" "$T/out" || { cat "$T/out"; die "missing chunk not in verify"; }
grep -q "region c .*complete" "$T/out" || { cat "$T/out"; die "region c should be complete"; }

step "verify --quick (headers only) finds the missing chunk"
expect_fail 1 cks verify --run good --quick
grep -q "region b .*INCOMPLETE.*1 missing" "$T/out" || { cat "$T/out"; die "quick verify missed the missing chunk"; }
grep -q "region c .*complete" "$T/out" || { cat "$T/out"; die "quick verify: region c"; }

step "a missing region directory is named, the others go on"
mv "$T/regions/c" "$T/regions/c.away"
make_file "$T/data/checkpoint-2/w.bin" 1
expect_fail 1 cks snapshot "$T/data/checkpoint-2" --run good --step 2
grep -q "region 'c'.*$T/regions/c" "$T/err" || { cat "$T/err"; die "missing region not named"; }
grep -q "durable" "$T/out" || die "snapshot should be durable in 2 regions"
mv "$T/regions/c.away" "$T/regions/c"

step "a read-only region directory is named"
mkdir -p "$T/ro"
if try_mount -t tmpfs -o ro,size=1m tmpfs "$T/ro"; then
  sed -i "s|path = $T/regions/c|path = $T/ro|" "$CONF"
  expect_fail 1 cks snapshot "$T/data/checkpoint-2" --run good --step 2
  grep -q "region 'c'.*$T/ro.*[Rr]ead-only" "$T/err" || { cat "$T/err"; die "read-only region not named"; }
  sed -i "s|path = $T/ro|path = $T/regions/c|" "$CONF"
else
  echo "(read-only mount not permitted here: that case is skipped)"
fi

step "a full region is named and nothing half-written is left"
mkdir -p "$T/full"
if try_mount -t tmpfs -o size=512k tmpfs "$T/full"; then
  sed -i "s|path = $T/regions/b|path = $T/full|" "$CONF"
  make_file "$T/data/checkpoint-3/big.bin" 4
  expect_fail 1 cks snapshot "$T/data/checkpoint-3" --run good --step 3
  grep -q "region 'b'.*No space left" "$T/err" || { cat "$T/err"; die "full region not named"; }
  [ -z "$(find "$T/full" -name '.*tmp*')" ] || die "temp files left in the full region"
  [ ! -e "$T/full/snapshots/good" ] || die "manifest published in a region missing chunks"
  sed -i "s|path = $T/full|path = $T/regions/b|" "$CONF"
else
  echo "(tmpfs mount not permitted here: that case is skipped)"
fi

step "a broken configuration names file, line and key"
printf '[chunker]\navg = 3X\n' > "$T/bad.conf"
expect_fail 1 "$CKPTSYNC" --config "$T/bad.conf" ls
grep -q "bad.conf:2.*avg" "$T/err" || { cat "$T/err"; die "config error lacks file:line key"; }
expect_fail 1 "$CKPTSYNC" --config "$T/nonexistent.conf" ls
grep -q "nonexistent.conf" "$T/err" || die "missing config not named"

step "usage errors exit 2"
expect_fail 2 cks restore --run good --to "$T/x"
expect_fail 2 cks snapshot "$ck"
expect_fail 2 cks frobnicate
cks snapshot --help | grep usage > /dev/null || die "--help"
"$CKPTSYNC" --config "$CONF" --help > "$T/help" || die "ckptsync --config F --help exits $?, not 0"
grep -q "^usage: ckptsync" "$T/help" || die "ckptsync --config F --help does not print the usage on stdout"
step "--help sorts the commands right: migrate-in and repo need no daemon (#13 item 12)"
"$CKPTSYNC" --help > "$T/help"
awk '/^Commands \(run in-process/ { s = "local" } /^Commands that talk to a running/ { s = "daemon" }
     /^Options:/ { s = "" } s != "" && /^  [a-z]/ { print s, $1 }' "$T/help" > "$T/help.sections"
for c in snapshot restore verify ls migrate-in repo; do
  grep -qx "local $c" "$T/help.sections" || { cat "$T/help" >&2; die "--help: $c is not among the commands that need no daemon"; }
done
for c in commit status flush retry migrate-out; do
  grep -qx "daemon $c" "$T/help.sections" || { cat "$T/help" >&2; die "--help: $c is not among the daemon commands"; }
done
[ "$(grep -c ' migrate-in$' "$T/help.sections")" = 1 ] || die "--help lists migrate-in twice"
step "special files: a clear error, exit 1, no crash (/dev/null, a FIFO, a socket)"
mkfifo "$T/fifo"
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$T/sock"
for f in /dev/null "$T/fifo" "$T/sock"; do
  expect_fail 1 cks snapshot "$f" --run special
  grep -q "not a regular file, directory or symlink: nothing to snapshot" "$T/err" ||
    { cat "$T/err" >&2; die "snapshot $f: no clear error"; }
done
step "a chunker with min = avg = max cuts every file (chunks of exactly max bytes)"
head -c 100000 /dev/urandom > "$T/f100k"
cks chunks "$T/f100k" --min 64 --avg 64 --max 64 > "$T/cuts" || die "chunks with min = avg = max"
[ "$(wc -l < "$T/cuts")" = 1563 ] || die "min = avg = max: $(wc -l < "$T/cuts") chunks, expected 1563"
awk '$2 != 64 { n++ } END { exit n > 1 }' "$T/cuts" || die "min = avg = max: chunks not of 64 bytes"
echo "hostile: ok"

#!/usr/bin/env bash
# What a user is shown about snapshots (#26 items 7 and 10, and the old
# notes on verify and chunks): a snapshot named by a unique prefix of its
# id or by `latest` wherever an id is taken (show, restore --snapshot,
# verify --snapshot), an unknown or ambiguous one said plainly; `ls` and
# `ls --remote` count the same files (regular files, not directories or
# links); verify says a manifest with no commit record that not every
# region holds is uncommitted (a writer in progress or one that died), not
# damage; `chunks` says when the repository's chunks are keyed.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M

ck="$T/data/checkpoint-1"
make_file "$ck/model.bin" 1
mkdir -p "$ck/sub/deeper"
printf '{"step": 1}\n' > "$ck/sub/deeper/state.json"
ln -s model.bin "$ck/model.link"
cks snapshot "$ck" --run r1 --step 1 --json > "$T/s1.json"
id1=$(json "$T/s1.json" 'd["id"]')
make_file "$T/data/checkpoint-2/model.bin" 1
cks snapshot "$T/data/checkpoint-2" --run r1 --step 2 --json > "$T/s2.json"
id2=$(json "$T/s2.json" 'd["id"]')
# a step-less snapshot of another run
printf 'log\n' > "$T/data/train.log"
cks snapshot "$T/data/train.log" --run r2 -q

step "a unique prefix names one snapshot: show, restore --snapshot, verify --snapshot"
p1=${id1%?}   # all but the last character: only id1 starts with it
cks show "$p1" --json > "$T/show.json" || die "show by a unique prefix"
[ "$(json "$T/show.json" 'd["id"]')" = "$id1" ] || die "show $p1 is not $id1"
cks restore --snapshot "$p1" --to "$T/r1" -q || die "restore --snapshot PREFIX (no --run)"
cmp "$ck/model.bin" "$T/r1/checkpoint-1/model.bin" || die "restored by prefix: content differs"
cks verify --snapshot "$p1" > "$T/v.txt" || { cat "$T/v.txt"; die "verify --snapshot PREFIX (no --run)"; }
grep -q "1/1 manifests" "$T/v.txt" || { cat "$T/v.txt"; die "verify --snapshot PREFIX checked not one snapshot"; }

step "latest: the run's resume point"
cks show latest --run r1 --json > "$T/show.json" || die "show latest --run r1"
[ "$(json "$T/show.json" 'd["id"]')" = "$id2" ] || die "show latest is not the newest snapshot"
cks restore --run r1 --snapshot latest --to "$T/r2" -q || die "restore --snapshot latest"
cmp "$T/data/checkpoint-2/model.bin" "$T/r2/checkpoint-2/model.bin" || die "latest: content differs"
expect_fail 1 cks show latest
grep -q "latest: the repository holds several runs (\"r1\", \"r2\")" "$T/err" || { cat "$T/err"; die "show latest with two runs"; }

step "an unknown id: no such snapshot; an ambiguous prefix: names the matches"
expect_fail 1 cks show 19990101T000000
grep -q "error: no such snapshot: 19990101T000000$" "$T/err" || { cat "$T/err"; die "unknown id: not 'no such snapshot'"; }
expect_fail 1 cks restore --snapshot 19990101T000000 --to "$T/r3"
grep -q "no such snapshot: 19990101T000000" "$T/err" || { cat "$T/err"; die "restore of an unknown id"; }
expect_fail 1 cks verify --run r1 --snapshot 19990101T000000
grep -q "no such snapshot: 19990101T000000 in run 'r1'" "$T/err" || { cat "$T/err"; die "verify of an unknown id"; }
expect_fail 1 cks show "${id1:0:4}"
grep -q "error: ambiguous: ${id1:0:4} matches .*$id1" "$T/err" && grep -q "$id2" "$T/err" \
  || { cat "$T/err"; die "ambiguous prefix: matches not named"; }
grep -qi "corrupt\|damaged\|invalid" "$T/err" && { cat "$T/err"; die "an unknown or ambiguous id sounds like damage"; }

step "ls and ls --remote count the same files: regular files, not directories or links"
cks ls --run r1 --json > "$T/ls.json"
cks ls --remote --run r1 --json > "$T/lsr.json"
[ "$(json "$T/ls.json" '[x["files"] for x in d]')" = "[2, 1]" ] || { cat "$T/ls.json"; die "ls counts directories or links"; }
[ "$(json "$T/lsr.json" '[x["files"] for x in d]')" = "[2, 1]" ] || { cat "$T/lsr.json"; die "ls --remote counts"; }
cks ls --run r2 > "$T/ls.txt"
grep -q "^r2 .* - " "$T/ls.txt" || { cat "$T/ls.txt"; die "ls: a step-less snapshot without '-'"; }

step "verify: a manifest no region has a commit record of, not in every region, is uncommitted, not damage"
# a writer that published a manifest in region a and died before its commit
# record (and before regions b and c), and one whose PUT was cut short
python3 - "$T/regions" "$id1" <<'PY'
import hashlib, os, sys
regions, id_ = sys.argv[1:]
src = open(os.path.join(regions, "a", "snapshots", "r1", id_), "rb").read()
body = src[: src.rindex(b"end ")]
for newid, torn in (("29991231T235959.000001Z-0000dead", False), ("29991231T235959.000002Z-0000beef", True)):
    b = body.replace(("id " + id_).encode(), ("id " + newid).encode())
    data = b + b"end " + hashlib.sha256(b).hexdigest().encode() + b"\n"
    open(os.path.join(regions, "a", "snapshots", "r1", newid), "wb").write(data[: len(data) // 2] if torn else data)
PY
cks verify --run r1 > "$T/v.txt" 2> "$T/v.err" || { cat "$T/v.txt" "$T/v.err"; die "verify counts an uncommitted manifest as damage"; }
grep -q "^2 snapshot(s) uncommitted (a writer in progress or one that died)" "$T/v.txt" || { cat "$T/v.txt"; die "verify does not say uncommitted"; }
[ "$(grep -c ' complete: 2/2 manifests (0 damaged)' "$T/v.txt")" = 3 ] || { cat "$T/v.txt"; die "verify: regions not complete"; }
grep -q "snapshot 29991231T235959.000001Z-0000dead of run 'r1' is uncommitted" "$T/v.err" || { cat "$T/v.err"; die "the uncommitted snapshot is not named"; }
cks verify --run r1 --json > "$T/v.json"
[ "$(json "$T/v.json" 'd["uncommitted"]')" = 2 ] || die "verify --json: uncommitted"
# committed in some region: a region that lacks its manifest is incomplete
rm "$T/regions/b/snapshots/r1/$id1"
expect_fail 1 cks verify --run r1
grep -q "region b .*INCOMPLETE" "$T/out" || { cat "$T/out"; die "a committed snapshot's missing manifest is not damage"; }

step "chunks says an encrypted repository's chunks are keyed; repo says whether it is encrypted"
cks repo > "$T/repo.txt"
[ "$(grep -c ' not encrypted$' "$T/repo.txt")" = 3 ] || { cat "$T/repo.txt"; die "repo does not say not encrypted"; }
[ "$(cks repo --json | json /dev/stdin '[x["encrypted"] for x in d]')" = "[False, False, False]" ] || die "repo --json encrypted"
cks chunks "$ck/model.bin" > /dev/null 2> "$T/err"
grep -q "encrypted" "$T/err" && die "chunks warns on an unencrypted repository"
head -c 32 /dev/urandom > "$T/k"; chmod 600 "$T/k"
sed -i "/^\[daemon\]/i [repository]\nencryption = aes-256-gcm\nkey_file = $T/k" "$CONF"
sed -i "s|^state = .*|state = $T/state-enc|; s|$T/regions/|$T/enc-regions/|" "$CONF"
mkdir -p "$T/enc-regions/a" "$T/enc-regions/b" "$T/enc-regions/c"
cks snapshot "$T/data/checkpoint-2" --run r1 -q
cks repo > "$T/repo.txt"
[ "$(grep -c ' encrypted$' "$T/repo.txt")" = 3 ] && ! grep -q "not encrypted" "$T/repo.txt" || { cat "$T/repo.txt"; die "repo does not say encrypted"; }
cks chunks "$ck/model.bin" > /dev/null 2> "$T/err"
grep -q "warning: the repository is encrypted: its chunker and chunk names are keyed" "$T/err" || { cat "$T/err"; die "chunks: no word of the keyed chunker"; }
echo "snapshot ids: ok"

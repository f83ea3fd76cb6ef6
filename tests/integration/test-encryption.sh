#!/usr/bin/env bash
# regions: dir s3
# Client-side encryption end to end ([repository] encryption = aes-256-gcm).
# What a store holds: every object but `repo` (and its creation candidates
# repo.d/) and the key slots is a sealed envelope, and no object's bytes
# contain a known file's contents, a file name or the run name, and no
# object key names a run (keyed run names; the names sealed under runs/).  What a reader needs: the key (a wrong or
# missing one exits 1 and says so).  What a flipped byte does: verify names
# the object, restore takes it from another region, verify --repair mends
# it.  Keys: `key add` a passphrase, restore with it alone, `key remove`
# the key file's slot (refused without --force for the slot in use, and
# refused for the last one).  Dedup across instances sharing the key, the
# daemon's path, and an unencrypted repository that refuses to become
# encrypted by configuration.  Key slots (dir): verify names a region that
# lost them and --repair copies them back; a new region and `repo adopt`
# get them with the repo object, so that region alone unlocks; verify
# --quick reads sealed headers.  The s3 variant lists and damages objects
# with the AWS CLI (interop).
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
KEY="$T/repo.key"
head -c 32 /dev/urandom > "$KEY"; chmod 600 "$KEY"
sed -i "/^\[daemon\]/i [repository]\nencryption = aes-256-gcm\nkey_file = $KEY" "$CONF"
sed -i "/^\[daemon\]/a create_settle = 2" "$CONF" # one creator: no rival candidates to wait for

if [ "${CKS_REGIONS:-dir}" = s3 ]; then
  obj_keys() { aws_s3 "$1" s3 ls "s3://$S3_BUCKET/$S3_PREFIX/" --recursive | awk '{print $4}' | sed "s|^$S3_PREFIX/||" | sort; }
  obj_get() { aws_s3 "$1" s3 cp "s3://$S3_BUCKET/$S3_PREFIX/$2" "$3" > /dev/null; }
  obj_dump() { aws_s3 "$1" s3 cp --recursive "s3://$S3_BUCKET/$S3_PREFIX/" "$2" > /dev/null; }
  obj_put() { aws_s3 "$1" s3 cp "$3" "s3://$S3_BUCKET/$S3_PREFIX/$2" > /dev/null; }
else
  obj_keys() { (cd "$T/regions/$1" && find . -type f ! -name '.*' | sed 's|^\./||' | sort); }
  obj_get() { cp "$T/regions/$1/$2" "$3"; }
  obj_dump() { mkdir -p "$2"; (cd "$T/regions/$1" && find . -type f ! -name '.*' -exec cp --parents {} "$2" \;); }
  obj_put() { cp "$3" "$T/regions/$1/$2"; }
fi
# flip REGION KEY: one byte in the middle of the object, through the store's API.
flip() {
  obj_get "$1" "$2" "$T/obj"
  python3 - "$T/obj" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 0x20
open(sys.argv[1], 'wb').write(b)
PY
  obj_put "$1" "$2" "$T/obj"
}

RUN=zebrafinch-run
ck="$T/watch/$RUN/checkpoint-7"
step "a checkpoint with known contents, file names and run name"
mkdir -p "$ck/sub"
head -c $((3 << 20)) /dev/urandom > "$ck/weights-aardvark.bin"
python3 -c 'import sys; sys.stdout.write("the quick brown fox says KNOWNPLAINTEXT-%d\n" * 20000 % tuple(range(20000)))' > "$ck/sub/notes-okapi.txt"
printf '{"global_step": 7}\n' > "$ck/trainer_state.json"
cp -a "$ck" "$T/orig"

step "mode 0644 on the key file is refused, naming it"
chmod 644 "$KEY"
expect_fail 1 cks snapshot "$ck" --run "$RUN" --step 7
grep "$KEY" "$T/err" | grep "0644" > /dev/null || { cat "$T/err"; die "no clear error for a 0644 key file"; }
expect_fail 1 "$CKPTSYNCD" --config "$CONF" --check
grep "$KEY" "$T/err" | grep "0644" > /dev/null || { cat "$T/err"; die "ckptsyncd --check accepted a 0644 key file"; }
chmod 600 "$KEY"

step "snapshot into an encrypted repository"
cks snapshot "$ck" --run "$RUN" --step 7 --json > "$T/s1.json"
[ "$(json "$T/s1.json" 'd["committed"]')" = 3 ] || die "not committed in 3 regions"

step "the stores hold sealed envelopes only: no contents, file names or run name in any object"
mkdir -p "$T/dump"
for r in a b c; do
  obj_keys "$r" > "$T/keys.$r"
  grep '^chunks/' "$T/keys.$r" > /dev/null || die "region $r: no chunk objects listed"
  grep '^keys/[0-9a-f]\{16\}$' "$T/keys.$r" > /dev/null || die "region $r: no key slot listed"
  obj_dump "$r" "$T/dump/$r" # every object, through the store's API (one AWS CLI call)
  while read -r k; do
    f="$T/dump/$r/$k"; [ -f "$f" ] || die "region $r: \"$k\" listed but not fetched"
    case $k in
      repo|repo.d/*|keys/*) ;;
      *) [ "$(head -c 4 "$f")" = CKE1 ] || die "region $r: \"$k\" is not a sealed envelope" ;;
    esac
  done < "$T/keys.$r"
done
python3 - "$T/dump" "$ck/weights-aardvark.bin" "$RUN" <<'PY' || die "plaintext found in a store"
import os, sys
root, weights, run = sys.argv[1:]
w = open(weights, 'rb').read()
needles = [w[i:i + 32] for i in range(0, len(w) - 32, len(w) // 64)]
needles += [b"KNOWNPLAINTEXT", b"quick brown fox", b"weights-aardvark", b"notes-okapi",
            b"trainer_state", b"global_step", run.encode(), b"checkpoint-7"]
bad = 0
for d, _, files in os.walk(root):
    for f in files:
        data = open(os.path.join(d, f), 'rb').read()
        for n in needles:
            if n in data:
                print("found %r in %s" % (n[:20], os.path.join(d, f)))
                bad += 1
print("searched %d needles in the objects of 3 regions: %d found" % (len(needles), bad))
sys.exit(1 if bad else 0)
PY
grep -h "encryption aes-256-gcm [0-9a-f]\{64\}" "$T"/dump/*/repo > /dev/null || die "the repo object does not say it is encrypted"
step "object keys name no run: keyed run names, their names sealed under runs/"
cat "$T"/keys.? | grep -e "$RUN" -e checkpoint-7 -e aardvark > /dev/null && die "a run or file name in an object key: $(cat "$T"/keys.? | grep -e "$RUN" | sed -n 1p)"
grep '^snapshots/k-[0-9a-f]\{32\}/' "$T/keys.a" > /dev/null || die "no keyed run name under snapshots/"
grep '^runs/k-[0-9a-f]\{32\}$' "$T/keys.a" > /dev/null || die "no sealed run name under runs/"
cks ls --remote --json > "$T/ls.json"
[ "$(json "$T/ls.json" 'sorted(set(x["run"] for x in d))')" = "['$RUN']" ] || die "ls --remote does not name the run: $(cat "$T/ls.json")"

step "restore from a fresh state with the key: bit for bit"
rm -rf "$STATE"
cks restore --run "$RUN" --latest --to "$T/r1" > /dev/null
diff -r "$T/orig" "$T/r1/checkpoint-7" > /dev/null || die "restored tree differs"

step "a wrong key and no key are refused, exit 1, saying why"
WRONG="$T/wrong.key"; head -c 32 /dev/urandom > "$WRONG"; chmod 600 "$WRONG"
sed "s|^key_file = .*|key_file = $WRONG|" "$CONF" > "$T/wrong.conf"
rm -rf "$STATE"
expect_fail 1 "$CKPTSYNC" --config "$T/wrong.conf" restore --run "$RUN" --latest --to "$T/rw"
grep "none of its 1 key slot" "$T/err" | grep "$WRONG" > /dev/null || { cat "$T/err"; die "wrong key: unclear error"; }
[ ! -e "$T/rw/checkpoint-7" ] || die "a wrong key restored something"
grep -v '^encryption\|^key_file\|^\[repository\]' "$CONF" > "$T/nokey.conf"
expect_fail 1 env -u CKPTSYNC_PASSPHRASE "$CKPTSYNC" --config "$T/nokey.conf" ls --remote
grep "is encrypted" "$T/err" | grep "key_file" > /dev/null || { cat "$T/err"; die "no key: unclear error"; }

step "ckptsyncd --check --connect: each region's key slot opens with the key, not with a wrong one (#26 item 9)"
"$CKPTSYNCD" --config "$CONF" --check --connect > "$T/out" || { cat "$T/out"; die "--check --connect with the key"; }
[ "$(grep -c "^region [abc]: keys: 1 key slot(s); \"keys/[0-9a-f]*\" opens with key file \"$KEY\"$" "$T/out")" = 3 ] \
  || { cat "$T/out"; die "--check --connect: the key slots are not said to open"; }
grep -q "^region a: repository: repository [0-9a-f]*, chunker .*, encrypted$" "$T/out" || { cat "$T/out"; die "--check --connect: not encrypted?"; }
expect_fail 1 "$CKPTSYNCD" --config "$T/wrong.conf" --check --connect --json
[ "$(json "$T/out" '[r["keys"]["state"] for r in d["preflight"]]')" = "['failed', 'failed', 'failed']" ] || { cat "$T/out"; die "--check --connect: a wrong key opens?"; }
json "$T/out" 'd["preflight"][0]["keys"]["text"]' | grep "none opens with key file \"$WRONG\"" > /dev/null || { cat "$T/out"; die "--check --connect: the wrong key is not named"; }

step "a flipped byte in a chunk, a manifest and a commit record of region a"
chunk=$(grep '^chunks/' "$T/keys.a" | sed -n 1p)
man=$(grep '^snapshots/' "$T/keys.a" | sed -n 1p)
rec=$(grep '^commits/' "$T/keys.a" | sed -n 1p)
flip a "$chunk"; flip a "$man"; flip a "$rec"
expect_fail 1 cks verify
grep "$(basename "$chunk")" "$T/out" "$T/err" > /dev/null || { cat "$T/out" "$T/err"; die "verify did not name the damaged chunk"; }
rm -rf "$STATE" "$T/r2"
cks restore --run "$RUN" --latest --to "$T/r2" > /dev/null 2> "$T/r2.err" || { cat "$T/r2.err"; die "restore failed with one region damaged"; }
diff -r "$T/orig" "$T/r2/checkpoint-7" > /dev/null || die "restore with region a damaged differs"
cks verify --repair > /dev/null 2>&1 || true
cks verify > "$T/v.out" 2>&1 || { cat "$T/v.out"; die "verify --repair did not mend region a"; }

step "the same data from a second instance (fresh state, same key) stores nothing new"
sed "s|^state = .*|state = $T/state2|" "$CONF" > "$T/second.conf"
"$CKPTSYNC" --config "$T/second.conf" snapshot "$ck" --run "$RUN" --step 7 --json > "$T/s2.json"
[ "$(json "$T/s2.json" 'd["new_bytes"]')" = 0 ] || die "keyed ids do not dedup across instances"

step "key add a passphrase; restore with the passphrase alone"
NEWPW="correct horse battery staple $$"
NEWPW="$NEWPW" cks key add --passphrase-env NEWPW > "$T/add.out"
pw_id=$(awk '{print $4}' "$T/add.out")
cks key list --json > "$T/keys.json"
[ "$(json "$T/keys.json" 'len(d)')" = 2 ] || die "key list shows $(json "$T/keys.json" 'len(d)') slots, not 2"
kf_id=$(json "$T/keys.json" '[k["id"] for k in d if k["unlocked_this"]][0]')
grep -v '^key_file' "$CONF" > "$T/pw.conf"
rm -rf "$STATE" "$T/r3"
CKPTSYNC_PASSPHRASE="$NEWPW" "$CKPTSYNC" --config "$T/pw.conf" restore --run "$RUN" --latest --to "$T/r3" > /dev/null
diff -r "$T/orig" "$T/r3/checkpoint-7" > /dev/null || die "restore with the passphrase differs"
CKPTSYNC_PASSPHRASE="wrong $NEWPW" expect_fail 1 "$CKPTSYNC" --config "$T/pw.conf" ls --remote

step "key remove: not the slot in use without --force, never the last one"
expect_fail 1 cks key remove "$kf_id"
grep "force" "$T/err" > /dev/null || { cat "$T/err"; die "removing the slot in use was not refused"; }
cks key remove "$kf_id" --force > /dev/null
expect_fail 1 cks ls --remote
CKPTSYNC_PASSPHRASE="$NEWPW" expect_fail 1 "$CKPTSYNC" --config "$T/pw.conf" key remove "$pw_id" --force
grep "last key slot" "$T/err" > /dev/null || { cat "$T/err"; die "removing the last slot was not refused"; }
CKPTSYNC_PASSPHRASE="$NEWPW" "$CKPTSYNC" --config "$T/pw.conf" key add --key-file "$KEY" > /dev/null
cks ls --remote > /dev/null || die "the key file does not open the repository after key add"

step "the daemon writes sealed objects too"
ck2="$T/watch/$RUN/checkpoint-8"
cp -a "$ck" "$ck2"; head -c $((1 << 20)) /dev/urandom > "$ck2/weights-aardvark.bin"; cp -a "$ck2" "$T/orig2"
set_settle 1
start_daemon
cks commit "$ck2" --step 8 --wait replicated --timeout 60 > /dev/null || { tail -20 "$T/daemon.log"; die "commit failed"; }
[ "$(cks status --json | json /dev/stdin 'd["encrypted"]')" = True ] || die "status --json does not say encrypted"
cks status | grep "^ckptsyncd .*, repository encrypted" > /dev/null || die "status does not say encrypted"
stop_daemon
rm -rf "$STATE" "$T/r4"
cks restore --run "$RUN" --latest --to "$T/r4" > /dev/null
diff -r "$T/orig2" "$T/r4/checkpoint-8" > /dev/null || die "daemon snapshot restored differently"
obj_keys b | grep '^snapshots/' | while read -r k; do
  obj_get b "$k" "$T/m"; [ "$(head -c 4 "$T/m")" = CKE1 ] || die "daemon manifest \"$k\" is not sealed"
done

if [ "${CKS_REGIONS:-dir}" = dir ]; then
  # regions_conf FILE NAME...: $CONF with exactly these dir regions under $T/regions
  regions_conf() {
    local f=$1; shift
    sed -e '/^\[region\./,$d' -e "s/^quorum = .*/quorum = $(($# < 2 ? 1 : 2))/" "$CONF" > "$f"
    for n in "$@"; do
      mkdir -p "$T/regions/$n"; printf '[region.%s]\nkind = dir\npath = %s\n' "$n" "$T/regions/$n" >> "$f"
    done
  }
  step "verify --quick reads chunk headers of sealed objects; a missing chunk is named"
  cks verify --quick > /dev/null || die "verify --quick of an intact encrypted repository failed"
  gone=$(grep '^chunks/' "$T/keys.b" | sed -n 2p)
  mv "$T/regions/b/$gone" "$T/gone"
  expect_fail 1 cks verify --quick
  grep "$(basename "$gone")" "$T/err" > /dev/null || { cat "$T/out" "$T/err"; die "verify --quick did not name the missing chunk"; }
  mv "$T/gone" "$T/regions/b/$gone"

  step "a region that lost its key slots is reported, and verify --repair copies them back"
  rm -f "$T/regions/c/keys/"*
  expect_fail 1 cks verify --json
  [ "$(json "$T/out" '[g["key_slots_missing"] for g in d["regions"]]')" = "[0, 0, 2]" ] || { cat "$T/out"; die "the lost key slots are not reported"; }
  cks verify --repair > /dev/null 2>&1 || true
  cks verify > /dev/null || die "verify --repair did not copy the key slots back"
  [ "$(ls "$T/regions/c/keys" | wc -l)" = 2 ] || die "region c holds $(ls "$T/regions/c/keys" | wc -l) key slots, not 2"

  step "a new region gets the key slots with the repo object, and alone unlocks the repository"
  regions_conf "$T/abcd.conf" a b c d
  "$CKPTSYNC" --config "$T/abcd.conf" snapshot "$ck" --run "$RUN" --step 9 > /dev/null
  [ -f "$T/regions/d/repo" ] && [ "$(ls "$T/regions/d/keys" | wc -l)" = 2 ] || die "region d did not get the repo object and both key slots"
  regions_conf "$T/d.conf" d
  rm -rf "$STATE" "$T/r5"
  "$CKPTSYNC" --config "$T/d.conf" restore --run "$RUN" --latest --to "$T/r5" > /dev/null || die "region d alone does not unlock and restore"
  diff -r "$T/orig" "$T/r5/checkpoint-7" > /dev/null || die "restore from region d alone differs"

  step "repo adopt copies the adopted repository's key slots into the regions it rewrites"
  regions_conf "$T/e.conf" e
  rm -rf "$STATE"
  "$CKPTSYNC" --config "$T/e.conf" snapshot "$ck" --run other > /dev/null # another repository, its own master key
  regions_conf "$T/ae.conf" a e
  rm -rf "$STATE"
  expect_fail 1 "$CKPTSYNC" --config "$T/ae.conf" ls --remote
  grep "split" "$T/err" > /dev/null || { cat "$T/err"; die "the split was not reported"; }
  "$CKPTSYNC" --config "$T/ae.conf" repo adopt a > /dev/null 2>&1 || die "repo adopt a failed"
  for id in $(ls "$T/regions/a/keys"); do [ -f "$T/regions/e/keys/$id" ] || die "repo adopt did not copy key slot $id"; done
  rm -rf "$STATE"
  "$CKPTSYNC" --config "$T/e.conf" ls --remote > /dev/null || die "region e does not unlock the adopted repository alone"
fi

step "an unencrypted repository is not turned into an encrypted one by configuration"
P="$T/plain"; mkdir -p "$P/a" "$P/b" "$P/c"
grep -v '^encryption\|^key_file\|^\[repository\]' "$CONF" | sed -e "s|$T/regions/|$P/|" -e "s|^state = .*|state = $P/state|" > "$T/plain.conf"
if [ "${CKS_REGIONS:-dir}" = dir ]; then
  "$CKPTSYNC" --config "$T/plain.conf" snapshot "$ck" --run plain > /dev/null
  sed "/^\[daemon\]/i [repository]\nencryption = aes-256-gcm\nkey_file = $KEY" "$T/plain.conf" > "$T/plain-enc.conf"
  expect_fail 1 "$CKPTSYNC" --config "$T/plain-enc.conf" snapshot "$ck" --run plain
  grep "is not encrypted" "$T/err" > /dev/null || { cat "$T/err"; die "no clear error for an unencrypted repository"; }
  [ "$(head -c 4 "$(find "$P/a/chunks" -type f | sed -n 1p)")" = CKC1 ] || die "the plain repository is not plain"
fi
echo "ok"

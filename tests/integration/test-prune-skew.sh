#!/usr/bin/env bash
# A pruner whose clock is wrong refuses to prune (README, "Why a prune
# never deletes a chunk someone still needs": clocks must agree within
# [prune] clock_skew, and prune checks it against each region's clock).
#
# Writer W (a CLI snapshot of step 3, whose content is forgotten step 1's:
# it reuses prune's candidate chunks) is held by gdb at its first
# catalog_publish, after its intents and its W1 checks, with no mark yet:
# exactly the writer a mark's intents record must protect until its
# intent expires.  Then:
#  1. prune under `faketime +10m` (ahead by more than intent_ttl +
#     clock_skew, within the 15 min S3 signatures allow) and `+2h` (AWS
#     and s3rver refuse its signatures; the Date of the refusal still
#     measures it) and `-10m`: non-zero exit, an error naming the region,
#     both times and clock_skew; no chunk, record or lease written or
#     deleted.  (Before the check, the +10m prune expired W's intent and
#     swept: W published step 3 without those chunks, acknowledged, and
#     its restore failed in every region.)
#  2. the same pruner with a correct clock: a mark that waits for W;
#  3. W goes on and is acknowledged; prune sweeps and keeps W's chunks;
#     steps 2 and 3 restore bit for bit; verify passes.
# regions: dir s3
. "$(dirname "$0")/lib.sh"
command -v faketime > /dev/null 2>&1 || skip "faketime is not installed (deploy/deps.sh --test)"
command -v gdb > /dev/null 2>&1 || skip "gdb is not installed (deploy/deps.sh --test)"
gdb -q -batch -ex run --args /bin/true > "$T/gdb-probe.log" 2>&1 &&
  grep 'exited normally' "$T/gdb-probe.log" > /dev/null ||
  skip "gdb cannot run a process here: $(tail -1 "$T/gdb-probe.log")"
write_config 16K 64K 256K
cat >> "$CONF" <<'EOF'
[prune]
grace = 0
intent_ttl = 1m
clock_skew = 5s
EOF

# The CLI with its clock shifted.  libfaketime comes by LD_PRELOAD, ahead
# of a sanitizer build's libasan: ASan must not insist on being first.
# NO_FAKE_STAT: a host with a wrong clock sees file times as the file
# system set them.
skewed() { # OFFSET args...
  local off=$1; shift
  ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}verify_asan_link_order=0" NO_FAKE_STAT=1 \
    faketime -f "$off" "$CKPTSYNC" --config "$CONF" "$@"
}
# The shift must reach the binary, or the test proves nothing.
t_real=$(date +%s)
t_fake=$(ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}verify_asan_link_order=0" \
  faketime -f +10m date +%s)
[ $((t_fake - t_real)) -ge 590 ] || skip "faketime does not shift the clock here"

ckpt() { # DIR STEP [FROM]: a checkpoint (FROM's model: the same chunks)
  mkdir -p "$1"
  if [ -n "${3:-}" ]; then cp "$3/model.bin" "$1/model.bin"
  else head -c $((512 << 10)) /dev/urandom > "$1/model.bin"; fi
  printf '{"step": %s}\n' "$2" > "$1/meta.json"
}
snap() { # DIR STEP -> id
  cks snapshot "$1" --run r --step "$2" --json > "$T/snap.json" 2> "$T/snap.err" ||
    { cat "$T/snap.err" >&2; die "snapshot of $1"; }
  json "$T/snap.json" 'd["id"]'
}
chunks() { # chunk count per region, "a:N b:N c:N"
  cks stats --json > "$T/stats.json" 2> "$T/stats.err" || { cat "$T/stats.err" >&2; die "stats"; }
  json "$T/stats.json" '" ".join("%s:%d" % (g["name"], g["chunks"]) for g in d["regions"])'
}
objects() { # every key of every region but chunks and the probes, sorted
  case ${CKS_REGIONS:-dir} in
    dir) (cd "$T/regions" && find . -type f ! -path '*/chunks/*' ! -name '.*' | sort) ;;
    *) for n in a b c; do
         aws_s3 "$n" s3 ls "s3://$S3_BUCKET/$S3_PREFIX/" --recursive | awk -v n="$n" '{print n, $4}' |
           grep -v -e ' [^ ]*/chunks/' -e ' [^ ]*/probe/' || true
       done | sort ;;
  esac
}
restore_same() { # ID SRC
  rm -rf "$T/rs" "$T/rs-state"
  cks --state "$T/rs-state" restore --run r --snapshot "$1" --to "$T/rs" -q 2> "$T/rs.err" ||
    { cat "$T/rs.err" >&2; die "snapshot $1 cannot be restored"; }
  same_tree "$2" "$T/rs/$(basename "$2")"
}

step "steps 1 and 2 acknowledged, step 1 forgotten: its chunks are prune's candidates"
ckpt "$T/watch/checkpoint-1" 1
ckpt "$T/watch/checkpoint-2" 2
ID1=$(snap "$T/watch/checkpoint-1" 1)
ID2=$(snap "$T/watch/checkpoint-2" 2)
cks forget --run r --keep-last 1 -q
ckpt "$T/watch/checkpoint-3" 3 "$T/watch/checkpoint-1"

step "writer W (step 3, step 1's chunks) held by gdb just before it publishes"
mkfifo "$T/go"
cat > "$T/gdb.cmd" <<EOF
set pagination off
set confirm off
set print thread-events off
handle SIGPIPE nostop noprint pass
break catalog_publish
commands 1
  silent
  shell touch "$T/held"
  shell cat "$T/go" > /dev/null
  delete 1
  continue
end
run --config "$CONF" --state "$T/w-state" snapshot "$T/watch/checkpoint-3" --run r --step 3 \
  --json > "$T/w.out" 2> "$T/w.err"
EOF
GDB_PID=
stop_gdb() { # the writer first: a tracee outlives a killed gdb
  [ -n "$GDB_PID" ] || return 0
  pkill -9 -P "$GDB_PID" 2>/dev/null || true
  kill -9 "$GDB_PID" 2>/dev/null || true
}
CKS_CLEANUP_HOOKS+=(stop_gdb)
# (LeakSanitizer cannot work under ptrace: leaks are the other tests' job)
ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0" \
  gdb -q -batch -x "$T/gdb.cmd" "$CKPTSYNC" > "$T/gdb.log" 2>&1 < /dev/null &
GDB_PID=$!
held_or_gone() { [ -e "$T/held" ] || ! kill -0 "$GDB_PID" 2>/dev/null; }
wait_for 60 held_or_gone || true
[ -e "$T/held" ] || { cat "$T/gdb.log" "$T/w.err" >&2; die "writer W was not held at catalog_publish"; }
BEFORE=$(chunks)
OBJS_BEFORE=$(objects)
# (the records a refused prune must not touch: W's intents, manifests, ...)
[ "$(echo "$OBJS_BEFORE" | grep -c '/intents/')" = 3 ] || die "W's intents not listed: $OBJS_BEFORE"

step "pruners with a wrong clock refuse, and touch nothing"
for off in +10m +2h -10m; do
  set +e
  skewed "$off" prune --grace 0 --json > "$T/p.json" 2> "$T/p.err"
  rc=$?
  set -e
  [ "$rc" -ne 0 ] || { cat "$T/p.json" >&2; die "prune with the clock at $off succeeded (rc 0)"; }
  grep -q "region 'a': this host's clock reads .* and the store's .*: this host is [0-9]* s" \
    "$T/p.err" || { cat "$T/p.err" >&2; die "prune at $off: no error naming region and clocks"; }
  grep -q 'more than \[prune\] clock_skew (5 s)' "$T/p.err" || { cat "$T/p.err" >&2; die "no clock_skew"; }
  case $off in -*) want=behind ;; *) want=ahead ;; esac
  case $off in *h) secs=$((${off//[^0-9]/} * 3600)) ;; *) secs=$((${off//[^0-9]/} * 60)) ;; esac
  got=$(sed -n "s/^.*region 'a': [^;]*this host is \([0-9]*\) s $want.*$/\1/p" "$T/p.err")
  [ -n "$got" ] && [ $((got - secs)) -le 10 ] && [ $((secs - got)) -le 10 ] ||
    { cat "$T/p.err" >&2; die "prune at $off: not $secs s $want"; }
  [ "$(json "$T/p.json" 'd["ok"]')" = False ] || die "prune --json at $off says ok"
  [ "$(json "$T/p.json" 'sum(g["deleted"] for g in d["regions"])')" = 0 ] || die "deleted at $off"
  [ "$(chunks)" = "$BEFORE" ] || die "prune at $off deleted chunks: $BEFORE -> $(chunks)"
done
[ "$(objects)" = "$OBJS_BEFORE" ] || { diff <(echo "$OBJS_BEFORE") <(objects) >&2 || true
  die "the refused prunes wrote or deleted records"; }
echo "refused: $(head -c 400 "$T/p.err")"
restore_same "$ID2" "$T/watch/checkpoint-2"

step "the same pruner with a correct clock: marks, and waits for W"
cks prune --grace 0 --json > "$T/p.json" 2> "$T/p.err" || { cat "$T/p.err" >&2; die "prune"; }
json "$T/p.json" '[(g["name"], g["state"], g["waiting"]) for g in d["regions"]]'
[ "$(json "$T/p.json" 'sorted(set(g["state"] for g in d["regions"]))')" = "['waiting']" ] ||
  die "prune did not wait for W's intent"
[ "$(chunks)" = "$BEFORE" ] || die "prune deleted chunks while W holds its intent"

step "W publishes (acknowledged); prune sweeps, keeping W's chunks"
timeout 30 bash -c 'echo go > "$1"' _ "$T/go" || die "gdb no longer holds writer W"
wait "$GDB_PID" || { cat "$T/gdb.log" "$T/w.err" >&2; die "gdb or writer W failed"; }
grep -q 'exited normally' "$T/gdb.log" || { cat "$T/gdb.log" "$T/w.err" >&2; die "writer W failed"; }
GDB_PID=
ID3=$(json "$T/w.out" 'd["id"]')
[ "$(json "$T/w.out" 'd["replicated"]')" = True ] || { cat "$T/w.out" >&2; die "W not acknowledged"; }
cks prune --grace 0 --json > "$T/p.json" 2> "$T/p.err" || { cat "$T/p.err" >&2; die "prune"; }
json "$T/p.json" '[(g["name"], g["state"], g["deleted"], g["kept"]) for g in d["regions"]]'
[ "$(json "$T/p.json" 'sorted(set(g["state"] for g in d["regions"]))')" = "['swept']" ] ||
  die "prune did not sweep once W was done"
restore_same "$ID3" "$T/watch/checkpoint-3"
restore_same "$ID2" "$T/watch/checkpoint-2"
cks verify -q 2> "$T/v.err" || { cat "$T/v.err" >&2; die "verify"; }
echo "ok ($((SECONDS)) s)"

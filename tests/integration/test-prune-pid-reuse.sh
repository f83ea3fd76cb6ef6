#!/usr/bin/env bash
# A killed writer's intent whose pid was given out again (a restarted
# container's process gets the same small pid; a busy host wraps pid_max).
# Pid namespaces make the reuse certain: in each, the first processes are
# pids 1, 2, ...
#   1. in namespace 1, `ckptsync snapshot` (pid 2 there) writes its intents
#      and is held before it publishes (CKPTSYNC_TEST_STOP_BEFORE_PUBLISH);
#   2. a prune inside namespace 1 keeps them: pid 2 is the live writer;
#   3. a prune outside keeps them: pid 2 there runs, and has since boot,
#      so it may be the writer (prune cannot tell);
#   4. namespace 1 killed (the writer with it), clock_skew later: a prune
#      in namespace 2, where pid 2 is a process started after the intents
#      were written, removes them (intent_ttl is an hour: not by expiry).
#      On the code before, the intents stayed until they expired;
#   5. the repository verifies; checkpoint-1, written before, restores.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "pid namespaces need root"
unshare --pid --fork --mount-proc true 2> /dev/null || skip "unshare --pid does not work here"
write_config 16K 64K 256K
cat >> "$CONF" <<'EOF'
[prune]
grace = 0
intent_ttl = 1h
clock_skew = 1s
EOF
make_file "$T/src/checkpoint-1/model.bin" 1
cks snapshot "$T/src/checkpoint-1" --run r --step 1 -q
make_file "$T/src/checkpoint-2/model.bin" 1

intents() { (cd "$T/regions/$1" && find intents -type f ! -name '.*' 2> /dev/null | sort); }
# in_ns PID CMD...: run CMD in the pid namespace (and its /proc) of PID
in_ns() { local p=$1; shift; nsenter -t "$p" -p -m "$@"; }

step "namespace 1: the writer (pid 2 there) holds its intents before publishing"
CKPTSYNC_TEST_STOP_BEFORE_PUBLISH=1 unshare --pid --fork --mount-proc --kill-child \
  bash -c '"$0" --config "$1" snapshot "$2" --run r --step 2 -q; true' \
  "$CKPTSYNC" "$CONF" "$T/src/checkpoint-2" 2> "$T/w.err" &
NS1=$!
_ns1_kill() { kill -9 "$NS1" 2> /dev/null; }
CKS_CLEANUP_HOOKS+=(_ns1_kill)
writer=
for _ in $(seq 1 600); do
  writer=$(pgrep -f -n "snapshot $T/src/checkpoint-2" || true)
  [ -n "$writer" ] && proc_stopped "$writer" && break
  writer=; sleep 0.1
done
[ -n "$writer" ] || { cat "$T/w.err" >&2; die "the writer did not stop before publishing"; }
init=$(ps -o ppid= -p "$writer" | tr -d ' ')
in_ns "$init" cat /proc/2/cmdline | tr '\0' ' ' | grep "snapshot $T/src/checkpoint-2" > /dev/null ||
  die "the writer is not pid 2 in its namespace"
before=$(intents a)
[ "$(echo "$before" | grep -c .)" = 1 ] || die "region a should hold the writer's one intent: $before"
for r in b c; do [ -n "$(intents $r)" ] || die "region $r holds no intent of the writer"; done
echo "    intent: $before"

step "a prune in namespace 1 keeps them: pid 2 is the live writer"
in_ns "$init" "$CKPTSYNC" --config "$CONF" prune --grace 0 -q
[ "$(intents a)" = "$before" ] || die "a prune removed the live writer's intent"

step "a prune outside keeps them: pid 2 there has run since boot"
cks prune --grace 0 -q
[ "$(intents a)" = "$before" ] || die "a prune removed an intent whose pid runs a process older than it"

step "namespace 1 killed; later, in namespace 2, pid 2 is a new process: the intents go"
kill -9 "$NS1"; wait "$NS1" 2> /dev/null || true
for _ in $(seq 1 100); do kill -0 "$writer" 2> /dev/null || break; sleep 0.1; done
! kill -0 "$writer" 2> /dev/null || die "the writer outlived its namespace"
sleep 4 # > clock_skew + the records' 1 s resolution
unshare --pid --fork --mount-proc bash -c 'sleep 60 & "$0" --config "$1" prune --grace 0 --json > "$2"; rc=$?; kill %1; exit $rc' \
  "$CKPTSYNC" "$CONF" "$T/p.json" 2> "$T/p.err" || { cat "$T/p.err" >&2; die "the prune in namespace 2"; }
grep -q "removed intent .* of a process that is gone" "$T/p.err" ||
  { cat "$T/p.err" >&2; die "the prune did not say it removed the dead writer's intents"; }
for r in a b c; do
  [ -z "$(intents $r)" ] || die "region $r still holds the dead writer's intent: $(intents $r)"
done

step "the repository verifies; checkpoint-1 restores"
cks verify -q || die "verify"
cks restore --run r --latest --to "$T/out" -q
same_tree "$T/src/checkpoint-1" "$T/out/checkpoint-1"

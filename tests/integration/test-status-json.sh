#!/usr/bin/env bash
# `ckptsync status --json` field by field (README, "ckptsync status
# --json"), with one region broken and then back, and the daemon's event
# lines read back as key=value fields (logfmt) by a small parser: the
# snapshot, durable, replicated, region_failed, region_back and resumed
# events carry the run, snapshot, region and reason.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
start_daemon

step "a replicated snapshot: run, newest snapshot, per-region state, configuration"
make_file "$T/watch/r1/step_100.pt" 2
cks commit "$T/watch/r1/step_100.pt" --wait replicated --timeout 60 --json > "$T/c1.json"
id1=$(json "$T/c1.json" 'd["id"]')
cks status --json > "$T/st.json"
python3 - "$T/st.json" "$id1" "$CONF" "$T" <<'EOF2' || die "status --json (healthy)"
import json, sys
d = json.load(open(sys.argv[1])); id1, conf, T = sys.argv[2:5]
r = d["runs"][0]; l = r["latest"]
assert r["run"] == "r1" and r["snapshots"] == 1, r
assert l["id"] == id1 and l["step"] == 100 and l["bytes"] == 2 << 20 and l["files"] == 1, l
assert l["state"] == "replicated" and l["regions_committed"] == 3 and l["durable"], l
assert l["region_states"] == {"a": "committed", "b": "committed", "c": "committed"}, l
assert r["durable_latest"]["id"] == id1 and r["durable_latest"]["time"] == l["time"], r
assert d["degraded"] is False and d["degraded_reason"] is None and d["degraded_time"] is None
assert d["queue"] == {"snapshots": 0, "chunks": 0, "bytes": 0, "lag_seconds": 0}, d["queue"]
assert abs(d["time"] - d["started_time"] - d["uptime_seconds"]) < 2, d
for g in d["regions"]:
    assert g["state"] == "ok" and g["last_error"] is None and g["last_failure"] is None, g
    assert g["last_success_time"] and g["retry_in_seconds"] is None, g
c = d["config"]
assert c["file"] == conf and c["quorum"] == 2 and c["settle"] == 1, c
assert c["chunker"] == {"min": 65536, "avg": 262144, "max": 1048576, "normalization": 1}, c
assert c["metrics"] is None and c["metrics_textfile"] is None, c
assert [(x["name"], x["kind"], x["path"]) for x in c["regions"]] == \
    [(n, "dir", f"{T}/regions/{n}") for n in "abc"], c["regions"]
EOF2

step "region c broken: durable, not replicated; its error, time and queue show"
mv "$T/regions/c" "$T/regions/c.away"
echo "not a directory" > "$T/regions/c"
make_file "$T/watch/r1/step_200.pt" 2
t0=$(date +%s)
cks commit "$T/watch/r1/step_200.pt" --wait durable --timeout 60 --json > "$T/c2.json"
id2=$(json "$T/c2.json" 'd["id"]')
wait_for 30 sh -c "'$CKPTSYNC' --config '$CONF' status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d[\"regions\"][2][\"last_error\"] else 1)'" \
  || { cks status; die "region c shows no error"; }
rc=0; cks status --json > "$T/st2.json" || rc=$?
[ "$rc" = 4 ] || die "status --json exited $rc with region c failing, not 4"
cks status > "$T/st2.txt" || [ $? = 4 ]
python3 - "$T/st2.json" "$id1" "$id2" "$t0" <<'EOF2' || { cat "$T/st2.txt"; die "status --json (region c broken)"; }
import json, sys, time
d = json.load(open(sys.argv[1])); id1, id2, t0 = sys.argv[2], sys.argv[3], float(sys.argv[4])
l = d["runs"][0]["latest"]; g = d["regions"][2]
assert l["id"] == id2 and l["state"] == "durable" and l["regions_committed"] == 2, l
assert l["region_states"] == {"a": "committed", "b": "committed", "c": "pending"}, l
assert d["runs"][0]["durable_latest"]["id"] == id2, d["runs"][0]
assert g["name"] == "c" and g["state"] in ("backoff", "failed") and g["failures"] >= 1, g
assert g["last_error"] and t0 - 1 <= g["last_error_time"] <= time.time() + 1, g
assert g["last_failure"]["error"] == g["last_error"], g
assert g["pending_chunks"] > 0 and g["pending_bytes"] > 0 and g["lag_seconds"] > 0, g
assert d["queue"]["snapshots"] == 1 and d["queue"]["chunks"] == g["pending_chunks"], d["queue"]
assert d["queue"]["lag_seconds"] == g["lag_seconds"], d["queue"]
assert d["regions"][0]["pending_chunks"] == 0, d["regions"][0]
EOF2

step "restarted with work pending, then region c back: it catches up"
stop_daemon
start_daemon
rm "$T/regions/c"
mv "$T/regions/c.away" "$T/regions/c"
cks retry c
cks flush --wait replicated --deadline 60 || { cks status; die "region c did not catch up"; }
cks status --json > "$T/st3.json"
python3 - "$T/st3.json" <<'EOF2' || die "status --json (recovered)"
import json, sys
d = json.load(open(sys.argv[1])); g = d["regions"][2]
assert d["runs"][0]["latest"]["state"] == "replicated", d["runs"][0]
assert g["state"] == "ok" and g["last_error"] is None and g["last_error_time"] is None, g
assert g["last_failure"] is None or g["last_failure"]["error"], g
assert d["queue"]["chunks"] == 0, d["queue"]
EOF2

step "what the human status shows: '-' for a step-less snapshot, pending-work columns, encryption (#26 item 10)"
mkdir -p "$T/watch/r2"; printf 'a log line\n' > "$T/watch/r2/train.log"
cks commit "$T/watch/r2/train.log" --wait replicated --timeout 60 -q
cks status --json > "$T/st4.json"
[ "$(json "$T/st4.json" 'd["encrypted"]')" = False ] || die "status --json: encrypted"
[ "$(json "$T/st4.json" '[r["latest"]["step"] for r in d["runs"] if r["run"] == "r2"]')" = "[-1]" ] || die "a step-less snapshot"
cks status > "$T/st4.txt"
grep -q "^r2  *[0-9a-fT.Z-]*  *- replicated 3/3$" "$T/st4.txt" || { cat "$T/st4.txt"; die "status: a step-less snapshot is not shown as '-'"; }
grep -q "^REGION  *STATE  *PENDING CHUNKS  *PENDING BYTES  *LAG  *LAST ERROR$" "$T/st4.txt" || { cat "$T/st4.txt"; die "status: region columns not labelled as pending work"; }
grep -q "^ckptsyncd .*, repository not encrypted" "$T/st4.txt" || { cat "$T/st4.txt"; die "status does not say whether the repository is encrypted"; }
stop_daemon

step "the event lines parse as key=value fields"
python3 - "$T/daemon.log" "$id1" "$id2" <<'EOF2' || { cat "$T/daemon.log"; die "event lines"; }
import re, sys
log, id1, id2 = sys.argv[1:4]
pair = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)')
def fields(line):
    # after the "ckptsyncd: LEVEL: " prefix, the whole rest is logfmt
    body = line.split(": ", 2)[2]
    out, pos = {}, 0
    for m in pair.finditer(body):
        assert body[pos:m.start()].strip() == "", (line, body[pos:m.start()])
        v = m.group(2)
        if v.startswith('"'):
            v = re.sub(r'\\(.)', lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)), v[1:-1])
        out[m.group(1)] = v
        pos = m.end()
    assert body[pos:].strip() == "", (line, body[pos:])
    return out
events = [fields(l) for l in open(log) if " event=" in l]
by = {}
for e in events:
    assert "msg" in e and e["msg"], e
    by.setdefault(e["event"], []).append(e)
def one(kind, **want):
    got = [e for e in by.get(kind, []) if all(e.get(k) == v for k, v in want.items())]
    assert got, (kind, want, by.get(kind))
    return got[0]
s1 = one("snapshot", run="r1", snapshot=id1)
assert s1["unit"] == "r1/step_100.pt" and s1["bytes"] == str(2 << 20) and s1["step"] == "100", s1
assert "of \"r1/step_100.pt\"" in s1["msg"], s1
one("durable", run="r1", snapshot=id1, regions="2")
one("replicated", run="r1", snapshot=id1, regions="3")
one("durable", run="r1", snapshot=id2, regions="2")
one("replicated", run="r1", snapshot=id2, regions="3")
f = one("region_failed", region="c")
assert f["state"] in ("backoff", "failed") and f["reason"] and f["attempt"] == "1", f
one("region_back", region="c")
one("resumed", snapshots="1")
assert len(by["started"]) == 2 and len(by["stopping"]) == 2, by.keys()
print("    %d event lines: %s" % (len(events), ", ".join(sorted(by))))
EOF2
echo "status-json: ok"

#!/usr/bin/env bash
# `ckptsync chunks` reproduces the FastCDC (2020) conformance vectors: the
# cut points and chunk digests of tests/fixtures/fastcdc, bit for bit.
. "$(dirname "$0")/lib.sh"
img="$CKS_SOURCE_DIR/tests/fixtures/fastcdc/SekienAkashita.jpg"
check() {  # min avg max nc expected-lengths...
  local min=$1 avg=$2 max=$3 nc=$4; shift 4
  local got
  got=$("$CKPTSYNC" chunks "$img" --min "$min" --avg "$avg" --max "$max" --nc "$nc" | awk '{printf "%s ", $2}')
  [ "$got" = "$* " ] || die "chunks $min/$avg/$max/$nc: got '$got', want '$* '"
}
step "every row of the fixture table"
check 4096 16384 65535 1 21325 17140 28084 18217 24700
check 8192 32768 131072 1 66549 42917
check 16384 65536 262144 1 109466
check 4096 16384 65535 0 6634 59915 25597 5237 12083
check 8192 16384 32768 3 17350 19911 17426 17519 19940 17320
step "chunk digests of row 1"
"$CKPTSYNC" chunks "$img" --min 4096 --avg 16384 --max 65535 > "$T/c.txt"
cat > "$T/want.txt" <<'W'
0 21325 695429afe5937d6c75099f6e587267065a64e9dd83596a3d7386df3ef5a792c2
21325 17140 17119f7abc183375afdb652248aad0c7211618d263335cc4e4ffc9a31e719bcb
38465 28084 1545925739c6bfbd6609752a0e6ab61854f14d1fdb9773f08a7f52a13f9362d8
66549 18217 bbd5b0b284d4e3c2098e92e8e2897e738c669113d06472560188d99a288872a3
84766 24700 ede34e1a6cb287766e857eb0ed45b9f4b5ad83bb93c597be880c3a2ac91cddbe
W
diff "$T/want.txt" "$T/c.txt" || die "chunk digests differ"
step "usage errors exit 2"
expect_fail 2 "$CKPTSYNC" chunks
expect_fail 2 "$CKPTSYNC" chunks "$img" --avg 3X
expect_fail 2 "$CKPTSYNC" chunks "$img" --min 9000 --avg 4096 --max 65535
expect_fail 1 "$CKPTSYNC" chunks "$T/does-not-exist"
grep -q does-not-exist "$T/err" || die "error does not name the file"
echo "chunks-golden: ok"

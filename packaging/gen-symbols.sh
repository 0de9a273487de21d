#!/bin/sh
# Writes packaging/debian/libgpuipc1.symbols from a built libgpuipc and the
# version nodes of client/libgpuipc.sym (GPUIPC_1 today): every symbol the
# library exports under one of those nodes, plus the node itself, each with
# the package version that first had it.  Symbols already in the file keep
# their version; new ones get VERSION (the top Makefile's).
#
#   packaging/gen-symbols.sh LIB            rewrite the symbols file
#   packaging/gen-symbols.sh --check LIB    exit 1, with a diff, if the file
#                                           is not what LIB exports
#
# make symbols / make check-symbols (packaging/packaging.mk) run it; the
# package build checks the same file with DPKG_GENSYMBOLS_CHECK_LEVEL=4.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SYMS=$ROOT/packaging/debian/libgpuipc1.symbols
MAP=$ROOT/client/libgpuipc.sym
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
[ $# -eq 1 ] || { echo "usage: $0 [--check] LIB" >&2; exit 2; }
LIB=$1
VERSION=$(sed -n 's/^VERSION *:= *//p' "$ROOT/Makefile")
SONAME=$(objdump -p "$LIB" | awk '$1 == "SONAME" { print $2 }')
NODES=$(sed -n 's/^\([A-Za-z0-9_.]*\) *{.*/\1/p' "$MAP")
[ -n "$SONAME" ] && [ -n "$NODES" ] && [ -n "$VERSION" ] || {
        echo "$0: no SONAME in $LIB, no version node in $MAP or no VERSION" >&2; exit 1; }

TMP=$(mktemp "${TMPDIR:-/tmp}/gpuipc-symbols.XXXXXX")
trap 'rm -f "$TMP" "$TMP.new"' EXIT
# objdump -T: "... .text  0000...  GPUIPC_1  gpuipc_client_connect"; the node
# itself is an *ABS* entry named after itself.
objdump -T "$LIB" | awk -v nodes="$NODES" '
        BEGIN { n = split(nodes, a, /[ \n]+/); for (i = 1; i <= n; i++) want[a[i]] = 1 }
        $0 ~ /\*UND\*/ { next }
        NF >= 2 && ($(NF - 1) in want) { print $NF "@" $(NF - 1) }
' | LC_ALL=C sort -u >"$TMP"
[ -s "$TMP" ] || { echo "$0: $LIB exports nothing under $NODES" >&2; exit 1; }

{
        echo "$SONAME libgpuipc1 #MINVER#"
        echo "* Build-Depends-Package: libgpuipc-dev"
        while read -r sym; do
                v=$(awk -v s="$sym" '$1 == s { print $2; exit }' "$SYMS" 2>/dev/null || :)
                echo " $sym ${v:-$VERSION}"
        done <"$TMP"
} >"$TMP.new"

if [ $check = 1 ]; then
        if ! diff -u "$SYMS" "$TMP.new"; then
                echo "$0: $SYMS does not match $LIB: run make symbols" >&2
                exit 1
        fi
        echo "$SYMS: $(grep -c '^ ' "$SYMS") symbols, as $LIB exports them"
else
        cp "$TMP.new" "$SYMS"
        echo "wrote $SYMS ($(grep -c '^ ' "$SYMS") symbols)"
fi

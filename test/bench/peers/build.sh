#!/usr/bin/env bash
# Builds the bench's peers from local checkouts, outside this repository's
# modules (they are not all on the module proxy), into bin/:
#
#   test/bench/peers/build.sh idemlease /path/to/idemlease   # a checkout of its v1.1.0 tag
#   make bench BENCH_ARGS='-peer idemlease=bin/peer-idemlease'
set -euo pipefail
name=${1:?usage: build.sh NAME CHECKOUT}
src=$(cd "${2:?usage: build.sh NAME CHECKOUT}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
out=$(cd "$here/../../.." && pwd)/bin
case $name in
idemlease) mod=github.com/repenguin22/idemlease ;;
*) echo "build.sh: no peer named $name (have: idemlease)" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/$name/main.go" "$tmp/main.go"
sed -i '1,2d' "$tmp/main.go" # the ignore tag
cat >"$tmp/go.mod" <<MOD
module peer

go 1.22

require $mod v0.0.0
replace $mod => $src
MOD
mkdir -p "$out"
(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod go mod tidy >/dev/null && GOWORK=off go build -o "$out/peer-$name" .)
echo "built $out/peer-$name from $src ($(cd "$src" && git describe --tags --always 2>/dev/null || echo unknown))"

#!/usr/bin/env bash
# Builds idemproxy as it was at a commit, into bin/idemproxy-NAME, for the
# bench's -build flag (before and after in the same rounds):
#
#   test/bench/peers/build-commit.sh 8f72d44^1 pre44
#   make bench BENCH_ARGS='-build pre44=bin/idemproxy-pre44'
set -euo pipefail
commit=${1:?usage: build-commit.sh COMMIT NAME}
name=${2:?usage: build-commit.sh COMMIT NAME}
root=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/src" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add --detach "$tmp/src" "$commit" >/dev/null
mkdir -p "$root/bin"
# The commit's own go.work, when it has one; each module's go.mod otherwise.
(cd "$tmp/src/cmd/idemproxy" && go build -o "$root/bin/idemproxy-$name" .)
echo "built $root/bin/idemproxy-$name from $(git -C "$root" rev-parse --short "$commit")"

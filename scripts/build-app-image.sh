#!/usr/bin/env bash
# Builds the daily_report image from deploy/Dockerfile, offline: the binary is compiled on the
# host (or given), staged with every shared library it links into a root filesystem, and
# `docker build` copies that into an empty image (see the Dockerfile).
#
# Usage: scripts/build-app-image.sh [--binary PATH] [IMAGE]
#   --binary PATH   use this daily_report binary (default: cargo build --release of the
#                   example with its console)
#   IMAGE           defaults to distributed-lock/daily-report:local
# Prints the image's name and size as its last lines.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
source "$here/lib.sh"

binary=
image=distributed-lock/daily-report:local
while (($#)); do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) image=$1; shift ;;
  esac
done
docker_answers || die "$(docker_absent_reason)"
cd "$here/.."
if [[ -z $binary ]]; then
  cargo build --release --locked -p examples --example daily_report --features console >&2
  binary=target/release/examples/daily_report
fi
[[ -x $binary ]] || die "$binary is not an executable"

context=$(mktemp -d "${TMPDIR:-/tmp}/app-image.XXXXXX") || die "cannot create a temp dir"
trap 'rm -rf "$context"' EXIT
root=$context/rootfs
mkdir -p "$root"/{etc,tmp,usr/bin}
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
cp -L "$binary" "$root/usr/bin/daily_report"
# Debug information is of no use in the image.
if command -v strip >/dev/null 2>&1; then strip "$root/usr/bin/daily_report"; fi
# ldd lines: "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" or
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
ldd "$binary" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp deploy/Dockerfile "$context/Dockerfile"
# The classic builder: BuildKit would look for its frontend in a registry.
DOCKER_BUILDKIT=0 docker build -q -t "$image" "$context" >"$context/build.log" 2>&1 || {
  cat "$context/build.log" >&2
  die "docker build of $image failed"
}
# The image runs: --help needs neither Redis nor a writable file system.
docker run --rm --read-only "$image" --help >/dev/null || die "a container from $image does not run"
echo "$image"
docker image inspect --format '{{.Size}}' "$image" | awk '{ printf "size: %.1f MB\n", $1 / 1e6 }'

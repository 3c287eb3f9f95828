#!/usr/bin/env bash
# Builds a local Redis image from the host's Debian `redis-server` binary, for an
# engine that cannot pull `redis:7-alpine`.
#
# Usage: scripts/build-redis-image.sh [IMAGE]
#   IMAGE defaults to $REDIS_TEST_IMAGE, else distributed-lock/redis:local.
# Prints the image name as its last line. Rebuilds only when the image is missing
# or was built from a different redis-server binary.
#
# The image runs `redis-server` as nobody in /data; arguments given to
# `docker run IMAGE ...` are passed to redis-server, as with the official image
# (`docker run IMAGE --port 6379 --save ''`). Its default command listens on
# every interface without persistence.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"

image=${1:-${REDIS_TEST_IMAGE:-distributed-lock/redis:local}}

# Debian ships redis-server as a symlink to redis-check-rdb: the binary picks its
# mode from its own name, so it is copied under the name redis-server.
server=$(command -v redis-server) || die "redis-server is not on PATH (apt-get install redis-server)"
binary=$(readlink -f "$server")
docker_answers || die "$(docker_absent_reason)"

version=$("$server" --version | sed -n 's/.* v=\([0-9.]*\).*/\1/p')
# The binary and the recipe (this script and lib.sh): a change to either rebuilds.
recipe=$(cat "$binary" "$0" "$(dirname "$0")/lib.sh" | sha256sum | cut -c1-16)
fingerprint="redis-${version:-unknown}-$recipe"

build_rootfs_image "$image" "$fingerprint" "$binary:/usr/bin/redis-server" -- \
  'ENTRYPOINT ["/usr/bin/redis-server"]' \
  'CMD ["--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]' \
  'USER 65534:65534' \
  'WORKDIR /data' \
  'EXPOSE 6379' \
  "LABEL org.distributed-lock.redis-version=${version:-unknown}"

# Smoke test: the image starts and answers PING from inside (no port mapping).
cid=$(docker run -d "$image") || die "cannot start a container from $image"
trap 'docker rm -f "$cid" >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 100); do
  if docker logs "$cid" 2>&1 | grep -q 'Ready to accept connections'; then
    echo "$image"
    exit 0
  fi
  if [[ $(docker inspect --format '{{.State.Running}}' "$cid" 2>/dev/null) != true ]]; then
    break
  fi
  sleep 0.1
done
docker logs "$cid" >&2 2>&1 || true
die "a container from $image did not report 'Ready to accept connections' within 10 s"

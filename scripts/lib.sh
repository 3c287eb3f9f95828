# shellcheck shell=bash
# Shared helpers for the scripts in this directory. Source it; do not run it.
#
# The Docker engine on CI machines cannot pull images, so every image the tests
# and the demo use is built here from binaries already on the host: a minimal
# root filesystem (the binary, the shared libraries `ldd` lists, /etc/passwd, a
# writable /data and /tmp) loaded with `docker import`.

# Prints a message to stderr and exits 1.
die() {
  echo "error: $*" >&2
  exit 1
}

# Succeeds when a Docker engine answers within a few seconds.
docker_answers() {
  command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1
}

# Starts the Docker engine when its daemon is installed but not running and this shell may
# start it (root): a machine whose engine was not started yet then runs the container passes
# instead of failing them. Waits up to 30 s for it to answer; never fails by itself.
start_docker_if_absent() {
  docker_answers && return 0
  command -v dockerd >/dev/null 2>&1 && [[ $(id -u) == 0 ]] || return 0
  echo "no Docker engine answers; starting dockerd (log: /tmp/dockerd.log)"
  (dockerd >/tmp/dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do
    docker_answers && return 0
    sleep 0.5
  done
  return 0
}

# Why docker_answers failed, as one line for a SKIPPED message.
docker_absent_reason() {
  if ! command -v docker >/dev/null 2>&1; then
    echo "no docker CLI on PATH"
  else
    local err
    err=$(timeout 10 docker info 2>&1 >/dev/null | grep -v '^\s*$' | tail -n 1)
    echo "no Docker engine answers (docker info: ${err:-timed out})"
  fi
}

# The value of image label $2 on image $1, or nothing when the image is absent.
image_label() {
  docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true
}

# build_rootfs_image NAME FINGERPRINT BINARY:PATH_IN_IMAGE... -- DOCKER_IMPORT_CHANGES...
#
# Builds image NAME from host binaries: each BINARY is copied to PATH_IN_IMAGE
# (so a multi-call binary can be given the name it dispatches on) together with
# every shared library it links. FINGERPRINT is stored as a label; the build is
# skipped when an image of that name already carries the same fingerprint.
# Everything after `--` is passed to `docker import` as `--change` arguments.
build_rootfs_image() {
  local name=$1 fingerprint=$2
  shift 2
  local -a binaries=() changes=()
  while (($#)) && [[ $1 != -- ]]; do
    binaries+=("$1")
    shift
  done
  [[ ${1:-} == -- ]] && shift
  while (($#)); do
    changes+=(--change "$1")
    shift
  done

  if [[ $(image_label "$name" org.distributed-lock.fingerprint) == "$fingerprint" ]]; then
    echo "image $name is up to date ($fingerprint)"
    return 0
  fi

  local previous
  previous=$(docker image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)

  local root
  root=$(mktemp -d "${TMPDIR:-/tmp}/rootfs.XXXXXX") || die "cannot create a temp dir"
  # shellcheck disable=SC2064 # expand $root now
  trap "rm -rf '$root'" RETURN

  mkdir -p "$root"/{etc,data,tmp,usr/bin}
  chmod 1777 "$root/data" "$root/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"

  local spec src dst lib
  for spec in "${binaries[@]}"; do
    src=${spec%%:*}
    dst=${spec#*:}
    [[ -x $src ]] || die "$src is not an executable file"
    mkdir -p "$root$(dirname "$dst")"
    cp -L "$src" "$root$dst"
    # ldd lines: "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" or
    # "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
    while read -r lib; do
      [[ -n $lib ]] || continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done < <(ldd "$src" | awk '/=> \// { print $3; next } /^[[:space:]]*\// { print $1 }')
  done

  tar --numeric-owner --owner=0 --group=0 -C "$root" -c . |
    docker import --change "LABEL org.distributed-lock.fingerprint=$fingerprint" "${changes[@]}" - "$name" >/dev/null ||
    die "docker import of $name failed"
  # The image this one replaces is now untagged; drop it unless a container uses it.
  if [[ -n $previous ]]; then
    docker rmi "$previous" >/dev/null 2>&1 || true
  fi
  echo "built image $name ($fingerprint)"
}

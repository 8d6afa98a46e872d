#!/usr/bin/env bash
# Builds the Dockerfile as $IMAGE without a Docker engine or a registry
# (docs/DEPLOY.md, "Building and testing the image here"): debootstrap a
# bookworm root file system from the mirror apt already uses, import it with
# buildah as the debian:bookworm and :bookworm-slim the FROM lines name, then
# `buildah bud`. Everything (storage, run state, cached root file systems,
# logs) lives under $IMAGE_BUILD; nothing touches system-wide container
# storage. Prints how long each phase took and the image's size.
#
# Environment: IMAGE_BUILD (default build-image), IMAGE (cfdb-worker:test),
# MIRROR (default: the Debian URI in apt's sources), SUITE (bookworm).
# scripts/image-test.sh sources this file for the helpers up to main.
set -euo pipefail

IMAGE_BUILD=${IMAGE_BUILD:-build-image}
IMAGE=${IMAGE:-cfdb-worker:test}
SUITE=${SUITE:-bookworm}
BASE_FULL=docker.io/library/debian:$SUITE
BASE_SLIM=docker.io/library/debian:$SUITE-slim
# Marks a base image with the cache key (day, mirror, recipe) it was made with.
KEY_LABEL=org.cfdb.base-key

die() {
  echo "image: FAILED: $*" >&2
  exit 1
}

# Every call gets the same private storage: vfs needs no overlay support
# from the kernel, and no image or container lands in /var/lib/containers.
storage_flags() {
  local b
  b=$(realpath -m "$IMAGE_BUILD")
  echo "--root $b/storage --runroot $b/run --storage-driver vfs"
}
# shellcheck disable=SC2046  # the flags are paths without spaces
bah() { buildah $(storage_flags) "$@"; }
# runc: crun refuses this machine's cgroup layout; cgroupfs and the file
# event log: there is no systemd to talk to.
# shellcheck disable=SC2046
pod() {
  podman $(storage_flags) --tmpdir "$(realpath -m "$IMAGE_BUILD")/podman-tmp" \
    --runtime runc --cgroup-manager cgroupfs --events-backend file "$@"
}

# phase NAME COMMAND...: runs it and prints how long it took.
phase() {
  local name=$1 start
  shift
  start=$(date +%s.%N)
  "$@"
  echo "image: $name took $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
}

# The tools of this route, from Debian. catatonit is podman's --init (the
# tests run the image as ECS does, with an init); python3-yaml reads the
# CloudFormation template in the tests.
ensure_tools() {
  local pkgs=() t
  for t in debootstrap buildah podman runc openssl python3; do
    command -v "$t" >/dev/null || pkgs+=("$t")
  done
  # catatonit lives off PATH, where podman looks for it.
  [ -x /usr/libexec/podman/catatonit ] || pkgs+=(catatonit)
  python3 -c 'import yaml' 2>/dev/null || pkgs+=(python3-yaml)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  local log="$IMAGE_BUILD/logs/apt.log" sudo=""
  echo "image: installing ${pkgs[*]} (log: $log)"
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # No recommends: fuse-overlayfs, slirp4netns and dbus are for rootless
  # podman; this route is root, vfs and host networking.
  if ! { $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
      --no-install-recommends "${pkgs[@]}"; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "apt-get could not install ${pkgs[*]} (is the Debian mirror reachable?); see $log"
  fi
}

# podman and buildah as root need mount and PID namespaces (not user
# namespaces); say so plainly when the sandbox forbids them.
check_namespaces() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (buildah vfs storage and podman run as root)"
  unshare --mount --pid --fork true 2>/dev/null ||
    die "cannot create mount/PID namespaces here (unshare failed): containers cannot run on this machine"
}

# The URI apt uses for $SUITE (deb822 sources first, then sources.list),
# so debootstrap and apt inside the build fetch from the same mirror.
mirror_uri() {
  if [ -n "${MIRROR:-}" ]; then echo "$MIRROR"; return; fi
  local f uri=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] || continue
    uri=$(awk -v suite="$SUITE" '
      /^$/ { if (u != "" && s) exit; u = ""; s = 0; next }
      /^URIs:/ { u = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) s = 1 }
      END { if (u != "" && s) print u }' "$f")
    [ -n "$uri" ] && break
  done
  if [ -z "$uri" ] && [ -e /etc/apt/sources.list ]; then
    uri=$(awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || die "no Debian mirror for $SUITE in apt's sources; set MIRROR=URI"
  echo "$uri"
}

# debootstrap into a scratch directory renamed into place only when it
# succeeded, so an interrupted run never leaves a rootfs that looks cached.
make_rootfs() {
  local mirror=$1 dir=$2 tmp="$2.tmp" log="$IMAGE_BUILD/logs/debootstrap.log"
  rm -rf "$tmp"
  echo "image: debootstrap --variant=minbase $SUITE from $mirror (log: $log)"
  if ! debootstrap --variant=minbase "$SUITE" "$tmp" "$mirror" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -rf "$tmp"
    die "debootstrap failed (is $mirror reachable?); see $log"
  fi
  # apt in the build uses the host's Debian sources (security updates
  # included), not third-party ones whose keys the image lacks; without
  # them, debootstrap's one line for the mirror stays.
  if [ -e /etc/apt/sources.list.d/debian.sources ]; then
    rm -f "$tmp/etc/apt/sources.list"
    cp /etc/apt/sources.list.d/debian.sources "$tmp/etc/apt/sources.list.d/"
  fi
  # Host state debootstrap copied in; the runtime provides its own.
  rm -f "$tmp/etc/resolv.conf" "$tmp/etc/hostname"
  minimize_apt "$tmp"
  clean_apt "$tmp"
  mv "$tmp" "$dir"
}

# The apt settings of the official images (debuerreotype): without them
# every `apt-get install` layer keeps the .debs and apt's caches (88 MB in
# the runtime layer here).
minimize_apt() {
  local conf="$1/etc/apt/apt.conf.d"
  local clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";'
  cat >"$conf/docker-clean" <<EOF
DPkg::Post-Invoke { $clean };
APT::Update::Post-Invoke { $clean };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$conf/docker-no-languages"
  echo 'Acquire::GzipIndexes "true";' >"$conf/docker-gzip-indexes"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$conf/docker-autoremove-suggests"
}

clean_apt() {
  rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin \
    "$1"/var/cache/apt/archives/*.deb "$1"/var/log/*.log
}

# The slim variant drops what the official -slim drops, and keeps dropping
# it for packages the Dockerfile installs later (dpkg path excludes).
make_slim() {
  local full=$1 slim=$2 tmp="$2.tmp"
  rm -rf "$tmp"
  cp -a "$full" "$tmp"
  mkdir -p "$tmp/etc/dpkg/dpkg.cfg.d"
  cat >"$tmp/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
  find "$tmp/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$tmp/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$tmp"/usr/share/man/* "$tmp"/usr/share/groff/* "$tmp"/usr/share/info/* \
    "$tmp"/usr/share/lintian/* "$tmp"/usr/share/linda/* "$tmp"/usr/share/locale/*
  mv "$tmp" "$slim"
}

# The cache key an image in storage was imported with (empty: none).
base_key_of() {
  bah inspect --type image --format "{{index .OCIv1.Config.Labels \"$KEY_LABEL\"}}" "$1" \
    2>/dev/null || true
}

# A base image from a root file system, under the name a FROM line uses,
# labelled with its cache key.
import_base() {
  local dir=$1 name=$2 key=$3 c m
  c=$(bah from scratch)
  m=$(bah mount "$c")
  cp -a "$dir/." "$m/"
  bah umount "$c" >/dev/null
  bah config --cmd bash --label "$KEY_LABEL=$key" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
  bah commit --quiet --rm "$c" "$name" >/dev/null
}

# Build the project's Dockerfile from the tree as it is (.dockerignore
# applies). --layers=false: vfs copies every layer in full, and nothing
# reuses intermediate layers on this route anyway.
build_image() {
  local log="$IMAGE_BUILD/logs/build.log"
  echo "image: buildah bud -t $IMAGE (log: $log)"
  if ! bah bud --pull=never --isolation chroot --network host --layers=false \
      -f Dockerfile -t "$IMAGE" . >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "buildah bud failed; see $log"
  fi
  # The previous build under this tag is now dangling; vfs keeps it in full.
  bah rmi --prune >/dev/null 2>&1 || true
}

human_size() {
  awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'
}

main() {
  mkdir -p "$IMAGE_BUILD/logs"
  phase tools ensure_tools
  check_namespaces
  local mirror key base full slim
  mirror=$(mirror_uri)
  # One base per day, mirror and recipe (these functions): a rerun the same
  # day reuses it, the next day picks up that day's security updates, and
  # a change to how the base is made takes effect at once.
  key="$(date -u +%Y%m%d)-$(printf '%s\n' "$mirror" "$(declare -f make_rootfs minimize_apt clean_apt make_slim)" |
    sha256sum | cut -c1-12)"
  base="$IMAGE_BUILD/base/$key"
  full="$base/rootfs" slim="$base/rootfs-slim"
  mkdir -p "$base"
  # Other days' root file systems are of no further use.
  find "$IMAGE_BUILD/base" -mindepth 1 -maxdepth 1 -not -name "$key" -exec rm -rf {} +

  if [ -d "$full" ]; then
    echo "image: debootstrap took 0 s (cached: $full)"
  else
    phase debootstrap make_rootfs "$mirror" "$full"
  fi
  [ -d "$slim" ] || make_slim "$full" "$slim"

  if [ "$(base_key_of "$BASE_FULL")" = "$key" ] && [ "$(base_key_of "$BASE_SLIM")" = "$key" ]; then
    echo "image: base import took 0 s (cached: $BASE_FULL, $BASE_SLIM with key $key)"
  else
    phase "base import" import_bases "$full" "$slim" "$key"
  fi

  phase build build_image
  local size slim_size
  size=$(pod image inspect --format '{{.Size}}' "$IMAGE")
  slim_size=$(pod image inspect --format '{{.Size}}' "$BASE_SLIM")
  echo "image: $IMAGE is $(human_size "$size") ($BASE_SLIM base: $(human_size "$slim_size"))"
}

import_bases() {
  import_base "$1" "$BASE_FULL" "$3"
  import_base "$2" "$BASE_SLIM" "$3"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  cd "$(dirname "$0")/.."
  main "$@"
fi

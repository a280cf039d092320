#!/usr/bin/env bash
# Build deploy/Dockerfile without a registry or a container daemon: buildah (chroot isolation, vfs
# storage, both work as root in a plain VM or CI machine) on a Python base made from Debian bookworm
# packages by debootstrap (bookworm's python3 is 3.11, the version the official python:3.11-slim-bookworm
# base would give), passed in through the Dockerfile's PYTHON_IMAGE build argument.
#
# Both steps are cached under $RAG_GATEWAY_CACHE (default ~/.cache/rag-gateway), keyed by their inputs:
#   base  the debootstrap suite, mirror and packages, the host's CA bundle and pip settings, this script
#   app   the base key, deploy/Dockerfile, .dockerignore and every file the Dockerfile COPYs from the context
# An unchanged input set reuses the image already in the cache's storage (seconds); a changed app key
# rebuilds the app on the cached base; the base tarball survives `buildah rmi` and is re-imported.
#
# The base carries the host's CA bundle and the host's network pip settings (index URLs, cert, timeout):
# machines that reach PyPI through a TLS-intercepting proxy otherwise fail certificate checks in `pip
# install`. A base made on such a machine therefore trusts that proxy: it is for building and testing
# here, not for shipping; a release build uses the official python image (the Dockerfile's default).
#
# Usage: deploy/build-image.sh           build (or reuse) and print the image reference on stdout
#        deploy/build-image.sh --ref     print the reference the current inputs build, without building
#        deploy/build-image.sh --storage print the buildah global options for the cache's storage
# Progress goes to stderr.
set -euo pipefail
SCRIPT=$(readlink -f "$0")
cd "$(dirname "$SCRIPT")/.."

CACHE=${RAG_GATEWAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rag-gateway}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_PACKAGES=python3,python3-venv,ca-certificates
HOST_CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
PYTHON=${PYTHON:-python3}
IMAGE=localhost/rag-gateway
BASE_IMAGE=localhost/rag-gateway-base
# vfs: plain directory copies, no overlay mounts needed; a private storage root keeps the driver choice
# (and the disk it costs) out of the machine's default /var/lib/containers.
STORAGE=(--root "$CACHE/containers" --runroot "$CACHE/run" --storage-driver vfs)

if [ "${1:-}" = --storage ]; then
  echo "${STORAGE[@]}"
  exit 0
fi

log() { echo "build-image: $*" >&2; }
bah() { buildah "${STORAGE[@]}" "$@"; }
image_exists() { bah inspect --type image "$1" >/dev/null 2>&1; }

# pip settings that matter inside the build: where packages come from and how TLS is checked. Local
# file:// indexes and the host's constraint files do not exist in the image and are left out.
pip_conf() {
  "$PYTHON" - <<'PY'
import re, subprocess, sys
keys = ("index-url", "extra-index-url", "trusted-host", "proxy", "timeout", "default-timeout", "retries")
found = {}
listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False).stdout
for line in listing.splitlines():
    match = re.fullmatch(r"(?:global|install|:env:)\.([\w-]+)='(.*)'", line.strip())
    if match and match.group(1) in keys:
        found[match.group(1)] = match.group(2)
kept = {k: " ".join(u for u in v.split() if not u.startswith("file:")) for k, v in found.items()}
print("[global]")
print("cert = /etc/ssl/certs/ca-certificates.crt")
for key, value in sorted(kept.items()):
    if value:
        print(f"{key} = {value}")
PY
}

digest() { sha256sum | cut -c1-16; }

# Sets BASE_CONF (the base's /etc/pip.conf), BASE_KEY and BASE_REF.
base_key() {
  BASE_CONF=$(pip_conf)
  BASE_KEY=$({ sed -n '/^ensure_base()/,/^}/p' "$SCRIPT"; echo "$SUITE $MIRROR $BASE_PACKAGES"
    cat "$HOST_CA"; echo "$BASE_CONF"; } | digest)
  BASE_REF=$BASE_IMAGE:$BASE_KEY
}

ensure_base() {
  local tarball rootfs ctr
  image_exists "$BASE_REF" && return 0
  tarball=$CACHE/base/$SUITE-python3-$BASE_KEY.tar.gz
  if [ ! -f "$tarball" ]; then
    log "making the base from Debian $SUITE packages ($BASE_PACKAGES)"
    mkdir -p "$CACHE/base"
    rootfs=$(mktemp -d "$CACHE/base/rootfs.XXXXXX")
    # --one-file-system: a debootstrap that failed half-way may leave /proc or a bind of /dev mounted inside.
    trap 'rm -rf --one-file-system "$rootfs"' EXIT
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >&2
    # The Dockerfile's runtime stage installs tini with apt: keep the sources, drop downloaded lists and debs.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc \
      "$rootfs"/usr/share/man "$rootfs"/usr/share/info
    cp "$HOST_CA" "$rootfs/etc/ssl/certs/ca-certificates.crt"
    echo "$BASE_CONF" >"$rootfs/etc/pip.conf"
    : >"$rootfs/etc/resolv.conf"
    tar -C "$rootfs" --numeric-owner -czf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    find "$CACHE/base" -maxdepth 1 -name "$SUITE-python3-*.tar.gz" ! -name "${tarball##*/}" -delete
    rm -rf --one-file-system "$rootfs"
    trap - EXIT
  fi
  log "importing $tarball as $BASE_REF"
  ctr=$(bah from scratch)
  bah add "$ctr" "$tarball" / >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd python3 "$ctr"
  bah commit --rm --quiet "$ctr" "$BASE_REF" >/dev/null
}

# The Dockerfile's own list of what it copies from the context (COPY without --from), so the key
# cannot drift from the build.
context_inputs() {
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' deploy/Dockerfile |
    awk '$1 == "COPY" && !/--from/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }'
}

app_key() {
  {
    echo "$BASE_KEY"
    cat deploy/Dockerfile .dockerignore
    # shellcheck disable=SC2046
    # What .dockerignore keeps out of the context (the offline tools among it) is no input either.
    find $(context_inputs) -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path '*.egg-info/*' \
      ! -path 'routes/offline/*' -print0 |
      LC_ALL=C sort -z | xargs -0 sha256sum
  } | digest
}

base_key
REF=$IMAGE:$(app_key)
if [ "${1:-}" = --ref ]; then
  echo "$REF"
  exit 0
fi
ensure_base
if image_exists "$REF"; then
  log "reusing $REF (inputs unchanged)"
else
  log "building $REF on $BASE_REF"
  started=$(date +%s)
  bah bud --isolation chroot --network host --pull=never --build-arg "PYTHON_IMAGE=$BASE_REF" \
    -f deploy/Dockerfile -t "$REF" . >&2
  log "built in $(($(date +%s) - started)) s"
  # Older builds of this script's images would otherwise pile up (vfs stores every layer in full).
  # An image a container still uses (another checkout's test run) is kept: rmi refuses it.
  for old in $(bah images --format '{{.Name}}:{{.Tag}}' | grep -E "^($IMAGE|$BASE_IMAGE):" |
    grep -v -x -e "$REF" -e "$BASE_REF"); do
    bah rmi "$old" >/dev/null 2>&1 || log "kept $old (in use)"
  done
  bah rmi --prune >/dev/null 2>&1 || true
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
bah tag "$REF" "$IMAGE:$version"
size=$(bah images --format '{{.Size}}' "$REF" | awk 'NR == 1')
log "image $REF: $size, ready after ${SECONDS} s"
echo "$REF"

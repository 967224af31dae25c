#!/bin/sh
# PID 1 of the lisa-ext virtual board (installed as /sbin/lisa-ext-init).
#
# There is no systemd: the board needs pseudo filesystems, tracefs, a static
# address on QEMU's user-mode network, the variant's platform-emulation modules
# and sshd, nothing else. Boot then takes seconds even under TCG. tini stays
# PID 1 afterwards so orphans of SSH sessions are reaped.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

say() { echo "lisa-ext-init: $*" > /dev/console; }

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null   # already there with DEVTMPFS_MOUNT
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || say "no tracefs"
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -o remount,rw /
hostname vboard

# The variant's modules arrive on /dev/vdb (made per boot by lisa_ext.vboard.rootfs).
# A kexec deploy unpacks them into /lib/modules/<release> instead: a real
# directory there wins over the disk, which may still hold the previous variant.
release=$(uname -r)
mkdir -p /run/lisa-ext/modules /lib/modules
if [ -b /dev/vdb ] && mount -o ro /dev/vdb /run/lisa-ext/modules; then
    if [ -d "/run/lisa-ext/modules/$release" ] && { [ -L "/lib/modules/$release" ] || [ ! -e "/lib/modules/$release" ]; }; then
        ln -sfn "/run/lisa-ext/modules/$release" "/lib/modules/$release"
    fi
fi
if [ -f "/lib/modules/$release/lisa-ext.load" ]; then
    while read -r module params; do
        [ -n "$module" ] || continue
        # shellcheck disable=SC2086 # params are split on purpose
        modprobe "$module" $params || say "modprobe $module failed"
    done < "/lib/modules/$release/lisa-ext.load"
fi

ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2

mkdir -p /run/sshd
/usr/sbin/sshd -E /var/log/sshd.log || say "sshd failed to start"
say "ready $release $(cat /proc/sys/kernel/random/boot_id)"
exec /usr/bin/tini -- /bin/sleep infinity

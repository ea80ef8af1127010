#!/bin/busybox sh
# gpucloud-mini's initramfs: load the modules the boot needs, mount the root disk, switch to it.
/bin/busybox mkdir -p /proc /sys /dev /newroot
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules); do insmod "$m" 2>/dev/null || echo "gpucloud-mini: insmod $m failed"; done
root=/dev/vda
for arg in $(cat /proc/cmdline); do case $arg in root=/dev/*) root=${arg#root=} ;; esac; done
i=0
while [ ! -b "$root" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
if ! mount -t ext4 -o rw "$root" /newroot; then
  echo "gpucloud-mini: cannot mount $root; a shell on the console"
  exec sh
fi
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /sbin/init

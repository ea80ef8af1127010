#!/bin/sh
# gpucloud-mini's boot (busybox init's sysinit): what cloud-init and systemd do in build.sh's image,
# for the parts a gpucloud VM needs. Reads hostd's seed cdrom (label cidata).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
[ -e /dev/null ] || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /run/seed
mount -t devpts -o gid=5,mode=620 devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/seed
mount -o remount,rw /
echo "gpucloud-mini: boot"
copy() { [ ! -f "$1" ] || { cp "$1" "$2" && chmod "$3" "$2"; }; }
ip link set lo up
i=0
while [ ! -b /dev/sr0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
if mount -t iso9660 -o ro /dev/sr0 /run/seed; then
  s=/run/seed
  host=$(sed -n 's/^local-hostname: *//p' $s/meta-data 2>/dev/null | head -1)
  [ -z "$host" ] || { echo "$host" > /etc/hostname; echo "127.0.1.1 $host" >> /etc/hosts; }
  copy $s/gpucloud/guest.conf /etc/gpucloud/guest.conf 0600
  copy $s/gpucloud/authorized_keys /root/.ssh/authorized_keys 0600
else
  echo "gpucloud-mini: no seed cdrom: no keys, no user-data, no GPU configuration"
  s=""
fi
hostname -F /etc/hostname
udhcpc -i eth0 -s /etc/gpucloud/udhcpc.script -q -n -t 20 -T 1 2>/dev/null || echo "gpucloud-mini: no DHCP lease on eth0"
# A "#!" user-data script runs once per instance, as cloud-init's scripts-user does.
if [ -n "$s" ] && [ -f $s/gpucloud/user-data ] && [ "$(head -c 2 $s/gpucloud/user-data)" = "#!" ]; then
  id=$(sed -n 's/^instance-id: *//p' $s/meta-data | head -1)
  done=/var/lib/gpucloud/user-data.done.${id:-none}
  if [ ! -f "$done" ]; then
    copy $s/gpucloud/user-data /var/lib/gpucloud/user-data 0700
    /var/lib/gpucloud/user-data > /var/log/user-data.log 2>&1
    echo "gpucloud-mini: user-data exited $?"
    touch "$done"
  fi
fi
# A renewed session token comes as a swapped seed cdrom (hostd): its guest.conf is copied every
# minute, as the Debian image's gpucloud-refresh-token timer does.
if [ -n "$s" ]; then
  (while sleep 60; do
    umount /run/seed 2>/dev/null
    mount -t iso9660 -o ro /dev/sr0 /run/seed 2>/dev/null || continue
    cmp -s /run/seed/gpucloud/guest.conf /etc/gpucloud/guest.conf || copy /run/seed/gpucloud/guest.conf /etc/gpucloud/guest.conf 0600
  done) </dev/null >/dev/null 2>&1 &
fi
# SSH sessions get /etc/environment's variables (LD_AUDIT: gpucloud's loader) as logins on
# build.sh's image get them through pam_env: Dropbear passes its own environment on (-e).
(set -a; [ -r /etc/environment ] && . /etc/environment; exec dropbear -R -e -p 22)
echo "gpucloud-mini: ready"

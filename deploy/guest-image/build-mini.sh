#!/usr/bin/env bash
# Builds gpucloud's small guest image, "gpucloud-mini": Debian's kernel, busybox, glibc, bash and
# Dropbear (an SSH server), with gpucloud's guest library (libcuda.so.1), optionally its CUDA
# runtime (libcudart.so.13) and loader auditor, installed as build.sh installs them. It boots in
# seconds where build.sh's Debian image (cloud-init, systemd, OpenSSH) takes minutes under QEMU's
# software emulation, which makes it the image of CI's real-VM test; tenants who want apt use
# build.sh's.
#
# Every file comes from Debian's archive through apt-get download (packages cached with -c) and
# from the libraries you pass; nothing else is downloaded. No root needed except for mke2fs's
# owners (run as root, or the files are the builder's). Writes, into the output dir (hostd's
# -images-dir), as build.sh does:
#   <name>.qcow2    the root filesystem (ext4, no partition table), the base of every VM overlay
#   <name>.vmlinuz  the kernel; <name>.initrd a small initramfs that loads the disk, cdrom,
#                   network and ext4 modules and switches to /dev/vda; <name>.cmdline
#
# What the guest does at boot (its /etc/gpucloud/boot, run by busybox init): mounts hostd's seed
# cdrom, installs the seed's guest.conf as /etc/gpucloud/guest.conf (the guest library's
# configuration) and its authorized_keys for root, names the host from meta-data, brings eth0 up
# by DHCP, runs a "#!" user-data script once per instance (as cloud-init runs scripts; cloud-config
# user-data is not understood here), starts Dropbear with the environment of /etc/environment
# (LD_AUDIT, so SSH sessions get gpucloud's loader), and offers a login on the serial console.
#
# Usage:
#   deploy/guest-image/build-mini.sh -l libcuda.so.1 -o outdir [-r libcudart.so.13]
#       [-a libgpucloud-audit.so] [-n name] [-s size] [-c cachedir]
set -euo pipefail

name=gpucloud-mini size=256M lib="" out="" cudart="" audit="" cache=""
while getopts "l:o:n:s:r:a:c:" opt; do
  case $opt in
    l) lib=$OPTARG ;; o) out=$OPTARG ;; n) name=$OPTARG ;; s) size=$OPTARG ;;
    r) cudart=$OPTARG ;; a) audit=$OPTARG ;; c) cache=$OPTARG ;;
    *) echo "usage: $0 -l libcuda.so.1 -o outdir [-r libcudart.so.13] [-a libgpucloud-audit.so] [-n name] [-s size] [-c cachedir]" >&2; exit 2 ;;
  esac
done
die() { echo "guest-image-mini: $*" >&2; exit 1; }
[ -n "$lib" ] && [ -n "$out" ] || die "-l (guest library) and -o (output dir) are required"
[ -f "$lib" ] || die "guest library $lib not found (build it: make -C gpuserverd/guest)"
[ -z "$cudart" ] || [ -f "$cudart" ] || die "runtime $cudart not found"
[ -z "$audit" ] || [ -f "$audit" ] || die "auditor $audit not found (build it: make -C gpuserverd/guest/loader)"
[[ "$name" =~ ^[a-z0-9][a-z0-9._-]*$ ]] || die "name $name: lower-case letters, digits, '.', '_', '-' only"
for t in apt-get apt-cache dpkg-deb mke2fs qemu-img gzip; do
  command -v "$t" >/dev/null || die "$t missing: apt-get install apt dpkg e2fsprogs qemu-utils gzip"
done
here=$(cd "$(dirname "$0")" && pwd)
lib=$(realpath "$lib"); [ -z "$cudart" ] || cudart=$(realpath "$cudart"); [ -z "$audit" ] || audit=$(realpath "$audit")

work=$(mktemp -d /var/tmp/gpucloud-mini.XXXXXX)
trap 'rm -rf "$work"' EXIT
debs=${cache:-$work/debs}
mkdir -p "$debs" "$out"
debs=$(realpath "$debs")

# A fresh machine (or a container image) may have no package lists yet.
if ! apt-cache show linux-image-amd64 >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || die "apt knows no linux-image-amd64: run apt-get update (as root)"
  echo "guest-image-mini: apt-get update"
  apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
fi
# linux-image-amd64 is a metapackage: the kernel is the package it depends on.
kpkg=$(apt-cache depends --important linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -1)
[ -n "$kpkg" ] || die "no kernel package among linux-image-amd64's dependencies (apt-get update?)"
userland=(busybox-static libc6 libgcc-s1 bash libtinfo6 dropbear-bin libcrypt1 libtomcrypt1 libtommath1 libgmp10 zlib1g)
for p in "$kpkg" "${userland[@]}" coreutils; do
  compgen -G "$debs/${p}_*.deb" >/dev/null && continue
  echo "guest-image-mini: apt-get download $p"
  (cd "$debs" && apt-get download -q "$p" 2>&1 | grep -v "couldn't be accessed by user '_apt'" || true)
  compgen -G "$debs/${p}_*.deb" >/dev/null || die "apt-get download $p gave no package"
done

root=$work/root kroot=$work/kernel
mkdir -p "$root" "$kroot"
for p in "${userland[@]}"; do dpkg-deb -x "$(ls "$debs/${p}"_*.deb | tail -1)" "$root"; done
dpkg-deb -x "$(ls "$debs/${kpkg}"_*.deb | tail -1)" "$kroot"
# From coreutils only realpath: gpucloud-info needs its -m, which busybox's lacks.
dpkg-deb -x "$(ls "$debs"/coreutils_*.deb | tail -1)" "$work/coreutils"
install -D -m 0755 "$work/coreutils/usr/bin/realpath" "$root/usr/bin/realpath"
rm -rf "$root"/usr/share/{doc,man,info,locale,lintian,bug,menu} "$root"/usr/lib/x86_64-linux-gnu/gconv "$root"/etc/init.d
bb=$root/bin/busybox
[ -x "$bb" ] || die "busybox-static has no /bin/busybox"

# The userland: busybox's applets as links where nothing else stands, glibc's loader where the
# kernel and libc look for it.
for a in $("$bb" --list-full); do
  [ -e "$root/$a" ] || [ -L "$root/$a" ] || { mkdir -p "$root/$(dirname "$a")"; ln -s /bin/busybox "$root/$a"; }
done
mkdir -p "$root"/{proc,sys,dev,run,tmp,mnt,root/.ssh,etc/dropbear,etc/gpucloud,var/lib/gpucloud,var/log,lib64}
chmod 1777 "$root/tmp"; chmod 0700 "$root/root" "$root/root/.ssh"
[ -e "$root/lib64/ld-linux-x86-64.so.2" ] || ln -s /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"
cat > "$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
# "*": no password logs in (set one with user-data if the serial console should take logins);
# not "!", which Dropbear reads as a locked account and refuses keys for too.
printf 'root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n' > "$root/etc/shadow"
chmod 0600 "$root/etc/shadow"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
printf '/bin/sh\n/bin/bash\n' > "$root/etc/shells"
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' > "$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n' > "$root/etc/hosts"
echo gpucloud > "$root/etc/hostname"
cat > "$root/etc/profile" <<'EOF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
[ -r /etc/environment ] && { set -a; . /etc/environment; set +a; }
EOF
cat > "$root/etc/inittab" <<'EOF'
::sysinit:/etc/gpucloud/boot
ttyS0::respawn:/sbin/getty -L 115200 ttyS0 vt100
::ctrlaltdel:/sbin/reboot
::shutdown:/bin/umount -a -r
EOF
install -m 0755 "$here/mini/boot.sh" "$root/etc/gpucloud/boot"
install -m 0755 "$here/mini/udhcpc.sh" "$root/etc/gpucloud/udhcpc.script"

echo "guest-image-mini: installing the guest library as libcuda.so.1"
install -D -m 0755 "$lib" "$root/usr/lib/gpucloud/libcuda.so.1"
ln -sf /usr/lib/gpucloud/libcuda.so.1 "$root/usr/lib/x86_64-linux-gnu/libcuda.so.1"
ln -sf libcuda.so.1 "$root/usr/lib/x86_64-linux-gnu/libcuda.so"
if [ -n "$cudart" ]; then
  echo "guest-image-mini: installing gpucloud's libcudart.so.13"
  install -m 0755 "$cudart" "$root/usr/lib/gpucloud/libcudart.so.13"
  echo /usr/lib/gpucloud > "$root/etc/ld.so.conf.d/00-gpucloud.conf"
fi
[ -z "$audit" ] || "$here/install-loader.sh" "$root" "$audit"
printf 'include /etc/ld.so.conf.d/*.conf\n' > "$root/etc/ld.so.conf"
ldconfig -r "$root"

# The initramfs: busybox, the modules the boot needs (dependencies first, read from each module's
# .modinfo: the package ships no modules.dep) and an init that mounts /dev/vda and switches to it.
kver=$(ls "$kroot/lib/modules" | head -1)
mods=$kroot/lib/modules/$kver
declare -A kofile seen
while IFS= read -r f; do n=$(basename "$f" .ko); kofile[${n//-/_}]=$f; done < <(find "$mods" -name '*.ko')
order=()
resolve() {
  local m=${1//-/_} f deps d
  [ -z "${seen[$m]:-}" ] || return 0
  seen[$m]=1
  f=${kofile[$m]:-}
  if [ -z "$f" ]; then
    grep -q "/${m}.ko\$\|/${m//_/-}.ko\$" "$mods/modules.builtin" && return 0
    die "module $m: neither in $kpkg nor built in"
  fi
  deps=$(grep -a -o 'depends=[a-z0-9_,-]*' "$f" | head -1 | cut -d= -f2)
  for d in ${deps//,/ }; do resolve "$d"; done
  order+=("$f")
}
# q35's SATA cdrom (the seed), ISO 9660, virtio disks (root, volumes) and NIC, ext4 (and the
# checksum it asks for by softdep), raw packet sockets for udhcpc.
for m in ahci sr_mod isofs virtio_pci virtio_blk virtio_net crc32c_generic ext4 af_packet; do resolve "$m"; done
ird=$work/initramfs
mkdir -p "$ird"/{bin,lib/modules,proc,sys,dev,newroot}
cp "$bb" "$ird/bin/busybox"
: > "$ird/modules"
for f in "${order[@]}"; do cp "$f" "$ird/lib/modules/"; echo "/lib/modules/$(basename "$f")" >> "$ird/modules"; done
install -m 0755 "$here/mini/initramfs-init.sh" "$ird/init"
(cd "$ird" && find . | sort | "$bb" cpio -o -H newc 2>/dev/null | gzip -9) > "$out/$name.initrd.tmp"

echo "guest-image-mini: writing $out/$name.{qcow2,vmlinuz,initrd,cmdline}"
cp "$kroot/boot/vmlinuz-$kver" "$out/$name.vmlinuz.tmp"
# no_timer_check: under software emulation on a busy host the kernel's IO-APIC timer check can
# fail and panic the boot ("IO-APIC + timer doesn't work!"), seen in CI; panic=-1 reboots at once.
echo "root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet no_timer_check panic=-1" > "$out/$name.cmdline.tmp"
mke2fs -q -t ext4 -L gpucloud-root -d "$root" "$work/root.raw" "$size" >/dev/null
qemu-img convert -f raw -O qcow2 "$work/root.raw" "$out/$name.qcow2.tmp"
for f in vmlinuz initrd cmdline qcow2; do mv "$out/$name.$f.tmp" "$out/$name.$f"; done
echo "guest-image-mini: done: $out/$name.qcow2 (kernel $kver)"

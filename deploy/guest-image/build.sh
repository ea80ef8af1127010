#!/usr/bin/env bash
# Builds a gpucloud base image: Debian 12 with cloud-init, and the guest library baked in as the
# system's libcuda.so.1, so CUDA programs in the VM reach gpuserverd with no setup; optionally
# gpucloud's CUDA runtime (libcudart.so.13), cuBLAS (libcublas.so.13) and cuDNN (libcudnn.so.9), found by the loader
# ahead of any NVIDIA copy installed later, so -cudart shared programs run unmodified. The seed that
# hostd attaches to each VM then only carries that VM's configuration (endpoints, token, tier).
#
# Everything comes from the Debian archive (debootstrap) and the guest library you pass; no
# other download. Writes, into the output dir (hostd's -images-dir):
#   <name>.qcow2    the root filesystem (ext4, no partition table), the base of every VM overlay
#   <name>.vmlinuz  the kernel, <name>.initrd its initramfs, <name>.cmdline the kernel command line:
#                   hostd boots images that have these directly (no bootloader in the image)
#
# Usage (as root):
#   deploy/guest-image/build.sh -l gpuserverd/guest/build/libcuda.so.1 -o /var/lib/gpucloud/hostd/images
#   options: -n name (debian-12-gpucloud)  -s size (4G)  -m mirror (http://deb.debian.org/debian)
#            -r libcudart.so.13 (make -C gpuserverd/guest/cudart, where the CUDA toolkit's headers are)
#            -b libcublas.so.13 (make -C gpuserverd/guest/cublas, likewise)
#            -N libnvidia-ml.so.1 (make -C gpuserverd/guest/nvml; no toolkit needed): NVML for
#               pynvml and monitoring in the VM, answered by gpuserverd, and gpucloud-smi from
#               the same folder (docs/nvml.md)
#            -a libgpucloud-audit.so (make -C gpuserverd/guest/loader): gpucloud's libraries win over
#               a program's DT_RPATH (PyTorch's wheel); installs gpucloud-info too (loader/README.md)
#            -d libcudnn.so.9 (make -C gpuserverd/guest/cudnn; needs no NVIDIA header)
#            -x lib, repeatable: another of gpucloud's libraries that needs no runtime, installed
#               under its file name: libcusparse.so.12, libcufft.so.12, libcurand.so.10,
#               libcusolver.so.12, libnvjpeg.so.13, NPP's libnppc.so.13 ... libnpps.so.13 (make -C
#               gpuserverd/guest/cusparse, cufft, curand, cusolver, nvjpeg, npp; no NVIDIA header needed)
#   env: DEBOOTSTRAP_CACHE=dir keeps downloaded packages between runs
set -euo pipefail

name=debian-12-gpucloud size=4G mirror=http://deb.debian.org/debian lib="" out="" cudart="" cublas="" nvml="" audit="" cudnn="" extra=()
while getopts "l:o:n:s:m:r:b:N:a:d:x:S:" opt; do
  case $opt in
    l) lib=$OPTARG ;; o) out=$OPTARG ;; n) name=$OPTARG ;; s) size=$OPTARG ;; m) mirror=$OPTARG ;;
    r) cudart=$OPTARG ;; b) cublas=$OPTARG ;; N) nvml=$OPTARG ;; a) audit=$OPTARG ;; d) cudnn=$OPTARG ;;
    x|S) extra+=("$OPTARG") ;; # -S libcusolver.so.12 is -x's older spelling
    *) echo "usage: $0 -l libcuda.so.1 -o outdir [-r libcudart.so.13] [-b libcublas.so.13] [-N libnvidia-ml.so.1] [-a libgpucloud-audit.so] [-d libcudnn.so.9] [-x lib]... [-n name] [-s size] [-m mirror]" >&2; exit 2 ;;
  esac
done
die() { echo "guest-image: $*" >&2; exit 1; }
[ -n "$lib" ] && [ -n "$out" ] || die "-l (guest library) and -o (output dir) are required"
[ -f "$lib" ] || die "guest library $lib not found (build it: make -C gpuserverd/guest)"
[ -z "$cudart" ] || [ -f "$cudart" ] || die "runtime $cudart not found (build it: make -C gpuserverd/guest/cudart)"
[ -z "$cublas" ] || [ -f "$cublas" ] || die "cuBLAS $cublas not found (build it: make -C gpuserverd/guest/cublas)"
[ -z "$nvml" ] || [ -f "$nvml" ] || die "NVML $nvml not found (build it: make -C gpuserverd/guest/nvml)"
[ -z "$audit" ] || [ -f "$audit" ] || die "auditor $audit not found (build it: make -C gpuserverd/guest/loader)"
[ -z "$cublas" ] || [ -n "$cudart" ] || die "-b needs -r: gpucloud's libcublas works with gpucloud's runtime"
[ -z "$cudnn" ] || [ -f "$cudnn" ] || die "cuDNN $cudnn not found (build it: make -C gpuserverd/guest/cudnn)"
for x in "${extra[@]}"; do
  [[ "$(basename "$x")" =~ ^lib(cusparse|cufft|curand|cusolver|nvjpeg|npp(c|ial|icc|idei|if|ig|im|ist|isu|itc|s))\.so\.[0-9]+$ ]] || die "-x $x: not one of gpucloud's libraries (libcusparse.so.12, libcufft.so.12, libcurand.so.10 ...)"
  [ -f "$x" ] || die "$x not found (build it: make -C gpuserverd/guest/<library>)"
done
[[ "$name" =~ ^[a-z0-9][a-z0-9._-]*$ ]] || die "name $name: lower-case letters, digits, '.', '_', '-' only"
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot)"
for t in debootstrap mke2fs qemu-img; do
  command -v "$t" >/dev/null || die "$t missing: apt-get install debootstrap e2fsprogs qemu-utils"
done

work=$(mktemp -d /var/tmp/gpucloud-guest-image.XXXXXX)
root=$work/root
cleanup() {
  rc=$?
  for m in dev/pts dev proc sys; do umount "$root/$m" 2>/dev/null || true; done
  if [ $rc -eq 0 ]; then rm -rf "$work"; else echo "guest-image: failed; work dir kept: $work" >&2; fi
}
trap cleanup EXIT

# A minimal base by debootstrap, then the rest through apt inside it: debootstrap's own resolver
# does not cope with a package set as deep as cloud-init's.
echo "guest-image: debootstrap bookworm from $mirror"
cache_opt=()
[ -n "${DEBOOTSTRAP_CACHE:-}" ] && mkdir -p "$DEBOOTSTRAP_CACHE" && cache_opt=(--cache-dir="$(realpath "$DEBOOTSTRAP_CACHE")")
debootstrap --variant=minbase "${cache_opt[@]}" --include=systemd-sysv,udev,kmod,iproute2 bookworm "$root" "$mirror"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"   # start no services in the chroot
chmod 0755 "$root/usr/sbin/policy-rc.d"
echo "deb $mirror bookworm main" > "$root/etc/apt/sources.list"
chroot "$root" apt-get update -q
DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -q --no-install-recommends \
  linux-image-amd64 initramfs-tools cloud-init openssh-server ifupdown isc-dhcp-client ca-certificates
rm -f "$root/usr/sbin/policy-rc.d"

echo "guest-image: installing the guest library as libcuda.so.1"
install -D -m 0755 "$lib" "$root/usr/lib/gpucloud/libcuda.so.1"
ln -sf /usr/lib/gpucloud/libcuda.so.1 "$root/usr/lib/x86_64-linux-gnu/libcuda.so.1"
ln -sf libcuda.so.1 "$root/usr/lib/x86_64-linux-gnu/libcuda.so"
if [ -n "$nvml" ]; then # where NVIDIA's driver packages would put theirs, as libcuda's
  echo "guest-image: installing gpucloud's libnvidia-ml.so.1"
  install -m 0755 "$nvml" "$root/usr/lib/gpucloud/libnvidia-ml.so.1"
  ln -sf /usr/lib/gpucloud/libnvidia-ml.so.1 "$root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
  ln -sf libnvidia-ml.so.1 "$root/usr/lib/x86_64-linux-gnu/libnvidia-ml.so"
  # gpucloud-smi, built beside it: NVIDIA's nvidia-smi does not run on gpucloud's NVML.
  smi="$(dirname "$nvml")/gpucloud-smi"
  [ ! -f "$smi" ] || install -m 0755 "$smi" "$root/usr/bin/gpucloud-smi"
fi
# gpucloud's runtime, cuBLAS and cuDNN: /usr/lib/gpucloud is named first in ld.so.conf (00-), so the
# loader's cache prefers it to a CUDA toolkit installed later in the VM (NVIDIA's runtime does
# not start on the guest library: docs/benchmarks/gpu-runtime-compat.md).
if [ -n "$cudart" ]; then
  echo "guest-image: installing gpucloud's libcudart.so.13${cublas:+ and libcublas.so.13}"
  install -m 0755 "$cudart" "$root/usr/lib/gpucloud/libcudart.so.13"
  [ -z "$cublas" ] || install -m 0755 "$cublas" "$root/usr/lib/gpucloud/libcublas.so.13"
fi
if [ -n "$audit" ]; then
  "$(dirname "$0")/install-loader.sh" "$root" "$audit"
fi
if [ -n "$cudnn" ]; then # it talks to libcuda's session itself: no runtime needed
  echo "guest-image: installing gpucloud's libcudnn.so.9"
  install -m 0755 "$cudnn" "$root/usr/lib/gpucloud/libcudnn.so.9"
fi
for x in "${extra[@]}"; do # each talks to libcuda's session itself, as libcudnn does
  echo "guest-image: installing gpucloud's $(basename "$x")"
  install -m 0755 "$x" "$root/usr/lib/gpucloud/$(basename "$x")"
done
[ -z "$cudart$cudnn${extra[*]}" ] || echo /usr/lib/gpucloud > "$root/etc/ld.so.conf.d/00-gpucloud.conf"
chroot "$root" ldconfig
install -d -m 0755 "$root/etc/gpucloud"

# cloud-init reads only the NoCloud seed hostd attaches (label cidata): no network metadata probes.
# C.UTF-8 is built into libc; the default en_US.UTF-8 would need the locales package.
cat > "$root/etc/cloud/cloud.cfg.d/90-gpucloud.cfg" <<'CFG'
datasource_list: [ NoCloud, None ]
locale: C.UTF-8
CFG
echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" > "$root/etc/fstab"
echo "gpucloud" > "$root/etc/hostname"
# The serial console is where hostd's console log (and ConsoleLogTail) comes from.
chroot "$root" systemctl enable serial-getty@ttyS0.service >/dev/null 2>&1 || true
chroot "$root" apt-get clean
for m in dev/pts dev proc sys; do umount "$root/$m"; done
rm -rf "$root"/var/lib/apt/lists/* "$root"/etc/ssh/ssh_host_* "$root/etc/machine-id"
touch "$root/etc/machine-id"

echo "guest-image: writing $out/$name.{qcow2,vmlinuz,initrd,cmdline}"
mkdir -p "$out"
cp "$(ls "$root"/boot/vmlinuz-* | tail -1)" "$out/$name.vmlinuz.tmp"
cp "$(ls "$root"/boot/initrd.img-* | tail -1)" "$out/$name.initrd.tmp"
echo "root=/dev/vda rw console=ttyS0 net.ifnames=0" > "$out/$name.cmdline.tmp"
mke2fs -q -t ext4 -L gpucloud-root -d "$root" "$work/root.raw" "$size"
qemu-img convert -f raw -O qcow2 "$work/root.raw" "$out/$name.qcow2.tmp"
for f in vmlinuz initrd cmdline qcow2; do mv "$out/$name.$f.tmp" "$out/$name.$f"; done
echo "guest-image: done: $out/$name.qcow2"

#!/usr/bin/env bash
# install-loader.sh ROOT AUDITOR: installs gpucloud's loader auditor (libgpucloud-audit.so,
# gpuserverd/guest/loader) and gpucloud-info into the filesystem at ROOT (the guest image's, from
# build.sh -a), and names the auditor in LD_AUDIT for every process the VM starts:
#   /etc/environment                        logins (ssh, serial console), cron, su: pam_env
#   /etc/systemd/system.conf.d/, user.conf.d/  services and user units: DefaultEnvironment
# A process opts out with GPUCLOUD_NATIVE=1 (or with LD_AUDIT unset). Not /etc/ld.so.preload:
# ld.so reads that for every process with no way to leave it out (loader/gpucloud_audit.c).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 ROOT libgpucloud-audit.so" >&2; exit 2; }
root=$1 audit=$2
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$root/etc" ] || { echo "install-loader: $root/etc: not a root filesystem" >&2; exit 1; }
[ -f "$audit" ] || { echo "install-loader: auditor $audit not found" >&2; exit 1; }
lib=/usr/lib/gpucloud/libgpucloud-audit.so
install -D -m 0755 "$audit" "$root$lib"
install -D -m 0755 "$here/../../gpuserverd/guest/loader/gpucloud-info" "$root/usr/local/bin/gpucloud-info"
touch "$root/etc/environment"
sed -i '/^LD_AUDIT=/d' "$root/etc/environment"
echo "LD_AUDIT=$lib" >> "$root/etc/environment"
for d in system.conf.d user.conf.d; do
  install -d -m 0755 "$root/etc/systemd/$d"
  printf '[Manager]\nDefaultEnvironment="LD_AUDIT=%s"\n' "$lib" > "$root/etc/systemd/$d/50-gpucloud-audit.conf"
done
echo "install-loader: $lib named in LD_AUDIT; gpucloud-info in /usr/local/bin"

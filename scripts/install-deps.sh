#!/usr/bin/env bash
# Installs the system packages the stack and its tests need, from Debian's archive. Idempotent and
# quick when everything is present, so `make run` and `make test` call it every time.
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# PostgreSQL server binaries (initdb, pg_ctl, postgres): the database of the stack and the tests.
command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
# libvirt for hostd (cgo headers, the daemon, QEMU for the real-VM tests), genisoimage for seeds,
# e2fsprogs for the guest image the real-VM tests build (deploy/guest-image/build-mini.sh).
# nftables and iproute2: hostd's tenant firewall (nft) and its traffic tests, which build
# network namespaces (ip netns) and send packets only inside them.
for p in pkg-config libvirt-dev libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients \
         qemu-system-x86 qemu-utils genisoimage e2fsprogs gcc make nftables iproute2; do
  have_pkg "$p" || need+=("$p")
done
# Extra packages named by parts of the stack (e.g. the web console's browser) go in this file.
if [ -f scripts/deps.extra ]; then
  while read -r p; do [ -z "$p" ] || [[ "$p" == \#* ]] || have_pkg "$p" || need+=("$p"); done < scripts/deps.extra
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # Another apt or dpkg (unattended-upgrades at boot, a second `make`) may hold the lock: wait
  # for it (up to 10 minutes) instead of failing at once.
  apt_opts=(-o DPkg::Lock::Timeout=600)
  $SUDO apt-get "${apt_opts[@]}" update -q
  $SUDO apt-get "${apt_opts[@]}" install -y -q --no-install-recommends "${need[@]}"
fi

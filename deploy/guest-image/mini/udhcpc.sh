#!/bin/sh
# udhcpc's event script: address, default route and resolver from the lease.
case $1 in
  deconfig) ip -4 addr flush dev "$interface"; ip link set "$interface" up ;;
  bound|renew)
    ip -4 addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    for r in $router; do ip route replace default via "$r" dev "$interface"; break; done
    : > /etc/resolv.conf
    for d in $dns; do echo "nameserver $d" >> /etc/resolv.conf; done
    echo "gpucloud-mini: $interface $ip/${mask:-24} via ${router:-none}" ;;
esac
exit 0

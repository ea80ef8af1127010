// Package systemd holds the daemons' systemd units and example environment files; its test
// checks their hardening and runs `systemd-analyze verify` on them where systemd is installed.
package systemd

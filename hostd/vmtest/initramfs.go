package vmtest

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
)

// initScript is the guest's whole userland: load modules, read the seed, call home, power off.
const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /seed /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "gpucloud-vmtest: init started"
for m in $(cat /modules); do insmod "$m" || echo "gpucloud-vmtest: insmod $m failed"; done
i=0
while [ ! -b /dev/sr0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
if ! mount -t iso9660 -o ro /dev/sr0 /seed; then echo "gpucloud-vmtest: no seed cdrom"; poweroff -f; fi
. /seed/gpucloud/guest.conf
echo "gpucloud-vmtest: seed instance=$GPUCLOUD_INSTANCE_ID tier=$GPUCLOUD_TIER"
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
host=${GPUCLOUD_ENDPOINT%:*}
port=${GPUCLOUD_ENDPOINT##*:}
if echo "hello $GPUCLOUD_INSTANCE_ID $GPUCLOUD_TOKEN" | nc -w 5 "$host" "$port"; then
  echo "gpucloud-vmtest: reached $GPUCLOUD_ENDPOINT"
else
  echo "gpucloud-vmtest: cannot reach $GPUCLOUD_ENDPOINT"
fi
sleep 1
poweroff -f
`

type cpioFile struct {
	name string
	src  string // file to copy, or
	data []byte // contents
	mode uint32
}

// writeInitramfs writes a gzip'd newc cpio archive, parent directories included.
func writeInitramfs(dst string, files []cpioFile) error {
	f, err := os.Create(dst + ".tmp")
	if err != nil {
		return fmt.Errorf("vmtest: %w", err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	dirs := map[string]bool{}
	for _, fl := range files {
		for d := path.Dir(fl.name); d != "." && d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl) // parents sort before children
	ino := uint32(1)
	for _, d := range dl {
		if err := cpioEntry(zw, ino, d, 0o040755, nil); err != nil {
			return err
		}
		ino++
	}
	for _, fl := range files {
		data := fl.data
		if fl.src != "" {
			if data, err = os.ReadFile(fl.src); err != nil {
				return fmt.Errorf("vmtest: %w", err)
			}
		}
		if err := cpioEntry(zw, ino, fl.name, 0o100000|fl.mode, data); err != nil {
			return err
		}
		ino++
	}
	if err := cpioEntry(zw, 0, "TRAILER!!!", 0, nil); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("vmtest: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("vmtest: %w", err)
	}
	return os.Rename(dst+".tmp", dst)
}

func cpioEntry(w io.Writer, ino uint32, name string, mode uint32, data []byte) error {
	nlink := 1
	if mode&0o040000 != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, data...)
	buf = pad4(buf)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("vmtest: write initramfs: %w", err)
	}
	return nil
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

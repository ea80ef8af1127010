package seed

import (
	"bytes"
	"encoding/base64"
	"fmt"
	mime "mime/multipart"
	"net/textproto"
	"strings"

	"gopkg.in/yaml.v3"
)

type writeFile struct {
	Path        string `yaml:"path"`
	Permissions string `yaml:"permissions"`
	Encoding    string `yaml:"encoding,omitempty"`
	Content     string `yaml:"content"`
}

type cloudConfig struct {
	Hostname          string   `yaml:"hostname,omitempty"`
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys,omitempty"`
	// DisableRoot false lets root log in with the keys: the API shows "ssh root@..." whatever
	// the image's default user is called.
	DisableRoot *bool       `yaml:"disable_root,omitempty"`
	WriteFiles  []writeFile `yaml:"write_files"`
	RunCmd      [][]string  `yaml:"runcmd"`
}

// refreshScript copies a renewed guest.conf from the (swapped) seed cdrom; see the package doc.
const refreshScript = `#!/bin/sh
# gpucloud: pick up a renewed session token from the seed disk.
set -e
dev=/dev/disk/by-label/cidata
[ -e "$dev" ] || exit 0
mnt=$(mktemp -d)
trap 'umount "$mnt" 2>/dev/null; rmdir "$mnt"' EXIT
mount -o ro "$dev" "$mnt"
if ! cmp -s "$mnt/gpucloud/guest.conf" /etc/gpucloud/guest.conf; then
  install -m 0600 "$mnt/gpucloud/guest.conf" /etc/gpucloud/guest.conf
fi
`

const refreshTimer = `[Unit]
Description=gpucloud session token refresh
[Timer]
OnBootSec=30s
OnUnitActiveSec=60s
[Install]
WantedBy=timers.target
`

const refreshService = `[Unit]
Description=gpucloud session token refresh
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/gpucloud-refresh-token
`

// UserData is the user-data document: gpucloud's #cloud-config alone, or, when the tenant gave
// user-data, a MIME multipart of both (cloud-init runs each part; the tenant's cloud-config is
// merged into ours with lists appended, so it cannot drop gpucloud's files).
func UserData(c Config) ([]byte, error) {
	own, err := cloudConfigDoc(c)
	if err != nil || c.UserData == "" {
		return own, err
	}
	return multipart(own, c.UserData)
}

// tenantMerge makes a tenant's cloud-config add to gpucloud's rather than replace its lists.
const tenantMerge = "list(append)+dict(no_replace,recurse_list)+str()"

func multipart(own []byte, tenant string) ([]byte, error) {
	var b bytes.Buffer
	w := mime.NewWriter(&b)
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=%q\nMIME-Version: 1.0\n\n", w.Boundary())
	part := func(typ string, body []byte, extra ...string) error {
		h := textproto.MIMEHeader{"Content-Type": {typ + `; charset="utf-8"`}, "MIME-Version": {"1.0"}}
		for i := 0; i+1 < len(extra); i += 2 {
			h.Set(extra[i], extra[i+1])
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			return err
		}
		_, err = pw.Write(body)
		return err
	}
	tenantType := "text/cloud-config"
	if strings.HasPrefix(tenant, "#!") {
		tenantType = "text/x-shellscript"
	}
	if err := part("text/cloud-config", own); err != nil {
		return nil, fmt.Errorf("seed: user-data: %w", err)
	}
	if err := part(tenantType, []byte(tenant), "Merge-Type", tenantMerge); err != nil {
		return nil, fmt.Errorf("seed: user-data: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("seed: user-data: %w", err)
	}
	return b.Bytes(), nil
}

// cloudConfigDoc is gpucloud's own #cloud-config document.
func cloudConfigDoc(c Config) ([]byte, error) {
	cc := cloudConfig{Hostname: c.Hostname, SSHAuthorizedKeys: c.SSHKeys}
	if len(c.SSHKeys) > 0 {
		no := false
		cc.DisableRoot = &no
	}
	cc.WriteFiles = []writeFile{
		{Path: "/etc/gpucloud/guest.conf", Permissions: "0600", Content: string(GuestConf(c))},
		{Path: "/usr/local/sbin/gpucloud-refresh-token", Permissions: "0755", Content: refreshScript},
		{Path: "/etc/systemd/system/gpucloud-refresh-token.service", Permissions: "0644", Content: refreshService},
		{Path: "/etc/systemd/system/gpucloud-refresh-token.timer", Permissions: "0644", Content: refreshTimer},
	}
	if c.Library != nil {
		cc.WriteFiles = append(cc.WriteFiles, writeFile{
			Path: "/usr/lib/gpucloud/libcuda.so.1", Permissions: "0755", Encoding: "b64",
			Content: base64.StdEncoding.EncodeToString(c.Library),
		})
		cc.RunCmd = append(cc.RunCmd,
			[]string{"sh", "-c", "for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do [ -d $d ] && ln -sf /usr/lib/gpucloud/libcuda.so.1 $d/libcuda.so.1 && ln -sf libcuda.so.1 $d/libcuda.so && break; done"},
			[]string{"ldconfig"})
	}
	cc.RunCmd = append(cc.RunCmd, []string{"systemctl", "enable", "--now", "gpucloud-refresh-token.timer"})
	out, err := yaml.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("seed: encode user-data: %w", err)
	}
	return append([]byte("#cloud-config\n"), out...), nil
}

// MetaData is the NoCloud meta-data document.
func MetaData(c Config) []byte {
	host := c.Hostname
	if host == "" {
		host = c.InstanceID
	}
	return []byte(fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", c.InstanceID, host))
}

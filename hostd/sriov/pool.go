package sriov

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ErrExhausted is returned when every VF of the host is allocated.
var ErrExhausted = errors.New("no free InfiniBand VF")

// Assignment is the VF an instance holds and the identity it has on the fabric.
type Assignment struct {
	InstanceID string           `json:"instance_id"`
	VF         VF               `json:"vf"`
	NodeGUID   net.HardwareAddr `json:"node_guid"`
	PortGUID   net.HardwareAddr `json:"port_guid"`
	PKey       uint16           `json:"pkey"`
}

// Pool hands out the host's VFs, one per instance. Each allocation is a claim file in StateDir
// named by the VF's PCI address, created before the VF is touched, so a hostd killed at any
// point finds on restart which VF belongs to whom; allocating again for the same instance
// returns its VF, so retries never take a second one.
type Pool struct {
	sysfsRoot string
	stateDir  string
	fabric    Fabric

	mu      sync.Mutex
	devices []Device
}

// NewPool discovers the devices under sysfsRoot. With enable true, devices with SR-IOV
// capability but no VFs get all of theirs enabled first.
func NewPool(ctx context.Context, sysfsRoot, stateDir string, fabric Fabric, enable bool) (*Pool, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("sriov: state dir: %w", err)
	}
	p := &Pool{sysfsRoot: sysfsRoot, stateDir: stateDir, fabric: fabric}
	devs, err := Discover(sysfsRoot)
	if err != nil {
		return nil, err
	}
	if enable {
		changed := false
		for _, d := range devs {
			if d.NumVFs == 0 && d.TotalVFs > 0 {
				if err := enableVFs(sysfsRoot, d); err != nil {
					return nil, err
				}
				changed = true
			}
		}
		if changed {
			if devs, err = Discover(sysfsRoot); err != nil {
				return nil, err
			}
		}
	}
	p.devices = devs
	return p, nil
}

func enableVFs(root string, d Device) error {
	path := filepath.Join(root, "class", "infiniband", d.Name, "device", "sriov_numvfs")
	if err := os.WriteFile(path, []byte(strconv.Itoa(d.TotalVFs)), 0o644); err != nil {
		return fmt.Errorf("sriov: enable %d VFs on %s: %w", d.TotalVFs, d.Name, err)
	}
	return nil
}

// Capacity is the number of VFs the host can give out in all.
func (p *Pool) Capacity() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, d := range p.devices {
		n += len(d.VFs)
	}
	return n
}

// Claims lists current assignments by instance id.
func (p *Pool) Claims() (map[string]Assignment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.claimsLocked()
}

func (p *Pool) claimsLocked() (map[string]Assignment, error) {
	entries, err := os.ReadDir(p.stateDir)
	if err != nil {
		return nil, fmt.Errorf("sriov: list claims: %w", err)
	}
	out := map[string]Assignment{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".claim") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p.stateDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("sriov: read claim %s: %w", e.Name(), err)
		}
		var a Assignment
		if err := json.Unmarshal(b, &a); err != nil || a.InstanceID == "" {
			return nil, fmt.Errorf("sriov: claim %s is corrupt (%q)", e.Name(), truncate(string(b)))
		}
		out[a.InstanceID] = a
	}
	return out, nil
}

// Allocate gives instanceID a VF in partition pkey, or returns the one it already has.
func (p *Pool) Allocate(ctx context.Context, instanceID string, pkey uint16) (Assignment, error) {
	if pkey == 0 || pkey > 0x7fff {
		return Assignment{}, fmt.Errorf("sriov: partition key 0x%04x out of range 0x0001-0x7fff", pkey)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	claims, err := p.claimsLocked()
	if err != nil {
		return Assignment{}, err
	}
	a, held := claims[instanceID]
	if !held {
		taken := map[string]bool{}
		for _, c := range claims {
			taken[c.VF.PCIAddress] = true
		}
		total := 0
		for _, d := range p.devices {
			for _, vf := range d.VFs {
				total++
				if !taken[vf.PCIAddress] && a.InstanceID == "" {
					node, port := GUIDs(instanceID)
					a = Assignment{InstanceID: instanceID, VF: vf, NodeGUID: node, PortGUID: port, PKey: pkey}
				}
			}
		}
		if a.InstanceID == "" {
			return Assignment{}, fmt.Errorf("sriov: instance %s: %w: all %d VFs of this host are allocated", instanceID, ErrExhausted, total)
		}
		if err := p.writeClaim(a, true); err != nil {
			return Assignment{}, err
		}
	} else if a.PKey != pkey {
		// The tenant's partition is fixed; a changed key is re-applied, not a new VF.
		a.PKey = pkey
		if err := p.writeClaim(a, false); err != nil {
			return Assignment{}, err
		}
	}
	if err := p.configure(ctx, a); err != nil {
		if !held {
			_ = os.Remove(p.claimPath(a.VF.PCIAddress)) // leave the host as it was
		}
		return Assignment{}, err
	}
	return a, nil
}

// configure is idempotent: GUIDs, partition and the vfio-pci binding are set every time.
func (p *Pool) configure(ctx context.Context, a Assignment) error {
	var netdev string
	for _, d := range p.devices {
		if d.Name == a.VF.Device {
			netdev = d.Netdev
		}
	}
	if err := p.fabric.SetVFGUIDs(ctx, netdev, a.VF.Index, a.NodeGUID, a.PortGUID); err != nil {
		return err
	}
	if err := p.fabric.SetPartition(ctx, a.PortGUID, a.PKey); err != nil {
		return err
	}
	return bindVFIO(p.sysfsRoot, a.VF.PCIAddress)
}

// Release frees the VF of instanceID; releasing an instance without one is not an error.
func (p *Pool) Release(instanceID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	claims, err := p.claimsLocked()
	if err != nil {
		return err
	}
	a, ok := claims[instanceID]
	if !ok {
		return nil
	}
	// The VF stays bound to vfio-pci: it is not handed back to the host's driver, so nothing on
	// the host starts using it between two VMs.
	if err := os.Remove(p.claimPath(a.VF.PCIAddress)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sriov: release %s: %w", a.VF.PCIAddress, err)
	}
	return nil
}

func (p *Pool) claimPath(pci string) string { return filepath.Join(p.stateDir, pci+".claim") }

// writeClaim records a claim atomically: written aside, then linked into place, so a hostd
// killed mid-write never leaves a half claim. With exclusive, an existing claim of the VF
// makes it fail (os.Link does not replace).
func (p *Pool) writeClaim(a Assignment, exclusive bool) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("sriov: encode claim: %w", err)
	}
	path := p.claimPath(a.VF.PCIAddress)
	if !exclusive {
		return writeFileAtomic(path, b)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("sriov: claim %s: %w", a.VF.PCIAddress, err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("sriov: claim %s: %w", a.VF.PCIAddress, err)
	}
	return nil
}

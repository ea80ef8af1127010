package virt

import (
	"fmt"
	"strings"
	"sync"

	"libvirt.org/go/libvirt"
)

var eventLoop sync.Once

// StartEventLoop runs libvirt's default event loop, which delivers domain events; it must be
// called before Open for the connection to receive them. The loop lives as long as the process.
func StartEventLoop() error {
	var err error
	eventLoop.Do(func() {
		if err = libvirt.EventRegisterDefaultImpl(); err != nil {
			err = fmt.Errorf("virt: register event loop: %w", err)
			return
		}
		go func() {
			for {
				if err := libvirt.EventRunDefaultImpl(); err != nil {
					return
				}
			}
		}()
	})
	return err
}

// OnLifecycle calls f with the domain name whenever one of hostd's domains starts, stops,
// crashes or is (un)defined, so the reconciler can react at once rather than at its next tick.
// Callbacks end with Close.
func (h *Hypervisor) OnLifecycle(f func(name string)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	id, err := h.conn.DomainEventLifecycleRegister(nil, func(_ *libvirt.Connect, d *libvirt.Domain, _ *libvirt.DomainEventLifecycle) {
		if name, err := d.GetName(); err == nil && strings.HasPrefix(name, NamePrefix) {
			f(name)
		}
	})
	if err != nil {
		return fmt.Errorf("virt: subscribe to lifecycle events: %w", err)
	}
	h.callbacks = append(h.callbacks, id)
	return nil
}

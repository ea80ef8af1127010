package virt

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"libvirt.org/go/libvirt"
)

// ErrConsoleBusy is returned when another session holds the domain's serial console.
var ErrConsoleBusy = errors.New("the serial console is in use by another session")

// ErrConsoleUnsupported is returned where the libvirt driver cannot open consoles (the test
// driver).
var ErrConsoleUnsupported = errors.New("this hypervisor cannot open serial consoles")

// OpenConsole attaches to the running domain's first serial console (a pty whose output is also
// logged to the console log): what is written goes to the guest's ttyS0, what the guest prints
// comes back. A second open while one is held fails with ErrConsoleBusy (no "force": a session
// is never taken over silently).
func (h *Hypervisor) OpenConsole(name string) (io.ReadWriteCloser, error) {
	var out io.ReadWriteCloser
	err := h.with(name, func(d *libvirt.Domain) error {
		st, err := h.conn.NewStream(0)
		if err != nil {
			return fmt.Errorf("virt: console stream for %s: %w", name, err)
		}
		if err := d.OpenConsole("", st, libvirt.DOMAIN_CONSOLE_SAFE); err != nil {
			st.Free()
			var lerr libvirt.Error
			if errors.As(err, &lerr) {
				switch lerr.Code {
				case libvirt.ERR_NO_SUPPORT:
					return fmt.Errorf("virt: console of %s: %w", name, ErrConsoleUnsupported)
				case libvirt.ERR_OPERATION_FAILED:
					// "Active console session exists for this domain"
					return fmt.Errorf("virt: console of %s: %w (%s)", name, ErrConsoleBusy, lerr.Message)
				}
			}
			return fmt.Errorf("virt: open console of %s: %w", name, err)
		}
		out = &consoleStream{st: st}
		return nil
	})
	return out, err
}

// consoleStream is a libvirt stream as an io.ReadWriteCloser. Close aborts the stream, which
// wakes a Read blocked in another goroutine.
type consoleStream struct {
	st   *libvirt.Stream
	once sync.Once
	err  error
}

func (c *consoleStream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return c.st.Recv(p)
}

func (c *consoleStream) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := c.st.Send(p[written:])
		if err != nil {
			return written, err
		}
		written += n
	}
	return written, nil
}

func (c *consoleStream) Close() error {
	c.once.Do(func() {
		c.err = c.st.Abort()
		if err := c.st.Free(); c.err == nil {
			c.err = err
		}
	})
	return c.err
}

package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"gpucloud/sdk"
)

// escapeHelp tells the user how to leave an interactive console.
const escapeHelp = "Ctrl+] (as virsh console) or ~. at the start of a line (as ssh)"

// interactiveConsole attaches the terminal to the instance's serial console until the user types
// the escape, the server ends the session or ctx ends. A terminal on In is put into raw mode
// (every key goes to the guest, Ctrl+C included) and restored on the way out.
func (a *app) interactiveConsole(ctx context.Context, cl *sdk.Client, id string) error {
	in := a.io.In
	if in == nil {
		in = os.Stdin
	}
	con, err := cl.OpenConsole(ctx, id)
	if err != nil {
		return err
	}
	defer con.Close()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return fmt.Errorf("raw terminal: %w", err)
		}
		defer term.Restore(int(f.Fd()), old)
	}
	fmt.Fprintf(a.io.Err, "Connected to the serial console of %s. Leave with %s.\r\n", id, escapeHelp)
	output := make(chan struct{})
	go func() {
		defer close(output)
		io.Copy(a.io.Out, con)
	}()
	input := make(chan error, 1)
	go func() {
		var esc escapeFilter
		buf := make([]byte, 1024)
		for {
			n, err := in.Read(buf)
			send, quit := esc.feed(buf[:n])
			if len(send) > 0 {
				if _, werr := con.Write(send); werr != nil {
					input <- werr
					return
				}
			}
			if quit || err != nil {
				input <- nil
				return
			}
		}
	}()
	reason := "you left"
	select {
	case <-input:
	case <-output:
		reason = "the server closed it: " + con.Closed()
	case <-ctx.Done():
		reason = "interrupted"
	}
	con.Close()
	fmt.Fprintf(a.io.Err, "\r\nConsole session ended (%s).\r\n", reason)
	return nil
}

// escapeFilter passes keystrokes to the console until the user types an escape: Ctrl+] anywhere,
// or "~." at the start of a line ("~~" there sends one "~").
type escapeFilter struct {
	midLine bool // not at the start of a line
	tilde   bool // a "~" at the start of a line is held back
}

// feed returns what of in goes to the console, and whether the user asked to leave (what came
// before the escape is still sent).
func (e *escapeFilter) feed(in []byte) (send []byte, quit bool) {
	for _, b := range in {
		if b == 0x1d { // Ctrl+]
			return send, true
		}
		if e.tilde {
			e.tilde = false
			switch b {
			case '.':
				return send, true
			case '~':
				send = append(send, '~')
				e.midLine = true
				continue
			}
			send = append(send, '~')
			e.midLine = true
		}
		if !e.midLine && b == '~' {
			e.tilde = true
			continue
		}
		send = append(send, b)
		e.midLine = b != '\r' && b != '\n'
	}
	return send, false
}

package sdk

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/websocket"
)

// ConsoleTicket opens one interactive console session, once, before it expires.
type ConsoleTicket struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
	URL       string    `json:"url"` // path and query of the WebSocket on the API's host
}

// CreateConsoleTicket asks for a ticket to instance id's interactive serial console.
func (c *Client) CreateConsoleTicket(ctx context.Context, id string) (ConsoleTicket, error) {
	return do[ConsoleTicket](ctx, c, request{op: opConsoleTicket, args: []string{id}})
}

// Console is an open interactive serial console: Write sends keystrokes to the guest's serial
// port, Read returns what the guest prints, io.EOF once the session has ended (Closed says why).
type Console struct {
	ws      *websocket.Conn
	pending []byte
	closed  string
}

// consoleFrame is one frame with its kind: text frames carry the server's control messages,
// binary frames the terminal's bytes.
type consoleFrame struct {
	text bool
	data []byte
}

var consoleCodec = websocket.Codec{
	Marshal: func(v any) ([]byte, byte, error) { return v.([]byte), websocket.BinaryFrame, nil },
	Unmarshal: func(data []byte, payloadType byte, v any) error {
		*v.(*consoleFrame) = consoleFrame{text: payloadType == websocket.TextFrame, data: data}
		return nil
	},
}

// consoleControl is a text frame: the outcome of the open (status), or why the session closed.
type consoleControl struct {
	APIError
	Closed string `json:"closed"`
}

func (s *Console) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		var f consoleFrame
		if err := consoleCodec.Receive(s.ws, &f); err != nil {
			if s.closed == "" {
				s.closed = "connection-lost"
			}
			return 0, io.EOF
		}
		if f.text {
			var m consoleControl
			if json.Unmarshal(f.data, &m) == nil && m.Closed != "" {
				s.closed = m.Closed
			}
			continue
		}
		s.pending = f.data
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

func (s *Console) Write(p []byte) (int, error) {
	if err := consoleCodec.Send(s.ws, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the session.
func (s *Console) Close() error { return s.ws.Close() }

// Closed is why the server ended the session (idle-timeout, console-closed: the VM stopped,
// frame-too-large, ended), once Read has returned io.EOF; "" while it is open.
func (s *Console) Closed() string { return s.closed }

// OpenConsole opens instance id's interactive serial console. One session per instance: a
// second is refused (409 console-busy) while the first is open. Errors are *APIError as for
// any call.
func (c *Client) OpenConsole(ctx context.Context, id string) (*Console, error) {
	t, err := c.CreateConsoleTicket(ctx, id)
	if err != nil {
		return nil, err
	}
	path, err := opOpenConsole.expand(id)
	if err != nil {
		return nil, err
	}
	u := *c.base
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += path
	u.RawQuery = url.Values{"ticket": {t.Ticket}}.Encode()
	cfg, err := websocket.NewConfig(u.String(), c.base.String())
	if err != nil {
		return nil, fmt.Errorf("sdk: console URL: %w", err)
	}
	cfg.Header.Set("User-Agent", c.agent)
	if tr, ok := c.http.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
		cfg.TlsConfig = tr.TLSClientConfig.Clone()
	} else if u.Scheme == "wss" {
		cfg.TlsConfig = &tls.Config{}
	}
	ws, err := cfg.DialContext(ctx)
	if err != nil {
		var de *websocket.DialError
		if errors.As(err, &de) && de.Err == websocket.ErrBadStatus {
			// Only an unknown, used or expired ticket, or a foreign page's Origin, is refused here.
			return nil, &APIError{Status: http.StatusUnauthorized, Type: "unauthenticated", Title: "Unauthenticated",
				Detail: "the console's WebSocket was refused (ticket used or expired)", Method: opOpenConsole.Method, Path: path}
		}
		return nil, fmt.Errorf("sdk: open console: %w", err)
	}
	var first consoleFrame
	if err := consoleCodec.Receive(ws, &first); err != nil || !first.text {
		ws.Close()
		return nil, fmt.Errorf("sdk: open console: no status from the server (%v)", err)
	}
	var st consoleControl
	if err := json.Unmarshal(first.data, &st); err != nil {
		ws.Close()
		return nil, fmt.Errorf("sdk: open console: status: %w", err)
	}
	if st.Status != http.StatusOK {
		ws.Close()
		st.APIError.Method, st.APIError.Path = opOpenConsole.Method, path
		return nil, &st.APIError
	}
	return &Console{ws: ws}, nil
}

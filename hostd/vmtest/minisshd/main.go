// Command minisshd is a test appliance, not a product: the smallest SSH server that lets the
// real-VM tests log in to their busybox guest with a tenant's key. It accepts the public keys of
// an authorized_keys file, generates a fresh host key at start, and runs each "exec" request
// with busybox sh, returning its output and exit status. No shells, no PTYs, no forwarding.
package main

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"

	"golang.org/x/crypto/ssh"
)

func main() {
	keysFile := flag.String("authorized-keys", "/root/.ssh/authorized_keys", "public keys allowed to log in")
	listen := flag.String("listen", ":22", "address to listen on")
	shell := flag.String("shell", "/bin/busybox", "busybox binary that runs commands (sh -c)")
	flag.Parse()
	allowed, err := readKeys(*keysFile)
	if err != nil {
		log.Fatal(err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		log.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if allowed[string(k.Marshal())] {
			return nil, nil
		}
		return nil, errors.New("key not authorized")
	}}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("minisshd: listening on %s with %d key(s)\n", *listen, len(allowed))
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, cfg, *shell)
	}
}

func readKeys(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, _, _, _, err := ssh.ParseAuthorizedKey(sc.Bytes()); err == nil {
			out[string(k.Marshal())] = true
		}
	}
	return out, nil
}

func serve(nc net.Conn, cfg *ssh.ServerConfig, shell string) {
	_, chans, reqs, err := ssh.NewServerConn(nc, cfg)
	if err != nil {
		nc.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	for nch := range chans {
		if nch.ChannelType() != "session" {
			nch.Reject(ssh.UnknownChannelType, "sessions only")
			continue
		}
		ch, creqs, err := nch.Accept()
		if err != nil {
			continue
		}
		go session(ch, creqs, shell)
	}
}

func session(ch ssh.Channel, reqs <-chan *ssh.Request, shell string) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			req.Reply(false, nil)
			continue
		}
		var p struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			req.Reply(false, nil)
			continue
		}
		req.Reply(true, nil)
		cmd := exec.Command(shell, "sh", "-c", p.Command)
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		code := uint32(0)
		if err := cmd.Run(); err != nil {
			code = 1
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = uint32(ee.ExitCode())
			}
		}
		ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{code}))
		return
	}
}

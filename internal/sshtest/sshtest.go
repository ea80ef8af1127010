// Package sshtest makes SSH key pairs for tests: the signer a client logs in with, the public
// key's authorized_keys line and its fingerprint as OpenSSH prints it.
package sshtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Key is a fresh ed25519 key pair.
type Key struct {
	Signer      ssh.Signer
	Line        string // "ssh-ed25519 AAAA... comment"
	Fingerprint string // "SHA256:..."
}

// New makes a key whose authorized_keys line ends with comment.
func New(t testing.TB, comment string) Key {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return Key{Signer: s, Line: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey()))) + " " + comment,
		Fingerprint: ssh.FingerprintSHA256(s.PublicKey())}
}

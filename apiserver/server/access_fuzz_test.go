package server

import (
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// FuzzParseSSHKey: whatever a tenant sends, an accepted key is one line that OpenSSH's parser
// reads back to the same fingerprint, and the normalized line is stable when parsed again.
func FuzzParseSSHKey(f *testing.F) {
	for _, s := range []string{"", "hello", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl a@b",
		"command=\"x\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl", "ssh-rsa AAAA\nssh-rsa BBBB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		norm, fp, ok := parseSSHKey(in)
		if !ok {
			return
		}
		if strings.ContainsAny(norm, "\n\r\x00\"'\\") {
			t.Fatalf("accepted key spans lines or carries quotes: %q", norm)
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(norm))
		if err != nil || ssh.FingerprintSHA256(pub) != fp {
			t.Fatalf("normalized %q does not parse back to %s: %v", norm, fp, err)
		}
		if again, fp2, ok := parseSSHKey(norm); !ok || again != norm || fp2 != fp {
			t.Fatalf("normalizing %q again gives %q", norm, again)
		}
	})
}

// FuzzUserData: accepted user-data is at most 16 KiB, starts as cloud-init expects, has no NUL.
func FuzzUserData(f *testing.F) {
	for _, s := range []string{"#!/bin/sh\necho hi\n", "#cloud-config\npackages: [htop]\n", "#cloud-config\n: [", "echo hi", "#cloud-config\n- a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		why, ok := validUserData(in)
		if !ok {
			if why == "" {
				t.Fatalf("refused %q without a reason", in)
			}
			return
		}
		if len(in) > maxUserDataBytes || strings.ContainsRune(in, 0) ||
			!(strings.HasPrefix(in, "#!") || strings.HasPrefix(in, "#cloud-config")) {
			t.Fatalf("accepted %q", in)
		}
	})
}

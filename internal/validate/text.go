// Package validate holds the input rules shared by the control plane and the agents, so that
// what the apiserver accepts is what hostd will act on: names, base image names, free text shown
// to people, and the checks every decoded JSON request body gets (NUL bytes, integer ranges,
// required fields).
package validate

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// NameRule describes Name's syntax, for error messages.
const NameRule = "1-63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit"

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Name checks the name of a tenant, instance, instance type, host or GPU server: a DNS label.
func Name(s string) error {
	if !namePattern.MatchString(s) {
		return fmt.Errorf("%q is not a name: %s", s, NameRule)
	}
	return nil
}

// ImageRule describes Image's syntax, for error messages.
const ImageRule = "1-63 characters: lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"

var imagePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// Image checks a base image name. hostd opens <images dir>/<name>.qcow2, so the name must not
// reach outside that folder: no '/', no leading '.', no control characters.
func Image(s string) error {
	if !imagePattern.MatchString(s) {
		return fmt.Errorf("%q is not a base image name: %s", s, ImageRule)
	}
	return nil
}

// Label checks free text shown to people (an API key's name): valid UTF-8 of at most max bytes,
// without control characters (an ESC or CR/LF rewrites a terminal or a log line) or the
// bidirectional controls that make text read differently from what it is (U+202A-U+202E,
// U+2066-U+2069, and the marks U+200E, U+200F, U+061C).
func Label(s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("is %d bytes, at most %d", len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("is not valid UTF-8")
	}
	if i := strings.IndexFunc(s, forbiddenInLabel); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("contains the control character %U at byte %d", r, i)
	}
	return nil
}

func forbiddenInLabel(r rune) bool {
	return unicode.IsControl(r) || isBidiControl(r)
}

func isBidiControl(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}

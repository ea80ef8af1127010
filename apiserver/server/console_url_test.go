package server

import "testing"

func TestValidConsoleURL(t *testing.T) {
	for u, want := range map[string]bool{
		"":                                      true,
		"ws://10.0.0.5:9103":                    true,
		"wss://host-1.example:9103/":            true,
		"http://10.0.0.5:9103":                  false,
		"ws://":                                 false,
		"ws://h:1/v1/console/":                  false,
		"ws://user:pw@h:1":                      false,
		"ws://h:1?x=1":                          false,
		"wss://h:1#frag":                        false,
		"ws://h:1/" + string(make([]byte, 600)): false,
	} {
		if got := validConsoleURL(u); got != want {
			t.Errorf("validConsoleURL(%q) = %v, want %v", u, got, want)
		}
	}
}

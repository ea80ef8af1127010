package validate

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestUTF8JSONNamesTheField(t *testing.T) {
	for body, want := range map[string]string{
		"{\"name\":\"a\xff\"}": "name",
		"{\"a\":1,\"gpus\":[{\"name\":\"x\"},{\"name\":\"\xff\"}]}": "gpus[1].name",
		"[\"a\",\"\xff\"]":                     "[1]",
		"{\"\xff\":1}":                         "<key>",
		"{\"o\":{\"k\":\"v\"},\"p\":\"\xfe\"}": "p",
		"\"\xff\"":                             "body",
	} {
		err := UTF8JSON([]byte(body))
		if err == nil || err.Field != want {
			t.Errorf("%q: %v, want the field %s", body, err, want)
		}
	}
	if err := UTF8JSON([]byte(`{"name":"Zoë ✓"}`)); err != nil {
		t.Errorf("valid UTF-8 refused: %v", err)
	}
}

type inner struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

type req struct {
	Key    string            `json:"key"`
	Count  int               `json:"count"`
	Big    int64             `json:"big"`
	Bytes  uint64            `json:"bytes"`
	Items  []inner           `json:"items"`
	Labels map[string]string `json:"labels"`
	Need   *int              `json:"need" validate:"required"`
}

func TestDecodedNamesTheField(t *testing.T) {
	for body, want := range map[string]string{
		`{"key":"a\u0000b","need":1}`:                   "key",
		`{"count":4294967296,"need":1}`:                 "count",
		`{"count":-2147483649,"need":1}`:                "count",
		`{"bytes":18446744073709551615,"need":1}`:       "bytes",
		`{"items":[{"n":1},{"n":9999999999}],"need":1}`: "items[1].n",
		`{"items":[{"name":"\u0000"}],"need":1}`:        "items[0].name",
		`{"labels":{"k":"\u0000"},"need":1}`:            "labels.k",
		`{}`:                                            "need",
		`{"need":null}`:                                 "need",
	} {
		var r req
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		err := Decoded(&r)
		if err == nil || err.Field != want {
			t.Errorf("%s: %v, want the field %s", body, err, want)
		}
	}
	var r req
	json.Unmarshal([]byte(`{"key":"k","count":2147483647,"big":9223372036854775807,"bytes":9223372036854775807,"need":0}`), &r)
	if err := Decoded(&r); err != nil {
		t.Errorf("in-range values refused: %v", err)
	}
}

func TestNameImageLabel(t *testing.T) {
	for _, ok := range []string{"a", "vm-1", "0", strings.Repeat("a", 63)} {
		if Name(ok) != nil {
			t.Errorf("name %q refused", ok)
		}
	}
	for _, bad := range []string{"", "-", "--", "-a", "a-", "A", "a_b", "a.b", strings.Repeat("a", 64), "a\x00"} {
		if Name(bad) == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	for _, ok := range []string{"demo", "ubuntu-24.04", "img_2"} {
		if Image(ok) != nil {
			t.Errorf("image %q refused", ok)
		}
	}
	for _, bad := range []string{"", "../../../../etc/passwd", "DEMO", "a/b", ".hidden", "demo\n", "demo\x1b", strings.Repeat("a", 64)} {
		if Image(bad) == nil {
			t.Errorf("image %q accepted", bad)
		}
	}
	for _, ok := range []string{"", "laptop key", "clé ✓"} {
		if Label(ok, 100) != nil {
			t.Errorf("label %q refused", ok)
		}
	}
	for _, bad := range []string{"\x1b[31mred", "a\r\nb", "evil\u202egnp.exe", "x\u2066y", "\xff", strings.Repeat("a", 101)} {
		if Label(bad, 100) == nil {
			t.Errorf("label %q accepted", bad)
		}
	}
}

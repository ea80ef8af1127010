package validate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// UTF8JSON refuses a JSON body holding bytes that are not UTF-8, naming the field they are in.
// encoding/json would quietly turn them into U+FFFD, storing something other than what was sent.
func UTF8JSON(body []byte) *FieldError {
	if utf8.Valid(body) {
		return nil
	}
	bad := 0
	for bad < len(body) {
		r, size := utf8.DecodeRune(body[bad:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		bad += size
	}
	return &FieldError{fieldAt(body, int64(bad)), fmt.Sprintf("is not valid UTF-8 (byte %d)", bad)}
}

// fieldAt is the JSON path of the value holding byte offset of body, or "body".
func fieldAt(body []byte, offset int64) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	type level struct {
		object bool
		key    string
		index  int
		want   bool // object: the next string token is a key
	}
	var stack []level
	path := func() string {
		p := ""
		for _, l := range stack {
			if l.object {
				p = join(p, l.key)
			} else {
				p += "[" + strconv.Itoa(l.index-1) + "]"
			}
		}
		return p
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "body"
		}
		past := dec.InputOffset() > offset
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			if past {
				return orBody(path())
			}
			stack = stack[:len(stack)-1]
			continue
		}
		// Place the token: an object's key, or the value of the key or array slot it fills.
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			switch {
			case top.object && top.want:
				if past {
					return join(path(), "<key>")
				}
				top.key, top.want = tok.(string), false
				continue
			case top.object:
				top.want = true
			default:
				top.index++
			}
		}
		if past {
			return orBody(path())
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, level{object: d == '{', want: d == '{'})
		}
	}
}

// JSONObject refuses a body that is not UTF-8 or not a JSON object: `null` would decode into a
// request struct as "nothing set" and pass as an empty request.
func JSONObject(body []byte) *FieldError {
	if err := UTF8JSON(body); err != nil {
		return err
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] != '{' {
		return &FieldError{"body", "must be a JSON object"}
	}
	return nil
}

package usage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"gpucloud/api"
)

func rec(seq int) api.UsageRecord {
	return api.UsageRecord{ID: fmt.Sprintf("gs1/s1/%d", seq), Kind: api.UsageGPU, Source: "gs1", TenantID: "t1"}
}

func TestAppendSurvivesReopenAndTornTail(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := l.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Append(func(int) api.UsageRecord { return rec(2) }); err == nil {
		t.Fatal("duplicate id accepted")
	}
	l.Close()
	// A crash mid-append leaves a partial line.
	f, _ := os.OpenFile(filepath.Join(dir, FileName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"id":"gs1/s1/4","ki`)
	f.Close()

	l, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Len() != 3 || l.Next() != 4 {
		t.Fatalf("after reopen: %d records, next %d", l.Len(), l.Next())
	}
	if _, err := l.Append(rec); err != nil {
		t.Fatal(err)
	}
	after, err := l.After("gs1/s1/2")
	if err != nil || len(after) != 2 || after[1].ID != "gs1/s1/4" {
		t.Fatalf("After(2) = %v, %v", after, err)
	}
	if _, err := l.After("nope"); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("unknown id: %v", err)
	}
}

func TestOpenRefusesCorruptLog(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, FileName), []byte("{\"id\":\"a\"}\nnot json\n"), 0o600)
	if _, err := Open(dir); err == nil {
		t.Fatal("corrupt line accepted")
	}
}

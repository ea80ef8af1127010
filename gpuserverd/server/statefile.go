package server

import (
	"fmt"
	"os"
)

// replaceFile replaces the state file at path with b: written aside, fsync'd and renamed, so a
// crash leaves the old content or the new, never half. Only this server's user may read it.
func replaceFile(path string, b []byte) error {
	f, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}

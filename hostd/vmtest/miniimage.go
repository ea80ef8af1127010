package vmtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// MiniLibs are the gpucloud libraries baked into the mini image (Cudart and Audit optional).
type MiniLibs struct {
	Cuda, Cudart, Audit string
}

// MiniImageName is the image build-mini.sh writes by default.
const MiniImageName = "gpucloud-mini"

// MiniImage builds deploy/guest-image/build-mini.sh's image with libs into cacheDir/img-<hash>,
// hash covering the script, the files it installs and the libraries, and returns that dir (it
// holds gpucloud-mini.{qcow2,vmlinuz,initrd,cmdline}). A later call with the same inputs reuses
// it; Debian's packages stay in cacheDir/debs between builds; images of other inputs are removed.
func MiniImage(ctx context.Context, repo, cacheDir string, libs MiniLibs) (string, error) {
	gi := filepath.Join(repo, "deploy", "guest-image")
	inputs := []string{filepath.Join(gi, "build-mini.sh"), filepath.Join(gi, "install-loader.sh"),
		filepath.Join(repo, "gpuserverd", "guest", "loader", "gpucloud-info")}
	mini, _ := filepath.Glob(filepath.Join(gi, "mini", "*"))
	sort.Strings(mini)
	inputs = append(inputs, mini...)
	args := []string{"-l", libs.Cuda}
	inputs = append(inputs, libs.Cuda)
	if libs.Cudart != "" {
		args, inputs = append(args, "-r", libs.Cudart), append(inputs, libs.Cudart)
	}
	if libs.Audit != "" {
		args, inputs = append(args, "-a", libs.Audit), append(inputs, libs.Audit)
	}
	sum, err := hashFiles(inputs)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cacheDir, "img-"+sum[:16])
	if fileExists(filepath.Join(dir, MiniImageName+".qcow2")) {
		return dir, nil
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, "build.lock")) // as BuildGuest
	if err != nil {
		return "", err
	}
	defer unlock()
	if fileExists(filepath.Join(dir, MiniImageName+".qcow2")) {
		return dir, nil // another test process built it meanwhile
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, filepath.Join(gi, "build-mini.sh"), append(args, "-o", tmp, "-c", filepath.Join(cacheDir, "debs"))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("vmtest: build-mini.sh: %w\n%s", err, out)
	}
	old, _ := filepath.Glob(filepath.Join(cacheDir, "img-*"))
	for _, o := range old {
		if o != tmp {
			os.RemoveAll(o)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("vmtest: %w", err)
	}
	return dir, nil
}

// hashFiles is the SHA-256 of the files' names (base names: the checkout's place does not
// matter) and contents, in order.
func hashFiles(paths []string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("vmtest: %w", err)
		}
		fmt.Fprintf(h, "%s\x00", filepath.Base(p))
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("vmtest: %w", err)
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

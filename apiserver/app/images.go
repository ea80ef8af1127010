package app

import (
	"context"
	"errors"
	"fmt"

	"gpucloud/apiserver/store"
	"gpucloud/hostd/images"
	"gpucloud/internal/authn"
)

// EnsureImage registers the image file at path under name (source file://path, its SHA-256),
// unless an image of that name with those bytes is already registered; one with other bytes is
// retired and replaced. The local stack and test harnesses use it for the images they make.
func EnsureImage(ctx context.Context, st *store.Store, name, path string, minDiskGiB int, guestLibraries bool) (store.Image, error) {
	ctx = authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"})
	sum, err := images.HashFile(path)
	if err != nil {
		return store.Image{}, err
	}
	old, err := st.ImageByName(ctx, name)
	switch {
	case err == nil && old.SHA256 == sum:
		return old, nil
	case err == nil:
		if err := st.DeleteImage(ctx, old.ID); err != nil {
			return store.Image{}, err
		}
	case !errors.Is(err, store.ErrNotFound):
		return store.Image{}, err
	}
	m := store.Image{Name: name, Source: "file://" + path, SHA256: sum, MinDiskGiB: minDiskGiB, GuestLibraries: guestLibraries}
	if err := st.CreateImage(ctx, &m); err != nil {
		return store.Image{}, fmt.Errorf("register image %s: %w", name, err)
	}
	return m, nil
}

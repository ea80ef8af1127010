// Package web is the gpucloud console: static HTML, CSS and JavaScript (no build step) embedded
// into the apiserver binary, which serves it at / and /console/. The console talks to the public
// REST API only, signed in with a session cookie (see apiserver/server/websession.go).
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var files embed.FS

// Assets is the console's file tree: index.html at its root, the rest beside it.
func Assets() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic("web: embedded static tree: " + err.Error()) // cannot happen: the directory is embedded
	}
	return sub
}

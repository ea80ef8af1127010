package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/problem"
	"gpucloud/web"
)

// Browser sessions for the web console. The session cookie is HttpOnly; the CSRF token is both
// returned at sign-in and kept in a readable cookie, and every unsafe request authenticated by
// the cookie must echo it in X-CSRF-Token (double submit: another site can make the browser send
// the cookie, but cannot read it to set the header). API keys (Authorization: Bearer) are
// unaffected: a request with that header never looks at cookies.
const (
	sessionCookie = "gpucloud_session"
	csrfCookie    = "gpucloud_csrf"
	csrfHeader    = "X-CSRF-Token"
	sessionTTL    = 12 * time.Hour
	minPassword   = 10
	maxPassword   = 72 // bcrypt ignores bytes past 72
)

// LoginRequest signs in with e-mail and password.
type LoginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

// Session is a signed-in browser, as the console sees it.
type Session struct {
	User      store.User `json:"user"`
	CSRFToken string     `json:"csrf_token"`
	ExpiresAt time.Time  `json:"expires_at"`
}

// SetPasswordRequest sets a user's password; current_password is required when users change
// their own password and already have one.
type SetPasswordRequest struct {
	CurrentPassword string `json:"current_password,omitempty"`
	NewPassword     string `json:"new_password"`
}

// webRoutes adds sign-in, sign-out and passwords (documented) and the console's static files.
func (s *Server) webRoutes(r *gin.Engine, v1 *gin.RouterGroup) {
	r.POST("/v1/session", s.handle(s.login))
	r.DELETE("/v1/session", s.handle(s.logout))
	v1.PUT("/users/:id/password", s.handle(s.setPassword))
	s.doc.Op(http.MethodPost, "/v1/session", "signIn", "Sign in with e-mail and password; sets the session cookie (console)", "accounts", LoginRequest{}, Session{}, http.StatusCreated)
	s.doc.Op(http.MethodDelete, "/v1/session", "signOut", "Sign out the cookie's session (X-CSRF-Token required)", "accounts", nil, nil, http.StatusNoContent)
	s.doc.Op(http.MethodPut, "/v1/users/{id}/password", "setPassword", "Set a user's console password (self, their tenant admin, operators)", "accounts", SetPasswordRequest{}, nil, http.StatusNoContent)

	r.GET("/", func(c *gin.Context) {
		consoleHeaders(c)
		c.FileFromFS("/", http.FS(web.Assets()))
	})
	r.GET("/console/*filepath", s.consoleFile)
}

// consoleFile serves one of the console's files. Anything else (a directory, a path with "..",
// a missing file) is the same problem+json 404 as every unknown path: http.FileServer would
// answer some of them itself, in text/plain.
func (s *Server) consoleFile(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("filepath"), "/")
	assets := web.Assets()
	f, err := assets.Open(name)
	if !fs.ValidPath(name) || name == "." || err != nil {
		s.fail(c, notFound("no such file"))
		return
	}
	defer f.Close()
	info, err := f.Stat()
	rs, seekable := f.(io.ReadSeeker)
	if err != nil || info.IsDir() || !seekable {
		s.fail(c, notFound("no such file")) // no directory listings
		return
	}
	consoleHeaders(c)
	http.ServeContent(c.Writer, c.Request, name, info.ModTime(), rs)
}

func consoleHeaders(c *gin.Context) {
	c.Header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	c.Header("X-Content-Type-Options", "nosniff")
	c.Header("Referrer-Policy", "same-origin")
}

// cookieAuth authenticates a request without an Authorization header by its session cookie. It
// reports false when there is no cookie (the caller then asks for a bearer key); otherwise it has
// either failed the request or run the rest of the chain.
func (s *Server) cookieAuth(c *gin.Context) bool {
	secret, err := c.Cookie(sessionCookie)
	if err != nil || secret == "" {
		return false
	}
	cred, err := s.store.AuthenticateWebSession(c.Request.Context(), secret, c.GetHeader(csrfHeader), unsafeMethod(c.Request.Method))
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.fail(c, unauthenticated("the session has expired or was signed out; sign in again"))
	case errors.Is(err, store.ErrCSRF):
		s.fail(c, forbidden("cookie-authenticated "+c.Request.Method+" requests need the "+csrfHeader+" header from sign-in"))
	case err != nil:
		s.fail(c, err)
	default:
		c.Request = c.Request.WithContext(authn.WithPrincipal(c.Request.Context(), cred.Principal))
		c.Next()
	}
	return true
}

func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

func (s *Server) login(c *gin.Context) error {
	// A JSON content type cannot be sent cross-site without a CORS preflight, which this server
	// never grants, so another site cannot sign a browser into an account of its choosing.
	if mt, _, _ := mime.ParseMediaType(c.GetHeader("Content-Type")); mt != "application/json" {
		return problem.New(http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported media type", "sign-in takes application/json")
	}
	var req LoginRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	var f fields
	f.check(req.Email != "" && len(req.Email) <= 254, "email", "required")
	f.check(req.Password != "" && len(req.Password) <= 1024, "password", "required")
	if err := f.err(); err != nil {
		return err
	}
	source := c.ClientIP() // the peer, or what a trusted proxy says (Options.TrustedProxies)
	if wait := s.logins.blocked(source, req.Email, time.Now()); wait > 0 {
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		return problem.New(http.StatusTooManyRequests, "too-many-sign-ins", "Too many sign-in attempts",
			fmt.Sprintf("too many wrong passwords from this address (%d for one e-mail or %d in all in %v); try again in %v",
				loginMaxFailures, loginMaxPerSource, loginWindow, wait.Round(time.Second)))
	}
	u, err := s.store.CheckPassword(c.Request.Context(), req.Email, req.Password)
	if errors.Is(err, store.ErrBadPassword) {
		s.logins.fail(source, req.Email, time.Now())
		return problem.Validation(problem.FieldError{Field: "password", Reason: err.Error()})
	}
	if err != nil {
		return err
	}
	s.logins.succeed(source, req.Email)
	ws, err := s.store.CreateWebSession(c.Request.Context(), u, sessionTTL)
	if err != nil {
		return err
	}
	secure := c.Request.TLS != nil
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookie, Value: ws.Secret, Path: "/", Expires: ws.ExpiresAt,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode})
	http.SetCookie(c.Writer, &http.Cookie{Name: csrfCookie, Value: ws.CSRFToken, Path: "/", Expires: ws.ExpiresAt,
		Secure: secure, SameSite: http.SameSiteStrictMode})
	c.JSON(http.StatusCreated, Session{User: u, CSRFToken: ws.CSRFToken, ExpiresAt: ws.ExpiresAt})
	return nil
}

func (s *Server) logout(c *gin.Context) error {
	secret, err := c.Cookie(sessionCookie)
	if err != nil || secret == "" {
		return unauthenticated("no session cookie")
	}
	if _, err := s.store.AuthenticateWebSession(c.Request.Context(), secret, c.GetHeader(csrfHeader), true); err != nil {
		if errors.Is(err, store.ErrCSRF) {
			return forbidden("sign-out needs the " + csrfHeader + " header")
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	} else if err := s.store.DeleteWebSession(c.Request.Context(), secret); err != nil {
		return err
	}
	for _, name := range []string{sessionCookie, csrfCookie} {
		http.SetCookie(c.Writer, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1})
	}
	c.Status(http.StatusNoContent)
	return nil
}

func (s *Server) setPassword(c *gin.Context) error {
	if principal(c).Role == authn.RoleDaemon {
		return forbidden("daemons have no passwords")
	}
	u, err := s.visibleUser(c)
	if err != nil {
		return err
	}
	var req SetPasswordRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	var f fields
	f.check(len(req.NewPassword) >= minPassword && len(req.NewPassword) <= maxPassword, "new_password", "10-72 characters")
	if err := f.err(); err != nil {
		return err
	}
	ctx := c.Request.Context()
	if principal(c).UserID == u.ID {
		// Someone holding a signed-in browser or a key must not lock the owner out silently.
		has, err := s.store.HasPassword(ctx, u.ID)
		if err != nil {
			return err
		}
		if has {
			if _, err := s.store.CheckPassword(ctx, u.Email, req.CurrentPassword); err != nil {
				if errors.Is(err, store.ErrBadPassword) {
					return invalid("current_password", "is not your current password")
				}
				return err
			}
		}
	}
	if err := s.store.SetPassword(ctx, u, req.NewPassword); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// demoUsers sign in to the web console; the finance user exists only for the console.
var demoUsers = []struct {
	email string
	role  authn.Role
}{
	{"operator@localhost", authn.RoleOperator},
	{"admin@demo.localhost", authn.RoleTenantAdmin},
	{"finance@localhost", authn.RoleFinance},
}

// ensureDemoPasswords gives the demo users random console passwords on first run and records
// them (mode 0600) so later runs print them again.
func ensureDemoPasswords(ctx context.Context, st *store.Store, path string) (map[string]string, error) {
	return firstRun(path, func() (map[string]string, error) {
		pws := map[string]string{}
		ctx := authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"})
		for _, d := range demoUsers {
			var u store.User
			err := st.ORM.WithContext(ctx).Where("email = ?", d.email).First(&u).Error
			if errors.Is(err, gorm.ErrRecordNotFound) && d.role == authn.RoleFinance {
				u = store.User{Email: d.email, Role: string(d.role)}
				err = st.CreateUser(ctx, &u)
			}
			if err != nil {
				return nil, fmt.Errorf("demo user %s: %w", d.email, err)
			}
			var b [12]byte
			if _, err := rand.Read(b[:]); err != nil {
				return nil, fmt.Errorf("demo password: %w", err)
			}
			pw := base64.RawURLEncoding.EncodeToString(b[:])
			if err := st.SetPassword(ctx, u, pw); err != nil {
				return nil, err
			}
			pws[d.email] = pw
		}
		return pws, nil
	})
}

// printPasswords lists the console's sign-ins in the local stack's banner.
func printPasswords(apiURL string, pws map[string]string) {
	fmt.Printf("  web console: %s/  (passwords are kept in %s/demo-passwords.json)\n", apiURL, dataDir())
	for _, d := range demoUsers {
		if pw, ok := pws[d.email]; ok {
			fmt.Printf("    %-22s %-13s password: %s\n", d.email, d.role, pw)
		}
	}
}

// ensureFinanceKey gives the demo finance user an API key on first run (kept in path, mode 0600),
// so billing's reports can be tried from gpuctl and curl, not only the console.
func ensureFinanceKey(ctx context.Context, st *store.Store, path string) (string, error) {
	return firstRun(path, func() (string, error) {
		var u store.User
		if err := st.ORM.WithContext(ctx).Where("email = ?", "finance@localhost").First(&u).Error; err != nil {
			return "", fmt.Errorf("demo finance user: %w", err)
		}
		_, secret, err := st.CreateAPIKey(authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"}), u, "local stack")
		if err != nil {
			return "", fmt.Errorf("demo finance key: %w", err)
		}
		return secret, nil
	})
}

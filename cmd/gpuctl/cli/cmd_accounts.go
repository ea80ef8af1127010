package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

var tenantCols = []column[sdk.Tenant]{
	col("ID", func(t sdk.Tenant) string { return t.ID }),
	col("NAME", func(t sdk.Tenant) string { return t.Name }),
	col("INSTANCES", func(t sdk.Tenant) string { return fmt.Sprintf("%d/%d", t.UsedInstances, t.QuotaInstances) }),
	col("GPUS", func(t sdk.Tenant) string { return fmt.Sprintf("%d/%d", t.UsedGPUs, t.QuotaGPUs) }),
	col("GPU MEMORY", func(t sdk.Tenant) string { return gib(t.UsedGPUMemoryBytes) + "/" + gib(t.QuotaGPUMemoryBytes) }),
}

func (a *app) meCmd() *cobra.Command {
	return &cobra.Command{Use: "whoami", Aliases: []string{"me"}, Short: "Show who the API key belongs to", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, c *sdk.Client, _ []string) error {
			me, err := c.Me(cmd.Context())
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, me, []column[sdk.Me]{
				col("ROLE", func(m sdk.Me) string { return m.Role }), col("USER", func(m sdk.Me) string { return dash(m.UserID) }),
				col("TENANT", func(m sdk.Me) string { return dash(m.TenantID) })})
		})}
}

func (a *app) tenantsCmd() *cobra.Command {
	c := &cobra.Command{Use: "tenants", Aliases: []string{"tenant"}, Short: "Tenants (operator)"}
	c.AddCommand(listCmd(a, "List tenants", collected((*sdk.Client).Tenants), tenantCols))
	c.AddCommand(oneCmd(a, "get TENANT_ID", "Show a tenant with its quotas and usage", "a tenant id", (*sdk.Client).GetTenant, tenantCols))
	var req sdk.CreateTenantRequest
	create := oneCmd(a, "create NAME", "Create a tenant", "a tenant name", func(cl *sdk.Client, ctx context.Context, arg string) (sdk.Tenant, error) {
		req.Name = arg
		return cl.CreateTenant(ctx, req)
	}, tenantCols)
	create.Flags().IntVar(&req.QuotaInstances, "quota-instances", 0, "instance quota")
	create.Flags().IntVar(&req.QuotaGPUs, "quota-gpus", 0, "GPU quota")
	create.Flags().Int64Var(&req.QuotaGPUMemoryBytes, "quota-gpu-memory-bytes", 0, "GPU memory quota in bytes")
	c.AddCommand(create)
	return c
}

func (a *app) quotaCmd() *cobra.Command {
	c := &cobra.Command{Use: "quota", Aliases: []string{"quotas"}, Short: "A tenant's quotas and usage"}
	c.AddCommand(oneCmd(a, "get TENANT_ID", "Show quotas and what is used", "a tenant id", (*sdk.Client).GetTenant, tenantCols))
	var q sdk.Quota
	set := &cobra.Command{Use: "set TENANT_ID", Short: "Replace a tenant's quotas (operator)", Args: exactArgs(1, "a tenant id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			t, err := cl.SetQuota(cmd.Context(), args[0], q)
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, t, tenantCols)
		})}
	set.Flags().IntVar(&q.Instances, "instances", 0, "instances")
	set.Flags().IntVar(&q.GPUs, "gpus", 0, "GPUs")
	set.Flags().Int64Var(&q.GPUMemoryBytes, "gpu-memory-bytes", 0, "GPU memory in bytes")
	for _, f := range []string{"instances", "gpus", "gpu-memory-bytes"} {
		_ = set.MarkFlagRequired(f)
	}
	c.AddCommand(set)
	return c
}

var userCols = []column[sdk.User]{
	col("ID", func(u sdk.User) string { return u.ID }), col("EMAIL", func(u sdk.User) string { return u.Email }),
	col("ROLE", func(u sdk.User) string { return u.Role }), col("TENANT", func(u sdk.User) string { return dash(u.TenantID) }),
}

func (a *app) usersCmd() *cobra.Command {
	c := &cobra.Command{Use: "users", Aliases: []string{"user"}, Short: "Users"}
	var tenant string
	list := &cobra.Command{Use: "list", Short: "List users", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			us, err := sdk.Collect(cl.Users(cmd.Context(), tenant))
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, us, userCols)
		})}
	list.Flags().StringVar(&tenant, "tenant", "", "only this tenant's users (operators)")
	c.AddCommand(list)
	c.AddCommand(oneCmd(a, "get USER_ID", "Show a user", "a user id", (*sdk.Client).GetUser, userCols))
	var req sdk.CreateUserRequest
	create := oneCmd(a, "create EMAIL", "Invite a user", "an e-mail address", func(cl *sdk.Client, ctx context.Context, arg string) (sdk.User, error) {
		req.Email = arg
		return cl.CreateUser(ctx, req)
	}, userCols)
	create.Flags().StringVar(&req.Role, "role", sdk.RoleTenantMember, "tenant-admin, tenant-member, operator or finance")
	create.Flags().StringVar(&req.TenantID, "tenant", "", "tenant id (tenant roles)")
	c.AddCommand(create)
	return c
}

var keyCols = []column[sdk.APIKey]{
	col("ID", func(k sdk.APIKey) string { return k.ID }), col("NAME", func(k sdk.APIKey) string { return dash(k.Name) }),
	col("PREFIX", func(k sdk.APIKey) string { return k.Prefix }), col("LAST USED", func(k sdk.APIKey) string { return ago(k.LastUsedAt) }),
	col("REVOKED", func(k sdk.APIKey) string { return yesno(k.RevokedAt != nil) }),
}

func (a *app) keysCmd() *cobra.Command {
	c := &cobra.Command{Use: "keys", Aliases: []string{"api-keys"}, Short: "API keys of users"}
	c.AddCommand(&cobra.Command{Use: "list USER_ID", Short: "List a user's keys", Args: exactArgs(1, "a user id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			ks, err := sdk.Collect(cl.APIKeys(cmd.Context(), args[0]))
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, ks, keyCols)
		})})
	var name string
	create := &cobra.Command{Use: "create USER_ID", Short: "Create a key; the secret is printed once", Args: exactArgs(1, "a user id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			k, err := cl.CreateAPIKey(cmd.Context(), args[0], name)
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, k, []column[sdk.NewAPIKey]{
				col("ID", func(k sdk.NewAPIKey) string { return k.ID }), col("NAME", func(k sdk.NewAPIKey) string { return dash(k.Name) }),
				col("SECRET (SHOWN ONCE)", func(k sdk.NewAPIKey) string { return k.Secret })})
		})}
	create.Flags().StringVar(&name, "name", "", "a name to recognise the key by")
	c.AddCommand(create)
	c.AddCommand(&cobra.Command{Use: "revoke KEY_ID", Short: "Revoke a key", Args: exactArgs(1, "a key id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := cl.RevokeAPIKey(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Out, "key %s revoked\n", args[0])
			return nil
		})})
	return c
}

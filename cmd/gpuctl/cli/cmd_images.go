package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

var imageCols = []column[sdk.Image]{
	col("ID", func(m sdk.Image) string { return m.ID }), col("NAME", func(m sdk.Image) string { return m.Name }),
	col("MIN DISK", func(m sdk.Image) string { return itoa(m.MinDiskGiB) + "GiB" }),
	col("GUEST LIBRARIES", func(m sdk.Image) string { return yesno(m.GuestLibraries) }),
	col("SHA256", func(m sdk.Image) string { return m.SHA256[:min(12, len(m.SHA256))] }),
}

func (a *app) imagesCmd() *cobra.Command {
	c := &cobra.Command{Use: "images", Short: "Images instances boot from"}
	c.AddCommand(listCmd(a, "List images", (*sdk.Client).ListImages, imageCols))
	c.AddCommand(oneCmd(a, "get IMAGE_ID", "Show an image", "an image id", (*sdk.Client).GetImage, imageCols))
	var req sdk.CreateImageRequest
	create := oneCmd(a, "create NAME", "Register an image (operator)", "an image name", func(cl *sdk.Client, ctx context.Context, arg string) (sdk.Image, error) {
		req.Name = arg
		return cl.CreateImage(ctx, req)
	}, imageCols)
	create.Flags().StringVar(&req.Source, "source", "", "file:///path on the hosts or an http(s):// URL")
	create.Flags().StringVar(&req.SHA256, "sha256", "", "SHA-256 of the image's bytes (sha256sum)")
	create.Flags().IntVar(&req.MinDiskGiB, "min-disk-gib", 1, "smallest disk the image needs, GiB")
	create.Flags().BoolVar(&req.GuestLibraries, "guest-libraries", false, "the image carries gpucloud's guest libraries")
	create.Flags().StringVar(&req.Description, "description", "", "free text")
	_ = create.MarkFlagRequired("source")
	_ = create.MarkFlagRequired("sha256")
	c.AddCommand(create)
	c.AddCommand(&cobra.Command{Use: "delete IMAGE_ID", Short: "Retire an image (operator)", Args: exactArgs(1, "an image id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := cl.DeleteImage(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Out, "image %s retired\n", args[0])
			return nil
		})})
	return c
}

var sshKeyCols = []column[sdk.SSHKey]{
	col("ID", func(k sdk.SSHKey) string { return k.ID }), col("NAME", func(k sdk.SSHKey) string { return k.Name }),
	col("FINGERPRINT", func(k sdk.SSHKey) string { return k.Fingerprint }),
}

func (a *app) sshKeysCmd() *cobra.Command {
	c := &cobra.Command{Use: "ssh-keys", Short: "Your SSH public keys, for VMs"}
	c.AddCommand(listCmd(a, "List your SSH keys", (*sdk.Client).ListSSHKeys, sshKeyCols))
	c.AddCommand(oneCmd(a, "get KEY_ID", "Show an SSH key", "an SSH key id", (*sdk.Client).GetSSHKey, sshKeyCols))
	var file string
	add := &cobra.Command{Use: "add NAME", Short: "Add an SSH public key", Args: exactArgs(1, "a key name"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			b, err := os.ReadFile(file)
			if err != nil {
				return usagef(fmt.Errorf("--public-key-file: %w", err))
			}
			k, err := cl.CreateSSHKey(cmd.Context(), sdk.CreateSSHKeyRequest{Name: args[0], PublicKey: string(b)})
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, k, sshKeyCols)
		})}
	add.Flags().StringVar(&file, "public-key-file", "", "the public key, e.g. ~/.ssh/id_ed25519.pub")
	_ = add.MarkFlagRequired("public-key-file")
	c.AddCommand(add)
	c.AddCommand(&cobra.Command{Use: "delete KEY_ID", Short: "Delete an SSH key (VMs keep it)", Args: exactArgs(1, "an SSH key id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := cl.DeleteSSHKey(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Out, "SSH key %s deleted\n", args[0])
			return nil
		})})
	return c
}

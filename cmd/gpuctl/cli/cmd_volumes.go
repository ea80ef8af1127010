package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

var volumeCols = []column[sdk.Volume]{
	col("ID", func(v sdk.Volume) string { return v.ID }), col("NAME", func(v sdk.Volume) string { return v.Name }),
	col("SIZE", func(v sdk.Volume) string { return itoa(v.SizeGiB) + "GiB" }), col("STATE", func(v sdk.Volume) string { return v.State }),
	col("INSTANCE", func(v sdk.Volume) string { return v.InstanceID }), col("DEVICE", func(v sdk.Volume) string { return v.Device }),
}

func (a *app) volumesCmd() *cobra.Command {
	c := &cobra.Command{Use: "volumes", Short: "Disks that outlive instances"}
	c.AddCommand(listCmd(a, "List your tenant's volumes", (*sdk.Client).ListVolumes, volumeCols))
	c.AddCommand(oneCmd(a, "get VOLUME_ID", "Show a volume", "a volume id", (*sdk.Client).GetVolume, volumeCols))
	var size int
	create := oneCmd(a, "create NAME", "Create a volume (billed per GiB-hour while it exists)", "a volume name", func(cl *sdk.Client, ctx context.Context, arg string) (sdk.Volume, error) {
		return cl.CreateVolume(ctx, sdk.CreateVolumeRequest{Name: arg, SizeGiB: size})
	}, volumeCols)
	create.Flags().IntVar(&size, "size-gib", 0, "size in GiB (1-16384)")
	_ = create.MarkFlagRequired("size-gib")
	c.AddCommand(create)
	var instance string
	attach := oneCmd(a, "attach VOLUME_ID", "Attach a volume to an instance (hotplugged where it runs, else at its next start)", "a volume id",
		func(cl *sdk.Client, ctx context.Context, arg string) (sdk.Volume, error) {
			id, err := instanceID(ctx, cl, instance)
			if err != nil {
				return sdk.Volume{}, err
			}
			return cl.AttachVolume(ctx, arg, id)
		}, volumeCols)
	attach.Flags().StringVar(&instance, "instance", "", "the instance's id or name")
	_ = attach.MarkFlagRequired("instance")
	c.AddCommand(attach)
	c.AddCommand(oneCmd(a, "detach VOLUME_ID", "Detach a volume; its data stays", "a volume id", (*sdk.Client).DetachVolume, volumeCols))
	c.AddCommand(&cobra.Command{Use: "delete VOLUME_ID", Short: "Delete a detached volume and its data", Args: exactArgs(1, "a volume id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := cl.DeleteVolume(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Out, "volume %s deleted\n", args[0])
			return nil
		})})
	return c
}

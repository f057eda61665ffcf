package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/redeq"
)

func upgradeFormatCmd(o *opts) *cobra.Command {
	return &cobra.Command{
		Use:   "upgrade-format",
		Short: "Switch the namespace to the current job state format, once no client of an older version runs",
		Long: `Switch the prefix's namespace to the current format of the job state
(Client.UpgradeFormat): the clients write it from their next announcement
on. It refuses, naming them and changing nothing, while a running client
cannot read that format: stop every client of the older version first.
After it, never start a client of the older version again.`,
		Args: args(cobra.NoArgs),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
			if err := c.UpgradeFormat(ctx); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "the namespace writes the current job state format")
			return nil
		}),
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/redeq"
)

func dashboardCmd(o *opts) *cobra.Command {
	var addr, path string
	var opt dashboard.Options
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard until interrupted",
		Long: `Serve the web dashboard until interrupted.

It listens on the loopback address by default. A token (--token, or the
variable REDEQ_DASHBOARD_TOKEN) is then asked of every visitor: open
http://ADDR/?token=TOKEN once. --read-only refuses every action.`,
		Args: args(cobra.NoArgs),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
			if opt.Token == "" {
				opt.Token = os.Getenv("REDEQ_DASHBOARD_TOKEN")
			}
			if opt.Password == "" {
				opt.Password = os.Getenv("REDEQ_DASHBOARD_PASSWORD")
			}
			if opt.Username != "" && opt.Password == "" {
				return usagef("--username needs a password: --password or $REDEQ_DASHBOARD_PASSWORD")
			}
			if opt.PageSize < 1 || opt.PageSize > dashboard.MaxPageSize {
				return usagef("--page-size %d: want 1 to %d", opt.PageSize, dashboard.MaxPageSize)
			}
			opt.Path = path
			opt.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			if opt.Token == "" && opt.Username == "" && !opt.ReadOnly {
				where := "anyone on this machine"
				if !loopback(ln.Addr()) {
					where = "anyone who reaches " + ln.Addr().String()
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the dashboard is writable with no --token or --username: %s can requeue, delete and purge jobs (add --read-only to only look)\n", where)
			}
			return serve(ctx, cmd, ln, dashboard.New(c, opt), path)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on")
	f.StringVar(&path, "path", "", "path to serve under, such as /redeq")
	f.StringVar(&opt.Token, "token", "", "token every visitor must give (default $REDEQ_DASHBOARD_TOKEN)")
	f.StringVar(&opt.Username, "username", "", "user name every visitor must give by HTTP Basic authentication")
	f.StringVar(&opt.Password, "password", "", "password for --username (default $REDEQ_DASHBOARD_PASSWORD)")
	f.BoolVar(&opt.ReadOnly, "read-only", false, "refuse every action")
	f.IntVar(&opt.PageSize, "page-size", dashboard.DefaultPageSize, "jobs per topic page, 1..100")
	return cmd
}

func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// serve runs h on ln until ctx ends, then shuts the server down.
func serve(ctx context.Context, cmd *cobra.Command, ln net.Listener, h http.Handler, path string) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(cmd.OutOrStdout(), "dashboard on http://%s%s/\n", ln.Addr(), path)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

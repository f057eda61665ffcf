package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestPurgeSparesJobsThatDiedAfterTheConfirmation: the purge removes the
// dead jobs its confirmation named, not a job of a named id that died
// again after the page was shown: one deleted and added again, or one
// requeued, stays dead.
func TestPurgeSparesJobsThatDiedAfterTheConfirmation(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		for _, how := range []string{"readded", "requeued"} {
			t.Run(b.Name+"/"+how, func(t *testing.T) {
				e := setup(t, b, dashboard.Options{})
				ctx := context.Background()
				add(t, e.c, "orders", "d1", "x", 0)
				add(t, e.c, "orders", "d2", "x", 0)
				work(t, b, e.c, "d1", "d2")
				tok := e.csrf(t, "/topic?t=orders&state=dead")
				code, page := e.postTo(t, "/purge", url.Values{"csrf": {tok}, "t": {"orders"}})
				require.Equal(t, http.StatusOK, code, page)
				form := url.Values{"csrf": {tok}, "t": {"orders"}, "confirm": {"1"}}
				for _, m := range hiddenIDRE.FindAllStringSubmatch(page, -1) {
					form.Add("id", m[1])
				}
				require.ElementsMatch(t, []string{"d1", "d2"}, form["id"])

				// d1 dies again while the page is open.
				if how == "readded" {
					_, err := e.c.Delete(ctx, "orders", "d1")
					require.NoError(t, err)
					time.Sleep(5 * time.Millisecond)
					add(t, e.c, "orders", "d1", "x", 0)
				} else {
					require.NoError(t, e.c.RequeueDead(ctx, "orders", "d1", 0))
				}
				work(t, b, e.c, "d1")

				code, _ = e.postTo(t, "/purge", form)
				require.Equal(t, http.StatusSeeOther, code)
				require.Equal(t, redeq.State("gone"), state(t, e.c, "d2"), "d2 was named")
				require.Equal(t, redeq.StateDead, state(t, e.c, "d1"), "d1 died again after the confirmation (%s): it stays", how)
			})
		}
	}
}

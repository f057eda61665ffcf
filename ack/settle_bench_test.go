package ack

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// BenchmarkSettleAcks settles batches of 256 acks on a real server, with
// retention of acked jobs off and on: what retention adds to a settle.
// The seeding of each batch (256 held deliveries) is not timed.
func BenchmarkSettleAcks(b *testing.B) {
	for _, be := range testutil.RealBackends(b) {
		if be.Name != "redis" {
			continue
		}
		for _, keep := range []Retention{{}, {For: time.Hour, Max: 10_000}} {
			name := "RetentionOff"
			if keep.For > 0 {
				name = "RetentionOn"
			}
			b.Run(name, func(b *testing.B) {
				c := be.New(b)
				ctx := context.Background()
				prefix := testutil.Prefix(b)
				k := keys.ForBucket(prefix, "t", 0)
				s := NewSettler(c, prefix, "c", 10_000)
				outs := make([]Outcome, MaxSettle)
				env := "1|1|0|0|||\n" + string(make([]byte, 200))
				b.ResetTimer()
				for i := range b.N {
					b.StopTimer()
					pipe := c.Pipeline()
					for j := range outs {
						id := fmt.Sprintf("j%d-%d", i, j)
						outs[j] = Outcome{ID: id, Token: "7", Op: OpAck}
						pipe.HSet(ctx, k.Pool(), id, env)
						pipe.ZAdd(ctx, k.InFlight("c"), redis.Z{Score: 1, Member: "7:" + id})
						pipe.HSet(ctx, k.State(), id, "7@c")
					}
					if _, err := pipe.Exec(ctx); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if _, err := s.SettleKept(ctx, "t", 0, keep, outs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*MaxSettle), "ns/ack")
			})
		}
	}
}

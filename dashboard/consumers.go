package dashboard

import (
	"fmt"
	"net/http"
	"time"

	"github.com/redeq-go/redeq/redeq"
)

// consumersData is the consumers page: every consumer that heartbeats,
// as Client.Consumers reads it.
type consumersData struct {
	Consumers []redeq.ConsumerInfo
	Silent    int
	InFlight  int64
}

func (h *handler) consumers(w http.ResponseWriter, r *http.Request) {
	cs, err := h.c.Consumers(r.Context())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	d := consumersData{Consumers: cs}
	for _, c := range cs {
		if c.Silent {
			d.Silent++
		}
		d.InFlight += c.InFlight
	}
	h.render(w, r, http.StatusOK, "consumers.html", "Consumers", d)
}

// uptime is how long c has run, by the Redis clock as Consumers read it;
// 0 when it recorded no start.
func uptime(c redeq.ConsumerInfo) time.Duration {
	if c.Started.IsZero() {
		return 0
	}
	return c.HeartbeatAge + c.LastHeartbeat.Sub(c.Started)
}

// redisData is the Redis page.
type redisData struct {
	Prefix string
	Info   redeq.RedisInfo
	Budget int
}

func (h *handler) redis(w http.ResponseWriter, r *http.Request) {
	info, err := h.c.RedisInfo(r.Context())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "redis.html", "Redis", redisData{Prefix: h.c.Config().Prefix, Info: info, Budget: redeq.RedisScanBudget})
}

// bytesIEC is n bytes in KiB, MiB, GiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

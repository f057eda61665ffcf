package redeqtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/redeq"
	"github.com/redeq-go/redeq/redeqtest"
)

// The service below is written the way the README says: typed payloads
// bound to their topics, typed listeners, a retry schedule with an alert
// on the final failure, a reminder moved with Put. Its test follows.

type closeOrder struct {
	OrderID string `json:"order_id"`
}

func (closeOrder) Topic() string { return "order.close" }

type notifyPartner struct {
	OrderID string `json:"order_id"`
}

func (notifyPartner) Topic() string { return "partner.notify" }

type remindMeeting struct {
	Meeting string `json:"meeting"`
}

func (remindMeeting) Topic() string { return "meeting.remind" }

type orderService struct {
	jobs *redeq.Client

	mu       sync.Mutex
	closed   []string
	reminded []string
	alerts   []string
	partner  func(orderID string) error // the partner's webhook
}

func newOrderService(c *redeq.Client, partner func(string) error) *orderService {
	return &orderService{jobs: c, partner: partner}
}

func (s *orderService) listeners() []redeq.Listener {
	return []redeq.Listener{
		redeq.TypedFor(func(ctx context.Context, o closeOrder) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.closed = append(s.closed, o.OrderID)
			return nil
		}),
		redeq.TypedFor(func(ctx context.Context, n notifyPartner) error {
			return s.partner(n.OrderID)
		}, redeq.WithRetry(5, time.Minute, 5*time.Minute, 10*time.Minute, 30*time.Minute, time.Hour),
			redeq.WithTypedFinalRetry(func(ctx context.Context, n notifyPartner, lastErr error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.alerts = append(s.alerts, n.OrderID+": "+lastErr.Error())
			})),
		redeq.TypedFor(func(ctx context.Context, m remindMeeting) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.reminded = append(s.reminded, m.Meeting)
			return nil
		}),
	}
}

// placeOrder closes the order in 30 minutes unless it is paid, and tells
// the partner now.
func (s *orderService) placeOrder(ctx context.Context, id string) error {
	if _, err := redeq.AddFor(ctx, s.jobs, id, closeOrder{id}, 30*time.Minute); err != nil {
		return err
	}
	_, err := redeq.AddFor(ctx, s.jobs, id, notifyPartner{id}, 0)
	return err
}

func (s *orderService) pay(ctx context.Context, id string) error {
	_, err := s.jobs.Delete(ctx, closeOrder{}.Topic(), id)
	return err
}

// scheduleMeeting reminds 10 minutes before the meeting, wherever it moves.
func (s *orderService) scheduleMeeting(ctx context.Context, id string, at time.Time) error {
	_, err := redeq.PutFor(ctx, s.jobs, id, remindMeeting{id}, 0, redeq.RunAt(at.Add(-10*time.Minute)))
	return err
}

func (s *orderService) snapshot() (closed, reminded, alerts []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.closed...), append([]string(nil), s.reminded...), append([]string(nil), s.alerts...)
}

// TestOrderService: the unpaid order closes after 30 minutes and the
// paid one never; the partner's webhook is retried 1m, 5m, 10m, 30m and
// 1h after each failure, and the alert fires once, after the last; the
// reminder follows its meeting when it moves.
func TestOrderService(t *testing.T) {
	env := redeqtest.New(t)
	var mu sync.Mutex
	calls := map[string][]time.Duration{} // order -> when the partner was called, from the start
	start := env.Now()
	svc := newOrderService(env.Client(), func(id string) error {
		mu.Lock()
		defer mu.Unlock()
		calls[id] = append(calls[id], env.Now().Sub(start))
		return errors.New("503")
	})
	env.Start(svc.listeners()...)
	ctx := context.Background()
	topics := []string{"order.close", "partner.notify", "meeting.remind"}

	require.NoError(t, svc.placeOrder(ctx, "41"))
	require.NoError(t, svc.placeOrder(ctx, "42"))
	require.NoError(t, svc.pay(ctx, "41"))
	env.RequireNotAdded("order.close", "41")
	require.True(t, start.Add(30*time.Minute).Equal(env.RequireAdded("order.close", "42").RunAt))

	require.NoError(t, svc.scheduleMeeting(ctx, "standup", start.Add(time.Hour)))
	require.NoError(t, svc.scheduleMeeting(ctx, "standup", start.Add(3*time.Hour))) // moved
	require.Len(t, env.Jobs("meeting.remind"), 1)

	for _, d := range []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute} {
		env.WaitIdle(topics...)
		env.Advance(d)
	}
	env.WaitIdle(topics...)
	closed, reminded, alerts := svc.snapshot()
	require.Empty(t, closed, "16 minutes in: not closed yet")
	env.Advance(30 * time.Minute)
	env.WaitIdle(topics...)
	closed, reminded, _ = svc.snapshot()
	require.Equal(t, []string{"42"}, closed, "closed once its 30 minutes passed; the paid one never")
	require.Empty(t, reminded, "the meeting moved: no reminder at 50 minutes")
	env.Advance(time.Hour)
	env.WaitIdle(topics...)
	env.Advance(2 * time.Hour)
	env.WaitIdle(topics...)

	closed, reminded, alerts = svc.snapshot()
	require.Equal(t, []string{"42"}, closed)
	require.Equal(t, []string{"standup"}, reminded, "reminded once, for the moved meeting")
	require.ElementsMatch(t, []string{"41: 503", "42: 503"}, alerts, "one alert per order, after its last retry")
	mu.Lock()
	defer mu.Unlock()
	m := time.Minute
	want := []time.Duration{0, 1 * m, 6 * m, 16 * m, 46 * m, 106 * m}
	require.Equal(t, want, calls["41"], "a failure, then retries 1m, 5m, 10m, 30m, 1h after each")
	require.Equal(t, want, calls["42"])
	env.RequireAdded("partner.notify", "42") // dead, kept with its id
}

// OrderService is the service of the README's section "Testing your
// service": it closes an unpaid order 30 minutes after it is placed.
type OrderService struct {
	jobs   *redeq.Client
	closed chan string
}

func NewOrderService(c *redeq.Client) *OrderService {
	return &OrderService{jobs: c, closed: make(chan string, 1)}
}

func (s *OrderService) Listeners() []redeq.Listener {
	return []redeq.Listener{redeq.TypedFor(func(ctx context.Context, o closeOrder) error {
		s.closed <- o.OrderID
		return nil
	})}
}

func (s *OrderService) PlaceOrder(ctx context.Context, id string) {
	if _, err := redeq.AddFor(ctx, s.jobs, id, closeOrder{id}, 30*time.Minute); err != nil {
		panic(err)
	}
}

// TestUnpaidOrderCloses is the README's snippet as written: the unpaid
// order's job waits 30 minutes, then runs and is gone.
func TestUnpaidOrderCloses(t *testing.T) {
	ctx := context.Background()
	env := redeqtest.New(t)              // closed by t.Cleanup
	svc := NewOrderService(env.Client()) // your service, on the Env's client
	env.Start(svc.Listeners()...)        // Register and Start, as main does
	svc.PlaceOrder(ctx, "42")            // adds order.close 42, due in 30m

	env.RequireAdded("order.close", "42") // the job, with State, RunAt, Body
	env.Advance(30 * time.Minute)         // what falls due runs now
	env.WaitIdle("order.close")           // its handler ran, its outcome applied
	env.RequireNotAdded("order.close", "42")
	require.Equal(t, "42", <-svc.closed)
}

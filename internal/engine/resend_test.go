package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/stretchr/testify/assert"
)

var (
	errMoved    = errors.New("moved")
	errRefused  = errors.New("refused for now")
	errNotSent  = pubconn.ErrNotSent
	errNoRoute  = errors.New("no route")
	errFinished = errors.New("ran, and failed")
)

// testRedirects redirects errMoved to a connection of its own per node,
// takes errRefused as a refusal for now and reroutes to reroute (none
// when nil).
type testRedirects struct {
	pubs    map[string]*pubconn.Pub
	reroute *pubconn.Pub
	closing bool
}

func (r *testRedirects) Redirection(err error) (string, bool, bool) {
	return "node:1", true, errors.Is(err, errMoved)
}

func (r *testRedirects) PubFor(addr string, _ *pubconn.Pub) *pubconn.Pub {
	if r.closing {
		return nil
	}
	if r.pubs[addr] == nil {
		r.pubs[addr] = pubconn.New(subconn.Dialer{Addr: addr}, pubconn.Timeouts{})
	}
	return r.pubs[addr]
}

func (r *testRedirects) RefusedForNow(err error) bool { return errors.Is(err, errRefused) }

func (r *testRedirects) Reroute() (*pubconn.Pub, error) {
	if r.reroute == nil {
		return nil, errNoRoute
	}
	return r.reroute, nil
}

// TestResend: redirections are followed (ASKING as the redirection
// says) at most MaxRedirects times in a row, commands that did not leave
// or were refused for now are resent at most MaxResends times to the
// reroute, and an error of a command that may have run is returned as
// it is, never resent.
func TestResend(t *testing.T) {
	ctx := context.Background()
	c := NewCore(CoreConfig{Options: shardcast.Options{}.WithDefaults(),
		Conn: shardcast.ConnOptions{ReconnectMin: time.Millisecond, ReconnectMax: time.Millisecond}.WithDefaults()})
	defer c.Close(func() {})
	home := pubconn.New(subconn.Dialer{Addr: "home:1"}, pubconn.Timeouts{})

	cases := []struct {
		name         string
		first        error
		replies      []error
		reroute      *pubconn.Pub
		want         error
		sends, asked int
	}{
		{"redirected, then done", errMoved, []error{nil}, home, nil, 1, 1},
		{"redirected past the limit", errMoved, []error{errMoved}, home, errMoved, MaxRedirects, MaxRedirects},
		{"not sent, then done", errNotSent, []error{errNotSent, nil}, home, nil, 2, 0},
		{"refused for now past the limit", errRefused, []error{errRefused}, home, errRefused, MaxResends, 0},
		{"no route at all", errNotSent, nil, nil, errNoRoute, 0, 0},
		{"ran, and failed", errFinished, nil, home, errFinished, 0, 0},
		{"resent, then ran and failed", errNotSent, []error{errFinished}, home, errFinished, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &testRedirects{pubs: map[string]*pubconn.Pub{}, reroute: tc.reroute}
			sends, asked := 0, 0
			err := c.Resend(ctx, r, nil, tc.first, func(_ context.Context, pub *pubconn.Pub, asking bool) error {
				sends++
				if asking {
					asked++
					assert.Equal(t, "node:1", pub.Addr())
				} else {
					assert.Same(t, tc.reroute, pub)
				}
				reply := tc.replies[min(sends, len(tc.replies))-1]
				return reply
			})
			assert.ErrorIs(t, err, tc.want)
			if tc.want == nil {
				assert.NoError(t, err)
			}
			assert.Equal(t, tc.sends, sends, "sends")
			assert.Equal(t, tc.asked, asked, "sends after ASK")
		})
	}

	r := &testRedirects{pubs: map[string]*pubconn.Pub{}, closing: true}
	err := c.Resend(ctx, r, home, errMoved, func(context.Context, *pubconn.Pub, bool) error {
		t.Error("sent while closing")
		return nil
	})
	assert.ErrorIs(t, err, errMoved, "closing: the redirection's error")
}

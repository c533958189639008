package centrifugebroker

import (
	"context"
	"time"
)

// mapSweepPerRun bounds the expired entries one sweeper script removes;
// a channel with more gets further scripts in the same round.
const mapSweepPerRun = 1000

// expirySweeper removes, every interval, the expired entries of the map
// channels its MapBroker's node is subscribed to, so that their removal
// reaches subscribers although nobody writes or reads the channel. It is
// owned by the MapBroker, whose Close stops it.
type expirySweeper struct {
	m        *MapBroker
	interval time.Duration
	quit     chan struct{}
	done     chan struct{}
	errLog   logLimit
}

func startExpirySweeper(m *MapBroker, interval time.Duration) *expirySweeper {
	s := &expirySweeper{m: m, interval: interval, quit: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *expirySweeper) run() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.round()
		}
	}
}

// round sweeps each subscribed channel whose entries expire.
func (s *expirySweeper) round() {
	for _, ch := range s.m.subscribedChannels() {
		o, err := s.m.channelOptions(ch)
		if err != nil || !o.Mode.HasExpiry() {
			continue
		}
		for {
			select {
			case <-s.quit:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.m.b.callTimeout)
			_, swept, err := s.m.sweep(ctx, ch, mapSweepPerRun)
			cancel()
			if err != nil {
				if s.errLog.allow() {
					s.m.b.log.Warn("centrifugebroker: removing expired map entries failed; retried next round", "channel", ch, "err", err)
				}
				break
			}
			if swept < mapSweepPerRun {
				break
			}
		}
	}
}

func (s *expirySweeper) stop() {
	close(s.quit)
	<-s.done
}

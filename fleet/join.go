package fleet

import (
	"context"
	"time"
)

// Delays of the join loop.
const (
	// joinRetryMin and joinRetryMax bound the backoff between join
	// attempts that reach no other member.
	joinRetryMin = 500 * time.Millisecond
	joinRetryMax = 30 * time.Second
	// aloneCheck is how often a joined agent checks that it still has
	// company, besides being woken when the last other member goes.
	aloneCheck = 30 * time.Second
)

// joinLoop joins the configured members whenever this agent knows no
// other live member: at start (the agents of a DaemonSet start in any
// order, so the first finds nobody) and after every other member has
// gone. It backs off exponentially between attempts and returns when ctx
// ends.
func (f *Fleet) joinLoop(ctx context.Context) {
	delay := joinRetryMin
	for ctx.Err() == nil {
		if f.others() > 0 {
			f.markJoined()
			delay = aloneCheck
		} else {
			n, err := f.ml.Join(f.join) // a listed own address answers too
			if others := f.others(); others > 0 {
				f.log.Info("joined the fleet", "contacted", n, "members", others+1)
				f.markJoined()
				delay = aloneCheck
			} else {
				attempt := f.joinAttempts.Add(1)
				lvl := f.log.Debug
				if attempt == 1 || attempt%10 == 0 {
					lvl = f.log.Info
				}
				lvl("no other fleet member answered; retrying", "join", f.join, "attempt", attempt,
					"retry_in", delay.String(), "err", err)
				delay = min(2*delay, joinRetryMax)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-f.alone:
			delay = joinRetryMin
		}
		t.Stop()
	}
}

// others counts the live members other than this agent.
func (f *Fleet) others() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.othersLocked()
}

// markJoined closes Joined's channel, once.
func (f *Fleet) markJoined() { f.joinOnce.Do(func() { close(f.joined) }) }
